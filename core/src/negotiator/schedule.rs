//! Scheduling: intersect availability across time zones, pick a slot, build the §8.1
//! proposal, or the §6.3 conflict packet, or evaluate a received one.

use chrono::{Datelike, Days, NaiveDate, Timelike};
use serde_json::{Map, Value};

use super::needs::{self, EventKind};
use super::prefs::{intersect_budgets, merge_dietary, parse_budget};
use super::windows::{
    fmt_hm, intersect, local_to_utc, parse_date, parse_hm, place, read_side, Iv, LocalWin,
    SideWindows, Zone, DAY_MIN,
};
use super::{clip, str_field, tried_summary, Decision, View, DIFFERENT_PLACE};
use crate::packet::{
    ActionSpec, Alternative, Context, Escalation, Need, Priority, Proposal, MAX_NEEDS_PER_PACKET,
};

/// Longest string copied from a context into a proposal; longer values are left out.
const MAX_COPIED_LEN: usize = 200;
/// Most candidate slots considered.
const MAX_CANDIDATES: usize = 200;
/// Most §6.3 alternatives evaluated.
const MAX_ALTERNATIVES_EVALUATED: usize = 10;
/// Shortest event accepted, in seconds.
const MIN_EVENT_SECS: i64 = 15 * 60;
/// Longest event accepted, in seconds.
const MAX_EVENT_SECS: i64 = 24 * 3600;
/// How far `somewhat_flexible` dates may move, in days.
const SOMEWHAT_DAYS: u64 = 7;

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
    fn parse(v: &Value) -> Option<Flex> {
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
    fn stretch_min(self) -> u32 {
        match self {
            Flex::NotFlexible => 0,
            Flex::Somewhat => 30,
            Flex::Flexible => 60,
        }
    }

    /// Whether a window stated on `from` may move to `to`.
    fn date_allows(self, from: NaiveDate, to: NaiveDate) -> bool {
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

fn flex_word(f: Option<Flex>) -> &'static str {
    f.map(Flex::word).unwrap_or("not stated")
}

/// What the negotiator knows about the thread, worked out once.
struct Facts<'a> {
    view: &'a View<'a>,
    /// The initiator's context.
    init: &'a Context,
    /// The responder's context.
    resp: &'a Context,
    /// Lower-case event type (may be empty).
    event: String,
    /// Whether `event` comes from a context (and so may appear in a proposal).
    event_from_ctx: bool,
    kind: EventKind,
    /// Event length in seconds.
    duration: i64,
    /// Zone proposals are shown in: the initiator's.
    pres: Zone,
    /// Whether `pres` is a real zone rather than the UTC fallback.
    pres_known: bool,
    my_side: SideWindows,
    their_side: SideWindows,
}

impl<'a> Facts<'a> {
    fn new(view: &'a View<'a>) -> Self {
        let (init, resp) = if view.i_am_initiator {
            (view.mine, view.theirs)
        } else {
            (view.theirs, view.mine)
        };
        let event = needs::event_type(view.intent, init, resp);
        let event_from_ctx = str_field(init, "event_type")
            .or_else(|| str_field(resp, "event_type"))
            .is_some();
        let kind = needs::event_kind(&event);
        let duration = event_duration(&event, init, resp);
        let my_side = read_side(view.mine);
        let their_side = read_side(view.theirs);
        let (init_side, resp_side) = if view.i_am_initiator {
            (&my_side, &their_side)
        } else {
            (&their_side, &my_side)
        };
        let pres = init_side
            .zone
            .or_else(|| init_side.raw.iter().find_map(|w| w.zone))
            .or(resp_side.zone)
            .or_else(|| resp_side.raw.iter().find_map(|w| w.zone));
        Facts {
            view,
            init,
            resp,
            event,
            event_from_ctx,
            kind,
            duration,
            pres: pres.unwrap_or_else(Zone::utc),
            pres_known: pres.is_some(),
            my_side,
            their_side,
        }
    }

    fn my_flex(&self, aspect: &str) -> Option<Flex> {
        flex_of(self.view.mine, aspect)
    }

    fn their_flex(&self, aspect: &str) -> Option<Flex> {
        flex_of(self.view.theirs, aspect)
    }

    /// Places both sides' windows on dates.
    fn placed(&self) -> Placed {
        let my_extra = explicit_dates(&self.their_side);
        let their_extra = explicit_dates(&self.my_side);
        let (mine, my_undated) = place(
            &with_dates(&self.my_side, &self.their_side, &my_extra),
            &self.their_side,
            self.pres,
        );
        let (theirs, their_undated) = place(
            &with_dates(&self.their_side, &self.my_side, &their_extra),
            &self.my_side,
            self.pres,
        );
        Placed {
            mine,
            theirs,
            undated: !my_undated.is_empty() || !their_undated.is_empty(),
        }
    }
}

/// Both sides' windows on dates.
struct Placed {
    mine: Vec<LocalWin>,
    theirs: Vec<LocalWin>,
    /// Some window could not be given a date.
    undated: bool,
}

/// Dates written inside a side's windows.
fn explicit_dates(side: &SideWindows) -> Vec<NaiveDate> {
    let mut v: Vec<NaiveDate> = side.raw.iter().filter_map(|w| w.date).collect();
    v.sort();
    v.dedup();
    v.truncate(14);
    v
}

/// A side with, when neither it nor the other side names a date, the dates written in
/// the other side's windows as anchors.
fn with_dates(side: &SideWindows, other: &SideWindows, extra: &[NaiveDate]) -> SideWindows {
    let mut s = side.clone();
    if s.dates.is_empty() && other.dates.is_empty() {
        s.dates = extra.to_vec();
    }
    s
}

/// Event length: the `duration` field (ISO 8601, 15 min to 24 h) of the initiator, else
/// the responder; else 2 h for dinner/supper, 1.5 h for lunch, 1 h otherwise.
fn event_duration(event: &str, init: &Context, resp: &Context) -> i64 {
    let from_field = [init, resp]
        .iter()
        .filter_map(|c| str_field(c, "duration"))
        .filter_map(crate::time::parse_iso8601_duration)
        .filter_map(|d| i64::try_from(d.as_secs()).ok())
        .find(|s| (MIN_EVENT_SECS..=MAX_EVENT_SECS).contains(s));
    from_field.unwrap_or_else(|| default_duration(event))
}

fn default_duration(event: &str) -> i64 {
    if event.contains("dinner") || event.contains("supper") {
        2 * 3600
    } else if event.contains("lunch") {
        90 * 60
    } else {
        3600
    }
}

/// `2 h`, `1 h 30 min`, `45 min`.
fn fmt_duration(secs: i64) -> String {
    let m = secs.max(0) / 60;
    match (m / 60, m % 60) {
        (0, mm) => format!("{mm} min"),
        (h, 0) => format!("{h} h"),
        (h, mm) => format!("{h} h {mm} min"),
    }
}

/// `PT2H`, `PT1H30M`.
fn iso_duration(secs: i64) -> String {
    crate::time::format_iso8601_duration(std::time::Duration::from_secs(secs.max(0).unsigned_abs()))
}

const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
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

fn weekday_name(d: NaiveDate) -> &'static str {
    WEEKDAYS
        .get(d.weekday().num_days_from_monday() as usize)
        .copied()
        .unwrap_or("")
}

/// `Friday 27 March`.
fn fmt_day(d: NaiveDate) -> String {
    let month = MONTHS.get(d.month0() as usize).copied().unwrap_or("");
    format!("{} {} {}", weekday_name(d), d.day(), month)
}

/// `Friday 27 March 2026`.
fn fmt_day_year(d: NaiveDate) -> String {
    format!("{} {}", fmt_day(d), d.year())
}

fn fmt_date(d: NaiveDate) -> String {
    format!("{:04}-{:02}-{:02}", d.year(), d.month(), d.day())
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// A local date and `HH:MM` of a UTC instant in `zone`.
fn local_parts(zone: Zone, secs: i64) -> Option<(NaiveDate, u32)> {
    let l = zone.to_local(secs)?;
    Some((l.date(), l.hour() * 60 + l.minute()))
}

/// How a candidate slot was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
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
struct Cand {
    slot: Iv,
    /// The common window the slot was picked from.
    within: Iv,
    tier: Tier,
}

/// Starts to try inside `iv` for an event of `dur` seconds, best first: the overlap start
/// rounded up to the next full hour in `zone` (or the overlap start when that would not
/// fit), then 30 minutes later, the latest start, the overlap start, then every half hour.
fn starts_in(iv: Iv, dur: i64, zone: Zone) -> Vec<i64> {
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
fn is_rejected(view: &View, zone: Zone, start: i64) -> bool {
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
fn add_cands(out: &mut Vec<Cand>, ivs: &[Iv], dur: i64, zone: Zone, tier: Tier) {
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
fn add_short(out: &mut Vec<Cand>, ivs: &[Iv], dur: i64, tier_of_short: Tier) {
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

fn intervals(wins: &[LocalWin], stretch: u32) -> Vec<Iv> {
    wins.iter().filter_map(|w| w.to_interval(stretch)).collect()
}

/// `wins` plus copies moved to each of `targets` that `flex` allows.
fn transposed(wins: &[LocalWin], targets: &[NaiveDate], flex: Option<Flex>) -> Vec<LocalWin> {
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

fn dates_of(wins: &[LocalWin]) -> Vec<NaiveDate> {
    let mut d: Vec<NaiveDate> = wins.iter().map(|w| w.date).collect();
    d.sort();
    d.dedup();
    d
}

/// The outcome of looking for a slot.
enum Plan {
    /// Slots found (not ruled out), best first; `skipped` counts ruled-out ones.
    Slots {
        cands: Vec<Cand>,
        skipped: usize,
        one_sided_note: Option<String>,
    },
    /// Every slot found had been ruled out.
    AllRejected,
    /// Both sides' windows are known and nothing fits.
    NoOverlap { placed: Placed },
    /// Windows exist but no date to put them on.
    NeedDate,
    /// Cannot schedule, for the reason given.
    Unusable(String),
}

fn plan(f: &Facts) -> Plan {
    let view = f.view;
    let p = f.placed();
    let dur = f.duration;
    let mut cands: Vec<Cand> = Vec::new();
    let mut one_sided_note = None;
    if !p.theirs.is_empty() && !p.mine.is_empty() {
        let t1 = intersect(&intervals(&p.mine, 0), &intervals(&p.theirs, 0));
        add_cands(&mut cands, &t1, dur, f.pres, Tier::Strict);
        let my_st = f.my_flex("time").map(Flex::stretch_min).unwrap_or(0);
        let their_st = f.their_flex("time").map(Flex::stretch_min).unwrap_or(0);
        let t2 = if my_st > 0 || their_st > 0 {
            intersect(&intervals(&p.mine, my_st), &intervals(&p.theirs, their_st))
        } else {
            Vec::new()
        };
        add_cands(&mut cands, &t2, dur, f.pres, Tier::TimeFlex);
        let my_df = f.my_flex("date").filter(|x| *x != Flex::NotFlexible);
        let their_df = f.their_flex("date").filter(|x| *x != Flex::NotFlexible);
        if my_df.is_some() || their_df.is_some() {
            let mine_t = transposed(&p.mine, &dates_of(&p.theirs), my_df);
            let theirs_t = transposed(&p.theirs, &dates_of(&p.mine), their_df);
            let t3 = intersect(&intervals(&mine_t, my_st), &intervals(&theirs_t, their_st));
            add_cands(&mut cands, &t3, dur, f.pres, Tier::DateFlex);
        }
        add_short(&mut cands, &t1, dur, Tier::Short);
        add_short(&mut cands, &t2, dur, Tier::Short);
        if cands.is_empty() {
            return Plan::NoOverlap { placed: p };
        }
    } else {
        // At most one side's availability is usable.
        let theirs_unusable = f.their_side.present && p.theirs.is_empty();
        if p.undated {
            return Plan::NeedDate;
        }
        if theirs_unusable {
            return Plan::Unusable(format!(
                "could not read the peer's time windows ({})",
                f.their_side.unreadable.join(", ")
            ));
        }
        let (wins, note) = if !p.mine.is_empty() {
            let why = if view.unavailable.contains("time_windows") {
                "the peer declined to share time windows"
            } else {
                "the peer gave no time windows"
            };
            (
                &p.mine,
                format!("{why}; proposing from my availability only"),
            )
        } else if !p.theirs.is_empty() {
            let why = if f.my_side.present {
                "my own time windows could not be read"
            } else {
                "I have no time windows on file"
            };
            (
                &p.theirs,
                format!("{why}; proposing from the peer's availability"),
            )
        } else {
            return Plan::Unusable("neither side's availability is known".to_string());
        };
        let ivs = super::windows::normalise(intervals(wins, 0));
        add_cands(&mut cands, &ivs, dur, f.pres, Tier::OneSided);
        add_short(&mut cands, &ivs, dur, Tier::Short);
        if cands.is_empty() {
            return Plan::Unusable(format!(
                "no available window is long enough for a {} {}",
                fmt_duration(dur),
                event_word(f)
            ));
        }
        one_sided_note = Some(note);
    }
    let total = cands.len();
    cands.retain(|c| !is_rejected(view, f.pres, c.slot.s));
    if cands.is_empty() {
        return Plan::AllRejected;
    }
    Plan::Slots {
        skipped: total - cands.len(),
        cands,
        one_sided_note,
    }
}

fn event_word(f: &Facts) -> String {
    if f.event.is_empty() {
        "meeting".to_string()
    } else {
        f.event.clone()
    }
}

/// Whether a context holds nothing but negotiation metadata.
fn no_values(ctx: &Context) -> bool {
    ctx.keys().all(|k| needs::is_meta_field(k))
}

/// The scheduling decision.
pub(super) fn decide(view: &View) -> Decision {
    let f = Facts::new(view);
    if let Some(alts) = view.theirs.get("proposed_alternatives") {
        return evaluate_alternatives(&f, alts);
    }
    if view.i_am_initiator && no_values(view.theirs) && view.unavailable.is_empty() {
        return Decision::Wait;
    }
    let specs = needs::scheduling_fields(&f.event, view.mine);
    let gaps = needs::gaps(&specs, view);
    if gaps.required_askable {
        return Decision::Ask { needs: gaps.ask };
    }
    if gaps.required_pending {
        return Decision::Wait;
    }
    match plan(&f) {
        Plan::Slots {
            cands,
            skipped,
            one_sided_note,
        } => {
            if !gaps.ask.is_empty() {
                return Decision::Ask { needs: gaps.ask };
            }
            propose_slots(&f, &cands, skipped, one_sided_note)
        }
        Plan::AllRejected => Decision::Escalate {
            reason: "Every time that fits both sides has been ruled out".to_string(),
            summary: tried_summary(view),
        },
        Plan::NoOverlap { placed } => {
            if conflict_sent(view) {
                Decision::Escalate {
                    reason: "Still no overlap after a no-overlap conflict was already exchanged in this thread"
                        .to_string(),
                    summary: tried_summary(view),
                }
            } else {
                no_overlap(&f, &placed)
            }
        }
        Plan::NeedDate => {
            let date_field = "proposed_date";
            let askable = !view.asked.contains(date_field)
                && !view.unavailable.contains(date_field)
                && !view.theirs.contains_key(date_field);
            if askable {
                let mut ask = vec![Need {
                    field: date_field.to_string(),
                    reason: "Need a date to place the time windows on".to_string(),
                    priority: Priority::Required,
                }];
                ask.extend(gaps.ask);
                ask.truncate(MAX_NEEDS_PER_PACKET);
                Decision::Ask { needs: ask }
            } else {
                Decision::Escalate {
                    reason: "No date to schedule on: the time windows name no date".to_string(),
                    summary: tried_summary(view),
                }
            }
        }
        Plan::Unusable(why) => Decision::Escalate {
            reason: format!("Cannot find a time automatically: {why}"),
            summary: tried_summary(view),
        },
    }
}

/// Whether a §6.3 no-overlap conflict was already sent or received in this thread: the
/// sent one is part of what I shared (`mine.conflict`), a received one is in
/// `theirs.conflict`.
pub(crate) fn conflict_sent(view: &View) -> bool {
    view.mine.contains_key("conflict") || view.theirs.contains_key("conflict")
}

/// Renders an interval in `zone`: `18:30–21:00 on Friday 27 March`.
fn fmt_iv(zone: Zone, iv: Iv) -> String {
    match (local_parts(zone, iv.s), local_parts(zone, iv.e)) {
        (Some((d, s)), Some((_, e))) => format!("{}–{} on {}", fmt_hm(s), fmt_hm(e), fmt_day(d)),
        _ => "an unrepresentable time".to_string(),
    }
}

/// Values copied from the contexts into a proposal: dietary, budget, location, party
/// size, venue; with notes for the reasoning.
struct Shared {
    fields: Vec<(String, Value)>,
    notes: Vec<String>,
    location: Option<String>,
    /// Every place known was ruled out by a `different_place` answer.
    no_other_place: bool,
}

fn short_str(s: &str) -> Option<String> {
    (s.chars().count() <= MAX_COPIED_LEN).then(|| s.to_string())
}

fn shared_values(f: &Facts) -> Shared {
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
struct RuledOut {
    /// A `different_place` answer was given in this thread.
    asked: bool,
    /// The `location` of each proposal ruled out that way.
    locations: Vec<String>,
    /// Their `venue`.
    venues: Vec<String>,
    /// `(location, venue)` of each.
    rejected: Vec<(Option<String>, Option<String>)>,
}

fn ruled_out_places(view: &View) -> RuledOut {
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
fn same_place(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.trim().eq_ignore_ascii_case(b.trim()),
        (None, None) => true,
        _ => false,
    }
}

/// A side's places: `location_preference` (a string or an array of strings, in order of
/// preference), else `location`; at most 8, each at most 200 characters.
fn places_of(c: &Context) -> Vec<String> {
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

fn is_blank(v: &Value) -> bool {
    match v {
        Value::String(s) => s.trim().is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => true,
    }
}

fn list_clipped(v: &[String]) -> String {
    let v: Vec<String> = v.iter().take(4).map(|s| clip(s, 60)).collect();
    v.join(", ")
}

/// The slot's `date`, `time`, `end` (and `end_date` when it ends on a later day) and
/// `timezone`, in the presentation zone.
fn slot_details(f: &Facts, slot: Iv) -> Option<Map<String, Value>> {
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
fn slot_times(f: &Facts, slot: Iv) -> String {
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

fn utc_text(secs: i64) -> Option<String> {
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
fn build_proposal(
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
fn alternative(f: &Facts, c: &Cand, main: &Cand) -> Option<Alternative> {
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

fn propose_slots(f: &Facts, cands: &[Cand], skipped: usize, one_sided: Option<String>) -> Decision {
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
fn zone_suffix(f: &Facts) -> String {
    if f.pres_known {
        format!(" ({})", f.pres.name())
    } else {
        String::new()
    }
}

fn zone_of(side: &SideWindows) -> Option<Zone> {
    side.zone.or_else(|| side.raw.iter().find_map(|w| w.zone))
}

/// `Wednesday 2026-03-25 18:00-21:00 (Europe/London)` — a form the window parser reads back.
fn render_window(w: &LocalWin, zone_known: bool) -> String {
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
fn alt_value(
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
fn no_overlap(f: &Facts, p: &Placed) -> Decision {
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
struct AltSlot {
    label: String,
    iv: Iv,
    date: NaiveDate,
    event: Option<String>,
}

fn read_alternative(f: &Facts, v: &Value, index: usize) -> Result<AltSlot, String> {
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
fn default_or_field(f: &Facts, event: Option<&str>) -> i64 {
    match event {
        Some(e) if e != f.event => default_duration(e),
        _ => f.duration,
    }
}

/// Evaluates a received §6.3 packet's alternatives against my availability and
/// flexibility: the first that fits is proposed, the next ones become alternatives;
/// none → escalate with what was tried.
fn evaluate_alternatives(f: &Facts, alts: &Value) -> Decision {
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
