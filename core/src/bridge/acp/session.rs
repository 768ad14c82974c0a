//! One agent's ACP session with all its peers ([`AcpSession`]), sans-IO: received bytes
//! in ([`AcpSession::handle`]), signed messages and typed events out
//! ([`AcpSession::poll_output`]), deadlines through [`AcpSession::poll_timeout`] and
//! [`AcpSession::handle_timeout`]. No clock, no randomness but the seeded generator.
//!
//! Every received message passes, in order: the form ([`Message::parse`]), the sender's
//! registered key, the signature, the timestamp's skew window, the replay cache, the
//! handshake, the type's rules, decryption. The first failure refuses it unprocessed: a
//! request or handoff is answered with a signed JSON-RPC error, anything else only
//! reported ([`AcpEvent::Refused`]). A request received must be answered
//! ([`AcpSession::respond`]); past its deadline the session answers it with
//! [`code::TIMEOUT`] itself — never silence.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::bridge::acp::error::{code, AcpError};
use crate::bridge::acp::handshake::{
    common_layer, Announcement, Capabilities, Handshake, Trust, TrustLevel, COORDINATION_LAYER,
    REFUSALS_PER_STEP,
};
use crate::bridge::acp::headers::{valid_agent_id, Headers, MessageType, TRUST_LAYER_VERSION};
use crate::bridge::acp::message::{Kind, Message, Method};
use crate::bridge::acp::{seal, sign};
use crate::crypto::{IdentityKey, PublicKey};
use crate::rng::DetRng;

pub use crate::bridge::acp::io::*;
use crate::time::Timestamp;

#[derive(Debug, Clone, Default)]
struct Peer {
    handshake: Handshake,
    /// Replay cache: key → the message's timestamp.
    seen: BTreeMap<[u8; 32], Timestamp>,
    /// Its requests and handoffs this agent must answer: id → deadline.
    inbound: BTreeMap<String, Timestamp>,
    /// This agent's requests and handoffs waiting for its answer: id → until when.
    outbound: BTreeMap<String, Timestamp>,
}

/// One agent's ACP session with its peers.
#[derive(Debug)]
pub struct AcpSession {
    config: AcpConfig,
    identity: IdentityKey,
    rng: DetRng,
    registry: BTreeMap<String, PublicKey>,
    peers: BTreeMap<String, Peer>,
    out: std::collections::VecDeque<AcpOutput>,
}

fn replay_key(tag: &str, bytes: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(tag.as_bytes());
    h.update([0]);
    h.update(bytes);
    h.finalize().into()
}

/// Best-effort sender and id of a message that failed its checks, for the error reply.
fn sender_of(bytes: &[u8]) -> (Option<String>, Option<String>, bool) {
    let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
        return (None, None, true);
    };
    let Some(o) = v.as_object() else {
        return (None, None, true);
    };
    let call = o.contains_key("method");
    let answer = call && o.contains_key("id")
        || !call && !o.contains_key("result") && !o.contains_key("error");
    let agent = ["params", "result"]
        .iter()
        .find_map(|k| o.get(*k))
        .and_then(|c| c.get("headers"))
        .and_then(|h| h.get("agent-id"))
        .and_then(Value::as_str)
        .filter(|a| valid_agent_id(a))
        .map(str::to_string);
    let id = o
        .get("id")
        .and_then(Value::as_str)
        .filter(|i| crate::bridge::acp::message::valid_id(i))
        .map(str::to_string);
    (agent, id, answer)
}

impl AcpSession {
    /// A session for this agent (`identity` its Ed25519 identity key), drawing its
    /// randomness (ids, ephemeral keys) from `seed`.
    pub fn new(config: AcpConfig, identity: IdentityKey, seed: [u8; 32]) -> AcpSession {
        let mut config = config;
        config.layers.sort_unstable();
        config.layers.dedup();
        AcpSession {
            config,
            identity,
            rng: DetRng::from_seed(seed),
            registry: BTreeMap::new(),
            peers: BTreeMap::new(),
            out: Default::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AcpConfig {
        &self.config
    }

    /// The configuration, to change (known principals, relationships).
    pub fn config_mut(&mut self) -> &mut AcpConfig {
        &mut self.config
    }

    /// Registers `agent_id`'s public key: its messages are verified against it (§4.2).
    /// A changed key forgets the peer's handshake.
    pub fn register(&mut self, agent_id: &str, key: PublicKey) {
        if self.registry.insert(agent_id.to_string(), key.clone()) != Some(key) {
            self.peers.remove(agent_id);
        }
    }

    /// Where the handshake with `peer` stands.
    pub fn handshake(&self, peer: &str) -> Option<&Handshake> {
        self.peers.get(peer).map(|p| &p.handshake)
    }

    /// The trust of an established peer.
    pub fn trust(&self, peer: &str) -> Option<&Trust> {
        self.handshake(peer).and_then(|h| h.trust.as_ref())
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<AcpOutput> {
        self.out.pop_front()
    }

    /// When [`AcpSession::handle_timeout`] is due next.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.peers
            .values()
            .flat_map(|p| p.inbound.values().chain(p.outbound.values()))
            .min()
            .copied()
    }

    /// Requests past their deadline are answered with [`code::TIMEOUT`]; this agent's
    /// own past their wait are forgotten; the replay caches drop what left the window.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let skew = self.config.skew;
        let mut late = Vec::new();
        let mut unanswered = Vec::new();
        for (name, p) in &mut self.peers {
            p.inbound.retain(|id, d| {
                let keep = *d > now;
                if !keep {
                    late.push((name.clone(), id.clone()));
                }
                keep
            });
            p.outbound.retain(|id, d| {
                let keep = *d > now;
                if !keep {
                    unanswered.push((name.clone(), id.clone()));
                }
                keep
            });
            let oldest = Timestamp(now.0.saturating_sub(skew.as_millis() as u64));
            p.seen.retain(|_, t| *t >= oldest);
        }
        for (peer, id) in late {
            let kind = Kind::Error {
                code: code::TIMEOUT,
                message: format!(
                    "not answered within {} s",
                    self.config.answer_within.as_secs()
                ),
                header: None,
            };
            if let Ok(json) = self.write(now, &peer, &kind, Some(&id), None, false) {
                self.out.push_back(AcpOutput::Send {
                    to: peer.clone(),
                    json,
                });
            }
            self.event(AcpEvent::TimedOut { peer, id });
        }
        for (peer, id) in unanswered {
            self.event(AcpEvent::Unanswered { peer, id });
        }
    }

    /// Starts the handshake with `peer`: sends this agent's announcement.
    pub fn connect(&mut self, now: Timestamp, peer: &str) -> Result<(), SendError> {
        if !self.registry.contains_key(peer) {
            return Err(SendError::UnknownAgent(peer.to_string()));
        }
        let p = self.peers.entry(peer.to_string()).or_default();
        if p.handshake.is_complete() || p.handshake.announce_sent {
            return Ok(());
        }
        p.handshake.initiator = p.handshake.announced.is_none();
        self.announce(now, peer)
    }

    /// Sends a request to an established peer: its id. `sensitive`: the body holds
    /// something ask_first or never_share, so it is encrypted to the peer.
    pub fn request(
        &mut self,
        now: Timestamp,
        peer: &str,
        body: &Map<String, Value>,
        sensitive: bool,
    ) -> Result<String, SendError> {
        self.call(now, peer, Method::Request, body, sensitive)
    }

    /// Hands a task over to an established peer whose common layer includes
    /// coordination: the handoff's id (it is answered like a request).
    pub fn handoff(
        &mut self,
        now: Timestamp,
        peer: &str,
        handoff: &Handoff,
        sensitive: bool,
    ) -> Result<String, SendError> {
        self.call(now, peer, Method::Handoff, &handoff.to_body(), sensitive)
    }

    /// Sends a notification to an established peer.
    pub fn notify(
        &mut self,
        now: Timestamp,
        peer: &str,
        body: &Map<String, Value>,
        sensitive: bool,
    ) -> Result<(), SendError> {
        self.established(peer)?;
        let json = self
            .write(
                now,
                peer,
                &Kind::Call(Method::Notification),
                None,
                Some(body),
                sensitive,
            )
            .map_err(SendError::Encoding)?;
        self.send(peer, json);
        Ok(())
    }

    /// Answers the request or handoff `id` of `peer`: a result body, or an error (code,
    /// message). Once only, and before its deadline.
    pub fn respond(
        &mut self,
        now: Timestamp,
        peer: &str,
        id: &str,
        outcome: Result<&Map<String, Value>, (i64, String)>,
        sensitive: bool,
    ) -> Result<(), SendError> {
        let waiting = self
            .peers
            .get_mut(peer)
            .and_then(|p| p.inbound.remove(id))
            .is_some();
        if !waiting {
            return Err(SendError::UnknownRequest(id.to_string()));
        }
        let json = match outcome {
            Ok(body) => self.write(now, peer, &Kind::Result, Some(id), Some(body), sensitive),
            Err((code, message)) => self.write(
                now,
                peer,
                &Kind::Error {
                    code,
                    message,
                    header: None,
                },
                Some(id),
                None,
                false,
            ),
        }
        .map_err(SendError::Encoding)?;
        self.send(peer, json);
        Ok(())
    }

    /// Delivers what this agent has for `peer`: the answer to its request `request` if
    /// that still waits, else (answered, timed out, or none) a notification with `body`.
    /// What the ACP bridge on the agent releases ([`crate::bridge::acp::threads::Answer`])
    /// goes out through here.
    pub fn deliver(
        &mut self,
        now: Timestamp,
        peer: &str,
        request: Option<&str>,
        body: &Map<String, Value>,
        sensitive: bool,
    ) -> Result<(), SendError> {
        let waiting = request.filter(|id| {
            self.peers
                .get(peer)
                .is_some_and(|p| p.inbound.contains_key(*id))
        });
        match waiting {
            Some(id) => self.respond(now, peer, id, Ok(body), sensitive),
            None => self.notify(now, peer, body, sensitive),
        }
    }

    /// One received message (addressed to this agent).
    pub fn handle(&mut self, now: Timestamp, bytes: &[u8]) {
        let m = match Message::parse(bytes) {
            Ok(m) => m,
            Err(e) => {
                // An oversized message is not read at all, not even for its sender.
                let (to, id, answer) = if matches!(e, AcpError::TooLarge { .. }) {
                    (None, None, true)
                } else {
                    sender_of(bytes)
                };
                self.refuse(now, to, id, answer, e);
                return;
            }
        };
        let peer = m.headers.agent_id.clone();
        let answer = matches!(m.kind, Kind::Call(Method::Request | Method::Handoff));
        let known = self.registry.contains_key(&peer);
        if let Err(e) = self.verified(&m) {
            self.refuse(now, Some(peer).filter(|_| known), m.id.clone(), answer, e);
            return;
        }
        if let Err(e) = self.take(now, &m) {
            // A refusal of a message the peer really sent counts against its trust.
            if let Some(t) = self
                .peers
                .get_mut(&peer)
                .and_then(|p| p.handshake.trust.as_mut())
            {
                t.refusals = t.refusals.saturating_add(1);
                if t.refusals % REFUSALS_PER_STEP == 0 {
                    t.level = t.level.lower();
                }
            }
            // A replay is not answered under its id: the original may still wait for
            // its real answer.
            let id = m.id.clone().filter(|_| !matches!(e, AcpError::Replay(_)));
            self.refuse(now, Some(peer), id, answer, e);
        }
    }

    /// The sender's registered key verifies the signature.
    fn verified(&self, m: &Message) -> Result<(), AcpError> {
        let key = self
            .registry
            .get(&m.headers.agent_id)
            .ok_or_else(|| AcpError::UnknownAgent(m.headers.agent_id.clone()))?;
        sign::verify(&m.value, key)
    }

    fn take(&mut self, now: Timestamp, m: &Message) -> Result<(), AcpError> {
        let h = &m.headers;
        let skew = self.config.skew.as_millis() as u64;
        if h.time.0.abs_diff(now.0) > skew {
            return Err(AcpError::Replay(format!(
                "timestamp {} is more than {} s from this agent's clock",
                h.timestamp,
                self.config.skew.as_secs()
            )));
        }
        let peer = self.peers.entry(h.agent_id.clone()).or_default();
        if peer.seen.len() >= MAX_SEEN_PER_PEER {
            return Err(AcpError::RateLimited(format!(
                "more than {MAX_SEEN_PER_PEER} messages within the skew window"
            )));
        }
        let rkey = match (&m.kind, &m.id) {
            (Kind::Call(_), Some(id)) => replay_key("id", id.as_bytes()),
            _ => {
                let sig = m
                    .container()
                    .map(sign::read_signature)
                    .transpose()?
                    .unwrap_or([0; 64]);
                replay_key("sig", &sig)
            }
        };
        if peer.seen.contains_key(&rkey) {
            return Err(AcpError::Replay(match m.id {
                Some(ref id) if matches!(m.kind, Kind::Call(_)) => {
                    format!("id `{id}` was seen before")
                }
                _ => "this message was seen before".into(),
            }));
        }
        peer.seen.insert(rkey, h.time);
        match m.kind {
            Kind::Call(Method::Announce) => self.announced(now, m),
            Kind::Call(Method::Capabilities) => self.capabilities(now, m),
            Kind::Call(method) => self.substantive(now, m, method),
            Kind::Result | Kind::Error { .. } => self.response(m),
        }
    }

    fn announced(&mut self, now: Timestamp, m: &Message) -> Result<(), AcpError> {
        let h = &m.headers;
        if seal::is_encrypted(&m.body) {
            return Err(AcpError::InvalidBody(
                "a handshake step is not encrypted".into(),
            ));
        }
        let a = Announcement::parse(&m.body)?;
        if h.skill_layers_loaded.is_empty() {
            return Err(AcpError::Layers(
                "an agent that declares no skill layers is declined".into(),
            ));
        }
        if common_layer(&self.config.layers, &h.skill_layers_loaded).is_none() {
            return Err(AcpError::Layers(
                "no common layer: layer 0 (the trust framework) is not declared by both".into(),
            ));
        }
        let peer = self.peers.entry(h.agent_id.clone()).or_default();
        if peer.handshake.announced.is_some() {
            // The peer announces again (it restarted): the handshake starts over, its
            // pending exchanges are void.
            peer.handshake = Handshake::default();
            peer.inbound.clear();
            peer.outbound.clear();
        }
        peer.handshake.announced = Some((h.principal_id.clone(), h.skill_layers_loaded.clone(), a));
        if !peer.handshake.announce_sent {
            peer.handshake.initiator = false;
            self.announce(now, &h.agent_id)
                .map_err(|e| AcpError::InvalidBody(e.to_string()))?;
        } else if peer.handshake.initiator && !peer.handshake.capabilities_sent {
            self.send_capabilities(now, &h.agent_id)?;
        }
        Ok(())
    }

    fn capabilities(&mut self, now: Timestamp, m: &Message) -> Result<(), AcpError> {
        let name = &m.headers.agent_id;
        let peer = self.peers.entry(name.clone()).or_default();
        if peer.handshake.announced.is_none() {
            return Err(AcpError::HandshakeRequired(
                "capabilities before the announcement".into(),
            ));
        }
        if seal::is_encrypted(&m.body) {
            return Err(AcpError::InvalidBody(
                "a handshake step is not encrypted".into(),
            ));
        }
        let c = Capabilities::parse(&m.body)?;
        let complete = peer.handshake.is_complete();
        peer.handshake.capabilities = Some(c);
        if complete {
            // Shared again after the handshake: kept, nothing more.
            return Ok(());
        }
        if !peer.handshake.capabilities_sent {
            self.send_capabilities(now, name)?;
        }
        self.establish(name);
        Ok(())
    }

    fn establish(&mut self, name: &str) {
        let Some(peer) = self.peers.get_mut(name) else {
            return;
        };
        let hs = &mut peer.handshake;
        let (Some((principal, layers, _)), Some(caps)) = (&hs.announced, &hs.capabilities) else {
            return;
        };
        if !hs.capabilities_sent || !hs.announce_sent {
            return;
        }
        let level = if self.config.known_principals.contains(principal) {
            TrustLevel::Known
        } else if self.config.relationships.contains(principal) {
            TrustLevel::Elevated
        } else {
            TrustLevel::Baseline
        };
        let trust = Trust {
            level,
            layer: common_layer(&self.config.layers, layers).unwrap_or(0),
            refusals: 0,
        };
        hs.trust = Some(trust.clone());
        let event = AcpEvent::Established {
            peer: name.to_string(),
            principal: principal.clone(),
            trust,
            capabilities: caps.clone(),
        };
        self.event(event);
    }

    fn substantive(&mut self, now: Timestamp, m: &Message, method: Method) -> Result<(), AcpError> {
        let h = &m.headers;
        let me = self.config.agent_id.clone();
        let layers = self.config.layers.clone();
        let answer_within = self.config.answer_within;
        let peer = self.peers.entry(h.agent_id.clone()).or_default();
        let hs = &mut peer.handshake;
        let Some(trust) = hs.trust.as_mut() else {
            return Err(AcpError::HandshakeRequired(format!(
                "`{}` before the four-step handshake completed",
                method.as_str()
            )));
        };
        let principal = hs
            .announced
            .as_ref()
            .map(|a| a.0.clone())
            .unwrap_or_default();
        if principal != h.principal_id {
            return Err(AcpError::HandshakeRequired(
                "the principal differs from the one announced; announce again".into(),
            ));
        }
        // Declared layers are recalibrated with every message.
        trust.layer = common_layer(&layers, &h.skill_layers_loaded)
            .ok_or_else(|| AcpError::Layers("layer 0 is no longer declared".into()))?;
        if method == Method::Handoff && trust.layer < COORDINATION_LAYER {
            return Err(AcpError::Layers(format!(
                "a handoff needs layers 0-{COORDINATION_LAYER} declared by both agents; the common layer is {}",
                trust.layer
            )));
        }
        if matches!(method, Method::Request | Method::Handoff)
            && peer.inbound.len() >= MAX_PENDING_PER_PEER
        {
            return Err(AcpError::RateLimited(format!(
                "{MAX_PENDING_PER_PEER} requests already wait for an answer"
            )));
        }
        let encrypted = seal::is_encrypted(&m.body);
        let body = if encrypted {
            seal::open(&m.body, &h.to_json(), &h.agent_id, &me, &self.identity)?
        } else {
            m.body.clone()
        };
        let deadline = now.add(answer_within);
        let event = match method {
            Method::Request => AcpEvent::Request {
                peer: h.agent_id.clone(),
                principal,
                id: m.id.clone().unwrap_or_default(),
                body,
                encrypted,
                deadline,
            },
            Method::Handoff => AcpEvent::Handoff {
                peer: h.agent_id.clone(),
                principal,
                id: m.id.clone().unwrap_or_default(),
                handoff: Handoff::parse(&body)?,
                encrypted,
                deadline,
            },
            _ => AcpEvent::Notification {
                peer: h.agent_id.clone(),
                body,
                encrypted,
            },
        };
        if let (Some(id), Some(p)) = (&m.id, self.peers.get_mut(&h.agent_id)) {
            p.inbound.insert(id.clone(), deadline);
        }
        self.event(event);
        Ok(())
    }

    fn response(&mut self, m: &Message) -> Result<(), AcpError> {
        let h = &m.headers;
        let id = m.id.clone().unwrap_or_default();
        let me = self.config.agent_id.clone();
        let waiting = self
            .peers
            .get_mut(&h.agent_id)
            .is_some_and(|p| p.outbound.contains_key(&id));
        if !waiting {
            return Err(AcpError::UnknownRequest(id));
        }
        let outcome = match &m.kind {
            Kind::Error {
                code,
                message,
                header,
            } => Err(RemoteError {
                code: *code,
                message: message.clone(),
                header: header.clone(),
            }),
            _ if seal::is_encrypted(&m.body) => Ok(seal::open(
                &m.body,
                &h.to_json(),
                &h.agent_id,
                &me,
                &self.identity,
            )?),
            _ => Ok(m.body.clone()),
        };
        if let Some(p) = self.peers.get_mut(&h.agent_id) {
            p.outbound.remove(&id);
        }
        self.event(AcpEvent::Response {
            peer: h.agent_id.clone(),
            id,
            outcome,
        });
        Ok(())
    }

    fn refuse(
        &mut self,
        now: Timestamp,
        to: Option<String>,
        id: Option<String>,
        answer: bool,
        e: AcpError,
    ) {
        if answer {
            let kind = Kind::Error {
                code: e.code(),
                message: e.to_string(),
                header: e.header().map(str::to_string),
            };
            let peer = to.clone().unwrap_or_default();
            if let Ok(json) = self.write(now, &peer, &kind, id.as_deref(), None, false) {
                self.out.push_back(AcpOutput::Refusal {
                    to: to.clone(),
                    json,
                });
            }
        }
        self.event(AcpEvent::Refused { peer: to, error: e });
    }

    fn established(&self, peer: &str) -> Result<&Trust, SendError> {
        if !self.registry.contains_key(peer) {
            return Err(SendError::UnknownAgent(peer.to_string()));
        }
        self.trust(peer)
            .ok_or_else(|| SendError::HandshakeIncomplete(peer.to_string()))
    }

    fn call(
        &mut self,
        now: Timestamp,
        peer: &str,
        method: Method,
        body: &Map<String, Value>,
        sensitive: bool,
    ) -> Result<String, SendError> {
        let trust = self.established(peer)?;
        if method == Method::Handoff && trust.layer < COORDINATION_LAYER {
            return Err(SendError::Layers(format!(
                "`{peer}` shares layers 0-{} only; a handoff needs 0-{COORDINATION_LAYER}",
                trust.layer
            )));
        }
        if self
            .peers
            .get(peer)
            .is_some_and(|p| p.outbound.len() >= MAX_PENDING_PER_PEER)
        {
            return Err(SendError::TooMany(peer.to_string()));
        }
        let mut b = [0u8; 16];
        self.rng.fill(&mut b);
        let id = uuid::Builder::from_random_bytes(b)
            .into_uuid()
            .hyphenated()
            .to_string();
        let json = self
            .write(
                now,
                peer,
                &Kind::Call(method),
                Some(&id),
                Some(body),
                sensitive,
            )
            .map_err(SendError::Encoding)?;
        let until = now.add(self.config.wait_for_answer);
        if let Some(p) = self.peers.get_mut(peer) {
            p.outbound.insert(id.clone(), until);
        }
        self.send(peer, json);
        Ok(id)
    }

    fn announce(&mut self, now: Timestamp, peer: &str) -> Result<(), SendError> {
        let body = self.config.announcement.to_body();
        let json = self
            .write(
                now,
                peer,
                &Kind::Call(Method::Announce),
                None,
                Some(&body),
                false,
            )
            .map_err(SendError::Encoding)?;
        if let Some(p) = self.peers.get_mut(peer) {
            p.handshake.announce_sent = true;
        }
        self.send(peer, json);
        Ok(())
    }

    fn send_capabilities(&mut self, now: Timestamp, peer: &str) -> Result<(), AcpError> {
        let body = self.config.capabilities.to_body();
        let json = self.write(
            now,
            peer,
            &Kind::Call(Method::Capabilities),
            None,
            Some(&body),
            false,
        )?;
        if let Some(p) = self.peers.get_mut(peer) {
            p.handshake.capabilities_sent = true;
        }
        self.send(peer, json);
        Ok(())
    }

    /// This agent's headers for a message of type `t` at `now`.
    pub fn headers(&self, now: Timestamp, t: MessageType) -> Headers {
        Headers {
            agent_id: self.config.agent_id.clone(),
            principal_id: self.config.principal_id.clone(),
            timestamp: now.to_rfc3339(),
            time: Timestamp((now.0 / 1000).saturating_mul(1000)),
            message_type: t,
            trust_layer_version: TRUST_LAYER_VERSION.into(),
            skill_layers_loaded: self.config.layers.clone(),
        }
    }

    fn write(
        &mut self,
        now: Timestamp,
        peer: &str,
        kind: &Kind,
        id: Option<&str>,
        body: Option<&Map<String, Value>>,
        sensitive: bool,
    ) -> Result<String, AcpError> {
        let t = match kind {
            Kind::Call(m) => m.message_type(),
            _ => MessageType::Response,
        };
        let headers = self.headers(now, t);
        let sealed;
        let body = match body {
            Some(b) if sensitive => {
                let key = self
                    .registry
                    .get(peer)
                    .ok_or_else(|| AcpError::UnknownAgent(peer.to_string()))?;
                let eph = self.rng.bytes32();
                sealed = seal::seal(b, &headers.to_json(), &self.config.agent_id, peer, key, eph)?;
                Some(&sealed)
            }
            b => b,
        };
        Message::build(kind, id, &headers, body, &self.identity)
    }

    fn send(&mut self, to: &str, json: String) {
        self.out.push_back(AcpOutput::Send {
            to: to.to_string(),
            json,
        });
    }

    fn event(&mut self, e: AcpEvent) {
        self.out.push_back(AcpOutput::Event(Box::new(e)));
    }
}
