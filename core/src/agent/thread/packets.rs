//! Sending and receiving context packets (§4): sealing, the first packet, opening
//! envelopes (a thread's packet, or a space packet for `agent::space`), admitting new
//! threads, the version handshake (§15), and what a packet's body provides.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::Value;

use crate::agent::permissions::{usage_policy, Tier};
use crate::agent::thread::{HeldPackets, HistoryEntry, Stage, Thread, ThreadState, Turn, Waiting};
use crate::agent::*;

use crate::crypto::Envelope;
use crate::crypto::{thread_tag, Direction};
use crate::display;
use crate::negotiator::{self};
use crate::packet::{
    self, Body, ContextBody, Intent, Packet, PermissionsDeclaration, ResolutionStatus,
    ThreadStateBody,
};

impl Agent {
    pub(in crate::agent) fn on_envelope(&mut self, env: Envelope) {
        let me = self.shared.config.address.clone();
        if env.to != me {
            self.shared
                .dropped(None, DropReason::NotForThisAgent { to: env.to.clone() });
            return;
        }
        let peer = env.from.clone();
        if peer == me {
            // No thread has this agent on both ends (open_thread refuses it); an envelope
            // in its own name could only be forged (e.g. by a relay) to speak for its user.
            self.shared.dropped(None, DropReason::OwnName);
            return;
        }
        if peer.is_bridged() {
            // Bridged peers speak only through their bridge; an envelope in such a name
            // came through the relay from someone else.
            self.shared.dropped(
                None,
                DropReason::Refused {
                    peer,
                    error: "an A2A client's address does not send through the relay".into(),
                },
            );
            return;
        }
        if self.shared.settings.blocked.contains(&peer) {
            self.shared.dropped(None, DropReason::Blocked { peer });
            return;
        }
        let pinned = self
            .shared
            .peers
            .get(&peer)
            .and_then(|rec| rec.key.map(|k| (k, rec.retired_key)));
        // An envelope under the key the peer rotated away from, sealed before its rotation
        // and delivered after a newer one (the relay serves its queues thread by thread).
        let mut late_key = None;
        if let Some((k, retired)) = pinned {
            if k != env.from_key {
                // A rotation statement signed by the pinned key moves the pin without
                // halting anything (SPEC-NOTES "Key rotation").
                // Several statements when the pin is more than one rotation behind.
                let rotated = env.rotation_path(&k).is_some_and(|path| {
                    let last = path.len() - 1;
                    path.into_iter()
                        .enumerate()
                        .all(|(i, (r, _))| self.peer_rotated(&peer, r, i == last))
                });
                if !rotated && retired == Some(env.from_key) {
                    // Authentic under that key, it is handled: the relay accepts a key only
                    // while it is the sender's current one, so what it still delivers under
                    // the retired key was sent before the rotation (SPEC-NOTES "Key rotation").
                    match PublicKey::from_bytes(&env.from_key) {
                        Ok(pk) => late_key = Some(pk),
                        Err(_) => {
                            self.shared.dropped(None, DropReason::RetiredKey { peer });
                            return;
                        }
                    }
                } else if !rotated {
                    // Only an envelope that is authentic under the new key is a key
                    // change; anything else is noise (or tampering) and changes nothing.
                    let authentic = PublicKey::from_bytes(&env.from_key)
                        .and_then(|pk| crate::crypto::verify_envelope(&env, &pk))
                        .is_ok();
                    if authentic {
                        self.key_changed(&peer, env.from_key);
                        self.hold_for_key(&peer, env.clone());
                        self.hold_for_key(&peer, env.clone());
                        // The relay's answer carries a recovery, if that is what this is
                        // (SPEC-NOTES "Recovery"): the user is told so.
                        self.shared.lookup(&peer);
                    } else {
                        self.shared.dropped(None, DropReason::BadSignature { peer });
                    }
                    return;
                }
            }
        }
        let sender_key = match late_key.or_else(|| self.shared.keys.get(&peer).cloned()) {
            Some(k) => k,
            None => match PublicKey::from_bytes(&env.from_key) {
                Ok(k) => k,
                Err(e) => {
                    self.shared.dropped(
                        None,
                        DropReason::BadKey {
                            peer,
                            error: e.to_string(),
                        },
                    );
                    return;
                }
            },
        };
        if self
            .shared
            .space_tags
            .contains_key(&(peer.clone(), env.thread))
        {
            self.on_space_envelope(env, sender_key);
            return;
        }
        let existing = self.shared.tags.get(&(peer.clone(), env.thread)).cloned();
        let (opened, new_session) =
            match &existing {
                Some(id) => {
                    let Some(t) = self.threads.get_mut(id) else {
                        return;
                    };
                    let expected = t.my_direction().reverse();
                    // A peer that has not learnt this agent's rotation yet sealed to the key it
                    // left: that one still opens it (SPEC-NOTES "Key rotation").
                    let opened =
                        t.session
                            .open(&self.shared.identity, &me, &env, &sender_key, expected);
                    let opened = self.shared.retired_identities.iter().rev().fold(
                        opened,
                        |r, old| match r {
                            Err(e) => t
                                .session
                                .open(old, &me, &env, &sender_key, expected)
                                .map_err(|_| e),
                            ok => ok,
                        },
                    );
                    match opened {
                        Ok(o) => (o, None),
                        Err(e) => {
                            self.shared.dropped(
                                Some(id),
                                DropReason::Refused {
                                    peer,
                                    error: e.to_string(),
                                },
                            );
                            return;
                        }
                    }
                }
                None => {
                    if env.peer_eph.is_some() || env.dir != Direction::FromInitiator {
                        self.shared
                            .dropped(None, DropReason::UnknownThread { peer });
                        return;
                    }
                    // Draw the session only if the envelope opens, so bad input changes nothing.
                    let mut probe = self.shared.meta.rng.clone();
                    let mut s = new_session(&mut probe);
                    let opened = s.open(
                        &self.shared.identity,
                        &me,
                        &env,
                        &sender_key,
                        Direction::FromInitiator,
                    );
                    let opened = self.shared.retired_identities.iter().rev().fold(
                        opened,
                        |r, old| match r {
                            Err(e) => s
                                .open(old, &me, &env, &sender_key, Direction::FromInitiator)
                                .map_err(|_| e),
                            ok => ok,
                        },
                    );
                    match opened {
                        Ok(o) => {
                            self.shared.meta.rng = probe;
                            self.shared.dirty.meta = true;
                            (o, Some(s))
                        }
                        Err(e) => {
                            self.shared.dropped(
                                None,
                                DropReason::Refused {
                                    peer,
                                    error: e.to_string(),
                                },
                            );
                            return;
                        }
                    }
                }
            };
        // Authentic from here on: pin on first contact (§16).
        if self.shared.peers.get(&peer).and_then(|r| r.key).is_none()
            && self.pin_key(&peer, sender_key.clone()).is_err()
        {
            return;
        }
        if let Some(id) = &existing {
            self.shared.dirty.threads.insert(id.clone());
        }
        if existing.is_none() && is_space_packet(&opened.packet) {
            if let Some(session) = new_session {
                self.on_new_space_leg(&peer, session, &opened);
            }
            return;
        }
        let packet = match Packet::parse(&opened.packet) {
            Ok(p) if p.from == peer && p.to == me && p.thread_id == opened.thread_id => p,
            Ok(_) => {
                self.shared
                    .malformed(&peer, "header does not match its envelope".into());
                return;
            }
            Err(e) => {
                self.shared.malformed(&peer, e.to_string());
                return;
            }
        };
        let id = packet.thread_id.clone();
        match (existing, new_session) {
            (Some(_), _) => {}
            (None, Some(session)) => {
                if !self.admit_new_thread(&packet, session) {
                    return;
                }
            }
            (None, None) => return,
        }
        self.take_packet(&id, &peer, packet, &opened.packet);
    }

    /// A packet of `peer` in its thread `id` (admitted already), authentic — opened from
    /// its envelope, or handed over by the A2A listener: duplicates and packets past the
    /// limits refused, the rest recorded and processed.
    pub(in crate::agent) fn take_packet(
        &mut self,
        id: &str,
        peer: &Address,
        packet: Packet,
        raw: &[u8],
    ) {
        let id = id.to_string();
        let peer = peer.clone();
        let Some(t) = self.threads.get_mut(&id) else {
            return;
        };
        if t.received_ids.contains(&packet.packet_id) {
            self.shared.dropped(
                Some(&id),
                DropReason::Duplicate {
                    packet_id: packet.packet_id.clone(),
                },
            );
            return;
        }
        if let Some((code, why)) = self.packet_refusal(&id, &packet, raw.len()) {
            self.in_thread(&id, |step| step.refuse_packet(&packet, code, why));
            return;
        }
        let Some(t) = self.threads.get_mut(&id) else {
            return;
        };
        t.received_ids.insert(packet.packet_id.clone());
        t.history.push(HistoryEntry {
            packet_id: packet.packet_id.clone(),
            outgoing: false,
            kind: packet.body.type_name().to_string(),
            json: String::from_utf8_lossy(raw).into_owned(),
        });
        if packet.body.type_name() != "thread_state" {
            if let Some(since) = t.awaiting_peer_since.take() {
                if t.peer_response_ms.len() < crate::agent::thread::MAX_RESPONSE_TIMES {
                    let ms = self.shared.now.since(since).as_millis();
                    t.peer_response_ms
                        .push(u64::try_from(ms).unwrap_or(u64::MAX));
                }
            }
        }
        t.last_activity = self.shared.now;
        self.shared.dirty.threads.insert(id.clone());
        let halted = t.halted;
        let inactive = t.halted || t.state.is_terminal();
        let expired = !t.halted && t.state == ThreadState::Expired;
        self.shared.audit(
            Some(&id),
            AgentEvent::Received {
                kind: packet.body.type_name().to_string(),
                packet_id: packet.packet_id.clone(),
                from: peer.clone(),
                fields: FieldsNamed::of(&packet.body),
            },
        );
        if !halted && matches!(packet.body, Body::Retraction(_) | Body::RetractionAck(_)) {
            // Taking back what was shared works in any state, an ended thread's too
            // (SPEC-NOTES "Retraction").
            let pid = packet.packet_id.clone();
            self.in_thread(&id, |step| match packet.body {
                Body::Retraction(b) => step.on_retraction(&pid, b),
                Body::RetractionAck(b) => step.on_retraction_ack(b),
                _ => {}
            });
            return;
        }
        if inactive {
            // An ended thread still answers gap requests during the grace period (§13.1).
            if let Body::ThreadState(s) = packet.body {
                self.in_thread(&id, |step| step.on_thread_state(s));
            } else if let (true, Body::ResolutionResponse(b)) = (expired, &packet.body) {
                if b.status == ResolutionStatus::Declined
                    && matches!(b.reason_class.as_deref(), None | Some("user_declined"))
                {
                    // The other user closed the thread before it expired here; only the
                    // cancel came late (this device was off). The sender ended DECLINED
                    // and stays so, so this side ends DECLINED too instead of answering
                    // EXPIRED (§8.3; swarm seeds 810, 817).
                    let msg = b.message_to_other_agent.clone().unwrap_or_default();
                    self.in_thread(&id, |step| {
                        step.set_state(
                            ThreadState::Declined,
                            "the other user had declined before it expired",
                        )
                    });
                    self.shared.notify(
                        Some(id.clone()),
                        NotifyKind::Declined,
                        format!("{peer} had declined before the proposal expired. {msg}"),
                    );
                } else {
                    self.in_thread(&id, |step| step.send_thread_state());
                }
            } else if !halted && self.in_thread(&id, |step| step.summary_pending()) != Some(true) {
                // A late packet (a confirmation sent in time that reached this device
                // after the deadline): the sender still thinks the thread is open, so
                // it is told how the thread ended here (§8.3 "both users are notified";
                // swarm seed 142). The summary lists this side's packets, so a closing
                // packet the peer never took in (a cancel that overtook the thread's
                // first packet, refused for opening no thread) is asked for and
                // re-sent (§13.1; large swarm, seed 1).
                self.in_thread(&id, |step| step.send_thread_state());
            }
            return;
        }
        if let Some(rec) = self.shared.peers.get_mut(&peer) {
            if rec.malformed > 0 && !rec.flagged {
                rec.malformed = 0;
                self.shared.dirty.peers.insert(peer.clone());
            }
        }
        self.on_packet(&id, packet);
    }

    /// A first packet of a thread the peer opened. Returns whether it was admitted.
    pub(in crate::agent) fn admit_new_thread(
        &mut self,
        p: &Packet,
        session: ThreadSession,
    ) -> bool {
        if self.threads.contains_key(&p.thread_id) {
            self.shared
                .malformed(&p.from, format!("thread id {} already in use", p.thread_id));
            return false;
        }
        // Children of a fork are created when the `thread_fork` arrives, so every other
        // unknown thread must start with a `context` carrying its intent.
        let intent = match &p.body {
            Body::Context(ContextBody {
                intent: Some(i), ..
            }) => i.clone(),
            Body::Context(_) => {
                self.shared
                    .malformed(&p.from, "first packet of a thread has no intent".into());
                return false;
            }
            _ => {
                self.shared.malformed(
                    &p.from,
                    format!("a thread cannot start with {}", p.body.type_name()),
                );
                return false;
            }
        };
        let group = match &p.body {
            Body::Context(ContextBody { group: Some(h), .. }) => Some(h.clone()),
            _ => None,
        };
        if let Some(h) = &group {
            // A leg of a group: opened by its coordinator, naming this agent (§10.1).
            let me = &self.shared.config.address;
            if h.coordinator != p.from || !h.participants.contains(me) {
                self.shared.malformed(
                    &p.from,
                    "a group leg must be opened by the group's coordinator and name this agent"
                        .into(),
                );
                return false;
            }
        }
        if let Some((code, why)) = self.new_thread_refusal(p) {
            self.shared.refuse_new_thread(p, session, code, why);
            return false;
        }
        self.forget_ended_threads(&p.from);
        let mut t = blank_thread(
            &p.thread_id,
            &p.from,
            false,
            intent,
            session,
            self.shared.now,
            &p.from,
        );
        let awaiting = group.as_ref().is_some_and(|h| !self.announced(h));
        t.group = group.map(|header| crate::agent::thread::GroupLeg {
            awaiting_announcement: awaiting,
            ..crate::agent::thread::GroupLeg::new(header)
        });
        self.shared.tags.insert(
            (p.from.clone(), thread_tag(&p.thread_id)),
            p.thread_id.clone(),
        );
        let coordinator = t.group.as_ref().map(|g| g.header.coordinator.clone());
        self.threads.insert(p.thread_id.clone(), t);
        self.shared.audit(
            Some(&p.thread_id),
            AgentEvent::ThreadOpened { by: p.from.clone() },
        );
        match coordinator {
            Some(c) => self.shared.group_begun(&p.thread_id, &c),
            None => self.shared.thread_begun(&p.thread_id, &p.from),
        }
        true
    }

    pub(in crate::agent) fn on_packet(&mut self, id: &str, p: Packet) {
        if self.on_group_packet(id, &p) {
            return;
        }
        if !matches!(p.body, Body::ThreadFork(_)) {
            self.in_thread(id, |step| step.on_packet(p));
            return;
        }
        self.in_thread(id, |step| step.count_exchange(&p));
        if let Body::ThreadFork(f) = p.body {
            self.on_thread_fork(id, f);
        }
    }
}

impl ThreadStep<'_> {
    /// A packet of the peer in this thread (a fork is the agent's: it makes threads).
    pub(in crate::agent) fn on_packet(&mut self, p: Packet) {
        self.count_exchange(&p);
        if !self.t.forked_into.is_empty() {
            // Split into children (§6.5): they carry the negotiation on.
            return;
        }
        match p.body {
            Body::Context(b) => self.on_context(b),
            Body::ContextRequest(b) => {
                self.absorb(&b.context_provided, b.permissions.as_ref(), &[]);
                self.take_needs(&b.needs);
                self.evaluate(Turn::AnsweringRequest);
            }
            Body::ContextResponse(b) => {
                self.absorb(
                    &b.context_provided,
                    b.permissions.as_ref(),
                    &b.context_unavailable,
                );
                self.evaluate(Turn::Free);
            }
            Body::IntentUpdate(b) => self.on_intent_update(b),
            Body::Resolution(b) => self.on_resolution(p.packet_id, p.from, b),
            Body::ResolutionResponse(b) => self.on_resolution_response(&p.from, b),
            Body::ExecutionReport(r) => self.on_execution_report(r),
            Body::ThreadState(s) => self.on_thread_state(s),
            Body::ThreadFork(_) | Body::Retraction(_) | Body::RetractionAck(_) => {}
            Body::CoordinatorTransfer(c) => {
                let accept = c.to_coordinator == self.shared.config.address;
                if accept {
                    self.t.coordinator = c.to_coordinator.clone();
                }
                if c.requires_acceptance {
                    let _ = self.send_packet(Body::CoordinatorTransferResponse(
                        packet::CoordinatorTransferResponseBody {
                            decision: if accept {
                                packet::TransferDecision::Accepted
                            } else {
                                packet::TransferDecision::Declined
                            },
                            reason: None,
                        },
                    ));
                }
            }
            Body::CoordinatorTransferResponse(r) => {
                if r.decision == packet::TransferDecision::Accepted {
                    self.t.coordinator = self.t.peer.clone();
                }
            }
            Body::ProcessingError(e) => {
                self.set_waiting(Waiting::Nothing);
                self.notify(
                    NotifyKind::Escalated,
                    format!(
                        "The other agent could not process this thread ({}); it is paused. {}",
                        display::line(&e.error, display::MAX_SHORT),
                        display::line(&e.message, display::MAX_LONG)
                    ),
                );
            }
        }
    }
    /// Negotiates the version on the peer's packet and counts a context exchange (§6.4).
    pub(in crate::agent) fn count_exchange(&mut self, p: &Packet) {
        self.negotiate_version(p);
        if counts_as_exchange(&p.body) {
            self.t.round_trips += 1;
        }
    }

    /// §5.4: the first packet front-loads everything the user gave and everything
    /// always_share that is relevant; never_share is withheld.
    pub(in crate::agent) fn send_first_packet(&mut self) {
        let t = &*self.t;
        let mut context = Context::new();
        let mut withheld = BTreeSet::new();
        for (k, v) in &t.local {
            match self.shared.thread_tier(t, k) {
                Tier::NeverShare => {
                    withheld.insert(k.clone());
                }
                _ => {
                    context.insert(k.clone(), v.clone());
                }
            }
        }
        // Enrich from the profile (§5.4) with always_share values relevant to the
        // intent, and with what this peer usually asks for (relationship memory).
        let memo = self.shared.remembered(&t.peer, &t.intent);
        for field in negotiator::initial_needs(&t.intent, &context)
            .iter()
            .map(|n| n.field.clone())
            .chain(["timezone".to_string()])
            .chain(memo.usually_requests.iter().cloned())
        {
            if context.contains_key(&field) {
                continue;
            }
            if let Some(v) = self.shared.config.profile.get(&field) {
                if self.shared.thread_tier(t, &field) == Tier::AlwaysShare {
                    context.insert(field.clone(), v.clone());
                }
            }
        }
        let mut needs = negotiator::initial_needs(&t.intent, &context);
        if t.group.is_some() {
            for n in &mut needs {
                n.reason = n.reason.replace("both of you", "the whole group");
            }
        }
        if t.group.is_some()
            && needs.iter().any(|n| n.field == "time_windows")
            && !needs.iter().any(|n| n.field == "timezone")
        {
            // A group spans time zones: windows without a zone cannot be lined up.
            needs.push(packet::Need {
                field: "timezone".into(),
                reason: "Your time zone, to line up everyone's availability".into(),
                priority: packet::Priority::Helpful,
            });
        }
        let intent = t.intent.clone();
        let to = t.peer.clone();
        if !withheld.is_empty() {
            self.notify(
                NotifyKind::Info,
                format!(
                    "Not shared with {to} (never_share): {}",
                    withheld.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        let t = &mut *self.t;
        t.withheld.extend(withheld);
        t.asked.extend(needs.iter().map(|n| n.field.clone()));
        let group = t.group.as_ref().map(|g| g.header.clone());
        let body = Body::Context(ContextBody {
            intent: Some(intent),
            context,
            needs,
            permissions: None,
            group,
            ..Default::default()
        });
        if self.send_packet(body).is_ok() {
            self.set_waiting(Waiting::Peer);
        }
    }

    /// Builds, checks, records and seals one packet of a thread.
    pub(in crate::agent) fn send_packet(&mut self, mut body: Body) -> Result<String, ()> {
        let id = self.id;
        let me = self.shared.config.address.clone();
        let t = &*self.t;
        let peer = t.peer.clone();
        // Never-share gate on every provided field (defence in depth, §7.1), and what
        // this agent's user took back in the thread is never shared there again
        // (SPEC-NOTES "Retraction").
        let mut stripped = Vec::new();
        if let Some(ctx) = provided_mut(&mut body) {
            let keys: Vec<String> = ctx.keys().cloned().collect();
            for k in keys {
                let taken_back = t.retractions.iter().any(|r| r.fields.contains(&k));
                if taken_back
                    || self.shared.thread_tier(t, &k) == Tier::NeverShare
                        && !t.theirs.contains_key(&k)
                {
                    ctx.remove(&k);
                    stripped.push(k);
                }
            }
        }
        // Permissions declaration (§4: transparent sharing).
        let t = &*self.t;
        if let Some(ctx) = provided(&body) {
            let mut shared: Vec<String> = ctx.keys().cloned().collect();
            shared.sort();
            let mut withheld: Vec<String> =
                t.withheld.iter().chain(stripped.iter()).cloned().collect();
            withheld.sort();
            withheld.dedup();
            // The rules the user's tiers set travel with the values (SPEC-NOTES "Usage
            // rules").
            let usage = shared
                .iter()
                .filter_map(|f| {
                    let p = usage_policy(&self.shared.settings.tiers, f)?;
                    Some((f.clone(), p.rule(self.shared.now, &t.intent)))
                })
                .take(packet::MAX_USAGE_RULES)
                .collect();
            let decl = PermissionsDeclaration {
                shared_fields: shared,
                withheld_fields: withheld,
                usage,
                consent_level: Some(
                    if t.user_initiated {
                        "user_initiated"
                    } else {
                        "user_preauthorised"
                    }
                    .into(),
                ),
            };
            set_permissions(&mut body, decl);
        }
        let version = t
            .version
            .clone()
            .unwrap_or_else(|| self.shared.highest_version());
        let first = !t.sent_first;
        let packet_id = self.shared.meta.rng.id("pkt_", 12);
        self.shared.dirty.meta = true;
        let p = Packet {
            protocol: format!("a2acp/{version}"),
            packet_id: packet_id.clone(),
            thread_id: id.to_string(),
            from: me,
            to: peer.clone(),
            timestamp: self.shared.now.to_rfc3339(),
            capabilities: first
                .then(|| packet::capabilities(&self.shared.config.supported_versions)),
            format_hints: first.then(packet::format_hints),
            body,
        };
        let bytes = match p.to_bytes() {
            Ok(b) => b,
            Err(e) => {
                self.audit_bug(Bug::InvalidOutgoing {
                    kind: p.body.type_name().to_string(),
                    error: e.to_string(),
                });
                return Err(());
            }
        };
        if let Some(secret) = self.shared.leaked_secret(&peer, &bytes) {
            self.audit(AgentEvent::NeverShareWithheld {
                kind: p.body.type_name().to_string(),
                field: secret.to_string(),
            });
            return Err(());
        }
        if let Some(ctx) = p.body.provided().filter(|c| !c.is_empty()) {
            self.receipt_for_disclosure(ctx);
        }
        let kind = p.body.type_name().to_string();
        let counted = counts_as_exchange(&p.body);
        let t = &mut *self.t;
        t.sent_first = true;
        t.sent_ids.push(packet_id.clone());
        t.history.push(HistoryEntry {
            packet_id: packet_id.clone(),
            outgoing: true,
            kind: kind.clone(),
            json: String::from_utf8_lossy(&bytes).into_owned(),
        });
        if let Some(ctx) = p.body.provided() {
            for (k, v) in ctx {
                // A field declined before and given now (a group's flexibility
                // request, §10.2) is shared, no longer declined.
                t.declined.remove(k);
                t.shared.insert(k.clone(), v.clone());
            }
        }
        if let Body::ContextResponse(c) = &p.body {
            // What this side declined, as the peer was told (§7.5): shown to this user
            // as declined, as the peer shows it (`thread show`, the MCP thread view).
            t.declined
                .extend(c.context_unavailable.iter().map(|u| u.field.clone()));
        }
        if counted {
            t.round_trips += 1;
        }
        if kind != "thread_state" && t.awaiting_peer_since.is_none() {
            t.awaiting_peer_since = Some(self.shared.now);
        }
        t.last_activity = self.shared.now;
        self.mark_changed();
        self.audit(AgentEvent::Sent {
            kind,
            packet_id: packet_id.clone(),
            to: peer.clone(),
            fields: FieldsNamed::of(&p.body),
        });
        self.seal_and_queue(&packet_id, &bytes);
        Ok(packet_id)
    }

    pub(in crate::agent) fn send_thread_state(&mut self) {
        let t = &mut *self.t;
        t.summarised = Some(t.summary_mark());
        self.shared.dirty.threads.insert(self.id.to_string());
        let body = Body::ThreadState(ThreadStateBody {
            state: t.state.as_str().to_string(),
            packets_sent: t.sent_ids.clone(),
            packets_received: t.received_ids.iter().cloned().collect(),
        });
        let _ = self.send_packet(body);
    }

    pub(in crate::agent) fn negotiate_version(&mut self, p: &Packet) {
        let mine = self.shared.config.supported_versions.clone();
        let t = &mut *self.t;
        if t.version.is_some() {
            return;
        }
        let theirs: Vec<String> = match &p.capabilities {
            Some(c) => c.supported_versions.clone(),
            None => vec![p.version().to_string()],
        };
        match packet::negotiate_version(&mine, &theirs) {
            Some(v) => {
                t.version = Some(v.clone());
                self.audit(AgentEvent::VersionAgreed {
                    version: v.to_string(),
                });
            }
            None => {
                // Never error on versions (§15.2): speak our lowest and let the peer degrade.
                t.version = mine.first().cloned();
            }
        }
    }
}

impl Shared {
    /// The never_share field whose value appears in `bytes`, if any (values of at least
    /// four characters, to avoid matching common words).
    pub(in crate::agent) fn leaked_secret(&self, peer: &Address, bytes: &[u8]) -> Option<String> {
        let text = String::from_utf8_lossy(bytes);
        for (k, v) in &self.config.profile {
            if self.tier(peer, k) != Tier::NeverShare {
                continue;
            }
            for s in strings_of(v) {
                if s.chars().count() >= 4 && text.contains(&escape_json(&s)) {
                    return Some(k.clone());
                }
            }
        }
        None
    }

    pub(in crate::agent) fn highest_version(&self) -> String {
        packet::negotiate_version(
            &self.config.supported_versions,
            &self.config.supported_versions,
        )
        .unwrap_or_else(|| "0.2".to_string())
    }
}

pub(in crate::agent) fn blank_thread(
    id: &str,
    peer: &Address,
    initiator: bool,
    intent: Intent,
    session: ThreadSession,
    now: Timestamp,
    coordinator: &Address,
) -> Thread {
    Thread {
        id: id.to_string(),
        peer: peer.clone(),
        initiator,
        state: ThreadState::Initiated,
        intent,
        user_initiated: false,
        local: Context::new(),
        version: None,
        sent_first: false,
        shared: Context::new(),
        withheld: BTreeSet::new(),
        declined: BTreeSet::new(),
        theirs: Context::new(),
        asked: BTreeSet::new(),
        peer_unavailable: BTreeSet::new(),
        answered: BTreeSet::new(),
        round_trips: 0,
        escalated: false,
        no_overlap_sent: false,
        consent: None,
        stage: Stage::Negotiating,
        rejected: Vec::new(),
        waiting: Waiting::Nothing,
        last_activity: now,
        sent_ids: Vec::new(),
        received_ids: BTreeSet::new(),
        history: Vec::new(),
        session,
        halted: false,
        llm: None,
        parent: None,
        forked_into: Vec::new(),
        coordinator: coordinator.clone(),
        deferred_needs: Vec::new(),
        held: HeldPackets::default(),
        gap_asked: BTreeSet::new(),
        ended_at: None,
        summarised: None,
        relay_refused: None,
        group: None,
        awaiting_peer_since: None,
        peer_response_ms: Vec::new(),
        continued_as: None,
        bridge: BTreeMap::new(),
        bridge_marks: BTreeSet::new(),
        scope_intent: None,
        sibling_holds: Vec::new(),
        receipted: BTreeMap::new(),
        agreements: Vec::new(),
        retractions: Vec::new(),
        retracted: BTreeSet::new(),
        expired: BTreeSet::new(),
        usage: Default::default(),
    }
}

pub(in crate::agent) fn escape_json(s: &str) -> String {
    let q = serde_json::to_string(s).unwrap_or_default();
    q.get(1..q.len().saturating_sub(1))
        .unwrap_or("")
        .to_string()
}

/// Packets that count as a context exchange for the §6.4 limit.
pub(in crate::agent) fn counts_as_exchange(b: &Body) -> bool {
    match b {
        Body::Context(c) => {
            c.escalation.is_none() || c.context.contains_key("proposed_alternatives")
        }
        Body::ContextRequest(_) | Body::ContextResponse(_) | Body::IntentUpdate(_) => true,
        _ => false,
    }
}

pub(in crate::agent) fn provided(b: &Body) -> Option<&Context> {
    b.provided()
}

pub(in crate::agent) fn provided_mut(b: &mut Body) -> Option<&mut Context> {
    match b {
        Body::Context(c) => Some(&mut c.context),
        Body::ContextRequest(c) => Some(&mut c.context_provided),
        Body::ContextResponse(c) => Some(&mut c.context_provided),
        _ => None,
    }
}

pub(in crate::agent) fn set_permissions(b: &mut Body, d: PermissionsDeclaration) {
    match b {
        Body::Context(c) => c.permissions = Some(d),
        Body::ContextRequest(c) => c.permissions = Some(d),
        Body::ContextResponse(c) => c.permissions = Some(d),
        _ => {}
    }
}

pub(in crate::agent) fn strings_of(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Number(n) => vec![n.to_string()],
        Value::Array(a) => a.iter().flat_map(strings_of).collect(),
        Value::Object(m) => m.values().flat_map(strings_of).collect(),
        _ => vec![],
    }
}

/// The `type` of every space packet.
pub const SPACE_UPDATE: &str = "space_update";

/// Whether an opened plaintext is a space packet (its `type` is `space_update`).
pub(in crate::agent) fn is_space_packet(bytes: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "type", borrow)]
        kind: Option<&'a str>,
    }
    serde_json::from_slice::<Kind>(bytes).is_ok_and(|k| k.kind == Some(SPACE_UPDATE))
}
