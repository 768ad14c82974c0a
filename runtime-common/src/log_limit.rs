//! Log lines at a bounded rate: whatever a client does, the lines it can cause are
//! written at a bounded rate, and the ones held back are counted and reported.
//!
//! One limiter serves every such place: a call site that writes one kind of line keeps
//! its own limiter in a `static` ([`LogLimiter::new`]: at most one line per interval,
//! each line saying how many were held back before it); the relay service shares one for
//! all the lines clients can cause ([`LogLimiter::per_second`]: a burst, then a steady
//! rate, with the lines held back reported in periodic summaries,
//! [`LogLimiter::summary_at`]). Both are the core's token bucket
//! ([`a2acp_core::rate_limit::TokenBucket`]), the one the relay rate-limits frames with.
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

use a2acp_core::rate_limit::{TokenBucket, MILLI};
use a2acp_core::Timestamp;

/// Lines at a bounded rate: [`LogLimiter::allow`] says whether this occurrence may be
/// written and how many were held back since the last line written. A `const`
/// constructor, so a call site can keep its own in a `static`.
#[derive(Debug)]
pub struct LogLimiter {
    /// Capacity of the bucket, in tokens.
    burst: u32,
    /// Refill, tokens per second.
    per_sec: u32,
    /// What a line costs, in thousandths of a token.
    cost: u64,
    /// Created on first use (an `Instant` cannot be had in a `const`).
    state: Mutex<Option<LimiterState>>,
}

#[derive(Debug)]
struct LimiterState {
    /// The instant the bucket's timestamps count from.
    epoch: Instant,
    bucket: TokenBucket,
    /// Lines held back since the last line written.
    suppressed: u64,
    /// Lines held back since the last summary.
    unsummarised: u64,
    /// When the last summary was written (or the limiter was first used).
    last_summary: Instant,
}

impl LimiterState {
    fn new(now: Instant, burst: u32) -> Self {
        LimiterState {
            epoch: now,
            bucket: TokenBucket::full(Timestamp(0), burst),
            suppressed: 0,
            unsummarised: 0,
            last_summary: now,
        }
    }

    fn stamp(&self, now: Instant) -> Timestamp {
        let ms = now.saturating_duration_since(self.epoch).as_millis();
        Timestamp(u64::try_from(ms).unwrap_or(u64::MAX))
    }
}

impl LogLimiter {
    /// One line per `interval` at most (millisecond resolution; at most about 49 days).
    pub const fn new(interval: Duration) -> Self {
        // One token per millisecond, a bucket of one interval, a line costs all of it: a
        // line may be written when the interval has passed since the last one.
        let ms = interval.as_millis();
        let ms = if ms == 0 {
            1
        } else if ms > u32::MAX as u128 {
            u32::MAX
        } else {
            ms as u32
        };
        LogLimiter {
            burst: ms,
            per_sec: 1000,
            cost: ms as u64 * MILLI,
            state: Mutex::new(None),
        }
    }

    /// `burst` lines at once, then `per_sec` lines per second.
    pub const fn per_second(burst: u32, per_sec: u32) -> Self {
        LogLimiter {
            burst: if burst == 0 { 1 } else { burst },
            per_sec,
            cost: MILLI,
            state: Mutex::new(None),
        }
    }

    /// `Some(suppressed)`: write the line now, saying that `suppressed` occurrences since
    /// the previous line were not written; `None`: count this one and write nothing.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    /// [`LogLimiter::allow`] at a given instant.
    pub fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut guard = match self.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        let s = guard.get_or_insert_with(|| LimiterState::new(now, self.burst));
        let t = s.stamp(now);
        if s.bucket
            .try_take_milli(t, self.per_sec, self.burst, self.cost)
        {
            Some(std::mem::take(&mut s.suppressed))
        } else {
            s.suppressed = s.suppressed.saturating_add(1);
            s.unsummarised = s.unsummarised.saturating_add(1);
            None
        }
    }

    /// For a limiter whose lines do not say what was held back before them: the lines
    /// held back since the last summary and the time since it, at most once per `every`
    /// (counted from the first use) and only when there are some; the count starts again.
    pub fn summary_at(&self, now: Instant, every: Duration) -> Option<(u64, Duration)> {
        let mut guard = match self.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        let s = guard.as_mut()?;
        let since = now.saturating_duration_since(s.last_summary);
        if s.unsummarised == 0 || since < every {
            return None;
        }
        s.last_summary = now;
        Some((std::mem::take(&mut s.unsummarised), since))
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

    #[test]
    fn a_burst_then_a_rate_with_summaries_of_the_rest() {
        let l = LogLimiter::per_second(20, 2);
        let t0 = Instant::now();
        assert_eq!(l.summary_at(t0, Duration::ZERO), None, "not used yet");
        let allowed = (0..1000).filter(|_| l.allow_at(t0).is_some()).count();
        assert_eq!(allowed, 20);
        // Two lines per second: one more after 500 ms, saying how many were held back.
        assert_eq!(l.allow_at(t0 + Duration::from_millis(499)), None);
        assert_eq!(l.allow_at(t0 + Duration::from_millis(500)), Some(981));
        // A summary reports what was held back since the last one, at most every 10 s.
        let every = Duration::from_secs(10);
        assert_eq!(l.summary_at(t0 + Duration::from_secs(9), every), None);
        assert_eq!(
            l.summary_at(t0 + every, every),
            Some((981, every)),
            "the lines held back"
        );
        assert_eq!(
            l.summary_at(t0 + every * 3, every),
            None,
            "nothing held since"
        );
    }
}
