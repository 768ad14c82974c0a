//! Helpers of the integration tests: relays and agents on loopback — on tokio
//! (`a2acp-tokio`) or on smol (`a2acp-smol`), in any pairing — a raw protocol client to
//! misbehave with, and polling.
#![forbid(unsafe_code)]
#![allow(missing_docs, clippy::missing_panics_doc)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use a2acp_core::agent::{AgentConfig, Command, Prompt, PromptKind};
use a2acp_core::crypto::{Direction, Envelope, IdentityKey, PublicKey, ThreadSession};
use a2acp_core::link::{
    challenge_signed_bytes, ClientFrame, RelayFrame, AUTH_LABEL, REGISTER_LABEL,
};
use a2acp_core::relay::RelayConfig;
use a2acp_core::Address;
use a2acp_runtime::agent_host::AgentHost;
use a2acp_runtime::config::{context_to_toml, AgentFile};
use a2acp_runtime::control::{Request, Response, ThreadSummary};
use a2acp_runtime::daemon::AgentEvent;
use a2acp_runtime::home::Home;
use a2acp_runtime::relay_service::{RelaySnapshot, ServiceConfig};
use a2acp_runtime::scripted::{dinner_configs, next_friday, start_dinner, ScriptedUser};
use a2acp_runtime::store::Durability;
use a2acp_tokio::agent::{AgentHandle, RunOptions};
use a2acp_tokio::relay::RunningRelay;
use async_tungstenite::tungstenite::Message;
use futures_util::StreamExt;

pub use a2acp_smol;
pub use a2acp_tokio;

pub mod attacks;
pub mod federation;
pub mod nats;
pub mod webdriver;
pub mod webhook;

/// A running agent the tests can ask through its control channel: a tokio one
/// ([`a2acp_tokio::agent::AgentHandle`]) or a smol one ([`a2acp_smol::agent::AgentHandle`]).
pub trait Agent {
    /// Sends a control request (panics if the agent has stopped).
    fn ask(&self, req: Request) -> impl std::future::Future<Output = Response> + Send;
    /// Gives the agent a user command (panics if the agent has stopped).
    fn tell(&self, c: Command) -> impl std::future::Future<Output = ()> + Send;
}

impl Agent for AgentHandle {
    async fn ask(&self, req: Request) -> Response {
        self.request(req).await.expect("agent alive")
    }
    async fn tell(&self, c: Command) {
        self.command(c).await.expect("agent alive")
    }
}

impl Agent for a2acp_smol::agent::AgentHandle {
    async fn ask(&self, req: Request) -> Response {
        self.request(req).await.expect("agent alive")
    }
    async fn tell(&self, c: Command) {
        self.command(c).await.expect("agent alive")
    }
}

/// The spec's dinner (§4–§9), Alice's agent asking Bob's (whose home is `bob_home`), to
/// completion on both sides, with the checks every runtime pairing must pass: one thread,
/// eight packets on each side (context, request, response, resolution, two
/// confirmations, two execution reports), and what Alice declined (her cuisine
/// preference) never reached Bob while what she shared (how she travels) did — read over
/// Bob's real control socket. Returns the thread id.
pub async fn dinner_completes(
    alice: &impl Agent,
    bob: &impl Agent,
    bob_home: &Home,
    bob_addr: Address,
) -> String {
    use a2acp_runtime::scripted::{next_friday, start_dinner};
    alice
        .tell(start_dinner(bob_addr, &next_friday(a2acp_runtime::now())))
        .await;
    let ta = wait_state(alice, "COMPLETED", 30).await;
    let tb = wait_state(bob, "COMPLETED", 30).await;
    assert_eq!(ta.len(), 1, "{ta:?}");
    assert_eq!(ta[0].id, tb[0].id);
    assert_eq!(
        ta[0].packets, 8,
        "context, request, response, resolution, 2 confirmations, 2 reports"
    );
    assert_eq!(tb[0].packets, 8);
    let r = ctl(
        bob_home,
        Request::Thread {
            id: tb[0].id.clone(),
        },
    )
    .await;
    let theirs = r.data["theirs"].to_string();
    assert!(
        theirs.contains("driving") && !theirs.contains("Italian"),
        "{theirs}"
    );
    ta[0].id.clone()
}

/// Panics if any file under `dir` (a relay's data) holds a secret of the dinner in clear.
pub fn assert_no_dinner_plaintext(dir: &Path) {
    let stored = all_bytes(dir);
    for secret in ["vegetarian", "Reading", "dinner", "driving"] {
        assert!(
            !stored.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the relay's files hold `{secret}`"
        );
    }
}

/// Starts a relay on `listen` with its database in `data`.
pub async fn relay(listen: &str, data: &Path) -> RunningRelay {
    relay_with(listen, data, RelayConfig::default()).await
}

/// Starts a relay with settings.
pub async fn relay_with(listen: &str, data: &Path, relay: RelayConfig) -> RunningRelay {
    let cfg = ServiceConfig {
        relay,
        data: Some(data.to_path_buf()),
        durability: Durability::Normal,
        ..ServiceConfig::default()
    };
    // The port of a relay just stopped may take a moment to be free again.
    for _ in 0..100 {
        match a2acp_tokio::relay::start(listen, cfg.clone()).await {
            Ok(r) => return r,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    panic!("relay could not start on {listen}");
}

/// Starts a relay on smol with settings.
pub async fn relay_smol_with(
    listen: &str,
    data: &Path,
    relay: RelayConfig,
) -> a2acp_smol::relay::RunningRelay {
    let cfg = ServiceConfig {
        relay,
        data: Some(data.to_path_buf()),
        durability: Durability::Normal,
        ..ServiceConfig::default()
    };
    for _ in 0..100 {
        match a2acp_smol::relay::start(listen, cfg.clone()).await {
            Ok(r) => return r,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    panic!("smol relay could not start on {listen}");
}

/// An executor binding the relay and agent daemon run on: the tests that are about the
/// runtimes' behaviour (restart, offline queue, kill, refusals, replacement) run once per
/// runtime, through [`per_runtime!`](crate::per_runtime), with the same body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// `a2acp-tokio` (the `a2acp` binary).
    Tokio,
    /// `a2acp-smol` (the `a2acp-smol` binary).
    Smol,
}

impl Runtime {
    /// Its name (`tokio`, `smol`), as in the environment of child processes.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Tokio => "tokio",
            Runtime::Smol => "smol",
        }
    }

    /// The runtime named `name` (see [`Runtime::name`]).
    pub fn from_name(name: &str) -> Option<Runtime> {
        match name {
            "tokio" => Some(Runtime::Tokio),
            "smol" => Some(Runtime::Smol),
            _ => None,
        }
    }

    /// Starts a relay on this runtime on `listen` with its database in `data`.
    pub async fn relay(self, listen: &str, data: &Path) -> Relay {
        self.relay_with(listen, data, RelayConfig::default()).await
    }

    /// Starts a relay on this runtime with settings.
    pub async fn relay_with(self, listen: &str, data: &Path, relay: RelayConfig) -> Relay {
        match self {
            Runtime::Tokio => Relay::Tokio(relay_with(listen, data, relay).await),
            Runtime::Smol => Relay::Smol(relay_smol_with(listen, data, relay).await),
        }
    }

    /// Starts a relay node of a cluster on this runtime: domain `localhost`, the cluster
    /// of `nats` (every server, its own `first` first), as node `node`.
    pub async fn cluster_relay(
        self,
        listen: &str,
        nats: &nats::NatsCluster,
        first: usize,
        node: &str,
    ) -> Relay {
        let cfg = ServiceConfig {
            cluster: Some(nats::relay_cluster_config(nats, first, node)),
            durability: Durability::Normal,
            ..ServiceConfig::default()
        };
        match self {
            Runtime::Tokio => Relay::Tokio(
                a2acp_tokio::relay::start(listen, cfg)
                    .await
                    .expect("cluster relay starts"),
            ),
            Runtime::Smol => Relay::Smol(
                a2acp_smol::relay::start(listen, cfg)
                    .await
                    .expect("smol cluster relay starts"),
            ),
        }
    }

    /// Starts a relay node of a cluster on this runtime (domain `localhost`, node `n1` of
    /// `nats`) serving the ACP gateway on `gateway` (plain HTTP on loopback).
    pub async fn acp_gateway_relay(self, nats: &nats::NatsCluster, gateway: &str) -> Relay {
        let cfg = ServiceConfig {
            cluster: Some(nats::relay_cluster_config(nats, 0, "n1")),
            durability: Durability::Normal,
            acp_gateway: Some(a2acp_runtime::acp_gateway::GatewayConfig {
                listen: gateway.to_string(),
                tls: None,
                limits: a2acp_runtime::acp_gateway::GatewayLimits::default(),
            }),
            ..ServiceConfig::default()
        };
        match self {
            Runtime::Tokio => Relay::Tokio(
                a2acp_tokio::relay::start("127.0.0.1:0", cfg)
                    .await
                    .expect("relay with the ACP gateway starts"),
            ),
            Runtime::Smol => Relay::Smol(
                a2acp_smol::relay::start("127.0.0.1:0", cfg)
                    .await
                    .expect("smol relay with the ACP gateway starts"),
            ),
        }
    }

    /// Starts a relay on this runtime with default settings, these connection caps and
    /// HTTP-phase deadline, and TLS with `tls` (`wss://`) or none (`ws://`).
    pub async fn relay_tls(
        self,
        listen: &str,
        data: &Path,
        conns: a2acp_runtime::admission::AdmissionConfig,
        tls: Option<a2acp_runtime::tls::ServerTls>,
    ) -> Relay {
        let cfg = ServiceConfig {
            data: Some(data.to_path_buf()),
            durability: Durability::Normal,
            ..ServiceConfig::default()
        };
        match self {
            Runtime::Tokio => Relay::Tokio(
                a2acp_tokio::relay::start_with(listen, cfg, conns, tls)
                    .await
                    .expect("relay starts"),
            ),
            Runtime::Smol => Relay::Smol(
                a2acp_smol::relay::start_with(listen, cfg, conns, tls)
                    .await
                    .expect("smol relay starts"),
            ),
        }
    }

    /// [`Runtime::agent`] with its consent page (`--web`) on a free loopback port.
    pub fn agent_with_web(self, home: &Home, name: &str) -> RtAgent {
        let opened = AgentHost::open_home(home, Durability::Normal).expect("open agent home");
        let mut o = RunOptions::new(&opened.file.relay, name);
        o.tls = opened.tls.clone();
        o.control_socket = Some(home.socket());
        o.backoff_min = Duration::from_millis(50);
        o.backoff_max = Duration::from_millis(400);
        o.web = Some(a2acp_runtime::web::WebOptions {
            listen: "127.0.0.1:0".into(),
        });
        match self {
            Runtime::Tokio => RtAgent::Tokio(
                a2acp_tokio::agent::spawn(opened.host, opened.effects, o).expect("spawn agent"),
            ),
            Runtime::Smol => RtAgent::Smol(
                a2acp_smol::agent::spawn(opened.host, opened.effects, o).expect("spawn smol agent"),
            ),
        }
    }

    /// Runs the agent of `home` in this process on this runtime (control socket in the
    /// home, fast reconnection).
    pub fn agent(self, home: &Home, name: &str, auto: Option<ScriptedUser>) -> RtAgent {
        match self {
            Runtime::Tokio => RtAgent::Tokio(run_agent(home, name, auto)),
            Runtime::Smol => RtAgent::Smol(run_agent_smol(home, name, auto)),
        }
    }
}

/// Defines, for an `async fn NAME(rt: Runtime)` test body, a module `NAME` with two
/// tests, `NAME::tokio` and `NAME::smol`, each running the body once on its runtime (the
/// test itself is driven from a tokio runtime; what runs on smol is the relay and agents).
///
/// `per_runtime!(#[ignore = "why"] NAME, ...)` defines them ignored: compiled, reported as
/// ignored with the reason by a plain `cargo test`, and run by `--run-ignored all` (a test
/// that needs what `.ci/test-deps` installs).
#[macro_export]
macro_rules! per_runtime {
    (@one [$($attr:meta)?] $body:ident) => {
        mod $body {
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$attr])?
            async fn tokio() {
                super::$body($crate::Runtime::Tokio).await
            }
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$attr])?
            async fn smol() {
                super::$body($crate::Runtime::Smol).await
            }
        }
    };
    (#[ignore = $why:literal] $($body:ident),+ $(,)?) => {
        $($crate::per_runtime!(@one [ignore = $why] $body);)+
    };
    ($($body:ident),+ $(,)?) => {
        $($crate::per_runtime!(@one [] $body);)+
    };
}

/// A running relay on either runtime.
#[derive(Debug)]
pub enum Relay {
    /// On tokio.
    Tokio(RunningRelay),
    /// On smol.
    Smol(a2acp_smol::relay::RunningRelay),
}

impl Relay {
    /// The address listened on.
    pub fn addr(&self) -> std::net::SocketAddr {
        match self {
            Relay::Tokio(r) => r.addr(),
            Relay::Smol(r) => r.addr(),
        }
    }

    /// `ws://addr` (`wss://addr` when it serves TLS).
    pub fn url(&self) -> String {
        match self {
            Relay::Tokio(r) => r.url(),
            Relay::Smol(r) => r.url(),
        }
    }

    /// The listener's connection counters.
    pub fn connections(&self) -> a2acp_runtime::admission::AdmissionStats {
        match self {
            Relay::Tokio(r) => r.connections(),
            Relay::Smol(r) => r.connections(),
        }
    }

    /// Current counters (panics if the service stopped).
    pub async fn snapshot(&self) -> RelaySnapshot {
        match self {
            Relay::Tokio(r) => r.snapshot().await,
            Relay::Smol(r) => r.snapshot().await,
        }
        .expect("relay service running")
    }

    /// Stops it: `graceful` with close frames, otherwise as by a crash (panics on error).
    pub async fn stop(self, graceful: bool) {
        match self {
            Relay::Tokio(r) => r.stop(graceful).await,
            Relay::Smol(r) => r.stop(graceful).await,
        }
        .expect("relay stopped cleanly")
    }
}

/// A running agent on either runtime.
#[derive(Debug)]
pub enum RtAgent {
    /// On tokio.
    Tokio(AgentHandle),
    /// On smol.
    Smol(a2acp_smol::agent::AgentHandle),
}

/// The events of an [`RtAgent`].
#[derive(Debug)]
pub enum Events {
    /// Of a tokio agent.
    Tokio(tokio::sync::broadcast::Receiver<AgentEvent>),
    /// Of a smol agent.
    Smol(flume::Receiver<AgentEvent>),
}

impl Events {
    /// The next event, or `None` once the agent is gone (a slow reader skips what it
    /// missed).
    pub async fn next(&mut self) -> Option<AgentEvent> {
        match self {
            Events::Tokio(rx) => loop {
                match rx.recv().await {
                    Ok(e) => return Some(e),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            },
            Events::Smol(rx) => rx.recv_async().await.ok(),
        }
    }

    /// The next event already waiting, without waiting for one.
    pub fn try_next(&mut self) -> Option<AgentEvent> {
        match self {
            Events::Tokio(rx) => loop {
                match rx.try_recv() {
                    Ok(e) => return Some(e),
                    Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {}
                    Err(_) => return None,
                }
            },
            Events::Smol(rx) => rx.try_recv().ok(),
        }
    }
}

impl RtAgent {
    /// Where its consent page listens (`--web`).
    pub fn web_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            RtAgent::Tokio(h) => h.web_addr(),
            RtAgent::Smol(h) => h.web_addr(),
        }
    }

    /// Events from now on.
    pub fn subscribe(&self) -> Events {
        match self {
            RtAgent::Tokio(h) => Events::Tokio(h.subscribe()),
            RtAgent::Smol(h) => Events::Smol(h.subscribe()),
        }
    }

    /// Stops the agent and waits for it (panics on error).
    pub async fn stop(self) {
        match self {
            RtAgent::Tokio(h) => h.stop().await,
            RtAgent::Smol(h) => h.stop().await,
        }
        .expect("agent stopped cleanly")
    }

    /// Waits until the agent ends by itself.
    pub async fn wait(self) -> Result<(), a2acp_runtime::daemon::AgentError> {
        match self {
            RtAgent::Tokio(h) => h.wait().await,
            RtAgent::Smol(h) => h.wait().await,
        }
    }
}

impl Agent for RtAgent {
    async fn ask(&self, req: Request) -> Response {
        match self {
            RtAgent::Tokio(h) => h.ask(req).await,
            RtAgent::Smol(h) => h.ask(req).await,
        }
    }
    async fn tell(&self, c: Command) {
        match self {
            RtAgent::Tokio(h) => h.tell(c).await,
            RtAgent::Smol(h) => h.tell(c).await,
        }
    }
}

/// Creates an agent home (key, config) like `a2acp agent init --offline`.
pub fn init_home(dir: &Path, cfg: &AgentConfig, relay_url: &str) -> Home {
    let home = Home::new(dir);
    std::fs::create_dir_all(dir).unwrap();
    a2acp_runtime::keys::create(&home.key()).unwrap();
    write_config(&home, cfg, relay_url);
    home
}

/// Writes `cfg` as the home's config.toml.
pub fn write_config(home: &Home, cfg: &AgentConfig, relay_url: &str) {
    let mut f = AgentFile::new(&cfg.address, relay_url, context_to_toml(&cfg.profile));
    f.permissions = cfg.permissions.clone();
    f.overrides = cfg
        .overrides
        .iter()
        .map(|(a, o)| (a.to_string(), o.clone()))
        .collect();
    let _ = std::fs::remove_file(home.config());
    f.write_new(&home.config()).unwrap();
}

/// Loads the home's config.toml, changes it with `edit` and writes it back.
pub fn edit_config(home: &Home, edit: impl FnOnce(&mut AgentFile)) {
    let mut f = AgentFile::load(&home.config()).unwrap();
    edit(&mut f);
    std::fs::remove_file(home.config()).unwrap();
    f.write_new(&home.config()).unwrap();
}

/// The spec's dinner agents (§4): Alice's and Bob's configs and their homes, made by
/// [`dinner_homes`].
pub struct DinnerHomes {
    pub alice_cfg: AgentConfig,
    pub bob_cfg: AgentConfig,
    /// Alice's home, `alice/` under the directory given.
    pub alice: Home,
    /// Bob's home, `bob/` under the directory given.
    pub bob: Home,
}

/// Creates the homes of the spec's dinner agents (`dinner_configs("localhost")`) under
/// `dir`, both on the relay at `relay_url`.
pub fn dinner_homes(dir: &Path, relay_url: &str) -> DinnerHomes {
    let (alice_cfg, bob_cfg) = dinner_configs("localhost").unwrap();
    let alice = init_home(&dir.join("alice"), &alice_cfg, relay_url);
    let bob = init_home(&dir.join("bob"), &bob_cfg, relay_url);
    DinnerHomes {
        alice_cfg,
        bob_cfg,
        alice,
        bob,
    }
}

/// Alice's agent starts the spec's dinner (next Friday) with `bob`, whose user does not
/// answer for her: the consent prompt it shows her (§7).
pub async fn start_dinner_until_consent(alice: &impl Agent, bob: Address) -> Prompt {
    alice
        .tell(start_dinner(bob, &next_friday(a2acp_runtime::now())))
        .await;
    eventually(30, "Alice's consent prompt", || async {
        prompts(alice)
            .await
            .into_iter()
            .find(|p| matches!(p.kind, PromptKind::Consent { .. }))
    })
    .await
}

/// Answers prompt `prompt_id` over the control socket of `home` with `args`, as
/// `a2acp answer` does; panics if the answer is refused. The agent's reply text.
pub async fn answer(home: &Home, prompt_id: u64, args: &[impl AsRef<str>]) -> String {
    let r = ctl(
        home,
        Request::Answer {
            prompt_id,
            args: args.iter().map(|s| s.as_ref().to_string()).collect(),
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    r.data.as_str().unwrap_or_default().to_string()
}

/// Checks a relay's `/healthz` and `/metrics` answers (whole HTTP responses): both 200,
/// and the metrics count `routed` packets.
pub fn assert_health_and_metrics(health: &str, metrics: &str, routed: u64) {
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    let line = format!("a2acp_relay_packets_routed_total {routed}");
    assert!(metrics.lines().any(|l| l.trim_end() == line), "{metrics}");
}

/// Runs the agent of `home` in this process.
pub fn run_agent(home: &Home, name: &str, auto: Option<ScriptedUser>) -> AgentHandle {
    let opened = AgentHost::open_home(home, Durability::Normal).expect("open agent home");
    let mut o = RunOptions::new(&opened.file.relay, name);
    o.tls = opened.tls.clone();
    o.auto = auto;
    o.control_socket = Some(home.socket());
    o.backoff_min = Duration::from_millis(50);
    o.backoff_max = Duration::from_millis(400);
    a2acp_tokio::agent::spawn(opened.host, opened.effects, o).expect("spawn agent")
}

/// Runs the agent of `home` in this process, on smol.
pub fn run_agent_smol(
    home: &Home,
    name: &str,
    auto: Option<ScriptedUser>,
) -> a2acp_smol::agent::AgentHandle {
    let opened = AgentHost::open_home(home, Durability::Normal).expect("open agent home");
    let mut o = RunOptions::new(&opened.file.relay, name);
    o.tls = opened.tls.clone();
    o.auto = auto;
    o.control_socket = Some(home.socket());
    o.backoff_min = Duration::from_millis(50);
    o.backoff_max = Duration::from_millis(400);
    a2acp_smol::agent::spawn(opened.host, opened.effects, o).expect("spawn smol agent")
}

/// Polls `f` every 20 ms until it returns `Some`, or panics after `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() > end {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The agent's threads.
pub async fn threads(h: &impl Agent) -> Vec<ThreadSummary> {
    let r = h.ask(Request::Threads).await;
    serde_json::from_value(r.data).unwrap()
}

/// The agent's open prompts.
pub async fn prompts(h: &impl Agent) -> Vec<Prompt> {
    let r = h.ask(Request::Prompts).await;
    serde_json::from_value(r.data).unwrap()
}

/// Whether the agent is authenticated with the relay.
pub async fn online(h: &impl Agent) -> bool {
    let r = h.ask(Request::Status).await;
    r.data["online"].as_bool().unwrap_or(false)
}

/// Waits until the agent is online.
pub async fn wait_online(h: &impl Agent) {
    eventually(15, "agent online", || async {
        online(h).await.then_some(())
    })
    .await;
}

/// Waits until every thread of `h` is in `state` (and there is at least one).
pub async fn wait_state(h: &impl Agent, state: &str, secs: u64) -> Vec<ThreadSummary> {
    eventually(secs, &format!("threads {state}"), || async {
        let t = threads(h).await;
        (!t.is_empty() && t.iter().all(|x| x.state == state)).then_some(t)
    })
    .await
}

/// The dinner's end after a crash: Alice (`ha`) confirms the resolution when it is asked,
/// both threads end COMPLETED, and both sides hold the same 8 packets, each once (the
/// `thread_state` summaries exchanged after a reconnection, §13.1, left out). Alice's and
/// Bob's thread as `thread show` answers them.
pub async fn dinner_ends_once_each(
    alice: &impl Agent,
    ha: &Home,
    bob: &impl Agent,
    hb: &Home,
) -> (serde_json::Value, serde_json::Value) {
    let resolution = eventually(30, "Alice's resolution prompt", || async {
        prompts(alice).await.into_iter().next()
    })
    .await;
    answer(ha, resolution.id, &["confirm"]).await;
    let ta = wait_state(alice, "COMPLETED", 30).await;
    wait_state(bob, "COMPLETED", 30).await;
    let id = ta[0].id.clone();
    let pa = ctl(ha, Request::Thread { id: id.clone() }).await.data;
    let pb = ctl(hb, Request::Thread { id }).await.data;
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] != "thread_state")
            .map(|p| p["packet_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (ia, ib) = (ids(&pa), ids(&pb));
    assert_eq!(ia.len(), 8, "{pa}");
    assert_eq!(ib.len(), 8, "{pb}");
    let set = |v: &[String]| v.iter().cloned().collect::<std::collections::BTreeSet<_>>();
    assert_eq!(set(&ia).len(), 8, "a packet handled twice: {ia:?}");
    assert_eq!(set(&ia), set(&ib));
    (pa, pb)
}

/// The agent of `home` (named "bob") on tokio with an A2A listener on a free loopback
/// port (`token`, `limits`), its control socket, reconnecting within 400 ms; `tune` sets
/// any other run option.
pub fn bob_with_a2a(
    home: &Home,
    token: Option<&str>,
    limits: a2acp_runtime::a2a::A2aLimits,
    tune: impl FnOnce(&mut RunOptions),
) -> AgentHandle {
    let opened = AgentHost::open_home(home, Durability::Normal).expect("open agent home");
    let mut o = RunOptions::new(&opened.file.relay, "bob");
    o.tls = opened.tls.clone();
    o.control_socket = Some(home.socket());
    o.backoff_min = Duration::from_millis(50);
    o.backoff_max = Duration::from_millis(400);
    o.a2a = Some(a2acp_runtime::a2a::A2aOptions {
        listen: "127.0.0.1:0".into(),
        token: token.map(str::to_string),
        limits,
    });
    tune(&mut o);
    a2acp_tokio::agent::spawn(opened.host, opened.effects, o).expect("spawn agent")
}

/// Sends one request over the control socket of `home` (what the `a2acp` CLI does).
pub async fn ctl(home: &Home, req: Request) -> a2acp_runtime::control::Response {
    a2acp_tokio::agent::control_request(&home.socket(), &req)
        .await
        .expect("control socket")
}

/// A control request to the agent at `home`: `None` while it cannot answer (not started
/// yet, restarting, killed).
pub async fn try_ctl(home: &Home, req: Request) -> Option<a2acp_runtime::control::Response> {
    a2acp_tokio::agent::control_request(&home.socket(), &req)
        .await
        .ok()
}

/// Starts the scripted dinner with `bob` through the control socket of the agent at
/// `home` (an agent running as a child process, say), as `a2acp thread start` would.
pub async fn start_dinner_by_control(home: &Home, bob: a2acp_core::Address) {
    let a2acp_core::agent::Command::StartThread {
        to,
        intent,
        context,
    } = a2acp_runtime::scripted::start_dinner(
        bob,
        &a2acp_runtime::scripted::next_friday(a2acp_runtime::now()),
    )
    else {
        unreachable!("start_dinner makes a StartThread")
    };
    let r = try_ctl(
        home,
        Request::StartThread {
            to: to.to_string().into(),
            category: intent.category,
            summary: intent.summary,
            context: Some(context),
            urgent: false,
            quorum: None,
            sequential: false,
        },
    )
    .await
    .expect("control socket");
    assert!(r.ok, "{r:?}");
}

/// The Python interpreter of the test venv `target/<name>-venv` that `.ci/test-deps`
/// installs (`$<env>` overrides it). The tests that call this are marked
/// `#[ignore = "needs …: bash .ci/test-deps"]`, so a plain `cargo test` reports them as
/// ignored with the reason instead of counting them as passed; run with
/// `--run-ignored all` (as the README's test command and CI do), a missing venv fails the
/// test with the command that installs it.
pub fn venv_python(name: &str, env: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target")
        .join(format!("{name}-venv"))
        .join("bin/python");
    assert!(
        venv.exists(),
        "no Python {name} venv at target/{name}-venv: run `bash .ci/test-deps` (or set ${env})"
    );
    venv
}

/// A child process killed (SIGKILL) and reaped when dropped, so a failing test leaves
/// none behind.
pub struct KilledOnDrop(pub std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// This test binary again, running only its test `child` with `env` set to `spec` (the
/// body of a child process a test can kill -9 or pause), its stderr to `stderr`.
pub fn spawn_child_test(
    child: &str,
    env: &str,
    spec: &str,
    stderr: std::process::Stdio,
) -> KilledOnDrop {
    use std::process::Stdio;
    let c = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env(env, spec)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    KilledOnDrop(c)
}

/// Waits up to `secs` until something listens on loopback port `port`.
pub async fn wait_listening(port: u16, secs: u64) {
    eventually(secs, &format!("a listener on port {port}"), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(|_| ())
    })
    .await;
}

/// A temporary directory.
pub fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("a2acp-test-")
        .tempdir()
        .unwrap()
}

/// One raw HTTP/1.1 exchange: writes `req`, reads until the server closes or `wait`
/// passes, and returns what came back (empty if nothing did).
pub async fn raw_http(addr: std::net::SocketAddr, req: &[u8], wait: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut r, mut w) = s.into_split();
    // Written while the answer is read: a server may refuse (and close) before the whole
    // request is written, and its refusal must still be read.
    let req = req.to_vec();
    let writer = tokio::spawn(async move {
        let _ = w.write_all(&req).await;
        w
    });
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, async {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    writer.abort();
    String::from_utf8_lossy(&out).into_owned()
}

/// A free loopback address.
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// Every file under `dir`, concatenated (to look for plaintext).
pub fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                out.extend(b);
            }
        }
    }
    out
}

/// A protocol client with no agent behind it: it says exactly what a test wants.
pub struct Raw {
    ws: a2acp_tokio::ws::Ws,
    pub address: Address,
    pub identity: IdentityKey,
    /// The last challenge nonce and domain.
    pub challenge: Option<([u8; 32], String)>,
}

impl Raw {
    /// Connects and reads the challenge.
    pub async fn connect(url: &str, address: &str, seed: u8) -> Raw {
        let ws = a2acp_tokio::ws::connect(url).await.unwrap();
        let mut r = Raw {
            ws,
            address: Address::parse(address).unwrap(),
            identity: IdentityKey::from_seed([seed; 32]),
            challenge: None,
        };
        match r.recv().await {
            RelayFrame::Challenge { nonce, domain, .. } => r.challenge = Some((nonce, domain)),
            other => panic!("expected a challenge, got {other:?}"),
        }
        r
    }

    /// Connects and registers (authenticates).
    pub async fn register(url: &str, address: &str, seed: u8) -> Raw {
        let mut r = Raw::connect(url, address, seed).await;
        let f = r.register_frame();
        r.send(&f).await;
        match r.recv().await {
            RelayFrame::AuthOk { .. } => r,
            other => panic!("expected auth_ok, got {other:?}"),
        }
    }

    /// A `register` frame answering the current challenge.
    pub fn register_frame(&self) -> ClientFrame {
        let (nonce, domain) = self.challenge.clone().unwrap();
        let ts = a2acp_runtime::now().as_millis();
        let key = self.identity.public().to_bytes();
        let msg = challenge_signed_bytes(
            REGISTER_LABEL,
            &nonce,
            &domain,
            ts,
            &self.address,
            Some(&key),
        );
        ClientFrame::Register {
            address: self.address.clone(),
            key,
            ts,
            sig: self.identity.sign(&msg),
        }
    }

    /// An `auth` frame answering a challenge for `domain`.
    pub fn auth_frame(&self, domain: &str) -> ClientFrame {
        let (nonce, _) = self.challenge.clone().unwrap();
        let ts = a2acp_runtime::now().as_millis();
        let msg = challenge_signed_bytes(AUTH_LABEL, &nonce, domain, ts, &self.address, None);
        ClientFrame::Auth {
            address: self.address.clone(),
            ts,
            sig: self.identity.sign(&msg),
        }
    }

    /// Sends a frame.
    pub async fn send(&mut self, f: &ClientFrame) {
        self.send_text(String::from_utf8(f.to_bytes()).unwrap())
            .await;
    }

    /// Sends text.
    pub async fn send_text(&mut self, s: String) {
        self.try_send_text(s).await.unwrap();
    }

    /// Sends text; the error if the relay cut the connection while it was written.
    pub async fn try_send_text(
        &mut self,
        s: String,
    ) -> Result<(), async_tungstenite::tungstenite::Error> {
        self.ws.send(Message::Text(s.into())).await
    }

    /// The next frame that is not a ping (5 s at most).
    pub async fn recv(&mut self) -> RelayFrame {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(5), self.ws.next())
                .await
                .expect("a frame within 5 s")
                .expect("connection open")
                .expect("no WebSocket error");
            if let Message::Text(t) = m {
                let f = RelayFrame::from_bytes(t.as_bytes()).unwrap();
                if let RelayFrame::Challenge { nonce, domain, .. } = &f {
                    self.challenge = Some((*nonce, domain.clone()));
                }
                if !matches!(f, RelayFrame::Ping { .. }) {
                    return f;
                }
            }
        }
    }

    /// Whether the relay closes this connection (a close frame, the end of the stream or a
    /// reset) within 5 s; frames it sends before that are skipped. A connection still open
    /// after 5 s is not closed.
    pub async fn closed_by_relay(&mut self) -> bool {
        let closed = async {
            loop {
                match self.ws.next().await {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                    Some(Ok(_)) => {}
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(5), closed)
            .await
            .is_ok()
    }

    /// An envelope sealed to `to` in `thread_id`.
    pub fn envelope(
        &self,
        to: &Address,
        to_key: &PublicKey,
        thread_id: &str,
        body: &[u8],
    ) -> Envelope {
        let mut s = ThreadSession::new([9; 32]);
        s.seal(
            &self.identity,
            &self.address,
            to,
            to_key,
            thread_id,
            Direction::FromInitiator,
            body,
        )
        .unwrap()
    }
}

/// Installs a tracing subscriber that copies every log line of the process into the
/// returned buffer (the same buffer on every call: with nextest each test is a process of
/// its own, so it holds that test's lines only).
pub fn capture_logs() -> std::sync::Arc<std::sync::Mutex<Vec<u8>>> {
    use std::sync::{Arc, Mutex, OnceLock};
    static BUF: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    BUF.get_or_init(install_log_capture).clone()
}

fn install_log_capture() -> std::sync::Arc<std::sync::Mutex<Vec<u8>>> {
    use std::sync::{Arc, Mutex};
    #[derive(Clone)]
    struct W(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for W {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut v) = self.0.lock() {
                v.extend_from_slice(b);
            }
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Arc::new(Mutex::new(Vec::new()));
    let w = W(buf.clone());
    let _ = tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_ansi(false)
        .with_writer(move || w.clone())
        .try_init();
    buf
}

/// Sends a Phase-1 message with the runtime's sender (blocking, on a thread of tokio's
/// blocking pool) to the receiver at `url`: how it ended and what it reported on the way.
pub async fn phase1_send(
    url: &str,
    sender: a2acp_core::bridge::phase1::sender::Sender,
) -> (
    a2acp_core::bridge::phase1::sender::Outcome,
    Vec<a2acp_runtime::phase1_sender::Progress>,
) {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        let outcome = a2acp_runtime::phase1_sender::send(
            &url,
            sender,
            &a2acp_runtime::phase1_sender::SendOptions::default(),
            |p| seen.push(p.clone()),
        )
        .expect("a valid URL");
        (outcome, seen)
    })
    .await
    .expect("the sender's thread")
}

/// The attempts a Phase-1 sending made, as it reported them.
pub fn phase1_attempts(seen: &[a2acp_runtime::phase1_sender::Progress]) -> usize {
    seen.iter()
        .filter(|p| matches!(p, a2acp_runtime::phase1_sender::Progress::Attempt { .. }))
        .count()
}
