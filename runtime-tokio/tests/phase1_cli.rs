//! `a2acp phase1 id` and `a2acp phase1 send` on the real binary, as a person types them:
//! an agent run with `--a2a-listen` (no relay reachable: the listener does not need one)
//! acknowledges a ping and refuses a task type it does not do; a receiver that is not
//! there is tried three times; a payload the seed refuses never leaves. Exit statuses
//! and what each stream says are the command's contract (0 acknowledged, 2 refused, 3
//! gave up).

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_a2acp");

/// The agent process, killed when the test ends.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn a2acp(home: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run a2acp")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn is_uuid_v4(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-')
        && b[14] == b'4'
        && b"89ab".contains(&b[19])
        && s.chars()
            .enumerate()
            .all(|(i, c)| [8, 13, 18, 23].contains(&i) || c.is_ascii_hexdigit())
}

#[test]
fn phase1_commands_on_the_real_binary() {
    let dir = tempfile::tempdir().unwrap();
    let alice = dir.path().join("alice");
    let bob = dir.path().join("bob");

    // No agent yet: `phase1 id` says so.
    let o = a2acp(&bob, &["phase1", "id"]);
    assert!(!o.status.success());
    assert!(!text(&o.stderr).is_empty());

    for (home, name) in [(&alice, "alice"), (&bob, "bob")] {
        let o = a2acp(
            home,
            &[
                "agent",
                "init",
                "--address",
                &format!("agent:{name}@localhost"),
                "--relay",
                "ws://127.0.0.1:9",
                "--name",
                name,
                "--timezone",
                "Europe/London",
            ],
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let o = a2acp(&bob, &["phase1", "id"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let bob_id = text(&o.stdout).trim().to_string();
    assert!(is_uuid_v4(&bob_id), "{bob_id:?}");
    assert_eq!(
        text(&a2acp(&bob, &["phase1", "id"]).stdout).trim(),
        bob_id,
        "stable: made from the key"
    );
    let alice_id = text(&a2acp(&alice, &["phase1", "id"]).stdout)
        .trim()
        .to_string();
    assert!(is_uuid_v4(&alice_id) && alice_id != bob_id);

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _bob_agent = Kid(Command::new(BIN)
        .arg("--home")
        .arg(&bob)
        .args(["agent", "run", "--no-prompt", "--a2a-listen", &listen])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap());
    let url = format!("http://{listen}");
    let send = |kind: &str, payload: &str| {
        a2acp(
            &alice,
            &[
                "phase1",
                "send",
                &url,
                "--to",
                &bob_id,
                "--type",
                kind,
                "--payload",
                payload,
            ],
        )
    };

    // A ping comes back with its nonce, from Bob to Alice (her id by default).
    let end = Instant::now() + Duration::from_secs(30);
    let o = loop {
        let o = send("ping", r#"{"nonce": "n-1", "echo": {"x": 1}}"#);
        if o.status.success() || Instant::now() > end {
            break o;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(answer["type"], "ping", "{answer}");
    assert_eq!(answer["payload"]["nonce"], "n-1", "{answer}");
    assert_eq!(answer["from"], bob_id.as_str());
    assert_eq!(answer["to"], alice_id.as_str());

    // A task type Bob's agent does not do: refused after one attempt, exit 2, the code named.
    let o = send(
        "task_assignment",
        r#"{"task_id": "t-1", "task_type": "research", "title": "Research Ethereum scaling",
            "description": "Investigate current scaling solutions", "payload": {"query": "L2"}}"#,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("INVALID_TASK_TYPE"), "{err}");
    assert!(!err.contains("attempt 2"), "never retried: {err}");
    let answer: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(answer["payload"]["error_code"], "INVALID_TASK_TYPE");
    assert_eq!(
        answer["payload"]["details"]["supported_types"],
        serde_json::json!(["scheduling", "general"])
    );

    // A payload the seed refuses (an unknown field) is refused here, before it leaves.
    let o = send("ping", r#"{"nonce": "n-2", "extra": true}"#);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("extra"), "{}", text(&o.stderr));
    assert!(
        o.stdout.is_empty(),
        "nothing was answered: nothing was sent"
    );

    // Nobody there: three attempts, 1 s then 2 s apart, then exit 3.
    let gone = format!("http://127.0.0.1:{}", free_port());
    let started = Instant::now();
    let o = a2acp(
        &alice,
        &[
            "phase1",
            "send",
            &gone,
            "--to",
            &bob_id,
            "--type",
            "ping",
            "--payload",
            r#"{"nonce": "n-3"}"#,
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(started.elapsed() >= Duration::from_secs(3), "the waits");
    let err = text(&o.stderr);
    assert!(err.contains("next attempt in 1 s"), "{err}");
    assert!(err.contains("next attempt in 2 s"), "{err}");
    assert!(err.contains("gave up after 3 attempts"), "{err}");
    assert!(!err.contains("attempt 4"), "{err}");
}
