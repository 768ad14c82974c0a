//! The parts of packets that only group threads carry (§10, SPEC-NOTES "Group threads"):
//! the leg's [`GroupHeader`], the [`AggregatedContext`] a coordinator sends its
//! participants, a targeted [`FlexibilityRequest`] and the [`Handover`] of a coordinator
//! transfer.
//!
//! A group thread is a star of two-party *legs*, one per participant, each a thread of its
//! own (its own `thread_id` and end-to-end session). None of these parts appears in a
//! two-party thread, and every one is optional, so two-party packets are unchanged.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{deserialize_at, invalid, valid_id, Intent, WireError};
use crate::address::Address;
use crate::time::Timestamp;

/// Fewest agents in a group thread, the coordinator included.
pub const MIN_GROUP_PARTICIPANTS: usize = 2;
/// Most agents in a group thread, the coordinator included (issue 12: 2–16).
pub const MAX_GROUP_PARTICIPANTS: usize = 16;
/// Longest sentence (`message`, `trade_off`, `local`) in a group part, in characters.
pub const MAX_GROUP_TEXT: usize = 400;
/// Most windows or candidates listed in an aggregated context.
pub const MAX_GROUP_WINDOWS: usize = 8;

/// What makes a leg part of a group thread: sent in the first `context` packet of every
/// leg, and again whenever it changes (a new coordinator, a participant added).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupHeader {
    /// The group's own id (`grp_…`), the same on every leg; never on the relay's side of
    /// the envelope (it travels encrypted, the legs' thread ids are unrelated).
    pub group_id: String,
    /// The agent that coordinates (§10.1): the initiator, until a transfer.
    pub coordinator: Address,
    /// Coordinator epoch: 0 at the start, +1 at each accepted transfer; a header with a
    /// lower epoch than one already seen is stale.
    #[serde(default)]
    pub epoch: u32,
    /// Every agent of the group, the coordinator first, each once.
    pub participants: Vec<Address>,
}

impl GroupHeader {
    /// Checks the header: a valid `group_id`, 2–16 distinct participants, the coordinator
    /// first among them. `field` prefixes the names in errors.
    pub fn validate(&self, field: &str) -> Result<(), WireError> {
        valid_id(&format!("{field}.group_id"), &self.group_id)?;
        let n = self.participants.len();
        if !(MIN_GROUP_PARTICIPANTS..=MAX_GROUP_PARTICIPANTS).contains(&n) {
            return Err(invalid(
                format!("{field}.participants"),
                format!(
                    "a group has {MIN_GROUP_PARTICIPANTS}-{MAX_GROUP_PARTICIPANTS} participants, got {n}"
                ),
            ));
        }
        let distinct: BTreeSet<&Address> = self.participants.iter().collect();
        if distinct.len() != n {
            return Err(invalid(
                format!("{field}.participants"),
                "names an agent twice",
            ));
        }
        if self.participants.first() != Some(&self.coordinator) {
            return Err(invalid(
                format!("{field}.coordinator"),
                "must be the first of `participants`",
            ));
        }
        Ok(())
    }
}

/// A time window as the group sees it: UTC bounds plus a rendering in the coordinator's
/// time zone.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WindowFact {
    /// Start, RFC 3339 UTC (`2026-03-27T20:00:00Z`).
    pub start: String,
    /// End (exclusive), RFC 3339 UTC, after `start`.
    pub end: String,
    /// The window for people: `Friday 27 March 20:00–23:00 (Europe/London)`.
    #[serde(default)]
    pub local: String,
}

impl WindowFact {
    fn validate(&self, field: &str) -> Result<(), WireError> {
        let s = Timestamp::parse_rfc3339(&self.start)
            .ok_or_else(|| invalid(format!("{field}.start"), "must be an RFC 3339 date-time"))?;
        let e = Timestamp::parse_rfc3339(&self.end)
            .ok_or_else(|| invalid(format!("{field}.end"), "must be an RFC 3339 date-time"))?;
        if e <= s {
            return Err(invalid(format!("{field}.end"), "must be after `start`"));
        }
        text(&format!("{field}.local"), &self.local)
    }
}

fn text(field: &str, s: &str) -> Result<(), WireError> {
    if s.chars().count() > MAX_GROUP_TEXT {
        return Err(invalid(
            field,
            format!("at most {MAX_GROUP_TEXT} characters"),
        ));
    }
    Ok(())
}

/// A targeted flexibility request (§10.2 step 3), sent to the binding constraint's owner
/// only, in a `context` packet beside a need for `field`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlexibilityRequest {
    /// The context field asked to move: `time_windows` or `budget_range`.
    pub field: String,
    /// With `time_windows`: the window every other participant can make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowFact>,
    /// With `budget_range`: the budget every other participant's range allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// How many of the other participants (those who shared the field) fit the request.
    pub others_fit: u32,
    /// How many other participants shared the field.
    pub others: u32,
    /// The question for the recipient's user, naming no other participant.
    pub message: String,
}

impl FlexibilityRequest {
    /// Checks the request: a field, a window for `time_windows`, counts in order.
    pub fn validate(&self, field: &str) -> Result<(), WireError> {
        if self.field.trim().is_empty() {
            return Err(invalid(format!("{field}.field"), "must not be empty"));
        }
        if self.field == "time_windows" && self.window.is_none() {
            return Err(WireError::Missing(format!("{field}.window")));
        }
        if let Some(w) = &self.window {
            w.validate(&format!("{field}.window"))?;
        }
        if let Some(b) = &self.budget {
            text(&format!("{field}.budget"), b)?;
        }
        if self.others_fit > self.others {
            return Err(invalid(
                format!("{field}.others_fit"),
                "must not exceed `others`",
            ));
        }
        if self.message.trim().is_empty() {
            return Err(invalid(format!("{field}.message"), "must not be empty"));
        }
        text(&format!("{field}.message"), &self.message)
    }
}

/// Where a participant stands, as every participant may see it (§10.2 `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParticipantStatus {
    /// The participant answered the coordinator's needs (or declined some of them).
    ContextReceived,
    /// The coordinator still waits for the participant's answer.
    AwaitingResponse,
    /// Nothing came from the participant within the staleness timeout (§6.4).
    Unreachable,
    /// The participant's user declined to take part.
    Declined,
}

impl ParticipantStatus {
    /// The wire word.
    pub fn word(self) -> &'static str {
        match self {
            ParticipantStatus::ContextReceived => "context_received",
            ParticipantStatus::AwaitingResponse => "awaiting_response",
            ParticipantStatus::Unreachable => "unreachable",
            ParticipantStatus::Declined => "declined",
        }
    }
}

/// One participant in an aggregated context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParticipantEntry {
    /// The participant.
    pub agent: Address,
    /// Where it stands.
    pub status: ParticipantStatus,
}

/// A candidate window with how many can attend: counts only, never who (SPEC-NOTES
/// "Group threads": a candidate's attendees are shared with the coordinator, not the group).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CandidateFact {
    /// The window.
    pub window: WindowFact,
    /// How many of those who shared availability can attend all of it.
    pub available_count: u32,
    /// How many shared availability.
    pub of: u32,
    /// The trade-off against the best candidate, a sentence (empty for the best).
    #[serde(default)]
    pub trade_off: String,
}

/// The availability part of an aggregated context (§10.2 `availability_overlap`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AvailabilityOverlap {
    /// How many agents (the coordinator included) shared readable availability.
    pub shared_by: u32,
    /// The windows every one of them can make, long enough for the event (may be empty).
    #[serde(default)]
    pub common_windows: Vec<WindowFact>,
    /// Ranked candidates, best first (at most [`MAX_GROUP_WINDOWS`]).
    #[serde(default)]
    pub ranked: Vec<CandidateFact>,
    /// The best candidate against the next one, a sentence (§10.2's "100 % attendance …").
    #[serde(default)]
    pub trade_off: String,
}

/// The combined non-time constraints of an aggregated context.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CombinedConstraints {
    /// The budget every shared range allows (their intersection), canonical text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// The shared budgets have no common amount (or use different currencies).
    #[serde(default)]
    pub budget_conflict: bool,
    /// How many distinct dietary restrictions the plan honours (the union; not which).
    #[serde(default)]
    pub dietary_restrictions: u32,
}

/// How confirmations stand in a group resolution (§8.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfirmationProgress {
    /// The resolution on the recipient's leg (its `packet_id`); absent in a sequential
    /// confirmation while the recipient's turn has not come.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution_id: Option<String>,
    /// `all`, `quorum` or `sequential`.
    pub mode: ConfirmationMode,
    /// Confirmations needed (all confirmers, or the quorum).
    pub required: u32,
    /// Confirmations received so far, the coordinator's included.
    pub confirmed: u32,
    /// `pending`, `reached`, `expired` or `failed` (quorum out of reach).
    pub outcome: ConfirmationOutcome,
    /// Who confirmed: the people the plan now counts on.
    #[serde(default)]
    pub attending: Vec<Address>,
    /// Sequential mode: whose turn it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<Address>,
}

/// How a group resolution collects confirmations (§8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfirmationMode {
    /// Everyone named in `requires_confirmation_from`.
    All,
    /// At least `quorum` of them.
    Quorum,
    /// Everyone, one at a time in the order of `requires_confirmation_from`.
    Sequential,
}

/// Where a group resolution's confirmation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfirmationOutcome {
    /// Still collecting.
    Pending,
    /// Enough confirmed: the actions run.
    Reached,
    /// The confirmation timeout passed first.
    Expired,
    /// Too many declined for the quorum.
    Failed,
}

/// The aggregated context a coordinator sends its participants (§10.2), carried in the
/// `context` packet's `aggregated_context` member: derived facts only — statuses,
/// counts, overlap windows, combined constraints — never a participant's own values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregatedContext {
    /// Every participant but the coordinator, with its status.
    pub participants: Vec<ParticipantEntry>,
    /// How many of them answered.
    pub answered: u32,
    /// How many there are.
    pub of: u32,
    /// The availability part, once anyone's availability is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability_overlap: Option<AvailabilityOverlap>,
    /// The combined constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub combined: Option<CombinedConstraints>,
    /// The confirmation progress of an open group resolution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<ConfirmationProgress>,
}

impl AggregatedContext {
    /// The JSON value for `aggregated_context`.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Reads and checks an `aggregated_context` written by a2acp; errors name the field
    /// under `aggregated_context`. (The packet carries the member opaquely, §15.3: an
    /// agent that cannot read it only loses the display.)
    pub fn from_value(v: &Value) -> Result<Self, WireError> {
        let a: AggregatedContext = deserialize_at("aggregated_context", v.clone())?;
        a.validate()?;
        Ok(a)
    }

    /// Checks counts, windows and sentences.
    pub fn validate(&self) -> Result<(), WireError> {
        let f = "aggregated_context";
        if self.participants.len() >= MAX_GROUP_PARTICIPANTS
            || self.of as usize != self.participants.len()
        {
            return Err(invalid(
                format!("{f}.of"),
                "must count `participants` (at most 15)",
            ));
        }
        if self.answered > self.of {
            return Err(invalid(format!("{f}.answered"), "must not exceed `of`"));
        }
        if let Some(o) = &self.availability_overlap {
            let g = format!("{f}.availability_overlap");
            if o.common_windows.len() > MAX_GROUP_WINDOWS || o.ranked.len() > MAX_GROUP_WINDOWS {
                return Err(invalid(
                    g,
                    format!("at most {MAX_GROUP_WINDOWS} windows and candidates"),
                ));
            }
            for (i, w) in o.common_windows.iter().enumerate() {
                w.validate(&format!("{g}.common_windows[{i}]"))?;
            }
            for (i, c) in o.ranked.iter().enumerate() {
                let h = format!("{g}.ranked[{i}]");
                c.window.validate(&format!("{h}.window"))?;
                if c.available_count > c.of || c.of > o.shared_by {
                    return Err(invalid(
                        format!("{h}.available_count"),
                        "counts out of order",
                    ));
                }
                text(&format!("{h}.trade_off"), &c.trade_off)?;
            }
            text(&format!("{g}.trade_off"), &o.trade_off)?;
        }
        if let Some(c) = &self.combined {
            if let Some(b) = &c.budget {
                text(&format!("{f}.combined.budget"), b)?;
            }
        }
        if let Some(c) = &self.confirmation {
            if let Some(rid) = &c.resolution_id {
                valid_id(&format!("{f}.confirmation.resolution_id"), rid)?;
            }
            if c.attending.len() > MAX_GROUP_PARTICIPANTS {
                return Err(invalid(
                    format!("{f}.confirmation.attending"),
                    "more agents than a group has",
                ));
            }
        }
        Ok(())
    }
}

/// What passes to the new coordinator with a `coordinator_transfer` (§10.3): only what
/// every participant may already see, so a declined transfer leaks nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handover {
    /// The group as it will be: the new coordinator first, `epoch` + 1.
    pub group: GroupHeader,
    /// What the group thread is about.
    pub intent: Intent,
    /// The last aggregated context sent to the participants, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregated_context: Option<Value>,
    /// Context exchanges so far in the group (the §6.4 limit goes on counting).
    #[serde(default)]
    pub round_trips: u32,
    /// Confirmations the group's user asked for in total (§8.3 quorum), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<u32>,
    /// Confirmations are asked one after the other (§8.3 sequential).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sequential: bool,
}

impl Handover {
    /// Checks the handover's group header and aggregated context.
    pub fn validate(&self, field: &str) -> Result<(), WireError> {
        self.group.validate(&format!("{field}.group"))?;
        if let Some(q) = self.quorum {
            if q == 0 || q as usize > self.group.participants.len() {
                return Err(invalid(
                    format!("{field}.quorum"),
                    "counts 1 to the number of participants",
                ));
            }
            if self.sequential {
                return Err(invalid(
                    format!("{field}.quorum"),
                    "a sequential confirmation has no quorum",
                ));
            }
        }
        if let Some(v) = &self.aggregated_context {
            AggregatedContext::from_value(v).map_err(|e| match e {
                WireError::Invalid { field: f, reason } => invalid(format!("{field}.{f}"), reason),
                WireError::Missing(f) => WireError::Missing(format!("{field}.{f}")),
                other => other,
            })?;
        }
        Ok(())
    }
}
