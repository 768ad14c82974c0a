//! End-to-end encryption of an ACP body (seed 004 §7: "messages containing confidential
//! or restricted information MUST be encrypted before signing"), with the primitives of
//! the a2acp envelope: X25519 from a fresh ephemeral key to the recipient's static X25519
//! key (the birational map of its Ed25519 identity key), HKDF-SHA256, XChaCha20-Poly1305.
//! The encrypted body replaces the body and is then signed like any other:
//!
//! ```json
//! {"encrypted": {"alg": "X25519-XChaCha20-Poly1305", "eph": "<b64url 32 B>", "ct": "<b64url>"}}
//! ```
//!
//! SPEC-NOTES "ACP (seed 004)" and docs/protocol.md give every byte.

use hkdf::Hkdf;
use serde_json::{json, Map, Value};
use sha2::Sha256;

use crate::bridge::acp::error::AcpError;
use crate::crypto::primitives::{aead_open, aead_seal, agree};
use crate::crypto::{put_lp, IdentityKey, PublicKey};
use crate::encoding::{b64_decode, b64_encode};
use crate::memory::canonical::rfc8785;

/// The `alg` of an encrypted body.
pub const ALG: &str = "X25519-XChaCha20-Poly1305";
/// HKDF salt of the body key.
pub const BODY_SALT: &[u8] = b"A2ACP-ACP-BODY-V1";
/// The label the associated data begins with.
pub const BODY_AD_LABEL: &[u8] = b"A2ACP-ACP-BODY-V1\0";
/// The nonce: 24 zero bytes (each key encrypts one body).
const NONCE: [u8; 24] = [0; 24];

/// Whether `body` is an encrypted body (its one member is `encrypted`).
pub fn is_encrypted(body: &Map<String, Value>) -> bool {
    body.len() == 1 && body.contains_key("encrypted")
}

fn key(
    ikm: &[u8; 32],
    eph: &[u8; 32],
    recipient_x: &[u8; 32],
    from: &str,
    to: &str,
) -> Result<[u8; 32], AcpError> {
    let mut info = Vec::with_capacity(64 + 8 + from.len() + to.len());
    info.extend_from_slice(eph);
    info.extend_from_slice(recipient_x);
    put_lp(&mut info, from.as_bytes());
    put_lp(&mut info, to.as_bytes());
    let mut okm = [0u8; 32];
    Hkdf::<Sha256>::new(Some(BODY_SALT), ikm)
        .expand(&info, &mut okm)
        .map_err(|_| AcpError::Undecryptable("key derivation".into()))?;
    Ok(okm)
}

fn aad(headers: &Value) -> Result<Vec<u8>, AcpError> {
    let mut ad = BODY_AD_LABEL.to_vec();
    ad.extend(rfc8785(headers).map_err(|e| AcpError::InvalidBody(format!("headers: {e}")))?);
    Ok(ad)
}

/// Encrypts `body` from agent `from` to agent `to` (its identity key `to_key`) with the
/// ephemeral secret `eph_secret` (32 bytes the caller's seeded generator drew); `headers`
/// is the message's `headers` object, bound as associated data. The encrypted body.
pub fn seal(
    body: &Map<String, Value>,
    headers: &Value,
    from: &str,
    to: &str,
    to_key: &PublicKey,
    eph_secret: [u8; 32],
) -> Result<Map<String, Value>, AcpError> {
    let recipient_x = to_key.to_x25519();
    let eph =
        x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from(eph_secret)).to_bytes();
    let ikm = agree(&eph_secret, &recipient_x)
        .map_err(|e| AcpError::InvalidBody(format!("key agreement: {e}")))?;
    let k = key(&ikm, &eph, &recipient_x, from, to)?;
    let plain =
        rfc8785(&Value::Object(body.clone())).map_err(|e| AcpError::InvalidBody(e.to_string()))?;
    let ct = aead_seal(&k, &NONCE, &aad(headers)?, &plain)
        .map_err(|e| AcpError::InvalidBody(e.to_string()))?;
    let mut out = Map::new();
    out.insert(
        "encrypted".into(),
        json!({ "alg": ALG, "eph": b64_encode(&eph), "ct": b64_encode(&ct) }),
    );
    Ok(out)
}

/// Opens an encrypted body sent by agent `from` to this agent `to` (its identity
/// `me`), bound to the message's `headers`: the body, which must be a JSON object.
pub fn open(
    body: &Map<String, Value>,
    headers: &Value,
    from: &str,
    to: &str,
    me: &IdentityKey,
) -> Result<Map<String, Value>, AcpError> {
    let bad = |why: &str| AcpError::Undecryptable(why.to_string());
    let e = body
        .get("encrypted")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("`encrypted` is not an object"))?;
    if e.get("alg").and_then(Value::as_str) != Some(ALG) {
        return Err(bad("`alg` is not X25519-XChaCha20-Poly1305"));
    }
    let eph: [u8; 32] = e
        .get("eph")
        .and_then(Value::as_str)
        .and_then(b64_decode)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad("`eph` is not base64url of 32 bytes"))?;
    let ct = e
        .get("ct")
        .and_then(Value::as_str)
        .and_then(b64_decode)
        .ok_or_else(|| bad("`ct` is not base64url"))?;
    let recipient_x = me.public_ref().to_x25519();
    let ikm = agree(&me.x25519_secret().to_bytes(), &eph).map_err(|_| bad("key agreement"))?;
    let k = key(&ikm, &eph, &recipient_x, from, to)?;
    let plain =
        aead_open(&k, &NONCE, &aad(headers)?, &ct).map_err(|_| bad("authentication failed"))?;
    let v: Value = serde_json::from_slice(&plain).map_err(|_| bad("not JSON inside"))?;
    if crate::bridge::acp::message::depth(&v) > crate::bridge::acp::message::MAX_DEPTH {
        return Err(bad("nested too deep inside"));
    }
    match v {
        Value::Object(o) => Ok(o),
        _ => Err(bad("not a JSON object inside")),
    }
}
