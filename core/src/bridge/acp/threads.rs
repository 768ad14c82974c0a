//! An established ACP peer's requests as the agent's threads ([`Threads`], a registered
//! [`Bridge`]): a request opens a thread with the peer `agent:<agent-id>@acp.invalid`, or
//! continues the one it names, through the agent's bridge interface alone — the same
//! permission tiers, consent prompts and negotiator as any thread; what the agent
//! releases for that peer becomes the request's ACP response ([`Answer`]), or, once the
//! request was answered, a notification. The session ([`crate::bridge::acp::AcpSession`])
//! signs and sends it; this module holds no key and no state of its own (the thread's
//! record keeps the request waiting, under [`NAME`]).
//!
//! The mapping (SPEC-NOTES "ACP (seed 004)": requests and threads): a request's body
//! `action` is the thread's intent summary and `parameters` its context fields (the A2A
//! bridge's mapping of a message's text and data, [`crate::bridge::a2a::task`]); with
//! `thread_id` it continues that thread (the fields answer what the agent asked, a
//! `decision` answers its proposal). The answer's body is `{"thread_id", "state",
//! "packets"}`: the thread's id and lifecycle state and the packets the agent addressed to
//! the peer, as written.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::address::{Address, ACP_DOMAIN};
use crate::agent::permissions::{resolve_tier, Tier};
use crate::agent::{Agent, Bridge, BridgeMessage, BridgeStep};
use crate::bridge::a2a::server::Server;
use crate::bridge::a2a::task::{self as a2a_task, Inbound};
use crate::bridge::acp::error::code;
use crate::bridge::acp::io::{AcpEvent, Handoff};
use crate::time::Timestamp;

/// The bridge's name ([`Bridge::name`], [`BridgeMessage::bridge`]) and the key of a
/// thread's ACP state in its record.
pub const NAME: &str = "acp";

/// The a2acp address of the ACP agent `agent_id` (a valid `agent-id` is a valid
/// username).
pub fn peer_address(agent_id: &str) -> Option<Address> {
    Address::new(agent_id, ACP_DOMAIN).ok()
}

/// What a thread keeps of its ACP peer (its bridge state under [`NAME`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcpThread {
    /// The peer's `agent-id`.
    pub peer: String,
    /// The request of the peer waiting for its answer, if one does.
    pub request: Option<String>,
    /// This agent's request to the peer waiting for the peer's response, if one does
    /// ([`Threads::asked`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked: Option<String>,
}

/// What the bridge releases for its peer ([`BridgeMessage::body`], JSON): the session
/// answers `request` with `body` if it still waits ([`crate::bridge::acp::AcpSession::deliver`]);
/// with no request to answer (a thread this agent opened, or one whose request was
/// answered already) the runtime sends `body` as this agent's own `agent.request`
/// ([`crate::bridge::acp::AcpSession::request`]) and tells the bridge its id
/// ([`Threads::asked`]): the peer's response continues the thread ([`Threads::response`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The request it answers, if one waits.
    pub request: Option<String>,
    /// The body.
    pub body: Map<String, Value>,
    /// Whether it shares a field the agent's user marks ask_first or never_share: it is
    /// encrypted to the peer.
    pub sensitive: bool,
}

/// The ACP bridge on the agent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Threads;

impl Threads {
    /// A request (`id`, `body`) of the established ACP peer `peer`: it opens a thread,
    /// or continues the one it names. The thread's id, or the JSON-RPC error to answer
    /// with. Outputs follow as for any input (persist first); the answer comes as a
    /// [`BridgeMessage`] of this bridge, in this input or a later one.
    pub fn request(
        agent: &mut Agent,
        now: Timestamp,
        peer: &str,
        id: &str,
        body: &Map<String, Value>,
    ) -> Result<String, (i64, String)> {
        agent.bridged_input(now, |a| request_in(a, peer, id, body))
    }
}

/// A request or handoff of `peer` the agent could not take: the session answers it with
/// this error ([`crate::bridge::acp::AcpSession::respond`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refuse {
    /// The peer.
    pub peer: String,
    /// The request's or handoff's id.
    pub id: String,
    /// The JSON-RPC code.
    pub code: i64,
    /// Why.
    pub message: String,
}

impl Threads {
    /// What the session reported ([`AcpEvent`]), applied to the agent: a request or a
    /// handoff taken as a thread, a response continuing this agent's thread, an
    /// unanswered request told to the user; the rest noted in the agent's audit trail.
    /// `Some` when a request or handoff must be answered with an error.
    pub fn on_event(agent: &mut Agent, now: Timestamp, e: &AcpEvent) -> Option<Refuse> {
        let refuse = |peer: &str, id: &str, (code, message): (i64, String)| Refuse {
            peer: peer.to_string(),
            id: id.to_string(),
            code,
            message,
        };
        let note = |agent: &mut Agent, text: String| {
            agent.bridged_input(now, |a| a.note(None, text));
        };
        match e {
            AcpEvent::Request { peer, id, body, .. } => {
                Threads::request(agent, now, peer, id, body)
                    .err()
                    .map(|e| refuse(peer, id, e))
            }
            AcpEvent::Handoff {
                peer, id, handoff, ..
            } => Threads::handoff(agent, now, peer, id, handoff)
                .err()
                .map(|e| refuse(peer, id, e)),
            AcpEvent::Response { peer, id, outcome } => {
                Threads::response(agent, now, peer, id, outcome);
                None
            }
            AcpEvent::Unanswered { peer, id } => {
                Threads::unanswered(agent, now, peer, id);
                None
            }
            AcpEvent::Established {
                peer, principal, ..
            } => {
                note(
                    agent,
                    format!("ACP handshake with `{peer}` (principal `{principal}`) complete"),
                );
                None
            }
            AcpEvent::Notification { peer, .. } => {
                note(agent, format!("ACP notification from `{peer}`"));
                None
            }
            AcpEvent::TimedOut { peer, id } => {
                note(
                    agent,
                    format!("ACP request `{id}` of `{peer}` answered -32008: not answered in time"),
                );
                None
            }
            AcpEvent::Refused { peer, error } => {
                let from = peer.as_deref().unwrap_or("?");
                note(agent, format!("ACP message from `{from}` refused: {error}"));
                None
            }
        }
    }

    /// A handoff (`id`) of the established ACP peer `peer` (seed 004 §3.4): it opens a
    /// thread that goes on from what the handoff carried — its `context` are the
    /// thread's context fields, so the agent does not ask for them again; its `action`
    /// (or, without one, what `remaining` lists) is the intent. The handoff is answered
    /// like a request, by the thread's first answer. The thread's id, or the JSON-RPC
    /// error to answer with.
    pub fn handoff(
        agent: &mut Agent,
        now: Timestamp,
        peer: &str,
        id: &str,
        handoff: &Handoff,
    ) -> Result<String, (i64, String)> {
        let mut body = Map::new();
        let action = match handoff.rest.get("action") {
            Some(Value::String(a)) if !a.trim().is_empty() => a.clone(),
            _ => {
                let remaining: Vec<String> = handoff
                    .remaining
                    .iter()
                    .map(|r| match r {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect();
                format!("Continue a handoff: {}", remaining.join("; "))
            }
        };
        body.insert("action".into(), Value::String(action));
        body.insert("parameters".into(), Value::Object(handoff.context.clone()));
        agent.bridged_input(now, |a| request_in(a, peer, id, &body))
    }
}

fn request_in(
    agent: &mut Agent,
    peer_id: &str,
    id: &str,
    body: &Map<String, Value>,
) -> Result<String, (i64, String)> {
    let params = |why: String| (code::INVALID_PARAMS, why);
    let peer = peer_address(peer_id).ok_or_else(|| params("not a valid agent-id".into()))?;
    let text = match body.get("action") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(params("`body.action` is not a string".into())),
    };
    let mut data = match body.get("parameters") {
        None => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(_) => return Err(params("`body.parameters` is not an object".into())),
    };
    if let Some(d) = body.get("decision") {
        data.insert("decision".into(), d.clone());
    }
    let state = AcpThread {
        peer: peer_id.to_string(),
        request: Some(id.to_string()),
        asked: None,
    };
    let state = serde_json::to_value(&state).map_err(|e| (code::INTERNAL_ERROR, e.to_string()))?;
    match body.get("thread_id") {
        Some(Value::String(tid)) => {
            let view = agent
                .thread_view(tid)
                .filter(|t| t.peer() == &peer)
                .ok_or_else(|| params(format!("no thread `{tid}` with this agent")))?;
            let inbound = Inbound {
                message_id: id.to_string(),
                context_id: None,
                task_id: Some(tid.clone()),
                text,
                data,
            };
            let bodies = a2a_task::reply_bodies(&view, &inbound).map_err(|e| params(e.message))?;
            let tid = tid.clone();
            agent.set_bridge_state(&tid, NAME, Some(state));
            for b in bodies {
                agent.bridged_said(&peer, &tid, b);
            }
            Ok(tid)
        }
        Some(_) => Err(params("`body.thread_id` is not a string".into())),
        None => {
            if text.is_empty() {
                return Err(params("`body.action` is required to open a thread".into()));
            }
            let inbound = Inbound {
                message_id: id.to_string(),
                context_id: Some(format!("acp-{id}")),
                task_id: None,
                text,
                data,
            };
            let tid =
                Server::new_task(agent, &peer, &inbound).map_err(|e| (code::REFUSED, e.message))?;
            agent.set_bridge_state(&tid, NAME, Some(state));
            Ok(tid)
        }
    }
}

/// The context fields `packets` share (`context_provided`, `context`), merged in order.
fn shared_fields(packets: &[Value]) -> Map<String, Value> {
    let mut fields = Map::new();
    for p in packets {
        for key in ["context_provided", "context"] {
            if let Some(c) = p.get(key).and_then(Value::as_object) {
                fields.extend(c.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
    }
    fields
}

/// Whether `packet` shares a field whose tier for `peer` is ask_first or never_share.
fn sensitive(agent: &Agent, peer: &Address, packet: &Value) -> bool {
    packet
        .get("context_provided")
        .and_then(Value::as_object)
        .is_some_and(|c| {
            c.keys().any(|k| {
                matches!(
                    resolve_tier(agent.permissions(), agent.overrides(), peer, k),
                    Tier::AskFirst | Tier::NeverShare
                )
            })
        })
}

impl Bridge for Threads {
    fn name(&self) -> &'static str {
        NAME
    }

    fn peer_kind(&self) -> &'static str {
        "its ACP agent"
    }

    /// `thread start --to acp:<agent-id>`: a thread with the ACP agent `to`; its first
    /// packet goes as this agent's `agent.request` once the handshake completed.
    fn open(
        &self,
        agent: &mut Agent,
        to: &str,
        intent: crate::packet::Intent,
        context: crate::packet::Context,
    ) -> Option<String> {
        super::asking::open(agent, to, intent, context)
    }

    /// The packets released for ACP peers, by thread, become one [`Answer`] each.
    fn step(&self, agent: &mut Agent, step: &BridgeStep) {
        let mut threads: Vec<&str> = Vec::new();
        for p in &step.packets {
            if p.peer.domain() == ACP_DOMAIN && !threads.contains(&p.thread_id.as_str()) {
                threads.push(&p.thread_id);
            }
        }
        for tid in threads {
            let Some(view) = agent.thread_view(tid) else {
                continue;
            };
            let Some(mut state) = view
                .bridge_state(NAME)
                .and_then(|v| serde_json::from_value::<AcpThread>(v.clone()).ok())
            else {
                continue;
            };
            let peer = view.peer().clone();
            let packets: Vec<Value> = step
                .packets
                .iter()
                .filter(|p| p.thread_id == tid)
                .filter_map(|p| serde_json::from_str(&p.json).ok())
                .collect();
            let request = state.request.take();
            let mut body = json!({
                "thread_id": tid,
                "state": view.state().as_str(),
                "packets": packets,
            })
            .as_object()
            .cloned()
            .unwrap_or_default();
            if request.is_none() {
                // This agent's own request: what a peer that knows only seed 004 reads
                // (§8: `action`, `parameters`), beside the packets.
                body.insert(
                    "action".into(),
                    Value::String(view.intent().summary.clone()),
                );
                body.insert("parameters".into(), Value::Object(shared_fields(&packets)));
            }
            let answer = Answer {
                request,
                sensitive: packets.iter().any(|p| sensitive(agent, &peer, p)),
                body,
            };
            let Ok(body) = serde_json::to_string(&answer) else {
                continue;
            };
            let tid = tid.to_string();
            agent.set_bridge_state(&tid, NAME, serde_json::to_value(&state).ok());
            agent.send_bridge_message(BridgeMessage {
                bridge: NAME.into(),
                thread_id: tid,
                endpoint: state.peer,
                body,
            });
        }
    }
}
