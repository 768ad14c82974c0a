//! Deterministic negotiator: what an agent uses in place of an LLM (spec §5.2), and what
//! the simulator uses.
//!
//! [`decide`] is a pure function of a [`View`] of one thread: no clock, no randomness, no
//! I/O, and no panic on any input (the values come from other people's agents). It runs
//! the receive-evaluate-act cycle of §5.2:
//!
//! 1. **Loop limit** — at 8 round trips the thread is escalated (§6.4).
//! 2. **Completeness** — the fields the intent needs from the peer are compared with what
//!    the peer gave; missing ones that were never asked nor declined are asked for (at
//!    most 5, most important first, §6.2, §6.4). A `required` field that was asked but
//!    neither given nor declined stalls the thread ([`Decision::Wait`], §6.2); a declined
//!    one is worked around (§7.5).
//! 3. **Action** — for `scheduling`, availability is intersected across time zones, a slot
//!    is picked and proposed with alternatives (§8.1); with no overlap a §6.3 conflict
//!    packet with alternatives is produced, once per thread; a received §6.3 packet is
//!    evaluated against the agent's own availability. Other intents propose a resolution
//!    summarising the exchanged fields.
//!
//! The context-field conventions understood here are listed in `NOTES-negotiator.md`
//! (merged into SPEC-NOTES): `time_windows`, `proposed_date`/`date`/`proposed_dates`,
//! `timezone`, `flexibility`, `event_type`, `duration`, `party_size`, `dietary`,
//! `budget_range`, `location_preference`, `venue`, `transport_mode`,
//! `cuisine_preference`, `wanted_fields`, `conflict`, `proposed_alternatives`.
//!
//! [`decision_schema`] and [`parse_decision`] let an LLM take the negotiator's place: the
//! schema is sent as the expected answer shape and the answer is validated against the
//! same rules [`decide`] follows.

mod generic;
pub mod group;
mod holds;
mod llm;
mod needs;
mod prefs;
mod schedule;
mod windows;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::address::Address;
use crate::packet::{ActionSpec, Context, Escalation, Intent, Need, Proposal};

pub use holds::{held_slot, windows_without};
pub use llm::{answer_confidence, decision_schema, parse_decision};
pub(crate) use needs::{is_meta_field, is_scheduling};

/// The flexibility a context states, by aspect (`date`, `time`, `location`), as the
/// §11.1 levels `low`, `medium`, `high` (relationship memory learns them, §11.1
/// `typical_flexibility`). Aspects stated in no word the negotiator reads are left out.
pub fn stated_flexibility(ctx: &Context) -> std::collections::BTreeMap<String, String> {
    crate::memory::FLEXIBILITY_ASPECTS
        .iter()
        .filter_map(|aspect| {
            let level = match schedule::flex_of(ctx, aspect)? {
                schedule::Flex::NotFlexible => "low",
                schedule::Flex::Somewhat => "medium",
                schedule::Flex::Flexible => "high",
            };
            Some((aspect.to_string(), level.to_string()))
        })
        .collect()
}

/// Round trips after which a thread is escalated to both users (§6.4).
pub const MAX_ROUND_TRIPS: u32 = 8;

/// The [`Rejected::reason`] of a proposal whose user asked for another place (the
/// `reason_class` of its `counter_requested` answer, §8.2): it rules out the place, not
/// the time.
pub const DIFFERENT_PLACE: &str = "different_place";

/// Everything the negotiator may look at: one thread, from one agent's side.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// What the thread is about.
    pub intent: &'a Intent,
    /// Whether this agent started the thread.
    pub i_am_initiator: bool,
    /// This agent.
    pub me: &'a Address,
    /// The other agent.
    pub peer: &'a Address,
    /// My values usable in this thread: what I have shared plus what I may share. Only these may appear in a proposal.
    pub mine: &'a Context,
    /// The peer's values received in this thread.
    pub theirs: &'a Context,
    /// Fields I already asked the peer for: never ask again (§6.4).
    pub asked: &'a BTreeSet<String>,
    /// Fields the peer declined or could not give (§7.5): work without them.
    pub unavailable: &'a BTreeSet<String>,
    /// What relationship memory holds fresh about the peer (§11.2: values it shared in
    /// earlier threads, less than 90 days old, and the `flexibility` it usually states).
    /// A field found here is not asked for, and the usual flexibility stands in for one
    /// the peer does not state; but no value here is ever copied into a decision: memory
    /// never leaves the device (§11.1).
    pub remembered: &'a Context,
    /// Fields the peer usually declines (relationship memory, §11.1): not asked for
    /// unless required.
    pub usually_declined: &'a BTreeSet<String>,
    /// Options already ruled out in this thread (failed actions §9, declined or countered resolutions §8.2), most recent last.
    pub rejected: &'a [Rejected],
    /// Context exchanges so far (§6.4).
    pub round_trips: u32,
}

/// An option ruled out in this thread: a declined or countered resolution (§8.2) or a
/// failed action (§9).
///
/// Scheduling options are matched on `details.date` plus `details.time` (or
/// `details.start`), so a rejected proposal's details can be passed back unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rejected {
    /// One-line description of the option, e.g. the proposal's summary.
    pub summary: String,
    /// The option's structured details, e.g. the proposal's details.
    #[serde(default)]
    pub details: Context,
    /// Why it was ruled out (`declined: scheduling_conflict`, `book_table failed: fully booked`).
    #[serde(default)]
    pub reason: String,
}

/// What the agent should do next in a thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Ask the peer for more (at most 5 needs, most important first, none in `asked` or `unavailable`).
    Ask {
        /// The fields wanted, most important first.
        needs: Vec<Need>,
    },
    /// Propose an outcome (becomes a §8.1 resolution).
    Propose {
        /// The proposed outcome with alternatives and reasoning.
        proposal: Proposal,
        /// What happens once everyone confirms (`actions_on_confirm`).
        actions: Vec<ActionSpec>,
    },
    /// No overlap: send a §6.3 context packet — `context` holds `conflict` and `proposed_alternatives` exactly in the §6.3 shape.
    NoOverlap {
        /// `{"conflict": {...}, "proposed_alternatives": [...]}`.
        context: Context,
        /// The recommendation to surface the conflict to the users.
        escalation: Escalation,
    },
    /// Solution space exhausted: hand to the humans with a summary of what was tried.
    Escalate {
        /// Why the agents cannot go further.
        reason: String,
        /// What was tried.
        summary: String,
    },
    /// Nothing to do until something changes (e.g. waiting for the peer).
    Wait,
}

/// The needs for the first packet of a thread I start (§4): what I would need from the
/// peer for this intent, minus what makes no sense to ask.
///
/// For `scheduling` these are the fields needed to find an overlap and constrain it —
/// `time_windows` (required), `dietary` (helpful, meals only), `location_preference`
/// (nice to have, in-person events whose location I have not fixed) and `timezone`
/// (helpful, remote events) — as in the §4 / §11.2 example; fields that only refine the
/// final choice (`transport_mode`, `cuisine_preference`, `budget_range`) are asked later
/// by whoever ends up proposing, and only if still missing. Other intents ask for the
/// fields listed in my `wanted_fields` context field. At most 5, most important first.
pub fn initial_needs(intent: &Intent, mine: &Context) -> Vec<Need> {
    if needs::is_scheduling(intent) {
        needs::opening_scheduling_needs(intent, mine)
    } else {
        let mut out: Vec<Need> = needs::wanted_fields(intent, mine)
            .into_iter()
            .map(|s| s.to_need())
            .collect();
        out.sort_by_key(|n| n.priority);
        out.truncate(crate::packet::MAX_NEEDS_PER_PACKET);
        out
    }
}

/// Whether `tz` names a time zone the negotiator understands (an IANA name such as
/// `Europe/London`, `UTC`, or an offset such as `+01:00`).
pub fn timezone_known(tz: &str) -> bool {
    windows::Zone::parse(tz).is_some()
}

/// Decides the next step in a thread from this agent's view of it.
///
/// Call it when it is this agent's move: after the peer's first packet, after a
/// `context_response`, after a §6.3 packet, after a resolution was declined or an action
/// failed (with the option added to [`View::rejected`]). After answering a
/// `context_request` the agent is waiting for the peer and should not call it.
pub fn decide(view: &View) -> Decision {
    if view.round_trips >= MAX_ROUND_TRIPS {
        return Decision::Escalate {
            reason: format!(
                "Round-trip limit reached ({} context exchanges without a resolution, §6.4)",
                view.round_trips
            ),
            summary: tried_summary(view),
        };
    }
    if needs::is_scheduling(view.intent) {
        schedule::decide(view)
    } else {
        generic::decide(view)
    }
}

/// A summary of the thread for an escalation: fields exchanged, declined and options
/// ruled out.
pub(crate) fn tried_summary(view: &View) -> String {
    let mut parts = Vec::new();
    let given: Vec<&str> = view
        .theirs
        .keys()
        .filter(|k| !needs::is_meta_field(k))
        .map(String::as_str)
        .take(20)
        .collect();
    if !given.is_empty() {
        parts.push(format!("peer shared: {}", given.join(", ")));
    }
    let declined: Vec<&str> = view
        .unavailable
        .iter()
        .map(String::as_str)
        .take(20)
        .collect();
    if !declined.is_empty() {
        parts.push(format!("declined: {}", declined.join(", ")));
    }
    if !view.rejected.is_empty() {
        let tried: Vec<String> = view
            .rejected
            .iter()
            .take(10)
            .map(|r| {
                let summary = clip(&r.summary, 120);
                if r.reason.trim().is_empty() {
                    summary
                } else {
                    format!("{summary} ({})", clip(&r.reason, 120))
                }
            })
            .collect();
        parts.push(format!("ruled out: {}", tried.join("; ")));
    }
    if parts.is_empty() {
        "nothing was agreed".to_string()
    } else {
        parts.join(". ")
    }
}

/// Cuts a string to at most `max` characters (on a character boundary), adding `…`.
pub(crate) fn clip(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// A string value of a context field, trimmed, if it is a non-empty string.
pub(crate) fn str_field<'c>(ctx: &'c Context, key: &str) -> Option<&'c str> {
    ctx.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Whether a thread about `intent`, with the initiator's `context`, is a meal out (a
/// table is booked for it).
pub(crate) fn is_meal(intent: &Intent, context: &Context) -> bool {
    let event = needs::event_type(intent, context, &Context::new());
    needs::event_kind(&event) == needs::EventKind::Meal
}
