//! The figure of issue 34 part 5: the simulated time from `keys rotate` to every peer
//! re-pinned. Every agent that pinned an agent's key (`KeyPinned`) is a peer of it; a
//! rotation started by the user's `rotate_key` command waits for each peer that pinned the
//! old key to re-pin the new one from the statement (`KeyRotated`); the time to the last
//! one is the figure. A peer that had not re-pinned when the run ended leaves the rotation
//! unfinished.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use a2acp_core::Timestamp;

/// One rotation and how long its peers took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationFigure {
    /// The agent that rotated.
    pub agent: String,
    /// The peers that had pinned its key when it rotated.
    pub peers: usize,
    /// Those that re-pinned the new key by the end of the run.
    pub repinned: usize,
    /// From the rotation to the last peer re-pinned (`None`: not every peer had by the
    /// end of the run).
    pub to_all: Option<Duration>,
}

#[derive(Debug)]
struct Open {
    node: usize,
    at: Timestamp,
    peers: usize,
    waiting: BTreeSet<usize>,
    last: Timestamp,
}

/// What the run knows of pins and rotations.
#[derive(Debug, Default)]
pub(super) struct KeyLog {
    pinned_by: BTreeMap<usize, BTreeSet<usize>>,
    open: Vec<Open>,
    done: Vec<(usize, RotationFigure)>,
}

impl KeyLog {
    /// `peer` pinned `node`'s key.
    pub(super) fn pinned(&mut self, node: usize, peer: usize) {
        if node != peer {
            self.pinned_by.entry(node).or_default().insert(peer);
        }
    }

    /// `node` starts a rotation at `at`.
    pub(super) fn rotated(&mut self, node: usize, at: Timestamp) {
        let waiting = self.pinned_by.get(&node).cloned().unwrap_or_default();
        self.open.push(Open {
            node,
            at,
            peers: waiting.len(),
            waiting,
            last: at,
        });
    }

    /// `peer` re-pinned `node`'s new key at `at`: every rotation of `node` it was waiting
    /// for is answered (a later key re-pinned answers the earlier rotations too).
    pub(super) fn repinned(&mut self, node: usize, peer: usize, at: Timestamp, names: &[String]) {
        let mut k = 0;
        while k < self.open.len() {
            let o = &mut self.open[k];
            if o.node == node && o.waiting.remove(&peer) {
                o.last = at;
            }
            if o.node == node && o.waiting.is_empty() && o.peers > 0 {
                let o = self.open.remove(k);
                self.done.push((
                    o.node,
                    RotationFigure {
                        agent: names.get(o.node).cloned().unwrap_or_default(),
                        peers: o.peers,
                        repinned: o.peers,
                        to_all: Some(o.last.since(o.at)),
                    },
                ));
                continue;
            }
            k += 1;
        }
    }

    /// Every rotation of the run, in the order they started or finished.
    pub(super) fn figures(&self, names: &[String]) -> Vec<RotationFigure> {
        let mut out: Vec<RotationFigure> = self.done.iter().map(|(_, f)| f.clone()).collect();
        out.extend(self.open.iter().map(|o| RotationFigure {
            agent: names.get(o.node).cloned().unwrap_or_default(),
            peers: o.peers,
            repinned: o.peers - o.waiting.len(),
            to_all: None,
        }));
        out
    }
}

/// The median and the worst of `xs` (`None` when empty).
pub fn median_and_worst(xs: &[Duration]) -> Option<(Duration, Duration)> {
    let mut v = xs.to_vec();
    v.sort();
    let worst = *v.last()?;
    Some((v[v.len() / 2], worst))
}
