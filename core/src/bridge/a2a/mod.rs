//! Google A2A v1.0 (seed 003, §18), pure: no clock (times are parameters), no
//! randomness (ids come from the caller).
//!
//! - [`task`]: a client's messages as packets of a thread, a thread as an A2A task (the
//!   state table), the JSON-RPC errors; the binding itself is
//!   [`crate::agent::Agent::handle_a2a`].
//! - [`rest`]: the HTTP+JSON binding as a translation of its REST routes to and from the
//!   JSON-RPC requests and responses of [`crate::agent::Agent::handle_a2a`].
//! - [`card`]: the agent card served at `/.well-known/agent-card.json`.
//! - [`client`]: the client direction: an a2acp agent driving a task on a plain A2A
//!   agent (its card, the messages its packets become, the remote task read back).
//!
//! SPEC-NOTES "The A2A v1.0 bridge (seed 003, §18)" states every decision.

pub mod card;
pub mod client;
pub mod rest;
pub mod task;
