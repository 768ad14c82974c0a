//! Bridges: the other protocols an a2acp agent speaks, beside the agent and not inside
//! it — pure, like the rest of the core: another protocol's messages in, typed values out,
//! and back.
//!
//! - [`a2a`]: Google A2A v1.0 (seed 003, §18): a client's messages as packets of a thread
//!   and a thread as an A2A task, the HTTP+JSON binding, the agent card, and the client
//!   direction (an a2acp agent driving a task on a plain A2A agent);
//! - [`phase1`]: the A2A Phase-1 HTTP envelope (seed 001): its messages, validation, error
//!   codes, HTTP statuses, retry rule and sender;
//! - [`acp`]: the Agent Communication Protocol (seed 004): its signed JSON-RPC messages,
//!   the handshake, and an established peer's requests as threads;
//! - [`agentic`]: the Agentic Protocol (seed 002) as a service over the agent's memory:
//!   deposits, pulls, orientation, digests, reviews and facts, decided here, served by the
//!   runtime's `--agentic-listen`;
//! - [`retry`]: the retry schedule both bridges' calls follow (seed 001's).
//!
//! Each bridge meets the agent through the agent's one bridge interface
//! ([`crate::agent::Bridge`] and the agent's public bridge calls, `agent/bridge.rs`):
//! what its peer says goes in as packet bodies from a bridged peer, what the agent
//! addresses to that peer comes out as [`crate::agent::Output::Bridged`], threads are
//! read through [`crate::agent::ThreadView`], and a bridge's own state of a thread is
//! kept in the thread's record without the agent knowing its type. No bridge reaches into
//! the agent's threads, and the agent names no bridge. SPEC-NOTES "Adding a bridge"
//! describes the shape a new bridge takes.

pub mod a2a;
pub mod acp;
pub mod agentic;
pub mod phase1;
pub mod retry;

/// Registers with `agent` the bridges that act on its inputs ([`crate::agent::Bridge`]):
/// the A2A client direction ([`a2a::Client`]), the Phase-1 task lifecycle
/// ([`phase1::Tasks`]) and the ACP peers' threads ([`acp::Threads`]). The A2A server needs no registration: its listener calls it.
pub fn install(agent: &mut crate::agent::Agent) {
    agent.add_bridge(Box::new(a2a::Client));
    agent.add_bridge(Box::new(phase1::Tasks));
    agent.add_bridge(Box::new(acp::Threads));
}
