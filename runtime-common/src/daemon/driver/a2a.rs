//! The A2A calls held by the loop: blocking sends and open streams.

use std::time::Instant;

use super::*;

impl Driver {
    /// Answers the blocking `SendMessage`s whose task is now terminal or interrupted, or
    /// whose deadline passed (the task as it stands); forgets those whose client left.
    pub(super) fn answer_waiting(&mut self) {
        if self.waiting.is_empty() {
            return;
        }
        let now = Instant::now();
        let agent = self.host.agent();
        self.waiting.retain(|(w, deadline, reply)| {
            if reply.is_disconnected() {
                return false;
            }
            match a2acp_core::bridge::a2a::Server::waited(agent, w, now >= *deadline) {
                Some(response) => {
                    let _ = reply.send(crate::a2a::A2aAnswer {
                        response,
                        events: None,
                        streaming: false,
                    });
                    false
                }
                None => true,
            }
        });
    }

    /// Tells the A2A streams of these tasks what changed; a stream whose task is now
    /// terminal or interrupted gets its last event and closes, as does one whose reader
    /// fell [`STREAM_BUFFER`](crate::a2a::STREAM_BUFFER) events behind or left.
    ///
    /// Every stream's task is looked at, not only those the effects name: a task changes
    /// state without a packet to its client too (its cancel, its user's answer).
    pub(super) fn push_streams(&mut self) {
        use a2acp_core::bridge::a2a::task;
        let agent = self.host.agent();
        self.streams.retain_mut(|(s, id, tx)| {
            if tx.is_disconnected() {
                return false;
            }
            let Some(t) = agent.thread_view(&s.task_id) else {
                return false;
            };
            for ev in task::update_events(&t, Some(s.state), s.artifact.as_deref()) {
                let msg = serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": ev });
                if tx.try_send(msg).is_err() {
                    return false;
                }
            }
            s.state = task::task_state(&t);
            s.artifact = task::artifact_id(&t);
            !s.ends_at(s.state)
        });
    }
}
