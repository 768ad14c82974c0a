//! The control socket: how `a2acp thread start`, `threads`, `answer`… reach a running
//! agent. One JSON object per line over a Unix socket (`agent.sock` in the agent's home):
//! the client writes one [`Request`], the agent answers one [`Response`] and closes.
//!
//! ```text
//! → {"cmd":"threads"}
//! ← {"ok":true,"data":[{"id":"thr_…","peer":"agent:bob@localhost","state":"NEGOTIATING",…}]}
//! → {"cmd":"answer","prompt_id":3,"args":["confirm"]}
//! ← {"ok":true,"data":"prompt #3 answered"}
//! ```

/// Longest request line accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

mod groups;
mod render;
mod request;
mod response;
mod spaces;

pub use groups::*;
pub use render::*;
pub use request::*;
pub use response::*;
pub use spaces::*;

#[cfg(test)]
mod tests;
