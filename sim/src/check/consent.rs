//! What was taken back and what may not be passed on (SPEC-NOTES "Retraction", "Usage
//! rules"):
//!
//! - **taken_back**: after an agent takes a field back in a thread, none of its later
//!   packets in that thread shares the field; after a value the peer shared was deleted
//!   (taken back, or expired), it is in no packet the agent sends, in any thread;
//! - **no_reshare**: a value an agent received under a rule that forbids passing it on is
//!   in no packet it sends to anyone but the agent that shared it.
//!
//! Values are compared as whole strings of at least 4 characters (a string of the packet
//! equal to one of the value's: text an agent writes, such as a proposal's reasoning, may
//! mention a value in other words and is not read), and a
//! value the sending agent holds itself (its profile, a thread's own values, or the same
//! value from someone who set no such rule) is not counted: it may say the same thing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use a2acp_core::agent::thread::HistoryEntry;
use a2acp_core::agent::{Agent, Thread};
use a2acp_core::Address;
use serde_json::Value;

use super::never_share::{escaped, strings_of};
use super::Checker;

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
            for f in &th.retracted {
                if let Some(vals) = self.held.received.get(&(node, id.clone(), f.clone())) {
                    deleted.extend(vals.iter().map(|s| (id.clone(), f.clone(), s.clone())));
                }
            }
        }
        for (id, f, s) in deleted {
            if own.contains(&s) || self.held.free.contains(&(node, s.clone())) {
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
