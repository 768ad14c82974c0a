//! Attacks of a validly signed, hostile peer ([`HostilePeer`]) on an agent: nothing it
//! sends makes the agent act or confirm without its user, and its floods stay within the
//! agent's per-peer limits while an honest thread with another peer completes.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::agent::tests::support::HostileWorld;
use crate::agent::*;
use crate::harness::{dinner, Net};

fn world_with(limits: Limits) -> HostileWorld {
    HostileWorld::new(limits, true)
}

fn world() -> HostileWorld {
    world_with(Limits::default())
}

impl HostileWorld {
    /// Mallory opens a dinner thread with Alice; `needs` are asked in its first packet.
    fn m_open(&mut self, needs: Value) -> String {
        let thread = self.m.new_thread_id();
        self.m_send(
            &thread,
            "context",
            json!({
                "intent": {"category": "scheduling", "summary": "Dinner on Friday"},
                "context": {"time_windows": ["18:30-21:00"], "location_preference": "Reading"},
                "needs": needs,
            }),
        );
        thread
    }

    fn actions(&self) -> usize {
        self.net.nodes[self.alice].actions.len()
    }

    fn resolution_prompt(&self, thread: &str) -> Option<Prompt> {
        self.net.nodes[self.alice]
            .prompts
            .values()
            .find(|p| p.thread_id == thread && matches!(p.kind, PromptKind::Resolution { .. }))
            .cloned()
    }

    /// `confirmed` resolution_responses Alice sent Mallory so far.
    fn confirmations_sent(&self) -> usize {
        self.m
            .received
            .iter()
            .filter(|r| r.kind() == "resolution_response" && r.packet["status"] == "confirmed")
            .count()
    }
}

fn resolution(confirmers: Value, quorum: Option<Value>, alice: &Address) -> Value {
    let mut b = json!({
        "proposal": {
            "summary": "Dinner at Dopo, Friday 27 March, 19:00",
            "details": {"venue": "Dopo", "date": "2026-03-27", "time": "19:00"},
        },
        "requires_confirmation_from": confirmers,
        "actions_on_confirm": [
            {"action": "book_table", "service": "restaurant_booking", "reversible": true,
             "by": alice.as_str()},
            {"action": "add_calendar_event", "reversible": true},
        ],
        "confirmation_timeout": "PT24H",
        "on_timeout": "remind_then_expire",
    });
    if let Some(q) = quorum {
        b["quorum"] = q;
    }
    b
}

fn confirmed(resolution_id: &str) -> Value {
    json!({"resolution_id": resolution_id, "status": "confirmed"})
}

/// Every way the attack was tried: a quorum of 0 or 1 (or none, or absurd), the
/// confirmer list with Mallory and Alice in any order, duplicated, in other spellings,
/// with a third party.
fn attacks(w: &HostileWorld) -> Vec<(Value, Option<Value>)> {
    let m = w.m.address.as_str().to_string();
    let a = w.alice_addr().as_str().to_string();
    let shouting = a.to_uppercase().replace("AGENT:", "agent:");
    vec![
        (json!([m, a]), Some(json!(1))),
        (json!([m, a]), Some(json!(0))),
        (json!([a, m]), Some(json!(1))),
        (json!([m, a]), None),
        (json!([m, a, a, m]), Some(json!(2))),
        (json!([m, shouting]), Some(json!(1))),
        (json!([m, a, "agent:carol@a2acp.io"]), Some(json!(2))),
        (json!([m, a]), Some(json!(4_000_000_000u64))),
    ]
}

#[test]
fn a_peers_quorum_or_confirmer_list_never_replaces_the_users_confirmation() {
    for (n, (confirmers, quorum)) in attacks(&world()).into_iter().enumerate() {
        for alice_initiates in [false, true] {
            let mut w = world();
            let thread = if alice_initiates {
                w.alice_opens()
            } else {
                w.m_open(json!([]))
            };
            let alice = w.alice_addr();
            let res = w.m_send(
                &thread,
                "resolution",
                resolution(confirmers.clone(), quorum.clone(), &alice),
            );
            let case = format!(
                "attack {n} ({confirmers}, quorum {quorum:?}), alice initiates: {alice_initiates}"
            );
            assert_eq!(
                w.state(&thread),
                ThreadState::Proposed,
                "{case}\n{}",
                w.net.render(None)
            );
            let prompt = w.resolution_prompt(&thread).expect("the user is asked");
            // Mallory confirms, twice, and says its actions are done.
            w.m_send(&thread, "resolution_response", confirmed(&res));
            w.m_send(&thread, "resolution_response", confirmed(&res));
            w.m_send(
                &thread,
                "execution_report",
                json!({"resolution_id": res, "status": "completed"}),
            );
            assert_eq!(w.actions(), 0, "{case}\n{}", w.net.render(None));
            assert_eq!(w.state(&thread), ThreadState::Proposed, "{case}");
            assert_eq!(w.confirmations_sent(), 0, "{case}");
            // A restart keeps the open prompt (same id) and the state; another
            // confirmation after it changes nothing either.
            w.net.crash_and_restart_agent(w.alice, [99; 32]);
            assert_eq!(
                w.resolution_prompt(&thread).map(|p| p.id),
                Some(prompt.id),
                "{case}: the prompt is shown again after the restart"
            );
            w.net.connect(w.alice);
            w.m.pump(&mut w.net);
            w.m_send(&thread, "resolution_response", confirmed(&res));
            assert_eq!(w.actions(), 0, "{case}");
            assert_eq!(w.state(&thread), ThreadState::Proposed, "{case}");
            assert_eq!(w.confirmations_sent(), 0, "{case}");
            // The user confirms: now Alice confirms and acts (Mallory confirmed).
            w.net
                .answer_resolution(w.alice, prompt.id, ResolutionAnswer::Confirm);
            w.m.pump(&mut w.net);
            assert_eq!(w.confirmations_sent(), 1, "{case}");
            assert_eq!(w.state(&thread), ThreadState::Executing, "{case}");
            let done: Vec<String> = w.net.nodes[w.alice]
                .actions
                .iter()
                .map(|a| a.action.action.clone())
                .collect();
            assert_eq!(done, ["book_table"], "{case}: one at a time, hers first");
        }
    }
}

#[test]
fn a_peer_declining_for_the_user_or_answering_in_its_name_is_ignored() {
    let mut w = world();
    let thread = w.m_open(json!([]));
    let alice = w.alice_addr();
    let res = w.m_send(
        &thread,
        "resolution",
        resolution(json!([w.m.address.as_str(), alice.as_str()]), None, &alice),
    );
    // A confirmation whose header claims Alice as its sender does not match its envelope.
    let to = alice.clone();
    let mut p =
        w.m.packet(&w.net, &to, &thread, "resolution_response", confirmed(&res));
    p["from"] = json!(alice.as_str());
    w.m.send(&mut w.net, &to, &p).unwrap();
    w.m.pump(&mut w.net);
    w.m_send(&thread, "resolution_response", confirmed(&res));
    assert_eq!(w.actions(), 0);
    assert_eq!(w.state(&thread), ThreadState::Proposed);
    assert_eq!(w.confirmations_sent(), 0);
}

/// A resolution of Mallory's with no quorum on a thread Alice opened: her user's
/// confirmation alone is not enough while Mallory has not confirmed.
#[test]
fn the_users_confirmation_waits_for_the_other_participants() {
    let mut w = world();
    let thread = w.alice_opens();
    let alice = w.alice_addr();
    let res = w.m_send(
        &thread,
        "resolution",
        resolution(json!([alice.as_str(), w.m.address.as_str()]), None, &alice),
    );
    let prompt = w.resolution_prompt(&thread).unwrap();
    w.net
        .answer_resolution(w.alice, prompt.id, ResolutionAnswer::Confirm);
    w.m.pump(&mut w.net);
    assert_eq!(w.confirmations_sent(), 1);
    assert_eq!(w.actions(), 0);
    assert_eq!(w.state(&thread), ThreadState::Proposed);
    w.m_send(&thread, "resolution_response", confirmed(&res));
    assert_eq!(w.state(&thread), ThreadState::Executing);
    assert_eq!(w.actions(), 1);
}

// ===== limits per peer =====

impl HostileWorld {
    /// Threads Mallory started with Alice that are open.
    fn m_open_threads(&self) -> usize {
        self.net.nodes[self.alice]
            .agent
            .threads()
            .values()
            .filter(|t| t.peer == self.m.address && !t.initiator && !t.state.is_terminal())
            .count()
    }

    /// Alice's open prompts about Mallory's threads.
    fn m_prompts(&self) -> usize {
        self.net.nodes[self.alice]
            .prompts
            .values()
            .filter(|p| p.peer == self.m.address)
            .count()
    }

    /// `processing_error`s Mallory received, by code.
    fn errors(&self, code: &str) -> usize {
        self.m
            .received
            .iter()
            .filter(|r| r.kind() == "processing_error" && r.packet["error"] == code)
            .count()
    }

    /// Notifications Alice's user has about Mallory's refusals (one, kept up to date).
    fn refusal_notices(&self) -> Vec<Notification> {
        let key = format!("refused/{}", self.m.address);
        self.net.nodes[self.alice]
            .notifications
            .iter()
            .filter(|n| n.key.as_deref() == Some(key.as_str()))
            .cloned()
            .collect()
    }

    /// Records and bytes of Alice's store, and her threads.
    fn size(&self) -> (usize, usize, usize) {
        let n = &self.net.nodes[self.alice];
        let bytes = n.store.iter().map(|(k, v)| k.len() + v.len()).sum();
        (n.agent.threads().len(), n.store.len(), bytes)
    }

    /// An honest dinner between Alice and Bob, from start to COMPLETED on both sides.
    fn honest_dinner(&mut self) {
        let (a, b) = (self.alice, self.bob.expect("a world with Bob"));
        let to = self.net.address(b);
        self.net.command(
            a,
            Command::StartThread {
                to: to.clone(),
                intent: dinner::intent(),
                context: dinner::context(),
            },
        );
        self.net.settle();
        let id = self.net.nodes[a]
            .agent
            .threads()
            .values()
            .find(|t| t.peer == to)
            .map(|t| t.id.clone())
            .expect("dinner thread");
        let prompt_of = |net: &Net, i: usize| {
            net.nodes[i]
                .prompts
                .values()
                .find(|p| p.thread_id == id)
                .cloned()
        };
        let p = prompt_of(&self.net, a).expect("alice's consent prompt");
        let mut m = BTreeMap::new();
        m.insert("transport_mode".to_string(), FieldChoice::Share);
        self.net
            .answer_consent(a, p.id, ConsentAnswer::ShareSelected(m));
        self.net.settle();
        for i in [a, b] {
            let p = prompt_of(&self.net, i).expect("resolution prompt");
            self.net
                .answer_resolution(i, p.id, ResolutionAnswer::Confirm);
        }
        self.net.settle();
        for _ in 0..10 {
            for i in [a, b] {
                while self.net.nodes[i].actions.iter().any(|x| x.thread_id == id) {
                    self.net.finish_action(i, Ok(()));
                }
            }
            self.net.settle();
        }
        for i in [a, b] {
            assert_eq!(
                self.net.nodes[i].agent.thread(&id).unwrap().state,
                ThreadState::Completed,
                "{}",
                self.net.render(None)
            );
        }
    }
}

/// A `thread_fork` of `n` children, small enough to fit a packet for n = 1,000 (~60 KB).
fn fork(parent: &str, n: usize, tag: &str) -> Value {
    let children: Vec<Value> = (0..n)
        .map(|i| json!({"thread_id": format!("f{tag}{i}"), "intent": {"category": "s", "summary": "s"}}))
        .collect();
    json!({"parent_thread_id": parent, "new_threads": children, "shared_context": {}})
}

#[test]
fn a_fork_with_1000_children_creates_none_and_40_of_them_grow_nothing() {
    let mut w = world();
    let parent = w.m_open(json!([]));
    let before = w.size();
    for k in 0..40 {
        w.m_send(&parent, "thread_fork", fork(&parent, 1000, &k.to_string()));
    }
    let after = w.size();
    eprintln!(
        "40 forks of 1,000 children: threads {} -> {}, records {} -> {}, bytes {} -> {}",
        before.0, after.0, before.1, after.1, before.2, after.2
    );
    assert_eq!(after.0, before.0, "no child thread was created");
    assert!(after.1 <= before.1 + 2, "{before:?} -> {after:?}");
    assert!(after.2 < before.2 + 4096, "{before:?} -> {after:?}");
    assert_eq!(w.m_open_threads(), 1);
    assert!(w.errors("too_many_children") >= 1);
    assert!(
        w.errors("too_many_children") <= 10,
        "answers are rate-limited"
    );
    // One notification, brought up to date within a minute.
    w.net.run_for(Duration::from_secs(61));
    let notices = w.refusal_notices();
    assert_eq!(notices.len(), 1, "one notification, kept up to date");
    assert!(
        notices[0].text.contains("40000 thread(s)"),
        "{}",
        notices[0].text
    );
    assert_eq!(
        w.net.nodes[w.alice]
            .agent
            .refusals(&w.m.address)
            .fork_children,
        40_000
    );
    // A fork within the limits is taken whole.
    w.net.run_for(Duration::from_secs(61));
    w.m_send(&parent, "thread_fork", fork(&parent, 8, "ok"));
    assert_eq!(w.m_open_threads(), 9);
    w.honest_dinner();
}

#[test]
fn five_hundred_threads_from_one_peer_stop_at_the_limits() {
    let mut w = world();
    let before = w.size();
    for _ in 0..500 {
        w.m_open(json!([{"field": "dietary", "priority": "required", "reason": "menu"}]));
    }
    let after = w.size();
    eprintln!(
        "500 threads with a question: threads {} -> {}, records {} -> {}, bytes {} -> {}",
        before.0, after.0, before.1, after.1, before.2, after.2
    );
    let limits = Limits::default();
    assert_eq!(w.m_prompts(), limits.max_prompts_per_peer as usize);
    assert!(w.m_open_threads() <= limits.max_threads_per_peer as usize);
    let refused = w.net.nodes[w.alice].agent.refusals(&w.m.address);
    assert_eq!(refused.threads as usize + w.m_open_threads(), 500);
    assert!(w.errors("too_many_prompts") >= 1);
    assert_eq!(w.refusal_notices().len(), 1);
    // Threads without questions stop at the thread limit (or at the prompt limit, as
    // Alice's own proposals open prompts too).
    let mut w = world();
    for _ in 0..500 {
        w.m_open(json!([]));
    }
    let open = w.m_open_threads();
    assert!(open <= limits.max_threads_per_peer as usize);
    let refused = w.net.nodes[w.alice].agent.refusals(&w.m.address);
    assert_eq!(refused.threads as usize + open, 500);
    assert!(w.errors("too_many_threads") + w.errors("too_many_prompts") >= 1);
    w.net.run_for(Duration::from_secs(61));
    let notices = w.refusal_notices();
    assert_eq!(notices.len(), 1);
    assert!(
        notices[0]
            .text
            .contains(&format!("opened {} thread(s)", 500 - open)),
        "{}",
        notices[0].text
    );
    // Alice's user and Bob are not held up.
    w.honest_dinner();
}

#[test]
fn open_prompts_per_peer_are_capped_and_a_refused_packet_can_come_again() {
    let mut w = world();
    let threads: Vec<String> = (0..12).map(|_| w.m_open(json!([]))).collect();
    assert_eq!(w.m_open_threads(), 12);
    let ask = json!({"needs": [{"field": "dietary", "priority": "required", "reason": "menu"}]});
    let mut refused = Vec::new();
    for t in &threads {
        w.net.run_for(Duration::from_secs(7));
        let before = w.errors("too_many_prompts");
        let pid = w.m_send(t, "context_request", ask.clone());
        if w.errors("too_many_prompts") > before {
            refused.push((t.clone(), pid));
        }
    }
    assert_eq!(w.m_prompts(), 8);
    assert_eq!(refused.len(), 4);
    // A refused packet is not taken in: not in the history, not counted as received.
    let (t, pid) = &refused[0];
    let th = w.net.nodes[w.alice].agent.thread(t).unwrap();
    assert!(!th.received_ids.contains(pid));
    // The user answers one; the refused request, sent again, now opens a prompt.
    let p = w.net.nodes[w.alice]
        .prompts
        .values()
        .find(|p| p.peer == w.m.address)
        .unwrap()
        .id;
    w.net.answer_consent(w.alice, p, ConsentAnswer::DeclineAll);
    w.m.pump(&mut w.net);
    w.m_send(t, "context_request", ask);
    assert_eq!(w.m_prompts(), 8);
    assert!(w.net.nodes[w.alice]
        .prompts
        .values()
        .any(|p| &p.thread_id == t));
}

#[test]
fn a_thread_keeps_at_most_max_thread_bytes_of_packets() {
    let mut w = world();
    let t = w.m_open(json!([]));
    let big = "x".repeat(60_000);
    for _ in 0..20 {
        w.net.run_for(Duration::from_secs(7));
        w.m_send(&t, "context", json!({"context": {"notes": big}}));
    }
    let th = w.net.nodes[w.alice].agent.thread(&t).unwrap();
    let held: usize = th.history.iter().map(|h| h.json.len()).sum();
    let cap = Limits::default().max_thread_bytes;
    assert!(held <= cap, "{held} > {cap}");
    assert!(held > cap / 2);
    assert!(w.errors("thread_too_large") >= 1);
}

#[test]
fn ended_threads_of_a_peer_are_forgotten_beyond_the_limit() {
    let limits = Limits {
        max_ended_threads_per_peer: 4,
        ..Limits::default()
    };
    let mut w = world_with(limits);
    let mut ids = Vec::new();
    for _ in 0..12 {
        let t = w.m_open(json!([]));
        w.m_send(
            &t,
            "resolution_response",
            json!({"status": "declined", "reason_class": "user_declined"}),
        );
        assert_eq!(w.state(&t), ThreadState::Declined);
        ids.push(t);
    }
    let alice = &w.net.nodes[w.alice];
    let kept = alice
        .agent
        .threads()
        .values()
        .filter(|t| t.peer == w.m.address)
        .count();
    assert!(kept <= 5, "{kept} threads kept");
    // The forgotten ones left no record behind.
    let first = &ids[0];
    assert!(alice.agent.thread(first).is_none());
    assert!(!alice.store.keys().any(|k| k.contains(first.as_str())));
    // A restart reads the same.
    w.net.crash_and_restart_agent(w.alice, [98; 32]);
    let alice = &w.net.nodes[w.alice];
    let after = alice
        .agent
        .threads()
        .values()
        .filter(|t| t.peer == w.m.address)
        .count();
    assert_eq!(after, kept);
}

#[test]
fn a_flood_of_dropped_packets_writes_a_few_audit_lines() {
    let mut w = world();
    let t = w.m_open(json!([]));
    let to = w.alice_addr();
    let lines = |w: &HostileWorld| w.net.transcript.iter().filter(|l| l.who == "alice").count();
    let before = lines(&w);
    for _ in 0..1000 {
        w.m.send_bytes(&mut w.net, &to, &t, b"{\"not\": \"a packet\"}")
            .unwrap();
    }
    w.m.pump(&mut w.net);
    let after = lines(&w);
    assert!(w.net.nodes[w.alice].agent.is_flagged(&w.m.address));
    // 10 verbatim, then the 20th, 50th, 100th, 200th, 500th, 1000th; the flag notice.
    assert!(
        after - before <= 20,
        "{} lines for 1,000 dropped packets",
        after - before
    );
}
