//! Group threads (§10, §8.3) end to end on the in-memory network: the spec's game night.

use std::collections::BTreeMap;

use crate::agent::ThreadState;
use crate::harness::game_night::{self, Answer};
use crate::harness::Net;
use crate::packet::ParticipantStatus;

fn states(net: &Net, i: usize) -> Vec<ThreadState> {
    net.nodes[i]
        .agent
        .threads()
        .values()
        .map(|t| t.state)
        .collect()
}

fn group_id(net: &Net) -> String {
    net.nodes[0]
        .agent
        .groups()
        .keys()
        .next()
        .cloned()
        .expect("alice coordinates a group")
}

#[test]
fn game_night_for_four_is_confirmed_by_everyone_on_friday() {
    let mut net = game_night::net(true);
    game_night::start(&mut net, None);
    // One leg per participant, each a thread of its own with its own id.
    let gid = group_id(&net);
    let members = net.nodes[0].agent.group_members(&gid);
    assert_eq!(members.len(), 3);
    let legs: Vec<&String> = members.iter().map(|m| &m.thread_id).collect();
    assert_eq!(
        legs.iter().collect::<std::collections::BTreeSet<_>>().len(),
        3
    );
    game_night::scripted_users(&mut net, &BTreeMap::new());
    for i in 0..4 {
        let s = states(&net, i);
        assert!(
            s.iter().all(|s| *s == ThreadState::Completed),
            "node {i}: {s:?}\n{}",
            net.render(None)
        );
    }
    // Each participant has exactly one thread: its leg, with the coordinator.
    for i in 1..4 {
        assert_eq!(net.nodes[i].agent.threads().len(), 1);
        let t = net.nodes[i].agent.threads().values().next().unwrap();
        assert_eq!(&t.peer, net.nodes[0].agent.address());
        let r = t.stage.resolution().unwrap();
        assert!(r.body.proposal.summary.contains("Friday 27 March 20:00–23:00"), "{}\n{}", r.body.proposal.summary, net.render(Some("bob")));
        assert_eq!(r.body.requires_confirmation_from.len(), 4);
        assert_eq!(r.body.quorum, None);
    }
    let g = &net.nodes[0].agent.groups()[&gid];
    let p = g.proposal.as_ref().unwrap();
    assert!(p.reached);
    assert_eq!(p.required, 4);
    // The coordinator's calendar entry is added once for the group, not once per leg.
    let adds = net
        .render(Some("alice"))
        .matches("action add_calendar_event → ok")
        .count();
    assert_eq!(adds, 1, "{}", net.render(Some("alice")));
    for m in net.nodes[0].agent.group_members(&gid) {
        assert_eq!(m.state, ThreadState::Completed);
        assert_eq!(m.status, ParticipantStatus::Declined);
    }
}

#[test]
fn without_a_common_slot_only_charlie_is_asked_and_saturday_works_when_he_gives_way() {
    let mut net = game_night::net(false);
    game_night::start(&mut net, None);
    game_night::scripted_users(&mut net, &BTreeMap::new());
    let alice = &net.nodes[0];
    let asked: Vec<String> = net.nodes[0]
        .agent
        .threads()
        .values()
        .flat_map(|t| t.history.iter())
        .filter(|h| h.outgoing && h.json.contains("flexibility_request"))
        .map(|h| h.json.clone())
        .collect();
    assert_eq!(asked.len(), 1, "{}", net.render(Some("alice")));
    let charlie_leg = alice
        .agent
        .threads()
        .values()
        .find(|t| t.peer.user() == "charlie")
        .unwrap();
    assert!(charlie_leg.history.iter().any(|h| h.json.contains("flexibility_request")));
    for i in 0..4 {
        let s = states(&net, i);
        assert!(
            s.iter().all(|s| *s == ThreadState::Completed),
            "node {i}: {s:?}\n{}",
            net.render(None)
        );
        let t = net.nodes[i].agent.threads().values().next().unwrap();
        let r = t.stage.resolution().unwrap();
        assert!(
            r.body.proposal.summary.contains("Saturday 28 March 19:00–23:00"),
            "{}",
            r.body.proposal.summary
        );
    }
}

#[test]
fn when_charlie_cannot_give_way_saturday_goes_ahead_with_a_quorum_of_three() {
    let mut net = game_night::net(false);
    game_night::start(&mut net, None);
    let mut answers = BTreeMap::new();
    answers.insert(2, Answer::Stubborn);
    game_night::scripted_users(&mut net, &answers);
    let gid = group_id(&net);
    let p = net.nodes[0].agent.groups()[&gid].proposal.clone().unwrap();
    assert_eq!(p.body.quorum, Some(3), "{}", net.render(Some("alice")));
    assert!(p.reached);
    // Charlie confirmed anyway (the scripted user confirms everything): he joins.
    for i in 0..4 {
        let s = states(&net, i);
        assert!(
            s.iter().all(|s| *s == ThreadState::Completed),
            "node {i}: {s:?}\n{}",
            net.render(None)
        );
    }
}

#[test]
fn quorum_three_of_four_goes_ahead_without_the_decliner() {
    let mut net = game_night::net(true);
    game_night::start(&mut net, Some(3));
    let mut answers = BTreeMap::new();
    answers.insert(3, Answer::Decline);
    game_night::scripted_users(&mut net, &answers);
    assert!(states(&net, 3).iter().all(|s| *s == ThreadState::Declined));
    for i in 0..3 {
        let s = states(&net, i);
        let want = if i == 0 { 2 } else { 1 };
        assert_eq!(
            s.iter().filter(|s| **s == ThreadState::Completed).count(),
            want,
            "node {i}: {s:?}\n{}",
            net.render(None)
        );
    }
    let gid = group_id(&net);
    let reached = net.nodes[0]
        .agent
        .groups()
        .get(&gid)
        .and_then(|g| g.proposal.as_ref())
        .is_some_and(|p| p.reached);
    assert!(reached);
}

#[test]
fn a_silent_participant_without_quorum_expires_the_group_for_everyone() {
    let mut net = game_night::net(true);
    game_night::start(&mut net, None);
    let mut answers = BTreeMap::new();
    answers.insert(2, Answer::Silent);
    game_night::scripted_users(&mut net, &answers);
    net.run_for(std::time::Duration::from_secs(25 * 3600));
    for i in 0..4 {
        let s = states(&net, i);
        assert!(
            s.iter().all(|s| *s == ThreadState::Expired),
            "node {i}: {s:?}\n{}",
            net.render(None)
        );
    }
    // Every user was told.
    for i in 0..4 {
        assert!(
            net.nodes[i]
                .notifications
                .iter()
                .any(|n| n.text.contains("expired")),
            "node {i}"
        );
    }
}

#[test]
fn no_participant_value_reaches_another_participant() {
    let mut net = game_night::net(false);
    game_night::start(&mut net, None);
    game_night::scripted_users(&mut net, &BTreeMap::new());
    // Every packet a participant received came from the coordinator; none of them carries
    // a value another participant shared (windows, zones, dietary entries, budgets).
    let secrets: [(usize, &[&str]); 3] = [
        (1, &["America/New_York", "vegetarian", "$5-25", "15:00-19:00"]),
        (2, &["Europe/Berlin", "nut allergy", "20:30", "10:00-12:00"]),
        (3, &["2026-03-28 19:00-23:00"]),
    ];
    for i in 1..4 {
        for t in net.nodes[i].agent.threads().values() {
            for h in t.history.iter().filter(|h| !h.outgoing) {
                for (owner, values) in &secrets {
                    if *owner == i {
                        continue;
                    }
                    for v in *values {
                        assert!(
                            !h.json.contains(v),
                            "node {i} received {v} of node {owner}: {}",
                            h.json
                        );
                    }
                }
                assert!(!h.json.contains("SECRET"), "{}", h.json);
            }
        }
    }
}

#[test]
fn group_records_restore_and_the_coordinators_prompt_comes_back() {
    let mut net = game_night::net(true);
    game_night::start(&mut net, None);
    // Participants share and confirm; Alice's own prompt stays open.
    let mut answers = BTreeMap::new();
    answers.insert(0, Answer::Silent);
    game_night::scripted_users(&mut net, &answers);
    let gid = group_id(&net);
    let before = net.nodes[0].agent.groups()[&gid].clone();
    let pid = before.proposal.as_ref().unwrap().prompt_id.unwrap();
    net.crash_and_restart_agent(0, [77; 32]);
    net.connect(0);
    net.settle();
    assert_eq!(net.nodes[0].agent.groups()[&gid], before);
    assert!(net.nodes[0].prompts.contains_key(&pid));
    game_night::scripted_users(&mut net, &BTreeMap::new());
    for i in 0..4 {
        let s = states(&net, i);
        assert!(
            s.iter().all(|s| *s == ThreadState::Completed),
            "node {i}: {s:?}\n{}",
            net.render(Some("alice"))
        );
    }
}
