//! Key rotation (§16; SPEC-NOTES "Key rotation"): the statement by which an agent moves its
//! address from its identity key to a new one.
//!
//! A [`RotationStatement`] names the address, the key it leaves (`old_key`), the key it
//! takes (`new_key`) and its rotation number `seq` (1 for the first rotation away from the
//! registered key, then one more each time). Both keys sign the same bytes,
//! [`RotationStatement::signed_bytes`]: the old key says "my address moves to this key",
//! the new key proves its holder took part (nobody can rotate an address onto a key they do
//! not hold). The statement is self-authenticating: whoever has `old_key` pinned for
//! `address` can check it with [`RotationStatement::verify`] and nothing else; the relay
//! installs it only when `old_key` is the address's current key, so the same statement
//! can never be used twice (a replay names a key that is no longer current).

use serde::{Deserialize, Serialize};

use crate::address::Address;
use crate::crypto::{IdentityKey, PublicKey};
use crate::encoding::b64_array;

/// Label that starts the bytes both keys sign.
pub const ROTATION_LABEL: &[u8] = b"A2ACP-KEY-ROTATION-V1\0";

/// A signed statement moving `address` from `old_key` to `new_key`. Wire form (JSON, byte
/// arrays as unpadded base64url): `{"type":"key_rotation","address":…,"old_key":…,
/// "new_key":…,"seq":N,"old_sig":…,"new_sig":…}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "key_rotation")]
pub struct RotationStatement {
    /// The agent whose key changes.
    pub address: Address,
    /// The key it leaves (the one its peers and its relay have).
    #[serde(with = "b64_array")]
    pub old_key: [u8; 32],
    /// The key it takes.
    #[serde(with = "b64_array")]
    pub new_key: [u8; 32],
    /// Rotation number: 1 for the first rotation of the address, one more each time.
    pub seq: u64,
    /// Ed25519 signature by `old_key` over [`RotationStatement::signed_bytes`].
    #[serde(with = "b64_array")]
    pub old_sig: [u8; 64],
    /// Ed25519 signature by `new_key` over the same bytes (proof of possession).
    #[serde(with = "b64_array")]
    pub new_sig: [u8; 64],
}

/// Why a statement does not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RotationError {
    /// `old_key` or `new_key` is not a valid Ed25519 point.
    #[error("a key of the statement is not a valid public key")]
    BadKey,
    /// The two keys are the same.
    #[error("the statement rotates a key onto itself")]
    SameKey,
    /// `seq` is 0.
    #[error("the statement's rotation number is 0")]
    BadSeq,
    /// `old_sig` does not verify under `old_key`.
    #[error("the old key's signature does not verify")]
    OldSignature,
    /// `new_sig` does not verify under `new_key`.
    #[error("the new key's signature does not verify")]
    NewSignature,
}

impl RotationError {
    /// A short machine-readable name, used as the reason of a `rotation_refused`.
    pub fn as_str(self) -> &'static str {
        match self {
            RotationError::BadKey => "bad_key",
            RotationError::SameKey => "same_key",
            RotationError::BadSeq => "bad_seq",
            RotationError::OldSignature => "old_signature",
            RotationError::NewSignature => "new_signature",
        }
    }
}

impl RotationStatement {
    /// The statement moving `address` from `old` to `new`, rotation number `seq`, signed by
    /// both keys.
    pub fn sign(address: &Address, old: &IdentityKey, new: &IdentityKey, seq: u64) -> Self {
        let mut s = RotationStatement {
            address: address.clone(),
            old_key: old.public_ref().to_bytes(),
            new_key: new.public_ref().to_bytes(),
            seq,
            old_sig: [0; 64],
            new_sig: [0; 64],
        };
        let msg = s.signed_bytes();
        s.old_sig = old.sign(&msg);
        s.new_sig = new.sign(&msg);
        s
    }

    /// The bytes both keys sign: `"A2ACP-KEY-ROTATION-V1\0" || lp(address) || old_key(32) ||
    /// new_key(32) || seq (u64 big-endian)`, where `lp(x)` is the 4-byte big-endian length
    /// of `x` followed by `x` (the framing of every other signature of the protocol).
    pub fn signed_bytes(&self) -> Vec<u8> {
        let a = self.address.as_str().as_bytes();
        let mut b = Vec::with_capacity(ROTATION_LABEL.len() + 4 + a.len() + 72);
        b.extend_from_slice(ROTATION_LABEL);
        crate::crypto::put_lp(&mut b, a);
        b.extend_from_slice(&self.old_key);
        b.extend_from_slice(&self.new_key);
        b.extend_from_slice(&self.seq.to_be_bytes());
        b
    }

    /// Checks the statement on its own: both keys valid and different, `seq` at least 1,
    /// both signatures. Whether `old_key` is the key to trust is the caller's question
    /// (the relay's current key, a peer's pin).
    pub fn verify(&self) -> Result<PublicKey, RotationError> {
        if self.old_key == self.new_key {
            return Err(RotationError::SameKey);
        }
        if self.seq == 0 {
            return Err(RotationError::BadSeq);
        }
        let old = PublicKey::from_bytes(&self.old_key).map_err(|_| RotationError::BadKey)?;
        let new = PublicKey::from_bytes(&self.new_key).map_err(|_| RotationError::BadKey)?;
        let msg = self.signed_bytes();
        old.verify(&msg, &self.old_sig)
            .map_err(|_| RotationError::OldSignature)?;
        new.verify(&msg, &self.new_sig)
            .map_err(|_| RotationError::NewSignature)?;
        Ok(new)
    }

    /// Verifies the statement and that it moves `address` away from `pinned`: the new key,
    /// when a holder of `pinned` for `address` should trust it.
    pub fn verify_from(&self, address: &Address, pinned: &[u8; 32]) -> Option<PublicKey> {
        if &self.address != address || &self.old_key != pinned {
            return None;
        }
        self.verify().ok()
    }
}

/// How many statements an envelope carries at most: the latest and the ones before it
/// (SPEC-NOTES "Key rotation"), as many as the keys an agent keeps after rotating away
/// from them, so a peer that missed up to that many rotations in a row re-pins.
pub const ROTATION_CHAIN_MAX: usize = 4;

/// The statements of `chain` (in any order) that move `address`, one after the other,
/// from `pinned` to `to`, each verified under the key before it; `None` when they do not
/// (a gap, a statement the pinned key did not sign, more than [`ROTATION_CHAIN_MAX`]).
/// The last item is the key `to` itself.
pub fn follow_chain<'a>(
    address: &Address,
    pinned: &[u8; 32],
    to: &[u8; 32],
    chain: impl IntoIterator<Item = &'a RotationStatement>,
) -> Option<Vec<(&'a RotationStatement, PublicKey)>> {
    let chain: Vec<&RotationStatement> = chain.into_iter().take(ROTATION_CHAIN_MAX).collect();
    let mut at = *pinned;
    let mut path = Vec::new();
    while &at != to {
        if path.len() == chain.len() {
            return None;
        }
        let (s, key) = chain
            .iter()
            .find_map(|s| s.verify_from(address, &at).map(|k| (*s, k)))?;
        at = s.new_key;
        path.push((s, key));
    }
    (!path.is_empty()).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::b64_encode;

    fn alice() -> Address {
        Address::parse("agent:alice@example.org").unwrap()
    }

    fn keys() -> (IdentityKey, IdentityKey) {
        (
            IdentityKey::from_seed([1; 32]),
            IdentityKey::from_seed([2; 32]),
        )
    }

    #[test]
    fn signed_bytes_are_the_documented_framing() {
        let (old, new) = keys();
        let s = RotationStatement::sign(&alice(), &old, &new, 1);
        let b = s.signed_bytes();
        let mut want = b"A2ACP-KEY-ROTATION-V1\0".to_vec();
        want.extend_from_slice(&23u32.to_be_bytes());
        want.extend_from_slice(b"agent:alice@example.org");
        want.extend_from_slice(&old.public().to_bytes());
        want.extend_from_slice(&new.public().to_bytes());
        want.extend_from_slice(&1u64.to_be_bytes());
        assert_eq!(b, want);
    }

    /// The worked example of SPEC-NOTES "Key rotation" (seeds 0x01… and 0x02…).
    #[test]
    fn worked_example_vector() {
        let (old, new) = keys();
        let s = RotationStatement::sign(&alice(), &old, &new, 1);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"type":"key_rotation","address":"agent:alice@example.org","old_key":"{}","new_key":"{}","seq":1,"old_sig":"{}","new_sig":"{}"}}"#,
                b64_encode(&s.old_key),
                b64_encode(&s.new_key),
                b64_encode(&s.old_sig),
                b64_encode(&s.new_sig)
            )
        );
        assert_eq!(
            b64_encode(&s.old_key),
            "iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w"
        );
        assert_eq!(
            b64_encode(&s.new_key),
            "gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q"
        );
        assert_eq!(b64_encode(&s.old_sig), "_W6VHBVwy26wQcKC0DU6RL3v-y8rk1mI48blFX62iGx9LNFtrw8RlSmsIjE-a25JBh9gMYq51UmwFKKFDJtsBg");
        assert_eq!(b64_encode(&s.new_sig), "jisBdKaWm4tCiaN3GWDJvuj-7FChHt1_PoUCEwKHDrkDMBZBeutQR9KxcvNXizZxvNscZD8A-qnVCdF2HDgMBw");
        let back: RotationStatement = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        assert!(back.verify().is_ok());
    }

    #[test]
    fn every_tampering_is_refused() {
        let (old, new) = keys();
        let s = RotationStatement::sign(&alice(), &old, &new, 1);
        assert_eq!(
            s.verify().map(|k| k.to_bytes()),
            Ok(new.public().to_bytes())
        );
        let mut t = s.clone();
        t.seq = 2;
        assert_eq!(t.verify().err(), Some(RotationError::OldSignature));
        let mut t = s.clone();
        t.address = Address::parse("agent:mallory@example.org").unwrap();
        assert_eq!(t.verify().err(), Some(RotationError::OldSignature));
        let mut t = s.clone();
        t.new_sig = t.old_sig;
        assert_eq!(t.verify().err(), Some(RotationError::NewSignature));
        // Signed by a key that is not the old one.
        let wrong = IdentityKey::from_seed([3; 32]);
        let mut t = RotationStatement::sign(&alice(), &wrong, &new, 1);
        t.old_key = old.public().to_bytes();
        assert_eq!(t.verify().err(), Some(RotationError::OldSignature));
        let t = RotationStatement::sign(&alice(), &old, &old, 1);
        assert_eq!(t.verify().err(), Some(RotationError::SameKey));
        let t = RotationStatement::sign(&alice(), &old, &new, 0);
        assert_eq!(t.verify().err(), Some(RotationError::BadSeq));
        let mut t = s.clone();
        t.new_key = [0xff; 32];
        assert!(t.verify().is_err());
    }

    #[test]
    fn verify_from_needs_the_pinned_key_and_the_address() {
        let (old, new) = keys();
        let s = RotationStatement::sign(&alice(), &old, &new, 1);
        let a = alice();
        assert!(s.verify_from(&a, &old.public().to_bytes()).is_some());
        assert!(s.verify_from(&a, &new.public().to_bytes()).is_none());
        let bob = Address::parse("agent:bob@example.org").unwrap();
        assert!(s.verify_from(&bob, &old.public().to_bytes()).is_none());
    }
}
