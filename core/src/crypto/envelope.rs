//! The end-to-end envelope: what the relay sees of a packet (spec §16, docs/protocol.md
//! "The end-to-end envelope").

use serde::{Deserialize, Serialize};

use crate::address::Address;
use crate::encoding::{b64_array, b64_opt_array, b64_vec};

/// Which side of a thread sent an envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "u8", try_from = "u8")]
pub enum Direction {
    /// Sent by the agent that opened the thread.
    FromInitiator = 0,
    /// Sent by the agent the thread was opened with.
    FromResponder = 1,
}

impl From<Direction> for u8 {
    fn from(d: Direction) -> u8 {
        d as u8
    }
}

impl TryFrom<u8> for Direction {
    type Error = String;
    fn try_from(v: u8) -> Result<Self, String> {
        match v {
            0 => Ok(Direction::FromInitiator),
            1 => Ok(Direction::FromResponder),
            other => Err(format!("direction must be 0 or 1, got {other}")),
        }
    }
}

impl Direction {
    /// The other direction.
    pub fn reverse(self) -> Self {
        match self {
            Direction::FromInitiator => Direction::FromResponder,
            Direction::FromResponder => Direction::FromInitiator,
        }
    }
}

/// A sealed, signed packet as it travels through the relay.
///
/// The relay reads `from`, `to`, `from_key` and `thread` to route and queue, and checks
/// `sig` with the sender's registered key. Everything else about the packet — its type,
/// its thread id, its context — is inside `ct`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Envelope format version; this implementation writes and reads `1`.
    pub v: u8,
    /// Sender address.
    pub from: Address,
    /// Recipient address.
    pub to: Address,
    /// Sender's Ed25519 identity public key.
    #[serde(with = "b64_array")]
    pub from_key: [u8; 32],
    /// Thread tag: the first 16 bytes of SHA-256 over a label and the thread id.
    #[serde(with = "b64_array")]
    pub thread: [u8; 16],
    /// Which side of the thread sent it.
    pub dir: Direction,
    /// Sender's ephemeral X25519 public key for this thread.
    #[serde(with = "b64_array")]
    pub eph: [u8; 32],
    /// The recipient's ephemeral key the sender agreed with; absent while the sender has
    /// not yet seen one (the first flight, sealed to the recipient's static key).
    #[serde(
        with = "b64_opt_array",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub peer_eph: Option<[u8; 32]>,
    /// XChaCha20-Poly1305 nonce.
    #[serde(with = "b64_array")]
    pub nonce: [u8; 24],
    /// Ciphertext and tag.
    #[serde(with = "b64_vec")]
    pub ct: Vec<u8>,
    /// Outer Ed25519 signature by `from_key` over the envelope's signed bytes.
    #[serde(with = "b64_array")]
    pub sig: [u8; 64],
    /// The rotation statement that moved the sender to `from_key`, carried by the
    /// envelopes an agent sends after rotating (SPEC-NOTES "Key rotation"): a recipient
    /// that pinned the statement's `old_key` re-pins to `from_key` instead of halting.
    /// Not covered by `sig`: the statement is signed by both keys on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<Box<crate::rotation::RotationStatement>>,
    /// The statements before `rotation`, oldest first (at most
    /// [`crate::rotation::ROTATION_CHAIN_MAX`] with it): a recipient whose pin is several
    /// rotations behind follows them to `from_key`. Not covered by `sig` either.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_rotations: Vec<crate::rotation::RotationStatement>,
}

impl Envelope {
    /// The statements this envelope carries that move `from` from `pinned` to its
    /// `from_key`, in order, each with the key it moves to ([`crate::rotation::follow_chain`]).
    pub fn rotation_path(
        &self,
        pinned: &[u8; 32],
    ) -> Option<Vec<(&crate::rotation::RotationStatement, super::PublicKey)>> {
        let latest = self.rotation.as_deref()?;
        crate::rotation::follow_chain(
            &self.from,
            pinned,
            &self.from_key,
            self.earlier_rotations
                .iter()
                .chain(std::iter::once(latest))
                .rev(),
        )
    }
}

impl Envelope {
    /// The bytes the outer signature `sig` covers (docs/protocol.md "The end-to-end envelope"):
    ///
    /// `"A2ACP-ENVELOPE-V1\0" || v || lp(from) || lp(to) || from_key(32) || thread(16) ||
    /// dir || eph(32) || (0x00 | 0x01 || peer_eph(32)) || nonce(24) || lp(ct)`,
    /// where `lp(x)` is the 4-byte big-endian length of `x` followed by `x`.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(super::ENVELOPE_SIG_LABEL.len() + 200 + self.ct.len());
        b.extend_from_slice(super::ENVELOPE_SIG_LABEL);
        b.push(self.v);
        super::put_lp(&mut b, self.from.as_str().as_bytes());
        super::put_lp(&mut b, self.to.as_str().as_bytes());
        b.extend_from_slice(&self.from_key);
        b.extend_from_slice(&self.thread);
        b.push(u8::from(self.dir));
        b.extend_from_slice(&self.eph);
        put_opt32(&mut b, &self.peer_eph);
        b.extend_from_slice(&self.nonce);
        super::put_lp(&mut b, &self.ct);
        b
    }

    /// The envelope as one JSON object (byte arrays as unpadded base64url strings;
    /// `peer_eph` omitted when absent).
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising this type cannot fail: every field is a string, a number or an
        // optional string, and every map key is a string.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses an envelope from JSON. Checks only the shape (field types, base64url, exact
    /// byte lengths, valid addresses and direction); [`super::ThreadSession::open`] and
    /// [`super::verify_envelope`] check the rest.
    pub fn from_json(b: &[u8]) -> Result<Self, super::CryptoError> {
        serde_json::from_slice(b).map_err(|_| super::CryptoError::Malformed("envelope json"))
    }
}

/// Appends `0x00` for `None`, `0x01 || x` for `Some(x)`.
pub(crate) fn put_opt32(b: &mut Vec<u8>, x: &Option<[u8; 32]>) {
    match x {
        None => b.push(0),
        Some(x) => {
            b.push(1);
            b.extend_from_slice(x);
        }
    }
}
