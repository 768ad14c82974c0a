//! This agent rotating its own identity key (SPEC-NOTES "Key rotation"): the statement, the
//! `rotate` frame, holding back what was sealed under the key the connection did not
//! authenticate with, and finishing (or retrying) the rotation after a restart.
//!
//! The runtime writes the new key durably *before* it hands it over
//! ([`Command::RotateKey`]) and keeps the old one until [`AgentEvent::OwnKeyRotated`]; a
//! restarted runtime hands both over again (the old as the identity, the new in the
//! command), and the agent finds out from its relay which of the two is registered.

use super::records::outbox_key;
use crate::agent::*;
use crate::link::{challenge_signed_bytes, ClientFrame, REGISTER_LABEL};
use crate::persist::PersistOp;
use crate::rotation::RotationStatement;

/// How many keys this agent rotated away from it keeps, while it runs, to open envelopes
/// peers sealed to them before they learnt a newer key (SPEC-NOTES "Key rotation").
pub(in crate::agent) const RETIRED_KEYS_KEPT: usize = 4;

/// A rotation of this agent's key under way: started, not yet confirmed by the relay.
#[derive(Debug, Clone)]
pub(in crate::agent) struct OwnRotation {
    /// The key the address leaves.
    pub(in crate::agent) old: IdentityKey,
    /// The key it takes.
    pub(in crate::agent) new: IdentityKey,
    /// The statement, signed by both.
    pub(in crate::agent) statement: RotationStatement,
    /// `rotate` went on the current connection (from then on new packets are sealed
    /// under the new key, and wait for a connection authenticated with it).
    pub(in crate::agent) sent: bool,
    /// This connection registers with the new key (the old one was `address_taken`:
    /// the relay installed the statement before this agent heard its answer).
    pub(in crate::agent) try_new: bool,
    /// `address_taken` answers since the relay last accepted one of the two keys: each
    /// makes the next `register` try the other key, and [`KEY_REFUSALS_KEPT_TRYING`] of
    /// them in a row refuse the address for good.
    pub(in crate::agent) refusals: u8,
}

/// How many `address_taken` in a row, alternating between the old and the new key, a
/// rotating agent takes before it stops registering (SPEC-NOTES "Key rotation"): both
/// keys refused twice. One refusal of the new key is not final: it may be a late or
/// repeated answer to the old key's `register`, the relay answering each with a fresh
/// challenge but not naming the `register` it refuses.
pub(in crate::agent) const KEY_REFUSALS_KEPT_TRYING: u8 = 4;

impl Agent {
    /// [`Command::RotateKey`]: starts moving this agent's address to `new`.
    pub(in crate::agent) fn rotate_key(&mut self, new: IdentityKey) {
        let new_pub = new.public_ref().to_bytes();
        let current = self.shared.identity.public_ref().to_bytes();
        // A rotation under way is given its own key again (a restarted runtime); another
        // key waits for it to end: the runtime keeps one `identity.next.key`, and a second
        // statement would start from a key the relay may never install.
        if self.shared.rotating.is_some() {
            return;
        }
        // Finished before the runtime learnt it (the statement is this agent's record):
        // take the new key at once.
        if let Some(r) = self.shared.meta.rotation.as_deref() {
            if r.new_key == new_pub && r.old_key == current {
                let seq = r.seq;
                self.shared.identity = new;
                self.shared.audit(None, AgentEvent::OwnKeyRotated { seq });
                return;
            }
        }
        if new_pub == current {
            return;
        }
        let seq = self.shared.meta.rotation.as_ref().map_or(0, |r| r.seq) + 1;
        let old = self.shared.identity.clone();
        let statement = RotationStatement::sign(&self.shared.config.address, &old, &new, seq);
        self.shared.rotating = Some(OwnRotation {
            old,
            new,
            statement,
            sent: false,
            try_new: false,
            refusals: 0,
        });
        self.shared.maybe_send_rotate();
    }

    /// `rotated`: the relay installed the statement (the connection closes after it).
    pub(in crate::agent) fn on_rotated(&mut self, seq: u64) {
        if self
            .shared
            .rotating
            .as_ref()
            .is_some_and(|r| r.statement.seq == seq)
        {
            self.shared.finish_rotation();
            self.rotation_notice_due();
            self.shared.buf.close.push(Output::CloseConnection);
            // Down as for any lost connection: what waited on this one (a lookup's
            // answer, a paced frame) is asked again on the next.
            self.shared.on_disconnected();
        }
    }

    /// After a rotation every open thread sends its `thread_state` on the next
    /// authentication, even with nothing new: it carries the statement to the peer. The
    /// cleared mark is persisted with the rotation, so a process killed before that
    /// authentication still sends the notices after its restart.
    pub(in crate::agent) fn rotation_notice_due(&mut self) {
        for t in self.threads.values_mut() {
            if !t.state.is_terminal() {
                t.summarised = None;
                self.shared.dirty.threads.insert(t.id.clone());
            }
        }
    }
}

impl Shared {
    /// The key to register with on this connection, and remembers it as the connection's.
    pub(in crate::agent) fn register_frame(
        &mut self,
        nonce: &[u8; 32],
        domain: &str,
        ts: u64,
    ) -> ClientFrame {
        let id = match &self.rotating {
            Some(r) if r.try_new => &r.new,
            Some(r) => &r.old,
            None => &self.identity,
        };
        let key = id.public_ref().to_bytes();
        let msg = challenge_signed_bytes(
            REGISTER_LABEL,
            nonce,
            domain,
            ts,
            &self.config.address,
            Some(&key),
        );
        let sig = id.sign(&msg);
        self.link_key = Some(key);
        ClientFrame::Register {
            address: self.config.address.clone(),
            key,
            ts,
            sig,
        }
    }

    /// `address_taken` while registering: with a rotation under way the relay may hold
    /// either key (the new one once it installed the statement); the next challenge
    /// tries the other. `true` when that is what happens (not a refusal for good).
    pub(in crate::agent) fn retry_with_other_key(&mut self) -> bool {
        match self.rotating.as_mut() {
            Some(r) if r.refusals < KEY_REFUSALS_KEPT_TRYING - 1 => {
                r.refusals += 1;
                r.try_new = !r.try_new;
                true
            }
            _ => false,
        }
    }

    /// `auth_ok`: registered with the new key means the relay installed the statement
    /// (`true`: the rotation finished now).
    pub(in crate::agent) fn rotation_on_ready(&mut self) -> bool {
        let Some(r) = self.rotating.as_mut() else {
            return false;
        };
        r.refusals = 0;
        if self.link_key == Some(r.statement.new_key) {
            self.finish_rotation();
            return true;
        } else {
            r.sent = false;
            r.try_new = false;
        }
        false
    }

    /// Sends `rotate` once the connection is up and nothing sealed under its key waits
    /// in the outbox (so nothing of the old key is sent after the relay dropped it).
    pub(in crate::agent) fn maybe_send_rotate(&mut self) {
        if self.link != Link::Ready {
            return;
        }
        let Some(key) = self.link_key else {
            return;
        };
        if self.outbox.values().any(|o| o.env.from_key == key) {
            return;
        }
        let Some(r) = self.rotating.as_mut().filter(|r| !r.sent) else {
            return;
        };
        if r.statement.old_key != key {
            return;
        }
        r.sent = true;
        let frame = ClientFrame::Rotate {
            statement: r.statement.clone(),
        };
        self.identity = r.new.clone();
        let old = r.old.clone();
        self.retire_identity(old);
        self.buf.send.push(Output::Send(frame.to_bytes()));
    }

    /// The relay refused the statement: the old key stays; what was sealed under the new
    /// one meanwhile cannot go and is dropped (its threads are told).
    pub(in crate::agent) fn rotation_refused(&mut self, message: String) {
        let Some(r) = self.rotating.take() else {
            return;
        };
        self.identity = r.old.clone();
        let old_pub = r.old.public_ref().to_bytes();
        self.retired_identities
            .retain(|k| k.public_ref().to_bytes() != old_pub);
        let stranded: Vec<u64> = self
            .outbox
            .values()
            .filter(|o| o.env.from_key == r.statement.new_key)
            .map(|o| o.seq)
            .collect();
        for seq in stranded {
            if let Some(o) = self.outbox.remove(&seq) {
                self.dirty.ops.push(PersistOp::Delete {
                    key: outbox_key(seq),
                });
                self.notify(
                    Some(o.thread_id),
                    NotifyKind::Delivery,
                    "A packet sealed under the refused new key was not sent.".to_string(),
                );
            }
        }
        self.audit(
            None,
            AgentEvent::OwnRotationRefused {
                message: message.clone(),
            },
        );
        self.notify(
            None,
            NotifyKind::Security,
            format!("The relay refused to rotate this agent's key; the old key stays: {message}"),
        );
    }

    /// Keeps `old` to open what peers still seal to it: the last [`RETIRED_KEYS_KEPT`]
    /// retired keys, so a peer that missed several rotations in a row is still read.
    fn retire_identity(&mut self, old: IdentityKey) {
        let pk = old.public_ref().to_bytes();
        if self
            .retired_identities
            .iter()
            .any(|k| k.public_ref().to_bytes() == pk)
        {
            return;
        }
        self.retired_identities.push(old);
        if self.retired_identities.len() > RETIRED_KEYS_KEPT {
            self.retired_identities.remove(0);
        }
    }

    fn finish_rotation(&mut self) {
        let Some(r) = self.rotating.take() else {
            return;
        };
        let seq = r.statement.seq;
        self.identity = r.new;
        self.retire_identity(r.old);
        self.meta.retired_keys = self
            .retired_identities
            .iter()
            .map(|k| super::records::RetiredKey { seed: k.seed() })
            .collect();
        let latest = self.meta.rotation.take();
        self.meta.earlier_rotations = chain_before(&self.meta.earlier_rotations, latest.as_deref());
        self.meta.rotation = Some(Box::new(r.statement));
        self.dirty.meta = true;
        self.audit(None, AgentEvent::OwnKeyRotated { seq });
        self.notify(
            None,
            NotifyKind::Info,
            "This agent's identity key was rotated; the agents it knows learn the new key from the statement its old key signed.".to_string(),
        );
    }

    /// The statements an envelope sealed under `from_key` carries: the one that moved
    /// this agent to it, and those before it, oldest first, at most
    /// [`crate::rotation::ROTATION_CHAIN_MAX`] in all (none for a key never rotated to).
    pub(in crate::agent) fn statements_for(
        &self,
        from_key: &[u8; 32],
    ) -> (Option<Box<RotationStatement>>, Vec<RotationStatement>) {
        let pending = self
            .rotating
            .as_ref()
            .filter(|r| &r.statement.new_key == from_key);
        if let Some(r) = pending {
            // Rotating away from the key of the last finished rotation: that one and
            // those before it come along.
            let before = chain_before(&self.meta.earlier_rotations, self.meta.rotation.as_deref());
            return (Some(Box::new(r.statement.clone())), before);
        }
        match self
            .meta
            .rotation
            .clone()
            .filter(|r| &r.new_key == from_key)
        {
            Some(r) => (Some(r), self.meta.earlier_rotations.clone()),
            None => (None, Vec::new()),
        }
    }
}

/// The statements that come before a new one on an envelope: `earlier` then `latest`,
/// oldest first, the last [`crate::rotation::ROTATION_CHAIN_MAX`] − 1 of them.
fn chain_before(
    earlier: &[RotationStatement],
    latest: Option<&RotationStatement>,
) -> Vec<RotationStatement> {
    let mut chain: Vec<RotationStatement> = earlier.iter().chain(latest).cloned().collect();
    let n = chain.len();
    chain.drain(..n.saturating_sub(crate::rotation::ROTATION_CHAIN_MAX - 1));
    chain
}
