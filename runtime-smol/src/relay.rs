//! The relay server on smol: an accept loop, one task per connection, and the relay
//! state machine on the executor-independent service thread of `a2acp-runtime`.
//!
//! Each accepted connection is first admitted or refused by the shared
//! [`a2acp_runtime::admission`] (caps per source address and in total), then (Nagle off)
//! served by [`admission::serve_connection`], as on tokio: its HTTP phase under one
//! deadline (`GET /healthz` and `GET /metrics` are answered over plain HTTP on the same
//! port; a WebSocket upgrade with the shared [`a2acp_runtime::ws::config`] becomes an agent
//! link), then the link, served by the shared [`a2acp_runtime::ws::serve_relay_link`]:
//! frames go to the service, and what it sends back is written only after the batch that
//! produced it is committed to SQLite.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use a2acp_runtime::admission::{self, AdmissionConfig, AdmissionStats, Listening, Ticket};
use a2acp_runtime::relay_service::{
    RelayHandle, RelayService, RelaySnapshot, ServiceConfig, ServiceError,
};
use a2acp_runtime::tls::ServerTls;
use smol::net::{TcpListener, TcpStream};
use smol::{Async, Task};

pub use a2acp_runtime::admission::RelayError;

/// A running relay. Dropping it stops accepting connections (the service thread stops
/// with [`RunningRelay::stop`]).
#[derive(Debug)]
pub struct RunningRelay {
    listening: Listening,
    service: Option<RelayService>,
    accept: Option<Task<()>>,
}

/// Binds `listen` and starts the relay with the default connection caps and deadline
/// ([`AdmissionConfig::default`]).
pub async fn start(listen: &str, cfg: ServiceConfig) -> Result<RunningRelay, RelayError> {
    start_with(listen, cfg, AdmissionConfig::default(), None).await
}

/// Binds `listen` and starts the relay with these connection caps and deadline, serving
/// TLS (`wss://`, `https://`) with `tls`, plain `ws://` and `http://` without.
pub async fn start_with(
    listen: &str,
    cfg: ServiceConfig,
    conns: AdmissionConfig,
    tls: Option<ServerTls>,
) -> Result<RunningRelay, RelayError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(RelayError::bind(listen))?;
    let addr = listener.local_addr().map_err(RelayError::bind(listen))?;
    let service = smol::unblock(move || RelayService::start(cfg)).await?;
    let listening = Listening::new(addr, &service, conns, tls.is_some());
    if let (Some(tasks), Some(fed)) = (service.federation_tasks(), service.federation()) {
        // Ends when the service stops (its end of the tasks' channel goes).
        smol::spawn(a2acp_runtime::federation::driver::run(
            crate::federation::SmolNet,
            std::sync::Arc::new(fed.clone()),
            listening.handle().clone(),
            tasks,
        ))
        .detach();
    }
    let h = listening.handle().clone();
    let adm = listening.admission().clone();
    let accept = smol::spawn(async move {
        loop {
            adm.room().await;
            match listener.accept().await {
                Ok((stream, peer)) => match adm.admit(peer.ip()) {
                    Ok(ticket) => {
                        smol::spawn(connection(stream, tls.clone(), peer, h.clone(), ticket))
                            .detach();
                    }
                    Err(_) => refuse(stream),
                },
                Err(e) => {
                    smol::Timer::after(adm.accept_failed(&e)).await;
                }
            }
        }
    });
    Ok(RunningRelay {
        listening,
        service: Some(service),
        accept: Some(accept),
    })
}

impl RunningRelay {
    /// The address listened on.
    pub fn addr(&self) -> SocketAddr {
        self.listening.addr()
    }

    /// `ws://addr`, or `wss://addr` when the relay serves TLS.
    pub fn url(&self) -> String {
        self.listening.url()
    }

    /// Current counters.
    pub async fn snapshot(&self) -> Option<RelaySnapshot> {
        self.listening.snapshot().await
    }

    /// The listener's connection counters.
    pub fn connections(&self) -> AdmissionStats {
        self.listening.connections()
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
            if self.listening.snapshot().await.is_none() {
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

async fn connection(
    stream: TcpStream,
    tls: Option<ServerTls>,
    peer: SocketAddr,
    handle: RelayHandle,
    ticket: Ticket,
) {
    let _ = stream.set_nodelay(true);
    let timer = |d: Duration| {
        let t = smol::Timer::after(d);
        async move {
            t.await;
        }
    };
    admission::serve_connection(stream, tls, peer, handle, ticket, timer).await;
}

/// Refuses an accepted connection: [`admission::REFUSED`] if the socket takes it at once
/// (one non-blocking write), then closed.
fn refuse(stream: TcpStream) {
    use std::io::Write as _;
    let socket: Arc<Async<std::net::TcpStream>> = stream.into();
    let _ = socket.get_ref().write(admission::REFUSED);
}
