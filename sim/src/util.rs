//! Small helpers: human-readable durations and the seeded random streams.

use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Parses a duration such as `250ms`, `30s`, `5m`, `2h`, `3d` or `1h30m` (units `ms`,
/// `s`, `m`, `h`, `d`; `0` alone is accepted). Returns `None` if malformed.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    let mut any = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit_ms: u64 = match c {
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                1
            }
            's' => 1000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            _ => return None,
        };
        let n: u64 = num.parse().ok()?;
        total = total.checked_add(n.checked_mul(unit_ms)?)?;
        num.clear();
        any = true;
    }
    if !num.is_empty() || !any {
        return None;
    }
    Some(Duration::from_millis(total))
}

/// Parses a signed duration (`-3m`, `+90s`, `2m`) into milliseconds.
pub fn parse_signed_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let (neg, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let ms = i64::try_from(parse_duration(rest)?.as_millis()).ok()?;
    Some(if neg { -ms } else { ms })
}

/// Formats a duration compactly (`1h30m`, `250ms`, `0s`).
pub fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let mut s = ms / 1000;
    let rest_ms = ms % 1000;
    let mut out = String::new();
    for (unit, n) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if s >= n {
            out += &format!("{}{unit}", s / n);
            s %= n;
        }
    }
    if s > 0 || rest_ms > 0 {
        if rest_ms > 0 {
            out += &format!("{s}.{rest_ms:03}s");
        } else {
            out += &format!("{s}s");
        }
    }
    out
}

/// SplitMix64 step: mixes seeds and labels into stream seeds.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A 32-byte seed derived from a run seed and a label.
pub fn derive_seed(seed: u64, label: &str) -> [u8; 32] {
    let mut h = mix(seed);
    for b in label.bytes() {
        h = mix(h ^ u64::from(b));
    }
    let mut out = [0u8; 32];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        h = mix(h ^ (i as u64));
        chunk.copy_from_slice(&h.to_le_bytes());
    }
    out
}

/// A seeded random stream (ChaCha8): every random choice of a run comes from one.
#[derive(Clone, Debug)]
pub struct Rng(ChaCha8Rng);

impl Rng {
    /// A stream for `label` of run `seed`.
    pub fn new(seed: u64, label: &str) -> Self {
        Rng(ChaCha8Rng::from_seed(derive_seed(seed, label)))
    }

    /// A random u64.
    pub fn u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (`0` when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.u64() % n
        }
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Uniform in `lo..=hi` (milliseconds or anything else).
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.below(hi - lo + 1)
        }
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("3d"), Some(Duration::from_secs(3 * 86_400)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        for bad in ["", "5", "5x", "h", "1.5h", "-3m"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        assert_eq!(parse_signed_ms("-3m"), Some(-180_000));
        assert_eq!(fmt_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.500s");
    }

    #[test]
    fn streams_are_reproducible() {
        let mut a = Rng::new(7, "net");
        let mut b = Rng::new(7, "net");
        let mut c = Rng::new(7, "user");
        let (x, y, z) = (a.u64(), b.u64(), c.u64());
        assert_eq!(x, y);
        assert_ne!(x, z);
    }
}
