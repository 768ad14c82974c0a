//! An ACP agent's request through the whole bridge: two ACP sessions complete the
//! handshake, agent-alpha's request opens a thread on Bob's agent (peer
//! `agent:agent-alpha@acp.invalid`) through the same tiers and prompts as any thread, and
//! what Bob's agent says to it comes back as the signed ACP response, then as
//! notifications; a request naming the thread continues it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::agent::*;
use crate::bridge::acp::session::{AcpConfig, AcpEvent, AcpOutput, AcpSession};
use crate::bridge::acp::threads::{peer_address, Answer, Threads, NAME};
use crate::crypto::IdentityKey;
use crate::harness::dinner;
use crate::time::Timestamp;

fn seq(x: u8) -> [u8; 32] {
    std::array::from_fn(|i| x.wrapping_add(i as u8))
}

struct World {
    agent: Agent,
    bob: AcpSession,
    alpha: AcpSession,
    now: Timestamp,
    outputs: Vec<Output>,
    records: BTreeMap<String, Vec<u8>>,
    /// What agent-alpha's session reported.
    alpha_events: Vec<AcpEvent>,
}

impl World {
    fn new() -> World {
        let bob_key = IdentityKey::from_seed([2; 32]);
        let mut agent = Agent::new(dinner::bob("a2acp.io"), bob_key.clone(), [22; 32]);
        crate::bridge::install(&mut agent);
        let mut bob = AcpSession::new(AcpConfig::new("bob", "bob@a2acp.io"), bob_key, [3; 32]);
        let mut alpha = AcpSession::new(
            AcpConfig::new("agent-alpha", "principal-a"),
            IdentityKey::from_seed(seq(0)),
            [4; 32],
        );
        bob.register("agent-alpha", IdentityKey::from_seed(seq(0)).public());
        alpha.register("bob", IdentityKey::from_seed([2; 32]).public());
        let mut w = World {
            agent,
            bob,
            alpha,
            now: Timestamp::parse_rfc3339(dinner::START).unwrap(),
            outputs: Vec::new(),
            records: BTreeMap::new(),
            alpha_events: Vec::new(),
        };
        w.drain();
        w
    }

    /// The runtime's part: the agent's outputs drained (records kept, actions done), its
    /// ACP answers handed to Bob's session; both sessions' messages delivered; a request
    /// Bob's session reports handed to the agent.
    fn drain(&mut self) {
        loop {
            let before = self.outputs.len();
            let mut asked: Vec<(String, String)> = Vec::new();
            crate::harness::drain_answering_actions(
                &mut self.agent,
                self.now,
                &mut self.outputs,
                &mut self.records,
            );
            for o in &self.outputs[before..] {
                if let Output::Bridged(Bridged::Message(m)) = o {
                    if m.bridge == NAME {
                        let a: Answer = serde_json::from_str(&m.body).unwrap();
                        if a.request.is_some() {
                            self.bob
                                .deliver(
                                    self.now,
                                    &m.endpoint,
                                    a.request.as_deref(),
                                    &a.body,
                                    a.sensitive,
                                )
                                .unwrap();
                        } else {
                            // No request to answer: Bob's agent asks (as the runtime does).
                            let id = self
                                .bob
                                .request(self.now, &m.endpoint, &a.body, a.sensitive)
                                .unwrap();
                            asked.push((m.thread_id.clone(), id));
                        }
                    }
                }
            }
            let mut moved = !asked.is_empty();
            for (thread, id) in asked {
                Threads::asked(&mut self.agent, self.now, &thread, &id);
            }
            while let Some(o) = self.alpha.poll_output() {
                moved = true;
                match o {
                    AcpOutput::Send { json, .. } => self.bob.handle(self.now, json.as_bytes()),
                    AcpOutput::Refusal { .. } => panic!("alpha refused something"),
                    AcpOutput::Event(e) => self.alpha_events.push(*e),
                }
            }
            while let Some(o) = self.bob.poll_output() {
                moved = true;
                match o {
                    AcpOutput::Send { json, .. } => self.alpha.handle(self.now, json.as_bytes()),
                    AcpOutput::Refusal { json, .. } => panic!("bob refused: {json}"),
                    AcpOutput::Event(e) => {
                        if let Some(r) = Threads::on_event(&mut self.agent, self.now, &e) {
                            let _ = self.bob.respond(
                                self.now,
                                &r.peer,
                                &r.id,
                                Err((r.code, r.message)),
                                false,
                            );
                        }
                    }
                }
            }
            if !moved && self.outputs.len() == before {
                return;
            }
        }
    }

    fn tick(&mut self) {
        self.now = self.now.add(Duration::from_secs(1));
    }

    /// Bob answers his open prompts: shares what is asked, confirms a proposal.
    fn answer_prompts(&mut self) -> usize {
        let prompts = crate::harness::open_prompts(&self.outputs);
        for p in &prompts {
            self.tick();
            let c = match &p.kind {
                PromptKind::Consent { fields } => Command::AnswerConsent {
                    prompt_id: p.id,
                    answer: ConsentAnswer::ShareSelected(
                        fields
                            .iter()
                            .map(|f| (f.field.clone(), FieldChoice::Share))
                            .collect(),
                    ),
                },
                PromptKind::Resolution { .. } => Command::AnswerResolution {
                    prompt_id: p.id,
                    answer: ResolutionAnswer::Confirm,
                },
            };
            self.agent.handle_command(self.now, c);
            self.drain();
        }
        prompts.len()
    }

    /// Every body agent-alpha received (responses and notifications), in order.
    fn received(&self) -> Vec<Map<String, Value>> {
        self.alpha_events
            .iter()
            .filter_map(|e| match e {
                AcpEvent::Response { outcome: Ok(b), .. } => Some(b.clone()),
                AcpEvent::Notification { body, .. } => Some(body.clone()),
                AcpEvent::Request { body, .. } => Some(body.clone()),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn an_acp_request_is_a_thread_and_its_answer_the_acp_response() {
    let mut w = World::new();
    w.alpha.connect(w.now, "bob").unwrap();
    w.drain();
    assert!(w.bob.trust("agent-alpha").is_some());
    let ask = json!({"action": dinner::intent().summary, "parameters": dinner::context()});
    let id = w
        .alpha
        .request(w.now, "bob", ask.as_object().unwrap(), false)
        .unwrap();
    w.drain();
    // A thread with the ACP peer, carrying the request until it is answered.
    let peer = peer_address("agent-alpha").unwrap();
    assert!(peer.is_bridged());
    let tid = {
        let t = w
            .agent
            .thread_views()
            .find(|t| t.peer() == &peer)
            .expect("a thread with the ACP peer");
        t.id().to_string()
    };
    // Bob's agent asks what it needs, answers, or asks Bob: the request is answered, in
    // time, by its own thread's packets, or it waits for Bob.
    let answered = w.alpha_events.iter().any(|e| {
        matches!(e, AcpEvent::Response { id: i, outcome: Ok(b), .. }
            if *i == id && b["thread_id"] == json!(tid) && b["packets"].as_array().is_some_and(|p| !p.is_empty()))
    });
    let prompts = crate::harness::open_prompts(&w.outputs);
    assert!(answered || !prompts.is_empty(), "{:?}", w.alpha_events);
    // Bob consents and confirms; what his agent says next reaches alpha (as the answer
    // if the request still waits, else as notifications).
    let mut rounds = 0;
    while w.answer_prompts() > 0 && rounds < 10 {
        rounds += 1;
    }
    let received = w.received();
    // The request itself was answered (Bob consented within its deadline) by the
    // thread's packets, referencing its id.
    assert!(
        w.alpha_events.iter().any(|e| matches!(e,
            AcpEvent::Response { id: i, outcome: Ok(b), .. }
                if *i == id && b["thread_id"] == json!(tid) && b["state"].is_string())),
        "{:?}",
        w.alpha_events
    );
    assert!(!received.is_empty(), "{:?}", w.alpha_events);
    for b in &received {
        assert_eq!(b["thread_id"], json!(tid), "{b:?}");
    }
    let types: Vec<String> = received
        .iter()
        .flat_map(|b| b["packets"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["type"].as_str().map(str::to_string))
        .collect();
    assert!(!types.is_empty(), "{received:?}");
    // A request naming the thread continues it (here: alpha confirms what was proposed,
    // or gives more context).
    let before = w.agent.thread_view(&tid).unwrap().packets().len();
    w.tick();
    let more = if types.iter().any(|t| t == "resolution") {
        json!({"thread_id": tid, "decision": "confirm"})
    } else {
        json!({"thread_id": tid, "parameters": {"note": "any time works"}})
    };
    let id2 = w
        .alpha
        .request(w.now, "bob", more.as_object().unwrap(), false)
        .unwrap();
    w.drain();
    assert!(w.agent.thread_view(&tid).unwrap().packets().len() > before);
    assert!(
        !w.alpha_events
            .iter()
            .any(|e| matches!(e, AcpEvent::Response { id: i, outcome: Err(_), .. } if *i == id2)),
        "{:?}",
        w.alpha_events
    );
    // Nothing is left waiting without an answer: at its deadline the session answers.
    w.now = w.now.add(Duration::from_secs(31));
    w.bob.handle_timeout(w.now);
    w.drain();
    assert!(
        w.alpha.poll_timeout().is_none()
            || w.alpha_events
                .iter()
                .any(|e| matches!(e, AcpEvent::Response { id: i, .. } if *i == id2))
    );
    let st = w
        .agent
        .thread_view(&tid)
        .unwrap()
        .bridge_state(NAME)
        .cloned();
    assert!(st.is_some());
}

#[test]
fn a_request_naming_another_agents_thread_is_refused() {
    let mut w = World::new();
    w.alpha.connect(w.now, "bob").unwrap();
    w.drain();
    let ask = json!({"thread_id": "thr_nobody", "parameters": {}});
    let id = w
        .alpha
        .request(w.now, "bob", ask.as_object().unwrap(), false)
        .unwrap();
    w.drain();
    assert!(w.alpha_events.iter().any(|e| matches!(e,
        AcpEvent::Response { id: i, outcome: Err(r), .. }
            if *i == id && r.code == crate::bridge::acp::code::INVALID_PARAMS)));
}

/// The packets of thread `tid`, parsed, with whether Bob's agent sent each.
fn packets(w: &World, tid: &str) -> Vec<(bool, Value)> {
    w.agent
        .thread_view(tid)
        .unwrap()
        .packets()
        .map(|p| (p.outgoing, serde_json::from_str(p.json).unwrap()))
        .collect()
}

#[test]
fn a_handoff_is_a_thread_that_does_not_ask_again_for_what_it_carried() {
    let mut w = World::new();
    w.alpha.connect(w.now, "bob").unwrap();
    w.drain();
    let mut rest = Map::new();
    rest.insert("action".into(), json!(dinner::intent().summary));
    let handoff = crate::bridge::acp::Handoff {
        completed: vec![json!("found two restaurants in central Reading")],
        remaining: vec![json!("agree a time with Bob")],
        context: dinner::context(),
        rest,
    };
    let id = w.alpha.handoff(w.now, "bob", &handoff, false).unwrap();
    w.drain();
    let peer = peer_address("agent-alpha").unwrap();
    let tid = w
        .agent
        .thread_views()
        .find(|t| t.peer() == &peer)
        .map(|t| t.id().to_string())
        .expect("the handoff opened a thread");
    let view = w.agent.thread_view(&tid).unwrap();
    assert_eq!(view.intent().summary, dinner::intent().summary);
    // What the handoff carried is the thread's context: Bob's agent asks alpha for none
    // of it.
    for (outgoing, p) in packets(&w, &tid) {
        if !outgoing {
            continue;
        }
        for key in ["needs", "context_needed", "additional_context_needed"] {
            for n in p["body"][key].as_array().cloned().unwrap_or_default() {
                let f = n["field"].as_str().unwrap_or("");
                assert!(
                    !dinner::context().contains_key(f),
                    "asked again for `{f}`: {p}"
                );
            }
        }
    }
    // The handoff is answered like a request (or waits for Bob).
    let mut rounds = 0;
    while w.answer_prompts() > 0 && rounds < 10 {
        rounds += 1;
    }
    assert!(
        w.alpha_events.iter().any(|e| matches!(e,
            AcpEvent::Response { id: i, outcome: Ok(b), .. }
                if *i == id && b["thread_id"] == json!(tid))),
        "{:?}",
        w.alpha_events
    );
}

#[test]
fn a_thread_opened_to_an_acp_agent_goes_as_requests_and_its_responses_continue_it() {
    let mut w = World::new();
    w.alpha.connect(w.now, "bob").unwrap();
    w.drain();
    let intent = crate::packet::Intent {
        category: "scheduling".into(),
        summary: "get-availability".into(),
        urgency: None,
        scope_change: None,
    };
    let mut context = crate::packet::Context::new();
    context.insert("duration_minutes".into(), json!(60));
    w.agent.handle_command(
        w.now,
        Command::StartBridgedThread {
            bridge: NAME.into(),
            to: "acp:agent-alpha".into(),
            intent,
            context,
        },
    );
    w.drain();
    let peer = peer_address("agent-alpha").unwrap();
    let tid = w
        .agent
        .thread_views()
        .find(|t| t.peer() == &peer)
        .map(|t| t.id().to_string())
        .expect("a thread with the ACP agent");
    // Alpha received Bob's agent's request: the seed's `action` and `parameters`, and
    // the thread's packets.
    let (rid, body) = w
        .alpha_events
        .iter()
        .find_map(|e| match e {
            AcpEvent::Request { id, body, .. } => Some((id.clone(), body.clone())),
            _ => None,
        })
        .expect("a request reached the ACP agent");
    assert_eq!(body["action"], json!("get-availability"));
    assert_eq!(body["parameters"]["duration_minutes"], json!(60));
    assert_eq!(body["thread_id"], json!(tid));
    assert!(!body["packets"].as_array().unwrap().is_empty());
    let asked = w
        .agent
        .thread_view(&tid)
        .unwrap()
        .bridge_state(NAME)
        .cloned()
        .unwrap();
    assert_eq!(asked["asked"], json!(rid));
    // Alpha answers as seed 004 §8 does: the result's members are what it says.
    let before = packets(&w, &tid).len();
    w.tick();
    let answer = json!({"available_slots": ["2026-02-18T10:00:00Z", "2026-02-19T14:00:00Z"]});
    w.alpha
        .respond(w.now, "bob", &rid, Ok(answer.as_object().unwrap()), false)
        .unwrap();
    w.drain();
    let after = packets(&w, &tid);
    assert!(after.len() > before, "{after:?}");
    assert!(
        after.iter().any(|(out, p)| !out
            && p.to_string().contains("available_slots")
            && p.to_string().contains("2026-02-18T10:00:00Z")),
        "{after:?}"
    );
    // The request is no longer waiting.
    let st = w
        .agent
        .thread_view(&tid)
        .unwrap()
        .bridge_state(NAME)
        .cloned()
        .unwrap();
    assert_ne!(st["asked"], json!(rid));
}

#[test]
fn a_thread_to_a_malformed_agent_id_is_not_started() {
    let mut w = World::new();
    w.agent.handle_command(
        w.now,
        Command::StartBridgedThread {
            bridge: NAME.into(),
            to: "acp:Not Valid".into(),
            intent: dinner::intent(),
            context: crate::packet::Context::new(),
        },
    );
    w.drain();
    assert_eq!(w.agent.thread_views().count(), 0);
}
