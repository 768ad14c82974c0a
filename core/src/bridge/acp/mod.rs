//! ACP, the Agent Communication Protocol of seed 004: JSON-RPC 2.0 `agent.<type>`
//! messages carrying six identity headers, signed with the sender's Ed25519 identity
//! key, a four-step handshake before anything substantive, bodies with confidential
//! data encrypted to the recipient — pure, like the rest of the core: bytes in, typed
//! messages, events and signed messages out; no clock (times are parameters), randomness
//! only from a seeded generator.
//!
//! - [`error`]: why a message is refused ([`AcpError`]) and the JSON-RPC codes;
//! - [`headers`]: the six identity headers ([`Headers`]);
//! - [`message`]: the message, its form checked ([`Message::parse`]) and written
//!   ([`Message::build`]);
//! - [`sign`]: the canonical signed bytes, signing and verifying;
//! - [`seal`]: the encrypted body;
//! - [`handshake`]: announcement, capabilities, trust ([`Handshake`]);
//! - [`exchange`]: what the principal's audit log records of a message;
//! - [`io`]: the session's configuration, events, outputs and send errors;
//! - [`session`]: one agent's session with its peers ([`AcpSession`]);
//! - [`threads`]: an established peer's requests and handoffs as the agent's threads, and
//!   the agent's answers as ACP responses ([`threads::Threads`], a registered bridge);
//!   `asking`: the other way, threads this agent opens with an ACP agent, its packets
//!   as its own requests and the peer's responses read back.
//!
//! SPEC-NOTES "ACP (seed 004)" states every decision; docs/protocol.md "ACP (seed 004)"
//! the wire format, with a worked example.

mod asking;
pub mod error;
pub mod exchange;
pub mod handshake;
pub mod headers;
pub mod io;
pub mod message;
pub mod seal;
pub mod session;
pub mod sign;
pub mod threads;

pub use error::{code, AcpError};
pub use handshake::{Announcement, Capabilities, Handshake, Trust, TrustLevel};
pub use headers::{Headers, MessageType};
pub use message::{Kind, Message, Method};
pub use session::{AcpConfig, AcpEvent, AcpOutput, AcpSession, Handoff, RemoteError, SendError};
pub use threads::{Answer, Threads};

#[cfg(test)]
mod message_tests;
#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod threads_tests;
