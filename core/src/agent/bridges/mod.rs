//! The agent's side of its bridges to other protocols: where the A2A v1.0 binding
//! (seed 003, §18; server `a2a.rs`, client `a2a_client.rs`) and the Phase-1 envelope
//! (seed 001; `phase1.rs`, `phase1_task.rs`) meet the agent's threads. The protocols
//! themselves — their messages, validation, mappings and senders — are
//! [`crate::bridge`]'s, beside the agent (SPEC-NOTES "Adding a bridge").

pub(super) mod a2a;
pub(super) mod a2a_client;
pub(super) mod phase1;
pub(super) mod phase1_task;

#[cfg(test)]
mod a2a_tests;
#[cfg(test)]
mod phase1_tests;
