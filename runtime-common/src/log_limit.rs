//! Log lines at a bounded rate: whatever a client does, a line it can cause is written at
//! most once per interval, with the number of occurrences it stood for.
//!
//! ```
//! use std::time::Duration;
//! use a2acp_runtime::log_limit::LogLimiter;
//!
//! static ACCEPT_FAILED: LogLimiter = LogLimiter::new(Duration::from_secs(10));
//! if let Some(suppressed) = ACCEPT_FAILED.allow() {
//!     tracing::warn!(suppressed, "accept failed");
//! }
//! ```

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one line per interval: [`LogLimiter::allow`] says whether this occurrence may
/// be written and how many were suppressed since the last line. A `const` constructor, so
/// a call site can keep its own in a `static`.
#[derive(Debug)]
pub struct LogLimiter {
    interval: Duration,
    state: Mutex<LimiterState>,
}

#[derive(Debug, Clone, Copy)]
struct LimiterState {
    last: Option<Instant>,
    suppressed: u64,
}

impl LogLimiter {
    /// One line per `interval` at most.
    pub const fn new(interval: Duration) -> Self {
        LogLimiter {
            interval,
            state: Mutex::new(LimiterState {
                last: None,
                suppressed: 0,
            }),
        }
    }

    /// `Some(suppressed)`: write the line now, saying that `suppressed` occurrences since
    /// the previous line were not written; `None`: count this one and write nothing.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    /// [`LogLimiter::allow`] at a given instant.
    pub fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut s = match self.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        match s.last {
            Some(last) if now.saturating_duration_since(last) < self.interval => {
                s.suppressed = s.suppressed.saturating_add(1);
                None
            }
            _ => {
                s.last = Some(now);
                Some(std::mem::take(&mut s.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_of_the_rest() {
        let l = LogLimiter::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(l.allow_at(t0), Some(0));
        for i in 1..=1000 {
            assert_eq!(l.allow_at(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(l.allow_at(t0 + Duration::from_secs(10)), Some(1000));
        assert_eq!(l.allow_at(t0 + Duration::from_secs(11)), None);
        assert_eq!(l.allow_at(t0 + Duration::from_secs(25)), Some(1));
    }
}
