//! The §4 `flexibility` field: how far each side lets a time window widen or move to
//! another date.

use chrono::NaiveDate;
use serde_json::Value;

use crate::negotiator::windows::LocalWin;
use crate::packet::Context;

/// How far `somewhat_flexible` dates may move, in days.
pub(super) const SOMEWHAT_DAYS: u64 = 7;

/// How much room one side gives on an aspect (§4 `flexibility`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flex {
    /// `not_flexible`: exactly what was stated.
    NotFlexible,
    /// `somewhat_flexible`: time ±30 min; another date within 7 days.
    Somewhat,
    /// `flexible`: time ±60 min; any date.
    Flexible,
}

impl Flex {
    pub(super) fn parse(v: &Value) -> Option<Flex> {
        match v {
            Value::Bool(true) => Some(Flex::Flexible),
            Value::Bool(false) => Some(Flex::NotFlexible),
            Value::String(s) => {
                match s
                    .trim()
                    .to_ascii_lowercase()
                    .replace([' ', '-'], "_")
                    .as_str()
                {
                    "not_flexible" | "inflexible" | "fixed" | "rigid" | "none" | "low" | "no"
                    | "strict" => Some(Flex::NotFlexible),
                    "somewhat_flexible" | "somewhat" | "medium" | "moderate" | "some"
                    | "a_little" => Some(Flex::Somewhat),
                    "flexible" | "very_flexible" | "high" | "yes" | "any" | "anytime" => {
                        Some(Flex::Flexible)
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The §4 word.
    pub fn word(self) -> &'static str {
        match self {
            Flex::NotFlexible => "not_flexible",
            Flex::Somewhat => "somewhat_flexible",
            Flex::Flexible => "flexible",
        }
    }

    /// Minutes a window may be widened on each side.
    pub(super) fn stretch_min(self) -> u32 {
        match self {
            Flex::NotFlexible => 0,
            Flex::Somewhat => 30,
            Flex::Flexible => 60,
        }
    }

    /// Whether a window stated on `from` may move to `to`.
    pub(super) fn date_allows(self, from: NaiveDate, to: NaiveDate) -> bool {
        match self {
            Flex::NotFlexible => from == to,
            Flex::Somewhat => {
                from.signed_duration_since(to).num_days().unsigned_abs() <= SOMEWHAT_DAYS
            }
            Flex::Flexible => true,
        }
    }
}

/// A side's flexibility on `aspect` (`date`, `time`, `location`): the `flexibility`
/// object's entry, or a single word for all aspects.
pub(crate) fn flex_of(ctx: &Context, aspect: &str) -> Option<Flex> {
    match ctx.get("flexibility")? {
        Value::Object(o) => o.get(aspect).and_then(Flex::parse),
        other => Flex::parse(other),
    }
}

pub(super) fn flex_word(f: Option<Flex>) -> &'static str {
    f.map(Flex::word).unwrap_or("not stated")
}

/// `wins` plus copies moved to each of `targets` that `flex` allows.
pub(super) fn transposed(
    wins: &[LocalWin],
    targets: &[NaiveDate],
    flex: Option<Flex>,
) -> Vec<LocalWin> {
    let mut out = wins.to_vec();
    let Some(flex) = flex else {
        return out;
    };
    for w in wins {
        for d in targets {
            if out.len() >= 256 {
                return out;
            }
            if *d != w.date && flex.date_allows(w.date, *d) {
                let moved = w.on(*d);
                if !out.contains(&moved) {
                    out.push(moved);
                }
            }
        }
    }
    out
}
