//! What the user sees and types: the batched consent prompt of §7.3 and the resolution
//! prompt of §8.2, one keystroke per choice, and the arguments of `a2acp answer`.
//!
//! [`render`] gives a prompt's text. [`PromptUi`] is the keyboard flow of a terminal: it is
//! fed keys and tells what to print and which [`a2acp_core::agent::Command`] to hand the agent; prompts queue
//! up and are shown one at a time while the agent goes on with every other thread. The
//! open prompts themselves are the agent host's ([`crate::agent_host::AgentHost::prompts`]):
//! the flow reads them from there and keeps only the order it showed them in and how far
//! the answer to the one on screen has come.
//!
//! Keys — consent: `a` share all, `d` decline all, `c` choose field by field (then per
//! field `s` share, `n` don't share, `o` other value…). Resolution: `c` confirm, `t`
//! different time, `p` different place, `e` can't make it — make an excuse for me, `x`
//! decline, `1`…`9` choose that alternative. A §7.2 suggestion, shown when no prompt is
//! open: `y` accept, `n` not now.

use std::collections::BTreeMap;

/// The open prompts by id, as the agent host keeps them
/// ([`crate::agent_host::AgentHost::prompts`]).
pub type OpenPrompts = BTreeMap<u64, Prompt>;

use a2acp_core::agent::Prompt;

mod answer;
mod text;
mod ui;

pub use answer::*;
pub use text::*;
pub use ui::*;

#[cfg(test)]
mod tests;
