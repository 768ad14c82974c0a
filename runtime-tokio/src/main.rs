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
Talk to it:        a2acp --home ./alice thread start --to agent:bob@localhost --category scheduling --summary \"Dinner on Friday\"\n\
A group thread:    a2acp --home ./alice thread start --to agent:bob@localhost --to agent:carol@localhost --category group_scheduling --summary \"Game night\"\n\n\
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
    /// Answer a prompt without the terminal: `answer 3 confirm`, `answer 3 alternative 2`, `answer 1 transport_mode cuisine_preference=no`.
    Answer {
        /// The prompt's number (see `a2acp prompts`).
        prompt_id: u64,
        /// Resolution: confirm | different-time | different-place | excuse [REASON] | decline | alternative N.
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
    /// Shared context spaces (§12): create one, show it, write a field, see its history.
    #[command(subcommand)]
    Space(SpaceCmd),
    /// Your agent's suggestions (§7.2, e.g. "always share dietary with Bob?"); `suggestions accept N` takes one.
    Suggestions {
        #[command(subcommand)]
        cmd: Option<SuggestionsCmd>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
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
    /// The spec's dinner example over real sockets in one process (no setup needed);
    /// `--group`: the spec's game night for four (§10.2), a group thread.
    Demo {
        /// Answer Alice's prompts yourself (one key per choice).
        #[arg(long)]
        interactive: bool,
        /// The game night for four: Alice's agent coordinates a group thread with Bob,
        /// Charlie and Diana.
        #[arg(long)]
        group: bool,
        /// Both agents decide with the language model of this OpenAI-compatible API
        /// (`http://127.0.0.1:8080/v1`, `https://api.openai.com/v1`…) instead of the
        /// deterministic negotiator.
        #[arg(long, value_name = "URL", conflicts_with = "group")]
        llm: Option<String>,
        /// The model to ask (with `--llm`).
        #[arg(long, value_name = "NAME", requires = "llm", default_value = "default")]
        model: String,
        /// How the server is told the answer's JSON schema (with `--llm`): json_schema
        /// (OpenAI), json_object_schema (llama-cpp-python), ollama, none.
        #[arg(
            long,
            value_name = "SHAPE",
            requires = "llm",
            default_value = "json_schema"
        )]
        structured_output: String,
        /// The environment variable holding the API key (with `--llm`), e.g. OPENAI_API_KEY.
        #[arg(long, value_name = "VAR", requires = "llm")]
        api_key_env: Option<String>,
    },
    /// Serve your running agent to an MCP host (Claude Desktop, an IDE…) over stdio (§17):
    /// its threads, prompts and permissions as tools and resources.
    Mcp {
        /// Your host shows you every tool call before it runs: prompts are answered with
        /// what the call says instead of asking you through the host.
        #[arg(long)]
        host_answers: bool,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
}

#[derive(Subcommand)]
enum AgentCmd {
    /// Create an agent: identity key (mode 0600) and config.toml with the onboarding
    /// defaults of §14.1; registers with the relay if it is reachable. Without --address
    /// it runs the §14.1 onboarding: name, area, time zone (detected) and the five
    /// permission defaults are asked in the terminal (or read one per line from stdin
    /// when it is not a terminal).
    Init {
        /// The agent's address, agent:NAME@RELAY-DOMAIN (absent: asked).
        #[arg(long)]
        address: Option<String>,
        /// The relay, ws://HOST:PORT, or wss://HOST[:PORT] for a relay serving TLS
        /// (required with --address; absent: asked).
        #[arg(long)]
        relay: Option<String>,
        /// For a wss:// relay whose certificate is issued by a private CA (or is
        /// self-signed): that CA's certificate(s), PEM. Trusted besides the web PKI roots;
        /// its absolute path is written to config.toml as `relay_ca`.
        #[arg(long)]
        ca: Option<PathBuf>,
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
    /// Ask your agent to start a thread with another agent, or a group thread with
    /// several (repeat --to; your agent coordinates).
    Start {
        /// The other agent; repeated (`--to A --to B …`, up to 15), a group thread your
        /// agent coordinates. Or a plain A2A agent: its agent card's URL
        /// (`https://…/.well-known/agent-card.json`) or base URL (§18).
        #[arg(long, required = true)]
        to: Vec<String>,
        /// Intent category, e.g. scheduling.
        #[arg(long)]
        category: String,
        /// What it is about, in one line.
        #[arg(long)]
        summary: String,
        /// Context you give: a path to a JSON file holding an object (e.g.
        /// examples/dinner.json), or the object itself inline (starting with `{`). Shared
        /// in this thread except never_share fields.
        #[arg(long, value_name = "FILE.json|{JSON}")]
        context: Option<String>,
        /// Urgent: shorter staleness timeout.
        #[arg(long)]
        urgent: bool,
        /// A group thread only: how many confirmations (yours included) settle it; by
        /// default everyone the proposal names must confirm.
        #[arg(long)]
        quorum: Option<u32>,
        /// A group thread only: ask for confirmations one after the other, you first, then
        /// in the order of --to; between two steps your agent checks its bookings, and what
        /// it finds may change what the next person is asked (§8.3).
        #[arg(long, conflicts_with = "quorum")]
        sequential: bool,
    },
    /// Give a thread new context, or answer its escalation ("I need your input…"): the
    /// negotiation goes on. `thread reply thr_… day=Thursday time=19:00`.
    #[command(alias = "context")]
    Reply {
        /// Thread id.
        id: String,
        /// FIELD=VALUE pairs (a value that reads as JSON is taken as JSON, else as text).
        values: Vec<String>,
        /// Values as a JSON object: a path to a file holding one, or the object itself
        /// inline (starting with `{`), e.g. '{"day": "Thursday"}'.
        #[arg(long, value_name = "FILE.json|{JSON}")]
        context: Option<String>,
    },
    /// Cancel a thread: it closes (DECLINED) and the other agent is told.
    Cancel {
        /// Thread id.
        id: String,
    },
    /// Change what a thread is about (§6.5): `thread update-intent thr_… --summary "Game
    /// night with friends on Friday" --need game_preferences`. The other agent is told;
    /// whatever your tiers would share for the new intent but not for the old one is
    /// asked first (a prompt).
    UpdateIntent {
        /// Thread id.
        id: String,
        /// What it is about now, in one line.
        #[arg(long)]
        summary: String,
        /// The new category (default: the thread's).
        #[arg(long = "type", alias = "category")]
        category: Option<String>,
        /// Why, shown to the other person.
        #[arg(long)]
        reason: Option<String>,
        /// A field the new intent needs from the other side (repeat, at most 5).
        #[arg(long = "need")]
        needs: Vec<String>,
    },
    /// Split a thread into threads that negotiate independently (§6.5): `thread fork thr_…
    /// --intent "Dinner reservation for Friday 19:00" --intent "Game night venue for Friday
    /// 21:00"`. Each inherits the thread's context and permissions and negotiates around
    /// what its siblings hold.
    Fork {
        /// Thread id.
        id: String,
        /// One new thread's summary (repeat: 2 to 8).
        #[arg(long = "intent", required = true)]
        intents: Vec<String>,
        /// Their category (default: the thread's).
        #[arg(long = "type", alias = "category")]
        category: Option<String>,
    },
    /// Hand a group thread you coordinate to one of its participants (§10.3).
    Transfer {
        /// The group's id (grp_…).
        id: String,
        /// The participant who coordinates from now on.
        #[arg(long)]
        to: String,
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
enum SuggestionsCmd {
    /// Accept suggestion N (as listed): e.g. always share that field with that agent.
    Accept {
        /// The suggestion's number.
        id: u64,
    },
    /// Dismiss suggestion N: not listed any more, never suggested again.
    Dismiss {
        /// The suggestion's number.
        id: u64,
    },
}

#[derive(Subcommand)]
enum SpaceCmd {
    /// Create a space with other agents: `space create "Family trip" --with agent:bob@localhost=write_own_fields --with agent:carol@localhost`.
    Create {
        /// What it is about.
        name: String,
        /// A participant: ADDRESS or ADDRESS=PERMISSION (read_all, write_own_fields, full_write; default full_write). Repeat for each.
        #[arg(long = "with", required = true)]
        with: Vec<String>,
        /// Initial fields: a JSON object inline or the path of a JSON file.
        #[arg(long)]
        context: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// One space's fields, or every space without an id.
    Show {
        /// The space (`spc_…`).
        id: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Write a field: `space set spc_… hotel "Alfama Suites"`, `space set spc_… ~/arrival 18:00` (an own field), `space set spc_… itinerary --link https://…`, or no value to clear it.
    Set {
        /// The space.
        id: String,
        /// The field (`~/NAME`: your own field).
        field: String,
        /// The value: JSON if it parses, else text.
        value: Option<String>,
        /// A link to an external resource instead of a value.
        #[arg(long)]
        link: Option<String>,
        /// The link's title.
        #[arg(long)]
        title: Option<String>,
    },
    /// Every update of a space, oldest first.
    History {
        /// The space.
        id: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum MemoryCmd {
    /// What the agent pins, knows and remembers per agent (relationship memory, §11).
    Show {
        /// One agent.
        address: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Set a remembered value about an agent's user (e.g. their dietary needs changed).
    Edit {
        /// The agent.
        address: String,
        /// The field, e.g. dietary.
        field: String,
        /// The value.
        value: String,
    },
    /// Forget one remembered field of an agent, or everything about it (its memory, what
    /// was learnt of it, its ended threads).
    Forget {
        /// The agent.
        address: String,
        /// Only this field.
        field: Option<String>,
    },
    /// Write all memory (or one agent's) as NDJSON (seed 002 §10.3), hashes preserved.
    Export {
        /// Only this agent.
        address: Option<String>,
        /// Write to this file instead of standard output.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Import memory from an NDJSON file: all lines or none.
    Import {
        /// The file.
        file: std::path::PathBuf,
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
            ca,
            name,
            timezone,
            profile,
            offline,
        }) => {
            // What goes wrong is said by `agent init` itself (refusal, relay unreachable).
            init_tracing("error", None);
            let mut onboarded = None;
            let (address, relay) = match (address, relay) {
                (Some(a), Some(r)) => (a, r),
                (Some(_), None) => return Err("--address needs --relay".into()),
                (None, relay) => {
                    let given = a2acp_runtime::onboarding::Given {
                        relay,
                        name: name.clone(),
                        timezone: timezone.clone(),
                    };
                    let detected = a2acp_runtime::onboarding::detect_timezone();
                    let o = a2acp_runtime::onboarding::run(
                        &mut std::io::stdin().lock(),
                        &mut std::io::stdout(),
                        &given,
                        detected.as_deref(),
                    )
                    .map_err(|e| e.to_string())?;
                    let r = (o.address.to_string(), o.relay.clone());
                    onboarded = Some(o);
                    r
                }
            };
            let relay = RelayTarget { url: relay, ca };
            agent_init(
                &home, &address, &relay, name, timezone, profile, offline, onboarded,
            )
            .await
        }
        Cmd::Agent(AgentCmd::Run(a)) => agent_run(&home, &a).await,
        Cmd::Demo {
            interactive,
            group,
            llm,
            model,
            structured_output,
            api_key_env,
        } => {
            init_tracing("warn", None);
            let mut options = a2acp_tokio::demo::DemoOptions {
                interactive,
                ..Default::default()
            };
            if let Some(url) = llm {
                let mut l = a2acp_runtime::llm::LlmConfig::new(&url, &model);
                l.structured_output =
                    serde_json::from_value(serde_json::Value::String(structured_output.clone()))
                        .map_err(|_| {
                            format!(
                                "--structured-output `{structured_output}`: one of json_schema, json_object_schema, ollama, none"
                            )
                        })?;
                l.api_key_env = api_key_env;
                l.check()?;
                options.llm = Some(l);
                // A model takes seconds per decision, more with its retries.
                options.timeout = std::time::Duration::from_secs(600);
            }
            if group {
                let s = a2acp_tokio::demo::run_group(options)
                    .await
                    .map_err(|e| e.to_string())?;
                return Ok(if s.completed {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                });
            }
            let s = a2acp_tokio::demo::run(options)
                .await
                .map_err(|e| e.to_string())?;
            Ok(if s.completed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Cmd::Mcp { host_answers } => {
            // stdout carries the protocol: logs go to stderr only.
            init_tracing("warn", None);
            a2acp_tokio::mcp::serve_stdio(a2acp_tokio::mcp::McpOptions {
                socket: home.socket(),
                host_answers,
            })
            .await?;
            Ok(ExitCode::SUCCESS)
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
    let tls = a.server_tls()?;
    let mut relay = a2acp_tokio::relay::start_with(&a.listen, cfg, a.admission_config(), tls)
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

/// The relay `agent init` is given: its URL and, for a private CA, the CA's file.
struct RelayTarget {
    url: String,
    ca: Option<PathBuf>,
}

// The flags of `agent init` and the onboarding's answers, one argument each.
#[allow(clippy::too_many_arguments)]
async fn agent_init(
    home: &Home,
    address: &str,
    target: &RelayTarget,
    name: Option<String>,
    timezone: Option<String>,
    profile: Option<PathBuf>,
    offline: bool,
    onboarded: Option<a2acp_runtime::onboarding::Onboarding>,
) -> Result<ExitCode, String> {
    let addr = Address::parse(address).map_err(|e| format!("--address `{address}`: {e}"))?;
    let relay = target.url.as_str();
    if addr.to_string() != address {
        // Addresses are case-insensitive and kept in lower case (SPEC-NOTES, addresses):
        // the one you create is the one you give others, so it is spelled as stored.
        return Err(format!(
            "--address `{address}`: addresses are lower case; use `{addr}`"
        ));
    }
    a2acp_runtime::config::relay_url(relay)?;
    // The CA file is checked (and made absolute, so the home may be moved) before anything
    // is written.
    let ca = match &target.ca {
        Some(p) => {
            let abs = std::fs::canonicalize(p).map_err(|e| format!("--ca {}: {e}", p.display()))?;
            a2acp_runtime::tls::ClientTls::new(Some(&abs)).map_err(|e| e.to_string())?;
            if !a2acp_runtime::config::relay_is_tls(relay) {
                return Err(format!(
                    "--ca is for a wss:// relay; {relay} is plain ws://"
                ));
            }
            Some(abs)
        }
        None => None,
    };
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
    if let Some(o) = &onboarded {
        table.insert("name".into(), o.name.clone().into());
        table.insert("timezone".into(), o.timezone.clone().into());
        if let Some(a) = &o.area {
            table.insert("general_area".into(), a.clone().into());
        }
    }
    // What this command creates, removed again if the relay refuses the address.
    let made_dir = !home.dir().exists();
    std::fs::create_dir_all(home.dir()).map_err(|e| format!("{}: {e}", home.dir().display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(home.dir(), std::fs::Permissions::from_mode(0o700));
    }
    let key = a2acp_runtime::keys::create(&home.key()).map_err(|e| e.to_string())?;
    let mut file = AgentFile::new(&addr, relay, table);
    file.relay_ca = ca.map(|p| p.display().to_string());
    if let Some(o) = onboarded {
        file.permissions = o.permissions;
    }
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
    let tls = opened.tls.clone();
    let mut options = RunOptions::new(relay, addr.user());
    options.tls = tls.clone();
    let h = agent::spawn(opened.host, opened.effects, options).map_err(|e| e.to_string())?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut registered = false;
    let mut refused: Option<control::RefusedInfo> = None;
    while tokio::time::Instant::now() < deadline && !registered && refused.is_none() {
        if let Ok(r) = h.request(Request::Status).await {
            if let Ok(s) = serde_json::from_value::<control::StatusInfo>(r.data) {
                registered = s.online;
                refused = s.refused;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = h.stop().await;
    match (registered, refused) {
        (true, _) => println!("  registered    with {relay}"),
        (false, Some(r)) => {
            // Nothing of a home the relay refused stays behind.
            for f in [home.key(), home.config(), home.db()] {
                let _ = std::fs::remove_file(&f);
                for ext in ["-wal", "-shm", "-journal"] {
                    let mut p = f.clone().into_os_string();
                    p.push(ext);
                    let _ = std::fs::remove_file(PathBuf::from(p));
                }
            }
            if made_dir {
                let _ = std::fs::remove_dir(home.dir());
            }
            let advice = match r.code.as_str() {
                "address_taken" => "another agent holds this address at the relay; choose another --address",
                "registration_limited" => "too many new addresses were registered from this network lately; try again in an hour",
                _ => "check --address (its domain must be the relay's) and --relay",
            };
            return Err(format!(
                "the relay refused to register {addr} ({}: {}): {advice}. Nothing was created in {}.",
                r.code,
                r.message,
                home.dir().display()
            ));
        }
        (false, None) => {
            // Why, in one more attempt: e.g. a wss:// relay whose certificate is not trusted.
            let why = match a2acp_tokio::ws::connect_with(relay, tls.as_ref()).await {
                Err(e) => format!(" ({e})"),
                Ok(_) => String::new(),
            };
            println!(
                "  registration  {relay} not reachable now{why}; it happens on the first `a2acp agent run`"
            )
        }
    }
    println!("next: a2acp agent run --home {}", home.dir().display());
    Ok(ExitCode::SUCCESS)
}

async fn agent_run(home: &Home, a: &RunArgs) -> Result<ExitCode, String> {
    let ready = prepare_agent_run(home, a)?;
    let h = agent::spawn(ready.host, ready.effects, ready.options).map_err(|e| e.to_string())?;
    if let Some(addr) = h.a2a_addr() {
        println!("A2A listening on http://{addr}/ (agent card at http://{addr}/.well-known/agent-card.json)");
    }
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

/// `--context`: a JSON object inline (starting with `{`) or the path of a file holding one.
fn read_context(arg: &str) -> Result<a2acp_core::packet::Context, String> {
    let (text, what) = if arg.trim_start().starts_with('{') {
        (arg.to_string(), "--context (inline JSON)".to_string())
    } else {
        let text = std::fs::read_to_string(arg).map_err(|e| {
            format!("--context {arg}: {e} (give a path to a JSON file, e.g. examples/dinner.json, or a JSON object inline)")
        })?;
        (text, format!("--context {arg}"))
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(format!(
            "{what}: must be a JSON object ({{\"field\": value, …}})"
        )),
        Err(e) => Err(format!("{what}: not JSON: {e}")),
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
    if let Cmd::Memory(MemoryCmd::Export { address, out }) = &cmd {
        // The NDJSON goes out byte for byte (it is the backup), not through the
        // terminal's escaping.
        let req = Request::MemoryExport {
            address: address.clone(),
        };
        let resp = agent::control_request(&home.socket(), &req).await?;
        if !resp.ok {
            return Err(resp
                .error
                .unwrap_or_else(|| "the agent refused the export".into()));
        }
        let text = resp.data.as_str().unwrap_or_default();
        match out {
            Some(path) => std::fs::write(path, text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?,
            None => {
                use std::io::Write;
                let _ = std::io::stdout().lock().write_all(text.as_bytes());
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (req, json, render): (Request, bool, fn(&Response) -> String) = match cmd {
        Cmd::Thread(ThreadCmd::Start {
            to,
            category,
            summary,
            context,
            urgent,
            quorum,
            sequential,
        }) => {
            let context = match context {
                Some(arg) => Some(read_context(&arg)?),
                None => None,
            };
            (
                Request::StartThread {
                    to: control::Recipients::from_list(to),
                    category,
                    summary,
                    context,
                    urgent,
                    quorum,
                    sequential,
                },
                false,
                |r| {
                    if r.data["group_id"].is_string() {
                        return control::render_group_started(&r.data);
                    }
                    let id = r.data["thread_id"].as_str().unwrap_or("?");
                    match r.data["relay"].as_str() {
                        _ if r.data["a2a"] == true => format!(
                            "thread {id} started with the A2A agent {}: your agent reads its card and drives the task (follow it with `a2acp threads`)",
                            r.data["peer"].as_str().unwrap_or("?")
                        ),
                        Some("accepted") => format!(
                            "thread {id} started: the relay accepted its first packet (follow it with `a2acp threads`)"
                        ),
                        _ if r.data["online"] == false => format!(
                            "thread {id} started; the agent is offline: its first packet goes when the relay is reachable (`a2acp status`)"
                        ),
                        _ => format!(
                            "thread {id} started; the relay has not accepted its first packet yet (follow it with `a2acp threads`)"
                        ),
                    }
                },
            )
        }
        Cmd::Thread(ThreadCmd::Reply {
            id,
            values,
            context,
        }) => {
            let mut c = match context.as_deref() {
                Some(arg) => read_context(arg)?,
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
        Cmd::Thread(ThreadCmd::UpdateIntent {
            id,
            summary,
            category,
            reason,
            needs,
        }) => (
            Request::UpdateIntent {
                id,
                summary,
                category,
                reason,
                needs,
            },
            false,
            text,
        ),
        Cmd::Thread(ThreadCmd::Fork {
            id,
            intents,
            category,
        }) => (
            Request::ForkThread {
                id,
                intents,
                category,
            },
            false,
            text,
        ),
        Cmd::Thread(ThreadCmd::Transfer { id, to }) => {
            (Request::TransferCoordinator { id, to }, false, text)
        }
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
            // A group's answer names the group itself (`group.group_id` = `id`).
            if r.data["group"]["group_id"] == r.data["id"] {
                return serde_json::from_value(r.data.clone())
                    .map(|d| control::render_group(&d))
                    .unwrap_or_default();
            }
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
            let v: Vec<control::PromptEntry> =
                serde_json::from_value(r.data.clone()).unwrap_or_default();
            if v.is_empty() {
                "no open prompts".into()
            } else {
                v.iter()
                    .map(|p| {
                        format!(
                            "{}\n   {}",
                            a2acp_runtime::prompt::render_in(&p.prompt, p.group.as_ref()),
                            a2acp_runtime::prompt::help(&p.prompt)
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
        Cmd::Space(SpaceCmd::Create {
            name,
            with,
            context,
            json,
        }) => {
            let participants = with
                .iter()
                .map(String::as_str)
                .map(control::SpaceMember::parse)
                .collect::<Result<Vec<_>, _>>()?;
            let fields = match context {
                Some(arg) => Some(read_context(&arg)?),
                None => None,
            };
            (
                Request::SpaceCreate {
                    name,
                    participants,
                    fields,
                },
                json,
                |r| {
                    serde_json::from_value::<control::SpaceView>(r.data.clone())
                        .map(|d| format!("space created:\n{}", control::render_space(&d)))
                        .unwrap_or_default()
                },
            )
        }
        Cmd::Space(SpaceCmd::Show { id, json }) => {
            let many = id.is_none();
            (
                Request::SpaceShow { id },
                json,
                if many {
                    |r: &Response| {
                        serde_json::from_value::<Vec<control::SpaceView>>(r.data.clone())
                            .map(|d| control::render_spaces(&d))
                            .unwrap_or_default()
                    }
                } else {
                    |r: &Response| {
                        serde_json::from_value::<control::SpaceView>(r.data.clone())
                            .map(|d| control::render_space(&d))
                            .unwrap_or_default()
                    }
                },
            )
        }
        Cmd::Space(SpaceCmd::Set {
            id,
            field,
            value,
            link,
            title,
        }) => (
            Request::SpaceSet {
                id,
                field,
                value: value.map(|v| a2acp_core::agent::space::value_from_text(&v)),
                link,
                title,
            },
            false,
            text,
        ),
        Cmd::Memory(MemoryCmd::Edit {
            address,
            field,
            value,
        }) => (
            Request::MemoryEdit {
                address,
                field,
                value,
            },
            false,
            text,
        ),
        Cmd::Space(SpaceCmd::History { id, json }) => (Request::SpaceHistory { id }, json, |r| {
            serde_json::from_value::<Vec<control::SpaceFieldLine>>(r.data.clone())
                .map(|d| control::render_space_history(&d))
                .unwrap_or_default()
        }),
        Cmd::Memory(MemoryCmd::Forget { address, field }) => {
            (Request::MemoryForget { address, field }, false, text)
        }
        Cmd::Memory(MemoryCmd::Import { file }) => {
            let ndjson = std::fs::read_to_string(&file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            (Request::MemoryImport { ndjson }, false, text)
        }
        Cmd::Suggestions { cmd: None, json } => (Request::Suggestions, json, |r| {
            serde_json::from_value::<Vec<a2acp_core::agent::Suggestion>>(r.data.clone())
                .map(|d| control::render_suggestions(&d))
                .unwrap_or_default()
        }),
        Cmd::Suggestions {
            cmd: Some(SuggestionsCmd::Accept { id }),
            ..
        } => (Request::AcceptSuggestion { id }, false, |r| {
            r.data.as_str().unwrap_or("accepted").to_string()
        }),
        Cmd::Suggestions {
            cmd: Some(SuggestionsCmd::Dismiss { id }),
            ..
        } => (Request::DismissSuggestion { id }, false, |r| {
            r.data.as_str().unwrap_or("dismissed").to_string()
        }),
        Cmd::Status { json } => (Request::Status, json, |r| {
            serde_json::from_value::<control::StatusInfo>(r.data.clone())
                .map(|s| control::render_status(&s))
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
    // A closed stdout (`a2acp prompts | head`) ends the output, not the process with a
    // panic.
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&resp.data).unwrap_or_default()
        );
    } else {
        // Threads, memory and prompts quote what peers wrote: no control, escape or
        // invisible character reaches the terminal (SPEC-NOTES "Prompts and peer text on
        // screen").
        let text = render(&resp);
        let _ = writeln!(out, "{}", a2acp_core::display::lines(&text, usize::MAX));
    }
    Ok(ExitCode::SUCCESS)
}
