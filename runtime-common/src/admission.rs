//! Connection admission on the relay's listener, executor-independent: what a connection
//! may cost before it is an agent link (docs/protocol.md "The relay link" §2 and §8).
//!
//! - **Caps.** [`Admission::admit`] is asked once per accepted TCP connection, before
//!   anything is read or spawned: past `max_connections_per_ip` open connections from its
//!   source address, or past `max_connections` in total with no connection with an
//!   incomplete request head to close instead, the connection is refused ([`REFUSED`], best effort, then
//!   closed) and costs nothing but the accept. At the total cap, a new connection takes the
//!   place of a connection whose request head is still incomplete — **the oldest of the
//!   source address with the most of them** — which is closed: connections that hold a slot without finishing their request cannot lock out
//!   `/healthz`, `/metrics` or an agent connecting (once its head is complete, a
//!   connection is answered or upgraded under the same deadline, and keeps its slot). A connection
//!   keeps its slot until its task has closed it, and while [`MAX_CLOSING`] are being
//!   closed the accept loop waits for one of them to end ([`Admission::room`]), so at most
//!   `max_connections + MAX_CLOSING` descriptors are ever held by connections.
//! - **One deadline for the whole HTTP phase.** [`serve_connection`] completes the TLS
//!   handshake of a relay serving TLS, reads the request
//!   head (up to [`http::MAX_HEAD`] bytes), answers `/healthz`, `/metrics` and anything
//!   else with one response and closes, or completes the WebSocket handshake — all within
//!   `upgrade_timeout` from the accept, whatever the client sends or does not send (one
//!   byte a second, a few bytes then silence, a few bytes then FIN: a read of 0 closes at
//!   once). Only then does the connection become an agent link ([`crate::ws`]), where the
//!   relay's own `auth_timeout` applies.
//! - **Accept failures** (out of file descriptors, …) are counted, logged at most once per
//!   [`LOG_INTERVAL`] and followed by a pause that doubles up to one second
//!   ([`Admission::accept_failed`]): a full descriptor table costs neither a busy loop nor
//!   a growing log.
//!
//! A binding owns the listener, the spawning and the timer; it calls [`Admission::admit`]
//! after each accept and spawns [`serve_connection`] with the ticket and a timer future.
//! What a running relay shows of itself whatever the executor (its address, URL, counters)
//! is a [`Listening`], and why it could not start a [`RelayError`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{debug, info, warn};

use crate::http::{self, Route};
use crate::linger;
use crate::log_limit::LogLimiter;
use crate::relay_service::{RelayHandle, RelayService, RelaySnapshot, ServiceError};
use crate::tls::{MaybeTls, ServerTls};

/// Default deadline of the HTTP phase (request head and WebSocket handshake).
pub const DEFAULT_UPGRADE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default cap of open connections per source address.
pub const DEFAULT_MAX_PER_IP: usize = 128;
/// Default total cap when the descriptor limit cannot be read.
pub const FALLBACK_MAX_CONNECTIONS: usize = 896;
/// Largest default total cap, whatever the descriptor limit.
pub const MAX_DEFAULT_CONNECTIONS: usize = 65_536;
/// Shortest interval between two log lines of one kind caused by clients.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Longest pause after a failed accept.
pub const MAX_ACCEPT_PAUSE: Duration = Duration::from_secs(1);
/// Shortest pause after a failed accept.
pub const MIN_ACCEPT_PAUSE: Duration = Duration::from_millis(10);
/// Most connections told to close to make room at the total cap and not closed yet: at
/// it, the accept loop waits ([`Admission::room`]) until one of them is closed, and new
/// connections wait in the listen backlog.
pub const MAX_CLOSING: usize = 32;

/// What a refused connection is sent (once, if the socket takes it at once) before it is
/// closed.
pub const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 18\r\nconnection: close\r\n\r\ntoo many connections\n";

/// The caps and the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Open connections in total (every phase).
    pub max_connections: usize,
    /// Open connections per source address; 0: no cap.
    pub max_per_ip: usize,
    /// Deadline of the HTTP phase, from the accept.
    pub upgrade_timeout: Duration,
}

impl Default for AdmissionConfig {
    /// The total cap derived from this process's descriptor limit
    /// ([`default_max_connections`]).
    fn default() -> Self {
        AdmissionConfig {
            max_connections: default_max_connections(fd_soft_limit()),
            max_per_ip: DEFAULT_MAX_PER_IP,
            upgrade_timeout: DEFAULT_UPGRADE_TIMEOUT,
        }
    }
}

/// The soft limit on open file descriptors of this process (`RLIMIT_NOFILE`), read from
/// `/proc/self/limits` (`None` where there is no such file or it says `unlimited`).
pub fn fd_soft_limit() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = s.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Raises this process's soft limit on open file descriptors (`RLIMIT_NOFILE`) to `want`:
/// up to the hard limit, and past it (to `want`, at most the kernel's `nr_open`) where the
/// process may (root, `CAP_SYS_RESOURCE`). A relay starts with `want` its hard limit, as most
/// servers do (the soft limit of 1,024 many systems give is a limit for `select`, not for a
/// server); a benchmark asks for what its connections need. Returns the soft limit in force
/// afterwards (`None` where it cannot be read).
#[cfg(unix)]
pub fn raise_fd_limit(want: Option<u64>) -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let now = getrlimit(Resource::Nofile);
    let hard = now.maximum;
    let soft = now.current;
    let want = want.or(hard)?;
    if soft.is_some_and(|s| s >= want) || soft.is_none() {
        return soft;
    }
    // Past the hard limit only if asked for; capped by the kernel's ceiling.
    if hard.is_some_and(|h| want > h) {
        let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(want);
        let target = want.min(ceiling);
        if setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(target),
                maximum: Some(target),
            },
        )
        .is_ok()
        {
            return Some(target);
        }
    }
    let target = hard.map_or(want, |h| want.min(h));
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum: hard,
        },
    );
    getrlimit(Resource::Nofile).current
}

/// Where there is no `RLIMIT_NOFILE`, the limit in force.
#[cfg(not(unix))]
pub fn raise_fd_limit(_want: Option<u64>) -> Option<u64> {
    fd_soft_limit()
}

/// The default total cap for a descriptor limit: the limit less a reserve of an eighth of
/// it (at least 64) for the database files, the listener, the executor and connections
/// being closed; 896 under the common limit of 1024, 192 under 256.
pub fn default_max_connections(fd_limit: Option<u64>) -> usize {
    let Some(limit) = fd_limit else {
        return FALLBACK_MAX_CONNECTIONS;
    };
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let reserve = (limit / 8).max(64);
    if limit <= reserve + 16 {
        return (limit / 2).max(1);
    }
    (limit - reserve).min(MAX_DEFAULT_CONNECTIONS)
}

/// Why a connection was refused at the accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its source address has `max_per_ip` connections open.
    PerIp,
    /// `max_connections` are open and every one of them is an agent link.
    Total,
}

/// Counters for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    /// TCP connections open (every phase).
    pub open: u64,
    /// Of which with their request head still incomplete (the ones that can be closed to
    /// make room).
    pub pending: u64,
    /// Refused at the total cap.
    pub refused_total: u64,
    /// Refused at the per-source cap.
    pub refused_per_ip: u64,
    /// Connections with an incomplete request head closed to make room at the total cap.
    pub evicted: u64,
    /// Connections closed by the HTTP-phase deadline.
    pub upgrade_timeouts: u64,
    /// TLS handshakes that failed (a relay serving TLS): the client refused the
    /// certificate, spoke plain HTTP, or sent garbage.
    pub tls_handshake_failures: u64,
    /// Failed accepts (out of descriptors, …).
    pub accept_errors: u64,
}

#[derive(Debug, Default)]
struct Counters {
    refused_total: AtomicU64,
    refused_per_ip: AtomicU64,
    evicted: AtomicU64,
    upgrade_timeouts: AtomicU64,
    tls_handshake_failures: AtomicU64,
    accept_errors: AtomicU64,
    /// The current pause after a failed accept, ms (0: the last accept succeeded).
    accept_pause_ms: AtomicU64,
}

#[derive(Debug, Default)]
struct Slots {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
    /// Connections whose request head is incomplete, oldest first: ticket number → source
    /// and the signal that closes it.
    pending: BTreeMap<u64, (IpAddr, flume::Sender<()>)>,
    /// The same, by source address.
    pending_of: HashMap<IpAddr, BTreeSet<u64>>,
    /// Connections told to close to make room whose tasks have not ended yet (counted in
    /// `total` until then).
    closing: usize,
    next: u64,
}

impl Slots {
    fn add_pending(&mut self, id: u64, ip: IpAddr, close: flume::Sender<()>) {
        self.pending.insert(id, (ip, close));
        self.pending_of.entry(ip).or_default().insert(id);
    }

    fn remove_pending(&mut self, id: u64) -> Option<(IpAddr, flume::Sender<()>)> {
        let (ip, close) = self.pending.remove(&id)?;
        if let Some(ids) = self.pending_of.get_mut(&ip) {
            ids.remove(&id);
            if ids.is_empty() {
                self.pending_of.remove(&ip);
            }
        }
        Some((ip, close))
    }

    /// The connection to close to make room: among the source addresses with the most
    /// connections whose head is incomplete, the oldest such connection (so that a source
    /// holding many slots loses them first, and a lone honest client is the last to go).
    fn pick_evicted(&self) -> Option<u64> {
        self.pending_of
            .values()
            .filter_map(|ids| Some((ids.len(), std::cmp::Reverse(*ids.first()?))))
            .max()
            .map(|(_, std::cmp::Reverse(id))| id)
    }

    fn release(&mut self, ip: IpAddr) {
        self.total = self.total.saturating_sub(1);
        if let Some(n) = self.per_ip.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_ip.remove(&ip);
            }
        }
    }
}

/// The relay listener's admission: caps, deadline and counters (one per listener, shared
/// by its connection tasks).
#[derive(Debug)]
pub struct Admission {
    cfg: AdmissionConfig,
    slots: Mutex<Slots>,
    counters: Counters,
    /// A token each time a connection told to close ends (at most one waiting).
    closed_tx: flume::Sender<()>,
    closed_rx: flume::Receiver<()>,
}

static REFUSED_LOG: LogLimiter = LogLimiter::new(LOG_INTERVAL);
static ACCEPT_LOG: LogLimiter = LogLimiter::new(LOG_INTERVAL);

impl Admission {
    /// Admission with these settings (a total cap of 0 is taken as 1).
    pub fn new(mut cfg: AdmissionConfig) -> Arc<Self> {
        cfg.max_connections = cfg.max_connections.max(1);
        let fd_limit = fd_soft_limit();
        info!(
            max_connections = cfg.max_connections,
            max_connections_per_ip = cfg.max_per_ip,
            upgrade_timeout_ms = cfg.upgrade_timeout.as_millis() as u64,
            fd_limit,
            "connection caps"
        );
        if let Some(limit) = fd_limit {
            if (cfg.max_connections + MAX_CLOSING) as u64 + 32 > limit {
                warn!(
                    max_connections = cfg.max_connections,
                    fd_limit = limit,
                    "--max-connections leaves too few of the open-files limit (ulimit -n) for the database and the listener: accepts may fail"
                );
            }
        }
        let (closed_tx, closed_rx) = flume::bounded(1);
        Arc::new(Admission {
            cfg,
            slots: Mutex::new(Slots::default()),
            counters: Counters::default(),
            closed_tx,
            closed_rx,
        })
    }

    /// Waits while [`MAX_CLOSING`] connections told to close to make room are still open
    /// (the binding calls it before each accept; new connections wait in the listen
    /// backlog meanwhile).
    pub async fn room(&self) {
        while self.slots().closing >= MAX_CLOSING {
            let _ = self.closed_rx.recv_async().await;
        }
    }

    /// The settings.
    pub fn config(&self) -> AdmissionConfig {
        self.cfg
    }

    fn slots(&self) -> MutexGuard<'_, Slots> {
        match self.slots.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Admits a connection just accepted from `ip`, or says why not (the caller sends
    /// [`REFUSED`] if the socket takes it at once, and closes). At the total cap, a
    /// connection whose request head is incomplete (the oldest of the source with the most
    /// of them) is told to close and the new one takes its place. Refusals are logged at most once per [`LOG_INTERVAL`].
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Ticket, Refusal> {
        self.counters.accept_pause_ms.store(0, Ordering::Relaxed);
        let mut s = self.slots();
        let from_ip = s.per_ip.get(&ip).copied().unwrap_or(0);
        let refusal = if self.cfg.max_per_ip > 0 && from_ip >= self.cfg.max_per_ip {
            Some(Refusal::PerIp)
        } else if s.total >= self.cfg.max_connections {
            // Room is made only while few connections are still being closed: their
            // descriptors are open until their tasks run, so at most
            // `max_connections + MAX_CLOSING` are open at any time.
            let evicted = if s.closing < MAX_CLOSING {
                s.pick_evicted().and_then(|id| s.remove_pending(id))
            } else {
                None
            };
            match evicted {
                Some((_, close)) => {
                    s.closing += 1;
                    let _ = close.try_send(());
                    self.counters.evicted.fetch_add(1, Ordering::Relaxed);
                    None
                }
                None => Some(Refusal::Total),
            }
        } else {
            None
        };
        if let Some(r) = refusal {
            drop(s);
            self.refused(r, ip);
            return Err(r);
        }
        s.total += 1;
        *s.per_ip.entry(ip).or_insert(0) += 1;
        let id = s.next;
        s.next += 1;
        let (close, closed) = flume::bounded(1);
        s.add_pending(id, ip, close);
        Ok(Ticket {
            admission: self.clone(),
            id,
            ip,
            closed: Some(closed),
            claimed: AtomicBool::new(false),
        })
    }

    fn refused(&self, r: Refusal, ip: IpAddr) {
        let c = match r {
            Refusal::PerIp => &self.counters.refused_per_ip,
            Refusal::Total => &self.counters.refused_total,
        };
        c.fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = REFUSED_LOG.allow() {
            let (total, per_ip) = (self.cfg.max_connections, self.cfg.max_per_ip);
            match r {
                Refusal::PerIp => {
                    info!(%ip, cap = per_ip, suppressed, "connection refused: its source address is at its connection cap")
                }
                Refusal::Total => {
                    warn!(%ip, cap = total, suppressed, "connection refused: the relay is at its connection cap (--max-connections)")
                }
            }
        }
    }

    /// Counts a failed accept, logs it at most once per [`LOG_INTERVAL`] (with the count
    /// of those not logged), and returns how long to pause before accepting again: 10 ms,
    /// doubling up to [`MAX_ACCEPT_PAUSE`] while accepts keep failing.
    pub fn accept_failed(&self, error: &std::io::Error) -> Duration {
        self.counters.accept_errors.fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = ACCEPT_LOG.allow() {
            warn!(%error, suppressed, "accept failed");
        }
        let min = MIN_ACCEPT_PAUSE.as_millis() as u64;
        let max = MAX_ACCEPT_PAUSE.as_millis() as u64;
        let prev = self.counters.accept_pause_ms.load(Ordering::Relaxed);
        let pause = if prev == 0 { min } else { (prev * 2).min(max) };
        self.counters
            .accept_pause_ms
            .store(pause, Ordering::Relaxed);
        Duration::from_millis(pause)
    }

    /// The counters.
    pub fn stats(&self) -> AdmissionStats {
        let (open, pending) = {
            let s = self.slots();
            (s.total as u64, s.pending.len() as u64)
        };
        let c = &self.counters;
        AdmissionStats {
            open,
            pending,
            refused_total: c.refused_total.load(Ordering::Relaxed),
            refused_per_ip: c.refused_per_ip.load(Ordering::Relaxed),
            evicted: c.evicted.load(Ordering::Relaxed),
            upgrade_timeouts: c.upgrade_timeouts.load(Ordering::Relaxed),
            tls_handshake_failures: c.tls_handshake_failures.load(Ordering::Relaxed),
            accept_errors: c.accept_errors.load(Ordering::Relaxed),
        }
    }
}

/// An admitted connection's slot, released when dropped.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    id: u64,
    ip: IpAddr,
    /// Told to close to make room (`None` once the HTTP phase is over: the link keeps its
    /// slot, not this channel).
    closed: Option<flume::Receiver<()>>,
    /// Its request head is complete: it can no longer be closed to make room.
    claimed: AtomicBool,
}

impl Ticket {
    /// Waits until this connection is told to close to make room (it was the oldest with
    /// an incomplete request head at the total cap); never, once claimed.
    async fn evicted(&self) {
        let Some(closed) = &self.closed else {
            return std::future::pending::<()>().await;
        };
        if closed.recv_async().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The request head is complete: from now on the connection keeps its slot (its
    /// answer or handshake is short, under the same deadline, and an agent link is never
    /// closed to make room). `false`: it was told to close meanwhile.
    fn claim(&self) -> bool {
        if !self.claimed.load(Ordering::Relaxed)
            && self.admission.slots().remove_pending(self.id).is_some()
        {
            self.claimed.store(true, Ordering::Relaxed);
        }
        self.claimed.load(Ordering::Relaxed)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.admission.slots();
        // Neither claimed nor pending: it was told to close to make room.
        if !self.claimed.load(Ordering::Relaxed) && s.remove_pending(self.id).is_none() {
            s.closing = s.closing.saturating_sub(1);
            let _ = self.admission.closed_tx.try_send(());
        }
        s.release(self.ip);
    }
}

/// A stream whose first bytes were already read: they are read again first.
#[derive(Debug)]
pub struct Prefixed<S> {
    head: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if this.at < this.head.len() {
            let n = (this.head.len() - this.at).min(buf.len());
            buf[..n].copy_from_slice(&this.head[this.at..this.at + n]);
            this.at += n;
            if this.at == this.head.len() {
                this.head = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(n));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

/// How a connection's HTTP phase ended (short-lived, moved once: not boxed).
#[allow(clippy::large_enum_variant)]
enum HttpPhase<S> {
    /// The client closed, the head was unusable, or an HTTP request was answered.
    Done,
    /// The WebSocket handshake completed: the stream, and what the client sent after its
    /// request head.
    Upgraded(S, Vec<u8>),
    /// The deadline passed.
    TimedOut,
    /// Closed to make room.
    Evicted,
}

/// Reads a request head: `None` if the client closed or failed first.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Option<(Vec<u8>, Route)> {
    let mut head = vec![0u8; 1024];
    let mut len = 0usize;
    loop {
        if len == head.len() {
            let grown = (head.len() * 2).min(http::MAX_HEAD);
            head.resize(grown, 0);
        }
        let n = stream.read(&mut head[len..]).await.ok()?;
        if n == 0 {
            return None;
        }
        len += n;
        if let Some(route) = http::classify(&head[..len]) {
            head.truncate(len);
            return Some((head, route));
        }
    }
}

/// The HTTP phase: the TLS handshake (with `tls`), the head, then an answer (the
/// connection then closed by [`linger::close_after_refusal`] within [`linger::TIME`] of
/// `timer`) or the WebSocket handshake.
async fn http_phase<S, T, D>(
    stream: S,
    tls: Option<&ServerTls>,
    handle: &RelayHandle,
    ticket: &Ticket,
    peer: SocketAddr,
    timer: &T,
) -> HttpPhase<MaybeTls<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: Fn(Duration) -> D,
    D: Future<Output = ()>,
{
    let mut stream = match tls {
        None => MaybeTls::Plain(stream),
        Some(tls) => match tls.accept(stream).await {
            Ok(s) => s,
            Err(e) => {
                ticket
                    .admission
                    .counters
                    .tls_handshake_failures
                    .fetch_add(1, Ordering::Relaxed);
                debug!(%peer, error = %e, "TLS handshake failed");
                return HttpPhase::Done;
            }
        },
    };
    let Some((head, route)) = read_head(&mut stream).await else {
        return HttpPhase::Done;
    };
    if !ticket.claim() {
        return HttpPhase::Evicted;
    }
    if route != Route::WebSocket {
        let snap = match route {
            Route::Healthz | Route::Metrics => handle.snapshot().await,
            _ => None,
        };
        let conns = ticket.admission.stats();
        if stream
            .write_all(&http::answer(
                &route,
                snap.as_ref(),
                &conns,
                handle.discovery().as_deref(),
            ))
            .await
            .is_ok()
        {
            // What the client still sends (a body with its request) is drained for a
            // bounded while, so it reads the answer instead of a reset.
            let how = linger::close_after_refusal(&mut stream, timer(linger::TIME)).await;
            debug!(%peer, ?how, "HTTP request answered");
        }
        return HttpPhase::Done;
    }
    // The handshake reads the request head alone; what followed it in the same reads is
    // the link's first bytes.
    let mut head = head;
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(head.len(), |p| p + 4);
    let early = head.split_off(end);
    let stream = Prefixed {
        head,
        at: 0,
        inner: stream,
    };
    match async_tungstenite::accept_async_with_config(stream, Some(crate::ws::config())).await {
        Ok(ws) => HttpPhase::Upgraded(ws.into_inner().inner, early),
        Err(e) => {
            debug!(%peer, error = %e, "WebSocket handshake failed");
            HttpPhase::Done
        }
    }
}

/// Serves one admitted connection (Nagle already off): its HTTP phase under the
/// admission's `upgrade_timeout` from the accept — with `tls`, the TLS handshake first,
/// under the same deadline; an HTTP request answered, then its connection closed gently
/// ([`linger`]) within the same deadline — then, if it upgraded, the agent link until it
/// ends, after the relay's close frame within [`linger::TIME`] of its closing handshake
/// ([`crate::ws::serve_relay_link`]). `timer` is the binding's: a future that completes
/// the given time after it is made. The ticket's slot is released when this returns.
pub async fn serve_connection<S, T, D>(
    stream: S,
    tls: Option<ServerTls>,
    peer: SocketAddr,
    handle: RelayHandle,
    ticket: Ticket,
    timer: T,
) where
    S: AsyncRead + AsyncWrite + Unpin,
    T: Fn(Duration) -> D,
    D: Future<Output = ()>,
{
    let admission = ticket.admission.clone();
    // The HTTP phase is boxed, and so is the link: the task keeps neither's state while in
    // the other, so an idle agent's task holds the link's state alone (the HTTP phase's,
    // with the TLS handshake and the request head, is several KiB and is freed at the
    // upgrade). In a block of its own so that its result is not kept beside the link.
    let link = {
        let deadline = timer(admission.cfg.upgrade_timeout);
        let phase = Box::pin(crate::race::race(
            crate::race::race(
                http_phase(stream, tls.as_ref(), &handle, &ticket, peer, &timer),
                async {
                    ticket.evicted().await;
                    HttpPhase::Evicted
                },
            ),
            async {
                deadline.await;
                HttpPhase::TimedOut
            },
        ))
        .await;
        match phase {
            HttpPhase::Upgraded(stream, early) => Some(Box::pin(crate::ws::serve_relay_link(
                stream, early, peer, handle, timer,
            ))),
            HttpPhase::TimedOut => {
                admission
                    .counters
                    .upgrade_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                debug!(%peer, "HTTP phase deadline passed: connection closed");
                None
            }
            HttpPhase::Evicted => {
                debug!(%peer, "closed to make room at the connection cap");
                None
            }
            HttpPhase::Done => None,
        }
    };
    drop(tls);
    let mut ticket = ticket;
    ticket.closed = None;
    if let Some(link) = link {
        link.await;
    }
    drop(ticket);
}

/// Why a relay could not start (on either executor).
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

impl RelayError {
    /// The error of a listener that could not bind `addr` (or read its local address).
    pub fn bind(addr: &str) -> impl Fn(std::io::Error) -> RelayError + '_ {
        move |source| RelayError::Bind {
            addr: addr.to_string(),
            source,
        }
    }
}

/// A relay's listener with its service started, whatever the executor: the address it
/// listens on, its scheme, the service's handle and the connection counters.
#[derive(Debug)]
pub struct Listening {
    addr: SocketAddr,
    handle: RelayHandle,
    admission: Arc<Admission>,
    scheme: &'static str,
}

impl Listening {
    /// The relay listening on `addr` with `service` started, admitting with `conns`,
    /// serving TLS (`wss://`) if `tls`; logs the `relay listening` line (with what the
    /// service restored).
    pub fn new(
        addr: SocketAddr,
        service: &RelayService,
        conns: AdmissionConfig,
        tls: bool,
    ) -> Listening {
        let (regs, queued) = service.restored();
        info!(%addr, domain = service.domain(), registered = regs, queued, "relay listening");
        let l = Listening {
            addr,
            handle: service.handle(),
            admission: Admission::new(conns),
            scheme: if tls { "wss" } else { "ws" },
        };
        // The flags were checked (a federating relay serves TLS or names its public URL):
        // an error here is one of the operator's files, said once.
        if let Err(e) = service.publish_discovery(&l.url()) {
            tracing::warn!(error = %e, "the discovery document cannot be served");
        }
        l
    }

    /// The address listened on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `ws://addr`, or `wss://addr` when the relay serves TLS.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// The service's handle (for the connection tasks).
    pub fn handle(&self) -> &RelayHandle {
        &self.handle
    }

    /// The admission of the accept loop.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// The service's current counters (`None` once it has stopped).
    pub async fn snapshot(&self) -> Option<RelaySnapshot> {
        self.handle.snapshot().await
    }

    /// The listener's connection counters.
    pub fn connections(&self) -> AdmissionStats {
        self.admission.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    fn adm(total: usize, per_ip: usize) -> Arc<Admission> {
        Admission::new(AdmissionConfig {
            max_connections: total,
            max_per_ip: per_ip,
            upgrade_timeout: DEFAULT_UPGRADE_TIMEOUT,
        })
    }

    #[test]
    fn default_caps_fit_under_the_descriptor_limit() {
        assert_eq!(default_max_connections(Some(1024)), 896);
        assert_eq!(default_max_connections(Some(256)), 192);
        assert_eq!(default_max_connections(Some(64)), 32);
        assert_eq!(
            default_max_connections(Some(1 << 20)),
            MAX_DEFAULT_CONNECTIONS
        );
        assert_eq!(default_max_connections(None), FALLBACK_MAX_CONNECTIONS);
    }

    #[test]
    fn per_ip_cap_refuses_and_releases() {
        let a = adm(100, 2);
        let t1 = a.admit(ip(2)).unwrap();
        let _t2 = a.admit(ip(2)).unwrap();
        assert_eq!(a.admit(ip(2)).unwrap_err(), Refusal::PerIp);
        let _other = a.admit(ip(3)).unwrap();
        drop(t1);
        let _t3 = a.admit(ip(2)).unwrap();
        let s = a.stats();
        assert_eq!((s.open, s.pending, s.refused_per_ip), (3, 3, 1));
    }

    #[test]
    fn total_cap_closes_the_oldest_http_phase_connection_then_refuses() {
        let a = adm(2, 0);
        let link = a.admit(ip(2)).unwrap();
        assert!(link.claim());
        let old = a.admit(ip(3)).unwrap();
        // Full: the pending one makes room.
        let new = a.admit(ip(4)).unwrap();
        assert!(
            old.closed.as_ref().unwrap().try_recv().is_ok(),
            "the oldest pending is told to close"
        );
        assert_eq!(a.stats().evicted, 1);
        assert_eq!(a.stats().open, 3, "until its task closes it");
        drop(old);
        assert_eq!(a.stats().open, 2);
        assert!(new.claim());
        // Only agent links left: refused.
        assert_eq!(a.admit(ip(5)).unwrap_err(), Refusal::Total);
        assert_eq!(a.stats().refused_total, 1);
        drop(link);
        drop(new);
        let s = a.stats();
        assert_eq!((s.open, s.pending), (0, 0));
    }

    #[test]
    fn room_is_taken_from_the_source_with_the_most_incomplete_heads() {
        let a = adm(4, 0);
        let honest = a.admit(ip(1)).unwrap();
        let heavy: Vec<Ticket> = (0..3).map(|_| a.admit(ip(9)).unwrap()).collect();
        let _new = a.admit(ip(7)).unwrap();
        assert!(
            honest.closed.as_ref().unwrap().try_recv().is_err(),
            "the lone client stays"
        );
        assert!(
            heavy[0].closed.as_ref().unwrap().try_recv().is_ok(),
            "the heavy source's oldest goes"
        );
        assert!(heavy[1].closed.as_ref().unwrap().try_recv().is_err());
    }

    #[test]
    fn an_evicted_ticket_cannot_upgrade() {
        let a = adm(1, 0);
        let old = a.admit(ip(2)).unwrap();
        let _new = a.admit(ip(3)).unwrap();
        assert!(!old.claim());
        drop(old);
        assert_eq!(a.stats().open, 1);
    }

    #[test]
    fn few_connections_are_being_closed_at_once() {
        let cap = MAX_CLOSING + 1;
        let mut held: Vec<Ticket> = Vec::new();
        let a = adm(cap, 0);
        for i in 0..cap + MAX_CLOSING {
            held.push(a.admit(ip(i as u8)).unwrap());
        }
        assert_eq!(a.stats().evicted as usize, MAX_CLOSING);
        assert_eq!(a.stats().open as usize, cap + MAX_CLOSING);
        assert!(futures_util::FutureExt::now_or_never(a.room()).is_none());
        assert_eq!(a.admit(ip(200)).unwrap_err(), Refusal::Total);
        // The closed ones end: room again.
        drop(held.drain(..1));
        assert!(futures_util::FutureExt::now_or_never(a.room()).is_some());
        drop(held.drain(..MAX_CLOSING - 1));
        let s = a.stats();
        assert_eq!((s.open as usize, s.pending as usize), (cap, cap));
        held.push(a.admit(ip(201)).unwrap());
        assert_eq!(a.stats().evicted as usize, MAX_CLOSING + 1);
    }

    #[test]
    fn accept_pause_doubles_and_resets() {
        let a = adm(1, 0);
        let e = std::io::Error::other("EMFILE");
        let pauses: Vec<u128> = (0..9).map(|_| a.accept_failed(&e).as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        let _t = a.admit(ip(2)).unwrap();
        assert_eq!(a.accept_failed(&e).as_millis(), 10);
        assert_eq!(a.stats().accept_errors, 10);
    }

    #[test]
    fn prefixed_replays_the_head_first() {
        let inner = futures_util::io::Cursor::new(b" world".to_vec());
        let mut p = Prefixed {
            head: b"hello".to_vec(),
            at: 0,
            inner,
        };
        let mut out = Vec::new();
        futures_util::FutureExt::now_or_never(p.read_to_end(&mut out))
            .unwrap()
            .unwrap();
        assert_eq!(out, b"hello world");
    }
}

#[cfg(test)]
mod sizes {
    use super::*;
    use crate::relay_service::{RelayService, ServiceConfig};
    use async_tungstenite::tokio::TokioAdapter;

    /// What an idle agent's connection keeps in the relay's tasks: the link's future (boxed
    /// at the upgrade) and the connection task's own. A budget (docs/relay.md,
    /// "Performance"), measured in the test build: an `async fn` that takes futures by
    /// value keeps them twice, a large inline variant costs every connection.
    #[test]
    fn an_idle_connections_task_state_stays_within_its_budget() {
        let svc = RelayService::start(ServiceConfig::default()).unwrap();
        let h = svc.handle();
        let adm = Admission::new(AdmissionConfig::default());
        let t = adm.admit(IpAddr::from([127, 0, 0, 1])).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
            let s = tokio::net::TcpStream::connect(l.local_addr().unwrap())
                .await
                .unwrap();
            let link = crate::ws::serve_relay_link(
                MaybeTls::Plain(TokioAdapter::new(s)),
                Vec::new(),
                peer,
                h.clone(),
                tokio::time::sleep,
            );
            let link_bytes = std::mem::size_of_val(&link);
            drop(link);
            let s = tokio::net::TcpStream::connect(l.local_addr().unwrap())
                .await
                .unwrap();
            let conn = serve_connection(
                TokioAdapter::new(s),
                None,
                peer,
                h.clone(),
                t,
                tokio::time::sleep,
            );
            let conn_bytes = std::mem::size_of_val(&conn);
            assert!(link_bytes <= 1024, "the link's future: {link_bytes} bytes");
            assert!(
                conn_bytes <= 512,
                "the connection's future: {conn_bytes} bytes"
            );
        });
        drop(svc);
    }
}
