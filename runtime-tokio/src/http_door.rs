//! What the two HTTP listeners of the agent (the A2A listener, `agent run --a2a-listen`,
//! and the MCP bridge over streamable HTTP, `mcp --listen`) do alike before a request
//! reaches their protocol: accept connections up to a cap, serve each over HTTP/1.1 with
//! a deadline on the request head, and read a body whole within a deadline and a cap.
//!
//! A refusal (any answer of status 400 or more) carries `Connection: close`; after it the
//! connection is not simply dropped but closed by the shared
//! [`a2acp_runtime::linger::close_after_refusal`]: the write half first, then what the
//! client still sends (the rest of a body over the cap, a slow body) is drained for at
//! most [`linger::MAX_BYTES`](a2acp_runtime::linger::MAX_BYTES) and
//! [`linger::TIME`](a2acp_runtime::linger::TIME), so the client reads the refusal instead
//! of a reset.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use a2acp_runtime::linger;
use async_tungstenite::tokio::TokioAdapter;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONNECTION, CONTENT_LENGTH};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{HeaderMap, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::debug;

/// How connections are taken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Door {
    /// Named in the logs (`a2a`, `mcp`).
    pub name: &'static str,
    /// Connections served at once (the next waits in the kernel's backlog).
    pub max_connections: usize,
    /// The request head must arrive within this (hyper's header deadline).
    pub header_timeout: Duration,
}

/// Serves connections on `listener` with `handle`, one request at a time per
/// connection, until `open` says no (checked at each new connection).
pub(crate) async fn serve<H, Fut, B>(
    listener: TcpListener,
    door: Door,
    open: impl Fn() -> bool,
    handle: H,
) where
    H: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let handle = Arc::new(handle);
    let room = Arc::new(Semaphore::new(door.max_connections));
    loop {
        let Ok(permit) = room.clone().acquire_owned().await else {
            return;
        };
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                debug!("{} accept: {e}", door.name);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !open() {
            return;
        }
        let _ = sock.set_nodelay(true);
        let handle = handle.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let fut = handle(req);
                Box::pin(async move { Ok::<_, Infallible>(refusal_closes(fut.await)) })
                    as Pin<Box<dyn Future<Output = Result<Response<B>, Infallible>> + Send>>
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(door.header_timeout)
                .serve_connection(TokioIo::new(sock), svc)
                .without_shutdown();
            match conn.await {
                // The connection ended after an answer (a refusal, `Connection: close`
                // either way, or the client's end of a kept-alive connection): closed
                // gently, so that a client still sending reads what it was answered.
                Ok(parts) => {
                    let mut io = TokioAdapter::new(parts.io.into_inner());
                    let how =
                        linger::close_after_refusal(&mut io, tokio::time::sleep(linger::TIME))
                            .await;
                    debug!(%peer, ?how, "{} connection closed", door.name);
                }
                Err(e) => debug!(%peer, "{} connection: {e}", door.name),
            }
            drop(permit);
        });
    }
}

/// A refusal closes its connection: the request's body may be unread, and the connection
/// is not reused after it.
fn refusal_closes<B>(mut r: Response<B>) -> Response<B> {
    if r.status().is_client_error() || r.status().is_server_error() {
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BodyRefused {
    /// Over the cap, by its `Content-Length` or as it passed the cap.
    TooLarge(usize),
    /// Not whole within the deadline.
    TimedOut,
    /// The connection failed while it was read.
    Unreadable(String),
}

impl BodyRefused {
    /// The HTTP status that answers it.
    pub fn status(&self) -> StatusCode {
        match self {
            BodyRefused::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRefused::TimedOut => StatusCode::REQUEST_TIMEOUT,
            BodyRefused::Unreadable(_) => StatusCode::BAD_REQUEST,
        }
    }
}

impl std::fmt::Display for BodyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyRefused::TooLarge(max) => write!(f, "the body is over {max} bytes"),
            BodyRefused::TimedOut => f.write_str("the body did not arrive in time"),
            BodyRefused::Unreadable(e) => write!(f, "the body: {e}"),
        }
    }
}

/// The whole body of a request with `headers`, within `deadline` and at most `max`
/// bytes: refused by its `Content-Length` before a byte is read, or as it passes the cap.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    max: usize,
    deadline: Duration,
) -> Result<Bytes, BodyRefused> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(BodyRefused::TooLarge(max));
    }
    match tokio::time::timeout(deadline, Limited::new(body, max).collect()).await {
        Err(_) => Err(BodyRefused::TimedOut),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(BodyRefused::TooLarge(max)),
        Ok(Err(e)) => Err(BodyRefused::Unreadable(e.to_string())),
        Ok(Ok(c)) => Ok(c.to_bytes()),
    }
}
