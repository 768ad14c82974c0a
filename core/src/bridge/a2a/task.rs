//! Google A2A v1.0 tasks (seed 003; §18 "graceful degradation"): how an A2A client's
//! messages become packets of a thread, and how a thread reads as an A2A `Task` — pure,
//! like the rest of the core. The JSON shapes are those of the A2A v1.0 protocol buffers
//! in their JSON form (camelCase members, `TASK_STATE_*` and `ROLE_*` enum names), as the
//! official SDK sends and parses them.
//!
//! - an A2A `contextId` is kept in the thread ([`TaskThread::a2a_context`]); a task is one
//!   negotiation, i.e. one thread, and its `id` is the thread id;
//! - a message's text is the intent summary of a new task, its `data` parts its context
//!   fields (the deterministic negotiator's conventions, SPEC-NOTES "Context-field
//!   conventions");
//! - what the agent needs from the client, and a proposal awaiting the client's
//!   confirmation, read as `TASK_STATE_INPUT_REQUIRED` ([`task_state`], one table).
//!
//! SPEC-NOTES "The A2A v1.0 bridge (seed 003, §18)" states every decision.

use serde_json::{json, Map, Value};

use crate::address::Address;
use crate::agent::ThreadView;
use crate::packet::{
    Body, ContextBody, ContextResponseBody, ExecutionReport, Intent, Need, Packet,
    ResolutionStatus, Unavailable,
};
use crate::packet::{Context, ResolutionResponseBody};
use crate::thread_state::ThreadState;
use crate::time::Timestamp;

/// Bytes of one JSON-RPC request the agent reads at most (the listener caps the body
/// before; this holds for any caller).
pub const A2A_MAX_REQUEST: usize = 1024 * 1024;

/// The A2A protocol version this bridge speaks (agent card `protocolVersion`, the
/// `A2A-Version` header).
pub const PROTOCOL_VERSION: &str = "1.0";
/// Parts one message may carry.
pub const MAX_PARTS: usize = 32;
/// Bytes of text one message may carry, all its text parts together.
pub const MAX_TEXT: usize = 16 * 1024;
/// Longest id (`messageId`, `contextId`, `taskId`) accepted.
pub const MAX_ID: usize = 128;
/// Tasks one `ListTasks` page holds at most (the SDK's own maximum).
pub const MAX_PAGE: usize = 100;
/// Tasks one `ListTasks` page holds when the client does not say.
pub const DEFAULT_PAGE: usize = 50;

/// An A2A task state (`TaskState` of the v1.0 protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TaskState {
    /// Received, not yet worked on.
    Submitted,
    /// Being worked on: the agent, its user or its actions have the next move.
    Working,
    /// The client has the next move: context the agent asked for, or its decision on a
    /// proposal.
    InputRequired,
    /// Authentication needed (never used by this bridge).
    AuthRequired,
    /// Done (terminal).
    Completed,
    /// Cancelled by the client (terminal).
    Canceled,
    /// Declined by the agent's user (terminal).
    Rejected,
    /// Failed or expired (terminal).
    Failed,
}

impl TaskState {
    /// Its wire name (`TASK_STATE_WORKING`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::Failed => "TASK_STATE_FAILED",
        }
    }

    /// Reads a wire name (`None` for `TASK_STATE_UNSPECIFIED` and anything unknown).
    pub fn parse(s: &str) -> Option<TaskState> {
        [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::AuthRequired,
            TaskState::Completed,
            TaskState::Canceled,
            TaskState::Rejected,
            TaskState::Failed,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }

    /// Completed, canceled, rejected or failed: nothing more happens.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Canceled | TaskState::Rejected | TaskState::Failed
        )
    }

    /// Input or authentication required: the task waits for the client (a stream
    /// closes there).
    pub fn is_interrupted(self) -> bool {
        matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }
}

/// A JSON-RPC error of the A2A binding: its code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RpcError {
    /// The JSON-RPC code (`-32602`, `-32001`, …).
    pub code: i64,
    /// What is wrong, for a person.
    pub message: String,
}

/// JSON-RPC and A2A error codes (A2A v1.0 §"JSON-RPC error codes"; the SDK's
/// `JSON_RPC_ERROR_CODE_MAP`).
pub mod code {
    /// The body is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a JSON-RPC 2.0 request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params are wrong.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The agent failed.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// No such task (for this client).
    pub const TASK_NOT_FOUND: i64 = -32001;
    /// The task is terminal.
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    /// Push notifications are not offered.
    pub const PUSH_NOTIFICATION_NOT_SUPPORTED: i64 = -32003;
    /// Not possible for this task or agent.
    pub const UNSUPPORTED_OPERATION: i64 = -32004;
    /// A part the agent cannot read (files, bytes).
    pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
    /// No extended agent card.
    pub const EXTENDED_CARD_NOT_CONFIGURED: i64 = -32007;
    /// An `A2A-Version` this agent does not speak.
    pub const VERSION_NOT_SUPPORTED: i64 = -32009;
    /// Refused for now, not for good: a cap on what waits for the agent's user (or on
    /// open streams) is reached, and the same request may succeed later. A JSON-RPC
    /// implementation-defined server error (A2A's own codes, -32001 to -32099, have none
    /// for it); HTTP+JSON answers it 429 `RESOURCE_EXHAUSTED` with `Retry-After`.
    pub const TEMPORARILY_REFUSED: i64 = -32000;
}

/// Seconds a client is told to wait before it tries a temporarily refused request again
/// (`Retry-After`, `google.rpc.RetryInfo`).
pub const RETRY_AFTER_SECS: u64 = 60;

/// A JSON-RPC error response: `code`, `message` and, as A2A v1.0 §9.5 requires, `data`
/// with a `google.rpc.ErrorInfo` ([`crate::bridge::a2a::rest::error_details`]).
pub fn rpc_error_response(id: &Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": {
        "code": code,
        "message": message,
        "data": crate::bridge::a2a::rest::error_details(code),
    }})
}

impl RpcError {
    /// An error with this code and message.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }
    fn params(message: impl Into<String>) -> Self {
        RpcError::new(code::INVALID_PARAMS, message)
    }
}

/// One A2A `Message` from a client, as the core reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Inbound {
    /// Its `messageId`.
    pub message_id: String,
    /// The `contextId` it names, if any.
    pub context_id: Option<String>,
    /// The `taskId` it continues, if any.
    pub task_id: Option<String>,
    /// Its text parts, joined by new lines.
    pub text: String,
    /// Its data parts, merged (a later part's field wins).
    pub data: Context,
}

fn opt_id(m: &Map<String, Value>, key: &str) -> Result<Option<String>, RpcError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s.len() <= MAX_ID && !s.chars().any(char::is_control) => {
            Ok(Some(s.clone()))
        }
        Some(Value::String(_)) => Err(RpcError::params(format!(
            "message.{key}: at most {MAX_ID} bytes, no control characters"
        ))),
        Some(_) => Err(RpcError::params(format!("message.{key}: must be a string"))),
    }
}

/// Reads a `Message` (the `message` member of `SendMessage`'s params). Refused with
/// `-32602` (invalid params): not an object, no `messageId`, a role other than
/// `ROLE_USER`, no parts or more than [`MAX_PARTS`], a part with no content or two, a
/// `data` part that is not an object, text over [`MAX_TEXT`]; with `-32005` (content type
/// not supported): a `raw` or `url` part (files).
pub fn parse_message(v: &Value) -> Result<Inbound, RpcError> {
    let m = v
        .as_object()
        .ok_or_else(|| RpcError::params("params.message: must be an object"))?;
    let message_id =
        opt_id(m, "messageId")?.ok_or_else(|| RpcError::params("message.messageId: required"))?;
    match m.get("role").and_then(Value::as_str) {
        Some("ROLE_USER") => {}
        Some(r) => {
            return Err(RpcError::params(format!(
                "message.role: `{}`: a client's message has the role ROLE_USER",
                crate::display::line(r, 40)
            )))
        }
        None => return Err(RpcError::params("message.role: required (ROLE_USER)")),
    }
    let parts = m
        .get("parts")
        .and_then(Value::as_array)
        .ok_or_else(|| RpcError::params("message.parts: required, an array"))?;
    if parts.is_empty() || parts.len() > MAX_PARTS {
        return Err(RpcError::params(format!(
            "message.parts: 1 to {MAX_PARTS} parts"
        )));
    }
    let mut text = String::new();
    let mut data = Context::new();
    for (i, p) in parts.iter().enumerate() {
        let p = p
            .as_object()
            .ok_or_else(|| RpcError::params(format!("message.parts[{i}]: must be an object")))?;
        let contents: Vec<&str> = ["text", "raw", "url", "data"]
            .into_iter()
            .filter(|k| p.get(*k).is_some_and(|v| !v.is_null()))
            .collect();
        match contents.as_slice() {
            ["text"] => {
                let t = p.get("text").and_then(Value::as_str).ok_or_else(|| {
                    RpcError::params(format!("message.parts[{i}].text: must be a string"))
                })?;
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(t);
                if text.len() > MAX_TEXT {
                    return Err(RpcError::params(format!(
                        "message: at most {MAX_TEXT} bytes of text"
                    )));
                }
            }
            ["data"] => match p.get("data") {
                Some(Value::Object(o)) => {
                    for (k, v) in o {
                        data.insert(k.clone(), v.clone());
                    }
                }
                _ => {
                    return Err(RpcError::params(format!(
                    "message.parts[{i}].data: must be an object (its members are context fields)"
                )))
                }
            },
            ["raw"] | ["url"] => {
                return Err(RpcError::new(
                    code::CONTENT_TYPE_NOT_SUPPORTED,
                    format!("message.parts[{i}]: files are not supported; send text or data"),
                ))
            }
            [] => {
                return Err(RpcError::params(format!(
                    "message.parts[{i}]: no content (text, raw, url or data)"
                )))
            }
            _ => {
                return Err(RpcError::params(format!(
                    "message.parts[{i}]: one content only ({})",
                    contents.join(", ")
                )))
            }
        }
    }
    Ok(Inbound {
        message_id,
        context_id: opt_id(m, "contextId")?,
        task_id: opt_id(m, "taskId")?,
        text,
        data,
    })
}

/// Words of a text that make a new task a scheduling one (the negotiator's event words
/// and a few verbs).
const SCHEDULING_WORDS: &[&str] = &[
    "schedul",
    "dinner",
    "lunch",
    "breakfast",
    "brunch",
    "supper",
    "meal",
    "meet",
    "call",
    "coffee",
    "appointment",
];

/// The packet body that opens a thread for a client's first message of a task: its
/// intent (`data.category` if given, else `scheduling` when the text names an event or
/// the data carries availability, else `general`; the summary is the text's first line,
/// at most 200 characters), its data as context (`category` taken out), and the needs the
/// negotiator asks in a first packet for that intent — the client speaks no a2acp, so the
/// bridge asks on its behalf what its side needs to see.
pub fn first_body(m: &Inbound) -> Result<Body, RpcError> {
    let mut context = m.data.clone();
    let category = match context.remove("category") {
        Some(Value::String(c)) if !c.trim().is_empty() && c.len() <= 64 => c,
        Some(_) => {
            return Err(RpcError::params(
                "data.category: a short string (e.g. scheduling)",
            ))
        }
        None => {
            let lower = m.text.to_lowercase();
            let scheduling = SCHEDULING_WORDS.iter().any(|w| lower.contains(w))
                || [
                    "time_windows",
                    "availability",
                    "proposed_date",
                    "event_type",
                ]
                .iter()
                .any(|k| context.contains_key(*k));
            if scheduling { "scheduling" } else { "general" }.to_string()
        }
    };
    let line = m.text.lines().map(str::trim).find(|l| !l.is_empty());
    let summary = match line {
        Some(l) => crate::display::line(l, 200).into_owned(),
        None => format!("{category} request"),
    };
    let intent = Intent {
        category,
        summary,
        urgency: None,
        scope_change: None,
    };
    let needs = crate::negotiator::initial_needs(&intent, &context);
    Ok(Body::Context(ContextBody {
        intent: Some(intent),
        context,
        needs,
        ..Default::default()
    }))
}

/// What the A2A mapping reads of a thread: the agent's [`ThreadView`] and the bridge's
/// own state in it (SPEC-NOTES "Adding a bridge").
pub trait TaskThread {
    /// The thread id, which is the task id.
    fn id(&self) -> &str;
    /// The thread's peer: the A2A client.
    fn peer(&self) -> &Address;
    /// Where the thread stands in its lifecycle.
    fn state(&self) -> ThreadState;
    /// Whether the thread is halted (its peer's key changed).
    fn halted(&self) -> bool;
    /// The thread's packets, oldest first.
    fn packets(&self) -> impl DoubleEndedIterator<Item = Logged<'_>> + ExactSizeIterator;
    /// Whether the peer gave `field`, or said it has no value for it.
    fn answered(&self, field: &str) -> bool;
    /// The open resolution: the packet that proposed it, and the answers so far.
    fn resolution(&self) -> Option<OpenProposal<'_>>;
    /// Whether a consent prompt of this agent's user is open in the thread.
    fn consent_open(&self) -> bool;
    /// Whether the thread was handed to this agent's user.
    fn escalated(&self) -> bool;
    /// When the thread last moved.
    fn last_activity(&self) -> Timestamp;
    /// The A2A `contextId` of the thread, if the client gave one.
    fn a2a_context(&self) -> Option<&str>;
    /// The client's message as it sent it, for the packet `packet_id` it became
    /// (`null`: a further packet of one message).
    fn a2a_sent(&self, packet_id: &str) -> Option<&Value>;
}

pub use crate::agent::{Logged, OpenProposal};

/// The A2A bridge's view of a thread: the agent's [`ThreadView`], and the bridge's own
/// state of the thread in it (the client's context and its messages as sent).
impl TaskThread for ThreadView<'_> {
    fn id(&self) -> &str {
        ThreadView::id(self)
    }
    fn peer(&self) -> &Address {
        ThreadView::peer(self)
    }
    fn state(&self) -> ThreadState {
        ThreadView::state(self)
    }
    fn halted(&self) -> bool {
        ThreadView::halted(self)
    }
    fn packets(&self) -> impl DoubleEndedIterator<Item = Logged<'_>> + ExactSizeIterator {
        ThreadView::packets(self)
    }
    fn answered(&self, field: &str) -> bool {
        ThreadView::answered(self, field)
    }
    fn resolution(&self) -> Option<OpenProposal<'_>> {
        ThreadView::resolution(self)
    }
    fn consent_open(&self) -> bool {
        ThreadView::consent_open(self)
    }
    fn escalated(&self) -> bool {
        ThreadView::escalated(self)
    }
    fn last_activity(&self) -> Timestamp {
        ThreadView::last_activity(self)
    }
    fn a2a_context(&self) -> Option<&str> {
        self.bridge_state(CONTEXT_KEY).and_then(Value::as_str)
    }
    fn a2a_sent(&self, packet_id: &str) -> Option<&Value> {
        self.bridge_state(SENT_KEY).and_then(|m| m.get(packet_id))
    }
}

/// The key of a thread's A2A `contextId` in its record (the bridge's state): when its
/// peer is an A2A client, or a plain A2A agent this agent drives. The task id is the
/// thread id.
pub const CONTEXT_KEY: &str = "a2a_context";
/// The key of the A2A client's messages as it sent them, by the id of the first packet
/// each became (its `messageId`, every part, its metadata): a task's history shows
/// these, not the packets. A message that became several packets maps the others to
/// `null` (shown once, as the first).
pub const SENT_KEY: &str = "a2a_sent";

/// The fields the agent asked the client for that are neither given nor declined, with
/// the need as the agent sent it (the latest ask of each field).
pub fn open_needs(t: &impl TaskThread) -> Vec<Need> {
    let mut out: Vec<Need> = Vec::new();
    for h in t.packets().filter(|h| h.outgoing) {
        let Ok(p) = Packet::parse(h.json.as_bytes()) else {
            continue;
        };
        for n in p.body.needs() {
            out.retain(|x| x.field != n.field);
            out.push(n.clone());
        }
    }
    out.retain(|n| !t.answered(&n.field));
    out
}

/// Whether the open proposal waits for the client's answer.
pub fn awaiting_decision(t: &impl TaskThread) -> bool {
    t.state() == ThreadState::Proposed
        && t.resolution().is_some_and(|r| {
            r.body.requires_confirmation_from.contains(t.peer())
                && !r.answers.iter().any(|(who, _)| who == t.peer())
        })
}

/// The client's decision on a proposal: `data.decision`, else the text's first word.
fn decision(m: &Inbound) -> Option<(ResolutionStatus, Option<&'static str>)> {
    let word = match m.data.get("decision") {
        Some(Value::String(s)) => s.trim().to_lowercase(),
        _ => m
            .text
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .find(|w| !w.is_empty())
            .unwrap_or_default()
            .to_lowercase(),
    };
    Some(match word.as_str() {
        "confirm" | "confirmed" | "accept" | "accepted" | "yes" | "ok" => {
            (ResolutionStatus::Confirmed, None)
        }
        "decline" | "declined" | "reject" | "no" => {
            (ResolutionStatus::Declined, Some("user_declined"))
        }
        "counter" | "different_time" => {
            (ResolutionStatus::CounterRequested, Some("different_time"))
        }
        "different_place" => (ResolutionStatus::CounterRequested, Some("different_place")),
        _ => return None,
    })
}

/// The packet bodies a client's message on an existing task becomes, from where the
/// thread stands:
///
/// - a proposal awaits its decision → a `resolution_response` (and, when it confirms, an
///   `execution_report` "completed": a plain A2A client carries out no a2acp action of
///   its own, so its part is done once it confirmed);
/// - fields were asked → a `context_response`: the data given, and every asked field it
///   leaves out declined (an A2A answer is complete as sent);
/// - otherwise → a `context` with the data (more context, no intent).
///
/// Refused (`-32004`): a terminal task; (`-32602`) an answer to a proposal that is no
/// decision, or a message carrying nothing.
pub fn reply_bodies(t: &impl TaskThread, m: &Inbound) -> Result<Vec<Body>, RpcError> {
    if t.state().is_terminal() || t.halted() {
        return Err(RpcError::new(
            code::UNSUPPORTED_OPERATION,
            format!(
                "task {} is {}: it takes no more messages",
                t.id(),
                task_state(t).as_str()
            ),
        ));
    }
    if awaiting_decision(t) {
        let (status, class) = decision(m).ok_or_else(|| {
            RpcError::params(
                "this task awaits a decision on its proposal: send data {\"decision\": \"confirm\"}, \"decline\" or \"counter\"",
            )
        })?;
        let rid = t.resolution().map(|r| r.packet_id.to_string());
        let mut bodies = vec![Body::ResolutionResponse(ResolutionResponseBody {
            resolution_id: rid.clone(),
            status,
            reason_class: class.map(str::to_string),
            message_to_other_agent: None,
            alternative: None,
            signature: None,
            confirmations: Vec::new(),
        })];
        if status == ResolutionStatus::Confirmed {
            bodies.push(Body::ExecutionReport(ExecutionReport {
                resolution_id: rid.unwrap_or_default(),
                status: "completed".into(),
                failed_action: None,
                error: None,
            }));
        }
        return Ok(bodies);
    }
    let mut data = m.data.clone();
    data.remove("decision");
    let open = open_needs(t);
    if !open.is_empty() {
        let unavailable = open
            .iter()
            .filter(|n| !data.contains_key(&n.field))
            .map(|n| Unavailable {
                field: n.field.clone(),
                status: "declined".into(),
                hint: None,
            })
            .collect();
        return Ok(vec![Body::ContextResponse(ContextResponseBody {
            context_provided: data,
            context_unavailable: unavailable,
            permissions: None,
        })]);
    }
    if data.is_empty() {
        return Err(RpcError::params(
            "nothing to add: this task asks for nothing now; send context fields as data",
        ));
    }
    Ok(vec![Body::Context(ContextBody {
        context: data,
        ..Default::default()
    })])
}

/// The A2A state of a thread with a client (SPEC-NOTES "The A2A v1.0 bridge", the
/// table): INITIATED / NEGOTIATING / STALLED → input required while a field asked of the
/// client is open, else working; PROPOSED → input required while the proposal waits for
/// the client, else working (the agent's user has it); CONFIRMED / EXECUTING / ROLLBACK →
/// working; COMPLETED → completed; DECLINED → canceled when the client closed it, else
/// rejected; FAILED, EXPIRED → failed. A halted thread is failed.
pub fn task_state(t: &impl TaskThread) -> TaskState {
    if t.halted() {
        return TaskState::Failed;
    }
    match t.state() {
        ThreadState::Initiated | ThreadState::Negotiating | ThreadState::Stalled => {
            if open_needs(t).is_empty() {
                TaskState::Working
            } else {
                TaskState::InputRequired
            }
        }
        ThreadState::Proposed => {
            if awaiting_decision(t) {
                TaskState::InputRequired
            } else {
                TaskState::Working
            }
        }
        ThreadState::Confirmed | ThreadState::Executing | ThreadState::Rollback => {
            TaskState::Working
        }
        ThreadState::Completed => TaskState::Completed,
        ThreadState::Declined => {
            if closed_by_client(t) {
                TaskState::Canceled
            } else {
                TaskState::Rejected
            }
        }
        ThreadState::Failed | ThreadState::Expired => TaskState::Failed,
    }
}

/// Whether the client's last packet in the thread was a cancel.
fn closed_by_client(t: &impl TaskThread) -> bool {
    t.packets()
        .rev()
        .find(|h| !h.outgoing)
        .and_then(|h| Packet::parse(h.json.as_bytes()).ok())
        .is_some_and(|p| {
            matches!(&p.body, Body::ResolutionResponse(b)
                if b.status == ResolutionStatus::Declined
                    && matches!(b.reason_class.as_deref(), None | Some("user_declined")))
        })
}

fn text_part(s: String) -> Value {
    json!({ "text": s })
}

fn data_part(v: Value) -> Value {
    json!({ "data": v })
}

/// One packet of the thread as an A2A `Message` (history): the client's as `ROLE_USER`,
/// the agent's as `ROLE_AGENT`; a line of text and the packet's content as data.
fn packet_message(t: &impl TaskThread, context_id: &str, p: &Packet, outgoing: bool) -> Value {
    let mut data = Map::new();
    data.insert(
        "a2acp_type".into(),
        Value::String(p.body.type_name().into()),
    );
    let mut line = p.body.type_name().replace('_', " ");
    match &p.body {
        Body::Context(b) => {
            if let Some(i) = &b.intent {
                line = i.summary.clone();
                data.insert("intent".into(), json!(i));
            }
            data.insert("context".into(), Value::Object(b.context.clone()));
            if !b.needs.is_empty() {
                data.insert("needs".into(), json!(b.needs));
            }
        }
        Body::ContextRequest(b) => {
            line = needs_line(&b.needs);
            data.insert("needs".into(), json!(b.needs));
            data.insert("context".into(), Value::Object(b.context_provided.clone()));
        }
        Body::ContextResponse(b) => {
            data.insert("context".into(), Value::Object(b.context_provided.clone()));
            let declined: Vec<&str> = b
                .context_unavailable
                .iter()
                .map(|u| u.field.as_str())
                .collect();
            if !declined.is_empty() {
                data.insert("declined".into(), json!(declined));
            }
        }
        Body::Resolution(b) => {
            line = format!("Proposed: {}", b.proposal.summary);
            data.insert("proposal".into(), json!(b.proposal));
        }
        Body::ResolutionResponse(b) => {
            data.insert("status".into(), json!(b.status));
        }
        _ => {}
    }
    json!({
        "messageId": p.packet_id,
        "contextId": context_id,
        "taskId": t.id(),
        "role": if outgoing { "ROLE_AGENT" } else { "ROLE_USER" },
        "parts": [text_part(line), data_part(Value::Object(data))],
    })
}

fn needs_line(needs: &[Need]) -> String {
    let list: Vec<String> = needs
        .iter()
        .map(|n| {
            let pr = match n.priority {
                crate::packet::Priority::Required => "required",
                crate::packet::Priority::Helpful => "helpful",
                crate::packet::Priority::NiceToHave => "nice to have",
            };
            if n.reason.is_empty() {
                format!("{} ({pr})", n.field)
            } else {
                format!("{} ({pr}: {})", n.field, n.reason)
            }
        })
        .collect();
    format!(
        "Needed: {}. Reply with a data part holding these fields; a field left out counts as declined.",
        list.join("; ")
    )
}

/// The status message of a task: what the client is asked, or where it stands.
fn status_message(t: &impl TaskThread, context_id: &str, state: TaskState) -> Value {
    let (line, data) = match state {
        TaskState::InputRequired if awaiting_decision(t) => {
            let summary = t
                .resolution()
                .map(|r| r.body.proposal.summary.clone())
                .unwrap_or_default();
            (
                format!(
                    "Proposed: {summary}. Reply with data {{\"decision\": \"confirm\"}}, \"decline\" or \"counter\"."
                ),
                json!({ "awaiting": "decision", "choices": ["confirm", "decline", "counter"] }),
            )
        }
        TaskState::InputRequired => {
            let needs = open_needs(t);
            (
                needs_line(&needs),
                json!({ "awaiting": "context", "needs": needs }),
            )
        }
        _ => {
            let why = match t.state() {
                ThreadState::Proposed => "waiting for the agent's user to confirm the proposal",
                ThreadState::Confirmed | ThreadState::Executing => {
                    "carrying out the confirmed proposal"
                }
                ThreadState::Rollback => "undoing what was done",
                ThreadState::Completed => "done",
                ThreadState::Declined if state == TaskState::Canceled => "cancelled by the client",
                ThreadState::Declined => "declined by the agent's user",
                ThreadState::Expired => "the proposal expired unconfirmed",
                ThreadState::Failed => "an action failed",
                _ if t.consent_open() => "waiting for the agent's user to consent to sharing",
                _ if t.escalated() => "handed to the agent's user",
                _ => "negotiating",
            };
            (
                why.to_string(),
                json!({ "thread_state": t.state().as_str() }),
            )
        }
    };
    json!({
        "messageId": format!("status-{}-{}", t.id(), t.packets().len()),
        "contextId": context_id,
        "taskId": t.id(),
        "role": "ROLE_AGENT",
        "parts": [text_part(line), data_part(data)],
    })
}

/// The proposal of a thread as an artifact (awaiting confirmation, or what was agreed).
fn artifacts(t: &impl TaskThread) -> Vec<Value> {
    let Some(r) = t.resolution() else {
        return Vec::new();
    };
    let description = match t.state() {
        ThreadState::Proposed => "proposal awaiting confirmation",
        ThreadState::Completed => "agreed and carried out",
        _ => "proposal",
    };
    vec![json!({
        "artifactId": format!("proposal-{}", r.packet_id),
        "name": "proposal",
        "description": description,
        "parts": [
            text_part(r.body.proposal.summary.clone()),
            data_part(json!({
                "resolution_id": r.packet_id,
                "proposal": r.body.proposal,
                "actions_on_confirm": r.body.actions_on_confirm,
            })),
        ],
    })]
}

/// The `contextId` of a thread (its own id when none was recorded).
pub fn context_id(t: &impl TaskThread) -> &str {
    t.a2a_context().unwrap_or(t.id())
}

/// The `TaskStatus` of a thread.
pub fn status_json(t: &impl TaskThread) -> Value {
    let state = task_state(t);
    json!({
        "state": state.as_str(),
        "message": status_message(t, context_id(t), state),
        "timestamp": t.last_activity().to_rfc3339(),
    })
}

/// A thread as an A2A `Task`: id, contextId, status, the proposal as artifact, and the
/// last `history_length` packets as history (`None`: all; 0: none): the client's
/// messages as it sent them, the agent's packets as messages.
pub fn task_json(
    t: &impl TaskThread,
    history_length: Option<usize>,
    with_artifacts: bool,
) -> Value {
    let ctx = context_id(t);
    let keep = history_length.unwrap_or(usize::MAX);
    let skip = t.packets().len().saturating_sub(keep);
    let history: Vec<Value> = t
        .packets()
        .skip(skip)
        .filter_map(|h| {
            // The client's message as it sent it (`null`: a further packet of one).
            if let Some(m) = t.a2a_sent(h.packet_id).filter(|_| !h.outgoing) {
                return (!m.is_null()).then(|| m.clone());
            }
            let p = Packet::parse(h.json.as_bytes()).ok()?;
            (p.body.type_name() != "thread_state").then(|| packet_message(t, ctx, &p, h.outgoing))
        })
        .collect();
    let mut task = json!({
        "id": t.id(),
        "contextId": ctx,
        "status": status_json(t),
        "history": history,
    });
    if with_artifacts {
        if let Some(m) = task.as_object_mut() {
            m.insert("artifacts".into(), Value::Array(artifacts(t)));
        }
    }
    task
}

/// The stream events a subscriber gets after the task changed: a status update, and the
/// proposal as an artifact update when one is open. `last` is the state the subscriber
/// was sent before; nothing when neither changed.
pub fn update_events(
    t: &impl TaskThread,
    last: Option<TaskState>,
    last_artifact: Option<&str>,
) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(a) = artifacts(t).into_iter().next() {
        if a.get("artifactId").and_then(Value::as_str) != last_artifact {
            out.push(json!({ "artifactUpdate": {
                "taskId": t.id(), "contextId": context_id(t), "artifact": a, "lastChunk": true,
            }}));
        }
    }
    if last != Some(task_state(t)) || !out.is_empty() {
        out.push(json!({ "statusUpdate": {
            "taskId": t.id(), "contextId": context_id(t), "status": status_json(t),
        }}));
    }
    out
}

/// The id of a thread's proposal artifact, if one is open.
pub fn artifact_id(t: &impl TaskThread) -> Option<String> {
    t.resolution().map(|r| format!("proposal-{}", r.packet_id))
}
