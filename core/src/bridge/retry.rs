//! The bridges' one retry schedule: how many attempts a call to another protocol's peer
//! gets, and how long to wait between them. Seed 001 ("Retry Logic") states it for the
//! Phase-1 envelope; the A2A client direction follows the same schedule (SPEC-NOTES "The
//! A2A v1.0 bridge: the client direction"), so it lives here, beside both bridges.
//!
//! - At most [`MAX_ATTEMPTS`] attempts; the waits between them start at [`FIRST_WAIT_MS`]
//!   (1 s) and double (1 s, then 2 s), and all waits together never exceed
//!   [`MAX_TOTAL_WAIT_MS`] (15 s).
//!
//! Which failures are worth another attempt is each bridge's own rule (Phase 1:
//! `crate::bridge::phase1::retry::Failure`; the A2A client: network failures). [`next_wait`]
//! is pure: the caller keeps the count and the time waited so far.

/// Attempts in all, the first included.
pub const MAX_ATTEMPTS: u32 = 3;

/// The first wait between attempts, in milliseconds.
pub const FIRST_WAIT_MS: u64 = 1_000;

/// The most a client waits between attempts, all waits together, in milliseconds.
pub const MAX_TOTAL_WAIT_MS: u64 = 15_000;

/// After attempt number `attempts` (1 for the first) failed in a way worth another
/// attempt, having already waited `waited_ms` between attempts: how long to wait before
/// the next one, or `None` once the schedule is spent.
pub fn next_wait(attempts: u32, waited_ms: u64) -> Option<u64> {
    if attempts >= MAX_ATTEMPTS || attempts == 0 {
        return None;
    }
    let wait = FIRST_WAIT_MS.checked_shl(attempts - 1)?;
    (waited_ms.saturating_add(wait) <= MAX_TOTAL_WAIT_MS).then_some(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_attempts_one_then_two_seconds_apart() {
        assert_eq!(next_wait(1, 0), Some(1_000));
        assert_eq!(next_wait(2, 1_000), Some(2_000));
        assert_eq!(next_wait(3, 3_000), None, "at most 3 attempts");
    }

    #[test]
    fn the_waits_never_add_up_past_fifteen_seconds() {
        assert_eq!(next_wait(2, 13_500), None);
        assert_eq!(next_wait(2, 13_000), Some(2_000));
        assert_eq!(next_wait(0, 0), None);
        assert_eq!(next_wait(u32::MAX, 0), None);
    }
}
