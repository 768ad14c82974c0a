//! Thread logic: the Receive-Evaluate-Act cycle (§5.2), consent (§7), negotiation (§6),
//! resolution (§8), execution and rollback (§9).

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use super::permissions::{resolve_tier, Tier};
use super::thread::{
    Execution, HistoryEntry, LlmPending, OpenResolution, PendingConsent, Thread, ThreadState,
    Waiting,
};
use super::*;
use crate::crypto::{thread_tag, Direction};
use crate::display;
use crate::negotiator::{self, Decision, Rejected, View};
use crate::packet::{
    self, ActionSpec, Body, ContextBody, ContextRequestBody, ContextResponseBody, Escalation,
    ExecutionReport, Intent, Need, Packet, PermissionsDeclaration, Priority, ResolutionBody,
    ResolutionResponseBody, ResolutionStatus, ThreadStateBody, Unavailable,
};

/// At most this many missing packet ids are remembered per thread as asked for (a
/// peer's summary can list anything; each packet is asked for once).
const MAX_GAP_ASKED: usize = 256;

/// How long an ended thread keeps its ephemeral secret to answer late gap requests.
const ERASE_GRACE: std::time::Duration = std::time::Duration::from_secs(7 * 86_400);

/// The `reason_class` of a `counter_requested` that picks one of the proposal's
/// alternatives (its index in `alternative`; SPEC-NOTES "Resolution and confirmation").
const ALTERNATIVE_CHOSEN: &str = "alternative_chosen";

/// How the `reason` of a stall notice starts (§6.4; SPEC-NOTES "Negotiation").
const STALL_REASON: &str = "stalled";

/// Whether an escalation is the peer's stall notice: it tells this side's user that the
/// peer waited too long for this side, and asks nothing of the negotiation.
fn is_stall_notice(e: &Escalation) -> bool {
    e.reason
        .strip_prefix(STALL_REASON)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
}

/// What triggered an evaluation: it decides whether a proposal may be made this turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// The peer asked this agent something: answer (and ask), but don't propose.
    AnsweringRequest,
    /// Anything else: propose when the picture is complete.
    Free,
}

impl Agent {
    // ===== commands =====

    pub(super) fn on_command(&mut self, c: Command) {
        match c {
            Command::StartThread {
                to,
                intent,
                context,
            } => self.open_thread(to, intent, context),
            Command::AnswerConsent { prompt_id, answer } => self.answer_consent(prompt_id, answer),
            Command::AnswerResolution { prompt_id, answer } => {
                self.answer_resolution(prompt_id, answer)
            }
            Command::UpdateContext { thread_id, context } => {
                self.update_context(&thread_id, context)
            }
            Command::UpdateIntent {
                thread_id,
                intent,
                reason,
            } => self.update_intent(&thread_id, intent, reason),
            Command::ForkThread { thread_id, intents } => self.fork_thread(&thread_id, intents),
            Command::CancelThread { thread_id } => self.cancel_thread(&thread_id),
            Command::SetPermission {
                field,
                tier,
                for_peer,
            } => {
                match for_peer {
                    None => self.settings.tiers.set(&field, tier),
                    Some(p) => {
                        let o = self.settings.overrides.entry(p).or_default();
                        o.promote_to_always_share.remove(&field);
                        o.restrict_to_never_share.remove(&field);
                        match tier {
                            Tier::AlwaysShare => {
                                o.promote_to_always_share.insert(field.clone());
                            }
                            Tier::NeverShare => {
                                o.restrict_to_never_share.insert(field.clone());
                            }
                            Tier::AskFirst => {}
                        }
                    }
                }
                self.dirty.settings = true;
                self.audit(None, format!("permission {field} set to {}", tier.as_str()));
            }
            Command::Block(addr) => {
                self.settings.blocked.insert(addr.clone());
                self.dirty.settings = true;
                let ids: Vec<String> = self
                    .threads
                    .values()
                    .filter(|t| t.peer == addr && !t.state.is_terminal())
                    .map(|t| t.id.clone())
                    .collect();
                for id in ids {
                    self.close_prompts(&id);
                    self.set_state(&id, ThreadState::Declined, "agent blocked by the user");
                }
                // §11.3: blocking purges what this agent remembered about the relationship.
                if let Some(rec) = self.peers.get_mut(&addr) {
                    rec.approvals.clear();
                    rec.suggested.clear();
                    rec.pending.clear();
                    self.dirty.peers.insert(addr.clone());
                }
                self.audit(None, format!("blocked {addr}"));
            }
            Command::Unblock(addr) => {
                self.settings.blocked.remove(&addr);
                self.dirty.settings = true;
                self.audit(None, format!("unblocked {addr}"));
            }
            Command::PinKey { address, key } => {
                if self.pin(&address, key).is_err() {
                    self.audit(
                        None,
                        format!("pin of {address} refused: another key is pinned"),
                    );
                }
            }
            Command::AcceptKeyChange { address } => self.accept_key_change(&address),
        }
    }

    fn accept_key_change(&mut self, peer: &Address) {
        let Some(rec) = self.peers.get_mut(peer) else {
            return;
        };
        let Some(new) = rec.changed_key.take() else {
            return;
        };
        let Ok(pk) = PublicKey::from_bytes(&new) else {
            return;
        };
        rec.key = Some(new);
        self.keys.insert(peer.clone(), pk);
        self.dirty.peers.insert(peer.clone());
        self.audit(None, format!("user accepted the new key of {peer}"));
        // Threads halted by the change close: what was negotiated was agreed with the old
        // key, and the user starts new ones. The peer is told with a cancel sealed under the
        // new key, so its side closes too (SPEC-NOTES "Key changes"). A resolution both
        // users confirmed is honoured instead: its thread resumes, and a gap request makes
        // the peer re-send what was dropped while it was halted (§13.1).
        let ids: Vec<String> = self
            .threads
            .values()
            .filter(|t| &t.peer == peer && t.halted && !t.state.is_terminal())
            .map(|t| t.id.clone())
            .collect();
        for id in ids {
            let Some(t) = self.threads.get_mut(&id) else {
                continue;
            };
            t.halted = false;
            self.dirty.threads.insert(id.clone());
            if t.execution.is_some() {
                self.send_thread_state(&id);
                continue;
            }
            let rid = t.resolution.as_ref().map(|r| r.packet_id.clone());
            let _ = self.send_packet(
                &id,
                Body::ResolutionResponse(ResolutionResponseBody {
                    resolution_id: rid,
                    status: ResolutionStatus::Declined,
                    reason_class: Some("user_declined".into()),
                    message_to_other_agent: Some(
                        "Your agent's identity key changed; my user accepted the new key. Let's start this one again."
                            .into(),
                    ),
                    alternative: None,
                }),
            );
            self.close_prompts(&id);
            self.set_state(&id, ThreadState::Declined, "halted after a key change");
        }
    }

    fn open_thread(&mut self, to: Address, intent: Intent, context: Context) {
        if self.settings.blocked.contains(&to) {
            self.notify(
                None,
                NotifyKind::Info,
                format!("{to} is blocked; unblock it first."),
            );
            return;
        }
        if to == self.config.address {
            self.notify(
                None,
                NotifyKind::Info,
                "A thread needs another agent.".into(),
            );
            return;
        }
        let id = self.meta.rng.id("thr_", 12);
        self.dirty.meta = true;
        let session = new_session(&mut self.meta.rng);
        let mut t = blank_thread(
            &id,
            &to,
            true,
            intent,
            session,
            self.now,
            &self.config.address,
        );
        t.user_initiated = true;
        t.local = context;
        self.tags.insert((to.clone(), thread_tag(&id)), id.clone());
        self.threads.insert(id.clone(), t);
        self.audit(Some(&id), format!("thread started with {to}"));
        self.send_first_packet(&id);
    }

    /// §5.4: the first packet front-loads everything the user gave and everything
    /// always_share that is relevant; never_share is withheld.
    fn send_first_packet(&mut self, id: &str) {
        let Some(t) = self.threads.get(id) else {
            return;
        };
        let mut context = Context::new();
        let mut withheld = BTreeSet::new();
        for (k, v) in &t.local {
            match self.tier(&t.peer, k) {
                Tier::NeverShare => {
                    withheld.insert(k.clone());
                }
                _ => {
                    context.insert(k.clone(), v.clone());
                }
            }
        }
        // Enrich from the profile with always_share values relevant to the intent.
        for field in negotiator::initial_needs(&t.intent, &context)
            .iter()
            .map(|n| n.field.clone())
            .chain(["timezone".to_string()])
        {
            if context.contains_key(&field) {
                continue;
            }
            if let Some(v) = self.config.profile.get(&field) {
                if self.tier(&t.peer, &field) == Tier::AlwaysShare {
                    context.insert(field.clone(), v.clone());
                }
            }
        }
        let needs = negotiator::initial_needs(&t.intent, &context);
        let intent = t.intent.clone();
        let to = t.peer.clone();
        if !withheld.is_empty() {
            self.notify(
                Some(id.to_string()),
                NotifyKind::Info,
                format!(
                    "Not shared with {to} (never_share): {}",
                    withheld.iter().cloned().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        if let Some(t) = self.threads.get_mut(id) {
            t.withheld.extend(withheld);
            t.asked.extend(needs.iter().map(|n| n.field.clone()));
        }
        let body = Body::Context(ContextBody {
            intent: Some(intent),
            context,
            needs,
            permissions: None,
            ..Default::default()
        });
        if self.send_packet(id, body).is_ok() {
            self.set_waiting(id, Waiting::Peer);
        }
    }

    // ===== sending =====

    /// Builds, checks, records and seals one packet of a thread.
    fn send_packet(&mut self, id: &str, mut body: Body) -> Result<String, ()> {
        let me = self.config.address.clone();
        let Some(t) = self.threads.get(id) else {
            return Err(());
        };
        let peer = t.peer.clone();
        // Never-share gate on every provided field (defence in depth, §7.1).
        let mut stripped = Vec::new();
        if let Some(ctx) = provided_mut(&mut body) {
            let keys: Vec<String> = ctx.keys().cloned().collect();
            for k in keys {
                if self.tier(&peer, &k) == Tier::NeverShare && !t.theirs.contains_key(&k) {
                    ctx.remove(&k);
                    stripped.push(k);
                }
            }
        }
        // Permissions declaration (§4: transparent sharing).
        let t = self.threads.get(id).ok_or(())?;
        if let Some(ctx) = provided(&body) {
            let mut shared: Vec<String> = ctx.keys().cloned().collect();
            shared.sort();
            let mut withheld: Vec<String> =
                t.withheld.iter().chain(stripped.iter()).cloned().collect();
            withheld.sort();
            withheld.dedup();
            let decl = PermissionsDeclaration {
                shared_fields: shared,
                withheld_fields: withheld,
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
        let version = t.version.clone().unwrap_or_else(|| self.highest_version());
        let first = !t.sent_first;
        let packet_id = self.meta.rng.id("pkt_", 12);
        self.dirty.meta = true;
        let p = Packet {
            protocol: format!("a2acp/{version}"),
            packet_id: packet_id.clone(),
            thread_id: id.to_string(),
            from: me,
            to: peer.clone(),
            timestamp: self.now.to_rfc3339(),
            capabilities: first.then(|| packet::capabilities(&self.config.supported_versions)),
            format_hints: first.then(packet::format_hints),
            body,
        };
        let bytes = match p.to_bytes() {
            Ok(b) => b,
            Err(e) => {
                self.audit_bug(
                    Some(id),
                    format!("outgoing {} refused by validation: {e}", p.body.type_name()),
                );
                return Err(());
            }
        };
        if let Some(secret) = self.leaked_secret(&peer, &bytes) {
            self.audit(
                Some(id),
                format!(
                    "outgoing {} refused: it contains the never_share value of `{secret}`",
                    p.body.type_name()
                ),
            );
            return Err(());
        }
        let kind = p.body.type_name().to_string();
        let counted = counts_as_exchange(&p.body);
        let Some(t) = self.threads.get_mut(id) else {
            return Err(());
        };
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
                t.shared.insert(k.clone(), v.clone());
            }
        }
        if counted {
            t.round_trips += 1;
        }
        t.last_activity = self.now;
        self.dirty.threads.insert(id.to_string());
        self.audit(Some(id), format!("sent {kind} {packet_id} to {peer}"));
        self.seal_and_queue(id, &packet_id, &bytes);
        Ok(packet_id)
    }

    /// The never_share field whose value appears in `bytes`, if any (values of at least
    /// four characters, to avoid matching common words).
    fn leaked_secret(&self, peer: &Address, bytes: &[u8]) -> Option<String> {
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

    fn highest_version(&self) -> String {
        packet::negotiate_version(
            &self.config.supported_versions,
            &self.config.supported_versions,
        )
        .unwrap_or_else(|| "0.2".to_string())
    }

    pub(super) fn tier(&self, peer: &Address, field: &str) -> Tier {
        resolve_tier(&self.settings.tiers, &self.settings.overrides, peer, field)
    }

    pub(super) fn send_thread_state(&mut self, id: &str) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        t.summarised = Some(t.summary_mark());
        self.dirty.threads.insert(id.to_string());
        let body = Body::ThreadState(ThreadStateBody {
            state: t.state.as_str().to_string(),
            packets_sent: t.sent_ids.clone(),
            packets_received: t.received_ids.iter().cloned().collect(),
        });
        let _ = self.send_packet(id, body);
    }

    // ===== receiving =====

    pub(super) fn on_envelope(&mut self, env: Envelope) {
        let me = self.config.address.clone();
        if env.to != me {
            self.dropped(
                None,
                format!("envelope for {} dropped: not for this agent", env.to),
            );
            return;
        }
        let peer = env.from.clone();
        if peer == me {
            // No thread has this agent on both ends (open_thread refuses it); an envelope
            // in its own name could only be forged (e.g. by a relay) to speak for its user.
            self.dropped(None, "envelope in this agent's own name dropped".into());
            return;
        }
        if self.settings.blocked.contains(&peer) {
            self.dropped(None, format!("envelope from blocked {peer} dropped"));
            return;
        }
        if let Some(rec) = self.peers.get(&peer) {
            if let Some(k) = rec.key {
                if k != env.from_key {
                    // Only an envelope that is authentic under the new key is a key
                    // change; anything else is noise (or tampering) and changes nothing.
                    let authentic = PublicKey::from_bytes(&env.from_key)
                        .and_then(|pk| crate::crypto::verify_envelope(&env, &pk))
                        .is_ok();
                    if authentic {
                        self.key_changed(&peer, env.from_key);
                    } else {
                        self.dropped(None, format!("envelope from {peer} refused: bad signature"));
                    }
                    return;
                }
            }
        }
        let sender_key = match self.keys.get(&peer) {
            Some(k) => k.clone(),
            None => match PublicKey::from_bytes(&env.from_key) {
                Ok(k) => k,
                Err(e) => {
                    self.dropped(None, format!("envelope from {peer} dropped: {e}"));
                    return;
                }
            },
        };
        let existing = self.tags.get(&(peer.clone(), env.thread)).cloned();
        let (opened, new_session) = match &existing {
            Some(id) => {
                let Some(t) = self.threads.get_mut(id) else {
                    return;
                };
                let expected = t.my_direction().reverse();
                match t
                    .session
                    .open(&self.identity, &me, &env, &sender_key, expected)
                {
                    Ok(o) => (o, None),
                    Err(e) => {
                        self.dropped(Some(id), format!("envelope from {peer} refused: {e}"));
                        return;
                    }
                }
            }
            None => {
                if env.peer_eph.is_some() || env.dir != Direction::FromInitiator {
                    self.dropped(
                        None,
                        format!("envelope from {peer} refused: unknown thread"),
                    );
                    return;
                }
                // Draw the session only if the envelope opens, so bad input changes nothing.
                let mut probe = self.meta.rng.clone();
                let mut s = new_session(&mut probe);
                match s.open(
                    &self.identity,
                    &me,
                    &env,
                    &sender_key,
                    Direction::FromInitiator,
                ) {
                    Ok(o) => {
                        self.meta.rng = probe;
                        self.dirty.meta = true;
                        (o, Some(s))
                    }
                    Err(e) => {
                        self.dropped(None, format!("envelope from {peer} refused: {e}"));
                        return;
                    }
                }
            }
        };
        // Authentic from here on: pin on first contact (§16).
        if self.peers.get(&peer).and_then(|r| r.key).is_none()
            && self.pin_key(&peer, sender_key.clone()).is_err()
        {
            return;
        }
        if let Some(id) = &existing {
            self.dirty.threads.insert(id.clone());
        }
        let packet = match Packet::parse(&opened.packet) {
            Ok(p) if p.from == peer && p.to == me && p.thread_id == opened.thread_id => p,
            Ok(_) => {
                self.malformed(&peer, "header does not match its envelope".into());
                return;
            }
            Err(e) => {
                self.malformed(&peer, e.to_string());
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
        let Some(t) = self.threads.get_mut(&id) else {
            return;
        };
        if t.received_ids.contains(&packet.packet_id) {
            self.dropped(Some(&id), format!("duplicate {} dropped", packet.packet_id));
            return;
        }
        if let Some((code, why)) = self.packet_refusal(&id, &packet, opened.packet.len()) {
            self.refuse_packet(&id, &packet, code, why);
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
            json: String::from_utf8_lossy(&opened.packet).into_owned(),
        });
        t.last_activity = self.now;
        self.dirty.threads.insert(id.clone());
        let halted = t.halted;
        let inactive = t.halted || t.state.is_terminal();
        let expired = !t.halted && t.state == ThreadState::Expired;
        self.audit(
            Some(&id),
            format!(
                "received {} {} from {peer}",
                packet.body.type_name(),
                packet.packet_id
            ),
        );
        if inactive {
            // An ended thread still answers gap requests during the grace period (§13.1).
            if let Body::ThreadState(s) = packet.body {
                self.on_thread_state(&id, s);
            } else if let (true, Body::ResolutionResponse(b)) = (expired, &packet.body) {
                if b.status == ResolutionStatus::Declined
                    && matches!(b.reason_class.as_deref(), None | Some("user_declined"))
                {
                    // The other user closed the thread before it expired here; only the
                    // cancel came late (this device was off). The sender ended DECLINED
                    // and stays so, so this side ends DECLINED too instead of answering
                    // EXPIRED (§8.3; swarm seeds 810, 817).
                    let msg = b.message_to_other_agent.clone().unwrap_or_default();
                    self.set_state(
                        &id,
                        ThreadState::Declined,
                        "the other user had declined before it expired",
                    );
                    self.notify(
                        Some(id.clone()),
                        NotifyKind::Declined,
                        format!("{peer} had declined before the proposal expired. {msg}"),
                    );
                } else {
                    self.send_thread_state(&id);
                }
            } else if !halted && !self.summary_pending(&id) {
                // A late packet (a confirmation sent in time that reached this device
                // after the deadline): the sender still thinks the thread is open, so
                // it is told how the thread ended here (§8.3 "both users are notified";
                // swarm seed 142). The summary lists this side's packets, so a closing
                // packet the peer never took in (a cancel that overtook the thread's
                // first packet, refused for opening no thread) is asked for and
                // re-sent (§13.1; large swarm, seed 1).
                self.send_thread_state(&id);
            }
            return;
        }
        if let Some(rec) = self.peers.get_mut(&peer) {
            if rec.malformed > 0 && !rec.flagged {
                rec.malformed = 0;
                self.dirty.peers.insert(peer.clone());
            }
        }
        self.on_packet(&id, packet);
    }

    /// A first packet of a thread the peer opened. Returns whether it was admitted.
    fn admit_new_thread(&mut self, p: &Packet, session: ThreadSession) -> bool {
        if self.threads.contains_key(&p.thread_id) {
            self.malformed(&p.from, format!("thread id {} already in use", p.thread_id));
            return false;
        }
        // Children of a fork are created when the `thread_fork` arrives, so every other
        // unknown thread must start with a `context` carrying its intent.
        let intent = match &p.body {
            Body::Context(ContextBody {
                intent: Some(i), ..
            }) => i.clone(),
            Body::Context(_) => {
                self.malformed(&p.from, "first packet of a thread has no intent".into());
                return false;
            }
            _ => {
                self.malformed(
                    &p.from,
                    format!("a thread cannot start with {}", p.body.type_name()),
                );
                return false;
            }
        };
        if let Some((code, why)) = self.new_thread_refusal(p) {
            self.refuse_new_thread(p, session, code, why);
            return false;
        }
        self.forget_ended_threads(&p.from);
        let t = blank_thread(
            &p.thread_id,
            &p.from,
            false,
            intent,
            session,
            self.now,
            &p.from,
        );
        self.tags.insert(
            (p.from.clone(), thread_tag(&p.thread_id)),
            p.thread_id.clone(),
        );
        self.threads.insert(p.thread_id.clone(), t);
        self.audit(Some(&p.thread_id), format!("thread opened by {}", p.from));
        true
    }

    fn malformed(&mut self, peer: &Address, why: String) {
        let threshold = self.config.limits.malformed_flag_threshold;
        let rec = self.peers.entry(peer.clone()).or_default();
        rec.malformed = rec.malformed.saturating_add(1);
        let flag = rec.malformed >= threshold && !rec.flagged;
        if flag {
            rec.flagged = true;
        }
        self.dirty.peers.insert(peer.clone());
        self.dropped(None, format!("malformed packet from {peer} dropped: {why}"));
        if flag {
            self.notify(
                None,
                NotifyKind::Flagged,
                format!("{peer} keeps sending malformed packets ({threshold} in a row). You can block it."),
            );
        }
    }

    fn on_packet(&mut self, id: &str, p: Packet) {
        self.negotiate_version(id, &p);
        if let Some(t) = self.threads.get_mut(id) {
            if counts_as_exchange(&p.body) {
                t.round_trips += 1;
            }
        }
        match p.body {
            Body::Context(b) => self.on_context(id, b),
            Body::ContextRequest(b) => {
                self.absorb(id, &b.context_provided, &[]);
                self.take_needs(id, &b.needs);
                self.evaluate(id, Turn::AnsweringRequest);
            }
            Body::ContextResponse(b) => {
                self.absorb(id, &b.context_provided, &b.context_unavailable);
                self.evaluate(id, Turn::Free);
            }
            Body::IntentUpdate(b) => {
                let expanded = b.updated_intent.scope_change.as_deref() == Some("expanded");
                if let Some(t) = self.threads.get_mut(id) {
                    t.intent = b.updated_intent.clone();
                }
                if expanded {
                    self.notify(
                        Some(id.into()),
                        NotifyKind::Info,
                        format!(
                            "The thread changed to “{}” ({}).",
                            display::line(&b.updated_intent.summary, display::MAX_SHORT),
                            display::line(&b.reason, display::MAX_SHORT)
                        ),
                    );
                }
                self.take_needs(id, &b.additional_context_needed);
                self.evaluate(id, Turn::AnsweringRequest);
            }
            Body::Resolution(b) => self.on_resolution(id, p.packet_id, p.from, b),
            Body::ResolutionResponse(b) => self.on_resolution_response(id, &p.from, b),
            Body::ExecutionReport(r) => self.on_execution_report(id, r),
            Body::ThreadState(s) => self.on_thread_state(id, s),
            Body::ThreadFork(f) => self.on_thread_fork(id, f),
            Body::CoordinatorTransfer(c) => {
                let accept = c.to_coordinator == self.config.address;
                if accept {
                    if let Some(t) = self.threads.get_mut(id) {
                        t.coordinator = c.to_coordinator.clone();
                    }
                }
                if c.requires_acceptance {
                    let _ = self.send_packet(
                        id,
                        Body::CoordinatorTransferResponse(
                            packet::CoordinatorTransferResponseBody {
                                decision: if accept {
                                    packet::TransferDecision::Accepted
                                } else {
                                    packet::TransferDecision::Declined
                                },
                                reason: None,
                            },
                        ),
                    );
                }
            }
            Body::CoordinatorTransferResponse(r) => {
                if r.decision == packet::TransferDecision::Accepted {
                    if let Some(t) = self.threads.get_mut(id) {
                        t.coordinator = t.peer.clone();
                    }
                }
            }
            Body::ProcessingError(e) => {
                self.set_waiting(id, Waiting::Nothing);
                self.notify(
                    Some(id.into()),
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

    fn negotiate_version(&mut self, id: &str, p: &Packet) {
        let mine = self.config.supported_versions.clone();
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
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
                self.audit(Some(id), format!("protocol version {v} agreed"));
            }
            None => {
                // Never error on versions (§15.2): speak our lowest and let the peer degrade.
                t.version = mine.first().cloned();
            }
        }
    }

    fn on_context(&mut self, id: &str, b: ContextBody) {
        self.absorb(id, &b.context, &[]);
        if let Some(i) = &b.intent {
            if let Some(t) = self.threads.get_mut(id) {
                if t.state == ThreadState::Initiated || !t.initiator {
                    t.intent = i.clone();
                }
            }
        }
        let has_alternatives = b.context.contains_key("proposed_alternatives");
        if let (Some(e), false) = (&b.escalation, has_alternatives) {
            // The peer's stall notice (§6.4) only tells this user: the peer stalled waiting
            // for this side, and this side's next packet resumes it there. It hands nothing
            // to the humans here, so the thread keeps negotiating; marked escalated, it
            // ignored every later packet and both sides waited forever (swarm seed 612).
            if !is_stall_notice(e) {
                if let Some(t) = self.threads.get_mut(id) {
                    t.escalated = true;
                }
                // The humans decide now: a question to the model in flight (or waiting
                // to be retried) is withdrawn, or its answer would go on negotiating
                // past the escalation and leave both sides waiting on each other
                // (large swarm, seed 1).
                self.withdraw_llm(id, "the thread was escalated to the users");
                self.set_waiting(id, Waiting::User);
            }
            let mut text = format!(
                "The other agent needs you: {}",
                display::line(&e.reason, display::MAX_LONG)
            );
            if let Some(s) = &e.suggested_prompt {
                text = format!("{text} — {}", display::line(s, display::MAX_LONG));
            }
            self.notify(Some(id.into()), NotifyKind::Escalated, text);
            return;
        }
        self.take_needs(id, &b.needs);
        self.evaluate(id, Turn::Free);
    }

    /// Takes in what the peer gave and what it declined.
    fn absorb(&mut self, id: &str, provided: &Context, unavailable: &[Unavailable]) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        for (k, v) in provided {
            t.theirs.insert(k.clone(), v.clone());
        }
        for u in unavailable {
            t.peer_unavailable.insert(u.field.clone());
        }
        if matches!(t.state, ThreadState::Initiated | ThreadState::Stalled) {
            let from = t.state;
            if t.transition(ThreadState::Negotiating).is_ok() {
                self.audit(Some(id), format!("state {from} -> NEGOTIATING"));
            }
        }
    }

    /// Evaluates the peer's needs against the permission tiers (§5.2 EVALUATE
    /// PERMISSIONS, §6.2, §7): shares, declines, or queues one batched consent prompt.
    fn take_needs(&mut self, id: &str, needs: &[Need]) {
        if needs.is_empty() {
            return;
        }
        let Some(t) = self.threads.get(id) else {
            return;
        };
        let peer = t.peer.clone();
        let urgent = t.intent.is_urgent();
        let mut share = Context::new();
        let mut decline = Vec::new();
        let mut ask = Vec::new();
        let mut seen = BTreeSet::new();
        for n in needs {
            if t.answered.contains(&n.field) || !seen.insert(n.field.clone()) {
                continue; // §6.4: a field is answered once per thread.
            }
            if !display::is_clean(&n.field, display::MAX_FIELD_NAME) {
                // A field name the user could not read as sent (control or invisible
                // characters, or too long) is never shown for consent: declined.
                decline.push(n.field.clone());
                continue;
            }
            let value = t
                .local
                .get(&n.field)
                .or_else(|| self.config.profile.get(&n.field))
                .cloned();
            match self.tier(&peer, &n.field) {
                Tier::NeverShare => decline.push(n.field.clone()),
                Tier::AlwaysShare => match value {
                    Some(v) => {
                        share.insert(n.field.clone(), v);
                    }
                    None => decline.push(n.field.clone()),
                },
                Tier::AskFirst => {
                    if t.user_initiated && t.local.contains_key(&n.field) {
                        // §7.4: the user started the thread and gave this value for it.
                        if let Some(v) = value {
                            share.insert(n.field.clone(), v);
                        }
                    } else if n.priority == Priority::NiceToHave && !urgent {
                        // §6.2: nice_to_have is shared only if pre-authorised.
                        decline.push(n.field.clone());
                    } else {
                        ask.push(n.clone());
                    }
                }
            }
        }
        let t = match self.threads.get_mut(id) {
            Some(t) => t,
            None => return,
        };
        for f in share.keys().chain(decline.iter()) {
            t.answered.insert(f.clone());
        }
        for n in &ask {
            t.answered.insert(n.field.clone());
        }
        let consent = t.consent.get_or_insert_with(|| PendingConsent {
            prompt_id: 0,
            ask: Vec::new(),
            share: Context::new(),
            decline: Vec::new(),
        });
        consent.share.extend(share);
        consent.decline.extend(decline);
        let asks_more = !ask.is_empty();
        consent.ask.extend(ask);
        self.dirty.threads.insert(id.to_string());
        let asking = !consent.ask.is_empty();
        let open_prompt = consent.prompt_id;
        if !asking {
            return;
        }
        if open_prompt != 0 {
            // The open prompt keeps its number while the thread waits for the user: a
            // packet that asks for more updates it in place, one that asks for nothing
            // new leaves it alone (SPEC-NOTES "Prompts and peer text on screen").
            if asks_more {
                self.show_consent_prompt(id);
            }
            return;
        }
        let pid = self.next_prompt_id();
        if let Some(c) = self.threads.get_mut(id).and_then(|t| t.consent.as_mut()) {
            c.prompt_id = pid;
        }
        self.set_waiting(id, Waiting::User);
        self.show_consent_prompt(id);
    }

    fn show_consent_prompt(&mut self, id: &str) {
        let Some(t) = self.threads.get(id) else {
            return;
        };
        let Some(c) = &t.consent else { return };
        if c.prompt_id == 0 || c.ask.is_empty() {
            return;
        }
        // What the peer wrote is shown cleaned; the thread keeps it as sent.
        let fields = c
            .ask
            .iter()
            .map(|n| ConsentField {
                field: display::line(&n.field, display::MAX_FIELD_NAME).into_owned(),
                reason: display::line(&n.reason, display::MAX_SHORT).into_owned(),
                priority: n.priority,
                suggested: t
                    .local
                    .get(&n.field)
                    .or_else(|| self.config.profile.get(&n.field))
                    .cloned(),
            })
            .collect();
        let prompt = Prompt {
            id: c.prompt_id,
            thread_id: id.to_string(),
            peer: t.peer.clone(),
            intent: display::intent(&t.intent),
            kind: PromptKind::Consent { fields },
        };
        self.buf.prompt.push(Output::Prompt(prompt));
    }

    fn next_prompt_id(&mut self) -> u64 {
        let id = self.meta.next_prompt;
        self.meta.next_prompt += 1;
        self.dirty.meta = true;
        id
    }

    fn answer_consent(&mut self, prompt_id: u64, answer: ConsentAnswer) {
        let Some(id) = self.thread_where(
            |t| {
                t.consent
                    .as_ref()
                    .is_some_and(|c| c.prompt_id == prompt_id && prompt_id != 0)
            },
            format!("answer to unknown or closed prompt {prompt_id} ignored"),
        ) else {
            return;
        };
        let Some(t) = self.threads.get_mut(&id) else {
            return;
        };
        let Some(mut c) = t.consent.take() else {
            return;
        };
        let peer = t.peer.clone();
        let mut approved = Vec::new();
        for n in std::mem::take(&mut c.ask) {
            let suggested = t
                .local
                .get(&n.field)
                .or_else(|| self.config.profile.get(&n.field))
                .cloned();
            let choice = match &answer {
                ConsentAnswer::DeclineAll => FieldChoice::DontShare,
                ConsentAnswer::ShareSelected(m) => {
                    m.get(&n.field).cloned().unwrap_or(FieldChoice::DontShare)
                }
            };
            let value = match choice {
                FieldChoice::Share => suggested,
                FieldChoice::ShareValue(v) => Some(v),
                FieldChoice::DontShare => None,
            };
            match value {
                Some(v) => {
                    c.share.insert(n.field.clone(), v);
                    approved.push(n.field.clone());
                }
                None => c.decline.push(n.field.clone()),
            }
        }
        c.prompt_id = 0;
        t.consent = Some(c);
        self.dirty.threads.insert(id.clone());
        self.audit(Some(&id), format!("consent prompt {prompt_id} answered"));
        self.count_approvals(&peer, &approved);
        self.set_waiting(&id, Waiting::Nothing);
        let turn = if self.threads.get(&id).is_some_and(|t| {
            t.history
                .iter()
                .rev()
                .find(|h| !h.outgoing)
                .is_some_and(|h| h.kind == "context_request" || h.kind == "intent_update")
        }) {
            Turn::AnsweringRequest
        } else {
            Turn::Free
        };
        self.evaluate(&id, turn);
    }

    /// §7.2: after the third approval of a field for one agent, suggest promoting it.
    fn count_approvals(&mut self, peer: &Address, fields: &[String]) {
        let mut suggest = Vec::new();
        {
            let rec = self.peers.entry(peer.clone()).or_default();
            for f in fields {
                let n = rec.approvals.entry(f.clone()).or_insert(0);
                *n += 1;
                if *n == 3 && !rec.suggested.contains_key(f) {
                    self.meta.last_suggestion += 1;
                    rec.suggested.insert(f.clone(), self.meta.last_suggestion);
                    suggest.push((f.clone(), self.meta.last_suggestion));
                }
            }
        }
        if !suggest.is_empty() {
            self.dirty.meta = true;
        }
        self.dirty.peers.insert(peer.clone());
        for (f, id) in suggest {
            self.notify_suggestion(
                Suggestion::Promote {
                    id,
                    field: f.clone(),
                    peer: peer.clone(),
                },
                format!("You've shared {f} with {peer} three times now. Want me to always share it with them automatically?"),
            );
        }
    }

    /// The id of the thread `pred` picks; `None` (and an audit line `what`) if none does:
    /// answers to closed prompts, late action or LLM results are normal and ignored.
    fn thread_where(&mut self, pred: impl Fn(&Thread) -> bool, what: String) -> Option<String> {
        let id = self
            .threads
            .values()
            .find(|t| pred(t))
            .map(|t| t.id.clone());
        if id.is_none() {
            self.audit(None, what);
        }
        id
    }

    // ===== evaluate and act =====

    /// The Receive-Evaluate-Act cycle (§5.2) for one thread, once its inputs changed.
    fn evaluate(&mut self, id: &str, turn: Turn) {
        let Some(t) = self.threads.get(id) else {
            return;
        };
        if t.state.is_terminal() || t.halted {
            return;
        }
        if t.consent.as_ref().is_some_and(|c| c.prompt_id != 0) {
            return; // waits for the user; other threads go on
        }
        if t.escalated {
            // The humans decide what happens next; answers the user gave still go out,
            // except past the round-trip limit where nothing more is exchanged (§6.4).
            if t.round_trips < self.config.limits.max_round_trips {
                self.flush_reply(id);
            }
            return;
        }
        if t.llm.is_some() {
            // The model was asked about the thread as it was; what just came in is
            // looked at when it answers (large swarm, seed 1).
            if let Some(l) = self.threads.get_mut(id).and_then(|t| t.llm.as_mut()) {
                if !l.stale {
                    l.stale = true;
                    self.dirty.threads.insert(id.to_string());
                }
            }
            return;
        }
        if !matches!(
            t.state,
            ThreadState::Initiated | ThreadState::Negotiating | ThreadState::Stalled
        ) {
            // Proposed/executing: answer open needs, nothing else to decide.
            self.flush_reply(id);
            return;
        }
        if self.config.use_llm {
            self.ask_llm(id, 1, None);
            return;
        }
        let decision = {
            let t = &self.threads[id];
            let mine = self.mine(t);
            let theirs = self.theirs(t);
            let view = self.view(t, &mine, &theirs);
            negotiator::decide(&view)
        };
        self.act(id, decision, turn);
    }

    /// My values usable in this thread: shared, about to be shared, and always_share.
    fn mine(&self, t: &Thread) -> Context {
        let mut m = Context::new();
        for (k, v) in self.config.profile.iter().chain(t.local.iter()) {
            let tier = self.tier(&t.peer, k);
            if tier == Tier::AlwaysShare
                || (tier == Tier::AskFirst && t.user_initiated && t.local.contains_key(k))
            {
                m.insert(k.clone(), v.clone());
            }
        }
        if let Some(c) = &t.consent {
            m.extend(c.share.clone());
        }
        m.extend(t.shared.clone());
        m
    }

    /// The peer's values for deciding: what it said in this thread, and under it what
    /// this agent already knew about it (§5.2: fill gaps from local knowledge before asking).
    fn theirs(&self, t: &Thread) -> Context {
        let mut c = self
            .config
            .contacts
            .get(&t.peer)
            .cloned()
            .unwrap_or_default();
        c.extend(t.theirs.clone());
        c
    }

    fn view<'a>(&'a self, t: &'a Thread, mine: &'a Context, theirs: &'a Context) -> View<'a> {
        View {
            intent: &t.intent,
            i_am_initiator: t.initiator,
            me: &self.config.address,
            peer: &t.peer,
            mine,
            theirs,
            asked: &t.asked,
            unavailable: &t.peer_unavailable,
            rejected: &t.rejected,
            round_trips: t.round_trips,
        }
    }

    fn act(&mut self, id: &str, decision: Decision, turn: Turn) {
        let limit = self.config.limits.max_round_trips;
        let Some(t) = self.threads.get(id) else {
            return;
        };
        let over_limit = t.round_trips >= limit;
        // Turn rule (SPEC-NOTES §6): answering a request is only answering; the agent
        // whose turn is free proposes, asks or escalates. At the round-trip limit every
        // further exchange becomes an escalation (§6.4).
        let escalate = || Decision::Escalate {
            reason: format!("{limit} context exchanges without a resolution"),
            summary: self.tried_summary(id),
        };
        let decision = match (turn, decision) {
            (_, Decision::Wait) => Decision::Wait,
            (Turn::AnsweringRequest, _) if over_limit => escalate(),
            (Turn::AnsweringRequest, _) => Decision::Wait,
            (Turn::Free, d @ Decision::Propose { .. }) => d,
            (Turn::Free, Decision::Ask { .. } | Decision::NoOverlap { .. }) if over_limit => {
                escalate()
            }
            (Turn::Free, d) => d,
        };
        match decision {
            Decision::Ask { needs } => {
                let (provide, decline) = self.take_reply(id);
                let Some(t) = self.threads.get_mut(id) else {
                    return;
                };
                let mut fresh: Vec<Need> = needs
                    .into_iter()
                    .filter(|n| {
                        !t.asked.contains(&n.field) && !t.peer_unavailable.contains(&n.field)
                    })
                    .collect();
                fresh.extend(std::mem::take(&mut t.deferred_needs));
                fresh.sort_by_key(|n| n.priority);
                let mut seen = BTreeSet::new();
                fresh.retain(|n| seen.insert(n.field.clone()));
                let rest = fresh.split_off(fresh.len().min(packet::MAX_NEEDS_PER_PACKET));
                t.deferred_needs = rest;
                if fresh.is_empty() {
                    self.send_reply(id, provide, decline);
                    return;
                }
                for n in &fresh {
                    t.asked.insert(n.field.clone());
                }
                let body = Body::ContextRequest(ContextRequestBody {
                    needs: fresh,
                    context_provided: provide,
                    permissions: None,
                });
                self.send_then_wait(id, body, decline);
            }
            Decision::Propose { proposal, actions } => {
                // Answers are superseded by the proposal; nothing more is shared.
                let _ = self.take_reply(id);
                self.propose(id, proposal, actions);
            }
            Decision::NoOverlap {
                mut context,
                escalation,
            } => {
                let (provide, decline) = self.take_reply(id);
                for (k, v) in provide {
                    context.entry(k).or_insert(v);
                }
                if let Some(t) = self.threads.get_mut(id) {
                    t.no_overlap_sent = true;
                }
                let body = Body::Context(ContextBody {
                    intent: self.threads.get(id).map(|t| Intent {
                        summary: "No overlap found — proposing alternatives".into(),
                        ..t.intent.clone()
                    }),
                    context,
                    escalation: Some(escalation),
                    ..Default::default()
                });
                self.send_then_wait(id, body, decline);
            }
            Decision::Escalate { reason, summary } => {
                // At the round-trip limit nothing more is exchanged: a pending answer
                // stays pending until the user resumes the thread.
                if !over_limit {
                    let (provide, decline) = self.take_reply(id);
                    if !provide.is_empty() || !decline.is_empty() {
                        self.send_reply(id, provide, decline);
                    }
                }
                self.escalate(id, &reason, &summary);
            }
            Decision::Wait => self.flush_reply(id),
        }
    }

    fn tried_summary(&self, id: &str) -> String {
        let Some(t) = self.threads.get(id) else {
            return String::new();
        };
        let mut s = format!(
            "{} exchanges; shared {}; received {}",
            t.round_trips,
            list(t.shared.keys()),
            list(t.theirs.keys())
        );
        if !t.rejected.is_empty() {
            s += &format!(
                "; ruled out: {}",
                t.rejected
                    .iter()
                    .map(|r| r.summary.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        s
    }

    fn escalate(&mut self, id: &str, reason: &str, summary: &str) {
        let body = Body::Context(ContextBody {
            escalation: Some(Escalation {
                recommend: "surface_to_users".into(),
                reason: reason.to_string(),
                suggested_prompt: Some(summary.to_string()),
            }),
            ..Default::default()
        });
        let _ = self.send_packet(id, body);
        if let Some(t) = self.threads.get_mut(id) {
            t.escalated = true;
        }
        self.set_waiting(id, Waiting::User);
        self.notify(
            Some(id.into()),
            NotifyKind::Escalated,
            format!("I need your input: {reason}. {summary}"),
        );
        self.audit(Some(id), format!("escalated to the users: {reason}"));
    }

    fn take_reply(&mut self, id: &str) -> (Context, Vec<String>) {
        let Some(t) = self.threads.get_mut(id) else {
            return (Context::new(), vec![]);
        };
        match t.consent.take() {
            Some(c) if c.prompt_id == 0 => (c.share, c.decline),
            other => {
                t.consent = other;
                (Context::new(), vec![])
            }
        }
    }

    fn flush_reply(&mut self, id: &str) {
        let (provide, decline) = self.take_reply(id);
        if !provide.is_empty() || !decline.is_empty() {
            self.send_reply(id, provide, decline);
        }
    }

    fn send_reply(&mut self, id: &str, provide: Context, decline: Vec<String>) {
        let body = Body::ContextResponse(ContextResponseBody {
            context_provided: provide,
            context_unavailable: decline
                .iter()
                .map(|f| Unavailable {
                    field: f.clone(),
                    status: "declined".into(),
                    hint: None,
                })
                .collect(),
            permissions: None,
        });
        self.send_then_wait(id, body, vec![]);
    }

    fn send_then_wait(&mut self, id: &str, body: Body, decline: Vec<String>) {
        let body = match body {
            Body::ContextRequest(b) if !decline.is_empty() => {
                // Declines travel with the request as a context_response first.
                let pre = Body::ContextResponse(ContextResponseBody {
                    context_provided: Context::new(),
                    context_unavailable: decline
                        .iter()
                        .map(|f| Unavailable {
                            field: f.clone(),
                            status: "declined".into(),
                            hint: None,
                        })
                        .collect(),
                    permissions: None,
                });
                let _ = self.send_packet(id, pre);
                Body::ContextRequest(b)
            }
            other => other,
        };
        if self.send_packet(id, body).is_ok() {
            self.set_waiting(id, Waiting::Peer);
        }
    }

    fn propose(&mut self, id: &str, proposal: crate::packet::Proposal, actions: Vec<ActionSpec>) {
        let me = self.config.address.clone();
        let Some(t) = self.threads.get(id) else {
            return;
        };
        if !matches!(
            t.state,
            ThreadState::Initiated | ThreadState::Negotiating | ThreadState::Stalled
        ) {
            // A decision taken for an earlier state of the thread (a resolution is open
            // or being carried out): proposing now would replace what both sides hold.
            self.audit(
                Some(id),
                format!("proposal dropped: the thread is {}", t.state),
            );
            return;
        }
        let mut confirmers = vec![me.clone(), t.peer.clone()];
        if !t.initiator {
            confirmers.reverse();
        }
        let timeout = self.config.limits.confirmation_timeout;
        let mut proposal = proposal;
        if t.version.as_deref() == Some("0.1") {
            proposal.alternatives.clear(); // feature not in 0.1 (§15.2)
        }
        let body = ResolutionBody {
            proposal,
            requires_confirmation_from: confirmers,
            actions_on_confirm: actions,
            confirmation_timeout: Some(crate::time::format_iso8601_duration(timeout)),
            on_timeout: Some("remind_then_expire".into()),
            quorum: None,
        };
        let Ok(pid) = self.send_packet(id, Body::Resolution(body.clone())) else {
            return;
        };
        self.open_resolution(id, pid, me, body);
    }

    fn open_resolution(
        &mut self,
        id: &str,
        packet_id: String,
        proposer: Address,
        body: ResolutionBody,
    ) {
        let timeout = body
            .confirmation_timeout
            .as_deref()
            .and_then(crate::time::parse_iso8601_duration)
            .unwrap_or(self.config.limits.confirmation_timeout)
            .min(std::time::Duration::from_secs(30 * 86_400));
        let deadline = self.now.add(timeout);
        let remind_at = self.now.add(timeout / 2);
        // The open prompt keeps its number when the new resolution asks the same (the
        // proposal and its actions re-sent); a different proposal is another question
        // under another number, so an answer never confirms what the user was not shown
        // under the number they answered (SPEC-NOTES "Prompts and peer text on screen").
        let open = self
            .threads
            .get(id)
            .and_then(|t| t.resolution.as_ref())
            .and_then(|r| {
                let same = r.body.proposal == body.proposal
                    && r.body.actions_on_confirm == body.actions_on_confirm;
                r.prompt_id.map(|p| (p, same))
            });
        let pid = match open {
            Some((p, true)) => p,
            Some((p, false)) => {
                self.buf.prompt.push(Output::ClosePrompt(p));
                self.next_prompt_id()
            }
            None => self.next_prompt_id(),
        };
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        t.resolution = Some(OpenResolution {
            packet_id,
            proposer,
            body,
            answers: Vec::new(),
            deadline,
            remind_at,
            reminded: false,
            prompt_id: Some(pid),
        });
        t.escalated = false;
        let early: Vec<(Address, ResolutionResponseBody)> = std::mem::take(&mut t.early_answers);
        self.set_state(id, ThreadState::Proposed, "resolution proposed");
        self.set_waiting(id, Waiting::User);
        self.show_resolution_prompt(id, false);
        let pid = self
            .threads
            .get(id)
            .and_then(|t| t.resolution.as_ref())
            .map(|r| r.packet_id.clone());
        for (from, b) in early {
            if b.resolution_id.is_some() && b.resolution_id == pid {
                self.on_resolution_response(id, &from, b);
            }
        }
    }

    fn show_resolution_prompt(&mut self, id: &str, reminder: bool) {
        let Some(t) = self.threads.get(id) else {
            return;
        };
        let Some(r) = &t.resolution else { return };
        let Some(pid) = r.prompt_id else { return };
        let prompt = Prompt {
            id: pid,
            thread_id: id.to_string(),
            peer: t.peer.clone(),
            intent: display::intent(&t.intent),
            kind: PromptKind::Resolution {
                proposal: display::proposal(&r.body.proposal),
                proposer: r.proposer.clone(),
                deadline: r.deadline,
                reminder,
            },
        };
        self.buf.prompt.push(Output::Prompt(prompt));
    }

    fn on_resolution(&mut self, id: &str, packet_id: String, from: Address, body: ResolutionBody) {
        let me = self.config.address.clone();
        let Some(t) = self.threads.get(id) else {
            return;
        };
        if !body.requires_confirmation_from.contains(&me) {
            self.audit(
                Some(id),
                "resolution that does not need this agent ignored".into(),
            );
            return;
        }
        if matches!(t.state, ThreadState::Failed | ThreadState::Rollback) {
            // The proposer moved on faster than this side could undo: open it afterwards.
            if let Some(t) = self.threads.get_mut(id) {
                t.deferred_resolution = Some((packet_id, from, body));
            }
            self.dirty.threads.insert(id.to_string());
            return;
        }
        if !matches!(
            t.state,
            ThreadState::Initiated
                | ThreadState::Negotiating
                | ThreadState::Stalled
                | ThreadState::Proposed
        ) {
            self.audit(Some(id), format!("resolution ignored in state {}", t.state));
            return;
        }
        if t.initiator
            && t.state == ThreadState::Proposed
            && t.resolution.as_ref().is_some_and(|r| r.proposer == me)
        {
            // Both sides proposed at once (their answers to each other's requests
            // crossed). Each side would otherwise open the other's resolution and answer
            // one the other no longer holds; the initiator's stands on both (§8.1), so
            // the responder's is dropped here and superseded there (swarm seed 110).
            self.audit(
                Some(id),
                "crossed resolution of the responder ignored; the initiator's stands".into(),
            );
            return;
        }
        if let Some(c) = self.threads.get_mut(id).and_then(|t| t.consent.take()) {
            if c.prompt_id != 0 {
                self.buf.prompt.push(Output::ClosePrompt(c.prompt_id));
            }
        }
        // The model was asked what to do next while negotiating; the resolution answers
        // that. Its late answer would propose over the one just opened here (large swarm,
        // seed 1).
        self.withdraw_llm(id, "the other side's resolution came first");
        if self
            .threads
            .get(id)
            .is_some_and(|t| t.state == ThreadState::Proposed)
        {
            // A newer proposal replaces the open one.
            self.set_state(
                id,
                ThreadState::Negotiating,
                "superseded by a new resolution",
            );
        }
        self.open_resolution(id, packet_id, from, body);
    }

    fn answer_resolution(&mut self, prompt_id: u64, answer: ResolutionAnswer) {
        let Some(id) = self.thread_where(
            |t| {
                t.resolution
                    .as_ref()
                    .is_some_and(|r| r.prompt_id == Some(prompt_id))
            },
            format!("answer to unknown or closed prompt {prompt_id} ignored"),
        ) else {
            return;
        };
        let me = self.config.address.clone();
        let Some(t) = self.threads.get_mut(&id) else {
            return;
        };
        if t.state != ThreadState::Proposed {
            return;
        }
        let Some(r) = t.resolution.as_mut() else {
            return;
        };
        let chosen = match &answer {
            ResolutionAnswer::Alternative(i) => {
                match r.body.proposal.alternatives.get(*i) {
                    Some(a) => Some((*i, a.summary.clone())),
                    None => {
                        // The prompt stays open: the user picks again.
                        let n = r.body.proposal.alternatives.len();
                        self.audit(
                        Some(&id),
                        format!("alternative {} of prompt {prompt_id} does not exist (it offers {n})", i + 1),
                    );
                        return;
                    }
                }
            }
            _ => None,
        };
        if let (Some((i, _)), true) = (chosen.as_ref(), r.proposer == me) {
            // The proposer's own user picks an alternative: it becomes the proposal at
            // once; the new resolution supersedes this one on the other side.
            let i = *i;
            self.audit(
                Some(&id),
                format!("the user chose alternative {} of the own proposal", i + 1),
            );
            self.propose_alternative(&id, i);
            return;
        }
        r.prompt_id = None;
        let resolution_id = r.packet_id.clone();
        let alt_message = chosen
            .as_ref()
            .map(|(_, summary)| format!("Could we do this instead: {summary}?"));
        let (status, class, message) = match &answer {
            ResolutionAnswer::Confirm => (ResolutionStatus::Confirmed, None, None),
            ResolutionAnswer::DifferentTime => (
                ResolutionStatus::CounterRequested,
                Some("different_time"),
                Some("Could we find a different time?"),
            ),
            ResolutionAnswer::DifferentPlace => (
                ResolutionStatus::CounterRequested,
                Some("different_place"),
                Some("Could we find a different place?"),
            ),
            ResolutionAnswer::MakeExcuse { .. } => (
                ResolutionStatus::Declined,
                Some("scheduling_conflict"),
                Some("Something's come up — need to take a rain check. Can we try another time?"),
            ),
            ResolutionAnswer::Decline => (
                ResolutionStatus::Declined,
                Some("user_declined"),
                Some("Thanks, but this doesn't work for me."),
            ),
            ResolutionAnswer::Alternative(_) => (
                ResolutionStatus::CounterRequested,
                Some(ALTERNATIVE_CHOSEN),
                alt_message.as_deref(),
            ),
        };
        r.answers.retain(|(a, _)| a != &me);
        r.answers.push((me.clone(), status));
        self.dirty.threads.insert(id.clone());
        if let ResolutionAnswer::MakeExcuse {
            actual_reason: Some(_),
        } = &answer
        {
            self.audit(
                Some(&id),
                "declined with an excuse; the real reason stays on this device".into(),
            );
        }
        let body = Body::ResolutionResponse(ResolutionResponseBody {
            resolution_id: Some(resolution_id),
            status,
            reason_class: class.map(str::to_string),
            message_to_other_agent: message.map(str::to_string),
            alternative: chosen.as_ref().and_then(|(i, _)| u32::try_from(*i).ok()),
        });
        let _ = self.send_packet(&id, body);
        match status {
            ResolutionStatus::Confirmed => self.check_confirmed(&id),
            ResolutionStatus::Declined if class == Some("user_declined") => {
                self.set_state(&id, ThreadState::Declined, "declined by the user");
            }
            _ => self.reopen(&id, class.unwrap_or("declined")),
        }
    }

    /// The proposer proposes alternative `i` of its open resolution as the main proposal
    /// (its user picked it, or the other user did with `alternative_chosen`): the open
    /// proposal is ruled out, the alternative's `details` replace the proposal's key by
    /// key, the other alternatives stay offered, the actions stay the same. Both users
    /// confirm the new resolution (SPEC-NOTES "Resolution and confirmation").
    fn propose_alternative(&mut self, id: &str, i: usize) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        let Some(r) = t.resolution.take() else { return };
        let Some(alt) = r.body.proposal.alternatives.get(i).cloned() else {
            t.resolution = Some(r);
            return;
        };
        if let Some(pid) = r.prompt_id {
            self.buf.prompt.push(Output::ClosePrompt(pid));
        }
        let old = r.body.proposal;
        t.rejected.push(Rejected {
            summary: old.summary.clone(),
            details: old.details.clone(),
            reason: ALTERNATIVE_CHOSEN.to_string(),
        });
        self.dirty.threads.insert(id.to_string());
        let mut details = old.details.clone();
        for (k, v) in alt.details {
            details.insert(k, v);
        }
        let alternatives = old
            .alternatives
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, a)| a.clone())
            .collect();
        let reasoning = if alt.reason.is_empty() {
            format!("Chosen instead of “{}”", old.summary)
        } else {
            format!("Chosen instead of “{}”: {}", old.summary, alt.reason)
        };
        let proposal = crate::packet::Proposal {
            summary: alt.summary,
            details,
            alternatives,
            reasoning,
        };
        self.set_state(id, ThreadState::Negotiating, "an alternative was chosen");
        self.propose(id, proposal, r.body.actions_on_confirm);
    }

    /// A proposal was declined with a reason that invites another one: rule it out and
    /// let the proposer try the next option.
    fn reopen(&mut self, id: &str, why: &str) {
        let me = self.config.address.clone();
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        let Some(r) = t.resolution.take() else { return };
        if let Some(pid) = r.prompt_id {
            self.buf.prompt.push(Output::ClosePrompt(pid));
        }
        t.rejected.push(Rejected {
            summary: r.body.proposal.summary.clone(),
            details: r.body.proposal.details.clone(),
            reason: why.to_string(),
        });
        self.dirty.threads.insert(id.to_string());
        self.set_state(id, ThreadState::Negotiating, why);
        if r.proposer == me {
            self.evaluate(id, Turn::Free);
        } else {
            self.set_waiting(id, Waiting::Peer);
        }
    }

    fn on_resolution_response(&mut self, id: &str, from: &Address, b: ResolutionResponseBody) {
        if from == &self.config.address {
            // Only this agent's user answers for this agent (Command::AnswerResolution).
            self.audit(Some(id), "answer in this agent's own name ignored".into());
            return;
        }
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        let is_cancel = b.status == ResolutionStatus::Declined
            && matches!(b.reason_class.as_deref(), None | Some("user_declined"));
        if !is_cancel
            && b.resolution_id.as_ref().is_some_and(|x| {
                let deferred = t
                    .deferred_resolution
                    .as_ref()
                    .is_some_and(|(p, _, _)| p == x);
                deferred
                    || (t.resolution.as_ref().is_none_or(|r| &r.packet_id != x)
                        && !t.received_ids.contains(x)
                        && !t.sent_ids.contains(x))
            })
        {
            // An answer to a resolution that has not arrived yet (the network reordered
            // them), or that waits for this side's undo to finish: kept and applied when
            // it opens, or the confirmation is lost for good.
            if t.early_answers.len() < 4 {
                t.early_answers.push((from.clone(), b));
                self.dirty.threads.insert(id.to_string());
            }
            return;
        }
        let Some(r) = t.resolution.as_mut() else {
            // Only a cancel closes a thread without an open resolution; a late answer to
            // a resolution already re-opened (a counter, an excuse) is stale.
            if is_cancel {
                self.close_prompts(id);
                self.set_state(
                    id,
                    ThreadState::Declined,
                    "the other user closed the thread",
                );
                self.notify(
                    Some(id.into()),
                    NotifyKind::Declined,
                    b.message_to_other_agent
                        .unwrap_or_else(|| "The other side closed the thread.".into()),
                );
            }
            return;
        };
        let current = b.resolution_id.as_deref().is_none_or(|x| x == r.packet_id);
        // A cancel closes its sender's side for good, whichever resolution it answers
        // (the one executing here, or a newer one this side has not opened yet).
        if is_cancel && matches!(t.state, ThreadState::Confirmed | ThreadState::Executing) {
            // The other user withdrew after this side saw every confirmation: undo what
            // was done here and close, as the other side did.
            self.withdraw_execution(
                id,
                format!("{from} withdrew"),
                |ex| ex.cancelled = true,
                NotifyKind::Declined,
                format!("{from} withdrew. Undoing what was done here."),
                "the other user withdrew",
            );
            return;
        }
        if is_cancel && matches!(t.state, ThreadState::Failed | ThreadState::Rollback) {
            // The other user withdrew while this side undoes a failed execution: close
            // once the undo is done instead of re-negotiating (swarm seed 75), also when
            // the cancel answers the proposer's next resolution, which waits for the undo
            // (swarm seed 467).
            if let Some(ex) = t.execution.as_mut() {
                ex.cancelled = true;
                self.dirty.threads.insert(id.to_string());
                self.notify(
                    Some(id.into()),
                    NotifyKind::Declined,
                    format!("{from} withdrew; the thread closes once the undo is done."),
                );
                return;
            }
        }
        if is_cancel && t.state == ThreadState::Proposed {
            // `user_declined` closes the sender's side whatever resolution it answered.
            self.close_prompts(id);
            self.set_state(id, ThreadState::Declined, "declined by the other user");
            self.notify(
                Some(id.into()),
                NotifyKind::Declined,
                format!(
                    "{from} declined. {}",
                    b.message_to_other_agent.unwrap_or_default()
                ),
            );
            return;
        }
        if !current || t.state != ThreadState::Proposed {
            self.audit(Some(id), "answer to an older resolution ignored".into());
            return;
        }
        r.answers.retain(|(a, _)| a != from);
        r.answers.push((from.clone(), b.status));
        self.dirty.threads.insert(id.to_string());
        let msg = b.message_to_other_agent.clone().unwrap_or_default();
        // The other user chose one of this agent's alternatives: it is proposed as the
        // main proposal. An index this resolution does not have is an ordinary counter.
        let chosen = (b.status == ResolutionStatus::CounterRequested
            && b.reason_class.as_deref() == Some(ALTERNATIVE_CHOSEN)
            && r.proposer == self.config.address)
            .then_some(b.alternative)
            .flatten()
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| {
                r.body
                    .proposal
                    .alternatives
                    .get(i)
                    .map(|a| (i, a.summary.clone()))
            });
        if let Some((i, summary)) = chosen {
            self.notify(
                Some(id.into()),
                NotifyKind::Info,
                format!("{from} chose an alternative: {summary}. Proposing it."),
            );
            self.propose_alternative(id, i);
            return;
        }
        match (b.status, b.reason_class.as_deref()) {
            (ResolutionStatus::Confirmed, _) => self.check_confirmed(id),
            (ResolutionStatus::Declined, Some("user_declined"))
            | (ResolutionStatus::Declined, None) => {
                self.close_prompts(id);
                self.set_state(id, ThreadState::Declined, "declined by the other user");
                self.notify(
                    Some(id.into()),
                    NotifyKind::Declined,
                    format!("{from} declined. {msg}"),
                );
            }
            (_, class) => {
                self.notify(
                    Some(id.into()),
                    NotifyKind::Info,
                    format!("{from} can't do that: {msg}"),
                );
                self.reopen(id, class.unwrap_or("counter_requested"));
            }
        }
    }

    /// Who the open resolution still waits for: the participants it names (this
    /// agent's user included) without a `confirmed` answer.
    fn missing_confirmations(&self, id: &str) -> Vec<String> {
        let Some(r) = self.threads.get(id).and_then(|t| t.resolution.as_ref()) else {
            return Vec::new();
        };
        let me = &self.config.address;
        let mut out: Vec<String> = Vec::new();
        for a in &r.body.requires_confirmation_from {
            let confirmed = r
                .answers
                .iter()
                .any(|(who, st)| who == a && *st == ResolutionStatus::Confirmed);
            let name = if a == me {
                "you".to_string()
            } else {
                a.to_string()
            };
            if !confirmed && !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }

    fn check_confirmed(&mut self, id: &str) {
        let me = self.config.address.clone();
        let Some(t) = self.threads.get(id) else {
            return;
        };
        let Some(r) = &t.resolution else { return };
        if !confirmations_complete(r, &me) {
            return;
        }
        let mine: Vec<ActionSpec> = r
            .body
            .actions_on_confirm
            .iter()
            .filter(|a| a.by.as_ref().is_none_or(|b| b == &me))
            .cloned()
            .collect();
        let summary = r.body.proposal.summary.clone();
        self.set_state(
            id,
            ThreadState::Confirmed,
            "all required confirmations received",
        );
        self.notify(
            Some(id.into()),
            NotifyKind::Info,
            format!("Confirmed: {summary}"),
        );
        if let Some(t) = self.threads.get_mut(id) {
            t.execution = Some(Execution {
                mine,
                done: 0,
                in_flight: None,
                undo_queue: Vec::new(),
                peer_completed: false,
                reported: false,
                failure: None,
                cancelled: false,
                expired: false,
            });
        }
        self.set_state(id, ThreadState::Executing, "executing actions");
        self.set_waiting(id, Waiting::Actions);
        self.next_action(id);
        if let Some(r) = self.threads.get_mut(id).and_then(|t| t.early_report.take()) {
            self.on_execution_report(id, r);
        }
    }

    // ===== execution (§9) =====

    fn next_action(&mut self, id: &str) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        let details = t
            .resolution
            .as_ref()
            .map(|r| r.body.proposal.details.clone())
            .unwrap_or_default();
        let Some(ex) = t.execution.as_mut() else {
            return;
        };
        if ex.in_flight.is_some() {
            return;
        }
        if t.state == ThreadState::Rollback {
            if let Some(i) = ex.undo_queue.pop() {
                let aid = self.meta.next_action;
                self.meta.next_action += 1;
                self.dirty.meta = true;
                ex.in_flight = Some((aid, i, true));
                let action = ex.mine.get(i).cloned();
                self.dirty.threads.insert(id.to_string());
                if let Some(action) = action {
                    self.buf.action.push(Output::ExecuteAction(ActionRequest {
                        id: aid,
                        thread_id: id.into(),
                        action,
                        details,
                        undo: true,
                    }));
                }
                return;
            }
            self.rollback_done(id);
            return;
        }
        if ex.done < ex.mine.len() {
            let aid = self.meta.next_action;
            self.meta.next_action += 1;
            self.dirty.meta = true;
            let i = ex.done;
            ex.in_flight = Some((aid, i, false));
            let action = ex.mine[i].clone();
            self.dirty.threads.insert(id.to_string());
            self.buf.action.push(Output::ExecuteAction(ActionRequest {
                id: aid,
                thread_id: id.into(),
                action,
                details,
                undo: false,
            }));
            return;
        }
        // All of mine done.
        if !ex.reported {
            ex.reported = true;
            let rid = t
                .resolution
                .as_ref()
                .map(|r| r.packet_id.clone())
                .unwrap_or_default();
            self.dirty.threads.insert(id.to_string());
            let _ = self.send_packet(
                id,
                Body::ExecutionReport(ExecutionReport {
                    resolution_id: rid,
                    status: "completed".into(),
                    failed_action: None,
                    error: None,
                }),
            );
        }
        self.maybe_complete(id);
    }

    fn maybe_complete(&mut self, id: &str) {
        let Some(t) = self.threads.get(id) else {
            return;
        };
        let Some(ex) = &t.execution else { return };
        if t.state == ThreadState::Executing
            && ex.reported
            && ex.peer_completed
            && ex.in_flight.is_none()
        {
            let summary = t
                .resolution
                .as_ref()
                .map(|r| r.body.proposal.summary.clone())
                .unwrap_or_default();
            self.set_state(id, ThreadState::Completed, "all actions succeeded");
            self.set_waiting(id, Waiting::Nothing);
            self.notify(
                Some(id.into()),
                NotifyKind::Completed,
                format!("Done: {summary}"),
            );
            self.end_thread(id);
        } else if t.state == ThreadState::Executing && ex.reported {
            self.set_waiting(id, Waiting::Peer);
        }
    }

    pub(super) fn on_action_result(&mut self, action_id: u64, result: Result<(), String>) {
        let Some(id) = self.thread_where(
            |t| {
                t.execution
                    .as_ref()
                    .and_then(|e| e.in_flight)
                    .is_some_and(|(a, _, _)| a == action_id)
            },
            format!("result of unknown action {action_id} ignored"),
        ) else {
            return;
        };
        let Some(t) = self.threads.get_mut(&id) else {
            return;
        };
        let Some(ex) = t.execution.as_mut() else {
            return;
        };
        let Some((_, i, undo)) = ex.in_flight.take() else {
            return;
        };
        let name = ex.mine.get(i).map(|a| a.action.clone()).unwrap_or_default();
        self.dirty.threads.insert(id.clone());
        match (undo, result) {
            (true, Ok(())) => {
                self.audit(Some(&id), format!("undid {name}"));
                self.next_action(&id);
            }
            (true, Err(e)) => {
                self.notify(
                    Some(id.clone()),
                    NotifyKind::Failed,
                    format!("Could not undo {name}: {e}. Please check it by hand."),
                );
                self.next_action(&id);
            }
            (false, Ok(())) => {
                ex.done += 1;
                let abort = t.state == ThreadState::Failed || ex.failure.is_some();
                self.audit(Some(&id), format!("action {name} succeeded"));
                if abort {
                    // The peer failed meanwhile: roll back now.
                    self.start_rollback(&id);
                } else {
                    self.next_action(&id);
                }
            }
            (false, Err(e)) => {
                ex.failure = Some(format!("{name} failed: {e}"));
                let rid = t
                    .resolution
                    .as_ref()
                    .map(|r| r.packet_id.clone())
                    .unwrap_or_default();
                self.audit(Some(&id), format!("action {name} failed: {e}"));
                let _ = self.send_packet(
                    &id,
                    Body::ExecutionReport(ExecutionReport {
                        resolution_id: rid,
                        status: "failed".into(),
                        failed_action: Some(name.clone()),
                        error: Some(e.clone()),
                    }),
                );
                self.notify(
                    Some(id.clone()),
                    NotifyKind::Failed,
                    format!(
                        "{name} failed: {e}. Undoing what was done and looking for an alternative."
                    ),
                );
                self.set_state(&id, ThreadState::Failed, "an action failed");
                self.start_rollback(&id);
            }
        }
    }

    fn on_execution_report(&mut self, id: &str, r: ExecutionReport) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        if t.resolution
            .as_ref()
            .is_none_or(|x| x.packet_id != r.resolution_id)
        {
            return;
        }
        let Some(ex) = t.execution.as_mut() else {
            if t.state == ThreadState::Proposed {
                // The peer confirmed and finished before its confirmation reached here
                // (reordering, or a gap re-send): keep the report for the execution.
                t.early_report = Some(r);
                self.dirty.threads.insert(id.to_string());
            }
            return;
        };
        match r.status.as_str() {
            "completed" => {
                ex.peer_completed = true;
                self.dirty.threads.insert(id.to_string());
                self.maybe_complete(id);
            }
            _ => {
                let what = format!(
                    "{} failed on the other side: {}",
                    r.failed_action.unwrap_or_default(),
                    r.error.unwrap_or_default()
                );
                if ex.failure.is_none() {
                    ex.failure = Some(what.clone());
                }
                self.dirty.threads.insert(id.to_string());
                let executing = t.state == ThreadState::Executing;
                self.notify(
                    Some(id.into()),
                    NotifyKind::Failed,
                    format!("{what}. Undoing what was done here."),
                );
                if executing {
                    self.set_state(id, ThreadState::Failed, "the other agent's action failed");
                }
                self.start_rollback(id);
            }
        }
    }

    /// The other side ended the thread while this side was carrying it out: record why
    /// (`failure`) and how the thread ends after the undo (`mark`), tell the user, and
    /// undo what was done here (FAILED, then ROLLBACK).
    fn withdraw_execution(
        &mut self,
        id: &str,
        failure: String,
        mark: impl FnOnce(&mut Execution),
        kind: NotifyKind,
        notice: String,
        why: &str,
    ) {
        if let Some(ex) = self.threads.get_mut(id).and_then(|t| t.execution.as_mut()) {
            ex.failure = Some(failure);
            mark(ex);
        }
        self.dirty.threads.insert(id.to_string());
        self.notify(Some(id.into()), kind, notice);
        self.set_state(id, ThreadState::Failed, why);
        self.start_rollback(id);
    }

    fn start_rollback(&mut self, id: &str) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        let Some(ex) = t.execution.as_mut() else {
            return;
        };
        if ex.in_flight.is_some() {
            return; // resumes when the running action reports
        }
        ex.undo_queue = (0..ex.done)
            .filter(|i| ex.mine.get(*i).is_some_and(|a| a.reversible))
            .collect();
        let executing = t.state == ThreadState::Executing;
        self.dirty.threads.insert(id.to_string());
        if executing {
            self.set_state(id, ThreadState::Failed, "execution aborted");
        }
        self.set_state(id, ThreadState::Rollback, "undoing reversible actions");
        self.next_action(id);
    }

    fn rollback_done(&mut self, id: &str) {
        let me = self.config.address.clone();
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        let failure = t
            .execution
            .as_ref()
            .and_then(|e| e.failure.clone())
            .unwrap_or_else(|| "an action failed".into());
        // A cancel or an expiry on the other side ends the thread once the undo is done;
        // anything waiting for the next proposal goes with it.
        let end = match t.execution.as_ref() {
            Some(e) if e.cancelled => Some(ThreadState::Declined),
            Some(e) if e.expired => Some(ThreadState::Expired),
            _ => None,
        };
        if let Some(end) = end {
            t.execution = None;
            t.deferred_resolution = None;
            t.early_answers.clear();
            self.dirty.threads.insert(id.to_string());
            self.set_state(id, end, &failure);
            return;
        }
        t.execution = None;
        let proposer = t.resolution.as_ref().map(|r| r.proposer.clone());
        if let Some(r) = t.resolution.take() {
            t.rejected.push(Rejected {
                summary: r.body.proposal.summary,
                details: r.body.proposal.details,
                reason: failure.clone(),
            });
        }
        self.dirty.threads.insert(id.to_string());
        self.set_state(
            id,
            ThreadState::Negotiating,
            &format!("re-negotiating: {failure}"),
        );
        if let Some((pid, from, body)) = self
            .threads
            .get_mut(id)
            .and_then(|t| t.deferred_resolution.take())
        {
            self.on_resolution(id, pid, from, body);
        } else if proposer.as_ref() == Some(&me) {
            self.evaluate(id, Turn::Free);
        } else {
            self.set_waiting(id, Waiting::Peer);
        }
    }

    /// Withdraws the thread's model request (in flight or waiting to be retried): its
    /// answer, if it still comes, matches no request and is ignored.
    fn withdraw_llm(&mut self, id: &str, why: &str) {
        let Some(l) = self.threads.get_mut(id).and_then(|t| t.llm.take()) else {
            return;
        };
        self.dirty.threads.insert(id.to_string());
        self.audit(
            Some(id),
            format!("LLM request {} dropped: {why}", l.request_id),
        );
    }

    // ===== gaps, forks, user updates =====

    fn on_thread_state(&mut self, id: &str, s: ThreadStateBody) {
        let Some(t) = self.threads.get(id) else {
            return;
        };
        let theirs: BTreeSet<&String> = s.packets_received.iter().collect();
        let missing: Vec<HistoryEntry> = t
            .history
            .iter()
            .filter(|h| h.outgoing && h.kind != "thread_state" && !theirs.contains(&h.packet_id))
            .cloned()
            .collect();
        for h in missing {
            self.audit(
                Some(id),
                format!(
                    "re-sending {} {} (gap after reconnect)",
                    h.kind, h.packet_id
                ),
            );
            self.seal_and_queue(id, &h.packet_id, h.json.as_bytes());
        }
        if s.state == ThreadState::Expired.as_str() {
            self.peer_expired(id);
        }
        // The summary also lists what the peer sent. A packet of it that never arrived
        // here (its sender crashed after storing the thread but before queuing the
        // packet, so only a summary from this side would make it re-send it) is asked
        // for with this side's own summary, once per packet; an EXPIRED side answers
        // the summary of a side that still has the thread open, as any late packet
        // (§13.1, §8.3; large swarm, seed 1).
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        if t.halted {
            return;
        }
        let answer = if t.state.is_terminal() {
            t.state == ThreadState::Expired
                && ThreadState::from_wire(&s.state).is_some_and(|x| !x.is_terminal())
        } else {
            let lacking: Vec<String> = s
                .packets_sent
                .into_iter()
                .filter(|p| !t.received_ids.contains(p) && !t.gap_asked.contains(p))
                .take(MAX_GAP_ASKED)
                .collect();
            let ask = !lacking.is_empty() && t.gap_asked.len() < MAX_GAP_ASKED;
            if ask {
                self.audit(
                    Some(id),
                    format!(
                        "{} packet(s) the other side sent never arrived: asking for them",
                        lacking.len()
                    ),
                );
                if let Some(t) = self.threads.get_mut(id) {
                    t.gap_asked.extend(lacking);
                }
                self.dirty.threads.insert(id.to_string());
            }
            ask
        };
        if answer && !self.summary_pending(id) {
            self.send_thread_state(id);
        }
    }

    /// The peer's side of the thread expired (§8.3) while this side still had it open
    /// (its confirmations reached the peer too late): this side ends EXPIRED as well,
    /// undoing first what it already did.
    fn peer_expired(&mut self, id: &str) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        let text = "The proposal expired on the other side before every confirmation reached it.";
        match t.state {
            ThreadState::Proposed | ThreadState::Negotiating | ThreadState::Stalled => {
                // Negotiating/stalled: this side's late counter or excuse re-opened a
                // resolution the peer had already let expire; it will never answer again.
                self.close_prompts(id);
                self.set_state(id, ThreadState::Expired, "expired on the other side");
                self.notify(Some(id.into()), NotifyKind::Expired, text.into());
            }
            ThreadState::Confirmed | ThreadState::Executing => self.withdraw_execution(
                id,
                "expired on the other side".into(),
                |ex| ex.expired = true,
                NotifyKind::Expired,
                format!("{text} Undoing what was done here."),
                "expired on the other side",
            ),
            ThreadState::Failed | ThreadState::Rollback => {
                if let Some(ex) = t.execution.as_mut() {
                    ex.expired = true;
                    self.dirty.threads.insert(id.to_string());
                }
            }
            _ => {}
        }
    }

    fn on_thread_fork(&mut self, id: &str, f: crate::packet::ThreadForkBody) {
        let Some(parent) = self.threads.get(id).cloned() else {
            return;
        };
        // A fork past the limits per peer was refused whole before it got here
        // (`packet_refusal`); this one is taken whole.
        self.forget_ended_threads(&parent.peer);
        let mut created = Vec::new();
        for child in f.new_threads {
            if self.threads.contains_key(&child.thread_id) {
                continue;
            }
            let session = new_session(&mut self.meta.rng);
            self.dirty.meta = true;
            let mut t = blank_thread(
                &child.thread_id,
                &parent.peer,
                false,
                child.intent,
                session,
                self.now,
                &parent.coordinator,
            );
            t.parent = Some(id.to_string());
            t.theirs = parent.theirs.clone();
            t.theirs.extend(f.shared_context.clone());
            t.shared = parent.shared.clone();
            t.state = ThreadState::Negotiating;
            self.tags.insert(
                (parent.peer.clone(), thread_tag(&child.thread_id)),
                child.thread_id.clone(),
            );
            self.dirty.threads.insert(child.thread_id.clone());
            created.push(child.thread_id.clone());
            self.threads.insert(child.thread_id.clone(), t);
        }
        if let Some(p) = self.threads.get_mut(id) {
            p.forked_into.extend(created.iter().cloned());
            p.waiting = Waiting::Nothing;
        }
        self.notify(
            Some(id.into()),
            NotifyKind::Info,
            format!("The thread was split into {} threads.", created.len()),
        );
    }

    fn fork_thread(&mut self, id: &str, intents: Vec<Intent>) {
        let Some(parent) = self.threads.get(id).cloned() else {
            return;
        };
        if parent.state.is_terminal() || intents.is_empty() {
            return;
        }
        let mut children = Vec::new();
        for intent in intents.into_iter().take(8) {
            let cid = self.meta.rng.id("thr_", 12);
            let session = new_session(&mut self.meta.rng);
            let mut t = blank_thread(
                &cid,
                &parent.peer,
                true,
                intent.clone(),
                session,
                self.now,
                &self.config.address,
            );
            t.parent = Some(id.to_string());
            t.user_initiated = parent.user_initiated;
            t.local = parent.local.clone();
            t.theirs = parent.theirs.clone();
            t.shared = parent.shared.clone();
            t.version = parent.version.clone();
            t.state = ThreadState::Negotiating;
            self.tags
                .insert((parent.peer.clone(), thread_tag(&cid)), cid.clone());
            self.threads.insert(cid.clone(), t);
            self.dirty.threads.insert(cid.clone());
            children.push(crate::packet::ForkedThread {
                thread_id: cid,
                intent,
            });
        }
        self.dirty.meta = true;
        let body = Body::ThreadFork(crate::packet::ThreadForkBody {
            parent_thread_id: id.to_string(),
            new_threads: children.clone(),
            shared_context: parent.shared.clone(),
        });
        if self.send_packet(id, body).is_ok() {
            if let Some(p) = self.threads.get_mut(id) {
                p.forked_into = children.iter().map(|c| c.thread_id.clone()).collect();
                p.waiting = Waiting::Nothing;
            }
            for c in children {
                self.send_first_packet(&c.thread_id);
            }
        }
    }

    fn update_context(&mut self, id: &str, context: Context) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        if t.state.is_terminal() {
            return;
        }
        // A fresh start, except for places ruled out by a different-place answer: the
        // user answering "which place?" names another one, and the place asked to
        // change must not come back first (unless the user names it again).
        let named: Vec<String> = ["location_preference", "location", "venue"]
            .iter()
            .filter_map(|k| context.get(*k))
            .flat_map(|v| match v {
                Value::String(s) => vec![s.trim().to_lowercase()],
                Value::Array(a) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|s| s.trim().to_lowercase())
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        for (k, v) in context {
            t.local.insert(k, v);
        }
        t.escalated = false;
        t.rejected.retain(|r| {
            r.reason == negotiator::DIFFERENT_PLACE
                && ["location", "venue"].iter().all(|k| {
                    r.details
                        .get(*k)
                        .and_then(Value::as_str)
                        .is_none_or(|p| !named.contains(&p.trim().to_lowercase()))
                })
        });
        t.no_overlap_sent = false;
        // A fresh start: the §6.3 markers of the earlier round no longer apply.
        for k in ["conflict", "proposed_alternatives"] {
            t.shared.remove(k);
            t.theirs.remove(k);
        }
        t.round_trips = 0;
        self.dirty.threads.insert(id.to_string());
        if t.state == ThreadState::Stalled {
            self.set_state(id, ThreadState::Negotiating, "resumed by the user");
        }
        // Share the update, then let the negotiator continue.
        let ctx = {
            let t = &self.threads[id];
            let mut c = Context::new();
            for (k, v) in &t.local {
                if self.tier(&t.peer, k) != Tier::NeverShare && t.shared.get(k) != Some(v) {
                    c.insert(k.clone(), v.clone());
                }
            }
            c
        };
        if !ctx.is_empty() {
            let _ = self.send_packet(
                id,
                Body::Context(ContextBody {
                    context: ctx,
                    ..Default::default()
                }),
            );
        }
        self.evaluate(id, Turn::Free);
    }

    fn update_intent(&mut self, id: &str, intent: Intent, reason: String) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        if t.state.is_terminal() {
            return;
        }
        let previous = std::mem::replace(&mut t.intent, intent.clone());
        self.dirty.threads.insert(id.to_string());
        let needs = negotiator::initial_needs(&intent, &Context::new())
            .into_iter()
            .filter(|n| !t.asked.contains(&n.field) && !t.theirs.contains_key(&n.field))
            .take(packet::MAX_NEEDS_PER_PACKET)
            .collect::<Vec<_>>();
        for n in &needs {
            t.asked.insert(n.field.clone());
        }
        let body = Body::IntentUpdate(crate::packet::IntentUpdateBody {
            previous_intent: Some(previous),
            updated_intent: intent,
            reason,
            additional_context_needed: needs,
        });
        self.send_then_wait(id, body, vec![]);
    }

    fn cancel_thread(&mut self, id: &str) {
        let Some(t) = self.threads.get(id) else {
            return;
        };
        if t.state.is_terminal() {
            return;
        }
        let state = t.state;
        let busy = matches!(
            state,
            ThreadState::Executing
                | ThreadState::Confirmed
                | ThreadState::Failed
                | ThreadState::Rollback
        );
        if matches!(state, ThreadState::Executing | ThreadState::Confirmed)
            && t.execution.as_ref().is_some_and(|e| e.reported)
        {
            // This side reported its part done: the other side may already have
            // completed, and a COMPLETED thread cannot be undone by a cancel, so calling
            // it off here would leave the two sides disagreeing (swarm seed 627). The
            // thread ends with the other side's report.
            self.notify(
                Some(id.into()),
                NotifyKind::Info,
                "Everything agreed is already done on this side; the thread ends with the \
                 other side's report. To call it off now, undo it with the other person."
                    .into(),
            );
            return;
        }
        let rid = t.resolution.as_ref().map(|r| r.packet_id.clone());
        let _ = self.send_packet(
            id,
            Body::ResolutionResponse(ResolutionResponseBody {
                resolution_id: rid,
                status: ResolutionStatus::Declined,
                reason_class: Some("user_declined".into()),
                message_to_other_agent: Some("Thanks, but let's leave this one.".into()),
                alternative: None,
            }),
        );
        self.close_prompts(id);
        if busy {
            // The other side withdraws on this cancel (undoes what it did, then
            // DECLINED); this side does the same once its running action reports,
            // instead of finishing and waiting for a report that never comes (swarm seed
            // 627).
            if let Some(ex) = self.threads.get_mut(id).and_then(|t| t.execution.as_mut()) {
                ex.cancelled = true;
                if ex.failure.is_none() {
                    ex.failure = Some("cancelled by the user".into());
                }
            }
            self.dirty.threads.insert(id.to_string());
            self.notify(
                Some(id.into()),
                NotifyKind::Info,
                "Undoing what was done here; the thread closes when that is finished.".into(),
            );
            if state == ThreadState::Executing {
                self.set_state(id, ThreadState::Failed, "cancelled by the user");
                self.start_rollback(id);
            }
            return;
        }
        self.set_state(id, ThreadState::Declined, "cancelled by the user");
    }

    fn close_prompts(&mut self, id: &str) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        if let Some(c) = t.consent.take() {
            if c.prompt_id != 0 {
                self.buf.prompt.push(Output::ClosePrompt(c.prompt_id));
            }
        }
        if let Some(r) = t.resolution.as_mut() {
            if let Some(p) = r.prompt_id.take() {
                self.buf.prompt.push(Output::ClosePrompt(p));
            }
        }
        self.dirty.threads.insert(id.to_string());
    }

    // ===== state, timers =====

    pub(super) fn set_state(&mut self, id: &str, to: ThreadState, why: &str) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        let from = t.state;
        match t.transition(to) {
            Ok(true) => {
                t.last_activity = self.now;
                if to.is_terminal() {
                    t.waiting = Waiting::Nothing;
                }
                self.dirty.threads.insert(id.to_string());
                self.audit(Some(id), format!("state {from} -> {to} ({why})"));
                if to.is_terminal() {
                    self.end_thread(id);
                }
            }
            Ok(false) => {}
            Err(e) => self.audit_bug(Some(id), format!("refused: {e} ({why})")),
        }
    }

    /// A thread ended: its ephemeral secret is erased, so a later key leak cannot open
    /// it (§16, SPEC-NOTES "forward secrecy").
    fn end_thread(&mut self, id: &str) {
        let now = self.now;
        if let Some(t) = self.threads.get_mut(id) {
            if t.state.is_terminal() && t.ended_at.is_none() {
                t.ended_at = Some(now);
                t.consent = None;
                t.llm = None;
                self.dirty.threads.insert(id.to_string());
            }
        }
    }

    fn set_waiting(&mut self, id: &str, w: Waiting) {
        if let Some(t) = self.threads.get_mut(id) {
            if t.waiting != w {
                t.waiting = w;
                if w == Waiting::Peer {
                    t.last_activity = self.now;
                }
                self.dirty.threads.insert(id.to_string());
            }
        }
    }

    pub(super) fn thread_deadline(&self, t: &Thread) -> Option<Timestamp> {
        if t.state.is_terminal() {
            // The ephemeral secret outlives the thread by a grace period, so late gap
            // requests (§13.1) can still be answered; then it is erased.
            return t
                .ended_at
                .filter(|_| !t.session.is_erased())
                .map(|e| e.add(ERASE_GRACE));
        }
        if t.halted {
            return None;
        }
        let mut d: Option<Timestamp> = None;
        let mut at = |x: Timestamp| d = Some(d.map_or(x, |c| c.min(x)));
        if let Some(l) = &t.llm {
            if let Some(r) = l.retry_at {
                at(r);
            }
        }
        if t.state == ThreadState::Proposed {
            if let Some(r) = &t.resolution {
                if !r.reminded {
                    at(r.remind_at);
                }
                at(r.deadline);
            }
        } else if matches!(t.state, ThreadState::Initiated | ThreadState::Negotiating)
            && t.waiting == Waiting::Peer
        {
            let s = if t.intent.is_urgent() {
                self.config.limits.staleness_urgent
            } else {
                self.config.limits.staleness
            };
            at(t.last_activity.add(s));
        }
        d
    }

    pub(super) fn thread_timeout(&mut self, id: &str) {
        let now = self.now;
        if let Some(t) = self.threads.get_mut(id) {
            if t.state.is_terminal() {
                if t.ended_at.is_some_and(|e| e.add(ERASE_GRACE) <= now) && !t.session.is_erased() {
                    t.session.erase();
                    self.dirty.threads.insert(id.to_string());
                    self.audit(Some(id), "ephemeral key erased".into());
                }
                return;
            }
        }
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        if let Some(l) = t.llm.as_mut() {
            if l.retry_at.is_some_and(|r| r <= now) {
                l.retry_at = None;
                if self.llm_superseded(id) {
                    return;
                }
                let Some(t) = self.threads.get_mut(id) else {
                    return;
                };
                let Some(l) = t.llm.take() else {
                    return;
                };
                self.ask_llm(id, l.attempt + 1, l.last_error);
                return;
            }
        }
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        if t.state == ThreadState::Proposed {
            let Some(r) = t.resolution.as_mut() else {
                return;
            };
            if now >= r.deadline {
                if let Some(p) = r.prompt_id.take() {
                    self.buf.prompt.push(Output::ClosePrompt(p));
                }
                let summary = r.body.proposal.summary.clone();
                let missing = self.missing_confirmations(id);
                self.set_state(id, ThreadState::Expired, "confirmation timeout");
                self.notify(
                    Some(id.into()),
                    NotifyKind::Expired,
                    format!(
                        "“{summary}” expired: not everyone confirmed in time (no confirmation from {}).",
                        list(missing.iter())
                    ),
                );
                // §8.3 "both users are notified": the other side learns it at once, also
                // when it is the one whose confirmation never came (a proposer that does
                // not send its own `resolution_response`), instead of staying PROPOSED.
                self.send_thread_state(id);
            } else if now >= r.remind_at && !r.reminded {
                r.reminded = true;
                let answered = r.prompt_id.is_none();
                let summary = r.body.proposal.summary.clone();
                self.dirty.threads.insert(id.to_string());
                if answered {
                    // The user answered; others have not confirmed yet (§8.1
                    // remind_then_expire).
                    let missing = self.missing_confirmations(id);
                    self.notify(
                        Some(id.into()),
                        NotifyKind::Info,
                        format!(
                            "Reminder: “{summary}” still waits for a confirmation from {}; it expires if none comes in time.",
                            list(missing.iter())
                        ),
                    );
                } else {
                    self.show_resolution_prompt(id, true);
                    self.notify(
                        Some(id.into()),
                        NotifyKind::Info,
                        "Reminder: a proposal is waiting for your answer.".into(),
                    );
                }
            }
            return;
        }
        if matches!(t.state, ThreadState::Initiated | ThreadState::Negotiating)
            && t.waiting == Waiting::Peer
        {
            let peer = t.peer.clone();
            self.set_state(
                id,
                ThreadState::Stalled,
                "no answer within the staleness timeout",
            );
            self.notify(
                Some(id.into()),
                NotifyKind::Stalled,
                format!("{peer} hasn't answered; the thread is stalled."),
            );
            let body = Body::Context(ContextBody {
                escalation: Some(Escalation {
                    recommend: "surface_to_users".into(),
                    reason: format!("{STALL_REASON}: no answer within the staleness timeout"),
                    suggested_prompt: None,
                }),
                ..Default::default()
            });
            let _ = self.send_packet(id, body);
            self.set_waiting(id, Waiting::User);
        }
    }

    pub(super) fn resume_after_restore(&mut self) {
        let ids: Vec<String> = self.threads.keys().cloned().collect();
        for id in ids {
            let Some(t) = self.threads.get(&id) else {
                continue;
            };
            if t.state.is_terminal() {
                continue;
            }
            let consent_open = t.consent.as_ref().is_some_and(|c| c.prompt_id != 0);
            let resolution_open = t.state == ThreadState::Proposed
                && t.resolution.as_ref().is_some_and(|r| r.prompt_id.is_some());
            if consent_open {
                self.show_consent_prompt(&id);
            }
            if resolution_open {
                self.show_resolution_prompt(&id, false);
            }
            let Some(t) = self.threads.get(&id) else {
                continue;
            };
            if let Some((aid, i, undo)) = t.execution.as_ref().and_then(|e| e.in_flight) {
                let details = t
                    .resolution
                    .as_ref()
                    .map(|r| r.body.proposal.details.clone())
                    .unwrap_or_default();
                if let Some(action) = t.execution.as_ref().and_then(|e| e.mine.get(i).cloned()) {
                    self.buf.action.push(Output::ExecuteAction(ActionRequest {
                        id: aid,
                        thread_id: id.clone(),
                        action,
                        details,
                        undo,
                    }));
                }
            }
            let lost = t
                .llm
                .as_ref()
                .filter(|l| l.retry_at.is_none())
                .map(|l| (l.attempt, l.last_error.clone()));
            if let Some((attempt, err)) = lost {
                if !self.llm_superseded(&id) {
                    if let Some(t) = self.threads.get_mut(&id) {
                        t.llm = None;
                    }
                    self.ask_llm(&id, attempt, err);
                }
            }
        }
    }

    // ===== LLM (§5, §13.3) =====

    fn ask_llm(&mut self, id: &str, attempt: u32, previous_error: Option<String>) {
        let rid = self.meta.next_llm;
        self.meta.next_llm += 1;
        self.dirty.meta = true;
        let Some(t) = self.threads.get(id) else {
            return;
        };
        let layers = self.prompt_layers(t);
        let req = LlmRequest {
            id: rid,
            thread_id: id.to_string(),
            attempt,
            layers,
            schema: negotiator::decision_schema(),
            previous_error: previous_error.clone(),
        };
        if let Some(t) = self.threads.get_mut(id) {
            t.llm = Some(LlmPending {
                request_id: rid,
                attempt,
                retry_at: None,
                last_error: previous_error,
                stale: false,
            });
        }
        self.set_waiting(id, Waiting::Llm);
        self.dirty.threads.insert(id.to_string());
        self.buf.llm.push(Output::CallLlm(req));
    }

    fn prompt_layers(&self, t: &Thread) -> Vec<LlmLayer> {
        let profile: Map<String, Value> = self
            .config
            .profile
            .iter()
            .filter(|(k, _)| self.tier(&t.peer, k) != Tier::NeverShare)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let history: Vec<&str> = t.history.iter().map(|h| h.json.as_str()).collect();
        let layer = |name: &str, content: String| LlmLayer {
            name: name.into(),
            content,
        };
        vec![
            layer(
                "protocol",
                "You negotiate an A2ACP thread for your user. Answer with one JSON object that follows the schema: \
                 ask for at most 5 fields you do not have and never ask a field twice; propose a resolution when you \
                 have enough; use only the values given to you; escalate when the options are exhausted."
                    .into(),
            ),
            layer("user_profile", Value::Object(profile).to_string()),
            layer(
                "permissions",
                json!({
                    "always_share": self.settings.tiers.always_share,
                    "ask_first": self.settings.tiers.ask_first,
                    "never_share": self.settings.tiers.never_share,
                    "override": self.settings.overrides.get(&t.peer),
                })
                .to_string(),
            ),
            layer(
                "relationship_memory",
                json!({ "agent": t.peer, "malformed": self.peers.get(&t.peer).map(|p| p.malformed) }).to_string(),
            ),
            layer(
                "thread",
                json!({
                    "intent": t.intent, "state": t.state, "mine": self.mine(t), "theirs": t.theirs,
                    "asked": t.asked, "unavailable": t.peer_unavailable, "rejected": t.rejected,
                    "round_trips": t.round_trips, "history": history,
                })
                .to_string(),
            ),
        ]
    }

    pub(super) fn on_llm_result(&mut self, request_id: u64, result: Result<String, String>) {
        let Some(id) = self.thread_where(
            |t| {
                t.llm
                    .as_ref()
                    .is_some_and(|l| l.request_id == request_id && l.retry_at.is_none())
            },
            format!("LLM answer {request_id} ignored: not waited for"),
        ) else {
            return;
        };
        if self.llm_superseded(&id) {
            return;
        }
        let attempts = self.config.limits.llm_attempts;
        let Some(t) = self.threads.get(&id) else {
            return;
        };
        let attempt = t.llm.as_ref().map(|l| l.attempt).unwrap_or(1);
        let turn = self.llm_turn(&id);
        match result {
            Ok(text) => {
                let parsed = {
                    let mine = self.mine(t);
                    let theirs = self.theirs(t);
                    let view = self.view(t, &mine, &theirs);
                    negotiator::parse_decision(&text, &view)
                };
                let parsed = parsed.and_then(|d| self.check_decision_secrets(&id, d));
                match parsed {
                    Ok(decision) => {
                        if let Some(t) = self.threads.get_mut(&id) {
                            t.llm = None;
                        }
                        self.set_waiting(&id, Waiting::Nothing);
                        self.act(&id, decision, turn);
                    }
                    Err(e) if attempt < attempts => {
                        self.audit(
                            Some(&id),
                            format!("LLM answer refused (attempt {attempt}): {e}"),
                        );
                        if let Some(t) = self.threads.get_mut(&id) {
                            t.llm = None;
                        }
                        self.ask_llm(&id, attempt + 1, Some(e));
                    }
                    Err(e) => {
                        self.audit(
                            Some(&id),
                            format!("LLM gave no valid answer in {attempts} attempts: {e}"),
                        );
                        if let Some(t) = self.threads.get_mut(&id) {
                            t.llm = None;
                        }
                        let _ = self.send_packet(
                            &id,
                            Body::ProcessingError(crate::packet::ProcessingErrorBody {
                                error: "malformed_output".into(),
                                message: format!("no valid decision after {attempts} attempts"),
                                regarding: None,
                            }),
                        );
                        self.set_waiting(&id, Waiting::User);
                        self.notify(Some(id.clone()), NotifyKind::Escalated, "I couldn't work out a reply for this thread; it is paused until you look at it.".into());
                    }
                }
            }
            Err(e) if attempt < attempts => {
                // Exponential backoff: 1 s, 2 s, 4 s… (§13.3).
                let delay = std::time::Duration::from_secs(1u64 << (attempt - 1).min(10));
                let at = self.now.add(delay);
                if let Some(l) = self.threads.get_mut(&id).and_then(|t| t.llm.as_mut()) {
                    l.retry_at = Some(at);
                    l.last_error = Some(e.clone());
                }
                self.dirty.threads.insert(id.clone());
                self.audit(
                    Some(&id),
                    format!("LLM unavailable (attempt {attempt}): {e}; retrying"),
                );
            }
            Err(e) => {
                // Fall back to the deterministic negotiator, the always-available model.
                self.audit(Some(&id), format!("LLM unavailable after {attempts} attempts ({e}); using the deterministic negotiator"));
                if let Some(t) = self.threads.get_mut(&id) {
                    t.llm = None;
                }
                self.set_waiting(&id, Waiting::Nothing);
                self.notify(
                    Some(id.clone()),
                    NotifyKind::Info,
                    "My language model is unavailable; I used the built-in negotiator instead."
                        .into(),
                );
                let decision = {
                    let t = &self.threads[&id];
                    let mine = self.mine(t);
                    let theirs = self.theirs(t);
                    let view = self.view(t, &mine, &theirs);
                    negotiator::decide(&view)
                };
                self.act(&id, decision, turn);
            }
        }
    }

    /// Whether the pending LLM request of thread `id` was overtaken by new input (see
    /// [`LlmPending::stale`]). If so it is dropped and the thread evaluated afresh: the
    /// model is asked again about the thread as it is now, unless the thread now waits
    /// for its user or left negotiation. Acting on the answer instead proposed or asked
    /// on an outdated view and never looked at what had come in (large swarm, seed 1).
    fn llm_superseded(&mut self, id: &str) -> bool {
        let Some(t) = self.threads.get_mut(id) else {
            return false;
        };
        let Some(l) = t.llm.take_if(|l| l.stale) else {
            return false;
        };
        self.dirty.threads.insert(id.to_string());
        self.audit(
            Some(id),
            format!(
                "LLM request {} superseded: the thread changed while the model was asked",
                l.request_id
            ),
        );
        if self
            .threads
            .get(id)
            .is_some_and(|t| t.waiting == Waiting::Llm)
        {
            self.set_waiting(id, Waiting::Nothing);
        }
        let turn = self.llm_turn(id);
        self.evaluate(id, turn);
        true
    }

    /// The turn of thread `id` when its LLM answers: answering if the peer's latest
    /// packet was a request.
    fn llm_turn(&self, id: &str) -> Turn {
        let asked = self.threads.get(id).is_some_and(|t| {
            t.history
                .iter()
                .rev()
                .find(|h| !h.outgoing)
                .is_some_and(|h| h.kind == "context_request")
        });
        if asked {
            Turn::AnsweringRequest
        } else {
            Turn::Free
        }
    }

    // ===== limits per peer (SPEC-NOTES §13, "Limits per peer") =====

    /// Open threads `peer` started with this agent, children of its forks included.
    fn open_threads_started_by(&self, peer: &Address) -> usize {
        self.threads
            .values()
            .filter(|t| &t.peer == peer && !t.initiator && !t.state.is_terminal())
            .count()
    }

    /// Open prompts of threads `peer` started. Threads this agent's user started are not
    /// counted, nor limited: their prompts are bounded by what the user asked for (at most
    /// one consent and one resolution prompt per thread), and a peer answering them must
    /// not be refused because other threads of that peer wait for the user.
    fn open_prompts_of(&self, peer: &Address) -> usize {
        self.threads
            .values()
            .filter(|t| &t.peer == peer && !t.initiator)
            .map(prompts_open)
            .sum()
    }

    /// Why the first packet `p` of a thread its sender opens is refused, if it is.
    fn new_thread_refusal(&self, p: &Packet) -> Option<(&'static str, String)> {
        let l = &self.config.limits;
        let open = self.open_threads_started_by(&p.from);
        if open >= l.max_threads_per_peer as usize {
            return Some((
                "too_many_threads",
                format!(
                    "{open} threads you started with this agent are open and at most {} may be; this one was not opened",
                    l.max_threads_per_peer
                ),
            ));
        }
        // Any new thread may end in a prompt (a question of the peer, or a proposal).
        let prompts = self.open_prompts_of(&p.from);
        if prompts >= l.max_prompts_per_peer as usize {
            return Some((
                "too_many_prompts",
                format!(
                    "{prompts} of your questions wait for this agent's user (at most {}); this thread was not opened",
                    l.max_prompts_per_peer
                ),
            ));
        }
        None
    }

    /// Why a packet `p` (`len` bytes) of an open thread `id` is refused, if it is.
    fn packet_refusal(&self, id: &str, p: &Packet, len: usize) -> Option<(&'static str, String)> {
        let t = self.threads.get(id)?;
        let l = &self.config.limits;
        let held: usize = t.history.iter().map(|h| h.json.len()).sum();
        if held.saturating_add(len) > l.max_thread_bytes {
            return Some((
                "thread_too_large",
                format!(
                    "this thread holds {held} bytes of packets and at most {} are kept; this packet was not processed",
                    l.max_thread_bytes
                ),
            ));
        }
        if let Body::ThreadFork(f) = &p.body {
            // A fork is taken whole or refused whole.
            let n = f.new_threads.len();
            let open = self.open_threads_started_by(&t.peer);
            if n > l.max_fork_children as usize {
                return Some((
                    "too_many_children",
                    format!(
                        "a thread_fork may create at most {} threads; this one asked for {n}, so none was created",
                        l.max_fork_children
                    ),
                ));
            }
            if open.saturating_add(n) > l.max_threads_per_peer as usize {
                return Some((
                    "too_many_threads",
                    format!(
                        "{open} threads you started with this agent are open and at most {} may be; none of the {n} was created",
                        l.max_threads_per_peer
                    ),
                ));
            }
        }
        let prompts = self.open_prompts_of(&t.peer);
        if !t.initiator
            && !t.state.is_terminal()
            && may_prompt(&p.body)
            && prompts_open(t) == 0
            && prompts >= l.max_prompts_per_peer as usize
        {
            return Some((
                "too_many_prompts",
                format!(
                    "{prompts} of your questions wait for this agent's user (at most {}); this packet was not processed, send it again once they are answered",
                    l.max_prompts_per_peer
                ),
            ));
        }
        None
    }

    /// Refuses the first packet of a thread: no thread is created, and the sender gets a
    /// `processing_error` sealed in the session its envelope opened.
    fn refuse_new_thread(&mut self, p: &Packet, session: ThreadSession, code: &str, why: String) {
        let peer = p.from.clone();
        self.count_refusal(&peer, |r| r.threads = r.threads.saturating_add(1));
        if !self.may_answer_refusal(&peer) {
            return;
        }
        let Some(key) = self.keys.get(&peer).cloned() else {
            return;
        };
        let (packet_id, bytes) =
            self.processing_error(&p.thread_id, &peer, None, code, why, &p.packet_id);
        let mut session = session;
        if let Ok(env) = session.seal(
            &self.identity,
            &self.config.address,
            &peer,
            &key,
            &p.thread_id,
            Direction::FromResponder,
            &bytes,
        ) {
            self.queue_envelope(&p.thread_id, &packet_id, env);
        }
    }

    /// Refuses packet `p` of open thread `id`: it is not taken in (not even as received,
    /// so a later gap exchange can bring it again), and the sender gets a `processing_error`.
    fn refuse_packet(&mut self, id: &str, p: &Packet, code: &str, why: String) {
        let peer = p.from.clone();
        match &p.body {
            Body::ThreadFork(f) => {
                let n = f.new_threads.len() as u64;
                self.count_refusal(&peer, |r| {
                    r.fork_children = r.fork_children.saturating_add(n)
                });
            }
            _ => self.count_refusal(&peer, |r| r.packets = r.packets.saturating_add(1)),
        }
        self.answer_refusal(id, &peer, code, why, &p.packet_id);
    }

    /// Sends `peer` a `processing_error` about packet `regarding` in thread `id`, outside
    /// the thread's history (a refusal is not part of the negotiation), at most 10 a minute
    /// per peer.
    fn answer_refusal(
        &mut self,
        id: &str,
        peer: &Address,
        code: &str,
        why: String,
        regarding: &str,
    ) {
        if !self.may_answer_refusal(peer) {
            return;
        }
        let version = self.threads.get(id).and_then(|t| t.version.clone());
        let (packet_id, bytes) = self.processing_error(id, peer, version, code, why, regarding);
        self.seal_and_queue(id, &packet_id, &bytes);
    }

    /// A `processing_error` packet of thread `id` to `peer`: its id and bytes.
    fn processing_error(
        &mut self,
        id: &str,
        peer: &Address,
        version: Option<String>,
        code: &str,
        why: String,
        regarding: &str,
    ) -> (String, Vec<u8>) {
        let packet_id = self.meta.rng.id("pkt_", 12);
        self.dirty.meta = true;
        let p = Packet {
            protocol: format!(
                "a2acp/{}",
                version.unwrap_or_else(|| self.highest_version())
            ),
            packet_id: packet_id.clone(),
            thread_id: id.to_string(),
            from: self.config.address.clone(),
            to: peer.clone(),
            timestamp: self.now.to_rfc3339(),
            capabilities: None,
            format_hints: None,
            body: Body::ProcessingError(crate::packet::ProcessingErrorBody {
                error: code.to_string(),
                message: why,
                regarding: Some(regarding.to_string()),
            }),
        };
        (packet_id, p.to_bytes().unwrap_or_default())
    }

    /// Whether another refusal of `peer` may be answered this minute (at most 10).
    fn may_answer_refusal(&mut self, peer: &Address) -> bool {
        let now = self.now;
        let rec = self.peers.entry(peer.clone()).or_default();
        let (start, n) = match rec.refused.answers {
            Some((start, n)) if now < start.add(std::time::Duration::from_secs(60)) => (start, n),
            _ => (now, 0),
        };
        let ok = n < 10;
        rec.refused.answers = Some((start, if ok { n + 1 } else { n }));
        self.dirty.peers.insert(peer.clone());
        ok
    }

    /// Counts a refusal of `peer`. Its user hears of them in one notification (key
    /// `refused/<address>`) whose count is renewed when the total reaches 1, 2, 5, 10, 20,
    /// 50…, and otherwise at most once a minute (a timer catches up with the last ones);
    /// the audit log gets one line each time, not one per refusal.
    fn count_refusal(&mut self, peer: &Address, what: impl FnOnce(&mut Refusals)) {
        let rec = self.peers.entry(peer.clone()).or_default();
        what(&mut rec.refused);
        self.dirty.peers.insert(peer.clone());
        let milestone = next_milestone(rec.refused.told_at) <= rec.refused.total();
        if milestone || rec.refused.tell_due().is_some_and(|t| t <= self.now) {
            self.tell_refusals(peer);
        }
    }

    /// Renews the collapsed notification of `peer`'s refusals with the current counts.
    pub(super) fn tell_refusals(&mut self, peer: &Address) {
        let now = self.now;
        let Some(rec) = self.peers.get_mut(peer) else {
            return;
        };
        rec.refused.told_at = rec.refused.total();
        rec.refused.told_when = Some(now);
        self.dirty.peers.insert(peer.clone());
        let r = rec.refused.clone();
        let l = &self.config.limits;
        let threads = r.threads.saturating_add(r.fork_children);
        let mut parts = Vec::new();
        if threads > 0 {
            parts.push(format!(
                "opened {threads} thread(s) past your limits (at most {} at once, {} per fork)",
                l.max_threads_per_peer, l.max_fork_children
            ));
        }
        if r.packets > 0 {
            parts.push(format!(
                "sent {} packet(s) past your limits (at most {} open questions, {} KiB per thread)",
                r.packets,
                l.max_prompts_per_peer,
                l.max_thread_bytes / 1024
            ));
        }
        self.notify_keyed(
            format!("refused/{peer}"),
            NotifyKind::Flagged,
            format!(
                "{peer} {}; they were refused. Block {peer}?",
                parts.join(" and ")
            ),
        );
        self.audit(
            None,
            format!(
                "refused past the limits per peer from {peer}: {} new thread(s), {} fork child(ren), {} packet(s)",
                r.threads, r.fork_children, r.packets
            ),
        );
    }

    /// Forgets the oldest ended threads `peer` started beyond the number kept, records
    /// included, so a peer that opens and ends threads forever grows nothing.
    fn forget_ended_threads(&mut self, peer: &Address) {
        let keep = self.config.limits.max_ended_threads_per_peer as usize;
        let mut ended: Vec<(Timestamp, String)> = self
            .threads
            .values()
            .filter(|t| &t.peer == peer && !t.initiator && t.state.is_terminal())
            .map(|t| (t.ended_at.unwrap_or(t.last_activity), t.id.clone()))
            .collect();
        if ended.len() <= keep {
            return;
        }
        ended.sort();
        let extra = ended.len() - keep;
        for (_, id) in ended.into_iter().take(extra) {
            let Some(t) = self.threads.remove(&id) else {
                continue;
            };
            self.tags.remove(&(t.peer.clone(), thread_tag(&id)));
            self.dirty.threads.remove(&id);
            let stored = self.hist_stored.remove(&id).unwrap_or(0);
            for n in 0..stored {
                self.dirty.ops.push(PersistOp::Delete {
                    key: history_key(&id, n),
                });
            }
            self.dirty.ops.push(PersistOp::Delete {
                key: format!("thread/{id}"),
            });
            self.audit(
                Some(&id),
                format!("ended thread forgotten: {peer} started more than {keep} that ended"),
            );
        }
    }

    fn check_decision_secrets(&self, id: &str, d: Decision) -> Result<Decision, String> {
        let Some(t) = self.threads.get(id) else {
            return Ok(d);
        };
        let text = serde_json::to_vec(&d).unwrap_or_default();
        match self.leaked_secret(&t.peer, &text) {
            Some(f) => Err(format!(
                "the answer contains the never_share value of `{f}`"
            )),
            None => Ok(d),
        }
    }
}

/// Open prompts of thread `t` (its consent prompt, its resolution prompt).
fn prompts_open(t: &Thread) -> usize {
    let consent = t.consent.as_ref().is_some_and(|c| c.prompt_id != 0);
    let resolution = t.state == ThreadState::Proposed
        && t.resolution.as_ref().is_some_and(|r| r.prompt_id.is_some());
    usize::from(consent) + usize::from(resolution)
}

/// Whether a packet of the peer can open a prompt for this agent's user.
fn may_prompt(b: &Body) -> bool {
    match b {
        Body::Context(c) => !c.needs.is_empty(),
        Body::ContextRequest(c) => !c.needs.is_empty(),
        Body::IntentUpdate(u) => !u.additional_context_needed.is_empty(),
        Body::Resolution(_) => true,
        _ => false,
    }
}

/// The smallest count above `n` at which a collapsed record is renewed (1, 2, 5, 10…).
fn next_milestone(n: u64) -> u64 {
    let mut m: u64 = 1;
    loop {
        for k in [1u64, 2, 5] {
            let x = m.saturating_mul(k);
            if x > n || x == u64::MAX {
                return x;
            }
        }
        m = m.saturating_mul(10);
    }
}

/// Whether resolution `r` has every confirmation this agent (`me`) requires before it
/// acts on it (SPEC-NOTES "Resolution and confirmation", who confirms):
///
/// 1. its own user's `confirmed`, always — whatever the resolution's quorum or list says;
///    only [`Command::AnswerResolution`] records it (answers of other agents are recorded
///    under their own authenticated address, never this agent's);
/// 2. the confirmations of the *other* participants the resolution names: all of them
///    without a quorum; with a quorum `q` (§8.3, the number of confirmations in total),
///    `q - 1` of them, this agent's user being one of the `q`. Duplicates count once.
fn confirmations_complete(r: &OpenResolution, me: &Address) -> bool {
    let confirmed = |who: &Address| {
        r.answers
            .iter()
            .any(|(a, s)| a == who && *s == ResolutionStatus::Confirmed)
    };
    if !confirmed(me) {
        return false;
    }
    let others: BTreeSet<&Address> = r
        .body
        .requires_confirmation_from
        .iter()
        .filter(|a| *a != me)
        .collect();
    let need = match r.body.quorum {
        Some(q) => (q as usize).saturating_sub(1).min(others.len()),
        None => others.len(),
    };
    others.iter().filter(|a| confirmed(a)).count() >= need
}

fn blank_thread(
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
        theirs: Context::new(),
        asked: BTreeSet::new(),
        peer_unavailable: BTreeSet::new(),
        answered: BTreeSet::new(),
        round_trips: 0,
        escalated: false,
        no_overlap_sent: false,
        consent: None,
        resolution: None,
        execution: None,
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
        deferred_resolution: None,
        early_report: None,
        early_answers: Vec::new(),
        gap_asked: BTreeSet::new(),
        ended_at: None,
        summarised: None,
        relay_refused: None,
    }
}

/// Packets that count as a context exchange for the §6.4 limit.
fn counts_as_exchange(b: &Body) -> bool {
    match b {
        Body::Context(c) => {
            c.escalation.is_none() || c.context.contains_key("proposed_alternatives")
        }
        Body::ContextRequest(_) | Body::ContextResponse(_) | Body::IntentUpdate(_) => true,
        _ => false,
    }
}

fn provided(b: &Body) -> Option<&Context> {
    b.provided()
}

fn provided_mut(b: &mut Body) -> Option<&mut Context> {
    match b {
        Body::Context(c) => Some(&mut c.context),
        Body::ContextRequest(c) => Some(&mut c.context_provided),
        Body::ContextResponse(c) => Some(&mut c.context_provided),
        _ => None,
    }
}

fn set_permissions(b: &mut Body, d: PermissionsDeclaration) {
    match b {
        Body::Context(c) => c.permissions = Some(d),
        Body::ContextRequest(c) => c.permissions = Some(d),
        Body::ContextResponse(c) => c.permissions = Some(d),
        _ => {}
    }
}

fn strings_of(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Number(n) => vec![n.to_string()],
        Value::Array(a) => a.iter().flat_map(strings_of).collect(),
        Value::Object(m) => m.values().flat_map(strings_of).collect(),
        _ => vec![],
    }
}

fn escape_json(s: &str) -> String {
    let q = serde_json::to_string(s).unwrap_or_default();
    q.get(1..q.len().saturating_sub(1))
        .unwrap_or("")
        .to_string()
}

fn list<'a>(it: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = it.map(|s| s.as_str()).collect();
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}
