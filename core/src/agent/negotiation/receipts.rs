//! Consent receipts (§7.3, §8.3; SPEC-NOTES "Consent receipts"): every consent decision
//! and every confirmation of the user signed with the identity key and stored, so the
//! user can see and prove what left and why ([`crate::receipt`] is the format).
//!
//! Where they are made:
//! - a consent prompt answered: one receipt for the whole answer, each field shared or
//!   declined with [`Basis::User`];
//! - fields a tier declined without asking (`take_needs`): their tier, or
//!   [`Basis::Agent`] for a field name the user could not read or a value the agent
//!   does not have;
//! - every packet that provides a field no receipt of the thread covers with that value
//!   (`send_packet`): what the field was receipted with before in the thread, else what
//!   shares it without asking (the user starting the thread, a tier, an override), else
//!   [`Basis::Agent`] (what the negotiation computed from what was shared);
//! - a proposal confirmed by the user (for a group, by the coordinator's user, on each
//!   leg): the proposal's digest.

use crate::agent::permissions::{explain_tier_in, usage_policy, Tier};
use crate::agent::thread::Receipted;
use crate::agent::*;
use crate::packet::{Context, ResolutionBody};
use crate::persist::PersistOp;
use crate::receipt::{
    plain_digest, proposal_digest, record_key, value_hash, Basis, Declined, Disclosed, Purpose,
    Receipt, ReceiptKind, Salt, StoredReceipt, RECEIPT_VERSION,
};

/// What a new receipt says.
#[derive(Default)]
pub(in crate::agent) struct ReceiptDraft {
    /// Fields disclosed: name, value, what decided it.
    pub(in crate::agent) disclosed: Vec<(String, serde_json::Value, Basis)>,
    /// Fields declined and what decided it.
    pub(in crate::agent) declined: Vec<(String, Basis)>,
}

impl ThreadStep<'_> {
    /// Signs and stores a consent receipt of this thread for `draft` (nothing when it
    /// is empty), and records what it covers.
    pub(in crate::agent) fn sign_consent_receipt(&mut self, draft: ReceiptDraft) {
        if draft.disclosed.is_empty() && draft.declined.is_empty() {
            return;
        }
        let mut salts = BTreeMap::new();
        let mut disclosed = Vec::new();
        for (field, value, basis) in draft.disclosed {
            let mut salt = [0u8; 16];
            self.shared.meta.rng.fill(&mut salt);
            let salt = Salt(salt);
            let (Some(value_hash), Some(digest)) =
                (value_hash(&salt, &value), plain_digest(&value))
            else {
                continue;
            };
            self.t.receipted.insert(
                field.clone(),
                Receipted {
                    digest,
                    basis: basis.clone(),
                },
            );
            salts.insert(field.clone(), salt);
            // The rule the value goes with, as the packet declares it (same instant).
            let usage = usage_policy(&self.shared.settings.tiers, &field)
                .map(|p| p.rule(self.shared.now, &self.t.intent));
            disclosed.push(Disclosed {
                field,
                value_hash,
                basis,
                usage,
            });
        }
        let declined = draft
            .declined
            .into_iter()
            .map(|(field, basis)| Declined { field, basis })
            .collect();
        self.sign_receipt(ReceiptKind::Consent, disclosed, declined, None, salts);
    }

    /// Signs and stores the receipt of the user's confirmation of `proposal`.
    pub(in crate::agent) fn sign_confirmation_receipt(
        &mut self,
        proposal: &ResolutionBody,
        basis: Basis,
    ) {
        let Some(d) = proposal_digest(proposal) else {
            return;
        };
        let kind = ReceiptKind::Confirmation;
        self.sign_receipt(
            kind,
            Vec::new(),
            Vec::new(),
            Some((d, basis)),
            BTreeMap::new(),
        );
    }

    fn sign_receipt(
        &mut self,
        kind: ReceiptKind,
        disclosed: Vec<Disclosed>,
        declined: Vec<Declined>,
        confirmed: Option<([u8; 32], Basis)>,
        salts: BTreeMap<String, Salt>,
    ) {
        let (proposal, decided_by) = match confirmed {
            Some((d, b)) => (Some(d), Some(b)),
            None => (None, None),
        };
        let receipt_id = self.shared.meta.rng.id("rcp_", 16);
        self.shared.dirty.meta = true;
        let t = &*self.t;
        let draft = Receipt {
            version: RECEIPT_VERSION,
            receipt_id: receipt_id.clone(),
            kind,
            agent: self.shared.config.address.clone(),
            key: [0; 32],
            peer: t.peer.clone(),
            thread_id: self.id.to_string(),
            purpose: Purpose {
                category: t.intent.category.clone(),
                summary: t.intent.summary.clone(),
            },
            at: self.shared.now.to_rfc3339(),
            disclosed,
            declined,
            proposal,
            decided_by,
            sig: [0; 64],
        };
        let receipt = match draft.sign(&self.shared.identity) {
            Ok(r) => r,
            Err(e) => {
                self.audit_bug(Bug::InvalidOutgoing {
                    kind: "consent_receipt".into(),
                    error: e.to_string(),
                });
                return;
            }
        };
        let event = AgentEvent::ReceiptSigned {
            receipt_id: receipt_id.clone(),
            kind,
            disclosed: receipt.disclosed.iter().map(|d| d.field.clone()).collect(),
            declined: receipt.declined.iter().map(|d| d.field.clone()).collect(),
        };
        let stored = StoredReceipt { receipt, salts };
        self.shared.dirty.ops.push(PersistOp::Put {
            key: record_key(self.id, &receipt_id),
            value: serde_json::to_vec(&stored).unwrap_or_default(),
        });
        self.mark_changed();
        self.audit(event);
    }

    /// The receipt of what `ctx` (a packet about to leave) discloses that no receipt of
    /// the thread covers with the same value.
    pub(in crate::agent) fn receipt_for_disclosure(&mut self, ctx: &Context) {
        let mut draft = ReceiptDraft::default();
        for (field, value) in ctx {
            let Some(d) = plain_digest(value) else {
                continue;
            };
            let basis = match self.t.receipted.get(field) {
                Some(r) if r.digest == d => continue,
                Some(r) => r.basis.clone(),
                None => self.basis_without_asking(field),
            };
            draft.disclosed.push((field.clone(), value.clone(), basis));
        }
        self.sign_consent_receipt(draft);
    }

    /// What lets `field` leave without a prompt in this thread.
    fn basis_without_asking(&self, field: &str) -> Basis {
        let t = &*self.t;
        let s = &self.shared.settings;
        let (tier, basis) =
            explain_tier_in(&s.tiers, &s.overrides, &t.peer, Some(&t.intent), field);
        match tier {
            Tier::AlwaysShare if self.shared.thread_tier(t, field) == Tier::AlwaysShare => basis,
            _ if t.user_initiated && t.local.contains_key(field) => Basis::UserStarted,
            _ => Basis::Agent,
        }
    }

    /// What declined `field` without asking: its tier when the tier declines it
    /// (never_share, or ask_first for a nice-to-have), else the agent.
    pub(in crate::agent) fn basis_of_decline(&self, field: &str) -> Basis {
        let t = &*self.t;
        let s = &self.shared.settings;
        let (tier, basis) =
            explain_tier_in(&s.tiers, &s.overrides, &t.peer, Some(&t.intent), field);
        match tier {
            Tier::AlwaysShare => Basis::Agent,
            _ => basis,
        }
    }
}
