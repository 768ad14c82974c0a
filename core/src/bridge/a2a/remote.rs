//! The client direction of the A2A v1.0 bridge ([`Client`]; seed 003, §18): a thread
//! whose peer is a plain A2A agent reached by its card's JSON-RPC interface. The thread
//! machine is the same as with any peer; here the packets the agent addresses to that
//! peer ([`BridgeStep::packets`]) become A2A messages (`client::outgoing`), queued in the
//! thread's bridge state ([`RemoteTask::unsent`]), and the remote task read back becomes
//! what the peer (`agent:web-…@a2a.invalid`) said ([`Agent::bridged_said`]): an
//! input-required status with needs a `context_request`, a proposal (artifact) a
//! `resolution` for this user to confirm, a completed task the peer's
//! `execution_report`, a refused or failed one the thread declined.
//!
//! The runtime only does HTTP: it takes the calls due ([`Client::take_calls`]), makes
//! them and hands each outcome back ([`Client::handle_outcome`]). Everything that decides
//! is here, pure; the retry schedule is the bridges' shared one (`crate::bridge::retry`).
//! SPEC-NOTES "The A2A v1.0 bridge: the client direction".

use std::time::Duration;

use serde_json::Value;

use crate::address::Address;
use crate::agent::{Agent, Bridge, BridgeStep, Command, NotifyKind, ThreadState};
use crate::bridge::a2a::client::{self, ClientError, Outgoing, RemoteTask, RemoteView};
use crate::bridge::a2a::task::{self, TaskState, CONTEXT_KEY};
use crate::bridge::retry;
use crate::packet::{
    Body, Context, ContextRequestBody, ExecutionReport, Intent, Packet, ResolutionBody,
};
use crate::time::Timestamp;

/// The bridge's name ([`Bridge::name`]), and the prefix of its keys in a thread's record.
pub const NAME: &str = "a2a";
/// The key of a thread's remote A2A task in its record ([`RemoteTask`]).
pub const REMOTE_KEY: &str = "a2a_remote";
/// The mark of a thread whose call is out ([`Agent::bridge_mark`]: not persisted, so
/// after a restart the call is made again).
const IN_FLIGHT: &str = "a2a_in_flight";

/// What one call of the A2A client is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum A2aCallKind {
    /// `GET` the agent card.
    Card,
    /// `POST` a `SendMessage`.
    Send,
    /// `POST` a `GetTask` (the task was still working).
    Poll,
    /// `POST` a `CancelTask` (this user called the thread off).
    Cancel,
}

/// One HTTP call the runtime makes for a thread with a remote A2A agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct A2aClientCall {
    /// The thread.
    pub thread_id: String,
    /// What it is for.
    pub kind: A2aCallKind,
    /// Where: the card URL (`GET`) or the JSON-RPC endpoint (`POST`, header
    /// `A2A-Version: 1.0`).
    pub url: String,
    /// The JSON-RPC request (`None` for the card).
    pub body: Option<Vec<u8>>,
    /// Bytes of the answer read at most (over it: [`A2aOutcome::TooLarge`]).
    pub limit: usize,
}

/// How a call of the A2A client ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum A2aOutcome {
    /// An HTTP response, read whole within the limit.
    Response {
        /// Its status code.
        status: u16,
        /// Its body.
        body: Vec<u8>,
    },
    /// No response: the connection failed or the deadline passed (retried).
    Network(String),
    /// The response was larger than the call's limit.
    TooLarge,
}

/// The client direction of the A2A bridge, registered with the agent
/// ([`Agent::add_bridge`]): it opens threads with plain A2A agents, queues the agent's
/// packets to them as A2A messages, and says when a call is due. It holds nothing; each
/// thread's [`RemoteTask`] is its state, kept in the thread's record.
#[derive(Debug, Clone, Copy, Default)]
pub struct Client;

/// The remote task of thread `id`, if the thread has one.
fn remote(agent: &Agent, id: &str) -> Option<RemoteTask> {
    let v = agent.thread_view(id)?.bridge_state(REMOTE_KEY)?.clone();
    let mut r: RemoteTask = serde_json::from_value(v).ok()?;
    r.in_flight = agent.bridge_mark(id, IN_FLIGHT);
    Some(r)
}

/// Keeps `r` as the remote task of thread `id`.
fn store(agent: &mut Agent, id: &str, r: &RemoteTask) {
    if let Ok(v) = serde_json::to_value(r) {
        agent.set_bridge_state(id, REMOTE_KEY, Some(v));
    }
    agent.set_bridge_mark(id, IN_FLIGHT, r.in_flight);
}

impl Client {
    /// The command that starts a thread with the A2A agent whose card is at `to` (a card
    /// URL, or a base URL): `thread start --to https://…`.
    pub fn start(to: String, intent: Intent, context: Context) -> Command {
        Command::StartBridgedThread {
            bridge: NAME.into(),
            to,
            intent,
            context,
        }
    }

    /// The remote task of thread `id`, if its peer is a plain A2A agent this agent drives.
    pub fn remote_task(agent: &Agent, id: &str) -> Option<RemoteTask> {
        remote(agent, id)
    }

    /// The calls due now for threads with a remote A2A agent, marked as out (one per
    /// thread at a time): the card first, then the queued messages in order, then polls
    /// of a task still working. After a restart nothing is out, and the same calls are
    /// due again (a message is dropped from the queue only once the remote agent
    /// answered it).
    pub fn take_calls(agent: &mut Agent, now: Timestamp) -> Vec<A2aClientCall> {
        agent.bridged_input(now, take_calls)
    }

    /// A call of [`Client::take_calls`] ended with `outcome`. Outputs follow as for any
    /// input.
    pub fn handle_outcome(
        agent: &mut Agent,
        now: Timestamp,
        call: &A2aClientCall,
        outcome: A2aOutcome,
    ) {
        agent.bridged_input(now, |a| on_outcome(a, call, outcome));
    }
}

impl Bridge for Client {
    fn name(&self) -> &'static str {
        NAME
    }

    fn peer_kind(&self) -> &'static str {
        "its A2A agent"
    }

    /// `thread start --to https://…`: a thread with the A2A agent whose card is at `to`
    /// (a card URL, or a base URL). Its first packet is queued for the remote agent; the
    /// card is read first ([`Client::take_calls`]). The new thread's id, unless `to` was
    /// refused (the user is told why).
    fn open(
        &self,
        agent: &mut Agent,
        to: &str,
        intent: Intent,
        context: Context,
    ) -> Option<String> {
        let url = match client::card_url(to) {
            Ok(u) => u,
            Err(e) => {
                agent.tell_user(None, NotifyKind::Info, format!("No thread started: {e}."));
                return None;
            }
        };
        let peer = match client::peer_address(&url) {
            Ok(p) => p,
            Err(e) => {
                agent.tell_user(None, NotifyKind::Info, format!("No thread started: {e}."));
                return None;
            }
        };
        let id = agent.create_bridged_thread(&peer, intent, context, &url)?;
        let context_id = agent.draw_id("ctx_", 16);
        store(agent, &id, &RemoteTask::new(url));
        agent.set_bridge_state(&id, CONTEXT_KEY, Some(Value::String(context_id)));
        agent.send_first_packet(&id);
        Some(id)
    }

    /// The packets the agent sent in threads with a remote A2A agent: queued as the A2A
    /// messages they become (none for a packet with no A2A meaning; nothing once the
    /// remote task is terminal).
    fn step(&self, agent: &mut Agent, step: &BridgeStep) {
        for p in &step.packets {
            queue(agent, &p.thread_id, &p.json);
        }
    }

    /// When a call of the A2A client is due next (a retry or a poll).
    fn wake(&self, agent: &Agent) -> Option<Timestamp> {
        agent
            .thread_views()
            .filter_map(|t| remote(agent, t.id()))
            .filter(|r| !r.in_flight)
            .filter_map(|r| r.next_at_ms)
            .map(|n| Timestamp::from_millis(u64::try_from(n).unwrap_or(0)))
            .min()
    }
}

/// A packet this agent sent in thread `id`: queued as the A2A message it becomes, when
/// the thread's peer is a remote A2A agent.
fn queue(agent: &mut Agent, id: &str, json: &str) {
    let Some(mut r) = remote(agent, id) else {
        return;
    };
    let Ok(p) = Packet::parse(json.as_bytes()) else {
        return;
    };
    let Some(ctx) = agent
        .thread_view(id)
        .map(|t| task::context_id(&t).to_string())
    else {
        return;
    };
    let Some(out) = client::outgoing(&p, &ctx) else {
        return;
    };
    if let Some(s) = r.state().filter(|s| s.is_terminal()) {
        let kind = p.body.type_name();
        agent.note(
            Some(id),
            format!("{kind} not sent: the A2A task is already {}", s.as_str()),
        );
        return;
    }
    match out {
        Outgoing::Message(m) => r.unsent.push(m),
        Outgoing::Cancel => {
            // What was queued but not sent yet is not sent at all: the user called the
            // thread off.
            r.unsent.clear();
            r.cancel = true;
        }
    }
    store(agent, id, &r);
}

fn take_calls(agent: &mut Agent) -> Vec<A2aClientCall> {
    let now_ms = agent.now().as_millis();
    let mut out = Vec::new();
    let ids: Vec<(String, bool)> = agent
        .thread_views()
        .filter(|t| t.bridge_state(REMOTE_KEY).is_some())
        .map(|t| (t.id().to_string(), t.state().is_terminal()))
        .collect();
    for (id, terminal) in ids {
        let Some(mut r) = remote(agent, &id) else {
            continue;
        };
        if r.in_flight
            || r.next_at_ms
                .is_some_and(|n| u64::try_from(n).unwrap_or(0) > now_ms)
        {
            continue;
        }
        // The JSON-RPC id is drawn only for a call made (the draw is recorded then).
        let mut rpc_id = || agent.draw_id("rpc_", 8);
        let remote_done = r.state().is_some_and(TaskState::is_terminal);
        let call = match (&r.endpoint, r.unsent.first()) {
            (None, _) if terminal => None,
            (None, _) => Some((
                A2aCallKind::Card,
                r.card_url.clone(),
                None,
                client::MAX_CARD,
            )),
            (Some(_), Some(_)) if remote_done => {
                r.unsent.clear();
                r.cancel = false;
                None
            }
            (Some(e), Some(m)) => Some((
                A2aCallKind::Send,
                e.clone(),
                Some(client::send_request(&rpc_id(), m, r.task_id.as_deref())),
                client::MAX_RESPONSE,
            )),
            (Some(e), None) if r.cancel => match &r.task_id {
                Some(task) if !remote_done => Some((
                    A2aCallKind::Cancel,
                    e.clone(),
                    Some(client::cancel_request(&rpc_id(), task)),
                    client::MAX_RESPONSE,
                )),
                _ => {
                    // No task was opened, or it already ended: nothing to cancel.
                    r.cancel = false;
                    None
                }
            },
            (Some(e), None) => match (&r.task_id, r.state()) {
                (Some(task), Some(TaskState::Working | TaskState::Submitted)) if !terminal => {
                    Some((
                        A2aCallKind::Poll,
                        e.clone(),
                        Some(client::get_request(&rpc_id(), task)),
                        client::MAX_RESPONSE,
                    ))
                }
                _ => None,
            },
        };
        let Some((kind, url, body, limit)) = call else {
            // Nothing more to ask (the thread or the task ended): no wake-up left.
            r.next_at_ms = None;
            store(agent, &id, &r);
            continue;
        };
        r.in_flight = true;
        store(agent, &id, &r);
        out.push(A2aClientCall {
            thread_id: id,
            kind,
            url,
            body: body.map(|b| b.to_string().into_bytes()),
            limit,
        });
    }
    out
}

fn on_outcome(agent: &mut Agent, call: &A2aClientCall, outcome: A2aOutcome) {
    let id = call.thread_id.clone();
    let Some(mut r) = remote(agent, &id) else {
        return;
    };
    r.in_flight = false;
    store(agent, &id, &r);
    let what = match call.kind {
        A2aCallKind::Card => "its agent card",
        A2aCallKind::Send | A2aCallKind::Poll | A2aCallKind::Cancel => "its JSON-RPC interface",
    };
    let (status, body) = match outcome {
        A2aOutcome::Network(e) => return retry_call(agent, &id, format!("{what}: {e}")),
        A2aOutcome::Response { status, .. } if status == 429 || status >= 500 => {
            return retry_call(agent, &id, format!("{what} answered HTTP {status}"))
        }
        A2aOutcome::TooLarge => {
            return failed(
                agent,
                &id,
                format!("{what} answered more than {} bytes", call.limit),
            )
        }
        A2aOutcome::Response { status, body } => (status, body),
    };
    r.attempts = 0;
    r.waited_ms = 0;
    r.next_at_ms = None;
    match call.kind {
        A2aCallKind::Card => {
            if status != 200 {
                store(agent, &id, &r);
                let why = format!("its agent card at {} answered HTTP {status}", r.card_url);
                return failed(agent, &id, why);
            }
            match client::read_card(&r.card_url, &body) {
                Ok(card) => {
                    r.endpoint = Some(card.endpoint);
                    r.name = Some(card.name);
                    store(agent, &id, &r);
                }
                Err(e) => {
                    store(agent, &id, &r);
                    failed(agent, &id, e.to_string())
                }
            }
        }
        A2aCallKind::Cancel => {
            r.cancel = false;
            let what = match client::read_response(&body) {
                Ok(view) => {
                    r.state = Some(view.state.as_str().to_string());
                    format!("The A2A task is {}.", view.state.as_str())
                }
                Err(e) => format!("The A2A agent did not cancel its task: {e}."),
            };
            store(agent, &id, &r);
            agent.note(Some(&id), what);
        }
        A2aCallKind::Send | A2aCallKind::Poll => {
            store(agent, &id, &r);
            let view = match client::read_response(&body) {
                Ok(v) => v,
                Err(e @ ClientError::Rpc { .. }) => return failed(agent, &id, e.to_string()),
                Err(e) => {
                    return failed(
                        agent,
                        &id,
                        if (200..300).contains(&status) {
                            e.to_string()
                        } else {
                            format!("HTTP {status}: {e}")
                        },
                    )
                }
            };
            if call.kind == A2aCallKind::Send {
                if !r.unsent.is_empty() {
                    r.unsent.remove(0);
                }
                // A new message: the task's answer to it is new, whatever it repeats.
                r.seen.retain(|m| m.starts_with("artifact:"));
                r.polls = 0;
                store(agent, &id, &r);
            }
            apply(agent, &id, view);
        }
    }
}

/// A call failed in a way worth another attempt: again after the retry rule's wait, or,
/// once it is spent, the thread cannot go on.
fn retry_call(agent: &mut Agent, id: &str, why: String) {
    let now = agent.now();
    let Some(mut r) = remote(agent, id) else {
        return;
    };
    r.attempts += 1;
    match retry::next_wait(r.attempts, r.waited_ms) {
        Some(wait) => {
            r.waited_ms += wait;
            r.next_at_ms = i64::try_from(now.add(Duration::from_millis(wait)).as_millis()).ok();
            store(agent, id, &r);
            agent.note(
                Some(id),
                format!(
                    "A2A call failed ({why}); attempt {} in {wait} ms",
                    r.attempts + 1
                ),
            );
        }
        None => {
            store(agent, id, &r);
            let n = r.attempts;
            failed(agent, id, format!("{why} (after {n} attempts)"));
        }
    }
}

/// The remote agent cannot be used any further (`why`): nothing more is sent; the
/// thread is declined — or, when this side already carries out a confirmed proposal,
/// the peer's part failed (FAILED, then undone).
fn failed(agent: &mut Agent, id: &str, why: String) {
    let Some(t) = agent.thread_view(id) else {
        return;
    };
    let peer = t.peer().clone();
    let state = t.state();
    let rid = t.resolution().map(|r| r.packet_id.to_string());
    let r = remote(agent, id);
    let name = r
        .as_ref()
        .map(|r| r.name.clone().unwrap_or_else(|| r.card_url.clone()))
        .unwrap_or_default();
    if let Some(mut r) = r {
        r.unsent.clear();
        r.cancel = false;
        r.next_at_ms = None;
        r.in_flight = false;
        store(agent, id, &r);
    }
    match state {
        ThreadState::Executing => {
            agent.bridged_said(
                &peer,
                id,
                Body::ExecutionReport(ExecutionReport {
                    resolution_id: rid.unwrap_or_default(),
                    status: "failed".into(),
                    failed_action: Some("a2a_task".into()),
                    error: Some(why),
                }),
            );
        }
        s if s.is_terminal()
            || matches!(
                s,
                ThreadState::Confirmed | ThreadState::Failed | ThreadState::Rollback
            ) =>
        {
            agent.note(
                Some(id),
                format!("A2A agent unusable after the thread ended: {why}"),
            );
        }
        _ => agent.decline_bridged(
            id,
            "the A2A agent cannot go on",
            format!("Thread {id} with the A2A agent {name} is declined: {why}."),
        ),
    }
}

/// The remote task as read after a call: what is new in it becomes packets from the
/// peer (SPEC-NOTES "The A2A v1.0 bridge: the client direction", the table).
fn apply(agent: &mut Agent, id: &str, view: RemoteView) {
    let now = agent.now();
    let me = agent.address().clone();
    let Some(t) = agent.thread_view(id) else {
        return;
    };
    let peer = t.peer().clone();
    let state = t.state();
    let open_from_peer = t.resolution().is_some_and(|r| *r.proposer == peer);
    let Some(mut r) = remote(agent, id) else {
        return;
    };
    if !view.id.is_empty() {
        r.task_id = Some(view.id.clone());
    }
    r.state = Some(view.state.as_str().to_string());
    if let Some(c) = &view.context_id {
        agent.set_bridge_state(id, CONTEXT_KEY, Some(Value::String(c.clone())));
    }
    if matches!(view.state, TaskState::Working | TaskState::Submitted) && !state.is_terminal() {
        let wait = client::FIRST_POLL_MS
            .checked_shl(r.polls.min(16))
            .unwrap_or(client::MAX_POLL_MS)
            .min(client::MAX_POLL_MS);
        r.polls = r.polls.saturating_add(1);
        r.next_at_ms = i64::try_from(now.add(Duration::from_millis(wait)).as_millis()).ok();
    }
    let marks = client::marks(&view);
    let fresh: Vec<String> = marks.into_iter().filter(|m| !r.seen.contains(m)).collect();
    if fresh.is_empty() {
        store(agent, id, &r);
        return;
    }
    r.seen.extend(fresh);
    if r.seen.len() > 64 {
        let cut = r.seen.len() - 64;
        r.seen.drain(..cut);
    }
    let name = r.name.clone().unwrap_or_else(|| r.card_url.clone());
    store(agent, id, &r);
    match view.state {
        TaskState::Working | TaskState::Submitted => {}
        TaskState::InputRequired if client::awaits_decision(&view) => {
            if !open_from_peer {
                agent.bridged_said(&peer, id, resolution(&view, &me));
            }
        }
        TaskState::InputRequired => {
            let needs = client::needs_of(&view);
            if needs.is_empty() {
                // Asked in words only: the user answers (`thread reply`), which goes out
                // as more context.
                let text = crate::display::line(&view.status_text, 300).into_owned();
                agent.escalate_bridged(
                    id,
                    format!(
                        "I need your input: the A2A agent {name} asks “{text}”. Answer with `a2acp thread reply {id} FIELD=VALUE …`."
                    ),
                );
            } else {
                agent.bridged_said(
                    &peer,
                    id,
                    Body::ContextRequest(ContextRequestBody {
                        needs,
                        context_provided: Context::new(),
                        permissions: None,
                    }),
                );
            }
        }
        TaskState::Completed => {
            let proposed = matches!(state, ThreadState::Confirmed | ThreadState::Executing)
                || (state == ThreadState::Proposed && open_from_peer);
            if !proposed {
                agent.bridged_said(&peer, id, resolution(&view, &me));
            }
            let rid = agent
                .thread_view(id)
                .and_then(|t| t.resolution())
                .map(|r| r.packet_id.to_string());
            if let Some(rid) = rid {
                // The remote agent's part is done: its task completed.
                agent.bridged_said(
                    &peer,
                    id,
                    Body::ExecutionReport(ExecutionReport {
                        resolution_id: rid,
                        status: "completed".into(),
                        failed_action: None,
                        error: None,
                    }),
                );
            }
        }
        TaskState::Rejected | TaskState::Canceled | TaskState::Failed | TaskState::AuthRequired => {
            let how = match view.state {
                TaskState::Rejected => "rejected the task",
                TaskState::Canceled => "cancelled the task",
                TaskState::AuthRequired => "requires authentication this agent cannot give",
                _ => "failed the task",
            };
            let text = crate::display::line(&view.status_text, 200).into_owned();
            let why = if text.is_empty() {
                format!("the A2A agent {how}")
            } else {
                format!("the A2A agent {how} (“{text}”)")
            };
            failed(agent, id, why);
        }
    }
}

/// The remote agent's proposal as its `resolution`, for this agent's user to confirm.
fn resolution(view: &RemoteView, me: &Address) -> Body {
    Body::Resolution(ResolutionBody {
        proposal: client::proposal_of(view),
        requires_confirmation_from: vec![me.clone()],
        actions_on_confirm: Vec::new(),
        confirmation_timeout: None,
        on_timeout: None,
        quorum: None,
    })
}

#[cfg(test)]
#[path = "remote_tests.rs"]
mod tests;
