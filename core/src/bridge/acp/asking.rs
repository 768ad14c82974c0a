//! Threads this agent opens with an ACP agent (`thread start --to acp:<agent-id>`): the
//! packets the agent addresses to that peer go as this agent's own `agent.request`s
//! (the runtime sends them through the session and tells the bridge each request's id,
//! [`Threads::asked`]); the peer's response is read back as what the peer said in the
//! thread ([`Threads::response`]), with the mapping a request of the peer is read with:
//! `parameters` (or, for a peer that answers as seed 004 §8 does, the result's own
//! members) are context fields, `decision` answers a proposal.

use serde_json::{Map, Value};

use crate::agent::{Agent, NotifyKind};
use crate::bridge::a2a::task::{self as a2a_task, Inbound};
use crate::bridge::acp::headers::valid_agent_id;
use crate::bridge::acp::io::RemoteError;
use crate::bridge::acp::threads::{peer_address, AcpThread, Threads, NAME};
use crate::packet::{Context, Intent};
use crate::time::Timestamp;

/// Members of a response's result that are the thread's, not the peer's context fields.
const RESERVED: [&str; 5] = ["thread_id", "state", "packets", "action", "decision"];

/// [`crate::agent::Bridge::open`] for ACP: `to` is the peer's `agent-id` (`acp:` in front
/// allowed).
pub(super) fn open(
    agent: &mut Agent,
    to: &str,
    intent: Intent,
    context: Context,
) -> Option<String> {
    let id = to.strip_prefix("acp:").unwrap_or(to);
    let peer = match peer_address(id).filter(|_| valid_agent_id(id)) {
        Some(p) => p,
        None => {
            agent.tell_user(
                None,
                NotifyKind::Info,
                format!("No thread started: `{id}` is not an ACP agent-id (1–64 of a-z 0-9 _ -)."),
            );
            return None;
        }
    };
    let tid = agent.create_bridged_thread(&peer, intent, context, &format!("acp:{id}"))?;
    let state = AcpThread {
        peer: id.to_string(),
        request: None,
        asked: None,
    };
    agent.set_bridge_state(&tid, NAME, serde_json::to_value(&state).ok());
    agent.send_first_packet(&tid);
    Some(tid)
}

/// The thread of `peer` whose state says this agent's request `id` waits, and that state.
fn asking(agent: &Agent, peer: &str, id: &str) -> Option<(String, AcpThread)> {
    agent.thread_views().find_map(|t| {
        let s: AcpThread = serde_json::from_value(t.bridge_state(NAME)?.clone()).ok()?;
        (s.peer == peer && s.asked.as_deref() == Some(id)).then(|| (t.id().to_string(), s))
    })
}

impl Threads {
    /// The runtime sent thread `thread`'s packets as this agent's request `id`: its
    /// response continues the thread.
    pub fn asked(agent: &mut Agent, now: Timestamp, thread: &str, id: &str) {
        agent.bridged_input(now, |a| {
            let Some(mut s) = a
                .thread_view(thread)
                .and_then(|t| t.bridge_state(NAME).cloned())
                .and_then(|v| serde_json::from_value::<AcpThread>(v).ok())
            else {
                return;
            };
            s.asked = Some(id.to_string());
            a.set_bridge_state(thread, NAME, serde_json::to_value(&s).ok());
        });
    }

    /// The peer's response to this agent's request `id`: what it says continues the
    /// thread (a result whose fields answer what was asked, a decision on a proposal,
    /// more context); an error is told to the user, and the thread declined if the peer
    /// refused it outright. The thread's id, if the request was one of a thread's.
    pub fn response(
        agent: &mut Agent,
        now: Timestamp,
        peer: &str,
        id: &str,
        outcome: &Result<Map<String, Value>, RemoteError>,
    ) -> Option<String> {
        agent.bridged_input(now, |a| response_in(a, peer, id, outcome))
    }

    /// The ACP agent of thread `thread` cannot be reached (`why`: no key registered for
    /// it at the gateway): the thread is declined.
    pub fn unreachable(agent: &mut Agent, now: Timestamp, thread: &str, why: &str) {
        agent.bridged_input(now, |a| {
            let Some(peer) = a.thread_view(thread).map(|t| t.peer().user().to_string()) else {
                return;
            };
            a.decline_bridged(
                thread,
                "peer_unreachable",
                format!("The ACP agent `{peer}` cannot be reached: {why}."),
            );
        });
    }

    /// This agent's request `id` to `peer` got no answer in time: the user is told, and
    /// the thread waits on (a later message of the peer may still continue it).
    pub fn unanswered(agent: &mut Agent, now: Timestamp, peer: &str, id: &str) {
        agent.bridged_input(now, |a| {
            if let Some((tid, mut s)) = asking(a, peer, id) {
                s.asked = None;
                a.set_bridge_state(&tid, NAME, serde_json::to_value(&s).ok());
                a.tell_user(
                    Some(&tid),
                    NotifyKind::Stalled,
                    format!("The ACP agent `{peer}` did not answer in time."),
                );
            }
        });
    }
}

fn response_in(
    agent: &mut Agent,
    peer_id: &str,
    id: &str,
    outcome: &Result<Map<String, Value>, RemoteError>,
) -> Option<String> {
    let (tid, mut state) = asking(agent, peer_id, id)?;
    state.asked = None;
    agent.set_bridge_state(&tid, NAME, serde_json::to_value(&state).ok());
    let peer = peer_address(peer_id)?;
    let body = match outcome {
        Ok(body) => body,
        Err(e) => {
            agent.decline_bridged(
                &tid,
                "peer_refused",
                format!(
                    "The ACP agent `{peer_id}` refused the thread: {} ({}).",
                    e.message, e.code
                ),
            );
            return Some(tid);
        }
    };
    let text = match body.get("action") {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let mut data = match body.get("parameters") {
        Some(Value::Object(o)) => o.clone(),
        _ => body
            .iter()
            .filter(|(k, _)| !RESERVED.contains(&k.as_str()) && k.as_str() != "parameters")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    if let Some(d) = body.get("decision") {
        data.insert("decision".into(), d.clone());
    }
    let inbound = Inbound {
        message_id: id.to_string(),
        context_id: None,
        task_id: Some(tid.clone()),
        text,
        data,
    };
    let bodies = {
        let view = agent.thread_view(&tid)?;
        a2a_task::reply_bodies(&view, &inbound)
    };
    match bodies {
        Ok(bodies) => {
            for b in bodies {
                agent.bridged_said(&peer, &tid, b);
            }
        }
        // A response that carries nothing the thread can take (an acknowledgement): the
        // thread waits for the peer's next message.
        Err(e) => agent.note(
            Some(&tid),
            format!("the ACP agent's response adds nothing: {}", e.message),
        ),
    }
    Some(tid)
}
