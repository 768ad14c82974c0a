//! `a2acp bench federation`: cross-domain routing against same-domain routing, in one run.
//!
//! Two federating relays run as child processes (`a2acp relay --federate …`, TLS with a
//! throwaway private CA made for the run): a.example and b.example. b.example's relay is
//! reached only through a TCP proxy in this process (its discovery document names the
//! proxy as its federation endpoint), so the bench can cut the link between the relays
//! without stopping either: a partition. Senders are on a.example; the same senders send
//! to recipients on a.example (same-domain) and on b.example (cross-domain).
//!
//! Figures, each cross-domain against same-domain:
//! - p50/p99 from a `send` leaving the sender to the `deliver` reaching the recipient, at
//!   `--rate` packets/s (open loop, default 1 000);
//! - CPU µs per routed packet on each relay (from `/proc`, by thread);
//! - the time to deliver a `--backlog`-packet backlog (default 1 000): cross-domain, sent
//!   during a `--partition` (default 60 s) of the link and timed from the link's healing;
//!   same-domain, sent to recipients offline and timed from their reconnection.
//!
//! Every envelope is sealed and signed before its phase starts, so the figures measure the
//! relays, not the load generator (which still shares the machine's cores with them).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2acp_core::crypto::{Direction, IdentityKey, ThreadSession};
use a2acp_core::link::{challenge_signed_bytes, ClientFrame, RelayFrame, AUTH_LABEL};
use a2acp_core::Address;
use async_tungstenite::tungstenite::{Message, Utf8Bytes};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Child;
use tokio::sync::watch;

use super::relay::percentile;
use super::usage::{CpuMark, CpuUse};
use super::*;

/// `a2acp bench federation` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct FederationBenchArgs {
    /// Total packets offered per second, in each phase.
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Seconds of measurement per phase.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Sending agents (each sends rate/senders per second: keep that under a remote
    /// sender's rate limit, 50/s).
    #[arg(long, default_value_t = 40)]
    pub senders: usize,
    /// Plaintext bytes per packet.
    #[arg(long, default_value_t = 512)]
    pub payload: usize,
    /// Packets of the backlog.
    #[arg(long, default_value_t = 1000)]
    pub backlog: usize,
    /// Seconds the link between the relays is cut while the backlog builds up.
    #[arg(long, default_value_t = 60)]
    pub partition: u64,
}

/// The throwaway PKI of a run ([`a2acp_runtime::dev_ca`]): the CA and a relay certificate
/// for 127.0.0.1, as PEM files in `dir`.
fn pki(dir: &Path) -> Result<(String, String, String), BenchError> {
    let hosts = ["127.0.0.1".to_string(), "localhost".to_string()];
    let f = a2acp_runtime::dev_ca::make(dir, &hosts).map_err(|e| e.to_string())?;
    let s = |p: &Path| p.display().to_string();
    Ok((s(&f.ca), s(&f.cert), s(&f.key)))
}

/// Starts `a2acp relay` with `args`: the child and the URL its banner prints.
async fn spawn_relay(args: &[String]) -> Result<(Child, String), BenchError> {
    let mut all = vec!["relay"];
    all.extend(args.iter().map(String::as_str));
    super::relay::spawn_child(&all).await
}

/// A TCP proxy in front of b.example's relay: its port, and the switch that cuts it
/// (`true`: every connection through it is closed, new ones are closed at once).
async fn proxy() -> Result<(u16, watch::Sender<bool>, watch::Sender<u16>), BenchError> {
    let l = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    let (cut_tx, cut_rx) = watch::channel(false);
    let (to_tx, to_rx) = watch::channel(0u16);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let mut cut = cut_rx.clone();
            let target = *to_rx.borrow();
            if *cut.borrow() || target == 0 {
                continue;
            }
            tokio::spawn(async move {
                let Ok(mut t) = TcpStream::connect(("127.0.0.1", target)).await else {
                    return;
                };
                let _ = s.set_nodelay(true);
                let _ = t.set_nodelay(true);
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut s, &mut t) => {}
                    _ = cut.wait_for(|c| *c) => {}
                }
            });
        }
    });
    Ok((port, cut_tx, to_tx))
}

fn seed(domain: u8, i: usize) -> [u8; 32] {
    let mut s = [domain; 32];
    s[..8].copy_from_slice(&(i as u64).to_le_bytes());
    s
}

fn address(name: &str, i: usize, domain: &str) -> Result<Address, BenchError> {
    Address::parse(&format!("agent:{name}{i}@{domain}")).map_err(|e| e.to_string())
}

type Sink = SplitSink<crate::ws::Ws, Message>;
type Source = SplitStream<crate::ws::Ws>;

async fn send_frame(ws: &mut crate::ws::Ws, f: &ClientFrame) -> Result<(), BenchError> {
    let t = Utf8Bytes::try_from(f.to_bytes()).map_err(|e| e.to_string())?;
    ws.send(Message::Text(t)).await.map_err(|e| e.to_string())
}

/// Connects to `url` (trusting `tls`) as `address` with `id`: registers it, or
/// authenticates it when `auth` (registered before).
async fn connect(
    url: &str,
    tls: &a2acp_runtime::tls::ClientTls,
    id: &IdentityKey,
    address: &Address,
    auth: bool,
) -> Result<crate::ws::Ws, BenchError> {
    let mut ws = crate::ws::connect_with(url, Some(tls))
        .await
        .map_err(|e| e.to_string())?;
    loop {
        let m = ws
            .next()
            .await
            .ok_or("closed")?
            .map_err(|e| e.to_string())?;
        let Message::Text(t) = m else { continue };
        match RelayFrame::from_bytes(t.as_bytes()).map_err(|e| e.to_string())? {
            RelayFrame::Challenge { nonce, domain, .. } if auth => {
                let ts = crate::now_ms();
                let msg = challenge_signed_bytes(AUTH_LABEL, &nonce, &domain, ts, address, None);
                let f = ClientFrame::Auth {
                    address: address.clone(),
                    ts,
                    sig: id.sign(&msg),
                };
                send_frame(&mut ws, &f).await?;
            }
            RelayFrame::Challenge { nonce, domain, .. } => {
                let f = register_frame(id, address, &nonce, &domain);
                send_frame(&mut ws, &f).await?;
            }
            RelayFrame::AuthOk { .. } => return Ok(ws),
            RelayFrame::Error { message, .. } => return Err(message),
            _ => {}
        }
    }
}

/// Envelopes of one phase: `count` `send` frames, round robin over the senders, each to
/// a recipient of `to` (round robin), each on a thread of its own; and the envelope
/// signature prefix of each (what identifies its `deliver`).
struct Batch {
    /// Per sender: its frames, with the index of each in the batch.
    frames: Vec<Vec<(usize, Utf8Bytes)>>,
    keys: HashMap<[u8; 11], usize>,
    count: usize,
}

const SIG_MARK: &[u8] = b"\"sig\":\"";

fn sig_key(frame: &[u8]) -> Option<[u8; 11]> {
    let i = frame.windows(SIG_MARK.len()).rposition(|w| w == SIG_MARK)? + SIG_MARK.len();
    frame.get(i..i + 11)?.try_into().ok()
}

fn batch(
    tag: &str,
    senders: &[(IdentityKey, Address)],
    to: &[(IdentityKey, Address)],
    count: usize,
    payload: usize,
) -> Batch {
    let body = vec![b'x'; payload];
    let mut frames = vec![Vec::new(); senders.len()];
    let mut keys = HashMap::with_capacity(count);
    for n in 0..count {
        let s = n % senders.len();
        let (sid, saddr) = &senders[s];
        let (rid, raddr) = &to[n % to.len()];
        let mut sess = ThreadSession::new(seed(9, n));
        let Ok(env) = sess.seal(
            sid,
            saddr,
            raddr,
            rid.public_ref(),
            &format!("thr_fedbench_{tag}_{n}"),
            Direction::FromInitiator,
            &body,
        ) else {
            continue;
        };
        let bytes = ClientFrame::Send {
            seq: n as u64 + 1,
            env,
        }
        .to_bytes();
        if let Some(k) = sig_key(&bytes) {
            keys.insert(k, n);
        }
        if let Ok(t) = Utf8Bytes::try_from(bytes) {
            frames[s].push((n, t));
        }
    }
    Batch {
        frames,
        keys,
        count,
    }
}

/// The batch being measured: its packets by signature prefix, and their clock.
type Measured = Option<(Arc<HashMap<[u8; 11], usize>>, Arc<Clock>)>;
type Current = watch::Sender<Measured>;

/// Send and delivery times (ns since `start`) of one batch's packets.
struct Clock {
    start: Instant,
    sent: Vec<AtomicU64>,
    delivered: Vec<AtomicU64>,
    count: AtomicU64,
    last: AtomicU64,
}

impl Clock {
    fn new(n: usize) -> Arc<Clock> {
        Arc::new(Clock {
            start: Instant::now(),
            sent: (0..n).map(|_| AtomicU64::new(0)).collect(),
            delivered: (0..n).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            last: AtomicU64::new(0),
        })
    }
    fn ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
    /// The first delivery at or after `from` (ns since `start`), if any.
    fn first_after(&self, from: u64) -> Option<u64> {
        self.delivered
            .iter()
            .map(|d| d.load(Ordering::Relaxed))
            .filter(|&d| d >= from)
            .min()
    }

    fn latencies(&self) -> Vec<u64> {
        self.sent
            .iter()
            .zip(&self.delivered)
            .filter_map(|(s, d)| {
                let (s, d) = (s.load(Ordering::Relaxed), d.load(Ordering::Relaxed));
                (d > 0).then(|| d.saturating_sub(s))
            })
            .collect()
    }
}

/// A recipient's reader: acknowledges every `deliver`, answers pings, and stamps the
/// deliveries of the batch `keys` in `clock` (the current one, replaced per phase).
fn read_deliveries(
    mut source: Source,
    sink: Arc<tokio::sync::Mutex<Sink>>,
    current: watch::Receiver<Measured>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(Ok(m)) = source.next().await {
            let Message::Text(t) = m else { continue };
            let b = t.as_bytes();
            let reply = if b.starts_with(b"{\"t\":\"deliver\"") {
                if let Some((keys, clock)) = current.borrow().as_ref() {
                    if let Some(&n) = sig_key(b).and_then(|k| keys.get(&k)) {
                        let now = clock.ns();
                        if clock.delivered[n].swap(now, Ordering::Relaxed) == 0 {
                            clock.count.fetch_add(1, Ordering::Relaxed);
                            clock.last.fetch_max(now, Ordering::Relaxed);
                        }
                    }
                }
                Some(format!(
                    "{{\"t\":\"ack\",\"id\":{}}}",
                    parse_num_after(b, b"\"id\":")
                ))
            } else if b.starts_with(b"{\"t\":\"ping\"") {
                Some(format!(
                    "{{\"t\":\"pong\",\"n\":{}}}",
                    parse_num_after(b, b"\"n\":")
                ))
            } else {
                None
            };
            if let Some(r) = reply {
                if sink
                    .lock()
                    .await
                    .send(Message::Text(r.into()))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        }
    })
}

fn parse_num_after(b: &[u8], key: &[u8]) -> u64 {
    let Some(i) = b.windows(key.len()).position(|w| w == key) else {
        return 0;
    };
    b[i + key.len()..]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .fold(0u64, |n, c| n * 10 + u64::from(c - b'0'))
}

/// A connected agent the bench sends from: its sink, and a reader draining what the relay
/// says to it (`accepted`, pings).
struct Sender {
    sink: Arc<tokio::sync::Mutex<Sink>>,
}

fn sender(ws: crate::ws::Ws) -> Sender {
    let (sink, mut source) = StreamExt::split(ws);
    let sink = Arc::new(tokio::sync::Mutex::new(sink));
    let s2 = sink.clone();
    tokio::spawn(async move {
        while let Some(Ok(m)) = source.next().await {
            let Message::Text(t) = m else { continue };
            let b = t.as_bytes();
            if b.starts_with(b"{\"t\":\"ping\"") {
                let r = format!("{{\"t\":\"pong\",\"n\":{}}}", parse_num_after(b, b"\"n\":"));
                if s2.lock().await.send(Message::Text(r.into())).await.is_err() {
                    break;
                }
            }
        }
    });
    Sender { sink }
}

/// Offers `b`'s packets at `rate` per second in total (open loop), stamping each send.
async fn offer(senders: &[Sender], b: &Batch, clock: &Arc<Clock>, rate: u64) {
    let per_sender = Duration::from_secs_f64(senders.len() as f64 / rate.max(1) as f64);
    let mut tasks = Vec::new();
    for (i, (s, frames)) in senders.iter().zip(&b.frames).enumerate() {
        let (sink, frames, clock) = (s.sink.clone(), frames.clone(), clock.clone());
        let offset = per_sender.mul_f64((i as f64 * 0.618).fract());
        tasks.push(tokio::spawn(async move {
            let mut tick =
                tokio::time::interval_at(tokio::time::Instant::now() + offset, per_sender);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for (n, f) in frames {
                tick.tick().await;
                clock.sent[n].store(clock.ns(), Ordering::Relaxed);
                if sink.lock().await.send(Message::Text(f)).await.is_err() {
                    break;
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Waits until every packet of `clock` is delivered, or `limit` passes: whether all were.
async fn all_delivered(clock: &Clock, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while clock.count.load(Ordering::Relaxed) < clock.sent.len() as u64 {
        if Instant::now() > end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

/// Figures of one latency phase.
struct Phase {
    p50_ms: f64,
    p99_ms: f64,
    delivered: u64,
    offered: usize,
    cpu_a: CpuUse,
    cpu_b: CpuUse,
}

async fn latency_phase(
    senders: &[Sender],
    b: Batch,
    current: &Current,
    rate: u64,
    pids: (u32, u32),
) -> Phase {
    let clock = Clock::new(b.count);
    current.send_replace(Some((Arc::new(b.keys.clone()), clock.clone())));
    let (ma, mb) = (CpuMark::new(pids.0), CpuMark::new(pids.1));
    offer(senders, &b, &clock, rate).await;
    all_delivered(&clock, Duration::from_secs(30)).await;
    let (cpu_a, cpu_b) = (ma.since(), mb.since());
    let mut lat = clock.latencies();
    Phase {
        p50_ms: percentile(&mut lat, 0.5),
        p99_ms: percentile(&mut lat, 0.99),
        delivered: clock.count.load(Ordering::Relaxed),
        offered: b.count,
        cpu_a,
        cpu_b,
    }
}

fn ratio(x: f64, base: f64) -> String {
    if base > 0.0 && x.is_finite() {
        format!("{:.2}×", x / base)
    } else {
        "n/a".into()
    }
}

/// Runs `a2acp bench federation`.
pub async fn run(a: FederationBenchArgs) -> Result<(), BenchError> {
    let dir = tempfile::Builder::new()
        .prefix("a2acp-fedbench-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let (ca, cert, key) = pki(dir.path())?;
    let tls =
        a2acp_runtime::tls::ClientTls::new(Some(Path::new(&ca))).map_err(|e| e.to_string())?;
    let n = a.senders.max(1);
    let per_phase = (a.rate * a.duration.max(1)) as usize;
    println!(
        "a2acp bench federation: {n} senders on a.example, {} packets/s offered for {} s per phase, {} B payload; backlog {} packets, partition {} s",
        a.rate, a.duration, a.payload, a.backlog, a.partition
    );

    // b.example behind the proxy; a.example routes to the proxy.
    let (pport, cut, target) = proxy().await?;
    let proxied = format!("wss://127.0.0.1:{pport}");
    let common = |domain: &str, data: &str| -> Vec<String> {
        [
            "--listen",
            "127.0.0.1:0",
            "--domain",
            domain,
            "--data",
            data,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--ca",
            &ca,
        ]
        .iter()
        .chain(super::relay::UNLIMITED)
        .map(|s| s.to_string())
        .collect()
    };
    let data_a = dir.path().join("a").display().to_string();
    let data_b = dir.path().join("b").display().to_string();
    let mut args_a = common("a.example", &data_a);
    args_a.extend(["--federate".into(), format!("b.example={proxied}")]);
    let (mut ra, url_a) = spawn_relay(&args_a).await?;
    let mut args_b = common("b.example", &data_b);
    args_b.extend([
        "--federate".into(),
        format!("a.example={url_a}"),
        "--public-url".into(),
        proxied.clone(),
    ]);
    let (mut rb, url_b) = spawn_relay(&args_b).await?;
    let bport: u16 = url_b
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("no port in {url_b}"))?;
    target.send_replace(bport);
    let pids = (ra.id().unwrap_or(0), rb.id().unwrap_or(0));

    // The agents: senders on a.example; recipients on each domain, and recipients on
    // a.example that go offline for the same-domain backlog.
    let ids = |d: u8, name: &str, domain: &str, k: usize| {
        (0..k)
            .map(|i| {
                Ok((
                    IdentityKey::from_seed(seed(d, i)),
                    address(name, i, domain)?,
                ))
            })
            .collect::<Result<Vec<_>, BenchError>>()
    };
    let senders_ids = ids(1, "s", "a.example", n)?;
    let local_ids = ids(2, "r", "a.example", n)?;
    let remote_ids = ids(3, "r", "b.example", n)?;
    let offline_ids = ids(4, "o", "a.example", n)?;
    let current: Current = watch::channel(None).0;
    let mut senders = Vec::new();
    for (id, ad) in &senders_ids {
        senders.push(sender(connect(&url_a, &tls, id, ad, false).await?));
    }
    let mut readers = Vec::new();
    for (url, set) in [(&url_a, &local_ids), (&url_b, &remote_ids)] {
        for (id, ad) in set {
            let (sink, source) = StreamExt::split(connect(url, &tls, id, ad, false).await?);
            readers.push(read_deliveries(
                source,
                Arc::new(tokio::sync::Mutex::new(sink)),
                current.subscribe(),
            ));
        }
    }
    for (id, ad) in &offline_ids {
        // Registered, then gone: their packets wait on a.example.
        let mut ws = connect(&url_a, &tls, id, ad, false).await?;
        let _ = ws.close(None).await;
    }
    println!("  relays up, {} agents connected", 3 * n);

    // Warm-up: the link between the relays is dialled, keys pinned.
    let t = Instant::now();
    let w = batch("warm", &senders_ids, &remote_ids, n * 2, a.payload);
    let warm = latency_phase(&senders, w, &current, a.rate, pids).await;
    if warm.delivered < warm.offered as u64 {
        return Err(format!(
            "warm-up: {} of {} cross-domain packets delivered",
            warm.delivered, warm.offered
        ));
    }
    println!("  link up and warm in {} ms", t.elapsed().as_millis());

    let t = Instant::now();
    let (same_b, cross_b) = tokio::task::spawn_blocking({
        let (s, l, r, p) = (
            senders_ids.clone(),
            local_ids.clone(),
            remote_ids.clone(),
            a.payload,
        );
        move || {
            (
                batch("same", &s, &l, per_phase, p),
                batch("cross", &s, &r, per_phase, p),
            )
        }
    })
    .await
    .map_err(|e| e.to_string())?;
    println!(
        "  built {} signed, encrypted envelopes in {} ms",
        2 * per_phase,
        t.elapsed().as_millis()
    );
    let same = latency_phase(&senders, same_b, &current, a.rate, pids).await;
    let cross = latency_phase(&senders, cross_b, &current, a.rate, pids).await;
    let us = |c: &CpuUse, d: u64| c.server_us_per(d);
    println!(
        "  same-domain:  {}/{} delivered · p50 {:.2} ms · p99 {:.2} ms · a.example {:.1} µs CPU per packet",
        same.delivered,
        same.offered,
        same.p50_ms,
        same.p99_ms,
        us(&same.cpu_a, same.delivered)
    );
    println!(
        "  cross-domain: {}/{} delivered · p50 {:.2} ms · p99 {:.2} ms · a.example {:.1} + b.example {:.1} µs CPU per packet",
        cross.delivered,
        cross.offered,
        cross.p50_ms,
        cross.p99_ms,
        us(&cross.cpu_a, cross.delivered),
        us(&cross.cpu_b, cross.delivered)
    );
    println!(
        "    ratios: p50 {} · p99 {} · CPU per packet: a.example {} · b.example {} · both relays {}",
        ratio(cross.p50_ms, same.p50_ms),
        ratio(cross.p99_ms, same.p99_ms),
        ratio(
            us(&cross.cpu_a, cross.delivered),
            us(&same.cpu_a, same.delivered)
        ),
        ratio(
            us(&cross.cpu_b, cross.delivered),
            us(&same.cpu_a, same.delivered)
        ),
        ratio(
            us(&cross.cpu_a, cross.delivered) + us(&cross.cpu_b, cross.delivered),
            us(&same.cpu_a, same.delivered)
        ),
    );
    println!(
        "    a.example, cross-domain: {}",
        cross.cpu_a.line(cross.delivered, "packet")
    );
    println!(
        "    b.example, cross-domain: {}",
        cross.cpu_b.line(cross.delivered, "packet")
    );

    // The same-domain backlog: recipients offline, then back.
    let bl = batch(
        "backlog_same",
        &senders_ids,
        &offline_ids,
        a.backlog,
        a.payload,
    );
    let clock = Clock::new(bl.count);
    current.send_replace(Some((Arc::new(bl.keys.clone()), clock.clone())));
    offer(&senders, &bl, &clock, a.rate).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let back = clock.ns();
    for (id, ad) in &offline_ids {
        let (sink, source) = StreamExt::split(connect(&url_a, &tls, id, ad, true).await?);
        readers.push(read_deliveries(
            source,
            Arc::new(tokio::sync::Mutex::new(sink)),
            current.subscribe(),
        ));
    }
    let ok = all_delivered(&clock, Duration::from_secs(120)).await;
    let last = clock.last.load(Ordering::Relaxed);
    let same_ms = last.saturating_sub(back) as f64 / 1e6;
    let same_drain = last.saturating_sub(clock.first_after(back).unwrap_or(last)) as f64 / 1e6;
    println!(
        "  backlog, same-domain: {} packets to recipients offline, {}/{} delivered {:.0} ms after they reconnected ({:.0} ms from the first delivery to the last){}",
        bl.count,
        clock.count.load(Ordering::Relaxed),
        bl.count,
        same_ms,
        same_drain,
        if ok { "" } else { " (gave up after 120 s)" }
    );

    // The cross-domain backlog: the link cut for `partition` seconds.
    let bl = batch(
        "backlog_cross",
        &senders_ids,
        &remote_ids,
        a.backlog,
        a.payload,
    );
    let clock = Clock::new(bl.count);
    current.send_replace(Some((Arc::new(bl.keys.clone()), clock.clone())));
    cut.send_replace(true);
    let cut_at = Instant::now();
    offer(&senders, &bl, &clock, a.rate).await;
    let during = clock.count.load(Ordering::Relaxed);
    let left = Duration::from_secs(a.partition).saturating_sub(cut_at.elapsed());
    tokio::time::sleep(left).await;
    let healed = clock.ns();
    cut.send_replace(false);
    let limit = Duration::from_secs(600);
    let ok = all_delivered(&clock, limit).await;
    let last = clock.last.load(Ordering::Relaxed);
    let cross_ms = last.saturating_sub(healed) as f64 / 1e6;
    let first = clock.first_after(healed).unwrap_or(last);
    let (wait_ms, cross_drain) = (
        first.saturating_sub(healed) as f64 / 1e6,
        last.saturating_sub(first) as f64 / 1e6,
    );
    println!(
        "  backlog, cross-domain: {} packets sent during a {} s partition ({during} delivered during it), {}/{} delivered {:.0} ms after it healed: the first after {:.0} ms (until a dial got through), then {:.0} ms to the last{}",
        bl.count,
        a.partition,
        clock.count.load(Ordering::Relaxed),
        bl.count,
        cross_ms,
        wait_ms,
        cross_drain,
        if ok { "" } else { " (gave up after 600 s)" }
    );
    println!(
        "    ratios: {} the same-domain backlog's time in all; {} its time from the first delivery to the last",
        ratio(cross_ms, same_ms),
        ratio(cross_drain, same_drain)
    );

    drop(senders);
    for r in readers {
        r.abort();
    }
    let _ = ra.start_kill();
    let _ = rb.start_kill();
    let _ = ra.wait().await;
    let _ = rb.wait().await;
    Ok(())
}
