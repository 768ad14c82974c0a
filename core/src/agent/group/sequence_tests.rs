//! Sequential confirmation (§8.3): the spec's "Alice confirms she wants to book → the agent
//! checks availability → Bob confirms the slot", on the game-night group turned into a
//! dinner (so Alice's agent books a table, and checks it between the steps).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::agent::group::sequence::MAX_CHECK_FINDINGS;
use crate::agent::group::tests::states;
use crate::agent::negotiation::agreement_tests::check_group;
use crate::agent::{ActionRequest, Command, GroupConfirmation, PromptKind, ThreadState};
use crate::harness::game_night::{self, Answer};
use crate::harness::Net;
use crate::packet::{Context, Intent};

const ALICE: usize = 0;

fn dinner(net: &mut Net) -> String {
    let participants = (1..net.nodes.len()).map(|i| net.address(i)).collect();
    let mut context = game_night::context();
    context.insert("event_type".into(), json!("dinner"));
    net.command(
        ALICE,
        Command::StartGroupThread {
            participants,
            intent: Intent {
                category: "group_scheduling".into(),
                summary: "Dinner for 4".into(),
                urgency: None,
                scope_change: None,
            },
            context,
            confirmation: GroupConfirmation::Sequential,
        },
    );
    net.settle();
    net.nodes[ALICE]
        .agent
        .groups()
        .keys()
        .next()
        .cloned()
        .expect("alice coordinates the dinner")
}

/// The booking service: every check finds `found`; everything else succeeds. Counts the
/// checks and the bookings.
#[derive(Default)]
struct Service {
    checks: Vec<ActionRequest>,
    done: Vec<ActionRequest>,
}

impl Service {
    fn answer(
        &mut self,
        a: &ActionRequest,
        found: &mut dyn FnMut(usize) -> Result<Context, String>,
    ) -> Result<Context, String> {
        if a.check {
            self.checks.push(a.clone());
            found(self.checks.len())
        } else {
            self.done.push(a.clone());
            Ok(Context::new())
        }
    }
}

fn ctx(v: Value) -> Context {
    v.as_object().cloned().unwrap_or_default()
}

/// The start of the window a resolution prompt proposes.
fn start_of(p: &crate::agent::Prompt) -> Value {
    match &p.kind {
        PromptKind::Resolution { proposal, .. } => proposal.details["start_utc"].clone(),
        _ => Value::Null,
    }
}

/// The nodes asked about the window starting at `start`, in order.
fn asked_about(seen: &[(usize, crate::agent::Prompt)], start: &Value) -> Vec<usize> {
    seen.iter()
        .filter(|(_, p)| start_of(p) == *start)
        .map(|(i, _)| *i)
        .collect()
}

/// Which node showed each resolution prompt, in order.
fn order(seen: &[(usize, crate::agent::Prompt)]) -> Vec<usize> {
    seen.iter().map(|(i, _)| *i).collect()
}

#[test]
fn each_confirmer_is_asked_in_turn_and_the_check_narrows_what_the_next_is_asked() {
    let mut net = game_night::net(true);
    let gid = dinner(&mut net);
    let mut service = Service::default();
    let seen = game_night::scripted_users_with(&mut net, &BTreeMap::new(), &mut |a| {
        service.answer(a, &mut |_| {
            Ok(ctx(json!({"table": "window table for 4, 20:00"})))
        })
    });
    // Alice first, then Bob, Charlie and Diana, one after the other.
    assert_eq!(order(&seen), vec![0, 1, 2, 3], "{}", net.render(None));
    // Alice saw the plan without a table; everyone after her saw the table the check found.
    let table = |p: &crate::agent::Prompt| match &p.kind {
        PromptKind::Resolution { proposal, .. } => proposal.details.contains_key("table"),
        _ => false,
    };
    assert!(!table(&seen[0].1));
    assert!(seen[1..].iter().all(|(_, p)| table(p)));
    // Checked between the steps (not after the last), booked once.
    assert_eq!(service.checks.len(), 3);
    assert!(service
        .checks
        .iter()
        .all(|c| c.action.action == "book_table" && c.thread_id == gid && !c.undo));
    // Every leg's agreement holds the four confirmations over the proposal as narrowed.
    check_group(&net, 4);
    let booked: Vec<_> = service
        .done
        .iter()
        .filter(|a| a.action.action == "book_table")
        .collect();
    assert_eq!(booked.len(), 1);
    assert_eq!(
        booked[0].details["table"],
        json!("window table for 4, 20:00")
    );
    for i in 0..4 {
        assert!(
            states(&net, i).iter().all(|s| *s == ThreadState::Completed),
            "node {i}: {:?}\n{}",
            states(&net, i),
            net.render(None)
        );
    }
}

#[test]
fn a_check_that_changes_what_alice_confirmed_asks_her_again_first() {
    let mut net = game_night::net(true);
    dinner(&mut net);
    let mut service = Service::default();
    // The venue has the table half an hour later than planned: a detail Alice saw changes.
    let seen = game_night::scripted_users_with(&mut net, &BTreeMap::new(), &mut |a| {
        service.answer(a, &mut |_| {
            Ok(ctx(json!({"when": "Friday 27 March 20:30"})))
        })
    });
    assert_eq!(order(&seen), vec![0, 0, 1, 2, 3], "{}", net.render(None));
    let when = |p: &crate::agent::Prompt| match &p.kind {
        PromptKind::Resolution { proposal, .. } => proposal.details.get("when").cloned(),
        _ => None,
    };
    assert_ne!(when(&seen[0].1), Some(json!("Friday 27 March 20:30")));
    for (_, p) in &seen[1..] {
        assert_eq!(when(p), Some(json!("Friday 27 March 20:30")));
    }
    check_group(&net, 4);
    for i in 0..4 {
        assert!(
            states(&net, i).iter().all(|s| *s == ThreadState::Completed),
            "node {i}\n{}",
            net.render(None)
        );
    }
}

#[test]
fn a_check_that_keeps_changing_gives_the_candidate_up() {
    let mut net = game_night::net(true);
    let gid = dinner(&mut net);
    let mut service = Service::default();
    let seen = game_night::scripted_users_with(&mut net, &BTreeMap::new(), &mut |a| {
        service.answer(a, &mut |n| Ok(ctx(json!({"when": format!("slot {n}")}))))
    });
    // Alice is asked three times (the plan, then two changes); the third change gives
    // Friday up, and nobody else was asked about it.
    let g = &net.nodes[ALICE].agent.groups()[&gid];
    assert!(!g.ruled_out.is_empty(), "{}", net.render(None));
    let friday = start_of(&seen[0].1);
    assert_eq!(asked_about(&seen, &friday), vec![0, 0, 0]);
}

#[test]
fn a_failed_check_gives_the_window_up_before_anyone_else_is_asked() {
    let mut net = game_night::net(true);
    let gid = dinner(&mut net);
    let mut service = Service::default();
    let mut first = true;
    let seen = game_night::scripted_users_with(&mut net, &BTreeMap::new(), &mut |a| {
        service.answer(a, &mut |_| {
            if std::mem::take(&mut first) {
                Err("fully booked on Friday".into())
            } else {
                Ok(Context::new())
            }
        })
    });
    let g = &net.nodes[ALICE].agent.groups()[&gid];
    assert_eq!(g.ruled_out.len(), 1, "{}", net.render(None));
    // Nobody but Alice heard of Friday; the next candidate (Saturday, without Charlie)
    // went round in turn, Alice first.
    let friday = start_of(&seen[0].1);
    assert_eq!(asked_about(&seen, &friday), vec![0]);
    assert_eq!(order(&seen)[1], 0, "{:?}", order(&seen));
    assert!(net.nodes[ALICE]
        .notifications
        .iter()
        .any(|n| n.text.contains("fully booked on Friday")));
}

#[test]
fn a_decline_mid_sequence_stops_it_before_the_next_confirmer() {
    let mut net = game_night::net(true);
    dinner(&mut net);
    let answers: BTreeMap<usize, Answer> = [(2, Answer::Decline)].into_iter().collect();
    let seen = game_night::scripted_users_with(&mut net, &answers, &mut |_| Ok(Context::new()));
    // Alice, Bob, Charlie (declines): Diana is never asked about Friday.
    let friday = start_of(&seen[0].1);
    assert_eq!(
        asked_about(&seen, &friday),
        vec![0, 1, 2],
        "{}",
        net.render(None)
    );
    // Charlie's leg ended DECLINED at both ends; nobody was left waiting.
    assert!(states(&net, 2).iter().all(|s| *s == ThreadState::Declined));
}

#[test]
fn a_check_in_flight_is_asked_again_with_the_same_id_after_a_restart() {
    let mut net = game_night::net(true);
    let gid = dinner(&mut net);
    // Everyone answers; Alice confirms; her agent asks for the check, and crashes.
    loop {
        let mut progressed = false;
        for i in 0..4 {
            if let Some(p) = net.prompt(i) {
                match p.kind {
                    PromptKind::Consent { fields } => {
                        let all = fields
                            .iter()
                            .map(|f| (f.field.clone(), crate::agent::FieldChoice::Share))
                            .collect();
                        net.answer_consent(
                            i,
                            p.id,
                            crate::agent::ConsentAnswer::ShareSelected(all),
                        );
                    }
                    PromptKind::Resolution { .. } => {
                        net.answer_resolution(i, p.id, crate::agent::ResolutionAnswer::Confirm);
                    }
                }
                progressed = true;
                net.settle();
            }
        }
        if !net.nodes[ALICE].actions.is_empty() || !progressed {
            break;
        }
    }
    let check = net.nodes[ALICE].actions.front().cloned().expect("a check");
    assert!(check.check);
    net.crash_and_restart_agent(ALICE, [77; 32]);
    net.connect(ALICE);
    net.settle();
    let again = net.nodes[ALICE]
        .actions
        .front()
        .cloned()
        .expect("asked again");
    assert_eq!((again.id, again.check), (check.id, true));
    // A late answer to the lost request is answered once: the group goes on to Bob.
    net.finish_action_with(ALICE, Ok(Context::new()));
    net.settle();
    let g = &net.nodes[ALICE].agent.groups()[&gid];
    let s = g
        .proposal
        .as_ref()
        .and_then(|p| p.sequence.as_ref())
        .unwrap();
    assert_eq!((s.step, s.checking), (1, None));
    let bob = net.prompt(1).expect("Bob is asked now");
    assert!(matches!(bob.kind, PromptKind::Resolution { .. }));
}

#[test]
fn a_check_answer_too_large_or_for_nobody_is_refused_without_harm() {
    let mut net = game_night::net(true);
    let gid = dinner(&mut net);
    // A result for an action nobody asked for changes nothing.
    let before = net.nodes[ALICE].agent.groups().clone();
    net.nodes[ALICE].agent.handle(
        net.now,
        crate::agent::Input::ActionResult {
            action_id: 9_999,
            result: Ok(ctx(json!({"when": "never"}))),
        },
    );
    assert_eq!(net.nodes[ALICE].agent.groups(), &before);
    let too_many: Context = (0..=MAX_CHECK_FINDINGS)
        .map(|i| (format!("k{i}"), json!(i)))
        .collect();
    let seen = game_night::scripted_users_with(&mut net, &BTreeMap::new(), &mut |a| {
        if a.check {
            Ok(too_many.clone())
        } else {
            Ok(Context::new())
        }
    });
    // The oversized findings count as a failed check: Friday is given up, nothing of it
    // reached a participant.
    let g = &net.nodes[ALICE].agent.groups()[&gid];
    assert!(!g.ruled_out.is_empty());
    for (_, p) in &seen {
        if let PromptKind::Resolution { proposal, .. } = &p.kind {
            assert!(!proposal.details.contains_key("k0"));
        }
    }
}
