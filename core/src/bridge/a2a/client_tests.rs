use super::*;

#[test]
fn card_urls_from_what_the_user_gives() {
    assert_eq!(
        card_url("https://r.example/").unwrap(),
        "https://r.example/.well-known/agent-card.json"
    );
    assert_eq!(
        card_url("http://127.0.0.1:9/a2a").unwrap(),
        "http://127.0.0.1:9/a2a/.well-known/agent-card.json"
    );
    assert_eq!(
        card_url("https://r.example/.well-known/agent-card.json").unwrap(),
        "https://r.example/.well-known/agent-card.json"
    );
    for bad in [
        "ftp://x/",
        "https://",
        "agent:bob@x",
        "https://a b/",
        "http:///x",
    ] {
        assert!(card_url(bad).is_err(), "{bad}");
    }
    assert!(is_url("HTTPS://x") && !is_url("agent:bob@x"));
    let a = peer_address("https://r.example/.well-known/agent-card.json").unwrap();
    assert!(a.is_a2a() && a.user().starts_with("web-"), "{a}");
    assert_eq!(
        a,
        peer_address("https://r.example/.well-known/agent-card.json").unwrap(),
        "the same card is the same peer"
    );
}

#[test]
fn a_card_gives_its_first_json_rpc_interface_of_version_one() {
    let card = json!({
        "name": "Chez Sdk",
        "supportedInterfaces": [
            {"url": "127.0.0.1:1", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
            {"url": "http://h/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "http://h/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ],
    });
    let c = read_card("u", card.to_string().as_bytes()).unwrap();
    assert_eq!(c.endpoint, "http://h/rpc");
    assert_eq!(c.name, "Chez Sdk");
}

#[test]
fn unusable_cards_are_refused_saying_why() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"not json".to_vec(), "not JSON"),
        (b"[1]".to_vec(), "not a JSON object"),
        (br#"{"name":"x","url":"http://h/"}"#.to_vec(), "no `supportedInterfaces`"),
        (
            br#"{"supportedInterfaces":[{"url":"h:1","protocolBinding":"GRPC","protocolVersion":"1.0"}]}"#
                .to_vec(),
            "it offers: GRPC 1.0",
        ),
        (
            br#"{"supportedInterfaces":[{"url":"ftp://h/","protocolBinding":"JSONRPC","protocolVersion":"1.0"}]}"#
                .to_vec(),
            "no JSON-RPC interface",
        ),
        (
            br#"{"supportedInterfaces":[{"url":"http://h/","protocolBinding":"JSONRPC","protocolVersion":"1.0"}],"securityRequirements":[{"schemes":{"bearer":{"list":[]}}}]}"#
                .to_vec(),
            "requires authentication",
        ),
        (vec![b' '; MAX_CARD + 1], "larger than"),
    ];
    for (bytes, why) in cases {
        let e = read_card("http://h/c.json", &bytes)
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{e} should say {why}");
    }
}

#[test]
fn a_task_is_read_back_with_its_needs_and_its_proposal() {
    let input = json!({"jsonrpc": "2.0", "id": "1", "result": {"task": {
        "id": "t1", "contextId": "c1",
        "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {
            "messageId": "m1", "role": "ROLE_AGENT",
            "parts": [{"text": "How many?"}, {"data": {"needs": [
                {"field": "party_size", "reason": "table", "priority": "required"},
                "dietary",
                {"field": "bad field!"},
                7
            ]}}]}},
    }}});
    let v = read_response(input.to_string().as_bytes()).unwrap();
    assert_eq!(v.state, TaskState::InputRequired);
    assert_eq!((v.id.as_str(), v.context_id.as_deref()), ("t1", Some("c1")));
    let needs = needs_of(&v);
    let fields: Vec<&str> = needs.iter().map(|n| n.field.as_str()).collect();
    assert_eq!(fields, ["party_size", "dietary"]);
    assert_eq!(needs[0].reason, "table");
    assert!(!awaits_decision(&v));

    let done = json!({"jsonrpc": "2.0", "id": "2", "result": {
        "id": "t1", "status": {"state": "TASK_STATE_COMPLETED"},
        "artifacts": [{"artifactId": "a1", "parts": [{"text": "Table for 2"}, {"data": {"time": "19:30"}}]}],
    }});
    let v = read_response(done.to_string().as_bytes()).unwrap();
    assert_eq!(v.state, TaskState::Completed);
    let p = proposal_of(&v);
    assert_eq!(p.summary, "Table for 2");
    assert_eq!(p.details["time"], "19:30");
    assert_eq!(marks(&v), ["TASK_STATE_COMPLETED:", "artifact:a1"]);

    let message = json!({"jsonrpc": "2.0", "id": "3", "result": {"message": {
        "messageId": "m9", "role": "ROLE_AGENT", "parts": [{"text": "Sure, 8 pm."}]}}});
    let v = read_response(message.to_string().as_bytes()).unwrap();
    assert_eq!(v.state, TaskState::Completed);
    assert_eq!(proposal_of(&v).summary, "Sure, 8 pm.");
}

#[test]
fn refusals_and_malformed_answers_are_errors() {
    let e =
        read_response(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"no task"}}"#)
            .unwrap_err();
    assert_eq!(
        e,
        ClientError::Rpc {
            code: -32001,
            message: "no task".into()
        }
    );
    for (body, why) in [
        (&b"<html>"[..], "not JSON"),
        (br#"{"jsonrpc":"2.0","id":1}"#, "no `result`"),
        (
            br#"{"result":{"task":{"status":{"state":"TASK_STATE_WORKING"}}}}"#,
            "no `id`",
        ),
        (
            br#"{"result":{"id":"t","status":{"state":"TASK_STATE_DANCING"}}}"#,
            "unknown task state",
        ),
        (br#"{"result":{"id":"t"}}"#, "no `status`"),
        (br#"{"result":{"task":3}}"#, "not an object"),
    ] {
        let e = read_response(body).unwrap_err().to_string();
        assert!(e.contains(why), "{e} should say {why}");
    }
}

#[test]
fn packets_become_messages_and_requests() {
    use crate::packet::{ContextBody, ContextResponseBody, Intent, Unavailable};
    let mut context = Context::new();
    context.insert("proposed_date".into(), json!("2026-11-27"));
    let p = Packet {
        protocol: "a2acp/0.1".into(),
        packet_id: "pkt_1".into(),
        thread_id: "thr_1".into(),
        from: Address::parse("agent:alice@x").unwrap(),
        to: peer_address("http://h/.well-known/agent-card.json").unwrap(),
        timestamp: "2026-11-20T10:00:00Z".into(),
        capabilities: None,
        format_hints: None,
        body: Body::Context(ContextBody {
            intent: Some(Intent {
                category: "scheduling".into(),
                summary: "Dinner Friday".into(),
                urgency: None,
                scope_change: None,
            }),
            context,
            ..Default::default()
        }),
    };
    let Some(Outgoing::Message(m)) = outgoing(&p, "ctx_1") else {
        panic!("a context packet is a message")
    };
    assert_eq!(
        m,
        json!({"messageId": "pkt_1", "contextId": "ctx_1", "role": "ROLE_USER", "parts": [
            {"text": "Dinner Friday"},
            {"data": {"proposed_date": "2026-11-27", "category": "scheduling"}},
        ]})
    );
    let r = send_request("rpc_1", &m, Some("t1"));
    assert_eq!(r["method"], "SendMessage");
    assert_eq!(r["params"]["message"]["taskId"], "t1");
    assert_eq!(get_request("rpc_2", "t1")["params"]["id"], "t1");

    let mut reply = p.clone();
    reply.body = Body::ContextResponse(ContextResponseBody {
        context_provided: Context::new(),
        context_unavailable: vec![Unavailable {
            field: "health_info".into(),
            status: "declined".into(),
            hint: None,
        }],
        permissions: None,
    });
    let Some(Outgoing::Message(m)) = outgoing(&reply, "ctx_1") else {
        panic!("a context response is a message")
    };
    assert_eq!(
        m["parts"],
        json!([{"text": "Here is what I can share. Not shared: health_info."}])
    );
    reply.body = Body::ExecutionReport(crate::packet::ExecutionReport {
        resolution_id: "r".into(),
        status: "completed".into(),
        failed_action: None,
        error: None,
    });
    assert_eq!(outgoing(&reply, "ctx_1"), None);

    // Confirming is a message; declining cancels the task.
    let decision = |status| {
        let mut r = reply.clone();
        r.body = Body::ResolutionResponse(crate::packet::ResolutionResponseBody {
            resolution_id: Some("r".into()),
            status,
            reason_class: None,
            message_to_other_agent: None,
            alternative: None,
            signature: None,
            confirmations: Vec::new(),
        });
        outgoing(&r, "ctx_1")
    };
    let Some(Outgoing::Message(m)) = decision(ResolutionStatus::Confirmed) else {
        panic!("a confirmation is a message")
    };
    assert_eq!(m["parts"][1]["data"], json!({"decision": "confirm"}));
    assert_eq!(decision(ResolutionStatus::Declined), Some(Outgoing::Cancel));
}
