//! A remote relay down for longer than the outbound queue's expiry, over real loopback
//! sockets, on both runtimes: a.example's relay keeps packets for b.example 3 s. After a
//! first dinner (so each relay knows the other), b.example's relay crashes; Alice starts a
//! second dinner with Bob; her relay accepts it, cannot hand it over, and past the expiry
//! drops it and tells her: her agent shows a delivery notification on that thread (a
//! typed notification, not log text). Nothing hangs, a.example's queue for b.example is
//! empty afterwards, and once b.example's relay is back on its port a third dinner
//! completes.

use std::time::{Duration, Instant};

use a2acp_core::agent::NotifyKind;
use a2acp_core::crypto::IdentityKey;
use a2acp_core::relay::federation::FederationConfig;
use a2acp_core::relay::RelayConfig;
use a2acp_runtime::agent_host::Effect;
use a2acp_runtime::daemon::AgentEvent;
use a2acp_runtime::scripted::{next_friday, start_dinner, ScriptedUser};
use a2acp_tests::federation::{
    dinner_across, federating_relay, federation, linked_relays_with, LinkedRelays,
};
use a2acp_tests::*;

#[path = "common/pki.rs"]
#[allow(dead_code)]
mod pki;
use pki::pki;

const EXPIRY: Duration = Duration::from_secs(3);

/// The ids of `h`'s threads not in `before`.
async fn new_threads(h: &impl Agent, before: &[String]) -> Vec<String> {
    threads(h)
        .await
        .into_iter()
        .map(|t| t.id)
        .filter(|id| !before.contains(id))
        .collect()
}

async fn thread_state(h: &impl Agent, id: &str) -> Option<String> {
    threads(h)
        .await
        .into_iter()
        .find(|t| t.id == id)
        .map(|t| t.state)
}

async fn wait_completed(h: &impl Agent, id: &str) {
    eventually(30, &format!("thread {id} COMPLETED"), || async {
        (thread_state(h, id).await.as_deref() == Some("COMPLETED")).then_some(())
    })
    .await;
}

async fn a_remote_relay_down_past_the_expiry(rt: Runtime) {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let short = RelayConfig {
        federation: Some(FederationConfig {
            expiry: EXPIRY,
            retry_base: Duration::from_millis(200),
            retry_max: Duration::from_secs(1),
            // (The key is replaced by the one in the relay's data directory.)
            ..FederationConfig::new(IdentityKey::from_seed([7; 32]))
        }),
        ..RelayConfig::default()
    };
    let LinkedRelays {
        a,
        b,
        data_b,
        url_a,
        url_b,
        ..
    } = linked_relays_with(
        rt,
        dir.path(),
        (p.cert.as_path(), p.key.as_path(), p.ca.as_path()),
        short,
        RelayConfig::default(),
    )
    .await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_across(dir.path(), &url_a, &url_b, &p.ca);
    let bob_addr = bob_cfg.address.clone();
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;

    // A first dinner: each relay has discovered the other and pinned its agent's key.
    dinner_completes(&alice, &bob, &hb, bob_addr.clone()).await;
    let first: Vec<String> = threads(&alice).await.into_iter().map(|t| t.id).collect();

    // b.example's relay crashes.
    b.stop(false).await;
    eventually(10, "Bob notices", || async {
        (!online(&bob).await).then_some(())
    })
    .await;

    // Alice's second dinner: accepted by her relay, never handed over.
    let mut events = alice.subscribe();
    let t0 = Instant::now();
    alice
        .tell(start_dinner(
            bob_addr.clone(),
            &next_friday(a2acp_runtime::now()),
        ))
        .await;
    let second = eventually(10, "the second thread", || async {
        new_threads(&alice, &first).await.into_iter().next()
    })
    .await;
    eventually(
        10,
        "the first packet accepted by a.example's relay",
        || async {
            let st = a.snapshot().await.stats;
            (st.federation["b.example"].queued >= 1).then_some(())
        },
    )
    .await;

    // Past the expiry, Alice is told on that thread.
    let told = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match events.next().await {
                // (The notification's text names the refusal's code, `expired`.)
                Some(AgentEvent::Effect(Effect::Notify(n)))
                    if n.kind == NotifyKind::Delivery
                        && n.thread_id.as_deref() == Some(second.as_str())
                        && n.text.contains("(expired)") =>
                {
                    return n
                }
                Some(_) => {}
                None => panic!("Alice's agent stopped"),
            }
        }
    })
    .await
    .expect("Alice told within 20 s that her packet expired");
    let after = t0.elapsed();
    println!("told after {after:?}: {}", told.text);
    assert!(after >= EXPIRY, "told before the expiry: {after:?}");
    assert!(told.text.contains(&bob_addr.to_string()), "{}", told.text);
    // Nothing is left queued for b.example, and the drop is counted.
    let st = a.snapshot().await.stats;
    let d = &st.federation["b.example"];
    assert_eq!(d.queued, 0, "{d:?}");
    assert!(d.undeliverable >= 1, "{d:?}");
    assert_eq!(st.queued, 0, "{st:?}");
    // Alice's agent acknowledged the notice; her thread is not stuck in a wait that
    // blocks others.
    assert!(online(&alice).await);

    // b.example's relay comes back on its port: new traffic flows.
    let b = federating_relay(
        rt,
        url_b.strip_prefix("wss://").unwrap(),
        &data_b,
        "b.example",
        &p.cert,
        &p.key,
        federation(&data_b, "b.example", &[("a.example", url_a.clone())], &p.ca),
        RelayConfig::default(),
    )
    .await;
    wait_online(&bob).await;
    let known: Vec<String> = threads(&alice).await.into_iter().map(|t| t.id).collect();
    alice
        .tell(start_dinner(
            bob_addr.clone(),
            &next_friday(a2acp_runtime::now()),
        ))
        .await;
    let third = eventually(10, "the third thread", || async {
        new_threads(&alice, &known).await.into_iter().next()
    })
    .await;
    wait_completed(&alice, &third).await;
    wait_completed(&bob, &third).await;
    // The expired thread never reached Bob.
    assert!(thread_state(&bob, &second).await.is_none());
    eventually(10, "nothing queued either way", || async {
        let (sa, sb) = (a.snapshot().await.stats, b.snapshot().await.stats);
        (sa.federation["b.example"].queued == 0 && sb.federation["a.example"].queued == 0)
            .then_some(())
    })
    .await;

    alice.stop().await;
    bob.stop().await;
    a.stop(true).await;
    b.stop(true).await;
}

per_runtime!(a_remote_relay_down_past_the_expiry);
