//! Taking it back (§11.3; SPEC-NOTES "Retraction"): the user takes back values their
//! agent shared in a thread; the other agent deletes them from the thread (its values and
//! the packets it keeps) and from its relationship memory, never takes them in again in
//! that thread, and answers with a signed acknowledgement. A peer that does not answer in
//! time is reported to the user by name: nothing pretends the values were deleted.
//!
//! The retracting side also stops sharing them: the fields count as answered in the
//! thread (never shared again unasked), and its own copies of the packets that carried
//! them lose them, so a re-send after a gap (§13.1) cannot carry them again.

use std::time::Duration;

use serde_json::Value;

use crate::agent::thread::{history_key, PendingRetraction, Turn, Waiting, MAX_RETRACTIONS};
use crate::agent::*;
use crate::display;
use crate::packet::{Body, RetractionAckBody, RetractionBody};
use crate::persist::PersistOp;
use crate::receipt::retraction::{
    ack_bytes, record_key, Acknowledgement, Retraction, RETRACTION_VERSION,
};

/// How long the other agent has to acknowledge a retraction before the user is told.
pub(in crate::agent) const RETRACTION_ACK_TIMEOUT: Duration = Duration::from_secs(86_400);

/// The packet members that carry shared values.
const VALUE_MEMBERS: [&str; 2] = ["context", "context_provided"];

impl Agent {
    /// `Command::Retract`: checks what can be taken back, then asks the peer.
    pub(in crate::agent) fn retract(&mut self, thread_id: &str, fields: Vec<String>) {
        let refuse = |a: &mut Agent, text: String| {
            a.shared
                .notify(Some(thread_id.to_string()), NotifyKind::Info, text);
        };
        let Some(t) = self.threads.get(thread_id) else {
            refuse(
                self,
                format!("No thread {thread_id} to take anything back from."),
            );
            return;
        };
        let fields = if fields.is_empty() {
            t.shared.keys().cloned().collect::<Vec<_>>()
        } else {
            fields
        };
        let mut unknown: Vec<&String> = fields
            .iter()
            .filter(|f| !t.shared.contains_key(*f))
            .collect();
        unknown.dedup();
        if fields.is_empty() || !unknown.is_empty() {
            let names: Vec<&str> = unknown.iter().map(|f| f.as_str()).collect();
            let text = if fields.is_empty() {
                "Nothing was shared in this thread: nothing to take back.".to_string()
            } else {
                format!(
                    "Not shared in this thread, so nothing to take back: {}.",
                    display::line(&names.join(", "), display::MAX_SHORT)
                )
            };
            refuse(self, text);
            return;
        }
        if t.halted || t.session.is_erased() {
            let why = if t.halted {
                "its other agent's key changed and is not accepted yet"
            } else {
                "its keys were erased a week after it ended (forward secrecy)"
            };
            refuse(
                self,
                format!("This thread cannot reach {} any more: {why}.", t.peer),
            );
            return;
        }
        let mut fields = fields;
        fields.sort();
        fields.dedup();
        // One retraction names at most MAX_RETRACTED_FIELDS: more go in several.
        for chunk in fields.chunks(crate::packet::MAX_RETRACTED_FIELDS) {
            let chunk = chunk.to_vec();
            self.in_thread(thread_id, |step| step.send_retraction(chunk));
        }
    }
}

/// Why the peer's values are deleted here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::agent) enum Deleted {
    /// The peer took them back: never taken in again in the thread.
    TakenBack,
    /// Their usage rule expired: taken in again if the peer shares them anew.
    Expired,
}

impl ThreadStep<'_> {
    fn send_retraction(&mut self, fields: Vec<String>) {
        let Ok(rid) = self.send_packet(Body::Retraction(RetractionBody {
            fields: fields.clone(),
        })) else {
            self.notify(
                NotifyKind::Info,
                "The request to delete could not be sent; nothing was taken back.".into(),
            );
            return;
        };
        let now = self.shared.now;
        let t = &mut *self.t;
        for f in &fields {
            t.shared.remove(f);
            t.answered.insert(f.clone());
        }
        if t.retractions.len() >= MAX_RETRACTIONS {
            let drop = t
                .retractions
                .iter()
                .position(|r| r.acknowledged)
                .unwrap_or(0);
            t.retractions.remove(drop);
        }
        t.retractions.push(PendingRetraction {
            retraction_id: rid.clone(),
            fields: fields.clone(),
            asked_at: now,
            acknowledged: false,
            told: false,
        });
        self.scrub_history(&fields, true);
        let peer = self.t.peer.clone();
        let record = Retraction {
            version: RETRACTION_VERSION,
            thread_id: self.id.to_string(),
            retraction_id: rid,
            agent: self.shared.config.address.clone(),
            peer: peer.clone(),
            fields: fields.clone(),
            asked_at: now.to_rfc3339(),
            ack: None,
        };
        self.store_retraction(&record);
        self.mark_changed();
        self.audit(AgentEvent::RetractionSent {
            peer: peer.clone(),
            fields: fields.clone(),
        });
        self.notify(
            NotifyKind::Info,
            format!(
                "Asked {peer} to delete {}. You will be told when it confirms, or if it does not.",
                display::line(&fields.join(", "), display::MAX_SHORT)
            ),
        );
    }

    fn store_retraction(&mut self, r: &Retraction) {
        self.shared.dirty.ops.push(PersistOp::Put {
            key: record_key(&r.thread_id, &r.retraction_id),
            value: serde_json::to_vec(r).unwrap_or_default(),
        });
    }

    /// Removes `fields` from the values of this thread's packets kept in its history
    /// (this agent's own when `outgoing`, else the peer's), stored ones rewritten.
    fn scrub_history(&mut self, fields: &[String], outgoing: bool) {
        let stored = self.shared.hist_stored.get(self.id).copied().unwrap_or(0);
        let mut rewrite = Vec::new();
        for (i, h) in self.t.history.iter_mut().enumerate() {
            if h.outgoing != outgoing {
                continue;
            }
            let Ok(mut v) = serde_json::from_str::<Value>(&h.json) else {
                continue;
            };
            let mut changed = false;
            for m in VALUE_MEMBERS {
                if let Some(Value::Object(ctx)) = v.get_mut(m) {
                    for f in fields {
                        changed |= ctx.remove(f).is_some();
                    }
                }
            }
            if changed {
                h.json = v.to_string();
                if i < stored {
                    rewrite.push((i, serde_json::to_vec(&*h).unwrap_or_default()));
                }
            }
        }
        for (i, value) in rewrite {
            self.shared.dirty.ops.push(PersistOp::Put {
                key: history_key(self.id, i),
                value,
            });
        }
    }

    /// Deletes `fields` the peer shared, taken back or expired (`why`): from the thread's
    /// values, the packets of the peer it keeps, and relationship memory.
    pub(in crate::agent) fn delete_theirs(&mut self, fields: &[String], why: Deleted) {
        let peer = self.t.peer.clone();
        let t = &mut *self.t;
        for f in fields {
            t.theirs.remove(f);
            t.usage.remove(f);
            match why {
                Deleted::TakenBack => t.retracted.insert(f.clone()),
                Deleted::Expired => t.expired.insert(f.clone()),
            };
        }
        // The model, if asked about the thread, was shown the values: its answer is not
        // acted on, it is asked again about the thread without them (a proposal built
        // from a taken-back place went out; swarm --consent, seed 834).
        if let Some(l) = t.llm.as_mut() {
            l.stale = true;
        }
        self.scrub_history(fields, false);
        for f in fields {
            self.shared.forget_field(&peer, f);
        }
        self.mark_changed();
    }

    /// After values were deleted in a negotiation that was this agent's to carry on, it
    /// goes on without them (asking, proposing or handing it to the user), so neither side
    /// is left waiting for the other.
    pub(in crate::agent) fn go_on_without(&mut self) {
        let t = &*self.t;
        if matches!(t.state, ThreadState::Initiated | ThreadState::Negotiating)
            && t.waiting == Waiting::Nothing
            && !t.halted
        {
            self.evaluate(Turn::Free);
        }
    }

    /// The peer takes back `b.fields`: deleted from the thread, its kept packets and
    /// relationship memory; acknowledged, signed.
    pub(in crate::agent) fn on_retraction(&mut self, packet_id: &str, b: RetractionBody) {
        let peer = self.t.peer.clone();
        self.delete_theirs(&b.fields, Deleted::TakenBack);
        let me = self.shared.config.address.clone();
        let signature = self
            .shared
            .identity
            .sign(&ack_bytes(&me, self.id, packet_id, &b.fields));
        let _ = self.send_packet(Body::RetractionAck(RetractionAckBody {
            retraction_id: packet_id.to_string(),
            fields: b.fields.clone(),
            signature,
        }));
        self.audit(AgentEvent::RetractionHonoured {
            peer: peer.clone(),
            fields: b.fields.clone(),
        });
        let names: Vec<String> = b
            .fields
            .iter()
            .map(|f| display::line(f, display::MAX_FIELD_NAME).into_owned())
            .collect();
        self.notify(
            NotifyKind::Memory,
            format!(
                "{peer} took back {}: deleted from this thread and from what your agent remembers of them.",
                display::line(&names.join(", "), display::MAX_SHORT)
            ),
        );
        self.go_on_without();
    }

    /// The peer acknowledged a retraction: verified against its key, kept, told.
    pub(in crate::agent) fn on_retraction_ack(&mut self, b: RetractionAckBody) {
        let peer = self.t.peer.clone();
        let refuse = |step: &mut Self, why: &str| {
            step.audit(AgentEvent::RetractionAckRefused {
                peer: step.t.peer.clone(),
                why: why.to_string(),
            });
        };
        let Some(mut want) = self
            .t
            .retractions
            .iter()
            .find(|r| r.retraction_id == b.retraction_id)
            .map(|r| r.fields.clone())
        else {
            refuse(self, "it answers no retraction of this thread");
            return;
        };
        let mut got = b.fields.clone();
        want.sort();
        got.sort();
        if want != got {
            refuse(self, "it names other fields than the retraction");
            return;
        }
        let msg = ack_bytes(&peer, self.id, &b.retraction_id, &b.fields);
        let Some(key) = self.shared.peer_key_that_signed(&peer, &msg, &b.signature) else {
            refuse(self, "its signature does not verify");
            return;
        };
        let Some(r) = self
            .t
            .retractions
            .iter_mut()
            .find(|r| r.retraction_id == b.retraction_id)
        else {
            return;
        };
        if r.acknowledged {
            return;
        }
        r.acknowledged = true;
        let asked_at = r.asked_at;
        let record = Retraction {
            version: RETRACTION_VERSION,
            thread_id: self.id.to_string(),
            retraction_id: b.retraction_id.clone(),
            agent: self.shared.config.address.clone(),
            peer: peer.clone(),
            fields: want.clone(),
            asked_at: asked_at.to_rfc3339(),
            ack: Some(Acknowledgement {
                key,
                sig: b.signature,
                at: self.shared.now.to_rfc3339(),
            }),
        };
        self.store_retraction(&record);
        self.mark_changed();
        self.audit(AgentEvent::RetractionAcknowledged {
            peer: peer.clone(),
            fields: want.clone(),
        });
        self.notify(
            NotifyKind::Info,
            format!(
                "{peer} confirmed, signed, that it deleted {}.",
                display::line(&want.join(", "), display::MAX_SHORT)
            ),
        );
    }

    /// Retractions past their deadline without an acknowledgement: the user is told,
    /// once each.
    pub(in crate::agent) fn retraction_timeouts(&mut self) {
        let now = self.shared.now;
        let peer = self.t.peer.clone();
        let mut due = Vec::new();
        for r in self.t.retractions.iter_mut() {
            if !r.acknowledged && !r.told && r.asked_at.add(RETRACTION_ACK_TIMEOUT) <= now {
                r.told = true;
                due.push(r.fields.clone());
            }
        }
        if due.is_empty() {
            return;
        }
        self.mark_changed();
        for fields in due {
            self.audit(AgentEvent::RetractionUnacknowledged {
                peer: peer.clone(),
                fields: fields.clone(),
            });
            self.notify(
                NotifyKind::Security,
                format!(
                    "{peer} has not confirmed that it deleted {} (asked a day ago). Nothing says it did.",
                    display::line(&fields.join(", "), display::MAX_SHORT)
                ),
            );
        }
    }
}

/// The earliest retraction deadline of thread `t` still to tell the user about.
pub(in crate::agent) fn retraction_deadline(t: &crate::agent::Thread) -> Option<Timestamp> {
    t.retractions
        .iter()
        .filter(|r| !r.acknowledged && !r.told)
        .map(|r| r.asked_at.add(RETRACTION_ACK_TIMEOUT))
        .min()
}
