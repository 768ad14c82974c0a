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
//! The agent's side of each bridge (where its requests meet the threads) is
//! `agent/bridges/`.

pub mod a2a;
pub mod phase1;
