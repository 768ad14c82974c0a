//! The space checks against a real space (the core's in-memory harness): a clean space
//! passes them; a replica tampered at one participant fails **space_convergence**, and an
//! update its replica admits (a `full_write` writer) but that writes a never_share field
//! fails **space_permission** — the checker does not rely on the agent's own admission.

use std::collections::{BTreeMap, BTreeSet};

use a2acp_core::agent::{Agent, AgentConfig, Command};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::harness::{dinner, Net};
use a2acp_core::packet::Context;
use a2acp_core::space::{FieldValue, SpaceParticipant, SpacePermission};
use a2acp_core::{Address, Timestamp};
use a2acp_sim::check::{Checker, End, Violation};
use serde_json::{json, Value};

/// Alice's space with Bob (write_own_fields) and Carol (full_write), a field each of
/// Alice and Carol written; (net, space id, configs, identity seeds).
fn trip() -> (Net, String, Vec<AgentConfig>, Vec<[u8; 32]>) {
    let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let configs = vec![
        dinner::alice("a2acp.io"),
        dinner::bob("a2acp.io"),
        AgentConfig::new(Address::parse("agent:carol@a2acp.io").unwrap()),
    ];
    let ids = vec![[1; 32], [2; 32], [3; 32]];
    for (k, c) in configs.iter().enumerate() {
        let i = net.add_agent(c.clone(), ids[k], [10 + k as u8; 32]);
        net.connect(i);
    }
    net.settle();
    let mut fields = Context::new();
    fields.insert("destination".into(), json!("Lisbon"));
    net.command(
        0,
        Command::CreateSpace {
            name: "Family trip".into(),
            participants: vec![
                SpaceParticipant {
                    address: net.address(1),
                    permission: SpacePermission::WriteOwnFields,
                },
                SpaceParticipant {
                    address: net.address(2),
                    permission: SpacePermission::FullWrite,
                },
            ],
            fields,
        },
    );
    net.settle();
    let id = net.nodes[0].agent.spaces().keys().next().cloned().unwrap();
    net.command(
        2,
        Command::SetSpaceField {
            space_id: id.clone(),
            field: "hotel".into(),
            value: FieldValue::Value {
                value: json!("Alfama Suites"),
            },
        },
    );
    net.settle();
    (net, id, configs, ids)
}

fn check(agents: Vec<&Agent>) -> Vec<Violation> {
    let names: Vec<String> = agents
        .iter()
        .map(|a| a.address().user().to_string())
        .collect();
    let addresses: Vec<Address> = agents.iter().map(|a| a.address().clone()).collect();
    let started = BTreeMap::new();
    let end = End {
        at: std::time::Duration::ZERO,
        names: &names,
        agents: agents.iter().map(|a| Some(*a)).collect(),
        prompted: vec![BTreeSet::new(); agents.len()],
        expect: &[],
        started: &started,
        addresses: &addresses,
        groups: BTreeMap::new(),
    };
    let mut c = Checker::new(Vec::new());
    c.finish(&end);
    c.violations
        .into_iter()
        .filter(|v| v.check.starts_with("space"))
        .collect()
}

/// Agent `i` restored from its records, with `edit` applied to the updates of its space
/// record.
fn tampered(
    net: &Net,
    id: &str,
    configs: &[AgentConfig],
    ids: &[[u8; 32]],
    i: usize,
    edit: impl Fn(&mut Vec<Value>),
) -> Agent {
    let mut records = net.nodes[i].store.clone();
    let key = format!("space/{id}");
    let mut rec: Value = serde_json::from_slice(&records[&key]).unwrap();
    let updates = rec["replica"]["updates"].as_array_mut().unwrap();
    edit(updates);
    records.insert(key, serde_json::to_vec(&rec).unwrap());
    Agent::restore(
        configs[i].clone(),
        IdentityKey::from_seed(ids[i]),
        [90 + i as u8; 32],
        records,
    )
    .expect("the tampered records restore")
}

#[test]
fn a_clean_space_passes_the_space_checks() {
    let (net, id, _, _) = trip();
    for n in &net.nodes {
        assert_eq!(n.agent.space(&id).unwrap().replica.len(), 2);
    }
    let v = check(net.nodes.iter().map(|n| &n.agent).collect());
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn a_replica_that_differs_fails_space_convergence() {
    let (net, id, configs, ids) = trip();
    let bob = tampered(&net, &id, &configs, &ids, 1, |u| {
        u[0]["value"] = json!({"kind": "value", "value": "Porto"});
    });
    let mut agents: Vec<&Agent> = net.nodes.iter().map(|n| &n.agent).collect();
    agents[1] = &bob;
    let v = check(agents);
    assert!(
        v.iter()
            .any(|x| x.check == "space_convergence" && x.detail.contains("bob")),
        "{v:?}"
    );
    assert!(v.iter().all(|x| x.check == "space_convergence"), "{v:?}");
}

#[test]
fn a_never_share_field_in_every_replica_fails_space_permission() {
    let (net, id, configs, ids) = trip();
    // Alice (full_write) "wrote" her health_info: every replica admits it, identically.
    let alice = net.address(0);
    let add = |u: &mut Vec<Value>| {
        u.push(json!({
            "update_id": "upd_forged0001", "writer": alice.as_str(), "field": "health_info",
            "version": 1, "timestamp": "2026-03-15T10:00:00Z",
            "value": {"kind": "value", "value": "migraines"}
        }));
    };
    let restored: Vec<Agent> = (0..3)
        .map(|i| tampered(&net, &id, &configs, &ids, i, add))
        .collect();
    let v = check(restored.iter().collect());
    assert!(
        v.iter().any(|x| x.check == "space_permission"
            && x.detail.contains("health_info")
            && x.detail.contains("never_share")),
        "{v:?}"
    );
    assert!(v.iter().all(|x| x.check == "space_permission"), "{v:?}");
}
