//! The values a scheduling proposal carries besides the time: party size, dietary,
//! budget, place and venue (with the places ruled out by a §8.2 `different_place`
//! answer), and the notes explaining them.

use serde_json::Value;

use super::facts::Facts;
use super::flexibility::{flex_of, Flex};
use crate::negotiator::needs::EventKind;
use crate::negotiator::prefs::{intersect_budgets, merge_dietary, parse_budget};
use crate::negotiator::{clip, str_field, View, DIFFERENT_PLACE};
use crate::packet::Context;

/// Longest string copied from a context into a proposal; longer values are left out.
pub(super) const MAX_COPIED_LEN: usize = 200;

/// Values copied from the contexts into a proposal: dietary, budget, location, party
/// size, venue; with notes for the reasoning.
pub(super) struct Shared {
    pub(super) fields: Vec<(String, Value)>,
    pub(super) notes: Vec<String>,
    pub(super) location: Option<String>,
    /// Every place known was ruled out by a `different_place` answer.
    pub(super) no_other_place: bool,
}

pub(super) fn short_str(s: &str) -> Option<String> {
    (s.chars().count() <= MAX_COPIED_LEN).then(|| s.to_string())
}

pub(super) fn shared_values(f: &Facts) -> Shared {
    let (init, resp) = (f.init, f.resp);
    let mut fields = Vec::new();
    let mut notes = Vec::new();
    if let Some(n) = [init, resp]
        .iter()
        .filter_map(|c| c.get("party_size"))
        .find(|v| v.as_u64().is_some_and(|n| (1..=1000).contains(&n)))
    {
        fields.push(("party_size".to_string(), n.clone()));
    }
    if f.kind == EventKind::Meal {
        let diets: Vec<&Value> = [init, resp]
            .iter()
            .filter_map(|c| c.get("dietary").or_else(|| c.get("dietary_requirements")))
            .collect();
        if !diets.is_empty() {
            let merged = merge_dietary(&diets);
            notes.push(if merged.is_empty() {
                "no dietary restrictions".to_string()
            } else {
                format!("dietary: {}", merged.join(", "))
            });
            fields.push((
                "dietary".to_string(),
                Value::Array(merged.into_iter().map(Value::String).collect()),
            ));
        }
    }
    let budgets: Vec<&Value> = [init, resp]
        .iter()
        .filter_map(|c| c.get("budget_range").or_else(|| c.get("budget")))
        .collect();
    let parsed: Vec<_> = budgets.iter().filter_map(|v| parse_budget(v)).collect();
    match parsed.as_slice() {
        [a, b] => match intersect_budgets(a, b) {
            Ok(x) => {
                notes.push(format!("budget {} (both ranges intersected)", x.render()));
                fields.push(("budget".to_string(), Value::String(x.render())));
            }
            Err(why) => notes.push(why),
        },
        [a] => {
            notes.push(format!("budget {}", a.render()));
            fields.push(("budget".to_string(), Value::String(a.render())));
            if budgets.len() > 1 {
                notes.push("one budget could not be read".to_string());
            }
        }
        _ => {
            if !budgets.is_empty() {
                notes.push("budget could not be read".to_string());
            }
        }
    }
    // Places (§8.2 "Suggest different place"): each side's `location_preference` (a
    // string, or an array of strings in order of preference), else `location`. A place
    // ruled out by a `different_place` answer is skipped; the responder's fixed place
    // comes first, then the initiator's, then the responder's (SPEC-NOTES negotiator).
    let ruled = ruled_out_places(f.view);
    let resp_fixed = flex_of(resp, "location") == Some(Flex::NotFlexible);
    let init_fixed = flex_of(init, "location") == Some(Flex::NotFlexible);
    let (il, rl) = (places_of(init), places_of(resp));
    let mut cands: Vec<(String, &str)> = Vec::new();
    if resp_fixed && !init_fixed {
        cands.extend(
            rl.iter()
                .map(|l| (l.clone(), "the responder's, marked not_flexible")),
        );
    }
    cands.extend(il.iter().map(|l| (l.clone(), "the initiator's preference")));
    cands.extend(rl.iter().map(|l| (l.clone(), "the responder's preference")));
    let first = cands.first().map(|(l, _)| l.clone());
    let pick = cands
        .iter()
        .find(|(l, _)| !ruled.locations.iter().any(|r| r.eq_ignore_ascii_case(l)))
        .cloned();
    let location = pick.as_ref().map(|(l, _)| l.clone());
    if let Some((l, whose)) = &pick {
        let other = if il.contains(l) {
            rl.first()
        } else {
            il.first()
        };
        if first.as_ref() != Some(l) {
            notes.push(format!(
                "location: {l} ({whose}; {} ruled out: a different place was asked for)",
                list_clipped(&ruled.locations)
            ));
        } else {
            match other {
                Some(o) if o != l => notes.push(format!(
                    "location: {l} ({whose}; other side: {})",
                    clip(o, 80)
                )),
                _ => notes.push(format!("location: {l} ({whose})")),
            }
        }
        fields.push(("location".to_string(), Value::String(l.clone())));
    }
    let venue = [init, resp]
        .iter()
        .filter_map(|c| str_field(c, "venue").and_then(short_str))
        .find(|v| !ruled.venues.iter().any(|r| r.eq_ignore_ascii_case(v)));
    if let Some(v) = &venue {
        fields.push(("venue".to_string(), Value::String(v.clone())));
    }
    // A different place was asked for and every place known here was ruled out: the
    // same place again would only move the time, so the user is asked for one.
    // After such an answer a proposal must name a place not ruled out.
    let no_other_place = ruled.asked
        && ((location.is_none() && venue.is_none())
            || ruled.rejected.iter().any(|(l, v)| {
                same_place(l.as_deref(), location.as_deref())
                    && same_place(v.as_deref(), venue.as_deref())
            }));
    for c in [init, resp] {
        if let Some(t) = str_field(c, "transport_mode").and_then(short_str) {
            notes.push(format!("transport: {}", clip(&t, 60)));
        }
    }
    let declined: Vec<&str> = f
        .view
        .unavailable
        .iter()
        .map(String::as_str)
        .take(10)
        .collect();
    if !declined.is_empty() {
        notes.push(format!(
            "working without {} (declined)",
            declined.join(", ")
        ));
    }
    Shared {
        fields,
        notes,
        location,
        no_other_place,
    }
}

/// The places ruled out by `different_place` answers (§8.2) in `view.rejected`.
pub(super) struct RuledOut {
    /// A `different_place` answer was given in this thread.
    pub(super) asked: bool,
    /// The `location` of each proposal ruled out that way.
    pub(super) locations: Vec<String>,
    /// Their `venue`.
    pub(super) venues: Vec<String>,
    /// `(location, venue)` of each.
    pub(super) rejected: Vec<(Option<String>, Option<String>)>,
}

pub(super) fn ruled_out_places(view: &View) -> RuledOut {
    let mut out = RuledOut {
        asked: false,
        locations: Vec::new(),
        venues: Vec::new(),
        rejected: Vec::new(),
    };
    for r in view.rejected.iter().filter(|r| r.reason == DIFFERENT_PLACE) {
        out.asked = true;
        let l = str_field(&r.details, "location").map(str::to_string);
        let v = str_field(&r.details, "venue").map(str::to_string);
        out.locations.extend(l.clone());
        out.venues.extend(v.clone());
        out.rejected.push((l, v));
    }
    out
}

/// Whether two optional places are the same (case-insensitive; both absent is the
/// same: nothing was changed).
pub(super) fn same_place(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.trim().eq_ignore_ascii_case(b.trim()),
        (None, None) => true,
        _ => false,
    }
}

/// A side's places: `location_preference` (a string or an array of strings, in order of
/// preference), else `location`; at most 8, each at most 200 characters.
pub(super) fn places_of(c: &Context) -> Vec<String> {
    let v = c
        .get("location_preference")
        .filter(|v| !is_blank(v))
        .or_else(|| c.get("location").filter(|v| !is_blank(v)));
    let mut out: Vec<String> = Vec::new();
    let mut add = |s: &str| {
        let s = s.trim();
        if !s.is_empty() && !out.iter().any(|o| o == s) {
            if let Some(s) = short_str(s) {
                out.push(s);
            }
        }
    };
    match v {
        Some(Value::String(s)) => add(s),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).take(8).for_each(add),
        _ => {}
    }
    out
}

pub(super) fn is_blank(v: &Value) -> bool {
    match v {
        Value::String(s) => s.trim().is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => true,
    }
}

pub(super) fn list_clipped(v: &[String]) -> String {
    let v: Vec<String> = v.iter().take(4).map(|s| clip(s, 60)).collect();
    v.join(", ")
}
