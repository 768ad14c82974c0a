//! The A2A Phase-1 HTTP envelope (seed 001): the messages other agents POST to
//! `/a2a/messages`, their validation, error codes, HTTP statuses and the client's retry
//! rule — pure, like the rest of the core: text in, a typed message or a typed error out;
//! no clock (times are parameters), no randomness (ids from bytes the caller draws).
//!
//! - [`envelope`]: [`envelope::parse`] checks an envelope and its payload in strict mode
//!   (unknown fields refused) and answers a typed [`envelope::Message`] or an
//!   [`envelope::EnvelopeError`] carrying the seed's [`envelope::ErrorCode`]; the error
//!   message to send back and the HTTP status for each code.
//! - [`retry`]: which failures a client retries, and when (1 s doubling, at most 3
//!   attempts, at most 15 s of waiting), and each type's acknowledgement deadline.
//! - [`sender`]: the client side, sans-IO: one message to a receiver's `POST
//!   /a2a/messages` (the request to make, what each answer means, when to try again, how
//!   it ended); the runtime makes the HTTP calls.
//!
//! SPEC-NOTES "The A2A Phase-1 envelope (seed 001)" states every decision.

pub mod envelope;
pub mod retry;
pub mod sender;
