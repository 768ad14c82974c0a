//! What the agent answers: the [`Response`] and the data it carries.

use std::collections::BTreeMap;

use a2acp_core::agent::RelationshipOverride;
use a2acp_core::packet::{Context, UsageRule};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::*;

/// One prompt of `prompts`: the core's prompt, and the group it is about (the
/// coordinator's prompt on a group, or a prompt on a leg). A client that reads only the
/// prompt's fields ignores `group`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptEntry {
    /// The prompt.
    #[serde(flatten)]
    pub prompt: a2acp_core::agent::Prompt,
    /// The group it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupRef>,
}

/// One notification of `notifications`, numbered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotificationEntry {
    /// Its number: stable while the agent runs, never reused; a notification replacing
    /// an earlier one with the same key gets a new number.
    pub number: u64,
    /// When it came (RFC 3339).
    pub at: String,
    /// Marked read by the user.
    pub read: bool,
    /// The notification.
    #[serde(flatten)]
    pub notification: a2acp_core::agent::Notification,
}

/// `keys show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyInfo {
    /// This agent.
    pub address: String,
    /// Its key (base64url).
    pub key: String,
    /// The other agent.
    pub peer: String,
    /// The key pinned for it (base64url), if any.
    pub pinned_key: Option<String>,
    /// The safety number with the pinned key (60 digits), if a key is pinned.
    pub safety_number: Option<String>,
    /// The new key it presented, waiting for acceptance (base64url).
    pub changed_key: Option<String>,
    /// The safety number with the new key: the one to compare before accepting.
    pub changed_safety_number: Option<String>,
}

/// The agent's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Whether the request succeeded.
    pub ok: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The result.
    #[serde(default)]
    pub data: Value,
}

impl Response {
    /// Success with data.
    pub fn ok(data: impl Serialize) -> Self {
        Response {
            ok: true,
            error: None,
            data: serde_json::to_value(data).unwrap_or(Value::Null),
        }
    }

    /// Failure.
    pub fn err(msg: impl Into<String>) -> Self {
        Response {
            ok: false,
            error: Some(msg.into()),
            data: Value::Null,
        }
    }
}

/// `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusInfo {
    /// This agent.
    pub address: String,
    /// Its public key (base64url).
    pub key: String,
    /// Authenticated with the relay.
    pub online: bool,
    /// Packets waiting for the relay's acceptance.
    pub outbox: usize,
    /// Threads, all states.
    pub threads: usize,
    /// Open threads.
    pub open_threads: usize,
    /// Open prompts.
    pub prompts: usize,
    /// The relay refused this agent's registration (`address_taken`,
    /// `registration_limited`…): it is offline because of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<RefusedInfo>,
    /// The relay URL (door) the agent is connected through — or, offline, the one it
    /// was connected through last; absent before its first connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub door: Option<String>,
    /// Audit log entries that could not be written since the disk began refusing (0:
    /// writing works).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub audit_lost: u64,
    /// The transparency channel's counters, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transparency: Option<TransparencyInfo>,
    /// This agent's recovery key at its relay, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryInfo>,
}

/// This agent's recovery key (its public part) and its binding at the relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryInfo {
    /// The recovery key's public part, base64url.
    pub key: String,
    /// The number of the binding last signed.
    pub seq: u64,
    /// The relay confirmed that binding.
    pub bound: bool,
    /// The relay refused that binding (e.g. a cluster relay keeps no recovery keys): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the transparency channel did in this run (`status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransparencyInfo {
    /// Summaries queued.
    pub queued: u64,
    /// Delivered.
    pub delivered: u64,
    /// Dropped: the queue was full.
    pub dropped: u64,
    /// Posts that failed.
    pub failed: u64,
}

/// Why the relay refused the agent's registration (`status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedInfo {
    /// The relay's code, e.g. `address_taken`.
    pub code: String,
    /// The relay's message.
    pub message: String,
    /// When the agent tries again, in seconds from the refusal; absent: not in this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_secs: Option<u64>,
}

/// One line of `threads`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadSummary {
    /// Id.
    pub id: String,
    /// The other agent.
    pub peer: String,
    /// Lifecycle state (`NEGOTIATING`…).
    pub state: String,
    /// Intent category.
    pub category: String,
    /// Intent summary.
    pub summary: String,
    /// This agent opened it.
    pub initiator: bool,
    /// Context exchanges so far (§6.4).
    pub round_trips: u32,
    /// Who it waits for: `user` (this agent's person: a prompt, an escalation, a changed
    /// key), `peer` (the other agent or its person: `waiting_for` names them), `llm`,
    /// `actions`, or `nothing`.
    pub waiting: String,
    /// The addresses it waits for when `waiting` is `peer` (the other agent; on a group's
    /// row, the participants whose legs wait), else empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
    /// Last activity (RFC 3339).
    pub last_activity: String,
    /// Packets in its history. (In `thread show` the key `packets` holds the packets
    /// themselves, so there this count is absent.)
    #[serde(default)]
    pub packets: usize,
    /// The group thread (§10) this row is part of — a leg, whose `id` is its own — or
    /// is — the coordinator's row of the group, whose `id` is the `group_id`. Absent for
    /// a two-party thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupRef>,
    /// The threads this one was split into (§6.5 `thread_fork`): it takes no further part,
    /// its children carry the negotiation on. Empty for a thread not split.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub split_into: Vec<String>,
    /// The thread this one goes on as: its recipient had no a2acp agent and the A2A agent
    /// the config names for that address took it up (§18, `a2a_cards`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_as: Option<String>,
}

impl ThreadSummary {
    /// The state column of `a2acp threads`: `SPLIT` for a thread split into others (its
    /// lifecycle state stays the one it had, §6.5), else its state.
    pub fn shown_state(&self) -> &str {
        if self.split_into.is_empty() {
            &self.state
        } else {
            "SPLIT"
        }
    }

    /// Whether this row is a group (not a thread): its `id` is its group's id.
    pub fn is_group(&self) -> bool {
        self.group.as_ref().is_some_and(|g| g.group_id == self.id)
    }
}

/// One packet of `thread show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PacketLine {
    /// `sent` or `received`.
    pub dir: String,
    /// Packet type.
    pub kind: String,
    /// Packet id.
    pub packet_id: String,
    /// A readable summary.
    pub summary: String,
}

/// `thread show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadDetail {
    /// The summary line.
    #[serde(flatten)]
    pub summary: ThreadSummary,
    /// Negotiated protocol version.
    pub version: Option<String>,
    /// What this agent shared.
    pub shared: Context,
    /// What this agent kept back: never_share fields withheld from its first packet and
    /// fields it declined when the peer asked (§7.5), sorted.
    pub withheld: Vec<String>,
    /// What the peer shared.
    pub theirs: Context,
    /// What the peer declined.
    pub peer_unavailable: Vec<String>,
    /// The open or last resolution's summary.
    pub resolution: Option<String>,
    /// The packets (named `history`: `packets` is the count of the summary line).
    pub history: Vec<PacketLine>,
    /// The thread's recent audit records, oldest first: its timeline.
    pub audit: Vec<String>,
    /// The intent's urgency.
    #[serde(default)]
    pub urgency: Option<String>,
    /// Handed to the users (§6.3, §6.4): `thread reply` goes on.
    #[serde(default)]
    pub escalated: bool,
    /// Halted by a key change of the peer (§16).
    #[serde(default)]
    pub halted: bool,
    /// Open prompts of the thread: number and one-line summary.
    #[serde(default)]
    pub prompts: Vec<(u64, String)>,
    /// What this agent's user took back, and whether the peer acknowledged it, signed
    /// (SPEC-NOTES "Retraction").
    #[serde(default)]
    pub retractions: Vec<a2acp_core::agent::thread::PendingRetraction>,
    /// Fields the peer took back: deleted here.
    #[serde(default)]
    pub retracted: Vec<String>,
    /// The usage rules the peer's values came with, by field (SPEC-NOTES "Usage rules").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage: BTreeMap<String, UsageRule>,
}

/// What a third party (an MCP host) reads in place of a value whose usage rule forbids
/// passing it on.
pub const WITHHELD: &str = "(withheld: shared with this agent only)";

/// Replaces in `values` each value whose rule in `usage` forbids passing it on.
fn withhold(values: &mut Context, usage: &BTreeMap<String, UsageRule>) {
    for (k, r) in usage {
        if r.no_reshare {
            if let Some(v) = values.get_mut(k) {
                *v = serde_json::Value::String(WITHHELD.into());
            }
        }
    }
}

impl ThreadDetail {
    /// The thread as a third party may see it: the peer's values that may not be passed
    /// on are withheld (SPEC-NOTES "Usage rules").
    pub fn for_third_party(mut self) -> Self {
        withhold(&mut self.theirs, &self.usage);
        self
    }
}

impl PeerMemory {
    /// The peer's memory as a third party may see it: the values that may not be passed
    /// on are withheld, from what it shared and from the context cache.
    pub fn for_third_party(mut self) -> Self {
        withhold(&mut self.they_shared, &self.usage);
        if let Some(cache) = self
            .remembered
            .as_mut()
            .and_then(|r| r.get_mut("context_cache"))
            .and_then(serde_json::Value::as_object_mut)
        {
            for (k, r) in &self.usage {
                if let (true, Some(e)) = (r.no_reshare, cache.get_mut(k)) {
                    match e.get_mut("value") {
                        Some(v) => *v = serde_json::Value::String(WITHHELD.into()),
                        None => *e = serde_json::Value::String(WITHHELD.into()),
                    }
                }
            }
        }
        self
    }
}

/// `memory show`: what the agent knows of one peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerMemory {
    /// The peer.
    pub address: String,
    /// Its identity key, pinned on first contact (§16), base64url.
    pub pinned_key: Option<String>,
    /// Flagged for malformed packets (§13.4).
    pub flagged: bool,
    /// Blocked by the user.
    pub blocked: bool,
    /// The relationship override (§7.2).
    pub relationship: Option<RelationshipOverride>,
    /// Threads with it, by state.
    pub threads: BTreeMap<String, usize>,
    /// Fields it shared with this agent (latest values).
    pub they_shared: Context,
    /// Fields this agent shared with it.
    pub we_shared: Vec<String>,
    /// Relationship memory (§11.1): what the agent learnt over the completed threads
    /// (`interaction_count`, `learned_patterns`, `context_cache`, `trust_level`…), as
    /// the spec's JSON; `None` when it remembers nothing.
    #[serde(default)]
    pub remembered: Option<serde_json::Value>,
    /// Its reputation from this agent's own observations (§16; the rule in
    /// `a2acp_core::agent::Reputation`).
    #[serde(default)]
    pub reputation: a2acp_core::agent::Reputation,
    /// The usage rules its values came with, by field: those memory keeps, and those of
    /// the threads (SPEC-NOTES "Usage rules").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage: BTreeMap<String, UsageRule>,
}

/// `permissions show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionsInfo {
    /// Tier → entries.
    pub tiers: BTreeMap<String, Vec<String>>,
    /// Relationship overrides.
    pub overrides: BTreeMap<String, RelationshipOverride>,
    /// Blocked agents.
    pub blocked: Vec<String>,
    /// The usage rules values travel with, by field or category (SPEC-NOTES "Usage
    /// rules").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage: BTreeMap<String, a2acp_core::agent::permissions::UsagePolicy>,
}
