//! The federation state a relay keeps: per remote domain (discovery, outbound queue and
//! link, inbound sequence), remote senders, pinned keys and undeliverable notices.

use std::collections::{BTreeMap, BTreeSet};

use super::reputation::Score;
use super::RemoteRelay;
use crate::address::Address;
use crate::crypto::envelope::Envelope;
use crate::link::ErrorCode;
use crate::rate_limit::TokenBucket;
use crate::rng::DetRng;
use crate::time::Timestamp;

use super::super::ConnId;

/// Where a relay link connection is in its life ([`super::super::Phase::Link`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::relay) enum LinkPhase {
    /// Accepted: `link_auth` verified, waiting for discovery to check the dialer's key.
    Verifying {
        /// The dialer's domain.
        domain: String,
        /// The key it authenticated with.
        key: [u8; 32],
        /// Its challenge to this relay.
        nonce: [u8; 32],
        /// When the attempt fails.
        until: Timestamp,
    },
    /// Accepted and up: this relay receives the dialer's pushes.
    In {
        /// The dialer's domain.
        domain: String,
    },
    /// Dialed: waiting for the challenge (`nonce` `None`), then for `link_ok`.
    Dialing {
        /// The domain dialed.
        domain: String,
        /// This relay's challenge, once sent.
        nonce: Option<[u8; 32]>,
        /// When the attempt fails.
        until: Timestamp,
    },
    /// Dialed and up: this relay pushes its packets for `domain` here.
    Out {
        /// The domain dialed.
        domain: String,
    },
}

impl LinkPhase {
    /// The remote domain.
    pub(in crate::relay) fn domain(&self) -> &str {
        match self {
            LinkPhase::Verifying { domain, .. }
            | LinkPhase::In { domain }
            | LinkPhase::Dialing { domain, .. }
            | LinkPhase::Out { domain } => domain,
        }
    }

    /// When the link must be up, if it is not yet.
    pub(in crate::relay) fn until(&self) -> Option<Timestamp> {
        match self {
            LinkPhase::Verifying { until, .. } | LinkPhase::Dialing { until, .. } => Some(*until),
            LinkPhase::In { .. } | LinkPhase::Out { .. } => None,
        }
    }

    /// Whether this relay dialed the link.
    pub(in crate::relay) fn dialed(&self) -> bool {
        matches!(self, LinkPhase::Dialing { .. } | LinkPhase::Out { .. })
    }
}

/// What this relay knows of a domain's relay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Discovery {
    /// Nothing.
    #[default]
    Unknown,
    /// Asked; no answer yet. `known` is an earlier answer still used meanwhile.
    Pending {
        since: Timestamp,
        known: Option<RemoteRelay>,
    },
    /// Answered (fresh until `until`; used after that while asking again).
    Known {
        relay: RemoteRelay,
        until: Timestamp,
    },
    /// Failed until `until`.
    Failed { reason: String, until: Timestamp },
}

impl Discovery {
    /// The relay to use now, if any.
    pub(super) fn relay(&self) -> Option<&RemoteRelay> {
        match self {
            Discovery::Known { relay, .. } => Some(relay),
            Discovery::Pending { known, .. } => known.as_ref(),
            Discovery::Unknown | Discovery::Failed { .. } => None,
        }
    }
}

/// This relay's outbound link to a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum OutLink {
    /// No link; dial again at `retry_at` (`None`: as soon as there is something to send).
    Down {
        retry_at: Option<Timestamp>,
        attempts: u32,
    },
    /// `Dial` asked; no answer yet (fails at `until`).
    Dialing { until: Timestamp, attempts: u32 },
    /// Connected (authenticating or up: see the connection's [`LinkPhase`]).
    Open {
        conn: ConnId,
        up: bool,
        attempts: u32,
        /// Pushes sent on this link and not yet answered.
        in_flight: BTreeSet<u64>,
    },
}

/// A packet in an outbound queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OutItem {
    /// Link sequence number.
    pub(super) n: u64,
    /// Delivery id told to the sender in `accepted`.
    pub(super) id: u64,
    /// Sender.
    pub(super) from: Address,
    /// Recipient.
    pub(super) to: Address,
    /// Thread tag.
    pub(super) thread: [u8; 16],
    /// When accepted.
    pub(super) accepted_at: Timestamp,
    /// The envelope's JSON as received.
    pub(super) env: Box<str>,
    /// Deferrals so far (not persisted).
    pub(super) attempts: u32,
    /// Not pushed again before this (deferred).
    pub(super) retry_at: Option<Timestamp>,
}

/// A send held until its domain's relay is discovered.
#[derive(Debug, Clone)]
pub(super) struct HeldSend {
    pub(super) conn: ConnId,
    pub(super) from: Address,
    pub(super) seq: u64,
    pub(super) env: Envelope,
    pub(super) env_json: Option<Box<str>>,
}

/// Everything about one remote domain.
#[derive(Debug, Clone)]
pub(super) struct Remote {
    pub(super) discovery: Discovery,
    pub(super) out: BTreeMap<u64, OutItem>,
    /// Outbound packets per (recipient, thread).
    pub(super) out_threads: BTreeMap<(Address, [u8; 16]), u32>,
    /// Deferred outbound packets by retry time.
    pub(super) retries: BTreeSet<(Timestamp, u64)>,
    /// The next link sequence number.
    pub(super) next_n: u64,
    /// Numbers below this are covered by the persisted reservation.
    pub(super) n_reserved: u64,
    pub(super) link: OutLink,
    pub(super) held: Vec<HeldSend>,
    /// Local lookups waiting for this domain's link: address → (connection, since).
    pub(super) lookups: BTreeMap<Address, Vec<(ConnId, Timestamp)>>,
    pub(super) lookups_sent: BTreeSet<Address>,
    /// Inbound: every push numbered up to `hw` is decided, except those in `deferred`.
    pub(super) hw: u64,
    pub(super) deferred: BTreeSet<u64>,
    /// The (recipient, thread) of deferred pushes: a later push of the same is deferred
    /// behind them, so a thread keeps its order across a deferral.
    pub(super) deferred_at: BTreeMap<u64, (Address, [u8; 16])>,
    /// Dial this domain even with nothing to send, to tell its relay this one is
    /// reachable (after this relay restarted, or lost a link the domain had opened):
    /// its backlog for this relay then goes at once.
    pub(super) announce: bool,
    pub(super) bucket: Option<TokenBucket>,
    pub(super) links_in: BTreeSet<ConnId>,
    pub(super) score: Score,
    pub(super) log: Option<TokenBucket>,
    pub(super) suppressed: u64,
    pub(super) counts: Counts,
}

impl Default for Remote {
    fn default() -> Self {
        Remote {
            discovery: Discovery::Unknown,
            out: BTreeMap::new(),
            out_threads: BTreeMap::new(),
            retries: BTreeSet::new(),
            next_n: 1,
            n_reserved: 1,
            link: OutLink::Down {
                retry_at: None,
                attempts: 0,
            },
            held: Vec::new(),
            lookups: BTreeMap::new(),
            lookups_sent: BTreeSet::new(),
            hw: 0,
            deferred: BTreeSet::new(),
            deferred_at: BTreeMap::new(),
            announce: false,
            bucket: None,
            links_in: BTreeSet::new(),
            score: Score::default(),
            log: None,
            suppressed: 0,
            counts: Counts::default(),
        }
    }
}

/// Counters of one remote domain.
#[derive(Debug, Clone, Default)]
pub(super) struct Counts {
    pub(super) forwarded: u64,
    pub(super) received: u64,
    pub(super) refused: u64,
    pub(super) undeliverable: u64,
    pub(super) link_refusals: u64,
    pub(super) lies: u64,
}

/// A remote sender: its rate bucket and reputation.
#[derive(Debug, Clone)]
pub(super) struct Sender {
    pub(super) bucket: TokenBucket,
    pub(super) score: Score,
}

/// An undeliverable notice waiting for its sender's `ack`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Notice {
    pub(super) id: u64,
    pub(super) packet: u64,
    pub(super) to: Address,
    #[serde(with = "crate::encoding::b64_array")]
    pub(super) thread: [u8; 16],
    pub(super) code: ErrorCode,
    pub(super) message: String,
}

/// The relay's federation state.
#[derive(Debug, Clone)]
pub(in crate::relay) struct Fed {
    pub(super) rng: DetRng,
    pub(super) remotes: BTreeMap<String, Remote>,
    pub(super) senders: BTreeMap<Address, Sender>,
    pub(super) pins: BTreeMap<Address, [u8; 32]>,
    pub(super) notices: BTreeMap<Address, BTreeMap<u64, Notice>>,
    /// The remote senders in `senders` or `pins`, by when last seen.
    pub(super) seen: Seen,
    /// The latest time handed to the relay.
    pub(in crate::relay) now: Timestamp,
}

impl Fed {
    pub(in crate::relay) fn new(seed: [u8; 32]) -> Self {
        let mut s = seed;
        for b in &mut s {
            *b ^= 0x5c;
        }
        Fed {
            rng: DetRng::from_seed(s),
            remotes: BTreeMap::new(),
            senders: BTreeMap::new(),
            pins: BTreeMap::new(),
            notices: BTreeMap::new(),
            seen: Seen::default(),
            now: Timestamp::ZERO,
        }
    }

    pub(super) fn remote(&mut self, domain: &str) -> &mut Remote {
        self.remotes.entry(domain.to_string()).or_default()
    }
}

/// Remote addresses by when they were last seen, so the state kept for remote senders
/// stays bounded ([`super::FederationConfig::max_remote_senders`]): the least recently
/// seen is forgotten first.
#[derive(Debug, Clone, Default)]
pub(super) struct Seen {
    by_time: BTreeSet<(Timestamp, Address)>,
    last: BTreeMap<Address, Timestamp>,
}

impl Seen {
    /// `address` was seen at `now`.
    pub(super) fn touch(&mut self, address: &Address, now: Timestamp) {
        match self.last.get_mut(address) {
            Some(t) if *t == now => {}
            Some(t) => {
                self.by_time.remove(&(*t, address.clone()));
                *t = now;
                self.by_time.insert((now, address.clone()));
            }
            None => {
                self.last.insert(address.clone(), now);
                self.by_time.insert((now, address.clone()));
            }
        }
    }

    /// How many addresses are tracked.
    pub(super) fn len(&self) -> usize {
        self.last.len()
    }

    /// Removes and returns the least recently seen address.
    pub(super) fn pop_oldest(&mut self) -> Option<Address> {
        let (_, a) = self.by_time.pop_first()?;
        self.last.remove(&a);
        Some(a)
    }
}
