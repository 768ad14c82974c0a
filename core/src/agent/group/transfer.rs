//! Coordinator transfer (§10.3; SPEC-NOTES "Group threads", coordinator transfer).
//!
//! The coordinator proposes the role to one participant with a `coordinator_transfer`
//! carrying a handover of what every participant may already see (the new group header,
//! the intent, the last aggregated context). That participant's agent accepts or declines
//! without asking its user. On acceptance the old coordinator announces the new header on
//! each other leg and closes it; the new coordinator opens a leg of its own to each other
//! participant; a participant takes such a leg up only once it holds the announcement of
//! that epoch from the previous coordinator, so no participant can make itself
//! coordinator.

use crate::agent::group::Group;
use crate::agent::thread::{GroupLeg, ThreadState};
use crate::agent::*;

use crate::display;
use crate::negotiator::group::{aggregate, GroupView};
use crate::packet::{
    Body, ContextBody, CoordinatorTransferBody, CoordinatorTransferResponseBody, GroupHeader,
    Handover, Packet, TransferDecision,
};

impl Agent {
    /// The user asks to hand group `gid` to participant `to` (§10.3).
    pub(in crate::agent) fn transfer_coordinator(&mut self, gid: &str, to: Address) {
        let refusal = match self.shared.groups.get(gid) {
            None => Some(format!("There is no group {gid} this agent coordinates.")),
            Some(g) if g.closed => Some("That group thread has ended.".to_string()),
            Some(g) if g.proposal.is_some() => Some(
                "The coordinator can be handed over only while nothing is proposed.".to_string(),
            ),
            Some(g) if g.transfer.is_some() => {
                Some("A handover of this group is already waiting for an answer.".to_string())
            }
            Some(g) => match g.legs.get(&to).and_then(|l| self.threads.get(l)) {
                Some(t) if !t.state.is_terminal() => None,
                _ => Some(format!("{to} is not taking part in that group.")),
            },
        };
        if let Some(text) = refusal {
            self.shared.notify(None, NotifyKind::Info, text);
            return;
        }
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        let Some(lid) = g.legs.get(&to).cloned() else {
            return;
        };
        let me = self.shared.config.address.clone();
        let mut participants = vec![to.clone()];
        participants.extend(g.header.participants.iter().filter(|p| **p != to).cloned());
        let header = GroupHeader {
            group_id: g.id.clone(),
            coordinator: to.clone(),
            epoch: g.header.epoch.saturating_add(1),
            participants,
        };
        let handover = Handover {
            group: header.clone(),
            intent: g.intent.clone(),
            aggregated_context: Some(self.shared_view(g)),
            round_trips: self.threads.get(&lid).map_or(0, |t| t.round_trips),
            quorum: g.quorum,
            sequential: g.sequential,
        };
        let body = Body::CoordinatorTransfer(CoordinatorTransferBody {
            from_coordinator: me,
            to_coordinator: to.clone(),
            reason: "handed over by the coordinator's user".into(),
            requires_acceptance: true,
            handover: Some(handover),
        });
        let sent = self.in_thread(&lid, |step| step.send_packet(body).is_ok());
        if sent == Some(true) {
            if let Some(g) = self.shared.groups.get_mut(gid) {
                g.transfer = Some(header);
            }
            self.shared.dirty.groups.insert(gid.to_string());
        }
    }

    /// The aggregated context the group's participants may see, as it stands.
    fn shared_view(&self, g: &Group) -> serde_json::Value {
        let me = self.shared.config.address.clone();
        let members = self.group_members_view(g, true);
        let mine = self.group_mine(g);
        let view = GroupView {
            intent: &g.intent,
            coordinator: &me,
            mine: &mine,
            members: &members,
        };
        aggregate(&view).aggregated_context(&view).to_value()
    }

    /// A packet of a group leg the group handles (transfer, its answer, an announcement,
    /// a leg waiting for its announcement); `true` when it was taken care of here.
    pub(in crate::agent) fn on_group_packet(&mut self, id: &str, p: &Packet) -> bool {
        let me = self.shared.config.address.clone();
        let Some(t) = self.threads.get(id) else {
            return false;
        };
        let Some(leg) = t.group.clone() else {
            return false;
        };
        if leg.awaiting_announcement {
            // Opened by a new coordinator this agent has not heard announced yet: kept
            // until the previous coordinator's announcement arrives.
            if let Some(t) = self.threads.get_mut(id) {
                // The packet as received is the history's last entry.
                let json = t.history.last().map(|h| h.json.clone());
                if let (Some(g), Some(json)) = (t.group.as_mut(), json) {
                    if g.held.len() < 8 {
                        g.held.push(json);
                    }
                }
            }
            self.shared.dirty.threads.insert(id.to_string());
            return true;
        }
        match &p.body {
            Body::CoordinatorTransfer(b) if leg.header.coordinator != me => {
                self.in_thread(id, |step| step.count_exchange(p));
                self.on_transfer(id, &leg, b);
                true
            }
            Body::CoordinatorTransferResponse(r) if leg.header.coordinator == me => {
                self.in_thread(id, |step| step.count_exchange(p));
                self.on_transfer_answer(id, &leg, r);
                true
            }
            Body::Context(ContextBody { group: Some(h), .. })
                if leg.header.coordinator != me
                    && p.from == leg.header.coordinator
                    && h.group_id == leg.header.group_id
                    && h.epoch > leg.header.epoch =>
            {
                let h = h.clone();
                self.in_thread(id, |step| step.count_exchange(p));
                self.on_announcement(id, h);
                true
            }
            _ => false,
        }
    }

    /// A participant's side: the coordinator offers it the role.
    fn on_transfer(&mut self, id: &str, leg: &GroupLeg, b: &CoordinatorTransferBody) {
        let me = self.shared.config.address.clone();
        let from = self.threads.get(id).map(|t| t.peer.clone());
        let accept = b.handover.as_ref().is_some_and(|h| {
            let same: std::collections::BTreeSet<&Address> =
                leg.header.participants.iter().collect();
            let next: std::collections::BTreeSet<&Address> = h.group.participants.iter().collect();
            h.validate("handover").is_ok()
                && b.to_coordinator == me
                && h.group.coordinator == me
                && from.as_ref() == Some(&leg.header.coordinator)
                && b.from_coordinator == leg.header.coordinator
                && h.group.group_id == leg.header.group_id
                && h.group.epoch == leg.header.epoch.saturating_add(1)
                && same == next
                && h.group.participants.len() == leg.header.participants.len()
        });
        let decision = if accept {
            TransferDecision::Accepted
        } else {
            TransferDecision::Declined
        };
        self.in_thread(id, |step| {
            let _ = step.send_packet(Body::CoordinatorTransferResponse(
                CoordinatorTransferResponseBody {
                    decision,
                    reason: (!accept)
                        .then(|| "not a valid handover of a group this agent is in".into()),
                },
            ));
        });
        let Some(h) = b.handover.clone().filter(|_| accept) else {
            self.shared
                .note(Some(id), "coordinator transfer declined".into());
            return;
        };
        // This agent coordinates from now on: its leg with the old coordinator becomes
        // one of its legs, and it opens one to each other participant.
        let header = h.group.clone();
        let old = leg.header.coordinator.clone();
        if let Some(t) = self.threads.get_mut(id) {
            if let Some(g) = t.group.as_mut() {
                g.header = header.clone();
                g.flexibility = None;
            }
            t.coordinator = me.clone();
        }
        self.shared.dirty.threads.insert(id.to_string());
        let mut legs = BTreeMap::new();
        legs.insert(old.clone(), id.to_string());
        for p in header
            .participants
            .iter()
            .filter(|p| **p != me && **p != old)
        {
            let lg = GroupLeg::new(header.clone());
            let lid = self.create_thread(p, h.intent.clone(), Context::new(), Some(lg));
            if let Some(t) = self.threads.get_mut(&lid) {
                t.user_initiated = false;
            }
            legs.insert(p.clone(), lid);
        }
        let gid = header.group_id.clone();
        self.shared.groups.insert(
            gid.clone(),
            Group::new(
                header.clone(),
                h.intent.clone(),
                Context::new(),
                match (h.sequential, h.quorum) {
                    (true, _) => GroupConfirmation::Sequential,
                    (false, Some(q)) => GroupConfirmation::Quorum(q),
                    (false, None) => GroupConfirmation::All,
                },
                legs.clone(),
            ),
        );
        self.shared.dirty.groups.insert(gid.clone());
        self.shared.audit(
            None,
            AgentEvent::GroupStarted {
                group_id: gid.clone(),
                participants: header.participants.clone(),
            },
        );
        self.shared.notify(
            Some(gid),
            NotifyKind::Info,
            format!(
                "You now coordinate “{}” ({old} handed it over).",
                display::line(&h.intent.summary, display::MAX_SHORT)
            ),
        );
        for (p, lid) in &legs {
            if *p != old {
                self.in_thread(lid, |step| step.send_first_packet());
            }
        }
    }

    /// The coordinator's side: the participant answered the offer.
    fn on_transfer_answer(
        &mut self,
        id: &str,
        leg: &GroupLeg,
        r: &CoordinatorTransferResponseBody,
    ) {
        let gid = leg.header.group_id.clone();
        let Some(header) = self
            .shared
            .groups
            .get_mut(&gid)
            .and_then(|g| g.transfer.take())
        else {
            return;
        };
        self.shared.dirty.groups.insert(gid.clone());
        let to = header.coordinator.clone();
        if r.decision != TransferDecision::Accepted {
            self.shared.notify(
                Some(gid),
                NotifyKind::Info,
                format!("{to} declined to coordinate the group; you still coordinate it."),
            );
            return;
        }
        let (legs, summary) = match self.shared.groups.get_mut(&gid) {
            Some(g) => {
                g.closed = true;
                g.header = header.clone();
                (
                    g.legs.clone(),
                    display::line(&g.intent.summary, display::MAX_SHORT).into_owned(),
                )
            }
            None => return,
        };
        for (p, lid) in &legs {
            if lid == id {
                // The leg with the new coordinator: this agent is a participant on it now.
                if let Some(t) = self.threads.get_mut(lid) {
                    if let Some(g) = t.group.as_mut() {
                        g.header = header.clone();
                    }
                    t.coordinator = to.clone();
                }
                self.shared.dirty.threads.insert(lid.clone());
                continue;
            }
            let h = header.clone();
            let _ = p;
            self.in_thread(lid, |step| {
                if step.t.state.is_terminal() {
                    return;
                }
                let body = Body::Context(ContextBody {
                    group: Some(h.clone()),
                    ..Default::default()
                });
                let _ = step.send_packet(body);
                if let Some(g) = step.t.group.as_mut() {
                    g.header = h;
                }
                step.close_prompts();
                step.set_state(
                    ThreadState::Declined,
                    "the group moved to a new coordinator",
                );
            });
        }
        self.shared.notify(
            Some(gid),
            NotifyKind::Info,
            format!("{to} now coordinates “{summary}”."),
        );
    }

    /// A participant's side: the coordinator announced a new header (a new coordinator).
    fn on_announcement(&mut self, id: &str, h: GroupHeader) {
        let summary = self
            .threads
            .get(id)
            .map(|t| display::line(&t.intent.summary, display::MAX_SHORT).into_owned())
            .unwrap_or_default();
        let new = h.coordinator.clone();
        self.in_thread(id, |step| {
            if let Some(g) = step.t.group.as_mut() {
                g.header = h.clone();
                g.flexibility = None;
            }
            step.mark_changed();
            if !step.t.state.is_terminal() {
                step.close_prompts();
                step.set_state(
                    ThreadState::Declined,
                    "the group moved to a new coordinator",
                );
            }
        });
        self.shared.notify(
            Some(id.to_string()),
            NotifyKind::Info,
            format!("{new} now coordinates “{summary}”."),
        );
        // Legs the new coordinator opened before this announcement arrived go on now.
        let waiting: Vec<String> = self
            .threads
            .values()
            .filter(|t| {
                t.group.as_ref().is_some_and(|g| {
                    g.awaiting_announcement
                        && g.header.group_id == h.group_id
                        && g.header.coordinator == h.coordinator
                        && g.header.epoch <= h.epoch
                })
            })
            .map(|t| t.id.clone())
            .collect();
        for lid in waiting {
            let held = match self.threads.get_mut(&lid).and_then(|t| t.group.as_mut()) {
                Some(g) => {
                    g.awaiting_announcement = false;
                    std::mem::take(&mut g.held)
                }
                None => continue,
            };
            self.shared.dirty.threads.insert(lid.clone());
            for json in held {
                if let Ok(p) = Packet::parse(json.as_bytes()) {
                    self.on_packet(&lid, p);
                }
            }
        }
    }

    /// Whether the announcement of `h` (its coordinator at its epoch) is held by a leg
    /// of the same group.
    pub(in crate::agent) fn announced(&self, h: &GroupHeader) -> bool {
        h.epoch == 0
            || self.threads.values().any(|t| {
                t.group.as_ref().is_some_and(|g| {
                    g.header.group_id == h.group_id
                        && g.header.coordinator == h.coordinator
                        && g.header.epoch >= h.epoch
                })
            })
    }
}
