//! Runs the spec's dinner example (§4–§9) in memory — two agents and a relay on a virtual
//! clock, with a scripted user — and prints the transcript.
//!
//! `cargo run -p a2acp-core --example dinner`

use std::collections::BTreeMap;

use a2acp_core::agent::{
    AgentConfig, Command, ConsentAnswer, FieldChoice, PromptKind, RelationshipOverride,
    ResolutionAnswer,
};
use a2acp_core::harness::Net;
use a2acp_core::packet::{Context, Intent};
use a2acp_core::{Address, Timestamp};
use serde_json::json;

fn ctx(v: serde_json::Value) -> Context {
    v.as_object().cloned().unwrap_or_default()
}

fn main() {
    let start = Timestamp::parse_rfc3339("2026-03-21T14:30:00Z").unwrap_or_default();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let alice_addr = Address::parse("agent:alice@a2acp.io").expect("valid address");
    let bob_addr = Address::parse("agent:bob@a2acp.io").expect("valid address");

    let mut alice = AgentConfig::new(alice_addr.clone());
    alice.profile = ctx(
        json!({"timezone": "Europe/London", "transport_mode": "driving", "cuisine_preference": "Italian"}),
    );
    let mut bob = AgentConfig::new(bob_addr);
    bob.profile = ctx(json!({
        "timezone": "Europe/London",
        "time_windows": ["18:30-21:00"],
        "dietary": ["none"],
        "location_preference": "anywhere within 20 min drive of Reading centre",
    }));
    bob.overrides.insert(
        alice_addr,
        RelationshipOverride {
            label: "close_friend".into(),
            promote_to_always_share: ["specific_availability", "dietary", "general_location_area"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ..Default::default()
        },
    );
    let a = net.add_agent(alice, [1; 32], [11; 32]);
    let b = net.add_agent(bob, [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();

    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: Intent {
                category: "scheduling".into(),
                summary: "Coordinate dinner on Friday".into(),
                urgency: Some("low".into()),
                scope_change: None,
            },
            context: ctx(json!({
                "event_type": "dinner", "proposed_date": "2026-03-27", "time_windows": ["18:00-21:00"],
                "location_preference": "central Reading", "party_size": 2, "dietary": ["vegetarian"],
                "budget_range": "£20-40pp",
                "flexibility": {"date": "somewhat_flexible", "time": "flexible", "location": "flexible"}
            })),
        },
    );
    net.settle();
    // The scripted user: share how she travels, keep her cuisine preference, confirm.
    while let Some(p) = net.prompt(a).or_else(|| net.prompt(b)) {
        let who = if net.prompt(a).is_some_and(|x| x.id == p.id) {
            a
        } else {
            b
        };
        match p.kind {
            PromptKind::Consent { .. } => {
                let mut m = BTreeMap::new();
                m.insert("transport_mode".to_string(), FieldChoice::Share);
                net.answer_consent(who, p.id, ConsentAnswer::ShareSelected(m));
            }
            PromptKind::Resolution { .. } => {
                net.answer_resolution(who, p.id, ResolutionAnswer::Confirm)
            }
        }
        net.settle();
    }
    while net.finish_action(a, Ok(())).is_some() || net.finish_action(b, Ok(())).is_some() {
        net.settle();
    }
    net.settle();
    print!("{}", net.render(None));
}
