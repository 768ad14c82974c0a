//! The client direction of the A2A v1.0 bridge (seed 003, §18 "graceful degradation"): an
//! a2acp agent driving a task on a plain A2A agent — pure, like the rest of the core.
//!
//! - [`card_url`] / [`read_card`]: where the agent card is, and which of its interfaces
//!   this agent can use (a `JSONRPC` interface of protocol version 1.x, no security
//!   requirement); anything else is refused with what the card offers;
//! - [`outgoing`]: the A2A `Message` one packet of the thread becomes (its text, and
//!   the context fields it shares as a data part), `CancelTask` for a decline, or none
//!   when the packet has no A2A meaning (an execution report, a thread-state summary);
//! - [`send_request`] / [`get_request`] / [`cancel_request`]: the JSON-RPC requests
//!   (`SendMessage`, `GetTask`, `CancelTask`);
//! - [`read_response`]: the remote task as this agent reads it ([`RemoteView`]), and from
//!   it [`needs_of`] (what the remote agent asks) and [`proposal_of`] (what it proposes).
//!
//! The thread keeps what it knows of the remote task in [`RemoteTask`]. SPEC-NOTES "The A2A
//! v1.0 bridge: the client direction" states every decision.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::address::{Address, A2A_DOMAIN};
use crate::bridge::a2a::task::{TaskState, PROTOCOL_VERSION};
use crate::packet::{Body, Context, Need, Packet, Priority, Proposal, ResolutionStatus};

/// The path of the agent card under an agent's base URL (A2A v1.0, RFC 8615).
pub const CARD_PATH: &str = "/.well-known/agent-card.json";
/// Bytes of an agent card read at most.
pub const MAX_CARD: usize = 256 * 1024;
/// Bytes of one JSON-RPC response read at most.
pub const MAX_RESPONSE: usize = 1024 * 1024;
/// Longest card URL accepted.
pub const MAX_URL: usize = 2048;
/// Needs taken from one input-required status (a `context_request` carries at most 5).
pub const MAX_NEEDS: usize = 5;
/// The first wait before polling a task that is still working, in milliseconds; it
/// doubles after each poll up to [`MAX_POLL_MS`].
pub const FIRST_POLL_MS: u64 = 500;
/// The longest wait between two polls of a working task, in milliseconds.
pub const MAX_POLL_MS: u64 = 10_000;

/// Why the client cannot go on with a remote A2A agent (shown to the user, the thread is
/// declined).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The address given is not an http(s) URL.
    #[error("`{0}` is not an http:// or https:// URL")]
    BadUrl(String),
    /// The card is not one this agent can use.
    #[error("the agent card at {url} cannot be used: {why}")]
    Card {
        /// The card's URL.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The remote agent answered with a JSON-RPC error.
    #[error("the A2A agent refused ({code}): {message}")]
    Rpc {
        /// Its JSON-RPC code.
        code: i64,
        /// Its message (cut to 200 characters).
        message: String,
    },
    /// The remote agent's answer is not a JSON-RPC response this agent can read.
    #[error("the A2A agent's answer cannot be read: {0}")]
    Malformed(String),
}

/// What a thread knows of its remote A2A task (the thread record's `a2a_remote`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RemoteTask {
    /// Where the agent card is.
    pub card_url: String,
    /// The JSON-RPC endpoint the card names, once it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The remote agent's name (from its card).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The remote task's id, once it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The remote task's last known state (its wire name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Messages to send, in order (A2A `Message`s without `taskId`, filled at sending).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsent: Vec<Value>,
    /// What of the remote task was already turned into packets: its state, status
    /// message id and artifact ids, so a poll seeing the same task adds nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seen: Vec<String>,
    /// Failed attempts of the current call (retried per `retry`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: u32,
    /// Milliseconds waited between the attempts of the current call.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub waited_ms: u64,
    /// Polls of a working task in a row (the poll interval doubles).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub polls: u32,
    /// Not before this time (milliseconds since the epoch): a retry or the next poll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_at_ms: Option<i64>,
    /// This user called the thread off: once the messages before it are sent, the
    /// remote task is cancelled (`CancelTask`) rather than told "decline" in words.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
    /// A call is out (not persisted: after a restart the call is made again).
    #[serde(skip)]
    pub in_flight: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl RemoteTask {
    /// A remote task to be opened at the card `card_url`.
    pub fn new(card_url: String) -> Self {
        RemoteTask {
            card_url,
            ..Default::default()
        }
    }

    /// The remote task's last known state.
    pub fn state(&self) -> Option<TaskState> {
        self.state.as_deref().and_then(TaskState::parse)
    }
}

/// The card URL for what the user gave: a card URL as is, a base URL with
/// [`CARD_PATH`] appended. Refused: anything but `http://` or `https://`, a URL with
/// spaces or control characters, over [`MAX_URL`] bytes.
pub fn card_url(to: &str) -> Result<String, ClientError> {
    let to = to.trim();
    let lower = to.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    let ok = rest.is_some_and(|r| {
        let host = r.split(['/', '?', '#']).next().unwrap_or("");
        !host.is_empty()
    }) && to.len() <= MAX_URL
        && !to.chars().any(|c| c.is_whitespace() || c.is_control());
    if !ok {
        return Err(ClientError::BadUrl(
            crate::display::line(to, 80).into_owned(),
        ));
    }
    if to.ends_with(".json") {
        return Ok(to.to_string());
    }
    Ok(format!("{}{CARD_PATH}", to.trim_end_matches('/')))
}

/// Whether what the user named as a recipient is an A2A agent's URL.
pub fn is_url(to: &str) -> bool {
    let l = to.trim_start().to_ascii_lowercase();
    l.starts_with("http://") || l.starts_with("https://")
}

/// The peer address a remote A2A agent has in this agent's threads:
/// `agent:web-<12 hex digits of SHA-256 of its card URL>@a2a.invalid` — the same agent
/// (card) is the same peer, to the permission overrides and relationship memory.
pub fn peer_address(card_url: &str) -> Result<Address, ClientError> {
    let h = Sha256::digest(card_url.as_bytes());
    let hex: String = h.iter().take(6).map(|b| format!("{b:02x}")).collect();
    Address::new(&format!("web-{hex}"), A2A_DOMAIN)
        .map_err(|e| ClientError::BadUrl(format!("{card_url}: {e}")))
}

/// What this agent takes from a card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteCard {
    /// The JSON-RPC endpoint.
    pub endpoint: String,
    /// The agent's name.
    pub name: String,
}

/// Reads an agent card (`url` is where it came from, for the messages): the first of its
/// `supportedInterfaces` with `protocolBinding` `JSONRPC` and a `protocolVersion` 1.x, its
/// `url` an http(s) URL. Refused: over [`MAX_CARD`], not a JSON object, no such interface
/// (the message lists what the card offers), a card that requires authentication
/// (`securityRequirements`: this agent holds no credentials for other A2A agents).
pub fn read_card(url: &str, bytes: &[u8]) -> Result<RemoteCard, ClientError> {
    let bad = |why: String| ClientError::Card {
        url: crate::display::line(url, 120).into_owned(),
        why,
    };
    if bytes.len() > MAX_CARD {
        return Err(bad(format!("larger than {MAX_CARD} bytes")));
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON ({e})")))?;
    let card = v
        .as_object()
        .ok_or_else(|| bad("not a JSON object".into()))?;
    let name = card
        .get("name")
        .and_then(Value::as_str)
        .map(|n| crate::display::line(n, 80).into_owned())
        .unwrap_or_else(|| "an A2A agent".into());
    let Some(interfaces) = card.get("supportedInterfaces").and_then(Value::as_array) else {
        return Err(bad(
            "no `supportedInterfaces` (an A2A 1.0 card lists its interfaces there)".into(),
        ));
    };
    let mut offered = Vec::new();
    let mut found = None;
    for i in interfaces.iter().take(32) {
        let binding = i
            .get("protocolBinding")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let version = i
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let iurl = i.get("url").and_then(Value::as_str).unwrap_or("");
        offered.push(format!(
            "{} {}",
            crate::display::line(binding, 20),
            crate::display::line(version, 10)
        ));
        let major = version.split('.').next() == PROTOCOL_VERSION.split('.').next();
        if found.is_none() && binding == "JSONRPC" && major && is_url(iurl) && iurl.len() <= MAX_URL
        {
            found = Some(iurl.to_string());
        }
    }
    if card
        .get("securityRequirements")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty())
    {
        return Err(bad(
            "it requires authentication, and this agent holds no credentials for A2A agents".into(),
        ));
    }
    let endpoint = found.ok_or_else(|| {
        bad(format!(
            "no JSON-RPC interface of A2A {PROTOCOL_VERSION} (it offers: {})",
            if offered.is_empty() {
                "nothing".to_string()
            } else {
                offered.join(", ")
            }
        ))
    })?;
    Ok(RemoteCard { endpoint, name })
}

fn data_message(id: &str, context_id: &str, text: String, data: Map<String, Value>) -> Value {
    let mut parts = vec![json!({ "text": text })];
    if !data.is_empty() {
        parts.push(json!({ "data": Value::Object(data) }));
    }
    json!({
        "messageId": id,
        "contextId": context_id,
        "role": "ROLE_USER",
        "parts": parts,
    })
}

/// What a packet this agent sends in the thread does to the remote task.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    /// An A2A `Message` (without `taskId`, added when it is sent).
    Message(Value),
    /// `CancelTask`: declining ends the thread, and the A2A way to end a task is to
    /// cancel it.
    Cancel,
}

/// What a packet this agent sends in the thread becomes on the remote task, or `None`
/// for a packet with no A2A meaning:
///
/// - `context` → its intent summary (or "More context.") as text, its context fields as
///   a data part (with `category` on the first);
/// - `context_response` → "Here is what I can share." (naming the declined fields) and
///   the fields given as data;
/// - `resolution_response` confirming or asking for a counter → the decision (`confirm`,
///   `counter`) as text and as data `{"decision": …}`; declining → [`Outgoing::Cancel`];
/// - `context_request` → its needs as text and data (`{"needs": […]}`);
/// - anything else (`execution_report`, `thread_state`, …) → nothing.
pub fn outgoing(p: &Packet, context_id: &str) -> Option<Outgoing> {
    let id = &p.packet_id;
    Some(Outgoing::Message(match &p.body {
        Body::Context(b) => {
            let mut data = b.context.clone();
            let text = match &b.intent {
                Some(i) => {
                    data.insert("category".into(), Value::String(i.category.clone()));
                    i.summary.clone()
                }
                None => "More context.".to_string(),
            };
            if b.intent.is_none() && data.is_empty() {
                return None;
            }
            data_message(id, context_id, text, data)
        }
        Body::ContextResponse(b) => {
            let declined: Vec<&str> = b
                .context_unavailable
                .iter()
                .map(|u| u.field.as_str())
                .collect();
            let text = if declined.is_empty() {
                "Here is what I can share.".to_string()
            } else {
                format!(
                    "Here is what I can share. Not shared: {}.",
                    declined.join(", ")
                )
            };
            data_message(id, context_id, text, b.context_provided.clone())
        }
        Body::ResolutionResponse(b) => {
            let decision = match b.status {
                ResolutionStatus::Confirmed => "confirm",
                ResolutionStatus::CounterRequested => "counter",
                ResolutionStatus::Declined => return Some(Outgoing::Cancel),
            };
            let mut data = Map::new();
            data.insert("decision".into(), Value::String(decision.into()));
            if let Some(r) = &b.reason_class {
                data.insert("reason".into(), Value::String(r.clone()));
            }
            data_message(id, context_id, decision.to_string(), data)
        }
        Body::ContextRequest(b) => {
            let fields: Vec<&str> = b.needs.iter().map(|n| n.field.as_str()).collect();
            let mut data = Map::new();
            data.insert("needs".into(), json!(b.needs));
            data_message(
                id,
                context_id,
                format!("Could you tell me: {}?", fields.join(", ")),
                data,
            )
        }
        _ => return None,
    }))
}

/// The `SendMessage` request carrying `message` on the remote task `task_id` (none: a
/// new task). Blocking (`returnImmediately` false): the answer is the task where it
/// stopped — input required, or done.
pub fn send_request(rpc_id: &str, message: &Value, task_id: Option<&str>) -> Value {
    let mut m = message.clone();
    if let (Some(t), Some(o)) = (task_id, m.as_object_mut()) {
        o.insert("taskId".into(), Value::String(t.to_string()));
    }
    json!({
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "SendMessage",
        "params": {
            "message": m,
            "configuration": { "acceptedOutputModes": ["text/plain", "application/json"] },
        },
    })
}

/// The `CancelTask` request for the remote task `task_id`.
pub fn cancel_request(rpc_id: &str, task_id: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "CancelTask",
        "params": { "id": task_id },
    })
}

/// The `GetTask` request for the remote task `task_id` (no history: the status and the
/// artifacts are what this agent reads).
pub fn get_request(rpc_id: &str, task_id: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "GetTask",
        "params": { "id": task_id, "historyLength": 0 },
    })
}

/// An artifact of the remote task, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteArtifact {
    /// Its `artifactId`.
    pub id: String,
    /// Its text parts, joined.
    pub text: String,
    /// Its data parts, merged.
    pub data: Context,
}

/// The remote task as this agent reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteView {
    /// Its id.
    pub id: String,
    /// Its `contextId`.
    pub context_id: Option<String>,
    /// Its state.
    pub state: TaskState,
    /// Its status message's id, if any.
    pub status_id: Option<String>,
    /// Its status message's text parts, joined.
    pub status_text: String,
    /// Its status message's data parts, merged.
    pub status_data: Context,
    /// Its artifacts.
    pub artifacts: Vec<RemoteArtifact>,
}

fn parts_of(v: Option<&Value>) -> (String, Context) {
    let mut text = String::new();
    let mut data = Context::new();
    for p in v.and_then(Value::as_array).into_iter().flatten().take(64) {
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(t);
        }
        if let Some(Value::Object(o)) = p.get("data") {
            for (k, v) in o {
                data.insert(k.clone(), v.clone());
            }
        }
    }
    (crate::display::lines(&text, 2000).into_owned(), data)
}

fn short(s: &str) -> String {
    crate::display::line(s, 200).into_owned()
}

/// Reads a JSON-RPC response of the remote agent: its error (→ [`ClientError::Rpc`]), or
/// its task (`result.task` of `SendMessage`, the bare `result` of `GetTask`). A `Message`
/// answered instead of a task (`result.message`: the agent replied without a task) reads
/// as a completed task whose status message is that message. Anything else, or over
/// [`MAX_RESPONSE`], is [`ClientError::Malformed`].
pub fn read_response(bytes: &[u8]) -> Result<RemoteView, ClientError> {
    if bytes.len() > MAX_RESPONSE {
        return Err(ClientError::Malformed(format!(
            "larger than {MAX_RESPONSE} bytes"
        )));
    }
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ClientError::Malformed(format!("not JSON ({e})")))?;
    if let Some(e) = v.get("error") {
        return Err(ClientError::Rpc {
            code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: short(e.get("message").and_then(Value::as_str).unwrap_or("")),
        });
    }
    let result = v
        .get("result")
        .and_then(Value::as_object)
        .ok_or_else(|| ClientError::Malformed("no `result` object".into()))?;
    if let Some(Value::Object(m)) = result.get("message") {
        let (text, data) = parts_of(m.get("parts"));
        return Ok(RemoteView {
            id: m
                .get("taskId")
                .and_then(Value::as_str)
                .map(short)
                .unwrap_or_default(),
            context_id: m.get("contextId").and_then(Value::as_str).map(short),
            state: TaskState::Completed,
            status_id: m.get("messageId").and_then(Value::as_str).map(short),
            status_text: text,
            status_data: data,
            artifacts: Vec::new(),
        });
    }
    let task = match result.get("task") {
        Some(Value::Object(t)) => t,
        Some(_) => {
            return Err(ClientError::Malformed(
                "`result.task` is not an object".into(),
            ))
        }
        None => result,
    };
    let id = task
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 256)
        .ok_or_else(|| ClientError::Malformed("the task has no `id`".into()))?;
    let status = task
        .get("status")
        .and_then(Value::as_object)
        .ok_or_else(|| ClientError::Malformed("the task has no `status`".into()))?;
    let state_name = status.get("state").and_then(Value::as_str).unwrap_or("");
    let state = TaskState::parse(state_name).ok_or_else(|| {
        ClientError::Malformed(format!("unknown task state `{}`", short(state_name)))
    })?;
    let message = status.get("message");
    let (status_text, status_data) = parts_of(message.and_then(|m| m.get("parts")));
    let mut artifacts = Vec::new();
    for a in task
        .get("artifacts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(16)
    {
        let (text, data) = parts_of(a.get("parts"));
        artifacts.push(RemoteArtifact {
            id: a
                .get("artifactId")
                .and_then(Value::as_str)
                .map(short)
                .unwrap_or_default(),
            text,
            data,
        });
    }
    Ok(RemoteView {
        id: id.to_string(),
        context_id: task.get("contextId").and_then(Value::as_str).map(short),
        state,
        status_id: message
            .and_then(|m| m.get("messageId"))
            .and_then(Value::as_str)
            .map(short),
        status_text,
        status_data,
        artifacts,
    })
}

fn field_name(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-'))
    .then(|| s.to_string())
}

/// What an input-required status asks of this agent: its data part's `needs` (strings,
/// or objects with `field`, `reason`, `priority` as a2acp writes them), else its
/// `fields` or `required` (strings); at most [`MAX_NEEDS`]. Empty: the remote agent asked
/// in words only.
pub fn needs_of(view: &RemoteView) -> Vec<Need> {
    let list = ["needs", "fields", "required"]
        .iter()
        .find_map(|k| view.status_data.get(*k).and_then(Value::as_array));
    let mut out: Vec<Need> = Vec::new();
    for item in list.into_iter().flatten() {
        let need = match item {
            Value::String(s) => field_name(s).map(|field| Need {
                field,
                reason: short(&view.status_text),
                priority: Priority::Required,
            }),
            Value::Object(o) => o
                .get("field")
                .and_then(Value::as_str)
                .and_then(field_name)
                .map(|field| Need {
                    field,
                    reason: short(o.get("reason").and_then(Value::as_str).unwrap_or("")),
                    priority: o
                        .get("priority")
                        .cloned()
                        .and_then(|p| serde_json::from_value(p).ok())
                        .unwrap_or(Priority::Required),
                }),
            _ => None,
        };
        if let Some(n) = need {
            if !out.iter().any(|x| x.field == n.field) {
                out.push(n);
            }
        }
        if out.len() == MAX_NEEDS {
            break;
        }
    }
    out
}

/// Whether the remote task asks for a decision on a proposal (an a2acp agent's own
/// bridge says so with `{"awaiting": "decision"}`; any task holding an artifact while it
/// requires input does too).
pub fn awaits_decision(view: &RemoteView) -> bool {
    view.state == TaskState::InputRequired
        && (view.status_data.get("awaiting").and_then(Value::as_str) == Some("decision")
            || (!view.artifacts.is_empty() && needs_of(view).is_empty()))
}

/// The remote agent's proposal: its last artifact (text the summary, data the details —
/// an a2acp bridge's `proposal` object read as such), else the status message.
pub fn proposal_of(view: &RemoteView) -> Proposal {
    let (text, data) = match view.artifacts.last() {
        Some(a) => (a.text.clone(), a.data.clone()),
        None => (view.status_text.clone(), view.status_data.clone()),
    };
    if let Some(Ok(p)) = data
        .get("proposal")
        .map(|p| serde_json::from_value::<Proposal>(p.clone()))
    {
        if !p.summary.trim().is_empty() {
            return p;
        }
    }
    let summary = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| crate::display::line(l, 200).into_owned())
        .unwrap_or_else(|| "the A2A agent's answer".into());
    Proposal {
        summary,
        details: data,
        alternatives: Vec::new(),
        reasoning: String::new(),
    }
}

/// The marks of a view recorded in [`RemoteTask::seen`] once it was turned into packets.
pub fn marks(view: &RemoteView) -> Vec<String> {
    let mut m = vec![format!(
        "{}:{}",
        view.state.as_str(),
        view.status_id.as_deref().unwrap_or("")
    )];
    m.extend(view.artifacts.iter().map(|a| format!("artifact:{}", a.id)));
    m
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
