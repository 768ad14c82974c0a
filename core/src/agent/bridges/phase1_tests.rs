//! A Phase-1 task's lifecycle through `handle_phase1` alone (seed 001 "Task lifecycle"):
//! a sender that can only assign and read — its task completes once Bob consents and
//! confirms, fields it did not supply declined on its behalf and named; Bob declining
//! fails it with the reason; Bob never answering fails it with `TIMEOUT` at the bound;
//! the stand-in never answers Bob's own prompts; a restore keeps the task.

use std::time::Duration;

use serde_json::{json, Value};

use crate::agent::*;
use crate::crypto::IdentityKey;
use crate::harness::dinner;

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
            agent: Agent::new(
                dinner::bob("a2acp.io"),
                IdentityKey::from_seed([2; 32]),
                [22; 32],
            ),
            now: start(),
            outputs: Vec::new(),
            records: BTreeMap::new(),
            n: 0,
        };
        b.drain();
        b
    }

    fn drain(&mut self) {
        crate::agent::tests::support::drain_answering_actions(
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
            "to": self.agent.phase1_id().hyphenated().to_string(),
            "type": kind,
            "payload": payload,
        });
        let r = self
            .agent
            .handle_phase1(self.now, body.to_string().as_bytes());
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
        crate::agent::tests::support::open_prompts(&self.outputs)
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

    fn thread(&self) -> &Thread {
        let mut p1 = self.agent.threads().values().filter(|t| t.phase1.is_some());
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
    let tid = bob.thread().id.clone();
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
            bob.thread().state
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
        bob.agent.thread(&tid).unwrap().state,
        ThreadState::Completed
    );
    // Every field the negotiation asked of the sender and the assignment lacked was
    // declined on its behalf, and is named.
    let t = bob.agent.thread(&tid).unwrap();
    let asked_not_given: Vec<&String> = t
        .asked
        .iter()
        .filter(|f| !t.theirs.contains_key(*f))
        .collect();
    assert_eq!(
        p["result"]["not_supplied"]
            .as_array()
            .map(|a| a.len())
            .unwrap_or(0),
        asked_not_given.len(),
        "{r}"
    );
    for f in asked_not_given {
        assert!(t.peer_unavailable.contains(f), "{f}");
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
    assert_eq!(restored.thread(&tid).unwrap().phase1, t.phase1);
    assert_eq!(restored.phase1_report(&tid), bob.agent.phase1_report(&tid));
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
    assert_eq!(bob.thread().state, ThreadState::Declined);
    readable(&last);
}

#[test]
fn a_task_nobody_answers_fails_with_timeout_at_its_deadline() {
    let mut bob = Bob::new();
    let deadline = bob.now.add(Duration::from_secs(600));
    let (status, r) = bob.assign("t-late", json!({"deadline": deadline.to_rfc3339()}));
    assert_eq!(status, 200, "{r}");
    assert_eq!(bob.thread().phase1.as_ref().unwrap().deadline, deadline);
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
    assert!(bob.thread().state.is_terminal(), "{:?}", bob.thread().state);
    // Nothing more is due for it.
    assert!(bob.thread().phase1.as_ref().unwrap().timed_out);
    assert_eq!(bob.agent.phase1_wake(), None);
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
    assert!(bob.agent.threads().is_empty());
    // Without a deadline: the default bound.
    bob.assign("t-default", json!({}));
    let p = bob.thread().phase1.clone().unwrap();
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
    let pushes = |bob: &Bob| -> Vec<Phase1Push> {
        bob.outputs
            .iter()
            .filter_map(|o| match o {
                Output::Phase1(p) => Some(p.clone()),
                _ => None,
            })
            .collect()
    };
    // Bob answers; the sender asks nothing.
    for _ in 0..10 {
        if bob.thread().state.is_terminal() {
            break;
        }
        assert!(
            bob.answer(ResolutionAnswer::Confirm) > 0,
            "the task waits for Bob only"
        );
    }
    assert_eq!(bob.thread().state, ThreadState::Completed);
    let sent = pushes(&bob);
    let messages: Vec<Value> = sent
        .iter()
        .map(|p| {
            assert_eq!(p.endpoint, "http://127.0.0.1:9/a2a/messages");
            assert_eq!(p.thread_id, bob.thread().id);
            let m = crate::bridge::phase1::envelope::validate(p.body.as_bytes()).expect("valid");
            assert_eq!(m.to.hyphenated().to_string(), SENDER);
            assert_eq!(m.from, bob.agent.phase1_id());
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
        assert!(crate::bridge::a2a::task::open_needs(t).is_empty() || t.state.is_terminal());
        assert!(!crate::bridge::a2a::task::awaiting_decision(t));
        if r["type"] == "task_completion" {
            return;
        }
        bob.answer(ResolutionAnswer::Confirm);
    }
    panic!("never completed");
}
