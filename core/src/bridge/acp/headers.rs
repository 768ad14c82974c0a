//! The six mandatory identity headers of every ACP message (seed 004 §2.2):
//! [`Headers::parse`] checks each in a fixed order and names the first one missing or
//! malformed; [`Headers::to_json`] writes them back.

use serde_json::{json, Map, Value};

use crate::bridge::acp::error::AcpError;
use crate::time::Timestamp;

/// Longest `agent-id`, in bytes (it is a NATS subject token and an address's username).
pub const MAX_AGENT_ID: usize = 64;
/// Longest `principal-id`, in bytes.
pub const MAX_PRINCIPAL_ID: usize = 128;
/// Longest `timestamp` or `trust-layer-version`, in bytes.
pub const MAX_SHORT: usize = 64;
/// Most entries of `skill-layers-loaded`.
pub const MAX_LAYERS: usize = 16;
/// Highest skill layer index accepted.
pub const MAX_LAYER: u8 = 63;
/// The trust-layer version this implementation speaks (its major must match).
pub const TRUST_LAYER_VERSION: &str = "1.0.0";

/// One of the four ACP message types (seed 004 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MessageType {
    /// Asks for an action or information; must be answered.
    Request,
    /// Answers a request (or a handoff), referencing its id.
    Response,
    /// One way; has no id.
    Notification,
    /// Transfers responsibility for a task; must be answered.
    Handoff,
}

impl MessageType {
    /// Its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageType::Request => "request",
            MessageType::Response => "response",
            MessageType::Notification => "notification",
            MessageType::Handoff => "handoff",
        }
    }

    /// Reads a wire name.
    pub fn parse(s: &str) -> Option<MessageType> {
        [
            MessageType::Request,
            MessageType::Response,
            MessageType::Notification,
            MessageType::Handoff,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }
}

/// The identity headers of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headers {
    /// The sending agent.
    pub agent_id: String,
    /// The human principal it serves.
    pub principal_id: String,
    /// When the message was made, as written.
    pub timestamp: String,
    /// The same, read.
    pub time: Timestamp,
    /// The message type.
    pub message_type: MessageType,
    /// The trust protocol version, as written (`1.0.0`).
    pub trust_layer_version: String,
    /// The skill layers the sender declares loaded, ascending, distinct.
    pub skill_layers_loaded: Vec<u8>,
}

/// Whether `s` is a valid `agent-id`: 1–64 characters from `a-z`, `0-9`, `_`, `-`,
/// starting with a letter or digit (a NATS subject token, and an a2acp username).
pub fn valid_agent_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_AGENT_ID
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Whether `s` is a valid `principal-id`: 1–128 bytes, no control characters.
pub fn valid_principal_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_PRINCIPAL_ID && !s.chars().any(char::is_control)
}

/// Reads `MAJOR.MINOR.PATCH` (decimal, no leading zeros, no pre-release or build).
pub fn parse_semver(s: &str) -> Option<(u64, u64, u64)> {
    let mut parts = s.split('.');
    let mut next = || -> Option<u64> {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 9 || (p.len() > 1 && p.starts_with('0')) {
            return None;
        }
        if !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse().ok()
    };
    let v = (next()?, next()?, next()?);
    parts.next().is_none().then_some(v)
}

fn malformed(header: &'static str, why: impl Into<String>) -> AcpError {
    AcpError::HeaderMalformed {
        header,
        why: why.into(),
    }
}

fn string<'a>(h: &'a Map<String, Value>, name: &'static str) -> Result<&'a str, AcpError> {
    match h.get(name) {
        None | Some(Value::Null) => Err(AcpError::HeaderMissing(name)),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(malformed(name, "not a string")),
    }
}

impl Headers {
    /// Checks the `headers` member of a message: each of the six in the order of
    /// [`crate::bridge::acp::error::HEADERS`], the first missing or malformed one
    /// answers. A `null` header counts as missing. Other members are ignored (they are
    /// signed all the same).
    pub fn parse(v: Option<&Value>) -> Result<Headers, AcpError> {
        let h = match v {
            Some(Value::Object(h)) => h,
            None | Some(Value::Null) => return Err(AcpError::HeaderMissing("agent-id")),
            Some(_) => {
                return Err(AcpError::InvalidRequest(
                    "`headers` is not an object".into(),
                ))
            }
        };
        let agent_id = string(h, "agent-id")?;
        if !valid_agent_id(agent_id) {
            return Err(malformed(
                "agent-id",
                "1-64 characters from a-z, 0-9, '_', '-', starting with a letter or digit",
            ));
        }
        let principal_id = string(h, "principal-id")?;
        if !valid_principal_id(principal_id) {
            return Err(malformed(
                "principal-id",
                "1-128 bytes without control characters",
            ));
        }
        let timestamp = string(h, "timestamp")?;
        let time = (timestamp.len() <= MAX_SHORT)
            .then(|| Timestamp::parse_rfc3339(timestamp))
            .flatten()
            .ok_or_else(|| malformed("timestamp", "not an ISO 8601 (RFC 3339) date-time"))?;
        let message_type = string(h, "message-type")?;
        let message_type = MessageType::parse(message_type).ok_or_else(|| {
            malformed(
                "message-type",
                "not one of request, response, notification, handoff",
            )
        })?;
        let tlv = string(h, "trust-layer-version")?;
        let major = (tlv.len() <= MAX_SHORT)
            .then(|| parse_semver(tlv))
            .flatten()
            .ok_or_else(|| malformed("trust-layer-version", "not MAJOR.MINOR.PATCH"))?
            .0;
        if Some(major) != parse_semver(TRUST_LAYER_VERSION).map(|v| v.0) {
            return Err(malformed(
                "trust-layer-version",
                format!("major version {major} is not supported (this agent speaks {TRUST_LAYER_VERSION})"),
            ));
        }
        let layers = match h.get("skill-layers-loaded") {
            None | Some(Value::Null) => return Err(AcpError::HeaderMissing("skill-layers-loaded")),
            Some(Value::Array(a)) => a,
            Some(_) => return Err(malformed("skill-layers-loaded", "not an array")),
        };
        if layers.len() > MAX_LAYERS {
            return Err(malformed(
                "skill-layers-loaded",
                format!("more than {MAX_LAYERS} layers"),
            ));
        }
        let mut skill_layers_loaded = Vec::with_capacity(layers.len());
        for l in layers {
            let n = l
                .as_u64()
                .filter(|n| *n <= u64::from(MAX_LAYER))
                .ok_or_else(|| {
                    malformed(
                        "skill-layers-loaded",
                        format!("not an array of integers 0-{MAX_LAYER}"),
                    )
                })?;
            skill_layers_loaded.push(n as u8);
        }
        skill_layers_loaded.sort_unstable();
        let declared = skill_layers_loaded.len();
        skill_layers_loaded.dedup();
        if skill_layers_loaded.len() != declared {
            return Err(malformed("skill-layers-loaded", "a layer appears twice"));
        }
        Ok(Headers {
            agent_id: agent_id.to_string(),
            principal_id: principal_id.to_string(),
            timestamp: timestamp.to_string(),
            time,
            message_type,
            trust_layer_version: tlv.to_string(),
            skill_layers_loaded,
        })
    }

    /// The `headers` object, in the seed's member order.
    pub fn to_json(&self) -> Value {
        json!({
            "agent-id": self.agent_id,
            "principal-id": self.principal_id,
            "timestamp": self.timestamp,
            "message-type": self.message_type.as_str(),
            "trust-layer-version": self.trust_layer_version,
            "skill-layers-loaded": self.skill_layers_loaded,
        })
    }
}
