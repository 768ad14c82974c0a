use super::log::ClientLog;
use super::verify::{batchable_r, VerifyState, SMALL_ORDER_Y};
use super::*;
use a2acp_core::crypto::{Direction, IdentityKey, ThreadSession};
use a2acp_core::link::{ClientFrame, RelayFrame};
use a2acp_core::Address;
use ed25519_dalek::VerifyingKey;

fn seed(i: u64) -> [u8; 32] {
    let mut s = [9u8; 32];
    s[..8].copy_from_slice(&i.to_le_bytes());
    s
}

fn addr(i: u64) -> Address {
    Address::parse(&format!("agent:v{i}@localhost")).unwrap()
}

/// A `send` frame from agent `i` to agent `i + 1`.
fn send_bytes(i: u64, k: u64) -> (Vec<u8>, [u8; 32]) {
    let me = IdentityKey::from_seed(seed(i));
    let peer = IdentityKey::from_seed(seed(i + 1));
    let mut s = ThreadSession::new(seed(1000 + i * 100 + k));
    let env = s
        .seal(
            &me,
            &addr(i),
            &addr(i + 1),
            peer.public_ref(),
            &format!("thr_{i}_{k}"),
            Direction::FromInitiator,
            b"hello",
        )
        .unwrap();
    (
        ClientFrame::Send { seq: k, env }.to_bytes(),
        me.public().to_bytes(),
    )
}

fn verdicts(items: &[Item]) -> Vec<Verified> {
    items
        .iter()
        .filter_map(|it| match it {
            Item::Frame(_, _, v) => Some(*v),
            Item::Oversized(..) | Item::Raw(..) | Item::Disconnected(_) => None,
        })
        .collect()
}

fn corrupt_sig(frame: &[u8]) -> Vec<u8> {
    // Flip one character of the base64 signature (the last field).
    let s = String::from_utf8(frame.to_vec()).unwrap();
    let i = s.rfind("\"sig\":\"").unwrap() + 10;
    let mut b = s.into_bytes();
    b[i] = if b[i] == b'A' { b'B' } else { b'A' };
    b
}

#[test]
fn small_order_encodings_are_the_small_order_points() {
    for y in SMALL_ORDER_Y {
        let mut decodable = 0;
        for sign in [0u8, 0x80] {
            let mut b = y;
            b[31] |= sign;
            if let Ok(vk) = VerifyingKey::from_bytes(&b) {
                assert!(vk.is_weak(), "{b:02x?} is not of small order");
                decodable += 1;
            }
        }
        assert!(decodable > 0, "{y:02x?} is no point");
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(&y);
        assert!(!batchable_r(&sig));
    }
    // p + 1 ≡ 1 (non-canonical) and an ordinary point are told apart.
    let mut sig = [0xffu8; 64];
    sig[0] = 0xee;
    sig[31] = 0x7f;
    assert!(!batchable_r(&sig));
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(IdentityKey::from_seed(seed(1)).public().to_bytes().as_ref());
    assert!(batchable_r(&sig));
}

#[test]
fn verifies_authenticated_sends_one_by_one_and_in_batches() {
    for n in [1u64, 3, 4, 9, 70] {
        let mut st = VerifyState::new(131_072, &RelayConfig::default());
        let mut input = Vec::new();
        for i in 0..n {
            let (b, key) = send_bytes(i, 1);
            st.apply(Ctl::Authed(ConnId(i), key));
            input.push(VerifyIn::Bytes(ConnId(i), b.into()));
        }
        let items = st.process(input.into_iter());
        assert_eq!(
            verdicts(&items),
            vec![Verified::EnvelopeSignature; n as usize],
            "n = {n}"
        );
    }
}

#[test]
fn a_bad_signature_in_a_batch_is_found_and_left_unverified() {
    let mut st = VerifyState::new(131_072, &RelayConfig::default());
    let mut input = Vec::new();
    for i in 0..10u64 {
        let (mut b, key) = send_bytes(i, 1);
        if i == 6 {
            b = corrupt_sig(&b);
        }
        st.apply(Ctl::Authed(ConnId(i), key));
        input.push(VerifyIn::Bytes(ConnId(i), b.into()));
    }
    let items = st.process(input.into_iter());
    let mut want = vec![Verified::EnvelopeSignature; 10];
    want[6] = Verified::No;
    assert_eq!(verdicts(&items), want);
}

#[test]
fn unauthenticated_or_foreign_keys_are_left_to_the_state_machine() {
    let mut st = VerifyState::new(131_072, &RelayConfig::default());
    let (b0, k0) = send_bytes(0, 1);
    let (b1, _) = send_bytes(1, 1);
    let (b2, k2) = send_bytes(2, 1);
    // conn 0 authenticated with its key; conn 1 not at all; conn 2 with another key.
    st.apply(Ctl::Authed(ConnId(0), k0));
    st.apply(Ctl::Authed(ConnId(2), k0));
    let items = st.process(
        vec![
            VerifyIn::Bytes(ConnId(0), b0.clone().into()),
            VerifyIn::Bytes(ConnId(1), b1.into()),
            VerifyIn::Bytes(ConnId(2), b2.into()),
            VerifyIn::Bytes(ConnId(3), b"{\"t\":\"nope\"}".to_vec().into()),
            VerifyIn::Disconnected(ConnId(0)),
            VerifyIn::Bytes(ConnId(0), b0.into()),
        ]
        .into_iter(),
    );
    assert_eq!(
        verdicts(&items),
        vec![
            Verified::EnvelopeSignature,
            Verified::No,
            Verified::No,
            Verified::No,
            Verified::No
        ]
    );
    assert!(matches!(&items[3], Item::Frame(_, Err(e), _) if e.code == ErrorCode::Malformed));
    assert!(matches!(items[4], Item::Disconnected(ConnId(0))));
    assert_ne!(k0, k2);
}

#[test]
fn a_sender_beyond_its_rate_gets_no_more_checks_here() {
    let cfg = RelayConfig {
        rate_per_sec: 1,
        rate_burst: 2,
        ..RelayConfig::default()
    };
    let mut st = VerifyState::new(131_072, &cfg);
    let (_, key) = send_bytes(0, 0);
    st.apply(Ctl::Authed(ConnId(0), key));
    let input = (1..=6u64).map(|k| VerifyIn::Bytes(ConnId(0), send_bytes(0, k).0.into()));
    // A burst of 2, then one per second.
    let items = st.process(input.collect::<Vec<_>>().into_iter());
    let v = verdicts(&items);
    assert_eq!(&v[..2], &[Verified::EnvelopeSignature; 2]);
    assert_eq!(&v[2..], &[Verified::No; 4]);
}

/// The whole service on its threads: register, send, deliver, ack, metrics, stop.
#[test]
fn routes_through_the_pipeline() {
    use a2acp_core::link::{challenge_signed_bytes, REGISTER_LABEL};
    let svc = RelayService::start(ServiceConfig {
        verifiers: 2,
        ..ServiceConfig::default()
    })
    .unwrap();
    let h = svc.handle();
    let recv = |rx: &flume::Receiver<ConnOut>| -> RelayFrame {
        match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
            ConnOut::Frame(b) => RelayFrame::from_bytes(&b).unwrap(),
            other => panic!("{other:?}"),
        }
    };
    let mut conns = Vec::new();
    for i in 0..2u64 {
        let (conn, rx) = block_on(h.connect(LOCALHOST)).unwrap();
        let RelayFrame::Challenge { nonce, domain, .. } = recv(&rx) else {
            panic!("no challenge")
        };
        let id = IdentityKey::from_seed(seed(i));
        let ts = crate::clock::now().as_millis();
        let key = id.public().to_bytes();
        let msg = challenge_signed_bytes(REGISTER_LABEL, &nonce, &domain, ts, &addr(i), Some(&key));
        let f = ClientFrame::Register {
            address: addr(i),
            key,
            ts,
            sig: id.sign(&msg),
        };
        block_on(h.bytes(conn, f.to_bytes())).unwrap();
        assert!(matches!(recv(&rx), RelayFrame::AuthOk { .. }));
        conns.push((conn, rx));
    }
    for k in 1..=20u64 {
        let (b, _) = send_bytes(0, k);
        block_on(h.bytes(conns[0].0, b)).unwrap();
    }
    let mut accepted = 0;
    let mut delivered = Vec::new();
    while accepted < 20 || delivered.len() < 20 {
        if let Ok(ConnOut::Frame(b)) = conns[0].1.try_recv() {
            if let RelayFrame::Accepted { .. } = RelayFrame::from_bytes(&b).unwrap() {
                accepted += 1;
            }
            continue;
        }
        if let Ok(ConnOut::Frame(b)) = conns[1].1.recv_timeout(Duration::from_millis(50)) {
            if let RelayFrame::Deliver { id, .. } = RelayFrame::from_bytes(&b).unwrap() {
                delivered.push(id);
            }
        }
    }
    for id in delivered {
        block_on(h.bytes(conns[1].0, ClientFrame::Ack { id }.to_bytes())).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = block_on(h.snapshot()).unwrap();
        if s.stats.acked_total == 20 {
            assert_eq!(s.stats.routed_total, 20);
            assert_eq!(s.stats.queued, 0);
            assert!(s.stats.refusals.is_empty(), "{:?}", s.stats.refusals);
            assert!(s.commits >= 1);
            break;
        }
        assert!(Instant::now() < deadline, "{s:?}");
    }
    svc.stop_and_join(true).unwrap();
    assert!(matches!(
        conns[0].1.recv_timeout(Duration::from_secs(1)),
        Ok(ConnOut::Close(None)) | Ok(ConnOut::Frame(_))
    ));
    assert!(block_on(h.snapshot()).is_none());
}

#[test]
fn puts_deleted_in_the_same_transaction_are_not_written() {
    use a2acp_core::persist::PersistOp;
    let put = |k: &str| PersistOp::Put {
        key: k.into(),
        value: k.as_bytes().to_vec(),
    };
    let del = |k: &str| PersistOp::Delete { key: k.into() };
    let mut ops = vec![
        put("meta/next_id"),
        put("q/a/1"),
        put("q/b/2"),
        del("q/a/1"),
        put("q/c/3"),
        del("q/x/0"),
        del("q/c/3"),
        put("q/c/3"),
    ];
    commit::coalesce(&mut ops);
    assert_eq!(
        ops,
        vec![
            put("meta/next_id"),
            put("q/b/2"),
            del("q/a/1"),
            del("q/x/0"),
            del("q/c/3"),
            put("q/c/3"),
        ]
    );
    let mut none = vec![put("a"), del("b")];
    commit::coalesce(&mut none);
    assert_eq!(none, vec![put("a"), del("b")]);
}

/// An agent that comes back to packets queued for it gets its `auth_ok` first, then every
/// delivery once and in id order (deliveries go out without waiting for the commit, but
/// never ahead of the connection's `auth_ok` or of an earlier delivery).
#[test]
fn deliveries_follow_auth_ok_in_id_order() {
    use a2acp_core::link::{challenge_signed_bytes, AUTH_LABEL, REGISTER_LABEL};
    let svc = RelayService::start(ServiceConfig {
        verifiers: 2,
        ..ServiceConfig::default()
    })
    .unwrap();
    let h = svc.handle();
    let recv = |rx: &flume::Receiver<ConnOut>| -> RelayFrame {
        match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
            ConnOut::Frame(b) => RelayFrame::from_bytes(&b).unwrap(),
            other => panic!("{other:?}"),
        }
    };
    let login = |i: u64, register: bool| {
        let (conn, rx) = block_on(h.connect(LOCALHOST)).unwrap();
        let RelayFrame::Challenge { nonce, domain, .. } = recv(&rx) else {
            panic!("no challenge")
        };
        let id = IdentityKey::from_seed(seed(i));
        let ts = crate::clock::now().as_millis();
        let key = id.public().to_bytes();
        let f = if register {
            let msg =
                challenge_signed_bytes(REGISTER_LABEL, &nonce, &domain, ts, &addr(i), Some(&key));
            ClientFrame::Register {
                address: addr(i),
                key,
                ts,
                sig: id.sign(&msg),
            }
        } else {
            let msg = challenge_signed_bytes(AUTH_LABEL, &nonce, &domain, ts, &addr(i), None);
            ClientFrame::Auth {
                address: addr(i),
                ts,
                sig: id.sign(&msg),
            }
        };
        block_on(h.bytes(conn, f.to_bytes())).unwrap();
        (conn, rx)
    };
    let (c0, rx0) = login(0, true);
    assert!(matches!(recv(&rx0), RelayFrame::AuthOk { .. }));
    let (c1, rx1) = login(1, true);
    assert!(matches!(recv(&rx1), RelayFrame::AuthOk { .. }));
    block_on(h.disconnected(c1));
    drop(rx1);
    for k in 1..=30u64 {
        block_on(h.bytes(c0, send_bytes(0, k).0)).unwrap();
    }
    // Half of them queued before the recipient is back, the rest around its return.
    for _ in 0..15 {
        assert!(matches!(recv(&rx0), RelayFrame::Accepted { .. }));
    }
    let (_c1, rx1) = login(1, false);
    assert!(matches!(recv(&rx1), RelayFrame::AuthOk { .. }));
    let mut ids = Vec::new();
    while ids.len() < 30 {
        match recv(&rx1) {
            RelayFrame::Deliver { id, .. } => ids.push(id),
            RelayFrame::Ping { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    svc.stop_and_join(true).unwrap();
}

const LOCALHOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

#[test]
fn sources_of_ip_addresses() {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let v4 = source_of_ip(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
    assert_eq!(
        v4,
        source_of_ip(IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped()))
    );
    assert_ne!(v4, source_of_ip(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2))));
    // IPv6: one /64 is one source.
    let a: Ipv6Addr = "2001:db8:1:2:aaaa::1".parse().unwrap();
    let b: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().unwrap();
    let c: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
    assert_eq!(source_of_ip(a.into()), source_of_ip(b.into()));
    assert_ne!(source_of_ip(a.into()), source_of_ip(c.into()));
}

#[test]
fn frames_of_connections_the_relay_closed_are_dropped_unparsed() {
    let mut st = VerifyState::new(131_072, &RelayConfig::default());
    st.apply(Ctl::Closed(ConnId(1)));
    let items = st.process(
        vec![
            VerifyIn::Bytes(ConnId(1), b"junk".to_vec().into()),
            VerifyIn::Oversized(ConnId(1), 10),
            VerifyIn::Bytes(ConnId(2), b"junk".to_vec().into()),
            VerifyIn::Disconnected(ConnId(1)),
        ]
        .into_iter(),
    );
    assert_eq!(items.len(), 2);
    assert!(matches!(items[0], Item::Frame(ConnId(2), Err(_), _)));
    assert!(matches!(items[1], Item::Disconnected(ConnId(1))));
    assert!(st.closed.is_empty(), "forgotten with its disconnection");
}

#[test]
fn the_log_limiter_lets_a_burst_through_then_counts() {
    let l = ClientLog::new();
    let allowed = (0..1000).filter(|_| l.allow()).count();
    let t0 = Instant::now();
    // The burst, and whatever the refill gave while the loop ran (well under a second).
    assert!(
        (LOG_BURST as usize..LOG_BURST as usize + 3).contains(&allowed),
        "{allowed}"
    );
    assert_eq!(l.total(), 1000 - allowed as u64);
    l.held_back(5);
    assert_eq!(l.total(), 1005 - allowed as u64);
    // A summary clears what it reported, at most every LOG_SUMMARY_EVERY.
    assert_eq!(l.limiter.summary_at(t0, LOG_SUMMARY_EVERY), None);
    let later = t0 + LOG_SUMMARY_EVERY * 2;
    assert_eq!(
        l.limiter
            .summary_at(later, LOG_SUMMARY_EVERY)
            .map(|(n, _)| n),
        Some(1000 - allowed as u64)
    );
    assert_eq!(l.limiter.summary_at(later, LOG_SUMMARY_EVERY), None);
}

/// A junk flood through the whole service is closed with `too_many_refusals`; an
/// oversized message is answered `too_large` and closed with that code.
#[test]
fn abusive_connections_are_closed_through_the_pipeline() {
    let svc = RelayService::start(ServiceConfig {
        verifiers: 2,
        ..ServiceConfig::default()
    })
    .unwrap();
    let h = svc.handle();
    let (conn, rx) = block_on(h.connect(LOCALHOST)).unwrap();
    for _ in 0..500 {
        block_on(h.bytes(conn, b"junk".to_vec())).unwrap();
    }
    let mut malformed = 0;
    let close = loop {
        match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
            ConnOut::Frame(b) => {
                if let Ok(RelayFrame::Error {
                    code: ErrorCode::Malformed,
                    ..
                }) = RelayFrame::from_bytes(&b)
                {
                    malformed += 1;
                }
            }
            ConnOut::Close(code) => break code,
        }
    };
    assert_eq!(close, Some(ErrorCode::TooManyRefusals));
    let allowance = RelayConfig::default().refusal_burst;
    assert!(
        malformed > allowance && malformed < allowance + 5,
        "{malformed}"
    );
    block_on(h.disconnected(conn));

    let (conn, rx) = block_on(h.connect(LOCALHOST)).unwrap();
    block_on(h.oversized(conn, 262_144)).unwrap();
    let mut frames = Vec::new();
    let close = loop {
        match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
            ConnOut::Frame(b) => frames.push(RelayFrame::from_bytes(&b).unwrap()),
            ConnOut::Close(code) => break code,
        }
    };
    assert_eq!(close, Some(ErrorCode::TooLarge));
    assert!(matches!(
        frames.last(),
        Some(RelayFrame::Error {
            code: ErrorCode::TooLarge,
            ..
        })
    ));
    block_on(h.disconnected(conn));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = block_on(h.snapshot()).unwrap();
        if s.stats.connections == 0 {
            assert_eq!(s.stats.closed_for_refusals, 1);
            assert_eq!(s.stats.closed_oversized, 1);
            // 3 refusals of the flood logged, the rest counted (some by the limiter).
            assert!(s.log_lines_suppressed >= u64::from(allowance) - 2, "{s:?}");
            break;
        }
        assert!(Instant::now() < deadline, "{s:?}");
    }
    svc.stop_and_join(true).unwrap();
}

/// A minimal executor for the handle's futures (flume's async sends on a thread).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct T(std::thread::Thread);
    impl Wake for T {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(T(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

/// A delivery goes at once when a committed reservation covers its id, even while a later
/// reservation waits for its commit; one whose id only a pending reservation covers waits
/// for that batch, and those behind it on the connection keep their order.
#[test]
fn a_delivery_waits_only_for_the_reservation_covering_its_id() {
    use super::early::{EarlyConns, Outcome};
    let mut early = EarlyConns::new(1);
    let (tx, rx) = flume::bounded(16);
    early.opened(ConnId(1), &tx, 1);
    early.reserved(1, 100);
    early.reserved(3, 200);
    let frame = |id: u64| format!("deliver {id}").into_bytes();
    let got = |rx: &flume::Receiver<ConnOut>| -> Vec<Vec<u8>> {
        rx.try_iter()
            .map(|o| match o {
                ConnOut::Frame(b) => b,
                ConnOut::Close(_) => panic!("closed"),
            })
            .collect()
    };
    // Nothing executed yet: the connection's opening and the first reservation wait.
    assert_eq!(early.deliver(ConnId(1), 5, frame(5), 0), Outcome::Done);
    assert!(got(&rx).is_empty());
    assert!(early.release(1).is_empty());
    assert_eq!(got(&rx), vec![frame(5)]);
    // Batch 1 executed: ids below 100 go at once, batch 3 still pending.
    assert_eq!(early.deliver(ConnId(1), 99, frame(99), 1), Outcome::Done);
    assert_eq!(got(&rx), vec![frame(99)]);
    // Id 150 waits for batch 3; id 7 behind it keeps the connection's order.
    assert_eq!(early.deliver(ConnId(1), 150, frame(150), 2), Outcome::Done);
    assert_eq!(early.deliver(ConnId(1), 7, frame(7), 2), Outcome::Done);
    assert!(got(&rx).is_empty());
    assert!(early.has_parked());
    assert!(early.release(2).is_empty());
    assert!(got(&rx).is_empty());
    assert!(early.release(3).is_empty());
    assert_eq!(got(&rx), vec![frame(150), frame(7)]);
    assert!(!early.has_parked());
    assert_eq!(early.deliver(ConnId(1), 199, frame(199), 3), Outcome::Done);
    assert_eq!(got(&rx), vec![frame(199)]);
    // An unknown connection's delivery goes with the batch.
    assert_eq!(
        early.deliver(ConnId(9), 1, frame(1), 3),
        Outcome::Unknown(frame(1))
    );
}
