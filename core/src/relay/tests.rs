//! Relay state machine tests.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

use super::*;
use crate::crypto::envelope::Direction;
use crate::crypto::envelope::Envelope;
use crate::crypto::{IdentityKey, ThreadSession};
use crate::link::{
    challenge_signed_bytes, ClientFrame, ErrorCode, RelayFrame, AUTH_LABEL, REGISTER_LABEL,
};
use crate::persist;

mod cluster;
mod recovery;
mod rotation;
mod wake_up;

const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

fn addr(user: &str) -> Address {
    Address::new(user, "localhost").unwrap()
}

fn ident(n: u8) -> IdentityKey {
    IdentityKey::from_seed([n; 32])
}

/// A relay plus a key/value store that persist outputs are applied to, and the time.
struct H {
    relay: Relay,
    now: Timestamp,
    store: BTreeMap<String, Vec<u8>>,
    /// Outputs of the last drain.
    outs: Vec<RelayOutput>,
    /// Nonce of the latest challenge per connection.
    nonces: BTreeMap<ConnId, [u8; 32]>,
}

impl H {
    fn new() -> Self {
        Self::with(RelayConfig::default())
    }

    fn with(config: RelayConfig) -> Self {
        H::from_relay(Relay::new(config, [42; 32]))
    }

    fn from_relay(relay: Relay) -> Self {
        H {
            relay,
            now: T0,
            store: BTreeMap::new(),
            outs: Vec::new(),
            nonces: BTreeMap::new(),
        }
    }

    /// Drains every output, applying persists to the store and remembering challenges.
    fn drain(&mut self) -> &[RelayOutput] {
        self.outs.clear();
        while let Some(o) = self.relay.poll_output() {
            match &o {
                RelayOutput::Persist(op) => persist::apply(&mut self.store, op),
                RelayOutput::Send { conn, bytes } => {
                    if let Ok(RelayFrame::Challenge { nonce, .. }) = RelayFrame::from_bytes(bytes) {
                        self.nonces.insert(*conn, nonce);
                    }
                }
                _ => {}
            }
            self.outs.push(o);
        }
        &self.outs
    }

    /// Frames sent to `conn` by the last drain.
    fn frames(&self, conn: u64) -> Vec<RelayFrame> {
        self.outs
            .iter()
            .filter_map(|o| match o {
                RelayOutput::Send { conn: c, bytes } if c.0 == conn => {
                    Some(RelayFrame::from_bytes(bytes).expect("relay sent bad JSON"))
                }
                _ => None,
            })
            .collect()
    }

    fn events(&self) -> Vec<RelayEvent> {
        self.outs
            .iter()
            .filter_map(|o| match o {
                RelayOutput::Event(e) => Some(e.clone()),
                _ => None,
            })
            .collect()
    }

    fn closed(&self) -> Vec<(u64, ErrorCode)> {
        self.outs
            .iter()
            .filter_map(|o| match o {
                RelayOutput::Close { conn, code } => Some((conn.0, *code)),
                _ => None,
            })
            .collect()
    }

    fn connect(&mut self, conn: u64) -> [u8; 32] {
        self.connect_from(conn, Source(conn.into()))
    }

    /// Connects `conn` from `source`; returns the challenge nonce.
    fn connect_from(&mut self, conn: u64, source: Source) -> [u8; 32] {
        self.relay.handle(
            self.now,
            RelayInput::Connected {
                conn: ConnId(conn),
                source,
            },
        );
        self.drain();
        match self.frames(conn).as_slice() {
            [RelayFrame::Challenge { nonce, domain, ts }] => {
                assert_eq!(domain, "localhost");
                assert_eq!(*ts, self.now.as_millis());
                *nonce
            }
            other => panic!("expected a challenge, got {other:?}"),
        }
    }

    fn input(&mut self, conn: u64, frame: &ClientFrame) -> Vec<RelayFrame> {
        self.bytes(conn, &frame.to_bytes())
    }

    fn bytes(&mut self, conn: u64, bytes: &[u8]) -> Vec<RelayFrame> {
        self.relay.handle(
            self.now,
            RelayInput::Bytes {
                conn: ConnId(conn),
                bytes,
            },
        );
        self.drain();
        self.frames(conn)
    }

    fn register_frame(&self, conn: u64, user: &str, id: &IdentityKey) -> ClientFrame {
        let nonce = self.nonces[&ConnId(conn)];
        let address = addr(user);
        let key = id.public().to_bytes();
        let ts = self.now.as_millis();
        let msg = challenge_signed_bytes(
            REGISTER_LABEL,
            &nonce,
            "localhost",
            ts,
            &address,
            Some(&key),
        );
        ClientFrame::Register {
            address,
            key,
            ts,
            sig: id.sign(&msg),
        }
    }

    fn auth_frame(&self, conn: u64, user: &str, id: &IdentityKey) -> ClientFrame {
        let nonce = self.nonces[&ConnId(conn)];
        auth_with(&nonce, "localhost", self.now.as_millis(), user, id)
    }

    /// Connects and registers (or re-registers) `user` on `conn`.
    fn register(&mut self, conn: u64, user: &str, id: &IdentityKey) -> Vec<RelayFrame> {
        self.connect(conn);
        let f = self.register_frame(conn, user, id);
        let frames = self.input(conn, &f);
        assert!(
            matches!(frames.first(), Some(RelayFrame::AuthOk { address, .. }) if *address == addr(user)),
            "{frames:?}"
        );
        frames
    }

    /// Connects and authenticates `user` on `conn`; returns the frames after `auth`.
    fn login(&mut self, conn: u64, user: &str, id: &IdentityKey) -> Vec<RelayFrame> {
        self.connect(conn);
        let f = self.auth_frame(conn, user, id);
        let frames = self.input(conn, &f);
        assert!(
            matches!(frames.first(), Some(RelayFrame::AuthOk { address, .. }) if *address == addr(user)),
            "{frames:?}"
        );
        frames
    }

    fn advance(&mut self, d: Duration) {
        self.now = self.now.add(d);
        self.relay.handle(self.now, RelayInput::Timeout);
        self.drain();
    }
}

fn auth_with(nonce: &[u8; 32], domain: &str, ts: u64, user: &str, id: &IdentityKey) -> ClientFrame {
    let address = addr(user);
    let msg = challenge_signed_bytes(AUTH_LABEL, nonce, domain, ts, &address, None);
    ClientFrame::Auth {
        address,
        ts,
        sig: id.sign(&msg),
    }
}

fn env(
    from: &IdentityKey,
    from_user: &str,
    to: &IdentityKey,
    to_user: &str,
    thread: &str,
    n: u32,
) -> Envelope {
    let mut s = ThreadSession::new([n as u8 ^ 0x5a; 32]);
    s.seal(
        from,
        &addr(from_user),
        &addr(to_user),
        &to.public(),
        thread,
        Direction::FromInitiator,
        format!("{{\"packet\":{n}}}").as_bytes(),
    )
    .unwrap()
}

fn error_code(frames: &[RelayFrame]) -> Option<(ErrorCode, Option<u64>)> {
    frames.iter().find_map(|f| match f {
        RelayFrame::Error { code, seq, .. } => Some((*code, *seq)),
        _ => None,
    })
}

fn delivered_ids(frames: &[RelayFrame]) -> Vec<u64> {
    frames
        .iter()
        .filter_map(|f| match f {
            RelayFrame::Deliver { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}

/// Registers alice (conn 1) and bob (conn 2), both online.
fn alice_and_bob() -> (H, IdentityKey, IdentityKey) {
    let mut h = H::new();
    let (a, b) = (ident(1), ident(2));
    h.register(1, "alice", &a);
    h.register(2, "bob", &b);
    (h, a, b)
}

#[test]
fn register_then_auth_happy_path() {
    let mut h = H::new();
    let a = ident(1);
    h.connect(1);
    let f = h.register_frame(1, "alice", &a);
    let frames = h.input(1, &f);
    assert_eq!(
        frames,
        vec![RelayFrame::AuthOk {
            address: addr("alice"),
            queued: 0
        }]
    );
    // The registration is persisted before the auth_ok that reveals it.
    let persist_at = h
        .outs
        .iter()
        .position(|o| matches!(o, RelayOutput::Persist(PersistOp::Put { key, .. }) if key == "reg/agent:alice@localhost"))
        .expect("registration persisted");
    let send_at = h
        .outs
        .iter()
        .position(|o| matches!(o, RelayOutput::Send { .. }))
        .unwrap();
    assert!(persist_at < send_at);
    assert!(h.events().contains(&RelayEvent::Registered {
        address: addr("alice")
    }));
    assert!(h.events().contains(&RelayEvent::Authenticated {
        conn: ConnId(1),
        address: addr("alice")
    }));
    assert_eq!(
        h.relay.registered_key(&addr("alice")),
        Some(a.public().to_bytes())
    );

    // Later: plain auth on a new connection, nothing persisted.
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(1) });
    h.login(2, "alice", &a);
    assert!(!h.outs.iter().any(|o| matches!(o, RelayOutput::Persist(_))));
    let s = h.relay.stats();
    assert_eq!((s.connections, s.authenticated, s.registered), (1, 1, 1));

    // Registering again with the same key is a plain authentication.
    h.register(3, "alice", &a);
    assert!(!h.outs.iter().any(|o| matches!(o, RelayOutput::Persist(_))));

    // Another key for the same address is refused, and a fresh challenge follows.
    h.connect(4);
    let f = h.register_frame(4, "alice", &ident(9));
    let frames = h.input(4, &f);
    assert_eq!(error_code(&frames), Some((ErrorCode::AddressTaken, None)));
    assert!(matches!(frames.last(), Some(RelayFrame::Challenge { .. })));
    assert_eq!(
        h.relay.registered_key(&addr("alice")),
        Some(a.public().to_bytes())
    );

    // A foreign domain cannot be registered here.
    h.connect(5);
    let nonce = h.nonces[&ConnId(5)];
    let other = Address::new("carol", "elsewhere.io").unwrap();
    let key = ident(3).public().to_bytes();
    let ts = h.now.as_millis();
    let msg = challenge_signed_bytes(REGISTER_LABEL, &nonce, "localhost", ts, &other, Some(&key));
    let frames = h.input(
        5,
        &ClientFrame::Register {
            address: other,
            key,
            ts,
            sig: ident(3).sign(&msg),
        },
    );
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::UnknownRecipient, None))
    );
}

#[test]
fn auth_of_unregistered_address_fails() {
    let mut h = H::new();
    h.connect(1);
    let f = h.auth_frame(1, "nobody", &ident(1));
    let frames = h.input(1, &f);
    assert_eq!(error_code(&frames), Some((ErrorCode::AuthFailed, None)));
    assert_eq!(h.relay.stats().authenticated, 0);
}

#[test]
fn replayed_auth_response_on_new_connection_is_refused() {
    let mut h = H::new();
    let a = ident(1);
    h.register(1, "alice", &a);
    h.connect(2);
    let answer = h.auth_frame(2, "alice", &a);
    h.input(2, &answer);
    assert_eq!(h.relay.stats().authenticated, 1);
    // An eavesdropper replays the exact response on its own connection.
    h.connect(3);
    let frames = h.input(3, &answer);
    assert_eq!(error_code(&frames), Some((ErrorCode::AuthFailed, None)));
    assert!(matches!(frames.last(), Some(RelayFrame::Challenge { .. })));
    // And on the same connection after it was consumed: conn 2 is authenticated, so
    // a second auth there is refused too.
    let frames = h.input(2, &answer);
    assert_eq!(error_code(&frames), Some((ErrorCode::AuthFailed, None)));
    assert_eq!(h.relay.online.get(&addr("alice")), Some(&ConnId(2)));
}

#[test]
fn challenge_is_single_use_and_bound_to_domain_and_connection() {
    let mut h = H::new();
    let a = ident(1);
    h.register(1, "alice", &a);

    // Signed for another domain.
    let n2 = h.connect(2);
    let ts = h.now.as_millis();
    let frames = h.input(2, &auth_with(&n2, "evil.example", ts, "alice", &a));
    assert_eq!(error_code(&frames), Some((ErrorCode::AuthFailed, None)));

    // The first challenge of conn 2 is consumed by that failure: answering it now fails.
    let frames = h.input(2, &auth_with(&n2, "localhost", ts, "alice", &a));
    assert_eq!(error_code(&frames), Some((ErrorCode::AuthFailed, None)));

    // Signed over another connection's challenge.
    let n3 = h.connect(3);
    h.connect(4);
    let frames = h.input(4, &auth_with(&n3, "localhost", ts, "alice", &a));
    assert_eq!(error_code(&frames), Some((ErrorCode::AuthFailed, None)));
    // Conn 3 may still use its own (unconsumed) challenge.
    let frames = h.input(3, &auth_with(&n3, "localhost", ts, "alice", &a));
    assert!(matches!(frames.first(), Some(RelayFrame::AuthOk { .. })));

    // Conn 2 answers its latest challenge correctly and gets in.
    let f = h.auth_frame(2, "alice", &a);
    let frames = h.input(2, &f);
    assert!(matches!(frames.first(), Some(RelayFrame::AuthOk { .. })));
    assert_eq!(
        h.relay.stats().refusals.get(&ErrorCode::AuthFailed),
        Some(&3)
    );
}

#[test]
fn stale_timestamp_is_refused() {
    let mut h = H::new();
    let a = ident(1);
    h.register(1, "alice", &a);
    let nonce = h.connect(2);
    let stale = h.now.as_millis() - 301_000;
    let frames = h.input(2, &auth_with(&nonce, "localhost", stale, "alice", &a));
    assert_eq!(error_code(&frames), Some((ErrorCode::AuthFailed, None)));
    let nonce = h.nonces[&ConnId(2)];
    let future = h.now.as_millis() + 301_000;
    let frames = h.input(2, &auth_with(&nonce, "localhost", future, "alice", &a));
    assert_eq!(error_code(&frames), Some((ErrorCode::AuthFailed, None)));
    // Within the allowed skew it works.
    let nonce = h.nonces[&ConnId(2)];
    let skewed = h.now.as_millis() - 299_000;
    let frames = h.input(2, &auth_with(&nonce, "localhost", skewed, "alice", &a));
    assert!(matches!(frames.first(), Some(RelayFrame::AuthOk { .. })));
}

#[test]
fn only_handshake_frames_before_auth() {
    let mut h = H::new();
    h.connect(1);
    let e = env(&ident(1), "alice", &ident(2), "bob", "thr_1", 1);
    let frames = h.input(1, &ClientFrame::Send { seq: 7, env: e });
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::NotAuthenticated, Some(7)))
    );
    let frames = h.input(1, &ClientFrame::Ack { id: 1 });
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::NotAuthenticated, None))
    );
    let frames = h.input(
        1,
        &ClientFrame::Lookup {
            address: addr("bob"),
        },
    );
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::NotAuthenticated, None))
    );
    assert_eq!(
        h.input(1, &ClientFrame::Ping { n: 5 }),
        vec![RelayFrame::Pong { n: 5 }]
    );
    assert_eq!(h.input(1, &ClientFrame::Pong { n: 5 }), vec![]);
    assert_eq!(
        h.relay.stats().refusals.get(&ErrorCode::NotAuthenticated),
        Some(&3)
    );
}

#[test]
fn auth_timeout_closes_connection() {
    let mut h = H::new();
    h.connect(1);
    assert_eq!(
        h.relay.poll_timeout(),
        Some(T0.add(Duration::from_secs(10)))
    );
    h.advance(Duration::from_millis(9_999));
    assert!(h.closed().is_empty());
    h.advance(Duration::from_millis(1));
    assert_eq!(
        error_code(&h.frames(1)),
        Some((ErrorCode::NotAuthenticated, None))
    );
    assert_eq!(h.closed(), vec![(1, ErrorCode::NotAuthenticated)]);
    assert_eq!(h.relay.stats().connections, 0);
    assert_eq!(h.relay.poll_timeout(), None);
}

#[test]
fn routes_to_online_recipient_and_drops_on_ack() {
    let (mut h, a, b) = alice_and_bob();
    let e = env(&a, "alice", &b, "bob", "thr_1", 1);
    let frames = h.input(
        1,
        &ClientFrame::Send {
            seq: 10,
            env: e.clone(),
        },
    );
    assert_eq!(frames, vec![RelayFrame::Accepted { seq: 10, id: 1 }]);
    assert_eq!(
        h.frames(2),
        vec![RelayFrame::Deliver {
            id: 1,
            env: e.clone()
        }]
    );
    // Persisted before accepted.
    let put = h
        .outs
        .iter()
        .position(|o| matches!(o, RelayOutput::Persist(PersistOp::Put { key, .. }) if key == "q/agent:bob@localhost/00000000000000000001"))
        .unwrap();
    let accepted = h
        .outs
        .iter()
        .position(|o| {
            matches!(
                o,
                RelayOutput::Send {
                    conn: ConnId(1),
                    ..
                }
            )
        })
        .unwrap();
    assert!(put < accepted);
    assert!(h.events().contains(&RelayEvent::Routed {
        from: addr("alice"),
        to: addr("bob"),
        id: 1
    }));
    assert_eq!(h.relay.queued_for(&addr("bob")), 1);

    // Alice cannot ack bob's packet.
    h.input(1, &ClientFrame::Ack { id: 1 });
    assert_eq!(
        h.events(),
        vec![RelayEvent::AckIgnored {
            conn: ConnId(1),
            id: 1
        }]
    );
    assert_eq!(h.relay.queued_for(&addr("bob")), 1);

    h.input(2, &ClientFrame::Ack { id: 1 });
    assert_eq!(
        h.outs[0],
        RelayOutput::Persist(PersistOp::Delete {
            key: "q/agent:bob@localhost/00000000000000000001".into()
        })
    );
    assert!(h.events().contains(&RelayEvent::Acked { id: 1 }));
    assert_eq!(h.relay.queued_for(&addr("bob")), 0);
    assert!(!h.store.keys().any(|k| k.starts_with("q/")));
    // A duplicate ack is ignored.
    h.input(2, &ClientFrame::Ack { id: 1 });
    assert_eq!(
        h.events(),
        vec![RelayEvent::AckIgnored {
            conn: ConnId(2),
            id: 1
        }]
    );
    let s = h.relay.stats();
    assert_eq!(
        (s.routed_total, s.delivered_total, s.acked_total, s.queued),
        (1, 1, 1, 0)
    );
}

#[test]
fn lookup_returns_registered_key() {
    let (mut h, _a, b) = alice_and_bob();
    let frames = h.input(
        1,
        &ClientFrame::Lookup {
            address: addr("bob"),
        },
    );
    assert_eq!(
        frames,
        vec![RelayFrame::Key {
            address: addr("bob"),
            key: Some(b.public().to_bytes()),
            rotation: None,
            recovery: None,
        }]
    );
    let frames = h.input(
        1,
        &ClientFrame::Lookup {
            address: addr("zed"),
        },
    );
    assert_eq!(
        frames,
        vec![RelayFrame::Key {
            address: addr("zed"),
            key: None,
            rotation: None,
            recovery: None,
        }]
    );
}

#[test]
fn offline_queue_delivered_in_order_on_connect() {
    let (mut h, a, b) = alice_and_bob();
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(2) });
    let mut sent = Vec::new();
    for i in 0..3u32 {
        let e = env(
            &a,
            "alice",
            &b,
            "bob",
            if i == 1 { "thr_2" } else { "thr_1" },
            i,
        );
        let frames = h.input(
            1,
            &ClientFrame::Send {
                seq: u64::from(i),
                env: e.clone(),
            },
        );
        assert_eq!(
            frames,
            vec![RelayFrame::Accepted {
                seq: u64::from(i),
                id: u64::from(i) + 1
            }]
        );
        assert!(!h
            .events()
            .iter()
            .any(|e| matches!(e, RelayEvent::Delivered { .. })));
        sent.push(e);
    }
    assert_eq!(h.relay.queued_for(&addr("bob")), 3);
    let frames = h.login(3, "bob", &b);
    assert_eq!(
        frames,
        vec![
            RelayFrame::AuthOk {
                address: addr("bob"),
                queued: 3
            },
            RelayFrame::Deliver {
                id: 1,
                env: sent[0].clone()
            },
            RelayFrame::Deliver {
                id: 2,
                env: sent[1].clone()
            },
            RelayFrame::Deliver {
                id: 3,
                env: sent[2].clone()
            },
        ]
    );
}

#[test]
fn in_flight_window_refills_as_acks_arrive() {
    let mut h = H::with(RelayConfig {
        max_in_flight: 2,
        ..RelayConfig::default()
    });
    let (a, b) = (ident(1), ident(2));
    h.register(1, "alice", &a);
    h.register(2, "bob", &b);
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(2) });
    for i in 0..5u32 {
        h.input(
            1,
            &ClientFrame::Send {
                seq: 0,
                env: env(&a, "alice", &b, "bob", "t", i),
            },
        );
    }
    let frames = h.login(3, "bob", &b);
    assert_eq!(delivered_ids(&frames), vec![1, 2]);
    // A new packet while the window is full waits.
    let frames = h.input(
        1,
        &ClientFrame::Send {
            seq: 0,
            env: env(&a, "alice", &b, "bob", "t", 9),
        },
    );
    assert!(matches!(frames[..], [RelayFrame::Accepted { id: 6, .. }]));
    assert!(h.frames(3).is_empty());
    // Acking out of order frees one slot each.
    assert_eq!(
        delivered_ids(&h.input(3, &ClientFrame::Ack { id: 2 })),
        vec![3]
    );
    assert_eq!(
        delivered_ids(&h.input(3, &ClientFrame::Ack { id: 1 })),
        vec![4]
    );
    assert_eq!(
        delivered_ids(&h.input(3, &ClientFrame::Ack { id: 4 })),
        vec![5]
    );
    assert_eq!(
        delivered_ids(&h.input(3, &ClientFrame::Ack { id: 3 })),
        vec![6]
    );
    assert_eq!(
        delivered_ids(&h.input(3, &ClientFrame::Ack { id: 5 })),
        Vec::<u64>::new()
    );
}

#[test]
fn unacked_packets_are_kept_and_redelivered_after_reconnect() {
    let (mut h, a, b) = alice_and_bob();
    for i in 0..3u32 {
        h.input(
            1,
            &ClientFrame::Send {
                seq: 0,
                env: env(&a, "alice", &b, "bob", "t", i),
            },
        );
        assert_eq!(delivered_ids(&h.frames(2)), vec![u64::from(i) + 1]);
    }
    h.input(2, &ClientFrame::Ack { id: 2 });
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(2) });
    assert_eq!(h.relay.queued_for(&addr("bob")), 2);
    let frames = h.login(3, "bob", &b);
    assert_eq!(
        frames[0],
        RelayFrame::AuthOk {
            address: addr("bob"),
            queued: 2
        }
    );
    assert_eq!(delivered_ids(&frames), vec![1, 3]);
}

#[test]
fn restore_keeps_registrations_and_queue() {
    let (mut h, a, b) = alice_and_bob();
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(2) });
    for i in 0..3u32 {
        h.input(
            1,
            &ClientFrame::Send {
                seq: 0,
                env: env(&a, "alice", &b, "bob", "t", i),
            },
        );
    }
    assert_eq!(
        h.store.len(),
        2 + 3 + 1,
        "{:?}",
        h.store.keys().collect::<Vec<_>>()
    );

    let store = h.store.clone();
    let relay = Relay::restore(RelayConfig::default(), [7; 32], store.clone()).unwrap();
    let mut h2 = H::from_relay(relay);
    h2.store = store;
    assert_eq!(h2.relay.stats().registered, 2);
    assert_eq!(h2.relay.queued_for(&addr("bob")), 3);
    // Registrations survive: plain auth works, and the queue is delivered in order.
    let frames = h2.login(10, "bob", &b);
    assert_eq!(delivered_ids(&frames), vec![1, 2, 3]);
    for id in 1..=3 {
        h2.input(10, &ClientFrame::Ack { id });
    }
    // Ids continue above the highest ever handed out, even with an empty queue.
    h2.login(11, "alice", &a);
    let store = h2.store.clone();
    assert!(!store.keys().any(|k| k.starts_with("q/")));
    let relay = Relay::restore(RelayConfig::default(), [8; 32], store.clone()).unwrap();
    let mut h3 = H::from_relay(relay);
    h3.store = store;
    h3.login(1, "alice", &a);
    let frames = h3.input(
        1,
        &ClientFrame::Send {
            seq: 1,
            env: env(&a, "alice", &b, "bob", "t", 7),
        },
    );
    match frames[..] {
        [RelayFrame::Accepted { id, .. }] => assert!(id > 3, "id {id} reused"),
        _ => panic!("{frames:?}"),
    }

    // A corrupt record is reported, not panicked on.
    let mut bad = h3.store.clone();
    bad.insert(
        "q/agent:bob@localhost/00000000000000000009".into(),
        b"{".to_vec(),
    );
    assert!(matches!(
        Relay::restore(RelayConfig::default(), [8; 32], bad),
        Err(RelayRestoreError::BadRecord { .. })
    ));
    let mut orphan = BTreeMap::new();
    for (k, v) in &h3.store {
        if k.starts_with("q/") {
            orphan.insert(k.clone(), v.clone());
        }
    }
    assert!(Relay::restore(RelayConfig::default(), [8; 32], orphan).is_err());
}

#[test]
fn overflow_of_one_thread_leaves_others_alone() {
    let (mut h, a, b) = alice_and_bob();
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(2) });
    for i in 0..100u32 {
        let frames = h.input(
            1,
            &ClientFrame::Send {
                seq: u64::from(i),
                env: env(&a, "alice", &b, "bob", "thr_busy", i),
            },
        );
        assert!(
            matches!(frames[..], [RelayFrame::Accepted { .. }]),
            "{i}: {frames:?}"
        );
    }
    let e = env(&a, "alice", &b, "bob", "thr_busy", 100);
    let frames = h.input(
        1,
        &ClientFrame::Send {
            seq: 100,
            env: e.clone(),
        },
    );
    assert_eq!(
        frames,
        vec![RelayFrame::Overflow {
            seq: 100,
            to: addr("bob"),
            thread: e.thread,
            limit: 100
        }]
    );
    assert!(h.events().contains(&RelayEvent::Overflow {
        from: addr("alice"),
        to: addr("bob")
    }));
    assert!(!h.outs.iter().any(|o| matches!(o, RelayOutput::Persist(_))));
    assert_eq!(h.relay.stats().overflows, 1);
    let frames = h.input(
        1,
        &ClientFrame::Send {
            seq: 101,
            env: env(&a, "alice", &b, "bob", "thr_calm", 0),
        },
    );
    assert!(matches!(
        frames[..],
        [RelayFrame::Accepted { seq: 101, id: 101 }]
    ));
    // Once bob acks one packet of the busy thread, it has room again.
    h.login(3, "bob", &b);
    h.input(3, &ClientFrame::Ack { id: 1 });
    let frames = h.input(1, &ClientFrame::Send { seq: 102, env: e });
    assert!(matches!(
        frames[..],
        [RelayFrame::Accepted { seq: 102, .. }]
    ));
}

#[test]
fn recipient_total_bound_is_queue_full() {
    let mut h = H::with(RelayConfig {
        queue_per_recipient: 3,
        ..RelayConfig::default()
    });
    let (a, b) = (ident(1), ident(2));
    h.register(1, "alice", &a);
    h.register(2, "bob", &b);
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(2) });
    for i in 0..3u32 {
        h.input(
            1,
            &ClientFrame::Send {
                seq: 0,
                env: env(&a, "alice", &b, "bob", &format!("t{i}"), i),
            },
        );
    }
    let frames = h.input(
        1,
        &ClientFrame::Send {
            seq: 9,
            env: env(&a, "alice", &b, "bob", "t9", 9),
        },
    );
    assert_eq!(error_code(&frames), Some((ErrorCode::QueueFull, Some(9))));
}

#[test]
fn last_connect_wins() {
    let (mut h, a, b) = alice_and_bob();
    for i in 0..2u32 {
        h.input(
            1,
            &ClientFrame::Send {
                seq: 0,
                env: env(&a, "alice", &b, "bob", "t", i),
            },
        );
    }
    // Bob's laptop (conn 2) holds deliveries 1 and 2 unacked; his phone connects.
    h.connect(3);
    let f = h.auth_frame(3, "bob", &b);
    let frames = h.input(3, &f);
    assert_eq!(h.frames(2), vec![RelayFrame::Replaced]);
    assert_eq!(h.closed(), vec![(2, ErrorCode::NotAuthenticated)]);
    assert!(h.events().contains(&RelayEvent::Replaced {
        old: ConnId(2),
        new: ConnId(3),
        address: addr("bob")
    }));
    assert_eq!(
        frames[0],
        RelayFrame::AuthOk {
            address: addr("bob"),
            queued: 2
        }
    );
    assert_eq!(delivered_ids(&frames), vec![1, 2]);
    assert_eq!(h.relay.stats().authenticated, 2);
    assert_eq!(h.relay.stats().connections, 2);
    // The old connection is forgotten: its bytes and disconnection are ignored.
    h.bytes(2, &ClientFrame::Ack { id: 1 }.to_bytes());
    assert!(h.outs.is_empty());
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(2) });
    assert_eq!(h.relay.online.get(&addr("bob")), Some(&ConnId(3)));
    // New packets go to the new connection.
    h.input(
        1,
        &ClientFrame::Send {
            seq: 0,
            env: env(&a, "alice", &b, "bob", "t", 5),
        },
    );
    assert_eq!(delivered_ids(&h.frames(3)), vec![3]);
}

#[test]
fn heartbeat_pings_and_closes_silent_connections() {
    let (mut h, _a, _b) = alice_and_bob();
    assert_eq!(
        h.relay.poll_timeout(),
        Some(T0.add(Duration::from_secs(30)))
    );
    h.advance(Duration::from_secs(30));
    assert_eq!(h.frames(1), vec![RelayFrame::Ping { n: 0 }]);
    assert_eq!(h.frames(2), vec![RelayFrame::Ping { n: 0 }]);
    // Alice answers every ping; bob stays silent.
    h.input(1, &ClientFrame::Pong { n: 0 });
    h.advance(Duration::from_secs(30));
    assert_eq!(h.frames(2), vec![RelayFrame::Ping { n: 1 }]);
    h.input(1, &ClientFrame::Pong { n: 1 });
    // Bob has been silent for 60 s: not yet dead (allowance is 3 × 30 s).
    assert!(h.closed().is_empty());
    h.advance(Duration::from_secs(29));
    assert!(h.closed().is_empty());
    h.advance(Duration::from_secs(1));
    assert_eq!(h.closed(), vec![(2, ErrorCode::Timeout)]);
    assert!(h
        .events()
        .contains(&RelayEvent::ConnectionDead { conn: ConnId(2) }));
    assert_eq!(h.frames(1), vec![RelayFrame::Ping { n: 2 }]);
    let s = h.relay.stats();
    assert_eq!((s.connections, s.authenticated), (1, 1));
    // The relay answers pings too.
    assert_eq!(
        h.input(1, &ClientFrame::Ping { n: 77 }),
        vec![RelayFrame::Pong { n: 77 }]
    );
}

#[test]
fn a_talking_connection_stays_open_and_a_silent_one_closes_at_its_exact_deadline() {
    // A frame leaves the connection's entry among the deadlines where it is; the entry,
    // found early when it fires, is re-filed from the last frame.
    let (mut h, _a, _b) = alice_and_bob();
    for n in 0..60u64 {
        h.advance(Duration::from_secs(10));
        assert_eq!(
            h.input(1, &ClientFrame::Ping { n }),
            vec![RelayFrame::Pong { n }]
        );
        assert_eq!(
            h.input(2, &ClientFrame::Ping { n }),
            vec![RelayFrame::Pong { n }]
        );
        assert!(h.closed().is_empty(), "closed while talking, at {n}");
        assert!(h.relay.poll_timeout().is_some_and(|t| t > h.now));
    }
    // Alice goes silent: closed 90 s (3 × 30 s) after her last frame, not before.
    for n in 60..68u64 {
        h.advance(Duration::from_secs(10));
        h.input(2, &ClientFrame::Ping { n });
    }
    h.frames(1);
    h.advance(Duration::from_millis(9_999));
    assert!(h.closed().is_empty());
    h.advance(Duration::from_millis(1));
    assert_eq!(h.closed(), vec![(1, ErrorCode::Timeout)]);
    assert_eq!(h.relay.stats().connections, 1);
}

#[test]
fn rate_limit_refuses_flood_then_recovers() {
    let mut h = H::with(RelayConfig {
        rate_per_sec: 10,
        rate_burst: 5,
        ..RelayConfig::default()
    });
    let (a, b) = (ident(1), ident(2));
    h.register(1, "alice", &a);
    h.register(2, "bob", &b);
    let mut accepted = 0;
    let mut limited = 0;
    for i in 0..20u32 {
        let frames = h.input(
            1,
            &ClientFrame::Send {
                seq: u64::from(i),
                env: env(&a, "alice", &b, "bob", "t", i),
            },
        );
        match error_code(&frames) {
            None => accepted += 1,
            Some((ErrorCode::RateLimited, Some(s))) if s == u64::from(i) => limited += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((accepted, limited), (5, 15));
    assert_eq!(
        h.relay.stats().refusals.get(&ErrorCode::RateLimited),
        Some(&15)
    );
    // Pings take nothing from the address's bucket.
    let frames = h.input(1, &ClientFrame::Ping { n: 1 });
    assert_eq!(frames, vec![RelayFrame::Pong { n: 1 }]);
    // The bucket belongs to the address: reconnecting does not refill it.
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(1) });
    h.login(3, "alice", &a);
    let frames = h.input(
        3,
        &ClientFrame::Send {
            seq: 99,
            env: env(&a, "alice", &b, "bob", "t", 99),
        },
    );
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::RateLimited, Some(99)))
    );
    // Bob is unaffected.
    let frames = h.input(
        2,
        &ClientFrame::Send {
            seq: 1,
            env: env(&b, "bob", &a, "alice", "t", 1),
        },
    );
    assert!(matches!(frames[..], [RelayFrame::Accepted { .. }]));
    // 100 ms later there is one token again.
    h.now = h.now.add(Duration::from_millis(100));
    let frames = h.input(
        3,
        &ClientFrame::Send {
            seq: 100,
            env: env(&a, "alice", &b, "bob", "t", 100),
        },
    );
    assert!(
        matches!(frames[..], [RelayFrame::Accepted { seq: 100, .. }]),
        "{frames:?}"
    );
    let frames = h.input(
        3,
        &ClientFrame::Send {
            seq: 101,
            env: env(&a, "alice", &b, "bob", "t", 101),
        },
    );
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::RateLimited, Some(101)))
    );
}

#[test]
fn frame_budget_charges_every_frame_and_closes_a_connection_past_it() {
    let mut h = H::with(RelayConfig {
        conn_rate_per_sec: 4,
        conn_rate_burst: 4,
        ..RelayConfig::default()
    });
    // Unauthenticated: every frame costs, pings included.
    h.connect(9);
    for n in 0..4 {
        assert_eq!(
            h.input(9, &ClientFrame::Ping { n }),
            vec![RelayFrame::Pong { n }]
        );
    }
    // The first frame the budget cannot pay is refused, and not processed.
    let frames = h.input(9, &ClientFrame::Ping { n: 4 });
    assert_eq!(error_code(&frames), Some((ErrorCode::RateLimited, None)));
    assert_eq!(frames.len(), 1);
    // 250 ms later there is one token: paid, and the connection is forgiven.
    h.now = h.now.add(Duration::from_millis(250));
    assert_eq!(
        h.input(9, &ClientFrame::Ping { n: 5 }),
        vec![RelayFrame::Pong { n: 5 }]
    );
    assert_eq!(
        error_code(&h.input(9, &ClientFrame::Ping { n: 6 })),
        Some((ErrorCode::RateLimited, None))
    );
    // Another frame before the budget can pay: closed, not answered one by one.
    let frames = h.input(9, &ClientFrame::Ping { n: 7 });
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::TooManyRefusals, None))
    );
    assert_eq!(h.closed(), vec![(9, ErrorCode::TooManyRefusals)]);
    assert!(h.input(9, &ClientFrame::Ping { n: 8 }).is_empty());
    let st = h.relay.stats();
    assert_eq!(st.closed_for_refusals, 1);
    assert_eq!(st.connections, 0);

    // Junk costs a whole token, before it is even looked at.
    h.connect(8);
    for _ in 0..4 {
        let f = h.bytes(8, &[0xff; 10]);
        assert_eq!(error_code(&f), Some((ErrorCode::Malformed, None)));
    }
    assert_eq!(
        error_code(&h.bytes(8, &[0xff; 10])),
        Some((ErrorCode::RateLimited, None))
    );

    // Authenticated: a send past the budget is refused with its seq; acks cost a
    // quarter of a token.
    let (a, b) = (ident(1), ident(2));
    h.now = h.now.add(Duration::from_secs(10));
    h.register(1, "alice", &a);
    h.register(2, "bob", &b);
    // Alice's register took one token: three sends, then the budget is empty.
    for i in 0..3u32 {
        let f = h.input(
            1,
            &ClientFrame::Send {
                seq: u64::from(i),
                env: env(&a, "alice", &b, "bob", "t", i),
            },
        );
        assert!(matches!(f[..], [RelayFrame::Accepted { .. }]), "{f:?}");
    }
    let f = h.input(
        1,
        &ClientFrame::Send {
            seq: 3,
            env: env(&a, "alice", &b, "bob", "t", 3),
        },
    );
    assert_eq!(error_code(&f), Some((ErrorCode::RateLimited, Some(3))));
    assert_eq!(h.relay.queued_for(&addr("bob")), 3);
    // Bob has three tokens left after his register, and each of his three deliveries
    // gave back the ¼ token of its ack: twelve acks of unknown ids take the three tokens,
    // his three real acks what the deliveries gave back.
    for id in 100..112 {
        assert!(h.input(2, &ClientFrame::Ack { id }).is_empty());
    }
    for id in 1..=3 {
        assert!(h.input(2, &ClientFrame::Ack { id }).is_empty());
    }
    assert_eq!(h.relay.queued_for(&addr("bob")), 0);
    assert_eq!(
        error_code(&h.input(2, &ClientFrame::Ack { id: 1 })),
        Some((ErrorCode::RateLimited, None))
    );
    assert_eq!(
        error_code(&h.input(2, &ClientFrame::Pong { n: 1 })),
        Some((ErrorCode::TooManyRefusals, None))
    );
    assert_eq!(h.closed(), vec![(2, ErrorCode::TooManyRefusals)]);
}

#[test]
fn a_connection_refused_beyond_its_allowance_is_closed() {
    let mut h = H::with(RelayConfig {
        refusal_burst: 3,
        refusals_per_sec: 1,
        ..RelayConfig::default()
    });
    h.connect(7);
    for _ in 0..3 {
        let f = h.bytes(7, b"not json");
        assert_eq!(error_code(&f), Some((ErrorCode::Malformed, None)));
        assert!(h.closed().is_empty());
    }
    // One second later the allowance has one more.
    h.now = h.now.add(Duration::from_secs(1));
    let f = h.input(7, &ClientFrame::Lookup { address: addr("x") });
    assert_eq!(error_code(&f), Some((ErrorCode::NotAuthenticated, None)));
    assert!(h.closed().is_empty());
    // The next refusal is answered, then the connection is closed.
    let f = h.bytes(7, b"{\"t\":\"nope\"}");
    let codes: Vec<ErrorCode> = f
        .iter()
        .filter_map(|f| match f {
            RelayFrame::Error { code, .. } => Some(*code),
            _ => None,
        })
        .collect();
    assert_eq!(
        codes,
        vec![ErrorCode::Malformed, ErrorCode::TooManyRefusals]
    );
    assert_eq!(h.closed(), vec![(7, ErrorCode::TooManyRefusals)]);
    assert_eq!(h.relay.stats().closed_for_refusals, 1);

    // Failed authentications count too.
    let nonce = h.connect(6);
    let wrong = auth_with(&nonce, "localhost", h.now.as_millis(), "nobody", &ident(9));
    for i in 0..4 {
        let f = h.input(6, &wrong);
        assert_eq!(error_code(&f), Some((ErrorCode::AuthFailed, None)), "{i}");
    }
    assert_eq!(h.closed(), vec![(6, ErrorCode::TooManyRefusals)]);

    // What an honest agent gets from others' state does not count: sends to an unknown
    // recipient, a full queue, its address's rate limit.
    let (a, b) = (ident(1), ident(2));
    h.register(1, "alice", &a);
    h.register(2, "bob", &b);
    for i in 0..10u32 {
        let f = h.input(
            1,
            &ClientFrame::Send {
                seq: u64::from(i),
                env: env(&a, "alice", &ident(3), "carol", "t", i),
            },
        );
        assert_eq!(
            error_code(&f),
            Some((ErrorCode::UnknownRecipient, Some(u64::from(i))))
        );
    }
    assert!(h.closed().is_empty());
    // A bad signature does.
    for i in 0..4u32 {
        let mut e = env(&a, "alice", &b, "bob", "t", 100 + i);
        e.sig[0] ^= 1;
        h.input(1, &ClientFrame::Send { seq: 0, env: e });
    }
    assert_eq!(h.closed(), vec![(1, ErrorCode::TooManyRefusals)]);
}

#[test]
fn registrations_are_limited_per_source_and_window() {
    let mut h = H::with(RelayConfig {
        registrations_per_source: 2,
        registration_window: Duration::from_secs(60),
        max_registration_sources: 2,
        ..RelayConfig::default()
    });
    let (sa, sb, sc) = (Source(0xa), Source(0xb), Source(0xc));
    let register_from = |h: &mut H, conn: u64, src: Source, user: &str, seed: u8| {
        h.connect_from(conn, src);
        let f = h.register_frame(conn, user, &ident(seed));
        h.input(conn, &f)
    };
    for (conn, user, seed) in [(1, "a1", 1), (2, "a2", 2)] {
        let f = register_from(&mut h, conn, sa, user, seed);
        assert!(matches!(f[..], [RelayFrame::AuthOk { .. }]), "{f:?}");
    }
    // A third new address from the same source is refused; a fresh challenge follows.
    let f = register_from(&mut h, 3, sa, "a3", 3);
    assert_eq!(error_code(&f), Some((ErrorCode::RegistrationLimited, None)));
    assert!(matches!(f.last(), Some(RelayFrame::Challenge { .. })));
    assert_eq!(h.relay.registered_key(&addr("a3")), None);
    assert!(!h.store.contains_key("reg/agent:a3@localhost"));
    // Registering an address again with its key is an authentication: not counted.
    let f = register_from(&mut h, 4, sa, "a1", 1);
    assert!(matches!(f[..], [RelayFrame::AuthOk { .. }]), "{f:?}");
    // Another source has its own count.
    let f = register_from(&mut h, 5, sb, "b1", 4);
    assert!(matches!(f[..], [RelayFrame::AuthOk { .. }]), "{f:?}");
    // Two sources are counted already: a third is refused (the table is bounded).
    let f = register_from(&mut h, 6, sc, "c1", 5);
    assert_eq!(error_code(&f), Some((ErrorCode::RegistrationLimited, None)));
    let st = h.relay.stats();
    assert_eq!(st.registrations_limited, 2);
    assert_eq!(st.registration_sources, 2);
    assert_eq!(st.refusals.get(&ErrorCode::RegistrationLimited), Some(&2));
    // When the windows are over, both are dropped and everyone may register again.
    h.now = h.now.add(Duration::from_secs(60));
    let f = register_from(&mut h, 7, sc, "c1", 5);
    assert!(matches!(f[..], [RelayFrame::AuthOk { .. }]), "{f:?}");
    let f = register_from(&mut h, 8, sa, "a3", 3);
    assert!(matches!(f[..], [RelayFrame::AuthOk { .. }]), "{f:?}");
    assert_eq!(h.relay.stats().registration_sources, 2);
}

#[test]
fn a_frame_beyond_the_transport_limit_closes_with_too_large() {
    let (mut h, _, _) = alice_and_bob();
    h.connect(5);
    h.relay.handle(
        h.now,
        RelayInput::Oversized {
            conn: ConnId(5),
            limit: 262_144,
        },
    );
    h.drain();
    let f = h.frames(5);
    assert_eq!(error_code(&f), Some((ErrorCode::TooLarge, None)));
    assert_eq!(h.closed(), vec![(5, ErrorCode::TooLarge)]);
    h.relay.handle(
        h.now,
        RelayInput::Oversized {
            conn: ConnId(1),
            limit: 262_144,
        },
    );
    h.drain();
    assert_eq!(h.closed(), vec![(1, ErrorCode::TooLarge)]);
    // Unknown connections are ignored.
    h.relay.handle(
        h.now,
        RelayInput::Oversized {
            conn: ConnId(5),
            limit: 262_144,
        },
    );
    h.drain();
    assert!(h.outs.is_empty());
    let st = h.relay.stats();
    assert_eq!(st.closed_oversized, 2);
    assert_eq!(st.refusals.get(&ErrorCode::TooLarge), Some(&2));
    assert_eq!(st.authenticated, 1);
}

#[test]
fn oversized_frame_is_refused_before_parsing() {
    let mut h = H::with(RelayConfig {
        max_frame_bytes: 64,
        ..RelayConfig::default()
    });
    h.connect(1);
    // Not JSON at all: were it parsed, this would be `malformed`.
    let frames = h.bytes(1, &[0xff; 65]);
    assert_eq!(error_code(&frames), Some((ErrorCode::TooLarge, None)));
    // Exactly at the limit is parsed (and malformed).
    let frames = h.bytes(1, &[0xff; 64]);
    assert_eq!(error_code(&frames), Some((ErrorCode::Malformed, None)));
    let frames = h.bytes(1, br#"{"t":"teleport"}"#);
    assert_eq!(error_code(&frames), Some((ErrorCode::Malformed, None)));
    let s = h.relay.stats();
    assert_eq!(s.refusals.get(&ErrorCode::TooLarge), Some(&1));
    assert_eq!(s.refusals.get(&ErrorCode::Malformed), Some(&2));
    assert!(h.events().iter().any(|e| matches!(
        e,
        RelayEvent::Refused {
            code: ErrorCode::Malformed,
            ..
        }
    )));
}

#[test]
fn wrong_sender_bad_signature_unknown_recipient() {
    let (mut h, a, b) = alice_and_bob();
    let mallory = ident(3);
    // Alice's connection sends an envelope claiming to be from bob, signed by bob.
    let forged = env(&b, "bob", &a, "alice", "t", 1);
    let frames = h.input(
        1,
        &ClientFrame::Send {
            seq: 1,
            env: forged,
        },
    );
    assert_eq!(error_code(&frames), Some((ErrorCode::WrongSender, Some(1))));
    // From alice's address but another key.
    let other_key = env(&mallory, "alice", &b, "bob", "t", 2);
    let frames = h.input(
        1,
        &ClientFrame::Send {
            seq: 2,
            env: other_key,
        },
    );
    assert_eq!(error_code(&frames), Some((ErrorCode::WrongSender, Some(2))));
    // Tampered ciphertext.
    let mut tampered = env(&a, "alice", &b, "bob", "t", 3);
    if let Some(x) = tampered.ct.first_mut() {
        *x ^= 1;
    }
    let frames = h.input(
        1,
        &ClientFrame::Send {
            seq: 3,
            env: tampered,
        },
    );
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::BadSignature, Some(3)))
    );
    // Retargeted to another recipient after signing.
    let mut retargeted = env(&a, "alice", &b, "bob", "t", 4);
    retargeted.to = addr("alice");
    let frames = h.input(
        1,
        &ClientFrame::Send {
            seq: 4,
            env: retargeted,
        },
    );
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::BadSignature, Some(4)))
    );
    // An envelope version this relay does not know.
    let mut v2 = env(&a, "alice", &b, "bob", "t", 8);
    v2.v = 2;
    let frames = h.input(1, &ClientFrame::Send { seq: 8, env: v2 });
    assert_eq!(error_code(&frames), Some((ErrorCode::Malformed, Some(8))));
    // Unknown recipient, and a recipient on another relay.
    let frames = h.input(
        1,
        &ClientFrame::Send {
            seq: 5,
            env: env(&a, "alice", &mallory, "mallory", "t", 5),
        },
    );
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::UnknownRecipient, Some(5)))
    );
    let mut s = ThreadSession::new([1; 32]);
    let far = s
        .seal(
            &a,
            &addr("alice"),
            &Address::new("bob", "far.example").unwrap(),
            &b.public(),
            "t",
            Direction::FromInitiator,
            b"{}",
        )
        .unwrap();
    let frames = h.input(1, &ClientFrame::Send { seq: 6, env: far });
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::UnknownRecipient, Some(6)))
    );
    // Nothing was queued or persisted, and the relay still serves.
    assert_eq!(h.relay.stats().queued, 0);
    assert!(!h.store.keys().any(|k| k.starts_with("q/")));
    let frames = h.input(
        1,
        &ClientFrame::Send {
            seq: 7,
            env: env(&a, "alice", &b, "bob", "t", 7),
        },
    );
    assert_eq!(frames, vec![RelayFrame::Accepted { seq: 7, id: 1 }]);
}

/// A scripted session touching every feature; returns every output.
fn script(seed: [u8; 32]) -> Vec<RelayOutput> {
    let mut relay = Relay::new(RelayConfig::default(), seed);
    let mut all = Vec::new();
    let drain = |relay: &mut Relay, all: &mut Vec<RelayOutput>| -> Option<[u8; 32]> {
        let mut nonce = None;
        while let Some(o) = relay.poll_output() {
            if let RelayOutput::Send { bytes, .. } = &o {
                if let Ok(RelayFrame::Challenge { nonce: n, .. }) = RelayFrame::from_bytes(bytes) {
                    nonce = Some(n);
                }
            }
            all.push(o);
        }
        nonce
    };
    let (a, b) = (ident(1), ident(2));
    let mut now = T0;
    for (conn, user, id) in [(1, "alice", &a), (2, "bob", &b)] {
        relay.handle(
            now,
            RelayInput::Connected {
                conn: ConnId(conn),
                source: Source(conn.into()),
            },
        );
        let nonce = drain(&mut relay, &mut all).unwrap();
        let key = id.public().to_bytes();
        let msg = challenge_signed_bytes(
            REGISTER_LABEL,
            &nonce,
            "localhost",
            now.0,
            &addr(user),
            Some(&key),
        );
        let f = ClientFrame::Register {
            address: addr(user),
            key,
            ts: now.0,
            sig: id.sign(&msg),
        };
        relay.handle(
            now,
            RelayInput::Bytes {
                conn: ConnId(conn),
                bytes: &f.to_bytes(),
            },
        );
        drain(&mut relay, &mut all);
    }
    for i in 0..5u32 {
        now = now.add(Duration::from_millis(10));
        let f = ClientFrame::Send {
            seq: u64::from(i),
            env: env(&a, "alice", &b, "bob", "t", i),
        };
        relay.handle(
            now,
            RelayInput::Bytes {
                conn: ConnId(1),
                bytes: &f.to_bytes(),
            },
        );
        relay.handle(
            now,
            RelayInput::Bytes {
                conn: ConnId(2),
                bytes: b"garbage",
            },
        );
        drain(&mut relay, &mut all);
    }
    relay.handle(
        now,
        RelayInput::Connected {
            conn: ConnId(3),
            source: Source(3),
        },
    );
    drain(&mut relay, &mut all);
    now = now.add(Duration::from_secs(120));
    relay.handle(now, RelayInput::Timeout);
    drain(&mut relay, &mut all);
    all
}

#[test]
fn deterministic_outputs() {
    let one = script([5; 32]);
    assert_eq!(one, script([5; 32]));
    assert!(one.len() > 20);
    assert_ne!(one, script([6; 32]), "the seed drives the challenges");
}

/// Everything about the relay that input from an unauthenticated connection must not
/// change (counters, rate buckets, liveness and challenges aside).
fn durable_state(r: &Relay) -> String {
    let conns: Vec<String> = r
        .conns
        .iter()
        .map(|(id, c)| format!("{id:?}:{:?}", c.address()))
        .collect();
    format!(
        "{:?}|{:?}|{}|{}|{:?}|{:?}",
        r.registry
            .iter()
            .map(|(a, k)| (a.clone(), k.key_bytes))
            .collect::<Vec<_>>(),
        r.queues,
        r.next_id,
        r.id_reserved,
        r.online,
        conns
    )
}

/// Fuzz input: arbitrary bytes, or a valid frame with a few bytes mutated or cut.
#[derive(Debug, Clone)]
struct Junk(Vec<u8>);

impl Arbitrary for Junk {
    fn arbitrary(g: &mut Gen) -> Self {
        let pick = u8::arbitrary(g) % 3;
        if pick == 0 {
            return Junk(Vec::<u8>::arbitrary(g));
        }
        static TEMPLATES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
        let templates = TEMPLATES.get_or_init(|| {
            let a = ident(1);
            let e = env(&a, "alice", &ident(2), "bob", "t", 1);
            let key = a.public().to_bytes();
            [
                ClientFrame::Send { seq: 1, env: e },
                auth_with(&[0; 32], "localhost", T0.0, "alice", &a),
                ClientFrame::Register {
                    address: addr("eve"),
                    key,
                    ts: T0.0,
                    sig: [1; 64],
                },
                ClientFrame::Ack { id: 1 },
                ClientFrame::Lookup {
                    address: addr("bob"),
                },
                ClientFrame::Ping { n: 3 },
            ]
            .iter()
            .map(ClientFrame::to_bytes)
            .collect()
        });
        let mut bytes = g.choose(templates).unwrap().clone();
        let edits = usize::arbitrary(g) % 4;
        for _ in 0..edits {
            if bytes.is_empty() {
                break;
            }
            let i = usize::arbitrary(g) % bytes.len();
            if pick == 1 {
                bytes[i] = u8::arbitrary(g);
            } else {
                bytes.truncate(i);
            }
        }
        Junk(bytes)
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        Box::new(self.0.shrink().map(Junk))
    }
}

#[test]
fn arbitrary_bytes_never_panic_and_change_nothing_when_unauthenticated() {
    // Alice and bob online, one packet queued, conn 7 connected and unauthenticated.
    static BASE: OnceLock<Relay> = OnceLock::new();
    fn prop(inputs: Vec<Junk>) -> TestResult {
        let base = BASE.get_or_init(|| {
            let (mut h, a, b) = alice_and_bob();
            h.input(
                1,
                &ClientFrame::Send {
                    seq: 0,
                    env: env(&a, "alice", &b, "bob", "t", 0),
                },
            );
            h.connect(7);
            h.relay
        });
        let mut h = H::from_relay(base.clone());
        let before = durable_state(&h.relay);
        // Junk past the refusal allowance closes conn 7, and nothing else changes.
        let mut without_7 = base.clone();
        without_7.handle(h.now, RelayInput::Disconnected { conn: ConnId(7) });
        let mut closed = false;
        for Junk(bytes) in &inputs {
            h.relay.handle(
                h.now,
                RelayInput::Bytes {
                    conn: ConnId(7),
                    bytes,
                },
            );
            while let Some(o) = h.relay.poll_output() {
                match o {
                    RelayOutput::Send {
                        conn: ConnId(7), ..
                    }
                    | RelayOutput::Event(RelayEvent::Refused {
                        conn: ConnId(7), ..
                    }) if !closed => {}
                    RelayOutput::Close {
                        conn: ConnId(7),
                        code: ErrorCode::TooManyRefusals,
                    } if !closed => closed = true,
                    other => return TestResult::error(format!("unexpected output {other:?}")),
                }
            }
        }
        // Only refusals that strike count against the allowance: junk past the
        // connection's frame budget is refused `rate_limited`, which does not.
        let refusals: u64 = h
            .relay
            .stats()
            .refusals
            .iter()
            .filter(|(code, _)| super::strikes(**code))
            .map(|(_, n)| n)
            .sum();
        if closed != (refusals > u64::from(RelayConfig::default().refusal_burst)) {
            return TestResult::error(format!("{refusals} refusals that strike, closed: {closed}"));
        }
        let expected = if closed {
            durable_state(&without_7)
        } else {
            before
        };
        if durable_state(&h.relay) != expected {
            return TestResult::error("state changed");
        }
        // Authenticated connections survive junk too.
        for Junk(bytes) in &inputs {
            h.relay.handle(
                h.now,
                RelayInput::Bytes {
                    conn: ConnId(1),
                    bytes,
                },
            );
            h.relay.handle(
                h.now,
                RelayInput::Bytes {
                    conn: ConnId(2),
                    bytes,
                },
            );
            h.drain();
        }
        TestResult::from_bool(h.relay.stats().registered == 2)
    }
    QuickCheck::new()
        .tests(300)
        .quickcheck(prop as fn(Vec<Junk>) -> TestResult);
}

#[test]
fn preverified_frames_route_like_raw_bytes() {
    let (mut h, a, b) = alice_and_bob();
    let good = ClientFrame::Send {
        seq: 1,
        env: env(&a, "alice", &b, "bob", "thr_1", 1),
    };
    let mut forged_env = env(&a, "alice", &b, "bob", "thr_1", 2);
    forged_env.sig[0] ^= 1;
    let forged = ClientFrame::Send {
        seq: 2,
        env: forged_env,
    };
    let key = a.public();
    assert!(verify_send(&good, &key));
    assert!(!verify_send(&forged, &key));
    assert!(
        !verify_send(&good, &b.public()),
        "a key other than from_key never verifies"
    );
    // The runtime parsed and verified: routed without a second check.
    let bytes = good.to_bytes();
    let parsed = parse_frame(&bytes, h.relay.config().max_frame_bytes);
    h.relay.handle(
        h.now,
        RelayInput::Frame {
            conn: ConnId(1),
            parsed,
            verified: Verified::EnvelopeSignature,
        },
    );
    h.drain();
    assert_eq!(h.frames(1), vec![RelayFrame::Accepted { seq: 1, id: 1 }]);
    // Not verified by the runtime: the relay checks and refuses the forgery.
    let parsed = parse_frame(&forged.to_bytes(), h.relay.config().max_frame_bytes);
    h.relay.handle(
        h.now,
        RelayInput::Frame {
            conn: ConnId(1),
            parsed,
            verified: Verified::No,
        },
    );
    h.drain();
    assert_eq!(
        error_code(&h.frames(1)),
        Some((ErrorCode::BadSignature, Some(2)))
    );
    // Parse errors are refusals either way.
    let big = vec![b' '; h.relay.config().max_frame_bytes + 1];
    assert_eq!(
        parse_frame(&big, h.relay.config().max_frame_bytes)
            .unwrap_err()
            .code,
        ErrorCode::TooLarge
    );
    assert_eq!(
        parse_frame(b"{", 100).unwrap_err().code,
        ErrorCode::Malformed
    );
}

#[test]
fn envelope_json_is_stored_and_delivered_exactly_as_received() {
    let (mut h, a, b) = alice_and_bob();
    let e = env(&a, "alice", &b, "bob", "t", 1);
    // Whitespace and member order the relay would not write itself: kept byte for byte.
    let sent = serde_json::to_string_pretty(&e).unwrap();
    let frame = format!("{{ \"env\" : {sent}, \"seq\": 5, \"t\": \"send\" }}");
    let frames = h.bytes(1, frame.as_bytes());
    assert_eq!(frames, vec![RelayFrame::Accepted { seq: 5, id: 1 }]);
    let to_bob: Vec<&Vec<u8>> = h
        .outs
        .iter()
        .filter_map(|o| match o {
            RelayOutput::Send { conn, bytes } if conn.0 == 2 => Some(bytes),
            _ => None,
        })
        .collect();
    assert_eq!(
        to_bob,
        vec![&format!("{{\"t\":\"deliver\",\"id\":1,\"env\":{sent}}}").into_bytes()]
    );
    assert_eq!(
        RelayFrame::from_bytes(to_bob[0]).unwrap(),
        RelayFrame::Deliver { id: 1, env: e }
    );
    assert_eq!(
        h.store["q/agent:bob@localhost/00000000000000000001"],
        format!(
            "{{\"id\":1,\"accepted_at\":{},\"env\":{sent}}}",
            h.now.as_millis()
        )
        .into_bytes()
    );
    // A frame built in memory (no bytes) is serialised once, the same way.
    let e2 = env(&a, "alice", &b, "bob", "t", 2);
    h.relay.handle(
        h.now,
        RelayInput::Frame {
            conn: ConnId(1),
            parsed: Ok(ParsedFrame::from(ClientFrame::Send {
                seq: 6,
                env: e2.clone(),
            })),
            verified: Verified::No,
        },
    );
    h.drain();
    assert_eq!(h.frames(2), vec![RelayFrame::Deliver { id: 2, env: e2 }]);
}

#[test]
fn queue_records_of_the_previous_version_restore() {
    let (mut h, a, b) = alice_and_bob();
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(2) });
    h.drain();
    // Records as the previous version wrote them: the envelope re-serialised by serde.
    let mut store: BTreeMap<String, Vec<u8>> = h
        .store
        .iter()
        .filter(|(k, _)| k.starts_with("reg/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let envs: Vec<Envelope> = (1..=3)
        .map(|n| env(&a, "alice", &b, "bob", "t", n))
        .collect();
    for (i, e) in envs.iter().enumerate() {
        let id = i as u64 + 1;
        let rec = serde_json::json!({"id": id, "accepted_at": T0.as_millis(), "env": e});
        store.insert(
            format!("q/agent:bob@localhost/{id:020}"),
            serde_json::to_vec(&rec).unwrap(),
        );
    }
    let relay = Relay::restore(RelayConfig::default(), [9; 32], store.clone()).unwrap();
    let mut h2 = H::from_relay(relay);
    h2.store = store;
    assert_eq!(h2.relay.queued_for(&addr("bob")), 3);
    let frames = h2.login(5, "bob", &b);
    let got: Vec<(u64, Envelope)> = frames
        .into_iter()
        .filter_map(|f| match f {
            RelayFrame::Deliver { id, env } => Some((id, env)),
            _ => None,
        })
        .collect();
    let want: Vec<(u64, Envelope)> = envs.into_iter().zip(1..).map(|(e, i)| (i, e)).collect();
    assert_eq!(got, want);
    // New packets continue above them.
    let frames = h2.login(6, "alice", &a);
    assert!(delivered_ids(&frames).is_empty());
    let frames = h2.input(
        6,
        &ClientFrame::Send {
            seq: 1,
            env: env(&a, "alice", &b, "bob", "u", 9),
        },
    );
    assert!(matches!(frames[..], [RelayFrame::Accepted { id, .. }] if id > 3));
}

/// Delivery ids are reserved far ahead: one `meta/next_id` per block of ids, each reaching
/// `ID_AHEAD` past the id that decided it, so the reservation covering an id was decided
/// at least `ID_AHEAD - ID_BLOCK` ids before it; a restart goes on above the last one.
#[test]
fn delivery_ids_are_reserved_far_ahead() {
    let mut r = Relay::new(RelayConfig::default(), [1; 32]);
    let mut store = BTreeMap::new();
    // (the id taken when it was decided, the ids it covers)
    let mut reservations: Vec<(u64, u64)> = Vec::new();
    for _ in 0..5 * ID_BLOCK {
        let id = r.take_delivery_id().unwrap();
        while let Some(o) = r.poll_output() {
            let RelayOutput::Persist(op) = &o else {
                panic!("{o:?}")
            };
            assert!(o.reserves_delivery_ids());
            reservations.push((id, o.reserved_delivery_ids().unwrap()));
            persist::apply(&mut store, op);
        }
        let &(_, upto) = reservations.last().unwrap();
        assert!(id < upto, "id {id} beyond the reservation {upto}");
        let covering = reservations.iter().find(|&&(_, u)| id < u).unwrap();
        assert!(
            covering.0 == 1 || id - covering.0 >= ID_AHEAD - ID_BLOCK,
            "id {id} covered by a reservation decided at {}",
            covering.0
        );
    }
    assert_eq!(reservations.len(), 5, "one reservation per block");
    assert_eq!(reservations[0], (1, 1 + ID_AHEAD));
    assert_eq!(r.next_delivery_id(), 5 * ID_BLOCK + 1);
    let last = reservations.last().unwrap().1;
    let restored = Relay::restore(RelayConfig::default(), [2; 32], store).unwrap();
    assert_eq!(
        restored.next_delivery_id(),
        last,
        "no id below it is handed out again"
    );
}

/// `RelayOutput::delivery_id` reads a `deliver` frame's id, and nothing else has one.
#[test]
fn a_deliver_output_names_its_id() {
    let (mut h, a, b) = alice_and_bob();
    h.input(
        1,
        &ClientFrame::Send {
            seq: 4,
            env: env(&a, "alice", &b, "bob", "t", 0),
        },
    );
    let ids: Vec<(u64, Option<u64>)> = h
        .outs
        .iter()
        .filter_map(|o| match o {
            RelayOutput::Send { conn, .. } => Some((conn.0, o.delivery_id())),
            _ => None,
        })
        .collect();
    assert_eq!(ids, vec![(1, None), (2, Some(1))]);
    assert!(h
        .outs
        .iter()
        .all(|o| o.is_delivery() == o.delivery_id().is_some()));
    let reservation = h.outs.iter().find_map(RelayOutput::reserved_delivery_ids);
    assert_eq!(reservation, Some(1 + ID_AHEAD));
}
