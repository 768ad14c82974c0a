//! A clustered domain federates (issue 31): a.example is served by two relay nodes over a
//! real 3-server NATS JetStream cluster (started and stopped by each test), both
//! federating with the same relay key and serving TLS with a leaf of one private CA;
//! b.example is a single relay. Alice is on node n2, which is not the federator: her
//! packets for Bob reach the federator n1 through JetStream, and b.example's pushes reach
//! her through n2 (b.example's route to a.example names n2). When the federator dies with
//! a packet it could not hand over yet, n2 takes the role and hands it over: the dinner
//! completes with every packet once on both sides.

use std::path::Path;

use a2acp_core::relay::RelayConfig;
use a2acp_runtime::admission::AdmissionConfig;
use a2acp_runtime::federation::Federation;
use a2acp_runtime::relay_service::ServiceConfig;
use a2acp_runtime::scripted::{next_friday, start_dinner, ScriptedUser};
use a2acp_runtime::store::Durability;
use a2acp_runtime::tls::ServerTls;
use a2acp_tests::federation::{dinner_across, federating_relay, federation, free_port};
use a2acp_tests::nats::{relay_cluster_config, NatsCluster};
use a2acp_tests::*;

#[path = "common/pki.rs"]
mod pki;
use pki::{pki, Pki};

per_runtime!(
    #[ignore = "needs nats-server: bash .ci/test-deps"]
    dinner_from_a_cluster,
    federator_dies_with_a_packet_queued
);

/// A node of a.example's cluster on `rt`: node `name` of `nats`, federating with `fed`,
/// serving TLS with the test's leaf.
async fn node(
    rt: Runtime,
    nats: &NatsCluster,
    first: usize,
    name: &str,
    fed: Federation,
    p: &Pki,
) -> Relay {
    let cfg = ServiceConfig {
        relay: RelayConfig {
            domain: "a.example".into(),
            ..RelayConfig::default()
        },
        cluster: Some(relay_cluster_config(nats, first, name)),
        durability: Durability::Normal,
        federation: Some(fed),
        ..ServiceConfig::default()
    };
    let tls = ServerTls::from_files(&p.cert, &p.key).expect("server TLS");
    let conns = AdmissionConfig::default();
    match rt {
        Runtime::Tokio => Relay::Tokio(
            a2acp_tokio::relay::start_with("127.0.0.1:0", cfg, conns, Some(tls))
                .await
                .expect("cluster node starts"),
        ),
        Runtime::Smol => Relay::Smol(
            a2acp_smol::relay::start_with("127.0.0.1:0", cfg, conns, Some(tls))
                .await
                .expect("smol cluster node starts"),
        ),
    }
}

/// Waits until `r` is (`true`) or is not its domain's federator.
async fn federator(r: &Relay, is: bool, secs: u64) {
    eventually(secs, &format!("federator {is}"), || async {
        (r.snapshot().await.stats.cluster_federator == is).then_some(())
    })
    .await;
}

/// The whole setting: NATS, a.example's two nodes (n1 the federator), b.example's relay
/// on a port named ahead, and the dinner's homes (Alice on n2).
struct Setting {
    nats: NatsCluster,
    n1: Relay,
    n2: Relay,
    b: Relay,
    b_port: u16,
    b_data: std::path::PathBuf,
    homes: DinnerHomes,
    p: Pki,
}

async fn setting(rt: Runtime, dir: &Path) -> Setting {
    let p = pki(&dir.join("pki"));
    let nats = NatsCluster::start(dir, 3);
    let b_port = free_port();
    let url_b = format!("wss://127.0.0.1:{b_port}");
    // Every node of a domain signs with the domain's one relay key.
    let keys = dir.join("a-keys");
    let routes = [("b.example", url_b.clone())];
    let n1 = node(
        Runtime::Tokio,
        &nats,
        0,
        "n1",
        federation(&keys, "a.example", &routes, &p.ca),
        &p,
    )
    .await;
    federator(&n1, true, 15).await;
    let n2 = node(
        rt,
        &nats,
        1,
        "n2",
        federation(&keys, "a.example", &routes, &p.ca),
        &p,
    )
    .await;
    let b_data = dir.join("rb");
    let fed_b = federation(&b_data, "b.example", &[("a.example", n2.url())], &p.ca);
    let b = federating_relay(
        rt,
        &format!("127.0.0.1:{b_port}"),
        &b_data,
        "b.example",
        &p.cert,
        &p.key,
        fed_b,
        RelayConfig::default(),
    )
    .await;
    let homes = dinner_across(dir, &n2.url(), &url_b, &p.ca);
    Setting {
        nats,
        n1,
        n2,
        b,
        b_port,
        b_data,
        homes,
        p,
    }
}

/// The dinner between Alice (a.example, on the node that is not the federator) and Bob
/// (b.example): every packet of Alice's crosses to the federator through JetStream, every
/// packet of Bob's comes in through n2.
async fn dinner_from_a_cluster(rt: Runtime) {
    let dir = tmp();
    let s = setting(rt, dir.path()).await;
    let bob_addr = s.homes.bob_cfg.address.clone();
    let alice = rt.agent(&s.homes.alice, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&s.homes.bob, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    dinner_completes(&alice, &bob, &s.homes.bob, bob_addr).await;
    let (s1, s2, sb) = (
        s.n1.snapshot().await.stats,
        s.n2.snapshot().await.stats,
        s.b.snapshot().await.stats,
    );
    println!(
        "n1: {:?}\nn2: {:?}\nb: {:?}",
        s1.federation, s2.federation, sb.federation
    );
    assert!(s1.cluster_federator && !s2.cluster_federator);
    // Alice's four packets: pushed by the federator, each once.
    assert_eq!(s1.federation["b.example"].forwarded, 4, "{s1:?}");
    assert_eq!(sb.federation["a.example"].received, 4, "{sb:?}");
    // Bob's four: pushed by b.example to n2, queued in JetStream, delivered to Alice.
    assert_eq!(sb.federation["a.example"].forwarded, 4, "{sb:?}");
    assert_eq!(s2.federation["b.example"].received, 4, "{s2:?}");
    alice.stop().await;
    bob.stop().await;
    s.n2.stop(true).await;
    s.n1.stop(true).await;
    s.b.stop(true).await;
    drop(s.nats);
}

/// A first dinner completes (each node has found b.example's relay). Then b.example
/// goes down and Alice opens a second dinner: her first packet waits in the cluster. The
/// federator (n1) dies without a word; n2 takes the role within the lease's life, reads
/// the packet from JetStream and hands it over once b.example is back. Both dinners
/// complete with 8 packets on each side, each once.
async fn federator_dies_with_a_packet_queued(rt: Runtime) {
    let dir = tmp();
    let s = setting(rt, dir.path()).await;
    let bob_addr = s.homes.bob_cfg.address.clone();
    let alice = rt.agent(&s.homes.alice, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&s.homes.bob, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    dinner_completes(&alice, &bob, &s.homes.bob, bob_addr.clone()).await;
    s.b.stop(true).await;

    alice
        .tell(start_dinner(bob_addr, &next_friday(a2acp_runtime::now())))
        .await;
    // The federator read the packet and cannot hand it over.
    eventually(20, "the federator holds Alice's first packet", || async {
        let st = s.n1.snapshot().await.stats;
        (st.federation.get("b.example").map(|d| d.queued) == Some(1)).then_some(())
    })
    .await;
    let killed = std::time::Instant::now();
    s.n1.stop(false).await;
    federator(&s.n2, true, 30).await;
    println!(
        "n2 federator {:.1} s after n1 stopped",
        killed.elapsed().as_secs_f64()
    );

    let fed_b = federation(
        &s.b_data,
        "b.example",
        &[("a.example", s.n2.url())],
        &s.p.ca,
    );
    let b = federating_relay(
        rt,
        &format!("127.0.0.1:{}", s.b_port),
        &s.b_data,
        "b.example",
        &s.p.cert,
        &s.p.key,
        fed_b,
        RelayConfig::default(),
    )
    .await;
    let ta = wait_state(&alice, "COMPLETED", 90).await;
    let tb = wait_state(&bob, "COMPLETED", 30).await;
    assert_eq!((ta.len(), tb.len()), (2, 2), "{ta:?} {tb:?}");
    // Both sides hold the same packets of each thread (the second, with what the first
    // taught, is shorter).
    for a in &ta {
        let b = tb.iter().find(|b| b.id == a.id).expect("the same threads");
        assert_eq!(a.packets, b.packets, "{a:?} {b:?}");
    }
    // What n2 handed over after the failover, b.example took each once.
    let (s2, sb) = (s.n2.snapshot().await.stats, b.snapshot().await.stats);
    let (fwd, got) = (
        s2.federation["b.example"].forwarded,
        sb.federation["a.example"].received,
    );
    println!("n2 forwarded {fwd}, b.example received {got}");
    assert!(fwd > 0 && fwd == got, "{s2:?} {sb:?}");
    assert_eq!(s2.federation["b.example"].queued, 0, "{s2:?}");
    alice.stop().await;
    bob.stop().await;
    s.n2.stop(true).await;
    b.stop(true).await;
    drop(s.nats);
}
