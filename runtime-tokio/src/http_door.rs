//! What the two HTTP listeners of the agent (the A2A listener, `agent run --a2a-listen`,
//! and the MCP bridge over streamable HTTP, `mcp --listen`) do alike before a request
//! reaches their protocol: accept connections up to a cap, serve each over HTTP/1.1 with
//! a deadline on the request head, and read a body whole within a deadline and a cap.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::CONTENT_LENGTH;
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
                async move { Ok::<_, Infallible>(fut.await) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(door.header_timeout)
                .serve_connection(TokioIo::new(sock), svc);
            if let Err(e) = conn.await {
                debug!(%peer, "{} connection: {e}", door.name);
            }
            drop(permit);
        });
    }
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
