//! **expect**: the final states a scenario expects of its threads.

use super::{Checker, End};

impl Checker {
    /// Checks the scenario's expectations against the threads at the end.
    pub(super) fn expectations(&mut self, end: &End<'_>) {
        let mut unmet = Vec::new();
        for e in end.expect {
            let Some(id) = end.started.get(&e.thread) else {
                unmet.push(format!("thread {} was never started", e.thread + 1));
                continue;
            };
            for (i, want) in &e.states {
                let got = end.agents[*i].and_then(|a| a.thread(id)).map(|t| t.state);
                if got != Some(*want) {
                    unmet.push(format!(
                        "thread {} at {}: expected {want}, got {}",
                        e.thread + 1,
                        end.names[*i],
                        got.map(|s| s.to_string())
                            .unwrap_or_else(|| "no thread".into())
                    ));
                }
            }
        }
        for u in unmet {
            self.fail(end.at, "expect", u);
        }
    }
}
