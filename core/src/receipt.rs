//! Consent receipts (§7.3, §8.3; SPEC-NOTES "Consent receipts"): a statement, signed with
//! the agent's identity key, of what its user's consent let leave — or kept back — in one
//! thread, and of each proposal the user confirmed.
//!
//! A [`Receipt`] says who the agent is (`agent`, `key`), with whom it was dealing (`peer`:
//! who asked, and to whom the values went), in which thread, for what purpose (the
//! thread's intent), when, and per field what was disclosed (a salted hash of the value,
//! never the value), what was declined and what decided it ([`Basis`]: the user at a
//! prompt, a tier, a relationship override…). A confirmation receipt names the proposal
//! confirmed by its digest ([`proposal_digest`]).
//!
//! The signed bytes are `"A2ACP-CONSENT-RECEIPT-V1\0" || JCS(receipt without "sig")`, JCS
//! being the RFC 8785 canonical JSON. The salts stay beside the receipt
//! ([`StoredReceipt`]), outside what is signed: a receipt can be shown without them, and
//! then a guessable value ("vegetarian") cannot be guessed from its hash; shown with the
//! salt of a field, the value can be proven ([`Receipt::check_value`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::address::Address;
use crate::crypto::{IdentityKey, PublicKey};
use crate::encoding::b64_array;
use crate::packet::ResolutionBody;

pub mod agreement;
pub mod retraction;

/// Label that starts the bytes a receipt's signature covers.
pub const RECEIPT_LABEL: &[u8] = b"A2ACP-CONSENT-RECEIPT-V1\0";
/// Label that starts the bytes a value's hash covers.
pub const VALUE_LABEL: &[u8] = b"A2ACP-RECEIPT-VALUE-V1\0";
/// Label that starts the bytes a proposal's digest covers.
pub const PROPOSAL_LABEL: &[u8] = b"A2ACP-PROPOSAL-V1\0";
/// The receipt format's version (the `version` member).
pub const RECEIPT_VERSION: u32 = 1;
/// The record key prefix under which an agent stores its receipts:
/// `receipt/<thread id>/<receipt id>`.
pub const RECEIPT_PREFIX: &str = "receipt/";

/// What a receipt records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptKind {
    /// A consent decision: fields disclosed and fields declined.
    Consent,
    /// The user confirmed a proposal (`proposal` names it).
    Confirmation,
}

/// What decided a field's fate (Kantara's "consent type", made precise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Basis {
    /// The user, answering consent prompt `prompt_id` (or, for a confirmation, the
    /// proposal's prompt).
    User {
        /// The prompt answered (0: a confirmation given for a group).
        prompt_id: u64,
    },
    /// The user gave this value when starting the thread (§7.4).
    UserStarted,
    /// A base permission tier (§7.1): `always_share`, `never_share`, or `ask_first`
    /// (declined without asking: a nice-to-have field, §6.2).
    Tier {
        /// The tier's name.
        tier: String,
    },
    /// The relationship override for this peer (§7.2).
    RelationshipOverride {
        /// The tier it gave the field.
        tier: String,
    },
    /// The tiers of threads whose intent names `phrase` (§6.5).
    IntentTier {
        /// The phrase.
        phrase: String,
        /// The tier it gave the field.
        tier: String,
    },
    /// The agent, with no tier to go by: a field name the user could not read (declined),
    /// a value it does not have (declined), or what the negotiation computed from values
    /// already shared (alternatives, a group's answer).
    Agent,
}

/// A disclosed field: its name, the salted hash of its value, what decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disclosed {
    /// The field's name.
    pub field: String,
    /// SHA-256 of `VALUE_LABEL || salt (16 bytes) || JCS(value)`.
    #[serde(with = "b64_array")]
    pub value_hash: [u8; 32],
    /// What decided it.
    pub basis: Basis,
    /// The usage rule the value went with (SPEC-NOTES "Usage rules"); absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::packet::UsageRule>,
}

/// A declined field and what decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declined {
    /// The field's name.
    pub field: String,
    /// What decided it.
    pub basis: Basis,
}

/// The purpose of the processing: the thread's intent (§5.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purpose {
    /// The intent's category.
    pub category: String,
    /// Its summary, as the peer wrote it or this agent did.
    pub summary: String,
}

/// A signed consent receipt. Wire form: JSON, byte arrays as unpadded base64url,
/// `{"type":"consent_receipt","version":1,"receipt_id":…,"kind":…,"agent":…,"key":…,
/// "peer":…,"thread_id":…,"purpose":{…},"at":…,"disclosed":[…],"declined":[…],
/// "proposal":…,"decided_by":…,"sig":…}` (`proposal` and `decided_by` only in a
/// confirmation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "consent_receipt")]
pub struct Receipt {
    /// [`RECEIPT_VERSION`].
    pub version: u32,
    /// Unique per agent (`rcp_` and 16 characters).
    pub receipt_id: String,
    /// Consent or confirmation.
    pub kind: ReceiptKind,
    /// The agent that signed it (the user's agent).
    pub agent: Address,
    /// Its identity key when it signed.
    #[serde(with = "b64_array")]
    pub key: [u8; 32],
    /// Who asked, and to whom the disclosed values went.
    pub peer: Address,
    /// The thread.
    pub thread_id: String,
    /// What the thread is for.
    pub purpose: Purpose,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// Fields disclosed.
    #[serde(default)]
    pub disclosed: Vec<Disclosed>,
    /// Fields declined.
    #[serde(default)]
    pub declined: Vec<Declined>,
    /// The digest of the proposal confirmed ([`proposal_digest`]), in a confirmation.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::encoding::b64_opt_array"
    )]
    pub proposal: Option<[u8; 32]>,
    /// What decided a confirmation: the user, at the proposal's prompt (in a consent
    /// receipt each field says it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<Basis>,
    /// Ed25519 signature by `key` over [`Receipt::signed_bytes`].
    #[serde(with = "b64_array")]
    pub sig: [u8; 64],
}

/// A receipt as its agent keeps it: the receipt and the salt of each disclosed value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredReceipt {
    /// The signed receipt.
    pub receipt: Receipt,
    /// Field name → the 16-byte salt of its value's hash.
    #[serde(default)]
    pub salts: BTreeMap<String, Salt>,
}

/// A value hash's salt (16 bytes, base64url in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Salt(#[serde(with = "b64_array")] pub [u8; 16]);

/// Why a receipt does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    /// `version` is not one this implementation reads.
    #[error("receipt version {0} is not supported (this implementation reads version 1)")]
    Version(u32),
    /// `key` is not a valid Ed25519 point.
    #[error("the receipt's key is not a valid public key")]
    BadKey,
    /// The receipt cannot be put in canonical form.
    #[error("the receipt cannot be canonicalised: {0}")]
    Canonical(String),
    /// `sig` does not verify under `key`: the receipt was altered or not signed by it.
    #[error("the signature does not verify under the receipt's key: the receipt was altered")]
    Signature,
    /// The receipt was signed by another key than the one expected.
    #[error("signed by {found}, not by the expected key {expected}")]
    WrongKey {
        /// The receipt's key (base64url).
        found: String,
        /// The key expected (base64url).
        expected: String,
    },
    /// The field is not among the disclosed ones.
    #[error("the receipt discloses no field `{0}`")]
    NoSuchField(String),
    /// No salt is known for the field.
    #[error("no salt for field `{0}`: the value cannot be checked without it")]
    NoSalt(String),
    /// The value does not match the field's hash.
    #[error("the value given for `{0}` is not the value disclosed")]
    ValueMismatch(String),
}

impl Receipt {
    /// Signs `self` (its `key` set to `identity`'s) in place.
    pub fn sign(mut self, identity: &IdentityKey) -> Result<Receipt, ReceiptError> {
        self.key = identity.public_ref().to_bytes();
        self.sig = identity.sign(&self.signed_bytes()?);
        Ok(self)
    }

    /// `RECEIPT_LABEL || JCS(the receipt without "sig")`.
    pub fn signed_bytes(&self) -> Result<Vec<u8>, ReceiptError> {
        let mut v =
            serde_json::to_value(self).map_err(|e| ReceiptError::Canonical(e.to_string()))?;
        if let Some(m) = v.as_object_mut() {
            m.remove("sig");
        }
        let c = serde_json_canonicalizer::to_vec(&v)
            .map_err(|e| ReceiptError::Canonical(e.to_string()))?;
        let mut b = Vec::with_capacity(RECEIPT_LABEL.len() + c.len());
        b.extend_from_slice(RECEIPT_LABEL);
        b.extend_from_slice(&c);
        Ok(b)
    }

    /// Checks the receipt on its own: version and signature under its own `key`. Whether
    /// `key` is the agent's key is the caller's question ([`Receipt::verify_by`]).
    pub fn verify(&self) -> Result<(), ReceiptError> {
        if self.version != RECEIPT_VERSION {
            return Err(ReceiptError::Version(self.version));
        }
        let key = PublicKey::from_bytes(&self.key).map_err(|_| ReceiptError::BadKey)?;
        key.verify(&self.signed_bytes()?, &self.sig)
            .map_err(|_| ReceiptError::Signature)
    }

    /// [`Receipt::verify`], and that it was signed by `expected`.
    pub fn verify_by(&self, expected: &[u8; 32]) -> Result<(), ReceiptError> {
        if &self.key != expected {
            return Err(ReceiptError::WrongKey {
                found: crate::encoding::b64_encode(&self.key),
                expected: crate::encoding::b64_encode(expected),
            });
        }
        self.verify()
    }

    /// Whether `value` is the value disclosed for `field`, given its salt.
    pub fn check_value(
        &self,
        field: &str,
        value: &serde_json::Value,
        salt: &Salt,
    ) -> Result<(), ReceiptError> {
        let d = self
            .disclosed
            .iter()
            .find(|d| d.field == field)
            .ok_or_else(|| ReceiptError::NoSuchField(field.to_string()))?;
        match value_hash(salt, value) {
            Some(h) if h == d.value_hash => Ok(()),
            _ => Err(ReceiptError::ValueMismatch(field.to_string())),
        }
    }
}

impl StoredReceipt {
    /// Whether `value` is the value disclosed for `field`, with the kept salt.
    pub fn check_value(&self, field: &str, value: &serde_json::Value) -> Result<(), ReceiptError> {
        let salt = self
            .salts
            .get(field)
            .ok_or_else(|| ReceiptError::NoSalt(field.to_string()))?;
        self.receipt.check_value(field, value, salt)
    }
}

/// SHA-256 of `VALUE_LABEL || salt || JCS(value)` (`None`: a value JCS cannot encode,
/// such as a number outside IEEE 754 doubles — never one this agent sends).
pub fn value_hash(salt: &Salt, value: &serde_json::Value) -> Option<[u8; 32]> {
    jcs_sha256(&[VALUE_LABEL, &salt.0], value)
}

/// SHA-256 of `PROPOSAL_LABEL || JCS(resolution body without "confirmation_timeout" and
/// "on_timeout")`: what is agreed, as sent — the proposal, its confirmers, quorum and
/// actions — not how long the asking lasts (a sequential group asks each participant with
/// the time left, and its legs' confirmations must still sign one digest).
pub fn proposal_digest(body: &ResolutionBody) -> Option<[u8; 32]> {
    let mut v = serde_json::to_value(body).ok()?;
    if let Some(m) = v.as_object_mut() {
        m.remove("confirmation_timeout");
        m.remove("on_timeout");
    }
    jcs_sha256(&[PROPOSAL_LABEL], &v)
}

/// SHA-256 of `JCS(value)`, nothing before it: how an agent tells whether a value it
/// sends is the one a receipt of the thread already covers.
pub fn plain_digest(value: &serde_json::Value) -> Option<[u8; 32]> {
    jcs_sha256(&[], value)
}

/// SHA-256 of the `prefix` parts then `JCS(value)`.
fn jcs_sha256(prefix: &[&[u8]], value: &impl Serialize) -> Option<[u8; 32]> {
    let v = serde_json::to_value(value).ok()?;
    let c = serde_json_canonicalizer::to_vec(&v).ok()?;
    let mut h = Sha256::new();
    for p in prefix {
        h.update(p);
    }
    h.update(&c);
    Some(h.finalize().into())
}

/// The record key of a receipt.
pub fn record_key(thread_id: &str, receipt_id: &str) -> String {
    format!("{RECEIPT_PREFIX}{thread_id}/{receipt_id}")
}

#[cfg(test)]
mod tests;
