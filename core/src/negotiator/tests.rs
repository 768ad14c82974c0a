//! Unit and property tests of the deterministic negotiator.

use std::collections::BTreeSet;

use quickcheck::{Arbitrary, Gen, QuickCheck};
use serde_json::{json, Value};

use super::prefs::{intersect_budgets, merge_dietary, parse_budget};
use super::windows::{parse_window_str, read_side, Zone};
use super::*;
use crate::packet::{Intent, Priority};

fn obj(v: Value) -> Context {
    match v {
        Value::Object(m) => m,
        _ => Context::new(),
    }
}

fn addr(s: &str) -> Address {
    Address::parse(s).expect("test address")
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Owns everything a [`View`] borrows.
struct Thread {
    intent: Intent,
    initiator: bool,
    me: Address,
    peer: Address,
    mine: Context,
    theirs: Context,
    asked: BTreeSet<String>,
    unavailable: BTreeSet<String>,
    remembered: Context,
    usually_declined: BTreeSet<String>,
    rejected: Vec<Rejected>,
    round_trips: u32,
}

impl Thread {
    fn new(category: &str, summary: &str, initiator: bool, mine: Value, theirs: Value) -> Self {
        let (me, peer) = if initiator {
            ("agent:alice@a2acp.io", "agent:bob@a2acp.io")
        } else {
            ("agent:bob@a2acp.io", "agent:alice@a2acp.io")
        };
        Thread {
            intent: Intent {
                category: category.to_string(),
                summary: summary.to_string(),
                urgency: Some("low".to_string()),
                scope_change: None,
            },
            initiator,
            me: addr(me),
            peer: addr(peer),
            mine: obj(mine),
            theirs: obj(theirs),
            asked: BTreeSet::new(),
            unavailable: BTreeSet::new(),
            remembered: Context::new(),
            usually_declined: BTreeSet::new(),
            rejected: Vec::new(),
            round_trips: 1,
        }
    }

    fn view(&self) -> View<'_> {
        View {
            intent: &self.intent,
            i_am_initiator: self.initiator,
            me: &self.me,
            peer: &self.peer,
            mine: &self.mine,
            theirs: &self.theirs,
            asked: &self.asked,
            unavailable: &self.unavailable,
            remembered: &self.remembered,
            usually_declined: &self.usually_declined,
            rejected: &self.rejected,
            round_trips: self.round_trips,
        }
    }

    fn decide(&self) -> Decision {
        let d = decide(&self.view());
        check_invariants(&self.view(), &d);
        d
    }
}

/// The §4 context of Alice's first packet (with her always-shared time zone).
fn alice_context() -> Value {
    json!({
        "event_type": "dinner",
        "proposed_date": "2026-03-27",
        "time_windows": ["18:00-21:00"],
        "location_preference": "central Reading",
        "party_size": 2,
        "dietary": ["vegetarian"],
        "budget_range": "£20-40pp",
        "timezone": "Europe/London",
        "flexibility": {"date": "somewhat_flexible", "time": "flexible", "location": "flexible"}
    })
}

/// Bob's values from §6.1.
fn bob_context() -> Value {
    json!({
        "time_windows": ["18:30-21:00"],
        "dietary": ["none"],
        "location_preference": "anywhere within 20 min drive of Reading centre"
    })
}

fn dinner_for_bob() -> Thread {
    Thread::new(
        "scheduling",
        "Coordinate dinner on Friday",
        false,
        bob_context(),
        alice_context(),
    )
}

fn fields(needs: &[Need]) -> Vec<&str> {
    needs.iter().map(|n| n.field.as_str()).collect()
}

/// Every string leaf of a value.
fn leaves(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(a) => a.iter().for_each(|x| leaves(x, out)),
        Value::Object(o) => o.values().for_each(|x| leaves(x, out)),
        _ => {}
    }
}

/// Properties every decision must have.
fn check_invariants(view: &View, d: &Decision) {
    match d {
        Decision::Ask { needs } => {
            assert!(!needs.is_empty() && needs.len() <= 5, "needs: {needs:?}");
            for n in needs {
                assert!(!view.asked.contains(&n.field), "re-asked {}", n.field);
                assert!(
                    !view.unavailable.contains(&n.field),
                    "asked declined {}",
                    n.field
                );
            }
            let prios: Vec<Priority> = needs.iter().map(|n| n.priority).collect();
            let mut sorted = prios.clone();
            sorted.sort();
            assert_eq!(prios, sorted, "needs not most important first");
        }
        Decision::Propose { proposal, .. } => {
            assert!(!proposal.summary.trim().is_empty());
            assert!(proposal.alternatives.len() <= 2 || !needs::is_scheduling(view.intent));
            // Copied values come from one of the contexts.
            let mut known = Vec::new();
            leaves(&Value::Object(view.mine.clone()), &mut known);
            leaves(&Value::Object(view.theirs.clone()), &mut known);
            let known_text = known.join("\n").to_lowercase();
            for key in ["location", "venue", "dietary", "party_size"] {
                if let Some(v) = proposal.details.get(key) {
                    let mut vs = Vec::new();
                    leaves(v, &mut vs);
                    for s in vs {
                        assert!(
                            known_text.contains(&s.to_lowercase()),
                            "details.{key} value {s:?} is in neither context"
                        );
                    }
                }
            }
        }
        Decision::NoOverlap { context, .. } => {
            assert!(context.contains_key("conflict"));
            assert!(!super::schedule::conflict_sent(view), "second no-overlap");
        }
        Decision::Escalate { reason, summary } => {
            assert!(!reason.trim().is_empty() && !summary.trim().is_empty());
        }
        Decision::Wait => {}
    }
    if view.round_trips >= MAX_ROUND_TRIPS {
        assert!(matches!(d, Decision::Escalate { .. }));
    }
    // The negotiator's own answers pass the validation applied to an LLM's.
    let text = serde_json::to_string(d).expect("serialise decision");
    if let Err(e) = parse_decision(&text, view) {
        panic!("decide() output refused by parse_decision: {e}\n{text}");
    }
}

fn expect_propose(d: Decision) -> (Proposal, Vec<ActionSpec>) {
    match d {
        Decision::Propose { proposal, actions } => (proposal, actions),
        other => panic!("expected a proposal, got {other:#?}"),
    }
}

#[test]
fn initial_needs_for_dinner_match_the_spec_example() {
    let intent = Intent {
        category: "scheduling".into(),
        summary: "Coordinate dinner on Friday".into(),
        urgency: None,
        scope_change: None,
    };
    let needs = initial_needs(&intent, &obj(alice_context()));
    assert_eq!(
        fields(&needs),
        ["time_windows", "dietary", "location_preference"]
    );
    assert_eq!(needs[0].priority, Priority::Required);
    assert_eq!(needs[1].priority, Priority::Helpful);
    assert_eq!(needs[2].priority, Priority::NiceToHave);
    // A fixed location makes asking for the peer's pointless.
    let mut fixed = obj(alice_context());
    fixed.insert("flexibility".into(), json!({"location": "not_flexible"}));
    assert_eq!(
        fields(&initial_needs(&intent, &fixed)),
        ["time_windows", "dietary"]
    );
}

#[test]
fn dinner_example_bob_asks_then_proposes_19_00() {
    let mut t = dinner_for_bob();
    match t.decide() {
        Decision::Ask { needs } => {
            assert_eq!(fields(&needs), ["transport_mode", "cuisine_preference"]);
            assert!(needs.iter().all(|n| n.priority == Priority::Helpful));
        }
        other => panic!("expected Ask, got {other:#?}"),
    }
    // Alice answers: transport given, cuisine declined (§7.5).
    t.asked = set(&["transport_mode", "cuisine_preference"]);
    t.theirs.insert("transport_mode".into(), json!("driving"));
    t.unavailable = set(&["cuisine_preference"]);
    t.round_trips = 2;
    let (p, actions) = expect_propose(t.decide());
    assert_eq!(
        p.summary,
        "Dinner on Friday 27 March 2026, 19:00–21:00 (Europe/London), central Reading"
    );
    assert_eq!(p.details["date"], "2026-03-27");
    assert_eq!(p.details["time"], "19:00");
    assert_eq!(p.details["end"], "21:00");
    assert_eq!(p.details["timezone"], "Europe/London");
    assert_eq!(p.details["start_utc"], "2026-03-27T19:00:00Z");
    assert_eq!(p.details["party_size"], 2);
    assert_eq!(p.details["dietary"], json!(["vegetarian"]));
    assert_eq!(p.details["budget"], "GBP 20-40pp");
    assert_eq!(p.details["location"], "central Reading");
    assert!(!p.alternatives.is_empty() && p.alternatives.len() <= 2);
    assert_eq!(p.alternatives[0].details["time"], "18:30");
    assert!(!p.alternatives[0].reason.is_empty());
    assert!(p.reasoning.contains("18:30–21:00"), "{}", p.reasoning);
    assert!(p.reasoning.contains("vegetarian"));
    assert!(p.reasoning.contains("cuisine_preference"));
    assert_eq!(actions.len(), 2);
    assert_eq!(actions[0].action, "book_table");
    assert_eq!(actions[0].by.as_ref(), Some(&t.me));
    assert!(actions[0].reversible && actions[0].requires_user_approval);
    assert_eq!(actions[1].action, "add_calendar_event");
    assert_eq!(actions[1].by, None);
    assert!(actions[1].reversible);
}

#[test]
fn initiator_waits_until_the_peer_answers() {
    let mut t = Thread::new(
        "scheduling",
        "Coordinate dinner on Friday",
        true,
        alice_context(),
        json!({}),
    );
    t.asked = set(&["time_windows", "dietary", "location_preference"]);
    assert_eq!(t.decide(), Decision::Wait);
    // The peer answered something but not the required field: stall (§6.2).
    t.theirs = obj(json!({"dietary": "none"}));
    assert_eq!(t.decide(), Decision::Wait);
    // Declined: work without it — propose from my own availability.
    t.unavailable = set(&["time_windows"]);
    t.asked.extend(set(&[
        "transport_mode",
        "cuisine_preference",
        "budget_range",
    ]));
    let (p, _) = expect_propose(t.decide());
    assert_eq!(p.details["time"], "18:00");
    assert!(p.reasoning.contains("declined"), "{}", p.reasoning);
}

/// Swarm seed 113: the peer's only answer declined everything. The initiator must not
/// wait for values that will never come: it works without them (§7.5).
#[test]
fn initiator_does_not_wait_when_the_peer_declined_everything() {
    let mut t = Thread::new(
        "scheduling",
        "Coordinate dinner on Friday",
        true,
        alice_context(),
        json!({}),
    );
    t.asked = set(&["time_windows", "location_preference"]);
    t.unavailable = set(&["time_windows", "location_preference"]);
    assert_ne!(t.decide(), Decision::Wait);
    let mut g = Thread::new("project_update", "Colours", true, json!({}), json!({}));
    g.asked = set(&["favourite_colour"]);
    g.unavailable = set(&["favourite_colour"]);
    assert_ne!(g.decide(), Decision::Wait);
}

#[test]
fn cross_timezone_london_and_new_york() {
    let alice = json!({
        "event_type": "video call",
        "proposed_date": "2026-03-27",
        "time_windows": ["14:00-18:00"],
        "timezone": "Europe/London"
    });
    let bob = json!({"time_windows": ["09:00-12:00"], "timezone": "America/New_York"});
    // 27 March 2026: London on GMT, New York on EDT (UTC-4): 09:00-12:00 NY = 13:00-16:00 UTC.
    let t = Thread::new(
        "scheduling",
        "Quick call",
        false,
        bob.clone(),
        alice.clone(),
    );
    let (p, actions) = expect_propose(t.decide());
    assert_eq!(p.details["date"], "2026-03-27");
    assert_eq!(p.details["time"], "14:00");
    assert_eq!(p.details["end"], "15:00");
    assert_eq!(p.details["timezone"], "Europe/London");
    assert_eq!(p.details["start_utc"], "2026-03-27T14:00:00Z");
    assert!(p.reasoning.contains("America/New_York"), "{}", p.reasoning);
    assert_eq!(actions.len(), 1, "no table for a call");
    // In July London is on BST: 09:00-12:00 NY = 14:00-17:00 London; shown in Alice's zone
    // whoever decides.
    let mut alice_summer = obj(alice);
    alice_summer.insert("proposed_date".into(), json!("2026-07-01"));
    alice_summer.insert("time_windows".into(), json!(["15:30-19:00"]));
    let t = Thread::new(
        "scheduling",
        "Quick call",
        true,
        Value::Object(alice_summer),
        bob,
    );
    let (p, _) = expect_propose(t.decide());
    assert_eq!(p.details["time"], "16:00");
    assert_eq!(p.details["start_utc"], "2026-07-01T15:00:00Z");
    // Offsets written inside the windows work too.
    let t = Thread::new(
        "scheduling",
        "Call",
        false,
        json!({"time_windows": ["2026-03-27 09:00-12:00-04:00"]}),
        json!({"event_type": "call", "time_windows": ["2026-03-27 14:30-18:00+00:00"], "timezone": "UTC"}),
    );
    let (p, _) = expect_propose(t.decide());
    assert_eq!(p.details["time"], "15:00");
    assert_eq!(p.details["timezone"], "UTC");
}

fn wed_thu(sender_flex: &str, recipient_flex: &str) -> Thread {
    let alice = json!({
        "event_type": "dinner",
        "proposed_date": "2026-03-25",
        "time_windows": ["Wednesday 18:00-21:00"],
        "timezone": "Europe/London",
        "flexibility": {"date": sender_flex, "time": "not_flexible"}
    });
    let bob = json!({
        "proposed_date": "2026-03-26",
        "time_windows": ["Thursday 18:00-21:00"],
        "flexibility": {"date": recipient_flex, "time": "not_flexible"}
    });
    Thread::new("scheduling", "Coordinate dinner", true, alice, bob)
}

#[test]
fn no_overlap_wednesday_vs_thursday_gives_the_three_alternatives_in_order() {
    let t = wed_thu("not_flexible", "not_flexible");
    let (context, escalation) = match t.decide() {
        Decision::NoOverlap {
            context,
            escalation,
        } => (context, escalation),
        other => panic!("expected NoOverlap, got {other:#?}"),
    };
    assert_eq!(
        context.keys().collect::<Vec<_>>(),
        ["conflict", "proposed_alternatives"]
    );
    let c = &context["conflict"];
    assert_eq!(c["type"], "no_overlap");
    assert_eq!(c["field"], "time_windows");
    assert_eq!(
        c["agent_a_values"],
        json!(["Wednesday 2026-03-25 18:00-21:00 (Europe/London)"])
    );
    assert_eq!(
        c["agent_b_values"],
        json!(["Thursday 2026-03-26 18:00-21:00 (Europe/London)"])
    );
    assert!(c["attempted_resolution"]
        .as_str()
        .unwrap_or_default()
        .contains("both marked 'not_flexible' on date"));
    let alts = context["proposed_alternatives"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(alts.len(), 3);
    assert_eq!(alts[0]["option"], "Following week — Wednesday 1 April");
    assert_eq!(alts[0]["details"]["date"], "2026-04-01");
    assert_eq!(alts[0]["details"]["start"], "18:00");
    assert_eq!(alts[0]["details"]["end"], "21:00");
    assert_eq!(alts[1]["option"], "Following week — Thursday 2 April");
    assert_eq!(alts[1]["details"]["date"], "2026-04-02");
    assert_eq!(
        alts[2]["option"],
        "Lunch instead — Friday 27 March 12:00-14:00"
    );
    assert_eq!(alts[2]["details"]["date"], "2026-03-27");
    assert_eq!(alts[2]["details"]["start"], "12:00");
    assert_eq!(alts[2]["details"]["end"], "14:00");
    assert_eq!(alts[2]["details"]["event_type"], "lunch");
    for a in &alts {
        assert!(!a["rationale"].as_str().unwrap_or_default().is_empty());
        assert_eq!(a["details"]["timezone"], "Europe/London");
    }
    assert_eq!(escalation.recommend, "surface_to_users");
    assert!(escalation.suggested_prompt.is_some());
    // Rendered windows read back as the same windows.
    let back = c["agent_a_values"][0].as_str().and_then(parse_window_str);
    assert!(back.is_some_and(|w| w.start == 18 * 60 && w.end == 21 * 60));
}

#[test]
fn no_overlap_lunch_goes_to_a_day_both_have() {
    let alice = json!({
        "event_type": "dinner",
        "time_windows": ["2026-03-25 18:00-21:00", "2026-03-27 12:00-15:00"],
        "timezone": "Europe/London"
    });
    let bob = json!({"time_windows": ["2026-03-26 18:00-21:00", "2026-03-27 17:00-18:00"]});
    let t = Thread::new("scheduling", "Dinner", true, alice, bob);
    let Decision::NoOverlap { context, .. } = t.decide() else {
        panic!("expected NoOverlap");
    };
    let alts = &context["proposed_alternatives"];
    assert_eq!(alts[2]["details"]["date"], "2026-03-27");
    assert!(alts[2]["rationale"]
        .as_str()
        .unwrap_or_default()
        .contains("both have Friday availability"));
}

#[test]
fn date_flexibility_moves_a_window_instead_of_conflicting() {
    let mut t = wed_thu("somewhat_flexible", "not_flexible");
    t.asked = set(&[
        "dietary",
        "transport_mode",
        "cuisine_preference",
        "location_preference",
        "budget_range",
    ]);
    let (p, _) = expect_propose(t.decide());
    assert_eq!(p.details["date"], "2026-03-26");
    assert_eq!(p.details["time"], "18:00");
    assert!(p.reasoning.contains("date flexibility"), "{}", p.reasoning);
}

#[test]
fn time_flexibility_widens_windows_only_when_needed() {
    let alice = json!({
        "event_type": "dinner", "proposed_date": "2026-03-27", "timezone": "Europe/London",
        "time_windows": ["17:00-19:30"], "flexibility": {"time": "flexible"}
    });
    let bob = json!({"time_windows": ["18:00-22:00"], "transport_mode": "walking",
        "cuisine_preference": "thai", "dietary": "none", "location_preference": "Reading", "budget_range": "£30"});
    let t = Thread::new("scheduling", "Dinner", true, alice, bob);
    let (p, _) = expect_propose(t.decide());
    // 18:00-19:30 is too short for 2 h; Alice's flexible time stretches her window to 20:30.
    assert_eq!(p.details["time"], "18:00");
    assert_eq!(p.details["end"], "20:00");
    assert!(p.reasoning.contains("time flexibility"), "{}", p.reasoning);
}

/// Bob receiving Alice's §6.3 packet.
fn bob_evaluates(bob: Value) -> Thread {
    let sender = wed_thu("not_flexible", "not_flexible");
    let Decision::NoOverlap { context, .. } = sender.decide() else {
        panic!("expected NoOverlap");
    };
    let mut theirs = sender.mine.clone();
    theirs.extend(context);
    let mut t = Thread::new(
        "scheduling",
        "Coordinate dinner",
        false,
        bob,
        Value::Object(theirs),
    );
    t.round_trips = 2;
    t
}

#[test]
fn evaluating_alternatives_proposes_the_one_that_fits() {
    // Not flexible on dates, but free on Thursday 2 April too.
    let t = bob_evaluates(json!({
        "time_windows": ["2026-03-26 18:00-21:00", "2026-04-02 18:30-21:00"],
        "flexibility": {"date": "not_flexible"}
    }));
    let (p, actions) = expect_propose(t.decide());
    assert_eq!(p.details["date"], "2026-04-02");
    assert_eq!(p.details["time"], "19:00");
    assert!(
        p.reasoning.contains("Following week — Thursday 2 April"),
        "{}",
        p.reasoning
    );
    assert_eq!(actions[0].action, "book_table");
    // Somewhat flexible on dates: the sender's preference (1 April) comes first.
    let t = bob_evaluates(json!({
        "time_windows": ["Thursday 18:00-21:00"], "proposed_date": "2026-03-26",
        "flexibility": {"date": "somewhat_flexible"}
    }));
    let (p, _) = expect_propose(t.decide());
    assert_eq!(p.details["date"], "2026-04-01");
    assert_eq!(p.alternatives[0].details["date"], "2026-04-02");
    // A lunch alternative is proposed as lunch.
    let t = bob_evaluates(json!({
        "time_windows": ["2026-03-26 18:00-21:00", "2026-03-27 11:00-15:00"],
        "flexibility": {"date": "not_flexible"}
    }));
    let (p, _) = expect_propose(t.decide());
    assert_eq!(p.details["event_type"], "lunch");
    assert_eq!(p.details["time"], "12:00");
    assert_eq!(p.details["end"], "13:30");
    assert!(
        p.summary.starts_with("Lunch on Friday 27 March 2026"),
        "{}",
        p.summary
    );
}

#[test]
fn evaluating_alternatives_none_fits_escalates() {
    let t = bob_evaluates(json!({
        "time_windows": ["Thursday 18:00-21:00"], "proposed_date": "2026-03-26",
        "flexibility": {"date": "not_flexible"}
    }));
    match t.decide() {
        Decision::Escalate { reason, summary } => {
            assert!(reason.contains("alternatives"), "{reason}");
            assert!(
                summary.contains("Following week — Wednesday 1 April"),
                "{summary}"
            );
            assert!(summary.contains("Lunch instead"), "{summary}");
        }
        other => panic!("expected Escalate, got {other:#?}"),
    }
}

#[test]
fn never_no_overlap_twice() {
    let mut t = wed_thu("not_flexible", "not_flexible");
    let Decision::NoOverlap { context, .. } = t.decide() else {
        panic!("expected NoOverlap");
    };
    // What I sent is part of what I shared.
    t.mine.extend(context);
    t.round_trips = 3;
    assert!(matches!(t.decide(), Decision::Escalate { .. }));
    let bad = json!({"decision": "no_overlap",
        "context": {"conflict": {"type": "no_overlap", "field": "time_windows", "agent_a_values": [],
            "agent_b_values": [], "attempted_resolution": "x"},
            "proposed_alternatives": [{"option": "next week", "rationale": "r"}]},
        "escalation": {"recommend": "surface_to_users", "reason": "r"}});
    let err = parse_decision(&bad.to_string(), &t.view()).unwrap_err();
    assert!(err.contains("already"), "{err}");
}

#[test]
fn rejected_options_are_skipped_then_escalated() {
    let mut t = dinner_for_bob();
    t.asked = set(&["transport_mode", "cuisine_preference"]);
    t.unavailable = set(&["transport_mode", "cuisine_preference"]);
    let (first, _) = expect_propose(t.decide());
    t.rejected.push(Rejected {
        summary: first.summary.clone(),
        details: first.details.clone(),
        reason: "book_table failed: fully booked".into(),
    });
    let (second, _) = expect_propose(t.decide());
    assert_eq!(second.details["time"], "18:30");
    assert!(second.reasoning.contains("ruled out"));
    t.rejected.push(Rejected {
        summary: second.summary.clone(),
        details: second.details.clone(),
        reason: "declined: scheduling_conflict".into(),
    });
    match t.decide() {
        Decision::Escalate { summary, .. } => {
            assert!(summary.contains("fully booked"), "{summary}");
        }
        other => panic!("expected Escalate, got {other:#?}"),
    }
}

#[test]
fn round_trip_limit_escalates() {
    let mut t = dinner_for_bob();
    t.round_trips = 8;
    assert!(matches!(t.decide(), Decision::Escalate { .. }));
    let ask = json!({"decision": "ask", "needs": [{"field": "transport_mode", "reason": "r", "priority": "helpful"}]});
    assert!(parse_decision(&ask.to_string(), &t.view()).is_err());
}

#[test]
fn budgets_parse_and_intersect() {
    let b = |s: &str| parse_budget(&json!(s)).unwrap_or_else(|| panic!("budget {s}"));
    let alice = b("£20-40pp");
    assert_eq!(alice.currency.as_deref(), Some("GBP"));
    assert_eq!((alice.lo, alice.hi, alice.per_person), (2000, 4000, true));
    assert_eq!(b("GBP 20-40").render(), "GBP 20-40");
    assert_eq!(b("GBP 30").render(), "GBP 30");
    assert_eq!(b("$25-50").currency.as_deref(), Some("USD"));
    assert_eq!(b("up to £40").render(), "up to GBP 40");
    assert_eq!(b("€30+").render(), "from EUR 30");
    assert_eq!(b("25.50 - 40 EUR").render(), "EUR 25.50-40");
    assert_eq!(
        intersect_budgets(&alice, &b("GBP 30-50")).map(|x| x.render()),
        Ok("GBP 30-40pp".to_string())
    );
    assert_eq!(
        intersect_budgets(&alice, &b("GBP 30")).map(|x| x.render()),
        Ok("GBP 30pp".to_string())
    );
    let err = intersect_budgets(&alice, &b("$25-50")).unwrap_err();
    assert!(err.contains("different currencies"), "{err}");
    assert!(intersect_budgets(&alice, &b("£50-80")).is_err());
    assert!(parse_budget(&json!("cheap")).is_none());
    assert!(parse_budget(&json!("£20 or $30")).is_none());
    assert!(parse_budget(&json!("99999999999999999999999")).is_none());

    // In a proposal: intersected, or left out with the reason in the reasoning.
    let mut t = dinner_for_bob();
    t.mine.insert("budget_range".into(), json!("GBP 30-50"));
    t.asked = set(&["transport_mode", "cuisine_preference"]);
    let (p, _) = expect_propose(t.decide());
    assert_eq!(p.details["budget"], "GBP 30-40pp");
    t.mine.insert("budget_range".into(), json!("$25-50"));
    let (p, _) = expect_propose(t.decide());
    assert!(p.details.get("budget").is_none());
    assert!(
        p.reasoning.contains("different currencies (GBP vs USD)"),
        "{}",
        p.reasoning
    );
}

#[test]
fn dietary_constraints_merge() {
    assert_eq!(
        merge_dietary(&[&json!(["vegetarian"]), &json!(["none"])]),
        ["vegetarian"]
    );
    assert_eq!(
        merge_dietary(&[
            &json!(["Vegetarian", "gluten-free"]),
            &json!("vegetarian, nut allergy; No restrictions")
        ]),
        ["Vegetarian", "gluten-free", "nut allergy"]
    );
    assert!(merge_dietary(&[&json!("no restrictions"), &json!(42)]).is_empty());
    let mut t = dinner_for_bob();
    t.mine
        .insert("dietary".into(), json!(["halal", "vegetarian"]));
    t.asked = set(&["transport_mode", "cuisine_preference"]);
    let (p, _) = expect_propose(t.decide());
    assert_eq!(p.details["dietary"], json!(["vegetarian", "halal"]));
}

#[test]
fn window_forms_parse() {
    let w = |s: &str| parse_window_str(s).unwrap_or_else(|| panic!("window {s}"));
    assert_eq!((w("18:00-21:00").start, w("18:00-21:00").end), (1080, 1260));
    assert!(w("18:00-21:00+01:00").zone.is_some());
    assert!(w("18:00+01:00-21:00+01:00").zone.is_some());
    assert_eq!(w("18:00-21:00-05:00").zone, Zone::parse("-05:00"));
    assert_eq!(
        w("Wednesday 18:00-21:00").weekday,
        Some(chrono::Weekday::Wed)
    );
    assert!(w("2026-03-27 18:00-21:00").date.is_some());
    assert_eq!(w("Fri 6pm-9:30pm").end, 21 * 60 + 30);
    assert_eq!(w("22:00-01:00").end, 25 * 60, "crosses midnight");
    assert!(w("18:00 - 21:00 Europe/London").zone.is_some());
    for bad in [
        "",
        "soon",
        "18:00",
        "25:00-26:00",
        "18:00-18:00",
        "2026-02-30 18:00-21:00",
        "1800-2100",
    ] {
        assert!(parse_window_str(bad).is_none(), "{bad}");
    }
    let side = read_side(&obj(json!({"time_windows": [
        {"date": "2026-03-27", "start": "18:00", "end": "21:00", "timezone": "Europe/London"},
        {"start": "2026-03-28T10:00:00+01:00", "end": "2026-03-28T12:00:00+01:00"},
        "nonsense"
    ]})));
    assert_eq!(side.raw.len(), 2);
    assert_eq!(side.unreadable, ["nonsense"]);
    assert!(Zone::parse("europe/london").is_some());
    assert!(Zone::parse("UTC+5:30").is_some());
    assert!(Zone::parse("Mars/Olympus").is_none());
}

#[test]
fn duration_field_and_lunch_default() {
    let alice = json!({"event_type": "lunch", "proposed_date": "2026-03-27", "timezone": "Europe/London",
        "time_windows": ["12:15-14:00"]});
    let bob = json!({"time_windows": ["12:00-15:00"], "dietary": [], "transport_mode": "walk",
        "cuisine_preference": "any", "location_preference": "x", "budget_range": "£10-20"});
    let t = Thread::new("scheduling", "Lunch", true, alice.clone(), bob.clone());
    let (p, _) = expect_propose(t.decide());
    // 13:00 + 1.5 h would end after 14:00: the overlap start is used.
    assert_eq!(p.details["time"], "12:15");
    assert_eq!(p.details["end"], "13:45");
    let mut a = obj(alice);
    a.insert("duration".into(), json!("PT45M"));
    let t = Thread::new("scheduling", "Lunch", true, Value::Object(a), bob);
    let (p, _) = expect_propose(t.decide());
    assert_eq!(
        (p.details["time"].as_str(), p.details["end"].as_str()),
        (Some("13:00"), Some("13:45"))
    );
}

#[test]
fn needs_date_when_windows_have_none() {
    let t = Thread::new(
        "scheduling",
        "Catch up",
        false,
        json!({"time_windows": ["10:00-12:00"]}),
        json!({"time_windows": ["11:00-13:00"], "location_preference": "here"}),
    );
    match t.decide() {
        Decision::Ask { needs } => assert_eq!(needs[0].field, "proposed_date"),
        other => panic!("expected Ask, got {other:#?}"),
    }
}

#[test]
fn generic_intent_asks_at_most_five_then_proposes() {
    let wanted = json!({"wanted_fields": [
        "a", "b", {"field": "deadline", "priority": "required", "reason": "To plan"},
        "c", "d", "e", {"field": "nice", "priority": "nice_to_have"}, "f"
    ], "project_details": "Side Quests playtest"});
    let mut t = Thread::new(
        "project_coordination",
        "Plan playtest",
        true,
        wanted,
        json!({"x": 1}),
    );
    let needs = match t.decide() {
        Decision::Ask { needs } => needs,
        other => panic!("expected Ask, got {other:#?}"),
    };
    assert_eq!(fields(&needs), ["deadline", "a", "b", "c", "d"]);
    assert_eq!(
        fields(&initial_needs(&t.intent, &t.mine)),
        ["deadline", "a", "b", "c", "d"]
    );
    t.asked = needs.iter().map(|n| n.field.clone()).collect();
    t.theirs.insert("deadline".into(), json!("2026-03-28"));
    t.theirs.insert("a".into(), json!("alpha"));
    t.unavailable = set(&["b"]);
    let needs = match t.decide() {
        Decision::Ask { needs } => needs,
        other => panic!("expected Ask, got {other:#?}"),
    };
    assert_eq!(fields(&needs), ["e", "f", "nice"]);
    t.asked.extend(needs.into_iter().map(|n| n.field));
    let (p, actions) = expect_propose(t.decide());
    assert!(actions.is_empty());
    assert_eq!(p.details["deadline"], "2026-03-28");
    assert_eq!(p.details["project_details"], "Side Quests playtest");
    assert!(p.details.get("wanted_fields").is_none());
    assert!(
        p.summary.starts_with("Plan playtest — agreed on"),
        "{}",
        p.summary
    );
    assert!(p.reasoning.contains("working without b"), "{}", p.reasoning);
}

#[test]
fn parse_decision_accepts_good_answers() {
    let t = dinner_for_bob();
    let text = "Here you go:\n```json\n{\"decision\": \"ask\", \"needs\": [{\"field\": \"transport_mode\", \"reason\": \"radius\", \"priority\": \"helpful\"}]}\n```";
    let d = parse_decision(text, &t.view()).expect("valid");
    assert!(matches!(d, Decision::Ask { ref needs } if needs.len() == 1));
    assert_eq!(
        parse_decision(r#"{"decision":"wait"}"#, &t.view()),
        Ok(Decision::Wait)
    );
    let esc = r#"{"decision":"escalate","reason":"stuck","summary":"tried Friday"}"#;
    assert!(parse_decision(esc, &t.view()).is_ok());
    let propose = json!({"decision": "propose", "proposal": {"summary": "Dinner Friday 19:00",
        "details": {"date": "2026-03-27", "time": "19:00"}, "alternatives": [], "reasoning": "overlap"},
        "actions": [{"action": "book_table", "requires_user_approval": true, "reversible": true,
                     "by": "agent:bob@a2acp.io"}]});
    assert!(parse_decision(&propose.to_string(), &t.view()).is_ok());
    // The schema names every variant.
    let schema = decision_schema().to_string();
    for tag in [
        "\"ask\"",
        "\"propose\"",
        "\"no_overlap\"",
        "\"escalate\"",
        "\"wait\"",
    ] {
        assert!(schema.contains(tag), "{tag}");
    }
}

#[test]
fn parse_decision_refuses_bad_answers() {
    let mut t = dinner_for_bob();
    t.asked = set(&["cuisine_preference"]);
    t.unavailable = set(&["budget_secret"]);
    let need = |f: &str| json!({"field": f, "reason": "because", "priority": "helpful"});
    let cases: Vec<(String, &str)> = vec![
        ("not json at all".into(), "no JSON"),
        ("{\"decision\": \"ask\", \"needs\": [}".into(), "not valid JSON"),
        (json!({"needs": []}).to_string(), "decision"),
        (json!({"decision": "dance"}).to_string(), "unknown decision"),
        (json!({"decision": "ask", "needs": []}).to_string(), "empty"),
        (json!({"decision": "ask", "needs": (0..6).map(|i| need(&format!("f{i}"))).collect::<Vec<_>>()}).to_string(), "more than 5"),
        (json!({"decision": "ask", "needs": [need("cuisine_preference")]}).to_string(), "already asked"),
        (json!({"decision": "ask", "needs": [need("budget_secret")]}).to_string(), "declined"),
        (json!({"decision": "ask", "needs": [need("time_windows")]}).to_string(), "already given"),
        (json!({"decision": "ask", "needs": [need("x"), need("x")]}).to_string(), "twice"),
        (json!({"decision": "ask", "needs": [need("bad field!")]}).to_string(), "not a field name"),
        (json!({"decision": "ask", "needs": [{"field": "x", "reason": " ", "priority": "helpful"}]}).to_string(), "reason"),
        (json!({"decision": "ask", "needs": [{"field": "x", "reason": "r", "priority": "urgent"}]}).to_string(), "needs[0].priority"),
        (json!({"decision": "propose", "proposal": {"summary": "", "details": {}, "alternatives": [], "reasoning": "r"}, "actions": []}).to_string(), "summary"),
        (json!({"decision": "propose", "proposal": {"summary": "s", "details": {"budget_secret": 1}, "alternatives": [], "reasoning": "r"}, "actions": []}).to_string(), "declined"),
        (json!({"decision": "propose", "proposal": {"summary": "s", "details": {}, "alternatives": [], "reasoning": "r"},
            "actions": [{"action": "book_table", "by": "agent:mallory@evil.io"}]}).to_string(), "neither"),
        (json!({"decision": "propose", "proposal": {"summary": "s", "details": {}, "alternatives": [], "reasoning": "r"},
            "actions": [{"action": "x", "by": "not an address"}]}).to_string(), "actions[0].by"),
        (json!({"decision": "no_overlap", "context": {"conflict": {"type": "no_overlap"}, "proposed_alternatives": []},
            "escalation": {"recommend": "surface_to_users", "reason": "r"}}).to_string(), "conflict.field"),
        (json!({"decision": "no_overlap", "context": {"conflict": {"type": "no_overlap", "field": "time_windows",
            "agent_a_values": [], "agent_b_values": [], "attempted_resolution": "x"},
            "proposed_alternatives": [{"option": "a"}], "extra": 1},
            "escalation": {"recommend": "surface_to_users", "reason": "r"}}).to_string(), "context.extra"),
        (json!({"decision": "escalate", "reason": "r", "summary": ""}).to_string(), "summary"),
        ("x".repeat(70_000), "limit"),
    ];
    for (text, expected) in cases {
        match parse_decision(&text, &t.view()) {
            Ok(d) => panic!("accepted {text:.200}: {d:?}"),
            Err(e) => assert!(
                e.contains(expected),
                "error for {text:.200} was {e:?}, expected {expected:?}"
            ),
        }
    }
}

#[test]
fn decide_is_deterministic() {
    let t = dinner_for_bob();
    let a = serde_json::to_string(&t.decide()).unwrap_or_default();
    let b = serde_json::to_string(&t.decide()).unwrap_or_default();
    assert_eq!(a, b);
}

// --- Property test: decide() never panics, whatever the contexts hold. ---

const KEYS: &[&str] = &[
    "time_windows",
    "availability",
    "proposed_date",
    "date",
    "proposed_dates",
    "timezone",
    "flexibility",
    "event_type",
    "duration",
    "party_size",
    "dietary",
    "budget_range",
    "budget",
    "location_preference",
    "venue",
    "transport_mode",
    "cuisine_preference",
    "wanted_fields",
    "conflict",
    "proposed_alternatives",
    "misc",
];

const STRINGS: &[&str] = &[
    "18:00-21:00",
    "18:30-21:00",
    "Wednesday 18:00-21:00",
    "2026-03-27 18:00-21:00",
    "18:00-21:00+01:00",
    "23:00-01:00",
    "00:00-24:00",
    "9999-12-31 23:00-23:59",
    "0000-01-01 00:00-01:00",
    "-262143-01-01 00:00-01:00",
    "2026-03-29 00:30-02:30",
    "12am-12pm",
    "sun 1pm - 3pm Pacific/Kiritimati",
    "18:00+14:00-21:00-12:00",
    "2026-03-27",
    "2026-02-30",
    "9999-12-31",
    "Europe/London",
    "America/New_York",
    "Pacific/Chatham",
    "+14:00",
    "-12:00",
    "UTC",
    "flexible",
    "not_flexible",
    "somewhat_flexible",
    "dinner",
    "lunch",
    "call",
    "PT2H",
    "PT0S",
    "P99999999999999D",
    "£20-40pp",
    "$25-50",
    "GBP 30",
    "up to €1,000.5",
    "none",
    "vegetarian",
    "",
    " ",
    "💥🍕",
    "é",
    "ab\u{0301}",
    "{",
    "-",
    "::",
    "99:99-99:99",
    "18:00-",
    "Monday",
];

#[derive(Debug, Clone)]
struct ArbThread {
    category: String,
    initiator: bool,
    mine: Context,
    theirs: Context,
    asked: BTreeSet<String>,
    unavailable: BTreeSet<String>,
    rejected: Vec<Rejected>,
    round_trips: u32,
}

fn pick<T: Clone>(g: &mut Gen, items: &[T]) -> T {
    // `items` is never empty here; fall back to the first item defensively.
    g.choose(items).cloned().unwrap_or_else(|| items[0].clone())
}

fn arb_value(g: &mut Gen, depth: u32) -> Value {
    let choice = u8::arbitrary(g) % if depth > 2 { 6 } else { 9 };
    match choice {
        0..=2 => Value::String(pick(g, STRINGS).to_string()),
        3 => Value::String(String::arbitrary(g)),
        4 => match u8::arbitrary(g) % 4 {
            0 => json!(i64::arbitrary(g)),
            1 => json!(f64::arbitrary(g)),
            2 => json!(u64::MAX),
            _ => json!(u8::arbitrary(g) % 6),
        },
        5 => match u8::arbitrary(g) % 3 {
            0 => Value::Null,
            1 => Value::Bool(bool::arbitrary(g)),
            _ => json!(-1),
        },
        6 | 7 => {
            let n = usize::from(u8::arbitrary(g) % 5);
            Value::Array((0..n).map(|_| arb_value(g, depth + 1)).collect())
        }
        _ => {
            let n = usize::from(u8::arbitrary(g) % 5);
            let keys = [
                "date", "start", "end", "timezone", "time", "option", "details", "field",
                "priority", "min", "max", "currency", "amount", "type",
            ];
            Value::Object(
                (0..n)
                    .map(|_| (pick(g, &keys).to_string(), arb_value(g, depth + 1)))
                    .collect(),
            )
        }
    }
}

fn arb_context(g: &mut Gen) -> Context {
    let n = usize::from(u8::arbitrary(g) % 12);
    let mut c = Context::new();
    for _ in 0..n {
        let key = pick(g, KEYS);
        let v = arb_value(g, 0);
        c.insert(key.to_string(), v);
    }
    c
}

fn arb_fields(g: &mut Gen) -> BTreeSet<String> {
    let n = usize::from(u8::arbitrary(g) % 6);
    (0..n).map(|_| pick(g, KEYS).to_string()).collect()
}

impl Arbitrary for ArbThread {
    fn arbitrary(g: &mut Gen) -> Self {
        let rejected = (0..usize::from(u8::arbitrary(g) % 3))
            .map(|_| Rejected {
                summary: String::arbitrary(g),
                details: obj(json!({
                    "date": pick(g, &["2026-03-27", "2026-04-01", "x"]),
                    "time": pick(g, &["19:00", "18:30", "18:00", "12:00", "zz"]),
                })),
                reason: String::arbitrary(g),
            })
            .collect();
        let mut mine = arb_context(g);
        let mut theirs = arb_context(g);
        let mut asked = arb_fields(g);
        if bool::arbitrary(g) {
            // Bias towards views that reach the slot search.
            for c in [&mut mine, &mut theirs] {
                let n = usize::from(u8::arbitrary(g) % 4) + 1;
                let w: Vec<Value> = (0..n).map(|_| json!(pick(g, STRINGS))).collect();
                c.insert("time_windows".into(), Value::Array(w));
                let date = pick(g, &["2026-03-27", "2026-03-29", "2026-10-25", "9999-12-31"]);
                c.insert("proposed_date".into(), json!(date));
            }
            asked.extend(set(&[
                "dietary",
                "transport_mode",
                "cuisine_preference",
                "location_preference",
                "budget_range",
                "timezone",
            ]));
        }
        ArbThread {
            category: pick(
                g,
                &["scheduling", "group_scheduling", "project_coordination", ""],
            )
            .to_string(),
            initiator: bool::arbitrary(g),
            mine,
            theirs,
            asked,
            unavailable: arb_fields(g),
            rejected,
            round_trips: u32::from(u8::arbitrary(g) % 10),
        }
    }
}

fn run_arb(a: ArbThread) -> bool {
    let mut t = Thread::new(
        &a.category,
        "Coordinate dinner on Friday",
        a.initiator,
        json!({}),
        json!({}),
    );
    t.mine = a.mine;
    t.theirs = a.theirs;
    t.asked = a.asked;
    t.unavailable = a.unavailable;
    t.rejected = a.rejected;
    t.round_trips = a.round_trips;
    let d = t.decide();
    // Decisions are a pure function of the view.
    assert_eq!(d, decide(&t.view()));
    let _ = initial_needs(&t.intent, &t.mine);
    // Arbitrary text never panics the answer parser.
    let text = serde_json::to_string(&t.theirs).unwrap_or_default();
    let _ = parse_decision(&text, &t.view());
    true
}

#[test]
fn decide_never_panics_on_generated_views() {
    QuickCheck::new()
        .tests(3000)
        .quickcheck(run_arb as fn(ArbThread) -> bool);
}

/// Structured scheduling views with plausible values: exercises the slot search itself.
#[test]
fn decide_never_panics_on_plausible_scheduling_views() {
    let windows = [
        json!(["18:00-21:00"]),
        json!(["Wednesday 18:00-21:00", "Friday 12:00-14:00"]),
        json!(["2026-03-29 00:30-03:30"]),
        json!(["2026-10-25 00:30-03:30"]),
        json!(["22:00-02:00"]),
        json!([{"date": "2026-03-27", "start": "18:00", "end": "21:00", "timezone": "Asia/Kathmandu"}]),
        json!(["00:00-24:00"]),
        json!(["9999-12-31 22:00-23:59"]),
        json!([]),
        json!("18:00-19:00"),
    ];
    let zones = [
        "Europe/London",
        "America/New_York",
        "Pacific/Kiritimati",
        "+05:45",
        "nowhere",
        "Etc/GMT+12",
    ];
    let flex = ["flexible", "somewhat_flexible", "not_flexible", "?"];
    let mut n = 0u32;
    for (i, wa) in windows.iter().enumerate() {
        for (j, wb) in windows.iter().enumerate() {
            for k in 0..4usize {
                let za = zones[(i + k) % zones.len()];
                let zb = zones[(j + 2 * k) % zones.len()];
                let event = ["dinner", "lunch", "call", "walk"][k];
                let their_date = ["2026-03-26", "2026-03-27"][k % 2];
                let mine = json!({"event_type": event,
                    "proposed_date": "2026-03-27", "time_windows": wa, "timezone": za,
                    "flexibility": {"date": flex[k], "time": flex[(k + 1) % 4]}});
                let theirs = json!({"time_windows": wb, "timezone": zb, "proposed_date": their_date,
                    "flexibility": flex[(k + 2) % 4], "transport_mode": "bus", "cuisine_preference": "any",
                    "dietary": "none", "location_preference": "town", "budget_range": "GBP 10-90"});
                for initiator in [true, false] {
                    let t = Thread::new(
                        "scheduling",
                        "Meet",
                        initiator,
                        mine.clone(),
                        theirs.clone(),
                    );
                    let d = t.decide();
                    if let Decision::NoOverlap { context, .. } = &d {
                        // Evaluating one's own alternatives from the other side never panics.
                        let mut th = t.mine.clone();
                        th.extend(context.clone());
                        let u = Thread::new(
                            "scheduling",
                            "Meet",
                            !initiator,
                            Value::Object(t.theirs.clone()),
                            Value::Object(th),
                        );
                        let _ = u.decide();
                    }
                    n += 1;
                }
            }
        }
    }
    assert!(n > 0);
}

// Relationship memory in the negotiator (§11.2): what is remembered is not asked, the
// usual declines are not asked unless required, the usual flexibility stands in — and
// nothing remembered is ever copied into a decision.

#[test]
fn remembered_values_are_not_asked_and_never_copied_into_the_proposal() {
    let mut t = dinner_for_bob();
    match t.decide() {
        Decision::Ask { needs } => assert_eq!(
            needs.iter().map(|n| n.field.as_str()).collect::<Vec<_>>(),
            ["transport_mode", "cuisine_preference"]
        ),
        other => panic!("without memory Bob asks back, got {other:#?}"),
    }
    t.remembered = obj(json!({
        "transport_mode": "CANARY-driving",
        "cuisine_preference": "CANARY-Italian",
    }));
    let d = t.decide();
    let (p, _) = expect_propose(d.clone());
    assert_eq!(p.details["time"], "19:00");
    let text = serde_json::to_string(&d).unwrap();
    assert!(!text.contains("CANARY"), "{text}");
}

#[test]
fn usually_declined_fields_are_not_asked_unless_required() {
    let mut t = dinner_for_bob();
    t.usually_declined = set(&["transport_mode", "cuisine_preference"]);
    expect_propose(t.decide());
    // A required field is asked even if the peer usually declines it.
    let mut alice = alice_context();
    alice.as_object_mut().unwrap().remove("time_windows");
    let mut t = Thread::new(
        "scheduling",
        "Coordinate dinner on Friday",
        false,
        bob_context(),
        alice,
    );
    t.usually_declined = set(&["transport_mode", "cuisine_preference", "time_windows"]);
    match t.decide() {
        Decision::Ask { needs } => assert_eq!(
            needs.iter().map(|n| n.field.as_str()).collect::<Vec<_>>(),
            ["time_windows"]
        ),
        other => panic!("expected to ask for time_windows, got {other:#?}"),
    }
}

#[test]
fn the_usual_flexibility_stands_in_for_an_unstated_one() {
    let bob = json!({
        "event_type": "dinner", "proposed_date": "2026-03-27", "timezone": "Europe/London",
        "time_windows": ["18:00-22:00"], "flexibility": {"time": "not_flexible"}
    });
    let alice = json!({"time_windows": ["17:00-19:30"], "transport_mode": "walking",
        "cuisine_preference": "thai", "dietary": "none", "location_preference": "Reading", "budget_range": "£30"});
    let mut t = Thread::new("scheduling", "Dinner", true, bob, alice);
    let without = t.decide();
    assert!(
        !matches!(&without, Decision::Propose { proposal, .. } if proposal.details["end"] == "20:00"),
        "{without:#?}"
    );
    // Alice usually says her time is flexible: her window stretches to 20:30.
    t.remembered = obj(json!({"flexibility": {"time": "high"}}));
    let (p, _) = expect_propose(t.decide());
    assert_eq!(p.details["time"], "18:00");
    assert_eq!(p.details["end"], "20:00");
    assert!(p.reasoning.contains("time flexibility"), "{}", p.reasoning);
    // What she states in the thread wins over what she usually says.
    t.theirs
        .insert("flexibility".into(), json!({"time": "not_flexible"}));
    let stated = t.decide();
    assert!(
        !matches!(&stated, Decision::Propose { proposal, .. } if proposal.details["end"] == "20:00"),
        "{stated:#?}"
    );
}
