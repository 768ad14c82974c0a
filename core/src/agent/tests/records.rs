//! The agent's persisted records: the history split out of the thread record, the old
//! format read, and a crash between two records of one step (swarm seed 133).

use super::*;

fn restore_alice(store: &BTreeMap<String, Vec<u8>>) -> Result<Agent, RestoreError> {
    Agent::restore(
        dinner::alice("a2acp.io"),
        IdentityKey::from_seed([1; 32]),
        [99; 32],
        store.clone(),
    )
}

/// The store as an agent from before the split wrote it: each thread record holds its
/// whole history, and there are no `history/` records.
fn old_format(store: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut hist: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for (k, v) in store {
        if let Some((id, _)) = k.strip_prefix("history/").and_then(parse_history) {
            hist.entry(id.to_string())
                .or_default()
                .push(serde_json::from_slice(v).unwrap());
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in out.iter_mut() {
        if let Some(id) = k.strip_prefix("thread/") {
            let mut t: serde_json::Value = serde_json::from_slice(v).unwrap();
            let m = t.as_object_mut().unwrap();
            m.remove("history_len");
            m.insert(
                "history".into(),
                serde_json::Value::Array(hist.remove(id).unwrap_or_default()),
            );
            *v = serde_json::to_vec(&t).unwrap();
        }
    }
    out
}

#[test]
fn a_step_stores_only_the_new_history_entries() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let t = net.nodes[a].agent.thread(&id).unwrap().clone();
    assert!(t.history.len() >= 3);
    let store = &net.nodes[a].store;
    let rec = String::from_utf8(store[&format!("thread/{id}")].clone()).unwrap();
    assert!(rec.contains("\"history\":[]"));
    assert!(rec.contains(&format!("\"history_len\":{}", t.history.len())));
    let hist: Vec<&String> = store.keys().filter(|k| k.starts_with("history/")).collect();
    assert_eq!(hist.len(), t.history.len());
    assert_eq!(hist[0], &format!("history/{id}/{:020}", 0));
    // The next step writes the thread record and its one new entry, nothing older.
    let before = net.nodes[a].agent.thread(&id).unwrap().history.len();
    let p = net.prompt(a).unwrap();
    net.nodes[a].agent.handle(
        net.now,
        Input::Command(Command::AnswerResolution {
            prompt_id: p.id,
            answer: ResolutionAnswer::Confirm,
        }),
    );
    let mut puts = Vec::new();
    while let Some(o) = net.nodes[a].agent.poll_output() {
        if let Output::Persist(PersistOp::Put { key, .. }) = o {
            puts.push(key);
        }
    }
    let after = net.nodes[a].agent.thread(&id).unwrap().history.len();
    let hist_puts: Vec<&String> = puts.iter().filter(|k| k.starts_with("history/")).collect();
    assert_eq!(hist_puts.len(), after - before, "{puts:?}");
    for (k, n) in hist_puts.iter().zip(before..) {
        assert_eq!(**k, format!("history/{id}/{n:020}"));
    }
}

#[test]
fn restore_reads_the_split_records_and_the_old_format() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let live = net.nodes[a].agent.threads().clone();
    let store = net.nodes[a].store.clone();
    // New format.
    let r = restore_alice(&store).unwrap();
    assert_eq!(r.threads(), &live);
    // Old format: same state; the next store of the thread moves its history out.
    let old = old_format(&store);
    assert!(old.keys().all(|k| !k.starts_with("history/")));
    assert!(String::from_utf8_lossy(&old[&format!("thread/{id}")]).contains("\"history\":[{"));
    let mut r = restore_alice(&old).unwrap();
    assert_eq!(r.threads(), &live);
    let mut migrated = old.clone();
    while let Some(o) = r.poll_output() {
        if let Output::Persist(op) = o {
            crate::persist::apply(&mut migrated, &op);
        }
    }
    let p = r
        .threads()
        .get(&id)
        .and_then(|t| t.stage.resolution())
        .and_then(|res| res.prompt_id)
        .unwrap();
    r.handle(
        net.now,
        Input::Command(Command::AnswerResolution {
            prompt_id: p,
            answer: ResolutionAnswer::Confirm,
        }),
    );
    while let Some(o) = r.poll_output() {
        if let Output::Persist(op) = o {
            crate::persist::apply(&mut migrated, &op);
        }
    }
    let n = r.thread(&id).unwrap().history.len();
    assert_eq!(
        migrated
            .keys()
            .filter(|k| k.starts_with(&format!("history/{id}/")))
            .count(),
        n
    );
    let again = restore_alice(&migrated).unwrap();
    assert_eq!(again.threads(), r.threads());
}

#[test]
fn uncommitted_history_records_are_ignored_and_missing_ones_are_corrupt() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let live = net.nodes[a].agent.threads().clone();
    let n = live[&id].history.len();
    // A crash after a step's history records but before its thread record.
    let mut store = net.nodes[a].store.clone();
    let extra = serde_json::to_vec(&live[&id].history[0]).unwrap();
    store.insert(format!("history/{id}/{n:020}"), extra);
    assert_eq!(restore_alice(&store).unwrap().threads(), &live);
    // A thread id with slashes in it does not confuse the keys.
    assert_eq!(parse_history(&format!("a/b/{:020}", 7)), Some(("a/b", 7)));
    assert_eq!(parse_history("a/b/7"), None);
    // A committed entry missing.
    store.remove(&format!("history/{id}/{:020}", 1));
    assert!(matches!(
        restore_alice(&store),
        Err(RestoreError::Corrupt { .. })
    ));
}

/// Runs `step` on agent `i` while it is offline, then, for every prefix of the records
/// that step stored, restores the agent from the store as it was before the step plus
/// that prefix (a crash in the middle of the step), re-connects it and lets `finish`
/// drive the world on. `check` gets the world and the prefix length.
fn every_crash_point(
    world: impl Fn() -> (Net, usize, usize, String),
    step: impl Fn(&mut Net, usize, &str),
    finish: impl Fn(&mut Net, usize, usize, &str),
    check: impl Fn(&Net, usize, usize, &str, usize),
) -> usize {
    let stored = |net: &mut Net, i: usize, id: &str| {
        net.disconnect(i);
        step(net, i, id);
        let mut ops = Vec::new();
        while let Some(o) = net.nodes[i].agent.poll_output() {
            if let Output::Persist(op) = o {
                ops.push(op);
            }
        }
        ops
    };
    let (mut net, a, _, id) = world();
    let n = stored(&mut net, a, &id).len();
    assert!(n >= 2, "the step stores {n} records");
    for k in 0..=n {
        let (mut net, a, b, id) = world();
        let ops = stored(&mut net, a, &id);
        for op in &ops[..k] {
            crate::persist::apply(&mut net.nodes[a].store, op);
        }
        net.crash_and_restart_agent(a, [99; 32]);
        net.connect(a);
        net.settle();
        finish(&mut net, a, b, &id);
        check(&net, a, b, &id, k);
    }
    n
}

/// Swarm seed 133: Alice crashed after storing her new thread and before storing the
/// outbox record of its first packet. Restored, her thread waited for a peer that never
/// heard of it. Now the outbox record goes first and the thread record commits it: at
/// every crash point, either both sides have the thread or neither has.
#[test]
fn a_thread_started_in_a_crash_exists_on_both_sides_or_on_neither() {
    let world = || {
        let (mut net, a, b) = net();
        // A first thread pins Bob's key: the next one goes through the outbox.
        start_dinner(&mut net, a, b, "low");
        (net, a, b, String::new())
    };
    let step = |net: &mut Net, a: usize, _: &str| {
        let to = net.address(1);
        let now = net.now;
        net.nodes[a].agent.handle(
            now,
            Input::Command(Command::StartThread {
                to,
                intent: dinner_intent("high"),
                context: dinner::context(),
            }),
        );
    };
    let n = every_crash_point(
        world,
        step,
        |_, _, _, _| {},
        |net, a, b, _, k| {
            let mine: BTreeSet<&String> = net.nodes[a].agent.threads().keys().collect();
            let theirs: BTreeSet<&String> = net.nodes[b].agent.threads().keys().collect();
            assert_eq!(
                mine,
                theirs,
                "crash after {k} records\n{}",
                net.render(None)
            );
        },
    );
    assert!(n >= 3);
}

/// The same for a step of a thread both sides have: Alice confirms the proposal and
/// crashes in the middle. At every crash point Bob gets her confirmation exactly once
/// (after she answers the prompt again if the crash took her answer with it), and both
/// sides end where they end without a crash.
#[test]
fn a_step_cut_by_a_crash_reaches_the_peer_exactly_once() {
    let world = || {
        let (mut net, a, b) = net();
        let id = to_proposed(&mut net, a, b);
        (net, a, b, id)
    };
    let step = |net: &mut Net, a: usize, _: &str| {
        let p = net.prompt(a).unwrap();
        net.nodes[a].prompts.remove(&p.id);
        let now = net.now;
        net.nodes[a].agent.handle(
            now,
            Input::Command(Command::AnswerResolution {
                prompt_id: p.id,
                answer: ResolutionAnswer::Confirm,
            }),
        );
    };
    let finish = |net: &mut Net, a: usize, b: usize, _: &str| {
        if let Some(p) = net.prompt(a) {
            net.answer_resolution(a, p.id, ResolutionAnswer::Confirm);
        }
        let pb = net.prompt(b).unwrap();
        net.answer_resolution(b, pb.id, ResolutionAnswer::Confirm);
        net.settle();
    };
    let (mut plain, a, b, id) = world();
    confirm_both(&mut plain, a, b);
    let expected = (state(&plain, a, &id), state(&plain, b, &id));
    let confirmations = |net: &Net, i: usize, id: &str| {
        net.nodes[i]
            .agent
            .thread(id)
            .unwrap()
            .history
            .iter()
            .filter(|h| !h.outgoing && h.kind == "resolution_response")
            .count()
    };
    assert_eq!(confirmations(&plain, b, &id), 1);
    every_crash_point(world, step, finish, |net, a, b, id, k| {
        let got = (state(net, a, id), state(net, b, id));
        assert_eq!(
            got,
            expected,
            "crash after {k} records\n{}",
            net.render(None)
        );
        assert_eq!(
            confirmations(net, b, id),
            1,
            "crash after {k} records\n{}",
            net.render(None)
        );
    });
}
