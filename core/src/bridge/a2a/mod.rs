//! Google A2A v1.0 (seed 003, §18), pure: no clock (times are parameters), no
//! randomness (ids come from the caller).
//!
//! - [`task`]: a client's messages as packets of a thread, a thread as an A2A task (the
//!   state table), the JSON-RPC errors;
//! - [`server`]: the JSON-RPC binding served ([`server::Server`]): a client's requests
//!   turned into what a bridged peer said to the agent, the agent's threads into tasks;
//! - [`rest`]: the HTTP+JSON binding as a translation of its REST routes to and from the
//!   JSON-RPC requests and responses of [`server::Server::handle`].
//! - [`card`]: the agent card served at `/.well-known/agent-card.json`.
//! - [`client`]: the client direction: an a2acp agent driving a task on a plain A2A
//!   agent (its card, the messages its packets become, the remote task read back);
//! - [`remote`]: that direction driven on the agent ([`remote::Client`], a registered
//!   [`crate::agent::Bridge`]): the calls due, their outcomes, the packets queued.
//!
//! SPEC-NOTES "The A2A v1.0 bridge (seed 003, §18)" states every decision.

pub mod card;
pub mod client;
pub mod remote;
pub mod rest;
pub mod server;
pub mod task;

pub use remote::{A2aCallKind, A2aClientCall, A2aOutcome, Client};
pub use server::{
    anonymous_peer, A2aReply, A2aStream, A2aWait, Server, A2A_MAX_REQUEST, ANONYMOUS_CLIENT,
    ANONYMOUS_SHARE,
};
