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
//! [`Attack`] variant and its arms: its name and place in [`Attack::ALL`], its source
//! address and relay flags (this file), what one hostile connection does with its
//! connected TCP stream from `Attack::drive` (`bytes.rs` for the attacks below the
//! WebSocket protocol; `frames.rs` for those that complete the WebSocket handshake over
//! it, e.g. with `a2acp_runtime::ws::handshake` over a `TokioAdapter`), and the defence
//! expected of the relay in [`AttackReport::problems`] (`report.rs`); the harness
//! (`harness.rs`) does the rest (reconnecting, measuring, probing, the honest
//! negotiation, the table).

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::watch;

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

mod bytes;
mod checks;
mod frames;
mod harness;
mod honest;
mod relay_child;
mod report;

pub use checks::*;
use frames::flood_registrations;
pub use harness::*;
pub use honest::*;
pub use relay_child::*;
pub use report::*;
