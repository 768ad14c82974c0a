//! ACP (seed 004) beside the agent: the session of the core
//! ([`a2acp_core::bridge::acp::AcpSession`]) with this agent's identity key, fed from the
//! inbox and writing to the gateway through the [`link`], and the work it hands the agent
//! ([`Todo`]: requests and handoffs to take as threads, responses to this agent's own
//! requests, messages to record in the principal's audit log). The agent host applies
//! the todos between the core's steps; no protocol decision is made here.
//!
//! Configured by the `[acp]` table of `config.toml`:
//!
//! ```toml
//! [acp]
//! gateway = "https://relay.example:8443"   # the relay's ACP gateway (http:// on loopback)
//! nats = ["nats://nats.example:4222"]      # where the inbox agent.<id>.inbox is read
//! principal_id = "principal-alice"          # who this agent acts for
//! # agent_id = "alice"                      # default: the user part of the address
//! # gateway_ca = "ca.pem"                   # a private CA, relative to the home
//! # known_principals = ["principal-bob"]    # §4.4 "known principal"
//! # layers = [0, 1, 2, 3]                   # skill-layers-loaded
//! ```

pub mod link;

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use a2acp_core::bridge::acp::headers::{valid_agent_id, valid_principal_id};
use a2acp_core::bridge::acp::threads::Answer;
use a2acp_core::bridge::acp::{AcpConfig, AcpEvent, AcpOutput, AcpSession, SendError};
use a2acp_core::crypto::{IdentityKey, PublicKey};
use a2acp_core::Timestamp;
use serde::{Deserialize, Serialize};

pub use link::{AcpLink, Incoming, LinkConfig};

/// The JetStream stream the gateway keeps every inbox in.
pub const INBOX_STREAM: &str = "ACP_INBOX";

/// The inbox subject of the agent `agent_id` (seed 004 §5.1).
pub fn inbox_subject(agent_id: &str) -> String {
    format!("agent.{agent_id}.inbox")
}

/// The `[acp]` table of `config.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpFile {
    /// The gateway's base URL.
    pub gateway: String,
    /// The NATS servers the inbox is read from.
    pub nats: Vec<String>,
    /// This agent's principal.
    pub principal_id: String,
    /// This agent's `agent-id` (default: the user part of its address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// A PEM file (relative to the home) of the CA the gateway's certificate chains to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_ca: Option<String>,
    /// Principals this agent's principal knows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known_principals: Vec<String>,
    /// The skill layers declared (default `[0, 1, 2, 3]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<Vec<u8>>,
}

impl AcpFile {
    /// Checks the table; `user` is the address's user part.
    pub fn check(&self, user: &str) -> Result<(), String> {
        let id = self.agent_id.as_deref().unwrap_or(user);
        if !valid_agent_id(id) {
            return Err(format!(
                "[acp] agent_id `{id}`: 1–64 characters of a-z 0-9 _ -, starting with a letter or digit"
            ));
        }
        if !valid_principal_id(&self.principal_id) {
            return Err("[acp] principal_id: 1–128 bytes without control characters".into());
        }
        let (scheme, rest) = self
            .gateway
            .split_once("://")
            .ok_or("[acp] gateway: a URL, https://HOST:PORT")?;
        let host = rest.split(['/', ':']).next().unwrap_or("");
        let loopback = host == "localhost"
            || host == "[::1]"
            || host
                .parse::<std::net::Ipv4Addr>()
                .is_ok_and(|a| a.is_loopback());
        match scheme {
            "https" => {}
            "http" if loopback => {}
            "http" => {
                return Err(format!(
                    "[acp] gateway `{}`: off loopback the gateway is reached over https:// (TLS, seed 004 §7)",
                    self.gateway
                ))
            }
            _ => return Err("[acp] gateway: a URL, https://HOST:PORT".into()),
        }
        if self.nats.is_empty() {
            return Err("[acp] nats: at least one NATS server, nats://HOST:PORT".into());
        }
        for url in &self.nats {
            if !(url.starts_with("nats://") || url.starts_with("tls://")) {
                return Err(format!(
                    "[acp] nats `{url}`: nats://HOST:PORT or tls://HOST:PORT"
                ));
            }
        }
        if let Some(l) = &self.layers {
            if l.is_empty() || l.len() > 16 || l.iter().any(|x| *x > 63) {
                return Err("[acp] layers: 1–16 layers, each 0–63".into());
            }
        }
        Ok(())
    }

    /// This agent's `agent-id`.
    pub fn agent_id<'a>(&'a self, user: &'a str) -> &'a str {
        self.agent_id.as_deref().unwrap_or(user)
    }
}

/// Work for the agent that came out of the session.
#[derive(Debug, Clone, PartialEq)]
pub enum Todo {
    /// Something happened in the session.
    Event(AcpEvent),
    /// This agent's request `id` carries thread `thread`'s packets: tell the bridge.
    Asked {
        /// The thread.
        thread: String,
        /// The request's id.
        id: String,
    },
    /// The peer of thread `thread` cannot be reached (`why`).
    Unreachable {
        /// The thread.
        thread: String,
        /// Why.
        why: String,
    },
    /// A message went out or came in: the audit log records it.
    Exchanged(a2acp_core::agent::Exchange),
}

/// The session, its link and what waits for a handshake.
#[derive(Debug)]
pub struct AcpHost {
    session: AcpSession,
    link: AcpLink,
    agent_id: String,
    /// Answers without a request to answer, by peer, waiting for the handshake (a thread
    /// this agent opened), with their threads.
    waiting: BTreeMap<String, Vec<(String, Answer)>>,
    todo: VecDeque<Todo>,
}

impl AcpHost {
    /// Starts ACP for the agent of `identity` whose address's user part is `user`;
    /// `home` resolves the gateway's CA.
    pub fn start(
        file: &AcpFile,
        user: &str,
        home: &Path,
        identity: &IdentityKey,
        seed: [u8; 32],
    ) -> Result<AcpHost, String> {
        file.check(user)?;
        let agent_id = file.agent_id(user).to_string();
        let mut config = AcpConfig::new(&agent_id, &file.principal_id);
        if let Some(l) = &file.layers {
            let mut l = l.clone();
            l.sort_unstable();
            l.dedup();
            config.layers = l;
        }
        config.known_principals = file.known_principals.iter().cloned().collect();
        let link = AcpLink::start(
            LinkConfig {
                gateway: file.gateway.clone(),
                gateway_ca: file.gateway_ca.as_ref().map(|c| home.join(c)),
                nats: file.nats.clone(),
                agent_id: agent_id.clone(),
            },
            identity,
        )
        .map_err(|e| e.to_string())?;
        let mut session = AcpSession::new(config, identity.clone(), seed);
        session.register(&agent_id, identity.public());
        Ok(AcpHost {
            session,
            link,
            agent_id,
            waiting: BTreeMap::new(),
            todo: VecDeque::new(),
        })
    }

    /// Where the link's messages and keys arrive.
    pub fn incoming(&self) -> flume::Receiver<Incoming> {
        self.link.incoming()
    }

    /// The session (read only).
    pub fn session(&self) -> &AcpSession {
        &self.session
    }

    /// This agent's `agent-id`.
    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }

    /// The next piece of work for the agent.
    pub fn next_todo(&mut self) -> Option<Todo> {
        self.todo.pop_front()
    }

    /// Something from the link.
    pub fn incoming_item(&mut self, now: Timestamp, item: Incoming) {
        match item {
            Incoming::Message { bytes, sender } => {
                if let Some((id, key)) = &sender {
                    if let Ok(k) = PublicKey::from_bytes(key) {
                        if self.session.handshake(id).is_none() {
                            self.session.register(id, k);
                        }
                    }
                }
                self.session.handle(now, &bytes);
                let refused = self.pump();
                if !refused {
                    if let Some((id, _)) = sender {
                        let principal = a2acp_core::bridge::acp::exchange::principal_of(&bytes);
                        if let Some(x) = a2acp_core::bridge::acp::exchange::exchange(
                            &bytes,
                            a2acp_core::agent::ExchangeDirection::Received,
                            &id,
                            principal.as_deref().unwrap_or(""),
                            &self.agent_id,
                        ) {
                            self.todo.push_back(Todo::Exchanged(x));
                        }
                    }
                }
            }
            Incoming::Key { agent_id, key } => match key.map(|k| PublicKey::from_bytes(&k)) {
                Ok(Ok(k)) => {
                    self.session.register(&agent_id, k);
                    if let Err(e) = self.session.connect(now, &agent_id) {
                        tracing::warn!("ACP: cannot reach `{agent_id}`: {e}");
                    }
                    self.pump();
                }
                Ok(Err(_)) | Err(_) => {
                    let why = "no key is registered for it at the gateway";
                    tracing::warn!("ACP: cannot reach `{agent_id}`: {why}");
                    for (thread, _) in self.waiting.remove(&agent_id).unwrap_or_default() {
                        self.todo.push_back(Todo::Unreachable {
                            thread,
                            why: why.into(),
                        });
                    }
                }
            },
        }
    }

    /// What the ACP bridge released for `peer` in `thread`: the answer to the peer's
    /// request, or this agent's own request (after the handshake).
    pub fn deliver(&mut self, now: Timestamp, peer: &str, thread: &str, answer: Answer) {
        if let Some(r) = &answer.request {
            if let Err(e) = self
                .session
                .deliver(now, peer, Some(r), &answer.body, answer.sensitive)
            {
                tracing::warn!("ACP: cannot answer `{peer}`: {e}");
            }
            self.pump();
            return;
        }
        match self
            .session
            .request(now, peer, &answer.body, answer.sensitive)
        {
            Ok(id) => self.todo.push_back(Todo::Asked {
                thread: thread.to_string(),
                id,
            }),
            Err(SendError::HandshakeIncomplete(_) | SendError::UnknownAgent(_)) => {
                let first = !self.waiting.contains_key(peer);
                self.waiting
                    .entry(peer.to_string())
                    .or_default()
                    .push((thread.to_string(), answer));
                if first {
                    match self.session.connect(now, peer) {
                        Ok(()) => {}
                        Err(SendError::UnknownAgent(_)) => self.link.look_up(peer),
                        Err(e) => tracing::warn!("ACP: cannot reach `{peer}`: {e}"),
                    }
                }
            }
            Err(e) => tracing::warn!("ACP: cannot ask `{peer}`: {e}"),
        }
        self.pump();
    }

    /// The handshake with `peer` completed: what waited for it goes.
    pub fn established(&mut self, now: Timestamp, peer: &str) {
        for (thread, answer) in self.waiting.remove(peer).unwrap_or_default() {
            self.deliver(now, peer, &thread, answer);
        }
    }

    /// Answers the peer's request `id` with an error (a thread it could not open).
    pub fn refuse(&mut self, now: Timestamp, peer: &str, id: &str, code: i64, message: String) {
        if let Err(e) = self
            .session
            .respond(now, peer, id, Err((code, message)), false)
        {
            tracing::debug!("ACP: cannot refuse `{peer}`'s `{id}`: {e}");
        }
        self.pump();
    }

    /// When [`AcpHost::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.session.poll_timeout()
    }

    /// The session's deadlines.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.session.handle_timeout(now);
        self.pump();
    }

    /// Drains the session: messages to the gateway (recorded for the audit log), events
    /// for the agent. Whether a received message was refused.
    fn pump(&mut self) -> bool {
        let mut refused = false;
        while let Some(o) = self.session.poll_output() {
            match o {
                AcpOutput::Send { to, json } => {
                    let principal = self
                        .session
                        .handshake(&to)
                        .and_then(|h| h.announced.as_ref())
                        .map(|(p, _, _)| p.clone())
                        .unwrap_or_default();
                    if let Some(x) = a2acp_core::bridge::acp::exchange::exchange(
                        json.as_bytes(),
                        a2acp_core::agent::ExchangeDirection::Sent,
                        &to,
                        &principal,
                        &to,
                    ) {
                        self.todo.push_back(Todo::Exchanged(x));
                    }
                    self.link.post(&to, json);
                }
                AcpOutput::Refusal { to, json } => {
                    refused = true;
                    if let Some(to) = to {
                        self.link.post(&to, json);
                    }
                }
                AcpOutput::Event(e) => {
                    if matches!(*e, AcpEvent::Refused { .. }) {
                        refused = true;
                    }
                    self.todo.push_back(Todo::Event(*e));
                }
            }
        }
        refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> AcpFile {
        AcpFile {
            gateway: "https://relay.example:8443".into(),
            nats: vec!["nats://nats.example:4222".into()],
            principal_id: "principal-alice".into(),
            agent_id: None,
            gateway_ca: None,
            known_principals: vec![],
            layers: None,
        }
    }

    #[test]
    fn the_acp_table_is_checked() {
        assert_eq!(file().check("alice"), Ok(()));
        assert_eq!(file().agent_id("alice"), "alice");
        let mut f = file();
        f.gateway = "http://127.0.0.1:8443".into();
        assert_eq!(f.check("alice"), Ok(()));
        f.gateway = "http://relay.example:8443".into();
        assert!(f.check("alice").unwrap_err().contains("https://"));
        f.gateway = "ftp://x".into();
        assert!(f.check("alice").is_err());
        let mut f = file();
        assert!(f.check("Alice Smith").unwrap_err().contains("agent_id"));
        f.agent_id = Some("alice-2".into());
        assert_eq!(f.check("Alice Smith"), Ok(()));
        let mut f = file();
        f.principal_id = String::new();
        assert!(f.check("alice").is_err());
        let mut f = file();
        f.nats = vec![];
        assert!(f.check("alice").is_err());
        f.nats = vec!["http://nats".into()];
        assert!(f.check("alice").is_err());
        let mut f = file();
        f.layers = Some(vec![0, 64]);
        assert!(f.check("alice").is_err());
        // Unknown keys are refused, not ignored.
        assert!(toml::from_str::<AcpFile>(
            "gateway = \"https://x\"\nnats = [\"nats://y:4222\"]\nprincipal_id = \"p\"\nsecret = 1\n"
        )
        .is_err());
    }
}
