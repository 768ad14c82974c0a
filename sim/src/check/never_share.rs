//! **never_share**: no outgoing plaintext packet (an agent's thread history) contains the
//! value of a profile field whose tier for that peer is never_share, nor the real reason
//! a user typed with an excuse.

use std::time::Duration;

use a2acp_core::agent::permissions::resolve_tier;
use a2acp_core::agent::thread::HistoryEntry;
use a2acp_core::agent::{Agent, Thread, Tier};
use serde_json::Value;

use super::Checker;

/// JSON string escaping of `s` without the quotes (how a value appears in a packet).
pub(super) fn escaped(s: &str) -> String {
    let q = serde_json::to_string(s).unwrap_or_default();
    q.get(1..q.len().saturating_sub(1))
        .unwrap_or("")
        .to_string()
}

pub(super) fn strings_of(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(a) => a.iter().for_each(|x| strings_of(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings_of(x, out)),
        _ => {}
    }
}

impl Checker {
    /// A user typed a secret (an excuse's real reason).
    pub fn add_secret(&mut self, node: usize, text: &str) {
        if text.chars().count() >= 4 {
            self.extra_secrets
                .entry(node)
                .or_default()
                .insert(text.to_string());
        }
    }

    /// Checks one packet agent `node` sent in thread `t`.
    pub(super) fn never_share_sent(
        &mut self,
        at: Duration,
        node: usize,
        name: &str,
        agent: &Agent,
        t: &Thread,
        h: &HistoryEntry,
    ) {
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
    }
}
