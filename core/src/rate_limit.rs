//! Token buckets, computed lazily from the time of each use (no timer): the relay's frame
//! budgets, address buckets and refusal allowances, and the runtime's buckets (signature
//! checks per connection, log lines) use this one.

use crate::time::Timestamp;

/// Milli-tokens per token: integer arithmetic keeps the bucket exact and deterministic.
pub const MILLI: u64 = 1000;

/// A token bucket holding up to `burst` tokens, refilled at `rate` tokens per second.
///
/// Tokens are counted in thousandths so that a refill of `rate` tokens per second is
/// exactly `rate` milli-tokens per millisecond.
/// The bucket keeps no settings: `rate` and `burst` are passed on every call, so a bucket
/// per connection or address costs two words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    milli: u64,
    last: Timestamp,
}

impl TokenBucket {
    /// A full bucket.
    pub fn full(now: Timestamp, burst: u32) -> Self {
        TokenBucket {
            milli: u64::from(burst).saturating_mul(MILLI),
            last: now,
        }
    }

    /// A bucket holding nothing at `now` (it fills from then on).
    pub fn empty(now: Timestamp) -> Self {
        TokenBucket {
            milli: 0,
            last: now,
        }
    }

    fn refill(&mut self, now: Timestamp, rate: u32, burst: u32) {
        let elapsed = now.as_millis().saturating_sub(self.last.as_millis());
        let cap = u64::from(burst).saturating_mul(MILLI);
        self.milli = self
            .milli
            .saturating_add(elapsed.saturating_mul(u64::from(rate)))
            .min(cap);
        if now > self.last {
            self.last = now;
        }
    }

    /// Takes one token if there is one; `false` (and nothing taken) otherwise.
    pub fn try_take(&mut self, now: Timestamp, rate: u32, burst: u32) -> bool {
        self.try_take_milli(now, rate, burst, MILLI)
    }

    /// Takes `cost` thousandths of a token if they are there; `false` (and nothing taken)
    /// otherwise.
    pub fn try_take_milli(&mut self, now: Timestamp, rate: u32, burst: u32, cost: u64) -> bool {
        self.refill(now, rate, burst);
        if self.milli >= cost {
            self.milli -= cost;
            true
        } else {
            false
        }
    }

    /// Gives back `milli` thousandths of a token, up to the capacity.
    pub fn credit_milli(&mut self, milli: u64, burst: u32) {
        let cap = u64::from(burst).saturating_mul(MILLI);
        self.milli = self.milli.saturating_add(milli).min(cap);
    }

    /// Takes one token, or whatever is left: charges a frame that is refused anyway.
    pub fn drain_one(&mut self, now: Timestamp, rate: u32, burst: u32) {
        self.refill(now, rate, burst);
        self.milli = self.milli.saturating_sub(MILLI);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill() {
        let t0 = Timestamp::from_secs(1000);
        let mut b = TokenBucket::full(t0, 3);
        assert!(b.try_take(t0, 10, 3));
        assert!(b.try_take(t0, 10, 3));
        assert!(b.try_take(t0, 10, 3));
        assert!(!b.try_take(t0, 10, 3));
        // 10 per second: one token every 100 ms.
        assert!(!b.try_take(Timestamp(t0.0 + 99), 10, 3));
        assert!(b.try_take(Timestamp(t0.0 + 100), 10, 3));
        // Never more than the burst, and time going backwards refills nothing.
        let later = Timestamp(t0.0 + 1_000_000);
        assert!(b.try_take(later, 10, 3));
        assert!(b.try_take(later, 10, 3));
        assert!(b.try_take(t0, 10, 3));
        assert!(!b.try_take(t0, 10, 3));
        b.drain_one(t0, 10, 3);
        assert!(!b.try_take(later, 10, 3));
    }

    #[test]
    fn fractional_costs_and_credits() {
        let t0 = Timestamp::from_secs(1000);
        let mut b = TokenBucket::full(t0, 1);
        // Four quarter-tokens make one token.
        for _ in 0..4 {
            assert!(b.try_take_milli(t0, 1, 1, 250));
        }
        assert!(!b.try_take_milli(t0, 1, 1, 250));
        b.credit_milli(250, 1);
        assert!(b.try_take_milli(t0, 1, 1, 250));
        assert!(!b.try_take_milli(t0, 1, 1, 1));
        // A credit never exceeds the capacity.
        b.credit_milli(10_000, 1);
        assert!(b.try_take(t0, 1, 1));
        assert!(!b.try_take_milli(t0, 1, 1, 1));
    }
}
