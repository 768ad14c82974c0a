//! `a2acp bench`: the relay benchmark ([`relay`], with its baseline, a bare WebSocket
//! [`forwarder`]), the CPU and memory a process uses ([`usage`]), and the attack bench
//! ([`attack`]: hostile clients against a relay process).

pub mod attack;
pub mod forwarder;
pub mod relay;
pub mod usage;

pub use forwarder::{forwarder, ForwarderArgs};
pub(crate) use relay::register_frame;
pub use relay::{run, BenchArgs, Figures};
pub use usage::CpuUse;
pub(crate) use usage::{rss_kib, USER_HZ};

/// Why the benchmark failed.
pub type BenchError = String;
