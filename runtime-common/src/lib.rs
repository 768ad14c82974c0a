//! # a2acp-runtime
//!
//! The runtime pieces shared by a2acp's executor bindings (`a2acp-tokio` and
//! `a2acp-smol`). Nothing here depends on an async executor: the bindings own the sockets,
//! the spawning and the timers, and hand inputs to the hosts and loops defined here, which
//! drive the sans-IO core (`a2acp-core`) and return what to do. Async code here is written
//! against `futures` traits and `flume` channels only, so it runs on any executor.
//!
//! - [`store`]: the SQLite key/value store that makes the core's `PersistOp`s durable, one
//!   transaction per drained batch of outputs, committed before any send of that batch;
//! - [`agent_host`]: an [`agent_host::AgentHost`] — the agent state machine, its store, its
//!   open prompts and its (simulated) action executor — turning each input into a list of
//!   [`agent_host::Effect`]s for the binding to execute;
//! - [`relay_service`]: the relay on OS threads, a pipeline: verifier threads (one per core
//!   by default, `--verifiers`) parse frames and batch-verify envelope signatures, one
//!   thread runs the relay state machine, and a commit thread writes each batch of persist
//!   records to SQLite in one transaction (group commit) before it releases the frames
//!   that reveal them;
//! - [`config`], [`keys`], [`home`]: the agent's TOML configuration, its identity key file
//!   (mode 0600) and where its files live;
//! - [`daemon`]: the agent daemon's loop around an [`agent_host::AgentHost`], its relay
//!   link (reconnection with backoff and jitter) and the control socket's request
//!   handling, given the binding's timer and TCP connect;
//! - [`ws`]: the WebSocket settings of both ends, the client handshake and the relay's
//!   per-connection loop, over any `futures-io` stream;
//! - [`tls`]: TLS for the relay link (rustls): the agent's trusted roots (web PKI and a
//!   private CA), the relay's certificate and key, the plain-or-TLS stream;
//! - [`term`]: the terminal of an interactive agent (raw mode, one key per choice);
//! - [`acp`]: ACP (seed 004) beside the agent: its session, the gateway and the NATS
//!   inbox;
//! - [`cli`]: the flags of `relay` and `agent run`, shared by both binaries;
//! - [`race`]: waiting for the first of two futures;
//! - [`prompt`]: the text of the §7.3 consent prompt and the §8.2 resolution prompt, one
//!   keystroke per choice, and the parsing of `a2acp answer` arguments;
//! - [`control`]: the control-socket protocol (JSON lines over a Unix socket);
//! - [`http`]: `/healthz`, Prometheus `/metrics` and the discovery document
//!   `/.well-known/a2acp`, served on the relay's listener;
//! - [`federation`], [`relay_key`]: what a federating relay executes for its state
//!   machine (fetching other domains' discovery documents), and its own signing key on
//!   disk with its rotation chain;
//! - [`admission`]: what a connection may cost before it is an agent link — caps per
//!   source address and in total, one deadline for the HTTP phase, accept failures;
//! - [`log_limit`]: log lines a client can cause, at a bounded rate (one limiter for all);
//! - [`safety`]: safety numbers of two identity keys (§16), as digits and as a QR code;
//! - [`transcript`]: human-readable lines for the demo and the logs;
//! - [`scripted`]: the scripted user of the dinner demo;
//! - [`a2a`]: the A2A listener's options, limits and client identity, and its calls to
//!   the agent loop (the protocol is the core's, the HTTP server the binding's);
//! - [`phase1_sender`]: the HTTP calls of the A2A Phase-1 sender (`a2acp phase1 send`),
//!   bounded, blocking; what an answer means and when to try again are the core's.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod a2a;
pub mod a2a_client;
pub mod acp;
pub mod acp_gateway;
pub mod actions;
pub mod admission;
pub mod agent_host;
pub mod agentic;
pub mod audit_log;
pub mod backup;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod control;
pub mod daemon;
pub mod dev_ca;
pub mod federation;
pub mod home;
pub mod http;
pub mod http_door;
pub mod keys;
pub mod linger;
pub mod llm;
pub mod log_limit;
pub mod onboarding;
pub mod phase1_push;
pub mod phase1_sender;
pub mod prompt;
pub mod race;
pub mod receipts;
pub mod recovery;
pub mod relay_key;
pub mod relay_service;
pub mod relay_status;
pub mod safety;
pub mod scripted;
pub mod store;
pub mod term;
pub mod tls;
mod tokio_thread;
pub mod transcript;
pub mod transparency;
pub mod wake_up;
pub mod web;
pub mod ws;
pub mod ws_accepted;

pub use clock::{now, os_seed};
