//! `a2acp agent recover` over real sockets, on tokio and on smol (relay, agents and the
//! recovering client): Alice's recovery key is bound as `agent init` binds it; her home is
//! deleted (the lost device); she recovers her address onto a new home with her 24 words;
//! the address works again, Bob's agent halts the thread it had with her and asks him with
//! a notice that it is a recovery, and after `keys accept` a new dinner completes. Wrong
//! words are refused and change nothing at the relay; the sixth attempt within the hour is
//! rate limited with `retry_after`, even with the right words; a relay of a cluster refuses
//! with `cluster`, both a recovery and an agent's binding (which its `status` then says).

use a2acp_core::agent::NotifyKind;
use a2acp_core::Address;
use a2acp_runtime::agent_host::AgentHost;
use a2acp_runtime::control::{KeyInfo, NotificationEntry, Request, StatusInfo};
use a2acp_runtime::home::Home;
use a2acp_runtime::recovery::{self, RecoverError, Recovered};
use a2acp_runtime::scripted::{next_friday, start_dinner, ScriptedUser};
use a2acp_runtime::store::Durability;
use a2acp_tests::*;

/// The recovery words of seed `s`×32.
fn words(s: u8) -> String {
    recovery::to_words(&[s; 32])
}

/// `a2acp agent recover` on `rt` (a new home: the relay at `url`).
async fn recover(
    rt: Runtime,
    home: &Home,
    address: &Address,
    words: &str,
    url: &str,
) -> Result<Recovered, RecoverError> {
    let relay = Some(url.into());
    match rt {
        Runtime::Tokio => {
            a2acp_tokio::recovery::recover(home, address.as_str(), words, relay, None).await
        }
        Runtime::Smol => {
            a2acp_smol::recovery::recover(home, address.as_str(), words, relay, None).await
        }
    }
}

/// Gives the recovery key of `words` to the agent of `home` (not running), as `agent
/// init` does: bound at the relay when the agent connects.
fn bind_offline(home: &Home, words: &str) {
    let seed = recovery::parse_words(words).unwrap();
    let public = a2acp_core::recovery::recovery_key_from_seed(seed)
        .public()
        .to_bytes();
    let mut opened = AgentHost::open_home(home, Durability::Normal).unwrap();
    recovery::bind(&mut opened.host, public).unwrap();
}

async fn status(h: &impl Agent) -> StatusInfo {
    serde_json::from_value(h.ask(Request::Status).await.data).unwrap()
}

async fn wait_bound(h: &impl Agent) -> StatusInfo {
    eventually(15, "the recovery key bound", || async {
        let s = status(h).await;
        s.recovery.as_ref().is_some_and(|r| r.bound).then_some(s)
    })
    .await
}

async fn key_show(home: &Home, address: &Address) -> KeyInfo {
    let r = ctl(
        home,
        Request::KeyShow {
            address: address.to_string(),
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    serde_json::from_value(r.data).unwrap()
}

async fn notifications(home: &Home) -> Vec<NotificationEntry> {
    let r = ctl(home, Request::Notifications { all: true }).await;
    serde_json::from_value(r.data).unwrap()
}

per_runtime!(a_lost_home_is_recovered_with_the_words_and_bob_is_asked);

async fn a_lost_home_is_recovered_with_the_words_and_bob_is_asked(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay(&free_addr(), &dir.path().join("relay")).await;
    let url = relay.url();
    let DinnerHomes {
        alice_cfg,
        bob_cfg,
        alice: ha,
        bob: hb,
    } = dinner_homes(dir.path(), &url);
    let (a_addr, b_addr) = (alice_cfg.address.clone(), bob_cfg.address.clone());
    let phrase = words(42);
    bind_offline(&ha, &phrase);
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&bob).await;
    let old_key = wait_bound(&alice).await.key;
    // A dinner under way when the device is lost (Alice's consent prompt open).
    start_dinner_until_consent(&alice, b_addr.clone()).await;
    let old_thread = eventually(15, "Bob's side of the dinner", || async {
        threads(&bob).await.into_iter().next()
    })
    .await;
    assert_eq!(
        key_show(&hb, &a_addr).await.pinned_key.as_deref(),
        Some(old_key.as_str())
    );

    // The device is lost: the agent stops, its home is gone.
    alice.stop().await;
    std::fs::remove_dir_all(ha.dir()).unwrap();

    // A new device: the words recover the address onto a new key in a new home.
    let hn = Home::new(dir.path().join("alice-new"));
    let r = recover(rt, &hn, &a_addr, &phrase, &url).await.unwrap();
    assert!(!r.already);
    assert_eq!(r.address, a_addr);
    assert_ne!(r.key, old_key);
    let on_disk = a2acp_runtime::keys::load(&hn.key()).unwrap();
    assert_eq!(
        on_disk.public().to_string(),
        r.key,
        "identity.key is the new key"
    );
    assert!(!hn.recover_key().exists(), "the staged key was promoted");
    assert_eq!(
        r.fingerprint,
        a2acp_runtime::safety::half(&on_disk.public().to_bytes(), &a_addr)
    );
    // Recovering again into that home: its key is the address's, nothing was lost; the
    // relay is not asked to move anything.
    let again = recover(rt, &hn, &a_addr, &phrase, &url).await.unwrap_err();
    assert_eq!(again.reason(), "not_lost", "{again}");
    assert!(!hn.recover_key().exists());
    assert_eq!(
        a2acp_runtime::keys::load(&hn.key())
            .unwrap()
            .public()
            .to_string(),
        r.key
    );

    // The person writes their profile again (the dinner's), and runs the agent.
    write_config(&hn, &alice_cfg, &url);
    let alice = rt.agent(&hn, "alice", Some(ScriptedUser::dinner()));
    let s = wait_bound(&alice).await;
    assert!(s.online);
    assert_eq!(s.key, r.key);
    assert_eq!(
        s.recovery.unwrap().key,
        a2acp_core::encoding::b64_encode(
            &a2acp_core::recovery::recovery_key_from_seed([42; 32])
                .public()
                .to_bytes()
        ),
        "the same recovery key, bound again with the new identity key"
    );

    // Alice writes to Bob under her new key: Bob's agent halts the old thread and asks him,
    // saying it is a recovery.
    alice
        .tell(start_dinner(
            b_addr.clone(),
            &next_friday(a2acp_runtime::now()),
        ))
        .await;
    let shown = eventually(20, "Bob sees the changed key", || async {
        let k = key_show(&hb, &a_addr).await;
        (k.changed_key.as_deref() == Some(r.key.as_str())).then_some(k)
    })
    .await;
    assert_eq!(shown.pinned_key.as_deref(), Some(old_key.as_str()));
    let told = eventually(20, "Bob told it is a recovery", || async {
        notifications(&hb).await.into_iter().find(|n| {
            n.notification.kind == NotifyKind::Security
                && n.notification.text.contains("recovered its address")
        })
    })
    .await;
    assert!(told.notification.text.contains("keys accept"), "{told:?}");
    let d = ctl(
        &hb,
        Request::Thread {
            id: old_thread.id.clone(),
        },
    )
    .await
    .data;
    assert_eq!(d["halted"], true, "{d}");

    // Bob compares safety numbers with Alice and accepts; a new dinner completes.
    let number = shown.changed_safety_number.clone().unwrap();
    let acc = ctl(
        &hb,
        Request::KeyAccept {
            address: a_addr.to_string(),
            safety_number: Some(number),
        },
    )
    .await;
    assert!(acc.ok, "{acc:?}");
    let k = key_show(&hb, &a_addr).await;
    assert_eq!(k.pinned_key.as_deref(), Some(r.key.as_str()));
    assert!(k.changed_key.is_none());
    eventually(15, "the old thread closed at Bob", || async {
        let t = threads(&bob).await;
        let old = t.iter().find(|t| t.id == old_thread.id)?;
        (old.state != "PROPOSED" && old.state != "NEGOTIATING").then_some(())
    })
    .await;
    let before: Vec<String> = threads(&alice).await.into_iter().map(|t| t.id).collect();
    alice
        .tell(start_dinner(
            b_addr.clone(),
            &next_friday(a2acp_runtime::now()),
        ))
        .await;
    let id = eventually(15, "Alice's second dinner", || async {
        threads(&alice)
            .await
            .into_iter()
            .find(|t| !before.contains(&t.id))
            .map(|t| t.id)
    })
    .await;
    eventually(40, "the new dinner completed on both sides", || async {
        let a = threads(&alice).await.into_iter().find(|t| t.id == id)?;
        let b = threads(&bob).await.into_iter().find(|t| t.id == id)?;
        (a.state == "COMPLETED" && b.state == "COMPLETED").then_some(())
    })
    .await;
    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;
}

per_runtime!(wrong_words_are_refused_then_rate_limited_and_nothing_changes);

async fn wrong_words_are_refused_then_rate_limited_and_nothing_changes(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay(&free_addr(), &dir.path().join("relay")).await;
    let url = relay.url();
    let DinnerHomes {
        alice_cfg,
        alice: ha,
        ..
    } = dinner_homes(dir.path(), &url);
    let a_addr = alice_cfg.address.clone();
    let phrase = words(42);
    bind_offline(&ha, &phrase);
    let alice = rt.agent(&ha, "alice", None);
    let key = wait_bound(&alice).await.key;
    let hn = Home::new(dir.path().join("alice-new"));

    // Words that are not words, or do not check: refused before the relay is asked.
    let typo = phrase.replacen(phrase.split(' ').nth(3).unwrap(), "zzzz", 1);
    assert!(matches!(
        recover(rt, &hn, &a_addr, &typo, &url).await,
        Err(RecoverError::Words(recovery::WordsError::Unknown {
            position: 4,
            ..
        }))
    ));
    // An unknown address: no binding.
    let carol = Address::parse("agent:carol@localhost").unwrap();
    let e = recover(rt, &hn, &carol, &phrase, &url).await.unwrap_err();
    assert_eq!(e.reason(), "no_binding", "{e}");
    // Five recoveries with valid words of another recovery key: each refused.
    for s in 1..=5 {
        let e = recover(rt, &hn, &a_addr, &words(s), &url)
            .await
            .unwrap_err();
        assert_eq!(e.reason(), "wrong_recovery_key", "attempt {s}: {e}");
        assert!(!hn.dir().exists(), "nothing written after a refusal");
    }
    // The sixth within the hour is rate limited, even with the right words, and says when
    // to try again.
    let e = recover(rt, &hn, &a_addr, &phrase, &url).await.unwrap_err();
    assert_eq!(e.reason(), "rate_limited", "{e}");
    let wait = e.retry_after().expect("retry_after");
    assert!((3000..=3600).contains(&wait), "{wait}");
    assert!(e.to_string().contains("try again in"), "{e}");
    assert!(!hn.dir().exists());

    // Nothing changed at the relay: Alice's agent stays online on her key (a recovery
    // would have replaced its connection), and a new connection with her key registers.
    let s = status(&alice).await;
    assert!(s.online);
    assert_eq!(s.key, key);
    alice.stop().await;
    let alice = rt.agent(&ha, "alice", None);
    wait_online(&alice).await;
    assert_eq!(status(&alice).await.key, key);
    alice.stop().await;

    // The relay restarted: the count survives it.
    relay.stop(true).await;
    let relay = rt.relay(&free_addr(), &dir.path().join("relay")).await;
    let e = recover(rt, &hn, &a_addr, &phrase, &relay.url())
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "rate_limited", "{e}");
    relay.stop(true).await;
}

per_runtime!(
    #[ignore = "needs nats-server: bash .ci/test-deps"]
    a_cluster_relay_refuses_a_recovery_with_cluster
);

async fn a_cluster_relay_refuses_a_recovery_with_cluster(rt: Runtime) {
    let dir = tmp();
    let nats = a2acp_tests::nats::NatsCluster::start(dir.path(), 1);
    let relay = rt.cluster_relay(&free_addr(), &nats, 0, "n1").await;
    let url = relay.url();
    let alice = Address::parse("agent:alice@localhost").unwrap();
    let hn = Home::new(dir.path().join("alice-new"));
    let e = recover(rt, &hn, &alice, &words(42), &url)
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "cluster", "{e}");
    assert!(e.to_string().contains("cluster"), "{e}");
    assert!(!hn.dir().exists(), "nothing written");
    // An agent that binds a recovery key there (what `agent init` does) is told at once
    // that it was refused: `status` says why, which `agent init` reports instead of
    // waiting for a confirmation that never comes.
    let DinnerHomes { alice: ha, .. } = dinner_homes(dir.path(), &url);
    bind_offline(&ha, &words(43));
    let a = rt.agent(&ha, "alice", None);
    let s = eventually(15, "the binding refused", || async {
        let s = status(&a).await;
        s.recovery
            .as_ref()
            .is_some_and(|r| r.refused.is_some())
            .then_some(s)
    })
    .await;
    assert!(s.online, "{s:?}");
    let r = s.recovery.unwrap();
    assert!(!r.bound);
    assert!(
        r.refused.as_deref().unwrap_or("").contains("cluster"),
        "{r:?}"
    );
    a.stop().await;
    relay.stop(true).await;
}
