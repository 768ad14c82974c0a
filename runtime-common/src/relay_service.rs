//! The relay state machine on its own OS thread, executor-independent.
//!
//! Connection tasks (of any executor) report connections, frames and disconnections
//! through a bounded channel ([`RelayHandle`]); one thread owns the [`Relay`] and its
//! SQLite [`Store`]. It takes a batch of inputs (whatever is waiting, up to `max_batch`),
//! feeds them to the relay with the current time, collects the outputs, **commits every
//! persist record of the batch in one transaction, and only then** hands the frames to
//! the connections' outgoing channels — so an `accepted` never leaves before its packet is
//! durable, and a registration is stored before its `auth_ok` (group commit: one sync per
//! batch, however many packets it holds). SQLite's blocking calls never stall an async
//! executor, and the thread's outputs are executed strictly in order.
//!
//! A connection whose outgoing channel is full (it does not read) is dropped as a slow
//! consumer; its unacknowledged packets stay queued for its next connection.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use a2acp_core::persist::PersistOp;
use a2acp_core::relay::frame::ErrorCode;
use a2acp_core::relay::{ConnId, Relay, RelayConfig, RelayEvent, RelayOutput, RelayStats};
use tracing::{debug, error, info, warn};

use crate::store::{Durability, Store, StoreError};

/// How to run the relay service.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The relay's settings.
    pub relay: RelayConfig,
    /// Data directory (`relay.db` inside); `None` keeps everything in memory.
    pub data: Option<PathBuf>,
    /// How commits reach the disk.
    pub durability: Durability,
    /// Most inputs handled per commit.
    pub max_batch: usize,
    /// Outgoing frames buffered per connection before it is dropped as a slow consumer.
    pub conn_queue: usize,
    /// Inputs buffered before connection tasks wait (backpressure).
    pub input_queue: usize,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            relay: RelayConfig::default(),
            data: None,
            durability: Durability::Full,
            max_batch: 1024,
            conn_queue: 4096,
            input_queue: 16_384,
        }
    }
}

/// Why the service could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The store failed (nothing after the last commit was revealed to anyone).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stored records are unusable.
    #[error("cannot restore the relay from its database: {0}")]
    Restore(#[from] a2acp_core::relay::RelayRestoreError),
    /// The data directory could not be created.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// No randomness.
    #[error(transparent)]
    Seed(#[from] crate::clock::SeedError),
    /// The thread could not be started or panicked.
    #[error("relay thread: {0}")]
    Thread(String),
}

/// What a connection task must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnOut {
    /// Send this frame (a WebSocket text message).
    Frame(Vec<u8>),
    /// Close the connection with this reason (`None`: the relay is shutting down).
    Close(Option<ErrorCode>),
}

/// The service has stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the relay service has stopped")]
pub struct Stopped;

/// Counters for `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelaySnapshot {
    /// The state machine's counters.
    pub stats: RelayStats,
    /// Connections dropped for not reading.
    pub slow_consumers: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Batches handled.
    pub batches: u64,
}

enum Msg {
    Connected(ConnId, flume::Sender<ConnOut>),
    Bytes(ConnId, Vec<u8>),
    Disconnected(ConnId),
    Snapshot(flume::Sender<RelaySnapshot>),
    Wake,
}

/// A cheap, cloneable handle for connection tasks.
#[derive(Clone)]
pub struct RelayHandle {
    tx: flume::Sender<Msg>,
    next: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    graceful: Arc<AtomicBool>,
    conn_queue: usize,
}

impl std::fmt::Debug for RelayHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayHandle").finish_non_exhaustive()
    }
}

impl RelayHandle {
    /// A new connection: its id and the channel of what to send on it (the challenge
    /// comes first).
    pub async fn connect(&self) -> Result<(ConnId, flume::Receiver<ConnOut>), Stopped> {
        let conn = ConnId(self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = flume::bounded(self.conn_queue);
        self.tx
            .send_async(Msg::Connected(conn, tx))
            .await
            .map_err(|_| Stopped)?;
        Ok((conn, rx))
    }

    /// A frame arrived on `conn` (waits while the relay is saturated).
    pub async fn bytes(&self, conn: ConnId, bytes: Vec<u8>) -> Result<(), Stopped> {
        self.tx
            .send_async(Msg::Bytes(conn, bytes))
            .await
            .map_err(|_| Stopped)
    }

    /// `conn` closed.
    pub async fn disconnected(&self, conn: ConnId) {
        let _ = self.tx.send_async(Msg::Disconnected(conn)).await;
    }

    /// Current counters, or `None` if the service stopped.
    pub async fn snapshot(&self) -> Option<RelaySnapshot> {
        let (tx, rx) = flume::bounded(1);
        self.tx.send_async(Msg::Snapshot(tx)).await.ok()?;
        rx.recv_async().await.ok()
    }

    /// Asks the service to stop: `graceful` closes every connection with a close frame;
    /// otherwise connections are dropped as by a crash. Committed state is kept either way.
    pub fn stop(&self, graceful: bool) {
        self.graceful.store(graceful, Ordering::SeqCst);
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.tx.try_send(Msg::Wake);
    }

    /// Whether a stop was requested.
    pub fn is_stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

/// The running service.
#[derive(Debug)]
pub struct RelayService {
    handle: RelayHandle,
    thread: Option<JoinHandle<Result<(), ServiceError>>>,
    domain: String,
    restored: (usize, usize),
}

impl RelayService {
    /// Opens the store, restores the relay and starts its thread.
    pub fn start(cfg: ServiceConfig) -> Result<RelayService, ServiceError> {
        let store = match &cfg.data {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|source| ServiceError::DataDir {
                    path: dir.clone(),
                    source,
                })?;
                Store::open(&dir.join("relay.db"), cfg.durability)?
            }
            None => Store::in_memory()?,
        };
        let records = store.load_all()?;
        let relay = Relay::restore(cfg.relay.clone(), crate::clock::os_seed()?, records)?;
        let st = relay.stats();
        let restored = (st.registered, st.queued);
        let domain = relay.config().domain.clone();
        let (tx, rx) = flume::bounded(cfg.input_queue.max(1));
        let handle = RelayHandle {
            tx,
            next: Arc::new(AtomicU64::new(1)),
            stop: Arc::new(AtomicBool::new(false)),
            graceful: Arc::new(AtomicBool::new(true)),
            conn_queue: cfg.conn_queue.max(16),
        };
        let h2 = handle.clone();
        let max_batch = cfg.max_batch.max(1);
        let thread = std::thread::Builder::new()
            .name("a2acp-relay".into())
            .spawn(move || Core::new(relay, store, rx, h2, max_batch).run())
            .map_err(|e| ServiceError::Thread(e.to_string()))?;
        Ok(RelayService {
            handle,
            thread: Some(thread),
            domain,
            restored,
        })
    }

    /// A handle for connection tasks.
    pub fn handle(&self) -> RelayHandle {
        self.handle.clone()
    }

    /// The domain served.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// Registrations and queued packets found at start.
    pub fn restored(&self) -> (usize, usize) {
        self.restored
    }

    /// Stops the service and waits for its thread (blocking: call from a plain thread
    /// or a blocking section).
    pub fn stop_and_join(mut self, graceful: bool) -> Result<(), ServiceError> {
        self.handle.stop(graceful);
        self.join_inner()
    }

    /// Waits for the thread to end (after a stop or a fatal error).
    pub fn join(mut self) -> Result<(), ServiceError> {
        self.join_inner()
    }

    fn join_inner(&mut self) -> Result<(), ServiceError> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| ServiceError::Thread("the relay thread panicked".into()))?,
            None => Ok(()),
        }
    }
}

impl Drop for RelayService {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.handle.stop(false);
            let _ = self.join_inner();
        }
    }
}

struct Core {
    relay: Relay,
    store: Store,
    rx: flume::Receiver<Msg>,
    handle: RelayHandle,
    conns: HashMap<ConnId, flume::Sender<ConnOut>>,
    max_batch: usize,
    slow: u64,
    commits: u64,
    batches: u64,
    ops: Vec<PersistOp>,
    actions: Vec<RelayOutput>,
    dropped: Vec<ConnId>,
}

impl Core {
    fn new(
        relay: Relay,
        store: Store,
        rx: flume::Receiver<Msg>,
        handle: RelayHandle,
        max_batch: usize,
    ) -> Self {
        Core {
            relay,
            store,
            rx,
            handle,
            conns: HashMap::new(),
            max_batch,
            slow: 0,
            commits: 0,
            batches: 0,
            ops: Vec::new(),
            actions: Vec::new(),
            dropped: Vec::new(),
        }
    }

    fn run(mut self) -> Result<(), ServiceError> {
        let mut batch: Vec<Msg> = Vec::with_capacity(self.max_batch);
        let mut replies: Vec<flume::Sender<RelaySnapshot>> = Vec::new();
        loop {
            if self.handle.is_stopping() {
                return self.shutdown();
            }
            let now_ms = crate::clock::now().as_millis();
            let wait = self
                .relay
                .poll_timeout()
                .map(|t| t.as_millis().saturating_sub(now_ms))
                .unwrap_or(1000)
                .min(1000);
            match self
                .rx
                .recv_deadline(Instant::now() + Duration::from_millis(wait))
            {
                Ok(m) => batch.push(m),
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => return self.shutdown(),
            }
            while batch.len() < self.max_batch {
                match self.rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break,
                }
            }
            let now = crate::clock::now();
            for conn in std::mem::take(&mut self.dropped) {
                self.relay.handle_disconnected(now, conn);
                self.collect();
            }
            for m in batch.drain(..) {
                match m {
                    Msg::Connected(conn, tx) => {
                        self.conns.insert(conn, tx);
                        self.relay.handle_connected(now, conn);
                    }
                    Msg::Bytes(conn, bytes) => self.relay.handle_bytes(now, conn, &bytes),
                    Msg::Disconnected(conn) => {
                        self.conns.remove(&conn);
                        self.relay.handle_disconnected(now, conn);
                    }
                    Msg::Snapshot(tx) => replies.push(tx),
                    Msg::Wake => {}
                }
                self.collect();
            }
            if self.relay.poll_timeout().is_some_and(|t| t <= now) {
                self.relay.handle_timeout(now);
                self.collect();
            }
            if !self.ops.is_empty() {
                if let Err(e) = self.store.apply(&self.ops, &[]) {
                    error!(error = %e, "relay store failed; stopping without revealing the uncommitted batch");
                    self.conns.clear();
                    return Err(e.into());
                }
                self.commits += 1;
                self.ops.clear();
            }
            self.batches += 1;
            self.execute();
            for r in replies.drain(..) {
                let _ = r.try_send(self.snapshot());
            }
        }
    }

    fn snapshot(&self) -> RelaySnapshot {
        RelaySnapshot {
            stats: self.relay.stats(),
            slow_consumers: self.slow,
            commits: self.commits,
            batches: self.batches,
        }
    }

    /// Moves the relay's outputs into the batch: persists to `ops`, the rest to `actions`.
    fn collect(&mut self) {
        while let Some(o) = self.relay.poll_output() {
            match o {
                RelayOutput::Persist(op) => self.ops.push(op),
                RelayOutput::Event(e) => log_event(&e),
                other => self.actions.push(other),
            }
        }
    }

    fn execute(&mut self) {
        for a in std::mem::take(&mut self.actions) {
            match a {
                RelayOutput::Send { conn, bytes } => {
                    let Some(tx) = self.conns.get(&conn) else {
                        continue;
                    };
                    match tx.try_send(ConnOut::Frame(bytes)) {
                        Ok(()) => {}
                        Err(flume::TrySendError::Full(_)) => {
                            warn!(
                                conn = conn.0,
                                "connection does not read its frames: dropped as a slow consumer"
                            );
                            self.slow += 1;
                            self.conns.remove(&conn);
                            self.dropped.push(conn);
                        }
                        Err(flume::TrySendError::Disconnected(_)) => {
                            self.conns.remove(&conn);
                        }
                    }
                }
                RelayOutput::Close { conn, code } => {
                    if let Some(tx) = self.conns.remove(&conn) {
                        let _ = tx.try_send(ConnOut::Close(Some(code)));
                    }
                }
                RelayOutput::Persist(_) | RelayOutput::Event(_) => {}
            }
        }
    }

    fn shutdown(mut self) -> Result<(), ServiceError> {
        let graceful = self.handle.graceful.load(Ordering::SeqCst);
        if graceful {
            for tx in self.conns.values() {
                let _ = tx.try_send(ConnOut::Close(None));
            }
        }
        self.conns.clear();
        info!(
            routed = self.relay.stats().routed_total,
            queued = self.relay.stats().queued,
            graceful,
            "relay service stopped"
        );
        Ok(())
    }
}

fn log_event(e: &RelayEvent) {
    match e {
        RelayEvent::Registered { address } => info!(%address, "registered"),
        RelayEvent::Authenticated { conn, address } => {
            debug!(conn = conn.0, %address, "authenticated")
        }
        RelayEvent::Refused {
            conn,
            address,
            code,
            message,
        } => warn!(
            conn = conn.0,
            address = address.as_ref().map(|a| a.as_str()).unwrap_or("-"),
            code = code.as_str(),
            message = message.as_str(),
            "refused"
        ),
        RelayEvent::Replaced { old, new, address } => {
            info!(old = old.0, new = new.0, %address, "a newer connection replaced the old one")
        }
        RelayEvent::Overflow { from, to } => {
            info!(%from, %to, "thread queue full: overflow notice sent")
        }
        RelayEvent::ConnectionDead { conn } => {
            info!(conn = conn.0, "connection silent too long: closed")
        }
        RelayEvent::Routed { from, to, id } => debug!(%from, %to, id, "routed"),
        RelayEvent::Delivered { id, to } => debug!(id, %to, "delivered"),
        RelayEvent::Acked { id } => debug!(id, "acknowledged"),
        RelayEvent::AckIgnored { conn, id } => {
            debug!(conn = conn.0, id, "ack of unknown id ignored")
        }
    }
}
