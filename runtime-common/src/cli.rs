//! What the `a2acp` (tokio) and `a2acp-smol` commands share: the flags of `relay` and
//! `agent run` (so both binaries take exactly the same ones), turning them into a relay
//! service configuration or a ready-to-spawn agent, and the logging set-up.

use std::path::{Path, PathBuf};
use std::time::Duration;

use a2acp_core::relay::federation::FederationConfig;
use a2acp_core::relay::RelayConfig;
use a2acp_core::Address;
use clap::Args;

use crate::admission::AdmissionConfig;
use crate::agent_host::{AgentHost, Effect};
use crate::daemon::RunOptions;
use crate::federation::Federation;
use crate::home::Home;
use crate::relay_service::ServiceConfig;
use crate::store::Durability;
use crate::term::Term;
use crate::tls::ServerTls;

/// `relay`: run a relay.
#[derive(Debug, Clone, Args)]
pub struct RelayArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7447")]
    pub listen: String,
    /// Domain served: addresses are agent:NAME@DOMAIN.
    #[arg(long, default_value = "localhost")]
    pub domain: String,
    /// Directory of the relay's database (relay.db).
    #[arg(long, default_value = "./relay-data")]
    pub data: PathBuf,
    /// `full`: every commit synced (survives power loss); `normal`: survives a crash of the process.
    #[arg(long, default_value = "full")]
    pub sync: Durability,
    /// Token refill per second per address (rate limit).
    #[arg(long, default_value_t = 50)]
    pub rate_per_sec: u32,
    /// Token bucket size per address.
    #[arg(long, default_value_t = 200)]
    pub rate_burst: u32,
    /// Frame budget refill per second per connection (every frame costs: an ack or pong
    /// a quarter, any other frame one).
    #[arg(long, default_value_t = 100)]
    pub conn_rate_per_sec: u32,
    /// Frame budget size per connection.
    #[arg(long, default_value_t = 400)]
    pub conn_rate_burst: u32,
    /// New addresses one source (IPv4 address or IPv6 /64) may register per window.
    #[arg(long, default_value_t = 20)]
    pub registrations_per_source: u32,
    /// The window of --registrations-per-source, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub registration_window_secs: u64,
    /// At most one wake-up per offline agent in this many seconds (an agent's wake-up
    /// endpoint: `wake_up` in its config.toml).
    #[arg(long, default_value_t = 60)]
    pub wake_up_interval_secs: u64,
    /// Accept wake-up endpoints on loopback and private addresses, and http:// (refused by
    /// default: the relay would make requests into its own network for anyone).
    #[arg(long)]
    pub wake_up_allow_private: bool,
    /// Send no wake-ups (endpoints are refused with `wake_up_refused`).
    #[arg(long)]
    pub no_wake_ups: bool,
    /// Threads parsing frames and verifying envelope signatures (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub verifiers: usize,
    /// Open connections in total, every phase; past it a connection whose request head is
    /// incomplete (the oldest of the source with the most) is closed to make room, or the
    /// new one is refused.
    /// Default: the open-files limit (ulimit -n) less an eighth (at least 64), e.g. 896
    /// under 1024.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Open connections per source IP address (0: no cap); past it a new connection is
    /// refused.
    #[arg(long, default_value_t = crate::admission::DEFAULT_MAX_PER_IP)]
    pub max_connections_per_ip: usize,
    /// Deadline from the accept for the HTTP request (and its WebSocket handshake), e.g.
    /// `10s`, `500ms`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub upgrade_timeout: Duration,
    /// Deadline from the WebSocket upgrade for `auth` or `register`, e.g. `10s`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub auth_timeout: Duration,
    /// Serve TLS (agents connect to wss://, /healthz and /metrics over https://) with this
    /// certificate chain (PEM, leaf first); needs --tls-key. The TLS handshake counts in
    /// --upgrade-timeout.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Federate with other domains' relays: serve the discovery document at
    /// /.well-known/a2acp (the relay's signing key, relay.key in --data, is created at the
    /// first start), accept links from other relays and route packets to other domains.
    /// Needs --tls-cert (or --public-url behind a TLS proxy). Implied by --federate.
    #[arg(long)]
    pub federation: bool,
    /// The relay of DOMAIN is at wss://HOST:PORT (repeatable): its discovery document is
    /// fetched from https://HOST:PORT/.well-known/a2acp instead of
    /// https://DOMAIN/.well-known/a2acp. For private deployments and tests.
    #[arg(long, value_name = "DOMAIN=wss://HOST:PORT", value_parser = parse_route)]
    pub federate: Vec<(String, String)>,
    /// Trust this CA (PEM) besides the web PKI roots when fetching other relays'
    /// discovery documents and dialling their links (a private deployment's CA).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// The federation endpoint this relay publishes in its discovery document, e.g.
    /// wss://relay.example.org (default: the listener's own wss:// URL).
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// A packet for another domain not handed over to its relay within this long is
    /// dropped and its sender told (`undeliverable`), e.g. `24h` is `1440m`.
    #[arg(long, default_value = "1440m", value_parser = parse_duration)]
    pub federation_expiry: Duration,
    /// Most packets queued for one destination domain.
    #[arg(long, default_value_t = 10_000)]
    pub federation_queue: u32,
    /// Federate only with these domains (repeatable; default: any not denied).
    #[arg(long, value_name = "DOMAIN")]
    pub allow_domain: Vec<String>,
    /// Never federate with this domain (repeatable; checked before --allow-domain).
    #[arg(long, value_name = "DOMAIN")]
    pub deny_domain: Vec<String>,
    /// Serve the domain as one node of a cluster of relays sharing a NATS JetStream
    /// cluster (comma-separated server URLs): registrations, presence and the queue live
    /// in JetStream, replicated (docs/relay.md "A cluster of relays"). Every node of the
    /// domain takes the same --cluster, --domain and queue settings, and its own --node.
    /// The servers must run JetStream with `sync_interval: always`.
    #[arg(
        long,
        value_name = "nats://HOST:PORT[,…]",
        value_delimiter = ',',
        requires = "node"
    )]
    pub cluster: Vec<String>,
    /// This node's name in the cluster (unique per node, e.g. its host name).
    #[arg(long, value_name = "NAME", requires = "cluster")]
    pub node: Option<String>,
    /// Serve the ACP gateway (seed 004 §5.1) on this address: ACP agents submit signed
    /// messages over HTTP(S), stored in their recipients' inboxes agent.<id>.inbox on the
    /// cluster's NATS (docs/relay.md "The ACP gateway"). Needs --cluster; off loopback,
    /// HTTPS with --tls-cert and --tls-key.
    #[arg(long, value_name = "HOST:PORT", requires = "cluster")]
    pub acp_listen: Option<String>,
}

fn parse_route(s: &str) -> Result<(String, String), String> {
    a2acp_core::discovery::parse_static_route(s).map_err(|e| e.to_string())
}

/// `relay-key`: the federating relay's signing key.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum RelayKeyCmd {
    /// Print the relay's current public key and its rotation chain (created if missing).
    Show(RelayKeyArgs),
    /// Hand over to a fresh key, signed by the current one; restart the relay to use it.
    Rotate(RelayKeyArgs),
}

/// Which relay's key.
#[derive(Debug, Clone, Args)]
pub struct RelayKeyArgs {
    /// The relay's data directory (as `relay --data`).
    #[arg(long, default_value = "./relay-data")]
    pub data: PathBuf,
    /// The domain the relay serves (as `relay --domain`).
    #[arg(long, default_value = "localhost")]
    pub domain: String,
}

impl RelayKeyCmd {
    /// Runs the command: what to print.
    pub fn run(&self) -> Result<String, String> {
        match self {
            RelayKeyCmd::Show(a) => {
                let k = crate::relay_key::load_or_create(&a.data, &a.domain)
                    .map_err(|e| e.to_string())?;
                let mut out = format!(
                    "relay key of {} {}: {}\nchain (oldest first):",
                    a.domain,
                    if k.created { "(created now)" } else { "" },
                    k.key.public()
                );
                for c in k.chain.keys() {
                    out.push_str(&format!("\n  {}", c.key));
                }
                Ok(out)
            }
            RelayKeyCmd::Rotate(a) => {
                let (old, new) =
                    crate::relay_key::rotate(&a.data, &a.domain).map_err(|e| e.to_string())?;
                Ok(format!(
                    "relay key of {} rotated: {old} signed {new}; restart the relay to publish and use it",
                    a.domain
                ))
            }
        }
    }
}

/// `dev-ca`: a private CA and a relay certificate signed by it ([`crate::dev_ca`]).
#[derive(Debug, Clone, Args)]
pub struct DevCaArgs {
    /// Where to write ca.pem, relay.pem, relay.key and ca.key.
    #[arg(long, default_value = "./pki")]
    pub out: PathBuf,
    /// A name or IP address the relay certificate is valid for (repeatable).
    #[arg(long = "host", default_values = ["127.0.0.1", "localhost"])]
    pub hosts: Vec<String>,
}

impl DevCaArgs {
    /// Runs the command: what to print.
    pub fn run(&self) -> Result<String, String> {
        let f = crate::dev_ca::make(&self.out, &self.hosts).map_err(|e| e.to_string())?;
        Ok(format!(
            "a private CA (not for the public Internet), and a relay certificate for {}:\n  \
             relay:  --tls-cert {} --tls-key {}\n  trust:  --ca {} (relays and `agent init`)",
            self.hosts.join(", "),
            f.cert.display(),
            f.key.display(),
            f.ca.display()
        ))
    }
}

/// `relay-status`: a running relay's figures, federation included.
#[derive(Debug, Clone, Args)]
pub struct RelayStatusArgs {
    /// The relay's URL (`http://HOST:PORT`, or `https://…` when it serves TLS; a
    /// `ws://`/`wss://` URL is read as the same host and port).
    #[arg(default_value = "http://127.0.0.1:7447")]
    pub url: String,
    /// Trust this CA (PEM) for an https:// relay, besides the web PKI.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

impl RelayStatusArgs {
    /// Runs the command: what to print.
    pub fn run(&self) -> Result<String, String> {
        let url = match self.url.split_once("://") {
            Some(("ws", rest)) => format!("http://{rest}"),
            Some(("wss", rest)) => format!("https://{rest}"),
            _ => self.url.clone(),
        };
        let s = crate::relay_status::fetch(&url, self.ca.as_deref()).map_err(|e| e.to_string())?;
        Ok(if self.json {
            serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?
        } else {
            crate::relay_status::render(&url, &s).trim_end().to_string()
        })
    }
}

/// A duration flag: a whole number followed by `ms`, `s`, `m`, `h` or `d` (`10s`,
/// `500ms`, `2m`, `12h`, `30d`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}`: expected a number and a unit (ms, s, m, h, d), e.g. 10s"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(3_600))),
        "d" => Ok(Duration::from_secs(n.saturating_mul(86_400))),
        _ => Err(format!(
            "`{s}`: the unit must be ms, s, m, h or d, e.g. 10s"
        )),
    }
}

impl RelayArgs {
    /// The relay service's configuration, or why the flags are unusable.
    pub fn service_config(&self) -> Result<ServiceConfig, String> {
        if Address::new("x", &self.domain).is_err() {
            return Err(format!(
                "--domain `{}` is not a valid domain name",
                self.domain
            ));
        }
        let relay = RelayConfig {
            domain: self.domain.clone(),
            rate_per_sec: self.rate_per_sec,
            rate_burst: self.rate_burst.max(1),
            auth_timeout: self.auth_timeout,
            conn_rate_per_sec: self.conn_rate_per_sec,
            conn_rate_burst: self.conn_rate_burst.max(1),
            registrations_per_source: self.registrations_per_source.max(1),
            registration_window: std::time::Duration::from_secs(self.registration_window_secs),
            wake_up: a2acp_core::relay::WakeUpConfig {
                enabled: !self.no_wake_ups,
                interval: std::time::Duration::from_secs(self.wake_up_interval_secs.max(1)),
                allow_private: self.wake_up_allow_private,
            },
            ..RelayConfig::default()
        };
        let federation = self.federation_config()?;
        let relay = RelayConfig {
            federation: federation.as_ref().map(|f| FederationConfig {
                expiry: self.federation_expiry,
                queue_per_domain: self.federation_queue.max(1),
                allow: (!self.allow_domain.is_empty())
                    .then(|| self.allow_domain.iter().cloned().collect()),
                deny: self.deny_domain.iter().cloned().collect(),
                ..FederationConfig::new(f.keys.key.clone())
            }),
            ..relay
        };
        let cluster = self.cluster_config()?;
        let acp_gateway = match &self.acp_listen {
            Some(listen) => Some(crate::acp_gateway::GatewayConfig {
                listen: listen.clone(),
                tls: self.server_tls()?,
                limits: crate::acp_gateway::GatewayLimits::default(),
            }),
            None => None,
        };
        Ok(ServiceConfig {
            relay,
            data: Some(self.data.clone()),
            durability: self.sync,
            verifiers: self.verifiers,
            federation,
            cluster,
            acp_gateway,
            ..ServiceConfig::default()
        })
    }

    /// The cluster settings (`None` without `--cluster`).
    pub fn cluster_config(&self) -> Result<Option<crate::cluster::ClusterConfig>, String> {
        if self.cluster.is_empty() {
            return Ok(None);
        }
        let node = self.node.clone().unwrap_or_default();
        if node.is_empty()
            || !node
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(format!(
                "--node `{node}`: a node's name is letters, digits, `-`, `_` and `.`"
            ));
        }
        for url in &self.cluster {
            if !(url.starts_with("nats://") || url.starts_with("tls://")) {
                return Err(format!(
                    "--cluster `{url}`: a NATS server's URL is nats://HOST:PORT (or tls://HOST:PORT)"
                ));
            }
        }
        Ok(Some(crate::cluster::ClusterConfig::new(
            self.cluster.clone(),
            node,
        )))
    }

    /// Whether the relay federates (`--federation`, or any `--federate`).
    pub fn federates(&self) -> bool {
        self.federation || !self.federate.is_empty()
    }

    /// The federation settings (`None` without `--federation` nor `--federate`): the
    /// relay's key from `--data` (created at the first start), the static routes, the CA.
    pub fn federation_config(&self) -> Result<Option<Federation>, String> {
        if !self.federates() {
            if self.ca.is_some() || self.public_url.is_some() {
                return Err("--ca and --public-url are for a federating relay: add --federation or --federate".into());
            }
            return Ok(None);
        }
        if self.tls_cert.is_none() && self.public_url.is_none() {
            return Err("a federating relay serves its discovery document and links over TLS: give --tls-cert and --tls-key (or --public-url wss://… behind a TLS proxy)".into());
        }
        if let Some(u) = &self.public_url {
            a2acp_core::discovery::check_endpoint(u).map_err(|e| format!("--public-url: {e}"))?;
        }
        let mut routes = std::collections::BTreeMap::new();
        for (domain, endpoint) in &self.federate {
            if *domain == self.domain {
                return Err(format!(
                    "--federate {domain}=…: that is this relay's own domain"
                ));
            }
            if routes.insert(domain.clone(), endpoint.clone()).is_some() {
                return Err(format!("--federate names {domain} twice"));
            }
        }
        let tls = crate::tls::ClientTls::new(self.ca.as_deref()).map_err(|e| e.to_string())?;
        let keys = crate::relay_key::load_or_create(&self.data, &self.domain)
            .map_err(|e| e.to_string())?;
        for d in self.allow_domain.iter().chain(&self.deny_domain) {
            if Address::new("x", d).map_or(true, |a| a.domain() != d) {
                return Err(format!(
                    "`{d}` is not a domain name (lower case, as in addresses)"
                ));
            }
        }
        Ok(Some(Federation {
            keys,
            public_url: self.public_url.clone(),
            routes,
            tls,
            fetch: crate::federation::FetchLimits::default(),
        }))
    }

    /// The listener's connection caps and HTTP-phase deadline.
    pub fn admission_config(&self) -> AdmissionConfig {
        let d = AdmissionConfig::default();
        AdmissionConfig {
            max_connections: self.max_connections.unwrap_or(d.max_connections).max(1),
            max_per_ip: self.max_connections_per_ip,
            upgrade_timeout: self.upgrade_timeout,
        }
    }

    /// The relay's TLS settings from `--tls-cert` and `--tls-key` (`None` without them),
    /// or why the files are unusable (naming the file).
    pub fn server_tls(&self) -> Result<Option<ServerTls>, String> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => ServerTls::from_files(cert, key)
                .map(Some)
                .map_err(|e| e.to_string()),
            (None, None) => Ok(None),
            _ => Err("--tls-cert and --tls-key go together".to_string()),
        }
    }

    /// The line printed once the relay listens on `url`.
    pub fn banner(&self, url: &str) -> String {
        format!(
            "a2acp relay listening on {url} (domain {}, data {})",
            self.domain,
            self.data.display()
        )
    }
}

/// `agent run`: run the agent of a home.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Do not prompt on this terminal (answer with `a2acp answer`).
    #[arg(long)]
    pub no_prompt: bool,
    /// `full` or `normal` (see `a2acp relay --help`).
    #[arg(long, default_value = "full")]
    pub sync: Durability,
    /// Serve Google A2A v1.0 clients here (agent card at `/.well-known/agent-card.json`,
    /// JSON-RPC at `/`): a loopback address, or any with `--a2a-token-file`.
    #[arg(long, value_name = "ADDR")]
    pub a2a_listen: Option<String>,
    /// A file whose first line is the bearer token A2A clients must present.
    #[arg(long, value_name = "FILE", requires = "a2a_listen")]
    pub a2a_token_file: Option<PathBuf>,
    /// Serve the agent's memory as an Agentic Protocol service (seed 002, L3: `/v1/…`,
    /// the descriptor at `/v1/conformance`), stored in `agentic.db` in the home: a
    /// loopback address, or any with `--agentic-token-file`.
    #[arg(long, value_name = "ADDR")]
    pub agentic_listen: Option<String>,
    /// Bearer tokens of the Agentic Protocol service, one a line:
    /// `TOKEN TYPE:ACTOR_ID [PROJECT_ID …]` (TYPE human, agent or script; the token stands
    /// for that actor, and reaches only the projects named, or all).
    #[arg(long, value_name = "FILE", requires = "agentic_listen")]
    pub agentic_token_file: Option<PathBuf>,
    /// Serve the consent page here (answer prompts from a browser): a loopback address
    /// (`127.0.0.1:7420`), or any other address, which a browser then pairs with the
    /// code printed at start (for a phone on the same network).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:7420")]
    pub web: Option<String>,
}

/// An agent ready to be spawned by a binding.
#[derive(Debug)]
pub struct ReadyAgent {
    /// The host.
    pub host: AgentHost,
    /// Its first effects.
    pub effects: Vec<Effect>,
    /// How to run it.
    pub options: RunOptions,
}

/// Everything `agent run` does before the agent starts: logging (to `agent.log` when the
/// terminal shows prompts), opening the home, the terminal in raw mode, the options
/// (transcript, control socket, prompts on the terminal or printed) and the first line.
pub fn prepare_agent_run(home: &Home, args: &RunArgs) -> Result<ReadyAgent, String> {
    use std::io::IsTerminal;
    let interactive =
        !args.no_prompt && std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    init_tracing("info", interactive.then(|| home.log()).as_deref());
    let opened = AgentHost::open_home(home, args.sync).map_err(|e| e.to_string())?;
    let addr = opened.host.agent().address().clone();
    let mut o = RunOptions::new(&opened.file.relay, addr.user());
    o.tls = opened.tls.clone();
    o.transcript = true;
    o.control_socket = Some(home.socket());
    if let Some(listen) = &args.a2a_listen {
        let token = match &args.a2a_token_file {
            Some(p) => Some(crate::a2a::read_token(p)?),
            None => None,
        };
        o.a2a = Some(crate::a2a::A2aOptions {
            listen: listen.clone(),
            token,
            limits: crate::a2a::A2aLimits::default(),
        });
    }
    if let Some(listen) = &args.agentic_listen {
        let tokens = match &args.agentic_token_file {
            Some(p) => crate::agentic::Tokens::read(p)?,
            None => crate::agentic::Tokens::default(),
        };
        o.agentic = Some(crate::agentic::AgenticOptions {
            listen: listen.clone(),
            tokens,
            db: home.dir().join(crate::agentic::DB_FILE),
            limits: crate::agentic::AgenticLimits::default(),
        });
    }
    if let Some(listen) = &args.web {
        o.web = Some(crate::web::WebOptions {
            listen: listen.clone(),
        });
    }
    if interactive {
        o.terminal = Some(Term::start().map_err(|e| e.to_string())?);
    } else {
        o.print_prompts = true;
    }
    let say = |s: &str| match &o.terminal {
        Some(t) => t.println(s),
        None => println!("{s}"),
    };
    say(&format!(
        "{addr} {} · relay {} · control socket {}{}",
        // "resumed" only when there is something to resume: `agent init` already
        // wrote the agent's first records when it registered.
        if opened.restored && !opened.host.agent().threads().is_empty() {
            "resumed"
        } else {
            "started"
        },
        opened.file.relay,
        home.socket().display(),
        if interactive {
            format!(" · logs in {} · Ctrl-C to stop", home.log().display())
        } else {
            String::new()
        }
    ));
    if let Some(w) = &opened.warning {
        say(&format!("warning: {w}"));
    }
    Ok(ReadyAgent {
        host: opened.host,
        effects: opened.effects,
        options: o,
    })
}

/// Logs through `tracing` (`RUST_LOG` overrides `default`) to stderr, or appended to
/// `file` when given. A log file gets no colour codes, and neither does stderr unless it
/// is a terminal (and `NO_COLOR` is unset); every line written to a file goes through
/// [`CleanLog`], so no escape sequence reaches it whoever wrote the text.
pub fn init_tracing(default: &str, file: Option<&Path>) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let b = tracing_subscriber::fmt().with_env_filter(filter);
    match file.and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    }) {
        Some(f) => {
            let _ = b
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(CleanLog(f)))
                .try_init();
        }
        None => {
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            if colour {
                let _ = b.with_writer(std::io::stderr).try_init();
            } else {
                let _ = b
                    .with_ansi(false)
                    .with_writer(|| CleanLog(std::io::stderr()))
                    .try_init();
            }
        }
    }
}

/// A log writer that keeps escape sequences, control and invisible characters out of
/// what it writes: escape sequences (colour codes among them) are removed whole, other
/// controls become `�` or are left out, line feeds stay
/// ([`a2acp_core::display::without_escape_sequences`], [`a2acp_core::display::lines`]).
/// `tracing` writes each event in one call, so a line is cleaned whole.
#[derive(Debug)]
pub struct CleanLog<W>(pub W);

impl<W: std::io::Write> std::io::Write for CleanLog<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let text = a2acp_core::display::without_escape_sequences(&text);
        let clean = a2acp_core::display::lines(&text, usize::MAX);
        self.0.write_all(clean.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_log_line_keeps_no_escape_sequence() {
        let mut log = CleanLog(Vec::new());
        let line = "2026-03-21T14:30:00Z  INFO \u{1b}[32mnotify\u{1b}[0m: bob says \u{1b}]0;owned\u{7}\u{202e}hi\n";
        assert_eq!(log.write(line.as_bytes()).unwrap(), line.len());
        log.write_all(b"plain line\n").unwrap();
        let out = String::from_utf8(log.0).unwrap();
        assert_eq!(
            out,
            "2026-03-21T14:30:00Z  INFO notify: bob says hi\nplain line\n"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(2_592_000)));
        assert!(parse_duration("1w").is_err());
    }
}
