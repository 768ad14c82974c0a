//! §14.2 progressive introductions: each shown once, when it first matters, and never
//! again — not on the next thread, not after a restart.

use std::collections::BTreeMap;

use serde_json::json;

use crate::agent::introductions::MEMORY_INTRODUCED_AFTER;
use crate::agent::tests::support::*;
use crate::agent::*;
use crate::harness::{dinner, game_night, Net};
use crate::space::{SpaceParticipant, SpacePermission};

fn net() -> (Net, usize, usize) {
    dinner_net()
}

/// The introductions node `i` was shown, in order.
fn introduced(net: &Net, i: usize) -> Vec<Introduction> {
    net.nodes[i]
        .notifications
        .iter()
        .filter(|n| n.kind == NotifyKind::Introduction)
        .map(|n| n.introduction.expect("an introduction says which"))
        .collect()
}

fn text_of(net: &Net, i: usize, intro: Introduction) -> String {
    net.nodes[i]
        .notifications
        .iter()
        .find(|n| n.introduction == Some(intro))
        .map(|n| n.text.clone())
        .unwrap_or_default()
}

/// One dinner from Alice's first packet to COMPLETED on both sides, whatever is asked
/// (consent prompts share what is suggested; proposals are confirmed). Memory may leave
/// nothing to ask, so no prompt is expected.
fn dinner(net: &mut Net, a: usize, b: usize) -> String {
    let to = net.address(b);
    let before: Vec<String> = net.nodes[a].agent.threads().keys().cloned().collect();
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner::intent(),
            context: dinner::context(),
        },
    );
    net.settle();
    let id = new_thread(net, a, &before);
    for _ in 0..40 {
        if state(net, a, &id).is_terminal() && state(net, b, &id).is_terminal() {
            break;
        }
        let mut acted = false;
        for i in [a, b] {
            if let Some(p) = net.prompt(i) {
                acted = true;
                match p.kind {
                    PromptKind::Consent { fields } => {
                        let m: BTreeMap<String, FieldChoice> = fields
                            .into_iter()
                            .map(|f| (f.field, FieldChoice::Share))
                            .collect();
                        net.answer_consent(i, p.id, ConsentAnswer::ShareSelected(m));
                    }
                    PromptKind::Resolution { .. } => {
                        net.answer_resolution(i, p.id, ResolutionAnswer::Confirm)
                    }
                }
            }
            while net.finish_action(i, Ok(())).is_some() {
                acted = true;
            }
        }
        net.settle();
        assert!(
            acted || net.prompt(a).is_some() || net.prompt(b).is_some() || {
                state(net, a, &id).is_terminal() && state(net, b, &id).is_terminal()
            },
            "{}",
            net.render(None)
        );
    }
    assert_eq!(
        state(net, a, &id),
        ThreadState::Completed,
        "{}",
        net.render(None)
    );
    assert_eq!(state(net, b, &id), ThreadState::Completed);
    id
}

#[test]
fn the_first_thread_is_introduced_once_on_each_side_and_never_after_a_restart() {
    let (mut net, a, b) = net();
    let first = dinner(&mut net, a, b);
    for i in [a, b] {
        assert_eq!(introduced(&net, i), vec![Introduction::FirstThread]);
        let n = net.nodes[i]
            .notifications
            .iter()
            .find(|n| n.kind == NotifyKind::Introduction)
            .unwrap();
        assert_eq!(n.thread_id.as_deref(), Some(first.as_str()));
    }
    // §14.1 step 3: who it is about, and that the agent will check more often for now.
    let text = text_of(&net, a, Introduction::FirstThread);
    assert!(text.contains("agent:bob@a2acp.io"), "{text}");
    assert!(text.contains("check with you more often"), "{text}");
    assert!(text_of(&net, b, Introduction::FirstThread).contains("agent:alice@a2acp.io"));
    // Restarted from its records, neither agent introduces it again.
    net.crash_and_restart_agent(a, [98; 32]);
    net.crash_and_restart_agent(b, [97; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    dinner(&mut net, a, b);
    for i in [a, b] {
        assert_eq!(introduced(&net, i), vec![Introduction::FirstThread]);
    }
}

/// The third approval of the same field for the same person brings the first §7.2
/// suggestion, introduced once just before it (§14.2 "third thread with same person").
/// Another agent opens each thread and asks for `transport_mode` (Bob would remember it).
#[test]
fn one_tap_suggestions_are_introduced_with_the_first_one() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let ask = |w: &mut HostileWorld, field: &str| {
        let thread = w.m.new_thread_id();
        w.m_send(
            &thread,
            "context",
            json!({
                "intent": {"category": "scheduling", "summary": "Dinner on Friday"},
                "context": {"time_windows": ["18:30-21:00"]},
                "needs": [{"field": field, "priority": "helpful", "reason": "to pick a place"}],
            }),
        );
        let p = w.net.nodes[w.alice]
            .prompts
            .values()
            .find(|p| p.thread_id == thread)
            .cloned()
            .expect("Alice is asked");
        let share = BTreeMap::from([(field.to_string(), FieldChoice::Share)]);
        w.net
            .answer_consent(w.alice, p.id, ConsentAnswer::ShareSelected(share));
        w.m.pump(&mut w.net);
    };
    let later = |w: &HostileWorld| -> Vec<Notification> {
        w.net.nodes[w.alice]
            .notifications
            .iter()
            .filter(|n| matches!(n.kind, NotifyKind::Introduction | NotifyKind::Suggestion))
            .filter(|n| n.introduction != Some(Introduction::FirstThread))
            .cloned()
            .collect()
    };
    for _ in 0..2 {
        ask(&mut w, "transport_mode");
    }
    assert!(later(&w).is_empty());
    ask(&mut w, "transport_mode");
    let shown = later(&w);
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(shown[0].introduction, Some(Introduction::Suggestions));
    assert!(shown[0].text.contains("three times"), "{}", shown[0].text);
    assert_eq!(shown[1].kind, NotifyKind::Suggestion);
    // The next suggestion comes alone.
    for _ in 0..3 {
        ask(&mut w, "cuisine_preference");
    }
    let shown = later(&w);
    assert_eq!(shown.len(), 3, "{shown:?}");
    assert_eq!(shown[2].kind, NotifyKind::Suggestion);
}

/// After ten threads, what memory learnt is surfaced once — naming the peer and a field
/// it learnt — and the memory introduction says memory stays on the device.
#[test]
fn after_ten_threads_memory_is_introduced_once_with_what_it_learnt() {
    let (mut net, a, b) = net();
    for n in 1..=MEMORY_INTRODUCED_AFTER + 2 {
        dinner(&mut net, a, b);
        let shown = introduced(&net, a).contains(&Introduction::Memory);
        assert_eq!(
            shown,
            n >= MEMORY_INTRODUCED_AFTER,
            "after {n} threads: {:?}",
            net.nodes[a]
                .notifications
                .iter()
                .map(|x| (x.kind, x.text.clone()))
                .collect::<Vec<_>>()
        );
    }
    for i in [a, b] {
        let n = introduced(&net, i)
            .into_iter()
            .filter(|x| *x == Introduction::Memory)
            .count();
        assert_eq!(n, 1);
    }
    let text = text_of(&net, a, Introduction::Memory);
    assert!(text.contains("agent:bob@a2acp.io"), "{text}");
    assert!(text.contains("stays on this device"), "{text}");
}

#[test]
fn the_first_group_thread_introduces_the_coordinator_to_everyone() {
    let mut net = game_night::net(true);
    game_night::start(&mut net, GroupConfirmation::All);
    let coordinator = net.address(0);
    for i in 0..net.nodes.len() {
        assert_eq!(
            introduced(&net, i),
            vec![Introduction::FirstGroup],
            "node {i}"
        );
    }
    assert!(text_of(&net, 0, Introduction::FirstGroup).contains("Your agent is its coordinator"));
    let text = text_of(&net, 1, Introduction::FirstGroup);
    assert!(
        text.contains(&format!("{coordinator}'s agent is its coordinator")),
        "{text}"
    );
}

#[test]
fn the_first_space_is_introduced_to_its_creator_and_to_each_member() {
    let (mut net, a, b) = net();
    net.command(
        a,
        Command::CreateSpace {
            name: "Family trip".into(),
            participants: vec![SpaceParticipant {
                address: net.address(b),
                permission: SpacePermission::WriteOwnFields,
            }],
            fields: json!({"destination": "Lisbon"})
                .as_object()
                .cloned()
                .unwrap(),
        },
    );
    net.settle();
    for i in [a, b] {
        assert_eq!(introduced(&net, i), vec![Introduction::FirstSpace]);
        assert!(text_of(&net, i, Introduction::FirstSpace).contains("Family trip"));
    }
    net.command(
        a,
        Command::CreateSpace {
            name: "Book club".into(),
            participants: vec![SpaceParticipant {
                address: net.address(b),
                permission: SpacePermission::ReadAll,
            }],
            fields: Context::new(),
        },
    );
    net.settle();
    for i in [a, b] {
        assert_eq!(introduced(&net, i), vec![Introduction::FirstSpace]);
    }
}
