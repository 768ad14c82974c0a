use super::*;
use crate::packet::Proposal;

fn addr(s: &str) -> Address {
    Address::parse(s).unwrap()
}

fn body(quorum: Option<u32>, who: &[&str]) -> ResolutionBody {
    ResolutionBody {
        proposal: Proposal {
            summary: "Dinner at Chez Nous, Friday 19:30".into(),
            details: Default::default(),
            alternatives: Vec::new(),
            reasoning: String::new(),
        },
        requires_confirmation_from: who.iter().map(|a| addr(a)).collect(),
        actions_on_confirm: Vec::new(),
        confirmation_timeout: Some("PT24H".into()),
        on_timeout: Some("remind_then_expire".into()),
        quorum,
    }
}

const ALICE: &str = "agent:alice@example.org";
const BOB: &str = "agent:bob@example.org";
const CAROL: &str = "agent:carol@example.net";

fn agreement(b: ResolutionBody, signers: &[(&str, u8)]) -> Agreement {
    let d = proposal_digest(&b).unwrap();
    Agreement {
        version: AGREEMENT_VERSION,
        agreement_id: "thr_x9y8z7".into(),
        thread_id: "thr_x9y8z7".into(),
        at: "2026-11-28T19:05:00Z".into(),
        proposal: b,
        proposal_digest: d,
        confirmations: signers
            .iter()
            .map(|(a, seed)| {
                Confirmation::sign(
                    &IdentityKey::from_seed([*seed; 32]),
                    &addr(a),
                    "thr_x9y8z7",
                    &d,
                )
            })
            .collect(),
        unsigned: Vec::new(),
    }
}

/// The signed bytes are the label, the confirmer and the agreement id each behind a
/// 4-byte big-endian length, then the 32-byte digest (SPEC-NOTES "Receipts of an
/// agreement").
#[test]
fn confirmation_bytes_are_the_documented_layout() {
    let b = confirmation_bytes(&addr(ALICE), "thr_x9y8z7", &[0xab; 32]);
    let mut want = b"A2ACP-CONFIRMATION-V1\0".to_vec();
    want.extend_from_slice(&[0, 0, 0, 23]);
    want.extend_from_slice(ALICE.as_bytes());
    want.extend_from_slice(&[0, 0, 0, 10]);
    want.extend_from_slice(b"thr_x9y8z7");
    want.extend_from_slice(&[0xab; 32]);
    assert_eq!(b, want);
}

#[test]
fn a_two_party_agreement_verifies_and_survives_json() {
    let a = agreement(body(None, &[ALICE, BOB]), &[(BOB, 2), (ALICE, 1)]);
    assert_eq!(a.verify(), Ok(2));
    let json = serde_json::to_string(&a).unwrap();
    assert!(
        json.starts_with(r#"{"type":"agreement","version":1,"#),
        "{json}"
    );
    let back: Agreement = serde_json::from_str(&json).unwrap();
    assert_eq!(back, a);
    let keys = [
        (
            addr(ALICE),
            IdentityKey::from_seed([1; 32]).public().to_bytes(),
        ),
        (
            addr(BOB),
            IdentityKey::from_seed([2; 32]).public().to_bytes(),
        ),
    ];
    assert_eq!(a.verify_keys(&keys), Ok(2));
    let wrong = [(addr(BOB), [9; 32])];
    assert!(matches!(
        a.verify_keys(&wrong),
        Err(AgreementError::WrongKey { .. })
    ));
}

#[test]
fn an_altered_agreement_is_named() {
    let good = agreement(body(None, &[ALICE, BOB]), &[(ALICE, 1), (BOB, 2)]);

    let mut a = good.clone();
    a.proposal.proposal.summary = "Dinner at Chez Nous, Saturday 19:30".into();
    assert_eq!(a.verify(), Err(AgreementError::ProposalAltered));

    // The proposal and its digest both replaced: the signatures no longer cover it.
    let mut a = good.clone();
    a.proposal.proposal.summary = "Lunch".into();
    a.proposal_digest = proposal_digest(&a.proposal).unwrap();
    assert_eq!(a.verify(), Err(AgreementError::Signature(ALICE.into())));

    // A confirmation of one thread put in another's agreement.
    let mut a = good.clone();
    a.agreement_id = "thr_other".into();
    assert_eq!(a.verify(), Err(AgreementError::Signature(ALICE.into())));

    // A signature moved to another confirmer.
    let mut a = good.clone();
    a.confirmations[1].address = addr(CAROL);
    assert_eq!(a.verify(), Err(AgreementError::Signature(CAROL.into())));

    let mut a = good.clone();
    a.confirmations.push(a.confirmations[0].clone());
    assert_eq!(a.verify(), Err(AgreementError::Duplicate(ALICE.into())));

    let mut a = good.clone();
    a.version = 2;
    assert_eq!(a.verify(), Err(AgreementError::Version(2)));
}

#[test]
fn a_missing_or_unsigned_confirmation_is_incomplete() {
    let mut a = agreement(body(None, &[ALICE, BOB]), &[(ALICE, 1)]);
    a.unsigned = vec![addr(BOB)];
    let e = a.verify().unwrap_err();
    assert_eq!(
        e.to_string(),
        "1 signed confirmations of the 2 the proposal requires (agent:bob@example.org confirmed unsigned)"
    );
}

#[test]
fn a_quorum_counts_signed_confirmations_of_those_named() {
    let b = body(Some(2), &[ALICE, BOB, CAROL]);
    assert_eq!(
        agreement(b.clone(), &[(ALICE, 1), (CAROL, 3)]).verify(),
        Ok(2)
    );
    assert!(matches!(
        agreement(b.clone(), &[(ALICE, 1)]).verify(),
        Err(AgreementError::Incomplete {
            signed: 1,
            needed: 2,
            ..
        })
    ));
    let outsider = agreement(body(Some(2), &[ALICE, BOB]), &[(ALICE, 1), (CAROL, 3)]);
    assert_eq!(
        outsider.verify(),
        Err(AgreementError::NotRequired(CAROL.into()))
    );
}
