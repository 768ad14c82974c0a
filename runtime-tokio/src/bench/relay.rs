//! `a2acp bench relay`: N authenticated agents on loopback send signed, encrypted packets
//! to random peers through a real relay (a child process: `a2acp relay`, so the load
//! generator's memory and threads are not counted as the relay's); then the same load
//! through a minimal WebSocket forwarder with no protocol at all (`a2acp bench forwarder`,
//! also a child process) — the stack's limit — and the ratio of the two.
//!
//! Besides wall-clock rates, each run reports the CPU time the server process spent per
//! message (from `/proc`, by thread: I/O tasks, verifiers, state machine, committer) and
//! the load generator's own CPU: on a shared or small machine the generator competes with
//! the server for the same cores, and CPU per message is the figure that does not depend
//! on what else runs.
//!
//! Every envelope is sealed and signed before the clock starts, and every frame is
//! serialised in advance, so the figures measure the relay, not the load generator (which
//! still shares the machine's cores with it). Latency is from a packet's `send` leaving
//! the sender to its `deliver` reaching the recipient (each pre-built frame keeps a queue
//! of its send times: a frame is sent again before its previous delivery arrives).
//! Without `--rate` each agent keeps `--window` packets in flight (closed loop, maximum
//! throughput); with `--rate` the packets are offered at that total rate (open loop).

use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2acp_core::crypto::{Direction, IdentityKey, ThreadSession};
use a2acp_core::link::{challenge_signed_bytes, ClientFrame, RelayFrame, REGISTER_LABEL};
use a2acp_core::Address;
use async_tungstenite::tungstenite::{Message, Utf8Bytes};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::forwarder::drive_forwarder;
use super::usage::{rss_kib, CpuMark};
use super::*;

/// Benchmark arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Authenticated agents sending.
    #[arg(long, default_value_t = 1000)]
    pub agents: usize,
    /// Seconds of measurement (after one second of warm-up).
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Plaintext bytes per packet.
    #[arg(long, default_value_t = 2048)]
    pub payload: usize,
    /// Total packets offered per second (open loop); omitted: as fast as possible.
    #[arg(long)]
    pub rate: Option<u64>,
    /// Packets in flight per agent in closed loop.
    #[arg(long, default_value_t = 8)]
    pub window: usize,
    /// Also connect this many idle authenticated agents and report the relay's memory per
    /// connection.
    #[arg(long, default_value_t = 0)]
    pub idle: usize,
    /// The relay's commit durability: full or normal.
    #[arg(long, default_value = "full")]
    pub sync: String,
    /// Skip the bare forwarder run.
    #[arg(long)]
    pub no_baseline: bool,
    /// Percentage of the agents (at most 99) that register, then disconnect and stay
    /// offline for the whole run: packets to them are queued, never delivered
    /// (queue-heavy).
    #[arg(long, default_value_t = 0)]
    pub offline: u32,
    /// Print the growth table instead of one run: CPU per packet and latency with 100,
    /// 1,000 and 10,000 agents connected, and with 1 %, 10 % and 50 % of 1,000 agents
    /// offline, open loop at `--rate` (default 2,000 packets/s); each case on a fresh
    /// relay, no forwarder.
    #[arg(long)]
    pub growth: bool,
}

pub(super) struct Stats {
    pub(super) delivered: AtomicU64,
    /// Packets the relay accepted while measuring (relay runs only).
    pub(super) accepted: AtomicU64,
    pub(super) measuring: AtomicBool,
    pub(super) start: Instant,
}

impl Stats {
    pub(super) fn ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

/// Figures of one run.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Packets delivered per second.
    pub per_sec: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Packets delivered while measuring.
    pub delivered: u64,
    /// Packets accepted (routed) while measuring; 0 for the forwarder.
    pub accepted: u64,
    /// CPU spent while measuring.
    pub cpu: CpuUse,
}

pub(super) fn percentile(v: &mut [u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1e6
}

/// Starts this binary with `args` (a relay, or a bench child that prints like one): the
/// child and the `ws://` or `wss://` URL its first line names.
pub(super) async fn spawn_child(args: &[&str]) -> Result<(Child, String), BenchError> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // A profiler to run the child under (`A2ACP_BENCH_WRAP=heaptrack`, say): its own
    // lines before the child's are skipped.
    let mut cmd = match std::env::var("A2ACP_BENCH_WRAP") {
        Ok(w) if !w.trim().is_empty() => {
            let mut words = w.split_whitespace();
            let mut c = Command::new(words.next().unwrap_or_default());
            c.args(words).arg(exe);
            c
        }
        _ => Command::new(exe),
    };
    let mut child = cmd
        .args(args)
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {args:?}: {e}"))?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(out).lines();
    let first_url = async {
        let mut skipped = 0;
        loop {
            let line = lines
                .next_line()
                .await
                .map_err(|e| e.to_string())?
                .ok_or("the child exited")?;
            if let Some(url) = line
                .split_whitespace()
                .find(|w| w.starts_with("ws://") || w.starts_with("wss://"))
            {
                return Ok::<_, String>(url.trim_end_matches([',', '.', ')']).to_string());
            }
            skipped += 1;
            if skipped > 20 {
                return Err(format!(
                    "no URL in the child's first lines (last: `{line}`)"
                ));
            }
        }
    };
    let url = tokio::time::timeout(Duration::from_secs(20), first_url)
        .await
        .map_err(|_| "the child did not start in 20 s".to_string())??;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, url))
}

/// Connections per loopback source address: below the 28,000-odd ephemeral ports Linux
/// gives one (source, destination) pair by default.
const PER_SOURCE: usize = 20_000;

/// A WebSocket to the relay at `url` (plain `ws://` on loopback) from source address
/// 127.0.0.`2 + i / PER_SOURCE` (all of 127.0.0.0/8 is loopback on Linux), so that a
/// hundred thousand agents do not run out of one source's ephemeral ports.
async fn connect_from(url: &str, i: usize) -> Result<crate::ws::Ws, BenchError> {
    let (host, port) = a2acp_runtime::config::relay_url(url)?;
    let relay: std::net::SocketAddr = format!("{host}:{port}")
        .parse()
        .map_err(|e| format!("{url}: {e}"))?;
    let octet = u8::try_from(2 + i / PER_SOURCE).map_err(|_| "too many agents")?;
    let sock = tokio::net::TcpSocket::new_v4().map_err(|e| e.to_string())?;
    sock.bind(std::net::SocketAddr::from(([127, 0, 0, octet], 0)))
        .map_err(|e| format!("bind 127.0.0.{octet}: {e}"))?;
    let tcp = tokio::time::timeout(Duration::from_secs(10), sock.connect(relay))
        .await
        .map_err(|_| format!("connecting to {url} timed out"))?
        .map_err(|e| format!("connect to {url}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    a2acp_runtime::ws::connect_over(url, async_tungstenite::tokio::TokioAdapter::new(tcp), None)
        .await
        .map_err(|e| e.to_string())
}

pub(super) async fn register(url: &str, i: usize) -> Result<crate::ws::Ws, BenchError> {
    let mut ws = connect_from(url, i).await?;
    let id = IdentityKey::from_seed(seed(i));
    let addr = address(i);
    loop {
        let m = ws
            .next()
            .await
            .ok_or("closed")?
            .map_err(|e| e.to_string())?;
        let Message::Text(t) = m else { continue };
        match RelayFrame::from_bytes(t.as_bytes()).map_err(|e| e.to_string())? {
            RelayFrame::Challenge { nonce, domain, .. } => {
                let f = register_frame(&id, &addr, &nonce, &domain);
                ws.send(Message::Text(
                    Utf8Bytes::try_from(f.to_bytes()).map_err(|e| e.to_string())?,
                ))
                .await
                .map_err(|e| e.to_string())?;
            }
            RelayFrame::AuthOk { .. } => return Ok(ws),
            RelayFrame::Error { message, .. } => return Err(message),
            _ => {}
        }
    }
}

/// A `register` frame for `address` with identity `id`, answering the challenge `nonce`
/// of `domain`, signed now.
pub(crate) fn register_frame(
    id: &IdentityKey,
    address: &Address,
    nonce: &[u8; 32],
    domain: &str,
) -> ClientFrame {
    let ts = crate::now_ms();
    let key = id.public().to_bytes();
    let msg = challenge_signed_bytes(REGISTER_LABEL, nonce, domain, ts, address, Some(&key));
    ClientFrame::Register {
        address: address.clone(),
        key,
        ts,
        sig: id.sign(&msg),
    }
}

fn seed(i: usize) -> [u8; 32] {
    let mut s = [7u8; 32];
    s[..8].copy_from_slice(&(i as u64).to_le_bytes());
    s
}

fn address(i: usize) -> Address {
    Address::parse(&format!("agent:bench{i}@localhost")).unwrap_or_else(|_| unreachable!())
}

/// The pre-built frames of one agent and the sig-prefix → slot map entries.
pub(super) struct Prebuilt {
    frames: Vec<Utf8Bytes>,
    keys: Vec<[u8; 11]>,
}

const SIG_MARK: &[u8] = b"\"sig\":\"";

/// The first 11 base64 characters of a frame's envelope signature. The signature is the
/// envelope's last field, so it is looked for from the end (the load generator shares the
/// machine with the relay: every microsecond it spends is one the relay does not get).
fn sig_key(frame: &[u8]) -> Option<[u8; 11]> {
    let i = frame.windows(SIG_MARK.len()).rposition(|w| w == SIG_MARK)? + SIG_MARK.len();
    frame.get(i..i + 11)?.try_into().ok()
}

/// Each agent's `per_agent` frames to random peers; with `cross` > 1, peers on another node
/// than the sender's (agent `i` on node `i % cross`).
pub(super) fn prebuild(n: usize, per_agent: usize, payload: usize, cross: usize) -> Vec<Prebuilt> {
    let body = vec![b'x'; payload];
    let ids: Vec<IdentityKey> = (0..n).map(|i| IdentityKey::from_seed(seed(i))).collect();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|i| {
            let mut frames = Vec::new();
            let mut keys = Vec::new();
            for k in 0..per_agent {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let mut j = (rng % n as u64) as usize;
                if j == i {
                    j = (j + 1) % n;
                }
                while cross > 1 && j % cross == i % cross {
                    j = (j + 1) % n;
                }
                let mut s = ThreadSession::new(seed(i * 1000 + k));
                let env = s
                    .seal(
                        &ids[i],
                        &address(i),
                        &address(j),
                        ids[j].public_ref(),
                        &format!("thr_bench_{i}_{k}"),
                        Direction::FromInitiator,
                        &body,
                    )
                    .unwrap_or_else(|_| unreachable!());
                let bytes = ClientFrame::Send {
                    seq: k as u64 + 1,
                    env,
                }
                .to_bytes();
                keys.push(sig_key(&bytes).unwrap_or([0; 11]));
                frames.push(Utf8Bytes::try_from(bytes).unwrap_or_default());
            }
            Prebuilt { frames, keys }
        })
        .collect()
}

/// A relay child for the bench, its data in `dir`, with room for `conns` connections and
/// no limit a load generator on loopback would hit.
pub(super) async fn spawn_relay(
    dir: &std::path::Path,
    a: &BenchArgs,
    conns: usize,
) -> Result<(Child, String), BenchError> {
    let data_s = dir.join("relay").display().to_string();
    let max = (conns + 64).to_string();
    let mut args = vec![
        "relay",
        "--listen",
        "127.0.0.1:0",
        "--domain",
        "localhost",
        "--data",
        &data_s,
        "--sync",
        &a.sync,
        // Room for every load-generating agent (the open-files limit still applies).
        "--max-connections",
        &max,
    ];
    args.extend_from_slice(UNLIMITED);
    spawn_child(&args).await
}

/// The relay limits a benchmark lifts: every load-generating agent comes from loopback and
/// sends as fast as it is asked to (no rate, per-source or registration cap).
pub(super) const UNLIMITED: &[&str] = &[
    "--rate-per-sec",
    "1000000",
    "--rate-burst",
    "1000000",
    "--max-connections-per-ip",
    "0",
    "--conn-rate-per-sec",
    "1000000",
    "--conn-rate-burst",
    "1000000",
    "--registrations-per-source",
    "1000000",
];

/// Registers and authenticates agents `range` (128 at a time).
pub(super) async fn register_all(
    url: &str,
    range: std::ops::Range<usize>,
) -> Result<Vec<crate::ws::Ws>, BenchError> {
    let mut conns = Vec::with_capacity(range.len());
    for chunk in range.collect::<Vec<_>>().chunks(128) {
        let futs = chunk.iter().map(|&i| register(url, i));
        for r in futures_util::future::join_all(futs).await {
            conns.push(r?);
        }
    }
    Ok(conns)
}

/// Closes the connections of `offline` % of the agents (every agent whose index falls in
/// that share, spread over all of them): they stay registered, their packets queue.
/// Returns the connections and pre-built frames of the others.
pub(super) fn go_offline(
    conns: Vec<crate::ws::Ws>,
    prebuilt: Vec<Prebuilt>,
    offline: u32,
) -> (Vec<crate::ws::Ws>, Vec<Prebuilt>) {
    let pct = u64::from(offline.min(99));
    conns
        .into_iter()
        .zip(prebuilt)
        .enumerate()
        .filter(|(i, _)| !is_offline(*i, pct))
        .map(|(_, x)| x)
        .unzip()
}

/// Whether agent `i` is among the `pct` % offline: exactly `pct` of every 100 consecutive
/// agents, evenly spread.
fn is_offline(i: usize, pct: u64) -> bool {
    let i = i as u64;
    pct > 0 && (i * pct) / 100 != ((i + 1) * pct) / 100
}

/// Runs `a2acp bench relay`.
pub async fn run(a: BenchArgs) -> Result<(), BenchError> {
    if a.growth {
        return super::growth::run(a).await;
    }
    let n = a.agents.max(2);
    let dir = tempfile::Builder::new()
        .prefix("a2acp-bench-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    println!(
        "a2acp bench relay: {n} agents{}, {} B payload, {}, {} s (+1 s warm-up), relay commits: {}",
        if a.offline > 0 {
            format!(" ({} % offline)", a.offline.min(99))
        } else {
            String::new()
        },
        a.payload,
        a.rate
            .map(|r| format!("{r} packets/s offered"))
            .unwrap_or_else(|| format!("closed loop, {} in flight per agent", a.window)),
        a.duration,
        a.sync
    );
    // The relay (a child: it inherits the limit) and this process each hold one descriptor
    // per agent: raise the limit to that, past the hard limit where this process may.
    a2acp_runtime::admission::raise_fd_limit(Some((n + a.idle + 64) as u64));
    let (mut relay, url) = spawn_relay(dir.path(), &a, n + a.idle).await?;
    let pid = relay.id().unwrap_or(0);

    let t = Instant::now();
    let prebuilt = tokio::task::spawn_blocking(move || prebuild(n, 8, a.payload, 0))
        .await
        .map_err(|e| e.to_string())?;
    let frame_len = prebuilt[0].frames[0].len();
    println!(
        "  built {} signed, encrypted envelopes ({frame_len} B frames) in {} ms",
        n * 8,
        t.elapsed().as_millis()
    );

    let t = Instant::now();
    let conns = register_all(&url, 0..n).await?;
    println!(
        "  {n} agents registered and authenticated in {} ms",
        t.elapsed().as_millis()
    );

    // Idle agents first, on a relay that has carried no traffic yet: the growth of its
    // resident memory is then what the connections cost, not heap freed by the run and
    // reused. They stay connected (and silent) during the run.
    let mut idle = Vec::with_capacity(a.idle);
    if a.idle > 0 {
        let before = rss_kib(pid);
        if let Some(limit) = a2acp_runtime::admission::fd_soft_limit() {
            let need = (n + a.idle + 64) as u64;
            if need > limit {
                println!(
                    "  idle:      {need} descriptors needed, the open-files limit is {limit} \
                     and cannot be raised past the hard limit without privilege: \
                     raise it (ulimit -Hn as root) or lower --idle"
                );
            } else {
                println!("  idle:      open-files limit {limit}");
            }
        }
        let t = Instant::now();
        let mut marks = [1_000usize, 10_000, 50_000, 100_000].into_iter().peekable();
        for chunk in (n..n + a.idle).collect::<Vec<_>>().chunks(128) {
            for r in futures_util::future::join_all(chunk.iter().map(|&i| register(&url, i))).await
            {
                idle.push(r?);
            }
            while marks.peek().is_some_and(|&m| idle.len() >= m) {
                marks.next();
                if let (Some(b), Some(x)) = (before, rss_kib(pid)) {
                    println!(
                        "  idle:      {:>7} agents: relay RSS {x} KiB, {:.1} KiB per connection",
                        idle.len(),
                        x.saturating_sub(b) as f64 / idle.len() as f64
                    );
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = rss_kib(pid);
        if let (Some(b), Some(x)) = (before, after) {
            println!(
                "  idle:      {} more authenticated agents in {} ms: relay RSS {} → {} KiB, {:.1} KiB per connection",
                a.idle,
                t.elapsed().as_millis(),
                b,
                x,
                (x.saturating_sub(b)) as f64 / a.idle as f64
            );
        }
    }

    let (conns, prebuilt) = go_offline(conns, prebuilt, a.offline);
    let relay_fig = drive_relay(conns, prebuilt, &a, pid).await;
    let routed = relay_fig.per_sec;
    println!(
        "  relay:     {:>9.0} packets/s delivered · p50 {:.2} ms · p99 {:.2} ms",
        routed, relay_fig.p50_ms, relay_fig.p99_ms
    );
    if a.offline > 0 {
        println!(
            "             {:.0} packets/s accepted, {:.1} µs of relay CPU per packet accepted",
            relay_fig.accepted as f64 / relay_fig.cpu.secs.max(1e-9),
            relay_fig.cpu.server_us_per(relay_fig.accepted)
        );
    }
    println!(
        "             {}",
        relay_fig.cpu.line(relay_fig.delivered, "packet")
    );

    let _ = relay.start_kill();
    let _ = relay.wait().await;
    drop(idle);

    if !a.no_baseline {
        let (mut fwd, furl) =
            spawn_child(&["bench", "forwarder", "--listen", "127.0.0.1:0"]).await?;
        let fpid = fwd.id().unwrap_or(0);
        let base = drive_forwarder(&furl, n, frame_len, &a, fpid).await?;
        let _ = fwd.start_kill();
        let _ = fwd.wait().await;
        println!(
            "  forwarder: {:>9.0} messages/s forwarded · p50 {:.2} ms · p99 {:.2} ms (bare WebSocket, no protocol)",
            base.per_sec, base.p50_ms, base.p99_ms
        );
        println!("             {}", base.cpu.line(base.delivered, "message"));
        let (r_us, f_us) = (
            relay_fig.cpu.server_us_per(relay_fig.delivered),
            base.cpu.server_us_per(base.delivered),
        );
        println!(
            "  ratio:     the relay routes {:.1}% of the bare forwarder's rate; it spends {:.1}× its CPU per message",
            100.0 * routed / base.per_sec.max(1.0),
            r_us / f_us.max(1e-9)
        );
    }
    Ok(())
}

pub(super) async fn drive_relay(
    conns: Vec<crate::ws::Ws>,
    prebuilt: Vec<Prebuilt>,
    a: &BenchArgs,
    pid: u32,
) -> Figures {
    let n = conns.len();
    // Frames per agent (every agent has as many).
    let per = prebuilt.first().map_or(1, |p| p.frames.len().max(1));
    let stats = Arc::new(Stats {
        delivered: AtomicU64::new(0),
        accepted: AtomicU64::new(0),
        measuring: AtomicBool::new(false),
        start: Instant::now(),
    });
    let mut map: HashMap<[u8; 11], usize> = HashMap::new();
    for (i, p) in prebuilt.iter().enumerate() {
        for (k, key) in p.keys.iter().enumerate() {
            map.insert(*key, i * per + k);
        }
    }
    let map = Arc::new(map);
    // Send times of each pre-built frame, oldest first: its deliveries arrive in order.
    let sent_at: Arc<Vec<Mutex<VecDeque<u64>>>> =
        Arc::new((0..n * per).map(|_| Mutex::new(VecDeque::new())).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let per_agent_interval = a
        .rate
        .map(|r| Duration::from_secs_f64(n as f64 / r.max(1) as f64));
    let mut tasks = Vec::new();
    for (i, (ws, pre)) in conns.into_iter().zip(prebuilt).enumerate() {
        let (stats, map, sent_at, stop) =
            (stats.clone(), map.clone(), sent_at.clone(), stop.clone());
        let window = a.window.max(1);
        tasks.push(tokio::spawn(async move {
            let (mut sink, mut source) = ws.split();
            let mut lat: Vec<u64> = Vec::new();
            let mut outstanding = 0usize;
            let mut next = 0usize;
            let mut tick = per_agent_interval.map(|d| {
                let start = tokio::time::Instant::now() + d.mul_f64((i as f64 * 0.618).fract());
                tokio::time::interval_at(start, d)
            });
            let mut first = true;
            loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let mut to_send = 0usize;
                if first && tick.is_none() {
                    to_send = window;
                    first = false;
                } else {
                tokio::select! {
                    m = source.next() => {
                        let Some(Ok(m)) = m else { break };
                        let Message::Text(t) = m else { continue };
                        let b = t.as_bytes();
                        if b.starts_with(b"{\"t\":\"accepted\"") {
                            outstanding = outstanding.saturating_sub(1);
                            if stats.measuring.load(Ordering::Relaxed) {
                                stats.accepted.fetch_add(1, Ordering::Relaxed);
                            }
                        } else if b.starts_with(b"{\"t\":\"deliver\"") {
                            let id = parse_id(b);
                            if let Some(slot) = sig_key(b).and_then(|k| map.get(&k)) {
                                let at = sent_at[*slot].lock().ok().and_then(|mut q| q.pop_front());
                                if let (Some(at), true) = (at, stats.measuring.load(Ordering::Relaxed)) {
                                    lat.push(stats.ns().saturating_sub(at));
                                    stats.delivered.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            let ack = format!("{{\"t\":\"ack\",\"id\":{id}}}");
                            if sink.feed(Message::Text(ack.into())).await.is_err() { break; }
                        } else if b.starts_with(b"{\"t\":\"ping\"") {
                            let n = parse_n(b);
                            let _ = sink.feed(Message::Text(format!("{{\"t\":\"pong\",\"n\":{n}}}").into())).await;
                        }
                    }
                    _ = async { match tick.as_mut() { Some(t) => { t.tick().await; } None => std::future::pending().await } } => {
                        to_send = 1;
                    }
                }
                }
                if tick.is_none() {
                    to_send = window.saturating_sub(outstanding);
                }
                for _ in 0..to_send {
                    let k = next % pre.frames.len();
                    next += 1;
                    if let Ok(mut q) = sent_at[i * per + k].lock() {
                        q.push_back(stats.ns());
                    }
                    outstanding += 1;
                    if sink.feed(Message::Text(pre.frames[k].clone())).await.is_err() { break; }
                }
                if sink.flush().await.is_err() { break; }
            }
            lat
        }));
    }
    let (delivered, secs, cpu) = measure(&stats, a.duration, pid).await;
    let accepted = stats.accepted.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let mut lat = Vec::new();
    for mut t in tasks {
        match tokio::time::timeout(Duration::from_secs(2), &mut t).await {
            Ok(Ok(l)) => lat.extend(l),
            _ => t.abort(),
        }
    }
    Figures {
        per_sec: delivered as f64 / secs,
        p50_ms: percentile(&mut lat, 0.5),
        p99_ms: percentile(&mut lat, 0.99),
        delivered,
        accepted,
        cpu,
    }
}

/// Counts deliveries for `duration` seconds (after one second of warm-up): how many, in
/// how many seconds, and the CPU the server `pid` and this process spent meanwhile.
pub(super) async fn measure(stats: &Stats, duration: u64, pid: u32) -> (u64, f64, CpuUse) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mark = CpuMark::new(pid);
    stats.measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(duration.max(1))).await;
    stats.measuring.store(false, Ordering::Relaxed);
    let delivered = stats.delivered.load(Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    (delivered, secs, mark.since())
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

fn parse_id(b: &[u8]) -> u64 {
    parse_num_after(b, b"\"id\":")
}

fn parse_n(b: &[u8]) -> u64 {
    parse_num_after(b, b"\"n\":")
}
