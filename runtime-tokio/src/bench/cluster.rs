//! `a2acp bench cluster`: the same open-loop load as `bench relay --rate` (authenticated
//! agents on loopback sending signed, encrypted packets to random peers) through, in one
//! run:
//!
//! 1. one relay on SQLite (`--sync full`), the baseline;
//! 2. `--nodes` relay nodes on the NATS cluster given (`--nats`), the agents spread over
//!    the nodes, each packet to a random peer (on any node);
//! 3. the same with every packet crossing nodes (its recipient on another node than its
//!    sender).
//!
//! For each: packets routed per second, p50/p99 from a `send` leaving its sender to its
//! `deliver` reaching the recipient, and the CPU per packet of the relay processes and
//! of the NATS servers on this machine (every process named `nats-server`, from `/proc`).
//! The NATS cluster is the operator's (docs/relay.md "A cluster of relays" shows three
//! servers on one machine): the bench does not start it.

use std::time::Duration;

use tokio::process::Child;

use super::relay::{drive_relay, prebuild, register, spawn_child, UNLIMITED};
use super::usage::{CpuMark, CpuUse};
use super::{BenchArgs, BenchError};

/// Benchmark arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterBenchArgs {
    /// The NATS servers (comma-separated `nats://HOST:PORT`), JetStream with
    /// `sync_interval: always`.
    #[arg(long, value_delimiter = ',', required = true)]
    pub nats: Vec<String>,
    /// Relay nodes in the cluster runs.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Authenticated agents sending.
    #[arg(long, default_value_t = 300)]
    pub agents: usize,
    /// Total packets offered per second.
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    /// Seconds of measurement per run (after one second of warm-up).
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Plaintext bytes per packet.
    #[arg(long, default_value_t = 2048)]
    pub payload: usize,
}

/// The relay arguments every run shares (with [`UNLIMITED`]).
const OPEN: &[&str] = &["--listen", "127.0.0.1:0", "--domain", "localhost"];

/// Runs `a2acp bench cluster`.
pub async fn run(a: ClusterBenchArgs) -> Result<(), BenchError> {
    let n = a.agents.max(2);
    let k = a.nodes.max(2);
    println!(
        "a2acp bench cluster: {n} agents, {} B payload, {} packets/s offered, {} s per run; cluster of {k} relay nodes on {}",
        a.payload,
        a.rate,
        a.duration,
        a.nats.join(",")
    );
    let dir = tempfile::Builder::new()
        .prefix("a2acp-clusterbench-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let data = dir.path().join("relay").display().to_string();
    let nats = a.nats.join(",");
    let runs: [(&str, usize, bool); 3] = [
        ("single node, SQLite", 1, false),
        ("cluster, spread", k, false),
        ("cluster, crossing", k, true),
    ];
    for (label, nodes, cross) in runs {
        let mut children: Vec<Child> = Vec::new();
        let mut urls = Vec::new();
        for i in 0..nodes {
            let mut args: Vec<String> = OPEN
                .iter()
                .chain(UNLIMITED)
                .map(|s| s.to_string())
                .collect();
            if nodes == 1 {
                args.extend([
                    "--data".into(),
                    data.clone(),
                    "--sync".into(),
                    "full".into(),
                ]);
            } else {
                let name = format!("bench{}", i + 1);
                args.extend(["--cluster".into(), nats.clone(), "--node".into(), name]);
            }
            let mut all = vec!["relay".to_string()];
            all.extend(args);
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            let (child, url) = spawn_child(&refs).await?;
            children.push(child);
            urls.push(url);
        }
        let pids: Vec<u32> = children.iter().filter_map(Child::id).collect();
        let payload = a.payload;
        let pick = if cross { nodes } else { 0 };
        // Every packet its own envelope: the cluster drops a second publish of the same
        // envelope (its signature is the packet's id), as it should a retry.
        let per_agent = (a.rate * (a.duration + 3)) as usize / n + 8;
        let prebuilt = tokio::task::spawn_blocking(move || prebuild(n, per_agent, payload, pick))
            .await
            .map_err(|e| e.to_string())?;
        let mut conns = Vec::with_capacity(n);
        for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
            let futs = chunk.iter().map(|&i| register(&urls[i % nodes], i));
            for r in futures_util::future::join_all(futs).await {
                conns.push(r?);
            }
        }
        let args = BenchArgs {
            agents: n,
            duration: a.duration,
            payload: a.payload,
            rate: Some(a.rate),
            window: 8,
            idle: 0,
            sync: "full".into(),
            no_baseline: true,
            offline: 0,
            growth: false,
        };
        // Every relay process and NATS server, over the same window as the run's count.
        let mut marked: Vec<u32> = pids.clone();
        let servers = if nodes > 1 {
            nats_servers()
        } else {
            Vec::new()
        };
        marked.extend(&servers);
        let window = a.duration;
        let cpu = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let marks: Vec<CpuMark> = marked.iter().map(|&p| CpuMark::new(p)).collect();
            tokio::time::sleep(Duration::from_secs(window.max(1))).await;
            marks.iter().map(CpuMark::since).collect::<Vec<CpuUse>>()
        });
        let fig = drive_relay(conns, prebuilt, &args, pids[0]).await;
        let cpu = cpu.await.map_err(|e| e.to_string())?;
        let relay_s: f64 = cpu[..pids.len()].iter().map(CpuUse::server_total).sum();
        let nats_s: f64 = cpu[pids.len()..].iter().map(CpuUse::server_total).sum();
        let per = |s: f64| 1e6 * s / fig.delivered.max(1) as f64;
        println!(
            "  {label:<22} {:>7.0} packets/s · p50 {:>6.2} ms · p99 {:>7.2} ms · CPU per packet: relays {:>6.1} µs{}",
            fig.per_sec,
            fig.p50_ms,
            fig.p99_ms,
            per(relay_s),
            if nodes > 1 {
                format!(
                    " + NATS {:.1} µs ({} servers) = {:.1} µs",
                    per(nats_s),
                    servers.len(),
                    per(relay_s + nats_s)
                )
            } else {
                String::new()
            }
        );
        for mut c in children {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }
    Ok(())
}

/// The pids of the processes named `nats-server` on this machine.
fn nats_servers() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            (comm.trim() == "nats-server").then_some(pid)
        })
        .collect()
}
