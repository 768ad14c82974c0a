//! A peer's reputation as this agent sees it (spec §16 "reputation scores"): a score
//! computed from the agent's own observations of that peer, shown in `a2acp memory show`
//! (SPEC-NOTES "Federation: reputation", the agent's side).
//!
//! The rule: an integer in −100..=100, from what the agent keeps about the peer anyway
//! (nothing new is recorded, so the score costs no write and survives every restart
//! exactly as its observations do):
//!
//! | observation | weight |
//! |---|---|
//! | a thread with it completed (§11.1 `interaction_count`) | +2 each |
//! | a malformed packet from it (§13.4) | −5 each |
//! | something refused past the limits per peer (threads, fork children, packets) | −2 each |
//! | a changed identity key not yet accepted by the user (§16) | −25 |
//!
//! It informs the person; it decides nothing the limits per peer and the user's blocks do
//! not already decide.

use serde::{Deserialize, Serialize};

use super::super::Agent;
use crate::address::Address;

/// Most and least a score can be.
const MAX: i64 = 100;

/// A peer's reputation and the observations it is computed from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Reputation {
    /// The score, −100..=100; 0 for a peer the agent knows nothing about.
    pub score: i32,
    /// Threads with the peer that completed.
    pub completed: u64,
    /// Malformed packets received from it.
    pub malformed: u32,
    /// What was refused of it past the limits per peer.
    pub refused: u64,
    /// It presented a key other than the pinned one and the user has not accepted it.
    pub key_changed: bool,
}

impl Reputation {
    /// The score of these observations.
    fn scored(mut self) -> Self {
        let s = i64::try_from(self.completed)
            .unwrap_or(i64::MAX / 4)
            .saturating_mul(2)
            - i64::from(self.malformed).saturating_mul(5)
            - i64::try_from(self.refused)
                .unwrap_or(i64::MAX / 4)
                .saturating_mul(2)
            - if self.key_changed { 25 } else { 0 };
        self.score = i32::try_from(s.clamp(-MAX, MAX)).unwrap_or(0);
        self
    }

    /// One word for the score: `good` (≥ 20), `poor` (≤ −20), `bad` (≤ −50), else
    /// `neutral`.
    pub fn word(&self) -> &'static str {
        match self.score {
            s if s <= -50 => "bad",
            s if s <= -20 => "poor",
            s if s >= 20 => "good",
            _ => "neutral",
        }
    }
}

impl Agent {
    /// `peer`'s reputation from this agent's own observations.
    pub fn reputation(&self, peer: &Address) -> Reputation {
        let rec = self.shared.peers.get(peer);
        Reputation {
            score: 0,
            completed: self
                .shared
                .memory
                .relationship(peer.as_str(), self.shared.now)
                .map_or(0, |r| r.interaction_count),
            malformed: rec.map_or(0, |r| r.malformed),
            refused: rec.map_or(0, |r| r.refused.total()),
            key_changed: rec.is_some_and(|r| r.changed_key.is_some()),
        }
        .scored()
    }
}

#[cfg(test)]
mod tests {
    use super::Reputation;

    fn score(
        completed: u64,
        malformed: u32,
        refused: u64,
        key_changed: bool,
    ) -> (i32, &'static str) {
        let r = Reputation {
            score: 0,
            completed,
            malformed,
            refused,
            key_changed,
        }
        .scored();
        (r.score, r.word())
    }

    #[test]
    fn the_rule() {
        assert_eq!(score(0, 0, 0, false), (0, "neutral"));
        assert_eq!(score(10, 0, 0, false), (20, "good"));
        assert_eq!(score(1_000, 0, 0, false), (100, "good"), "capped");
        assert_eq!(score(2, 1, 0, false), (-1, "neutral"));
        assert_eq!(score(0, 0, 10, false), (-20, "poor"));
        assert_eq!(score(0, 0, 0, true), (-25, "poor"));
        assert_eq!(score(0, 10, 0, true), (-75, "bad"));
        assert_eq!(
            score(0, u32::MAX, u64::MAX, true),
            (-100, "bad"),
            "no overflow"
        );
        assert_eq!(score(u64::MAX, 0, 0, false), (100, "good"), "no overflow");
    }
}
