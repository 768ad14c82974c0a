//! Receipts of an agreement (§8.3; SPEC-NOTES "Receipts of an agreement"): signed
//! confirmations on the wire, refused when forged, and the agreement each participant
//! keeps — two-party, a group with everyone, a group with a quorum.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::agent::tests::support::*;
use crate::agent::*;
use crate::crypto::IdentityKey;
use crate::encoding::b64_encode;
use crate::harness::game_night::{self, Answer};
use crate::harness::Net;
use crate::packet::ResolutionBody;
use crate::receipt::agreement::{confirmation_bytes, Agreement, AgreementError, AGREEMENT_PREFIX};
use crate::receipt::proposal_digest;

pub(in crate::agent) fn agreements(net: &Net, i: usize) -> Vec<Agreement> {
    net.nodes[i]
        .store
        .iter()
        .filter(|(k, _)| k.starts_with(AGREEMENT_PREFIX))
        .map(|(_, v)| serde_json::from_slice(v).expect("an agreement record parses"))
        .collect()
}

#[test]
fn both_sides_of_a_dinner_keep_the_same_agreement_signed_by_both() {
    let (mut net, a, b) = dinner_net();
    let id = to_proposed(&mut net, a, b);
    for i in [a, b] {
        let p = net.prompt(i).expect("resolution prompt");
        net.answer_resolution(i, p.id, ResolutionAnswer::Confirm);
    }
    net.settle();
    assert_eq!(state(&net, a, &id), ThreadState::Executing);
    let (ga, gb) = (agreements(&net, a), agreements(&net, b));
    assert_eq!((ga.len(), gb.len()), (1, 1), "{}", net.render(None));
    for g in [&ga[0], &gb[0]] {
        assert_eq!(g.verify(), Ok(2));
        assert_eq!(g.agreement_id, id);
        assert!(g.unsigned.is_empty());
        let keys = [
            (net.address(a), net.nodes[a].agent.public_key().to_bytes()),
            (net.address(b), net.nodes[b].agent.public_key().to_bytes()),
        ];
        assert_eq!(g.verify_keys(&keys), Ok(2));
    }
    assert_eq!(ga[0].proposal_digest, gb[0].proposal_digest);
    assert_eq!(ga[0].proposal, gb[0].proposal);
    // The record survives a restart, and a block deletes it with the thread.
    net.crash_and_restart_agent(a, [77; 32]);
    net.connect(a);
    net.settle();
    assert_eq!(agreements(&net, a), ga);
    while net.finish_action(a, Ok(())).is_some() || net.finish_action(b, Ok(())).is_some() {
        net.settle();
    }
    assert_eq!(state(&net, a, &id), ThreadState::Completed);
    let bob = net.address(b);
    net.command(a, Command::Block(bob));
    net.settle();
    assert_eq!(agreements(&net, a), Vec::new());
}

fn resolution(w: &HostileWorld) -> Value {
    json!({
        "proposal": {
            "summary": "Dinner at Dopo, Friday 27 March, 19:00",
            "details": {"venue": "Dopo", "date": "2026-03-27", "time": "19:00"},
        },
        "requires_confirmation_from": [w.alice_addr().as_str(), w.m.address.as_str()],
        "actions_on_confirm": [{"action": "add_calendar_event", "reversible": true}],
        "confirmation_timeout": "PT24H",
    })
}

/// Mallory's identity in [`HostileWorld`].
fn mallory_key() -> IdentityKey {
    IdentityKey::from_seed([66; 32])
}

fn sig(w: &HostileWorld, key: &IdentityKey, aid: &str, body: &Value) -> String {
    let body: ResolutionBody = serde_json::from_value(body.clone()).unwrap();
    let d = proposal_digest(&body).unwrap();
    b64_encode(&key.sign(&confirmation_bytes(&w.m.address, aid, &d)))
}

fn refusals(w: &HostileWorld) -> Vec<String> {
    w.net.nodes[w.alice]
        .audit
        .iter()
        .filter_map(|r| match &r.event {
            AgentEvent::ConfirmationRefused { why, .. } => Some(why.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_forged_or_misdirected_confirmation_is_refused_and_a_signed_one_counts() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let thread = w.alice_opens();
    let body = resolution(&w);
    let res = w.m_send(&thread, "resolution", body.clone());
    let prompt = w.net.prompt(w.alice).expect("the user is asked");
    w.net
        .answer_resolution(w.alice, prompt.id, ResolutionAnswer::Confirm);
    w.m.pump(&mut w.net);
    // Alice's confirmation is signed by her key over the proposal Mallory sent.
    let sent =
        w.m.received
            .iter()
            .find(|r| r.kind() == "resolution_response")
            .expect("alice confirmed");
    let alice_sig = sent.packet["signature"]
        .as_str()
        .expect("signed")
        .to_string();
    let d = proposal_digest(&serde_json::from_value(body.clone()).unwrap()).unwrap();
    let alice_key = w.net.nodes[w.alice].agent.public_key();
    let sig_bytes: [u8; 64] = crate::encoding::b64_decode(&alice_sig)
        .unwrap()
        .try_into()
        .unwrap();
    assert!(alice_key
        .verify(
            &confirmation_bytes(&w.alice_addr(), &thread, &d),
            &sig_bytes
        )
        .is_ok());

    let other = IdentityKey::from_seed([67; 32]);
    let mut altered = body.clone();
    altered["proposal"]["summary"] = json!("Dinner at Dopo, Saturday 28 March, 19:00");
    let forgeries = [
        ("zeros", b64_encode(&[0u8; 64])),
        ("another key", sig(&w, &other, &thread, &body)),
        (
            "another proposal",
            sig(&w, &mallory_key(), &thread, &altered),
        ),
        (
            "another thread",
            sig(&w, &mallory_key(), "thr_other", &body),
        ),
    ];
    for (n, (what, s)) in forgeries.iter().enumerate() {
        w.m_send(
            &thread,
            "resolution_response",
            json!({"resolution_id": res, "status": "confirmed", "signature": s}),
        );
        assert_eq!(w.state(&thread), ThreadState::Proposed, "{what}");
        assert_eq!(refusals(&w).len(), n + 1, "{what}");
    }
    assert!(agreements(&w.net, w.alice).is_empty());
    // A confirmation that passes on others' confirmations from a non-coordinator:
    // Mallory's own signature counts, what it passes on does not.
    let good = sig(&w, &mallory_key(), &thread, &body);
    w.m_send(
        &thread,
        "resolution_response",
        json!({"resolution_id": res, "status": "confirmed", "signature": good,
               "confirmations": [{"address": "agent:carol@a2acp.io",
                                  "key": b64_encode(&[1; 32]), "sig": b64_encode(&[2; 64])}]}),
    );
    assert_eq!(w.state(&thread), ThreadState::Executing);
    let g = agreements(&w.net, w.alice);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].verify(), Ok(2));
    let who: Vec<String> = g[0]
        .confirmations
        .iter()
        .map(|c| c.address.to_string())
        .collect();
    assert_eq!(who, [w.alice_addr().to_string(), w.m.address.to_string()]);
    assert_eq!(refusals(&w).len(), 4, "{:?}", refusals(&w));
}

#[test]
fn an_unsigned_confirmation_counts_and_the_agreement_says_it_is_unsigned() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let thread = w.alice_opens();
    let res = w.m_send(&thread, "resolution", resolution(&w));
    let prompt = w.net.prompt(w.alice).expect("the user is asked");
    w.net
        .answer_resolution(w.alice, prompt.id, ResolutionAnswer::Confirm);
    w.m.pump(&mut w.net);
    w.m_send(
        &thread,
        "resolution_response",
        json!({"resolution_id": res, "status": "confirmed"}),
    );
    assert_eq!(w.state(&thread), ThreadState::Executing);
    let g = agreements(&w.net, w.alice);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].unsigned, [w.m.address.clone()]);
    assert!(matches!(
        g[0].verify(),
        Err(AgreementError::Incomplete {
            signed: 1,
            needed: 2,
            ..
        })
    ));
}

/// Every agreement a group's agents keep verifies, names the group, and holds at least
/// the quorum of signed confirmations over one proposal.
pub(in crate::agent) fn check_group(net: &Net, required: usize) {
    let mut digests = Vec::new();
    for i in 0..net.nodes.len() {
        for g in agreements(net, i) {
            let n = g.verify().unwrap_or_else(|e| panic!("node {i}: {e}"));
            assert!(n >= required, "node {i}: {n} signed");
            assert!(g.agreement_id.starts_with("grp_"), "{}", g.agreement_id);
            digests.push(g.proposal_digest);
        }
    }
    digests.sort();
    digests.dedup();
    assert_eq!(digests.len(), 1, "one proposal agreed");
}

#[test]
fn every_participant_of_a_group_keeps_the_whole_groups_confirmations() {
    let mut net = game_night::net(true);
    game_night::start(&mut net, GroupConfirmation::All);
    game_night::scripted_users(&mut net, &BTreeMap::new());
    for i in 0..4 {
        let n = agreements(&net, i).len();
        assert_eq!(
            n,
            if i == 0 { 3 } else { 1 },
            "node {i}\n{}",
            net.render(None)
        );
    }
    check_group(&net, 4);
    // Each participant holds all four signatures, not only its own and the coordinator's.
    for i in 1..4 {
        assert_eq!(agreements(&net, i)[0].confirmations.len(), 4, "node {i}");
    }
}

#[test]
fn a_quorum_groups_agreements_hold_the_quorum_without_the_decliner() {
    let mut net = game_night::net(true);
    game_night::start(&mut net, GroupConfirmation::Quorum(3));
    let mut answers = BTreeMap::new();
    answers.insert(3, Answer::Decline);
    game_night::scripted_users(&mut net, &answers);
    assert!(agreements(&net, 3).is_empty());
    check_group(&net, 3);
    let decliner = net.address(3);
    for i in 0..3 {
        for g in agreements(&net, i) {
            assert!(g.confirmations.iter().all(|c| c.address != decliner));
        }
    }
}
