//! ACP (seed 004) per-message costs, printed as figures (µs per operation, the median of
//! runs of 100): writing and signing the seed's §8 request; a session receiving a signed
//! notification (parse, verify, replay cache, event), plain and with an encrypted body;
//! a whole signed request/response round trip between two established sessions (both
//! sides' signing and verifying, no transport).
//!
//! `cargo bench -p a2acp-core --bench acp` (`-- --test`, or `cargo test --benches`, runs
//! each once, for CI).

// Benches may read the clock; the crate's clippy.toml bans it for the sans-IO core only.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::Instant;

use a2acp_core::bridge::acp::{
    AcpConfig, AcpOutput, AcpSession, Headers, Kind, Message, MessageType, Method,
};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::time::Timestamp;
use serde_json::{json, Map, Value};

const T0: Timestamp = Timestamp(1_771_079_400_000);
const RUN: usize = 100;

fn body(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn pair() -> (AcpSession, AcpSession) {
    let ka = IdentityKey::from_seed([1; 32]);
    let kb = IdentityKey::from_seed([2; 32]);
    let mut a = AcpSession::new(
        AcpConfig::new("agent-alpha", "principal-a"),
        ka.clone(),
        [3; 32],
    );
    let mut b = AcpSession::new(
        AcpConfig::new("agent-beta", "principal-b"),
        kb.clone(),
        [4; 32],
    );
    a.register("agent-beta", kb.public());
    b.register("agent-alpha", ka.public());
    a.connect(T0, "agent-beta").expect("connect");
    pump(&mut a, &mut b);
    (a, b)
}

/// Delivers until nothing moves.
fn pump(a: &mut AcpSession, b: &mut AcpSession) {
    loop {
        let mut moved = false;
        while let Some(o) = a.poll_output() {
            moved = true;
            if let AcpOutput::Send { json, .. } = o {
                b.handle(T0, json.as_bytes());
            }
        }
        while let Some(o) = b.poll_output() {
            moved = true;
            if let AcpOutput::Send { json, .. } = o {
                a.handle(T0, json.as_bytes());
            }
        }
        if !moved {
            return;
        }
    }
}

/// Median µs per call of `f` over `runs` runs of [`RUN`] calls.
fn time(runs: usize, mut f: impl FnMut(usize)) -> f64 {
    let mut per: Vec<f64> = (0..runs)
        .map(|r| {
            let t = Instant::now();
            for i in 0..RUN {
                f(r * RUN + i);
            }
            t.elapsed().as_secs_f64() * 1e6 / RUN as f64
        })
        .collect();
    per.sort_by(f64::total_cmp);
    per[per.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`, `-- --test`
    // given alone) each figure is taken once, quickly.
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench");
    let runs = if quick { 1 } else { 15 };
    let key = IdentityKey::from_seed([1; 32]);
    let h = Headers {
        agent_id: "agent-alpha".into(),
        principal_id: "principal-a".into(),
        timestamp: "2026-02-14T14:30:00Z".into(),
        time: T0,
        message_type: MessageType::Request,
        trust_layer_version: "1.0.0".into(),
        skill_layers_loaded: vec![0, 1, 2, 3],
    };
    let ask = body(json!({"action": "get-availability",
        "parameters": {"date_range": "2026-02-17/2026-02-21", "duration_minutes": 60}}));
    let build = time(runs, |i| {
        let id = format!("req-{i}");
        black_box(
            Message::build(
                &Kind::Call(Method::Request),
                Some(&id),
                &h,
                Some(&ask),
                &key,
            )
            .expect("build"),
        );
    });
    let sample = Message::build(
        &Kind::Call(Method::Request),
        Some("r"),
        &h,
        Some(&ask),
        &key,
    )
    .expect("build");
    println!("acp: {} bytes per signed §8 request", sample.len());
    println!("acp: write and sign the §8 request: {build:.1} µs");

    for sensitive in [false, true] {
        let (mut a, mut b) = pair();
        let n = runs * RUN;
        let mut msgs = Vec::with_capacity(n);
        for i in 0..n {
            let mut note = ask.clone();
            note.insert("n".into(), json!(i));
            a.notify(T0, "agent-beta", &note, sensitive)
                .expect("notify");
            while let Some(o) = a.poll_output() {
                if let AcpOutput::Send { json, .. } = o {
                    msgs.push(json);
                }
            }
        }
        let receive = time(runs, |i| {
            b.handle(T0, msgs[i].as_bytes());
            while let Some(o) = b.poll_output() {
                black_box(o);
            }
        });
        let what = if sensitive { "encrypted" } else { "plain" };
        println!("acp: receive a signed notification ({what} body): {receive:.1} µs");
    }

    let (mut a, mut b) = pair();
    let answer = body(json!({"available_slots": ["2026-02-18T10:00:00Z"]}));
    let round = time(runs, |_| {
        let id = a.request(T0, "agent-beta", &ask, false).expect("request");
        while let Some(o) = a.poll_output() {
            if let AcpOutput::Send { json, .. } = o {
                b.handle(T0, json.as_bytes());
            }
        }
        while b.poll_output().is_some() {}
        b.respond(T0, "agent-alpha", &id, Ok(&answer), false)
            .expect("respond");
        while let Some(o) = b.poll_output() {
            if let AcpOutput::Send { json, .. } = o {
                a.handle(T0, json.as_bytes());
            }
        }
        while a.poll_output().is_some() {}
    });
    println!("acp: signed request/response round trip, both sides: {round:.1} µs");
}
