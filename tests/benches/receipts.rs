//! Consent receipts' costs, printed (SPEC-NOTES "Consent receipts"): the size of the
//! receipts a dinner signs (its first context's nine fields, one field shared at a
//! prompt, a decline, a confirmation; each alone and as `a2acp receipts --json` keeps it
//! with its salts), the time to sign and to verify one, and verification against the
//! baseline of a bare Ed25519 verification of the same signed bytes, measured in the same
//! run (the ratio is the cost of the canonical JSON).
//!
//! `cargo bench -p a2acp-tests --bench receipts` (`RECEIPTS_BENCH_N=N` for another count).

use std::time::Instant;

use a2acp_core::crypto::{IdentityKey, PublicKey};
use a2acp_core::packet::ResolutionBody;
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
}
