//! The A2A v1.0 binding on the agent: a client negotiates the dinner with Bob's agent
//! through `Server::handle` alone — input-required for what Bob's agent needs, Bob's consent
//! prompt as for any thread, the proposal as an artifact, both confirm, COMPLETED — and
//! the refusals, the cancel, the list, never_share, and a restore that loses nothing.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::address::{Address, A2A_DOMAIN};
use crate::agent::*;
use crate::bridge::a2a::task::{self, code, Logged, OpenProposal, TaskState, TaskThread};
use crate::bridge::a2a::*;
use crate::crypto::IdentityKey;
use crate::harness::dinner;
use crate::time::Timestamp;

fn client() -> Address {
    Address::new("a2a-local", A2A_DOMAIN).unwrap()
}

fn start() -> Timestamp {
    Timestamp::parse_rfc3339(dinner::START).unwrap()
}

/// Bob's agent, and everything it put out so far (drained).
struct Bob {
    agent: Agent,
    now: Timestamp,
    outputs: Vec<Output>,
    records: BTreeMap<String, Vec<u8>>,
}

impl Bob {
    fn new() -> Self {
        Bob::with(dinner::bob("a2acp.io"))
    }

    fn with(config: AgentConfig) -> Self {
        let mut b = Bob {
            agent: {
                let mut agent = Agent::new(config, IdentityKey::from_seed([2; 32]), [22; 32]);
                crate::bridge::install(&mut agent);
                agent
            },
            now: start(),
            outputs: Vec::new(),
            records: BTreeMap::new(),
        };
        b.drain();
        b
    }

    /// Drains outputs: records kept, actions answered as done.
    fn drain(&mut self) {
        crate::harness::drain_answering_actions(
            &mut self.agent,
            self.now,
            &mut self.outputs,
            &mut self.records,
        );
    }

    fn rpc(&mut self, method: &str, params: Value) -> Value {
        self.now = self.now.add(std::time::Duration::from_secs(1));
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        let r = Server::handle(
            &mut self.agent,
            self.now,
            &client(),
            body.to_string().as_bytes(),
        );
        self.drain();
        assert_eq!(r.response["id"], 7, "{}", r.response);
        r.response
    }

    fn send(&mut self, task_id: Option<&str>, text: &str, data: Value) -> Value {
        let mut parts = vec![];
        if !text.is_empty() {
            parts.push(json!({"text": text}));
        }
        if data.as_object().is_some_and(|m| !m.is_empty()) {
            parts.push(json!({"data": data}));
        }
        let mut m = json!({"messageId": format!("m{}", self.now.as_millis()), "role": "ROLE_USER", "parts": parts});
        if let Some(t) = task_id {
            m["taskId"] = json!(t);
        }
        let r = self.rpc("SendMessage", json!({"message": m}));
        assert!(r.get("error").is_none(), "{r}");
        r["result"]["task"].clone()
    }

    fn prompts(&self) -> Vec<Prompt> {
        crate::harness::open_prompts(&self.outputs)
    }

    fn answer_consent_all(&mut self) {
        let p = self
            .prompts()
            .into_iter()
            .find(|p| matches!(p.kind, PromptKind::Consent { .. }))
            .expect("a consent prompt");
        self.share_all(&p);
    }

    /// Answers a consent prompt: every field shared.
    fn share_all(&mut self, p: &Prompt) {
        let PromptKind::Consent { fields } = &p.kind else {
            unreachable!()
        };
        let choices = fields
            .iter()
            .map(|f| (f.field.clone(), FieldChoice::Share))
            .collect();
        self.agent.handle_command(
            self.now,
            Command::AnswerConsent {
                prompt_id: p.id,
                answer: ConsentAnswer::ShareSelected(choices),
            },
        );
        self.drain();
    }

    fn state(&self, id: &str) -> TaskState {
        task::task_state(&self.agent.thread_view(id).unwrap())
    }
}

fn state_of(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or("")
}

#[test]
fn a_client_negotiates_a_dinner_to_completion() {
    let mut bob = Bob::new();
    let task = bob.send(
        None,
        "Dinner with Bob on Friday?",
        json!({"proposed_date": "2026-03-27", "dietary": ["vegetarian"], "party_size": 2}),
    );
    let id = task["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("thr_"), "{task}");
    assert!(task["contextId"].as_str().unwrap().starts_with("ctx_"));
    let thread = bob.agent.thread_view(&id).unwrap();
    // A client without a token: its context is its peer.
    let peer = anonymous_peer(&client(), task["contextId"].as_str().unwrap());
    assert_eq!(*thread.peer(), peer);
    assert_ne!(peer, client());
    assert_eq!(thread.intent().category, "scheduling");
    assert_eq!(thread.intent().summary, "Dinner with Bob on Friday?");
    // An unknown peer: ask_first applies, so Bob is asked before his availability goes.
    assert!(
        bob.prompts()
            .iter()
            .any(|p| matches!(p.kind, PromptKind::Consent { .. }) && p.peer == peer),
        "{:?}",
        bob.outputs
    );
    bob.answer_consent_all();
    // Bob's agent needs the client's availability: input required, with what is needed.
    let task = bob.rpc("GetTask", json!({"id": id}))["result"].clone();
    assert_eq!(state_of(&task), "TASK_STATE_INPUT_REQUIRED", "{task}");
    let needs = &task["status"]["message"]["parts"][1]["data"]["needs"];
    assert!(
        needs
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["field"] == "time_windows"),
        "{task}"
    );
    // No packet went to the relay: the client's packets are A2A outputs.
    assert!(!bob.outputs.iter().any(|o| matches!(o, Output::Send(_))));
    assert!(bob.outputs.iter().any(
        |o| matches!(o, Output::Bridged(Bridged::Packet(u)) if u.thread_id == id && u.peer == peer)
    ));
    let task = bob.send(
        Some(&id),
        "",
        json!({"time_windows": ["18:00-21:00"], "timezone": "Europe/London", "location_preference": "central Reading"}),
    );
    // Bob's agent proposes (or asks the refining fields first, once).
    let task = if state_of(&task) == "TASK_STATE_INPUT_REQUIRED"
        && !task::awaiting_decision(&bob.agent.thread_view(&id).unwrap())
    {
        bob.send(Some(&id), "", json!({"transport_mode": "walking"}))
    } else {
        task
    };
    assert_eq!(state_of(&task), "TASK_STATE_INPUT_REQUIRED", "{task}");
    assert!(
        task::awaiting_decision(&bob.agent.thread_view(&id).unwrap()),
        "{task}"
    );
    let art = &task["artifacts"][0];
    assert_eq!(art["name"], "proposal");
    assert!(
        art["parts"][1]["data"]["proposal"]["summary"].is_string(),
        "{task}"
    );
    // Bob confirms through his resolution prompt; the client confirms by data.
    let p = bob
        .prompts()
        .into_iter()
        .find(|p| matches!(p.kind, PromptKind::Resolution { .. }))
        .expect("Bob's resolution prompt");
    bob.agent.handle_command(
        bob.now,
        Command::AnswerResolution {
            prompt_id: p.id,
            answer: ResolutionAnswer::Confirm,
        },
    );
    bob.drain();
    let task = bob.send(Some(&id), "", json!({"decision": "confirm"}));
    // Bob's actions run after the answer (the runtime carries them out): working.
    assert_eq!(state_of(&task), "TASK_STATE_WORKING", "{task}");
    let task = bob.rpc("GetTask", json!({"id": id}))["result"].clone();
    assert_eq!(state_of(&task), "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(
        task["artifacts"][0]["description"],
        "agreed and carried out"
    );
    assert_eq!(
        bob.agent.thread_view(&id).unwrap().state(),
        ThreadState::Completed
    );
    // A terminal task takes no more messages and cannot be cancelled.
    let m = json!({"messageId": "late", "role": "ROLE_USER", "taskId": id, "parts": [{"text": "hello?"}]});
    let r = bob.rpc("SendMessage", json!({"message": m}));
    assert_eq!(r["error"]["code"], code::UNSUPPORTED_OPERATION, "{r}");
    let r = bob.rpc("CancelTask", json!({"id": id}));
    assert_eq!(r["error"]["code"], code::TASK_NOT_CANCELABLE, "{r}");
    // Kill -9: a restore from the records holds the same task.
    let before = task::task_json(&bob.agent.thread_view(&id).unwrap(), None, true);
    let restored = Agent::restore(
        dinner::bob("a2acp.io"),
        IdentityKey::from_seed([2; 32]),
        [22; 32],
        bob.records.clone(),
    )
    .expect("restore");
    assert_eq!(
        task::task_json(&restored.thread_view(&id).unwrap(), None, true),
        before
    );
}

#[test]
fn a_client_cancels_and_lists_its_tasks() {
    let mut bob = Bob::new();
    let a = bob.send(
        None,
        "Lunch next week?",
        json!({"proposed_date": "2026-03-30"}),
    );
    let b = bob.send(None, "Coffee?", json!({"proposed_date": "2026-03-31"}));
    let (a, b) = (
        a["id"].as_str().unwrap().to_string(),
        b["id"].as_str().unwrap().to_string(),
    );
    let r = bob.rpc("CancelTask", json!({"id": b}));
    assert_eq!(state_of(&r["result"]), "TASK_STATE_CANCELED", "{r}");
    assert_eq!(
        bob.agent.thread_view(&b).unwrap().state(),
        ThreadState::Declined
    );
    assert_eq!(bob.state(&b), TaskState::Canceled);
    // Bob's open consent prompt of the cancelled task is withdrawn.
    assert!(bob.prompts().iter().all(|p| p.thread_id != b));
    let r = bob.rpc("ListTasks", json!({}));
    assert_eq!(r["result"]["totalSize"], 2, "{r}");
    let r = bob.rpc("ListTasks", json!({"status": "TASK_STATE_CANCELED"}));
    assert_eq!(r["result"]["tasks"][0]["id"], b, "{r}");
    assert_eq!(r["result"]["totalSize"], 1);
    let r = bob.rpc("ListTasks", json!({"pageSize": 1}));
    assert_eq!(r["result"]["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(r["result"]["nextPageToken"], "1");
    let r2 = bob.rpc("ListTasks", json!({"pageSize": 1, "pageToken": "1"}));
    assert_ne!(
        r["result"]["tasks"][0]["id"],
        r2["result"]["tasks"][0]["id"]
    );
    assert_eq!(r2["result"]["nextPageToken"], "");
    // Another client sees none of them.
    let other = Address::new("a2a-bearer", A2A_DOMAIN).unwrap();
    let body = json!({"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id": a}});
    let r = Server::handle(&mut bob.agent, bob.now, &other, body.to_string().as_bytes());
    assert_eq!(r.response["error"]["code"], code::TASK_NOT_FOUND);
}

#[test]
fn never_share_never_reaches_a_client() {
    let mut cfg = dinner::bob("a2acp.io");
    cfg.profile
        .insert("health_info".into(), json!("SECRET-bob-allergy"));
    let mut bob = Bob::with(cfg);
    let t = bob.send(
        None,
        "Tell me about Bob",
        json!({"category": "general", "wanted_fields": ["health_info", "dietary"]}),
    );
    let id = t["id"].as_str().unwrap().to_string();
    if bob
        .prompts()
        .iter()
        .any(|p| matches!(p.kind, PromptKind::Consent { .. }))
    {
        bob.answer_consent_all();
    }
    let t = bob.rpc("GetTask", json!({"id": id}))["result"].clone();
    assert!(!t.to_string().contains("SECRET"), "{t}");
    for o in &bob.outputs {
        if let Output::Prompt(p) = o {
            assert!(!format!("{p:?}").contains("SECRET"));
        }
    }
}

#[test]
fn malformed_requests_get_the_error_the_spec_names() {
    let mut bob = Bob::new();
    let msg =
        |parts: Value| json!({"message": {"messageId": "x", "role": "ROLE_USER", "parts": parts}});
    let cases: Vec<(&str, Vec<u8>, i64)> = vec![
        ("not JSON", b"{nope".to_vec(), code::PARSE_ERROR),
        ("not an object", b"[1,2]".to_vec(), code::INVALID_REQUEST),
        (
            "no jsonrpc",
            br#"{"id":1,"method":"GetTask"}"#.to_vec(),
            code::INVALID_REQUEST,
        ),
        (
            "bad id",
            br#"{"jsonrpc":"2.0","id":{},"method":"GetTask"}"#.to_vec(),
            code::INVALID_REQUEST,
        ),
        (
            "no method",
            br#"{"jsonrpc":"2.0","id":1}"#.to_vec(),
            code::INVALID_REQUEST,
        ),
        (
            "unknown method",
            br#"{"jsonrpc":"2.0","id":1,"method":"tasks/send"}"#.to_vec(),
            code::METHOD_NOT_FOUND,
        ),
        (
            "params not an object",
            br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}"#.to_vec(),
            code::INVALID_PARAMS,
        ),
        (
            "GetTask without id",
            br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{}}"#.to_vec(),
            code::INVALID_PARAMS,
        ),
        (
            "unknown task",
            br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"thr_nope"}}"#.to_vec(),
            code::TASK_NOT_FOUND,
        ),
        (
            "cancel unknown",
            br#"{"jsonrpc":"2.0","id":1,"method":"CancelTask","params":{"id":"thr_nope"}}"#
                .to_vec(),
            code::TASK_NOT_FOUND,
        ),
        (
            "subscribe unknown",
            br#"{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id":"thr_nope"}}"#
                .to_vec(),
            code::TASK_NOT_FOUND,
        ),
        (
            "push config",
            br#"{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig","params":{}}"#
                .to_vec(),
            code::PUSH_NOTIFICATION_NOT_SUPPORTED,
        ),
        (
            "extended card",
            br#"{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}"#.to_vec(),
            code::EXTENDED_CARD_NOT_CONFIGURED,
        ),
        (
            "bad page size",
            br#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":1000}}"#.to_vec(),
            code::INVALID_PARAMS,
        ),
        (
            "bad status",
            br#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"status":"DONE"}}"#.to_vec(),
            code::INVALID_PARAMS,
        ),
        (
            "bad page token",
            br#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageToken":"x"}}"#.to_vec(),
            code::INVALID_PARAMS,
        ),
    ];
    let sends: Vec<(&str, Value, i64)> = vec![
        ("no message", json!({}), code::INVALID_PARAMS),
        (
            "message not an object",
            json!({"message": 3}),
            code::INVALID_PARAMS,
        ),
        (
            "no messageId",
            json!({"message": {"role": "ROLE_USER", "parts": [{"text": "hi"}]}}),
            code::INVALID_PARAMS,
        ),
        (
            "agent role",
            json!({"message": {"messageId": "x", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}}),
            code::INVALID_PARAMS,
        ),
        (
            "no role",
            json!({"message": {"messageId": "x", "parts": [{"text": "hi"}]}}),
            code::INVALID_PARAMS,
        ),
        ("no parts", msg(json!([])), code::INVALID_PARAMS),
        (
            "too many parts",
            msg(Value::Array(vec![json!({"text": "a"}); 33])),
            code::INVALID_PARAMS,
        ),
        ("empty part", msg(json!([{}])), code::INVALID_PARAMS),
        (
            "two contents",
            msg(json!([{"text": "a", "data": {}}])),
            code::INVALID_PARAMS,
        ),
        (
            "data not an object",
            msg(json!([{"data": [1]}])),
            code::INVALID_PARAMS,
        ),
        (
            "text not a string",
            msg(json!([{"text": 5}])),
            code::INVALID_PARAMS,
        ),
        (
            "a file",
            msg(json!([{"url": "https://example.com/x.pdf"}])),
            code::CONTENT_TYPE_NOT_SUPPORTED,
        ),
        (
            "raw bytes",
            msg(json!([{"raw": "AAAA"}])),
            code::CONTENT_TYPE_NOT_SUPPORTED,
        ),
        (
            "too much text",
            msg(json!([{"text": "x".repeat(task::MAX_TEXT + 1)}])),
            code::INVALID_PARAMS,
        ),
        (
            "long id",
            json!({"message": {"messageId": "x".repeat(200), "role": "ROLE_USER", "parts": [{"text": "hi"}]}}),
            code::INVALID_PARAMS,
        ),
        (
            "unknown task",
            json!({"message": {"messageId": "x", "role": "ROLE_USER", "taskId": "thr_nope", "parts": [{"text": "hi"}]}}),
            code::TASK_NOT_FOUND,
        ),
        (
            "bad category",
            msg(json!([{"data": {"category": 5}}])),
            code::INVALID_PARAMS,
        ),
    ];
    let threads = bob.agent.thread_views().count();
    for (what, body, want) in cases {
        let r = Server::handle(&mut bob.agent, bob.now, &client(), &body);
        assert_eq!(r.response["error"]["code"], want, "{what}: {}", r.response);
        assert!(r.stream.is_none());
    }
    for (what, params, want) in sends {
        let r = bob.rpc("SendMessage", params);
        assert_eq!(r["error"]["code"], want, "{what}: {r}");
    }
    bob.drain();
    assert_eq!(
        bob.agent.thread_views().count(),
        threads,
        "a refused request opened a thread"
    );
}

fn coffee(n: usize, context: Option<&str>) -> Value {
    let mut m = json!({"messageId": format!("x{n}"), "role": "ROLE_USER", "parts": [{"text": "Coffee on Friday?"}]});
    if let Some(c) = context {
        m["contextId"] = json!(c);
    }
    json!({ "message": m, "configuration": {"returnImmediately": true} })
}

/// Sends new tasks as `client` until one is refused: how many opened, and the refusal.
fn open_until_refused(
    bob: &mut Bob,
    client: &Address,
    context: impl Fn(usize) -> Option<String>,
) -> (usize, Value) {
    let mut opened = 0;
    loop {
        bob.now = bob.now.add(std::time::Duration::from_secs(1));
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": coffee(opened, context(opened).as_deref())});
        let r = Server::handle(&mut bob.agent, bob.now, client, body.to_string().as_bytes());
        bob.drain();
        if r.response.get("error").is_some() {
            return (opened, r.response);
        }
        opened += 1;
        assert!(opened <= 1000, "no limit applied");
    }
}

fn assert_temporary(refusal: &Value) {
    assert_eq!(
        refusal["error"]["code"],
        code::TEMPORARILY_REFUSED,
        "{refusal}"
    );
    let message = refusal["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("temporarily refused, try again later"),
        "{refusal}"
    );
    let data = refusal["error"]["data"].as_array().unwrap();
    assert_eq!(data[0]["reason"], "RESOURCE_EXHAUSTED", "{refusal}");
    assert_eq!(
        data[1]["@type"], "type.googleapis.com/google.rpc.RetryInfo",
        "{refusal}"
    );
    assert_eq!(
        data[1]["retryDelay"],
        format!("{}s", task::RETRY_AFTER_SECS)
    );
}

#[test]
fn too_many_tasks_from_one_client_are_refused_for_now() {
    let mut bob = Bob::new();
    // Each task opens a consent prompt for Bob: the limit on open prompts per peer (8)
    // comes before the one on open threads (32). A client with a token is one peer.
    let limits = bob.agent.config().limits.clone();
    let holder = Address::new("a2a-bearer", A2A_DOMAIN).unwrap();
    let (opened, refusal) = open_until_refused(&mut bob, &holder, |_| None);
    assert_temporary(&refusal);
    assert_eq!(opened, limits.max_prompts_per_peer as usize, "{refusal}");
    assert_eq!(bob.agent.thread_views().count(), opened);
    // Clients without a token in one context are one peer too.
    let (opened, refusal) = open_until_refused(&mut bob, &client(), |_| Some("ctx-one".into()));
    assert_temporary(&refusal);
    assert_eq!(opened, limits.max_prompts_per_peer as usize, "{refusal}");
    // Bob answers those questions: that context has room again.
    for p in bob.prompts() {
        if matches!(p.kind, PromptKind::Consent { .. }) {
            bob.share_all(&p);
        }
    }
    let (opened, _) = open_until_refused(&mut bob, &client(), |_| Some("ctx-one".into()));
    assert!(opened >= 1);
}

#[test]
fn clients_without_a_token_are_told_apart_by_context() {
    let mut bob = Bob::new();
    let limits = bob.agent.config().limits.clone();
    // Each task in a context of its own: far more than one peer's 8 open prompts, up to
    // the cap all such clients share.
    let (opened, refusal) = open_until_refused(&mut bob, &client(), |_| None);
    assert_temporary(&refusal);
    assert_eq!(
        opened,
        limits.max_prompts_per_peer as usize * ANONYMOUS_SHARE,
        "{refusal}"
    );
    let peers: BTreeSet<Address> = bob.agent.thread_views().map(|t| t.peer().clone()).collect();
    assert_eq!(peers.len(), opened, "one peer per context");
    assert!(!peers.contains(&client()));
    // Any of them follows any such task (they are not told apart by who they are) …
    let id = bob.agent.thread_views().next().unwrap().id().to_string();
    let got = bob.rpc("GetTask", json!({"id": id}));
    assert_eq!(got["result"]["id"], json!(id), "{got}");
    assert_eq!(
        bob.rpc("ListTasks", json!({}))["result"]["totalSize"],
        opened
    );
    // … and a client with a token sees none of them.
    let holder = Address::new("a2a-bearer", A2A_DOMAIN).unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}});
    let r = Server::handle(
        &mut bob.agent,
        bob.now,
        &holder,
        body.to_string().as_bytes(),
    );
    assert_eq!(
        r.response["error"]["code"],
        code::TASK_NOT_FOUND,
        "{}",
        r.response
    );
}

#[test]
fn json_rpc_errors_carry_an_error_info() {
    let mut bob = Bob::new();
    for (method, params, reason) in [
        ("GetTask", json!({"id": "thr_nope"}), "TASK_NOT_FOUND"),
        ("Nope", json!({}), "METHOD_NOT_FOUND"),
        (
            "SendMessage",
            json!({"message": {"role": "ROLE_USER"}}),
            "INVALID_PARAMS",
        ),
        (
            "CreateTaskPushNotificationConfig",
            json!({}),
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
    ] {
        let r = bob.rpc(method, params);
        let data = r["error"]["data"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"));
        assert_eq!(
            data[0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
            "{r}"
        );
        assert_eq!(data[0]["reason"], reason, "{r}");
        assert_eq!(data[0]["domain"], "a2a-protocol.org", "{r}");
    }
    let r = Server::handle(&mut bob.agent, bob.now, &client(), b"{not json");
    assert_eq!(
        r.response["error"]["data"][0]["reason"], "INVALID_REQUEST",
        "{}",
        r.response
    );
}

#[test]
fn a_tasks_history_keeps_the_clients_message_as_sent() {
    let mut bob = Bob::new();
    let sent = json!({
        "messageId": "client-msg-1",
        "role": "ROLE_USER",
        "parts": [
            {"text": "Dinner with Bob on Friday?", "metadata": {"lang": "en"}},
            {"data": {"proposed_date": "2026-03-27", "party_size": 2}, "mediaType": "application/json"},
        ],
        "metadata": {"origin": "test"},
        "extensions": ["https://example.com/ext"],
    });
    let r = bob.rpc(
        "SendMessage",
        json!({"message": sent, "configuration": {"returnImmediately": true}}),
    );
    let task = &r["result"]["task"];
    let id = task["id"].as_str().unwrap();
    let first = &task["history"][0];
    for key in ["messageId", "role", "parts", "metadata", "extensions"] {
        assert_eq!(first[key], sent[key], "{key}: {first}");
    }
    assert_eq!(first["taskId"], json!(id));
    assert_eq!(first["contextId"], task["contextId"]);
    // The same after a restore, and for a reply on the task.
    bob.answer_consent_all();
    let reply = json!({"messageId": "client-msg-2", "role": "ROLE_USER", "taskId": id,
        "parts": [{"data": {"time_windows": ["18:00-21:00"], "timezone": "Europe/London"}}],
        "metadata": {"n": 2}});
    let r = bob.rpc(
        "SendMessage",
        json!({"message": reply, "configuration": {"returnImmediately": true}}),
    );
    assert!(r.get("error").is_none(), "{r}");
    let restored = Agent::restore(
        dinner::bob("a2acp.io"),
        IdentityKey::from_seed([2; 32]),
        [22; 32],
        bob.records.clone(),
    )
    .expect("restore");
    let task = task::task_json(&restored.thread_view(id).unwrap(), None, true);
    let mine: Vec<&Value> = task["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "ROLE_USER")
        .collect();
    assert_eq!(mine.len(), 2, "{task}");
    assert_eq!(mine[0]["messageId"], "client-msg-1");
    assert_eq!(mine[0]["metadata"], sent["metadata"]);
    assert_eq!(mine[1]["messageId"], "client-msg-2");
    assert_eq!(mine[1]["parts"], reply["parts"]);
    assert_eq!(mine[1]["metadata"], reply["metadata"]);
}

#[test]
fn a_blocking_send_is_held_until_the_task_waits_for_the_client() {
    let mut bob = Bob::new();
    let m = json!({"messageId": "b1", "role": "ROLE_USER", "parts": [
        {"text": "Dinner with Bob on Friday?"},
        {"data": {"proposed_date": "2026-03-27", "party_size": 2}}]});
    bob.now = bob.now.add(std::time::Duration::from_secs(1));
    let body =
        json!({"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {"message": m}});
    let r = Server::handle(
        &mut bob.agent,
        bob.now,
        &client(),
        body.to_string().as_bytes(),
    );
    bob.drain();
    // Bob's consent prompt is open: the task works, so the answer is held.
    let w = r
        .wait
        .clone()
        .expect("a blocking send is held while the task works");
    assert_eq!(w.rpc_id, json!(3));
    assert_eq!(bob.state(&w.task_id), TaskState::Working);
    assert!(Server::waited(&bob.agent, &w, false).is_none());
    // At the deadline: the task as it stands.
    let late = Server::waited(&bob.agent, &w, true).unwrap();
    assert_eq!(late["id"], 3);
    assert_eq!(
        state_of(&late["result"]["task"]),
        "TASK_STATE_WORKING",
        "{late}"
    );
    // Bob consents: the agent needs the client's availability — interrupted, answered.
    bob.answer_consent_all();
    let done = Server::waited(&bob.agent, &w, false).expect("answered once input is required");
    assert_eq!(
        state_of(&done["result"]["task"]),
        "TASK_STATE_INPUT_REQUIRED",
        "{done}"
    );
    // With returnImmediately, or when the task already waits for the client: not held.
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "SendMessage", "params": {"message": coffee(1, None)["message"], "configuration": {"returnImmediately": true}}});
    assert!(Server::handle(
        &mut bob.agent,
        bob.now,
        &client(),
        body.to_string().as_bytes()
    )
    .wait
    .is_none());
}

#[test]
fn a_subscription_stays_open_through_input_required() {
    let mut bob = Bob::new();
    let task = bob.send(
        None,
        "Dinner with Bob on Friday?",
        json!({"proposed_date": "2026-03-27", "party_size": 2}),
    );
    let id = task["id"].as_str().unwrap().to_string();
    bob.answer_consent_all();
    assert_eq!(bob.state(&id), TaskState::InputRequired);
    let body =
        json!({"jsonrpc": "2.0", "id": 5, "method": "SubscribeToTask", "params": {"id": id}});
    let r = Server::handle(
        &mut bob.agent,
        bob.now,
        &client(),
        body.to_string().as_bytes(),
    );
    let s = r.stream.expect("a stream while the task is not terminal");
    assert!(s.until_terminal);
    assert!(!s.ends_at(TaskState::InputRequired));
    assert!(!s.ends_at(TaskState::Working));
    assert!(s.ends_at(TaskState::Completed));
    // A streamed message's stream ends at an interruption (the client answers it).
    let body = json!({"jsonrpc": "2.0", "id": 6, "method": "SendStreamingMessage", "params": coffee(9, None)});
    let r = Server::handle(
        &mut bob.agent,
        bob.now,
        &client(),
        body.to_string().as_bytes(),
    );
    let s = r.stream.expect("the task works: a stream");
    assert!(!s.until_terminal);
    assert!(s.ends_at(TaskState::InputRequired));
}

#[test]
fn envelopes_in_a_clients_name_are_dropped() {
    assert!(client().is_a2a());
    assert!(!Address::parse("agent:bob@a2acp.io").unwrap().is_a2a());
}

/// Every thread state reads as one task state (SPEC-NOTES, the table).
#[test]
fn every_thread_state_maps_to_a_task_state() {
    let mut bob = Bob::new();
    let t = bob.send(
        None,
        "Dinner on Friday?",
        json!({"proposed_date": "2026-03-27"}),
    );
    let id = t["id"].as_str().unwrap().to_string();
    let base = bob.agent.thread_view(&id).unwrap();
    let at = |state: ThreadState| As {
        v: base,
        state,
        halted: false,
    };
    let table = [
        (ThreadState::Confirmed, TaskState::Working),
        (ThreadState::Executing, TaskState::Working),
        (ThreadState::Rollback, TaskState::Working),
        (ThreadState::Completed, TaskState::Completed),
        (ThreadState::Declined, TaskState::Rejected),
        (ThreadState::Failed, TaskState::Failed),
        (ThreadState::Expired, TaskState::Failed),
    ];
    for (ts, want) in table {
        assert_eq!(task::task_state(&at(ts)), want, "{ts:?}");
    }
    for ts in [
        ThreadState::Initiated,
        ThreadState::Negotiating,
        ThreadState::Stalled,
    ] {
        let t = at(ts);
        let want = if task::open_needs(&t).is_empty() {
            TaskState::Working
        } else {
            TaskState::InputRequired
        };
        assert_eq!(task::task_state(&t), want, "{ts:?}");
    }
    assert_eq!(
        task::task_state(&at(ThreadState::Proposed)),
        TaskState::Working,
        "no open resolution: Bob's side"
    );
    let t = As {
        halted: true,
        ..at(base.state())
    };
    assert_eq!(task::task_state(&t), TaskState::Failed);
    for s in [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::AuthRequired,
        TaskState::Completed,
        TaskState::Canceled,
        TaskState::Rejected,
        TaskState::Failed,
    ] {
        assert_eq!(TaskState::parse(s.as_str()), Some(s));
    }
    assert_eq!(TaskState::parse("TASK_STATE_UNSPECIFIED"), None);
}

/// A thread as the A2A mapping reads it, in another state (the table above).
struct As<'a> {
    v: ThreadView<'a>,
    state: ThreadState,
    halted: bool,
}

impl TaskThread for As<'_> {
    fn id(&self) -> &str {
        self.v.id()
    }
    fn peer(&self) -> &Address {
        self.v.peer()
    }
    fn state(&self) -> ThreadState {
        self.state
    }
    fn halted(&self) -> bool {
        self.halted
    }
    fn packets(&self) -> impl DoubleEndedIterator<Item = Logged<'_>> + ExactSizeIterator {
        self.v.packets()
    }
    fn answered(&self, field: &str) -> bool {
        self.v.answered(field)
    }
    fn resolution(&self) -> Option<OpenProposal<'_>> {
        self.v.resolution()
    }
    fn consent_open(&self) -> bool {
        self.v.consent_open()
    }
    fn escalated(&self) -> bool {
        self.v.escalated()
    }
    fn last_activity(&self) -> Timestamp {
        self.v.last_activity()
    }
    fn a2a_context(&self) -> Option<&str> {
        TaskThread::a2a_context(&self.v)
    }
    fn a2a_sent(&self, packet_id: &str) -> Option<&Value> {
        TaskThread::a2a_sent(&self.v, packet_id)
    }
}
