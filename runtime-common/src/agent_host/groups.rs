//! The host's side of group threads (§10): starting one, handing one over, and the rows,
//! details and prompt references the control socket shows for groups.

use std::collections::BTreeMap;

use a2acp_core::agent::{Command, GroupConfirmation, Input, Prompt};
use a2acp_core::packet::{Context, Intent};
use a2acp_core::{Address, Timestamp};

use super::{AgentHost, Effect, HostError};
use crate::control::{
    GroupDetail, GroupMemberLine, GroupProposalInfo, GroupRef, Response, ThreadSummary,
};

impl AgentHost {
    /// Starts a group thread (§10) this agent coordinates with `participants`; answers
    /// `{"group_id", "threads": {participant: leg}}` or the agent's refusal.
    pub(super) fn start_group(
        &mut self,
        now: Timestamp,
        participants: Vec<Address>,
        intent: Intent,
        context: Context,
        confirmation: GroupConfirmation,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        let before: Vec<String> = self.agent.groups().keys().cloned().collect();
        let e = self.handle(
            now,
            Input::Command(Command::StartGroupThread {
                participants,
                intent,
                context,
                confirmation,
            }),
        )?;
        let new = self
            .agent
            .groups()
            .values()
            .find(|g| !before.contains(&g.id));
        Ok(match new {
            Some(g) => {
                let legs: BTreeMap<String, String> = g
                    .legs
                    .iter()
                    .map(|(p, l)| (p.to_string(), l.clone()))
                    .collect();
                (
                    Response::ok(serde_json::json!({ "group_id": g.id, "threads": legs })),
                    e,
                )
            }
            None => {
                let why = self
                    .notifications
                    .back()
                    .map(|n| n.notification.text.clone())
                    .unwrap_or_else(|| "the agent refused it".into());
                (Response::err(format!("no group thread started: {why}")), e)
            }
        })
    }

    /// For the id of a group another agent coordinates (this agent takes part on one
    /// leg): what to tell a user who named the group, pointing at the leg.
    pub(super) fn group_elsewhere(&self, id: &str) -> Option<String> {
        let t = self
            .agent
            .threads()
            .values()
            .find(|t| t.group.as_ref().is_some_and(|l| l.header.group_id == id))?;
        let coordinator = &t.group.as_ref()?.header.coordinator;
        Some(format!(
            "group {id} is coordinated by {coordinator}; you take part in it on thread {} (`a2acp thread show {}`)",
            t.id, t.id
        ))
    }

    /// The group a prompt is about: the group itself for the coordinator's prompt on a
    /// group (its `thread_id` is the `group_id`), the leg's group for a prompt on a leg.
    pub fn prompt_group(&self, p: &Prompt) -> Option<GroupRef> {
        if let Some(g) = self.agent.groups().get(&p.thread_id) {
            return Some(group_ref(&g.header));
        }
        self.agent
            .thread(&p.thread_id)
            .and_then(|t| t.group.as_ref())
            .map(|l| group_ref(&l.header))
    }

    /// The row of a group this agent coordinates in `threads`: its state is the least
    /// advanced of its open legs (or, once all ended, `COMPLETED` if any leg completed).
    pub(super) fn group_row(&self, g: &a2acp_core::agent::Group) -> ThreadSummary {
        use a2acp_core::agent::{ThreadState, Waiting};
        let legs: Vec<&a2acp_core::agent::Thread> = g
            .legs
            .values()
            .filter_map(|l| self.agent.thread(l))
            .collect();
        let open = legs
            .iter()
            .filter(|t| !t.state.is_terminal())
            .map(|t| t.state)
            .min();
        let state = open
            .or_else(|| legs.iter().map(|t| t.state).min())
            .unwrap_or(ThreadState::Declined);
        let user_asked = g.proposal.as_ref().is_some_and(|p| p.prompt_id.is_some())
            || (g.escalated && !g.closed);
        let awaited: Vec<String> = legs
            .iter()
            .filter(|t| !t.state.is_terminal() && t.waiting == Waiting::Peer)
            .map(|t| t.peer.to_string())
            .collect();
        let (waiting, waiting_for) = if user_asked {
            ("user", Vec::new())
        } else if !awaited.is_empty() {
            ("peer", awaited)
        } else {
            ("nothing", Vec::new())
        };
        ThreadSummary {
            id: g.id.clone(),
            peer: self.agent.address().to_string(),
            state: state.to_string(),
            category: g.intent.category.clone(),
            summary: g.intent.summary.clone(),
            initiator: true,
            round_trips: legs.iter().map(|t| t.round_trips).max().unwrap_or(0),
            waiting: waiting.into(),
            waiting_for,
            last_activity: legs
                .iter()
                .map(|t| t.last_activity)
                .max()
                .unwrap_or_default()
                .to_string(),
            packets: legs.iter().map(|t| t.history.len()).sum(),
            split_into: Vec::new(),
            continued_as: None,
            group: Some(group_ref(&g.header)),
        }
    }

    /// `thread show grp_…`: the group, its participants and its open proposal.
    pub(super) fn group_detail(&self, id: &str) -> Option<GroupDetail> {
        use a2acp_core::packet::ResolutionStatus;
        let g = self.agent.groups().get(id)?;
        let me = self.agent.address();
        let word = |s: &ResolutionStatus| {
            serde_json::to_value(s)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        };
        // A participant's last answer to the resolution this agent proposed on its leg.
        let answer_of = |agent: &Address, leg: &str| {
            let r = self
                .agent
                .thread(leg)?
                .stage
                .resolution()
                .filter(|r| &r.proposer == me)?;
            r.answers
                .iter()
                .rev()
                .find(|(a, _)| a == agent)
                .map(|(_, s)| *s)
        };
        let members: Vec<GroupMemberLine> = self
            .agent
            .group_members(id)
            .into_iter()
            .map(|m| GroupMemberLine {
                answer: g
                    .proposal
                    .as_ref()
                    .and_then(|_| answer_of(&m.agent, &m.thread_id))
                    .map(|s| word(&s)),
                agent: m.agent.to_string(),
                status: m.status.word().to_string(),
                thread_id: m.thread_id,
                state: m.state.to_string(),
            })
            .collect();
        let proposal = g.proposal.as_ref().map(|p| {
            let mut confirmed = Vec::new();
            if p.mine == Some(ResolutionStatus::Confirmed) {
                confirmed.push(me.to_string());
            }
            for (agent, leg) in &g.legs {
                if answer_of(agent, leg) == Some(ResolutionStatus::Confirmed) {
                    confirmed.push(agent.to_string());
                }
            }
            GroupProposalInfo {
                summary: p.body.proposal.summary.clone(),
                required: p.required,
                confirmed,
                mine: p.mine.as_ref().map(word),
                prompt_id: p.prompt_id,
                deadline: p.deadline.to_string(),
                reached: p.reached,
                next: p
                    .sequence
                    .as_ref()
                    .filter(|_| !p.reached)
                    .and_then(|s| p.body.requires_confirmation_from.get(s.step))
                    .map(|a| a.to_string()),
            }
        });
        Some(GroupDetail {
            summary: self.group_row(g),
            members,
            proposal,
            quorum: g.quorum,
            sequential: g.sequential,
            escalated: g.escalated,
            closed: g.closed,
        })
    }

    pub(super) fn transfer_coordinator(
        &mut self,
        now: Timestamp,
        id: &str,
        to: &str,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        let to = match Address::parse(to) {
            Ok(a) => a,
            Err(e) => return Ok((Response::err(format!("`{to}`: {e}")), Vec::new())),
        };
        if !self.agent.groups().contains_key(id) {
            return Ok((
                Response::err(format!("this agent coordinates no group `{id}`")),
                Vec::new(),
            ));
        }
        let e = self.handle(
            now,
            Input::Command(Command::TransferCoordinator {
                group_id: id.to_string(),
                to: to.clone(),
            }),
        )?;
        let pending = self
            .agent
            .groups()
            .get(id)
            .is_some_and(|g| g.transfer.is_some() || g.closed);
        let r = if pending {
            Response::ok(format!(
                "group {id}: offered to {to}; it accepts or declines without asking its user (see `a2acp notifications`)"
            ))
        } else {
            let why = self
                .notifications
                .back()
                .map(|n| n.notification.text.clone())
                .unwrap_or_else(|| "the agent refused it".into());
            Response::err(format!("group {id} not handed over: {why}"))
        };
        Ok((r, e))
    }
}

pub(super) fn group_ref(h: &a2acp_core::packet::GroupHeader) -> GroupRef {
    GroupRef {
        group_id: h.group_id.clone(),
        coordinator: h.coordinator.to_string(),
        participants: h.participants.iter().map(|a| a.to_string()).collect(),
    }
}
