//! The relay server on tokio: an accept loop, one task per connection, and the relay
//! state machine on the executor-independent service thread of `a2acp-runtime`.
//!
//! Each accepted connection is first admitted or refused by the shared
//! [`a2acp_runtime::admission`] (caps per source address and in total), then served by
//! [`admission::serve_connection`]: its HTTP phase under one deadline (`GET /healthz` and
//! `GET /metrics` are answered over plain HTTP on the same port; a WebSocket upgrade
//! becomes an agent link), then the link: every text or binary message goes to the
//! service, and what the service sends back is written only after the batch that produced
//! it is committed to SQLite.

use std::net::SocketAddr;
use std::time::Duration;

use a2acp_runtime::admission::{self, AdmissionConfig, AdmissionStats, Listening, Ticket};
use a2acp_runtime::relay_service::{
    RelayHandle, RelayService, RelaySnapshot, ServiceConfig, ServiceError,
};
use a2acp_runtime::tls::ServerTls;
use async_tungstenite::tokio::TokioAdapter;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub use a2acp_runtime::admission::RelayError;

/// A running relay.
#[derive(Debug)]
pub struct RunningRelay {
    listening: Listening,
    service: Option<RelayService>,
    accept: JoinHandle<()>,
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
    let service = tokio::task::spawn_blocking(move || RelayService::start(cfg))
        .await
        .map_err(|e| ServiceError::Thread(e.to_string()))??;
    let listening = Listening::new(addr, &service, conns, tls.is_some());
    if let (Some(tasks), Some(fed)) = (service.federation_tasks(), service.federation()) {
        // Ends when the service stops (its end of the tasks' channel goes).
        tokio::spawn(a2acp_runtime::federation::driver::run(
            crate::federation::TokioNet,
            std::sync::Arc::new(fed.clone()),
            listening.handle().clone(),
            tasks,
        ));
    }
    let h = listening.handle().clone();
    let adm = listening.admission().clone();
    let accept = tokio::spawn(async move {
        loop {
            adm.room().await;
            match listener.accept().await {
                Ok((stream, peer)) => match adm.admit(peer.ip()) {
                    Ok(ticket) => {
                        tokio::spawn(connection(stream, tls.clone(), peer, h.clone(), ticket));
                    }
                    Err(_) => {
                        // Best effort, one non-blocking write; then closed.
                        let _ = stream.try_write(admission::REFUSED);
                    }
                },
                Err(e) => tokio::time::sleep(adm.accept_failed(&e)).await,
            }
        }
    });
    Ok(RunningRelay {
        listening,
        service: Some(service),
        accept,
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
            if self.listening.snapshot().await.is_none() {
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

async fn connection(
    stream: TcpStream,
    tls: Option<ServerTls>,
    peer: SocketAddr,
    handle: RelayHandle,
    ticket: Ticket,
) {
    let _ = stream.set_nodelay(true);
    admission::serve_connection(
        TokioAdapter::new(stream),
        tls,
        peer,
        handle,
        ticket,
        tokio::time::sleep,
    )
    .await;
}
