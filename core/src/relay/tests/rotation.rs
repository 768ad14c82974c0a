//! `rotate`: the relay installs a rotation statement atomically and durably, and refuses a
//! replay, a statement signed by another key and a malformed one (SPEC-NOTES "Key
//! rotation").

use super::*;
use crate::rotation::RotationStatement;

fn rotate(h: &mut H, conn: u64, s: &RotationStatement) -> Vec<RelayFrame> {
    h.input(
        conn,
        &ClientFrame::Rotate {
            statement: s.clone(),
        },
    )
}

fn refusal(frames: &[RelayFrame]) -> Option<String> {
    frames.iter().find_map(|f| match f {
        RelayFrame::Error {
            code: ErrorCode::RotationRefused,
            message,
            ..
        } => Some(message.clone()),
        _ => None,
    })
}

#[test]
fn a_rotation_is_persisted_answered_and_closes_the_old_connection() {
    let (mut h, a, b) = alice_and_bob();
    let a2 = ident(11);
    let s = RotationStatement::sign(&addr("alice"), &a, &a2, 1);
    let frames = rotate(&mut h, 1, &s);
    assert_eq!(
        frames,
        vec![RelayFrame::Rotated {
            address: addr("alice"),
            seq: 1
        }]
    );
    // Persisted before the answer, the connection closed after it.
    let persist = h
        .outs
        .iter()
        .position(|o| matches!(o, RelayOutput::Persist(_)))
        .unwrap();
    let send = h
        .outs
        .iter()
        .position(|o| matches!(o, RelayOutput::Send { .. }))
        .unwrap();
    assert!(persist < send);
    assert_eq!(h.closed(), vec![(1, ErrorCode::NotAuthenticated)]);
    assert!(h.events().contains(&RelayEvent::Rotated {
        address: addr("alice"),
        seq: 1
    }));
    assert_eq!(
        h.relay.registered_key(&addr("alice")),
        Some(a2.public().to_bytes())
    );
    // Lookups answer the new key with the statement.
    let frames = h.input(
        2,
        &ClientFrame::Lookup {
            address: addr("alice"),
        },
    );
    assert_eq!(
        frames,
        vec![RelayFrame::Key {
            address: addr("alice"),
            key: Some(a2.public().to_bytes()),
            rotation: Some(Box::new(s.clone())),
            recovery: None,
        }]
    );
    // The old key no longer authenticates; the new one does, and sends.
    h.connect(3);
    let f = h.register_frame(3, "alice", &a);
    assert_eq!(
        error_code(&h.input(3, &f)),
        Some((ErrorCode::AddressTaken, None))
    );
    h.register(4, "alice", &a2);
    let frames = h.input(
        4,
        &ClientFrame::Send {
            seq: 1,
            env: env(&a2, "alice", &b, "bob", "t", 1),
        },
    );
    assert!(matches!(frames[0], RelayFrame::Accepted { seq: 1, .. }));
    let frames = h.input(
        4,
        &ClientFrame::Send {
            seq: 2,
            env: env(&a, "alice", &b, "bob", "t", 2),
        },
    );
    assert_eq!(error_code(&frames), Some((ErrorCode::WrongSender, Some(2))));
    // The same statement again (a retry after a lost answer) is answered again.
    let frames = rotate(&mut h, 4, &s);
    assert!(matches!(frames[0], RelayFrame::Rotated { seq: 1, .. }));
    // A restart keeps the new key and its statement.
    let store = h.store.clone();
    let relay = Relay::restore(RelayConfig::default(), [9; 32], store).unwrap();
    assert_eq!(
        relay.registered_key(&addr("alice")),
        Some(a2.public().to_bytes())
    );
    let mut h2 = H::from_relay(relay);
    h2.register(1, "bob", &b);
    let frames = h2.input(
        1,
        &ClientFrame::Lookup {
            address: addr("alice"),
        },
    );
    assert!(
        matches!(&frames[0], RelayFrame::Key { rotation: Some(r), .. } if **r == s),
        "{frames:?}"
    );
}

#[test]
fn a_replayed_statement_is_refused() {
    let (mut h, a, _b) = alice_and_bob();
    let (a2, a3) = (ident(11), ident(12));
    let first = RotationStatement::sign(&addr("alice"), &a, &a2, 1);
    rotate(&mut h, 1, &first);
    h.register(3, "alice", &a2);
    let second = RotationStatement::sign(&addr("alice"), &a2, &a3, 2);
    assert!(matches!(
        rotate(&mut h, 3, &second)[0],
        RelayFrame::Rotated { seq: 2, .. }
    ));
    h.register(4, "alice", &a3);
    // The first statement again: its old key is no longer the current one.
    let frames = rotate(&mut h, 4, &first);
    let msg = refusal(&frames).expect("refused");
    assert!(msg.starts_with("not_current_key"), "{msg}");
    assert_eq!(
        h.relay.registered_key(&addr("alice")),
        Some(a3.public().to_bytes())
    );
    assert!(h.closed().is_empty());
    // A statement from the current key but numbered before the current one.
    let stale = RotationStatement::sign(&addr("alice"), &a3, &ident(13), 2);
    let msg = refusal(&rotate(&mut h, 4, &stale)).expect("refused");
    assert!(msg.starts_with("stale_seq"), "{msg}");
}

#[test]
fn a_statement_signed_by_another_key_is_refused() {
    let (mut h, a, b) = alice_and_bob();
    let mallory = ident(66);
    // Signed by a key that is not alice's: as an honest statement of mallory's key.
    let s = RotationStatement::sign(&addr("alice"), &mallory, &ident(67), 1);
    let msg = refusal(&rotate(&mut h, 1, &s)).expect("refused");
    assert!(msg.starts_with("not_current_key"), "{msg}");
    // Naming alice's key as the old one, but signed by mallory's.
    let mut forged = s.clone();
    forged.old_key = a.public().to_bytes();
    let msg = refusal(&rotate(&mut h, 1, &forged)).expect("refused");
    assert!(msg.starts_with("old_signature"), "{msg}");
    // Bob's connection cannot rotate alice.
    let s = RotationStatement::sign(&addr("alice"), &a, &ident(68), 1);
    let msg = refusal(&rotate(&mut h, 2, &s)).expect("refused");
    assert!(msg.starts_with("wrong_address"), "{msg}");
    // Without the new key's proof of possession.
    let mut unproven = s.clone();
    unproven.new_sig = [7; 64];
    let msg = refusal(&rotate(&mut h, 1, &unproven)).expect("refused");
    assert!(msg.starts_with("new_signature"), "{msg}");
    assert_eq!(
        h.relay.registered_key(&addr("alice")),
        Some(a.public().to_bytes())
    );
    assert_eq!(
        h.relay.registered_key(&addr("bob")),
        Some(b.public().to_bytes())
    );
    assert!(!h
        .store
        .values()
        .any(|v| v.windows(8).any(|w| w == b"rotation")));
}

#[test]
fn malformed_rotate_frames_and_unauthenticated_ones_are_refused() {
    let (mut h, a, _b) = alice_and_bob();
    let frames = h.bytes(1, br#"{"t":"rotate","statement":{"type":"key_rotation"}}"#);
    assert_eq!(error_code(&frames), Some((ErrorCode::Malformed, None)));
    h.connect(5);
    let s = RotationStatement::sign(&addr("alice"), &a, &ident(11), 1);
    let frames = rotate(&mut h, 5, &s);
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::NotAuthenticated, None))
    );
    assert_eq!(
        h.relay.registered_key(&addr("alice")),
        Some(a.public().to_bytes())
    );
}
