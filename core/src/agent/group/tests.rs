//! Group threads (§10, §8.3) end to end on the in-memory network: the spec's game night.

use std::collections::BTreeMap;

use crate::agent::{GroupConfirmation, ThreadState};
use crate::harness::game_night::{self, Answer};
use crate::harness::Net;
use crate::packet::ParticipantStatus;

pub(in crate::agent) fn states(net: &Net, i: usize) -> Vec<ThreadState> {
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
    game_night::start(&mut net, GroupConfirmation::All);
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
        assert!(
            r.body
                .proposal
                .summary
                .contains("Friday 27 March 20:00–23:00"),
            "{}\n{}",
            r.body.proposal.summary,
            net.render(Some("bob"))
        );
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
        assert_eq!(m.status, ParticipantStatus::ContextReceived);
    }
}

#[test]
fn without_a_common_slot_only_charlie_is_asked_and_saturday_works_when_he_gives_way() {
    let mut net = game_night::net(false);
    game_night::start(&mut net, GroupConfirmation::All);
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
    assert!(charlie_leg
        .history
        .iter()
        .any(|h| h.json.contains("flexibility_request")));
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
            r.body
                .proposal
                .summary
                .contains("Saturday 28 March 19:00–23:00"),
            "{}",
            r.body.proposal.summary
        );
    }
}

#[test]
fn when_charlie_cannot_give_way_saturday_goes_ahead_with_a_quorum_of_three() {
    let mut net = game_night::net(false);
    game_night::start(&mut net, GroupConfirmation::All);
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
    game_night::start(&mut net, GroupConfirmation::Quorum(3));
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
    game_night::start(&mut net, GroupConfirmation::All);
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
    game_night::start(&mut net, GroupConfirmation::All);
    game_night::scripted_users(&mut net, &BTreeMap::new());
    // Every packet a participant received came from the coordinator; none of them carries
    // a value another participant shared (windows, zones, dietary entries, budgets).
    let secrets: [(usize, &[&str]); 3] = [
        (
            1,
            &["America/New_York", "vegetarian", "$5-25", "15:00-19:00"],
        ),
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
    game_night::start(&mut net, GroupConfirmation::All);
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

mod hostile {
    //! A validly signed hostile peer in and around group threads.

    use serde_json::json;

    use crate::agent::tests::support::HostileWorld;
    use crate::agent::*;
    use crate::harness::game_night;

    fn world() -> HostileWorld {
        HostileWorld::new(Limits::default(), true)
    }

    fn group_open(w: &mut HostileWorld, coordinator: &str, with_alice: bool) -> String {
        let thread = w.m.new_thread_id();
        let m = w.m.address.as_str().to_string();
        let a = w.alice_addr().as_str().to_string();
        let mut participants = vec![coordinator.to_string(), m.clone()];
        if with_alice {
            participants.push(a);
        }
        participants.dedup();
        w.m_send(
            &thread,
            "context",
            json!({
                "intent": {"category": "group_scheduling", "summary": "Game night"},
                "context": {"time_windows": ["2026-03-27 19:00-23:00"], "timezone": "Europe/London"},
                "needs": [{"field": "time_windows", "priority": "required", "reason": "to find a time"}],
                "group": {"group_id": "grp_mallory12345", "coordinator": coordinator,
                          "epoch": 0, "participants": participants},
            }),
        );
        thread
    }

    #[test]
    fn a_group_leg_opened_by_another_than_its_coordinator_or_not_naming_the_agent_is_refused() {
        let mut w = world();
        let bob = w.net.address(w.bob.unwrap()).as_str().to_string();
        let t1 = group_open(&mut w, &bob, true);
        assert!(w.net.nodes[w.alice].agent.thread(&t1).is_none());
        let m = w.m.address.as_str().to_string();
        let t2 = group_open(&mut w, &m, false);
        assert!(w.net.nodes[w.alice].agent.thread(&t2).is_none());
        // Mallory as the real coordinator naming Alice: a leg, which only answers.
        let t3 = group_open(&mut w, &m, true);
        let t = w.net.nodes[w.alice].agent.thread(&t3).expect("a leg");
        assert!(t.in_group_of_other(&w.alice_addr()));
    }

    #[test]
    fn a_coordinators_confirmation_never_replaces_the_users_on_a_leg() {
        let mut w = world();
        let m = w.m.address.as_str().to_string();
        let a = w.alice_addr().as_str().to_string();
        let thread = group_open(&mut w, &m, true);
        let rid = w.m_send(
            &thread,
            "resolution",
            json!({
                "proposal": {"summary": "Game night, Friday 20:00", "details": {}},
                "requires_confirmation_from": [m, a],
                "quorum": 1,
                "actions_on_confirm": [{"action": "add_calendar_event", "reversible": true}],
                "confirmation_timeout": "PT24H",
            }),
        );
        w.m_send(
            &thread,
            "resolution_response",
            json!({"resolution_id": rid, "status": "confirmed"}),
        );
        assert_eq!(w.state(&thread), ThreadState::Proposed);
        assert!(w.net.nodes[w.alice].actions.is_empty());
        // Alice's user confirms: now the coordinator's word counts.
        let p = w.net.nodes[w.alice]
            .prompts
            .values()
            .find(|p| p.thread_id == thread)
            .cloned()
            .expect("alice is asked");
        w.net
            .answer_resolution(w.alice, p.id, ResolutionAnswer::Confirm);
        w.m.pump(&mut w.net);
        assert_eq!(w.state(&thread), ThreadState::Executing);
    }

    #[test]
    fn a_participant_cannot_propose_or_regroup_in_the_coordinators_group() {
        let mut w = world();
        let (m, bob) = (w.m.address.clone(), w.net.address(w.bob.unwrap()));
        w.net.command(
            w.alice,
            Command::StartGroupThread {
                participants: vec![m.clone(), bob],
                intent: game_night::intent(),
                context: game_night::context(),
                confirmation: GroupConfirmation::All,
            },
        );
        w.m.pump(&mut w.net);
        let leg =
            w.m.received
                .iter()
                .find(|r| r.kind() == "context" && r.packet.get("group").is_some())
                .map(|r| r.thread_id.clone())
                .expect("mallory's leg");
        let before = w.net.nodes[w.alice].agent.groups().clone();
        let prompts = w.net.nodes[w.alice].prompts.len();
        let a = w.alice_addr().as_str().to_string();
        w.m_send(
            &leg,
            "resolution",
            json!({
                "proposal": {"summary": "At Mallory's, now", "details": {}},
                "requires_confirmation_from": [a, m.as_str()],
                "actions_on_confirm": [{"action": "add_calendar_event", "reversible": true}],
            }),
        );
        // A header making Mallory the coordinator, on its leg.
        w.m_send(
            &leg,
            "context",
            json!({
                "context": {},
                "group": {"group_id": before.keys().next().unwrap(), "coordinator": m.as_str(),
                          "epoch": 7, "participants": [m.as_str(), a]},
            }),
        );
        assert_eq!(w.net.nodes[w.alice].prompts.len(), prompts);
        assert!(w.net.nodes[w.alice]
            .agent
            .thread(&leg)
            .unwrap()
            .stage
            .resolution()
            .is_none());
        let after = w.net.nodes[w.alice].agent.groups();
        assert_eq!(
            after.values().next().unwrap().header,
            before.values().next().unwrap().header
        );
    }

    #[test]
    fn a_flexibility_request_outside_a_group_asks_nothing_again() {
        let mut w = world();
        let thread = w.alice_opens();
        let before = w.net.nodes[w.alice].prompts.len();
        w.m_send(
            &thread,
            "context",
            json!({
                "context": {},
                "needs": [{"field": "health_info", "priority": "helpful", "reason": "any chance?"}],
                "flexibility_request": {"field": "health_info", "others_fit": 1, "others": 1,
                                        "message": "Everyone else shares theirs — any chance?"},
            }),
        );
        // health_info is never_share: declined, never prompted, never sent.
        assert_eq!(w.net.nodes[w.alice].prompts.len(), before);
        assert!(!w
            .m
            .received
            .iter()
            .any(|r| r.packet.to_string().contains("SECRET")));
    }
}

mod privacy {
    //! Property: whatever the participants' values, none of them reaches another
    //! participant (issue 12, point 2): everything a participant receives comes from the
    //! coordinator, and carries derived facts only.

    use std::collections::BTreeMap;

    use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
    use serde_json::{json, Value};

    use crate::agent::*;
    use crate::harness::game_night;
    use crate::harness::Net;
    use crate::packet::Context;

    /// One participant: which of the four Friday slots, zone, a dietary entry, budget.
    type Person = (Vec<u8>, u8, String, (u8, u8));

    #[derive(Debug, Clone)]
    struct World {
        people: Vec<Person>,
        quorum: Option<u32>,
    }

    fn token(g: &mut Gen, prefix: &str) -> String {
        let letters = b"abcdefghjkmnpqrstuvwxyz";
        let s: String = (0..6)
            .map(|_| *g.choose(letters).unwrap_or(&b'a') as char)
            .collect();
        format!("{prefix}-{s}")
    }

    impl Arbitrary for World {
        fn arbitrary(g: &mut Gen) -> Self {
            let n = 2 + usize::arbitrary(g) % 4;
            let people = (0..n)
                .map(|_| {
                    let slots: Vec<u8> = (0..4u8).filter(|_| bool::arbitrary(g)).collect();
                    let lo = 5 + u8::arbitrary(g) % 20;
                    let hi = lo + 5 + u8::arbitrary(g) % 40;
                    (slots, u8::arbitrary(g) % 3, token(g, "diet"), (lo, hi))
                })
                .collect();
            let quorum = bool::arbitrary(g).then(|| 1 + u32::arbitrary(g) % (n as u32 + 1));
            World { people, quorum }
        }
    }

    const SLOTS: [&str; 4] = ["17:00-20:00", "18:00-21:30", "19:00-22:00", "20:30-23:45"];
    const ZONES: [&str; 3] = ["Europe/London", "Europe/Berlin", "America/New_York"];

    fn config(i: usize, p: &Person) -> AgentConfig {
        let user = format!("p{i}");
        let mut c = AgentConfig::new(Address::new(&user, "a2acp.io").unwrap());
        let windows: Vec<Value> =
            p.0.iter()
                .map(|s| json!(format!("2026-03-27 {}", SLOTS[*s as usize])))
                .collect();
        c.profile = json!({
            "timezone": ZONES[p.1 as usize],
            "time_windows": windows,
            "dietary": [p.2],
            "budget_range": format!("£{} to £{} per person", p.3 .0, p.3 .1),
            "health_info": format!("SECRET-{user}"),
        })
        .as_object()
        .cloned()
        .unwrap();
        c
    }

    fn run(w: &World) -> Net {
        run_with(w, |_, _| {})
    }

    /// [`run`], each participant's configuration changed by `tweak` first.
    fn run_with(w: &World, tweak: impl Fn(usize, &mut AgentConfig)) -> Net {
        let mut net = Net::new("a2acp.io", game_night::START.parse_ts(), [3; 32]);
        let a = net.add_agent(game_night::alice("a2acp.io"), [90; 32], [91; 32]);
        net.connect(a);
        for (i, p) in w.people.iter().enumerate() {
            let mut c = config(i, p);
            tweak(i, &mut c);
            let k = net.add_agent(c, [100 + i as u8; 32], [120 + i as u8; 32]);
            net.connect(k);
        }
        net.settle();
        let participants = (1..net.nodes.len()).map(|i| net.address(i)).collect();
        let mut context: Context = game_night::context();
        context.insert("event_type".into(), json!("dinner"));
        net.command(
            a,
            Command::StartGroupThread {
                participants,
                intent: game_night::intent(),
                context,
                confirmation: w
                    .quorum
                    .map_or(GroupConfirmation::All, GroupConfirmation::Quorum),
            },
        );
        net.settle();
        game_night::scripted_users(&mut net, &BTreeMap::new());
        net
    }

    trait ParseTs {
        fn parse_ts(&self) -> Timestamp;
    }
    impl ParseTs for &str {
        fn parse_ts(&self) -> Timestamp {
            Timestamp::parse_rfc3339(self).unwrap()
        }
    }

    /// The strings (≥ 4 characters) of a JSON value.
    fn strings(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if s.chars().count() >= 4 => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            Value::Object(m) => m.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }

    fn no_value_crosses(w: World) -> TestResult {
        let net = run(&w);
        let coordinator = game_night::context();
        let mut coord_values = Vec::new();
        strings(&Value::Object(coordinator), &mut coord_values);
        // What each participant shared with the coordinator.
        let mut shared: Vec<(usize, String)> = Vec::new();
        for i in 1..net.nodes.len() {
            for t in net.nodes[i].agent.threads().values() {
                for v in t.shared.values() {
                    let mut s = Vec::new();
                    strings(v, &mut s);
                    // A value the coordinator suggested (a flexibility request's window)
                    // is the group's, not this participant's.
                    s.retain(|x| {
                        let x = crate::agent::thread::packets::escape_json(x);
                        !t.history.iter().any(|h| !h.outgoing && h.json.contains(&x))
                    });
                    shared.extend(s.into_iter().map(|x| (i, x)));
                }
            }
        }
        if shared.is_empty() {
            return TestResult::discard();
        }
        for i in 1..net.nodes.len() {
            let mut own = Vec::new();
            strings(
                &Value::Object(net.nodes[i].agent.config().profile.clone()),
                &mut own,
            );
            for t in net.nodes[i].agent.threads().values() {
                for h in t.history.iter().filter(|h| !h.outgoing) {
                    for (j, s) in &shared {
                        if *j == i || own.contains(s) || coord_values.contains(s) {
                            continue;
                        }
                        if h.json
                            .contains(&crate::agent::thread::packets::escape_json(s))
                        {
                            return TestResult::error(format!(
                                "p{} received {s:?} of p{}: {}",
                                i - 1,
                                j - 1,
                                h.json
                            ));
                        }
                    }
                    if h.json.contains("SECRET") {
                        return TestResult::error(h.json.clone());
                    }
                }
            }
        }
        TestResult::passed()
    }

    /// The combined dietary requirements each participant was told of in a proposal.
    fn received(net: &Net) -> Vec<String> {
        let mut out = Vec::new();
        for i in 1..net.nodes.len() {
            for t in net.nodes[i].agent.threads().values() {
                for h in t.history.iter().filter(|h| !h.outgoing) {
                    let v: Value = serde_json::from_str(&h.json).unwrap_or_default();
                    if let Some(d) = v["proposal"]["details"]["dietary"].as_str() {
                        out.push(format!("p{}: {d}", i - 1));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn a_value_that_may_not_be_passed_on_shapes_nothing_the_others_receive() {
        let w = World {
            people: (0..4)
                .map(|i| (vec![0, 1, 2, 3], 0, format!("diet-{i}"), (10, 50)))
                .collect(),
            quorum: None,
        };
        let open = received(&run(&w));
        // p2's tiers forbid passing its dietary requirement on.
        let ruled = received(&run_with(&w, |i, c| {
            if i == 2 {
                c.permissions.usage.insert(
                    "dietary".into(),
                    crate::agent::permissions::UsagePolicy {
                        no_reshare: true,
                        ..Default::default()
                    },
                );
            }
        }));
        // As if p2 had not shared it at all.
        let without = received(&run_with(&w, |i, c| {
            if i == 2 {
                c.profile.remove("dietary");
            }
        }));
        assert!(!ruled.is_empty(), "{open:?}");
        assert_ne!(open, ruled, "{open:?}");
        assert_eq!(ruled, without);
    }

    #[test]
    fn no_participant_value_reaches_another_participant_whatever_they_share() {
        QuickCheck::new()
            .tests(40)
            .quickcheck(no_value_crosses as fn(World) -> TestResult);
    }
}

/// The game night's four and Eve (London, free Friday evening), all connected.
fn net_of_five() -> Net {
    let mut net = game_night::net(true);
    let mut eve = crate::agent::AgentConfig::new(crate::Address::new("eve", "a2acp.io").unwrap());
    eve.profile = serde_json::json!({
        "timezone": "Europe/London",
        "time_windows": ["2026-03-27 19:30-23:30"],
    })
    .as_object()
    .cloned()
    .unwrap();
    let e = net.add_agent(eve, [60; 32], [61; 32]);
    net.connect(e);
    net.settle();
    net
}

#[test]
fn quorum_three_of_five_with_one_decline_and_one_silence() {
    let mut net = net_of_five();
    game_night::start(&mut net, GroupConfirmation::Quorum(3));
    let mut answers = BTreeMap::new();
    answers.insert(1, Answer::Decline); // Bob
    answers.insert(2, Answer::Silent); // Charlie
    game_night::scripted_users(&mut net, &answers);
    let gid = group_id(&net);
    let p = net.nodes[0].agent.groups()[&gid].proposal.clone().unwrap();
    assert_eq!(p.body.quorum, Some(3));
    assert_eq!(p.body.requires_confirmation_from.len(), 5);
    assert!(p.reached, "{}", net.render(Some("alice")));
    // Diana and Eve go ahead with Alice; Bob is out; Charlie has not answered yet.
    assert_eq!(states(&net, 1), vec![ThreadState::Declined]);
    assert_eq!(states(&net, 2), vec![ThreadState::Proposed]);
    assert_eq!(states(&net, 3), vec![ThreadState::Completed]);
    assert_eq!(states(&net, 4), vec![ThreadState::Completed]);
    // Charlie's deadline passes: his leg expires on both sides, and only his.
    net.run_for(std::time::Duration::from_secs(25 * 3600));
    assert_eq!(states(&net, 2), vec![ThreadState::Expired]);
    let mut alice = states(&net, 0);
    alice.sort();
    assert_eq!(
        alice,
        vec![
            ThreadState::Completed,
            ThreadState::Completed,
            ThreadState::Declined,
            ThreadState::Expired
        ]
    );
    // The announcement told the ones still open who attends.
    let told = net.nodes[3]
        .agent
        .threads()
        .values()
        .flat_map(|t| t.history.iter())
        .any(|h| !h.outgoing && h.json.contains("\"outcome\":\"reached\""));
    assert!(told);
}

#[test]
fn the_coordinators_different_time_moves_the_group_to_the_next_candidate() {
    let mut net = game_night::net(true);
    game_night::start(&mut net, GroupConfirmation::All);
    // Participants share; Alice is asked and wants another time.
    let mut answers = BTreeMap::new();
    answers.insert(0, Answer::Silent);
    game_night::scripted_users(&mut net, &answers);
    let gid = group_id(&net);
    let first = net.nodes[0].agent.groups()[&gid].proposal.clone().unwrap();
    let pid = first.prompt_id.unwrap();
    net.answer_resolution(0, pid, crate::agent::ResolutionAnswer::DifferentTime);
    net.settle();
    let g = &net.nodes[0].agent.groups()[&gid];
    assert_eq!(g.ruled_out, vec![first.window]);
    let second = g.proposal.clone().unwrap();
    assert_ne!(second.window, first.window);
    // Every participant now holds the new proposal.
    for i in 1..4 {
        let t = net.nodes[i].agent.threads().values().next().unwrap();
        assert_eq!(
            t.stage.resolution().unwrap().body.proposal,
            second.body.proposal,
            "{}",
            net.render(None)
        );
    }
}

#[test]
fn a_participant_who_makes_an_excuse_is_left_out_and_its_leg_closes_at_both_ends() {
    let mut net = game_night::net(true);
    game_night::start(&mut net, GroupConfirmation::Quorum(3));
    let mut answers = BTreeMap::new();
    answers.insert(2, Answer::Excuse); // Charlie
    game_night::scripted_users(&mut net, &answers);
    assert_eq!(
        states(&net, 2),
        vec![ThreadState::Declined],
        "{}",
        net.render(None)
    );
    let charlie = net.address(2);
    let leg = net.nodes[0]
        .agent
        .threads()
        .values()
        .find(|t| t.peer == charlie)
        .unwrap();
    assert_eq!(leg.state, ThreadState::Declined);
    for i in [1, 3] {
        assert_eq!(states(&net, i), vec![ThreadState::Completed]);
    }
    assert!(net.nodes[2]
        .notifications
        .iter()
        .any(|n| n.text.contains("went ahead without you")));
}

mod transfer {
    //! Coordinator transfer (§10.3).

    use std::collections::BTreeMap;

    use serde_json::json;

    use super::states;
    use crate::agent::tests::support::HostileWorld;
    use crate::agent::*;
    use crate::harness::game_night;

    #[test]
    fn alice_hands_the_game_night_to_bob_who_brings_it_to_a_confirmation() {
        let mut net = game_night::net(true);
        game_night::start(&mut net, GroupConfirmation::All);
        let gid = net.nodes[0].agent.groups().keys().next().cloned().unwrap();
        let bob = net.address(1);
        net.command(
            0,
            Command::TransferCoordinator {
                group_id: gid.clone(),
                to: bob.clone(),
            },
        );
        net.settle();
        // Alice's group is handed over; Bob coordinates the same group, one epoch on.
        let ga = &net.nodes[0].agent.groups()[&gid];
        assert!(ga.closed, "{}", net.render(None));
        assert_eq!(ga.header.coordinator, bob);
        let gb = &net.nodes[1].agent.groups()[&gid];
        assert_eq!(gb.header.epoch, 1);
        assert_eq!(gb.header.participants[0], bob);
        game_night::scripted_users(&mut net, &BTreeMap::new());
        // Charlie and Diana: the leg with Alice closed at the handover, the leg with Bob
        // completed; Alice and Bob: their one leg completed.
        for i in [2, 3] {
            let mut s = states(&net, i);
            s.sort();
            assert_eq!(
                s,
                vec![ThreadState::Completed, ThreadState::Declined],
                "node {i}\n{}",
                net.render(None)
            );
            assert!(net.nodes[i]
                .notifications
                .iter()
                .any(|n| n.text.contains("agent:bob@a2acp.io now coordinates")));
            let t = net.nodes[i]
                .agent
                .threads()
                .values()
                .find(|t| t.state == ThreadState::Completed)
                .unwrap();
            assert_eq!(t.peer, bob);
        }
        assert_eq!(
            states(&net, 1)
                .iter()
                .filter(|s| **s == ThreadState::Completed)
                .count(),
            3
        );
        let alice: Vec<ThreadState> = net.nodes[0]
            .agent
            .threads()
            .values()
            .filter(|t| t.peer == bob)
            .map(|t| t.state)
            .collect();
        assert_eq!(alice, vec![ThreadState::Completed]);
        let p = net.nodes[1].agent.groups()[&gid].proposal.clone().unwrap();
        assert!(p.reached);
        assert_eq!(p.body.requires_confirmation_from.len(), 4);
    }

    #[test]
    fn no_transfer_while_a_proposal_is_open_or_to_a_stranger() {
        let mut net = game_night::net(true);
        game_night::start(&mut net, GroupConfirmation::All);
        let gid = net.nodes[0].agent.groups().keys().next().cloned().unwrap();
        net.command(
            0,
            Command::TransferCoordinator {
                group_id: gid.clone(),
                to: crate::Address::new("zed", "a2acp.io").unwrap(),
            },
        );
        let mut answers = BTreeMap::new();
        answers.insert(0, game_night::Answer::Silent);
        game_night::scripted_users(&mut net, &answers);
        assert!(net.nodes[0].agent.groups()[&gid].proposal.is_some());
        let bob = net.address(1);
        net.command(
            0,
            Command::TransferCoordinator {
                group_id: gid.clone(),
                to: bob,
            },
        );
        net.settle();
        let g = &net.nodes[0].agent.groups()[&gid];
        assert!(!g.closed && g.transfer.is_none());
        let told: Vec<&String> = net.nodes[0]
            .notifications
            .iter()
            .map(|n| &n.text)
            .filter(|t| {
                t.contains("only while nothing is proposed") || t.contains("not taking part")
            })
            .collect();
        assert_eq!(told.len(), 2, "{told:?}");
    }

    #[test]
    fn a_participant_cannot_make_itself_coordinator() {
        // Bob coordinates a group with Alice and Mallory; Mallory opens a leg to Alice
        // as if she coordinated it at the next epoch.
        let mut w = HostileWorld::new(Limits::default(), true);
        let b = w.bob.unwrap();
        let (alice, m) = (w.alice_addr(), w.m.address.clone());
        w.net.command(
            b,
            Command::StartGroupThread {
                participants: vec![alice.clone(), m.clone()],
                intent: game_night::intent(),
                context: game_night::context(),
                confirmation: GroupConfirmation::All,
            },
        );
        w.net.settle();
        w.m.pump(&mut w.net);
        let gid = w.net.nodes[b]
            .agent
            .groups()
            .keys()
            .next()
            .cloned()
            .unwrap();
        let prompts = w.net.nodes[w.alice].prompts.len();
        let thread = w.m.new_thread_id();
        w.m_send(
            &thread,
            "context",
            json!({
                "intent": {"category": "group_scheduling", "summary": "Game night for 4"},
                "context": {},
                "needs": [{"field": "time_windows", "priority": "required", "reason": "when?"}],
                "group": {"group_id": gid, "coordinator": m.as_str(), "epoch": 1,
                          "participants": [m.as_str(), alice.as_str(),
                                           w.net.address(b).as_str()]},
            }),
        );
        let t = w.net.nodes[w.alice]
            .agent
            .thread(&thread)
            .expect("kept, waiting");
        assert!(t.group.as_ref().unwrap().awaiting_announcement);
        assert_eq!(w.net.nodes[w.alice].prompts.len(), prompts);
        // Nor can she announce herself on her own leg with Bob: Bob ignores it.
        let header = w.net.nodes[b].agent.groups()[&gid].header.clone();
        assert_eq!(header.coordinator, w.net.address(b));
    }
}
