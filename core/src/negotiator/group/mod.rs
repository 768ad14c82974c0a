//! Aggregation for group threads (§10.2): what a coordinator makes of everyone's context.
//!
//! [`aggregate`] is a pure function of a [`GroupView`] — the coordinator's own context,
//! and per participant what that participant shared with the coordinator and whether it
//! answered. No clock, no randomness, no panic on any input (the values come from other
//! people's agents), and the same output whatever order the maps were filled in. It
//! gives, for the coordinator:
//!
//! 1. the **intersection** of everyone's availability across time zones, and candidate
//!    windows with exactly who can attend each ([`Candidate`]);
//! 2. the **binding constraint** ([`Binding`]): when no window fits everyone, the
//!    participant whose removal opens the most common time (or, with times fine, whose
//!    budget keeps the others' budgets from meeting);
//! 3. a **targeted flexibility request** for that participant only ([`TargetedRequest`],
//!    a `context` packet's `flexibility_request` plus a need);
//! 4. **ranked alternatives** with their trade-off as data and as a sentence;
//! 5. the **combined constraints**: the union of dietary restrictions, the intersection
//!    (the most restrictive bound) of budgets.
//!
//! [`Aggregation::aggregated_context`] is the part the coordinator may send to the
//! participants: derived facts only — statuses, counts, the common windows, ranked
//! candidates with *counts* of attendees, the combined budget and the *number* of dietary
//! restrictions. It never carries a participant's own value: no per-participant window,
//! no name of who misses a candidate, no dietary entry, no string a participant wrote
//! (SPEC-NOTES "Group threads" states what "raw" means).
//!
//! Windows are read with the two-party negotiator's readers ([`super::windows`]): the
//! same forms, time zones, dates and limits.

#[cfg(test)]
mod tests;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use chrono::DateTime;
use serde::Serialize;
use serde_json::Value;

use super::needs;
use super::prefs::{intersect_budgets, merge_dietary, parse_budget, Budget};
use super::schedule::facts::{event_duration, explicit_dates, zone_of};
use super::schedule::wording::{fmt_day, fmt_duration, local_parts, weekday_name};
use super::windows::{fmt_hm, intersect, normalise, place, read_side, Iv, SideWindows, Zone};
use crate::address::Address;
use crate::packet::{
    AggregatedContext, AvailabilityOverlap, CandidateFact, CombinedConstraints, Context,
    FlexibilityRequest, Intent, Need, ParticipantEntry, ParticipantStatus, Priority, WindowFact,
    MAX_GROUP_WINDOWS,
};

/// Most candidates kept, best first.
pub const MAX_CANDIDATES: usize = MAX_GROUP_WINDOWS;
/// Fewest agents (the coordinator included) whose availability must be known before an
/// aggregated context carries any window: below it the overlap would be one other
/// person's availability seen through the coordinator's.
pub const MIN_SHARED_FOR_OVERLAP: usize = 3;
/// Fewest agents with a known value before one of them can be the binding constraint.
pub const MIN_FOR_BINDING: usize = 3;
/// Most distinct attendee sets examined (each one's common windows are computed).
const MAX_SETS: usize = 256;

/// What one participant gave the coordinator.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Where it stands. Only a [`ParticipantStatus::ContextReceived`] member's context is
    /// read.
    pub status: ParticipantStatus,
    /// The context fields the participant shared with the coordinator in this thread.
    pub shared: Context,
}

/// Everything the aggregation may look at: one group thread, from its coordinator's side.
#[derive(Debug, Clone, Copy)]
pub struct GroupView<'a> {
    /// What the thread is about.
    pub intent: &'a Intent,
    /// The coordinator (this agent).
    pub coordinator: &'a Address,
    /// The coordinator's own values usable in this thread.
    pub mine: &'a Context,
    /// Every other participant. An entry for the coordinator itself is ignored.
    pub members: &'a BTreeMap<Address, Member>,
}

/// A candidate window and exactly who can attend all of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// Start, UTC seconds.
    pub start: i64,
    /// End (exclusive), UTC seconds.
    pub end: i64,
    /// Everyone whose availability covers the whole window, in address order.
    pub attendees: Vec<Address>,
    /// Everyone who shared availability and cannot attend all of it, in address order.
    pub missing: Vec<Address>,
    /// The window in the coordinator's zone: `Friday 27 March 20:00–23:00 (Europe/London)`.
    pub local: String,
    /// The trade-off against the best candidate.
    pub trade_off: TradeOff,
}

/// A candidate against the best one, as data and as a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TradeOff {
    /// Attendees as a share of those who shared availability, in whole percent.
    pub attendance_pct: u32,
    /// This candidate's attendance minus the best one's, in percentage points.
    pub attendance_vs_best: i32,
    /// Window length in seconds.
    pub length_secs: i64,
    /// This candidate's length minus the best one's, in seconds.
    pub length_vs_best_secs: i64,
    /// The same in words (empty for the best candidate).
    pub sentence: String,
}

/// The participant (and field) that makes agreement hardest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Binding {
    /// Who.
    pub participant: Address,
    /// Which field: `time_windows` or `budget_range`.
    pub field: String,
    /// `time_windows`: common time (seconds, in windows long enough for the event) the
    /// others have without this participant. `budget_range`: 0.
    pub opens_secs: i64,
}

/// A flexibility request for the binding constraint's owner only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetedRequest {
    /// The one participant it goes to (may be the coordinator itself: then its own user
    /// is asked).
    pub to: Address,
    /// The `flexibility_request` of the `context` packet; names no other participant.
    pub request: FlexibilityRequest,
    /// For the coordinator's user: `Everyone is free … except agent:charlie@… — can they
    /// make it?`.
    pub summary: String,
}

impl TargetedRequest {
    /// The need that goes with the request (`helpful`: a refusal is a complete answer).
    pub fn need(&self) -> Need {
        Need {
            field: self.request.field.clone(),
            reason: self.request.message.clone(),
            priority: Priority::Helpful,
        }
    }
}

/// The combined non-time constraints.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Combined {
    /// The intersection of every readable budget (the lowest upper bound, the highest
    /// lower bound), canonical text; `None` when none was given or they do not meet.
    pub budget: Option<String>,
    /// Budgets were given and have no common amount (or differ in currency).
    pub budget_conflict: bool,
    /// How many budgets were read.
    pub budgets_read: u32,
    /// The union of dietary restrictions (coordinator's only: never sent to participants).
    pub dietary: Vec<String>,
}

/// The coordinator's suggestion (§10.2 `coordinator_recommendation`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recommendation {
    /// `propose_<weekday>` of the best candidate (`propose_friday`).
    pub recommendation: String,
    /// Why, a sentence.
    pub reason: String,
}

/// What the coordinator makes of the group's context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Aggregation {
    /// Length of the event, seconds.
    pub duration_secs: i64,
    /// The zone windows are shown in (the coordinator's, else the first one known).
    pub zone: String,
    /// Agents (the coordinator included) whose availability could be read, in order:
    /// the coordinator, then by address.
    pub shared_availability: Vec<Address>,
    /// Members who answered but whose availability is not known (declined, or unreadable).
    pub availability_unknown: Vec<Address>,
    /// Windows all of `shared_availability` can attend, long enough for the event.
    pub common_windows: Vec<(i64, i64)>,
    /// Candidate windows, best first (at most [`MAX_CANDIDATES`]).
    pub candidates: Vec<Candidate>,
    /// What blocks agreement, when something does.
    pub binding: Option<Binding>,
    /// The request for the binding constraint's owner.
    pub flexibility_request: Option<TargetedRequest>,
    /// Budgets and dietary restrictions combined.
    pub combined: Combined,
    /// The suggestion, with at least one candidate.
    pub recommendation: Option<Recommendation>,
    /// The best candidate against the next, a sentence (empty with fewer than two).
    pub trade_off: String,
}

/// One agent whose context is read: the coordinator or an answered member.
struct Person<'a> {
    who: &'a Address,
    ctx: &'a Context,
    side: SideWindows,
    ivs: Vec<Iv>,
}

/// The coordinator and every answered member, each with its availability in UTC, and
/// the zone windows are shown in (the coordinator's, else UTC: never a participant's, so
/// no participant's zone reaches the others).
fn people<'a>(view: &GroupView<'a>) -> (Vec<Person<'a>>, Zone) {
    let mut people: Vec<Person> = vec![Person {
        who: view.coordinator,
        ctx: view.mine,
        side: read_side(view.mine),
        ivs: Vec::new(),
    }];
    for (who, m) in view.members {
        if who != view.coordinator && m.status == ParticipantStatus::ContextReceived {
            people.push(Person {
                who,
                ctx: &m.shared,
                side: read_side(&m.shared),
                ivs: Vec::new(),
            });
        }
    }
    let pres = people
        .first()
        .and_then(|p| zone_of(&p.side))
        .unwrap_or_else(Zone::utc);
    let anchor = anchor(&people);
    for p in &mut people {
        let (wins, _undated) = place(&p.side, &anchor, pres);
        p.ivs = normalise(
            wins.iter()
                .filter_map(|w| w.to_interval(0))
                .filter(|iv| iv.s >= 0)
                .collect(),
        );
    }
    (people, pres)
}

/// Aggregates a group's context (§10.2). Deterministic; see the module documentation.
pub fn aggregate(view: &GroupView) -> Aggregation {
    let event = needs::event_type(view.intent, view.mine, view.mine);
    let duration = event_duration(&event, view.mine, view.mine);
    let (people, pres) = people(view);
    let known: Vec<&Person> = people.iter().filter(|p| !p.ivs.is_empty()).collect();
    let availability_unknown: Vec<Address> = people
        .iter()
        .skip(1)
        .filter(|p| p.ivs.is_empty())
        .map(|p| p.who.clone())
        .collect();
    let mut cands = candidates(&known, duration, pres, view.coordinator);
    let common_windows: Vec<(i64, i64)> = if known.len() >= 2 {
        common_of(&known, 0..known.len())
            .into_iter()
            .filter(|iv| iv.len() >= duration)
            .map(|iv| (iv.s, iv.e))
            .collect()
    } else {
        Vec::new()
    };
    let trade_off = fill_trade_offs(&mut cands, known.len(), pres);
    let combined = combine(&people);
    let (binding, flexibility_request) = if common_windows.is_empty() {
        match time_binding(&known, duration) {
            Some((b, ivs)) => {
                let req = time_request(&known, &b, &ivs, duration, pres);
                (Some(b), req)
            }
            None => budget_binding(&people),
        }
    } else if combined.budget_conflict {
        budget_binding(&people)
    } else {
        (None, None)
    };
    let recommendation = cands.first().map(|c| {
        let day = local_parts(pres, c.start)
            .map(|(d, _)| weekday_name(d).to_ascii_lowercase())
            .unwrap_or_default();
        let reason = if trade_off.is_empty() {
            format!(
                "{} of {} can attend {}",
                c.attendees.len(),
                known.len(),
                c.local
            )
        } else {
            trade_off.clone()
        };
        Recommendation {
            recommendation: format!("propose_{day}"),
            reason,
        }
    });
    Aggregation {
        duration_secs: duration,
        zone: pres.name(),
        shared_availability: known.iter().map(|p| p.who.clone()).collect(),
        availability_unknown,
        common_windows,
        candidates: cands,
        binding,
        flexibility_request,
        combined,
        recommendation,
        trade_off,
    }
}

/// The dates dateless windows are put on: the coordinator's dates, else every date any
/// answered participant named (in its date fields, then in its windows), at most 14.
fn anchor(people: &[Person]) -> SideWindows {
    let mut a = SideWindows {
        zone: people.first().and_then(|p| zone_of(&p.side)),
        ..SideWindows::default()
    };
    if let Some(first) = people.first() {
        a.dates = first.side.dates.clone();
    }
    if a.dates.is_empty() {
        let mut all: BTreeSet<_> = people
            .iter()
            .flat_map(|p| p.side.dates.iter().copied())
            .collect();
        if all.is_empty() {
            all = people
                .iter()
                .flat_map(|p| explicit_dates(&p.side))
                .collect();
        }
        a.dates = all.into_iter().take(14).collect();
    }
    a
}

/// Total length of the windows at least `dur` long.
fn usable(ivs: &[Iv], dur: i64) -> i64 {
    ivs.iter()
        .filter(|iv| iv.len() >= dur)
        .map(Iv::len)
        .fold(0i64, i64::saturating_add)
}

/// The common windows of a set of people.
fn common_of(people: &[&Person], members: impl Iterator<Item = usize>) -> Vec<Iv> {
    let mut acc: Option<Vec<Iv>> = None;
    for i in members {
        let Some(p) = people.get(i) else { continue };
        acc = Some(match acc {
            None => p.ivs.clone(),
            Some(a) => intersect(&a, &p.ivs),
        });
    }
    acc.unwrap_or_default()
}

/// Whether `iv` lies inside one of `ivs` (normalised).
fn covers(ivs: &[Iv], iv: Iv) -> bool {
    ivs.iter().any(|x| x.s <= iv.s && iv.e <= x.e)
}

/// Candidate windows: for every set of people available together at some instant, each
/// maximal window they share (long enough for the event), with everyone who covers it.
fn candidates(known: &[&Person], dur: i64, pres: Zone, coordinator: &Address) -> Vec<Candidate> {
    let mut bounds: Vec<i64> = known
        .iter()
        .flat_map(|p| p.ivs.iter().flat_map(|iv| [iv.s, iv.e]))
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let mut sets: BTreeSet<Vec<usize>> = BTreeSet::new();
    for w in bounds.windows(2) {
        let (Some(&s), Some(&e)) = (w.first(), w.get(1)) else {
            continue;
        };
        let seg = Iv { s, e };
        let set: Vec<usize> = (0..known.len())
            .filter(|&i| known.get(i).is_some_and(|p| covers(&p.ivs, seg)))
            .collect();
        if set.len() >= 2 {
            sets.insert(set);
        }
    }
    // Largest sets first, so the cap keeps the ones that matter.
    let mut sets: Vec<Vec<usize>> = sets.into_iter().collect();
    sets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    sets.truncate(MAX_SETS);
    let mut found: BTreeSet<(i64, i64, Vec<usize>)> = BTreeSet::new();
    for set in &sets {
        for iv in common_of(known, set.iter().copied()) {
            if iv.len() < dur {
                continue;
            }
            let attendees: Vec<usize> = (0..known.len())
                .filter(|&i| known.get(i).is_some_and(|p| covers(&p.ivs, iv)))
                .collect();
            found.insert((iv.s, iv.e, attendees));
        }
    }
    let mut out: Vec<Candidate> = found
        .into_iter()
        .map(|(s, e, idx)| {
            let mut attendees: Vec<Address> = idx
                .iter()
                .filter_map(|&i| known.get(i).map(|p| p.who.clone()))
                .collect();
            attendees.sort();
            let mut missing: Vec<Address> = known
                .iter()
                .map(|p| p.who.clone())
                .filter(|a| !attendees.contains(a))
                .collect();
            missing.sort();
            Candidate {
                start: s,
                end: e,
                attendees,
                missing,
                local: render_window(pres, s, e),
                trade_off: TradeOff {
                    attendance_pct: 0,
                    attendance_vs_best: 0,
                    length_secs: e.saturating_sub(s),
                    length_vs_best_secs: 0,
                    sentence: String::new(),
                },
            }
        })
        .collect();
    out.sort_by(|a, b| rank(a, b, coordinator));
    out.truncate(MAX_CANDIDATES);
    out
}

/// The ranking of candidates, best first — a total order: more attendees; then the
/// coordinator attending; then the longer window; then the earlier start; then the
/// earlier end; then the attendee lists compared address by address.
pub fn rank(a: &Candidate, b: &Candidate, coordinator: &Address) -> Ordering {
    let has = |c: &Candidate| c.attendees.contains(coordinator);
    b.attendees
        .len()
        .cmp(&a.attendees.len())
        .then_with(|| has(b).cmp(&has(a)))
        .then_with(|| (b.end.saturating_sub(b.start)).cmp(&(a.end.saturating_sub(a.start))))
        .then_with(|| a.start.cmp(&b.start))
        .then_with(|| a.end.cmp(&b.end))
        .then_with(|| a.attendees.cmp(&b.attendees))
}

fn pct(n: usize, of: usize) -> u32 {
    if of == 0 {
        return 0;
    }
    u32::try_from((n * 200 + of) / (2 * of)).unwrap_or(100)
}

/// `Friday 27 March`, or the UTC date when the instant cannot be shown.
fn day_of(zone: Zone, secs: i64) -> String {
    local_parts(zone, secs)
        .map(|(d, _)| fmt_day(d))
        .unwrap_or_else(|| "another day".to_string())
}

/// `Friday 27 March 20:00–23:00 (Europe/London)`.
pub(crate) fn render_window(zone: Zone, s: i64, e: i64) -> String {
    match (local_parts(zone, s), local_parts(zone, e)) {
        (Some((d, sm)), Some((_, em))) => format!(
            "{} {}–{} ({})",
            fmt_day(d),
            fmt_hm(sm),
            fmt_hm(em),
            zone.name()
        ),
        _ => "an unrepresentable time".to_string(),
    }
}

/// Fills each candidate's trade-off against the first (best) one; returns the sentence
/// comparing the best with the second.
fn fill_trade_offs(cands: &mut [Candidate], known: usize, pres: Zone) -> String {
    let Some(best) = cands.first().cloned() else {
        return String::new();
    };
    let best_pct = pct(best.attendees.len(), known);
    let best_len = best.end.saturating_sub(best.start);
    let best_day = day_of(pres, best.start);
    let mut headline = String::new();
    for (i, c) in cands.iter_mut().enumerate() {
        let p = pct(c.attendees.len(), known);
        let len = c.end.saturating_sub(c.start);
        c.trade_off.attendance_pct = p;
        c.trade_off.attendance_vs_best =
            i32::try_from(i64::from(p) - i64::from(best_pct)).unwrap_or(0);
        c.trade_off.length_vs_best_secs = len.saturating_sub(best_len);
        if i == 0 {
            continue;
        }
        let day = day_of(pres, c.start);
        let sentence = if p < best_pct {
            if len > best_len {
                format!(
                    "{p} % attendance on {day}, a longer window ({} against {}), against {best_pct} % on {best_day}",
                    fmt_duration(len),
                    fmt_duration(best_len)
                )
            } else {
                format!(
                    "{p} % attendance on {day} against {best_pct} % on {best_day}, and no longer a window ({} against {})",
                    fmt_duration(len),
                    fmt_duration(best_len)
                )
            }
        } else if len < best_len {
            format!(
                "the same attendance ({p} %) on {day} in a shorter window ({} against {})",
                fmt_duration(len),
                fmt_duration(best_len)
            )
        } else {
            format!(
                "the same attendance ({p} %) and window length ({}) on {day}, later",
                fmt_duration(len)
            )
        };
        if i == 1 {
            headline = if p < best_pct {
                if len > best_len {
                    format!(
                        "{best_pct} % attendance on {best_day} beats {p} % on {day}, although {day} offers a longer window ({} against {})",
                        fmt_duration(len),
                        fmt_duration(best_len)
                    )
                } else {
                    format!("{best_pct} % attendance on {best_day} beats {p} % on {day}")
                }
            } else if len < best_len {
                format!(
                    "{best_day} and {day} have the same attendance ({p} %); {best_day} offers the longer window ({} against {})",
                    fmt_duration(best_len),
                    fmt_duration(len)
                )
            } else {
                format!(
                    "{best_day} and {day} have the same attendance ({p} %) and window length; {best_day} comes first"
                )
            };
        }
        c.trade_off.sentence = sentence;
    }
    headline
}

/// The participant whose removal opens the most common time, with the others' common
/// windows: only when at least [`MIN_FOR_BINDING`] agents shared availability and
/// removing someone opens a window long enough. Ties: the one with the least
/// availability of their own, then the lower address.
fn time_binding(known: &[&Person], dur: i64) -> Option<(Binding, Vec<Iv>)> {
    if known.len() < MIN_FOR_BINDING {
        return None;
    }
    let mut best: Option<(i64, i64, &Address, Vec<Iv>)> = None;
    for (i, p) in known.iter().enumerate() {
        let others = common_of(known, (0..known.len()).filter(|&j| j != i));
        let opens = usable(&others, dur);
        if opens == 0 {
            continue;
        }
        let own = p.ivs.iter().map(Iv::len).fold(0i64, i64::saturating_add);
        let better = match &best {
            None => true,
            Some((o, own_b, who_b, _)) => {
                (opens, std::cmp::Reverse(own), std::cmp::Reverse(p.who))
                    > (*o, std::cmp::Reverse(*own_b), std::cmp::Reverse(*who_b))
            }
        };
        if better {
            best = Some((opens, own, p.who, others));
        }
    }
    best.map(|(opens, _, who, others)| {
        (
            Binding {
                participant: who.clone(),
                field: "time_windows".to_string(),
                opens_secs: opens,
            },
            others,
        )
    })
}

/// The request to the binding participant: the best window the others share (longest,
/// then earliest), shown in the recipient's zone when known.
fn time_request(
    known: &[&Person],
    b: &Binding,
    others: &[Iv],
    dur: i64,
    pres: Zone,
) -> Option<TargetedRequest> {
    let iv = others
        .iter()
        .filter(|iv| iv.len() >= dur)
        .min_by(|x, y| y.len().cmp(&x.len()).then_with(|| x.s.cmp(&y.s)))?;
    let theirs = known
        .iter()
        .find(|p| *p.who == b.participant)
        .and_then(|p| zone_of(&p.side))
        .unwrap_or(pres);
    let n = u32::try_from(known.len().saturating_sub(1)).unwrap_or(0);
    let mine = render_window(theirs, iv.s, iv.e);
    let day = local_parts(theirs, iv.s)
        .map(|(d, _)| weekday_name(d))
        .unwrap_or("then");
    Some(TargetedRequest {
        to: b.participant.clone(),
        summary: format!(
            "Everyone is free {} except {} — can they do {day}?",
            render_window(pres, iv.s, iv.e),
            b.participant
        ),
        request: FlexibilityRequest {
            field: b.field.clone(),
            window: Some(window_fact(theirs, iv.s, iv.e)),
            budget: None,
            others_fit: n,
            others: n,
            message: format!("Everyone else is free {mine} — any chance you can do {day}?"),
        },
    })
}

/// A window for the wire.
pub(crate) fn window_fact(zone: Zone, s: i64, e: i64) -> WindowFact {
    WindowFact {
        start: rfc3339(s),
        end: rfc3339(e),
        local: render_window(zone, s, e),
    }
}

fn rfc3339(secs: i64) -> String {
    DateTime::from_timestamp(secs, 0)
        .map(|d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// Each person's budget (`budget_range`, else `budget`), if readable.
fn budgets<'a>(people: &'a [Person]) -> Vec<(&'a Address, Budget)> {
    people
        .iter()
        .filter_map(|p| {
            let v = p.ctx.get("budget_range").or_else(|| p.ctx.get("budget"))?;
            parse_budget(v).map(|b| (p.who, b))
        })
        .collect()
}

fn fold_budgets<'a>(mut it: impl Iterator<Item = &'a Budget>) -> Option<Result<Budget, String>> {
    let first = it.next()?.clone();
    Some(it.try_fold(first, |acc, b| intersect_budgets(&acc, b)))
}

/// Budgets intersected, dietary restrictions united (coordinator first, then by address).
fn combine(people: &[Person]) -> Combined {
    let bs = budgets(people);
    let folded = fold_budgets(bs.iter().map(|(_, b)| b));
    let diets: Vec<&Value> = people
        .iter()
        .filter_map(|p| {
            p.ctx
                .get("dietary")
                .or_else(|| p.ctx.get("dietary_requirements"))
        })
        .collect();
    Combined {
        budget: folded
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .map(Budget::render),
        budget_conflict: matches!(folded, Some(Err(_))),
        budgets_read: u32::try_from(bs.len()).unwrap_or(u32::MAX),
        dietary: merge_dietary(&diets),
    }
}

/// With budgets that do not meet: the participant without whom the others' budgets meet
/// in the widest range (ties: the lower address), and a request to them.
fn budget_binding(people: &[Person]) -> (Option<Binding>, Option<TargetedRequest>) {
    let bs = budgets(people);
    if bs.len() < MIN_FOR_BINDING {
        return (None, None);
    }
    let mut best: Option<(u64, &Address, Budget)> = None;
    for (i, (who, _)) in bs.iter().enumerate() {
        let rest = bs
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (_, b))| b);
        if let Some(Ok(b)) = fold_budgets(rest) {
            let width = b.hi.saturating_sub(b.lo);
            let better = match &best {
                None => true,
                Some((w, a, _)) => (width, std::cmp::Reverse(*who)) > (*w, std::cmp::Reverse(*a)),
            };
            if better {
                best = Some((width, who, b));
            }
        }
    }
    let Some((_, who, b)) = best else {
        return (None, None);
    };
    let n = u32::try_from(bs.len().saturating_sub(1)).unwrap_or(0);
    let text = b.render();
    let binding = Binding {
        participant: who.clone(),
        field: "budget_range".to_string(),
        opens_secs: 0,
    };
    let req = TargetedRequest {
        to: who.clone(),
        summary: format!("Everyone's budget allows {text} except {who}'s — can they go with it?"),
        request: FlexibilityRequest {
            field: "budget_range".to_string(),
            window: None,
            budget: Some(text.clone()),
            others_fit: n,
            others: n,
            message: format!("Everyone else's budget allows {text} — could you go with that?"),
        },
    };
    (Some(binding), Some(req))
}

impl Aggregation {
    /// The aggregated context for the participants (§10.2): statuses in address order,
    /// "N of M answered", and — once at least [`MIN_SHARED_FOR_OVERLAP`] agents shared
    /// availability — the common windows and the ranked candidates with counts; the
    /// combined budget and the number of dietary restrictions. Never a participant's own
    /// value, never who misses a candidate.
    pub fn aggregated_context(&self, view: &GroupView) -> AggregatedContext {
        let participants: Vec<ParticipantEntry> = view
            .members
            .iter()
            .filter(|(a, _)| *a != view.coordinator)
            .take(crate::packet::MAX_GROUP_PARTICIPANTS - 1)
            .map(|(a, m)| ParticipantEntry {
                agent: a.clone(),
                status: m.status,
            })
            .collect();
        let answered = participants
            .iter()
            .filter(|p| p.status == ParticipantStatus::ContextReceived)
            .count();
        let zone = Zone::parse(&self.zone).unwrap_or_else(Zone::utc);
        let shared_by = self.shared_availability.len();
        let availability_overlap = (shared_by >= MIN_SHARED_FOR_OVERLAP).then(|| {
            let of = u32::try_from(shared_by).unwrap_or(0);
            AvailabilityOverlap {
                shared_by: of,
                common_windows: self
                    .common_windows
                    .iter()
                    .take(MAX_GROUP_WINDOWS)
                    .map(|(s, e)| window_fact(zone, *s, *e))
                    .collect(),
                ranked: self
                    .candidates
                    .iter()
                    .take(MAX_GROUP_WINDOWS)
                    .map(|c| CandidateFact {
                        window: window_fact(zone, c.start, c.end),
                        available_count: u32::try_from(c.attendees.len()).unwrap_or(0),
                        of,
                        trade_off: c.trade_off.sentence.clone(),
                    })
                    .collect(),
                trade_off: self.trade_off.clone(),
            }
        });
        let enough_budgets = self.combined.budgets_read as usize >= MIN_SHARED_FOR_OVERLAP;
        let combined = CombinedConstraints {
            budget: self.combined.budget.clone().filter(|_| enough_budgets),
            budget_conflict: self.combined.budget_conflict,
            dietary_restrictions: u32::try_from(self.combined.dietary.len()).unwrap_or(0),
        };
        AggregatedContext {
            of: u32::try_from(participants.len()).unwrap_or(0),
            answered: u32::try_from(answered).unwrap_or(0),
            participants,
            availability_overlap,
            combined: Some(combined),
            confirmation: None,
        }
    }
}
