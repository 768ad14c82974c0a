//! The Agentic Protocol service (seed 002, `agent run --agentic-listen`) measured with a
//! project of 100,000 packages: p50/p99 of `deposit` and `orient` at 100 and 1,000
//! requests/s offered (open loop, paced; latency from each request's scheduled time, so
//! a slow answer delays the ones behind it as a real client would see), against
//! `GET /v1/conformance` (no storage) at the same rate in the same run as the baseline;
//! `pull` relevant (full-text) latency at that size; export and import time and bytes
//! for the 100,000 packages.
//!
//! `cargo bench -p a2acp-tests --bench agentic` (`AGENTIC_BENCH_SECS=N` seconds per
//! rate, default 5; `AGENTIC_BENCH_PACKAGES=N`, default 100000).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2acp_core::bridge::agentic::Access;
use a2acp_core::memory::Package;
use a2acp_runtime::agentic::store::AgenticStore;
use a2acp_runtime::agentic::{AgenticLimits, AgenticOptions, Tokens};
use serde_json::{json, Map, Value};

const WORDS: [&str; 16] = [
    "venue",
    "dinner",
    "relay",
    "budget",
    "calendar",
    "reading",
    "friday",
    "station",
    "menu",
    "vegetarian",
    "taxi",
    "review",
    "booking",
    "shortlist",
    "weather",
    "parking",
];

fn package(project: &str, n: usize, at_ms: u64) -> Map<String, Value> {
    let w = |k: usize| WORDS[(n / k) % WORDS.len()];
    let v = json!({
        "package_id": format!("pkg_bench_{n:08}"),
        "project_id": project,
        "relay_version": "0.1",
        "title": format!("{} {} {} #{n}", w(1), w(7), w(31)),
        "status": "complete",
        "package_type": if n.is_multiple_of(10) { "decision" } else { "standard" },
        "review_type": "none",
        "created_at": a2acp_core::Timestamp::from_millis(at_ms).to_rfc3339(),
        "created_by": {"id": "bench", "type": "script"},
        "decisions_made": [format!("{} over {}", w(3), w(5))],
        "open_questions": if n.is_multiple_of(50) { json!([format!("{}?", w(11))]) } else { json!([]) },
        "handoff_note": format!("Next: {} then {}.", w(13), w(17)),
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

/// The i-th request of a run: method, path, body.
type MakeRequest = Arc<dyn Fn(u64) -> (String, String, Option<String>) + Send + Sync>;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Offers `rate` requests/s for `secs` from 8 client threads (keep-alive connections);
/// `make(i)` is the i-th request (method, path, body). Latencies in ms, sorted, and the
/// count that failed.
fn paced(base: &str, rate: u64, secs: u64, make: MakeRequest) -> (Vec<f64>, u64) {
    let total = rate * secs;
    let start = Instant::now() + Duration::from_millis(50);
    let lat = Arc::new(Mutex::new(Vec::with_capacity(total as usize)));
    let failed = Arc::new(Mutex::new(0u64));
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (lat, failed, next, make) =
                (lat.clone(), failed.clone(), next.clone(), make.clone());
            let base = base.to_string();
            std::thread::spawn(move || {
                let http: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .build()
                    .into();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= total {
                        return;
                    }
                    let at = start + Duration::from_nanos(i * 1_000_000_000 / rate);
                    if let Some(wait) = at.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let (method, path, body) = make(i);
                    let url = format!("{base}{path}");
                    let r = match (method.as_str(), body) {
                        ("POST", Some(b)) => http
                            .post(&url)
                            .header("content-type", "application/json")
                            .send(b),
                        _ => http.get(&url).call(),
                    };
                    let ok = match r {
                        Ok(mut r) => {
                            let s = r.status().as_u16();
                            let _ = r.body_mut().read_to_vec();
                            s < 300
                        }
                        Err(_) => false,
                    };
                    let ms = at.elapsed().as_secs_f64() * 1000.0;
                    if ok {
                        lat.lock().unwrap().push(ms);
                    } else {
                        *failed.lock().unwrap() += 1;
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut l = Arc::try_unwrap(lat).unwrap().into_inner().unwrap();
    l.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let f = *failed.lock().unwrap();
    (l, f)
}

fn main() {
    let secs: u64 = std::env::var("AGENTIC_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let n: usize = std::env::var("AGENTIC_BENCH_PACKAGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("agentic.db");
    let store = Arc::new(AgenticStore::open(&db).unwrap());
    let project = "agent:bob@example.org";
    let now = a2acp_runtime::now();
    let t = Instant::now();
    let base_ms = now.as_millis() - n as u64 * 1000;
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        let ps: Vec<Package> = chunk
            .iter()
            .map(|i| Package::from_body(package(project, *i, base_ms + *i as u64 * 1000)).unwrap())
            .collect();
        store.import_packages(&ps, now).unwrap();
    }
    println!(
        "filled {n} packages in {:.1} s ({} bytes on disk)",
        t.elapsed().as_secs_f64(),
        std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0)
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let opts = AgenticOptions {
        listen: "127.0.0.1:0".into(),
        tokens: Tokens::default(),
        db: db.clone(),
        limits: AgenticLimits::default(),
    };
    let (addr, _task) = rt
        .block_on(async { a2acp_tokio::agentic::start_with(opts, store.clone()) })
        .unwrap();
    let base = format!("http://{addr}");
    let enc = "agent%3Abob%40example.org";

    println!();
    println!(
        "{:>10} {:>14} {:>9} {:>9} {:>9} {:>7}",
        "offered/s", "operation", "done", "p50 ms", "p99 ms", "failed"
    );
    for rate in [100u64, 1000] {
        let ops: Vec<(&str, MakeRequest)> = vec![
            (
                "conformance",
                Arc::new(|_| ("GET".into(), "/v1/conformance".into(), None)),
            ),
            (
                "deposit",
                Arc::new(move |i| {
                    let mut p = package(
                        project,
                        10_000_000 + rate as usize * 100_000 + i as usize,
                        a2acp_runtime::now().as_millis(),
                    );
                    p.insert("package_id".into(), format!("pkg_dep_{rate}_{i}").into());
                    (
                        "POST".into(),
                        format!("/v1/projects/{enc}/packages"),
                        Some(Value::Object(p).to_string()),
                    )
                }),
            ),
            (
                "orient",
                Arc::new(move |_| ("GET".into(), format!("/v1/projects/{enc}/orient"), None)),
            ),
        ];
        let mut base_p = (0.0, 0.0);
        for (name, make) in ops {
            let (l, failed) = paced(&base, rate, secs, make);
            let (p50, p99) = (percentile(&l, 0.5), percentile(&l, 0.99));
            if name == "conformance" {
                base_p = (p50, p99);
            }
            println!(
                "{rate:>10} {name:>14} {:>9} {p50:>9.2} {p99:>9.2} {failed:>7}   ({:.1}× / {:.1}× the baseline)",
                l.len(),
                p50 / base_p.0,
                p99 / base_p.1
            );
        }
    }

    // pull relevant at this size.
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut l = Vec::new();
    for i in 0..200 {
        let q = format!("{}+{}", WORDS[i % 16], WORDS[(i * 7) % 16]);
        let t = Instant::now();
        let mut r = http
            .get(format!(
                "{base}/v1/projects/{enc}/packages?mode=relevant&limit=10&query={q}"
            ))
            .call()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let _ = r.body_mut().read_to_vec();
        l.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    l.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!();
    println!(
        "pull relevant over {} packages: p50 {:.2} ms, p99 {:.2} ms (200 queries, one at a time)",
        n,
        percentile(&l, 0.5),
        percentile(&l, 0.99)
    );

    // Export and import of the project.
    let t = Instant::now();
    let text = store.export_ndjson(&Access::Open, Some(project)).unwrap();
    let export_s = t.elapsed().as_secs_f64();
    let fresh = AgenticStore::open(&dir.path().join("imported.db")).unwrap();
    let t = Instant::now();
    let done = fresh.import_ndjson(&Access::Open, &text, now).unwrap();
    let import_s = t.elapsed().as_secs_f64();
    println!(
        "export: {} lines, {:.1} MB in {:.2} s; import: {} packages in {:.2} s",
        text.lines().count(),
        text.len() as f64 / 1e6,
        export_s,
        done.packages,
        import_s
    );
}
