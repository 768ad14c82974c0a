//! `a2acp agent backup` and `a2acp agent restore` as a person runs them: a new agent
//! (`agent init --offline`) backed up with the passphrase from the environment, restored
//! into a new home with the key and config byte for byte; a short passphrase, a wrong one
//! and a home that is not empty each refused with a message and exit status 1.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_a2acp");
const PASSPHRASE: &str = "a long enough passphrase";

fn a2acp(home: &std::path::Path, args: &[&str], passphrase: &str) -> (bool, String) {
    let out = Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .env("A2ACP_PASSPHRASE", passphrase)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn backup_and_restore_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("alice");
    let (ok, text) = a2acp(
        &old,
        &[
            "agent",
            "init",
            "--address",
            "agent:alice@localhost",
            "--relay",
            "ws://127.0.0.1:9",
            "--offline",
        ],
        PASSPHRASE,
    );
    assert!(ok, "{text}");
    let file = dir.path().join("alice.backup");
    let file_arg = file.to_str().unwrap();

    let (ok, text) = a2acp(&old, &["agent", "backup", "--out", file_arg], "short");
    assert!(!ok && text.contains("at least 12 characters"), "{text}");
    assert!(!file.exists());

    let (ok, text) = a2acp(&old, &["agent", "backup", "--out", file_arg], PASSPHRASE);
    assert!(ok, "{text}");
    assert!(text.contains("written to"), "{text}");

    let new = dir.path().join("alice-new");
    let (ok, text) = a2acp(&new, &["agent", "restore", file_arg], "not the passphrase");
    assert!(!ok && text.contains("passphrase is wrong"), "{text}");
    assert!(!new.exists());

    let (ok, text) = a2acp(&new, &["agent", "restore", file_arg], PASSPHRASE);
    assert!(ok, "{text}");
    for f in ["identity.key", "config.toml"] {
        assert_eq!(
            std::fs::read(old.join(f)).unwrap(),
            std::fs::read(new.join(f)).unwrap(),
            "{f}"
        );
    }
    let (ok, text) = a2acp(&new, &["agent", "restore", file_arg], PASSPHRASE);
    assert!(!ok && text.contains("not empty"), "{text}");
}
