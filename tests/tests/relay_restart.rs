//! The relay killed and restarted mid-negotiation: the thread completes, nothing is lost
//! and no packet reaches an agent's logic twice — on tokio and on smol (relay and agents).

use a2acp_runtime::control::Request;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::*;

per_runtime!(relay_restart_mid_negotiation);

async fn relay_restart_mid_negotiation(rt: Runtime) {
    let dir = tmp();
    let data = dir.path().join("relay");
    let listen = free_addr();
    let relay1 = rt.relay(&listen, &data).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay1.url());
    // Alice answers by hand (through the control socket); Bob is scripted.
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let consent = start_dinner_until_consent(&alice, bob_cfg.address.clone()).await;

    // Crash the relay: connections dropped, no close frames; only what it committed stays.
    relay1.stop(false).await;
    eventually(10, "agents notice", || async {
        (!online(&alice).await && !online(&bob).await).then_some(())
    })
    .await;
    // Alice answers while the relay is down: her answer waits in her outbox.
    answer(
        &ha,
        consent.id,
        &ScriptedUser::dinner().answer_args(&consent),
    )
    .await;
    let status = ctl(&ha, Request::Status).await;
    assert!(status.data["outbox"].as_u64().unwrap() >= 1, "{status:?}");

    let relay2 = rt.relay(&listen, &data).await;
    wait_online(&alice).await;
    wait_online(&bob).await;
    // Nothing lost, nothing twice.
    let (pa, _) = dinner_ends_once_each(&alice, &ha, &bob, &hb).await;
    let kinds: Vec<&str> = pa["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["kind"].as_str())
        .collect();
    for k in [
        "context",
        "context_request",
        "context_response",
        "resolution",
        "execution_report",
    ] {
        assert!(kinds.contains(&k), "{k} missing: {kinds:?}");
    }
    eventually(5, "everything acknowledged", || async {
        (relay2.snapshot().await.stats.queued == 0).then_some(())
    })
    .await;
    alice.stop().await;
    bob.stop().await;
    relay2.stop(true).await;
}
