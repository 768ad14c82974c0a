//! The thread lifecycle (§9): state changes, what a thread waits for, ending and
//! cancelling.

use super::thread::{ThreadState, Waiting};
use super::*;

use crate::packet::{Body, ResolutionResponseBody, ResolutionStatus};

impl Agent {
    pub(super) fn cancel_thread(&mut self, id: &str) {
        let Some(t) = self.threads.get(id) else {
            return;
        };
        if t.state.is_terminal() {
            return;
        }
        let state = t.state;
        let busy = matches!(
            state,
            ThreadState::Executing
                | ThreadState::Confirmed
                | ThreadState::Failed
                | ThreadState::Rollback
        );
        if matches!(state, ThreadState::Executing | ThreadState::Confirmed)
            && t.execution.as_ref().is_some_and(|e| e.reported)
        {
            // This side reported its part done: the other side may already have
            // completed, and a COMPLETED thread cannot be undone by a cancel, so calling
            // it off here would leave the two sides disagreeing (swarm seed 627). The
            // thread ends with the other side's report.
            self.notify(
                Some(id.into()),
                NotifyKind::Info,
                "Everything agreed is already done on this side; the thread ends with the \
                 other side's report. To call it off now, undo it with the other person."
                    .into(),
            );
            return;
        }
        let rid = t.resolution.as_ref().map(|r| r.packet_id.clone());
        let _ = self.send_packet(
            id,
            Body::ResolutionResponse(ResolutionResponseBody {
                resolution_id: rid,
                status: ResolutionStatus::Declined,
                reason_class: Some("user_declined".into()),
                message_to_other_agent: Some("Thanks, but let's leave this one.".into()),
                alternative: None,
            }),
        );
        self.close_prompts(id);
        if busy {
            // The other side withdraws on this cancel (undoes what it did, then
            // DECLINED); this side does the same once its running action reports,
            // instead of finishing and waiting for a report that never comes (swarm seed
            // 627).
            if let Some(ex) = self.threads.get_mut(id).and_then(|t| t.execution.as_mut()) {
                ex.cancelled = true;
                if ex.failure.is_none() {
                    ex.failure = Some("cancelled by the user".into());
                }
            }
            self.dirty.threads.insert(id.to_string());
            self.notify(
                Some(id.into()),
                NotifyKind::Info,
                "Undoing what was done here; the thread closes when that is finished.".into(),
            );
            if state == ThreadState::Executing {
                self.set_state(id, ThreadState::Failed, "cancelled by the user");
                self.start_rollback(id);
            }
            return;
        }
        self.set_state(id, ThreadState::Declined, "cancelled by the user");
    }

    pub(super) fn set_state(&mut self, id: &str, to: ThreadState, why: &str) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        let from = t.state;
        match t.transition(to) {
            Ok(true) => {
                t.last_activity = self.now;
                if to.is_terminal() {
                    t.waiting = Waiting::Nothing;
                }
                self.dirty.threads.insert(id.to_string());
                self.audit(
                    Some(id),
                    AgentEvent::StateChanged {
                        from,
                        to,
                        why: Some(why.to_string()),
                    },
                );
                if to.is_terminal() {
                    self.end_thread(id);
                }
            }
            Ok(false) => {}
            Err(e) => self.audit_bug(
                Some(id),
                Bug::IllegalTransition {
                    error: e.to_string(),
                    why: why.to_string(),
                },
            ),
        }
    }

    /// A thread ended: its ephemeral secret is erased, so a later key leak cannot open
    /// it (§16, SPEC-NOTES "forward secrecy").
    pub(super) fn end_thread(&mut self, id: &str) {
        let now = self.now;
        if let Some(t) = self.threads.get_mut(id) {
            if t.state.is_terminal() && t.ended_at.is_none() {
                t.ended_at = Some(now);
                t.consent = None;
                t.llm = None;
                self.dirty.threads.insert(id.to_string());
            }
        }
    }

    pub(super) fn set_waiting(&mut self, id: &str, w: Waiting) {
        if let Some(t) = self.threads.get_mut(id) {
            if t.waiting != w {
                t.waiting = w;
                if w == Waiting::Peer {
                    t.last_activity = self.now;
                }
                self.dirty.threads.insert(id.to_string());
            }
        }
    }
}
