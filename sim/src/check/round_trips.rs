//! **round_trips**: no agent sends a context exchange when the thread already counted
//! `max_round_trips` of them since the last escalation (§6.4).

use std::time::Duration;

use super::probe::Probe;
use super::{Checker, ThreadCheck};
use a2acp_core::agent::thread::HistoryEntry;
use a2acp_core::agent::Thread;

/// Packets that count as a context exchange (§6.4), as the core counts them.
fn counts_as_exchange(v: &Probe) -> bool {
    match v.ty() {
        Some("context") | None => !v.escalated() || v.alternatives,
        Some("context_request" | "context_response" | "intent_update") => true,
        _ => false,
    }
}

fn is_escalation(v: &Probe) -> bool {
    v.ty() == Some("context") && v.escalated() && !v.alternatives
}

impl Checker {
    /// The user of `node` intervened in a thread (new context): a new round-trip budget.
    pub fn user_resumed(&mut self, node: usize, thread: &str) {
        if let Some(tc) = self.threads.get_mut(&node).and_then(|m| m.get_mut(thread)) {
            tc.exchanges = 0;
        }
    }

    /// Checks one packet sent in thread `t` against the round-trip limit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn round_trips_sent(
        &mut self,
        tc: &ThreadCheck,
        at: Duration,
        name: &str,
        t: &Thread,
        h: &HistoryEntry,
        v: &Probe,
        limit: u32,
    ) {
        if counts_as_exchange(v) && tc.exchanges >= limit {
            self.fail(
                at,
                "round_trips",
                format!(
                    "{name} sent {} {} in {} after {} exchanges without escalating (limit {limit})",
                    h.kind, h.packet_id, t.id, tc.exchanges
                ),
            );
        }
    }
}

/// Counts one packet of the thread, either way: an escalation starts a new budget.
pub(super) fn count(tc: &mut ThreadCheck, v: &Probe) {
    if is_escalation(v) {
        tc.exchanges = 0;
    } else if counts_as_exchange(v) {
        tc.exchanges += 1;
    }
}
