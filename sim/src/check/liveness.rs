//! **liveness**: every participant is up at the end of a run, and every thread has
//! finished or waits on a person (a prompt, a halted thread, the user) once the network
//! healed.

use std::collections::BTreeSet;

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

/// Whether side `i` of thread `t` waits on a person.
fn side_on_human(i: usize, t: &Thread, end: &End<'_>) -> bool {
    !t.state.is_terminal()
        && (t.waiting == Waiting::User || t.halted || end.prompted[i].contains(t.id.as_str()))
}

/// The group threads that wait on a person: a leg of theirs does, at either end, or a
/// user has the group's own prompt open (the coordinator's resolution prompt names the
/// group, not a leg).
pub(super) fn groups_on_human(end: &End<'_>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, a) in end.agents.iter().enumerate() {
        let Some(a) = a else { continue };
        for t in a.threads().values() {
            if let Some(g) = &t.group {
                if side_on_human(i, t, end) {
                    out.insert(g.header.group_id.clone());
                }
            }
        }
        for gid in a.groups().keys() {
            if end.prompted[i].contains(gid.as_str()) {
                out.insert(gid.clone());
            }
        }
    }
    out
}

/// Thread `id`, seen from each side that has it (`ts`), if it is stuck: neither finished
/// nor waiting on a person — nor, for a leg of a group thread, is its group.
pub(super) fn thread_stuck(
    id: &str,
    ts: &[(usize, &Thread)],
    end: &End<'_>,
    waiting_groups: &BTreeSet<String>,
) -> Option<String> {
    // A thread split into children (§6.5) is finished: its children carry on.
    let all_terminal = ts
        .iter()
        .all(|(_, t)| t.state.is_terminal() || !t.forked_into.is_empty());
    let on_human = ts.iter().any(|(i, t)| {
        side_on_human(*i, t, end)
            || (!t.state.is_terminal()
                && t.group
                    .as_ref()
                    .is_some_and(|g| waiting_groups.contains(&g.header.group_id)))
    });
    (!all_terminal && !on_human).then(|| {
        format!(
            "{id} is neither finished nor waiting on a person after the network healed: {}",
            describe(ts, end.names)
        )
    })
}
