//! Relationship memory at work (§11): recording completed threads, persisting and
//! restoring them, contradictions told to the user, and the person's control (edit,
//! forget, block purges).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::agent::permissions::Tier;
use crate::agent::tests::support::*;
use crate::agent::*;
use crate::crypto::IdentityKey;
use crate::harness::{dinner, Net};

fn start() -> Timestamp {
    Timestamp::parse_rfc3339(dinner::START).unwrap()
}

fn net() -> (Net, usize, usize) {
    dinner_net()
}

fn memory_key(addr: &Address) -> String {
    format!("memory/{addr}")
}

fn count(net: &Net, i: usize, peer: &Address) -> u64 {
    net.nodes[i]
        .agent
        .memory()
        .relationship(peer.as_str(), net.now)
        .map_or(0, |r| r.interaction_count)
}

#[test]
fn a_completed_thread_is_recorded_persisted_and_restored() {
    let (mut net, a, b) = net();
    let bob = net.address(b);
    let alice = net.address(a);
    let id = complete_dinner(&mut net, a, b);
    let theirs = net.nodes[a].agent.thread(&id).unwrap().theirs.clone();
    assert!(!theirs.is_empty());
    // Alice's memory of Bob: one completed thread, its intent, what he shared.
    let r = net.nodes[a]
        .agent
        .memory()
        .relationship(bob.as_str(), net.now)
        .expect("memory of bob");
    assert_eq!(r.interaction_count, 1);
    assert_eq!(r.typical_intents, vec!["scheduling".to_string()]);
    // Bob's first proposal, confirmed as it was (§11.1 `preferred_resolution_style`).
    assert_eq!(
        r.preferred_resolution_style.as_deref(),
        Some("quick_decision")
    );
    assert_eq!(r.last_interaction, r.first_interaction);
    // What describes Bob is cached; what describes this one dinner (his windows) is
    // not (§11.3: the next dinner's other windows contradict nothing).
    for (field, v) in &theirs {
        let Some(e) = r.context_cache.get(field) else {
            assert!(!crate::memory::is_cached_field(field), "{field} not cached");
            continue;
        };
        assert_eq!(e.value, memory::value_text(v), "{field}");
        assert_eq!(e.confidence, crate::memory::Confidence::High);
    }
    assert!(theirs.contains_key("time_windows"));
    assert!(!r.context_cache.contains_key("time_windows"));
    assert!(r.context_cache.contains_key("dietary"));
    assert!(r.average_response_time.is_some());
    // One package, naming the thread, with the resolution as its decision.
    let pkgs: Vec<_> = net.nodes[a].agent.memory().packages().collect();
    assert_eq!(pkgs.len(), 1);
    let prov = &pkgs[0].body()["x-a2acp-provenance"];
    assert_eq!(prov["thread_id"], id.as_str());
    assert_eq!(
        pkgs[0].body()["decisions_made"].as_array().unwrap().len(),
        1
    );
    // Bob remembers Alice too (the fields she shared with him).
    assert_eq!(count(&net, b, &alice), 1);
    // Persisted as the peer's NDJSON, and restored from it.
    let rec = net.nodes[a]
        .store
        .get(&memory_key(&bob))
        .expect("memory record");
    assert_eq!(
        String::from_utf8_lossy(rec),
        net.nodes[a].agent.export_memory(Some(&bob)).unwrap()
    );
    let before = net.nodes[a].agent.export_memory(None).unwrap();
    net.crash_and_restart_agent(a, [5; 32]);
    assert_eq!(net.nodes[a].agent.export_memory(None).unwrap(), before);
    assert_eq!(count(&net, a, &bob), 1);
}

#[test]
fn the_second_thread_counts_and_a_contradiction_is_told() {
    let (mut net, a, b) = net();
    let bob = net.address(b);
    let id = complete_dinner(&mut net, a, b);
    let field = "dietary".to_string();
    let value = memory::value_text(&net.nodes[a].agent.thread(&id).unwrap().theirs[&field]);
    // Alice's user corrects what she remembers; three months on the value is stale, so
    // the next dinner asks Bob again (§11.3: re-verified, not assumed), and his real
    // value contradicts the edit.
    net.command(
        a,
        Command::EditMemory {
            peer: bob.clone(),
            field: field.clone(),
            value: "something else".into(),
        },
    );
    let cached = |net: &Net| {
        net.nodes[a]
            .agent
            .memory()
            .relationship(bob.as_str(), net.now)
            .unwrap()
            .context_cache[&field]
            .value
            .clone()
    };
    assert_eq!(cached(&net), "something else");
    net.run_for(crate::memory::STALE_AFTER + Duration::from_secs(86_400));
    net.nodes[a].notifications.clear();
    complete_dinner(&mut net, a, b);
    assert_eq!(count(&net, a, &bob), 2);
    assert_eq!(cached(&net), value);
    let changes: Vec<&MemoryChange> = net.nodes[a]
        .notifications
        .iter()
        .filter(|n| n.kind == NotifyKind::Memory)
        .filter_map(|n| n.memory_change.as_ref())
        .collect();
    assert_eq!(
        changes,
        vec![&MemoryChange {
            peer: bob.clone(),
            field: field.clone(),
            old: "something else".into(),
            new: value.clone(),
        }]
    );
    // History is kept: the edited value, then Bob's again.
    let series =
        net.nodes[a]
            .agent
            .memory()
            .series(bob.as_str(), bob.as_str(), &format!("cache.{field}"));
    let values: Vec<&str> = series.iter().map(|f| f.value.as_str()).collect();
    assert_eq!(
        values,
        vec![value.as_str(), "something else", value.as_str()]
    );
}

#[test]
fn forgetting_a_field_removes_it_and_its_history() {
    let (mut net, a, b) = net();
    let bob = net.address(b);
    let id = complete_dinner(&mut net, a, b);
    let field = net.nodes[a]
        .agent
        .thread(&id)
        .unwrap()
        .theirs
        .keys()
        .next()
        .cloned()
        .unwrap();
    net.command(
        a,
        Command::ForgetMemory {
            peer: bob.clone(),
            field: Some(field.clone()),
        },
    );
    let m = net.nodes[a].agent.memory();
    for pre in ["cache.", "shared.", "declined."] {
        assert!(m
            .series(bob.as_str(), bob.as_str(), &format!("{pre}{field}"))
            .is_empty());
    }
    assert_eq!(count(&net, a, &bob), 1, "the rest is kept");
    let rec = String::from_utf8_lossy(&net.nodes[a].store[&memory_key(&bob)]).into_owned();
    assert!(!rec.contains(&format!("\"cache.{field}\"")));
}

/// Every persisted record of node `i`, as text.
fn records_text(net: &Net, i: usize) -> BTreeMap<String, String> {
    net.nodes[i]
        .store
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
        .collect()
}

/// Blocking, or forgetting the whole relationship, leaves nothing of the peer's in any
/// persisted record: no memory record, no thread or history record holding what it
/// shared, no approval learnt about it.
#[test]
fn blocking_or_forgetting_a_contact_purges_everything_of_theirs() {
    for block in [true, false] {
        let (mut net, a, b) = net();
        let bob = net.address(b);
        let id = complete_dinner(&mut net, a, b);
        let theirs = net.nodes[a].agent.thread(&id).unwrap().theirs.clone();
        let mine = net.nodes[a].agent.config().profile.clone();
        // Values of Bob's that Alice's own profile does not also hold.
        let his: Vec<String> = theirs
            .values()
            .filter(|v| !mine.values().any(|m| m == *v))
            .map(|v| serde_json::to_string(v).unwrap())
            .collect();
        assert!(!his.is_empty());
        let found = |net: &Net| {
            records_text(net, a)
                .into_iter()
                .filter(|(_, v)| his.iter().any(|h| v.contains(h.trim_matches('"'))))
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        };
        assert!(!found(&net).is_empty(), "the test would see his values");
        let c = if block {
            Command::Block(bob.clone())
        } else {
            Command::ForgetMemory {
                peer: bob.clone(),
                field: None,
            }
        };
        net.command(a, c);
        net.settle();
        assert_eq!(found(&net), Vec::<String>::new(), "block {block}");
        assert!(!net.nodes[a].store.contains_key(&memory_key(&bob)));
        assert!(net.nodes[a].agent.memory().projects().is_empty());
        assert!(net.nodes[a].agent.thread(&id).is_none());
        // A restored agent remembers nothing either.
        let restored = Agent::restore(
            dinner::alice("a2acp.io"),
            IdentityKey::from_seed([1; 32]),
            [9; 32],
            net.nodes[a].store.clone(),
        )
        .unwrap();
        assert!(restored.memory().projects().is_empty());
        assert!(restored.relationship_json(&bob).is_none());
    }
}

#[test]
fn an_import_is_all_or_nothing_and_persisted_per_peer() {
    let (mut net, a, b) = net();
    let bob = net.address(b);
    complete_dinner(&mut net, a, b);
    let export = net.nodes[a].agent.export_memory(None).unwrap();
    // Into a fresh Alice.
    let mut net2 = Net::new("a2acp.io", start(), [8; 32]);
    let a2 = net2.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    let mut tampered = export.replacen("scheduling", "Scheduling", 1);
    tampered.push('\n');
    net2.command(a2, Command::ImportMemory { ndjson: tampered });
    assert!(net2.nodes[a2].agent.memory().projects().is_empty());
    assert!(notified(&net2, a2, NotifyKind::Info));
    net2.command(
        a2,
        Command::ImportMemory {
            ndjson: export.clone(),
        },
    );
    assert_eq!(net2.nodes[a2].agent.export_memory(None).unwrap(), export);
    assert_eq!(
        String::from_utf8_lossy(&net2.nodes[a2].store[&memory_key(&bob)]),
        export
    );
    // Memory under a project that is no agent's address is refused.
    let odd = export.replace(bob.as_str(), "not-an-address");
    let mut net3 = Net::new("a2acp.io", start(), [8; 32]);
    let a3 = net3.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    net3.command(a3, Command::ImportMemory { ndjson: odd });
    assert!(net3.nodes[a3].agent.memory().projects().is_empty());
}

#[test]
fn a_corrupt_memory_record_refuses_the_restore() {
    let (mut net, a, b) = net();
    let bob = net.address(b);
    complete_dinner(&mut net, a, b);
    let mut store = net.nodes[a].store.clone();
    let key = memory_key(&bob);
    let text = String::from_utf8_lossy(&store[&key]).replacen("scheduling", "x", 1);
    store.insert(key.clone(), text.into_bytes());
    let err = Agent::restore(
        dinner::alice("a2acp.io"),
        IdentityKey::from_seed([1; 32]),
        [9; 32],
        store,
    )
    .err()
    .expect("refused");
    assert!(matches!(err, RestoreError::Corrupt { key: k, .. } if k == key));
}

/// The open prompts of node `i` that ask for consent.
fn consent_prompts(net: &Net, i: usize) -> usize {
    net.nodes[i]
        .prompts
        .values()
        .filter(|p| matches!(p.kind, PromptKind::Consent { .. }))
        .count()
}

#[test]
fn the_second_dinner_takes_one_round_trip_and_no_prompt() {
    let (mut net, a, b) = net();
    let alice = net.address(a);
    complete_dinner(&mut net, a, b);
    // Bob's user corrects what his agent remembers of Alice's transport: a value only
    // memory holds, which must never reach a packet.
    net.command(
        b,
        Command::EditMemory {
            peer: alice.clone(),
            field: "transport_mode".into(),
            value: "CANARY-teleport".into(),
        },
    );
    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner::intent(),
            context: dinner::context(),
        },
    );
    net.settle();
    let id = net.nodes[a].agent.threads().keys().last().cloned().unwrap();
    // §11.2: Alice's context, then Bob's resolution; no consent prompt on either side.
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Proposed);
    assert_eq!(consent_prompts(&net, a) + consent_prompts(&net, b), 0);
    let t = net.nodes[a].agent.thread(&id).unwrap();
    let kinds: Vec<(bool, &str)> = t
        .history
        .iter()
        .map(|h| (h.outgoing, h.kind.as_str()))
        .take(2)
        .collect();
    assert_eq!(kinds, [(true, "context"), (false, "resolution")]);
    // Nothing only memory knew left Bob's agent.
    let bob_thread = net.nodes[b].agent.thread(&id).unwrap();
    for h in bob_thread.history.iter().filter(|h| h.outgoing) {
        assert!(!h.json.contains("CANARY"), "{}", h.json);
    }
}

#[test]
fn what_a_peer_usually_asks_for_is_front_loaded_within_the_tiers() {
    let (mut net, a, b) = net();
    let bob = net.address(b);
    complete_dinner(&mut net, a, b);
    let r = net.nodes[a]
        .agent
        .memory()
        .relationship(bob.as_str(), net.now)
        .unwrap();
    assert_eq!(r.usually_requests, ["cuisine_preference", "transport_mode"]);
    // Bob forgets what he knew of Alice, so he would ask again; Alice promotes her
    // transport mode for Bob: her next first packet carries it, and only it (cuisine
    // stays ask_first, so it is not front-loaded).
    let alice = net.address(a);
    net.command(
        b,
        Command::ForgetMemory {
            peer: alice,
            field: None,
        },
    );
    net.command(
        a,
        Command::SetPermission {
            field: "transport_mode".into(),
            tier: Tier::AlwaysShare,
            for_peer: Some(bob.clone()),
        },
    );
    net.command(
        a,
        Command::StartThread {
            to: bob,
            intent: dinner::intent(),
            context: dinner::context(),
        },
    );
    net.settle();
    let id = net.nodes[a].agent.threads().keys().last().cloned().unwrap();
    let t = net.nodes[a].agent.thread(&id).unwrap();
    let first: serde_json::Value = serde_json::from_str(&t.history[0].json).unwrap();
    assert_eq!(first["context"]["transport_mode"], "driving");
    assert!(first["context"].get("cuisine_preference").is_none());
}

#[test]
fn a_forgotten_thread_loses_its_record_before_its_history() {
    let (mut net, a, b) = net();
    let bob = net.address(b);
    let id = complete_dinner(&mut net, a, b);
    let now = net.now;
    let agent = &mut net.nodes[a].agent;
    agent.handle_command(
        now,
        Command::ForgetMemory {
            peer: bob,
            field: None,
        },
    );
    let mut deleted = Vec::new();
    while let Some(o) = agent.poll_output() {
        if let Output::Persist(crate::persist::PersistOp::Delete { key }) = o {
            deleted.push(key);
        }
    }
    let thread = deleted
        .iter()
        .position(|k| *k == format!("thread/{id}"))
        .expect("the thread record is deleted");
    let history: Vec<usize> = deleted
        .iter()
        .enumerate()
        .filter(|(_, k)| k.starts_with(&format!("history/{id}/")))
        .map(|(i, _)| i)
        .collect();
    assert!(!history.is_empty());
    // A crash anywhere in between leaves history without a thread (ignored on restore),
    // never a thread without its history (refused as corrupt).
    assert!(history.iter().all(|&i| i > thread), "{deleted:?}");
}

/// §11.1 `preferred_resolution_style` from a real thread: Alice answers Bob's proposal
/// with one of its alternatives, Bob proposes it, both confirm. Bob learns that Alice
/// deliberates; Alice learns that Bob confirmed what he was asked (his second proposal
/// was hers to ask for, so it does not count against him).
#[test]
fn how_each_side_reached_the_resolution_is_learned() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let (prompt, shown) = resolution_prompt(&net, a);
    assert!(!shown.alternatives.is_empty());
    net.answer_resolution(a, prompt.id, ResolutionAnswer::Alternative(0));
    net.settle();
    confirm_and_complete(&mut net, a, b, &id);
    let style = |i: usize, peer: &Address| {
        net.nodes[i]
            .agent
            .memory()
            .relationship(peer.as_str(), net.now)
            .and_then(|r| r.preferred_resolution_style)
    };
    assert_eq!(style(b, &net.address(a)).as_deref(), Some("deliberate"));
    assert_eq!(style(a, &net.address(b)).as_deref(), Some("quick_decision"));
}
