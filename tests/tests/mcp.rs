//! The MCP bridge (§17) against the official MCP Python SDK (`mcp` on PyPI, installed by
//! `.ci/run` into `target/mcp-venv`): `tests/mcp/negotiate.py` is an MCP host for Alice and
//! one for Bob, each talking to its person's running agent through `a2acp mcp` on stdio.
//! Alice's host starts the dinner; each host answers the agent's prompts by asking its
//! person (MCP elicitation); a host that cannot ask its person is refused and the prompt
//! stays open; the person refusing to loosen a permission changes nothing; subscribed
//! hosts hear of prompts and threads; both threads end COMPLETED — on agents running on
//! tokio and on smol. With `--host-answers`, a host without elicitation answers with the
//! call's arguments.

use std::path::PathBuf;
use std::process::Stdio;

use a2acp_runtime::control::Request;
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::next_friday;
use a2acp_tests::*;
use a2acp_tokio::mcp::McpOptions;
use a2acp_tokio::mcp_http::{self, McpHttpLimits, McpHttpOptions};

per_runtime!(
    #[ignore = "needs the official mcp SDK: bash .ci/test-deps"]
    an_mcp_host_negotiates_a_dinner_and_its_person_answers_the_prompts
);

/// The mcp venv's interpreter (the tests that call it are ignored without `--run-ignored`).
fn python() -> PathBuf {
    venv_python("mcp", "A2ACP_MCP_PYTHON")
}

fn bridge(home: &Home) -> String {
    serde_json::to_string(&[
        env!("CARGO_BIN_EXE_mcp_bridge"),
        "--home",
        home.dir().to_str().unwrap(),
    ])
    .unwrap()
}

async fn an_mcp_host_negotiates_a_dinner_and_its_person_answers_the_prompts(rt: Runtime) {
    let python = python();
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let homes = dinner_homes(dir.path(), &relay.url());
    let alice = rt.agent(&homes.alice, "alice", None);
    let bob = rt.agent(&homes.bob, "bob", None);
    wait_online(&alice).await;
    wait_online(&bob).await;
    let report = hosts_negotiate(&python, &homes, bridge(&homes.alice), bridge(&homes.bob)).await;
    assert_eq!(report["protocol"], "2025-11-25");
    assert_eq!(report["refused_without_elicitation"], true);
    dinner_done_through_mcp(&homes, &report).await;
    alice.stop().await;
    bob.stop().await;
}

/// The same negotiation with both hosts reaching their bridge over streamable HTTP
/// (`a2acp mcp --listen`): Alice's bridge asks for a bearer token, Bob's is loopback-only
/// without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official mcp SDK: bash .ci/test-deps"]
async fn an_mcp_host_over_streamable_http_negotiates_a_dinner() {
    let python = python();
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let homes = dinner_homes(dir.path(), &relay.url());
    let alice = Runtime::Tokio.agent(&homes.alice, "alice", None);
    let bob = Runtime::Tokio.agent(&homes.bob, "bob", None);
    wait_online(&alice).await;
    wait_online(&bob).await;
    let token = "alice-mcp-token-0123456789";
    let alice_url = http_bridge(&homes.alice, Some(token), McpHttpLimits::default());
    let bob_url = http_bridge(&homes.bob, None, McpHttpLimits::default());
    let report = hosts_negotiate(
        &python,
        &homes,
        serde_json::json!({"url": alice_url, "token": token}).to_string(),
        serde_json::json!({"url": bob_url, "token": null}).to_string(),
    )
    .await;
    assert_eq!(report["protocol"], "2025-11-25");
    assert_eq!(report["refused_without_elicitation"], true);
    dinner_done_through_mcp(&homes, &report).await;
    alice.stop().await;
    bob.stop().await;
}

/// Serves the agent of `home` over streamable HTTP on a free loopback port; its URL.
fn http_bridge(home: &Home, token: Option<&str>, limits: McpHttpLimits) -> String {
    let listener = mcp_http::bind("127.0.0.1:0", token).expect("bind the MCP listener");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(mcp_http::serve(
        listener,
        McpHttpOptions {
            bridge: McpOptions {
                socket: home.socket(),
                host_answers: false,
            },
            token: token.map(String::from),
            limits,
        },
    ));
    mcp_http::endpoint(addr)
}

/// Runs `tests/mcp/negotiate.py` with the two bridges; its report.
async fn hosts_negotiate(
    python: &std::path::Path,
    homes: &DinnerHomes,
    alice: String,
    bob: String,
) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/negotiate.py");
    let date = next_friday(a2acp_runtime::now());
    let run = tokio::process::Command::new(python)
        .arg(&script)
        .arg(alice)
        .arg(bob)
        .arg(homes.bob_cfg.address.to_string())
        .arg(&date)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(150), run)
        .await
        .expect("the MCP host finished within 150 s")
        .expect("run the MCP host");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the MCP host failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("{}")).expect("the host's report")
}

/// What the agents say, read without MCP: completed on both sides, every prompt answered
/// by a person, Alice's permissions narrowed but never loosened.
async fn dinner_done_through_mcp(homes: &DinnerHomes, report: &serde_json::Value) {
    let thread_id = report["thread_id"].as_str().unwrap().to_string();
    for home in [&homes.alice, &homes.bob] {
        let r = ctl(
            home,
            Request::Thread {
                id: thread_id.clone(),
            },
        )
        .await;
        assert!(r.ok, "{r:?}");
        assert_eq!(r.data["state"], "COMPLETED", "{}", r.data);
        let r = ctl(home, Request::Prompts).await;
        assert_eq!(r.data, serde_json::json!([]), "prompts left open");
    }
    let perms = ctl(&homes.alice, Request::Permissions).await;
    let text = perms.data.to_string();
    assert!(text.contains("budget_range"), "{text}");
    assert!(
        !text.contains("\"health\":\"always_share\""),
        "a refused permission was set: {text}"
    );
}

/// A host the person declared shows them every tool call (`--host-answers`): a host
/// without elicitation then answers with the call's arguments — and without them is told
/// to give them.
const HOST_ANSWERS: &str = r#"
import json, sys, anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main(cmd):
    async with stdio_client(StdioServerParameters(command=cmd[0], args=cmd[1:])) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            out = {}
            for name, args in [
                ("answer", {"prompt_id": 99}),
                ("answer", {"prompt_id": 99, "args": ["confirm"]}),
                ("set_permission", {"field": "transport_mode", "tier": "always_share"}),
            ]:
                res = await s.call_tool(name, args)
                out[f"{name}{len(args)}"] = [bool(res.is_error), " ".join(c.text for c in res.content)]
            print(json.dumps(out))

anyio.run(main, json.loads(sys.argv[1]))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official mcp SDK: bash .ci/test-deps"]
async fn with_host_answers_the_call_carries_the_answer() {
    let python = python();
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes { alice: ha, .. } = dinner_homes(dir.path(), &relay.url());
    let alice = Runtime::Tokio.agent(&ha, "alice", None);
    wait_online(&alice).await;
    let mut cmd: Vec<String> = serde_json::from_str(&bridge(&ha)).unwrap();
    cmd.push("--host-answers".into());
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::process::Command::new(&python)
            .arg("-c")
            .arg(HOST_ANSWERS)
            .arg(serde_json::to_string(&cmd).unwrap())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the host finished within 60 s")
    .expect("run the host");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    // No answer in the call: the bridge asks for it instead of asking the person.
    assert_eq!(r["answer1"][0], true);
    assert!(r["answer1"][1].as_str().unwrap().contains("args"), "{r}");
    // The answer in the call reaches the agent (which has no prompt 99).
    assert_eq!(r["answer2"][0], true);
    assert!(
        !r["answer2"][1].as_str().unwrap().contains("elicitation"),
        "{r}"
    );
    // A loosening goes through without a question.
    assert_eq!(r["set_permission2"][0], false, "{r}");
    let perms = ctl(&ha, Request::Permissions).await.data;
    let tier = |t: &str| perms["tiers"][t].to_string();
    assert!(tier("always_share").contains("transport_mode"), "{perms}");
    assert!(!tier("ask_first").contains("transport_mode"), "{perms}");
    alice.stop().await;
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"attacker","version":"1"}}}"#;

/// A POST to the MCP endpoint with `extra` header lines (each ending in CRLF).
fn mcp_post(body: &str, extra: &str) -> Vec<u8> {
    format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nconnection: close\r\ncontent-length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn status(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn session_id(response: &str) -> Option<String> {
    response.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_string())
    })
}

/// `a2acp mcp --listen` against hostile clients: no or a wrong token, a browser's
/// `Origin`, a rebound `Host`, bodies over the cap (declared and chunked), a head that
/// never ends, a body that never comes, more sessions than the cap (and the place given
/// back when one is closed), a session that goes idle, and a non-loopback address
/// without a token. No agent is needed: the door answers before the bridge is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_http_listener_withstands_hostile_clients() {
    use std::time::Duration;
    let dir = tmp();
    let home = Home::resolve(Some(dir.path()));
    let short = Duration::from_secs(1);
    let limits = McpHttpLimits {
        max_body: 4096,
        header_timeout: short,
        body_timeout: short,
        max_connections: 8,
        max_sessions: 2,
        session_idle: Duration::from_secs(2),
        init_timeout: Duration::from_secs(2),
    };
    let token = "a-token-of-twenty-chars";
    let url = http_bridge(&home, Some(token), limits);
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let auth = format!("authorization: Bearer {token}\r\n");
    let wait = Duration::from_secs(3);

    // Who may come in.
    let r = raw_http(addr, &mcp_post(INITIALIZE, ""), wait).await;
    assert_eq!(status(&r), 401, "{r}");
    assert!(
        r.to_ascii_lowercase().contains("www-authenticate: bearer"),
        "{r}"
    );
    let r = raw_http(
        addr,
        &mcp_post(
            INITIALIZE,
            "authorization: Bearer a-token-of-twenty-charX\r\n",
        ),
        wait,
    )
    .await;
    assert_eq!(status(&r), 401, "{r}");
    let r = raw_http(
        addr,
        &mcp_post(
            INITIALIZE,
            &format!("{auth}origin: http://evil.example\r\n"),
        ),
        wait,
    )
    .await;
    assert_eq!(status(&r), 403, "a browser's request: {r}");
    let r = raw_http(
        addr,
        format!("GET /other HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n{auth}\r\n")
            .as_bytes(),
        wait,
    )
    .await;
    assert_eq!(status(&r), 404, "{r}");

    // Bodies over the cap: declared, then chunked past it.
    let big = format!("{{\"x\":\"{}\"}}", "a".repeat(8000));
    let r = raw_http(addr, &mcp_post(&big, &auth), wait).await;
    assert_eq!(status(&r), 413, "{r}");
    let chunked = format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nconnection: close\r\ntransfer-encoding: chunked\r\n{auth}\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
        big.len()
    );
    let r = raw_http(addr, chunked.as_bytes(), wait).await;
    assert_eq!(status(&r), 413, "{r}");

    // A head that never ends is cut at the header deadline; a body that never comes is 408.
    let started = std::time::Instant::now();
    let r = raw_http(
        addr,
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the head deadline did not fire: {r}"
    );
    let r = raw_http(
        addr,
        format!("POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n{auth}\r\n{{").as_bytes(),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status(&r), 408, "{r}");

    // Sessions: two open, the third is refused until one is closed.
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = raw_http(addr, &mcp_post(INITIALIZE, &auth), wait).await;
        assert_eq!(status(&r), 200, "{r}");
        ids.push(session_id(&r).expect("a session id"));
    }
    let r = raw_http(addr, &mcp_post(INITIALIZE, &auth), wait).await;
    assert_eq!(status(&r), 429, "{r}");
    let delete = format!(
        "DELETE /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\nmcp-session-id: {}\r\n{auth}\r\n",
        ids[0]
    );
    let r = raw_http(addr, delete.as_bytes(), wait).await;
    assert_eq!(
        status(&r),
        200,
        "a session ended (the SDK takes 200 or 204): {r}"
    );
    let r = raw_http(addr, &mcp_post(INITIALIZE, &auth), wait).await;
    assert_eq!(
        status(&r),
        200,
        "the closed session's place is given back: {r}"
    );

    // Idle sessions expire, and their places come back.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let r = raw_http(
        addr,
        &mcp_post(
            ping,
            &format!(
                "{auth}mcp-session-id: {}\r\nmcp-protocol-version: 2025-11-25\r\n",
                ids[1]
            ),
        ),
        wait,
    )
    .await;
    assert_eq!(status(&r), 404, "an expired session: {r}");
    for _ in 0..2 {
        let r = raw_http(addr, &mcp_post(INITIALIZE, &auth), wait).await;
        assert_eq!(status(&r), 200, "{r}");
    }

    // Loopback without a token: a rebound Host is refused.
    let open = http_bridge(&home, None, limits);
    let open: std::net::SocketAddr = open
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let rebound = String::from_utf8(mcp_post(INITIALIZE, ""))
        .unwrap()
        .replace("host: 127.0.0.1", "host: evil.example");
    let r = raw_http(open, rebound.as_bytes(), wait).await;
    assert_eq!(status(&r), 403, "a rebound host: {r}");
    let r = raw_http(open, &mcp_post(INITIALIZE, ""), wait).await;
    assert_eq!(status(&r), 200, "{r}");

    // Off loopback only with a token.
    let e = mcp_http::bind("0.0.0.0:0", None).unwrap_err();
    assert!(e.contains("--token-file"), "{e}");
    let e = mcp_http::bind("127.0.0.1:0", Some("short")).unwrap_err();
    assert!(e.contains("16 characters"), "{e}");
}
