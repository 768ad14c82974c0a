//! Seed 001's test scenario 2, the task lifecycle (assign → status_update → completion),
//! over real sockets with a sender that knows only the seed (`tests/a2a/phase1_task.py`,
//! the Python standard library, every message built by hand): it assigns a scheduling
//! task to Bob's agent (`agent run --a2a-listen`) while Bob answers his own prompts through
//! the control socket. With an endpoint in the assignment the agent sends the sender its
//! updates and its completion; without one the sender asks. Bob confirming completes the
//! task with the agreed proposal; Bob declining fails it with the reason.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use a2acp_runtime::a2a::A2aLimits;
use a2acp_runtime::control::Request;
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::next_friday;
use a2acp_tests::*;

/// A Python 3 interpreter: the script needs nothing beyond the standard library, so the
/// machine's `python3` (`$A2ACP_PYTHON3` overrides it), and the tests are not ignored.
fn python() -> PathBuf {
    std::env::var_os("A2ACP_PYTHON3").map_or_else(|| PathBuf::from("python3"), PathBuf::from)
}

/// Bob at his control socket until stopped: shares what he is asked, and answers a
/// proposal with `resolution` (`confirm` or `decline`). Returns the kinds he answered.
fn bob_answers(
    home: Home,
    resolution: &'static str,
) -> (
    tokio::task::JoinHandle<Vec<String>>,
    tokio::sync::watch::Sender<bool>,
) {
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        let mut answered = Vec::new();
        loop {
            if *stopped.borrow() {
                return answered;
            }
            let r = ctl(&home, Request::Prompts).await;
            for p in r.data.as_array().cloned().unwrap_or_default() {
                let id = p["id"].as_u64().unwrap();
                let consent = p["kind"].get("Consent").is_some();
                let word = if consent { "share-all" } else { resolution };
                let r = ctl(
                    &home,
                    Request::Answer {
                        prompt_id: id,
                        args: vec![word.to_string()],
                    },
                )
                .await;
                assert!(r.ok, "{r:?}");
                answered.push(word.to_string());
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), stopped.changed()).await;
        }
    });
    (task, stop)
}

/// Runs the seed-only sender against Bob's agent (`mode`: `push` or `poll`) while Bob
/// answers with `resolution`; returns the sender's report, what Bob answered and the
/// thread as Bob's agent shows it.
async fn scenario(
    mode: &str,
    resolution: &'static str,
) -> (serde_json::Value, Vec<String>, serde_json::Value) {
    let python = python();
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes { bob: hb, .. } = dinner_homes(dir.path(), &relay.url());
    // Where `POST /a2a/messages` is served.
    let bob = bob_with_a2a(&hb, None, A2aLimits::default(), |_| {});
    let url = format!("http://{}", bob.a2a_addr().expect("listening"));
    // Bob's Phase-1 id, as `a2acp phase1 id` gives it to whoever will send him tasks.
    let key = a2acp_runtime::keys::load(&hb.key()).unwrap();
    let bob_id = a2acp_core::bridge::phase1::envelope::agent_id_of(&key.public().to_bytes());
    let (user, stop) = bob_answers(hb.clone(), resolution);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("a2a/phase1_task.py");
    let run = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(&url)
        .arg(bob_id.hyphenated().to_string())
        .arg(mode)
        .arg(next_friday(a2acp_runtime::now()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(150), run)
        .await
        .expect("the sender finished within 150 s")
        .expect("run the sender");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the sender failed:\n{stdout}\n{stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("{}")).expect("the sender's report");
    eprintln!("{report:#}");
    let _ = stop.send(true);
    let answered = user.await.unwrap();
    let threads = ctl(&hb, Request::Threads).await;
    let tid = threads.data[0]["id"].as_str().unwrap().to_string();
    let thread = ctl(&hb, Request::Thread { id: tid }).await.data;
    bob.stop().await.unwrap();
    (report, answered, thread)
}

/// Pushed: the agent sends the seed-only sender its task's status_updates and then its
/// completion, at the endpoint the assignment named; Bob confirmed, so the task is
/// completed with the agreed proposal, and the fields the sender could not be asked are
/// named, declined on its behalf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_only_sender_gets_its_task_completed_at_its_endpoint() {
    let (report, answered, thread) = scenario("push", "confirm").await;
    assert_eq!(report["ack"][0], "status_update", "{report}");
    assert!(report.get("bad").is_none(), "{report}");
    let pushed = report["pushed"].as_array().unwrap();
    // Updates first, the completion last, and only one completion.
    let (last, updates) = pushed.split_last().expect("something pushed");
    assert_eq!(last[0], "task_completion", "{report}");
    assert!(updates.iter().all(|u| u[0] == "status_update"), "{report}");
    assert!(!updates.is_empty(), "status updates were sent: {report}");
    let c = &report["completion"];
    assert_eq!(c["status"], "completed", "{report}");
    assert!(c["result"]["proposal"]["summary"].is_string(), "{report}");
    assert_eq!(c["result"]["state"], "COMPLETED");
    assert!(c["execution_time_ms"].as_u64().is_some(), "{report}");
    assert_eq!(report["again"], "completed");
    // Nothing the sender cannot act on was ever said to it.
    let text = report["text"].as_str().unwrap();
    assert!(
        !text.contains("Reply with") && !text.contains("decision"),
        "{text}"
    );
    // Bob, and only Bob, answered his prompts: his consent and his confirmation.
    assert!(answered.iter().any(|a| a == "share-all"), "{answered:?}");
    assert!(answered.iter().any(|a| a == "confirm"), "{answered:?}");
    assert_eq!(thread["state"], "COMPLETED", "{thread}");
}

/// Asked: without an endpoint the sender asks with a status_update about its task, and
/// reads the answer; Bob declines the proposal, so the task fails with the reason — and
/// the proposal he declined is not handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_bob_declines_fails_with_the_reason() {
    let (report, answered, thread) = scenario("poll", "decline").await;
    assert!(report["pushed"].as_array().unwrap().is_empty(), "{report}");
    let polled = report["polled"].as_array().unwrap();
    assert_eq!(polled.last().unwrap()[0], "task_completion", "{report}");
    let c = &report["completion"];
    assert_eq!(c["status"], "failed", "{report}");
    assert_eq!(c["result"]["reason"], "declined", "{report}");
    assert_eq!(c["result"]["summary"], "Declined by the agent's user.");
    assert!(c["result"].get("proposal").is_none(), "{report}");
    assert_eq!(report["again"], "failed");
    assert!(answered.iter().any(|a| a == "decline"), "{answered:?}");
    assert_eq!(thread["state"], "DECLINED", "{thread}");
}
