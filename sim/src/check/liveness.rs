//! **liveness**: every participant is up at the end of a run, and every thread has
//! finished or waits on a person (a prompt, a halted thread, the user) once the network
//! healed.

use a2acp_core::agent::{Thread, Waiting};

use super::{describe, Checker, End, Violation};

impl Checker {
    /// Every agent still down at the end of the run (counted past the cap of violations).
    pub(super) fn agents_down(&mut self, end: &End<'_>) {
        for (i, a) in end.agents.iter().enumerate() {
            if a.is_none() {
                self.violations.push(Violation {
                    at: end.at,
                    check: "liveness",
                    detail: format!("{} is still down at the end of the run", end.names[i]),
                });
            }
        }
    }
}

/// Thread `id`, seen from each side that has it (`ts`), if it is stuck: neither finished
/// nor waiting on a person.
pub(super) fn thread_stuck(id: &str, ts: &[(usize, &Thread)], end: &End<'_>) -> Option<String> {
    let all_terminal = ts.iter().all(|(_, t)| t.state.is_terminal());
    let on_human = ts.iter().any(|(i, t)| {
        !t.state.is_terminal()
            && (t.waiting == Waiting::User || t.halted || end.prompted[*i].contains(id))
    });
    (!all_terminal && !on_human).then(|| {
        format!(
            "{id} is neither finished nor waiting on a person after the network healed: {}",
            describe(ts, end.names)
        )
    })
}
