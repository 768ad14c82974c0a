//! The A2A v1.0 HTTP+JSON binding (the REST routes of the protocol's `google.api.http`
//! annotations, A2A v1.0 §11) as a translation, not a second implementation: a REST
//! request (HTTP method, path, query string, body) becomes the JSON-RPC request
//! [`crate::bridge::a2a::Server::handle`] takes, and its JSON-RPC response becomes the REST
//! response (an HTTP status and the bare result, or a `google.rpc.Status` error body with
//! an `ErrorInfo` naming the A2A error). Pure: bytes and strings in, values out.
//!
//! A listener first asks [`route`] what a request's method and path are (404, 405 and
//! malformed paths are answered before anything else is read), then, once the client is
//! authenticated and the body read under its caps, [`Route::request`] for the JSON-RPC
//! request; it answers with [`reply`], and a stream's events with [`sse_event`].
//! SPEC-NOTES "The A2A v1.0 bridge (seed 003, §18)" has the route table and the error
//! mapping.

use serde_json::{json, Map, Value};

use crate::bridge::a2a::task::{code, A2A_MAX_REQUEST};

/// The binding's media type (A2A v1.0 §11.1), for requests and responses.
pub const CONTENT_TYPE: &str = "application/a2a+json";
/// The binding's name in an agent card's `supportedInterfaces` (`protocolBinding`).
pub const PROTOCOL_BINDING: &str = "HTTP+JSON";
/// Bytes of a query string read at most (a longer one is 414).
pub const MAX_QUERY: usize = 4096;
/// The JSON-RPC id of a request made from a REST one (never seen by the client).
const RPC_ID: &str = "rest";
/// The `ErrorInfo` domain of A2A errors (A2A v1.0 §11.6).
pub const ERROR_DOMAIN: &str = "a2a-protocol.org";
/// The `ErrorInfo` domain of the errors a2acp adds (its temporary refusal).
pub const OWN_ERROR_DOMAIN: &str = "a2acp";

/// A REST request the binding refuses, or an A2A error to answer as REST: the HTTP
/// status, the A2A (JSON-RPC) error code it stands for, and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} ({code}): {message}")]
pub struct RestError {
    /// The HTTP status.
    pub status: u16,
    /// The A2A error, by its JSON-RPC code ([`code`]).
    pub code: i64,
    /// What is wrong, for a person (a parameter's or a member's name first).
    pub message: String,
    /// For 405: the methods the path takes (the `Allow` header).
    pub allow: Option<&'static str>,
}

impl RestError {
    /// An error with the HTTP status of its code ([`mapping`]).
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RestError {
            status: mapping(code).0,
            code,
            message: message.into(),
            allow: None,
        }
    }

    /// An error with this HTTP status (the listener's own: 401, 408, 413, 429, 503).
    pub fn with_status(status: u16, code: i64, message: impl Into<String>) -> Self {
        RestError {
            status,
            code,
            message: message.into(),
            allow: None,
        }
    }

    /// The response: its status and its `google.rpc.Status` body.
    pub fn reply(&self) -> RestReply {
        let (table_status, grpc, _) = mapping(self.code);
        let grpc = if table_status == self.status {
            grpc
        } else {
            grpc_status(self.status)
        };
        RestReply {
            status: self.status,
            body: json!({ "error": {
                "code": self.status,
                "status": grpc,
                "message": self.message,
                "details": error_details(self.code),
            }}),
            allow: self.allow,
            retry_after: (self.code == code::TEMPORARILY_REFUSED)
                .then_some(crate::bridge::a2a::task::RETRY_AFTER_SECS),
        }
    }
}

/// The `details` of an error (HTTP+JSON `google.rpc.Status.details`, JSON-RPC
/// `error.data`; A2A v1.0 §9.5 and §11.6): a `google.rpc.ErrorInfo` naming the error, and
/// for a temporary refusal ([`code::TEMPORARILY_REFUSED`]) a `google.rpc.RetryInfo`
/// saying when to try again.
pub fn error_details(code: i64) -> Vec<Value> {
    let reason = mapping(code).2;
    let domain = if code == code::TEMPORARILY_REFUSED {
        OWN_ERROR_DOMAIN
    } else {
        ERROR_DOMAIN
    };
    let mut details = vec![json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": domain,
        "metadata": {},
    })];
    if code == code::TEMPORARILY_REFUSED {
        details.push(json!({
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": format!("{}s", crate::bridge::a2a::task::RETRY_AFTER_SECS),
        }));
    }
    details
}

/// A REST response: the HTTP status and the JSON body (media type [`CONTENT_TYPE`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RestReply {
    /// The HTTP status.
    pub status: u16,
    /// The body: the method's result (`SendMessageResponse`, `Task`, `ListTasksResponse`)
    /// or `{"error": google.rpc.Status}`.
    pub body: Value,
    /// For 405: the `Allow` header.
    pub allow: Option<&'static str>,
    /// For a temporary refusal (429): the `Retry-After` header, in seconds.
    pub retry_after: Option<u64>,
}

/// An A2A error code's HTTP status, `google.rpc` status name and `ErrorInfo` reason
/// (A2A v1.0 §5.4; the SDK's `A2A_ERROR_MAPPING`). A JSON parse error is the SDK's
/// `INVALID_REQUEST`; a code not in the table is a 500 `INTERNAL_ERROR`.
pub fn mapping(code: i64) -> (u16, &'static str, &'static str) {
    match code {
        code::TASK_NOT_FOUND => (404, "NOT_FOUND", "TASK_NOT_FOUND"),
        code::TASK_NOT_CANCELABLE => (400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"),
        code::PUSH_NOTIFICATION_NOT_SUPPORTED => (
            400,
            "FAILED_PRECONDITION",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        code::UNSUPPORTED_OPERATION => (400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION"),
        code::CONTENT_TYPE_NOT_SUPPORTED => (400, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED"),
        // InvalidAgentResponseError (never answered by this agent).
        -32006 => (500, "INTERNAL", "INVALID_AGENT_RESPONSE"),
        code::EXTENDED_CARD_NOT_CONFIGURED => (
            400,
            "FAILED_PRECONDITION",
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        ),
        // ExtensionSupportRequiredError (never answered by this agent).
        -32008 => (400, "FAILED_PRECONDITION", "EXTENSION_SUPPORT_REQUIRED"),
        code::VERSION_NOT_SUPPORTED => (400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED"),
        code::INVALID_PARAMS => (400, "INVALID_ARGUMENT", "INVALID_PARAMS"),
        code::INVALID_REQUEST | code::PARSE_ERROR => (400, "INVALID_ARGUMENT", "INVALID_REQUEST"),
        code::METHOD_NOT_FOUND => (404, "NOT_FOUND", "METHOD_NOT_FOUND"),
        code::TEMPORARILY_REFUSED => (429, "RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED"),
        _ => (500, "INTERNAL", "INTERNAL_ERROR"),
    }
}

/// The `google.rpc` status name of an HTTP status the table does not give (the
/// listener's own errors).
fn grpc_status(status: u16) -> &'static str {
    match status {
        401 => "UNAUTHENTICATED",
        404 => "NOT_FOUND",
        405 => "UNIMPLEMENTED",
        408 | 504 => "DEADLINE_EXCEEDED",
        413 | 429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        400..=499 => "INVALID_ARGUMENT",
        _ => "INTERNAL",
    }
}

/// What a REST route is: the JSON-RPC method it stands for, and the task (and push
/// notification config) its path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    method: &'static str,
    task_id: Option<String>,
}

/// How a route reads its request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reads {
    /// The body is the request (`SendMessageRequest`).
    Body,
    /// The body, if any, is the request; the path's id is its `id`.
    OptionalBody,
    /// Query parameters (`GetTask`, `ListTasks`).
    Query,
    /// Nothing but the path.
    Path,
}

impl Route {
    /// The JSON-RPC method (`SendMessage`, `GetTask`, …).
    pub fn method(&self) -> &'static str {
        self.method
    }

    /// Whether the answer is a stream (`SendStreamingMessage`, `SubscribeToTask`).
    pub fn is_streaming(&self) -> bool {
        matches!(self.method, "SendStreamingMessage" | "SubscribeToTask")
    }

    /// The task the path names, if it names one.
    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }

    fn reads(&self) -> Reads {
        match self.method {
            "SendMessage" | "SendStreamingMessage" => Reads::Body,
            "CancelTask" | "SubscribeToTask" => Reads::OptionalBody,
            "GetTask" | "ListTasks" => Reads::Query,
            _ => Reads::Path,
        }
    }

    /// The JSON-RPC request this REST request stands for, from its query string (without
    /// the `?`) and body. Query parameters are the request's camelCase members (A2A v1.0
    /// §11.5): integers in decimal, booleans `true` / `false`, enums by name, the last of
    /// a repeated one winning; unknown ones are ignored (as the SDK's server does).
    pub fn request(&self, query: Option<&str>, body: &[u8]) -> Result<Vec<u8>, RestError> {
        let mut params = Map::new();
        match self.reads() {
            Reads::Body => match parse_body(body)? {
                Some(p) => params = p,
                None => {
                    return Err(RestError::new(
                        code::INVALID_REQUEST,
                        "the body: required, a SendMessageRequest object",
                    ))
                }
            },
            Reads::OptionalBody => {
                if let Some(p) = parse_body(body)? {
                    params = p;
                }
            }
            Reads::Query => params = query_params(self.method, query.unwrap_or(""))?,
            Reads::Path => {}
        }
        if let Some(id) = &self.task_id {
            let key = if self.method.contains("PushNotificationConfig") {
                "taskId"
            } else {
                "id"
            };
            match params.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) if s == id => {}
                Some(_) => {
                    return Err(RestError::new(
                        code::INVALID_PARAMS,
                        format!("{key}: not the task the path names"),
                    ))
                }
            }
            params.insert(key.into(), Value::String(id.clone()));
        }
        let rpc =
            json!({ "jsonrpc": "2.0", "id": RPC_ID, "method": self.method, "params": params });
        let bytes = serde_json::to_vec(&rpc)
            .map_err(|e| RestError::new(code::INTERNAL_ERROR, format!("the request: {e}")))?;
        if bytes.len() > A2A_MAX_REQUEST {
            return Err(RestError::with_status(
                413,
                code::INVALID_REQUEST,
                "the body: too large",
            ));
        }
        Ok(bytes)
    }
}

/// The route of a method and path (the path without its query), or the error to answer:
/// 404 `METHOD_NOT_FOUND` for a path that is no route (a tenant prefix included: this
/// agent has none), 405 with the `Allow` header for a route's wrong method, 400 for a
/// task id that is not percent-encoded UTF-8.
///
/// | route | methods | JSON-RPC method |
/// |---|---|---|
/// | `/message:send` | POST | `SendMessage` |
/// | `/message:stream` | POST | `SendStreamingMessage` |
/// | `/tasks` | GET | `ListTasks` |
/// | `/tasks/{id}` | GET | `GetTask` |
/// | `/tasks/{id}:cancel` | POST | `CancelTask` |
/// | `/tasks/{id}:subscribe` | GET, POST | `SubscribeToTask` |
/// | `/tasks/{id}/pushNotificationConfigs` | POST, GET | `Create…` / `ListTaskPushNotificationConfigs` |
/// | `/tasks/{id}/pushNotificationConfigs/{configId}` | GET, DELETE | `Get…` / `DeleteTaskPushNotificationConfig` |
/// | `/extendedAgentCard` | GET | `GetExtendedAgentCard` |
pub fn route(http_method: &str, path: &str) -> Result<Route, RestError> {
    let not_found = || {
        RestError::new(
            code::METHOD_NOT_FOUND,
            format!("no route {}", crate::display::line(path, 80)),
        )
    };
    let Some(rest) = path.strip_prefix('/') else {
        return Err(not_found());
    };
    let segments: Vec<&str> = rest.split('/').collect();
    // (the JSON-RPC method for each HTTP method the route takes, the task id)
    let (methods, task_id): (&[(&str, &'static str)], Option<&str>) = match segments.as_slice() {
        ["message:send"] => (&[("POST", "SendMessage")], None),
        ["message:stream"] => (&[("POST", "SendStreamingMessage")], None),
        ["extendedAgentCard"] => (&[("GET", "GetExtendedAgentCard")], None),
        ["tasks"] => (&[("GET", "ListTasks")], None),
        ["tasks", last] => match last.rsplit_once(':') {
            Some((id, "cancel")) => (&[("POST", "CancelTask")], Some(id)),
            Some((id, "subscribe")) => (
                &[("GET", "SubscribeToTask"), ("POST", "SubscribeToTask")],
                Some(id),
            ),
            Some(_) => return Err(not_found()),
            None => (&[("GET", "GetTask")], Some(*last)),
        },
        ["tasks", id, "pushNotificationConfigs"] => (
            &[
                ("POST", "CreateTaskPushNotificationConfig"),
                ("GET", "ListTaskPushNotificationConfigs"),
            ],
            Some(*id),
        ),
        ["tasks", id, "pushNotificationConfigs", config] if !config.is_empty() => (
            &[
                ("GET", "GetTaskPushNotificationConfig"),
                ("DELETE", "DeleteTaskPushNotificationConfig"),
            ],
            Some(*id),
        ),
        _ => return Err(not_found()),
    };
    let task_id = match task_id {
        Some("") => return Err(not_found()),
        Some(id) => Some(percent_decode(id, false).ok_or_else(|| {
            RestError::new(code::INVALID_PARAMS, "id: not percent-encoded UTF-8")
        })?),
        None => None,
    };
    let Some((_, method)) = methods.iter().find(|(m, _)| *m == http_method) else {
        let allow = match methods {
            [("GET", _), ("POST", _)] => "GET, POST",
            [("POST", _), ("GET", _)] => "POST, GET",
            [("GET", _), ("DELETE", _)] => "GET, DELETE",
            [("GET", _)] => "GET",
            _ => "POST",
        };
        return Err(RestError {
            allow: Some(allow),
            ..RestError::with_status(
                405,
                code::METHOD_NOT_FOUND,
                format!("{} takes {allow}", crate::display::line(path, 80)),
            )
        });
    };
    Ok(Route { method, task_id })
}

/// A body that is empty (`None`) or a JSON object; anything else is 400.
fn parse_body(body: &[u8]) -> Result<Option<Map<String, Value>>, RestError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(Some(m)),
        Ok(_) => Err(RestError::new(
            code::INVALID_REQUEST,
            "the body: a JSON object",
        )),
        Err(e) => Err(RestError::new(
            code::PARSE_ERROR,
            format!("the body: not JSON: {e}"),
        )),
    }
}

/// What a query parameter of a method holds.
#[derive(Clone, Copy)]
enum Kind {
    Int,
    Bool,
    Str,
}

fn query_kind(method: &str, name: &str) -> Option<Kind> {
    match (method, name) {
        ("GetTask" | "ListTasks", "historyLength") | ("ListTasks", "pageSize") => Some(Kind::Int),
        ("ListTasks", "includeArtifacts") => Some(Kind::Bool),
        ("ListTasks", "contextId" | "status" | "pageToken" | "statusTimestampAfter") => {
            Some(Kind::Str)
        }
        _ => None,
    }
}

/// A method's query parameters as JSON-RPC params.
fn query_params(method: &str, query: &str) -> Result<Map<String, Value>, RestError> {
    if query.len() > MAX_QUERY {
        return Err(RestError::with_status(
            414,
            code::INVALID_REQUEST,
            format!("the query: at most {MAX_QUERY} bytes"),
        ));
    }
    let mut params = Map::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let Some(name) = percent_decode(k, true) else {
            continue;
        };
        let Some(kind) = query_kind(method, &name) else {
            continue;
        };
        let bad = |what: &str| RestError::new(code::INVALID_PARAMS, format!("{name}: {what}"));
        let value = percent_decode(v, true).ok_or_else(|| bad("not percent-encoded UTF-8"))?;
        let value = match kind {
            Kind::Int => Value::from(
                value
                    .parse::<i64>()
                    .map_err(|_| bad("an integer in decimal"))?,
            ),
            Kind::Bool => match value.to_ascii_lowercase().as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => return Err(bad("true or false")),
            },
            Kind::Str => Value::String(value),
        };
        params.insert(name, value);
    }
    Ok(params)
}

/// A URL component percent-decoded (in a query, `+` is a space, as form encoding writes
/// it; in a path it is itself), or `None` when an escape is broken or the bytes are not
/// UTF-8.
fn percent_decode(s: &str, plus_is_space: bool) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(c) = bytes.next() {
        match c {
            b'%' => {
                let hi = bytes.next().filter(u8::is_ascii_hexdigit)?;
                let lo = bytes.next().filter(u8::is_ascii_hexdigit)?;
                let hex = [hi, lo];
                out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
            }
            b'+' if plus_is_space => out.push(b' '),
            c => out.push(c),
        }
    }
    String::from_utf8(out).ok()
}

/// The REST response for a JSON-RPC response of [`crate::bridge::a2a::Server::handle`]: 200
/// and the bare `result`, or the error's HTTP status ([`mapping`]) and its
/// `google.rpc.Status` body (a `params.` prefix of the message dropped: the REST request
/// has no `params`, the parameter's name is what it sent).
pub fn reply(response: &Value) -> RestReply {
    if let Some(e) = response.get("error") {
        let code = e
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(code::INTERNAL_ERROR);
        let message = e.get("message").and_then(Value::as_str).unwrap_or("");
        let message = message.strip_prefix("params.").unwrap_or(message);
        return RestError::new(code, message).reply();
    }
    RestReply {
        status: 200,
        body: response.get("result").cloned().unwrap_or(Value::Null),
        allow: None,
        retry_after: None,
    }
}

/// One Server-Sent Event of a REST stream for a JSON-RPC response: `data:` the bare
/// `StreamResponse`, or for an error an `event: error` with the `google.rpc.Status` body
/// (as the SDK's REST server sends one).
pub fn sse_event(response: &Value) -> String {
    let r = reply(response);
    if r.status == 200 {
        format!("data: {}\n\n", r.body)
    } else {
        format!("event: error\ndata: {}\n\n", r.body)
    }
}

#[cfg(test)]
#[path = "rest_tests.rs"]
mod tests;
