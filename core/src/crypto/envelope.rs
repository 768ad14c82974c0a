//! The end-to-end envelope: what the relay sees of a packet (spec §16, SPEC-NOTES "Envelope").

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
    #[serde(with = "b64_opt_array", default, skip_serializing_if = "Option::is_none")]
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
}
