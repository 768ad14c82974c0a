//! `a2acp bench`: the relay benchmark ([`relay`], with its baseline, a bare WebSocket
//! [`forwarder`], and its growth table, `growth.rs`), the CPU and memory a process uses
//! ([`usage`]), the attack bench ([`attack`]: hostile clients against a relay process),
//! the federation bench ([`federation`]: cross-domain routing against same-domain, a
//! partition's backlog), and the cluster bench ([`cluster`]: one relay on SQLite against
//! relay nodes on NATS).

pub mod attack;
pub mod cluster;
pub mod federation;
pub mod forwarder;
mod growth;
pub mod relay;
pub mod usage;

pub use forwarder::{forwarder, ForwarderArgs};
pub(crate) use relay::register_frame;
pub use relay::{run, BenchArgs, Figures};
pub use usage::CpuUse;
pub(crate) use usage::{rss_kib, USER_HZ};

/// Why the benchmark failed.
pub type BenchError = String;
