//! The dinner negotiation of the spec (§4–§9) between two **smol** agents through a
//! **tokio** relay, over real loopback WebSockets, each agent with its own SQLite file;
//! the tests read the smol agents through their control sockets with the tokio client
//! (what the `a2acp` command does).

use a2acp_runtime::agent_host::Effect;
use a2acp_runtime::scripted::{dinner_configs, ScriptedUser};
use a2acp_smol::agent::AgentEvent;
use a2acp_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dinner_smol_agents_through_tokio_relay() {
    let dir = tmp();
    let relay = relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let (alice_cfg, bob_cfg) = dinner_configs("localhost").unwrap();
    let bob_addr = bob_cfg.address.clone();
    let ha = init_home(&dir.path().join("alice"), &alice_cfg, &relay.url());
    let hb = init_home(&dir.path().join("bob"), &bob_cfg, &relay.url());
    let alice = run_agent_smol(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = run_agent_smol(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let events = alice.subscribe();

    dinner_completes(&alice, &bob, &hb, bob_addr).await;

    let shown = events
        .try_iter()
        .filter(|e| matches!(e, AgentEvent::Effect(Effect::Prompt(_))))
        .count();
    assert_eq!(shown, 2, "one consent prompt, one resolution prompt");
    let snap = relay.snapshot().await.unwrap();
    assert_eq!(snap.stats.routed_total, 8);
    eventually(5, "everything acknowledged", || async {
        (relay.snapshot().await.unwrap().stats.queued == 0).then_some(())
    })
    .await;

    alice.stop().await.unwrap();
    bob.stop().await.unwrap();
    // A stopped agent removes its control socket.
    assert!(!ha.socket().exists());
    relay.stop(true).await.unwrap();
    assert_no_dinner_plaintext(&dir.path().join("relay"));
}
