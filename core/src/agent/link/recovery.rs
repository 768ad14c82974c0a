//! Recovery (§13.1, §13.2): thread summaries and re-sending what the peer missed, timeouts
//! and staleness, resuming after a restore.

use std::collections::BTreeSet;

use crate::agent::io::notify::list;
use crate::agent::link::Link;
use crate::agent::negotiation::negotiate::STALL_REASON;
use crate::agent::negotiation::retraction::retraction_deadline;
use crate::agent::negotiation::usage::usage_deadline;
use crate::agent::thread::{HistoryEntry, Thread, ThreadState, Waiting};
use crate::agent::*;

use crate::packet::{Body, ContextBody, Escalation, ThreadStateBody};

/// At most this many missing packet ids are remembered per thread as asked for (a
/// peer's summary can list anything; each packet is asked for once).
pub(in crate::agent) const MAX_GAP_ASKED: usize = 256;

/// How long an ended thread keeps its ephemeral secret to answer late gap requests.
pub(in crate::agent) const ERASE_GRACE: std::time::Duration =
    std::time::Duration::from_secs(7 * 86_400);

impl Agent {
    pub(in crate::agent) fn resume_after_restore(&mut self) {
        let ids: Vec<String> = self.threads.keys().cloned().collect();
        for id in ids {
            let Some(t) = self.threads.get(&id) else {
                continue;
            };
            if t.state.is_terminal() {
                continue;
            }
            let consent_open = t.consent.as_ref().is_some_and(|c| c.prompt_id != 0);
            let resolution_open = t.state == ThreadState::Proposed
                && t.stage.resolution().is_some_and(|r| r.prompt_id.is_some());
            if consent_open {
                self.in_thread(&id, |step| step.show_consent_prompt());
            }
            if resolution_open {
                self.in_thread(&id, |step| step.show_resolution_prompt(false));
            }
            let Some(t) = self.threads.get(&id) else {
                continue;
            };
            if let Some((aid, i, undo)) = t.stage.execution().and_then(|e| e.in_flight) {
                let details = t
                    .stage
                    .resolution()
                    .map(|r| r.body.proposal.details.clone())
                    .unwrap_or_default();
                if let Some(action) = t.stage.execution().and_then(|e| e.mine.get(i).cloned()) {
                    self.shared
                        .buf
                        .action
                        .push(Output::ExecuteAction(ActionRequest {
                            id: aid,
                            thread_id: id.clone(),
                            action,
                            details,
                            undo,
                            check: false,
                        }));
                }
            }
            let lost = t.llm.clone().filter(|l| l.retry_at.is_none());
            if let Some(l) = lost {
                if self.in_thread(&id, |step| step.llm_superseded()) != Some(true) {
                    if let Some(t) = self.threads.get_mut(&id) {
                        t.llm = None;
                    }
                    // The same call again: its answer was lost with the process.
                    self.in_thread(&id, |step| {
                        step.ask_llm(l.tier, l.attempt, l.last_error.clone(), Some(&l))
                    });
                }
            }
        }
    }

    pub(in crate::agent) fn on_timeout(&mut self) {
        self.shared.unpark();
        if self.shared.link != Link::Down
            && self.shared.now
                >= self
                    .shared
                    .last_heard
                    .add(self.shared.config.limits.relay_silence)
        {
            self.shared.audit(None, AgentEvent::RelaySilent);
            self.shared.buf.close.push(Output::CloseConnection);
            self.shared.on_disconnected();
        }
        let ids: Vec<String> = self
            .threads
            .values()
            .filter(|t| {
                self.shared
                    .thread_deadline(t)
                    .is_some_and(|d| d <= self.shared.now)
            })
            .map(|t| t.id.clone())
            .collect();
        for id in ids {
            self.in_thread(&id, |step| step.thread_timeout());
        }
        let due: Vec<Address> = self
            .shared
            .peers
            .iter()
            .filter(|(_, p)| p.refused.tell_due().is_some_and(|t| t <= self.shared.now))
            .map(|(a, _)| a.clone())
            .collect();
        for peer in due {
            self.shared.tell_refusals(&peer);
        }
        self.shared.expire_memory();
        self.group_timeouts();
    }
}

impl ThreadStep<'_> {
    pub(in crate::agent) fn on_thread_state(&mut self, s: ThreadStateBody) {
        let t = &*self.t;
        let theirs: BTreeSet<&String> = s.packets_received.iter().collect();
        let missing: Vec<HistoryEntry> = t
            .history
            .iter()
            .filter(|h| h.outgoing && h.kind != "thread_state" && !theirs.contains(&h.packet_id))
            .cloned()
            .collect();
        for h in missing {
            self.audit(AgentEvent::Resent {
                kind: h.kind.clone(),
                packet_id: h.packet_id.clone(),
            });
            self.seal_and_queue(&h.packet_id, h.json.as_bytes());
        }
        if s.state == ThreadState::Expired.as_str() {
            self.peer_expired();
        }
        // The summary also lists what the peer sent. A packet of it that never arrived
        // here (its sender crashed after storing the thread but before queuing the
        // packet, so only a summary from this side would make it re-send it) is asked
        // for with this side's own summary, once per packet; an EXPIRED side answers
        // the summary of a side that still has the thread open, as any late packet
        // (§13.1, §8.3; large swarm, seed 1).
        let t = &mut *self.t;
        if t.halted {
            return;
        }
        let answer = if t.state.is_terminal() {
            t.state == ThreadState::Expired
                && ThreadState::from_wire(&s.state).is_some_and(|x| !x.is_terminal())
        } else {
            let lacking: Vec<String> = s
                .packets_sent
                .into_iter()
                .filter(|p| !t.received_ids.contains(p) && !t.gap_asked.contains(p))
                .take(MAX_GAP_ASKED)
                .collect();
            let ask = !lacking.is_empty() && t.gap_asked.len() < MAX_GAP_ASKED;
            if ask {
                self.audit(AgentEvent::GapRequested {
                    missing: lacking.len(),
                });
                let t = &mut *self.t;
                t.gap_asked.extend(lacking);
                self.mark_changed();
            }
            ask
        };
        if answer && !self.summary_pending() {
            self.send_thread_state();
        }
    }

    /// The peer's side of the thread expired (§8.3) while this side still had it open
    /// (its confirmations reached the peer too late): this side ends EXPIRED as well,
    /// undoing first what it already did.
    pub(in crate::agent) fn peer_expired(&mut self) {
        let t = &mut *self.t;
        let text = "The proposal expired on the other side before every confirmation reached it.";
        match t.state {
            ThreadState::Proposed | ThreadState::Negotiating | ThreadState::Stalled => {
                // Negotiating/stalled: this side's late counter or excuse re-opened a
                // resolution the peer had already let expire; it will never answer again.
                self.close_prompts();
                self.set_state(ThreadState::Expired, "expired on the other side");
                self.notify(NotifyKind::Expired, text.into());
            }
            ThreadState::Confirmed | ThreadState::Executing => self.withdraw_execution(
                "expired on the other side".into(),
                |ex| ex.expired = true,
                NotifyKind::Expired,
                format!("{text} Undoing what was done here."),
                "expired on the other side",
            ),
            ThreadState::Failed | ThreadState::Rollback => {
                if let Some(ex) = t.stage.execution_mut() {
                    ex.expired = true;
                    self.mark_changed();
                }
            }
            _ => {}
        }
    }

    pub(in crate::agent) fn thread_timeout(&mut self) {
        self.retraction_timeouts();
        self.usage_timeouts();
        let now = self.shared.now;
        let t = &mut *self.t;
        if t.state.is_terminal() {
            if t.ended_at.is_some_and(|e| e.add(ERASE_GRACE) <= now) && !t.session.is_erased() {
                t.session.erase();
                self.mark_changed();
                self.audit(AgentEvent::EphemeralKeyErased);
            }
            return;
        }
        let t = &mut *self.t;
        if let Some(l) = t.llm.as_mut() {
            if l.retry_at.is_some_and(|r| r <= now) {
                l.retry_at = None;
                if self.llm_superseded() {
                    return;
                }
                let t = &mut *self.t;
                let Some(l) = t.llm.take() else {
                    return;
                };
                self.llm_queue_retry(l);
                return;
            }
        }
        let t = &mut *self.t;
        if t.state == ThreadState::Proposed {
            let Some(r) = t.stage.resolution_mut() else {
                return;
            };
            if now >= r.deadline {
                if let Some(p) = r.prompt_id.take() {
                    self.shared.buf.prompt.push(Output::ClosePrompt(p));
                }
                let summary = r.body.proposal.summary.clone();
                let missing = self.missing_confirmations();
                let coordinating = self.t.coordinates(&self.shared.config.address);
                self.set_state(ThreadState::Expired, "confirmation timeout");
                // A coordinator's user hears it once for the group (`group.rs`).
                if !coordinating {
                    self.notify(NotifyKind::Expired,
                    format!(
                        "“{summary}” expired: not everyone confirmed in time (no confirmation from {}).",
                        list(missing.iter())
                    ),
                );
                }
                // §8.3 "both users are notified": the other side learns it at once, also
                // when it is the one whose confirmation never came (a proposer that does
                // not send its own `resolution_response`), instead of staying PROPOSED.
                self.send_thread_state();
            } else if now >= r.remind_at && !r.reminded {
                r.reminded = true;
                let answered = r.prompt_id.is_none();
                let summary = r.body.proposal.summary.clone();
                self.mark_changed();
                if self.t.coordinates(&self.shared.config.address) {
                    // The group reminds its coordinator's user once (`group.rs`).
                } else if answered {
                    // The user answered; others have not confirmed yet (§8.1
                    // remind_then_expire).
                    let missing = self.missing_confirmations();
                    self.notify(NotifyKind::Info,
                        format!(
                            "Reminder: “{summary}” still waits for a confirmation from {}; it expires if none comes in time.",
                            list(missing.iter())
                        ),
                    );
                } else {
                    self.show_resolution_prompt(true);
                    self.notify(
                        NotifyKind::Info,
                        "Reminder: a proposal is waiting for your answer.".into(),
                    );
                }
            }
            return;
        }
        if matches!(t.state, ThreadState::Initiated | ThreadState::Negotiating)
            && t.waiting == Waiting::Peer
        {
            let peer = t.peer.clone();
            self.set_state(
                ThreadState::Stalled,
                "no answer within the staleness timeout",
            );
            self.notify(
                NotifyKind::Stalled,
                format!("{peer} hasn't answered; the thread is stalled."),
            );
            let body = Body::Context(ContextBody {
                escalation: Some(Escalation {
                    recommend: "surface_to_users".into(),
                    reason: format!("{STALL_REASON}: no answer within the staleness timeout"),
                    suggested_prompt: None,
                }),
                ..Default::default()
            });
            let _ = self.send_packet(body);
            self.set_waiting(Waiting::User);
        }
    }

    /// Whether a `thread_state` of thread `id` waits in the outbox.
    pub(in crate::agent) fn summary_pending(&self) -> bool {
        let id = self.id;
        let t = &*self.t;
        self.shared.outbox.values().any(|o| {
            o.thread_id == id
                && t.history
                    .iter()
                    .rev()
                    .any(|h| h.outgoing && h.packet_id == o.packet_id && h.kind == "thread_state")
        })
    }
}

impl Shared {
    pub(in crate::agent) fn thread_deadline(&self, t: &Thread) -> Option<Timestamp> {
        // Deadlines of what was shared, which hold in every state.
        let retraction = match (retraction_deadline(t), usage_deadline(t)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let first = |d: Option<Timestamp>| match (d, retraction) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if t.state.is_terminal() {
            // The ephemeral secret outlives the thread by a grace period, so late gap
            // requests (§13.1) can still be answered; then it is erased.
            return first(
                t.ended_at
                    .filter(|_| !t.session.is_erased())
                    .map(|e| e.add(ERASE_GRACE)),
            );
        }
        if t.halted {
            return retraction;
        }
        let mut d: Option<Timestamp> = retraction;
        let mut at = |x: Timestamp| d = Some(d.map_or(x, |c| c.min(x)));
        if let Some(l) = &t.llm {
            if let Some(r) = l.retry_at {
                at(r);
            }
        }
        if t.state == ThreadState::Proposed {
            if let Some(r) = t.stage.resolution() {
                if !r.reminded {
                    at(r.remind_at);
                }
                at(r.deadline);
            }
        } else if matches!(t.state, ThreadState::Initiated | ThreadState::Negotiating)
            && t.waiting == Waiting::Peer
        {
            let s = if t.intent.is_urgent() {
                self.config.limits.staleness_urgent
            } else {
                self.config.limits.staleness
            };
            at(t.last_activity.add(s));
        }
        d
    }
}
