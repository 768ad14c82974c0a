//! The relay's public types: its inputs and outputs, events, settings and counters.

use std::collections::BTreeMap;
use std::time::Duration;

use super::cluster::{ClusterInput, ClusterMode, ClusterOp};
use super::federation::{
    DiscoveryError, DomainStats, FederationConfig, FederationEvent, RemoteRelay,
};
use super::{FrameError, ParsedFrame, Verified};
use crate::address::Address;
use crate::link::ErrorCode;
use crate::persist::PersistOp;

/// An input to the relay, handed over with the current time ([`super::Relay::handle`]).
// `Frame` is large (a parsed envelope), but an input lives on the stack for one call and is
// never stored: boxing it would cost an allocation per frame.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum RelayInput<'a> {
    /// A connection opened from `source`: the relay sends it a challenge. A number still
    /// in use is treated as a disconnection followed by a new connection.
    Connected {
        /// The connection.
        conn: ConnId,
        /// Where it comes from.
        source: Source,
    },
    /// One frame (a WebSocket text or binary message) arrived on `conn`.
    Bytes {
        /// The connection.
        conn: ConnId,
        /// The frame, as received.
        bytes: &'a [u8],
    },
    /// [`RelayInput::Bytes`] for a frame the runtime already parsed with
    /// [`super::parse_frame`] — and, for a `send`, whose envelope signature it may already
    /// have checked with [`super::verify_send`] (`Verified::EnvelopeSignature`). Parsing
    /// and signature checks are pure and need no relay state, so a runtime can do them on
    /// its connection tasks, in parallel or in batches, and keep the state machine's
    /// thread for routing. Everything else — rate limits, sender and key checks against
    /// the registry, queue bounds — still happens in the relay, in order.
    Frame {
        /// The connection.
        conn: ConnId,
        /// The frame, or why it is not one.
        parsed: Result<ParsedFrame, FrameError>,
        /// What the runtime already checked.
        verified: Verified,
    },
    /// A frame arrived on `conn` that the runtime could not read because it exceeds its
    /// transport's limit (`limit` bytes; a WebSocket message too long to buffer): the
    /// relay refuses it with `too_large` and closes the connection with that code.
    Oversized {
        /// The connection.
        conn: ConnId,
        /// The transport's limit, in bytes.
        limit: usize,
    },
    /// A connection closed. Its unacknowledged deliveries stay queued.
    Disconnected {
        /// The connection.
        conn: ConnId,
    },
    /// The timer armed for [`super::Relay::poll_timeout`] fired: the relay closes
    /// connections that did not authenticate in time or went silent, and sends the
    /// periodic pings.
    Timeout,
    /// Federation: the answer to [`RelayOutput::Discover`] for `domain`.
    Discovered {
        /// The domain asked about (as in the `Discover`).
        domain: String,
        /// Its relay, or why there is none.
        result: Result<RemoteRelay, DiscoveryError>,
    },
    /// Federation: the connection asked for by [`RelayOutput::Dial`] is open (the WebSocket
    /// handshake over TLS done). Frames received on it must be handed over as
    /// [`RelayInput::Bytes`] (they are the accepting relay's frames, which
    /// [`super::parse_frame`] does not read); its end is an ordinary
    /// [`RelayInput::Disconnected`].
    Dialed {
        /// The domain dialed (as in the `Dial`).
        domain: String,
        /// A fresh connection number.
        conn: ConnId,
        /// Where it goes to.
        source: Source,
    },
    /// Federation: the connection asked for by [`RelayOutput::Dial`] could not be opened.
    DialFailed {
        /// The domain dialed (as in the `Dial`).
        domain: String,
        /// Why, for logs.
        reason: String,
    },
    /// Cluster mode: an answer of the domain's shared store, or news from it.
    Cluster(ClusterInput),
}

/// Where a connection comes from, as the runtime tells it: an opaque key the relay only
/// compares (for the registrations allowed per source). The reference runtime derives it
/// from the peer's IP address (the IPv4 address, or the /64 prefix of an IPv6 address);
/// simulations and tests number their sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source(pub u128);

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
    /// Federation with relays of other domains (docs/protocol.md "The federation link").
    /// Default `None`: packets for other domains are refused `unknown_recipient`.
    pub federation: Option<FederationConfig>,
    /// Cluster mode: this relay is one node of several serving the domain through a
    /// shared store ([`super::cluster`]). Default `None`: a single relay.
    pub cluster: Option<ClusterMode>,
    /// Wake-ups for offline agents ([`super::wake_up`]). Default: on, once a minute per
    /// agent at most, public endpoints only.
    pub wake_up: WakeUpConfig,
}

/// How the relay wakes agents that are offline when a packet is queued for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeUpConfig {
    /// Whether agents may register endpoints at all.
    pub enabled: bool,
    /// At most one wake-up per agent in this interval. Default 60 s.
    pub interval: Duration,
    /// Accept endpoints naming loopback, private, link-local and other non-public
    /// addresses, and `http://` (a test bed, a push server on the operator's own network).
    /// Default false: those are refused (server-side request forgery).
    pub allow_private: bool,
}

impl Default for WakeUpConfig {
    fn default() -> Self {
        WakeUpConfig {
            enabled: true,
            interval: Duration::from_secs(60),
            allow_private: false,
        }
    }
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
            federation: None,
            cluster: None,
            wake_up: WakeUpConfig::default(),
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
    /// Federation: find the relay serving `domain` (its `.well-known/a2acp` document, or
    /// the operator's static map) and answer [`RelayInput::Discovered`]. Never asked again
    /// for the same domain before it is answered (or `connect_timeout` passed).
    Discover {
        /// The domain, lower case.
        domain: String,
    },
    /// Federation: open a relay link (a WebSocket over TLS) to `endpoint` and answer
    /// [`RelayInput::Dialed`] or [`RelayInput::DialFailed`].
    Dial {
        /// The remote domain.
        domain: String,
        /// Its relay's endpoint, from discovery.
        endpoint: String,
    },
    /// POST a wake-up to `endpoint` (an agent was offline when a packet was queued for
    /// it): the body is the fixed [`super::wake_up::WAKE_UP_BODY`], nothing else. A runtime
    /// sends it off the routing path (a bounded queue, a deadline), checks again that
    /// the endpoint's host resolves to no address the operator did not allow, and drops
    /// it when its queue is full; nothing waits for it.
    WakeUp {
        /// The endpoint.
        endpoint: String,
    },
    /// Cluster mode: ask the domain's shared store ([`ClusterOp`]). Nothing waits for it
    /// but what it names; it reveals nothing, so it need not wait for earlier persists.
    Cluster(ClusterOp),
}

impl RelayOutput {
    /// Whether this is a `deliver` frame to an agent: the one frame a runtime may send
    /// before the [`RelayOutput::Persist`]s decided before it are durable (the packet it
    /// carries is one its sender has not been told is `accepted`, and will send again
    /// after a crash; recipients drop duplicates by packet id). It must still not
    /// overtake the connection's `auth_ok` ([`RelayEvent::Authenticated`]) nor an
    /// earlier `deliver` to the same connection.
    pub fn is_delivery(&self) -> bool {
        matches!(self, RelayOutput::Send { bytes, .. }
            if bytes.starts_with(super::queue::DELIVER_PREFIX.as_bytes()))
    }

    /// The delivery id a `deliver` frame carries ([`Self::is_delivery`]); `None` for any
    /// other output.
    pub fn delivery_id(&self) -> Option<u64> {
        let RelayOutput::Send { bytes, .. } = self else {
            return None;
        };
        let rest = bytes.strip_prefix(super::queue::DELIVER_PREFIX.as_bytes())?;
        let digits = rest.strip_prefix(b",\"id\":")?;
        let n = digits.iter().take_while(|c| c.is_ascii_digit()).count();
        std::str::from_utf8(digits.get(..n)?).ok()?.parse().ok()
    }

    /// Whether this persists a reservation of delivery ids (`meta/next_id`).
    pub fn reserves_delivery_ids(&self) -> bool {
        self.reserved_delivery_ids().is_some()
    }

    /// For a persisted reservation of delivery ids (`meta/next_id`): the ids it covers,
    /// every id below the returned one. A `deliver` sent before the persists decided
    /// before it are durable ([`Self::is_delivery`]) must wait until a reservation
    /// covering its id ([`Self::delivery_id`]) is durable: that id is then never handed
    /// out again after a crash. The relay decides the reservation covering an id before
    /// the id (far ahead of it: under steady load it is durable long before).
    pub fn reserved_delivery_ids(&self) -> Option<u64> {
        match self {
            RelayOutput::Persist(PersistOp::Put { key, value })
                if key == super::queue::NEXT_ID_KEY =>
            {
                std::str::from_utf8(value).ok()?.parse().ok()
            }
            _ => None,
        }
    }
}

/// What happened, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayEvent {
    /// A new address was registered (and persisted).
    Registered {
        /// The address.
        address: Address,
    },
    /// An address moved to a new key by a rotation statement (persisted); its
    /// connection, authenticated under the old key, is closed.
    Rotated {
        /// The address.
        address: Address,
        /// The statement's rotation number.
        seq: u64,
    },
    /// An address's recovery binding was installed (persisted).
    RecoveryBound {
        /// The address.
        address: Address,
        /// The binding's number.
        seq: u64,
    },
    /// An address moved to a new key by its recovery key (persisted).
    Recovered {
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
    /// Cluster mode: another node announced a later connection of the address; its
    /// connection here was replaced.
    ReplacedElsewhere {
        /// The closed connection.
        conn: ConnId,
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
    /// Federation (links, queues across domains, lies, reputation).
    Federation(FederationEvent),
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
    /// ([`RelayInput::Oversized`]).
    pub closed_oversized: u64,
    /// Registrations refused since start by the limit per source
    /// (`registration_limited`).
    pub registrations_limited: u64,
    /// Sources whose registrations are being counted.
    pub registration_sources: usize,
    /// Federation figures per remote domain (empty when federation is off).
    pub federation: BTreeMap<String, DomainStats>,
    /// Cluster mode: questions to the cluster's store not yet answered (enqueues,
    /// registrations to read or claim).
    pub cluster_waiting: usize,
    /// Cluster mode: this node is the domain's federator (it pushes the domain's packets
    /// to other domains).
    pub cluster_federator: bool,
}

/// Why [`super::Relay::restore`] failed.
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
