//! One thread's turn: the thread, borrowed beside what every thread shares.
//!
//! Per-thread work (negotiating, consent, resolution, execution, recovery) is written as
//! methods of [`ThreadStep`], so it reaches its thread directly instead of looking it up
//! again by id; the agent opens a step for the thread an input concerns
//! ([`Agent::in_thread`]) and hands it on.

use std::ops::Bound;

use crate::agent::*;

/// A thread of the agent and the agent's [`Shared`] state, borrowed together.
pub(in crate::agent) struct ThreadStep<'a> {
    /// The thread's id (the key it is stored under).
    pub(in crate::agent) id: &'a str,
    /// The thread.
    pub(in crate::agent) t: &'a mut Thread,
    /// Everything else of the agent.
    pub(in crate::agent) shared: &'a mut Shared,
}

impl Agent {
    /// Runs `f` on thread `id`, if there is one; `None` for an unknown thread.
    pub(in crate::agent) fn in_thread<R>(
        &mut self,
        id: &str,
        f: impl FnOnce(&mut ThreadStep<'_>) -> R,
    ) -> Option<R> {
        let (id, t) = self
            .threads
            .range_mut::<str, _>((Bound::Included(id), Bound::Included(id)))
            .next()?;
        let mut step = ThreadStep {
            id,
            t,
            shared: &mut self.shared,
        };
        Some(f(&mut step))
    }
}

impl ThreadStep<'_> {
    /// The thread changed: it is stored with this input's records.
    pub(in crate::agent) fn mark_changed(&mut self) {
        self.shared.dirty.threads.insert(self.id.to_string());
    }

    /// Audits an event of this thread.
    pub(in crate::agent) fn audit(&mut self, event: AgentEvent) {
        self.shared.audit(Some(self.id), event);
    }

    /// Audits prose about this thread nothing matches on ([`AgentEvent::Note`]).
    pub(in crate::agent) fn note(&mut self, text: String) {
        self.shared.note(Some(self.id), text);
    }

    /// Audits an inconsistency of this agent's own in this thread.
    pub(in crate::agent) fn audit_bug(&mut self, bug: Bug) {
        self.shared.audit_bug(Some(self.id), bug);
    }

    /// Tells the user something about this thread.
    pub(in crate::agent) fn notify(&mut self, kind: NotifyKind, text: String) {
        self.shared.notify(Some(self.id.to_string()), kind, text);
    }
}
