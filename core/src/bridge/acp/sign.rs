//! The signature of an ACP message (seed 004 §4.2, §7): Ed25519 with the sender's
//! identity key over [`signed_bytes`] — the label [`SIG_LABEL`] followed by the RFC 8785
//! canonical JSON of the whole message with the container's `signature` member removed.
//! The signature travels as the container's `signature` member, base64url without
//! padding (86 characters). docs/protocol.md "ACP (seed 004)" has a worked example.

use serde_json::{Map, Value};

use crate::bridge::acp::error::AcpError;
use crate::crypto::{IdentityKey, PublicKey};
use crate::encoding::{b64_decode, b64_encode};

/// The domain-separation label the signed bytes begin with (17 bytes, a NUL last).
pub const SIG_LABEL: &[u8] = b"A2ACP-ACP-SIG-V1\0";

fn container_mut(v: &mut Value) -> Option<&mut Map<String, Value>> {
    let o = v.as_object_mut()?;
    let key = ["params", "result", "error"]
        .into_iter()
        .find(|k| o.contains_key(*k))?;
    let c = o.get_mut(key)?;
    let c = if key == "error" {
        c.get_mut("data")?
    } else {
        c
    };
    c.as_object_mut()
}

/// The bytes a message's signature covers: [`SIG_LABEL`] ‖ RFC 8785(the message without
/// its container's `signature`). Fails for a message RFC 8785 has no form of (an integer
/// beyond ±(2^53 − 1)), or one without a container.
pub fn signed_bytes(message: &Value) -> Result<Vec<u8>, AcpError> {
    let mut v = message.clone();
    container_mut(&mut v)
        .ok_or_else(|| AcpError::InvalidRequest("no `params`, `result` or `error.data`".into()))?
        .remove("signature");
    let canonical = crate::memory::canonical::rfc8785(&v)
        .map_err(|e| AcpError::InvalidRequest(format!("no canonical form: {e}")))?;
    let mut out = Vec::with_capacity(SIG_LABEL.len() + canonical.len());
    out.extend_from_slice(SIG_LABEL);
    out.extend_from_slice(&canonical);
    Ok(out)
}

/// Signs `message` in place: its container gets `signature`.
pub fn sign(message: &mut Value, key: &IdentityKey) -> Result<(), AcpError> {
    let sig = key.sign(&signed_bytes(message)?);
    container_mut(message)
        .ok_or_else(|| AcpError::InvalidRequest("no container to sign".into()))?
        .insert("signature".into(), Value::String(b64_encode(&sig)));
    Ok(())
}

/// The signature of a container: present, base64url of 64 bytes.
pub fn read_signature(container: &Map<String, Value>) -> Result<[u8; 64], AcpError> {
    let s = match container.get("signature") {
        None | Some(Value::Null) => return Err(AcpError::BadSignature("no `signature`".into())),
        Some(Value::String(s)) => s,
        Some(_) => return Err(AcpError::BadSignature("`signature` is not a string".into())),
    };
    b64_decode(s)
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .ok_or_else(|| AcpError::BadSignature("`signature` is not base64url of 64 bytes".into()))
}

/// Verifies `message`'s signature against `key` (the sender's registered key).
pub fn verify(message: &Value, key: &PublicKey) -> Result<(), AcpError> {
    let mut v = message.clone();
    let c = container_mut(&mut v).ok_or_else(|| AcpError::BadSignature("no container".into()))?;
    let sig = read_signature(c)?;
    key.verify(&signed_bytes(message)?, &sig).map_err(|_| {
        AcpError::BadSignature("it does not verify against the sender's registered key".into())
    })
}
