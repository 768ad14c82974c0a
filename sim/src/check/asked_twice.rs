//! **asked_twice**: no agent asks the same field twice in a thread (§6.4). One exception,
//! on a leg of a group thread: the coordinator's targeted flexibility request (§10.2) asks
//! the binding participant about the field it answered once more — once per field (a
//! second flexibility request for the same field on a leg is a violation).

use std::time::Duration;

use a2acp_core::agent::thread::HistoryEntry;
use a2acp_core::agent::Thread;
use serde_json::Value;

use super::probe::Probe;
use super::{Checker, ThreadCheck};

impl Checker {
    /// Checks the needs of one packet sent in thread `t` (`v`: the packet's JSON).
    pub(super) fn asked_twice_sent(
        &mut self,
        tc: &mut ThreadCheck,
        at: Duration,
        name: &str,
        t: &Thread,
        h: &HistoryEntry,
        v: &Probe,
    ) {
        // The field a flexibility request on a group leg asks again, the first time only.
        let flex = t
            .group
            .as_ref()
            .and(v.flexibility_request.as_ref())
            .and_then(|f| f.get("field"))
            .and_then(Value::as_str);
        let mut again = flex.filter(|f| tc.flexed.insert(f.to_string()));
        for list in [&v.needs, &v.additional_context_needed] {
            if let Some(Value::Array(needs)) = list {
                for n in needs {
                    if let Some(f) = n.get("field").and_then(Value::as_str) {
                        if !tc.asked.insert(f.to_string()) && again.take() != Some(f) {
                            self.fail(
                                at,
                                "asked_twice",
                                format!(
                                    "{name} asked for `{f}` a second time in {} ({} {})",
                                    t.id, h.kind, h.packet_id
                                ),
                            );
                        }
                    }
                }
            }
        }
    }
}
