//! The relay server on tokio: an accept loop, one task per connection, and the relay
//! state machine on the executor-independent service thread of `a2acp-runtime`.
//!
//! Each accepted connection is peeked at: `GET /healthz` and `GET /metrics` are answered
//! over plain HTTP on the same port; a WebSocket upgrade becomes an agent link. A link task
//! forwards every text or binary message to the service and writes what the service sends
//! back (frames are sent only after the batch that produced them is committed to SQLite).

use std::net::SocketAddr;
use std::time::Duration;

use a2acp_runtime::http::{self, Route};
use a2acp_runtime::relay_service::{
    RelayHandle, RelayService, RelaySnapshot, ServiceConfig, ServiceError,
};
use async_tungstenite::tokio::accept_async_with_config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

/// Why the relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The listener could not bind.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The service failed.
    #[error(transparent)]
    Service(#[from] ServiceError),
}

/// A running relay.
#[derive(Debug)]
pub struct RunningRelay {
    addr: SocketAddr,
    handle: RelayHandle,
    service: Option<RelayService>,
    accept: JoinHandle<()>,
}

/// Binds `listen` and starts the relay.
pub async fn start(listen: &str, cfg: ServiceConfig) -> Result<RunningRelay, RelayError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| RelayError::Bind {
            addr: listen.to_string(),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| RelayError::Bind {
        addr: listen.to_string(),
        source,
    })?;
    let service = tokio::task::spawn_blocking(move || RelayService::start(cfg))
        .await
        .map_err(|e| ServiceError::Thread(e.to_string()))??;
    let (regs, queued) = service.restored();
    info!(%addr, domain = service.domain(), registered = regs, queued, "relay listening");
    let handle = service.handle();
    let h = handle.clone();
    let accept = tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    let h = h.clone();
                    tokio::spawn(connection(stream, peer, h));
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });
    Ok(RunningRelay {
        addr,
        handle,
        service: Some(service),
        accept,
    })
}

impl RunningRelay {
    /// The address listened on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `ws://addr`.
    pub fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// Current counters.
    pub async fn snapshot(&self) -> Option<RelaySnapshot> {
        self.handle.snapshot().await
    }

    /// Stops accepting and stops the service. `graceful`: every agent gets a close frame;
    /// otherwise connections are dropped as by a crash (`kill -9`). Committed state stays.
    pub async fn stop(mut self, graceful: bool) -> Result<(), ServiceError> {
        self.accept.abort();
        let service = self.service.take();
        let r = match service {
            Some(s) => tokio::task::spawn_blocking(move || s.stop_and_join(graceful))
                .await
                .map_err(|e| ServiceError::Thread(e.to_string()))?,
            None => Ok(()),
        };
        if graceful {
            // Let the connection tasks write their close frames.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        r
    }

    /// Waits until the service stops by itself (a fatal store error).
    pub async fn wait_failed(&mut self) -> Result<(), ServiceError> {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if self.handle.snapshot().await.is_none() {
                self.accept.abort();
                return match self.service.take() {
                    Some(s) => tokio::task::spawn_blocking(move || s.join())
                        .await
                        .map_err(|e| ServiceError::Thread(e.to_string()))?,
                    None => Ok(()),
                };
            }
        }
    }
}

impl Drop for RunningRelay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn peek_route(stream: &TcpStream) -> Option<Route> {
    let mut buf = vec![0u8; 1024];
    let mut last = 0usize;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        if let Some(r) = http::classify(&buf[..n]) {
            return Some(r);
        }
        if n == buf.len() {
            buf.resize((buf.len() * 2).min(http::MAX_HEAD), 0);
        } else if n == last {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        last = n;
    }
}

async fn serve_http(mut stream: TcpStream, route: Route, handle: RelayHandle) {
    let mut head = Vec::new();
    let mut b = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < http::MAX_HEAD {
        match stream.read(&mut b).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    let snap = handle.snapshot().await;
    let _ = stream.write_all(&http::answer(&route, snap.as_ref())).await;
    let _ = stream.shutdown().await;
}

async fn connection(stream: TcpStream, peer: SocketAddr, handle: RelayHandle) {
    let _ = stream.set_nodelay(true);
    let Some(route) = peek_route(&stream).await else {
        return;
    };
    if route != Route::WebSocket {
        serve_http(stream, route, handle).await;
        return;
    }
    let ws = match accept_async_with_config(stream, Some(crate::ws::config())).await {
        Ok(ws) => ws,
        Err(e) => {
            debug!(%peer, error = %e, "WebSocket handshake failed");
            return;
        }
    };
    a2acp_runtime::ws::serve_relay_link(ws, peer, handle).await;
}
