//! Which fields an intent needs from the peer, and which of them to ask for (§4, §6.2, §6.4).

use serde_json::Value;

use super::{str_field, View};
use crate::packet::{Context, Intent, Need, Priority, MAX_NEEDS_PER_PACKET};

/// Longest field name accepted in `wanted_fields`.
pub(crate) const MAX_FIELD_LEN: usize = 64;

/// Context fields that steer the negotiation rather than describe the user: never asked
/// for, never copied into a proposal's details.
const META_FIELDS: &[&str] = &[
    "wanted_fields",
    "flexibility",
    "conflict",
    "proposed_alternatives",
    "_format_hints",
];

/// Whether a context field is negotiation metadata (see [`META_FIELDS`]).
pub(crate) fn is_meta_field(field: &str) -> bool {
    META_FIELDS.contains(&field)
}

/// Whether the intent is a scheduling one (`scheduling`, `group_scheduling`, ...).
pub(crate) fn is_scheduling(intent: &Intent) -> bool {
    intent.category.to_ascii_lowercase().contains("schedul")
}

/// What kind of event a scheduling thread is about; decides which fields make sense.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// A meal out: dietary, cuisine and budget matter, a table is booked.
    Meal,
    /// Meeting in person: location and transport matter.
    InPerson,
    /// A call or video meeting: time zones matter, places do not.
    Remote,
}

const MEAL_WORDS: &[&str] = &["breakfast", "brunch", "lunch", "dinner", "supper", "meal"];
const REMOTE_WORDS: &[&str] = &[
    "call", "video", "zoom", "phone", "online", "virtual", "remote",
];
const EVENT_WORDS: &[&str] = &[
    "breakfast",
    "brunch",
    "lunch",
    "dinner",
    "supper",
    "meal",
    "coffee",
    "drinks",
    "call",
    "meeting",
    "game night",
];

/// The event type: `event_type` of the initiator's context, else of the responder's, else
/// the first event word found in the intent summary (`Coordinate dinner on Friday` →
/// `dinner`). Lower case; empty if unknown.
pub(crate) fn event_type(intent: &Intent, first: &Context, second: &Context) -> String {
    if let Some(e) = str_field(first, "event_type").or_else(|| str_field(second, "event_type")) {
        return super::clip(&e.to_lowercase(), 60);
    }
    let summary = intent.summary.to_lowercase();
    EVENT_WORDS
        .iter()
        .filter_map(|w| summary.find(w).map(|pos| (pos, *w)))
        .min()
        .map(|(_, w)| w.to_string())
        .unwrap_or_default()
}

/// The kind of an event type.
pub(crate) fn event_kind(event: &str) -> EventKind {
    let words: Vec<&str> = event
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    if words.iter().any(|w| MEAL_WORDS.contains(w)) {
        EventKind::Meal
    } else if words.iter().any(|w| REMOTE_WORDS.contains(w)) {
        EventKind::Remote
    } else {
        EventKind::InPerson
    }
}

/// One field wanted from the peer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldSpec {
    /// Context field name.
    pub field: String,
    /// How much it matters.
    pub priority: Priority,
    /// Why (shown in the peer's consent prompt).
    pub reason: String,
    /// Other names under which the peer may have given it.
    pub aliases: &'static [&'static str],
    /// Asked in the first packet of a thread (§4) rather than only when deciding.
    pub opening: bool,
}

impl FieldSpec {
    /// As a need.
    pub fn to_need(&self) -> Need {
        Need {
            field: self.field.clone(),
            reason: self.reason.clone(),
            priority: self.priority,
        }
    }

    /// Whether the peer's context holds the field (under its name or an alias), non-null.
    pub fn given_in(&self, ctx: &Context) -> bool {
        std::iter::once(self.field.as_str())
            .chain(self.aliases.iter().copied())
            .any(|k| ctx.get(k).is_some_and(|v| !v.is_null()))
    }
}

fn spec(
    field: &str,
    priority: Priority,
    reason: &str,
    aliases: &'static [&'static str],
    opening: bool,
) -> FieldSpec {
    FieldSpec {
        field: field.to_string(),
        priority,
        reason: reason.to_string(),
        aliases,
        opening,
    }
}

/// Whether `ctx` (my context) fixes the location, so the peer's preference is moot.
fn location_fixed(ctx: &Context) -> bool {
    str_field(ctx, "venue").is_some()
        || matches!(
            super::schedule::flex_of(ctx, "location"),
            Some(super::schedule::Flex::NotFlexible)
        )
}

/// The fields a scheduling thread needs from the peer, in table order.
///
/// `mine` is this agent's context (to drop what makes no sense to ask), `event` the event
/// type.
pub(crate) fn scheduling_fields(event: &str, mine: &Context) -> Vec<FieldSpec> {
    let kind = event_kind(event);
    let meal = kind == EventKind::Meal;
    let in_person = kind != EventKind::Remote;
    let mut out = vec![spec(
        "time_windows",
        Priority::Required,
        "Need your availability to find a time that works for both of you",
        &["availability"],
        true,
    )];
    if kind == EventKind::Remote {
        out.push(spec(
            "timezone",
            Priority::Helpful,
            "Need your time zone to line up availability across zones",
            &[],
            true,
        ));
    }
    if meal {
        out.push(spec(
            "dietary",
            Priority::Helpful,
            "Need dietary requirements to pick somewhere that works for everyone",
            &["dietary_requirements"],
            true,
        ));
    }
    if in_person {
        out.push(spec(
            "transport_mode",
            Priority::Helpful,
            "Affects how far the venue can be — driving vs walking changes the options",
            &[],
            false,
        ));
    }
    if meal {
        // §6.1 lists it nice_to_have; helpful so that it reaches the peer's consent prompt
        // (§6.2: nice_to_have is only shared if pre-authorised) — see NOTES-negotiator.md.
        out.push(spec(
            "cuisine_preference",
            Priority::Helpful,
            "Several kinds of restaurant are possible — a cuisine preference would narrow it down",
            &[],
            false,
        ));
    }
    if in_person && !location_fixed(mine) {
        out.push(spec(
            "location_preference",
            Priority::NiceToHave,
            "Preferred area or maximum travel distance",
            &["location"],
            true,
        ));
    }
    if meal {
        out.push(spec(
            "budget_range",
            Priority::NiceToHave,
            "To keep the suggestion within everyone's budget",
            &["budget"],
            false,
        ));
    }
    out
}

/// The opening needs of a scheduling thread (see [`super::initial_needs`]).
pub(crate) fn opening_scheduling_needs(intent: &Intent, mine: &Context) -> Vec<Need> {
    let event = event_type(intent, mine, mine);
    let mut out: Vec<Need> = scheduling_fields(&event, mine)
        .into_iter()
        .filter(|s| s.opening)
        .map(|s| s.to_need())
        .collect();
    out.sort_by_key(|n| n.priority);
    out.truncate(MAX_NEEDS_PER_PACKET);
    out
}

/// Parses a priority word; `None` if unknown.
pub(crate) fn parse_priority(s: &str) -> Option<Priority> {
    match s
        .trim()
        .to_ascii_lowercase()
        .replace([' ', '-'], "_")
        .as_str()
    {
        "required" => Some(Priority::Required),
        "helpful" => Some(Priority::Helpful),
        "nice_to_have" => Some(Priority::NiceToHave),
        _ => None,
    }
}

/// Whether a field name is acceptable in a need.
pub(crate) fn valid_field_name(f: &str) -> bool {
    !f.is_empty()
        && f.len() <= MAX_FIELD_LEN
        && f.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The fields named by my `wanted_fields` context field (non-scheduling intents).
///
/// Entries are field names (priority `helpful`) or objects
/// `{"field", "priority"?, "reason"?}`. Invalid names and duplicates are skipped; at most
/// 32 entries are read.
pub(crate) fn wanted_fields(intent: &Intent, mine: &Context) -> Vec<FieldSpec> {
    let default_reason = format!("Needed for: {}", super::clip(&intent.summary, 80));
    let list: Vec<&Value> = match mine.get("wanted_fields") {
        Some(Value::Array(a)) => a.iter().take(32).collect(),
        Some(v @ Value::String(_)) => vec![v],
        _ => Vec::new(),
    };
    let mut out: Vec<FieldSpec> = Vec::new();
    for entry in list {
        let (field, priority, reason) = match entry {
            Value::String(s) => (s.trim(), Priority::Helpful, default_reason.clone()),
            Value::Object(o) => {
                let Some(field) = o.get("field").and_then(Value::as_str) else {
                    continue;
                };
                let priority = o
                    .get("priority")
                    .and_then(Value::as_str)
                    .and_then(parse_priority)
                    .unwrap_or(Priority::Helpful);
                let reason = o
                    .get("reason")
                    .and_then(Value::as_str)
                    .map(|r| super::clip(r, 200))
                    .filter(|r| !r.is_empty())
                    .unwrap_or_else(|| default_reason.clone());
                (field.trim(), priority, reason)
            }
            _ => continue,
        };
        if !valid_field_name(field) || is_meta_field(field) || out.iter().any(|s| s.field == field)
        {
            continue;
        }
        out.push(FieldSpec {
            field: field.to_string(),
            priority,
            reason,
            aliases: &[],
            opening: true,
        });
    }
    out
}

/// What is still missing from the peer.
#[derive(Debug, Default)]
pub(crate) struct Gaps {
    /// Fields to ask for: never asked, never declined, not given. Most important first,
    /// at most 5.
    pub ask: Vec<Need>,
    /// A required field was asked and neither given nor declined yet (§6.2: stall).
    pub required_pending: bool,
    /// Whether `ask` holds a required field.
    pub required_askable: bool,
}

/// Compares the wanted fields with the view.
pub(crate) fn gaps(specs: &[FieldSpec], view: &View) -> Gaps {
    let mut g = Gaps::default();
    let mut ask: Vec<Need> = Vec::new();
    for s in specs {
        if s.given_in(view.theirs)
            || s.given_in(view.remembered)
            || view.unavailable.contains(&s.field)
            || (s.priority != Priority::Required && view.usually_declined.contains(&s.field))
        {
            continue;
        }
        if view.asked.contains(&s.field) {
            if s.priority == Priority::Required {
                g.required_pending = true;
            }
            continue;
        }
        if s.priority == Priority::Required {
            g.required_askable = true;
        }
        ask.push(s.to_need());
    }
    ask.sort_by_key(|n| n.priority);
    ask.truncate(MAX_NEEDS_PER_PACKET);
    g.ask = ask;
    g
}
