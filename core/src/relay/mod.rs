//! The relay state machine (spec §2, §3, §13, §16). See SPEC-NOTES "Relay link".
//!
//! [`Relay`] is the blind relay: it registers addresses and their Ed25519 keys,
//! authenticates connections by challenge-response, routes sealed [`Envelope`]s, keeps an
//! offline queue until each packet is acknowledged, sends heartbeats and rate-limits
//! senders. It reads only an envelope's header (`from`, `to`, `from_key`, `thread`) and
//! checks its outer signature; it never needs or sees a packet's plaintext.
//!
//! # Driving it
//!
//! The runtime reports connections (with the [`Source`] they come from), received
//! WebSocket text messages and disconnections with the current time (`handle_connected`,
//! `handle_bytes`, `handle_oversized`, `handle_disconnected`),
//! then drains [`Relay::poll_output`] until `None`, executing each [`RelayOutput`] in
//! order, and calls [`Relay::handle_timeout`] when [`Relay::poll_timeout`] is reached.
//!
//! **Output order contract.** Outputs form a single FIFO. Every
//! [`RelayOutput::Persist`] an action depends on is queued *before* the
//! [`RelayOutput::Send`] that reveals the action: a registration is persisted before its
//! `auth_ok`, a packet before the `accepted` that tells its sender it is safe, an
//! acknowledged packet's deletion before the deliveries its freed slot lets through. A
//! runtime that executes outputs in order, making each persist durable before the next
//! send, therefore only ever acknowledges durable packets. After a
//! [`RelayOutput::Close`] the relay has already forgotten the connection; the runtime
//! closes the socket and need not report `handle_disconnected` for it (doing so is
//! harmless). Bytes or disconnections for unknown connections are ignored.
//!
//! # Connection and authentication
//!
//! On connect the relay sends `challenge {nonce, domain, ts}` with 32 fresh random bytes.
//! The agent answers with `auth` (registered address) or `register` (new address and
//! key), signing [`frame::challenge_signed_bytes`] with label
//! [`frame::AUTH_LABEL`] / [`frame::REGISTER_LABEL`], the nonce, the relay's domain, its
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
//! Rate limits are token buckets, computed lazily (SPEC-NOTES relay link §6):
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
//! even read (beyond its transport limit) is reported with `handle_oversized`: refused
//! with `too_large` and the connection closed with that code. Every `error` frame the
//! relay sends also emits [`RelayEvent::Refused`] and counts in [`RelayStats::refusals`].
//! Refused input changes no state other than counters, rate buckets, liveness and the
//! consumed challenge; the relay keeps serving everyone else.

pub mod frame;
mod queue;
mod rate_limit;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::Duration;

use crate::address::Address;
use crate::crypto;
use crate::crypto::envelope::Envelope;
use crate::persist::PersistOp;
use crate::rng::DetRng;
use crate::time::Timestamp;

use self::crypto::PublicKey;
use self::frame::{
    challenge_signed_bytes, ClientFrame, ErrorCode, RelayFrame, AUTH_LABEL, REGISTER_LABEL,
};
use self::queue::{
    queue_key, reg_key, Queues, RegRecord, StoredItem, NEXT_ID_KEY, QUEUE_PREFIX, REG_PREFIX,
};
use self::rate_limit::{TokenBucket, MILLI};

/// Delivery ids are reserved in blocks of this size: `meta/next_id` is persisted once per
/// block, so ids stay monotonic across restarts even when the queue is empty.
const ID_BLOCK: u64 = 1024;

/// Longest `message` of a `malformed` refusal, in bytes.
const MAX_REASON: usize = 160;

/// What a frame costs from its connection's frame budget, in thousandths of a token.
const FRAME_COST: u64 = MILLI;
/// What an `ack` or a `pong` costs, and what each `deliver` gives back (its `ack`).
const CHEAP_FRAME_COST: u64 = MILLI / 4;

/// Where a connection comes from, as the runtime tells it: an opaque key the relay only
/// compares (for the registrations allowed per source). The reference runtime derives it
/// from the peer's IP address (the IPv4 address, or the /64 prefix of an IPv6 address);
/// simulations and tests number their sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source(pub u128);

/// Why bytes are not a frame the relay accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError {
    /// `too_large` or `malformed`.
    pub code: ErrorCode,
    /// What is wrong, for the error frame.
    pub message: String,
}

/// Whether the runtime already checked a `send`'s envelope signature ([`verify_send`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verified {
    /// Nothing was checked: the relay checks the signature itself.
    No,
    /// The envelope's outer signature verified under its `from_key`.
    EnvelopeSignature,
}

/// A parsed client frame. For a `send`, it also keeps the envelope's JSON exactly as
/// received, so that the relay persists and delivers those bytes instead of serialising
/// the envelope again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedFrame {
    frame: ClientFrame,
    /// A `send`'s `env` member, byte for byte (`None`: serialise `env` when needed).
    env_json: Option<Box<str>>,
}

impl ParsedFrame {
    /// The frame.
    pub fn frame(&self) -> &ClientFrame {
        &self.frame
    }

    /// The envelope's JSON text as received, for a `send` parsed from bytes.
    pub fn env_json(&self) -> Option<&str> {
        self.env_json.as_deref()
    }
}

impl From<ClientFrame> for ParsedFrame {
    /// A frame built in memory: a `send`'s envelope is serialised when the relay needs its
    /// JSON.
    fn from(frame: ClientFrame) -> Self {
        ParsedFrame {
            frame,
            env_json: None,
        }
    }
}

/// The members of a frame the fast path reads: a `send` is parsed in one pass, its
/// envelope kept as raw JSON and parsed from that.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    t: std::borrow::Cow<'a, str>,
    #[serde(default)]
    seq: Option<u64>,
    #[serde(borrow, default)]
    env: Option<&'a serde_json::value::RawValue>,
}

/// A `send` frame read in one pass, or `None` when the bytes are not one (or are not
/// valid: the general parser then says why).
fn parse_send(bytes: &[u8]) -> Option<ParsedFrame> {
    let head: Head<'_> = serde_json::from_slice(bytes).ok()?;
    if head.t != "send" {
        return None;
    }
    let raw = head.env?;
    let env: Envelope = serde_json::from_str(raw.get()).ok()?;
    Some(ParsedFrame {
        frame: ClientFrame::Send {
            seq: head.seq?,
            env,
        },
        env_json: Some(raw.get().into()),
    })
}

/// Parses one frame, refusing one longer than `max_frame_bytes` before reading it. Pure:
/// runtimes may call it on any thread and hand the result to [`Relay::handle_frame`].
pub fn parse_frame(bytes: &[u8], max_frame_bytes: usize) -> Result<ParsedFrame, FrameError> {
    if bytes.len() > max_frame_bytes {
        return Err(FrameError {
            code: ErrorCode::TooLarge,
            message: format!(
                "frame of {} bytes exceeds the limit of {max_frame_bytes}",
                bytes.len()
            ),
        });
    }
    if let Some(p) = parse_send(bytes) {
        return Ok(p);
    }
    ClientFrame::from_bytes(bytes)
        .map(ParsedFrame::from)
        .map_err(|e| {
            let mut msg = e.to_string();
            if msg.len() > MAX_REASON {
                let mut end = MAX_REASON;
                while !msg.is_char_boundary(end) {
                    end -= 1;
                }
                msg.truncate(end);
            }
            FrameError {
                code: ErrorCode::Malformed,
                message: msg,
            }
        })
}

/// Checks a `send` frame's envelope signature under the key the envelope names
/// (`from_key`), with `key` the decompressed form of that key (cache it: decompressing
/// costs about as much as a verification). Pure: runtimes call it off the state machine's
/// thread and pass [`Verified::EnvelopeSignature`] when it returns true. Frames other
/// than `send` return false.
pub fn verify_send(frame: &ClientFrame, key: &crypto::PublicKey) -> bool {
    match frame {
        ClientFrame::Send { env, .. } => {
            key.to_bytes() == env.from_key && crypto::verify_envelope(env, key).is_ok()
        }
        _ => false,
    }
}

/// Relay settings. See [`RelayConfig::default`] for the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// The domain this relay serves (`a2acp.io` in `agent:jono@a2acp.io`); normalised to
    /// lower case. Default `localhost`.
    pub domain: String,
    /// Longest frame accepted, in bytes. Default 131 072 (128 KiB).
    pub max_frame_bytes: usize,
    /// Most unacknowledged packets per (recipient, thread) (spec §13.2). Default 100.
    pub queue_per_thread: u32,
    /// Most unacknowledged packets per recipient. Default 10 000.
    pub queue_per_recipient: u32,
    /// Most deliveries awaiting acknowledgement per connection; at least 1. Default 256.
    pub max_in_flight: u32,
    /// Heartbeat period (spec §13.1). Default 30 s.
    pub ping_interval: Duration,
    /// A connection silent for `(missed_pongs + 1) × ping_interval` is dead. Default 2.
    pub missed_pongs: u32,
    /// Time a connection has to authenticate. Default 10 s.
    pub auth_timeout: Duration,
    /// Largest accepted difference between an `auth`/`register` timestamp and the
    /// relay's clock. Default 5 min.
    pub auth_max_skew: Duration,
    /// Token-bucket refill, tokens per second. Default 50.
    pub rate_per_sec: u32,
    /// Token-bucket capacity; at least 1. Default 200.
    pub rate_burst: u32,
    /// Refill of a connection's frame budget, tokens per second (an `ack` or `pong`
    /// costs ¼ token, any other frame one). Default 100.
    pub conn_rate_per_sec: u32,
    /// Capacity of a connection's frame budget; at least 1. Default 400.
    pub conn_rate_burst: u32,
    /// Refusals a connection may collect at once before it is closed
    /// (`too_many_refusals`); at least 1. Default 50.
    pub refusal_burst: u32,
    /// Refill of a connection's refusal allowance, per second. Default 1.
    pub refusals_per_sec: u32,
    /// New addresses one source may register per `registration_window`; at least 1.
    /// Default 20.
    pub registrations_per_source: u32,
    /// The window of `registrations_per_source`, from a source's first registration in
    /// it. Default 1 h.
    pub registration_window: Duration,
    /// Most sources whose registrations are counted at once; at least 1. Default 65 536.
    pub max_registration_sources: usize,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            domain: "localhost".to_string(),
            max_frame_bytes: 131_072,
            queue_per_thread: 100,
            queue_per_recipient: 10_000,
            max_in_flight: 256,
            ping_interval: Duration::from_secs(30),
            missed_pongs: 2,
            auth_timeout: Duration::from_secs(10),
            auth_max_skew: Duration::from_secs(300),
            rate_per_sec: 50,
            rate_burst: 200,
            conn_rate_per_sec: 100,
            conn_rate_burst: 400,
            refusal_burst: 50,
            refusals_per_sec: 1,
            registrations_per_source: 20,
            registration_window: Duration::from_secs(3600),
            max_registration_sources: 65_536,
        }
    }
}

/// A connection, as numbered by the runtime. Numbers must not be reused while the
/// relay still knows the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// Something the runtime must do, in the order polled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayOutput {
    /// Apply a storage operation (durably, before executing any later `Send`).
    Persist(PersistOp),
    /// Send one frame (a WebSocket text message) on a connection.
    Send {
        /// The connection.
        conn: ConnId,
        /// The frame's JSON.
        bytes: Vec<u8>,
    },
    /// Close a connection; the relay has already forgotten it.
    Close {
        /// The connection.
        conn: ConnId,
        /// Why (for the WebSocket close reason: [`ErrorCode::as_str`]).
        code: ErrorCode,
    },
    /// Something for logs and metrics; no action needed.
    Event(RelayEvent),
}

/// What happened, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayEvent {
    /// A new address was registered (and persisted).
    Registered {
        /// The address.
        address: Address,
    },
    /// A connection authenticated.
    Authenticated {
        /// The connection.
        conn: ConnId,
        /// As whom.
        address: Address,
    },
    /// A packet was accepted and queued.
    Routed {
        /// Sender.
        from: Address,
        /// Recipient.
        to: Address,
        /// Delivery id.
        id: u64,
    },
    /// A packet was sent to its recipient (again, after a reconnect).
    Delivered {
        /// Delivery id.
        id: u64,
        /// Recipient.
        to: Address,
    },
    /// A packet was acknowledged and dropped from the queue.
    Acked {
        /// Delivery id.
        id: u64,
    },
    /// An `ack` named no packet queued for the acknowledging address; ignored.
    AckIgnored {
        /// The acknowledging connection.
        conn: ConnId,
        /// The id it named.
        id: u64,
    },
    /// The relay sent an `error` frame.
    Refused {
        /// The connection.
        conn: ConnId,
        /// Its authenticated address, if any.
        address: Option<Address>,
        /// The error code.
        code: ErrorCode,
        /// The error message.
        message: String,
    },
    /// A newer connection took over an address.
    Replaced {
        /// The closed connection.
        old: ConnId,
        /// The new one.
        new: ConnId,
        /// The address.
        address: Address,
    },
    /// A packet was refused because its (recipient, thread) queue is full.
    Overflow {
        /// Sender.
        from: Address,
        /// Recipient.
        to: Address,
    },
    /// A connection went silent and was closed.
    ConnectionDead {
        /// The connection.
        conn: ConnId,
    },
}

/// Counters and sizes, for metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Open connections.
    pub connections: usize,
    /// Authenticated connections.
    pub authenticated: usize,
    /// Registered addresses.
    pub registered: usize,
    /// Packets queued (unacknowledged), all recipients.
    pub queued: usize,
    /// Packets accepted since start.
    pub routed_total: u64,
    /// Deliveries sent since start (re-deliveries included).
    pub delivered_total: u64,
    /// Packets acknowledged since start.
    pub acked_total: u64,
    /// `overflow` frames sent since start.
    pub overflows: u64,
    /// `error` frames sent since start, by code.
    pub refusals: BTreeMap<ErrorCode, u64>,
    /// Connections closed since start because they kept sending refused frames or frames
    /// beyond their budget (`too_many_refusals`).
    pub closed_for_refusals: u64,
    /// Connections closed since start after a frame beyond the transport's limit
    /// ([`Relay::handle_oversized`]).
    pub closed_oversized: u64,
    /// Registrations refused since start by the limit per source
    /// (`registration_limited`).
    pub registrations_limited: u64,
    /// Sources whose registrations are being counted.
    pub registration_sources: usize,
}

/// Why [`Relay::restore`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayRestoreError {
    /// A record could not be read, or contradicts its key or another record.
    #[error("bad relay record `{key}`: {reason}")]
    BadRecord {
        /// The record key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A registered address.
#[derive(Debug, Clone)]
struct Registration {
    key: PublicKey,
    key_bytes: [u8; 32],
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
    },
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
            Phase::Unauth { .. } => None,
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
                let key = PublicKey::from_stored_bytes(&rec.key)
                    .map_err(|_| bad("invalid public key".into()))?;
                relay.registry.insert(
                    rec.address,
                    Registration {
                        key,
                        key_bytes: rec.key,
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
            } else if key == NEXT_ID_KEY {
                let n: u64 = serde_json::from_slice(&value).map_err(|e| bad(e.to_string()))?;
                high_water = high_water.max(n);
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
            relay.queues.insert(item);
        }
        relay.next_id = high_water;
        relay.id_reserved = high_water;
        Ok(relay)
    }

    /// A connection opened from `source`: the relay sends it a challenge. A number still
    /// in use is treated as a disconnection followed by a new connection.
    pub fn handle_connected(&mut self, now: Timestamp, conn: ConnId, source: Source) {
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

    /// One frame (a WebSocket text or binary message) arrived on `conn`.
    pub fn handle_bytes(&mut self, now: Timestamp, conn: ConnId, bytes: &[u8]) {
        let parsed = parse_frame(bytes, self.config.max_frame_bytes);
        self.handle_frame(now, conn, parsed, Verified::No);
    }

    /// [`Relay::handle_bytes`] for a frame the runtime already parsed with
    /// [`parse_frame`] — and, for a `send`, whose envelope signature it may already have
    /// checked with [`verify_send`] (`Verified::EnvelopeSignature`). Parsing and signature
    /// checks are pure and need no relay state, so a runtime can do them on its connection
    /// tasks, in parallel or in batches, and keep the state machine's thread for routing.
    /// Everything else — rate limits, sender and key checks against the registry, queue
    /// bounds — still happens here, in order.
    pub fn handle_frame(
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
            self.process_frame(now, conn, parsed, verified);
        }
        self.settle_strikes(now, conn);
    }

    /// A frame arrived on `conn` that the runtime could not read because it exceeds its
    /// transport's limit (`limit` bytes; a WebSocket message too long to buffer): the
    /// relay refuses it with `too_large` and closes the connection with that code.
    pub fn handle_oversized(&mut self, _now: Timestamp, conn: ConnId, limit: usize) {
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

    /// Charges a frame to its connection's budget. The first frame it cannot pay is
    /// refused with `rate_limited`; another before it can pay again closes the
    /// connection. Returns whether the frame was paid (and is to be processed).
    fn pay_frame(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        parsed: &Result<ParsedFrame, FrameError>,
    ) -> bool {
        let (rate, burst) = (
            self.config.conn_rate_per_sec,
            self.config.conn_rate_burst.max(1),
        );
        let cost = match parsed.as_ref().map(ParsedFrame::frame) {
            Ok(ClientFrame::Ack { .. } | ClientFrame::Pong { .. }) => CHEAP_FRAME_COST,
            _ => FRAME_COST,
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return false;
        };
        if c.budget.try_take_milli(now, rate, burst, cost) {
            c.over_budget = false;
            return true;
        }
        if c.over_budget {
            self.close_for_refusals(conn, "frames beyond the connection's budget");
            return false;
        }
        c.over_budget = true;
        c.strikes = c.strikes.saturating_add(1);
        let seq = match parsed.as_ref().map(ParsedFrame::frame) {
            Ok(ClientFrame::Send { seq, .. }) => Some(*seq),
            _ => None,
        };
        self.refuse(
            conn,
            ErrorCode::RateLimited,
            "frame budget exceeded: slow down, or the connection is closed".into(),
            seq,
        );
        false
    }

    /// Takes the refusals of the frame just handled from the connection's allowance,
    /// closing it when the allowance is exhausted.
    fn settle_strikes(&mut self, now: Timestamp, conn: ConnId) {
        let (rate, burst) = (
            self.config.refusals_per_sec,
            self.config.refusal_burst.max(1),
        );
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let strikes = std::mem::take(&mut c.strikes);
        for _ in 0..strikes {
            if !c.allowance.try_take(now, rate, burst) {
                self.close_for_refusals(conn, "too many refused frames");
                return;
            }
        }
    }

    /// Sends `error too_many_refusals` and closes the connection with that code.
    fn close_for_refusals(&mut self, conn: ConnId, why: &str) {
        self.refuse(
            conn,
            ErrorCode::TooManyRefusals,
            format!("{why}: connection closed"),
            None,
        );
        self.counters.closed_for_refusals = self.counters.closed_for_refusals.saturating_add(1);
        self.close(conn, ErrorCode::TooManyRefusals);
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
                    ClientFrame::Ping { n } => self.send(conn, &RelayFrame::Pong { n }),
                    ClientFrame::Pong { .. } => {}
                    ClientFrame::Send { seq, .. } => self.refuse(
                        conn,
                        ErrorCode::NotAuthenticated,
                        "authenticate first".into(),
                        Some(seq),
                    ),
                    ClientFrame::Ack { .. } | ClientFrame::Lookup { .. } => self.refuse(
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
                    ClientFrame::Lookup { address: who } => {
                        if !self.bucket(now, &address).try_take(now, rate, burst) {
                            self.refuse(conn, ErrorCode::RateLimited, "slow down".into(), None);
                            return;
                        }
                        let key = self
                            .registry
                            .get(&who)
                            .filter(|_| who.domain() == self.config.domain)
                            .map(|r| r.key_bytes);
                        self.send(conn, &RelayFrame::Key { address: who, key });
                    }
                    ClientFrame::Ping { n } => self.send(conn, &RelayFrame::Pong { n }),
                    ClientFrame::Pong { .. } => {}
                    ClientFrame::Auth { .. } | ClientFrame::Register { .. } => {
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

    /// A connection closed. Its unacknowledged deliveries stay queued.
    pub fn handle_disconnected(&mut self, _now: Timestamp, conn: ConnId) {
        self.remove_conn(conn);
    }

    /// Time passed: closes connections that did not authenticate in time or went silent,
    /// and sends the periodic pings.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        while let Some(&(when, conn)) = self.deadlines.first() {
            if when > now {
                break;
            }
            self.deadlines.pop_first();
            let Some(c) = self.conns.get(&conn) else {
                continue;
            };
            let auth_expired =
                matches!(c.phase, Phase::Unauth { auth_deadline, .. } if auth_deadline <= now);
            let dead = self.dead_at(c) <= now;
            if auth_expired {
                self.refuse(
                    conn,
                    ErrorCode::NotAuthenticated,
                    "authentication timed out".into(),
                    None,
                );
                self.close(conn, ErrorCode::NotAuthenticated);
            } else if dead {
                self.close(conn, ErrorCode::Timeout);
                self.push_event(RelayEvent::ConnectionDead { conn });
            } else {
                // Stale entry (cannot happen: entries are kept current); re-arm.
                let d = self.deadline_of(c);
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.deadline = d;
                }
                self.deadlines.insert((d, conn));
            }
        }
        if let Some(t) = self.next_ping {
            if t <= now {
                if self.conns.is_empty() {
                    self.next_ping = None;
                } else {
                    let n = self.ping_n;
                    self.ping_n = self.ping_n.wrapping_add(1);
                    let conns: Vec<ConnId> = self.conns.keys().copied().collect();
                    for conn in conns {
                        self.send(conn, &RelayFrame::Ping { n });
                    }
                    self.next_ping = Some(now.add(self.config.ping_interval));
                }
            }
        }
    }

    /// The next output to execute, in order.
    pub fn poll_output(&mut self) -> Option<RelayOutput> {
        self.out.pop_front()
    }

    /// When [`Relay::handle_timeout`] must next be called: the earliest of the next ping,
    /// an authentication deadline and a dead-connection deadline. `None` with no
    /// connections.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let deadline = self.deadlines.first().map(|&(t, _)| t);
        let ping = self.next_ping.filter(|_| !self.conns.is_empty());
        match (deadline, ping) {
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
        }
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

    // ---- frames ----

    fn on_auth(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        address: Address,
        ts: u64,
        sig: [u8; 64],
        key: Option<[u8; 32]>,
    ) {
        let challenge = match self.conns.get_mut(&conn).map(|c| &mut c.phase) {
            Some(Phase::Unauth { challenge, .. }) => challenge.take(),
            _ => return,
        };
        match self.check_auth(now, challenge, &address, ts, &sig, key) {
            Ok(new_key) => {
                if new_key.is_some() && !self.admit_registration(now, conn) {
                    self.counters.registrations_limited =
                        self.counters.registrations_limited.saturating_add(1);
                    self.refuse(
                        conn,
                        ErrorCode::RegistrationLimited,
                        "too many new addresses registered from this source: try again later"
                            .into(),
                        None,
                    );
                    self.issue_challenge(now, conn);
                    return;
                }
                if let Some((key, key_bytes)) = new_key {
                    let rec = RegRecord {
                        address: address.clone(),
                        key: key_bytes,
                        registered_at: now,
                    };
                    self.persist_put(reg_key(&address), &rec);
                    self.registry
                        .insert(address.clone(), Registration { key, key_bytes });
                    self.push_event(RelayEvent::Registered {
                        address: address.clone(),
                    });
                }
                self.authenticate(now, conn, address);
            }
            Err((code, message)) => {
                self.refuse(conn, code, message.into(), None);
                self.issue_challenge(now, conn);
            }
        }
    }

    /// Checks an `auth` (`key` absent) or `register`; on success returns the key to
    /// register, if the address is new.
    #[allow(clippy::type_complexity)]
    fn check_auth(
        &self,
        now: Timestamp,
        challenge: Option<[u8; 32]>,
        address: &Address,
        ts: u64,
        sig: &[u8; 64],
        key: Option<[u8; 32]>,
    ) -> Result<Option<(PublicKey, [u8; 32])>, (ErrorCode, &'static str)> {
        let nonce = challenge.ok_or((ErrorCode::AuthFailed, "no outstanding challenge"))?;
        let skew = u128::from(ts.abs_diff(now.as_millis()));
        if skew > self.config.auth_max_skew.as_millis() {
            return Err((
                ErrorCode::AuthFailed,
                "timestamp too far from the relay's clock",
            ));
        }
        let domain = self.config.domain.as_str();
        match key {
            None => {
                let reg = self
                    .registry
                    .get(address)
                    .ok_or((ErrorCode::AuthFailed, "address is not registered"))?;
                let msg = challenge_signed_bytes(AUTH_LABEL, &nonce, domain, ts, address, None);
                reg.key
                    .verify(&msg, sig)
                    .map_err(|_| (ErrorCode::AuthFailed, "signature does not verify"))?;
                Ok(None)
            }
            Some(key_bytes) => {
                if address.domain() != domain {
                    return Err((
                        ErrorCode::UnknownRecipient,
                        "address is not served by this relay",
                    ));
                }
                let key = PublicKey::from_bytes(&key_bytes)
                    .map_err(|_| (ErrorCode::AuthFailed, "invalid public key"))?;
                let msg = challenge_signed_bytes(
                    REGISTER_LABEL,
                    &nonce,
                    domain,
                    ts,
                    address,
                    Some(&key_bytes),
                );
                key.verify(&msg, sig)
                    .map_err(|_| (ErrorCode::AuthFailed, "signature does not verify"))?;
                match self.registry.get(address) {
                    None => Ok(Some((key, key_bytes))),
                    Some(reg) if reg.key_bytes == key_bytes => Ok(None),
                    Some(_) => Err((
                        ErrorCode::AddressTaken,
                        "address is registered with another key",
                    )),
                }
            }
        }
    }

    /// Whether the source of `conn` may register one more address in its window (and
    /// counts it). Expired windows are dropped first; a source not counted yet is refused
    /// while `max_registration_sources` others are.
    fn admit_registration(&mut self, now: Timestamp, conn: ConnId) -> bool {
        let Some(source) = self.conns.get(&conn).map(|c| c.source) else {
            return false;
        };
        let window = self.config.registration_window;
        while let Some(&(start, s)) = self.source_windows.first() {
            if start.add(window) > now {
                break;
            }
            self.source_windows.pop_first();
            self.sources.remove(&s);
        }
        let limit = self.config.registrations_per_source.max(1);
        if let Some(w) = self.sources.get_mut(&source) {
            if w.count >= limit {
                return false;
            }
            w.count += 1;
            return true;
        }
        if self.sources.len() >= self.config.max_registration_sources.max(1) {
            return false;
        }
        self.sources.insert(
            source,
            SourceWindow {
                start: now,
                count: 1,
            },
        );
        self.source_windows.insert((now, source));
        true
    }

    fn authenticate(&mut self, now: Timestamp, conn: ConnId, address: Address) {
        if let Some(old) = self.online.get(&address).copied() {
            if old != conn {
                self.send(old, &RelayFrame::Replaced);
                self.close(old, ErrorCode::NotAuthenticated);
                self.push_event(RelayEvent::Replaced {
                    old,
                    new: conn,
                    address: address.clone(),
                });
            }
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.phase = Phase::Authed {
            address: address.clone(),
            in_flight: BTreeSet::new(),
            cursor: 0,
        };
        self.online.insert(address.clone(), conn);
        self.reschedule(conn);
        self.bucket(now, &address);
        let queued = u64::try_from(self.queued_for(&address)).unwrap_or(u64::MAX);
        self.send(
            conn,
            &RelayFrame::AuthOk {
                address: address.clone(),
                queued,
            },
        );
        self.push_event(RelayEvent::Authenticated {
            conn,
            address: address.clone(),
        });
        self.pump(&address);
    }

    fn on_send(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        from: Address,
        seq: u64,
        (env, env_json): (Envelope, Option<Box<str>>),
        verified: Verified,
    ) {
        let (rate, burst) = (self.config.rate_per_sec, self.config.rate_burst);
        if !self.bucket(now, &from).try_take(now, rate, burst) {
            self.refuse(conn, ErrorCode::RateLimited, "slow down".into(), Some(seq));
            return;
        }
        let Some(reg) = self.registry.get(&from) else {
            return;
        };
        if env.from != from || env.from_key != reg.key_bytes {
            self.refuse(
                conn,
                ErrorCode::WrongSender,
                "envelope sender is not the authenticated address and its key".into(),
                Some(seq),
            );
            return;
        }
        if env.v != crypto::ENVELOPE_VERSION {
            self.refuse(
                conn,
                ErrorCode::Malformed,
                format!("unsupported envelope version {}", env.v),
                Some(seq),
            );
            return;
        }
        // A runtime that verified the signature checked it against `env.from_key`, which
        // was just compared with the registered key: the same check.
        if verified != Verified::EnvelopeSignature
            && crypto::verify_envelope(&env, &reg.key).is_err()
        {
            self.refuse(
                conn,
                ErrorCode::BadSignature,
                "envelope signature does not verify".into(),
                Some(seq),
            );
            return;
        }
        if env.to.domain() != self.config.domain || !self.registry.contains_key(&env.to) {
            self.refuse(
                conn,
                ErrorCode::UnknownRecipient,
                format!("{} is not registered here", env.to),
                Some(seq),
            );
            return;
        }
        let limit = self.config.queue_per_thread;
        if self.queues.thread_len(&env.to, &env.thread) >= limit {
            self.counters.overflows = self.counters.overflows.saturating_add(1);
            let to = env.to.clone();
            self.send(
                conn,
                &RelayFrame::Overflow {
                    seq,
                    to: to.clone(),
                    thread: env.thread,
                    limit,
                },
            );
            self.push_event(RelayEvent::Overflow { from, to });
            return;
        }
        let per_recipient = usize::try_from(self.config.queue_per_recipient).unwrap_or(usize::MAX);
        if self.queues.len_for(&env.to) >= per_recipient {
            self.refuse(
                conn,
                ErrorCode::QueueFull,
                format!("the queue of {} is full", env.to),
                Some(seq),
            );
            return;
        }
        let id = self.next_id;
        let Some(next) = id.checked_add(1) else {
            self.refuse(
                conn,
                ErrorCode::QueueFull,
                "delivery ids exhausted".into(),
                Some(seq),
            );
            return;
        };
        if id >= self.id_reserved {
            self.id_reserved = id.saturating_add(ID_BLOCK);
            let reserved = self.id_reserved;
            self.persist_put(NEXT_ID_KEY.to_string(), &reserved);
        }
        self.next_id = next;
        let to = env.to.clone();
        let env_json =
            env_json.unwrap_or_else(|| serde_json::to_string(&env).unwrap_or_default().into());
        let item = StoredItem {
            id,
            accepted_at: now,
            to: to.clone(),
            thread: env.thread,
            env: env_json,
        };
        self.out.push_back(RelayOutput::Persist(PersistOp::Put {
            key: queue_key(&to, id),
            value: item.record(),
        }));
        self.queues.insert(item);
        self.counters.routed = self.counters.routed.saturating_add(1);
        self.send(conn, &RelayFrame::Accepted { seq, id });
        self.push_event(RelayEvent::Routed {
            from,
            to: to.clone(),
            id,
        });
        self.pump(&to);
    }

    fn on_ack(&mut self, conn: ConnId, address: &Address, id: u64) {
        if self.queues.remove(address, id).is_none() {
            self.push_event(RelayEvent::AckIgnored { conn, id });
            return;
        }
        self.out.push_back(RelayOutput::Persist(PersistOp::Delete {
            key: queue_key(address, id),
        }));
        self.counters.acked = self.counters.acked.saturating_add(1);
        if let Some(Phase::Authed { in_flight, .. }) =
            self.conns.get_mut(&conn).map(|c| &mut c.phase)
        {
            in_flight.remove(&id);
        }
        self.push_event(RelayEvent::Acked { id });
        self.pump(address);
    }

    /// Delivers what is queued for `address` and not yet sent on its connection, in id
    /// order, up to `max_in_flight`.
    fn pump(&mut self, address: &Address) {
        let Some(&conn) = self.online.get(address) else {
            return;
        };
        let Some(Phase::Authed {
            in_flight, cursor, ..
        }) = self.conns.get_mut(&conn).map(|c| &mut c.phase)
        else {
            return;
        };
        let Some(q) = self.queues.by_recipient.get(address) else {
            return;
        };
        let max = usize::try_from(self.config.max_in_flight).unwrap_or(usize::MAX);
        let mut sent = 0u64;
        for (&id, item) in q.items.range(*cursor..) {
            if in_flight.len() >= max {
                break;
            }
            sent += 1;
            self.out.push_back(RelayOutput::Send {
                conn,
                bytes: item.deliver_frame(),
            });
            self.out
                .push_back(RelayOutput::Event(RelayEvent::Delivered {
                    id,
                    to: address.clone(),
                }));
            self.counters.delivered = self.counters.delivered.saturating_add(1);
            in_flight.insert(id);
            *cursor = id.saturating_add(1);
        }
        // Each delivery pays for the `ack` it asks for.
        let burst = self.config.conn_rate_burst.max(1);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.budget
                .credit_milli(sent.saturating_mul(CHEAP_FRAME_COST), burst);
        }
    }

    // ---- helpers ----

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

    fn issue_challenge(&mut self, now: Timestamp, conn: ConnId) {
        let nonce = self.rng.bytes32();
        if let Some(Phase::Unauth { challenge, .. }) =
            self.conns.get_mut(&conn).map(|c| &mut c.phase)
        {
            *challenge = Some(nonce);
        }
        let frame = RelayFrame::Challenge {
            nonce,
            domain: self.config.domain.clone(),
            ts: now.as_millis(),
        };
        self.send(conn, &frame);
    }

    /// The rate bucket of an authenticated address, created full.
    fn bucket(&mut self, now: Timestamp, address: &Address) -> &mut TokenBucket {
        let burst = self.config.rate_burst;
        self.buckets
            .entry(address.clone())
            .or_insert_with(|| TokenBucket::full(now, burst))
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
        let strike = !matches!(
            code,
            ErrorCode::RateLimited
                | ErrorCode::QueueFull
                | ErrorCode::UnknownRecipient
                | ErrorCode::TooManyRefusals
                | ErrorCode::Timeout
        );
        if let Some(c) = self.conns.get_mut(&conn).filter(|_| strike) {
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
        self.push_event(RelayEvent::Refused {
            conn,
            address,
            code,
            message,
        });
    }

    fn close(&mut self, conn: ConnId, code: ErrorCode) {
        self.remove_conn(conn);
        self.out.push_back(RelayOutput::Close { conn, code });
    }

    fn remove_conn(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.remove(&conn) {
            self.deadlines.remove(&(c.deadline, conn));
            if let Some(address) = c.address() {
                if self.online.get(address) == Some(&conn) {
                    self.online.remove(address);
                }
            }
        }
    }

    fn dead_at(&self, c: &Conn) -> Timestamp {
        let periods = self.config.missed_pongs.saturating_add(1);
        let silence = self.config.ping_interval.saturating_mul(periods);
        c.last_seen.add(silence)
    }

    fn deadline_of(&self, c: &Conn) -> Timestamp {
        let dead = self.dead_at(c);
        match c.phase {
            Phase::Unauth { auth_deadline, .. } => dead.min(auth_deadline),
            Phase::Authed { .. } => dead,
        }
    }

    /// Recomputes `conn`'s deadline after its liveness or phase changed.
    fn reschedule(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let d = self.deadline_of(c);
        let old = c.deadline;
        if d != old {
            self.deadlines.remove(&(old, conn));
            self.deadlines.insert((d, conn));
            if let Some(c) = self.conns.get_mut(&conn) {
                c.deadline = d;
            }
        }
    }
}
