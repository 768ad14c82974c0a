//! **exactly_once**: every packet the relay accepted reaches its recipient's logic exactly
//! once — audited Jepsen-style as lost / duplicated / unexpected, with the packets the
//! recipient refused on purpose counted apart.
//!
//! Space packets (§12) are audited at least once: they have no thread (so no `Received`
//! and no persisted received ids); the recipient audits `SpaceEvent::Received` when one
//! reaches the space's logic. Each accepted space packet must reach it (else lost), never
//! one the relay did not accept for it (else unexpected); a second handling (redelivered
//! after a crash before its acknowledgement) is harmless — each of its updates is refused
//! `duplicate`, the replica unchanged — and not counted as duplicated. A space packet
//! whose handling step acknowledged it to the relay counts as handled even when a crash
//! cut the step before its audit (the acknowledgement follows every persist of the step).
//! That the updates took effect is the space checker's ([`super::space`]): all replicas
//! equal at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use a2acp_core::agent::Agent;

use super::Checker;

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
    /// Accepted space packets that reached the recipient's space logic (at least once).
    pub space_delivered: u64,
}

impl Checker {
    /// Agent `node` was restored: what its logic handled is what it persisted.
    pub fn restored(&mut self, node: usize, agent: &Agent) {
        let set: BTreeSet<String> = agent
            .threads()
            .values()
            .flat_map(|t| t.received_ids.iter().cloned())
            .collect();
        self.handled.insert(node, set);
        self.threads.remove(&node);
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

    /// The relay queued the envelope signed `sig` (record `key`) for `recipient`.
    pub(super) fn queued(
        &mut self,
        at: Duration,
        key: &str,
        sig: &str,
        recipient: Option<usize>,
    ) -> Option<String> {
        let Some((_, pid)) = self.sigs.get(sig).cloned() else {
            self.fail(
                at,
                "exactly_once",
                format!("unexpected: the relay accepted an envelope no agent sealed (`{key}`)"),
            );
            self.audit.unexpected += 1;
            return None;
        };
        if let Some(r) = recipient {
            if self.accepted.entry(r).or_default().insert(pid.clone()) {
                self.audit.accepted += 1;
            }
        }
        Some(pid)
    }

    /// The logic of `node` received packet `pid`.
    pub fn received(&mut self, at: Duration, node: usize, name: &str, pid: &str) {
        if !self.was_accepted(node, pid) {
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

    /// The space logic of `node` handled space packet `pid` (at least once: a repeat is
    /// not a failure).
    pub fn space_received(&mut self, at: Duration, node: usize, name: &str, pid: &str) {
        if !self.was_accepted(node, pid) {
            self.audit.unexpected += 1;
            self.fail(
                at,
                "exactly_once",
                format!(
                    "unexpected: {name} handled space packet {pid}, which the relay never accepted for it"
                ),
            );
        }
        self.space_handled.insert((node, pid.to_string()));
    }

    /// Whether the relay accepted packet `pid` for `node`.
    fn was_accepted(&self, node: usize, pid: &str) -> bool {
        self.accepted.get(&node).is_some_and(|s| s.contains(pid))
    }

    /// An agent sealed space packet `pid`.
    pub fn space_sent(&mut self, pid: &str) {
        self.space_sent.insert(pid.to_string());
    }

    /// The step of `node` that handled the delivery of `pid` acknowledged it to the relay.
    pub fn acked(&mut self, node: usize, pid: &str) {
        self.acked.insert((node, pid.to_string()));
    }

    /// The logic of `node` refused delivered packet `pid` on purpose.
    pub fn refused(&mut self, node: usize, pid: &str) {
        self.refused.insert((node, pid.to_string()));
    }

    /// Agent `node`'s device is lost with its records and key: what the relay accepted
    /// for it until now went with the device, and counts as refused by its recipient (the
    /// sender's side closes when its user accepts the recovered key), not as lost by the
    /// protocol.
    pub fn device_lost(&mut self, node: usize) {
        if let Some(pids) = self.accepted.get(&node) {
            for pid in pids {
                self.refused.insert((node, pid.clone()));
            }
        }
    }

    /// Final audit: every accepted packet reached its recipient's logic (or was refused).
    /// `final_received` is each agent's persisted set of received ids at the end.
    pub fn final_audit(
        &mut self,
        at: Duration,
        final_received: &BTreeMap<usize, BTreeSet<String>>,
        names: &[String],
    ) {
        let accepted: Vec<(usize, String)> = self
            .accepted
            .iter()
            .flat_map(|(r, pids)| pids.iter().map(|p| (*r, p.clone())))
            .collect();
        let empty = BTreeSet::new();
        for (r, pid) in accepted {
            let got = final_received.get(&r).unwrap_or(&empty).contains(&pid);
            if got {
                self.audit.delivered += 1;
            } else if self.space_handled.contains(&(r, pid.clone()))
                || (self.space_sent.contains(&pid) && self.acked.contains(&(r, pid.clone())))
            {
                // Handled by the space logic; or acknowledged by the step that handled it
                // (a crash cut the step after its acknowledgement, so before its audit:
                // the acknowledgement follows every persist of the step).
                self.audit.space_delivered += 1;
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
