//! The A2A Phase-1 envelope received ([`Tasks::handle`]; seed 001; `POST
//! /a2a/messages`): a `task_assignment` opens a thread with its sender (a peer
//! `agent:p1-<uuid>@a2a.invalid`), `status_update` and `task_completion` about that task
//! are answered with where it stands, a `ping` is echoed, a refused message gets the
//! seed's `error` and HTTP status. SPEC-NOTES "The A2A Phase-1 envelope (seed 001)".

use serde_json::{json, Value};

use crate::address::{Address, A2A_DOMAIN};
use crate::agent::{Agent, AgentEvent};
use crate::bridge::a2a::server::Server;
use crate::bridge::a2a::task::{self as a2a_task, Inbound, CONTEXT_KEY};
use crate::bridge::phase1::envelope::{
    self, EnvelopeError, ErrorCode, Message, Payload, Receiver, StatusUpdate, TaskCompletion,
    TaskStatus,
};
use crate::bridge::phase1::tasks::{
    phase1_deadline, phase1_reply_to, report, stand_in, told, Phase1Task, Tasks,
};
use crate::time::Timestamp;

/// The task types this agent takes (`supported_tasks`): the negotiations it knows.
pub const PHASE1_TASK_TYPES: &[&str] = &["scheduling", "general"];

/// What the listener answers one Phase-1 message: the HTTP status and the message body.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase1Reply {
    /// 200, or the status of the error's code (seed 001 "Response codes").
    pub status: u16,
    /// The answering message (a `status_update`, `task_completion`, `ping` or `error`).
    pub body: Value,
}

impl Tasks {
    /// This agent's Phase-1 id: a UUID v4 made from its public key, the same across
    /// restarts.
    pub fn id(agent: &Agent) -> uuid::Uuid {
        envelope::agent_id_of(&agent.public_key().to_bytes())
    }

    /// One Phase-1 message (the body of `POST /a2a/messages`). Outputs follow as for any
    /// input (persist first).
    pub fn handle(agent: &mut Agent, now: Timestamp, body: &[u8]) -> Phase1Reply {
        agent.bridged_input(now, |a| message_in(a, body))
    }
}

fn message_in(agent: &mut Agent, body: &[u8]) -> Phase1Reply {
    let me = Tasks::id(agent);
    let receiver = Receiver {
        agent_id: me,
        supported_tasks: PHASE1_TASK_TYPES.iter().map(|s| s.to_string()).collect(),
    };
    let reply = match envelope::parse(body, &receiver) {
        Ok(m) => message(agent, &m),
        Err(e) => Err(e),
    };
    let id = agent.draw_bytes();
    let stamp = agent.now().to_rfc3339();
    match reply {
        Ok((to, payload)) => Phase1Reply {
            status: 200,
            body: Message {
                message_id: envelope::uuid_v4(id),
                timestamp: stamp,
                from: me,
                to,
                signature: None,
                payload,
            }
            .to_json(),
        },
        Err(e) => Phase1Reply {
            status: e.code.http_status(),
            body: e.reply(me, envelope::uuid_v4(id), &stamp).to_json(),
        },
    }
}

fn message(agent: &mut Agent, m: &Message) -> Result<(uuid::Uuid, Payload), EnvelopeError> {
    let refuse = |code, message: String| EnvelopeError {
        code,
        message,
        original_message_id: Some(m.message_id.hyphenated().to_string()),
        from: Some(m.from),
        details: None,
    };
    let peer = Address::new(&format!("p1-{}", m.from.hyphenated()), A2A_DOMAIN)
        .map_err(|e| refuse(ErrorCode::InvalidMessageFormat, e.to_string()))?;
    let payload = match &m.payload {
        Payload::Ping(_) => {
            let echo = m
                .ping_echo(m.message_id, &m.timestamp)
                .map(|e| e.payload)
                .ok_or_else(|| refuse(ErrorCode::InternalError, "no echo".into()))?;
            return Ok((m.from, echo));
        }
        Payload::Error(e) => {
            // Nothing to answer an error with but its acknowledgement.
            agent.audit_event(None, AgentEvent::Note(format!("Phase-1 error from {peer}")));
            Payload::Error(e.clone())
        }
        Payload::TaskAssignment(t) => {
            if thread_of(agent, &peer, &t.task_id).is_none() {
                let now = agent.now();
                let deadline = phase1_deadline(now, t.deadline.as_deref())
                    .map_err(|e| refuse(ErrorCode::PayloadValidationFailed, e))?;
                let reply_to = phase1_reply_to(t.metadata.as_ref())
                    .map_err(|e| refuse(ErrorCode::PayloadValidationFailed, e))?;
                let mut data = t.payload.clone();
                data.insert("category".into(), Value::String(t.task_type.clone()));
                if !t.description.is_empty() {
                    data.entry("description")
                        .or_insert_with(|| Value::String(t.description.clone()));
                }
                let inbound = Inbound {
                    message_id: m.message_id.hyphenated().to_string(),
                    context_id: Some(t.task_id.clone()),
                    task_id: None,
                    text: t.title.clone(),
                    data,
                };
                let id = Server::new_task(agent, &peer, &inbound).map_err(|e| {
                    refuse(
                        if e.code == a2a_task::code::UNSUPPORTED_OPERATION {
                            ErrorCode::CapabilityMismatch
                        } else {
                            ErrorCode::PayloadValidationFailed
                        },
                        e.message,
                    )
                })?;
                Tasks::assigned(
                    agent,
                    &id,
                    Phase1Task {
                        sender: m.from.hyphenated().to_string(),
                        assigned_at: now,
                        deadline,
                        not_supplied: Default::default(),
                        timed_out: false,
                        reply_to,
                        reported: None,
                    },
                );
            }
            // A repeated assignment (a retry) is acknowledged again, opening nothing.
            progress(agent, &peer, &t.task_id)?
        }
        Payload::StatusUpdate(StatusUpdate {
            task_id, status, ..
        }) => {
            let id = thread_of(agent, &peer, task_id).ok_or_else(|| {
                refuse(
                    ErrorCode::TaskNotFound,
                    format!("no task `{task_id}` from this agent"),
                )
            })?;
            if *status == TaskStatus::Cancelled {
                let body = json!({"jsonrpc": "2.0", "id": 0, "method": "CancelTask", "params": {"id": id}});
                let _ = Server::request(agent, &peer, body.to_string().as_bytes());
            }
            progress(agent, &peer, task_id)?
        }
        Payload::TaskCompletion(TaskCompletion { task_id, .. }) => {
            thread_of(agent, &peer, task_id).ok_or_else(|| {
                refuse(
                    ErrorCode::TaskNotFound,
                    format!("no task `{task_id}` from this agent"),
                )
            })?;
            progress(agent, &peer, task_id)?
        }
    };
    Ok((m.from, payload))
}

/// The thread of a Phase-1 task of `peer` (its `task_id` kept as the thread's A2A
/// context).
fn thread_of(agent: &Agent, peer: &Address, task_id: &str) -> Option<String> {
    agent
        .thread_views()
        .find(|t| {
            t.peer() == peer && t.bridge_state(CONTEXT_KEY).and_then(Value::as_str) == Some(task_id)
        })
        .map(|t| t.id().to_string())
}

/// Where a Phase-1 task stands, as the seed's messages ([`Tasks::report`]), after the
/// sender's stand-in answered what the thread asks of it; what the sender is told is
/// recorded (it is not sent to its endpoint again).
fn progress(agent: &mut Agent, peer: &Address, task_id: &str) -> Result<Payload, EnvelopeError> {
    let id = thread_of(agent, peer, task_id);
    if let Some(id) = &id {
        stand_in(agent, id);
    }
    let r = id.as_deref().and_then(|i| report(agent, i));
    match (id, r) {
        (Some(id), Some(p)) => {
            told(agent, &id, &p);
            Ok(p)
        }
        _ => Err(EnvelopeError {
            code: ErrorCode::InternalError,
            message: "the task was not kept".into(),
            original_message_id: None,
            from: None,
            details: None,
        }),
    }
}
