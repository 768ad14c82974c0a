//! `a2acp keys rotate` over real sockets, on tokio and on smol (relay and agents): Alice
//! rotates her key in the middle of the spec's dinner with Bob; Bob re-pins the new key
//! from the statement her old key signed, halts nothing and is not alerted, and the dinner
//! completes. Statements signed by the wrong key, replayed or for another address, sent by
//! a raw WebSocket client to the real relay, are refused with `rotation_refused` and change
//! nothing. A backup taken while a rotation is under way holds its new key.

use a2acp_core::agent::NotifyKind;
use a2acp_core::crypto::IdentityKey;
use a2acp_core::link::{ClientFrame, ErrorCode, RelayFrame};
use a2acp_core::rotation::RotationStatement;
use a2acp_core::Address;
use a2acp_runtime::control::{KeyInfo, NotificationEntry, Request};
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::*;

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

per_runtime!(a_rotation_mid_dinner_is_re_pinned_without_halting);

async fn a_rotation_mid_dinner_is_re_pinned_without_halting(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay(&free_addr(), &dir.path().join("relay")).await;
    let DinnerHomes {
        alice_cfg,
        bob_cfg,
        alice: ha,
        bob: hb,
    } = dinner_homes(dir.path(), &relay.url());
    let (a_addr, b_addr) = (alice_cfg.address.clone(), bob_cfg.address.clone());
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let consent = start_dinner_until_consent(&alice, b_addr.clone()).await;
    let old = key_show(&hb, &a_addr)
        .await
        .pinned_key
        .expect("Alice pinned");
    let old_number = key_show(&hb, &a_addr).await.safety_number.unwrap();

    // `a2acp keys rotate`, in the middle of the dinner (Alice's consent prompt open).
    let r = ctl(&ha, Request::KeyRotate).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.data["state"], "rotated", "{r:?}");
    assert_eq!(r.data["seq"], 1, "{r:?}");
    let new = r.data["key"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    let on_disk = a2acp_runtime::keys::load(&ha.key()).unwrap();
    assert_eq!(
        on_disk.public().to_string(),
        new,
        "identity.key is the new key"
    );
    assert!(!ha.next_key().exists(), "identity.next.key is gone");
    assert_eq!(
        r.data["fingerprint"].as_str().unwrap(),
        a2acp_runtime::safety::half(&on_disk.public().to_bytes(), &a_addr)
    );
    assert_eq!(key_show(&ha, &b_addr).await.key, new);

    // The dinner goes on under the new key and completes.
    wait_online(&alice).await;
    answer(
        &ha,
        consent.id,
        &ScriptedUser::dinner().answer_args(&consent),
    )
    .await;
    dinner_ends_once_each(&alice, &ha, &bob, &hb).await;

    // Bob re-pinned the new key from the statement: no changed key waits, no alert.
    let shown = eventually(15, "Bob's pin of Alice's new key", || async {
        let k = key_show(&hb, &a_addr).await;
        (k.pinned_key.as_deref() == Some(new.as_str())).then_some(k)
    })
    .await;
    assert!(shown.changed_key.is_none(), "{shown:?}");
    let number = shown.safety_number.clone().unwrap();
    assert_ne!(number, old_number);
    assert_eq!(
        key_show(&ha, &b_addr).await.safety_number.as_deref(),
        Some(number.as_str()),
        "both sides show the same new safety number"
    );
    let alerts: Vec<_> = notifications(&hb)
        .await
        .into_iter()
        .filter(|n| n.notification.kind == NotifyKind::Security)
        .collect();
    assert!(alerts.is_empty(), "no key-change alert: {alerts:?}");
    for t in threads(&bob).await {
        let d = ctl(&hb, Request::Thread { id: t.id.clone() }).await.data;
        assert_eq!(d["halted"], false, "{d}");
    }

    // A second rotation, with nothing open: rotation 2, and Bob re-pins it on contact.
    let r = ctl(&ha, Request::KeyRotate).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.data["seq"], 2, "{r:?}");
    assert_ne!(r.data["key"].as_str().unwrap(), new);
    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;
}

/// The relay's answer to `rotate` on `raw`: the refusal's reason, or `None` for `rotated`.
async fn rotate(raw: &mut Raw, statement: RotationStatement) -> Option<String> {
    raw.send(&ClientFrame::Rotate { statement }).await;
    match raw.recv().await {
        RelayFrame::Rotated { .. } => None,
        RelayFrame::Error {
            code: ErrorCode::RotationRefused,
            message,
            ..
        } => Some(message.split(':').next().unwrap_or_default().to_string()),
        other => panic!("expected rotated or rotation_refused, got {other:?}"),
    }
}

/// Whether `seed`'s key is the one registered for `address`: a connection registering
/// with it is accepted (the relay answers `address_taken` to any other key).
async fn registered_with(url: &str, address: &str, seed: u8) -> bool {
    let mut raw = Raw::connect(url, address, seed).await;
    let f = raw.register_frame();
    raw.send(&f).await;
    match raw.recv().await {
        RelayFrame::AuthOk { .. } => true,
        RelayFrame::Error {
            code: ErrorCode::AddressTaken,
            ..
        } => false,
        other => panic!("expected auth_ok or address_taken, got {other:?}"),
    }
}

per_runtime!(hostile_rotations_are_refused_and_change_nothing);

async fn hostile_rotations_are_refused_and_change_nothing(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay(&free_addr(), &dir.path().join("relay")).await;
    let url = relay.url();
    let who = "agent:carol@localhost";
    let a = Address::parse(who).unwrap();
    let k = |s: u8| IdentityKey::from_seed([s; 32]);
    let mut raw = Raw::register(&url, who, 1).await;

    // Signed by another key than the one it claims to leave.
    let mut forged = RotationStatement::sign(&a, &k(9), &k(2), 1);
    forged.old_key = k(1).public().to_bytes();
    assert_eq!(
        rotate(&mut raw, forged).await.as_deref(),
        Some("old_signature")
    );
    // Well signed, but by a key that is not the address's.
    assert_eq!(
        rotate(&mut raw, RotationStatement::sign(&a, &k(9), &k(2), 1))
            .await
            .as_deref(),
        Some("not_current_key")
    );
    // The new key's proof of possession missing (its signature is the old key's).
    let mut unproven = RotationStatement::sign(&a, &k(1), &k(2), 1);
    unproven.new_sig = unproven.old_sig;
    assert_eq!(
        rotate(&mut raw, unproven).await.as_deref(),
        Some("new_signature")
    );
    // Another agent's address, on this one's connection.
    let dave = Address::parse("agent:dave@localhost").unwrap();
    assert_eq!(
        rotate(&mut raw, RotationStatement::sign(&dave, &k(1), &k(2), 1))
            .await
            .as_deref(),
        Some("wrong_address")
    );
    // Rotation number 0.
    assert_eq!(
        rotate(&mut raw, RotationStatement::sign(&a, &k(1), &k(2), 0))
            .await
            .as_deref(),
        Some("bad_seq")
    );
    drop(raw);
    // Nothing changed: the first key still holds the address, no other key does.
    assert!(registered_with(&url, who, 1).await);
    assert!(!registered_with(&url, who, 2).await);
    assert!(!registered_with(&url, who, 9).await);

    // Two genuine rotations: 1 → 2, 2 → 3.
    let first = RotationStatement::sign(&a, &k(1), &k(2), 1);
    let mut raw = Raw::register(&url, who, 1).await;
    assert_eq!(rotate(&mut raw, first.clone()).await, None);
    assert!(raw.closed_by_relay().await, "the old key's connection ends");
    let mut raw = Raw::register(&url, who, 2).await;
    assert_eq!(
        rotate(&mut raw, RotationStatement::sign(&a, &k(2), &k(3), 2)).await,
        None
    );
    drop(raw);

    // The first statement replayed (by whoever holds the current key, or kept a copy):
    // refused, the address stays on key 3.
    let mut raw = Raw::register(&url, who, 3).await;
    assert_eq!(
        rotate(&mut raw, first.clone()).await.as_deref(),
        Some("not_current_key")
    );
    // A later-looking statement from the current key but an old rotation number.
    assert_eq!(
        rotate(&mut raw, RotationStatement::sign(&a, &k(3), &k(4), 2))
            .await
            .as_deref(),
        Some("stale_seq")
    );
    // Not JSON of a statement at all: an error, never a crash; the relay goes on.
    raw.send_text(r#"{"type":"rotate","statement":{"type":"key_rotation","address":"agent:carol@localhost","old_key":"AA","new_key":"AA","seq":1,"old_sig":"AA","new_sig":"AA"}}"#.into())
        .await;
    assert!(matches!(raw.recv().await, RelayFrame::Error { .. }));
    drop(raw);
    for (seed, holds) in [(1, false), (2, false), (3, true), (4, false)] {
        assert_eq!(registered_with(&url, who, seed).await, holds, "key {seed}");
    }
    relay.stop(true).await;
}

/// A backup taken while a rotation is under way holds its new key: the restored agent
/// finishes the rotation.
#[test]
fn a_backup_holds_the_key_of_a_rotation_under_way() {
    let dir = tmp();
    let (alice_cfg, _) = a2acp_runtime::scripted::dinner_configs("localhost").unwrap();
    let home = init_home(&dir.path().join("alice"), &alice_cfg, "ws://127.0.0.1:9");
    let next = a2acp_runtime::keys::create_next(&home.next_key()).unwrap();
    let file = dir.path().join("alice.backup");
    a2acp_runtime::backup::backup_with(
        &home,
        &file,
        "correct horse battery staple",
        (1024, 1, 1),
        None,
    )
    .unwrap();
    let restored = Home::new(dir.path().join("restored"));
    a2acp_runtime::backup::restore(&file, "correct horse battery staple", restored.dir()).unwrap();
    assert_eq!(
        a2acp_runtime::keys::load(&restored.next_key())
            .unwrap()
            .seed(),
        next.seed()
    );
    assert_eq!(
        std::fs::read(restored.key()).unwrap(),
        std::fs::read(home.key()).unwrap()
    );
}
