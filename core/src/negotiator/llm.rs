//! The answer schema sent to an LLM standing in for [`super::decide`], and the validation
//! of its answers.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::needs::{is_meta_field, valid_field_name};
use super::schedule::conflict_sent;
use super::{Decision, View, MAX_ROUND_TRIPS};
use crate::packet::MAX_NEEDS_PER_PACKET;

/// Longest answer accepted, in bytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// Longest summary / reason accepted, in characters.
const MAX_TEXT_CHARS: usize = 1000;
/// Most alternatives accepted in a proposal or a §6.3 context.
const MAX_ALTERNATIVES: usize = 5;
/// Most actions accepted.
const MAX_ACTIONS: usize = 8;
/// Field names that mean the same thing in a proposal's details and in a context.
const ALIASES: &[&[&str]] = &[
    &["budget", "budget_range"],
    &["location", "location_preference"],
    &["dietary", "dietary_requirements"],
    &["time_windows", "availability"],
];
/// Proposal detail keys computed by the negotiator rather than copied from a context.
const DERIVED_DETAILS: &[&str] = &[
    "date",
    "time",
    "end",
    "end_date",
    "timezone",
    "start_utc",
    "end_utc",
    "duration",
];

/// JSON schema (as serde_json::Value) of a Decision, sent to an LLM as the expected answer schema.
pub fn decision_schema() -> Value {
    let confidence = json!({"type": "number", "minimum": 0, "maximum": 1,
        "description": "How sure you are of this decision, from 0 (a guess) to 1 (certain)"});
    let text = json!({"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS});
    let need = json!({
        "type": "object",
        "required": ["field", "reason", "priority"],
        "properties": {
            "field": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$",
                      "description": "Context field wanted from the peer; never one already asked for, declined, or given"},
            "reason": {"type": "string", "minLength": 1, "description": "Why — shown to the peer's user in a consent prompt"},
            "priority": {"enum": ["required", "helpful", "nice_to_have"]}
        }
    });
    let alternative = json!({
        "type": "object",
        "required": ["summary", "reason"],
        "properties": {
            "summary": text,
            "reason": {"type": "string"},
            "details": {"type": "object"}
        }
    });
    let action = json!({
        "type": "object",
        "required": ["action", "requires_user_approval", "reversible"],
        "properties": {
            "action": {"type": "string", "minLength": 1, "description": "e.g. book_table, add_calendar_event"},
            "service": {"type": "string"},
            "requires_user_approval": {"type": "boolean"},
            "reversible": {"type": "boolean"},
            "by": {"type": "string", "description": "Address of the agent that performs it; omit for every confirming agent"}
        }
    });
    let proposed_alternative = json!({
        "type": "object",
        "required": ["option", "rationale"],
        "properties": {
            "option": {"type": "string", "minLength": 1},
            "rationale": {"type": "string"},
            "details": {"type": "object", "properties": {
                "date": {"type": "string", "description": "YYYY-MM-DD"},
                "start": {"type": "string", "description": "HH:MM"},
                "end": {"type": "string", "description": "HH:MM"},
                "timezone": {"type": "string", "description": "IANA zone or ±HH:MM"}
            }}
        }
    });
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "A2ACP negotiator decision",
        "description": "The next step in one thread. Use only values from your own shareable context or the peer's context in a proposal. Escalate once 8 round trips have passed.",
        "oneOf": [
            {
                "type": "object",
                "description": "Ask the peer for more context (§6.1).",
                "required": ["decision", "needs"],
                "properties": {
                    "decision": {"const": "ask"},
                    "confidence": confidence,
                    "needs": {"type": "array", "minItems": 1, "maxItems": MAX_NEEDS_PER_PACKET, "items": need,
                              "description": "Most important first; each field at most once per thread"}
                }
            },
            {
                "type": "object",
                "description": "Propose an outcome (§8.1 resolution).",
                "required": ["decision", "proposal", "actions"],
                "properties": {
                    "decision": {"const": "propose"},
                    "confidence": confidence,
                    "proposal": {
                        "type": "object",
                        "required": ["summary", "details", "alternatives", "reasoning"],
                        "properties": {
                            "summary": text,
                            "details": {"type": "object"},
                            "alternatives": {"type": "array", "maxItems": MAX_ALTERNATIVES, "items": alternative},
                            "reasoning": text
                        }
                    },
                    "actions": {"type": "array", "maxItems": MAX_ACTIONS, "items": action}
                }
            },
            {
                "type": "object",
                "description": "No overlap (§6.3): the conflict and alternatives; at most once per thread.",
                "required": ["decision", "context", "escalation"],
                "properties": {
                    "decision": {"const": "no_overlap"},
                    "confidence": confidence,
                    "context": {
                        "type": "object",
                        "required": ["conflict", "proposed_alternatives"],
                        "additionalProperties": false,
                        "properties": {
                            "conflict": {
                                "type": "object",
                                "required": ["type", "field", "agent_a_values", "agent_b_values", "attempted_resolution"],
                                "properties": {
                                    "type": {"const": "no_overlap"},
                                    "field": {"type": "string", "minLength": 1},
                                    "agent_a_values": {"type": "array"},
                                    "agent_b_values": {"type": "array"},
                                    "attempted_resolution": {"type": "string", "minLength": 1}
                                }
                            },
                            "proposed_alternatives": {"type": "array", "minItems": 1, "maxItems": MAX_ALTERNATIVES, "items": proposed_alternative}
                        }
                    },
                    "escalation": {
                        "type": "object",
                        "required": ["recommend", "reason"],
                        "properties": {
                            "recommend": {"const": "surface_to_users"},
                            "reason": {"type": "string", "minLength": 1},
                            "suggested_prompt": {"type": "string"}
                        }
                    }
                }
            },
            {
                "type": "object",
                "description": "Hand the thread to the users with a summary of what was tried.",
                "required": ["decision", "reason", "summary"],
                "properties": {
                    "decision": {"const": "escalate"},
                    "confidence": confidence,
                    "reason": text,
                    "summary": text
                }
            },
            {
                "type": "object",
                "description": "Nothing to do until the peer answers.",
                "required": ["decision"],
                "properties": {"decision": {"const": "wait"}, "confidence": confidence}
            }
        ]
    })
}

/// The JSON object in an answer: the whole text, or the part inside a ```json fence, or
/// from the first `{` to the last `}`.
/// The `confidence` (0–1) an answer gave with its decision (§5.5), if any; values out of
/// range or not numbers count as none.
pub fn answer_confidence(text: &str) -> Option<f64> {
    let json = extract_json(text)?;
    let value: Value = serde_json::from_str(json).ok()?;
    value
        .get("confidence")?
        .as_f64()
        .filter(|c| (0.0..=1.0).contains(c))
}

fn extract_json(text: &str) -> Option<&str> {
    let t = text.trim();
    if t.starts_with('{') {
        return Some(t);
    }
    if let Some(start) = t.find("```") {
        let after = t.get(start + 3..)?;
        let body_start = after.find('\n').map(|i| i + 1).unwrap_or(0);
        let body = after.get(body_start..)?;
        if let Some(end) = body.find("```") {
            let inner = body.get(..end)?.trim();
            if inner.starts_with('{') {
                return Some(inner);
            }
        }
    }
    let a = t.find('{')?;
    let b = t.rfind('}')?;
    if b < a {
        return None;
    }
    t.get(a..=b)
}

/// Deserialises one member of the answer, naming the path of what is wrong.
fn member<T: serde::de::DeserializeOwned>(value: &Value, key: &str) -> Result<T, String> {
    let inner = value
        .get(key)
        .ok_or_else(|| format!("missing field `{key}`"))?;
    serde_path_to_error::deserialize(inner).map_err(|e| {
        let path = e.path().to_string();
        let full = if path == "." || path.is_empty() {
            key.to_string()
        } else if path.starts_with('[') {
            format!("{key}{path}")
        } else {
            format!("{key}.{path}")
        };
        format!("invalid field `{full}`: {}", e.inner())
    })
}

fn check_text(what: &str, s: &str) -> Result<(), String> {
    if s.trim().is_empty() {
        return Err(format!("{what} is empty"));
    }
    if s.chars().count() > MAX_TEXT_CHARS {
        return Err(format!("{what} is longer than {MAX_TEXT_CHARS} characters"));
    }
    Ok(())
}

/// Parses and validates an LLM's answer into a Decision (≤5 needs, non-empty summaries, no asked/unavailable field re-asked...), naming what is wrong on error.
pub fn parse_decision(text: &str, view: &View) -> Result<Decision, String> {
    if text.len() > MAX_ANSWER_BYTES {
        return Err(format!(
            "answer is {} bytes, more than the {MAX_ANSWER_BYTES}-byte limit",
            text.len()
        ));
    }
    let json = extract_json(text).ok_or("answer holds no JSON object")?;
    let value: Value =
        serde_json::from_str(json).map_err(|e| format!("answer is not valid JSON: {e}"))?;
    let tag = value
        .get("decision")
        .ok_or("missing field `decision` (one of ask, propose, no_overlap, escalate, wait)")?;
    if !tag.is_string() {
        return Err("field `decision` must be a string".to_string());
    }
    let decision = match tag.as_str().unwrap_or_default() {
        "ask" => Decision::Ask {
            needs: member(&value, "needs")?,
        },
        "propose" => Decision::Propose {
            proposal: member(&value, "proposal")?,
            actions: member(&value, "actions")?,
        },
        "no_overlap" => Decision::NoOverlap {
            context: member(&value, "context")?,
            escalation: member(&value, "escalation")?,
        },
        "escalate" => Decision::Escalate {
            reason: member(&value, "reason")?,
            summary: member(&value, "summary")?,
        },
        "wait" => Decision::Wait,
        other => {
            return Err(format!(
                "unknown decision `{}` (expected one of ask, propose, no_overlap, escalate, wait)",
                super::clip(other, 40)
            ))
        }
    };
    validate(&decision, view)?;
    Ok(decision)
}

fn validate(decision: &Decision, view: &View) -> Result<(), String> {
    if view.round_trips >= MAX_ROUND_TRIPS && !matches!(decision, Decision::Escalate { .. }) {
        return Err(format!(
            "the thread has reached the {MAX_ROUND_TRIPS}-round-trip limit (§6.4): the only valid decision is escalate"
        ));
    }
    match decision {
        Decision::Ask { needs } => {
            if needs.is_empty() {
                return Err("`needs` is empty: ask for at least one field".to_string());
            }
            if needs.len() > MAX_NEEDS_PER_PACKET {
                return Err(format!(
                    "`needs` has {} entries, more than {MAX_NEEDS_PER_PACKET} (§6.4): ask for the most important ones first",
                    needs.len()
                ));
            }
            let mut seen = BTreeSet::new();
            for (i, n) in needs.iter().enumerate() {
                let f = n.field.as_str();
                if !valid_field_name(f) {
                    return Err(format!(
                        "`needs[{i}].field` `{}` is not a field name (1-64 characters from A-Z, a-z, 0-9, _, -, .)",
                        super::clip(&n.field, 64)
                    ));
                }
                if is_meta_field(f) {
                    return Err(format!(
                        "`needs[{i}].field` `{f}` is negotiation metadata, not a field to ask for"
                    ));
                }
                if !seen.insert(f.to_string()) {
                    return Err(format!("`needs[{i}].field` `{f}` is asked twice"));
                }
                if view.asked.contains(f) {
                    return Err(format!(
                        "`needs[{i}].field` `{f}` was already asked for in this thread (§6.4: never ask twice)"
                    ));
                }
                if view.unavailable.contains(f) {
                    return Err(format!(
                        "`needs[{i}].field` `{f}` was declined by the peer (§7.5: do not re-ask)"
                    ));
                }
                if view.theirs.get(f).is_some_and(|v| !v.is_null()) {
                    return Err(format!(
                        "`needs[{i}].field` `{f}` was already given by the peer"
                    ));
                }
                check_text(&format!("`needs[{i}].reason`"), &n.reason)?;
            }
        }
        Decision::Propose { proposal, actions } => {
            check_text("`proposal.summary`", &proposal.summary)?;
            check_text("`proposal.reasoning`", &proposal.reasoning)?;
            if proposal.alternatives.len() > MAX_ALTERNATIVES {
                return Err(format!(
                    "`proposal.alternatives` has more than {MAX_ALTERNATIVES} entries"
                ));
            }
            for (i, a) in proposal.alternatives.iter().enumerate() {
                check_text(&format!("`proposal.alternatives[{i}].summary`"), &a.summary)?;
            }
            for key in proposal.details.keys() {
                if DERIVED_DETAILS.contains(&key.as_str()) {
                    continue;
                }
                let group: Vec<&str> = ALIASES
                    .iter()
                    .find(|g| g.contains(&key.as_str()))
                    .map(|g| g.to_vec())
                    .unwrap_or_else(|| vec![key.as_str()]);
                let declined = group.iter().any(|k| view.unavailable.contains(*k));
                let given = group
                    .iter()
                    .any(|k| view.mine.contains_key(*k) || view.theirs.contains_key(*k));
                if declined && !given {
                    return Err(format!(
                        "`proposal.details.{key}`: the peer declined `{key}` and neither side gave it; leave it out"
                    ));
                }
            }
            if actions.len() > MAX_ACTIONS {
                return Err(format!("`actions` has more than {MAX_ACTIONS} entries"));
            }
            for (i, a) in actions.iter().enumerate() {
                if a.action.trim().is_empty() {
                    return Err(format!("`actions[{i}].action` is empty"));
                }
                if let Some(by) = &a.by {
                    if by != view.me && by != view.peer {
                        return Err(format!(
                            "`actions[{i}].by` `{by}` is neither this agent nor the peer"
                        ));
                    }
                }
            }
        }
        Decision::NoOverlap {
            context,
            escalation,
        } => {
            if conflict_sent(view) {
                return Err(
                    "a no-overlap conflict was already exchanged in this thread: escalate instead"
                        .to_string(),
                );
            }
            if let Some(extra) = context
                .keys()
                .find(|k| *k != "conflict" && *k != "proposed_alternatives")
            {
                return Err(format!(
                    "`context.{extra}`: the no-overlap context holds only `conflict` and `proposed_alternatives` (§6.3)"
                ));
            }
            let conflict = context
                .get("conflict")
                .and_then(Value::as_object)
                .ok_or("`context.conflict` is missing or not an object")?;
            if conflict.get("type").and_then(Value::as_str) != Some("no_overlap") {
                return Err("`context.conflict.type` must be `no_overlap`".to_string());
            }
            for key in ["field", "attempted_resolution"] {
                let ok = conflict
                    .get(key)
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.trim().is_empty());
                if !ok {
                    return Err(format!(
                        "`context.conflict.{key}` must be a non-empty string"
                    ));
                }
            }
            for key in ["agent_a_values", "agent_b_values"] {
                if !conflict.get(key).is_some_and(Value::is_array) {
                    return Err(format!("`context.conflict.{key}` must be an array"));
                }
            }
            let alts = context
                .get("proposed_alternatives")
                .and_then(Value::as_array)
                .ok_or("`context.proposed_alternatives` is missing or not an array")?;
            if alts.is_empty() {
                return Err("`context.proposed_alternatives` is empty".to_string());
            }
            if alts.len() > MAX_ALTERNATIVES {
                return Err(format!(
                    "`context.proposed_alternatives` has more than {MAX_ALTERNATIVES} entries"
                ));
            }
            for (i, a) in alts.iter().enumerate() {
                let ok = a
                    .get("option")
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.trim().is_empty());
                if !ok {
                    return Err(format!(
                        "`context.proposed_alternatives[{i}].option` must be a non-empty string"
                    ));
                }
            }
            check_text("`escalation.recommend`", &escalation.recommend)?;
            check_text("`escalation.reason`", &escalation.reason)?;
        }
        Decision::Escalate { reason, summary } => {
            check_text("`reason`", reason)?;
            check_text("`summary`", summary)?;
        }
        Decision::Wait => {}
    }
    Ok(())
}
