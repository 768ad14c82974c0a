//! The person's commands through the control socket, with real agents and a relay on
//! loopback — on tokio and on smol: new context resumes an escalated thread on both sides
//! (`thread reply`), `thread cancel` closes it on both sides, `notifications` are numbered
//! and marked read, and a peer's changed key is checked by safety number and accepted
//! (`keys show` / `keys accept`).

use a2acp_core::agent::{NotifyKind, PromptKind};
use a2acp_core::persist::PersistOp;
use a2acp_runtime::control::{KeyInfo, NotificationEntry, Request, ThreadDetail};
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::{next_friday, start_dinner, ScriptedUser};
use a2acp_runtime::store::{Durability, Store};
use a2acp_tests::*;
use serde_json::json;

per_runtime!(a_changed_key_is_checked_by_safety_number_and_accepted);
per_runtime!(reply_resumes_an_escalated_thread_then_cancel_closes_it);

/// Makes the agent of `home` escalate after `limit` context exchanges (§6.4).
fn limit_round_trips(home: &Home, limit: u32) {
    edit_config(home, |f| f.limits.max_round_trips = Some(limit));
}

async fn notifications(home: &Home, all: bool) -> Vec<NotificationEntry> {
    let r = ctl(home, Request::Notifications { all }).await;
    assert!(r.ok, "{r:?}");
    serde_json::from_value(r.data).unwrap()
}

async fn detail(home: &Home, id: &str) -> ThreadDetail {
    let r = ctl(home, Request::Thread { id: id.into() }).await;
    assert!(r.ok, "{r:?}");
    serde_json::from_value(r.data).unwrap()
}

/// What `a2acp keys show ADDRESS` shows on the agent of `home`.
async fn key_show(home: &Home, address: &a2acp_core::Address) -> KeyInfo {
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

async fn reply_resumes_an_escalated_thread_then_cancel_closes_it(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    limit_round_trips(&ha, 2);
    limit_round_trips(&hb, 2);
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", None);
    wait_online(&alice).await;
    wait_online(&bob).await;
    let consent = start_dinner_until_consent(&alice, bob_cfg.address.clone()).await;
    let id = consent.thread_id.clone();
    answer(
        &ha,
        consent.id,
        &ScriptedUser::dinner().answer_args(&consent),
    )
    .await;
    // Two exchanges: both sides hand the thread to their users (§6.4).
    eventually(15, "both sides escalated", || async {
        (detail(&ha, &id).await.escalated && detail(&hb, &id).await.escalated).then_some(())
    })
    .await;
    let unread = notifications(&ha, false).await;
    let escalated = unread
        .iter()
        .find(|n| n.notification.kind == NotifyKind::Escalated)
        .unwrap_or_else(|| panic!("{unread:?}"));
    assert_eq!(
        escalated.notification.thread_id.as_deref(),
        Some(id.as_str())
    );
    assert!(!escalated.read);
    // Numbers are stable and increasing; reading one leaves the others unread.
    let numbers: Vec<u64> = unread.iter().map(|n| n.number).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    let r = ctl(
        &ha,
        Request::ReadNotifications {
            number: Some(escalated.number),
            all: false,
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let after = notifications(&ha, false).await;
    assert!(after.iter().all(|n| n.number != escalated.number));
    assert_eq!(after.len(), unread.len() - 1);
    let all = notifications(&ha, true).await;
    let same = all.iter().find(|n| n.number == escalated.number).unwrap();
    assert!(same.read);
    assert_eq!(same.notification, escalated.notification);
    let r = ctl(
        &ha,
        Request::ReadNotifications {
            number: Some(9_999),
            all: false,
        },
    )
    .await;
    assert!(!r.ok);
    let r = ctl(
        &ha,
        Request::ReadNotifications {
            number: None,
            all: true,
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert!(notifications(&ha, false).await.is_empty());
    assert_eq!(notifications(&ha, true).await.len(), all.len());

    // Replies that cannot go anywhere are refused with a reason.
    let r = ctl(
        &ha,
        Request::ReplyThread {
            id: "thr_nope".into(),
            context: Default::default(),
        },
    )
    .await;
    assert!(!r.ok && r.error.unwrap().contains("no thread"));
    let r = ctl(
        &ha,
        Request::ReplyThread {
            id: id.clone(),
            context: Default::default(),
        },
    )
    .await;
    assert!(!r.ok, "an empty reply is refused");

    // Alice answers the escalation: the thread goes on on both sides, to a proposal.
    let mut c = a2acp_core::packet::Context::new();
    c.insert("note".into(), json!("any evening works"));
    let r = ctl(
        &ha,
        Request::ReplyThread {
            id: id.clone(),
            context: c,
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    wait_state(&alice, "PROPOSED", 15).await;
    wait_state(&bob, "PROPOSED", 15).await;
    let d = detail(&hb, &id).await;
    assert!(!d.escalated);
    assert_eq!(d.theirs.get("note"), Some(&json!("any evening works")));
    let resolution = eventually(10, "Bob's resolution prompt", || async {
        prompts(&bob)
            .await
            .into_iter()
            .find(|p| matches!(p.kind, PromptKind::Resolution { .. }))
    })
    .await;
    assert_eq!(resolution.thread_id, id);

    // Alice cancels: DECLINED on both sides, Bob told; his prompt is withdrawn.
    let r = ctl(&ha, Request::CancelThread { id: id.clone() }).await;
    assert!(r.ok, "{r:?}");
    assert_eq!(detail(&ha, &id).await.summary.state, "DECLINED");
    wait_state(&bob, "DECLINED", 15).await;
    eventually(10, "Bob's prompt withdrawn", || async {
        prompts(&bob).await.is_empty().then_some(())
    })
    .await;
    let r = ctl(&ha, Request::CancelThread { id: id.clone() }).await;
    assert!(!r.ok, "a closed thread cannot be cancelled again: {r:?}");
    let r = ctl(
        &ha,
        Request::ReplyThread {
            id: id.clone(),
            context: [("x".to_string(), json!(1))].into_iter().collect(),
        },
    )
    .await;
    assert!(!r.ok, "a closed thread takes no reply: {r:?}");
    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;
}

/// Bob's agent is re-installed with a new identity key (its records kept) and the relay
/// re-binds his address to it; his next packet halts Alice's thread with him. Alice's
/// `keys show` gives the safety number with the new key — the one Bob's own `keys show`
/// gives — and `keys accept` refuses other digits, then accepts the matching ones; the
/// halted thread closes on both sides.
async fn a_changed_key_is_checked_by_safety_number_and_accepted(rt: Runtime) {
    let dir = tmp();
    let data = dir.path().join("relay");
    let listen = free_addr();
    let relay = rt.relay(&listen, &data).await;
    let DinnerHomes {
        alice_cfg,
        bob_cfg,
        alice: ha,
        bob: hb,
    } = dinner_homes(dir.path(), &relay.url());
    let bob_addr = bob_cfg.address.clone();
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", None);
    wait_online(&alice).await;
    wait_online(&bob).await;
    let consent = start_dinner_until_consent(&alice, bob_addr.clone()).await;
    let id = consent.thread_id.clone();
    let before = key_show(&ha, &bob_addr).await;
    assert!(before.changed_key.is_none());
    let number = before.safety_number.clone().expect("Bob's key is pinned");
    // Bob's side computes the same number (order-independent).
    let theirs = key_show(&hb, &alice_cfg.address).await;
    assert_eq!(theirs.safety_number.as_deref(), Some(number.as_str()));
    // Nothing to accept yet.
    let r = ctl(
        &ha,
        Request::KeyAccept {
            address: bob_addr.to_string(),
            safety_number: None,
        },
    )
    .await;
    assert!(!r.ok, "{r:?}");

    // Bob's device is re-installed with a new key; the relay is told of it.
    bob.stop().await;
    relay.stop(true).await;
    std::fs::remove_file(hb.key()).unwrap();
    let new_key = a2acp_runtime::keys::create(&hb.key()).unwrap();
    {
        let mut store = Store::open(&data.join("relay.db"), Durability::Full).unwrap();
        let reg = format!("reg/{bob_addr}");
        let (_, v) = store
            .load_all()
            .unwrap()
            .into_iter()
            .find(|(k, _)| *k == reg)
            .expect("Bob's registration");
        let mut rec: serde_json::Value = serde_json::from_slice(&v).unwrap();
        rec["key"] = json!(new_key.public().to_string());
        store
            .apply(
                &[PersistOp::Put {
                    key: reg,
                    value: serde_json::to_vec(&rec).unwrap(),
                }],
                &[],
            )
            .unwrap();
    }
    let relay = rt.relay(&listen, &data).await;
    let bob = rt.agent(&hb, "bob", None);
    wait_online(&bob).await;
    wait_online(&alice).await;
    // Bob's next packet (a new thread) is authentic under the new key: Alice halts.
    bob.tell(start_dinner(
        alice_cfg.address.clone(),
        &next_friday(a2acp_runtime::now()),
    ))
    .await;
    let alert = eventually(15, "Alice's security notification", || async {
        notifications(&ha, false)
            .await
            .into_iter()
            .find(|n| n.notification.kind == a2acp_core::agent::NotifyKind::Security)
    })
    .await;
    assert!(
        alert
            .notification
            .text
            .contains(&format!("a2acp keys show {bob_addr}"))
            && alert
                .notification
                .text
                .contains(&format!("a2acp keys accept {bob_addr}")),
        "{alert:?}"
    );
    assert!(detail(&ha, &id).await.halted);
    let r = ctl(
        &ha,
        Request::ReplyThread {
            id: id.clone(),
            context: [("x".to_string(), json!(1))].into_iter().collect(),
        },
    )
    .await;
    assert!(!r.ok && r.error.unwrap().contains("halted"));
    let shown = key_show(&ha, &bob_addr).await;
    assert_eq!(shown.pinned_key, before.pinned_key);
    assert_eq!(
        shown.changed_key.as_deref(),
        Some(new_key.public().to_string().as_str())
    );
    let new_number = shown.changed_safety_number.clone().unwrap();
    assert_ne!(new_number, number);
    // What Bob's re-installed device shows (his new key, Alice's pinned key).
    let theirs = key_show(&hb, &alice_cfg.address).await;
    assert_eq!(theirs.safety_number.as_deref(), Some(new_number.as_str()));
    // Wrong digits (the old number) and garbage are refused; nothing changes.
    for wrong in [number.as_str(), "12345"] {
        let r = ctl(
            &ha,
            Request::KeyAccept {
                address: bob_addr.to_string(),
                safety_number: Some(wrong.into()),
            },
        )
        .await;
        assert!(!r.ok, "{r:?}");
        assert!(detail(&ha, &id).await.halted);
    }
    // The matching digits, grouped as shown: accepted.
    let grouped = a2acp_runtime::safety::grouped(&new_number);
    let r = ctl(
        &ha,
        Request::KeyAccept {
            address: bob_addr.to_string(),
            safety_number: Some(grouped),
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let after = key_show(&ha, &bob_addr).await;
    assert_eq!(after.pinned_key, shown.changed_key);
    assert!(after.changed_key.is_none());
    assert_eq!(after.safety_number.as_deref(), Some(new_number.as_str()));
    // The halted thread closes on both sides.
    assert_eq!(detail(&ha, &id).await.summary.state, "DECLINED");
    eventually(15, "Bob's side of the old thread closes", || async {
        (detail(&hb, &id).await.summary.state == "DECLINED").then_some(())
    })
    .await;
    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;
}
