//! **memory_stays**: relationship memory never leaves the device (§11, SPEC-NOTES
//! "Relationship memory (§11)").
//!
//! What it means precisely: memory is the agent's own record of what happened (facts and
//! packages). Whatever an agent sends comes from its user's context (profile, what the
//! user gave for the thread) as the permission tiers allow, or from the thread itself;
//! never from memory. The context cache holds what *peers* shared: it may answer the
//! agent's own needs, it is never a value the agent shares. So no text that exists only
//! in memory may ever be in a packet (to anyone, the peer it is about included) or in
//! anything the relay stores.
//!
//! How it is checked: before a run, every agent's memory is planted (through the same
//! import the user has, `Command::ImportMemory`) with one completed thread about each
//! other agent of its world (worlds of at most 16 agents): a package whose title and
//! decision, and a cached value `memory_canary`, carry a text no profile, intent or
//! packet contains ([`MEMORY_CANARY`]). A packet an agent sends (its plaintext, as in its
//! thread history) or a record the relay stores that contains it is a violation. A
//! substring test on real cached values would not do: values coincide (two people's
//! `"Europe/London"`, a computed window equal to a third person's), so it would flag
//! innocent packets; the planted text cannot coincide.

use std::collections::BTreeMap;
use std::time::Duration;

use a2acp_core::agent::thread::HistoryEntry;
use a2acp_core::memory::{MemoryStore, ThreadSummary};
use a2acp_core::{Address, Timestamp};

use super::Checker;

/// The text planted in every agent's memory.
pub const MEMORY_CANARY: &str = "MEMCANARY";

/// Worlds larger than this get no planted memory (it grows with the square of the size).
pub const PLANT_UP_TO: usize = 16;

/// The memory planted in the agent at `own` about each of `peers`, as NDJSON; empty when
/// the world is too large.
pub fn planted_memory(own: &Address, peers: &[Address], at: Timestamp) -> String {
    if peers.len() > PLANT_UP_TO {
        return String::new();
    }
    let mut m = MemoryStore::new();
    for p in peers.iter().filter(|p| *p != own) {
        let canary = format!("{MEMORY_CANARY}-{own}-{p}");
        let summary = ThreadSummary {
            thread_id: format!("thr_{MEMORY_CANARY}"),
            intent: "scheduling".into(),
            title: format!("{canary} title"),
            shared_by_peer: BTreeMap::from([("memory_canary".to_string(), canary.clone())]),
            decisions: vec![format!("{canary} decision")],
            ..ThreadSummary::default()
        };
        if m.record_completed_thread(at, own.as_str(), p.as_str(), &summary)
            .is_err()
        {
            return String::new();
        }
    }
    m.export_ndjson().unwrap_or_default()
}

impl Checker {
    /// Checks one packet `name` sent: no planted memory in it.
    pub(super) fn memory_sent(&mut self, at: Duration, name: &str, h: &HistoryEntry) {
        if h.json.contains(MEMORY_CANARY) {
            self.fail(
                at,
                "memory_stays",
                format!(
                    "{name} sent {} {} containing what only its memory holds",
                    h.kind, h.packet_id
                ),
            );
        }
    }

    /// Checks one record the relay stored: no planted memory in it.
    pub(super) fn memory_at_relay(&mut self, at: Duration, key: &str, value: &[u8]) {
        // The canary is ASCII: replacing invalid bytes neither makes nor breaks a match.
        if String::from_utf8_lossy(value).contains(MEMORY_CANARY) {
            self.fail(
                at,
                "memory_stays",
                format!("relay record `{key}` contains what only an agent's memory holds"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2acp_core::agent::{Agent, AgentConfig, Command};
    use a2acp_core::crypto::IdentityKey;

    fn addr(s: &str) -> Address {
        Address::parse(s).unwrap()
    }

    #[test]
    fn the_planted_memory_imports_and_a_packet_carrying_it_is_a_violation() {
        let me = addr("agent:alice@a2acp.io");
        let peers = [me.clone(), addr("agent:bob@a2acp.io")];
        let at = Timestamp::parse_rfc3339("2026-03-21T14:30:00Z").unwrap();
        let ndjson = planted_memory(&me, &peers, at);
        let mut a = Agent::new(
            AgentConfig::new(me.clone()),
            IdentityKey::from_seed([1; 32]),
            [2; 32],
        );
        a.handle_command(at, Command::ImportMemory { ndjson });
        assert_eq!(
            a.memory().projects(),
            vec!["agent:bob@a2acp.io".to_string()]
        );
        let r = a.memory().relationship("agent:bob@a2acp.io", at).unwrap();
        assert!(r.context_cache["memory_canary"]
            .value
            .starts_with(MEMORY_CANARY));

        let mut c = Checker::default();
        let clean = HistoryEntry {
            packet_id: "pkt_1".into(),
            outgoing: true,
            kind: "context".into(),
            json: r#"{"context":{"dietary":"vegetarian"}}"#.into(),
        };
        c.memory_sent(Duration::ZERO, "alice", &clean);
        c.memory_at_relay(Duration::ZERO, "q/1", b"{\"sig\":\"x\"}");
        assert!(c.violations.is_empty());
        let leak = HistoryEntry {
            json: format!(
                r#"{{"context":{{"note":"{}"}}}}"#,
                r.context_cache["memory_canary"].value
            ),
            ..clean
        };
        c.memory_sent(Duration::ZERO, "alice", &leak);
        c.memory_at_relay(Duration::ZERO, "q/2", leak.json.as_bytes());
        assert_eq!(c.violations.len(), 2);
        assert!(c.violations.iter().all(|v| v.check == "memory_stays"));
    }

    #[test]
    fn worlds_too_large_get_no_planted_memory() {
        let peers: Vec<Address> = (0..PLANT_UP_TO + 1)
            .map(|i| addr(&format!("agent:a{i}@a2acp.io")))
            .collect();
        let at = Timestamp::parse_rfc3339("2026-03-21T14:30:00Z").unwrap();
        assert!(planted_memory(&peers[0], &peers, at).is_empty());
        assert!(!planted_memory(&peers[0], &peers[..PLANT_UP_TO], at).is_empty());
    }
}
