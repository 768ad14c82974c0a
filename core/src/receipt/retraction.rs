//! The record of a retraction (SPEC-NOTES "Retraction"): what a person took back in a
//! thread, from whom, when, and — once it came — the other agent's signed
//! acknowledgement that it deleted the values.
//!
//! The acknowledgement signs `RETRACTION_ACK_LABEL || lp(acknowledging agent) ||
//! lp(thread id) || lp(retraction packet id) || lp(field)…`, the fields in code-point
//! order, `lp` being a 4-byte big-endian length then the UTF-8 bytes.

use serde::{Deserialize, Serialize};

use crate::address::Address;
use crate::crypto::{put_lp, PublicKey};
use crate::encoding::{b64_array, b64_encode};

/// Label that starts the bytes a retraction's acknowledgement signs.
pub const RETRACTION_ACK_LABEL: &[u8] = b"A2ACP-RETRACTION-ACK-V1\0";
/// The record format's version.
pub const RETRACTION_VERSION: u32 = 1;
/// The record key prefix: `retraction/<thread id>/<retraction packet id>`.
pub const RETRACTION_PREFIX: &str = "retraction/";

/// The bytes an acknowledgement of `retraction_id` signs.
pub fn ack_bytes(
    acker: &Address,
    thread_id: &str,
    retraction_id: &str,
    fields: &[String],
) -> Vec<u8> {
    let mut sorted: Vec<&String> = fields.iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut out = RETRACTION_ACK_LABEL.to_vec();
    put_lp(&mut out, acker.as_str().as_bytes());
    put_lp(&mut out, thread_id.as_bytes());
    put_lp(&mut out, retraction_id.as_bytes());
    for f in sorted {
        put_lp(&mut out, f.as_bytes());
    }
    out
}

/// The other agent's acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acknowledgement {
    /// Its key.
    #[serde(with = "b64_array")]
    pub key: [u8; 32],
    /// Its signature over [`ack_bytes`].
    #[serde(with = "b64_array")]
    pub sig: [u8; 64],
    /// When it arrived (RFC 3339, UTC).
    pub at: String,
}

/// What the retracting agent keeps of one retraction. Wire form:
/// `{"type":"retraction","version":1,"thread_id":…,"retraction_id":…,"agent":…,"peer":…,
/// "fields":[…],"asked_at":…,"ack":{"key","sig","at"}|null}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "retraction")]
pub struct Retraction {
    /// [`RETRACTION_VERSION`].
    pub version: u32,
    /// The thread.
    pub thread_id: String,
    /// The `retraction` packet's id.
    pub retraction_id: String,
    /// Who took the values back (this agent).
    pub agent: Address,
    /// Who was asked to delete them.
    pub peer: Address,
    /// The fields taken back.
    pub fields: Vec<String>,
    /// When (RFC 3339, UTC).
    pub asked_at: String,
    /// The peer's acknowledgement, once it came.
    #[serde(default)]
    pub ack: Option<Acknowledgement>,
}

/// Why a retraction record does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetractionError {
    /// No acknowledgement: nothing says the values were deleted.
    #[error("{0} has not acknowledged deleting the values: nothing says they were deleted")]
    Unacknowledged(String),
    /// The acknowledgement does not verify.
    #[error("the acknowledgement of {0} does not verify: the record was altered")]
    Signature(String),
    /// Another version.
    #[error("retraction version {0} is not supported (this implementation reads version 1)")]
    Version(u32),
    /// The acknowledgement was signed by another key than the one expected for the peer.
    #[error("{address} acknowledged with {found}, not with the expected key {expected}")]
    WrongKey {
        /// The peer.
        address: String,
        /// The key in the record (base64url).
        found: String,
        /// The key expected (base64url).
        expected: String,
    },
}

impl Retraction {
    /// Checks the acknowledgement under its own key (whether it is the peer's key is the
    /// caller's question).
    pub fn verify(&self) -> Result<(), RetractionError> {
        if self.version != RETRACTION_VERSION {
            return Err(RetractionError::Version(self.version));
        }
        let Some(a) = &self.ack else {
            return Err(RetractionError::Unacknowledged(self.peer.to_string()));
        };
        let msg = ack_bytes(
            &self.peer,
            &self.thread_id,
            &self.retraction_id,
            &self.fields,
        );
        let ok = PublicKey::from_bytes(&a.key).is_ok_and(|k| k.verify(&msg, &a.sig).is_ok());
        if ok {
            Ok(())
        } else {
            Err(RetractionError::Signature(self.peer.to_string()))
        }
    }

    /// [`Retraction::verify`], and, when `expected` names the peer, that it acknowledged
    /// with the key given for it.
    pub fn verify_keys(&self, expected: &[(Address, [u8; 32])]) -> Result<(), RetractionError> {
        self.verify()?;
        if let (Some(a), Some((_, k))) = (&self.ack, expected.iter().find(|(a, _)| a == &self.peer))
        {
            if k != &a.key {
                return Err(RetractionError::WrongKey {
                    address: self.peer.to_string(),
                    found: b64_encode(&a.key),
                    expected: b64_encode(k),
                });
            }
        }
        Ok(())
    }
}

/// The record key of a retraction.
pub fn record_key(thread_id: &str, retraction_id: &str) -> String {
    format!("{RETRACTION_PREFIX}{thread_id}/{retraction_id}")
}
