//! What an ACP session is configured with, takes and gives: its configuration
//! ([`AcpConfig`]), the handoff body ([`Handoff`]), its events ([`AcpEvent`]) and outputs
//! ([`AcpOutput`]), and why it could not send ([`SendError`]).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::bridge::acp::error::AcpError;
use crate::bridge::acp::handshake::{Announcement, Capabilities, Trust};
use crate::time::Timestamp;

/// How far a message's `timestamp` may be from this agent's clock, either way.
pub const DEFAULT_SKEW: Duration = Duration::from_secs(120);
/// How long this agent has to answer a request or handoff before the session answers
/// it with [`code::TIMEOUT`](crate::bridge::acp::error::code::TIMEOUT).
pub const DEFAULT_ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// How long this agent waits for the answer to its own request or handoff.
pub const DEFAULT_WAIT_FOR_ANSWER: Duration = Duration::from_secs(60);
/// Messages of one peer remembered within the skew window (the replay cache); a peer
/// past it is refused ([`code::RATE_LIMITED`](crate::bridge::acp::error::code::RATE_LIMITED)) until older ones leave the window.
pub const MAX_SEEN_PER_PEER: usize = 4096;
/// Requests and handoffs of one peer waiting for this agent's answer at most.
pub const MAX_PENDING_PER_PEER: usize = 256;

/// This agent's side of ACP.
#[derive(Debug, Clone)]
pub struct AcpConfig {
    /// Its `agent-id`.
    pub agent_id: String,
    /// Its principal's id.
    pub principal_id: String,
    /// The skill layers it declares (ascending, distinct).
    pub layers: Vec<u8>,
    /// What it announces.
    pub announcement: Announcement,
    /// What it shares in the capability exchange.
    pub capabilities: Capabilities,
    /// The skew window of timestamps.
    pub skew: Duration,
    /// Its deadline to answer a request.
    pub answer_within: Duration,
    /// How long it waits for its own requests' answers.
    pub wait_for_answer: Duration,
    /// Principals its principal knows (§4.4 "known principal").
    pub known_principals: BTreeSet<String>,
    /// Principals its principal has an established relationship with (relationship
    /// memory; §4.4 "shared context").
    pub relationships: BTreeSet<String>,
}

impl AcpConfig {
    /// A configuration with the defaults: layers `[0, 1, 2, 3]`, nothing announced or
    /// offered, the default windows, nobody known.
    pub fn new(agent_id: &str, principal_id: &str) -> AcpConfig {
        AcpConfig {
            agent_id: agent_id.to_string(),
            principal_id: principal_id.to_string(),
            layers: vec![0, 1, 2, 3],
            announcement: Announcement::default(),
            capabilities: Capabilities::default(),
            skew: DEFAULT_SKEW,
            answer_within: DEFAULT_ANSWER_WITHIN,
            wait_for_answer: DEFAULT_WAIT_FOR_ANSWER,
            known_principals: BTreeSet::new(),
            relationships: BTreeSet::new(),
        }
    }
}

/// A handoff's body (seed 004 §3.4): what was completed, what remains, the context.
#[derive(Debug, Clone, PartialEq)]
pub struct Handoff {
    /// `completed`: what has been done (an array).
    pub completed: Vec<Value>,
    /// `remaining`: what is left (an array).
    pub remaining: Vec<Value>,
    /// `context`: everything the receiver needs to go on without asking again.
    pub context: Map<String, Value>,
    /// Other members of the body, kept.
    pub rest: Map<String, Value>,
}

impl Handoff {
    /// Reads a handoff's body: `completed` and `remaining` arrays and `context` object
    /// required.
    pub fn parse(body: &Map<String, Value>) -> Result<Handoff, AcpError> {
        let array = |k: &str| match body.get(k) {
            Some(Value::Array(a)) => Ok(a.clone()),
            None => Err(AcpError::InvalidBody(format!("`body.{k}` is required"))),
            Some(_) => Err(AcpError::InvalidBody(format!("`body.{k}` is not an array"))),
        };
        let completed = array("completed")?;
        let remaining = array("remaining")?;
        let context = match body.get("context") {
            Some(Value::Object(o)) => o.clone(),
            None => return Err(AcpError::InvalidBody("`body.context` is required".into())),
            Some(_) => {
                return Err(AcpError::InvalidBody(
                    "`body.context` is not an object".into(),
                ))
            }
        };
        let rest = body
            .iter()
            .filter(|(k, _)| !["completed", "remaining", "context"].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(Handoff {
            completed,
            remaining,
            context,
            rest,
        })
    }

    /// Its body.
    pub fn to_body(&self) -> Map<String, Value> {
        let mut b = self.rest.clone();
        b.insert("completed".into(), Value::Array(self.completed.clone()));
        b.insert("remaining".into(), Value::Array(self.remaining.clone()));
        b.insert("context".into(), Value::Object(self.context.clone()));
        b
    }
}

/// An error a peer answered a request with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteError {
    /// Its JSON-RPC code.
    pub code: i64,
    /// Its message.
    pub message: String,
    /// The header it names, if any.
    pub header: Option<String>,
}

/// What happened in the session.
#[derive(Debug, Clone, PartialEq)]
pub enum AcpEvent {
    /// The handshake with `peer` completed: substantive messages may flow.
    Established {
        /// The peer's `agent-id`.
        peer: String,
        /// Its principal.
        principal: String,
        /// The trust calibrated.
        trust: Trust,
        /// What it shared in the capability exchange.
        capabilities: Capabilities,
    },
    /// A request to answer ([`AcpSession::respond`](crate::bridge::acp::session::AcpSession::respond)) by `deadline`.
    Request {
        /// The peer.
        peer: String,
        /// Its principal.
        principal: String,
        /// The request's id.
        id: String,
        /// Its body (decrypted).
        body: Map<String, Value>,
        /// Whether it came encrypted.
        encrypted: bool,
        /// When the session answers it with [`code::TIMEOUT`](crate::bridge::acp::error::code::TIMEOUT).
        deadline: Timestamp,
    },
    /// A handoff to accept or refuse ([`AcpSession::respond`](crate::bridge::acp::session::AcpSession::respond)) by `deadline`.
    Handoff {
        /// The peer.
        peer: String,
        /// Its principal.
        principal: String,
        /// The handoff's id.
        id: String,
        /// What it carries.
        handoff: Handoff,
        /// Whether it came encrypted.
        encrypted: bool,
        /// When the session answers it with [`code::TIMEOUT`](crate::bridge::acp::error::code::TIMEOUT).
        deadline: Timestamp,
    },
    /// A notification (`agent.notification`).
    Notification {
        /// The peer.
        peer: String,
        /// Its body (decrypted).
        body: Map<String, Value>,
        /// Whether it came encrypted.
        encrypted: bool,
    },
    /// The answer to this agent's request or handoff `id`.
    Response {
        /// The peer.
        peer: String,
        /// The request's id.
        id: String,
        /// Its result body (decrypted), or the error.
        outcome: Result<Map<String, Value>, RemoteError>,
    },
    /// This agent's request `id` got no answer within its wait: it is forgotten.
    Unanswered {
        /// The peer.
        peer: String,
        /// The request's id.
        id: String,
    },
    /// A request of `peer` was not answered by its deadline: the session answered it
    /// with [`code::TIMEOUT`](crate::bridge::acp::error::code::TIMEOUT).
    TimedOut {
        /// The peer.
        peer: String,
        /// The request's id.
        id: String,
    },
    /// A received message was refused, unprocessed.
    Refused {
        /// Its sender, if its `agent-id` could be read.
        peer: Option<String>,
        /// Why.
        error: AcpError,
    },
}

/// What the session releases.
#[derive(Debug, Clone, PartialEq)]
pub enum AcpOutput {
    /// A signed message for the agent `to` (its inbox).
    Send {
        /// The recipient's `agent-id`.
        to: String,
        /// The message.
        json: String,
    },
    /// A signed JSON-RPC error answering a refused message, for whoever sent it: `to`
    /// when its `agent-id` could be read, else back where it came from.
    Refusal {
        /// The sender's `agent-id`, if it could be read.
        to: Option<String>,
        /// The error response.
        json: String,
    },
    /// What happened.
    Event(Box<AcpEvent>),
}

/// Why this agent could not send a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No key is registered for the peer.
    #[error("no key is registered for agent `{0}`")]
    UnknownAgent(String),
    /// The handshake with the peer is not complete.
    #[error("the handshake with `{0}` is not complete")]
    HandshakeIncomplete(String),
    /// The lowest common layer rules it out.
    #[error("{0}")]
    Layers(String),
    /// No request `id` of the peer waits for an answer (answered, timed out, unknown).
    #[error("no request `{0}` waits for an answer")]
    UnknownRequest(String),
    /// Too many of this agent's requests wait for the peer's answers.
    #[error("too many requests wait for `{0}`")]
    TooMany(String),
    /// The message could not be written.
    #[error("{0}")]
    Encoding(AcpError),
}
