//! The relay on its own OS threads, executor-independent.
//!
//! Connection tasks (of any executor) report connections, frames and disconnections
//! through a [`RelayHandle`]. Three kinds of threads do the rest, a pipeline:
//!
//! 1. **Verifiers** (one per core by default). A connection's frames always go to the same
//!    verifier, so they stay in order. It parses each frame and, for a `send` on a
//!    connection authenticated with the envelope's `from_key`, checks the envelope's
//!    signature — with one batch verification when several are waiting (deep queues), one
//!    by one otherwise — against a cache of decompressed verifying keys. Frames it could
//!    not check (unauthenticated connection, another key) go on unverified: the state
//!    machine checks those itself. Verification is neither on the executor's I/O tasks
//!    nor on the state machine's thread.
//! 2. **The state machine**: one thread owns the [`Relay`]. It takes a batch of inputs
//!    (whatever is waiting, up to `max_batch`), feeds them in order with the current time
//!    — routing, rate limits, registry and queue bounds — and hands the batch's outputs to
//!    the committer. It then goes on with the next batch while the previous one is synced.
//!    A `deliver` to an online recipient is the exception: this thread sends it at once,
//!    in parallel with the commit of its packet (`early.rs`; the sender's `accepted` still
//!    waits for the commit), unless it must wait for the connection's `auth_ok` or for the
//!    reservation of delivery ids covering its id to be committed (reserved far ahead: under
//!    steady load, long committed).
//! 3. **The committer**: one thread owns the SQLite [`Store`]. It takes every batch
//!    waiting, **commits all their persist records in one transaction, and only then**
//!    hands their frames to the connections' outgoing channels, batch after batch in
//!    order — so an `accepted` never leaves before its packet is durable, and a
//!    registration is stored before its `auth_ok` (group commit: one sync for however
//!    many batches and packets were waiting). A packet acknowledged before its commit
//!    costs no row: its record's insert and delete cancel out in the transaction.
//!    SQLite's blocking calls never stall an async executor nor the routing.
//!
//! A connection whose outgoing channel is full (it does not read) is dropped as a slow
//! consumer; its unacknowledged packets stay queued for its next connection.
//!
//! **Logs a client can cause are rate-limited** (the runtime's one [`LogLimiter`]): of
//! each connection's refusals, the first [`LOGGED_REFUSALS_PER_CONN`] are logged (WARN)
//! and the others counted and summarised in one line when the connection ends; and every
//! line a client can cause (refusals, those summaries, connections closed for abuse,
//! replaced, silent or slow) goes through one limiter for the whole relay ([`LOG_BURST`]
//! lines, then [`LOG_LINES_PER_SEC`] per second). Lines past it are counted, and
//! summarised in one line at most every [`LOG_SUMMARY_EVERY`]. However many clients
//! misbehave, the relay writes at most a few hundred bytes of such lines per second.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use a2acp_core::link::ErrorCode;
use a2acp_core::relay::federation::{
    DiscoveryError, FederationConfig, FederationEvent, LinkSide, RemoteRelay,
};
use a2acp_core::relay::{
    ConnId, FrameError, ParsedFrame, Relay, RelayConfig, RelayEvent, RelayInput, RelayOutput,
    RelayStats, Source, Verified,
};
use async_tungstenite::tungstenite::Bytes;
use tracing::info;

use crate::federation::driver::Task;
use crate::store::{Durability, Store, StoreError};

use self::commit::{Commit, Committer, ToCommitter};
use self::early::{EarlyConns, Outcome};
use self::log::{ClientLog, ConnLog};
use self::verify::{Verifier, VerifyState};

mod cluster;
mod commit;
mod early;
mod log;
mod verify;

/// How to run the relay service.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The relay's settings.
    pub relay: RelayConfig,
    /// Data directory (`relay.db` inside); `None` keeps everything in memory.
    pub data: Option<PathBuf>,
    /// How commits reach the disk.
    pub durability: Durability,
    /// Most inputs the state machine handles in one step (one batch for the committer).
    pub max_batch: usize,
    /// Outgoing frames buffered per connection before it is dropped as a slow consumer.
    pub conn_queue: usize,
    /// Inputs buffered before connection tasks wait (backpressure).
    pub input_queue: usize,
    /// Threads parsing frames and verifying envelope signatures; 0: one per core.
    pub verifiers: usize,
    /// How the relay federates with other domains' relays (`None`: it does not).
    pub federation: Option<crate::federation::Federation>,
    /// Cluster mode: the NATS cluster this node shares the domain's registry, presence and
    /// queue through (`None`: a single relay on its own store).
    pub cluster: Option<crate::cluster::ClusterConfig>,
    /// The ACP gateway (seed 004 §5.1, `--acp-listen`), which needs `cluster`.
    pub acp_gateway: Option<crate::acp_gateway::GatewayConfig>,
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
            verifiers: 0,
            federation: None,
            cluster: None,
            acp_gateway: None,
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
    /// Cluster mode could not start (the NATS cluster unreachable or misconfigured).
    #[error("cluster: {0}")]
    Cluster(#[from] crate::cluster::ClusterError),
    /// Settings that cannot go together.
    #[error("{0}")]
    Settings(String),
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
    /// Log lines about clients (refusals, closed connections) not written because of the
    /// log's rate limits (module documentation); they are counted in summaries instead.
    pub log_lines_suppressed: u64,
    /// Cluster mode: the node's link to the cluster.
    pub cluster: Option<crate::cluster::ClusterHealth>,
}

/// Most frames a verifier takes at once (and most signatures in one batch verification).
const VERIFY_CHUNK: usize = 128;
/// Fewest signatures worth a batch verification (below, one by one is as fast).
const BATCH_MIN: usize = 4;
/// Decompressed keys a verifier keeps before starting over.
const KEY_CACHE_MAX: usize = 65_536;
/// Batches the state machine may hand the committer before it waits for a commit.
const COMMIT_QUEUE: usize = 4;
/// How often idle threads look at the stop flag.
const IDLE_WAKE: Duration = Duration::from_millis(250);
/// Refusals of one connection logged one by one; the rest are summarised when it ends.
pub const LOGGED_REFUSALS_PER_CONN: u32 = 3;
/// Lines about clients the relay may log at once (the log limiter's capacity).
pub const LOG_BURST: u32 = 20;
/// Lines about clients the relay may log per second after the burst.
pub const LOG_LINES_PER_SEC: u32 = 2;
/// Least time between two summaries of the lines the log limiter held back.
pub const LOG_SUMMARY_EVERY: Duration = Duration::from_secs(10);
/// Connections a verifier remembers as closed by the relay (their frames are dropped
/// unparsed) before it starts over.
const CLOSED_MAX: usize = 65_536;

/// An input of the state machine.
enum Msg {
    Connected(ConnId, flume::Sender<ConnOut>, Source),
    /// A relay link this relay dialled (federation) is open.
    Dialed(ConnId, flume::Sender<ConnOut>, String, Source),
    /// An answer of federation's tasks (`Discovered`, `DialFailed`); boxed: rare, and
    /// larger than every other message.
    Input(Box<RelayInput<'static>>),
    /// Frames and disconnections of one verifier's connections, in their order.
    Items(Vec<Item>),
    Snapshot(flume::Sender<RelaySnapshot>),
    Wake,
}

// A frame is short-lived and travels in a `Vec`; boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum Item {
    Frame(ConnId, Result<ParsedFrame, FrameError>, Verified),
    /// A frame of a relay link this relay dialled: the other relay's frames, which the
    /// state machine reads itself.
    Raw(ConnId, Vec<u8>),
    /// A frame beyond the transport's limit (its size limit).
    Oversized(ConnId, usize),
    Disconnected(ConnId),
}

/// An input of a verifier.
enum VerifyIn {
    /// The connection is a relay link this relay dialled: its frames go on unparsed.
    Dialed(ConnId),
    /// A frame as the transport read it (shared, not copied).
    Bytes(ConnId, Bytes),
    Oversized(ConnId, usize),
    Disconnected(ConnId),
    Wake,
}

/// What the state machine tells a verifier about its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctl {
    /// The connection authenticated as an address registered with this key.
    Authed(ConnId, [u8; 32]),
    /// The connection authenticated as another relay's link (federation): the envelopes it
    /// pushes are checked under whatever sender key they name.
    Link(ConnId),
    /// The connection is gone (its disconnection went through the verifier already).
    Forget(ConnId),
    /// The relay closed the connection: frames still coming from it are dropped unparsed
    /// until its disconnection.
    Closed(ConnId),
}

struct Shard {
    tx: flume::Sender<VerifyIn>,
    /// Never blocks the state machine; the verifier applies it before its next frames
    /// (late is harmless: the state machine checks what a verifier did not).
    ctl: Mutex<Vec<Ctl>>,
}

struct Shared {
    next: AtomicU64,
    stop: AtomicBool,
    graceful: AtomicBool,
    /// The committer stopped on a store failure.
    failed: AtomicBool,
    commits: AtomicU64,
    /// The last batch ([`Commit::seq`]) the committer committed and whose frames it
    /// handed to the connections.
    executed: AtomicU64,
    /// The state machine has deliveries parked until the committer executes a batch: the
    /// committer wakes it after each.
    wake_on_execute: AtomicBool,
    slow: AtomicU64,
    /// The discovery document served at `/.well-known/a2acp` (set once the listener's
    /// URL is known).
    discovery: OnceLock<Arc<str>>,
}

fn shard_of(shards: &[Shard], conn: ConnId) -> &Shard {
    let n = shards.len().max(1) as u64;
    &shards[(conn.0 % n) as usize]
}

fn wake_shards(shards: &[Shard]) {
    for s in shards {
        let _ = s.tx.try_send(VerifyIn::Wake);
    }
}

/// A cheap, cloneable handle for connection tasks.
#[derive(Clone)]
pub struct RelayHandle {
    tx: flume::Sender<Msg>,
    shards: Arc<[Shard]>,
    shared: Arc<Shared>,
    conn_queue: usize,
}

impl std::fmt::Debug for RelayHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayHandle").finish_non_exhaustive()
    }
}

impl RelayHandle {
    /// A new connection from `source` (the peer's IP address: registrations are limited
    /// per source, see [`source_of_ip`]): its id and the channel of what to send on it
    /// (the challenge comes first).
    pub async fn connect(
        &self,
        source: IpAddr,
    ) -> Result<(ConnId, flume::Receiver<ConnOut>), Stopped> {
        let conn = ConnId(self.shared.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = flume::bounded(self.conn_queue);
        self.tx
            .send_async(Msg::Connected(conn, tx, source_of_ip(source)))
            .await
            .map_err(|_| Stopped)?;
        Ok((conn, rx))
    }

    /// A frame arrived on `conn` that the transport could not read because it exceeds its
    /// `limit` in bytes: the relay answers `error too_large` and closes the connection
    /// with close reason `too_large` (the connection task keeps writing until then).
    pub async fn oversized(&self, conn: ConnId, limit: usize) -> Result<(), Stopped> {
        shard_of(&self.shards, conn)
            .tx
            .send_async(VerifyIn::Oversized(conn, limit))
            .await
            .map_err(|_| Stopped)
    }

    /// A frame arrived on `conn` (waits while the relay is saturated). The bytes are
    /// shared with the transport's buffer, never copied.
    pub async fn bytes(&self, conn: ConnId, bytes: impl Into<Bytes>) -> Result<(), Stopped> {
        shard_of(&self.shards, conn)
            .tx
            .send_async(VerifyIn::Bytes(conn, bytes.into()))
            .await
            .map_err(|_| Stopped)
    }

    /// `conn` closed.
    pub async fn disconnected(&self, conn: ConnId) {
        // Through the connection's verifier, so it follows the connection's last frames.
        let _ = shard_of(&self.shards, conn)
            .tx
            .send_async(VerifyIn::Disconnected(conn))
            .await;
    }

    /// Federation: the answer to a discovery the service asked for.
    pub async fn discovered(&self, domain: String, result: Result<RemoteRelay, DiscoveryError>) {
        let _ = self
            .tx
            .send_async(Msg::Input(Box::new(RelayInput::Discovered {
                domain,
                result,
            })))
            .await;
    }

    /// Federation: the link to `domain`'s relay (at `peer`) that the service asked for is
    /// open: its id and the channel of what to send on it.
    pub async fn dialed(
        &self,
        domain: String,
        peer: IpAddr,
    ) -> Result<(ConnId, flume::Receiver<ConnOut>), Stopped> {
        let conn = ConnId(self.shared.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = flume::bounded(self.conn_queue);
        // Its verifier first, so it passes the link's frames on unparsed.
        shard_of(&self.shards, conn)
            .tx
            .send_async(VerifyIn::Dialed(conn))
            .await
            .map_err(|_| Stopped)?;
        self.tx
            .send_async(Msg::Dialed(conn, tx, domain, source_of_ip(peer)))
            .await
            .map_err(|_| Stopped)?;
        Ok((conn, rx))
    }

    /// Federation: the link to `domain`'s relay could not be opened.
    pub async fn dial_failed(&self, domain: String, reason: String) {
        let _ = self
            .tx
            .send_async(Msg::Input(Box::new(RelayInput::DialFailed {
                domain,
                reason,
            })))
            .await;
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
        self.shared.graceful.store(graceful, Ordering::SeqCst);
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.tx.try_send(Msg::Wake);
        wake_shards(&self.shards);
    }

    /// The discovery document this relay serves, if it federates.
    pub fn discovery(&self) -> Option<Arc<str>> {
        self.shared.discovery.get().cloned()
    }

    /// Whether a stop was requested.
    pub fn is_stopping(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }
}

/// The relay's [`Source`] of a connection from `ip`: the IPv4 address itself (also when
/// written as an IPv4-mapped IPv6 address), or the /64 prefix of an IPv6 address (one
/// subscriber usually holds a whole /64).
pub fn source_of_ip(ip: IpAddr) -> Source {
    match ip {
        IpAddr::V4(v4) => Source(u128::from(v4.to_ipv6_mapped())),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => Source(u128::from(v4.to_ipv6_mapped())),
            None => Source(u128::from(v6) & !u128::from(u64::MAX)),
        },
    }
}

/// The running service.
#[derive(Debug)]
pub struct RelayService {
    handle: RelayHandle,
    thread: Option<JoinHandle<Result<(), ServiceError>>>,
    domain: String,
    restored: (usize, usize),
    verifiers: usize,
    federation: Option<crate::federation::Federation>,
    /// What federation must do, until a binding takes it ([`RelayService::federation_tasks`]).
    tasks: Mutex<Option<flume::Receiver<Task>>>,
    /// The ACP gateway, if it serves one.
    acp_gateway: Option<crate::acp_gateway::AcpGateway>,
}

impl RelayService {
    /// Opens the store, restores the relay and starts its threads.
    pub fn start(cfg: ServiceConfig) -> Result<RelayService, ServiceError> {
        // A node of a cluster keeps nothing of its own: the cluster holds the registry, the
        // presence and the queue.
        let cluster = match &cfg.cluster {
            Some(c) => Some(Arc::new(crate::cluster::Cluster::connect(c.clone())?)),
            None => None,
        };
        let acp_gateway = match (&cfg.acp_gateway, &cluster) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(ServiceError::Settings(
                    "--acp-listen needs --cluster: the ACP gateway stores messages in the inboxes agent.<id>.inbox on NATS JetStream (seed 004 §5.1)".into(),
                ))
            }
            (Some(g), Some(c)) => Some(
                crate::acp_gateway::AcpGateway::start(g.clone(), c.clone(), cfg.relay.domain.clone())
                    .map_err(|e| ServiceError::Settings(e.to_string()))?,
            ),
        };
        let store = match &cfg.data {
            Some(_) if cluster.is_some() => Store::in_memory()?,
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
        let mut relay_cfg = cfg.relay.clone();
        if let Some(f) = &cfg.federation {
            // The key is the one on disk, whatever settings came with the configuration.
            relay_cfg
                .federation
                .get_or_insert_with(|| FederationConfig::new(f.keys.key.clone()))
                .key = f.keys.key.clone();
        }
        if let Some(c) = &cfg.cluster {
            relay_cfg.cluster = Some(a2acp_core::relay::ClusterMode {
                node: c.node.clone(),
            });
            // The cluster's stream holds the per-thread cap, the same on every node.
            relay_cfg.queue_per_thread = c.queue_per_thread;
        }
        let relay = Relay::restore(relay_cfg, crate::clock::os_seed()?, records)?;
        let st = relay.stats();
        let restored = (st.registered, st.queued);
        let domain = relay.config().domain.clone();
        let max_frame = relay.config().max_frame_bytes;

        let nverif = match cfg.verifiers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
        .clamp(1, 64);
        let input_queue = cfg.input_queue.max(1);
        // The state machine's channel carries chunks of up to VERIFY_CHUNK frames.
        let (tx, rx) = flume::bounded((input_queue / VERIFY_CHUNK).max(16));
        let mut verify_rx = Vec::with_capacity(nverif);
        let shards: Arc<[Shard]> = (0..nverif)
            .map(|_| {
                let (tx, rx) = flume::bounded((input_queue / nverif).max(VERIFY_CHUNK));
                verify_rx.push(rx);
                Shard {
                    tx,
                    ctl: Mutex::new(Vec::new()),
                }
            })
            .collect();
        let shared = Arc::new(Shared {
            next: AtomicU64::new(1),
            stop: AtomicBool::new(false),
            graceful: AtomicBool::new(true),
            failed: AtomicBool::new(false),
            commits: AtomicU64::new(0),
            executed: AtomicU64::new(0),
            wake_on_execute: AtomicBool::new(false),
            slow: AtomicU64::new(0),
            discovery: OnceLock::new(),
        });
        let handle = RelayHandle {
            tx: tx.clone(),
            shards: shards.clone(),
            shared: shared.clone(),
            conn_queue: cfg.conn_queue.max(16),
        };
        let spawn_err = |e: std::io::Error| ServiceError::Thread(e.to_string());

        let mut verifiers = Vec::with_capacity(nverif);
        for (i, rx) in verify_rx.into_iter().enumerate() {
            let v = Verifier {
                rx,
                core: tx.clone(),
                shards: shards.clone(),
                index: i,
                shared: shared.clone(),
                state: VerifyState::new(max_frame, relay.config()),
            };
            verifiers.push(
                std::thread::Builder::new()
                    .name(format!("a2acp-verify-{i}"))
                    .spawn(move || v.run())
                    .map_err(spawn_err)?,
            );
        }

        let (tasks_tx, tasks_rx) = flume::unbounded();
        let (commit_tx, commit_rx) = flume::bounded(COMMIT_QUEUE);
        let (dropped_tx, dropped_rx) = flume::unbounded();
        let log = Arc::new(ClientLog::new());
        let wake = relay.config().wake_up;
        let wake_ups = wake.enabled.then(|| {
            crate::wake_up::WakeUps::start(crate::wake_up::WakeUpOptions {
                allow_private: wake.allow_private,
                ..crate::wake_up::WakeUpOptions::default()
            })
        });
        let committer = Committer {
            store,
            rx: commit_rx,
            conns: HashMap::new(),
            dropped: dropped_tx,
            core: tx.downgrade(),
            shared: shared.clone(),
            log: log.clone(),
            wake_ups,
        };
        let committer = std::thread::Builder::new()
            .name("a2acp-commit".into())
            .spawn(move || committer.run())
            .map_err(spawn_err)?;

        let driver = match cluster {
            Some(c) => {
                let window = usize::try_from(relay.config().max_in_flight).unwrap_or(256);
                let federates = relay.config().federation.is_some();
                Some(cluster::ClusterDriver::start(
                    c,
                    tx.clone(),
                    window,
                    federates,
                )?)
            }
            None => None,
        };
        let covered = relay.next_delivery_id();
        let core = Core {
            relay,
            cluster: driver,
            rx,
            shards,
            shared,
            max_batch: cfg.max_batch.max(1),
            batches: 0,
            pending: Commit::default(),
            committer: commit_tx,
            dropped: dropped_rx,
            log,
            conn_logs: HashMap::new(),
            tasks: tasks_tx,
            early: EarlyConns::new(covered),
            slow: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name("a2acp-relay".into())
            .spawn(move || core.run(committer, verifiers))
            .map_err(spawn_err)?;
        Ok(RelayService {
            handle,
            thread: Some(thread),
            domain,
            restored,
            verifiers: nverif,
            federation: cfg.federation,
            tasks: Mutex::new(Some(tasks_rx)),
            acp_gateway,
        })
    }

    /// The address of the ACP gateway, if the relay serves one.
    pub fn acp_gateway_addr(&self) -> Option<std::net::SocketAddr> {
        self.acp_gateway.as_ref().map(|g| g.addr())
    }

    /// What the state machine asks federation to do (discover, dial), for the binding to
    /// run ([`crate::federation::driver::run`]): `Some` once, when the relay federates.
    pub fn federation_tasks(&self) -> Option<flume::Receiver<Task>> {
        self.federation.as_ref()?;
        self.tasks.lock().ok()?.take()
    }

    /// Signs and publishes the discovery document of this relay listening at `url` (its
    /// `--public-url` instead, when given), if it federates; the first call only counts.
    pub fn publish_discovery(
        &self,
        url: &str,
    ) -> Result<(), a2acp_core::discovery::DiscoveryError> {
        if let Some(f) = &self.federation {
            let doc = f.document(&self.domain, url)?;
            let _ = self.handle.shared.discovery.set(doc.into());
        }
        Ok(())
    }

    /// How the relay federates, if it does.
    pub fn federation(&self) -> Option<&crate::federation::Federation> {
        self.federation.as_ref()
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

    /// Verifier threads running.
    pub fn verifiers(&self) -> usize {
        self.verifiers
    }

    /// Stops the service and waits for its threads (blocking: call from a plain thread
    /// or a blocking section).
    pub fn stop_and_join(mut self, graceful: bool) -> Result<(), ServiceError> {
        self.handle.stop(graceful);
        self.join_inner()
    }

    /// Waits for the threads to end (after a stop or a fatal error).
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

// ---- the state machine ----

struct Core {
    relay: Relay,
    /// Cluster mode: executes the state machine's requests to the cluster.
    cluster: Option<cluster::ClusterDriver>,
    rx: flume::Receiver<Msg>,
    shards: Arc<[Shard]>,
    shared: Arc<Shared>,
    max_batch: usize,
    batches: u64,
    pending: Commit,
    committer: flume::Sender<ToCommitter>,
    /// Connections the committer dropped as slow consumers.
    dropped: flume::Receiver<ConnId>,
    log: Arc<ClientLog>,
    /// Refusals of open connections, for their logging.
    conn_logs: HashMap<ConnId, ConnLog>,
    /// Federation's tasks (discover, dial) for the binding.
    tasks: flume::Sender<Task>,
    /// Every open connection's outgoing channel, for the deliveries sent without waiting
    /// for the commit.
    early: EarlyConns,
    /// Connections found slow by an early delivery, to drop after the outputs at hand.
    slow: Vec<ConnId>,
}

impl Core {
    fn run(
        mut self,
        committer: JoinHandle<Result<(), ServiceError>>,
        verifiers: Vec<JoinHandle<()>>,
    ) -> Result<(), ServiceError> {
        let mut batch: Vec<Msg> = Vec::new();
        let mut snapshots: Vec<flume::Sender<RelaySnapshot>> = Vec::new();
        loop {
            if self.shared.stop.load(Ordering::SeqCst) || self.shared.failed.load(Ordering::SeqCst)
            {
                break;
            }
            let now_ms = crate::clock::now().as_millis();
            let wait = self
                .relay
                .poll_timeout()
                .map(|t| t.as_millis().saturating_sub(now_ms))
                .unwrap_or(1000)
                .min(1000);
            // Parked deliveries: the committer wakes this thread when it executes a batch;
            // a wake that raced with parking costs at most a millisecond.
            let wait = if self.early.has_parked() {
                wait.min(1)
            } else {
                wait
            };
            let mut n = 0usize;
            match self
                .rx
                .recv_deadline(Instant::now() + Duration::from_millis(wait))
            {
                Ok(m) => {
                    n += weight(&m);
                    batch.push(m);
                }
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => break,
            }
            while n < self.max_batch {
                match self.rx.try_recv() {
                    Ok(m) => {
                        n += weight(&m);
                        batch.push(m);
                    }
                    Err(_) => break,
                }
            }
            let now = crate::clock::now();
            while let Ok(conn) = self.dropped.try_recv() {
                self.drop_slow(now, conn);
            }
            // Deliveries parked behind batches the committer has executed since.
            if self.early.has_parked() {
                for conn in self
                    .early
                    .release(self.shared.executed.load(Ordering::Acquire))
                {
                    self.slow_consumer(conn);
                }
            }
            for m in batch.drain(..) {
                match m {
                    Msg::Connected(conn, tx, source) => {
                        self.early.opened(conn, &tx, self.batches + 1);
                        self.pending.connected.push((conn, tx));
                        self.relay
                            .handle(now, RelayInput::Connected { conn, source });
                        self.collect();
                    }
                    Msg::Dialed(conn, tx, domain, source) => {
                        self.early.opened(conn, &tx, self.batches + 1);
                        self.pending.connected.push((conn, tx));
                        self.relay.handle(
                            now,
                            RelayInput::Dialed {
                                domain,
                                conn,
                                source,
                            },
                        );
                        self.collect();
                    }
                    Msg::Input(input) => {
                        self.relay.handle(now, *input);
                        self.collect();
                    }
                    Msg::Items(items) => {
                        for it in items {
                            match it {
                                Item::Frame(conn, parsed, verified) => self.relay.handle(
                                    now,
                                    RelayInput::Frame {
                                        conn,
                                        parsed,
                                        verified,
                                    },
                                ),
                                Item::Raw(conn, bytes) => self.relay.handle(
                                    now,
                                    RelayInput::Bytes {
                                        conn,
                                        bytes: &bytes,
                                    },
                                ),
                                Item::Oversized(conn, limit) => self
                                    .relay
                                    .handle(now, RelayInput::Oversized { conn, limit }),
                                Item::Disconnected(conn) => {
                                    self.early.closed(conn);
                                    self.pending.disconnected.push(conn);
                                    self.relay.handle(now, RelayInput::Disconnected { conn });
                                    // Its verifier may have learnt of its authentication
                                    // after it saw the disconnection.
                                    self.ctl(Ctl::Forget(conn));
                                    self.conn_ended(conn, None);
                                }
                            }
                            self.collect();
                        }
                    }
                    Msg::Snapshot(tx) => snapshots.push(tx),
                    Msg::Wake => {}
                }
            }
            if self.relay.poll_timeout().is_some_and(|t| t <= now) {
                self.relay.handle(now, RelayInput::Timeout);
                self.collect();
            }
            self.log.summarise(Instant::now());
            self.batches += 1;
            for tx in snapshots.drain(..) {
                let snap = RelaySnapshot {
                    stats: self.relay.stats(),
                    slow_consumers: 0,
                    commits: 0,
                    batches: self.batches,
                    log_lines_suppressed: 0,
                    cluster: self.cluster.as_ref().map(|d| d.health()),
                };
                self.pending.replies.push((tx, snap));
            }
            while let Some(conn) = self.slow.pop() {
                self.drop_slow(now, conn);
            }
            // The committer wakes this thread when it has executed a batch, for them.
            self.shared
                .wake_on_execute
                .store(self.early.has_parked(), Ordering::Release);
            if !self.pending.is_empty() {
                let mut c = std::mem::take(&mut self.pending);
                c.seq = self.batches;
                if self.committer.send(ToCommitter::Batch(c)).is_err() {
                    break;
                }
            }
        }
        self.finish(committer, verifiers)
    }

    /// Stops the committer (after it committed and executed every batch handed to it)
    /// and the verifiers.
    fn finish(
        mut self,
        committer: JoinHandle<Result<(), ServiceError>>,
        verifiers: Vec<JoinHandle<()>>,
    ) -> Result<(), ServiceError> {
        // The refusals of connections still open, not logged one by one.
        let open: Vec<ConnId> = self.conn_logs.keys().copied().collect();
        for conn in open {
            self.conn_ended(conn, None);
        }
        let graceful = self.shared.graceful.load(Ordering::SeqCst);
        // The committer's senders alone decide when the connections' channels close.
        self.early.clear();
        let _ = self.committer.send(ToCommitter::Shutdown { graceful });
        drop(self.committer);
        let r = committer
            .join()
            .map_err(|_| ServiceError::Thread("the commit thread panicked".into()))
            .and_then(|r| r);
        self.shared.stop.store(true, Ordering::SeqCst);
        drop(self.rx);
        wake_shards(&self.shards);
        for v in verifiers {
            let _ = v.join();
        }
        let st = self.relay.stats();
        info!(
            routed = st.routed_total,
            queued = st.queued,
            graceful,
            "relay service stopped"
        );
        r
    }

    /// A connection does not read its frames: it is dropped as a slow consumer (its
    /// unacknowledged packets stay queued).
    fn drop_slow(&mut self, now: a2acp_core::Timestamp, conn: ConnId) {
        self.early.closed(conn);
        self.relay.handle(now, RelayInput::Disconnected { conn });
        self.ctl(Ctl::Closed(conn));
        self.conn_ended(conn, None);
        self.collect();
    }

    /// An early delivery found `conn`'s channel full: counted now, dropped after the
    /// outputs at hand (the committer drops its sender too, which ends the connection).
    fn slow_consumer(&mut self, conn: ConnId) {
        commit::slow_consumer(&self.shared, &self.log, conn);
        self.early.closed(conn);
        self.pending.dropped.push(conn);
        self.slow.push(conn);
    }

    fn ctl(&self, c: Ctl) {
        let conn = match c {
            Ctl::Authed(conn, _) | Ctl::Link(conn) | Ctl::Forget(conn) | Ctl::Closed(conn) => conn,
        };
        if let Ok(mut g) = shard_of(&self.shards, conn).ctl.lock() {
            g.push(c);
        }
    }

    /// Moves the relay's outputs into the pending batch: persists to `ops`, sends and
    /// closes to `actions`; tells the verifiers who authenticated and who is gone.
    fn collect(&mut self) {
        while let Some(o) = self.relay.poll_output() {
            let reserved = o.reserved_delivery_ids();
            let delivery = o.delivery_id();
            match o {
                RelayOutput::Persist(op) => {
                    if let Some(upto) = reserved {
                        self.early.reserved(self.batches + 1, upto);
                    }
                    self.pending.ops.push(op)
                }
                RelayOutput::Event(e) => {
                    if let RelayEvent::Authenticated { conn, address } = &e {
                        if let Some(key) = self.relay.registered_key(address) {
                            self.ctl(Ctl::Authed(*conn, key));
                        }
                        // Its `auth_ok` waits for the commit: no delivery overtakes it.
                        self.early.authenticated(*conn, self.batches + 1);
                    }
                    if let RelayEvent::Federation(FederationEvent::LinkUp {
                        conn,
                        side: LinkSide::Accepted,
                        ..
                    }) = &e
                    {
                        self.ctl(Ctl::Link(*conn));
                    }
                    self.log_event(e);
                }
                RelayOutput::Close { conn, code } => {
                    self.early.closed(conn);
                    self.ctl(Ctl::Closed(conn));
                    self.conn_ended(conn, Some(code));
                    self.pending.actions.push(o);
                }
                RelayOutput::Send { conn, bytes } if delivery.is_some() => {
                    let executed = self.shared.executed.load(Ordering::Acquire);
                    let id = delivery.unwrap_or(u64::MAX);
                    match self.early.deliver(conn, id, bytes, executed) {
                        Outcome::Done => {}
                        Outcome::Slow => self.slow_consumer(conn),
                        Outcome::Unknown(bytes) => {
                            self.pending.actions.push(RelayOutput::Send { conn, bytes })
                        }
                    }
                }
                RelayOutput::Send { .. } => self.pending.actions.push(o),
                // After the commit: the packet it announces is durable by then.
                RelayOutput::WakeUp { .. } => self.pending.actions.push(o),
                // Not revealing anything, they need not wait for the commit.
                RelayOutput::Discover { domain } => {
                    let _ = self.tasks.send(Task::Discover(domain));
                }
                RelayOutput::Dial { domain, endpoint } => {
                    let _ = self.tasks.send(Task::Dial { domain, endpoint });
                }
                // Questions to the cluster: what waits on them waits in the state machine.
                RelayOutput::Cluster(op) => {
                    if let Some(d) = self.cluster.as_mut() {
                        d.execute(op);
                    }
                }
            }
        }
    }
}

fn weight(m: &Msg) -> usize {
    match m {
        Msg::Items(v) => v.len().max(1),
        _ => 1,
    }
}

#[cfg(test)]
mod tests;
