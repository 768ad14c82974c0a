//! What the agent tells its user (notifications) and its audit trail, with the collapsing
//! that keeps a flood from growing either.

use crate::agent::*;

impl Shared {
    /// Every notification leaves through here: its text, peer strings in it included, is
    /// cleaned for display ([`crate::display`]).
    pub(in crate::agent) fn notify(
        &mut self,
        thread_id: Option<String>,
        kind: NotifyKind,
        text: String,
    ) {
        let text = shown(text);
        self.buf.notify.push(Output::Notify(Notification {
            thread_id,
            kind,
            text,
            key: None,
            suggestion: None,
            space: None,
            memory_change: None,
            introduction: None,
        }));
    }

    /// A §7.2 suggestion the user can accept in one step.
    pub(in crate::agent) fn notify_suggestion(&mut self, s: Suggestion, text: String) {
        let text = shown(text);
        self.buf.notify.push(Output::Notify(Notification {
            thread_id: None,
            kind: NotifyKind::Suggestion,
            text,
            key: None,
            suggestion: Some(s),
            space: None,
            memory_change: None,
            introduction: None,
        }));
    }

    /// A value the peer shared contradicted relationship memory (§11.3).
    pub(in crate::agent) fn notify_memory_change(
        &mut self,
        thread_id: Option<String>,
        c: MemoryChange,
    ) {
        let text = shown(format!(
            "{} changed their {} from {} to {}; your agent remembers the new value.",
            c.peer, c.field, c.old, c.new
        ));
        self.buf.notify.push(Output::Notify(Notification {
            thread_id,
            kind: NotifyKind::Memory,
            text,
            key: None,
            suggestion: None,
            space: None,
            memory_change: Some(c),
            introduction: None,
        }));
    }

    /// A notification that replaces the earlier one with the same `key` (a count kept up
    /// to date).
    pub(in crate::agent) fn notify_keyed(&mut self, key: String, kind: NotifyKind, text: String) {
        self.buf.notify.push(Output::Notify(Notification {
            thread_id: None,
            kind,
            text,
            key: Some(key),
            suggestion: None,
            space: None,
            memory_change: None,
            introduction: None,
        }));
    }

    /// Audits a dropped packet: the first 10 since the start verbatim, then only the
    /// 20th, 50th, 100th, 200th, 500th… with the count, so no peer can grow the audit
    /// log faster than logarithmically (SPEC-NOTES §13, "Limits per peer").
    pub(in crate::agent) fn dropped(&mut self, thread_id: Option<&str>, drop: DropReason) {
        self.drops = self.drops.saturating_add(1);
        let n = self.drops;
        if n <= 10 {
            self.audit(thread_id, AgentEvent::Dropped { drop, count: None });
        } else if is_milestone(n) {
            self.audit(
                thread_id,
                AgentEvent::Dropped {
                    drop,
                    count: Some(n),
                },
            );
        }
    }

    /// Every audit record leaves through here. Its text ([`AgentEvent`]'s `Display`) is
    /// cleaned for display, as a log line shows it ([`crate::display`]).
    pub(in crate::agent) fn audit(&mut self, thread_id: Option<&str>, event: AgentEvent) {
        self.buf.audit.push(Output::Audit(AuditRecord {
            at: self.now,
            thread_id: thread_id.map(str::to_string),
            event,
        }));
    }

    /// Audits prose nothing matches on ([`AgentEvent::Note`]).
    pub(in crate::agent) fn note(&mut self, thread_id: Option<&str>, text: String) {
        self.audit(thread_id, AgentEvent::Note(text));
    }

    /// Audits an inconsistency of this agent's own (a bug, not a peer's doing).
    pub(in crate::agent) fn audit_bug(&mut self, thread_id: Option<&str>, bug: Bug) {
        self.audit(thread_id, AgentEvent::Bug(bug));
    }
}

/// A notification's or audit record's text, cleaned for display; the text itself when it
/// needed nothing.
pub(in crate::agent) fn shown(text: String) -> String {
    match crate::display::line(&text, crate::display::MAX_RECORD) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(s) => s,
    }
}

/// Whether `n` is 1, 2 or 5 times a power of ten: counts at which a collapsed record is
/// renewed.
pub(in crate::agent) fn is_milestone(n: u64) -> bool {
    let mut m = n;
    while m >= 10 && m.is_multiple_of(10) {
        m /= 10;
    }
    matches!(m, 1 | 2 | 5)
}

pub(in crate::agent) fn list<'a>(it: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = it.map(|s| s.as_str()).collect();
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}
