//! Every validation rule of seed 001, one row each: the message, the code it gets, the
//! words its message must contain.

use super::*;

const ME: &str = "6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b";
const THEM: &str = "0a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d";
const ID: &str = "3b241101-e2bb-4255-8caf-4136c566a962";

fn me() -> Receiver {
    Receiver {
        agent_id: Uuid::parse_str(ME).unwrap(),
        supported_tasks: vec!["scheduling".into(), "research".into()],
    }
}

fn message(kind: &str, payload: Value) -> Value {
    json!({
        "version": "1.0.0", "message_id": ID, "timestamp": "2024-02-05T15:30:00Z",
        "from": THEM, "to": ME, "type": kind, "payload": payload
    })
}

fn assignment() -> Value {
    message(
        "task_assignment",
        json!({"task_id": "task-456", "task_type": "research", "title": "Research",
               "description": "Investigate", "payload": {"query": "L2"}, "priority": "high",
               "deadline": "2024-02-05T18:00:00Z", "metadata": {"source": "user_request"}}),
    )
}

fn with(mut m: Value, path: &[&str], v: Option<Value>) -> Value {
    let (last, parents) = path.split_last().unwrap();
    let mut o = &mut m;
    for p in parents {
        o = o.get_mut(*p).unwrap();
    }
    let o = o.as_object_mut().unwrap();
    match v {
        Some(v) => {
            o.insert(last.to_string(), v);
        }
        None => {
            o.remove(*last);
        }
    }
    m
}

fn check(m: &Value) -> Result<Message, EnvelopeError> {
    parse(&serde_json::to_vec(m).unwrap(), &me())
}

#[test]
fn the_seeds_five_message_types_are_accepted() {
    let ok = [
        assignment(),
        message(
            "status_update",
            json!({"task_id": "t", "status": "in_progress", "progress": 0.5, "message": "…", "metadata": {}}),
        ),
        message(
            "task_completion",
            json!({"task_id": "t", "status": "completed", "result": {"summary": "5"}, "execution_time_ms": 3600000}),
        ),
        message("ping", json!({"nonce": "n-1", "echo": [1, {"a": null}]})),
        message(
            "error",
            json!({"original_message_id": "m", "error_code": "TIMEOUT", "error_message": "late"}),
        ),
        with(assignment(), &["signature"], Some(json!("c2lnbmF0dXJl"))),
        with(
            assignment(),
            &["payload", "priority"],
            Some(json!("medium")),
        ),
        with(
            assignment(),
            &["timestamp"],
            Some(json!("2024-02-05T17:30:00.123+02:00")),
        ),
    ];
    for m in ok {
        let got = check(&m).unwrap_or_else(|e| panic!("{m}: {e}"));
        // What is parsed serialises back to the same message.
        assert_eq!(got.to_json(), m, "round trip");
    }
    // Without a priority: `medium`, written out when sent on.
    let t = check(&with(assignment(), &["payload", "priority"], None)).unwrap();
    assert_eq!(t.to_json()["payload"]["priority"], "medium");
    let Payload::TaskAssignment(t) = t.payload else {
        panic!()
    };
    assert_eq!(t.priority, Priority::Medium, "the default priority");
}

#[test]
fn every_rule_refuses_with_its_code() {
    use ErrorCode::*;
    let a = assignment;
    let p = |k: &str, v: Value| with(assignment(), &["payload", k], Some(v));
    let rows: Vec<(&str, Value, ErrorCode, &str)> = vec![
        (
            "version",
            with(a(), &["version"], Some(json!("2.0.0"))),
            InvalidMessageFormat,
            "version",
        ),
        (
            "version missing",
            with(a(), &["version"], None),
            InvalidMessageFormat,
            "`version` is missing",
        ),
        (
            "message_id not uuid",
            with(a(), &["message_id"], Some(json!("msg-123"))),
            InvalidMessageFormat,
            "message_id",
        ),
        (
            "message_id v1",
            with(
                a(),
                &["message_id"],
                Some(json!("c232ab00-9414-11ec-b3c8-9f6bdeced846")),
            ),
            InvalidMessageFormat,
            "message_id",
        ),
        (
            "message_id braced",
            with(
                a(),
                &["message_id"],
                Some(json!(format!("{{{}}}", &ID[..34]))),
            ),
            InvalidMessageFormat,
            "message_id",
        ),
        (
            "message_id simple form",
            with(a(), &["message_id"], Some(json!(ID.replace('-', "")))),
            InvalidMessageFormat,
            "message_id",
        ),
        (
            "from",
            with(a(), &["from"], Some(json!("agent-001"))),
            InvalidMessageFormat,
            "`from`",
        ),
        (
            "to",
            with(a(), &["to"], Some(json!(12))),
            InvalidMessageFormat,
            "`to` is not a string",
        ),
        (
            "timestamp",
            with(a(), &["timestamp"], Some(json!("yesterday"))),
            InvalidMessageFormat,
            "timestamp",
        ),
        (
            "timestamp date only",
            with(a(), &["timestamp"], Some(json!("2024-02-05"))),
            InvalidMessageFormat,
            "timestamp",
        ),
        (
            "payload not object",
            with(a(), &["payload"], Some(json!([1]))),
            InvalidMessageFormat,
            "payload",
        ),
        (
            "payload missing",
            with(a(), &["payload"], None),
            InvalidMessageFormat,
            "payload",
        ),
        (
            "unknown envelope field",
            with(a(), &["extra"], Some(json!(1))),
            InvalidMessageFormat,
            "unknown envelope field `extra`",
        ),
        (
            "signature not string",
            with(a(), &["signature"], Some(json!({}))),
            InvalidMessageFormat,
            "signature",
        ),
        (
            "type unknown",
            with(a(), &["type"], Some(json!("task_cancel"))),
            UnsupportedMessageType,
            "task_cancel",
        ),
        (
            "to another agent",
            with(a(), &["to"], Some(json!(THEM))),
            AgentNotFound,
            THEM,
        ),
        (
            "task_id missing",
            with(a(), &["payload", "task_id"], None),
            PayloadValidationFailed,
            "task_id",
        ),
        (
            "title missing",
            with(a(), &["payload", "title"], None),
            PayloadValidationFailed,
            "title",
        ),
        (
            "description wrong type",
            p("description", json!(3)),
            PayloadValidationFailed,
            "description",
        ),
        (
            "inner payload not object",
            p("payload", json!("q")),
            PayloadValidationFailed,
            "payload.payload",
        ),
        (
            "priority unknown",
            p("priority", json!("asap")),
            PayloadValidationFailed,
            "priority",
        ),
        (
            "deadline",
            p("deadline", json!("soon")),
            PayloadValidationFailed,
            "deadline",
        ),
        (
            "metadata not object",
            p("metadata", json!(1)),
            PayloadValidationFailed,
            "metadata",
        ),
        (
            "unknown payload field",
            p("owner", json!("x")),
            PayloadValidationFailed,
            "owner",
        ),
        (
            "empty task_id",
            p("task_id", json!("")),
            PayloadValidationFailed,
            "task_id",
        ),
        (
            "task type",
            p("task_type", json!("writing")),
            InvalidTaskType,
            "writing",
        ),
        (
            "status unknown",
            message("status_update", json!({"task_id": "t", "status": "paused"})),
            PayloadValidationFailed,
            "status",
        ),
        (
            "progress over 1",
            message(
                "status_update",
                json!({"task_id": "t", "status": "created", "progress": 1.5}),
            ),
            PayloadValidationFailed,
            "progress",
        ),
        (
            "completion status",
            message(
                "task_completion",
                json!({"task_id": "t", "status": "in_progress", "result": {}}),
            ),
            PayloadValidationFailed,
            "status",
        ),
        (
            "completion without result",
            message(
                "task_completion",
                json!({"task_id": "t", "status": "failed"}),
            ),
            PayloadValidationFailed,
            "result",
        ),
        (
            "negative time",
            message(
                "task_completion",
                json!({"task_id": "t", "status": "failed", "result": {}, "execution_time_ms": -1}),
            ),
            PayloadValidationFailed,
            "execution_time_ms",
        ),
        (
            "ping without nonce",
            message("ping", json!({"echo": 1})),
            PayloadValidationFailed,
            "nonce",
        ),
        (
            "ping extra",
            message("ping", json!({"nonce": "n", "reply_to": "x"})),
            PayloadValidationFailed,
            "reply_to",
        ),
        (
            "error code unknown",
            message(
                "error",
                json!({"error_code": "TEAPOT", "error_message": "x"}),
            ),
            PayloadValidationFailed,
            "error_code",
        ),
    ];
    for (what, m, code, words) in rows {
        let e = check(&m).expect_err(what);
        assert_eq!(e.code, code, "{what}: {e}");
        assert!(
            e.message.contains(words),
            "{what}: {:?} lacks {words:?}",
            e.message
        );
        // The error goes back to the sender when it could be read, naming the message.
        if what != "from" {
            assert_eq!(e.from, Some(Uuid::parse_str(THEM).unwrap()), "{what}");
        }
        if !what.starts_with("message_id") {
            assert_eq!(e.original_message_id.as_deref(), Some(ID), "{what}");
        }
    }
}

#[test]
fn what_is_not_a_message_gets_invalid_message_format() {
    for body in [&b"not json"[..], b"[1,2]", b"\"x\"", b"", &[0xff, 0xfe]] {
        let e = parse(body, &me()).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidMessageFormat);
        assert_eq!(e.from, None);
    }
    let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
    let e = parse(&big, &me()).unwrap_err();
    assert!(e.message.contains("over"), "{e}");
}

#[test]
fn invalid_task_type_lists_the_supported_ones() {
    let m = with(
        assignment(),
        &["payload", "task_type"],
        Some(json!("writing")),
    );
    let e = check(&m).unwrap_err();
    assert_eq!(
        e.details.unwrap()["supported_types"],
        json!(["scheduling", "research"])
    );
}

#[test]
fn the_error_reply_is_a_valid_error_message_to_the_sender() {
    let e = check(&with(assignment(), &["type"], Some(json!("nope")))).unwrap_err();
    let them = Uuid::parse_str(THEM).unwrap();
    let reply = e.reply(me().agent_id, uuid_v4([7; 16]), "2024-02-05T16:40:00Z");
    let back = parse(
        &serde_json::to_vec(&reply.to_json()).unwrap(),
        &Receiver {
            agent_id: them,
            supported_tasks: vec![],
        },
    )
    .unwrap();
    let Payload::Error(p) = back.payload else {
        panic!()
    };
    assert_eq!(p.error_code, ErrorCode::UnsupportedMessageType);
    assert_eq!(p.original_message_id.as_deref(), Some(ID));
    assert_eq!(back.to, them);

    // An empty `message_id` is not carried back: the reply stays a valid message.
    let e = check(&with(assignment(), &["message_id"], Some(json!("")))).unwrap_err();
    assert_eq!(e.original_message_id, None);
    let reply = e.reply(me().agent_id, uuid_v4([7; 16]), "2024-02-05T16:40:00Z");
    let back = validate(&serde_json::to_vec(&reply.to_json()).unwrap());
    assert!(back.is_ok(), "{back:?}");
}

#[test]
fn a_refusal_before_the_message_is_read_is_invalid_message_format_to_nobody() {
    let v = refusal_reply(
        me().agent_id,
        "the body is over 1048576 bytes",
        uuid_v4([9; 16]),
        "2024-02-05T16:40:00Z",
    );
    assert_eq!(v["version"], VERSION);
    assert_eq!(v["type"], "error");
    assert_eq!(v["from"], ME);
    assert_eq!(v["to"], Uuid::nil().to_string());
    assert_eq!(v["payload"]["error_code"], "INVALID_MESSAGE_FORMAT");
    assert_eq!(
        v["payload"]["error_message"],
        "the body is over 1048576 bytes"
    );
    assert!(v["payload"].get("original_message_id").is_none(), "{v}");
    assert_eq!(
        uuid_v4_of(v["message_id"].as_str().unwrap()),
        Some(uuid_v4([9; 16]))
    );
}

#[test]
fn a_ping_is_echoed_with_its_nonce() {
    let m = check(&message("ping", json!({"nonce": "n-42", "echo": {"x": 1}}))).unwrap();
    let echo = m
        .ping_echo(uuid_v4([9; 16]), "2024-02-05T16:35:01Z")
        .unwrap();
    assert_eq!(echo.to, m.from);
    assert_eq!(echo.from, m.to);
    assert_eq!(
        echo.to_json()["payload"],
        json!({"nonce": "n-42", "echo": {"x": 1}})
    );
    assert!(check(&assignment())
        .unwrap()
        .ping_echo(uuid_v4([1; 16]), "x")
        .is_none());
}

#[test]
fn http_statuses_follow_the_seed() {
    use ErrorCode::*;
    let table = [
        (InvalidMessageFormat, 400, false),
        (UnsupportedMessageType, 400, false),
        (InvalidTaskType, 400, false),
        (TaskNotFound, 404, false),
        (AgentNotFound, 404, false),
        (CapabilityMismatch, 400, false),
        (PayloadValidationFailed, 400, false),
        (Timeout, 500, true),
        (InternalError, 500, true),
    ];
    for (c, status, retry) in table {
        assert_eq!(c.http_status(), status, "{c}");
        assert_eq!(c.retryable(), retry, "{c}");
        let wire: ErrorCode = serde_json::from_value(json!(c.as_str())).unwrap();
        assert_eq!(wire, c);
    }
    assert_eq!(table.len(), ErrorCode::ALL.len());
}

#[test]
fn uuids_made_from_bytes_are_version_4() {
    let u = uuid_v4([0xab; 16]);
    assert_eq!(u.get_version_num(), 4);
    assert!(uuid_v4_of(&u.hyphenated().to_string()).is_some());
}
