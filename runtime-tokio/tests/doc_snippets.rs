//! The snippets of README.md and docs/ run as written, with the real `a2acp` binary as
//! subprocesses (the README's by-hand and federation sections are `walkthrough.rs`'s):
//! - every code block of README.md is one this suite or the walkthrough runs (a new block
//!   fails `every_readme_block_is_run` until a test runs it), and the demo it shows
//!   books the dinner;
//! - the Python snippets of docs/bridges.md, read from the file and run with the official
//!   SDKs' interpreters (`target/a2a-venv`, `target/mcp-venv`) against a running agent:
//!   the A2A clients (streaming, and non-streaming with polling) reach input-required
//!   while Bob answers his consent prompt at the terminal's commands, and the MCP host
//!   answers an open prompt with the person's words, typed on its standard input, through
//!   the elicitation form;
//! - the MCP bridge's `--listen` commands of docs/bridges.md and the door's rules stated
//!   there (loopback `Host`, no `Origin`, a token off loopback).
#![cfg(unix)]

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_a2acp");

/// The README's test command, as CI runs it.
const TEST_COMMAND: &str = "bash .ci/test-deps && cargo nextest run --workspace --run-ignored all";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn doc(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A code block of a Markdown file: its info string (empty for an indented block), its
/// text, and the heading it sits under.
#[derive(Debug)]
struct Block {
    info: String,
    text: String,
    section: String,
}

/// A line that opens or closes a fenced code block (not a code span that starts a line).
fn is_fence(line: &str) -> bool {
    line.starts_with("```") && !line.trim_start_matches('`').contains('`')
}

/// The fenced and indented (four spaces, after a blank line) code blocks of `md`.
fn blocks(md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut lines = md.lines().peekable();
    let mut prev_blank = true;
    while let Some(line) = lines.next() {
        if let Some(info) = line.strip_prefix("```").filter(|_| is_fence(line)) {
            let mut text = String::new();
            for l in lines.by_ref() {
                if is_fence(l) {
                    break;
                }
                text.push_str(l);
                text.push('\n');
            }
            out.push(Block {
                info: info.trim().to_string(),
                text,
                section: section.clone(),
            });
            prev_blank = false;
            continue;
        }
        if prev_blank && line.starts_with("    ") {
            let mut text = format!("{}\n", &line[4..]);
            while let Some(l) = lines.peek() {
                if let Some(rest) = l.strip_prefix("    ") {
                    text.push_str(rest);
                    text.push('\n');
                } else if l.trim().is_empty() {
                    // A blank line inside an indented block continues it only when the
                    // next line is indented too: collected with that line.
                    text.push('\n');
                } else {
                    break;
                }
                lines.next();
            }
            out.push(Block {
                info: String::new(),
                text: text.trim_end().to_string() + "\n",
                section: section.clone(),
            });
            prev_blank = true;
            continue;
        }
        if let Some(h) = line.strip_prefix('#') {
            section = h.trim_start_matches('#').trim().to_string();
        }
        prev_blank = line.trim().is_empty();
    }
    out
}

/// A child process killed (and reaped) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Splits a command line as a shell would (single and double quotes, no expansions).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut any = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, ' ') => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A directory where the documented commands run, as in a fresh checkout.
struct Place {
    dir: tempfile::TempDir,
}

impl Place {
    fn new() -> Place {
        let dir = tempfile::Builder::new()
            .prefix("a2acp-doc-")
            .tempdir()
            .unwrap();
        fs::create_dir_all(dir.path().join("examples")).unwrap();
        fs::copy(
            root().join("examples/dinner.json"),
            dir.path().join("examples/dinner.json"),
        )
        .unwrap();
        Place { dir }
    }

    fn cwd(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, args: &[String]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(self.cwd())
            .env_remove("A2ACP_HOME")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        c
    }

    /// A documented `a2acp …` line (comment after `#` removed) as arguments.
    fn args(line: &str) -> Vec<String> {
        let line = line.split("   #").next().unwrap_or(line).trim_end();
        let mut w = words(line);
        assert_eq!(w.remove(0), "a2acp", "{line}");
        w
    }

    fn run(&self, line: &str) -> Output {
        self.command(&Self::args(line)).output().expect("run a2acp")
    }

    fn ok(&self, line: &str) -> String {
        let o = self.run(line);
        assert!(
            o.status.success(),
            "`{line}` failed ({}):\n{}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn spawn(&self, line: &str, name: &str) -> Proc {
        let out = fs::File::create(self.cwd().join(format!("{name}.out"))).unwrap();
        let err = fs::File::create(self.cwd().join(format!("{name}.err"))).unwrap();
        Proc(
            self.command(&Self::args(line))
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("spawn a2acp"),
        )
    }

    fn log(&self, name: &str) -> String {
        let read = |ext: &str| {
            fs::read_to_string(self.cwd().join(format!("{name}.{ext}"))).unwrap_or_default()
        };
        read("out") + &read("err")
    }

    fn json(&self, line: &str) -> Value {
        serde_json::from_str(&self.ok(&format!("{line} --json"))).expect("JSON")
    }

    fn online(&self, home: &str) -> bool {
        let o = self.run(&format!("a2acp --home {home} status --json"));
        o.status.success()
            && serde_json::from_slice::<Value>(&o.stdout).is_ok_and(|v| v["online"] == true)
    }

    /// A relay and the agents named, created and running as the README does it.
    fn relay_and_agents(&self, port: u16, names: &[&str]) -> Vec<Proc> {
        let mut procs = vec![self.spawn(
            &format!(
                "a2acp relay --listen 127.0.0.1:{port} --domain localhost --data ./relay-data"
            ),
            "relay",
        )];
        until(15, "the relay", || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        for name in names {
            let cap = capitalised(name);
            self.ok(&format!("a2acp agent init --address agent:{name}@localhost --relay ws://127.0.0.1:{port} --home ./{name} --name {cap} --timezone Europe/London"));
            procs.push(self.spawn(&format!("a2acp agent run --home ./{name}"), name));
        }
        for name in names {
            until(20, "the agent online", || self.online(&format!("./{name}")));
        }
        procs
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

/// Waits until `f` holds (or panics after `secs`).
fn until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The interpreter of the venv `name` (`target/NAME-venv`, or `$ENV`), or a failure that
/// says how to install it.
fn venv_python(name: &str, env: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let p = root().join(format!("target/{name}-venv/bin/python"));
    assert!(
        p.exists(),
        "no Python {name} venv at {}: run `bash .ci/test-deps`",
        p.display()
    );
    p
}

/// The one block of `md` whose text holds `needle`.
fn the_block<'a>(all: &'a [Block], needle: &str) -> &'a Block {
    let found: Vec<_> = all.iter().filter(|b| b.text.contains(needle)).collect();
    assert_eq!(found.len(), 1, "one block holding {needle:?}: {found:#?}");
    found[0]
}

/// The line of a block that starts with `start`.
fn line_of(block: &Block, start: &str) -> String {
    block
        .text
        .lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("a line starting {start:?} in {block:?}"))
        .to_string()
}

/// Runs a Python snippet to its end (at most `secs`), `stdin` on its standard input.
fn run_python(python: &Path, code: &str, stdin: &str, secs: u64) -> (bool, String, String) {
    let mut child = Command::new(python)
        .args(["-c", code])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let mut child = Proc(child);
    let end = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < end, "the snippet ran over {secs} s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut out = String::new();
    let mut err = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.success(), out, err)
}

#[test]
fn every_readme_block_is_run() {
    let readme = doc("README.md");
    let all = blocks(&readme);
    let mut demo = false;
    for b in &all {
        for line in b.text.lines().filter(|l| !l.trim().is_empty()) {
            let known = match line {
                // Run below (`the_readme_demo_books_the_dinner`).
                "cargo run --release -p a2acp-tokio -- demo" => {
                    demo = true;
                    true
                }
                // What CI runs (`.ci/run`); the line itself is fixed here.
                TEST_COMMAND => true,
                // This package's binary, the one these tests run.
                "cargo build --release -p a2acp-tokio" => {
                    BIN.ends_with("/a2acp")
                        && doc("runtime-tokio/Cargo.toml").contains("name = \"a2acp-tokio\"")
                }
                "export PATH=\"$PWD/target/release:$PATH\"" => true,
                // `walkthrough.rs` runs every one of them, in order.
                l if l.starts_with("a2acp ") => {
                    b.section == "Running a relay and two agents by hand"
                        || b.section == "Two relays that federate"
                }
                _ => false,
            };
            assert!(
                known,
                "README.md's block under {:?} has a line no test runs: {line:?}",
                b.section
            );
        }
    }
    assert!(demo, "the README shows the demo");
    assert!(
        readme.lines().any(|l| l == format!("    {TEST_COMMAND}")),
        "the README gives the test command as CI runs it"
    );
    let lines = readme.lines().count();
    assert!(lines <= 200, "README.md is a front page: {lines} lines");
}

#[test]
fn the_readme_demo_books_the_dinner() {
    for (args, done) in [
        (&["demo"][..], "dinner is booked on both sides."),
        (&["demo", "--group"][..], "game night is on for all four"),
    ] {
        let o = Command::new(BIN)
            .args(args)
            .env_remove("A2ACP_HOME")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("run the demo");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains(done),
            "a2acp {args:?}:\n{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Bob at his terminal: shares what he is asked (or declines what he has no value for)
/// and confirms, until `stop`. Returns the kinds of prompt he answered.
fn bob_answers(place: &Place, stop: &std::sync::atomic::AtomicBool) -> Vec<String> {
    let mut answered = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let prompts = place.json("a2acp --home ./bob prompts");
        for p in prompts.as_array().cloned().unwrap_or_default() {
            let id = p["id"].as_u64().unwrap();
            let kind = p["kind"]
                .as_object()
                .and_then(|k| k.keys().next().cloned())
                .unwrap_or_default();
            let tries: &[&str] = if kind == "Consent" {
                &["share-all", "decline-all"]
            } else {
                &["confirm"]
            };
            if tries.iter().any(|a| {
                place
                    .run(&format!("a2acp --home ./bob answer {id} {a}"))
                    .status
                    .success()
            }) {
                answered.push(kind);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    answered
}

#[test]
#[ignore = "needs the official A2A SDK (a2a-sdk 1.3.0): bash .ci/test-deps"]
fn the_a2a_python_snippets_reach_input_required() {
    let python = venv_python("a2a", "A2ACP_A2A_PYTHON");
    let bridges = doc("docs/bridges.md");
    let all = blocks(&bridges);
    let listen = the_block(&all, "--a2a-listen 127.0.0.1:7410");
    let run_line = line_of(
        listen,
        "a2acp --home bob agent run --a2a-listen 127.0.0.1:7410",
    );
    let snippets: Vec<&Block> = all
        .iter()
        .filter(|b| b.info == "python" && b.text.contains("from a2a."))
        .collect();
    assert_eq!(snippets.len(), 2, "the streaming and the polling client");

    let place = Place::new();
    let port = free_port();
    let _relay = place.relay_and_agents(port, &[]);
    place.ok(&format!("a2acp agent init --address agent:bob@localhost --relay ws://127.0.0.1:{port} --home ./bob --name Bob --timezone Europe/London"));
    let a2a = free_port();
    let line = run_line.replace("7410", &a2a.to_string());
    let _bob = place.spawn(&line, "bob");
    until(20, "Bob's A2A listener", || {
        TcpStream::connect(("127.0.0.1", a2a)).is_ok()
    });

    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let user = s.spawn(|| bob_answers(&place, &stop));
        for (n, snippet) in snippets.iter().enumerate() {
            let code = snippet
                .text
                .replace("http://127.0.0.1:7410", &format!("http://127.0.0.1:{a2a}"));
            let (ok, out, err) = run_python(&python, &code, "", 120);
            assert!(
                ok,
                "snippet {n} failed:\n{out}\n{err}\n{}",
                place.log("bob")
            );
            eprintln!("snippet {n}:\n{out}");
            assert!(
                out.contains("TASK_STATE_INPUT_REQUIRED"),
                "snippet {n}: {out}"
            );
            if snippet.text.contains("streaming=True") {
                assert!(out.starts_with("task "), "the task comes first: {out}");
                assert!(out.contains("\"awaiting\": \"context\""), "{out}");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let answered = user.join().unwrap();
        assert!(
            answered.iter().filter(|k| *k == "Consent").count() >= 2,
            "Bob consented once per task: {answered:?}"
        );
    });
}

/// One HTTP/1.1 request to `port` on the loopback; the status code of its answer.
fn status_of(port: u16, head: &str, body: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\n{head}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {text:?}"))
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"doc","version":"1"}}}"#;

#[test]
#[ignore = "needs the official MCP SDK (mcp 2.3.0): bash .ci/test-deps"]
fn the_mcp_snippet_answers_through_the_person_and_the_door_keeps_its_rules() {
    let python = venv_python("mcp", "A2ACP_MCP_PYTHON");
    let bridges = doc("docs/bridges.md");
    let all = blocks(&bridges);
    let listen = the_block(&all, "mcp --listen 127.0.0.1:8765");
    let loopback = line_of(listen, "a2acp --home ./alice mcp --listen 127.0.0.1:8765");
    let off = line_of(
        listen,
        "a2acp --home ./alice mcp --listen 0.0.0.0:8765 --token-file",
    );
    let snippet = the_block(
        &all,
        "streamable_http_client(\"http://127.0.0.1:8765/mcp\")",
    );
    assert_eq!(snippet.info, "python");
    let make_token = bridges
        .split('`')
        .find(|s| s.starts_with("python3 -c ") && s.ends_with("> ./alice/mcp-token"))
        .expect("docs/bridges.md says how to make a token");

    let place = Place::new();
    let port = free_port();
    let _procs = place.relay_and_agents(port, &["alice", "bob"]);
    // The README's dinner, until Alice's agent asks her (prompt #1).
    let out = place.ok("a2acp --home ./alice thread start --to agent:bob@localhost --category scheduling --summary \"Dinner on Friday\" --context examples/dinner.json");
    assert!(out.contains("thr_"), "{out}");
    let open = |home: &str, id: u64| {
        place
            .json(&format!("a2acp --home {home} prompts"))
            .as_array()
            .is_some_and(|a| a.iter().any(|p| p["id"] == id))
    };
    until(30, "Bob's prompt #1", || open("./bob", 1));
    place.ok("a2acp --home ./bob answer 1 time_windows='[\"18:30-21:00\"]' dietary=no");
    until(30, "Alice's prompt #1", || open("./alice", 1));

    // The loopback bridge, as documented (another port).
    let mcp = free_port();
    let line = loopback.replace("8765", &mcp.to_string());
    let _bridge = place.spawn(&line, "mcp");
    let endpoint = format!("http://127.0.0.1:{mcp}/mcp");
    until(20, "the bridge's endpoint printed", || {
        place.log("mcp").contains(&endpoint)
    });
    // The door on loopback: a rebound Host and a browser's Origin are refused.
    let host = format!("Host: 127.0.0.1:{mcp}\r\n");
    assert_eq!(status_of(mcp, &host, INITIALIZE), 200);
    assert_eq!(
        status_of(mcp, "Host: evil.example\r\n", INITIALIZE),
        403,
        "a rebound Host"
    );
    assert_eq!(
        status_of(
            mcp,
            &format!("{host}Origin: http://evil.example\r\n"),
            INITIALIZE
        ),
        403,
        "a browser's Origin"
    );

    // The snippet: Alice types her answer on its standard input.
    let code = snippet.text.replace("http://127.0.0.1:8765/mcp", &endpoint);
    let (ok, out, err) = run_python(
        &python,
        &code,
        "transport_mode=driving cuisine_preference=no\n",
        120,
    );
    assert!(
        ok,
        "the MCP snippet failed:\n{out}\n{err}\n{}",
        place.log("mcp")
    );
    eprintln!("{out}");
    assert!(
        out.contains("transport_mode"),
        "the person saw the prompt: {out}"
    );
    assert!(!open("./alice", 1), "Alice's prompt #1 was answered: {out}");
    until(30, "the proposal (Alice's prompt #2)", || {
        open("./alice", 2)
    });

    // Off loopback: refused without a token; with the documented one, every request
    // carries it.
    let wide = free_port();
    let no_token = off
        .split(" --token-file")
        .next()
        .unwrap()
        .replace("8765", &wide.to_string());
    let o = place.run(&no_token);
    assert!(!o.status.success(), "{no_token} started without a token");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("needs --token-file"), "{e}");
    let made = Command::new("sh")
        .args(["-c", make_token])
        .current_dir(place.cwd())
        .status()
        .expect("make the token");
    assert!(made.success(), "{make_token}");
    let token = fs::read_to_string(place.cwd().join("alice/mcp-token")).unwrap();
    let token = token.trim();
    assert!(token.len() >= 16, "{token}");
    // On port 0, read back from what it prints: a port picked beforehand can be taken by
    // the time the bridge binds it on every address (the full suite's sockets).
    let _wide = place.spawn(&off.replace("8765", "0"), "mcp-wide");
    let printed = "MCP over streamable HTTP at http://0.0.0.0:";
    until(20, "the token-guarded bridge's endpoint printed", || {
        place.log("mcp-wide").contains(printed)
    });
    let wide: u16 = place
        .log("mcp-wide")
        .split(printed)
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("a port in {:?}", place.log("mcp-wide")));
    let host = format!("Host: 127.0.0.1:{wide}\r\n");
    assert_eq!(status_of(wide, &host, INITIALIZE), 401, "no token");
    assert_eq!(
        status_of(
            wide,
            &format!("{host}Authorization: Bearer not-the-token-at-all\r\n"),
            INITIALIZE
        ),
        401,
        "another token"
    );
    let bearer = format!("{host}Authorization: Bearer {token}\r\n");
    assert_eq!(status_of(wide, &bearer, INITIALIZE), 200, "the token");
    assert_eq!(
        status_of(
            wide,
            &format!("{bearer}Origin: http://evil.example\r\n"),
            INITIALIZE
        ),
        403,
        "a browser's Origin, token or not"
    );
}

/// The anchors GitHub gives the headings of a Markdown file (outside code blocks).
fn anchors(md: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in md.lines() {
        if is_fence(line) {
            fenced = !fenced;
            continue;
        }
        let Some(h) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let h = h.trim_start_matches('#').trim().to_lowercase();
        out.push(
            h.chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect(),
        );
    }
    out
}

#[test]
fn every_link_of_the_readme_and_docs_resolves() {
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("SPEC-NOTES.md")];
    for e in fs::read_dir(root().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(Path::new("docs").join(p.file_name().unwrap()));
        }
    }
    assert!(pages.len() >= 8, "{pages:?}");
    let mut checked = 0;
    for page in &pages {
        let text = doc(page.to_str().unwrap());
        let dir = page.parent().unwrap_or(Path::new(""));
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.contains(' ')
                || target.is_empty()
            {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            let full = root().join(&path);
            assert!(
                full.exists(),
                "{}: a link to {target}, which does not exist",
                page.display()
            );
            if !anchor.is_empty() {
                let there = anchors(&fs::read_to_string(&full).unwrap());
                assert!(
                    there.iter().any(|a| a == anchor),
                    "{}: a link to {target}, whose heading does not exist",
                    page.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 30, "{checked} links");
}
