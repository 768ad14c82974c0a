//! What the simulator learns from the agent's typed events ([`AgentEvent`]): a packet
//! received (exactly-once audit, transcript), a duplicate, a packet sent, a state change,
//! a peer's key change, a bug of the agent's own. It matches on variants; the words of a
//! transcript line come from the shared renderer ([`a2acp_core::transcript`]).

use std::time::Duration;

use a2acp_core::agent::space::SpaceEvent;
use a2acp_core::agent::{AgentEvent, AuditRecord, DropReason};
use a2acp_core::transcript::{describe_event, RECEIVED};

use super::Sim;
use crate::model::KeyChangePolicy;
use crate::transcript::{short, Tag};

impl Sim {
    /// One audit record of agent `i`: a bug goes to its checker, a packet received to the
    /// exactly-once audit and the transcript, a duplicate marks the delivery as seen, a
    /// packet sent is counted, a key change is answered by a user who accepts new keys;
    /// every record becomes a transcript line. Returns the line's place in the step (0:
    /// what was received, 1: the agent's own record).
    pub(super) fn on_audit(&mut self, i: usize, a: &AuditRecord) -> u8 {
        if a.is_bug() {
            let (at, name) = (self.elapsed(), self.nodes[i].name.clone());
            self.checker.core_bug(at, &name, &a.event.to_string());
        }
        match &a.event {
            AgentEvent::Received { packet_id, .. } => {
                self.mark_delivered(i, packet_id);
                let at = self.elapsed();
                let name = &self.nodes[i].name;
                self.checker.received(at, i, name, packet_id);
            }
            AgentEvent::Dropped {
                drop: DropReason::Duplicate { packet_id },
                ..
            } => self.mark_delivered(i, packet_id),
            AgentEvent::Space(SpaceEvent::Received { packet_id, .. }) => {
                self.mark_delivered(i, packet_id);
                let at = self.elapsed();
                let name = &self.nodes[i].name;
                self.checker.space_received(at, i, name, packet_id);
            }
            AgentEvent::Sent { .. } => self.stats.packets_sent += 1,
            AgentEvent::Space(SpaceEvent::Sent { packet_id, .. }) => {
                self.checker.space_sent(packet_id);
            }
            AgentEvent::RetractionSent { fields, .. } => {
                if let Some(t) = &a.thread_id {
                    self.checker.retraction_sent(i, t, fields, a.at);
                }
            }
            AgentEvent::RetractionAcknowledged { fields, .. } => {
                if let Some(t) = &a.thread_id {
                    let (at, name) = (self.elapsed(), self.nodes[i].name.clone());
                    self.checker
                        .retraction_acknowledged((at, i, &name), t, fields, a.at);
                }
            }
            AgentEvent::RetractionUnacknowledged { fields, .. } => {
                if let Some(t) = &a.thread_id {
                    self.checker.retraction_unacknowledged(i, t, fields);
                }
            }
            AgentEvent::FlexibilityRequested { group_id, .. } => {
                self.group_log
                    .entry(group_id.clone())
                    .or_default()
                    .flexibility += 1;
            }
            AgentEvent::GroupProposed {
                group_id, required, ..
            } => {
                self.group_log
                    .entry(group_id.clone())
                    .or_default()
                    .proposals
                    .push(*required);
            }
            AgentEvent::GroupOutcome {
                group_id, reached, ..
            } => {
                self.group_log.entry(group_id.clone()).or_default().reached |= *reached;
            }
            AgentEvent::OwnKeyRotated { .. } => {
                if let Some(next) = self.nodes[i].next_identity.take() {
                    self.nodes[i].identity = next;
                }
            }
            AgentEvent::OwnRotationRefused { .. } => self.nodes[i].next_identity = None,
            AgentEvent::ConfirmationRefused { peer, why } if self.by_address.contains_key(peer) => {
                // Every agent of the world signs what it confirms: a refusal is a bug.
                let (at, name) = (self.elapsed(), self.nodes[i].name.clone());
                let text = format!("{name} refused the confirmation of {peer}: {why}");
                self.checker.fail(at, "receipts", text);
            }
            AgentEvent::KeyPinned { peer } => {
                if let Some(&node) = self.by_address.get(peer) {
                    self.keys.pinned(node, i);
                }
            }
            AgentEvent::KeyRotated { peer, .. } => {
                if let Some(&node) = self.by_address.get(peer) {
                    let names = self.names();
                    self.keys.repinned(node, i, self.now, &names);
                }
            }
            AgentEvent::KeyChanged { peer, .. } | AgentEvent::PeerRecovered { peer, .. }
                if self.spec.agents[i].user.key_change == KeyChangePolicy::Accept =>
            {
                let (lo, hi) = self.spec.agents[i].user.delay;
                let d = self.users.between(lo, hi);
                let at = self.now.add(Duration::from_millis(d));
                let peer = peer.clone();
                self.push(at, super::events::Ev::AcceptKey { node: i, peer });
            }
            _ => {}
        }
        let place = match a.event {
            AgentEvent::Received { .. } => 0,
            _ => 1,
        };
        if self.record {
            self.record_event(i, a);
        }
        place
    }

    /// The delivery agent `i` is being handed reached its logic (or was a duplicate).
    fn mark_delivered(&mut self, i: usize, packet_id: &str) {
        if let Some((p, seen)) = self.nodes[i].delivering.as_mut() {
            if p == packet_id {
                *seen = true;
            }
        }
    }

    /// The transcript line of one audit record.
    fn record_event(&mut self, i: usize, a: &AuditRecord) {
        let Some(agent) = self.nodes[i].agent.as_ref() else {
            return;
        };
        let (mark, text) = describe_event(agent, a.thread_id.as_deref(), &a.event);
        let tag = match &a.event {
            AgentEvent::Sent {
                kind,
                packet_id,
                to,
                ..
            } => Tag::Sent {
                pid: packet_id.clone(),
                kind: kind.clone(),
                peer: short(to.as_str()),
            },
            AgentEvent::Received {
                kind,
                packet_id,
                from,
                ..
            } => Tag::Received {
                pid: packet_id.clone(),
                kind: kind.clone(),
                peer: short(from.as_str()),
            },
            AgentEvent::StateChanged { .. } => Tag::State,
            _ => Tag::Note,
        };
        debug_assert!(mark != RECEIVED || matches!(tag, Tag::Received { .. }));
        let name = self.nodes[i].name.clone();
        self.line(&name, mark, text, tag);
    }
}
