//! The A2A v1.0 JSON-RPC binding, served ([`Server`]; seed 003, §18): a client's request
//! in, the JSON-RPC response out, and its messages through the agent's thread machine as
//! what a bridged peer said ([`Agent::bridged_said`], [`Agent::bridged_open`]; the peer
//! `agent:<client>@a2a.invalid`). The mapping is [`task`]'s; the agent is reached through
//! its bridge interface alone. SPEC-NOTES "The A2A v1.0 bridge (seed 003, §18)".

use serde_json::{json, Map, Value};

use crate::address::Address;
use crate::agent::{Agent, BridgedOpening, BridgedRefusal, SharedCaps, ThreadView};
use crate::bridge::a2a::task::{self, code, Inbound, RpcError, TaskState, CONTEXT_KEY, SENT_KEY};
use crate::packet::{Body, ResolutionResponseBody, ResolutionStatus};
use crate::time::Timestamp;

pub use crate::bridge::a2a::task::A2A_MAX_REQUEST;

/// What the agent answers one JSON-RPC request of an A2A client.
#[derive(Debug, Clone, PartialEq)]
pub struct A2aReply {
    /// The JSON-RPC response object (`result` or `error`), or for a streaming method that
    /// was accepted, its first event's response (the task).
    pub response: Value,
    /// For `SendStreamingMessage` and `SubscribeToTask` accepted: the task to stream, and
    /// the state and artifact the first event showed. The listener keeps the stream open
    /// and sends [`task::update_events`] after each [`crate::agent::Bridged::Packet`] of the thread, until
    /// the task is terminal or interrupted; `None` when the first event already was.
    pub stream: Option<A2aStream>,
    /// For a blocking `SendMessage` (no `configuration.returnImmediately`) whose task is
    /// neither terminal nor interrupted yet: the listener holds the answer and gives
    /// [`Server::waited`]'s instead, once the task is, or at its deadline
    /// (A2A v1.0 §3.2.2; SPEC-NOTES "The A2A v1.0 bridge").
    pub wait: Option<A2aWait>,
}

/// A blocking `SendMessage` the listener holds.
#[derive(Debug, Clone, PartialEq)]
pub struct A2aWait {
    /// The task (thread id).
    pub task_id: String,
    /// The JSON-RPC id to answer with.
    pub rpc_id: Value,
}

/// A stream the listener keeps open after the first event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct A2aStream {
    /// The task (thread id).
    pub task_id: String,
    /// The state the subscriber saw last.
    pub state: TaskState,
    /// The artifact the subscriber saw last.
    pub artifact: Option<String>,
    /// Whether the stream stays open through an interruption (input required) until the
    /// task is terminal: `SubscribeToTask` (§3.1.6). A `SendStreamingMessage` stream
    /// closes at an interruption too (the client answers with a new message).
    pub until_terminal: bool,
}

impl A2aStream {
    /// Whether the stream ends once its task is in `state`.
    pub fn ends_at(&self, state: TaskState) -> bool {
        state.is_terminal() || (!self.until_terminal && state.is_interrupted())
    }
}

/// The name the listener gives every client that came without a token (a loopback
/// one, `agent:a2a-local@a2a.invalid`). Such clients cannot be told apart by who they
/// are, so each context is its own peer ([`anonymous_peer`]), under caps they share.
pub const ANONYMOUS_CLIENT: &str = "a2a-local";
/// How many times the per-peer caps (open threads, open prompts, ended threads kept)
/// all anonymous clients together may use.
pub const ANONYMOUS_SHARE: usize = 8;

fn is_anonymous(client: &Address) -> bool {
    client.is_a2a() && client.user() == ANONYMOUS_CLIENT
}

/// Whether `peer` is one of the per-context peers of the anonymous clients.
fn is_anonymous_peer(peer: &Address) -> bool {
    peer.is_a2a()
        && peer
            .user()
            .strip_prefix(ANONYMOUS_CLIENT)
            .is_some_and(|r| r.starts_with('-'))
}

/// The peer of the threads of `client` in `context`: the client itself, or for an
/// anonymous client `agent:a2a-local-<12 hex digits of SHA-256(contextId)>@a2a.invalid`.
pub fn anonymous_peer(client: &Address, context: &str) -> Address {
    use sha2::{Digest, Sha256};
    if !is_anonymous(client) {
        return client.clone();
    }
    let h = Sha256::digest(context.as_bytes());
    let hex: String = h.iter().take(6).map(|b| format!("{b:02x}")).collect();
    Address::new(
        &format!("{ANONYMOUS_CLIENT}-{hex}"),
        crate::address::A2A_DOMAIN,
    )
    .unwrap_or_else(|_| client.clone())
}

/// Whether `client` may see and act on a thread whose peer is `peer`: its own, and for
/// an anonymous client every anonymous context's (loopback clients are not told apart
/// by who they are; any of them may follow any such task).
fn a2a_owns(client: &Address, peer: &Address) -> bool {
    peer == client || (is_anonymous(client) && is_anonymous_peer(peer))
}

/// A refusal for now (a cap on what waits): the temporary code, and the retry delay.
fn temporary(why: String) -> RpcError {
    RpcError::new(
        code::TEMPORARILY_REFUSED,
        format!(
            "temporarily refused, try again later (in {} s or once this agent's user answered): {why}",
            task::RETRY_AFTER_SECS
        ),
    )
}

fn rpc_error(id: &Value, e: RpcError) -> Value {
    task::rpc_error_response(id, e.code, &e.message)
}

fn rpc_result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// Methods of the binding (A2A v1.0 JSON-RPC method names).
const STREAMING: &[&str] = &["SendStreamingMessage", "SubscribeToTask"];

fn int_param(params: &Map<String, Value>, key: &str, max: i64) -> Result<Option<usize>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_i64() {
            Some(n) if (0..=max).contains(&n) => Ok(usize::try_from(n).ok()),
            _ => Err(RpcError::new(
                code::INVALID_PARAMS,
                format!("params.{key}: an integer from 0 to {max}"),
            )),
        },
    }
}

fn str_param<'a>(params: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= task::MAX_ID => Ok(Some(s)),
        Some(_) => Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("params.{key}: a string of at most {} bytes", task::MAX_ID),
        )),
    }
}

/// The A2A v1.0 JSON-RPC binding served by an agent: what its listener hands each
/// request to. It holds nothing; the agent's threads and their bridge state are the
/// state.
#[derive(Debug, Clone, Copy, Default)]
pub struct Server;

impl Server {
    /// One JSON-RPC request of the A2A client `client` (an address of
    /// [`crate::address::A2A_DOMAIN`], chosen by the listener from the client's
    /// credentials). Outputs follow as for any input (persist first): a runtime drains
    /// them and commits before it writes the answer.
    pub fn handle(agent: &mut Agent, now: Timestamp, client: &Address, body: &[u8]) -> A2aReply {
        agent.bridged_input(now, |a| Server::request(a, client, body))
    }

    /// The task (thread) `id` of `client`, if it has one by that id.
    pub fn task<'a>(agent: &'a Agent, client: &Address, id: &str) -> Option<ThreadView<'a>> {
        agent.thread_view(id).filter(|t| a2a_owns(client, t.peer()))
    }

    /// The answer to a blocking `SendMessage` the listener holds: `Some` once its task is
    /// terminal or interrupted, or whatever its state when `deadline_passed` (the task as
    /// it stands; the client goes on with `GetTask` or `SubscribeToTask`).
    pub fn waited(agent: &Agent, w: &A2aWait, deadline_passed: bool) -> Option<Value> {
        let Some(t) = agent.thread_view(&w.task_id) else {
            return Some(rpc_error(
                &w.rpc_id,
                RpcError::new(code::TASK_NOT_FOUND, "the task is gone"),
            ));
        };
        let state = task::task_state(&t);
        (deadline_passed || state.is_terminal() || state.is_interrupted()).then(|| {
            rpc_result(
                &w.rpc_id,
                json!({ "task": task::task_json(&t, None, true) }),
            )
        })
    }

    /// One JSON-RPC request, within an input of the agent.
    pub fn request(agent: &mut Agent, client: &Address, body: &[u8]) -> A2aReply {
        let plain = |response| A2aReply {
            response,
            stream: None,
            wait: None,
        };
        if body.len() > A2A_MAX_REQUEST {
            return plain(rpc_error(
                &Value::Null,
                RpcError::new(code::INVALID_REQUEST, "request too large"),
            ));
        }
        let v: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                return plain(rpc_error(
                    &Value::Null,
                    RpcError::new(code::PARSE_ERROR, format!("not JSON: {e}")),
                ))
            }
        };
        let Some(req) = v.as_object() else {
            return plain(rpc_error(
                &Value::Null,
                RpcError::new(code::INVALID_REQUEST, "a JSON-RPC request is an object"),
            ));
        };
        let id = match req.get("id") {
            Some(i @ (Value::String(_) | Value::Number(_) | Value::Null)) => i.clone(),
            None => Value::Null,
            Some(_) => {
                return plain(rpc_error(
                    &Value::Null,
                    RpcError::new(code::INVALID_REQUEST, "id: a string, a number or null"),
                ))
            }
        };
        if req.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return plain(rpc_error(
                &id,
                RpcError::new(code::INVALID_REQUEST, "jsonrpc: must be \"2.0\""),
            ));
        }
        let Some(method) = req.get("method").and_then(Value::as_str) else {
            return plain(rpc_error(
                &id,
                RpcError::new(code::INVALID_REQUEST, "method: required, a string"),
            ));
        };
        let empty = Map::new();
        let params = match req.get("params") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(p)) => p,
            Some(_) => {
                return plain(rpc_error(
                    &id,
                    RpcError::new(code::INVALID_PARAMS, "params: must be an object"),
                ))
            }
        };
        let result = match method {
            "SendMessage" | "SendStreamingMessage" => send(agent, client, params),
            "GetTask" => get(agent, client, params),
            "ListTasks" => list(agent, client, params),
            "CancelTask" => cancel(agent, client, params),
            "SubscribeToTask" => subscribe(agent, client, params),
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig" => Err(RpcError::new(
                code::PUSH_NOTIFICATION_NOT_SUPPORTED,
                "push notifications are not supported; stream with SendStreamingMessage or SubscribeToTask",
            )),
            "GetExtendedAgentCard" => Err(RpcError::new(
                code::EXTENDED_CARD_NOT_CONFIGURED,
                "this agent has no extended card",
            )),
            m => Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("no method `{}`", crate::display::line(m, 60)),
            )),
        };
        match result {
            Err(e) => plain(rpc_error(&id, e)),
            Ok((result, task_id)) => {
                let streaming = STREAMING.contains(&method);
                let stream = match (streaming, &task_id) {
                    (true, Some(tid)) => agent.thread_view(tid).and_then(|t| {
                        let s = A2aStream {
                            task_id: tid.clone(),
                            state: task::task_state(&t),
                            artifact: task::artifact_id(&t),
                            until_terminal: method == "SubscribeToTask",
                        };
                        (!s.ends_at(s.state)).then_some(s)
                    }),
                    _ => None,
                };
                let blocking = method == "SendMessage"
                    && !params
                        .get("configuration")
                        .and_then(|c| c.get("returnImmediately"))
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                let wait = match (blocking, task_id) {
                    (true, Some(tid)) => agent.thread_view(&tid).and_then(|t| {
                        let state = task::task_state(&t);
                        (!state.is_terminal() && !state.is_interrupted()).then(|| A2aWait {
                            task_id: tid.clone(),
                            rpc_id: id.clone(),
                        })
                    }),
                    _ => None,
                };
                // `SendMessageResponse` and a stream's first `StreamResponse` both hold
                // the task in their `task` member; `GetTask` and `CancelTask` answer it bare.
                let result = if method.starts_with("Send") || streaming {
                    json!({ "task": result })
                } else {
                    result
                };
                A2aReply {
                    response: rpc_result(&id, result),
                    stream,
                    wait,
                }
            }
        }
    }

    /// A new task of `client`: its thread id. The Phase-1 route answers a refusal for now
    /// as it answers a cap (`UNSUPPORTED_OPERATION` to its `CAPABILITY_MISMATCH`).
    pub fn new_task(agent: &mut Agent, client: &Address, m: &Inbound) -> Result<String, RpcError> {
        open_task(agent, client, m)
            .map(|(id, _)| id)
            .map_err(|e| match e.code {
                code::TEMPORARILY_REFUSED => RpcError::new(code::UNSUPPORTED_OPERATION, e.message),
                _ => e,
            })
    }

    /// Calls the client's thread off in its name: a `resolution_response` declined
    /// (`user_declined`) to `resolution_id` (the open resolution, if any), saying `why`;
    /// the thread ends DECLINED, or undoes what was done first.
    pub fn call_off(
        agent: &mut Agent,
        client: &Address,
        thread_id: &str,
        resolution_id: Option<String>,
        why: &str,
    ) {
        agent.bridged_said(
            client,
            thread_id,
            Body::ResolutionResponse(ResolutionResponseBody {
                resolution_id,
                status: ResolutionStatus::Declined,
                reason_class: Some("user_declined".into()),
                message_to_other_agent: Some(why.into()),
                alternative: None,
                signature: None,
                confirmations: Vec::new(),
            }),
        );
    }
}

fn no_task(id: &str) -> RpcError {
    RpcError::new(
        code::TASK_NOT_FOUND,
        format!("no task `{}`", crate::display::line(id, 60)),
    )
}

/// `SendMessage` / `SendStreamingMessage`: a new task (thread) or a message on one.
/// Answers the task (`SendMessageResponse.task`; for a stream, the bare task).
fn send(
    agent: &mut Agent,
    client: &Address,
    params: &Map<String, Value>,
) -> Result<(Value, Option<String>), RpcError> {
    let message = params
        .get("message")
        .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "params.message: required"))?;
    let m = task::parse_message(message)?;
    let thread_id = match &m.task_id {
        Some(tid) => {
            let t = Server::task(agent, client, tid).ok_or_else(|| no_task(tid))?;
            if m.context_id
                .as_deref()
                .is_some_and(|c| c != task::context_id(&t))
            {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    "message.contextId: not the context of this task",
                ));
            }
            let peer = t.peer().clone();
            let bodies = task::reply_bodies(&t, &m)?;
            let mut ids = Vec::new();
            for b in bodies {
                ids.extend(agent.bridged_said(&peer, tid, b));
            }
            keep_sent(agent, tid, &ids, message);
            tid.clone()
        }
        None => {
            let (tid, first) = open_task(agent, client, &m)?;
            keep_sent(agent, &tid, &[first], message);
            tid
        }
    };
    let t = agent
        .thread_view(&thread_id)
        .ok_or_else(|| RpcError::new(code::INTERNAL_ERROR, "the task was not kept"))?;
    Ok((task::task_json(&t, None, true), Some(thread_id)))
}

/// Keeps the client's message as sent, by the first of the packets `ids` it became
/// (those the thread took).
fn keep_sent(agent: &mut Agent, thread_id: &str, ids: &[String], message: &Value) {
    let Some(t) = agent.thread_view(thread_id) else {
        return;
    };
    let taken: Vec<&String> = ids
        .iter()
        .filter(|id| t.packets().any(|h| h.packet_id == id.as_str()))
        .collect();
    let Some((first, rest)) = taken.split_first() else {
        return;
    };
    let mut m = message.clone();
    if let Some(o) = m.as_object_mut() {
        o.insert("taskId".into(), Value::String(t.id().to_string()));
        o.insert(
            "contextId".into(),
            Value::String(task::context_id(&t).to_string()),
        );
    }
    let mut sent = match t.bridge_state(SENT_KEY) {
        Some(Value::Object(o)) => o.clone(),
        _ => Map::new(),
    };
    sent.insert((*first).clone(), m);
    for id in rest {
        sent.insert((*id).clone(), Value::Null);
    }
    agent.set_bridge_state(thread_id, SENT_KEY, Some(Value::Object(sent)));
}

/// A new task of `client`: its thread id and the id of its first packet.
fn open_task(
    agent: &mut Agent,
    client: &Address,
    m: &Inbound,
) -> Result<(String, String), RpcError> {
    let context_id = match &m.context_id {
        Some(c) => c.clone(),
        None => agent.draw_id("ctx_", 16),
    };
    let peer = anonymous_peer(client, &context_id);
    if agent.blocked().contains(client) || agent.blocked().contains(&peer) {
        return Err(RpcError::new(
            code::UNSUPPORTED_OPERATION,
            "this agent's user does not take requests from this client",
        ));
    }
    let body = task::first_body(m)?;
    let opening = BridgedOpening {
        peer,
        body,
        state: vec![(CONTEXT_KEY.to_string(), Value::String(context_id))],
        shared: is_anonymous(client).then_some(SharedCaps {
            member: is_anonymous_peer,
            share: ANONYMOUS_SHARE,
        }),
    };
    // The caps on what waits for the user are temporary: answered prompts and ended
    // tasks free them.
    agent.bridged_open(opening).map_err(|e| match e {
        BridgedRefusal::Limit(why) => temporary(why),
        BridgedRefusal::SharedThreads { open, max } => temporary(format!(
            "{open} tasks of clients without a token are open and at most {max} may be"
        )),
        BridgedRefusal::SharedPrompts { open, max } => temporary(format!(
            "{open} questions of clients without a token wait for this agent's user (at most {max})"
        )),
        BridgedRefusal::Invalid(why) => RpcError::new(code::INVALID_PARAMS, why),
        BridgedRefusal::NotAdmitted => {
            RpcError::new(code::INVALID_PARAMS, "the message cannot open a task")
        }
    })
}

fn get(
    agent: &mut Agent,
    client: &Address,
    params: &Map<String, Value>,
) -> Result<(Value, Option<String>), RpcError> {
    let id = str_param(params, "id")?
        .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "params.id: required"))?;
    let history = int_param(params, "historyLength", i64::from(i32::MAX))?;
    let t = Server::task(agent, client, id).ok_or_else(|| no_task(id))?;
    Ok((task::task_json(&t, history, true), Some(id.to_string())))
}

fn subscribe(
    agent: &mut Agent,
    client: &Address,
    params: &Map<String, Value>,
) -> Result<(Value, Option<String>), RpcError> {
    let id = str_param(params, "id")?
        .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "params.id: required"))?;
    let t = Server::task(agent, client, id).ok_or_else(|| no_task(id))?;
    if task::task_state(&t).is_terminal() {
        return Err(RpcError::new(
            code::UNSUPPORTED_OPERATION,
            format!(
                "task {id} is {}: nothing more to stream",
                task::task_state(&t).as_str()
            ),
        ));
    }
    Ok((task::task_json(&t, None, true), Some(id.to_string())))
}

fn list(
    agent: &mut Agent,
    client: &Address,
    params: &Map<String, Value>,
) -> Result<(Value, Option<String>), RpcError> {
    let context = str_param(params, "contextId")?.filter(|c| !c.is_empty());
    let status = match str_param(params, "status")? {
        None | Some("") | Some("TASK_STATE_UNSPECIFIED") => None,
        Some(s) => Some(TaskState::parse(s).ok_or_else(|| {
            RpcError::new(code::INVALID_PARAMS, "params.status: a TASK_STATE_* name")
        })?),
    };
    let page = int_param(params, "pageSize", task::MAX_PAGE as i64)?
        .filter(|n| *n > 0)
        .unwrap_or(task::DEFAULT_PAGE);
    let offset = match str_param(params, "pageToken")? {
        None | Some("") => 0,
        Some(s) => s.parse::<usize>().map_err(|_| {
            RpcError::new(
                code::INVALID_PARAMS,
                "params.pageToken: not one this agent gave",
            )
        })?,
    };
    let history = int_param(params, "historyLength", i64::from(i32::MAX))?.or(Some(0));
    let artifacts = params
        .get("includeArtifacts")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // Most recently active first; the thread id breaks ties, so pages are stable.
    let mut mine: Vec<ThreadView<'_>> = agent
        .thread_views()
        .filter(|t| a2a_owns(client, t.peer()))
        .filter(|t| context.is_none_or(|c| task::context_id(t) == c))
        .filter(|t| status.is_none_or(|s| task::task_state(t) == s))
        .collect();
    mine.sort_by(|a, b| {
        b.last_activity()
            .cmp(&a.last_activity())
            .then(a.id().cmp(b.id()))
    });
    let total = mine.len();
    let tasks: Vec<Value> = mine
        .iter()
        .skip(offset)
        .take(page)
        .map(|t| task::task_json(t, history, artifacts))
        .collect();
    let next = if offset.saturating_add(page) < total {
        (offset + page).to_string()
    } else {
        String::new()
    };
    Ok((
        json!({ "tasks": tasks, "nextPageToken": next, "pageSize": page, "totalSize": total }),
        None,
    ))
}

/// `CancelTask`: the client closes its side, as a peer's cancel does
/// (`resolution_response` declined, `user_declined`); the thread ends DECLINED, or
/// undoes what was done first.
fn cancel(
    agent: &mut Agent,
    client: &Address,
    params: &Map<String, Value>,
) -> Result<(Value, Option<String>), RpcError> {
    let id = str_param(params, "id")?
        .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "params.id: required"))?;
    let t = Server::task(agent, client, id).ok_or_else(|| no_task(id))?;
    let state = task::task_state(&t);
    if state.is_terminal() {
        return Err(RpcError::new(
            code::TASK_NOT_CANCELABLE,
            format!("task {id} is {}", state.as_str()),
        ));
    }
    let rid = t.resolution().map(|r| r.packet_id.to_string());
    let peer = t.peer().clone();
    let id = id.to_string();
    Server::call_off(agent, &peer, &id, rid, "The A2A client cancelled the task.");
    let t = agent
        .thread_view(&id)
        .ok_or_else(|| RpcError::new(code::INTERNAL_ERROR, "the task was not kept"))?;
    Ok((task::task_json(&t, None, true), Some(id)))
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
