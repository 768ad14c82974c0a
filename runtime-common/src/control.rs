//! The control socket: how `a2acp thread start`, `threads`, `answer`… reach a running
//! agent. One JSON object per line over a Unix socket (`agent.sock` in the agent's home):
//! the client writes one [`Request`], the agent answers one [`Response`] and closes.
//!
//! ```text
//! → {"cmd":"threads"}
//! ← {"ok":true,"data":[{"id":"thr_…","peer":"agent:bob@localhost","state":"NEGOTIATING",…}]}
//! → {"cmd":"answer","prompt_id":3,"args":["confirm"]}
//! ← {"ok":true,"data":"prompt #3 answered"}
//! ```

use std::collections::BTreeMap;

use a2acp_core::agent::{RelationshipOverride, Suggestion, Tier};
use a2acp_core::packet::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest request line accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// A request to the running agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    /// Address, connection, counts.
    Status,
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

mod groups;
mod spaces;
pub use groups::*;
pub use spaces::*;

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

/// Text for `a2acp notifications`.
pub fn render_notifications(ns: &[NotificationEntry], all: bool) -> String {
    if ns.is_empty() {
        return if all {
            "no notifications".into()
        } else {
            "no unread notifications (`a2acp notifications --all` lists the read ones too)".into()
        };
    }
    let mut out = String::new();
    for n in ns {
        let kind = serde_json::to_value(n.notification.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        out += &format!(
            "{:>4}{} {} {:<10} {}\n      {}\n",
            n.number,
            if n.read { " " } else { "*" },
            n.at,
            kind,
            n.notification
                .thread_id
                .as_deref()
                .map(|t| format!("thread {t}"))
                .unwrap_or_default(),
            n.notification.text
        );
    }
    out += "(* unread; `a2acp notifications read N` or `read --all` marks them read)";
    out
}

/// Text for `a2acp keys show`: the digits in 12 groups of 5 and the QR code.
pub fn render_key(k: &KeyInfo, with_qr: bool) -> String {
    let mut out = format!("{} (you): {}\n", k.address, k.key);
    out += &format!(
        "{}: {}\n",
        k.peer,
        k.pinned_key
            .as_deref()
            .unwrap_or("no key pinned yet (pinned on first contact)")
    );
    let number = |title: &str, n: &str, out: &mut String| {
        *out += &format!("\n{title}\n");
        for l in crate::safety::grouped(n).lines() {
            *out += &format!("    {l}\n");
        }
        if with_qr {
            if let Some(q) = crate::safety::qr(n) {
                *out += &q;
                *out += "\n";
            }
        }
    };
    if let (Some(new), Some(n)) = (&k.changed_key, &k.changed_safety_number) {
        out += &format!("\nCHANGED: {} now presents the key {new}\n", k.peer);
        number(
            "Safety number with the NEW key — compare it with the one their device shows (read it out or scan it):",
            n,
            &mut out,
        );
        out += &format!(
            "\nIf both match: a2acp keys accept {} --safety-number \"{}\"\n",
            k.peer, n
        );
    } else if let Some(n) = &k.safety_number {
        number(
            "Safety number — the same 60 digits on both devices if the keys are the ones you both hold:",
            n,
            &mut out,
        );
    }
    out.trim_end().to_string()
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

/// Text for `a2acp status`.
pub fn render_status(s: &StatusInfo) -> String {
    let relay = match &s.refused {
        Some(r) => format!(
            "refused ({}: {}) — {}",
            r.code,
            r.message,
            match r.retry_after_secs {
                Some(n) => format!("the agent tries again in {} min", n.div_ceil(60)),
                None => "the agent stays offline until it is run again".into(),
            }
        ),
        None if s.online => "online".into(),
        None => "offline (reconnecting)".into(),
    };
    format!(
        "{} ({})\n  relay: {}\n  threads: {} ({} open) · prompts: {} · outbox: {}",
        s.address, s.key, relay, s.threads, s.open_threads, s.prompts, s.outbox
    )
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

/// Text for `a2acp threads`: one row per thread; a group thread this agent coordinates
/// is one row (its id `grp_…`, how many take part, its state) with its legs beneath it.
pub fn render_threads(ts: &[ThreadSummary]) -> String {
    if ts.is_empty() {
        return "no threads yet — start one with `a2acp thread start --to ADDR --category C --summary S` (repeat --to for a group thread)".into();
    }
    let mut s = format!(
        "{:<22} {:<12} {:<26} {:>3} {:<8} {}\n",
        "THREAD", "STATE", "WITH", "RT", "WAITING", "ABOUT"
    );
    let groups: Vec<&str> = ts
        .iter()
        .filter(|t| t.is_group())
        .map(|t| t.id.as_str())
        .collect();
    let leg_of_listed = |t: &ThreadSummary| {
        !t.is_group()
            && t.group
                .as_ref()
                .is_some_and(|g| groups.contains(&g.group_id.as_str()))
    };
    for t in ts {
        if leg_of_listed(t) {
            continue;
        }
        if t.is_group() {
            let n = t.group.as_ref().map_or(0, |g| g.participants.len());
            s += &format!(
                "{:<22} {:<12} {:<26} {:>3} {:<8} {}: {}\n",
                t.id,
                t.state,
                format!("group: you + {} other(s)", n.saturating_sub(1)),
                t.round_trips,
                t.waiting,
                t.category,
                t.summary
            );
            let legs: Vec<&ThreadSummary> = ts
                .iter()
                .filter(|l| !l.is_group() && l.group.as_ref().is_some_and(|g| g.group_id == t.id))
                .collect();
            for (i, l) in legs.iter().enumerate() {
                let branch = if i + 1 == legs.len() { "└" } else { "├" };
                s += &format!(
                    "{:<22} {:<12} {:<26} {:>3} {:<8} leg of {}\n",
                    format!(" {branch} {}", l.id),
                    l.state,
                    l.peer,
                    l.round_trips,
                    l.waiting,
                    t.id
                );
            }
            continue;
        }
        let group = t
            .group
            .as_ref()
            .map(|g| {
                format!(
                    " (group {} of {}, coordinated by {})",
                    g.group_id,
                    g.participants.len(),
                    user_of(&g.coordinator)
                )
            })
            .unwrap_or_default();
        let split = match (&t.continued_as, t.split_into.is_empty()) {
            (Some(next), _) => format!(" — goes on as {next} (A2A)"),
            (None, true) => String::new(),
            (None, false) => format!(" — split into {}", t.split_into.join(", ")),
        };
        s += &format!(
            "{:<22} {:<12} {:<26} {:>3} {:<8} {}: {}{group}{split}\n",
            t.id,
            t.shown_state(),
            t.peer,
            t.round_trips,
            t.waiting,
            t.category,
            t.summary
        );
    }
    s.trim_end().to_string()
}

/// Text for `a2acp thread show`: state, peer, intent, what each side shared and declined,
/// open prompts, the proposal and the timeline of the thread's main events.
pub fn render_thread(t: &ThreadDetail) -> String {
    let s = &t.summary;
    let mut out = format!("Thread {} — {}\n", s.id, s.shown_state());
    if !s.split_into.is_empty() {
        out += &format!(
            "  split into     {} (it takes no further part; they carry it on)\n",
            s.split_into.join(", ")
        );
    }
    if let Some(next) = &s.continued_as {
        out += &format!(
            "  goes on as     {next} (no a2acp agent holds the address: its A2A agent took it up)\n"
        );
    }
    let row = |out: &mut String, k: &str, v: &str| *out += &format!("  {k:<14} {v}\n");
    row(
        &mut out,
        "with",
        &format!(
            "{} ({} started it)",
            s.peer,
            if s.initiator { "you" } else { "they" }
        ),
    );
    if let Some(g) = &s.group {
        let part = if g.coordinator == s.peer {
            format!(
                "part of group {} coordinated by {} (participants: {})",
                g.group_id,
                g.coordinator,
                g.others("")
            )
        } else {
            format!(
                "leg of your group {} (`a2acp thread show {}`)",
                g.group_id, g.group_id
            )
        };
        row(&mut out, "group", &part);
    }
    row(
        &mut out,
        "about",
        &format!(
            "{}: {}{}",
            s.category,
            s.summary,
            t.urgency
                .as_deref()
                .map(|u| format!(" (urgency {u})"))
                .unwrap_or_default()
        ),
    );
    let waiting = match s.waiting.as_str() {
        "user" => "for you".to_string(),
        "peer" if !s.waiting_for.is_empty() => format!("for {}", s.waiting_for.join(", ")),
        "peer" => "for the other agent".to_string(),
        "llm" => "for the language model".to_string(),
        "nothing" | "" => "for nothing".to_string(),
        w => format!("for {w}"),
    };
    row(
        &mut out,
        "waiting",
        &format!(
            "{waiting} · {} round trip(s) · last activity {}{}",
            s.round_trips,
            s.last_activity,
            t.version
                .as_deref()
                .map(|v| format!(" · protocol {v}"))
                .unwrap_or_default()
        ),
    );
    let fields = |c: &Context| -> String {
        if c.is_empty() {
            return "nothing".into();
        }
        c.iter()
            .map(|(k, v)| match v {
                Value::String(x) => format!("{k}={x}"),
                v => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let list = |l: &[String]| {
        if l.is_empty() {
            "nothing".to_string()
        } else {
            l.join(", ")
        }
    };
    row(&mut out, "you shared", &fields(&t.shared));
    row(&mut out, "you declined", &list(&t.withheld));
    row(&mut out, "they shared", &fields(&t.theirs));
    row(&mut out, "they declined", &list(&t.peer_unavailable));
    if let Some(r) = &t.resolution {
        row(&mut out, "proposal", r);
    }
    for (n, p) in &t.prompts {
        row(
            &mut out,
            "open prompt",
            &format!("{p} — `a2acp prompts` shows it, `a2acp answer {n} …` answers it"),
        );
    }
    if t.halted {
        row(
            &mut out,
            "HALTED",
            &format!(
                "the identity key of {} changed: `a2acp keys show {}`",
                s.peer, s.peer
            ),
        );
    } else if t.escalated {
        row(
            &mut out,
            "needs you",
            &format!(
                "give new context or an answer: `a2acp thread reply {} FIELD=VALUE …` (or `a2acp thread cancel {}`)",
                s.id, s.id
            ),
        );
    }
    if !t.audit.is_empty() {
        out += "  timeline:\n";
        for a in &t.audit {
            out += &format!("    {a}\n");
        }
    }
    out.trim_end().to_string()
}

/// Text for `a2acp memory show`.
pub fn render_memory(peers: &[PeerMemory]) -> String {
    let mut out = String::new();
    if peers.is_empty() {
        out += "no agent known yet\n";
    }
    for p in peers {
        out += &format!("{}\n", p.address);
        out += &format!(
            "  identity key: {}\n",
            p.pinned_key.as_deref().unwrap_or("not pinned yet")
        );
        if let Some(r) = &p.relationship {
            out += &format!(
                "  relationship: {} (always share: {}; never share: {})\n",
                if r.label.is_empty() { "-" } else { &r.label },
                join(&r.promote_to_always_share),
                join(&r.restrict_to_never_share)
            );
        }
        if p.blocked {
            out += "  BLOCKED\n";
        }
        if p.flagged {
            out += "  flagged: sends malformed packets\n";
        }
        let th: Vec<String> = p.threads.iter().map(|(s, n)| format!("{n} {s}")).collect();
        out += &format!(
            "  threads: {}\n",
            if th.is_empty() {
                "none".into()
            } else {
                th.join(", ")
            }
        );
        out += &format!(
            "  they shared: {}\n",
            serde_json::to_string(&p.they_shared).unwrap_or_default()
        );
        out += &format!("  you shared: {}\n", p.we_shared.join(", "));
        out += &render_remembered(p.remembered.as_ref());
    }
    out.trim_end().to_string()
}

/// The relationship memory part of `a2acp memory show` (§11.1).
fn render_remembered(r: Option<&serde_json::Value>) -> String {
    let Some(r) = r else {
        return "  remembered: nothing yet (memory grows with each completed thread)\n".into();
    };
    let s = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        other => other.to_string(),
    };
    let list = |v: &serde_json::Value| {
        let items: Vec<String> = v
            .as_array()
            .map(|a| a.iter().map(s).collect())
            .unwrap_or_default();
        if items.is_empty() {
            "-".to_string()
        } else {
            items.join(", ")
        }
    };
    let mut out = format!(
        "  remembered: {} completed thread(s), first {}, last {}; trust {} ({})\n",
        s(&r["interaction_count"]),
        s(&r["first_interaction"]),
        s(&r["last_interaction"]),
        s(&r["trust_level"]),
        list(&r["trust_signals"]),
    );
    let lp = &r["learned_patterns"];
    out += &format!(
        "  typical intents: {}; usually shares: {}; usually declines: {}; average response: {}\n",
        list(&r["typical_intents"]),
        list(&lp["usually_shares"]),
        list(&lp["usually_declines"]),
        s(&lp["average_response_time"]),
    );
    if let Some(cache) = r["context_cache"].as_object().filter(|c| !c.is_empty()) {
        out += "  context cache:\n";
        for (field, e) in cache {
            out += &format!(
                "    {field} = {} (updated {}, {})\n",
                s(&e["value"]),
                s(&e["last_updated"]),
                s(&e["confidence"]),
            );
        }
    }
    out
}

fn join(s: &std::collections::BTreeSet<String>) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// Text for `a2acp suggestions`.
pub fn render_suggestions(list: &[Suggestion]) -> String {
    if list.is_empty() {
        return "no suggestions".into();
    }
    let mut out = String::new();
    for s in list {
        match s {
            Suggestion::Promote { id, field, peer } => {
                out += &format!("#{id} always share {field} with {peer}\n");
            }
        }
    }
    out += "accept one with `a2acp suggestions accept N`";
    out
}

/// Text for `a2acp permissions show`.
pub fn render_permissions(p: &PermissionsInfo) -> String {
    let mut out = String::new();
    for (tier, list) in &p.tiers {
        out += &format!("{tier}: {}\n", list.join(", "));
    }
    for (a, o) in &p.overrides {
        out += &format!(
            "for {a} ({}): always share {}; never share {}\n",
            if o.label.is_empty() { "-" } else { &o.label },
            join(&o.promote_to_always_share),
            join(&o.restrict_to_never_share)
        );
    }
    if !p.blocked.is_empty() {
        out += &format!("blocked: {}\n", p.blocked.join(", "));
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form() {
        let r: Request =
            serde_json::from_str(r#"{"cmd":"answer","prompt_id":3,"args":["confirm"]}"#).unwrap();
        assert_eq!(
            r,
            Request::Answer {
                prompt_id: 3,
                args: vec!["confirm".into()]
            }
        );
        let r: Request = serde_json::from_str(
            r#"{"cmd":"start_thread","to":"agent:b@x","category":"c","summary":"s"}"#,
        )
        .unwrap();
        assert!(matches!(
            r,
            Request::StartThread {
                urgent: false,
                context: None,
                ..
            }
        ));
        // A group thread: `to` is a list; `quorum` optional. One `--to` is sent as before.
        let r: Request = serde_json::from_str(
            r#"{"cmd":"start_thread","to":["agent:b@x","agent:c@x"],"category":"c","summary":"s","quorum":2}"#,
        )
        .unwrap();
        assert!(matches!(
            r,
            Request::StartThread { ref to, quorum: Some(2), sequential: false, .. } if to.list() == ["agent:b@x", "agent:c@x"]
        ));
        let r: Request = serde_json::from_str(
            r#"{"cmd":"start_thread","to":["agent:b@x","agent:c@x"],"category":"c","summary":"s","sequential":true}"#,
        )
        .unwrap();
        assert!(matches!(
            r,
            Request::StartThread {
                quorum: None,
                sequential: true,
                ..
            }
        ));
        let one = Request::StartThread {
            to: Recipients::from_list(vec!["agent:b@x".into()]),
            category: "c".into(),
            summary: "s".into(),
            context: None,
            urgent: false,
            quorum: None,
            sequential: false,
        };
        assert_eq!(
            serde_json::to_string(&one).unwrap(),
            r#"{"cmd":"start_thread","to":"agent:b@x","category":"c","summary":"s","context":null,"urgent":false}"#
        );
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"explode"}"#).is_err());
        // The requests of the person's commands.
        let r: Request = serde_json::from_str(r#"{"cmd":"notifications"}"#).unwrap();
        assert_eq!(r, Request::Notifications { all: false });
        let r: Request =
            serde_json::from_str(r#"{"cmd":"read_notifications","all":true}"#).unwrap();
        assert_eq!(
            r,
            Request::ReadNotifications {
                number: None,
                all: true
            }
        );
        let r: Request = serde_json::from_str(
            r#"{"cmd":"reply_thread","id":"thr_1","context":{"day":"Thursday"}}"#,
        )
        .unwrap();
        assert!(
            matches!(r, Request::ReplyThread { ref context, .. } if context["day"] == "Thursday")
        );
        let r: Request =
            serde_json::from_str(r#"{"cmd":"key_accept","address":"agent:b@x"}"#).unwrap();
        assert_eq!(
            r,
            Request::KeyAccept {
                address: "agent:b@x".into(),
                safety_number: None
            }
        );
        let s = serde_json::to_string(&Response::err("nope")).unwrap();
        assert_eq!(s, r#"{"ok":false,"error":"nope","data":null}"#);
    }

    #[test]
    fn reply_values() {
        let w = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let c = parse_values(&w(&[
            "day=Thursday",
            "guests=2",
            "ok=true",
            "slots=[\"a\",\"b\"]",
            "time=19:00",
            "note=a=b",
        ]))
        .unwrap();
        assert_eq!(c["day"], "Thursday");
        assert_eq!(c["guests"], 2);
        assert_eq!(c["ok"], true);
        assert_eq!(c["slots"], serde_json::json!(["a", "b"]));
        assert_eq!(c["time"], "19:00");
        assert_eq!(c["note"], "a=b");
        assert!(parse_values(&w(&["day"])).is_err());
        assert!(parse_values(&w(&["=x"])).is_err());
    }

    /// `thread show` printed an empty line: the detail's packet list and the summary's
    /// packet count had one JSON name, so the client could not read the answer back.
    #[test]
    fn a_thread_detail_reads_back_and_renders_for_a_person() {
        let mut shared = Context::new();
        shared.insert(
            "time_windows".into(),
            serde_json::json!(["Friday 19:00-22:00"]),
        );
        let mut theirs = Context::new();
        theirs.insert("name".into(), serde_json::json!("Bob"));
        let d = ThreadDetail {
            summary: ThreadSummary {
                id: "thr_1".into(),
                peer: "agent:bob@localhost".into(),
                state: "NEGOTIATING".into(),
                category: "scheduling".into(),
                summary: "Dinner on Friday".into(),
                initiator: true,
                round_trips: 2,
                waiting: "user".into(),
                waiting_for: vec![],
                last_activity: "2026-03-21T14:30:00Z".into(),
                packets: 1,
                group: None,
                split_into: Vec::new(),
                continued_as: None,
            },
            version: Some("0.2".into()),
            shared,
            withheld: vec!["cuisine_preference".into()],
            theirs,
            peer_unavailable: vec!["dietary".into()],
            resolution: None,
            history: vec![PacketLine {
                dir: "sent".into(),
                kind: "context".into(),
                packet_id: "pkt_1".into(),
                summary: String::new(),
            }],
            audit: vec!["2026-03-21T14:30:00Z state INITIATED -> NEGOTIATING".into()],
            urgency: Some("low".into()),
            escalated: true,
            halted: false,
            prompts: vec![(3, "#3 consent".into())],
        };
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["packets"], 1);
        let back: ThreadDetail = serde_json::from_value(v).unwrap();
        assert_eq!(back, d);
        let text = render_thread(&back);
        for part in [
            "Thread thr_1 — NEGOTIATING",
            "with           agent:bob@localhost (you started it)",
            "about          scheduling: Dinner on Friday (urgency low)",
            "waiting        for you · 2 round trip(s)",
            "you shared     time_windows=[\"Friday 19:00-22:00\"]",
            "you declined   cuisine_preference",
            "they shared    name=Bob",
            "they declined  dietary",
            "open prompt    #3 consent",
            "needs you      give new context or an answer: `a2acp thread reply thr_1 FIELD=VALUE …`",
            "timeline:\n    2026-03-21T14:30:00Z state INITIATED -> NEGOTIATING",
        ] {
            assert!(text.contains(part), "{part:?} in\n{text}");
        }
        // Waiting for the peer names it by address.
        let mut d = back;
        d.summary.waiting = "peer".into();
        d.summary.waiting_for = vec!["agent:bob@localhost".into()];
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["waiting_for"], serde_json::json!(["agent:bob@localhost"]));
        let text = render_thread(&d);
        assert!(
            text.contains("waiting        for agent:bob@localhost · 2 round trip(s)"),
            "{text}"
        );
    }

    /// A thread split into others (§6.5) reads SPLIT, with its children, in the list and
    /// in `thread show`; its JSON keeps the lifecycle state it had.
    #[test]
    fn a_split_thread_reads_split_with_its_children() {
        let parent = ThreadSummary {
            id: "thr_parent".into(),
            peer: "agent:bob@localhost".into(),
            state: "NEGOTIATING".into(),
            category: "scheduling".into(),
            summary: "Dinner and games".into(),
            initiator: true,
            round_trips: 1,
            waiting: "nothing".into(),
            waiting_for: vec![],
            last_activity: "2026-03-21T14:30:00Z".into(),
            packets: 2,
            group: None,
            split_into: vec!["thr_dinner".into(), "thr_games".into()],
            continued_as: None,
        };
        let v = serde_json::to_value(&parent).unwrap();
        assert_eq!(v["state"], "NEGOTIATING");
        assert_eq!(
            v["split_into"],
            serde_json::json!(["thr_dinner", "thr_games"])
        );
        let child = ThreadSummary {
            id: "thr_games".into(),
            split_into: Vec::new(),
            ..parent.clone()
        };
        assert!(serde_json::to_value(&child)
            .unwrap()
            .get("split_into")
            .is_none());
        let list = render_threads(&[parent.clone(), child]);
        let row = list.lines().find(|l| l.starts_with("thr_parent")).unwrap();
        assert!(row.contains(" SPLIT "), "{row}");
        assert!(row.ends_with("— split into thr_dinner, thr_games"), "{row}");
        let games = list.lines().find(|l| l.starts_with("thr_games")).unwrap();
        assert!(games.contains(" NEGOTIATING "), "{games}");

        // A thread whose recipient had no a2acp agent says where it goes on (§18).
        let declined = ThreadSummary {
            id: "thr_first".into(),
            state: "DECLINED".into(),
            split_into: Vec::new(),
            continued_as: Some("thr_next".into()),
            ..parent
        };
        assert_eq!(
            serde_json::to_value(&declined).unwrap()["continued_as"],
            "thr_next"
        );
        let list = render_threads(&[declined]);
        assert!(list.contains(" DECLINED "), "{list}");
        assert!(list.ends_with("— goes on as thr_next (A2A)"), "{list}");
    }
}
