//! Bridges: the other protocols an a2acp agent speaks, beside the agent and not inside
//! it — pure, like the rest of the core: another protocol's messages in, typed values out,
//! and back.
//!
//! - [`a2a`]: Google A2A v1.0 (seed 003, §18): a client's messages as packets of a thread
//!   and a thread as an A2A task, the HTTP+JSON binding, the agent card, and the client
//!   direction (an a2acp agent driving a task on a plain A2A agent);
//! - [`phase1`]: the A2A Phase-1 HTTP envelope (seed 001): its messages, validation, error
//!   codes, HTTP statuses, retry rule and sender.
//!
//! No bridge imports the agent: a bridge reads a thread through the narrow view it
//! declares itself ([`a2a::task::TaskThread`]) and the thread's lifecycle state from
//! [`crate::thread_state`]; the agent depends on the bridges, never the other way round.
//! The agent's side of each bridge (where its requests meet the threads, and where the
//! agent's threads implement the bridges' views) is `agent/bridges/`. SPEC-NOTES "Adding
//! a bridge" describes the shape a new bridge takes.

pub mod a2a;
pub mod phase1;
