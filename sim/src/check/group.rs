//! Group threads (§10), at the end of a run, on every group a coordinator keeps:
//!
//! - **privacy**: no value a participant shared with the coordinator (each string, and
//!   each entry of an array, of what it sent in `context_response` / `context` packets on
//!   its leg) appears in a packet the coordinator sent to another participant of the group.
//!   The packets are the decrypted ones of the legs' histories, read as packets
//!   ([`Packet::parse`]) and as JSON trees: a string value matches when it is at least 4
//!   characters long and contained in a string of the sent packet; another value (an
//!   object such as `{"date", "start", "end"}`) when an equal subtree is in the sent
//!   packet. Values the coordinator holds itself (its profile, the group's own context and
//!   intent) and values the recipient holds itself (its profile, what it shared) are not
//!   counted: telling someone what they or the coordinator already said is no leak.
//! - **group_agreement**: every participant whose leg is COMPLETED — and the
//!   coordinator's end of that leg — completed on the window the coordinator's group
//!   proposal reached its quorum with (`start_utc` / `end_utc` of the proposal details).

use std::collections::{BTreeMap, BTreeSet};

use a2acp_core::agent::{Agent, Thread, ThreadState};
use a2acp_core::packet::{Body, Packet};
use a2acp_core::{Address, Timestamp};
use serde_json::Value;

use super::{Checker, End};

/// One value a participant shared.
#[derive(Debug, Clone, PartialEq)]
enum Shared {
    /// A string (matched as a substring of a sent string).
    Text(String),
    /// Anything else (matched as an equal subtree).
    Tree(Value),
}

/// Every string leaf of `v`.
fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// Whether `tree` is `v` or one of its subtrees.
fn has_subtree(v: &Value, tree: &Value) -> bool {
    v == tree
        || match v {
            Value::Array(a) => a.iter().any(|x| has_subtree(x, tree)),
            Value::Object(m) => m.values().any(|x| has_subtree(x, tree)),
            _ => false,
        }
}

/// The values of one shared field: a string, or each entry of an array.
fn shared_values(v: &Value, out: &mut Vec<Shared>) {
    match v {
        Value::String(s) if s.chars().count() >= 4 => out.push(Shared::Text(s.clone())),
        Value::Array(a) => {
            for x in a {
                match x {
                    Value::String(s) if s.chars().count() >= 4 => out.push(Shared::Text(s.clone())),
                    Value::Object(_) | Value::Array(_) => out.push(Shared::Tree(x.clone())),
                    _ => {}
                }
            }
        }
        Value::Object(_) => out.push(Shared::Tree(v.clone())),
        _ => {}
    }
}

/// What the sender of `json` shared in it (the values of a `context_response` or of a
/// `context` packet), by field.
fn shared_in(json: &str) -> Vec<(String, Shared)> {
    let Ok(p) = Packet::parse(json.as_bytes()) else {
        return Vec::new();
    };
    let ctx = match &p.body {
        Body::ContextResponse(b) => &b.context_provided,
        Body::Context(b) => &b.context,
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    for (field, v) in ctx {
        let mut vals = Vec::new();
        shared_values(v, &mut vals);
        out.extend(vals.into_iter().map(|s| (field.clone(), s)));
    }
    out
}

/// A participant, what it shared with the coordinator (by field), and what it holds.
type Sharer<'a> = (&'a Address, Vec<(String, Shared)>, Known);

/// Everything one side already holds: string leaves and subtrees of `values`.
#[derive(Default)]
struct Known {
    texts: Vec<String>,
    trees: Vec<Value>,
}

impl Known {
    fn add(&mut self, v: &Value) {
        let mut s = Vec::new();
        strings(v, &mut s);
        self.texts.extend(s.into_iter().map(String::from));
        self.trees.push(v.clone());
    }

    fn holds(&self, x: &Shared) -> bool {
        match x {
            Shared::Text(t) => self.texts.iter().any(|k| k.contains(t.as_str())),
            Shared::Tree(t) => self.trees.iter().any(|k| has_subtree(k, t)),
        }
    }
}

/// A proposal's window: start and end, UTC seconds.
type Window = (i64, i64);

/// Whether a sent packet (its JSON tree) carries `x`. The `_format_hints` and
/// `capabilities` every agent writes in its first packet are protocol constants (their
/// examples, e.g. `PT1H30M`, may contain a short value someone shared), not values.
fn carries(packet: &Value, x: &Shared) -> bool {
    let mut packet = packet.clone();
    if let Some(m) = packet.as_object_mut() {
        m.remove("_format_hints");
        m.remove("capabilities");
    }
    let packet = &packet;
    match x {
        Shared::Text(t) => {
            let mut s = Vec::new();
            strings(packet, &mut s);
            s.iter().any(|k| k.contains(t.as_str()))
        }
        Shared::Tree(t) => has_subtree(packet, t),
    }
}

/// The window a completed leg's resolution is about: (`start_utc`, `end_utc`) in seconds.
fn leg_window(t: &Thread) -> Option<(i64, i64)> {
    let d = &t.stage.resolution()?.body.proposal.details;
    let at = |k: &str| {
        d.get(k)
            .and_then(Value::as_str)
            .and_then(Timestamp::parse_rfc3339)
            .map(|t| (t.as_millis() / 1000) as i64)
    };
    Some((at("start_utc")?, at("end_utc")?))
}

impl Checker {
    /// The group checks over every group every coordinator keeps.
    pub(super) fn groups(&mut self, end: &End<'_>) {
        // The proposal each group reached, as its current coordinator keeps it: after a
        // transfer (§10.3) the record of the agent the header names, at the highest epoch.
        let mut current: BTreeMap<&str, (u32, Option<Window>)> = BTreeMap::new();
        for agent in end.agents.iter().flatten() {
            for (gid, g) in agent.groups() {
                if &g.header.coordinator != agent.address() {
                    continue;
                }
                let reached = g.proposal.as_ref().filter(|p| p.reached).map(|p| p.window);
                let e = current
                    .entry(gid.as_str())
                    .or_insert((g.header.epoch, reached));
                if g.header.epoch >= e.0 {
                    *e = (g.header.epoch, reached);
                }
            }
        }
        for (c, agent) in end.agents.iter().enumerate() {
            let Some(agent) = agent else { continue };
            for (gid, g) in agent.groups() {
                self.privacy(end, c, agent, gid);
                let legs: Vec<(&Address, &String)> = g.legs.iter().collect();
                let reached = current.get(gid.as_str()).and_then(|x| x.1);
                for (p, lid) in legs {
                    let mut ends: Vec<(String, &Thread)> = Vec::new();
                    if let Some(t) = agent.thread(lid) {
                        ends.push((end.names[c].clone(), t));
                    }
                    if let Some(i) = end.addresses.iter().position(|a| a == p) {
                        if let Some(t) = end.agents[i].and_then(|a| a.thread(lid)) {
                            ends.push((end.names[i].clone(), t));
                        }
                    }
                    for (who, t) in ends {
                        if t.state != ThreadState::Completed {
                            continue;
                        }
                        let got = leg_window(t);
                        if reached.is_none() || got != reached {
                            self.fail(
                                end.at,
                                "group_agreement",
                                format!(
                                    "group {gid}: {who} completed the leg with {p} on {got:?}, the coordinator's group proposal reached {reached:?}"
                                ),
                            );
                        }
                    }
                }
            }
        }
    }

    /// **privacy** for group `gid` coordinated by agent `c`.
    fn privacy(&mut self, end: &End<'_>, c: usize, agent: &Agent, gid: &str) {
        let Some(g) = agent.groups().get(gid) else {
            return;
        };
        // What the coordinator holds itself.
        let mut own = Known::default();
        own.add(&Value::Object(agent.config().profile.clone()));
        own.add(&Value::Object(g.local.clone()));
        if let Ok(i) = serde_json::to_value(&g.intent) {
            own.add(&i);
        }
        // What each participant shared with the coordinator, and its own profile.
        let mut shared: Vec<Sharer<'_>> = Vec::new();
        for (p, lid) in &g.legs {
            let mut vals = Vec::new();
            let mut holds = Known::default();
            if let Some(t) = agent.thread(lid) {
                for h in t.history.iter().filter(|h| !h.outgoing) {
                    vals.extend(shared_in(&h.json));
                }
            }
            for (_, v) in &vals {
                match v {
                    Shared::Text(s) => holds.add(&Value::String(s.clone())),
                    Shared::Tree(t) => holds.add(t),
                }
            }
            if let Some(a) = end
                .addresses
                .iter()
                .position(|a| a == p)
                .and_then(|i| end.agents[i])
            {
                holds.add(&Value::Object(a.config().profile.clone()));
            }
            vals.retain(|(_, v)| !own.holds(v));
            shared.push((p, vals, holds));
        }
        let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
        for (q, _, q_holds) in &shared {
            let Some(t) = g.legs.get(*q).and_then(|lid| agent.thread(lid)) else {
                continue;
            };
            for h in t.history.iter().filter(|h| h.outgoing) {
                let Ok(tree) = serde_json::from_str::<Value>(&h.json) else {
                    continue;
                };
                for (p, vals, _) in &shared {
                    if p == q {
                        continue;
                    }
                    for (field, v) in vals {
                        if q_holds.holds(v) || !carries(&tree, v) {
                            continue;
                        }
                        if seen.insert((h.packet_id.clone(), format!("{p}{field}{v:?}"))) {
                            self.fail(
                                end.at,
                                "privacy",
                                format!(
                                    "group {gid}: {} sent {} {} to {q} carrying what {p} shared as `{field}` ({v:?})",
                                    end.names[c], h.kind, h.packet_id
                                ),
                            );
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_forwarded_value_is_carried_and_an_own_value_is_held() {
        let mut vals = Vec::new();
        shared_values(
            &json!(["2026-03-28 19:00-23:00", "x", {"date": "2026-03-27", "start": "20:30"}]),
            &mut vals,
        );
        assert_eq!(vals.len(), 2, "short strings are not counted");
        let sent = json!({"body": {"context": {"w": ["2026-03-28 19:00-23:00"]}}});
        assert!(carries(&sent, &vals[0]));
        assert!(!carries(&sent, &vals[1]));
        let sent = json!({"a": [{"date": "2026-03-27", "start": "20:30"}]});
        assert!(carries(&sent, &vals[1]));
        let mut own = Known::default();
        own.add(&json!({"time_windows": ["2026-03-28 19:00-23:00 (London)"]}));
        assert!(own.holds(&vals[0]));
        assert!(!own.holds(&vals[1]));
    }
}
