//! What the simulator learns from the agent's audit records and notifications.
//!
//! **Text parsing, in this one place.** Until the agent emits typed events, the simulator
//! recovers what the agent did — a packet received (exactly-once audit, transcript), a
//! duplicate, a packet sent, a state change, a peer's key change — from the text of its
//! audit records and security notifications. Nothing else in the simulator reads that
//! text; swapping this file for a match on typed events changes nothing else.

use a2acp_core::transcript::summarize_packet;
use a2acp_core::Address;

use super::Sim;
use crate::transcript::{short, Tag};

impl Sim {
    /// One audit record of agent `i`: a packet received goes to the exactly-once audit
    /// and the transcript, a duplicate marks the delivery as seen, a packet sent is
    /// counted; every record becomes a transcript line. Returns the line's place in the
    /// step (0: what was received, 1: the agent's own record).
    pub(super) fn on_audit(&mut self, i: usize, event: &str) -> u8 {
        let name = self.nodes[i].name.clone();
        if let Some(rest) = event.strip_prefix("received ") {
            let mut w = rest.split_whitespace();
            let kind = w.next().unwrap_or("?").to_string();
            let pid = w.next().unwrap_or("?").to_string();
            let peer = w.nth(1).map(short).unwrap_or_default();
            if let Some((p, seen)) = self.nodes[i].delivering.as_mut() {
                if *p == pid {
                    *seen = true;
                }
            }
            let at = self.elapsed();
            self.checker.received(at, i, &name, &pid);
            self.line(
                &name,
                '<',
                format!("{kind} {pid} from {peer}"),
                Tag::Received { pid, kind, peer },
            );
            return 0;
        }
        if let Some(rest) = event.strip_prefix("duplicate ") {
            let pid = rest.split_whitespace().next().unwrap_or("");
            if let Some((p, seen)) = self.nodes[i].delivering.as_mut() {
                if p == pid {
                    *seen = true;
                }
            }
        }
        if let Some(rest) = event.strip_prefix("sent ") {
            self.stats.packets_sent += 1;
            if !self.record {
                return 1;
            }
            let mut w = rest.split_whitespace();
            let kind = w.next().unwrap_or("?").to_string();
            let pid = w.next().unwrap_or("?").to_string();
            let peer = w.nth(1).map(short).unwrap_or_default();
            let body = self.nodes[i]
                .agent
                .as_ref()
                .and_then(|a| {
                    a.threads()
                        .values()
                        .rev()
                        .flat_map(|t| t.history.iter().rev())
                        .find(|h| h.packet_id == pid)
                        .map(|h| summarize_packet(&h.json))
                })
                .unwrap_or_default();
            self.line(
                &name,
                '>',
                format!("{kind} {pid} to {peer}{body}"),
                Tag::Sent { pid, kind, peer },
            );
            return 1;
        }
        let tag = if event.starts_with("state ") {
            Tag::State
        } else {
            Tag::Note
        };
        self.line(&name, '|', event.to_string(), tag);
        1
    }

    /// The peer a security notification says changed its identity key.
    pub(super) fn key_changed_peer(text: &str) -> Option<Address> {
        text.strip_prefix("The identity key of ")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|a| Address::parse(a).ok())
    }
}
