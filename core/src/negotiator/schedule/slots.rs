//! Candidate slots: the starts tried inside the common windows, by how they were found
//! (strict, time flexibility, date flexibility, shortened, one-sided), minus the options
//! already ruled out (§8.2, §9).

use chrono::{NaiveDate, Timelike};

use super::wording::local_parts;
use crate::negotiator::windows::{parse_date, parse_hm, Iv, LocalWin, Zone, DAY_MIN};
use crate::negotiator::{str_field, View, DIFFERENT_PLACE};

/// Most candidate slots considered.
pub(super) const MAX_CANDIDATES: usize = 200;

/// How a candidate slot was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tier {
    /// Inside both sides' stated windows.
    Strict,
    /// Using time flexibility (windows widened).
    TimeFlex,
    /// Using date flexibility (windows moved to the other side's dates).
    DateFlex,
    /// The common time is shorter than the event.
    Short,
    /// Only one side's availability is known.
    OneSided,
}

/// A candidate slot.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cand {
    pub(super) slot: Iv,
    /// The common window the slot was picked from.
    pub(super) within: Iv,
    pub(super) tier: Tier,
}

/// Starts to try inside `iv` for an event of `dur` seconds, best first: the overlap start
/// rounded up to the next full hour in `zone` (or the overlap start when that would not
/// fit), then 30 minutes later, the latest start, the overlap start, then every half hour.
pub(super) fn starts_in(iv: Iv, dur: i64, zone: Zone) -> Vec<i64> {
    if dur <= 0 || iv.len() < dur {
        return Vec::new();
    }
    let latest = iv.e - dur;
    let into_hour = zone
        .to_local(iv.s)
        .map(|l| i64::from(l.minute()) * 60 + i64::from(l.second()))
        .unwrap_or(0);
    let up = (3600 - into_hour) % 3600;
    let primary = if iv.s + up <= latest { iv.s + up } else { iv.s };
    let mut out = vec![primary];
    let push = |x: i64, out: &mut Vec<i64>| {
        if (iv.s..=latest).contains(&x) && !out.contains(&x) {
            out.push(x);
        }
    };
    push(primary + 1800, &mut out);
    push(latest, &mut out);
    push(iv.s, &mut out);
    let mut t = iv.s + (1800 - into_hour % 1800) % 1800;
    for _ in 0..48 {
        if t > latest {
            break;
        }
        push(t, &mut out);
        t += 1800;
    }
    out
}

/// Whether a slot starting at `start` (shown in `zone`) matches a ruled-out option
/// (same `date` and `time`/`start`).
pub(super) fn is_rejected(view: &View, zone: Zone, start: i64) -> bool {
    let Some((date, minutes)) = local_parts(zone, start) else {
        return false;
    };
    // A place asked to change keeps its time (§8.2 "Suggest different place").
    view.rejected
        .iter()
        .filter(|r| r.reason != DIFFERENT_PLACE)
        .any(|r| {
            let rd = str_field(&r.details, "date").and_then(parse_date);
            let rt = str_field(&r.details, "time")
                .or_else(|| str_field(&r.details, "start"))
                .and_then(|t| parse_hm(t).map(|(m, _)| m % DAY_MIN));
            rd == Some(date) && rt == Some(minutes)
        })
}

/// Candidate slots for the common windows `ivs` of one tier.
pub(super) fn add_cands(out: &mut Vec<Cand>, ivs: &[Iv], dur: i64, zone: Zone, tier: Tier) {
    for iv in ivs {
        for s in starts_in(*iv, dur, zone) {
            if out.len() >= MAX_CANDIDATES {
                return;
            }
            let slot = Iv { s, e: s + dur };
            if !out.iter().any(|c| c.slot == slot) {
                out.push(Cand {
                    slot,
                    within: *iv,
                    tier,
                });
            }
        }
    }
}

/// Shortened slots: common windows shorter than the event but at least half of it (and
/// 30 minutes).
pub(super) fn add_short(out: &mut Vec<Cand>, ivs: &[Iv], dur: i64, tier_of_short: Tier) {
    let min = (dur / 2).max(1800);
    for iv in ivs {
        if iv.len() < dur && iv.len() >= min && out.len() < MAX_CANDIDATES {
            let slot = *iv;
            if !out.iter().any(|c| c.slot == slot) {
                out.push(Cand {
                    slot,
                    within: *iv,
                    tier: tier_of_short,
                });
            }
        }
    }
}

pub(super) fn intervals(wins: &[LocalWin], stretch: u32) -> Vec<Iv> {
    wins.iter().filter_map(|w| w.to_interval(stretch)).collect()
}

pub(super) fn dates_of(wins: &[LocalWin]) -> Vec<NaiveDate> {
    let mut d: Vec<NaiveDate> = wins.iter().map(|w| w.date).collect();
    d.sort();
    d.dedup();
    d
}
