//! Consent receipts' costs, printed (SPEC-NOTES "Consent receipts"): the size of the
//! receipts a dinner signs (its first context's nine fields, one field shared at a
//! prompt, a decline, a confirmation; each alone and as `a2acp receipts --json` keeps it
//! with its salts), the time to sign and to verify one, and verification against the
//! baseline of a bare Ed25519 verification of the same signed bytes, measured in the same
//! run (the ratio is the cost of the canonical JSON).
//!
//! And the records beside them (SPEC-NOTES "Receipts of an agreement", "Retraction"): the
//! size of an agreement on a dinner's proposal (two people; a group of five with a quorum
//! of three, and with all five) and of a retraction record with its acknowledgement; the
//! time to verify an agreement (per confirmation: the proposal's digest once, then one
//! signature each) and an acknowledgement, against the same baseline.
//!
//! `cargo bench -p a2acp-tests --bench receipts` (`RECEIPTS_BENCH_N=N` for another count).

use std::time::Instant;

use a2acp_core::crypto::{IdentityKey, PublicKey};
use a2acp_core::packet::ResolutionBody;
use a2acp_core::receipt::agreement::{Agreement, Confirmation, AGREEMENT_VERSION};
use a2acp_core::receipt::retraction::{ack_bytes, Acknowledgement, Retraction, RETRACTION_VERSION};
use a2acp_core::receipt::{
    proposal_digest, value_hash, Basis, Declined, Disclosed, Purpose, Receipt, ReceiptKind, Salt,
    StoredReceipt, RECEIPT_VERSION,
};
use a2acp_core::Address;
use serde_json::{json, Value};

fn receipt(
    kind: ReceiptKind,
    disclosed: &[(&str, Value, Basis)],
    declined: &[&str],
) -> StoredReceipt {
    let salt = Salt([7; 16]);
    let proposal: ResolutionBody = serde_json::from_value(json!({
        "proposal": {"summary": "Dinner at Bella Italia, Friday 19:30", "details": {"venue": "Bella Italia", "start_utc": "2030-03-22T19:30:00Z"}},
        "requires_confirmation_from": ["agent:alice@a2acp.io", "agent:bob@a2acp.io"]
    }))
    .unwrap();
    let confirmation = kind == ReceiptKind::Confirmation;
    let r = Receipt {
        version: RECEIPT_VERSION,
        receipt_id: "rcp_kz2sc672kdgkppgt".into(),
        kind,
        agent: Address::parse("agent:alice@a2acp.io").unwrap(),
        key: [0; 32],
        peer: Address::parse("agent:bob@a2acp.io").unwrap(),
        thread_id: "thr_x9y8z7w6v5u4".into(),
        purpose: Purpose {
            category: "scheduling".into(),
            summary: "Coordinate dinner on Friday".into(),
        },
        at: "2026-11-29T00:56:22Z".into(),
        disclosed: disclosed
            .iter()
            .map(|(f, v, b)| Disclosed {
                field: f.to_string(),
                value_hash: value_hash(&salt, v).unwrap(),
                basis: b.clone(),
                usage: None,
            })
            .collect(),
        declined: declined
            .iter()
            .map(|f| Declined {
                field: f.to_string(),
                basis: Basis::User { prompt_id: 1 },
            })
            .collect(),
        proposal: confirmation.then(|| proposal_digest(&proposal).unwrap()),
        decided_by: confirmation.then_some(Basis::User { prompt_id: 2 }),
        sig: [0; 64],
    }
    .sign(&IdentityKey::from_seed([1; 32]))
    .unwrap();
    let salts = disclosed
        .iter()
        .map(|(f, _, _)| (f.to_string(), salt))
        .collect();
    StoredReceipt { receipt: r, salts }
}

/// The participants of the group cases (the first two: the two-party dinner's).
const PEOPLE: [&str; 5] = [
    "agent:alice@a2acp.io",
    "agent:bob@a2acp.io",
    "agent:carol@a2acp.io",
    "agent:dave@a2acp.io",
    "agent:erin@a2acp.io",
];

/// The agreement on a dinner's proposal (the resolution the README's dinner sends, with
/// its alternative and actions) among the first `people` of [`PEOPLE`], signed by the
/// first `signed` of them; a quorum when `signed` is fewer than `people`.
fn agreement(people: usize, signed: usize) -> Agreement {
    let who: Vec<Address> = PEOPLE[..people]
        .iter()
        .map(|a| Address::parse(a).unwrap())
        .collect();
    let proposal: ResolutionBody = serde_json::from_value(json!({
        "proposal": {
            "summary": "Dinner on Friday 27 March 2026, 19:00–21:00 (Europe/London), central Reading",
            "details": {"event_type": "dinner", "date": "2026-03-27", "time": "19:00", "end": "21:00",
                "timezone": "Europe/London", "start_utc": "2026-03-27T19:00:00Z",
                "end_utc": "2026-03-27T21:00:00Z", "duration": "PT2H", "party_size": people,
                "dietary": ["vegetarian"], "budget": "GBP 20-40pp", "location": "central Reading"},
            "alternatives": [{"summary": "Friday 27 March, 18:30–20:30 (Europe/London)",
                "reason": "Earliest start in the shared window",
                "details": {"date": "2026-03-27", "time": "18:30", "end": "20:30",
                    "timezone": "Europe/London", "start_utc": "2026-03-27T18:30:00Z",
                    "end_utc": "2026-03-27T20:30:00Z"}}],
            "reasoning": "Selected based on: both available 18:30–21:00 on Friday 27 March (Europe/London); earliest full hour that fits a 2 h dinner; dietary: vegetarian; budget GBP 20-40pp; location: central Reading"
        },
        "requires_confirmation_from": who,
        "actions_on_confirm": [
            {"action": "book_table", "service": "restaurant_booking", "requires_user_approval": true,
             "reversible": true, "by": "agent:bob@a2acp.io"},
            {"action": "add_calendar_event", "requires_user_approval": true, "reversible": true}
        ],
        "quorum": (signed < people).then_some(signed)
    }))
    .unwrap();
    let id = if people == 2 {
        "thr_x9y8z7w6v5u4"
    } else {
        "grp_q3m8x1c7v2n5"
    };
    let digest = proposal_digest(&proposal).unwrap();
    let confirmations = who[..signed]
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let key = IdentityKey::from_seed([i as u8 + 1; 32]);
            Confirmation::sign(&key, a, id, &digest)
        })
        .collect();
    let g = Agreement {
        version: AGREEMENT_VERSION,
        agreement_id: id.into(),
        thread_id: "thr_x9y8z7w6v5u4".into(),
        at: "2026-11-29T01:02:03Z".into(),
        proposal,
        proposal_digest: digest,
        confirmations,
        unsigned: Vec::new(),
    };
    assert_eq!(g.verify().unwrap(), signed);
    g
}

/// Alice's record of taking back two fields from Bob, with his acknowledgement.
fn retraction() -> Retraction {
    let bob = IdentityKey::from_seed([2; 32]);
    let peer = Address::parse(PEOPLE[1]).unwrap();
    let fields = vec!["dietary".to_string(), "transport_mode".to_string()];
    let (thread, rid) = ("thr_x9y8z7w6v5u4", "pkt_7kg592b2f83s");
    let r = Retraction {
        version: RETRACTION_VERSION,
        thread_id: thread.into(),
        retraction_id: rid.into(),
        agent: Address::parse(PEOPLE[0]).unwrap(),
        ack: Some(Acknowledgement {
            key: bob.public().to_bytes(),
            sig: bob.sign(&ack_bytes(&peer, thread, rid, &fields)),
            at: "2026-11-29T01:10:01Z".into(),
        }),
        peer,
        fields,
        asked_at: "2026-11-29T01:10:00Z".into(),
    };
    r.verify().unwrap();
    r
}

/// Mean seconds of `f` over `n` runs.
fn mean(n: usize, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_secs_f64() / n as f64
}

fn main() {
    let n: usize = std::env::var("RECEIPTS_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let started = Basis::UserStarted;
    let dinner = json!({
        "event_type": "dinner", "proposed_date": "2030-03-22", "time_windows": ["18:00-21:00"],
        "location_preference": "central Reading", "party_size": 2, "dietary": ["vegetarian"],
        "budget_range": "£20-40pp",
        "flexibility": {"date": "somewhat_flexible", "time": "flexible", "location": "flexible"}
    });
    let mut first: Vec<(&str, Value, Basis)> = dinner
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone(), started.clone()))
        .collect();
    first.push((
        "timezone",
        json!("Europe/London"),
        Basis::Tier {
            tier: "always_share".into(),
        },
    ));
    let cases = [
        (
            "first context (9 fields)",
            receipt(ReceiptKind::Consent, &first, &[]),
        ),
        (
            "a prompt's answer (1 shared, 1 declined)",
            receipt(
                ReceiptKind::Consent,
                &[(
                    "transport_mode",
                    json!("driving"),
                    Basis::User { prompt_id: 1 },
                )],
                &["cuisine_preference"],
            ),
        ),
        ("confirmation", receipt(ReceiptKind::Confirmation, &[], &[])),
    ];
    println!("receipt sizes (bytes, JSON):");
    for (what, s) in &cases {
        let alone = serde_json::to_vec(&s.receipt).unwrap().len();
        let stored = serde_json::to_vec(s).unwrap().len();
        println!("  {what:<42} {alone:>5} signed, {stored:>5} with its salts");
    }
    let (_, s) = &cases[0];
    let id = IdentityKey::from_seed([1; 32]);
    let key = PublicKey::from_bytes(&s.receipt.key).unwrap();
    let bytes = s.receipt.signed_bytes().unwrap();
    // Baseline: a bare Ed25519 verification of the same bytes.
    let t = Instant::now();
    for _ in 0..n {
        key.verify(&bytes, &s.receipt.sig).unwrap();
    }
    let bare = t.elapsed().as_secs_f64() / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        s.receipt.verify().unwrap();
    }
    let verify = t.elapsed().as_secs_f64() / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(s.receipt.clone().sign(&id).unwrap());
    }
    let sign = t.elapsed().as_secs_f64() / n as f64;
    let t = Instant::now();
    for _ in 0..n {
        s.check_value("dietary", &json!(["vegetarian"])).unwrap();
    }
    let value = t.elapsed().as_secs_f64() / n as f64;
    // What `a2acp receipts verify FILE` does with a dinner's list (the three above).
    let list: Vec<&StoredReceipt> = cases.iter().map(|(_, s)| s).collect();
    let text = serde_json::to_string(&list).unwrap();
    let opts = a2acp_runtime::receipts::VerifyOptions::default();
    let m = n / 10;
    let t = Instant::now();
    for _ in 0..m {
        a2acp_runtime::receipts::verify(&text, &opts).unwrap();
    }
    let file = t.elapsed().as_secs_f64() / m as f64;
    println!("times (mean of {n}, the 9-field receipt):");
    println!(
        "  bare Ed25519 verify of its bytes (baseline) {:>8.1} µs",
        bare * 1e6
    );
    println!(
        "  receipt verify (JCS + Ed25519)              {:>8.1} µs  ({:.2}× the baseline)",
        verify * 1e6,
        verify / bare
    );
    println!(
        "  receipt sign                                {:>8.1} µs  ({:.2}× the baseline)",
        sign * 1e6,
        sign / bare
    );
    println!(
        "  a value checked against its salted hash     {:>8.1} µs",
        value * 1e6
    );
    println!(
        "  `receipts verify` of a dinner's 3 receipts  {:>8.1} µs  ({:.2}× the baseline)",
        file * 1e6,
        file / bare
    );

    // Agreements and retractions.
    let agreements = [
        ("two people", agreement(2, 2)),
        ("group of 5, quorum 3 (3 signed)", agreement(5, 3)),
        ("group of 5, all 5 signed", agreement(5, 5)),
    ];
    let r = retraction();
    println!("agreement and retraction sizes (bytes, JSON as kept and exported):");
    for (what, g) in &agreements {
        let size = serde_json::to_vec(g).unwrap().len();
        let proposal = serde_json::to_vec(&g.proposal).unwrap().len();
        let each = serde_json::to_vec(&g.confirmations[0]).unwrap().len();
        println!(
            "  agreement, {what:<31} {size:>5} ({proposal} the proposal, {each} each confirmation)"
        );
    }
    let unacked = Retraction {
        ack: None,
        ..r.clone()
    };
    println!(
        "  retraction of 2 fields, acknowledged       {:>5} ({} without its acknowledgement)",
        serde_json::to_vec(&r).unwrap().len(),
        serde_json::to_vec(&unacked).unwrap().len()
    );
    println!("times (mean of {n}; ratios against the same baseline):");
    for (what, g) in &agreements {
        let k = g.confirmations.len();
        let all = mean(n / k, || {
            std::hint::black_box(g.verify().unwrap());
        });
        println!(
            "  agreement verify, {what:<31} {:>8.1} µs  ({:.1} µs per confirmation: {:.2}× the baseline)",
            all * 1e6,
            all / k as f64 * 1e6,
            all / k as f64 / bare
        );
    }
    let (_, g) = &agreements[0];
    let one = &g.confirmations[0];
    let c = mean(n, || {
        assert!(one.verify(&g.agreement_id, &g.proposal_digest));
    });
    println!(
        "  one confirmation's signature alone          {:>8.1} µs  ({:.2}× the baseline)",
        c * 1e6,
        c / bare
    );
    let digest = mean(n, || {
        std::hint::black_box(proposal_digest(&g.proposal).unwrap());
    });
    println!(
        "  the proposal's digest (JCS + SHA-256)       {:>8.1} µs  ({:.2}× the baseline)",
        digest * 1e6,
        digest / bare
    );
    // What a signature checked from a record costs beyond the baseline, whose key was
    // parsed once: validating the key (decompression, and the torsion check, a full
    // scalar multiplication; `PublicKey::from_bytes`).
    let parse = mean(n, || {
        std::hint::black_box(PublicKey::from_bytes(&one.key).unwrap());
    });
    println!(
        "  validating a signer's key (torsion check)   {:>8.1} µs  ({:.2}× the baseline)",
        parse * 1e6,
        parse / bare
    );
    let ack = mean(n, || r.verify().unwrap());
    println!(
        "  retraction acknowledgement verify           {:>8.1} µs  ({:.2}× the baseline)",
        ack * 1e6,
        ack / bare
    );
}
