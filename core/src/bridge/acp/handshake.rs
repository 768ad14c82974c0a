//! The four-step handshake (seed 004 §4), per peer: announcement (signed), verification
//! against the sender's registered key, capability exchange, trust establishment.
//! [`Handshake`] is where one peer stands; the session moves it
//! ([`crate::bridge::acp::session`]) and refuses every substantive message until it is
//! [`Handshake::is_complete`].
//!
//! The order (§4's sequence diagram): the initiator announces; the responder verifies
//! and announces back; the initiator verifies and sends its capabilities; the responder
//! answers with its own; each calibrates its trust in the other. When both announce at
//! once each is an initiator, and both send capabilities on the other's announcement.

use serde_json::{json, Map, Value};

use crate::bridge::acp::error::AcpError;

/// Entries one list of a capability exchange or announcement holds at most.
pub const MAX_ENTRIES: usize = 64;
/// Bytes one entry holds at most.
pub const MAX_ENTRY: usize = 256;
/// The skill layer of coordination protocols: a handoff needs both agents to declare
/// every layer up to it.
pub const COORDINATION_LAYER: u8 = 3;

/// What an agent announces (`agent.announce`'s body, seed 004 §4.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announcement {
    /// `capabilities`: what it can do, in words.
    pub capabilities: Vec<String>,
    /// `purpose`: why it talks to the other agent.
    pub purpose: String,
}

/// What an agent shares in the capability exchange (`agent.capabilities`'s body, §4.3).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `tools`: available tools and services.
    pub tools: Vec<String>,
    /// `domains`: information domains it can address.
    pub domains: Vec<String>,
    /// `limits`: known limitations and boundaries (an object).
    pub limits: Map<String, Value>,
    /// `requesting`: what it asks of the other agent.
    pub requesting: Vec<String>,
}

fn list(body: &Map<String, Value>, key: &str, required: bool) -> Result<Vec<String>, AcpError> {
    let bad = || {
        AcpError::InvalidBody(format!(
            "`body.{key}` must be an array of at most {MAX_ENTRIES} strings of at most {MAX_ENTRY} bytes"
        ))
    };
    match body.get(key) {
        None if !required => Ok(Vec::new()),
        None => Err(AcpError::InvalidBody(format!("`body.{key}` is required"))),
        Some(Value::Array(a)) if a.len() <= MAX_ENTRIES => a
            .iter()
            .map(|v| {
                v.as_str()
                    .filter(|s| s.len() <= MAX_ENTRY)
                    .map(str::to_string)
                    .ok_or_else(bad)
            })
            .collect(),
        Some(_) => Err(bad()),
    }
}

impl Announcement {
    /// Reads an announcement's body (`capabilities` and `purpose` optional).
    pub fn parse(body: &Map<String, Value>) -> Result<Announcement, AcpError> {
        let purpose = match body.get("purpose") {
            None => String::new(),
            Some(Value::String(s)) if s.len() <= MAX_ENTRY * 4 => s.clone(),
            Some(_) => {
                return Err(AcpError::InvalidBody(
                    "`body.purpose` must be a string of at most 1024 bytes".into(),
                ))
            }
        };
        Ok(Announcement {
            capabilities: list(body, "capabilities", false)?,
            purpose,
        })
    }

    /// Its body.
    pub fn to_body(&self) -> Map<String, Value> {
        let v = json!({ "capabilities": self.capabilities, "purpose": self.purpose });
        v.as_object().cloned().unwrap_or_default()
    }
}

impl Capabilities {
    /// Reads a capability exchange's body: all four members required.
    pub fn parse(body: &Map<String, Value>) -> Result<Capabilities, AcpError> {
        let limits = match body.get("limits") {
            Some(Value::Object(o)) if o.len() <= MAX_ENTRIES => o.clone(),
            None => return Err(AcpError::InvalidBody("`body.limits` is required".into())),
            Some(_) => {
                return Err(AcpError::InvalidBody(format!(
                    "`body.limits` must be an object of at most {MAX_ENTRIES} members"
                )))
            }
        };
        Ok(Capabilities {
            tools: list(body, "tools", true)?,
            domains: list(body, "domains", true)?,
            limits,
            requesting: list(body, "requesting", true)?,
        })
    }

    /// Its body.
    pub fn to_body(&self) -> Map<String, Value> {
        let v = json!({
            "tools": self.tools,
            "domains": self.domains,
            "limits": self.limits,
            "requesting": self.requesting,
        });
        v.as_object().cloned().unwrap_or_default()
    }
}

/// The initial trust level (§4.4), lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TrustLevel {
    /// An unknown principal: baseline trust, higher verification requirements.
    Baseline,
    /// A principal with whom this agent's principal has an established relationship
    /// (shared context): elevated.
    Elevated,
    /// A known principal: higher trust.
    Known,
}

impl TrustLevel {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            TrustLevel::Baseline => "baseline",
            TrustLevel::Elevated => "elevated",
            TrustLevel::Known => "known",
        }
    }

    /// One level lower (recalibration after refused messages).
    pub fn lower(self) -> TrustLevel {
        match self {
            TrustLevel::Known => TrustLevel::Elevated,
            _ => TrustLevel::Baseline,
        }
    }
}

/// The trust an established peer has (§4.4), recalibrated as the relationship goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trust {
    /// The level.
    pub level: TrustLevel,
    /// The lowest common layer: the highest `L` such that both agents declared every
    /// layer `0..=L`. Messages are spoken at this layer.
    pub layer: u8,
    /// Messages of this peer refused since the handshake (each [`REFUSALS_PER_STEP`]
    /// lowers the level by one).
    pub refusals: u32,
}

/// Refused messages that lower an established peer's trust by one level.
pub const REFUSALS_PER_STEP: u32 = 8;

/// The lowest common layer of two declarations (ascending, distinct): the highest `L`
/// with `0..=L` in both, or `None` when either lacks layer 0.
pub fn common_layer(mine: &[u8], theirs: &[u8]) -> Option<u8> {
    let mut layer = None;
    for l in 0..=u8::MAX {
        if mine.binary_search(&l).is_ok() && theirs.binary_search(&l).is_ok() {
            layer = Some(l);
        } else {
            break;
        }
    }
    layer
}

/// Where the handshake with one peer stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handshake {
    /// This agent announced itself to the peer.
    pub announce_sent: bool,
    /// This agent announced before the peer did (it sends its capabilities on the
    /// peer's announcement; a responder, on the peer's capabilities).
    pub initiator: bool,
    /// The peer's verified announcement: its principal, layers, what it announced.
    pub announced: Option<(String, Vec<u8>, Announcement)>,
    /// This agent sent its capabilities.
    pub capabilities_sent: bool,
    /// The peer's capabilities.
    pub capabilities: Option<Capabilities>,
    /// Set when the handshake completed: the trust calibrated.
    pub trust: Option<Trust>,
}

impl Handshake {
    /// Whether all four steps are done both ways: substantive messages may flow.
    pub fn is_complete(&self) -> bool {
        self.trust.is_some()
    }
}
