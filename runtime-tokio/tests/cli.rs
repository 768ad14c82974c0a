//! The real `a2acp` binary, as a person types it: a relay and two agents as processes,
//! then `thread start`, `thread show` (readable text and `--json`), `thread cancel`,
//! `thread reply`/`thread context`, `notifications` (list, `read N`, `--all`) and
//! `keys show`/`keys accept` — their argument parsing and their output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

#[path = "common/processes.rs"]
mod processes;
use processes::{start_relay, until, Kids};

const BIN: &str = env!("CARGO_BIN_EXE_a2acp");

fn a2acp(home: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run a2acp")
}

fn ok(home: &Path, args: &[&str]) -> String {
    let o = a2acp(home, args);
    assert!(
        o.status.success(),
        "a2acp {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn fails(home: &Path, args: &[&str]) -> String {
    let o = a2acp(home, args);
    assert!(!o.status.success(), "a2acp {args:?} should fail");
    String::from_utf8(o.stderr).unwrap()
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

/// The 60 digits of a `keys show` output: its three lines of four groups of five.
fn digits(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| {
            l.split(' ').count() == 4
                && l.split(' ')
                    .all(|g| g.len() == 5 && g.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect::<String>()
        .replace(' ', "")
}

#[test]
fn the_person_s_commands_on_the_real_binary() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut kids = Kids(Vec::new());
    let url = start_relay(BIN, &d.join("relay"), &mut kids);
    let home = |n: &str| -> PathBuf { d.join(n) };
    for (n, name) in [("alice", "Alice"), ("bob", "Bob")] {
        ok(
            &home(n),
            &[
                "agent",
                "init",
                "--address",
                &format!("agent:{n}@localhost"),
                "--relay",
                &url,
                "--name",
                name,
                "--timezone",
                "Europe/London",
            ],
        );
        let run = Command::new(BIN)
            .args(["agent", "run", "--no-prompt", "--sync", "normal", "--home"])
            .arg(home(n))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        kids.0.push(run);
    }
    let (alice, bob) = (home("alice"), home("bob"));
    for h in [&alice, &bob] {
        until(20, "agent online", || {
            let o = a2acp(h, &["status", "--json"]);
            (o.status.success() && json(&String::from_utf8_lossy(&o.stdout))["online"] == true)
                .then_some(())
        });
    }

    // Nothing yet.
    assert!(ok(&bob, &["notifications"]).contains("no unread notifications"));
    assert_eq!(
        json(&ok(&bob, &["notifications", "--json"])),
        serde_json::json!([])
    );

    let ctx = d.join("dinner.json");
    std::fs::write(&ctx, r#"{"time_windows": ["Friday 19:00-22:00"]}"#).unwrap();
    let out = ok(
        &alice,
        &[
            "thread",
            "start",
            "--to",
            "agent:bob@localhost",
            "--category",
            "scheduling",
            "--summary",
            "Dinner on Friday",
            "--context",
            ctx.to_str().unwrap(),
        ],
    );
    let id = out
        .split_whitespace()
        .find(|w| w.starts_with("thr_"))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();

    // `thread show`: readable, with the state, the peer, the intent, what was shared and
    // the timeline; `--json` the same thread.
    let shown = until(15, "Bob has the thread", || {
        let o = a2acp(&bob, &["thread", "show", &id]);
        o.status
            .success()
            .then(|| String::from_utf8(o.stdout).unwrap())
    });
    assert!(shown.starts_with(&format!("Thread {id} — ")), "{shown}");
    for part in [
        "with           agent:alice@localhost (they started it)",
        "about          scheduling: Dinner on Friday",
        "they shared",
        "time_windows=",
        "you declined",
        "timeline:",
    ] {
        assert!(shown.contains(part), "{part:?} missing in:\n{shown}");
    }
    let j = json(&ok(&alice, &["thread", "show", &id, "--json"]));
    assert_eq!(j["id"], serde_json::json!(id));
    assert_eq!(j["peer"], "agent:bob@localhost");
    assert!(
        j["history"].as_array().is_some_and(|h| !h.is_empty()),
        "{j}"
    );
    assert!(fails(&alice, &["thread", "show", "thr_nope"]).contains("no thread"));

    // `keys show`: the same 60 digits on both sides, grouped, with a QR code unless
    // `--no-qr`.
    let a_keys = ok(&alice, &["keys", "show", "agent:bob@localhost"]);
    let b_keys = ok(&bob, &["keys", "show", "agent:alice@localhost", "--no-qr"]);
    let n = digits(&a_keys);
    assert_eq!(n.len(), 60, "{a_keys}");
    assert_eq!(digits(&b_keys), n, "{b_keys}");
    assert!(a_keys.contains('▀') || a_keys.contains('▄'), "{a_keys}");
    assert!(!b_keys.contains('▀') && !b_keys.contains('▄'), "{b_keys}");
    let kj = json(&ok(
        &alice,
        &["keys", "show", "agent:bob@localhost", "--json"],
    ));
    assert_eq!(kj["safety_number"], serde_json::json!(n));
    assert!(kj["changed_key"].is_null());
    let e = fails(
        &alice,
        &[
            "keys",
            "accept",
            "agent:bob@localhost",
            "--safety-number",
            &n,
        ],
    );
    assert!(e.contains("no changed key"), "{e}");
    assert!(fails(&alice, &["keys", "show", "bob"]).contains("bob"));

    // `thread reply` needs values; `thread context` is the same command.
    assert!(fails(&alice, &["thread", "reply", &id]).contains("FIELD=VALUE"));
    assert!(fails(&alice, &["thread", "reply", &id, "oops"]).contains("FIELD=VALUE"));
    let r = ok(
        &alice,
        &["thread", "context", &id, "note=any evening", "guests=2"],
    );
    assert!(r.contains(&id), "{r}");
    until(15, "Bob has Alice's note", || {
        let j = json(&ok(&bob, &["thread", "show", &id, "--json"]));
        (j["theirs"]["note"] == "any evening" && j["theirs"]["guests"] == 2).then_some(())
    });

    // `thread cancel`: closed on both sides; Bob is told.
    let r = ok(&alice, &["thread", "cancel", &id]);
    assert!(r.contains("DECLINED"), "{r}");
    until(15, "Bob's side declined", || {
        let j = json(&ok(&bob, &["thread", "show", &id, "--json"]));
        (j["state"] == "DECLINED").then_some(())
    });
    assert!(fails(&alice, &["thread", "cancel", &id]).contains("DECLINED"));

    // `notifications`: Bob's unread ones, numbered, with thread and kind.
    let list = until(15, "Bob notified", || {
        let v = json(&ok(&bob, &["notifications", "--json"]));
        v.as_array()
            .filter(|a| a.iter().any(|n| n["thread_id"] == serde_json::json!(id)))
            .cloned()
    });
    let first = list[0]["number"].as_u64().unwrap();
    let text = ok(&bob, &["notifications"]);
    assert!(text.contains(&format!("thread {id}")), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with(&format!("{first}*"))),
        "{text}"
    );
    ok(&bob, &["notifications", "read", &first.to_string()]);
    let after = json(&ok(&bob, &["notifications", "--json"]));
    assert!(after
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["number"].as_u64() != Some(first)));
    ok(&bob, &["notifications", "read", "--all"]);
    assert!(ok(&bob, &["notifications"]).contains("no unread notifications"));
    let all = json(&ok(&bob, &["notifications", "--all", "--json"]));
    assert_eq!(all.as_array().unwrap().len(), list.len());
    assert!(all.as_array().unwrap().iter().all(|n| n["read"] == true));
    assert!(fails(&bob, &["notifications", "read", "999"]).contains("no notification 999"));
    // Neither a number nor --all: clap refuses before anything is sent.
    assert!(fails(&bob, &["notifications", "read"]).contains("<NUMBER>"));
    assert!(fails(&bob, &["notifications", "read", "3", "--all"]).contains("cannot be used"));
}

/// §14.1: `agent init` without `--address` runs the onboarding; when stdin is not a
/// terminal the answers are read from it, one per line, and the config written is the
/// one the flags write, with the five answers in its tiers.
#[test]
fn agent_init_without_flags_onboards_from_piped_answers() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("jono");
    let mut child = Command::new(BIN)
        .arg("--home")
        .arg(&home)
        .args(["agent", "init", "--offline"])
        .env("NO_COLOR", "1")
        .env("TZ", "Europe/London")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run a2acp");
    // Name, area, time zone (Enter: the detected one), address (Enter: suggested),
    // relay (Enter), then the five defaults: availability always, the rest as offered
    // except budget never.
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Jono\nReading, UK\n\n\n\na\n\n\nn\n\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("Timezone auto-detected: Europe/London"),
        "{out}"
    );
    assert!(out.contains("created agent:jono@localhost"), "{out}");
    let text = std::fs::read_to_string(home.join("config.toml")).unwrap();
    let cfg: toml::Table = text.parse().unwrap();
    assert_eq!(cfg["address"].as_str(), Some("agent:jono@localhost"));
    assert_eq!(cfg["relay"].as_str(), Some("ws://127.0.0.1:7447"));
    let profile = cfg["profile"].as_table().unwrap();
    assert_eq!(profile["name"].as_str(), Some("Jono"));
    assert_eq!(profile["timezone"].as_str(), Some("Europe/London"));
    assert_eq!(profile["general_area"].as_str(), Some("Reading, UK"));
    let p = cfg["permissions"].as_table().unwrap();
    let has = |tier: &str, f: &str| {
        p[tier]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v.as_str() == Some(f))
    };
    assert!(has("always_share", "specific_availability"));
    assert!(has("always_share", "general_location_area"));
    assert!(has("ask_first", "dietary"));
    assert!(has("never_share", "budget_range"));
    assert!(has("ask_first", "specific_location"));

    // Answers that run out: a clear error, nothing written.
    let other = dir.path().join("other");
    let mut child = Command::new(BIN)
        .arg("--home")
        .arg(&other)
        .args(["agent", "init", "--offline"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"Ana\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no answer (stdin closed)"), "{err}");
    assert!(!other.join("config.toml").exists());
}

#[test]
fn agent_init_takes_one_relay_door_per_relay_flag() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("alice");
    let out = ok(
        &home,
        &[
            "agent",
            "init",
            "--offline",
            "--address",
            "agent:alice@localhost",
            "--relay",
            "ws://127.0.0.1:1",
            "--relay",
            "wss://relay-b.example.org",
        ],
    );
    assert!(out.contains("registration  on the first"), "{out}");
    let text = std::fs::read_to_string(home.join("config.toml")).unwrap();
    let doors = text.split("relay = [").nth(1).unwrap_or_default();
    assert!(
        doors.starts_with("\n    \"ws://127.0.0.1:1\",\n    \"wss://relay-b.example.org\",\n]"),
        "{text}"
    );
    // A bad door is named, and nothing is written.
    let other = dir.path().join("other");
    let err = fails(
        &other,
        &[
            "agent",
            "init",
            "--offline",
            "--address",
            "agent:bob@localhost",
            "--relay",
            "ws://127.0.0.1:1",
            "--relay",
            "https://relay-b.example.org",
        ],
    );
    assert!(
        err.contains("--relay: relay URL `https://relay-b.example.org` must start with ws://"),
        "{err}"
    );
    assert!(!other.join("config.toml").exists());
}
