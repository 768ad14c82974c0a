//! # a2acp-smol
//!
//! a2acp on smol and async-tungstenite: the relay server ([`relay`]) and the agent daemon
//! ([`agent`]); the `a2acp-smol` binary wraps them with the same `relay` and `agent run`
//! flags as the tokio binary `a2acp`. Everything that is not about sockets, tasks and
//! timers — the SQLite store, the relay's service thread, the agent host and its daemon
//! loop, the relay link, the WebSocket settings, config, prompts, the terminal, the control
//! protocol — lives once in `a2acp-runtime`, shared with `a2acp-tokio`; this crate only
//! binds it to smol's executor, timers and sockets, and takes no protocol decision.
//!
//! Tasks run on smol's global executor (`smol::spawn`): they can be started and awaited
//! from any executor, including from a tokio test.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod agent;
pub mod federation;
pub mod recovery;
pub mod relay;
pub mod ws;

/// Milliseconds since the Unix epoch (the bindings' clock).
pub fn now_ms() -> u64 {
    a2acp_runtime::now().as_millis()
}

/// smol's timer as a unit future, the form the shared daemon loops take.
pub async fn sleep(d: std::time::Duration) {
    smol::Timer::after(d).await;
}
