//! An agent killed with SIGKILL between receiving a request and answering it: after a
//! restart it shows the open consent prompt again, answers, and the thread completes — with
//! the agent daemon (and the relay) on tokio and on smol.
//!
//! Alice's agent runs in a child process (this test binary re-executed with
//! `A2ACP_TEST_CHILD_HOME` and `A2ACP_TEST_CHILD_RUNTIME` set, running only `child_agent`),
//! so the kill is a real `kill -9`; the test talks to it through its control socket, as the
//! `a2acp` CLI does.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use a2acp_core::agent::{Prompt, PromptKind};
use a2acp_runtime::control::Request;
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::*;

const CHILD_ENV: &str = "A2ACP_TEST_CHILD_HOME";
const CHILD_RUNTIME_ENV: &str = "A2ACP_TEST_CHILD_RUNTIME";

/// Not a test by itself: the body of the child process.
#[test]
fn child_agent() {
    let Some(home) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let name = std::env::var(CHILD_RUNTIME_ENV).expect("the child's runtime");
    let runtime = Runtime::from_name(&name).expect("a known runtime");
    // (A smol agent runs on smol's global executor: this runtime only waits for it.)
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

fn spawn_child(rt: Runtime, home: &Path) -> Child {
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

async fn child_prompts(home: &Home) -> Option<Vec<Prompt>> {
    let r = try_ctl(home, Request::Prompts).await?;
    serde_json::from_value(r.data).ok()
}

async fn child_online(home: &Home) {
    eventually(20, "the child agent online", || async {
        let r = try_ctl(home, Request::Status).await?;
        r.data["online"].as_bool().unwrap_or(false).then_some(())
    })
    .await;
}

per_runtime!(sigkill_between_request_and_answer);

async fn sigkill_between_request_and_answer(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let bob_addr = bob_cfg.address.clone();
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&bob).await;

    let mut child = spawn_child(rt, ha.dir());
    child_online(&ha).await;
    start_dinner_by_control(&ha, bob_addr).await;
    // Bob's request arrived: Alice's consent prompt is open, nothing answered yet.
    let before = eventually(15, "the consent prompt", || async {
        child_prompts(&ha).await?.into_iter().next()
    })
    .await;
    assert!(matches!(before.kind, PromptKind::Consent { .. }));

    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let mut child = spawn_child(rt, ha.dir());
    let after = eventually(20, "the consent prompt shown again", || async {
        child_prompts(&ha).await?.into_iter().next()
    })
    .await;
    assert_eq!(after, before, "the same prompt is open again");
    child_online(&ha).await;
    let user = ScriptedUser::dinner();
    let r = try_ctl(
        &ha,
        Request::Answer {
            prompt_id: after.id,
            args: user.answer_args(&after),
        },
    )
    .await
    .unwrap();
    assert!(r.ok, "{r:?}");
    let resolution = eventually(20, "the resolution prompt", || async {
        child_prompts(&ha)
            .await?
            .into_iter()
            .find(|p| matches!(p.kind, PromptKind::Resolution { .. }))
    })
    .await;
    let r = try_ctl(
        &ha,
        Request::Answer {
            prompt_id: resolution.id,
            args: vec!["confirm".into()],
        },
    )
    .await
    .unwrap();
    assert!(r.ok, "{r:?}");
    wait_state(&bob, "COMPLETED", 30).await;
    eventually(20, "Alice completed", || async {
        let r = try_ctl(&ha, Request::Threads).await?;
        (r.data[0]["state"] == "COMPLETED").then_some(())
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    bob.stop().await;
    relay.stop(true).await;

    // Alice's audit log, written by two processes with a kill -9 between them, holds
    // every packet of the thread (a step done again after the kill may log its packet
    // twice, never not at all) and its chain is intact.
    let thread = thread_of(&ha);
    for home in [&ha, &hb] {
        let log = home.dir().join(a2acp_runtime::audit_log::DIR);
        a2acp_runtime::audit_log::verify(&log).expect("an intact chain");
        let ids: std::collections::BTreeSet<String> = a2acp_runtime::audit_log::list(
            &log,
            &a2acp_runtime::audit_log::Filter {
                thread: Some(thread.clone()),
                ..Default::default()
            },
        )
        .unwrap()
        .iter()
        // The thread_state summaries exchanged after the reconnect (§13.1) are logged
        // too; the thread's eight are the negotiation's.
        .filter(|e| e["type"] != "thread_state")
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
        assert_eq!(ids.len(), 8, "every packet of the thread: {ids:?}");
    }
}

/// The id of the one thread in `home`'s database (the agent has stopped).
fn thread_of(home: &Home) -> String {
    let store =
        a2acp_runtime::store::Store::open(&home.db(), a2acp_runtime::store::Durability::Normal)
            .unwrap();
    let ids: Vec<String> = store
        .load_all()
        .unwrap()
        .into_iter()
        .filter_map(|(k, _)| k.strip_prefix("thread/").map(str::to_string))
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    ids[0].clone()
}
