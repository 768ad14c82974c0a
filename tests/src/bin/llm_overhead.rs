//! The model client's overhead per call against a bare HTTP round trip to the same server
//! (a figure of issue 14, not a test): `llm_overhead URL [N]` sends N (default 20) times
//! the same small chat completion (one short layer, `max_tokens` 1, the decision schema
//! as the response format) through the agents' client (`LlmClient`: a thread per call, the answer on a channel) and, alternating with it,
//! the very same body over a bare `TcpStream` (no client library, no JSON parsing),
//! then prints both medians and their difference. `URL` is the base URL, e.g.
//! `http://127.0.0.1:8080/v1` (`tests/llm/serve.py`, or `llm_server` with model `ok`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use a2acp_core::agent::{LlmLayer, LlmRequest, ModelTier};
use a2acp_runtime::llm::{request_body, LlmClient, LlmConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(url) = args.get(1) else {
        eprintln!("usage: llm_overhead URL [N]");
        std::process::exit(2);
    };
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
    let mut config = LlmConfig::new(url, "smollm2-135m");
    config.max_tokens = 1;
    config.retries = 0;
    let req = LlmRequest {
        id: 1,
        thread_id: "thr_overhead".into(),
        attempt: 1,
        tier: ModelTier::Small,
        layers: vec![LlmLayer {
            name: "protocol".into(),
            content: "Answer with one JSON object.".into(),
            untrusted: false,
        }],
        schema: serde_json::json!({"type": "object", "properties": {"decision": {"type": "string"}}}),
        previous_error: None,
    };
    let llm = LlmClient::new(config.clone());
    let replies = llm.replies();
    let body = request_body(&config, &req, "smollm2-135m").to_string();
    let rest = url
        .strip_prefix("http://")
        .expect("an http:// URL (the bare client speaks plain HTTP/1.1)");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let path =
        format!("/{}/chat/completions", path.trim_end_matches('/')).replace("//chat", "/chat");
    let bare = || {
        let started = Instant::now();
        let mut s = TcpStream::connect(authority).expect("connect");
        write!(
            s,
            "POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        assert!(
            out.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        started.elapsed()
    };
    let (mut client, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let started = Instant::now();
        llm.submit(req.clone());
        let reply = replies.recv().expect("a reply");
        client.push(started.elapsed());
        if let Err(e) = reply.result {
            eprintln!("client call failed: {e}");
            std::process::exit(1);
        }
        raw.push(bare());
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (c, r) = (median(&mut client), median(&mut raw));
    println!(
        "{n} calls each: client median {:.2} ms, bare HTTP median {:.2} ms, overhead {:.2} ms per call",
        c.as_secs_f64() * 1e3,
        r.as_secs_f64() * 1e3,
        (c.as_secs_f64() - r.as_secs_f64()) * 1e3
    );
}
