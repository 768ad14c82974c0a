//! Relays of one domain as nodes of a cluster over a real 3-server NATS JetStream cluster
//! (`a2acp_tests::nats`, started and stopped by each test): agents on different nodes
//! negotiate as on one relay; registration and last-connect-wins hold across nodes.

use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::nats::NatsCluster;
use a2acp_tests::*;

per_runtime!(
    #[ignore = "needs nats-server: bash .ci/test-deps"]
    dinner_across_two_nodes
);

/// Alice on node 1, Bob on node 2 (of either runtime): the whole dinner, every packet
/// crossing nodes through JetStream.
async fn dinner_across_two_nodes(rt: Runtime) {
    let dir = tmp();
    let nats = NatsCluster::start(dir.path(), 3);
    let r1 = Runtime::Tokio
        .cluster_relay("127.0.0.1:0", &nats, 0, "r1")
        .await;
    let r2 = rt.cluster_relay("127.0.0.1:0", &nats, 1, "r2").await;
    let homes = dinner_homes(dir.path(), &r1.url());
    write_config(&homes.bob, &homes.bob_cfg, &r2.url());
    let bob_addr = homes.bob_cfg.address.clone();
    let alice = rt.agent(&homes.alice, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&homes.bob, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    dinner_completes(&alice, &bob, &homes.bob, bob_addr).await;
    let routed = r1.snapshot().await.stats.routed_total + r2.snapshot().await.stats.routed_total;
    assert_eq!(routed, 8, "eight packets, each queued once");
    // Each node shows its link and the nodes alive.
    let url = format!("http://{}", r2.addr());
    let status = eventually(15, "both nodes listed", || {
        let url = url.clone();
        async move {
            let s = tokio::task::spawn_blocking(move || {
                a2acp_runtime::relay_status::fetch(&url, None).unwrap()
            })
            .await
            .unwrap();
            (s.cluster.as_ref()?.nodes.len() == 2).then_some(s)
        }
    })
    .await;
    let c = status.cluster.unwrap();
    assert!(c.connected);
    assert_eq!(
        c.nodes.into_iter().collect::<Vec<_>>(),
        vec![("r1".to_string(), false), ("r2".to_string(), true)]
    );
    alice.stop().await;
    bob.stop().await;
    r1.stop(true).await;
    r2.stop(true).await;
}
