//! Receipts of an agreement (§8.3; SPEC-NOTES "Receipts of an agreement"): this user's
//! `confirmed` goes out signed, a peer's is verified against its key and the proposal
//! this side holds (refused when it does not verify), and a thread that reaches CONFIRMED
//! keeps an [`Agreement`] with every confirmation held ([`crate::receipt::agreement`] is
//! the format).
//!
//! What is signed is the agreement id — the thread id, or on a group's leg the group id,
//! since every leg carries the same proposal — and the proposal's digest. A group's
//! coordinator passes the participants' confirmations it holds on to each of them with
//! its own, so every participant's agreement holds the whole quorum.

use crate::agent::*;
use crate::packet::{ResolutionResponseBody, ResolutionStatus};
use crate::persist::PersistOp;
use crate::receipt::agreement::{
    confirmation_bytes, record_key, Agreement, Confirmation, AGREEMENT_VERSION,
};
use crate::receipt::proposal_digest;

impl ThreadStep<'_> {
    /// What this thread's confirmations sign besides the proposal: the group id on a
    /// group's leg, else the thread id.
    pub(in crate::agent) fn agreement_id(&self) -> String {
        match &self.t.group {
            Some(g) => g.header.group_id.clone(),
            None => self.id.to_string(),
        }
    }

    /// Signs this user's confirmation of the open resolution, keeps it with the
    /// resolution and returns the signature to send.
    pub(in crate::agent) fn sign_own_confirmation(&mut self) -> Option<[u8; 64]> {
        let me = self.shared.config.address.clone();
        let aid = self.agreement_id();
        let r = self.t.stage.resolution_mut()?;
        let digest = proposal_digest(&r.body)?;
        let c = Confirmation::sign(&self.shared.identity, &me, &aid, &digest);
        let sig = c.sig;
        keep(&mut r.signatures, c);
        self.mark_changed();
        Some(sig)
    }

    /// Takes the signatures a peer's `confirmed` carries: its own, verified against the
    /// key its envelopes are verified with, and on a group's leg those its coordinator
    /// passes on. `Err`: the peer's own signature does not verify over the proposal this
    /// side holds, and the answer must not count.
    pub(in crate::agent) fn take_confirmations(
        &mut self,
        from: &Address,
        b: &ResolutionResponseBody,
    ) -> Result<(), String> {
        if b.status != ResolutionStatus::Confirmed {
            return Ok(());
        }
        let me = self.shared.config.address.clone();
        let aid = self.agreement_id();
        let from_coordinator = self
            .t
            .group
            .as_ref()
            .is_some_and(|g| &g.header.coordinator == from && g.header.coordinator != me);
        let Some(r) = self.t.stage.resolution_mut() else {
            return Ok(());
        };
        let Some(digest) = proposal_digest(&r.body) else {
            return Ok(());
        };
        if let Some(sig) = &b.signature {
            let msg = confirmation_bytes(from, &aid, &digest);
            let Some(key) = self.shared.peer_key_that_signed(from, &msg, sig) else {
                return Err(
                    "its signature does not verify over the proposal this side holds".into(),
                );
            };
            keep(
                &mut r.signatures,
                Confirmation {
                    address: from.clone(),
                    key,
                    sig: *sig,
                },
            );
        }
        let mut dropped = Vec::new();
        if !b.confirmations.is_empty() && !from_coordinator {
            dropped.push(format!(
                "{} confirmations passed on by a participant (only a coordinator's count)",
                b.confirmations.len()
            ));
        } else {
            for c in &b.confirmations {
                let fits = c.address != me
                    && &c.address != from
                    && r.body.requires_confirmation_from.contains(&c.address)
                    && c.verify(&aid, &digest);
                if fits {
                    keep(&mut r.signatures, c.clone());
                } else {
                    dropped.push(format!("the confirmation of {} passed on", c.address));
                }
            }
        }
        self.mark_changed();
        for d in dropped {
            self.note(format!("{d} dropped: it does not verify here"));
        }
        Ok(())
    }

    /// The signed confirmations of the open resolution held (a coordinator passes them
    /// on to its group's participants).
    pub(in crate::agent) fn held_confirmations(&self) -> Vec<Confirmation> {
        self.t
            .stage
            .resolution()
            .map(|r| r.signatures.clone())
            .unwrap_or_default()
    }

    /// Keeps `more` (the group's confirmations the coordinator holds) with the open
    /// resolution, when they sign the same proposal in the same group.
    pub(in crate::agent) fn add_confirmations(&mut self, more: &[Confirmation]) {
        let aid = self.agreement_id();
        let Some(r) = self.t.stage.resolution_mut() else {
            return;
        };
        let Some(digest) = proposal_digest(&r.body) else {
            return;
        };
        for c in more {
            if r.body.requires_confirmation_from.contains(&c.address) && c.verify(&aid, &digest) {
                keep(&mut r.signatures, c.clone());
            }
        }
        self.mark_changed();
    }

    /// The thread reached CONFIRMED: its agreement is stored under
    /// `agreement/<thread>/<resolution packet id>`.
    pub(in crate::agent) fn keep_agreement(&mut self) {
        let aid = self.agreement_id();
        let Some(r) = self.t.stage.resolution() else {
            return;
        };
        let Some(digest) = proposal_digest(&r.body) else {
            return;
        };
        let signed: Vec<Address> = r.signatures.iter().map(|c| c.address.clone()).collect();
        let mut unsigned: Vec<Address> = Vec::new();
        for (a, s) in &r.answers {
            if *s == ResolutionStatus::Confirmed && !signed.contains(a) && !unsigned.contains(a) {
                unsigned.push(a.clone());
            }
        }
        let agreement = Agreement {
            version: AGREEMENT_VERSION,
            agreement_id: aid,
            thread_id: self.id.to_string(),
            at: self.shared.now.to_rfc3339(),
            proposal: r.body.clone(),
            proposal_digest: digest,
            confirmations: r.signatures.clone(),
            unsigned: unsigned.clone(),
        };
        let key = record_key(self.id, &r.packet_id);
        if !self.t.agreements.contains(&key) {
            self.t.agreements.push(key.clone());
        }
        self.shared.dirty.ops.push(PersistOp::Put {
            key,
            value: serde_json::to_vec(&agreement).unwrap_or_default(),
        });
        self.mark_changed();
        self.audit(AgentEvent::AgreementKept { signed, unsigned });
    }
}

/// Keeps `c`, replacing an earlier confirmation of the same confirmer.
fn keep(v: &mut Vec<Confirmation>, c: Confirmation) {
    v.retain(|x| x.address != c.address);
    v.push(c);
}
