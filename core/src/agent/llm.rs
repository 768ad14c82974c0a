//! The LLM processing layer (§5, §13.3): the prompt layers, calls, validating answers,
//! retries and fallback.

use serde_json::{json, Map, Value};

use super::negotiate::Turn;
use super::permissions::Tier;
use super::thread::{LlmPending, Thread, Waiting};
use super::*;

use crate::negotiator::{self, Decision};
use crate::packet::Body;

impl Agent {
    pub(super) fn on_llm_result(&mut self, request_id: u64, result: Result<String, String>) {
        let Some(id) = self.thread_where(
            |t| {
                t.llm
                    .as_ref()
                    .is_some_and(|l| l.request_id == request_id && l.retry_at.is_none())
            },
            format!("LLM answer {request_id} ignored: not waited for"),
        ) else {
            return;
        };
        self.in_thread(&id, |step| step.on_llm_result(result));
    }
}

impl ThreadStep<'_> {
    /// The model's answer to this thread's request (§5, §13.3).
    pub(super) fn on_llm_result(&mut self, result: Result<String, String>) {
        if self.llm_superseded() {
            return;
        }
        let attempts = self.shared.config.limits.llm_attempts;
        let t = &*self.t;
        let attempt = t.llm.as_ref().map(|l| l.attempt).unwrap_or(1);
        let turn = self.llm_turn();
        match result {
            Ok(text) => {
                let parsed = {
                    let mine = self.shared.mine(t);
                    let theirs = self.shared.theirs(t);
                    let view = self.shared.view(t, &mine, &theirs);
                    negotiator::parse_decision(&text, &view)
                };
                let parsed = parsed.and_then(|d| self.check_decision_secrets(d));
                match parsed {
                    Ok(decision) => {
                        let t = &mut *self.t;
                        t.llm = None;
                        self.set_waiting(Waiting::Nothing);
                        self.act(decision, turn);
                    }
                    Err(e) if attempt < attempts => {
                        self.note(format!("LLM answer refused (attempt {attempt}): {e}"));
                        let t = &mut *self.t;
                        t.llm = None;
                        self.ask_llm(attempt + 1, Some(e));
                    }
                    Err(e) => {
                        self.note(format!(
                            "LLM gave no valid answer in {attempts} attempts: {e}"
                        ));
                        let t = &mut *self.t;
                        t.llm = None;
                        let _ = self.send_packet(Body::ProcessingError(
                            crate::packet::ProcessingErrorBody {
                                error: "malformed_output".into(),
                                message: format!("no valid decision after {attempts} attempts"),
                                regarding: None,
                            },
                        ));
                        self.set_waiting(Waiting::User);
                        self.notify(NotifyKind::Escalated, "I couldn't work out a reply for this thread; it is paused until you look at it.".into());
                    }
                }
            }
            Err(e) if attempt < attempts => {
                // Exponential backoff: 1 s, 2 s, 4 s… (§13.3).
                let delay = std::time::Duration::from_secs(1u64 << (attempt - 1).min(10));
                let at = self.shared.now.add(delay);
                if let Some(l) = self.t.llm.as_mut() {
                    l.retry_at = Some(at);
                    l.last_error = Some(e.clone());
                }
                self.mark_changed();
                self.note(format!(
                    "LLM unavailable (attempt {attempt}): {e}; retrying"
                ));
            }
            Err(e) => {
                // Fall back to the deterministic negotiator, the always-available model.
                self.note(format!("LLM unavailable after {attempts} attempts ({e}); using the deterministic negotiator"));
                let t = &mut *self.t;
                t.llm = None;
                self.set_waiting(Waiting::Nothing);
                self.notify(
                    NotifyKind::Info,
                    "My language model is unavailable; I used the built-in negotiator instead."
                        .into(),
                );
                let decision = {
                    let t = &*self.t;
                    let mine = self.shared.mine(t);
                    let theirs = self.shared.theirs(t);
                    let view = self.shared.view(t, &mine, &theirs);
                    negotiator::decide(&view)
                };
                self.act(decision, turn);
            }
        }
    }

    /// Withdraws the thread's model request (in flight or waiting to be retried): its
    /// answer, if it still comes, matches no request and is ignored.
    pub(super) fn withdraw_llm(&mut self, why: &str) {
        let Some(l) = self.t.llm.take() else {
            return;
        };
        self.mark_changed();
        self.note(format!("LLM request {} dropped: {why}", l.request_id));
    }

    pub(super) fn ask_llm(&mut self, attempt: u32, previous_error: Option<String>) {
        let id = self.id;
        let rid = self.shared.meta.next_llm;
        self.shared.meta.next_llm += 1;
        self.shared.dirty.meta = true;
        let t = &*self.t;
        let layers = self.shared.prompt_layers(t);
        let req = LlmRequest {
            id: rid,
            thread_id: id.to_string(),
            attempt,
            layers,
            schema: negotiator::decision_schema(),
            previous_error: previous_error.clone(),
        };
        let t = &mut *self.t;
        t.llm = Some(LlmPending {
            request_id: rid,
            attempt,
            retry_at: None,
            last_error: previous_error,
            stale: false,
        });
        self.set_waiting(Waiting::Llm);
        self.mark_changed();
        self.shared.buf.llm.push(Output::CallLlm(req));
    }

    /// Whether the pending LLM request of thread `id` was overtaken by new input (see
    /// [`LlmPending::stale`]). If so it is dropped and the thread evaluated afresh: the
    /// model is asked again about the thread as it is now, unless the thread now waits
    /// for its user or left negotiation. Acting on the answer instead proposed or asked
    /// on an outdated view and never looked at what had come in (large swarm, seed 1).
    pub(super) fn llm_superseded(&mut self) -> bool {
        let t = &mut *self.t;
        let Some(l) = t.llm.take_if(|l| l.stale) else {
            return false;
        };
        self.mark_changed();
        self.note(format!(
            "LLM request {} superseded: the thread changed while the model was asked",
            l.request_id
        ));
        if self.t.waiting == Waiting::Llm {
            self.set_waiting(Waiting::Nothing);
        }
        let turn = self.llm_turn();
        self.evaluate(turn);
        true
    }

    /// The turn of thread `id` when its LLM answers: answering if the peer's latest
    /// packet was a request.
    pub(super) fn llm_turn(&self) -> Turn {
        let asked = self.t.last_received_kind() == Some("context_request");
        if asked {
            Turn::AnsweringRequest
        } else {
            Turn::Free
        }
    }

    pub(super) fn check_decision_secrets(&self, d: Decision) -> Result<Decision, String> {
        let t = &*self.t;
        let text = serde_json::to_vec(&d).unwrap_or_default();
        match self.shared.leaked_secret(&t.peer, &text) {
            Some(f) => Err(format!(
                "the answer contains the never_share value of `{f}`"
            )),
            None => Ok(d),
        }
    }
}

impl Shared {
    pub(super) fn prompt_layers(&self, t: &Thread) -> Vec<LlmLayer> {
        let profile: Map<String, Value> = self
            .config
            .profile
            .iter()
            .filter(|(k, _)| self.tier(&t.peer, k) != Tier::NeverShare)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let history: Vec<&str> = t.history.iter().map(|h| h.json.as_str()).collect();
        let layer = |name: &str, content: String| LlmLayer {
            name: name.into(),
            content,
        };
        vec![
            layer(
                "protocol",
                "You negotiate an A2ACP thread for your user. Answer with one JSON object that follows the schema: \
                 ask for at most 5 fields you do not have and never ask a field twice; propose a resolution when you \
                 have enough; use only the values given to you; escalate when the options are exhausted."
                    .into(),
            ),
            layer("user_profile", Value::Object(profile).to_string()),
            layer(
                "permissions",
                json!({
                    "always_share": self.settings.tiers.always_share,
                    "ask_first": self.settings.tiers.ask_first,
                    "never_share": self.settings.tiers.never_share,
                    "override": self.settings.overrides.get(&t.peer),
                })
                .to_string(),
            ),
            layer(
                "relationship_memory",
                json!({ "agent": t.peer, "malformed": self.peers.get(&t.peer).map(|p| p.malformed) }).to_string(),
            ),
            layer(
                "thread",
                json!({
                    "intent": t.intent, "state": t.state, "mine": self.mine(t), "theirs": t.theirs,
                    "asked": t.asked, "unavailable": t.peer_unavailable, "rejected": t.rejected,
                    "round_trips": t.round_trips, "history": history,
                })
                .to_string(),
            ),
        ]
    }
}
