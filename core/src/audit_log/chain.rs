//! The hash chain that makes the log tamper-evident (SPEC-NOTES "Audit log").
//!
//! Every line is one JSON object whose last member is `"prev"`: the lowercase hex
//! SHA-256 of the bytes of the line before it — exactly the bytes in the file, without
//! the `\n` that ends it. The chain runs through the month files in the order of their
//! names (`YYYY-MM.jsonl`): the first line of a month carries the hash of the last line
//! of the month before it, and the very first line [`GENESIS`]. A line cut short by a
//! crash is kept; the writer ends it with `\n` and the next line, a [`LogNote`] of kind
//! [`NoteKind::TornLine`], carries the hash of that fragment.
//!
//! [`Verifier`] checks a log given file by file; it is pure (the runtime reads the files).
//!
//! [`LogNote`]: super::LogNote
//! [`NoteKind::TornLine`]: super::NoteKind::TornLine

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{NoteKind, LOG_NOTE};

/// The `prev` of the first line of a log: 64 zeros.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The hash a line's successor carries: lowercase hex SHA-256 of `line` (no `\n`).
pub fn line_hash(line: &[u8]) -> String {
    let digest = Sha256::digest(line);
    let mut out = String::with_capacity(64);
    for b in digest {
        for nibble in [b >> 4, b & 15] {
            out.push(char::from_digit(u32::from(nibble), 16).unwrap_or('0'));
        }
    }
    out
}

/// The line of `entry` (an object) chained to `prev`: its members, then `"prev"`; no
/// `\n`. `None` if `entry` does not serialise to an object.
pub fn seal(entry: &impl Serialize, prev: &str) -> Option<String> {
    let mut v = serde_json::to_value(entry).ok()?;
    let map = v.as_object_mut()?;
    map.remove("prev");
    map.insert("prev".into(), Value::String(prev.into()));
    serde_json::to_string(&v).ok()
}

/// Why a line breaks the chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BreakKind {
    /// Not a JSON object with a string `prev`, and no torn-line note acknowledges it.
    #[error("not a log line (altered, or cut short)")]
    NotALine,
    /// Its `prev` is not the hash of the line before it: a line was altered, deleted,
    /// inserted or moved here.
    #[error("its prev is not the hash of the line before it (expected {expected}, found {found})")]
    Mismatch {
        /// The hash of the line before it.
        expected: String,
        /// What it carries.
        found: String,
    },
    /// The file's last line has no `\n`: a write cut short (a crash, a full disk, or a
    /// writer still at work) the agent has not yet acknowledged.
    #[error("the last line is cut short (no newline at its end)")]
    Torn,
}

/// The first line that breaks the chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file} line {line}: {kind}")]
pub struct Broken {
    /// The file.
    pub file: String,
    /// The line, from 1.
    pub line: u64,
    /// Why.
    pub kind: BreakKind,
}

/// A line torn by a crash that the next line acknowledges (not a break).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// The file.
    pub file: String,
    /// The line, from 1.
    pub line: u64,
}

/// Checks a log file by file, in the order of their names, line by line (a month of a
/// million lines is never held in memory): [`Verifier::start_file`], then
/// [`Verifier::line`] for each line ended by `\n`, then [`Verifier::end_file`] with what
/// follows the last `\n`; or [`Verifier::file`] with a whole file.
#[derive(Debug, Clone)]
pub struct Verifier {
    prev: String,
    lines: u64,
    files: usize,
    file: String,
    line_no: u64,
    /// A line that is not a log line, waiting for the next line to acknowledge it.
    fragment: Option<(u64, String)>,
    torn: Vec<TornLine>,
}

impl Default for Verifier {
    fn default() -> Self {
        Verifier::new()
    }
}

impl Verifier {
    /// A verifier at the start of a log.
    pub fn new() -> Verifier {
        Verifier {
            prev: GENESIS.into(),
            lines: 0,
            files: 0,
            file: String::new(),
            line_no: 0,
            fragment: None,
            torn: Vec::new(),
        }
    }

    fn broken(&self, line: u64, kind: BreakKind) -> Broken {
        Broken {
            file: self.file.clone(),
            line,
            kind,
        }
    }

    /// The next file begins.
    pub fn start_file(&mut self, name: &str) {
        self.files += 1;
        self.file = name.to_string();
        self.line_no = 0;
    }

    /// The next line of the file (without its `\n`).
    pub fn line(&mut self, line: &[u8]) -> Result<(), Broken> {
        self.line_no += 1;
        let parsed = prev_of(line);
        if let Some((at, hash)) = self.fragment.take() {
            // A fragment a crash left is accepted when this line is the torn-line note
            // chained to its bytes.
            match &parsed {
                Some((p, Some(NoteKind::TornLine))) if *p == hash => {
                    self.torn.push(TornLine {
                        file: self.file.clone(),
                        line: at,
                    });
                }
                _ => return Err(self.broken(at, BreakKind::NotALine)),
            }
        } else {
            match &parsed {
                Some((found, _)) if *found == self.prev => {}
                Some((found, _)) => {
                    return Err(self.broken(
                        self.line_no,
                        BreakKind::Mismatch {
                            expected: self.prev.clone(),
                            found: found.clone(),
                        },
                    ))
                }
                None => self.fragment = Some((self.line_no, line_hash(line))),
            }
        }
        self.prev = line_hash(line);
        self.lines += 1;
        Ok(())
    }

    /// The file ends; `tail` is what follows its last `\n` (empty if nothing).
    pub fn end_file(&mut self, tail: &[u8]) -> Result<(), Broken> {
        if let Some((at, _)) = self.fragment.take() {
            return Err(self.broken(at, BreakKind::NotALine));
        }
        if !tail.is_empty() {
            return Err(self.broken(self.line_no + 1, BreakKind::Torn));
        }
        Ok(())
    }

    /// Checks the next file, `name`, whose whole content is `bytes`.
    pub fn file(&mut self, name: &str, bytes: &[u8]) -> Result<(), Broken> {
        self.start_file(name);
        let mut rest = bytes;
        while let Some(i) = rest.iter().position(|b| *b == b'\n') {
            let (line, after) = rest.split_at(i);
            self.line(line)?;
            rest = after.get(1..).unwrap_or_default();
        }
        self.end_file(rest)
    }

    /// Lines checked.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Files checked.
    pub fn files(&self) -> usize {
        self.files
    }

    /// The hash of the last line (the log's head; [`GENESIS`] when empty): noted
    /// elsewhere, it lets a later check see that lines were removed from the end.
    pub fn head(&self) -> &str {
        &self.prev
    }

    /// Lines torn by a crash and acknowledged by the writer.
    pub fn torn(&self) -> &[TornLine] {
        &self.torn
    }
}

/// A line's `prev`, and its note kind if it is a log note; `None` if it is not a JSON
/// object with a string `prev`.
fn prev_of(line: &[u8]) -> Option<(String, Option<NoteKind>)> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let m = v.as_object()?;
    let prev = m.get("prev")?.as_str()?.to_string();
    let note = (m.get("type").and_then(Value::as_str) == Some(LOG_NOTE))
        .then(|| {
            m.get("note")
                .and_then(|n| serde_json::from_value::<NoteKind>(n.clone()).ok())
        })
        .flatten();
    Some((prev, note))
}
