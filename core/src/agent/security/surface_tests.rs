//! What a hostile peer can do to what the user sees: peer text with escape sequences,
//! packets that would churn the number of an open prompt, and the burst of summaries
//! after a restart with many open threads.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::agent::*;
use crate::display;
use crate::harness::hostile::HostilePeer;
use crate::harness::{dinner, Net};
use crate::link::ErrorCode;

/// Every kind of thing a terminal or a viewer may act on: CSI, OSC with BEL, a C1 CSI,
/// a right-to-left override, an isolate, a zero-width space, CR LF (a fake next line),
/// DEL, a tag character.
const EVIL: &str = "\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m\u{202e}gpj.exe\u{2066}\u{200b}\r\n── Prompt #1 · FAKE\u{7f}\u{e0041}";

/// Alice (agent 0) alone on a net, and a validly signed hostile peer, Mallory.
fn alice_and_mallory() -> (Net, usize, HostilePeer) {
    let mut net = Net::new("a2acp.io", dinner_start(), [7; 32]);
    let a = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    net.connect(a);
    net.settle();
    let m = HostilePeer::join(&mut net, "mallory", [66; 32]).unwrap();
    (net, a, m)
}

/// Mallory sends a packet of type `kind` with `body`'s fields in `thread` to agent `a`;
/// returns what the user of `a` saw because of it: the prompts shown (their state after
/// the packet), the prompts withdrawn, the notifications and the audit lines.
fn hostile(
    net: &mut Net,
    a: usize,
    m: &mut HostilePeer,
    thread: &str,
    kind: &str,
    body: Value,
) -> Seen {
    let to = net.address(a);
    let shown = net.nodes[a].prompts_shown;
    let notes = net.nodes[a].notifications.len();
    let lines = net.transcript.len();
    let p = m.packet(net, &to, thread, kind, body);
    m.send(net, &to, &p).unwrap();
    m.pump(net);
    let name = net.nodes[a].name.clone();
    let mine = net.transcript[lines..].iter().filter(|l| l.who == name);
    Seen {
        shown: net.nodes[a].prompts_shown - shown,
        prompts: net.nodes[a].prompts.values().cloned().collect(),
        withdrawn: mine
            .clone()
            .filter(|l| l.text.starts_with("prompt #") && l.text.ends_with(" withdrawn"))
            .count(),
        notifications: net.nodes[a].notifications[notes..]
            .iter()
            .map(|n| n.text.clone())
            .collect(),
        audit: mine.map(|l| l.text.clone()).collect(),
    }
}

/// What the user saw because of one packet.
#[derive(Debug)]
struct Seen {
    /// Prompts shown (or shown again).
    shown: u64,
    /// The open prompts afterwards.
    prompts: Vec<Prompt>,
    /// Prompts withdrawn.
    withdrawn: usize,
    /// Notifications.
    notifications: Vec<String>,
    /// Transcript lines of the agent (its audit records, prompts, notifications).
    audit: Vec<String>,
}

impl Seen {
    /// Every string the user can see: prompts (every field), notifications, audit lines.
    fn strings(&self) -> Vec<String> {
        let mut v = self.notifications.clone();
        v.extend(self.audit.iter().cloned());
        for p in &self.prompts {
            strings(&serde_json::to_value(p).unwrap(), &mut v);
        }
        v
    }

    fn assert_clean(&self) {
        for s in self.strings() {
            assert!(
                display::is_clean(&s, display::MAX_RECORD),
                "raw peer text reached the user: {s:?}"
            );
        }
    }
}

fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                strings(x, out);
            }
        }
        _ => {}
    }
}

fn need(field: &str, reason: &str) -> Value {
    json!({"field": field, "reason": reason, "priority": "required"})
}

fn consent_fields(p: &Prompt) -> Vec<String> {
    match &p.kind {
        PromptKind::Consent { fields } => fields.iter().map(|f| f.field.clone()).collect(),
        PromptKind::Resolution { .. } => Vec::new(),
    }
}

#[test]
fn hostile_text_reaches_no_prompt_notification_or_audit_raw() {
    let (mut net, a, mut m) = alice_and_mallory();
    let long = format!("{EVIL}{}", "x".repeat(10_000));
    let t = m.new_thread_id();
    let mut seen = Vec::new();
    // A new thread: every displayed field of its intent and needs is hostile; one need's
    // field name carries an escape sequence.
    let s = hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "context",
        json!({
            "intent": {"category": EVIL, "summary": long, "urgency": EVIL},
            "needs": [need("transport_mode", EVIL), need("cuisine\u{1b}[31m", EVIL)],
        }),
    );
    let p = s.prompts[0].clone();
    // The field whose name cannot be shown as sent is declined, never prompted for.
    assert_eq!(consent_fields(&p), ["transport_mode"]);
    assert!(p.intent.summary.chars().count() <= display::MAX_SHORT);
    assert!(p.intent.summary.ends_with('…'));
    seen.push(s);
    // The scope grows: notified, and the open prompt asks for one more field.
    seen.push(hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "intent_update",
        json!({
            "updated_intent": {"category": EVIL, "summary": EVIL, "scope_change": "expanded"},
            "reason": EVIL,
            "additional_context_needed": [need("name", EVIL)],
        }),
    ));
    // An escalation, a processing error.
    seen.push(hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "context",
        json!({"escalation": {"recommend": "surface_to_users", "reason": EVIL, "suggested_prompt": EVIL}}),
    ));
    seen.push(hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "processing_error",
        json!({"error": EVIL, "message": long}),
    ));
    // A malformed packet whose parser message quotes the peer's text.
    seen.push(hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "context_request",
        json!({"needs": [{"field": "x", "reason": "r", "priority": EVIL}]}),
    ));
    // A resolution: every string of the proposal is hostile; then the peer declines.
    let (me, alice) = (m.address.to_string(), net.address(a).to_string());
    let to = net.address(a);
    let r = m.packet(
        &net,
        &to,
        &t,
        "resolution",
        json!({
            "proposal": {
                "summary": EVIL,
                "details": {EVIL: EVIL, "nested": [{"deep": EVIL}]},
                "alternatives": [{"summary": EVIL, "reason": EVIL, "details": {EVIL: 1}}],
                "reasoning": long,
            },
            "requires_confirmation_from": [me, alice],
            "actions_on_confirm": [],
        }),
    );
    let lines = net.transcript.len();
    m.send(&mut net, &to, &r).unwrap();
    m.pump(&mut net);
    assert!(
        net.nodes[a]
            .prompts
            .values()
            .any(|p| matches!(p.kind, PromptKind::Resolution { .. })),
        "{}",
        net.render(None)
    );
    let after = net.transcript[lines..]
        .iter()
        .map(|l| l.text.clone())
        .collect();
    seen.push(Seen {
        shown: 1,
        prompts: net.nodes[a].prompts.values().cloned().collect(),
        withdrawn: 0,
        notifications: Vec::new(),
        audit: after,
    });
    seen.push(hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "resolution_response",
        json!({"resolution_id": r["packet_id"], "status": "declined", "reason_class": EVIL, "message_to_other_agent": EVIL}),
    ));
    assert!(seen.iter().filter(|s| !s.notifications.is_empty()).count() >= 4);
    for s in &seen {
        s.assert_clean();
    }
    // Only what is shown is cleaned: the thread keeps what the peer sent.
    let th = net.nodes[a].agent.thread(&t).unwrap();
    assert_eq!(th.intent.summary, EVIL);
    assert!(th.history.iter().any(|h| h.json.contains("\\u001b")));
}

#[test]
fn an_open_consent_prompt_keeps_its_number_while_its_thread_waits() {
    let (mut net, a, mut m) = alice_and_mallory();
    let t = m.new_thread_id();
    let s = hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "context",
        json!({
            "intent": {"category": "scheduling", "summary": "Dinner"},
            "needs": [need("transport_mode", "distance"), need("cuisine_preference", "menu")],
        }),
    );
    let first = s.prompts[0].clone();
    let asked = consent_fields(&first);
    // The same needs again, five times: nothing changes on the user's screen.
    for _ in 0..5 {
        let needs: Vec<Value> = asked.iter().map(|f| need(f, "again")).collect();
        let s = hostile(
            &mut net,
            a,
            &mut m,
            &t,
            "context_request",
            json!({ "needs": needs }),
        );
        assert_eq!((s.shown, s.withdrawn), (0, 0), "{s:?}");
    }
    // One more field: the prompt is updated in place, under its number.
    let s = hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "context_request",
        json!({"needs": [need("name", "to book")]}),
    );
    assert_eq!((s.shown, s.withdrawn), (1, 0), "{s:?}");
    assert_eq!(s.prompts.len(), 1);
    assert_eq!(s.prompts[0].id, first.id);
    assert_eq!(consent_fields(&s.prompts[0]).len(), asked.len() + 1);
    // A restart shows it again under the same number, and packets after it keep it.
    net.crash_and_restart_agent(a, [5; 32]);
    assert_eq!(
        net.nodes[a].prompts.keys().copied().collect::<Vec<_>>(),
        [first.id]
    );
    net.connect(a);
    net.settle();
    m.pump(&mut net);
    let s = hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "context_request",
        json!({"needs": [need("dietary", "menu")]}),
    );
    assert_eq!(s.withdrawn, 0, "{s:?}");
    assert_eq!(
        s.prompts.iter().map(|p| p.id).collect::<Vec<_>>(),
        [first.id]
    );
    // The number answers it.
    let mut share = BTreeMap::new();
    share.insert("transport_mode".to_string(), FieldChoice::Share);
    net.answer_consent(a, first.id, ConsentAnswer::ShareSelected(share));
    net.settle();
    assert!(net.nodes[a].prompts.is_empty());
    let answered = format!("consent prompt {} answered", first.id);
    assert!(net.transcript.iter().any(|l| l.text == answered));
}

#[test]
fn a_resolution_prompt_keeps_its_number_unless_the_proposal_changes() {
    let (mut net, a, mut m) = alice_and_mallory();
    let t = m.new_thread_id();
    let (me, alice) = (m.address.to_string(), net.address(a).to_string());
    hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "context",
        json!({"intent": {"category": "scheduling", "summary": "Dinner"}}),
    );
    let resolution = |summary: &str| {
        json!({
            "proposal": {"summary": summary, "details": {"time": "19:00"}},
            "requires_confirmation_from": [me, alice],
            "actions_on_confirm": [{"action": "add_calendar_event", "by": alice}],
        })
    };
    let s = hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "resolution",
        resolution("Dinner at 19:00"),
    );
    let first = s.prompts[0].id;
    // The same resolution re-sent (another packet): the prompt is updated in place.
    for _ in 0..3 {
        let s = hostile(
            &mut net,
            a,
            &mut m,
            &t,
            "resolution",
            resolution("Dinner at 19:00"),
        );
        assert_eq!((s.shown, s.withdrawn), (1, 0), "{s:?}");
        assert_eq!(s.prompts.iter().map(|p| p.id).collect::<Vec<_>>(), [first]);
    }
    // A different proposal is another question: another number, the old one withdrawn,
    // so an answer to the old number cannot confirm it.
    let s = hostile(
        &mut net,
        a,
        &mut m,
        &t,
        "resolution",
        resolution("Dinner at 23:00"),
    );
    assert_eq!(s.withdrawn, 1, "{s:?}");
    let second = s.prompts[0].id;
    assert_ne!(second, first);
    net.command(
        a,
        Command::AnswerResolution {
            prompt_id: first,
            answer: ResolutionAnswer::Confirm,
        },
    );
    assert_eq!(
        net.nodes[a].agent.thread(&t).unwrap().state,
        ThreadState::Proposed
    );
    // A restart keeps the number.
    net.crash_and_restart_agent(a, [6; 32]);
    assert_eq!(net.prompt(a).map(|p| p.id), Some(second));
}

/// Frames agent `i` sent in each second of `secs` seconds of virtual time.
fn frames_per_second(net: &mut Net, i: usize, secs: u64) -> Vec<u64> {
    let mut v = Vec::new();
    for _ in 0..secs {
        let before = net.nodes[i].frames_sent;
        net.run_for(Duration::from_secs(1));
        v.push(net.nodes[i].frames_sent - before);
    }
    v
}

fn rate_limited(net: &Net) -> u64 {
    net.relay
        .stats()
        .refusals
        .get(&ErrorCode::RateLimited)
        .copied()
        .unwrap_or(0)
}

#[test]
fn summaries_after_a_restart_with_2000_open_threads_are_paced_under_the_relays_rate() {
    // Bob lets Alice keep 2,000 threads open (the default limits per peer are far lower).
    let mut net = Net::new("a2acp.io", dinner_start(), [7; 32]);
    let a = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    let mut bob = dinner::bob("a2acp.io");
    bob.limits.max_threads_per_peer = 4_000;
    bob.limits.max_prompts_per_peer = 4_000;
    let b = net.add_agent(bob, [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    let to = net.address(b);
    for _ in 0..2000 {
        net.command(
            a,
            Command::StartThread {
                to: to.clone(),
                intent: dinner::intent(),
                context: dinner::context(),
            },
        );
    }
    // Opening them is paced too: never refused.
    net.run_for(Duration::from_secs(600));
    assert_eq!(rate_limited(&net), 0);
    let open = net.nodes[a]
        .agent
        .threads()
        .values()
        .filter(|t| !t.state.is_terminal() && t.session.peer_eph().is_some())
        .count();
    assert_eq!(open, 2000, "{}", net.render(Some("relay")));
    assert_eq!(net.nodes[a].agent.outbox_len(), 0);
    // Alice restarts: every open thread owes the peer a summary (§13.1).
    net.crash_and_restart_agent(a, [3; 32]);
    net.run_for(Duration::from_secs(5));
    let sent_before = net.nodes[a].frames_sent;
    net.connect(a);
    let per_second = frames_per_second(&mut net, a, 120);
    println!(
        "after the restart: {} rate_limited; frames per second: {per_second:?}",
        rate_limited(&net)
    );
    let limits = Limits::default();
    let cfg = net.relay.config().clone();
    // Never more than the burst in the first second, never more than the rate after.
    assert!(
        per_second[0] <= u64::from(limits.send_burst + limits.send_rate_per_sec) + 5,
        "{per_second:?}"
    );
    for (s, n) in per_second.iter().enumerate().skip(1) {
        assert!(
            *n <= u64::from(limits.send_rate_per_sec) + 5,
            "second {s}: {n} frames ({per_second:?})"
        );
    }
    assert!(limits.send_rate_per_sec < cfg.rate_per_sec && limits.send_burst < cfg.rate_burst);
    // Nothing refused, and every summary went out and was accepted.
    assert_eq!(rate_limited(&net), 0, "{per_second:?}");
    assert_eq!(net.nodes[a].agent.outbox_len(), 0, "{per_second:?}");
    let sent = net.nodes[a].frames_sent - sent_before;
    assert!(sent >= 2000, "{sent} frames");
    let summaries = net.nodes[a]
        .agent
        .threads()
        .values()
        .filter(|t| {
            t.history
                .iter()
                .any(|h| h.outgoing && h.kind == "thread_state")
        })
        .count();
    assert_eq!(summaries, 2000);
    // The agent is idle once they are out: no timer left for the pacer.
    assert!(net.nodes[a]
        .agent
        .poll_timeout()
        .is_none_or(|t| t > net.now.add(Duration::from_secs(60))));
}

#[test]
fn a_rate_limited_refusal_slows_the_agent_down_and_nothing_is_lost() {
    // An agent that believes the relay allows far more than it does. The relay's frame
    // budget per connection (which closes a connection that keeps sending past it, relay
    // link §6) is lifted here: this is about the address's bucket and its `rate_limited`.
    let relay = crate::relay::RelayConfig {
        domain: "a2acp.io".into(),
        conn_rate_per_sec: 100_000,
        conn_rate_burst: 100_000,
        ..crate::relay::RelayConfig::default()
    };
    let mut net = Net::with_relay_config(relay, dinner_start(), [7; 32]);
    let mut alice = dinner::alice("a2acp.io");
    alice.limits.send_rate_per_sec = 500;
    alice.limits.send_burst = 1000;
    let a = net.add_agent(alice, [1; 32], [11; 32]);
    let mut bob = dinner::bob("a2acp.io");
    bob.limits.max_threads_per_peer = 4_000;
    bob.limits.max_prompts_per_peer = 4_000;
    let b = net.add_agent(bob, [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    let to = net.address(b);
    for _ in 0..600 {
        net.command(
            a,
            Command::StartThread {
                to: to.clone(),
                intent: dinner::intent(),
                context: dinner::context(),
            },
        );
    }
    let mut per_second = frames_per_second(&mut net, a, 1);
    let first = rate_limited(&net);
    per_second.extend(frames_per_second(&mut net, a, 299));
    let refused = rate_limited(&net);
    println!(
        "refused: {first} in the first second, {refused} in all; frames per second: {per_second:?}"
    );
    // The relay refused the part of the first burst over its own (the agent's idea of
    // the relay was wrong)…
    assert!(first >= 600 - 200, "{first}");
    // …and the agent learned from it: it slowed down under the relay's rate instead of
    // re-sending at once, so hardly anything more was refused, and no second after the
    // first came near the agent's configured rate (acks, not paced, included).
    assert!(
        refused - first <= 20,
        "{first} then {refused} refusals; frames per second {per_second:?}"
    );
    assert!(
        per_second[1..].iter().all(|n| *n < 120),
        "frames per second {per_second:?}"
    );
    // Nothing was lost: every first packet was accepted and answered.
    assert_eq!(net.nodes[a].agent.outbox_len(), 0, "{per_second:?}");
    assert_eq!(
        net.nodes[b].agent.threads().len(),
        600,
        "frames per second {per_second:?}"
    );
}

fn dinner_start() -> Timestamp {
    Timestamp::parse_rfc3339(dinner::START).unwrap()
}

#[test]
fn prompts_in_threads_the_user_started_are_not_limited_per_peer() {
    // Alice starts more threads with Bob than her limit of open prompts per peer; Bob asks
    // a question in each. Every question reaches Alice: the limit guards against threads a
    // peer opens, not against answers in threads this user started.
    let (mut net, a, b) = dinner::net();
    let limit = net.nodes[a].agent.config().limits.max_prompts_per_peer as usize;
    let to = net.address(b);
    for _ in 0..limit + 4 {
        net.command(
            a,
            Command::StartThread {
                to: to.clone(),
                intent: dinner::intent(),
                context: dinner::context(),
            },
        );
    }
    net.run_for(Duration::from_secs(60));
    let refused = net.nodes[a].agent.refusals(&to);
    assert_eq!(refused.packets + refused.threads, 0, "{refused:?}");
    assert_eq!(net.nodes[a].prompts.len(), limit + 4);
}
