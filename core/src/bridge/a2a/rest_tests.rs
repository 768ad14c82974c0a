use super::*;

/// The JSON-RPC request a REST request becomes, as JSON.
fn rpc(method: &str, path: &str, query: Option<&str>, body: &str) -> Value {
    let r = route(method, path).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let bytes = r
        .request(query, body.as_bytes())
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    serde_json::from_slice(&bytes).unwrap()
}

fn refused(method: &str, path: &str, query: Option<&str>, body: &str) -> RestError {
    match route(method, path) {
        Err(e) => e,
        Ok(r) => r
            .request(query, body.as_bytes())
            .expect_err(&format!("{method} {path} {query:?} {body}")),
    }
}

#[test]
fn each_route_is_its_json_rpc_method() {
    let send = r#"{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"Dinner?"}]},"configuration":{"historyLength":3}}"#;
    let v = rpc("POST", "/message:send", None, send);
    assert_eq!(v["jsonrpc"], "2.0");
    assert_eq!(v["method"], "SendMessage");
    assert_eq!(v["params"]["message"]["messageId"], "m1");
    assert_eq!(v["params"]["configuration"]["historyLength"], 3);
    assert_eq!(
        rpc("POST", "/message:stream", Some("ignored=1"), send)["method"],
        "SendStreamingMessage"
    );
    let v = rpc("GET", "/tasks/thr_1", Some("historyLength=2"), "");
    assert_eq!(v["method"], "GetTask");
    assert_eq!(v["params"], json!({"historyLength": 2, "id": "thr_1"}));
    let v = rpc("GET", "/tasks/thr_1", None, "");
    assert_eq!(v["params"], json!({"id": "thr_1"}));
    let v = rpc(
        "GET",
        "/tasks",
        Some("contextId=ctx%201&status=TASK_STATE_CANCELED&pageSize=10&pageToken=20&historyLength=0&includeArtifacts=TRUE&tenant=x&unknown=y"),
        "",
    );
    assert_eq!(v["method"], "ListTasks");
    assert_eq!(
        v["params"],
        json!({"contextId": "ctx 1", "status": "TASK_STATE_CANCELED", "pageSize": 10,
               "pageToken": "20", "historyLength": 0, "includeArtifacts": true})
    );
    // The last of a repeated parameter wins.
    let v = rpc("GET", "/tasks", Some("pageSize=1&pageSize=7"), "");
    assert_eq!(v["params"]["pageSize"], 7);
    // Cancel: the SDK sends the request as the body; with none, the path is enough.
    let v = rpc("POST", "/tasks/thr_1:cancel", None, r#"{"id":"thr_1"}"#);
    assert_eq!(v["method"], "CancelTask");
    assert_eq!(v["params"], json!({"id": "thr_1"}));
    let v = rpc("POST", "/tasks/thr_1:cancel", None, "");
    assert_eq!(v["params"], json!({"id": "thr_1"}));
    // Subscribe: GET in the protocol's annotations, POST from the SDK's client.
    for m in ["GET", "POST"] {
        let v = rpc(m, "/tasks/thr_1:subscribe", None, "");
        assert_eq!(v["method"], "SubscribeToTask");
        assert_eq!(v["params"], json!({"id": "thr_1"}));
        assert!(route(m, "/tasks/thr_1:subscribe").unwrap().is_streaming());
    }
    assert!(route("POST", "/message:stream").unwrap().is_streaming());
    assert!(!route("POST", "/message:send").unwrap().is_streaming());
    // Push notification configs and the extended card: the methods this agent refuses.
    for (m, path, method) in [
        (
            "POST",
            "/tasks/thr_1/pushNotificationConfigs",
            "CreateTaskPushNotificationConfig",
        ),
        (
            "GET",
            "/tasks/thr_1/pushNotificationConfigs",
            "ListTaskPushNotificationConfigs",
        ),
        (
            "GET",
            "/tasks/thr_1/pushNotificationConfigs/c1",
            "GetTaskPushNotificationConfig",
        ),
        (
            "DELETE",
            "/tasks/thr_1/pushNotificationConfigs/c1",
            "DeleteTaskPushNotificationConfig",
        ),
    ] {
        let v = rpc(m, path, None, "{}");
        assert_eq!(v["method"], method, "{m} {path}");
        assert_eq!(v["params"]["taskId"], "thr_1", "{m} {path}");
    }
    assert_eq!(
        rpc("GET", "/extendedAgentCard", None, "")["method"],
        "GetExtendedAgentCard"
    );
    // A percent-encoded id is decoded.
    assert_eq!(
        rpc("GET", "/tasks/thr%5F1", None, "")["params"]["id"],
        "thr_1"
    );
    assert_eq!(
        route("GET", "/tasks/thr_1").unwrap().task_id(),
        Some("thr_1")
    );
}

#[test]
fn bad_routes_are_404_and_wrong_methods_405() {
    for path in [
        "",
        "/",
        "/message",
        "/message:send/",
        "/message:nope",
        "/tasks/",
        "/tasks/thr_1:nope",
        "/tasks/:cancel",
        "/tasks/thr_1/x",
        "/tasks/thr_1/pushNotificationConfigs/",
        "/tenant-a/message:send",
        "/tenant-a/tasks/thr_1",
        "/v1/tasks",
        "/.well-known/agent.json",
        "/extendedAgentCard/x",
    ] {
        let e = route("POST", path).expect_err(path);
        assert_eq!((e.status, e.code), (404, code::METHOD_NOT_FOUND), "{path}");
        let r = e.reply();
        assert_eq!(r.status, 404);
        assert_eq!(r.body["error"]["details"][0]["reason"], "METHOD_NOT_FOUND");
    }
    for (m, path, allow) in [
        ("GET", "/message:send", "POST"),
        ("PUT", "/message:stream", "POST"),
        ("POST", "/tasks", "GET"),
        ("DELETE", "/tasks/thr_1", "GET"),
        ("GET", "/tasks/thr_1:cancel", "POST"),
        ("DELETE", "/tasks/thr_1:subscribe", "GET, POST"),
        ("PUT", "/tasks/thr_1/pushNotificationConfigs", "POST, GET"),
        (
            "POST",
            "/tasks/thr_1/pushNotificationConfigs/c1",
            "GET, DELETE",
        ),
        ("POST", "/extendedAgentCard", "GET"),
    ] {
        let e = route(m, path).expect_err(path);
        assert_eq!(e.status, 405, "{m} {path}");
        assert_eq!(e.allow, Some(allow), "{m} {path}");
        let r = e.reply();
        assert_eq!(r.allow, Some(allow));
        assert_eq!(r.body["error"]["code"], 405);
        assert_eq!(r.body["error"]["status"], "UNIMPLEMENTED");
    }
}

#[test]
fn bad_query_values_are_400_naming_the_parameter() {
    for (path, query, name) in [
        ("/tasks/thr_1", "historyLength=two", "historyLength"),
        ("/tasks/thr_1", "historyLength=1.5", "historyLength"),
        (
            "/tasks/thr_1",
            "historyLength=99999999999999999999",
            "historyLength",
        ),
        ("/tasks", "pageSize=", "pageSize"),
        ("/tasks", "pageSize=%ZZ", "pageSize"),
        ("/tasks", "includeArtifacts=yes", "includeArtifacts"),
        ("/tasks", "contextId=%FF", "contextId"),
        ("/tasks", "status=%E2%82", "status"),
        ("/tasks", "pageToken=%", "pageToken"),
    ] {
        let e = refused("GET", path, Some(query), "");
        assert_eq!((e.status, e.code), (400, code::INVALID_PARAMS), "{query}");
        assert!(e.message.starts_with(&format!("{name}: ")), "{query}: {e}");
        let r = e.reply();
        assert_eq!(r.body["error"]["details"][0]["reason"], "INVALID_PARAMS");
        assert_eq!(r.body["error"]["status"], "INVALID_ARGUMENT");
    }
    // Unknown parameters are not read, even broken ones; too long a query is 414.
    assert_eq!(
        rpc("GET", "/tasks/thr_1", Some("x=%ZZ&=&&historyLength=1"), "")["params"],
        json!({"historyLength": 1, "id": "thr_1"})
    );
    let long = format!("contextId={}", "a".repeat(MAX_QUERY));
    assert_eq!(refused("GET", "/tasks", Some(&long), "").status, 414);
    // A broken escape in the path's id.
    let e = refused("GET", "/tasks/thr%2", None, "");
    assert_eq!((e.status, e.code), (400, code::INVALID_PARAMS));
    assert!(e.message.starts_with("id: "), "{e}");
}

#[test]
fn bodies_that_are_not_json_objects_are_400() {
    for (path, body, code) in [
        ("/message:send", "", code::INVALID_REQUEST),
        ("/message:send", "  \n", code::INVALID_REQUEST),
        ("/message:send", "{nope", code::PARSE_ERROR),
        ("/message:stream", "\u{0}\u{1}", code::PARSE_ERROR),
        ("/message:send", "[1]", code::INVALID_REQUEST),
        ("/message:send", "\"message\"", code::INVALID_REQUEST),
        ("/tasks/thr_1:cancel", "nope", code::PARSE_ERROR),
        ("/tasks/thr_1:cancel", "null", code::INVALID_REQUEST),
        ("/tasks/thr_1:subscribe", "{", code::PARSE_ERROR),
    ] {
        let e = refused("POST", path, None, body);
        assert_eq!((e.status, e.code), (400, code), "{path} {body:?}");
        assert!(e.message.starts_with("the body: "), "{e}");
        let r = e.reply();
        assert_eq!(r.status, 400);
        assert_eq!(r.body["error"]["details"][0]["reason"], "INVALID_REQUEST");
    }
    // A cancel naming another task than its path.
    let e = refused("POST", "/tasks/thr_1:cancel", None, r#"{"id":"thr_2"}"#);
    assert_eq!((e.status, e.code), (400, code::INVALID_PARAMS));
    assert!(e.message.starts_with("id: "), "{e}");
    // A body that fits the listener's cap but not, wrapped, the agent's.
    let big = format!(r#"{{"message":{{"x":"{}"}}}}"#, "a".repeat(A2A_MAX_REQUEST));
    assert_eq!(refused("POST", "/message:send", None, &big).status, 413);
}

#[test]
fn error_codes_map_to_http_statuses() {
    let table = [
        (code::TASK_NOT_FOUND, 404, "NOT_FOUND", "TASK_NOT_FOUND"),
        (
            code::TASK_NOT_CANCELABLE,
            400,
            "FAILED_PRECONDITION",
            "TASK_NOT_CANCELABLE",
        ),
        (
            code::PUSH_NOTIFICATION_NOT_SUPPORTED,
            400,
            "FAILED_PRECONDITION",
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
        ),
        (
            code::UNSUPPORTED_OPERATION,
            400,
            "FAILED_PRECONDITION",
            "UNSUPPORTED_OPERATION",
        ),
        (
            code::CONTENT_TYPE_NOT_SUPPORTED,
            400,
            "INVALID_ARGUMENT",
            "CONTENT_TYPE_NOT_SUPPORTED",
        ),
        (-32006, 500, "INTERNAL", "INVALID_AGENT_RESPONSE"),
        (
            code::EXTENDED_CARD_NOT_CONFIGURED,
            400,
            "FAILED_PRECONDITION",
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        ),
        (
            -32008,
            400,
            "FAILED_PRECONDITION",
            "EXTENSION_SUPPORT_REQUIRED",
        ),
        (
            code::VERSION_NOT_SUPPORTED,
            400,
            "FAILED_PRECONDITION",
            "VERSION_NOT_SUPPORTED",
        ),
        (
            code::INVALID_PARAMS,
            400,
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
        ),
        (
            code::INVALID_REQUEST,
            400,
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
        ),
        (
            code::PARSE_ERROR,
            400,
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
        ),
        (code::METHOD_NOT_FOUND, 404, "NOT_FOUND", "METHOD_NOT_FOUND"),
        (code::INTERNAL_ERROR, 500, "INTERNAL", "INTERNAL_ERROR"),
        (-1, 500, "INTERNAL", "INTERNAL_ERROR"),
    ];
    for (c, status, grpc, reason) in table {
        assert_eq!(mapping(c), (status, grpc, reason), "{c}");
        let response = json!({"jsonrpc": "2.0", "id": "rest", "error": {"code": c, "message": "params.historyLength: an integer from 0 to 9"}});
        let r = reply(&response);
        assert_eq!(r.status, status, "{c}");
        assert_eq!(
            r.body,
            json!({"error": {
                "code": status, "status": grpc,
                "message": "historyLength: an integer from 0 to 9",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                             "reason": reason, "domain": "a2a-protocol.org", "metadata": {}}],
            }}),
            "{c}"
        );
    }
    // The listener's own statuses keep the code's reason under their own gRPC status.
    for (status, grpc) in [
        (401, "UNAUTHENTICATED"),
        (408, "DEADLINE_EXCEEDED"),
        (413, "RESOURCE_EXHAUSTED"),
        (414, "INVALID_ARGUMENT"),
        (429, "RESOURCE_EXHAUSTED"),
        (503, "UNAVAILABLE"),
    ] {
        let r = RestError::with_status(status, code::UNSUPPORTED_OPERATION, "x").reply();
        assert_eq!(r.status, status);
        assert_eq!(r.body["error"]["status"], grpc, "{status}");
        assert_eq!(
            r.body["error"]["details"][0]["reason"],
            "UNSUPPORTED_OPERATION"
        );
    }
}

#[test]
fn results_are_answered_bare_and_stream_events_unwrapped() {
    let task =
        json!({"id": "thr_1", "contextId": "ctx_1", "status": {"state": "TASK_STATE_WORKING"}});
    let r = reply(&json!({"jsonrpc": "2.0", "id": "rest", "result": {"task": task}}));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, json!({"task": task}));
    assert_eq!(r.allow, None);
    let ev = sse_event(
        &json!({"jsonrpc": "2.0", "id": "rest", "result": {"statusUpdate": {"taskId": "thr_1"}}}),
    );
    assert_eq!(ev, "data: {\"statusUpdate\":{\"taskId\":\"thr_1\"}}\n\n");
    let ev = sse_event(
        &json!({"jsonrpc": "2.0", "id": "rest", "error": {"code": -32001, "message": "no task"}}),
    );
    assert!(
        ev.starts_with("event: error\ndata: {\"error\":{\"code\":404,"),
        "{ev}"
    );
    assert!(
        ev.ends_with("\n\n") && ev.matches('\n').count() == 3,
        "{ev}"
    );
}

#[test]
fn percent_decoding() {
    assert_eq!(
        percent_decode("a%20b+c%2Fd", true).as_deref(),
        Some("a b c/d")
    );
    assert_eq!(percent_decode("a+b", false).as_deref(), Some("a+b"));
    assert_eq!(percent_decode("%e2%82%ac", true).as_deref(), Some("€"));
    for bad in ["%", "%2", "%+1", "%C3", "x%g0"] {
        assert_eq!(percent_decode(bad, true), None, "{bad}");
    }
}
