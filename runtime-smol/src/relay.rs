//! The relay server on smol: an accept loop, one task per connection, and the relay
//! state machine on the executor-independent service thread of `a2acp-runtime`.
//!
//! Each accepted connection (Nagle off) is peeked at: `GET /healthz` and `GET /metrics` are
//! answered over plain HTTP on the same port; a WebSocket upgrade (with the shared
//! [`a2acp_runtime::ws::config`]) becomes an agent link, served by the shared
//! [`a2acp_runtime::ws::serve_relay_link`]: frames go to the service, and what it sends
//! back is written only after the batch that produced it is committed to SQLite.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use a2acp_runtime::http::{self, Route};
use a2acp_runtime::relay_service::{
    RelayHandle, RelayService, RelaySnapshot, ServiceConfig, ServiceError,
};
use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::{TcpListener, TcpStream};
use smol::Task;
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

/// A running relay. Dropping it stops accepting connections (the service thread stops
/// with [`RunningRelay::stop`]).
#[derive(Debug)]
pub struct RunningRelay {
    addr: SocketAddr,
    handle: RelayHandle,
    service: Option<RelayService>,
    accept: Option<Task<()>>,
}

/// Binds `listen` and starts the relay.
pub async fn start(listen: &str, cfg: ServiceConfig) -> Result<RunningRelay, RelayError> {
    let bind_err = |source| RelayError::Bind {
        addr: listen.to_string(),
        source,
    };
    let listener = TcpListener::bind(listen).await.map_err(bind_err)?;
    let addr = listener.local_addr().map_err(bind_err)?;
    let service = smol::unblock(move || RelayService::start(cfg)).await?;
    let (regs, queued) = service.restored();
    info!(%addr, domain = service.domain(), registered = regs, queued, "relay listening");
    let handle = service.handle();
    let h = handle.clone();
    let accept = smol::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    smol::spawn(connection(stream, peer, h.clone())).detach();
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    smol::Timer::after(Duration::from_millis(50)).await;
                }
            }
        }
    });
    Ok(RunningRelay {
        addr,
        handle,
        service: Some(service),
        accept: Some(accept),
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
        if let Some(a) = self.accept.take() {
            a.cancel().await;
        }
        let r = match self.service.take() {
            Some(s) => smol::unblock(move || s.stop_and_join(graceful)).await,
            None => Ok(()),
        };
        if graceful {
            // Let the connection tasks write their close frames.
            smol::Timer::after(Duration::from_millis(100)).await;
        }
        r
    }

    /// Waits until the service stops by itself (a fatal store error).
    pub async fn wait_failed(&mut self) -> Result<(), ServiceError> {
        loop {
            smol::Timer::after(Duration::from_millis(500)).await;
            if self.handle.snapshot().await.is_none() {
                if let Some(a) = self.accept.take() {
                    a.cancel().await;
                }
                return match self.service.take() {
                    Some(s) => smol::unblock(move || s.join()).await,
                    None => Ok(()),
                };
            }
        }
    }
}

/// What the first bytes of a connection ask for (10 s at most to say it).
async fn peek_route(stream: &TcpStream) -> Option<Route> {
    let mut buf = vec![0u8; 1024];
    let mut last = 0usize;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let peeked = smol::future::or(async { Some(stream.peek(&mut buf).await) }, async {
            smol::Timer::at(deadline).await;
            None
        })
        .await;
        let n = peeked?.ok()?;
        if n == 0 {
            return None;
        }
        if let Some(r) = http::classify(&buf[..n]) {
            return Some(r);
        }
        if n == buf.len() {
            buf.resize((buf.len() * 2).min(http::MAX_HEAD), 0);
        } else if n == last {
            smol::Timer::after(Duration::from_millis(5)).await;
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
    let _ = stream.flush().await;
    let _ = stream.shutdown(std::net::Shutdown::Write);
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
    let ws = match async_tungstenite::accept_async_with_config(
        stream,
        Some(a2acp_runtime::ws::config()),
    )
    .await
    {
        Ok(ws) => ws,
        Err(e) => {
            debug!(%peer, error = %e, "WebSocket handshake failed");
            return;
        }
    };
    a2acp_runtime::ws::serve_relay_link(ws, peer, handle).await;
}
