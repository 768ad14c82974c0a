//! Federation: each rule and each attack, on relays linked in memory ([`super::net`]).

use std::time::Duration;

use super::net::{addr, domain_of, packet, relay_key, Msg, Net};
use super::{DiscoveryError, FederationEvent};
use crate::crypto::IdentityKey;
use crate::link::{ClientFrame, ErrorCode, RelayFrame};
use crate::relay::{Relay, RelayConfig, RelayInput, RelayOutput};

fn id(n: u8) -> IdentityKey {
    IdentityKey::from_seed([n; 32])
}

fn send(
    net: &mut Net,
    i: usize,
    conn: u64,
    seq: u64,
    env: crate::crypto::envelope::Envelope,
) -> Vec<RelayFrame> {
    net.client(i, conn, &ClientFrame::Send { seq, env });
    let frames = net.take(i, conn);
    // Deliveries and notices stay for the agent to read.
    let keep: Vec<RelayFrame> = frames
        .iter()
        .filter(|f| {
            matches!(
                f,
                RelayFrame::Deliver { .. } | RelayFrame::Undeliverable { .. }
            )
        })
        .cloned()
        .collect();
    if !keep.is_empty() {
        net.inbox.insert((i, conn), keep);
    }
    frames
}

fn accepted(frames: &[RelayFrame], seq: u64) -> bool {
    frames
        .iter()
        .any(|f| matches!(f, RelayFrame::Accepted { seq: s, .. } if *s == seq))
}

fn delivered(frames: &[RelayFrame]) -> usize {
    frames
        .iter()
        .filter(|f| matches!(f, RelayFrame::Deliver { .. }))
        .count()
}

/// alice@a.example on conn 1 of node 0, bob@b.example on conn 2 of node 1.
fn pair() -> (Net, IdentityKey, IdentityKey) {
    let mut net = Net::new(2);
    let (a, b) = (id(1), id(2));
    net.register(0, 1, "alice", &a);
    net.register(1, 2, "bob", &b);
    (net, a, b)
}

/// A lookup of a remote address waits for discovery: the relay's next timer is
/// discovery's deadline, never "now" again and again (a runtime that fires due timers at
/// once would spin).
#[test]
fn waiting_for_discovery_does_not_keep_the_timer_due() {
    let (mut net, _, _) = pair();
    let now = net.now;
    let relay = net.nodes[0].relay.as_mut().unwrap();
    let f = ClientFrame::Lookup {
        address: addr("bob", 1),
    };
    relay.handle(
        now,
        RelayInput::Bytes {
            conn: crate::relay::ConnId(1),
            bytes: &f.to_bytes(),
        },
    );
    let mut asked = false;
    while let Some(o) = relay.poll_output() {
        asked |= matches!(o, RelayOutput::Discover { .. });
    }
    assert!(asked, "discovery asked");
    let due = relay.poll_timeout().expect("discovery's deadline");
    assert!(
        due > now,
        "a timer due at once while nothing can be done: {due:?}"
    );
}

#[test]
fn a_packet_crosses_domains_exactly_once() {
    let (mut net, a, b) = pair();
    let env = packet(&a, ("alice", 0), &b, ("bob", 1), "dinner", 1);
    let frames = send(&mut net, 0, 1, 7, env.clone());
    assert!(accepted(&frames, 7), "{frames:?}");
    let got = net.take(1, 2);
    let envs = net.ack_all(1, 2, &got);
    assert_eq!(envs, vec![env]);
    let s0 = net.nodes[0].relay.as_ref().unwrap().stats();
    let s1 = net.nodes[1].relay.as_ref().unwrap().stats();
    assert_eq!(s0.federation["b.example"].forwarded, 1);
    assert_eq!(s0.federation["b.example"].queued, 0);
    assert!(s0.federation["b.example"].link_out);
    assert_eq!(s1.federation["a.example"].received, 1);
    assert_eq!(s1.federation["a.example"].links_in, 1);
    assert_eq!(s1.queued, 0, "acknowledged");
    // The outbound record is gone, the sequence reservation and the inbound state stay.
    assert!(!net.nodes[0].store.keys().any(|k| k.starts_with("fo/")));
    assert!(net.nodes[1].store.contains_key("fed/in/a.example"));
    assert!(net.nodes[1]
        .store
        .contains_key("fed/pin/agent:alice@a.example"));
}

#[test]
fn federation_off_refuses_other_domains_as_before() {
    let mut net = Net::with(2, |i, c| {
        if i == 0 {
            c.federation = None;
        }
    });
    let (a, b) = (id(1), id(2));
    net.register(0, 1, "alice", &a);
    net.register(1, 2, "bob", &b);
    let frames = send(
        &mut net,
        0,
        1,
        1,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1),
    );
    assert!(frames.iter().any(|f| matches!(
        f,
        RelayFrame::Error {
            code: ErrorCode::UnknownRecipient,
            seq: Some(1),
            ..
        }
    )));
    assert!(net.nodes[0]
        .relay
        .as_ref()
        .unwrap()
        .stats()
        .federation
        .is_empty());
    // And a relay link to it is refused.
    let r = net.nodes[0].relay.as_mut().unwrap();
    r.handle(
        net.now,
        RelayInput::Connected {
            conn: crate::relay::ConnId(9),
            source: crate::relay::Source(9),
        },
    );
    while r.poll_output().is_some() {}
}

#[test]
fn the_default_relay_is_unchanged_by_the_federation_fields() {
    // Same seed, same inputs: identical outputs with the field present and `None`.
    let run = || {
        let mut r = Relay::new(RelayConfig::default(), [3; 32]);
        r.handle(
            super::net::T0,
            RelayInput::Connected {
                conn: crate::relay::ConnId(1),
                source: crate::relay::Source(1),
            },
        );
        let mut v = Vec::new();
        while let Some(o) = r.poll_output() {
            v.push(o);
        }
        (v, r.poll_timeout())
    };
    assert_eq!(run(), run());
    assert!(RelayConfig::default().federation.is_none());
}

#[test]
fn a_domain_without_relay_is_refused_clearly() {
    let (mut net, a, _) = pair();
    let zed = id(9);
    net.directory.insert(
        "z.example".into(),
        Err(DiscoveryError::NoRelay(
            "z.example publishes no relay".into(),
        )),
    );
    let to = crate::address::Address::new("zed", "z.example").unwrap();
    let mut s = crate::crypto::ThreadSession::new([1; 32]);
    let env = s
        .seal(
            &a,
            &addr("alice", 0),
            &to,
            &zed.public(),
            "t",
            crate::crypto::envelope::Direction::FromInitiator,
            b"{}",
        )
        .unwrap();
    let frames = send(&mut net, 0, 1, 3, env.clone());
    assert!(
        frames.iter().any(|f| matches!(
            f,
            RelayFrame::Error { code: ErrorCode::UnknownRecipient, seq: Some(3), message } if message.contains("publishes no relay")
        )),
        "{frames:?}"
    );
    // Remembered: the next one is refused without asking again.
    let asked = net
        .fed_events(0)
        .iter()
        .filter(|e| matches!(e, FederationEvent::Discovering { .. }))
        .count();
    let frames = send(&mut net, 0, 1, 4, env);
    assert!(matches!(
        frames.as_slice(),
        [RelayFrame::Error {
            code: ErrorCode::UnknownRecipient,
            ..
        }]
    ));
    let again = net
        .fed_events(0)
        .iter()
        .filter(|e| matches!(e, FederationEvent::Discovering { .. }))
        .count();
    assert_eq!(asked, again);
}

#[test]
fn a_remote_lookup_is_answered_through_the_link() {
    let (mut net, _, b) = pair();
    net.client(
        0,
        1,
        &ClientFrame::Lookup {
            address: addr("bob", 1),
        },
    );
    let frames = net.take(0, 1);
    assert_eq!(
        frames,
        vec![RelayFrame::Key {
            address: addr("bob", 1),
            key: Some(b.public().to_bytes()),
            rotation: None,
            recovery: None,
        }]
    );
    net.client(
        0,
        1,
        &ClientFrame::Lookup {
            address: addr("nobody", 1),
        },
    );
    assert_eq!(
        net.take(0, 1),
        vec![RelayFrame::Key {
            address: addr("nobody", 1),
            key: None,
            rotation: None,
            recovery: None,
        }]
    );
}

#[test]
fn a_link_with_a_key_the_domain_does_not_publish_is_refused() {
    let mut net = Net::new(2);
    // b.example publishes another key than the one node 1 signs with.
    net.directory.insert(
        "b.example".into(),
        Ok(super::RemoteRelay {
            endpoint: "wss://relay.b.example/link".into(),
            keys: vec![relay_key(3).public()],
        }),
    );
    let (a, b) = (id(1), id(2));
    net.register(0, 1, "alice", &a);
    net.register(1, 2, "bob", &b);
    let frames = send(
        &mut net,
        0,
        1,
        1,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1),
    );
    assert!(accepted(&frames, 1), "queued: the relay keeps trying");
    assert!(net.take(1, 2).is_empty());
    assert!(net
        .fed_events(0)
        .iter()
        .any(|e| matches!(e, FederationEvent::Lie { domain, .. } if domain == "b.example")));
    let s = net.nodes[0].relay.as_ref().unwrap().stats();
    assert!(!s.federation["b.example"].link_out);
    assert_eq!(s.federation["b.example"].queued, 1);
    assert!(s.federation["b.example"].reputation < 0);
}

#[test]
fn an_accepting_relay_checks_the_dialers_published_key() {
    let mut net = Net::new(2);
    net.directory.insert(
        "a.example".into(),
        Ok(super::RemoteRelay {
            endpoint: "wss://relay.a.example/link".into(),
            keys: vec![relay_key(3).public()],
        }),
    );
    let (a, b) = (id(1), id(2));
    net.register(0, 1, "alice", &a);
    net.register(1, 2, "bob", &b);
    send(
        &mut net,
        0,
        1,
        1,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1),
    );
    assert!(net.take(1, 2).is_empty());
    assert!(net
        .fed_events(1)
        .iter()
        .any(|e| matches!(e, FederationEvent::Lie { domain, .. } if domain == "a.example")));
    assert_eq!(
        net.nodes[1].relay.as_ref().unwrap().stats().federation["a.example"].links_in,
        0
    );
}

/// A lying relay: node 0's pushes pass through `rewrite`.
fn lie(rewrite: impl Fn(&mut serde_json::Value) + 'static) -> (Net, IdentityKey, IdentityKey) {
    let (mut net, a, b) = pair();
    net.tamper.insert(
        0,
        Box::new(move |bytes: &[u8]| {
            let mut v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
            if v["t"] == "push" {
                rewrite(&mut v);
            }
            Some(serde_json::to_vec(&v).unwrap())
        }),
    );
    (net, a, b)
}

#[test]
fn a_sender_not_on_the_linking_domain_is_rejected() {
    // Node 0 forwards an envelope claiming to come from carol@c.example.
    let (mut net, _, b) = pair();
    let carol = id(5);
    let forged = packet(&carol, ("carol", 2), &b, ("bob", 1), "t", 1);
    let forged = serde_json::to_value(&forged).unwrap();
    let (mut net2, a, _) = lie(move |v| v["env"] = forged.clone());
    std::mem::swap(&mut net, &mut net2);
    let frames = send(
        &mut net,
        0,
        1,
        1,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1),
    );
    assert!(accepted(&frames, 1));
    assert!(net.take(1, 2).is_empty(), "nothing delivered");
    assert!(net.fed_events(1).iter().any(
        |e| matches!(e, FederationEvent::Lie { what, .. } if what.contains("not on its domain"))
    ));
    // The sender is told.
    let told = net.take(0, 1);
    assert!(
        told.iter().any(|f| matches!(
            f,
            RelayFrame::Undeliverable {
                code: ErrorCode::WrongSender,
                ..
            }
        )),
        "{told:?}"
    );
}

#[test]
fn a_changed_key_is_a_lie() {
    let (mut net, a, b) = pair();
    send(
        &mut net,
        0,
        1,
        1,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1),
    );
    let got = net.take(1, 2);
    net.ack_all(1, 2, &got);
    // Node 0 now forwards an envelope from alice@a.example signed by another key.
    let other = id(7);
    let forged =
        serde_json::to_value(packet(&other, ("alice", 0), &b, ("bob", 1), "t", 2)).unwrap();
    net.tamper.insert(
        0,
        Box::new(move |bytes: &[u8]| {
            let mut v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
            if v["t"] == "push" {
                v["env"] = forged.clone();
            }
            Some(serde_json::to_vec(&v).unwrap())
        }),
    );
    send(
        &mut net,
        0,
        1,
        2,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 2),
    );
    assert_eq!(delivered(&net.take(1, 2)), 0);
    assert!(net
        .fed_events(1)
        .iter()
        .any(|e| matches!(e, FederationEvent::Lie { what, .. } if what.contains("changed key"))));
}

#[test]
fn a_bad_signature_on_the_link_is_rejected() {
    let (mut net, a, b) = lie(|v| {
        let s = v["env"]["sig"].as_str().unwrap().to_string();
        let mut c: Vec<char> = s.chars().collect();
        c[5] = if c[5] == 'A' { 'B' } else { 'A' };
        v["env"]["sig"] = c.into_iter().collect::<String>().into();
    });
    send(
        &mut net,
        0,
        1,
        1,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1),
    );
    assert_eq!(delivered(&net.take(1, 2)), 0);
    let told = net.take(0, 1);
    assert!(
        told.iter().any(|f| matches!(
            f,
            RelayFrame::Undeliverable {
                code: ErrorCode::BadSignature,
                ..
            }
        )),
        "{told:?}"
    );
}

#[test]
fn a_retry_after_the_receiver_crashed_is_recognised() {
    let (mut net, a, b) = pair();
    // Bob's relay persists the packet, then crashes before its `pushed` leaves.
    net.tamper.insert(
        1,
        Box::new(|bytes: &[u8]| {
            let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
            (v["t"] != "pushed").then(|| bytes.to_vec())
        }),
    );
    let env = packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1);
    send(&mut net, 0, 1, 1, env.clone());
    let first = net.take(1, 2);
    assert_eq!(delivered(&first), 1);
    net.ack_all(1, 2, &first);
    net.tamper.clear();
    net.crash(1);
    net.restart(1);
    net.register(1, 2, "bob", &b);
    // Alice's relay dials again after its backoff and pushes the same number.
    net.advance(Duration::from_secs(600), Duration::from_secs(1));
    assert_eq!(delivered(&net.take(1, 2)), 0, "not delivered twice");
    assert!(net
        .fed_events(1)
        .iter()
        .any(|e| matches!(e, FederationEvent::Duplicate { .. })));
    assert_eq!(
        net.nodes[0].relay.as_ref().unwrap().stats().federation["b.example"].queued,
        0
    );
}

#[test]
fn a_retry_after_the_sender_crashed_is_recognised() {
    let (mut net, a, b) = pair();
    // `pushed` is lost with the link; alice's relay crashes and restores its queue.
    net.tamper.insert(
        1,
        Box::new(|bytes: &[u8]| {
            let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
            (v["t"] != "pushed").then(|| bytes.to_vec())
        }),
    );
    send(
        &mut net,
        0,
        1,
        1,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1),
    );
    let first = net.take(1, 2);
    assert_eq!(delivered(&first), 1);
    net.tamper.clear();
    net.crash(0);
    net.restart(0);
    net.register(0, 1, "alice", &a);
    assert_eq!(
        net.nodes[0].relay.as_ref().unwrap().stats().federation["b.example"].queued,
        1
    );
    net.advance(Duration::from_secs(600), Duration::from_secs(1));
    // Nothing new for bob (the unacknowledged delivery is the same id, not a new packet).
    assert_eq!(delivered(&net.take(1, 2)), 0);
    assert_eq!(
        net.nodes[0].relay.as_ref().unwrap().stats().federation["b.example"].queued,
        0
    );
    // Numbers continue above the reservation after a restart.
    send(
        &mut net,
        0,
        1,
        2,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 2),
    );
    assert_eq!(delivered(&net.take(1, 2)), 1);
}

#[test]
fn a_partition_is_retried_with_backoff_and_delivered_after() {
    let (mut net, a, b) = pair();
    net.cut.insert((0, 1));
    for k in 0..5 {
        let f = send(
            &mut net,
            0,
            1,
            k,
            packet(&a, ("alice", 0), &b, ("bob", 1), "t", k as u32),
        );
        assert!(accepted(&f, k));
    }
    net.advance(Duration::from_secs(120), Duration::from_secs(1));
    let retries: Vec<u64> = net
        .fed_events(0)
        .iter()
        .filter_map(|e| match e {
            FederationEvent::RetryScheduled { at, .. } => Some(*at),
            _ => None,
        })
        .collect();
    assert!(retries.len() >= 3, "{retries:?}");
    let gaps: Vec<u64> = retries.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.windows(2).all(|g| g[1] + 1000 >= g[0]),
        "backoff grows: {gaps:?}"
    );
    net.cut.clear();
    net.advance(Duration::from_secs(600), Duration::from_secs(1));
    let got = net.take(1, 2);
    assert_eq!(delivered(&got), 5);
}

#[test]
fn a_packet_past_its_expiry_is_dropped_and_its_sender_told() {
    let mut net = Net::with(2, |_, c| {
        if let Some(f) = c.federation.as_mut() {
            f.expiry = Duration::from_secs(60);
        }
    });
    let (a, b) = (id(1), id(2));
    net.register(0, 1, "alice", &a);
    net.register(1, 2, "bob", &b);
    net.cut.insert((0, 1));
    send(
        &mut net,
        0,
        1,
        1,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1),
    );
    net.advance(Duration::from_secs(61), Duration::from_secs(1));
    let told = net.take(0, 1);
    let id_of = told.iter().find_map(|f| match f {
        RelayFrame::Undeliverable {
            id,
            code: ErrorCode::Expired,
            to,
            ..
        } if *to == addr("bob", 1) => Some(*id),
        _ => None,
    });
    let nid = id_of.expect("alice is told");
    // Durable until acknowledged: told again after a reconnect, then no more.
    net.crash(0);
    net.restart(0);
    net.feed(0, Msg::Connected(1));
    net.take(0, 1);
    let r = net.nodes[0].relay.as_ref().unwrap();
    assert_eq!(r.stats().federation["b.example"].queued, 0);
    net.cut.clear();
    net.register(0, 11, "alice", &a);
    let again = net.take(0, 11);
    assert!(
        again
            .iter()
            .any(|f| matches!(f, RelayFrame::Undeliverable { id, .. } if *id == nid)),
        "{again:?}"
    );
    net.client(0, 11, &ClientFrame::Ack { id: nid });
    assert!(!net.nodes[0]
        .store
        .keys()
        .any(|k| k.starts_with("fed/notice/")));
}

#[test]
fn a_full_thread_is_deferred_and_retried_once_acknowledged() {
    let mut net = Net::with(2, |_, c| c.queue_per_thread = 2);
    let (a, b) = (id(1), id(2));
    net.register(0, 1, "alice", &a);
    net.register(1, 2, "bob", &b);
    // Bob goes offline; four packets in one thread.
    net.feed(1, Msg::Disconnected(2));
    let mut seen = 0;
    for k in 0..4u64 {
        let f = send(
            &mut net,
            0,
            1,
            k,
            packet(&a, ("alice", 0), &b, ("bob", 1), "t", k as u32),
        );
        if accepted(&f, k) {
            seen += 1;
        } else {
            // Alice's relay holds at most the thread's cap for it, as for a local sender.
            assert!(
                f.iter().any(|f| matches!(f, RelayFrame::Overflow { .. })),
                "{f:?}"
            );
        }
    }
    assert_eq!(seen, 4, "two at bob's relay, two at alice's");
    assert!(net.fed_events(0).iter().any(|e| matches!(
        e,
        FederationEvent::Deferred {
            code: ErrorCode::Overflow,
            ..
        }
    )));
    net.register(1, 3, "bob", &b);
    let mut total = 0;
    for _ in 0..20 {
        let got = net.take(1, 3);
        total += net.ack_all(1, 3, &got).len();
        net.advance(Duration::from_secs(30), Duration::from_secs(1));
    }
    assert_eq!(total, 4, "every packet once");
}

#[test]
fn a_spammer_is_throttled_while_an_honest_peer_of_its_domain_is_not() {
    let mut net = Net::with(2, |_, c| {
        c.rate_per_sec = 10_000;
        c.rate_burst = 10_000;
        c.conn_rate_per_sec = 10_000;
        c.conn_rate_burst = 10_000;
        c.queue_per_thread = 10_000;
        if let Some(f) = c.federation.as_mut() {
            f.sender_rate_per_sec = 5;
            f.sender_rate_burst = 10;
        }
    });
    let (spam, honest, b) = (id(1), id(3), id(2));
    net.register(0, 1, "spam", &spam);
    net.register(0, 4, "honest", &honest);
    net.register(1, 2, "bob", &b);
    for k in 0..300u64 {
        send(
            &mut net,
            0,
            1,
            k,
            packet(&spam, ("spam", 0), &b, ("bob", 1), "s", k as u32),
        );
    }
    for k in 0..5u64 {
        send(
            &mut net,
            0,
            4,
            k,
            packet(&honest, ("honest", 0), &b, ("bob", 1), "h", k as u32),
        );
    }
    let got = net.take(1, 2);
    let envs = net.ack_all(1, 2, &got);
    let honest_n = envs.iter().filter(|e| e.from == addr("honest", 0)).count();
    let spam_n = envs.iter().filter(|e| e.from == addr("spam", 0)).count();
    assert_eq!(honest_n, 5, "the honest peer is not slowed");
    assert!(spam_n <= 10, "the spammer gets its burst: {spam_n}");
    let refused = net
        .fed_events(1)
        .iter()
        .filter(
            |e| matches!(e, FederationEvent::PushRefused { from, .. } if *from == addr("spam", 0)),
        )
        .count();
    assert!(refused > 0);
    assert!(
        net.nodes[1].relay.as_ref().unwrap().stats().federation["a.example"].reputation >= 0,
        "the domain is not blamed"
    );
}

#[test]
fn garbage_on_the_link_closes_it_without_slowing_local_traffic() {
    let (mut net, a, b) = pair();
    send(
        &mut net,
        0,
        1,
        1,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1),
    );
    net.take(1, 2);
    let link = *net
        .peer
        .keys()
        .find(|k| k.0 == 1)
        .expect("a link at bob's relay");
    let carol = id(6);
    net.register(1, 5, "carol", &carol);
    for _ in 0..200 {
        net.feed(1, Msg::Bytes(link.1, b"{\"t\":\"nonsense\"}".to_vec()));
    }
    let r = net.nodes[1].relay.as_ref().unwrap().stats();
    assert_eq!(r.federation["a.example"].links_in, 0, "closed");
    let logged = net
        .fed_events(1)
        .iter()
        .filter(|e| matches!(e, FederationEvent::LinkRefused { .. }))
        .count();
    assert!(logged <= 12, "logged at a bounded rate: {logged}");
    assert!(r.federation["a.example"].link_refusals >= 5);
    assert!(
        r.federation["a.example"].reputation <= -50,
        "refused for its garbage"
    );
    // Local traffic goes on.
    let f = send(
        &mut net,
        1,
        5,
        1,
        crate::relay::federation::net::packet(&carol, ("carol", 1), &b, ("bob", 1), "x", 1),
    );
    assert!(accepted(&f, 1));
    assert_eq!(delivered(&net.take(1, 2)), 1);
}

#[test]
fn denied_domains_are_refused_both_ways() {
    let mut net = Net::with(2, |i, c| {
        if i == 1 {
            if let Some(f) = c.federation.as_mut() {
                f.deny.insert("a.example".into());
            }
        }
    });
    let (a, b) = (id(1), id(2));
    net.register(0, 1, "alice", &a);
    net.register(1, 2, "bob", &b);
    let f = send(
        &mut net,
        1,
        2,
        1,
        packet(&b, ("bob", 1), &a, ("alice", 0), "t", 1),
    );
    assert!(f.iter().any(|f| matches!(
        f,
        RelayFrame::Error {
            code: ErrorCode::UnknownRecipient,
            seq: Some(1),
            ..
        }
    )));
    send(
        &mut net,
        0,
        1,
        1,
        packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1),
    );
    assert_eq!(delivered(&net.take(1, 2)), 0);
    assert_eq!(
        net.nodes[1]
            .relay
            .as_ref()
            .unwrap()
            .stats()
            .federation
            .get("a.example")
            .map_or(0, |d| d.links_in),
        0
    );
}

#[test]
fn a_group_across_three_domains_is_delivered_once_each() {
    let mut net = Net::new(3);
    let ids: Vec<IdentityKey> = (0..3).map(|i| id(20 + i)).collect();
    for (i, k) in ids.iter().enumerate() {
        net.register(i, 1, "p", k);
    }
    for from in 0..3 {
        for to in 0..3 {
            if from != to {
                let f = send(
                    &mut net,
                    from,
                    1,
                    (to * 10) as u64,
                    packet(
                        &ids[from],
                        ("p", from),
                        &ids[to],
                        ("p", to),
                        "group",
                        (from * 3 + to) as u32,
                    ),
                );
                assert!(accepted(&f, (to * 10) as u64));
            }
        }
    }
    for i in 0..3 {
        let got = net.take(i, 1);
        let envs = net.ack_all(i, 1, &got);
        assert_eq!(envs.len(), 2, "node {i}");
    }
}

#[test]
fn the_same_inputs_give_the_same_outputs() {
    let run = || {
        let (mut net, a, b) = pair();
        net.cut.insert((0, 1));
        send(
            &mut net,
            0,
            1,
            1,
            packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1),
        );
        net.advance(Duration::from_secs(30), Duration::from_secs(1));
        net.cut.clear();
        net.advance(Duration::from_secs(300), Duration::from_secs(1));
        (
            format!("{:?}", net.events),
            net.nodes[0].store.clone(),
            net.nodes[1].store.clone(),
        )
    };
    assert_eq!(run(), run());
    let _ = domain_of(0);
    let _: Option<RelayOutput> = None;
}

#[test]
fn the_state_kept_for_remote_senders_is_bounded() {
    let mut net = Net::with(2, |_, c| {
        if let Some(f) = c.federation.as_mut() {
            f.max_remote_senders = 2;
        }
    });
    let b = id(2);
    net.register(1, 2, "bob", &b);
    let users = ["s1", "s2", "s3"];
    let keys: Vec<IdentityKey> = (10..13).map(id).collect();
    for (k, (u, key)) in users.iter().zip(&keys).enumerate() {
        net.register(0, 10 + k as u64, u, key);
        send(
            &mut net,
            0,
            10 + k as u64,
            1,
            packet(key, (*u, 0), &b, ("bob", 1), u, 1),
        );
        net.advance(Duration::from_secs(1), Duration::from_millis(100));
    }
    let got = net.take(1, 2);
    assert_eq!(net.ack_all(1, 2, &got).len(), 3);
    let pins = |net: &Net| -> Vec<String> {
        net.nodes[1]
            .store
            .keys()
            .filter(|k| k.starts_with("fed/pin/"))
            .cloned()
            .collect()
    };
    assert_eq!(
        pins(&net),
        vec![
            "fed/pin/agent:s2@a.example".to_string(),
            "fed/pin/agent:s3@a.example".to_string()
        ],
        "the least recently seen sender is forgotten"
    );
    // Forgotten is not refused: its next packet is delivered and its key pinned again.
    send(
        &mut net,
        0,
        10,
        2,
        packet(&keys[0], ("s1", 0), &b, ("bob", 1), "s1", 2),
    );
    let got = net.take(1, 2);
    assert_eq!(net.ack_all(1, 2, &got).len(), 1);
    assert_eq!(pins(&net).len(), 2);
    assert!(pins(&net).contains(&"fed/pin/agent:s1@a.example".to_string()));
}

/// Delivers and acknowledges at bob's (node 1, `conn`) while time passes; returns the
/// envelopes in the order bob got them.
fn drain_bob(net: &mut Net, conn: u64, rounds: usize) -> Vec<crate::crypto::envelope::Envelope> {
    let mut got = Vec::new();
    for _ in 0..rounds {
        let frames = net.take(1, conn);
        got.extend(net.ack_all(1, conn, &frames));
        net.advance(Duration::from_secs(5), Duration::from_millis(100));
    }
    got
}

/// Swarm `--domains 3` seed 6: a push deferred for its thread's cap was retried after a
/// later push of the same thread, accepted once the recipient had drained its queue, and
/// the recipient took the older packet for the newer. The receiving relay now defers a
/// push while an earlier one of its (recipient, thread) is deferred.
#[test]
fn a_thread_keeps_its_order_across_a_deferral() {
    let mut net = Net::with(2, |i, c| c.queue_per_thread = if i == 1 { 1 } else { 10 });
    let (a, b) = (id(1), id(2));
    net.register(0, 1, "alice", &a);
    net.register(1, 2, "bob", &b);
    net.feed(1, Msg::Disconnected(2));
    let p: Vec<_> = (0..3)
        .map(|k| packet(&a, ("alice", 0), &b, ("bob", 1), "t", k))
        .collect();
    // p0 waits for bob at his relay; p1 is deferred there (the thread's cap).
    for (k, env) in p.iter().take(2).enumerate() {
        assert!(accepted(
            &send(&mut net, 0, 1, k as u64, env.clone()),
            k as u64
        ));
    }
    assert!(net.fed_events(0).iter().any(|e| matches!(
        e,
        FederationEvent::Deferred {
            code: ErrorCode::Overflow,
            ..
        }
    )));
    // Bob takes p0: his queue for the thread is empty when p2 arrives, before p1's retry.
    net.register(1, 3, "bob", &b);
    let first = net.take(1, 3);
    assert_eq!(net.ack_all(1, 3, &first), vec![p[0].clone()]);
    assert!(accepted(&send(&mut net, 0, 1, 2, p[2].clone()), 2));
    let rest = drain_bob(&mut net, 3, 40);
    assert_eq!(rest, vec![p[1].clone(), p[2].clone()], "in the order sent");
}

/// A push deferred for its domain's rate was not recorded as deferred: a later push
/// accepted meanwhile raised the high-water mark over it, and its retry was answered
/// `pushed` as a duplicate without ever being queued (lost).
#[test]
fn a_push_deferred_for_the_domains_rate_is_not_lost() {
    let mut net = Net::with(2, |i, c| {
        if let Some(f) = c.federation.as_mut() {
            if i == 1 {
                f.domain_rate_per_sec = 1;
                f.domain_rate_burst = 1;
            } else {
                f.retry_base = Duration::from_secs(10);
            }
        }
    });
    let (a, b) = (id(1), id(2));
    net.register(0, 1, "alice", &a);
    net.register(1, 2, "bob", &b);
    let p: Vec<_> = (0..3)
        .map(|k| packet(&a, ("alice", 0), &b, ("bob", 1), &format!("t{k}"), k))
        .collect();
    assert!(accepted(&send(&mut net, 0, 1, 0, p[0].clone()), 0));
    assert!(accepted(&send(&mut net, 0, 1, 1, p[1].clone()), 1));
    net.advance(Duration::from_secs(2), Duration::from_millis(100));
    assert!(accepted(&send(&mut net, 0, 1, 2, p[2].clone()), 2));
    let mut got = drain_bob(&mut net, 2, 20);
    got.sort_by_key(|e| e.thread);
    let mut want = p.clone();
    want.sort_by_key(|e| e.thread);
    assert_eq!(got, want, "every packet once");
}

/// Swarm `--domains 3 --groups` seed 45: while a domain's relay was down, lookups of its
/// addresses were answered without a key after `connect_timeout`, which the agent reads
/// as "no such agent" and declines its thread. A known relay that cannot be reached is
/// waited for, as a packet to it is.
#[test]
fn a_lookup_waits_while_the_domains_relay_is_unreachable() {
    let (mut net, _, b) = pair();
    net.cut.insert((0, 1));
    net.client(
        0,
        1,
        &ClientFrame::Lookup {
            address: addr("bob", 1),
        },
    );
    net.advance(Duration::from_secs(180), Duration::from_secs(1));
    assert_eq!(net.take(0, 1), vec![], "no answer while unreachable");
    net.cut.clear();
    net.advance(Duration::from_secs(600), Duration::from_secs(1));
    assert_eq!(
        net.take(0, 1),
        vec![RelayFrame::Key {
            address: addr("bob", 1),
            key: Some(b.public().to_bytes()),
            rotation: None,
            recovery: None,
        }]
    );
}

/// The backlog for a domain goes as soon as its relay reaches this one, not at the end of
/// the dial backoff.
#[test]
fn a_relay_that_reaches_this_one_is_dialed_at_once() {
    let (mut net, a, b) = pair();
    net.cut.insert((0, 1));
    let env = packet(&a, ("alice", 0), &b, ("bob", 1), "t", 1);
    assert!(accepted(&send(&mut net, 0, 1, 1, env.clone()), 1));
    // Long enough for the backoff to grow well past a minute.
    net.advance(Duration::from_secs(300), Duration::from_secs(1));
    net.cut.clear();
    // Bob writes to alice: b.example dials a.example, which dials back at once.
    let reply = packet(&b, ("bob", 1), &a, ("alice", 0), "u", 2);
    assert!(accepted(&send(&mut net, 1, 2, 1, reply), 1));
    assert!(net
        .fed_events(0)
        .iter()
        .any(|e| matches!(e, FederationEvent::Redial { .. })));
    assert_eq!(net.take(1, 2).len(), 1, "delivered without waiting");
}

/// A one-way partition (this relay cannot dial the other, which can dial this one, as
/// behind a proxy that was cut): the other relay, having lost the link this one opened,
/// dials back; while its link is up this relay retries every `reachable_retry_max` at
/// most, so the backlog goes within that of the way's return.
#[test]
fn a_one_way_partition_is_crossed_within_the_reachable_retry() {
    let (mut net, a, b) = pair();
    let env = |k: u32| packet(&a, ("alice", 0), &b, ("bob", 1), "t", k);
    assert!(accepted(&send(&mut net, 0, 1, 0, env(0)), 0));
    assert_eq!(net.take(1, 2).len(), 1);
    net.no_dial.insert((0, 1));
    net.sever(0, 1);
    assert!(accepted(&send(&mut net, 0, 1, 1, env(1)), 1));
    net.advance(Duration::from_secs(120), Duration::from_millis(100));
    assert_eq!(net.take(1, 2), vec![], "partitioned");
    assert!(
        net.nodes[1].relay.as_ref().unwrap().stats().federation["a.example"].link_out,
        "b.example dialed back"
    );
    net.no_dial.clear();
    net.advance(Duration::from_millis(2_500), Duration::from_millis(100));
    assert_eq!(delivered(&net.take(1, 2)), 1, "within reachable_retry_max");
}

/// A relay that restarts tells the domains that push to it it is back: their backlogs
/// go at once, not at the end of their backoff.
#[test]
fn a_restarted_relay_announces_itself() {
    let (mut net, a, b) = pair();
    let env = |k: u32| packet(&a, ("alice", 0), &b, ("bob", 1), "t", k);
    assert!(accepted(&send(&mut net, 0, 1, 0, env(0)), 0));
    let first = net.take(1, 2);
    net.ack_all(1, 2, &first);
    net.crash(1);
    assert!(accepted(&send(&mut net, 0, 1, 1, env(1)), 1));
    net.advance(Duration::from_secs(300), Duration::from_secs(1));
    net.restart(1);
    net.register(1, 3, "bob", &b);
    net.advance(Duration::from_secs(2), Duration::from_millis(100));
    assert_eq!(delivered(&net.take(1, 3)), 1, "delivered at once");
}
