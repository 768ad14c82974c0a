//! What the user is told about a thread is true on both sides: who it waits for at
//! every stage of the §4 dinner (the user, the other agent, the actions, nobody), and a
//! field this side declined is held as declined here as the other side holds it.

use std::collections::BTreeSet;

use crate::agent::permissions::Tier;
use crate::agent::tests::support::*;
use crate::agent::*;
use crate::harness::{dinner, Net};

/// Who thread `id` waits for on node `i`.
fn waiting(net: &Net, i: usize, id: &str) -> Waiting {
    net.nodes[i].agent.thread(id).unwrap().waiting
}

/// Alice opens the dinner and declines what Bob asks her; Bob proposes; each user
/// confirms in turn; each side carries out its actions. At each step both sides say who
/// the thread waits for, and what Alice declined is declined on her side as on Bob's.
#[test]
fn each_side_is_told_who_it_waits_for_and_what_was_declined() {
    let (mut net, a, b) = dinner_net();
    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner::intent(),
            context: dinner::context(),
        },
    );
    net.settle();
    let id = new_thread(&net, a, &[]);
    let p = net
        .prompt(a)
        .expect("Alice is asked to share what Bob asks");
    assert_eq!(waiting(&net, a, &id), Waiting::User, "{}", net.render(None));
    assert_eq!(
        waiting(&net, b, &id),
        Waiting::Peer,
        "Bob waits for Alice's answer"
    );
    let PromptKind::Consent { fields } = &p.kind else {
        panic!("a consent prompt: {p:?}");
    };
    let asked: BTreeSet<String> = fields.iter().map(|f| f.field.clone()).collect();
    assert!(!asked.is_empty());

    net.answer_consent(a, p.id, ConsentAnswer::DeclineAll);
    net.settle();
    let ta = net.nodes[a].agent.thread(&id).unwrap();
    let tb = net.nodes[b].agent.thread(&id).unwrap();
    // The decliner holds as declined what the refused side holds as declined.
    assert!(asked.is_subset(&ta.declined), "{:?}", ta.declined);
    assert!(
        asked.is_subset(&tb.peer_unavailable),
        "{:?}",
        tb.peer_unavailable
    );
    assert!(ta.declined.iter().all(|f| !ta.shared.contains_key(f)));
    assert!(
        tb.declined.is_empty(),
        "Bob declined nothing: {:?}",
        tb.declined
    );

    // Both are asked about Bob's proposal: both wait for their user.
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Proposed);
    assert_eq!(waiting(&net, a, &id), Waiting::User);
    assert_eq!(waiting(&net, b, &id), Waiting::User);

    // Alice confirms: her side waits for Bob now, not for her.
    let (pa, _) = resolution_prompt(&net, a);
    net.answer_resolution(a, pa.id, ResolutionAnswer::Confirm);
    net.settle();
    assert_eq!(state(&net, a, &id), ThreadState::Proposed);
    assert_eq!(waiting(&net, a, &id), Waiting::Peer, "{}", net.render(None));
    assert_eq!(waiting(&net, b, &id), Waiting::User);

    // Bob confirms: both carry out their actions.
    let (pb, _) = resolution_prompt(&net, b);
    net.answer_resolution(b, pb.id, ResolutionAnswer::Confirm);
    net.settle();
    assert_eq!(state(&net, a, &id), ThreadState::Executing);
    assert_eq!(waiting(&net, a, &id), Waiting::Actions);
    assert_eq!(waiting(&net, b, &id), Waiting::Actions);

    // Alice's done: she waits for Bob's report; Bob's done: nobody waits.
    assert!(!net.finish_action(a, Ok(())).unwrap().undo);
    net.settle();
    assert_eq!(waiting(&net, a, &id), Waiting::Peer, "{}", net.render(None));
    assert_eq!(waiting(&net, b, &id), Waiting::Actions);
    while net.finish_action(b, Ok(())).is_some() {
        net.settle();
    }
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Completed,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Completed);
    assert_eq!(waiting(&net, a, &id), Waiting::Nothing);
    assert_eq!(waiting(&net, b, &id), Waiting::Nothing);
    // What was declined stays declined in the record of the thread.
    assert!(asked.is_subset(&net.nodes[a].agent.thread(&id).unwrap().declined));
}

/// A field declined by a tier (never_share), without a prompt, is declined on this side
/// as on the other; the two records agree field for field.
#[test]
fn a_field_declined_by_a_tier_is_declined_on_both_sides() {
    let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let mut alice = dinner::alice("a2acp.io");
    alice.permissions.set("transport_mode", Tier::NeverShare);
    let a = net.add_agent(alice, [1; 32], [11; 32]);
    let b = net.add_agent(dinner::bob("a2acp.io"), [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner::intent(),
            context: dinner::context(),
        },
    );
    net.settle();
    let id = new_thread(&net, a, &[]);
    // The declines by tier go with the answer to what Alice is asked in the same round.
    while let Some(p) = net.prompt(a) {
        let PromptKind::Consent { fields } = &p.kind else {
            break;
        };
        assert!(fields.iter().all(|f| f.field != "transport_mode"), "{p:?}");
        let mut m = std::collections::BTreeMap::new();
        for f in fields {
            m.insert(f.field.clone(), FieldChoice::Share);
        }
        net.answer_consent(a, p.id, ConsentAnswer::ShareSelected(m));
        net.settle();
    }
    let ta = net.nodes[a].agent.thread(&id).unwrap();
    let tb = net.nodes[b].agent.thread(&id).unwrap();
    assert!(tb.asked.contains("transport_mode"), "{}", net.render(None));
    assert!(
        ta.declined.contains("transport_mode"),
        "{}",
        net.render(None)
    );
    assert!(!ta.shared.contains_key("transport_mode"));
    assert_eq!(ta.declined, tb.peer_unavailable);
    assert_eq!(tb.declined, ta.peer_unavailable);
}
