//! Deliveries sent without waiting for the commit (module documentation, step 2; SPEC-NOTES,
//! the relay link: deliveries before the commit). The state machine's thread keeps every
//! open connection's outgoing channel and sends a `deliver` to it at once, unless the
//! delivery must wait for a batch to be committed and executed first:
//!
//! - the connection's `auth_ok` (its batch): no delivery overtakes it;
//! - the reservation of delivery ids covering the delivery's id (its batch): the id is
//!   then durable below the high-water mark, never handed out again after a crash. The
//!   relay reserves ids far ahead of those it hands out, so under steady load that batch
//!   was committed long before and the delivery does not wait.
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
pub(super) struct EarlyConns {
    conns: HashMap<ConnId, Conn>,
    /// Connections with parked deliveries.
    parked: BTreeSet<ConnId>,
    /// Reservations of delivery ids not yet known executed, oldest first: the batch that
    /// persists each, and the ids it covers (those below).
    reservations: VecDeque<(u64, u64)>,
    /// Ids below this are covered by a reservation already committed.
    covered: u64,
}

impl EarlyConns {
    /// No connection yet; ids below `covered` are covered by a committed reservation
    /// (those of the relay as restored).
    pub(super) fn new(covered: u64) -> Self {
        EarlyConns {
            conns: HashMap::new(),
            parked: BTreeSet::new(),
            reservations: VecDeque::new(),
            covered,
        }
    }

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

    /// `batch` persists a reservation of the delivery ids below `upto`.
    pub(super) fn reserved(&mut self, batch: u64, upto: u64) {
        self.reservations.push_back((batch, upto));
    }

    /// The batch to be executed before delivery `id` may leave (0: none): the first
    /// reservation covering it, unless one already committed does. An id no reservation
    /// known covers (none should be) waits for the last one.
    fn covering(&mut self, id: u64, executed: u64) -> u64 {
        while let Some(&(batch, upto)) = self.reservations.front() {
            if batch > executed {
                break;
            }
            self.covered = self.covered.max(upto);
            self.reservations.pop_front();
        }
        if id < self.covered {
            return 0;
        }
        self.reservations
            .iter()
            .find(|&&(_, upto)| id < upto)
            .or(self.reservations.back())
            .map_or(0, |&(batch, _)| batch)
    }

    /// Whether deliveries wait for a batch to be executed.
    pub(super) fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Sends `bytes` (a `deliver` of delivery `id`) to `conn` now, or parks it until
    /// `executed` (the last batch the committer executed) reaches what it waits for.
    pub(super) fn deliver(
        &mut self,
        conn: ConnId,
        id: u64,
        bytes: Vec<u8>,
        executed: u64,
    ) -> Outcome {
        if !self.conns.contains_key(&conn) {
            return Outcome::Unknown(bytes);
        }
        let covering = self.covering(id, executed);
        let Some(c) = self.conns.get_mut(&conn) else {
            return Outcome::Unknown(bytes);
        };
        let wait_for = c.ready_after.max(covering);
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
