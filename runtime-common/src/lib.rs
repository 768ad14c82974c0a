//! # a2acp-runtime
//!
//! The runtime pieces shared by a2acp's executor bindings (`a2acp-tokio`, and `a2acp-smol`
//! later). Nothing here depends on an async executor: the bindings own the sockets and the
//! timers, and hand inputs to the hosts defined here, which drive the sans-IO core
//! (`a2acp-core`) and return what to do.
//!
//! - [`store`]: the SQLite key/value store that makes the core's `PersistOp`s durable, one
//!   transaction per drained batch of outputs, committed before any send of that batch;
//! - [`agent_host`]: an [`agent_host::AgentHost`] — the agent state machine, its store, its
//!   open prompts and its (simulated) action executor — turning each input into a list of
//!   [`agent_host::Effect`]s for the binding to execute;
//! - [`relay_service`]: the relay state machine on its own OS thread, fed through a channel,
//!   committing every batch to SQLite before it releases the frames that reveal it;
//! - [`config`], [`keys`], [`home`]: the agent's TOML configuration, its identity key file
//!   (mode 0600) and where its files live;
//! - [`prompt`]: the text of the §7.3 consent prompt and the §8.2 resolution prompt, one
//!   keystroke per choice, and the parsing of `a2acp answer` arguments;
//! - [`control`]: the control-socket protocol (JSON lines over a Unix socket);
//! - [`http`]: `/healthz` and Prometheus `/metrics`, served on the relay's listener;
//! - [`transcript`]: human-readable lines for the demo and the logs;
//! - [`scripted`]: the scripted user of the dinner demo.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod agent_host;
pub mod clock;
pub mod config;
pub mod control;
pub mod home;
pub mod http;
pub mod keys;
pub mod prompt;
pub mod relay_service;
pub mod scripted;
pub mod store;
pub mod transcript;

pub use clock::{now, os_seed};
