//! Context drift and forks (§6.5): an intent update re-evaluates the tiers and asks
//! before the expanded scope leaves; a fork's threads inherit, negotiate independently,
//! negotiate around what their siblings hold, and survive a restore.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::agent::tests::support::*;
use crate::agent::*;
use crate::harness::{dinner, Net};
use crate::packet::{Intent, Need, Priority};

fn game_night() -> Intent {
    Intent {
        category: "scheduling".into(),
        summary: "Game night with friends on Friday".into(),
        urgency: Some("low".into()),
        scope_change: None,
    }
}

/// Alice shares her address for game nights, Bob his budget; both have wide evenings.
fn drift_net() -> (Net, usize, usize) {
    let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let mut alice = dinner::alice("a2acp.io");
    alice
        .profile
        .insert("address".into(), json!("12 Oak Street, Reading"));
    alice
        .permissions
        .set_for_intent("game night", "specific_location", Some(Tier::AlwaysShare));
    let mut bob = dinner::bob("a2acp.io");
    bob.profile.insert("budget_range".into(), json!("£10-20"));
    bob.profile
        .insert("time_windows".into(), json!(["18:30-23:30"]));
    bob.permissions
        .set_for_intent("game night", "budget_range", Some(Tier::AlwaysShare));
    let a = net.add_agent(alice, [1; 32], [11; 32]);
    let b = net.add_agent(bob, [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    (net, a, b)
}

fn start(net: &mut Net, a: usize, b: usize, windows: Value) -> String {
    let to = net.address(b);
    let mut context = dinner::context();
    context.insert("time_windows".into(), windows);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner::intent(),
            context,
        },
    );
    net.settle();
    net.nodes[a].agent.threads().keys().last().cloned().unwrap()
}

fn consent_fields(p: &Prompt) -> Vec<String> {
    match &p.kind {
        PromptKind::Consent { fields } => fields.iter().map(|f| f.field.clone()).collect(),
        _ => Vec::new(),
    }
}

fn outgoing(net: &Net, i: usize, id: &str) -> String {
    net.nodes[i]
        .agent
        .thread(id)
        .unwrap()
        .history
        .iter()
        .filter(|h| h.outgoing)
        .map(|h| h.json.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

fn update_to_game_night(net: &mut Net, a: usize, id: &str) {
    net.command(
        a,
        Command::UpdateIntent {
            thread_id: id.to_string(),
            intent: game_night(),
            reason: "Bob suggested adding games".into(),
            needs: vec![Need {
                field: "budget_range".into(),
                reason: "Games and snacks".into(),
                priority: Priority::Required,
            }],
        },
    );
    net.settle();
}

#[test]
fn an_intent_update_asks_before_the_expanded_scope_leaves() {
    let (mut net, a, b) = drift_net();
    let id = start(&mut net, a, b, json!(["18:00-21:00"]));
    let before = net
        .prompt(a)
        .expect("Alice's consent prompt (Bob asks back)");
    update_to_game_night(&mut net, a, &id);

    // Alice: the update left, stating the expanded scope and the new need.
    let upd = sent(&net, a, &id, "intent_update");
    assert_eq!(upd.len(), 1);
    assert_eq!(upd[0]["updated_intent"]["scope_change"], "expanded");
    assert_eq!(
        upd[0]["previous_intent"]["summary"],
        "Coordinate dinner on Friday"
    );
    assert_eq!(
        upd[0]["additional_context_needed"][0]["field"],
        "budget_range"
    );
    // Her tiers share the address for game nights, not for dinner: it is added to the
    // open prompt (same number), which shows the change, and has not left.
    let p = net.prompt(a).unwrap();
    assert_eq!(p.id, before.id);
    assert!(consent_fields(&p).contains(&"address".to_string()), "{p:?}");
    let d = p
        .drift
        .as_ref()
        .expect("the prompt shows the intent change");
    assert_eq!(d.from.summary, "Coordinate dinner on Friday");
    assert_eq!(d.to.summary, "Game night with friends on Friday");
    assert!(!outgoing(&net, a, &id).contains("12 Oak Street"));
    assert!(net.nodes[a]
        .agent
        .thread(&id)
        .unwrap()
        .scope_intent
        .is_some());

    // Bob: told, his thread is about game night, and his budget — always shared for game
    // nights, asked for dinner — is asked first, in a prompt that shows the change.
    let told = notices(&net, b, NotifyKind::Info);
    assert!(
        told.iter()
            .any(|t| t.contains("to “Game night with friends on Friday”")
                && t.contains("Bob suggested adding games")),
        "{told:?}"
    );
    assert_eq!(
        net.nodes[b].agent.thread(&id).unwrap().intent.summary,
        "Game night with friends on Friday"
    );
    let pb = net
        .prompt(b)
        .expect("Bob's consent prompt for the new need");
    assert_eq!(consent_fields(&pb), vec!["budget_range".to_string()]);
    assert!(pb.drift.is_some());
    assert!(!outgoing(&net, b, &id).contains("£10-20"));

    // Alice shares her address (and nothing else): it leaves; what she left out is
    // declined as usual, the offered address is never sent as a decline.
    let mut m = BTreeMap::new();
    m.insert("address".to_string(), FieldChoice::Share);
    net.answer_consent(a, p.id, ConsentAnswer::ShareSelected(m));
    net.settle();
    let out = outgoing(&net, a, &id);
    assert!(out.contains("12 Oak Street"), "{out}");
    assert!(!out.contains("\"field\":\"address\""), "{out}");
    // Bob answers his prompt: the budget leaves only now.
    let pb = net.prompt(b).unwrap();
    net.answer_consent(b, pb.id, ConsentAnswer::DeclineAll);
    net.settle();
    assert!(!outgoing(&net, b, &id).contains("£10-20"));
}

#[test]
fn declining_the_expanded_scope_shares_nothing_more() {
    let (mut net, a, b) = drift_net();
    let id = start(&mut net, a, b, json!(["18:00-21:00"]));
    update_to_game_night(&mut net, a, &id);
    let p = net.prompt(a).unwrap();
    net.answer_consent(a, p.id, ConsentAnswer::DeclineAll);
    net.settle();
    let out = outgoing(&net, a, &id);
    assert!(!out.contains("12 Oak Street"));
    assert!(!out.contains("\"field\":\"address\""), "{out}");
    // An audit record says what changed, typed.
    assert!(net.nodes[a].audit.iter().any(|r| matches!(
        &r.event,
        AgentEvent::IntentUpdated { by_peer: false, expanded, .. } if expanded == &vec!["address".to_string()]
    )));
    assert!(net.nodes[b]
        .audit
        .iter()
        .any(|r| matches!(&r.event, AgentEvent::IntentUpdated { by_peer: true, .. })));
}

#[test]
fn a_thread_that_starts_as_game_night_shares_by_its_tiers_without_asking() {
    let (mut net, a, b) = drift_net();
    let to = net.address(b);
    let mut context = dinner::context();
    context.remove("event_type");
    context.insert("wanted_fields".into(), json!(["budget_range"]));
    net.command(
        a,
        Command::StartThread {
            to,
            intent: game_night(),
            context,
        },
    );
    net.settle();
    let id = net.nodes[a].agent.threads().keys().last().cloned().unwrap();
    // Bob's tier for game night shares the budget as soon as it is asked (no drift).
    let t = net.nodes[b].agent.thread(&id).unwrap();
    assert!(t.scope_intent.is_none());
    assert!(
        !net.nodes[b]
            .prompts
            .values()
            .any(|p| consent_fields(p).contains(&"budget_range".to_string())),
        "{}",
        net.render(None)
    );
}

fn answer_everything(net: &mut Net, a: usize, b: usize) {
    for _ in 0..20 {
        let Some((i, p)) = [a, b].iter().find_map(|&i| net.prompt(i).map(|p| (i, p))) else {
            return;
        };
        match p.kind {
            PromptKind::Consent { .. } => {
                net.answer_consent(i, p.id, ConsentAnswer::DeclineAll);
            }
            PromptKind::Resolution { .. } => {
                net.answer_resolution(i, p.id, ResolutionAnswer::Confirm);
            }
        }
        net.settle();
        while net.finish_action(a, Ok(())).is_some() || net.finish_action(b, Ok(())).is_some() {
            net.settle();
        }
    }
}

fn slot(p: &crate::packet::Proposal) -> (String, String) {
    (
        p.details["time"].as_str().unwrap_or("").to_string(),
        p.details["end"].as_str().unwrap_or("").to_string(),
    )
}

fn fork(net: &mut Net, a: usize, id: &str) -> Vec<String> {
    let dinner_at_7 = Intent {
        summary: "Dinner reservation for Friday 19:00".into(),
        ..dinner::intent()
    };
    let games = Intent {
        summary: "Game night venue/setup for Friday".into(),
        ..dinner::intent()
    };
    net.command(
        a,
        Command::ForkThread {
            thread_id: id.to_string(),
            intents: vec![dinner_at_7, games],
        },
    );
    net.settle();
    net.nodes[a]
        .agent
        .thread(id)
        .map(|t| t.forked_into.clone())
        .unwrap_or_default()
}

#[test]
fn forked_threads_negotiate_independently_around_each_others_slot() {
    let (mut net, a, b) = drift_net();
    let id = start(&mut net, a, b, json!(["18:00-23:30"]));
    assert!(net.prompt(a).is_some_and(|p| p.thread_id == id));
    let kids = fork(&mut net, a, &id);
    assert_eq!(kids.len(), 2);
    // The split thread takes no further part: its prompt is withdrawn on both sides.
    for i in [a, b] {
        assert!(
            net.nodes[i].prompts.values().all(|p| p.thread_id != id),
            "{}",
            net.render(None)
        );
        assert_eq!(net.nodes[i].agent.thread(&id).unwrap().forked_into, kids);
    }
    for k in &kids {
        for i in [a, b] {
            let t = net.nodes[i].agent.thread(k).expect("child on both sides");
            assert_eq!(t.parent.as_deref(), Some(id.as_str()));
            // Inherited context, without the parent's event type.
            assert!(!t.local.contains_key("event_type") && !t.theirs.contains_key("event_type"));
        }
        assert_eq!(
            net.nodes[a].agent.thread(k).unwrap().local["location_preference"],
            "central Reading"
        );
    }
    answer_everything(&mut net, a, b);
    let p: Vec<_> = kids
        .iter()
        .map(|k| {
            let t = net.nodes[b].agent.thread(k).unwrap();
            assert_eq!(t.state, ThreadState::Completed, "{}", net.render(None));
            t.stage.resolution().unwrap().body.proposal.clone()
        })
        .collect();
    let (d, g) = (slot(&p[0]), slot(&p[1]));
    // The two slots do not overlap: whichever was proposed second went around the first.
    assert!(d.1 <= g.0 || g.1 <= d.0, "dinner {d:?}, games {g:?}");
    // Each knows what its sibling holds.
    let t = net.nodes[a].agent.thread(&kids[1]).unwrap();
    assert!(
        t.sibling_holds.is_empty() || t.sibling_holds[0].thread_id == kids[0],
        "{:?}",
        t.sibling_holds
    );
    assert!(net.nodes[a].audit.iter().any(|r| matches!(
        &r.event,
        AgentEvent::Forked { by_peer: false, children } if children == &kids
    )));
    assert!(net.nodes[b].audit.iter().any(|r| matches!(
        &r.event,
        AgentEvent::Forked { by_peer: true, children } if children == &kids
    )));
}

#[test]
fn a_confirmed_dinner_until_21_puts_the_games_after_it() {
    let (mut net, a, b) = drift_net();
    let id = start(&mut net, a, b, json!(["18:00-23:30"]));
    let kids = fork(&mut net, a, &id);
    // Settle the dinner first: answer only its prompts.
    for _ in 0..10 {
        let Some((i, p)) = [a, b].iter().find_map(|&i| {
            net.nodes[i]
                .prompts
                .values()
                .find(|p| p.thread_id == kids[0])
                .cloned()
                .map(|p| (i, p))
        }) else {
            break;
        };
        match p.kind {
            PromptKind::Consent { .. } => net.answer_consent(i, p.id, ConsentAnswer::DeclineAll),
            PromptKind::Resolution { .. } => {
                net.answer_resolution(i, p.id, ResolutionAnswer::Confirm)
            }
        }
        net.settle();
    }
    let dinner = open_proposal(&net, b, &kids[0]);
    let (_, dinner_end) = slot(&dinner);
    // The games thread knows: a hold with the dinner's slot.
    for i in [a, b] {
        let t = net.nodes[i].agent.thread(&kids[1]).unwrap();
        assert_eq!(t.sibling_holds.len(), 1, "{}", net.render(None));
        assert_eq!(t.sibling_holds[0].thread_id, kids[0]);
        assert_eq!(t.sibling_holds[0].slot["end"], dinner_end.as_str());
    }
    // A crash and restore keeps the fork and what its children know.
    net.crash_and_restart_agent(a, [98; 32]);
    net.connect(a);
    net.settle();
    let t = net.nodes[a].agent.thread(&kids[1]).unwrap();
    assert_eq!(t.parent.as_deref(), Some(id.as_str()));
    assert_eq!(t.sibling_holds.len(), 1);
    assert_eq!(
        net.nodes[a].agent.thread(&id).unwrap().forked_into,
        kids.clone()
    );
    answer_everything(&mut net, a, b);
    let games = net.nodes[b]
        .agent
        .thread(&kids[1])
        .and_then(|t| t.stage.resolution())
        .map(|r| r.body.proposal.clone())
        .unwrap_or_else(|| panic!("games proposal\n{}", net.render(None)));
    let (games_start, _) = slot(&games);
    let (dinner_start, _) = slot(&dinner);
    assert!(
        games_start >= dinner_end || slot(&games).1 <= dinner_start,
        "games {games_start}, dinner {dinner_start}-{dinner_end}"
    );
}

#[test]
fn fork_and_update_of_an_ended_or_unknown_thread_do_nothing() {
    let (mut net, a, b) = drift_net();
    let id = start(&mut net, a, b, json!(["18:00-21:00"]));
    net.command(
        a,
        Command::CancelThread {
            thread_id: id.clone(),
        },
    );
    net.settle();
    let n = net.nodes[a].agent.threads().len();
    let _ = fork(&mut net, a, &id);
    update_to_game_night(&mut net, a, &id);
    let _ = fork(&mut net, a, "thr_nope");
    assert_eq!(net.nodes[a].agent.threads().len(), n);
    assert!(sent(&net, a, &id, "intent_update").is_empty());
    assert!(sent(&net, a, &id, "thread_fork").is_empty());
}
