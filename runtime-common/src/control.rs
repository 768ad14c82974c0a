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
    /// Start a thread (§4).
    StartThread {
        /// The other agent's address.
        to: String,
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
    /// Recent notifications.
    Notifications,
    /// The §7.2 suggestions that still apply (`a2acp suggestions`), oldest first.
    Suggestions,
    /// Accept a §7.2 suggestion by its number (`a2acp suggestions accept N`): "always
    /// share FIELD with PEER" becomes a relationship override.
    AcceptSuggestion {
        /// The suggestion's number, as listed.
        id: u64,
    },
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
    /// Who it waits for.
    pub waiting: String,
    /// Last activity (RFC 3339).
    pub last_activity: String,
    /// Packets in its history. (In `thread show` the key `packets` holds the packets
    /// themselves, so there this count is absent.)
    #[serde(default)]
    pub packets: usize,
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
    /// What this agent withheld.
    pub withheld: Vec<String>,
    /// What the peer shared.
    pub theirs: Context,
    /// What the peer declined.
    pub peer_unavailable: Vec<String>,
    /// The open or last resolution's summary.
    pub resolution: Option<String>,
    /// The packets.
    pub packets: Vec<PacketLine>,
    /// The thread's recent audit records.
    pub audit: Vec<String>,
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

/// Parses a tier name (`always_share`, `ask_first`, `never_share`, or `always`/`ask`/`never`).
pub fn parse_tier(s: &str) -> Result<Tier, String> {
    Tier::parse(s)
        .ok_or_else(|| format!("unknown tier `{s}`: use always_share, ask_first or never_share"))
}

/// Text for `a2acp threads`.
pub fn render_threads(ts: &[ThreadSummary]) -> String {
    if ts.is_empty() {
        return "no threads yet — start one with `a2acp thread start --to ADDR --category C --summary S`".into();
    }
    let mut s = format!(
        "{:<22} {:<12} {:<26} {:>3} {:<8} {}\n",
        "THREAD", "STATE", "WITH", "RT", "WAITING", "ABOUT"
    );
    for t in ts {
        s += &format!(
            "{:<22} {:<12} {:<26} {:>3} {:<8} {}: {}\n",
            t.id, t.state, t.peer, t.round_trips, t.waiting, t.category, t.summary
        );
    }
    s.trim_end().to_string()
}

/// Text for `a2acp thread show`.
pub fn render_thread(t: &ThreadDetail) -> String {
    let s = &t.summary;
    let mut out = format!(
        "thread {} with {} — {}\n  about: {}: {}\n  opened by {} · round trips {} · waiting for {} · last activity {}\n",
        s.id,
        s.peer,
        s.state,
        s.category,
        s.summary,
        if s.initiator { "this agent" } else { "the peer" },
        s.round_trips,
        s.waiting,
        s.last_activity
    );
    if let Some(v) = &t.version {
        out += &format!("  protocol version {v}\n");
    }
    let j = |c: &Context| serde_json::to_string(c).unwrap_or_default();
    out += &format!("  shared: {}\n", j(&t.shared));
    if !t.withheld.is_empty() {
        out += &format!("  withheld: {}\n", t.withheld.join(", "));
    }
    out += &format!("  they shared: {}\n", j(&t.theirs));
    if !t.peer_unavailable.is_empty() {
        out += &format!("  they declined: {}\n", t.peer_unavailable.join(", "));
    }
    if let Some(r) = &t.resolution {
        out += &format!("  resolution: {r}\n");
    }
    out += "  packets:\n";
    for p in &t.packets {
        let arrow = if p.dir == "sent" { ">" } else { "<" };
        out += &format!("    {arrow} {} {}{}\n", p.kind, p.packet_id, p.summary);
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
    }
    out += "(relationship memory — what your agent learns about each relationship over time, §5.1 layer 4 — arrives in a later version; this is what it pins and knows today)";
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
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"explode"}"#).is_err());
        let s = serde_json::to_string(&Response::err("nope")).unwrap();
        assert_eq!(s, r#"{"ok":false,"error":"nope","data":null}"#);
    }
}
