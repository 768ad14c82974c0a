//! The host's requests about one thread: its detail (`thread ID`), the user's reply to it
//! (`thread reply`) and its cancellation (`thread cancel`), and the summary line of
//! `threads`.

use a2acp_core::agent::{Command, Input};
use a2acp_core::packet::Context;
use a2acp_core::Timestamp;

use super::*;
use crate::control::{PacketLine, Response, ThreadDetail, ThreadSummary};

impl AgentHost {
    /// The open thread `id`, or the error to answer with.
    pub(super) fn open_thread(&self, id: &str) -> Result<&a2acp_core::agent::Thread, Response> {
        match self.agent.thread(id) {
            None => Err(Response::err(format!(
                "no thread `{id}` (see `a2acp threads`)"
            ))),
            Some(t) if t.state.is_terminal() => Err(Response::err(format!(
                "thread {id} is {} already; start a new one with `a2acp thread start`",
                t.state
            ))),
            Some(t) if t.halted => Err(Response::err(format!(
                "thread {id} is halted: the identity key of {} changed; check it with `a2acp keys show {}` first",
                t.peer, t.peer
            ))),
            Some(t) => Ok(t),
        }
    }

    pub(super) fn reply_thread(
        &mut self,
        now: Timestamp,
        id: &str,
        context: Context,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        if self.agent.groups().contains_key(id) {
            return Ok((
                Response::err(format!(
                    "{id} is a group thread: new context goes to one participant on its leg (`a2acp thread show {id}` lists them: `a2acp thread reply LEG …`)"
                )),
                Vec::new(),
            ));
        }
        let escalated = match self.open_thread(id) {
            Ok(t) => t.escalated,
            Err(r) => return Ok((r, Vec::new())),
        };
        if context.is_empty() {
            return Ok((
                Response::err("give at least one value (FIELD=VALUE or --context FILE)"),
                Vec::new(),
            ));
        }
        let e = self.handle(
            now,
            Input::Command(Command::UpdateContext {
                thread_id: id.to_string(),
                context,
            }),
        )?;
        let state = self
            .agent
            .thread(id)
            .map(|t| t.state.to_string())
            .unwrap_or_default();
        Ok((
            Response::ok(format!(
                "thread {id}: {} ({state})",
                if escalated {
                    "your answer is shared; the negotiation goes on on both sides"
                } else {
                    "new context shared; the negotiation goes on"
                }
            )),
            e,
        ))
    }

    /// What the agent last told its user about thread `id`: why a command did nothing.
    fn last_told(&self, id: &str) -> Option<String> {
        self.notifications
            .iter()
            .rev()
            .find(|n| n.notification.thread_id.as_deref() == Some(id))
            .map(|n| n.notification.text.clone())
    }

    /// `thread retract`: asks the peer to delete what was shared; answered with what was
    /// asked, or why nothing was.
    pub(super) fn retract(
        &mut self,
        now: Timestamp,
        id: &str,
        fields: Vec<String>,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        let before: Vec<String> = self.agent.thread(id).map_or(Vec::new(), |t| {
            t.retractions
                .iter()
                .map(|r| r.retraction_id.clone())
                .collect()
        });
        let e = self.handle(
            now,
            Input::Command(Command::Retract {
                thread_id: id.to_string(),
                fields,
            }),
        )?;
        // The retractions this command added (several when it names more fields than
        // one retraction carries).
        let asked = self.agent.thread(id).and_then(|t| {
            let fields: Vec<String> = t
                .retractions
                .iter()
                .filter(|r| !before.contains(&r.retraction_id))
                .flat_map(|r| r.fields.iter().cloned())
                .collect();
            (!fields.is_empty()).then(|| (t.peer.clone(), fields))
        });
        let r = match asked {
            Some((peer, fields)) => Response::ok(format!(
                "asked {peer} to delete {} in thread {id}; `a2acp thread show {id}` tells when it confirms, signed",
                fields.join(", ")
            )),
            None => {
                let why = self
                    .last_told(id)
                    .unwrap_or_else(|| format!("no thread `{id}` (see `a2acp threads`)"));
                Response::err(why)
            }
        };
        Ok((r, e))
    }

    pub(super) fn cancel_thread(
        &mut self,
        now: Timestamp,
        id: &str,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        if let Some(g) = self.agent.groups().get(id) {
            if g.closed {
                return Ok((
                    Response::err(format!("group thread {id} is closed already")),
                    Vec::new(),
                ));
            }
            let e = self.handle(
                now,
                Input::Command(Command::CancelThread {
                    thread_id: id.to_string(),
                }),
            )?;
            let n = self.agent.groups().get(id).map_or(0, |g| g.legs.len());
            return Ok((
                Response::ok(format!(
                    "group thread {id} is closed; its {n} participant(s) are told"
                )),
                e,
            ));
        }
        if let Some(m) = self.group_elsewhere(id) {
            return Ok((Response::err(m), Vec::new()));
        }
        if let Err(r) = self.open_thread(id) {
            return Ok((r, Vec::new()));
        }
        let e = self.handle(
            now,
            Input::Command(Command::CancelThread {
                thread_id: id.to_string(),
            }),
        )?;
        let Some(t) = self.agent.thread(id) else {
            return Ok((Response::err(format!("no thread `{id}`")), e));
        };
        let r = if t.state.is_terminal() {
            Response::ok(format!("thread {id} is {}; {} is told", t.state, t.peer))
        } else if t.stage.execution().is_some_and(|x| x.cancelled) {
            Response::ok(format!(
                "thread {id}: cancelled; what was done is being undone, then it closes (DECLINED) on both sides"
            ))
        } else {
            let why = self
                .last_told(id)
                .unwrap_or_else(|| "the agent kept it open".into());
            Response::err(format!("thread {id} is still {}: {why}", t.state))
        };
        Ok((r, e))
    }

    pub(super) fn thread_detail(&self, id: &str) -> Result<Option<ThreadDetail>, HostError> {
        let Some(t) = self.agent.thread(id) else {
            return Ok(None);
        };
        let packets = t
            .history
            .iter()
            .map(|h| PacketLine {
                dir: if h.outgoing { "sent" } else { "received" }.into(),
                kind: h.kind.clone(),
                packet_id: h.packet_id.clone(),
                summary: a2acp_core::transcript::summarize_packet(&h.json),
            })
            .collect();
        let audit = self
            .store
            .audit_tail(Some(id), 50)?
            .into_iter()
            .map(|a| format!("{} {}", a.at, a.event))
            .collect();
        Ok(Some(ThreadDetail {
            summary: thread_summary(t),
            version: t.version.clone(),
            shared: t.shared.clone(),
            // What this side kept back: never_share fields it withheld and fields it
            // declined when asked (§7.5), as the peer's `peer_unavailable` shows them.
            withheld: t.withheld.union(&t.declined).cloned().collect(),
            theirs: t.theirs.clone(),
            usage: t.usage.clone(),
            peer_unavailable: t.peer_unavailable.iter().cloned().collect(),
            resolution: t.stage.resolution().map(|r| {
                format!(
                    "“{}” proposed by {}; answers so far: {}",
                    r.body.proposal.summary,
                    r.proposer,
                    r.answers
                        .iter()
                        .map(|(a, s)| format!(
                            "{} {}",
                            a.user(),
                            serde_json::to_value(s)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_string))
                                .unwrap_or_default()
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }),
            history: packets,
            audit,
            urgency: t.intent.urgency.clone(),
            escalated: t.escalated,
            halted: t.halted,
            prompts: self
                .prompts
                .values()
                .filter(|p| p.thread_id == t.id)
                .map(|p| (p.id, crate::prompt::summary(p)))
                .collect(),
            retractions: t.retractions.clone(),
            retracted: t.retracted.iter().cloned().collect(),
        }))
    }
}

pub(super) fn thread_summary(t: &a2acp_core::agent::Thread) -> ThreadSummary {
    ThreadSummary {
        id: t.id.clone(),
        peer: t.peer.to_string(),
        state: t.state.to_string(),
        category: t.intent.category.clone(),
        summary: t.intent.summary.clone(),
        initiator: t.initiator,
        round_trips: t.round_trips,
        waiting: serde_json::to_value(t.waiting)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        waiting_for: if t.waiting == a2acp_core::agent::Waiting::Peer {
            vec![t.peer.to_string()]
        } else {
            Vec::new()
        },
        last_activity: t.last_activity.to_string(),
        packets: t.history.len(),
        group: t.group.as_ref().map(|l| group_ref(&l.header)),
        split_into: t.forked_into.clone(),
        continued_as: t.continued_as.clone(),
    }
}
