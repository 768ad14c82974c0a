//! `a2acp`: run a relay, run your agent, talk to it, watch the demo, benchmark the relay.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use a2acp_runtime::cli::{init_tracing, prepare_agent_run, RelayArgs, RunArgs};
use a2acp_runtime::home::Home;
use a2acp_tokio::agent::{self};
use clap::Parser;

mod agent_init;
mod agent_recovery;
mod cli;
mod client;
mod phase1;

use agent_init::{agent_init, InitOutput, RelayTarget};
use cli::*;
use client::{client, no_agent};
use phase1::{phase1_own_id, phase1_send};

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
        Cmd::DevCa(d) => {
            println!("{}", d.run()?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Agent(AgentCmd::Init {
            address,
            relay,
            ca,
            name,
            timezone,
            profile,
            offline,
            no_recovery,
            no_qr,
            json,
        }) => {
            // What goes wrong is said by `agent init` itself (refusal, relay unreachable).
            init_tracing("error", None);
            let mut onboarded = None;
            let relay = match relay.is_empty() {
                true => None,
                false => Some(
                    a2acp_runtime::config::RelayUrls::new(relay)
                        .map_err(|e| format!("--relay: {e}"))?,
                ),
            };
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
            let relay = RelayTarget { urls: relay, ca };
            let out = InitOutput {
                recovery: !no_recovery,
                qr: !no_qr,
                json,
            };
            agent_init(
                &home, &address, &relay, name, timezone, profile, offline, onboarded, out,
            )
            .await
        }
        Cmd::Agent(AgentCmd::RecoveryKey { no_qr, json }) => {
            agent_recovery::recovery_key(&home, !no_qr, json).await
        }
        Cmd::Agent(AgentCmd::Recover {
            address,
            recovery,
            relay,
            ca,
            json,
        }) => {
            init_tracing("error", None);
            agent_recovery::recover(&home, &address, recovery, relay, ca.as_deref(), json).await
        }
        Cmd::Agent(AgentCmd::Run(a)) => agent_run(&home, &a).await,
        Cmd::Agent(AgentCmd::Backup {
            out,
            passphrase_file,
        }) => {
            use a2acp_runtime::backup;
            let p = backup::passphrase(passphrase_file.as_deref(), true)?;
            let bytes = match backup::backup(&home, &out, &p) {
                Err(backup::BackupError::Running(_)) => {
                    // The running agent copies its own database.
                    let name = format!(".agent.db.backup-{}", std::process::id());
                    let r = agent::control_request(
                        &home.socket(),
                        &a2acp_runtime::control::Request::Snapshot { name: name.clone() },
                    )
                    .await
                    .map_err(|e| {
                        format!("the agent runs but its control socket does not answer: {e}")
                    })?;
                    if !r.ok {
                        return Err(r.error.unwrap_or_else(|| "snapshot refused".into()));
                    }
                    let snap = home.dir().join(&name);
                    let done = backup::backup_with(
                        &home,
                        &out,
                        &p,
                        (backup::M_COST, backup::T_COST, backup::P_COST),
                        Some(&snap),
                    );
                    let _ = std::fs::remove_file(&snap);
                    done.map_err(|e| e.to_string())?
                }
                other => other.map_err(|e| e.to_string())?,
            };
            println!(
                "Backup of {} written to {} ({bytes} bytes, encrypted). Keep the passphrase: without it the backup cannot be opened.",
                home.dir().display(),
                out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Agent(AgentCmd::Restore {
            file,
            passphrase_file,
        }) => {
            let p = a2acp_runtime::backup::passphrase(passphrase_file.as_deref(), false)?;
            let n =
                a2acp_runtime::backup::restore(&file, &p, home.dir()).map_err(|e| e.to_string())?;
            println!(
                "Restored {n} files into {}. Run `a2acp --home {} agent run`: every thread goes on from where the backup left it, and the other device, if it comes back, is replaced at the relay.",
                home.dir().display(),
                home.dir().display()
            );
            Ok(ExitCode::SUCCESS)
        }
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
        Cmd::Mcp {
            host_answers,
            listen,
            token_file,
        } => {
            // stdout carries the protocol (stdio) or the endpoint (HTTP): logs go to stderr.
            init_tracing("warn", None);
            let bridge = a2acp_tokio::mcp::McpOptions {
                socket: home.socket(),
                host_answers,
            };
            let Some(listen) = listen else {
                a2acp_tokio::mcp::serve_stdio(bridge).await?;
                return Ok(ExitCode::SUCCESS);
            };
            let token = token_file
                .map(|f| a2acp_runtime::a2a::read_token(&f))
                .transpose()?;
            let listener = a2acp_tokio::mcp_http::bind(&listen, token.as_deref())?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            println!(
                "MCP over streamable HTTP at {}",
                a2acp_tokio::mcp_http::endpoint(addr)
            );
            a2acp_tokio::mcp_http::serve(
                listener,
                a2acp_tokio::mcp_http::McpHttpOptions {
                    bridge,
                    token,
                    limits: Default::default(),
                },
            )
            .await;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Phase1(Phase1Cmd::Id) => {
            println!("{}", phase1_own_id(&home)?.ok_or_else(|| no_agent(&home))?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Phase1(Phase1Cmd::Send {
            url,
            to,
            kind,
            payload,
            from,
            token_file,
        }) => {
            let token = token_file
                .map(|f| a2acp_runtime::a2a::read_token(&f))
                .transpose()?;
            phase1_send(&home, url, &to, &kind, &payload, from.as_deref(), token).await
        }
        Cmd::Bench(BenchCmd::Forwarder(a)) => {
            a2acp_tokio::bench::forwarder(a)
                .await
                .map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench(BenchCmd::Attack(a)) => {
            init_tracing("warn", None);
            a2acp_tokio::bench::attack::run(a).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench(BenchCmd::Cluster(a)) => {
            init_tracing("warn", None);
            a2acp_tokio::bench::cluster::run(a).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench(BenchCmd::Federation(a)) => {
            init_tracing("warn", None);
            a2acp_tokio::bench::federation::run(a).await?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Bench(BenchCmd::Relay(a)) => {
            init_tracing("warn", None);
            a2acp_tokio::bench::run(a)
                .await
                .map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Audit {
            cmd: Some(AuditCmd::Verify { json }),
            ..
        } => {
            let dir = home.dir().join(a2acp_runtime::audit_log::DIR);
            let (text, intact) = a2acp_runtime::audit_log::check(&dir, json);
            println!("{text}");
            Ok(if intact {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Cmd::Audit {
            cmd: None,
            peer,
            thread,
            month,
            direction,
            json,
        } => {
            let dir = home.dir().join(a2acp_runtime::audit_log::DIR);
            let filter = a2acp_runtime::audit_log::Filter {
                peer,
                thread,
                month,
                direction,
            };
            let text =
                a2acp_runtime::audit_log::show(&dir, &filter, json).map_err(|e| e.to_string())?;
            println!("{text}");
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
