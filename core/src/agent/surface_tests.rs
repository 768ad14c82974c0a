//! What a hostile peer can do to what the user sees: peer text with escape sequences,
//! packets that would churn the number of an open prompt, and the burst of summaries
//! after a restart with many open threads.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::*;
use crate::crypto::{Direction, IdentityKey, PublicKey, ThreadSession};
use crate::display;
use crate::harness::{dinner, Net};
use crate::relay::frame::{ErrorCode, RelayFrame};

/// Every kind of thing a terminal or a viewer may act on: CSI, OSC with BEL, a C1 CSI,
/// a right-to-left override, an isolate, a zero-width space, CR LF (a fake next line),
/// DEL, a tag character.
const EVIL: &str = "\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m\u{202e}gpj.exe\u{2066}\u{200b}\r\n── Prompt #1 · FAKE\u{7f}\u{e0041}";

/// A validly signed peer (Bob's identity) that sends whatever plaintext it likes to
/// Alice, in her threads with Bob (with a copy of Bob's session) or in new ones.
struct Hostile {
    identity: IdentityKey,
    me: Address,
    victim: Address,
    victim_key: PublicKey,
    sessions: BTreeMap<String, (ThreadSession, Direction)>,
    n: u64,
}

impl Hostile {
    fn new(net: &Net, a: usize, b: usize) -> Hostile {
        Hostile {
            identity: IdentityKey::from_seed([2; 32]),
            me: net.address(b),
            victim: net.address(a),
            victim_key: net.nodes[a].agent.public_key(),
            sessions: BTreeMap::new(),
            n: 0,
        }
    }

    /// Continues thread `id` of Bob's agent `b` from here on (Bob's agent must stay
    /// silent in it afterwards).
    fn take_over(&mut self, net: &Net, b: usize, id: &str) {
        let s = net.nodes[b].agent.thread(id).unwrap().session.clone();
        self.sessions
            .insert(id.to_string(), (s, Direction::FromResponder));
    }

    /// The plaintext of a packet of type `kind` with `body`'s fields.
    fn packet(&mut self, thread: &str, kind: &str, body: Value) -> Vec<u8> {
        self.n += 1;
        let mut m = json!({
            "protocol": "a2acp/0.2",
            "packet_id": format!("pkt_hostile_{}", self.n),
            "thread_id": thread,
            "from": self.me.as_str(),
            "to": self.victim.as_str(),
            "timestamp": "2026-03-21T14:30:00Z",
            "type": kind,
        });
        for (k, v) in body.as_object().cloned().unwrap_or_default() {
            m[k] = v;
        }
        serde_json::to_vec(&m).unwrap()
    }

    /// Seals `plain` in `thread` (opening it if new) and hands it to Alice's agent as the
    /// relay would; returns everything the agent output, executed on the net's records.
    fn send_plain(&mut self, net: &mut Net, a: usize, thread: &str, plain: &[u8]) -> Vec<Output> {
        let n = self.n;
        let (session, dir) = self.sessions.entry(thread.to_string()).or_insert_with(|| {
            let mut seed = [9u8; 32];
            seed[..8].copy_from_slice(&n.to_le_bytes());
            (ThreadSession::new(seed), Direction::FromInitiator)
        });
        let env = session
            .seal(
                &self.identity,
                &self.me,
                &self.victim,
                &self.victim_key,
                thread,
                *dir,
                plain,
            )
            .unwrap();
        let frame = RelayFrame::Deliver {
            id: 10_000 + self.n,
            env,
        }
        .to_bytes();
        net.nodes[a].agent.handle(net.now, Input::Bytes(frame));
        drain(net, a)
    }

    fn send(
        &mut self,
        net: &mut Net,
        a: usize,
        thread: &str,
        kind: &str,
        body: Value,
    ) -> Vec<Output> {
        let plain = self.packet(thread, kind, body);
        self.send_plain(net, a, thread, &plain)
    }
}

/// Drains agent `a`'s outputs, applying persists, prompts and notifications to the node
/// (frames to the relay are dropped: these tests look at what the user sees).
fn drain(net: &mut Net, a: usize) -> Vec<Output> {
    let mut v = Vec::new();
    while let Some(o) = net.nodes[a].agent.poll_output() {
        match &o {
            Output::Persist(op) => crate::persist::apply(&mut net.nodes[a].store, op),
            Output::Prompt(p) => {
                net.nodes[a].prompts.insert(p.id, p.clone());
            }
            Output::ClosePrompt(id) => {
                net.nodes[a].prompts.remove(id);
            }
            Output::Notify(n) => net.nodes[a].notifications.push(n.clone()),
            _ => {}
        }
        v.push(o);
    }
    v
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

/// Every string the user can see in `outs`: prompts (every field), notifications,
/// audit records.
fn shown_strings(outs: &[Output]) -> Vec<String> {
    let mut v = Vec::new();
    for o in outs {
        match o {
            Output::Prompt(p) => strings(&serde_json::to_value(p).unwrap(), &mut v),
            Output::Notify(n) => v.push(n.text.clone()),
            Output::Audit(a) => v.push(a.event.clone()),
            _ => {}
        }
    }
    v
}

fn assert_clean(outs: &[Output]) {
    for s in shown_strings(outs) {
        assert!(
            display::is_clean(&s, display::MAX_RECORD),
            "raw peer text reached an output: {s:?}"
        );
    }
}

fn prompts(outs: &[Output]) -> Vec<&Prompt> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Prompt(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn closed(outs: &[Output]) -> Vec<u64> {
    outs.iter()
        .filter_map(|o| match o {
            Output::ClosePrompt(id) => Some(*id),
            _ => None,
        })
        .collect()
}

fn need(field: &str, reason: &str) -> Value {
    json!({"field": field, "reason": reason, "priority": "required"})
}

#[test]
fn hostile_text_reaches_no_prompt_notification_or_audit_raw() {
    let (mut net, a, b) = dinner::net();
    let mut h = Hostile::new(&net, a, b);
    let long = format!("{EVIL}{}", "x".repeat(10_000));
    let mut all = Vec::new();
    let t = "thr_hostile";
    // A new thread: every displayed field of its intent and needs is hostile; one need's
    // field name carries an escape sequence.
    let outs = h.send(
        &mut net,
        a,
        t,
        "context",
        json!({
            "intent": {"category": EVIL, "summary": long, "urgency": EVIL},
            "needs": [need("transport_mode", EVIL), need("cuisine\u{1b}[31m", EVIL)],
        }),
    );
    let p = prompts(&outs)[0].clone();
    let PromptKind::Consent { fields } = &p.kind else {
        panic!("{p:?}")
    };
    // The field whose name cannot be shown as sent is declined, never prompted for.
    assert_eq!(
        fields.iter().map(|f| f.field.as_str()).collect::<Vec<_>>(),
        ["transport_mode"]
    );
    assert!(p.intent.summary.chars().count() <= display::MAX_SHORT);
    assert!(p.intent.summary.ends_with('…'));
    all.extend(outs);
    // The scope grows: notified, and the open prompt asks for one more field.
    all.extend(h.send(
        &mut net,
        a,
        t,
        "intent_update",
        json!({
            "updated_intent": {"category": EVIL, "summary": EVIL, "scope_change": "expanded"},
            "reason": EVIL,
            "additional_context_needed": [need("name", EVIL)],
        }),
    ));
    // An escalation, a processing error.
    all.extend(h.send(
        &mut net,
        a,
        t,
        "context",
        json!({"escalation": {"recommend": "surface_to_users", "reason": EVIL, "suggested_prompt": EVIL}}),
    ));
    all.extend(h.send(
        &mut net,
        a,
        t,
        "processing_error",
        json!({"error": EVIL, "message": long}),
    ));
    // A malformed packet whose parser message quotes the peer's text.
    all.extend(h.send(
        &mut net,
        a,
        t,
        "context_request",
        json!({"needs": [{"field": "x", "reason": "r", "priority": EVIL}]}),
    ));
    // A resolution: every string of the proposal is hostile; then the peer declines.
    let me = net.address(b).to_string();
    let alice = net.address(a).to_string();
    let outs = h.send(
        &mut net,
        a,
        t,
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
    assert!(
        prompts(&outs)
            .iter()
            .any(|p| matches!(p.kind, PromptKind::Resolution { .. })),
        "{outs:?}"
    );
    all.extend(outs);
    let rid = format!("pkt_hostile_{}", h.n);
    all.extend(h.send(
        &mut net,
        a,
        t,
        "resolution_response",
        json!({"resolution_id": rid, "status": "declined", "reason_class": EVIL, "message_to_other_agent": EVIL}),
    ));
    assert!(all.iter().any(|o| matches!(o, Output::Notify(_))));
    assert_clean(&all);
    // Only what is shown is cleaned: the thread keeps what the peer sent.
    let th = net.nodes[a].agent.thread(t).unwrap();
    assert_eq!(th.intent.summary, EVIL);
    assert!(th.history.iter().any(|h| h.json.contains("\\u001b")));
}

#[test]
fn an_open_consent_prompt_keeps_its_number_while_its_thread_waits() {
    let (mut net, a, b) = dinner::net();
    dinner::start(&mut net, a, b);
    let id = net.nodes[a].agent.threads().keys().next().cloned().unwrap();
    let first = net.prompt(a).expect("consent prompt");
    // From here on the peer is hostile.
    net.disconnect(b);
    let mut h = Hostile::new(&net, a, b);
    h.take_over(&net, b, &id);
    let asked: Vec<String> = match &first.kind {
        PromptKind::Consent { fields } => fields.iter().map(|f| f.field.clone()).collect(),
        _ => panic!(),
    };
    // The same needs again, five times: nothing changes on the user's screen.
    for _ in 0..5 {
        let needs: Vec<Value> = asked.iter().map(|f| need(f, "again")).collect();
        let outs = h.send(&mut net, a, &id, "context_request", json!({ "needs": needs }));
        assert!(prompts(&outs).is_empty() && closed(&outs).is_empty(), "{outs:?}");
    }
    // One more field: the prompt is updated in place, under its number.
    let outs = h.send(
        &mut net,
        a,
        &id,
        "context_request",
        json!({"needs": [need("name", "to book")]}),
    );
    assert!(closed(&outs).is_empty(), "{outs:?}");
    let ps = prompts(&outs);
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].id, first.id);
    let PromptKind::Consent { fields } = &ps[0].kind else {
        panic!()
    };
    assert_eq!(fields.len(), asked.len() + 1);
    // A restart shows it again under the same number, and packets after it keep it.
    net.crash_and_restart_agent(a, [5; 32]);
    assert_eq!(net.prompt(a).map(|p| p.id), Some(first.id));
    assert_eq!(net.nodes[a].prompts.len(), 1);
    net.connect(a);
    net.settle();
    let outs = h.send(
        &mut net,
        a,
        &id,
        "context_request",
        json!({"needs": [need("timezone_detail", "later")]}),
    );
    assert!(closed(&outs).is_empty(), "{outs:?}");
    assert!(prompts(&outs).iter().all(|p| p.id == first.id));
    assert_eq!(
        net.nodes[a].prompts.keys().copied().collect::<Vec<_>>(),
        [first.id]
    );
    // The number answers it.
    let mut m = BTreeMap::new();
    m.insert("transport_mode".to_string(), FieldChoice::Share);
    net.nodes[a].agent.handle(
        net.now,
        Input::Command(Command::AnswerConsent {
            prompt_id: first.id,
            answer: ConsentAnswer::ShareSelected(m),
        }),
    );
    let outs = drain(&mut net, a);
    assert!(outs
        .iter()
        .any(|o| matches!(o, Output::Audit(r) if r.event == format!("consent prompt {} answered", first.id))));
    let t = net.nodes[a].agent.thread(&id).unwrap();
    assert!(t.consent.as_ref().is_none_or(|c| c.prompt_id == 0));
}

#[test]
fn a_resolution_prompt_keeps_its_number_unless_the_proposal_changes() {
    let (mut net, a, b) = dinner::net();
    let mut h = Hostile::new(&net, a, b);
    let t = "thr_resolution";
    let (me, alice) = (net.address(b).to_string(), net.address(a).to_string());
    h.send(
        &mut net,
        a,
        t,
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
    let outs = h.send(&mut net, a, t, "resolution", resolution("Dinner at 19:00"));
    let first = prompts(&outs)[0].id;
    // The same resolution re-sent (another packet): the prompt is updated in place.
    for _ in 0..3 {
        let outs = h.send(&mut net, a, t, "resolution", resolution("Dinner at 19:00"));
        assert!(closed(&outs).is_empty(), "{outs:?}");
        assert_eq!(
            prompts(&outs).iter().map(|p| p.id).collect::<Vec<_>>(),
            [first]
        );
    }
    // A different proposal is another question: another number, the old one withdrawn,
    // so an answer to the old number cannot confirm it.
    let outs = h.send(&mut net, a, t, "resolution", resolution("Dinner at 23:00"));
    assert_eq!(closed(&outs), [first]);
    let second = prompts(&outs)[0].id;
    assert_ne!(second, first);
    net.nodes[a].agent.handle(
        net.now,
        Input::Command(Command::AnswerResolution {
            prompt_id: first,
            answer: ResolutionAnswer::Confirm,
        }),
    );
    drain(&mut net, a);
    assert_eq!(
        net.nodes[a].agent.thread(t).unwrap().state,
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
    let (mut net, a, b) = dinner::net();
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
    // An agent that believes the relay allows far more than it does.
    let mut net = Net::new("a2acp.io", dinner_start(), [7; 32]);
    let mut alice = dinner::alice("a2acp.io");
    alice.limits.send_rate_per_sec = 500;
    alice.limits.send_burst = 1000;
    let a = net.add_agent(alice, [1; 32], [11; 32]);
    let b = net.add_agent(dinner::bob("a2acp.io"), [2; 32], [22; 32]);
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
    println!("refused: {first} in the first second, {refused} in all; frames per second: {per_second:?}");
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
