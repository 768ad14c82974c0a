//! The thread lifecycle (§9): state changes, what a thread waits for, ending and
//! cancelling.

use crate::agent::thread::{ThreadState, Waiting};
use crate::agent::*;

use crate::packet::{Body, ResolutionResponseBody, ResolutionStatus};

impl ThreadStep<'_> {
    pub(in crate::agent) fn cancel_thread(&mut self) {
        let t = &*self.t;
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
            && t.stage.execution().is_some_and(|e| e.reported)
        {
            // This side reported its part done: the other side may already have
            // completed, and a COMPLETED thread cannot be undone by a cancel, so calling
            // it off here would leave the two sides disagreeing (swarm seed 627). The
            // thread ends with the other side's report.
            self.notify(
                NotifyKind::Info,
                "Everything agreed is already done on this side; the thread ends with the \
                 other side's report. To call it off now, undo it with the other person."
                    .into(),
            );
            return;
        }
        let rid = t.stage.resolution().map(|r| r.packet_id.clone());
        let _ = self.send_packet(Body::ResolutionResponse(ResolutionResponseBody {
            resolution_id: rid,
            status: ResolutionStatus::Declined,
            reason_class: Some("user_declined".into()),
            message_to_other_agent: Some("Thanks, but let's leave this one.".into()),
            alternative: None,
            signature: None,
            confirmations: Vec::new(),
        }));
        self.close_prompts();
        if busy {
            // The other side withdraws on this cancel (undoes what it did, then
            // DECLINED); this side does the same once its running action reports,
            // instead of finishing and waiting for a report that never comes (swarm seed
            // 627).
            if let Some(ex) = self.t.stage.execution_mut() {
                ex.cancelled = true;
                if ex.failure.is_none() {
                    ex.failure = Some("cancelled by the user".into());
                }
            }
            self.mark_changed();
            self.notify(
                NotifyKind::Info,
                "Undoing what was done here; the thread closes when that is finished.".into(),
            );
            if state == ThreadState::Executing {
                self.set_state(ThreadState::Failed, "cancelled by the user");
                self.start_rollback();
            }
            return;
        }
        self.set_state(ThreadState::Declined, "cancelled by the user");
    }

    /// Moves the thread to `to` for the reason `why` (see [`ThreadStep::transition`]).
    pub(in crate::agent) fn set_state(&mut self, to: ThreadState, why: &str) {
        self.transition(to, Some(why));
    }

    /// The one way a thread changes state: checked against the lifecycle table
    /// ([`Thread::transition`]), audited, stored, and on a terminal state the thread's
    /// secrets and open questions are let go ([`ThreadStep::end_thread`]). A refused
    /// transition is audited as this agent's bug; peer input never causes one.
    pub(in crate::agent) fn transition(&mut self, to: ThreadState, why: Option<&str>) {
        let t = &mut *self.t;
        let from = t.state;
        match t.transition(to) {
            Ok(true) => {
                t.last_activity = self.shared.now;
                if to.is_terminal() {
                    t.waiting = Waiting::Nothing;
                }
                self.mark_changed();
                self.audit(AgentEvent::StateChanged {
                    from,
                    to,
                    why: why.map(str::to_string),
                });
                if to == ThreadState::Completed {
                    self.record_memory();
                    self.memory_insight();
                }
                if to.is_terminal() {
                    self.end_thread();
                }
            }
            Ok(false) => {}
            Err(e) => self.audit_bug(Bug::IllegalTransition {
                error: e.to_string(),
                why: why.unwrap_or_default().to_string(),
            }),
        }
    }

    /// A thread ended: its ephemeral secret is erased, so a later key leak cannot open
    /// it (§16, SPEC-NOTES "forward secrecy").
    pub(in crate::agent) fn end_thread(&mut self) {
        let now = self.shared.now;
        let t = &mut *self.t;
        if t.state.is_terminal() && t.ended_at.is_none() {
            t.ended_at = Some(now);
            t.consent = None;
            t.llm = None;
            self.mark_changed();
        }
    }

    pub(in crate::agent) fn set_waiting(&mut self, w: Waiting) {
        let t = &mut *self.t;
        if t.waiting != w {
            t.waiting = w;
            if w == Waiting::Peer {
                t.last_activity = self.shared.now;
            }
            self.mark_changed();
        }
    }
}
