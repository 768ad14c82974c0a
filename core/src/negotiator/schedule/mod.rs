//! Scheduling: intersect availability across time zones, pick a slot, build the §8.1
//! proposal, or the §6.3 conflict packet, or evaluate a received one.
//!
//! [`decide`] reads the thread ([`facts`]), looks for candidate slots ([`slots`], widened
//! by each side's [`flexibility`]) and then proposes one ([`proposal`], with the values of
//! [`shared`]), or sends or evaluates a §6.3 [`conflict`]. [`wording`] writes the dates
//! and durations.

mod conflict;
pub(super) mod facts;
mod flexibility;
mod proposal;
mod shared;
mod slots;
pub(super) mod wording;

pub(crate) use flexibility::{flex_of, Flex};

use self::conflict::{evaluate_alternatives, no_overlap};
use self::facts::{event_word, Facts, Placed};
use self::flexibility::transposed;
use self::proposal::propose_slots;
use self::slots::{add_cands, add_short, dates_of, intervals, is_rejected, Cand, Tier};
use self::wording::fmt_duration;
use super::needs;
use super::windows::intersect;
use super::{tried_summary, Decision, View};
use crate::packet::{Context, Need, Priority, MAX_NEEDS_PER_PACKET};

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
