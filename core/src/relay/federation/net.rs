//! A test network of relays on their own domains, linked in memory: what the runtime does
//! (discovery from a directory, dials as connection pairs, frames carried in order), with
//! partitions, crashes and tampering to inject faults.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use super::{DiscoveryError, FederationConfig, FederationEvent, RemoteRelay};
use crate::address::Address;
use crate::crypto::envelope::{Direction, Envelope};
use crate::crypto::{IdentityKey, ThreadSession};
use crate::link::{challenge_signed_bytes, ClientFrame, RelayFrame, REGISTER_LABEL};
use crate::persist;
use crate::relay::{ConnId, Relay, RelayConfig, RelayEvent, RelayInput, RelayOutput, Source};
use crate::time::Timestamp;

pub(super) const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

/// One relay and its store.
pub(super) struct Node {
    pub(super) relay: Option<Relay>,
    pub(super) config: RelayConfig,
    pub(super) store: BTreeMap<String, Vec<u8>>,
    pub(super) restarts: u8,
}

/// What is carried to a relay.
#[derive(Debug, Clone)]
pub(super) enum Msg {
    Bytes(u64, Vec<u8>),
    Connected(u64),
    Dialed(String, u64),
    DialFailed(String),
    Discovered(String),
    Disconnected(u64),
}

/// Rewrites (or drops) frames one node sends on its links.
pub(super) type Tamper = Box<dyn FnMut(&[u8]) -> Option<Vec<u8>>>;

pub(super) struct Net {
    pub(super) nodes: Vec<Node>,
    pub(super) now: Timestamp,
    /// (node, conn) of one end of a link → the other end.
    pub(super) peer: BTreeMap<(usize, u64), (usize, u64)>,
    /// Frames to agents, per (node, conn).
    pub(super) inbox: BTreeMap<(usize, u64), Vec<RelayFrame>>,
    pub(super) events: Vec<(usize, RelayEvent)>,
    pub(super) pending: VecDeque<(usize, Msg)>,
    pub(super) next_conn: u64,
    /// What discovery answers, per domain.
    pub(super) directory: BTreeMap<String, Result<RemoteRelay, DiscoveryError>>,
    /// Pairs of nodes that cannot reach each other.
    pub(super) cut: BTreeSet<(usize, usize)>,
    /// (from, to): `from` cannot dial `to` (a one-way partition; `to` can dial `from`).
    pub(super) no_dial: BTreeSet<(usize, usize)>,
    /// Frames a node sends on its links pass through this.
    pub(super) tamper: BTreeMap<usize, Tamper>,
}

pub(super) fn domain_of(i: usize) -> String {
    format!("{}.example", ["a", "b", "c", "d"][i])
}

pub(super) fn addr(user: &str, i: usize) -> Address {
    Address::new(user, &domain_of(i)).unwrap()
}

pub(super) fn relay_key(i: usize) -> IdentityKey {
    IdentityKey::from_seed([0xa0 + i as u8; 32])
}

impl Net {
    /// `n` relays (a.example, b.example, ...), all federating, each publishing its key.
    pub(super) fn new(n: usize) -> Self {
        Net::with(n, |_, _| {})
    }

    pub(super) fn with(n: usize, tweak: impl Fn(usize, &mut RelayConfig)) -> Self {
        let mut nodes = Vec::new();
        let mut directory = BTreeMap::new();
        for i in 0..n {
            let mut config = RelayConfig {
                domain: domain_of(i),
                federation: Some(FederationConfig::new(relay_key(i))),
                ..RelayConfig::default()
            };
            tweak(i, &mut config);
            directory.insert(
                domain_of(i),
                Ok(RemoteRelay {
                    endpoint: format!("wss://relay.{}/link", domain_of(i)),
                    keys: vec![relay_key(i).public()],
                }),
            );
            nodes.push(Node {
                relay: Some(Relay::new(config.clone(), [i as u8 + 1; 32])),
                config,
                store: BTreeMap::new(),
                restarts: 0,
            });
        }
        Net {
            nodes,
            now: T0,
            peer: BTreeMap::new(),
            inbox: BTreeMap::new(),
            events: Vec::new(),
            pending: VecDeque::new(),
            next_conn: 1000,
            directory,
            cut: BTreeSet::new(),
            no_dial: BTreeSet::new(),
            tamper: BTreeMap::new(),
        }
    }

    fn node_of_domain(&self, d: &str) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| domain_of(i) == d)
    }

    fn blocked(&self, a: usize, b: usize) -> bool {
        self.cut.contains(&(a.min(b), a.max(b)))
    }

    /// Hands `msg` to node `i` and carries everything that follows until quiet.
    pub(super) fn feed(&mut self, i: usize, msg: Msg) {
        self.pending.push_back((i, msg));
        self.run();
    }

    pub(super) fn run(&mut self) {
        let mut steps = 0;
        while let Some((i, msg)) = self.pending.pop_front() {
            steps += 1;
            assert!(steps < 1_000_000, "the network does not settle");
            let now = self.now;
            let Some(relay) = self.nodes[i].relay.as_mut() else {
                continue;
            };
            let bytes;
            let input = match &msg {
                Msg::Bytes(c, b) => {
                    bytes = b.clone();
                    RelayInput::Bytes {
                        conn: ConnId(*c),
                        bytes: &bytes,
                    }
                }
                Msg::Connected(c) => RelayInput::Connected {
                    conn: ConnId(*c),
                    source: Source(u128::from(*c)),
                },
                Msg::Dialed(d, c) => RelayInput::Dialed {
                    domain: d.clone(),
                    conn: ConnId(*c),
                    source: Source(u128::from(*c)),
                },
                Msg::DialFailed(d) => RelayInput::DialFailed {
                    domain: d.clone(),
                    reason: "unreachable".into(),
                },
                Msg::Discovered(d) => RelayInput::Discovered {
                    domain: d.clone(),
                    result: self.directory.get(d).cloned().unwrap_or_else(|| {
                        Err(DiscoveryError::NoRelay(format!("no relay for {d}")))
                    }),
                },
                Msg::Disconnected(c) => RelayInput::Disconnected { conn: ConnId(*c) },
            };
            relay.handle(now, input);
            self.drain(i);
        }
    }

    /// Executes node `i`'s outputs.
    pub(super) fn drain(&mut self, i: usize) {
        let mut outs = Vec::new();
        if let Some(r) = self.nodes[i].relay.as_mut() {
            while let Some(o) = r.poll_output() {
                outs.push(o);
            }
        }
        for o in outs {
            match o {
                RelayOutput::Persist(op) => persist::apply(&mut self.nodes[i].store, &op),
                RelayOutput::Send { conn, bytes } => {
                    if let Some(&(j, c)) = self.peer.get(&(i, conn.0)) {
                        if self.blocked(i, j) {
                            continue;
                        }
                        let bytes = match self.tamper.get_mut(&i) {
                            Some(t) => match t(&bytes) {
                                Some(b) => b,
                                None => continue,
                            },
                            None => bytes,
                        };
                        self.pending.push_back((j, Msg::Bytes(c, bytes)));
                    } else {
                        let f = RelayFrame::from_bytes(&bytes).expect("relay sent bad JSON");
                        if let RelayFrame::Ping { n } = f {
                            // Agents answer heartbeats.
                            let pong = ClientFrame::Pong { n }.to_bytes();
                            self.pending.push_back((i, Msg::Bytes(conn.0, pong)));
                            continue;
                        }
                        self.inbox.entry((i, conn.0)).or_default().push(f);
                    }
                }
                RelayOutput::Close { conn, .. } => {
                    if let Some((j, c)) = self.peer.remove(&(i, conn.0)) {
                        self.peer.remove(&(j, c));
                        self.pending.push_back((j, Msg::Disconnected(c)));
                    }
                }
                RelayOutput::Event(e) => self.events.push((i, e)),
                RelayOutput::Discover { domain } => {
                    self.pending.push_back((i, Msg::Discovered(domain)));
                }
                RelayOutput::Dial { domain, .. } => match self.node_of_domain(&domain) {
                    Some(j)
                        if !self.blocked(i, j)
                            && !self.no_dial.contains(&(i, j))
                            && self.nodes[j].relay.is_some() =>
                    {
                        let (a, b) = (self.next_conn, self.next_conn + 1);
                        self.next_conn += 2;
                        self.peer.insert((i, a), (j, b));
                        self.peer.insert((j, b), (i, a));
                        self.pending.push_back((i, Msg::Dialed(domain, a)));
                        self.pending.push_back((j, Msg::Connected(b)));
                    }
                    _ => self.pending.push_back((i, Msg::DialFailed(domain))),
                },
                // Federation's test network runs single relays, and sends no wake-ups.
                RelayOutput::Cluster(_) | RelayOutput::WakeUp { .. } => {}
            }
        }
    }

    /// Time passes, in steps of at most `step`, firing every relay's timer.
    pub(super) fn advance(&mut self, d: Duration, step: Duration) {
        let end = self.now.add(d);
        while self.now < end {
            let next = (0..self.nodes.len())
                .filter_map(|i| self.nodes[i].relay.as_ref().and_then(|r| r.poll_timeout()))
                .min()
                .unwrap_or(end)
                .min(self.now.add(step))
                .min(end)
                .max(self.now);
            self.now = if next == self.now {
                self.now.add(Duration::from_millis(1))
            } else {
                next
            };
            for i in 0..self.nodes.len() {
                let due = self.nodes[i].relay.as_ref().and_then(|r| r.poll_timeout());
                if due.is_some_and(|t| t <= self.now) {
                    let now = self.now;
                    if let Some(r) = self.nodes[i].relay.as_mut() {
                        r.handle(now, RelayInput::Timeout);
                    }
                    self.drain(i);
                    self.run();
                }
            }
        }
    }

    /// Every link between nodes `i` and `j` breaks (both ends see it end).
    pub(super) fn sever(&mut self, i: usize, j: usize) {
        let ends: Vec<((usize, u64), (usize, u64))> = self
            .peer
            .iter()
            .filter(|(k, v)| k.0 == i && v.0 == j)
            .map(|(k, v)| (*k, *v))
            .collect();
        for (k, v) in ends {
            self.peer.remove(&k);
            self.peer.remove(&v);
            self.pending.push_back((k.0, Msg::Disconnected(k.1)));
            self.pending.push_back((v.0, Msg::Disconnected(v.1)));
        }
        self.run();
    }

    /// Node `i` crashes (its links and agents see their connections end) and restarts from
    /// its store.
    pub(super) fn crash(&mut self, i: usize) {
        self.nodes[i].relay = None;
        let ends: Vec<((usize, u64), (usize, u64))> = self
            .peer
            .iter()
            .filter(|(k, _)| k.0 == i)
            .map(|(k, v)| (*k, *v))
            .collect();
        for (k, v) in ends {
            self.peer.remove(&k);
            self.peer.remove(&v);
            self.pending.push_back((v.0, Msg::Disconnected(v.1)));
        }
        self.inbox.retain(|k, _| k.0 != i);
        self.run();
    }

    pub(super) fn restart(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.restarts += 1;
        let records = n.store.clone();
        n.relay = Some(
            Relay::restore(n.config.clone(), [0x40 + n.restarts; 32], records).expect("restore"),
        );
    }

    /// Connects an agent on `conn` to node `i` and registers `user` with `id`.
    pub(super) fn register(&mut self, i: usize, conn: u64, user: &str, id: &IdentityKey) {
        self.feed(i, Msg::Connected(conn));
        let nonce = match self.take(i, conn).as_slice() {
            [RelayFrame::Challenge { nonce, .. }] => *nonce,
            other => panic!("expected a challenge, got {other:?}"),
        };
        let address = addr(user, i);
        let key = id.public().to_bytes();
        let ts = self.now.as_millis();
        let msg = challenge_signed_bytes(
            REGISTER_LABEL,
            &nonce,
            &domain_of(i),
            ts,
            &address,
            Some(&key),
        );
        let f = ClientFrame::Register {
            address: address.clone(),
            key,
            ts,
            sig: id.sign(&msg),
        };
        self.feed(i, Msg::Bytes(conn, f.to_bytes()));
        let mut frames = self.take(i, conn);
        assert!(
            matches!(frames.first(), Some(RelayFrame::AuthOk { address: a, .. }) if *a == address),
            "{frames:?}"
        );
        // What follows `auth_ok` (deliveries, notices) stays for the agent to read.
        frames.remove(0);
        if !frames.is_empty() {
            self.inbox.insert((i, conn), frames);
        }
    }

    /// Sends a frame from the agent on (`i`, `conn`).
    pub(super) fn client(&mut self, i: usize, conn: u64, f: &ClientFrame) {
        self.feed(i, Msg::Bytes(conn, f.to_bytes()));
    }

    /// Frames received by the agent on (`i`, `conn`) since the last take.
    pub(super) fn take(&mut self, i: usize, conn: u64) -> Vec<RelayFrame> {
        self.inbox.remove(&(i, conn)).unwrap_or_default()
    }

    /// Acknowledges every `deliver` and `undeliverable` in `frames` from (`i`, `conn`);
    /// returns the delivered envelopes.
    pub(super) fn ack_all(&mut self, i: usize, conn: u64, frames: &[RelayFrame]) -> Vec<Envelope> {
        let mut envs = Vec::new();
        for f in frames {
            match f {
                RelayFrame::Deliver { id, env } => {
                    envs.push(env.clone());
                    self.client(i, conn, &ClientFrame::Ack { id: *id });
                }
                RelayFrame::Undeliverable { id, .. } => {
                    self.client(i, conn, &ClientFrame::Ack { id: *id })
                }
                _ => {}
            }
        }
        envs
    }

    /// Federation events of node `i`.
    pub(super) fn fed_events(&self, i: usize) -> Vec<FederationEvent> {
        self.events
            .iter()
            .filter(|(n, _)| *n == i)
            .filter_map(|(_, e)| match e {
                RelayEvent::Federation(f) => Some(f.clone()),
                _ => None,
            })
            .collect()
    }
}

/// A sealed packet from `from_user`@`fi` to `to_user`@`ti` in `thread`, number `n`.
pub(super) fn packet(
    from: &IdentityKey,
    (from_user, fi): (&str, usize),
    to: &IdentityKey,
    (to_user, ti): (&str, usize),
    thread: &str,
    n: u32,
) -> Envelope {
    let mut s = ThreadSession::new([n as u8 ^ 0x5a; 32]);
    s.seal(
        from,
        &addr(from_user, fi),
        &addr(to_user, ti),
        &to.public(),
        thread,
        Direction::FromInitiator,
        format!("{{\"packet\":{n}}}").as_bytes(),
    )
    .unwrap()
}
