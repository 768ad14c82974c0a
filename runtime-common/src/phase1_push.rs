//! The Phase-1 bridge's messages to its senders ([`Bridged::Message`]): a task's
//! `status_update`s and its `task_completion`, sent to the endpoint its assignment named,
//! off the agent's loop. One worker thread sends them in the order the agent put them
//! out, each with the seed's retry rule (the core's
//! [`Sender`](a2acp_core::bridge::phase1::sender::Sender) over [`crate::phase1_sender::send`]: at
//! most three attempts, 15 s of waiting between them). Nothing comes back to the agent: a
//! message not delivered is logged, and the sender can still ask where its task stands.
//! No protocol decision here.
//!
//! [`Bridged::Message`]: a2acp_core::agent::Bridged::Message

use a2acp_core::agent::BridgeMessage as Phase1Push;
use a2acp_core::bridge::phase1::sender::{Outcome, Sender, SenderConfig};

use crate::phase1_sender::{send, SendOptions};

/// Messages waiting to be sent at most; more are dropped (and logged): a sender whose
/// endpoint does not answer cannot make the agent hold an unbounded queue.
pub const MAX_QUEUED: usize = 256;

/// The worker: a queue and the thread that empties it (ended when this is dropped).
#[derive(Debug)]
pub struct Phase1Pusher {
    tx: flume::Sender<Phase1Push>,
}

impl Default for Phase1Pusher {
    fn default() -> Self {
        Self::new()
    }
}

impl Phase1Pusher {
    /// Starts the worker thread.
    pub fn new() -> Self {
        let (tx, rx) = flume::bounded::<Phase1Push>(MAX_QUEUED);
        let spawned = std::thread::Builder::new()
            .name("phase1-push".into())
            .spawn(move || {
                for p in rx.iter() {
                    deliver(&p);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no Phase-1 push thread: updates are not sent");
        }
        Phase1Pusher { tx }
    }

    /// Queues one message (dropped, and logged, when the queue is full).
    pub fn submit(&self, p: Phase1Push) {
        if let Err(e) = self.tx.try_send(p) {
            let p = e.into_inner();
            tracing::warn!(thread = %p.thread_id, endpoint = %p.endpoint, "Phase-1 update dropped: the queue is full");
        }
    }
}

/// Sends one message, blocking until the sending ends.
fn deliver(p: &Phase1Push) {
    let sender = match Sender::from_body(p.body.as_bytes(), crate::now(), SenderConfig::default()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(thread = %p.thread_id, error = %e.message, "Phase-1 update not valid: not sent");
            return;
        }
    };
    match send(&p.endpoint, sender, &SendOptions::default(), |_| {}) {
        Ok(Outcome::Acknowledged { .. }) => {
            tracing::debug!(thread = %p.thread_id, endpoint = %p.endpoint, "Phase-1 update delivered");
        }
        Ok(o) => {
            tracing::warn!(thread = %p.thread_id, endpoint = %p.endpoint, outcome = ?o, "Phase-1 update not delivered");
        }
        Err(e) => {
            tracing::warn!(thread = %p.thread_id, endpoint = %p.endpoint, error = %e, "Phase-1 update not sent");
        }
    }
}
