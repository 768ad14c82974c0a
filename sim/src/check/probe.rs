//! What the thread checks read of a packet in a thread's history: a few top-level fields,
//! read without building the rest (the context, most of a packet, is skipped, not parsed
//! into values). A text that is not a JSON object reads as a packet without any of them,
//! as a `serde_json::Value` would.

use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The fields of a packet the thread checks read.
#[derive(Debug, Default)]
pub(super) struct Probe {
    /// `type`.
    ty: Option<Value>,
    /// `escalation`.
    escalation: Option<Value>,
    /// `context` is an object with a `proposed_alternatives` key.
    pub(super) alternatives: bool,
    /// `flexibility_request`.
    pub(super) flexibility_request: Option<Value>,
    /// `needs`.
    pub(super) needs: Option<Value>,
    /// `additional_context_needed`.
    pub(super) additional_context_needed: Option<Value>,
}

impl Probe {
    /// The fields of the packet `json`; none if it is not a JSON object.
    pub(super) fn of(json: &str) -> Probe {
        serde_json::from_str(json).unwrap_or_default()
    }

    /// `type`, if a string.
    pub(super) fn ty(&self) -> Option<&str> {
        self.ty.as_ref().and_then(Value::as_str)
    }

    /// Whether `escalation` is there and not null.
    pub(super) fn escalated(&self) -> bool {
        self.escalation.as_ref().is_some_and(|e| !e.is_null())
    }
}

/// The top-level keys the probe reads.
#[derive(serde::Deserialize)]
#[serde(field_identifier)]
enum Field {
    #[serde(rename = "type")]
    Type,
    #[serde(rename = "escalation")]
    Escalation,
    #[serde(rename = "context")]
    Context,
    #[serde(rename = "flexibility_request")]
    FlexibilityRequest,
    #[serde(rename = "needs")]
    Needs,
    #[serde(rename = "additional_context_needed")]
    AdditionalContextNeeded,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for Probe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ProbeVisitor)
    }
}

struct ProbeVisitor;

impl<'de> Visitor<'de> for ProbeVisitor {
    type Value = Probe;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a packet (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Probe, A::Error> {
        // A key given twice: the last value counts, as in a `serde_json::Value`.
        let mut p = Probe::default();
        while let Some(k) = m.next_key::<Field>()? {
            match k {
                Field::Type => p.ty = Some(m.next_value()?),
                Field::Escalation => p.escalation = Some(m.next_value()?),
                Field::Context => p.alternatives = m.next_value::<HasAlternatives>()?.0,
                Field::FlexibilityRequest => p.flexibility_request = Some(m.next_value()?),
                Field::Needs => p.needs = Some(m.next_value()?),
                Field::AdditionalContextNeeded => {
                    p.additional_context_needed = Some(m.next_value()?);
                }
                Field::Other => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(p)
    }
}

/// Whether a value is an object with a `proposed_alternatives` key (of any value).
struct HasAlternatives(bool);

/// The one key of a context the probe looks for.
#[derive(serde::Deserialize)]
#[serde(field_identifier)]
enum ContextField {
    #[serde(rename = "proposed_alternatives")]
    ProposedAlternatives,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for HasAlternatives {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(HasAlternativesVisitor)
    }
}

struct HasAlternativesVisitor;

impl<'de> Visitor<'de> for HasAlternativesVisitor {
    type Value = HasAlternatives;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<HasAlternatives, A::Error> {
        let mut found = false;
        while let Some(k) = m.next_key::<ContextField>()? {
            m.next_value::<IgnoredAny>()?;
            found |= matches!(k, ContextField::ProposedAlternatives);
        }
        Ok(HasAlternatives(found))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<HasAlternatives, A::Error> {
        while s.next_element::<IgnoredAny>()?.is_some() {}
        Ok(HasAlternatives(false))
    }

    fn visit_bool<E>(self, _: bool) -> Result<HasAlternatives, E> {
        Ok(HasAlternatives(false))
    }

    fn visit_i64<E>(self, _: i64) -> Result<HasAlternatives, E> {
        Ok(HasAlternatives(false))
    }

    fn visit_u64<E>(self, _: u64) -> Result<HasAlternatives, E> {
        Ok(HasAlternatives(false))
    }

    fn visit_f64<E>(self, _: f64) -> Result<HasAlternatives, E> {
        Ok(HasAlternatives(false))
    }

    fn visit_str<E>(self, _: &str) -> Result<HasAlternatives, E> {
        Ok(HasAlternatives(false))
    }

    fn visit_unit<E>(self) -> Result<HasAlternatives, E> {
        Ok(HasAlternatives(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe reads what the same checks would read of a `serde_json::Value`.
    #[test]
    fn reads_what_a_value_reads() {
        for text in [
            r#"{"type":"context","escalation":null,"context":{"proposed_alternatives":null}}"#,
            r#"{"type":"context","escalation":{"reason":"x"},"context":{"a":[1,{"b":2}]}}"#,
            r#"{"type":"context_request","needs":[{"field":"a"},{"x":1}],"additional_context_needed":[{"field":"b"}]}"#,
            r#"{"type":7,"context":"text","flexibility_request":{"field":"f"}}"#,
            r#"{"type":"x","type":"context","context":[1,2]}"#,
            r#"[1,2]"#,
            r#"not json"#,
        ] {
            let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
            let p = Probe::of(text);
            assert_eq!(p.ty(), v.get("type").and_then(Value::as_str), "{text}");
            assert_eq!(
                p.escalated(),
                v.get("escalation").is_some_and(|e| !e.is_null()),
                "{text}"
            );
            assert_eq!(
                p.alternatives,
                v.get("context")
                    .and_then(|c| c.get("proposed_alternatives"))
                    .is_some(),
                "{text}"
            );
            assert_eq!(p.needs.as_ref(), v.get("needs"), "{text}");
            assert_eq!(
                p.additional_context_needed.as_ref(),
                v.get("additional_context_needed"),
                "{text}"
            );
            assert_eq!(
                p.flexibility_request.as_ref(),
                v.get("flexibility_request"),
                "{text}"
            );
        }
    }
}
