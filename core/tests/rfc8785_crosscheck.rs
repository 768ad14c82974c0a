//! Cross-check of the canonical JSON (RFC 8785, seed 002 Appendix A) against an
//! independent implementation: the Python `rfc8785` package, which `.ci/test-deps` installs
//! into a virtual environment (`target/rfc8785-venv`). The same tricky documents go through
//! both; the bytes and the SHA-256 hashes must be equal.
//!
//! The interpreter is `$A2ACP_RFC8785_PYTHON`, else the venv's. The test is ignored (with
//! the reason) unless run with `--run-ignored all`, as the README's test command and CI do;
//! then a missing interpreter fails it with the command that installs it.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use a2acp_core::memory::canonical;
use serde_json::Value;

/// Documents chosen where canonicalizers go wrong: ECMAScript number forms (exponent
/// thresholds 1e21 and 1e-7, negative zero, shortest round trip), keys ordered by UTF-16
/// code units (a surrogate pair against U+FB01 and U+E000), escapes, nesting, nulls.
const DOCUMENTS: &[&str] = &[
    r#"[1e21, 1E-7, -0, 0.0, -0.0, 1e20, 0.000001, 1e-6, 4.50, 2e-7, 1.2345678901234568e20, -9007199254740991]"#,
    r#"[0.1, 0.2, 0.30000000000000004, 1.7976931348623157e308, 5e-324, -1.5e-300, 9007199254740991, 333333333.3333333]"#,
    r#"{"\ufb01": 1, "\ud83d\ude00": 2, "\ue000": 3, "a": 4, "\u00e9": 5, "A": 6, "": 7, "aa": 8, "\u0080": 9}"#,
    r#"{"peach": "This sorting order", "péché": "is wrong according to French", "pêche": "but canonicalization MUST", "sin":   "ignore locale"}"#,
    r#"{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}"#,
    r#"["\u0000\u0001\u001f\u007f", "\"quoted\" \\ back\\slash / slash", "\b\f\n\r\t", "\u2028\u2029", "\ud834\udd1e", "é as \u00e9"]"#,
    r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}"#,
    r#"{"b": null, "a": {"z": [null, {"y": null, "x": 1}], "c": null}, "nested": {"deeper": {"deepest": [[], {}, [{}]]}}}"#,
    r#"{"package_id":"pkg_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d","project_id":"proj_dev_relay","relay_version":"0.1","title":"Shipped archive/de-archive","status":"complete","package_type":"milestone","review_type":"none","created_at":"2026-04-18T20:00:00Z","created_by":{"id":"jordan","type":"human","session_id":null},"tags":["archive","cli"],"decisions_made":["Soft archive via archived_at timestamp"],"open_questions":[],"handoff_note":"Migration 009 applied, dashboard filter works.","significance":5,"x-trust-score":0.75}"#,
];

/// For each document read from stdin (a JSON array of JSON texts): one line with the hex
/// of its RFC 8785 bytes, a space, and the hex of the bytes with `null` object members
/// dropped first (Appendix A).
const PYTHON: &str = r#"
import json, sys, rfc8785
def drop(v):
    if isinstance(v, dict):
        return {k: drop(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [drop(x) for x in v]
    return v
for text in json.load(sys.stdin):
    doc = json.loads(text)
    print(rfc8785.dumps(doc).hex(), rfc8785.dumps(drop(doc)).hex())
"#;

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("A2ACP_RFC8785_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/rfc8785-venv/bin/python");
    assert!(
        venv.exists(),
        "no Python rfc8785 venv at target/rfc8785-venv: run `bash .ci/test-deps` (or set $A2ACP_RFC8785_PYTHON)"
    );
    venv
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
#[ignore = "needs the Python rfc8785 reference: bash .ci/test-deps"]
fn canonical_json_matches_the_python_rfc8785_package() {
    let python = python();
    let mut child = Command::new(&python)
        .arg("-c")
        .arg(PYTHON)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let input = serde_json::to_vec(DOCUMENTS).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), DOCUMENTS.len());
    for (text, line) in DOCUMENTS.iter().zip(lines) {
        let (theirs_plain, theirs_canonical) = line.split_once(' ').unwrap();
        let doc: Value = serde_json::from_str(text).unwrap();
        let plain = canonical::rfc8785(&doc).unwrap();
        let ours = canonical::canonical_json(&doc).unwrap();
        assert_eq!(
            hex(&plain),
            theirs_plain,
            "RFC 8785 bytes differ for {text}: ours {}",
            String::from_utf8_lossy(&plain)
        );
        assert_eq!(
            hex(&ours),
            theirs_canonical,
            "Appendix A bytes differ for {text}"
        );
        let theirs_bytes: Vec<u8> = (0..theirs_canonical.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&theirs_canonical[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(
            canonical::content_hash(&doc).unwrap(),
            canonical::sha256_hex(&theirs_bytes),
            "hashes differ for {text}"
        );
    }
}
