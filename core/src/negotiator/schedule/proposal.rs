//! The §8.1 proposal for a chosen slot: its details, its alternatives with their reasons,
//! the reasoning, and the actions run once everyone confirms.

use chrono::Timelike;
use serde_json::{Map, Value};

use super::facts::{event_word, zone_of, Facts};
use super::flexibility::flex_word;
use super::shared::shared_values;
use super::slots::{Cand, Tier};
use super::wording::{
    capitalise, fmt_date, fmt_day, fmt_day_year, fmt_duration, fmt_iv, iso_duration, local_parts,
};
use crate::negotiator::needs::{self, EventKind};
use crate::negotiator::windows::{fmt_hm, Iv};
use crate::negotiator::{tried_summary, Decision};
use crate::packet::{ActionSpec, Alternative, Proposal};

/// The slot's `date`, `time`, `end` (and `end_date` when it ends on a later day) and
/// `timezone`, in the presentation zone.
pub(super) fn slot_details(f: &Facts, slot: Iv) -> Option<Map<String, Value>> {
    let (d, s) = local_parts(f.pres, slot.s)?;
    let (ed, e) = local_parts(f.pres, slot.e)?;
    let mut m = Map::new();
    m.insert("date".into(), Value::String(fmt_date(d)));
    m.insert("time".into(), Value::String(fmt_hm(s)));
    m.insert("end".into(), Value::String(fmt_hm(e)));
    if ed != d {
        m.insert("end_date".into(), Value::String(fmt_date(ed)));
    }
    if f.pres_known {
        m.insert("timezone".into(), Value::String(f.pres.name()));
    }
    Some(m)
}

/// `19:00–21:00 (Europe/London)`.
pub(super) fn slot_times(f: &Facts, slot: Iv) -> String {
    let (s, e) = (
        local_parts(f.pres, slot.s).map(|x| x.1).unwrap_or(0),
        local_parts(f.pres, slot.e).map(|x| x.1).unwrap_or(0),
    );
    if f.pres_known {
        format!("{}–{} ({})", fmt_hm(s), fmt_hm(e), f.pres.name())
    } else {
        format!("{}–{}", fmt_hm(s), fmt_hm(e))
    }
}

pub(super) fn utc_text(secs: i64) -> Option<String> {
    let dt = chrono::DateTime::from_timestamp(secs, 0)?;
    let n = dt.naive_utc();
    Some(format!(
        "{}T{:02}:{:02}:00Z",
        fmt_date(n.date()),
        n.hour(),
        n.minute()
    ))
}

/// Builds the proposal and actions for a chosen slot.
pub(super) fn build_proposal(
    f: &Facts,
    event: &str,
    event_in_ctx: bool,
    main: Iv,
    alternatives: Vec<Alternative>,
    mut notes: Vec<String>,
) -> Decision {
    let shared = shared_values(f);
    if shared.no_other_place {
        return Decision::Escalate {
            reason: "A different place was asked for and no other place is known: which place would work?".to_string(),
            summary: tried_summary(f.view),
        };
    }
    let Some(slot) = slot_details(f, main) else {
        return Decision::Escalate {
            reason: "The chosen time cannot be represented".to_string(),
            summary: tried_summary(f.view),
        };
    };
    let date = local_parts(f.pres, main.s).map(|x| x.0);
    let label = if event.is_empty() {
        "Meeting".to_string()
    } else {
        capitalise(event)
    };
    let mut summary = format!(
        "{label} on {}, {}",
        date.map(fmt_day_year).unwrap_or_default(),
        slot_times(f, main)
    );
    if let Some(l) = &shared.location {
        summary.push_str(", ");
        summary.push_str(l);
    }
    let mut details = Map::new();
    if event_in_ctx && !event.is_empty() {
        details.insert("event_type".into(), Value::String(event.to_string()));
    }
    details.extend(slot);
    if let Some(s) = utc_text(main.s) {
        details.insert("start_utc".into(), Value::String(s));
    }
    if let Some(e) = utc_text(main.e) {
        details.insert("end_utc".into(), Value::String(e));
    }
    details.insert("duration".into(), Value::String(iso_duration(main.len())));
    for (k, v) in shared.fields {
        details.insert(k, v);
    }
    notes.extend(shared.notes);
    let mut actions = Vec::new();
    if needs::event_kind(event) == EventKind::Meal {
        actions.push(ActionSpec {
            action: "book_table".to_string(),
            service: Some("restaurant_booking".to_string()),
            requires_user_approval: true,
            reversible: true,
            by: Some(f.view.me.clone()),
        });
    }
    actions.push(ActionSpec {
        action: "add_calendar_event".to_string(),
        service: None,
        requires_user_approval: true,
        reversible: true,
        by: None,
    });
    Decision::Propose {
        proposal: Proposal {
            summary,
            details,
            alternatives,
            reasoning: format!("Selected based on: {}", notes.join("; ")),
        },
        actions,
    }
}

/// An alternative for a slot, with a reason relative to the main one.
pub(super) fn alternative(f: &Facts, c: &Cand, main: &Cand) -> Option<Alternative> {
    // Every key of the main proposal that depends on the slot, so that the alternative's
    // details replace them all when it is chosen (SPEC-NOTES "Resolution").
    let mut details = slot_details(f, c.slot)?;
    let main_details = slot_details(f, main.slot)?;
    if main_details.contains_key("end_date") && !details.contains_key("end_date") {
        let end = details.get("date").cloned().unwrap_or(Value::Null);
        details.insert("end_date".into(), end);
    }
    if let Some(s) = utc_text(c.slot.s) {
        details.insert("start_utc".into(), Value::String(s));
    }
    if let Some(e) = utc_text(c.slot.e) {
        details.insert("end_utc".into(), Value::String(e));
    }
    if c.slot.len() != main.slot.len() {
        details.insert("duration".into(), Value::String(iso_duration(c.slot.len())));
    }
    let (d, _) = local_parts(f.pres, c.slot.s)?;
    let (md, _) = local_parts(f.pres, main.slot.s)?;
    let reason = match c.tier {
        Tier::TimeFlex => {
            "Uses the stated time flexibility (a window widened by up to an hour)".to_string()
        }
        Tier::DateFlex => "Uses the stated date flexibility".to_string(),
        Tier::Short => "Shorter than usual: the common time is limited".to_string(),
        _ if d != md => "Another day that works".to_string(),
        _ => {
            let delta = (c.slot.s - main.slot.s) / 60;
            if c.slot.s == c.within.s {
                "Earliest start in the shared window".to_string()
            } else if c.slot.e == c.within.e {
                "Latest start that still fits the shared window".to_string()
            } else if delta > 0 {
                format!("{delta} minutes later")
            } else {
                format!("{} minutes earlier", -delta)
            }
        }
    };
    Some(Alternative {
        summary: format!("{}, {}", fmt_day(d), slot_times(f, c.slot)),
        reason,
        details,
    })
}

pub(super) fn propose_slots(
    f: &Facts,
    cands: &[Cand],
    skipped: usize,
    one_sided: Option<String>,
) -> Decision {
    let Some(main) = cands.first() else {
        return Decision::Wait;
    };
    let mut notes = Vec::new();
    let dur_text = format!("{} {}", fmt_duration(f.duration), event_word(f));
    match main.tier {
        Tier::Strict => notes.push(format!(
            "both available {}{}",
            fmt_iv(f.pres, main.within),
            zone_suffix(f)
        )),
        Tier::TimeFlex => notes.push(format!(
            "no common {dur_text} slot within the stated windows; used time flexibility (mine: {}, peer's: {}) — common window {}",
            flex_word(f.my_flex("time")),
            flex_word(f.their_flex("time")),
            fmt_iv(f.pres, main.within)
        )),
        Tier::DateFlex => notes.push(format!(
            "no common slot on the stated dates; used date flexibility (mine: {}, peer's: {}) — common window {}",
            flex_word(f.my_flex("date")),
            flex_word(f.their_flex("date")),
            fmt_iv(f.pres, main.within)
        )),
        Tier::Short => notes.push(format!(
            "the only common time ({}) is shorter than a {dur_text}",
            fmt_iv(f.pres, main.within)
        )),
        Tier::OneSided => {
            if let Some(n) = &one_sided {
                notes.push(n.clone());
            }
        }
    }
    if main.tier != Tier::Short {
        let rounded = local_parts(f.pres, main.slot.s).is_some_and(|(_, m)| m % 60 == 0);
        notes.push(if main.slot.s == main.within.s && !rounded {
            format!("start of the common window (a full hour would not fit a {dur_text})")
        } else {
            format!("earliest full hour that fits a {dur_text}")
        });
    }
    if let (Some(a), Some(b)) = (zone_of(&f.my_side), zone_of(&f.their_side)) {
        if a != b {
            notes.push(format!(
                "times compared across {} and {}, shown in {} (the initiator's zone)",
                a.name(),
                b.name(),
                f.pres.name()
            ));
        }
    }
    if skipped > 0 {
        notes.push(format!("skipped {skipped} option(s) already ruled out"));
    }
    let alternatives: Vec<Alternative> = cands
        .iter()
        .skip(1)
        .filter_map(|c| alternative(f, c, main))
        .take(2)
        .collect();
    build_proposal(
        f,
        &f.event,
        f.event_from_ctx,
        main.slot,
        alternatives,
        notes,
    )
}

/// ` (Europe/London)` when the presentation zone is known.
pub(super) fn zone_suffix(f: &Facts) -> String {
    if f.pres_known {
        format!(" ({})", f.pres.name())
    } else {
        String::new()
    }
}
