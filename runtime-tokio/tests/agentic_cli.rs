//! `a2acp agent run --agentic-listen` as a person runs it, the real binary: the service
//! answers on the address given (the descriptor says L3, a deposit is stored and pulled
//! back); a non-loopback address without a token file is refused with the reason; the
//! tokens of `--agentic-token-file` stand for their actors; the agent stops on SIGTERM.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_a2acp");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http(port: u16, req: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out.get(9..12)?.parse().ok()?;
    Some((status, out.split_once("\r\n\r\n")?.1.to_string()))
}

fn get(port: u16, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    http(
        port,
        &format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{auth}\r\n"),
    )
}

fn post(port: u16, path: &str, body: &str, token: Option<&str>) -> Option<(u16, String)> {
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    http(
        port,
        &format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{auth}content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
}

struct Killed(std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn init(home: &std::path::Path) {
    let out = Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args([
            "agent",
            "init",
            "--address",
            "agent:alice@localhost",
            "--relay",
            "ws://127.0.0.1:9",
            "--offline",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

fn run(home: &std::path::Path, args: &[&str]) -> Killed {
    Killed(
        Command::new(BIN)
            .arg("--home")
            .arg(home)
            .args(["agent", "run", "--no-prompt"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

fn wait_up(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if get(port, "/v1/conformance", None).is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the service did not answer on port {port}");
}

#[test]
fn the_binary_serves_the_agentic_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("alice");
    init(&home);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = run(&home, &["--agentic-listen", &listen]);
    wait_up(port);
    let (st, body) = get(port, "/v1/conformance", None).unwrap();
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("\"conformance_level\":\"L3\""), "{body}");
    let pkg = r#"{"package_id":"pkg_cli_1","project_id":"notes","relay_version":"0.1","title":"From the CLI test","status":"complete","package_type":"standard","review_type":"none","created_at":"2026-11-28T10:00:00Z","created_by":{"id":"me","type":"human"}}"#;
    let (st, body) = post(port, "/v1/projects/notes/packages", pkg, None).unwrap();
    assert_eq!(st, 201, "{body}");
    let (st, body) = get(port, "/v1/packages/pkg_cli_1", None).unwrap();
    assert_eq!(st, 200, "{body}");
    assert!(home.join("agentic.db").exists());
}

#[test]
fn off_loopback_it_needs_tokens_and_each_token_is_one_actor() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("alice");
    init(&home);
    let port = free_port();
    let out = Command::new(BIN)
        .arg("--home")
        .arg(&home)
        .args(["agent", "run", "--no-prompt", "--agentic-listen"])
        .arg(format!("0.0.0.0:{port}"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("--agentic-token-file"), "{text}");

    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "jordan-token-0123456789 human:jordan notes\nbot-token-0123456789abc agent:helper\n",
    )
    .unwrap();
    let _agent = run(
        &home,
        &[
            "--agentic-listen",
            &format!("0.0.0.0:{port}"),
            "--agentic-token-file",
            tokens.to_str().unwrap(),
        ],
    );
    wait_up(port);
    let (st, _) = get(port, "/v1/projects", None).unwrap();
    assert_eq!(st, 401);
    let pkg = |by: &str| {
        format!(
            r#"{{"package_id":"pkg_tok_{by}","project_id":"notes","relay_version":"0.1","title":"t","status":"complete","package_type":"standard","review_type":"none","created_at":"2026-11-28T10:00:00Z","created_by":{{"id":"{by}","type":"human"}}}}"#
        )
    };
    let (st, body) = post(
        port,
        "/v1/projects/notes/packages",
        &pkg("jordan"),
        Some("jordan-token-0123456789"),
    )
    .unwrap();
    assert_eq!(st, 201, "{body}");
    // A token does not deposit as another actor.
    let (st, body) = post(
        port,
        "/v1/projects/notes/packages",
        &pkg("someone"),
        Some("jordan-token-0123456789"),
    )
    .unwrap();
    assert!((400..500).contains(&st), "{st} {body}");
    // A token of another project does not reach this one.
    let (st, body) = post(
        port,
        "/v1/projects/other/packages",
        &pkg("jordan").replace("\"notes\"", "\"other\""),
        Some("jordan-token-0123456789"),
    )
    .unwrap();
    assert!((400..500).contains(&st), "{st} {body}");
}
