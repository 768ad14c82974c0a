//! Times held by the sibling threads of a fork (§6.5: "the games thread knows dinner ends
//! at ~21:00"): a sibling's proposed or confirmed slot is taken out of this thread's
//! availability before it is negotiated (SPEC-NOTES "Drift and forks").

use chrono::{Datelike, Timelike, Weekday};
use serde_json::{Map, Value};

use super::windows::{
    fmt_hm, local_to_utc, parse_window_obj, parse_window_str, RawWindow, Zone, DAY_MIN,
};
use crate::packet::Context;

/// Most windows a `time_windows` value is read for (as the negotiator reads it).
const MAX_ENTRIES: usize = 64;

/// The slot a proposal's details hold (`date`, `time`, `end`, `timezone`), if they name one.
pub fn held_slot(details: &Context) -> Option<Context> {
    let w = parse_window_obj(details)?;
    let mut m = Map::new();
    if let Some(d) = w.date {
        m.insert(
            "date".into(),
            Value::String(d.format("%Y-%m-%d").to_string()),
        );
    }
    m.insert("start".into(), Value::String(fmt_hm(w.start)));
    m.insert("end".into(), Value::String(fmt_hm(w.end)));
    if let Some(z) = w.zone {
        m.insert("timezone".into(), Value::String(z.name()));
    }
    Some(m)
}

/// `windows` (a `time_windows` value: one window or a list) with the slots `held` (as
/// [`held_slot`] gives them) taken out. A window a slot cuts in two becomes two windows
/// (`{"date", "start", "end", "timezone"}` objects); windows no slot touches, and entries
/// that cannot be read, are kept as they are. A slot with a date applies to windows on
/// that date and to windows without a date (on the slot's weekday, if they name one). A
/// dated slot in one zone is moved into the zone of each window it is compared with (the
/// window's own, else `timezone`, the user's): dinner 19:00–21:00 in London holds
/// 14:00–16:00 of a New York window. Slots or windows with no zone are compared as local
/// times.
pub fn windows_without(windows: &Value, held: &[Context], timezone: Option<&str>) -> Value {
    let home = timezone.and_then(Zone::parse);
    let slots: Vec<RawWindow> = held.iter().filter_map(parse_window_obj).collect();
    if slots.is_empty() {
        return windows.clone();
    }
    let (entries, list) = match windows {
        Value::Array(a) => (a.iter().take(MAX_ENTRIES).collect::<Vec<_>>(), true),
        Value::Null => return Value::Null,
        v => (vec![v], false),
    };
    let mut out = Vec::new();
    let mut changed = false;
    for e in entries {
        let parsed = match e {
            Value::String(s) => parse_window_str(s),
            Value::Object(o) => parse_window_obj(o),
            _ => None,
        };
        let Some(w) = parsed else {
            out.push(e.clone());
            continue;
        };
        let mut pieces = vec![(w.start, w.end)];
        let zone = w.zone.or(home);
        let moved: Vec<RawWindow> = slots.iter().flat_map(|s| in_zone(s, zone)).collect();
        for s in moved.iter().filter(|s| applies(s, &w)) {
            pieces = pieces
                .into_iter()
                .flat_map(|(a, b)| cut(a, b, s.start, s.end))
                .collect();
        }
        if pieces == [(w.start, w.end)] {
            out.push(e.clone());
            continue;
        }
        changed = true;
        out.extend(pieces.into_iter().map(|(a, b)| piece(&w, a, b)));
    }
    if !changed {
        return windows.clone();
    }
    if !list && out.len() == 1 {
        return out.remove(0);
    }
    Value::Array(out)
}

/// Slot `s` in `zone`: as it is when it has no date or no zone, when `zone` is unknown or
/// the same; else its instants in `zone`'s local time, one piece per local date it covers.
fn in_zone(s: &RawWindow, zone: Option<Zone>) -> Vec<RawWindow> {
    let (Some(date), Some(from), Some(to)) = (s.date, s.zone, zone) else {
        return vec![s.clone()];
    };
    if from.name() == to.name() {
        return vec![s.clone()];
    }
    let Some(start) = local_to_utc(from, date, i64::from(s.start)) else {
        return vec![s.clone()];
    };
    let length = i64::from(s.end.saturating_sub(s.start)) * 60;
    let (Some(a), Some(b)) = (to.to_local(start), to.to_local(start + length)) else {
        return vec![s.clone()];
    };
    let minutes = |t: chrono::NaiveDateTime| t.hour() * 60 + t.minute();
    let piece = |d: chrono::NaiveDate, start: u32, end: u32| RawWindow {
        weekday: None,
        date: Some(d),
        start,
        end,
        zone: Some(to),
    };
    if a.date() == b.date() {
        return vec![piece(a.date(), minutes(a), minutes(b))];
    }
    // Across local midnight: the evening of one date and the morning of the next.
    let mut v = vec![piece(a.date(), minutes(a), DAY_MIN)];
    if minutes(b) > 0 {
        v.push(piece(b.date(), 0, minutes(b)));
    }
    v
}

/// Whether slot `s` falls on the days window `w` covers.
fn applies(s: &RawWindow, w: &RawWindow) -> bool {
    match (s.date, w.date) {
        (Some(sd), Some(wd)) => sd == wd,
        (Some(sd), None) => w.weekday.is_none_or(|d| d == sd.weekday()),
        (None, _) => match (s.weekday, w.weekday.or(w.date.map(|d| d.weekday()))) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        },
    }
}

/// `[a, b)` without `[hs, he)`, in minutes: nothing, one or two pieces.
fn cut(a: u32, b: u32, hs: u32, he: u32) -> Vec<(u32, u32)> {
    if he <= a || hs >= b {
        return vec![(a, b)];
    }
    let mut v = Vec::new();
    if hs > a {
        v.push((a, hs));
    }
    if he < b {
        v.push((he, b));
    }
    v
}

fn piece(w: &RawWindow, start: u32, end: u32) -> Value {
    let mut m = Map::new();
    if let Some(d) = w.date {
        m.insert(
            "date".into(),
            Value::String(d.format("%Y-%m-%d").to_string()),
        );
    } else if let Some(d) = w.weekday {
        m.insert("day".into(), Value::String(weekday_name(d).into()));
    }
    m.insert("start".into(), Value::String(fmt_hm(start)));
    m.insert("end".into(), Value::String(fmt_hm(end)));
    if let Some(z) = w.zone {
        m.insert("timezone".into(), Value::String(z.name()));
    }
    Value::Object(m)
}

fn weekday_name(d: Weekday) -> &'static str {
    match d {
        Weekday::Mon => "Monday",
        Weekday::Tue => "Tuesday",
        Weekday::Wed => "Wednesday",
        Weekday::Thu => "Thursday",
        Weekday::Fri => "Friday",
        Weekday::Sat => "Saturday",
        Weekday::Sun => "Sunday",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx(v: Value) -> Context {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn dinner_until_21_leaves_the_evening_after_it() {
        let dinner = held_slot(&ctx(json!({
            "date": "2026-03-27", "time": "19:00", "end": "21:00", "timezone": "Europe/London"
        })))
        .unwrap();
        assert_eq!(dinner["start"], "19:00");
        assert_eq!(dinner["end"], "21:00");
        let w = windows_without(&json!(["18:00-23:30"]), std::slice::from_ref(&dinner), None);
        assert_eq!(
            w,
            json!([{"start": "18:00", "end": "19:00"}, {"start": "21:00", "end": "23:30"}])
        );
        // Another date is untouched, a list keeps the entries nothing touches as written.
        let w = windows_without(
            &json!(["2026-03-28 18:00-23:00", {"date": "2026-03-27", "start": "20:00", "end": "22:00", "timezone": "Europe/London"}, 7]),
            std::slice::from_ref(&dinner),
            None,
        );
        assert_eq!(
            w,
            json!(["2026-03-28 18:00-23:00", {"date": "2026-03-27", "start": "21:00", "end": "22:00", "timezone": "Europe/London"}, 7])
        );
        // A window inside the slot disappears; one on another weekday stays.
        assert_eq!(
            windows_without(
                &json!(["Friday 19:30-20:30", "Saturday 19:00-20:00"]),
                std::slice::from_ref(&dinner),
                None,
            ),
            json!(["Saturday 19:00-20:00"])
        );
        // Nothing held, or nothing readable: unchanged.
        assert_eq!(
            windows_without(&json!("whenever"), &[dinner], None),
            json!("whenever")
        );
        assert_eq!(
            windows_without(&json!(["18:00-20:00"]), &[], None),
            json!(["18:00-20:00"])
        );
        assert!(held_slot(&ctx(json!({"summary": "no time"}))).is_none());
    }

    /// A sibling's slot in another zone holds the same instants in this side's zone: a
    /// London dinner 19:00–21:00 is 15:00–17:00 in New York on 27 March 2026 (London on
    /// GMT, New York already on daylight time), whether the zone is the window's own or
    /// the user's.
    #[test]
    fn a_slot_in_another_zone_holds_the_same_instants() {
        let dinner = held_slot(&ctx(json!({
            "date": "2026-03-27", "time": "19:00", "end": "21:00", "timezone": "Europe/London"
        })))
        .unwrap();
        let held = std::slice::from_ref(&dinner);
        assert_eq!(
            windows_without(
                &json!(["2026-03-27 14:00-18:00"]),
                held,
                Some("America/New_York")
            ),
            json!([
                {"date": "2026-03-27", "start": "14:00", "end": "15:00"},
                {"date": "2026-03-27", "start": "17:00", "end": "18:00"}
            ])
        );
        let own = json!({"date": "2026-03-27", "start": "14:00", "end": "18:00", "timezone": "America/New_York"});
        assert_eq!(
            windows_without(&own, held, Some("Europe/London")),
            json!([
                {"date": "2026-03-27", "start": "14:00", "end": "15:00", "timezone": "America/New_York"},
                {"date": "2026-03-27", "start": "17:00", "end": "18:00", "timezone": "America/New_York"}
            ])
        );
        // The evening in London is untouched in New York: 19:00–21:00 there is later.
        assert_eq!(
            windows_without(
                &json!(["2026-03-27 19:00-21:00"]),
                held,
                Some("America/New_York")
            ),
            json!(["2026-03-27 19:00-21:00"])
        );
        // Across local midnight: a Tokyo window on the 28th loses its early morning
        // (London 19:00 GMT = Tokyo 04:00 the next day).
        assert_eq!(
            windows_without(&json!(["2026-03-28 03:00-08:00"]), held, Some("Asia/Tokyo")),
            json!([{"date": "2026-03-28", "start": "03:00", "end": "04:00"}, {"date": "2026-03-28", "start": "06:00", "end": "08:00"}])
        );
    }
}
