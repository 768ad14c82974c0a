//! Running one attack against a fresh relay and measuring it.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::bench::BenchError;

use super::*;

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
