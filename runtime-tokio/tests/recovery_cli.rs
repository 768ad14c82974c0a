//! Recovery words on the real `a2acp` binary, as a person types them: `agent init` shows
//! 24 words once (and a QR code; `--json` for scripts; none with `--no-recovery`) and
//! writes none of them to the home; `agent recovery-key` replaces them; on a new home
//! `agent recover` names a mistyped word, refuses the old words and words of another key,
//! reads the words from stdin, and sets the home up so `agent run` comes online on the new
//! key with its recovery key bound again.

use std::io::Write;
use std::path::Path;
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
        .stdin(Stdio::null())
        .output()
        .expect("run a2acp")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json(o: &Output) -> serde_json::Value {
    let s = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

/// Every byte of every file under `dir`.
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(all_bytes(&p));
        } else if let Ok(b) = std::fs::read(&p) {
            out.extend(b);
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn recovery_words_from_init_to_a_recovered_home() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut kids = Kids(Vec::new());
    let url = start_relay(BIN, &d.join("relay"), &mut kids);

    // `agent init`: the words once, as text with a QR code; nothing of them in the home.
    let alice = d.join("alice");
    let o = a2acp(
        &alice,
        &[
            "agent",
            "init",
            "--address",
            "agent:alice@localhost",
            "--relay",
            &url,
        ],
    );
    let shown = text(&o);
    assert!(o.status.success(), "{shown}");
    assert!(
        shown.contains("recovery key  bound at the relay"),
        "{shown}"
    );
    assert!(shown.contains("shown this once"), "{shown}");
    assert!(
        shown.contains('▀') || shown.contains('▄'),
        "a QR code: {shown}"
    );
    let words: Vec<String> = shown
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .flat_map(|l| {
            l.split_whitespace()
                .filter(|w| !w.ends_with('.'))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(words.len(), 24, "{shown}");
    // Printed in four columns: column-major order, 1–6 in the first column.
    let rows: Vec<&str> = shown
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    let mut ordered = vec![String::new(); 24];
    for (r, l) in rows.iter().enumerate() {
        let ws: Vec<&str> = l.split_whitespace().filter(|w| !w.ends_with('.')).collect();
        for (c, w) in ws.iter().enumerate() {
            ordered[c * rows.len() + r] = w.to_string();
        }
    }
    let phrase = ordered.join(" ");
    // Neither the words (any two in a row) nor their seed (hex, as a key file would hold
    // it) is anywhere in the home.
    let bytes = all_bytes(&alice);
    for pair in ordered.windows(2) {
        let two = pair.join(" ");
        assert!(!contains(&bytes, &two), "`{two}` is written in the home");
    }
    let seed = a2acp_runtime::recovery::parse_words(&phrase).unwrap();
    let hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    assert!(!contains(&bytes, &hex), "the seed is written in the home");

    // `--no-recovery` and `--json`.
    let o = a2acp(
        &d.join("carol"),
        &[
            "agent",
            "init",
            "--address",
            "agent:carol@localhost",
            "--relay",
            &url,
            "--no-recovery",
            "--json",
        ],
    );
    let v = json(&o);
    assert_eq!(v["registered"], true, "{v}");
    assert!(v.get("recovery").is_none(), "{v}");
    let o = a2acp(
        &d.join("dave"),
        &[
            "agent",
            "init",
            "--address",
            "agent:dave@localhost",
            "--relay",
            &url,
            "--json",
        ],
    );
    let v = json(&o);
    assert_eq!(v["recovery"]["bound"], true, "{v}");
    assert_eq!(
        v["recovery"]["words"].as_str().unwrap().split(' ').count(),
        24
    );
    // A new recovery key for dave (his agent does not run): recorded, old words still
    // bound until his next run.
    let o = a2acp(&d.join("dave"), &["agent", "recovery-key", "--json"]);
    let v2 = json(&o);
    assert_eq!(v2["bound"], false, "{v2}");
    assert_ne!(v2["words"], v["recovery"]["words"]);

    // The device is lost.
    std::fs::remove_dir_all(&alice).unwrap();
    let new = d.join("alice-new");
    let recover = |args: &[&str], stdin: Option<&str>| -> Output {
        let mut c = Command::new(BIN)
            .arg("--home")
            .arg(&new)
            .args(["agent", "recover", "--address", "agent:alice@localhost"])
            .args(["--relay", &url])
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = c.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
        drop(input);
        c.wait_with_output().unwrap()
    };
    // A mistyped word is named; nothing is written.
    let typo = phrase.replacen(&ordered[6], "qqqq", 1);
    let o = recover(&["--recovery", &typo], None);
    assert!(!o.status.success());
    assert!(text(&o).contains("word 7 (`qqqq`)"), "{}", text(&o));
    assert!(!new.exists());
    // Dave's words are not Alice's recovery key.
    let dave_words = v2["words"].as_str().unwrap().to_string();
    let o = recover(&["--recovery", &dave_words, "--json"], None);
    let r = json(&o);
    assert!(!o.status.success());
    assert_eq!(r["reason"], "wrong_recovery_key", "{r}");
    assert!(!new.exists());
    // The right words, from stdin.
    let o = recover(&["--json"], Some(&format!("{phrase}\n")));
    let r = json(&o);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(r["state"], "recovered", "{r}");
    assert!(new.join("identity.key").exists() && new.join("config.toml").exists());
    assert!(!new.join("identity.recover.key").exists());

    // The home runs: online on the new key, the recovery key bound again.
    let run = Command::new(BIN)
        .args(["agent", "run", "--no-prompt", "--sync", "normal", "--home"])
        .arg(&new)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kids.0.push(run);
    let s = until(20, "the recovered agent online and bound", || {
        let o = a2acp(&new, &["status", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        (v["online"] == true && v["recovery"]["bound"] == true).then_some(v)
    });
    assert_eq!(s["key"], r["key"], "{s}");
    // A new recovery key for the running agent: bound at once.
    let o = a2acp(&new, &["agent", "recovery-key", "--no-qr"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("is bound at the relay"), "{}", text(&o));
    let o = a2acp(&new, &["status"]);
    assert!(
        text(&o).contains("recovery key: bound at the relay (binding 2)"),
        "{}",
        text(&o)
    );
}
