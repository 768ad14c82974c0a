//! The person's choices at a resolution (§8.1, §8.2, §8.3, §7.2): an alternative picked
//! from the prompt, a different place that really changes the place, a promotion
//! suggestion accepted in one step, and a proposer that never confirms its own proposal.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::agent::tests::support::*;
use crate::agent::*;
use crate::harness::{dinner, Net};
use crate::packet::Proposal;

fn net() -> (Net, usize, usize) {
    dinner::net()
}

fn confirm(net: &mut Net, i: usize) {
    let (p, _) = resolution_prompt(net, i);
    net.answer_resolution(i, p.id, ResolutionAnswer::Confirm);
    net.settle();
}

/// Carries out every action both agents were asked to do.
fn finish_actions(net: &mut Net, a: usize, b: usize) {
    for _ in 0..8 {
        let mut any = false;
        for i in [a, b] {
            if net.finish_action(i, Ok(())).is_some() {
                any = true;
            }
        }
        net.settle();
        if !any {
            break;
        }
    }
}

// ===== alternatives (§8.1) =====

fn last_index(p: &Proposal) -> usize {
    p.alternatives.len() - 1
}

#[test]
fn a_confirmer_picks_an_alternative_and_both_confirm_it_as_the_new_proposal() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let (prompt, shown) = resolution_prompt(&net, a);
    assert!(
        !shown.alternatives.is_empty(),
        "the negotiator offers the next-best slot: {shown:?}"
    );
    assert!(shown.alternatives.iter().all(|x| !x.reason.is_empty()));
    let last = shown.alternatives.len() - 1;
    let chosen = shown.alternatives[last].clone();
    let before = open_proposal(&net, b, &id);

    net.answer_resolution(a, prompt.id, ResolutionAnswer::Alternative(last));
    net.settle();

    // On the wire: a counter naming the alternative by its index.
    let answers = sent(&net, a, &id, "resolution_response");
    let last = answers.last().expect("Alice answered");
    assert_eq!(last["status"], "counter_requested");
    assert_eq!(last["reason_class"], "alternative_chosen");
    assert_eq!(last["alternative"], json!(last_index(&shown)));
    // Bob proposes it as the main proposal; both are asked again.
    assert_eq!(state(&net, a, &id), ThreadState::Proposed);
    assert_eq!(state(&net, b, &id), ThreadState::Proposed);
    let now = open_proposal(&net, b, &id);
    assert_eq!(now, open_proposal(&net, a, &id), "both hold the same one");
    assert_eq!(now.summary, chosen.summary);
    for (k, v) in &chosen.details {
        assert_eq!(
            now.details.get(k),
            Some(v),
            "{k} comes from the alternative"
        );
    }
    assert_eq!(
        now.details.get("location"),
        before.details.get("location"),
        "what the alternative does not change is kept"
    );
    assert_eq!(
        now.alternatives,
        before.alternatives[..before.alternatives.len() - 1].to_vec(),
        "the other alternatives are still offered"
    );
    assert!(now.reasoning.contains(&before.summary));
    let (pa, _) = resolution_prompt(&net, a);
    assert_ne!(pa.id, prompt.id, "another question, another number");
    assert!(net.nodes[a]
        .agent
        .thread(&id)
        .unwrap()
        .rejected
        .iter()
        .any(|r| r.summary == before.summary));
    // Nothing is done before both confirm the new proposal.
    confirm(&mut net, a);
    assert_eq!(state(&net, a, &id), ThreadState::Proposed);
    assert!(net.nodes[a].actions.is_empty() && net.nodes[b].actions.is_empty());
    confirm(&mut net, b);
    finish_actions(&mut net, a, b);
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Completed,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Completed);
    let booked = &net.nodes[b]
        .agent
        .thread(&id)
        .unwrap()
        .stage
        .resolution()
        .unwrap()
        .body
        .proposal;
    assert_eq!(booked.details.get("time"), chosen.details.get("time"));
}

#[test]
fn the_proposers_own_user_picks_an_alternative() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let (prompt, shown) = resolution_prompt(&net, b);
    let (alice_prompt, _) = resolution_prompt(&net, a);
    net.answer_resolution(b, prompt.id, ResolutionAnswer::Alternative(0));
    net.settle();
    let now = open_proposal(&net, a, &id);
    assert_eq!(now.summary, shown.alternatives[0].summary);
    assert_eq!(now, open_proposal(&net, b, &id));
    assert!(
        sent(&net, b, &id, "resolution_response").is_empty(),
        "the new resolution supersedes the old one; no answer is needed"
    );
    assert_eq!(sent(&net, b, &id, "resolution").len(), 2);
    let (pa, _) = resolution_prompt(&net, a);
    assert_ne!(pa.id, alice_prompt.id, "Alice's old prompt was withdrawn");
    assert!(!net.nodes[a].prompts.contains_key(&alice_prompt.id));
    confirm(&mut net, a);
    confirm(&mut net, b);
    assert_eq!(state(&net, a, &id), ThreadState::Executing);
}

#[test]
fn an_alternative_that_does_not_exist_keeps_the_prompt_open() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let (prompt, shown) = resolution_prompt(&net, a);
    net.answer_resolution(
        a,
        prompt.id,
        ResolutionAnswer::Alternative(shown.alternatives.len()),
    );
    net.settle();
    assert!(sent(&net, a, &id, "resolution_response").is_empty());
    let r = net.nodes[a]
        .agent
        .thread(&id)
        .unwrap()
        .stage
        .resolution()
        .cloned()
        .unwrap();
    assert_eq!(r.prompt_id, Some(prompt.id), "still open, same number");
    assert_eq!(state(&net, a, &id), ThreadState::Proposed);
    net.answer_resolution(a, prompt.id, ResolutionAnswer::Alternative(0));
    net.settle();
    assert_eq!(sent(&net, a, &id, "resolution_response").len(), 1);
}

/// A peer naming an alternative the resolution does not have gets an ordinary counter:
/// the proposal is ruled out and the next option proposed.
#[test]
fn an_out_of_range_alternative_from_the_peer_is_an_ordinary_counter() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let thread = w.alice_opens();
    w.alice_proposes(&thread);
    let res = w.last_resolution();
    let rid = res["packet_id"].as_str().unwrap().to_string();
    let first = res["proposal"]["summary"].clone();
    w.m_send(
        &thread,
        "resolution_response",
        json!({"resolution_id": rid, "status": "counter_requested",
               "reason_class": "alternative_chosen", "alternative": 4_000_000_000u64}),
    );
    let next = w.last_resolution();
    assert_ne!(
        next["packet_id"].as_str().unwrap(),
        rid,
        "{}",
        w.net.render(None)
    );
    assert_ne!(
        next["proposal"]["summary"], first,
        "the option is ruled out"
    );
    assert_eq!(w.state(&thread), ThreadState::Proposed);
}

// ===== a different place (§8.2) =====

#[test]
fn a_different_place_keeps_the_time_and_proposes_another_place() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let before = open_proposal(&net, b, &id);
    assert_eq!(before.details["location"], "central Reading");
    let (prompt, _) = resolution_prompt(&net, a);
    net.answer_resolution(a, prompt.id, ResolutionAnswer::DifferentPlace);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    let now = open_proposal(&net, a, &id);
    assert_eq!(
        now.details["location"], "anywhere within 20 min drive of Reading centre",
        "Bob's own place, the other one known"
    );
    for k in ["date", "time", "end", "start_utc"] {
        assert_eq!(now.details[k], before.details[k], "{k}: the time is kept");
    }
    assert!(
        now.reasoning.contains("different place"),
        "{}",
        now.reasoning
    );
}

#[test]
fn a_different_place_with_no_other_place_asks_the_user_for_one() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let (p1, _) = resolution_prompt(&net, a);
    net.answer_resolution(a, p1.id, ResolutionAnswer::DifferentPlace);
    net.settle();
    let second = open_proposal(&net, a, &id);
    // Both places known to Bob are now ruled out.
    let (p2, _) = resolution_prompt(&net, a);
    net.answer_resolution(a, p2.id, ResolutionAnswer::DifferentPlace);
    net.settle();
    assert_eq!(
        sent(&net, b, &id, "resolution").len(),
        2,
        "no third proposal that only moves the time\n{}",
        net.render(None)
    );
    let t = net.nodes[b].agent.thread(&id).unwrap();
    assert!(t.escalated, "Bob's agent hands it to the users");
    assert_eq!(t.waiting, Waiting::User);
    let told = notices(&net, b, NotifyKind::Escalated);
    assert!(
        told.iter().any(|s| s.contains("place")),
        "Bob is asked for a place: {told:?}"
    );
    assert!(
        !notices(&net, a, NotifyKind::Escalated).is_empty(),
        "Alice hears of it too"
    );
    // Bob gives another place: the same time is proposed there.
    net.command(
        b,
        Command::UpdateContext {
            thread_id: id.clone(),
            context: json!({"location_preference": "Caversham"})
                .as_object()
                .cloned()
                .unwrap(),
        },
    );
    net.settle();
    eprintln!("{}", net.render(None));
    let third = open_proposal(&net, a, &id);
    assert_eq!(
        third.details["location"],
        "Caversham",
        "{}",
        net.render(None)
    );
    assert_eq!(third.details["time"], second.details["time"]);
}

#[test]
fn a_list_of_places_is_tried_in_order() {
    let (mut net, a, b) = net();
    let to = net.address(b);
    let mut context = dinner::context();
    context.insert(
        "location_preference".into(),
        json!(["central Reading", "Caversham"]),
    );
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner::intent(),
            context,
        },
    );
    net.settle();
    share_transport(&mut net, a);
    let id = net.nodes[a].agent.threads().keys().last().cloned().unwrap();
    assert_eq!(
        open_proposal(&net, a, &id).details["location"],
        "central Reading"
    );
    let (p, _) = resolution_prompt(&net, a);
    net.answer_resolution(a, p.id, ResolutionAnswer::DifferentPlace);
    net.settle();
    assert_eq!(open_proposal(&net, a, &id).details["location"], "Caversham");
}

// ===== §7.2 promotion suggestion =====

/// Mallory opens a thread asking for `transport_mode`; Alice's consent prompt for it.
fn asked_for_transport(w: &mut HostileWorld) -> (String, Option<Prompt>) {
    let thread = w.m.new_thread_id();
    w.m_send(
        &thread,
        "context",
        json!({
            "intent": {"category": "scheduling", "summary": "Dinner on Friday"},
            "context": {"time_windows": ["18:30-21:00"]},
            "needs": [{"field": "transport_mode", "priority": "helpful", "reason": "to pick a place"}],
        }),
    );
    let p = w.net.nodes[w.alice]
        .prompts
        .values()
        .find(|p| p.thread_id == thread && matches!(p.kind, PromptKind::Consent { .. }))
        .cloned();
    (thread, p)
}

#[test]
fn a_promotion_suggestion_is_typed_listed_and_accepted_in_one_command() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let m = w.m.address.clone();
    for _ in 0..3 {
        let (_, p) = asked_for_transport(&mut w);
        let p = p.expect("Alice is asked");
        let mut share = BTreeMap::new();
        share.insert("transport_mode".to_string(), FieldChoice::Share);
        w.net
            .answer_consent(w.alice, p.id, ConsentAnswer::ShareSelected(share));
        w.m.pump(&mut w.net);
    }
    let n: Vec<&Notification> = w.net.nodes[w.alice]
        .notifications
        .iter()
        .filter(|n| n.kind == NotifyKind::Suggestion)
        .collect();
    assert_eq!(n.len(), 1, "{n:?}");
    let s = n[0]
        .suggestion
        .clone()
        .unwrap_or_else(|| panic!("the notification carries the suggestion: {:?}", n[0]));
    let Suggestion::Promote { field, peer, id } = s.clone();
    assert_eq!((field.as_str(), &peer, id), ("transport_mode", &m, 1));
    assert_eq!(w.net.nodes[w.alice].agent.suggestions(), vec![s.clone()]);
    // One command accepts it: a relationship override, and the suggestion is gone.
    w.net.command(w.alice, s.accept());
    assert!(w.net.nodes[w.alice].agent.overrides()[&m]
        .promote_to_always_share
        .contains("transport_mode"));
    assert!(w.net.nodes[w.alice].agent.suggestions().is_empty());
    // The next thread shares transport_mode without asking.
    let (thread, p) = asked_for_transport(&mut w);
    assert_eq!(p, None, "{}", w.net.render(Some("alice")));
    w.m.pump(&mut w.net);
    assert!(
        w.m.received.iter().any(|r| r.thread_id == thread
            && r.packet["context_provided"]["transport_mode"] == "driving"),
        "{:?}",
        w.m.received.last()
    );
    // A suggestion still open survives a restart under the same number.
    w.net.command(
        w.alice,
        Command::SetPermission {
            field: "transport_mode".into(),
            tier: Tier::AskFirst,
            for_peer: Some(m.clone()),
        },
    );
    w.net.crash_and_restart_agent(w.alice, [98; 32]);
    assert_eq!(w.net.nodes[w.alice].agent.suggestions(), vec![s]);
    // Blocking the agent forgets it.
    w.net.command(w.alice, Command::Block(m));
    assert!(w.net.nodes[w.alice].agent.suggestions().is_empty());
}

#[test]
fn a_promotion_suggestion_is_dismissed_in_one_command_and_stays_dismissed() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let m = w.m.address.clone();
    for _ in 0..4 {
        let (_, p) = asked_for_transport(&mut w);
        let p = p.expect("Alice is asked");
        let mut share = BTreeMap::new();
        share.insert("transport_mode".to_string(), FieldChoice::Share);
        w.net
            .answer_consent(w.alice, p.id, ConsentAnswer::ShareSelected(share));
        w.m.pump(&mut w.net);
        if let Some(s) = w.net.nodes[w.alice].agent.suggestions().first().cloned() {
            // One command dismisses it: nothing changes in the tiers, it is not listed.
            w.net.command(w.alice, s.dismiss());
            assert!(w.net.nodes[w.alice].agent.suggestions().is_empty());
            assert!(!w.net.nodes[w.alice]
                .agent
                .overrides()
                .get(&m)
                .is_some_and(|o| o.promote_to_always_share.contains("transport_mode")));
        }
    }
    // Still asked (the tier is unchanged), never suggested again, even after a restart.
    let suggested = w.net.nodes[w.alice]
        .notifications
        .iter()
        .filter(|n| n.kind == NotifyKind::Suggestion)
        .count();
    assert_eq!(suggested, 1);
    w.net.crash_and_restart_agent(w.alice, [97; 32]);
    assert!(w.net.nodes[w.alice].agent.suggestions().is_empty());
}

#[test]
fn a_notification_without_a_suggestion_still_reads() {
    let old = r#"{"thread_id":null,"kind":"suggestion","text":"You've shared dietary with agent:bob@a2acp.io three times now."}"#;
    let n: Notification = serde_json::from_str(old).unwrap();
    assert_eq!(n.suggestion, None);
    let s = Suggestion::Promote {
        id: 3,
        field: "dietary".into(),
        peer: Address::parse("agent:bob@a2acp.io").unwrap(),
    };
    let with = Notification {
        suggestion: Some(s.clone()),
        space: None,
        ..n
    };
    let text = serde_json::to_string(&with).unwrap();
    assert!(text.contains(
        r#""suggestion":{"kind":"promote","id":3,"field":"dietary","peer":"agent:bob@a2acp.io"}"#
    ));
    assert_eq!(serde_json::from_str::<Notification>(&text).unwrap(), with);
}

// ===== the proposer's own confirmation (§8.3) =====

impl HostileWorld {
    /// Mallory answers with Bob's values (and declines anything else asked); Alice
    /// proposes.
    fn alice_proposes(&mut self, thread: &str) {
        self.m_send(
            thread,
            "context_response",
            json!({"context_provided": {
                "time_windows": ["18:30-21:00"], "dietary": ["none"],
                "location_preference": "Caversham"}}),
        );
        for _ in 0..4 {
            if self.last_resolution_opt().is_some() {
                return;
            }
            let asked: Vec<Value> = self
                .m
                .received
                .iter()
                .rev()
                .find(|r| r.kind() == "context_request")
                .map(|r| r.packet["needs"].as_array().cloned().unwrap_or_default())
                .unwrap_or_default();
            let declined: Vec<Value> = asked
                .iter()
                .map(|n| json!({"field": n["field"], "status": "declined", "hint": null}))
                .collect();
            self.m_send(
                thread,
                "context_response",
                json!({"context_provided": {}, "context_unavailable": declined}),
            );
        }
        panic!("Alice never proposed\n{}", self.net.render(None));
    }

    fn last_resolution_opt(&mut self) -> Option<Value> {
        self.m.pump(&mut self.net);
        self.m
            .received
            .iter()
            .rev()
            .find(|r| r.kind() == "resolution")
            .map(|r| r.packet.clone())
    }

    fn last_resolution(&mut self) -> Value {
        self.last_resolution_opt().expect("a resolution")
    }
}

/// Mallory proposes, Alice's user confirms, Mallory never sends its own confirmation:
/// Alice is reminded at half the timeout, and at the timeout the thread is EXPIRED on
/// her side, her user is told, and Mallory is told with a `thread_state` EXPIRED.
#[test]
fn a_proposer_that_never_confirms_its_own_proposal_ends_expired_on_both_sides() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let thread = w.alice_opens();
    let alice = w.net.address(w.alice);
    let m = w.m.address.clone();
    w.m_send(
        &thread,
        "resolution",
        json!({
            "proposal": {"summary": "Dinner at Dopo, Friday 27 March, 19:00",
                         "details": {"date": "2026-03-27", "time": "19:00"}},
            "requires_confirmation_from": [alice.as_str(), m.as_str()],
            "actions_on_confirm": [{"action": "add_calendar_event", "reversible": true}],
            "confirmation_timeout": "PT24H",
            "on_timeout": "remind_then_expire",
        }),
    );
    assert_eq!(w.state(&thread), ThreadState::Proposed);
    let (p, _) = resolution_prompt(&w.net, w.alice);
    w.net
        .answer_resolution(w.alice, p.id, ResolutionAnswer::Confirm);
    w.m.pump(&mut w.net);
    assert!(w
        .m
        .received
        .iter()
        .any(|r| r.kind() == "resolution_response" && r.packet["status"] == "confirmed"));
    assert_eq!(w.state(&thread), ThreadState::Proposed);

    // Half the timeout: Alice's user is reminded that Mallory has not confirmed.
    w.net.run_for(Duration::from_secs(12 * 3600 + 1));
    w.m.pump(&mut w.net);
    let reminders: Vec<String> = notices(&w.net, w.alice, NotifyKind::Info)
        .into_iter()
        .filter(|t| t.starts_with("Reminder"))
        .collect();
    assert_eq!(reminders.len(), 1, "{reminders:?}");
    assert!(reminders[0].contains(m.as_str()), "{reminders:?}");
    assert_eq!(w.state(&thread), ThreadState::Proposed);
    assert!(notices(&w.net, w.alice, NotifyKind::Expired).is_empty());

    // The timeout: EXPIRED, the user told, Mallory told.
    w.net.run_for(Duration::from_secs(12 * 3600));
    w.m.pump(&mut w.net);
    assert_eq!(
        w.state(&thread),
        ThreadState::Expired,
        "{}",
        w.net.render(None)
    );
    let expired = notices(&w.net, w.alice, NotifyKind::Expired);
    assert_eq!(expired.len(), 1);
    assert!(
        expired[0].contains(m.as_str()),
        "names who did not confirm: {expired:?}"
    );
    let told: Vec<&Value> =
        w.m.received
            .iter()
            .filter(|r| r.kind() == "thread_state")
            .map(|r| &r.packet)
            .collect();
    assert!(
        told.iter().any(|p| p["state"] == "EXPIRED"),
        "the proposer is told: {told:?}"
    );
    // A late confirmation changes nothing.
    let rid = w.m.received.iter().find_map(|r| {
        (r.kind() == "resolution_response").then(|| r.packet["resolution_id"].clone())
    });
    w.m_send(
        &thread,
        "resolution_response",
        json!({"resolution_id": rid, "status": "confirmed"}),
    );
    assert_eq!(w.state(&thread), ThreadState::Expired);
    assert!(w.net.nodes[w.alice].actions.is_empty());
}

/// Between two honest agents the EXPIRED side's `thread_state` ends the other side too,
/// even when its own timer has not fired (a proposer whose user never answered).
#[test]
fn an_expired_confirmer_ends_the_silent_proposer_at_once() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    // Bob proposed; only Alice answers. Bob's timer is moved away so that only
    // Alice's expiry can end his side.
    confirm(&mut net, a);
    if let Some(r) = net.nodes[b]
        .agent
        .threads
        .get_mut(&id)
        .and_then(|t| t.stage.resolution_mut())
    {
        r.deadline = r.deadline.add(Duration::from_secs(3600));
    }
    net.run_for(Duration::from_secs(24 * 3600 + 1));
    assert_eq!(state(&net, a, &id), ThreadState::Expired);
    assert_eq!(
        state(&net, b, &id),
        ThreadState::Expired,
        "{}",
        net.render(None)
    );
    assert_eq!(notices(&net, a, NotifyKind::Expired).len(), 1);
    assert_eq!(notices(&net, b, NotifyKind::Expired).len(), 1);
}
