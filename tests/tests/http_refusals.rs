//! Refusals a client can read (issue 27 point 1): every HTTP listener — the A2A listener
//! (JSON-RPC, HTTP+JSON, the Phase-1 route), the MCP bridge over streamable HTTP and the
//! relay's upgrade path (on tokio and on smol) — answers a request it refuses while the
//! client is still sending its body, and httpx's async client (the one the official A2A
//! and MCP SDKs use, `tests/http/refusals.py`) reads that answer on every try: 2 MiB in one
//! go and 2 MiB in chunks, 50 tries each. Then the bounds of that courtesy: a client that
//! goes on sending after its refusal is cut after the linger's bytes or its time.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use a2acp_runtime::a2a::A2aLimits;
use a2acp_runtime::home::Home;
use a2acp_runtime::linger;
use a2acp_tests::attacks::{send_on, After};
use a2acp_tests::*;
use a2acp_tokio::mcp::McpOptions;
use a2acp_tokio::mcp_http::{self, McpHttpLimits, McpHttpOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "test-token-0123456789";
const TRIES: &str = "50";

/// The a2a venv's interpreter (it has httpx); the tests that call it are ignored without
/// `--run-ignored`.
fn python() -> PathBuf {
    venv_python("a2a", "A2ACP_A2A_PYTHON")
}

/// One listener's case: what is sent where, and the refusal it must read.
struct Case {
    what: &'static str,
    url: String,
    status: u16,
    args: Vec<String>,
}

impl Case {
    fn new(what: &'static str, url: String, status: u16) -> Case {
        Case {
            what,
            url,
            status,
            args: Vec::new(),
        }
    }

    fn token(mut self) -> Case {
        self.args.push("--header".into());
        self.args.push(format!("authorization: Bearer {TOKEN}"));
        self
    }

    /// A slow body instead: 64 KiB in 4 KiB chunks 50 ms apart (0.8 s, past a body
    /// deadline of 300 ms), 5 tries.
    fn slow(mut self) -> Case {
        for a in [
            "--bytes",
            "65536",
            "--chunk",
            "4096",
            "--chunk-delay-ms",
            "50",
            "--tries",
            "5",
            "--modes",
            "chunked",
        ] {
            self.args.push(a.into());
        }
        self
    }

    /// The body must be seed 001's error envelope with this code.
    fn envelope(mut self, code: &str) -> Case {
        self.args.push("--envelope".into());
        self.args.push(code.into());
        self
    }
}

/// Runs `tests/http/refusals.py` for every case, prints what each read, then asserts that
/// every try of every case read its refusal.
async fn every_try_reads(python: &PathBuf, cases: Vec<Case>) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("http/refusals.py");
    let mut failed = Vec::new();
    for c in cases {
        let t = Instant::now();
        let out = tokio::process::Command::new(python)
            .arg(&script)
            .arg(&c.url)
            .args(["--status", &c.status.to_string(), "--tries", TRIES])
            .args(&c.args)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(120), out)
            .await
            .expect("the client script ends")
            .expect("run the client script");
        assert!(
            out.status.success(),
            "{}: {}",
            c.what,
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("the script's report");
        eprintln!(
            "{}: one go {}/{} {}, chunked {}/{} {} ({:.1} s)",
            c.what,
            report["one_go"]["read"],
            report["one_go"]["tries"],
            report["one_go"]["errors"],
            report["chunked"]["read"],
            report["chunked"]["tries"],
            report["chunked"]["errors"],
            t.elapsed().as_secs_f64()
        );
        for mode in ["one_go", "chunked"] {
            if !report[mode].is_null() && report[mode]["read"] != report[mode]["tries"] {
                failed.push(format!("{} ({mode}): {}", c.what, report[mode]));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "tries that did not read the refusal: {failed:#?}"
    );
}

/// The MCP bridge over streamable HTTP (bearer token) on a free loopback port: its address.
fn mcp_listener(home: &Home, limits: McpHttpLimits) -> SocketAddr {
    let listener = mcp_http::bind("127.0.0.1:0", Some(TOKEN)).expect("bind the MCP listener");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(mcp_http::serve(
        listener,
        McpHttpOptions {
            bridge: McpOptions {
                socket: home.socket(),
                host_answers: false,
            },
            token: Some(TOKEN.into()),
            limits,
        },
    ));
    addr
}

/// The A2A listener's two bindings and its Phase-1 route: 2 MiB over the 1 MiB cap
/// (413), without the token (401), a body slower than its deadline (408); on the Phase-1
/// route the answer is seed 001's `INVALID_MESSAGE_FORMAT` error envelope every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs httpx from the official a2a-sdk's venv: bash .ci/test-deps"]
async fn an_async_client_reads_every_a2a_refusal() {
    let python = python();
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes {
        alice: ha, bob: hb, ..
    } = dinner_homes(dir.path(), &relay.url());
    let bob = bob_with_a2a(&hb, Some(TOKEN), A2aLimits::default(), |_| {});
    let a = bob.a2a_addr().expect("listening");
    // Another listener whose body deadline a slow client passes.
    let slow = bob_with_a2a(
        &ha,
        Some(TOKEN),
        A2aLimits {
            body_timeout: Duration::from_millis(300),
            ..A2aLimits::default()
        },
        |_| {},
    );
    let s = slow.a2a_addr().expect("listening");
    let cases = vec![
        Case::new("A2A JSON-RPC, a slow body", format!("http://{s}/"), 408)
            .token()
            .slow(),
        Case::new(
            "Phase 1, a slow body",
            format!("http://{s}/a2a/messages"),
            408,
        )
        .token()
        .slow()
        .envelope("INVALID_MESSAGE_FORMAT"),
        Case::new("A2A JSON-RPC, over the cap", format!("http://{a}/"), 413).token(),
        Case::new("A2A JSON-RPC, no token", format!("http://{a}/"), 401),
        Case::new(
            "A2A HTTP+JSON, over the cap",
            format!("http://{a}/message:send"),
            413,
        )
        .token(),
        Case::new(
            "Phase 1, over the cap",
            format!("http://{a}/a2a/messages"),
            413,
        )
        .token()
        .envelope("INVALID_MESSAGE_FORMAT"),
        Case::new("Phase 1, no token", format!("http://{a}/a2a/messages"), 401)
            .envelope("INVALID_MESSAGE_FORMAT"),
    ];
    every_try_reads(&python, cases).await;
    bob.stop().await.unwrap();
    slow.stop().await.unwrap();
}

/// The MCP bridge over streamable HTTP: over the cap (413), without the token (401), on
/// a path that is not `/mcp` (404), a body slower than its deadline (408).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs httpx from the official a2a-sdk's venv: bash .ci/test-deps"]
async fn an_async_client_reads_every_mcp_http_refusal() {
    let python = python();
    let dir = tmp();
    let home = Home::new(dir.path().join("home"));
    let a = mcp_listener(&home, McpHttpLimits::default());
    let s = mcp_listener(
        &home,
        McpHttpLimits {
            body_timeout: Duration::from_millis(300),
            ..McpHttpLimits::default()
        },
    );
    let cases = vec![
        Case::new("MCP, a slow body", format!("http://{s}/mcp"), 408)
            .token()
            .slow(),
        Case::new("MCP, over the cap", format!("http://{a}/mcp"), 413).token(),
        Case::new("MCP, no token", format!("http://{a}/mcp"), 401),
        Case::new("MCP, wrong path", format!("http://{a}/nope"), 404).token(),
    ];
    every_try_reads(&python, cases).await;
}

per_runtime!(
    #[ignore = "needs httpx from the official a2a-sdk's venv: bash .ci/test-deps"]
    an_async_client_reads_the_relays_refusal
);

/// The relay's upgrade path: a `POST` with a body is not an upgrade (404).
async fn an_async_client_reads_the_relays_refusal(rt: Runtime) {
    let python = python();
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let a = relay.addr();
    let cases = vec![Case::new("relay, a POST", format!("http://{a}/"), 404)];
    every_try_reads(&python, cases).await;
    relay.stop(true).await;
}

/// Sends `head` to `addr`, reads the refusal (`want`: its status line's start), then goes
/// on sending as `after` says until the listener cuts the connection: bytes written after
/// the refusal (`Floods`) or milliseconds from the refusal to the cut (`Trickles`).
async fn cut_after_refusal(addr: SocketAddr, head: &str, want: &str, after: After) -> u64 {
    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut r, mut w) = s.into_split();
    w.write_all(head.as_bytes()).await.unwrap();
    let mut got = vec![0u8; want.len()];
    tokio::time::timeout(Duration::from_secs(5), r.read_exact(&mut got))
        .await
        .expect("the refusal comes at once")
        .expect("the refusal is read");
    assert_eq!(String::from_utf8_lossy(&got), want);
    let refused = Instant::now();
    // Keep reading (the rest of the answer, then the end) so the client's side never
    // fills up; the cut shows on the writes.
    tokio::spawn(async move {
        let mut sink = vec![0u8; 4096];
        while let Ok(n) = r.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    });
    send_on(&mut w, after, refused, "the listener").await
}

/// The linger's bounds hold on the agent's listeners: a body that never ends is cut once
/// [`linger::MAX_BYTES`] were drained, a slow one [`linger::TIME`] after its refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_on_after_its_refusal_is_cut() {
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes { bob: hb, .. } = dinner_homes(dir.path(), &relay.url());
    let bob = bob_with_a2a(&hb, Some(TOKEN), A2aLimits::default(), |_| {});
    let a2a = bob.a2a_addr().expect("listening");
    let mcp = mcp_listener(&Home::new(dir.path().join("mcp")), McpHttpLimits::default());
    let huge = |path: &str| {
        format!("POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: 1000000000\r\n\r\n")
    };
    for (what, addr, path) in [
        ("A2A", a2a, "/"),
        ("Phase 1", a2a, "/a2a/messages"),
        ("MCP", mcp, "/mcp"),
    ] {
        let n = cut_after_refusal(addr, &huge(path), "HTTP/1.1 413", After::Floods).await;
        // Drained up to the cap, plus what the two sockets' buffers held.
        assert!(
            (linger::MAX_BYTES..linger::MAX_BYTES + (32 << 20)).contains(&n),
            "{what}: {n} bytes written before the cut"
        );
        let ms = cut_after_refusal(addr, &huge(path), "HTTP/1.1 413", After::Trickles).await;
        let cap = linger::TIME.as_millis() as u64;
        assert!(
            (cap / 2..cap + 3000).contains(&ms),
            "{what}: cut {ms} ms after the refusal"
        );
        eprintln!("{what}: a flood cut after {n} bytes, a trickle after {ms} ms");
    }
    bob.stop().await.unwrap();
}

per_runtime!(a_client_sending_on_after_the_relays_refusal_is_cut);

/// The same bounds on the relay's upgrade path.
async fn a_client_sending_on_after_the_relays_refusal_is_cut(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let head = "POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 1000000000\r\n\r\n";
    let a = relay.addr();
    let n = cut_after_refusal(a, head, "HTTP/1.1 404", After::Floods).await;
    assert!(
        (linger::MAX_BYTES..linger::MAX_BYTES + (32 << 20)).contains(&n),
        "{n} bytes written before the cut"
    );
    let ms = cut_after_refusal(a, head, "HTTP/1.1 404", After::Trickles).await;
    let cap = linger::TIME.as_millis() as u64;
    assert!(
        (cap / 2..cap + 3000).contains(&ms),
        "cut {ms} ms after the refusal"
    );
    // A WebSocket upgrade of another version is told the one the relay speaks.
    let r = raw_http(
        a,
        b"GET / HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-version: 8\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 426 "), "{r}");
    assert!(r.contains("sec-websocket-version: 13\r\n"), "{r}");
    relay.stop(true).await;
}
