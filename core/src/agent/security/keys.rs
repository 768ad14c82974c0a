//! Peer keys (§16): pinning on first contact, key changes and the user accepting a new key,
//! and the packets that wait for a peer's key ([`PendingPlain`]).

use serde::{Deserialize, Serialize};

use crate::agent::thread::{ThreadState, Waiting};
use crate::agent::*;

use crate::packet::{Body, ResolutionResponseBody, ResolutionStatus};
use crate::rotation::RotationStatement;

/// How many envelopes under a changed key a peer record holds until the user decides:
/// a new thread's first packets (a recovered agent's), not a queue a peer can grow.
pub(in crate::agent) const MAX_HELD_FOR_KEY: usize = 16;

impl Agent {
    pub(in crate::agent) fn accept_key_change(&mut self, peer: &Address) {
        let Some(rec) = self.shared.peers.get_mut(peer) else {
            return;
        };
        let Some(new) = rec.changed_key.take() else {
            return;
        };
        let Ok(pk) = PublicKey::from_bytes(&new) else {
            return;
        };
        rec.key = Some(new);
        let held = std::mem::take(&mut rec.held_for_key);
        self.shared.keys.insert(peer.clone(), pk);
        self.shared.dirty.peers.insert(peer.clone());
        self.shared
            .audit(None, AgentEvent::KeyAccepted { peer: peer.clone() });
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
            self.shared.dirty.threads.insert(id.clone());
            if t.stage.execution().is_some() {
                self.in_thread(&id, |step| step.send_thread_state());
                continue;
            }
            let rid = t.stage.resolution().map(|r| r.packet_id.clone());
            let _ = self.in_thread(&id, |step| step.send_packet(Body::ResolutionResponse(ResolutionResponseBody {
                    resolution_id: rid,
                    status: ResolutionStatus::Declined,
                    reason_class: Some("user_declined".into()),
                    message_to_other_agent: Some(
                        "Your agent's identity key changed; my user accepted the new key. Let's start this one again."
                            .into(),
                    ),
                    alternative: None,
                    signature: None,
                    confirmations: Vec::new(),
                })));
            self.in_thread(&id, |step| step.close_prompts());
            self.in_thread(&id, |step| {
                step.set_state(ThreadState::Declined, "halted after a key change")
            });
        }
        // What the peer sent under the new key meanwhile (a recovered agent's first
        // packet) is handled now, in the order it came; under another key, dropped.
        for env in held {
            if env.from_key == new {
                self.on_envelope(env);
            }
        }
    }

    /// Keeps an envelope under a changed key until the user decides (at most
    /// [`MAX_HELD_FOR_KEY`]; one already held is not held twice).
    pub(in crate::agent) fn hold_for_key(&mut self, peer: &Address, env: crate::crypto::Envelope) {
        let Some(rec) = self.shared.peers.get_mut(peer) else {
            return;
        };
        if rec.changed_key != Some(env.from_key)
            || rec.held_for_key.len() >= MAX_HELD_FOR_KEY
            || rec.held_for_key.iter().any(|h| h.sig == env.sig)
        {
            return;
        }
        rec.held_for_key.push(env);
        self.shared.dirty.peers.insert(peer.clone());
    }

    pub(in crate::agent) fn on_key(
        &mut self,
        address: Address,
        key: Option<[u8; 32]>,
        rotation: Option<&RotationStatement>,
    ) {
        // The relay's answer carries the statement that installed the key: a peer that
        // pinned its old key re-pins (it may have missed every envelope carrying it).
        if let Some(r) = rotation.filter(|r| Some(r.new_key) == key) {
            let pinned = self.shared.peers.get(&address).and_then(|p| p.key);
            if pinned.is_some_and(|k| k != r.new_key) {
                self.peer_rotated(&address, r, true);
            }
        }
        let Some(rec) = self.shared.peers.get_mut(&address) else {
            return;
        };
        rec.lookup_sent = false;
        let pending = std::mem::take(&mut rec.pending);
        self.shared.dirty.peers.insert(address.clone());
        let Some(key) = key else {
            let mut ids: Vec<String> = pending.iter().map(|p| p.thread_id.clone()).collect();
            ids.dedup();
            if ids.is_empty() {
                self.shared.notify(
                    None,
                    NotifyKind::Delivery,
                    format!("No agent is registered as {address}."),
                );
            }
            for id in ids {
                if self.is_space_id(&id) {
                    self.shared.notify(
                        None,
                        NotifyKind::Delivery,
                        format!(
                            "No agent is registered as {address}: it cannot receive space {id}."
                        ),
                    );
                } else {
                    self.recipient_unknown(&id, &address);
                }
            }
            return;
        };
        match self.pin(&address, key) {
            Ok(()) => {
                for p in pending {
                    self.seal_pending(&address, p);
                }
            }
            Err(()) => {
                if let Some(rec) = self.shared.peers.get_mut(&address) {
                    rec.pending = pending;
                }
            }
        }
    }

    /// Seals a packet that waited for `to`'s key: in its thread, or on its space's leg.
    fn seal_pending(&mut self, to: &Address, p: PendingPlain) {
        if self.is_space_id(&p.thread_id) {
            self.seal_space(&p.thread_id, to, &p.packet_id, p.json.as_bytes());
        } else {
            self.in_thread(&p.thread_id, |step| {
                step.seal_and_queue(&p.packet_id, p.json.as_bytes())
            });
        }
    }

    /// Pins `key` for `peer` if nothing is pinned; `Err` (and a security alert) if a
    /// different key is pinned.
    pub(in crate::agent) fn pin(&mut self, peer: &Address, key: [u8; 32]) -> Result<(), ()> {
        if self.shared.peers.get(peer).and_then(|r| r.key) == Some(key) {
            // Already pinned (and validated then): nothing to check again.
            return Ok(());
        }
        let pk = PublicKey::from_bytes(&key).map_err(|_| ())?;
        self.pin_key(peer, pk)
    }

    /// [`Agent::pin`] with a key already validated.
    pub(in crate::agent) fn pin_key(&mut self, peer: &Address, pk: PublicKey) -> Result<(), ()> {
        let key = pk.to_bytes();
        let rec = self.shared.peers.entry(peer.clone()).or_default();
        match rec.key {
            Some(_) => {
                self.key_changed(peer, key);
                Err(())
            }
            None => {
                rec.key = Some(key);
                rec.lookup_sent = false;
                let pending = std::mem::take(&mut rec.pending);
                self.shared.dirty.peers.insert(peer.clone());
                self.shared.keys.insert(peer.clone(), pk);
                // Packets that waited for this key (its lookup may have been lost) go now.
                for p in pending {
                    self.seal_pending(peer, p);
                }
                self.shared
                    .audit(None, AgentEvent::KeyPinned { peer: peer.clone() });
                Ok(())
            }
        }
    }

    /// `statement` moves `peer` from its pinned key to a new one: if it verifies under the
    /// pinned key, the new key is pinned (the old one kept as retired, to recognise stale
    /// envelopes), nothing is halted, and the user is told once (`tell`: the last of
    /// several statements followed in a row). `false` (and nothing changed) if it does not
    /// verify under the pin.
    pub(in crate::agent) fn peer_rotated(
        &mut self,
        peer: &Address,
        statement: &RotationStatement,
        tell: bool,
    ) -> bool {
        let Some(rec) = self.shared.peers.get_mut(peer) else {
            return false;
        };
        let Some(old) = rec.key else {
            return false;
        };
        let Some(pk) = statement.verify_from(peer, &old) else {
            return false;
        };
        rec.retired_key = Some(old);
        rec.key = Some(statement.new_key);
        rec.rotation_seq = statement.seq;
        self.shared.dirty.peers.insert(peer.clone());
        self.shared.keys.insert(peer.clone(), pk);
        self.shared.audit(
            None,
            AgentEvent::KeyRotated {
                peer: peer.clone(),
                seq: statement.seq,
            },
        );
        if !tell {
            return true;
        }
        self.shared.notify(
            None,
            NotifyKind::Info,
            format!(
                "{peer} moved to a new identity key, signed by the key you had for it; threads with it go on. Its safety number changed: `a2acp keys show {peer}`."
            ),
        );
        true
    }

    /// A pinned peer presented another key: halt its threads, alert the user (§16).
    /// Halts every open thread with `peer` until this user checks its new key and accepts
    /// it; returns how many.
    pub(in crate::agent) fn halt_threads_with(&mut self, peer: &Address) -> usize {
        let ids: Vec<String> = self
            .threads
            .values()
            .filter(|t| &t.peer == peer && !t.state.is_terminal())
            .map(|t| t.id.clone())
            .collect();
        for id in &ids {
            if let Some(t) = self.threads.get_mut(id) {
                t.halted = true;
                // Nothing moves until this user checks the new key and accepts it.
                t.waiting = Waiting::User;
                self.shared.dirty.threads.insert(id.clone());
            }
        }
        ids.len()
    }

    pub(in crate::agent) fn key_changed(&mut self, peer: &Address, new_key: [u8; 32]) {
        let rec = self.shared.peers.entry(peer.clone()).or_default();
        if rec.changed_key == Some(new_key) {
            return;
        }
        rec.changed_key = Some(new_key);
        self.shared.dirty.peers.insert(peer.clone());
        let halted = self.halt_threads_with(peer);
        self.shared.notify(
            None,
            NotifyKind::Security,
            format!(
                "The identity key of {peer} changed. {} thread(s) with it are halted until you check the new key with them and accept it: compare the safety number `a2acp keys show {peer}` prints with theirs, then run `a2acp keys accept {peer} --safety-number DIGITS`.",
                halted
            ),
        );
        self.shared.audit(
            None,
            AgentEvent::KeyChanged {
                peer: peer.clone(),
                halted,
            },
        );
    }
}

/// A plaintext packet waiting for the peer's key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(in crate::agent) struct PendingPlain {
    pub(in crate::agent) thread_id: String,
    pub(in crate::agent) packet_id: String,
    pub(in crate::agent) json: String,
}

impl Shared {
    /// Which of `peer`'s keys signed `msg` with `sig`: the key its envelopes are verified
    /// with, or the one it rotated away from (a statement signed just before a rotation
    /// arrives after it); `None` when neither did.
    pub(in crate::agent) fn peer_key_that_signed(
        &self,
        peer: &Address,
        msg: &[u8],
        sig: &[u8; 64],
    ) -> Option<[u8; 32]> {
        [
            self.keys.get(peer).map(|k| k.to_bytes()),
            self.peers.get(peer).and_then(|r| r.retired_key),
        ]
        .into_iter()
        .flatten()
        .find(|k| {
            crate::crypto::PublicKey::from_bytes(k).is_ok_and(|pk| pk.verify(msg, sig).is_ok())
        })
    }
}
