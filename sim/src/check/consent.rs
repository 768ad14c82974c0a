//! What was taken back and what may not be passed on (SPEC-NOTES "Retraction", "Usage
//! rules"):
//!
//! - **taken_back**: after an agent takes a field back in a thread, none of its later
//!   packets in that thread shares the field; after a value the peer shared was deleted
//!   (taken back, or expired), it is in no packet the agent sends, in any thread;
//! - **no_reshare**: a value an agent received under a rule that forbids passing it on is
//!   in no packet it sends to anyone but the agent that shared it;
//! - **retraction_told**: a retraction not acknowledged a day after it was asked for was
//!   reported to the user.
//!
//! Values are compared as whole strings of at least 4 characters (a string of the packet
//! equal to one of the value's: text an agent writes, such as a proposal's reasoning, may
//! mention a value in other words and is not read), and a
//! value the sending agent holds itself (its profile, a thread's own values) is not
//! counted, it may say the same thing; nor, for a deleted value, the same value another
//! agent shared and it holds now, nor, for a value not to be passed on, the same value
//! someone shared without that rule.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use a2acp_core::agent::thread::HistoryEntry;
use a2acp_core::agent::{Agent, Thread};
use a2acp_core::{Address, Timestamp};
use serde_json::Value;

use super::never_share::{escaped, strings_of};
use super::{Checker, End};

/// The packet members that carry shared values.
const VALUE_MEMBERS: [&str; 2] = ["context", "context_provided"];

/// What the consent checkers remember of each agent.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// (agent, thread, field) → the strings of the values the peer shared.
    received: BTreeMap<(usize, String, String), BTreeSet<String>>,
    /// (agent, value) → who shared it under "no re-sharing".
    guarded: BTreeMap<(usize, String), BTreeSet<Address>>,
    /// (agent, value): shared with it by someone without that rule.
    free: BTreeSet<(usize, String)>,
    /// The names of the fields shared (a value may name a field, as a conflict does).
    fields: BTreeSet<String>,
    /// (agent, thread, field) its user was told the peer had not acknowledged taking back.
    told: BTreeSet<(usize, String, String)>,
    /// (agent, thread, field) taken back → when (the agent's clock), until acknowledged.
    asked: BTreeMap<(usize, String, String), Timestamp>,
    /// (agent, packet id) of the packets checked (a thread scanned again after a restore
    /// is not checked twice: what was sent before a deletion was allowed then).
    checked: BTreeSet<(usize, String)>,
}

/// The strings (≥ 4 characters) of `v`.
fn texts(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    strings_of(v, &mut out);
    out.retain(|s| s.chars().count() >= 4);
    out
}

impl Checker {
    /// A packet agent `node` received in thread `t`: the values it shares, and under
    /// which rule.
    pub(super) fn consent_received(
        &mut self,
        node: usize,
        t: &Thread,
        h: &HistoryEntry,
        v: &Value,
    ) {
        if !self.held.checked.insert((node, h.packet_id.clone())) {
            return;
        }
        let usage = &v["permissions"]["usage"];
        for m in VALUE_MEMBERS {
            let Some(ctx) = v.get(m).and_then(Value::as_object) else {
                continue;
            };
            for (field, value) in ctx {
                self.held.fields.insert(field.clone());
                let guarded = usage[field.as_str()]["no_reshare"] == Value::Bool(true);
                for s in texts(value) {
                    let h = &mut self.held;
                    h.received
                        .entry((node, t.id.clone(), field.clone()))
                        .or_default()
                        .insert(s.clone());
                    if guarded {
                        h.guarded
                            .entry((node, s))
                            .or_default()
                            .insert(t.peer.clone());
                    } else {
                        h.free.insert((node, s));
                    }
                }
            }
        }
    }

    /// A packet agent `node` sent in thread `t`: its history entry and its JSON.
    pub(super) fn consent_sent(
        &mut self,
        at: Duration,
        (node, name): (usize, &str),
        agent: &Agent,
        t: &Thread,
        (h, v): (&HistoryEntry, &Value),
    ) {
        if h.kind == "retraction" || !self.held.checked.insert((node, h.packet_id.clone())) {
            return;
        }
        // What this agent took back in the thread is not shared there again.
        let taken: BTreeSet<&String> = t.retractions.iter().flat_map(|r| &r.fields).collect();
        for m in VALUE_MEMBERS {
            if let Some(ctx) = v.get(m).and_then(Value::as_object) {
                for f in ctx.keys().filter(|f| taken.contains(f)) {
                    self.fail(
                        at,
                        "taken_back",
                        format!(
                            "{name} shared `{f}` again in {} {} after taking it back in thread {}",
                            h.kind, h.packet_id, t.id
                        ),
                    );
                }
            }
        }
        let own = own_texts(agent);
        let mut sent_strings = Vec::new();
        strings_of(v, &mut sent_strings);
        let sent: BTreeSet<String> = sent_strings.into_iter().collect();
        // Values deleted here: in no packet this agent sends.
        let mut deleted: Vec<(String, String, String)> = Vec::new();
        for (id, th) in agent.threads() {
            for f in th.retracted.iter().chain(&th.expired) {
                if let Some(vals) = self.held.received.get(&(node, id.clone(), f.clone())) {
                    deleted.extend(vals.iter().map(|s| (id.clone(), f.clone(), s.clone())));
                }
            }
        }
        // What the agent holds now, its own or shared by others, may be sent, and what its
        // proposals compute from it (a date or a time of a window it holds): the same
        // text is then not the deleted value. Nor is a field's name a value, nor a time of
        // day alone (every proposal computes some: 12:30 + 1 h ends at 13:30).
        // The thread's intent says what it is about (its event: "video call").
        let holds: Vec<String> = own
            .iter()
            .cloned()
            .chain(held_texts(agent))
            .chain(agent.threads().values().map(|t| t.intent.summary.clone()))
            .map(|o| o.to_lowercase())
            .collect();
        for (id, f, s) in deleted {
            let lower = s.to_lowercase();
            if self.held.fields.contains(&s)
                || is_clock_time(&s)
                || holds.iter().any(|o| o.contains(lower.as_str()))
            {
                continue;
            }
            if sent.contains(&s) {
                self.fail(
                    at,
                    "taken_back",
                    format!(
                        "{name} sent {} {} in thread {} with {s:?}, the value of `{f}` deleted in thread {id}: {}",
                        h.kind, h.packet_id, t.id, snippet(&h.json, &escaped(&s))
                    ),
                );
            }
        }
        // Values that may not be passed on: only back to who shared them.
        let guarded: Vec<(String, BTreeSet<Address>)> = self
            .held
            .guarded
            .range((node, String::new())..)
            .take_while(|((n, _), _)| *n == node)
            .map(|((_, s), from)| (s.clone(), from.clone()))
            .collect();
        for (s, from) in guarded {
            if from.contains(&t.peer)
                || own.contains(&s)
                || self.held.free.contains(&(node, s.clone()))
            {
                continue;
            }
            if sent.contains(&s) {
                self.fail(
                    at,
                    "no_reshare",
                    format!(
                        "{name} sent {} {} to {} with {s:?}, which {} shared with it only: {}",
                        h.kind,
                        h.packet_id,
                        t.peer,
                        from.iter()
                            .map(Address::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                        snippet(&h.json, &escaped(&s))
                    ),
                );
            }
        }
    }
}

impl Checker {
    /// Agent `node` took back `fields` in `thread` at `asked` (its clock).
    pub fn retraction_sent(
        &mut self,
        node: usize,
        thread: &str,
        fields: &[String],
        asked: Timestamp,
    ) {
        for f in fields {
            self.held
                .asked
                .insert((node, thread.to_string(), f.clone()), asked);
        }
    }

    /// Agent `node`'s user was told that the peer of `thread` has not acknowledged
    /// deleting `fields`.
    pub fn retraction_unacknowledged(&mut self, node: usize, thread: &str, fields: &[String]) {
        for f in fields {
            self.held.told.insert((node, thread.to_string(), f.clone()));
        }
    }

    /// The peer of `thread` acknowledged deleting `fields` at `when` (agent `node`'s
    /// clock): if that was more than a day after they were taken back, the user was told
    /// before.
    pub fn retraction_acknowledged(
        &mut self,
        (at, node, name): (Duration, usize, &str),
        thread: &str,
        fields: &[String],
        when: Timestamp,
    ) {
        let mut late = Vec::new();
        for f in fields {
            let key = (node, thread.to_string(), f.clone());
            let Some(asked) = self.held.asked.remove(&key) else {
                continue;
            };
            if asked.add(ACK_DEADLINE) < when && !self.held.told.contains(&key) {
                late.push(f.clone());
            }
        }
        if !late.is_empty() {
            self.fail(
                at,
                "retraction_told",
                format!(
                    "{name}'s peer acknowledged taking back {late:?} in thread {thread} more than a day after it was asked, and the user had not been told meanwhile"
                ),
            );
        }
    }

    /// **retraction_told**: a retraction the peer has not acknowledged a day after it was
    /// asked for has been reported to the user, by the peer's name, with each field (a
    /// peer that ignores it, or is away that long, is not taken to have deleted anything).
    pub(super) fn retractions_told(&mut self, end: &End<'_>) {
        let mut fails = Vec::new();
        for (i, a) in end.agents.iter().enumerate() {
            let Some(a) = a else { continue };
            let now = a.now();
            for (id, t) in a.threads() {
                for r in &t.retractions {
                    if r.acknowledged || r.asked_at.add(ACK_DEADLINE) > now {
                        continue;
                    }
                    let untold: Vec<&String> = r
                        .fields
                        .iter()
                        .filter(|f| !self.held.told.contains(&(i, id.clone(), (*f).clone())))
                        .collect();
                    if !untold.is_empty() {
                        fails.push(format!(
                            "{} took back {untold:?} from {} in thread {id} over a day ago; no acknowledgement came and the user was not told",
                            end.names[i], t.peer
                        ));
                    }
                }
            }
        }
        for d in fails {
            self.fail(end.at, "retraction_told", d);
        }
    }
}

/// How long a peer has to acknowledge a retraction before the user is told (SPEC-NOTES
/// "Retraction": a day), plus a minute for the timer that tells.
const ACK_DEADLINE: Duration = Duration::from_secs(86_400 + 60);

/// The strings of the values an agent holds itself: its profile and what its user gave
/// its threads.
fn own_texts(agent: &Agent) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = agent.config().profile.values().flat_map(texts).collect();
    for t in agent.threads().values() {
        out.extend(t.local.values().flat_map(texts));
        out.extend(t.shared.values().flat_map(texts));
    }
    out
}

/// The strings of the values other agents shared that an agent holds now, in any thread.
fn held_texts(agent: &Agent) -> BTreeSet<String> {
    agent
        .threads()
        .values()
        .flat_map(|t| t.theirs.values().flat_map(texts))
        .collect()
}

/// Whether `s` is a time of day alone (`HH:MM`).
fn is_clock_time(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 5 && b[2] == b':' && [0, 1, 3, 4].iter().all(|&i| b[i].is_ascii_digit())
}

/// Up to 80 characters of `json` either side of the first `needle`.
fn snippet(json: &str, needle: &str) -> String {
    let Some(i) = json.find(needle) else {
        return String::new();
    };
    let start = json[..i].char_indices().rev().nth(80).map_or(0, |(k, _)| k);
    let end = json[i..]
        .char_indices()
        .nth(needle.len() + 80)
        .map_or(json.len(), |(k, _)| i + k);
    format!("…{}…", &json[start..end])
}
