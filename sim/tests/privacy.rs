//! The group checks against a real game night (the core's in-memory harness): a clean run
//! passes them, and a coordinator history tampered to forward one participant's window to
//! another participant fails **privacy**, as a different completed window fails
//! **group_agreement**.

use std::collections::{BTreeMap, BTreeSet};

use a2acp_core::agent::{Agent, GroupConfirmation};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::harness::{game_night, Net};
use a2acp_core::Address;
use a2acp_sim::check::{Checker, End, Violation};
use serde_json::Value;

fn finished_game_night() -> Net {
    let mut net = game_night::net(false);
    game_night::start(&mut net, GroupConfirmation::All);
    game_night::scripted_users(&mut net, &BTreeMap::new());
    net
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
}

/// Alice's agent restored from her records, with `edit` applied to the JSON of the first
/// outgoing `kind` packet on her leg with `peer`.
fn tampered_alice(net: &Net, peer: &str, kind: &str, edit: impl Fn(&mut Value)) -> Agent {
    let alice = &net.nodes[0];
    let leg = alice
        .agent
        .threads()
        .values()
        .find(|t| t.peer.user() == peer)
        .expect("a leg with the peer")
        .id
        .clone();
    let mut records = alice.store.clone();
    let prefix = format!("history/{leg}/");
    let key = records
        .iter()
        .find(|(k, v)| {
            k.starts_with(&prefix)
                && serde_json::from_slice::<Value>(v)
                    .is_ok_and(|h| h["outgoing"] == Value::Bool(true) && h["kind"] == kind)
        })
        .map(|(k, _)| k.clone())
        .expect("an outgoing packet of that kind");
    let mut entry: Value = serde_json::from_slice(&records[&key]).unwrap();
    let mut packet: Value = serde_json::from_str(entry["json"].as_str().unwrap()).unwrap();
    edit(&mut packet);
    entry["json"] = Value::String(packet.to_string());
    records.insert(key, serde_json::to_vec(&entry).unwrap());
    Agent::restore(
        game_night::alice("a2acp.io"),
        IdentityKey::from_seed([40; 32]),
        [1; 32],
        records,
    )
    .expect("the tampered records restore")
}

#[test]
fn a_clean_game_night_passes_the_group_checks() {
    let net = finished_game_night();
    let v = check(net.nodes.iter().map(|n| &n.agent).collect());
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn a_participants_window_forwarded_to_another_fails_privacy() {
    let net = finished_game_night();
    // Bob shared "2026-03-27 15:00-19:00" with Alice; her resolution to Charlie now says it.
    let alice = tampered_alice(&net, "charlie", "resolution", |p| {
        p["proposal"]["reasoning"] = Value::from("Bob said 2026-03-27 15:00-19:00");
    });
    let mut agents: Vec<&Agent> = net.nodes.iter().map(|n| &n.agent).collect();
    agents[0] = &alice;
    let v = check(agents);
    assert!(
        v.iter().any(|x| x.check == "privacy"
            && x.detail.contains("agent:bob@a2acp.io")
            && x.detail.contains("to agent:charlie@a2acp.io")),
        "{v:?}"
    );
    // Charlie's own windows, told back to him, are no leak.
    let alice = tampered_alice(&net, "charlie", "resolution", |p| {
        p["proposal"]["reasoning"] = Value::from("you said 2026-03-28 10:00-12:00");
    });
    let mut agents: Vec<&Agent> = net.nodes.iter().map(|n| &n.agent).collect();
    agents[0] = &alice;
    let v = check(agents);
    assert!(!v.iter().any(|x| x.check == "privacy"), "{v:?}");
}

#[test]
fn a_leg_completed_on_another_window_fails_group_agreement() {
    let net = finished_game_night();
    // Diana's completed leg holds a resolution for another window than the group's.
    let mut records = net.nodes[3].store.clone();
    let tkey = records
        .keys()
        .find(|k| k.starts_with("thread/"))
        .cloned()
        .expect("diana's leg");
    let mut t: Value = serde_json::from_slice(&records[&tkey]).unwrap();
    let text = t
        .to_string()
        .replace("2026-03-28T19:00:00Z", "2026-03-28T18:00:00Z");
    assert_ne!(
        text,
        t.to_string(),
        "the leg's resolution names Saturday 19:00 UTC"
    );
    t = serde_json::from_str(&text).unwrap();
    records.insert(tkey, serde_json::to_vec(&t).unwrap());
    let diana = Agent::restore(
        game_night::diana("a2acp.io", false),
        IdentityKey::from_seed([43; 32]),
        [1; 32],
        records,
    )
    .expect("the tampered records restore");
    let mut agents: Vec<&Agent> = net.nodes.iter().map(|n| &n.agent).collect();
    agents[3] = &diana;
    let v = check(agents);
    assert!(
        v.iter()
            .any(|x| x.check == "group_agreement" && x.detail.contains("diana")),
        "{v:?}"
    );
}
