//! Deliveries sent without waiting for the commit (module documentation, step 2; SPEC-NOTES,
//! the relay link: deliveries before the commit). The state machine's thread keeps every
//! open connection's outgoing channel and sends a `deliver` to it at once, unless the
//! delivery must wait for a batch to be committed and executed first:
//!
//! - the connection's `auth_ok` (its batch): no delivery overtakes it;
//! - the last reservation of delivery ids (its batch): the id a delivery carries is then
//!   durable below the high-water mark, never handed out again after a crash.
//!
//! A delivery that must wait is parked on its connection (and later ones behind it, so they
//! stay in id order) and sent by the same thread once the committer has executed the batch
//! it waits for. The sender's `accepted` always goes through the committer, after the commit.

use std::collections::{BTreeSet, HashMap, VecDeque};

use a2acp_core::relay::ConnId;

use super::ConnOut;

/// A connection as the state machine's thread sends to it.
struct Conn {
    tx: flume::Sender<ConnOut>,
    /// The batch of its `auth_ok` (or of its opening).
    ready_after: u64,
    /// Deliveries waiting, in order, and the batch they wait for.
    parked: VecDeque<Vec<u8>>,
    wait_for: u64,
}

/// What became of a delivery.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Handed to the connection's channel, or parked behind a commit.
    Done,
    /// The connection's channel is full: drop it as a slow consumer.
    Slow,
    /// Not a connection this thread knows: the delivery goes with the batch.
    Unknown(Vec<u8>),
}

/// Every open connection's channel, and the deliveries parked behind a commit.
#[derive(Default)]
pub(super) struct EarlyConns {
    conns: HashMap<ConnId, Conn>,
    /// Connections with parked deliveries.
    parked: BTreeSet<ConnId>,
    /// The last batch that reserves delivery ids.
    reserved_in: u64,
}

impl EarlyConns {
    /// A connection opened in `batch`.
    pub(super) fn opened(&mut self, conn: ConnId, tx: &flume::Sender<ConnOut>, batch: u64) {
        self.conns.insert(
            conn,
            Conn {
                tx: tx.clone(),
                ready_after: batch,
                parked: VecDeque::new(),
                wait_for: 0,
            },
        );
    }

    /// The connection is gone (closed, dropped, or closed by its peer): its parked
    /// deliveries are dropped (the packets stay queued for its next connection).
    pub(super) fn closed(&mut self, conn: ConnId) {
        self.conns.remove(&conn);
        self.parked.remove(&conn);
    }

    /// The connection authenticated: its `auth_ok` goes with `batch`.
    pub(super) fn authenticated(&mut self, conn: ConnId, batch: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.ready_after = batch;
        }
    }

    /// `batch` reserves delivery ids.
    pub(super) fn reserved(&mut self, batch: u64) {
        self.reserved_in = batch;
    }

    /// Whether deliveries wait for a batch to be executed.
    pub(super) fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Sends `bytes` (a `deliver`) to `conn` now, or parks it until `executed` (the last
    /// batch the committer executed) reaches what it waits for.
    pub(super) fn deliver(&mut self, conn: ConnId, bytes: Vec<u8>, executed: u64) -> Outcome {
        let Some(c) = self.conns.get_mut(&conn) else {
            return Outcome::Unknown(bytes);
        };
        let wait_for = c.ready_after.max(self.reserved_in);
        if c.parked.is_empty() && wait_for <= executed {
            return match c.tx.try_send(ConnOut::Frame(bytes)) {
                Ok(()) | Err(flume::TrySendError::Disconnected(_)) => Outcome::Done,
                Err(flume::TrySendError::Full(_)) => Outcome::Slow,
            };
        }
        c.parked.push_back(bytes);
        c.wait_for = c.wait_for.max(wait_for);
        self.parked.insert(conn);
        Outcome::Done
    }

    /// Sends the parked deliveries whose batch is executed; returns the connections found
    /// slow meanwhile (to drop).
    pub(super) fn release(&mut self, executed: u64) -> Vec<ConnId> {
        let mut slow = Vec::new();
        let conns = &mut self.conns;
        self.parked.retain(|conn| {
            let Some(c) = conns.get_mut(conn) else {
                return false;
            };
            if c.wait_for > executed {
                return true;
            }
            while let Some(bytes) = c.parked.pop_front() {
                if let Err(flume::TrySendError::Full(_)) = c.tx.try_send(ConnOut::Frame(bytes)) {
                    slow.push(*conn);
                    break;
                }
            }
            c.parked.clear();
            false
        });
        slow
    }

    /// Forgets every connection (the committer's senders alone then decide when the
    /// connections' channels close).
    pub(super) fn clear(&mut self) {
        self.conns.clear();
        self.parked.clear();
    }
}
