//! An ACP message (seed 004 §2, §3): a JSON-RPC 2.0 object whose `params` (a request,
//! notification or handoff), `result` (a response) or `error.data` (an error response)
//! holds the identity `headers`, the `body` and the sender's `signature`.
//! [`Message::parse`] checks everything that needs no key and no memory — size, nesting,
//! shape, the six headers, the type's `id` rule, the signature's form — and
//! [`Message::build`] writes one, signed. What needs the sender's key or what was seen
//! before is the session's ([`crate::bridge::acp::session`]).

use serde_json::{json, Map, Value};

use crate::bridge::acp::error::AcpError;
use crate::bridge::acp::headers::{Headers, MessageType};
use crate::bridge::acp::sign;
use crate::crypto::IdentityKey;

/// Bytes of one message read at most (checked before it is parsed).
pub const MAX_MESSAGE: usize = 256 * 1024;
/// Deepest nesting of arrays and objects accepted (the message object is level 1).
pub const MAX_DEPTH: usize = 32;
/// Longest `id`, in bytes.
pub const MAX_ID: usize = 128;
/// Longest error `message`, in bytes, read or written.
pub const MAX_ERROR_MESSAGE: usize = 1024;

/// A method of ACP (`agent.<name>`): the four types' own and the two handshake steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Method {
    /// `agent.announce`: handshake step 1 (a notification).
    Announce,
    /// `agent.capabilities`: handshake step 3 (a notification).
    Capabilities,
    /// `agent.request`.
    Request,
    /// `agent.notification`.
    Notification,
    /// `agent.handoff`.
    Handoff,
}

impl Method {
    /// Its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Announce => "agent.announce",
            Method::Capabilities => "agent.capabilities",
            Method::Request => "agent.request",
            Method::Notification => "agent.notification",
            Method::Handoff => "agent.handoff",
        }
    }

    /// Reads a wire name.
    pub fn parse(s: &str) -> Option<Method> {
        [
            Method::Announce,
            Method::Capabilities,
            Method::Request,
            Method::Notification,
            Method::Handoff,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
    }

    /// The `message-type` a message of this method declares.
    pub fn message_type(self) -> MessageType {
        match self {
            Method::Announce | Method::Capabilities | Method::Notification => {
                MessageType::Notification
            }
            Method::Request => MessageType::Request,
            Method::Handoff => MessageType::Handoff,
        }
    }

    /// Whether it is a handshake step rather than a substantive message.
    pub fn is_handshake(self) -> bool {
        matches!(self, Method::Announce | Method::Capabilities)
    }
}

/// What a message is, by its JSON-RPC shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A call (`method` and `params`): request, notification, handoff, handshake step.
    Call(Method),
    /// A response with a `result`.
    Result,
    /// An error response: its code and message.
    Error {
        /// The JSON-RPC code.
        code: i64,
        /// What went wrong, for a person.
        message: String,
        /// The header it names (`error.data.header`), for a refused header.
        header: Option<String>,
    },
}

impl Kind {
    /// The member holding headers, body and signature.
    fn container(&self) -> &'static str {
        match self {
            Kind::Call(_) => "params",
            Kind::Result => "result",
            Kind::Error { .. } => "error",
        }
    }
}

/// A message whose form was checked ([`Message::parse`]); its signature is not verified
/// yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Call, result or error.
    pub kind: Kind,
    /// The JSON-RPC id (absent in notifications; `None` in an error answering a message
    /// whose id could not be read).
    pub id: Option<String>,
    /// The identity headers.
    pub headers: Headers,
    /// The body (an error response's is optional and then empty).
    pub body: Map<String, Value>,
    /// The whole message as received: what the signature covers.
    pub value: Value,
}

fn invalid(why: impl Into<String>) -> AcpError {
    AcpError::InvalidRequest(why.into())
}

/// The nesting depth of `v` (a scalar is 0, `[]` and `{}` are 1), without recursion.
pub fn depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                max = max.max(d);
                stack.extend(a.iter().map(|x| (x, d + 1)));
            }
            Value::Object(o) => {
                max = max.max(d);
                stack.extend(o.values().map(|x| (x, d + 1)));
            }
            _ => {}
        }
    }
    max
}

/// Whether `s` is a valid `id`: 1–128 printable ASCII characters, no space.
pub fn valid_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ID && s.bytes().all(|b| b.is_ascii_graphic())
}

fn read_id(o: &Map<String, Value>, null_ok: bool) -> Result<Option<String>, AcpError> {
    match o.get("id") {
        Some(Value::String(s)) if valid_id(s) => Ok(Some(s.clone())),
        Some(Value::Null) if null_ok => Ok(None),
        None => Err(invalid("`id` is required")),
        Some(_) => Err(invalid(format!(
            "`id` must be a string of 1-{MAX_ID} printable ASCII characters"
        ))),
    }
}

impl Message {
    /// Checks a received message, in this order (the first failure answers): size,
    /// JSON, nesting, `jsonrpc`, shape (`method`+`params`, `result` or `error`), the
    /// method, the container, the six headers, `message-type` against the shape, the
    /// `id` rule of the type, `body`, the signature's form. Never panics.
    pub fn parse(bytes: &[u8]) -> Result<Message, AcpError> {
        if bytes.len() > MAX_MESSAGE {
            return Err(AcpError::TooLarge {
                size: bytes.len(),
                max: MAX_MESSAGE,
            });
        }
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| AcpError::Parse(e.to_string()))?;
        if depth(&value) > MAX_DEPTH {
            return Err(AcpError::TooDeep(MAX_DEPTH));
        }
        Message::from_value(value)
    }

    /// [`Message::parse`] of a value already read (and bounded).
    pub fn from_value(value: Value) -> Result<Message, AcpError> {
        let o = value
            .as_object()
            .ok_or_else(|| invalid("not a JSON object"))?;
        if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(invalid("`jsonrpc` must be \"2.0\""));
        }
        let shape = ["method", "result", "error"]
            .into_iter()
            .filter(|k| o.contains_key(*k))
            .collect::<Vec<_>>();
        let kind = match shape.as_slice() {
            ["method"] => {
                let m = o
                    .get("method")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid("`method` is not a string"))?;
                Kind::Call(
                    Method::parse(m)
                        .ok_or_else(|| AcpError::MethodNotFound(m.chars().take(64).collect()))?,
                )
            }
            ["result"] => Kind::Result,
            ["error"] => {
                let e = o
                    .get("error")
                    .and_then(Value::as_object)
                    .ok_or_else(|| invalid("`error` is not an object"))?;
                let code = e
                    .get("code")
                    .and_then(Value::as_i64)
                    .ok_or_else(|| invalid("`error.code` is not an integer"))?;
                let message = e
                    .get("message")
                    .and_then(Value::as_str)
                    .filter(|m| m.len() <= MAX_ERROR_MESSAGE)
                    .ok_or_else(|| {
                        invalid(format!(
                            "`error.message` is not a string of at most {MAX_ERROR_MESSAGE} bytes"
                        ))
                    })?;
                let header = e
                    .get("data")
                    .and_then(|d| d.get("header"))
                    .and_then(Value::as_str)
                    .filter(|h| h.len() <= 64)
                    .map(str::to_string);
                Kind::Error {
                    code,
                    message: message.to_string(),
                    header,
                }
            }
            _ => {
                return Err(invalid(
                    "exactly one of `method`, `result`, `error` must be present",
                ))
            }
        };
        let allowed: &[&str] = match kind {
            Kind::Call(_) => &["jsonrpc", "method", "params", "id"],
            Kind::Result => &["jsonrpc", "result", "id"],
            Kind::Error { .. } => &["jsonrpc", "error", "id"],
        };
        if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(invalid(format!(
                "unknown member `{}`",
                k.chars().take(64).collect::<String>()
            )));
        }
        let container = match &kind {
            Kind::Error { .. } => o.get("error").and_then(|e| e.get("data")),
            _ => o.get(kind.container()),
        };
        let c = container.and_then(Value::as_object).ok_or_else(|| {
            invalid(match kind {
                Kind::Error { .. } => "`error.data` is not an object",
                Kind::Result => "`result` is not an object",
                Kind::Call(_) => "`params` is not an object",
            })
        })?;
        let headers = Headers::parse(c.get("headers"))?;
        let expected = match kind {
            Kind::Call(m) => m.message_type(),
            Kind::Result | Kind::Error { .. } => MessageType::Response,
        };
        if headers.message_type != expected {
            return Err(AcpError::HeaderMalformed {
                header: "message-type",
                why: format!(
                    "`{}` does not match the message, a {}",
                    headers.message_type.as_str(),
                    expected.as_str()
                ),
            });
        }
        let id = match kind {
            Kind::Call(m) if m.message_type() == MessageType::Notification => {
                if o.contains_key("id") {
                    return Err(invalid("a notification has no `id`"));
                }
                None
            }
            Kind::Call(_) | Kind::Result => read_id(o, false)?,
            Kind::Error { .. } => read_id(o, true)?,
        };
        let body = match (c.get("body"), &kind) {
            (Some(Value::Object(b)), _) => b.clone(),
            (None, Kind::Error { .. }) => Map::new(),
            (None, _) => return Err(AcpError::InvalidBody("`body` is required".into())),
            (Some(_), _) => return Err(AcpError::InvalidBody("`body` is not an object".into())),
        };
        sign::read_signature(c)?;
        Ok(Message {
            kind,
            id,
            headers,
            body,
            value,
        })
    }

    /// The container object (`params`, `result` or `error.data`).
    pub fn container(&self) -> Option<&Map<String, Value>> {
        match self.kind {
            Kind::Error { .. } => self.value.get("error")?.get("data")?.as_object(),
            _ => self.value.get(self.kind.container())?.as_object(),
        }
    }

    /// The method's wire name, or `None` for a response.
    pub fn method(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Call(m) => Some(m.as_str()),
            _ => None,
        }
    }

    /// Writes a message and signs it with `key` ([`sign::sign`]): `body` is `None` only
    /// in an error response without one. The JSON text to send.
    pub fn build(
        kind: &Kind,
        id: Option<&str>,
        headers: &Headers,
        body: Option<&Map<String, Value>>,
        key: &IdentityKey,
    ) -> Result<String, AcpError> {
        let mut c = Map::new();
        c.insert("headers".into(), headers.to_json());
        if let Some(b) = body {
            c.insert("body".into(), Value::Object(b.clone()));
        }
        let mut m = Map::new();
        m.insert("jsonrpc".into(), json!("2.0"));
        match kind {
            Kind::Call(method) => {
                m.insert("method".into(), json!(method.as_str()));
                m.insert("params".into(), Value::Object(c));
            }
            Kind::Result => {
                m.insert("result".into(), Value::Object(c));
            }
            Kind::Error {
                code,
                message,
                header,
            } => {
                if let Some(h) = header {
                    c.insert("header".into(), json!(h));
                }
                let message: String = message
                    .char_indices()
                    .take_while(|(i, c)| i + c.len_utf8() <= MAX_ERROR_MESSAGE)
                    .map(|(_, c)| c)
                    .collect();
                m.insert(
                    "error".into(),
                    json!({ "code": code, "message": message, "data": Value::Object(c) }),
                );
            }
        }
        match (kind, id) {
            (Kind::Call(method), _) if method.message_type() == MessageType::Notification => {}
            (_, Some(id)) => {
                m.insert("id".into(), json!(id));
            }
            (Kind::Error { .. }, None) => {
                m.insert("id".into(), Value::Null);
            }
            (_, None) => return Err(invalid("this message needs an `id`")),
        }
        let mut value = Value::Object(m);
        sign::sign(&mut value, key)?;
        serde_json::to_string(&value).map_err(|e| AcpError::Parse(e.to_string()))
    }
}
