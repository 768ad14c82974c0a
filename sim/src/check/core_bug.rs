//! **core_bug**: the agent never audits an internal inconsistency (an audit record the core
//! flags as a bug: its one `audit_bug` path).

use std::time::Duration;

use super::Checker;

impl Checker {
    /// Agent `name` audited `event` with the bug flag set.
    pub fn core_bug(&mut self, at: Duration, name: &str, event: &str) {
        self.fail(at, "core_bug", format!("{name} audited: {event}"));
    }
}
