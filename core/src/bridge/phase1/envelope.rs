//! The Phase-1 envelope and its five message types (seed 001), parsed in strict mode.
//!
//! [`parse`] takes the body of a `POST /a2a/messages` and the receiving agent's
//! [`Receiver`] (its id and the task types it supports) and answers either a typed
//! [`Message`] or an [`EnvelopeError`]: the seed's error code, a message naming the
//! offending field, the original message's id and sender when they could be read, and
//! any `details`. [`EnvelopeError::reply`] builds the `error` message to send back and
//! [`ErrorCode::http_status`] its HTTP status. Checks, in this order (the first failing
//! one answers):
//!
//! 1. the body is at most [`MAX_MESSAGE_BYTES`] and a JSON object — else
//!    `INVALID_MESSAGE_FORMAT`;
//! 2. the envelope has exactly `version`, `message_id`, `timestamp`, `from`, `to`, `type`,
//!    `payload` and optionally `signature` (a string; Phase 1 has no authentication, so it
//!    is kept, not checked); `version` is `"1.0.0"`; `message_id`, `from`, `to` are UUID
//!    v4 in their hyphenated form; `timestamp` is ISO 8601 in its RFC 3339 profile;
//!    `payload` is an object — else `INVALID_MESSAGE_FORMAT`;
//! 3. `type` is one of the five — else `UNSUPPORTED_MESSAGE_TYPE`;
//! 4. `to` is the receiving agent — else `AGENT_NOT_FOUND`;
//! 5. the payload has its type's required fields with the right types and values, and no
//!    other field — else `PAYLOAD_VALIDATION_FAILED`; a `task_assignment`'s `task_type` is
//!    one the agent supports — else `INVALID_TASK_TYPE` (with `details.supported_types`).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
pub use uuid::Uuid;

/// The protocol version of Phase 1.
pub const VERSION: &str = "1.0.0";

/// Largest message accepted, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// Longest string accepted in an id field (`task_id`, `nonce`, `original_message_id`).
pub const MAX_ID_BYTES: usize = 256;

/// The seed's error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// The message format is invalid.
    InvalidMessageFormat,
    /// The message type is not supported.
    UnsupportedMessageType,
    /// The task type is not supported by the agent.
    InvalidTaskType,
    /// The task id does not exist.
    TaskNotFound,
    /// The target agent does not exist.
    AgentNotFound,
    /// The agent lacks a required capability.
    CapabilityMismatch,
    /// The payload failed validation.
    PayloadValidationFailed,
    /// An operation timed out.
    Timeout,
    /// An unexpected error.
    InternalError,
}

impl ErrorCode {
    /// Every code, in the seed's order.
    pub const ALL: [ErrorCode; 9] = [
        ErrorCode::InvalidMessageFormat,
        ErrorCode::UnsupportedMessageType,
        ErrorCode::InvalidTaskType,
        ErrorCode::TaskNotFound,
        ErrorCode::AgentNotFound,
        ErrorCode::CapabilityMismatch,
        ErrorCode::PayloadValidationFailed,
        ErrorCode::Timeout,
        ErrorCode::InternalError,
    ];

    /// The code as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidMessageFormat => "INVALID_MESSAGE_FORMAT",
            ErrorCode::UnsupportedMessageType => "UNSUPPORTED_MESSAGE_TYPE",
            ErrorCode::InvalidTaskType => "INVALID_TASK_TYPE",
            ErrorCode::TaskNotFound => "TASK_NOT_FOUND",
            ErrorCode::AgentNotFound => "AGENT_NOT_FOUND",
            ErrorCode::CapabilityMismatch => "CAPABILITY_MISMATCH",
            ErrorCode::PayloadValidationFailed => "PAYLOAD_VALIDATION_FAILED",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::InternalError => "INTERNAL_ERROR",
        }
    }

    /// The HTTP status the response carries (seed 001 "Transport"): 400 for what is wrong
    /// with the message, 404 for an agent or task that does not exist, 500 for the
    /// receiver's own failures. (429 is the rate limiter's, before any parsing.)
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidMessageFormat
            | ErrorCode::UnsupportedMessageType
            | ErrorCode::InvalidTaskType
            | ErrorCode::CapabilityMismatch
            | ErrorCode::PayloadValidationFailed => 400,
            ErrorCode::TaskNotFound | ErrorCode::AgentNotFound => 404,
            ErrorCode::Timeout | ErrorCode::InternalError => 500,
        }
    }

    /// Whether a client retries after it (seed 001 "Retry Logic": `TIMEOUT` and
    /// `INTERNAL_ERROR`; the seed lists neither `TASK_NOT_FOUND`, `AGENT_NOT_FOUND` nor
    /// `PAYLOAD_VALIDATION_FAILED` as retryable, and sending the same message again cannot
    /// change their answer, so they are not retried either).
    pub fn retryable(self) -> bool {
        matches!(self, ErrorCode::Timeout | ErrorCode::InternalError)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a message was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct EnvelopeError {
    /// The seed's code.
    pub code: ErrorCode,
    /// What is wrong, naming the field.
    pub message: String,
    /// The refused message's id, when it could be read.
    pub original_message_id: Option<String>,
    /// Its sender, when it could be read (the error goes back to it).
    pub from: Option<Uuid>,
    /// Details (`supported_types` for `INVALID_TASK_TYPE`).
    pub details: Option<Box<Map<String, Value>>>,
}

impl EnvelopeError {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        EnvelopeError {
            code,
            message: message.into(),
            original_message_id: None,
            from: None,
            details: None,
        }
    }

    /// Addresses this error to the message `env` it answers, as far as it can be read:
    /// its id (1–[`MAX_ID_BYTES`] bytes) and its sender (a UUID v4).
    fn addressed_as(&mut self, env: &Map<String, Value>) {
        self.original_message_id = env
            .get("message_id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty() && id.len() <= MAX_ID_BYTES)
            .map(str::to_string);
        self.from = env.get("from").and_then(Value::as_str).and_then(uuid_v4_of);
    }

    /// The `error` message answering the refused one, from `me`: `to` is the refused
    /// message's sender, or the nil UUID when it could not be read.
    pub fn reply(&self, me: Uuid, message_id: Uuid, timestamp: &str) -> Message {
        Message {
            message_id,
            timestamp: timestamp.to_string(),
            from: me,
            to: self.from.unwrap_or(Uuid::nil()),
            signature: None,
            payload: Payload::Error(ErrorPayload {
                original_message_id: self.original_message_id.clone(),
                error_code: self.code,
                error_message: self.message.clone(),
                details: self.details.as_deref().cloned(),
            }),
        }
    }
}

/// The receiving agent: who it is and what it does.
#[derive(Debug, Clone)]
pub struct Receiver {
    /// Its agent id.
    pub agent_id: Uuid,
    /// The task types it supports (its `supported_tasks`).
    pub supported_tasks: Vec<String>,
}

/// A `task_assignment`'s priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Low.
    Low,
    /// Medium (the default).
    #[default]
    Medium,
    /// High.
    High,
    /// Urgent.
    Urgent,
}

/// A task's status in a `status_update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Created.
    Created,
    /// Assigned.
    Assigned,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
}

/// How a task ended, in a `task_completion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Completion {
    /// Done.
    Completed,
    /// Failed.
    Failed,
}

/// `task_assignment`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskAssignment {
    /// Unique task identifier.
    pub task_id: String,
    /// Type of task (one of the target's `supported_tasks`).
    pub task_type: String,
    /// Human-readable title.
    pub title: String,
    /// Detailed description.
    pub description: String,
    /// Task-specific data.
    pub payload: Map<String, Value>,
    /// Priority (default `medium`).
    #[serde(default)]
    pub priority: Priority,
    /// Deadline (ISO 8601).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// Additional metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// `status_update`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusUpdate {
    /// Task identifier.
    pub task_id: String,
    /// Status.
    pub status: TaskStatus,
    /// Progress, 0.0–1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    /// Human-readable status message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Additional metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// `task_completion`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskCompletion {
    /// Task identifier.
    pub task_id: String,
    /// `completed` or `failed`.
    pub status: Completion,
    /// Result data.
    pub result: Map<String, Value>,
    /// Execution time in milliseconds (a non-negative number, kept as written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_time_ms: Option<serde_json::Number>,
    /// Additional metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// `ping`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ping {
    /// Random nonce for correlation.
    pub nonce: String,
    /// Data to echo back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo: Option<Value>,
}

/// `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorPayload {
    /// The refused message's id (absent when it could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_message_id: Option<String>,
    /// The code.
    pub error_code: ErrorCode,
    /// What went wrong.
    pub error_message: String,
    /// Details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Map<String, Value>>,
}

/// A message's payload, by its `type`.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// `task_assignment`.
    TaskAssignment(TaskAssignment),
    /// `status_update`.
    StatusUpdate(StatusUpdate),
    /// `task_completion`.
    TaskCompletion(TaskCompletion),
    /// `ping`.
    Ping(Ping),
    /// `error`.
    Error(ErrorPayload),
}

impl Payload {
    /// The message type as on the wire.
    pub fn type_name(&self) -> &'static str {
        match self {
            Payload::TaskAssignment(_) => "task_assignment",
            Payload::StatusUpdate(_) => "status_update",
            Payload::TaskCompletion(_) => "task_completion",
            Payload::Ping(_) => "ping",
            Payload::Error(_) => "error",
        }
    }
}

/// A checked message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Its id (UUID v4).
    pub message_id: Uuid,
    /// When it was sent (RFC 3339, as given).
    pub timestamp: String,
    /// The sending agent.
    pub from: Uuid,
    /// The receiving agent.
    pub to: Uuid,
    /// The signature, kept unchecked (Phase 1 has no authentication).
    pub signature: Option<String>,
    /// The payload.
    pub payload: Payload,
}

impl Message {
    /// The message as JSON, envelope fields in the seed's order.
    pub fn to_json(&self) -> Value {
        let payload = match &self.payload {
            Payload::TaskAssignment(p) => serde_json::to_value(p),
            Payload::StatusUpdate(p) => serde_json::to_value(p),
            Payload::TaskCompletion(p) => serde_json::to_value(p),
            Payload::Ping(p) => serde_json::to_value(p),
            Payload::Error(p) => serde_json::to_value(p),
        }
        .unwrap_or(Value::Null);
        let mut m = json!({
            "version": VERSION,
            "message_id": self.message_id.hyphenated().to_string(),
            "timestamp": self.timestamp,
            "from": self.from.hyphenated().to_string(),
            "to": self.to.hyphenated().to_string(),
            "type": self.payload.type_name(),
            "payload": payload,
        });
        if let (Some(s), Some(o)) = (&self.signature, m.as_object_mut()) {
            o.insert("signature".into(), Value::String(s.clone()));
        }
        m
    }

    /// The answer to a `ping`: a `ping` back with the same nonce and echo.
    pub fn ping_echo(&self, message_id: Uuid, timestamp: &str) -> Option<Message> {
        let Payload::Ping(p) = &self.payload else {
            return None;
        };
        Some(Message {
            message_id,
            timestamp: timestamp.to_string(),
            from: self.to,
            to: self.from,
            signature: None,
            payload: Payload::Ping(p.clone()),
        })
    }
}

/// The `error` a listener answers (with HTTP 500) when the agent did not acknowledge the
/// message `body` within its deadline ([`crate::bridge::phase1::retry::ack_deadline_ms`]):
/// `TIMEOUT`, which the sender retries. It carries the message's id and goes to its
/// sender when they can be read (as every error does), under a fresh `message_id`.
pub fn timeout_reply(me: Uuid, body: &[u8], message_id: Uuid, timestamp: &str) -> Value {
    let mut e = EnvelopeError::new(ErrorCode::Timeout, "the agent did not acknowledge in time");
    if let Ok(Value::Object(env)) = serde_json::from_slice::<Value>(body) {
        e.addressed_as(&env);
    }
    e.reply(me, message_id, timestamp).to_json()
}

/// The `error` a listener answers a request it refused before reading its message (the
/// body over the size cap or not in time, no bearer token, a method other than `POST`):
/// `INVALID_MESSAGE_FORMAT` saying `why`, under a fresh `message_id`, without an
/// `original_message_id` and to the nil UUID (the message was not read, so neither its id
/// nor its sender is known).
pub fn refusal_reply(me: Uuid, why: &str, message_id: Uuid, timestamp: &str) -> Value {
    EnvelopeError::new(ErrorCode::InvalidMessageFormat, why)
        .reply(me, message_id, timestamp)
        .to_json()
}

/// The Phase-1 id of the agent whose Ed25519 public key is `public_key`: a UUID v4 made
/// from its first 16 bytes (stable across restarts; what a sender puts in `to`).
pub fn agent_id_of(public_key: &[u8; 32]) -> Uuid {
    let mut b = [0u8; 16];
    for (d, s) in b.iter_mut().zip(public_key) {
        *d = *s;
    }
    uuid_v4(b)
}

/// The message type a body names, if it can be read (to pick its acknowledgement
/// deadline before the agent checks it).
pub fn type_of(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.get("type")?.as_str().map(str::to_string)
}

/// A UUID v4 made from 16 random bytes (the caller's seeded generator draws them).
pub fn uuid_v4(bytes: [u8; 16]) -> Uuid {
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// A UUID v4 in its hyphenated form (36 characters, either case), as the envelope's
/// ids must be written.
pub fn uuid_v4_of(s: &str) -> Option<Uuid> {
    if s.len() != 36 {
        return None;
    }
    let u = Uuid::try_parse(s).ok()?;
    (u.get_version_num() == 4 && u.get_variant() == uuid::Variant::RFC4122).then_some(u)
}

/// An ISO 8601 date-time in the RFC 3339 profile (`2024-02-05T15:30:00Z`, an offset, or
/// fractions of a second).
pub fn is_timestamp(s: &str) -> bool {
    s.len() <= 64 && chrono::DateTime::parse_from_rfc3339(s).is_ok()
}

const ENVELOPE_FIELDS: [&str; 8] = [
    "version",
    "message_id",
    "timestamp",
    "from",
    "to",
    "type",
    "payload",
    "signature",
];

/// Checks a message received by `me`.
pub fn parse(body: &[u8], me: &Receiver) -> Result<Message, EnvelopeError> {
    parse_for(body, Some(me))
}

/// Checks a message by every rule that does not depend on who receives it: all of
/// [`parse`]'s but `to` being the receiving agent and the task type being one it supports.
/// A sender checks what it is about to send with it (it never sends what a receiver would
/// refuse as malformed), and the answer it gets back.
pub fn validate(body: &[u8]) -> Result<Message, EnvelopeError> {
    parse_for(body, None)
}

fn parse_for(body: &[u8], me: Option<&Receiver>) -> Result<Message, EnvelopeError> {
    use ErrorCode::*;
    if body.len() > MAX_MESSAGE_BYTES {
        return Err(EnvelopeError::new(
            InvalidMessageFormat,
            format!("the message is over {MAX_MESSAGE_BYTES} bytes"),
        ));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| EnvelopeError::new(InvalidMessageFormat, format!("not JSON: {e}")))?;
    let Value::Object(mut env) = v else {
        return Err(EnvelopeError::new(
            InvalidMessageFormat,
            "the message is not a JSON object",
        ));
    };
    // What can be read of the id and sender goes into any error, so it reaches them.
    let mut err = EnvelopeError::new(InvalidMessageFormat, String::new());
    err.addressed_as(&env);
    let fail = |code: ErrorCode, message: String| EnvelopeError {
        code,
        message,
        ..err.clone()
    };
    if let Some(k) = env.keys().find(|k| !ENVELOPE_FIELDS.contains(&k.as_str())) {
        return Err(fail(
            InvalidMessageFormat,
            format!("unknown envelope field `{}`", crate::display::line(k, 64)),
        ));
    }
    let text = |env: &Map<String, Value>, k: &str| -> Result<String, EnvelopeError> {
        match env.get(k) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(fail(InvalidMessageFormat, format!("`{k}` is not a string"))),
            None => Err(fail(InvalidMessageFormat, format!("`{k}` is missing"))),
        }
    };
    let version = text(&env, "version")?;
    if version != VERSION {
        return Err(fail(
            InvalidMessageFormat,
            format!(
                "`version` {:?} is not supported (this agent speaks {VERSION})",
                crate::display::line(&version, 32)
            ),
        ));
    }
    let id = |k: &str| -> Result<Uuid, EnvelopeError> {
        uuid_v4_of(&text(&env, k)?)
            .ok_or_else(|| fail(InvalidMessageFormat, format!("`{k}` is not a UUID v4")))
    };
    let message_id = id("message_id")?;
    let from = id("from")?;
    let to = id("to")?;
    let timestamp = text(&env, "timestamp")?;
    if !is_timestamp(&timestamp) {
        return Err(fail(
            InvalidMessageFormat,
            "`timestamp` is not an ISO 8601 date-time (RFC 3339)".into(),
        ));
    }
    let signature = match env.get("signature") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(fail(
                InvalidMessageFormat,
                "`signature` is not a string".into(),
            ))
        }
    };
    let kind = text(&env, "type")?;
    let payload = match env.remove("payload") {
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err(fail(
                InvalidMessageFormat,
                "`payload` is not a JSON object".into(),
            ))
        }
        None => return Err(fail(InvalidMessageFormat, "`payload` is missing".into())),
    };
    if !matches!(
        kind.as_str(),
        "task_assignment" | "status_update" | "task_completion" | "ping" | "error"
    ) {
        return Err(fail(
            UnsupportedMessageType,
            format!(
                "message type {:?} is not supported",
                crate::display::line(&kind, 64)
            ),
        ));
    }
    if let Some(me) = me {
        if to != me.agent_id {
            return Err(fail(AgentNotFound, format!("no agent {to} here")));
        }
    }
    let typed =
        |p: Map<String, Value>| payload_of(&kind, p).map_err(|m| fail(PayloadValidationFailed, m));
    let payload = typed(payload)?;
    if let (Payload::TaskAssignment(t), Some(me)) = (&payload, me) {
        if !me.supported_tasks.contains(&t.task_type) {
            let mut e = fail(
                InvalidTaskType,
                format!(
                    "task type {:?} is not supported by this agent",
                    crate::display::line(&t.task_type, 64)
                ),
            );
            let mut d = Map::new();
            d.insert("supported_types".into(), json!(me.supported_tasks));
            e.details = Some(Box::new(d));
            return Err(e);
        }
    }
    Ok(Message {
        message_id,
        timestamp,
        from,
        to,
        signature,
        payload,
    })
}

fn id_field(name: &str, v: &str) -> Result<(), String> {
    if v.is_empty() || v.len() > MAX_ID_BYTES {
        return Err(format!("`{name}` must be 1–{MAX_ID_BYTES} bytes"));
    }
    Ok(())
}

/// The payload of a message of type `kind`, strictly.
fn payload_of(kind: &str, p: Map<String, Value>) -> Result<Payload, String> {
    fn de<T: serde::de::DeserializeOwned>(p: Map<String, Value>) -> Result<T, String> {
        let mut track = serde_path_to_error::Track::new();
        let d = serde_path_to_error::Deserializer::new(Value::Object(p), &mut track);
        T::deserialize(d).map_err(|e| {
            let path = track.path().to_string();
            let e = crate::display::line(&e.to_string(), 200).into_owned();
            if path == "." || path.is_empty() {
                format!("payload: {e}")
            } else {
                format!("payload.{path}: {e}")
            }
        })
    }
    Ok(match kind {
        "task_assignment" => {
            let t: TaskAssignment = de(p)?;
            id_field("task_id", &t.task_id)?;
            if let Some(d) = &t.deadline {
                if !is_timestamp(d) {
                    return Err("payload.deadline: not an ISO 8601 date-time (RFC 3339)".into());
                }
            }
            Payload::TaskAssignment(t)
        }
        "status_update" => {
            let s: StatusUpdate = de(p)?;
            id_field("task_id", &s.task_id)?;
            if let Some(x) = s.progress {
                if !(0.0..=1.0).contains(&x) {
                    return Err("payload.progress: must be between 0.0 and 1.0".into());
                }
            }
            Payload::StatusUpdate(s)
        }
        "task_completion" => {
            let c: TaskCompletion = de(p)?;
            id_field("task_id", &c.task_id)?;
            if let Some(x) = c
                .execution_time_ms
                .as_ref()
                .and_then(serde_json::Number::as_f64)
            {
                if !(x >= 0.0 && x.is_finite()) {
                    return Err("payload.execution_time_ms: must be a non-negative number".into());
                }
            }
            Payload::TaskCompletion(c)
        }
        "ping" => {
            let g: Ping = de(p)?;
            id_field("nonce", &g.nonce)?;
            Payload::Ping(g)
        }
        _ => {
            let e: ErrorPayload = de(p)?;
            if let Some(o) = &e.original_message_id {
                id_field("original_message_id", o)?;
            }
            Payload::Error(e)
        }
    })
}

#[cfg(test)]
#[path = "envelope_tests.rs"]
mod tests;
