//! Cluster mode: one domain served by several relay nodes that share their registry,
//! presence and queue through a replicated store (the reference runtime uses NATS
//! JetStream: docs/relay.md "A cluster of relays", SPEC-NOTES "A relay cluster on NATS
//! JetStream").
//!
//! The state machine stays the same relay; what changes is where the three shared
//! things live. A node keeps no registration, queue or presence of its own: it asks the
//! store with a [`ClusterOp`] and goes on when the answer comes back as a
//! [`ClusterInput`]. Nothing else waits: the node serves every other connection meanwhile.
//!
//! - **Registry.** The node caches every registration it has seen (a registration never
//!   changes: first come, first served). A frame that names an address of the domain the
//!   node has not cached — an `auth`, a `register`, a `send` to it, a `lookup` of it — is
//!   **parked** with every later frame of its connection (their order is kept) while
//!   the node asks ([`ClusterOp::Resolve`]); the frames are then handled in order as if
//!   they had just arrived. A `register` of a free address is a compare-and-set
//!   ([`ClusterOp::Claim`]): the first key the store accepts wins on every node, and the
//!   `auth_ok` leaves only after the store made it durable.
//! - **Queue.** A `send` that passes every check of the relay becomes a
//!   [`ClusterOp::Enqueue`]; its `accepted {seq, id}` leaves when the store answers that
//!   the packet is durable, with the store's delivery id ([`ClusterInput::Enqueued`]).
//!   The per-thread cap is the store's (an `overflow` frame as on one node). Answers
//!   come back in any order; the frames to one connection leave in the order of its
//!   `send`s. An authenticated address's node reads its queue ([`ClusterOp::Watch`]):
//!   every packet comes back as [`ClusterInput::Queued`] and is delivered as on one
//!   node (`max_in_flight`, re-delivery to a replacing connection); an `ack` deletes it
//!   from the store ([`ClusterOp::Remove`]).
//! - **Presence.** Every authentication is announced ([`ClusterOp::Announce`]); the store
//!   orders announcements by revision. A node that learns of an announcement of one of
//!   its online addresses by another node with a later revision
//!   ([`ClusterInput::Presence`]) replaces its own connection: last connect wins across
//!   nodes.
//!
//! When the store cannot answer (unreachable, timed out), what waited on it is refused
//! with `unavailable`: a `send` with its `seq` (the agent sends it again later), an
//! `auth` or `register` by closing the connection with that code (the agent reconnects,
//! perhaps through another node). Nothing is acknowledged that the store did not make
//! durable.
//!
//! **Federation** (when the relay federates too): a `send` to another domain is queued in
//! the store like a local one ([`ClusterOp::Enqueue`] with `outbound`), on whatever node
//! it came through; the one node the runtime makes the domain's *federator*
//! ([`ClusterInput::Federating`]) reads every such packet ([`ClusterInput::Outbound`]) and
//! pushes it over its links, the store's delivery id being the link sequence number (one
//! sequence for the whole domain, kept across a change of federator); a packet the
//! remote relay settled is deleted ([`ClusterOp::Remove`]), one it refused or that
//! expired becomes an undeliverable notice in its sender's queue ([`ClusterOp::Notify`],
//! read back as [`ClusterInput::Noticed`]). Pushes from other domains are accepted on any
//! node, queued in the store like a `send`, and answered `pushed` once durable.
//! docs/protocol.md "The federation link" §8.
//!
//! Not in cluster mode: the per-recipient cap (`queue_per_recipient`; the per-thread cap
//! holds).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::queue::StoredItem;
use super::{ConnId, FrameError, ParsedFrame, Phase, Relay, RelayEvent, RelayOutput, Verified};
use crate::address::Address;
use crate::crypto::envelope::Envelope;
use crate::link::{ClientFrame, ErrorCode, RelayFrame};
use crate::time::Timestamp;

/// Frames one connection may have parked at once; past it they are refused
/// `rate_limited` (an honest agent sends a handful while it authenticates).
pub const MAX_PARKED: usize = 256;

/// The cluster settings of a relay node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMode {
    /// This node's name in the cluster (its own announcements carry it).
    pub node: String,
}

/// What a relay node in cluster mode asks of the domain's shared store
/// ([`RelayOutput::Cluster`]). Every one but `Remove`, `Watch` and `Unwatch` must be
/// answered, once, with the [`ClusterInput`] it names (an error when the store cannot
/// answer in time); the node's other work goes on meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterOp {
    /// Read `address`'s registration; answer [`ClusterInput::Resolved`].
    Resolve {
        /// The address (of this domain).
        address: Address,
    },
    /// Register `address` with `key` unless it is registered already (compare and set);
    /// answer [`ClusterInput::Claimed`] once the outcome is durable.
    Claim {
        /// The address.
        address: Address,
        /// Its key.
        key: [u8; 32],
    },
    /// Announce that `address` is connected here as `conn`; answer
    /// [`ClusterInput::Announced`] with the announcement's revision.
    Announce {
        /// The address.
        address: Address,
        /// Its connection on this node.
        conn: ConnId,
    },
    /// Queue a packet for `to` in `thread` under `packet_id` (a retry of the same
    /// `packet_id` must not queue it twice); answer [`ClusterInput::Enqueued`] with
    /// `token` once it is durable, or refused by the thread's cap.
    Enqueue {
        /// Names the answer.
        token: u64,
        /// The recipient.
        to: Address,
        /// The envelope's thread tag.
        thread: [u8; 16],
        /// What makes a retried write recognisable: the envelope's signature, in hex.
        packet_id: String,
        /// The envelope's JSON, as received.
        env: Box<str>,
        /// `to` is on another domain: the packet waits for the domain's federator
        /// ([`ClusterInput::Outbound`]), not for a watch of `to`.
        outbound: bool,
    },
    /// Queue the undeliverable notice `notice` (the `undeliverable` frame's fields but its
    /// `id`, as JSON) for its sender `to`, where the watch of `to` reads it
    /// ([`ClusterInput::Noticed`]; a retry must not queue it twice), then delete the
    /// packet `packet` it tells of. Unanswered.
    Notify {
        /// The sender told.
        to: Address,
        /// The delivery id of the packet not delivered.
        packet: u64,
        /// The notice.
        notice: Box<str>,
    },
    /// Delete the packet `id` (its recipient acknowledged it). Unanswered.
    Remove {
        /// Its delivery id.
        id: u64,
    },
    /// Read everything queued for `address`, oldest first, then each new packet, as
    /// [`ClusterInput::Queued`] tagged `watch`; replaces the node's earlier watch of the
    /// address. Unanswered otherwise.
    Watch {
        /// The address.
        address: Address,
        /// Tags the packets read.
        watch: u64,
    },
    /// Stop reading `address`'s queue. Unanswered.
    Unwatch {
        /// The address.
        address: Address,
    },
}

/// What came of an enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueue {
    /// Durable under delivery id `id`; `duplicate` when the same packet id had been
    /// queued before (the id is the first one's).
    Queued {
        /// The delivery id.
        id: u64,
        /// Queued before.
        duplicate: bool,
    },
    /// The recipient's thread is at its cap: not queued.
    Overflow,
}

/// What came of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The address is now registered with the key (by this claim, or it already was).
    Registered {
        /// This claim made the registration (it was free).
        new: bool,
    },
    /// The address is registered with another key.
    Taken,
}

/// An answer of the shared store, or news from it ([`super::RelayInput::Cluster`]).
/// `Err` carries why the store could not answer, for logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterInput {
    /// The answer to [`ClusterOp::Resolve`]: the key registered, if any.
    Resolved {
        /// The address.
        address: Address,
        /// Its key, or `None` when it is not registered.
        key: Result<Option<[u8; 32]>, String>,
    },
    /// The answer to [`ClusterOp::Claim`].
    Claimed {
        /// The address.
        address: Address,
        /// The key claimed.
        key: [u8; 32],
        /// What came of it.
        result: Result<Claim, String>,
    },
    /// The answer to [`ClusterOp::Announce`]: the announcement's revision.
    Announced {
        /// The address.
        address: Address,
        /// The connection announced.
        conn: ConnId,
        /// Its revision.
        revision: Result<u64, String>,
    },
    /// An announcement read from the store (any node's, this one's included).
    Presence {
        /// The address.
        address: Address,
        /// The node holding its connection.
        node: String,
        /// The announcement's revision.
        revision: u64,
    },
    /// The answer to [`ClusterOp::Enqueue`].
    Enqueued {
        /// The enqueue's token.
        token: u64,
        /// What came of it.
        result: Result<Enqueue, String>,
    },
    /// A packet read from the queue of an address this node watches.
    Queued {
        /// The recipient.
        address: Address,
        /// The watch (as in its [`ClusterOp::Watch`]).
        watch: u64,
        /// Its delivery id.
        id: u64,
        /// Its thread tag (the store files packets by recipient and thread).
        thread: [u8; 16],
        /// The envelope's JSON.
        env: Box<str>,
    },
    /// An undeliverable notice read from the queue of an address this node watches
    /// ([`ClusterOp::Notify`]).
    Noticed {
        /// Its recipient (the sender of the packet it tells of).
        address: Address,
        /// The watch (as in its [`ClusterOp::Watch`]).
        watch: u64,
        /// Its delivery id (the `id` its recipient acknowledges).
        id: u64,
        /// The notice as [`ClusterOp::Notify`] wrote it.
        notice: Box<str>,
    },
    /// This node is now (`true`) or no longer the domain's federator: the one node that
    /// reads the packets for other domains and pushes them. Losing the role drops what
    /// the node had read (the store keeps it for the next federator).
    Federating {
        /// Whether it is.
        on: bool,
    },
    /// A packet for another domain, read from the store while this node is the
    /// federator, in the order of its delivery ids (which are its link sequence numbers).
    Outbound {
        /// Its delivery id.
        id: u64,
        /// When the store accepted it (its expiry counts from then).
        accepted_at: Timestamp,
        /// The envelope's JSON.
        env: Box<str>,
    },
}

/// A frame parked until the store answers about an address.
type ParkedFrame = (Result<ParsedFrame, FrameError>, Verified);

/// What waits for an enqueue's answer.
#[derive(Debug, Clone)]
enum Waiter {
    /// An agent's `send` (its `seq`).
    Send(u64),
    /// A push on a link accepted from `domain`.
    Push { domain: String, n: u64 },
}

/// A `send` or a link's `push` waiting for the store's answer.
#[derive(Debug, Clone)]
struct PendingSend {
    conn: ConnId,
    waiter: Waiter,
    from: Address,
    to: Address,
    thread: [u8; 16],
    /// The store's answer, once it came (the frame leaves when every earlier `send` of
    /// the connection has its answer too).
    result: Option<Result<Enqueue, String>>,
}

/// What the node knows of an online address's announcements.
#[derive(Debug, Clone, Copy, Default)]
struct Announcements {
    /// The revision of this node's announcement, once the store answered.
    own: Option<u64>,
    /// The latest revision announced by another node while the address is online here.
    other: u64,
}

/// Cluster-mode state.
#[derive(Debug, Clone, Default)]
pub(super) struct ClusterState {
    node: String,
    /// Frames of each connection parked behind a question to the store, in order.
    parked: BTreeMap<ConnId, VecDeque<ParkedFrame>>,
    /// The connections waiting for each address's answer.
    waiting: BTreeMap<Address, BTreeSet<ConnId>>,
    /// Addresses the store answered are not registered: set only while their parked
    /// frames are handled again.
    absent: BTreeSet<Address>,
    /// Addresses the store could not answer about: set only while their parked frames
    /// are refused.
    failed: BTreeSet<Address>,
    /// Enqueues waiting for the store, by token.
    sends: BTreeMap<u64, PendingSend>,
    /// Each connection's enqueues, in the order of its `send`s.
    order: BTreeMap<ConnId, VecDeque<u64>>,
    next_token: u64,
    /// The current watch of each online address.
    watches: BTreeMap<Address, u64>,
    next_watch: u64,
    announcements: BTreeMap<Address, Announcements>,
    /// Undeliverable notices sent on each online address's connection, not acknowledged.
    pub(super) notices: BTreeMap<Address, BTreeSet<u64>>,
    /// This node is the domain's federator.
    pub(super) federating: bool,
}

impl ClusterState {
    /// Questions to the store not yet answered.
    pub(super) fn waiting(&self) -> usize {
        self.sends
            .values()
            .filter(|s| s.result.is_none())
            .count()
            .saturating_add(self.waiting.len())
    }

    pub(super) fn new(mode: &ClusterMode) -> Self {
        ClusterState {
            node: mode.node.clone(),
            next_token: 1,
            next_watch: 1,
            ..Default::default()
        }
    }
}

/// What the store answered about an address, for the frames parked on it.
enum Answer {
    /// Its registration (now cached).
    Known,
    /// It is not registered.
    Absent,
    /// Registered by another node meanwhile: ask whose key.
    AskAgain,
    /// The store could not answer.
    Failed,
}

/// What a frame needs to know first: the registration of this address.
enum Need {
    /// Nothing: handle it.
    Nothing,
    /// The store's answer about the address.
    Registration(Address),
    /// The store could not answer about the address: refuse.
    Unavailable,
}

impl Relay {
    pub(super) fn cluster_op(&mut self, op: ClusterOp) {
        self.out.push_back(RelayOutput::Cluster(op));
    }

    /// Whether `conn`'s frames are parked (a later frame waits behind them).
    pub(super) fn is_parked(&self, conn: ConnId) -> bool {
        self.cluster
            .as_ref()
            .is_some_and(|c| c.parked.contains_key(&conn))
    }

    /// Parks a frame behind `conn`'s parked ones (or refuses it past [`MAX_PARKED`]).
    pub(super) fn park_behind(
        &mut self,
        conn: ConnId,
        parsed: Result<ParsedFrame, FrameError>,
        verified: Verified,
    ) {
        let Some(cl) = self.cluster.as_mut() else {
            return;
        };
        let Some(q) = cl.parked.get_mut(&conn) else {
            return;
        };
        if q.len() < MAX_PARKED {
            q.push_back((parsed, verified));
            return;
        }
        let seq = send_seq(&parsed);
        self.refuse(
            conn,
            ErrorCode::RateLimited,
            "too many frames waiting for the cluster: slow down".into(),
            seq,
        );
    }

    /// In cluster mode, whether the frame about to be handled names an address of the
    /// domain whose registration this node must ask the store about first; if so, parks
    /// it (and asks). Returns the frame back when it can be handled now.
    pub(super) fn park_if_unknown(
        &mut self,
        conn: ConnId,
        parsed: Result<ParsedFrame, FrameError>,
        verified: Verified,
    ) -> Option<(Result<ParsedFrame, FrameError>, Verified)> {
        if self.cluster.is_none() {
            return Some((parsed, verified));
        }
        let phase = self.conns.get(&conn).map(|c| &c.phase);
        let authed = matches!(phase, Some(Phase::Authed { .. }));
        // A link accepted from another domain names local addresses too.
        let linked = matches!(
            phase,
            Some(Phase::Link(super::federation::LinkPhase::In { .. }))
        );
        let named = match &parsed {
            Ok(f) => match &f.frame {
                ClientFrame::Auth { address, .. } | ClientFrame::Register { address, .. }
                    if !authed && !linked =>
                {
                    Some(address)
                }
                ClientFrame::Send { env, .. } if authed => Some(&env.to),
                ClientFrame::Push { env, .. } if linked => Some(&env.to),
                ClientFrame::Lookup { address } if authed || linked => Some(address),
                _ => None,
            },
            Err(_) => None,
        };
        let need = match named {
            Some(a) => self.need(a),
            None => Need::Nothing,
        };
        match need {
            Need::Nothing => Some((parsed, verified)),
            Need::Registration(address) => {
                let cl = self.cluster.as_mut()?;
                cl.parked
                    .entry(conn)
                    .or_default()
                    .push_front((parsed, verified));
                let first = !cl.waiting.contains_key(&address);
                cl.waiting.entry(address.clone()).or_default().insert(conn);
                if first {
                    self.cluster_op(ClusterOp::Resolve { address });
                }
                None
            }
            Need::Unavailable => {
                self.refuse_unavailable(conn, &parsed);
                None
            }
        }
    }

    fn need(&self, address: &Address) -> Need {
        let Some(cl) = self.cluster.as_ref() else {
            return Need::Nothing;
        };
        if address.domain() != self.config.domain
            || self.registry.contains_key(address)
            || cl.absent.contains(address)
        {
            return Need::Nothing;
        }
        if cl.failed.contains(address) {
            return Need::Unavailable;
        }
        Need::Registration(address.clone())
    }

    /// Refuses a frame the store could not answer for: a `send` with its `seq`; an
    /// unauthenticated connection's `auth` or `register` by closing the connection.
    fn refuse_unavailable(&mut self, conn: ConnId, parsed: &Result<ParsedFrame, FrameError>) {
        let seq = send_seq(parsed);
        self.refuse(
            conn,
            ErrorCode::Unavailable,
            "the relay cannot reach its cluster's store: try again later".into(),
            seq,
        );
        if matches!(
            self.conns.get(&conn).map(|c| &c.phase),
            Some(Phase::Unauth { .. })
        ) {
            self.close(conn, ErrorCode::Unavailable);
        }
    }

    /// A `register` of an address the store said is free: parks the frame (its
    /// challenge put back) and claims the address. `false` when not in cluster mode.
    pub(super) fn claim(
        &mut self,
        conn: ConnId,
        nonce: Option<[u8; 32]>,
        frame: ClientFrame,
        address: &Address,
        key: [u8; 32],
    ) -> bool {
        let Some(cl) = self.cluster.as_mut() else {
            return false;
        };
        cl.parked.entry(conn).or_default().push_front((
            Ok(ParsedFrame {
                frame,
                env_json: None,
            }),
            Verified::No,
        ));
        let first = !cl.waiting.contains_key(address);
        cl.waiting.entry(address.clone()).or_default().insert(conn);
        if let Some(Phase::Unauth { challenge, .. }) =
            self.conns.get_mut(&conn).map(|c| &mut c.phase)
        {
            *challenge = nonce;
        }
        if first {
            self.cluster_op(ClusterOp::Claim {
                address: address.clone(),
                key,
            });
        }
        true
    }

    /// Queues a checked `send` in the store (cluster mode): for a local recipient, or
    /// for the federator when `env.to` is on another domain.
    pub(in crate::relay) fn cluster_enqueue(
        &mut self,
        conn: ConnId,
        seq: u64,
        from: Address,
        env: &Envelope,
        env_json: Option<Box<str>>,
    ) {
        self.cluster_enqueue_for(conn, Waiter::Send(seq), from, env, env_json);
    }

    /// Queues a checked push `n` from `domain` for its local recipient in the store
    /// (cluster mode); `pushed` or `deferred` goes back when the store answers.
    pub(in crate::relay) fn cluster_enqueue_push(
        &mut self,
        conn: ConnId,
        (domain, n): (&str, u64),
        env: &Envelope,
        env_json: Option<Box<str>>,
    ) {
        let waiter = Waiter::Push {
            domain: domain.to_string(),
            n,
        };
        self.cluster_enqueue_for(conn, waiter, env.from.clone(), env, env_json);
    }

    fn cluster_enqueue_for(
        &mut self,
        conn: ConnId,
        waiter: Waiter,
        from: Address,
        env: &Envelope,
        env_json: Option<Box<str>>,
    ) {
        let outbound = env.to.domain() != self.config.domain;
        let Some(cl) = self.cluster.as_mut() else {
            return;
        };
        let token = cl.next_token;
        cl.next_token = token.saturating_add(1);
        cl.sends.insert(
            token,
            PendingSend {
                conn,
                waiter,
                from,
                to: env.to.clone(),
                thread: env.thread,
                result: None,
            },
        );
        cl.order.entry(conn).or_default().push_back(token);
        let env_json =
            env_json.unwrap_or_else(|| serde_json::to_string(env).unwrap_or_default().into());
        let packet_id = env.sig.iter().map(|b| format!("{b:02x}")).collect();
        self.cluster_op(ClusterOp::Enqueue {
            token,
            to: env.to.clone(),
            thread: env.thread,
            packet_id,
            env: env_json,
            outbound,
        });
    }

    /// The store's answers and news.
    pub(super) fn on_cluster(&mut self, now: Timestamp, input: ClusterInput) {
        if self.cluster.is_none() {
            return;
        }
        match input {
            ClusterInput::Resolved { address, key } => match key {
                Ok(Some(key)) => {
                    self.cache(&address, key);
                    self.resume_waiting(now, address, Answer::Known);
                }
                Ok(None) => self.resume_waiting(now, address, Answer::Absent),
                Err(_) => self.resume_waiting(now, address, Answer::Failed),
            },
            ClusterInput::Claimed {
                address,
                key,
                result,
            } => match result {
                Ok(Claim::Registered { new }) => {
                    self.cache(&address, key);
                    if new {
                        self.push_event(RelayEvent::Registered {
                            address: address.clone(),
                        });
                    }
                    self.resume_waiting(now, address, Answer::Known);
                }
                // Another key holds it: the parked `register` asks whose, and is refused.
                Ok(Claim::Taken) => self.resume_waiting(now, address, Answer::AskAgain),
                Err(_) => self.resume_waiting(now, address, Answer::Failed),
            },
            ClusterInput::Announced {
                address,
                conn,
                revision,
            } => {
                let Ok(revision) = revision else {
                    return;
                };
                if self.online.get(&address) != Some(&conn) {
                    return;
                }
                if let Some(a) = self
                    .cluster
                    .as_mut()
                    .and_then(|c| c.announcements.get_mut(&address))
                {
                    a.own = Some(revision);
                }
                self.replace_if_announced_elsewhere(&address);
            }
            ClusterInput::Presence {
                address,
                node,
                revision,
            } => {
                let Some(cl) = self.cluster.as_mut() else {
                    return;
                };
                if node == cl.node {
                    return;
                }
                if let Some(a) = cl.announcements.get_mut(&address) {
                    a.other = a.other.max(revision);
                    self.replace_if_announced_elsewhere(&address);
                }
            }
            ClusterInput::Enqueued { token, result } => self.on_enqueued(now, token, result),
            ClusterInput::Noticed {
                address,
                watch,
                id,
                notice,
            } => {
                let current = self.cluster.as_ref().and_then(|c| c.watches.get(&address));
                if current == Some(&watch) {
                    self.on_noticed(&address, id, &notice);
                }
            }
            ClusterInput::Federating { on } => self.on_federating(now, on),
            ClusterInput::Outbound {
                id,
                accepted_at,
                env,
            } => self.on_outbound(now, id, accepted_at, env),
            ClusterInput::Queued {
                address,
                watch,
                id,
                thread,
                env,
            } => {
                let current = self
                    .cluster
                    .as_ref()
                    .and_then(|c| c.watches.get(&address))
                    .copied();
                if current != Some(watch) || !self.online.contains_key(&address) {
                    return;
                }
                // A packet read again (a consumer made again after a fault) that was
                // delivered on this connection already.
                let seen = self
                    .online
                    .get(&address)
                    .and_then(|c| self.conns.get(c))
                    .is_some_and(|c| match &c.phase {
                        Phase::Authed { cursor, .. } => id < *cursor,
                        _ => false,
                    });
                if seen {
                    return;
                }
                self.queues.insert(StoredItem {
                    id,
                    accepted_at: now,
                    to: address.clone(),
                    thread,
                    env,
                    origin: None,
                });
                self.pump(&address);
            }
        }
    }

    fn cache(&mut self, address: &Address, key: [u8; 32]) {
        // A key the store holds was checked as a point when its address registered.
        if crate::crypto::PublicKey::from_stored_bytes(&key).is_ok() {
            self.registry.insert(
                address.clone(),
                super::Registration {
                    key_bytes: key,
                    rotation: None,
                    recovery: None,
                },
            );
        }
    }

    /// Handles again the frames parked on `address`, given what the store answered.
    fn resume_waiting(&mut self, now: Timestamp, address: Address, answer: Answer) {
        let Some(cl) = self.cluster.as_mut() else {
            return;
        };
        let conns = cl.waiting.remove(&address).unwrap_or_default();
        match answer {
            Answer::Known | Answer::AskAgain => {}
            Answer::Absent => {
                cl.absent.insert(address.clone());
            }
            Answer::Failed => {
                cl.failed.insert(address.clone());
            }
        }
        for conn in conns {
            self.resume(now, conn);
        }
        if let Some(cl) = self.cluster.as_mut() {
            cl.absent.remove(&address);
            cl.failed.remove(&address);
        }
    }

    /// Handles `conn`'s parked frames in order until one parks again.
    fn resume(&mut self, now: Timestamp, conn: ConnId) {
        let Some(mut frames) = self.cluster.as_mut().and_then(|c| c.parked.remove(&conn)) else {
            return;
        };
        while let Some((parsed, verified)) = frames.pop_front() {
            if !self.conns.contains_key(&conn) {
                return;
            }
            if let Some((parsed, verified)) = self.park_if_unknown(conn, parsed, verified) {
                self.process_frame(now, conn, parsed, verified);
            }
            self.settle_strikes(now, conn);
            if let Some(q) = self.cluster.as_mut().and_then(|c| c.parked.get_mut(&conn)) {
                q.extend(frames);
                return;
            }
        }
    }

    fn on_enqueued(&mut self, now: Timestamp, token: u64, result: Result<Enqueue, String>) {
        let Some(cl) = self.cluster.as_mut() else {
            return;
        };
        let Some(p) = cl.sends.get_mut(&token) else {
            return;
        };
        p.result = Some(result);
        let conn = p.conn;
        // Release the connection's answers in the order of its sends.
        loop {
            let Some(cl) = self.cluster.as_mut() else {
                return;
            };
            let Some(order) = cl.order.get_mut(&conn) else {
                return;
            };
            let Some(&head) = order.front() else {
                cl.order.remove(&conn);
                return;
            };
            if cl.sends.get(&head).is_some_and(|p| p.result.is_none()) {
                return;
            }
            order.pop_front();
            let Some(p) = cl.sends.remove(&head) else {
                continue;
            };
            self.answer_send(now, p);
        }
    }

    fn answer_send(&mut self, now: Timestamp, p: PendingSend) {
        let PendingSend {
            conn,
            waiter,
            from,
            to,
            thread,
            result,
        } = p;
        let seq = match waiter {
            Waiter::Send(seq) => seq,
            Waiter::Push { domain, n } => {
                let result = result.unwrap_or_else(|| Err("no answer".into()));
                self.settle_cluster_push(now, conn, (&domain, n), (from, to, thread), result);
                return;
            }
        };
        let open = self.conns.contains_key(&conn);
        match result {
            Some(Ok(Enqueue::Queued { id, duplicate })) => {
                if !duplicate {
                    self.counters.routed = self.counters.routed.saturating_add(1);
                }
                if open {
                    self.send(conn, &RelayFrame::Accepted { seq, id });
                }
                self.push_event(RelayEvent::Routed { from, to, id });
            }
            Some(Ok(Enqueue::Overflow)) => {
                let limit = self.config.queue_per_thread;
                self.counters.overflows = self.counters.overflows.saturating_add(1);
                if open {
                    self.send(
                        conn,
                        &RelayFrame::Overflow {
                            seq,
                            to: to.clone(),
                            thread,
                            limit,
                        },
                    );
                }
                self.push_event(RelayEvent::Overflow { from, to });
            }
            Some(Err(_)) | None => {
                if open {
                    self.refuse(
                        conn,
                        ErrorCode::Unavailable,
                        "the relay cannot reach its cluster's store: send it again later".into(),
                        Some(seq),
                    );
                }
            }
        }
    }

    /// `address` authenticated on `conn`: announce it and read its queue afresh (what an
    /// earlier connection here had in flight comes again, as on one node).
    pub(super) fn cluster_authenticated(&mut self, address: &Address, conn: ConnId) {
        let Some(cl) = self.cluster.as_mut() else {
            return;
        };
        let watch = cl.next_watch;
        cl.next_watch = watch.saturating_add(1);
        cl.watches.insert(address.clone(), watch);
        cl.announcements
            .insert(address.clone(), Announcements::default());
        cl.notices.remove(address);
        self.queues.remove_all(address);
        self.cluster_op(ClusterOp::Announce {
            address: address.clone(),
            conn,
        });
        self.cluster_op(ClusterOp::Watch {
            address: address.clone(),
            watch,
        });
    }

    /// `conn` is gone: its parked frames and pending answers with it; when it was its
    /// address's connection, the node stops reading the address's queue.
    pub(super) fn cluster_conn_gone(&mut self, conn: ConnId, address: Option<&Address>) {
        let Some(cl) = self.cluster.as_mut() else {
            return;
        };
        cl.parked.remove(&conn);
        // Its enqueues stay in `sends`: their answers are counted when they come.
        if let Some(order) = cl.order.get(&conn) {
            if order.is_empty() {
                cl.order.remove(&conn);
            }
        }
        let Some(address) = address else {
            return;
        };
        if self.online.contains_key(address) {
            return;
        }
        cl.watches.remove(address);
        cl.announcements.remove(address);
        cl.notices.remove(address);
        self.queues.remove_all(address);
        self.cluster_op(ClusterOp::Unwatch {
            address: address.clone(),
        });
    }

    /// Replaces the connection of `address` here when another node announced it later.
    fn replace_if_announced_elsewhere(&mut self, address: &Address) {
        let Some(a) = self
            .cluster
            .as_ref()
            .and_then(|c| c.announcements.get(address))
            .copied()
        else {
            return;
        };
        let Some(own) = a.own else {
            return;
        };
        if a.other <= own {
            return;
        }
        let Some(&conn) = self.online.get(address) else {
            return;
        };
        self.send(conn, &RelayFrame::Replaced);
        self.close(conn, ErrorCode::NotAuthenticated);
        self.push_event(RelayEvent::ReplacedElsewhere {
            conn,
            address: address.clone(),
        });
    }

    /// Acknowledged: delete it from the store. `false` when not in cluster mode.
    pub(super) fn cluster_remove(&mut self, id: u64) -> bool {
        if self.cluster.is_none() {
            return false;
        }
        self.cluster_op(ClusterOp::Remove { id });
        true
    }

    /// `ack {id}` of an undeliverable notice read from the store: delete it. Returns
    /// whether it was one.
    pub(super) fn cluster_ack_notice(&mut self, address: &Address, id: u64) -> bool {
        let Some(cl) = self.cluster.as_mut() else {
            return false;
        };
        let Some(ids) = cl.notices.get_mut(address) else {
            return false;
        };
        if !ids.remove(&id) {
            return false;
        }
        if ids.is_empty() {
            cl.notices.remove(address);
        }
        self.cluster_op(ClusterOp::Remove { id });
        true
    }
}

/// The `seq` of a `send` (to refuse it with), if the frame is one.
fn send_seq(parsed: &Result<ParsedFrame, FrameError>) -> Option<u64> {
    match parsed {
        Ok(ParsedFrame {
            frame: ClientFrame::Send { seq, .. },
            ..
        }) => Some(*seq),
        _ => None,
    }
}
