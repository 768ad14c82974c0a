//! Temporal facts (the Agentic Protocol's §7): subject / predicate / value, valid from a
//! time until superseded, history kept.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{canonical, Actor, MemoryError};
use crate::Timestamp;

/// One fact, in the seed's §7 wire form.
///
/// Unknown members (its §12 `x-*` extensions, and anything a later version adds) are kept
/// in `extra` and written back on export.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    /// `fact_<32 hex>`, derived from the fact's content (see [`Fact::derive_id`]).
    pub fact_id: String,
    /// The project the fact belongs to (for relationship memory: the peer's address).
    pub project_id: String,
    /// The entity the fact is about.
    pub subject: String,
    /// The property (`cache.dietary`, `pattern.usually_shares`, …).
    pub predicate: String,
    /// The value, always a string (§7.1: numbers as strings).
    pub value: String,
    /// When the fact became true.
    #[serde(with = "rfc3339")]
    pub valid_from: Timestamp,
    /// When it stopped being true (superseded or invalidated); `None` while current.
    #[serde(with = "rfc3339_opt", default)]
    pub valid_to: Option<Timestamp>,
    /// The package the fact was asserted through, if any.
    #[serde(default)]
    pub source_package_id: Option<String>,
    /// 0.0–1.0 (default 1.0).
    #[serde(default = "one")]
    pub confidence: f64,
    /// Who asserted it.
    #[serde(default)]
    pub asserted_by: Option<Actor>,
    /// When the fact was recorded.
    #[serde(with = "rfc3339")]
    pub created_at: Timestamp,
    /// Free-form labels.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Members this version does not know, kept for the round trip.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

fn one() -> f64 {
    1.0
}

impl Fact {
    /// Whether the fact is current (`valid_to` unset).
    pub fn is_current(&self) -> bool {
        self.valid_to.is_none()
    }

    /// Whether the fact held at `t`: `valid_from ≤ t < valid_to` (unset: +∞).
    pub fn holds_at(&self, t: Timestamp) -> bool {
        self.valid_from <= t && self.valid_to.is_none_or(|end| t < end)
    }

    /// A deterministic `fact_<32 hex>`: the first 128 bits of the SHA-256 over the
    /// canonical JSON of (project, subject, predicate, value, valid_from, created_at,
    /// sequence). The sequence number tells apart two assertions of the same value at the
    /// same instant.
    pub fn derive_id(
        project_id: &str,
        subject: &str,
        predicate: &str,
        value: &str,
        valid_from: Timestamp,
        created_at: Timestamp,
        sequence: u64,
    ) -> String {
        let doc = serde_json::json!([
            project_id,
            subject,
            predicate,
            value,
            valid_from.as_millis(),
            created_at.as_millis(),
            sequence
        ]);
        let bytes = canonical::rfc8785(&doc).unwrap_or_default();
        let hex = canonical::sha256_hex(&bytes);
        let digits = hex.get(canonical::HASH_PREFIX.len()..canonical::HASH_PREFIX.len() + 32);
        format!("fact_{}", digits.unwrap_or_default())
    }

    /// Checks the §7.1/§7.2 constraints a parsed fact must meet.
    pub fn validate(&self) -> Result<(), MemoryError> {
        let bad = |reason: &str| MemoryError::InvalidFact {
            fact_id: self.fact_id.clone(),
            reason: reason.to_string(),
        };
        if self.fact_id.is_empty() {
            return Err(bad("empty fact_id"));
        }
        if self.project_id.is_empty() || self.subject.is_empty() || self.predicate.is_empty() {
            return Err(bad("empty project_id, subject or predicate"));
        }
        if !(0.0..=1.0).contains(&self.confidence) {
            return Err(bad("confidence outside 0.0–1.0"));
        }
        if let Some(end) = self.valid_to {
            if end < self.valid_from {
                return Err(bad("valid_to before valid_from"));
            }
        }
        Ok(())
    }
}

/// RFC 3339 in UTC: seconds precision when the milliseconds are zero, else milliseconds.
pub(crate) fn format_time(t: Timestamp) -> String {
    let ms = t.as_millis() % 1000;
    if ms == 0 {
        return t.to_rfc3339();
    }
    let secs = t.to_rfc3339();
    // `…:SSZ` → `…:SS.mmmZ`
    match secs.strip_suffix('Z') {
        Some(head) => format!("{head}.{ms:03}Z"),
        None => secs,
    }
}

pub(crate) mod rfc3339 {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_time(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {s:?}")))
    }
}

pub(crate) mod rfc3339_opt {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&format_time(*t)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(s) => Timestamp::parse_rfc3339(&s)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {s:?}"))),
        }
    }
}
