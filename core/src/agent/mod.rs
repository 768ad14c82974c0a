//! The agent state machine.
//!
//! # Contract
//!
//! Feed inputs with [`Agent::handle`] (or the `handle_*` shorthands), each with the
//! current time; then call [`Agent::poll_output`] until it returns `None` and execute
//! every output in the order given; then arm a timer for [`Agent::poll_timeout`] and call
//! [`Agent::handle_timeout`] when it fires. Nothing happens between calls.
//!
//! The outputs of one input are released in this order:
//!
//! 1. [`Output::Persist`] — every record the following outputs depend on;
//! 2. [`Output::Send`] — frames to the relay;
//! 3. [`Output::Prompt`] / [`Output::ClosePrompt`] — consent and resolution prompts;
//! 4. [`Output::CallLlm`];
//! 5. [`Output::ExecuteAction`];
//! 6. [`Output::Notify`];
//! 7. [`Output::Audit`];
//! 8. [`Output::CloseConnection`];
//!
//! and the next timeout is [`Agent::poll_timeout`]. Persisting first means every state
//! change a packet depends on is durable before that packet leaves: an agent restored
//! from its last persisted records never contradicts what it sent, resumes every thread
//! and shows every open prompt again.
//!
//! Randomness (ids, ephemeral keys) comes from the seed given at construction and is
//! part of the persisted state. Same seed, same inputs ⇒ byte-identical outputs.

pub mod io;
mod logic;
pub mod permissions;
pub mod thread;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::address::Address;
use crate::crypto::{Envelope, IdentityKey, PublicKey, ThreadSession};
use crate::packet::Context;
use crate::persist::PersistOp;
use crate::relay::frame::{challenge_signed_bytes, ClientFrame, RelayFrame, REGISTER_LABEL};
use crate::rng::DetRng;
use crate::time::Timestamp;

pub use io::*;
pub use permissions::{PermissionTiers, RelationshipOverride, Tier};
pub use thread::{Thread, ThreadState, Waiting};

/// Limits and timeouts (spec §6.4, §8.1, §13, §16 anti-abuse).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Context exchanges before automatic escalation (§6.4).
    pub max_round_trips: u32,
    /// Staleness timeout of non-urgent threads (§6.4).
    pub staleness: Duration,
    /// Staleness timeout of urgent threads (§6.4).
    pub staleness_urgent: Duration,
    /// Confirmation timeout put in resolutions (§8.1).
    pub confirmation_timeout: Duration,
    /// Malformed packets from one agent before it is flagged (§13.4).
    pub malformed_flag_threshold: u32,
    /// Silence from the relay after which the connection is dropped (§13.1 heartbeat).
    pub relay_silence: Duration,
    /// LLM attempts per decision before giving up (§13.3).
    pub llm_attempts: u32,
    /// Largest relay frame accepted.
    pub max_frame_bytes: usize,
    /// Open threads one other agent may have started with this one, children of its
    /// forks included; its next new thread (or fork) is refused with `too_many_threads`
    /// (SPEC-NOTES §13, "Limits per peer").
    pub max_threads_per_peer: u32,
    /// Open prompts (consent and resolution) of threads with one other agent; a packet of
    /// it that could open another is refused with `too_many_prompts`.
    pub max_prompts_per_peer: u32,
    /// Child threads one `thread_fork` may create (§6.5); a larger fork is refused whole
    /// with `too_many_children`.
    pub max_fork_children: u32,
    /// Bytes of packets one thread keeps (its history, both ways); a packet of the peer
    /// that would pass it is refused with `thread_too_large`.
    pub max_thread_bytes: usize,
    /// Ended threads one other agent started that are kept; beyond it the oldest are
    /// forgotten (records deleted) when it starts another.
    pub max_ended_threads_per_peer: u32,
    /// Frames that cost the relay's rate tokens (`send`, `lookup`) sent per second at most
    /// (SPEC-NOTES "Failure handling": pacing). Under the relay's documented 50/s.
    #[serde(default = "default_send_rate")]
    pub send_rate_per_sec: u32,
    /// How many such frames may go at once before the pace applies. Under the relay's
    /// documented burst of 200.
    #[serde(default = "default_send_burst")]
    pub send_burst: u32,
}

fn default_send_rate() -> u32 {
    40
}

fn default_send_burst() -> u32 {
    100
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_round_trips: 8,
            staleness: Duration::from_secs(48 * 3600),
            staleness_urgent: Duration::from_secs(2 * 3600),
            confirmation_timeout: Duration::from_secs(24 * 3600),
            malformed_flag_threshold: 3,
            relay_silence: Duration::from_secs(90),
            llm_attempts: 3,
            max_frame_bytes: 131_072,
            max_threads_per_peer: 32,
            max_prompts_per_peer: 8,
            max_fork_children: 8,
            max_thread_bytes: 262_144,
            max_ended_threads_per_peer: 64,
            send_rate_per_sec: default_send_rate(),
            send_burst: default_send_burst(),
        }
    }
}

/// How an agent is set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentConfig {
    /// This agent's address.
    pub address: Address,
    /// Protocol versions spoken (§15), e.g. `["0.1", "0.2"]`.
    pub supported_versions: Vec<String>,
    /// What the agent knows about its user (local knowledge, §5.4): name, timezone,
    /// availability, dietary… Values are shared only as the permission tiers allow.
    pub profile: Context,
    /// Base permission tiers (§7.1).
    pub permissions: PermissionTiers,
    /// Relationship overrides (§7.2).
    pub overrides: BTreeMap<Address, RelationshipOverride>,
    /// What the user's agent already knows about other agents' users (address book,
    /// earlier threads): used to fill gaps before asking (§5.2). Never sent.
    #[serde(default)]
    pub contacts: BTreeMap<Address, Context>,
    /// Decide with the LLM ([`Output::CallLlm`]) instead of the deterministic negotiator.
    pub use_llm: bool,
    /// Limits and timeouts.
    pub limits: Limits,
}

impl AgentConfig {
    /// A configuration with the onboarding defaults of §14.1.
    pub fn new(address: Address) -> Self {
        AgentConfig {
            address,
            supported_versions: crate::packet::SUPPORTED_VERSIONS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            profile: Context::new(),
            permissions: PermissionTiers::onboarding_defaults(),
            overrides: BTreeMap::new(),
            contacts: BTreeMap::new(),
            use_llm: false,
            limits: Limits::default(),
        }
    }
}

/// Why an agent could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// A record could not be decoded.
    #[error("record `{key}` is corrupt: {reason}")]
    Corrupt {
        /// Record key.
        key: String,
        /// Decoder message.
        reason: String,
    },
    /// The records belong to another address.
    #[error("records belong to {found}, not {expected}")]
    WrongAgent {
        /// Address in the records.
        found: Address,
        /// Address configured.
        expected: Address,
    },
}

/// Persisted counters and the generator position (`meta`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Meta {
    address: Address,
    rng: DetRng,
    next_prompt: u64,
    next_seq: u64,
    next_action: u64,
    next_llm: u64,
    authenticated_before: bool,
    /// The last §7.2 suggestion number given (0: none yet).
    #[serde(default)]
    last_suggestion: u64,
}

/// Settings the user can change at run time (`settings`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Settings {
    tiers: PermissionTiers,
    overrides: BTreeMap<Address, RelationshipOverride>,
    blocked: BTreeSet<Address>,
}

/// A plaintext packet waiting for the peer's key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PendingPlain {
    thread_id: String,
    packet_id: String,
    json: String,
}

/// What an agent knows about another agent (`peer/<address>`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
struct PeerRecord {
    /// Pinned Ed25519 key (first contact, §16).
    key: Option<[u8; 32]>,
    /// A different key seen after pinning, awaiting the user.
    changed_key: Option<[u8; 32]>,
    /// Malformed packets received (§13.4).
    malformed: u32,
    /// Flagged as a sender of malformed packets.
    flagged: bool,
    /// Packets waiting for the key lookup.
    pending: Vec<PendingPlain>,
    /// A lookup is on its way on the current connection. Not persisted: an agent
    /// restored from its records has no connection, so no lookup can be on its way, and
    /// a stored `true` kept it from ever asking again (swarm seed 713).
    #[serde(skip)]
    lookup_sent: bool,
    /// How often the user approved each field for this agent (§7.2 suggestions).
    approvals: BTreeMap<String, u32>,
    /// Fields suggested for always_share with this agent (§7.2), with the suggestion's
    /// number.
    #[serde(default)]
    suggested: BTreeMap<String, u64>,
    /// What was refused of this agent past the limits per peer.
    #[serde(default)]
    refused: Refusals,
}

/// Counts of what one peer sent past the limits per peer (SPEC-NOTES §13, "Limits per
/// peer"): counts, not one record per packet, so a flood grows nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Refusals {
    /// New threads refused (`too_many_threads`, or `too_many_prompts` on a first packet).
    pub threads: u64,
    /// Child threads of refused forks (`too_many_children`, `too_many_threads`).
    pub fork_children: u64,
    /// Packets of open threads refused (`too_many_prompts`, `thread_too_large`).
    pub packets: u64,
    /// The total the user was last told (the notification is renewed when the total
    /// reaches 1, 2, 5, 10, 20, 50…, and otherwise at most once a minute).
    #[serde(default)]
    told_at: u64,
    /// When the user was last told.
    #[serde(default)]
    told_when: Option<Timestamp>,
    /// `processing_error` answers sent in the current minute, and when it started.
    #[serde(default)]
    answers: Option<(Timestamp, u32)>,
}

impl Refusals {
    /// Everything refused.
    pub fn total(&self) -> u64 {
        self.threads
            .saturating_add(self.fork_children)
            .saturating_add(self.packets)
    }

    /// When the user is told the count next, if it moved since they were told.
    fn tell_due(&self) -> Option<Timestamp> {
        (self.told_at < self.total()).then(|| {
            self.told_when
                .map_or(Timestamp::ZERO, |t| t.add(REFUSAL_NOTICE_PERIOD))
        })
    }
}

/// The collapsed notification of a peer's refusals is renewed at most this often (apart
/// from the totals 1, 2, 5, 10, 20, 50…).
const REFUSAL_NOTICE_PERIOD: Duration = Duration::from_secs(60);

/// A sealed packet the relay has not yet accepted (`outbox/<seq>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OutboxItem {
    seq: u64,
    thread_id: String,
    packet_id: String,
    env: Envelope,
    /// Refused for now (queue overflow, rate limit): sent again at this time.
    #[serde(default)]
    parked_until: Option<Timestamp>,
    /// How often it was refused, for the backoff.
    #[serde(default)]
    refusals: u32,
}

/// The relay would not let this agent in: it refused its `register` for a reason that
/// answering the next challenge cannot change (SPEC-NOTES "The relay link", refused
/// registration). The agent stops answering challenges and closes the connection
/// ([`Output::CloseConnection`]); a runtime reports the refusal and reconnects only after
/// [`LinkRefusal::retry_after`], never when it is `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRefusal {
    /// The relay's code: `address_taken`, `registration_limited`, or `unknown_recipient`
    /// (an address of another domain).
    pub code: crate::relay::frame::ErrorCode,
    /// The relay's message.
    pub message: String,
    /// When trying again may help (`registration_limited`: the relay's default window);
    /// `None`: not in this run (another key holds the address, or the relay does not
    /// serve its domain).
    pub retry_after: Option<Duration>,
}

/// How long an agent refused with `registration_limited` waits before it registers again:
/// the relay's default registration window (`--registration-window-secs`).
pub const REGISTRATION_RETRY: Duration = Duration::from_secs(3600);

/// Where the first packet of a thread stands with the relay ([`Agent::first_packet`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstPacket {
    /// Waiting for the recipient's key or for the relay's `accepted` (or the agent is
    /// offline: it goes when the link is up).
    Waiting,
    /// The relay accepted it: it is queued for, or delivered to, the recipient.
    Accepted,
    /// The relay refused the recipient; the thread is declined.
    Refused(crate::relay::frame::ErrorCode),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Down,
    /// Connected, waiting for the challenge or the auth answer.
    Authenticating,
    Ready,
}

/// A frame that waits for a rate token.
#[derive(Debug, Clone, PartialEq)]
enum Paced {
    /// The `send` of an outbox item (built when it goes: the item may be parked or
    /// accepted by then).
    Outbox(u64),
    /// Another frame (`lookup`).
    Frame(Vec<u8>),
}

/// How long the send rate stays lowered after a `rate_limited` refusal before it steps
/// back up by a tenth of the configured rate.
const PACE_RECOVERY: Duration = Duration::from_secs(10);

/// Paces the frames that cost the relay's rate tokens (`send`, `lookup`): a token bucket
/// of `send_burst` tokens refilled at the current rate, which starts at
/// `send_rate_per_sec`. A `rate_limited` refusal empties the bucket and halves the rate
/// (at most once per second; to at most the default rate, at least 1/s; no bursts while
/// lowered); each [`PACE_RECOVERY`] without a refusal it climbs back a tenth of the
/// configured rate. Frames without a token wait, in order, and go when one is due
/// ([`Agent::poll_timeout`]). Not persisted: a restored agent starts with a full bucket.
#[derive(Debug, Default)]
struct Pacer {
    /// Tokens in thousandths; `None` until first used (then full).
    milli: Option<u64>,
    /// When the bucket was last refilled.
    last: Timestamp,
    /// The current rate, tokens per second; 0 means the configured rate.
    rate: u32,
    /// When the rate last changed (lowered or stepped up).
    changed: Timestamp,
    /// Frames waiting for a token.
    queue: VecDeque<Paced>,
}

impl Pacer {
    fn rate(&self, limits: &Limits) -> u32 {
        let cfg = limits.send_rate_per_sec.max(1);
        if self.rate == 0 {
            cfg
        } else {
            self.rate.min(cfg)
        }
    }

    fn refill(&mut self, now: Timestamp, limits: &Limits) {
        let cfg = limits.send_rate_per_sec.max(1);
        // Slowed down, the agent sends no bursts either: its idea of the relay's burst
        // may be as wrong as its idea of the rate.
        let burst = if self.rate == 0 {
            limits.send_burst
        } else {
            limits.send_burst.min(self.rate)
        };
        let cap = u64::from(burst.max(1)) * 1000;
        let Some(milli) = self.milli else {
            self.milli = Some(cap);
            self.last = now;
            return;
        };
        let elapsed = now.as_millis().saturating_sub(self.last.as_millis());
        let milli = milli
            .saturating_add(elapsed.saturating_mul(u64::from(self.rate(limits))))
            .min(cap);
        self.milli = Some(milli);
        self.last = self.last.max(now);
        // Climb back towards the configured rate, one step per calm period.
        while self.rate != 0 && self.rate < cfg && now >= self.changed.add(PACE_RECOVERY) {
            self.rate = (self.rate + (cfg / 10).max(1)).min(cfg);
            self.changed = self.changed.add(PACE_RECOVERY);
        }
        if self.rate >= cfg {
            self.rate = 0;
        }
    }

    /// Takes a token if there is one.
    fn take(&mut self, now: Timestamp, limits: &Limits) -> bool {
        self.refill(now, limits);
        match self.milli {
            Some(m) if m >= 1000 => {
                self.milli = Some(m - 1000);
                true
            }
            _ => false,
        }
    }

    /// The relay refused a frame for its rate: nothing more goes until a token is due,
    /// at half the rate. The refusals of frames that were already on their way (up to a
    /// burst of them) halve it once: at most once per second.
    fn refused(&mut self, now: Timestamp, limits: &Limits) {
        self.refill(now, limits);
        if self.rate == 0 || now >= self.changed.add(Duration::from_secs(1)) {
            // Half the rate, and no more than the default (under the relay's documented
            // one): an agent configured above the relay's real rate learns at once.
            self.rate = (self.rate(limits) / 2).min(default_send_rate()).max(1);
            self.changed = now;
        }
        self.milli = Some(0);
    }

    /// When the next token is due, if a frame waits for one.
    fn due(&self, limits: &Limits) -> Option<Timestamp> {
        if self.queue.is_empty() {
            return None;
        }
        let have = self.milli?;
        let missing = 1000u64.saturating_sub(have);
        let rate = u64::from(self.rate(limits));
        Some(
            self.last
                .add(Duration::from_millis(missing.div_ceil(rate).max(1))),
        )
    }
}

#[derive(Default)]
struct Buffers {
    send: Vec<Output>,
    prompt: Vec<Output>,
    llm: Vec<Output>,
    action: Vec<Output>,
    notify: Vec<Output>,
    audit: Vec<Output>,
    close: Vec<Output>,
}

#[derive(Default)]
struct Dirty {
    meta: bool,
    settings: bool,
    peers: BTreeSet<Address>,
    threads: BTreeSet<String>,
    ops: Vec<PersistOp>,
}

/// One person's agent.
pub struct Agent {
    config: AgentConfig,
    identity: IdentityKey,
    meta: Meta,
    settings: Settings,
    peers: BTreeMap<Address, PeerRecord>,
    threads: BTreeMap<String, Thread>,
    outbox: BTreeMap<u64, OutboxItem>,
    link: Link,
    replaced: bool,
    /// The relay refused this agent's registration (not persisted: a new run tries again).
    refusal: Option<LinkRefusal>,
    last_heard: Timestamp,
    now: Timestamp,
    keys: BTreeMap<Address, PublicKey>,
    tags: BTreeMap<(Address, [u8; 16]), String>,
    /// How many history entries of each thread are stored as `history/` records (a
    /// thread restored from an old-format record has none until it is next stored).
    hist_stored: BTreeMap<String, usize>,
    pacer: Pacer,
    /// Packets dropped since this agent started (not persisted): only some are audited.
    drops: u64,
    buf: Buffers,
    dirty: Dirty,
    out: VecDeque<Output>,
}

/// The stored `thread/<id>` record: the thread without its history (written as `[]`), and
/// how many `history/<id>/<n>` records belong to it. The thread record is written after
/// its new history records, so it is the commit point: records from `history_len` on are
/// leftovers of a step a crash cut, and are ignored.
#[derive(Serialize)]
struct ThreadRecord<'a> {
    #[serde(flatten)]
    thread: &'a Thread,
    history_len: usize,
}

/// The part of a `thread/<id>` record that says where its history is. Records written
/// before the history was split out have no `history_len`: their history is inside.
#[derive(Deserialize)]
struct HistoryLen {
    #[serde(default)]
    history_len: Option<usize>,
}

const META: &str = "meta";
const SETTINGS: &str = "settings";

impl Agent {
    /// A new agent with no history. `seed` seeds every random choice it makes.
    pub fn new(config: AgentConfig, identity: IdentityKey, seed: [u8; 32]) -> Self {
        let settings = Settings {
            tiers: config.permissions.clone(),
            overrides: config.overrides.clone(),
            blocked: BTreeSet::new(),
        };
        let meta = Meta {
            address: config.address.clone(),
            rng: DetRng::from_seed(seed),
            next_prompt: 1,
            next_seq: 1,
            next_action: 1,
            next_llm: 1,
            authenticated_before: false,
            last_suggestion: 0,
        };
        let mut a = Agent {
            config,
            identity,
            meta,
            settings,
            peers: BTreeMap::new(),
            threads: BTreeMap::new(),
            outbox: BTreeMap::new(),
            link: Link::Down,
            replaced: false,
            refusal: None,
            last_heard: Timestamp::ZERO,
            now: Timestamp::ZERO,
            keys: BTreeMap::new(),
            tags: BTreeMap::new(),
            hist_stored: BTreeMap::new(),
            pacer: Pacer::default(),
            drops: 0,
            buf: Buffers::default(),
            dirty: Dirty::default(),
            out: VecDeque::new(),
        };
        a.dirty.meta = true;
        a.dirty.settings = true;
        a.flush();
        a
    }

    /// Restores an agent from the records it last persisted. Open prompts are shown
    /// again, and actions and LLM calls that had no answer are asked for again, as
    /// outputs of the first call to [`Agent::handle`] or [`Agent::poll_output`].
    ///
    /// `seed` is used only when no `meta` record exists (nothing was persisted yet).
    pub fn restore(
        config: AgentConfig,
        identity: IdentityKey,
        seed: [u8; 32],
        records: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) -> Result<Self, RestoreError> {
        fn de<T: serde::de::DeserializeOwned>(key: &str, v: &[u8]) -> Result<T, RestoreError> {
            serde_json::from_slice(v).map_err(|e| RestoreError::Corrupt {
                key: key.to_string(),
                reason: e.to_string(),
            })
        }
        let mut a = Agent::new(config, identity, seed);
        a.out.clear();
        a.dirty = Dirty::default();
        // history/<thread id>/<n> records, by thread id and n.
        let mut hist: BTreeMap<String, BTreeMap<u64, (String, Vec<u8>)>> = BTreeMap::new();
        // Threads whose record says how many history records it has.
        let mut lens: BTreeMap<String, (String, usize)> = BTreeMap::new();
        for (key, value) in records {
            if key == META {
                let m: Meta = de(&key, &value)?;
                if m.address != a.config.address {
                    return Err(RestoreError::WrongAgent {
                        found: m.address,
                        expected: a.config.address.clone(),
                    });
                }
                a.meta = m;
            } else if key == SETTINGS {
                a.settings = de(&key, &value)?;
            } else if let Some(addr) = key.strip_prefix("peer/") {
                let addr = Address::parse(addr).map_err(|e| RestoreError::Corrupt {
                    key: key.clone(),
                    reason: e.to_string(),
                })?;
                let rec: PeerRecord = de(&key, &value)?;
                a.peers.insert(addr, rec);
            } else if key.starts_with("thread/") {
                let t: Thread = de(&key, &value)?;
                if let Some(n) = de::<HistoryLen>(&key, &value)?.history_len {
                    lens.insert(t.id.clone(), (key.clone(), n));
                }
                a.threads.insert(t.id.clone(), t);
            } else if let Some((id, n)) = key.strip_prefix("history/").and_then(parse_history) {
                let id = id.to_string();
                hist.entry(id).or_default().insert(n, (key, value));
            } else if key.starts_with("outbox/") {
                let o: OutboxItem = de(&key, &value)?;
                a.outbox.insert(o.seq, o);
            }
        }
        for (id, (key, n)) in lens {
            let Some(t) = a.threads.get_mut(&id) else {
                continue;
            };
            let mut entries = hist.remove(&id).unwrap_or_default();
            let mut history = Vec::with_capacity(n);
            for i in 0..n {
                let Some((hkey, v)) = entries.remove(&(i as u64)) else {
                    return Err(RestoreError::Corrupt {
                        key,
                        reason: format!("history record {i} of {n} is missing"),
                    });
                };
                history.push(de(&hkey, &v)?);
            }
            t.history = history;
            a.hist_stored.insert(id, n);
        }
        for (addr, rec) in &a.peers {
            // Keys in the agent's own store were validated before they were pinned.
            if let Some(k) = rec.key.and_then(|k| PublicKey::from_stored_bytes(&k).ok()) {
                a.keys.insert(addr.clone(), k);
            }
        }
        for t in a.threads.values() {
            a.tags.insert(
                (t.peer.clone(), crate::crypto::thread_tag(&t.id)),
                t.id.clone(),
            );
        }
        a.resume_after_restore();
        a.flush();
        Ok(a)
    }

    /// This agent's address.
    pub fn address(&self) -> &Address {
        &self.config.address
    }

    /// This agent's public identity key.
    pub fn public_key(&self) -> PublicKey {
        self.identity.public()
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Every thread, by id.
    pub fn threads(&self) -> &BTreeMap<String, Thread> {
        &self.threads
    }

    /// One thread.
    pub fn thread(&self, id: &str) -> Option<&Thread> {
        self.threads.get(id)
    }

    /// Whether the relay link is authenticated.
    pub fn is_online(&self) -> bool {
        self.link == Link::Ready
    }

    /// Packets sealed but not yet accepted by the relay.
    pub fn outbox_len(&self) -> usize {
        self.outbox.len()
    }

    /// The pinned key of another agent.
    pub fn pinned_key(&self, peer: &Address) -> Option<[u8; 32]> {
        self.peers.get(peer).and_then(|p| p.key)
    }

    /// The key a pinned peer presented instead of its pinned one, waiting for the user to
    /// check and accept it (§16, `Command::AcceptKeyChange`).
    pub fn changed_key(&self, peer: &Address) -> Option<[u8; 32]> {
        self.peers.get(peer).and_then(|r| r.changed_key)
    }

    /// Whether an agent was flagged for malformed packets (§13.4).
    pub fn is_flagged(&self, peer: &Address) -> bool {
        self.peers.get(peer).is_some_and(|p| p.flagged)
    }

    /// What was refused of an agent past the limits per peer.
    pub fn refusals(&self, peer: &Address) -> Refusals {
        self.peers
            .get(peer)
            .map(|p| p.refused.clone())
            .unwrap_or_default()
    }

    /// Current permission tiers.
    pub fn permissions(&self) -> &PermissionTiers {
        &self.settings.tiers
    }

    /// The §7.2 suggestions that still apply, oldest first: a promotion is listed until
    /// the field is always_share for that agent (accepted, or set by hand).
    pub fn suggestions(&self) -> Vec<Suggestion> {
        let mut out: Vec<Suggestion> = self
            .peers
            .iter()
            .filter(|(peer, _)| !self.settings.blocked.contains(*peer))
            .flat_map(|(peer, rec)| rec.suggested.iter().map(move |(f, id)| (peer, f, *id)))
            .filter(|(peer, f, _)| self.tier(peer, f) != Tier::AlwaysShare)
            .map(|(peer, field, id)| Suggestion::Promote {
                id,
                field: field.clone(),
                peer: peer.clone(),
            })
            .collect();
        out.sort_by_key(Suggestion::id);
        out
    }

    /// Current relationship overrides.
    pub fn overrides(&self) -> &BTreeMap<Address, RelationshipOverride> {
        &self.settings.overrides
    }

    /// Blocked agents.
    pub fn blocked(&self) -> &BTreeSet<Address> {
        &self.settings.blocked
    }

    /// Whether the relay said another connection of this agent took over (last connect
    /// wins, §13.2). A runtime should stop reconnecting until its user says otherwise;
    /// cleared by the next [`Input::Connected`].
    pub fn was_replaced(&self) -> bool {
        self.replaced
    }

    /// Why the relay refused this agent's registration, if it did ([`LinkRefusal`]). A
    /// retryable refusal is cleared by the next [`Input::Connected`]; the others last as
    /// long as this agent object.
    pub fn link_refusal(&self) -> Option<&LinkRefusal> {
        self.refusal.as_ref()
    }

    /// Where the first packet of thread `id` stands with the relay; `None` for an unknown
    /// thread.
    pub fn first_packet(&self, id: &str) -> Option<FirstPacket> {
        let t = self.threads.get(id)?;
        if let Some(code) = t.relay_refused {
            return Some(FirstPacket::Refused(code));
        }
        let pending = self
            .peers
            .get(&t.peer)
            .is_some_and(|p| p.pending.iter().any(|x| x.thread_id == id));
        let queued = self.outbox.values().any(|o| o.thread_id == id);
        Some(if pending || queued || !t.sent_first {
            FirstPacket::Waiting
        } else {
            FirstPacket::Accepted
        })
    }

    /// Starts a thread ([`Command::StartThread`]) and returns its id, or `None` when the
    /// command was refused (blocked or own address; the refusal is notified).
    pub fn start_thread(
        &mut self,
        now: Timestamp,
        to: Address,
        intent: crate::packet::Intent,
        context: Context,
    ) -> Option<String> {
        let before: BTreeSet<String> = self.threads.keys().cloned().collect();
        self.handle(
            now,
            Input::Command(Command::StartThread {
                to,
                intent,
                context,
            }),
        );
        self.threads.keys().find(|k| !before.contains(*k)).cloned()
    }

    /// Feeds one input.
    pub fn handle(&mut self, now: Timestamp, input: Input) {
        self.now = self.now.max(now);
        match input {
            Input::Connected => self.on_connected(),
            Input::Disconnected => self.on_disconnected(),
            Input::Bytes(b) => self.on_frame(&b),
            Input::Command(c) => self.on_command(c),
            Input::LlmResult { request_id, result } => self.on_llm_result(request_id, result),
            Input::ActionResult { action_id, result } => self.on_action_result(action_id, result),
        }
        self.flush();
    }

    /// Shorthand for [`Input::Bytes`].
    pub fn handle_bytes(&mut self, now: Timestamp, bytes: &[u8]) {
        self.handle(now, Input::Bytes(bytes.to_vec()));
    }

    /// Shorthand for [`Input::Command`].
    pub fn handle_command(&mut self, now: Timestamp, command: Command) {
        self.handle(now, Input::Command(command));
    }

    /// The timer armed for [`Agent::poll_timeout`] fired.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.now = self.now.max(now);
        self.on_timeout();
        self.flush();
    }

    /// The next output, or `None` when drained.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When [`Agent::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let mut t: Option<Timestamp> = None;
        let mut at = |x: Timestamp| {
            t = Some(t.map_or(x, |c| c.min(x)));
        };
        if self.link != Link::Down {
            at(self.last_heard.add(self.config.limits.relay_silence));
        }
        if self.link == Link::Ready {
            for o in self.outbox.values() {
                if let Some(p) = o.parked_until {
                    at(p);
                }
            }
            if let Some(p) = self.pacer.due(&self.config.limits) {
                at(p);
            }
        }
        for th in self.threads.values() {
            if let Some(x) = self.thread_deadline(th) {
                at(x);
            }
        }
        for p in self.peers.values() {
            if let Some(x) = p.refused.tell_due() {
                at(x);
            }
        }
        t
    }

    // ----- link -----

    fn on_connected(&mut self) {
        self.link = Link::Authenticating;
        self.replaced = false;
        if self
            .refusal
            .as_ref()
            .is_some_and(|r| r.retry_after.is_some())
        {
            self.refusal = None;
        }
        self.last_heard = self.now;
        self.audit(None, "relay connected".to_string());
    }

    fn on_disconnected(&mut self) {
        if self.link != Link::Down {
            self.audit(None, "relay disconnected".to_string());
        }
        self.link = Link::Down;
        for p in self.peers.values_mut() {
            p.lookup_sent = false;
        }
        // Frames of this connection that never went: the outbox is replayed and lookups
        // asked again on the next one.
        self.pacer.queue.clear();
    }

    fn on_frame(&mut self, bytes: &[u8]) {
        if self.link == Link::Down {
            return;
        }
        self.last_heard = self.now;
        if bytes.len() > self.config.limits.max_frame_bytes {
            self.audit(
                None,
                format!("relay frame of {} bytes refused: too large", bytes.len()),
            );
            return;
        }
        let frame = match RelayFrame::from_bytes(bytes) {
            Ok(f) => f,
            Err(e) => {
                self.audit(None, format!("malformed relay frame dropped: {e}"));
                return;
            }
        };
        match frame {
            RelayFrame::Challenge { .. } if self.refusal.is_some() => {
                // Refused for good in this run: registering again only repeats the
                // refusal (the relay answers each with a new challenge).
            }
            RelayFrame::Challenge { nonce, domain, ts } => {
                // Sign the relay's own time: the nonce already makes the answer fresh and
                // single-use, and an agent whose clock is off still gets in.
                let key = self.identity.public().to_bytes();
                let msg = challenge_signed_bytes(
                    REGISTER_LABEL,
                    &nonce,
                    &domain,
                    ts,
                    &self.config.address,
                    Some(&key),
                );
                let sig = self.identity.sign(&msg);
                self.send_frame(&ClientFrame::Register {
                    address: self.config.address.clone(),
                    key,
                    ts,
                    sig,
                });
            }
            RelayFrame::AuthOk { .. } => self.on_ready(),
            RelayFrame::Accepted { seq, .. } => {
                if self.outbox.remove(&seq).is_some() {
                    self.dirty.ops.push(PersistOp::Delete {
                        key: outbox_key(seq),
                    });
                }
            }
            RelayFrame::Deliver { id, env } => {
                self.on_envelope(env);
                self.send_frame(&ClientFrame::Ack { id });
            }
            RelayFrame::Overflow { seq, to, .. } => self.on_overflow(seq, &to),
            RelayFrame::Key { address, key } => self.on_key(address, key),
            RelayFrame::Ping { n } => self.send_frame(&ClientFrame::Pong { n }),
            RelayFrame::Pong { .. } => {}
            RelayFrame::Replaced => {
                self.audit(
                    None,
                    "relay: another connection of this agent took over".to_string(),
                );
                self.notify(
                    None,
                    NotifyKind::Delivery,
                    "Another device connected as this agent; this one was disconnected."
                        .to_string(),
                );
                self.link = Link::Down;
                self.replaced = true;
            }
            RelayFrame::Error { code, message, seq } => self.on_relay_error(code, message, seq),
        }
    }

    fn on_ready(&mut self) {
        self.link = Link::Ready;
        let reconnect = self.meta.authenticated_before;
        self.meta.authenticated_before = true;
        self.dirty.meta = true;
        self.audit(None, "relay authenticated".to_string());
        // Replay the local queue in order (§13.1), paced under the relay's rate.
        let mut seqs = Vec::with_capacity(self.outbox.len());
        for o in self.outbox.values_mut() {
            o.parked_until = None;
            seqs.push(o.seq);
        }
        for seq in seqs {
            self.send_outbox(seq);
        }
        let lookups: Vec<Address> = self
            .peers
            .iter()
            .filter(|(a, p)| !p.pending.is_empty() && !self.keys.contains_key(*a))
            .map(|(a, _)| a.clone())
            .collect();
        for a in lookups {
            self.lookup(&a);
        }
        if reconnect {
            // Exchange thread-state summaries to find gaps (§13.1).
            let ids: Vec<String> = self
                .threads
                .values()
                .filter(|t| !t.state.is_terminal() && !t.halted && t.session.peer_eph().is_some())
                .map(|t| t.id.clone())
                .collect();
            for id in ids {
                // One summary in flight per thread: a summary the relay has not accepted
                // yet was just replayed above; another would only pile up behind it (a
                // full peer queue parks them all, and every re-connection added one).
                if self.summary_pending(&id) {
                    continue;
                }
                // Nothing new since the last summary: the relay accepted that one (it is
                // not pending), so the peer gets it; the same summary again tells it
                // nothing (a flapping link otherwise sent one per thread per re-connection).
                if self
                    .threads
                    .get(&id)
                    .is_some_and(|t| t.summarised == Some(t.summary_mark()))
                {
                    continue;
                }
                self.send_thread_state(&id);
            }
        }
    }

    /// Whether a `thread_state` of thread `id` waits in the outbox.
    fn summary_pending(&self, id: &str) -> bool {
        let Some(t) = self.threads.get(id) else {
            return false;
        };
        self.outbox.values().any(|o| {
            o.thread_id == id
                && t.history
                    .iter()
                    .rev()
                    .any(|h| h.outgoing && h.packet_id == o.packet_id && h.kind == "thread_state")
        })
    }

    fn lookup(&mut self, peer: &Address) {
        let rec = self.peers.entry(peer.clone()).or_default();
        if rec.lookup_sent || self.link != Link::Ready {
            return;
        }
        rec.lookup_sent = true;
        self.send_frame(&ClientFrame::Lookup {
            address: peer.clone(),
        });
    }

    fn on_key(&mut self, address: Address, key: Option<[u8; 32]>) {
        let Some(rec) = self.peers.get_mut(&address) else {
            return;
        };
        rec.lookup_sent = false;
        let pending = std::mem::take(&mut rec.pending);
        self.dirty.peers.insert(address.clone());
        let Some(key) = key else {
            let mut ids: Vec<String> = pending.iter().map(|p| p.thread_id.clone()).collect();
            ids.dedup();
            if ids.is_empty() {
                self.notify(
                    None,
                    NotifyKind::Delivery,
                    format!("No agent is registered as {address}."),
                );
            }
            for id in ids {
                self.recipient_unknown(&id, &address);
            }
            return;
        };
        match self.pin(&address, key) {
            Ok(()) => {
                for p in pending {
                    self.seal_and_queue(&p.thread_id, &p.packet_id, p.json.as_bytes());
                }
            }
            Err(()) => {
                if let Some(rec) = self.peers.get_mut(&address) {
                    rec.pending = pending;
                }
            }
        }
    }

    /// The relay does not know the recipient of thread `id`: the thread is declined and
    /// the user told, with the thread (SPEC-NOTES "Failure handling", unknown recipient).
    fn recipient_unknown(&mut self, id: &str, address: &Address) {
        use crate::relay::frame::ErrorCode;
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        if t.state.is_terminal() {
            return;
        }
        t.relay_refused = Some(ErrorCode::UnknownRecipient);
        let about = format!("{}: “{}”", t.intent.category, t.intent.summary);
        self.dirty.threads.insert(id.to_string());
        self.set_state(id, ThreadState::Declined, "recipient unknown to the relay");
        self.notify(
            Some(id.to_string()),
            NotifyKind::Declined,
            format!(
                "No agent is registered as {address}: thread {id} ({about}) is declined. Check the address (agent:NAME@RELAY-DOMAIN)."
            ),
        );
    }

    /// Pins `key` for `peer` if nothing is pinned; `Err` (and a security alert) if a
    /// different key is pinned.
    fn pin(&mut self, peer: &Address, key: [u8; 32]) -> Result<(), ()> {
        if self.peers.get(peer).and_then(|r| r.key) == Some(key) {
            // Already pinned (and validated then): nothing to check again.
            return Ok(());
        }
        let pk = PublicKey::from_bytes(&key).map_err(|_| ())?;
        self.pin_key(peer, pk)
    }

    /// [`Agent::pin`] with a key already validated.
    pub(super) fn pin_key(&mut self, peer: &Address, pk: PublicKey) -> Result<(), ()> {
        let key = pk.to_bytes();
        let rec = self.peers.entry(peer.clone()).or_default();
        match rec.key {
            Some(_) => {
                self.key_changed(peer, key);
                Err(())
            }
            None => {
                rec.key = Some(key);
                rec.lookup_sent = false;
                let pending = std::mem::take(&mut rec.pending);
                self.dirty.peers.insert(peer.clone());
                self.keys.insert(peer.clone(), pk);
                // Packets that waited for this key (its lookup may have been lost) go now.
                for p in pending {
                    self.seal_and_queue(&p.thread_id, &p.packet_id, p.json.as_bytes());
                }
                self.audit(None, format!("pinned key of {peer} (first contact)"));
                Ok(())
            }
        }
    }

    /// A pinned peer presented another key: halt its threads, alert the user (§16).
    fn key_changed(&mut self, peer: &Address, new_key: [u8; 32]) {
        let rec = self.peers.entry(peer.clone()).or_default();
        if rec.changed_key == Some(new_key) {
            return;
        }
        rec.changed_key = Some(new_key);
        self.dirty.peers.insert(peer.clone());
        let ids: Vec<String> = self
            .threads
            .values()
            .filter(|t| &t.peer == peer && !t.state.is_terminal())
            .map(|t| t.id.clone())
            .collect();
        for id in &ids {
            if let Some(t) = self.threads.get_mut(id) {
                t.halted = true;
                self.dirty.threads.insert(id.clone());
            }
        }
        self.notify(
            None,
            NotifyKind::Security,
            format!(
                "The identity key of {peer} changed. {} thread(s) with it are halted until you check the new key with them and accept it: compare the safety number `a2acp keys show {peer}` prints with theirs, then run `a2acp keys accept {peer} --safety-number DIGITS`.",
                ids.len()
            ),
        );
        self.audit(
            None,
            format!(
                "SECURITY key change for {peer}; halted {} thread(s)",
                ids.len()
            ),
        );
    }

    /// The relay refused a packet for now (§13.2 overflow, rate limit, full queue): it
    /// stays in the outbox and is sent again after a backoff (30 s, doubling, at most 1 h),
    /// so nothing is lost; the recipient drops what it already has.
    fn park(&mut self, seq: u64, base: Duration) -> Option<OutboxItem> {
        let now = self.now;
        let o = self.outbox.get_mut(&seq)?;
        o.refusals = o.refusals.saturating_add(1);
        let backoff = base
            .saturating_mul(1u32 << o.refusals.saturating_sub(1).min(7))
            .min(Duration::from_secs(3600));
        o.parked_until = Some(now.add(backoff));
        let item = o.clone();
        self.dirty.ops.push(PersistOp::Put {
            key: outbox_key(seq),
            value: serde_json::to_vec(&item).unwrap_or_default(),
        });
        Some(item)
    }

    fn on_overflow(&mut self, seq: u64, to: &Address) {
        let Some(o) = self.park(seq, Duration::from_secs(30)) else {
            return;
        };
        if o.refusals == 1 {
            self.notify(
                Some(o.thread_id.clone()),
                NotifyKind::Delivery,
                format!("{to} has been offline for a while and its queue for this thread is full; I'll keep trying."),
            );
        }
        self.audit(
            Some(&o.thread_id),
            format!(
                "relay queue overflow for {to}, packet {} parked until {}",
                o.packet_id,
                o.parked_until.unwrap_or_default()
            ),
        );
    }

    /// Sends parked packets whose time has come.
    fn unpark(&mut self) {
        let now = self.now;
        let due: Vec<u64> = self
            .outbox
            .values()
            .filter(|o| o.parked_until.is_some_and(|t| t <= now))
            .map(|o| o.seq)
            .collect();
        for seq in due {
            if let Some(o) = self.outbox.get_mut(&seq) {
                o.parked_until = None;
                if self.link == Link::Ready {
                    self.send_outbox(seq);
                }
            }
        }
    }

    fn on_relay_error(
        &mut self,
        code: crate::relay::frame::ErrorCode,
        message: String,
        seq: Option<u64>,
    ) {
        use crate::relay::frame::ErrorCode as E;
        self.audit(None, format!("relay error {}: {message}", code.as_str()));
        match (code, seq) {
            (E::AddressTaken | E::RegistrationLimited | E::UnknownRecipient, None)
                if self.link == Link::Authenticating =>
            {
                self.registration_refused(code, message);
            }
            (E::AuthFailed | E::AddressTaken, _) => {
                self.notify(
                    None,
                    NotifyKind::Delivery,
                    format!("The relay refused this agent: {message}"),
                );
            }
            (E::RateLimited, Some(seq)) => {
                self.pacer.refused(self.now, &self.config.limits);
                self.park(seq, Duration::from_secs(1));
            }
            (E::RateLimited, None) => {
                // A refused lookup (or a frame the relay charged): slow down all the same.
                self.pacer.refused(self.now, &self.config.limits);
            }
            (E::QueueFull, Some(seq)) => {
                self.park(seq, Duration::from_secs(30));
            }
            (_, Some(seq)) => {
                if let Some(o) = self.outbox.remove(&seq) {
                    self.dirty.ops.push(PersistOp::Delete {
                        key: outbox_key(seq),
                    });
                    let first = self
                        .threads
                        .get(&o.thread_id)
                        .is_some_and(|t| t.state == ThreadState::Initiated && t.initiator);
                    if code == E::UnknownRecipient && first {
                        let to = o.env.to.clone();
                        self.recipient_unknown(&o.thread_id, &to);
                        return;
                    }
                    self.notify(
                        Some(o.thread_id.clone()),
                        NotifyKind::Delivery,
                        format!("The relay refused a packet ({}): {message}", code.as_str()),
                    );
                }
            }
            _ => {}
        }
    }

    /// The relay refused this agent's `register` (`address_taken`,
    /// `registration_limited`, or `unknown_recipient`: a domain it does not serve): stop
    /// answering challenges, close the connection, tell the user once.
    fn registration_refused(&mut self, code: crate::relay::frame::ErrorCode, message: String) {
        use crate::relay::frame::ErrorCode as E;
        let retry_after = (code == E::RegistrationLimited).then_some(REGISTRATION_RETRY);
        let address = self.config.address.clone();
        let what = match code {
            E::AddressTaken => format!(
                "another agent holds {address} at this relay (with another key). This agent stays offline; create it again with another address (`a2acp agent init --address …`)."
            ),
            E::RegistrationLimited => format!(
                "too many new addresses were registered from this network lately. This agent tries again in {} minutes.",
                REGISTRATION_RETRY.as_secs() / 60
            ),
            _ => format!(
                "the relay does not serve the domain of {address}. This agent stays offline; use an address of the relay's domain."
            ),
        };
        self.notify(
            None,
            NotifyKind::Delivery,
            format!(
                "The relay refused to register {address} ({}: {message}): {what}",
                code.as_str()
            ),
        );
        self.audit(
            None,
            format!(
                "registration refused ({}): closing the connection",
                code.as_str()
            ),
        );
        self.refusal = Some(LinkRefusal {
            code,
            message,
            retry_after,
        });
        self.buf.close.push(Output::CloseConnection);
        self.on_disconnected();
    }

    /// Sends a frame: at once, or, for one that costs the relay's rate tokens, when the
    /// pacer has a token for it.
    fn send_frame(&mut self, f: &ClientFrame) {
        match f {
            ClientFrame::Send { seq, .. } => self.send_outbox(*seq),
            ClientFrame::Lookup { .. } => self.pace(Paced::Frame(f.to_bytes())),
            _ => self.buf.send.push(Output::Send(f.to_bytes())),
        }
    }

    /// Sends outbox item `seq` when the pacer has a token for it.
    fn send_outbox(&mut self, seq: u64) {
        self.pace(Paced::Outbox(seq));
    }

    /// Sends `p` now if nothing waits before it and there is a token (in its place
    /// among the other frames of this step), or queues it.
    fn pace(&mut self, p: Paced) {
        if self.pacer.queue.is_empty() && self.link == Link::Ready {
            let Some(frame) = self.paced_frame(&p) else {
                return;
            };
            if self.pacer.take(self.now, &self.config.limits) {
                self.buf.send.push(Output::Send(frame));
                return;
            }
        }
        self.pacer.queue.push_back(p);
    }

    /// The frame of `p`; `None` for an outbox item parked or accepted meanwhile (it goes
    /// when it is unparked).
    fn paced_frame(&self, p: &Paced) -> Option<Vec<u8>> {
        match p {
            Paced::Frame(b) => Some(b.clone()),
            Paced::Outbox(seq) => self
                .outbox
                .get(seq)
                .filter(|o| o.parked_until.is_none())
                .map(|o| {
                    ClientFrame::Send {
                        seq: o.seq,
                        env: o.env.clone(),
                    }
                    .to_bytes()
                }),
        }
    }

    /// Releases the queued frames that have a token now, in order.
    fn release_paced(&mut self) {
        if self.link != Link::Ready {
            self.pacer.queue.clear();
            return;
        }
        while let Some(p) = self.pacer.queue.front() {
            let Some(frame) = self.paced_frame(p) else {
                self.pacer.queue.pop_front();
                continue;
            };
            if !self.pacer.take(self.now, &self.config.limits) {
                return;
            }
            self.pacer.queue.pop_front();
            self.buf.send.push(Output::Send(frame));
        }
    }

    /// Seals a packet for its thread and queues it in the outbox (sending it if online).
    fn seal_and_queue(&mut self, thread_id: &str, packet_id: &str, plain: &[u8]) {
        let Some(t) = self.threads.get_mut(thread_id) else {
            return;
        };
        let peer = t.peer.clone();
        let Some(key) = self.keys.get(&peer) else {
            let rec = self.peers.entry(peer.clone()).or_default();
            rec.pending.push(PendingPlain {
                thread_id: thread_id.to_string(),
                packet_id: packet_id.to_string(),
                json: String::from_utf8_lossy(plain).into_owned(),
            });
            self.dirty.peers.insert(peer.clone());
            self.lookup(&peer);
            return;
        };
        let dir = t.my_direction();
        let env = match t.session.seal(
            &self.identity,
            &self.config.address,
            &peer,
            key,
            thread_id,
            dir,
            plain,
        ) {
            Ok(e) => e,
            Err(e) => {
                self.audit(Some(thread_id), format!("could not seal {packet_id}: {e}"));
                return;
            }
        };
        self.dirty.threads.insert(thread_id.to_string());
        self.queue_envelope(thread_id, packet_id, env);
    }

    /// Puts a sealed packet in the outbox (sending it if online).
    fn queue_envelope(&mut self, thread_id: &str, packet_id: &str, env: Envelope) {
        let seq = self.meta.next_seq;
        self.meta.next_seq += 1;
        self.dirty.meta = true;
        let item = OutboxItem {
            seq,
            thread_id: thread_id.to_string(),
            packet_id: packet_id.to_string(),
            env,
            parked_until: None,
            refusals: 0,
        };
        self.dirty.ops.push(PersistOp::Put {
            key: outbox_key(seq),
            value: serde_json::to_vec(&item).unwrap_or_default(),
        });
        self.outbox.insert(seq, item);
        if self.link == Link::Ready {
            self.send_outbox(seq);
        }
    }

    // ----- output plumbing -----

    /// Every notification leaves through here: its text, peer strings in it included, is
    /// cleaned for display ([`crate::display`]).
    fn notify(&mut self, thread_id: Option<String>, kind: NotifyKind, text: String) {
        let text = shown(text);
        self.buf.notify.push(Output::Notify(Notification {
            thread_id,
            kind,
            text,
            key: None,
            suggestion: None,
        }));
    }

    /// A §7.2 suggestion the user can accept in one step.
    fn notify_suggestion(&mut self, s: Suggestion, text: String) {
        let text = shown(text);
        self.buf.notify.push(Output::Notify(Notification {
            thread_id: None,
            kind: NotifyKind::Suggestion,
            text,
            key: None,
            suggestion: Some(s),
        }));
    }

    /// A notification that replaces the earlier one with the same `key` (a count kept up
    /// to date).
    fn notify_keyed(&mut self, key: String, kind: NotifyKind, text: String) {
        self.buf.notify.push(Output::Notify(Notification {
            thread_id: None,
            kind,
            text,
            key: Some(key),
            suggestion: None,
        }));
    }

    /// Audits a dropped packet: the first 10 since the start verbatim, then only the
    /// 20th, 50th, 100th, 200th, 500th… with the count, so no peer can grow the audit
    /// log faster than logarithmically (SPEC-NOTES §13, "Limits per peer").
    pub(super) fn dropped(&mut self, thread_id: Option<&str>, why: String) {
        self.drops = self.drops.saturating_add(1);
        let n = self.drops;
        if n <= 10 {
            self.audit(thread_id, why);
        } else if is_milestone(n) {
            self.audit(
                thread_id,
                format!("{why} ({n} packets dropped since the start; only some are logged)"),
            );
        }
    }

    /// Every audit record leaves through here: its text is cleaned for display, as a log
    /// line shows it ([`crate::display`]).
    fn audit(&mut self, thread_id: Option<&str>, event: String) {
        self.audit_record(thread_id, event, false);
    }

    /// Audits an inconsistency of this agent's own (a bug, not a peer's doing).
    pub(super) fn audit_bug(&mut self, thread_id: Option<&str>, event: String) {
        self.audit_record(thread_id, format!("BUG {event}"), true);
    }

    fn audit_record(&mut self, thread_id: Option<&str>, event: String, bug: bool) {
        let event = shown(event);
        self.buf.audit.push(Output::Audit(AuditRecord {
            at: self.now,
            thread_id: thread_id.map(str::to_string),
            event,
            bug,
        }));
    }

    /// Moves buffered outputs to the output queue in the documented order, persisting
    /// every dirty record first.
    fn flush(&mut self) {
        self.release_paced();
        let d = std::mem::take(&mut self.dirty);
        if d.meta {
            self.out.push_back(put(META.into(), &self.meta));
        }
        if d.settings {
            self.out.push_back(put(SETTINGS.into(), &self.settings));
        }
        for p in &d.peers {
            if let Some(rec) = self.peers.get(p) {
                self.out.push_back(put(format!("peer/{p}"), rec));
            }
        }
        for id in &d.threads {
            if let Some(t) = self.threads.get_mut(id) {
                // The history is append-only: only its new entries are written, each as
                // its own record, before the thread record that counts them.
                let stored = self.hist_stored.get(id).copied().unwrap_or(0);
                for (i, h) in t.history.iter().enumerate().skip(stored) {
                    self.out.push_back(put(history_key(id, i), h));
                }
                let history = std::mem::take(&mut t.history);
                let record = ThreadRecord {
                    thread: t,
                    history_len: history.len(),
                };
                self.out.push_back(put(format!("thread/{id}"), &record));
                self.hist_stored.insert(id.clone(), history.len());
                t.history = history;
            }
        }
        for op in d.ops {
            self.out.push_back(Output::Persist(op));
        }
        let b = std::mem::take(&mut self.buf);
        self.out.extend(b.send);
        self.out.extend(b.prompt);
        self.out.extend(b.llm);
        self.out.extend(b.action);
        self.out.extend(b.notify);
        self.out.extend(b.audit);
        self.out.extend(b.close);
    }

    fn on_timeout(&mut self) {
        self.unpark();
        if self.link != Link::Down
            && self.now >= self.last_heard.add(self.config.limits.relay_silence)
        {
            self.audit(
                None,
                "relay silent too long: closing the connection".to_string(),
            );
            self.buf.close.push(Output::CloseConnection);
            self.on_disconnected();
        }
        let ids: Vec<String> = self
            .threads
            .values()
            .filter(|t| self.thread_deadline(t).is_some_and(|d| d <= self.now))
            .map(|t| t.id.clone())
            .collect();
        for id in ids {
            self.thread_timeout(&id);
        }
        let due: Vec<Address> = self
            .peers
            .iter()
            .filter(|(_, p)| p.refused.tell_due().is_some_and(|t| t <= self.now))
            .map(|(a, _)| a.clone())
            .collect();
        for peer in due {
            self.tell_refusals(&peer);
        }
    }
}

/// A notification's or audit record's text, cleaned for display; the text itself when it
/// needed nothing.
fn shown(text: String) -> String {
    match crate::display::line(&text, crate::display::MAX_RECORD) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(s) => s,
    }
}

/// Whether `n` is 1, 2 or 5 times a power of ten: counts at which a collapsed record is
/// renewed.
fn is_milestone(n: u64) -> bool {
    let mut m = n;
    while m >= 10 && m % 10 == 0 {
        m /= 10;
    }
    matches!(m, 1 | 2 | 5)
}

fn put<T: Serialize>(key: String, v: &T) -> Output {
    Output::Persist(PersistOp::Put {
        key,
        value: serde_json::to_vec(v).unwrap_or_default(),
    })
}

fn outbox_key(seq: u64) -> String {
    format!("outbox/{seq:020}")
}

/// The key of entry `n` of a thread's history. Thread ids may contain `/`; the entry
/// number is always the last 20 digits.
fn history_key(thread_id: &str, n: usize) -> String {
    format!("history/{thread_id}/{n:020}")
}

/// (thread id, entry number) of a history key without its `history/` prefix.
fn parse_history(rest: &str) -> Option<(&str, u64)> {
    let (id, n) = rest.rsplit_once('/')?;
    if id.is_empty() || n.len() != 20 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((id, n.parse().ok()?))
}

/// A fresh thread session from the agent's generator.
fn new_session(rng: &mut DetRng) -> ThreadSession {
    ThreadSession::new(rng.bytes32())
}

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod resolution_tests;
#[cfg(test)]
mod surface_tests;
#[cfg(test)]
mod tests;
