//! Key rotation (SPEC-NOTES "Key rotation"): an agent moves to a new key in the middle of
//! a thread, its peer re-pins without halting, and a crash at any point leaves an agent
//! that finishes the rotation when given the new key again.

use serde_json::json;

use super::support::*;
use crate::agent::*;
use crate::crypto::{Direction, IdentityKey, ThreadSession};
use crate::harness::{dinner, Net};
use crate::link::ClientFrame;
use crate::rotation::RotationStatement;

fn new_key() -> IdentityKey {
    IdentityKey::from_seed([91; 32])
}

fn registered(net: &Net, i: usize) -> Option<[u8; 32]> {
    net.relay.registered_key(&net.address(i))
}

fn rotated_events(net: &Net, i: usize) -> usize {
    net.nodes[i]
        .audit
        .iter()
        .filter(|a| matches!(a.event, AgentEvent::OwnKeyRotated { .. }))
        .count()
}

/// Rotates `a`'s key with the relay answering, and reconnects it.
fn rotate(net: &mut Net, a: usize) {
    net.command(
        a,
        Command::RotateKey {
            new: Box::new(new_key()),
        },
    );
    net.settle();
    net.connect(a);
    net.settle();
}

/// Bob pinned Alice's new key, nothing halted, no security alert, one notice.
fn assert_repinned_quietly(net: &Net, a: usize, b: usize, id: &str) {
    let alice = net.address(a);
    assert_eq!(
        net.nodes[b].agent.pinned_key(&alice),
        Some(new_key().public().to_bytes()),
        "{}",
        net.render(None)
    );
    assert!(net.nodes[b].agent.changed_key(&alice).is_none());
    assert!(!notified(net, b, NotifyKind::Security));
    let told: Vec<String> = notices(net, b, NotifyKind::Info)
        .into_iter()
        .filter(|t| t.contains("moved to a new identity key"))
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(!net.nodes[b].agent.thread(id).unwrap().halted);
    assert!(!net.nodes[a].agent.thread(id).unwrap().halted);
}

#[test]
fn a_rotation_in_the_middle_of_a_thread_re_pins_and_the_thread_completes() {
    let (mut net, a, b) = dinner_net();
    let id = to_proposed(&mut net, a, b);
    rotate(&mut net, a);
    assert_eq!(registered(&net, a), Some(new_key().public().to_bytes()));
    assert_eq!(net.nodes[a].agent.public_key(), new_key().public());
    assert_eq!(rotated_events(&net, a), 1);
    assert_repinned_quietly(&net, a, b, &id);
    // The thread goes on under the new key to its end.
    let pa = net.prompt(a).unwrap();
    net.answer_resolution(a, pa.id, ResolutionAnswer::Confirm);
    let pb = net.prompt(b).unwrap();
    net.answer_resolution(b, pb.id, ResolutionAnswer::Confirm);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        state(&net, b, &id),
        "{}",
        net.render(None)
    );
    assert!(matches!(
        state(&net, a, &id),
        ThreadState::Executing | ThreadState::Completed
    ));
    assert!(!notified(&net, b, NotifyKind::Security));
}

#[test]
fn a_peer_that_was_offline_re_pins_from_the_statement() {
    let (mut net, a, b) = dinner_net();
    let id = to_proposed(&mut net, a, b);
    net.disconnect(b);
    rotate(&mut net, a);
    net.connect(b);
    net.settle();
    assert_repinned_quietly(&net, a, b, &id);
}

/// kill -9 of Alice's agent after the new key is stored and before the relay saw the
/// statement: restarted with the old key and given the new one again, it rotates.
#[test]
fn a_crash_before_the_relay_answers_is_finished_on_restart() {
    let (mut net, a, b) = dinner_net();
    let id = to_proposed(&mut net, a, b);
    net.disconnect(a);
    net.command(
        a,
        Command::RotateKey {
            new: Box::new(new_key()),
        },
    );
    net.crash_and_restart_agent(a, [44; 32]);
    assert_eq!(
        registered(&net, a),
        Some(IdentityKey::from_seed([1; 32]).public().to_bytes())
    );
    net.command(
        a,
        Command::RotateKey {
            new: Box::new(new_key()),
        },
    );
    net.connect(a);
    net.settle();
    net.connect(a);
    net.settle();
    assert_eq!(registered(&net, a), Some(new_key().public().to_bytes()));
    assert_eq!(rotated_events(&net, a), 1);
    assert_repinned_quietly(&net, a, b, &id);
}

/// kill -9 after the relay installed the statement, before the agent heard it: the old
/// key is `address_taken`, the new one authenticates, and the rotation is finished.
#[test]
fn a_crash_after_the_relay_installed_the_statement_is_finished_on_restart() {
    let (mut net, a, b) = dinner_net();
    let id = to_proposed(&mut net, a, b);
    let before = net.nodes[a].store.clone();
    net.command(
        a,
        Command::RotateKey {
            new: Box::new(new_key()),
        },
    );
    net.settle();
    assert_eq!(registered(&net, a), Some(new_key().public().to_bytes()));
    // The agent's records as they were before it heard `rotated`.
    net.nodes[a].store = before;
    net.crash_and_restart_agent(a, [45; 32]);
    net.command(
        a,
        Command::RotateKey {
            new: Box::new(new_key()),
        },
    );
    net.connect(a);
    net.settle();
    assert_eq!(net.nodes[a].agent.public_key(), new_key().public());
    assert!(rotated_events(&net, a) >= 1);
    assert!(!notified(&net, a, NotifyKind::Security));
    assert_repinned_quietly(&net, a, b, &id);
}

/// kill -9 after the rotation finished (the runtime already made the new key its
/// identity) and before the agent authenticated again: the peer still gets its notice
/// after the restart, and re-pins.
#[test]
fn a_crash_after_the_rotation_finished_still_sends_the_notice() {
    let (mut net, a, b) = dinner_net();
    let id = to_proposed(&mut net, a, b);
    let old = net.nodes[b].agent.pinned_key(&net.address(a));
    net.command(
        a,
        Command::RotateKey {
            new: Box::new(new_key()),
        },
    );
    net.settle();
    assert_eq!(rotated_events(&net, a), 1);
    assert_eq!(net.nodes[b].agent.pinned_key(&net.address(a)), old);
    net.nodes[a].identity = [91; 32];
    net.crash_and_restart_agent(a, [46; 32]);
    assert_eq!(net.nodes[a].agent.public_key(), new_key().public());
    net.connect(a);
    net.settle();
    assert_repinned_quietly(&net, a, b, &id);
}

/// An envelope under another key whose statement the pinned key did not sign still
/// halts and alerts, as any unsigned key change.
#[test]
fn a_statement_not_signed_by_the_pinned_key_still_halts() {
    let (mut net, a, b) = dinner_net();
    let id = to_proposed(&mut net, a, b);
    let impostor = IdentityKey::from_seed([66; 32]);
    let mallory_old = IdentityKey::from_seed([67; 32]);
    let bob = net.address(b);
    let mut statement = RotationStatement::sign(&bob, &mallory_old, &impostor, 1);
    // Claims to leave Bob's pinned key, without its signature.
    statement.old_key = IdentityKey::from_seed([2; 32]).public().to_bytes();
    let packet = json!({
        "protocol": "a2acp/0.2", "packet_id": "pkt_evil", "thread_id": id, "from": bob.as_str(),
        "to": net.address(a).as_str(), "timestamp": "2026-03-21T14:31:00Z", "type": "context_response",
        "context_provided": {"time_windows": ["03:00-04:00"]}
    });
    let mut s = ThreadSession::new([5; 32]);
    let mut env = s
        .seal(
            &impostor,
            &bob,
            &net.address(a),
            &net.nodes[a].agent.public_key(),
            &id,
            Direction::FromResponder,
            packet.to_string().as_bytes(),
        )
        .unwrap();
    env.rotation = Some(Box::new(statement));
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
    assert!(net.nodes[a].agent.thread(&id).unwrap().halted);
    assert_eq!(
        net.nodes[a].agent.pinned_key(&bob),
        Some(IdentityKey::from_seed([2; 32]).public().to_bytes())
    );
}

/// Rotates `a`'s key to `key` with the relay answering, and reconnects it.
fn rotate_to(net: &mut Net, a: usize, key: IdentityKey) {
    net.command(a, Command::RotateKey { new: Box::new(key) });
    net.settle();
    net.connect(a);
    net.settle();
}

/// Hands `a` an envelope Bob (`b`) sealed to `to_key` as the first packet of a new thread,
/// and returns the reasons of what `a` dropped.
fn deliver_new_thread_sealed_to(
    net: &mut Net,
    a: usize,
    b: usize,
    to_key: &IdentityKey,
) -> Vec<String> {
    let bob = net.address(b);
    let packet = json!({
        "protocol": "a2acp/0.2", "packet_id": "pkt_late", "thread_id": "thr_late", "from": bob.as_str(),
        "to": net.address(a).as_str(), "timestamp": "2026-03-21T14:31:00Z", "type": "context_response",
        "context_provided": {"time_windows": ["03:00-04:00"]}
    });
    let mut s = ThreadSession::new([6; 32]);
    let env = s
        .seal(
            &IdentityKey::from_seed([2; 32]),
            &bob,
            &net.address(a),
            &to_key.public(),
            "thr_late",
            Direction::FromInitiator,
            packet.to_string().as_bytes(),
        )
        .unwrap();
    let frame = crate::link::RelayFrame::Deliver { id: 9, env }.to_bytes();
    net.nodes[a].agent.handle(net.now, Input::Bytes(frame));
    let mut drops = Vec::new();
    while let Some(o) = net.nodes[a].agent.poll_output() {
        if let Output::Audit(r) = o {
            if let AgentEvent::Dropped { drop, .. } = &r.event {
                drops.push(format!("{drop:?}"));
            }
        }
    }
    drops
}

/// Alice rotates twice while Bob still holds her first key: what he seals to it opens
/// (she keeps the last [`RETIRED_KEYS_KEPT`] keys she left, not only the last one).
#[test]
fn a_packet_sealed_to_the_key_before_last_still_opens() {
    use crate::agent::link::rotation::RETIRED_KEYS_KEPT;
    let (mut net, a, b) = dinner_net();
    let first = IdentityKey::from_seed([1; 32]);
    rotate_to(&mut net, a, IdentityKey::from_seed([91; 32]));
    rotate_to(&mut net, a, IdentityKey::from_seed([92; 32]));
    assert_eq!(
        registered(&net, a),
        Some(IdentityKey::from_seed([92; 32]).public().to_bytes())
    );
    let drops = deliver_new_thread_sealed_to(&mut net, a, b, &first);
    assert!(!drops.iter().any(|d| d.contains("decryption")), "{drops:?}");
    // Beyond the bound the oldest key is forgotten: refused, and nothing changes.
    for i in 0..RETIRED_KEYS_KEPT as u8 {
        rotate_to(&mut net, a, IdentityKey::from_seed([93 + i; 32]));
    }
    let drops = deliver_new_thread_sealed_to(&mut net, a, b, &first);
    assert!(drops.iter().any(|d| d.contains("decryption")), "{drops:?}");
}

/// Alice rotates, and her process restarts (the runtime now gives her the new key): what
/// Bob sealed to her old key, before he learnt the new one, still opens.
#[test]
fn a_packet_sealed_to_a_retired_key_opens_after_a_restart() {
    let (mut net, a, b) = dinner_net();
    let first = IdentityKey::from_seed([1; 32]);
    rotate_to(&mut net, a, new_key());
    net.nodes[a].identity = [91; 32];
    net.crash_and_restart_agent(a, [47; 32]);
    assert_eq!(net.nodes[a].agent.public_key(), new_key().public());
    let drops = deliver_new_thread_sealed_to(&mut net, a, b, &first);
    assert!(!drops.iter().any(|d| d.contains("decryption")), "{drops:?}");
}

/// Hands `b` a new thread's first packet from `a` sealed under `from` (Alice's key after
/// her rotations) carrying `chain` (oldest first; the last is the envelope's
/// `rotation`), and returns the kinds of what `b` told its user.
fn deliver_from_rotated(
    net: &mut Net,
    a: usize,
    b: usize,
    from: &IdentityKey,
    chain: Vec<RotationStatement>,
) -> Vec<NotifyKind> {
    deliver_thread_from(net, a, b, from, chain, "thr_chain")
}

/// [`deliver_from_rotated`] for the thread `id`.
fn deliver_thread_from(
    net: &mut Net,
    a: usize,
    b: usize,
    from: &IdentityKey,
    chain: Vec<RotationStatement>,
    id: &str,
) -> Vec<NotifyKind> {
    let (alice, bob) = (net.address(a), net.address(b));
    let packet = json!({
        "protocol": "a2acp/0.2", "packet_id": format!("pkt_{id}"), "thread_id": id,
        "from": alice.as_str(), "to": bob.as_str(), "timestamp": "2026-03-21T14:31:00Z",
        "type": "context", "intent": {"category": "scheduling", "summary": "Tea"},
        "context": {"time_windows": ["15:00-16:00"]}
    });
    let mut s = ThreadSession::new([8; 32]);
    let mut env = s
        .seal(
            from,
            &alice,
            &bob,
            &net.nodes[b].agent.public_key(),
            id,
            Direction::FromInitiator,
            packet.to_string().as_bytes(),
        )
        .unwrap();
    let mut chain = chain;
    env.rotation = chain.pop().map(Box::new);
    env.earlier_rotations = chain;
    let frame = crate::link::RelayFrame::Deliver { id: 11, env }.to_bytes();
    net.nodes[b].agent.handle(net.now, Input::Bytes(frame));
    let mut kinds = Vec::new();
    while let Some(o) = net.nodes[b].agent.poll_output() {
        if let Output::Notify(n) = o {
            kinds.push(n.kind);
        }
    }
    kinds
}

/// Bob missed two rotations of Alice's in a row: her envelope carries both statements,
/// and he follows them from the key he pinned to her current one without halting.
#[test]
fn a_peer_two_rotations_behind_re_pins_from_the_chain() {
    let (mut net, a, b) = dinner_net();
    let id = to_proposed(&mut net, a, b);
    let alice = net.address(a);
    let (k1, k2, k3) = (
        IdentityKey::from_seed([1; 32]),
        IdentityKey::from_seed([91; 32]),
        IdentityKey::from_seed([92; 32]),
    );
    let s1 = RotationStatement::sign(&alice, &k1, &k2, 1);
    let s2 = RotationStatement::sign(&alice, &k2, &k3, 2);
    // Only the latest statement: it does not start from Bob's pin, so it is a key change.
    let (mut net2, a2, b2) = dinner_net();
    let id2 = to_proposed(&mut net2, a2, b2);
    let told = deliver_from_rotated(&mut net2, a2, b2, &k3, vec![s2.clone()]);
    assert!(told.contains(&NotifyKind::Security), "{told:?}");
    assert!(net2.nodes[b2].agent.thread(&id2).unwrap().halted);
    // Both: re-pinned, nothing halted, one notice.
    let told = deliver_from_rotated(&mut net, a, b, &k3, vec![s1, s2]);
    assert!(!told.contains(&NotifyKind::Security), "{told:?}");
    assert_eq!(
        told.iter().filter(|k| **k == NotifyKind::Info).count(),
        1,
        "{told:?}"
    );
    assert_eq!(
        net.nodes[b].agent.pinned_key(&alice),
        Some(k3.public().to_bytes())
    );
    assert!(!net.nodes[b].agent.thread(&id).unwrap().halted);
}

/// Swarm seed 690: a packet Alice sealed under her old key before rotating, delivered
/// after one under her new key (the relay serves its queues thread by thread), is handled
/// — it was authentic when she sent it — not dropped.
#[test]
fn a_packet_sealed_before_the_peer_rotated_is_handled_after_the_re_pin() {
    let (mut net, a, b) = dinner_net();
    to_proposed(&mut net, a, b);
    let alice = net.address(a);
    let (k1, k2) = (
        IdentityKey::from_seed([1; 32]),
        IdentityKey::from_seed([91; 32]),
    );
    let s1 = RotationStatement::sign(&alice, &k1, &k2, 1);
    deliver_thread_from(&mut net, a, b, &k2, vec![s1], "thr_new");
    assert_eq!(
        net.nodes[b].agent.pinned_key(&alice),
        Some(k2.public().to_bytes())
    );
    let told = deliver_thread_from(&mut net, a, b, &k1, Vec::new(), "thr_old");
    assert!(!told.contains(&NotifyKind::Security), "{told:?}");
    assert!(net.nodes[b].agent.thread("thr_old").is_some());
    assert_eq!(
        net.nodes[b].agent.pinned_key(&alice),
        Some(k2.public().to_bytes())
    );
}

/// A chain with a link the pinned key did not lead to (a statement from another key in
/// the middle) moves nothing: a key change, halted and told.
#[test]
fn a_chain_with_a_forged_link_still_halts() {
    let (mut net, a, b) = dinner_net();
    let id = to_proposed(&mut net, a, b);
    let alice = net.address(a);
    let k1 = IdentityKey::from_seed([1; 32]);
    let mallory = IdentityKey::from_seed([66; 32]);
    let (k2, k3) = (
        IdentityKey::from_seed([91; 32]),
        IdentityKey::from_seed([92; 32]),
    );
    let s1 = RotationStatement::sign(&alice, &k1, &k2, 1);
    let forged = RotationStatement::sign(&alice, &mallory, &k3, 2);
    let told = deliver_from_rotated(&mut net, a, b, &k3, vec![s1, forged]);
    assert!(told.contains(&NotifyKind::Security), "{told:?}");
    assert!(net.nodes[b].agent.thread(&id).unwrap().halted);
    assert_eq!(
        net.nodes[b].agent.pinned_key(&alice),
        Some(k1.public().to_bytes())
    );
}

/// The frames `agent` sent in answer to `frame`.
fn answer(agent: &mut Agent, now: Timestamp, frame: crate::link::RelayFrame) -> Vec<ClientFrame> {
    agent.handle(now, Input::Bytes(frame.to_bytes()));
    let mut sent = Vec::new();
    while let Some(o) = agent.poll_output() {
        if let Output::Send(b) = o {
            sent.extend(ClientFrame::from_bytes(&b));
        }
    }
    sent
}

/// Swarm seed 138: the relay installed the statement but the agent never heard
/// `rotated`; on the next connection its old key got `address_taken` — and the same
/// answer again (late, or repeated) after it had registered with the new key. One
/// refusal of the new key is not final: the agent tries the old key once more instead of
/// staying offline, and the relay's `auth_ok` of the new key finishes the rotation.
#[test]
fn a_repeated_address_taken_while_rotating_does_not_strand_the_agent() {
    use crate::link::{ErrorCode, RelayFrame};
    let now = Timestamp::parse_rfc3339("2026-03-21T14:30:00Z").unwrap();
    let old = IdentityKey::from_seed([1; 32]);
    let mut agent = Agent::new(dinner::alice("a2acp.io"), old.clone(), [11; 32]);
    while agent.poll_output().is_some() {}
    agent.handle(
        now,
        Input::Command(Command::RotateKey {
            new: Box::new(new_key()),
        }),
    );
    agent.handle(now, Input::Connected);
    let challenge = |n: u8| RelayFrame::Challenge {
        nonce: [n; 32],
        domain: "a2acp.io".into(),
        ts: now.as_millis(),
    };
    let taken = || RelayFrame::Error {
        code: ErrorCode::AddressTaken,
        message: "address is registered with another key".into(),
        seq: None,
    };
    let key_of = |frames: &[ClientFrame]| match frames {
        [ClientFrame::Register { key, .. }] => *key,
        other => panic!("expected one register, got {other:?}"),
    };
    assert_eq!(
        key_of(&answer(&mut agent, now, challenge(1))),
        old.public().to_bytes()
    );
    assert!(answer(&mut agent, now, taken()).is_empty());
    assert_eq!(
        key_of(&answer(&mut agent, now, challenge(2))),
        new_key().public().to_bytes()
    );
    // The same refusal again, then the relay's answer to the new key.
    answer(&mut agent, now, taken());
    answer(
        &mut agent,
        now,
        RelayFrame::AuthOk {
            address: dinner::alice("a2acp.io").address,
            queued: 0,
        },
    );
    assert_eq!(agent.public_key(), new_key().public());
    assert!(agent.link_refusal().is_none());
}
