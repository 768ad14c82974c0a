//! Context drift (§6.5): new context or a new intent from the user, and thread forks.

use serde_json::Value;

use super::negotiate::Turn;
use super::packets::blank_thread;
use super::permissions::Tier;
use super::thread::{ThreadState, Waiting};
use super::*;

use crate::crypto::thread_tag;
use crate::negotiator::{self};
use crate::packet::{self, Body, ContextBody, Intent};

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

    pub(super) fn fork_thread(&mut self, id: &str, intents: Vec<Intent>) {
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

    pub(super) fn update_context(&mut self, id: &str, context: Context) {
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

    pub(super) fn update_intent(&mut self, id: &str, intent: Intent, reason: String) {
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
}
