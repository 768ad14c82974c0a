//! Recovery when a key is lost (SPEC-NOTES "Recovery"): this agent binding its recovery
//! key at its relay (and again after each key rotation), and a peer's key changed by a
//! recovery.
//!
//! A peer recovered with its recovery key halts its threads and asks the user, as any key
//! change does; the notice says that the change is signed by the recovery key the peer
//! bound with the key that was pinned. The recovered agent starts from an empty home, so
//! its threads cannot go on anyway, and a stolen recovery phrase is a takeover: only the
//! user, comparing safety numbers out of band, can tell the two apart.

use serde::{Deserialize, Serialize};

use crate::agent::*;
use crate::encoding::b64_array;
use crate::link::ClientFrame;
use crate::recovery::{RecoveryBinding, RecoveryProof};

/// The recovery key this agent binds (its public part) and the state of the binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::agent) struct OwnRecovery {
    /// The recovery key's public part.
    #[serde(with = "b64_array")]
    pub(in crate::agent) recovery_key: [u8; 32],
    /// The number of the binding last signed.
    pub(in crate::agent) seq: u64,
    /// The identity key that signed it.
    #[serde(with = "b64_array")]
    pub(in crate::agent) signed_with: [u8; 32],
    /// The relay confirmed it (`recovery_bound`).
    pub(in crate::agent) bound: bool,
    /// The relay refused it (`recovery_refused`: e.g. a cluster relay, which keeps no
    /// recovery keys): why. It is not sent again until it is signed again (a new
    /// recovery key, or this agent's key changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) refused: Option<String>,
}

/// The state of this agent's recovery key at its relay (public part only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryKeyState {
    /// The recovery key's public part.
    pub recovery_key: [u8; 32],
    /// The number of the binding last signed.
    pub seq: u64,
    /// The relay confirmed that binding.
    pub bound: bool,
    /// The relay refused that binding: why.
    pub refused: Option<String>,
}

impl Agent {
    /// This agent's recovery key and whether the relay holds its binding (`None`: no
    /// recovery key was given, [`Command::BindRecovery`]).
    pub fn recovery_key_state(&self) -> Option<RecoveryKeyState> {
        self.shared
            .meta
            .recovery
            .as_ref()
            .map(|r| RecoveryKeyState {
                recovery_key: r.recovery_key,
                seq: r.seq,
                bound: r.bound,
                refused: r.refused.clone(),
            })
    }

    /// [`Command::BindRecovery`]: binds `recovery_key` (replacing any bound before).
    pub(in crate::agent) fn bind_recovery(&mut self, recovery_key: [u8; 32]) {
        let current = self.shared.identity.public_ref().to_bytes();
        let seq = self.shared.meta.recovery.as_ref().map_or(0, |r| r.seq) + 1;
        self.shared.meta.recovery = Some(OwnRecovery {
            recovery_key,
            seq,
            signed_with: current,
            bound: false,
            refused: None,
        });
        self.shared.dirty.meta = true;
        self.maybe_bind_recovery();
    }

    /// Sends `bind_recovery` when the connection is up and the binding is not confirmed,
    /// signing it again (next number) when this agent's key changed since it was signed.
    pub(in crate::agent) fn maybe_bind_recovery(&mut self) {
        if self.shared.link != Link::Ready || self.shared.rotating.is_some() {
            return;
        }
        let current = self.shared.identity.public_ref().to_bytes();
        let Some(r) = self.shared.meta.recovery.as_mut() else {
            return;
        };
        if r.signed_with != current {
            r.seq += 1;
            r.signed_with = current;
            r.bound = false;
            r.refused = None;
            self.shared.dirty.meta = true;
        }
        if r.bound || r.refused.is_some() {
            return;
        }
        let binding = RecoveryBinding::sign(
            &self.shared.config.address,
            &self.shared.identity,
            &r.recovery_key,
            r.seq,
        );
        self.shared
            .send_frame(&ClientFrame::BindRecovery { binding });
    }

    /// `recovery_bound`: the relay installed binding `seq`.
    pub(in crate::agent) fn on_recovery_bound(&mut self, seq: u64) {
        let Some(r) = self.shared.meta.recovery.as_mut() else {
            return;
        };
        if r.seq != seq || r.bound {
            return;
        }
        r.bound = true;
        self.shared.dirty.meta = true;
        self.shared
            .audit(None, AgentEvent::OwnRecoveryBound { seq });
    }

    /// `error recovery_refused`: the relay did not install the binding.
    pub(in crate::agent) fn recovery_refused(&mut self, message: String) {
        match self.shared.meta.recovery.as_mut() {
            // Told once per binding: a refusal repeated (a late answer) changes nothing.
            Some(r) if r.refused.is_some() || r.bound => return,
            Some(r) => {
                r.refused = Some(message.clone());
                self.shared.dirty.meta = true;
            }
            None => return,
        }
        self.shared.audit(
            None,
            AgentEvent::OwnRecoveryRefused {
                message: message.clone(),
            },
        );
        self.shared.notify(
            None,
            NotifyKind::Security,
            format!("The relay refused this agent's recovery key: {message}. Make a new one with `a2acp agent recovery-key`."),
        );
    }

    /// A lookup answered `key` for `peer` with a recovery: when it changes the pinned key,
    /// the chain is checked from the pin. Verified: the threads with the peer halt and the
    /// user is told it is a recovery (once per new key). Not verified: the change is an
    /// unsigned one (the lookup's key goes on to [`Agent::pin`], which halts and alerts).
    pub(in crate::agent) fn peer_recovered(
        &mut self,
        peer: &Address,
        key: [u8; 32],
        proof: &RecoveryProof,
    ) {
        let Some(rec) = self.shared.peers.get(peer) else {
            return;
        };
        let Some(pinned) = rec.key else {
            return;
        };
        if pinned == key || proof.statement.new_key != key || rec.recovered_key == Some(key) {
            return;
        }
        if proof.verify_from(peer, &pinned).is_none() {
            self.shared
                .audit(None, AgentEvent::PeerRecoveryRefused { peer: peer.clone() });
            self.shared.notify(
                None,
                NotifyKind::Security,
                format!("{peer}'s relay presented a recovery of its key that does not verify from the key you have for it: treat the change as unsigned."),
            );
            return;
        }
        let Some(rec) = self.shared.peers.get_mut(peer) else {
            return;
        };
        rec.recovered_key = Some(key);
        rec.changed_key = Some(key);
        self.shared.dirty.peers.insert(peer.clone());
        let halted = self.halt_threads_with(peer);
        self.shared.notify(
            None,
            NotifyKind::Security,
            format!(
                "{peer} recovered its address onto a new identity key with its recovery words (signed by the recovery key it registered with the key you had): it says it lost its device. {} thread(s) with it are halted; the lost device's side of them is gone. Whoever holds its recovery words can do this, so check with them in person or by phone: compare the safety number `a2acp keys show {peer}` prints with theirs, then run `a2acp keys accept {peer} --safety-number DIGITS`.",
                halted
            ),
        );
        self.shared.audit(
            None,
            AgentEvent::PeerRecovered {
                peer: peer.clone(),
                halted,
            },
        );
    }
}
