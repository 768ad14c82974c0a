//! Rules that travel with a value (SPEC-NOTES "Usage rules"): Alice's tiers bind her
//! transport mode to its purpose, give it an expiry and forbid passing it on; Bob's agent
//! receives the rule with the value, keeps it in memory beside it, lends the value to no
//! thread about something else, and deletes it at the expiry — from the thread, the
//! packets it keeps and memory, across a restart.

use std::time::Duration;

use serde_json::Value;

use crate::agent::permissions::UsagePolicy;
use crate::agent::tests::support::*;
use crate::agent::*;
use crate::harness::{dinner, Net};
use crate::packet::{Intent, UsageRule};

const FIELD: &str = "transport_mode";
const TWO_HOURS: u64 = 7_200;

/// Alice and Bob of the dinner; Alice's tiers set a rule on her transport mode.
fn ruled_net() -> (Net, usize, usize) {
    let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let mut alice = dinner::alice("a2acp.io");
    alice.permissions.usage.insert(
        FIELD.into(),
        UsagePolicy {
            purpose: true,
            expires_after: Some(TWO_HOURS),
            no_reshare: true,
        },
    );
    let a = net.add_agent(alice, [1; 32], [11; 32]);
    let b = net.add_agent(dinner::bob("a2acp.io"), [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    (net, a, b)
}

/// What Bob's memory caches of Alice.
fn cached(net: &Net, b: usize, a: usize) -> Option<String> {
    let alice = net.address(a);
    net.nodes[b]
        .agent
        .shared
        .memory
        .current(alice.as_str(), alice.as_str(), &format!("cache.{FIELD}"))
        .map(|f| f.value.clone())
}

fn expired(net: &Net, i: usize) -> Vec<Vec<String>> {
    net.nodes[i]
        .audit
        .iter()
        .filter_map(|r| match &r.event {
            AgentEvent::UsageExpired { fields, .. } => Some(fields.clone()),
            _ => None,
        })
        .collect()
}

fn intent(category: &str) -> Intent {
    Intent {
        category: category.into(),
        summary: "Something".into(),
        urgency: None,
        scope_change: None,
    }
}

#[test]
fn a_rule_travels_with_the_value_and_bob_deletes_it_at_the_expiry() {
    let (mut net, a, b) = ruled_net();
    let id = complete_dinner(&mut net, a, b);
    let alice = net.address(a);

    // The packet that shared it declares the rule.
    let carrying: Vec<Value> = ["context_request", "context_response", "context"]
        .iter()
        .flat_map(|k| sent(&net, a, &id, k))
        .filter(|p| p["context_provided"].get(FIELD).is_some() || p["context"].get(FIELD).is_some())
        .collect();
    assert!(!carrying.is_empty());
    for p in &carrying {
        let rule = &p["permissions"]["usage"][FIELD];
        assert_eq!(rule["purpose"], "scheduling", "{p}");
        assert_eq!(rule["no_reshare"], true, "{p}");
        assert!(rule["expires_at"].is_string(), "{p}");
    }

    // Alice's consent receipt of it records the rule it went with.
    let receipted: Vec<UsageRule> = net.nodes[a]
        .store
        .iter()
        .filter(|(k, _)| k.starts_with("receipt/"))
        .filter_map(|(_, v)| serde_json::from_slice::<Value>(v).ok())
        .flat_map(|r| {
            r["receipt"]["disclosed"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|d| d["field"] == FIELD)
        .filter_map(|d| serde_json::from_value(d["usage"].clone()).ok())
        .collect();
    assert_eq!(
        receipted.len(),
        1,
        "one receipt of the disclosure, with its rule"
    );
    assert_eq!(
        serde_json::to_value(&receipted[0]).unwrap(),
        carrying[0]["permissions"]["usage"][FIELD]
    );

    // Bob holds the value with its rule, in the thread and in memory.
    let t = net.nodes[b].agent.thread(&id).unwrap();
    assert_eq!(t.theirs[FIELD], "driving");
    let rule: &UsageRule = &t.usage[FIELD];
    assert!(rule.no_reshare && rule.purpose.as_deref() == Some("scheduling"));
    assert_eq!(cached(&net, b, a).as_deref(), Some("driving"));
    let shared = &net.nodes[b].agent.shared;
    assert_eq!(
        shared.remembered_rule(&alice, FIELD).as_ref(),
        Some(rule),
        "memory keeps the rule beside the value"
    );

    // Purpose: lent to a scheduling thread, not to one about anything else.
    let lent = shared.remembered(&alice, &intent("scheduling")).context;
    assert_eq!(lent.get(FIELD).and_then(Value::as_str), Some("driving"));
    let other = shared.remembered(&alice, &intent("work")).context;
    assert!(other.get(FIELD).is_none(), "{other:?}");

    // What the agent serves to other tools (the Agentic Protocol store) leaves it out;
    // the person's own export keeps it.
    let agent = &net.nodes[b].agent;
    assert!(agent.export_memory(None).unwrap().contains("driving"));
    let passable = agent.export_memory_passable(Some(&alice)).unwrap();
    assert!(!passable.contains("driving"), "{passable}");
    assert!(passable.contains("stats.interaction_count"));

    // A restart keeps the rule and its expiry.
    net.crash_and_restart_agent(b, [23; 32]);
    net.settle();
    assert!(net.nodes[b]
        .agent
        .thread(&id)
        .unwrap()
        .usage
        .contains_key(FIELD));
    assert!(expired(&net, b).is_empty());

    // At the expiry: gone from the thread, its kept packets and memory.
    net.run_for(Duration::from_secs(TWO_HOURS));
    let t = net.nodes[b].agent.thread(&id).unwrap();
    assert!(!t.theirs.contains_key(FIELD), "{:?}", t.theirs);
    assert!(!t.usage.contains_key(FIELD));
    assert!(t
        .history
        .iter()
        .all(|h| h.outgoing || !h.json.contains("driving")));
    assert_eq!(cached(&net, b, a), None);
    assert_eq!(
        net.nodes[b].agent.shared.remembered_rule(&alice, FIELD),
        None
    );
    assert_eq!(expired(&net, b), vec![vec![FIELD.to_string()]]);
    assert!(notices(&net, b, NotifyKind::Memory)
        .iter()
        .any(|n| n.contains("expired, as they asked")));
}

#[test]
fn memory_deletes_an_expired_value_when_its_thread_is_gone_even_after_a_restart() {
    let (mut net, a, b) = ruled_net();
    let id = complete_dinner(&mut net, a, b);
    assert!(net.nodes[b].agent.forget_thread(&id));
    net.crash_and_restart_agent(b, [23; 32]);
    net.settle();
    assert_eq!(cached(&net, b, a).as_deref(), Some("driving"));
    let due = net.nodes[b].agent.poll_timeout().unwrap();
    assert!(
        due <= Timestamp::parse_rfc3339(dinner::START)
            .unwrap()
            .add(Duration::from_secs(TWO_HOURS + 3_600)),
        "the agent wakes for the expiry: {due:?}"
    );
    net.run_for(Duration::from_secs(TWO_HOURS));
    assert_eq!(cached(&net, b, a), None);
    assert_eq!(expired(&net, b), vec![vec![FIELD.to_string()]]);
}

#[test]
fn a_value_that_arrives_expired_is_not_taken_in() {
    let (mut net, a, b) = ruled_net();
    net.nodes[a]
        .agent
        .shared
        .settings
        .tiers
        .usage
        .get_mut(FIELD)
        .unwrap()
        .expires_after = Some(0);
    let id = to_proposed(&mut net, a, b);
    let t = net.nodes[b].agent.thread(&id).unwrap();
    assert!(!t.theirs.contains_key(FIELD), "{:?}", t.theirs);
    assert!(t.usage.is_empty());
}

#[test]
fn a_value_without_a_rule_carries_none() {
    let (mut net, a, b) = dinner_net();
    let id = complete_dinner(&mut net, a, b);
    for k in ["context_request", "context_response", "context"] {
        for p in sent(&net, a, &id, k) {
            assert!(p["permissions"].get("usage").is_none(), "{p}");
        }
    }
    assert!(net.nodes[b].agent.thread(&id).unwrap().usage.is_empty());
}
