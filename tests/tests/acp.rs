//! ACP (seed 004) between an a2acp agent and an ACP agent that knows only the seed and
//! SPEC-NOTES / docs/protocol.md: `tests/acp/client.py` (PyNaCl, `nats-py`, `rfc8785`),
//! through the relay's gateway and a real NATS server, on each runtime.
//!
//! - The ACP agent `beta` initiates: the four-step handshake, the seed's §8 request
//!   (`get-availability`) answered by Alice's agent with its thread, a notification, and
//!   a handoff that Alice's agent continues as a thread of its own.
//! - Alice's agent initiates (`thread start --to acp:beta`): the handshake, its request,
//!   and the §8 response (`available_slots`) continuing her thread.
//! - Both audit logs (Alice's hash-chained one, the client's JSONL), and Alice's
//!   transparency summaries posted to a real HTTP receiver.
//! - Hostile messages: each header missing or malformed, a bad signature, not JSON, too
//!   large (refused by the gateway, naming the header), a request before the handshake,
//!   a replayed id, a stale timestamp (refused by Alice's agent with the seed's codes),
//!   and a flood — none of them written to Alice's audit log as a message.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use a2acp_runtime::acp::AcpFile;
use a2acp_runtime::audit_log::{self, Filter};
use a2acp_runtime::control::{Recipients, Request};
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_runtime::transparency::{ChannelKind, TransparencyConfig};
use a2acp_tests::nats::NatsCluster;
use a2acp_tests::webhook::Receiver;
use a2acp_tests::*;
use serde_json::{json, Value};

per_runtime!(
    #[ignore = "needs nats-server and the ACP client's venv (PyNaCl, nats-py, rfc8785): bash .ci/test-deps"]
    an_acp_agent_and_an_a2acp_agent_both_ways,
    hostile_acp_messages_are_refused
);

/// The client reads docs/protocol.md's worked example as a2acp writes it: the same
/// signature, the same body out of the encrypted one.
#[test]
#[ignore = "needs the ACP client's venv (PyNaCl, nats-py, rfc8785): bash .ci/test-deps"]
fn the_client_agrees_with_the_worked_example() {
    let out = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("acp/worked_example.py"))
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stdout.starts_with(b"ok"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The client's Python.
fn python() -> std::path::PathBuf {
    venv_python("acp", "A2ACP_ACP_PYTHON")
}

fn client() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("acp/client.py")
}

/// Runs the client's `scenario` to its end: its JSON result.
fn run_client(scenario: &str, gateway: &str, nats: &str, home: &Path, extra: &[&str]) -> Value {
    // As `beta`.
    let out = Command::new(python())
        .arg(client())
        .args([
            scenario,
            "--gateway",
            gateway,
            "--nats",
            nats,
            "--me",
            "beta",
        ])
        .args(["--peer", "alice", "--home"])
        .arg(home)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "client {scenario} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("")).unwrap()
}

/// NATS, a relay node with the gateway, Alice's agent speaking ACP (auto-answering as in
/// the dinner), the webhook receiver of her transparency channel.
struct Setting {
    _nats: NatsCluster,
    _relay: Relay,
    alice: RtAgent,
    home: a2acp_runtime::home::Home,
    gateway: String,
    nats_url: String,
    hook: Receiver,
    dir: tempfile::TempDir,
}

async fn setting(rt: Runtime) -> Setting {
    let dir = tmp();
    let nats = NatsCluster::start(&dir.path().join("nats"), 1);
    nats.wait_ready(Duration::from_secs(30));
    let gateway_addr = free_addr();
    let relay = rt.acp_gateway_relay(&nats, &gateway_addr).await;
    let homes = dinner_homes(dir.path(), &relay.url());
    let hook = Receiver::answering();
    let gateway = format!("http://{gateway_addr}");
    let nats_url = nats.url(0);
    edit_config(&homes.alice, |f| {
        f.acp = Some(AcpFile {
            gateway: gateway.clone(),
            nats: vec![nats_url.clone()],
            principal_id: "principal-alice".into(),
            agent_id: None,
            gateway_ca: None,
            known_principals: vec![],
            layers: None,
        });
        let mut t = TransparencyConfig::new(ChannelKind::Webhook);
        t.url = Some(hook.url("/hook"));
        t.max_per_minute = 600;
        f.transparency = Some(t);
    });
    let alice = rt.agent(&homes.alice, "alice", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    Setting {
        _nats: nats,
        _relay: relay,
        alice,
        home: homes.alice,
        gateway,
        nats_url,
        hook,
        dir,
    }
}

/// Alice's audit log, every entry.
fn alice_log(home: &a2acp_runtime::home::Home) -> Vec<Value> {
    audit_log::list(&home.dir().join(audit_log::DIR), &Filter::default()).unwrap_or_default()
}

fn methods(entries: &[Value], direction: &str) -> Vec<String> {
    entries
        .iter()
        .filter(|e| {
            e["direction"] == direction
                && e["channel"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("nats:agent."))
        })
        .map(|e| e["method"].as_str().unwrap_or("").to_string())
        .collect()
}

async fn an_acp_agent_and_an_a2acp_agent_both_ways(rt: Runtime) {
    let s = setting(rt).await;
    let beta_home = s.dir.path().join("beta");

    // 1. The ACP agent initiates: handshake, §8 request, notification, handoff.
    let (gateway, nats, home) = (s.gateway.clone(), s.nats_url.clone(), beta_home.clone());
    let out =
        tokio::task::spawn_blocking(move || run_client("initiate", &gateway, &nats, &home, &[]))
            .await
            .unwrap();
    assert_eq!(out["established"], json!(true), "{out}");
    let answer = &out["request"]["result"];
    let thread = answer["thread_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{out}"));
    assert!(answer["state"].is_string(), "{out}");
    assert!(
        answer["packets"].as_array().is_some_and(|p| !p.is_empty()),
        "{out}"
    );
    assert_eq!(out["notification_status"], json!(202), "{out}");
    let handed = &out["handoff"]["result"];
    let handoff_thread = handed["thread_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{out}"));
    assert_ne!(handoff_thread, thread);
    // Alice's agent holds both threads with the ACP peer; the handoff's carries what the
    // handoff said, and her agent asked beta for none of it.
    let shown = s
        .alice
        .ask(Request::Thread {
            id: handoff_thread.to_string(),
        })
        .await;
    let text = shown.data.to_string();
    assert!(text.contains("the canteen"), "{text}");
    assert!(
        !text.contains("\"field\":\"location_preference\""),
        "{text}"
    );

    // 2. Alice's agent initiates: `thread start --to acp:gamma`, another ACP agent (a
    // fresh one: Alice's agent knows nothing of it until it looks its key up).
    let (gateway, nats, home) = (
        s.gateway.clone(),
        s.nats_url.clone(),
        s.dir.path().join("gamma"),
    );
    let mut responder = KilledOnDrop(
        Command::new(python())
            .arg(client())
            .args([
                "respond",
                "--gateway",
                &gateway,
                "--nats",
                &nats,
                "--me",
                "gamma",
            ])
            .args(["--peer", "alice", "--serve-for", "20", "--home"])
            .arg(&home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let stdout = responder.0.stdout.take().unwrap();
    let (lines_tx, lines) = flume::unbounded::<String>();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(l);
        }
    });
    let ready = lines.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(ready.contains("ready"), "{ready}");
    let r = s
        .alice
        .ask(Request::StartThread {
            to: Recipients::from_list(vec!["acp:gamma".into()]),
            category: "scheduling".into(),
            summary: "get-availability".into(),
            context: Some(
                json!({"date_range": "2026-02-17/2026-02-21", "duration_minutes": 60})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
            urgent: false,
            quorum: None,
            sequential: false,
        })
        .await;
    assert!(r.ok, "{r:?}");
    let mine = r.data["thread_id"].as_str().unwrap().to_string();
    let got = lines.recv_timeout(Duration::from_secs(30)).unwrap();
    let got: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(got["request"]["action"], json!("get-availability"), "{got}");
    assert_eq!(
        got["request"]["parameters"]["duration_minutes"],
        json!(60),
        "{got}"
    );
    assert_eq!(got["request"]["thread_id"], json!(mine), "{got}");
    // beta's §8 response continues Alice's thread.
    eventually(20, "the available slots in Alice's thread", || async {
        let t = s.alice.ask(Request::Thread { id: mine.clone() }).await;
        t.data
            .to_string()
            .contains("2026-02-19T14:00:00Z")
            .then_some(())
    })
    .await;

    // 3. The audit logs. Alice's: every handshake step both ways, the requests, the
    // responses, the notification, the handoff; the chain intact.
    let log = alice_log(&s.home);
    let received = methods(&log, "received");
    let sent = methods(&log, "sent");
    for m in [
        "agent.announce",
        "agent.capabilities",
        "agent.request",
        "agent.notification",
        "agent.handoff",
    ] {
        assert!(
            received.contains(&m.to_string()),
            "received {m}: {received:?}"
        );
    }
    for m in [
        "agent.announce",
        "agent.capabilities",
        "agent.request",
        "response",
    ] {
        assert!(sent.contains(&m.to_string()), "sent {m}: {sent:?}");
    }
    let verified = audit_log::verify(&s.home.dir().join(audit_log::DIR));
    assert!(verified.as_ref().is_ok_and(|v| v.lines > 0), "{verified:?}");
    // The clients' own logs (seed 004 §6 schema) hold both directions.
    let mut theirs: Vec<Value> = Vec::new();
    for who in ["beta", "gamma"] {
        let text = std::fs::read_to_string(s.dir.path().join(who).join("audit.jsonl")).unwrap();
        theirs.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    for (d, m) in [
        ("sent", "agent.request"),
        ("received", "response"),
        ("received", "agent.request"),
        ("sent", "response"),
    ] {
        assert!(
            theirs
                .iter()
                .any(|e| e["direction"] == d && e["method"] == m),
            "{d} {m}"
        );
    }
    for e in &theirs {
        for k in [
            "ts",
            "direction",
            "from",
            "to",
            "type",
            "method",
            "summary",
            "channel",
        ] {
            assert!(e.get(k).is_some(), "{k} in {e}");
        }
    }
    // Alice's transparency channel: summaries of what her agent sent over ACP.
    eventually(10, "ACP summaries at the webhook", || async {
        s.hook
            .requests()
            .iter()
            .any(|r| r.body.contains("beta"))
            .then_some(())
    })
    .await;
    drop(responder);
}

async fn hostile_acp_messages_are_refused(rt: Runtime) {
    let s = setting(rt).await;
    let beta_home = s.dir.path().join("beta");
    let before = alice_log(&s.home).len();
    let (gateway, nats, home) = (s.gateway.clone(), s.nats_url.clone(), beta_home.clone());
    let out = tokio::task::spawn_blocking(move || {
        run_client("hostile", &gateway, &nats, &home, &["--flood", "40"])
    })
    .await
    .unwrap();
    // A request before the handshake: the gateway passes it (signed by a registered
    // agent), Alice's agent refuses it with -32005.
    assert_eq!(out["early"]["status"], json!(202), "{out}");
    assert_eq!(out["early"]["code"], json!(-32005), "{out}");
    for h in [
        "agent-id",
        "principal-id",
        "timestamp",
        "message-type",
        "trust-layer-version",
        "skill-layers-loaded",
    ] {
        let missing = &out["missing"][h];
        assert_eq!(missing[0], json!(400), "{h}: {missing}");
        assert_eq!(missing[1]["error"]["code"], json!(-32001), "{h}: {missing}");
        assert_eq!(missing[1]["error"]["header"], json!(h), "{h}: {missing}");
        let malformed = &out["malformed"][h];
        assert!(
            malformed[0]
                .as_u64()
                .is_some_and(|c| (400..500).contains(&c)),
            "{h}: {malformed}"
        );
    }
    assert_eq!(out["bad_signature"][0], json!(401), "{out}");
    assert_eq!(out["too_large"], json!(413), "{out}");
    assert_eq!(out["not_json"][0], json!(400), "{out}");
    // After the handshake: a request answered; the same id again, and a stale
    // timestamp, refused as replays.
    assert!(out["first"]["result"]["thread_id"].is_string(), "{out}");
    assert_eq!(out["replay"]["error"]["code"], json!(-32006), "{out}");
    assert_eq!(out["stale"]["error"]["code"], json!(-32006), "{out}");
    // The flood: every answer is 202 or 429, and the gateway held some back.
    let flood: Vec<u64> = out["flood"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(flood.len(), 40);
    assert!(flood.iter().all(|c| *c == 202 || *c == 429), "{flood:?}");
    // Alice's audit log holds the exchanges of the handshake and the one request, not the
    // refused messages.
    let log = alice_log(&s.home);
    let received: Vec<&Value> = log[before..]
        .iter()
        .filter(|e| e["direction"] == "received" && e["method"] == "agent.request")
        .collect();
    assert_eq!(received.len(), 1, "{received:?}");
    let _ = s.alice.ask(Request::Status).await;
}
