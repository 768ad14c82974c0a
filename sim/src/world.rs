//! The simulation engine: one virtual clock, one event queue, agents and a relay driven
//! through their public contract only, a seeded network between them, and the world
//! models (users, LLMs, action executors) around them.
//!
//! The queue is a `BTreeMap` keyed by `(time, sequence)`: events at the same instant run in
//! the order they were scheduled. Every random choice comes from streams derived from the
//! run seed, nothing reads a clock, and every map iterated is ordered: a run is a pure
//! function of (scenario, seed).
//!
//! The simulator plays the runtime: it executes every output in order (persist operations
//! go to an in-memory store per participant), arms timers, reconnects with exponential
//! backoff after a disconnection, restarts crashed participants from exactly what they
//! persisted, and answers prompts, LLM calls and actions with the world models.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use a2acp_core::agent::{
    Agent, Command, Input, NotifyKind, Output, Prompt, ResolutionAnswer, ThreadState, Waiting,
};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::harness::summarize_packet;
use a2acp_core::persist::PersistOp;
use a2acp_core::relay::{ConnId, Relay, RelayEvent, RelayInput, RelayOutput};
use a2acp_core::{Address, Timestamp};

use crate::check::{sig_of, Audit, Checker, Violation};
use crate::model::{ActionLedger, KeyChangePolicy, UserAnswer};
use crate::scenario::{Direction, ScriptAction, Spec};
use crate::transcript::{
    describe_command, describe_prompt, describe_relay_event, render_with, short, IdNames, Line, Tag,
};
use crate::util::{derive_seed, fmt_duration, Rng};

/// Measures time spent inside the core's state machines (for `bench`). The simulation
/// never reads a clock itself: a stopwatch is handed in from outside and only counted.
pub trait Stopwatch {
    /// Monotonic nanoseconds.
    fn nanos(&mut self) -> u64;
}

/// Counters of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Events processed.
    pub events: u64,
    /// Frames put on the wire.
    pub frames: u64,
    /// Frames lost (loss, partitions, dead connections).
    pub frames_lost: u64,
    /// Frames duplicated by the network.
    pub frames_duplicated: u64,
    /// Connections opened.
    pub connections: u64,
    /// Agent crashes.
    pub agent_crashes: u64,
    /// Relay crashes.
    pub relay_crashes: u64,
    /// Prompts shown (reminders and re-shows included).
    pub prompts: u64,
    /// Packets sent by agents' logic.
    pub packets_sent: u64,
    /// LLM calls.
    pub llm_calls: u64,
    /// Actions executed (undo included).
    pub actions: u64,
    /// Simulated time covered.
    pub sim_time: Duration,
    /// Nanoseconds inside the core (only with a stopwatch).
    pub core_nanos: u64,
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct Report {
    /// Scenario name.
    pub name: String,
    /// Seed.
    pub seed: u64,
    /// Broken invariants (empty: the run passed).
    pub violations: Vec<Violation>,
    /// Violations of checks the scenario lists as known core issues.
    pub known: Vec<Violation>,
    /// The exactly-once audit.
    pub audit: Audit,
    /// Counters.
    pub stats: Stats,
    /// Final state of every thread: (thread number or id, agent name, state).
    pub finals: Vec<(String, String, ThreadState)>,
    /// Per-thread metrics of the threads a scenario started that reached a resolution:
    /// (thread index, packets up to and including the first resolution, distinct consent
    /// prompts shown to either user in the thread).
    pub first_resolution: Vec<(usize, u32, u32)>,
}

impl Report {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

#[derive(Debug)]
enum Ev {
    ToRelay {
        conn: ConnId,
        inc: u32,
        bytes: Vec<u8>,
    },
    ToAgent {
        node: usize,
        inc: u32,
        conn: ConnId,
        bytes: Vec<u8>,
    },
    RelaySeesClose {
        conn: ConnId,
        inc: u32,
    },
    AgentSeesClose {
        node: usize,
        inc: u32,
        conn: ConnId,
    },
    AgentTimer {
        node: usize,
        inc: u32,
    },
    RelayTimer {
        inc: u32,
    },
    Reconnect {
        node: usize,
        inc: u32,
    },
    UserAnswer {
        node: usize,
        inc: u32,
        prompt: u64,
    },
    AcceptKey {
        node: usize,
        peer: Address,
    },
    LlmResult {
        node: usize,
        inc: u32,
        id: u64,
        result: Result<String, String>,
    },
    ActionResult {
        node: usize,
        inc: u32,
        id: u64,
        result: Result<(), String>,
    },
    StartThread(usize),
    Command(usize),
    CrashAgent {
        node: usize,
        restart_after: Duration,
    },
    CrashAgentIdle {
        node: usize,
        inc: u32,
    },
    RestartAgent {
        node: usize,
    },
    Suspend {
        node: usize,
        length: Duration,
    },
    Resume {
        node: usize,
    },
    CrashRelay {
        down_for: Duration,
    },
    CrashRelayIdle {
        inc: u32,
    },
    RestartRelay,
    Partition {
        idx: usize,
        on: bool,
    },
    KeyChange(usize),
}

/// The sim's view of one connection (a socket between an agent and the relay).
#[derive(Debug)]
struct Conn {
    node: usize,
    /// The agent still uses it.
    agent_open: bool,
    /// The relay still knows it.
    relay_open: bool,
    /// Agent → relay stream is broken (a frame was lost).
    up_broken: bool,
    /// Relay → agent stream is broken.
    down_broken: bool,
    up_last: Timestamp,
    down_last: Timestamp,
}

struct Node {
    name: String,
    address: Address,
    agent: Option<Agent>,
    inc: u32,
    identity: [u8; 32],
    identity_gen: u32,
    store: BTreeMap<String, Vec<u8>>,
    conn: Option<ConnId>,
    suspended: bool,
    deferred: Vec<Ev>,
    timer: Option<(Timestamp, u64)>,
    reconnect_pending: bool,
    attempt: u32,
    crash_armed: Option<Duration>,
    prompts: BTreeMap<u64, Prompt>,
    scheduled: BTreeSet<u64>,
    decisions: BTreeMap<(u64, bool), UserAnswer>,
    consents_seen: usize,
    resolutions_seen: usize,
    llm_seen: usize,
    ledger: ActionLedger,
    prompts_shown: u64,
    consent_prompts: BTreeMap<String, BTreeSet<u64>>,
    delivering: Option<(String, bool)>,
}

/// One simulation run.
pub struct Sim {
    spec: Spec,
    seed: u64,
    now: Timestamp,
    start: Timestamp,
    queue: BTreeMap<(Timestamp, u64), Ev>,
    seq: u64,
    net: Rng,
    users: Rng,
    llm: Rng,
    acts: Rng,
    faults: Rng,
    relay: Option<Relay>,
    relay_store: BTreeMap<String, Vec<u8>>,
    relay_inc: u32,
    relay_timer: Option<(Timestamp, u64)>,
    relay_crash_armed: Option<Duration>,
    relay_broken: bool,
    nodes: Vec<Node>,
    by_address: BTreeMap<Address, usize>,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: u64,
    active_partitions: BTreeSet<usize>,
    heal: Timestamp,
    threads: BTreeMap<usize, String>,
    transcript: Vec<Line>,
    record: bool,
    checker: Checker,
    stats: Stats,
    stopwatch: Option<Box<dyn Stopwatch>>,
}

/// Texts that are plaintext packet structure: a relay record holding one holds plaintext.
const MARKERS: &[&str] = &[
    "packet_id",
    "thread_id",
    "context_request",
    "context_provided",
    "\"needs\"",
    "\"intent\"",
    "a2acp/0.",
    "time_windows",
];

impl Sim {
    /// A run of `spec` with `seed`.
    pub fn new(spec: Spec, seed: u64) -> Self {
        let mut markers: Vec<String> = MARKERS.iter().map(|s| s.to_string()).collect();
        if spec.agents.len() <= 16 {
            for a in &spec.agents {
                for v in a.config.profile.values() {
                    if let Some(s) = v.as_str() {
                        if s.chars().count() >= 8 {
                            markers.push(s.to_string());
                        }
                    }
                }
            }
        }
        let start = spec.start;
        let relay = Relay::new(spec.relay.config.clone(), derive_seed(seed, "relay#0"));
        let mut nodes = Vec::new();
        let mut by_address = BTreeMap::new();
        for (i, a) in spec.agents.iter().enumerate() {
            let identity = derive_seed(seed, &format!("identity/{}", a.name));
            let agent = Agent::new(
                a.config.clone(),
                IdentityKey::from_seed(identity),
                derive_seed(seed, &format!("agent/{}", a.name)),
            );
            by_address.insert(a.config.address.clone(), i);
            nodes.push(Node {
                name: a.name.clone(),
                address: a.config.address.clone(),
                agent: Some(agent),
                inc: 0,
                identity,
                identity_gen: 0,
                store: BTreeMap::new(),
                conn: None,
                suspended: false,
                deferred: Vec::new(),
                timer: None,
                reconnect_pending: false,
                attempt: 0,
                crash_armed: None,
                prompts: BTreeMap::new(),
                scheduled: BTreeSet::new(),
                decisions: BTreeMap::new(),
                consents_seen: 0,
                resolutions_seen: 0,
                llm_seen: 0,
                ledger: ActionLedger::default(),
                prompts_shown: 0,
                consent_prompts: BTreeMap::new(),
                delivering: None,
            });
        }
        let record = spec.transcript;
        let mut sim = Sim {
            seed,
            now: start,
            start,
            queue: BTreeMap::new(),
            seq: 0,
            net: Rng::new(seed, "net"),
            users: Rng::new(seed, "users"),
            llm: Rng::new(seed, "llm"),
            acts: Rng::new(seed, "actions"),
            faults: Rng::new(seed, "faults"),
            relay: Some(relay),
            relay_store: BTreeMap::new(),
            relay_inc: 0,
            relay_timer: None,
            relay_crash_armed: None,
            relay_broken: false,
            nodes,
            by_address,
            conns: BTreeMap::new(),
            next_conn: 1,
            active_partitions: BTreeSet::new(),
            heal: start.add(spec.heal_at()),
            threads: BTreeMap::new(),
            transcript: Vec::new(),
            record,
            checker: Checker::new(markers),
            stats: Stats::default(),
            stopwatch: None,
            spec,
        };
        sim.schedule_script();
        for i in 0..sim.nodes.len() {
            sim.drain_agent(i);
            let inc = sim.nodes[i].inc;
            sim.push(start, Ev::Reconnect { node: i, inc });
            sim.nodes[i].reconnect_pending = true;
        }
        sim
    }

    /// Counts time spent in the core with `sw`.
    pub fn with_stopwatch(mut self, sw: Box<dyn Stopwatch>) -> Self {
        self.stopwatch = Some(sw);
        self
    }

    fn schedule_script(&mut self) {
        let s = self.start;
        let at = |d: Duration| s.add(d);
        let mut evs: Vec<(Timestamp, Ev)> = Vec::new();
        for (i, t) in self.spec.threads.iter().enumerate() {
            evs.push((at(t.at), Ev::StartThread(i)));
        }
        for (i, c) in self.spec.commands.iter().enumerate() {
            evs.push((at(c.at), Ev::Command(i)));
        }
        for (i, a) in self.spec.agents.iter().enumerate() {
            for o in &a.offline {
                evs.push((
                    at(o.at),
                    Ev::Suspend {
                        node: i,
                        length: o.length,
                    },
                ));
            }
            for c in &a.crashes {
                evs.push((
                    at(c.at),
                    Ev::CrashAgent {
                        node: i,
                        restart_after: c.length,
                    },
                ));
            }
        }
        for c in &self.spec.relay.crashes {
            evs.push((at(c.at), Ev::CrashRelay { down_for: c.length }));
        }
        for (i, p) in self.spec.partitions.iter().enumerate() {
            evs.push((at(p.when.at), Ev::Partition { idx: i, on: true }));
            evs.push((
                at(p.when.at + p.when.length),
                Ev::Partition { idx: i, on: false },
            ));
        }
        for (i, k) in self.spec.key_changes.iter().enumerate() {
            evs.push((at(k.at), Ev::KeyChange(i)));
        }
        for (t, e) in evs {
            self.push(t, e);
        }
    }

    // ----- plumbing -----

    fn push(&mut self, at: Timestamp, ev: Ev) -> (Timestamp, u64) {
        self.seq += 1;
        let key = (at.max(self.now), self.seq);
        self.queue.insert(key, ev);
        key
    }

    fn elapsed(&self) -> Duration {
        self.now.since(self.start)
    }

    fn tick(&mut self) -> u64 {
        self.stopwatch.as_mut().map_or(0, |s| s.nanos())
    }

    fn tock(&mut self, t0: u64) {
        if let Some(s) = self.stopwatch.as_mut() {
            self.stats.core_nanos += s.nanos().saturating_sub(t0);
        }
    }

    fn line(&mut self, who: &str, mark: char, text: String, tag: Tag) {
        if self.record {
            self.transcript.push(Line {
                at: self.now,
                who: who.to_string(),
                mark,
                text,
                tag,
            });
        }
    }

    fn agent_now(&self, i: usize) -> Timestamp {
        let skew = self.spec.agents[i].skew_ms;
        let t = self.now.as_millis() as i64 + skew;
        Timestamp::from_millis(t.max(0) as u64)
    }

    fn latency(&mut self, node: usize) -> Duration {
        let l = self.spec.agents[node].link.sample(&mut self.net);
        Duration::from_millis(l)
    }

    fn blocked(&self, node: usize, up: bool) -> bool {
        self.active_partitions.iter().any(|&p| {
            let p = &self.spec.partitions[p];
            p.agent == node
                && match p.direction {
                    Direction::Both => true,
                    Direction::ToRelay => up,
                    Direction::FromRelay => !up,
                }
        })
    }

    // ----- the loop -----

    /// Runs to the end of the scenario and runs the final checks.
    pub fn run(mut self) -> (Report, String, Vec<Line>) {
        let end = self.start.add(self.spec.end_at());
        while let Some((&(at, _), _)) = self.queue.first_key_value() {
            if at > end {
                break;
            }
            let Some(((at, _), ev)) = self.queue.pop_first() else {
                break;
            };
            self.now = self.now.max(at);
            self.stats.events += 1;
            self.handle(ev);
        }
        self.now = end;
        self.final_checks();
        self.stats.sim_time = self.now.since(self.start);
        let finals = self.finals();
        let first_resolution = self.first_resolution_metrics();
        let text = if self.record {
            self.render_full()
        } else {
            String::new()
        };
        let (known, violations) = self.split_known();
        let report = Report {
            name: self.spec.name.clone(),
            seed: self.seed,
            violations,
            known,
            audit: self.checker.audit,
            stats: self.stats.clone(),
            finals,
            first_resolution,
        };
        (report, text, std::mem::take(&mut self.transcript))
    }

    /// Splits violations into (known issues, failures); a known issue that did not
    /// happen is a failure too.
    fn split_known(&self) -> (Vec<Violation>, Vec<Violation>) {
        let known: BTreeSet<&str> = self
            .spec
            .known_issues
            .iter()
            .map(|(c, _)| c.as_str())
            .collect();
        let (k, mut v): (Vec<Violation>, Vec<Violation>) = self
            .checker
            .violations
            .iter()
            .cloned()
            .partition(|x| known.contains(x.check));
        for (c, note) in &self.spec.known_issues {
            if !k.iter().any(|x| x.check == c) {
                v.push(Violation {
                    at: self.now.since(self.start),
                    check: "expect",
                    detail: format!(
                        "known issue `{c}` did not happen (fixed? remove it from the scenario): {note}"
                    ),
                });
            }
        }
        (k, v)
    }

    fn render_full(&self) -> String {
        let mut out = format!(
            "# scenario {} — seed {}\n# {}\n",
            self.spec.name, self.seed, self.spec.summary
        );
        let mut names = IdNames::default();
        out += &render_with(&self.transcript, self.start, None, &mut names);
        out += "# final states\n";
        for (t, who, s) in self.finals() {
            out += &format!("#   thread {} {who}: {s}\n", names.scrub(&t));
        }
        let a = self.checker.audit;
        out += &format!(
            "# exactly-once audit: accepted {} delivered {} refused {} lost {} duplicated {} unexpected {}\n",
            a.accepted, a.delivered, a.refused, a.lost, a.duplicated, a.unexpected
        );
        let (known, failures) = self.split_known();
        for (c, note) in &self.spec.known_issues {
            out += &format!("# known issue [{c}]: {note}\n");
        }
        for v in &known {
            out += &format!("# KNOWN {}\n", names.scrub(&v.to_string()));
        }
        if failures.is_empty() {
            out += "# checks: all passed\n";
        } else {
            for v in &failures {
                out += &format!("# VIOLATION {}\n", names.scrub(&v.to_string()));
            }
        }
        out
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::ToRelay { conn, inc, bytes } => {
                if inc != self.relay_inc || self.relay.is_none() {
                    return;
                }
                if !self.conns.get(&conn).is_some_and(|c| c.relay_open) {
                    return;
                }
                let now = self.now;
                let t0 = self.tick();
                if let Some(r) = self.relay.as_mut() {
                    r.handle(
                        now,
                        RelayInput::Bytes {
                            conn,
                            bytes: &bytes,
                        },
                    );
                }
                self.tock(t0);
                self.drain_relay();
            }
            Ev::ToAgent {
                node,
                inc,
                conn,
                bytes,
            } => {
                let n = &self.nodes[node];
                if n.inc != inc || n.conn != Some(conn) || n.agent.is_none() || n.suspended {
                    return;
                }
                let deliver = bytes
                    .starts_with(b"{\"t\":\"deliver\"")
                    .then(|| sig_of(&bytes))
                    .flatten()
                    .and_then(|s| self.checker.packet_of_sig(&s).map(|p| p.1.clone()));
                self.nodes[node].delivering = deliver.map(|p| (p, false));
                self.feed(node, Input::Bytes(bytes));
                if let Some((pid, seen)) = self.nodes[node].delivering.take() {
                    if !seen && self.nodes[node].agent.is_some() {
                        self.checker.refused(node, &pid);
                    }
                }
            }
            Ev::RelaySeesClose { conn, inc } => {
                if inc != self.relay_inc || self.relay.is_none() {
                    return;
                }
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                if !c.relay_open {
                    return;
                }
                c.relay_open = false;
                let now = self.now;
                let t0 = self.tick();
                if let Some(r) = self.relay.as_mut() {
                    r.handle(now, RelayInput::Disconnected { conn });
                }
                self.tock(t0);
                self.drain_relay();
                self.gc_conn(conn);
            }
            Ev::AgentSeesClose { node, inc, conn } => {
                if self.nodes[node].inc != inc || self.nodes[node].conn != Some(conn) {
                    return;
                }
                self.nodes[node].conn = None;
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.agent_open = false;
                }
                self.gc_conn(conn);
                if self.nodes[node].suspended {
                    return;
                }
                self.feed(node, Input::Disconnected);
                self.schedule_reconnect(node);
            }
            Ev::AgentTimer { node, inc } => {
                if self.nodes[node].inc != inc {
                    return;
                }
                self.nodes[node].timer = None;
                if self.nodes[node].suspended || self.nodes[node].agent.is_none() {
                    return;
                }
                let now = self.agent_now(node);
                let t0 = self.tick();
                if let Some(a) = self.nodes[node].agent.as_mut() {
                    a.handle_timeout(now);
                }
                self.tock(t0);
                self.drain_agent(node);
            }
            Ev::RelayTimer { inc } => {
                if inc != self.relay_inc {
                    return;
                }
                self.relay_timer = None;
                let now = self.now;
                let t0 = self.tick();
                if let Some(r) = self.relay.as_mut() {
                    r.handle(now, RelayInput::Timeout);
                }
                self.tock(t0);
                self.drain_relay();
            }
            Ev::Reconnect { node, inc } => {
                if self.nodes[node].inc != inc {
                    return;
                }
                self.nodes[node].reconnect_pending = false;
                self.connect(node);
            }
            Ev::UserAnswer { node, inc, prompt } => {
                if self.defer_if_away(node, || Ev::UserAnswer { node, inc, prompt }) {
                    return;
                }
                if self.nodes[node].inc != inc {
                    return;
                }
                self.answer_prompt(node, prompt);
            }
            Ev::AcceptKey { node, peer } => {
                if self.defer_if_away(node, || Ev::AcceptKey {
                    node,
                    peer: peer.clone(),
                }) {
                    return;
                }
                self.command(node, Command::AcceptKeyChange { address: peer });
            }
            Ev::LlmResult {
                node,
                inc,
                id,
                result,
            } => {
                if self.nodes[node].inc != inc {
                    return;
                }
                if self.nodes[node].suspended {
                    self.nodes[node].deferred.push(Ev::LlmResult {
                        node,
                        inc,
                        id,
                        result,
                    });
                    return;
                }
                let ok = if result.is_ok() { "answer" } else { "error" };
                let name = self.nodes[node].name.clone();
                self.line(&name, '|', format!("LLM {ok} to request #{id}"), Tag::Note);
                self.feed(
                    node,
                    Input::LlmResult {
                        request_id: id,
                        result,
                    },
                );
            }
            Ev::ActionResult {
                node,
                inc,
                id,
                result,
            } => {
                if self.nodes[node].inc != inc {
                    return;
                }
                if self.nodes[node].suspended {
                    self.nodes[node].deferred.push(Ev::ActionResult {
                        node,
                        inc,
                        id,
                        result,
                    });
                    return;
                }
                let name = self.nodes[node].name.clone();
                let outcome = match &result {
                    Ok(()) => "ok".to_string(),
                    Err(e) => format!("failed: {e}"),
                };
                self.line(&name, '|', format!("action #{id} → {outcome}"), Tag::Note);
                self.feed(
                    node,
                    Input::ActionResult {
                        action_id: id,
                        result,
                    },
                );
            }
            Ev::StartThread(i) => {
                let from = self.spec.threads[i].from;
                if self.defer_if_away(from, || Ev::StartThread(i)) {
                    return;
                }
                self.start_thread(i);
            }
            Ev::Command(i) => {
                let node = self.spec.commands[i].agent;
                if self.defer_if_away(node, || Ev::Command(i)) {
                    return;
                }
                self.scripted_command(i);
            }
            Ev::CrashAgent {
                node,
                restart_after,
            } => {
                if self.nodes[node].agent.is_none() {
                    return;
                }
                if !self.spec.crash_mid_step {
                    self.crash_agent(node, restart_after, None);
                    return;
                }
                self.nodes[node].crash_armed = Some(restart_after);
                let inc = self.nodes[node].inc;
                let window = Duration::from_millis(self.faults.between(0, 10_000));
                let at = self.now.add(window);
                self.push(at, Ev::CrashAgentIdle { node, inc });
            }
            Ev::CrashAgentIdle { node, inc } => {
                if self.nodes[node].inc == inc {
                    if let Some(r) = self.nodes[node].crash_armed.take() {
                        self.crash_agent(node, r, None);
                    }
                }
            }
            Ev::RestartAgent { node } => self.restart_agent(node),
            Ev::Suspend { node, length } => self.suspend(node, length),
            Ev::Resume { node } => self.resume(node),
            Ev::CrashRelay { down_for } => {
                if self.relay.is_none() {
                    return;
                }
                self.relay_crash_armed = Some(down_for);
                let inc = self.relay_inc;
                let window = Duration::from_millis(self.faults.between(0, 3000));
                let at = self.now.add(window);
                self.push(at, Ev::CrashRelayIdle { inc });
            }
            Ev::CrashRelayIdle { inc } => {
                if inc == self.relay_inc {
                    if let Some(d) = self.relay_crash_armed.take() {
                        self.crash_relay(d, None);
                    }
                }
            }
            Ev::RestartRelay => self.restart_relay(),
            Ev::Partition { idx, on } => {
                let p = self.spec.partitions[idx];
                let name = self.nodes[p.agent].name.clone();
                let dir = match p.direction {
                    Direction::Both => "both ways",
                    Direction::ToRelay => "agent → relay",
                    Direction::FromRelay => "relay → agent",
                };
                if on {
                    self.active_partitions.insert(idx);
                    self.line(
                        "net",
                        '|',
                        format!(
                            "partition of {name} ({dir}) for {}",
                            fmt_duration(p.when.length)
                        ),
                        Tag::Fault,
                    );
                } else {
                    self.active_partitions.remove(&idx);
                    self.line(
                        "net",
                        '|',
                        format!("partition of {name} healed"),
                        Tag::Fault,
                    );
                }
            }
            Ev::KeyChange(i) => self.key_change(i),
        }
    }

    /// Keeps an event for later if the node's device is shut or its agent is down.
    fn defer_if_away(&mut self, node: usize, ev: impl FnOnce() -> Ev) -> bool {
        let n = &self.nodes[node];
        if n.suspended || n.agent.is_none() {
            let e = ev();
            self.nodes[node].deferred.push(e);
            return true;
        }
        false
    }

    fn replay_deferred(&mut self, node: usize) {
        let evs = std::mem::take(&mut self.nodes[node].deferred);
        let inc = self.nodes[node].inc;
        for (k, e) in evs.into_iter().enumerate() {
            let e = match e {
                Ev::UserAnswer { node, prompt, .. } => Ev::UserAnswer { node, inc, prompt },
                Ev::LlmResult {
                    node, id, result, ..
                } => Ev::LlmResult {
                    node,
                    inc,
                    id,
                    result,
                },
                Ev::ActionResult {
                    node, id, result, ..
                } => Ev::ActionResult {
                    node,
                    inc,
                    id,
                    result,
                },
                other => other,
            };
            let at = self.now.add(Duration::from_millis(1000 + k as u64));
            self.push(at, e);
        }
    }

    // ----- agents -----

    fn feed(&mut self, node: usize, input: Input) {
        let now = self.agent_now(node);
        let t0 = self.tick();
        if let Some(a) = self.nodes[node].agent.as_mut() {
            a.handle(now, input);
        }
        self.tock(t0);
        self.drain_agent(node);
    }

    fn command(&mut self, node: usize, c: Command) {
        let name = self.nodes[node].name.clone();
        self.line(
            &name,
            '|',
            format!("user: {}", describe_command(&c)),
            Tag::User,
        );
        self.feed(node, Input::Command(c));
    }

    fn drain_agent(&mut self, i: usize) {
        let mut outs = Vec::new();
        let t0 = self.tick();
        match self.nodes[i].agent.as_mut() {
            Some(a) => {
                while let Some(o) = a.poll_output() {
                    outs.push(o);
                }
            }
            None => return,
        }
        self.tock(t0);
        // Check the threads this step changed, on the live state.
        let changed: BTreeSet<String> = outs
            .iter()
            .filter_map(|o| match o {
                Output::Persist(PersistOp::Put { key, .. }) => {
                    key.strip_prefix("thread/").map(String::from)
                }
                _ => None,
            })
            .collect();
        if !changed.is_empty() {
            let at = self.elapsed();
            let name = self.nodes[i].name.clone();
            if let Some(a) = self.nodes[i].agent.as_ref() {
                for id in &changed {
                    if let Some(t) = a.thread(id) {
                        self.checker.check_thread(at, i, &name, a, t);
                    }
                }
            }
        }
        let cut = if self.nodes[i].crash_armed.is_some() && !outs.is_empty() {
            // A thread's new history records come right before its thread record and are
            // drawn with it: the crash falls before the same records as when the history
            // was inside the thread record (so seeds keep their faults), and a cut just
            // before a thread record leaves its history records written, uncommitted.
            // The transcript counts outputs the same way.
            let records: Vec<usize> = (0..outs.len())
                .filter(|&k| !is_history_put(&outs[k]))
                .collect();
            let k = self.faults.between(0, records.len() as u64) as usize;
            Some((
                records.get(k).copied().unwrap_or(outs.len()),
                (k, records.len()),
            ))
        } else {
            None
        };
        let total = outs.len();
        let first = self.transcript.len();
        let mut cats: Vec<u8> = Vec::new();
        for (k, o) in outs.into_iter().enumerate() {
            if let Some((_, point)) = cut.filter(|c| c.0 == k) {
                self.sort_lines(first, &cats);
                let r = self.nodes[i].crash_armed.take().unwrap_or_default();
                self.crash_agent(i, r, Some(point));
                return;
            }
            let before = self.transcript.len();
            let cat = self.exec_agent_output(i, o);
            cats.extend(std::iter::repeat_n(cat, self.transcript.len() - before));
        }
        self.sort_lines(first, &cats);
        if let Some((_, point)) = cut.filter(|c| c.0 == total) {
            let r = self.nodes[i].crash_armed.take().unwrap_or_default();
            self.crash_agent(i, r, Some(point));
            return;
        }
        if self.nodes[i].agent.as_ref().is_some_and(Agent::is_online) {
            self.nodes[i].attempt = 0;
        }
        self.rearm_agent(i);
    }

    /// Lines of one step are shown as they happened logically: what was received, then
    /// the agent's own record (sends, state changes), then what the user sees.
    fn sort_lines(&mut self, first: usize, cats: &[u8]) {
        if !self.record || first >= self.transcript.len() {
            return;
        }
        let lines: Vec<Line> = self.transcript.drain(first..).collect();
        let mut tagged: Vec<(u8, Line)> = cats.iter().copied().zip(lines).collect();
        tagged.sort_by_key(|(c, _)| *c);
        self.transcript.extend(tagged.into_iter().map(|(_, l)| l));
    }

    fn exec_agent_output(&mut self, i: usize, o: Output) -> u8 {
        let name = self.nodes[i].name.clone();
        match o {
            Output::Persist(op) => {
                if let PersistOp::Put { key, value } = &op {
                    if key.starts_with("outbox/") {
                        self.checker.outbox_put(i, value);
                    }
                }
                store(&mut self.nodes[i].store, op);
                2
            }
            Output::Send(bytes) => {
                if let Some(conn) = self.nodes[i].conn {
                    self.transmit(conn, true, bytes);
                }
                2
            }
            Output::Prompt(p) => {
                self.stats.prompts += 1;
                self.nodes[i].prompts_shown += 1;
                let text = describe_prompt(&p);
                self.line(&name, '|', text, Tag::User);
                let id = p.id;
                if matches!(p.kind, a2acp_core::agent::PromptKind::Consent { .. }) {
                    self.nodes[i]
                        .consent_prompts
                        .entry(p.thread_id.clone())
                        .or_default()
                        .insert(id);
                }
                let first_time = self.nodes[i].scheduled.insert(id);
                self.nodes[i].prompts.insert(id, p);
                if first_time {
                    self.schedule_answer(i, id);
                }
                2
            }
            Output::ClosePrompt(id) => {
                if self.nodes[i].prompts.remove(&id).is_some() {
                    self.line(&name, '|', format!("prompt #{id} withdrawn"), Tag::User);
                }
                2
            }
            Output::CallLlm(r) => {
                self.stats.llm_calls += 1;
                self.line(
                    &name,
                    '|',
                    format!("LLM request #{} (attempt {})", r.id, r.attempt),
                    Tag::Note,
                );
                let n = self.nodes[i].llm_seen;
                self.nodes[i].llm_seen += 1;
                let model = self.spec.agents[i].llm.clone();
                let me = self.nodes[i].address.clone();
                let result = {
                    let t = self.nodes[i]
                        .agent
                        .as_ref()
                        .and_then(|a| a.thread(&r.thread_id));
                    model.answer(n, &r, &me, t, &mut self.llm)
                };
                let lat = self.llm.between(model.latency.0, model.latency.1);
                let inc = self.nodes[i].inc;
                let at = self.now.add(Duration::from_millis(lat));
                self.push(
                    at,
                    Ev::LlmResult {
                        node: i,
                        inc,
                        id: r.id,
                        result,
                    },
                );
                2
            }
            Output::ExecuteAction(a) => {
                self.stats.actions += 1;
                let verb = if a.undo { "undo" } else { "execute" };
                self.line(
                    &name,
                    '|',
                    format!("{verb} action #{} {}", a.id, a.action.action),
                    Tag::Note,
                );
                let model = self.spec.agents[i].actions.clone();
                let result = model.outcome(
                    &mut self.nodes[i].ledger,
                    a.id,
                    &a.action.action,
                    a.undo,
                    &mut self.acts,
                );
                let lat = self.acts.between(model.latency.0, model.latency.1);
                let inc = self.nodes[i].inc;
                let at = self.now.add(Duration::from_millis(lat));
                self.push(
                    at,
                    Ev::ActionResult {
                        node: i,
                        inc,
                        id: a.id,
                        result,
                    },
                );
                2
            }
            Output::Notify(n) => {
                let kind = serde_json::to_value(n.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default();
                self.line(
                    &name,
                    '|',
                    format!("notify ({kind}): {}", n.text),
                    Tag::User,
                );
                if n.kind == NotifyKind::Security
                    && self.spec.agents[i].user.key_change == KeyChangePolicy::Accept
                {
                    if let Some(peer) = n
                        .text
                        .strip_prefix("The identity key of ")
                        .and_then(|r| r.split_whitespace().next())
                        .and_then(|a| Address::parse(a).ok())
                    {
                        let (lo, hi) = self.spec.agents[i].user.delay;
                        let d = self.users.between(lo, hi);
                        let at = self.now.add(Duration::from_millis(d));
                        self.push(at, Ev::AcceptKey { node: i, peer });
                    }
                }
                2
            }
            Output::Audit(a) => {
                if a.bug {
                    let (at, name) = (self.elapsed(), self.nodes[i].name.clone());
                    self.checker
                        .fail(at, "core_bug", format!("{name} audited: {}", a.event));
                }
                self.on_audit(i, &a.event)
            }
            Output::CloseConnection => {
                if let Some(conn) = self.nodes[i].conn.take() {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.agent_open = false;
                    }
                    if !self.blocked(i, true) {
                        let l = self.latency(i);
                        let at = self.now.add(l);
                        let inc = self.relay_inc;
                        self.push(at, Ev::RelaySeesClose { conn, inc });
                    }
                    self.gc_conn(conn);
                    self.schedule_reconnect(i);
                }
                2
            }
        }
    }

    fn on_audit(&mut self, i: usize, event: &str) -> u8 {
        let name = self.nodes[i].name.clone();
        if let Some(rest) = event.strip_prefix("received ") {
            let mut w = rest.split_whitespace();
            let kind = w.next().unwrap_or("?").to_string();
            let pid = w.next().unwrap_or("?").to_string();
            let peer = w.nth(1).map(short).unwrap_or_default();
            if let Some((p, seen)) = self.nodes[i].delivering.as_mut() {
                if *p == pid {
                    *seen = true;
                }
            }
            let at = self.elapsed();
            self.checker.received(at, i, &name, &pid);
            self.line(
                &name,
                '<',
                format!("{kind} {pid} from {peer}"),
                Tag::Received { pid, kind, peer },
            );
            return 0;
        }
        if let Some(rest) = event.strip_prefix("duplicate ") {
            let pid = rest.split_whitespace().next().unwrap_or("");
            if let Some((p, seen)) = self.nodes[i].delivering.as_mut() {
                if p == pid {
                    *seen = true;
                }
            }
        }
        if let Some(rest) = event.strip_prefix("sent ") {
            self.stats.packets_sent += 1;
            if !self.record {
                return 1;
            }
            let mut w = rest.split_whitespace();
            let kind = w.next().unwrap_or("?").to_string();
            let pid = w.next().unwrap_or("?").to_string();
            let peer = w.nth(1).map(short).unwrap_or_default();
            let body = self.nodes[i]
                .agent
                .as_ref()
                .and_then(|a| {
                    a.threads()
                        .values()
                        .rev()
                        .flat_map(|t| t.history.iter().rev())
                        .find(|h| h.packet_id == pid)
                        .map(|h| summarize_packet(&h.json))
                })
                .unwrap_or_default();
            self.line(
                &name,
                '>',
                format!("{kind} {pid} to {peer}{body}"),
                Tag::Sent { pid, kind, peer },
            );
            return 1;
        }
        let tag = if event.starts_with("state ") {
            Tag::State
        } else {
            Tag::Note
        };
        self.line(&name, '|', event.to_string(), tag);
        1
    }

    fn rearm_agent(&mut self, i: usize) {
        let Some(a) = self.nodes[i].agent.as_ref() else {
            return;
        };
        let want = a.poll_timeout().map(|t| {
            let skew = self.spec.agents[i].skew_ms;
            let sim = t.as_millis() as i64 - skew;
            Timestamp::from_millis(sim.max(0) as u64).max(self.now)
        });
        let cur = self.nodes[i].timer;
        if cur.map(|k| k.0) == want {
            return;
        }
        if let Some(k) = cur {
            self.queue.remove(&k);
        }
        self.nodes[i].timer = want.map(|t| {
            let inc = self.nodes[i].inc;
            self.push(t, Ev::AgentTimer { node: i, inc })
        });
    }

    fn schedule_answer(&mut self, i: usize, prompt_id: u64) {
        let Some(p) = self.nodes[i].prompts.get(&prompt_id).cloned() else {
            return;
        };
        let consent = matches!(p.kind, a2acp_core::agent::PromptKind::Consent { .. });
        let key = (prompt_id, consent);
        let answer = match self.nodes[i].decisions.get(&key) {
            Some(a) => a.clone(),
            None => {
                let n = if consent {
                    self.nodes[i].consents_seen += 1;
                    self.nodes[i].consents_seen - 1
                } else {
                    self.nodes[i].resolutions_seen += 1;
                    self.nodes[i].resolutions_seen - 1
                };
                let a = self.spec.agents[i].user.decide(&p, n, &mut self.users);
                self.nodes[i].decisions.insert(key, a.clone());
                a
            }
        };
        if answer == UserAnswer::Never {
            return;
        }
        let (lo, hi) = self.spec.agents[i].user.delay;
        let d = self.users.between(lo, hi);
        let inc = self.nodes[i].inc;
        let at = self.now.add(Duration::from_millis(d));
        self.push(
            at,
            Ev::UserAnswer {
                node: i,
                inc,
                prompt: prompt_id,
            },
        );
    }

    fn answer_prompt(&mut self, i: usize, prompt_id: u64) {
        let Some(p) = self.nodes[i].prompts.get(&prompt_id).cloned() else {
            return;
        };
        let consent = matches!(p.kind, a2acp_core::agent::PromptKind::Consent { .. });
        let Some(answer) = self.nodes[i].decisions.get(&(prompt_id, consent)).cloned() else {
            return;
        };
        self.nodes[i].prompts.remove(&prompt_id);
        match answer {
            UserAnswer::Never => {}
            UserAnswer::Consent(a) => self.command(
                i,
                Command::AnswerConsent {
                    prompt_id,
                    answer: a,
                },
            ),
            UserAnswer::Resolution(a) => {
                if let ResolutionAnswer::MakeExcuse {
                    actual_reason: Some(r),
                } = &a
                {
                    self.checker.add_secret(i, r);
                }
                self.command(
                    i,
                    Command::AnswerResolution {
                        prompt_id,
                        answer: a,
                    },
                )
            }
        }
    }

    fn start_thread(&mut self, idx: usize) {
        let t = self.spec.threads[idx].clone();
        let to = self.nodes[t.to].address.clone();
        let before: BTreeSet<String> = self.nodes[t.from]
            .agent
            .as_ref()
            .map(|a| a.threads().keys().cloned().collect())
            .unwrap_or_default();
        self.command(
            t.from,
            Command::StartThread {
                to,
                intent: t.intent,
                context: t.context,
            },
        );
        if let Some(a) = self.nodes[t.from].agent.as_ref() {
            if let Some(id) = a.threads().keys().find(|k| !before.contains(*k)) {
                self.threads.insert(idx, id.clone());
            }
        }
    }

    fn scripted_command(&mut self, i: usize) {
        let c = self.spec.commands[i].clone();
        let tid = |s: &Self, t: usize| s.threads.get(&t).cloned();
        let cmd = match c.action {
            ScriptAction::UpdateContext { thread, context } => {
                let Some(id) = tid(self, thread) else { return };
                self.checker.user_resumed(c.agent, &id);
                Command::UpdateContext {
                    thread_id: id,
                    context,
                }
            }
            ScriptAction::UpdateIntent {
                thread,
                intent,
                reason,
            } => {
                let Some(id) = tid(self, thread) else { return };
                Command::UpdateIntent {
                    thread_id: id,
                    intent,
                    reason,
                }
            }
            ScriptAction::Cancel { thread } => {
                let Some(id) = tid(self, thread) else { return };
                Command::CancelThread { thread_id: id }
            }
            ScriptAction::AcceptKeyChange { peer } => Command::AcceptKeyChange {
                address: self.nodes[peer].address.clone(),
            },
            ScriptAction::Block { peer } => Command::Block(self.nodes[peer].address.clone()),
        };
        self.command(c.agent, cmd);
    }

    // ----- connections and the network -----

    fn schedule_reconnect(&mut self, i: usize) {
        let n = &self.nodes[i];
        if n.reconnect_pending || n.suspended || n.agent.is_none() || n.conn.is_some() {
            return;
        }
        let attempt = n.attempt.min(6);
        let base = 1000u64 << attempt;
        let jitter = self.net.between(0, base / 2);
        self.nodes[i].attempt += 1;
        self.nodes[i].reconnect_pending = true;
        let inc = self.nodes[i].inc;
        let at = self.now.add(Duration::from_millis(base + jitter));
        self.push(at, Ev::Reconnect { node: i, inc });
    }

    fn connect(&mut self, i: usize) {
        let n = &self.nodes[i];
        if n.conn.is_some() || n.agent.is_none() || n.suspended {
            return;
        }
        if self.relay.is_none() || self.blocked(i, true) || self.blocked(i, false) {
            self.schedule_reconnect(i);
            return;
        }
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.stats.connections += 1;
        self.conns.insert(
            conn,
            Conn {
                node: i,
                agent_open: true,
                relay_open: true,
                up_broken: false,
                down_broken: false,
                up_last: self.now,
                down_last: self.now,
            },
        );
        self.nodes[i].conn = Some(conn);
        self.feed(i, Input::Connected);
        let now = self.now;
        let t0 = self.tick();
        if let Some(r) = self.relay.as_mut() {
            r.handle(
                now,
                RelayInput::Connected {
                    conn,
                    source: a2acp_core::relay::Source(i as u128),
                },
            );
        }
        self.tock(t0);
        self.drain_relay();
    }

    fn gc_conn(&mut self, conn: ConnId) {
        if self
            .conns
            .get(&conn)
            .is_some_and(|c| !c.agent_open && !c.relay_open)
        {
            self.conns.remove(&conn);
        }
    }

    /// Puts a frame on the wire (`up`: agent → relay).
    fn transmit(&mut self, conn: ConnId, up: bool, bytes: Vec<u8>) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let node = c.node;
        self.stats.frames += 1;
        let broken = if up { c.up_broken } else { c.down_broken };
        if broken {
            self.stats.frames_lost += 1;
            return;
        }
        let mut link = self.spec.agents[node].link.clone();
        if self.now >= self.heal {
            // The network has healed: latency stays, random faults stop.
            link.loss = 0.0;
            link.duplicate = 0.0;
            link.reorder = 0.0;
        }
        if self.blocked(node, up) || self.net.chance(link.loss) {
            self.lose(conn, up);
            return;
        }
        let lat = Duration::from_millis(link.sample(&mut self.net));
        let mut at = self.now.add(lat);
        if self.net.chance(link.reorder) {
            at = at.add(Duration::from_millis(
                self.net.between(1, link.reorder_window),
            ));
        } else if let Some(c) = self.conns.get_mut(&conn) {
            let last = if up { &mut c.up_last } else { &mut c.down_last };
            at = at.max(*last);
            *last = at;
        }
        let dup = self.net.chance(link.duplicate);
        let inc = self.nodes[node].inc;
        let relay_inc = self.relay_inc;
        let mk = |b: Vec<u8>| {
            if up {
                Ev::ToRelay {
                    conn,
                    inc: relay_inc,
                    bytes: b,
                }
            } else {
                Ev::ToAgent {
                    node,
                    inc,
                    conn,
                    bytes: b,
                }
            }
        };
        if dup {
            self.stats.frames_duplicated += 1;
            let extra = self.net.between(0, lat.as_millis() as u64 + 1);
            let e = mk(bytes.clone());
            self.push(at.add(Duration::from_millis(extra)), e);
        }
        let e = mk(bytes);
        self.push(at, e);
    }

    /// A frame is lost: its stream is broken from here on; half the time both ends get a
    /// reset at once, otherwise they find out by their heartbeat timers.
    fn lose(&mut self, conn: ConnId, up: bool) {
        self.stats.frames_lost += 1;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if up {
            c.up_broken = true;
        } else {
            c.down_broken = true;
        }
        let node = c.node;
        let name = self.nodes[node].name.clone();
        let dir = if up { "to the relay" } else { "from the relay" };
        if self.net.chance(0.5) {
            self.line(
                "net",
                '|',
                format!("frame {dir} of {name} lost: connection reset"),
                Tag::Fault,
            );
            let l = self.latency(node);
            let at = self.now.add(l);
            let inc = self.nodes[node].inc;
            let rinc = self.relay_inc;
            self.push(at, Ev::AgentSeesClose { node, inc, conn });
            self.push(at, Ev::RelaySeesClose { conn, inc: rinc });
        } else {
            self.line(
                "net",
                '|',
                format!("frame {dir} of {name} lost: connection silently broken"),
                Tag::Fault,
            );
        }
    }

    // ----- relay -----

    fn drain_relay(&mut self) {
        let mut outs = Vec::new();
        let t0 = self.tick();
        match self.relay.as_mut() {
            Some(r) => {
                while let Some(o) = r.poll_output() {
                    outs.push(o);
                }
            }
            None => return,
        }
        self.tock(t0);
        let cut = if self.relay_crash_armed.is_some() && !outs.is_empty() {
            Some(self.faults.between(0, outs.len() as u64) as usize)
        } else {
            None
        };
        let total = outs.len();
        for (k, o) in outs.into_iter().enumerate() {
            if cut == Some(k) {
                let d = self.relay_crash_armed.take().unwrap_or_default();
                self.crash_relay(d, Some((k, total)));
                return;
            }
            self.exec_relay_output(o);
        }
        if cut == Some(total) {
            let d = self.relay_crash_armed.take().unwrap_or_default();
            self.crash_relay(d, Some((total, total)));
            return;
        }
        self.rearm_relay();
    }

    fn exec_relay_output(&mut self, o: RelayOutput) {
        match o {
            RelayOutput::Persist(op) => {
                if let PersistOp::Put { key, value } = &op {
                    let at = self.elapsed();
                    let recipient = key
                        .strip_prefix("q/")
                        .and_then(|r| r.rsplit_once('/'))
                        .and_then(|(a, _)| Address::parse(a).ok())
                        .and_then(|a| self.by_address.get(&a).copied());
                    self.checker.relay_put(at, key, value, recipient);
                }
                store(&mut self.relay_store, op);
            }
            RelayOutput::Send { conn, bytes } => {
                if self.conns.get(&conn).is_some_and(|c| c.relay_open) {
                    self.transmit(conn, false, bytes);
                }
            }
            RelayOutput::Close { conn, code } => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                c.relay_open = false;
                let node = c.node;
                let name = self.nodes[node].name.clone();
                self.line(
                    "relay",
                    '|',
                    format!("closed the connection of {name} ({})", code.as_str()),
                    Tag::Note,
                );
                if !self.blocked(node, false) {
                    let l = self.latency(node);
                    let at = self.now.add(l);
                    let inc = self.nodes[node].inc;
                    self.push(at, Ev::AgentSeesClose { node, inc, conn });
                }
                self.gc_conn(conn);
            }
            RelayOutput::Event(e) => {
                if !self.record {
                    return;
                }
                if let Some(text) = describe_relay_event(&e) {
                    let tag = match &e {
                        RelayEvent::Routed { from, to, .. } => Tag::Queued {
                            pid: None,
                            from: from.user().to_string(),
                            to: to.user().to_string(),
                        },
                        _ => Tag::Note,
                    };
                    self.line("relay", '|', text, tag);
                }
            }
        }
    }

    fn rearm_relay(&mut self) {
        let Some(r) = self.relay.as_ref() else {
            return;
        };
        let want = r.poll_timeout().map(|t| t.max(self.now));
        if self.relay_timer.map(|k| k.0) == want {
            return;
        }
        if let Some(k) = self.relay_timer {
            self.queue.remove(&k);
        }
        let inc = self.relay_inc;
        self.relay_timer = want.map(|t| self.push(t, Ev::RelayTimer { inc }));
    }

    // ----- faults -----

    fn crash_agent(&mut self, i: usize, restart_after: Duration, point: Option<(usize, usize)>) {
        if self.nodes[i].agent.is_none() {
            return;
        }
        self.stats.agent_crashes += 1;
        let name = self.nodes[i].name.clone();
        let how = match point {
            Some((k, n)) => format!("after {k} of {n} outputs of a step"),
            None => "while idle".to_string(),
        };
        self.line(
            &name,
            '|',
            format!("CRASH ({how}); restarts in {}", fmt_duration(restart_after)),
            Tag::Fault,
        );
        let n = &mut self.nodes[i];
        n.agent = None;
        n.inc += 1;
        n.prompts.clear();
        n.scheduled.clear();
        n.reconnect_pending = false;
        n.delivering = None;
        if let Some(k) = n.timer.take() {
            self.queue.remove(&k);
        }
        if let Some(conn) = self.nodes[i].conn.take() {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.agent_open = false;
            }
            if !self.blocked(i, true) {
                let l = self.latency(i);
                let at = self.now.add(l);
                let inc = self.relay_inc;
                self.push(at, Ev::RelaySeesClose { conn, inc });
            }
            self.gc_conn(conn);
        }
        let at = self.now.add(restart_after);
        self.push(at, Ev::RestartAgent { node: i });
    }

    fn restart_agent(&mut self, i: usize) {
        if self.nodes[i].agent.is_some() {
            return;
        }
        let config = self.spec.agents[i].config.clone();
        let n = &self.nodes[i];
        let seed = derive_seed(self.seed, &format!("agent/{}/restart{}", n.name, n.inc));
        let records = n.store.clone();
        let identity = IdentityKey::from_seed(n.identity);
        let name = n.name.clone();
        let t0 = self.tick();
        let restored = Agent::restore(config, identity, seed, records);
        self.tock(t0);
        match restored {
            Ok(a) => {
                self.checker.restored(i, &a);
                self.nodes[i].agent = Some(a);
                self.line(
                    &name,
                    '|',
                    "restarted from its persisted state".into(),
                    Tag::Fault,
                );
                self.drain_agent(i);
                self.nodes[i].attempt = 0;
                let inc = self.nodes[i].inc;
                self.nodes[i].reconnect_pending = true;
                let at = self.now.add(Duration::from_millis(100));
                self.push(at, Ev::Reconnect { node: i, inc });
                self.replay_deferred(i);
            }
            Err(e) => {
                let at = self.elapsed();
                self.checker.fail(
                    at,
                    "restore",
                    format!("{name} could not be restored from its persisted records: {e}"),
                );
            }
        }
    }

    fn suspend(&mut self, i: usize, length: Duration) {
        let name = self.nodes[i].name.clone();
        self.line(
            &name,
            '|',
            format!("device shut for {} (offline)", fmt_duration(length)),
            Tag::Fault,
        );
        let n = &mut self.nodes[i];
        n.suspended = true;
        if let Some(k) = n.timer.take() {
            self.queue.remove(&k);
        }
        if let Some(conn) = self.nodes[i].conn {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.up_broken = true;
                c.down_broken = true;
            }
        }
        let at = self.now.add(length);
        self.push(at, Ev::Resume { node: i });
    }

    fn resume(&mut self, i: usize) {
        if !self.nodes[i].suspended {
            return;
        }
        self.nodes[i].suspended = false;
        let name = self.nodes[i].name.clone();
        self.line(&name, '|', "device back on".into(), Tag::Fault);
        if self.nodes[i].agent.is_none() {
            self.replay_deferred(i);
            return;
        }
        if let Some(conn) = self.nodes[i].conn.take() {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.agent_open = false;
            }
            self.gc_conn(conn);
            self.feed(i, Input::Disconnected);
        }
        let now = self.agent_now(i);
        let t0 = self.tick();
        if let Some(a) = self.nodes[i].agent.as_mut() {
            a.handle_timeout(now);
        }
        self.tock(t0);
        self.drain_agent(i);
        self.nodes[i].attempt = 0;
        self.schedule_reconnect(i);
        self.replay_deferred(i);
    }

    fn crash_relay(&mut self, down_for: Duration, point: Option<(usize, usize)>) {
        if self.relay.is_none() {
            return;
        }
        self.stats.relay_crashes += 1;
        let how = match point {
            Some((k, n)) => format!("after {k} of {n} outputs of a step"),
            None => "while idle".to_string(),
        };
        self.line(
            "relay",
            '|',
            format!("CRASH ({how}); restarts in {}", fmt_duration(down_for)),
            Tag::Fault,
        );
        self.relay = None;
        self.relay_inc += 1;
        if let Some(k) = self.relay_timer.take() {
            self.queue.remove(&k);
        }
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for conn in conns {
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            c.relay_open = false;
            let node = c.node;
            if c.agent_open && !self.blocked(node, false) {
                let l = self.latency(node);
                let at = self.now.add(l);
                let inc = self.nodes[node].inc;
                self.push(at, Ev::AgentSeesClose { node, inc, conn });
            }
            self.gc_conn(conn);
        }
        let at = self.now.add(down_for);
        self.push(at, Ev::RestartRelay);
    }

    fn restart_relay(&mut self) {
        if self.relay.is_some() || self.relay_broken {
            return;
        }
        let seed = derive_seed(self.seed, &format!("relay#{}", self.relay_inc));
        let t0 = self.tick();
        let r = Relay::restore(
            self.spec.relay.config.clone(),
            seed,
            self.relay_store.clone(),
        );
        self.tock(t0);
        match r {
            Ok(r) => {
                self.relay = Some(r);
                self.line(
                    "relay",
                    '|',
                    "restarted from its persisted state".into(),
                    Tag::Fault,
                );
            }
            Err(e) => {
                self.relay_broken = true;
                let at = self.elapsed();
                self.checker.fail(
                    at,
                    "restore",
                    format!("the relay could not be restored from its persisted records: {e}"),
                );
            }
        }
    }

    /// An agent is re-installed with a new identity key (its records kept), and the relay
    /// operator moves its registration to the new key (relay restarted on the edited
    /// records). Peers that pinned the old key must notice (§16).
    fn key_change(&mut self, k: usize) {
        let i = self.spec.key_changes[k].agent;
        let name = self.nodes[i].name.clone();
        self.nodes[i].identity_gen += 1;
        let identity = derive_seed(
            self.seed,
            &format!("identity/{name}/{}", self.nodes[i].identity_gen),
        );
        self.nodes[i].identity = identity;
        let key = IdentityKey::from_seed(identity).public().to_bytes();
        self.line(
            &name,
            '|',
            "re-installed with a new identity key; the relay operator re-binds the address".into(),
            Tag::Fault,
        );
        // The operator: relay down, registration edited, relay up.
        if self.relay.is_some() {
            self.crash_relay(Duration::ZERO, None);
        }
        let reg = format!("reg/{}", self.nodes[i].address);
        if let Some(v) = self.relay_store.get(&reg) {
            if let Ok(mut rec) = serde_json::from_slice::<serde_json::Value>(v) {
                rec["key"] = serde_json::Value::String(b64url(&key));
                if let Ok(bytes) = serde_json::to_vec(&rec) {
                    self.relay_store.insert(reg, bytes);
                }
            }
        }
        // The agent restarts with the new key.
        if self.nodes[i].agent.is_some() {
            self.crash_agent(i, Duration::from_secs(1), None);
        }
    }

    // ----- the end -----

    fn finals(&self) -> Vec<(String, String, ThreadState)> {
        let mut numbers: BTreeMap<&str, usize> = BTreeMap::new();
        for (k, id) in &self.threads {
            numbers.insert(id.as_str(), k + 1);
        }
        let mut out = Vec::new();
        for n in &self.nodes {
            let Some(a) = n.agent.as_ref() else { continue };
            for t in a.threads().values() {
                let label = match numbers.get(t.id.as_str()) {
                    Some(k) => format!("{k}"),
                    None => t.id.clone(),
                };
                out.push((label, n.name.clone(), t.state));
            }
        }
        out.sort();
        out
    }

    fn first_resolution_metrics(&self) -> Vec<(usize, u32, u32)> {
        let mut out = Vec::new();
        for (k, id) in &self.threads {
            let from = self.spec.threads[*k].from;
            let Some(t) = self.nodes[from].agent.as_ref().and_then(|a| a.thread(id)) else {
                continue;
            };
            let mut packets = 0;
            let mut found = false;
            for h in &t.history {
                if h.kind == "thread_state" {
                    continue;
                }
                packets += 1;
                if h.kind == "resolution" {
                    found = true;
                    break;
                }
            }
            if found {
                let prompts: usize = self
                    .nodes
                    .iter()
                    .map(|n| n.consent_prompts.get(id).map_or(0, BTreeSet::len))
                    .sum();
                out.push((*k, packets, prompts as u32));
            }
        }
        out
    }

    /// The prompts shown per agent (for metrics).
    pub fn prompts_shown(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.prompts_shown).collect()
    }

    fn final_checks(&mut self) {
        let at = self.elapsed();
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        for n in &self.nodes {
            if n.agent.is_none() {
                self.checker.violations.push(Violation {
                    at,
                    check: "liveness",
                    detail: format!("{} is still down at the end of the run", n.name),
                });
            }
        }
        let mut received: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(a) = n.agent.as_ref() {
                received.insert(
                    i,
                    a.threads()
                        .values()
                        .flat_map(|t| t.received_ids.iter().cloned())
                        .collect(),
                );
            }
        }
        self.checker.final_audit(at, &received, &names);
        // Threads by id, seen from each side.
        let mut by_id: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(a) = n.agent.as_ref() {
                for id in a.threads().keys() {
                    by_id.entry(id.clone()).or_default().push(i);
                }
            }
        }
        let mut fails = Vec::new();
        for (id, sides) in &by_id {
            let ts: Vec<(usize, &a2acp_core::agent::Thread)> = sides
                .iter()
                .filter_map(|&i| {
                    self.nodes[i]
                        .agent
                        .as_ref()
                        .and_then(|a| a.thread(id))
                        .map(|t| (i, t))
                })
                .collect();
            let describe = |ts: &[(usize, &a2acp_core::agent::Thread)]| -> String {
                ts.iter()
                    .map(|(i, t)| {
                        format!(
                            "{} {} waiting {:?}{}",
                            names[*i],
                            t.state,
                            t.waiting,
                            if t.halted { " halted" } else { "" }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let all_terminal = ts.iter().all(|(_, t)| t.state.is_terminal());
            let on_human = ts.iter().any(|(i, t)| {
                !t.state.is_terminal()
                    && (t.waiting == Waiting::User
                        || t.halted
                        || self.nodes[*i].prompts.values().any(|p| &p.thread_id == id))
            });
            if !all_terminal && !on_human {
                fails.push((
                    "liveness",
                    format!(
                        "{id} is neither finished nor waiting on a person after the network healed: {}",
                        describe(&ts)
                    ),
                ));
            }
            if ts.len() == 2 {
                let (a, b) = (ts[0].1, ts[1].1);
                let both = a.state.is_terminal() && b.state.is_terminal();
                if both && a.state != b.state {
                    fails.push((
                        "agreement",
                        format!("{id} ended differently: {}", describe(&ts)),
                    ));
                } else if both && a.state == ThreadState::Completed {
                    let ra = a.resolution.as_ref().map(|r| r.packet_id.clone());
                    let rb = b.resolution.as_ref().map(|r| r.packet_id.clone());
                    if ra != rb {
                        fails.push((
                            "agreement",
                            format!("{id} completed on different resolutions: {ra:?} vs {rb:?}"),
                        ));
                    }
                } else if a.state.is_terminal() != b.state.is_terminal() {
                    fails.push((
                        "agreement",
                        format!(
                            "{id} ended on one side only after the network healed: {}",
                            describe(&ts)
                        ),
                    ));
                }
            }
        }
        for (check, detail) in fails {
            self.checker.fail(at, check, detail);
        }
        // Scenario expectations.
        let mut unmet = Vec::new();
        for e in &self.spec.expect {
            let Some(id) = self.threads.get(&e.thread) else {
                unmet.push(format!("thread {} was never started", e.thread + 1));
                continue;
            };
            for (i, want) in &e.states {
                let got = self.nodes[*i]
                    .agent
                    .as_ref()
                    .and_then(|a| a.thread(id))
                    .map(|t| t.state);
                if got != Some(*want) {
                    unmet.push(format!(
                        "thread {} at {}: expected {want}, got {}",
                        e.thread + 1,
                        names[*i],
                        got.map(|s| s.to_string())
                            .unwrap_or_else(|| "no thread".into())
                    ));
                }
            }
        }
        for u in unmet {
            self.checker.fail(at, "expect", u);
        }
    }
}

/// Applies `op` to `records` as [`a2acp_core::persist::apply`] does, moving the key and
/// value in instead of copying them.
fn store(records: &mut BTreeMap<String, Vec<u8>>, op: PersistOp) {
    match op {
        PersistOp::Put { key, value } => {
            records.insert(key, value);
        }
        PersistOp::Delete { key } => {
            records.remove(&key);
        }
    }
}

/// A put of one entry of a thread's history (`history/<thread>/<n>`).
fn is_history_put(o: &Output) -> bool {
    matches!(o, Output::Persist(PersistOp::Put { key, .. }) if key.starts_with("history/"))
}

fn b64url(b: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk.len();
        let v = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for k in 0..=n {
            out.push(A[((v >> (18 - 6 * k)) & 63) as usize] as char);
        }
    }
    out
}

/// Runs `spec` with `seed`: the report and the rendered transcript.
pub fn run(spec: Spec, seed: u64) -> (Report, String) {
    let (r, t, _) = Sim::new(spec, seed).run();
    (r, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_the_wire_encoding() {
        assert_eq!(b64url(b"\xff\xfe\xfd"), "__79");
        assert_eq!(b64url(b"ab"), "YWI");
        assert_eq!(b64url(b"a"), "YQ");
    }
}
