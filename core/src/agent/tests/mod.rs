//! Behaviour of the agent state machine, driven through the in-memory [`Net`].

mod key_recovery;
mod records;
mod relay_link;
mod resolution;
mod rotation;
pub(super) mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;

use super::tests::support::*;
use super::thread::parse_history;
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
    let before: Vec<String> = net.nodes[a].agent.threads().keys().cloned().collect();
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner_intent(urgency),
            context: dinner::context(),
        },
    );
    net.settle();
    // The new thread (ids are random: not always the last one).
    net.nodes[a]
        .agent
        .threads()
        .keys()
        .find(|k| !before.contains(k))
        .cloned()
        .unwrap()
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
