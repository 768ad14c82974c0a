//! Invariant checkers, one file per property, run as every event's effects happen, plus
//! the checks at the end of a run ([`Checker::finish`]):
//!
//! - [`never_share`]: no outgoing plaintext packet contains a never_share value;
//! - [`asked_twice`]: no agent asks the same field twice in a thread (§6.4);
//! - [`round_trips`]: the round-trip limit holds (§6.4);
//! - [`exactly_once`]: every packet the relay accepted reaches its recipient's logic
//!   exactly once — audited Jepsen-style as lost / duplicated / unexpected;
//! - [`relay_plaintext`]: no record the relay stores contains plaintext;
//! - [`agreement`] and [`liveness`], at the end of a run (a leg of a group thread is a
//!   two-party thread; a leg waits on a person when any leg of its group does, or the
//!   coordinator's user has the group's prompt open);
//! - [`group`][self::group]: **privacy** (no participant's shared value reaches another participant)
//!   and **group_agreement** (every completed leg completed on the coordinator's
//!   proposal), at the end of a run;
//! - [`space`][self::space]: **space_convergence** (after healing, every replica of a
//!   space is identical) and **space_permission** (no write exceeds its writer's
//!   permission or tiers), at the end of a run;
//! - [`core_bug`]: the agent never audits an internal inconsistency;
//! - [`restore`]: crashed participants restart from what they persisted;
//! - [`memory`]: **memory_stays**: what only an agent's relationship memory holds is in
//!   no packet it sends and in no record the relay stores;
//! - [`wake_up`]: a wake-up goes only to an endpoint an agent registered, carries
//!   nothing but that endpoint, and comes at most once per interval per agent;
//! - [`receipts`]: every value an agent sends is covered by a consent receipt it stored,
//!   signed by its key, naming that value's salted hash;
//! - [`consent`]: **taken_back** (a field taken back is not shared again in its thread, a
//!   value deleted — taken back or expired — is in no later packet) and **no_reshare** (a
//!   value shared under "no re-sharing" reaches no one but who shared it);
//! - [`expect`]: the final states a scenario expects.
//!
//! The world ([`crate::world`]) feeds them what happened, from the agent's typed events
//! ([`a2acp_core::agent::AgentEvent`]), never from audit text.

pub mod agreement;
pub mod asked_twice;
pub mod consent;
pub mod core_bug;
pub mod exactly_once;
pub mod expect;
pub mod group;
pub mod liveness;
pub mod memory;
pub mod never_share;
mod probe;
pub mod receipts;
pub mod relay_plaintext;
pub mod restore;
pub mod round_trips;
pub mod space;
pub mod wake_up;

pub use exactly_once::Audit;
pub use relay_plaintext::plaintext_markers;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use a2acp_core::agent::{Agent, Thread};

use crate::scenario::Expect;

/// The checkers' names, as used in reports and `known_issue` entries.
pub const CHECKS: &[&str] = &[
    "never_share",
    "asked_twice",
    "round_trips",
    "exactly_once",
    "relay_plaintext",
    "agreement",
    "liveness",
    "core_bug",
    "restore",
    "expect",
    "privacy",
    "group_agreement",
    "space_convergence",
    "space_permission",
    "memory_stays",
    "wake_up",
    "receipts",
    "taken_back",
    "no_reshare",
];

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// When, since the start of the run.
    pub at: Duration,
    /// Which checker.
    pub check: &'static str,
    /// What exactly.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}] at {}: {}",
            self.check,
            crate::util::fmt_duration(self.at),
            self.detail
        )
    }
}

/// What the thread checks remember of one thread of one agent.
#[derive(Debug, Default, Clone)]
struct ThreadCheck {
    scanned: usize,
    asked: BTreeSet<String>,
    flexed: BTreeSet<String>,
    exchanges: u32,
}

/// The checkers' state.
#[derive(Debug, Default)]
pub struct Checker {
    /// Violations found, in order.
    pub violations: Vec<Violation>,
    /// Per agent, per thread id.
    threads: BTreeMap<usize, BTreeMap<String, ThreadCheck>>,
    /// Secret texts typed by users (excuse reasons), per agent.
    extra_secrets: BTreeMap<usize, BTreeSet<String>>,
    /// Envelope signature → (sender, packet id). Only looked up, never iterated: a hash
    /// map (one lookup per frame delivered and per record the relay queues).
    sigs: HashMap<String, (usize, String)>,
    /// Recipient → packet ids accepted by the relay for it (iterated in (recipient, packet
    /// id) order by the final audit).
    accepted: BTreeMap<usize, BTreeSet<String>>,
    /// Packet ids handed to each agent's logic in its surviving history.
    handled: BTreeMap<usize, BTreeSet<String>>,
    /// (recipient, packet id) refused by the recipient.
    refused: BTreeSet<(usize, String)>,
    /// (recipient, packet id) of space packets handled by the recipient's space logic.
    space_handled: BTreeSet<(usize, String)>,
    /// Ids of the space packets agents sealed.
    space_sent: BTreeSet<String>,
    /// (recipient, packet id) of deliveries the recipient's step acknowledged.
    acked: BTreeSet<(usize, String)>,
    /// Texts that must never appear in relay records.
    markers: Vec<String>,
    /// Audit counts.
    pub audit: Audit,
    /// When each endpoint was last woken.
    wake_ups: BTreeMap<String, Duration>,
    /// What the receipts agents stored cover.
    receipted: receipts::Receipted,
    /// What agents received, taken back and may not pass on.
    held: consent::Held,
}

/// The value of `"sig":"…"` in a JSON text (an envelope's outer signature).
pub fn sig_of(text: &[u8]) -> Option<String> {
    const NEEDLE: &[u8] = b"\"sig\":\"";
    // The last occurrence; the whole needle is compared only where a quote is.
    let start = (0..=text.len().checked_sub(NEEDLE.len())?)
        .rev()
        .find(|&i| text[i] == b'"' && text[i..].starts_with(NEEDLE))?
        + NEEDLE.len();
    let len = text[start..].iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&text[start..start + len])
        .ok()
        .map(String::from)
}

impl Checker {
    /// A checker; `markers` are plaintext texts the relay must never store.
    pub fn new(markers: Vec<String>) -> Self {
        Checker {
            markers,
            ..Checker::default()
        }
    }

    /// Records a violation.
    pub fn fail(&mut self, at: Duration, check: &'static str, detail: String) {
        if self.violations.len() < 200 {
            self.violations.push(Violation { at, check, detail });
        }
    }

    /// Checks the new history entries of `thread` of agent `node`.
    pub fn check_thread(
        &mut self,
        at: Duration,
        node: usize,
        name: &str,
        agent: &Agent,
        t: &Thread,
    ) {
        let mut tc = self
            .threads
            .get_mut(&node)
            .and_then(|m| m.get_mut(t.id.as_str()))
            .map(std::mem::take)
            .unwrap_or_default();
        if tc.scanned > t.history.len() {
            tc = ThreadCheck::default();
        }
        let limit = agent.config().limits.max_round_trips;
        for h in &t.history[tc.scanned..] {
            let v = probe::Probe::of(&h.json);
            let full: serde_json::Value = serde_json::from_str(&h.json).unwrap_or_default();
            if h.outgoing {
                self.consent_sent(at, (node, name), agent, t, (h, &full));
            } else {
                self.consent_received(node, t, h, &full);
            }
            if h.outgoing {
                self.never_share_sent(at, node, name, agent, t, h);
                self.receipts_sent(at, node, name, t, h);
                self.memory_sent(at, name, h);
                self.asked_twice_sent(&mut tc, at, name, t, h, &v);
                self.round_trips_sent(&tc, at, name, t, h, &v, limit);
            }
            round_trips::count(&mut tc, &v);
        }
        tc.scanned = t.history.len();
        let threads = self.threads.entry(node).or_default();
        match threads.get_mut(t.id.as_str()) {
            Some(slot) => *slot = tc,
            None => {
                threads.insert(t.id.clone(), tc);
            }
        }
    }

    /// The checks at the end of a run, in this order: participants down (liveness), the
    /// exactly-once audit, each thread's liveness and agreement, the scenario's
    /// expectations.
    pub fn finish(&mut self, end: &End<'_>) {
        self.agents_down(end);
        let mut received: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
        for (i, a) in end.agents.iter().enumerate() {
            if let Some(a) = a {
                received.insert(
                    i,
                    a.threads()
                        .values()
                        .flat_map(|t| t.received_ids.iter().cloned())
                        .collect(),
                );
            }
        }
        self.final_audit(end.at, &received, end.names);
        // Threads by id, seen from each side.
        let mut by_id: BTreeMap<&str, Vec<(usize, &Thread)>> = BTreeMap::new();
        for (i, a) in end.agents.iter().enumerate() {
            if let Some(a) = a {
                for (id, t) in a.threads() {
                    by_id.entry(id.as_str()).or_default().push((i, t));
                }
            }
        }
        let waiting_groups = liveness::groups_on_human(end);
        let mut fails = Vec::new();
        for (id, ts) in &by_id {
            if let Some(d) = liveness::thread_stuck(id, ts, end, &waiting_groups) {
                fails.push(("liveness", d));
            }
            if let Some(d) = agreement::disagreement(id, ts, end.names) {
                fails.push(("agreement", d));
            }
        }
        for (check, detail) in fails {
            self.fail(end.at, check, detail);
        }
        self.groups(end);
        self.spaces(end);
        self.retractions_told(end);
        self.expectations(end);
    }
}

/// What the checks at the end of a run read of the world.
pub struct End<'a> {
    /// When, since the start of the run.
    pub at: Duration,
    /// The agents' names, by index.
    pub names: &'a [String],
    /// Each agent, unless it is down.
    pub agents: Vec<Option<&'a Agent>>,
    /// The threads each agent has a prompt open for.
    pub prompted: Vec<BTreeSet<&'a str>>,
    /// The scenario's expectations.
    pub expect: &'a [Expect],
    /// The threads the scenario started: index → thread id.
    pub started: &'a BTreeMap<usize, String>,
    /// The agents' addresses, by index.
    pub addresses: &'a [a2acp_core::Address],
    /// The group threads the scenario started: index → (coordinator, group id).
    pub groups: BTreeMap<usize, (usize, &'a str)>,
}

/// The sides of a thread, for a violation's detail.
fn describe(ts: &[(usize, &Thread)], names: &[String]) -> String {
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
}
