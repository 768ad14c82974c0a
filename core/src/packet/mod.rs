//! The A2ACP wire format (spec §4, §6–§10, §13, §15): context packets and their bodies.
//!
//! A packet is one JSON object. Its header (`protocol`, `packet_id`, `thread_id`, `from`,
//! `to`, `timestamp`, `type`) is common to every type; the rest depends on `type`.
//! [`Packet::parse`] refuses input larger than [`MAX_CONTEXT_SIZE_BYTES`] before looking
//! at it, names the offending field in every error, ignores unknown protocol-level fields,
//! preserves unknown fields inside `context` byte for byte in meaning and order, and
//! handles an unknown `type` as `context` (§15.3). [`Packet::to_bytes`] validates before
//! serialising, so an invalid packet is never sent.

mod group;
mod retraction;
mod types;

pub use group::*;
pub use retraction::*;
pub use types::*;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::address::Address;

/// Largest packet accepted or sent, in bytes (§15.1 `max_context_size_bytes` default).
pub const MAX_CONTEXT_SIZE_BYTES: usize = 65_536;
/// Most needs one packet may carry (§6.4).
pub const MAX_NEEDS_PER_PACKET: usize = 5;
/// Longest packet or thread id accepted.
pub const MAX_ID_LEN: usize = 128;
/// Protocol versions this implementation speaks, lowest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1", "0.2"];
/// Features of this implementation (§15.1).
pub const FEATURES: &[&str] = &[
    "context_negotiation",
    "resolution_with_alternatives",
    "thread_forking",
    "intent_updates",
];
/// Features available in protocol version 0.1 (SPEC-NOTES §15.2).
pub const FEATURES_V0_1: &[&str] = &["context_negotiation"];
/// The only envelope construction (§16).
pub const ENCRYPTION: &str = "x25519-xchacha20-poly1305";

/// Why bytes are not a valid packet, or a packet may not be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Larger than the size limit; refused before parsing.
    #[error("packet of {size} bytes exceeds the {limit}-byte limit")]
    TooLarge {
        /// Size of the input.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Not a JSON object.
    #[error("not a JSON object: {0}")]
    NotJson(String),
    /// A required field is absent.
    #[error("missing required field `{0}`")]
    Missing(String),
    /// A field is present but invalid.
    #[error("invalid field `{field}`: {reason}")]
    Invalid {
        /// Path of the field, e.g. `needs[2].priority`.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> WireError {
    WireError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

/// A parsed, valid packet.
#[derive(Debug, Clone, PartialEq)]
pub struct Packet {
    /// `a2acp/<version>`.
    pub protocol: String,
    /// Unique per sender.
    pub packet_id: String,
    /// The thread it belongs to.
    pub thread_id: String,
    /// Sender.
    pub from: Address,
    /// Recipient.
    pub to: Address,
    /// RFC 3339 send time, as the sender wrote it.
    pub timestamp: String,
    /// Capability handshake, in the first packet of each side in a thread (§15.1).
    pub capabilities: Option<Capabilities>,
    /// Canonical-format hints, in each agent's first packet of a thread (§5.3).
    pub format_hints: Option<Map<String, Value>>,
    /// The type-specific part.
    pub body: Body,
}

/// The type-specific part of a packet.
#[allow(clippy::large_enum_variant)] // packets are built once and moved rarely
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// `context` — context delivery (§4), also every unknown type (§15.3).
    Context(ContextBody),
    /// `context_request` (§6.1).
    ContextRequest(ContextRequestBody),
    /// `context_response` (§7.5).
    ContextResponse(ContextResponseBody),
    /// `resolution` (§8.1).
    Resolution(ResolutionBody),
    /// `resolution_response` (§8.2).
    ResolutionResponse(ResolutionResponseBody),
    /// `intent_update` (§6.5).
    IntentUpdate(IntentUpdateBody),
    /// `thread_fork` (§6.5).
    ThreadFork(ThreadForkBody),
    /// `coordinator_transfer` (§10.3).
    CoordinatorTransfer(CoordinatorTransferBody),
    /// `coordinator_transfer_response` — accept or decline of a transfer (§10.3).
    CoordinatorTransferResponse(CoordinatorTransferResponseBody),
    /// `processing_error` (§13.3).
    ProcessingError(ProcessingErrorBody),
    /// `thread_state` — the summary exchanged after a reconnect to find gaps (§13.1).
    ThreadState(ThreadStateBody),
    /// `execution_report` — how executing a confirmed resolution went (SPEC-NOTES §9).
    ExecutionReport(ExecutionReport),
    /// `retraction` — values the sender takes back (SPEC-NOTES "Retraction").
    Retraction(RetractionBody),
    /// `retraction_ack` — the signed answer that they were deleted.
    RetractionAck(RetractionAckBody),
}

/// Body of `context` (§4, §6.3, §10.2).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ContextBody {
    /// What the thread is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<Intent>,
    /// Freeform context; unknown fields preserved.
    #[serde(default)]
    pub context: Context,
    /// Fields wanted from the recipient.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<Need>,
    /// What was shared and withheld.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<PermissionsDeclaration>,
    /// Recommendation to involve the users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Escalation>,
    /// Multi-party aggregation (§10.2), carried opaquely.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregated_context: Option<Value>,
    /// Multi-party recommendation (§10.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator_recommendation: Option<String>,
    /// Reason for the recommendation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The group this leg belongs to (§10; group threads only, SPEC-NOTES "Group threads").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupHeader>,
    /// A targeted flexibility request to the binding constraint's owner (§10.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flexibility_request: Option<FlexibilityRequest>,
    /// The `type` as received when it was not one this implementation knows (§15.3);
    /// written back unchanged.
    #[serde(skip)]
    pub original_type: Option<String>,
}

/// Body of `context_request` (§6.1).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ContextRequestBody {
    /// Fields wanted (at most 5).
    pub needs: Vec<Need>,
    /// Context given along with the request.
    #[serde(default)]
    pub context_provided: Context,
    /// What was shared and withheld.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<PermissionsDeclaration>,
}

/// Body of `context_response` (§7.5).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ContextResponseBody {
    /// Values given.
    #[serde(default)]
    pub context_provided: Context,
    /// Fields not given.
    #[serde(default)]
    pub context_unavailable: Vec<Unavailable>,
    /// What was shared and withheld.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<PermissionsDeclaration>,
}

/// Body of `resolution` (§8.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolutionBody {
    /// The proposed outcome.
    pub proposal: Proposal,
    /// Who must confirm.
    pub requires_confirmation_from: Vec<Address>,
    /// What happens once confirmed.
    #[serde(default)]
    pub actions_on_confirm: Vec<ActionSpec>,
    /// ISO 8601 duration to wait for confirmations (default `PT24H`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation_timeout: Option<String>,
    /// `remind_then_expire` (default) or `expire`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<String>,
    /// Minimum confirmations (quorum mode, §8.3); absent means all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<u32>,
}

/// Body of `resolution_response` (§8.2). `actual_reason` is always written as `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResolutionResponseBody {
    /// The resolution packet answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution_id: Option<String>,
    /// The answer.
    pub status: ResolutionStatus,
    /// Coarse reason: `scheduling_conflict`, `user_declined`, `different_time`, `different_place`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_class: Option<String>,
    /// A polite message for the other side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_to_other_agent: Option<String>,
    /// With `counter_requested` and `reason_class: alternative_chosen`: the index, from
    /// 0, of the alternative chosen in the answered resolution's `proposal.alternatives`
    /// (an a2acp extension; SPEC-NOTES "Resolution and confirmation").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alternative: Option<u32>,
    /// With `confirmed`: the sender's Ed25519 signature over its confirmation of the
    /// answered proposal (an a2acp extension; SPEC-NOTES "Receipts of an agreement").
    /// Absent from an implementation that does not sign: accepted, marked unsigned.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::encoding::b64_opt_array"
    )]
    pub signature: Option<[u8; 64]>,
    /// With `confirmed`, from a group's coordinator on a leg: the other participants'
    /// signed confirmations of the group's proposal it holds (at most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confirmations: Vec<crate::receipt::agreement::Confirmation>,
}

/// Body of `intent_update` (§6.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntentUpdateBody {
    /// The intent before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_intent: Option<Intent>,
    /// The intent now.
    pub updated_intent: Intent,
    /// Why.
    #[serde(default)]
    pub reason: String,
    /// New needs that come with the change (at most 5).
    #[serde(default)]
    pub additional_context_needed: Vec<Need>,
}

/// Body of `thread_fork` (§6.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadForkBody {
    /// The thread being split.
    pub parent_thread_id: String,
    /// The new threads.
    pub new_threads: Vec<ForkedThread>,
    /// Context every child inherits.
    #[serde(default)]
    pub shared_context: Context,
}

/// Body of `coordinator_transfer` (§10.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoordinatorTransferBody {
    /// Current coordinator.
    pub from_coordinator: Address,
    /// Proposed coordinator.
    pub to_coordinator: Address,
    /// Why.
    #[serde(default)]
    pub reason: String,
    /// Whether the recipient must accept.
    #[serde(default = "yes")]
    pub requires_acceptance: bool,
    /// In a group thread: the state the new coordinator goes on with (§10.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<Handover>,
}

fn yes() -> bool {
    true
}

/// Accept or decline of a coordinator transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferDecision {
    /// The role is taken.
    Accepted,
    /// The role is refused.
    Declined,
}

/// Body of `coordinator_transfer_response`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoordinatorTransferResponseBody {
    /// The answer.
    pub decision: TransferDecision,
    /// Why, optionally.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Body of `processing_error` (§13.3): the sender could not process; the thread pauses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessingErrorBody {
    /// Machine-readable code, e.g. `llm_unavailable`, `malformed_output`.
    pub error: String,
    /// Human-readable explanation.
    #[serde(default)]
    pub message: String,
    /// The packet that could not be processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regarding: Option<String>,
}

/// Body of `thread_state` (§13.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadStateBody {
    /// The sender's thread state, e.g. `NEGOTIATING`.
    pub state: String,
    /// Ids of every packet the sender sent in the thread, in order.
    pub packets_sent: Vec<String>,
    /// Ids of every packet the sender received in the thread.
    pub packets_received: Vec<String>,
}

impl Body {
    /// The wire `type`.
    pub fn type_name(&self) -> &str {
        match self {
            Body::Context(b) => b.original_type.as_deref().unwrap_or("context"),
            Body::ContextRequest(_) => "context_request",
            Body::ContextResponse(_) => "context_response",
            Body::Resolution(_) => "resolution",
            Body::ResolutionResponse(_) => "resolution_response",
            Body::IntentUpdate(_) => "intent_update",
            Body::ThreadFork(_) => "thread_fork",
            Body::CoordinatorTransfer(_) => "coordinator_transfer",
            Body::CoordinatorTransferResponse(_) => "coordinator_transfer_response",
            Body::ProcessingError(_) => "processing_error",
            Body::ThreadState(_) => "thread_state",
            Body::ExecutionReport(_) => "execution_report",
            Body::Retraction(_) => "retraction",
            Body::RetractionAck(_) => "retraction_ack",
        }
    }

    fn to_value(&self) -> Result<Value, serde_json::Error> {
        match self {
            Body::Context(b) => serde_json::to_value(b),
            Body::ContextRequest(b) => serde_json::to_value(b),
            Body::ContextResponse(b) => serde_json::to_value(b),
            Body::Resolution(b) => serde_json::to_value(b),
            Body::ResolutionResponse(b) => {
                let mut v = serde_json::to_value(b)?;
                if let Value::Object(m) = &mut v {
                    m.insert("actual_reason".into(), Value::Null);
                }
                Ok(v)
            }
            Body::IntentUpdate(b) => serde_json::to_value(b),
            Body::ThreadFork(b) => serde_json::to_value(b),
            Body::CoordinatorTransfer(b) => serde_json::to_value(b),
            Body::CoordinatorTransferResponse(b) => serde_json::to_value(b),
            Body::ProcessingError(b) => serde_json::to_value(b),
            Body::ThreadState(b) => serde_json::to_value(b),
            Body::ExecutionReport(b) => serde_json::to_value(b),
            Body::Retraction(b) => serde_json::to_value(b),
            Body::RetractionAck(b) => serde_json::to_value(b),
        }
    }

    /// The needs this body asks for, if its type carries any.
    pub fn needs(&self) -> &[Need] {
        match self {
            Body::Context(b) => &b.needs,
            Body::ContextRequest(b) => &b.needs,
            Body::IntentUpdate(b) => &b.additional_context_needed,
            _ => &[],
        }
    }

    /// The context values this body gives, if its type carries any.
    pub fn provided(&self) -> Option<&Context> {
        match self {
            Body::Context(b) => Some(&b.context),
            Body::ContextRequest(b) => Some(&b.context_provided),
            Body::ContextResponse(b) => Some(&b.context_provided),
            _ => None,
        }
    }

    /// The sharing declaration this body carries, if its type has one.
    pub fn permissions(&self) -> Option<&PermissionsDeclaration> {
        match self {
            Body::Context(b) => b.permissions.as_ref(),
            Body::ContextRequest(b) => b.permissions.as_ref(),
            Body::ContextResponse(b) => b.permissions.as_ref(),
            _ => None,
        }
    }
}

/// Checks the usage rules of a sharing declaration (SPEC-NOTES "Usage rules").
fn valid_usage(d: &PermissionsDeclaration) -> Result<(), WireError> {
    if d.usage.len() > MAX_USAGE_RULES {
        return Err(invalid(
            "permissions.usage",
            format!("at most {MAX_USAGE_RULES} rules, got {}", d.usage.len()),
        ));
    }
    for (field, rule) in &d.usage {
        if field.trim().is_empty() {
            return Err(invalid("permissions.usage", "a rule names no field"));
        }
        if rule
            .purpose
            .as_ref()
            .is_some_and(|p| p.trim().is_empty() || p.len() > MAX_PURPOSE_BYTES)
        {
            return Err(invalid(
                format!("permissions.usage.{field}.purpose"),
                format!("must be 1 to {MAX_PURPOSE_BYTES} bytes"),
            ));
        }
        if rule.expires_at.is_some() && rule.expiry().is_none() {
            return Err(invalid(
                format!("permissions.usage.{field}.expires_at"),
                "must be an RFC 3339 time",
            ));
        }
    }
    Ok(())
}

const HEADER_FIELDS: &[&str] = &[
    "protocol",
    "packet_id",
    "thread_id",
    "from",
    "to",
    "timestamp",
    "type",
];

fn body_from<T: serde::de::DeserializeOwned>(map: &Map<String, Value>) -> Result<T, WireError> {
    deserialize_at("", Value::Object(map.clone()))
}

/// Reads `v` as a `T`, naming the offending field in the error: a missing one as
/// [`WireError::Missing`], any other as [`WireError::Invalid`]; `prefix` (e.g.
/// `aggregated_context`) goes before the field's path.
fn deserialize_at<T: serde::de::DeserializeOwned>(prefix: &str, v: Value) -> Result<T, WireError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let inner = e.into_inner().to_string();
        let join = |tail: &str| {
            [prefix, path.as_str(), tail]
                .into_iter()
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join(".")
        };
        if let Some(rest) = inner.strip_prefix("missing field `") {
            WireError::Missing(join(rest.split('`').next().unwrap_or("")))
        } else {
            let at = join("");
            invalid(if at.is_empty() { ".".into() } else { at }, inner)
        }
    })
}

fn header_str(map: &Map<String, Value>, field: &str) -> Result<String, WireError> {
    match map.get(field) {
        None | Some(Value::Null) => Err(WireError::Missing(field.into())),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(invalid(field, "expected a string")),
    }
}

fn valid_id(field: &str, id: &str) -> Result<(), WireError> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(invalid(field, format!("must be 1-{MAX_ID_LEN} characters")));
    }
    if !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(field, "must be printable ASCII without spaces"));
    }
    Ok(())
}

impl Packet {
    /// The version part of `protocol` (`0.2` for `a2acp/0.2`).
    pub fn version(&self) -> &str {
        self.protocol
            .strip_prefix("a2acp/")
            .unwrap_or(&self.protocol)
    }

    /// Parses and validates a packet. Input over [`MAX_CONTEXT_SIZE_BYTES`] is refused
    /// before it is read.
    pub fn parse(bytes: &[u8]) -> Result<Packet, WireError> {
        Self::parse_with_limit(bytes, MAX_CONTEXT_SIZE_BYTES)
    }

    /// [`Packet::parse`] with another size limit.
    pub fn parse_with_limit(bytes: &[u8], limit: usize) -> Result<Packet, WireError> {
        if bytes.len() > limit {
            return Err(WireError::TooLarge {
                size: bytes.len(),
                limit,
            });
        }
        let map: Map<String, Value> =
            serde_json::from_slice(bytes).map_err(|e| WireError::NotJson(e.to_string()))?;
        Self::from_map(map)
    }

    /// Builds a packet from a JSON object (the parsed form of [`Packet::parse`]).
    pub fn from_map(map: Map<String, Value>) -> Result<Packet, WireError> {
        let protocol = header_str(&map, "protocol")?;
        if !protocol.starts_with("a2acp/") || protocol.len() <= 6 {
            return Err(invalid("protocol", "must be `a2acp/<version>`"));
        }
        let packet_id = header_str(&map, "packet_id")?;
        valid_id("packet_id", &packet_id)?;
        let thread_id = header_str(&map, "thread_id")?;
        valid_id("thread_id", &thread_id)?;
        let from = Address::parse(&header_str(&map, "from")?)
            .map_err(|e| invalid("from", e.to_string()))?;
        let to =
            Address::parse(&header_str(&map, "to")?).map_err(|e| invalid("to", e.to_string()))?;
        let timestamp = header_str(&map, "timestamp")?;
        if crate::time::Timestamp::parse_rfc3339(&timestamp).is_none() {
            return Err(invalid("timestamp", "must be an RFC 3339 date-time"));
        }
        let ty = header_str(&map, "type")?;
        let capabilities = match map.get("capabilities") {
            None | Some(Value::Null) => None,
            Some(v) => Some(serde_path_to_error::deserialize(v.clone()).map_err(|e| {
                invalid(
                    format!("capabilities.{}", e.path()),
                    e.into_inner().to_string(),
                )
            })?),
        };
        let format_hints = match map.get("_format_hints") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m.clone()),
            Some(_) => return Err(invalid("_format_hints", "expected an object")),
        };
        let body = match ty.as_str() {
            "context" => Body::Context(body_from(&map)?),
            "context_request" => Body::ContextRequest(body_from(&map)?),
            "context_response" => {
                if !map.contains_key("context_provided") && !map.contains_key("context_unavailable")
                {
                    return Err(WireError::Missing("context_provided".into()));
                }
                let mut b: ContextResponseBody = body_from(&map)?;
                // §7.5: a hint is never given; one received is discarded, not acted on.
                for u in &mut b.context_unavailable {
                    u.hint = None;
                }
                Body::ContextResponse(b)
            }
            "resolution" => Body::Resolution(body_from(&map)?),
            "resolution_response" => Body::ResolutionResponse(body_from(&map)?),
            "intent_update" => Body::IntentUpdate(body_from(&map)?),
            "thread_fork" => Body::ThreadFork(body_from(&map)?),
            "coordinator_transfer" => Body::CoordinatorTransfer(body_from(&map)?),
            "coordinator_transfer_response" => Body::CoordinatorTransferResponse(body_from(&map)?),
            "processing_error" => Body::ProcessingError(body_from(&map)?),
            "thread_state" => Body::ThreadState(body_from(&map)?),
            "retraction" => Body::Retraction(body_from(&map)?),
            "retraction_ack" => Body::RetractionAck(body_from(&map)?),
            "execution_report" => Body::ExecutionReport(body_from(&map)?),
            other => {
                if other.is_empty() {
                    return Err(invalid("type", "must not be empty"));
                }
                let mut b: ContextBody = body_from(&map)?;
                b.original_type = Some(other.to_string());
                Body::Context(b)
            }
        };
        let p = Packet {
            protocol,
            packet_id,
            thread_id,
            from,
            to,
            timestamp,
            capabilities,
            format_hints,
            body,
        };
        p.validate()?;
        Ok(p)
    }

    /// Checks the rules a valid packet obeys beyond its shape: at most 5 needs, non-empty
    /// need fields, ids, proposal summary, confirmers, fork children, and `hint` null.
    pub fn validate(&self) -> Result<(), WireError> {
        valid_id("packet_id", &self.packet_id)?;
        valid_id("thread_id", &self.thread_id)?;
        if let Some(d) = self.body.permissions() {
            valid_usage(d)?;
        }
        let needs_field = match &self.body {
            Body::IntentUpdate(_) => "additional_context_needed",
            _ => "needs",
        };
        let needs = self.body.needs();
        if needs.len() > MAX_NEEDS_PER_PACKET {
            return Err(invalid(
                needs_field,
                format!(
                    "at most {MAX_NEEDS_PER_PACKET} needs per packet, got {}",
                    needs.len()
                ),
            ));
        }
        for (i, n) in needs.iter().enumerate() {
            if n.field.trim().is_empty() {
                return Err(invalid(
                    format!("{needs_field}[{i}].field"),
                    "must not be empty",
                ));
            }
        }
        match &self.body {
            Body::ContextRequest(b) if b.needs.is_empty() => {
                return Err(invalid(
                    "needs",
                    "a context_request asks for at least one field",
                ));
            }
            Body::ContextResponse(b) => {
                for (i, u) in b.context_unavailable.iter().enumerate() {
                    if u.hint.as_ref().is_some_and(|h| !h.is_null()) {
                        return Err(invalid(
                            format!("context_unavailable[{i}].hint"),
                            "must be null",
                        ));
                    }
                }
            }
            Body::Resolution(b) => {
                if b.proposal.summary.trim().is_empty() {
                    return Err(invalid("proposal.summary", "must not be empty"));
                }
                if b.requires_confirmation_from.is_empty() {
                    return Err(invalid(
                        "requires_confirmation_from",
                        "must name at least one agent",
                    ));
                }
                if let Some(t) = &b.confirmation_timeout {
                    if crate::time::parse_iso8601_duration(t).is_none() {
                        return Err(invalid(
                            "confirmation_timeout",
                            "must be an ISO 8601 duration such as PT24H",
                        ));
                    }
                }
            }
            Body::ResolutionResponse(b) => {
                if b.confirmations.len() > group::MAX_GROUP_PARTICIPANTS {
                    return Err(invalid(
                        "confirmations",
                        format!(
                            "at most {} confirmations, got {}",
                            group::MAX_GROUP_PARTICIPANTS,
                            b.confirmations.len()
                        ),
                    ));
                }
                if b.status != ResolutionStatus::Confirmed
                    && (b.signature.is_some() || !b.confirmations.is_empty())
                {
                    return Err(invalid(
                        "signature",
                        "only a `confirmed` answer carries confirmations",
                    ));
                }
            }
            Body::Context(b) => {
                if let Some(g) = &b.group {
                    g.validate("group")?;
                }
                if let Some(f) = &b.flexibility_request {
                    f.validate("flexibility_request")?;
                }
            }
            Body::CoordinatorTransfer(b) => {
                if let Some(h) = &b.handover {
                    h.validate("handover")?;
                    if h.group.coordinator != b.to_coordinator {
                        return Err(invalid(
                            "handover.group.coordinator",
                            "must be `to_coordinator`",
                        ));
                    }
                }
            }
            Body::Retraction(b) => b.validate()?,
            Body::RetractionAck(b) => b.validate()?,
            Body::ThreadFork(b) => {
                valid_id("parent_thread_id", &b.parent_thread_id)?;
                if b.new_threads.is_empty() {
                    return Err(invalid("new_threads", "must list at least one thread"));
                }
                for (i, t) in b.new_threads.iter().enumerate() {
                    valid_id(&format!("new_threads[{i}].thread_id"), &t.thread_id)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The packet as a JSON object, header first.
    pub fn to_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("protocol".into(), Value::String(self.protocol.clone()));
        m.insert("packet_id".into(), Value::String(self.packet_id.clone()));
        m.insert("thread_id".into(), Value::String(self.thread_id.clone()));
        m.insert("from".into(), Value::String(self.from.to_string()));
        m.insert("to".into(), Value::String(self.to.to_string()));
        m.insert("timestamp".into(), Value::String(self.timestamp.clone()));
        m.insert(
            "type".into(),
            Value::String(self.body.type_name().to_string()),
        );
        if let Some(c) = &self.capabilities {
            if let Ok(v) = serde_json::to_value(c) {
                m.insert("capabilities".into(), v);
            }
        }
        if let Some(h) = &self.format_hints {
            m.insert("_format_hints".into(), Value::Object(h.clone()));
        }
        if let Ok(Value::Object(body)) = self.body.to_value() {
            for (k, v) in body {
                if !HEADER_FIELDS.contains(&k.as_str()) {
                    m.insert(k, v);
                }
            }
        }
        m
    }

    /// Validates and serialises the packet; refuses one over [`MAX_CONTEXT_SIZE_BYTES`].
    pub fn to_bytes(&self) -> Result<Vec<u8>, WireError> {
        self.validate()?;
        let bytes = serde_json::to_vec(&Value::Object(self.to_map()))
            .map_err(|e| WireError::NotJson(e.to_string()))?;
        if bytes.len() > MAX_CONTEXT_SIZE_BYTES {
            return Err(WireError::TooLarge {
                size: bytes.len(),
                limit: MAX_CONTEXT_SIZE_BYTES,
            });
        }
        Ok(bytes)
    }

    /// Pretty JSON for transcripts and debugging (no validation).
    pub fn to_pretty(&self) -> String {
        serde_json::to_string_pretty(&Value::Object(self.to_map())).unwrap_or_default()
    }
}

/// This implementation's capabilities for a given set of supported versions.
pub fn capabilities(supported_versions: &[String]) -> Capabilities {
    Capabilities {
        supported_versions: supported_versions.to_vec(),
        features: FEATURES.iter().map(|s| s.to_string()).collect(),
        max_context_size_bytes: MAX_CONTEXT_SIZE_BYTES as u64,
        supported_encryption: vec![ENCRYPTION.to_string()],
    }
}

/// The highest version both lists support (§15.2), comparing `major.minor` numerically.
pub fn negotiate_version(mine: &[String], theirs: &[String]) -> Option<String> {
    fn key(v: &str) -> Option<(u32, u32)> {
        let (a, b) = v.split_once('.')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    }
    mine.iter()
        .filter(|v| theirs.contains(v))
        .filter_map(|v| key(v).map(|k| (k, v)))
        .max_by_key(|(k, _)| *k)
        .map(|(_, v)| v.clone())
}

/// The `_format_hints` object of §5.3.
pub fn format_hints() -> Map<String, Value> {
    let mut m = Map::new();
    for (k, v) in [
        ("dates", "ISO 8601 (YYYY-MM-DD)"),
        ("times", "24h format with timezone (HH:MM±HH:MM)"),
        ("currency", "ISO 4217 code + amount (GBP 30)"),
        ("coordinates", "decimal degrees (lat, lng)"),
        ("durations", "ISO 8601 duration (PT1H30M)"),
    ] {
        m.insert(k.into(), Value::String(v.into()));
    }
    m
}

#[cfg(test)]
mod tests;
