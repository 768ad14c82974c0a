//! Helpers the agent's unit tests share: two agents on the harness's virtual network,
//! the §4 dinner driven to a proposal, and reading what each side holds and was told.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::agent::*;
use crate::harness::hostile::HostilePeer;
use crate::harness::{dinner, Net};
use crate::packet::Proposal;

/// Alice and Bob of the §4 dinner, connected to one relay, at the dinner's start time.
pub(in crate::agent) fn dinner_net() -> (Net, usize, usize) {
    let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let a = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    let b = net.add_agent(dinner::bob("a2acp.io"), [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    (net, a, b)
}

/// The thread node `i` opened or received last: the one id not in `before`.
pub(in crate::agent) fn new_thread(net: &Net, i: usize, before: &[String]) -> String {
    net.nodes[i]
        .agent
        .threads()
        .keys()
        .find(|k| !before.contains(k))
        .cloned()
        .expect("a new thread")
}

/// The state of thread `id` on node `i`.
pub(in crate::agent) fn state(net: &Net, i: usize, id: &str) -> ThreadState {
    net.nodes[i].agent.thread(id).unwrap().state
}

/// The §4 dinner, from the first packet to COMPLETED on both sides.
pub(in crate::agent) fn complete_dinner(net: &mut Net, a: usize, b: usize) -> String {
    let id = to_proposed(net, a, b);
    confirm_and_complete(net, a, b, &id);
    id
}

/// Both users confirm the open proposal of thread `id`; its actions succeed, and the
/// thread is COMPLETED on both sides.
pub(in crate::agent) fn confirm_and_complete(net: &mut Net, a: usize, b: usize, id: &str) {
    for i in [a, b] {
        let p = net.prompt(i).expect("resolution prompt");
        net.answer_resolution(i, p.id, ResolutionAnswer::Confirm);
    }
    net.settle();
    while net.finish_action(a, Ok(())).is_some() || net.finish_action(b, Ok(())).is_some() {
        net.settle();
    }
    net.settle();
    assert_eq!(
        state(net, a, id),
        ThreadState::Completed,
        "{}",
        net.render(None)
    );
    assert_eq!(state(net, b, id), ThreadState::Completed);
}

/// Node `a`'s user shares `transport_mode` at the open consent prompt.
pub(in crate::agent) fn share_transport(net: &mut Net, a: usize) {
    let p = net.prompt(a).expect("consent prompt");
    let mut m = BTreeMap::new();
    m.insert("transport_mode".to_string(), FieldChoice::Share);
    net.answer_consent(a, p.id, ConsentAnswer::ShareSelected(m));
    net.settle();
}

/// Alice (`a`) opens the §4 dinner with Bob (`b`) and shares her transport mode; Bob
/// proposes. Returns the thread id.
pub(in crate::agent) fn to_proposed(net: &mut Net, a: usize, b: usize) -> String {
    let id = start_dinner(net, a, b);
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

/// Alice (`a`) opens the §4 dinner with Bob (`b`); the network settles. Returns the
/// thread id.
pub(in crate::agent) fn start_dinner(net: &mut Net, a: usize, b: usize) -> String {
    let to = net.address(b);
    let before: Vec<String> = net.nodes[a].agent.threads().keys().cloned().collect();
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner::intent(),
            context: dinner::context(),
        },
    );
    net.settle();
    // Thread ids are random: the new one is the one that was not there before.
    new_thread(net, a, &before)
}

/// The texts of node `i`'s notifications of `kind`.
pub(in crate::agent) fn notices(net: &Net, i: usize, kind: NotifyKind) -> Vec<String> {
    net.nodes[i]
        .notifications
        .iter()
        .filter(|n| n.kind == kind)
        .map(|n| n.text.clone())
        .collect()
}

/// Whether node `i` was told anything of `kind`.
pub(in crate::agent) fn notified(net: &Net, i: usize, kind: NotifyKind) -> bool {
    !notices(net, i, kind).is_empty()
}

/// The open resolution prompt of node `i` and its proposal.
pub(in crate::agent) fn resolution_prompt(net: &Net, i: usize) -> (Prompt, Proposal) {
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
pub(in crate::agent) fn open_proposal(net: &Net, i: usize, id: &str) -> Proposal {
    net.nodes[i]
        .agent
        .thread(id)
        .and_then(|t| t.stage.resolution())
        .map(|r| r.body.proposal.clone())
        .expect("an open resolution")
}

/// The packets of `kind` node `i` sent in thread `id`, as JSON.
pub(in crate::agent) fn sent(net: &Net, i: usize, id: &str, kind: &str) -> Vec<Value> {
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

/// Alice (and Bob, when asked for) with Mallory, a validly signed hostile peer
/// ([`HostilePeer`]), on one relay.
pub(in crate::agent) struct HostileWorld {
    pub(in crate::agent) net: Net,
    pub(in crate::agent) alice: usize,
    /// Bob, an honest peer beside Mallory, if the world has one.
    pub(in crate::agent) bob: Option<usize>,
    pub(in crate::agent) m: HostilePeer,
}

impl HostileWorld {
    /// Alice with `limits`, Mallory, and Bob if `with_bob`.
    pub(in crate::agent) fn new(limits: Limits, with_bob: bool) -> Self {
        let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
        let mut net = Net::new("a2acp.io", start, [7; 32]);
        let mut a = dinner::alice("a2acp.io");
        a.limits = limits;
        let alice = net.add_agent(a, [1; 32], [11; 32]);
        let bob = with_bob.then(|| net.add_agent(dinner::bob("a2acp.io"), [2; 32], [22; 32]));
        net.connect(alice);
        if let Some(b) = bob {
            net.connect(b);
        }
        net.settle();
        let m = HostilePeer::join(&mut net, "mallory", [66; 32]).unwrap();
        HostileWorld { net, alice, bob, m }
    }

    /// Alice deciding with a model (`use_llm`), and Mallory.
    pub(in crate::agent) fn with_llm() -> Self {
        let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
        let mut net = Net::new("a2acp.io", start, [7; 32]);
        let mut a = dinner::alice("a2acp.io");
        a.use_llm = true;
        let alice = net.add_agent(a, [1; 32], [11; 32]);
        net.connect(alice);
        net.settle();
        let m = HostilePeer::join(&mut net, "mallory", [66; 32]).unwrap();
        HostileWorld {
            net,
            alice,
            bob: None,
            m,
        }
    }

    pub(in crate::agent) fn alice_addr(&self) -> Address {
        self.net.address(self.alice)
    }

    /// Mallory sends one packet of type `kind` with `body` in `thread` and lets it arrive.
    pub(in crate::agent) fn m_send(&mut self, thread: &str, kind: &str, body: Value) -> String {
        let to = self.alice_addr();
        let p = self.m.packet(&self.net, &to, thread, kind, body);
        self.m.send(&mut self.net, &to, &p).unwrap();
        self.m.pump(&mut self.net);
        p["packet_id"].as_str().unwrap_or_default().to_string()
    }

    /// Alice opens the dinner with Mallory, who reads it.
    pub(in crate::agent) fn alice_opens(&mut self) -> String {
        let to = self.m.address.clone();
        self.net.command(
            self.alice,
            Command::StartThread {
                to,
                intent: dinner::intent(),
                context: dinner::context(),
            },
        );
        self.m.pump(&mut self.net);
        self.m
            .received
            .iter()
            .find(|r| r.kind() == "context")
            .map(|r| r.thread_id.clone())
            .expect("alice's first packet")
    }

    /// The state of `thread` on Alice's side.
    pub(in crate::agent) fn state(&self, thread: &str) -> ThreadState {
        state(&self.net, self.alice, thread)
    }
}
