//! The client direction of the A2A bridge (§18, seed 003) over real sockets: an a2acp
//! agent (`thread start --to http://…`) negotiates with a plain A2A agent built on the
//! official `a2a-sdk` server side (`tests/a2a/server.py`, a restaurant: input-required
//! once, then a proposal artifact), survives kill -9 in the middle, and never sends a
//! never_share value; and hostile A2A agents (a huge card, an answer that never ends, a
//! malformed task) end the thread in a defined state without hanging anything.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use a2acp_runtime::control::{Recipients, Request};
use a2acp_runtime::home::Home;
use a2acp_tests::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The a2a venv's interpreter (the tests that call it are ignored without `--run-ignored`).
fn python() -> PathBuf {
    venv_python("a2a", "A2ACP_A2A_PYTHON")
}

/// The a2a-sdk restaurant on a free port: the process and its base URL.
fn restaurant(python: &PathBuf, log: &std::path::Path) -> (KilledOnDrop, String) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("a2a/server.py");
    let mut child = std::process::Command::new(python)
        .arg(&script)
        .arg(log)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the a2a-sdk server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .strip_prefix("PORT ")
        .and_then(|p| p.trim().parse::<u16>().ok())
        .unwrap_or_else(|| panic!("the server said {line:?}"));
    (KilledOnDrop(child), format!("http://127.0.0.1:{port}"))
}

/// Alice (her profile answers the restaurant's questions: two guests, vegetarian) and the
/// a2a-sdk restaurant logging what reaches it.
struct Restaurant {
    _dir: tempfile::TempDir,
    _relay: Relay,
    alice: Home,
    log: PathBuf,
    server: KilledOnDrop,
    base: String,
}

impl Restaurant {
    async fn new(python: &PathBuf) -> Self {
        let dir = tmp();
        let relay = Runtime::Tokio
            .relay("127.0.0.1:0", &dir.path().join("relay"))
            .await;
        let DinnerHomes { alice, .. } = dinner_homes(dir.path(), &relay.url());
        edit_config(&alice, |f| {
            f.profile
                .insert("party_size".into(), toml::Value::Integer(2));
            f.profile.insert(
                "dietary_restrictions".into(),
                toml::Value::String("vegetarian".into()),
            );
        });
        let log = dir.path().join("received.jsonl");
        let (server, base) = restaurant(python, &log);
        Restaurant {
            _dir: dir,
            _relay: relay,
            alice,
            log,
            server,
            base,
        }
    }
}

const CHILD_ENV: &str = "A2ACP_TEST_A2A_CLIENT_CHILD_HOME";

/// Not a test by itself: the body of the child process of
/// `an_agent_negotiates_with_an_a2a_sdk_server` (Alice's agent, to be killed).
#[test]
fn child_alice() {
    let Some(home) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let h = run_agent(&Home::new(home), "alice", None);
        let _ = h.wait().await;
    });
}

fn spawn_alice(home: &Home) -> KilledOnDrop {
    KilledOnDrop(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_alice", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, home.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The open prompt of `kind` (`Consent`, `Resolution`) of the agent at `home`.
async fn prompt_of(home: &Home, kind: &str) -> Value {
    eventually(30, &format!("a {kind} prompt"), || async {
        let r = try_ctl(home, Request::Prompts).await?;
        r.data
            .as_array()?
            .iter()
            .find(|p| p["kind"].get(kind).is_some())
            .cloned()
    })
    .await
}

async fn thread_state(home: &Home, id: &str) -> Option<String> {
    let r = try_ctl(home, Request::Thread { id: id.into() }).await?;
    r.data["state"].as_str().map(str::to_string)
}

async fn wait_thread_state(home: &Home, id: &str, state: &str, secs: u64) {
    eventually(secs, &format!("thread {id} {state}"), || async {
        (thread_state(home, id).await.as_deref() == Some(state)).then_some(())
    })
    .await
}

fn start(to: &str, context: Value) -> Request {
    Request::StartThread {
        to: Recipients::from_list(vec![to.to_string()]),
        category: "scheduling".into(),
        summary: "Dinner for two on Friday".into(),
        context: context.as_object().cloned(),
        urgent: false,
        quorum: None,
        sequential: false,
    }
}

/// The issue's "Done when", the reverse direction: Alice's agent holds a negotiation with
/// an unmodified a2a-sdk server. It reads the card (the JSON-RPC interface among others),
/// sends the intent with the context its tiers allow, answers the server's input-required
/// after Alice consented (the never_share field it also asked for declined), and Alice's
/// confirmation of the proposal artifact ends the thread COMPLETED. Alice's agent is
/// killed (SIGKILL) while her consent prompt is open: the restarted agent asks her again
/// and answers the same remote task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official a2a-sdk: bash .ci/test-deps"]
async fn an_agent_negotiates_with_an_a2a_sdk_server() {
    let python = python();
    let Restaurant {
        _dir,
        _relay,
        alice: ha,
        log,
        server,
        base,
    } = Restaurant::new(&python).await;
    let alice = spawn_alice(&ha);
    eventually(20, "Alice's control socket", || {
        try_ctl(&ha, Request::Status)
    })
    .await;
    let r = ctl(
        &ha,
        start(
            &base,
            json!({ "proposed_date": "2026-11-27", "health_info": "asthma" }),
        ),
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.data["a2a"], true, "{r:?}");
    let id = r.data["thread_id"].as_str().unwrap().to_string();
    let peer = r.data["peer"].as_str().unwrap().to_string();
    assert!(peer.ends_with("@a2a.invalid"), "{peer}");

    // The server asked for three fields: two ask_first (Alice's prompt), one never_share.
    let p = prompt_of(&ha, "Consent").await;
    let fields: Vec<&str> = p["kind"]["Consent"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["field"].as_str())
        .collect();
    assert!(fields.contains(&"party_size"), "{p}");
    assert!(
        !fields.contains(&"health_info"),
        "never_share is never asked: {p}"
    );

    drop(alice); // SIGKILL, the consent prompt open
    let alice = spawn_alice(&ha);
    let p = prompt_of(&ha, "Consent").await;
    assert_eq!(
        p["thread_id"],
        id.as_str(),
        "the restarted agent asks again: {p}"
    );
    answer(&ha, p["id"].as_u64().unwrap(), &["share-all"]).await;

    let p = prompt_of(&ha, "Resolution").await;
    assert_eq!(p["thread_id"], id.as_str());
    assert!(
        p.to_string()
            .contains("Table for 2 at Chez Sdk, 19:30 (dietary: vegetarian)"),
        "the artifact is the proposal: {p}"
    );
    answer(&ha, p["id"].as_u64().unwrap(), &["confirm"]).await;
    wait_thread_state(&ha, &id, "COMPLETED", 30).await;

    // The transcript: what Alice's agent sent and what it read from the remote task.
    let d = ctl(&ha, Request::Thread { id: id.clone() }).await;
    let lines: Vec<String> = d.data["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            format!(
                "{} {}",
                h["dir"].as_str().unwrap(),
                h["kind"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            "sent context",
            "received context_request",
            "sent context_response",
            "received resolution",
            "received execution_report",
            "sent resolution_response",
            "sent execution_report",
        ],
        "{}",
        d.data
    );

    // What reached the server: two messages of one task and context, the intent and the
    // shared fields, never a never_share value.
    let received = std::fs::read_to_string(&log).unwrap();
    assert!(
        !received.contains("asthma"),
        "never_share reached the server: {received}"
    );
    let msgs: Vec<Value> = received
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(msgs.len(), 2, "{received}");
    assert_eq!(msgs[0]["task"], msgs[1]["task"], "{received}");
    assert_eq!(msgs[0]["context"], msgs[1]["context"], "{received}");
    assert_eq!(msgs[0]["text"], "Dinner for two on Friday");
    assert_eq!(msgs[0]["data"]["category"], "scheduling");
    assert_eq!(msgs[0]["data"]["proposed_date"], "2026-11-27");
    assert_eq!(msgs[1]["data"]["party_size"], 2.0);
    assert_eq!(msgs[1]["data"]["dietary_restrictions"], "vegetarian");
    assert!(
        msgs[1]["text"].as_str().unwrap().contains("health_info"),
        "{received}"
    );

    drop((alice, server));
}

/// Alice calls the thread off while her consent prompt is open: her agent cancels the
/// remote task the A2A way (`CancelTask`, which the a2a-sdk server hands to its
/// executor's `cancel`), sends nothing more (no answer to the input-required, nothing she
/// was asked about), and the thread is DECLINED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official a2a-sdk: bash .ci/test-deps"]
async fn cancelling_a_thread_cancels_the_a2a_sdk_task() {
    let python = python();
    let Restaurant {
        _dir,
        _relay,
        alice: ha,
        log,
        server,
        base,
    } = Restaurant::new(&python).await;
    let alice = Runtime::Tokio.agent(&ha, "alice", None);
    let r = ctl(&ha, start(&base, json!({ "proposed_date": "2026-11-27" }))).await;
    assert!(r.ok, "{r:?}");
    let id = r.data["thread_id"].as_str().unwrap().to_string();
    prompt_of(&ha, "Consent").await;

    let r = ctl(&ha, Request::CancelThread { id: id.clone() }).await;
    assert!(r.ok, "{r:?}");
    wait_thread_state(&ha, &id, "DECLINED", 30).await;
    let entries = eventually(30, "the server's executor cancelled", || async {
        let text = std::fs::read_to_string(&log).ok()?;
        let entries: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        entries
            .iter()
            .any(|e| e.get("cancelled").is_some())
            .then_some(entries)
    })
    .await;
    assert_eq!(
        entries.len(),
        2,
        "one message, then the cancel: {entries:?}"
    );
    assert_eq!(entries[1]["cancelled"], entries[0]["task"], "{entries:?}");
    let r = ctl(&ha, Request::Prompts).await;
    assert_eq!(r.data, json!([]), "the prompt closed with the thread");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 2, "nothing after the cancel: {text}");
    alice.stop().await;
    drop(server);
}

/// §18 graceful degradation over real sockets: Alice's config names the a2a-sdk
/// restaurant's card for `agent:chez@localhost`, which no a2acp agent holds. Her thread
/// to that address is refused by the relay and declined; the same intent and context go
/// on to the restaurant in a new thread, which she completes as any other: her consent,
/// its proposal, her confirmation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official a2a-sdk: bash .ci/test-deps"]
async fn a_recipient_without_an_a2acp_agent_is_reached_through_its_a2a_card() {
    let python = python();
    let Restaurant {
        _dir,
        _relay,
        alice: ha,
        log,
        server,
        base,
    } = Restaurant::new(&python).await;
    edit_config(&ha, |f| {
        f.a2a_cards
            .insert("agent:chez@localhost".into(), base.clone());
    });
    let alice = Runtime::Tokio.agent(&ha, "alice", None);
    wait_online(&alice).await;
    let r = ctl(
        &ha,
        start(
            "agent:chez@localhost",
            json!({ "proposed_date": "2026-11-27" }),
        ),
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.data["code"], "unknown_recipient", "{r:?}");
    assert_eq!(r.data["a2a"], true, "{r:?}");
    assert!(r.data["peer"].as_str().unwrap().ends_with("@a2a.invalid"));
    let first = r.data["declined"].as_str().unwrap().to_string();
    let id = r.data["thread_id"].as_str().unwrap().to_string();
    assert_ne!(id, first, "a new thread goes on");
    wait_thread_state(&ha, &first, "DECLINED", 30).await;
    let rows = ctl(&ha, Request::Threads).await;
    let row = rows
        .data
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == first.as_str())
        .cloned()
        .unwrap();
    assert_eq!(row["continued_as"], id.as_str(), "{row}");

    let p = prompt_of(&ha, "Consent").await;
    assert_eq!(p["thread_id"], id.as_str());
    answer(&ha, p["id"].as_u64().unwrap(), &["share-all"]).await;
    let p = prompt_of(&ha, "Resolution").await;
    assert_eq!(p["thread_id"], id.as_str());
    answer(&ha, p["id"].as_u64().unwrap(), &["confirm"]).await;
    wait_thread_state(&ha, &id, "COMPLETED", 30).await;

    let n = ctl(&ha, Request::Notifications { all: true }).await;
    let told = n.data.to_string();
    assert!(
        told.contains("No agent is registered as agent:chez@localhost") && told.contains(&base),
        "{told}"
    );
    let received = std::fs::read_to_string(&log).unwrap();
    assert_eq!(received.lines().count(), 2, "{received}");
    assert!(received.contains("Dinner for two on Friday"), "{received}");
    alice.stop().await;
    drop(server);
}

/// A hostile A2A agent on raw sockets: `/huge/` serves a card over the cap, `/hang/` a
/// good card whose JSON-RPC answer never finishes, `/bad/` a task that is not one.
async fn hostile_agent() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut n = 0;
                // The head (and for a POST its small body) arrive at once on loopback.
                while n < buf.len() {
                    let Ok(k) = s.read(&mut buf[n..]).await else {
                        return;
                    };
                    if k == 0 {
                        return;
                    }
                    n += k;
                    let text = String::from_utf8_lossy(&buf[..n]);
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if body.len() >= len {
                            break;
                        }
                    }
                }
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = req.split(' ').nth(1).unwrap_or("").to_string();
                let card = |p: &str| {
                    json!({
                        "name": "Hostile",
                        "supportedInterfaces": [{
                            "url": format!("http://{addr}/{p}/rpc"),
                            "protocolBinding": "JSONRPC",
                            "protocolVersion": "1.0",
                        }],
                    })
                    .to_string()
                };
                let ok = |body: String| {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                match path.as_str() {
                    "/huge/.well-known/agent-card.json" => {
                        let body = format!("{{\"name\":\"{}\"}}", "x".repeat(2 * 1024 * 1024));
                        let _ = s.write_all(ok(body).as_bytes()).await;
                    }
                    "/grpc/.well-known/agent-card.json" => {
                        let body = json!({"name": "G", "supportedInterfaces": [
                            {"url": "127.0.0.1:1", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                            {"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
                        ]});
                        let _ = s.write_all(ok(body.to_string()).as_bytes()).await;
                    }
                    "/hang/.well-known/agent-card.json" => {
                        let _ = s.write_all(ok(card("hang")).as_bytes()).await;
                    }
                    "/bad/.well-known/agent-card.json" => {
                        let _ = s.write_all(ok(card("bad")).as_bytes()).await;
                    }
                    "/hang/rpc" => {
                        // A head promising a body that never comes.
                        let _ = s
                            .write_all(
                                b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"jsonrpc\"",
                            )
                            .await;
                        tokio::time::sleep(Duration::from_secs(600)).await;
                    }
                    "/bad/rpc" => {
                        let body = r#"{"jsonrpc":"2.0","id":"x","result":{"task":{"id":"t1","status":{"state":"TASK_STATE_DANCING"}}}}"#;
                        let _ = s.write_all(ok(body.into()).as_bytes()).await;
                    }
                    _ => {
                        let _ = s
                            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                            .await;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

/// Hostile A2A agents: a card over the cap, a card offering no usable interface, an
/// answer that never finishes (cut at the call deadline, retried per the retry rule,
/// then given up), a task in an unknown state. Each thread ends DECLINED, Alice is told
/// why, and the agent goes on answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a2a_agents_end_the_thread_declined() {
    hostile_agents(false).await;
}

/// The same on the smol agent (the client lives in the shared daemon loop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_a2a_agents_end_the_thread_declined_on_smol() {
    hostile_agents(true).await;
}

async fn hostile_agents(smol: bool) {
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes { alice: ha, .. } = dinner_homes(dir.path(), &relay.url());
    let base = hostile_agent().await;
    let opened = a2acp_runtime::agent_host::AgentHost::open_home(
        &ha,
        a2acp_runtime::store::Durability::Normal,
    )
    .unwrap();
    let mut o = a2acp_runtime::daemon::RunOptions::new(&opened.file.relay, "alice");
    o.control_socket = Some(ha.socket());
    o.a2a_call_timeout = Duration::from_millis(800);
    let (tokio_alice, smol_alice) = if smol {
        (
            None,
            Some(a2acp_smol::agent::spawn(opened.host, opened.effects, o).unwrap()),
        )
    } else {
        (
            Some(a2acp_tokio::agent::spawn(opened.host, opened.effects, o).unwrap()),
            None,
        )
    };
    let mut ids = Vec::new();
    for p in ["huge", "grpc", "hang", "bad"] {
        let r = ctl(&ha, start(&format!("{base}/{p}/"), json!({}))).await;
        assert!(r.ok, "{r:?}");
        ids.push((p, r.data["thread_id"].as_str().unwrap().to_string()));
    }
    let r = ctl(&ha, start("ftp://example.com/", json!({}))).await;
    assert!(!r.ok, "{r:?}");
    for (p, id) in &ids {
        for _ in 0..300 {
            if thread_state(&ha, id).await.as_deref() == Some("DECLINED") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let d = ctl(&ha, Request::Thread { id: id.clone() }).await;
        assert_eq!(d.data["state"], "DECLINED", "/{p}/: {}", d.data);
    }
    let n = ctl(&ha, Request::Notifications { all: true }).await;
    let text = n.data.to_string();
    for why in [
        "its agent card answered more than 262144 bytes",
        "no JSON-RPC interface of A2A 1.0 (it offers: GRPC 1.0, JSONRPC 0.3)",
        "after 3 attempts",
        "unknown task state `TASK_STATE_DANCING`",
    ] {
        assert!(text.contains(why), "no notification says {why:?}: {text}");
    }
    if let Some(a) = tokio_alice {
        let _ = a.stop().await;
    }
    if let Some(a) = smol_alice {
        let _ = a.stop().await;
    }
}

/// Answers every prompt of the agent at `home` (`share-all`, `confirm`) until stopped.
fn answers_everything(home: Home) -> tokio::sync::watch::Sender<bool> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while !*stopped.borrow() {
            if let Some(r) = try_ctl(&home, Request::Prompts).await {
                for p in r.data.as_array().cloned().unwrap_or_default() {
                    let consent = p["kind"].get("Consent").is_some();
                    let arg = if consent { "share-all" } else { "confirm" };
                    let _ = try_ctl(
                        &home,
                        Request::Answer {
                            prompt_id: p["id"].as_u64().unwrap_or(0),
                            args: vec![arg.into()],
                        },
                    )
                    .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    stop
}

/// Two a2acp agents meet through the A2A bridge alone: Alice's agent drives a task on
/// Bob's `--a2a-listen` (no relay between them). Bob's needs reach Alice as the peer's
/// request, his proposal as a resolution she confirms, and both threads end COMPLETED
/// once Bob confirmed too (Alice's agent polls the task while Bob's user decides).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_a2acp_agents_meet_through_the_a2a_bridge() {
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes {
        alice: ha, bob: hb, ..
    } = dinner_homes(dir.path(), &relay.url());
    let opened = a2acp_runtime::agent_host::AgentHost::open_home(
        &hb,
        a2acp_runtime::store::Durability::Normal,
    )
    .unwrap();
    let mut o = a2acp_runtime::daemon::RunOptions::new(&opened.file.relay, "bob");
    o.control_socket = Some(hb.socket());
    o.a2a = Some(a2acp_runtime::a2a::A2aOptions {
        listen: "127.0.0.1:0".into(),
        token: None,
        limits: a2acp_runtime::a2a::A2aLimits::default(),
    });
    let bob = a2acp_tokio::agent::spawn(opened.host, opened.effects, o).unwrap();
    let bob_addr = bob.a2a_addr().unwrap();
    let alice = run_agent(&ha, "alice", None);
    let stop_bob = answers_everything(hb.clone());
    let stop_alice = answers_everything(ha.clone());
    let context = json!({
        "event_type": "dinner",
        "proposed_date": a2acp_runtime::scripted::next_friday(a2acp_runtime::now()),
        "time_windows": ["18:00-21:00"],
        "dietary": ["vegetarian"],
        "location_preference": "central Reading",
    });
    let r = ctl(&ha, start(&format!("http://{bob_addr}/"), context)).await;
    assert!(r.ok, "{r:?}");
    let id = r.data["thread_id"].as_str().unwrap().to_string();
    for _ in 0..300 {
        if thread_state(&ha, &id).await.as_deref() == Some("COMPLETED") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d = ctl(&ha, Request::Thread { id: id.clone() }).await;
    assert_eq!(d.data["state"], "COMPLETED", "{}", d.data);
    let bobs = ctl(&hb, Request::Threads).await;
    assert_eq!(bobs.data[0]["state"], "COMPLETED", "{}", bobs.data);
    let _ = stop_bob.send(true);
    let _ = stop_alice.send(true);
    let _ = alice.stop().await;
    let _ = bob.stop().await;
}
