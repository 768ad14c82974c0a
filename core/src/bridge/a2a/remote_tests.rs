//! The client direction through the agent alone (no sockets, time a parameter): Alice's
//! agent reads a card, sends the intent, answers an input-required after her consent,
//! gets the proposal, confirms, COMPLETED; and the retry rule on network failures, then
//! the thread declined.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::*;
use crate::agent::*;
use crate::crypto::IdentityKey;
use crate::harness::dinner;

struct Alice {
    agent: Agent,
    now: Timestamp,
    prompts: Vec<Prompt>,
}

impl Alice {
    fn new() -> Self {
        let mut a = Alice {
            agent: {
                let mut agent = Agent::new(
                    dinner::alice("a2acp.io"),
                    IdentityKey::from_seed([1; 32]),
                    [11; 32],
                );
                crate::bridge::install(&mut agent);
                agent
            },
            now: Timestamp::parse_rfc3339(dinner::START).unwrap(),
            prompts: Vec::new(),
        };
        a.drain();
        a
    }

    fn drain(&mut self) {
        while let Some(o) = self.agent.poll_output() {
            if let Output::Prompt(p) = o {
                self.prompts.retain(|x| x.id != p.id);
                self.prompts.push(p);
            }
        }
    }

    fn calls(&mut self) -> Vec<A2aClientCall> {
        let c = Client::take_calls(&mut self.agent, self.now);
        self.drain();
        c
    }

    fn answer(&mut self, call: &A2aClientCall, status: u16, body: Value) {
        let outcome = A2aOutcome::Response {
            status,
            body: body.to_string().into_bytes(),
        };
        Client::handle_outcome(&mut self.agent, self.now, call, outcome);
        self.drain();
    }

    fn thread(&self) -> ThreadView<'_> {
        self.agent.thread_views().next().unwrap()
    }

    fn remote(&self) -> RemoteTask {
        Client::remote_task(&self.agent, self.thread().id()).unwrap()
    }
}

fn card() -> Value {
    json!({"name": "Chez Test", "supportedInterfaces": [
        {"url": "http://r.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]})
}

fn body(call: &A2aClientCall) -> Value {
    serde_json::from_slice(call.body.as_deref().unwrap()).unwrap()
}

#[test]
fn a_task_on_a_plain_a2a_agent_ends_completed() {
    let mut a = Alice::new();
    let mut context = Context::new();
    context.insert("proposed_date".into(), json!("2026-11-27"));
    context.insert("health_info".into(), json!("asthma"));
    a.agent.handle_command(
        a.now,
        Command::StartBridgedThread {
            bridge: NAME.into(),
            to: "http://r.example/".into(),
            intent: crate::packet::Intent {
                category: "scheduling".into(),
                summary: "Table for two".into(),
                urgency: None,
                scope_change: None,
            },
            context,
        },
    );
    a.drain();
    let c = a.calls();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].kind, A2aCallKind::Card);
    assert_eq!(c[0].url, "http://r.example/.well-known/agent-card.json");
    assert!(a.calls().is_empty(), "one call per thread at a time");
    a.answer(&c[0], 200, card());

    let c = a.calls();
    assert_eq!(
        (c[0].kind, c[0].url.as_str()),
        (A2aCallKind::Send, "http://r.example/rpc")
    );
    let m = &body(&c[0])["params"]["message"];
    assert_eq!(m["parts"][0]["text"], "Table for two");
    assert_eq!(m["parts"][1]["data"]["proposed_date"], "2026-11-27");
    assert!(!m.to_string().contains("asthma"), "never_share left: {m}");
    assert!(m.get("taskId").is_none());
    a.answer(
        &c[0],
        200,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t1", "contextId": "c1",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"messageId": "s1",
                "role": "ROLE_AGENT", "parts": [{"text": "Diet?"},
                {"data": {"needs": ["dietary", "health_info"]}}]}}}}}),
    );
    let p = a.prompts.last().cloned().unwrap();
    let PromptKind::Consent { fields } = &p.kind else {
        panic!("{p:?}")
    };
    let asked: Vec<&str> = fields.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(asked, ["dietary"], "never_share is declined, not asked");
    let mut choice = BTreeMap::new();
    choice.insert(
        "dietary".to_string(),
        FieldChoice::ShareValue(json!("vegetarian")),
    );
    a.agent.handle_command(
        a.now,
        Command::AnswerConsent {
            prompt_id: p.id,
            answer: ConsentAnswer::ShareSelected(choice),
        },
    );
    a.drain();
    let c = a.calls();
    let m = &body(&c[0])["params"]["message"];
    assert_eq!(m["taskId"], "t1");
    assert_eq!(m["contextId"], "c1");
    assert_eq!(m["parts"][1]["data"], json!({"dietary": "vegetarian"}));
    assert!(m["parts"][0]["text"]
        .as_str()
        .unwrap()
        .contains("health_info"));

    a.answer(
        &c[0],
        200,
        json!({"jsonrpc": "2.0", "id": 2, "result": {"task": {"id": "t1", "contextId": "c1",
            "status": {"state": "TASK_STATE_WORKING"}}}}),
    );
    assert!(a.calls().is_empty(), "the poll waits its interval");
    a.now = a
        .now
        .add(std::time::Duration::from_millis(client::FIRST_POLL_MS));
    let c = a.calls();
    assert_eq!(c[0].kind, A2aCallKind::Poll);
    assert_eq!(body(&c[0])["method"], "GetTask");
    a.answer(
        &c[0],
        200,
        json!({"jsonrpc": "2.0", "id": 3, "result": {"id": "t1", "contextId": "c1",
            "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"artifactId": "a1", "parts": [{"text": "Table at 19:30"}]}]}}),
    );
    assert_eq!(a.thread().state(), ThreadState::Proposed);
    let p = a.prompts.last().cloned().unwrap();
    assert!(
        matches!(&p.kind, PromptKind::Resolution { proposal, .. } if proposal.summary == "Table at 19:30")
    );
    a.agent.handle_command(
        a.now,
        Command::AnswerResolution {
            prompt_id: p.id,
            answer: ResolutionAnswer::Confirm,
        },
    );
    a.drain();
    assert_eq!(a.thread().state(), ThreadState::Completed);
    assert!(a.calls().is_empty(), "nothing is sent to a completed task");
    assert_eq!(a.agent.poll_timeout().map(|t| t <= a.now), Some(false));
}

#[test]
fn network_failures_are_retried_then_the_thread_is_declined() {
    let mut a = Alice::new();
    a.agent.handle_command(
        a.now,
        Command::StartBridgedThread {
            bridge: NAME.into(),
            to: "http://r.example".into(),
            intent: crate::packet::Intent {
                category: "general".into(),
                summary: "Hello".into(),
                urgency: None,
                scope_change: None,
            },
            context: Context::new(),
        },
    );
    a.drain();
    for (attempt, wait) in [(1, 1_000), (2, 2_000)] {
        let c = a.calls();
        assert_eq!(c.len(), 1, "attempt {attempt}");
        Client::handle_outcome(
            &mut a.agent,
            a.now,
            &c[0],
            A2aOutcome::Network("refused".into()),
        );
        a.drain();
        assert!(a.calls().is_empty());
        assert_eq!(
            a.agent.poll_timeout(),
            Some(a.now.add(std::time::Duration::from_millis(wait)))
        );
        a.now = a.now.add(std::time::Duration::from_millis(wait));
    }
    let c = a.calls();
    Client::handle_outcome(
        &mut a.agent,
        a.now,
        &c[0],
        A2aOutcome::Network("refused".into()),
    );
    a.drain();
    assert_eq!(a.thread().state(), ThreadState::Declined);
    assert!(a.calls().is_empty());
}

impl Alice {
    /// A thread with the card read and the first message answered by an input-required
    /// task `t1`: the point where this user can call it off.
    fn with_open_task() -> Self {
        let mut a = Alice::new();
        a.start("Table for two");
        let c = a.calls();
        a.answer(&c[0], 200, card());
        let c = a.calls();
        assert_eq!(c[0].kind, A2aCallKind::Send);
        a.answer(
            &c[0],
            200,
            json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t1", "contextId": "c1",
                "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"messageId": "s1",
                    "role": "ROLE_AGENT", "parts": [{"text": "How many?"},
                    {"data": {"needs": ["party_size"]}}]}}}}}),
        );
        a
    }

    fn start(&mut self, summary: &str) {
        self.agent.handle_command(
            self.now,
            Command::StartBridgedThread {
                bridge: NAME.into(),
                to: "http://r.example/".into(),
                intent: crate::packet::Intent {
                    category: "scheduling".into(),
                    summary: summary.into(),
                    urgency: None,
                    scope_change: None,
                },
                context: Context::new(),
            },
        );
        self.drain();
    }

    fn cancel(&mut self) {
        let thread_id = self.thread().id().to_string();
        self.agent
            .handle_command(self.now, Command::CancelThread { thread_id });
        self.drain();
    }
}

#[test]
fn a_cancel_by_this_user_cancels_the_remote_task() {
    let mut a = Alice::with_open_task();
    assert!(!a.prompts.is_empty(), "the consent prompt is open");
    a.cancel();
    assert_eq!(a.thread().state(), ThreadState::Declined);
    let c = a.calls();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].kind, A2aCallKind::Cancel);
    assert_eq!(c[0].url, "http://r.example/rpc");
    let b = body(&c[0]);
    assert_eq!(b["method"], "CancelTask", "not a decline in words: {b}");
    assert_eq!(b["params"], json!({"id": "t1"}));
    assert!(a.calls().is_empty(), "one call at a time");
    a.answer(
        &c[0],
        200,
        json!({"jsonrpc": "2.0", "id": 2, "result": {"id": "t1", "contextId": "c1",
            "status": {"state": "TASK_STATE_CANCELED"}}}),
    );
    assert_eq!(a.thread().state(), ThreadState::Declined);
    let r = a.remote();
    assert!(!r.cancel);
    assert_eq!(r.state.as_deref(), Some("TASK_STATE_CANCELED"));
    assert!(a.calls().is_empty(), "nothing after the cancel");
    assert_eq!(a.agent.poll_timeout().map(|t| t <= a.now), Some(false));
}

#[test]
fn a_refused_or_failed_cancel_is_noted_and_ends_there() {
    // The remote agent refuses (its task is not cancelable): noted, nothing more sent.
    let mut a = Alice::with_open_task();
    a.cancel();
    let c = a.calls();
    a.answer(
        &c[0],
        200,
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32002, "message": "Task cannot be canceled"}}),
    );
    assert_eq!(a.thread().state(), ThreadState::Declined);
    assert!(!a.remote().cancel);
    assert!(a.calls().is_empty());

    // The network fails: the cancel is retried by the seed-001 rule, then given up.
    let mut a = Alice::with_open_task();
    a.cancel();
    for wait in [1_000, 2_000] {
        let c = a.calls();
        assert_eq!(c[0].kind, A2aCallKind::Cancel);
        Client::handle_outcome(
            &mut a.agent,
            a.now,
            &c[0],
            A2aOutcome::Network("reset".into()),
        );
        a.drain();
        a.now = a.now.add(std::time::Duration::from_millis(wait));
    }
    let c = a.calls();
    assert_eq!(c[0].kind, A2aCallKind::Cancel, "the third attempt");
    Client::handle_outcome(
        &mut a.agent,
        a.now,
        &c[0],
        A2aOutcome::Network("reset".into()),
    );
    a.drain();
    assert!(a.calls().is_empty(), "three attempts in all");
    assert!(!a.remote().cancel);
    assert_eq!(a.thread().state(), ThreadState::Declined);
}

#[test]
fn a_cancel_before_any_task_sends_nothing() {
    // Called off while the card is read: the first message never leaves, nothing to cancel.
    let mut a = Alice::new();
    a.start("Table for two");
    let c = a.calls();
    assert_eq!(c[0].kind, A2aCallKind::Card);
    a.cancel();
    assert_eq!(a.thread().state(), ThreadState::Declined);
    a.answer(&c[0], 200, card());
    assert!(a.calls().is_empty(), "no message, no CancelTask");
    let r = a.remote();
    assert!(r.unsent.is_empty() && !r.cancel, "{r:?}");

    // Called off while the first message is out: its task is cancelled once it answers.
    let mut a = Alice::new();
    a.start("Table for two");
    let c = a.calls();
    a.answer(&c[0], 200, card());
    let c = a.calls();
    assert_eq!(c[0].kind, A2aCallKind::Send);
    a.cancel();
    assert!(a.calls().is_empty(), "the send is still out");
    a.answer(
        &c[0],
        200,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t9",
            "status": {"state": "TASK_STATE_WORKING"}}}}),
    );
    let c = a.calls();
    assert_eq!(c.len(), 1);
    assert_eq!(body(&c[0])["method"], "CancelTask");
    assert_eq!(body(&c[0])["params"]["id"], "t9");
}

/// §18 graceful degradation: Alice's config names an A2A agent card for an address no
/// a2acp agent holds. Her thread to it is declined when the relay says so, and the same
/// intent and context go on in a new thread with that A2A agent (its card read first);
/// the user is told both. Without the entry nothing goes on.
#[test]
fn a_thread_to_an_unknown_address_with_an_a2a_card_goes_on_with_that_agent() {
    use crate::harness::Net;
    let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let chez = Address::new("chez", "a2acp.io").unwrap();
    let mut alice = dinner::alice("a2acp.io");
    alice.bridged_fallbacks.insert(
        chez.clone(),
        BridgedFallback {
            bridge: NAME.into(),
            to: "https://chez.example/.well-known/agent-card.json".into(),
        },
    );
    let intent = Intent {
        urgency: Some("normal".into()),
        ..dinner::intent()
    };
    let a = net.add_agent(alice, [1; 32], [11; 32]);
    net.connect(a);
    net.settle();
    net.command(
        a,
        Command::StartThread {
            to: chez.clone(),
            intent: intent.clone(),
            context: dinner::context(),
        },
    );
    let first = net.nodes[a]
        .agent
        .thread_views()
        .last()
        .map(|t| t.id().to_string())
        .unwrap();
    net.settle();
    let agent = &net.nodes[a].agent;
    assert_eq!(
        agent.thread_view(&first).unwrap().state(),
        ThreadState::Declined
    );
    let others: Vec<String> = agent
        .thread_views()
        .filter(|t| t.id() != first)
        .map(|t| t.id().to_string())
        .collect();
    assert_eq!(others.len(), 1, "one new thread");
    let id = &others[0];
    let remote = Client::remote_task(agent, id).expect("a thread with an A2A agent");
    assert_eq!(
        remote.card_url,
        "https://chez.example/.well-known/agent-card.json"
    );
    let t = agent.thread_view(id).unwrap();
    assert!(t.peer().is_a2a(), "{}", t.peer());
    let first_packet = t.packets().next().expect("the first packet");
    assert!(
        first_packet.json.contains(&intent.summary),
        "the same intent: {}",
        first_packet.json
    );
    assert_eq!(
        agent.thread(&first).unwrap().continued_as.as_deref(),
        Some(id.as_str()),
        "the declined thread says where it goes on"
    );
    let n = net.nodes[a]
        .notifications
        .iter()
        .find(|n| n.kind == NotifyKind::Declined)
        .expect("declined notification");
    assert_eq!(n.thread_id.as_deref(), Some(first.as_str()));
    assert!(
        n.text.contains("agent:chez@a2acp.io") && n.text.contains("https://chez.example/"),
        "{}",
        n.text
    );
    assert!(n.text.contains("its A2A agent"), "{}", n.text);
    let now = net.now;
    let calls = Client::take_calls(&mut net.nodes[a].agent, now);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].kind, A2aCallKind::Card);
    assert_eq!(&calls[0].thread_id, id);
}
