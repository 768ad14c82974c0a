//! # a2acp-tokio
//!
//! a2acp on tokio and async-tungstenite: the relay server ([`relay`]), the agent daemon
//! ([`agent`]), the one-command demo ([`demo`]), the relay benchmark ([`bench`]) and the
//! attack bench ([`bench::attack`]: hostile clients against a relay process); the
//! `a2acp` binary wraps them. Everything that is not about sockets, tasks and timers —
//! the SQLite store, the relay's service thread, the agent host, config, prompts, the
//! control protocol — lives in `a2acp-runtime`, shared with the other executor bindings.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod a2a;
pub mod agent;
pub mod agentic;
pub mod bench;
pub mod demo;
pub mod federation;
pub mod mcp;
mod mcp_agentic;
mod mcp_args;
pub mod mcp_http;
pub mod recovery;
pub mod relay;
pub mod term;
pub mod ws;

/// Milliseconds since the Unix epoch (the bindings' clock).
pub fn now_ms() -> u64 {
    a2acp_runtime::now().as_millis()
}
