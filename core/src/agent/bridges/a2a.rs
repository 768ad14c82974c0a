//! The A2A v1.0 JSON-RPC binding on the agent (seed 003, §18): a client's request in,
//! the JSON-RPC response out, and its messages through the thread machine as packets of a
//! peer of its own (`agent:<client>@a2a.invalid`). The mapping is `crate::bridge::a2a::task`'s;
//! here it meets the agent's threads. SPEC-NOTES "The A2A v1.0 bridge (seed 003, §18)".

use serde_json::{json, Map, Value};

use crate::agent::*;
use crate::bridge::a2a::task::{self, code, Inbound, RpcError, TaskState};
use crate::packet::{Body, Packet, ResolutionResponseBody, ResolutionStatus};

pub use crate::bridge::a2a::task::A2A_MAX_REQUEST;

/// What the agent answers one JSON-RPC request of an A2A client.
#[derive(Debug, Clone, PartialEq)]
pub struct A2aReply {
    /// The JSON-RPC response object (`result` or `error`), or for a streaming method that
    /// was accepted, its first event's response (the task).
    pub response: Value,
    /// For `SendStreamingMessage` and `SubscribeToTask` accepted: the task to stream, and
    /// the state and artifact the first event showed. The listener keeps the stream open
    /// and sends [`task::update_events`] after each [`Output::A2a`] of the thread, until
    /// the task is terminal or interrupted; `None` when the first event already was.
    pub stream: Option<A2aStream>,
    /// For a blocking `SendMessage` (no `configuration.returnImmediately`) whose task is
    /// neither terminal nor interrupted yet: the listener holds the answer and gives
    /// [`Agent::a2a_waited`]'s instead, once the task is, or at its deadline
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

impl Agent {
    /// One JSON-RPC request of the A2A client `client` (an address of
    /// [`crate::address::A2A_DOMAIN`], chosen by the listener from the client's
    /// credentials). Outputs follow as for any input (persist first): a runtime drains
    /// them and commits before it writes the answer.
    pub fn handle_a2a(&mut self, now: Timestamp, client: &Address, body: &[u8]) -> A2aReply {
        self.shared.now = self.shared.now.max(now);
        let reply = self.a2a_request(client, body);
        self.step_groups();
        self.flush();
        reply
    }

    /// The task (thread) `id` of `client`, if it has one by that id.
    pub fn a2a_task(&self, client: &Address, id: &str) -> Option<&Thread> {
        self.threads.get(id).filter(|t| a2a_owns(client, &t.peer))
    }

    /// The answer to a blocking `SendMessage` the listener holds: `Some` once its task is
    /// terminal or interrupted, or whatever its state when `deadline_passed` (the task as
    /// it stands; the client goes on with `GetTask` or `SubscribeToTask`).
    pub fn a2a_waited(&self, w: &A2aWait, deadline_passed: bool) -> Option<Value> {
        let Some(t) = self.threads.get(&w.task_id) else {
            return Some(rpc_error(
                &w.rpc_id,
                RpcError::new(code::TASK_NOT_FOUND, "the task is gone"),
            ));
        };
        let state = task::task_state(t);
        (deadline_passed || state.is_terminal() || state.is_interrupted())
            .then(|| rpc_result(&w.rpc_id, json!({ "task": task::task_json(t, None, true) })))
    }

    pub(in crate::agent) fn a2a_request(&mut self, client: &Address, body: &[u8]) -> A2aReply {
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
            "SendMessage" | "SendStreamingMessage" => self.a2a_send(client, params),
            "GetTask" => self.a2a_get(client, params),
            "ListTasks" => self.a2a_list(client, params),
            "CancelTask" => self.a2a_cancel(client, params),
            "SubscribeToTask" => self.a2a_subscribe(client, params),
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
                    (true, Some(tid)) => self.threads.get(tid).and_then(|t| {
                        let s = A2aStream {
                            task_id: tid.clone(),
                            state: task::task_state(t),
                            artifact: task::artifact_id(t),
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
                    (true, Some(tid)) => self.threads.get(&tid).and_then(|t| {
                        let state = task::task_state(t);
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

    /// `SendMessage` / `SendStreamingMessage`: a new task (thread) or a message on one.
    /// Answers the task (`SendMessageResponse.task`; for a stream, the bare task).
    fn a2a_send(
        &mut self,
        client: &Address,
        params: &Map<String, Value>,
    ) -> Result<(Value, Option<String>), RpcError> {
        let message = params
            .get("message")
            .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "params.message: required"))?;
        let m = task::parse_message(message)?;
        let thread_id = match &m.task_id {
            Some(tid) => {
                let t = self.a2a_task(client, tid).ok_or_else(|| {
                    RpcError::new(
                        code::TASK_NOT_FOUND,
                        format!("no task `{}`", crate::display::line(tid, 60)),
                    )
                })?;
                if m.context_id
                    .as_deref()
                    .is_some_and(|c| c != task::context_id(t))
                {
                    return Err(RpcError::new(
                        code::INVALID_PARAMS,
                        "message.contextId: not the context of this task",
                    ));
                }
                let peer = t.peer.clone();
                let bodies = task::reply_bodies(t, &m)?;
                let mut ids = Vec::new();
                for b in bodies {
                    ids.extend(self.a2a_packet(&peer, tid, b));
                }
                self.a2a_keep_sent(tid, &ids, message);
                tid.clone()
            }
            None => {
                let (tid, first) = self.a2a_open_task(client, &m)?;
                self.a2a_keep_sent(&tid, &[first], message);
                tid
            }
        };
        let t = self
            .threads
            .get(&thread_id)
            .ok_or_else(|| RpcError::new(code::INTERNAL_ERROR, "the task was not kept"))?;
        Ok((task::task_json(t, None, true), Some(thread_id)))
    }

    /// Keeps the client's message as sent, by the first of the packets `ids` it became
    /// (those the thread took).
    fn a2a_keep_sent(&mut self, thread_id: &str, ids: &[String], message: &Value) {
        let Some(t) = self.threads.get_mut(thread_id) else {
            return;
        };
        let taken: Vec<&String> = ids
            .iter()
            .filter(|id| t.history.iter().any(|h| &h.packet_id == *id))
            .collect();
        let Some((first, rest)) = taken.split_first() else {
            return;
        };
        let mut m = message.clone();
        if let Some(o) = m.as_object_mut() {
            o.insert("taskId".into(), Value::String(t.id.clone()));
            o.insert(
                "contextId".into(),
                Value::String(task::context_id(t).to_string()),
            );
        }
        t.a2a_sent.insert((*first).clone(), m);
        for id in rest {
            t.a2a_sent.insert((*id).clone(), Value::Null);
        }
        self.shared.dirty.threads.insert(thread_id.to_string());
    }

    /// Why the anonymous clients, all together, may not open another task now.
    fn anonymous_refusal(&self) -> Option<String> {
        let l = &self.shared.config.limits;
        let peers: BTreeSet<&Address> = self
            .threads
            .values()
            .filter(|t| is_anonymous_peer(&t.peer))
            .map(|t| &t.peer)
            .collect();
        let threads: usize = peers.iter().map(|p| self.open_threads_started_by(p)).sum();
        let prompts: usize = peers.iter().map(|p| self.open_prompts_of(p)).sum();
        let max_threads = (l.max_threads_per_peer as usize).saturating_mul(ANONYMOUS_SHARE);
        let max_prompts = (l.max_prompts_per_peer as usize).saturating_mul(ANONYMOUS_SHARE);
        if threads >= max_threads {
            return Some(format!(
                "{threads} tasks of clients without a token are open and at most {max_threads} may be"
            ));
        }
        (prompts >= max_prompts).then(|| {
            format!(
                "{prompts} questions of clients without a token wait for this agent's user (at most {max_prompts})"
            )
        })
    }

    /// A new task of `client`: its thread id.
    pub(in crate::agent) fn a2a_new_task(
        &mut self,
        client: &Address,
        m: &Inbound,
    ) -> Result<String, RpcError> {
        // The Phase-1 route answers a refusal for now as it answers a cap
        // (`UNSUPPORTED_OPERATION` to its `CAPABILITY_MISMATCH`).
        self.a2a_open_task(client, m)
            .map(|(id, _)| id)
            .map_err(|e| match e.code {
                code::TEMPORARILY_REFUSED => RpcError::new(code::UNSUPPORTED_OPERATION, e.message),
                _ => e,
            })
    }

    /// A new task of `client`: its thread id and the id of its first packet.
    fn a2a_open_task(
        &mut self,
        client: &Address,
        m: &Inbound,
    ) -> Result<(String, String), RpcError> {
        let context_id = match &m.context_id {
            Some(c) => c.clone(),
            None => self.shared.meta.rng.id("ctx_", 16),
        };
        let peer = anonymous_peer(client, &context_id);
        if self.shared.settings.blocked.contains(client)
            || self.shared.settings.blocked.contains(&peer)
        {
            return Err(RpcError::new(
                code::UNSUPPORTED_OPERATION,
                "this agent's user does not take requests from this client",
            ));
        }
        let body = task::first_body(m)?;
        let thread_id = self.shared.meta.rng.id("thr_", 16);
        self.shared.dirty.meta = true;
        let p = self.a2a_build(&peer, &thread_id, body, true);
        // The caps on what waits for the user are temporary: answered prompts and ended
        // tasks free them.
        if let Some((_, why)) = self.new_thread_refusal(&p) {
            return Err(temporary(why));
        }
        if is_anonymous(client) {
            if let Some(why) = self.anonymous_refusal() {
                return Err(temporary(why));
            }
        }
        let first = p.packet_id.clone();
        let raw = p
            .to_bytes()
            .map_err(|e| RpcError::new(code::INVALID_PARAMS, e.to_string()))?;
        let Ok(p) = Packet::parse(&raw) else {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                "the message makes no valid packet",
            ));
        };
        // No envelope, so no session is ever used; the thread has one like any other.
        let session = new_session(&mut self.shared.meta.rng);
        if !self.admit_new_thread(&p, session) {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                "the message cannot open a task",
            ));
        }
        if let Some(t) = self.threads.get_mut(&thread_id) {
            t.a2a_context = Some(context_id);
        }
        self.take_packet(&thread_id, &peer, p, &raw);
        if is_anonymous(client) {
            self.forget_ended_where(
                is_anonymous_peer,
                (self.shared.config.limits.max_ended_threads_per_peer as usize)
                    .saturating_mul(ANONYMOUS_SHARE),
            );
        }
        Ok((thread_id, first))
    }

    /// A packet of the client in its thread, built and checked like one off the wire.
    fn a2a_build(&mut self, client: &Address, thread_id: &str, body: Body, first: bool) -> Packet {
        let version = self.shared.highest_version();
        Packet {
            protocol: format!("a2acp/{version}"),
            packet_id: self.shared.meta.rng.id("a2a_", 12),
            thread_id: thread_id.to_string(),
            from: client.clone(),
            to: self.shared.config.address.clone(),
            timestamp: self.shared.now.to_rfc3339(),
            capabilities: first
                .then(|| crate::packet::capabilities(&self.shared.config.supported_versions)),
            format_hints: None,
            body,
        }
    }

    /// Calls the client's thread off in its name: a `resolution_response` declined
    /// (`user_declined`) to `resolution_id` (the open resolution, if any), saying `why`;
    /// the thread ends DECLINED, or undoes what was done first.
    pub(in crate::agent) fn a2a_call_off(
        &mut self,
        client: &Address,
        thread_id: &str,
        resolution_id: Option<String>,
        why: &str,
    ) {
        self.a2a_packet(
            client,
            thread_id,
            Body::ResolutionResponse(ResolutionResponseBody {
                resolution_id,
                status: ResolutionStatus::Declined,
                reason_class: Some("user_declined".into()),
                message_to_other_agent: Some(why.into()),
                alternative: None,
            }),
        );
    }

    /// A packet of the client (the thread's peer) in its thread; its id, if it was built.
    pub(in crate::agent) fn a2a_packet(
        &mut self,
        client: &Address,
        thread_id: &str,
        body: Body,
    ) -> Option<String> {
        self.shared.dirty.meta = true;
        let p = self.a2a_build(client, thread_id, body, false);
        let Ok(raw) = p.to_bytes() else {
            self.shared
                .malformed(client, "an A2A message made an invalid packet".into());
            return None;
        };
        match Packet::parse(&raw) {
            Ok(p) => {
                let id = p.packet_id.clone();
                self.take_packet(thread_id, client, p, &raw);
                Some(id)
            }
            Err(e) => {
                self.shared.malformed(client, e.to_string());
                None
            }
        }
    }

    fn a2a_get(
        &mut self,
        client: &Address,
        params: &Map<String, Value>,
    ) -> Result<(Value, Option<String>), RpcError> {
        let id = str_param(params, "id")?
            .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "params.id: required"))?;
        let history = int_param(params, "historyLength", i64::from(i32::MAX))?;
        let t = self.a2a_task(client, id).ok_or_else(|| {
            RpcError::new(
                code::TASK_NOT_FOUND,
                format!("no task `{}`", crate::display::line(id, 60)),
            )
        })?;
        Ok((task::task_json(t, history, true), Some(id.to_string())))
    }

    fn a2a_subscribe(
        &mut self,
        client: &Address,
        params: &Map<String, Value>,
    ) -> Result<(Value, Option<String>), RpcError> {
        let id = str_param(params, "id")?
            .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "params.id: required"))?;
        let t = self.a2a_task(client, id).ok_or_else(|| {
            RpcError::new(
                code::TASK_NOT_FOUND,
                format!("no task `{}`", crate::display::line(id, 60)),
            )
        })?;
        if task::task_state(t).is_terminal() {
            return Err(RpcError::new(
                code::UNSUPPORTED_OPERATION,
                format!(
                    "task {id} is {}: nothing more to stream",
                    task::task_state(t).as_str()
                ),
            ));
        }
        Ok((task::task_json(t, None, true), Some(id.to_string())))
    }

    fn a2a_list(
        &mut self,
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
        let mut mine: Vec<&Thread> = self
            .threads
            .values()
            .filter(|t| a2a_owns(client, &t.peer))
            .filter(|t| context.is_none_or(|c| task::context_id(*t) == c))
            .filter(|t| status.is_none_or(|s| task::task_state(*t) == s))
            .collect();
        mine.sort_by(|a, b| b.last_activity.cmp(&a.last_activity).then(a.id.cmp(&b.id)));
        let total = mine.len();
        let tasks: Vec<Value> = mine
            .iter()
            .skip(offset)
            .take(page)
            .map(|t| task::task_json(*t, history, artifacts))
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
    fn a2a_cancel(
        &mut self,
        client: &Address,
        params: &Map<String, Value>,
    ) -> Result<(Value, Option<String>), RpcError> {
        let id = str_param(params, "id")?
            .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "params.id: required"))?;
        let t = self.a2a_task(client, id).ok_or_else(|| {
            RpcError::new(
                code::TASK_NOT_FOUND,
                format!("no task `{}`", crate::display::line(id, 60)),
            )
        })?;
        let state = task::task_state(t);
        if state.is_terminal() {
            return Err(RpcError::new(
                code::TASK_NOT_CANCELABLE,
                format!("task {id} is {}", state.as_str()),
            ));
        }
        let rid = t.stage.resolution().map(|r| r.packet_id.clone());
        let peer = t.peer.clone();
        let id = id.to_string();
        self.a2a_call_off(&peer, &id, rid, "The A2A client cancelled the task.");
        let t = self
            .threads
            .get(&id)
            .ok_or_else(|| RpcError::new(code::INTERNAL_ERROR, "the task was not kept"))?;
        Ok((task::task_json(t, None, true), Some(id)))
    }
}

/// The A2A bridge's view of a thread: what its mapping reads, and nothing else.
impl task::TaskThread for Thread {
    fn id(&self) -> &str {
        &self.id
    }
    fn peer(&self) -> &Address {
        &self.peer
    }
    fn state(&self) -> ThreadState {
        self.state
    }
    fn halted(&self) -> bool {
        self.halted
    }
    fn packets(&self) -> impl DoubleEndedIterator<Item = task::Logged<'_>> + ExactSizeIterator {
        self.history.iter().map(|h| task::Logged {
            packet_id: &h.packet_id,
            json: &h.json,
            outgoing: h.outgoing,
        })
    }
    fn answered(&self, field: &str) -> bool {
        self.theirs.contains_key(field) || self.peer_unavailable.contains(field)
    }
    fn resolution(&self) -> Option<task::OpenProposal<'_>> {
        self.stage.resolution().map(|r| task::OpenProposal {
            packet_id: &r.packet_id,
            body: &r.body,
            answers: &r.answers,
        })
    }
    fn consent_open(&self) -> bool {
        self.consent.is_some()
    }
    fn escalated(&self) -> bool {
        self.escalated
    }
    fn last_activity(&self) -> Timestamp {
        self.last_activity
    }
    fn a2a_context(&self) -> Option<&str> {
        self.a2a_context.as_deref()
    }
    fn a2a_sent(&self, packet_id: &str) -> Option<&Value> {
        self.a2a_sent.get(packet_id)
    }
}
