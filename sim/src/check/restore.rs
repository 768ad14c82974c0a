//! **restore**: every crashed participant restarts from exactly what it persisted.

use std::time::Duration;

use super::Checker;

impl Checker {
    /// `who` (an agent's name, or `the relay`) could not be restored.
    pub fn restore_failed(&mut self, at: Duration, who: &str, error: &dyn std::fmt::Display) {
        self.fail(
            at,
            "restore",
            format!("{who} could not be restored from its persisted records: {error}"),
        );
    }
}
