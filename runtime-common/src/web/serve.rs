//! The consent page's HTTP server, on hyper and tokio (the smol binding runs it on a
//! thread of its own, [`Web::spawn_thread`]): the page's files, the pairing form, the
//! control requests and the event stream.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE, COOKIE, HOST};
use hyper::{Method, Request as HttpRequest, Response as HttpResponse, StatusCode};
use serde_json::{json, Value};

use super::*;
use crate::control::Response;
use crate::daemon::Ctl;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A bound listener of the consent page, and who may use it.
#[derive(Debug)]
pub struct Web {
    listener: std::net::TcpListener,
    addr: SocketAddr,
    access: Arc<Access>,
}

impl Web {
    /// Binds `--web ADDR` (and draws the pairing code when it is off loopback).
    pub fn bind(o: &WebOptions) -> Result<Web, String> {
        let l = std::net::TcpListener::bind(&o.listen)
            .map_err(|e| format!("--web {}: {e}", o.listen))?;
        l.set_nonblocking(true)
            .map_err(|e| format!("--web {}: {e}", o.listen))?;
        let addr = l.local_addr().map_err(|e| e.to_string())?;
        Ok(Web {
            listener: l,
            addr,
            access: Arc::new(Access::new(&addr)),
        })
    }

    /// The pairing code, off loopback (printed once at start).
    pub fn pairing_code(&self) -> Option<String> {
        self.access.code().map(str::to_string)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What `agent run` prints once: the page's address, and off loopback the pairing
    /// code with its QR code (the code, never a URL carrying it).
    pub fn banner(&self) -> String {
        match self.access.code() {
            None => format!("consent page: http://{}/", self.addr),
            Some(code) => {
                let qr = crate::safety::qr(code).unwrap_or_default();
                format!(
                    "consent page: http://{}/ (from another device: open it and enter the pairing code {})\n{qr}",
                    self.addr,
                    shown_code(code)
                )
            }
        }
    }

    /// Binds `--web` when the options ask for it and says where the page is (on the
    /// terminal when it shows prompts, else on stdout).
    pub fn for_run(
        opts: &crate::daemon::RunOptions,
    ) -> Result<Option<Web>, crate::daemon::AgentError> {
        let Some(o) = &opts.web else { return Ok(None) };
        let w = Web::bind(o).map_err(|message| crate::daemon::AgentError::Control {
            path: std::path::PathBuf::from(&o.listen),
            message,
        })?;
        match &opts.terminal {
            Some(t) => w.banner().lines().for_each(|l| t.println(l)),
            None => println!("{}", w.banner()),
        }
        Ok(Some(w))
    }

    /// Serves the page until the agent is gone (inside a tokio runtime).
    pub async fn serve(self, ctl: flume::Sender<Ctl>) {
        let Ok(listener) = tokio::net::TcpListener::from_std(self.listener) else {
            return;
        };
        let state = Arc::new(State {
            access: self.access,
            listen: self.addr,
            ctl: ctl.clone(),
            streams: Arc::new(AtomicUsize::new(0)),
        });
        let door = crate::http_door::Door {
            name: "web",
            max_connections: MAX_CONNECTIONS,
            header_timeout: HEADER_TIMEOUT,
            max_per_source: Some(MAX_PER_SOURCE),
        };
        crate::http_door::serve(
            listener,
            door,
            move || !ctl.is_disconnected(),
            move |req| handle(state.clone(), req),
        )
        .await
    }

    /// Serves the page on a thread of its own running tokio (for the smol binding).
    pub fn spawn_thread(
        self,
        ctl: flume::Sender<Ctl>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        crate::tokio_thread::spawn(
            "a2acp-web",
            |e| tracing::warn!("consent page: {e}"),
            move || self.serve(ctl),
        )
    }
}

struct State {
    access: Arc<Access>,
    listen: SocketAddr,
    ctl: flume::Sender<Ctl>,
    streams: Arc<AtomicUsize>,
}

fn full(status: StatusCode, ctype: &'static str, body: impl Into<Bytes>) -> HttpResponse<Body> {
    let mut r = HttpResponse::new(Full::new(body.into()).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    r
}

/// A refusal a person can read: `{"ok":false,"error":"…"}`.
fn refuse(status: StatusCode, why: &str) -> HttpResponse<Body> {
    full(
        status,
        "application/json",
        json!({"ok": false, "error": why}).to_string(),
    )
}

/// The headers of every answer.
fn guard(mut r: HttpResponse<Body>) -> HttpResponse<Body> {
    let h = r.headers_mut();
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    r
}

async fn handle(state: Arc<State>, req: HttpRequest<Incoming>) -> HttpResponse<Body> {
    guard(route(&state, req).await)
}

async fn route(state: &Arc<State>, req: HttpRequest<Incoming>) -> HttpResponse<Body> {
    let (parts, body) = req.into_parts();
    let header = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok());
    if !host_allowed(header(HOST.as_str()), &state.listen) {
        return refuse(
            StatusCode::FORBIDDEN,
            "the Host header does not name this page's address (open it by its IP address or localhost)",
        );
    }
    let cookie = header(COOKIE.as_str());
    let path = parts.uri.path();
    match (&parts.method, path) {
        (&Method::GET, "/app.js") => full(StatusCode::OK, "text/javascript; charset=utf-8", APP_JS),
        (&Method::GET, "/app.css") => full(StatusCode::OK, "text/css; charset=utf-8", APP_CSS),
        (&Method::GET, "/") => match state.access.csrf_for(cookie) {
            Some(t) => full(
                StatusCode::OK,
                "text/html; charset=utf-8",
                PAGE_HTML.replace("{{CSRF}}", &t),
            ),
            None => full(
                StatusCode::OK,
                "text/html; charset=utf-8",
                PAIR_HTML.replace("{{MESSAGE}}", ""),
            ),
        },
        (&Method::POST, "/pair") => {
            let bytes =
                match crate::http_door::read_body(&parts.headers, body, 1024, BODY_TIMEOUT).await {
                    Ok(b) => b,
                    Err(e) => return refuse(e.status(), &e.to_string()),
                };
            let given = form_value(&bytes, "code").unwrap_or_default();
            match state.access.pair(&given, Instant::now()) {
                Pairing::Paired(s) => {
                    let mut r = full(StatusCode::SEE_OTHER, "text/plain", "paired");
                    let c = format!("{SESSION_COOKIE}={s}; HttpOnly; SameSite=Strict; Path=/");
                    if let Ok(v) = HeaderValue::from_str(&c) {
                        r.headers_mut().insert("set-cookie", v);
                    }
                    r.headers_mut()
                        .insert("location", HeaderValue::from_static("/"));
                    r
                }
                Pairing::NotNeeded => {
                    let mut r = full(StatusCode::SEE_OTHER, "text/plain", "no pairing needed");
                    r.headers_mut()
                        .insert("location", HeaderValue::from_static("/"));
                    r
                }
                Pairing::Wrong => full(
                    StatusCode::FORBIDDEN,
                    "text/html; charset=utf-8",
                    PAIR_HTML.replace("{{MESSAGE}}", "That is not the pairing code. Try again."),
                ),
                Pairing::TooMany => full(
                    StatusCode::TOO_MANY_REQUESTS,
                    "text/html; charset=utf-8",
                    PAIR_HTML.replace(
                        "{{MESSAGE}}",
                        "Too many wrong codes: wait a minute, then try again.",
                    ),
                ),
            }
        }
        (&Method::POST, "/api/control") => {
            if state.access.csrf_for(cookie).is_none() {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "pair this browser first (open the page and enter the pairing code)",
                );
            }
            if !state.access.csrf_ok(cookie, header(CSRF_HEADER)) {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "refused: this request does not carry the page's CSRF token (x-csrf-token); reload the page",
                );
            }
            if !header(CONTENT_TYPE.as_str()).is_some_and(|t| t.starts_with("application/json")) {
                return refuse(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "the body must be application/json",
                );
            }
            let bytes =
                match crate::http_door::read_body(&parts.headers, body, MAX_BODY, BODY_TIMEOUT)
                    .await
                {
                    Ok(b) => b,
                    Err(e) => return refuse(e.status(), &e.to_string()),
                };
            let req: Request = match serde_json::from_slice(&bytes) {
                Ok(r) => r,
                Err(e) => return refuse(StatusCode::BAD_REQUEST, &format!("not a request: {e}")),
            };
            if !allowed(&req) {
                return refuse(
                    StatusCode::FORBIDDEN,
                    "this request is not available from the page (use the a2acp command)",
                );
            }
            match crate::daemon::request(&state.ctl, req).await {
                Ok(r) => full(
                    StatusCode::OK,
                    "application/json",
                    serde_json::to_vec(&r).unwrap_or_default(),
                ),
                Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
            }
        }
        (&Method::GET, "/api/events") => {
            if state.access.csrf_for(cookie).is_none() {
                return refuse(StatusCode::UNAUTHORIZED, "pair this browser first");
            }
            events(state)
        }
        (_, "/" | "/app.js" | "/app.css" | "/pair" | "/api/control" | "/api/events") => {
            refuse(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
        }
        _ => refuse(StatusCode::NOT_FOUND, "no such page"),
    }
}

/// How many receipts the page shows (the newest).
pub const RECEIPTS_SHOWN: usize = 30;

/// What the page shows, read through the control requests.
pub async fn snapshot(ctl: &flume::Sender<Ctl>) -> Option<Value> {
    let mut out = serde_json::Map::new();
    for (key, req) in [
        ("prompts", Request::Prompts),
        ("threads", Request::Threads),
        ("notifications", Request::Notifications { all: true }),
        ("suggestions", Request::Suggestions),
    ] {
        let r: Response = crate::daemon::request(ctl, req).await.ok()?;
        out.insert(key.into(), r.data);
    }
    // What the user shared and confirmed, newest first: the last RECEIPTS_SHOWN receipts,
    // without their salts (the page proves nothing; `a2acp receipts --json` does).
    let r: Response = crate::daemon::request(ctl, Request::Receipts { thread: None })
        .await
        .ok()?;
    let receipts: Vec<Value> = match r.data {
        Value::Array(list) => list
            .into_iter()
            .rev()
            .take(RECEIPTS_SHOWN)
            .filter_map(|mut s| s.get_mut("receipt").map(Value::take))
            .collect(),
        _ => Vec::new(),
    };
    out.insert("receipts".into(), Value::Array(receipts));
    Some(Value::Object(out))
}

/// The page's one event stream: an `event: state` with the whole state each time it
/// changes (and once at the start), a comment line every 15 s; closed after
/// [`STREAM_MAX`], when the agent stops, or as soon as the reader falls
/// [`STREAM_BUFFER`] events behind.
fn events(state: &Arc<State>) -> HttpResponse<Body> {
    let n = state.streams.fetch_add(1, Ordering::SeqCst);
    if n >= MAX_STREAMS {
        state.streams.fetch_sub(1, Ordering::SeqCst);
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many pages are open on this agent; close one",
        );
    }
    struct Slot(Arc<AtomicUsize>);
    impl Drop for Slot {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let slot = Slot(state.streams.clone());
    let (tx, rx) = flume::bounded::<Bytes>(STREAM_BUFFER);
    let ctl = state.ctl.clone();
    tokio::spawn(async move {
        let _slot = slot;
        let started = tokio::time::Instant::now();
        let mut last = String::new();
        let mut quiet = 0u32;
        // A page closed drops its stream's receiver: its slot is freed at the next poll.
        while started.elapsed() < STREAM_MAX && !tx.is_disconnected() {
            let Some(s) = snapshot(&ctl).await else {
                return;
            };
            let text = s.to_string();
            let frame = if text != last {
                last = text;
                quiet = 0;
                Some(format!("event: state\ndata: {last}\n\n"))
            } else {
                quiet += 1;
                quiet
                    .is_multiple_of(60)
                    .then(|| ": still here\n\n".to_string())
            };
            if let Some(f) = frame {
                // A reader that does not keep up is dropped, not buffered for.
                if tx.try_send(Bytes::from(f)).is_err() {
                    return;
                }
            }
            tokio::time::sleep(STREAM_POLL).await;
        }
    });
    let body = rx
        .into_stream()
        .map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut r = HttpResponse::new(StreamBody::new(body).boxed_unsync());
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r
}
