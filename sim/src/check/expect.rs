//! **expect**: the final states a scenario expects of its threads.

use super::{Checker, End};
use crate::scenario::Expect;

impl Checker {
    /// Checks the scenario's expectations against the threads at the end.
    pub(super) fn expectations(&mut self, end: &End<'_>) {
        let mut unmet = Vec::new();
        for e in end.expect {
            if e.group {
                self.group_expectation(end, e, &mut unmet);
                continue;
            }
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

    /// Each participant's leg of group `e.thread`, at both of its ends.
    fn group_expectation(&self, end: &End<'_>, e: &Expect, unmet: &mut Vec<String>) {
        let n = e.thread + 1;
        let Some(&(c, gid)) = end.groups.get(&e.thread) else {
            unmet.push(format!("group {n} was never started"));
            return;
        };
        let Some(coordinator) = end.agents[c] else {
            unmet.push(format!("group {n}: its coordinator is down"));
            return;
        };
        let Some(g) = coordinator.groups().get(gid) else {
            unmet.push(format!("group {n}: its coordinator lost it"));
            return;
        };
        for (i, want) in &e.states {
            let Some(lid) = g.legs.get(&end.addresses[*i]) else {
                unmet.push(format!("group {n}: no leg with {}", end.names[*i]));
                continue;
            };
            for (side, agent) in [(c, Some(coordinator)), (*i, end.agents[*i])] {
                let got = agent.and_then(|a| a.thread(lid)).map(|t| t.state);
                if got != Some(*want) {
                    unmet.push(format!(
                        "group {n}, leg with {} at {}: expected {want}, got {}",
                        end.names[*i],
                        end.names[side],
                        got.map(|s| s.to_string())
                            .unwrap_or_else(|| "no thread".into())
                    ));
                }
            }
        }
    }
}
