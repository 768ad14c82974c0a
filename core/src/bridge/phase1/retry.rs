//! The client's side of seed 001: how long to wait for an acknowledgement, and whether and
//! when to send a message again.
//!
//! - A failure is retried only if it is `TIMEOUT`, `INTERNAL_ERROR` or a network error (the
//!   connection refused or reset, the name not resolved, no answer within the
//!   acknowledgement deadline); never an error the receiver gave about the message itself.
//! - At most [`MAX_ATTEMPTS`] attempts; the waits between them start at 1 s and double
//!   (1 s, then 2 s), and all waits together never exceed [`MAX_TOTAL_WAIT_MS`] (15 s).
//! - Each attempt waits for its acknowledgement [`ack_deadline_ms`]: 30 s for a
//!   `task_assignment`, 10 s for a `task_completion` and for everything else.
//!
//! [`next_attempt`] is pure: the caller keeps the count and the time waited so far. The
//! schedule itself (attempts, waits) is the bridges' shared one, `crate::bridge::retry`.

use super::envelope::ErrorCode;
pub use crate::bridge::retry::{FIRST_WAIT_MS, MAX_ATTEMPTS, MAX_TOTAL_WAIT_MS};

/// Why an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The receiver answered with this error code.
    Refused(ErrorCode),
    /// No answer: the connection failed, or no acknowledgement within the deadline.
    Network,
}

impl Failure {
    /// Whether sending again may help.
    pub fn retryable(self) -> bool {
        match self {
            Failure::Refused(c) => c.retryable(),
            Failure::Network => true,
        }
    }
}

/// How long an attempt to send a message of `message_type` waits for its
/// acknowledgement, in milliseconds (seed 001 "Response Requirements").
pub fn ack_deadline_ms(message_type: &str) -> u64 {
    match message_type {
        "task_assignment" => 30_000,
        _ => 10_000,
    }
}

/// After attempt number `attempts` (1 for the first) failed with `failure`, having
/// already waited `waited_ms` between attempts: how long to wait before the next one, or
/// `None` to give up.
pub fn next_attempt(attempts: u32, waited_ms: u64, failure: Failure) -> Option<u64> {
    if !failure.retryable() {
        return None;
    }
    crate::bridge::retry::next_wait(attempts, waited_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_failures_are_tried_three_times_one_then_two_seconds_apart() {
        for f in [
            Failure::Network,
            Failure::Refused(ErrorCode::Timeout),
            Failure::Refused(ErrorCode::InternalError),
        ] {
            assert_eq!(next_attempt(1, 0, f), Some(1_000));
            assert_eq!(next_attempt(2, 1_000, f), Some(2_000));
            assert_eq!(next_attempt(3, 3_000, f), None, "at most 3 attempts");
        }
    }

    #[test]
    fn errors_about_the_message_are_never_retried() {
        for c in ErrorCode::ALL {
            let expected = matches!(c, ErrorCode::Timeout | ErrorCode::InternalError);
            assert_eq!(
                next_attempt(1, 0, Failure::Refused(c)).is_some(),
                expected,
                "{c}"
            );
        }
    }

    #[test]
    fn the_waits_never_add_up_past_fifteen_seconds() {
        assert_eq!(next_attempt(2, 13_500, Failure::Network), None);
        assert_eq!(next_attempt(2, 13_000, Failure::Network), Some(2_000));
        assert_eq!(next_attempt(0, 0, Failure::Network), None);
        assert_eq!(next_attempt(u32::MAX, 0, Failure::Network), None);
    }

    #[test]
    fn acknowledgement_deadlines_are_the_seeds() {
        assert_eq!(ack_deadline_ms("task_assignment"), 30_000);
        assert_eq!(ack_deadline_ms("task_completion"), 10_000);
    }
}
