//! A Phase-1 task's lifecycle on the agent (seed 001 "Task lifecycle": assign → update →
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
//! Where a task stands reads as the seed's messages ([`Agent::phase1_report`]): a
//! `status_update` while it runs, a `task_completion` once it ended — `completed` with the
//! agreed proposal as result, or `failed` with the reason (no proposal the user did not
//! agree to, nothing they did not consent to share). SPEC-NOTES "The A2A Phase-1
//! envelope": the task lifecycle.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::agent::*;
use crate::bridge::a2a::task::{self as a2a_task, Inbound};
use crate::bridge::phase1::envelope::{
    Completion, Payload, StatusUpdate, TaskCompletion, TaskStatus,
};

/// How long a Phase-1 task may run when its assignment names no deadline.
pub const PHASE1_DEFAULT_BOUND: Duration = Duration::from_secs(24 * 3600);
/// The longest a Phase-1 task may run, whatever deadline its assignment names.
pub const PHASE1_MAX_BOUND: Duration = Duration::from_secs(7 * 24 * 3600);
/// Stand-in answers one input gives one task at most (each answers what the thread asks
/// of the sender; a negotiation asks a handful of times).
const STAND_IN_ROUNDS: usize = 8;

/// What a thread keeps of the Phase-1 task it carries out ([`Thread::phase1`]).
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
fn progress(t: &Thread) -> f64 {
    match t.state {
        ThreadState::Initiated => 0.1,
        ThreadState::Negotiating | ThreadState::Stalled => 0.3,
        ThreadState::Proposed => 0.6,
        ThreadState::Confirmed | ThreadState::Executing | ThreadState::Rollback => 0.8,
        _ => 1.0,
    }
}

/// What a running task waits for, in words (nothing of what was shared).
fn running_text(t: &Thread) -> &'static str {
    match t.state {
        ThreadState::Proposed => "waiting for the agent's user to confirm the proposal",
        ThreadState::Confirmed | ThreadState::Executing => "carrying out the agreed proposal",
        ThreadState::Rollback => "undoing what was done",
        _ if t.consent.is_some() => "waiting for the agent's user to consent to sharing",
        _ if t.escalated => "handed to the agent's user",
        _ => "negotiating",
    }
}

impl Agent {
    /// Marks the thread `id` as carrying out a Phase-1 task, then stands in for its
    /// sender where the thread already asks something of it.
    pub(in crate::agent) fn phase1_assigned(&mut self, id: &str, task: Phase1Task) {
        if let Some(t) = self.threads.get_mut(id) {
            t.phase1 = Some(task);
            self.shared.dirty.threads.insert(id.to_string());
        }
        self.phase1_stand_in(id);
    }

    /// One step of every Phase-1 task whose thread changed with this input: the stand-in
    /// answers what the thread asks of the sender. Called once per input, before its
    /// outputs are released.
    pub(in crate::agent) fn step_phase1(&mut self) {
        let ids: Vec<String> = self
            .shared
            .dirty
            .threads
            .iter()
            .filter(|id| self.threads.get(*id).is_some_and(|t| t.phase1.is_some()))
            .cloned()
            .collect();
        for id in ids {
            self.phase1_stand_in(&id);
            self.phase1_push(&id);
        }
    }

    /// Records that the sender was told `payload` about the task of thread `id`.
    pub(in crate::agent) fn phase1_told(&mut self, id: &str, payload: &Payload) {
        let told = told_key(payload);
        if let Some(p) = self.threads.get_mut(id).and_then(|t| t.phase1.as_mut()) {
            if p.reported != told {
                p.reported = told;
                self.shared.dirty.threads.insert(id.to_string());
            }
        }
    }

    /// Sends the sender where its task stands, when it has an endpoint and the task moved
    /// since it was last told.
    fn phase1_push(&mut self, id: &str) {
        let Some(payload) = self.phase1_report(id) else {
            return;
        };
        let Some((endpoint, sender, reported)) = self.threads.get(id).and_then(|t| {
            let p = t.phase1.as_ref()?;
            Some((p.reply_to.clone()?, p.sender.clone(), p.reported.clone()))
        }) else {
            return;
        };
        if reported == told_key(&payload) {
            return;
        }
        let Ok(to) = uuid::Uuid::parse_str(&sender) else {
            return;
        };
        let mut mid = [0u8; 16];
        self.shared.meta.rng.fill(&mut mid);
        self.shared.dirty.meta = true;
        let message = crate::bridge::phase1::envelope::Message {
            message_id: crate::bridge::phase1::envelope::uuid_v4(mid),
            timestamp: self.shared.now.to_rfc3339(),
            from: self.phase1_id(),
            to,
            signature: None,
            payload: payload.clone(),
        };
        self.phase1_told(id, &payload);
        self.shared.buf.send.push(Output::Phase1(Phase1Push {
            thread_id: id.to_string(),
            endpoint,
            body: message.to_json().to_string(),
        }));
    }

    /// Answers on the sender's behalf what the thread asks of it: the open fields
    /// declined, a proposal awaiting it confirmed (its part done).
    pub(in crate::agent) fn phase1_stand_in(&mut self, id: &str) {
        for _ in 0..STAND_IN_ROUNDS {
            let Some(t) = self.threads.get(id) else {
                return;
            };
            if t.phase1.is_none() || t.state.is_terminal() || t.halted {
                return;
            }
            let open = a2a_task::open_needs(t);
            if open.is_empty() && !a2a_task::awaiting_decision(t) {
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
            let Ok(bodies) = a2a_task::reply_bodies(t, &inbound) else {
                return;
            };
            let peer = t.peer.clone();
            let declined = !a2a_task::awaiting_decision(t);
            if let Some(p) = self.threads.get_mut(id).and_then(|t| t.phase1.as_mut()) {
                if declined {
                    p.not_supplied.extend(open.iter().map(|n| n.field.clone()));
                }
            }
            self.shared.dirty.threads.insert(id.to_string());
            for b in bodies {
                self.a2a_packet(&peer, id, b);
            }
        }
    }

    /// The earliest deadline of a running Phase-1 task.
    pub(in crate::agent) fn phase1_wake(&self) -> Option<Timestamp> {
        self.threads
            .values()
            .filter_map(|t| {
                let p = t.phase1.as_ref()?;
                (!p.timed_out && !t.state.is_terminal()).then_some(p.deadline)
            })
            .min()
    }

    /// Calls off every running Phase-1 task whose deadline passed, as its sender's cancel
    /// would (the local user's open prompts about it close; what was done is undone).
    pub(in crate::agent) fn phase1_timeouts(&mut self) {
        let now = self.shared.now;
        let due: Vec<(String, Address)> = self
            .threads
            .values()
            .filter(|t| {
                t.phase1
                    .as_ref()
                    .is_some_and(|p| !p.timed_out && p.deadline <= now)
                    && !t.state.is_terminal()
            })
            .map(|t| (t.id.clone(), t.peer.clone()))
            .collect();
        for (id, peer) in due {
            let rid = self.threads.get_mut(&id).and_then(|t| {
                if let Some(p) = t.phase1.as_mut() {
                    p.timed_out = true;
                }
                t.stage.resolution().map(|r| r.packet_id.clone())
            });
            self.shared.dirty.threads.insert(id.clone());
            self.shared.audit(
                Some(id.as_str()),
                AgentEvent::Note("Phase-1 task past its deadline: called off".into()),
            );
            self.a2a_call_off(
                &peer,
                &id,
                rid,
                "The Phase-1 task's deadline passed before it was done.",
            );
        }
    }

    /// Where the Phase-1 task of thread `id` stands, as the seed's payload: a
    /// `task_completion` once it ended (or timed out), else a `status_update`. `None`
    /// when the thread carries no Phase-1 task.
    pub fn phase1_report(&self, id: &str) -> Option<Payload> {
        let t = self.threads.get(id)?;
        let p = t.phase1.as_ref()?;
        let task_id = a2a_task::context_id(t).to_string();
        let state = a2a_task::task_state(t);
        let ended_at = t.ended_at.unwrap_or(self.shared.now);
        let elapsed = ended_at.since(p.assigned_at).as_millis();
        let mut result = Map::new();
        result.insert("state".into(), Value::String(t.state.as_str().into()));
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
        } else if t.halted {
            failed(&mut result, "halted", "The task was halted.".into());
            Completion::Failed
        } else {
            match t.state {
                ThreadState::Completed => {
                    let proposal = t.stage.resolution().map(|r| &r.body.proposal);
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
                    let status = if t.history.iter().any(|h| h.outgoing) {
                        TaskStatus::InProgress
                    } else {
                        TaskStatus::Assigned
                    };
                    return Some(Payload::StatusUpdate(StatusUpdate {
                        task_id,
                        status,
                        progress: Some(progress(t)),
                        message: Some(running_text(t).into()),
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
