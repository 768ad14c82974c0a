//! An agent's devices and its relay's wake-ups (SPEC-NOTES "Backup and a new device",
//! relay link §5b).
//!
//! A device swap keeps the agent on its node (its index, its address, its identity key)
//! and changes the records it runs from: a backup is a snapshot of the persisted records,
//! a new device restores the snapshot, and the device set aside keeps its own records
//! until it comes back. A device that is set aside stops at once (its events are dropped);
//! one replaced by the relay leaves its connection to the relay, which the relay replaces
//! (last connect wins) when the other device authenticates.
//!
//! A wake-up the relay sends for an offline agent reaches the push endpoint the agent
//! registered; a device that is shut (offline) wakes on it after the push service's delay
//! and connects.

use std::time::Duration;

use super::events::Ev;
use super::Sim;
use crate::transcript::Tag;

/// How long the push service takes to wake a device.
const PUSH_DELAY: Duration = Duration::from_secs(2);

impl Sim {
    /// `a2acp agent backup`: a snapshot of agent `i`'s persisted records.
    pub(super) fn backup(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.backup = Some(n.store.clone());
        let (name, len) = (n.name.clone(), n.store.len());
        self.line(
            &name,
            '|',
            format!("backup: a snapshot of its {len} persisted records"),
            Tag::Fault,
        );
    }

    /// The old device goes away; a new one restores the last backup, same key.
    pub(super) fn new_device(&mut self, i: usize) {
        let Some(backup) = self.nodes[i].backup.clone() else {
            let name = self.nodes[i].name.clone();
            self.line(
                &name,
                '|',
                "new device: no backup to restore".into(),
                Tag::Fault,
            );
            return;
        };
        let name = self.nodes[i].name.clone();
        self.line(
            &name,
            '|',
            format!(
                "device swap: the old device goes away; a new device restores the backup ({} records, the same key)",
                backup.len()
            ),
            Tag::Fault,
        );
        let old = std::mem::replace(&mut self.nodes[i].store, backup);
        self.nodes[i].other_device = Some(old);
        self.switch_device(i, false);
    }

    /// The device set aside comes back from its own records and connects last. `keep`:
    /// the device it replaces is set aside in its turn (else it is gone for good).
    pub(super) fn device_returns(&mut self, i: usize, keep: bool) {
        let name = self.nodes[i].name.clone();
        let Some(other) = self.nodes[i].other_device.take() else {
            self.line(
                &name,
                '|',
                "no other device to come back".into(),
                Tag::Fault,
            );
            return;
        };
        self.line(
            &name,
            '|',
            if keep {
                "the old device comes back with its own records and connects".into()
            } else {
                "the device set aside connects again; the other one, replaced, stops for good"
                    .into()
            },
            Tag::Fault,
        );
        let current = std::mem::replace(&mut self.nodes[i].store, other);
        if keep {
            self.nodes[i].other_device = Some(current);
        }
        self.switch_device(i, true);
    }

    /// The running device stops (its events are dropped) and the node's records start on
    /// another. `leave_connection`: the stopped device's connection stays open for the
    /// relay to replace; else it closes.
    fn switch_device(&mut self, i: usize, leave_connection: bool) {
        let n = &mut self.nodes[i];
        if n.agent.is_none() {
            // Crashed or not yet restarted: its restart picks the new records up.
            return;
        }
        n.agent = None;
        n.inc += 1;
        n.prompts.clear();
        n.scheduled.clear();
        n.reconnect_pending = false;
        n.delivering = None;
        if let Some(k) = n.timer.take() {
            self.queue.remove(&k);
        }
        if leave_connection {
            self.nodes[i].conn = None;
        } else {
            self.close_agent_conn(i);
        }
        self.restart_agent(i);
    }

    /// Relay `r` sent a wake-up to `endpoint`.
    pub(super) fn wake_up(&mut self, r: usize, endpoint: String) {
        self.stats.wake_ups += 1;
        let interval = match r {
            0 => self.spec.relay.config.wake_up.interval,
            k => self
                .spec
                .federation
                .as_ref()
                .and_then(|f| f.relays.get(k - 1))
                .map(|x| x.config.wake_up.interval)
                .unwrap_or_default(),
        };
        let node = self
            .spec
            .agents
            .iter()
            .position(|a| a.config.wake_up.as_deref() == Some(endpoint.as_str()));
        let at = self.elapsed();
        self.checker
            .wake_up(at, &endpoint, node.is_some(), interval);
        self.line(
            "relay",
            '|',
            format!("wake-up POSTed to {endpoint} (nothing else: no sender, no thread, no size)"),
            Tag::Fault,
        );
        if let Some(i) = node {
            if self.nodes[i].suspended {
                let at = self.now.add(PUSH_DELAY);
                self.push(at, Ev::Resume { node: i });
            }
        }
    }
}
