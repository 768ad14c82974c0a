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
//! 3. **The committer**: one thread owns the SQLite [`Store`]. It takes every batch
//!    waiting, **commits all their persist records in one transaction, and only then**
//!    hands their frames to the connections' outgoing channels, batch after batch in
//!    order — so an `accepted` never leaves before its packet is durable, and a
//!    registration is stored before its `auth_ok` (group commit: one sync for however
//!    many batches and packets were waiting). SQLite's blocking calls never stall an
//!    async executor nor the routing.
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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use a2acp_core::crypto::{PublicKey, ENVELOPE_VERSION};
use a2acp_core::link::{ClientFrame, ErrorCode};
use a2acp_core::persist::PersistOp;
use a2acp_core::rate_limit::TokenBucket;
use a2acp_core::relay::{
    self, ConnId, FrameError, ParsedFrame, Relay, RelayConfig, RelayEvent, RelayInput, RelayOutput,
    RelayStats, Source, Verified,
};
use a2acp_core::{Address, Timestamp};
use ed25519_dalek::{Signature, VerifyingKey};
use tracing::{debug, error, info, warn};

use crate::log_limit::LogLimiter;
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
    /// Most inputs the state machine handles in one step (one batch for the committer).
    pub max_batch: usize,
    /// Outgoing frames buffered per connection before it is dropped as a slow consumer.
    pub conn_queue: usize,
    /// Inputs buffered before connection tasks wait (backpressure).
    pub input_queue: usize,
    /// Threads parsing frames and verifying envelope signatures; 0: one per core.
    pub verifiers: usize,
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
    /// Log lines about clients (refusals, closed connections) not written because of the
    /// log's rate limits (module documentation); they are counted in summaries instead.
    pub log_lines_suppressed: u64,
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
    /// Frames and disconnections of one verifier's connections, in their order.
    Items(Vec<Item>),
    Snapshot(flume::Sender<RelaySnapshot>),
    Wake,
}

// A frame is short-lived and travels in a `Vec`; boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum Item {
    Frame(ConnId, Result<ParsedFrame, FrameError>, Verified),
    /// A frame beyond the transport's limit (its size limit).
    Oversized(ConnId, usize),
    Disconnected(ConnId),
}

/// An input of a verifier.
enum VerifyIn {
    Bytes(ConnId, Vec<u8>),
    Oversized(ConnId, usize),
    Disconnected(ConnId),
    Wake,
}

/// What the state machine tells a verifier about its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctl {
    /// The connection authenticated as an address registered with this key.
    Authed(ConnId, [u8; 32]),
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
    slow: AtomicU64,
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

    /// A frame arrived on `conn` (waits while the relay is saturated).
    pub async fn bytes(&self, conn: ConnId, bytes: Vec<u8>) -> Result<(), Stopped> {
        shard_of(&self.shards, conn)
            .tx
            .send_async(VerifyIn::Bytes(conn, bytes))
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
}

impl RelayService {
    /// Opens the store, restores the relay and starts its threads.
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
            slow: AtomicU64::new(0),
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

        let (commit_tx, commit_rx) = flume::bounded(COMMIT_QUEUE);
        let (dropped_tx, dropped_rx) = flume::unbounded();
        let log = Arc::new(ClientLog::new());
        let committer = Committer {
            store,
            rx: commit_rx,
            conns: HashMap::new(),
            dropped: dropped_tx,
            core: tx.downgrade(),
            shared: shared.clone(),
            log: log.clone(),
        };
        let committer = std::thread::Builder::new()
            .name("a2acp-commit".into())
            .spawn(move || committer.run())
            .map_err(spawn_err)?;

        let core = Core {
            relay,
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

// ---- verifiers ----

struct Verifier {
    rx: flume::Receiver<VerifyIn>,
    core: flume::Sender<Msg>,
    shards: Arc<[Shard]>,
    index: usize,
    shared: Arc<Shared>,
    state: VerifyState,
}

impl Verifier {
    fn run(mut self) {
        let mut input = Vec::with_capacity(VERIFY_CHUNK);
        loop {
            if self.shared.stop.load(Ordering::SeqCst) {
                return;
            }
            match self.rx.recv_timeout(IDLE_WAKE) {
                Ok(m) => input.push(m),
                Err(flume::RecvTimeoutError::Timeout) => {
                    self.apply_ctl();
                    continue;
                }
                Err(flume::RecvTimeoutError::Disconnected) => return,
            }
            while input.len() < VERIFY_CHUNK {
                match self.rx.try_recv() {
                    Ok(m) => input.push(m),
                    Err(_) => break,
                }
            }
            self.apply_ctl();
            let items = self.state.process(input.drain(..));
            if !items.is_empty() && self.core.send(Msg::Items(items)).is_err() {
                return;
            }
        }
    }

    fn apply_ctl(&mut self) {
        let ctl = match self.shards[self.index].ctl.lock() {
            Ok(mut g) if !g.is_empty() => std::mem::take(&mut *g),
            _ => return,
        };
        for c in ctl {
            self.state.apply(c);
        }
    }
}

/// A registered key, decompressed once for both ways of verifying.
struct CachedKey {
    key: PublicKey,
    vk: VerifyingKey,
}

/// An authenticated connection as a verifier sees it.
struct AuthedConn {
    /// The key its address is registered with.
    key: [u8; 32],
    /// Signatures it may still have checked here: the relay's rate limit, so that a
    /// sender beyond its rate (whose frames the state machine refuses before checking
    /// anything) does not buy signature checks either. Past it, frames go on unverified.
    budget: TokenBucket,
}

/// A verifier's knowledge: which key each of its authenticated connections signs with,
/// and the decompressed keys (`PublicKey::from_bytes` costs about a verification).
struct VerifyState {
    /// The instant the budgets' timestamps count from.
    epoch: Instant,
    max_frame: usize,
    rate: u32,
    burst: u32,
    conns: HashMap<ConnId, AuthedConn>,
    keys: HashMap<[u8; 32], Option<CachedKey>>,
    /// Connections the relay closed and whose disconnection has not come through yet.
    closed: HashSet<ConnId>,
}

impl VerifyState {
    fn new(max_frame: usize, cfg: &RelayConfig) -> Self {
        VerifyState {
            epoch: Instant::now(),
            max_frame,
            rate: cfg.rate_per_sec,
            burst: cfg.rate_burst.max(1),
            conns: HashMap::new(),
            keys: HashMap::new(),
            closed: HashSet::new(),
        }
    }

    fn apply(&mut self, c: Ctl) {
        match c {
            Ctl::Authed(conn, key) => {
                let budget = TokenBucket::full(self.stamp(Instant::now()), self.burst);
                self.conns.insert(conn, AuthedConn { key, budget });
            }
            Ctl::Forget(conn) => {
                self.conns.remove(&conn);
            }
            Ctl::Closed(conn) => {
                self.conns.remove(&conn);
                if self.closed.len() >= CLOSED_MAX {
                    self.closed.clear();
                }
                self.closed.insert(conn);
            }
        }
    }

    /// `now` on the budgets' clock (milliseconds since the verifier started).
    fn stamp(&self, now: Instant) -> Timestamp {
        let ms = now.saturating_duration_since(self.epoch).as_millis();
        Timestamp(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// Whether `conn` is authenticated with `key` and within its budget (taking one).
    fn may_verify(&mut self, conn: ConnId, key: &[u8; 32], now: Instant) -> bool {
        let now = self.stamp(now);
        match self.conns.get_mut(&conn) {
            Some(c) if c.key == *key => c.budget.try_take(now, self.rate, self.burst),
            _ => false,
        }
    }

    /// Whether `key` is cached (decompressing it on first use).
    fn ensure_key(&mut self, key: &[u8; 32]) -> bool {
        if let Some(k) = self.keys.get(key) {
            return k.is_some();
        }
        if self.keys.len() >= KEY_CACHE_MAX {
            self.keys.clear();
        }
        let k = PublicKey::from_bytes(key).ok().and_then(|pk| {
            VerifyingKey::from_bytes(key)
                .ok()
                .map(|vk| CachedKey { key: pk, vk })
        });
        let ok = k.is_some();
        self.keys.insert(*key, k);
        ok
    }

    /// Parses the frames and verifies the `send`s it can, keeping the order.
    fn process(&mut self, input: impl Iterator<Item = VerifyIn>) -> Vec<Item> {
        let mut items = Vec::with_capacity(input.size_hint().0);
        let mut todo = Vec::new();
        let now = Instant::now();
        for m in input {
            match m {
                VerifyIn::Bytes(conn, _) | VerifyIn::Oversized(conn, _)
                    if self.closed.contains(&conn) => {}
                VerifyIn::Oversized(conn, limit) => items.push(Item::Oversized(conn, limit)),
                VerifyIn::Bytes(conn, b) => {
                    let parsed = relay::parse_frame(&b, self.max_frame);
                    drop(b);
                    if let Some(ClientFrame::Send { env, .. }) =
                        parsed.as_ref().ok().map(|p| p.frame())
                    {
                        if env.v == ENVELOPE_VERSION
                            && self.may_verify(conn, &env.from_key, now)
                            && self.ensure_key(&env.from_key)
                        {
                            todo.push(items.len());
                        }
                    }
                    items.push(Item::Frame(conn, parsed, Verified::No));
                }
                VerifyIn::Disconnected(conn) => {
                    self.conns.remove(&conn);
                    self.closed.remove(&conn);
                    items.push(Item::Disconnected(conn));
                }
                VerifyIn::Wake => {}
            }
        }
        self.verify(&mut items, &todo);
        items
    }

    /// Marks the `send`s at `todo` whose signature verifies.
    fn verify(&self, items: &mut [Item], todo: &[usize]) {
        if todo.len() < BATCH_MIN {
            for &i in todo {
                self.verify_one(&mut items[i]);
            }
            return;
        }
        let (batch, single): (Vec<usize>, Vec<usize>) = todo
            .iter()
            .partition(|&&i| send_env(&items[i]).is_some_and(|e| batchable_r(&e.sig)));
        for &i in &single {
            self.verify_one(&mut items[i]);
        }
        for chunk in batch.chunks(VERIFY_CHUNK) {
            if chunk.len() < BATCH_MIN || !self.verify_batch(items, chunk) {
                // Find the culprits one by one (strictly).
                for &i in chunk {
                    self.verify_one(&mut items[i]);
                }
                continue;
            }
            for &i in chunk {
                if let Item::Frame(_, _, v) = &mut items[i] {
                    *v = Verified::EnvelopeSignature;
                }
            }
        }
    }

    fn verify_batch(&self, items: &[Item], chunk: &[usize]) -> bool {
        let mut msgs = Vec::with_capacity(chunk.len());
        let mut sigs = Vec::with_capacity(chunk.len());
        let mut vks = Vec::with_capacity(chunk.len());
        for &i in chunk {
            let Some(env) = send_env(&items[i]) else {
                return false;
            };
            let Some(Some(k)) = self.keys.get(&env.from_key) else {
                return false;
            };
            msgs.push(env.signed_bytes());
            sigs.push(Signature::from_bytes(&env.sig));
            vks.push(k.vk);
        }
        let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        ed25519_dalek::verify_batch(&refs, &sigs, &vks).is_ok()
    }

    fn verify_one(&self, item: &mut Item) {
        let Item::Frame(_, Ok(parsed), v) = item else {
            return;
        };
        let frame = parsed.frame();
        let ClientFrame::Send { env, .. } = frame else {
            return;
        };
        if let Some(Some(k)) = self.keys.get(&env.from_key) {
            if relay::verify_send(frame, &k.key) {
                *v = Verified::EnvelopeSignature;
            }
        }
    }
}

fn send_env(item: &Item) -> Option<&a2acp_core::crypto::Envelope> {
    match item {
        Item::Frame(_, Ok(p), _) => match p.frame() {
            ClientFrame::Send { env, .. } => Some(env),
            _ => None,
        },
        _ => None,
    }
}

/// The y coordinates (low 255 bits, little-endian) of the eight points of small order:
/// 0 (order 4), 1 (the identity), p − 1 (order 2) and ±y₈ (order 8).
const SMALL_ORDER_Y: [[u8; 32]; 5] = [
    [0; 32],
    [
        1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0,
    ],
    [
        0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0x7f,
    ],
    [
        0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98,
        0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53,
        0xfc, 0x05,
    ],
    [
        0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67,
        0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac,
        0x03, 0x7a,
    ],
];

/// Whether a signature may be batch-verified. `verify_strict` (what the relay applies)
/// refuses a non-canonical encoding of R and an R of small order; the batch equation
/// would not, so such signatures are verified one by one. With the keys already checked
/// to be torsion-free, a batch then accepts what `verify_strict` accepts, except an R
/// with a small-order component added — a malleation only the key's holder can make
/// (R is hashed into the signature), which the recipient's own strict check refuses.
fn batchable_r(sig: &[u8; 64]) -> bool {
    let mut y = [0u8; 32];
    y.copy_from_slice(&sig[..32]);
    y[31] &= 0x7f;
    // y ≥ p = 2²⁵⁵ − 19 is a non-canonical encoding.
    let non_canonical = y[31] == 0x7f && y[1..31].iter().all(|&b| b == 0xff) && y[0] >= 0xed;
    !non_canonical && !SMALL_ORDER_Y.contains(&y)
}

// ---- the state machine ----

/// One batch's work for the committer.
#[derive(Default)]
struct Commit {
    /// Connections opened in this batch (before its frames for them).
    connected: Vec<(ConnId, flume::Sender<ConnOut>)>,
    ops: Vec<PersistOp>,
    /// Sends and closes, in order.
    actions: Vec<RelayOutput>,
    /// Connections closed by their peer in this batch.
    disconnected: Vec<ConnId>,
    replies: Vec<(flume::Sender<RelaySnapshot>, RelaySnapshot)>,
}

impl Commit {
    fn is_empty(&self) -> bool {
        self.connected.is_empty()
            && self.ops.is_empty()
            && self.actions.is_empty()
            && self.disconnected.is_empty()
            && self.replies.is_empty()
    }
}

enum ToCommitter {
    Batch(Commit),
    Shutdown { graceful: bool },
}

struct Core {
    relay: Relay,
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
                self.relay.handle(now, RelayInput::Disconnected { conn });
                self.ctl(Ctl::Closed(conn));
                self.conn_ended(conn, None);
                self.collect();
            }
            for m in batch.drain(..) {
                match m {
                    Msg::Connected(conn, tx, source) => {
                        self.pending.connected.push((conn, tx));
                        self.relay
                            .handle(now, RelayInput::Connected { conn, source });
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
                                Item::Oversized(conn, limit) => self
                                    .relay
                                    .handle(now, RelayInput::Oversized { conn, limit }),
                                Item::Disconnected(conn) => {
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
                };
                self.pending.replies.push((tx, snap));
            }
            if !self.pending.is_empty() {
                let c = std::mem::take(&mut self.pending);
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

    fn ctl(&self, c: Ctl) {
        let conn = match c {
            Ctl::Authed(conn, _) | Ctl::Forget(conn) | Ctl::Closed(conn) => conn,
        };
        if let Ok(mut g) = shard_of(&self.shards, conn).ctl.lock() {
            g.push(c);
        }
    }

    /// Moves the relay's outputs into the pending batch: persists to `ops`, sends and
    /// closes to `actions`; tells the verifiers who authenticated and who is gone.
    fn collect(&mut self) {
        while let Some(o) = self.relay.poll_output() {
            match o {
                RelayOutput::Persist(op) => self.pending.ops.push(op),
                RelayOutput::Event(e) => {
                    if let RelayEvent::Authenticated { conn, address } = &e {
                        if let Some(key) = self.relay.registered_key(address) {
                            self.ctl(Ctl::Authed(*conn, key));
                        }
                    }
                    self.log_event(e);
                }
                RelayOutput::Close { conn, code } => {
                    self.ctl(Ctl::Closed(conn));
                    self.conn_ended(conn, Some(code));
                    self.pending.actions.push(o);
                }
                RelayOutput::Send { .. } => self.pending.actions.push(o),
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

// ---- the committer ----

struct Committer {
    store: Store,
    rx: flume::Receiver<ToCommitter>,
    conns: HashMap<ConnId, flume::Sender<ConnOut>>,
    dropped: flume::Sender<ConnId>,
    /// To wake the state machine (weak: it must not keep the channel open).
    core: flume::WeakSender<Msg>,
    shared: Arc<Shared>,
    log: Arc<ClientLog>,
}

impl Committer {
    fn run(mut self) -> Result<(), ServiceError> {
        let mut queue: Vec<Commit> = Vec::new();
        let mut ops: Vec<PersistOp> = Vec::new();
        loop {
            let mut shutdown = match self.rx.recv() {
                Ok(ToCommitter::Batch(c)) => {
                    queue.push(c);
                    None
                }
                Ok(ToCommitter::Shutdown { graceful }) => Some(graceful),
                Err(_) => Some(false),
            };
            while shutdown.is_none() {
                match self.rx.try_recv() {
                    Ok(ToCommitter::Batch(c)) => queue.push(c),
                    Ok(ToCommitter::Shutdown { graceful }) => shutdown = Some(graceful),
                    Err(_) => break,
                }
            }
            for c in &mut queue {
                ops.append(&mut c.ops);
            }
            if !ops.is_empty() {
                if let Err(e) = self.store.apply(&ops, &[]) {
                    error!(error = %e, "relay store failed; stopping without revealing the uncommitted batches");
                    self.conns.clear();
                    self.shared.failed.store(true, Ordering::SeqCst);
                    if let Some(core) = self.core.upgrade() {
                        let _ = core.try_send(Msg::Wake);
                    }
                    return Err(e.into());
                }
                self.shared.commits.fetch_add(1, Ordering::Relaxed);
                ops.clear();
            }
            for c in queue.drain(..) {
                self.execute(c);
            }
            if let Some(graceful) = shutdown {
                if graceful {
                    for tx in self.conns.values() {
                        let _ = tx.try_send(ConnOut::Close(None));
                    }
                }
                self.conns.clear();
                return Ok(());
            }
        }
    }

    fn execute(&mut self, c: Commit) {
        for (conn, tx) in c.connected {
            self.conns.insert(conn, tx);
        }
        for a in c.actions {
            match a {
                RelayOutput::Send { conn, bytes } => {
                    let Some(tx) = self.conns.get(&conn) else {
                        continue;
                    };
                    match tx.try_send(ConnOut::Frame(bytes)) {
                        Ok(()) => {}
                        Err(flume::TrySendError::Full(_)) => {
                            if self.log.allow() {
                                warn!(
                                    conn = conn.0,
                                    "connection does not read its frames: dropped as a slow consumer"
                                );
                            }
                            self.shared.slow.fetch_add(1, Ordering::Relaxed);
                            self.conns.remove(&conn);
                            let _ = self.dropped.send(conn);
                            if let Some(core) = self.core.upgrade() {
                                let _ = core.try_send(Msg::Wake);
                            }
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
        for conn in c.disconnected {
            self.conns.remove(&conn);
        }
        for (tx, mut snap) in c.replies {
            snap.commits = self.shared.commits.load(Ordering::Relaxed);
            snap.slow_consumers = self.shared.slow.load(Ordering::Relaxed);
            snap.log_lines_suppressed = self.log.total();
            let _ = tx.try_send(snap);
        }
    }
}

impl Core {
    /// Logs what the relay did; what a client can cause goes through the log limiter.
    fn log_event(&mut self, e: RelayEvent) {
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
            } => {
                let c = self.conn_logs.entry(conn).or_default();
                if address.is_some() {
                    c.address = address;
                }
                if c.logged >= LOGGED_REFUSALS_PER_CONN {
                    *c.unlogged.entry(code).or_insert(0) += 1;
                    self.log.held_back(1);
                    return;
                }
                c.logged += 1;
                if self.log.allow() {
                    warn!(
                        conn = conn.0,
                        address = c.address.as_ref().map(|a| a.as_str()).unwrap_or("-"),
                        code = code.as_str(),
                        message = message.as_str(),
                        "refused"
                    );
                }
            }
            RelayEvent::Replaced { old, new, address } => {
                if self.log.allow() {
                    info!(old = old.0, new = new.0, %address, "a newer connection replaced the old one")
                }
            }
            RelayEvent::Overflow { from, to } => {
                if self.log.allow() {
                    info!(%from, %to, "thread queue full: overflow notice sent")
                }
            }
            RelayEvent::ConnectionDead { conn } => {
                if self.log.allow() {
                    info!(conn = conn.0, "connection silent too long: closed")
                }
            }
            RelayEvent::Routed { from, to, id } => debug!(%from, %to, id, "routed"),
            RelayEvent::Delivered { id, to } => debug!(id, %to, "delivered"),
            RelayEvent::Acked { id } => debug!(id, "acknowledged"),
            RelayEvent::AckIgnored { conn, id } => {
                debug!(conn = conn.0, id, "ack of unknown id ignored")
            }
        }
    }

    /// `conn` ended (`code`: closed by the relay for that reason): one line for a
    /// connection closed for abuse or with refusals not logged one by one.
    fn conn_ended(&mut self, conn: ConnId, code: Option<ErrorCode>) {
        let c = self.conn_logs.remove(&conn).unwrap_or_default();
        let abuse = matches!(code, Some(ErrorCode::TooManyRefusals | ErrorCode::TooLarge));
        if !abuse && c.unlogged.is_empty() {
            return;
        }
        if !self.log.allow() {
            return;
        }
        let unlogged: u64 = c.unlogged.values().sum();
        let by_code = c
            .unlogged
            .iter()
            .map(|(code, n)| format!("{} {n}", code.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        let address = c.address.as_ref().map(|a| a.as_str()).unwrap_or("-");
        match code {
            Some(code) if abuse => warn!(
                conn = conn.0,
                address,
                reason = code.as_str(),
                unlogged,
                by_code = by_code.as_str(),
                "connection closed for abuse"
            ),
            _ => info!(
                conn = conn.0,
                address,
                unlogged,
                by_code = by_code.as_str(),
                "connection ended with refusals not logged one by one"
            ),
        }
    }
}

/// The refusals of one connection, for logging.
#[derive(Debug, Default)]
struct ConnLog {
    /// Its address, once known.
    address: Option<Address>,
    /// Refusals logged one by one.
    logged: u32,
    /// Refusals counted instead, by code.
    unlogged: BTreeMap<ErrorCode, u64>,
}

/// The log lines clients can cause (module documentation): one [`LogLimiter`] for all of
/// them, shared by the state machine's and the committer's threads, and the count of
/// every line held back (by the limiter, or counted per connection instead of logged).
#[derive(Debug)]
struct ClientLog {
    limiter: LogLimiter,
    /// Lines held back since start.
    total: AtomicU64,
}

impl ClientLog {
    fn new() -> Self {
        ClientLog {
            limiter: LogLimiter::per_second(LOG_BURST, LOG_LINES_PER_SEC),
            total: AtomicU64::new(0),
        }
    }

    /// Whether a line may be written now (taking its place); otherwise it is counted.
    fn allow(&self) -> bool {
        if self.limiter.allow().is_some() {
            return true;
        }
        self.held_back(1);
        false
    }

    /// Counts `n` lines not written (summarised elsewhere).
    fn held_back(&self, n: u64) {
        self.total.fetch_add(n, Ordering::Relaxed);
    }

    /// Lines held back since start.
    fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// One line for the lines the limiter held back, at most every [`LOG_SUMMARY_EVERY`].
    fn summarise(&self, now: Instant) {
        if let Some((held, since)) = self.limiter.summary_at(now, LOG_SUMMARY_EVERY) {
            warn!(
                held,
                seconds = since.as_secs(),
                "log lines about clients held back by the log's rate limit"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2acp_core::crypto::{Direction, IdentityKey, ThreadSession};
    use a2acp_core::link::RelayFrame;

    fn seed(i: u64) -> [u8; 32] {
        let mut s = [9u8; 32];
        s[..8].copy_from_slice(&i.to_le_bytes());
        s
    }

    fn addr(i: u64) -> Address {
        Address::parse(&format!("agent:v{i}@localhost")).unwrap()
    }

    /// A `send` frame from agent `i` to agent `i + 1`.
    fn send_bytes(i: u64, k: u64) -> (Vec<u8>, [u8; 32]) {
        let me = IdentityKey::from_seed(seed(i));
        let peer = IdentityKey::from_seed(seed(i + 1));
        let mut s = ThreadSession::new(seed(1000 + i * 100 + k));
        let env = s
            .seal(
                &me,
                &addr(i),
                &addr(i + 1),
                peer.public_ref(),
                &format!("thr_{i}_{k}"),
                Direction::FromInitiator,
                b"hello",
            )
            .unwrap();
        (
            ClientFrame::Send { seq: k, env }.to_bytes(),
            me.public().to_bytes(),
        )
    }

    fn verdicts(items: &[Item]) -> Vec<Verified> {
        items
            .iter()
            .filter_map(|it| match it {
                Item::Frame(_, _, v) => Some(*v),
                Item::Oversized(..) | Item::Disconnected(_) => None,
            })
            .collect()
    }

    fn corrupt_sig(frame: &[u8]) -> Vec<u8> {
        // Flip one character of the base64 signature (the last field).
        let s = String::from_utf8(frame.to_vec()).unwrap();
        let i = s.rfind("\"sig\":\"").unwrap() + 10;
        let mut b = s.into_bytes();
        b[i] = if b[i] == b'A' { b'B' } else { b'A' };
        b
    }

    #[test]
    fn small_order_encodings_are_the_small_order_points() {
        for y in SMALL_ORDER_Y {
            let mut decodable = 0;
            for sign in [0u8, 0x80] {
                let mut b = y;
                b[31] |= sign;
                if let Ok(vk) = VerifyingKey::from_bytes(&b) {
                    assert!(vk.is_weak(), "{b:02x?} is not of small order");
                    decodable += 1;
                }
            }
            assert!(decodable > 0, "{y:02x?} is no point");
            let mut sig = [0u8; 64];
            sig[..32].copy_from_slice(&y);
            assert!(!batchable_r(&sig));
        }
        // p + 1 ≡ 1 (non-canonical) and an ordinary point are told apart.
        let mut sig = [0xffu8; 64];
        sig[0] = 0xee;
        sig[31] = 0x7f;
        assert!(!batchable_r(&sig));
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(IdentityKey::from_seed(seed(1)).public().to_bytes().as_ref());
        assert!(batchable_r(&sig));
    }

    #[test]
    fn verifies_authenticated_sends_one_by_one_and_in_batches() {
        for n in [1u64, 3, 4, 9, 70] {
            let mut st = VerifyState::new(131_072, &RelayConfig::default());
            let mut input = Vec::new();
            for i in 0..n {
                let (b, key) = send_bytes(i, 1);
                st.apply(Ctl::Authed(ConnId(i), key));
                input.push(VerifyIn::Bytes(ConnId(i), b));
            }
            let items = st.process(input.into_iter());
            assert_eq!(
                verdicts(&items),
                vec![Verified::EnvelopeSignature; n as usize],
                "n = {n}"
            );
        }
    }

    #[test]
    fn a_bad_signature_in_a_batch_is_found_and_left_unverified() {
        let mut st = VerifyState::new(131_072, &RelayConfig::default());
        let mut input = Vec::new();
        for i in 0..10u64 {
            let (mut b, key) = send_bytes(i, 1);
            if i == 6 {
                b = corrupt_sig(&b);
            }
            st.apply(Ctl::Authed(ConnId(i), key));
            input.push(VerifyIn::Bytes(ConnId(i), b));
        }
        let items = st.process(input.into_iter());
        let mut want = vec![Verified::EnvelopeSignature; 10];
        want[6] = Verified::No;
        assert_eq!(verdicts(&items), want);
    }

    #[test]
    fn unauthenticated_or_foreign_keys_are_left_to_the_state_machine() {
        let mut st = VerifyState::new(131_072, &RelayConfig::default());
        let (b0, k0) = send_bytes(0, 1);
        let (b1, _) = send_bytes(1, 1);
        let (b2, k2) = send_bytes(2, 1);
        // conn 0 authenticated with its key; conn 1 not at all; conn 2 with another key.
        st.apply(Ctl::Authed(ConnId(0), k0));
        st.apply(Ctl::Authed(ConnId(2), k0));
        let items = st.process(
            vec![
                VerifyIn::Bytes(ConnId(0), b0.clone()),
                VerifyIn::Bytes(ConnId(1), b1),
                VerifyIn::Bytes(ConnId(2), b2),
                VerifyIn::Bytes(ConnId(3), b"{\"t\":\"nope\"}".to_vec()),
                VerifyIn::Disconnected(ConnId(0)),
                VerifyIn::Bytes(ConnId(0), b0),
            ]
            .into_iter(),
        );
        assert_eq!(
            verdicts(&items),
            vec![
                Verified::EnvelopeSignature,
                Verified::No,
                Verified::No,
                Verified::No,
                Verified::No
            ]
        );
        assert!(matches!(&items[3], Item::Frame(_, Err(e), _) if e.code == ErrorCode::Malformed));
        assert!(matches!(items[4], Item::Disconnected(ConnId(0))));
        assert_ne!(k0, k2);
    }

    #[test]
    fn a_sender_beyond_its_rate_gets_no_more_checks_here() {
        let cfg = RelayConfig {
            rate_per_sec: 1,
            rate_burst: 2,
            ..RelayConfig::default()
        };
        let mut st = VerifyState::new(131_072, &cfg);
        let (_, key) = send_bytes(0, 0);
        st.apply(Ctl::Authed(ConnId(0), key));
        let input = (1..=6u64).map(|k| VerifyIn::Bytes(ConnId(0), send_bytes(0, k).0));
        // A burst of 2, then one per second.
        let items = st.process(input.collect::<Vec<_>>().into_iter());
        let v = verdicts(&items);
        assert_eq!(&v[..2], &[Verified::EnvelopeSignature; 2]);
        assert_eq!(&v[2..], &[Verified::No; 4]);
    }

    /// The whole service on its threads: register, send, deliver, ack, metrics, stop.
    #[test]
    fn routes_through_the_pipeline() {
        use a2acp_core::link::{challenge_signed_bytes, REGISTER_LABEL};
        let svc = RelayService::start(ServiceConfig {
            verifiers: 2,
            ..ServiceConfig::default()
        })
        .unwrap();
        let h = svc.handle();
        let recv = |rx: &flume::Receiver<ConnOut>| -> RelayFrame {
            match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
                ConnOut::Frame(b) => RelayFrame::from_bytes(&b).unwrap(),
                other => panic!("{other:?}"),
            }
        };
        let mut conns = Vec::new();
        for i in 0..2u64 {
            let (conn, rx) = block_on(h.connect(LOCALHOST)).unwrap();
            let RelayFrame::Challenge { nonce, domain, .. } = recv(&rx) else {
                panic!("no challenge")
            };
            let id = IdentityKey::from_seed(seed(i));
            let ts = crate::clock::now().as_millis();
            let key = id.public().to_bytes();
            let msg =
                challenge_signed_bytes(REGISTER_LABEL, &nonce, &domain, ts, &addr(i), Some(&key));
            let f = ClientFrame::Register {
                address: addr(i),
                key,
                ts,
                sig: id.sign(&msg),
            };
            block_on(h.bytes(conn, f.to_bytes())).unwrap();
            assert!(matches!(recv(&rx), RelayFrame::AuthOk { .. }));
            conns.push((conn, rx));
        }
        for k in 1..=20u64 {
            let (b, _) = send_bytes(0, k);
            block_on(h.bytes(conns[0].0, b)).unwrap();
        }
        let mut accepted = 0;
        let mut delivered = Vec::new();
        while accepted < 20 || delivered.len() < 20 {
            if let Ok(ConnOut::Frame(b)) = conns[0].1.try_recv() {
                if let RelayFrame::Accepted { .. } = RelayFrame::from_bytes(&b).unwrap() {
                    accepted += 1;
                }
                continue;
            }
            if let Ok(ConnOut::Frame(b)) = conns[1].1.recv_timeout(Duration::from_millis(50)) {
                if let RelayFrame::Deliver { id, .. } = RelayFrame::from_bytes(&b).unwrap() {
                    delivered.push(id);
                }
            }
        }
        for id in delivered {
            block_on(h.bytes(conns[1].0, ClientFrame::Ack { id }.to_bytes())).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let s = block_on(h.snapshot()).unwrap();
            if s.stats.acked_total == 20 {
                assert_eq!(s.stats.routed_total, 20);
                assert_eq!(s.stats.queued, 0);
                assert!(s.stats.refusals.is_empty(), "{:?}", s.stats.refusals);
                assert!(s.commits >= 1);
                break;
            }
            assert!(Instant::now() < deadline, "{s:?}");
        }
        svc.stop_and_join(true).unwrap();
        assert!(matches!(
            conns[0].1.recv_timeout(Duration::from_secs(1)),
            Ok(ConnOut::Close(None)) | Ok(ConnOut::Frame(_))
        ));
        assert!(block_on(h.snapshot()).is_none());
    }

    const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn sources_of_ip_addresses() {
        use std::net::{Ipv4Addr, Ipv6Addr};
        let v4 = source_of_ip(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
        assert_eq!(
            v4,
            source_of_ip(IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped()))
        );
        assert_ne!(v4, source_of_ip(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2))));
        // IPv6: one /64 is one source.
        let a: Ipv6Addr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(source_of_ip(a.into()), source_of_ip(b.into()));
        assert_ne!(source_of_ip(a.into()), source_of_ip(c.into()));
    }

    #[test]
    fn frames_of_connections_the_relay_closed_are_dropped_unparsed() {
        let mut st = VerifyState::new(131_072, &RelayConfig::default());
        st.apply(Ctl::Closed(ConnId(1)));
        let items = st.process(
            vec![
                VerifyIn::Bytes(ConnId(1), b"junk".to_vec()),
                VerifyIn::Oversized(ConnId(1), 10),
                VerifyIn::Bytes(ConnId(2), b"junk".to_vec()),
                VerifyIn::Disconnected(ConnId(1)),
            ]
            .into_iter(),
        );
        assert_eq!(items.len(), 2);
        assert!(matches!(items[0], Item::Frame(ConnId(2), Err(_), _)));
        assert!(matches!(items[1], Item::Disconnected(ConnId(1))));
        assert!(st.closed.is_empty(), "forgotten with its disconnection");
    }

    #[test]
    fn the_log_limiter_lets_a_burst_through_then_counts() {
        let l = ClientLog::new();
        let allowed = (0..1000).filter(|_| l.allow()).count();
        let t0 = Instant::now();
        // The burst, and whatever the refill gave while the loop ran (well under a second).
        assert!(
            (LOG_BURST as usize..LOG_BURST as usize + 3).contains(&allowed),
            "{allowed}"
        );
        assert_eq!(l.total(), 1000 - allowed as u64);
        l.held_back(5);
        assert_eq!(l.total(), 1005 - allowed as u64);
        // A summary clears what it reported, at most every LOG_SUMMARY_EVERY.
        assert_eq!(l.limiter.summary_at(t0, LOG_SUMMARY_EVERY), None);
        let later = t0 + LOG_SUMMARY_EVERY * 2;
        assert_eq!(
            l.limiter
                .summary_at(later, LOG_SUMMARY_EVERY)
                .map(|(n, _)| n),
            Some(1000 - allowed as u64)
        );
        assert_eq!(l.limiter.summary_at(later, LOG_SUMMARY_EVERY), None);
    }

    /// A junk flood through the whole service is closed with `too_many_refusals`; an
    /// oversized message is answered `too_large` and closed with that code.
    #[test]
    fn abusive_connections_are_closed_through_the_pipeline() {
        let svc = RelayService::start(ServiceConfig {
            verifiers: 2,
            ..ServiceConfig::default()
        })
        .unwrap();
        let h = svc.handle();
        let (conn, rx) = block_on(h.connect(LOCALHOST)).unwrap();
        for _ in 0..500 {
            block_on(h.bytes(conn, b"junk".to_vec())).unwrap();
        }
        let mut malformed = 0;
        let close = loop {
            match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
                ConnOut::Frame(b) => {
                    if let Ok(RelayFrame::Error {
                        code: ErrorCode::Malformed,
                        ..
                    }) = RelayFrame::from_bytes(&b)
                    {
                        malformed += 1;
                    }
                }
                ConnOut::Close(code) => break code,
            }
        };
        assert_eq!(close, Some(ErrorCode::TooManyRefusals));
        let allowance = RelayConfig::default().refusal_burst;
        assert!(
            malformed > allowance && malformed < allowance + 5,
            "{malformed}"
        );
        block_on(h.disconnected(conn));

        let (conn, rx) = block_on(h.connect(LOCALHOST)).unwrap();
        block_on(h.oversized(conn, 262_144)).unwrap();
        let mut frames = Vec::new();
        let close = loop {
            match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
                ConnOut::Frame(b) => frames.push(RelayFrame::from_bytes(&b).unwrap()),
                ConnOut::Close(code) => break code,
            }
        };
        assert_eq!(close, Some(ErrorCode::TooLarge));
        assert!(matches!(
            frames.last(),
            Some(RelayFrame::Error {
                code: ErrorCode::TooLarge,
                ..
            })
        ));
        block_on(h.disconnected(conn));
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let s = block_on(h.snapshot()).unwrap();
            if s.stats.connections == 0 {
                assert_eq!(s.stats.closed_for_refusals, 1);
                assert_eq!(s.stats.closed_oversized, 1);
                // 3 refusals of the flood logged, the rest counted (some by the limiter).
                assert!(s.log_lines_suppressed >= u64::from(allowance) - 2, "{s:?}");
                break;
            }
            assert!(Instant::now() < deadline, "{s:?}");
        }
        svc.stop_and_join(true).unwrap();
    }

    /// A minimal executor for the handle's futures (flume's async sends on a thread).
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        use std::task::{Context, Poll, Wake, Waker};
        struct T(std::thread::Thread);
        impl Wake for T {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let waker = Waker::from(Arc::new(T(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut f = std::pin::pin!(f);
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            std::thread::park_timeout(Duration::from_millis(10));
        }
    }
}
