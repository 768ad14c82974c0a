//! Drift and forks (§6.5) through the control socket, with real agents and a relay on
//! loopback — on tokio and on smol: `thread update-intent` tells the other side, whose
//! new need is asked with the change shown; `thread fork` makes the same child threads on
//! both sides; both refuse unknown and ended threads with a clear error. Forks survive a
//! `kill -9` of the agent that made them.

use std::process::{Child, Command, Stdio};

use a2acp_core::agent::PromptKind;
use a2acp_runtime::control::Request;
use a2acp_runtime::home::Home;
use a2acp_tests::*;

const CHILD_ENV: &str = "A2ACP_TEST_DRIFT_CHILD_HOME";
const CHILD_RUNTIME_ENV: &str = "A2ACP_TEST_DRIFT_CHILD_RUNTIME";

per_runtime!(update_intent_tells_the_peer_and_asks_the_new_need);
per_runtime!(a_fork_makes_the_same_threads_on_both_sides_and_survives_kill_9);

/// Not a test by itself: the body of the child process (Alice's agent, to be killed).
#[test]
fn child_agent() {
    let Some(home) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let name = std::env::var(CHILD_RUNTIME_ENV).expect("the child's runtime");
    let runtime = Runtime::from_name(&name).expect("a known runtime");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let h = runtime.agent(&Home::new(home), "alice", None);
        let _ = h.wait().await;
    });
}

fn spawn_child(rt: Runtime, home: &std::path::Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_agent", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, home)
        .env(CHILD_RUNTIME_ENV, rt.name())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

async fn update_intent_tells_the_peer_and_asks_the_new_need(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", None);
    wait_online(&alice).await;
    wait_online(&bob).await;
    let consent = start_dinner_until_consent(&alice, bob_cfg.address.clone()).await;
    let id = consent.thread_id.clone();

    let r = ctl(
        &ha,
        Request::UpdateIntent {
            id: id.clone(),
            summary: "Game night with friends on Friday".into(),
            category: None,
            reason: Some("Bob suggested games".into()),
            needs: vec!["game_preferences".into()],
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let text = r.data.as_str().unwrap();
    assert!(
        text.contains("now about “Game night with friends on Friday” (expanded)"),
        "{text}"
    );

    // Bob's side: told, the thread is about game night, and the new need is asked with
    // the change shown.
    let p = eventually(20, "Bob's prompt for the new need", || async {
        prompts(&bob).await.into_iter().find(|p| {
            p.thread_id == id
                && matches!(&p.kind, PromptKind::Consent { fields } if fields.iter().any(|f| f.field == "game_preferences"))
        })
    })
    .await;
    let d = p.drift.expect("the prompt shows the intent change");
    assert_eq!(d.to.summary, "Game night with friends on Friday");
    let row = threads(&bob)
        .await
        .into_iter()
        .find(|t| t.id == id)
        .unwrap();
    assert_eq!(row.summary, "Game night with friends on Friday");
    let n = ctl(&hb, Request::Notifications { all: true }).await;
    assert!(
        n.data.to_string().contains("changed the thread from “"),
        "{}",
        n.data
    );

    // Clear errors: unknown thread, bad needs, empty summary, ended thread.
    for (req, want) in [
        (
            Request::UpdateIntent {
                id: "thr_nope".into(),
                summary: "x".into(),
                category: None,
                reason: None,
                needs: vec![],
            },
            "no thread `thr_nope`",
        ),
        (
            Request::UpdateIntent {
                id: id.clone(),
                summary: "  ".into(),
                category: None,
                reason: None,
                needs: vec![],
            },
            "must not be empty",
        ),
        (
            Request::UpdateIntent {
                id: id.clone(),
                summary: "x".into(),
                category: None,
                reason: None,
                needs: vec!["bad field!".into()],
            },
            "is not a field name",
        ),
        (
            Request::ForkThread {
                id: id.clone(),
                intents: vec!["only one".into()],
                category: None,
            },
            "give 2 to 8 --intent",
        ),
    ] {
        let r = ctl(&ha, req).await;
        assert!(!r.ok);
        assert!(r.error.as_deref().unwrap_or("").contains(want), "{r:?}");
    }
    let r = ctl(&ha, Request::CancelThread { id: id.clone() }).await;
    assert!(r.ok, "{r:?}");
    for req in [
        Request::UpdateIntent {
            id: id.clone(),
            summary: "later".into(),
            category: None,
            reason: None,
            needs: vec![],
        },
        Request::ForkThread {
            id: id.clone(),
            intents: vec!["a".into(), "b".into()],
            category: None,
        },
    ] {
        let r = ctl(&ha, req).await;
        assert!(!r.ok);
        assert!(
            r.error
                .as_deref()
                .unwrap_or("")
                .contains("DECLINED already"),
            "{r:?}"
        );
    }
    alice.stop().await;
    bob.stop().await;
}

async fn a_fork_makes_the_same_threads_on_both_sides_and_survives_kill_9(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let mut child = spawn_child(rt, ha.dir());
    let bob = rt.agent(&hb, "bob", None);
    wait_online(&bob).await;
    eventually(20, "Alice's agent online", || async {
        let r = try_ctl(&ha, Request::Status).await?;
        r.data["online"].as_bool().filter(|o| *o)
    })
    .await;
    let r = ctl(
        &ha,
        Request::StartThread {
            to: a2acp_runtime::control::Recipients::One(bob_cfg.address.to_string()),
            category: "scheduling".into(),
            summary: "Friday evening: dinner, then games".into(),
            context: None,
            urgent: false,
            quorum: None,
            sequential: false,
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let id = r.data["thread_id"].as_str().unwrap().to_string();
    eventually(20, "Bob has the thread", || async {
        threads(&bob).await.into_iter().find(|t| t.id == id)
    })
    .await;
    let r = ctl(
        &ha,
        Request::ForkThread {
            id: id.clone(),
            intents: vec![
                "Dinner reservation for Friday 19:00".into(),
                "Game night venue/setup for Friday".into(),
            ],
            category: None,
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let text = r.data.as_str().unwrap().to_string();
    assert!(text.contains("split into 2 threads"), "{text}");
    let kids: Vec<String> = text
        .split_whitespace()
        .filter(|w| w.starts_with("thr_") && !w.starts_with(&id))
        .map(|w| w.trim_end_matches([',', ':']).to_string())
        .collect();
    assert_eq!(kids.len(), 2, "{text}");
    // Bob's agent makes the same two threads, with their intents.
    eventually(20, "Bob has both children", || async {
        let rows = threads(&bob).await;
        kids.iter()
            .all(|k| rows.iter().any(|t| &t.id == k))
            .then_some(())
    })
    .await;
    let rows = threads(&bob).await;
    assert!(rows
        .iter()
        .any(|t| t.summary == "Game night venue/setup for Friday"));

    // kill -9 Alice's agent and start it again: the children are there.
    child.kill().unwrap();
    let _ = child.wait();
    let mut child = spawn_child(rt, ha.dir());
    let rows: Vec<a2acp_runtime::control::ThreadSummary> =
        eventually(20, "Alice's agent back", || async {
            let r = try_ctl(&ha, Request::Threads).await?;
            serde_json::from_value(r.data).ok()
        })
        .await;
    for k in &kids {
        assert!(
            rows.iter().any(|t| &t.id == k),
            "{k} after restore: {rows:?}"
        );
    }
    // A fork of a fork's child works like any thread; an unknown one is refused.
    let r = ctl(
        &ha,
        Request::ForkThread {
            id: "thr_unknown".into(),
            intents: vec!["a".into(), "b".into()],
            category: None,
        },
    )
    .await;
    assert!(
        r.error.as_deref().unwrap_or("").contains("no thread"),
        "{r:?}"
    );
    child.kill().unwrap();
    let _ = child.wait();
    bob.stop().await;
}
