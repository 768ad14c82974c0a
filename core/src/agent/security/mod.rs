//! The security model at work in the agent (§16, §13.4): peer keys pinned on first contact
//! and key changes (`keys.rs`), and what is refused of a malformed or hostile peer, with
//! the limits per peer (`refusals.rs`). The attacks of a validly signed hostile peer are
//! tested here too.

pub(super) mod keys;
pub(super) mod refusals;

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod surface_tests;
