//! The §6.3 no-overlap conflict: building the conflict packet with its proposed
//! alternatives, and evaluating the alternatives of a received one.

use chrono::{Days, NaiveDate};
use serde_json::{Map, Value};

use super::facts::{default_duration, zone_of, Facts, Placed, MIN_EVENT_SECS};
use super::flexibility::{flex_word, transposed, Flex};
use super::proposal::{alternative, build_proposal};
use super::slots::{add_cands, dates_of, intervals, is_rejected, Cand, Tier};
use super::wording::{fmt_date, fmt_day, fmt_duration, weekday_name};
use crate::negotiator::needs::EventKind;
use crate::negotiator::windows::{
    fmt_hm, intersect, local_to_utc, parse_date, parse_hm, Iv, LocalWin, Zone, DAY_MIN,
};
use crate::negotiator::{clip, str_field, tried_summary, Decision};
use crate::packet::{Alternative, Escalation};

/// Most §6.3 alternatives evaluated.
pub(super) const MAX_ALTERNATIVES_EVALUATED: usize = 10;

/// `Wednesday 2026-03-25 18:00-21:00 (Europe/London)` — a form the window parser reads back.
pub(super) fn render_window(w: &LocalWin, zone_known: bool) -> String {
    let mut s = format!(
        "{} {} {}-{}",
        weekday_name(w.date),
        fmt_date(w.date),
        fmt_hm(w.start),
        fmt_hm(w.end)
    );
    if zone_known {
        s.push_str(&format!(" ({})", w.zone.name()));
    }
    s
}

/// A §6.3 alternative.
pub(super) fn alt_value(
    option: String,
    rationale: &str,
    date: NaiveDate,
    start: u32,
    end: u32,
    zone: Option<Zone>,
    event: Option<&str>,
) -> Value {
    let mut details = Map::new();
    details.insert("date".into(), Value::String(fmt_date(date)));
    details.insert("start".into(), Value::String(fmt_hm(start)));
    details.insert("end".into(), Value::String(fmt_hm(end)));
    if let Some(z) = zone {
        details.insert("timezone".into(), Value::String(z.name()));
    }
    if let Some(e) = event.filter(|e| !e.is_empty()) {
        details.insert("event_type".into(), Value::String(e.to_string()));
    }
    let mut m = Map::new();
    m.insert("option".into(), Value::String(option));
    m.insert("rationale".into(), Value::String(rationale.to_string()));
    m.insert("details".into(), Value::Object(details));
    Value::Object(m)
}

/// The §6.3 conflict packet: following week on the sender's day, on the recipient's
/// day, then a different meal on a day both have.
pub(super) fn no_overlap(f: &Facts, p: &Placed) -> Decision {
    let view = f.view;
    let mut mine = p.mine.clone();
    let mut theirs = p.theirs.clone();
    mine.sort_by_key(|w| (w.date, w.start));
    theirs.sort_by_key(|w| (w.date, w.start));
    let my_zone_known = zone_of(&f.my_side).is_some() || f.pres_known;
    let their_zone_known = zone_of(&f.their_side).is_some() || f.pres_known;
    let (Some(my_first), Some(their_first)) = (mine.first().copied(), theirs.first().copied())
    else {
        return Decision::Escalate {
            reason: "No overlap and no availability to build alternatives from".to_string(),
            summary: tried_summary(view),
        };
    };
    let event_ctx = f.event_from_ctx.then_some(f.event.as_str());
    let mut alts: Vec<(Value, NaiveDate, u32)> = Vec::new();
    let week = Days::new(7);
    if let Some(d) = my_first.date.checked_add_days(week) {
        alts.push((
            alt_value(
                format!("Following week — {}", fmt_day(d)),
                "Same day preference for sender, one week later",
                d,
                my_first.start,
                my_first.end,
                my_zone_known.then_some(my_first.zone),
                event_ctx,
            ),
            d,
            my_first.start,
        ));
    }
    if let Some(d) = their_first.date.checked_add_days(week) {
        alts.push((
            alt_value(
                format!("Following week — {}", fmt_day(d)),
                "Same day preference for recipient, one week later",
                d,
                their_first.start,
                their_first.end,
                their_zone_known.then_some(their_first.zone),
                event_ctx,
            ),
            d,
            their_first.start,
        ));
    }
    // A different meal (or, for other events, the middle of the day).
    let (label, start, end, other_event) = match f.kind {
        EventKind::Meal if f.event.contains("lunch") => {
            ("Dinner instead", 18 * 60, 21 * 60, "dinner")
        }
        EventKind::Meal => ("Lunch instead", 12 * 60, 14 * 60, "lunch"),
        _ => ("Midday instead", 12 * 60, 14 * 60, f.event.as_str()),
    };
    let my_dates = dates_of(&mine);
    let their_dates = dates_of(&theirs);
    let common = my_dates.iter().find(|d| their_dates.contains(d)).copied();
    let (day, rationale) = match common {
        Some(d) => (
            Some(d),
            format!(
                "Different meal, but both have {} availability",
                weekday_name(d)
            ),
        ),
        None => (
            my_first
                .date
                .max(their_first.date)
                .checked_add_days(Days::new(1)),
            "Different meal on the day after both proposed days — both users would need to check"
                .to_string(),
        ),
    };
    if let Some(d) = day {
        let option = format!("{label} — {} {}-{}", fmt_day(d), fmt_hm(start), fmt_hm(end));
        let ev = if f.kind == EventKind::Meal {
            Some(other_event)
        } else {
            event_ctx
        };
        alts.push((
            alt_value(
                option,
                &rationale,
                d,
                start,
                end,
                f.pres_known.then_some(f.pres),
                ev,
            ),
            d,
            start,
        ));
    }
    // Drop ruled-out and duplicate options.
    let mut seen: Vec<(NaiveDate, u32)> = Vec::new();
    let mut list = Vec::new();
    for (v, d, s) in alts {
        let ruled_out = view.rejected.iter().any(|r| {
            str_field(&r.details, "date").and_then(parse_date) == Some(d)
                && str_field(&r.details, "start")
                    .or_else(|| str_field(&r.details, "time"))
                    .and_then(|t| parse_hm(t).map(|x| x.0))
                    == Some(s)
        });
        if !ruled_out && !seen.contains(&(d, s)) {
            seen.push((d, s));
            list.push(v);
        }
    }
    let my_df = f.my_flex("date");
    let their_df = f.their_flex("date");
    let date_part = if my_df == their_df {
        format!("both marked '{}' on date", flex_word(my_df))
    } else {
        format!(
            "date: sender '{}', recipient '{}'",
            flex_word(my_df),
            flex_word(their_df)
        )
    };
    let attempted = format!(
        "checked flexibility flags — {date_part}; time: sender '{}', recipient '{}'; no common {} slot found",
        flex_word(f.my_flex("time")),
        flex_word(f.their_flex("time")),
        fmt_duration(f.duration)
    );
    let mut conflict = Map::new();
    conflict.insert("type".into(), Value::String("no_overlap".into()));
    conflict.insert("field".into(), Value::String("time_windows".into()));
    conflict.insert(
        "agent_a_values".into(),
        Value::Array(
            mine.iter()
                .take(8)
                .map(|w| Value::String(render_window(w, my_zone_known)))
                .collect(),
        ),
    );
    conflict.insert(
        "agent_b_values".into(),
        Value::Array(
            theirs
                .iter()
                .take(8)
                .map(|w| Value::String(render_window(w, their_zone_known)))
                .collect(),
        ),
    );
    conflict.insert("attempted_resolution".into(), Value::String(attempted));
    let mut context = Map::new();
    context.insert("conflict".into(), Value::Object(conflict));
    context.insert("proposed_alternatives".into(), Value::Array(list));
    let same_day = my_first.date == their_first.date;
    Decision::NoOverlap {
        context,
        escalation: Escalation {
            recommend: "surface_to_users".to_string(),
            reason: "Agents exhausted automatic resolution — needs human input on date preference"
                .to_string(),
            suggested_prompt: Some(if same_day {
                "No time that day works for both of you. Want to try next week, or a different time?".to_string()
            } else {
                "No overlap this week. Want to try next week, or a different day?".to_string()
            }),
        },
    }
}

/// A received §6.3 alternative, placed in time.
pub(super) struct AltSlot {
    pub(super) label: String,
    pub(super) iv: Iv,
    pub(super) date: NaiveDate,
    pub(super) event: Option<String>,
}

pub(super) fn read_alternative(f: &Facts, v: &Value, index: usize) -> Result<AltSlot, String> {
    let o = v.as_object();
    let label = o
        .and_then(|o| o.get("option").or_else(|| o.get("summary")))
        .and_then(Value::as_str)
        .map(|s| clip(s, 100))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("alternative {}", index + 1));
    let Some(d) = o.and_then(|o| o.get("details")).and_then(Value::as_object) else {
        return Err(format!("'{label}': no structured date and time to check"));
    };
    let get = |k: &str| d.get(k).and_then(Value::as_str).map(str::trim);
    let date = get("date").and_then(parse_date);
    let start = get("start")
        .or_else(|| get("time"))
        .and_then(|t| parse_hm(t).map(|x| x.0));
    let (Some(date), Some(start)) = (date, start) else {
        return Err(format!("'{label}': no structured date and time to check"));
    };
    let event = get("event_type")
        .filter(|e| !e.is_empty())
        .map(|e| clip(&e.to_lowercase(), 60));
    let end = get("end").and_then(|t| parse_hm(t).map(|x| x.0));
    let zone = get("timezone")
        .and_then(Zone::parse)
        .or(f.their_side.zone)
        .or(f.my_side.zone)
        .unwrap_or(f.pres);
    let dur = default_or_field(f, event.as_deref());
    let end_min = match end {
        Some(e) if e > start => i64::from(e),
        Some(e) if e < start => i64::from(e) + i64::from(DAY_MIN),
        _ => i64::from(start) + dur / 60,
    };
    let s = local_to_utc(zone, date, i64::from(start));
    let e = local_to_utc(zone, date, end_min);
    match (s, e) {
        (Some(s), Some(e)) if e > s => Ok(AltSlot {
            label,
            iv: Iv { s, e },
            date,
            event,
        }),
        _ => Err(format!("'{label}': the time cannot be placed")),
    }
}

/// Event length for an alternative's event type (the thread's when the same or absent).
pub(super) fn default_or_field(f: &Facts, event: Option<&str>) -> i64 {
    match event {
        Some(e) if e != f.event => default_duration(e),
        _ => f.duration,
    }
}

/// Evaluates a received §6.3 packet's alternatives against my availability and
/// flexibility: the first that fits is proposed, the next ones become alternatives;
/// none → escalate with what was tried.
pub(super) fn evaluate_alternatives(f: &Facts, alts: &Value) -> Decision {
    let view = f.view;
    let list: Vec<&Value> = match alts {
        Value::Array(a) => a.iter().take(MAX_ALTERNATIVES_EVALUATED).collect(),
        _ => Vec::new(),
    };
    let p = f.placed();
    let my_st = f.my_flex("time").map(Flex::stretch_min).unwrap_or(0);
    let my_df = f.my_flex("date");
    let mut tried: Vec<String> = Vec::new();
    let mut accepted: Vec<(AltSlot, Vec<Cand>, bool)> = Vec::new();
    for (i, v) in list.iter().enumerate() {
        let alt = match read_alternative(f, v, i) {
            Ok(a) => a,
            Err(why) => {
                tried.push(why);
                continue;
            }
        };
        let (avail, moved) = if p.mine.is_empty() {
            (vec![alt.iv], false)
        } else {
            let same_day: Vec<LocalWin> = p
                .mine
                .iter()
                .filter(|w| w.date == alt.date)
                .copied()
                .collect();
            let mut wins = p.mine.clone();
            let mut moved = false;
            if same_day.is_empty() {
                if let Some(df) = my_df {
                    let t = transposed(&p.mine, &[alt.date], Some(df));
                    moved = t.len() > wins.len();
                    wins = t;
                }
            }
            (intervals(&wins, my_st), moved)
        };
        let common = intersect(&[alt.iv], &avail);
        let dur = default_or_field(f, alt.event.as_deref())
            .min(alt.iv.len())
            .max(MIN_EVENT_SECS);
        let mut cands = Vec::new();
        add_cands(&mut cands, &common, dur, f.pres, Tier::Strict);
        let any = !cands.is_empty();
        cands.retain(|c| !is_rejected(view, f.pres, c.slot.s));
        if cands.is_empty() {
            tried.push(if any {
                format!("'{}': already ruled out", alt.label)
            } else {
                format!(
                    "'{}': outside my availability (my date flexibility: {})",
                    alt.label,
                    flex_word(my_df)
                )
            });
        } else {
            accepted.push((alt, cands, moved));
        }
    }
    let Some((first, cands, moved)) = accepted.first() else {
        let mut summary = if tried.is_empty() {
            "the peer's alternatives could not be read".to_string()
        } else {
            format!("Tried the peer's alternatives: {}", tried.join("; "))
        };
        summary.push_str(". ");
        summary.push_str(&tried_summary(view));
        return Decision::Escalate {
            reason: "None of the proposed alternatives fits my availability".to_string(),
            summary,
        };
    };
    let Some(main) = cands.first() else {
        return Decision::Wait;
    };
    let mut notes = vec![format!(
        "accepted the peer's alternative '{}': fits my availability{}",
        first.label,
        if *moved {
            format!(" (my date flexibility: {})", flex_word(my_df))
        } else if p.mine.is_empty() {
            " (I have no time windows on file)".to_string()
        } else {
            String::new()
        }
    )];
    if !tried.is_empty() {
        notes.push(format!("not possible: {}", tried.join("; ")));
    }
    let mut alternatives: Vec<Alternative> = accepted
        .iter()
        .skip(1)
        .filter_map(|(a, c, _)| {
            let c = c.first()?;
            let mut alt = alternative(f, c, main)?;
            alt.reason = format!("Also fits: the peer's alternative '{}'", a.label);
            Some(alt)
        })
        .take(2)
        .collect();
    if alternatives.len() < 2 {
        alternatives.extend(
            cands
                .iter()
                .skip(1)
                .filter_map(|c| alternative(f, c, main))
                .take(2 - alternatives.len()),
        );
    }
    let (event, in_ctx) = match &first.event {
        Some(e) => (e.clone(), true),
        None => (f.event.clone(), f.event_from_ctx),
    };
    build_proposal(f, &event, in_ctx, main.slot, alternatives, notes)
}
