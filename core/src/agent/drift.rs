//! Context drift (§6.5): new context or a new intent from the user, and thread forks.

use serde_json::Value;

use super::negotiate::Turn;
use super::packets::blank_thread;
use super::permissions::Tier;
use super::thread::{Thread, ThreadState, Waiting};
use super::*;

use crate::crypto::thread_tag;
use crate::negotiator::{self};
use crate::packet::{self, Body, ContextBody, Escalation, Intent};

impl Agent {
    pub(super) fn on_thread_fork(&mut self, id: &str, f: crate::packet::ThreadForkBody) {
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
            t.theirs = parent.theirs.clone();
            t.theirs.extend(f.shared_context.clone());
            t.shared = parent.shared.clone();
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
            p.waiting = Waiting::Nothing;
        }
        self.shared.notify(
            Some(id.into()),
            NotifyKind::Info,
            format!("The thread was split into {} threads.", created.len()),
        );
    }

    pub(super) fn fork_thread(&mut self, id: &str, intents: Vec<Intent>) {
        let Some(parent) = self.threads.get(id).cloned() else {
            return;
        };
        if parent.state.is_terminal() || intents.is_empty() {
            return;
        }
        let mut children = Vec::new();
        for intent in intents.into_iter().take(8) {
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
            t.local = parent.local.clone();
            t.theirs = parent.theirs.clone();
            t.shared = parent.shared.clone();
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
            shared_context: parent.shared.clone(),
        });
        if matches!(
            self.in_thread(id, |step| step.send_packet(body)),
            Some(Ok(_))
        ) {
            if let Some(p) = self.threads.get_mut(id) {
                p.forked_into = children.iter().map(|c| c.thread_id.clone()).collect();
                p.waiting = Waiting::Nothing;
            }
            for c in children {
                self.in_thread(&c.thread_id, |step| step.send_first_packet());
            }
        }
    }
}

impl ThreadStep<'_> {
    pub(super) fn update_context(&mut self, context: Context) {
        let t = &mut *self.t;
        if t.state.is_terminal() {
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
                if self.shared.tier(&t.peer, k) != Tier::NeverShare && t.shared.get(k) != Some(v) {
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
    pub(super) fn take_resumed_turn(&mut self) {
        let t = &*self.t;
        if t.initiator {
            self.flush_reply();
        } else {
            self.evaluate(Turn::Free);
        }
    }

    /// The peer's user gave new context to a thread handed to the users (its resume
    /// marker): the thread leaves the users' hands on this side too, in a fresh round.
    pub(super) fn on_resume(&mut self) {
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

    pub(super) fn update_intent(&mut self, intent: Intent, reason: String) {
        let t = &mut *self.t;
        if t.state.is_terminal() {
            return;
        }
        let previous = std::mem::replace(&mut t.intent, intent.clone());
        self.shared.dirty.threads.insert(self.id.to_string());
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
        self.send_then_wait(body, vec![]);
    }
}

/// What `escalation.recommend` says in a resume marker (SPEC-NOTES "Negotiation").
pub(super) const RESUME_RECOMMEND: &str = "resume_negotiation";

/// The `reason` of a resume marker.
const RESUME_REASON: &str = "resumed_by_user";

/// Whether an escalation is the peer's resume marker: its user gave new context to a
/// thread handed to the users.
pub(super) fn is_resume_marker(e: &Escalation) -> bool {
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
