//! Recovery after a lost device (SPEC-NOTES "Recovery"): the agent binds its recovery key
//! (again after a rotation); a peer whose pinned key is replaced by a verified recovery
//! halts its threads and tells its user it is a recovery; accepted, a new thread works; a
//! recovery that does not verify from the pin is an unsigned key change.

use super::support::*;
use crate::agent::*;
use crate::harness::Net;
use crate::link::{ClientFrame, RelayFrame};
use crate::recovery::{recovery_key_from_seed, RecoveryBinding, RecoveryProof, RecoveryStatement};

fn rk() -> IdentityKey {
    recovery_key_from_seed([81; 32])
}

const NEW_SEED: [u8; 32] = [93; 32];

fn bind(net: &mut Net, a: usize) {
    net.command(
        a,
        Command::BindRecovery {
            recovery_key: rk().public().to_bytes(),
        },
    );
    net.settle();
}

fn bound_events(net: &Net, i: usize) -> usize {
    net.nodes[i]
        .audit
        .iter()
        .filter(|r| matches!(r.event, AgentEvent::OwnRecoveryBound { .. }))
        .count()
}

/// Recovers `a`'s address onto the key of [`NEW_SEED`] with `recovery`, through a bare
/// client; the frames the relay answered.
fn recover(net: &mut Net, a: usize, recovery: &IdentityKey) -> Vec<RelayFrame> {
    let c = net.add_client();
    net.connect_client(c);
    net.settle();
    net.client_inbox(c);
    let address = net.address(a);
    net.client_send(
        c,
        ClientFrame::RecoverStart {
            address: address.clone(),
        }
        .to_bytes(),
    );
    net.settle();
    let info: Vec<RelayFrame> = net
        .client_inbox(c)
        .iter()
        .filter_map(|b| RelayFrame::from_bytes(b).ok())
        .collect();
    let Some(RelayFrame::RecoverInfo { key, .. }) = info.first() else {
        return info;
    };
    let s = RecoveryStatement::sign(&address, key, &IdentityKey::from_seed(NEW_SEED), recovery);
    net.client_send(c, ClientFrame::Recover { statement: s }.to_bytes());
    net.settle();
    net.client_inbox(c)
        .iter()
        .filter_map(|b| RelayFrame::from_bytes(b).ok())
        .collect()
}

#[test]
fn the_binding_is_sent_confirmed_and_signed_again_after_a_rotation() {
    let (mut net, a, _b) = dinner_net();
    bind(&mut net, a);
    let alice = net.address(a);
    let b1 = net.relay.recovery_binding(&alice).cloned().expect("bound");
    assert_eq!(b1.recovery_key, rk().public().to_bytes());
    assert_eq!(bound_events(&net, a), 1);
    // Not sent again at the next connection once confirmed.
    net.disconnect(a);
    net.connect(a);
    net.settle();
    assert_eq!(bound_events(&net, a), 1);
    // After a rotation the new key signs it again.
    let new = IdentityKey::from_seed([91; 32]);
    net.command(
        a,
        Command::RotateKey {
            new: Box::new(new.clone()),
        },
    );
    net.settle();
    net.connect(a);
    net.settle();
    let b2 = net.relay.recovery_binding(&alice).cloned().expect("bound");
    assert_eq!(b2.identity_key, new.public().to_bytes());
    assert_eq!(b2.seq, 2);
    assert_eq!(bound_events(&net, a), 2);
}

#[test]
fn a_recovered_peer_halts_with_a_recovery_notice_and_a_new_thread_works_once_accepted() {
    let (mut net, a, b) = dinner_net();
    bind(&mut net, a);
    let id = to_proposed(&mut net, a, b);
    net.lose_device(a, NEW_SEED, [12; 32]);
    // (The relay closes the connection right after `recovered`: the harness's client
    // may not see it; the registry says what happened.)
    recover(&mut net, a, &rk());
    let alice = net.address(a);
    let new = IdentityKey::from_seed(NEW_SEED);
    assert_eq!(
        net.relay.registered_key(&alice),
        Some(new.public().to_bytes())
    );
    // The new device registers with its key and binds the recovery key again.
    net.connect(a);
    net.settle();
    bind(&mut net, a);
    assert_eq!(
        net.relay.recovery_binding(&alice).unwrap().identity_key,
        new.public().to_bytes()
    );
    // Alice starts a new dinner; Bob halts the old thread and is told it is a recovery.
    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: crate::harness::dinner::intent(),
            context: crate::harness::dinner::context(),
        },
    );
    net.settle();
    assert!(net.nodes[b].agent.thread(&id).unwrap().halted);
    let told: Vec<String> = notices(&net, b, NotifyKind::Security)
        .into_iter()
        .filter(|t| t.contains("recovered its address"))
        .collect();
    assert_eq!(told.len(), 1, "{}", net.render(None));
    assert!(net.nodes[b]
        .audit
        .iter()
        .any(|r| matches!(r.event, AgentEvent::PeerRecovered { .. })));
    assert_eq!(
        net.nodes[b].agent.changed_key(&alice),
        Some(new.public().to_bytes())
    );
    // Bob accepts after comparing safety numbers: the old thread closes, a new one works.
    net.command(
        b,
        Command::AcceptKeyChange {
            address: alice.clone(),
        },
    );
    net.settle();
    assert!(net.nodes[b].agent.thread(&id).unwrap().state.is_terminal());
    // The dinner Alice started meanwhile was held, not lost: Bob's agent opens it now.
    let held: Vec<&String> = net.nodes[a].agent.threads().keys().collect();
    assert_eq!(held.len(), 1);
    assert!(
        net.nodes[b].agent.thread(held[0]).is_some(),
        "{}",
        net.render(None)
    );
}

#[test]
fn a_recovery_with_the_wrong_words_is_refused_and_nothing_changes() {
    let (mut net, a, b) = dinner_net();
    bind(&mut net, a);
    let id = to_proposed(&mut net, a, b);
    let frames = recover(&mut net, a, &recovery_key_from_seed([82; 32]));
    assert!(
        matches!(frames.as_slice(), [RelayFrame::RecoverRefused { reason, .. }] if reason == "wrong_recovery_key"),
        "{frames:?}"
    );
    assert_eq!(
        net.relay.registered_key(&net.address(a)),
        Some(IdentityKey::from_seed([1; 32]).public().to_bytes())
    );
    assert!(!net.nodes[b].agent.thread(&id).unwrap().halted);
}

/// A lookup answer whose recovery does not verify from Bob's pin: an unsigned key change
/// (halt and the usual alert), and a warning that the recovery does not verify.
#[test]
fn a_recovery_that_does_not_verify_from_the_pin_is_an_unsigned_change() {
    let (mut net, a, b) = dinner_net();
    let id = to_proposed(&mut net, a, b);
    let alice = net.address(a);
    let mallory = IdentityKey::from_seed([66; 32]);
    let impostor = IdentityKey::from_seed([67; 32]);
    let old = IdentityKey::from_seed([1; 32]).public().to_bytes();
    // A binding signed by mallory's key, not by the pinned one.
    let proof = RecoveryProof {
        binding: RecoveryBinding::sign(&alice, &mallory, &rk().public().to_bytes(), 1),
        statement: RecoveryStatement::sign(&alice, &old, &impostor, &rk()),
    };
    let frame = RelayFrame::Key {
        address: alice.clone(),
        key: Some(impostor.public().to_bytes()),
        rotation: None,
        recovery: Some(Box::new(proof)),
    }
    .to_bytes();
    net.nodes[b].agent.handle(net.now, Input::Bytes(frame));
    let mut texts = Vec::new();
    while let Some(o) = net.nodes[b].agent.poll_output() {
        if let Output::Notify(n) = o {
            texts.push(n.text);
        }
    }
    assert!(
        texts.iter().any(|t| t.contains("does not verify")),
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|t| t.contains("identity key of")),
        "{texts:?}"
    );
    assert!(!texts.iter().any(|t| t.contains("recovered its address")));
    assert!(net.nodes[b].agent.thread(&id).unwrap().halted);
    assert_eq!(net.nodes[b].agent.pinned_key(&alice), Some(old));
}
