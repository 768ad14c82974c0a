//! `a2acp bench relay --growth`: how the relay's cost grows with the agents connected and
//! with the recipients offline. Each case runs on a fresh relay child (`a2acp relay`,
//! `--sync` as given), open loop at one offered rate (`--rate`, default 2,000 packets/s)
//! so that every case does the same work per second, and prints one row: packets accepted
//! per second, the relay's CPU per packet accepted (and its split by kind of thread),
//! latency to the recipients online, and the relay's resident memory.
//!
//! The cases: 100, 1,000 and 10,000 agents all online; then 1,000 agents of which 1 %,
//! 10 % and 50 % register, disconnect and stay offline for the whole run, so that as many
//! percent of the packets are queued and never delivered (the queue grows through the
//! run; the online agents send, to recipients drawn among all agents).

use std::time::Instant;

use super::relay::{drive_relay, go_offline, prebuild, register_all, spawn_relay, BenchArgs};
use super::usage::rss_kib;
use super::BenchError;

/// Agents connected, and the percentage of them offline, of each case.
const CASES: [(usize, u32); 6] = [
    (100, 0),
    (1_000, 0),
    (10_000, 0),
    (1_000, 1),
    (1_000, 10),
    (1_000, 50),
];

/// Offered rate when `--rate` is not given.
const DEFAULT_RATE: u64 = 2_000;

/// Runs every case and prints the table.
pub(super) async fn run(a: BenchArgs) -> Result<(), BenchError> {
    let rate = a.rate.unwrap_or(DEFAULT_RATE);
    let args = BenchArgs {
        rate: Some(rate),
        idle: 0,
        ..a.clone()
    };
    println!(
        "a2acp bench relay --growth: {rate} packets/s offered (open loop), {} B payload, {} s \
         (+1 s warm-up) per case, relay commits: {}",
        a.payload, a.duration, a.sync
    );
    println!(
        "  {:>6} {:>7} {:>9} {:>9} {:>8} {:>32} {:>7} {:>7} {:>8}",
        "agents",
        "offline",
        "accepted",
        "delivered",
        "µs/pkt",
        "I/O · verify · state m. · commit",
        "p50 ms",
        "p99 ms",
        "RSS MiB"
    );
    for (n, offline) in CASES {
        if let Some(limit) = a2acp_runtime::admission::raise_fd_limit(Some((n + 64) as u64)) {
            if (n + 64) as u64 > limit {
                println!(
                    "  {n:>6} agents: {} descriptors needed, the open-files limit is {limit} \
                     (ulimit -n): skipped",
                    n + 64
                );
                continue;
            }
        }
        let row = case(&args, n, offline).await?;
        println!("{row}");
    }
    Ok(())
}

/// One case on a fresh relay: its table row.
async fn case(a: &BenchArgs, n: usize, offline: u32) -> Result<String, BenchError> {
    let dir = tempfile::Builder::new()
        .prefix("a2acp-bench-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let (mut relay, url) = spawn_relay(dir.path(), a, n).await?;
    let pid = relay.id().unwrap_or(0);
    let payload = a.payload;
    let t = Instant::now();
    let prebuilt = tokio::task::spawn_blocking(move || prebuild(n, 8, payload, 0))
        .await
        .map_err(|e| e.to_string())?;
    let built = t.elapsed();
    let t = Instant::now();
    let conns = register_all(&url, 0..n).await?;
    eprintln!(
        "  ({n} agents: envelopes built in {} ms, registered in {} ms)",
        built.as_millis(),
        t.elapsed().as_millis()
    );
    let (conns, prebuilt) = go_offline(conns, prebuilt, offline);
    let f = drive_relay(conns, prebuilt, a, pid).await;
    let rss = rss_kib(pid).unwrap_or(0);
    let _ = relay.start_kill();
    let _ = relay.wait().await;
    let secs = f.cpu.secs.max(1e-9);
    let per = |kind: &str| {
        let s: f64 = f
            .cpu
            .server
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, s)| s)
            .sum();
        1e6 * s / f.accepted.max(1) as f64
    };
    let split = format!(
        "{:.1} · {:.1} · {:.1} · {:.1}",
        per("I/O"),
        per("verify"),
        per("state machine"),
        per("commit")
    );
    Ok(format!(
        "  {:>6} {:>6}% {:>7.0}/s {:>7.0}/s {:>8.1} {:>32} {:>7.2} {:>7.2} {:>8.0}",
        n,
        offline.min(99),
        f.accepted as f64 / secs,
        f.delivered as f64 / secs,
        f.cpu.server_us_per(f.accepted),
        split,
        f.p50_ms,
        f.p99_ms,
        rss as f64 / 1024.0
    ))
}
