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
use clap::Parser;

mod cli;
use cli::*;

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
        Cmd::RelayKey(k) => {
            println!("{}", k.run()?);
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
    read_object("--context", arg)
}

/// A flag's JSON object: inline (starting with `{`) or the path of a file holding one.
fn read_object(
    flag: &str,
    arg: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let (text, what) = if arg.trim_start().starts_with('{') {
        (arg.to_string(), format!("{flag} (inline JSON)"))
    } else {
        let text = std::fs::read_to_string(arg).map_err(|e| {
            format!("{flag} {arg}: {e} (give a path to a JSON file, e.g. examples/dinner.json, or a JSON object inline)")
        })?;
        (text, format!("{flag} {arg}"))
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(format!(
            "{what}: must be a JSON object ({{\"field\": value, …}})"
        )),
        Err(e) => Err(format!("{what}: not JSON: {e}")),
    }
}

fn no_agent(home: &Home) -> String {
    format!(
        "no agent in {} (create one with `a2acp agent init … --home DIR`)",
        home.dir().display()
    )
}

/// The Phase-1 id of the agent of `home`, if it has an identity key.
fn phase1_own_id(home: &Home) -> Result<Option<a2acp_core::a2a::envelope::Uuid>, String> {
    if !home.key().exists() {
        return Ok(None);
    }
    let key = a2acp_runtime::keys::load(&home.key()).map_err(|e| e.to_string())?;
    Ok(Some(a2acp_core::a2a::envelope::agent_id_of(
        &key.public().to_bytes(),
    )))
}

/// `a2acp phase1 send`: one message, the seed's retries, each attempt on stderr, the
/// receiver's answer on stdout.
async fn phase1_send(
    home: &Home,
    url: String,
    to: &str,
    kind: &str,
    payload: &str,
    from: Option<&str>,
    token: Option<String>,
) -> Result<ExitCode, String> {
    use a2acp_core::a2a::envelope::Uuid;
    use a2acp_core::a2a::sender::{self, Event, Outcome, Sender, SenderConfig};
    use a2acp_runtime::phase1_sender::{self, Progress, SendOptions};
    let v4 = |flag: &str, s: &str| -> Result<Uuid, String> {
        a2acp_core::a2a::envelope::uuid_v4_of(s)
            .ok_or_else(|| format!("{flag} `{s}` is not a UUID v4 (8-4-4-4-12 hex digits)"))
    };
    let to = v4("--to", to)?;
    sender::endpoint(&url).map_err(|e| e.to_string())?;
    let payload = serde_json::Value::Object(read_object("--payload", payload)?);
    let seed = a2acp_runtime::os_seed().map_err(|e| e.to_string())?;
    let mut rng = a2acp_core::rng::DetRng::from_seed(seed);
    let (from, random) = match from {
        Some(f) => (v4("--from", f)?, false),
        None => match phase1_own_id(home)? {
            Some(id) => (id, false),
            None => (sender::message_id(&mut rng), true),
        },
    };
    let now = a2acp_runtime::now();
    let message = sender::compose(kind, payload, from, to, sender::message_id(&mut rng), now)
        .map_err(|e| format!("this message would be refused: {e}"))?;
    let s = Sender::new(&message, now, SenderConfig::default())
        .map_err(|e| format!("this message would be refused: {e}"))?;
    if random {
        eprintln!(
            "from: {from} (a random id: no agent in {})",
            home.dir().display()
        );
    }
    eprintln!(
        "sending {} {} from {from} to {to}",
        message.payload.type_name(),
        message.message_id
    );
    let opts = SendOptions { token };
    let outcome = tokio::task::spawn_blocking(move || {
        phase1_sender::send(&url, s, &opts, |p| match p {
            Progress::Attempt {
                attempt,
                ack_deadline,
            } => eprintln!(
                "attempt {attempt}: POST, waiting up to {} s for the acknowledgement",
                ack_deadline.as_secs_f64()
            ),
            Progress::Event(Event::AttemptFailed {
                attempt,
                failure,
                retry_in,
            }) => match retry_in {
                Some(w) => eprintln!(
                    "attempt {attempt} failed: {failure}; next attempt in {} s",
                    w.as_secs_f64()
                ),
                None => eprintln!("attempt {attempt} failed: {failure}"),
            },
        })
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    use std::io::Write;
    let answer = match &outcome {
        Outcome::Acknowledged { answer, .. } => answer.as_deref(),
        Outcome::Refused { answer, .. } => Some(&**answer),
        _ => None,
    };
    if let Some(a) = answer {
        let _ = writeln!(
            std::io::stdout().lock(),
            "{}",
            serde_json::to_string_pretty(&a.to_json()).unwrap_or_default()
        );
    }
    eprintln!("{outcome}");
    Ok(match outcome {
        Outcome::Acknowledged { .. } => ExitCode::SUCCESS,
        Outcome::Refused { .. } => ExitCode::from(2),
        Outcome::GaveUp { .. } => ExitCode::from(3),
        Outcome::Failed { .. } => ExitCode::from(4),
    })
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
                        _ if r.data["declined"].is_string() => format!(
                            "no agent is registered at the relay as your recipient: thread {} is declined and goes on as thread {id} with its A2A agent {} (your config's a2a_cards; follow it with `a2acp threads`)",
                            r.data["declined"].as_str().unwrap_or("?"),
                            r.data["peer"].as_str().unwrap_or("?")
                        ),
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
