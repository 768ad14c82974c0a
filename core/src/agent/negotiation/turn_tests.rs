//! Nobody waits forever after values leave a thread (SPEC-NOTES "Retraction", "Usage
//! rules"): an escalation that crossed the proposer's own proposal is superseded by it; a
//! proposer whose proposal was declined takes its turn even when nothing is left to
//! propose; a value that expired is taken in again when the peer shares it anew.

use serde_json::{json, Value};

use crate::agent::tests::support::*;
use crate::agent::thread::Waiting;
use crate::agent::*;

/// Mallory's answer to Alice's dinner: her windows and the rest Alice's agent asks for.
fn mallory_answers(w: &mut HostileWorld, thread: &str, usage: Value) {
    w.m_send(
        thread,
        "context_response",
        json!({
            "context_provided": {
                "time_windows": ["18:30-21:00"],
                "timezone": "Europe/London",
                "dietary": ["none"],
                "location_preference": "central Reading",
                "transport_mode": "walking",
                "cuisine_preference": "Italian",
                "budget_range": "£20-40pp",
            },
            "permissions": {
                "shared_fields": ["budget_range", "cuisine_preference", "dietary",
                                  "location_preference", "time_windows", "timezone",
                                  "transport_mode"],
                "withheld_fields": [],
                "usage": usage,
            },
        }),
    );
}

/// The proposals Alice sent Mallory, oldest first.
fn proposals(w: &HostileWorld) -> Vec<Value> {
    w.m.received
        .iter()
        .filter(|r| r.kind() == "resolution")
        .map(|r| r.packet.clone())
        .collect()
}

fn decline(w: &mut HostileWorld, thread: &str) {
    w.m_send(
        thread,
        "resolution_response",
        json!({"status": "declined", "reason_class": "scheduling_conflict",
               "message": "Can we try another time?"}),
    );
}

fn waiting(w: &HostileWorld, thread: &str) -> Waiting {
    w.net.nodes[w.alice].agent.thread(thread).unwrap().waiting
}

#[test]
fn an_escalation_that_crossed_the_proposal_leaves_the_proposer_free_to_propose_again() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let thread = w.alice_opens();
    mallory_answers(&mut w, &thread, json!({}));
    assert_eq!(proposals(&w).len(), 1, "{}", w.net.render(None));
    // Mallory escalated before the proposal reached her, then declines it.
    w.m_send(
        &thread,
        "context",
        json!({"context": {}, "escalation": {"recommend": "surface_to_users",
               "reason": "No time is left that fits"}}),
    );
    let t = w.net.nodes[w.alice].agent.thread(&thread).unwrap();
    assert!(
        !t.escalated,
        "the proposal supersedes the escalation: {}",
        w.net.render(None)
    );
    decline(&mut w, &thread);
    // Alice's agent proposes the next option instead of waiting for the users.
    assert_eq!(proposals(&w).len(), 2, "{}", w.net.render(None));
    assert_eq!(w.state(&thread), ThreadState::Proposed);
}

#[test]
fn a_proposal_declined_after_its_values_were_taken_back_goes_to_the_users() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let thread = w.alice_opens();
    mallory_answers(&mut w, &thread, json!({}));
    assert_eq!(proposals(&w).len(), 1);
    w.m_send(
        &thread,
        "retraction",
        json!({"fields": ["time_windows", "location_preference"]}),
    );
    decline(&mut w, &thread);
    // Nothing left to propose from: the users decide; Alice's agent waits for no one.
    let t = w.net.nodes[w.alice].agent.thread(&thread).unwrap();
    assert!(t.escalated, "{}", w.net.render(None));
    assert_eq!(waiting(&w, &thread), Waiting::User);
    assert_eq!(proposals(&w).len(), 1);
}

#[test]
fn a_value_that_expired_is_taken_in_again_when_shared_anew() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let thread = w.alice_opens();
    let soon = |w: &HostileWorld, secs: u64| {
        w.net
            .now
            .add(std::time::Duration::from_secs(secs))
            .to_rfc3339()
    };
    // Mallory shares her dietary needs, to expire at `expires_at`.
    let share = |w: &mut HostileWorld, expires_at: String| {
        w.m_send(
            &thread,
            "context",
            json!({"context": {"dietary": ["none"]},
                   "permissions": {"shared_fields": ["dietary"], "withheld_fields": [],
                                   "usage": {"dietary": {"expires_at": expires_at}}}}),
        );
    };
    let first = soon(&w, 60);
    share(&mut w, first);
    let theirs = |w: &HostileWorld| {
        w.net.nodes[w.alice]
            .agent
            .thread(&thread)
            .unwrap()
            .theirs
            .contains_key("dietary")
    };
    assert!(theirs(&w));
    w.net.run_for(std::time::Duration::from_secs(120));
    assert!(!theirs(&w), "expired: deleted");
    // Shared again with a later expiry: taken in again.
    let later = soon(&w, 3_600);
    share(&mut w, later);
    assert!(theirs(&w), "{}", w.net.render(None));
}

#[test]
fn a_model_asked_before_values_were_taken_back_is_asked_again_without_them() {
    const PLACE: &str = "Mallory's Corner Bistro";
    let mut w = HostileWorld::with_llm();
    let thread = w.m.new_thread_id();
    w.m_send(
        &thread,
        "context",
        json!({
            "intent": {"category": "scheduling", "summary": "Dinner on Friday"},
            "context": {"time_windows": ["18:30-21:00"], "location_preference": PLACE,
                        "proposed_date": "2026-03-27", "timezone": "Europe/London"},
        }),
    );
    assert!(!w.net.nodes[w.alice].llm.is_empty(), "the model is asked");
    // Mallory takes back the place while the model thinks; the model proposes it.
    w.m_send(
        &thread,
        "retraction",
        json!({"fields": ["location_preference"]}),
    );
    let answer = json!({"decision": "propose",
        "proposal": {"summary": format!("Dinner at {PLACE}, Friday 19:00"),
                     "details": {"venue": PLACE, "date": "2026-03-27", "time": "19:00"},
                     "alternatives": [], "reasoning": "their place"},
        "actions": []});
    w.net.answer_llm(w.alice, Ok(answer.to_string()));
    w.m.pump(&mut w.net);
    // Nothing built on the taken-back place went out; the model is asked again, and
    // what it is shown no longer holds the place.
    for r in &w.m.received {
        assert!(!r.packet.to_string().contains(PLACE), "{}", r.packet);
    }
    let again = w.net.nodes[w.alice]
        .llm
        .front()
        .expect("the model is asked again");
    for l in &again.layers {
        assert!(
            !l.content.contains(PLACE),
            "the place in the {} layer",
            l.name
        );
    }
}
