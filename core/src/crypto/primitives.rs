//! Thin, length-checked wrappers over the three primitives the envelope uses.
//!
//! These are exactly the functions the Wycheproof test (`tests/wycheproof.rs`) drives, and
//! the envelope code calls the same internals, so the vectors cover the production path.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use x25519_dalek::StaticSecret;

use super::{CryptoError, PublicKey};

/// XChaCha20-Poly1305 key length.
pub const AEAD_KEY_LEN: usize = 32;
/// XChaCha20-Poly1305 nonce length.
pub const AEAD_NONCE_LEN: usize = 24;
/// Poly1305 tag length.
pub const AEAD_TAG_LEN: usize = 16;

fn aead_cipher(key: &[u8]) -> Result<XChaCha20Poly1305, CryptoError> {
    if key.len() != AEAD_KEY_LEN {
        return Err(CryptoError::BadLength { what: "aead key" });
    }
    XChaCha20Poly1305::new_from_slice(key).map_err(|_| CryptoError::BadLength { what: "aead key" })
}

fn aead_nonce(nonce: &[u8]) -> Result<&XNonce, CryptoError> {
    if nonce.len() != AEAD_NONCE_LEN {
        return Err(CryptoError::BadLength { what: "aead nonce" });
    }
    Ok(XNonce::from_slice(nonce))
}

/// XChaCha20-Poly1305 encryption: `key` 32 bytes, `nonce` 24 bytes; returns
/// ciphertext || 16-byte tag.
pub fn aead_seal(
    key: &[u8],
    nonce: &[u8],
    aad: &[u8],
    plaintext: &[u8],
) -> Result<Vec<u8>, CryptoError> {
    seal_with(&aead_cipher(key)?, nonce, aad, plaintext)
}

/// XChaCha20-Poly1305 decryption of ciphertext || tag. Any authentication failure,
/// including input shorter than a tag, is [`CryptoError::DecryptFailed`].
pub fn aead_open(
    key: &[u8],
    nonce: &[u8],
    aad: &[u8],
    ct_and_tag: &[u8],
) -> Result<Vec<u8>, CryptoError> {
    open_with(&aead_cipher(key)?, nonce, aad, ct_and_tag)
}

/// [`aead_seal`] with an already keyed cipher (the session caches these).
pub(crate) fn seal_with(
    cipher: &XChaCha20Poly1305,
    nonce: &[u8],
    aad: &[u8],
    plaintext: &[u8],
) -> Result<Vec<u8>, CryptoError> {
    let nonce = aead_nonce(nonce)?;
    cipher
        .encrypt(
            nonce,
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .map_err(|_| CryptoError::BadLength { what: "plaintext" })
}

/// [`aead_open`] with an already keyed cipher.
pub(crate) fn open_with(
    cipher: &XChaCha20Poly1305,
    nonce: &[u8],
    aad: &[u8],
    ct_and_tag: &[u8],
) -> Result<Vec<u8>, CryptoError> {
    let nonce = aead_nonce(nonce)?;
    if ct_and_tag.len() < AEAD_TAG_LEN {
        return Err(CryptoError::DecryptFailed);
    }
    cipher
        .decrypt(
            nonce,
            Payload {
                msg: ct_and_tag,
                aad,
            },
        )
        .map_err(|_| CryptoError::DecryptFailed)
}

/// A keyed cipher from a 32-byte derived key.
pub(crate) fn cipher_from_key(key: &[u8; 32]) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(key.into())
}

/// Ed25519 verification with `verify_strict`. `public` must be 32 bytes and an acceptable
/// key (see [`PublicKey::from_bytes`]); `sig` must be 64 bytes.
pub fn verify(public: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), CryptoError> {
    let public: &[u8; 32] = public
        .try_into()
        .map_err(|_| CryptoError::BadLength { what: "public key" })?;
    let sig: &[u8; 64] = sig
        .try_into()
        .map_err(|_| CryptoError::BadLength { what: "signature" })?;
    PublicKey::from_bytes(public)?.verify(msg, sig)
}

/// X25519 (RFC 7748) of `secret` (clamped on use) and `public` (32 bytes, high bit
/// ignored). Refuses low-order points: an all-zero output is
/// [`CryptoError::NonContributory`].
pub fn agree(secret: &[u8; 32], public: &[u8]) -> Result<[u8; 32], CryptoError> {
    let secret = StaticSecret::from(*secret);
    agree_with(&secret, public)
}

/// [`agree`] with a secret already held as a [`StaticSecret`] (zeroised on drop).
pub(crate) fn agree_with(secret: &StaticSecret, public: &[u8]) -> Result<[u8; 32], CryptoError> {
    let public: [u8; 32] = public.try_into().map_err(|_| CryptoError::BadLength {
        what: "x25519 public key",
    })?;
    let shared = secret.diffie_hellman(&x25519_dalek::PublicKey::from(public));
    if !shared.was_contributory() {
        return Err(CryptoError::NonContributory);
    }
    Ok(shared.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aead_round_trip_and_lengths() {
        let key = [1u8; 32];
        let nonce = [2u8; 24];
        let ct = aead_seal(&key, &nonce, b"ad", b"hello").unwrap();
        assert_eq!(ct.len(), 5 + AEAD_TAG_LEN);
        assert_eq!(aead_open(&key, &nonce, b"ad", &ct).unwrap(), b"hello");
        assert_eq!(
            aead_open(&key, &nonce, b"ae", &ct),
            Err(CryptoError::DecryptFailed)
        );
        assert_eq!(
            aead_open(&key, &nonce, b"ad", &ct[..15]),
            Err(CryptoError::DecryptFailed)
        );
        assert!(matches!(
            aead_seal(&key[..31], &nonce, b"", b""),
            Err(CryptoError::BadLength { .. })
        ));
        assert!(matches!(
            aead_open(&key, &nonce[..12], b"", &ct),
            Err(CryptoError::BadLength { .. })
        ));
    }

    #[test]
    fn verify_lengths() {
        let k = super::super::IdentityKey::from_seed([5; 32]);
        let sig = k.sign(b"m");
        let pk = k.public().to_bytes();
        assert_eq!(verify(&pk, b"m", &sig), Ok(()));
        assert!(matches!(
            verify(&pk[..31], b"m", &sig),
            Err(CryptoError::BadLength { .. })
        ));
        assert!(matches!(
            verify(&pk, b"m", &sig[..63]),
            Err(CryptoError::BadLength { .. })
        ));
        assert_eq!(verify(&pk, b"n", &sig), Err(CryptoError::BadSignature));
    }

    #[test]
    fn low_order_points_refused() {
        // The low-order points of Curve25519 (and their non-canonical encodings).
        let low_order: [[u8; 32]; 7] = [
            [0; 32],
            {
                let mut b = [0u8; 32];
                b[0] = 1;
                b
            },
            hex32("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
            hex32("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157"),
            hex32("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
            hex32("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
            hex32("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
        ];
        for p in low_order {
            assert_eq!(
                agree(&[0x42; 32], &p),
                Err(CryptoError::NonContributory),
                "{p:?}"
            );
        }
        assert!(matches!(
            agree(&[0x42; 32], &[9u8; 31]),
            Err(CryptoError::BadLength { .. })
        ));
        let mut base = [0u8; 32];
        base[0] = 9;
        assert!(agree(&[0x42; 32], &base).is_ok());
    }

    fn hex32(s: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }
}
