//! `a2acp bench attack`: hostile clients against a real relay process, and what they cost
//! it. Each attack runs against a fresh relay, a child process (`a2acp relay` or
//! `a2acp-smol relay`) started under a low open-files limit (`ulimit -n`, 256 by default)
//! with short deadlines; this process plays the attacker, probes `/healthz` and runs an
//! honest pair of agents through the spec's dinner. For each attack the relay's open file
//! descriptors, resident memory and CPU are read from `/proc` before, during and after,
//! along with the time an honest negotiation took during the attack against the same
//! negotiation with no attack, whether `/healthz` kept answering, the relay's log volume,
//! and its connection counters from `/metrics`.
//!
//! The integration tests of both binaries run the same attacks ([`run_attack`]) and
//! assert on the [`AttackReport`] ([`AttackReport::problems`]). Adding an attack is one
//! [`Attack`] variant and its arms in this file: its name and place in [`Attack::ALL`],
//! its source address and relay flags, what one hostile connection does with its
//! connected TCP stream in `Attack::drive` (a frame-level attack completes the WebSocket
//! handshake over it, e.g. with `a2acp_runtime::ws::handshake` over a `TokioAdapter`), and
//! the defence expected of the relay in [`AttackReport::problems`]; the harness does the
//! rest (reconnecting, measuring, probing, the honest negotiation, the table).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2acp_core::agent::AgentConfig;
use a2acp_core::crypto::IdentityKey;
use a2acp_core::link::{ClientFrame, RelayFrame};
use a2acp_core::Address;
use a2acp_runtime::control::{Request, StatusInfo, ThreadSummary};
use a2acp_runtime::scripted::{dinner_configs, next_friday, start_dinner, ScriptedUser};
use a2acp_runtime::store::Store;
use async_tungstenite::tokio::TokioAdapter;
use async_tungstenite::tungstenite::Message;
use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::agent::{AgentHandle, RunOptions};
use crate::bench::BenchError;

/// `a2acp bench attack` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct AttackArgs {
    /// Attacks to run (default: all): garbage, slowloris, half-open, half-open-fin,
    /// ip-flood, junk-flood, ping-flood, registration-flood.
    #[arg(long = "attack", value_parser = parse_attack)]
    pub attacks: Vec<Attack>,
    /// The relay binary to attack (default: this one; `--runtime smol`: `a2acp-smol` next
    /// to it).
    #[arg(long)]
    pub relay_bin: Option<PathBuf>,
    /// `tokio` (this binary) or `smol` (the `a2acp-smol` binary next to it).
    #[arg(long, default_value = "tokio")]
    pub runtime: String,
    /// The relay's open-files limit (`ulimit -n`).
    #[arg(long, default_value_t = 256)]
    pub fd_limit: u64,
    /// Hostile connections kept going at once.
    #[arg(long, default_value_t = 400)]
    pub connections: usize,
    /// Hostile WebSocket connections kept going at once by the frame-level attacks
    /// (junk-flood, ping-flood, registration-flood): each is a flood of its own, and
    /// upgraded connections are not closed to make room, so fewer than the total cap.
    #[arg(long, default_value_t = 32)]
    pub frame_connections: usize,
    /// Seconds of attack (at least until the honest negotiation under attack is over).
    #[arg(long, default_value_t = 6)]
    pub duration: u64,
    /// The relay's `--upgrade-timeout` and `--auth-timeout`, ms.
    #[arg(long, default_value_t = 2000)]
    pub deadline_ms: u64,
    /// The relay's `--max-connections-per-ip` in the ip-flood attack.
    #[arg(long, default_value_t = 32)]
    pub per_ip_cap: usize,
    /// The relay binary predates `--upgrade-timeout`, `--auth-timeout` and the connection
    /// caps: start it without them (to compare with an older build).
    #[arg(long, hide = true)]
    pub legacy: bool,
}

/// One kind of hostile client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// Non-HTTP bytes, 4 KiB every 20 ms, reconnecting when closed.
    Garbage,
    /// An HTTP request head one byte a second.
    Slowloris,
    /// Five bytes of a request, then silence.
    HalfOpen,
    /// Five bytes of a request, then FIN (the write side closed), then silence.
    HalfOpenFin,
    /// Every connection from one source address: far past the per-source cap; the
    /// admitted ones complete the WebSocket upgrade and then send nothing.
    IpFlood,
    /// WebSocket connections that never authenticate and send junk (non-JSON) text frames
    /// as fast as they can, reconnecting whenever the relay closes them
    /// (`too_many_refusals`).
    JunkFlood,
    /// WebSocket connections that never authenticate and send protocol `ping` frames as
    /// fast as they can, reconnecting whenever the relay closes them.
    PingFlood,
    /// Connections that each register a fresh address (a fresh Ed25519 key, answering the
    /// relay's challenge), as fast as they can, until the per-source limit refuses them
    /// (`registration_limited`).
    RegistrationFlood,
}

fn parse_attack(s: &str) -> Result<Attack, String> {
    Attack::ALL
        .into_iter()
        .find(|a| a.name() == s)
        .ok_or_else(|| {
            let names: Vec<&str> = Attack::ALL.iter().map(|a| a.name()).collect();
            format!("unknown attack `{s}` (one of {})", names.join(", "))
        })
}

/// The source address of the honest clients (agents, `/healthz` probes).
pub const HONEST_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
/// The source address of the ip-flood attacker.
pub const FLOOD_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// Distinct source addresses the other attacks spread their connections over (all of
/// 127.0.0.0/8 is loopback on Linux), so that they meet the total cap rather than the
/// per-source one.
pub const SPREAD_IPS: u8 = 16;

const UPGRADE_REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: relay\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

impl Attack {
    /// Every attack.
    pub const ALL: [Attack; 8] = [
        Attack::Garbage,
        Attack::Slowloris,
        Attack::HalfOpen,
        Attack::HalfOpenFin,
        Attack::IpFlood,
        Attack::JunkFlood,
        Attack::PingFlood,
        Attack::RegistrationFlood,
    ];

    /// Its name on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Attack::Garbage => "garbage",
            Attack::Slowloris => "slowloris",
            Attack::HalfOpen => "half-open",
            Attack::HalfOpenFin => "half-open-fin",
            Attack::IpFlood => "ip-flood",
            Attack::JunkFlood => "junk-flood",
            Attack::PingFlood => "ping-flood",
            Attack::RegistrationFlood => "registration-flood",
        }
    }

    /// Whether it speaks WebSocket frames (after the upgrade) rather than raw bytes.
    fn frame_level(self) -> bool {
        matches!(
            self,
            Attack::JunkFlood | Attack::PingFlood | Attack::RegistrationFlood
        )
    }

    /// Hostile connections kept going at once.
    fn connections(self, o: &AttackOptions) -> usize {
        if self.frame_level() {
            o.frame_connections
        } else {
            o.connections
        }
    }

    /// The source address of hostile connection `i`.
    fn source(self, i: usize) -> IpAddr {
        match self {
            Attack::IpFlood => IpAddr::V4(FLOOD_IP),
            _ => IpAddr::V4(Ipv4Addr::new(
                127,
                0,
                1,
                1 + (i % SPREAD_IPS as usize) as u8,
            )),
        }
    }

    /// Flags of the relay under this attack (besides the deadlines).
    fn relay_flags(self, o: &AttackOptions) -> Vec<String> {
        match self {
            Attack::IpFlood => vec!["--max-connections-per-ip".into(), o.per_ip_cap.to_string()],
            _ => Vec::new(),
        }
    }

    /// What one hostile connection does once connected, until the relay closes it; once
    /// `stop` is set it sends nothing more but keeps the socket open until the relay
    /// closes it (or until `release`); a registration-flood connection closes itself
    /// once registered. Whether it got as far as its attack (a frame-level connection
    /// upgraded): if not, and it ended at once, the harness pauses before reconnecting.
    async fn drive(
        self,
        s: TcpStream,
        stop: &watch::Receiver<bool>,
        release: &watch::Receiver<bool>,
        tally: &Tally,
    ) -> bool {
        match self {
            Attack::JunkFlood | Attack::PingFlood => {
                self.flood_frames(s, stop, release, tally).await
            }
            Attack::RegistrationFlood => flood_registrations(s, stop, tally).await,
            _ => {
                self.drive_bytes(s, stop, release).await;
                false
            }
        }
    }

    /// Upgrades `s`, then sends junk or `ping` frames as fast as it can (reading what the
    /// relay answers) until the relay closes the connection or `stop`; then holds it.
    async fn flood_frames(
        self,
        s: TcpStream,
        stop: &watch::Receiver<bool>,
        release: &watch::Receiver<bool>,
        tally: &Tally,
    ) -> bool {
        let Some(ws) = upgrade(s).await else {
            return false;
        };
        let (mut sink, mut source) = ws.split();
        let closed = async {
            while let Some(Ok(m)) = source.next().await {
                if matches!(m, Message::Close(_)) {
                    break;
                }
            }
        };
        tokio::pin!(closed);
        let flood = async {
            let mut n = 0u64;
            while !*stop.borrow() {
                n += 1;
                let text = match self {
                    Attack::PingFlood => {
                        String::from_utf8_lossy(&ClientFrame::Ping { n }.to_bytes()).into_owned()
                    }
                    _ => format!("junk frame {n}: not JSON <<<>>>"),
                };
                if sink.send(Message::Text(text.into())).await.is_err() {
                    return false;
                }
                tally.frames.fetch_add(1, Ordering::Relaxed);
                if n % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            true
        };
        tokio::select! {
            _ = &mut closed => return true,
            open = flood => if !open { return true },
        }
        // Stopped: send nothing more, hold the connection until the relay closes it.
        let mut release = release.clone();
        tokio::select! {
            _ = &mut closed => {}
            _ = release.wait_for(|r| *r) => {}
        }
        true
    }

    /// The byte-level attacks: what one connection sends before holding it.
    async fn drive_bytes(
        self,
        mut s: TcpStream,
        stop: &watch::Receiver<bool>,
        release: &watch::Receiver<bool>,
    ) {
        let mut buf = vec![0u8; 4096];
        match self {
            Attack::Garbage => {
                // Bytes 0x20..0x7e without CR or LF: never a request head.
                let chunk: Vec<u8> = (0..4096u32).map(|i| b' ' + (i * 7 % 94) as u8).collect();
                loop {
                    if *stop.borrow() {
                        break;
                    }
                    tokio::select! {
                        r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return },
                        _ = tokio::time::sleep(Duration::from_millis(20)) => {
                            if s.write_all(&chunk).await.is_err() { return; }
                        }
                    }
                }
            }
            Attack::Slowloris => {
                let head = b"GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Pad: ";
                let mut at = 0usize;
                loop {
                    if *stop.borrow() {
                        break;
                    }
                    let byte = [*head.get(at).unwrap_or(&b'a')];
                    at += 1;
                    if s.write_all(&byte).await.is_err() {
                        return;
                    }
                    tokio::select! {
                        r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return },
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
            Attack::HalfOpen | Attack::HalfOpenFin => {
                if s.write_all(b"GET /").await.is_err() {
                    return;
                }
                if self == Attack::HalfOpenFin {
                    let _ = s.shutdown().await;
                }
            }
            Attack::IpFlood => {
                if s.write_all(UPGRADE_REQUEST).await.is_err() {
                    return;
                }
            }
            // Driven frame by frame ([`Attack::drive`]); here they only hold the socket.
            Attack::JunkFlood | Attack::PingFlood | Attack::RegistrationFlood => {}
        }
        // Hold the socket, sending nothing, until the relay closes it.
        let mut release = release.clone();
        loop {
            tokio::select! {
                r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return },
                _ = release.wait_for(|r| *r) => return,
            }
        }
    }
}

/// What the hostile connections of one attack did, counted by the attacker.
#[derive(Debug, Default)]
pub struct Tally {
    /// WebSocket frames sent (junk, `ping`, `register`).
    pub frames: AtomicU64,
    /// Registrations answered `auth_ok`.
    pub registered: AtomicU64,
    /// Registrations refused with `registration_limited`.
    pub registration_limited: AtomicU64,
}

/// Distinguishes the fresh keys and addresses of the registration flood.
static FRESH: AtomicU64 = AtomicU64::new(0);

/// Completes the WebSocket upgrade over `s` (5 s at most).
async fn upgrade(s: TcpStream) -> Option<crate::ws::Ws> {
    let url = format!("ws://{}", s.peer_addr().ok()?);
    let _ = s.set_nodelay(true);
    tokio::time::timeout(
        Duration::from_secs(5),
        a2acp_runtime::ws::handshake(&url, crate::ws::MaybeTls::Plain(TokioAdapter::new(s))),
    )
    .await
    .ok()?
    .ok()
}

/// Upgrades `s` and registers fresh addresses (a fresh key each) on it, answering every
/// challenge, until one registration succeeds (then closes it), the relay closes it, or
/// `stop`.
async fn flood_registrations(s: TcpStream, stop: &watch::Receiver<bool>, tally: &Tally) -> bool {
    let Some(mut ws) = upgrade(s).await else {
        return false;
    };
    loop {
        let m = match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
            Ok(Some(Ok(m))) => m,
            _ => return true,
        };
        let Message::Text(t) = m else {
            continue;
        };
        match RelayFrame::from_bytes(t.as_bytes()) {
            Ok(RelayFrame::Challenge { nonce, domain, .. }) => {
                if *stop.borrow() {
                    break;
                }
                let k = FRESH.fetch_add(1, Ordering::Relaxed);
                let mut seed = [0xf1u8; 32];
                seed[..8].copy_from_slice(&k.to_le_bytes());
                let id = IdentityKey::from_seed(seed);
                let Ok(address) = Address::new(&format!("flood{k}"), &domain) else {
                    break;
                };
                let f = crate::bench::register_frame(&id, &address, &nonce, &domain);
                let text = String::from_utf8_lossy(&f.to_bytes()).into_owned();
                if ws.send(Message::Text(text.into())).await.is_err() {
                    return true;
                }
                tally.frames.fetch_add(1, Ordering::Relaxed);
            }
            Ok(RelayFrame::AuthOk { .. }) => {
                tally.registered.fetch_add(1, Ordering::Relaxed);
                break;
            }
            Ok(RelayFrame::Error { code, .. }) if code.as_str() == "registration_limited" => {
                tally.registration_limited.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
    true
}

/// How to run an attack.
#[derive(Debug, Clone)]
pub struct AttackOptions {
    /// The relay's open-files limit.
    pub fd_limit: u64,
    /// Hostile connections at once.
    pub connections: usize,
    /// Length of the attack.
    pub duration: Duration,
    /// The relay's HTTP-phase and authentication deadlines.
    pub deadline: Duration,
    /// The per-source cap of the ip-flood attack.
    pub per_ip_cap: usize,
    /// Hostile connections at once of the frame-level attacks.
    pub frame_connections: usize,
    /// Start the relay without the deadline and cap flags (a build that predates them).
    pub legacy: bool,
}

impl Default for AttackOptions {
    fn default() -> Self {
        AttackOptions {
            fd_limit: 256,
            connections: 400,
            duration: Duration::from_secs(6),
            deadline: Duration::from_secs(2),
            per_ip_cap: 32,
            frame_connections: 32,
            legacy: false,
        }
    }
}

/// What a process uses, from `/proc` (zero where there is none).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// Open file descriptors.
    pub fds: usize,
    /// Resident memory, KiB.
    pub rss_kib: u64,
    /// CPU seconds since it started.
    pub cpu_secs: f64,
}

impl Usage {
    /// What process `pid` uses now.
    pub fn of(pid: u32) -> Usage {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0);
        let cpu_secs = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let close = stat.rfind(')')?;
                let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
                let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
                Some((ticks(11)? + ticks(12)?) as f64 / crate::bench::USER_HZ)
            })
            .unwrap_or(0.0);
        Usage {
            fds,
            rss_kib: crate::bench::rss_kib(pid).unwrap_or(0),
            cpu_secs,
        }
    }
}

/// A relay running as a child process, its data in a temporary directory, its log
/// (stderr) counted.
#[derive(Debug)]
pub struct RelayChild {
    child: Child,
    /// Its process id.
    pub pid: u32,
    /// Where it listens.
    pub addr: SocketAddr,
    /// `ws://addr`.
    pub url: String,
    log_bytes: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

impl RelayChild {
    /// Starts `exe relay` on a free loopback port under `ulimit -n fd_limit` (through
    /// `sh`, as the limit must be set in the child), with `flags` added.
    pub async fn spawn(exe: &Path, fd_limit: u64, flags: &[String]) -> Result<Self, BenchError> {
        let dir = tempfile::Builder::new()
            .prefix("a2acp-attack-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let data = dir.path().join("relay").display().to_string();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {fd_limit} && exec \"$0\" \"$@\""))
            .arg(exe)
            .args(["relay", "--listen", "127.0.0.1:0", "--domain", "localhost"])
            .args(["--data", &data, "--sync", "normal"])
            .args(flags)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        let pid = child.id().ok_or("the relay exited at once")?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(out).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .map_err(|_| "the relay did not start in 20 s".to_string())?
            .map_err(|e| e.to_string())?
            .ok_or("the relay exited before listening")?;
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("ws://"))
            .ok_or_else(|| format!("unexpected first line `{line}`"))?
            .to_string();
        let addr: SocketAddr = url["ws://".len()..]
            .parse()
            .map_err(|e| format!("`{url}`: {e}"))?;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let log_bytes = Arc::new(AtomicU64::new(0));
        if let Some(mut err) = child.stderr.take() {
            let n = log_bytes.clone();
            tokio::spawn(async move {
                let mut b = vec![0u8; 16 * 1024];
                while let Ok(k) = err.read(&mut b).await {
                    if k == 0 {
                        break;
                    }
                    n.fetch_add(k as u64, Ordering::Relaxed);
                }
            });
        }
        Ok(RelayChild {
            child,
            pid,
            addr,
            url,
            log_bytes,
            _dir: dir,
        })
    }

    /// What it uses now.
    pub fn usage(&self) -> Usage {
        Usage::of(self.pid)
    }

    /// Bytes it has logged so far.
    pub fn log_bytes(&self) -> u64 {
        self.log_bytes.load(Ordering::Relaxed)
    }

    /// `/metrics`, parsed: `name value` per line (comments left out).
    pub async fn metrics(&self) -> Result<Vec<(String, f64)>, BenchError> {
        let (body, _) = http_get(self.addr, "/metrics", Duration::from_secs(5)).await?;
        Ok(body
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect())
    }

    /// Stops it (SIGKILL) and waits for it.
    pub async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// One metric of a parsed `/metrics` (0 if absent).
pub fn metric(m: &[(String, f64)], name: &str) -> f64 {
    m.iter().find(|(k, _)| k == name).map_or(0.0, |(_, v)| *v)
}

/// `GET path` from [`HONEST_IP`]: the body if the answer is `200`, and how long it took.
pub async fn http_get(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(String, Duration), BenchError> {
    let t = Instant::now();
    let fut = async {
        let mut s = connect_from(IpAddr::V4(HONEST_IP), addr).await?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: relay\r\n\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out).into_owned();
        if !text.starts_with("HTTP/1.1 200") {
            return Err(format!(
                "GET {path}: {}",
                text.lines().next().unwrap_or("no answer")
            ));
        }
        Ok(text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default())
    };
    let body = tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| format!("GET {path}: no answer in {} ms", timeout.as_millis()))??;
    Ok((body, t.elapsed()))
}

async fn connect_from(ip: IpAddr, to: SocketAddr) -> Result<TcpStream, BenchError> {
    let sock = TcpSocket::new_v4().map_err(|e| e.to_string())?;
    sock.bind(SocketAddr::new(ip, 0))
        .map_err(|e| format!("bind {ip}: {e}"))?;
    sock.connect(to).await.map_err(|e| e.to_string())
}

/// How long an honest pair of agents took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Negotiation {
    /// From starting both agents to both authenticated (connection, registration).
    pub online: Duration,
    /// From Alice's request to the dinner completed on both sides.
    pub dinner: Duration,
}

fn pair_configs(n: u32) -> Result<(AgentConfig, AgentConfig), BenchError> {
    let (mut alice, mut bob) = dinner_configs("localhost").map_err(|e| e.to_string())?;
    let a = Address::new(&format!("alice{n}"), "localhost").map_err(|e| e.to_string())?;
    let b = Address::new(&format!("bob{n}"), "localhost").map_err(|e| e.to_string())?;
    if let Some(o) = bob.overrides.remove(&alice.address) {
        bob.overrides.insert(a.clone(), o);
    }
    alice.address = a;
    bob.address = b;
    Ok((alice, bob))
}

async fn status(h: &AgentHandle) -> Result<StatusInfo, BenchError> {
    let r = h
        .request(Request::Status)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_value(r.data).map_err(|e| e.to_string())
}

async fn threads(h: &AgentHandle) -> Result<Vec<ThreadSummary>, BenchError> {
    let r = h
        .request(Request::Threads)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_value(r.data).map_err(|e| e.to_string())
}

/// A new pair of agents (`alice{n}`, `bob{n}`, in memory, scripted users) connects to
/// the relay at `url`, registers, and negotiates the spec's dinner to completion on both
/// sides: how long each part took (an error past `limit`).
pub async fn negotiate(url: &str, n: u32, limit: Duration) -> Result<Negotiation, BenchError> {
    let (alice, bob) = pair_configs(n)?;
    let bob_addr = bob.address.clone();
    let t0 = Instant::now();
    let mut agents = Vec::new();
    for (i, (name, cfg)) in [("alice", alice), ("bob", bob)].into_iter().enumerate() {
        let mut seed = [0u8; 32];
        seed[..4].copy_from_slice(&n.to_le_bytes());
        seed[4] = i as u8;
        seed[5] = 0xa7;
        let (host, first, _) = a2acp_runtime::agent_host::AgentHost::start(
            cfg,
            IdentityKey::from_seed(seed),
            Store::in_memory().map_err(|e| e.to_string())?,
            a2acp_runtime::now(),
        )
        .map_err(|e| e.to_string())?;
        let mut o = RunOptions::new(url, name);
        o.auto = Some(ScriptedUser::dinner());
        o.backoff_min = Duration::from_millis(50);
        o.backoff_max = Duration::from_millis(400);
        agents.push(crate::agent::spawn(host, first, o).map_err(|e| e.to_string())?);
    }
    let run = async {
        for h in &agents {
            while !status(h).await?.online {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let online = t0.elapsed();
        let t1 = Instant::now();
        agents[0]
            .command(start_dinner(bob_addr, &next_friday(a2acp_runtime::now())))
            .await
            .map_err(|e| e.to_string())?;
        loop {
            let mut done = 0;
            for h in &agents {
                let t = threads(h).await?;
                if t.iter()
                    .any(|t| matches!(t.state.as_str(), "DECLINED" | "EXPIRED"))
                {
                    return Err(format!("the dinner ended {t:?}"));
                }
                if !t.is_empty() && t.iter().all(|t| t.state == "COMPLETED") {
                    done += 1;
                }
            }
            if done == agents.len() {
                return Ok(Negotiation {
                    online,
                    dinner: t1.elapsed(),
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let r = tokio::time::timeout(limit, run).await.unwrap_or_else(|_| {
        Err(format!(
            "the honest negotiation did not complete in {} s",
            limit.as_secs()
        ))
    });
    for h in agents {
        let _ = h.stop().await;
    }
    r
}

/// `/healthz` probes every 200 ms while an attack runs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Probes {
    /// Answered `200`.
    pub ok: u32,
    /// Not answered (within 3 s) or not `200`.
    pub failed: u32,
    /// The slowest answer.
    pub max: Duration,
}

/// How the relay fared under one attack.
#[derive(Debug, Clone)]
pub struct AttackReport {
    /// The attack.
    pub attack: Attack,
    /// Before the attack (no connection open).
    pub before: Usage,
    /// Most descriptors and memory seen during the attack.
    pub peak: Usage,
    /// Cores of CPU the relay used during the attack.
    pub cpu_during: f64,
    /// Once the relay closed the attacker's connections by itself.
    pub after: Usage,
    /// How long after the attack stopped its descriptors were back near their baseline
    /// (`None`: not within the deadline plus 5 s).
    pub settled_in: Option<Duration>,
    /// `/healthz` during the attack.
    pub healthz: Probes,
    /// The honest negotiation with no attack.
    pub baseline: Negotiation,
    /// The honest negotiation (a new pair) during the attack.
    pub during: Result<Negotiation, BenchError>,
    /// The honest negotiation (a new pair) after it.
    pub after_negotiation: Result<Negotiation, BenchError>,
    /// Hostile connections made.
    pub attacker_connections: u64,
    /// Hostile connections kept going at once.
    pub connections: usize,
    /// WebSocket frames the attacker sent (frame-level attacks).
    pub frames_sent: u64,
    /// Registrations of the registration flood answered `auth_ok`.
    pub registered: u64,
    /// Registrations of the registration flood refused with `registration_limited`.
    pub registration_limited: u64,
    /// Bytes the relay logged during the attack and until it settled.
    pub log_bytes: u64,
    /// Seconds from the start of the attack to it settling.
    pub log_secs: f64,
    /// `/metrics` after the attack.
    pub metrics: Vec<(String, f64)>,
    /// Why `/metrics` could not be read after the attack.
    pub metrics_error: Option<BenchError>,
    /// The relay's `--upgrade-timeout` and `--auth-timeout`.
    pub deadline: Duration,
}

/// Log bytes allowed per address the registration flood registered (the relay's
/// `registered` line).
pub const REGISTERED_LOG_BYTES: u64 = 256;

/// Descriptors above the baseline still counted as "back to baseline" (a probe or an agent
/// closing).
pub const FD_SLACK: usize = 4;

impl AttackReport {
    /// What went wrong: `/healthz` unanswered during the attack, an honest negotiation
    /// that did not complete during or after it, descriptors not back near their
    /// baseline within the deadline plus 5 s, memory not back near it (within 16 MiB or
    /// half of it), the log growing faster than 4 KB/s (besides
    /// [`REGISTERED_LOG_BYTES`] per address registered), or the attack not met by its
    /// defence (no connection closed by the deadline, made room for, closed for its
    /// refusals, or refused as it should; no registration both admitted and then
    /// refused with `registration_limited`).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.healthz.failed > 0 || self.healthz.ok == 0 {
            p.push(format!("/healthz during the attack: {:?}", self.healthz));
        }
        if let Err(e) = &self.during {
            p.push(format!("during the attack: {e}"));
        }
        if let Err(e) = &self.after_negotiation {
            p.push(format!("after the attack: {e}"));
        }
        if self.settled_in.is_none() {
            p.push(format!(
                "descriptors not back to {} (+{FD_SLACK}): {}",
                self.before.fds, self.after.fds
            ));
        }
        let rss_slack = (16 * 1024).max(self.before.rss_kib / 2);
        if self.after.rss_kib > self.before.rss_kib + rss_slack {
            p.push(format!(
                "memory not back near its baseline: {} KiB before, {} KiB after",
                self.before.rss_kib, self.after.rss_kib
            ));
        }
        // The relay logs one line per new address (`registered`, about 130 bytes), which
        // the per-source registration limit bounds: not counted against the rate.
        let registrations = self.registered * REGISTERED_LOG_BYTES;
        let rate = self.log_bytes.saturating_sub(registrations) as f64 / self.log_secs.max(1.0);
        if rate > 4096.0 {
            p.push(format!(
                "the log grew {} bytes in {:.1} s",
                self.log_bytes, self.log_secs
            ));
        }
        if let Some(e) = &self.metrics_error {
            p.push(format!("after the attack: {e}"));
        }
        let m = |n: &str| metric(&self.metrics, n);
        let met = match self.attack {
            // Closed by the relay (and made again) rather than held.
            Attack::Garbage | Attack::HalfOpenFin => {
                self.attacker_connections > self.connections as u64
            }
            Attack::Slowloris | Attack::HalfOpen => {
                m("a2acp_relay_upgrade_timeouts_total") + m("a2acp_relay_connections_evicted_total")
                    > 0.0
            }
            Attack::IpFlood => m("a2acp_relay_connections_refused_per_ip_total") > 0.0,
            // Closed for their refusals (and made again).
            Attack::JunkFlood | Attack::PingFlood => {
                m("a2acp_relay_closed_for_refusals_total") > 0.0
                    && self.attacker_connections > self.connections as u64
            }
            Attack::RegistrationFlood => {
                self.registered > 0
                    && self.registration_limited > 0
                    && m("a2acp_relay_registrations_limited_total") > 0.0
            }
        };
        if !met {
            p.push(format!(
                "the attack was not met by its defence: {} connections, metrics {:?}",
                self.attacker_connections, self.metrics
            ));
        }
        p
    }

    /// The row of this report in the table ([`TABLE_HEADER`]).
    pub fn row(&self) -> String {
        let neg = |n: &Result<Negotiation, BenchError>| match n {
            Ok(n) => format!("{}+{}", n.online.as_millis(), n.dinner.as_millis()),
            Err(_) => "FAILED".into(),
        };
        let m = |n: &str| metric(&self.metrics, n) as u64;
        format!(
            "{:<18} {:>4} {:>4} {:>4}  {:>6} {:>6} {:>6}  {:>5.2} {:>5.2}  {:>6}  {:>3}/{:<3} {:>5}  {:>9} {:>9} {:>9}  {:>6} {:>6}  {:>5}/{:>5}/{:>5}/{:>5}/{:>3}  {:>8} {:>5}  {:>5}/{:<5}",
            self.attack.name(),
            self.before.fds,
            self.peak.fds,
            self.after.fds,
            self.before.rss_kib / 1024,
            self.peak.rss_kib / 1024,
            self.after.rss_kib / 1024,
            self.cpu_during,
            0.0f64.max(self.after.cpu_secs - self.before.cpu_secs),
            self.settled_in
                .map(|d| format!("{:.1}", d.as_secs_f64()))
                .unwrap_or_else(|| "never".into()),
            self.healthz.ok,
            self.healthz.failed,
            self.healthz.max.as_millis(),
            neg(&Ok(self.baseline)),
            neg(&self.during),
            neg(&self.after_negotiation),
            self.attacker_connections,
            self.log_bytes,
            m("a2acp_relay_upgrade_timeouts_total"),
            m("a2acp_relay_connections_evicted_total"),
            m("a2acp_relay_connections_refused_per_ip_total"),
            m("a2acp_relay_connections_refused_total_cap_total"),
            m("a2acp_relay_accept_errors_total"),
            self.frames_sent,
            m("a2acp_relay_closed_for_refusals_total"),
            self.registered,
            self.registration_limited,
        )
    }
}

/// The header of [`AttackReport::row`].
pub const TABLE_HEADER: &str = "attack             fds: before peak after  RSS MiB: before peak after  CPU cores during / CPU s total  settled s  healthz ok/failed max ms  honest online+dinner ms: baseline during after  hostile conns  log B  timeouts/evicted/refused per-IP/refused total/accept errors  frames sent  closed for refusals  registered/limited\n";

/// Runs one attack against a fresh relay `exe` (`a2acp` or `a2acp-smol`) and measures it.
pub async fn run_attack(
    exe: &Path,
    attack: Attack,
    o: &AttackOptions,
) -> Result<AttackReport, BenchError> {
    let deadline = format!("{}ms", o.deadline.as_millis());
    let mut flags = vec![
        "--upgrade-timeout".to_string(),
        deadline.clone(),
        "--auth-timeout".to_string(),
        deadline,
    ];
    flags.extend(attack.relay_flags(o));
    if o.legacy {
        flags.clear();
    }
    let relay = RelayChild::spawn(exe, o.fd_limit, &flags).await?;
    let limit = Duration::from_secs(30);
    let baseline = negotiate(&relay.url, 0, limit).await?;
    // The pair's connections close; the relay settles.
    let before = settle(&relay, None, Duration::from_secs(3)).await.1;

    let (stop_tx, stop) = watch::channel(false);
    let (release_tx, release) = watch::channel(false);
    let opened = Arc::new(AtomicU64::new(0));
    let tally = Arc::new(Tally::default());
    let log0 = relay.log_bytes();
    let started = Instant::now();
    let mut attackers = Vec::new();
    for i in 0..attack.connections(o) {
        let (stop, release, opened) = (stop.clone(), release.clone(), opened.clone());
        let tally = tally.clone();
        let (src, to) = (attack.source(i), relay.addr);
        attackers.push(tokio::spawn(async move {
            while !*stop.borrow() {
                let Ok(Ok(s)) =
                    tokio::time::timeout(Duration::from_secs(2), connect_from(src, to)).await
                else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                opened.fetch_add(1, Ordering::Relaxed);
                let t = Instant::now();
                let attacked = attack.drive(s, &stop, &release, &tally).await;
                if !attacked && t.elapsed() < Duration::from_millis(100) {
                    // Refused or closed at once: a short pause, not a busy loop.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }));
    }
    // Watch the relay and probe /healthz while the attack lasts.
    let watching = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (w, pid) = (watching.clone(), relay.pid);
        tokio::spawn(async move {
            let mut peak = Usage::default();
            while w.load(Ordering::Relaxed) {
                let u = Usage::of(pid);
                peak.fds = peak.fds.max(u.fds);
                peak.rss_kib = peak.rss_kib.max(u.rss_kib);
                peak.cpu_secs = u.cpu_secs;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    };
    let prober = {
        let (w, addr) = (watching.clone(), relay.addr);
        tokio::spawn(async move {
            let mut p = Probes::default();
            tokio::time::sleep(Duration::from_millis(500)).await;
            while w.load(Ordering::Relaxed) {
                match http_get(addr, "/healthz", Duration::from_secs(3)).await {
                    Ok((_, d)) => {
                        p.ok += 1;
                        p.max = p.max.max(d);
                    }
                    Err(_) => p.failed += 1,
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            p
        })
    };
    let cpu0 = relay.usage().cpu_secs;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let during = negotiate(&relay.url, 1, limit).await;
    let rest = o.duration.saturating_sub(started.elapsed());
    tokio::time::sleep(rest).await;
    let cpu_during = (relay.usage().cpu_secs - cpu0) / started.elapsed().as_secs_f64().max(1e-3);
    watching.store(false, Ordering::Relaxed);
    let _ = stop_tx.send(true);
    let peak = sampler.await.map_err(|e| e.to_string())?;
    let healthz = prober.await.map_err(|e| e.to_string())?;

    // The attacker sends nothing more but keeps its sockets: the relay must close them.
    // A legacy relay has its fixed 10 s deadlines.
    let deadline = if o.legacy {
        Duration::from_secs(10)
    } else {
        o.deadline
    };
    let (settled_in, after) = settle(
        &relay,
        Some(before.fds + FD_SLACK),
        deadline + Duration::from_secs(5),
    )
    .await;
    let log_bytes = relay.log_bytes() - log0;
    let log_secs = started.elapsed().as_secs_f64();
    let _ = release_tx.send(true);
    for a in attackers {
        let _ = tokio::time::timeout(Duration::from_secs(5), a).await;
    }
    let after_negotiation = negotiate(&relay.url, 2, limit).await;
    let (metrics, metrics_error) = match relay.metrics().await {
        Ok(m) => (m, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    relay.kill().await;
    Ok(AttackReport {
        attack,
        before,
        peak,
        cpu_during,
        after,
        settled_in,
        healthz,
        baseline,
        during,
        after_negotiation,
        attacker_connections: opened.load(Ordering::Relaxed),
        connections: attack.connections(o),
        frames_sent: tally.frames.load(Ordering::Relaxed),
        registered: tally.registered.load(Ordering::Relaxed),
        registration_limited: tally.registration_limited.load(Ordering::Relaxed),
        log_bytes,
        log_secs,
        metrics,
        metrics_error,
        deadline,
    })
}

/// Waits until the relay's descriptors are at most `target` (`None`: until they stop
/// changing for half a second), `limit` at most: how long it took (`None`: not within
/// `limit`) and its usage then.
async fn settle(
    relay: &RelayChild,
    target: Option<usize>,
    limit: Duration,
) -> (Option<Duration>, Usage) {
    let t = Instant::now();
    let mut last = relay.usage();
    let mut stable_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let u = relay.usage();
        let done = match target {
            Some(max) => u.fds <= max,
            None => {
                if u.fds != last.fds {
                    stable_since = Instant::now();
                }
                stable_since.elapsed() >= Duration::from_millis(500)
            }
        };
        last = u;
        if done {
            return (Some(t.elapsed()), u);
        }
        if t.elapsed() > limit {
            return (None, u);
        }
    }
}

/// A way to stay connected after the WebSocket upgrade without authenticating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterUpgrade {
    /// Send nothing.
    Silent,
    /// Send a protocol `ping` frame every 200 ms.
    ProtocolPings,
    /// Send a WebSocket ping every 200 ms.
    WebSocketPings,
}

/// Upgrades a connection to the relay at `url` and then never authenticates: how long the
/// relay took to close it (an error if it did not within `limit`).
pub async fn time_to_auth_close(
    url: &str,
    how: AfterUpgrade,
    limit: Duration,
) -> Result<Duration, BenchError> {
    use a2acp_core::link::ClientFrame;
    use async_tungstenite::tungstenite::{Bytes, Message};
    use futures_util::StreamExt;
    let ws = crate::ws::connect(url).await.map_err(|e| e.to_string())?;
    let t = Instant::now();
    let (mut sink, mut source) = ws.split();
    let closed = async {
        while let Some(Ok(m)) = source.next().await {
            if matches!(m, Message::Close(_)) {
                break;
            }
        }
    };
    let pinger = async {
        let mut n = 0u64;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            n += 1;
            let m = match how {
                AfterUpgrade::Silent => continue,
                AfterUpgrade::ProtocolPings => {
                    let text =
                        String::from_utf8(ClientFrame::Ping { n }.to_bytes()).unwrap_or_default();
                    Message::Text(text.into())
                }
                AfterUpgrade::WebSocketPings => {
                    Message::Ping(Bytes::from(n.to_le_bytes().to_vec()))
                }
            };
            if sink.send(m).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::time::timeout(limit, async {
        tokio::select! {
            _ = closed => {}
            _ = pinger => {}
        }
    })
    .await
    .map_err(|_| format!("{how:?}: still open after {} ms", limit.as_millis()))?;
    Ok(t.elapsed())
}

/// Runs `a2acp bench attack`: every attack asked for, one fresh relay each, and a table.
pub async fn run(a: AttackArgs) -> Result<(), BenchError> {
    let exe = match (&a.relay_bin, a.runtime.as_str()) {
        (Some(p), _) => p.clone(),
        (None, "tokio") => std::env::current_exe().map_err(|e| e.to_string())?,
        (None, "smol") => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("a2acp-smol"),
        (None, other) => return Err(format!("--runtime {other}: tokio or smol")),
    };
    let attacks = if a.attacks.is_empty() {
        Attack::ALL.to_vec()
    } else {
        a.attacks.clone()
    };
    let o = AttackOptions {
        fd_limit: a.fd_limit,
        connections: a.connections,
        duration: Duration::from_secs(a.duration.max(2)),
        deadline: Duration::from_millis(a.deadline_ms.max(100)),
        per_ip_cap: a.per_ip_cap,
        frame_connections: a.frame_connections,
        legacy: a.legacy,
    };
    println!(
        "a2acp bench attack: relay {} under ulimit -n {}, {} hostile connections for {} s, upgrade and auth deadlines {} ms{}{}",
        exe.display(),
        o.fd_limit,
        o.connections,
        o.duration.as_secs(),
        o.deadline.as_millis(),
        if attacks.contains(&Attack::IpFlood) {
            format!(", ip-flood against --max-connections-per-ip {}", o.per_ip_cap)
        } else {
            String::new()
        },
        if attacks.iter().any(|a| a.frame_level()) {
            format!(
                ", frame-level attacks with {} WebSocket connections",
                o.frame_connections
            )
        } else {
            String::new()
        }
    );
    print!("{TABLE_HEADER}");
    let mut failed = 0;
    for attack in attacks {
        let r = run_attack(&exe, attack, &o).await?;
        println!("{}", r.row());
        for p in r.problems() {
            failed += 1;
            println!("  problem: {p}");
        }
    }
    if failed > 0 {
        return Err(format!("{failed} problems"));
    }
    Ok(())
}

/// The attack settings of the integration tests: the relay under `ulimit -n 256` (so a
/// total cap of 192), 300 hostile connections (beyond the descriptor limit), 5 s of
/// attack, 2 s deadlines, a per-source cap of 32 for the ip-flood.
pub fn test_options() -> AttackOptions {
    AttackOptions {
        fd_limit: 256,
        connections: 300,
        duration: Duration::from_secs(5),
        deadline: Duration::from_secs(2),
        per_ip_cap: 32,
        frame_connections: 32,
        legacy: false,
    }
}

/// Runs `attack` against the relay binary `exe` with [`test_options`]: its report, or
/// its problems ([`AttackReport::problems`]) with the table row.
pub async fn check_attack(exe: &Path, attack: Attack) -> Result<AttackReport, BenchError> {
    let r = run_attack(exe, attack, &test_options()).await?;
    eprintln!("{TABLE_HEADER}{}", r.row());
    let p = r.problems();
    if p.is_empty() {
        Ok(r)
    } else {
        Err(format!("{}: {}\n{}", attack.name(), p.join("; "), r.row()))
    }
}

/// The relay binary `exe` with a 1 s `--auth-timeout` closes an upgraded connection that
/// never authenticates — silent, sending protocol pings, or sending WebSocket pings — in
/// about that time (between 0.9 s and 4 s): how long each took.
pub async fn check_auth_deadline(exe: &Path) -> Result<Vec<(AfterUpgrade, Duration)>, BenchError> {
    let flags = ["--auth-timeout", "1s"].map(String::from);
    let relay = RelayChild::spawn(exe, 256, &flags).await?;
    let mut out = Vec::new();
    for how in [
        AfterUpgrade::Silent,
        AfterUpgrade::ProtocolPings,
        AfterUpgrade::WebSocketPings,
    ] {
        let d = time_to_auth_close(&relay.url, how, Duration::from_secs(6)).await?;
        if d < Duration::from_millis(900) || d > Duration::from_secs(4) {
            return Err(format!("{how:?}: closed after {} ms", d.as_millis()));
        }
        out.push((how, d));
    }
    relay.kill().await;
    Ok(out)
}

/// The relay binary `exe` with `--max-connections-per-ip 2 --max-connections 3` and a 1 s
/// `--upgrade-timeout`: a third connection from one source is answered `503` and closed
/// at once while two are open; at the total cap a silent connection makes room for a new
/// one (and is closed); a half-open connection is closed by the deadline; a FIN is
/// noticed at once; and `/metrics` counts each.
pub async fn check_caps_and_deadline(exe: &Path) -> Result<(), BenchError> {
    let flags = [
        "--max-connections-per-ip",
        "2",
        "--max-connections",
        "3",
        "--upgrade-timeout",
        "1s",
    ]
    .map(String::from);
    let relay = RelayChild::spawn(exe, 256, &flags).await?;
    let a = IpAddr::V4(Ipv4Addr::new(127, 0, 3, 1));
    let b = IpAddr::V4(Ipv4Addr::new(127, 0, 3, 2));
    let closed_within = |mut s: TcpStream, d: Duration| async move {
        let mut got = Vec::new();
        let r = tokio::time::timeout(d, s.read_to_end(&mut got)).await;
        (r.is_ok(), String::from_utf8_lossy(&got).into_owned())
    };
    // Per source: the third is refused at once.
    let a1 = connect_from(a, relay.addr).await?;
    let mut a2 = connect_from(a, relay.addr).await?;
    a2.write_all(b"GET /").await.map_err(|e| e.to_string())?;
    let a3 = connect_from(a, relay.addr).await?;
    let (closed, text) = closed_within(a3, Duration::from_millis(500)).await;
    if !closed || !text.starts_with("HTTP/1.1 503") {
        return Err(format!(
            "third connection from one source: closed {closed}, `{text}`"
        ));
    }
    // Total cap (3): a new connection from another source closes the oldest one with an
    // incomplete request head (a1, silent) to make room.
    let b1 = connect_from(b, relay.addr).await?;
    let b2 = connect_from(b, relay.addr).await?;
    let (closed, _) = closed_within(a1, Duration::from_millis(500)).await;
    if !closed {
        return Err(
            "the oldest connection with an incomplete head was not closed to make room".into(),
        );
    }
    // The deadline closes a half-open connection (a2, 5 bytes then silence) and silent
    // ones (b1, b2) after 1 s.
    let t = Instant::now();
    let (c1, _) = closed_within(a2, Duration::from_secs(3)).await;
    let (c2, _) = closed_within(b1, Duration::from_secs(3)).await;
    let (c3, _) = closed_within(b2, Duration::from_secs(3)).await;
    if !(c1 && c2 && c3) || t.elapsed() < Duration::from_millis(300) {
        return Err(format!(
            "the 1 s deadline: closed {c1} {c2} {c3} after {} ms",
            t.elapsed().as_millis()
        ));
    }
    // A FIN after a partial request is noticed at once.
    let mut f = connect_from(b, relay.addr).await?;
    f.write_all(b"GET /").await.map_err(|e| e.to_string())?;
    f.shutdown().await.map_err(|e| e.to_string())?;
    let (closed, _) = closed_within(f, Duration::from_millis(500)).await;
    if !closed {
        return Err("a FIN after five bytes was not noticed at once".into());
    }
    let m = relay.metrics().await?;
    for (name, min) in [
        ("a2acp_relay_connections_refused_per_ip_total", 1.0),
        ("a2acp_relay_connections_evicted_total", 1.0),
        ("a2acp_relay_upgrade_timeouts_total", 3.0),
    ] {
        if metric(&m, name) < min {
            return Err(format!("{name} < {min}: {m:?}"));
        }
    }
    relay.kill().await;
    Ok(())
}

/// The attack tests of one relay binary (`tests/attacks.rs` of each runtime): one test per
/// [`Attack`], the authentication deadline over a real socket, and the caps. `$relay` is
/// the binary's path, e.g. `env!("CARGO_BIN_EXE_a2acp")`; the calling crate needs `tokio`
/// (with its `macros` and `rt-multi-thread` features) as a dev-dependency.
#[macro_export]
macro_rules! relay_attack_tests {
    ($relay:expr) => {
        async fn attack(a: $crate::bench_attack::Attack) {
            let relay = ::std::path::Path::new($relay);
            if let Err(e) = $crate::bench_attack::check_attack(relay, a).await {
                panic!("{e}");
            }
        }

        $crate::relay_attack_tests!(@attack
            garbage_bytes: Garbage,
            slowloris: Slowloris,
            half_open_beyond_the_fd_limit: HalfOpen,
            half_open_with_fin_beyond_the_fd_limit: HalfOpenFin,
            flood_from_one_source: IpFlood,
            junk_frame_flood: JunkFlood,
            ping_flood: PingFlood,
            registration_flood: RegistrationFlood,
        );

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn auth_deadline_fires_over_a_real_socket() {
            let r = $crate::bench_attack::check_auth_deadline(::std::path::Path::new($relay)).await;
            assert!(r.is_ok(), "{r:?}");
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn caps_refuse_make_room_and_the_deadline_closes() {
            let r =
                $crate::bench_attack::check_caps_and_deadline(::std::path::Path::new($relay)).await;
            assert!(r.is_ok(), "{r:?}");
        }
    };
    (@attack $($name:ident: $attack:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                attack($crate::bench_attack::Attack::$attack).await;
            }
        )*
    };
}
