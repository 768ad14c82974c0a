//! Context drift (§6.5): new context or a new intent from the user, and thread forks.

use serde_json::Value;

use std::collections::{BTreeMap, BTreeSet};

use crate::agent::permissions::Tier;
use crate::agent::thread::packets::blank_thread;
use crate::agent::thread::{PendingConsent, SiblingHold, Thread, ThreadState, Turn, Waiting};
use crate::agent::*;

use crate::crypto::thread_tag;
use crate::display;
use crate::negotiator::{self};
use crate::packet::{self, Body, ContextBody, Escalation, Intent, Need};

impl Agent {
    pub(in crate::agent) fn on_thread_fork(&mut self, id: &str, f: crate::packet::ThreadForkBody) {
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
            let session = new_session(&mut self.shared.meta.rng);
            self.shared.dirty.meta = true;
            let mut t = blank_thread(
                &child.thread_id,
                &parent.peer,
                false,
                child.intent,
                session,
                self.shared.now,
                &parent.coordinator,
            );
            t.parent = Some(id.to_string());
            t.theirs = inherited(&parent.theirs);
            t.theirs.extend(inherited(&f.shared_context));
            t.shared = inherited(&parent.shared);
            inherit_exchange(&mut t, &parent);
            t.scope_intent = parent.scope_intent.clone();
            t.state = ThreadState::Negotiating;
            self.shared.tags.insert(
                (parent.peer.clone(), thread_tag(&child.thread_id)),
                child.thread_id.clone(),
            );
            self.shared.dirty.threads.insert(child.thread_id.clone());
            created.push(child.thread_id.clone());
            self.threads.insert(child.thread_id.clone(), t);
        }
        if let Some(p) = self.threads.get_mut(id) {
            p.forked_into.extend(created.iter().cloned());
        }
        self.in_thread(id, |step| step.retire_split());
        self.shared.audit(
            Some(id),
            AgentEvent::Forked {
                by_peer: true,
                children: created.clone(),
            },
        );
        self.shared.notify(
            Some(id.into()),
            NotifyKind::Info,
            format!(
                "{} split the thread into {} threads: {}.",
                parent.peer,
                created.len(),
                self.fork_children_text(&created)
            ),
        );
    }

    pub(in crate::agent) fn fork_thread(&mut self, id: &str, intents: Vec<Intent>) {
        let Some(parent) = self.threads.get(id).cloned() else {
            return;
        };
        if !may_fork(&parent) || intents.is_empty() {
            return;
        }
        let max = self.shared.config.limits.max_fork_children.max(1) as usize;
        let mut children = Vec::new();
        for intent in intents.into_iter().take(max) {
            let cid = self.shared.meta.rng.id("thr_", 12);
            let session = new_session(&mut self.shared.meta.rng);
            let mut t = blank_thread(
                &cid,
                &parent.peer,
                true,
                intent.clone(),
                session,
                self.shared.now,
                &self.shared.config.address,
            );
            t.parent = Some(id.to_string());
            t.user_initiated = parent.user_initiated;
            t.local = inherited(&parent.local);
            t.theirs = inherited(&parent.theirs);
            t.shared = inherited(&parent.shared);
            inherit_exchange(&mut t, &parent);
            t.scope_intent = parent.scope_intent.clone();
            t.version = parent.version.clone();
            t.state = ThreadState::Negotiating;
            self.shared
                .tags
                .insert((parent.peer.clone(), thread_tag(&cid)), cid.clone());
            self.threads.insert(cid.clone(), t);
            self.shared.dirty.threads.insert(cid.clone());
            children.push(crate::packet::ForkedThread {
                thread_id: cid,
                intent,
            });
        }
        self.shared.dirty.meta = true;
        let body = Body::ThreadFork(crate::packet::ThreadForkBody {
            parent_thread_id: id.to_string(),
            new_threads: children.clone(),
            shared_context: inherited(&parent.shared),
        });
        if matches!(
            self.in_thread(id, |step| step.send_packet(body)),
            Some(Ok(_))
        ) {
            let ids: Vec<String> = children.iter().map(|c| c.thread_id.clone()).collect();
            if let Some(p) = self.threads.get_mut(id) {
                p.forked_into = ids.clone();
            }
            self.in_thread(id, |step| step.retire_split());
            self.shared.audit(
                Some(id),
                AgentEvent::Forked {
                    by_peer: false,
                    children: ids,
                },
            );
            for c in children {
                self.in_thread(&c.thread_id, |step| step.send_first_packet());
            }
        } else {
            // The fork did not leave: no child exists on either side.
            for c in children {
                self.threads.remove(&c.thread_id);
                self.shared
                    .tags
                    .remove(&(parent.peer.clone(), thread_tag(&c.thread_id)));
                self.shared.dirty.threads.insert(c.thread_id);
            }
        }
    }

    /// "thr_a (“Dinner …”), thr_b (“Games …”)" for a notification.
    fn fork_children_text(&self, ids: &[String]) -> String {
        ids.iter()
            .map(|c| {
                let summary = self
                    .threads
                    .get(c)
                    .map(|t| display::line(&t.intent.summary, display::MAX_SHORT).into_owned())
                    .unwrap_or_default();
                format!("{c} (“{summary}”)")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// After each input: every child of a fork learns what its siblings hold (§6.5), their
    /// proposed or confirmed slots, so it negotiates around them.
    pub(in crate::agent) fn step_forks(&mut self) {
        let mut families: BTreeMap<String, Vec<SiblingHold>> = BTreeMap::new();
        for (id, t) in &self.threads {
            let Some(parent) = &t.parent else { continue };
            let held = matches!(
                t.state,
                ThreadState::Proposed
                    | ThreadState::Confirmed
                    | ThreadState::Executing
                    | ThreadState::Completed
            );
            let hold = t.stage.resolution().filter(|_| held).and_then(|r| {
                negotiator::held_slot(&r.body.proposal.details).map(|slot| SiblingHold {
                    thread_id: id.clone(),
                    summary: r.body.proposal.summary.clone(),
                    slot,
                    confirmed: t.state != ThreadState::Proposed,
                })
            });
            let family = families.entry(parent.clone()).or_default();
            if let Some(h) = hold {
                family.push(h);
            }
        }
        let mut changed = Vec::new();
        for (id, t) in self.threads.iter_mut() {
            let Some(parent) = &t.parent else { continue };
            if t.state.is_terminal() {
                continue;
            }
            let holds: Vec<SiblingHold> = families
                .get(parent)
                .map(|f| f.iter().filter(|h| &h.thread_id != id).cloned().collect())
                .unwrap_or_default();
            if holds != t.sibling_holds {
                t.sibling_holds = holds;
                changed.push(id.clone());
            }
        }
        for id in changed {
            self.shared.dirty.threads.insert(id);
        }
    }
}

/// Whether thread `t` may be split: open, not halted, not split already, and with no
/// resolution open (§6.5 splits a negotiation; a proposal is answered or cancelled first).
pub fn may_fork(t: &Thread) -> bool {
    matches!(
        t.state,
        ThreadState::Initiated | ThreadState::Negotiating | ThreadState::Stalled
    ) && !t.halted
        && t.forked_into.is_empty()
        && t.group.is_none()
}

/// What a child of a fork knows of the parent's exchange: what the peer declined, and
/// what this side asked and got an answer to (with data or a decline), so neither is asked
/// again; a question still open in the parent is asked again in the child if it matters.
fn inherit_exchange(t: &mut Thread, parent: &Thread) {
    t.peer_unavailable = parent.peer_unavailable.clone();
    t.asked = parent
        .asked
        .iter()
        .filter(|f| parent.theirs.contains_key(*f) || parent.peer_unavailable.contains(*f))
        .cloned()
        .collect();
}

/// What a child of a fork inherits of its parent's context: everything but the parent's
/// `event_type` — each child's own intent says what it is about ("Game night venue/setup
/// for Friday 21:00" is not a dinner), and the §6.3 markers of the parent's round.
fn inherited(c: &Context) -> Context {
    c.iter()
        .filter(|(k, _)| !["event_type", "conflict", "proposed_alternatives"].contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

impl ThreadStep<'_> {
    /// A thread split into children (§6.5) takes no further part: its open prompts are
    /// withdrawn, it waits for nothing, and what still arrives for it is not acted on —
    /// its children carry the negotiation on (SPEC-NOTES "Drift and forks").
    pub(in crate::agent) fn retire_split(&mut self) {
        self.close_prompts();
        self.t.consent = None;
        self.set_waiting(Waiting::Nothing);
        self.mark_changed();
    }

    pub(in crate::agent) fn update_context(&mut self, context: Context) {
        let t = &mut *self.t;
        if t.state.is_terminal() || !t.forked_into.is_empty() {
            return;
        }
        let was_escalated = t.escalated;
        for (k, v) in &context {
            t.local.insert(k.clone(), v.clone());
        }
        start_fresh_round(t);
        forget_rejected(t, &context);
        self.shared.dirty.threads.insert(self.id.to_string());
        if t.state == ThreadState::Stalled {
            self.set_state(ThreadState::Negotiating, "resumed by the user");
        }
        // Share the update, then let the negotiator continue.
        let ctx = {
            let t = &*self.t;
            let mut c = Context::new();
            for (k, v) in &t.local {
                if self.shared.thread_tier(t, k) != Tier::NeverShare && t.shared.get(k) != Some(v) {
                    c.insert(k.clone(), v.clone());
                }
            }
            c
        };
        if was_escalated {
            // Handed to the users, the peer's side waits for its user too: the resume
            // marker tells it this user answered, and it leaves its user's hands as well.
            // Then, as when a thread starts, the responder's agent decides with both
            // sides' values and the initiator's answers, so exactly one side drives the
            // new round whichever user resumed (SPEC-NOTES "Negotiation", resuming an
            // escalated thread).
            let sent = self.send_packet(Body::Context(ContextBody {
                context: ctx,
                escalation: Some(Escalation {
                    recommend: RESUME_RECOMMEND.into(),
                    reason: RESUME_REASON.into(),
                    suggested_prompt: None,
                }),
                ..Default::default()
            }));
            if sent.is_ok() {
                self.audit(AgentEvent::Resumed { by_peer: false });
                self.take_resumed_turn();
                return;
            }
        } else if !ctx.is_empty() {
            let _ = self.send_packet(Body::Context(ContextBody {
                context: ctx,
                ..Default::default()
            }));
        }
        self.evaluate(Turn::Free);
    }

    /// After a resume marker (sent or received), the turn of this side: the responder's
    /// agent decides, the initiator's answers what it owes and waits for it.
    pub(in crate::agent) fn take_resumed_turn(&mut self) {
        let t = &*self.t;
        if t.initiator {
            self.flush_reply();
        } else {
            self.evaluate(Turn::Free);
        }
    }

    /// The peer's user gave new context to a thread handed to the users (its resume
    /// marker): the thread leaves the users' hands on this side too, in a fresh round.
    pub(in crate::agent) fn on_resume(&mut self) {
        let t = &mut *self.t;
        if t.state.is_terminal() || t.halted || !t.escalated {
            return;
        }
        start_fresh_round(t);
        self.shared.dirty.threads.insert(self.id.to_string());
        if t.state == ThreadState::Stalled {
            self.set_state(ThreadState::Negotiating, "resumed by the peer's user");
        }
        self.set_waiting(Waiting::Nothing);
        self.notify(
            NotifyKind::Info,
            "The other person gave new context: negotiating again".into(),
        );
        self.audit(AgentEvent::Resumed { by_peer: true });
    }

    /// The user changed the thread's intent (§6.5): the peer is told, with what the new
    /// intent needs of it; what the new intent's tiers would share that the old one's did
    /// not is put to the user before it leaves.
    pub(in crate::agent) fn update_intent(
        &mut self,
        mut intent: Intent,
        reason: String,
        extra: Vec<Need>,
    ) {
        let t = &*self.t;
        if t.state.is_terminal() || t.halted || !t.forked_into.is_empty() {
            return;
        }
        let mut seen = BTreeSet::new();
        let needs: Vec<Need> = negotiator::initial_needs(&intent, &Context::new())
            .into_iter()
            .chain(extra)
            .filter(|n| {
                !t.asked.contains(&n.field)
                    && !t.theirs.contains_key(&n.field)
                    && display::is_clean(&n.field, display::MAX_FIELD_NAME)
                    && seen.insert(n.field.clone())
            })
            .take(packet::MAX_NEEDS_PER_PACKET)
            .collect();
        let before = t.scope_intent.clone().unwrap_or_else(|| t.intent.clone());
        let expanded = self.expanded_scope(&before, &intent);
        if intent.scope_change.is_none() {
            let grows = !needs.is_empty() || !expanded.is_empty();
            intent.scope_change = Some(if grows { "expanded" } else { "changed" }.into());
        }
        let t = &mut *self.t;
        let previous = std::mem::replace(&mut t.intent, intent.clone());
        t.scope_intent.get_or_insert(previous.clone());
        for n in &needs {
            t.asked.insert(n.field.clone());
        }
        self.mark_changed();
        self.audit(AgentEvent::IntentUpdated {
            by_peer: false,
            summary: intent.summary.clone(),
            scope_change: intent.scope_change.clone(),
            expanded: expanded.clone(),
        });
        let body = Body::IntentUpdate(crate::packet::IntentUpdateBody {
            previous_intent: Some(previous),
            updated_intent: intent,
            reason,
            additional_context_needed: needs,
        });
        self.send_then_wait(body, vec![]);
        self.offer(&before, expanded);
    }

    /// The peer changed the thread's intent (§6.5): the user is told; this side's tiers
    /// are those of the new intent from now on (what they would share that the old
    /// intent's did not is offered to the user, not shared), and the new needs go through
    /// them like any need.
    pub(in crate::agent) fn on_intent_update(&mut self, b: crate::packet::IntentUpdateBody) {
        let t = &*self.t;
        if t.state.is_terminal() {
            return;
        }
        let before = t.scope_intent.clone().unwrap_or_else(|| t.intent.clone());
        let expanded = self.expanded_scope(&before, &b.updated_intent);
        let t = &mut *self.t;
        let previous = std::mem::replace(&mut t.intent, b.updated_intent.clone());
        t.scope_intent.get_or_insert(previous.clone());
        let peer = t.peer.clone();
        self.mark_changed();
        let scope = b.updated_intent.scope_change.clone();
        self.audit(AgentEvent::IntentUpdated {
            by_peer: true,
            summary: b.updated_intent.summary.clone(),
            scope_change: scope.clone(),
            expanded: expanded.clone(),
        });
        let reason = display::line(&b.reason, display::MAX_SHORT);
        self.notify(
            NotifyKind::Info,
            format!(
                "{peer} changed the thread from “{}” to “{}”{}{}",
                display::line(&previous.summary, display::MAX_SHORT),
                display::line(&b.updated_intent.summary, display::MAX_SHORT),
                match scope.as_deref() {
                    Some("expanded") => " (its scope expanded)",
                    Some("narrowed") => " (its scope narrowed)",
                    _ => "",
                },
                if reason.trim().is_empty() {
                    ".".to_string()
                } else {
                    format!(": {reason}")
                }
            ),
        );
        self.take_needs(&b.additional_context_needed);
        self.offer(&before, expanded);
        self.evaluate(Turn::AnsweringRequest);
    }

    /// Fields of this user the thread's tiers under `after` would share without asking
    /// while those under `before` would not, and not shared yet: the expanded scope of an
    /// intent update.
    fn expanded_scope(&self, before: &Intent, after: &Intent) -> Vec<String> {
        let t = &*self.t;
        let mut out = BTreeSet::new();
        for k in self.shared.config.profile.keys().chain(t.local.keys()) {
            if t.shared.contains_key(k) || t.answered.contains(k) || negotiator::is_meta_field(k) {
                continue;
            }
            if self.shared.tier_in(&t.peer, after, k) == Tier::AlwaysShare
                && self.shared.tier_in(&t.peer, before, k) != Tier::AlwaysShare
            {
                out.insert(k.clone());
            }
        }
        out.into_iter().collect()
    }

    /// Puts `fields` (an intent update's expanded scope) to the user in the thread's
    /// consent prompt, before they leave: shared if the user says so, not sent as declines
    /// otherwise (the peer did not ask).
    fn offer(&mut self, before: &Intent, fields: Vec<String>) {
        if fields.is_empty() {
            return;
        }
        let t = &mut *self.t;
        let reason = format!(
            "“{}” would share it (“{}” did not)",
            display::line(&t.intent.summary, display::MAX_SHORT),
            display::line(&before.summary, display::MAX_SHORT)
        );
        let c = t.consent.get_or_insert_with(|| PendingConsent {
            prompt_id: 0,
            ask: Vec::new(),
            share: Context::new(),
            decline: Vec::new(),
            offered: BTreeSet::new(),
        });
        let mut added = false;
        for f in fields {
            if c.ask.iter().any(|n| n.field == f) || c.share.contains_key(&f) {
                continue;
            }
            added = true;
            c.offered.insert(f.clone());
            t.answered.insert(f.clone());
            c.ask.push(Need {
                field: f,
                reason: reason.clone(),
                priority: packet::Priority::Helpful,
            });
        }
        let open = c.prompt_id;
        if !added {
            return;
        }
        self.mark_changed();
        if open != 0 {
            self.show_consent_prompt();
            return;
        }
        let pid = self.shared.next_prompt_id();
        if let Some(c) = self.t.consent.as_mut() {
            c.prompt_id = pid;
        }
        self.set_waiting(Waiting::User);
        self.show_consent_prompt();
    }
}

/// What `escalation.recommend` says in a resume marker (SPEC-NOTES "Negotiation").
pub(in crate::agent) const RESUME_RECOMMEND: &str = "resume_negotiation";

/// The `reason` of a resume marker.
const RESUME_REASON: &str = "resumed_by_user";

/// Whether an escalation is the peer's resume marker: its user gave new context to a
/// thread handed to the users.
pub(in crate::agent) fn is_resume_marker(e: &Escalation) -> bool {
    e.recommend == RESUME_RECOMMEND
}

/// A fresh round after new context from a user (this side's or, by its resume marker,
/// the peer's): out of the users' hands, the round-trip count restarted and the §6.3
/// markers of the earlier round dropped.
fn start_fresh_round(t: &mut Thread) {
    t.escalated = false;
    t.no_overlap_sent = false;
    for k in ["conflict", "proposed_alternatives"] {
        t.shared.remove(k);
        t.theirs.remove(k);
    }
    t.round_trips = 0;
}

/// The user's new context changes the picture, so this side forgets the proposals
/// rejected so far — except places ruled out by a different-place answer: the user
/// answering "which place?" names another one, and the place asked to change must not
/// come back first (unless the user names it again). The peer's side keeps its own: its
/// user changed nothing.
fn forget_rejected(t: &mut Thread, context: &Context) {
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
    t.rejected.retain(|r| {
        r.reason == negotiator::DIFFERENT_PLACE
            && ["location", "venue"].iter().all(|k| {
                r.details
                    .get(*k)
                    .and_then(Value::as_str)
                    .is_none_or(|p| !named.contains(&p.trim().to_lowercase()))
            })
    });
}
