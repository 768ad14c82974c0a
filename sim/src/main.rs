//! The `a2acp-sim` command line: run a scenario, run a swarm, list scenarios, bench.
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use a2acp_sim::scenario::{self, SHIPPED};
use a2acp_sim::swarm::{self, Params};
use a2acp_sim::world::{Sim, Stopwatch};
use a2acp_sim::{html, SimError};
use clap::{Parser, Subcommand};

/// The binary's allocator: mimalloc instead of the system malloc, 3–9 % less CPU per
/// simulated event with the same results (docs/simulator.md, "Figures"). The binary only: the
/// library leaves the choice to embedders.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Deterministic simulator for a2acp: seeded faults, user and LLM models, invariant checkers.
#[derive(Parser)]
#[command(name = "a2acp-sim", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one scenario (a shipped name, a TOML file, or `swarm`) and print its transcript.
    Run {
        /// Shipped scenario name, path to a TOML file, `swarm` (a world drawn from the
        /// seed), or `relationship` (`--threads` dinners between the same two people).
        scenario: String,
        /// The seed: same scenario and seed, same run, byte for byte.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Write a self-contained HTML page with the sequence diagram.
        #[arg(long, value_name = "FILE")]
        html: Option<String>,
        /// For `swarm`: agents.
        #[arg(long, default_value_t = 4)]
        agents: usize,
        /// For `swarm`: threads.
        #[arg(long, default_value_t = 6)]
        threads: usize,
        /// For `swarm`: no faults.
        #[arg(long)]
        no_faults: bool,
        /// For `swarm`: calm users and an in-order network (see `swarm --calm`).
        #[arg(long)]
        calm: bool,
        /// For `swarm`: devices are shut for at most an hour.
        #[arg(long)]
        short_offline: bool,
        /// For `swarm`: group threads too (see `swarm --groups`).
        #[arg(long)]
        groups: bool,
        /// For `swarm`: shared context spaces too (see `swarm --spaces`).
        #[arg(long)]
        spaces: bool,
        /// For `swarm`: domains, one federating relay each (see `swarm --domains`).
        #[arg(long, default_value_t = 1)]
        domains: usize,
        /// For `swarm`: key rotations too (see `swarm --rotations`).
        #[arg(long)]
        rotations: bool,
        /// For `swarm`: usage rules and retractions too (see `swarm --consent`).
        #[arg(long)]
        consent: bool,
        /// Print only the result line and violations.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Run many seeded worlds (every fault drawn from the seed) and check every invariant.
    Swarm {
        /// Seeds: `A..B` (B excluded), `A..=B`, or one seed.
        #[arg(long, default_value = "0..100")]
        seeds: String,
        /// Agents per world.
        #[arg(long, default_value_t = 4)]
        agents: usize,
        /// Threads per world.
        #[arg(long, default_value_t = 6)]
        threads: usize,
        /// No faults (clean network, no crashes).
        #[arg(long)]
        no_faults: bool,
        /// Calm users (approve and confirm everything, no cancellations) and no frame
        /// reordering; every other fault stays.
        #[arg(long)]
        calm: bool,
        /// Devices are shut for at most an hour (shorter simulated spans).
        #[arg(long)]
        short_offline: bool,
        /// Group threads too: 60 % of worlds (drawn from a stream of their own, so the
        /// others are exactly the two-party worlds) get one or two groups of 2–8 agents.
        #[arg(long)]
        groups: bool,
        /// Shared context spaces too: half of the worlds (drawn from a stream of their
        /// own, so the others are exactly the worlds without the flag) get one or two
        /// spaces among their agents and writes to them.
        #[arg(long)]
        spaces: bool,
        /// Domains: 1, one relay; more, one federating relay per domain (`a.example`,
        /// `b.example`, …), agent `i` on domain `i mod N`, threads and groups mixing
        /// same-domain and cross-domain peers, faults between relays drawn from a stream of
        /// their own (link drops, partitions between two relays, relay crashes, some in the
        /// middle of a hand-over).
        #[arg(long, default_value_t = 1)]
        domains: usize,
        /// Key rotations too (drawn from a stream of their own, so the worlds are
        /// otherwise unchanged): each group's coordinator, and a quarter of the two-party
        /// threads' initiators, run `keys rotate` in the middle of their thread; prints the
        /// simulated time from each rotation to every peer re-pinned (median, worst).
        #[arg(long)]
        rotations: bool,
        /// Usage rules and retractions too (drawn from a stream of their own, so the
        /// worlds are otherwise unchanged): half of the agents set rules on one or two
        /// fields, and in a third of the two-party threads one side takes back what it
        /// shared.
        #[arg(long)]
        consent: bool,
        /// Hide the progress bar.
        #[arg(long)]
        no_progress: bool,
    },
    /// §11.2: relationship memory at work — the same two people coordinate dinner again
    /// and again; packets and prompts to the resolution of each dinner, over many worlds.
    Relationship {
        /// Seeds: `A..B` (B excluded), `A..=B`, or one seed.
        #[arg(long, default_value = "0..1000")]
        seeds: String,
        /// Dinners per world.
        #[arg(long, default_value_t = 14)]
        dinners: usize,
    },
    /// List the shipped scenarios.
    List,
    /// Measure the simulator: events/s, sim-to-wall ratio, overhead, a large swarm, and
    /// round trips and prompts per thread against §11.2.
    Bench {
        /// Agents of the large swarm.
        #[arg(long, default_value_t = 1000)]
        agents: usize,
        /// Threads of the large swarm.
        #[arg(long, default_value_t = 10_000)]
        threads: usize,
        /// Seed of the large swarm.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Game-night worlds per group size (3, 4, 6 and 8 agents).
        #[arg(long, default_value_t = 1000)]
        game_nights: u64,
        /// Seeds of the two-party and group swarms compared in events per CPU-second.
        #[arg(long, default_value_t = 300)]
        swarm_seeds: u64,
        /// Only the group figures (game nights and the swarm comparison).
        #[arg(long)]
        groups_only: bool,
    },
}

struct Wall(Instant);

impl Stopwatch for Wall {
    fn nanos(&mut self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli.cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn dispatch(cmd: Cmd) -> Result<ExitCode, SimError> {
    match cmd {
        Cmd::List => {
            for (name, text) in SHIPPED {
                let s = scenario::parse(text, name)?;
                println!("{name:<22} {}", s.summary);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run {
            scenario: name,
            seed,
            html: html_file,
            agents,
            threads,
            no_faults,
            calm,
            short_offline,
            groups,
            spaces,
            domains,
            rotations,
            consent,
            quiet,
        } => {
            let mut spec = if name == "swarm" {
                if agents < 2 {
                    return Err(SimError::Usage("--agents must be at least 2".into()));
                }
                swarm::generate(
                    seed,
                    Params {
                        agents,
                        threads,
                        faults: !no_faults,
                        long_offline: !short_offline,
                        calm,
                        groups,
                        spaces,
                        domains: domains.max(1),
                        rotations,
                        consent,
                    },
                )
            } else if name == "relationship" {
                // `--threads` dinners between alice and bob (`a2acp-sim relationship`).
                a2acp_sim::relationship::world(seed, threads.max(1))
            } else {
                scenario::load(&name)?
            };
            spec.transcript = true;
            let (report, text, lines) = Sim::new(spec.clone(), seed).run();
            if !quiet {
                print!("{text}");
            }
            if let Some(f) = html_file {
                let page = html::page(&spec, seed, &lines, &report);
                std::fs::write(&f, page).map_err(|e| SimError::Io {
                    path: f.clone(),
                    reason: e.to_string(),
                })?;
                eprintln!("wrote {f}");
            }
            if !report.rotations.is_empty() {
                println!("{}", rotation_summary(&report.rotations));
            }
            if report.passed() {
                if quiet {
                    println!("{} seed {}: all checks passed", report.name, seed);
                }
                Ok(ExitCode::SUCCESS)
            } else {
                for v in &report.violations {
                    eprintln!("VIOLATION {v}");
                }
                Ok(ExitCode::from(1))
            }
        }
        Cmd::Swarm {
            seeds,
            agents,
            threads,
            no_faults,
            calm,
            short_offline,
            groups,
            spaces,
            domains,
            rotations,
            consent,
            no_progress,
        } => {
            let range = swarm::parse_seeds(&seeds).ok_or_else(|| {
                SimError::Usage(format!(
                    "--seeds `{seeds}` is not `A..B`, `A..=B` or a number (with A < B)"
                ))
            })?;
            if agents < 2 {
                return Err(SimError::Usage("--agents must be at least 2".into()));
            }
            let p = Params {
                agents,
                threads,
                faults: !no_faults,
                long_offline: !short_offline,
                calm,
                groups,
                spaces,
                domains: domains.max(1),
                rotations,
                consent,
            };
            let bar = if no_progress {
                indicatif::ProgressBar::hidden()
            } else {
                indicatif::ProgressBar::new(range.end - range.start)
            };
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40} {pos}/{len} seeds, {msg} [{elapsed_precise}, eta {eta}]",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            let t0 = Instant::now();
            let mut failed = Vec::new();
            let mut events = 0u64;
            let (mut handed_over, mut links, mut relay_crashes) = (0u64, 0u64, 0u64);
            let mut rotated = Vec::new();
            for seed in range.clone() {
                let spec = swarm::generate(seed, p);
                let (report, _, _) = Sim::new(spec, seed).run();
                rotated.extend(report.rotations.iter().cloned());
                events += report.stats.events;
                handed_over += report.stats.handed_over;
                links += report.stats.relay_links;
                relay_crashes += report.stats.relay_crashes;
                if !report.passed() {
                    bar.suspend(|| {
                        eprintln!("seed {seed} FAILED:");
                        for v in report.violations.iter().take(5) {
                            eprintln!("  {v}");
                        }
                        eprintln!("  reproduce: {}", swarm::reproduce_command(seed, p));
                    });
                    failed.push(seed);
                }
                bar.inc(1);
                bar.set_message(format!("{} failed", failed.len()));
            }
            bar.finish_and_clear();
            let n = range.end - range.start;
            let wall = t0.elapsed().as_secs_f64();
            println!(
                "{} passed, {} failed ({n} seeds, {events} events, {wall:.1} s)",
                n - failed.len() as u64,
                failed.len()
            );
            if p.domains > 1 {
                println!(
                    "federation: {handed_over} packets handed over between relays, {links} relay links up, {relay_crashes} relay crashes"
                );
            }
            if p.rotations {
                println!("{}", rotation_summary(&rotated));
            }
            if failed.is_empty() {
                Ok(ExitCode::SUCCESS)
            } else {
                Ok(ExitCode::from(1))
            }
        }
        Cmd::Relationship { seeds, dinners } => {
            let range = swarm::parse_seeds(&seeds)
                .ok_or_else(|| SimError::Usage(format!("--seeds: cannot read `{seeds}`")))?;
            if dinners == 0 {
                return Err(SimError::Usage("--dinners must be at least 1".into()));
            }
            let figures = a2acp_sim::relationship::measure(range.clone(), dinners);
            print!("{}", figures.render(&range, dinners));
            Ok(if figures.all_met() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Cmd::Bench {
            agents,
            threads,
            seed,
            game_nights,
            swarm_seeds,
            groups_only,
        } => {
            if !groups_only {
                bench(agents, threads, seed)?;
            }
            bench_groups(game_nights, swarm_seeds);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// On-CPU time of this (the simulating) thread, from Linux's `/proc/thread-self/schedstat`;
/// `None` elsewhere. Wall time counts the time other processes had the core too.
fn cpu_nanos() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// The rotation figure of a swarm: how many rotations, and the simulated time from `keys
/// rotate` to every peer that had pinned the old key re-pinned the new one.
fn rotation_summary(rs: &[a2acp_sim::world::RotationFigure]) -> String {
    let with_peers: Vec<_> = rs.iter().filter(|r| r.peers > 0).collect();
    let times: Vec<Duration> = with_peers.iter().filter_map(|r| r.to_all).collect();
    let unfinished = with_peers.len() - times.len();
    let fmt = |d: Duration| format!("{:.1} s", d.as_secs_f64());
    let figure = match a2acp_sim::world::median_and_worst(&times) {
        Some((median, worst)) => format!(
            "every peer re-pinned after a median {} and at worst {} (simulated)",
            fmt(median),
            fmt(worst)
        ),
        None => "no rotation with peers finished".into(),
    };
    format!(
        "key rotations: {} ({} with peers that had pinned the old key, {} peers in all); {figure}; {unfinished} not re-pinned by every peer when the run ended",
        rs.len(),
        with_peers.len(),
        with_peers.iter().map(|r| r.peers).sum::<usize>()
    )
}

/// One measured swarm run.
struct Measured {
    events: u64,
    packets: u64,
    simulated: f64,
    /// Wall seconds: generating the world, the run and its final checks.
    wall: f64,
    /// On-CPU seconds of the same span, if known.
    cpu: Option<f64>,
    /// Wall seconds inside the core's state machines (agents and relay, crypto included).
    core: f64,
    verdict: String,
}

impl Measured {
    fn run(p: Params, seed: u64) -> Measured {
        let c0 = cpu_nanos();
        let t0 = Instant::now();
        let spec = swarm::generate(seed, p);
        let (r, _, _) = Sim::new(spec, seed)
            .with_stopwatch(Box::new(Wall(Instant::now())))
            .run();
        let wall = t0.elapsed().as_secs_f64();
        let cpu = c0
            .zip(cpu_nanos())
            .map(|(a, b)| b.saturating_sub(a) as f64 / 1e9);
        Measured {
            events: r.stats.events,
            packets: r.stats.packets_sent,
            simulated: r.stats.sim_time.as_secs_f64(),
            wall,
            cpu,
            core: r.stats.core_nanos as f64 / 1e9,
            verdict: if r.passed() {
                "all passed".to_string()
            } else {
                format!(
                    "{} violations (see them: {})",
                    r.violations.len(),
                    swarm::reproduce_command(seed, p)
                )
            },
        }
    }

    fn print(&self, what: &str) {
        let overhead = (self.wall - self.core).max(0.0) / self.wall;
        println!("{what}, with faults:");
        println!(
            "  {} events, {} packets, {:.0} s simulated in {:.2} s wall{}",
            self.events,
            self.packets,
            self.simulated,
            self.wall,
            self.cpu
                .map(|c| format!(" ({c:.2} s on the CPU)"))
                .unwrap_or_default()
        );
        let on = |secs: f64| {
            format!(
                "{:.0} events/s, {:.0}x real time",
                self.events as f64 / secs,
                self.simulated / secs
            )
        };
        print!("  wall: {}", on(self.wall));
        if let Some(c) = self.cpu {
            print!("; CPU: {}", on(c));
        }
        println!();
        println!(
            "  protocol work (the core's agents and relay, crypto included): {:.2} s = {:.0}%; simulator overhead (world generation, network, models, checkers, bookkeeping): {:.0}%",
            self.core,
            100.0 * (1.0 - overhead),
            100.0 * overhead
        );
        println!("  checks: {}", self.verdict);
    }
}

fn bench(agents: usize, threads: usize, seed: u64) -> Result<(), SimError> {
    println!("# a2acp-sim bench (figures of this machine; wall time includes other processes sharing the core, CPU time does not)");
    println!(
        "# the protocol/overhead split is measured in wall time around every call into the core"
    );
    // 1. Throughput and overhead on a mid-size swarm with faults.
    let p = Params {
        agents: 50,
        threads: 500,
        faults: true,
        long_offline: false,
        calm: false,
        groups: false,
        spaces: false,
        domains: 1,
        rotations: false,
        consent: false,
    };
    Measured::run(p, seed).print("swarm 50 agents / 500 threads");
    // 2. The large swarm.
    let p = Params {
        agents,
        threads,
        faults: true,
        long_offline: false,
        calm: false,
        groups: false,
        spaces: false,
        domains: 1,
        rotations: false,
        consent: false,
    };
    Measured::run(p, seed).print(&format!("swarm {agents} agents / {threads} threads"));
    // 3. §11.2: first contact vs established relationship.
    for (name, claim) in [
        ("dinner", "4 round trips + 1 prompt"),
        ("established", "1 round trip + 0 prompts"),
    ] {
        let spec = scenario::load(name)?;
        let (r, _, _) = Sim::new(spec, 1).run();
        for (t, packets, prompts) in &r.first_resolution {
            println!(
                "§11.2 {name} thread {}: {packets} packets up to the resolution, {prompts} consent prompt(s) (spec: {claim})",
                t + 1
            );
        }
    }
    Ok(())
}

/// Group threads (§10): over seeded game nights for 3, 4, 6 and 8 agents, round trips and
/// prompts per participant to reach a resolution and how often the binding constraint's
/// flexibility request ended on a slot everyone could make; then swarm events per
/// CPU-second with groups against two-party worlds.
fn bench_groups(worlds: u64, swarm_seeds: u64) {
    println!("# group threads: {worlds} seeded game nights per size (users share and confirm; a binding participant gives way 3 times in 4; clean network)");
    for size in [3usize, 4, 6, 8] {
        let (mut legs, mut packets, mut p_prompts, mut parts, mut c_prompts) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        let (mut reached, mut flex, mut flex_all, mut all_first, mut failed) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        let (mut events, mut cpu) = (0u64, 0f64);
        for seed in 0..worlds {
            let c0 = cpu_nanos();
            let (r, _, _) = Sim::new(swarm::game_night(seed, size), seed).run();
            if let Some(d) = c0
                .zip(cpu_nanos())
                .map(|(a, b)| b.saturating_sub(a) as f64 / 1e9)
            {
                cpu += d;
            }
            events += r.stats.events;
            if !r.passed() {
                failed += 1;
            }
            for g in &r.groups {
                for p in g.packets_to_resolution.iter().flatten() {
                    legs += 1;
                    packets += u64::from(*p);
                }
                parts += g.participant_prompts.len() as u64;
                p_prompts += g
                    .participant_prompts
                    .iter()
                    .map(|&x| u64::from(x))
                    .sum::<u64>();
                c_prompts += u64::from(g.coordinator_prompts);
                if g.reached {
                    reached += 1;
                }
                let everyone = u32::try_from(g.size).unwrap_or(u32::MAX);
                if g.flexibility_requests > 0 {
                    flex += 1;
                    if g.proposals.last() == Some(&everyone) {
                        flex_all += 1;
                    }
                } else if g.proposals.first() == Some(&everyone) {
                    all_first += 1;
                }
            }
        }
        let per = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        println!("group of {size}: {worlds} worlds, {reached} reached a confirmed resolution, checks failed in {failed}");
        println!(
            "  per participant: {:.2} packets = {:.2} round trips on its leg up to the first resolution; {:.2} prompts (consent + resolution); coordinator: {:.2} prompts",
            per(packets, legs),
            per(packets, 2 * legs),
            per(p_prompts, parts),
            per(c_prompts, worlds)
        );
        println!(
            "  a slot for everyone at once: {all_first}; binding constraint asked to give way: {flex}, of which {flex_all} ({:.0}%) ended on a slot everyone could make",
            100.0 * per(flex_all, flex)
        );
        if cpu > 0.0 {
            println!("  {:.0} events per CPU-second", events as f64 / cpu);
        }
    }
    for (what, groups) in [("two-party", false), ("with groups", true)] {
        let p = Params {
            groups,
            ..Params::default()
        };
        let (mut events, mut cpu, mut failed) = (0u64, 0f64, 0u64);
        for seed in 0..swarm_seeds {
            let c0 = cpu_nanos();
            let (r, _, _) = Sim::new(swarm::generate(seed, p), seed).run();
            if let Some(d) = c0
                .zip(cpu_nanos())
                .map(|(a, b)| b.saturating_sub(a) as f64 / 1e9)
            {
                cpu += d;
            }
            events += r.stats.events;
            if !r.passed() {
                failed += 1;
            }
        }
        println!(
            "swarm {what} (full faults, seeds 0..{swarm_seeds}): {events} events in {cpu:.2} CPU-s = {:.0} events per CPU-second; {failed} failed",
            if cpu > 0.0 { events as f64 / cpu } else { 0.0 }
        );
    }
}
