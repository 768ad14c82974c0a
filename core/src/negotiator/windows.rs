//! Time windows: parsing the forms agents send, time zones, and interval arithmetic in
//! UTC seconds. Nothing here reads a clock; every date comes from the context.

use std::str::FromStr;

use chrono::{DateTime, Datelike, Days, FixedOffset, NaiveDate, NaiveDateTime, TimeZone, Weekday};
use chrono_tz::Tz;
use serde_json::Value;

use super::str_field;
use crate::packet::Context;

/// Minutes in a day.
pub(crate) const DAY_MIN: u32 = 1440;
/// Most windows read from one side (after spreading dateless windows over dates).
const MAX_WINDOWS: usize = 64;
/// Most dates read from one side's `proposed_dates`.
const MAX_DATES: usize = 14;
/// Most window entries read from one side's `time_windows`.
const MAX_ENTRIES: usize = 32;

/// A time zone: an IANA zone or a fixed offset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Zone {
    /// IANA zone such as `Europe/London` (daylight saving applied).
    Iana(Tz),
    /// Fixed offset such as `+01:00`.
    Fixed(FixedOffset),
}

impl Zone {
    /// UTC.
    pub fn utc() -> Zone {
        Zone::Fixed(chrono::Offset::fix(&chrono::Utc))
    }

    /// Parses `Europe/London`, `europe/london`, `UTC`, `GMT`, `Z`, `+01:00`, `UTC+1`,
    /// `GMT-05:00`, `+0530`.
    pub fn parse(s: &str) -> Option<Zone> {
        let s = s.trim();
        if s.is_empty() || s.len() > 64 {
            return None;
        }
        let upper = s.to_ascii_uppercase();
        if matches!(upper.as_str(), "Z" | "UTC" | "GMT") {
            return Some(Zone::utc());
        }
        for prefix in ["UTC", "GMT"] {
            if let Some(rest) = upper.strip_prefix(prefix) {
                if let Some((secs, "")) = parse_offset(rest.trim_start()) {
                    return FixedOffset::east_opt(secs).map(Zone::Fixed);
                }
            }
        }
        if let Some((secs, "")) = parse_offset(s) {
            return FixedOffset::east_opt(secs).map(Zone::Fixed);
        }
        if let Ok(tz) = Tz::from_str(s) {
            return Some(Zone::Iana(tz));
        }
        Tz::from_str(&normalise_tz_name(s)).ok().map(Zone::Iana)
    }

    /// The zone's name as shown to users: the IANA name, `UTC`, or `+01:00`.
    pub fn name(self) -> String {
        match self {
            Zone::Iana(tz) => tz.name().to_string(),
            Zone::Fixed(off) => {
                let secs = off.local_minus_utc();
                if secs == 0 {
                    return "UTC".to_string();
                }
                let sign = if secs < 0 { '-' } else { '+' };
                let abs = secs.unsigned_abs();
                format!("{sign}{:02}:{:02}", abs / 3600, (abs % 3600) / 60)
            }
        }
    }

    /// A local date and time to UTC seconds. In a daylight-saving gap the time is moved
    /// one hour on; in an overlap the earlier instant is taken.
    pub fn to_utc(self, ndt: NaiveDateTime) -> Option<i64> {
        fn conv<T: TimeZone>(tz: &T, ndt: NaiveDateTime) -> Option<i64> {
            if let Some(dt) = tz.from_local_datetime(&ndt).earliest() {
                return Some(dt.timestamp());
            }
            let later = ndt.checked_add_signed(chrono::TimeDelta::try_hours(1)?)?;
            tz.from_local_datetime(&later)
                .earliest()
                .map(|d| d.timestamp())
        }
        match self {
            Zone::Iana(tz) => conv(&tz, ndt),
            Zone::Fixed(off) => conv(&off, ndt),
        }
    }

    /// UTC seconds to local date and time.
    pub fn to_local(self, secs: i64) -> Option<NaiveDateTime> {
        let utc = DateTime::from_timestamp(secs, 0)?;
        Some(match self {
            Zone::Iana(tz) => utc.with_timezone(&tz).naive_local(),
            Zone::Fixed(off) => utc.with_timezone(&off).naive_local(),
        })
    }
}

/// `europe/london` → `Europe/London`, `america/new_york` → `America/New_York`.
fn normalise_tz_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut upper_next = true;
    for c in s.chars() {
        if upper_next {
            out.extend(c.to_uppercase());
        } else {
            out.extend(c.to_lowercase());
        }
        upper_next = matches!(c, '/' | '_' | '-');
    }
    out
}

/// Parses a UTC offset at the start of `s`: `+01:00`, `-0500`, `+1`, `Z`. Returns seconds
/// east of UTC and the rest. Offsets beyond ±14 h are refused.
pub(crate) fn parse_offset(s: &str) -> Option<(i32, &str)> {
    if let Some(rest) = s.strip_prefix('Z').or_else(|| s.strip_prefix('z')) {
        return Some((0, rest));
    }
    let (sign, rest) = if let Some(r) = s.strip_prefix('+') {
        (1, r)
    } else if let Some(r) = s.strip_prefix('-').or_else(|| s.strip_prefix('−')) {
        (-1, r)
    } else {
        return None;
    };
    let n = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (h, m, rest) = match n {
        4 => {
            let h: u32 = rest.get(..2)?.parse().ok()?;
            let m: u32 = rest.get(2..4)?.parse().ok()?;
            (h, m, rest.get(4..)?)
        }
        1 | 2 => {
            let (h, r) = digits(rest, 2)?;
            match r.strip_prefix(':') {
                Some(r2) if r2.bytes().take_while(u8::is_ascii_digit).count() == 2 => {
                    let (m, r3) = digits(r2, 2)?;
                    (h, m, r3)
                }
                Some(_) => return None,
                None => (h, 0, r),
            }
        }
        _ => return None,
    };
    if h > 14 || m >= 60 || (h == 14 && m > 0) {
        return None;
    }
    let secs = i32::try_from(h * 3600 + m * 60).ok()?;
    Some((sign * secs, rest))
}

/// Up to `max` leading ASCII digits as a number; `None` if there are none or more follow.
fn digits(s: &str, max: usize) -> Option<(u32, &str)> {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    if n == 0 || n > max {
        return None;
    }
    let (d, rest) = s.split_at_checked(n)?;
    Some((d.parse().ok()?, rest))
}

/// Parses a time of day at the start of `s`: `18:00`, `8:30`, `18`, `6pm`, `6:30 pm`,
/// `18.30`, `24:00`. Returns minutes since midnight (0..=1440) and the rest.
pub(crate) fn parse_hm(s: &str) -> Option<(u32, &str)> {
    let (h, mut rest) = digits(s, 2)?;
    let mut m = 0;
    if let Some(r) = rest.strip_prefix(':').or_else(|| rest.strip_prefix('.')) {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        if n != 2 {
            return None;
        }
        let (mm, r2) = digits(r, 2)?;
        m = mm;
        rest = r2;
        // Optional seconds, ignored when zero.
        if let Some(r3) = rest.strip_prefix(':') {
            if let Some((sec, r4)) = digits(r3, 2) {
                if sec != 0 {
                    return None;
                }
                rest = r4;
            }
        }
    }
    let trimmed = rest.trim_start();
    let lower = trimmed.get(..4).unwrap_or(trimmed).to_ascii_lowercase();
    let mut h = h;
    let meridiem = [("a.m.", false), ("p.m.", true), ("am", false), ("pm", true)]
        .into_iter()
        .find(|(word, _)| lower.starts_with(word));
    if let Some((word, pm)) = meridiem {
        let after = trimmed.get(word.len()..)?;
        if after.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return None;
        }
        if !(1..=12).contains(&h) {
            return None;
        }
        h = match (h, pm) {
            (12, false) => 0,
            (12, true) => 12,
            (h, true) => h + 12,
            (h, false) => h,
        };
        rest = after;
    }
    if m >= 60 || h > 24 || (h == 24 && m != 0) {
        return None;
    }
    Some((h * 60 + m, rest))
}

/// Parses `YYYY-MM-DD` at the start of `s`.
pub(crate) fn parse_date_prefix(s: &str) -> Option<(NaiveDate, &str)> {
    let b = s.as_bytes();
    if b.len() < 10
        || b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !b.get(..4)?.iter().all(u8::is_ascii_digit)
        || !b.get(5..7)?.iter().all(u8::is_ascii_digit)
        || !b.get(8..10)?.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    let y: i32 = s.get(..4)?.parse().ok()?;
    if y < 1000 {
        return None;
    }
    let m: u32 = s.get(5..7)?.parse().ok()?;
    let d: u32 = s.get(8..10)?.parse().ok()?;
    let date = NaiveDate::from_ymd_opt(y, m, d)?;
    let rest = s.get(10..)?;
    if rest.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some((date, rest))
}

/// Parses a whole string as a date (`2026-03-27`).
pub(crate) fn parse_date(s: &str) -> Option<NaiveDate> {
    match parse_date_prefix(s.trim()) {
        Some((d, "")) => Some(d),
        _ => None,
    }
}

/// Parses a weekday name (`Wednesday`, `wed`, `Weds`, `Thurs`).
pub(crate) fn parse_weekday(word: &str) -> Option<Weekday> {
    let w = word
        .trim()
        .trim_end_matches(['.', ','])
        .to_ascii_lowercase();
    let table = [
        (Weekday::Mon, &["mon", "monday"][..]),
        (Weekday::Tue, &["tue", "tues", "tuesday"][..]),
        (Weekday::Wed, &["wed", "weds", "wednesday"][..]),
        (Weekday::Thu, &["thu", "thur", "thurs", "thursday"][..]),
        (Weekday::Fri, &["fri", "friday"][..]),
        (Weekday::Sat, &["sat", "saturday"][..]),
        (Weekday::Sun, &["sun", "sunday"][..]),
    ];
    table
        .iter()
        .find(|(_, names)| names.contains(&w.as_str()))
        .map(|(d, _)| *d)
}

/// A window as written: optional weekday and date, local start and end, optional zone.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawWindow {
    /// Weekday named in the window.
    pub weekday: Option<Weekday>,
    /// Date named in the window.
    pub date: Option<NaiveDate>,
    /// Start, minutes after local midnight.
    pub start: u32,
    /// End, minutes after local midnight; may exceed a day when the window crosses midnight.
    pub end: u32,
    /// Zone or offset written in the window.
    pub zone: Option<Zone>,
}

/// Skips a range separator: `-`, `–`, `—`, `to`, `until`, with surrounding spaces.
fn range_sep(s: &str) -> Option<&str> {
    let t = s.trim_start();
    for sep in ["-", "–", "—", "to ", "until "] {
        if let Some(r) = t.strip_prefix(sep) {
            return Some(r.trim_start());
        }
    }
    None
}

/// Parses a trailing zone: an offset (`+01:00`), `Z`, `UTC`, `GMT+1` or an IANA name,
/// possibly in parentheses. Empty input means no zone.
fn trailing_zone(s: &str) -> Option<Option<Zone>> {
    let t = s.trim();
    if t.is_empty() {
        return Some(None);
    }
    let t = t
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .unwrap_or(t)
        .trim();
    Zone::parse(t).map(Some)
}

/// After a start time: the rest of a range `[offset] sep end [offset] [zone]`.
fn range_rest(rest: &str) -> Option<(u32, Option<Zone>)> {
    let after_sep = range_sep(rest)?;
    let (end, tail) = parse_hm(after_sep.trim_start())?;
    // An offset written right after the end time, e.g. `21:00+01:00`.
    if let Some((secs, more)) = parse_offset(tail) {
        if more.trim().is_empty() {
            return Some((end, FixedOffset::east_opt(secs).map(Zone::Fixed)));
        }
    }
    Some((end, trailing_zone(tail)?))
}

/// Parses a window string: `18:00-21:00`, `18:00-21:00+01:00`, `Wednesday 18:00-21:00`,
/// `2026-03-27 18:00-21:00`, `Wednesday 2026-03-25 18:00-21:00`, `Fri 6pm-9pm`,
/// `18:00+01:00-21:00+01:00`, `18:00-21:00 Europe/London`.
pub(crate) fn parse_window_str(s: &str) -> Option<RawWindow> {
    let mut rest = s.trim();
    if rest.len() > 120 {
        return None;
    }
    let mut weekday = None;
    let mut date = None;
    if rest.starts_with(|c: char| c.is_ascii_alphabetic()) {
        let word_len = rest
            .find(|c: char| c.is_whitespace() || c == ',')
            .unwrap_or(rest.len());
        let (word, r) = rest.split_at_checked(word_len)?;
        weekday = Some(parse_weekday(word)?);
        rest = r.trim_start().trim_start_matches(',').trim_start();
    }
    if let Some((d, r)) = parse_date_prefix(rest) {
        date = Some(d);
        rest = r.trim_start().trim_start_matches(['T', ',']).trim_start();
    }
    let (start, after_start) = parse_hm(rest)?;
    // Try `start sep end ...`, then `start offset sep end ...`.
    let (end, zone) = match range_rest(after_start) {
        Some(x) => x,
        None => {
            let (secs, r) = parse_offset(after_start)?;
            let (end, z) = range_rest(r)?;
            (end, z.or(FixedOffset::east_opt(secs).map(Zone::Fixed)))
        }
    };
    make_window(weekday, date, start, end, zone)
}

fn make_window(
    weekday: Option<Weekday>,
    date: Option<NaiveDate>,
    start: u32,
    end: u32,
    zone: Option<Zone>,
) -> Option<RawWindow> {
    if start >= DAY_MIN || start == end {
        return None;
    }
    let end = if end < start { end + DAY_MIN } else { end };
    Some(RawWindow {
        weekday,
        date,
        start,
        end,
        zone,
    })
}

/// Parses a time value of a window object: `18:00`, `18:00+01:00`, or a full
/// `2026-03-27T18:00:00+01:00`. Returns (date, minutes, offset zone).
fn parse_time_value(s: &str) -> Option<(Option<NaiveDate>, u32, Option<Zone>)> {
    let mut rest = s.trim();
    let mut date = None;
    if let Some((d, r)) = parse_date_prefix(rest) {
        date = Some(d);
        rest = r.trim_start_matches(['T', 't', ' ']);
    }
    let (m, r) = parse_hm(rest)?;
    Some((date, m, trailing_zone(r)?))
}

/// Parses a window object `{"date", "start", "end", "timezone"}` (also `day`/`weekday`,
/// `from`/`to`, `tz`).
pub(crate) fn parse_window_obj(o: &serde_json::Map<String, Value>) -> Option<RawWindow> {
    let get = |keys: &[&str]| -> Option<&str> {
        keys.iter()
            .find_map(|k| o.get(*k).and_then(Value::as_str))
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let (sd, start, sz) = parse_time_value(get(&["start", "from", "time"])?)?;
    let (ed, end, ez) = parse_time_value(get(&["end", "to", "until"])?)?;
    let mut date = match get(&["date"]) {
        Some(d) => Some(parse_date(d)?),
        None => sd,
    };
    let weekday = match get(&["day", "weekday"]) {
        Some(w) => Some(parse_weekday(w)?),
        None => None,
    };
    let zone = match get(&["timezone", "tz", "time_zone"]) {
        Some(z) => Some(Zone::parse(z)?),
        None => sz.or(ez),
    };
    // An end on a later date than the start (full date-times) crosses midnight.
    let mut end = end;
    if let (Some(s), Some(e)) = (date.or(sd), ed) {
        if e > s && end <= start {
            end += DAY_MIN;
        }
    }
    if date.is_none() {
        date = ed;
    }
    make_window(weekday, date, start, end, zone)
}

/// A window placed on a date: local date, local minutes, zone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LocalWin {
    /// Local date of the start.
    pub date: NaiveDate,
    /// Start, minutes after local midnight.
    pub start: u32,
    /// End, minutes after local midnight of `date` (may exceed 1440).
    pub end: u32,
    /// Zone the times are in.
    pub zone: Zone,
}

impl LocalWin {
    /// The window in UTC seconds, widened by `stretch_min` minutes on each side.
    pub fn to_interval(self, stretch_min: u32) -> Option<Iv> {
        let s = local_to_utc(
            self.zone,
            self.date,
            i64::from(self.start) - i64::from(stretch_min),
        )?;
        let e = local_to_utc(
            self.zone,
            self.date,
            i64::from(self.end) + i64::from(stretch_min),
        )?;
        (e > s).then_some(Iv { s, e })
    }

    /// The same window on another date.
    pub fn on(self, date: NaiveDate) -> LocalWin {
        LocalWin { date, ..self }
    }
}

/// `date` at `minutes` after local midnight (may be negative or beyond a day) to UTC.
pub(crate) fn local_to_utc(zone: Zone, date: NaiveDate, minutes: i64) -> Option<i64> {
    let day_shift = minutes.div_euclid(i64::from(DAY_MIN));
    let m = u32::try_from(minutes.rem_euclid(i64::from(DAY_MIN))).ok()?;
    let d = if day_shift >= 0 {
        date.checked_add_days(Days::new(day_shift.unsigned_abs()))?
    } else {
        date.checked_sub_days(Days::new(day_shift.unsigned_abs()))?
    };
    let ndt = d.and_hms_opt(m / 60, m % 60, 0)?;
    zone.to_utc(ndt)
}

/// A half-open interval `[s, e)` in UTC seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Iv {
    /// Start.
    pub s: i64,
    /// End.
    pub e: i64,
}

impl Iv {
    /// Length in seconds.
    pub fn len(&self) -> i64 {
        self.e.saturating_sub(self.s)
    }
}

/// Sorts and merges overlapping or touching intervals.
pub(crate) fn normalise(mut v: Vec<Iv>) -> Vec<Iv> {
    v.retain(|iv| iv.e > iv.s);
    v.sort();
    let mut out: Vec<Iv> = Vec::with_capacity(v.len());
    for iv in v {
        match out.last_mut() {
            Some(last) if iv.s <= last.e => last.e = last.e.max(iv.e),
            _ => out.push(iv),
        }
    }
    out
}

/// Intersection of two unions of intervals.
pub(crate) fn intersect(a: &[Iv], b: &[Iv]) -> Vec<Iv> {
    let a = normalise(a.to_vec());
    let b = normalise(b.to_vec());
    let mut out = Vec::new();
    for x in &a {
        for y in &b {
            let s = x.s.max(y.s);
            let e = x.e.min(y.e);
            if e > s {
                out.push(Iv { s, e });
            }
        }
    }
    normalise(out)
}

/// One side's availability as read from its context.
#[derive(Debug, Clone, Default)]
pub(crate) struct SideWindows {
    /// The side's `timezone` field, parsed.
    pub zone: Option<Zone>,
    /// The side's `timezone` field was present but not understood.
    pub zone_unreadable: bool,
    /// Dates from `proposed_date` / `date` / `proposed_dates` / `dates`.
    pub dates: Vec<NaiveDate>,
    /// Windows parsed from `time_windows` (or `availability`).
    pub raw: Vec<RawWindow>,
    /// Whether the side has a time-windows field at all.
    pub present: bool,
    /// Entries that could not be read.
    pub unreadable: Vec<String>,
}

/// Reads one side's availability fields.
pub(crate) fn read_side(ctx: &Context) -> SideWindows {
    let mut side = SideWindows::default();
    if let Some(z) = str_field(ctx, "timezone") {
        side.zone = Zone::parse(z);
        side.zone_unreadable = side.zone.is_none();
    }
    for key in ["proposed_date", "date", "proposed_dates", "dates"] {
        let vals: Vec<&Value> = match ctx.get(key) {
            Some(Value::Array(a)) => a.iter().take(MAX_DATES).collect(),
            Some(v) => vec![v],
            None => continue,
        };
        for v in vals {
            if let Some(d) = v.as_str().and_then(parse_date) {
                if !side.dates.contains(&d) && side.dates.len() < MAX_DATES {
                    side.dates.push(d);
                }
            }
        }
    }
    let field = ctx.get("time_windows").or_else(|| ctx.get("availability"));
    let entries: Vec<&Value> = match field {
        None | Some(Value::Null) => return side,
        Some(Value::Array(a)) => a.iter().take(MAX_ENTRIES).collect(),
        Some(v) => vec![v],
    };
    side.present = true;
    for e in entries {
        let parsed = match e {
            Value::String(s) => parse_window_str(s),
            Value::Object(o) => parse_window_obj(o),
            _ => None,
        };
        match parsed {
            Some(w) => side.raw.push(w),
            None => {
                if side.unreadable.len() < 8 {
                    side.unreadable.push(super::clip(&value_text(e), 60));
                }
            }
        }
    }
    side
}

/// A short text form of a JSON value.
pub(crate) fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => {
            let t = other.to_string();
            super::clip(&t, 80)
        }
    }
}

/// Places a side's windows on dates and in zones.
///
/// A window's date is its own date; else, for a weekday-only window, the first such
/// weekday on or after the side's first date (or the other side's); else each of the
/// side's dates (or the other side's). Its zone is its own zone, else the side's
/// `timezone`, else the other side's, else `fallback`. Windows without a resolvable date
/// are returned in the second list.
pub(crate) fn place(
    side: &SideWindows,
    other: &SideWindows,
    fallback: Zone,
) -> (Vec<LocalWin>, Vec<RawWindow>) {
    let dates: &[NaiveDate] = if side.dates.is_empty() {
        &other.dates
    } else {
        &side.dates
    };
    let mut out = Vec::new();
    let mut undated = Vec::new();
    for w in &side.raw {
        let zone = w.zone.or(side.zone).or(other.zone).unwrap_or(fallback);
        let on: Vec<NaiveDate> = match (w.date, w.weekday) {
            (Some(d), _) => vec![d],
            (None, Some(wd)) => match dates.first().and_then(|a| next_weekday(*a, wd)) {
                Some(d) => vec![d],
                None => Vec::new(),
            },
            (None, None) => dates.to_vec(),
        };
        if on.is_empty() {
            undated.push(w.clone());
        }
        for date in on {
            if out.len() >= MAX_WINDOWS {
                break;
            }
            out.push(LocalWin {
                date,
                start: w.start,
                end: w.end,
                zone,
            });
        }
    }
    (out, undated)
}

/// The first date on or after `from` that falls on `wd`.
pub(crate) fn next_weekday(from: NaiveDate, wd: Weekday) -> Option<NaiveDate> {
    let ahead = (7 + wd.num_days_from_monday() - from.weekday().num_days_from_monday()) % 7;
    from.checked_add_days(Days::new(u64::from(ahead)))
}

/// `HH:MM` of minutes after midnight (wrapping past a day).
pub(crate) fn fmt_hm(minutes: u32) -> String {
    let m = minutes % DAY_MIN;
    format!("{:02}:{:02}", m / 60, m % 60)
}
