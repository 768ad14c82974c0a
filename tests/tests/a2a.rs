//! The A2A v1.0 listener (`agent run --a2a-listen`, seed 003, §18) over real sockets:
//! the official Python SDK (`a2a-sdk` 1.3.0, installed by `.ci/run` into
//! `target/a2a-venv`) negotiates a dinner with Bob's agent (`tests/a2a/negotiate.py`) while
//! Bob answers his prompts through the control socket; and the listener's defences
//! against hostile clients, each written as the attack.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use a2acp_runtime::a2a::A2aLimits;
use a2acp_runtime::control::Request;
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::next_friday;
use a2acp_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "test-token-0123456789";

/// The a2a venv's interpreter (the tests that call it are ignored without `--run-ignored`).
fn python() -> PathBuf {
    venv_python("a2a", "A2ACP_A2A_PYTHON")
}

/// Bob, at his control socket: shares what is asked and confirms what is proposed, until
/// stopped. Returns how many prompts he answered.
fn bob_answers(
    home: Home,
) -> (
    tokio::task::JoinHandle<u32>,
    tokio::sync::watch::Sender<bool>,
) {
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        let mut answered = 0;
        loop {
            if *stopped.borrow() {
                return answered;
            }
            let r = ctl(&home, Request::Prompts).await;
            for p in r.data.as_array().cloned().unwrap_or_default() {
                let id = p["id"].as_u64().unwrap();
                let consent = p["kind"].get("Consent").is_some();
                let args = vec![if consent { "share-all" } else { "confirm" }.to_string()];
                let r = ctl(
                    &home,
                    Request::Answer {
                        prompt_id: id,
                        args,
                    },
                )
                .await;
                assert!(r.ok, "{r:?}");
                answered += 1;
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), stopped.changed()).await;
        }
    });
    (task, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official a2a-sdk: bash .ci/test-deps"]
async fn the_official_a2a_sdk_negotiates_a_dinner_with_an_agent() {
    sdk_negotiates(None).await;
}

/// The same client on the card's HTTP+JSON interface: the SDK's REST transport, every
/// route of the binding, its errors read back as the SDK's error types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official a2a-sdk: bash .ci/test-deps"]
async fn the_official_a2a_sdk_negotiates_a_dinner_over_http_json() {
    sdk_negotiates(Some("HTTP+JSON")).await;
}

/// `tests/a2a/negotiate.py` against Bob's agent, on the card's first interface (JSON-RPC)
/// or on the `binding` the client asks for.
async fn sdk_negotiates(binding: Option<&str>) {
    let python = python();
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes { bob: hb, .. } = dinner_homes(dir.path(), &relay.url());
    let bob = bob_with_a2a(&hb, Some(TOKEN), A2aLimits::default(), |_| {});
    let addr = bob.a2a_addr().expect("listening");
    let (user, stop) = bob_answers(hb.clone());
    let date = next_friday(a2acp_runtime::now());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("a2a/negotiate.py");
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(&script);
    if let Some(b) = binding {
        cmd.args(["--binding", b]);
    }
    let run = cmd
        .arg(format!("http://{addr}"))
        .arg(TOKEN)
        .arg(&date)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(150), run)
        .await
        .expect("the A2A client finished within 150 s")
        .expect("run the A2A client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the A2A client failed:\n{stdout}\n{stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("{}")).expect("the client's report");
    eprintln!("{report:#}");
    assert_eq!(report["protocol_version"], "1.0");
    assert_eq!(report["binding"], "JSONRPC");
    assert_eq!(
        report["bindings"],
        serde_json::json!(["JSONRPC", "HTTP+JSON"])
    );
    let transport = match binding {
        Some(_) => "RestTransport",
        None => "JsonRpcTransport",
    };
    assert_eq!(report["transport"], transport, "{report}");
    assert_eq!(report["stream_transport"], transport, "{report}");
    assert_eq!(report["streaming"], true);
    assert!(
        report["needs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "time_windows"),
        "{report}"
    );
    assert_eq!(report["artifact"], "proposal");
    assert_eq!(report["final_state"], "TASK_STATE_COMPLETED");
    assert_eq!(report["history_2"], 2);
    assert_eq!(report["cancelled_state"], "TASK_STATE_CANCELED");
    assert_eq!(report["cancel_again"], "TaskNotCancelableError");
    assert_eq!(report["unknown_task"], "TaskNotFoundError");
    assert_eq!(
        report["listed_canceled"],
        serde_json::json!([report["cancelled_id"]])
    );
    assert_eq!(
        report["listed_context"],
        serde_json::json!([report["cancelled_id"]])
    );
    assert_eq!(report["stream_kinds"][0], "task", "{report}");
    assert_eq!(report["subscribe"][0], "task", "{report}");
    // The subscription stayed open through input-required until the cancel ended it.
    let sub = report["subscribe"].as_array().unwrap();
    assert_eq!(sub.last().unwrap(), "TASK_STATE_CANCELED", "{report}");
    // What Bob's agent says, read over its control socket.
    let tid = report["task_id"].as_str().unwrap().to_string();
    let r = ctl(&hb, Request::Thread { id: tid.clone() }).await;
    assert_eq!(r.data["state"], "COMPLETED", "{}", r.data);
    assert_eq!(r.data["peer"], "agent:a2a-bearer@a2a.invalid", "{}", r.data);
    let r = ctl(
        &hb,
        Request::Thread {
            id: report["cancelled_id"].as_str().unwrap().to_string(),
        },
    )
    .await;
    assert_eq!(r.data["state"], "DECLINED", "{}", r.data);
    let _ = stop.send(true);
    let answered = user.await.unwrap();
    assert!(answered >= 2, "Bob answered {answered} prompts");
    bob.stop().await.unwrap();
}

/// One raw HTTP/1.1 exchange: writes `req`, reads until the server closes or `wait`.
async fn raw(addr: SocketAddr, req: &[u8], wait: Duration) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn post(body: &str, extra: &str) -> Vec<u8> {
    format!(
        "POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A request of the HTTP+JSON binding.
fn rest(method: &str, target: &str, body: &str, extra: &str) -> Vec<u8> {
    format!(
        "{method} {target} HTTP/1.1\r\nhost: x\r\ncontent-type: application/a2a+json\r\nconnection: close\r\ncontent-length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const GET_TASK: &str = r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"thr_x"}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_listener_withstands_hostile_clients() {
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes { bob: hb, .. } = dinner_homes(dir.path(), &relay.url());
    let limits = A2aLimits {
        max_body: 4096,
        header_timeout: Duration::from_millis(500),
        body_timeout: Duration::from_millis(500),
        max_streams_per_client: 1,
        ..A2aLimits::default()
    };
    let bob = bob_with_a2a(&hb, Some(TOKEN), limits, |_| {});
    let addr = bob.a2a_addr().unwrap();
    let auth = format!("authorization: Bearer {TOKEN}\r\n");
    let long = Duration::from_secs(5);

    // The card is public and declares the bearer scheme.
    let r = raw(addr, b"GET /.well-known/agent-card.json HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n", long).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("\"protocolVersion\":\"1.0\""), "{r}");
    assert!(r.contains("httpAuthSecurityScheme"), "{r}");
    assert!(r.contains("\"url\":\"http://127.0.0.1\""), "{r}");

    // Table: what a request without the right credentials, on a wrong route, or too
    // large gets.
    let big = "x".repeat(5000);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("no token", post(GET_TASK, ""), "HTTP/1.1 401"),
        ("wrong token", post(GET_TASK, "authorization: Bearer nope-nope-nope-nope\r\n"), "HTTP/1.1 401"),
        ("right token", post(GET_TASK, &auth), "HTTP/1.1 200"),
        ("wrong path", b"POST /nope HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: 0\r\n\r\n".to_vec(), "HTTP/1.1 404"),
        ("GET on the endpoint", b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".to_vec(), "HTTP/1.1 405"),
        ("declared too large", post(&big, &auth), "HTTP/1.1 413"),
        (
            "chunked too large",
            format!("POST / HTTP/1.1\r\nhost: x\r\nconnection: close\r\ntransfer-encoding: chunked\r\n{auth}\r\n1388\r\n{big}\r\n0\r\n\r\n").into_bytes(),
            "HTTP/1.1 413",
        ),
        ("not HTTP", b"\x16\x03\x01 hello\r\n\r\n".to_vec(), "HTTP/1.1 400"),
        // The HTTP+JSON routes: the same door.
        ("REST, no token", rest("GET", "/tasks/thr_x", "", ""), "HTTP/1.1 401"),
        ("REST, wrong token", rest("GET", "/tasks", "", "authorization: Bearer nope-nope-nope-nope\r\n"), "HTTP/1.1 401"),
        ("REST, unknown task", rest("GET", "/tasks/thr_x?historyLength=1", "", &auth), "HTTP/1.1 404"),
        ("REST, the list", rest("GET", "/tasks?pageSize=5", "", &auth), "HTTP/1.1 200"),
        ("REST, a bad query value", rest("GET", "/tasks?pageSize=five", "", &auth), "HTTP/1.1 400"),
        ("REST, wrong method", rest("DELETE", "/tasks/thr_x", "", &auth), "HTTP/1.1 405"),
        ("REST, a tenant", rest("POST", "/acme/message:send", "{}", &auth), "HTTP/1.1 404"),
        ("REST, not JSON", rest("POST", "/message:send", "{nope", &auth), "HTTP/1.1 400"),
        ("REST, push notifications", rest("GET", "/tasks/thr_x/pushNotificationConfigs", "", &auth), "HTTP/1.1 400"),
        ("REST, declared too large", rest("POST", "/message:send", &big, &auth), "HTTP/1.1 413"),
        (
            "REST, chunked too large",
            format!("POST /message:stream HTTP/1.1\r\nhost: x\r\nconnection: close\r\ntransfer-encoding: chunked\r\n{auth}\r\n1388\r\n{big}\r\n0\r\n\r\n").into_bytes(),
            "HTTP/1.1 413",
        ),
    ];
    for (what, req, want) in cases {
        let r = raw(addr, &req, long).await;
        assert!(r.starts_with(want), "{what}: {r}");
    }
    let r = raw(addr, &post(GET_TASK, &auth), long).await;
    assert!(r.contains("-32001"), "task not found: {r}");
    let r = raw(
        addr,
        &post(GET_TASK, &format!("{auth}a2a-version: 0.3\r\n")),
        long,
    )
    .await;
    assert!(r.contains("-32009"), "version: {r}");
    // HTTP+JSON errors: a google.rpc.Status with the A2A reason, the parameter named.
    let body = |r: &str| -> serde_json::Value {
        serde_json::from_str(r.split_once("\r\n\r\n").map_or("", |x| x.1)).unwrap_or_default()
    };
    let r = raw(addr, &rest("GET", "/tasks/thr_x", "", &auth), long).await;
    assert!(r.contains("content-type: application/a2a+json"), "{r}");
    let e = &body(&r)["error"];
    assert_eq!(e["code"], 404, "{r}");
    assert_eq!(e["details"][0]["reason"], "TASK_NOT_FOUND", "{r}");
    let r = raw(addr, &rest("GET", "/tasks?pageSize=five", "", &auth), long).await;
    let e = &body(&r)["error"];
    assert_eq!(e["details"][0]["reason"], "INVALID_PARAMS", "{r}");
    assert!(
        e["message"].as_str().unwrap().starts_with("pageSize: "),
        "{r}"
    );
    let r = raw(addr, &rest("GET", "/tasks?pageSize=500", "", &auth), long).await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(
        body(&r)["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("pageSize: "),
        "{r}"
    );
    let r = raw(addr, &rest("DELETE", "/tasks/thr_x", "", &auth), long).await;
    assert!(r.contains("allow: GET\r\n"), "{r}");
    let r = raw(addr, &rest("GET", "/tasks", "", ""), long).await;
    assert!(r.contains("www-authenticate: Bearer"), "{r}");
    assert_eq!(body(&r)["error"]["status"], "UNAUTHENTICATED", "{r}");
    let r = raw(
        addr,
        &rest("GET", "/tasks", "", &format!("{auth}a2a-version: 0.3\r\n")),
        long,
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert_eq!(
        body(&r)["error"]["details"][0]["reason"],
        "VERSION_NOT_SUPPORTED",
        "{r}"
    );

    // Slowloris: a head that never ends is cut at the header deadline.
    let t = Instant::now();
    let r = raw(addr, b"POST / HTTP/1.1\r\nhost: x\r\n", long).await;
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "held {:?}: {r}",
        t.elapsed()
    );
    // A body that never comes: 408 at the body deadline.
    let t = Instant::now();
    let head = format!(
        "POST / HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\ncontent-length: 100\r\n\r\n{{"
    );
    let r = raw(addr, head.as_bytes(), long).await;
    assert!(r.starts_with("HTTP/1.1 408"), "{r}");
    assert!(t.elapsed() < Duration::from_secs(3));
    let t = Instant::now();
    let head = format!(
        "POST /message:send HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\ncontent-length: 100\r\n\r\n{{"
    );
    let r = raw(addr, head.as_bytes(), long).await;
    assert!(r.starts_with("HTTP/1.1 408"), "{r}");
    assert!(r.contains("DEADLINE_EXCEEDED"), "{r}");
    assert!(t.elapsed() < Duration::from_secs(3));

    // One open stream per client here: a second is refused while the first is open.
    let m = r#"{"jsonrpc":"2.0","id":2,"method":"SendStreamingMessage","params":{"message":{"messageId":"s1","role":"ROLE_USER","parts":[{"text":"Coffee on Friday?"}]}}}"#;
    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(&post(m, &auth)).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(long, first.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(head.contains("text/event-stream"), "{head}");
    // Still open (the task waits for Bob's consent): a second stream is one too many.
    assert!(head.contains("TASK_STATE_WORKING"), "{head}");
    let r = raw(addr, &post(m.replace("s1", "s2").as_str(), &auth), long).await;
    assert!(r.starts_with("HTTP/1.1 429"), "{r}");
    assert!(r.contains("-32000"), "{r}");
    assert!(r.contains("retry-after: 60"), "{r}");
    // The cap counts the client's streams of both bindings.
    let m_rest = r#"{"message":{"messageId":"s4","role":"ROLE_USER","parts":[{"text":"Coffee on Friday?"}]}}"#;
    let r = raw(addr, &rest("POST", "/message:stream", m_rest, &auth), long).await;
    assert!(r.starts_with("HTTP/1.1 429"), "{r}");
    assert!(r.contains("RESOURCE_EXHAUSTED"), "{r}");
    // Closing the first gives its place back.
    drop(first);
    let r = eventually(5, "the stream's place given back", || {
        let req = post(m.replace("s1", "s3").as_str(), &auth);
        async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&req).await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
                .await
                .ok()?
                .ok()?;
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            head.starts_with("HTTP/1.1 200").then_some(head)
        }
    })
    .await;
    assert!(r.contains("text/event-stream"), "{r}");
    bob.stop().await.unwrap();
}

/// A UUID v4 (hyphenated) numbered `n`.
fn v4(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

fn envelope(n: u64, from: &str, to: &str, kind: &str, payload: serde_json::Value) -> String {
    serde_json::json!({
        "version": "1.0.0", "message_id": v4(n), "timestamp": "2026-11-24T15:30:00Z",
        "from": from, "to": to, "type": kind, "payload": payload,
    })
    .to_string()
}

/// One `POST /a2a/messages`: the HTTP status and the body as JSON.
async fn phase1(addr: SocketAddr, body: &str) -> (u16, serde_json::Value) {
    let req = format!(
        "POST /a2a/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let r = raw(addr, req.as_bytes(), Duration::from_secs(5)).await;
    let status = r.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let json = r
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(serde_json::Value::Null);
    (status, json)
}

/// A `GET /a2a/messages`: the HTTP status and the body as JSON.
async fn phase1_get(addr: SocketAddr) -> (u16, serde_json::Value) {
    let r = raw(
        addr,
        b"GET /a2a/messages HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    let status = r.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let json = r
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(serde_json::Value::Null);
    (status, json)
}

/// The Phase-1 envelope (seed 001) over the real listener: every validation rule with its
/// error code and HTTP status, the ping echo, a task assignment becoming a thread (a
/// retried one opening nothing more), progress asked and reported, a cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_phase1_envelope_over_the_listener() {
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes { bob: hb, .. } = dinner_homes(dir.path(), &relay.url());
    let bob = bob_with_a2a(&hb, None, A2aLimits::default(), |_| {});
    let addr = bob.a2a_addr().unwrap();
    let me = v4(0xa11ce);
    // Bob's id: the sender of the error answering a message sent to nobody.
    let (status, r) = phase1(
        addr,
        &envelope(
            1,
            &me,
            &v4(0xdead),
            "ping",
            serde_json::json!({"nonce": "n"}),
        ),
    )
    .await;
    assert_eq!(status, 404, "{r}");
    assert_eq!(r["payload"]["error_code"], "AGENT_NOT_FOUND");
    assert_eq!(r["to"], me.as_str());
    let bob_id = r["from"].as_str().unwrap().to_string();

    let assignment = |n: u64, task: &str, kind: &str| {
        envelope(
            n,
            &me,
            &bob_id,
            "task_assignment",
            serde_json::json!({
                "task_id": task, "task_type": kind, "title": "Dinner on Friday",
                "description": "Find a time for dinner", "payload": {"proposed_date": "2026-11-27"},
            }),
        )
    };
    // (what, body, HTTP status, error code or the reply's type)
    let table: Vec<(&str, String, u16, &str)> = vec![
        (
            "ping",
            envelope(
                2,
                &me,
                &bob_id,
                "ping",
                serde_json::json!({"nonce": "abc", "echo": [1]}),
            ),
            200,
            "ping",
        ),
        ("not JSON", "{nope".into(), 400, "INVALID_MESSAGE_FORMAT"),
        (
            "wrong version",
            envelope(3, &me, &bob_id, "ping", serde_json::json!({"nonce": "n"}))
                .replace("1.0.0", "2.0.0"),
            400,
            "INVALID_MESSAGE_FORMAT",
        ),
        (
            "id not v4",
            envelope(4, &me, &bob_id, "ping", serde_json::json!({"nonce": "n"}))
                .replace(&v4(4), "msg-123"),
            400,
            "INVALID_MESSAGE_FORMAT",
        ),
        (
            "unknown type",
            envelope(5, &me, &bob_id, "gossip", serde_json::json!({})),
            400,
            "UNSUPPORTED_MESSAGE_TYPE",
        ),
        (
            "unknown task type",
            assignment(6, "t-1", "research"),
            400,
            "INVALID_TASK_TYPE",
        ),
        (
            "unknown payload field",
            envelope(
                7,
                &me,
                &bob_id,
                "ping",
                serde_json::json!({"nonce": "n", "x": 1}),
            ),
            400,
            "PAYLOAD_VALIDATION_FAILED",
        ),
        (
            "status of an unknown task",
            envelope(
                8,
                &me,
                &bob_id,
                "status_update",
                serde_json::json!({"task_id": "nope", "status": "in_progress"}),
            ),
            404,
            "TASK_NOT_FOUND",
        ),
        (
            "completion of an unknown task",
            envelope(
                9,
                &me,
                &bob_id,
                "task_completion",
                serde_json::json!({"task_id": "nope", "status": "completed", "result": {}}),
            ),
            404,
            "TASK_NOT_FOUND",
        ),
        (
            "an assignment",
            assignment(10, "t-dinner", "scheduling"),
            200,
            "status_update",
        ),
        (
            "the same, retried",
            assignment(10, "t-dinner", "scheduling"),
            200,
            "status_update",
        ),
        (
            "progress asked",
            envelope(
                11,
                &me,
                &bob_id,
                "status_update",
                serde_json::json!({"task_id": "t-dinner", "status": "in_progress"}),
            ),
            200,
            "status_update",
        ),
        (
            "completion acknowledged",
            envelope(
                12,
                &me,
                &bob_id,
                "task_completion",
                serde_json::json!({"task_id": "t-dinner", "status": "completed", "result": {}}),
            ),
            200,
            "status_update",
        ),
        (
            "an error acknowledged",
            envelope(
                13,
                &me,
                &bob_id,
                "error",
                serde_json::json!({"error_code": "TIMEOUT", "error_message": "slow"}),
            ),
            200,
            "error",
        ),
        (
            "cancelled",
            envelope(
                14,
                &me,
                &bob_id,
                "status_update",
                serde_json::json!({"task_id": "t-dinner", "status": "cancelled"}),
            ),
            200,
            "status_update",
        ),
    ];
    for (what, body, want_status, want) in table {
        let (status, r) = phase1(addr, &body).await;
        assert_eq!(status, want_status, "{what}: {r}");
        if want_status == 200 {
            assert_eq!(r["type"], want, "{what}: {r}");
            assert_eq!(r["from"], bob_id.as_str(), "{what}");
        } else {
            assert_eq!(r["type"], "error", "{what}: {r}");
            assert_eq!(r["payload"]["error_code"], want, "{what}: {r}");
        }
        match what {
            "ping" => assert_eq!(
                r["payload"],
                serde_json::json!({"nonce": "abc", "echo": [1]})
            ),
            "unknown task type" => assert_eq!(
                r["payload"]["details"]["supported_types"],
                serde_json::json!(["scheduling", "general"])
            ),
            "an assignment" | "the same, retried" => {
                assert_eq!(r["payload"]["task_id"], "t-dinner", "{r}");
                let threads = ctl(&hb, Request::Threads).await;
                assert_eq!(
                    threads.data.as_array().unwrap().len(),
                    1,
                    "{}",
                    threads.data
                );
            }
            "cancelled" => assert_eq!(r["payload"]["status"], "cancelled", "{r}"),
            _ => {}
        }
    }
    let threads = ctl(&hb, Request::Threads).await;
    let t = &threads.data[0];
    assert_eq!(t["state"], "DECLINED", "{t}");
    assert_eq!(t["peer"], format!("agent:p1-{me}@a2a.invalid"), "{t}");
    // A body over the cap: 413 before it is read whole, as seed 001's error; all 2 MiB
    // are written (the listener drains what follows its refusal before it closes).
    let (status, r) = phase1(addr, &"x".repeat(2 * 1024 * 1024)).await;
    assert_eq!(status, 413, "{r}");
    assert_eq!(r["type"], "error", "{r}");
    assert_eq!(r["payload"]["error_code"], "INVALID_MESSAGE_FORMAT", "{r}");
    let (status, r) = phase1_get(addr).await;
    assert_eq!(status, 405, "{r}");
    assert_eq!(r["payload"]["error_code"], "INVALID_MESSAGE_FORMAT", "{r}");
    bob.stop().await.unwrap();
}

/// The seed's task lifecycle (create → assign → update → complete) sent by the Phase-1
/// sender (`a2acp_core::bridge::phase1::sender` over `a2acp_runtime::phase1_sender`) to a real agent's
/// listener: the ping echo, an assignment opening one thread (the same message sent again,
/// as a retry is, opening no second), progress asked, the completion acknowledged, and
/// refusals ending the sending after one attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_phase1_sender_runs_the_task_lifecycle_against_an_agent() {
    use a2acp_core::bridge::phase1::envelope::{agent_id_of, ErrorCode, Payload, Uuid};
    use a2acp_core::bridge::phase1::sender::{compose, Outcome, Sender, SenderConfig};
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes { bob: hb, .. } = dinner_homes(dir.path(), &relay.url());
    let bob = bob_with_a2a(&hb, None, A2aLimits::default(), |_| {});
    let url = format!("http://{}", bob.a2a_addr().unwrap());
    // Bob's id as `a2acp phase1 id` makes it: from his public key.
    let key = a2acp_runtime::keys::load(&hb.key()).unwrap();
    let bob_id = agent_id_of(&key.public().to_bytes());
    let me = Uuid::parse_str(&v4(0xa11ce)).unwrap();
    let now = a2acp_runtime::now();
    let message = |n: u64, kind: &str, payload: serde_json::Value| {
        let m = compose(
            kind,
            payload,
            me,
            bob_id,
            Uuid::parse_str(&v4(n)).unwrap(),
            now,
        )
        .unwrap();
        Sender::new(&m, now, SenderConfig::default()).unwrap()
    };
    let acknowledged = |what: &str, o: &Outcome| -> a2acp_core::bridge::phase1::envelope::Message {
        match o {
            Outcome::Acknowledged {
                attempts: 1,
                status: 200,
                answer: Some(a),
            } => {
                assert_eq!(a.from, bob_id, "{what}");
                assert_eq!(a.to, me, "{what}");
                (**a).clone()
            }
            o => panic!("{what}: {o:?}"),
        }
    };
    let thread_count = || async {
        ctl(&hb, Request::Threads)
            .await
            .data
            .as_array()
            .unwrap()
            .len()
    };

    // ping: echoed with its nonce.
    let (o, _) = phase1_send(
        &url,
        message(1, "ping", serde_json::json!({"nonce": "n-1", "echo": [1]})),
    )
    .await;
    let a = acknowledged("ping", &o);
    assert!(
        matches!(&a.payload, Payload::Ping(p) if p.nonce == "n-1"),
        "{a:?}"
    );

    // create → assign: the assignment opens a thread; Bob's agent says where it stands.
    let assign = message(
        2,
        "task_assignment",
        serde_json::json!({
            "task_id": "t-dinner", "task_type": "scheduling", "title": "Dinner on Friday",
            "description": "Find a time for dinner", "payload": {"proposed_date": "2026-11-27"},
            "priority": "high",
        }),
    );
    let again = Sender::from_body(assign.body(), now, SenderConfig::default()).unwrap();
    let (o, _) = phase1_send(&url, assign).await;
    let a = acknowledged("assignment", &o);
    assert!(
        matches!(&a.payload, Payload::StatusUpdate(s) if s.task_id == "t-dinner"),
        "{a:?}"
    );
    assert_eq!(thread_count().await, 1);
    // The same message again (same bytes, same message_id, as a retry): no second thread.
    let (o, _) = phase1_send(&url, again).await;
    acknowledged("the assignment again", &o);
    assert_eq!(thread_count().await, 1);

    // update: a status_update about the task is answered with its progress.
    let (o, _) = phase1_send(
        &url,
        message(
            3,
            "status_update",
            serde_json::json!({"task_id": "t-dinner", "status": "in_progress", "progress": 0.5}),
        ),
    )
    .await;
    let a = acknowledged("status_update", &o);
    assert!(
        matches!(&a.payload, Payload::StatusUpdate(s) if s.task_id == "t-dinner"),
        "{a:?}"
    );

    // complete: acknowledged.
    let (o, _) = phase1_send(
        &url,
        message(
            4,
            "task_completion",
            serde_json::json!({"task_id": "t-dinner", "status": "completed", "result": {"ok": true}}),
        ),
    )
    .await;
    acknowledged("task_completion", &o);

    // Refused, never retried: a task type Bob's agent does not take …
    let (o, seen) = phase1_send(
        &url,
        message(
            5,
            "task_assignment",
            serde_json::json!({"task_id": "t-2", "task_type": "research", "title": "R",
                               "description": "d", "payload": {}}),
        ),
    )
    .await;
    match &o {
        Outcome::Refused {
            attempts: 1,
            status: 400,
            code: ErrorCode::InvalidTaskType,
            answer,
            ..
        } => assert!(
            matches!(&answer.payload, Payload::Error(e) if e.details.as_ref().is_some_and(|d| d.contains_key("supported_types"))),
            "{answer:?}"
        ),
        o => panic!("{o:?}"),
    }
    assert_eq!(phase1_attempts(&seen), 1, "{seen:?}");
    assert_eq!(thread_count().await, 1);
    // … a task it never got …
    let (o, seen) = phase1_send(
        &url,
        message(
            6,
            "status_update",
            serde_json::json!({"task_id": "nope", "status": "in_progress"}),
        ),
    )
    .await;
    assert!(
        matches!(
            o,
            Outcome::Refused {
                code: ErrorCode::TaskNotFound,
                status: 404,
                ..
            }
        ),
        "{o:?}"
    );
    assert_eq!(phase1_attempts(&seen), 1);
    // … and an agent that is not there: the error comes from the one that is.
    let nobody = Uuid::parse_str(&v4(0xdead)).unwrap();
    let m = compose(
        "ping",
        serde_json::json!({"nonce": "n"}),
        me,
        nobody,
        Uuid::parse_str(&v4(7)).unwrap(),
        now,
    )
    .unwrap();
    let (o, seen) = phase1_send(&url, Sender::new(&m, now, SenderConfig::default()).unwrap()).await;
    match &o {
        Outcome::Refused {
            code: ErrorCode::AgentNotFound,
            answer,
            ..
        } => assert_eq!(answer.from, bob_id),
        o => panic!("{o:?}"),
    }
    assert_eq!(phase1_attempts(&seen), 1);
    bob.stop().await.unwrap();
}

const CHILD_ENV: &str = "A2ACP_TEST_A2A_CHILD_HOME";

/// Not a test by itself: the body of the child process of `a_task_survives_kill_9` (Bob
/// with an A2A listener, its address written to `a2a.addr` in the home).
#[test]
fn child_a2a_agent() {
    let Some(home) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let home = Home::new(home);
        let h = bob_with_a2a(&home, None, A2aLimits::default(), |_| {});
        let addr = h.a2a_addr().unwrap().to_string();
        std::fs::write(home.dir().join("a2a.addr.tmp"), addr).unwrap();
        std::fs::rename(home.dir().join("a2a.addr.tmp"), home.dir().join("a2a.addr")).unwrap();
        let _ = h.wait().await;
    });
}

async fn child(home: &Home) -> (std::process::Child, SocketAddr) {
    let _ = std::fs::remove_file(home.dir().join("a2a.addr"));
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_a2a_agent",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, home.dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = eventually(20, "the child's A2A listener", || async {
        std::fs::read_to_string(home.dir().join("a2a.addr"))
            .ok()?
            .parse()
            .ok()
    })
    .await;
    (child, addr)
}

/// kill -9 of the agent loses nothing an A2A client was told: the task it was answered
/// is the task the restarted agent answers, and its user's consent prompt is open again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_survives_kill_9() {
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes { bob: hb, .. } = dinner_homes(dir.path(), &relay.url());
    let (mut bob, addr) = child(&hb).await;
    let send = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"k1","role":"ROLE_USER","parts":[{"text":"Dinner on Friday?"},{"data":{"proposed_date":"2026-11-27"}}]},"configuration":{"returnImmediately":true}}}"#;
    let r = raw(addr, &post(send, ""), Duration::from_secs(5)).await;
    let body: serde_json::Value =
        serde_json::from_str(r.split_once("\r\n\r\n").unwrap().1).expect("JSON");
    let task = body["result"]["task"].clone();
    let id = task["id"].as_str().unwrap().to_string();
    bob.kill().unwrap(); // SIGKILL
    bob.wait().unwrap();
    let (mut bob, addr) = child(&hb).await;
    let get = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{{"id":"{id}"}}}}"#);
    let r = raw(addr, &post(&get, ""), Duration::from_secs(5)).await;
    let body: serde_json::Value =
        serde_json::from_str(r.split_once("\r\n\r\n").unwrap().1).expect("JSON");
    let again = &body["result"];
    assert_eq!(again["id"], task["id"], "{body}");
    assert_eq!(again["contextId"], task["contextId"]);
    assert_eq!(again["history"], task["history"]);
    assert_eq!(again["status"]["state"], task["status"]["state"]);
    let prompts = ctl(&hb, Request::Prompts).await;
    assert_eq!(
        prompts.data[0]["thread_id"],
        id.as_str(),
        "{}",
        prompts.data
    );
    bob.kill().unwrap();
    bob.wait().unwrap();
}
