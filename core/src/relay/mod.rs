//! The relay state machine (spec §2, §3, §13, §16). See docs/protocol.md "The relay link".
//!
//! [`Relay`] is the blind relay: it registers addresses and their Ed25519 keys,
//! authenticates connections by challenge-response, routes sealed [`Envelope`]s, keeps an
//! offline queue until each packet is acknowledged, sends heartbeats and rate-limits
//! senders. It reads only an envelope's header (`from`, `to`, `from_key`, `thread`) and
//! checks its outer signature; it never needs or sees a packet's plaintext. The frames it
//! exchanges with agents are the link's ([`crate::link`]), which the agent uses as well.
//!
//! # Contract
//!
//! Feed every input with [`Relay::handle`], each with the current time: a connection
//! opened ([`RelayInput::Connected`], with the [`Source`] it comes from), a frame received
//! ([`RelayInput::Bytes`]; or [`RelayInput::Frame`], already parsed by [`parse_frame`]
//! and perhaps checked by [`verify_send`] off the state machine's thread), a frame the
//! transport could not even read ([`RelayInput::Oversized`]), a connection closed
//! ([`RelayInput::Disconnected`]) and the timer armed for [`Relay::poll_timeout`] firing
//! ([`RelayInput::Timeout`]). Then call [`Relay::poll_output`] until it returns `None`
//! and execute every [`RelayOutput`] in the order given; then re-arm the timer for
//! [`Relay::poll_timeout`]. Nothing happens between calls. Inputs for unknown
//! connections are ignored.
//!
//! **Output order.** The outputs of one input form a single FIFO, released in the order
//! the relay decided them (unlike the agent's, they are not grouped by kind: records and
//! the frames of several connections keep their causal order). Within it:
//!
//! 1. every [`RelayOutput::Persist`] an action depends on comes *before* the
//!    [`RelayOutput::Send`] that reveals the action: a registration is persisted before
//!    its `auth_ok`, a packet before the `accepted` that tells its sender it is safe, an
//!    acknowledged packet's deletion before the deliveries its freed slot lets through.
//!    A runtime that executes outputs in order, making each persist durable before the
//!    next send, therefore only ever acknowledges durable packets. One exception is
//!    allowed: a `deliver` ([`RelayOutput::is_delivery`]) may be sent as soon as it is
//!    polled, before the persists decided before it are durable, provided it overtakes
//!    neither its connection's `auth_ok` nor an earlier `deliver` to that connection,
//!    and once the reservation of delivery ids covering its id is durable
//!    ([`RelayOutput::reserved_delivery_ids`], decided far ahead of the id). The
//!    packet's sender is told `accepted` only after the commit; after a crash before
//!    it, the sender sends the packet again and the recipient drops the duplicate by
//!    packet id (SPEC-NOTES, the relay link);
//! 2. the frames to one connection come in the order they are to be sent;
//! 3. a [`RelayOutput::Close`] comes after the last frame to its connection (the `error`
//!    or `replaced` saying why). The relay has already forgotten the connection: the
//!    runtime closes the socket and need not report [`RelayInput::Disconnected`] for it
//!    (doing so is harmless);
//! 4. a [`RelayOutput::Event`] comes after the output it reports (a refusal after its
//!    `error` frame, a delivery after its `deliver`); events need no action.
//!
//! The same seed, settings and inputs give byte-identical outputs.
//!
//! # Where things are
//!
//! `mod.rs` keeps the [`Relay`] struct, the dispatch of inputs and frames and the output
//! helpers; `io.rs` the public types (inputs, outputs, events, settings, counters);
//! `parse.rs` frame parsing and signature checks, which need no relay state; `auth.rs`
//! challenges, `auth`, `register` and the registrations per source; `route.rs` `send`,
//! `ack` and deliveries; `queue.rs` the offline queue and its records; `limits.rs` the
//! frame budgets, address buckets and refusal allowances; `liveness.rs` heartbeats and
//! deadlines.
//!
//! # Connection and authentication
//!
//! On connect the relay sends `challenge {nonce, domain, ts}` with 32 fresh random bytes.
//! The agent answers with `auth` (registered address) or `register` (new address and
//! key), signing [`crate::link::challenge_signed_bytes`] with label
//! [`crate::link::AUTH_LABEL`] / [`crate::link::REGISTER_LABEL`], the nonce, the relay's domain, its
//! own clock `ts` and the address (and, for `register`, the key). The relay checks, in
//! order: a challenge is outstanding on this connection (it is consumed now, whatever the
//! outcome); `|ts - now| ≤ auth_max_skew`; for `register`, the address's domain is the
//! relay's (else `unknown_recipient`) and the key is a valid point; the signature (by the
//! given key for `register`, by the registered key for `auth`; an unregistered address
//! fails `auth`); finally, for `register`, the registry: unregistered → persist
//! `reg/<address>` then `auth_ok`; same key → `auth_ok`; other key → `address_taken`.
//! Every failure is `error` (`auth_failed` unless said otherwise) followed by a fresh
//! `challenge`. A connection not authenticated within `auth_timeout` of connecting gets
//! `error not_authenticated` and is closed. Before authentication only `auth`,
//! `register`, `ping` and `pong` are accepted; other frames get `not_authenticated`.
//!
//! **Last connect wins.** When an address authenticates while already authenticated on
//! another connection, the old connection gets `replaced` and is closed (close code
//! `not_authenticated`); its unacknowledged deliveries are re-delivered on the new one.
//!
//! # Routing and the queue
//!
//! `send {seq, env}` is checked in this order, the first failure answering:
//! 1. the sender's token bucket (`rate_limited`);
//! 2. `env.from` is the authenticated address and `env.from_key` its registered key
//!    (`wrong_sender`);
//! 3. the envelope's version is 1 (`malformed`) and its outer signature verifies
//!    (`bad_signature`);
//! 4. `env.to` is registered here (`unknown_recipient`);
//! 5. fewer than `queue_per_thread` unacknowledged packets for (`env.to`, `env.thread`),
//!    else an `overflow {seq, to, thread, limit}` frame (spec §13.2: the sender may later
//!    send one consolidated packet); fewer than `queue_per_recipient` for `env.to`, else
//!    `queue_full`.
//!
//! Then the packet gets the next delivery id (monotonic, never reused, also across
//! restarts), is persisted under `q/<recipient>/<id>`, `accepted {seq, id}` goes to the
//! sender and, if the recipient is online with fewer than `max_in_flight` unacknowledged
//! deliveries, `deliver {id, env}` goes to it. A packet stays queued — and counts
//! against the bounds — until its recipient's authenticated connection sends
//! `ack {id}`; then its record is deleted. Acks of unknown ids or of another address's
//! packets are ignored. On every authentication everything queued for the address is
//! delivered in id order, at most `max_in_flight` at a time, more as acks free slots.
//!
//! # Liveness, limits and refusals
//!
//! Every `ping_interval` the relay sends `ping {n}` to every connection. Any frame
//! received counts as life; a connection silent for `(missed_pongs + 1) × ping_interval`
//! is closed with code `timeout`. A `ping` from the agent is answered with `pong`.
//!
//! Rate limits are token buckets, computed lazily (docs/protocol.md, relay link §6):
//!
//! - **the frame budget of a connection** (capacity `conn_rate_burst`, refilled at
//!   `conn_rate_per_sec`), before and after authentication, charged for **every** frame
//!   before anything else: ¼ token for an `ack` or a `pong`, one token for any other
//!   frame (unparseable and oversized ones included); each `deliver` sent on the
//!   connection gives back ¼ token, the price of its `ack`. The first frame the budget
//!   cannot pay is refused with `rate_limited` (with `seq` for a `send`) and not
//!   processed; another one before the budget can pay again closes the connection
//!   (`too_many_refusals`), so frames past the budget are never answered one by one;
//! - **the bucket of an address** (capacity `rate_burst`, refilled at `rate_per_sec`),
//!   surviving reconnects, charged for `send` and `lookup` (refused with `rate_limited`
//!   when empty) and for refused frames (drained without a refusal of their own);
//! - **the refusal allowance of a connection** (capacity `refusal_burst`, refilled at
//!   `refusals_per_sec`): every refusal takes one, except those an honest agent gets
//!   from the state of the relay or of others (`rate_limited` of its address's bucket,
//!   `queue_full`, `unknown_recipient`); a connection refused beyond its allowance gets
//!   `error too_many_refusals` and is closed with that code;
//! - **new registrations per source** (`registrations_per_source` per
//!   `registration_window`, counted from the first registration of a window): a
//!   `register` that would create one more is refused with `registration_limited`
//!   (then a fresh challenge); at most `max_registration_sources` sources are tracked
//!   at once (expired windows are dropped first; past that, registrations from new
//!   sources are refused).
//!
//! A frame longer than `max_frame_bytes` is refused with `too_large` before parsing;
//! unparseable JSON or an unknown frame with `malformed`. A frame the runtime could not
//! even read (beyond its transport limit) is reported as [`RelayInput::Oversized`]: refused
//! with `too_large` and the connection closed with that code. Every `error` frame the
//! relay sends also emits [`RelayEvent::Refused`] and counts in [`RelayStats::refusals`].
//! Refused input changes no state other than counters, rate buckets, liveness and the
//! consumed challenge; the relay keeps serving everyone else.

mod auth;
pub mod cluster;
pub mod federation;
mod io;
mod limits;
mod liveness;
mod parse;
mod queue;
mod recover;
mod rotate;
mod route;
pub mod wake_up;

#[cfg(test)]
mod tests;

pub use cluster::{Claim, ClusterInput, ClusterMode, ClusterOp, Enqueue};
pub use io::*;
pub use parse::{parse_frame, verify_send, FrameError, ParsedFrame, Verified};
pub use recover::{RECOVER_PER_ADDRESS, RECOVER_PER_SOURCE, RECOVER_WINDOW};

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use crate::address::Address;
use crate::crypto::PublicKey;
use crate::link::{ClientFrame, ErrorCode, RelayFrame};
use crate::persist::PersistOp;
use crate::rate_limit::{TokenBucket, MILLI};
use crate::rng::DetRng;
use crate::time::Timestamp;

use self::cluster::ClusterState;
use self::federation::{Fed, LinkPhase};
use self::queue::{Queues, RegRecord, StoredItem, NEXT_ID_KEY, QUEUE_PREFIX, REG_PREFIX};

/// Delivery ids are reserved in blocks of this size: `meta/next_id` is persisted once per
/// block, so ids stay monotonic across restarts even when the queue is empty.
const ID_BLOCK: u64 = 1024;
/// How far ahead of the next delivery id the persisted reservation reaches (a new one is
/// persisted whenever fewer than `ID_AHEAD - ID_BLOCK` reserved ids remain): a `deliver`
/// waits until the reservation covering its id is durable ([`RelayOutput::delivery_id`],
/// [`RelayOutput::reserved_delivery_ids`]), and that reservation was decided some 63,000
/// ids earlier, so under steady load it has long been committed. After a restart the ids
/// go on above the whole reservation (up to `ID_AHEAD` ids are skipped, never reused).
const ID_AHEAD: u64 = 64 * ID_BLOCK;

/// What a frame costs from its connection's frame budget, in thousandths of a token.
const FRAME_COST: u64 = MILLI;
/// What an `ack` or a `pong` costs, and what each `deliver` gives back (its `ack`).
const CHEAP_FRAME_COST: u64 = MILLI / 4;

/// A registered address.
#[derive(Debug, Clone)]
struct Registration {
    /// The key's encoding. Decompressed only where a signature is checked against it (an
    /// `auth`, and an envelope the runtime did not verify: cached in its connection), so
    /// that a registration costs 32 bytes of key, not the 256 of a decompressed one.
    key_bytes: [u8; 32],
    /// The statement that installed the key, when the address rotated.
    rotation: Option<Box<crate::rotation::RotationStatement>>,
    /// The recovery that installed the key, when the address was recovered.
    recovery: Option<Box<crate::recovery::RecoveryProof>>,
}

/// Where a connection is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Waiting for `auth` or `register`.
    Unauth {
        /// The outstanding challenge nonce, if not yet consumed.
        challenge: Option<[u8; 32]>,
        /// When the connection is closed if still unauthenticated.
        auth_deadline: Timestamp,
    },
    /// Authenticated as `address`.
    Authed {
        /// The address.
        address: Address,
        /// Deliveries sent on this connection and not yet acknowledged.
        in_flight: BTreeSet<u64>,
        /// Every queued packet with a lower id has been delivered on this connection.
        cursor: u64,
        /// Its registered key decompressed, once an envelope of this connection had to be
        /// verified here (the runtime had not: [`Verified`]).
        key: Option<Box<PublicKey>>,
    },
    /// A relay link (federation), dialed or accepted.
    Link(LinkPhase),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Conn {
    phase: Phase,
    last_seen: Timestamp,
    /// This connection's entry in [`Relay::deadlines`].
    deadline: Timestamp,
    /// Where it comes from.
    source: Source,
    /// Its frame budget: every frame is charged here first.
    budget: TokenBucket,
    /// The last frame could not be paid (and was refused with `rate_limited`).
    over_budget: bool,
    /// Its refusal allowance.
    allowance: TokenBucket,
    /// Refusals of the frame being handled, not yet taken from the allowance.
    strikes: u32,
}

/// The registrations of one source in its current window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SourceWindow {
    start: Timestamp,
    count: u32,
}

impl Conn {
    fn address(&self) -> Option<&Address> {
        match &self.phase {
            Phase::Authed { address, .. } => Some(address),
            Phase::Unauth { .. } | Phase::Link(_) => None,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Counters {
    routed: u64,
    delivered: u64,
    acked: u64,
    overflows: u64,
    refusals: BTreeMap<ErrorCode, u64>,
    closed_for_refusals: u64,
    closed_oversized: u64,
    registrations_limited: u64,
    wake_ups: u64,
}

/// The relay state machine. See the [module documentation](self) for the protocol.
#[cfg_attr(test, derive(Clone))]
pub struct Relay {
    config: RelayConfig,
    rng: DetRng,
    registry: BTreeMap<Address, Registration>,
    queues: Queues,
    /// The next delivery id.
    next_id: u64,
    /// Ids below this are covered by the persisted `meta/next_id`.
    id_reserved: u64,
    conns: BTreeMap<ConnId, Conn>,
    /// The authenticated connection of each online address.
    online: BTreeMap<Address, ConnId>,
    /// Per-address rate limits.
    buckets: BTreeMap<Address, TokenBucket>,
    /// Auth and liveness deadlines, one per connection.
    deadlines: BTreeSet<(Timestamp, ConnId)>,
    /// New registrations per source in the current window.
    sources: BTreeMap<Source, SourceWindow>,
    /// The same windows by start, oldest first (to drop expired ones).
    source_windows: BTreeSet<(Timestamp, Source)>,
    next_ping: Option<Timestamp>,
    ping_n: u64,
    out: VecDeque<RelayOutput>,
    counters: Counters,
    /// Federation state (`None`: federation off).
    fed: Option<Box<Fed>>,
    /// Cluster-mode state (`None`: a single relay).
    cluster: Option<Box<ClusterState>>,
    /// Wake-up endpoints of agents ([`wake_up`]).
    wake_ups: BTreeMap<Address, wake_up::WakeUp>,
    /// Recovery bindings by address ([`recover`]).
    bindings: BTreeMap<Address, crate::recovery::RecoveryBinding>,
    /// Recovery attempt windows by record key ([`recover`]).
    recover_windows: BTreeMap<String, recover::AttemptWindow>,
}

impl fmt::Debug for Relay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Relay")
            .field("domain", &self.config.domain)
            .field("stats", &self.stats())
            .field("next_id", &self.next_id)
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// A relay with no registrations and an empty queue. `seed` drives the challenge
    /// nonces.
    pub fn new(mut config: RelayConfig, seed: [u8; 32]) -> Self {
        config.domain = config.domain.to_ascii_lowercase();
        let fed = config.federation.as_ref().map(|_| Box::new(Fed::new(seed)));
        let cluster = config
            .cluster
            .as_ref()
            .map(|m| Box::new(ClusterState::new(m)));
        Relay {
            config,
            rng: DetRng::from_seed(seed),
            registry: BTreeMap::new(),
            queues: Queues::default(),
            next_id: 1,
            id_reserved: 1,
            conns: BTreeMap::new(),
            online: BTreeMap::new(),
            buckets: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            sources: BTreeMap::new(),
            source_windows: BTreeSet::new(),
            next_ping: None,
            ping_n: 0,
            out: VecDeque::new(),
            counters: Counters::default(),
            fed,
            cluster,
            wake_ups: BTreeMap::new(),
            bindings: BTreeMap::new(),
            recover_windows: BTreeMap::new(),
        }
    }

    /// A relay restored from the key/value records last persisted (every
    /// [`RelayOutput::Persist`] applied in order, as [`crate::persist::apply`] does). It
    /// keeps every registration and every queued packet; delivery ids continue above
    /// any id handed out before. Records under other prefixes are ignored. Nothing is
    /// connected; counters start at zero.
    ///
    /// `seed` must be fresh — not the seed of an earlier run of this relay: challenges are
    /// drawn from it, and a repeated challenge would let an old authentication answer be
    /// replayed. Runtimes pass OS randomness; simulations derive a new seed per restart.
    pub fn restore(
        config: RelayConfig,
        seed: [u8; 32],
        records: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) -> Result<Self, RelayRestoreError> {
        let mut relay = Relay::new(config, seed);
        let mut items = Vec::new();
        let mut high_water = 1u64;
        for (key, value) in records {
            let bad = |reason: String| RelayRestoreError::BadRecord {
                key: key.clone(),
                reason,
            };
            if let Some(addr) = key.strip_prefix(REG_PREFIX) {
                let rec: RegRecord =
                    serde_json::from_slice(&value).map_err(|e| bad(e.to_string()))?;
                if rec.address.as_str() != addr {
                    return Err(bad("address differs from the key".into()));
                }
                if rec.address.domain() != relay.config.domain {
                    return Err(bad(format!(
                        "address is not in this relay's domain `{}`",
                        relay.config.domain
                    )));
                }
                // Validated (`PublicKey::from_bytes`) when the agent registered.
                PublicKey::from_stored_bytes(&rec.key)
                    .map_err(|_| bad("invalid public key".into()))?;
                if let Some(r) = &rec.rotation {
                    if r.new_key != rec.key || r.address != rec.address || r.verify().is_err() {
                        return Err(bad("rotation statement does not install this key".into()));
                    }
                }
                if let Some(r) = &rec.recovery {
                    let s = &r.statement;
                    if s.new_key != rec.key
                        || s.address != rec.address
                        || r.binding.recovery_key != s.recovery_key
                        || s.verify().is_err()
                    {
                        return Err(bad("recovery statement does not install this key".into()));
                    }
                }
                relay.registry.insert(
                    rec.address,
                    Registration {
                        key_bytes: rec.key,
                        rotation: rec.rotation,
                        recovery: rec.recovery,
                    },
                );
            } else if let Some(rest) = key.strip_prefix(QUEUE_PREFIX) {
                let (addr, id) = rest
                    .rsplit_once('/')
                    .ok_or_else(|| bad("key lacks an id".into()))?;
                let (item, _) = StoredItem::from_record(&value).map_err(|e| bad(e.to_string()))?;
                if item.to.as_str() != addr || format!("{:020}", item.id) != id {
                    return Err(bad("recipient or id differs from the key".into()));
                }
                items.push((key.clone(), item));
            } else if relay.restore_recovery_record(&key, &value)? {
            } else if let Some(addr) = key.strip_prefix(wake_up::WAKE_PREFIX) {
                relay.restore_wake_record(&key, addr, &value)?;
            } else if key == NEXT_ID_KEY {
                let n: u64 = serde_json::from_slice(&value).map_err(|e| bad(e.to_string()))?;
                high_water = high_water.max(n);
            } else if let Some(id) = relay.restore_fed_record(&key, &value)? {
                high_water = high_water.max(id.saturating_add(1));
            }
        }
        for (key, item) in items {
            if !relay.registry.contains_key(&item.to) {
                return Err(RelayRestoreError::BadRecord {
                    key,
                    reason: "recipient is not registered".into(),
                });
            }
            high_water = high_water.max(item.id.saturating_add(1));
            if let Some(o) = &item.origin {
                relay.restore_origin(&o.domain, o.n);
            }
            relay.queues.insert(item);
        }
        relay.next_id = high_water;
        relay.id_reserved = high_water;
        Ok(relay)
    }

    /// Feeds one input, at time `now`. Then drain [`Relay::poll_output`] (module
    /// documentation: the contract).
    pub fn handle(&mut self, now: Timestamp, input: RelayInput<'_>) {
        if let Some(f) = self.fed.as_mut() {
            f.now = f.now.max(now);
        }
        match input {
            RelayInput::Connected { conn, source } => self.on_connected(now, conn, source),
            RelayInput::Bytes { conn, bytes } if self.is_dialed(conn) => {
                self.on_dialed_bytes(now, conn, bytes)
            }
            RelayInput::Bytes { conn, bytes } => {
                let parsed = parse_frame(bytes, self.config.max_frame_bytes);
                self.on_frame(now, conn, parsed, Verified::No);
            }
            RelayInput::Frame {
                conn,
                parsed,
                verified,
            } => self.on_frame(now, conn, parsed, verified),
            RelayInput::Oversized { conn, limit } => self.on_oversized(conn, limit),
            RelayInput::Disconnected { conn } => self.disconnected(now, conn),
            RelayInput::Timeout => {
                self.on_timeout(now);
                if self.fed.is_some() {
                    self.on_fed_timeout(now);
                }
            }
            RelayInput::Discovered { domain, result } => self.on_discovered(now, domain, result),
            RelayInput::Dialed {
                domain,
                conn,
                source,
            } => self.on_dialed(now, domain, conn, source),
            RelayInput::DialFailed { domain, reason } => self.on_dial_failed(now, domain, reason),
            RelayInput::Cluster(input) => self.on_cluster(now, input),
        }
    }

    /// A connection opened from `source`: the relay sends it a challenge. A number still
    /// in use is treated as a disconnection followed by a new connection.
    fn on_connected(&mut self, now: Timestamp, conn: ConnId, source: Source) {
        self.remove_conn(conn);
        if self.conns.is_empty() {
            self.next_ping = Some(now.add(self.config.ping_interval));
        }
        let auth_deadline = now.add(self.config.auth_timeout);
        let mut c = Conn {
            phase: Phase::Unauth {
                challenge: None,
                auth_deadline,
            },
            last_seen: now,
            deadline: now,
            source,
            budget: TokenBucket::full(now, self.config.conn_rate_burst.max(1)),
            over_budget: false,
            allowance: TokenBucket::full(now, self.config.refusal_burst.max(1)),
            strikes: 0,
        };
        c.deadline = self.deadline_of(&c);
        self.deadlines.insert((c.deadline, conn));
        self.conns.insert(conn, c);
        self.issue_challenge(now, conn);
    }

    /// A frame arrived on `conn`, parsed (by [`Relay::handle`] or by the runtime) and,
    /// for a `send`, perhaps with its envelope signature already checked.
    fn on_frame(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        parsed: Result<ParsedFrame, FrameError>,
        verified: Verified,
    ) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if now > c.last_seen {
            c.last_seen = now;
        }
        self.reschedule(conn);
        if self.pay_frame(now, conn, &parsed) {
            if self.is_parked(conn) {
                // Behind a frame waiting for the cluster's store: in order, later.
                self.park_behind(conn, parsed, verified);
            } else if let Some((parsed, verified)) = self.park_if_unknown(conn, parsed, verified) {
                self.process_frame(now, conn, parsed, verified);
            }
        }
        self.settle_strikes(now, conn);
    }

    /// A frame arrived on `conn` that the runtime could not read because it exceeds its
    /// transport's limit (`limit` bytes; a WebSocket message too long to buffer): the
    /// relay refuses it with `too_large` and closes the connection with that code.
    fn on_oversized(&mut self, conn: ConnId, limit: usize) {
        if !self.conns.contains_key(&conn) {
            return;
        }
        self.refuse(
            conn,
            ErrorCode::TooLarge,
            format!("frame exceeds the transport limit of {limit} bytes: connection closed"),
            None,
        );
        self.counters.closed_oversized = self.counters.closed_oversized.saturating_add(1);
        self.close(conn, ErrorCode::TooLarge);
    }

    /// Handles a frame its connection paid for.
    fn process_frame(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        parsed: Result<ParsedFrame, FrameError>,
        verified: Verified,
    ) {
        let (rate, burst) = (self.config.rate_per_sec, self.config.rate_burst);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        match &mut c.phase {
            Phase::Link(l) => {
                let l = l.clone();
                self.process_link_frame(now, conn, l, parsed, verified);
            }
            Phase::Unauth { .. } => {
                let Some(ParsedFrame { frame, .. }) = self.parsed(conn, parsed) else {
                    return;
                };
                match frame {
                    ClientFrame::Auth { address, ts, sig } => {
                        self.on_auth(now, conn, address, ts, sig, None)
                    }
                    ClientFrame::Register {
                        address,
                        key,
                        ts,
                        sig,
                    } => self.on_auth(now, conn, address, ts, sig, Some(key)),
                    ClientFrame::RecoverStart { address } => {
                        self.on_recover_start(now, conn, address)
                    }
                    ClientFrame::Recover { statement } => self.on_recover(now, conn, statement),
                    ClientFrame::Ping { n } => self.send(conn, &RelayFrame::Pong { n }),
                    ClientFrame::Pong { .. } => {}
                    ClientFrame::LinkAuth {
                        domain,
                        key,
                        ts,
                        sig,
                        nonce,
                    } => self.on_link_auth(now, conn, domain, key, ts, sig, nonce),
                    ClientFrame::Send { seq, .. } => self.refuse(
                        conn,
                        ErrorCode::NotAuthenticated,
                        "authenticate first".into(),
                        Some(seq),
                    ),
                    ClientFrame::Ack { .. }
                    | ClientFrame::Lookup { .. }
                    | ClientFrame::WakeUp { .. }
                    | ClientFrame::Rotate { .. }
                    | ClientFrame::BindRecovery { .. }
                    | ClientFrame::Push { .. } => self.refuse(
                        conn,
                        ErrorCode::NotAuthenticated,
                        "authenticate first".into(),
                        None,
                    ),
                }
            }
            Phase::Authed { address, .. } => {
                let address = address.clone();
                let Some(ParsedFrame { frame, env_json }) = self.parsed(conn, parsed) else {
                    self.bucket(now, &address).drain_one(now, rate, burst);
                    return;
                };
                match frame {
                    ClientFrame::Send { seq, env } => {
                        self.on_send(now, conn, address, seq, (env, env_json), verified)
                    }
                    ClientFrame::Ack { id } => self.on_ack(conn, &address, id),
                    ClientFrame::Rotate { statement } => {
                        self.on_rotate(now, conn, address, statement)
                    }
                    ClientFrame::BindRecovery { binding } => {
                        self.on_bind_recovery(now, conn, address, binding)
                    }
                    ClientFrame::Lookup { address: who } => {
                        if !self.bucket(now, &address).try_take(now, rate, burst) {
                            self.refuse(conn, ErrorCode::RateLimited, "slow down".into(), None);
                            return;
                        }
                        if self.fed.is_some() && who.domain() != self.config.domain {
                            self.remote_lookup(now, conn, who);
                            return;
                        }
                        let reg = self
                            .registry
                            .get(&who)
                            .filter(|_| who.domain() == self.config.domain);
                        let key = reg.map(|r| r.key_bytes);
                        let rotation = reg.and_then(|r| r.rotation.clone());
                        let recovery = reg.and_then(|r| r.recovery.clone());
                        self.send(
                            conn,
                            &RelayFrame::Key {
                                address: who,
                                key,
                                rotation,
                                recovery,
                            },
                        );
                    }
                    ClientFrame::WakeUp { endpoint } => {
                        if !self.bucket(now, &address).try_take(now, rate, burst) {
                            self.refuse(conn, ErrorCode::RateLimited, "slow down".into(), None);
                            return;
                        }
                        self.on_wake_up(conn, &address, endpoint);
                    }
                    ClientFrame::Ping { n } => self.send(conn, &RelayFrame::Pong { n }),
                    ClientFrame::Pong { .. } => {}
                    ClientFrame::Auth { .. }
                    | ClientFrame::Register { .. }
                    | ClientFrame::LinkAuth { .. }
                    | ClientFrame::RecoverStart { .. }
                    | ClientFrame::Recover { .. }
                    | ClientFrame::Push { .. } => {
                        self.bucket(now, &address).drain_one(now, rate, burst);
                        self.refuse(
                            conn,
                            ErrorCode::AuthFailed,
                            "connection is already authenticated".into(),
                            None,
                        );
                    }
                }
            }
        }
    }

    /// The next output to execute, in order.
    pub fn poll_output(&mut self) -> Option<RelayOutput> {
        self.out.pop_front()
    }

    /// When [`RelayInput::Timeout`] must next be handed over: the earliest of the next ping,
    /// an authentication deadline and a dead-connection deadline. `None` with no
    /// connections.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let deadline = self.deadlines.first().map(|&(t, _)| t);
        let ping = self.next_ping.filter(|_| !self.conns.is_empty());
        let t = match (deadline, ping) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match (t, self.fed_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Counters and sizes.
    pub fn stats(&self) -> RelayStats {
        RelayStats {
            connections: self.conns.len(),
            authenticated: self.online.len(),
            registered: self.registry.len(),
            queued: self.queues.total,
            routed_total: self.counters.routed,
            delivered_total: self.counters.delivered,
            acked_total: self.counters.acked,
            overflows: self.counters.overflows,
            refusals: self.counters.refusals.clone(),
            closed_for_refusals: self.counters.closed_for_refusals,
            closed_oversized: self.counters.closed_oversized,
            registrations_limited: self.counters.registrations_limited,
            registration_sources: self.sources.len(),
            federation: self.fed_stats(),
            cluster_waiting: self.cluster.as_ref().map_or(0, |c| c.waiting()),
            cluster_federator: self.cluster.as_ref().is_some_and(|c| c.federating),
        }
    }

    /// The delivery id the next packet will get. Every id below it was handed out before
    /// and, right after [`Relay::restore`], is covered by the reservation restored.
    pub fn next_delivery_id(&self) -> u64 {
        self.next_id
    }

    /// Packets queued (not yet acknowledged) for `address`.
    pub fn queued_for(&self, address: &Address) -> usize {
        self.queues.len_for(address)
    }

    /// The key registered for `address`, if any.
    pub fn registered_key(&self, address: &Address) -> Option<[u8; 32]> {
        self.registry.get(address).map(|r| r.key_bytes)
    }

    /// The settings in use (domain normalised).
    pub fn config(&self) -> &RelayConfig {
        &self.config
    }

    /// Parses a frame, refusing it (`too_large` before parsing, or `malformed`).
    fn parsed(
        &mut self,
        conn: ConnId,
        parsed: Result<ParsedFrame, FrameError>,
    ) -> Option<ParsedFrame> {
        match parsed {
            Ok(f) => Some(f),
            Err(e) => {
                self.refuse(conn, e.code, e.message, None);
                None
            }
        }
    }

    fn send(&mut self, conn: ConnId, frame: &RelayFrame) {
        self.out.push_back(RelayOutput::Send {
            conn,
            bytes: frame.to_bytes(),
        });
    }

    fn push_event(&mut self, e: RelayEvent) {
        self.out.push_back(RelayOutput::Event(e));
    }

    fn persist_put<T: serde::Serialize>(&mut self, key: String, value: &T) {
        let value = serde_json::to_vec(value).unwrap_or_default();
        self.out
            .push_back(RelayOutput::Persist(PersistOp::Put { key, value }));
    }

    /// Sends an `error` frame, emits [`RelayEvent::Refused`] and counts it. Every code but
    /// those an honest agent gets from the state of the relay or of others (`rate_limited`
    /// of its address's bucket, `queue_full`, `unknown_recipient`) and the closing ones
    /// also takes from the connection's refusal allowance (when the frame is settled).
    fn refuse(&mut self, conn: ConnId, code: ErrorCode, message: String, seq: Option<u64>) {
        if let Some(c) = self.conns.get_mut(&conn).filter(|_| strikes(code)) {
            c.strikes = c.strikes.saturating_add(1);
        }
        let address = self.conns.get(&conn).and_then(Conn::address).cloned();
        self.send(
            conn,
            &RelayFrame::Error {
                code,
                message: message.clone(),
                seq,
            },
        );
        let n = self.counters.refusals.entry(code).or_insert(0);
        *n = n.saturating_add(1);
        if let Some(Phase::Link(l)) = self.conns.get(&conn).map(|c| &c.phase) {
            let domain = l.domain().to_string();
            self.link_refused(conn, &domain, code, message);
            return;
        }
        self.push_event(RelayEvent::Refused {
            conn,
            address,
            code,
            message,
        });
    }

    fn close(&mut self, conn: ConnId, code: ErrorCode) {
        let link = match self.conns.get(&conn).map(|c| &c.phase) {
            Some(Phase::Link(l)) => Some(l.domain().to_string()),
            _ => None,
        };
        self.remove_conn(conn);
        self.out.push_back(RelayOutput::Close { conn, code });
        if let Some(domain) = link {
            let now = self.fed.as_ref().map_or(Timestamp::ZERO, |f| f.now);
            self.link_gone(now, &domain, conn, format!("closed ({})", code.as_str()));
        }
    }

    /// [`RelayInput::Disconnected`]: a relay link's end is federation's to handle too.
    fn disconnected(&mut self, now: Timestamp, conn: ConnId) {
        let link = match self.conns.get(&conn).map(|c| &c.phase) {
            Some(Phase::Link(l)) => Some(l.domain().to_string()),
            _ => None,
        };
        self.remove_conn(conn);
        if let Some(domain) = link {
            self.link_gone(now, &domain, conn, "connection closed".into());
        }
    }

    fn remove_conn(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.remove(&conn) {
            self.deadlines.remove(&(c.deadline, conn));
            if let Some(address) = c.address() {
                if self.online.get(address) == Some(&conn) {
                    self.online.remove(address);
                }
            }
            if self.cluster.is_some() {
                self.cluster_conn_gone(conn, c.address());
            }
        }
    }
}

/// Whether a refusal with `code` takes from the connection's refusal allowance: every code
/// but those an honest agent gets from the state of the relay or of others (`rate_limited`:
/// its address's bucket or its connection's frame budget; `queue_full`,
/// `unknown_recipient`) and the closing ones.
pub(crate) fn strikes(code: ErrorCode) -> bool {
    !matches!(
        code,
        ErrorCode::RateLimited
            | ErrorCode::QueueFull
            | ErrorCode::UnknownRecipient
            | ErrorCode::TooManyRefusals
            | ErrorCode::Timeout
    )
}
