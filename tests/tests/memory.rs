//! Relationship memory (§11) over real sockets, on tokio and on smol: after the dinner
//! completes, Alice's agent remembers Bob (`memory show`, with his reputation), keeps it
//! across a restart, lets her edit and forget a field, exports and re-imports it as
//! NDJSON, and forgets everything about Bob when she blocks him.

use a2acp_runtime::control::{PeerMemory, Request};
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::*;

per_runtime!(memory_is_recorded_shown_edited_forgotten_and_purged_by_a_block);

/// What `a2acp memory show ADDRESS` answers on the agent of `home`.
async fn show(home: &Home, address: &a2acp_core::Address) -> PeerMemory {
    let r = ctl(
        home,
        Request::Memory {
            address: Some(address.to_string()),
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let mut v: Vec<PeerMemory> = serde_json::from_value(r.data).unwrap();
    assert_eq!(v.len(), 1);
    v.remove(0)
}

async fn ok(home: &Home, req: Request) -> serde_json::Value {
    let r = ctl(home, req).await;
    assert!(r.ok, "{r:?}");
    r.data
}

async fn memory_is_recorded_shown_edited_forgotten_and_purged_by_a_block(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let bob_addr = bob_cfg.address.clone();
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    dinner_completes(&alice, &bob, &hb, bob_addr.clone()).await;

    // Recorded on completion: one thread, Bob's shared values in the context cache.
    let m = eventually(10, "Alice remembers Bob", || async {
        let m = show(&ha, &bob_addr).await;
        m.remembered.is_some().then_some(m)
    })
    .await;
    // Its reputation from Alice's own observations: one completed thread, nothing held
    // against it.
    assert_eq!(m.reputation.completed, 1, "{:?}", m.reputation);
    assert_eq!(m.reputation.score, 2);
    assert_eq!((m.reputation.malformed, m.reputation.refused), (0, 0));
    let r = m.remembered.unwrap();
    assert_eq!(r["interaction_count"], 1, "{r}");
    assert_eq!(r["typical_intents"][0], "scheduling");
    assert_eq!(r["trust_level"], "new");
    let cache = r["context_cache"].as_object().unwrap().clone();
    assert!(!cache.is_empty(), "{r}");
    let (field, entry) = cache.iter().next().unwrap();
    assert_eq!(entry["confidence"], "high");
    let field = field.clone();

    // Edited by hand, then forgotten.
    ok(
        &ha,
        Request::MemoryEdit {
            address: bob_addr.to_string(),
            field: field.clone(),
            value: "as Alice says".into(),
        },
    )
    .await;
    let r = show(&ha, &bob_addr).await.remembered.unwrap();
    assert_eq!(r["context_cache"][&field]["value"], "as Alice says");
    let refused = ctl(
        &ha,
        Request::MemoryEdit {
            address: bob_addr.to_string(),
            field: "not a field!".into(),
            value: "x".into(),
        },
    )
    .await;
    assert!(!refused.ok);

    // Exported as NDJSON, one line per package and fact, the hash beside the package.
    let export = ok(
        &ha,
        Request::MemoryExport {
            address: Some(bob_addr.to_string()),
        },
    )
    .await;
    let export = export.as_str().unwrap().to_string();
    assert!(export.lines().count() > 5, "{export}");
    assert!(
        export.starts_with(r#"{"content_hash":"sha256:"#),
        "{export}"
    );

    ok(
        &ha,
        Request::MemoryForget {
            address: bob_addr.to_string(),
            field: Some(field.clone()),
        },
    )
    .await;
    let r = show(&ha, &bob_addr).await.remembered.unwrap();
    assert!(r["context_cache"].get(&field).is_none(), "{r}");
    assert_eq!(r["interaction_count"], 1);

    // Kept across a restart (persisted as memory/<address>).
    alice.stop().await;
    let alice = rt.agent(&ha, "alice", None);
    wait_online(&alice).await;
    let r = show(&ha, &bob_addr).await.remembered.expect("restored");
    assert_eq!(r["interaction_count"], 1);

    // A tampered import is refused whole; the export imports back (nothing new).
    let tampered = export.replacen("scheduling", "Scheduling", 1);
    let refused = ctl(&ha, Request::MemoryImport { ndjson: tampered }).await;
    assert!(!refused.ok, "{refused:?}");
    ok(&ha, Request::MemoryImport { ndjson: export }).await;
    let r = show(&ha, &bob_addr).await.remembered.unwrap();
    assert_eq!(r["context_cache"][&field]["value"], "as Alice says");

    // Blocking Bob purges everything about him: memory and ended threads, now and after
    // a restart.
    ok(
        &ha,
        Request::Block {
            address: bob_addr.to_string(),
        },
    )
    .await;
    let m = show(&ha, &bob_addr).await;
    assert!(m.remembered.is_none(), "{m:?}");
    assert!(m.they_shared.is_empty(), "{m:?}");
    assert!(m.threads.is_empty(), "{m:?}");
    alice.stop().await;
    let alice = rt.agent(&ha, "alice", None);
    wait_online(&alice).await;
    let m = show(&ha, &bob_addr).await;
    assert!(m.remembered.is_none() && m.they_shared.is_empty(), "{m:?}");
    alice.stop().await;
    bob.stop().await;
}
