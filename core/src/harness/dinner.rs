//! The spec's running example (§4, §6.1, §7.3, §7.5, §8): Alice's agent coordinates a
//! Friday dinner with Bob's. One definition, used by the tests, the example, the benches,
//! the runtimes' demo and the simulator.

use std::collections::BTreeMap;

use serde_json::json;

use super::Net;
use crate::address::Address;
use crate::agent::{
    AgentConfig, ConsentAnswer, FieldChoice, PromptKind, RelationshipOverride, ResolutionAnswer,
};
use crate::packet::{Context, Intent};
use crate::time::Timestamp;

/// When the example starts: the timestamp of the spec's first packet.
pub const START: &str = "2026-03-21T14:30:00Z";

fn ctx(v: serde_json::Value) -> Context {
    v.as_object().cloned().unwrap_or_default()
}

// The fallback is a literal valid address: parsing it cannot fail.
#[allow(clippy::expect_used)]
fn addr(user: &str, domain: &str) -> Address {
    Address::new(user, domain)
        .unwrap_or_else(|_| Address::parse("agent:invalid@invalid").expect("static address"))
}

/// Alice: onboarding defaults (§14.1), a never_share health note that must never leave.
pub fn alice(domain: &str) -> AgentConfig {
    let mut c = AgentConfig::new(addr("alice", domain));
    c.profile = ctx(json!({
        "name": "Alice",
        "timezone": "Europe/London",
        "transport_mode": "driving",
        "cuisine_preference": "Italian",
        "health_info": "SECRET-asthma-inhaler",
    }));
    c
}

/// Bob: pre-authorised his availability, dietary needs and area for Alice (§7.2).
pub fn bob(domain: &str) -> AgentConfig {
    let mut c = AgentConfig::new(addr("bob", domain));
    c.profile = ctx(json!({
        "name": "Bob",
        "timezone": "Europe/London",
        "time_windows": ["18:30-21:00"],
        "dietary": ["none"],
        "location_preference": "anywhere within 20 min drive of Reading centre",
    }));
    let mut o = BTreeMap::new();
    o.insert(
        addr("alice", domain),
        RelationshipOverride {
            label: "close_friend".into(),
            promote_to_always_share: ["specific_availability", "dietary", "general_location_area"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ..Default::default()
        },
    );
    c.overrides = o;
    c
}

/// The §4 intent.
pub fn intent() -> Intent {
    Intent {
        category: "scheduling".into(),
        summary: "Coordinate dinner on Friday".into(),
        urgency: Some("low".into()),
        scope_change: None,
    }
}

/// The §4 context Alice gives when she starts the thread.
pub fn context() -> Context {
    ctx(json!({
        "event_type": "dinner",
        "proposed_date": "2026-03-27",
        "time_windows": ["18:00-21:00"],
        "location_preference": "central Reading",
        "party_size": 2,
        "dietary": ["vegetarian"],
        "budget_range": "£20-40pp",
        "flexibility": {"date": "somewhat_flexible", "time": "flexible", "location": "flexible"}
    }))
}

/// A network with Alice (index 0) and Bob (index 1) connected and authenticated.
pub fn net() -> (Net, usize, usize) {
    let start = Timestamp::parse_rfc3339(START).unwrap_or_default();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let a = net.add_agent(alice("a2acp.io"), [1; 32], [11; 32]);
    let b = net.add_agent(bob("a2acp.io"), [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    (net, a, b)
}

/// Alice starts the thread (§4) and the network settles.
pub fn start(net: &mut Net, a: usize, b: usize) {
    let to = net.address(b);
    net.command(
        a,
        crate::agent::Command::StartThread {
            to,
            intent: intent(),
            context: context(),
        },
    );
    net.settle();
}

/// The scripted users of the example: Alice shares how she travels and keeps her cuisine
/// preference (§7.5), everyone confirms (§8.2), every action succeeds. Runs until nobody
/// has anything left to answer.
pub fn scripted_users(net: &mut Net) {
    loop {
        let mut progressed = false;
        for i in 0..net.nodes.len() {
            if let Some(p) = net.prompt(i) {
                match p.kind {
                    PromptKind::Consent { .. } => {
                        let mut m = BTreeMap::new();
                        m.insert("transport_mode".to_string(), FieldChoice::Share);
                        m.insert("cuisine_preference".to_string(), FieldChoice::DontShare);
                        net.answer_consent(i, p.id, ConsentAnswer::ShareSelected(m));
                    }
                    PromptKind::Resolution { .. } => {
                        net.answer_resolution(i, p.id, ResolutionAnswer::Confirm)
                    }
                }
                progressed = true;
            }
            if net.finish_action(i, Ok(())).is_some() {
                progressed = true;
            }
            net.settle();
        }
        if !progressed {
            return;
        }
    }
}
