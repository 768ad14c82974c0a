//! A hostile peer: a real identity registered at the relay of a [`Net`], driven packet by
//! packet by a test instead of by an agent state machine.
//!
//! It opens and continues threads with an agent under test and sends it arbitrary
//! plaintexts — raw JSON values, or raw bytes — each sealed and signed with the thread
//! sessions of [`crate::crypto::ThreadSession`] exactly as an agent would, so the agent
//! cannot tell a mutated packet from an honest peer's by its envelope. What the agent
//! sends back is opened and kept in [`HostilePeer::received`].
//!
//! ```
//! use a2acp_core::harness::{dinner, hostile::HostilePeer, Net};
//! use a2acp_core::Timestamp;
//! use serde_json::json;
//!
//! let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
//! let mut net = Net::new("a2acp.io", start, [7; 32]);
//! let alice = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
//! net.connect(alice);
//! let mut mallory = HostilePeer::join(&mut net, "mallory", [66; 32]).unwrap();
//! let to = net.address(alice);
//! let thread = mallory.new_thread_id();
//! let p = mallory.packet(&net, &to, &thread, "context", json!({
//!     "intent": {"category": "scheduling", "summary": "Dinner?"},
//!     "needs": [{"field": "dietary", "priority": "required", "reason": "menu"}],
//! }));
//! mallory.send(&mut net, &to, &p).unwrap();
//! mallory.pump(&mut net);
//! assert!(net.nodes[alice].agent.thread(&thread).is_some());
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use super::Net;
use crate::address::Address;
use crate::crypto::{thread_tag, Direction, Envelope, IdentityKey, PublicKey, ThreadSession};
use crate::link::{challenge_signed_bytes, ClientFrame, ErrorCode, RelayFrame, REGISTER_LABEL};
use crate::rng::DetRng;

/// What went wrong driving a hostile peer.
#[derive(Debug, thiserror::Error)]
pub enum HostileError {
    /// The relay did not let the peer in.
    #[error("the relay refused the registration of {address}: {reason}")]
    Registration {
        /// The address asked for.
        address: String,
        /// What the relay answered (or that it answered nothing).
        reason: String,
    },
    /// The relay knows no key for the agent.
    #[error("no key registered for {0}")]
    UnknownAgent(Address),
    /// The packet could not be sealed.
    #[error("could not seal for thread {thread}: {reason}")]
    Seal {
        /// The thread.
        thread: String,
        /// The session's error.
        reason: String,
    },
    /// The packet has no `thread_id` string.
    #[error("the packet has no thread_id")]
    NoThreadId,
}

/// One packet the agent sent to the hostile peer, opened.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// The thread id inside the envelope.
    pub thread_id: String,
    /// The sender (the agent).
    pub from: Address,
    /// The plaintext as JSON (`Value::Null` if it is not JSON).
    pub packet: Value,
}

impl Received {
    /// The packet's `type`.
    pub fn kind(&self) -> &str {
        self.packet
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// The peer's side of one thread.
struct PeerThread {
    session: ThreadSession,
    initiator: bool,
    peer: Address,
}

/// A peer with a real identity, registered at the relay of a [`Net`], that sends whatever
/// it is told to (see the module documentation).
pub struct HostilePeer {
    /// Its address.
    pub address: Address,
    identity: IdentityKey,
    client: usize,
    rng: DetRng,
    next_seq: u64,
    keys: BTreeMap<Address, PublicKey>,
    threads: BTreeMap<String, PeerThread>,
    tags: BTreeMap<(Address, [u8; 16]), String>,
    /// Envelopes sent and not yet accepted by the relay, by `seq`.
    in_flight: BTreeMap<u64, Envelope>,
    /// Envelopes the relay refused for now (rate limit, full queue): sent again by
    /// [`HostilePeer::pump`].
    refused_for_now: BTreeMap<u64, Envelope>,
    /// Every packet the agents sent it, in order of arrival.
    pub received: Vec<Received>,
    /// Every other refusal of the relay (code, message).
    pub relay_errors: Vec<(ErrorCode, String)>,
    /// Envelopes addressed to it that did not open.
    pub unopened: usize,
}

impl HostilePeer {
    /// Registers `agent:<user>@<the relay's domain>` with the identity of `seed` at the
    /// relay of `net` and authenticates.
    pub fn join(net: &mut Net, user: &str, seed: [u8; 32]) -> Result<Self, HostileError> {
        let domain = net.relay.config().domain.clone();
        let address = Address::new(user, &domain).map_err(|e| HostileError::Registration {
            address: format!("agent:{user}@{domain}"),
            reason: e.to_string(),
        })?;
        let identity = IdentityKey::from_seed(seed);
        let client = net.add_client();
        let mut peer = HostilePeer {
            address,
            identity,
            client,
            rng: DetRng::from_seed(seed),
            next_seq: 1,
            keys: BTreeMap::new(),
            threads: BTreeMap::new(),
            tags: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            refused_for_now: BTreeMap::new(),
            received: Vec::new(),
            relay_errors: Vec::new(),
            unopened: 0,
        };
        peer.connect(net)?;
        Ok(peer)
    }

    /// Connects (again) and authenticates, e.g. after the relay restarted.
    pub fn connect(&mut self, net: &mut Net) -> Result<(), HostileError> {
        let address = self.address.to_string();
        let refused = |reason: String| HostileError::Registration {
            address: address.clone(),
            reason,
        };
        net.connect_client(self.client);
        net.settle();
        let challenge = net.client_inbox(self.client).into_iter().find_map(|b| {
            match RelayFrame::from_bytes(&b) {
                Ok(RelayFrame::Challenge { nonce, domain, ts }) => Some((nonce, domain, ts)),
                _ => None,
            }
        });
        let Some((nonce, domain, ts)) = challenge else {
            return Err(refused("no challenge".into()));
        };
        let key = self.identity.public().to_bytes();
        let msg = challenge_signed_bytes(
            REGISTER_LABEL,
            &nonce,
            &domain,
            ts,
            &self.address,
            Some(&key),
        );
        let register = ClientFrame::Register {
            address: self.address.clone(),
            key,
            ts,
            sig: self.identity.sign(&msg),
        };
        net.client_send(self.client, register.to_bytes());
        net.settle();
        let mut ok = false;
        for b in net.client_inbox(self.client) {
            match RelayFrame::from_bytes(&b) {
                Ok(RelayFrame::AuthOk { .. }) => ok = true,
                Ok(RelayFrame::Error { message, .. }) if !ok => return Err(refused(message)),
                Ok(other) => self.take_frame(net, other),
                Err(_) => {}
            }
        }
        if !ok {
            return Err(refused("no answer".into()));
        }
        // What was sent while it was away goes again.
        let pending: Vec<(u64, Envelope)> = std::mem::take(&mut self.in_flight)
            .into_iter()
            .chain(std::mem::take(&mut self.refused_for_now))
            .collect();
        for (seq, env) in pending {
            self.put(net, seq, env);
        }
        Ok(())
    }

    /// A fresh thread id (`thr_` and 12 characters, like an agent's).
    pub fn new_thread_id(&mut self) -> String {
        self.rng.id("thr_", 12)
    }

    /// A fresh packet id.
    pub fn new_packet_id(&mut self) -> String {
        self.rng.id("pkt_", 12)
    }

    /// A packet with a full header (`protocol` 0.2, a fresh `packet_id`, `from` this
    /// peer, `to`, the net's time, `type` `kind`) and the fields of `body` (an object;
    /// anything else adds nothing). The result is a plain JSON value: mutate it at will.
    pub fn packet(
        &mut self,
        net: &Net,
        to: &Address,
        thread_id: &str,
        kind: &str,
        body: Value,
    ) -> Value {
        let mut m = Map::new();
        m.insert("protocol".into(), "a2acp/0.2".into());
        m.insert("packet_id".into(), self.new_packet_id().into());
        m.insert("thread_id".into(), thread_id.into());
        m.insert("from".into(), self.address.as_str().into());
        m.insert("to".into(), to.as_str().into());
        m.insert("timestamp".into(), net.now.to_rfc3339().into());
        m.insert("type".into(), kind.into());
        if let Value::Object(b) = body {
            m.extend(b);
        }
        Value::Object(m)
    }

    /// Seals `packet` (its JSON text) in the thread named by its `thread_id` and sends it
    /// to `to`; an unknown thread is opened by this peer. Returns the relay `seq`.
    pub fn send(
        &mut self,
        net: &mut Net,
        to: &Address,
        packet: &Value,
    ) -> Result<u64, HostileError> {
        let thread = packet["thread_id"]
            .as_str()
            .ok_or(HostileError::NoThreadId)?
            .to_string();
        let text = serde_json::to_vec(packet).unwrap_or_default();
        self.send_bytes(net, to, &thread, &text)
    }

    /// Seals any bytes as the plaintext of thread `thread_id` (opened by this peer if
    /// unknown) and sends them to `to`. Returns the relay `seq`.
    pub fn send_bytes(
        &mut self,
        net: &mut Net,
        to: &Address,
        thread_id: &str,
        plaintext: &[u8],
    ) -> Result<u64, HostileError> {
        let key = self.key_of(net, to)?;
        if !self.threads.contains_key(thread_id) {
            let session = ThreadSession::new(self.rng.bytes32());
            self.tags
                .insert((to.clone(), thread_tag(thread_id)), thread_id.to_string());
            self.threads.insert(
                thread_id.to_string(),
                PeerThread {
                    session,
                    initiator: true,
                    peer: to.clone(),
                },
            );
        }
        let Some(t) = self.threads.get_mut(thread_id) else {
            return Err(HostileError::NoThreadId);
        };
        let dir = if t.initiator {
            Direction::FromInitiator
        } else {
            Direction::FromResponder
        };
        let env = t
            .session
            .seal(
                &self.identity,
                &self.address,
                to,
                &key,
                thread_id,
                dir,
                plaintext,
            )
            .map_err(|e| HostileError::Seal {
                thread: thread_id.to_string(),
                reason: e.to_string(),
            })?;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.put(net, seq, env);
        Ok(seq)
    }

    /// Delivers what is in flight, takes in what the relay sent this peer (opening the
    /// agents' packets into [`HostilePeer::received`] and acknowledging them), and sends
    /// again whatever the relay refused for now, letting virtual time pass (a second at a
    /// time) until the relay accepted everything or an hour went by.
    pub fn pump(&mut self, net: &mut Net) {
        for _ in 0..3600 {
            net.settle();
            self.take_inbox(net);
            if self.refused_for_now.is_empty() {
                return;
            }
            net.run_for(Duration::from_secs(1));
            for (seq, env) in std::mem::take(&mut self.refused_for_now) {
                self.put(net, seq, env);
            }
        }
    }

    /// The packets received so far and not yet taken.
    pub fn take_received(&mut self) -> Vec<Received> {
        std::mem::take(&mut self.received)
    }

    /// How many envelopes the relay has not accepted yet.
    pub fn unaccepted(&self) -> usize {
        self.in_flight.len() + self.refused_for_now.len()
    }

    fn put(&mut self, net: &mut Net, seq: u64, env: Envelope) {
        net.client_send(
            self.client,
            ClientFrame::Send {
                seq,
                env: env.clone(),
            }
            .to_bytes(),
        );
        self.in_flight.insert(seq, env);
    }

    /// The agent's key: pinned at first use from the relay's answer to a lookup.
    fn key_of(&mut self, net: &mut Net, to: &Address) -> Result<PublicKey, HostileError> {
        if let Some(k) = self.keys.get(to) {
            return Ok(k.clone());
        }
        net.client_send(
            self.client,
            ClientFrame::Lookup {
                address: to.clone(),
            }
            .to_bytes(),
        );
        net.settle();
        self.take_inbox(net);
        self.keys
            .get(to)
            .cloned()
            .ok_or_else(|| HostileError::UnknownAgent(to.clone()))
    }

    fn take_inbox(&mut self, net: &mut Net) {
        for b in net.client_inbox(self.client) {
            if let Ok(f) = RelayFrame::from_bytes(&b) {
                self.take_frame(net, f);
            }
        }
    }

    fn take_frame(&mut self, net: &mut Net, f: RelayFrame) {
        match f {
            RelayFrame::Accepted { seq, .. } => {
                self.in_flight.remove(&seq);
            }
            RelayFrame::Deliver { id, env } => {
                self.open(env);
                net.client_send(self.client, ClientFrame::Ack { id }.to_bytes());
            }
            RelayFrame::Key {
                address,
                key: Some(k),
                ..
            } => {
                if let Ok(pk) = PublicKey::from_bytes(&k) {
                    self.keys.entry(address).or_insert(pk);
                }
            }
            RelayFrame::Overflow { seq, .. } => self.refused(seq),
            RelayFrame::Error {
                code: ErrorCode::RateLimited | ErrorCode::QueueFull,
                seq: Some(seq),
                ..
            } => self.refused(seq),
            RelayFrame::Error {
                code, message, seq, ..
            } => {
                if let Some(seq) = seq {
                    self.in_flight.remove(&seq);
                }
                self.relay_errors.push((code, message));
            }
            RelayFrame::Ping { n } => {
                net.client_send(self.client, ClientFrame::Pong { n }.to_bytes());
            }
            _ => {}
        }
    }

    fn refused(&mut self, seq: u64) {
        if let Some(env) = self.in_flight.remove(&seq) {
            self.refused_for_now.insert(seq, env);
        }
    }

    fn open(&mut self, env: Envelope) {
        let from = env.from.clone();
        let sender_key = match self.keys.get(&from) {
            Some(k) => k.clone(),
            None => match PublicKey::from_bytes(&env.from_key) {
                Ok(k) => k,
                Err(_) => {
                    self.unopened += 1;
                    return;
                }
            },
        };
        let opened = match self.tags.get(&(from.clone(), env.thread)).cloned() {
            Some(id) => {
                let Some(t) = self.threads.get_mut(&id) else {
                    self.unopened += 1;
                    return;
                };
                let expected = if t.initiator {
                    Direction::FromResponder
                } else {
                    Direction::FromInitiator
                };
                t.session
                    .open(&self.identity, &self.address, &env, &sender_key, expected)
                    .ok()
            }
            None => {
                // A thread the agent opened with this peer, or a child of a fork this
                // peer named and has not written in yet (then this peer is its initiator).
                let mut session = ThreadSession::new(self.rng.bytes32());
                match session.open(&self.identity, &self.address, &env, &sender_key, env.dir) {
                    Ok(o) => {
                        self.tags
                            .insert((from.clone(), env.thread), o.thread_id.clone());
                        self.threads.insert(
                            o.thread_id.clone(),
                            PeerThread {
                                session,
                                initiator: env.dir == Direction::FromResponder,
                                peer: from.clone(),
                            },
                        );
                        Some(o)
                    }
                    Err(_) => None,
                }
            }
        };
        let Some(o) = opened else {
            self.unopened += 1;
            return;
        };
        self.keys.entry(from.clone()).or_insert(sender_key);
        self.received.push(Received {
            thread_id: o.thread_id,
            from,
            packet: serde_json::from_slice(&o.packet).unwrap_or(Value::Null),
        });
    }

    /// The agent this peer talks to in thread `thread_id`, if it knows the thread.
    pub fn peer_of(&self, thread_id: &str) -> Option<&Address> {
        self.threads.get(thread_id).map(|t| &t.peer)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::agent::{Command, PromptKind};
    use crate::harness::dinner;
    use crate::time::Timestamp;

    fn net() -> (Net, usize) {
        let start = Timestamp::parse_rfc3339(dinner::START).unwrap_or_default();
        let mut net = Net::new("a2acp.io", start, [7; 32]);
        let alice = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
        net.connect(alice);
        net.settle();
        (net, alice)
    }

    #[test]
    fn opens_a_thread_and_reads_the_agents_answer() {
        let (mut net, alice) = net();
        let mut m = HostilePeer::join(&mut net, "mallory", [66; 32]).unwrap();
        let to = net.address(alice);
        let thread = m.new_thread_id();
        let p = m.packet(
            &net,
            &to,
            &thread,
            "context",
            json!({
                "intent": {"category": "scheduling", "summary": "Dinner on Friday"},
                "context": {"timezone": "Europe/London"},
                "needs": [{"field": "timezone", "priority": "required", "reason": "to plan"}],
            }),
        );
        m.send(&mut net, &to, &p).unwrap();
        m.pump(&mut net);
        assert_eq!(m.unaccepted(), 0);
        let t = net.nodes[alice]
            .agent
            .thread(&thread)
            .expect("thread opened");
        assert_eq!(t.peer, m.address);
        // Alice shares her always_share timezone without asking: mallory reads it.
        let got = m.take_received();
        assert!(
            got.iter().any(|r| r.thread_id == thread
                && r.packet["context_provided"]["timezone"] == "Europe/London"),
            "{got:?}"
        );
        // The thread goes on: a need Alice must ask her user about opens a prompt.
        let p = m.packet(
            &net,
            &to,
            &thread,
            "context_request",
            json!({"needs": [{"field": "dietary", "priority": "required", "reason": "menu"}]}),
        );
        m.send(&mut net, &to, &p).unwrap();
        m.pump(&mut net);
        let prompt = net.prompt(alice).expect("consent prompt");
        assert!(matches!(prompt.kind, PromptKind::Consent { .. }));
        assert_eq!(m.unopened, 0);
    }

    #[test]
    fn reads_threads_the_agent_opens_and_sends_raw_bytes() {
        let (mut net, alice) = net();
        let mut m = HostilePeer::join(&mut net, "mallory", [66; 32]).unwrap();
        let to = m.address.clone();
        net.command(
            alice,
            Command::StartThread {
                to,
                intent: dinner::intent(),
                context: dinner::context(),
            },
        );
        let id = net.nodes[alice].agent.threads().keys().next().cloned();
        let id = id.expect("thread started");
        m.pump(&mut net);
        let got = m.take_received();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].thread_id, id);
        assert_eq!(got[0].kind(), "context");
        // Bytes that are no packet at all reach the agent sealed and signed: counted as
        // malformed, not as forged.
        let alice_addr = net.address(alice);
        for _ in 0..3 {
            m.send_bytes(&mut net, &alice_addr, &id, b"\x1b[31mnot json")
                .unwrap();
        }
        m.pump(&mut net);
        assert!(net.nodes[alice].agent.is_flagged(&m.address));
    }
}
