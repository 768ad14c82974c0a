//! Sends the relay's wake-ups ([`RelayOutput::WakeUp`](a2acp_core::relay::RelayOutput)):
//! a bounded queue drained by a few threads, each POSTing the fixed body with a deadline.
//! Nothing on the routing path waits: a full queue drops the wake-up (counted), a dead
//! endpoint costs one of these threads its deadline, never a packet.
//!
//! Server-side request forgery: the core accepted the endpoint's host name; here every
//! address it resolves to is checked ([`is_public_ip`]) by the resolver the connection
//! itself uses, so a name that resolves to a public address at registration and to
//! `127.0.0.1` later still reaches nothing private. Redirects are not followed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use a2acp_core::relay::wake_up::{is_public_ip, WAKE_UP_BODY};
use tracing::debug;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

/// How the wake-ups are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeUpOptions {
    /// Threads sending at once. Default 2.
    pub workers: usize,
    /// Wake-ups waiting at most; more are dropped. Default 1,024.
    pub queue: usize,
    /// The deadline of one POST, connection included. Default 5 s.
    pub timeout: Duration,
    /// Send to loopback and private addresses too (the relay's `--wake-up-allow-private`).
    pub allow_private: bool,
}

impl Default for WakeUpOptions {
    fn default() -> Self {
        WakeUpOptions {
            workers: 2,
            queue: 1024,
            timeout: Duration::from_secs(5),
            allow_private: false,
        }
    }
}

/// What the sender did so far.
#[derive(Debug, Default)]
pub struct WakeUpStats {
    /// Answered 2xx.
    pub sent: AtomicU64,
    /// Failed: an error status, a timeout, a refused address.
    pub failed: AtomicU64,
    /// Dropped: the queue was full.
    pub dropped: AtomicU64,
}

/// The queue's sending end; cloning shares it.
#[derive(Debug, Clone)]
pub struct WakeUps {
    tx: flume::Sender<String>,
    stats: Arc<WakeUpStats>,
}

/// Resolves as the system does, then refuses any address that is not public.
#[derive(Debug)]
struct PublicOnly(DefaultResolver);

impl Resolver for PublicOnly {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let addrs = self.0.resolve(uri, config, timeout)?;
        if let Some(a) = addrs.iter().find(|a| !is_public_ip(a.ip())) {
            return Err(ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{} resolves to {}, not a public address", uri, a.ip()),
            )));
        }
        Ok(addrs)
    }
}

impl WakeUps {
    /// Starts the threads.
    pub fn start(opts: WakeUpOptions) -> WakeUps {
        let (tx, rx) = flume::bounded::<String>(opts.queue.max(1));
        let stats = Arc::new(WakeUpStats::default());
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(opts.timeout))
            .max_redirects(0)
            .http_status_as_error(false)
            .user_agent("a2acp-relay")
            .build();
        let agent = if opts.allow_private {
            ureq::Agent::new_with_config(config)
        } else {
            ureq::Agent::with_parts(
                config,
                DefaultConnector::new(),
                PublicOnly(DefaultResolver::default()),
            )
        };
        for i in 0..opts.workers.max(1) {
            let (rx, stats, agent) = (rx.clone(), stats.clone(), agent.clone());
            let _ = std::thread::Builder::new()
                .name(format!("a2acp-wake-up-{i}"))
                .spawn(move || {
                    while let Ok(endpoint) = rx.recv() {
                        let r = agent
                            .post(&endpoint)
                            .header("content-type", "text/plain")
                            .send(WAKE_UP_BODY);
                        match r {
                            Ok(resp) if resp.status().is_success() => {
                                stats.sent.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(resp) => {
                                debug!(status = resp.status().as_u16(), "wake-up refused");
                                stats.failed.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                debug!("wake-up failed: {e}");
                                stats.failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
        }
        WakeUps { tx, stats }
    }

    /// Queues a wake-up; dropped (and counted) when the queue is full.
    pub fn send(&self, endpoint: String) {
        if self.tx.try_send(endpoint).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters.
    pub fn stats(&self) -> &WakeUpStats {
        &self.stats
    }
}
