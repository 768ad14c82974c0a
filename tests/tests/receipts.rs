//! Consent receipts over real sockets, on tokio and on smol (SPEC-NOTES "Consent
//! receipts"): the spec's dinner completes, and each side's `receipts` (what `a2acp
//! receipts --json` prints) lists receipts signed by its own key for what its user shared,
//! declined and confirmed; both confirmed the same proposal; the value Bob received is the
//! one Alice's receipt hashed; the list verifies offline as exported, survives a restart,
//! and an altered copy does not verify. Each side keeps the agreement (SPEC-NOTES
//! "Receipts of an agreement"): the same proposal, signed by both under their own keys.

use a2acp_core::encoding::{b64_decode, b64_encode};
use a2acp_core::receipt::agreement::Agreement;
use a2acp_core::receipt::{Basis, ReceiptKind, StoredReceipt};
use a2acp_runtime::control::Request;
use a2acp_runtime::home::Home;
use a2acp_runtime::receipts::{verify, VerifyOptions};
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::*;

per_runtime!(a_dinners_receipts_verify_offline_on_both_sides);

async fn key_of(home: &Home) -> [u8; 32] {
    let s = ctl(home, Request::Status).await;
    let k = s.data["key"].as_str().expect("status names the key");
    b64_decode(k)
        .and_then(|b| b.try_into().ok())
        .expect("a key")
}

async fn alice_address(home: &Home) -> String {
    let s = ctl(home, Request::Status).await;
    s.data["address"]
        .as_str()
        .expect("status names the address")
        .to_string()
}

async fn receipts(home: &Home, thread: &str) -> (Vec<StoredReceipt>, String) {
    let r = ctl(
        home,
        Request::Receipts {
            thread: Some(thread.to_string()),
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let list = serde_json::from_value(r.data.clone()).expect("receipts");
    (list, r.data.to_string())
}

async fn a_dinners_receipts_verify_offline_on_both_sides(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay(&free_addr(), &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let thread = dinner_completes(&alice, &bob, &hb, bob_cfg.address.clone()).await;

    let mut confirmed = Vec::new();
    for home in [&ha, &hb] {
        let key = key_of(home).await;
        let (list, exported) = receipts(home, &thread).await;
        assert!(list.len() >= 2, "{list:?}");
        for s in &list {
            assert_eq!(s.receipt.verify_by(&key), Ok(()), "{s:?}");
            assert_eq!(s.receipt.thread_id, thread);
        }
        let conf: Vec<_> = list
            .iter()
            .filter(|s| s.receipt.kind == ReceiptKind::Confirmation)
            .collect();
        assert_eq!(conf.len(), 1, "one confirmation: {list:?}");
        assert!(matches!(
            conf[0].receipt.decided_by,
            Some(Basis::User { .. })
        ));
        confirmed.push(conf[0].receipt.proposal.expect("the proposal's digest"));
        // As exported, through what `a2acp receipts verify` runs.
        let report = verify(
            &exported,
            &VerifyOptions {
                key: Some(b64_encode(&key)),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(
            report.ends_with(&format!("{} receipt(s) verified", list.len())),
            "{report}"
        );
        let altered = exported.replacen("\"thread_id\":\"thr_", "\"thread_id\":\"thr_x", 1);
        let e = verify(&altered, &VerifyOptions::default()).unwrap_err();
        assert!(e.contains("the receipt was altered"), "{e}");
    }
    assert_eq!(
        confirmed[0], confirmed[1],
        "both confirmed the same proposal"
    );

    // Both keep the agreement: that proposal, signed by each under the key it has.
    let (ka, kb) = (key_of(&ha).await, key_of(&hb).await);
    let signers = vec![
        format!("{}={}", alice_address(&ha).await, b64_encode(&ka)),
        format!("{}={}", bob_cfg.address, b64_encode(&kb)),
    ];
    for home in [&ha, &hb] {
        let r = ctl(
            home,
            Request::Agreements {
                thread: Some(thread.clone()),
            },
        )
        .await;
        assert!(r.ok, "{r:?}");
        let list: Vec<Agreement> = serde_json::from_value(r.data.clone()).expect("agreements");
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(list[0].proposal_digest, confirmed[0]);
        assert_eq!(list[0].verify(), Ok(2));
        let exported = r.data.to_string();
        let opts = VerifyOptions {
            signers: signers.clone(),
            ..Default::default()
        };
        let report = verify(&exported, &opts).unwrap();
        assert!(
            report.ends_with("0 receipt(s) and 1 agreement(s) verified"),
            "{report}"
        );
        // Bob's signature presented as Alice's key's: named.
        let swapped = VerifyOptions {
            signers: vec![format!("{}={}", bob_cfg.address, b64_encode(&ka))],
            ..Default::default()
        };
        let e = verify(&exported, &swapped).unwrap_err();
        assert!(e.contains("signed with"), "{e}");
    }

    // What Alice shared at her prompt is what Bob received: her receipt proves it.
    let (list, _) = receipts(&ha, &thread).await;
    let shared = list
        .iter()
        .find(|s| {
            s.receipt
                .disclosed
                .iter()
                .any(|d| d.field == "transport_mode" && matches!(d.basis, Basis::User { .. }))
        })
        .expect("transport_mode shared by Alice at a prompt");
    let got = ctl(&hb, Request::Thread { id: thread.clone() }).await;
    let value = got.data["theirs"]["transport_mode"].clone();
    assert_eq!(shared.check_value("transport_mode", &value), Ok(()));
    assert!(shared
        .check_value("transport_mode", &serde_json::json!("walking"))
        .is_err());
    // Her timezone left by her always_share tier.
    assert!(list
        .iter()
        .any(|s| s.receipt.disclosed.iter().any(|d| d.field == "timezone"
            && d.basis
                == Basis::Tier {
                    tier: "always_share".into()
                })));

    // Kept across a restart; an unknown thread is named.
    alice.stop().await;
    let alice = rt.agent(&ha, "alice", None);
    let (again, _) = receipts(&ha, &thread).await;
    assert_eq!(again, list);
    let r = ctl(
        &ha,
        Request::Receipts {
            thread: Some("thr_nope".into()),
        },
    )
    .await;
    assert!(
        !r.ok && r.error.as_deref().unwrap_or("").contains("thr_nope"),
        "{r:?}"
    );
    alice.stop().await;
    bob.stop().await;
}
