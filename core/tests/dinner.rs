//! The spec's dinner example end to end (§4 first packet, §6.1 request, §7.3 batched
//! consent, §7.5 a decline, §8.1 resolution, §8.2 confirmation, §9 execution), two agents
//! and a relay on one virtual clock, with the transcript snapshotted per participant.

use std::collections::BTreeMap;

use a2acp_core::agent::{
    AgentConfig, Command, ConsentAnswer, FieldChoice, PromptKind, RelationshipOverride,
    ResolutionAnswer, ThreadState,
};
use a2acp_core::harness::Net;
use a2acp_core::packet::{Context, Intent};
use a2acp_core::{Address, Timestamp};
use serde_json::json;

fn ctx(v: serde_json::Value) -> Context {
    v.as_object().cloned().unwrap()
}

fn set(xs: &[&str]) -> std::collections::BTreeSet<String> {
    xs.iter().map(|s| s.to_string()).collect()
}

/// Alice and Bob as in the spec: Bob pre-authorised his availability, dietary and area
/// for Alice (§7.2), Alice runs the onboarding defaults (§14.1).
pub fn dinner_net() -> (Net, usize, usize) {
    let start = Timestamp::parse_rfc3339("2026-03-21T14:30:00Z").unwrap();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let alice_addr = Address::parse("agent:alice@a2acp.io").unwrap();
    let bob_addr = Address::parse("agent:bob@a2acp.io").unwrap();

    let mut alice = AgentConfig::new(alice_addr.clone());
    alice.profile = ctx(json!({
        "name": "Alice",
        "timezone": "Europe/London",
        "transport_mode": "driving",
        "cuisine_preference": "Italian",
        "health_info": "SECRET-asthma-inhaler",
    }));
    let mut bob = AgentConfig::new(bob_addr.clone());
    bob.profile = ctx(json!({
        "name": "Bob",
        "timezone": "Europe/London",
        "time_windows": ["18:30-21:00"],
        "dietary": ["none"],
        "location_preference": "anywhere within 20 min drive of Reading centre",
    }));
    let mut o = BTreeMap::new();
    o.insert(
        alice_addr,
        RelationshipOverride {
            label: "close_friend".into(),
            promote_to_always_share: set(&[
                "specific_availability",
                "dietary",
                "general_location_area",
            ]),
            ..Default::default()
        },
    );
    bob.overrides = o;
    let a = net.add_agent(alice, [1; 32], [11; 32]);
    let b = net.add_agent(bob, [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    (net, a, b)
}

pub fn start_dinner(net: &mut Net, a: usize, b: usize) {
    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: Intent {
                category: "scheduling".into(),
                summary: "Coordinate dinner on Friday".into(),
                urgency: Some("low".into()),
                scope_change: None,
            },
            context: ctx(json!({
                "event_type": "dinner",
                "proposed_date": "2026-03-27",
                "time_windows": ["18:00-21:00"],
                "location_preference": "central Reading",
                "party_size": 2,
                "dietary": ["vegetarian"],
                "budget_range": "£20-40pp",
                "flexibility": {"date": "somewhat_flexible", "time": "flexible", "location": "flexible"}
            })),
        },
    );
    net.settle();
}

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
