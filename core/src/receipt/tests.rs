use super::*;
use crate::encoding::b64_encode;
use serde_json::json;

fn example() -> (IdentityKey, Receipt, Salt) {
    let id = IdentityKey::from_seed([7; 32]);
    let salt = Salt([9; 16]);
    let r = Receipt {
        version: RECEIPT_VERSION,
        receipt_id: "rcp_0123456789abcdef".into(),
        kind: ReceiptKind::Consent,
        agent: Address::parse("agent:alice@example.org").unwrap(),
        key: [0; 32],
        peer: Address::parse("agent:bob@example.org").unwrap(),
        thread_id: "thr_x9y8z7".into(),
        purpose: Purpose {
            category: "social".into(),
            summary: "Dinner next week".into(),
        },
        at: "2026-11-28T19:00:00Z".into(),
        disclosed: vec![Disclosed {
            field: "dietary".into(),
            value_hash: value_hash(&salt, &json!("vegetarian")).unwrap(),
            basis: Basis::User { prompt_id: 3 },
            usage: None,
        }],
        declined: vec![Declined {
            field: "budget_range".into(),
            basis: Basis::Tier {
                tier: "ask_first".into(),
            },
        }],
        proposal: None,
        decided_by: None,
        sig: [0; 64],
    }
    .sign(&id)
    .unwrap();
    (id, r, salt)
}

/// The worked example of SPEC-NOTES "Consent receipts": the signed bytes are the label
/// and the receipt's canonical JSON without `sig`.
#[test]
fn signed_bytes_are_the_documented_worked_example() {
    let (id, r, _) = example();
    let b = r.signed_bytes().unwrap();
    let (label, json) = b.split_at(RECEIPT_LABEL.len());
    assert_eq!(label, b"A2ACP-CONSENT-RECEIPT-V1\0");
    let want = format!(
        concat!(
            r#"{{"agent":"agent:alice@example.org","at":"2026-11-28T19:00:00Z","#,
            r#""declined":[{{"basis":{{"by":"tier","tier":"ask_first"}},"field":"budget_range"}}],"#,
            r#""disclosed":[{{"basis":{{"by":"user","prompt_id":3}},"field":"dietary","value_hash":"{}"}}],"#,
            r#""key":"{}","kind":"consent","peer":"agent:bob@example.org","#,
            r#""purpose":{{"category":"social","summary":"Dinner next week"}},"#,
            r#""receipt_id":"rcp_0123456789abcdef","thread_id":"thr_x9y8z7","type":"consent_receipt","version":1}}"#
        ),
        b64_encode(&r.disclosed[0].value_hash),
        b64_encode(&id.public().to_bytes()),
    );
    assert_eq!(std::str::from_utf8(json).unwrap(), want);
    // The value hash of the example: salt 0x09 × 16, value "vegetarian".
    let mut pre = b"A2ACP-RECEIPT-VALUE-V1\0".to_vec();
    pre.extend_from_slice(&[9; 16]);
    pre.extend_from_slice(br#""vegetarian""#);
    let h: [u8; 32] = Sha256::digest(&pre).into();
    assert_eq!(r.disclosed[0].value_hash, h);
    assert_eq!(r.verify(), Ok(()));
    assert_eq!(r.verify_by(&id.public().to_bytes()), Ok(()));
}

#[test]
fn a_receipt_round_trips_through_json_and_still_verifies() {
    let (_, r, salt) = example();
    let text = serde_json::to_string(&StoredReceipt {
        receipt: r.clone(),
        salts: [("dietary".to_string(), salt)].into(),
    })
    .unwrap();
    let back: StoredReceipt = serde_json::from_str(&text).unwrap();
    assert_eq!(back.receipt, r);
    assert_eq!(back.receipt.verify(), Ok(()));
    assert_eq!(back.check_value("dietary", &json!("vegetarian")), Ok(()));
    assert_eq!(
        back.check_value("dietary", &json!("vegan")),
        Err(ReceiptError::ValueMismatch("dietary".into()))
    );
    assert_eq!(
        back.check_value("budget_range", &json!(40)),
        Err(ReceiptError::NoSalt("budget_range".into()))
    );
}

/// Every member is covered by the signature: changing any one of them fails.
#[test]
fn altering_any_member_breaks_the_signature() {
    let (_, r, _) = example();
    type Alter = Box<dyn Fn(&mut Receipt)>;
    let alter: Vec<(&str, Alter)> = vec![
        ("receipt_id", Box::new(|r| r.receipt_id.push('x'))),
        ("kind", Box::new(|r| r.kind = ReceiptKind::Confirmation)),
        (
            "agent",
            Box::new(|r| r.agent = Address::parse("agent:eve@example.org").unwrap()),
        ),
        (
            "peer",
            Box::new(|r| r.peer = Address::parse("agent:eve@example.org").unwrap()),
        ),
        ("thread_id", Box::new(|r| r.thread_id.push('x'))),
        ("purpose", Box::new(|r| r.purpose.summary.push('!'))),
        ("at", Box::new(|r| r.at = "2026-11-28T19:00:01Z".into())),
        (
            "disclosed field",
            Box::new(|r| r.disclosed[0].field = "diet".into()),
        ),
        (
            "disclosed hash",
            Box::new(|r| r.disclosed[0].value_hash[0] ^= 1),
        ),
        (
            "disclosed basis",
            Box::new(|r| r.disclosed[0].basis = Basis::UserStarted),
        ),
        ("declined", Box::new(|r| r.declined.clear())),
        ("proposal", Box::new(|r| r.proposal = Some([1; 32]))),
        (
            "decided_by",
            Box::new(|r| r.decided_by = Some(Basis::User { prompt_id: 1 })),
        ),
        ("sig", Box::new(|r| r.sig[5] ^= 1)),
    ];
    for (what, f) in alter {
        let mut x = r.clone();
        f(&mut x);
        assert_eq!(x.verify(), Err(ReceiptError::Signature), "{what}");
    }
    let mut x = r.clone();
    x.version = 2;
    assert_eq!(x.verify(), Err(ReceiptError::Version(2)));
    let mut x = r.clone();
    x.key = IdentityKey::from_seed([8; 32]).public().to_bytes();
    assert_eq!(x.verify(), Err(ReceiptError::Signature));
    assert!(matches!(
        r.verify_by(&[3; 32]),
        Err(ReceiptError::WrongKey { .. })
    ));
}

#[test]
fn the_proposal_digest_is_over_the_canonical_body() {
    let body: ResolutionBody = serde_json::from_value(json!({
        "proposal": {"summary": "Dinner Thursday 19:30", "details": {"b": 1, "a": 2}},
        "requires_confirmation_from": ["agent:bob@example.org"],
        "confirmation_timeout": "PT24H",
        "on_timeout": "expire"
    }))
    .unwrap();
    let d = proposal_digest(&body).unwrap();
    let mut pre = b"A2ACP-PROPOSAL-V1\0".to_vec();
    pre.extend_from_slice(
        concat!(
            r#"{"actions_on_confirm":[],"proposal":{"alternatives":[],"details":{"a":2,"b":1},"#,
            r#""reasoning":"","summary":"Dinner Thursday 19:30"},"#,
            r#""requires_confirmation_from":["agent:bob@example.org"]}"#
        )
        .as_bytes(),
    );
    assert_eq!(d, <[u8; 32]>::from(Sha256::digest(&pre)));
    let mut other = body.clone();
    other.proposal.summary.push('!');
    assert_ne!(proposal_digest(&other), Some(d));
    // How long the asking lasts is not what is agreed.
    let mut later = body.clone();
    later.confirmation_timeout = Some("PT3H".into());
    later.on_timeout = None;
    assert_eq!(proposal_digest(&later), Some(d));
}
