//! Federation settings and what discovery answers (public types).

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use crate::crypto::{IdentityKey, PublicKey};

/// Federation settings ([`super::super::RelayConfig::federation`]). `None` there: the relay
/// does not federate and behaves exactly as before (a packet for another domain is refused
/// `unknown_recipient`). See [`FederationConfig::new`] for the defaults.
#[derive(Clone)]
pub struct FederationConfig {
    /// This relay's own Ed25519 signing key (one of the keys its domain publishes), with
    /// which it authenticates relay links.
    pub key: IdentityKey,
    /// Most packets queued for one destination domain (outbound, not yet handed over).
    /// Default 10 000.
    pub queue_per_domain: u32,
    /// A packet not handed over this long after it was accepted is dropped and its sender
    /// told (`undeliverable`, code `expired`). Default 24 h.
    pub expiry: Duration,
    /// First retry delay after a failed dial, a lost link or a deferred push; doubled per
    /// attempt up to `retry_max`, each delay drawn uniformly from its upper half (jitter).
    /// Default 1 s.
    pub retry_base: Duration,
    /// Longest retry delay. Default 5 min.
    pub retry_max: Duration,
    /// Longest dial retry delay while the domain's relay has a link up to this one: it is
    /// running, only the way there is broken (a one-way partition), so its return is
    /// found within this. Default 2 s.
    pub reachable_retry_max: Duration,
    /// How long a successful discovery answer is used before it is asked again. Default 1 h.
    pub discovery_ttl: Duration,
    /// How long a failed discovery is remembered (packets for that domain are refused
    /// meanwhile without asking again). Default 1 min.
    pub discovery_failure_ttl: Duration,
    /// How long the relay waits for a discovery answer, a dial or a link's authentication
    /// before it treats the attempt as failed. Default 30 s.
    pub connect_timeout: Duration,
    /// Domains never federated with (checked first). Lower case.
    pub deny: BTreeSet<String>,
    /// When `Some`, the only domains federated with. Lower case.
    pub allow: Option<BTreeSet<String>>,
    /// Pushes and lookups accepted per second from one remote domain. Default 2 000.
    pub domain_rate_per_sec: u32,
    /// Capacity of a remote domain's bucket; at least 1. Default 4 000.
    pub domain_rate_burst: u32,
    /// Pushes accepted per second from one remote sender (scaled down by a poor
    /// reputation). Default 50.
    pub sender_rate_per_sec: u32,
    /// Capacity of a remote sender's bucket; at least 1. Default 200.
    pub sender_rate_burst: u32,
    /// Sends to a domain whose relay is being discovered, held (in memory, unanswered)
    /// until discovery answers; more are refused `queue_full`. Default 256.
    pub max_pending_sends: u32,
    /// Lookups of a domain's addresses waiting for its link; more are refused
    /// `rate_limited`. Default 256.
    pub max_pending_lookups: u32,
    /// Deferred pushes remembered per remote domain (so that their retries are recognised);
    /// a push that would be deferred beyond this is rejected `queue_full`. Default 1 024.
    pub max_deferred: u32,
    /// Remote senders this relay keeps state for (rate bucket, reputation, pinned key),
    /// all remote domains together; beyond, the least recently seen is forgotten (its key
    /// is pinned again from its next packet). Default 100 000.
    pub max_remote_senders: u32,
    /// Frame budget of a relay link, frames per second (every frame costs one token).
    /// Default 5 000.
    pub link_rate_per_sec: u32,
    /// Capacity of a relay link's frame budget; at least 1. Default 10 000.
    pub link_rate_burst: u32,
    /// Link refusals logged per second and remote domain (beyond, only counted). Default 1.
    pub log_per_sec: u32,
    /// Link refusals logged at once per remote domain. Default 10.
    pub log_burst: u32,
}

impl FederationConfig {
    /// Federation with `key` and the default settings.
    pub fn new(key: IdentityKey) -> Self {
        FederationConfig {
            key,
            queue_per_domain: 10_000,
            expiry: Duration::from_secs(24 * 3600),
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            reachable_retry_max: Duration::from_secs(2),
            discovery_ttl: Duration::from_secs(3600),
            discovery_failure_ttl: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            deny: BTreeSet::new(),
            allow: None,
            domain_rate_per_sec: 2_000,
            domain_rate_burst: 4_000,
            sender_rate_per_sec: 50,
            sender_rate_burst: 200,
            max_pending_sends: 256,
            max_pending_lookups: 256,
            max_deferred: 1_024,
            max_remote_senders: 100_000,
            link_rate_per_sec: 5_000,
            link_rate_burst: 10_000,
            log_per_sec: 1,
            log_burst: 10,
        }
    }

    /// Whether the operator's lists allow federating with `domain` (lower case).
    pub fn allows(&self, domain: &str) -> bool {
        !self.deny.contains(domain) && self.allow.as_ref().is_none_or(|a| a.contains(domain))
    }
}

impl fmt::Debug for FederationConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FederationConfig")
            .field("key", &self.key.public())
            .field("queue_per_domain", &self.queue_per_domain)
            .field("expiry", &self.expiry)
            .field("deny", &self.deny)
            .field("allow", &self.allow)
            .finish_non_exhaustive()
    }
}

impl PartialEq for FederationConfig {
    /// Equal settings and the same key (compared by its public half).
    fn eq(&self, o: &Self) -> bool {
        self.key.public_ref() == o.key.public_ref()
            && self.queue_per_domain == o.queue_per_domain
            && self.expiry == o.expiry
            && self.retry_base == o.retry_base
            && self.retry_max == o.retry_max
            && self.reachable_retry_max == o.reachable_retry_max
            && self.discovery_ttl == o.discovery_ttl
            && self.discovery_failure_ttl == o.discovery_failure_ttl
            && self.connect_timeout == o.connect_timeout
            && self.deny == o.deny
            && self.allow == o.allow
            && self.domain_rate_per_sec == o.domain_rate_per_sec
            && self.domain_rate_burst == o.domain_rate_burst
            && self.sender_rate_per_sec == o.sender_rate_per_sec
            && self.sender_rate_burst == o.sender_rate_burst
            && self.max_pending_sends == o.max_pending_sends
            && self.max_pending_lookups == o.max_pending_lookups
            && self.max_deferred == o.max_deferred
            && self.max_remote_senders == o.max_remote_senders
            && self.link_rate_per_sec == o.link_rate_per_sec
            && self.link_rate_burst == o.link_rate_burst
            && self.log_per_sec == o.log_per_sec
            && self.log_burst == o.log_burst
    }
}

impl Eq for FederationConfig {}

/// What discovery found for a domain: the relay serving it
/// (`https://DOMAIN/.well-known/a2acp`, or the operator's static map).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRelay {
    /// Where to dial its federation link (`wss://HOST:PORT/...`).
    pub endpoint: String,
    /// Its current signing keys: a link is accepted only from (and to) a relay holding one.
    pub keys: Vec<PublicKey>,
}

/// Why discovery found no usable relay for a domain. Packets for it are refused
/// `unknown_recipient` with this message; the failure is remembered for
/// `discovery_failure_ttl`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// The domain publishes no relay (no document, `404`, no such host).
    #[error("{0}")]
    NoRelay(String),
    /// The document is invalid (unparseable, wrong domain, bad key or signature, too large).
    #[error("{0}")]
    Invalid(String),
    /// The document could not be fetched (network, TLS, deadline).
    #[error("{0}")]
    Unreachable(String),
}
