//! `a2acp audit` and `a2acp audit verify` on a log written by the agent's own writer, then
//! tampered with: an altered, a deleted and a reordered line, and a last line cut short
//! are each named (file and line) with exit status 1; the intact log verifies.

use std::path::Path;
use std::process::Command;

use a2acp_core::agent::{AgentEvent, AuditRecord, FieldsNamed};
use a2acp_core::audit_log::entry_of;
use a2acp_core::{Address, Timestamp};
use a2acp_runtime::audit_log::{AuditLog, DIR};

const BIN: &str = env!("CARGO_BIN_EXE_a2acp");

/// A home whose log holds five entries of February 2026, alternately sent to and
/// received from Bob.
fn home_with_log() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let me = Address::parse("agent:alice@localhost").unwrap();
    let bob = Address::parse("agent:bob@localhost").unwrap();
    let mut log = AuditLog::new(home.path(), false);
    for i in 0..5u64 {
        let at = Timestamp::from_secs(1_771_070_700 + i);
        let fields = FieldsNamed::default();
        let event = if i % 2 == 0 {
            AgentEvent::Sent {
                kind: "context".into(),
                packet_id: format!("pkt_{i}"),
                to: bob.clone(),
                fields,
            }
        } else {
            AgentEvent::Received {
                kind: "context_request".into(),
                packet_id: format!("pkt_{i}"),
                from: bob.clone(),
                fields,
            }
        };
        let r = AuditRecord {
            at,
            thread_id: Some("thr_1".into()),
            event,
        };
        log.append(&entry_of(&r, &me).unwrap(), at);
    }
    home
}

fn file(home: &Path) -> std::path::PathBuf {
    home.join(DIR).join("2026-02.jsonl")
}

fn lines(home: &Path) -> Vec<String> {
    std::fs::read_to_string(file(home))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn put(home: &Path, lines: &[String]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(file(home), text).unwrap();
}

/// `a2acp --home HOME audit ARGS…`: exit success and stdout.
fn audit(home: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(BIN)
        .arg("--home")
        .arg(home)
        .arg("audit")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn an_intact_log_verifies_and_is_listed_with_filters() {
    let home = home_with_log();
    let (ok, out) = audit(home.path(), &["verify"]);
    assert!(ok, "{out}");
    assert!(out.contains("intact: 5 line(s) in 1 file(s)"), "{out}");
    let (ok, out) = audit(home.path(), &["--direction", "received", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    let (_, out) = audit(
        home.path(),
        &["--peer", "agent:bob@localhost", "--month", "2026-02"],
    );
    assert_eq!(out.lines().count(), 5, "{out}");
    assert!(out
        .contains("-> agent:bob@localhost  Sent context to agent:bob@localhost in thread thr_1."));
    let (_, out) = audit(home.path(), &["--thread", "thr_2"]);
    assert!(out.starts_with("no entries"), "{out}");
}

#[test]
fn each_kind_of_tampering_is_named_with_its_line() {
    type Tamper = fn(&mut Vec<String>);
    let cases: [(&str, Tamper, &str); 3] = [
        (
            "altered",
            |l| l[1] = l[1].replace("pkt_1", "pkt_9"),
            "2026-02.jsonl line 3",
        ),
        (
            "deleted",
            |l| {
                l.remove(2);
            },
            "2026-02.jsonl line 3",
        ),
        ("reordered", |l| l.swap(1, 2), "2026-02.jsonl line 2"),
    ];
    for (what, tamper, at) in cases {
        let home = home_with_log();
        let mut l = lines(home.path());
        tamper(&mut l);
        put(home.path(), &l);
        let (ok, out) = audit(home.path(), &["verify"]);
        assert!(!ok, "{what}: {out}");
        assert!(out.contains(&format!("BROKEN at {at}:")), "{what}: {out}");
    }
    // A last line cut short.
    let home = home_with_log();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(file(home.path()))
        .unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - 40).unwrap();
    let (ok, out) = audit(home.path(), &["verify", "--json"]);
    assert!(!ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["file"].as_str(), v["line"].as_u64()),
        (Some("2026-02.jsonl"), Some(5))
    );
    assert!(v["error"].as_str().unwrap().contains("cut short"), "{v}");
}
