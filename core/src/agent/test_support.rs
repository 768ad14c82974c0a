//! Helpers the agent's unit tests share: two agents on the harness's virtual network,
//! the §4 dinner driven to a proposal, and reading what each side holds and was told.

use std::collections::BTreeMap;

use serde_json::Value;

use super::*;
use crate::harness::{dinner, Net};
use crate::packet::Proposal;

/// The state of thread `id` on node `i`.
pub(super) fn state(net: &Net, i: usize, id: &str) -> ThreadState {
    net.nodes[i].agent.thread(id).unwrap().state
}

/// Node `a`'s user shares `transport_mode` at the open consent prompt.
pub(super) fn share_transport(net: &mut Net, a: usize) {
    let p = net.prompt(a).expect("consent prompt");
    let mut m = BTreeMap::new();
    m.insert("transport_mode".to_string(), FieldChoice::Share);
    net.answer_consent(a, p.id, ConsentAnswer::ShareSelected(m));
    net.settle();
}

/// Alice (`a`) opens the §4 dinner with Bob (`b`) and shares her transport mode; Bob
/// proposes. Returns the thread id.
pub(super) fn to_proposed(net: &mut Net, a: usize, b: usize) -> String {
    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner::intent(),
            context: dinner::context(),
        },
    );
    net.settle();
    let id = net.nodes[a].agent.threads().keys().last().cloned().unwrap();
    share_transport(net, a);
    assert_eq!(
        state(net, a, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    assert_eq!(state(net, b, &id), ThreadState::Proposed);
    id
}

/// The texts of node `i`'s notifications of `kind`.
pub(super) fn notices(net: &Net, i: usize, kind: NotifyKind) -> Vec<String> {
    net.nodes[i]
        .notifications
        .iter()
        .filter(|n| n.kind == kind)
        .map(|n| n.text.clone())
        .collect()
}

/// Whether node `i` was told anything of `kind`.
pub(super) fn notified(net: &Net, i: usize, kind: NotifyKind) -> bool {
    !notices(net, i, kind).is_empty()
}

/// The open resolution prompt of node `i` and its proposal.
pub(super) fn resolution_prompt(net: &Net, i: usize) -> (Prompt, Proposal) {
    let p = net.nodes[i]
        .prompts
        .values()
        .find(|p| matches!(p.kind, PromptKind::Resolution { .. }))
        .cloned()
        .unwrap_or_else(|| panic!("no resolution prompt\n{}", net.render(None)));
    let PromptKind::Resolution { proposal, .. } = &p.kind else {
        unreachable!()
    };
    let proposal = proposal.clone();
    (p, proposal)
}

/// The proposal of the resolution node `i` holds open in thread `id`.
pub(super) fn open_proposal(net: &Net, i: usize, id: &str) -> Proposal {
    net.nodes[i]
        .agent
        .thread(id)
        .and_then(|t| t.resolution.as_ref())
        .map(|r| r.body.proposal.clone())
        .expect("an open resolution")
}

/// The packets of `kind` node `i` sent in thread `id`, as JSON.
pub(super) fn sent(net: &Net, i: usize, id: &str, kind: &str) -> Vec<Value> {
    net.nodes[i]
        .agent
        .thread(id)
        .unwrap()
        .history
        .iter()
        .filter(|h| h.outgoing && h.kind == kind)
        .filter_map(|h| serde_json::from_str(&h.json).ok())
        .collect()
}
