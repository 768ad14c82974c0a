//! Reputation (spec §16): a score per remote domain and per remote sender, from what this
//! relay observed, that deprioritises and then refuses (SPEC-NOTES "Federation:
//! reputation").
//!
//! The rule: a score is an integer in −100..=100, starting at 0.
//!
//! | observation | change |
//! |---|---|
//! | a well-formed packet accepted | +1 |
//! | a push refused for its sender's rate (spam) | −2 |
//! | a push for an address nobody registered | −1 |
//! | garbage on the link, a frame beyond its budget, a failed link authentication | −10 |
//! | a lie: a bad signature, a sender not on the domain, a changed key | −25 |
//!
//! A negative score recovers by 1 every 10 s without observations (computed lazily). A
//! sender's rate (and a domain's) is scaled by `(100 + score) / 100` while the score is
//! negative (at least 1 per second): *deprioritised*. At −50 or below, the sender's pushes
//! are rejected (`rate_limited`), and the domain's links are closed and refused
//! (`domain_refused`): *refused*. Sender observations are per sender; link observations
//! (garbage, lies, failed authentication) are the relay's and count against its domain,
//! so one spamming agent is throttled without its domain's honest agents being slowed.

use crate::time::Timestamp;

/// Most and least a score can be.
pub(super) const MAX: i32 = 100;
/// At or below this, refused.
pub(super) const REFUSE_AT: i32 = -50;
/// A negative score recovers by one point per this many milliseconds.
const RECOVER_MS: u64 = 10_000;

/// What was observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Observation {
    /// A well-formed packet accepted.
    WellFormed,
    /// A push refused for its sender's rate.
    Spam,
    /// A push for an address nobody registered.
    Unknown,
    /// Garbage, frames beyond the budget, a failed link authentication.
    Malformed,
    /// A lie.
    Lie,
}

impl Observation {
    fn delta(self) -> i32 {
        match self {
            Observation::WellFormed => 1,
            Observation::Spam => -2,
            Observation::Unknown => -1,
            Observation::Malformed => -10,
            Observation::Lie => -25,
        }
    }
}

/// A reputation score.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Score {
    value: i32,
    at: Timestamp,
}

impl Score {
    /// The score at `now` (negative scores recovered).
    pub(super) fn value(&self, now: Timestamp) -> i32 {
        if self.value >= 0 {
            return self.value;
        }
        let steps = now.as_millis().saturating_sub(self.at.as_millis()) / RECOVER_MS;
        let steps = i32::try_from(steps).unwrap_or(i32::MAX);
        self.value.saturating_add(steps).min(0)
    }

    /// Records an observation.
    pub(super) fn observe(&mut self, now: Timestamp, o: Observation) {
        let v = self.value(now);
        let v = v.saturating_add(o.delta()).clamp(-MAX, MAX);
        self.value = v;
        self.at = now;
    }

    /// Whether refused now.
    pub(super) fn refused(&self, now: Timestamp) -> bool {
        self.value(now) <= REFUSE_AT
    }

    /// `rate` scaled by the score (at least 1).
    pub(super) fn scale(&self, now: Timestamp, rate: u32) -> u32 {
        let v = self.value(now);
        if v >= 0 {
            return rate;
        }
        let scaled = u64::from(rate) * u64::from((MAX + v).unsigned_abs()) / 100;
        u32::try_from(scaled).unwrap_or(u32::MAX).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_move_the_score_within_bounds() {
        let t = Timestamp(1_000_000);
        let mut s = Score::default();
        for _ in 0..500 {
            s.observe(t, Observation::WellFormed);
        }
        assert_eq!(s.value(t), MAX);
        let mut s = Score::default();
        s.observe(t, Observation::Lie);
        s.observe(t, Observation::Lie);
        assert_eq!(s.value(t), -50);
        assert!(s.refused(t));
        for _ in 0..10 {
            s.observe(t, Observation::Lie);
        }
        assert_eq!(s.value(t), -MAX);
    }

    #[test]
    fn a_negative_score_recovers_and_scales_the_rate() {
        let t = Timestamp(1_000_000);
        let mut s = Score::default();
        for _ in 0..3 {
            s.observe(t, Observation::Lie);
        }
        assert_eq!(s.value(t), -75);
        assert_eq!(s.scale(t, 100), 25);
        // 10 s per point: 300 s later, −45: no longer refused, still deprioritised.
        let later = Timestamp(t.0 + 300_000);
        assert_eq!(s.value(later), -45);
        assert!(!s.refused(later));
        assert_eq!(s.scale(later, 100), 55);
        assert_eq!(s.value(Timestamp(t.0 + 10_000_000)), 0);
        assert_eq!(s.scale(t, 0), 1, "never below one per second");
    }
}
