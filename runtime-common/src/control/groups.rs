//! What the control socket answers about group threads (§10) — the group as rows and
//! prompts name it, the coordinator's view of its members and open proposal — and how
//! the CLI shows it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ThreadSummary;

/// A group thread (§10) as the rows of `threads`, `thread` and `prompts` name it: on the
/// coordinator's row of the group (whose `id` is the `group_id`), on each leg (a thread
/// whose `id` differs), and on a prompt about either.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRef {
    /// The group's id (`grp_…`).
    pub group_id: String,
    /// The agent that coordinates it.
    pub coordinator: String,
    /// Every agent of the group, the coordinator first.
    pub participants: Vec<String>,
}

impl GroupRef {
    /// The participants other than `me` (an address; `""`: everyone), by user name
    /// (`bob, charlie`).
    pub fn others(&self, me: &str) -> String {
        let names: Vec<String> = self
            .participants
            .iter()
            .filter(|p| p.as_str() != me)
            .map(|p| user_of(p).to_string())
            .collect();
        names.join(", ")
    }
}

/// The user part of an address as text (`agent:bob@localhost` → `bob`).
pub fn user_of(address: &str) -> &str {
    let a = address.strip_prefix("agent:").unwrap_or(address);
    a.split('@').next().unwrap_or(a)
}

/// One participant of a group in `thread show grp_…` (the coordinator's view).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMemberLine {
    /// The participant.
    pub agent: String,
    /// The core's status (§10.2): `context_received`, `awaiting_response`,
    /// `unreachable`, `declined`.
    pub status: String,
    /// Its leg.
    pub thread_id: String,
    /// Its leg's state.
    pub state: String,
    /// Its answer to the open group proposal (`confirmed`, `declined`,
    /// `counter_requested`…), if it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

/// The group's open proposal in `thread show grp_…`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupProposalInfo {
    /// What is proposed.
    pub summary: String,
    /// Confirmations needed, the coordinator's user's included.
    pub required: u32,
    /// Who confirmed so far (the coordinator first when its user did).
    pub confirmed: Vec<String>,
    /// The coordinator's user's answer, if given.
    #[serde(default)]
    pub mine: Option<String>,
    /// The coordinator's user's open prompt.
    #[serde(default)]
    pub prompt_id: Option<u64>,
    /// When confirmations are due (RFC 3339).
    pub deadline: String,
    /// The quorum was reached: the confirmed participants were told.
    pub reached: bool,
    /// A sequential confirmation: whose turn it is (absent once everyone confirmed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `thread show grp_…`: a group thread this agent coordinates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupDetail {
    /// The group's row (its `group` names the group itself).
    #[serde(flatten)]
    pub summary: ThreadSummary,
    /// Every participant with its status and leg, in the group's order.
    pub members: Vec<GroupMemberLine>,
    /// The open proposal.
    #[serde(default)]
    pub proposal: Option<GroupProposalInfo>,
    /// Confirmations the user asked for when starting it.
    #[serde(default)]
    pub quorum: Option<u32>,
    /// Confirmations are asked one after the other (§8.3).
    #[serde(default)]
    pub sequential: bool,
    /// No candidate is left: handed to the users (§6.4).
    #[serde(default)]
    pub escalated: bool,
    /// Every leg ended, or the user closed it.
    #[serde(default)]
    pub closed: bool,
}

/// Text for `a2acp thread start --to A --to B …`: the group's id, then each leg and
/// whether the relay took its first packet (the `start_thread` answer of a group:
/// `group_id`, `threads` {participant: leg}, `relay` {leg: word}, `refused` {leg: code},
/// `online`).
pub fn render_group_started(data: &Value) -> String {
    let gid = data["group_id"].as_str().unwrap_or("?");
    let mut out = format!("group thread {gid} started");
    if data["online"] == false {
        out += " (the agent is offline: the first packets go when the relay is reachable)";
    }
    out += &format!("; follow it with `a2acp thread show {gid}`");
    if let Some(legs) = data["threads"].as_object() {
        for (who, leg) in legs {
            let leg = leg.as_str().unwrap_or("?");
            let relay = match data["relay"][leg].as_str() {
                Some("accepted") => "the relay accepted its first packet".to_string(),
                Some("refused") => format!(
                    "REFUSED by the relay ({}): no agent is registered as {who}",
                    data["refused"][leg].as_str().unwrap_or("?")
                ),
                _ => "its first packet is not accepted yet".to_string(),
            };
            out += &format!("\n  {who:<26} leg {leg}: {relay}");
        }
    }
    out
}

/// Text for `a2acp thread show grp_…`: the group's state and intent, every participant
/// with its status and leg, and the open proposal with who confirmed.
pub fn render_group(g: &GroupDetail) -> String {
    let s = &g.summary;
    let mut out = format!("Group thread {} — {}\n", s.id, s.state);
    let row = |out: &mut String, k: &str, v: &str| *out += &format!("  {k:<14} {v}\n");
    let others = g.members.len();
    row(
        &mut out,
        "with",
        &format!("{others} participant(s); you coordinate (every leg goes through your agent)"),
    );
    row(&mut out, "about", &format!("{}: {}", s.category, s.summary));
    row(
        &mut out,
        "waiting",
        &format!(
            "{} · last activity {}{}",
            match s.waiting.as_str() {
                "user" => "for you",
                "peer" => "for the participants",
                _ => "for nothing",
            },
            s.last_activity,
            match (g.quorum, g.sequential) {
                (_, true) => " · sequential confirmation".to_string(),
                (Some(q), false) => format!(" · quorum asked: {q}"),
                (None, false) => String::new(),
            }
        ),
    );
    out += "  participants:\n";
    for m in &g.members {
        // The core's status says `declined` for every leg that ended; a leg that
        // completed or expired is shown as such.
        let status = match m.state.as_str() {
            "COMPLETED" => "done",
            "EXPIRED" => "expired",
            _ => m.status.as_str(),
        };
        out += &format!(
            "    {:<26} {:<18} leg {} {}{}\n",
            m.agent,
            status,
            m.thread_id,
            m.state,
            m.answer
                .as_deref()
                .map(|a| format!(" · answered {a}"))
                .unwrap_or_default()
        );
    }
    match &g.proposal {
        Some(p) => {
            row(&mut out, "proposal", &format!("“{}”", p.summary));
            row(
                &mut out,
                "confirmations",
                &format!(
                    "{} of {} needed{}: {}",
                    p.confirmed.len(),
                    p.required,
                    if p.reached { " (reached)" } else { "" },
                    if p.confirmed.is_empty() {
                        "nobody yet".to_string()
                    } else {
                        p.confirmed
                            .iter()
                            .map(|a| user_of(a).to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            );
            if let Some(next) = &p.next {
                row(&mut out, "asked now", user_of(next));
            }
            row(
                &mut out,
                "your answer",
                &match (&p.mine, p.prompt_id) {
                    (Some(m), _) => m.clone(),
                    (None, Some(n)) => format!("not given — `a2acp answer {n} confirm` (or see `a2acp prompts`)"),
                    (None, None) => "not given".into(),
                },
            );
            if !p.reached {
                row(&mut out, "due", &p.deadline);
            }
        }
        None if g.escalated => row(
            &mut out,
            "needs you",
            "no time is left that the group can make (`a2acp notifications`); cancel it with `a2acp thread cancel` or start a new one",
        ),
        None => {}
    }
    if g.closed {
        row(
            &mut out,
            "closed",
            "every leg ended or you closed the group",
        );
    }
    out.trim_end().to_string()
}
