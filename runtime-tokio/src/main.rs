//! `a2acp`: run a relay, run your agent, talk to it, watch the demo, benchmark the relay.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use a2acp_core::Address;
use a2acp_runtime::agent_host::AgentHost;
use a2acp_runtime::cli::{init_tracing, prepare_agent_run, RelayArgs, RunArgs};
use a2acp_runtime::config::AgentFile;
use a2acp_runtime::control::{self, Request, Response};
use a2acp_runtime::home::Home;
use a2acp_runtime::store::Durability;
use a2acp_tokio::agent::{self, RunOptions};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "a2acp",
    version,
    about = "a2acp — personal agents that negotiate context for you through a blind relay",
    long_about = "a2acp — personal agents that negotiate context for you through a blind relay.\n\n\
Try it:            a2acp demo\n\
Run a relay:       a2acp relay --listen 127.0.0.1:7447 --domain localhost --data ./relay-data\n\
Create an agent:   a2acp agent init --address agent:alice@localhost --relay ws://127.0.0.1:7447 --home ./alice\n\
Run it:            a2acp agent run --home ./alice\n\
Talk to it:        a2acp --home ./alice thread start --to agent:bob@localhost --category scheduling --summary \"Dinner on Friday\"\n\n\
Commands that talk to a running agent use --home (or $A2ACP_HOME; default ~/.local/share/a2acp)."
)]
struct Cli {
    /// The agent's directory (config.toml, identity.key, agent.db, agent.sock).
    #[arg(long, global = true)]
    home: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a relay: registry and offline queue in SQLite, /healthz and /metrics on the same port.
    Relay(RelayArgs),
    /// Create or run your agent.
    #[command(subcommand)]
    Agent(AgentCmd),
    /// Start or show a thread.
    #[command(subcommand)]
    Thread(ThreadCmd),
    /// List your agent's threads.
    Threads {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// List open prompts.
    Prompts {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Answer a prompt without the terminal: `answer 3 confirm`, `answer 1 transport_mode cuisine_preference=no`.
    Answer {
        /// The prompt's number (see `a2acp prompts`).
        prompt_id: u64,
        /// Resolution: confirm | different-time | different-place | excuse [REASON] | decline.
        /// Consent: share-all | decline-all | FIELD (share) | FIELD=no | FIELD=VALUE.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        choice: Vec<String>,
    },
    /// Show or change permission tiers (§7).
    #[command(subcommand)]
    Permissions(PermCmd),
    /// Block an agent: its packets are dropped and its threads declined.
    Block {
        /// The agent, e.g. agent:mallory@localhost.
        address: String,
    },
    /// Unblock an agent.
    Unblock {
        /// The agent.
        address: String,
    },
    /// What your agent knows about the agents it talks to.
    #[command(subcommand)]
    Memory(MemoryCmd),
    /// What your agent told you: unread notifications (numbered), or mark them read.
    Notifications {
        /// `read N` or `read --all`.
        #[command(subcommand)]
        cmd: Option<NotificationsCmd>,
        /// Read ones too.
        #[arg(long)]
        all: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Check (safety number, as digits and a QR code) and accept another agent's identity key (§16).
    #[command(subcommand)]
    Keys(KeysCmd),
    /// Your agent's address, key and connection.
    Status {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The spec's dinner example over real sockets in one process (no setup needed).
    Demo {
        /// Answer Alice's prompts yourself (one key per choice).
        #[arg(long)]
        interactive: bool,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
}

#[derive(Subcommand)]
enum AgentCmd {
    /// Create an agent: identity key (mode 0600) and config.toml with the onboarding
    /// defaults of §14.1; registers with the relay if it is reachable.
    Init {
        /// The agent's address, agent:NAME@RELAY-DOMAIN.
        #[arg(long)]
        address: String,
        /// The relay, ws://HOST:PORT.
        #[arg(long)]
        relay: String,
        /// Your name, for the profile.
        #[arg(long)]
        name: Option<String>,
        /// Your time zone (IANA, e.g. Europe/London), for the profile.
        #[arg(long)]
        timezone: Option<String>,
        /// More profile fields from a TOML file (key = value lines).
        #[arg(long)]
        profile: Option<PathBuf>,
        /// Do not contact the relay now (registration happens on the first `agent run`).
        #[arg(long)]
        offline: bool,
    },
    /// Run the agent: connect, keep threads going, show prompts, serve the control socket.
    Run(RunArgs),
}

#[derive(Subcommand)]
enum ThreadCmd {
    /// Ask your agent to start a thread with another agent.
    Start {
        /// The other agent.
        #[arg(long)]
        to: String,
        /// Intent category, e.g. scheduling.
        #[arg(long)]
        category: String,
        /// What it is about, in one line.
        #[arg(long)]
        summary: String,
        /// A JSON file holding one object: context you give (shared in this thread except
        /// never_share fields), e.g. {"time_windows": ["Friday 19:00-22:00"]}.
        #[arg(long)]
        context: Option<PathBuf>,
        /// Urgent: shorter staleness timeout.
        #[arg(long)]
        urgent: bool,
    },
    /// Give a thread new context, or answer its escalation ("I need your input…"): the
    /// negotiation goes on. `thread reply thr_… day=Thursday time=19:00`.
    #[command(alias = "context")]
    Reply {
        /// Thread id.
        id: String,
        /// FIELD=VALUE pairs (a value that reads as JSON is taken as JSON, else as text).
        values: Vec<String>,
        /// Values from a JSON file holding one object, e.g. {"day": "Thursday"}.
        #[arg(long)]
        context: Option<PathBuf>,
    },
    /// Cancel a thread: it closes (DECLINED) and the other agent is told.
    Cancel {
        /// Thread id.
        id: String,
    },
    /// One thread in detail.
    Show {
        /// Thread id.
        id: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum NotificationsCmd {
    /// Mark a notification read (its number from `a2acp notifications`), or all of them.
    Read {
        /// The notification's number.
        #[arg(required_unless_present = "all")]
        number: Option<u64>,
        /// Every notification.
        #[arg(long, conflicts_with = "number")]
        all: bool,
    },
}

#[derive(Subcommand)]
enum KeysCmd {
    /// Your key, the key pinned for ADDR, a changed key waiting, and the safety number to
    /// compare with the other person (60 digits and a QR code).
    Show {
        /// The other agent, e.g. agent:bob@localhost.
        address: String,
        /// Digits only, no QR code.
        #[arg(long)]
        no_qr: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Accept the changed key of ADDR after comparing safety numbers with its user.
    Accept {
        /// The other agent.
        address: String,
        /// The 60 digits the other person's device shows: nothing is accepted unless they match.
        #[arg(long)]
        safety_number: Option<String>,
    },
}

#[derive(Subcommand)]
enum PermCmd {
    /// Tiers, relationship overrides, blocked agents.
    Show {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Put a field or category in a tier (always_share, ask_first, never_share).
    Set {
        /// Field or category, e.g. dietary, specific_availability.
        field: String,
        /// always_share | ask_first | never_share.
        tier: String,
        /// Only for this agent (relationship override: always_share or never_share).
        #[arg(long = "for")]
        for_peer: Option<String>,
    },
}

#[derive(Subcommand)]
enum MemoryCmd {
    /// What the agent pins and knows per agent.
    Show {
        /// One agent.
        address: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Load a real relay on loopback with N authenticated agents sending signed packets.
    Relay(a2acp_tokio::bench::BenchArgs),
    /// Hostile clients (garbage, slowloris, half-open, one-source flood) against a relay
    /// process under a low open-files limit: its fds, memory and CPU before, during and
    /// after, and an honest negotiation's time during the attack against its baseline.
    Attack(a2acp_tokio::bench_attack::AttackArgs),
    /// The bare WebSocket forwarder the relay benchmark compares with (started by it).
    #[command(hide = true)]
    Forwarder(a2acp_tokio::bench::ForwarderArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

async fn run(cli: Cli) -> Result<ExitCode, String> {
    let home = Home::resolve(cli.home.as_deref());
    match cli.cmd {
        Cmd::Relay(a) => {
            init_tracing("info", None);
            run_relay(a).await
        }
        Cmd::Agent(AgentCmd::Init {
            address,
            relay,
            name,
            timezone,
            profile,
            offline,
        }) => {
            init_tracing("warn", None);
            agent_init(&home, &address, &relay, name, timezone, profile, offline).await
        }
        Cmd::Agent(AgentCmd::Run(a)) => agent_run(&home, &a).await,
        Cmd::Demo { interactive } => {
            init_tracing("warn", None);
            let s = a2acp_tokio::demo::run(a2acp_tokio::demo::DemoOptions {
                interactive,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
            Ok(if s.completed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Cmd::Bench(BenchCmd::Forwarder(a)) => {
            a2acp_tokio::bench::forwarder(a)
                .await
                .map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench(BenchCmd::Attack(a)) => {
            init_tracing("warn", None);
            a2acp_tokio::bench_attack::run(a).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench(BenchCmd::Relay(a)) => {
            init_tracing("warn", None);
            a2acp_tokio::bench::run(a)
                .await
                .map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        other => client(&home, other).await,
    }
}

async fn run_relay(a: RelayArgs) -> Result<ExitCode, String> {
    let cfg = a.service_config()?;
    let mut relay = a2acp_tokio::relay::start_with(&a.listen, cfg, a.admission_config())
        .await
        .map_err(|e| e.to_string())?;
    println!("{}", a.banner(&relay.url()));
    tokio::select! {
        _ = shutdown_signal() => {
            tracing::info!("shutting down");
            relay.stop(true).await.map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        r = relay.wait_failed() => {
            r.map_err(|e| e.to_string())?;
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn agent_init(
    home: &Home,
    address: &str,
    relay: &str,
    name: Option<String>,
    timezone: Option<String>,
    profile: Option<PathBuf>,
    offline: bool,
) -> Result<ExitCode, String> {
    let addr = Address::parse(address).map_err(|e| format!("--address `{address}`: {e}"))?;
    a2acp_runtime::config::relay_url(relay)?;
    if home.config().exists() {
        return Err(format!(
            "{} already holds an agent ({}); use another --home",
            home.dir().display(),
            home.config().display()
        ));
    }
    let mut table = toml::Table::new();
    if let Some(p) = &profile {
        let text =
            std::fs::read_to_string(p).map_err(|e| format!("--profile {}: {e}", p.display()))?;
        table = text
            .parse::<toml::Table>()
            .map_err(|e| format!("--profile {}: {e}", p.display()))?;
    }
    if let Some(n) = name {
        table.insert("name".into(), n.into());
    }
    if let Some(t) = timezone {
        table.insert("timezone".into(), t.into());
    }
    std::fs::create_dir_all(home.dir()).map_err(|e| format!("{}: {e}", home.dir().display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(home.dir(), std::fs::Permissions::from_mode(0o700));
    }
    let key = a2acp_runtime::keys::create(&home.key()).map_err(|e| e.to_string())?;
    let file = AgentFile::new(&addr, relay, table);
    file.write_new(&home.config()).map_err(|e| e.to_string())?;
    println!("created {addr} in {}", home.dir().display());
    println!(
        "  identity key  {} (public {})",
        home.key().display(),
        key.public()
    );
    println!("  config        {} (onboarding defaults: ask first for everything except timezone and general area)", home.config().display());
    if offline {
        println!("  registration  on the first `a2acp agent run`");
        return Ok(ExitCode::SUCCESS);
    }
    let opened = AgentHost::open_home(home, Durability::Full).map_err(|e| e.to_string())?;
    let h = agent::spawn(
        opened.host,
        opened.effects,
        RunOptions::new(relay, addr.user()),
    )
    .map_err(|e| e.to_string())?;
    let mut events = h.subscribe();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut registered = false;
    let mut refused = None;
    while tokio::time::Instant::now() < deadline && !registered {
        if let Ok(r) = h.request(Request::Status).await {
            registered = r
                .data
                .get("online")
                .and_then(|v| v.as_bool())
                .unwrap_or(false);
        }
        while let Ok(e) = events.try_recv() {
            if let agent::AgentEvent::Effect(a2acp_runtime::agent_host::Effect::Notify(n)) = e {
                refused = Some(n.text);
            }
        }
        if refused.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = h.stop().await;
    match (registered, refused) {
        (true, _) => println!("  registered    with {relay}"),
        (false, Some(why)) => {
            println!("  registration  refused: {why}");
            return Ok(ExitCode::FAILURE);
        }
        (false, None) => println!(
            "  registration  {relay} not reachable now; it happens on the first `a2acp agent run`"
        ),
    }
    println!("next: a2acp agent run --home {}", home.dir().display());
    Ok(ExitCode::SUCCESS)
}

async fn agent_run(home: &Home, a: &RunArgs) -> Result<ExitCode, String> {
    let ready = prepare_agent_run(home, a)?;
    let h = agent::spawn(ready.host, ready.effects, ready.options).map_err(|e| e.to_string())?;
    let wait_end = async {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if h.is_finished() {
                break;
            }
        }
    };
    tokio::select! {
        _ = shutdown_signal() => {}
        _ = wait_end => {}
    }
    h.stop().await.map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

/// A `--context` file: one JSON object.
fn context_file(p: &std::path::Path) -> Result<a2acp_core::packet::Context, String> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("--context {}: {e}", p.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("--context {}: not JSON: {e}", p.display()))?;
    match v {
        serde_json::Value::Object(m) => Ok(m),
        _ => Err(format!(
            "--context {}: must hold a JSON object, e.g. {{\"day\": \"Thursday\"}}",
            p.display()
        )),
    }
}

/// A response whose data is a sentence.
fn text(r: &Response) -> String {
    r.data.as_str().unwrap_or("done").to_string()
}

fn notifications(r: &Response, all: bool) -> String {
    serde_json::from_value::<Vec<control::NotificationEntry>>(r.data.clone())
        .map(|d| control::render_notifications(&d, all))
        .unwrap_or_default()
}

fn key(r: &Response, qr: bool) -> String {
    serde_json::from_value::<control::KeyInfo>(r.data.clone())
        .map(|d| control::render_key(&d, qr))
        .unwrap_or_default()
}

async fn client(home: &Home, cmd: Cmd) -> Result<ExitCode, String> {
    let (req, json, render): (Request, bool, fn(&Response) -> String) = match cmd {
        Cmd::Thread(ThreadCmd::Start {
            to,
            category,
            summary,
            context,
            urgent,
        }) => {
            let context = context.as_deref().map(context_file).transpose()?;
            (
                Request::StartThread {
                    to,
                    category,
                    summary,
                    context,
                    urgent,
                },
                false,
                |r| {
                    format!(
                        "thread {} started",
                        r.data["thread_id"].as_str().unwrap_or("?")
                    )
                },
            )
        }
        Cmd::Thread(ThreadCmd::Reply {
            id,
            values,
            context,
        }) => {
            let mut c = match context.as_deref() {
                Some(p) => context_file(p)?,
                None => a2acp_core::packet::Context::new(),
            };
            c.extend(control::parse_values(&values)?);
            if c.is_empty() {
                return Err(
                    "give the new context: FIELD=VALUE words or --context FILE (a JSON object)"
                        .into(),
                );
            }
            (Request::ReplyThread { id, context: c }, false, text)
        }
        Cmd::Thread(ThreadCmd::Cancel { id }) => (Request::CancelThread { id }, false, text),
        Cmd::Notifications {
            cmd: Some(NotificationsCmd::Read { number, all }),
            ..
        } => (Request::ReadNotifications { number, all }, false, text),
        Cmd::Notifications {
            cmd: None,
            all,
            json,
        } => (
            Request::Notifications { all },
            json,
            if all {
                |r: &Response| notifications(r, true)
            } else {
                |r: &Response| notifications(r, false)
            },
        ),
        Cmd::Keys(KeysCmd::Show {
            address,
            no_qr,
            json,
        }) => (
            Request::KeyShow { address },
            json,
            if no_qr {
                |r: &Response| key(r, false)
            } else {
                |r: &Response| key(r, true)
            },
        ),
        Cmd::Keys(KeysCmd::Accept {
            address,
            safety_number,
        }) => (
            Request::KeyAccept {
                address,
                safety_number,
            },
            false,
            text,
        ),
        Cmd::Thread(ThreadCmd::Show { id, json }) => (Request::Thread { id }, json, |r| {
            serde_json::from_value(r.data.clone())
                .map(|d| control::render_thread(&d))
                .unwrap_or_default()
        }),
        Cmd::Threads { json } => (Request::Threads, json, |r| {
            serde_json::from_value::<Vec<control::ThreadSummary>>(r.data.clone())
                .map(|d| control::render_threads(&d))
                .unwrap_or_default()
        }),
        Cmd::Prompts { json } => (Request::Prompts, json, |r| {
            let v: Vec<a2acp_core::agent::Prompt> =
                serde_json::from_value(r.data.clone()).unwrap_or_default();
            if v.is_empty() {
                "no open prompts".into()
            } else {
                v.iter()
                    .map(|p| {
                        format!(
                            "{}\n   {}",
                            a2acp_runtime::prompt::render(p),
                            a2acp_runtime::prompt::help(p)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        }),
        Cmd::Answer { prompt_id, choice } => (
            Request::Answer {
                prompt_id,
                args: choice,
            },
            false,
            |r| r.data.as_str().unwrap_or("answered").to_string(),
        ),
        Cmd::Permissions(PermCmd::Show { json }) => (Request::Permissions, json, |r| {
            serde_json::from_value(r.data.clone())
                .map(|d| control::render_permissions(&d))
                .unwrap_or_default()
        }),
        Cmd::Permissions(PermCmd::Set {
            field,
            tier,
            for_peer,
        }) => (
            Request::SetPermission {
                field,
                tier,
                for_peer,
            },
            false,
            |r| {
                serde_json::from_value(r.data.clone())
                    .map(|d| control::render_permissions(&d))
                    .unwrap_or_default()
            },
        ),
        Cmd::Block { address } => (Request::Block { address }, false, |r| {
            r.data.as_str().unwrap_or("").to_string()
        }),
        Cmd::Unblock { address } => (Request::Unblock { address }, false, |r| {
            r.data.as_str().unwrap_or("").to_string()
        }),
        Cmd::Memory(MemoryCmd::Show { address, json }) => {
            (Request::Memory { address }, json, |r| {
                serde_json::from_value::<Vec<control::PeerMemory>>(r.data.clone())
                    .map(|d| control::render_memory(&d))
                    .unwrap_or_default()
            })
        }
        Cmd::Status { json } => (Request::Status, json, |r| {
            serde_json::from_value::<control::StatusInfo>(r.data.clone())
                .map(|s| {
                    format!(
                        "{} ({})\n  relay: {}\n  threads: {} ({} open) · prompts: {} · outbox: {}",
                        s.address,
                        s.key,
                        if s.online { "online" } else { "offline" },
                        s.threads,
                        s.open_threads,
                        s.prompts,
                        s.outbox
                    )
                })
                .unwrap_or_default()
        }),
        _ => return Err("unsupported command".into()),
    };
    let resp = agent::control_request(&home.socket(), &req).await?;
    if !resp.ok {
        return Err(resp
            .error
            .unwrap_or_else(|| "the agent refused the request".into()));
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&resp.data).unwrap_or_default()
        );
    } else {
        // Threads, memory and prompts quote what peers wrote: no control, escape or
        // invisible character reaches the terminal (SPEC-NOTES "Prompts and peer text on
        // screen").
        let text = render(&resp);
        println!("{}", a2acp_core::display::lines(&text, usize::MAX));
    }
    Ok(ExitCode::SUCCESS)
}
