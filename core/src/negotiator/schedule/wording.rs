//! How dates, times and durations are written in proposals, alternatives and notes.

use chrono::{Datelike, NaiveDate, Timelike};

use crate::negotiator::windows::{fmt_hm, Iv, Zone};

/// `2 h`, `1 h 30 min`, `45 min`.
pub(crate) fn fmt_duration(secs: i64) -> String {
    let m = secs.max(0) / 60;
    match (m / 60, m % 60) {
        (0, mm) => format!("{mm} min"),
        (h, 0) => format!("{h} h"),
        (h, mm) => format!("{h} h {mm} min"),
    }
}

/// `PT2H`, `PT1H30M`.
pub(super) fn iso_duration(secs: i64) -> String {
    crate::time::format_iso8601_duration(std::time::Duration::from_secs(secs.max(0).unsigned_abs()))
}

pub(super) const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

pub(super) const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

pub(crate) fn weekday_name(d: NaiveDate) -> &'static str {
    WEEKDAYS
        .get(d.weekday().num_days_from_monday() as usize)
        .copied()
        .unwrap_or("")
}

/// `Friday 27 March`.
pub(crate) fn fmt_day(d: NaiveDate) -> String {
    let month = MONTHS.get(d.month0() as usize).copied().unwrap_or("");
    format!("{} {} {}", weekday_name(d), d.day(), month)
}

/// `Friday 27 March 2026`.
pub(crate) fn fmt_day_year(d: NaiveDate) -> String {
    format!("{} {}", fmt_day(d), d.year())
}

pub(super) fn fmt_date(d: NaiveDate) -> String {
    format!("{:04}-{:02}-{:02}", d.year(), d.month(), d.day())
}

pub(super) fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// A local date and `HH:MM` of a UTC instant in `zone`.
pub(crate) fn local_parts(zone: Zone, secs: i64) -> Option<(NaiveDate, u32)> {
    let l = zone.to_local(secs)?;
    Some((l.date(), l.hour() * 60 + l.minute()))
}

/// Renders an interval in `zone`: `18:30–21:00 on Friday 27 March`.
pub(super) fn fmt_iv(zone: Zone, iv: Iv) -> String {
    match (local_parts(zone, iv.s), local_parts(zone, iv.e)) {
        (Some((d, s)), Some((_, e))) => format!("{}–{} on {}", fmt_hm(s), fmt_hm(e), fmt_day(d)),
        _ => "an unrepresentable time".to_string(),
    }
}
