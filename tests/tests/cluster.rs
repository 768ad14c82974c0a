//! The relay cluster's registry against a real NATS cluster: three `nats-server`
//! processes with JetStream on loopback (`a2acp_tests::nats`), started and stopped by each
//! test. Registration is first come, first served across relay nodes — two nodes never
//! accept different keys for one address — and a registration acknowledged survives
//! kill -9 of a NATS server and a restart of the whole cluster.

use std::sync::{Arc, Barrier};

use a2acp_core::crypto::IdentityKey;
use a2acp_core::Address;
use a2acp_runtime::cluster::{Claim, Cluster, ClusterConfig, Enqueued, Presence};
use a2acp_tests::nats::NatsCluster;

fn node(nats: &NatsCluster, i: usize, name: &str) -> Cluster {
    // Each relay node lists every server but starts from its own (as an operator would
    // list them; the client moves on when its server goes).
    let mut urls = vec![nats.url(i)];
    urls.extend((0..3).filter(|&j| j != i).map(|j| nats.url(j)));
    let mut config = ClusterConfig::new(urls, name);
    config.replicas = 3;
    Cluster::connect(config).expect("connect to the NATS cluster")
}

fn address(i: usize) -> Address {
    Address::parse(&format!("agent:user{i}@cluster.example")).unwrap()
}

#[test]
#[ignore = "needs nats-server: bash .ci/test-deps"]
fn two_nodes_racing_for_the_same_addresses_never_both_win() {
    let dir = a2acp_tests::tmp();
    let nats = NatsCluster::start(dir.path(), 3);
    let nodes = [node(&nats, 0, "r1"), node(&nats, 1, "r2")];
    let keys = [
        IdentityKey::from_seed([1; 32]).public(),
        IdentityKey::from_seed([2; 32]).public(),
    ];
    const N: usize = 100;
    let start = Arc::new(Barrier::new(2));
    let results: Vec<Vec<Claim>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|n| {
                let (node, key, start) = (&nodes[n], &keys[n], start.clone());
                s.spawn(move || {
                    start.wait();
                    // Every claim in flight at once, then every answer.
                    let pending: Vec<_> = (0..N).map(|i| node.claim(&address(i), key)).collect();
                    pending
                        .into_iter()
                        .map(|p| p.wait().expect("the claim is answered"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut won = [0, 0];
    for (i, (a, b)) in results[0].iter().zip(&results[1]).enumerate() {
        let winner = match (a, b) {
            (Claim::Claimed, Claim::Taken) => 0,
            (Claim::Taken, Claim::Claimed) => 1,
            other => panic!("address {i}: {other:?}: exactly one node must win"),
        };
        won[winner] += 1;
        // Both nodes read the same key, the winner's, and claiming again is idempotent.
        for node in &nodes {
            let held = node.registered(&address(i)).wait().unwrap();
            assert_eq!(held, Some(keys[winner].to_bytes()), "address {i}");
        }
        assert_eq!(
            nodes[1 - winner].claim(&address(i), &keys[winner]).wait(),
            Ok(Claim::Same)
        );
    }
    assert_eq!(won[0] + won[1], N);
}

#[test]
#[ignore = "needs nats-server: bash .ci/test-deps"]
fn a_registration_survives_kill_9_of_a_nats_server_and_a_restart_of_all() {
    let dir = a2acp_tests::tmp();
    let mut nats = NatsCluster::start(dir.path(), 3);
    let alice = IdentityKey::from_seed([3; 32]).public();
    let mallory = IdentityKey::from_seed([4; 32]).public();
    {
        // The node talks to server 2, which is then killed: the client moves to another,
        // and the quorum of two goes on taking claims.
        let r1 = node(&nats, 2, "r1");
        assert_eq!(r1.claim(&address(0), &alice).wait(), Ok(Claim::Claimed));
        nats.kill(2);
        assert_eq!(r1.claim(&address(1), &alice).wait(), Ok(Claim::Claimed));
        let r2 = node(&nats, 0, "r2");
        assert_eq!(r2.claim(&address(0), &mallory).wait(), Ok(Claim::Taken));
        assert_eq!(r2.claim(&address(1), &mallory).wait(), Ok(Claim::Taken));
    }
    // The whole cluster goes down and comes back from its stores.
    nats.kill(0);
    nats.kill(1);
    for i in 0..3 {
        nats.start_node(i);
    }
    // Three servers recovering their streams and electing a leader at once: on a loaded
    // 2-core machine this has taken close to 30 s.
    nats.wait_ready(std::time::Duration::from_secs(90));
    let r3 = node(&nats, 1, "r3");
    for i in 0..2 {
        assert_eq!(
            r3.registered(&address(i)).wait().unwrap(),
            Some(alice.to_bytes()),
            "address {i} after the restart"
        );
        assert_eq!(r3.claim(&address(i), &mallory).wait(), Ok(Claim::Taken));
    }
    assert_eq!(r3.claim(&address(2), &mallory).wait(), Ok(Claim::Claimed));
}

#[test]
#[ignore = "needs nats-server: bash .ci/test-deps"]
fn no_reachable_server_is_a_clear_error_not_a_hang() {
    let port = a2acp_tests::federation::free_port();
    let mut config = ClusterConfig::new(vec![format!("nats://127.0.0.1:{port}")], "r1");
    config.request_timeout = std::time::Duration::from_secs(2);
    let started = std::time::Instant::now();
    let err = Cluster::connect(config).expect_err("nothing listens there");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(err.to_string().contains("NATS"), "{err}");
}

fn recv(watch: &a2acp_runtime::cluster::Watch) -> a2acp_runtime::cluster::Queued {
    watch
        .packets()
        .recv_timeout(std::time::Duration::from_secs(15))
        .expect("a packet within 15 s")
        .expect("the watch goes on")
}

fn queued(e: Enqueued) -> u64 {
    match e {
        Enqueued::Queued {
            id,
            duplicate: false,
        } => id,
        other => panic!("{other:?}"),
    }
}

#[test]
#[ignore = "needs nats-server: bash .ci/test-deps"]
fn a_packet_queued_through_one_node_is_read_in_order_through_another_then_removed() {
    let dir = a2acp_tests::tmp();
    let nats = NatsCluster::start(dir.path(), 3);
    let (r1, r2) = (node(&nats, 0, "r1"), node(&nats, 1, "r2"));
    let bob = address(7);
    let mut ids = Vec::new();
    for (i, thread) in ["t1", "t2", "t1", "t2", "t1"].iter().enumerate() {
        let e = r1.enqueue(&bob, thread, &format!("p{i}"), format!("env{i}").into());
        ids.push(queued(e.wait().unwrap()));
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids grow: {ids:?}");
    let watch = r2.watch(&bob, 8);
    for (i, thread) in ["t1", "t2", "t1", "t2", "t1"].iter().enumerate() {
        let p = recv(&watch);
        assert_eq!((p.id, p.thread.as_str()), (ids[i], *thread));
        assert_eq!(&p.payload[..], format!("env{i}").as_bytes());
    }
    // Live: a packet queued while the recipient's node watches reaches it.
    let live = queued(r1.enqueue(&bob, "t3", "p5", "env5".into()).wait().unwrap());
    assert_eq!(recv(&watch).id, live);
    drop(watch);
    // Acknowledged packets are gone for the next watch (a reconnect, on any node).
    for id in &ids[..3] {
        r2.remove(*id).wait().unwrap();
    }
    r2.remove(ids[0])
        .wait()
        .expect("removing twice is not an error");
    let watch = r1.watch(&bob, 8);
    let again: Vec<u64> = (0..3).map(|_| recv(&watch).id).collect();
    assert_eq!(again, vec![ids[3], ids[4], live]);
    // Nobody else's packets.
    assert!(watch
        .packets()
        .recv_timeout(std::time::Duration::from_millis(300))
        .is_err());
}

#[test]
#[ignore = "needs nats-server: bash .ci/test-deps"]
fn the_per_thread_cap_and_packet_ids_hold_across_nodes() {
    let dir = a2acp_tests::tmp();
    let nats = NatsCluster::start(dir.path(), 3);
    let config = |i: usize, name: &str| {
        let mut c = ClusterConfig::new(vec![nats.url(i)], name);
        c.replicas = 3;
        c.queue_per_thread = 3;
        c
    };
    let r1 = Cluster::connect(config(0, "r1")).unwrap();
    let r2 = Cluster::connect(config(1, "r2")).unwrap();
    let bob = address(8);
    // Two nodes offer four packets each to one thread at once: three are queued.
    let offers: Vec<_> = (0..4)
        .flat_map(|i| {
            [
                r1.enqueue(&bob, "t", &format!("a{i}"), "x".into()),
                r2.enqueue(&bob, "t", &format!("b{i}"), "x".into()),
            ]
        })
        .collect();
    let answers: Vec<Enqueued> = offers.into_iter().map(|p| p.wait().unwrap()).collect();
    let queued_n = answers
        .iter()
        .filter(|a| matches!(a, Enqueued::Queued { .. }))
        .count();
    assert_eq!(queued_n, 3, "{answers:?}");
    assert_eq!(answers.len() - queued_n, 5);
    // Another thread of the same recipient is not affected.
    queued(r2.enqueue(&bob, "u", "c0", "x".into()).wait().unwrap());
    // A retried publish (same packet id, through the other node) is queued once.
    let first = r1.enqueue(&bob, "v", "same", "x".into()).wait().unwrap();
    let retry = r2.enqueue(&bob, "v", "same", "x".into()).wait().unwrap();
    let Enqueued::Queued {
        id,
        duplicate: false,
    } = first
    else {
        panic!("{first:?}")
    };
    assert_eq!(
        retry,
        Enqueued::Queued {
            id,
            duplicate: true
        }
    );
    // An acknowledged packet frees its slot.
    let watch = r1.watch(&bob, 8);
    let oldest = recv(&watch);
    assert_eq!(oldest.thread, "t");
    assert_eq!(
        r1.enqueue(&bob, "t", "d0", "x".into()).wait().unwrap(),
        Enqueued::Overflow
    );
    r2.remove(oldest.id).wait().unwrap();
    queued(r1.enqueue(&bob, "t", "d0", "x".into()).wait().unwrap());
    // A node configured with another cap is told at start, not silently obeyed.
    let mut other = config(2, "r3");
    other.queue_per_thread = 5;
    let err = Cluster::connect(other).expect_err("the caps differ");
    assert!(err.to_string().contains("queue_per_thread"), "{err}");
}

#[test]
#[ignore = "needs nats-server: bash .ci/test-deps"]
fn a_packet_acknowledged_by_jetstream_survives_kill_9_of_a_server() {
    let dir = a2acp_tests::tmp();
    let mut nats = NatsCluster::start(dir.path(), 3);
    let r1 = node(&nats, 0, "r1");
    let bob = address(9);
    let ids: Vec<u64> = (0..20)
        .map(|i| r1.enqueue(&bob, "t", &format!("p{i}"), "x".into()))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|p| queued(p.wait().unwrap()))
        .collect();
    nats.kill(0);
    let r2 = node(&nats, 1, "r2");
    let watch = r2.watch(&bob, 32);
    let read: Vec<u64> = (0..20).map(|_| recv(&watch).id).collect();
    assert_eq!(read, ids);
}

#[test]
#[ignore = "needs nats-server: bash .ci/test-deps"]
fn the_last_connection_wins_across_nodes_by_revision() {
    let dir = a2acp_tests::tmp();
    let nats = NatsCluster::start(dir.path(), 3);
    let (r1, r2) = (node(&nats, 0, "r1"), node(&nats, 1, "r2"));
    let (w1, w2) = (r1.presence().unwrap(), r2.presence().unwrap());
    let alice = address(11);
    let first = r1.announce(&alice, 1).wait().unwrap();
    let second = r2.announce(&alice, 7).wait().unwrap();
    assert!(second > first, "a later announcement has a later revision");
    let next = |w: &a2acp_runtime::cluster::PresenceWatch| {
        w.updates()
            .recv_timeout(std::time::Duration::from_secs(15))
            .expect("an announcement within 15 s")
            .expect("the watch goes on")
    };
    // Both nodes see both announcements, in the same order: r1 learns that its
    // connection 1 was replaced by r2's connection 7 (a higher revision than its own).
    let announced = |node: &str, connection, revision| Presence {
        address: alice.as_str().to_string(),
        node: node.to_string(),
        connection,
        revision,
    };
    for w in [&w1, &w2] {
        assert_eq!(next(w), announced("r1", 1, first));
        assert_eq!(next(w), announced("r2", 7, second));
    }
}
