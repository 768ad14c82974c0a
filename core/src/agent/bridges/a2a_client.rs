//! The client direction of the A2A v1.0 bridge (seed 003, §18): a thread whose peer is a
//! plain A2A agent reached by its card's JSON-RPC interface. The thread machine is the
//! same as with any peer; here the packets this agent sends become A2A messages
//! (`crate::bridge::a2a::client::outgoing`), queued in the thread ([`RemoteTask::unsent`]),
//! and the remote task read back becomes packets *from* the peer
//! (`agent:web-…@a2a.invalid`): an input-required status with needs a `context_request`,
//! a proposal (artifact) a `resolution` for this user to confirm, a completed task the
//! peer's `execution_report`, a refused or failed one the thread declined.
//!
//! The runtime only does HTTP: it takes the calls due ([`Agent::take_a2a_calls`]), makes
//! them and hands each outcome back ([`Agent::handle_a2a_client`]). Everything that decides
//! is here, pure; the retry rule is `crate::bridge::phase1::retry`'s. SPEC-NOTES "The A2A v1.0 bridge:
//! the client direction".

use std::time::Duration;

use crate::agent::*;
use crate::bridge::a2a::client::{self, ClientError, Outgoing, RemoteTask, RemoteView};
use crate::bridge::a2a::task::TaskState;
use crate::bridge::phase1::retry::{self, Failure};
use crate::packet::{Body, ContextRequestBody, ExecutionReport, Intent, Packet, ResolutionBody};

/// What one call of the A2A client is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum A2aCallKind {
    /// `GET` the agent card.
    Card,
    /// `POST` a `SendMessage`.
    Send,
    /// `POST` a `GetTask` (the task was still working).
    Poll,
    /// `POST` a `CancelTask` (this user called the thread off).
    Cancel,
}

/// One HTTP call the runtime makes for a thread with a remote A2A agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct A2aClientCall {
    /// The thread.
    pub thread_id: String,
    /// What it is for.
    pub kind: A2aCallKind,
    /// Where: the card URL (`GET`) or the JSON-RPC endpoint (`POST`, header
    /// `A2A-Version: 1.0`).
    pub url: String,
    /// The JSON-RPC request (`None` for the card).
    pub body: Option<Vec<u8>>,
    /// Bytes of the answer read at most (over it: [`A2aOutcome::TooLarge`]).
    pub limit: usize,
}

/// How a call of the A2A client ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum A2aOutcome {
    /// An HTTP response, read whole within the limit.
    Response {
        /// Its status code.
        status: u16,
        /// Its body.
        body: Vec<u8>,
    },
    /// No response: the connection failed or the deadline passed (retried).
    Network(String),
    /// The response was larger than the call's limit.
    TooLarge,
}

impl Agent {
    /// `thread start --to https://…`: a thread with the A2A agent whose card is at `to`
    /// (a card URL, or a base URL). Its first packet is queued for the remote agent; the
    /// card is read first ([`Agent::take_a2a_calls`]). The new thread's id, unless `to`
    /// was refused (the user is told why).
    pub(in crate::agent) fn open_a2a_thread(
        &mut self,
        to: String,
        intent: Intent,
        context: Context,
    ) -> Option<String> {
        let url = match client::card_url(&to) {
            Ok(u) => u,
            Err(e) => {
                self.shared
                    .notify(None, NotifyKind::Info, format!("No thread started: {e}."));
                return None;
            }
        };
        let peer = match client::peer_address(&url) {
            Ok(p) => p,
            Err(e) => {
                self.shared
                    .notify(None, NotifyKind::Info, format!("No thread started: {e}."));
                return None;
            }
        };
        if self.shared.settings.blocked.contains(&peer) {
            self.shared.notify(
                None,
                NotifyKind::Info,
                format!("{peer} ({url}) is blocked; unblock it first."),
            );
            return None;
        }
        let id = self.create_thread(&peer, intent, context, None);
        let context_id = self.shared.meta.rng.id("ctx_", 16);
        if let Some(t) = self.threads.get_mut(&id) {
            t.a2a_remote = Some(RemoteTask::new(url));
            t.a2a_context = Some(context_id);
        }
        self.in_thread(&id, |step| step.send_first_packet());
        Some(id)
    }

    /// The calls due now for threads with a remote A2A agent, marked as out (one per
    /// thread at a time): the card first, then the queued messages in order, then polls
    /// of a task still working. After a restart nothing is out, and the same calls are
    /// due again (a message is dropped from the queue only once the remote agent
    /// answered it).
    pub fn take_a2a_calls(&mut self, now: Timestamp) -> Vec<A2aClientCall> {
        self.shared.now = self.shared.now.max(now);
        let now_ms = self.shared.now.as_millis();
        let mut out = Vec::new();
        let ids: Vec<String> = self
            .threads
            .values()
            .filter(|t| t.a2a_remote.is_some())
            .map(|t| t.id.clone())
            .collect();
        for id in ids {
            // The JSON-RPC id is drawn only for a call made (the draw is recorded then).
            let rng = &mut self.shared.meta.rng;
            let mut rpc_id = || rng.id("rpc_", 8);
            let Some(t) = self.threads.get_mut(&id) else {
                continue;
            };
            let terminal = t.state.is_terminal();
            let Some(r) = t.a2a_remote.as_mut() else {
                continue;
            };
            if r.in_flight
                || r.next_at_ms
                    .is_some_and(|n| u64::try_from(n).unwrap_or(0) > now_ms)
            {
                continue;
            }
            let remote_done = r.state().is_some_and(TaskState::is_terminal);
            let call = match (&r.endpoint, r.unsent.first()) {
                (None, _) if terminal => None,
                (None, _) => Some((
                    A2aCallKind::Card,
                    r.card_url.clone(),
                    None,
                    client::MAX_CARD,
                )),
                (Some(_), Some(_)) if remote_done => {
                    r.unsent.clear();
                    r.cancel = false;
                    self.shared.dirty.threads.insert(id.clone());
                    None
                }
                (Some(e), Some(m)) => Some((
                    A2aCallKind::Send,
                    e.clone(),
                    Some(client::send_request(&rpc_id(), m, r.task_id.as_deref())),
                    client::MAX_RESPONSE,
                )),
                (Some(e), None) if r.cancel => match &r.task_id {
                    Some(task) if !remote_done => Some((
                        A2aCallKind::Cancel,
                        e.clone(),
                        Some(client::cancel_request(&rpc_id(), task)),
                        client::MAX_RESPONSE,
                    )),
                    _ => {
                        // No task was opened, or it already ended: nothing to cancel.
                        r.cancel = false;
                        self.shared.dirty.threads.insert(id.clone());
                        None
                    }
                },
                (Some(e), None) => match (&r.task_id, r.state()) {
                    (Some(task), Some(TaskState::Working | TaskState::Submitted)) if !terminal => {
                        Some((
                            A2aCallKind::Poll,
                            e.clone(),
                            Some(client::get_request(&rpc_id(), task)),
                            client::MAX_RESPONSE,
                        ))
                    }
                    _ => None,
                },
            };
            let Some((kind, url, body, limit)) = call else {
                if r.next_at_ms.take().is_some() {
                    // Nothing more to ask (the thread or the task ended): no wake-up left.
                    self.shared.dirty.threads.insert(id.clone());
                }
                continue;
            };
            r.in_flight = true;
            self.shared.dirty.meta = true;
            out.push(A2aClientCall {
                thread_id: id,
                kind,
                url,
                body: body.map(|b| b.to_string().into_bytes()),
                limit,
            });
        }
        self.flush();
        out
    }

    /// When a call of the A2A client is due next (a retry or a poll), for
    /// [`Agent::poll_timeout`].
    pub(in crate::agent) fn a2a_client_wake(&self) -> Option<Timestamp> {
        self.threads
            .values()
            .filter_map(|t| t.a2a_remote.as_ref())
            .filter(|r| !r.in_flight)
            .filter_map(|r| r.next_at_ms)
            .map(|n| Timestamp::from_millis(u64::try_from(n).unwrap_or(0)))
            .min()
    }

    /// A call of [`Agent::take_a2a_calls`] ended with `outcome`. Outputs follow as for
    /// any input.
    pub fn handle_a2a_client(&mut self, now: Timestamp, call: &A2aClientCall, outcome: A2aOutcome) {
        self.shared.now = self.shared.now.max(now);
        self.a2a_client_outcome(call, outcome);
        self.step_groups();
        self.flush();
    }

    fn a2a_client_outcome(&mut self, call: &A2aClientCall, outcome: A2aOutcome) {
        let id = call.thread_id.clone();
        let Some(r) = self
            .threads
            .get_mut(&id)
            .and_then(|t| t.a2a_remote.as_mut())
        else {
            return;
        };
        r.in_flight = false;
        self.shared.dirty.threads.insert(id.clone());
        let what = match call.kind {
            A2aCallKind::Card => "its agent card",
            A2aCallKind::Send | A2aCallKind::Poll | A2aCallKind::Cancel => "its JSON-RPC interface",
        };
        let (status, body) = match outcome {
            A2aOutcome::Network(e) => return self.a2a_retry(&id, format!("{what}: {e}")),
            A2aOutcome::Response { status, .. } if status == 429 || status >= 500 => {
                return self.a2a_retry(&id, format!("{what} answered HTTP {status}"))
            }
            A2aOutcome::TooLarge => {
                return self.a2a_client_failed(
                    &id,
                    format!("{what} answered more than {} bytes", call.limit),
                )
            }
            A2aOutcome::Response { status, body } => (status, body),
        };
        r.attempts = 0;
        r.waited_ms = 0;
        r.next_at_ms = None;
        match call.kind {
            A2aCallKind::Card => {
                if status != 200 {
                    let why = format!("its agent card at {} answered HTTP {status}", r.card_url);
                    return self.a2a_client_failed(&id, why);
                }
                match client::read_card(&r.card_url, &body) {
                    Ok(card) => {
                        r.endpoint = Some(card.endpoint);
                        r.name = Some(card.name);
                    }
                    Err(e) => self.a2a_client_failed(&id, e.to_string()),
                }
            }
            A2aCallKind::Cancel => {
                r.cancel = false;
                let what = match client::read_response(&body) {
                    Ok(view) => {
                        r.state = Some(view.state.as_str().to_string());
                        format!("The A2A task is {}.", view.state.as_str())
                    }
                    Err(e) => format!("The A2A agent did not cancel its task: {e}."),
                };
                self.shared.note(Some(&id), what);
            }
            A2aCallKind::Send | A2aCallKind::Poll => {
                let view = match client::read_response(&body) {
                    Ok(v) => v,
                    Err(e @ ClientError::Rpc { .. }) => {
                        return self.a2a_client_failed(&id, e.to_string())
                    }
                    Err(e) => {
                        return self.a2a_client_failed(
                            &id,
                            if (200..300).contains(&status) {
                                e.to_string()
                            } else {
                                format!("HTTP {status}: {e}")
                            },
                        )
                    }
                };
                if call.kind == A2aCallKind::Send {
                    if !r.unsent.is_empty() {
                        r.unsent.remove(0);
                    }
                    // A new message: the task's answer to it is new, whatever it repeats.
                    r.seen.retain(|m| m.starts_with("artifact:"));
                    r.polls = 0;
                }
                self.a2a_apply(&id, view);
            }
        }
    }

    /// A call failed in a way worth another attempt: again after the retry rule's wait,
    /// or, once it is spent, the thread cannot go on.
    fn a2a_retry(&mut self, id: &str, why: String) {
        let now = self.shared.now;
        let Some(r) = self.threads.get_mut(id).and_then(|t| t.a2a_remote.as_mut()) else {
            return;
        };
        r.attempts += 1;
        match retry::next_attempt(r.attempts, r.waited_ms, Failure::Network) {
            Some(wait) => {
                r.waited_ms += wait;
                r.next_at_ms = i64::try_from(now.add(Duration::from_millis(wait)).as_millis()).ok();
                self.shared.note(
                    Some(id),
                    format!(
                        "A2A call failed ({why}); attempt {} in {wait} ms",
                        r.attempts + 1
                    ),
                );
            }
            None => {
                let n = r.attempts;
                self.a2a_client_failed(id, format!("{why} (after {n} attempts)"));
            }
        }
    }

    /// The remote agent cannot be used any further (`why`): nothing more is sent; the
    /// thread is declined — or, when this side already carries out a confirmed proposal,
    /// the peer's part failed (FAILED, then undone).
    fn a2a_client_failed(&mut self, id: &str, why: String) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        if let Some(r) = t.a2a_remote.as_mut() {
            r.unsent.clear();
            r.cancel = false;
            r.next_at_ms = None;
            r.in_flight = false;
        }
        self.shared.dirty.threads.insert(id.to_string());
        let peer = t.peer.clone();
        match t.state {
            ThreadState::Executing => {
                let rid = t.stage.resolution().map(|r| r.packet_id.clone());
                self.a2a_packet(
                    &peer,
                    id,
                    Body::ExecutionReport(ExecutionReport {
                        resolution_id: rid.unwrap_or_default(),
                        status: "failed".into(),
                        failed_action: Some("a2a_task".into()),
                        error: Some(why),
                    }),
                );
            }
            s if s.is_terminal()
                || matches!(
                    s,
                    ThreadState::Confirmed | ThreadState::Failed | ThreadState::Rollback
                ) =>
            {
                self.shared.note(
                    Some(id),
                    format!("A2A agent unusable after the thread ended: {why}"),
                );
            }
            _ => {
                self.in_thread(id, |step| {
                    step.close_prompts();
                    step.set_state(ThreadState::Declined, "the A2A agent cannot go on");
                    let name = step
                        .t
                        .a2a_remote
                        .as_ref()
                        .map(|r| r.name.clone().unwrap_or_else(|| r.card_url.clone()))
                        .unwrap_or_default();
                    let id = step.id.to_string();
                    step.notify(
                        NotifyKind::Declined,
                        format!("Thread {id} with the A2A agent {name} is declined: {why}."),
                    );
                });
            }
        }
    }

    /// The remote task as read after a call: what is new in it becomes packets from the
    /// peer (SPEC-NOTES "The A2A v1.0 bridge: the client direction", the table).
    fn a2a_apply(&mut self, id: &str, view: RemoteView) {
        let now = self.shared.now;
        let me = self.shared.config.address.clone();
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        let peer = t.peer.clone();
        let state = t.state;
        let open_from_peer = t.stage.resolution().is_some_and(|r| r.proposer == peer);
        let Some(r) = t.a2a_remote.as_mut() else {
            return;
        };
        if !view.id.is_empty() {
            r.task_id = Some(view.id.clone());
        }
        r.state = Some(view.state.as_str().to_string());
        if let Some(c) = &view.context_id {
            t.a2a_context = Some(c.clone());
        }
        if matches!(view.state, TaskState::Working | TaskState::Submitted) && !state.is_terminal() {
            let wait = client::FIRST_POLL_MS
                .checked_shl(r.polls.min(16))
                .unwrap_or(client::MAX_POLL_MS)
                .min(client::MAX_POLL_MS);
            r.polls = r.polls.saturating_add(1);
            r.next_at_ms = i64::try_from(now.add(Duration::from_millis(wait)).as_millis()).ok();
        }
        let marks = client::marks(&view);
        let fresh: Vec<String> = marks.into_iter().filter(|m| !r.seen.contains(m)).collect();
        if fresh.is_empty() {
            return;
        }
        r.seen.extend(fresh);
        if r.seen.len() > 64 {
            let cut = r.seen.len() - 64;
            r.seen.drain(..cut);
        }
        let name = r.name.clone().unwrap_or_else(|| r.card_url.clone());
        match view.state {
            TaskState::Working | TaskState::Submitted => {}
            TaskState::InputRequired if client::awaits_decision(&view) => {
                if !open_from_peer {
                    self.a2a_packet(&peer, id, resolution(&view, &me));
                }
            }
            TaskState::InputRequired => {
                let needs = client::needs_of(&view);
                if needs.is_empty() {
                    // Asked in words only: the user answers (`thread reply`), which goes
                    // out as more context.
                    let text = crate::display::line(&view.status_text, 300).into_owned();
                    self.in_thread(id, |step| {
                        step.t.escalated = true;
                        step.set_waiting(Waiting::User);
                        let tid = step.id.to_string();
                        step.notify(
                            NotifyKind::Escalated,
                            format!(
                                "I need your input: the A2A agent {name} asks “{text}”. Answer with `a2acp thread reply {tid} FIELD=VALUE …`."
                            ),
                        );
                    });
                } else {
                    self.a2a_packet(
                        &peer,
                        id,
                        Body::ContextRequest(ContextRequestBody {
                            needs,
                            context_provided: Context::new(),
                            permissions: None,
                        }),
                    );
                }
            }
            TaskState::Completed => {
                let proposed = matches!(state, ThreadState::Confirmed | ThreadState::Executing)
                    || (state == ThreadState::Proposed && open_from_peer);
                if !proposed {
                    self.a2a_packet(&peer, id, resolution(&view, &me));
                }
                let rid = self
                    .threads
                    .get(id)
                    .and_then(|t| t.stage.resolution())
                    .map(|r| r.packet_id.clone());
                if let Some(rid) = rid {
                    // The remote agent's part is done: its task completed.
                    self.a2a_packet(
                        &peer,
                        id,
                        Body::ExecutionReport(ExecutionReport {
                            resolution_id: rid,
                            status: "completed".into(),
                            failed_action: None,
                            error: None,
                        }),
                    );
                }
            }
            TaskState::Rejected
            | TaskState::Canceled
            | TaskState::Failed
            | TaskState::AuthRequired => {
                let how = match view.state {
                    TaskState::Rejected => "rejected the task",
                    TaskState::Canceled => "cancelled the task",
                    TaskState::AuthRequired => "requires authentication this agent cannot give",
                    _ => "failed the task",
                };
                let text = crate::display::line(&view.status_text, 200).into_owned();
                let why = if text.is_empty() {
                    format!("the A2A agent {how}")
                } else {
                    format!("the A2A agent {how} (“{text}”)")
                };
                self.a2a_client_failed(id, why);
            }
        }
    }
}

/// The remote agent's proposal as its `resolution`, for this agent's user to confirm.
fn resolution(view: &RemoteView, me: &Address) -> Body {
    Body::Resolution(ResolutionBody {
        proposal: client::proposal_of(view),
        requires_confirmation_from: vec![me.clone()],
        actions_on_confirm: Vec::new(),
        confirmation_timeout: None,
        on_timeout: None,
        quorum: None,
    })
}

impl ThreadStep<'_> {
    /// A packet this agent sends in a thread with a remote A2A agent: queued as the A2A
    /// message it becomes (none for a packet with no A2A meaning; nothing once the remote
    /// task is terminal).
    pub(in crate::agent) fn a2a_queue(&mut self, plain: &[u8]) {
        let Ok(p) = Packet::parse(plain) else {
            return;
        };
        let t = &mut *self.t;
        let ctx = crate::bridge::a2a::task::context_id(t).to_string();
        let Some(r) = t.a2a_remote.as_mut() else {
            return;
        };
        let Some(out) = client::outgoing(&p, &ctx) else {
            return;
        };
        if let Some(s) = r.state().filter(|s| s.is_terminal()) {
            let kind = p.body.type_name();
            self.note(format!(
                "{kind} not sent: the A2A task is already {}",
                s.as_str()
            ));
            return;
        }
        match out {
            Outgoing::Message(m) => r.unsent.push(m),
            Outgoing::Cancel => {
                // What was queued but not sent yet is not sent at all: the user called
                // the thread off.
                r.unsent.clear();
                r.cancel = true;
            }
        }
        self.mark_changed();
    }
}

#[cfg(test)]
#[path = "a2a_client_tests.rs"]
mod tests;
