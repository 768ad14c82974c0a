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
//! 2. [`Output::Send`] — frames to the relay (and, in their place, [`Output::Bridged`]
//!    for the bridged peers of threads);
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
//!
//! # Layout
//!
//! The agent is its threads and a [`Shared`] rest (configuration, keys, the relay link
//! and outbox, the clock, the output buffers). An input finds the thread it concerns
//! once and opens a [`ThreadStep`] on it ([`Agent::in_thread`]); the per-thread work of
//! each spec section is written as methods of that step, and every state change goes
//! through its one transition function, `ThreadStep::transition`.
//!
//! One folder per capability, in the spec's words; each capability's tests sit beside it
//! (`tests/`: the agent's behaviour end to end, and what its tests share).
//!
//! # Layers
//!
//! The folders are layers: each imports only the folders listed before it here, and the
//! façade (the files directly in this folder) sits on them all. A capability names types
//! and functions of the layers below it, and reaches one above it only through a method
//! of [`Shared`], [`ThreadStep`] or [`Agent`] written there (a call imports nothing).
//! `python3 .ci/core-layout.py core/src --check`, run by CI, reads this list and fails on
//! an import against it or a folder missing from it. Bottom to top:
//!
//! 1. `permissions/`: permission tiers and overrides, how a field resolves (§7.1, §7.2);
//! 2. `io/`: what goes in and comes out — inputs, commands, outputs, prompts, typed events;
//! 3. `thread/`: a thread, its step, its lifecycle (§9), its packets (§4, §15);
//! 4. `memory/`: relationship memory (§11);
//! 5. `llm/`: the LLM processing layer (§5, §13.3);
//! 6. `negotiation/`: context, drift, consent, resolution, execution (§5.2, §6–§9);
//! 7. `security/`: peer keys (§16), what is refused of a hostile peer (§13.4);
//! 8. `space/`: shared context spaces (§12);
//! 9. `group/`: multi-party threads (§10, §8.3);
//! 10. `introductions/`: progressive capability discovery (§14.2);
//! 11. `link/`: the relay link (§3, §13.1), the persisted records and recovery (§13.2);
//! 12. the façade: the [`Agent`] (`mod.rs`), commands (`commands.rs`), bridges (`bridge.rs`).

mod bridge;
mod commands;
pub mod group;
pub mod introductions;
pub mod io;
pub use io::events;
mod link;
mod llm;
mod memory;
pub use llm::{
    layer_json, prompt_thread, LLM_QUEUE_FIRST, LLM_QUEUE_MAX, LOW_CONFIDENCE, PEER_DATA_LAYER,
};
mod negotiation;
pub mod permissions;
pub use negotiation::drift::may_fork;
mod security;
pub mod space;
pub mod thread;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::address::Address;
use crate::crypto::{IdentityKey, PublicKey, ThreadSession};
use crate::packet::Context;
use crate::rng::DetRng;
use crate::time::Timestamp;

pub use bridge::*;
pub use events::{
    AgentEvent, Bug, DropReason, Exchange, ExchangeDirection, FieldsNamed, LlmFallbackTo,
};
pub use group::{Group, GroupMember, GroupProposal, Sequence};
pub use introductions::Introduction;
pub use io::*;
pub use link::key_recovery::RecoveryKeyState;
pub use link::records::RestoreError;
pub use link::{FirstPacket, LinkRefusal, REGISTRATION_RETRY};
pub use memory::reputation::Reputation;
pub use permissions::{IntentTiers, PermissionTiers, RelationshipOverride, Tier};
pub use security::refusals::Refusals;
pub use space::{FieldChange, Space, SpaceChange, SpaceEvent, SpacePacket};
pub use thread::{SiblingHold, Thread, ThreadState, Waiting};

use link::records::{Dirty, Meta, PeerRecord, Settings};
use link::{Link, OutboxItem, Pacer};
use thread::step::ThreadStep;

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
    /// Bridged peers of addresses that may have no a2acp agent (§18 graceful
    /// degradation; for the A2A bridge, agent cards): a thread started to one of them
    /// that the relay does not know continues, with the same intent and context, as a
    /// thread the bridge opens with its peer there ([`Bridge::open`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bridged_fallbacks: BTreeMap<Address, BridgedFallback>,
    /// Decide with the LLM ([`Output::CallLlm`]) instead of the deterministic negotiator.
    pub use_llm: bool,
    /// Limits and timeouts.
    pub limits: Limits,
    /// Where the relay wakes this agent when a packet waits for it while it is offline
    /// (an `https://` UnifiedPush or ntfy endpoint; spec §13.2): given to the relay at
    /// every connection. `None`: no wake-ups (one given before is withdrawn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_up: Option<String>,
}

/// Where a thread to an address the relay does not know goes on
/// ([`AgentConfig::bridged_fallbacks`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgedFallback {
    /// The bridge ([`Bridge::name`]).
    pub bridge: String,
    /// Its destination for that address (e.g. an agent card's URL).
    pub to: String,
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
            bridged_fallbacks: BTreeMap::new(),
            use_llm: false,
            limits: Limits::default(),
            wake_up: None,
        }
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

/// One person's agent: its threads, and what every thread shares.
pub struct Agent {
    threads: BTreeMap<String, Thread>,
    shared: Shared,
    /// The bridges to other protocols registered with this agent ([`Agent::add_bridge`]).
    bridges: Vec<Box<dyn Bridge>>,
}

/// Everything of an agent but its threads: configuration, keys, the relay link and its
/// outbox, the clock, and the output buffers. A [`ThreadStep`] borrows it beside one
/// thread, so per-thread work needs no second lookup of the thread.
struct Shared {
    config: AgentConfig,
    identity: IdentityKey,
    /// The keys this agent rotated away from, newest last: envelopes peers sealed to one
    /// of them before they learnt a newer one still open. At most
    /// [`link::rotation::RETIRED_KEYS_KEPT`], persisted in `meta` once a rotation
    /// finished (SPEC-NOTES "Key rotation").
    retired_identities: Vec<IdentityKey>,
    /// A rotation of this agent's key under way.
    rotating: Option<link::rotation::OwnRotation>,
    /// The key the current connection registered with.
    link_key: Option<[u8; 32]>,
    meta: Meta,
    settings: Settings,
    peers: BTreeMap<Address, PeerRecord>,
    /// The group threads this agent coordinates (§10), by id.
    groups: BTreeMap<String, group::Group>,
    /// The shared context spaces this agent holds (§12), by id.
    spaces: BTreeMap<String, space::Space>,
    /// The legs of those spaces, by (other agent, thread tag of the space id).
    space_tags: BTreeMap<(Address, [u8; 16]), String>,
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
    /// Relationship memory (§11), persisted per peer as `memory/<address>`.
    memory: crate::memory::MemoryStore,
    /// When the values memory holds expire, by their usage rules (rebuilt from memory).
    usage_expiries: BTreeSet<(Timestamp, Address, String)>,
    buf: Buffers,
    /// The packets addressed to bridged peers in this input, for the bridges' step.
    bridged: Vec<BridgedPacket>,
    dirty: Dirty,
    out: VecDeque<Output>,
}

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
            threads_begun: 0,
            introduced: BTreeSet::new(),
            wake_up: None,
            rotation: None,
            earlier_rotations: Vec::new(),
            recovery: None,
            retired_keys: Vec::new(),
        };
        let mut a = Agent {
            threads: BTreeMap::new(),
            shared: Shared {
                config,
                identity,
                retired_identities: Vec::new(),
                rotating: None,
                link_key: None,
                meta,
                settings,
                peers: BTreeMap::new(),
                groups: BTreeMap::new(),
                spaces: BTreeMap::new(),
                space_tags: BTreeMap::new(),
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
                memory: crate::memory::MemoryStore::new(),
                usage_expiries: BTreeSet::new(),
                buf: Buffers::default(),
                bridged: Vec::new(),
                dirty: Dirty::default(),
                out: VecDeque::new(),
            },
            bridges: Vec::new(),
        };
        a.shared.dirty.meta = true;
        a.shared.dirty.settings = true;
        a.flush();
        a
    }
    /// This agent's address.
    pub fn address(&self) -> &Address {
        &self.shared.config.address
    }
    /// This agent's public identity key.
    pub fn public_key(&self) -> PublicKey {
        self.shared.identity.public()
    }
    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.shared.config
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
        self.shared.link == Link::Ready
    }
    /// Packets sealed but not yet accepted by the relay.
    pub fn outbox_len(&self) -> usize {
        self.shared.outbox.len()
    }
    /// The pinned key of another agent.
    pub fn pinned_key(&self, peer: &Address) -> Option<[u8; 32]> {
        self.shared.peers.get(peer).and_then(|p| p.key)
    }
    /// The key a pinned peer presented instead of its pinned one, waiting for the user to
    /// check and accept it (§16, `Command::AcceptKeyChange`).
    pub fn changed_key(&self, peer: &Address) -> Option<[u8; 32]> {
        self.shared.peers.get(peer).and_then(|r| r.changed_key)
    }
    /// Whether an agent was flagged for malformed packets (§13.4).
    pub fn is_flagged(&self, peer: &Address) -> bool {
        self.shared.peers.get(peer).is_some_and(|p| p.flagged)
    }
    /// What was refused of an agent past the limits per peer.
    pub fn refusals(&self, peer: &Address) -> Refusals {
        self.shared
            .peers
            .get(peer)
            .map(|p| p.refused.clone())
            .unwrap_or_default()
    }
    /// Current permission tiers.
    pub fn permissions(&self) -> &PermissionTiers {
        &self.shared.settings.tiers
    }
    /// The §7.2 suggestions that still apply, oldest first: a promotion is listed until
    /// the field is always_share for that agent (accepted, or set by hand).
    pub fn suggestions(&self) -> Vec<Suggestion> {
        let mut out: Vec<Suggestion> = self
            .shared
            .peers
            .iter()
            .filter(|(peer, _)| !self.shared.settings.blocked.contains(*peer))
            .flat_map(|(peer, rec)| {
                rec.suggested
                    .iter()
                    .filter(|(f, _)| !rec.dismissed.contains(*f))
                    .map(move |(f, id)| (peer, f, *id))
            })
            .filter(|(peer, f, _)| self.shared.tier(peer, f) != Tier::AlwaysShare)
            .map(|(peer, field, id)| Suggestion::Promote {
                id,
                field: field.clone(),
                peer: peer.clone(),
            })
            .collect();
        out.sort_by_key(Suggestion::id);
        out
    }
    /// The values of the user's profile fields that are never_share — globally or for
    /// any agent with an override — each string of at least four characters (the
    /// threshold of the outgoing check): what a runtime must never write where the user's
    /// peers or a shared channel could read it (the principal's audit log checks every
    /// line against them).
    pub fn never_share_values(&self) -> Vec<String> {
        let me = &self.shared.config.address;
        let mut out: BTreeSet<String> = BTreeSet::new();
        for (field, value) in &self.shared.config.profile {
            let never = std::iter::once(me)
                .chain(self.shared.settings.overrides.keys())
                .any(|peer| self.shared.tier(peer, field) == Tier::NeverShare);
            if never {
                out.extend(
                    thread::packets::strings_of(value)
                        .into_iter()
                        .filter(|s| s.chars().count() >= 4),
                );
            }
        }
        out.into_iter().collect()
    }
    /// Current relationship overrides.
    pub fn overrides(&self) -> &BTreeMap<Address, RelationshipOverride> {
        &self.shared.settings.overrides
    }
    /// Blocked agents.
    pub fn blocked(&self) -> &BTreeSet<Address> {
        &self.shared.settings.blocked
    }
    /// Whether the relay said another connection of this agent took over (last connect
    /// wins, §13.2). A runtime should stop reconnecting until its user says otherwise;
    /// cleared by the next [`Input::Connected`].
    pub fn was_replaced(&self) -> bool {
        self.shared.replaced
    }
    /// Why the relay refused this agent's registration, if it did ([`LinkRefusal`]). A
    /// retryable refusal is cleared by the next [`Input::Connected`]; the others last as
    /// long as this agent object.
    pub fn link_refusal(&self) -> Option<&LinkRefusal> {
        self.shared.refusal.as_ref()
    }
    /// Where the first packet of thread `id` stands with the relay; `None` for an unknown
    /// thread.
    pub fn first_packet(&self, id: &str) -> Option<FirstPacket> {
        let t = self.threads.get(id)?;
        if let Some(code) = t.relay_refused {
            return Some(FirstPacket::Refused(code));
        }
        let pending = self
            .shared
            .peers
            .get(&t.peer)
            .is_some_and(|p| p.pending.iter().any(|x| x.thread_id == id));
        let queued = self.shared.outbox.values().any(|o| o.thread_id == id);
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
        self.shared.now = self.shared.now.max(now);
        match input {
            Input::Connected => self.shared.on_connected(),
            Input::Disconnected => self.shared.on_disconnected(),
            Input::Bytes(b) => self.on_frame(&b),
            Input::Command(c) => self.on_command(c),
            Input::LlmResult {
                request_id,
                result,
                meta,
            } => self.on_llm_result(request_id, result, meta),
            Input::ActionResult { action_id, result } => self.on_action_result(action_id, result),
        }
        self.step_forks();
        self.step_bridges();
        self.step_groups();
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
        self.shared.now = self.shared.now.max(now);
        self.on_timeout();
        self.bridges_timeout();
        self.step_forks();
        self.step_bridges();
        self.step_groups();
        self.flush();
    }
    /// The next output, or `None` when drained.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.shared.out.pop_front()
    }
    /// When [`Agent::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let mut t: Option<Timestamp> = None;
        let mut at = |x: Timestamp| {
            t = Some(t.map_or(x, |c| c.min(x)));
        };
        if self.shared.link != Link::Down {
            at(self
                .shared
                .last_heard
                .add(self.shared.config.limits.relay_silence));
        }
        if self.shared.link == Link::Ready {
            for o in self.shared.outbox.values() {
                if let Some(p) = o.parked_until {
                    at(p);
                }
            }
            if let Some(p) = self.shared.pacer.due(&self.shared.config.limits) {
                at(p);
            }
        }
        for th in self.threads.values() {
            if let Some(x) = self.shared.thread_deadline(th) {
                at(x);
            }
        }
        if let Some(x) = self.bridges_wake() {
            at(x);
        }
        for g in self.shared.groups.values() {
            if let Some(x) = self.shared.group_deadline(g) {
                at(x);
            }
        }
        for p in self.shared.peers.values() {
            if let Some(x) = p.refused.tell_due() {
                at(x);
            }
        }
        if let Some(x) = self.shared.memory_usage_deadline() {
            at(x);
        }
        t
    }
}

/// A fresh thread session from the agent's generator.
fn new_session(rng: &mut DetRng) -> ThreadSession {
    ThreadSession::new(rng.bytes32())
}

#[cfg(test)]
mod tests;
