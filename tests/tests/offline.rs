//! A recipient offline when a packet is sent gets it when it connects; the 101st packet
//! queued in one thread is refused with an overflow notice to its sender (§13.2) — on
//! tokio and on smol.

use a2acp_core::link::{ClientFrame, RelayFrame};
use a2acp_runtime::scripted::{next_friday, start_dinner, ScriptedUser};
use a2acp_tests::*;

per_runtime!(
    offline_recipient_gets_it_on_connect,
    hundred_and_first_packet_overflows
);

async fn offline_recipient_gets_it_on_connect(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let bob_addr = bob_cfg.address.clone();
    // Bob registers, then goes offline.
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&bob).await;
    bob.stop().await;
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    alice
        .tell(start_dinner(bob_addr, &next_friday(a2acp_runtime::now())))
        .await;
    eventually(10, "the first packet queued at the relay", || async {
        let s = relay.snapshot().await;
        (s.stats.queued == 1 && s.stats.routed_total == 1).then_some(())
    })
    .await;
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_state(&bob, "COMPLETED", 30).await;
    wait_state(&alice, "COMPLETED", 30).await;
    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;
}

async fn hundred_and_first_packet_overflows(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let url = relay.url();
    // Bob registers and leaves.
    let bob = Raw::register(&url, "agent:bob@localhost", 2).await;
    let bob_key = bob.identity.public();
    let bob_addr = bob.address.clone();
    drop(bob);
    let mut alice = Raw::register(&url, "agent:alice@localhost", 1).await;
    for seq in 1..=101u64 {
        let env = alice.envelope(
            &bob_addr,
            &bob_key,
            "thr_flood",
            format!("packet {seq}").as_bytes(),
        );
        alice.send(&ClientFrame::Send { seq, env }).await;
    }
    for seq in 1..=100u64 {
        match alice.recv().await {
            RelayFrame::Accepted { seq: s, .. } => assert_eq!(s, seq),
            other => panic!("packet {seq}: {other:?}"),
        }
    }
    match alice.recv().await {
        RelayFrame::Overflow { seq, to, limit, .. } => {
            assert_eq!((seq, limit), (101, 100));
            assert_eq!(to, bob_addr);
        }
        other => panic!("expected the overflow notice, got {other:?}"),
    }
    // Another thread to Bob is unaffected.
    let env = alice.envelope(&bob_addr, &bob_key, "thr_other", b"hello");
    alice.send(&ClientFrame::Send { seq: 102, env }).await;
    assert!(matches!(
        alice.recv().await,
        RelayFrame::Accepted { seq: 102, .. }
    ));
    let s = relay.snapshot().await;
    assert_eq!((s.stats.queued, s.stats.overflows), (101, 1));
    // Bob comes back and gets them in order.
    let mut bob = Raw::connect(&url, "agent:bob@localhost", 2).await;
    let f = bob.auth_frame("localhost");
    bob.send(&f).await;
    assert!(matches!(
        bob.recv().await,
        RelayFrame::AuthOk { queued: 101, .. }
    ));
    let mut last = 0;
    for _ in 0..101 {
        match bob.recv().await {
            RelayFrame::Deliver { id, .. } => {
                assert!(id > last);
                last = id;
                bob.send(&ClientFrame::Ack { id }).await;
            }
            other => panic!("{other:?}"),
        }
    }
    eventually(5, "queue drained", || async {
        (relay.snapshot().await.stats.queued == 0).then_some(())
    })
    .await;
    relay.stop(true).await;
}
