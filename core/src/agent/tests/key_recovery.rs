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
    start_dinner(&mut net, a, b);
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

/// An agent fed frames by hand, its records kept.
struct ByHand {
    agent: Agent,
    records: std::collections::BTreeMap<String, Vec<u8>>,
    now: Timestamp,
}

impl ByHand {
    /// The frames the agent sends for `input`.
    fn step(&mut self, input: Input) -> Vec<ClientFrame> {
        self.agent.handle(self.now, input);
        let mut sent = Vec::new();
        while let Some(o) = self.agent.poll_output() {
            match o {
                Output::Send(b) => sent.extend(ClientFrame::from_bytes(&b)),
                Output::Persist(op) => crate::persist::apply(&mut self.records, &op),
                _ => {}
            }
        }
        sent
    }

    /// Connects and authenticates; the frames sent once authenticated.
    fn online(&mut self) -> Vec<ClientFrame> {
        self.step(Input::Connected);
        let challenge = RelayFrame::Challenge {
            nonce: [3; 32],
            domain: "a2acp.io".into(),
            ts: self.now.as_millis(),
        };
        self.step(Input::Bytes(challenge.to_bytes()));
        let ok = RelayFrame::AuthOk {
            address: self.agent.address().clone(),
            queued: 0,
        };
        self.step(Input::Bytes(ok.to_bytes()))
    }
}

fn binds(frames: &[ClientFrame]) -> usize {
    frames
        .iter()
        .filter(|f| matches!(f, ClientFrame::BindRecovery { .. }))
        .count()
}

/// A relay that keeps no recovery keys (a cluster relay) refuses the binding: the agent
/// keeps the refusal (for `status`, and across a restart), tells its user once, does not
/// send the binding again at each connection, and sends a new one when asked.
#[test]
fn a_refused_binding_is_kept_and_not_sent_again_until_signed_again() {
    use crate::link::ErrorCode;
    let id = IdentityKey::from_seed([1; 32]);
    let config = crate::harness::dinner::alice("a2acp.io");
    let mut dev = ByHand {
        agent: Agent::new(config.clone(), id.clone(), [11; 32]),
        records: Default::default(),
        now: Timestamp::parse_rfc3339("2026-03-21T14:30:00Z").unwrap(),
    };
    dev.step(Input::Command(Command::BindRecovery {
        recovery_key: rk().public().to_bytes(),
    }));
    assert_eq!(binds(&dev.online()), 1);
    let refused = RelayFrame::Error {
        code: ErrorCode::RecoveryRefused,
        message: "cluster: this relay keeps no recovery keys".into(),
        seq: None,
    };
    dev.step(Input::Bytes(refused.to_bytes()));
    dev.step(Input::Bytes(refused.to_bytes()));
    let state = dev.agent.recovery_key_state().unwrap();
    assert!(!state.bound);
    assert_eq!(
        state.refused.as_deref(),
        Some("cluster: this relay keeps no recovery keys")
    );
    // Not again at the next connection; kept across a restart.
    dev.step(Input::Disconnected);
    assert_eq!(binds(&dev.online()), 0);
    let records = dev.records.clone();
    dev.agent = Agent::restore(config, id, [11; 32], records).unwrap();
    while dev.agent.poll_output().is_some() {}
    assert!(dev.agent.recovery_key_state().unwrap().refused.is_some());
    assert_eq!(binds(&dev.online()), 0);
    // A new recovery key: signed again and sent, the refusal gone.
    let sent = dev.step(Input::Command(Command::BindRecovery {
        recovery_key: recovery_key_from_seed([82; 32]).public().to_bytes(),
    }));
    assert_eq!(binds(&sent), 1);
    assert!(dev.agent.recovery_key_state().unwrap().refused.is_none());
}
