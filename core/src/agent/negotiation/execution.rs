//! Executing a confirmed resolution (§9): actions one by one, execution reports, failure
//! and rollback.

use crate::agent::thread::{Execution, ThreadState, Waiting};
use crate::agent::*;

use crate::negotiator::Rejected;
use crate::packet::{Body, ExecutionReport};

impl Agent {
    pub(in crate::agent) fn on_action_result(
        &mut self,
        action_id: u64,
        result: Result<Context, String>,
    ) {
        if self.on_group_check(action_id, &result) {
            return;
        }
        let result = result.map(|_| ());
        let Some(id) = self.thread_where(
            |t| {
                t.stage
                    .execution()
                    .and_then(|e| e.in_flight)
                    .is_some_and(|(a, _, _)| a == action_id)
            },
            format!("result of unknown action {action_id} ignored"),
        ) else {
            return;
        };
        self.in_thread(&id, |step| step.on_action_result(result));
    }
}

impl ThreadStep<'_> {
    /// The result of this thread's action in flight (§9).
    pub(in crate::agent) fn on_action_result(&mut self, result: Result<(), String>) {
        let t = &mut *self.t;
        let Some(ex) = t.stage.execution_mut() else {
            return;
        };
        let Some((_, i, undo)) = ex.in_flight.take() else {
            return;
        };
        let name = ex.mine.get(i).map(|a| a.action.clone()).unwrap_or_default();
        self.shared.dirty.threads.insert(self.id.to_string());
        match (undo, result) {
            (true, Ok(())) => {
                self.audit(AgentEvent::ActionUndone {
                    action: name.clone(),
                });
                self.next_action();
            }
            (true, Err(e)) => {
                self.notify(
                    NotifyKind::Failed,
                    format!("Could not undo {name}: {e}. Please check it by hand."),
                );
                self.next_action();
            }
            (false, Ok(())) => {
                ex.done += 1;
                let abort = t.state == ThreadState::Failed || ex.failure.is_some();
                self.audit(AgentEvent::ActionSucceeded {
                    action: name.clone(),
                });
                if abort {
                    // The peer failed meanwhile: roll back now.
                    self.start_rollback();
                } else {
                    self.next_action();
                }
            }
            (false, Err(e)) => {
                ex.failure = Some(format!("{name} failed: {e}"));
                let rid = t
                    .stage
                    .resolution()
                    .map(|r| r.packet_id.to_string())
                    .unwrap_or_default();
                self.audit(AgentEvent::ActionFailed {
                    action: name.clone(),
                    error: e.to_string(),
                });
                let _ = self.send_packet(Body::ExecutionReport(ExecutionReport {
                    resolution_id: rid,
                    status: "failed".into(),
                    failed_action: Some(name.clone()),
                    error: Some(e.clone()),
                }));
                self.notify(
                    NotifyKind::Failed,
                    format!(
                        "{name} failed: {e}. Undoing what was done and looking for an alternative."
                    ),
                );
                self.set_state(ThreadState::Failed, "an action failed");
                self.start_rollback();
            }
        }
    }

    pub(in crate::agent) fn next_action(&mut self) {
        let id = self.id;
        let t = &mut *self.t;
        let details = t
            .stage
            .resolution()
            .map(|r| r.body.proposal.details.clone())
            .unwrap_or_default();
        let Some(ex) = t.stage.execution_mut() else {
            return;
        };
        if ex.in_flight.is_some() {
            return;
        }
        // Next: the last done action to undo while rolling back, else the next to do.
        let next = if t.state == ThreadState::Rollback {
            match ex.undo_queue.pop() {
                Some(i) => Some((i, true)),
                None => {
                    self.rollback_done();
                    return;
                }
            }
        } else {
            (ex.done < ex.mine.len()).then_some((ex.done, false))
        };
        if let Some((i, undo)) = next {
            let aid = self.shared.meta.next_action;
            self.shared.meta.next_action += 1;
            self.shared.dirty.meta = true;
            ex.in_flight = Some((aid, i, undo));
            let action = ex.mine.get(i).cloned();
            self.mark_changed();
            if let Some(action) = action {
                self.shared
                    .buf
                    .action
                    .push(Output::ExecuteAction(ActionRequest {
                        id: aid,
                        thread_id: id.into(),
                        action,
                        details,
                        undo,
                        check: false,
                    }));
            }
            return;
        }
        // All of mine done.
        if !ex.reported {
            ex.reported = true;
            let rid = t
                .stage
                .resolution()
                .map(|r| r.packet_id.clone())
                .unwrap_or_default();
            self.mark_changed();
            let _ = self.send_packet(Body::ExecutionReport(ExecutionReport {
                resolution_id: rid,
                status: "completed".into(),
                failed_action: None,
                error: None,
            }));
        }
        self.maybe_complete();
    }

    pub(in crate::agent) fn maybe_complete(&mut self) {
        let t = &*self.t;
        let Some(ex) = t.stage.execution() else {
            return;
        };
        if t.state == ThreadState::Executing
            && ex.reported
            && ex.peer_completed
            && ex.in_flight.is_none()
        {
            let summary = t
                .stage
                .resolution()
                .map(|r| r.body.proposal.summary.clone())
                .unwrap_or_default();
            self.set_state(ThreadState::Completed, "all actions succeeded");
            self.set_waiting(Waiting::Nothing);
            self.notify(NotifyKind::Completed, format!("Done: {summary}"));
            self.end_thread();
        } else if t.state == ThreadState::Executing && ex.reported {
            self.set_waiting(Waiting::Peer);
        }
    }

    pub(in crate::agent) fn on_execution_report(&mut self, r: ExecutionReport) {
        let t = &mut *self.t;
        if t.stage
            .resolution()
            .is_none_or(|x| x.packet_id != r.resolution_id)
        {
            return;
        }
        let Some(ex) = t.stage.execution_mut() else {
            if t.state == ThreadState::Proposed {
                // The peer confirmed and finished before its confirmation reached here
                // (reordering, or a gap re-send): keep the report for the execution.
                t.held.early_report = Some(r);
                self.mark_changed();
            }
            return;
        };
        match r.status.as_str() {
            "completed" => {
                ex.peer_completed = true;
                self.mark_changed();
                self.maybe_complete();
            }
            _ => {
                let what = format!(
                    "{} failed on the other side: {}",
                    r.failed_action.unwrap_or_default(),
                    r.error.unwrap_or_default()
                );
                if ex.failure.is_none() {
                    ex.failure = Some(what.clone());
                }
                self.shared.dirty.threads.insert(self.id.to_string());
                let executing = t.state == ThreadState::Executing;
                self.notify(
                    NotifyKind::Failed,
                    format!("{what}. Undoing what was done here."),
                );
                if executing {
                    self.set_state(ThreadState::Failed, "the other agent's action failed");
                }
                self.start_rollback();
            }
        }
    }

    /// The other side ended the thread while this side was carrying it out: record why
    /// (`failure`) and how the thread ends after the undo (`mark`), tell the user, and
    /// undo what was done here (FAILED, then ROLLBACK).
    pub(in crate::agent) fn withdraw_execution(
        &mut self,
        failure: String,
        mark: impl FnOnce(&mut Execution),
        kind: NotifyKind,
        notice: String,
        why: &str,
    ) {
        if let Some(ex) = self.t.stage.execution_mut() {
            ex.failure = Some(failure);
            mark(ex);
        }
        self.mark_changed();
        self.notify(kind, notice);
        self.set_state(ThreadState::Failed, why);
        self.start_rollback();
    }

    pub(in crate::agent) fn start_rollback(&mut self) {
        let t = &mut *self.t;
        let Some(ex) = t.stage.execution_mut() else {
            return;
        };
        if ex.in_flight.is_some() {
            return; // resumes when the running action reports
        }
        ex.undo_queue = (0..ex.done)
            .filter(|i| ex.mine.get(*i).is_some_and(|a| a.reversible))
            .collect();
        let executing = t.state == ThreadState::Executing;
        self.mark_changed();
        if executing {
            self.set_state(ThreadState::Failed, "execution aborted");
        }
        self.set_state(ThreadState::Rollback, "undoing reversible actions");
        self.next_action();
    }

    pub(in crate::agent) fn rollback_done(&mut self) {
        let me = self.shared.config.address.clone();
        let t = &mut *self.t;
        let failure = t
            .stage
            .execution()
            .and_then(|e| e.failure.clone())
            .unwrap_or_else(|| "an action failed".into());
        // A cancel or an expiry on the other side ends the thread once the undo is done;
        // anything waiting for the next proposal goes with it.
        let end = match t.stage.execution() {
            Some(e) if e.cancelled => Some(ThreadState::Declined),
            Some(e) if e.expired => Some(ThreadState::Expired),
            _ => None,
        };
        if let Some(end) = end {
            t.stage.clear_execution();
            t.held.deferred_resolution = None;
            t.held.early_answers.clear();
            self.mark_changed();
            self.set_state(end, &failure);
            return;
        }
        t.stage.clear_execution();
        let proposer = t.stage.resolution().map(|r| r.proposer.clone());
        if let Some(r) = t.stage.take_resolution() {
            t.rejected.push(Rejected {
                summary: r.body.proposal.summary,
                details: r.body.proposal.details,
                reason: failure.clone(),
            });
        }
        self.mark_changed();
        self.set_state(
            ThreadState::Negotiating,
            &format!("re-negotiating: {failure}"),
        );
        if let Some((pid, from, body)) = self.t.held.deferred_resolution.take() {
            self.on_resolution(pid, from, body);
        } else if proposer.as_ref() == Some(&me) {
            self.take_turn();
        } else {
            self.set_waiting(Waiting::Peer);
        }
    }
}
