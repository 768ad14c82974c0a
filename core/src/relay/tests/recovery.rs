//! Recovery at the relay (SPEC-NOTES "Recovery"): the binding's install and replace rules,
//! a recovery accepted, one signed by the wrong key, a replay, and the rate limit across a
//! restart.

use super::*;
use crate::recovery::{RecoveryBinding, RecoveryStatement};

fn bind(h: &mut H, conn: u64, b: &RecoveryBinding) -> Vec<RelayFrame> {
    h.input(conn, &ClientFrame::BindRecovery { binding: b.clone() })
}

fn refusal(frames: &[RelayFrame]) -> Option<String> {
    frames.iter().find_map(|f| match f {
        RelayFrame::Error {
            code: ErrorCode::RecoveryRefused,
            message,
            ..
        } => Some(message.clone()),
        _ => None,
    })
}

fn recover_refusal(frames: &[RelayFrame]) -> Option<(String, Option<u64>)> {
    frames.iter().find_map(|f| match f {
        RelayFrame::RecoverRefused {
            reason,
            retry_after,
            ..
        } => Some((reason.clone(), *retry_after)),
        _ => None,
    })
}

/// The recovery key of these tests.
fn rk() -> IdentityKey {
    crate::recovery::recovery_key_from_seed([77; 32])
}

/// Alice (conn 1, key 1) and Bob (conn 2) with Alice's recovery key bound.
fn bound() -> (H, IdentityKey, IdentityKey) {
    let (mut h, a, b) = alice_and_bob();
    let binding = RecoveryBinding::sign(&addr("alice"), &a, &rk().public().to_bytes(), 1);
    assert_eq!(
        bind(&mut h, 1, &binding),
        vec![RelayFrame::RecoveryBound { seq: 1 }]
    );
    (h, a, b)
}

/// Sends `recover_start` then `recover` for `new` with `recovery` on a fresh connection.
fn recover(h: &mut H, conn: u64, new: &IdentityKey, recovery: &IdentityKey) -> Vec<RelayFrame> {
    h.connect(conn);
    let frames = h.input(
        conn,
        &ClientFrame::RecoverStart {
            address: addr("alice"),
        },
    );
    let Some(RelayFrame::RecoverInfo { key, .. }) = frames.first() else {
        return frames;
    };
    let s = RecoveryStatement::sign(&addr("alice"), key, new, recovery);
    h.input(conn, &ClientFrame::Recover { statement: s })
}

#[test]
fn a_binding_is_installed_durably_and_replaced_only_by_the_current_key() {
    let (mut h, a, _b) = bound();
    assert!(h.store.contains_key("rk/agent:alice@localhost"));
    // The same binding again is answered again; an older or equal number is refused.
    let same = RecoveryBinding::sign(&addr("alice"), &a, &rk().public().to_bytes(), 1);
    assert_eq!(
        bind(&mut h, 1, &same),
        vec![RelayFrame::RecoveryBound { seq: 1 }]
    );
    let other = crate::recovery::recovery_key_from_seed([78; 32]);
    let stale = RecoveryBinding::sign(&addr("alice"), &a, &other.public().to_bytes(), 1);
    let msg = refusal(&bind(&mut h, 1, &stale)).expect("refused");
    assert!(msg.starts_with("stale_seq"), "{msg}");
    // Signed by another key than alice's current one.
    let mallory = ident(66);
    let forged = RecoveryBinding::sign(&addr("alice"), &mallory, &other.public().to_bytes(), 2);
    let msg = refusal(&bind(&mut h, 1, &forged)).expect("refused");
    assert!(msg.starts_with("not_current_key"), "{msg}");
    // Bob cannot bind alice's address; a tampered signature is refused.
    let mut t = RecoveryBinding::sign(&addr("alice"), &a, &other.public().to_bytes(), 2);
    let msg = refusal(&bind(&mut h, 2, &t)).expect("refused");
    assert!(msg.starts_with("wrong_address"), "{msg}");
    t.seq = 3;
    let msg = refusal(&bind(&mut h, 1, &t)).expect("refused");
    assert!(msg.starts_with("identity_signature"), "{msg}");
    assert_eq!(
        h.relay
            .recovery_binding(&addr("alice"))
            .unwrap()
            .recovery_key,
        rk().public().to_bytes()
    );
    // A later number from the current key replaces it.
    let next = RecoveryBinding::sign(&addr("alice"), &a, &other.public().to_bytes(), 2);
    assert_eq!(
        bind(&mut h, 1, &next),
        vec![RelayFrame::RecoveryBound { seq: 2 }]
    );
    // Unauthenticated: refused.
    h.connect(9);
    let frames = bind(&mut h, 9, &next);
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::NotAuthenticated, None))
    );
    // A malformed one.
    let frames = h.bytes(
        1,
        br#"{"t":"bind_recovery","binding":{"type":"recovery_key"}}"#,
    );
    assert_eq!(error_code(&frames), Some((ErrorCode::Malformed, None)));
}

#[test]
fn a_binding_follows_a_rotation() {
    let (mut h, a, _b) = bound();
    let a2 = ident(11);
    let s = crate::rotation::RotationStatement::sign(&addr("alice"), &a, &a2, 1);
    h.input(1, &ClientFrame::Rotate { statement: s });
    // The binding signed by the old key still recovers the address.
    let new = ident(21);
    let frames = recover(&mut h, 5, &new, &rk());
    assert_eq!(
        frames,
        vec![RelayFrame::Recovered {
            address: addr("alice")
        }]
    );
    // The new key binds with its own numbers (1 again).
    h.register(6, "alice", &new);
    let b = RecoveryBinding::sign(&addr("alice"), &new, &rk().public().to_bytes(), 1);
    assert_eq!(
        bind(&mut h, 6, &b),
        vec![RelayFrame::RecoveryBound { seq: 1 }]
    );
}

#[test]
fn a_recovery_is_installed_durably_and_lookups_carry_the_chain() {
    let (mut h, a, b) = bound();
    let new = ident(21);
    let frames = recover(&mut h, 5, &new, &rk());
    assert_eq!(
        frames,
        vec![RelayFrame::Recovered {
            address: addr("alice")
        }]
    );
    // Persisted before the answer; the recovering connection and the lost device's
    // connection are closed.
    let persist = h
        .outs
        .iter()
        .position(|o| matches!(o, RelayOutput::Persist(PersistOp::Put { key, .. }) if key == "reg/agent:alice@localhost"))
        .unwrap();
    let send = h
        .outs
        .iter()
        .position(|o| matches!(o, RelayOutput::Send { conn, .. } if conn.0 == 5))
        .unwrap();
    assert!(persist < send);
    assert!(h.closed().contains(&(5, ErrorCode::NotAuthenticated)));
    assert!(h.closed().contains(&(1, ErrorCode::NotAuthenticated)));
    assert!(h.events().contains(&RelayEvent::Recovered {
        address: addr("alice")
    }));
    assert_eq!(
        h.relay.registered_key(&addr("alice")),
        Some(new.public().to_bytes())
    );
    // The old key no longer authenticates; the new one does.
    h.connect(6);
    let f = h.auth_frame(6, "alice", &a);
    assert_eq!(
        error_code(&h.input(6, &f)),
        Some((ErrorCode::AuthFailed, None))
    );
    h.login(7, "alice", &new);
    // Bob's lookup carries the binding and the statement, a chain from the old key.
    let check = |h: &mut H| {
        let frames = h.input(
            2,
            &ClientFrame::Lookup {
                address: addr("alice"),
            },
        );
        match &frames[0] {
            RelayFrame::Key {
                key: Some(k),
                recovery: Some(p),
                rotation: None,
                ..
            } => {
                assert_eq!(*k, new.public().to_bytes());
                assert!(p
                    .verify_from(&addr("alice"), &a.public().to_bytes())
                    .is_some());
            }
            other => panic!("{other:?}"),
        }
    };
    check(&mut h);
    // A restart keeps it all.
    let store = h.store.clone();
    let relay = Relay::restore(RelayConfig::default(), [9; 32], store).unwrap();
    let mut h = H::from_relay(relay);
    h.register(2, "bob", &b);
    check(&mut h);
    assert!(h.relay.recovery_binding(&addr("alice")).is_some());
}

#[test]
fn a_recovery_signed_by_the_wrong_key_or_replayed_is_refused() {
    let (mut h, a, _b) = bound();
    let wrong = crate::recovery::recovery_key_from_seed([99; 32]);
    let frames = recover(&mut h, 5, &ident(21), &wrong);
    assert_eq!(
        recover_refusal(&frames),
        Some(("wrong_recovery_key".into(), None))
    );
    // Naming the bound recovery key, signed by another.
    h.connect(6);
    let mut forged =
        RecoveryStatement::sign(&addr("alice"), &a.public().to_bytes(), &ident(21), &wrong);
    forged.recovery_key = rk().public().to_bytes();
    let frames = h.input(6, &ClientFrame::Recover { statement: forged });
    assert_eq!(
        recover_refusal(&frames),
        Some(("recovery_signature".into(), None))
    );
    // An address with no binding, one not on this relay's domain.
    h.connect(7);
    let frames = h.input(
        7,
        &ClientFrame::RecoverStart {
            address: addr("bob"),
        },
    );
    assert_eq!(recover_refusal(&frames), Some(("no_binding".into(), None)));
    let elsewhere = Address::parse("agent:alice@example.org").unwrap();
    let s = RecoveryStatement::sign(&elsewhere, &a.public().to_bytes(), &ident(21), &rk());
    let frames = h.input(7, &ClientFrame::Recover { statement: s });
    assert_eq!(
        recover_refusal(&frames),
        Some(("wrong_address".into(), None))
    );
    assert_eq!(
        h.relay.registered_key(&addr("alice")),
        Some(a.public().to_bytes())
    );
    // A good one, then the same statement again: its old key is no longer current.
    let new = ident(21);
    let s = RecoveryStatement::sign(&addr("alice"), &a.public().to_bytes(), &new, &rk());
    h.connect(8);
    assert!(matches!(
        h.input(
            8,
            &ClientFrame::Recover {
                statement: s.clone()
            }
        )[0],
        RelayFrame::Recovered { .. }
    ));
    h.connect(9);
    let frames = h.input(9, &ClientFrame::Recover { statement: s });
    assert_eq!(
        recover_refusal(&frames),
        Some(("not_current_key".into(), None))
    );
    assert_eq!(
        h.relay.registered_key(&addr("alice")),
        Some(new.public().to_bytes())
    );
    // Authenticated connections cannot send recovery frames.
    let frames = h.input(
        2,
        &ClientFrame::RecoverStart {
            address: addr("alice"),
        },
    );
    assert_eq!(error_code(&frames), Some((ErrorCode::AuthFailed, None)));
}

#[test]
fn recovery_attempts_are_limited_per_address_across_a_restart() {
    let (mut h, a, _b) = bound();
    let wrong = crate::recovery::recovery_key_from_seed([99; 32]);
    // Each attempt from another source: the address's limit is what stops them.
    let attempt = |h: &mut H, n: u64| {
        h.connect_from(100 + n, Source(1000 + u128::from(n)));
        let s = RecoveryStatement::sign(&addr("alice"), &a.public().to_bytes(), &ident(21), &wrong);
        h.input(100 + n, &ClientFrame::Recover { statement: s })
    };
    for n in 0..u64::from(RECOVER_PER_ADDRESS) {
        assert_eq!(
            recover_refusal(&attempt(&mut h, n)),
            Some(("wrong_recovery_key".into(), None))
        );
    }
    let frames = attempt(&mut h, 10);
    let (reason, retry) = recover_refusal(&frames).unwrap();
    assert_eq!(reason, "rate_limited");
    assert_eq!(retry, Some(3600));
    // Even the right words wait now.
    h.connect_from(50, Source(50));
    let s = RecoveryStatement::sign(&addr("alice"), &a.public().to_bytes(), &ident(21), &rk());
    let frames = h.input(
        50,
        &ClientFrame::Recover {
            statement: s.clone(),
        },
    );
    assert_eq!(recover_refusal(&frames).unwrap().0, "rate_limited");
    // A restart does not reset the window.
    h.now = h.now.add(Duration::from_secs(600));
    let store = h.store.clone();
    let relay = Relay::restore(RelayConfig::default(), [9; 32], store).unwrap();
    let mut h = H::from_relay(relay);
    h.now = T0.add(Duration::from_secs(600));
    h.connect_from(51, Source(51));
    let frames = h.input(
        51,
        &ClientFrame::Recover {
            statement: s.clone(),
        },
    );
    assert_eq!(
        recover_refusal(&frames),
        Some(("rate_limited".into(), Some(3000)))
    );
    // After the window, the right words work.
    h.now = T0.add(RECOVER_WINDOW);
    h.connect_from(52, Source(52));
    let frames = h.input(52, &ClientFrame::Recover { statement: s });
    assert!(
        matches!(frames[0], RelayFrame::Recovered { .. }),
        "{frames:?}"
    );
}

#[test]
fn recovery_attempts_are_limited_per_source() {
    let (mut h, _a, _b) = bound();
    for n in 0..u64::from(RECOVER_PER_SOURCE) {
        h.connect_from(100 + n, Source(7));
        let frames = h.input(
            100 + n,
            &ClientFrame::RecoverStart {
                address: addr("alice"),
            },
        );
        assert!(
            matches!(frames[0], RelayFrame::RecoverInfo { .. }),
            "{frames:?}"
        );
    }
    h.connect_from(200, Source(7));
    let frames = h.input(
        200,
        &ClientFrame::RecoverStart {
            address: addr("alice"),
        },
    );
    assert_eq!(recover_refusal(&frames).unwrap().0, "rate_limited");
    // Another source is not affected.
    h.connect_from(201, Source(8));
    let frames = h.input(
        201,
        &ClientFrame::RecoverStart {
            address: addr("bob"),
        },
    );
    assert_eq!(recover_refusal(&frames).unwrap().0, "no_binding");
}

#[test]
fn malformed_recovery_frames_are_refused_and_change_nothing() {
    let (mut h, a, _b) = bound();
    h.connect(5);
    for bad in [
        &br#"{"t":"recover","statement":{"type":"key_recovery"}}"#[..],
        br#"{"t":"recover","statement":{"type":"key_recovery","address":"agent:alice@localhost","old_key":"AA","new_key":"AA","recovery_key":"AA","recovery_sig":"AA","new_sig":"AA"}}"#,
        br#"{"t":"recover_start","address":"not an address"}"#,
        br#"{"t":"recover_start"}"#,
    ] {
        let frames = h.bytes(5, bad);
        assert_eq!(error_code(&frames), Some((ErrorCode::Malformed, None)), "{frames:?}");
    }
    // Keys that are not points.
    let mut s = RecoveryStatement::sign(&addr("alice"), &a.public().to_bytes(), &ident(21), &rk());
    s.new_key = [0xff; 32];
    h.connect(6);
    let frames = h.input(6, &ClientFrame::Recover { statement: s });
    assert!(recover_refusal(&frames).is_some(), "{frames:?}");
    assert_eq!(
        h.relay.registered_key(&addr("alice")),
        Some(a.public().to_bytes())
    );
}
