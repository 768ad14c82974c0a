//! `a2acp demo`: the spec's dinner (§4–§9) over real sockets in one process — a relay on
//! a free loopback port, Alice's and Bob's agents each with its own SQLite file in a
//! temporary directory, prompts answered by a scripted user (or by the person at the
//! terminal for Alice with `--interactive`), the transcript printed as it happens and a
//! summary at the end. `a2acp demo --group` ([`run_group`]): the spec's game night for
//! four (§10.2), a group thread Alice's agent coordinates with three others.

use std::time::Duration;

use a2acp_core::relay::RelayConfig;
use a2acp_runtime::agent_host::{AgentHost, Effect, HostError, Workers};
use a2acp_runtime::control::{GroupDetail, Request, StatusInfo, ThreadSummary};
use a2acp_runtime::llm::LlmClient;
use a2acp_runtime::relay_service::ServiceConfig;
use a2acp_runtime::scripted::{dinner_configs, next_friday, start_dinner, ScriptedUser};
use a2acp_runtime::store::{Durability, Store};
use tokio::sync::broadcast;

use crate::agent::{AgentError, AgentEvent, AgentHandle, RunOptions};
use crate::relay::RelayError;

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Alice's prompts are answered at the terminal.
    pub interactive: bool,
    /// Print the transcript and the summary.
    pub print: bool,
    /// Give up after this long (not in interactive mode).
    pub timeout: Duration,
    /// Both agents decide with this language model (`a2acp demo --llm URL`) instead of
    /// the deterministic negotiator (SPEC-NOTES "The LLM layer (§5)").
    pub llm: Option<a2acp_runtime::llm::LlmConfig>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            interactive: false,
            print: true,
            timeout: Duration::from_secs(60),
            llm: None,
        }
    }
}

/// What the demo did.
#[derive(Debug, Clone)]
pub struct DemoSummary {
    /// Alice's and Bob's view of the thread.
    pub threads: Vec<(String, ThreadSummary)>,
    /// Prompts shown to Alice and to Bob.
    pub prompts_shown: (u64, u64),
    /// Packets the relay routed.
    pub routed: u64,
    /// Wall time from the first packet to the end.
    pub elapsed: Duration,
    /// Both sides completed.
    pub completed: bool,
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Files.
    #[error("temporary directory: {0}")]
    Io(#[from] std::io::Error),
    /// The relay.
    #[error(transparent)]
    Relay(#[from] RelayError),
    /// An agent.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// An agent's host.
    #[error(transparent)]
    Host(#[from] HostError),
    /// Something else.
    #[error("{0}")]
    Other(String),
}

fn count_prompts(rx: &mut broadcast::Receiver<AgentEvent>, n: &mut u64) {
    while let Ok(e) = rx.try_recv() {
        if let AgentEvent::Effect(Effect::Prompt(_)) = e {
            *n += 1;
        }
    }
}

/// Waits until every agent is authenticated with the relay (10 s at most).
async fn wait_online(handles: &[AgentHandle]) -> Result<(), DemoError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for h in handles {
        while !status(h).await?.online {
            if tokio::time::Instant::now() > deadline {
                return Err(DemoError::Other(
                    "the agents could not authenticate with the relay within 10 s".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

async fn status(h: &AgentHandle) -> Result<StatusInfo, DemoError> {
    let r = h.request(Request::Status).await?;
    serde_json::from_value(r.data).map_err(|e| DemoError::Other(e.to_string()))
}

async fn threads(h: &AgentHandle) -> Result<Vec<ThreadSummary>, DemoError> {
    let r = h.request(Request::Threads).await?;
    serde_json::from_value(r.data).map_err(|e| DemoError::Other(e.to_string()))
}

/// Runs the demo.
pub async fn run(opts: DemoOptions) -> Result<DemoSummary, DemoError> {
    let dir = tempfile::Builder::new().prefix("a2acp-demo-").tempdir()?;
    let started = std::time::Instant::now();
    let relay = crate::relay::start(
        "127.0.0.1:0",
        ServiceConfig {
            relay: RelayConfig::default(),
            data: Some(dir.path().join("relay")),
            durability: Durability::Full,
            ..ServiceConfig::default()
        },
    )
    .await?;
    let domain = RelayConfig::default().domain;
    let (alice_cfg, bob_cfg) =
        dinner_configs(&domain).map_err(|e| DemoError::Other(e.to_string()))?;
    let bob_addr = bob_cfg.address.clone();
    if opts.print {
        println!(
            "a2acp demo — relay on {} (domain {domain}), data in {}\n\
             Alice asks her agent to set up dinner with Bob; Bob pre-authorised his availability,\n\
             dietary needs and area for Alice. {}\n\
             # time  who   > sent, < received, | state change or local event",
            relay.url(),
            dir.path().display(),
            if opts.interactive {
                "You answer Alice's prompts (one key per choice); Bob is scripted."
            } else {
                "A scripted user answers: Alice shares how she travels, keeps her cuisine preference, both confirm."
            }
        );
    }
    let mut term = None;
    if opts.interactive {
        term = Some(crate::term::Term::start()?);
    }
    let mut handles = Vec::new();
    let mut prompt_rx = Vec::new();
    if let (true, Some(l)) = (opts.print, &opts.llm) {
        println!(
            "#       Both agents decide with the model {} at {} (LLM decision lines below).",
            l.model.as_deref().unwrap_or("(per tier)"),
            l.base_url
        );
    }
    for (name, mut cfg) in [("alice", alice_cfg), ("bob", bob_cfg)] {
        let home = dir.path().join(name);
        std::fs::create_dir_all(&home)?;
        let identity = a2acp_runtime::keys::create(&home.join("identity.key"))
            .map_err(|e| DemoError::Other(e.to_string()))?;
        let store =
            Store::open(&home.join("agent.db"), Durability::Full).map_err(HostError::from)?;
        let workers = match &opts.llm {
            Some(l) => {
                l.check().map_err(DemoError::Other)?;
                cfg.use_llm = true;
                Workers {
                    llm: Some(LlmClient::new(l.clone())),
                    ..Workers::default()
                }
            }
            None => Workers::default(),
        };
        let (host, first, _) =
            AgentHost::start_with(cfg, identity, store, a2acp_runtime::now(), workers)?;
        let mut o = RunOptions::new(relay.url(), name);
        o.transcript = opts.print;
        o.started = Some(started);
        if name == "alice" && opts.interactive {
            o.terminal = term.clone();
        } else {
            o.auto = Some(ScriptedUser::dinner());
        }
        let h = crate::agent::spawn(host, first, o)?;
        prompt_rx.push(h.subscribe());
        handles.push(h);
    }
    wait_online(&handles).await?;
    let t0 = tokio::time::Instant::now();
    handles[0]
        .command(start_dinner(bob_addr, &next_friday(a2acp_runtime::now())))
        .await?;
    let end = t0 + opts.timeout;
    let mut shown = [0u64; 2];
    let mut done = false;
    let mut last = Vec::new();
    loop {
        for (i, rx) in prompt_rx.iter_mut().enumerate() {
            count_prompts(rx, &mut shown[i]);
        }
        last.clear();
        for (h, name) in handles.iter().zip(["alice", "bob"]) {
            for t in threads(h).await? {
                last.push((name.to_string(), t));
            }
        }
        let terminal = |s: &str| matches!(s, "COMPLETED" | "DECLINED" | "EXPIRED");
        if last.len() >= 2 && last.iter().all(|(_, t)| terminal(&t.state)) {
            done = true;
            break;
        }
        if handles.iter().any(|h| h.is_finished()) {
            break;
        }
        if !opts.interactive && tokio::time::Instant::now() > end {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = t0.elapsed();
    tokio::time::sleep(Duration::from_millis(50)).await;
    for (i, rx) in prompt_rx.iter_mut().enumerate() {
        count_prompts(rx, &mut shown[i]);
    }
    let routed = relay
        .snapshot()
        .await
        .map(|s| s.stats.routed_total)
        .unwrap_or(0);
    for h in handles {
        h.stop().await?;
    }
    drop(term);
    relay
        .stop(true)
        .await
        .map_err(|e| DemoError::Other(e.to_string()))?;
    let completed = done && last.iter().all(|(_, t)| t.state == "COMPLETED");
    let summary = DemoSummary {
        threads: last,
        prompts_shown: (shown[0], shown[1]),
        routed,
        elapsed,
        completed,
    };
    if opts.print {
        println!("\n── Summary");
        for (who, t) in &summary.threads {
            println!(
                "   {who:<5} thread {} with {}: {} after {} round trips, {} packets",
                t.id, t.peer, t.state, t.round_trips, t.packets
            );
        }
        println!(
            "   prompts shown: Alice {}, Bob {}\n   packets routed by the relay: {}\n   time from first packet to completion: {} ms\n   {}",
            summary.prompts_shown.0,
            summary.prompts_shown.1,
            summary.routed,
            summary.elapsed.as_millis(),
            if summary.completed {
                "dinner is booked on both sides."
            } else {
                "the negotiation did not complete."
            }
        );
    }
    Ok(summary)
}

/// What the group demo did.
#[derive(Debug, Clone)]
pub struct GroupDemoSummary {
    /// The group as Alice's agent shows it (`thread show grp_…`), once it ended.
    pub group: Option<GroupDetail>,
    /// Every agent's threads: Alice's legs, each participant's leg.
    pub threads: Vec<(String, ThreadSummary)>,
    /// Prompts shown to Alice, Bob, Charlie and Diana.
    pub prompts_shown: [u64; 4],
    /// Packets the relay routed.
    pub routed: u64,
    /// Wall time from the first packet to the end.
    pub elapsed: Duration,
    /// Every leg completed, on both of its sides.
    pub completed: bool,
}

/// The names of the game night's people, in the order of their agents.
const GAME_NIGHT: [&str; 4] = ["alice", "bob", "charlie", "diana"];

/// Runs the group demo: the spec's game night for four (§10.2) — a relay on a free
/// loopback port, Alice's, Bob's, Charlie's and Diana's agents each with its own SQLite
/// file, Alice's agent coordinating a group thread with the three others on the coming
/// weekend, scripted users (each shares what its agent knows and confirms; Alice's
/// prompts at the terminal with `interactive`), the transcript as it happens and the
/// outcome at the end.
pub async fn run_group(opts: DemoOptions) -> Result<GroupDemoSummary, DemoError> {
    use a2acp_runtime::scripted::game_night::{self, Weekend};
    let dir = tempfile::Builder::new()
        .prefix("a2acp-demo-group-")
        .tempdir()?;
    let started = std::time::Instant::now();
    let relay = crate::relay::start(
        "127.0.0.1:0",
        ServiceConfig {
            relay: RelayConfig::default(),
            data: Some(dir.path().join("relay")),
            durability: Durability::Full,
            ..ServiceConfig::default()
        },
    )
    .await?;
    let domain = RelayConfig::default().domain;
    let weekend = Weekend::after(a2acp_runtime::now());
    let other = |e: a2acp_core::address::AddressError| DemoError::Other(e.to_string());
    let configs = [
        game_night::alice(&domain).map_err(other)?,
        game_night::bob(&domain, &weekend).map_err(other)?,
        game_night::charlie(&domain, &weekend).map_err(other)?,
        game_night::diana(&domain, &weekend, true).map_err(other)?,
    ];
    let participants: Vec<a2acp_core::Address> =
        configs[1..].iter().map(|c| c.address.clone()).collect();
    if opts.print {
        println!(
            "a2acp demo --group — relay on {} (domain {domain}), data in {}\n\
             Alice asks her agent to set up a game night for four on the weekend of {} with Bob\n\
             (New York), Charlie (Berlin) and Diana (London): a group thread, one leg per participant,\n\
             Alice's agent coordinating. {}\n\
             # time  who     > sent, < received, | state change or local event",
            relay.url(),
            dir.path().display(),
            weekend.friday,
            if opts.interactive {
                "You answer Alice's prompt for the group (one key per choice); the others are scripted."
            } else {
                "Scripted users: each shares what their agent knows that is asked, and everyone confirms."
            }
        );
    }
    let mut term = None;
    if opts.interactive {
        term = Some(crate::term::Term::start()?);
    }
    let mut handles = Vec::new();
    let mut prompt_rx = Vec::new();
    for (name, cfg) in GAME_NIGHT.into_iter().zip(configs) {
        let home = dir.path().join(name);
        std::fs::create_dir_all(&home)?;
        let identity = a2acp_runtime::keys::create(&home.join("identity.key"))
            .map_err(|e| DemoError::Other(e.to_string()))?;
        let store =
            Store::open(&home.join("agent.db"), Durability::Full).map_err(HostError::from)?;
        let (host, first, _) = AgentHost::start(cfg, identity, store, a2acp_runtime::now())?;
        // Transcript lines pad names to five characters; "charlie" needs seven.
        let mut o = RunOptions::new(relay.url(), &format!("{name:<7}"));
        o.transcript = opts.print;
        o.started = Some(started);
        if name == "alice" && opts.interactive {
            o.terminal = term.clone();
        } else {
            o.auto = Some(ScriptedUser::game_night());
        }
        let h = crate::agent::spawn(host, first, o)?;
        prompt_rx.push(h.subscribe());
        handles.push(h);
    }
    wait_online(&handles).await?;
    let t0 = tokio::time::Instant::now();
    handles[0]
        .command(game_night::start(participants, &weekend, None))
        .await?;
    let end = t0 + opts.timeout;
    let mut shown = [0u64; 4];
    let mut done = false;
    let mut last = Vec::new();
    let terminal = |s: &str| matches!(s, "COMPLETED" | "DECLINED" | "EXPIRED");
    loop {
        for (i, rx) in prompt_rx.iter_mut().enumerate() {
            count_prompts(rx, &mut shown[i]);
        }
        last.clear();
        for (h, name) in handles.iter().zip(GAME_NIGHT) {
            for t in threads(h).await? {
                last.push((name.to_string(), t));
            }
        }
        // Alice's three legs and one leg at each participant.
        let legs = last.iter().filter(|(_, t)| !t.is_group()).count();
        if legs >= 6 && last.iter().all(|(_, t)| terminal(&t.state)) {
            done = true;
            break;
        }
        if handles.iter().any(|h| h.is_finished()) {
            break;
        }
        if !opts.interactive && tokio::time::Instant::now() > end {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = t0.elapsed();
    tokio::time::sleep(Duration::from_millis(50)).await;
    for (i, rx) in prompt_rx.iter_mut().enumerate() {
        count_prompts(rx, &mut shown[i]);
    }
    let group = match last.iter().find(|(_, t)| t.is_group()) {
        Some((_, g)) => {
            let r = handles[0]
                .request(Request::Thread { id: g.id.clone() })
                .await?;
            serde_json::from_value::<GroupDetail>(r.data).ok()
        }
        None => None,
    };
    let routed = relay
        .snapshot()
        .await
        .map(|s| s.stats.routed_total)
        .unwrap_or(0);
    for h in handles {
        h.stop().await?;
    }
    drop(term);
    relay
        .stop(true)
        .await
        .map_err(|e| DemoError::Other(e.to_string()))?;
    let completed = done && last.iter().all(|(_, t)| t.state == "COMPLETED");
    let summary = GroupDemoSummary {
        group,
        threads: last,
        prompts_shown: shown,
        routed,
        elapsed,
        completed,
    };
    if opts.print {
        print_group_summary(&summary);
    }
    Ok(summary)
}

fn print_group_summary(s: &GroupDemoSummary) {
    println!("\n── Outcome");
    if let Some(g) = &s.group {
        let text = a2acp_runtime::control::render_group(g);
        for l in a2acp_core::display::lines(&text, usize::MAX).lines() {
            println!("   {l}");
        }
    }
    println!("\n── Every side");
    for (who, t) in s.threads.iter().filter(|(_, t)| !t.is_group()) {
        println!(
            "   {who:<7} thread {} with {}: {} after {} round trips, {} packets",
            t.id, t.peer, t.state, t.round_trips, t.packets
        );
    }
    println!(
        "   prompts shown: {}\n   packets routed by the relay: {}\n   time from first packet to completion: {} ms\n   {}",
        GAME_NIGHT
            .iter()
            .zip(s.prompts_shown)
            .map(|(n, k)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", "),
        s.routed,
        s.elapsed.as_millis(),
        if s.completed {
            "game night is on for all four: every leg completed on both sides."
        } else {
            "the group thread did not complete."
        }
    );
}
