//! The dinner negotiation of the spec (§4–§9) between two tokio agents through a tokio
//! relay, over real loopback WebSockets, each agent with its own SQLite file.

use a2acp_runtime::scripted::{dinner_configs, next_friday, start_dinner, ScriptedUser};
use a2acp_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dinner_over_real_sockets() {
    let dir = tmp();
    let relay = relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let (alice_cfg, bob_cfg) = dinner_configs("localhost").unwrap();
    let bob_addr = bob_cfg.address.clone();
    let ha = init_home(&dir.path().join("alice"), &alice_cfg, &relay.url());
    let hb = init_home(&dir.path().join("bob"), &bob_cfg, &relay.url());
    let alice = run_agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = run_agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let mut prompts_alice = alice.subscribe();
    alice
        .command(start_dinner(bob_addr, &next_friday(a2acp_runtime::now())))
        .await
        .unwrap();
    let ta = wait_state(&alice, "COMPLETED", 30).await;
    let tb = wait_state(&bob, "COMPLETED", 30).await;
    assert_eq!(ta[0].id, tb[0].id);
    assert_eq!(
        ta[0].packets, 8,
        "context, request, response, resolution, 2 confirmations, 2 reports"
    );
    assert_eq!(tb[0].packets, 8);

    let mut shown = 0;
    while let Ok(e) = prompts_alice.try_recv() {
        if let a2acp_tokio::agent::AgentEvent::Effect(a2acp_runtime::agent_host::Effect::Prompt(
            _,
        )) = e
        {
            shown += 1;
        }
    }
    assert_eq!(shown, 2, "one consent prompt, one resolution prompt");

    // What Alice declined never left her agent; the relay never saw plaintext.
    let r = ctl(
        &hb,
        a2acp_runtime::control::Request::Thread {
            id: tb[0].id.clone(),
        },
    )
    .await;
    let theirs = r.data["theirs"].to_string();
    assert!(
        theirs.contains("driving") && !theirs.contains("Italian"),
        "{theirs}"
    );
    let snap = relay.snapshot().await.unwrap();
    assert_eq!(snap.stats.routed_total, 8);
    eventually(5, "everything acknowledged", || async {
        (relay.snapshot().await.unwrap().stats.queued == 0).then_some(())
    })
    .await;
    alice.stop().await.unwrap();
    bob.stop().await.unwrap();
    relay.stop(true).await.unwrap();
    let stored = all_bytes(&dir.path().join("relay"));
    for secret in ["vegetarian", "Reading", "dinner", "driving"] {
        assert!(
            !stored.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the relay's files hold `{secret}`"
        );
    }
}
