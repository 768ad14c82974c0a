//! The cost of TLS, `ws://` against `wss://` in the same run on tokio: the mean time of
//! one connection (TCP, TLS, WebSocket upgrade; 200 in a row), then connect + dinner of
//! two agents, alternating, `ROUNDS` rounds each (default 5); prints the medians and the
//! ratios. A measurement, not a check: `cargo bench -p a2acp-tests --bench wss_vs_ws`.

use std::path::Path;
use std::time::{Duration, Instant};

use a2acp_runtime::admission::AdmissionConfig;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_runtime::tls::{ClientTls, ServerTls};
use a2acp_tests::*;

#[path = "../tests/common/pki.rs"]
mod pki;
use pki::{pki, trust, Pki};

/// A relay on tokio, serving TLS with the PKI's leaf (`tls`) or plain `ws://`, with the
/// default connection caps and a 10 s HTTP-phase deadline.
async fn timing_relay(dir: &Path, p: &Pki, tls: bool) -> Relay {
    let conns = AdmissionConfig {
        upgrade_timeout: Duration::from_secs(10),
        ..AdmissionConfig::default()
    };
    let tls = tls.then(|| ServerTls::from_files(&p.cert, &p.key).unwrap());
    Runtime::Tokio
        .relay_tls("127.0.0.1:0", &dir.join("relay"), conns, tls)
        .await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let mut times: [Vec<(Duration, Duration)>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for (i, tls) in [false, true].into_iter().enumerate() {
            let d = dir.path().join(format!("r{round}-{i}"));
            let relay = timing_relay(&d, &p, tls).await;
            let DinnerHomes {
                bob_cfg,
                alice: ha,
                bob: hb,
                ..
            } = dinner_homes(&d, &relay.url());
            let bob_addr = bob_cfg.address.clone();
            if tls {
                trust(&ha, &p.ca);
                trust(&hb, &p.ca);
            }
            let start = Instant::now();
            let alice = Runtime::Tokio.agent(&ha, "alice", Some(ScriptedUser::dinner()));
            let bob = Runtime::Tokio.agent(&hb, "bob", Some(ScriptedUser::dinner()));
            wait_online(&alice).await;
            wait_online(&bob).await;
            let connected = start.elapsed();
            let start = Instant::now();
            dinner_completes(&alice, &bob, &hb, bob_addr).await;
            let dinner = start.elapsed();
            times[i].push((connected, dinner));
            alice.stop().await;
            bob.stop().await;
            relay.stop(true).await;
        }
    }
    // The handshakes alone: sequential connections (TCP, TLS with a fresh session each
    // time, WebSocket upgrade) to a relay, each closed again at once.
    let mut per_connect = Vec::new();
    for tls in [false, true] {
        let d = dir.path().join(format!("connects-{tls}"));
        let relay = timing_relay(&d, &p, tls).await;
        let client = ClientTls::new(Some(&p.ca)).unwrap();
        let n = 200u32;
        let start = Instant::now();
        for _ in 0..n {
            let ws = a2acp_tokio::ws::connect_with(&relay.url(), Some(&client))
                .await
                .unwrap();
            drop(ws);
        }
        per_connect.push(start.elapsed() / n);
        relay.stop(false).await;
    }
    println!(
        "one connection (TCP + TLS + WebSocket upgrade), mean of 200: ws:// {:.0} us, wss:// {:.0} us ({:.2}x)",
        per_connect[0].as_secs_f64() * 1e6,
        per_connect[1].as_secs_f64() * 1e6,
        per_connect[1].as_secs_f64() / per_connect[0].as_secs_f64()
    );
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let mut out = Vec::new();
    for (i, name) in ["ws://", "wss://"].iter().enumerate() {
        let mut c: Vec<Duration> = times[i].iter().map(|t| t.0).collect();
        let mut d: Vec<Duration> = times[i].iter().map(|t| t.1).collect();
        let mut t: Vec<Duration> = times[i].iter().map(|t| t.0 + t.1).collect();
        let (c, d, t) = (median(&mut c), median(&mut d), median(&mut t));
        println!(
            "{name:7} connect {:7.1} ms  dinner {:7.1} ms  total {:7.1} ms  (median of {rounds})",
            c.as_secs_f64() * 1e3,
            d.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e3
        );
        out.push((c, t));
    }
    println!(
        "wss/ws: connect {:.2}x, connect+dinner {:.2}x",
        out[1].0.as_secs_f64() / out[0].0.as_secs_f64(),
        out[1].1.as_secs_f64() / out[0].1.as_secs_f64()
    );
}
