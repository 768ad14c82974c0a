//! What a client asks the running agent: the [`Request`] and the words it is built from.

use a2acp_core::agent::Tier;
use a2acp_core::packet::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::*;

/// A request to the running agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    /// Address, connection, counts.
    Status,
    /// Write a consistent copy of the agent's database to `path` (a new file in the
    /// agent's home): `agent backup` of a running agent.
    Snapshot {
        /// The file's name, in the home.
        name: String,
    },
    /// Start a thread (§4), or a group thread (§10) when `to` lists two or more agents.
    StartThread {
        /// The other agent's address (a two-party thread), or a list of addresses: one
        /// is a two-party thread, two or more a group thread this agent coordinates.
        to: Recipients,
        /// Intent category, e.g. `scheduling`.
        category: String,
        /// One-line summary.
        summary: String,
        /// Context the user gives (shared in this thread, never_share excepted).
        #[serde(default)]
        context: Option<Context>,
        /// Urgent (§6.4: shorter staleness, bundled prompts).
        #[serde(default)]
        urgent: bool,
        /// A group thread only: confirmations needed in total, this agent's user's
        /// included (1 to everyone); absent: the proposal decides (SPEC-NOTES "Group
        /// threads", confirmation).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quorum: Option<u32>,
        /// A group thread only: confirmations are asked one after the other, in the order
        /// of `to`, the user first (§8.3 sequential confirmation); not with `quorum`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        sequential: bool,
    },
    /// Every thread.
    Threads,
    /// One thread in detail.
    Thread {
        /// Thread id.
        id: String,
    },
    /// Open prompts.
    Prompts,
    /// Answer a prompt (arguments as for `a2acp answer`, see [`crate::prompt::parse_answer`]).
    Answer {
        /// The prompt.
        prompt_id: u64,
        /// The answer's words.
        args: Vec<String>,
    },
    /// Permission tiers, overrides and blocked agents.
    Permissions,
    /// Set a field's or category's tier, globally or for one agent.
    SetPermission {
        /// Field or category.
        field: String,
        /// `always_share`, `ask_first` or `never_share`.
        tier: String,
        /// Only for this agent (a relationship override).
        #[serde(default)]
        for_peer: Option<String>,
    },
    /// Set or clear the usage rule a field's or category's values travel with (SPEC-NOTES
    /// "Usage rules").
    SetUsageRule {
        /// Field or category.
        field: String,
        /// Bind the value to the purpose of the thread it is shared in.
        #[serde(default)]
        purpose: bool,
        /// Delete it this long after sharing (`90m`, `12h`, `30d`).
        #[serde(default)]
        expires_after: Option<String>,
        /// The receiver passes it to no one else.
        #[serde(default)]
        no_reshare: bool,
        /// Remove the rule.
        #[serde(default)]
        clear: bool,
    },
    /// Block an agent (§16).
    Block {
        /// The agent.
        address: String,
    },
    /// Unblock an agent.
    Unblock {
        /// The agent.
        address: String,
    },
    /// What the agent knows per peer.
    Memory {
        /// One peer, or all.
        #[serde(default)]
        address: Option<String>,
    },
    /// Set a remembered value about a peer's user by hand (§11.3).
    MemoryEdit {
        /// The peer.
        address: String,
        /// The field (`dietary`).
        field: String,
        /// The value.
        value: String,
    },
    /// Forget one field remembered about a peer, or (no field) the whole relationship:
    /// its memory and ended threads (§11.3).
    MemoryForget {
        /// The peer.
        address: String,
        /// One field, or everything.
        #[serde(default)]
        field: Option<String>,
    },
    /// All relationship memory, or one peer's, as NDJSON (seed 002 §10.3); the data is
    /// the text.
    MemoryExport {
        /// One peer, or all.
        #[serde(default)]
        address: Option<String>,
    },
    /// Import relationship memory from NDJSON: all lines or none.
    MemoryImport {
        /// The NDJSON text.
        ndjson: String,
    },
    /// The Agentic Protocol's projects (seed 002 §5): every relationship's, each group's,
    /// and those other tools made.
    Projects,
    /// `orient` (seed 002 §8.3) on a project: its recent packages, current facts, open
    /// questions and what awaits review.
    Orient {
        /// The project (a relationship's is the peer's address).
        project: String,
        /// How many days back (default 14).
        #[serde(default)]
        window_days: Option<u32>,
    },
    /// `orchestrate` (seed 002 §8.4): a digest of one project or all, with snippets about
    /// `focus`.
    Orchestrate {
        /// One project, or all.
        #[serde(default)]
        project: Option<String>,
        /// What the snippets are about.
        #[serde(default)]
        focus: Option<String>,
    },
    /// `pull` (seed 002 §8.2): the latest packages, one by id, or the relevant ones.
    Pull {
        /// The project.
        project: String,
        /// `latest` (default), `specific` or `relevant`.
        #[serde(default)]
        mode: Option<String>,
        /// For `relevant`: what to search for.
        #[serde(default)]
        query: Option<String>,
        /// For `specific`: the package.
        #[serde(default)]
        package_id: Option<String>,
        /// For `latest`: only packages of this status.
        #[serde(default)]
        status: Option<String>,
        /// At most this many (default 5).
        #[serde(default)]
        limit: Option<u32>,
    },
    /// `deposit` (seed 002 §8.1) of a package (§6) into a project.
    Deposit {
        /// The project.
        project: String,
        /// The package.
        package: Value,
    },
    /// `flag_for_review` (seed 002 §8.5).
    FlagForReview {
        /// The package.
        package_id: String,
        /// `human` or `agent`.
        review_type: String,
        /// Why.
        #[serde(default)]
        note: Option<String>,
    },
    /// A review (seed 002 §5.3) made by the person: `complete` or `revision_requested`.
    Review {
        /// The package.
        package_id: String,
        /// The status it moves to.
        status: String,
        /// The person's note.
        #[serde(default)]
        note: Option<String>,
    },
    /// `assert_fact` (seed 002 §8.6).
    AssertFact {
        /// The project.
        project: String,
        /// The fact (§7: subject, predicate, value, optional valid_from…).
        fact: Value,
    },
    /// `invalidate_fact` (seed 002 §8.7).
    InvalidateFact {
        /// The project.
        project: String,
        /// The subject.
        subject: String,
        /// The predicate.
        predicate: String,
        /// Only the fact with this value.
        #[serde(default)]
        object: Option<String>,
    },
    /// The facts of a project (seed 002 §7.3): current ones, or those holding at `at`.
    Facts {
        /// The project.
        project: String,
        /// An RFC 3339 time.
        #[serde(default)]
        at: Option<String>,
    },
    /// Recent notifications: the unread ones, or all kept (at most
    /// [`crate::agent_host::MAX_NOTIFICATIONS`]).
    Notifications {
        /// Read ones too.
        #[serde(default)]
        all: bool,
    },
    /// Mark notifications read: one by its number, or all.
    ReadNotifications {
        /// The notification's number (see `notifications`).
        #[serde(default)]
        number: Option<u64>,
        /// Every notification.
        #[serde(default)]
        all: bool,
    },
    /// Give a thread new context, or answer its escalation ("I need your input…"): the
    /// values are kept for the thread, shared with the peer (never_share fields excepted)
    /// and the negotiation goes on, on both sides (SPEC-NOTES "Negotiation").
    ReplyThread {
        /// Thread id.
        id: String,
        /// New or changed values.
        context: Context,
    },
    /// Change what a thread is about (§6.5 `intent_update`, `a2acp thread update-intent`):
    /// the peer is told; what the new intent's tiers would share that the old one's did
    /// not is asked first.
    UpdateIntent {
        /// Thread id.
        id: String,
        /// The new one-line summary.
        summary: String,
        /// The new category (default: the thread's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        category: Option<String>,
        /// Why (shown to the other user).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Fields the new intent needs from the other side.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        needs: Vec<String>,
    },
    /// Split a thread into threads that negotiate independently (§6.5 `thread_fork`,
    /// `a2acp thread fork`); each inherits the thread's context and permissions and knows
    /// what its siblings hold.
    ForkThread {
        /// Thread id.
        id: String,
        /// One summary per new thread (two or more).
        intents: Vec<String>,
        /// Their category (default: the thread's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        category: Option<String>,
    },
    /// Close a thread (→ DECLINED); the peer is told.
    CancelThread {
        /// Thread id.
        id: String,
    },
    /// Take back values shared in a thread (`a2acp thread retract`; SPEC-NOTES
    /// "Retraction"): the peer is asked to delete them and to acknowledge it, signed.
    Retract {
        /// Thread id.
        id: String,
        /// The fields; none: every field shared in the thread.
        #[serde(default)]
        fields: Vec<String>,
    },
    /// Hand the coordination of a group this agent coordinates to one of its
    /// participants (§10.3); the other agent accepts or declines without its user.
    TransferCoordinator {
        /// The group's id (`grp_…`).
        id: String,
        /// The participant to coordinate from now on.
        to: String,
    },
    /// The safety number of this agent and another (§16), and a changed key waiting.
    KeyShow {
        /// The other agent.
        address: String,
    },
    /// Accept the changed key of an agent (§16), after comparing safety numbers.
    KeyAccept {
        /// The other agent.
        address: String,
        /// The safety number the other person read out: the key is accepted only if it
        /// matches the one with the new key.
        #[serde(default)]
        safety_number: Option<String>,
    },
    /// Rotate this agent's identity key (§16; SPEC-NOTES "Key rotation"): a new key,
    /// kept durably before it is used, moved onto at the relay by a statement both keys
    /// sign. Answered once the relay installed or refused it, or
    /// [`ROTATE_WAIT`](crate::daemon::ROTATE_WAIT) later with `state: "pending"`.
    KeyRotate,
    /// Bind a new recovery key (`a2acp agent recovery-key`; SPEC-NOTES "Recovery"): its
    /// public part (base64url) replaces the one bound before; the secret stays with the
    /// command that made it. Answered at once (`state: "started"`); `status` shows when
    /// the relay confirmed it.
    RecoveryKey {
        /// The recovery key's public part, base64url.
        recovery_key: String,
    },
    /// The signed consent receipts (`a2acp receipts`; SPEC-NOTES "Consent receipts"),
    /// oldest first, each with the salts of its values.
    Receipts {
        /// Only this thread's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        thread: Option<String>,
    },
    /// The agreements of the proposals confirmed (`a2acp agreements`; SPEC-NOTES "Receipts
    /// of an agreement"), oldest first.
    Agreements {
        /// Only this thread's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        thread: Option<String>,
    },
    /// The records of the values taken back (`a2acp retractions`; SPEC-NOTES
    /// "Retraction"), oldest first, each with the peer's signed acknowledgement once it
    /// came.
    Retractions {
        /// Only this thread's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        thread: Option<String>,
    },
    /// The §7.2 suggestions that still apply (`a2acp suggestions`), oldest first.
    Suggestions,
    /// Accept a §7.2 suggestion by its number (`a2acp suggestions accept N`): "always
    /// share FIELD with PEER" becomes a relationship override.
    AcceptSuggestion {
        /// The suggestion's number, as listed.
        id: u64,
    },
    /// Dismiss a §7.2 suggestion by its number (`a2acp suggestions dismiss N`): no longer
    /// listed, never suggested again; the tiers stay as they are.
    DismissSuggestion {
        /// The suggestion's number, as listed.
        id: u64,
    },
    /// Create a shared context space (§12) with other agents (`a2acp space create`).
    SpaceCreate {
        /// What it is about.
        name: String,
        /// The other participants and what each may write.
        participants: Vec<SpaceMember>,
        /// Initial fields (each through the permission tiers).
        #[serde(default)]
        fields: Option<Context>,
    },
    /// One space (`a2acp space show ID`), or every space without an id.
    SpaceShow {
        /// The space (`spc_…`); absent: all.
        #[serde(default)]
        id: Option<String>,
    },
    /// Write one field of a space (`a2acp space set`). A field starting with `~/` is one
    /// of this agent's own fields (`<its address>/…`).
    SpaceSet {
        /// The space.
        id: String,
        /// The field.
        field: String,
        /// The value (any JSON), a link, or nothing to clear the field.
        #[serde(default)]
        value: Option<Value>,
        /// A link to an external resource instead of a value: its URI.
        #[serde(default)]
        link: Option<String>,
        /// The link's title (default: the field's name).
        #[serde(default)]
        title: Option<String>,
    },
    /// Every update of a space, oldest first (`a2acp space history`).
    SpaceHistory {
        /// The space.
        id: String,
    },
}

/// Who a thread is started with: one agent (`"to": "agent:…"`, as before group threads)
/// or a list (`"to": ["agent:…", …]`): one address is a two-party thread, two or more a
/// group thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Recipients {
    /// One agent.
    One(String),
    /// A list of agents.
    Many(Vec<String>),
}

impl Recipients {
    /// The addresses, in the order given.
    pub fn list(&self) -> Vec<String> {
        match self {
            Recipients::One(a) => vec![a.clone()],
            Recipients::Many(l) => l.clone(),
        }
    }

    /// What the CLI's repeated `--to` gives: one address as before, several as a list.
    pub fn from_list(mut l: Vec<String>) -> Self {
        if l.len() == 1 {
            Recipients::One(l.remove(0))
        } else {
            Recipients::Many(l)
        }
    }
}

impl From<String> for Recipients {
    fn from(a: String) -> Self {
        Recipients::One(a)
    }
}

impl From<&str> for Recipients {
    fn from(a: &str) -> Self {
        Recipients::One(a.to_string())
    }
}

/// The `FIELD=VALUE` words of `a2acp thread reply`: a value that reads as JSON (a number,
/// `true`, `[…]`, `{…}`, `"…"`) is taken as that JSON, anything else as the text itself
/// (`day=Thursday`, `time=19:00`).
pub fn parse_values(words: &[String]) -> Result<Context, String> {
    let mut c = Context::new();
    for w in words {
        let Some((k, v)) = w.split_once('=') else {
            return Err(format!("`{w}`: expected FIELD=VALUE, e.g. day=Thursday"));
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(format!("`{w}`: the field name is empty"));
        }
        let v = serde_json::from_str::<Value>(v).unwrap_or_else(|_| Value::String(v.into()));
        c.insert(k.to_string(), v);
    }
    Ok(c)
}

/// Parses a tier name (`always_share`, `ask_first`, `never_share`, or `always`/`ask`/`never`).
pub fn parse_tier(s: &str) -> Result<Tier, String> {
    Tier::parse(s)
        .ok_or_else(|| format!("unknown tier `{s}`: use always_share, ask_first or never_share"))
}
