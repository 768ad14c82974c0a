//! What the HTTP listeners (the agent's A2A listener, `agent run --a2a-listen`, the MCP
//! bridge over streamable HTTP, `mcp --listen`, and the relay's ACP gateway,
//! `relay --acp-listen`) do alike before a request reaches their protocol: accept connections up to a cap, serve each over HTTP/1.1 with
//! a deadline on the request head, and read a body whole within a deadline and a cap.
//!
//! A refusal (any answer of status 400 or more) carries `Connection: close`; after it the
//! connection is not simply dropped but closed by the shared
//! [`crate::linger::close_after_refusal`]: the write half first, then what the
//! client still sends (the rest of a body over the cap, a slow body) is drained for at
//! most [`linger::MAX_BYTES`](crate::linger::MAX_BYTES) and
//! [`linger::TIME`](crate::linger::TIME), so the client reads the refusal instead
//! of a reset.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::linger;
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
pub struct Door {
    /// Named in the logs (`a2a`, `mcp`).
    pub name: &'static str,
    /// Connections served at once (the next waits in the kernel's backlog).
    pub max_connections: usize,
    /// The request head must arrive within this (hyper's header deadline); a TLS
    /// handshake too.
    pub header_timeout: Duration,
    /// Connections served at once from one source address (`None`: no cap but the
    /// total). One over it is closed at once.
    pub max_per_source: Option<usize>,
}

/// What a connection over its source's cap reads before it is closed.
const OVER_THE_CAP: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 91\r\n\r\n{\"error\": {\"code\": -32012, \"message\": \"too many connections from this address; try again\"}}";

/// The source address of a request, in its extensions (set by [`serve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source(pub std::net::SocketAddr);

/// Connections open per source address, for [`Door::max_per_source`].
#[derive(Debug, Default)]
struct PerSource(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

impl PerSource {
    fn enter(&self, ip: std::net::IpAddr, max: usize) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= max {
            return false;
        }
        *n += 1;
        true
    }

    fn leave(&self, ip: std::net::IpAddr) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&ip);
            }
        }
    }
}

/// Serves connections on `listener` with `handle`, one request at a time per
/// connection, until `open` says no (checked at each new connection).
pub async fn serve<H, Fut, B>(listener: TcpListener, door: Door, open: impl Fn() -> bool, handle: H)
where
    H: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    serve_tls(listener, door, None, open, handle).await
}

/// [`serve`], over TLS when `tls` is given (the handshake within the door's header
/// deadline).
pub async fn serve_tls<H, Fut, B>(
    listener: TcpListener,
    door: Door,
    tls: Option<tokio_rustls::TlsAcceptor>,
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
    let sources = Arc::new(PerSource::default());
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
        if let Some(max) = door.max_per_source {
            if !sources.enter(peer.ip(), max) {
                debug!(%peer, "{}: too many connections from this source", door.name);
                // A plain connection reads why; a TLS one is closed (no handshake for it).
                if tls.is_none() {
                    tokio::spawn(async move {
                        use tokio::io::AsyncWriteExt;
                        let mut sock = sock;
                        let _ = tokio::time::timeout(
                            Duration::from_secs(1),
                            sock.write_all(OVER_THE_CAP),
                        )
                        .await;
                    });
                }
                continue;
            }
        }
        let _ = sock.set_nodelay(true);
        let (handle, sources, tls) = (handle.clone(), sources.clone(), tls.clone());
        tokio::spawn(async move {
            let svc = service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(Source(peer));
                let fut = handle(req);
                Box::pin(async move { Ok::<_, Infallible>(refusal_closes(fut.await)) })
                    as Pin<Box<dyn Future<Output = Result<Response<B>, Infallible>> + Send>>
            });
            let http = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(door.header_timeout)
                .clone();
            match tls {
                None => {
                    let conn = http
                        .serve_connection(TokioIo::new(sock), svc)
                        .without_shutdown();
                    finish(door.name, peer, conn.await.map(|p| p.io.into_inner())).await;
                }
                Some(tls) => {
                    match tokio::time::timeout(door.header_timeout, tls.accept(sock)).await {
                        Ok(Ok(stream)) => {
                            let conn = http
                                .serve_connection(TokioIo::new(stream), svc)
                                .without_shutdown();
                            finish(door.name, peer, conn.await.map(|p| p.io.into_inner())).await;
                        }
                        Ok(Err(e)) => debug!(%peer, "{} TLS handshake: {e}", door.name),
                        Err(_) => debug!(%peer, "{} TLS handshake: too slow", door.name),
                    }
                }
            }
            if door.max_per_source.is_some() {
                sources.leave(peer.ip());
            }
            drop(permit);
        });
    }
}

/// The end of a connection: after an answer (a refusal, `Connection: close` either way,
/// or the client's end of a kept-alive connection) it is closed gently, so that a client
/// still sending reads what it was answered.
async fn finish<T>(name: &str, peer: std::net::SocketAddr, end: Result<T, hyper::Error>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match end {
        Ok(io) => {
            let mut io = TokioAdapter::new(io);
            let how = linger::close_after_refusal(&mut io, tokio::time::sleep(linger::TIME)).await;
            debug!(%peer, ?how, "{name} connection closed");
        }
        Err(e) => debug!(%peer, "{name} connection: {e}"),
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
pub enum BodyRefused {
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
pub async fn read_body(
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
