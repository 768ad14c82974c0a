//! One domain on several machines: the relay's link to a NATS cluster with JetStream
//! (issue 31; seed 004 §5.1 names NATS as the engine behind a gateway). SPEC-NOTES
//! "A relay cluster on NATS JetStream" states the subjects, streams, buckets and settings.
//!
//! The relay's threads are plain threads (the relay service runs on both runtimes), and
//! the NATS client, `async-nats`, runs on tokio: [`Cluster`] owns one thread with a
//! current-thread tokio runtime and the NATS connection, and takes requests from any
//! thread through a channel. Each request answers on its own channel ([`Pending`]), so
//! the caller either waits for it or feeds the answer back as an input when it comes —
//! the relay's state machine never blocks on the network.
//!
//! - [`registry`]: the registry of addresses and their keys, first come first served
//!   across every node (a compare-and-set in a JetStream key-value bucket);
//! - [`presence`]: where each address is connected, so the last connection wins across
//!   nodes;
//! - [`queue`]: the packets accepted and not yet acknowledged, in a replicated stream:
//!   the per-thread cap, deduplication by packet id, delivery ids, reading a recipient's
//!   packets from any node;
//! - [`outbound`]: the packets for other domains, in the same stream, read by the
//!   domain's federator;
//! - [`lease`]: which node is the federator;
//! - [`acp_inbox`]: the inboxes of ACP agents (seed 004 §5.1), which the relay's ACP
//!   gateway publishes to.

pub mod acp_inbox;
pub mod health;
pub mod lease;
pub mod outbound;
pub mod presence;
pub mod queue;
pub mod registry;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

pub use health::ClusterHealth;
pub use presence::{Presence, PresenceWatch};
pub use queue::{Enqueued, Queued, Watch};
pub use registry::Claim;

/// Where the cluster is and who this node is.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The NATS servers' URLs (`nats://HOST:PORT`); the client connects to one and learns
    /// the others from it, moving to another when it goes.
    pub urls: Vec<String>,
    /// This relay node's name (unique in the cluster; it names the node in records and
    /// metrics).
    pub node: String,
    /// Replicas of each bucket and stream: 3 in a cluster of three NATS servers or more,
    /// so a write acknowledged is on a quorum; fewer only for a smaller cluster.
    pub replicas: usize,
    /// The most packets queued for one recipient in one thread (the relay's
    /// `queue_per_thread`; every node of a domain must give the same).
    pub queue_per_thread: u32,
    /// How long a request to the cluster may take before it fails with
    /// [`ClusterError::Timeout`].
    pub request_timeout: Duration,
    /// How long [`Cluster::connect`] keeps trying while the cluster is reachable but not
    /// ready (its streams electing leaders after a restart).
    pub connect_timeout: Duration,
}

impl ClusterConfig {
    /// A configuration for `urls` and `node` with the defaults: replicas `min(3, urls)`,
    /// 100 packets per thread (the relay's default `queue_per_thread`),
    /// requests within 10 s (a stream leader lost is replaced within a few seconds), ready
    /// within 30 s.
    pub fn new(urls: Vec<String>, node: impl Into<String>) -> ClusterConfig {
        let replicas = urls.len().clamp(1, 3);
        ClusterConfig {
            urls,
            node: node.into(),
            replicas,
            queue_per_thread: 100,
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a request to the cluster failed. Every failure is transient or a misconfiguration:
/// the relay refuses what it cannot make durable instead of acknowledging it.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ClusterError {
    /// No NATS server could be reached.
    #[error("cannot reach the NATS cluster ({0})")]
    Unreachable(String),
    /// The cluster did not answer in time (no quorum, a server paused, …).
    #[error("the NATS cluster did not answer within {0:?}")]
    Timeout(Duration),
    /// JetStream refused or failed the request.
    #[error("JetStream: {0}")]
    JetStream(String),
    /// What the cluster holds is not what this relay wrote (a foreign bucket, a corrupt
    /// value).
    #[error("the cluster holds an unreadable value: {0}")]
    Corrupt(String),
    /// The cluster is set up otherwise than this node (another cap per thread): every
    /// node of a domain must be configured alike. Not retried.
    #[error("the cluster is configured otherwise: {0}")]
    Misconfigured(String),
    /// The cluster's thread has stopped.
    #[error("the cluster link has stopped")]
    Stopped,
}

/// An answer that comes later: [`Pending::wait`] blocks for it; [`Pending::try_take`]
/// looks without blocking (for a caller that polls between inputs).
#[derive(Debug)]
pub struct Pending<T>(flume::Receiver<Result<T, ClusterError>>);

impl<T> Pending<T> {
    /// Blocks until the answer comes.
    pub fn wait(self) -> Result<T, ClusterError> {
        self.0.recv().unwrap_or(Err(ClusterError::Stopped))
    }

    /// The answer if it has come.
    pub fn try_take(&self) -> Option<Result<T, ClusterError>> {
        match self.0.try_recv() {
            Ok(r) => Some(r),
            Err(flume::TryRecvError::Empty) => None,
            Err(flume::TryRecvError::Disconnected) => Some(Err(ClusterError::Stopped)),
        }
    }

    /// The channel the answer comes on (to select over several).
    pub fn receiver(&self) -> &flume::Receiver<Result<T, ClusterError>> {
        &self.0
    }
}

/// A request for the cluster's thread: it spawns its work there as a task of its own, so
/// a slow request (a claim waiting out a leader election) never holds up the others.
type Job = Box<dyn FnOnce(Arc<Link>) + Send>;

/// What the cluster's thread holds: the connection and the JetStream handles.
pub(crate) struct Link {
    /// How long a request may take ([`ClusterConfig::request_timeout`]).
    pub(crate) request_timeout: Duration,
    pub(crate) js: async_nats::jetstream::Context,
    pub(crate) registry: registry::Registry,
    pub(crate) presence: async_nats::jetstream::kv::Store,
    pub(crate) queue: queue::Queue,
    pub(crate) nodes: async_nats::jetstream::kv::Store,
    pub(crate) leases: async_nats::jetstream::kv::Store,
}

/// A relay node's link to the NATS cluster: one thread, one connection.
pub struct Cluster {
    jobs: flume::Sender<Job>,
    thread: Option<std::thread::JoinHandle<()>>,
    config: ClusterConfig,
    health: Arc<health::HealthCell>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.config.node)
            .field("urls", &self.config.urls)
            .finish()
    }
}

impl Cluster {
    /// Connects to the cluster and makes sure its buckets and streams exist with this
    /// relay's settings; blocks until then: an unreachable cluster fails within
    /// `request_timeout`, one that answers but is not ready is tried until `connect_timeout`.
    pub fn connect(config: ClusterConfig) -> Result<Cluster, ClusterError> {
        let (jobs, rx) = flume::unbounded::<Job>();
        let (ready_tx, ready_rx) = flume::bounded::<Result<(), ClusterError>>(1);
        let thread_config = config.clone();
        let health = Arc::new(health::HealthCell::default());
        let cell = health.clone();
        let failed = ready_tx.clone();
        let thread = crate::tokio_thread::spawn(
            &format!("cluster-{}", config.node),
            move |e| {
                let _ = failed.send(Err(ClusterError::Unreachable(e)));
            },
            move || async move {
                let link = match Link::open(thread_config, cell).await {
                    Ok(link) => {
                        let _ = ready_tx.send(Ok(()));
                        link
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let link = Arc::new(link);
                while let Ok(job) = rx.recv_async().await {
                    job(link.clone());
                }
            },
        )
        .map_err(|e| ClusterError::Unreachable(e.to_string()))?;
        ready_rx.recv().unwrap_or(Err(ClusterError::Stopped))?;
        let cluster = Cluster {
            jobs,
            thread: Some(thread),
            config,
            health,
        };
        cluster.beat();
        Ok(cluster)
    }

    /// This node's configuration.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Runs `f` on the cluster's thread, as a task of its own; its answer comes on the
    /// returned [`Pending`], or [`ClusterError::Timeout`] after `request_timeout`.
    pub(crate) fn request<T, F, Fut>(&self, f: F) -> Pending<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Link>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ClusterError>> + Send + 'static,
    {
        let (tx, rx) = flume::bounded(1);
        let timeout = self.config.request_timeout;
        let job: Job = Box::new(move |link: Arc<Link>| {
            tokio::spawn(async move {
                let answer = match tokio::time::timeout(timeout, f(link)).await {
                    Ok(r) => r,
                    Err(_) => Err(ClusterError::Timeout(timeout)),
                };
                let _ = tx.send(answer);
            });
        });
        if self.jobs.send(job).is_err() {
            let (tx, rx) = flume::bounded(1);
            let _ = tx.send(Err(ClusterError::Stopped));
            return Pending(rx);
        }
        Pending(rx)
    }

    /// Runs `f` on the cluster's thread as a task that lives until it returns (a watch).
    pub(crate) fn spawn<F, Fut>(&self, f: F)
    where
        F: FnOnce(Arc<Link>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let job: Job = Box::new(move |link: Arc<Link>| {
            tokio::spawn(f(link));
        });
        let _ = self.jobs.send(job);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop once the jobs already sent are done.
        let (closed, _) = flume::unbounded();
        drop(std::mem::replace(&mut self.jobs, closed));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `attempt` until it succeeds or fails for good, trying a transient failure again
/// (a stream just made whose subjects a server has not learnt yet, a leader being elected)
/// until 90 % of `timeout`, then returning its error. `attempt` answers `Err((error,
/// transient))`. Only for requests that are safe to repeat (a put of the same value, a
/// publish deduplicated by its id).
pub(crate) async fn again_while_transient<T, F, Fut>(
    timeout: Duration,
    mut attempt: F,
) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, (ClusterError, bool)>>,
{
    let deadline = tokio::time::Instant::now() + timeout * 9 / 10;
    let mut tries: u64 = 0;
    loop {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err((e, true)) if tokio::time::Instant::now() < deadline => {
                tracing::debug!("cluster request: {e}; trying again");
                tries += 1;
                tokio::time::sleep(Duration::from_millis(tries.min(20) * 5)).await;
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// `s`'s UTF-8 bytes in lower-case hex: how an address or a thread id becomes one token
/// of a subject or a bucket key (which allow only `[-/_=.a-zA-Z0-9]`), one to one.
pub(crate) fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The name [`hex`] made `s` from, if it is one.
pub(crate) fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The key-value bucket `bucket` (file storage, `replicas` copies, one revision per key,
/// values ≤ 1 KiB), made if the cluster has none.
pub(crate) async fn open_bucket(
    js: &async_nats::jetstream::Context,
    config: &ClusterConfig,
    bucket: &str,
    description: &str,
) -> Result<async_nats::jetstream::kv::Store, ClusterError> {
    use async_nats::jetstream::{kv, stream::StorageType};
    if let Ok(store) = js.get_key_value(bucket).await {
        return Ok(store);
    }
    js.create_key_value(kv::Config {
        bucket: bucket.to_string(),
        description: description.to_string(),
        history: 1,
        max_value_size: 1024,
        storage: StorageType::File,
        num_replicas: config.replicas,
        ..Default::default()
    })
    .await
    .map_err(|e| ClusterError::JetStream(e.to_string()))
}

/// The key-value bucket `bucket` whose entries expire `ttl` after their last write (file
/// storage, `replicas` copies, one revision per key), made if the cluster has none.
pub(crate) async fn open_expiring_bucket(
    js: &async_nats::jetstream::Context,
    config: &ClusterConfig,
    bucket: &str,
    description: &str,
    ttl: Duration,
) -> Result<async_nats::jetstream::kv::Store, ClusterError> {
    use async_nats::jetstream::{kv, stream::StorageType};
    if let Ok(store) = js.get_key_value(bucket).await {
        return Ok(store);
    }
    js.create_key_value(kv::Config {
        bucket: bucket.to_string(),
        description: description.to_string(),
        history: 1,
        max_age: ttl,
        storage: StorageType::File,
        num_replicas: config.replicas,
        ..Default::default()
    })
    .await
    .map_err(|e| ClusterError::JetStream(e.to_string()))
}

impl Link {
    async fn open(
        config: ClusterConfig,
        health: Arc<health::HealthCell>,
    ) -> Result<Link, ClusterError> {
        let events = health.clone();
        let client = tokio::time::timeout(
            config.request_timeout,
            async_nats::ConnectOptions::new()
                .name(format!("a2acp-relay {}", config.node))
                .event_callback(move |event| {
                    let events = events.clone();
                    async move {
                        let up = match event {
                            async_nats::Event::Connected => true,
                            async_nats::Event::Disconnected => false,
                            _ => return,
                        };
                        events
                            .connected
                            .store(up, std::sync::atomic::Ordering::Relaxed);
                    }
                })
                .connect(config.urls.as_slice()),
        )
        .await
        .map_err(|_| ClusterError::Timeout(config.request_timeout))?
        .map_err(|e| ClusterError::Unreachable(e.to_string()))?;
        health
            .connected
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let js = async_nats::jetstream::new(client);
        // Reachable but perhaps not ready: after a restart of the cluster its streams
        // elect their leaders first. Try again until `connect_timeout`.
        let deadline = tokio::time::Instant::now() + config.connect_timeout;
        loop {
            let open = async {
                let registry = registry::open(&js, &config).await?;
                let presence = presence::open(&js, &config).await?;
                let queue = queue::open(&js, &config).await?;
                acp_inbox::open(&js, &config).await?;
                let nodes = open_expiring_bucket(
                    &js,
                    &config,
                    health::NODES_BUCKET,
                    "a2acp: the relay nodes alive",
                    health::NODE_TTL,
                )
                .await?;
                let leases = open_expiring_bucket(
                    &js,
                    &config,
                    lease::LEASES_BUCKET,
                    "a2acp: which node holds each role",
                    lease::LEASE_TTL,
                )
                .await?;
                Ok::<_, ClusterError>((registry, presence, queue, nodes, leases))
            };
            let attempt = tokio::time::timeout(config.request_timeout, open).await;
            let error = match attempt {
                Ok(Ok((registry, presence, queue, nodes, leases))) => {
                    return Ok(Link {
                        request_timeout: config.request_timeout,
                        js: js.clone(),
                        registry,
                        presence,
                        queue,
                        nodes,
                        leases,
                    })
                }
                Ok(Err(e @ ClusterError::Misconfigured(_))) => return Err(e),
                Ok(Err(e)) => e,
                Err(_) => ClusterError::Timeout(config.request_timeout),
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(error);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
