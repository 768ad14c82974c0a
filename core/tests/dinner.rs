//! The spec's dinner example end to end (§4 first packet, §6.1 request, §7.3 batched
//! consent, §7.5 a decline, §8.1 resolution, §8.2 confirmation, §9 execution), two agents
//! and a relay on one virtual clock, with the transcript snapshotted per participant.

use std::collections::BTreeMap;

use a2acp_core::agent::{ConsentAnswer, FieldChoice, PromptKind, ResolutionAnswer, ThreadState};
use a2acp_core::harness::dinner::{net as dinner_net, start as start_dinner};

#[test]
fn dinner_end_to_end() {
    let (mut net, a, b) = dinner_net();
    start_dinner(&mut net, a, b);

    // §7.3: one batched prompt for Alice with both fields Bob's agent asked for.
    let p = net.prompt(a).expect("Alice is asked for consent");
    let PromptKind::Consent { fields } = &p.kind else {
        panic!("not a consent prompt: {p:?}")
    };
    let names: Vec<&str> = fields.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(names, ["transport_mode", "cuisine_preference"]);
    assert!(
        net.prompt(b).is_none(),
        "Bob pre-authorised everything asked of him"
    );

    // §7.5: share transport, decline cuisine.
    let mut choice = BTreeMap::new();
    choice.insert("transport_mode".to_string(), FieldChoice::Share);
    choice.insert("cuisine_preference".to_string(), FieldChoice::DontShare);
    net.answer_consent(a, p.id, ConsentAnswer::ShareSelected(choice));
    net.settle();

    // §8.1–8.2: both users see the resolution and confirm.
    let pa = net.prompt(a).expect("Alice sees the resolution");
    let pb = net.prompt(b).expect("Bob sees the resolution");
    let PromptKind::Resolution { proposal, .. } = &pa.kind else {
        panic!("{pa:?}")
    };
    assert!(proposal.summary.contains("19:00"), "{}", proposal.summary);
    assert_eq!(proposal.details["date"], "2026-03-27");
    net.answer_resolution(a, pa.id, ResolutionAnswer::Confirm);
    net.settle();
    net.answer_resolution(b, pb.id, ResolutionAnswer::Confirm);
    net.settle();

    // §9: actions run only after confirmation; each agent does its own.
    while net.finish_action(a, Ok(())).is_some() || net.finish_action(b, Ok(())).is_some() {
        net.settle();
    }
    net.settle();

    let ta = net.nodes[a]
        .agent
        .threads()
        .values()
        .next()
        .unwrap()
        .clone();
    let tb = net.nodes[b]
        .agent
        .threads()
        .values()
        .next()
        .unwrap()
        .clone();
    assert_eq!(ta.state, ThreadState::Completed);
    assert_eq!(tb.state, ThreadState::Completed);
    assert_eq!(ta.peer_unavailable.len(), 0);
    assert!(tb.peer_unavailable.contains("cuisine_preference"));
    assert_eq!(
        net.nodes[a].prompts_shown, 2,
        "one consent prompt and one resolution prompt"
    );
    // §11.2: context, context_request, context_response, resolution.
    let kinds: Vec<&str> = ta.history.iter().map(|h| h.kind.as_str()).take(4).collect();
    assert_eq!(
        kinds,
        [
            "context",
            "context_request",
            "context_response",
            "resolution"
        ],
        "{}",
        net.render(None)
    );

    // Alice's never_share value never left her agent, and the relay holds no plaintext.
    for h in ta.history.iter().filter(|h| h.outgoing) {
        assert!(!h.json.contains("SECRET-asthma"), "{}", h.json);
    }
    for v in net.relay_store.values() {
        let s = String::from_utf8_lossy(v);
        assert!(
            !s.contains("vegetarian") && !s.contains("Reading") && !s.contains("dinner"),
            "relay holds plaintext: {s}"
        );
    }

    insta::assert_snapshot!("dinner_alice", net.render(Some("alice")));
    insta::assert_snapshot!("dinner_bob", net.render(Some("bob")));
    insta::assert_snapshot!("dinner_relay", net.render(Some("relay")));
}

#[test]
fn dinner_is_deterministic() {
    let run = || {
        let (mut net, a, b) = dinner_net();
        start_dinner(&mut net, a, b);
        let p = net.prompt(a).unwrap();
        net.answer_consent(a, p.id, ConsentAnswer::DeclineAll);
        net.settle();
        (
            net.render(None),
            net.nodes[a].store.clone(),
            net.relay_store.clone(),
        )
    };
    assert_eq!(run(), run());
}
