//! Receipts of an agreement (§8.3; SPEC-NOTES "Receipts of an agreement"): every
//! `confirmed` answer carries its confirmer's signature over the proposal it confirms,
//! and a thread that reaches CONFIRMED keeps an [`Agreement`] — the proposal and every
//! required confirmation — that any participant can verify offline.
//!
//! A [`Confirmation`] signs `CONFIRMATION_LABEL || lp(confirmer) || lp(agreement_id) ||
//! proposal_digest`, `lp` being a 4-byte big-endian length then the UTF-8 bytes. The
//! agreement id is the thread id of a two-party thread and the group id (`grp_…`) of a
//! group, whose legs carry the same resolution body: every confirmation of one group's
//! proposal signs the same bytes but for its confirmer, so they can be put side by side.

use serde::{Deserialize, Serialize};

use super::proposal_digest;
use crate::address::Address;
use crate::crypto::{put_lp, IdentityKey, PublicKey};
use crate::encoding::{b64_array, b64_encode};
use crate::packet::ResolutionBody;

/// Label that starts the bytes a confirmation's signature covers.
pub const CONFIRMATION_LABEL: &[u8] = b"A2ACP-CONFIRMATION-V1\0";
/// The agreement format's version (the `version` member).
pub const AGREEMENT_VERSION: u32 = 1;
/// The record key prefix of agreements: `agreement/<thread id>/<resolution packet id>`.
pub const AGREEMENT_PREFIX: &str = "agreement/";

/// One participant's signed `confirmed` of a proposal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirmation {
    /// Who confirmed.
    pub address: Address,
    /// Its identity key when it signed.
    #[serde(with = "b64_array")]
    pub key: [u8; 32],
    /// Ed25519 signature by `key` over [`confirmation_bytes`].
    #[serde(with = "b64_array")]
    pub sig: [u8; 64],
}

/// The bytes a confirmation signs.
pub fn confirmation_bytes(confirmer: &Address, agreement_id: &str, digest: &[u8; 32]) -> Vec<u8> {
    let a = confirmer.as_str().as_bytes();
    let mut out = Vec::with_capacity(CONFIRMATION_LABEL.len() + 8 + a.len() + 64);
    out.extend_from_slice(CONFIRMATION_LABEL);
    put_lp(&mut out, a);
    put_lp(&mut out, agreement_id.as_bytes());
    out.extend_from_slice(digest);
    out
}

impl Confirmation {
    /// `identity`'s confirmation, as `address`, of the proposal `digest` of `agreement_id`.
    pub fn sign(
        identity: &IdentityKey,
        address: &Address,
        agreement_id: &str,
        digest: &[u8; 32],
    ) -> Confirmation {
        Confirmation {
            address: address.clone(),
            key: identity.public_ref().to_bytes(),
            sig: identity.sign(&confirmation_bytes(address, agreement_id, digest)),
        }
    }

    /// Whether the signature is `key`'s over this confirmer's confirmation of `digest`.
    pub fn verify(&self, agreement_id: &str, digest: &[u8; 32]) -> bool {
        verify_sig(&self.key, &self.address, agreement_id, digest, &self.sig)
    }
}

/// Whether `sig` is `key`'s confirmation, as `confirmer`, of `digest` in `agreement_id`.
pub fn verify_sig(
    key: &[u8; 32],
    confirmer: &Address,
    agreement_id: &str,
    digest: &[u8; 32],
    sig: &[u8; 64],
) -> bool {
    PublicKey::from_bytes(key).is_ok_and(|k| {
        k.verify(&confirmation_bytes(confirmer, agreement_id, digest), sig)
            .is_ok()
    })
}

/// What a participant keeps once a thread is CONFIRMED: the proposal and the
/// confirmations it holds. Wire form (JSON, byte arrays as unpadded base64url):
/// `{"type":"agreement","version":1,"agreement_id":…,"thread_id":…,"at":…,
/// "proposal":{resolution body},"proposal_digest":…,"confirmations":[{"address","key",
/// "sig"}…],"unsigned":[addresses]}`. It is not signed itself: each confirmation is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "agreement")]
pub struct Agreement {
    /// [`AGREEMENT_VERSION`].
    pub version: u32,
    /// What the confirmations sign: the thread id, or the group id.
    pub agreement_id: String,
    /// The thread (for a group, this agent's leg).
    pub thread_id: String,
    /// When this agent saw the last confirmation it needed (RFC 3339, UTC).
    pub at: String,
    /// The resolution confirmed, as received or sent.
    pub proposal: ResolutionBody,
    /// [`proposal_digest`] of `proposal`.
    #[serde(with = "b64_array")]
    pub proposal_digest: [u8; 32],
    /// The signed confirmations, one per confirmer, in the order they came.
    pub confirmations: Vec<Confirmation>,
    /// Participants whose `confirmed` came without a signature (an implementation that
    /// does not sign confirmations): counted by the agent that acted, but not provable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsigned: Vec<Address>,
}

/// Why an agreement does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgreementError {
    /// `version` is not one this implementation reads.
    #[error("agreement version {0} is not supported (this implementation reads version 1)")]
    Version(u32),
    /// The proposal is not the one the digest names.
    #[error("the proposal does not match its digest: the agreement was altered")]
    ProposalAltered,
    /// A confirmation's signature does not verify.
    #[error("the confirmation of {0} does not verify: altered, or over another proposal")]
    Signature(String),
    /// A confirmation of someone the proposal does not ask.
    #[error("{0} confirmed but the proposal does not require its confirmation")]
    NotRequired(String),
    /// Two confirmations of one confirmer.
    #[error("{0} confirmed twice")]
    Duplicate(String),
    /// Fewer signed confirmations than the proposal requires.
    #[error("{signed} signed confirmations of the {needed} the proposal requires{}", unsigned_text(.unsigned))]
    Incomplete {
        /// Signed confirmations.
        signed: usize,
        /// Confirmations required (the quorum, or every confirmer named).
        needed: usize,
        /// Confirmers counted without a signature.
        unsigned: Vec<String>,
    },
    /// A confirmation was signed by another key than the one expected for its confirmer.
    #[error("{address} signed with {found}, not with the expected key {expected}")]
    WrongKey {
        /// The confirmer.
        address: String,
        /// The key in the agreement (base64url).
        found: String,
        /// The key expected (base64url).
        expected: String,
    },
}

fn unsigned_text(unsigned: &[String]) -> String {
    if unsigned.is_empty() {
        String::new()
    } else {
        format!(" ({} confirmed unsigned)", unsigned.join(", "))
    }
}

impl Agreement {
    /// How many confirmations the proposal requires: its quorum, else everyone it names.
    pub fn needed(&self) -> usize {
        let mut named: Vec<&Address> = self.proposal.requires_confirmation_from.iter().collect();
        named.sort();
        named.dedup();
        match self.proposal.quorum {
            Some(q) => usize::try_from(q).unwrap_or(usize::MAX).min(named.len()),
            None => named.len(),
        }
    }

    /// Checks the agreement on its own: the proposal matches its digest, each
    /// confirmation verifies under its own key, each confirmer is required and counted
    /// once, and enough of them signed. Returns the number of signed confirmations.
    /// Whether each key is its confirmer's is the caller's question
    /// ([`Agreement::verify_keys`]).
    pub fn verify(&self) -> Result<usize, AgreementError> {
        if self.version != AGREEMENT_VERSION {
            return Err(AgreementError::Version(self.version));
        }
        if proposal_digest(&self.proposal) != Some(self.proposal_digest) {
            return Err(AgreementError::ProposalAltered);
        }
        let mut seen: Vec<&Address> = Vec::new();
        for c in &self.confirmations {
            if !c.verify(&self.agreement_id, &self.proposal_digest) {
                return Err(AgreementError::Signature(c.address.to_string()));
            }
            if !self
                .proposal
                .requires_confirmation_from
                .contains(&c.address)
            {
                return Err(AgreementError::NotRequired(c.address.to_string()));
            }
            if seen.contains(&&c.address) {
                return Err(AgreementError::Duplicate(c.address.to_string()));
            }
            seen.push(&c.address);
        }
        let needed = self.needed();
        if seen.len() < needed {
            return Err(AgreementError::Incomplete {
                signed: seen.len(),
                needed,
                unsigned: self.unsigned.iter().map(|a| a.to_string()).collect(),
            });
        }
        Ok(seen.len())
    }

    /// [`Agreement::verify`], and that each confirmer `expected` names signed with the
    /// key given for it.
    pub fn verify_keys(&self, expected: &[(Address, [u8; 32])]) -> Result<usize, AgreementError> {
        let n = self.verify()?;
        for c in &self.confirmations {
            if let Some((_, k)) = expected.iter().find(|(a, _)| a == &c.address) {
                if k != &c.key {
                    return Err(AgreementError::WrongKey {
                        address: c.address.to_string(),
                        found: b64_encode(&c.key),
                        expected: b64_encode(k),
                    });
                }
            }
        }
        Ok(n)
    }
}

/// The record key of the agreement on the resolution `resolution_id` of a thread.
pub fn record_key(thread_id: &str, resolution_id: &str) -> String {
    format!("{AGREEMENT_PREFIX}{thread_id}/{resolution_id}")
}

#[cfg(test)]
mod tests;
