//! A Phase-1 task's lifecycle through `Tasks::handle` alone (seed 001 "Task lifecycle"):
//! a sender that can only assign and read — its task completes once Bob consents and
//! confirms, fields it did not supply declined on its behalf and named; Bob declining
//! fails it with the reason; Bob never answering fails it with `TIMEOUT` at the bound;
//! the stand-in never answers Bob's own prompts; a restore keeps the task.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{json, Value};

use crate::agent::*;
use crate::bridge::phase1::tasks::{task_of, NAME};
use crate::bridge::phase1::*;
use crate::crypto::IdentityKey;
use crate::harness::dinner;
use crate::time::Timestamp;

const SENDER: &str = "0b0b0b0b-0000-4000-8000-00000000a11c";

fn start() -> Timestamp {
    Timestamp::parse_rfc3339(dinner::START).unwrap()
}

/// Bob's agent with its outputs drained (records kept, actions answered as done).
struct Bob {
    agent: Agent,
    now: Timestamp,
    outputs: Vec<Output>,
    records: BTreeMap<String, Vec<u8>>,
    n: u64,
}

impl Bob {
    fn new() -> Self {
        let mut b = Bob {
            agent: {
                let mut agent = Agent::new(
                    dinner::bob("a2acp.io"),
                    IdentityKey::from_seed([2; 32]),
                    [22; 32],
                );
                crate::bridge::install(&mut agent);
                agent
            },
            now: start(),
            outputs: Vec::new(),
            records: BTreeMap::new(),
            n: 0,
        };
        b.drain();
        b
    }

    fn drain(&mut self) {
        crate::harness::drain_answering_actions(
            &mut self.agent,
            self.now,
            &mut self.outputs,
            &mut self.records,
        );
    }

    /// One seed-001 message from the sender, built by hand: the HTTP status and the
    /// answering message.
    fn send(&mut self, kind: &str, payload: Value) -> (u16, Value) {
        self.n += 1;
        self.now = self.now.add(Duration::from_secs(1));
        let body = json!({
            "version": "1.0.0",
            "message_id": format!("00000000-0000-4000-8000-{:012x}", self.n),
            "timestamp": self.now.to_rfc3339(),
            "from": SENDER,
            "to": Tasks::id(&self.agent).hyphenated().to_string(),
            "type": kind,
            "payload": payload,
        });
        let r = Tasks::handle(&mut self.agent, self.now, body.to_string().as_bytes());
        self.drain();
        (r.status, r.body)
    }

    fn assign(&mut self, task_id: &str, extra: Value) -> (u16, Value) {
        let mut p = json!({
            "task_id": task_id, "task_type": "scheduling", "title": "Dinner with Bob on Friday",
            "description": "Find a time and a place for dinner",
            "payload": {"proposed_date": "2026-03-27", "time_windows": ["18:00-21:00"],
                        "timezone": "Europe/London", "dietary": ["vegetarian"], "party_size": 2},
        });
        if let (Some(p), Some(e)) = (p.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        self.send("task_assignment", p)
    }

    /// The sender asks where its task stands (a `status_update` about it).
    fn poll(&mut self, task_id: &str) -> Value {
        let (status, r) = self.send(
            "status_update",
            json!({"task_id": task_id, "status": "in_progress"}),
        );
        assert_eq!(status, 200, "{r}");
        r
    }

    fn prompts(&self) -> Vec<Prompt> {
        crate::harness::open_prompts(&self.outputs)
    }

    /// Bob answers his open prompts: shares what is asked, and answers a proposal with
    /// `resolution`. Returns how many he answered.
    fn answer(&mut self, resolution: ResolutionAnswer) -> usize {
        let prompts = self.prompts();
        for p in &prompts {
            self.now = self.now.add(Duration::from_secs(1));
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
                    answer: resolution.clone(),
                },
            };
            self.agent.handle_command(self.now, c);
            self.drain();
        }
        prompts.len()
    }

    fn task(&self) -> Phase1Task {
        task_of(&self.agent, self.thread().id()).expect("a Phase-1 task")
    }

    fn thread(&self) -> ThreadView<'_> {
        let mut p1 = self
            .agent
            .thread_views()
            .filter(|t| t.bridge_state(NAME).is_some());
        let t = p1.next().expect("a Phase-1 task");
        assert!(p1.next().is_none());
        t
    }
}

/// Nothing the sender cannot act on: no request for data, no decision asked of it.
fn readable(r: &Value) {
    let text = r.to_string();
    for words in ["Reply with", "Needed:", "decision"] {
        assert!(!text.contains(words), "{words} in {r}");
    }
}

#[test]
fn a_seed_only_sender_gets_its_scheduling_task_completed() {
    let mut bob = Bob::new();
    let (status, r) = bob.assign("t-dinner", json!({}));
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["type"], "status_update", "{r}");
    assert_eq!(r["to"], SENDER);
    readable(&r);
    let tid = bob.thread().id().to_string();
    // Bob is asked, as for any thread; the sender's stand-in answers none of his prompts.
    let mut answered = 0;
    let mut seen = Vec::new();
    for _ in 0..10 {
        let r = bob.poll("t-dinner");
        readable(&r);
        seen.push(r["payload"]["status"].clone());
        if r["type"] == "task_completion" {
            break;
        }
        assert!(
            !bob.prompts().is_empty(),
            "the task waits for Bob only: {r} {:?}",
            bob.thread().state()
        );
        answered += bob.answer(ResolutionAnswer::Confirm);
    }
    assert!(answered >= 2, "Bob consented and confirmed: {answered}");
    let r = bob.poll("t-dinner");
    assert_eq!(r["type"], "task_completion", "{r} after {seen:?}");
    let p = &r["payload"];
    assert_eq!(p["task_id"], "t-dinner");
    assert_eq!(p["status"], "completed", "{r}");
    assert!(p["result"]["proposal"]["summary"].is_string(), "{r}");
    assert_eq!(p["result"]["summary"], p["result"]["proposal"]["summary"]);
    assert!(p["execution_time_ms"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(
        bob.agent.thread_view(&tid).unwrap().state(),
        ThreadState::Completed
    );
    // Every field the negotiation asked of the sender and the assignment lacked was
    // declined on its behalf, and is named.
    let t = bob.agent.thread_view(&tid).unwrap();
    let asked: BTreeSet<String> = t
        .packets()
        .filter(|h| h.outgoing)
        .filter_map(|h| crate::packet::Packet::parse(h.json.as_bytes()).ok())
        .flat_map(|p| {
            p.body
                .needs()
                .iter()
                .map(|n| n.field.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    let not_supplied: Vec<&str> = p["result"]["not_supplied"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for f in &not_supplied {
        assert!(asked.contains(*f) && t.answered(f), "{f}");
    }
    for f in &asked {
        assert!(t.answered(f), "{f} asked and never answered");
    }
    // The answer is a valid seed-001 message.
    crate::bridge::phase1::envelope::validate(r.to_string().as_bytes()).expect("a valid message");
    // A restore from the records holds the same task and answers the same.
    let restored = Agent::restore(
        dinner::bob("a2acp.io"),
        IdentityKey::from_seed([2; 32]),
        [22; 32],
        bob.records.clone(),
    )
    .expect("restore");
    assert_eq!(task_of(&restored, &tid), task_of(&bob.agent, &tid));
    assert!(task_of(&restored, &tid).is_some());
    assert_eq!(
        Tasks::report(&restored, &tid),
        Tasks::report(&bob.agent, &tid)
    );
}

/// A thread record written before the bridges moved out of the agent held the bridges'
/// state as members of its own (`a2a_context`, `a2a_sent`, `phase1`, in the places the
/// thread's fields had): such a record restores with nothing lost, and is written back
/// with the same members.
#[test]
fn a_record_written_before_the_bridges_moved_out_restores_whole() {
    let mut bob = Bob::new();
    let (status, r) = bob.assign(
        "t-old",
        json!({"metadata": {"reply_to": "http://127.0.0.1:9/"}}),
    );
    assert_eq!(status, 200, "{r}");
    let tid = bob.thread().id().to_string();
    let key = format!("thread/{tid}");
    let now: Value = serde_json::from_slice(&bob.records[&key]).unwrap();
    let members = now.as_object().unwrap();
    // The record as the agent wrote it before: the thread's members, the bridges' ones
    // among them where its fields were (after `peer_response_ms`; `phase1` last).
    let bridged = ["a2a_context", "a2a_sent", "a2a_remote", "phase1"];
    let mut order: Vec<&str> = Vec::new();
    for k in members.keys() {
        if bridged.contains(&k.as_str()) {
            continue;
        }
        order.push(k);
        if k == "peer_response_ms" {
            order.extend(&bridged[..3]);
        }
    }
    for b in &bridged {
        if !order.contains(b) {
            order.push(b);
        }
    }
    let old = format!(
        "{{{}}}",
        order
            .iter()
            .filter_map(|k| members.get(*k).map(|v| format!("{}:{v}", json!(k))))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert!(old.contains("\"a2a_context\":\"t-old\""), "{old}");
    assert!(old.contains("\"phase1\":{"), "{old}");
    let mut records = bob.records.clone();
    records.insert(key.clone(), old.into_bytes());
    let mut restored = Agent::restore(
        dinner::bob("a2acp.io"),
        IdentityKey::from_seed([2; 32]),
        [22; 32],
        records,
    )
    .expect("an old record restores");
    crate::bridge::install(&mut restored);
    assert!(task_of(&restored, &tid).is_some());
    assert_eq!(task_of(&restored, &tid), task_of(&bob.agent, &tid));
    assert_eq!(
        Tasks::report(&restored, &tid),
        Tasks::report(&bob.agent, &tid)
    );
    let view = restored.thread_view(&tid).unwrap();
    for b in ["a2a_context", "a2a_sent", "phase1"] {
        assert_eq!(view.bridge_state(b), members.get(b), "{b}");
    }
    // Written back, the thread has the same members with the same values.
    let back = serde_json::to_value(restored.thread(&tid).unwrap()).unwrap();
    for b in ["a2a_context", "a2a_sent", "phase1"] {
        assert_eq!(back.get(b), members.get(b), "{b}");
    }
}

#[test]
fn bob_declining_fails_the_task_with_the_reason_and_nothing_more() {
    let mut bob = Bob::new();
    bob.assign("t-decline", json!({}));
    let mut last = Value::Null;
    for _ in 0..10 {
        last = bob.poll("t-decline");
        if last["type"] == "task_completion" {
            break;
        }
        bob.answer(ResolutionAnswer::Decline);
    }
    assert_eq!(last["type"], "task_completion", "{last}");
    let p = &last["payload"];
    assert_eq!(p["status"], "failed", "{last}");
    assert_eq!(p["result"]["reason"], "declined", "{last}");
    assert_eq!(p["result"]["summary"], "Declined by the agent's user.");
    // The proposal Bob declined is not handed over.
    assert!(p["result"].get("proposal").is_none(), "{last}");
    assert_eq!(bob.thread().state(), ThreadState::Declined);
    readable(&last);
}

#[test]
fn a_task_nobody_answers_fails_with_timeout_at_its_deadline() {
    let mut bob = Bob::new();
    let deadline = bob.now.add(Duration::from_secs(600));
    let (status, r) = bob.assign("t-late", json!({"deadline": deadline.to_rfc3339()}));
    assert_eq!(status, 200, "{r}");
    assert_eq!(bob.task().deadline, deadline);
    assert!(!bob.prompts().is_empty(), "Bob is asked");
    // The agent wakes by the deadline at the latest; Bob never answers.
    let wake = bob.agent.poll_timeout().expect("a timer");
    assert!(wake <= deadline, "{wake:?}");
    bob.now = deadline;
    bob.agent.handle_timeout(deadline);
    bob.drain();
    assert!(bob.prompts().is_empty(), "Bob's prompts closed");
    let r = bob.poll("t-late");
    assert_eq!(r["type"], "task_completion", "{r}");
    assert_eq!(r["payload"]["status"], "failed");
    assert_eq!(r["payload"]["result"]["reason"], "timeout");
    assert_eq!(r["payload"]["result"]["error_code"], "TIMEOUT");
    assert!(
        bob.thread().state().is_terminal(),
        "{:?}",
        bob.thread().state()
    );
    // Nothing more is due for it.
    assert!(bob.task().timed_out);
    assert_eq!(Tasks.wake(&bob.agent), None);
}

#[test]
fn deadlines_are_bounded_and_one_already_passed_is_refused() {
    let now = start();
    assert_eq!(
        phase1_deadline(now, None).unwrap(),
        now.add(PHASE1_DEFAULT_BOUND)
    );
    assert_eq!(
        phase1_deadline(now, Some("2027-03-21T14:30:00Z")).unwrap(),
        now.add(PHASE1_MAX_BOUND)
    );
    assert_eq!(
        phase1_deadline(now, Some("2026-03-21T16:30:00+01:00")).unwrap(),
        now.add(Duration::from_secs(3600))
    );
    assert!(phase1_deadline(now, Some("2026-03-21T14:30:00Z")).is_err());
    let mut bob = Bob::new();
    let (status, r) = bob.assign("t-past", json!({"deadline": "2020-01-01T00:00:00Z"}));
    assert_eq!(status, 400, "{r}");
    assert_eq!(
        r["payload"]["error_code"], "PAYLOAD_VALIDATION_FAILED",
        "{r}"
    );
    assert!(
        r["payload"]["error_message"]
            .as_str()
            .unwrap()
            .contains("payload.deadline"),
        "{r}"
    );
    assert!(bob.agent.thread_views().next().is_none());
    // Without a deadline: the default bound.
    bob.assign("t-default", json!({}));
    let p = bob.task();
    assert_eq!(p.deadline, p.assigned_at.add(PHASE1_DEFAULT_BOUND));
    assert_eq!(p.sender, SENDER);
}

#[test]
fn updates_go_to_the_senders_endpoint_in_order_and_only_when_the_task_moved() {
    let mut bob = Bob::new();
    let (status, ack) = bob.assign(
        "t-push",
        json!({"metadata": {"reply_to": "http://127.0.0.1:9/", "source": "test"}}),
    );
    assert_eq!(status, 200, "{ack}");
    let pushes = |bob: &Bob| -> Vec<BridgeMessage> {
        bob.outputs
            .iter()
            .filter_map(|o| match o {
                Output::Bridged(Bridged::Message(p)) => Some(p.clone()),
                _ => None,
            })
            .collect()
    };
    // Bob answers; the sender asks nothing.
    for _ in 0..10 {
        if bob.thread().state().is_terminal() {
            break;
        }
        assert!(
            bob.answer(ResolutionAnswer::Confirm) > 0,
            "the task waits for Bob only"
        );
    }
    assert_eq!(bob.thread().state(), ThreadState::Completed);
    let sent = pushes(&bob);
    let messages: Vec<Value> = sent
        .iter()
        .map(|p| {
            assert_eq!(p.endpoint, "http://127.0.0.1:9/a2a/messages");
            assert_eq!(p.thread_id, bob.thread().id());
            assert_eq!(p.bridge, NAME);
            let m = crate::bridge::phase1::envelope::validate(p.body.as_bytes()).expect("valid");
            assert_eq!(m.to.hyphenated().to_string(), SENDER);
            assert_eq!(m.from, Tasks::id(&bob.agent));
            serde_json::from_str(&p.body).unwrap()
        })
        .collect();
    let (last, updates) = messages.split_last().expect("something sent");
    assert_eq!(last["type"], "task_completion", "{last}");
    assert_eq!(last["payload"]["status"], "completed", "{last}");
    assert!(!updates.is_empty());
    let mut told = ack["payload"].clone();
    for u in updates {
        assert_eq!(u["type"], "status_update", "{u}");
        readable(u);
        assert_ne!(u["payload"], told, "only a change is sent");
        told = u["payload"].clone();
    }
    // Asked now, the sender reads the completion it was sent; nothing more goes out.
    let r = bob.poll("t-push");
    assert_eq!(r["payload"], last["payload"]);
    assert_eq!(pushes(&bob).len(), sent.len());
    // An endpoint that is not an http(s) URL is refused, naming the field.
    let (status, r) = bob.assign(
        "t-bad",
        json!({"metadata": {"reply_to": "ftp://example.org/"}}),
    );
    assert_eq!(status, 400, "{r}");
    assert_eq!(r["payload"]["error_code"], "PAYLOAD_VALIDATION_FAILED");
    assert!(
        r["payload"]["error_message"]
            .as_str()
            .unwrap()
            .contains("reply_to"),
        "{r}"
    );
}

#[test]
fn a_poll_answers_what_was_asked_of_the_sender_before_it_reads_the_task() {
    // The stand-in runs before the answer: however the thread got there, the sender
    // never reads a request for data or a decision.
    let mut bob = Bob::new();
    bob.assign("t-read", json!({}));
    for _ in 0..10 {
        let r = bob.poll("t-read");
        readable(&r);
        let t = bob.thread();
        assert!(crate::bridge::a2a::task::open_needs(&t).is_empty() || t.state().is_terminal());
        assert!(!crate::bridge::a2a::task::awaiting_decision(&t));
        if r["type"] == "task_completion" {
            return;
        }
        bob.answer(ResolutionAnswer::Confirm);
    }
    panic!("never completed");
}
