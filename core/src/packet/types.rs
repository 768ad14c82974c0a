//! The packet's parts: intents, needs, permissions, proposals, capabilities.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::address::Address;

/// Freeform context: field name → JSON value. Order and unknown fields are preserved.
pub type Context = Map<String, Value>;

/// What a thread is about (spec §4 `intent`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    /// Domain hint, e.g. `scheduling`.
    pub category: String,
    /// One-line description.
    pub summary: String,
    /// `low`, `normal`, `high` or `urgent`; `urgent` shortens the staleness timeout (§6.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub urgency: Option<String>,
    /// Set on an intent update: `expanded`, `narrowed`, `changed` (§6.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope_change: Option<String>,
}

impl Intent {
    /// Whether the intent is urgent (§6.4: 2 h staleness instead of 48 h).
    pub fn is_urgent(&self) -> bool {
        matches!(self.urgency.as_deref(), Some("urgent") | Some("high"))
    }
}

/// How much a need matters (§6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Can't proceed without it.
    Required,
    /// Would significantly improve the outcome; the user is asked if not pre-authorised.
    Helpful,
    /// Only shared if pre-authorised; the user is never bothered for it.
    NiceToHave,
}

/// A field one agent asks the other for (§4 `needs`, §6.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Need {
    /// The context field wanted.
    pub field: String,
    /// Why it is wanted — shown to the other user in the consent prompt.
    #[serde(default)]
    pub reason: String,
    /// How much it matters.
    pub priority: Priority,
}

/// The transparent sharing declaration of a packet (§4 `permissions`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PermissionsDeclaration {
    /// Fields whose values this packet (or thread) shares.
    #[serde(default)]
    pub shared_fields: Vec<String>,
    /// Fields deliberately not shared.
    #[serde(default)]
    pub withheld_fields: Vec<String>,
    /// `user_preauthorised`, `user_approved`, `mixed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consent_level: Option<String>,
    /// The rules the shared values travel with, by field (SPEC-NOTES "Usage rules"): at
    /// most [`MAX_USAGE_RULES`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage: BTreeMap<String, UsageRule>,
}

/// Most usage rules one packet carries.
pub const MAX_USAGE_RULES: usize = 64;
/// Longest purpose of a usage rule, in bytes.
pub const MAX_PURPOSE_BYTES: usize = 128;

/// A rule a shared value travels with, set by the sharer's tiers (SPEC-NOTES "Usage
/// rules"). The receiving agent enforces it: it uses the value only for `purpose`,
/// deletes it at `expires_at`, and with `no_reshare` passes it to no one else.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UsageRule {
    /// What the value may be used for: the intent category of the thread it was shared
    /// in. The receiver lends it to no thread about anything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// When the receiver deletes it (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The value reaches no one but the agent it was shared with.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_reshare: bool,
}

impl UsageRule {
    /// When the value expires, if it does (an unreadable time was refused on receipt).
    pub fn expiry(&self) -> Option<crate::time::Timestamp> {
        self.expires_at
            .as_deref()
            .and_then(crate::time::Timestamp::parse_rfc3339)
    }

    /// Whether the rule restricts anything.
    pub fn is_empty(&self) -> bool {
        self.purpose.is_none() && self.expires_at.is_none() && !self.no_reshare
    }
}

/// A field that will not be provided (§7.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unavailable {
    /// The field asked for.
    pub field: String,
    /// `declined` (the only status this implementation sends) or `unknown`.
    pub status: String,
    /// Always `null` (§7.5): never hint where else to find it.
    pub hint: Option<Value>,
}

/// A recommendation to hand the thread to the humans (§6.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Escalation {
    /// `surface_to_users`.
    pub recommend: String,
    /// Why.
    #[serde(default)]
    pub reason: String,
    /// Suggested wording for the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_prompt: Option<String>,
}

/// An alternative to a proposal (§8.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    /// One-line description.
    pub summary: String,
    /// Why it is offered.
    #[serde(default)]
    pub reason: String,
    /// Structured details, replacing the proposal's details if chosen.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub details: Context,
}

/// The proposed outcome (§8.1 `proposal`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// One-line description shown to users.
    pub summary: String,
    /// Structured details.
    #[serde(default)]
    pub details: Context,
    /// Ranked alternatives.
    #[serde(default)]
    pub alternatives: Vec<Alternative>,
    /// Why this was chosen.
    #[serde(default)]
    pub reasoning: String,
}

/// An action to execute once a resolution is confirmed (§8.1 `actions_on_confirm`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionSpec {
    /// What to do, e.g. `book_table`.
    pub action: String,
    /// The service that does it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Whether the user must approve it (confirming the resolution counts, §7.4).
    #[serde(default)]
    pub requires_user_approval: bool,
    /// Whether it can be undone during rollback (§9).
    #[serde(default)]
    pub reversible: bool,
    /// Which agent performs it; absent means every confirming agent does (SPEC-NOTES §8.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<Address>,
}

/// The answer to a resolution (§8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResolutionStatus {
    /// The user confirmed.
    Confirmed,
    /// The user declined (possibly politely, with an excuse).
    Declined,
    /// The user wants something different (different time / place).
    CounterRequested,
}

/// Capability handshake carried in the first packet of a thread (§15.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Versions the sender speaks, e.g. `["0.1", "0.2"]`.
    pub supported_versions: Vec<String>,
    /// Optional features supported.
    #[serde(default)]
    pub features: Vec<String>,
    /// Largest packet the sender accepts.
    #[serde(default = "default_max_size")]
    pub max_context_size_bytes: u64,
    /// Envelope constructions supported.
    #[serde(default)]
    pub supported_encryption: Vec<String>,
}

fn default_max_size() -> u64 {
    super::MAX_CONTEXT_SIZE_BYTES as u64
}

/// One child thread of a fork (§6.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkedThread {
    /// The new thread's id.
    pub thread_id: String,
    /// What it is about.
    pub intent: Intent,
}

/// Execution state reported by an agent after a confirmed resolution (SPEC-NOTES §9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionReport {
    /// The resolution packet the report is about.
    pub resolution_id: String,
    /// `completed` or `failed`.
    pub status: String,
    /// The failed action, when `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_action: Option<String>,
    /// What went wrong, when `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
