//! The simulation engine: one virtual clock, one event queue, agents and a relay driven
//! through their public contract only, a seeded network between them, and the world
//! models (users, LLMs, action executors) around them.
//!
//! The queue orders events by `(time, sequence)`: events at the same instant run in the
//! order they were scheduled. Every random choice comes from streams derived from the
//! run seed, nothing reads a clock, and every map iterated is ordered: a run is a pure
//! function of (scenario, seed).
//!
//! The simulator plays the runtime: it executes every output in order (persist operations
//! go to an in-memory store per participant), arms timers, reconnects with exponential
//! backoff after a disconnection, restarts crashed participants from exactly what they
//! persisted, and answers prompts, LLM calls and actions with the world models.
//!
//! # Where things are
//!
//! - `mod.rs`: the [`Sim`] of one run — its state, construction, the final report;
//! - `events.rs`: what can happen (the events), scheduling them, and the loop's dispatch
//!   of each event;
//! - `queue.rs`: the event queue;
//! - `agent_node.rs`: the agent node — feeding the agent, executing its outputs, the
//!   user's answers and scripted commands;
//! - `audit.rs`: what the simulator learns from the agent's typed events (a match on
//!   [`a2acp_core::agent::AgentEvent`]);
//! - `relay_node.rs`: the relay nodes — feeding a relay and executing its outputs;
//! - `federation.rs`: several relays, one per domain (§16) — discovery answered from the
//!   world's table of relays, relay links dialed over the simulated network, partitions
//!   between two relays;
//! - `network.rs`: the network model — connections, latency, loss, duplication,
//!   reordering, partitions and reconnection;
//! - `faults.rs`: the fault model — crashes, restarts, devices shut, key changes.
//!
//! The invariant checks live in [`crate::check`], one file per property.

mod agent_node;
mod audit;
mod device;
mod events;
mod faults;
mod federation;
mod network;
mod queue;
mod recovery;
mod relay_node;
mod rotation;

pub use self::rotation::{median_and_worst, RotationFigure};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use a2acp_core::agent::{Agent, ThreadState};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::persist::PersistOp;
use a2acp_core::relay::{ConnId, RelayOutput};
use a2acp_core::{Address, Timestamp};

use crate::check::{plaintext_markers, Audit, Checker, End, Violation};
use crate::scenario::Spec;
use crate::transcript::{render_with, short, IdNames, Line, Tag};
use crate::util::{derive_seed, Rng};

use self::agent_node::Node;
use self::events::Ev;
use self::network::Conn;
use self::queue::Queue;
pub(crate) use self::relay_node::relay_key;
use self::relay_node::RelayNode;

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
    /// Relay links that came up (both sides authenticated; federated worlds).
    pub relay_links: u64,
    /// Wake-ups relays asked for (agents offline with an endpoint).
    pub wake_ups: u64,
    /// Packets handed over from one relay to another (settled by the receiving relay).
    pub handed_over: u64,
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

/// What a group thread's coordinator did, from its typed events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GroupLog {
    /// Flexibility requests sent (§10.2).
    pub(crate) flexibility: u32,
    /// Each proposal's required confirmations, in order.
    pub(crate) proposals: Vec<u32>,
    /// A proposal reached its quorum.
    pub(crate) reached: bool,
}

/// Metrics of one group thread a scenario started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetrics {
    /// Group index in the scenario.
    pub group: usize,
    /// Agents in the group, the coordinator included.
    pub size: usize,
    /// Per participant, in the scenario's order: packets on its leg (summaries aside) up
    /// to and including the first resolution, if one was sent on it.
    pub packets_to_resolution: Vec<Option<u32>>,
    /// Per participant: distinct prompts (consent and resolution) its user saw on its leg.
    pub participant_prompts: Vec<u32>,
    /// Distinct prompts the coordinator's user saw for the group (its legs and the group's
    /// own resolution prompt).
    pub coordinator_prompts: u32,
    /// Flexibility requests the coordinator sent.
    pub flexibility_requests: u32,
    /// Required confirmations of each proposal, in order.
    pub proposals: Vec<u32>,
    /// A proposal reached its quorum.
    pub reached: bool,
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
    /// Metrics of the group threads the scenario started.
    pub groups: Vec<GroupMetrics>,
    /// Each key rotation and the time to every peer re-pinned.
    pub rotations: Vec<RotationFigure>,
}

impl Report {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// One simulation run.
pub struct Sim {
    spec: Spec,
    seed: u64,
    now: Timestamp,
    start: Timestamp,
    queue: Queue,
    seq: u64,
    net: Rng,
    users: Rng,
    llm: Rng,
    acts: Rng,
    faults: Rng,
    /// The relays: one, or one per domain when the world federates.
    relays: Vec<RelayNode>,
    /// The buffer a relay's step is drained into (reused from step to step).
    relay_outs: Vec<RelayOutput>,
    /// Each agent's relay (the one of its address's domain; `None`: no relay serves it).
    agent_relay: Vec<Option<usize>>,
    /// The relay partitions in force (indices in the federation's list).
    active_relay_partitions: BTreeSet<usize>,
    nodes: Vec<Node>,
    by_address: BTreeMap<Address, usize>,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: u64,
    active_partitions: BTreeSet<usize>,
    heal: Timestamp,
    threads: BTreeMap<usize, String>,
    groups: BTreeMap<usize, String>,
    /// The spaces the scenario created: index → space id.
    spaces: BTreeMap<usize, String>,
    group_log: BTreeMap<String, GroupLog>,
    keys: rotation::KeyLog,
    /// New devices' recovery exchanges under way: connection → (node, the exchange, its
    /// new key's seed).
    recovering: BTreeMap<ConnId, (usize, a2acp_core::recover_client::RecoverClient, [u8; 32])>,
    transcript: Vec<Line>,
    record: bool,
    checker: Checker,
    stats: Stats,
    stopwatch: Option<Box<dyn Stopwatch>>,
}

impl Sim {
    /// A run of `spec` with `seed`.
    pub fn new(spec: Spec, seed: u64) -> Self {
        let markers = plaintext_markers(&spec);
        let start = spec.start;
        let relays = RelayNode::all(&spec, seed);
        let agent_relay = spec
            .agents
            .iter()
            .map(|a| RelayNode::serving(&relays, &a.config.address))
            .collect();
        let mut nodes = Vec::new();
        let mut by_address = BTreeMap::new();
        let addresses: Vec<a2acp_core::Address> = spec
            .agents
            .iter()
            .map(|a| a.config.address.clone())
            .collect();
        for (i, a) in spec.agents.iter().enumerate() {
            let identity = derive_seed(seed, &format!("identity/{}", a.name));
            let mut agent = Agent::new(
                a.config.clone(),
                IdentityKey::from_seed(identity),
                derive_seed(seed, &format!("agent/{}", a.name)),
            );
            // The memory_stays checker's planted memory (sim/src/check/memory.rs).
            // Given at the agent's own clock (its skew), as every input.
            let own = Timestamp::from_millis((start.as_millis() as i64 + a.skew_ms).max(0) as u64);
            let ndjson = crate::check::memory::planted_memory(&a.config.address, &addresses, own);
            if !ndjson.is_empty() {
                agent.handle_command(own, a2acp_core::agent::Command::ImportMemory { ndjson });
            }
            by_address.insert(a.config.address.clone(), i);
            nodes.push(Node::new(
                a.name.clone(),
                a.config.address.clone(),
                agent,
                identity,
            ));
        }
        let record = spec.transcript;
        let mut sim = Sim {
            seed,
            now: start,
            start,
            queue: Queue::default(),
            seq: 0,
            net: Rng::new(seed, "net"),
            users: Rng::new(seed, "users"),
            llm: Rng::new(seed, "llm"),
            acts: Rng::new(seed, "actions"),
            faults: Rng::new(seed, "faults"),
            relays,
            relay_outs: Vec::new(),
            agent_relay,
            active_relay_partitions: BTreeSet::new(),
            nodes,
            by_address,
            conns: BTreeMap::new(),
            next_conn: 1,
            active_partitions: BTreeSet::new(),
            heal: start.add(spec.heal_at()),
            threads: BTreeMap::new(),
            groups: BTreeMap::new(),
            spaces: BTreeMap::new(),
            group_log: BTreeMap::new(),
            keys: rotation::KeyLog::default(),
            recovering: BTreeMap::new(),
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

    /// Runs to the end of the scenario and runs the final checks.
    pub fn run(mut self) -> (Report, String, Vec<Line>) {
        let end = self.start.add(self.spec.end_at());
        while let Some((at, _)) = self.queue.first_key() {
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
        let groups = self.group_metrics();
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
            groups,
            rotations: self.keys.figures(&self.names()),
        };
        (report, text, std::mem::take(&mut self.transcript))
    }

    /// The agents' names, by node.
    fn names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
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
        out += &self.render_spaces();
        let a = self.checker.audit;
        out += &format!(
            "# exactly-once audit: accepted {} delivered {} refused {} lost {} duplicated {} unexpected {}{}\n",
            a.accepted,
            a.delivered,
            a.refused,
            a.lost,
            a.duplicated,
            a.unexpected,
            if a.space_delivered > 0 {
                format!(" (space packets delivered at least once {})", a.space_delivered)
            } else {
                String::new()
            }
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

    /// The final state of each space the scenario created, as its creator holds it, and
    /// which agents hold a replica equal to it.
    fn render_spaces(&self) -> String {
        let mut out = String::new();
        for (k, id) in &self.spaces {
            let c = self.spec.spaces[*k].creator;
            let Some(s) = self.nodes[c].agent.as_ref().and_then(|a| a.space(id)) else {
                continue;
            };
            out += &format!(
                "# space s{} “{}” ({} updates) at {}:\n",
                k + 1,
                s.replica.definition.name,
                s.replica.len(),
                self.nodes[c].name
            );
            for (f, u) in s.replica.fields() {
                let v = serde_json::to_string(&u.value).unwrap_or_default();
                out += &format!(
                    "#   {f} = {v} (v{}, {})\n",
                    u.version,
                    short(u.writer.as_str())
                );
            }
            let same: Vec<&str> = self
                .nodes
                .iter()
                .filter(|n| {
                    n.agent
                        .as_ref()
                        .and_then(|a| a.space(id))
                        .is_some_and(|o| o.replica == s.replica)
                })
                .map(|n| n.name.as_str())
                .collect();
            out += &format!("#   same replica at: {}\n", same.join(", "));
        }
        out
    }

    fn finals(&self) -> Vec<(String, String, ThreadState)> {
        let mut numbers: BTreeMap<String, String> = BTreeMap::new();
        for (k, id) in &self.threads {
            numbers.insert(id.clone(), format!("{}", k + 1));
        }
        // A leg of a scenario's group k is `gk/<participant>`.
        for (k, gid) in &self.groups {
            let c = self.spec.groups[*k].coordinator;
            let Some(g) = self.nodes[c]
                .agent
                .as_ref()
                .and_then(|a| a.groups().get(gid))
            else {
                continue;
            };
            for (p, lid) in &g.legs {
                let who = self
                    .by_address
                    .get(p)
                    .map_or_else(|| p.to_string(), |&i| self.nodes[i].name.clone());
                numbers.insert(lid.clone(), format!("g{}/{who}", k + 1));
            }
        }
        let mut out = Vec::new();
        for n in &self.nodes {
            let Some(a) = n.agent.as_ref() else { continue };
            for t in a.threads().values() {
                let label = match numbers.get(t.id.as_str()) {
                    Some(k) => k.clone(),
                    None => t.id.clone(),
                };
                out.push((label, n.name.clone(), t.state));
            }
        }
        out.sort();
        out
    }

    fn first_resolution_metrics(&self) -> Vec<(usize, u32, u32)> {
        // Consent prompts per thread id over every agent, counted once (looking each
        // thread up in every agent was threads × agents lookups: most of the end of a
        // 10,000-agent run).
        let mut consents: HashMap<&str, usize> = HashMap::new();
        for n in &self.nodes {
            for (id, prompts) in &n.consent_prompts {
                *consents.entry(id.as_str()).or_default() += prompts.len();
            }
        }
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
                let prompts = consents.get(id.as_str()).copied().unwrap_or(0);
                out.push((*k, packets, prompts as u32));
            }
        }
        out
    }

    fn group_metrics(&self) -> Vec<GroupMetrics> {
        let distinct = |node: usize, id: &str| -> u32 {
            let n = &self.nodes[node];
            let c = n.consent_prompts.get(id).map_or(0, BTreeSet::len);
            let r = n.resolution_prompts.get(id).map_or(0, BTreeSet::len);
            (c + r) as u32
        };
        let mut out = Vec::new();
        for (k, gid) in &self.groups {
            let spec = &self.spec.groups[*k];
            let c = spec.coordinator;
            let Some(agent) = self.nodes[c].agent.as_ref() else {
                continue;
            };
            let Some(g) = agent.groups().get(gid) else {
                continue;
            };
            let mut packets_to_resolution = Vec::new();
            let mut participant_prompts = Vec::new();
            let mut coordinator_prompts = distinct(c, gid);
            for &p in &spec.participants {
                let Some(lid) = g.legs.get(&self.nodes[p].address) else {
                    packets_to_resolution.push(None);
                    participant_prompts.push(0);
                    continue;
                };
                coordinator_prompts += distinct(c, lid);
                participant_prompts.push(distinct(p, lid));
                let mut packets = 0;
                let mut found = None;
                if let Some(t) = agent.thread(lid) {
                    for h in t.history.iter().filter(|h| h.kind != "thread_state") {
                        packets += 1;
                        if h.kind == "resolution" {
                            found = Some(packets);
                            break;
                        }
                    }
                }
                packets_to_resolution.push(found);
            }
            let log = self.group_log.get(gid).cloned().unwrap_or_default();
            out.push(GroupMetrics {
                group: *k,
                size: spec.participants.len() + 1,
                packets_to_resolution,
                participant_prompts,
                coordinator_prompts,
                flexibility_requests: log.flexibility,
                proposals: log.proposals,
                reached: log.reached,
            });
        }
        out
    }

    /// The prompts shown per agent (for metrics).
    pub fn prompts_shown(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.prompts_shown).collect()
    }

    /// The checks at the end of the run ([`Checker::finish`]).
    fn final_checks(&mut self) {
        let at = self.elapsed();
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        let addresses: Vec<Address> = self.nodes.iter().map(|n| n.address.clone()).collect();
        let end = End {
            at,
            names: &names,
            agents: self.nodes.iter().map(|n| n.agent.as_ref()).collect(),
            prompted: self
                .nodes
                .iter()
                .map(|n| n.prompts.values().map(|p| p.thread_id.as_str()).collect())
                .collect(),
            expect: &self.spec.expect,
            started: &self.threads,
            addresses: &addresses,
            groups: self
                .groups
                .iter()
                .map(|(k, id)| (*k, (self.spec.groups[*k].coordinator, id.as_str())))
                .collect(),
        };
        self.checker.finish(&end);
    }

    // ----- plumbing, for every part of the world -----

    pub(super) fn elapsed(&self) -> Duration {
        self.now.since(self.start)
    }

    pub(super) fn tick(&mut self) -> u64 {
        self.stopwatch.as_mut().map_or(0, |s| s.nanos())
    }

    pub(super) fn tock(&mut self, t0: u64) {
        if let Some(s) = self.stopwatch.as_mut() {
            self.stats.core_nanos += s.nanos().saturating_sub(t0);
        }
    }

    pub(super) fn line(&mut self, who: &str, mark: char, text: String, tag: Tag) {
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

    pub(super) fn agent_now(&self, i: usize) -> Timestamp {
        let skew = self.spec.agents[i].skew_ms;
        let t = self.now.as_millis() as i64 + skew;
        Timestamp::from_millis(t.max(0) as u64)
    }
}

/// What one participant persisted: its records by key. Only looked up and written while
/// the run goes on (a hash map); read in key order when it restarts ([`persisted`]).
pub(super) type Records = HashMap<String, Vec<u8>>;

/// The records of `records` in key order, as a participant restarting reads them.
pub(super) fn persisted(records: &Records) -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<(String, Vec<u8>)> = records
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    all
}

/// Applies `op` to `records` as [`a2acp_core::persist::apply`] does, moving the key and
/// value in instead of copying them.
fn store(records: &mut Records, op: PersistOp) {
    match op {
        PersistOp::Put { key, value } => {
            records.insert(key, value);
        }
        PersistOp::Delete { key } => {
            records.remove(&key);
        }
    }
}

/// Runs `spec` with `seed`: the report and the rendered transcript.
pub fn run(spec: Spec, seed: u64) -> (Report, String) {
    let (r, t, _) = Sim::new(spec, seed).run();
    (r, t)
}
