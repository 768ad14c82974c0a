//! The README's "Running a relay and two agents by hand", command for command, with the
//! real `a2acp` binary as subprocesses: a relay, two `agent init`, two `agent run`, then
//! every client command the README lists, until the dinner thread is COMPLETED on both
//! sides. The commands are read from README.md and must be exactly the ones below (only
//! the port and the thread id are substituted), so the README cannot drift from what
//! works. Then the newcomer's error paths: a missing home, a typo in a field name, an
//! address another key holds (at `agent init` and for a running agent), an address in
//! upper case, a thread to an address the relay does not know.
//!
//! And the README's "Two relays that federate" the same way: a private CA, two relays of
//! two domains linked over TLS, an agent on each, a thread across them, `relay-status`.
#![cfg(unix)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_a2acp");

/// The commands of the README's by-hand section, in its order (`thr_…`: the thread's id).
const README_COMMANDS: &[&str] = &[
    "a2acp relay --listen 127.0.0.1:7447 --domain localhost --data ./relay-data",
    "a2acp agent init --address agent:alice@localhost --relay ws://127.0.0.1:7447 --home ./alice --name Alice --timezone Europe/London",
    "a2acp agent run --home ./alice",
    "a2acp agent init --address agent:bob@localhost --relay ws://127.0.0.1:7447 --home ./bob --name Bob --timezone Europe/London",
    "a2acp agent run --home ./bob",
    "a2acp --home ./alice thread start --to agent:bob@localhost --category scheduling --summary \"Dinner on Friday\" --context examples/dinner.json",
    "a2acp --home ./alice threads",
    "a2acp --home ./alice thread show thr_…",
    "a2acp --home ./bob prompts",
    "a2acp --home ./bob answer 1 time_windows='[\"18:30-21:00\"]' dietary=no",
    "a2acp --home ./alice prompts",
    "a2acp --home ./alice answer 1 transport_mode=driving cuisine_preference=no",
    "a2acp --home ./alice answer 2 confirm",
    "a2acp --home ./bob answer 2 confirm",
    "a2acp --home ./alice threads --json",
    "a2acp --home ./alice permissions show",
    "a2acp --home ./alice permissions set dietary always_share --for agent:bob@localhost",
    "a2acp --home ./alice block agent:mallory@localhost",
    "a2acp --home ./alice memory show agent:bob@localhost",
    "a2acp --home ./alice status",
    "a2acp --home ./alice receipts",
    "a2acp --home ./alice receipts --json > receipts.json",
    "a2acp receipts verify receipts.json --value transport_mode=driving",
    "a2acp --home ./alice agreements --json > agreement.json",
    "a2acp receipts verify agreement.json",
    "a2acp --home ./alice thread retract thr_… transport_mode",
    "a2acp --home ./alice retractions --json > retraction.json",
    "a2acp receipts verify retraction.json",
];

/// A child process killed (and reaped) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The commands of the README's "Two relays that federate", in its order.
const README_FEDERATION: &[&str] = &[
    "a2acp dev-ca --out ./pki",
    "a2acp relay --listen 127.0.0.1:7448 --domain a.example --data ./relay-a --tls-cert ./pki/relay.pem --tls-key ./pki/relay.key --ca ./pki/ca.pem --federate b.example=wss://127.0.0.1:7449",
    "a2acp relay --listen 127.0.0.1:7449 --domain b.example --data ./relay-b --tls-cert ./pki/relay.pem --tls-key ./pki/relay.key --ca ./pki/ca.pem --federate a.example=wss://127.0.0.1:7448",
    "a2acp agent init --address agent:carol@a.example --relay wss://127.0.0.1:7448 --ca ./pki/ca.pem --home ./carol --name Carol --timezone Europe/London",
    "a2acp agent run --home ./carol",
    "a2acp agent init --address agent:dave@b.example --relay wss://127.0.0.1:7449 --ca ./pki/ca.pem --home ./dave --name Dave --timezone Europe/London",
    "a2acp agent run --home ./dave",
    "a2acp --home ./carol thread start --to agent:dave@b.example --category scheduling --summary \"Dinner on Friday\" --context examples/dinner.json",
    "a2acp --home ./dave prompts",
    "a2acp relay-status https://127.0.0.1:7448 --ca ./pki/ca.pem",
];

/// The `a2acp` lines of the README's by-hand section (comments after `#` removed).
fn readme_commands() -> Vec<String> {
    section_commands("## Running a relay and two agents by hand")
}

/// The `a2acp` lines of the README's section under `heading` (comments after `#` removed).
fn section_commands(heading: &str) -> Vec<String> {
    let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
        .expect("README.md");
    let start = readme.find(heading).expect("the section");
    let section = &readme[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    section[..end]
        .lines()
        .filter_map(|l| l.strip_prefix("    a2acp "))
        .map(|l| {
            let l = l.split("   #").next().unwrap_or(l);
            format!("a2acp {}", l.trim_end())
        })
        .collect()
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

struct Walk {
    dir: tempfile::TempDir,
    port: u16,
    /// More ports of the README replaced by free ones: (as written, this run's).
    more_ports: Vec<(&'static str, u16)>,
    thread: String,
}

impl Walk {
    fn cwd(&self) -> &Path {
        self.dir.path()
    }

    /// The README line with this run's port and thread id, as arguments (without `a2acp`).
    fn args(&self, line: &str) -> Vec<String> {
        let mut line = line
            .replace("7447", &self.port.to_string())
            .replace("thr_…", &self.thread);
        for (written, port) in &self.more_ports {
            line = line.replace(written, &port.to_string());
        }
        let mut w = words(&line);
        assert_eq!(w.remove(0), "a2acp");
        w
    }

    fn run(&self, args: &[String]) -> Output {
        Command::new(BIN)
            .args(args)
            .current_dir(self.cwd())
            .env_remove("A2ACP_HOME")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("run a2acp")
    }

    /// Runs a line that must succeed; its stdout.
    fn ok(&self, line: &str) -> String {
        let args = self.args(line);
        let o = self.run(&args);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        );
        assert!(
            o.status.success(),
            "`{line}` failed ({}):\n{out}\n{err}",
            o.status
        );
        out
    }

    /// Runs a line that must fail; its stderr.
    fn fails(&self, line: &str) -> String {
        let args = self.args(line);
        let o = self.run(&args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            !o.status.success(),
            "`{line}` succeeded: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        err
    }

    /// Starts a long-running line, its output in `NAME.out` / `NAME.err`.
    fn spawn(&self, line: &str, name: &str) -> Proc {
        let out = fs::File::create(self.log(name, "out")).unwrap();
        let err = fs::File::create(self.log(name, "err")).unwrap();
        Proc(
            Command::new(BIN)
                .args(self.args(line))
                .current_dir(self.cwd())
                .env_remove("A2ACP_HOME")
                .env_remove("RUST_LOG")
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("spawn a2acp"),
        )
    }

    fn log(&self, name: &str, ext: &str) -> PathBuf {
        self.cwd().join(format!("{name}.{ext}"))
    }

    fn json(&self, home: &str, what: &[&str]) -> Value {
        let mut args = vec!["--home".to_string(), home.to_string()];
        args.extend(what.iter().map(|s| s.to_string()));
        args.push("--json".into());
        let o = self.run(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).expect("JSON")
    }

    /// Waits until `f` holds (or panics after `secs`).
    fn until(&self, secs: u64, what: &str, mut f: impl FnMut() -> bool) {
        let end = Instant::now() + Duration::from_secs(secs);
        while !f() {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn online(&self, home: &str) -> bool {
        let o = self.run(&[
            "--home".into(),
            home.into(),
            "status".into(),
            "--json".into(),
        ]);
        o.status.success()
            && serde_json::from_slice::<Value>(&o.stdout)
                .map(|v| v["online"] == true)
                .unwrap_or(false)
    }

    fn prompt_open(&self, home: &str, id: u64) -> bool {
        self.json(home, &["prompts"])
            .as_array()
            .is_some_and(|a| a.iter().any(|p| p["id"] == id))
    }

    fn state(&self, home: &str) -> String {
        self.json(home, &["threads"])
            .as_array()
            .and_then(|a| a.iter().find(|t| t["id"] == self.thread.as_str()).cloned())
            .map(|t| t["state"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn the_readme_by_hand_section_runs_as_written() {
    assert_eq!(
        readme_commands(),
        README_COMMANDS.to_vec(),
        "README.md's by-hand section and this test must list the same commands"
    );
    let w = Walk {
        dir: tempfile::tempdir().unwrap(),
        port: free_port(),
        more_ports: Vec::new(),
        thread: String::new(),
    };
    let mut w = w;
    // The context file the README uses, where its command expects it.
    fs::create_dir_all(w.cwd().join("examples")).unwrap();
    fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/dinner.json"),
        w.cwd().join("examples/dinner.json"),
    )
    .unwrap();
    let c = README_COMMANDS;

    // Before anything exists: a missing home says how to create one.
    let e = w.fails("a2acp --home ./alice threads");
    assert!(
        e.contains("a2acp agent init") && e.contains("--home ./alice"),
        "{e}"
    );

    let _relay = w.spawn(c[0], "relay");
    w.until(15, "the relay", || {
        std::net::TcpStream::connect(("127.0.0.1", w.port)).is_ok()
    });
    // An address in upper case is refused, not silently changed.
    let e = w.fails(&c[1].replace("agent:alice@", "agent:Alice@"));
    assert!(e.contains("use `agent:alice@localhost`"), "{e}");
    assert!(!w.cwd().join("alice").exists());

    let out = w.ok(c[1]);
    assert!(out.contains("registered"), "{out}");
    let _alice = w.spawn(c[2], "alice");
    let out = w.ok(c[3]);
    assert!(out.contains("registered"), "{out}");
    let _bob = w.spawn(c[4], "bob");
    w.until(20, "both agents online", || {
        w.online("./alice") && w.online("./bob")
    });
    for name in ["alice", "bob"] {
        let first = fs::read_to_string(w.log(name, "out")).unwrap();
        let first = first.lines().next().unwrap_or_default();
        assert!(first.contains(" started ·"), "a first run: {first}");
    }

    // Another key for Alice's address: `agent init` is refused and leaves nothing.
    let taken = "a2acp agent init --address agent:alice@localhost --relay ws://127.0.0.1:7447 --home ./alice2 --name Alice";
    let e = w.fails(taken);
    assert!(e.contains("address_taken"), "{e}");
    assert!(!w.cwd().join("alice2").exists(), "a half-made home is left");

    // The dinner.
    let out = w.ok(c[5]);
    assert!(
        out.contains("started") && out.contains("relay accepted"),
        "{out}"
    );
    let id = out
        .split_whitespace()
        .find(|t| t.starts_with("thr_"))
        .expect("thread id")
        .trim_end_matches(':')
        .to_string();
    w.thread = id;
    let out = w.ok(c[6]);
    assert!(out.contains(&w.thread), "{out}");
    let out = w.ok(c[7]);
    assert!(
        out.contains(&w.thread) && out.contains("timeline:") && out.contains("sent context"),
        "thread show: {out}"
    );
    w.until(20, "Bob's consent prompt #1", || w.prompt_open("./bob", 1));
    let out = w.ok(c[8]);
    assert!(
        out.contains("Prompt #1") && out.contains("time_windows"),
        "{out}"
    );
    // Bob has no value for time_windows: sharing it as is is refused, with what to type.
    let e = w.fails("a2acp --home ./bob answer 1 time_windows dietary=no");
    assert!(e.contains("no value for `time_windows`"), "{e}");
    w.ok(c[9]);
    w.until(20, "Alice's consent prompt #1", || {
        w.prompt_open("./alice", 1)
    });
    let out = w.ok(c[10]);
    assert!(
        out.contains("Prompt #1") && out.contains("transport_mode"),
        "{out}"
    );
    // Alice's profile has no transport_mode either.
    let e = w.fails("a2acp --home ./alice answer 1 transport_mode cuisine_preference=no");
    assert!(e.contains("no value for `transport_mode`"), "{e}");
    w.ok(c[11]);
    w.until(20, "Alice's resolution prompt #2", || {
        w.prompt_open("./alice", 2)
    });
    w.ok(c[12]);
    w.until(20, "Bob's resolution prompt #2", || {
        w.prompt_open("./bob", 2)
    });
    w.ok(c[13]);
    w.until(30, "the thread COMPLETED on both sides", || {
        w.state("./alice") == "COMPLETED" && w.state("./bob") == "COMPLETED"
    });
    let v: Value = serde_json::from_str(&w.ok(c[14])).unwrap();
    assert!(v
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["state"] == "COMPLETED"));

    let out = w.ok(c[15]);
    assert!(
        out.contains("ask_first:") && out.contains("never_share:"),
        "{out}"
    );
    // A typo in a field name is refused with the closest known name.
    let e = w.fails(
        "a2acp --home ./alice permissions set dietery always_share --for agent:bob@localhost",
    );
    assert!(e.contains("did you mean `dietary`"), "{e}");
    let out = w.ok(c[16]);
    assert!(out.contains("agent:bob@localhost"), "{out}");
    let out = w.ok(c[17]);
    assert!(out.contains("blocked"), "{out}");
    let out = w.ok(c[18]);
    assert!(
        out.contains("agent:bob@localhost") && out.contains("COMPLETED"),
        "{out}"
    );
    let out = w.ok(c[19]);
    assert!(
        out.contains("agent:alice@localhost") && out.contains("online"),
        "{out}"
    );

    // Her receipts: what she shared and declined at prompt 1, the proposal she confirmed.
    let out = w.ok(c[20]);
    assert!(
        out.contains("shared    transport_mode (you, at prompt 1)")
            && out.contains("declined  cuisine_preference (you, at prompt 1)")
            && out.contains("confirmation")
            && out.contains("(you, at prompt 2)"),
        "{out}"
    );
    let (line, file) = c[21].split_once(" > ").expect("a redirection");
    let json = w.ok(line);
    fs::write(w.cwd().join(file), &json).unwrap();
    let out = w.ok(c[22]);
    assert!(
        out.contains("transport_mode: the value given is the one disclosed")
            && out.contains("receipt(s) verified"),
        "{out}"
    );
    // An altered receipt, a value she did not share: each named, exit status 1.
    let altered = json.replacen("cuisine_preference", "cuisine_preferences", 1);
    fs::write(w.cwd().join("altered.json"), altered).unwrap();
    for (line, says) in [
        (
            "a2acp receipts verify altered.json",
            "the receipt was altered",
        ),
        (
            "a2acp receipts verify receipts.json --value transport_mode=walking",
            "is not the value disclosed",
        ),
    ] {
        let o = w.run(&w.args(line));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(!o.status.success() && out.contains(says), "{line}: {out}");
    }
    // The agreement: the proposal, signed by both.
    let (line, file) = c[23].split_once(" > ").expect("a redirection");
    let json = w.ok(line);
    fs::write(w.cwd().join(file), &json).unwrap();
    let out = w.ok(c[24]);
    assert!(
        out.contains("2 of 2 required confirmations signed over one proposal")
            && out.contains("agent:alice@localhost")
            && out.contains("agent:bob@localhost")
            && out.contains("1 agreement(s) verified"),
        "{out}"
    );
    let mut altered: serde_json::Value = serde_json::from_str(&json).unwrap();
    altered[0]["proposal"]["proposal"]["summary"] = "Lunch on Saturday".into();
    fs::write(w.cwd().join("altered-agreement.json"), altered.to_string()).unwrap();
    let o = w.run(&w.args("a2acp receipts verify altered-agreement.json"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !o.status.success() && out.contains("the proposal does not match its digest"),
        "{out}"
    );
    // Taking it back: Bob's agent deletes it and acknowledges, signed.
    let out = w.ok(c[25]);
    assert!(
        out.contains("asked agent:bob@localhost to delete transport_mode"),
        "{out}"
    );
    w.until(
        20,
        "Bob's agent acknowledged deleting transport_mode",
        || {
            let t = w.json("./alice", &["thread", "show", &w.thread]);
            t["retractions"][0]["acknowledged"] == true
        },
    );
    // Her record of it, with Bob's signed acknowledgement, verifies offline; altered, it
    // does not.
    let (line, file) = c[26].split_once(" > ").expect("a redirection");
    let json = w.ok(line);
    fs::write(w.cwd().join(file), &json).unwrap();
    let out = w.ok(c[27]);
    assert!(
        out.contains("agent:bob@localhost acknowledged deleting transport_mode, signed")
            && out.contains("1 retraction(s) verified"),
        "{out}"
    );
    let mut altered: serde_json::Value = serde_json::from_str(&json).unwrap();
    altered[0]["fields"] = serde_json::json!(["transport_mode", "time_windows"]);
    fs::write(w.cwd().join("altered-retraction.json"), altered.to_string()).unwrap();
    let o = w.run(&w.args("a2acp receipts verify altered-retraction.json"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !o.status.success()
            && out.contains("the acknowledgement of agent:bob@localhost does not verify"),
        "{out}"
    );
    let t = w.json("./bob", &["thread", "show", &w.thread]);
    assert!(t["theirs"].get("transport_mode").is_none(), "{t}");
    assert!(t["theirs"].get("time_windows").is_some(), "{t}");
    // Something she never shared in the thread: refused, exit status 1.
    let e = w.fails("a2acp --home ./alice thread retract thr_… blood_type");
    assert!(e.contains("Not shared in this thread"), "{e}");

    // A thread to an address the relay does not know: refused at once, non-zero exit.
    let e = w.fails("a2acp --home ./alice thread start --to agent:nobody@localhost --category scheduling --summary \"Lunch\"");
    assert!(
        e.contains("unknown_recipient") && e.contains("agent:nobody@localhost"),
        "{e}"
    );
    let declined = w.json("./alice", &["threads"]);
    assert!(
        declined
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["peer"] == "agent:nobody@localhost" && t["state"] == "DECLINED"),
        "{declined}"
    );

    // A running agent whose address another key holds: it stops, says so in `status`
    // and logs it once.
    w.ok("a2acp agent init --address agent:alice@localhost --relay ws://127.0.0.1:7447 --home ./alice2 --offline");
    let alice2 = w.spawn("a2acp agent run --home ./alice2", "alice2");
    w.until(20, "the refusal in alice2's status", || {
        let o = w.run(&[
            "--home".into(),
            "./alice2".into(),
            "status".into(),
            "--json".into(),
        ]);
        serde_json::from_slice::<Value>(&o.stdout)
            .is_ok_and(|s| s["refused"]["code"] == "address_taken")
    });
    let out = w.ok("a2acp --home ./alice2 status");
    assert!(out.contains("refused (address_taken"), "{out}");
    std::thread::sleep(Duration::from_secs(2));
    drop(alice2);
    let log = fs::read_to_string(w.log("alice2", "err")).unwrap()
        + &fs::read_to_string(w.log("alice2", "out")).unwrap();
    assert_eq!(
        log.matches("The relay refused to register").count(),
        1,
        "told once: {log}"
    );
    assert!(log.matches("relay authenticated").count() == 0, "{log}");

    // No colour code or other escape sequence in any log.
    for name in ["relay", "alice", "bob", "alice2"] {
        for ext in ["out", "err"] {
            let text = fs::read_to_string(w.log(name, ext)).unwrap();
            assert!(!text.contains('\u{1b}'), "escape sequence in {name}.{ext}");
        }
    }
}

#[test]
fn the_readme_federation_section_runs_as_written() {
    assert_eq!(
        section_commands("## Two relays that federate"),
        README_FEDERATION.to_vec(),
        "README.md's federation section and this test must list the same commands"
    );
    let (pa, pb) = (free_port(), free_port());
    let w = Walk {
        dir: tempfile::tempdir().unwrap(),
        port: free_port(),
        more_ports: vec![("7448", pa), ("7449", pb)],
        thread: String::new(),
    };
    fs::create_dir_all(w.cwd().join("examples")).unwrap();
    fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/dinner.json"),
        w.cwd().join("examples/dinner.json"),
    )
    .unwrap();
    let c = README_FEDERATION;

    let out = w.ok(c[0]);
    assert!(out.contains("--tls-cert") && out.contains("--ca"), "{out}");
    // Run twice, it replaces nothing.
    let e = w.fails(c[0]);
    assert!(e.contains("already exists"), "{e}");

    let _ra = w.spawn(c[1], "relay-a");
    let _rb = w.spawn(c[2], "relay-b");
    w.until(15, "both relays", || {
        [pa, pb]
            .iter()
            .all(|p| std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok())
    });
    let out = w.ok(c[3]);
    assert!(out.contains("registered"), "{out}");
    let _carol = w.spawn(c[4], "carol");
    let out = w.ok(c[5]);
    assert!(out.contains("registered"), "{out}");
    let _dave = w.spawn(c[6], "dave");
    w.until(20, "both agents online", || {
        w.online("./carol") && w.online("./dave")
    });

    let out = w.ok(c[7]);
    assert!(
        out.contains("started") && out.contains("relay accepted"),
        "{out}"
    );
    // Dave's agent, on the other domain, asks him as Bob's did.
    w.until(30, "Dave's consent prompt #1", || {
        w.prompt_open("./dave", 1)
    });
    let out = w.ok(c[8]);
    assert!(
        out.contains("Prompt #1") && out.contains("time_windows"),
        "{out}"
    );
    let out = w.ok(c[9]);
    println!("{out}");
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("b.example"))
        .unwrap_or_else(|| panic!("no b.example row: {out}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    // domain, link out, links in, queued, forwarded…
    assert_eq!(cols[1], "up", "{out}");
    assert_eq!(cols[3], "0", "nothing left queued: {out}");
    assert!(cols[4].parse::<u64>().unwrap() >= 1, "handed over: {out}");
    // No relay may read what it carried.
    for data in ["relay-a", "relay-b"] {
        let mut bytes = Vec::new();
        for e in walk_files(&w.cwd().join(data)) {
            bytes.extend(fs::read(e).unwrap_or_default());
        }
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("Dinner on Friday"), "{data} holds plaintext");
    }
}

/// Every file under `dir`.
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}
