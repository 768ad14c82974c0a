//! Hostile clients against the real `a2acp relay` process, under `ulimit -n 256`: each
//! attack must leave `/healthz` answering and an honest two-agent negotiation completing
//! during it, and the relay's descriptors and memory back near their baseline after it
//! (the shared harness: `a2acp_tokio::bench::attack`, also `a2acp bench attack`).
//!
//! Linux only: the harness reads the relay's descriptors, memory and CPU from `/proc`,
//! and the attackers use source addresses of 127.0.0.0/8 besides 127.0.0.1.
#![cfg(target_os = "linux")]

a2acp_tokio::relay_attack_tests!(env!("CARGO_BIN_EXE_a2acp"));
