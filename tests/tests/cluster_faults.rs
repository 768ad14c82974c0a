//! One domain on three relay nodes over a three-server NATS JetStream cluster, every
//! process started and stopped by the test, through the faults an operator meets: during
//! dinners between Alice and Bob (each knowing all three nodes as doors, in different
//! orders),
//!
//! 1. kill -9 of the relay node Alice is on: she moves to her next door;
//! 2. kill -9 of one NATS server: its streams keep their quorum;
//! 3. a restart of the whole NATS cluster (every server killed, then started again);
//! 4. SIGSTOP of the relay node both are on, past the heartbeat (the agents move on;
//!    the node, resumed, finds its connections replaced);
//! 5. the NATS cluster gone: the node refuses with `unavailable` (and /healthz says 503)
//!    instead of acknowledging what it cannot make durable; the dinner completes once the
//!    cluster is back.
//!
//! After each, every thread is COMPLETED on both sides with its eight packets, each once:
//! nothing lost, nothing handed to an agent's logic twice, nothing acknowledged then lost
//! (a packet the relay acknowledged and lost would leave its thread short of COMPLETED).
//!
//! The relay nodes run in child processes (this test binary re-executed with
//! `A2ACP_TEST_CLUSTER_RELAY` set, running only `child_relay`), so the kill is a real
//! `kill -9` and the pause a real SIGSTOP; the agents run in the test's process.

use std::process::{Command, Stdio};
use std::time::Duration;

use a2acp_core::agent::AgentEvent as Audited;
use a2acp_core::link::ErrorCode;
use a2acp_core::relay::RelayConfig;
use a2acp_runtime::agent_host::Effect;
use a2acp_runtime::config::RelayUrls;
use a2acp_runtime::daemon::AgentEvent;
use a2acp_runtime::home::Home;
use a2acp_runtime::relay_service::ServiceConfig;
use a2acp_runtime::scripted::{next_friday, start_dinner, ScriptedUser};
use a2acp_runtime::store::Durability;
use a2acp_tests::federation::free_port;
use a2acp_tests::nats::{relay_cluster_config, NatsCluster};
use a2acp_tests::*;

/// What the child relay is: `runtime|port|node|url,url,…`.
const CHILD_ENV: &str = "A2ACP_TEST_CLUSTER_RELAY";

/// Not a test by itself: the body of a child relay process.
#[test]
fn child_relay() {
    let Some(spec) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let spec = spec.into_string().unwrap();
    let [rt, port, node, urls] = spec.split('|').collect::<Vec<_>>()[..] else {
        panic!("bad child spec {spec}");
    };
    let runtime = Runtime::from_name(rt).expect("a known runtime");
    // Logs to stderr, which the test keeps in a file when A2ACP_TEST_LOG_DIR is set.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "info,a2acp_runtime=debug",
        ))
        .with_writer(std::io::stderr)
        .try_init();
    let mut cluster = a2acp_runtime::cluster::ClusterConfig::new(
        urls.split(',').map(str::to_string).collect(),
        node,
    );
    cluster.replicas = 3;
    // Refusals come soon when the cluster is gone (the agent sends again later).
    cluster.request_timeout = Duration::from_secs(3);
    let cfg = ServiceConfig {
        relay: RelayConfig {
            // Agents hear from their node every second; they give it up after 3 s.
            ping_interval: Duration::from_secs(1),
            ..RelayConfig::default()
        },
        cluster: Some(cluster),
        durability: Durability::Normal,
        ..ServiceConfig::default()
    };
    let rt_ = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt_.block_on(async {
        let listen = format!("127.0.0.1:{port}");
        let _relay = match runtime {
            Runtime::Tokio => Relay::Tokio(
                a2acp_tokio::relay::start(&listen, cfg)
                    .await
                    .expect("relay starts"),
            ),
            Runtime::Smol => Relay::Smol(
                a2acp_smol::relay::start(&listen, cfg)
                    .await
                    .expect("relay starts"),
            ),
        };
        // Until killed.
        std::future::pending::<()>().await;
    });
}

/// One relay node of the test, as a child process it can kill and pause.
struct Node {
    spec: String,
    port: u16,
    child: Option<KilledOnDrop>,
}

impl Node {
    fn new(rt: Runtime, nats: &NatsCluster, i: usize) -> Node {
        let port = free_port();
        let urls = relay_cluster_config(nats, i, "x").urls.join(",");
        let spec = format!("{}|{port}|r{}|{urls}", rt.name(), i + 1);
        Node {
            spec,
            port,
            child: None,
        }
    }

    /// Starts it and waits until its port accepts connections.
    async fn start(&mut self) {
        assert!(self.child.is_none());
        self.child = Some(spawn_child_test(
            "child_relay",
            CHILD_ENV,
            &self.spec,
            log(&self.spec),
        ));
        wait_listening(self.port, 30).await;
    }

    /// kill -9, and reaped.
    fn kill(&mut self) {
        let mut c = self.child.take().expect("running");
        c.0.kill().unwrap();
        c.0.wait().unwrap();
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").0.id();
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    fn url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }

    /// `/healthz`'s status line.
    async fn health(&self) -> String {
        let port = self.port;
        tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                .unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            out.lines().next().unwrap_or_default().to_string()
        })
        .await
        .unwrap()
    }
}

/// Where a child's stderr goes: a file named after its node in `$A2ACP_TEST_LOG_DIR`
/// (to read after a failure), or nowhere.
fn log(spec: &str) -> Stdio {
    let Some(dir) = std::env::var_os("A2ACP_TEST_LOG_DIR") else {
        return Stdio::null();
    };
    let node = spec.split('|').nth(2).unwrap_or("node");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::path::Path::new(&dir).join(format!("{node}.log")))
        .map_or_else(|_| Stdio::null(), Stdio::from)
}

/// The agent of `home` knows these doors, in this order.
fn doors(home: &Home, urls: &[String]) {
    edit_config(home, |f| {
        f.relay = RelayUrls::new(urls.to_vec()).unwrap();
    });
}

/// Each thread of `agent`: its state and how many packets it holds; panics on a thread
/// holding more than the dinner's eight (a packet handed to the logic twice).
async fn held(agent: &impl Agent) -> Vec<(String, String, u64)> {
    let ts = threads(agent).await;
    for t in &ts {
        assert!(
            t.packets <= 8,
            "thread {} holds {} packets",
            t.id,
            t.packets
        );
    }
    let mut v: Vec<_> = ts
        .into_iter()
        .map(|t| (t.id, t.state, t.packets as u64))
        .collect();
    v.sort();
    v
}

/// Both sides hold `n` threads, every one COMPLETED on both with the same packets (a
/// dinner ends with six, or eight when both execution reports are exchanged), and still
/// so a second later (no packet in flight) — within `secs`, else panics with what each
/// side holds.
async fn both_completed(alice: &impl Agent, bob: &impl Agent, n: usize, secs: u64, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        let (a, b) = (held(alice).await, held(bob).await);
        let done = a.len() == n && a == b && a.iter().all(|t| t.1 == "COMPLETED");
        if done && last.as_ref() == Some(&a) {
            return;
        }
        last = done.then_some(a);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!(
        "timed out waiting for {what}: Alice {:?}, Bob {:?}",
        held(alice).await,
        held(bob).await
    );
}

per_runtime!(
    #[ignore = "needs nats-server: bash .ci/test-deps"]
    nothing_lost_through_the_cluster_faults
);

async fn nothing_lost_through_the_cluster_faults(rt: Runtime) {
    let dir = tmp();
    let mut nats = NatsCluster::start(dir.path(), 3);
    let mut nodes: Vec<Node> = (0..3).map(|i| Node::new(rt, &nats, i)).collect();
    for n in &mut nodes {
        n.start().await;
    }
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let homes = dinner_homes(dir.path(), &urls[0]);
    // Alice starts on r1, Bob on r2; each knows every node.
    doors(
        &homes.alice,
        &[urls[0].clone(), urls[1].clone(), urls[2].clone()],
    );
    doors(
        &homes.bob,
        &[urls[1].clone(), urls[2].clone(), urls[0].clone()],
    );
    for home in [&homes.alice, &homes.bob] {
        edit_config(home, |f| f.limits.relay_silence_secs = Some(3));
    }
    let bob_addr = homes.bob_cfg.address.clone();
    let alice = rt.agent(&homes.alice, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&homes.bob, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let mut round = 0usize;
    let week = 7 * 86_400_000u64;
    let dinner = |round: usize| {
        let now = a2acp_runtime::now();
        start_dinner(
            bob_addr.clone(),
            &next_friday(a2acp_core::time::Timestamp::from_millis(
                now.as_millis() + round as u64 * week,
            )),
        )
    };

    // 1. kill -9 of Alice's node, mid-dinner; she is back online through her next door.
    let mut links = alice.subscribe();
    alice.tell(dinner(round)).await;
    nodes[0].kill();
    let killed = std::time::Instant::now();
    let back = tokio::time::timeout(Duration::from_secs(30), async {
        let mut down = false;
        loop {
            match links.next().await {
                Some(AgentEvent::Link(false)) => down = true,
                Some(AgentEvent::Link(true)) if down => return true,
                Some(_) => {}
                None => return false,
            }
        }
    })
    .await;
    assert_eq!(back, Ok(true), "Alice back online through another node");
    println!(
        "figure: Alice back online {:.1} ms after her node's kill -9",
        killed.elapsed().as_secs_f64() * 1e3
    );
    round += 1;
    both_completed(
        &alice,
        &bob,
        round,
        60,
        "the dinner through a node's kill -9",
    )
    .await;
    nodes[0].start().await;

    // 2. kill -9 of a NATS server, mid-dinner.
    alice.tell(dinner(round)).await;
    nats.kill(1);
    round += 1;
    both_completed(
        &alice,
        &bob,
        round,
        60,
        "the dinner through a NATS server's kill -9",
    )
    .await;
    nats.start_node(1);
    nats.wait_ready(Duration::from_secs(30));

    // 3. the whole NATS cluster restarted, mid-dinner.
    alice.tell(dinner(round)).await;
    nats.kill_all();
    tokio::time::sleep(Duration::from_millis(500)).await;
    nats.start_all();
    round += 1;
    both_completed(
        &alice,
        &bob,
        round,
        90,
        "the dinner through a restart of NATS",
    )
    .await;

    // 4. SIGSTOP of r2, past the heartbeat: both are on it (Bob's first door, Alice's
    // second since r1's kill).
    let paused = 1;
    alice.tell(dinner(round)).await;
    nodes[paused].signal("-STOP");
    tokio::time::sleep(Duration::from_secs(5)).await;
    nodes[paused].signal("-CONT");
    round += 1;
    both_completed(&alice, &bob, round, 60, "the dinner through a paused node").await;

    // 5. The NATS cluster gone: refused, not acknowledged; then back.
    let mut events = alice.subscribe();
    nats.kill_all();
    alice.tell(dinner(round)).await;
    let refused = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match events.next().await {
                Some(AgentEvent::Effect(Effect::Audit(r))) => {
                    if let Audited::RelayError { code, .. } = r.event {
                        if code == ErrorCode::Unavailable {
                            return true;
                        }
                    }
                }
                Some(_) => {}
                None => return false,
            }
        }
    })
    .await;
    assert_eq!(refused, Ok(true), "a packet refused with `unavailable`");
    let mut unhealthy = 0;
    for n in &nodes {
        if n.health().await.contains("503") {
            unhealthy += 1;
        }
    }
    assert_eq!(
        unhealthy, 3,
        "every node out of rotation while NATS is gone"
    );
    nats.start_all();
    round += 1;
    both_completed(&alice, &bob, round, 90, "the dinner once NATS is back").await;

    alice.stop().await;
    bob.stop().await;
    for n in &mut nodes {
        n.kill();
    }
}
