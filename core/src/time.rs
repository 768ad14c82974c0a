//! Time as the core sees it: a parameter, never read from a clock.
//!
//! [`Timestamp`] is milliseconds since the Unix epoch (UTC). Every input to a state
//! machine carries one; the core never asks the operating system for the time.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A point in time: milliseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The Unix epoch.
    pub const ZERO: Timestamp = Timestamp(0);

    /// A timestamp from milliseconds since the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// A timestamp from seconds since the epoch.
    pub const fn from_secs(s: u64) -> Self {
        Timestamp(s.saturating_mul(1000))
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at the far future.
    #[allow(clippy::should_implement_trait)] // saturating, and `Timestamp + Duration` reads worse
    pub fn add(self, d: Duration) -> Self {
        Timestamp(
            self.0
                .saturating_add(d.as_millis().min(u64::MAX as u128) as u64),
        )
    }

    /// `self - earlier`, or zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// RFC 3339 in UTC with a `Z` suffix, seconds precision (`2026-03-21T14:30:00Z`),
    /// the form the spec's packets use.
    pub fn to_rfc3339(self) -> String {
        let secs = (self.0 / 1000) as i64;
        match chrono::DateTime::from_timestamp(secs, 0) {
            Some(dt) => dt.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            None => "9999-12-31T23:59:59Z".to_string(),
        }
    }

    /// Parses an RFC 3339 date-time (any offset); `None` if malformed or before 1970.
    pub fn parse_rfc3339(s: &str) -> Option<Self> {
        let dt = chrono::DateTime::parse_from_rfc3339(s).ok()?;
        u64::try_from(dt.timestamp_millis()).ok().map(Timestamp)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_rfc3339())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

/// Parses the time-based subset of ISO 8601 durations used by the spec
/// (`PT24H`, `PT35M`, `P1D`, `P1DT2H30M15S`). Years, months and weeks are refused
/// because their length depends on the calendar.
pub fn parse_iso8601_duration(s: &str) -> Option<Duration> {
    let rest = s.strip_prefix('P')?;
    if rest.is_empty() {
        return None;
    }
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) => {
            if t.is_empty() {
                return None;
            }
            (d, Some(t))
        }
        None => (rest, None),
    };
    let mut secs: u64 = 0;
    let mut take = |part: &str, units: &[(char, u64)]| -> Option<()> {
        let mut num = String::new();
        let mut idx = 0;
        for c in part.chars() {
            if c.is_ascii_digit() {
                num.push(c);
                continue;
            }
            let (pos, &(_, unit)) = units
                .iter()
                .enumerate()
                .skip(idx)
                .find(|(_, (u, _))| *u == c)?;
            let n: u64 = num.parse().ok()?;
            secs = secs.checked_add(n.checked_mul(unit)?)?;
            num.clear();
            idx = pos + 1;
        }
        num.is_empty().then_some(())
    };
    take(date, &[('D', 86_400)])?;
    if let Some(t) = time {
        take(t, &[('H', 3600), ('M', 60), ('S', 1)])?;
    }
    Some(Duration::from_secs(secs))
}

/// Formats a duration as ISO 8601 (`PT24H`, `PT1H30M`, `PT0S`).
pub fn format_iso8601_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    let mut out = String::from("PT");
    if h > 0 {
        out += &format!("{h}H");
    }
    if m > 0 {
        out += &format!("{m}M");
    }
    if sec > 0 || (h == 0 && m == 0) {
        out += &format!("{sec}S");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip() {
        let t = Timestamp::parse_rfc3339("2026-03-21T14:30:00Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-03-21T14:30:00Z");
        assert_eq!(
            Timestamp::parse_rfc3339("2026-03-21T15:30:00+01:00"),
            Some(t)
        );
        assert!(Timestamp::parse_rfc3339("yesterday").is_none());
    }

    #[test]
    fn durations() {
        assert_eq!(
            parse_iso8601_duration("PT24H"),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(
            parse_iso8601_duration("PT35M"),
            Some(Duration::from_secs(2100))
        );
        assert_eq!(
            parse_iso8601_duration("P1DT2H30M15S"),
            Some(Duration::from_secs(95_415))
        );
        for bad in ["", "P", "PT", "24H", "PT5X", "P1Y", "PT5M3H", "PTH"] {
            assert_eq!(parse_iso8601_duration(bad), None, "{bad}");
        }
        assert_eq!(
            format_iso8601_duration(Duration::from_secs(5400)),
            "PT1H30M"
        );
        assert_eq!(format_iso8601_duration(Duration::ZERO), "PT0S");
    }
}
