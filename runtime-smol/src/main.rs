//! `a2acp-smol`: the a2acp relay and agent daemon on smol, with the same `relay` and
//! `agent run` flags as `a2acp` (tokio). Create an agent and talk to it with `a2acp`:
//! both binaries share the same home, database and control socket.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use a2acp_runtime::cli::{
    init_tracing, prepare_agent_run, RelayArgs, RelayKeyCmd, RelayStatusArgs, RunArgs,
};
use a2acp_runtime::home::Home;
use async_signal::{Signal, Signals};
use clap::{Parser, Subcommand};
use smol::stream::StreamExt;

#[derive(Parser)]
#[command(
    name = "a2acp-smol",
    version,
    about = "a2acp on the smol executor: run a relay or your agent",
    long_about = "a2acp on the smol executor: run a relay or your agent (the same flags, files and \
behaviour as the tokio binary `a2acp`).\n\n\
Run a relay:       a2acp-smol relay --listen 127.0.0.1:7447 --domain localhost --data ./relay-data\n\
Create an agent:   a2acp agent init --address agent:alice@localhost --relay ws://127.0.0.1:7447 --home ./alice\n\
Run it:            a2acp-smol agent run --home ./alice\n\
Talk to it:        a2acp --home ./alice threads\n\n\
Every command on a home — agent init, backup, restore, recover, recovery-key, keys rotate, \
receipts, answer — is `a2acp`'s: it works on an agent that a2acp-smol runs.\n\n\
--home defaults to $A2ACP_HOME, else ~/.local/share/a2acp. Executor threads: $SMOL_THREADS \
(default: one per core)."
)]
struct Cli {
    /// The agent's directory (config.toml, identity.key, agent.db, agent.sock).
    #[arg(long, global = true)]
    home: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per process: the size of the relay's flags does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Run a relay: registry and offline queue in SQLite, /healthz and /metrics on the same port.
    Relay(RelayArgs),
    /// The federating relay's signing key: show it, or rotate it (the old key signs the new).
    #[command(subcommand)]
    RelayKey(RelayKeyCmd),
    /// A running relay's figures: connections, queues, refusals and each federated
    /// domain's links, queue, traffic and reputation (read from its /metrics).
    RelayStatus(RelayStatusArgs),
    /// Run your agent (create it with `a2acp agent init`).
    #[command(subcommand)]
    Agent(AgentCmd),
}

#[derive(Subcommand)]
enum AgentCmd {
    /// Run the agent: connect, keep threads going, show prompts, serve the control socket.
    Run(RunArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // smol's global executor runs on $SMOL_THREADS threads, read when the first task is
    // spawned; default to one per core as tokio's multi-threaded runtime does. Nothing
    // else runs yet, so setting the variable races with no other thread.
    if std::env::var_os("SMOL_THREADS").is_none() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        std::env::set_var("SMOL_THREADS", n.to_string());
    }
    match smol::block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Ctrl-C or SIGTERM (or never, if signals cannot be watched).
async fn shutdown_signal() {
    match Signals::new([Signal::Int, Signal::Term]) {
        Ok(mut s) => {
            let _ = s.next().await;
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch for Ctrl-C and SIGTERM");
            std::future::pending::<()>().await;
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode, String> {
    let home = Home::resolve(cli.home.as_deref());
    match cli.cmd {
        Cmd::Relay(a) => {
            init_tracing("info", None);
            // One descriptor per connection: the hard limit, not the soft one, is the
            // relay's budget (the connection caps follow from it).
            a2acp_runtime::admission::raise_fd_limit(None);
            run_relay(a).await
        }
        Cmd::RelayKey(k) => {
            println!("{}", k.run()?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::RelayStatus(s) => {
            println!("{}", s.run()?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Agent(AgentCmd::Run(a)) => agent_run(&home, &a).await,
    }
}

async fn run_relay(a: RelayArgs) -> Result<ExitCode, String> {
    let cfg = a.service_config()?;
    let tls = a.server_tls()?;
    let mut relay = a2acp_smol::relay::start_with(&a.listen, cfg, a.admission_config(), tls)
        .await
        .map_err(|e| e.to_string())?;
    println!("{}", a.banner(&relay.url()));
    let failed = async { Some(relay.wait_failed().await) };
    let signal = async {
        shutdown_signal().await;
        None
    };
    match smol::future::or(signal, failed).await {
        None => {
            tracing::info!("shutting down");
            relay.stop(true).await.map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Some(r) => {
            r.map_err(|e| e.to_string())?;
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn agent_run(home: &Home, a: &RunArgs) -> Result<ExitCode, String> {
    if a.a2a_listen.is_some() {
        return Err(
            "--a2a-listen is served by the tokio agent (`a2acp agent run`), not by a2acp-smol"
                .into(),
        );
    }
    if a.agentic_listen.is_some() {
        return Err(
            "--agentic-listen is served by the tokio agent (`a2acp agent run`), not by a2acp-smol"
                .into(),
        );
    }
    let ready = prepare_agent_run(home, a)?;
    let h = a2acp_smol::agent::spawn(ready.host, ready.effects, ready.options)
        .map_err(|e| e.to_string())?;
    let ended = async {
        while !h.is_finished() {
            a2acp_smol::sleep(Duration::from_millis(200)).await;
        }
    };
    smol::future::or(shutdown_signal(), ended).await;
    h.stop().await.map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}
