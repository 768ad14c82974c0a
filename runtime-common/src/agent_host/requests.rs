//! Serving the control socket's requests: each [`Request`] to the agent's command or
//! the host's answer.

use a2acp_core::agent::permissions::usage::MAX_EXPIRES_AFTER;
use a2acp_core::agent::permissions::UsagePolicy;
use a2acp_core::agent::{Command, GroupConfirmation, Input, Tier};
use a2acp_core::packet::Intent;
use a2acp_core::{Address, Timestamp};

use super::*;
use crate::control::{
    parse_tier, NotificationEntry, PromptEntry, Request, Response, ThreadSummary,
};

impl AgentHost {
    /// Serves one control request.
    pub fn control(
        &mut self,
        now: Timestamp,
        req: Request,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        let cmd = |h: &mut AgentHost, c: Command| h.handle(now, Input::Command(c));
        Ok(match req {
            Request::Status => (Response::ok(self.status()), Vec::new()),
            Request::Snapshot { name } => (self.snapshot(&name), Vec::new()),
            Request::Threads => {
                // The groups this agent coordinates first, each one row; then every
                // thread (a leg names its group).
                let mut v: Vec<ThreadSummary> = self
                    .agent
                    .groups()
                    .values()
                    .map(|g| self.group_row(g))
                    .collect();
                v.extend(self.agent.threads().values().map(thread_summary));
                (Response::ok(v), Vec::new())
            }
            Request::Thread { id } => {
                if let Some(d) = self.group_detail(&id) {
                    return Ok((Response::ok(d), Vec::new()));
                }
                match self.thread_detail(&id)? {
                    Some(d) => (Response::ok(d), Vec::new()),
                    None => (
                        Response::err(
                            self.group_elsewhere(&id)
                                .unwrap_or_else(|| format!("no thread `{id}`")),
                        ),
                        Vec::new(),
                    ),
                }
            }
            Request::Prompts => {
                let v: Vec<PromptEntry> = self
                    .prompts
                    .values()
                    .map(|p| PromptEntry {
                        prompt: p.clone(),
                        group: self.prompt_group(p),
                    })
                    .collect();
                (Response::ok(v), Vec::new())
            }
            Request::Notifications { all } => {
                let v: Vec<&NotificationEntry> = self
                    .notifications
                    .iter()
                    .filter(|n| all || !n.read)
                    .collect();
                (Response::ok(v), Vec::new())
            }
            Request::Suggestions => (Response::ok(self.agent.suggestions()), Vec::new()),
            Request::Receipts { thread } => (self.receipts(thread.as_deref())?, Vec::new()),
            Request::Agreements { thread } => (self.agreements(thread.as_deref())?, Vec::new()),
            Request::Retractions { thread } => (self.retractions(thread.as_deref())?, Vec::new()),
            Request::AcceptSuggestion { id } => {
                let list = self.agent.suggestions();
                match list.iter().find(|s| s.id() == id) {
                    Some(s) => {
                        let text = match s {
                            a2acp_core::agent::Suggestion::Promote { field, peer, .. } => {
                                format!("suggestion #{id} accepted: {field} is always shared with {peer}")
                            }
                        };
                        let e = cmd(self, s.accept())?;
                        (Response::ok(text), e)
                    }
                    None => {
                        let open: Vec<String> =
                            list.iter().map(|s| format!("#{}", s.id())).collect();
                        (
                            Response::err(format!(
                                "no open suggestion #{id} (open: {})",
                                if open.is_empty() {
                                    "none".into()
                                } else {
                                    open.join(", ")
                                }
                            )),
                            Vec::new(),
                        )
                    }
                }
            }
            Request::DismissSuggestion { id } => {
                match self.agent.suggestions().iter().find(|s| s.id() == id) {
                    Some(s) => (
                        Response::ok(format!("suggestion #{id} dismissed")),
                        cmd(self, s.dismiss())?,
                    ),
                    None => (
                        Response::err(format!(
                            "no open suggestion #{id} (see `a2acp suggestions`)"
                        )),
                        Vec::new(),
                    ),
                }
            }
            Request::ReadNotifications { number, all } => {
                (self.read_notifications(number, all), Vec::new())
            }
            Request::ReplyThread { id, context } => self.reply_thread(now, &id, context)?,
            Request::CancelThread { id } => self.cancel_thread(now, &id)?,
            Request::Retract { id, fields } => self.retract(now, &id, fields)?,
            r @ (Request::UpdateIntent { .. } | Request::ForkThread { .. }) => {
                self.drift(now, r)?
            }
            Request::TransferCoordinator { id, to } => self.transfer_coordinator(now, &id, &to)?,
            Request::SpaceCreate {
                name,
                participants,
                fields,
            } => self.space_create(now, name, participants, fields)?,
            Request::SpaceShow { id } => (self.space_show(id.as_deref()), Vec::new()),
            Request::SpaceSet {
                id,
                field,
                value,
                link,
                title,
            } => self.space_set(now, &id, &field, value, link, title)?,
            Request::SpaceHistory { id } => (self.space_history(&id), Vec::new()),
            Request::KeyShow { address } => match Address::parse(&address) {
                Ok(a) => (Response::ok(self.key_info(&a)), Vec::new()),
                Err(e) => (Response::err(format!("`{address}`: {e}")), Vec::new()),
            },
            Request::KeyRotate => self.key_rotate(now)?,
            Request::RecoveryKey { recovery_key } => self.recovery_key(now, &recovery_key)?,
            Request::KeyAccept {
                address,
                safety_number,
            } => self.key_accept(now, &address, safety_number.as_deref())?,
            Request::Answer { prompt_id, args } => {
                let Some(p) = self.prompts.get(&prompt_id).cloned() else {
                    let open: Vec<String> = self.prompts.keys().map(|k| format!("#{k}")).collect();
                    return Ok((
                        Response::err(format!(
                            "no open prompt #{prompt_id} (open: {})",
                            if open.is_empty() {
                                "none".into()
                            } else {
                                open.join(", ")
                            }
                        )),
                        Vec::new(),
                    ));
                };
                match crate::prompt::parse_answer(&p, &args) {
                    Ok(c) => {
                        let e = cmd(self, c)?;
                        (Response::ok(format!("prompt #{prompt_id} answered")), e)
                    }
                    Err(m) => (Response::err(m), Vec::new()),
                }
            }
            Request::StartThread {
                to,
                category,
                summary,
                context,
                urgent,
                quorum,
                sequential,
            } if to.list().iter().any(|a| bridge_of(a).is_some()) => {
                let one = to.list().len() == 1 && quorum.is_none() && !sequential;
                let bridge = to.list().iter().find_map(|a| bridge_of(a)).unwrap_or("a2a");
                self.start_bridged(now, bridge, one, to, category, summary, context, urgent)?
            }
            Request::StartThread {
                to,
                category,
                summary,
                context,
                urgent,
                quorum,
                sequential,
            } => {
                let mut list = Vec::new();
                for a in to.list() {
                    match Address::parse(&a) {
                        Ok(x) if list.contains(&x) => {
                            return Ok((Response::err(format!("{x} is named twice")), Vec::new()))
                        }
                        Ok(x) => list.push(x),
                        Err(e) => return Ok((Response::err(format!("`{a}`: {e}")), Vec::new())),
                    }
                }
                if list.is_empty() {
                    return Ok((
                        Response::err(
                            "name the other agent (--to ADDR; repeat it for a group thread)",
                        ),
                        Vec::new(),
                    ));
                }
                if list.iter().any(|a| a == self.agent.address()) {
                    return Ok((
                        Response::err(if list.len() > 1 {
                            "list only the others: your agent coordinates the group thread"
                        } else {
                            "cannot start a thread with yourself"
                        }),
                        Vec::new(),
                    ));
                }
                if category.trim().is_empty() || summary.trim().is_empty() {
                    return Ok((
                        Response::err("--category and --summary must not be empty"),
                        Vec::new(),
                    ));
                }
                let intent = Intent {
                    category,
                    summary,
                    urgency: Some(if urgent { "urgent" } else { "normal" }.into()),
                    scope_change: None,
                };
                let context = context.unwrap_or_default();
                let confirmation = match (quorum, sequential) {
                    (Some(_), true) => {
                        return Ok((
                            Response::err(
                                "--quorum and --sequential do not go together: a sequential confirmation asks everyone in turn",
                            ),
                            Vec::new(),
                        ))
                    }
                    (Some(q), false) => GroupConfirmation::Quorum(q),
                    (None, true) => GroupConfirmation::Sequential,
                    (None, false) => GroupConfirmation::All,
                };
                if list.len() > 1 {
                    return self.start_group(now, list, intent, context, confirmation);
                }
                if confirmation != GroupConfirmation::All {
                    return Ok((
                        Response::err(
                            "--quorum and --sequential are for a group thread (two or more --to)",
                        ),
                        Vec::new(),
                    ));
                }
                let to = list.remove(0);
                let before: Vec<String> = self.agent.threads().keys().cloned().collect();
                let e = cmd(
                    self,
                    Command::StartThread {
                        to,
                        intent,
                        context,
                    },
                )?;
                let new = self
                    .agent
                    .threads()
                    .keys()
                    .find(|k| !before.contains(k))
                    .cloned();
                match new {
                    Some(id) => (Response::ok(serde_json::json!({ "thread_id": id })), e),
                    None => {
                        let why = self
                            .notifications
                            .back()
                            .map(|n| n.notification.text.clone())
                            .unwrap_or_else(|| "the agent refused it".into());
                        (Response::err(format!("no thread started: {why}")), e)
                    }
                }
            }
            Request::Permissions => (Response::ok(self.permissions()), Vec::new()),
            Request::SetPermission {
                field,
                tier,
                for_peer,
            } => {
                let tier: Tier = match parse_tier(&tier) {
                    Ok(t) => t,
                    Err(m) => return Ok((Response::err(m), Vec::new())),
                };
                if tier == Tier::AskFirst && for_peer.is_some() {
                    return Ok((Response::err("a relationship override promotes to always_share or restricts to never_share; ask_first is the base tier"), Vec::new()));
                }
                let for_peer =
                    match for_peer.map(|a| Address::parse(&a).map_err(|e| format!("`{a}`: {e}"))) {
                        None => None,
                        Some(Ok(a)) => Some(a),
                        Some(Err(m)) => return Ok((Response::err(m), Vec::new())),
                    };
                if field.trim().is_empty() {
                    return Ok((Response::err("the field must not be empty"), Vec::new()));
                }
                if let Err(m) = self.known_field(&field) {
                    return Ok((Response::err(m), Vec::new()));
                }
                let e = cmd(
                    self,
                    Command::SetPermission {
                        field,
                        tier,
                        for_peer,
                    },
                )?;
                (Response::ok(self.permissions()), e)
            }
            Request::SetUsageRule {
                field,
                purpose,
                expires_after,
                no_reshare,
                clear,
            } => {
                if let Err(m) = self.known_field(&field) {
                    return Ok((Response::err(m), Vec::new()));
                }
                let expires_after = match expires_after.as_deref().map(crate::cli::parse_duration) {
                    None => None,
                    Some(Ok(d)) if d.is_zero() || d > MAX_EXPIRES_AFTER => {
                        return Ok((
                            Response::err(
                                "the expiry must be more than nothing and at most ten years",
                            ),
                            Vec::new(),
                        ))
                    }
                    Some(Ok(d)) => Some(d.as_secs().max(1)),
                    Some(Err(m)) => return Ok((Response::err(m), Vec::new())),
                };
                let policy = UsagePolicy {
                    purpose,
                    expires_after,
                    no_reshare,
                };
                if !clear && policy.is_empty() {
                    return Ok((
                        Response::err(
                            "a rule needs --purpose, --expires-after or --no-reshare (or --clear)",
                        ),
                        Vec::new(),
                    ));
                }
                let e = cmd(
                    self,
                    Command::SetUsageRule {
                        field,
                        policy: (!clear).then_some(policy),
                    },
                )?;
                (Response::ok(self.permissions()), e)
            }
            Request::Block { address } => match Address::parse(&address) {
                Ok(a) => {
                    let e = cmd(self, Command::Block(a.clone()))?;
                    (
                        Response::ok(format!(
                            "{a} is blocked: its packets are dropped and its threads declined"
                        )),
                        e,
                    )
                }
                Err(e) => (Response::err(format!("`{address}`: {e}")), Vec::new()),
            },
            Request::Unblock { address } => match Address::parse(&address) {
                Ok(a) => {
                    let e = cmd(self, Command::Unblock(a.clone()))?;
                    (Response::ok(format!("{a} is no longer blocked")), e)
                }
                Err(e) => (Response::err(format!("`{address}`: {e}")), Vec::new()),
            },
            Request::Memory { address } => {
                let filter =
                    match address.map(|a| Address::parse(&a).map_err(|e| format!("`{a}`: {e}"))) {
                        None => None,
                        Some(Ok(a)) => Some(a),
                        Some(Err(m)) => return Ok((Response::err(m), Vec::new())),
                    };
                (Response::ok(self.memory(filter.as_ref())), Vec::new())
            }
            r @ (Request::MemoryEdit { .. }
            | Request::MemoryForget { .. }
            | Request::MemoryExport { .. }
            | Request::MemoryImport { .. }) => return self.memory_request(now, r),
            r @ (Request::Projects
            | Request::Orient { .. }
            | Request::Orchestrate { .. }
            | Request::Pull { .. }
            | Request::Deposit { .. }
            | Request::FlagForReview { .. }
            | Request::Review { .. }
            | Request::AssertFact { .. }
            | Request::InvalidateFact { .. }
            | Request::Facts { .. }) => (self.agentic_request(now, r), Vec::new()),
        })
    }
}

/// The bridge a `thread start --to` names, if it names a bridged peer: an A2A agent's URL
/// (`a2a`) or an ACP agent (`acp:<agent-id>`, `acp`).
fn bridge_of(to: &str) -> Option<&'static str> {
    if a2acp_core::bridge::a2a::client::is_url(to) {
        Some("a2a")
    } else if to.starts_with("acp:") {
        Some("acp")
    } else {
        None
    }
}
