//! The A2A listener on tokio (`agent run --a2a-listen`): HTTP/1.1 with hyper, serving the
//! agent card at `/.well-known/agent-card.json`, the A2A v1.0 JSON-RPC binding at `/` and
//! its HTTP+JSON binding on the REST routes (`/message:send`, `/tasks/{id}`, …; streaming
//! methods as Server-Sent Events). Every request goes to the agent loop as an
//! [`A2aCall`] (a REST one translated to JSON-RPC by `a2acp_core::bridge::a2a::rest`); the
//! protocol is the core's (`a2acp_core::bridge::a2a::Server`). Hostile input: the
//! request head must arrive within the header deadline and the body within the body
//! deadline, a body over the cap is refused with 413 before it is read whole, connections
//! and streams are capped (in all and per client), a stream lives at most
//! [`A2aLimits::stream_max`] and ends when its reader falls behind.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use a2acp_core::bridge::a2a::card::{card, CardInfo};
use a2acp_core::bridge::a2a::rest;
use a2acp_core::Address;
use a2acp_runtime::a2a::{self as common, A2aCall, A2aLimits, A2aOptions};
use a2acp_runtime::daemon::Ctl;
use futures_util::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Binds the listener, refusing a non-loopback address without a token.
pub fn bind(opts: &A2aOptions) -> Result<TcpListener, String> {
    use std::net::ToSocketAddrs;
    let addr = opts
        .listen
        .to_socket_addrs()
        .map_err(|e| format!("--a2a-listen {}: {e}", opts.listen))?
        .next()
        .ok_or_else(|| format!("--a2a-listen {}: no address", opts.listen))?;
    common::check_listen(&addr, opts.token.as_deref())?;
    let l = std::net::TcpListener::bind(addr).map_err(|e| format!("--a2a-listen {addr}: {e}"))?;
    l.set_nonblocking(true)
        .and_then(|()| TcpListener::from_std(l))
        .map_err(|e| format!("--a2a-listen {addr}: {e}"))
}

struct State {
    ctl: flume::Sender<Ctl>,
    token: Option<String>,
    limits: A2aLimits,
    address: Address,
    phase1_id: a2acp_core::bridge::phase1::envelope::Uuid,
    local: SocketAddr,
    /// Open streams per client.
    streams: Mutex<BTreeMap<Address, usize>>,
}

/// A stream's place under the caps, given back when the stream ends.
struct StreamSlot {
    state: Arc<State>,
    client: Address,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if let Ok(mut m) = self.state.streams.lock() {
            if let Some(n) = m.get_mut(&self.client) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    m.remove(&self.client);
                }
            }
        }
    }
}

impl State {
    fn take_stream(self: &Arc<Self>, client: &Address) -> Option<StreamSlot> {
        let mut m = self.streams.lock().ok()?;
        let total: usize = m.values().sum();
        let mine = m.get(client).copied().unwrap_or(0);
        if total >= self.limits.max_streams || mine >= self.limits.max_streams_per_client {
            return None;
        }
        *m.entry(client.clone()).or_insert(0) += 1;
        Some(StreamSlot {
            state: self.clone(),
            client: client.clone(),
        })
    }
}

/// Serves A2A clients on `listener` until the agent loop is gone.
pub async fn serve(
    listener: TcpListener,
    opts: A2aOptions,
    (address, phase1_id): (Address, a2acp_core::bridge::phase1::envelope::Uuid),
    ctl: flume::Sender<Ctl>,
) {
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
    let state = Arc::new(State {
        ctl,
        token: opts.token.clone(),
        limits: opts.limits,
        address,
        phase1_id,
        local,
        streams: Mutex::new(BTreeMap::new()),
    });
    let door = a2acp_runtime::http_door::Door {
        name: "a2a",
        max_connections: opts.limits.max_connections,
        header_timeout: opts.limits.header_timeout,
        max_per_source: None,
    };
    let open = {
        let state = state.clone();
        move || !state.ctl.is_disconnected()
    };
    a2acp_runtime::http_door::serve(listener, door, open, move |req| handle(state.clone(), req))
        .await;
}

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn json(status: StatusCode, v: &serde_json::Value) -> Response<Body> {
    full(status, "application/json", v.to_string())
}

fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response<Body> {
    use a2acp_core::bridge::a2a::task;
    let mut r = json(
        status,
        &task::rpc_error_response(&serde_json::Value::Null, code, message),
    );
    if code == task::code::TEMPORARILY_REFUSED {
        r.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(task::RETRY_AFTER_SECS));
    }
    r
}

/// The agent card, with `Cache-Control` and an `ETag`; `304 Not Modified` to a request
/// whose `If-None-Match` matches (A2A v1.0 §8.6.1).
fn card_response(state: &State, req: &Request<Incoming>) -> Response<Body> {
    use a2acp_core::bridge::a2a::card::{etag, not_modified, CARD_MAX_AGE_SECS};
    let info = CardInfo {
        address: state.address.clone(),
        url: base_url(state, req),
        bearer: state.token.is_some(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let body = card(&info).to_string();
    let tag = etag(body.as_bytes());
    let fresh = req
        .headers()
        .get(hyper::header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| not_modified(v, &tag));
    let mut r = if fresh {
        let mut r = Response::new(Full::new(Bytes::new()).boxed_unsync());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        full(StatusCode::OK, "application/json", body)
    };
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(hyper::header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("public, max-age={CARD_MAX_AGE_SECS}")) {
        h.insert(hyper::header::CACHE_CONTROL, v);
    }
    // The card names the host the client asked by.
    h.insert(hyper::header::VARY, HeaderValue::from_static("Host"));
    r
}

/// The card's URL (no trailing `/`, A2A v1.0 §11.3): the `Host` the client used (so a card fetched through any name of
/// this machine points back at it), else the bound address.
fn base_url(state: &State, req: &Request<Incoming>) -> String {
    let host = req
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 255
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .map(str::to_string)
        .unwrap_or_else(|| state.local.to_string());
    // No trailing `/`: a client appends the HTTP+JSON routes (`/message:send`) to it.
    format!("http://{host}")
}

/// Reads a request's body within the body deadline and the cap.
async fn read_body(state: &State, req: Request<Incoming>) -> Result<Bytes, StatusCode> {
    let (parts, body) = req.into_parts();
    let l = &state.limits;
    a2acp_runtime::http_door::read_body(&parts.headers, body, l.max_body, l.body_timeout)
        .await
        .map_err(|e| e.status())
}

/// `POST /a2a/messages`: one Phase-1 message (seed 001), acknowledged within its type's
/// deadline (30 s for `task_assignment`, 10 s otherwise) or answered `TIMEOUT` (500).
async fn phase1(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    use a2acp_core::bridge::phase1::{envelope, retry};
    if common::client_for(
        req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes),
        state.token.as_deref(),
    )
    .is_none()
    {
        let mut r = phase1_refusal(
            &state,
            StatusCode::UNAUTHORIZED,
            "a bearer token is required",
        );
        r.headers_mut()
            .insert("www-authenticate", HeaderValue::from_static("Bearer"));
        return r;
    }
    let (parts, body) = req.into_parts();
    let l = &state.limits;
    let bytes =
        match a2acp_runtime::http_door::read_body(&parts.headers, body, l.max_body, l.body_timeout)
            .await
        {
            Ok(b) => b,
            Err(e) => return phase1_refusal(&state, e.status(), &e.to_string()),
        };
    let kind = envelope::type_of(&bytes).unwrap_or_default();
    let deadline = std::time::Duration::from_millis(retry::ack_deadline_ms(&kind));
    let (tx, rx) = flume::bounded(1);
    let timeout = || {
        let v = envelope::timeout_reply(
            state.phase1_id,
            &bytes,
            fresh_id(),
            &a2acp_runtime::now().to_rfc3339(),
        );
        json(StatusCode::INTERNAL_SERVER_ERROR, &v)
    };
    if state
        .ctl
        .send_async(Ctl::Phase1(bytes.to_vec(), tx))
        .await
        .is_err()
    {
        return timeout();
    }
    match tokio::time::timeout(deadline, rx.recv_async()).await {
        Ok(Ok(r)) => json(
            StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &r.body,
        ),
        _ => timeout(),
    }
}

/// A fresh v4 id for an error the listener writes (the OS's randomness; nil only if it
/// has none).
fn fresh_id() -> a2acp_core::bridge::phase1::envelope::Uuid {
    use a2acp_core::bridge::phase1::envelope;
    a2acp_runtime::clock::os_seed()
        .ok()
        .and_then(|s| s.get(..16).and_then(|b| <[u8; 16]>::try_from(b).ok()))
        .map(envelope::uuid_v4)
        .unwrap_or_else(envelope::Uuid::nil)
}

/// A request to the Phase-1 route refused before its message was read (no token, the
/// body over the cap or not in time, not a `POST`): `status`, with seed 001's
/// `INVALID_MESSAGE_FORMAT` error saying `why` (a Phase-1 sender reads an envelope, never
/// plain text).
fn phase1_refusal(state: &State, status: StatusCode, why: &str) -> Response<Body> {
    let v = a2acp_core::bridge::phase1::envelope::refusal_reply(
        state.phase1_id,
        why,
        fresh_id(),
        &a2acp_runtime::now().to_rfc3339(),
    );
    json(status, &v)
}

/// The binding a request came by: JSON-RPC at `/`, or an HTTP+JSON route.
enum Binding {
    JsonRpc,
    Rest(rest::Route),
}

impl Binding {
    /// An error the listener answers itself: with `status`, or the binding's own for the
    /// code (JSON-RPC: 200; HTTP+JSON: the code's HTTP status).
    fn error(&self, status: Option<StatusCode>, code: i64, message: &str) -> Response<Body> {
        match self {
            Binding::JsonRpc => rpc_error(status.unwrap_or(StatusCode::OK), code, message),
            Binding::Rest(_) => {
                let e = match status {
                    Some(s) => rest::RestError::with_status(s.as_u16(), code, message),
                    None => rest::RestError::new(code, message),
                };
                rest_reply(&e.reply())
            }
        }
    }

    /// The answer to a call that is not a stream (or whose first answer is an error).
    fn answer(&self, response: &serde_json::Value) -> Response<Body> {
        match self {
            Binding::JsonRpc => json(StatusCode::OK, response),
            Binding::Rest(_) => rest_reply(&rest::reply(response)),
        }
    }

    /// One Server-Sent Event: a JSON-RPC response, or the bare `StreamResponse`.
    fn event(&self, response: &serde_json::Value) -> Vec<u8> {
        match self {
            Binding::JsonRpc => common::sse_event(response),
            Binding::Rest(_) => rest::sse_event(response).into_bytes(),
        }
    }
}

fn rest_reply(r: &rest::RestReply) -> Response<Body> {
    let mut resp = full(
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        rest::CONTENT_TYPE,
        r.body.to_string(),
    );
    if let Some(allow) = r.allow {
        resp.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static(allow));
    }
    if let Some(secs) = r.retry_after {
        resp.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let binding = match (req.method(), path.as_str()) {
        (&Method::GET, "/.well-known/agent-card.json") => return card_response(&state, &req),
        (&Method::POST, "/") => Binding::JsonRpc,
        (&Method::POST, "/a2a/messages") => return phase1(state, req).await,
        (_, "/a2a/messages") => {
            let mut r = phase1_refusal(
                &state,
                StatusCode::METHOD_NOT_ALLOWED,
                "a Phase-1 message is sent with POST",
            );
            r.headers_mut()
                .insert(hyper::header::ALLOW, HeaderValue::from_static("POST"));
            return r;
        }
        (_, "/" | "/.well-known/agent-card.json") => {
            return full(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                "method not allowed\n",
            )
        }
        // Every other path is the HTTP+JSON binding's: its route, or its 404 / 405.
        (m, p) => match rest::route(m.as_str(), p) {
            Ok(r) => Binding::Rest(r),
            Err(e) => return rest_reply(&e.reply()),
        },
    };
    call(state, req, binding).await
}

/// A request of either binding: the client by its credentials, the version, the body
/// under the caps, then the agent loop's answer (a stream counted against the caps).
async fn call(state: Arc<State>, req: Request<Incoming>, binding: Binding) -> Response<Body> {
    use a2acp_core::bridge::a2a::task::code;
    let Some(client) = common::client_for(
        req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes),
        state.token.as_deref(),
    ) else {
        let mut r = binding.error(
            Some(StatusCode::UNAUTHORIZED),
            code::INVALID_REQUEST,
            "a bearer token is required",
        );
        r.headers_mut()
            .insert("www-authenticate", HeaderValue::from_static("Bearer"));
        return r;
    };
    if let Some(v) = req.headers().get("a2a-version") {
        let v = v.to_str().unwrap_or("");
        if v != "1.0" && v != "1" {
            return binding.error(
                None,
                code::VERSION_NOT_SUPPORTED,
                "this agent speaks A2A 1.0 only",
            );
        }
    }
    let query = req.uri().query().map(str::to_string);
    let bytes = match read_body(&state, req).await {
        Ok(b) => b,
        Err(status) => {
            return binding.error(
                Some(status),
                code::INVALID_REQUEST,
                "the body could not be read in time and under the size cap",
            )
        }
    };
    let body = match &binding {
        Binding::JsonRpc => bytes.to_vec(),
        Binding::Rest(route) => match route.request(query.as_deref(), &bytes) {
            Ok(b) => b,
            Err(e) => return rest_reply(&e.reply()),
        },
    };
    let slot =
        if common::is_streaming(&body) {
            match state.take_stream(&client) {
                Some(s) => Some(s),
                None => return binding.error(
                    Some(StatusCode::TOO_MANY_REQUESTS),
                    code::TEMPORARILY_REFUSED,
                    "temporarily refused: too many open streams; close one, or poll with GetTask",
                ),
            }
        } else {
            None
        };
    let (tx, rx) = flume::bounded(1);
    let call = A2aCall { client, body };
    if state.ctl.send_async(Ctl::A2a(call, tx)).await.is_err() {
        return binding.error(
            Some(StatusCode::SERVICE_UNAVAILABLE),
            code::INTERNAL_ERROR,
            "the agent has stopped",
        );
    }
    let answer = match tokio::time::timeout(common::CALL_TIMEOUT, rx.recv_async()).await {
        Ok(Ok(a)) => a,
        _ => {
            return binding.error(
                Some(StatusCode::SERVICE_UNAVAILABLE),
                code::INTERNAL_ERROR,
                "the agent did not answer in time",
            )
        }
    };
    if !answer.streaming || answer.response.get("error").is_some() {
        return binding.answer(&answer.response);
    }
    // Server-Sent Events: the task first, then its updates until the task is terminal
    // or interrupted (the agent loop closes the channel), the reader falls behind, or
    // the stream's time is up.
    let binding = Arc::new(binding);
    let first = {
        let b = binding.clone();
        futures_util::stream::once(async move { b.event(&answer.response) })
    };
    let updates = match answer.events {
        Some(rx) => {
            let b = binding.clone();
            rx.into_stream().map(move |v| b.event(&v)).boxed()
        }
        None => futures_util::stream::empty().boxed(),
    };
    let deadline = tokio::time::sleep(state.limits.stream_max);
    let events = first.chain(updates).take_until(deadline).map(move |b| {
        let _held = &slot;
        Ok::<_, Infallible>(Frame::data(Bytes::from(b)))
    });
    let mut r = Response::new(StreamBody::new(events).boxed_unsync());
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-cache"));
    r
}
