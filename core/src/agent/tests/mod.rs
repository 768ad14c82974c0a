//! Behaviour of the agent state machine, driven through the in-memory [`Net`].

pub(super) mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;

use super::link::records::parse_history;
use super::tests::support::*;
use super::*;
use crate::crypto::{Direction, IdentityKey, ThreadSession};
use crate::harness::{dinner, Net};
use crate::packet::Intent;
use crate::persist::PersistOp;

fn ctx(v: serde_json::Value) -> Context {
    v.as_object().cloned().unwrap_or_default()
}

fn set(xs: &[&str]) -> BTreeSet<String> {
    xs.iter().map(|s| s.to_string()).collect()
}

fn start() -> Timestamp {
    Timestamp::parse_rfc3339("2026-03-21T14:30:00Z").unwrap()
}

struct Setup {
    bob_versions: Vec<String>,
    bob_llm: bool,
    limits: Limits,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            bob_versions: vec!["0.1".into(), "0.2".into()],
            bob_llm: false,
            limits: Limits::default(),
        }
    }
}

fn net_with(s: Setup) -> (Net, usize, usize) {
    let mut net = Net::new("a2acp.io", start(), [7; 32]);
    let mut alice = dinner::alice("a2acp.io");
    alice.limits = s.limits.clone();
    let mut bob = dinner::bob("a2acp.io");
    bob.limits = s.limits;
    bob.supported_versions = s.bob_versions;
    bob.use_llm = s.bob_llm;
    let a = net.add_agent(alice, [1; 32], [11; 32]);
    let b = net.add_agent(bob, [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    (net, a, b)
}

fn net() -> (Net, usize, usize) {
    net_with(Setup::default())
}

fn dinner_intent(urgency: &str) -> Intent {
    Intent {
        urgency: Some(urgency.into()),
        ..dinner::intent()
    }
}

fn start_dinner(net: &mut Net, a: usize, b: usize, urgency: &str) -> String {
    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner_intent(urgency),
            context: dinner::context(),
        },
    );
    net.settle();
    net.nodes[a].agent.threads().keys().last().cloned().unwrap()
}

fn confirm_both(net: &mut Net, a: usize, b: usize) {
    let pa = net.prompt(a).unwrap();
    net.answer_resolution(a, pa.id, ResolutionAnswer::Confirm);
    let pb = net.prompt(b).unwrap();
    net.answer_resolution(b, pb.id, ResolutionAnswer::Confirm);
    net.settle();
}

fn all_plaintext(net: &Net, i: usize) -> String {
    net.nodes[i]
        .agent
        .threads()
        .values()
        .flat_map(|t| {
            t.history
                .iter()
                .filter(|h| h.outgoing)
                .map(|h| h.json.clone())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn restore_shows_the_open_prompt_again_and_resumes() {
    let (mut net, a, b) = net();
    let id = start_dinner(&mut net, a, b, "low");
    let before = net.prompt(a).expect("prompt open");
    net.crash_and_restart_agent(a, [99; 32]);
    let again = net.prompt(a).expect("prompt shown again after restart");
    assert_eq!(again.id, before.id);
    assert_eq!(again.kind, before.kind);
    net.connect(a);
    net.settle();
    share_transport(&mut net, a);
    assert_eq!(
        state(&net, b, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
}

#[test]
fn a_packet_reaches_the_logic_at_most_once_even_after_restore() {
    let (mut net, a, b) = net();
    let id = start_dinner(&mut net, a, b, "low");
    // Take Bob's received context packet and feed it again, before and after a restart.
    let t = net.nodes[b].agent.thread(&id).unwrap().clone();
    assert_eq!(t.received_ids.len(), 1);
    let first = t.history.iter().find(|h| !h.outgoing).unwrap().json.clone();
    // Re-seal the same packet from Alice (as a re-send after a gap would).
    let mut alice_session = net.nodes[a].agent.thread(&id).unwrap().session.clone();
    let alice_id = IdentityKey::from_seed([1; 32]);
    let bob_key = net.nodes[b].agent.public_key();
    let env = alice_session
        .seal(
            &alice_id,
            &net.address(a),
            &net.address(b),
            &bob_key,
            &id,
            Direction::FromInitiator,
            first.as_bytes(),
        )
        .unwrap();
    let frame = crate::link::RelayFrame::Deliver { id: 999, env }.to_bytes();
    net.crash_and_restart_agent(b, [98; 32]);
    net.nodes[b].agent.handle(net.now, Input::Connected);
    net.nodes[b].agent.handle(net.now, Input::Bytes(frame));
    let t2 = net.nodes[b].agent.thread(&id).unwrap();
    assert_eq!(t2.received_ids.len(), 1);
    assert_eq!(
        t2.history.len(),
        t.history.len(),
        "the duplicate was not handed to the logic"
    );
}

#[test]
fn staleness_stalls_and_notifies() {
    for (urgency, hours) in [("low", 48u64), ("urgent", 2)] {
        let (mut net, a, b) = net();
        net.disconnect(b);
        let id = start_dinner(&mut net, a, b, urgency);
        net.run_for(Duration::from_secs(hours * 3600 - 60));
        assert_eq!(state(&net, a, &id), ThreadState::Initiated);
        net.run_for(Duration::from_secs(120));
        assert_eq!(state(&net, a, &id), ThreadState::Stalled, "{urgency}");
        assert!(notified(&net, a, NotifyKind::Stalled));
        // Bob comes back: he hears of the stall too (both users are notified, §6.4).
        net.connect(b);
        net.settle();
        assert!(
            notified(&net, b, NotifyKind::Escalated),
            "{}",
            net.render(Some("bob"))
        );
    }
}

#[test]
fn round_trip_limit_escalates_to_both_users() {
    let (net, a, b, id) = escalated_dinner();
    let t = net.nodes[a].agent.thread(&id).unwrap();
    assert!(t.round_trips <= 2 + 1);
    assert!(notified(&net, a, NotifyKind::Escalated));
    assert!(notified(&net, b, NotifyKind::Escalated));
    assert_ne!(state(&net, b, &id), ThreadState::Proposed);
}

/// Two agents that hand the dinner to their users after two exchanges (§6.4).
fn escalated_dinner() -> (Net, usize, usize, String) {
    let limits = Limits {
        max_round_trips: 2,
        ..Limits::default()
    };
    let (mut net, a, b) = net_with(Setup {
        limits,
        ..Setup::default()
    });
    let id = start_dinner(&mut net, a, b, "low");
    share_transport(&mut net, a);
    for i in [a, b] {
        assert!(
            net.nodes[i].agent.thread(&id).unwrap().escalated,
            "{}",
            net.render(None)
        );
    }
    (net, a, b, id)
}

fn reply(net: &mut Net, i: usize, id: &str, note: &str) {
    let mut context = Context::new();
    context.insert("note".into(), json!(note));
    net.command(
        i,
        Command::UpdateContext {
            thread_id: id.to_string(),
            context,
        },
    );
}

/// Both sides hold the same open proposal, and neither waits for its user any more.
fn assert_resumed_to_one_proposal(net: &Net, a: usize, b: usize, id: &str) {
    let held = |i: usize| {
        let t = net.nodes[i].agent.thread(id).unwrap();
        assert_eq!(t.state, ThreadState::Proposed, "{}", net.render(None));
        assert!(!t.escalated, "{}", net.render(None));
        t.stage.resolution().map(|r| r.packet_id.clone())
    };
    assert_eq!(held(a), held(b));
    for i in [a, b] {
        let (_, proposal) = resolution_prompt(net, i);
        assert_eq!(proposal, open_proposal(net, i, id));
    }
}

#[test]
fn a_reply_resumes_an_escalated_thread_on_both_sides() {
    for replier in ["initiator", "responder"] {
        let (mut net, a, b, id) = escalated_dinner();
        let (from, to) = if replier == "initiator" {
            (a, b)
        } else {
            (b, a)
        };
        reply(&mut net, from, &id, "any evening works");
        net.settle();
        assert_resumed_to_one_proposal(&net, a, b, &id);
        let t = net.nodes[to].agent.thread(&id).unwrap();
        assert_eq!(t.theirs.get("note"), Some(&json!("any evening works")));
        assert!(
            notices(&net, to, NotifyKind::Info)
                .iter()
                .any(|n| n.contains("negotiating again")),
            "{replier}: the other user is told: {}",
            net.render(None)
        );
    }
}

#[test]
fn both_users_replying_at_once_resume_to_one_proposal() {
    let (mut net, a, b, id) = escalated_dinner();
    reply(&mut net, a, &id, "any evening works");
    reply(&mut net, b, &id, "weekends too");
    net.settle();
    assert_resumed_to_one_proposal(&net, a, b, &id);
}

#[test]
fn confirmation_timeout_reminds_then_expires() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let shown = net.nodes[a].prompts_shown;
    net.run_for(Duration::from_secs(12 * 3600 + 1));
    assert_eq!(
        net.nodes[a].prompts_shown,
        shown + 1,
        "reminder re-shows the prompt"
    );
    net.run_for(Duration::from_secs(12 * 3600));
    assert_eq!(state(&net, a, &id), ThreadState::Expired);
    assert_eq!(state(&net, b, &id), ThreadState::Expired);
    assert!(notified(&net, a, NotifyKind::Expired));
    assert!(net.prompt(a).is_none(), "the expired prompt was withdrawn");
}

#[test]
fn failed_action_rolls_back_and_proposes_the_alternative() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    confirm_both(&mut net, a, b);
    // Alice's calendar entry succeeds; Bob's booking fails.
    assert_eq!(
        net.finish_action(a, Ok(())).unwrap().action.action,
        "add_calendar_event"
    );
    net.settle();
    let booking = net
        .finish_action(b, Err("Dopo is fully booked".into()))
        .unwrap();
    assert_eq!(booking.action.action, "book_table");
    net.settle();
    // Alice undoes her reversible calendar entry.
    let undo = net
        .finish_action(a, Ok(()))
        .expect("rollback on Alice's side");
    assert!(undo.undo);
    net.settle();
    assert!(notified(&net, a, NotifyKind::Failed));
    // Bob re-negotiated and proposed the alternative: both are asked again.
    assert_eq!(
        state(&net, b, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None).split("execute action").last().unwrap()
    );
    assert_eq!(state(&net, a, &id), ThreadState::Proposed);
    let t = net.nodes[b].agent.thread(&id).unwrap();
    assert_eq!(t.rejected.len(), 1);
    let p = net.prompt(a).unwrap();
    let PromptKind::Resolution { proposal, .. } = p.kind else {
        panic!()
    };
    assert_ne!(proposal.details, t.rejected[0].details);
    let audit = net.render(None);
    assert!(
        audit.contains("FAILED") && audit.contains("ROLLBACK"),
        "{audit}"
    );
}

#[test]
fn make_an_excuse_never_sends_the_real_reason() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let p = net.prompt(a).unwrap();
    net.answer_resolution(
        a,
        p.id,
        ResolutionAnswer::MakeExcuse {
            actual_reason: Some("I can't stand Bob's new girlfriend".into()),
        },
    );
    net.settle();
    let sent = all_plaintext(&net, a);
    assert!(!sent.contains("girlfriend"));
    assert!(sent.contains("\"actual_reason\":null"));
    assert!(sent.contains("scheduling_conflict"));
    // scheduling_conflict invites another option: Bob proposes the next one.
    assert_eq!(
        state(&net, b, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    let p = net.prompt(a).unwrap();
    net.answer_resolution(a, p.id, ResolutionAnswer::Decline);
    net.settle();
    assert_eq!(state(&net, a, &id), ThreadState::Declined);
    assert_eq!(state(&net, b, &id), ThreadState::Declined);
}

#[test]
fn a_0_1_peer_gets_a_0_1_thread() {
    let (mut net, a, b) = net_with(Setup {
        bob_versions: vec!["0.1".into()],
        ..Setup::default()
    });
    let id = to_proposed(&mut net, a, b);
    for i in [a, b] {
        let t = net.nodes[i].agent.thread(&id).unwrap();
        assert_eq!(t.version.as_deref(), Some("0.1"));
    }
    let bob_sent = all_plaintext(&net, b);
    assert!(bob_sent.contains("\"protocol\":\"a2acp/0.1\""));
    assert!(!bob_sent.contains("a2acp/0.2"));
    let p = net.prompt(a).unwrap();
    let PromptKind::Resolution { proposal, .. } = p.kind else {
        panic!()
    };
    assert!(proposal.alternatives.is_empty(), "0.1 has no alternatives");
}

#[test]
fn a_changed_key_halts_threads_and_alerts() {
    let (mut net, a, b) = net();
    let id = start_dinner(&mut net, a, b, "low");
    let impostor = IdentityKey::from_seed([66; 32]);
    let mut s = ThreadSession::new([5; 32]);
    let alice_key = net.nodes[a].agent.public_key();
    let packet = json!({
        "protocol": "a2acp/0.2", "packet_id": "pkt_evil", "thread_id": id, "from": "agent:bob@a2acp.io",
        "to": "agent:alice@a2acp.io", "timestamp": "2026-03-21T14:31:00Z", "type": "context_response",
        "context_provided": {"time_windows": ["03:00-04:00"]}
    });
    let env = s
        .seal(
            &impostor,
            &net.address(b),
            &net.address(a),
            &alice_key,
            &id,
            Direction::FromResponder,
            packet.to_string().as_bytes(),
        )
        .unwrap();
    let frame = crate::link::RelayFrame::Deliver { id: 5, env }.to_bytes();
    net.nodes[a].agent.handle(net.now, Input::Bytes(frame));
    let mut sec = 0;
    while let Some(o) = net.nodes[a].agent.poll_output() {
        if let Output::Notify(n) = o {
            if n.kind == NotifyKind::Security {
                sec += 1;
            }
        }
    }
    assert_eq!(sec, 1);
    let t = net.nodes[a].agent.thread(&id).unwrap();
    assert!(t.halted);
    assert_eq!(t.waiting, Waiting::User, "the user must check the new key");
    assert!(
        !t.theirs.contains_key("time_windows")
            || t.theirs["time_windows"] != json!(["03:00-04:00"])
    );
}

#[test]
fn malformed_packets_get_the_sender_flagged() {
    let (mut net, a, b) = net();
    let id = start_dinner(&mut net, a, b, "low");
    let bob_id = IdentityKey::from_seed([2; 32]);
    let mut s = net.nodes[b].agent.thread(&id).unwrap().session.clone();
    let alice_key = net.nodes[a].agent.public_key();
    for n in 0..3u64 {
        let env = s
            .seal(
                &bob_id,
                &net.address(b),
                &net.address(a),
                &alice_key,
                &id,
                Direction::FromResponder,
                b"{\"not\":\"a packet\"}",
            )
            .unwrap();
        let frame = crate::link::RelayFrame::Deliver { id: 100 + n, env }.to_bytes();
        net.nodes[a].agent.handle(net.now, Input::Bytes(frame));
    }
    assert!(net.nodes[a].agent.is_flagged(&net.address(b)));
}

#[test]
fn consent_prompts_do_not_block_other_threads() {
    let (mut net, a, b) = net();
    let first = start_dinner(&mut net, a, b, "low");
    assert!(net.prompt(a).is_some());
    // A second thread proceeds while the first waits for Alice.
    let to = net.address(a);
    net.command(
        b,
        Command::StartThread {
            to,
            intent: Intent {
                category: "information".into(),
                summary: "Share timezone".into(),
                urgency: None,
                scope_change: None,
            },
            context: ctx(json!({"wanted_fields": ["timezone"]})),
        },
    );
    net.settle();
    let second = net.nodes[b]
        .agent
        .threads()
        .keys()
        .find(|k| **k != first)
        .cloned()
        .unwrap();
    assert_eq!(state(&net, a, &first), ThreadState::Negotiating);
    assert_ne!(
        state(&net, b, &second),
        ThreadState::Initiated,
        "{}",
        net.render(None)
    );
}

#[test]
fn llm_malformed_answers_run_the_chain_to_the_negotiator() {
    let (mut net, a, b) = net_with(Setup {
        bob_llm: true,
        ..Setup::default()
    });
    let id = start_dinner(&mut net, a, b, "low");
    // Three generations per model: the tier's, one tier up (or the fallback after the
    // large one), the fallback model (§13.3).
    let mut tiers = Vec::new();
    while net.nodes[b].llm.front().is_some() {
        let r = net
            .answer_llm(b, Ok("I think dinner sounds lovely!".into()))
            .expect("LLM asked");
        assert_eq!(r.layers.len(), 6);
        assert!(!r.layers.iter().any(|l| l.content.contains("SECRET")));
        tiers.push(r.tier);
        assert!(tiers.len() <= 9);
    }
    assert!(tiers.len() == 6 || tiers.len() == 9, "{tiers:?}");
    assert_eq!(tiers.last(), Some(&ModelTier::Fallback));
    net.settle();
    // A scheduling thread: the deterministic negotiator ends the chain, no
    // processing_error (that is for intents it does not know: llm_tests).
    assert!(!all_plaintext(&net, b).contains("processing_error"));
    assert!(
        net.prompt(a).is_some(),
        "the deterministic negotiator asked Alice: {}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Negotiating);
}

#[test]
fn llm_unavailable_falls_back_to_the_negotiator() {
    let (mut net, a, b) = net_with(Setup {
        bob_llm: true,
        ..Setup::default()
    });
    let id = start_dinner(&mut net, a, b, "low");
    // The runtime retried each call with backoff: the tier's model, then the fallback.
    let r = net
        .answer_llm(b, Err("rate limited".into()))
        .expect("LLM asked");
    assert_ne!(r.tier, ModelTier::Fallback);
    let r = net
        .answer_llm(b, Err("rate limited".into()))
        .expect("the fallback model asked");
    assert_eq!(r.tier, ModelTier::Fallback);
    assert!(net.nodes[b].llm.is_empty());
    net.settle();
    assert!(
        net.prompt(a).is_some(),
        "the deterministic negotiator asked Alice: {}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Negotiating);
}

#[test]
fn llm_valid_answer_is_used() {
    let (mut net, a, b) = net_with(Setup {
        bob_llm: true,
        ..Setup::default()
    });
    let id = start_dinner(&mut net, a, b, "low");
    let answer = json!({"decision": "ask", "needs": [{"field": "transport_mode", "reason": "distance", "priority": "helpful"}]});
    net.answer_llm(b, Ok(answer.to_string())).unwrap();
    net.settle();
    let p = net.prompt(a).expect("Alice asked");
    let PromptKind::Consent { fields } = p.kind else {
        panic!()
    };
    assert_eq!(fields.len(), 1);
    assert_eq!(state(&net, a, &id), ThreadState::Negotiating);
}

#[test]
fn blocked_agents_are_ignored() {
    let (mut net, a, b) = net();
    let bob = net.address(b);
    net.command(a, Command::Block(bob));
    start_dinner(&mut net, b, a, "low");
    assert!(net.nodes[a].agent.threads().is_empty());
}

#[test]
fn user_given_never_share_fields_are_withheld() {
    let (mut net, a, b) = net();
    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner_intent("low"),
            context: ctx(
                json!({"time_windows": ["18:00-21:00"], "health_info": "SECRET-asthma-inhaler"}),
            ),
        },
    );
    net.settle();
    assert!(!all_plaintext(&net, a).contains("SECRET"));
    assert!(all_plaintext(&net, a).contains("\"withheld_fields\":[\"health_info\"]"));
}

#[test]
fn gaps_are_filled_from_local_knowledge_before_asking() {
    let mut net = Net::new("a2acp.io", start(), [7; 32]);
    let alice_addr = Address::parse("agent:alice@a2acp.io").unwrap();
    let mut alice = AgentConfig::new(alice_addr.clone());
    alice.profile = ctx(json!({"timezone": "Europe/London"}));
    let mut bob = AgentConfig::new(Address::parse("agent:bob@a2acp.io").unwrap());
    bob.profile = ctx(
        json!({"timezone": "Europe/London", "time_windows": ["18:30-21:00"], "dietary": ["none"]}),
    );
    bob.overrides.insert(
        alice_addr.clone(),
        RelationshipOverride {
            promote_to_always_share: set(&["specific_availability", "dietary"]),
            ..Default::default()
        },
    );
    // Bob's agent already knows how Alice travels and what she likes.
    bob.contacts.insert(
        alice_addr,
        ctx(json!({"transport_mode": "driving", "cuisine_preference": "Italian"})),
    );
    let a = net.add_agent(alice, [1; 32], [11; 32]);
    let b = net.add_agent(bob, [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    let id = start_dinner(&mut net, a, b, "low");
    // No consent prompt for Alice: Bob did not need to ask; he proposed at once.
    assert!(
        net.prompt(a)
            .is_some_and(|p| matches!(p.kind, PromptKind::Resolution { .. })),
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Proposed);
    // What Bob knew stayed on Bob's side.
    assert!(!all_plaintext(&net, b).contains("Italian"));
}

#[test]
fn a_countered_generic_proposal_is_not_proposed_again() {
    let mut net = Net::new("a2acp.io", start(), [7; 32]);
    let mut ann = AgentConfig::new(Address::parse("agent:ann@a2acp.io").unwrap());
    ann.permissions.set("favourite_colour", Tier::AlwaysShare);
    ann.profile = ctx(json!({"favourite_colour": "green"}));
    let mut ben = AgentConfig::new(Address::parse("agent:ben@a2acp.io").unwrap());
    ben.permissions.set("favourite_colour", Tier::AlwaysShare);
    ben.profile = ctx(json!({"favourite_colour": "teal"}));
    let a = net.add_agent(ann, [1; 32], [11; 32]);
    let b = net.add_agent(ben, [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: Intent {
                category: "project_update".into(),
                summary: "Colours".into(),
                urgency: None,
                scope_change: None,
            },
            context: ctx(json!({"wanted_fields": ["favourite_colour"]})),
        },
    );
    net.settle();
    let mut rounds = 0;
    while let Some(p) = net.prompt(a) {
        rounds += 1;
        assert!(
            rounds < 3,
            "the same proposal came back: {}",
            net.render(None)
        );
        net.answer_resolution(a, p.id, ResolutionAnswer::DifferentTime);
        net.settle();
    }
    assert!(notified(&net, a, NotifyKind::Escalated) || notified(&net, b, NotifyKind::Escalated));
}

/// Bob's agent is re-installed with a new identity key (records kept) and the relay
/// re-binds his address; Alice's agent halts the thread on his next packet. When Alice
/// accepts the new key, both sides close: her cancel is sealed under the new key.
#[test]
fn accepting_a_changed_key_closes_the_halted_thread_on_both_sides() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    net.disconnect(b);
    let new_identity = IdentityKey::from_seed([77; 32]);
    let reg = format!("reg/{}", net.address(b));
    let mut rec: serde_json::Value = serde_json::from_slice(&net.relay_store[&reg]).unwrap();
    rec["key"] = json!(crate::encoding::b64_encode(
        &new_identity.public().to_bytes()
    ));
    net.relay_store
        .insert(reg, serde_json::to_vec(&rec).unwrap());
    net.crash_relay();
    net.restart_relay();
    let mut bob = dinner::bob("a2acp.io");
    bob.supported_versions = vec!["0.1".into(), "0.2".into()];
    let records = net.nodes[b].store.clone();
    net.nodes[b].agent = Agent::restore(bob, new_identity, [78; 32], records).unwrap();
    net.connect(a);
    net.connect(b);
    net.settle();
    assert!(notified(&net, a, NotifyKind::Security));
    assert!(net.nodes[a].agent.thread(&id).unwrap().halted);
    let to = net.address(b);
    net.command(a, Command::AcceptKeyChange { address: to });
    net.settle();
    assert_eq!(state(&net, a, &id), ThreadState::Declined);
    assert_eq!(
        state(&net, b, &id),
        ThreadState::Declined,
        "{}",
        net.render(None)
    );
}

// ----- persisted records: the history is split out of the thread record -----

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

/// Both agents propose at once (swarm seed 110): with both devices offline, Alice (the
/// initiator) proposes after new context from her user, and so does Bob after his user
/// turned down his own proposal and gave new context; the two resolutions cross. Both
/// sides must end up holding the initiator's, so the next answer is understood.
#[test]
fn crossed_resolutions_settle_on_the_initiators() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let update = |net: &mut Net, i: usize, note: &str| {
        let mut extra = Context::new();
        extra.insert("note".into(), json!(note));
        net.command(
            i,
            Command::UpdateContext {
                thread_id: id.clone(),
                context: extra,
            },
        );
        net.settle();
    };
    let excuse = |net: &mut Net, i: usize| {
        let p = net.prompt(i).expect("resolution prompt");
        net.answer_resolution(
            i,
            p.id,
            ResolutionAnswer::MakeExcuse {
                actual_reason: None,
            },
        );
    };
    // Alice's agent first learns everything it wants from Bob.
    excuse(&mut net, a);
    update(&mut net, a, "either day works");
    let consent = net.nodes[b]
        .prompts
        .values()
        .find(|p| matches!(p.kind, PromptKind::Consent { .. }))
        .map(|p| p.id)
        .expect("Bob is asked for consent");
    net.answer_consent(b, consent, ConsentAnswer::DeclineAll);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    // Offline, each side moves on.
    net.disconnect(a);
    net.disconnect(b);
    excuse(&mut net, a);
    update(&mut net, a, "any evening");
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    excuse(&mut net, b);
    update(&mut net, b, "weekends too");
    assert_eq!(
        state(&net, b, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    net.connect(a);
    net.connect(b);
    net.settle();
    let held = |net: &Net, i: usize| {
        let r = net.nodes[i]
            .agent
            .thread(&id)
            .unwrap()
            .stage
            .resolution()
            .cloned()
            .unwrap();
        (r.packet_id, r.proposer)
    };
    assert_eq!(held(&net, a), held(&net, b), "{}", net.render(None));
    assert_eq!(held(&net, a).1, net.address(a));
    // The next answer is understood: Bob's excuse rules Alice's proposal out on her side
    // (Bob's user resumed the thread, so her agent goes on without it).
    let (excused, _) = held(&net, a);
    let details = open_proposal(&net, a, &id).details;
    excuse(&mut net, b);
    net.settle();
    let t = net.nodes[a].agent.thread(&id).unwrap();
    assert!(
        t.stage.resolution().is_none_or(|r| r.packet_id != excused),
        "{}",
        net.render(None)
    );
    assert!(t.rejected.iter().any(|r| r.details == details));
}

/// A confirmation sent in time reaches the proposer only after its deadline (its device
/// was off, swarm seed 142): the proposer expired, so it answers with its state and the
/// other side, already executing, undoes what it did and expires as well.
#[test]
fn a_confirmation_that_arrives_after_expiry_expires_both_sides() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let pb = net.prompt(b).unwrap();
    net.answer_resolution(b, pb.id, ResolutionAnswer::Confirm);
    net.settle();
    net.disconnect(b);
    let pa = net.prompt(a).unwrap();
    net.answer_resolution(a, pa.id, ResolutionAnswer::Confirm);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Executing,
        "{}",
        net.render(None)
    );
    let done = net
        .finish_action(a, Ok(()))
        .expect("Alice's calendar entry");
    assert!(!done.undo);
    net.settle();
    net.run_for(Duration::from_secs(25 * 3600));
    assert_eq!(
        state(&net, b, &id),
        ThreadState::Expired,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, a, &id), ThreadState::Executing);
    net.connect(b);
    net.settle();
    let undo = net
        .finish_action(a, Ok(()))
        .expect("Alice undoes her entry");
    assert!(undo.undo);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Expired,
        "{}",
        net.render(None)
    );
    assert!(notified(&net, a, NotifyKind::Expired));
}

#[test]
fn re_connections_keep_one_thread_state_per_thread_in_the_outbox() {
    // Swarm seeds 70, 94, 179, 210: a flapping link re-connected thousands of times while
    // the peer's relay queue was full; every re-connection queued another `thread_state`,
    // all parked in the outbox, all replayed on the next one, each listing every packet
    // sent so far.
    let mut net = Net::new("a2acp.io", start(), [7; 32]);
    net.relay = crate::relay::Relay::new(
        crate::relay::RelayConfig {
            domain: "a2acp.io".into(),
            queue_per_thread: 1,
            ..crate::relay::RelayConfig::default()
        },
        [7; 32],
    );
    let a = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    let b = net.add_agent(dinner::bob("a2acp.io"), [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    let id = start_dinner(&mut net, a, b, "low");
    assert!(net.nodes[a]
        .agent
        .thread(&id)
        .unwrap()
        .session
        .peer_eph()
        .is_some());
    net.disconnect(b);
    for _ in 0..6 {
        net.disconnect(a);
        net.connect(a);
        net.settle();
    }
    assert!(
        net.nodes[a].agent.outbox_len() <= 1,
        "outbox: {}",
        net.nodes[a].agent.outbox_len()
    );
    let summaries = net.nodes[a]
        .agent
        .thread(&id)
        .unwrap()
        .history
        .iter()
        .filter(|h| h.outgoing && h.kind == "thread_state")
        .count();
    assert!(summaries <= 2, "{summaries} thread_state packets sent");
    // Bob comes back: the summary waiting for him gets through, nothing is stuck.
    net.connect(b);
    net.settle();
    net.disconnect(a);
    net.connect(a);
    net.settle();
    assert_eq!(net.nodes[a].agent.outbox_len(), 0);
}

#[test]
fn re_connections_send_a_summary_only_when_the_thread_moved() {
    // A flapping link re-connects often (the 1,000-agent swarm: 7,000 re-connections sent
    // 45,000 `thread_state`s, 39 % of all packets). A summary the relay accepted reaches
    // the peer; the same summary again tells it nothing.
    let (mut net, a, b) = net();
    let id = start_dinner(&mut net, a, b, "low");
    let summaries = |net: &Net, n: usize| {
        net.nodes[n]
            .agent
            .thread(&id)
            .unwrap()
            .history
            .iter()
            .filter(|h| h.outgoing && h.kind == "thread_state")
            .count()
    };
    let flap = |net: &mut Net, n: usize| {
        net.disconnect(n);
        net.connect(n);
        net.settle();
    };
    flap(&mut net, a);
    assert_eq!(summaries(&net, a), 1, "{}", net.render(None));
    for _ in 0..5 {
        flap(&mut net, a);
        flap(&mut net, b);
    }
    assert_eq!(summaries(&net, a), 1, "{}", net.render(None));
    assert_eq!(summaries(&net, b), 1, "{}", net.render(None));
    // The thread moves on (Alice's user answers the consent prompt, packets go both
    // ways): the next re-connection summarises it again, once.
    share_transport(&mut net, a);
    assert_eq!(state(&net, a, &id), ThreadState::Proposed);
    flap(&mut net, a);
    flap(&mut net, a);
    assert_eq!(summaries(&net, a), 2, "{}", net.render(None));
}

/// Swarm seed 713: the first packet to a new peer waits for the peer's key; the lookup
/// was lost with the connection and the agent crashed before it re-connected. The stored
/// peer record said a lookup was on its way, so the restored agent never asked again and
/// the packet never left.
#[test]
fn a_key_lookup_lost_in_a_crash_is_asked_again() {
    let (mut net, a, b) = net();
    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner_intent("low"),
            context: dinner::context(),
        },
    );
    let id = net.nodes[a].agent.threads().keys().last().cloned().unwrap();
    // The lookup is still on the wire when Alice's connection drops and she crashes.
    net.crash_and_restart_agent(a, [99; 32]);
    net.settle();
    net.connect(a);
    net.settle();
    assert!(
        net.nodes[b].agent.thread(&id).is_some(),
        "Bob never got the thread\n{}",
        net.render(None)
    );
}

/// Swarm seed 612: Bob was away while Alice's thread stalled. Back, he answered her
/// request and then read her stall notice, which marked his side escalated: from then on
/// he ignored her packets, and both waited for each other. The notice only informs him;
/// the thread goes on once Alice hears from him.
#[test]
fn a_stall_notice_does_not_stop_the_negotiation() {
    let (mut net, a, b) = net();
    net.disconnect(b);
    let id = start_dinner(&mut net, a, b, "low");
    net.run_for(Duration::from_secs(49 * 3600));
    assert_eq!(state(&net, a, &id), ThreadState::Stalled);
    net.connect(b);
    net.settle();
    assert!(notified(&net, b, NotifyKind::Escalated));
    share_transport(&mut net, a);
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Proposed);
}

/// Drives the dinner to Alice undoing her calendar entry after Bob's booking failed, with
/// Bob's next proposal already sent: it reaches Alice while she is in ROLLBACK and waits
/// for the undo to finish. Returns the thread id; Alice's undo is still running.
fn to_rollback_with_the_next_proposal(net: &mut Net, a: usize, b: usize) -> String {
    let id = to_proposed(net, a, b);
    confirm_both(net, a, b);
    assert!(!net.finish_action(a, Ok(())).unwrap().undo);
    net.settle();
    let booking = net.finish_action(b, Err("fully booked".into())).unwrap();
    assert_eq!(booking.action.action, "book_table");
    net.settle();
    assert_eq!(
        state(net, a, &id),
        ThreadState::Rollback,
        "{}",
        net.render(None)
    );
    assert_eq!(state(net, b, &id), ThreadState::Proposed);
    assert!(net.nodes[a]
        .agent
        .thread(&id)
        .unwrap()
        .held
        .deferred_resolution
        .is_some());
    id
}

/// Swarm seed 467: the proposer's user turns down the next proposal while the other
/// side still undoes the failed one; the cancel answers a resolution that side has not
/// opened yet. It was dropped as "an older resolution", so the undo opened the proposal
/// and Alice was asked about a thread Bob had closed.
#[test]
fn a_cancel_of_the_next_proposal_during_rollback_closes_after_the_undo() {
    let (mut net, a, b) = net();
    let id = to_rollback_with_the_next_proposal(&mut net, a, b);
    let p = net.prompt(b).expect("Bob's prompt for his next proposal");
    net.answer_resolution(b, p.id, ResolutionAnswer::Decline);
    net.settle();
    assert_eq!(state(&net, b, &id), ThreadState::Declined);
    assert!(net.finish_action(a, Ok(())).expect("Alice's undo").undo);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Declined,
        "{}",
        net.render(None)
    );
    assert!(net.prompt(a).is_none(), "no prompt for a closed thread");
}

/// The same race with a confirmation: Bob confirms his next proposal while Alice still
/// undoes. His answer must wait for the proposal to open on her side, or her own
/// confirmation leaves the thread waiting for one that was dropped.
#[test]
fn a_confirmation_of_the_next_proposal_during_rollback_is_kept() {
    let (mut net, a, b) = net();
    let id = to_rollback_with_the_next_proposal(&mut net, a, b);
    let p = net.prompt(b).expect("Bob's prompt for his next proposal");
    net.answer_resolution(b, p.id, ResolutionAnswer::Confirm);
    net.settle();
    assert!(net.finish_action(a, Ok(())).expect("Alice's undo").undo);
    net.settle();
    assert_eq!(state(&net, a, &id), ThreadState::Proposed);
    let p = net
        .prompt(a)
        .expect("Alice is asked about the next proposal");
    net.answer_resolution(a, p.id, ResolutionAnswer::Confirm);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Executing,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Executing);
}

/// Swarm seed 627: a user cancels while the agreed actions run. The other side withdraws
/// (undoes and closes); this side used to finish its actions, report them done and wait
/// forever for the other side's report. It now undoes and closes as well.
#[test]
fn a_cancel_during_execution_undoes_and_closes_both_sides() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    confirm_both(&mut net, a, b);
    net.command(
        a,
        Command::CancelThread {
            thread_id: id.clone(),
        },
    );
    net.settle();
    assert_eq!(state(&net, b, &id), ThreadState::Failed);
    // Each side's running action reports, then is undone.
    for i in [a, b] {
        assert!(!net.finish_action(i, Ok(())).unwrap().undo);
        net.settle();
        assert!(net.finish_action(i, Ok(())).expect("the undo").undo);
        net.settle();
    }
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Declined,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Declined);
}

/// Once this side has reported its part done, the other side may complete at any moment
/// and a COMPLETED thread cannot be cancelled: the cancel is refused, and the thread ends
/// with the other side's report.
#[test]
fn a_cancel_after_reporting_done_is_refused() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    confirm_both(&mut net, a, b);
    assert!(!net.finish_action(a, Ok(())).unwrap().undo);
    net.settle();
    let sent = net.nodes[a].agent.thread(&id).unwrap().history.len();
    net.command(
        a,
        Command::CancelThread {
            thread_id: id.clone(),
        },
    );
    net.settle();
    assert_eq!(net.nodes[a].agent.thread(&id).unwrap().history.len(), sent);
    while net.finish_action(b, Ok(())).is_some() {
        net.settle();
    }
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Completed,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Completed);
}

/// Swarm seeds 810, 817: the proposer's user declines his own proposal while the other
/// device is off for longer than the confirmation timeout. That side expires when it is
/// back, before the relay hands it the cancel; the cancel was sent in time, so it ends
/// DECLINED as the sender did, instead of answering EXPIRED to a closed thread.
#[test]
fn a_cancel_that_arrives_after_expiry_declines_the_expired_side() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    net.disconnect(a);
    let p = net.prompt(b).unwrap();
    net.answer_resolution(b, p.id, ResolutionAnswer::Decline);
    net.settle();
    assert_eq!(state(&net, b, &id), ThreadState::Declined);
    net.run_for(Duration::from_secs(25 * 3600));
    assert_eq!(state(&net, a, &id), ThreadState::Expired);
    net.connect(a);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Declined,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Declined);
    assert!(notified(&net, a, NotifyKind::Declined));
}

/// Large swarm, seed 1: the responder's model was still thinking when the initiator's
/// resolution arrived and opened. Its late "propose" replaced the initiator's resolution
/// on the responder's side only (the initiator ignores a crossed one), so each side held
/// a different resolution and every answer was dropped as one to an older resolution.
#[test]
fn a_late_llm_proposal_does_not_replace_the_peers_open_resolution() {
    let (mut net, a, b) = net_with(Setup {
        bob_llm: true,
        ..Setup::default()
    });
    let id = start_dinner(&mut net, a, b, "low");
    let answer = |net: &mut Net, v: serde_json::Value| {
        net.answer_llm(b, Ok(v.to_string()))
            .expect("Bob's model asked");
    };
    answer(
        &mut net,
        json!({"decision": "ask", "needs": [{"field": "transport_mode", "reason": "distance", "priority": "helpful"}]}),
    );
    net.settle();
    share_transport(&mut net, a);
    // Alice's user adds context: she asks Bob for the fields that refine a proposal.
    let update = |net: &mut Net, i: usize| {
        let mut extra = Context::new();
        extra.insert("note".into(), json!("any evening"));
        net.command(
            i,
            Command::UpdateContext {
                thread_id: id.clone(),
                context: extra,
            },
        );
    };
    update(&mut net, a);
    net.settle();
    let consent = net.prompt(b).expect("Bob is asked for consent");
    net.answer_consent(b, consent.id, ConsentAnswer::DeclineAll);
    answer(&mut net, json!({"decision": "wait"}));
    // Bob's declines are on their way to Alice, whose free turn will propose; Bob's user
    // adds context, and his model is asked again before her resolution arrives.
    update(&mut net, b);
    net.settle();
    assert!(net.nodes[b].llm.front().is_some(), "{}", net.render(None));
    assert_eq!(
        state(&net, b, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    let propose = json!({"decision": "propose", "proposal": {"summary": "Dinner at Bob's", "reasoning": "fits"}, "actions": []});
    net.answer_llm(b, Ok(propose.to_string())).unwrap();
    net.settle();
    let held = |net: &Net, i: usize| {
        net.nodes[i]
            .agent
            .thread(&id)
            .unwrap()
            .stage
            .resolution()
            .map(|r| (r.packet_id.clone(), r.proposer.clone()))
    };
    assert_eq!(held(&net, b), held(&net, a), "{}", net.render(None));
    assert_eq!(held(&net, a).unwrap().1, net.address(a));
    assert!(!net.nodes[b]
        .agent
        .thread(&id)
        .unwrap()
        .history
        .iter()
        .any(|h| h.outgoing && h.kind == "resolution"));
}

/// Large swarm, seed 1: an agent crashed after storing the thread with its answer but
/// before queuing the packet, so the answer never left; the other side was connected
/// throughout and never asked for it, and both waited until the proposal expired. The
/// sender's next summary lists the answer as sent: the receiver asks for it with its own
/// summary, and the sender re-sends it.
#[test]
fn a_packet_listed_as_sent_but_never_received_is_asked_for() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    // Alice's answer is stored but its outbox record is lost in a crash (simulated by
    // restoring from the store without the record).
    net.disconnect(a);
    let p = net.prompt(a).unwrap();
    net.answer_resolution(
        a,
        p.id,
        ResolutionAnswer::MakeExcuse {
            actual_reason: None,
        },
    );
    net.settle();
    assert_eq!(state(&net, a, &id), ThreadState::Negotiating);
    let store: BTreeMap<String, Vec<u8>> = net.nodes[a]
        .store
        .iter()
        .filter(|(k, _)| !k.starts_with("outbox/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    net.nodes[a].store = store;
    net.crash_and_restart_agent(a, [1; 32]);
    net.connect(a);
    net.settle();
    // Bob got the excuse: he ruled his proposal out and proposed the next option.
    let tb = net.nodes[b].agent.thread(&id).unwrap();
    assert_eq!(tb.rejected.len(), 1, "{}", net.render(None));
    assert_eq!(tb.state, ThreadState::Proposed);
    let ta = net.nodes[a].agent.thread(&id).unwrap();
    assert_eq!(ta.state, ThreadState::Proposed);
    assert_eq!(
        ta.stage.resolution().map(|r| &r.packet_id),
        tb.stage.resolution().map(|r| &r.packet_id)
    );
}

/// Large swarm, seed 1: the initiator's user cancelled a thread right after starting it
/// and the cancel overtook the thread's first packet, so the responder refused it (it
/// opened no thread) and then negotiated on alone; the initiator, DECLINED, dropped every
/// packet of it. An ended thread answers a late packet with its summary: the responder
/// asks for the cancel it never took in, gets it again and ends DECLINED too.
#[test]
fn a_cancel_that_overtook_the_first_packet_still_ends_the_thread() {
    let (mut net, a, b) = net();
    net.disconnect(b);
    let id = start_dinner(&mut net, a, b, "low");
    net.command(
        a,
        Command::CancelThread {
            thread_id: id.clone(),
        },
    );
    net.settle();
    assert_eq!(state(&net, a, &id), ThreadState::Declined);
    net.connect(b);
    let mut steps = 0;
    while net.in_flight_to(b) < 2 && steps < 10_000 {
        net.run_for(Duration::from_millis(1));
        steps += 1;
    }
    assert!(net.swap_last_two_to(b), "{}", net.render(None));
    net.settle();
    net.run_for(Duration::from_secs(60));
    assert_eq!(
        state(&net, b, &id),
        ThreadState::Declined,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, a, &id), ThreadState::Declined);
}

/// Large swarm, seed 1: the model was asked about the thread as it stood; the peer's
/// packet (its alternatives) arrived while it was thinking and was not looked at, and the
/// model's "wait" left the thread NEGOTIATING, waiting on nothing. An answer overtaken by
/// new input is not acted on: the model is asked again about the thread as it is now.
#[test]
fn an_llm_answer_overtaken_by_a_peer_packet_is_not_acted_on() {
    let (mut net, a, b) = net_with(Setup {
        bob_llm: true,
        ..Setup::default()
    });
    let id = start_dinner(&mut net, a, b, "low");
    assert!(net.nodes[b].llm.front().is_some(), "{}", net.render(None));
    // Alice's user adds context while Bob's model is thinking.
    let mut extra = Context::new();
    extra.insert("note".into(), json!("any evening"));
    net.command(
        a,
        Command::UpdateContext {
            thread_id: id.clone(),
            context: extra,
        },
    );
    net.settle();
    let first = net
        .answer_llm(b, Ok(json!({"decision": "wait"}).to_string()))
        .unwrap();
    net.settle();
    let again = net.nodes[b]
        .llm
        .front()
        .cloned()
        .expect("the model is asked again");
    assert!(again.id > first.id);
    assert!(
        again
            .layers
            .iter()
            .any(|l| l.content.contains("any evening")),
        "{:?}",
        again.layers
    );
    let t = net.nodes[b].agent.thread(&id).unwrap();
    assert_eq!(t.waiting, Waiting::Llm, "{}", net.render(None));
}

#[test]
fn address_taken_stops_registering_closes_and_tells_once() {
    let (mut net, a, _b) = net();
    // Another key claims Alice's address.
    let thief = net.add_agent(dinner::alice("a2acp.io"), [9; 32], [99; 32]);
    let sent_before = net.nodes[thief].frames_sent;
    net.connect(thief);
    net.settle();
    net.run_for(Duration::from_secs(60));
    let t = &net.nodes[thief];
    let r = t.agent.link_refusal().expect("refusal recorded");
    assert_eq!(r.code, crate::link::ErrorCode::AddressTaken);
    assert_eq!(r.retry_after, None);
    assert!(!t.agent.is_online());
    assert!(!t.is_connected(), "the agent closed its connection");
    // One `register`, not one per challenge the relay issues after each refusal.
    assert_eq!(t.frames_sent - sent_before, 1);
    let told: Vec<&Notification> = t
        .notifications
        .iter()
        .filter(|n| n.text.contains("address_taken"))
        .collect();
    assert_eq!(told.len(), 1, "{:?}", t.notifications);
    // Connected again in the same run: the challenge is not answered.
    net.connect(thief);
    net.settle();
    assert_eq!(net.nodes[thief].frames_sent - sent_before, 1);
    assert!(net.nodes[thief].agent.link_refusal().is_some());
    // The owner is unaffected.
    assert!(net.nodes[a].agent.is_online());
    assert!(net.nodes[a].agent.link_refusal().is_none());
}

#[test]
fn registration_limited_waits_then_registers_on_the_next_connection() {
    let cfg = crate::relay::RelayConfig {
        domain: "a2acp.io".into(),
        max_registration_sources: 1,
        registration_window: Duration::from_secs(60),
        ..Default::default()
    };
    let mut net = Net::with_relay_config(cfg, start(), [7; 32]);
    let a = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    let b = net.add_agent(dinner::bob("a2acp.io"), [2; 32], [22; 32]);
    net.connect(a);
    net.settle();
    assert!(net.nodes[a].agent.is_online());
    // Bob's source is a second one while Alice's window is open: refused.
    let sent_before = net.nodes[b].frames_sent;
    net.connect(b);
    net.settle();
    net.run_for(Duration::from_secs(30));
    let r = net.nodes[b].agent.link_refusal().cloned().expect("refused");
    assert_eq!(r.code, crate::link::ErrorCode::RegistrationLimited);
    assert_eq!(r.retry_after, Some(REGISTRATION_RETRY));
    assert!(!net.nodes[b].is_connected());
    assert_eq!(net.nodes[b].frames_sent - sent_before, 1);
    // After the window, the next connection registers.
    net.run_for(Duration::from_secs(61));
    net.connect(b);
    net.settle();
    assert!(net.nodes[b].agent.link_refusal().is_none());
    assert!(net.nodes[b].agent.is_online());
}

#[test]
fn a_thread_to_an_unknown_address_is_declined_with_a_notification() {
    let (mut net, a, b) = net();
    let nobody = Address::new("nobody", "a2acp.io").unwrap();
    net.command(
        a,
        Command::StartThread {
            to: nobody.clone(),
            intent: dinner_intent("normal"),
            context: dinner::context(),
        },
    );
    let id = net.nodes[a].agent.threads().keys().last().cloned().unwrap();
    assert_eq!(
        net.nodes[a].agent.first_packet(&id),
        Some(FirstPacket::Waiting)
    );
    net.settle();
    assert_eq!(
        net.nodes[a].agent.first_packet(&id),
        Some(FirstPacket::Refused(
            crate::link::ErrorCode::UnknownRecipient
        ))
    );
    assert_eq!(state(&net, a, &id), ThreadState::Declined);
    let n = net.nodes[a]
        .notifications
        .iter()
        .find(|n| n.kind == NotifyKind::Declined)
        .expect("declined notification");
    assert_eq!(n.thread_id.as_deref(), Some(id.as_str()));
    assert!(n.text.contains("agent:nobody@a2acp.io"), "{}", n.text);
    // A thread to a known agent: its first packet is accepted.
    let ok = start_dinner(&mut net, a, b, "normal");
    assert_eq!(
        net.nodes[a].agent.first_packet(&ok),
        Some(FirstPacket::Accepted)
    );
}

/// §18 graceful degradation: Alice's config names an A2A agent card for an address no
/// a2acp agent holds. Her thread to it is declined when the relay says so, and the same
/// intent and context go on in a new thread with that A2A agent (its card read first);
/// the user is told both. Without the entry (the test above) nothing goes on.
#[test]
fn a_thread_to_an_unknown_address_with_an_a2a_card_goes_on_with_that_agent() {
    let mut net = Net::new("a2acp.io", start(), [7; 32]);
    let chez = Address::new("chez", "a2acp.io").unwrap();
    let mut alice = dinner::alice("a2acp.io");
    alice.a2a_cards.insert(
        chez.clone(),
        "https://chez.example/.well-known/agent-card.json".into(),
    );
    let a = net.add_agent(alice, [1; 32], [11; 32]);
    net.connect(a);
    net.settle();
    net.command(
        a,
        Command::StartThread {
            to: chez.clone(),
            intent: dinner_intent("normal"),
            context: dinner::context(),
        },
    );
    let first = net.nodes[a].agent.threads().keys().last().cloned().unwrap();
    net.settle();
    assert_eq!(state(&net, a, &first), ThreadState::Declined);
    let threads: Vec<Thread> = net.nodes[a]
        .agent
        .threads()
        .values()
        .filter(|t| t.id != first)
        .cloned()
        .collect();
    assert_eq!(threads.len(), 1, "one new thread");
    let t = &threads[0];
    let remote = t.a2a_remote.as_ref().expect("a thread with an A2A agent");
    assert_eq!(
        remote.card_url,
        "https://chez.example/.well-known/agent-card.json"
    );
    assert!(t.peer.is_a2a(), "{}", t.peer);
    assert_eq!(t.intent, dinner_intent("normal"));
    assert_eq!(t.local, dinner::context());
    assert_eq!(
        net.nodes[a].agent.thread(&first).unwrap().continued_as,
        Some(t.id.clone()),
        "the declined thread says where it goes on"
    );
    let n = net.nodes[a]
        .notifications
        .iter()
        .find(|n| n.kind == NotifyKind::Declined)
        .expect("declined notification");
    assert_eq!(n.thread_id.as_deref(), Some(first.as_str()));
    assert!(
        n.text.contains("agent:chez@a2acp.io") && n.text.contains("https://chez.example/"),
        "{}",
        n.text
    );
    let now = net.now;
    let calls = net.nodes[a].agent.take_a2a_calls(now);
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].kind,
        crate::agent::bridges::a2a_client::A2aCallKind::Card
    );
    assert_eq!(calls[0].thread_id, t.id.clone());
}

// ----- a crash between two records of one step (swarm seed 133) -----

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
