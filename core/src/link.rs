//! Frames of the link between an agent and its relay (docs/protocol.md "The relay link"): what both
//! state machines send and parse, so it belongs to neither ([`crate::agent`] speaks the
//! client side, [`crate::relay`] the relay side).
//!
//! Every frame is one JSON object in one WebSocket text message, tagged by `"t"`.
//! Unknown fields are ignored; an unknown `"t"` is a malformed frame.

use serde::{Deserialize, Serialize};

use crate::address::Address;
use crate::crypto::envelope::Envelope;
use crate::crypto::put_lp;
use crate::encoding::{b64_array, b64_opt_array};
use crate::recovery::{RecoveryBinding, RecoveryProof, RecoveryStatement};
use crate::rotation::RotationStatement;

/// A frame an agent sends to its relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ClientFrame {
    /// Register `address` with `key` and authenticate in one step, answering the
    /// connection's challenge (signed as for [`ClientFrame::Auth`], label `A2ACP-REGISTER-V1`).
    Register {
        /// Address to claim.
        address: Address,
        /// Ed25519 public key to bind to it.
        #[serde(with = "b64_array")]
        key: [u8; 32],
        /// The agent's clock, milliseconds since the epoch.
        ts: u64,
        /// Signature over the challenge, relay domain, timestamp, address and key.
        #[serde(with = "b64_array")]
        sig: [u8; 64],
    },
    /// Authenticate as an already registered address by signing the challenge.
    Auth {
        /// Address to authenticate as.
        address: Address,
        /// The agent's clock, milliseconds since the epoch.
        ts: u64,
        /// Signature over the challenge, relay domain, timestamp and address.
        #[serde(with = "b64_array")]
        sig: [u8; 64],
    },
    /// Route an envelope. `seq` is the agent's own counter, echoed in the answer.
    Send {
        /// Agent-chosen sequence number.
        seq: u64,
        /// The sealed packet.
        env: Envelope,
    },
    /// The agent has durably processed delivery `id`; the relay may drop it.
    Ack {
        /// Delivery id from [`RelayFrame::Deliver`].
        id: u64,
    },
    /// Move this (authenticated) address to a new identity key (SPEC-NOTES "Key
    /// rotation"): answered by [`RelayFrame::Rotated`], after which the relay closes the
    /// connection, or by `error rotation_refused`.
    Rotate {
        /// The statement, signed by the current key and the new one.
        statement: RotationStatement,
    },
    /// Bind a recovery key to this (authenticated) address (SPEC-NOTES "Recovery"):
    /// answered by [`RelayFrame::RecoveryBound`], or by `error recovery_refused`.
    BindRecovery {
        /// The binding, signed by the address's current key.
        binding: RecoveryBinding,
    },
    /// On a connection not authenticated: what a recovery of `address` must name
    /// (SPEC-NOTES "Recovery"), answered by [`RelayFrame::RecoverInfo`] or
    /// [`RelayFrame::RecoverRefused`].
    RecoverStart {
        /// The address to recover.
        address: Address,
    },
    /// On a connection not authenticated: move an address to a new key with its recovery
    /// key. Answered by [`RelayFrame::Recovered`] or [`RelayFrame::RecoverRefused`].
    Recover {
        /// The statement, signed by the bound recovery key and the new key.
        statement: RecoveryStatement,
    },
    /// Ask for the registered key of an address (first contact).
    Lookup {
        /// Address to look up.
        address: Address,
    },
    /// Heartbeat request.
    Ping {
        /// Echoed in the pong.
        n: u64,
    },
    /// Heartbeat answer.
    Pong {
        /// The ping's `n`.
        n: u64,
    },
    /// Where the relay sends a wake-up when it queues a packet for this agent while it is
    /// offline (a UnifiedPush or ntfy endpoint), or `null` for none. Answered
    /// [`RelayFrame::WakeUpSet`], or an `error` `wake_up_refused`.
    WakeUp {
        /// The endpoint (an `https://` URL), or `None` to stop wake-ups.
        #[serde(default)]
        endpoint: Option<String>,
    },
    /// Relay link (docs/protocol.md "The federation link"): a relay that dialed another
    /// answers its `challenge` with this instead of `auth`/`register`, signing
    /// [`link_signed_bytes`] with label [`LINK_DIAL_LABEL`], and challenges it back with
    /// `nonce` (answered by [`RelayFrame::LinkOk`]).
    LinkAuth {
        /// The dialing relay's domain.
        domain: String,
        /// The dialing relay's signing key (one its domain publishes).
        #[serde(with = "b64_array")]
        key: [u8; 32],
        /// The dialing relay's clock, milliseconds since the epoch.
        ts: u64,
        /// Signature over the challenge, the accepting relay's domain, `ts`, `domain`
        /// and `key`.
        #[serde(with = "b64_array")]
        sig: [u8; 64],
        /// The dialing relay's challenge to the accepting one: 32 fresh random bytes.
        #[serde(with = "b64_array")]
        nonce: [u8; 32],
    },
    /// Relay link: one packet handed over, `n` being the dialing relay's link sequence
    /// number for the accepting relay's domain (strictly increasing, never reused; a retry
    /// repeats the same `n`).
    Push {
        /// Link sequence number.
        n: u64,
        /// Every push numbered below `low` is settled at the dialer's end (it will never be
        /// sent again): the accepting relay forgets what it kept about them.
        low: u64,
        /// The sealed packet, as its sender sent it.
        env: Envelope,
    },
}

/// A frame a relay sends to an agent.
// Frames are short-lived values built to be serialised at once; boxing the envelope of
// `Deliver` would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum RelayFrame {
    /// First frame on every connection: a fresh single-use challenge.
    Challenge {
        /// 32 random bytes.
        #[serde(with = "b64_array")]
        nonce: [u8; 32],
        /// The relay's domain, which the signature must name.
        domain: String,
        /// The relay's clock, milliseconds since the epoch.
        ts: u64,
    },
    /// Authentication (or registration) succeeded.
    AuthOk {
        /// The authenticated address.
        address: Address,
        /// How many deliveries are waiting for it.
        queued: u64,
    },
    /// Envelope `seq` was accepted and durably queued as delivery `id`.
    Accepted {
        /// The agent's sequence number from [`ClientFrame::Send`].
        seq: u64,
        /// The relay's delivery id.
        id: u64,
    },
    /// An envelope for this agent. It stays queued until acknowledged.
    Deliver {
        /// Delivery id to acknowledge.
        id: u64,
        /// The sealed packet.
        env: Envelope,
    },
    /// Envelope `seq` was refused because the recipient's queue for that thread is full
    /// (spec §13.2): the sender should later send one consolidated packet.
    Overflow {
        /// The refused envelope's sequence number.
        seq: u64,
        /// The recipient.
        to: Address,
        /// The thread tag whose queue is full.
        #[serde(with = "b64_array")]
        thread: [u8; 16],
        /// The queue bound that was hit.
        limit: u32,
    },
    /// Answer to [`ClientFrame::Lookup`]; `key` is absent when nobody registered it.
    Key {
        /// The address looked up.
        address: Address,
        /// Its registered key.
        #[serde(
            with = "b64_opt_array",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        key: Option<[u8; 32]>,
        /// The rotation statement that installed `key`, when the address rotated (its
        /// `new_key` is `key`): a peer that pinned the statement's `old_key` re-pins.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rotation: Option<Box<RotationStatement>>,
        /// The recovery that installed `key`, when the address was recovered (its
        /// statement's `new_key` is `key`): the binding and the statement, a chain a peer
        /// that pinned the statement's `old_key` can check.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        recovery: Option<Box<RecoveryProof>>,
    },
    /// The address's key is now the statement's `new_key` (durably); the relay closes the
    /// connection right after this frame, and the agent authenticates again with the new
    /// key.
    Rotated {
        /// The address.
        address: Address,
        /// The statement's rotation number.
        seq: u64,
    },
    /// The recovery binding `seq` is installed (durably).
    RecoveryBound {
        /// The binding's number.
        seq: u64,
    },
    /// The answer to [`ClientFrame::RecoverStart`]: the address's current key (the
    /// statement's `old_key`) and the number of its binding (a new device binds its
    /// recovery key again with the next number).
    RecoverInfo {
        /// The address.
        address: Address,
        /// Its current key.
        #[serde(with = "b64_array")]
        key: [u8; 32],
        /// The number of its recovery binding.
        binding_seq: u64,
    },
    /// The address is on the statement's `new_key` now (durably); the relay closes the
    /// connection after this frame and the new device registers with the new key.
    Recovered {
        /// The address.
        address: Address,
    },
    /// A `recover_start` or `recover` refused. `reason`: `no_binding` (the address has no
    /// recovery key, or is not on this relay), `wrong_recovery_key`, `not_current_key`,
    /// `wrong_address`, a statement's own fault (`bad_key`, `same_key`,
    /// `recovery_signature`, `new_signature`), `rate_limited` (with `retry_after`),
    /// `cluster`.
    RecoverRefused {
        /// Machine-readable reason.
        reason: String,
        /// Human-readable explanation.
        message: String,
        /// With `rate_limited`: seconds until an attempt may be made again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<u64>,
    },
    /// Heartbeat request.
    Ping {
        /// Echoed in the pong.
        n: u64,
    },
    /// Heartbeat answer.
    Pong {
        /// The ping's `n`.
        n: u64,
    },
    /// A newer connection of the same agent took over; this one is about to close.
    Replaced,
    /// The answer to [`ClientFrame::WakeUp`]: the endpoint now kept (persisted).
    WakeUpSet {
        /// The endpoint, or `None`: no wake-ups.
        #[serde(default)]
        endpoint: Option<String>,
    },
    /// A packet this relay accepted (`accepted {seq, id}`) for an address on another
    /// domain could not be handed to that domain's relay: it expired in the outbound queue,
    /// or the remote relay refused it for good. Acknowledge it with `ack {id}`.
    Undeliverable {
        /// A delivery id of this notice (acknowledge it).
        id: u64,
        /// The delivery id the packet got in its `accepted`.
        packet: u64,
        /// The packet's recipient.
        to: Address,
        /// The packet's thread tag.
        #[serde(with = "b64_array")]
        thread: [u8; 16],
        /// Why: `expired`, `unknown_recipient`, `wrong_sender`, `bad_signature`,
        /// `queue_full`, `domain_refused`, `rate_limited`.
        code: ErrorCode,
        /// Human-readable explanation.
        message: String,
    },
    /// Relay link: the accepting relay's answer to [`ClientFrame::LinkAuth`], signing the
    /// dialer's nonce ([`link_signed_bytes`], label [`LINK_ACCEPT_LABEL`]). The link is up.
    LinkOk {
        /// The accepting relay's domain.
        domain: String,
        /// The accepting relay's signing key (one its domain publishes).
        #[serde(with = "b64_array")]
        key: [u8; 32],
        /// The accepting relay's clock, milliseconds since the epoch.
        ts: u64,
        /// Signature over the dialer's nonce, the dialer's domain, `ts`, `domain` and `key`.
        #[serde(with = "b64_array")]
        sig: [u8; 64],
    },
    /// Relay link: push `n` is settled — durably queued for its recipient now, or earlier
    /// (a retry of a push already decided). The dialer drops it.
    Pushed {
        /// The push's link sequence number.
        n: u64,
    },
    /// Relay link: push `n` cannot be taken now (`overflow`: its (recipient, thread) queue
    /// is full; `queue_full`; `rate_limited`); the dialer keeps it and retries the same `n`
    /// later.
    Deferred {
        /// The push's link sequence number.
        n: u64,
        /// Why.
        code: ErrorCode,
        /// Human-readable explanation.
        message: String,
    },
    /// Relay link: push `n` is refused for good; the dialer drops it and tells its sender
    /// ([`RelayFrame::Undeliverable`]).
    Rejected {
        /// The push's link sequence number.
        n: u64,
        /// Why.
        code: ErrorCode,
        /// Human-readable explanation.
        message: String,
    },
    /// A refusal. The connection stays open unless the error says otherwise.
    Error {
        /// Machine-readable reason.
        code: ErrorCode,
        /// Human-readable explanation.
        message: String,
        /// The `seq` of the refused `send`, when the error concerns one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
}

/// Why the relay refused something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The frame is not valid JSON or not a known frame.
    Malformed,
    /// The frame exceeds the relay's size limit.
    TooLarge,
    /// A signature did not verify.
    BadSignature,
    /// The frame needs an authenticated connection.
    NotAuthenticated,
    /// The challenge response was wrong, stale, replayed or for another connection.
    AuthFailed,
    /// The address is registered with another key.
    AddressTaken,
    /// The address is unknown, or not served by this relay.
    UnknownRecipient,
    /// The envelope's sender is not the authenticated address or its key.
    WrongSender,
    /// The address sent faster than its token bucket allows.
    RateLimited,
    /// The recipient's total queue is full.
    QueueFull,
    /// Heartbeats went unanswered.
    Timeout,
    /// The source of the connection registered as many new addresses as the relay
    /// allows per window (docs/protocol.md, relay link §6).
    RegistrationLimited,
    /// The connection kept sending frames the relay refused, or frames beyond its frame
    /// budget: it is closed (docs/protocol.md, relay link §6).
    TooManyRefusals,
    /// A packet's (recipient, thread) queue on a remote relay stayed full (relay link:
    /// `deferred`).
    Overflow,
    /// A packet for another domain could not be handed to its relay before the outbound
    /// queue's expiry.
    Expired,
    /// This relay does not federate with that domain (operator deny list, allow list,
    /// reputation), or a relay link failed authentication.
    DomainRefused,
    /// The relay cannot make the request durable now (a relay of a cluster that cannot
    /// reach its shared store): nothing was accepted; try again later, perhaps through
    /// another of the domain's relays.
    Unavailable,
    /// A wake-up endpoint the relay does not accept: not an `https://` URL, too long, or
    /// one naming a loopback or private address (unless the operator allows them), or
    /// the relay does not send wake-ups.
    WakeUpRefused,
    /// A `rotate` was refused: its statement does not verify, is not for the
    /// authenticated address, or does not start from the address's current key (a
    /// replay, or a statement signed by another key). The message starts with the reason
    /// (`bad_key`, `same_key`, `bad_seq`, `old_signature`, `new_signature`,
    /// `wrong_address`, `not_current_key`, `stale_seq`, `cluster`).
    RotationRefused,
    /// A `bind_recovery` was refused: the binding does not verify, is not for the
    /// authenticated address, is not signed by its current key, or does not number a
    /// later binding than the installed one. The message starts with the reason.
    RecoveryRefused,
}

impl ErrorCode {
    /// The code's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Malformed => "malformed",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::BadSignature => "bad_signature",
            ErrorCode::NotAuthenticated => "not_authenticated",
            ErrorCode::AuthFailed => "auth_failed",
            ErrorCode::AddressTaken => "address_taken",
            ErrorCode::UnknownRecipient => "unknown_recipient",
            ErrorCode::WrongSender => "wrong_sender",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::QueueFull => "queue_full",
            ErrorCode::Timeout => "timeout",
            ErrorCode::RegistrationLimited => "registration_limited",
            ErrorCode::TooManyRefusals => "too_many_refusals",
            ErrorCode::Overflow => "overflow",
            ErrorCode::Expired => "expired",
            ErrorCode::DomainRefused => "domain_refused",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::WakeUpRefused => "wake_up_refused",
            ErrorCode::RotationRefused => "rotation_refused",
            ErrorCode::RecoveryRefused => "recovery_refused",
        }
    }
}

/// Bytes signed to answer a challenge: `label || lp(nonce) || lp(domain) || ts (u64 BE) ||
/// lp(address) [|| key]`, where `lp(x)` is a 4-byte big-endian length then `x`.
pub fn challenge_signed_bytes(
    label: &[u8],
    nonce: &[u8; 32],
    domain: &str,
    ts: u64,
    address: &Address,
    key: Option<&[u8; 32]>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(label.len() + 32 + domain.len() + address.as_str().len() + 60);
    out.extend_from_slice(label);
    put_lp(&mut out, nonce);
    put_lp(&mut out, domain.as_bytes());
    out.extend_from_slice(&ts.to_be_bytes());
    put_lp(&mut out, address.as_str().as_bytes());
    if let Some(k) = key {
        out.extend_from_slice(k);
    }
    out
}

/// Bytes a relay signs to authenticate a relay link: `label || lp(nonce) || lp(peer
/// domain) || ts (u64 BE) || lp(own domain) || key`, `lp(x)` as in
/// [`challenge_signed_bytes`]. The dialer signs the accepting relay's challenge naming the
/// accepting relay's domain ([`LINK_DIAL_LABEL`]); the accepting relay signs the dialer's
/// nonce naming the dialer's domain ([`LINK_ACCEPT_LABEL`]).
pub fn link_signed_bytes(
    label: &[u8],
    nonce: &[u8; 32],
    peer_domain: &str,
    ts: u64,
    own_domain: &str,
    key: &[u8; 32],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(label.len() + 32 + peer_domain.len() + own_domain.len() + 60);
    out.extend_from_slice(label);
    put_lp(&mut out, nonce);
    put_lp(&mut out, peer_domain.as_bytes());
    out.extend_from_slice(&ts.to_be_bytes());
    put_lp(&mut out, own_domain.as_bytes());
    out.extend_from_slice(key);
    out
}

/// Label of the dialing relay's signature on a relay link.
pub const LINK_DIAL_LABEL: &[u8] = b"A2ACP-LINK-DIAL-V1\0";
/// Label of the accepting relay's signature on a relay link.
pub const LINK_ACCEPT_LABEL: &[u8] = b"A2ACP-LINK-ACCEPT-V1\0";

/// Label of an authentication signature.
pub const AUTH_LABEL: &[u8] = b"A2ACP-AUTH-V1\0";
/// Label of a registration signature.
pub const REGISTER_LABEL: &[u8] = b"A2ACP-REGISTER-V1\0";

impl ClientFrame {
    /// Serialises the frame as JSON.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a frame.
    pub fn from_bytes(b: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(b)
    }
}

impl RelayFrame {
    /// Serialises the frame as JSON.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a frame.
    pub fn from_bytes(b: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(b)
    }
}
