//! A Phase-1 task's lifecycle ([`Tasks`]; seed 001 "Task lifecycle": assign → update →
//! complete). A seed-001 sender can carry nothing but the task's parameters up front
//! (`task_assignment.payload`), and read nothing but `status_update` and
//! `task_completion`: it cannot answer a field the agent asks of it, nor confirm a
//! proposal. So the agent stands in for it, deterministically, in the thread:
//!
//! - a field the negotiation asks of the sender that its assignment did not carry is
//!   declined on its behalf (§7.5: "declined" is a complete answer, the negotiation works
//!   with what it has), and the fields so declined are named in the completion;
//! - a proposal is confirmed on its behalf (assigning the task delegated the outcome to
//!   this agent: what its user agrees to is the result), with its part reported done;
//! - the local user's prompts (consent to share, the proposal) stay the local user's:
//!   nothing of the sender answers them;
//! - every task ends within a bound (the assignment's `deadline`, else
//!   [`PHASE1_DEFAULT_BOUND`], at most [`PHASE1_MAX_BOUND`]): past it the task is called
//!   off (as the sender's cancel) and reported failed with the seed's `TIMEOUT`.
//!
//! Where a task stands reads as the seed's messages ([`Tasks::report`]): a
//! `status_update` while it runs, a `task_completion` once it ended — `completed` with the
//! agreed proposal as result, or `failed` with the reason (no proposal the user did not
//! agree to, nothing they did not consent to share). SPEC-NOTES "The A2A Phase-1
//! envelope": the task lifecycle.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::agent::{Agent, AgentEvent, BridgeMessage, BridgeStep, ThreadView};
use crate::agent::{Bridge, ThreadState};
use crate::bridge::a2a::server::Server;
use crate::bridge::a2a::task::{self as a2a_task, Inbound};
use crate::bridge::phase1::envelope::{
    Completion, Payload, StatusUpdate, TaskCompletion, TaskStatus,
};
use crate::time::Timestamp;

/// The bridge's name ([`Bridge::name`]), and the key of a thread's [`Phase1Task`] in its
/// record.
pub const NAME: &str = "phase1";

/// How long a Phase-1 task may run when its assignment names no deadline.
pub const PHASE1_DEFAULT_BOUND: Duration = Duration::from_secs(24 * 3600);
/// The longest a Phase-1 task may run, whatever deadline its assignment names.
pub const PHASE1_MAX_BOUND: Duration = Duration::from_secs(7 * 24 * 3600);
/// Stand-in answers one input gives one task at most (each answers what the thread asks
/// of the sender; a negotiation asks a handful of times).
const STAND_IN_ROUNDS: usize = 8;

/// What a thread keeps of the Phase-1 task it carries out (its bridge state, under
/// [`NAME`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phase1Task {
    /// The sender's Phase-1 id (UUID v4, hyphenated).
    pub sender: String,
    /// When the task was assigned (this agent's clock).
    pub assigned_at: Timestamp,
    /// When it ends at the latest: the assignment's `deadline`, bounded.
    pub deadline: Timestamp,
    /// Fields the negotiation asked of the sender that its assignment did not carry,
    /// declined on its behalf.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub not_supplied: BTreeSet<String>,
    /// The deadline passed before the task ended: it was called off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// The sender's `/a2a/messages` endpoint, when its assignment named one
    /// (`metadata.reply_to`): where the task's updates and completion are sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// What the sender was last told of the task (the payload, as JSON): by an answer to
    /// its own message or sent to its endpoint. Only a change is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<String>,
}

/// The endpoint a task's assignment names for its updates (`metadata.reply_to`, the
/// sender's base URL or its `/a2a/messages` endpoint), if any.
pub fn phase1_reply_to(metadata: Option<&Map<String, Value>>) -> Result<Option<String>, String> {
    match metadata.and_then(|m| m.get("reply_to")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(url)) => crate::bridge::phase1::sender::endpoint(url)
            .map(Some)
            .map_err(|e| format!("payload.metadata.reply_to: {e}")),
        Some(_) => Err("payload.metadata.reply_to: a URL (a string)".into()),
    }
}

/// The deadline of a task assigned at `now` with the assignment's `deadline`: that time,
/// at most [`PHASE1_MAX_BOUND`] away; [`PHASE1_DEFAULT_BOUND`] away without one. A
/// deadline already passed is refused (the message names it).
pub fn phase1_deadline(now: Timestamp, deadline: Option<&str>) -> Result<Timestamp, String> {
    let max = now.add(PHASE1_MAX_BOUND);
    let Some(d) = deadline else {
        return Ok(now.add(PHASE1_DEFAULT_BOUND));
    };
    let at = Timestamp::parse_rfc3339(d)
        .ok_or_else(|| format!("payload.deadline: `{d}` is not a date-time this agent reads"))?;
    if at <= now {
        return Err(format!(
            "payload.deadline: {d} has passed (it is {now} here)"
        ));
    }
    Ok(at.min(max))
}

/// Rough progress of a running task, by where its thread stands.
fn progress(t: &ThreadView<'_>) -> f64 {
    match t.state() {
        ThreadState::Initiated => 0.1,
        ThreadState::Negotiating | ThreadState::Stalled => 0.3,
        ThreadState::Proposed => 0.6,
        ThreadState::Confirmed | ThreadState::Executing | ThreadState::Rollback => 0.8,
        _ => 1.0,
    }
}

/// What a running task waits for, in words (nothing of what was shared).
fn running_text(t: &ThreadView<'_>) -> &'static str {
    match t.state() {
        ThreadState::Proposed => "waiting for the agent's user to confirm the proposal",
        ThreadState::Confirmed | ThreadState::Executing => "carrying out the agreed proposal",
        ThreadState::Rollback => "undoing what was done",
        _ if t.consent_open() => "waiting for the agent's user to consent to sharing",
        _ if t.escalated() => "handed to the agent's user",
        _ => "negotiating",
    }
}

/// The Phase-1 bridge's task lifecycle, registered with the agent ([`Agent::add_bridge`]):
/// after every input it stands in for the senders of the threads that changed and tells
/// them where their tasks stand; past a task's deadline it calls the task off. It holds
/// nothing; each thread's [`Phase1Task`] is its state, kept in the thread's record.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tasks;

/// The Phase-1 task thread `id` carries out, if it carries one.
pub fn task_of(agent: &Agent, id: &str) -> Option<Phase1Task> {
    let v = agent.thread_view(id)?.bridge_state(NAME)?.clone();
    serde_json::from_value(v).ok()
}

fn store(agent: &mut Agent, id: &str, p: &Phase1Task) {
    if let Ok(v) = serde_json::to_value(p) {
        agent.set_bridge_state(id, NAME, Some(v));
    }
}

impl Tasks {
    /// Marks the thread `id` as carrying out a Phase-1 task, then stands in for its
    /// sender where the thread already asks something of it.
    pub fn assigned(agent: &mut Agent, id: &str, task: Phase1Task) {
        store(agent, id, &task);
        stand_in(agent, id);
    }

    /// Where the Phase-1 task of thread `id` stands, as the seed's payload: a
    /// `task_completion` once it ended (or timed out), else a `status_update`. `None`
    /// when the thread carries no Phase-1 task.
    pub fn report(agent: &Agent, id: &str) -> Option<Payload> {
        report(agent, id)
    }
}

impl Bridge for Tasks {
    fn name(&self) -> &'static str {
        NAME
    }

    /// One step of every Phase-1 task whose thread changed with this input: the stand-in
    /// answers what the thread asks of the sender, and the sender is told where its task
    /// stands if it moved.
    fn step(&self, agent: &mut Agent, step: &BridgeStep) {
        let ids: Vec<String> = step
            .changed
            .iter()
            .filter(|id| {
                agent
                    .thread_view(id)
                    .is_some_and(|t| t.bridge_state(NAME).is_some())
            })
            .cloned()
            .collect();
        for id in ids {
            stand_in(agent, &id);
            push(agent, &id);
        }
    }

    /// The earliest deadline of a running Phase-1 task.
    fn wake(&self, agent: &Agent) -> Option<Timestamp> {
        agent
            .thread_views()
            .filter_map(|t| {
                let p = task_of(agent, t.id())?;
                (!p.timed_out && !t.state().is_terminal()).then_some(p.deadline)
            })
            .min()
    }

    /// Calls off every running Phase-1 task whose deadline passed, as its sender's cancel
    /// would (the local user's open prompts about it close; what was done is undone).
    fn timeout(&self, agent: &mut Agent) {
        let now = agent.now();
        let due: Vec<(String, crate::address::Address)> = agent
            .thread_views()
            .filter(|t| {
                task_of(agent, t.id()).is_some_and(|p| !p.timed_out && p.deadline <= now)
                    && !t.state().is_terminal()
            })
            .map(|t| (t.id().to_string(), t.peer().clone()))
            .collect();
        for (id, peer) in due {
            if let Some(mut p) = task_of(agent, &id) {
                p.timed_out = true;
                store(agent, &id, &p);
            }
            let rid = agent
                .thread_view(&id)
                .and_then(|t| t.resolution())
                .map(|r| r.packet_id.to_string());
            agent.audit_event(
                Some(id.as_str()),
                AgentEvent::Note("Phase-1 task past its deadline: called off".into()),
            );
            Server::call_off(
                agent,
                &peer,
                &id,
                rid,
                "The Phase-1 task's deadline passed before it was done.",
            );
        }
    }
}

/// Records that the sender was told `payload` about the task of thread `id`.
pub(super) fn told(agent: &mut Agent, id: &str, payload: &Payload) {
    let key = told_key(payload);
    if let Some(mut p) = task_of(agent, id) {
        if p.reported != key {
            p.reported = key;
            store(agent, id, &p);
        }
    }
}

/// Sends the sender where its task stands, when it has an endpoint and the task moved
/// since it was last told.
fn push(agent: &mut Agent, id: &str) {
    let Some(payload) = report(agent, id) else {
        return;
    };
    let Some(p) = task_of(agent, id) else {
        return;
    };
    let Some(endpoint) = p.reply_to.clone() else {
        return;
    };
    if p.reported == told_key(&payload) {
        return;
    }
    let Ok(to) = uuid::Uuid::parse_str(&p.sender) else {
        return;
    };
    let mid = agent.draw_bytes();
    let message = crate::bridge::phase1::envelope::Message {
        message_id: crate::bridge::phase1::envelope::uuid_v4(mid),
        timestamp: agent.now().to_rfc3339(),
        from: Tasks::id(agent),
        to,
        signature: None,
        payload: payload.clone(),
    };
    told(agent, id, &payload);
    agent.send_bridge_message(BridgeMessage {
        bridge: NAME.into(),
        thread_id: id.to_string(),
        endpoint,
        body: message.to_json().to_string(),
    });
}

/// Answers on the sender's behalf what the thread asks of it: the open fields declined,
/// a proposal awaiting it confirmed (its part done).
pub(super) fn stand_in(agent: &mut Agent, id: &str) {
    for _ in 0..STAND_IN_ROUNDS {
        let Some(t) = agent.thread_view(id) else {
            return;
        };
        if t.bridge_state(NAME).is_none() || t.state().is_terminal() || t.halted() {
            return;
        }
        let open = a2a_task::open_needs(&t);
        if open.is_empty() && !a2a_task::awaiting_decision(&t) {
            return;
        }
        let mut data = Map::new();
        data.insert("decision".into(), Value::String("confirm".into()));
        let inbound = Inbound {
            message_id: String::new(),
            context_id: None,
            task_id: None,
            text: String::new(),
            data,
        };
        let Ok(bodies) = a2a_task::reply_bodies(&t, &inbound) else {
            return;
        };
        let peer = t.peer().clone();
        let declined = !a2a_task::awaiting_decision(&t);
        if let Some(mut p) = task_of(agent, id) {
            if declined {
                p.not_supplied.extend(open.iter().map(|n| n.field.clone()));
                store(agent, id, &p);
            }
        }
        for b in bodies {
            agent.bridged_said(&peer, id, b);
        }
    }
}

/// Where the Phase-1 task of thread `id` stands ([`Tasks::report`]).
pub(super) fn report(agent: &Agent, id: &str) -> Option<Payload> {
    let t = agent.thread_view(id)?;
    let p = task_of(agent, id)?;
    let task_id = a2a_task::context_id(&t).to_string();
    let state = a2a_task::task_state(&t);
    let ended_at = t.ended_at().unwrap_or(agent.now());
    let elapsed = ended_at.since(p.assigned_at).as_millis();
    let mut result = Map::new();
    result.insert("state".into(), Value::String(t.state().as_str().into()));
    if !p.not_supplied.is_empty() {
        // What the agent asked for and the assignment did not carry: declined on the
        // sender's behalf; a later assignment may carry them in its payload.
        result.insert("not_supplied".into(), json!(p.not_supplied));
    }
    let failed = |result: &mut Map<String, Value>, reason: &str, summary: String| {
        result.insert("reason".into(), Value::String(reason.into()));
        result.insert("summary".into(), Value::String(summary));
    };
    let status = if p.timed_out {
        failed(
            &mut result,
            "timeout",
            format!(
                "The task's deadline ({}) passed before it was done.",
                p.deadline
            ),
        );
        result.insert("error_code".into(), Value::String("TIMEOUT".into()));
        Completion::Failed
    } else if t.halted() {
        failed(&mut result, "halted", "The task was halted.".into());
        Completion::Failed
    } else {
        match t.state() {
            ThreadState::Completed => {
                let proposal = t.resolution().map(|r| &r.body.proposal);
                let summary = proposal.map(|p| p.summary.clone()).unwrap_or_default();
                result.insert("summary".into(), Value::String(summary));
                result.insert("proposal".into(), json!(proposal));
                Completion::Completed
            }
            ThreadState::Declined if state == a2a_task::TaskState::Canceled => {
                return Some(Payload::StatusUpdate(StatusUpdate {
                    task_id,
                    status: TaskStatus::Cancelled,
                    progress: None,
                    message: Some("cancelled by its sender".into()),
                    metadata: Some(a2a_state(state)),
                }));
            }
            ThreadState::Declined => {
                failed(
                    &mut result,
                    "declined",
                    "Declined by the agent's user.".into(),
                );
                Completion::Failed
            }
            ThreadState::Expired => {
                failed(
                    &mut result,
                    "expired",
                    "The proposal expired before the agent's user confirmed it.".into(),
                );
                Completion::Failed
            }
            ThreadState::Failed => {
                failed(
                    &mut result,
                    "action_failed",
                    "Carrying out the agreed proposal failed.".into(),
                );
                Completion::Failed
            }
            _ => {
                let status = if t.packets().any(|h| h.outgoing) {
                    TaskStatus::InProgress
                } else {
                    TaskStatus::Assigned
                };
                return Some(Payload::StatusUpdate(StatusUpdate {
                    task_id,
                    status,
                    progress: Some(progress(&t)),
                    message: Some(running_text(&t).into()),
                    metadata: Some(a2a_state(state)),
                }));
            }
        }
    };
    Some(Payload::TaskCompletion(TaskCompletion {
        task_id,
        status,
        result,
        execution_time_ms: Some(serde_json::Number::from(elapsed as u64)),
        metadata: None,
    }))
}

/// What a report says, as it is kept in [`Phase1Task::reported`].
fn told_key(p: &Payload) -> Option<String> {
    let inner = match p {
        Payload::StatusUpdate(u) => serde_json::to_string(u),
        Payload::TaskCompletion(c) => serde_json::to_string(c),
        _ => return None,
    };
    inner.ok().map(|j| format!("{}:{j}", p.type_name()))
}

fn a2a_state(state: a2a_task::TaskState) -> Map<String, Value> {
    [(
        "a2a_state".to_string(),
        Value::String(state.as_str().to_string()),
    )]
    .into_iter()
    .collect()
}
