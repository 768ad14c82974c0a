//! Invariant checkers, run as every event's effects happen, plus the final audit.
//!
//! - **never_share**: no outgoing plaintext packet (an agent's thread history) contains the
//!   value of a profile field whose tier for that peer is never_share, nor the real reason
//!   a user typed with an excuse;
//! - **asked_twice**: no agent asks the same field twice in a thread (§6.4);
//! - **round_trips**: no agent sends a context exchange when the thread already counted
//!   `max_round_trips` of them since the last escalation (§6.4);
//! - **exactly_once**: every packet the relay accepted reaches its recipient's logic
//!   exactly once — audited Jepsen-style as lost / duplicated / unexpected;
//! - **relay_plaintext**: no record the relay stores contains plaintext;
//! - **agreement** and **liveness** (at the end of a run, in [`crate::world`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use a2acp_core::agent::permissions::resolve_tier;
use a2acp_core::agent::{Agent, Thread, Tier};
use serde_json::Value;

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

/// The exactly-once audit's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Audit {
    /// Packets (by packet id and recipient) the relay accepted.
    pub accepted: u64,
    /// Accepted packets handed to the recipient's logic.
    pub delivered: u64,
    /// Accepted packets never handed to the recipient's logic (nor refused by it).
    pub lost: u64,
    /// Packets handed to a recipient's logic more than once.
    pub duplicated: u64,
    /// Packets handed to a recipient's logic that the relay never accepted for it.
    pub unexpected: u64,
    /// Accepted packets the recipient refused on purpose (changed key, blocked sender…).
    pub refused: u64,
}

#[derive(Debug, Default, Clone)]
struct ThreadCheck {
    scanned: usize,
    asked: BTreeSet<String>,
    exchanges: u32,
}

/// The checkers' state.
#[derive(Debug, Default)]
pub struct Checker {
    /// Violations found, in order.
    pub violations: Vec<Violation>,
    threads: BTreeMap<(usize, String), ThreadCheck>,
    /// Secret texts typed by users (excuse reasons), per agent.
    extra_secrets: BTreeMap<usize, BTreeSet<String>>,
    /// Envelope signature → (sender, packet id).
    sigs: BTreeMap<String, (usize, String)>,
    /// (recipient, packet id) accepted by the relay.
    accepted: BTreeSet<(usize, String)>,
    /// Packet ids handed to each agent's logic in its surviving history.
    handled: BTreeMap<usize, BTreeSet<String>>,
    /// (recipient, packet id) refused by the recipient.
    refused: BTreeSet<(usize, String)>,
    /// Texts that must never appear in relay records.
    markers: Vec<String>,
    /// Audit counts.
    pub audit: Audit,
}

/// Packets that count as a context exchange (§6.4), as the core counts them.
fn counts_as_exchange(v: &Value) -> bool {
    match v.get("type").and_then(Value::as_str) {
        Some("context") | None => {
            v.get("escalation").is_none_or(Value::is_null)
                || v.get("context")
                    .and_then(|c| c.get("proposed_alternatives"))
                    .is_some()
        }
        Some("context_request" | "context_response" | "intent_update") => true,
        _ => false,
    }
}

fn is_escalation(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("context")
        && v.get("escalation").is_some_and(|e| !e.is_null())
        && v.get("context")
            .and_then(|c| c.get("proposed_alternatives"))
            .is_none()
}

/// JSON string escaping of `s` without the quotes (how a value appears in a packet).
fn escaped(s: &str) -> String {
    let q = serde_json::to_string(s).unwrap_or_default();
    q.get(1..q.len().saturating_sub(1))
        .unwrap_or("")
        .to_string()
}

fn strings_of(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(a) => a.iter().for_each(|x| strings_of(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings_of(x, out)),
        _ => {}
    }
}

/// The value of `"sig":"…"` in a JSON text (an envelope's outer signature).
pub fn sig_of(text: &[u8]) -> Option<String> {
    const NEEDLE: &[u8] = b"\"sig\":\"";
    let start = text.windows(NEEDLE.len()).rposition(|w| w == NEEDLE)? + NEEDLE.len();
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

    /// A user typed a secret (an excuse's real reason).
    pub fn add_secret(&mut self, node: usize, text: &str) {
        if text.chars().count() >= 4 {
            self.extra_secrets
                .entry(node)
                .or_default()
                .insert(text.to_string());
        }
    }

    /// The user of `node` intervened in a thread (new context): a new round-trip budget.
    pub fn user_resumed(&mut self, node: usize, thread: &str) {
        if let Some(tc) = self.threads.get_mut(&(node, thread.to_string())) {
            tc.exchanges = 0;
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
        let key = (node, t.id.clone());
        let mut tc = self.threads.remove(&key).unwrap_or_default();
        if tc.scanned > t.history.len() {
            tc = ThreadCheck::default();
        }
        let limit = agent.config().limits.max_round_trips;
        for h in &t.history[tc.scanned..] {
            let v: Value = serde_json::from_str(&h.json).unwrap_or(Value::Null);
            if h.outgoing {
                let mut secrets = Vec::new();
                for (field, value) in &agent.config().profile {
                    let tier = resolve_tier(agent.permissions(), agent.overrides(), &t.peer, field);
                    if tier == Tier::NeverShare {
                        let mut vals = Vec::new();
                        strings_of(value, &mut vals);
                        secrets.extend(
                            vals.into_iter()
                                .filter(|s| s.chars().count() >= 4)
                                .map(|s| (field.clone(), s)),
                        );
                    }
                }
                if let Some(extra) = self.extra_secrets.get(&node) {
                    secrets.extend(
                        extra
                            .iter()
                            .map(|s| ("typed reason".to_string(), s.clone())),
                    );
                }
                for (field, s) in secrets {
                    if h.json.contains(&escaped(&s)) {
                        self.fail(
                            at,
                            "never_share",
                            format!(
                                "{name} sent {} {} containing the never_share value of `{field}` ({s:?})",
                                h.kind, h.packet_id
                            ),
                        );
                    }
                }
                for list in ["needs", "additional_context_needed"] {
                    if let Some(Value::Array(needs)) = v.get(list) {
                        for n in needs {
                            if let Some(f) = n.get("field").and_then(Value::as_str) {
                                if !tc.asked.insert(f.to_string()) {
                                    self.fail(
                                        at,
                                        "asked_twice",
                                        format!(
                                            "{name} asked for `{f}` a second time in {} ({} {})",
                                            t.id, h.kind, h.packet_id
                                        ),
                                    );
                                }
                            }
                        }
                    }
                }
                if counts_as_exchange(&v) && tc.exchanges >= limit {
                    self.fail(
                        at,
                        "round_trips",
                        format!(
                            "{name} sent {} {} in {} after {} exchanges without escalating (limit {limit})",
                            h.kind, h.packet_id, t.id, tc.exchanges
                        ),
                    );
                }
            }
            if is_escalation(&v) {
                tc.exchanges = 0;
            } else if counts_as_exchange(&v) {
                tc.exchanges += 1;
            }
        }
        tc.scanned = t.history.len();
        self.threads.insert(key, tc);
    }

    /// Agent `node` was restored: what its logic handled is what it persisted.
    pub fn restored(&mut self, node: usize, agent: &Agent) {
        let set: BTreeSet<String> = agent
            .threads()
            .values()
            .flat_map(|t| t.received_ids.iter().cloned())
            .collect();
        self.handled.insert(node, set);
        let ids: Vec<(usize, String)> = self
            .threads
            .range((node, String::new())..)
            .take_while(|((n, _), _)| *n == node)
            .map(|(k, _)| k.clone())
            .collect();
        for k in ids {
            self.threads.remove(&k);
        }
    }

    /// An agent persisted an outbox record (a sealed packet): remember its signature.
    pub fn outbox_put(&mut self, node: usize, value: &[u8]) {
        /// The two fields of an outbox record the audit needs (the rest is skipped
        /// without being built).
        #[derive(serde::Deserialize)]
        struct Record<'a> {
            #[serde(borrow)]
            packet_id: std::borrow::Cow<'a, str>,
            #[serde(borrow)]
            env: Env<'a>,
        }
        #[derive(serde::Deserialize)]
        struct Env<'a> {
            #[serde(borrow)]
            sig: std::borrow::Cow<'a, str>,
        }
        if let Ok(r) = serde_json::from_slice::<Record>(value) {
            self.sigs
                .insert(r.env.sig.into_owned(), (node, r.packet_id.into_owned()));
        }
    }

    /// The packet (sender, id) of an envelope signature.
    pub fn packet_of_sig(&self, sig: &str) -> Option<&(usize, String)> {
        self.sigs.get(sig)
    }

    /// The relay stored a record: no plaintext; queued packets join the audit.
    pub fn relay_put(
        &mut self,
        at: Duration,
        key: &str,
        value: &[u8],
        recipient: Option<usize>,
    ) -> Option<String> {
        let text = String::from_utf8_lossy(value);
        for m in &self.markers {
            if text.contains(m.as_str()) {
                let d = format!("relay record `{key}` contains plaintext {m:?}");
                self.fail(at, "relay_plaintext", d);
                break;
            }
        }
        if !key.starts_with("q/") {
            return None;
        }
        let Some(sig) = sig_of(value) else {
            self.fail(
                at,
                "relay_plaintext",
                format!("relay record `{key}` holds no envelope"),
            );
            return None;
        };
        let Some((_, pid)) = self.sigs.get(&sig).cloned() else {
            self.fail(
                at,
                "exactly_once",
                format!("unexpected: the relay accepted an envelope no agent sealed (`{key}`)"),
            );
            self.audit.unexpected += 1;
            return None;
        };
        if let Some(r) = recipient {
            if self.accepted.insert((r, pid.clone())) {
                self.audit.accepted += 1;
            }
        }
        Some(pid)
    }

    /// The logic of `node` received packet `pid`.
    pub fn received(&mut self, at: Duration, node: usize, name: &str, pid: &str) {
        if !self.accepted.contains(&(node, pid.to_string())) {
            self.audit.unexpected += 1;
            self.fail(
                at,
                "exactly_once",
                format!("unexpected: {name} handled {pid}, which the relay never accepted for it"),
            );
        }
        if !self
            .handled
            .entry(node)
            .or_default()
            .insert(pid.to_string())
        {
            self.audit.duplicated += 1;
            self.fail(
                at,
                "exactly_once",
                format!("duplicated: {name} handled {pid} a second time"),
            );
        }
    }

    /// The logic of `node` refused delivered packet `pid` on purpose.
    pub fn refused(&mut self, node: usize, pid: &str) {
        self.refused.insert((node, pid.to_string()));
    }

    /// Final audit: every accepted packet reached its recipient's logic (or was refused).
    /// `final_received` is each agent's persisted set of received ids at the end.
    pub fn final_audit(
        &mut self,
        at: Duration,
        final_received: &BTreeMap<usize, BTreeSet<String>>,
        names: &[String],
    ) {
        let accepted: Vec<(usize, String)> = self.accepted.iter().cloned().collect();
        let empty = BTreeSet::new();
        for (r, pid) in accepted {
            let got = final_received.get(&r).unwrap_or(&empty).contains(&pid);
            if got {
                self.audit.delivered += 1;
            } else if self.refused.contains(&(r, pid.clone())) {
                self.audit.refused += 1;
            } else {
                self.audit.lost += 1;
                let n = names.get(r).cloned().unwrap_or_default();
                self.fail(
                    at,
                    "exactly_once",
                    format!("lost: {pid}, accepted by the relay for {n}, never reached its logic"),
                );
            }
        }
    }
}
