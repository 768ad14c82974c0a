//! # a2acp-core
//!
//! The sans-IO core of the Agent-to-Agent Context Protocol (A2ACP draft v0.2).
//!
//! This crate is deterministic, does no networking, reads no clock and draws no OS
//! randomness. It holds two state machines:
//!
//! - [`agent::Agent`] — one person's agent: threads, context packets, consent prompts,
//!   negotiation, resolutions and confirmation, actions and rollback;
//! - [`relay::Relay`] — the blind relay: registration, challenge-response authentication,
//!   routing, the offline queue, heartbeats and rate limits.
//!
//! Both follow one contract, in the manner of `quinn-proto` and `str0m`: the caller feeds
//! an input together with the current time (`handle(now, input)`: [`agent::Input`],
//! [`relay::RelayInput`]), then drains outputs with `poll_output()` until it returns
//! `None`, executing each one in order (each machine's module documentation gives the
//! order), and arms a timer for `poll_timeout()`. When the timer fires it tells the machine
//! (`Agent::handle_timeout(now)`, `RelayInput::Timeout`). The frames of the link between
//! an agent and its relay are [`link`]'s, owned by neither machine. Randomness
//! comes from a 32-byte seed given at construction; the same seed and the same inputs
//! produce byte-identical outputs. Peer input never panics: malformed bytes are refused
//! with an error output and leave the state unchanged.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// Nothing outside tests panics: no unwrap, expect, panic or indexing (clippy.toml lets
// `#[cfg(test)]` code use them), and no string slicing that could cut a character.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![cfg_attr(not(test), deny(clippy::string_slice))]

pub mod address;
pub mod agent;
pub mod audit_log;
pub mod bridge;
pub mod crypto;
pub mod discovery;
pub mod display;
pub mod encoding;
// The in-memory network the tests, the simulator and the benches drive the machines in:
// compiled only with the `harness` feature (and in this crate's own tests), not into
// every user's build.
#[cfg(any(test, feature = "harness"))]
pub mod harness;
pub mod link;
pub mod memory;
pub mod negotiator;
pub mod packet;
pub mod persist;
pub mod rate_limit;
pub mod receipt;
pub mod recover_client;
pub mod recovery;
pub mod relay;
pub mod rng;
pub mod rotation;
pub mod space;
pub mod thread_state;
pub mod time;
pub mod transcript;

pub use address::Address;
pub use time::Timestamp;
