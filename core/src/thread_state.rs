//! The thread lifecycle's states (§9, plus STALLED §6.4 and EXPIRED §8.3) and the
//! transitions between them: the protocol's own vocabulary, shared by the agent (which
//! moves its threads through them, `agent::thread`) and its bridges (which read where a
//! thread stands, e.g. the A2A task state table), so that neither imports the other for it.

use serde::{Deserialize, Serialize};

/// A thread's lifecycle state (§9, §6.4, §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ThreadState {
    /// First context packet sent; the thread is open.
    Initiated,
    /// Agents are exchanging context.
    Negotiating,
    /// A resolution is waiting for human confirmation.
    Proposed,
    /// Every required party confirmed; actions are queued.
    Confirmed,
    /// Actions are being carried out.
    Executing,
    /// All actions succeeded (terminal).
    Completed,
    /// A user declined, or the thread was cancelled (terminal).
    Declined,
    /// An action failed.
    Failed,
    /// Reversible actions are being undone.
    Rollback,
    /// No answer within the staleness timeout (§6.4).
    Stalled,
    /// Confirmations did not arrive within the confirmation timeout (terminal, §8.3).
    Expired,
}

use ThreadState::*;

/// Every legal transition; nothing else can happen (`Thread::transition` refuses it).
pub const TRANSITIONS: &[(ThreadState, ThreadState)] = &[
    (Initiated, Negotiating),
    (Initiated, Proposed),
    (Initiated, Stalled),
    (Initiated, Declined),
    (Negotiating, Proposed),
    (Negotiating, Stalled),
    (Negotiating, Declined),
    (Negotiating, Expired),
    (Proposed, Confirmed),
    (Proposed, Negotiating),
    (Proposed, Declined),
    (Proposed, Expired),
    (Confirmed, Executing),
    (Executing, Completed),
    (Executing, Failed),
    (Failed, Rollback),
    (Rollback, Negotiating),
    (Rollback, Declined),
    (Rollback, Expired),
    (Stalled, Negotiating),
    (Stalled, Proposed),
    (Stalled, Declined),
    (Stalled, Expired),
    // The peer's cancel, sent before the deadline, arrived after it (§8.3): the user's
    // decision stands over the timeout, as on the peer's side.
    (Expired, Declined),
];

impl ThreadState {
    /// Whether `self → to` is in the transition table.
    pub fn can_go(self, to: ThreadState) -> bool {
        TRANSITIONS.contains(&(self, to))
    }

    /// Terminal states: nothing leaves them, except EXPIRED → DECLINED when the peer's
    /// cancel arrives after the deadline.
    pub fn is_terminal(self) -> bool {
        matches!(self, Completed | Declined | Expired)
    }

    /// The state of a wire name (`NEGOTIATING`), if it is one.
    pub fn from_wire(name: &str) -> Option<ThreadState> {
        use serde::de::value::{Error, StrDeserializer};
        ThreadState::deserialize(StrDeserializer::<Error>::new(name)).ok()
    }

    /// The wire name (`NEGOTIATING`).
    pub fn as_str(self) -> &'static str {
        match self {
            Initiated => "INITIATED",
            Negotiating => "NEGOTIATING",
            Proposed => "PROPOSED",
            Confirmed => "CONFIRMED",
            Executing => "EXECUTING",
            Completed => "COMPLETED",
            Declined => "DECLINED",
            Failed => "FAILED",
            Rollback => "ROLLBACK",
            Stalled => "STALLED",
            Expired => "EXPIRED",
        }
    }
}

impl std::fmt::Display for ThreadState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
