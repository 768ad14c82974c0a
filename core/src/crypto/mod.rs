//! Identity keys, primitives and the end-to-end envelope (spec §16, docs/protocol.md "The
//! end-to-end envelope").
//!
//! - [`IdentityKey`] / [`PublicKey`]: an agent's Ed25519 identity (RFC 8032). The same key,
//!   mapped birationally to Curve25519, is the identity's static X25519 key.
//! - [`primitives`]: thin, length-checked wrappers over XChaCha20-Poly1305, Ed25519
//!   (`verify_strict`) and X25519 (contributory check); Wycheproof drives exactly these.
//! - [`ThreadSession`]: per-thread ephemeral key agreement, sealing and opening of
//!   [`Envelope`]s.
//! - [`verify_envelope`]: the outer signature check a relay performs.
//!
//! Nothing here reads a clock or draws OS randomness: secrets come from the caller.

pub mod envelope;
pub mod primitives;
pub mod session;

use std::fmt;
use std::str::FromStr;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::encoding::{b64_decode, b64_encode};

pub use envelope::{Direction, Envelope};
pub use session::{Opened, ThreadSession};

/// Envelope format version written and accepted by this implementation.
pub const ENVELOPE_VERSION: u8 = 1;

/// Label prefixed to a thread id before hashing it into a thread tag.
pub const THREAD_TAG_LABEL: &[u8] = b"A2ACP-THREAD-TAG-V1\0";
/// Label prefixed to the bytes covered by the outer (relay-visible) envelope signature.
pub const ENVELOPE_SIG_LABEL: &[u8] = b"A2ACP-ENVELOPE-V1\0";
/// Label prefixed to the AEAD associated data.
pub const AD_LABEL: &[u8] = b"A2ACP-AD-V1\0";
/// HKDF-SHA256 salt used for every envelope key.
pub const KDF_SALT: &[u8] = b"A2ACP-KDF-V1";

/// Why a cryptographic operation was refused. One variant per distinct reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// An input had the wrong length (or is too long to be length-prefixed).
    #[error("bad length: {what}")]
    BadLength {
        /// Which input.
        what: &'static str,
    },
    /// Bytes that are not an acceptable Ed25519 public key: not a point, a non-canonical
    /// encoding, a small-order point, or a point with a torsion component.
    #[error("invalid Ed25519 public key")]
    InvalidPublicKey,
    /// An Ed25519 signature (the outer envelope signature, or a bare signature) failed
    /// strict verification.
    #[error("bad signature")]
    BadSignature,
    /// An X25519 agreement produced the all-zero output (a low-order point was supplied).
    #[error("non-contributory key agreement (low-order point)")]
    NonContributory,
    /// AEAD authentication failed.
    #[error("decryption failed")]
    DecryptFailed,
    /// The envelope is addressed to someone else.
    #[error("envelope is not addressed to this agent")]
    WrongRecipient,
    /// The envelope's `from_key` is not the key the caller expects for the sender.
    #[error("envelope sender key does not match the expected key")]
    WrongSenderKey,
    /// The envelope's direction is not the one expected (e.g. a reflected envelope).
    #[error("envelope direction is not the expected one")]
    WrongDirection,
    /// The envelope version is not supported.
    #[error("unsupported envelope version {0}")]
    UnsupportedVersion(u8),
    /// The envelope was agreed with an ephemeral key that is not this session's.
    #[error("envelope names an ephemeral key this session does not have")]
    UnknownEphemeral,
    /// The peer's ephemeral key differs from the one recorded for this thread.
    #[error("peer ephemeral key changed within a thread")]
    PeerEphemeralChanged,
    /// The thread tag does not match the thread id inside, or the thread this session is
    /// bound to.
    #[error("thread tag mismatch")]
    ThreadTagMismatch,
    /// The session's ephemeral secret has been erased; it can no longer seal or open.
    #[error("session erased")]
    SessionErased,
    /// The session's send counter is exhausted (2^64 envelopes).
    #[error("send counter exhausted")]
    CounterExhausted,
    /// Structurally invalid input.
    #[error("malformed: {0}")]
    Malformed(&'static str),
}

/// SHA-256(`"A2ACP-THREAD-TAG-V1\0"` || thread_id), first 16 bytes.
pub fn thread_tag(thread_id: &str) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(THREAD_TAG_LABEL);
    h.update(thread_id.as_bytes());
    let d = h.finalize();
    let mut tag = [0u8; 16];
    for (t, b) in tag.iter_mut().zip(d) {
        *t = b;
    }
    tag
}

/// Appends `lp(x)`: the 4-byte big-endian length of `x`, then `x`.
///
/// Callers check beforehand (with [`check_lp`]) that inputs which may be long fit in a u32;
/// an oversized input would be refused there, never truncated silently.
pub(crate) fn put_lp(buf: &mut Vec<u8>, x: &[u8]) {
    let n = u32::try_from(x.len()).unwrap_or(u32::MAX);
    buf.extend_from_slice(&n.to_be_bytes());
    buf.extend_from_slice(x);
}

/// Refuses inputs whose length does not fit the 4-byte length prefix.
pub(crate) fn check_lp(x: &[u8], what: &'static str) -> Result<(), CryptoError> {
    if u32::try_from(x.len()).is_ok() {
        Ok(())
    } else {
        Err(CryptoError::BadLength { what })
    }
}

/// An agent's Ed25519 identity signing key.
///
/// `Debug` prints only the public key.
#[derive(Clone)]
pub struct IdentityKey {
    signing: SigningKey,
    public: PublicKey,
}

impl IdentityKey {
    /// The identity key with the given 32-byte RFC 8032 seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let signing = SigningKey::from_bytes(&seed);
        let public = PublicKey::from_verifying_key(signing.verifying_key());
        IdentityKey { signing, public }
    }

    /// A fresh identity key from 32 bytes of the deterministic generator.
    pub fn generate(rng: &mut crate::rng::DetRng) -> Self {
        Self::from_seed(rng.bytes32())
    }

    /// The 32-byte seed (the secret; persist it with care).
    pub fn seed(&self) -> [u8; 32] {
        self.signing.to_bytes()
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        self.public.clone()
    }

    /// A reference to the public half, without cloning.
    pub fn public_ref(&self) -> &PublicKey {
        &self.public
    }

    /// An Ed25519 signature over `msg`.
    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.signing.sign(msg).to_bytes()
    }

    /// The identity's static X25519 secret: the first half of SHA-512(seed), as
    /// libsodium's `crypto_sign_ed25519_sk_to_curve25519` (clamping happens on use).
    pub(crate) fn x25519_secret(&self) -> x25519_dalek::StaticSecret {
        x25519_dalek::StaticSecret::from(self.signing.to_scalar_bytes())
    }
}

/// Two identity keys are equal when their public halves are (the seed determines both).
impl PartialEq for IdentityKey {
    fn eq(&self, other: &Self) -> bool {
        self.public == other.public
    }
}

impl fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityKey")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

/// An Ed25519 identity public key, validated and decompressed once at construction.
///
/// Equality, ordering and hashing are by the 32 encoded bytes. Serialised as a base64url
/// string; deserialisation applies the same checks as [`PublicKey::from_bytes`].
#[derive(Clone)]
pub struct PublicKey {
    bytes: [u8; 32],
    vk: VerifyingKey,
    x25519: [u8; 32],
}

impl PublicKey {
    /// Parses and validates a public key. Refuses encodings that do not decompress to a
    /// curve point, non-canonical encodings, small-order ("weak") points and points with a
    /// torsion component (which libsodium's `crypto_sign_ed25519_pk_to_curve25519` refuses).
    pub fn from_bytes(b: &[u8; 32]) -> Result<Self, CryptoError> {
        let vk = VerifyingKey::from_bytes(b).map_err(|_| CryptoError::InvalidPublicKey)?;
        if vk.is_weak() {
            return Err(CryptoError::InvalidPublicKey);
        }
        let point = vk.to_edwards();
        if point.compress().to_bytes() != *b || !point.is_torsion_free() {
            return Err(CryptoError::InvalidPublicKey);
        }
        Ok(Self::from_verifying_key(vk))
    }

    /// A key read back from this agent's (or relay's) own store, validated with
    /// [`PublicKey::from_bytes`] before it was stored: decompressed, not validated again
    /// (the torsion check is a full scalar multiplication). Never use it for bytes that
    /// came from the network.
    pub fn from_stored_bytes(b: &[u8; 32]) -> Result<Self, CryptoError> {
        let vk = VerifyingKey::from_bytes(b).map_err(|_| CryptoError::InvalidPublicKey)?;
        Ok(Self::from_verifying_key(vk))
    }

    fn from_verifying_key(vk: VerifyingKey) -> Self {
        PublicKey {
            bytes: vk.to_bytes(),
            x25519: vk.to_montgomery().to_bytes(),
            vk,
        }
    }

    /// The 32-byte encoding.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.bytes
    }

    /// The identity's static X25519 public key (the birational map of the Ed25519 point,
    /// as libsodium's `crypto_sign_ed25519_pk_to_curve25519`).
    pub fn to_x25519(&self) -> [u8; 32] {
        self.x25519
    }

    /// Verifies an Ed25519 signature with `verify_strict` (canonical S, no small-order R or
    /// key, R compared by encoding).
    pub fn verify(&self, msg: &[u8], sig: &[u8; 64]) -> Result<(), CryptoError> {
        self.vk
            .verify_strict(msg, &Signature::from_bytes(sig))
            .map_err(|_| CryptoError::BadSignature)
    }
}

impl PartialEq for PublicKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for PublicKey {}

impl PartialOrd for PublicKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PublicKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.bytes.cmp(&other.bytes)
    }
}

impl std::hash::Hash for PublicKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes.hash(state)
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", b64_encode(&self.bytes))
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&b64_encode(&self.bytes))
    }
}

impl FromStr for PublicKey {
    type Err = CryptoError;
    /// Parses the base64url (unpadded) form.
    fn from_str(s: &str) -> Result<Self, CryptoError> {
        let v = b64_decode(s).ok_or(CryptoError::Malformed("public key is not base64url"))?;
        let b: [u8; 32] = v
            .try_into()
            .map_err(|_| CryptoError::BadLength { what: "public key" })?;
        PublicKey::from_bytes(&b)
    }
}

impl Serialize for PublicKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&b64_encode(&self.bytes))
    }
}

impl<'de> Deserialize<'de> for PublicKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The outer signature check a relay performs before routing: `v == 1`,
/// `env.from_key == sender_key`, and `verify_strict` of `env.sig` over
/// [`Envelope::signed_bytes`].
pub fn verify_envelope(env: &Envelope, sender_key: &PublicKey) -> Result<(), CryptoError> {
    if env.v != ENVELOPE_VERSION {
        return Err(CryptoError::UnsupportedVersion(env.v));
    }
    if env.from_key != sender_key.to_bytes() {
        return Err(CryptoError::WrongSenderKey);
    }
    check_outer_sig(env, sender_key)
}

/// `verify_strict` of the outer signature alone.
pub(crate) fn check_outer_sig(env: &Envelope, sender_key: &PublicKey) -> Result<(), CryptoError> {
    check_lp(&env.ct, "ciphertext")?;
    sender_key.verify(&env.signed_bytes(), &env.sig)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_round_trip_and_debug_hides_secret() {
        let k = IdentityKey::from_seed([7; 32]);
        assert_eq!(IdentityKey::from_seed(k.seed()).public(), k.public());
        let dbg = format!("{k:?}");
        assert!(dbg.contains(&b64_encode(&k.public().to_bytes())));
        assert!(!dbg.contains(&b64_encode(&k.seed())));
        assert!(!dbg.contains("7, 7"));
        let sig = k.sign(b"hello");
        assert_eq!(k.public().verify(b"hello", &sig), Ok(()));
        assert_eq!(
            k.public().verify(b"hellp", &sig),
            Err(CryptoError::BadSignature)
        );
    }

    #[test]
    fn generate_is_deterministic() {
        let mut r1 = crate::rng::DetRng::from_seed([1; 32]);
        let mut r2 = crate::rng::DetRng::from_seed([1; 32]);
        assert_eq!(
            IdentityKey::generate(&mut r1).seed(),
            IdentityKey::generate(&mut r2).seed()
        );
    }

    #[test]
    fn public_key_serde_and_checks() {
        let pk = IdentityKey::from_seed([3; 32]).public();
        let j = serde_json::to_string(&pk).unwrap();
        assert_eq!(j, format!("\"{}\"", b64_encode(&pk.to_bytes())));
        assert_eq!(serde_json::from_str::<PublicKey>(&j).unwrap(), pk);
        assert!(serde_json::from_str::<PublicKey>("\"AAAA\"").is_err());
        assert!(serde_json::from_str::<PublicKey>("\"!!\"").is_err());
        assert_eq!(format!("{pk:?}"), format!("PublicKey({pk})"));

        // Identity point (small order).
        let mut ident = [0u8; 32];
        ident[0] = 1;
        assert_eq!(
            PublicKey::from_bytes(&ident),
            Err(CryptoError::InvalidPublicKey)
        );
        // All-zero encodes a point of order 4.
        assert_eq!(
            PublicKey::from_bytes(&[0; 32]),
            Err(CryptoError::InvalidPublicKey)
        );
        // Non-canonical y = p + 1 (i.e. the identity with y >= p).
        let mut nc = [0xffu8; 32];
        nc[0] = 0xee;
        nc[31] = 0x7f;
        assert_eq!(
            PublicKey::from_bytes(&nc),
            Err(CryptoError::InvalidPublicKey)
        );
        // A valid key plus a torsion point of order 8 (mixed order).
        // (All-zero bytes decode to a point of order 4.)
        let tors = VerifyingKey::from_bytes(&[0; 32]).unwrap().to_edwards();
        let mixed = (VerifyingKey::from_bytes(&pk.to_bytes())
            .unwrap()
            .to_edwards()
            + tors)
            .compress()
            .to_bytes();
        assert_eq!(
            PublicKey::from_bytes(&mixed),
            Err(CryptoError::InvalidPublicKey)
        );
        // Not on the curve: find a y with no x.
        let mut found = false;
        for i in 2u8..=255 {
            let mut b = [0u8; 32];
            b[0] = i;
            if VerifyingKey::from_bytes(&b).is_err() {
                assert_eq!(
                    PublicKey::from_bytes(&b),
                    Err(CryptoError::InvalidPublicKey)
                );
                found = true;
                break;
            }
        }
        assert!(found);
    }

    #[test]
    fn x25519_map_matches_secret() {
        let k = IdentityKey::from_seed([9; 32]);
        let pub_from_secret = x25519_dalek::PublicKey::from(&k.x25519_secret()).to_bytes();
        assert_eq!(pub_from_secret, k.public().to_x25519());
    }

    #[test]
    fn thread_tag_is_prefix_of_sha256() {
        let t = thread_tag("thr_abc");
        let full = Sha256::digest(b"A2ACP-THREAD-TAG-V1\0thr_abc");
        assert_eq!(&t[..], &full[..16]);
        assert_ne!(thread_tag("thr_abc"), thread_tag("thr_abd"));
    }
}
