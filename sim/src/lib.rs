//! # a2acp-sim
//!
//! A deterministic discrete-event simulator for a2acp. It drives the core's agent and
//! relay state machines — the same code the runtimes run, real crypto included — on one
//! virtual clock, with a seeded network model between each agent and the relay (latency
//! distributions, loss, duplication, reordering, partitions), relay and agent crashes at
//! any point between persistence steps with restarts from exactly what was persisted,
//! clock skew, agents offline for days, and models of the world: users answering prompts,
//! an LLM that is slow, fails or talks nonsense, and actions that fail.
//!
//! Invariant checkers ([`check`]) watch every step: never_share values never leave an
//! agent, no field is asked twice, the round-trip limit holds, every packet the relay
//! accepted reaches its recipient's logic exactly once, the relay never holds plaintext,
//! both agents agree on how a thread ended, and every thread finishes or waits on a person
//! once the network heals.
//!
//! A run is a pure function of (scenario, seed). Scenarios are TOML files
//! ([`scenario`], format in `sim/README.md`); [`swarm`] draws whole worlds from a seed.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod check;
pub mod error;
pub mod html;
pub mod model;
pub mod relationship;
pub mod scenario;
pub mod swarm;
pub mod transcript;
pub mod util;
pub mod world;

pub use error::SimError;
pub use scenario::Spec;
pub use world::{run, GroupMetrics, Report, Sim, Stats};
