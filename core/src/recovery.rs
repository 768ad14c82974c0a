//! Recovery when the identity key is lost (§3, §16; SPEC-NOTES "Recovery"): the recovery
//! key's binding and the statement by which the recovery key moves an address to a new
//! identity key.
//!
//! A person's recovery key is an Ed25519 key whose 32-byte seed is shown to them once, as
//! 24 words, and never kept on the device. Its public part is bound to the address by a
//! [`RecoveryBinding`] the identity key signs; the relay keeps the binding per address (it
//! outlives key rotations). When the device is lost, a new device makes a new identity key
//! and a [`RecoveryStatement`] signed by the recovery key and by the new key: the relay
//! installs it only when the recovery key is the bound one and the statement leaves the
//! address's current key, so the same statement can never be used twice.
//!
//! A peer that pinned the address's old key checks the whole chain with
//! [`RecoveryProof::verify_from`]: the binding signed by the pinned key names the recovery
//! key, and the recovery key moves the pinned key to the new one.

use serde::{Deserialize, Serialize};

use crate::address::Address;
use crate::crypto::{put_lp, IdentityKey, PublicKey};
use crate::encoding::b64_array;

/// Label that starts the bytes the identity key signs to bind a recovery key.
pub const RECOVERY_KEY_LABEL: &[u8] = b"A2ACP-RECOVERY-KEY-V1\0";
/// Label that starts the bytes the recovery key and the new identity key sign.
pub const RECOVERY_LABEL: &[u8] = b"A2ACP-RECOVERY-V1\0";

/// The identity key `identity_key` of `address` binds the recovery key `recovery_key`.
/// Wire form: `{"type":"recovery_key","address":…,"identity_key":…,"recovery_key":…,
/// "seq":N,"sig":…}` (byte arrays as unpadded base64url).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "recovery_key")]
pub struct RecoveryBinding {
    /// The agent.
    pub address: Address,
    /// The identity key that signs the binding (the address's key when it was made).
    #[serde(with = "b64_array")]
    pub identity_key: [u8; 32],
    /// The recovery key's public part.
    #[serde(with = "b64_array")]
    pub recovery_key: [u8; 32],
    /// Binding number: 1 for the first binding of the address, one more for each that
    /// replaces it.
    pub seq: u64,
    /// Ed25519 signature by `identity_key` over [`RecoveryBinding::signed_bytes`].
    #[serde(with = "b64_array")]
    pub sig: [u8; 64],
}

/// The recovery key of `address` moves it from `old_key` to `new_key`. Wire form:
/// `{"type":"key_recovery","address":…,"old_key":…,"new_key":…,"recovery_key":…,
/// "recovery_sig":…,"new_sig":…}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "key_recovery")]
pub struct RecoveryStatement {
    /// The agent whose key is recovered.
    pub address: Address,
    /// The key it leaves (the lost one: the address's current key at the relay).
    #[serde(with = "b64_array")]
    pub old_key: [u8; 32],
    /// The new device's identity key.
    #[serde(with = "b64_array")]
    pub new_key: [u8; 32],
    /// The recovery key that signs.
    #[serde(with = "b64_array")]
    pub recovery_key: [u8; 32],
    /// Signature by `recovery_key` over [`RecoveryStatement::signed_bytes`].
    #[serde(with = "b64_array")]
    pub recovery_sig: [u8; 64],
    /// Signature by `new_key` over the same bytes (proof of possession).
    #[serde(with = "b64_array")]
    pub new_sig: [u8; 64],
}

/// What a relay's lookup carries after a recovery: the binding the relay checked the
/// statement against, and the statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryProof {
    /// The binding of the recovery key that signed.
    pub binding: RecoveryBinding,
    /// The statement.
    pub statement: RecoveryStatement,
}

/// Why a binding or a statement does not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecoveryError {
    /// A key is not a valid Ed25519 point.
    #[error("a key of the statement is not a valid public key")]
    BadKey,
    /// Two keys that must differ are the same.
    #[error("the statement names the same key twice")]
    SameKey,
    /// A binding's `seq` is 0.
    #[error("the binding's number is 0")]
    BadSeq,
    /// The identity key's signature of a binding does not verify.
    #[error("the identity key's signature does not verify")]
    IdentitySignature,
    /// The recovery key's signature does not verify.
    #[error("the recovery key's signature does not verify")]
    RecoverySignature,
    /// The new key's signature does not verify.
    #[error("the new key's signature does not verify")]
    NewSignature,
}

impl RecoveryError {
    /// A short machine-readable name, used as the reason of a refusal.
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryError::BadKey => "bad_key",
            RecoveryError::SameKey => "same_key",
            RecoveryError::BadSeq => "bad_seq",
            RecoveryError::IdentitySignature => "identity_signature",
            RecoveryError::RecoverySignature => "recovery_signature",
            RecoveryError::NewSignature => "new_signature",
        }
    }
}

/// The recovery key of a 32-byte seed (the secret the 24 words encode).
pub fn recovery_key_from_seed(seed: [u8; 32]) -> IdentityKey {
    IdentityKey::from_seed(seed)
}

impl RecoveryBinding {
    /// The binding of `recovery` (its public part) to `address`, number `seq`, signed by
    /// `identity`.
    pub fn sign(address: &Address, identity: &IdentityKey, recovery: &[u8; 32], seq: u64) -> Self {
        let mut b = RecoveryBinding {
            address: address.clone(),
            identity_key: identity.public_ref().to_bytes(),
            recovery_key: *recovery,
            seq,
            sig: [0; 64],
        };
        b.sig = identity.sign(&b.signed_bytes());
        b
    }

    /// The bytes the identity key signs: `"A2ACP-RECOVERY-KEY-V1\0" || lp(address) ||
    /// identity_key(32) || recovery_key(32) || seq (u64 big-endian)`, `lp(x)` being the
    /// 4-byte big-endian length of `x` then `x`.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(RECOVERY_KEY_LABEL.len() + 4 + 120);
        b.extend_from_slice(RECOVERY_KEY_LABEL);
        put_lp(&mut b, self.address.as_str().as_bytes());
        b.extend_from_slice(&self.identity_key);
        b.extend_from_slice(&self.recovery_key);
        b.extend_from_slice(&self.seq.to_be_bytes());
        b
    }

    /// Checks the binding on its own: both keys valid and different, `seq` at least 1,
    /// the signature. Whether `identity_key` is the key to trust is the caller's question.
    pub fn verify(&self) -> Result<PublicKey, RecoveryError> {
        if self.identity_key == self.recovery_key {
            return Err(RecoveryError::SameKey);
        }
        if self.seq == 0 {
            return Err(RecoveryError::BadSeq);
        }
        let id = PublicKey::from_bytes(&self.identity_key).map_err(|_| RecoveryError::BadKey)?;
        let rk = PublicKey::from_bytes(&self.recovery_key).map_err(|_| RecoveryError::BadKey)?;
        id.verify(&self.signed_bytes(), &self.sig)
            .map_err(|_| RecoveryError::IdentitySignature)?;
        Ok(rk)
    }
}

impl RecoveryStatement {
    /// The statement moving `address` from `old_key` to `new`, signed by `recovery` and by
    /// `new`.
    pub fn sign(
        address: &Address,
        old_key: &[u8; 32],
        new: &IdentityKey,
        recovery: &IdentityKey,
    ) -> Self {
        let mut s = RecoveryStatement {
            address: address.clone(),
            old_key: *old_key,
            new_key: new.public_ref().to_bytes(),
            recovery_key: recovery.public_ref().to_bytes(),
            recovery_sig: [0; 64],
            new_sig: [0; 64],
        };
        let msg = s.signed_bytes();
        s.recovery_sig = recovery.sign(&msg);
        s.new_sig = new.sign(&msg);
        s
    }

    /// The bytes both keys sign: `"A2ACP-RECOVERY-V1\0" || lp(address) || old_key(32) ||
    /// new_key(32) || recovery_key(32)`.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(RECOVERY_LABEL.len() + 4 + 140);
        b.extend_from_slice(RECOVERY_LABEL);
        put_lp(&mut b, self.address.as_str().as_bytes());
        b.extend_from_slice(&self.old_key);
        b.extend_from_slice(&self.new_key);
        b.extend_from_slice(&self.recovery_key);
        b
    }

    /// Checks the statement on its own: the three keys valid, new and old different, new
    /// and recovery different, both signatures. The new key when it holds.
    pub fn verify(&self) -> Result<PublicKey, RecoveryError> {
        if self.old_key == self.new_key || self.new_key == self.recovery_key {
            return Err(RecoveryError::SameKey);
        }
        PublicKey::from_bytes(&self.old_key).map_err(|_| RecoveryError::BadKey)?;
        let new = PublicKey::from_bytes(&self.new_key).map_err(|_| RecoveryError::BadKey)?;
        let rk = PublicKey::from_bytes(&self.recovery_key).map_err(|_| RecoveryError::BadKey)?;
        let msg = self.signed_bytes();
        rk.verify(&msg, &self.recovery_sig)
            .map_err(|_| RecoveryError::RecoverySignature)?;
        new.verify(&msg, &self.new_sig)
            .map_err(|_| RecoveryError::NewSignature)?;
        Ok(new)
    }
}

impl RecoveryProof {
    /// Verifies the chain from `pinned`, the key a peer holds for `address`: the binding
    /// is `address`'s, signed by `pinned`, names the recovery key that signed the
    /// statement, and the statement leaves `pinned`. The new key when it holds.
    pub fn verify_from(&self, address: &Address, pinned: &[u8; 32]) -> Option<PublicKey> {
        let (b, s) = (&self.binding, &self.statement);
        if &b.address != address || &s.address != address {
            return None;
        }
        if &b.identity_key != pinned || &s.old_key != pinned || b.recovery_key != s.recovery_key {
            return None;
        }
        b.verify().ok()?;
        s.verify().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::b64_encode;

    fn alice() -> Address {
        Address::parse("agent:alice@example.org").unwrap()
    }

    /// Identity key seed 0x01…, recovery key seed 0x02…, new key seed 0x03….
    fn keys() -> (IdentityKey, IdentityKey, IdentityKey) {
        (
            IdentityKey::from_seed([1; 32]),
            recovery_key_from_seed([2; 32]),
            IdentityKey::from_seed([3; 32]),
        )
    }

    #[test]
    fn signed_bytes_are_the_documented_framing() {
        let (id, rk, new) = keys();
        let rpub = rk.public().to_bytes();
        let b = RecoveryBinding::sign(&alice(), &id, &rpub, 1);
        let mut want = b"A2ACP-RECOVERY-KEY-V1\0".to_vec();
        want.extend_from_slice(&23u32.to_be_bytes());
        want.extend_from_slice(b"agent:alice@example.org");
        want.extend_from_slice(&id.public().to_bytes());
        want.extend_from_slice(&rpub);
        want.extend_from_slice(&1u64.to_be_bytes());
        assert_eq!(b.signed_bytes(), want);
        let s = RecoveryStatement::sign(&alice(), &id.public().to_bytes(), &new, &rk);
        let mut want = b"A2ACP-RECOVERY-V1\0".to_vec();
        want.extend_from_slice(&23u32.to_be_bytes());
        want.extend_from_slice(b"agent:alice@example.org");
        want.extend_from_slice(&id.public().to_bytes());
        want.extend_from_slice(&new.public().to_bytes());
        want.extend_from_slice(&rpub);
        assert_eq!(s.signed_bytes(), want);
    }

    /// The worked example of SPEC-NOTES "Recovery" (seeds 0x01…, 0x02…, 0x03…).
    #[test]
    fn worked_example_vector() {
        let (id, rk, new) = keys();
        let rpub = rk.public().to_bytes();
        let b = RecoveryBinding::sign(&alice(), &id, &rpub, 1);
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"type":"recovery_key","address":"agent:alice@example.org","identity_key":"{}","recovery_key":"{}","seq":1,"sig":"{}"}}"#,
                b64_encode(&b.identity_key),
                b64_encode(&b.recovery_key),
                b64_encode(&b.sig)
            )
        );
        assert_eq!(
            b64_encode(&b.identity_key),
            "iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w"
        );
        assert_eq!(
            b64_encode(&b.recovery_key),
            "gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q"
        );
        assert_eq!(b64_encode(&b.sig), BINDING_SIG);
        let s = RecoveryStatement::sign(&alice(), &id.public().to_bytes(), &new, &rk);
        assert_eq!(b64_encode(&s.new_key), NEW_KEY);
        assert_eq!(b64_encode(&s.recovery_sig), RECOVERY_SIG);
        assert_eq!(b64_encode(&s.new_sig), NEW_SIG);
        let back: RecoveryBinding = serde_json::from_str(&json).unwrap();
        assert_eq!(back, b);
        let sj = serde_json::to_string(&s).unwrap();
        assert!(sj.starts_with(
            r#"{"type":"key_recovery","address":"agent:alice@example.org","old_key":"#
        ));
        let back: RecoveryStatement = serde_json::from_str(&sj).unwrap();
        assert_eq!(back, s);
        let proof = RecoveryProof {
            binding: b,
            statement: s,
        };
        assert!(proof
            .verify_from(&alice(), &id.public().to_bytes())
            .is_some());
    }

    const BINDING_SIG: &str =
        "BGiF3M_dG6G-DiceKOnOrUB_ameWauRhTcG0zCB3O4KCTv940wdAs7QurMa4IB9EMtP94plNcm1VamIZ9lP0Dw";
    const NEW_KEY: &str = "7UkoxijRwsbq6QM4kFmVYSlZJzpcY_k2NsFGFKyHN9E";
    const RECOVERY_SIG: &str =
        "K-_h148Ti0Wl6RAvFqYf3zfLLg72B-Oa1_ohZzJqabkBHTyqeKS3pnHj9UKPchiuA5Rh7I1DVEP_KQBA13VpBw";
    const NEW_SIG: &str =
        "J6sHETjGCdt_1rhf79J_4eNRWYrVfaFa_m9NqE63W5RUcCylrbOfWw5WRIPIpMsSWzGroPf_LkU1V8mSKtSqAg";

    #[test]
    fn every_tampering_is_refused() {
        let (id, rk, new) = keys();
        let rpub = rk.public().to_bytes();
        let b = RecoveryBinding::sign(&alice(), &id, &rpub, 1);
        assert_eq!(b.verify().map(|k| k.to_bytes()), Ok(rpub));
        let mut t = b.clone();
        t.seq = 2;
        assert_eq!(t.verify().err(), Some(RecoveryError::IdentitySignature));
        let mut t = b.clone();
        t.recovery_key = new.public().to_bytes();
        assert_eq!(t.verify().err(), Some(RecoveryError::IdentitySignature));
        let t = RecoveryBinding::sign(&alice(), &id, &rpub, 0);
        assert_eq!(t.verify().err(), Some(RecoveryError::BadSeq));
        let t = RecoveryBinding::sign(&alice(), &id, &id.public().to_bytes(), 1);
        assert_eq!(t.verify().err(), Some(RecoveryError::SameKey));

        let old = id.public().to_bytes();
        let s = RecoveryStatement::sign(&alice(), &old, &new, &rk);
        assert!(s.verify().is_ok());
        let mut t = s.clone();
        t.old_key = rpub;
        assert_eq!(t.verify().err(), Some(RecoveryError::RecoverySignature));
        let mut t = s.clone();
        t.new_sig = t.recovery_sig;
        assert_eq!(t.verify().err(), Some(RecoveryError::NewSignature));
        // Signed by a key that is not the recovery key it names.
        let wrong = IdentityKey::from_seed([9; 32]);
        let mut t = RecoveryStatement::sign(&alice(), &old, &new, &wrong);
        t.recovery_key = rpub;
        assert_eq!(t.verify().err(), Some(RecoveryError::RecoverySignature));
        let t = RecoveryStatement::sign(&alice(), &new.public().to_bytes(), &new, &rk);
        assert_eq!(t.verify().err(), Some(RecoveryError::SameKey));
        let mut t = s.clone();
        t.new_key = [0xff; 32];
        assert!(t.verify().is_err());
    }

    #[test]
    fn the_chain_needs_the_pinned_key_the_address_and_the_bound_recovery_key() {
        let (id, rk, new) = keys();
        let rpub = rk.public().to_bytes();
        let old = id.public().to_bytes();
        let proof = RecoveryProof {
            binding: RecoveryBinding::sign(&alice(), &id, &rpub, 1),
            statement: RecoveryStatement::sign(&alice(), &old, &new, &rk),
        };
        assert!(proof.verify_from(&alice(), &old).is_some());
        assert!(proof
            .verify_from(&alice(), &new.public().to_bytes())
            .is_none());
        let bob = Address::parse("agent:bob@example.org").unwrap();
        assert!(proof.verify_from(&bob, &old).is_none());
        // Another recovery key signed the statement than the one bound.
        let other = recovery_key_from_seed([7; 32]);
        let mut p = proof.clone();
        p.statement = RecoveryStatement::sign(&alice(), &old, &new, &other);
        assert!(p.verify_from(&alice(), &old).is_none());
        // A binding signed by a key other than the pinned one.
        let mut p = proof;
        p.binding = RecoveryBinding::sign(&alice(), &new, &rpub, 1);
        assert!(p.verify_from(&alice(), &old).is_none());
    }
}
