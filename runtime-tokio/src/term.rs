//! The terminal of an interactive agent (raw mode, one keystroke per choice). It is
//! executor-independent and lives in `a2acp-runtime`, shared with the smol binding.

pub use a2acp_runtime::term::{Term, UiKey};
