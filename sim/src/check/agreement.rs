//! **agreement**: both agents of a thread end it the same way (and a completed thread on
//! the same resolution), once the network healed.

use a2acp_core::agent::{Thread, ThreadState};

use super::describe;

/// Thread `id`, seen from its two sides (`ts`), if they disagree.
pub(super) fn disagreement(id: &str, ts: &[(usize, &Thread)], names: &[String]) -> Option<String> {
    let [(_, a), (_, b)] = ts else {
        return None;
    };
    let both = a.state.is_terminal() && b.state.is_terminal();
    if both && a.state != b.state {
        Some(format!("{id} ended differently: {}", describe(ts, names)))
    } else if both && a.state == ThreadState::Completed {
        let ra = a.stage.resolution().map(|r| r.packet_id.clone());
        let rb = b.stage.resolution().map(|r| r.packet_id.clone());
        (ra != rb).then(|| format!("{id} completed on different resolutions: {ra:?} vs {rb:?}"))
    } else if a.state.is_terminal() != b.state.is_terminal() {
        Some(format!(
            "{id} ended on one side only after the network healed: {}",
            describe(ts, names)
        ))
    } else {
        None
    }
}
