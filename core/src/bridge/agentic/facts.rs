//! `assert_fact` and `invalidate_fact` (§8.6, §8.7) and the temporal queries (§7.3):
//! a fact from a request, the supersession of the current fact of its series, and which
//! facts hold at an instant.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Access, AgenticError};
use crate::memory::{Actor, Fact};
use crate::Timestamp;

/// The members an `assert_fact` body may set; any other member is kept (`x-*` and the
/// unknown round-trip, §12.1).
const KNOWN: [&str; 7] = [
    "subject",
    "predicate",
    "value",
    "source_package_id",
    "confidence",
    "tags",
    "valid_from",
];

/// The fact an `assert_fact` request asks for, in `project_id`, at `now`, the
/// `sequence`-th of its series (for its derived id). `asserted_by` is the token's actor,
/// else what the body names; `valid_from` defaults to `now`, or to `floor` (the start of
/// the series' current fact) when the clock is behind it — so that concurrent assertions
/// without a `valid_from` always supersede in the order they are applied.
pub fn parse_assertion(
    project_id: &str,
    body: &Value,
    access: &Access,
    now: Timestamp,
    floor: Option<Timestamp>,
    sequence: u64,
) -> Result<Fact, AgenticError> {
    let Value::Object(map) = body else {
        return Err(AgenticError::InvalidSchema(
            "a fact is a JSON object".into(),
        ));
    };
    let bad = |m: &str| AgenticError::InvalidSchema(m.to_string());
    let string = |name: &str| -> Result<String, AgenticError> {
        match map.get(name) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Value::String(_)) => Err(bad(&format!("`{name}` is empty"))),
            Some(_) => Err(bad(&format!(
                "`{name}` is not a string (§7.1: values are strings)"
            ))),
            None => Err(bad(&format!("`{name}` missing"))),
        }
    };
    let subject = string("subject")?;
    let predicate = string("predicate")?;
    let value = match map.get("value") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(bad("`value` is not a string (§7.1: values are strings)")),
    };
    let valid_from = match map.get("valid_from") {
        None | Some(Value::Null) => floor.filter(|f| *f > now).unwrap_or(now),
        Some(Value::String(s)) => {
            Timestamp::parse_rfc3339(s).ok_or_else(|| bad("`valid_from` is not RFC 3339 UTC"))?
        }
        Some(_) => return Err(bad("`valid_from` is not a string")),
    };
    let source_package_id = match map.get("source_package_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(bad("`source_package_id` is not a string")),
    };
    let confidence = match map.get("confidence") {
        None | Some(Value::Null) => 1.0,
        Some(v) => v
            .as_f64()
            .filter(|c| (0.0..=1.0).contains(c))
            .ok_or_else(|| bad("`confidence` is not a number in 0.0–1.0"))?,
    };
    let tags = match map.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => a
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        Some(_) => return Err(bad("`tags` is not a list of strings")),
    };
    let asserted_by = match access.actor() {
        Some((id, t)) => Some(Actor {
            id: id.to_string(),
            actor_type: t.to_string(),
            session_id: None,
        }),
        None => match map.get("asserted_by") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                serde_json::from_value::<Actor>(v.clone())
                    .ok()
                    .filter(|a| ["human", "agent", "script"].contains(&a.actor_type.as_str()))
                    .ok_or_else(|| bad("`asserted_by` needs `id` and `type`"))?,
            ),
        },
    };
    let extra: BTreeMap<String, Value> = map
        .iter()
        .filter(|(k, _)| !KNOWN.contains(&k.as_str()) && k.as_str() != "asserted_by")
        .filter(|(k, _)| !FACT_MEMBERS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let fact = Fact {
        fact_id: Fact::derive_id(
            project_id, &subject, &predicate, &value, valid_from, now, sequence,
        ),
        project_id: project_id.to_string(),
        subject,
        predicate,
        value,
        valid_from,
        valid_to: None,
        source_package_id,
        confidence,
        asserted_by,
        created_at: now,
        tags,
        extra,
    };
    fact.validate()
        .map_err(|e| AgenticError::InvalidSchema(e.to_string()))?;
    Ok(fact)
}

/// Members the service sets itself and a request cannot.
const FACT_MEMBERS: [&str; 4] = ["fact_id", "project_id", "valid_to", "created_at"];

/// §7.3: the `valid_to` the current fact of the series gets when `new` supersedes it (the
/// new fact's `valid_from`), or `None` when the series has no current fact. Refused
/// (`409 fact_out_of_order`) when `new` would start before the current one did.
pub fn supersede(current: Option<&Fact>, new: &Fact) -> Result<Option<Timestamp>, AgenticError> {
    match current {
        None => Ok(None),
        Some(c) if new.valid_from < c.valid_from => Err(AgenticError::FactOutOfOrder(format!(
            "{}/{}: the current fact holds from {}, after {}",
            new.subject,
            new.predicate,
            super::rfc3339(c.valid_from),
            super::rfc3339(new.valid_from)
        ))),
        Some(_) => Ok(Some(new.valid_from)),
    }
}

/// §8.7: the facts of `current` an `invalidate_fact` ends — all, or those whose value is
/// `object` when given.
pub fn to_invalidate<'a>(current: &'a [Fact], object: Option<&str>) -> Vec<&'a Fact> {
    current
        .iter()
        .filter(|f| f.is_current() && object.is_none_or(|o| f.value == o))
        .collect()
}

/// The facts of `all` that hold at `at` (§7.3: `valid_from ≤ at < valid_to`), or the
/// current ones when `at` is `None`.
pub fn holding(all: Vec<Fact>, at: Option<Timestamp>) -> Vec<Fact> {
    all.into_iter()
        .filter(|f| match at {
            None => f.is_current(),
            Some(t) => f.holds_at(t),
        })
        .collect()
}
