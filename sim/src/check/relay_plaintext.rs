//! **relay_plaintext**: no record the relay stores contains plaintext (packet structure or
//! a profile value); every queued record holds an envelope.

use std::time::Duration;

use super::{sig_of, Checker};
use crate::scenario::Spec;

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

/// The texts the relay must never store in a run of `spec`: packet structure, and (in
/// worlds of at most 16 agents) every profile text of 8 characters or more.
pub fn plaintext_markers(spec: &Spec) -> Vec<String> {
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
    markers
}

impl Checker {
    /// The relay stored a record: no plaintext; queued packets join the exactly-once
    /// audit (for `recipient`, the agent the record's key names).
    pub fn relay_put(
        &mut self,
        at: Duration,
        key: &str,
        value: &[u8],
        recipient: Option<usize>,
    ) -> Option<String> {
        self.memory_at_relay(at, key, value);
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
        self.queued(at, key, &sig, recipient)
    }
}
