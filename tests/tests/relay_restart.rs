//! The relay killed and restarted mid-negotiation: the thread completes, nothing is lost
//! and no packet reaches an agent's logic twice — on tokio and on smol (relay and agents).

use std::collections::BTreeSet;

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
    let resolution = eventually(20, "Alice's resolution prompt", || async {
        prompts(&alice).await.into_iter().next()
    })
    .await;
    answer(&ha, resolution.id, &["confirm"]).await;
    let ta = wait_state(&alice, "COMPLETED", 30).await;
    wait_state(&bob, "COMPLETED", 30).await;

    // Nothing lost, nothing twice: both sides hold the same 8 packets, each once.
    let id = ta[0].id.clone();
    let pa = ctl(&ha, Request::Thread { id: id.clone() }).await.data;
    let pb = ctl(&hb, Request::Thread { id }).await.data;
    // (After a reconnection both sides also exchange `thread_state` summaries, §13.1.)
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] != "thread_state")
            .map(|p| p["packet_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (a, b) = (ids(&pa), ids(&pb));
    assert_eq!(a.len(), 8, "{pa}");
    assert_eq!(
        a.iter().collect::<BTreeSet<_>>().len(),
        8,
        "a packet handled twice: {a:?}"
    );
    assert_eq!(
        a.iter().collect::<BTreeSet<_>>(),
        b.iter().collect::<BTreeSet<_>>()
    );
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
