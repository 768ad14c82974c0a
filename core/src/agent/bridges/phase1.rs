//! The A2A Phase-1 envelope on the agent (seed 001; `POST /a2a/messages`): a
//! `task_assignment` opens a thread with its sender (a peer `agent:p1-<uuid>@a2a.invalid`),
//! `status_update` and `task_completion` about that task are answered with where it
//! stands, a `ping` is echoed, a refused message gets the seed's `error` and HTTP status.
//! SPEC-NOTES "The A2A Phase-1 envelope (seed 001)".

use serde_json::{json, Value};

use crate::address::A2A_DOMAIN;
use crate::agent::bridges::phase1_task::{phase1_deadline, phase1_reply_to, Phase1Task};
use crate::agent::*;
use crate::bridge::a2a::task::{self as a2a_task, Inbound};
use crate::bridge::phase1::envelope::{
    self, EnvelopeError, ErrorCode, Message, Payload, Receiver, StatusUpdate, TaskCompletion,
    TaskStatus,
};

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

impl Agent {
    /// This agent's Phase-1 id: a UUID v4 made from its public key, the same across
    /// restarts.
    pub fn phase1_id(&self) -> uuid::Uuid {
        envelope::agent_id_of(&self.public_key().to_bytes())
    }

    /// One Phase-1 message (the body of `POST /a2a/messages`). Outputs follow as for any
    /// input (persist first).
    pub fn handle_phase1(&mut self, now: Timestamp, body: &[u8]) -> Phase1Reply {
        self.shared.now = self.shared.now.max(now);
        let me = self.phase1_id();
        let receiver = Receiver {
            agent_id: me,
            supported_tasks: PHASE1_TASK_TYPES.iter().map(|s| s.to_string()).collect(),
        };
        let reply = match envelope::parse(body, &receiver) {
            Ok(m) => self.phase1_message(&m),
            Err(e) => Err(e),
        };
        let mut id = [0u8; 16];
        self.shared.meta.rng.fill(&mut id);
        self.shared.dirty.meta = true;
        let stamp = self.shared.now.to_rfc3339();
        let out = match reply {
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
        };
        self.step_phase1();
        self.step_groups();
        self.flush();
        out
    }

    fn phase1_message(&mut self, m: &Message) -> Result<(uuid::Uuid, Payload), EnvelopeError> {
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
            Payload::Error(_) => {
                // Nothing to answer an error with but its acknowledgement.
                self.shared
                    .audit(None, AgentEvent::Note(format!("Phase-1 error from {peer}")));
                let Payload::Error(e) = &m.payload else {
                    return Err(refuse(ErrorCode::InternalError, "unreachable".into()));
                };
                Payload::Error(e.clone())
            }
            Payload::TaskAssignment(t) => {
                if self.phase1_thread(&peer, &t.task_id).is_none() {
                    let now = self.shared.now;
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
                    let id = self.a2a_new_task(&peer, &inbound).map_err(|e| {
                        refuse(
                            if e.code == a2a_task::code::UNSUPPORTED_OPERATION {
                                ErrorCode::CapabilityMismatch
                            } else {
                                ErrorCode::PayloadValidationFailed
                            },
                            e.message,
                        )
                    })?;
                    self.phase1_assigned(
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
                self.phase1_progress(&peer, &t.task_id)?
            }
            Payload::StatusUpdate(StatusUpdate {
                task_id, status, ..
            }) => {
                let id = self.phase1_thread(&peer, task_id).ok_or_else(|| {
                    refuse(
                        ErrorCode::TaskNotFound,
                        format!("no task `{task_id}` from this agent"),
                    )
                })?;
                if *status == TaskStatus::Cancelled {
                    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "CancelTask", "params": {"id": id}});
                    let _ = self.a2a_request(&peer, body.to_string().as_bytes());
                }
                self.phase1_progress(&peer, task_id)?
            }
            Payload::TaskCompletion(TaskCompletion { task_id, .. }) => {
                self.phase1_thread(&peer, task_id).ok_or_else(|| {
                    refuse(
                        ErrorCode::TaskNotFound,
                        format!("no task `{task_id}` from this agent"),
                    )
                })?;
                self.phase1_progress(&peer, task_id)?
            }
        };
        Ok((m.from, payload))
    }

    /// The thread of a Phase-1 task of `peer` (its `task_id` kept as the thread's
    /// context).
    fn phase1_thread(&self, peer: &Address, task_id: &str) -> Option<String> {
        self.threads
            .values()
            .find(|t| &t.peer == peer && t.a2a_context.as_deref() == Some(task_id))
            .map(|t| t.id.clone())
    }

    /// Where a Phase-1 task stands, as the seed's messages ([`Agent::phase1_report`]),
    /// after the sender's stand-in answered what the thread asks of it; what the sender
    /// is told is recorded (it is not sent to its endpoint again).
    fn phase1_progress(&mut self, peer: &Address, task_id: &str) -> Result<Payload, EnvelopeError> {
        let id = self.phase1_thread(peer, task_id);
        if let Some(id) = &id {
            self.phase1_stand_in(id);
        }
        let report = id.as_deref().and_then(|i| self.phase1_report(i));
        match (id, report) {
            (Some(id), Some(p)) => {
                self.phase1_told(&id, &p);
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
}
