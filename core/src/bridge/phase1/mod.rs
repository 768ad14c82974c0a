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
//! - [`inbound`]: the messages received ([`Tasks::handle`]): a task assigned opens a
//!   thread with its sender, a bridged peer of the agent.
//! - [`tasks`]: a task's lifecycle on the agent ([`Tasks`], a registered
//!   [`crate::agent::Bridge`]): the sender's stand-in, its deadline, where it stands.
//!
//! SPEC-NOTES "The A2A Phase-1 envelope (seed 001)" states every decision.

pub mod envelope;
pub mod inbound;
pub mod retry;
pub mod sender;
pub mod tasks;

pub use inbound::{Phase1Reply, PHASE1_TASK_TYPES};
pub use tasks::{
    phase1_deadline, phase1_reply_to, Phase1Task, Tasks, PHASE1_DEFAULT_BOUND, PHASE1_MAX_BOUND,
};

#[cfg(test)]
mod tasks_tests;
