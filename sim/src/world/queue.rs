//! The event queue: events ordered by `(time, sequence)`, so events at the same instant
//! run in the order they were scheduled.
//!
//! A binary heap of small entries (the key and the boxed event: sifting moves 24 bytes,
//! not the event); an event taken back before it runs (a timer re-armed, a participant
//! crashed) is marked and skipped when it comes up, never run and never counted.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};

use a2acp_core::Timestamp;

use super::events::Ev;

/// An event's place in the queue: its time, then its sequence number.
pub(super) type Key = (Timestamp, u64);

/// One scheduled event.
#[derive(Debug)]
struct Scheduled {
    key: Key,
    ev: Box<Ev>,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    /// Reversed: the heap's greatest is the earliest event.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.cmp(&self.key)
    }
}

/// The events still to run.
#[derive(Debug, Default)]
pub(super) struct Queue {
    heap: BinaryHeap<Scheduled>,
    /// Sequence numbers of events taken back (only looked up, never iterated).
    cancelled: HashSet<u64>,
}

impl Queue {
    /// Schedules `ev` at `key` (sequence numbers are unique).
    pub(super) fn insert(&mut self, key: Key, ev: Ev) {
        self.heap.push(Scheduled {
            key,
            ev: Box::new(ev),
        });
    }

    /// Takes back the event scheduled at `key`, if it has not run.
    pub(super) fn remove(&mut self, key: &Key) {
        self.cancelled.insert(key.1);
    }

    /// The key of the next event to run.
    pub(super) fn first_key(&mut self) -> Option<Key> {
        while let Some(s) = self.heap.peek() {
            if !self.cancelled.remove(&s.key.1) {
                return Some(s.key);
            }
            self.heap.pop();
        }
        None
    }

    /// Takes the next event to run.
    pub(super) fn pop_first(&mut self) -> Option<(Key, Ev)> {
        self.first_key()?;
        self.heap.pop().map(|s| (s.key, *s.ev))
    }
}
