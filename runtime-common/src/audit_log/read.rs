//! Reading the log: `a2acp audit` (entries, filtered) and `a2acp audit verify` (the
//! chain, line by line).

use std::io::BufRead;
use std::path::Path;

use a2acp_core::audit_log::chain::{Broken, TornLine, Verifier};
use a2acp_core::audit_log::LOG_NOTE;
use serde_json::Value;

use super::month_files;

/// Which entries `a2acp audit` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only exchanges with this agent (its address or id) or principal.
    pub peer: Option<String>,
    /// Only this thread (or space).
    pub thread: Option<String>,
    /// Only this month (`YYYY-MM`).
    pub month: Option<String>,
    /// Only `sent` or `received`.
    pub direction: Option<String>,
}

impl Filter {
    /// Whether `entry` passes. The log's own notes pass only when no filter but the
    /// month is set.
    pub fn passes(&self, entry: &Value) -> bool {
        let s = |path: &[&str]| -> Option<&str> {
            let mut v = entry;
            for k in path {
                v = v.get(k)?;
            }
            v.as_str()
        };
        if s(&["type"]) == Some(LOG_NOTE) {
            return self.peer.is_none() && self.thread.is_none() && self.direction.is_none();
        }
        if let Some(d) = &self.direction {
            if s(&["direction"]) != Some(d.as_str()) {
                return false;
            }
        }
        if let Some(t) = &self.thread {
            if s(&["thread"]) != Some(t.as_str()) {
                return false;
            }
        }
        if let Some(p) = &self.peer {
            let p = p.to_ascii_lowercase();
            let is = |x: Option<&str>| x.is_some_and(|x| x.to_ascii_lowercase() == p);
            let other = if s(&["direction"]) == Some("sent") {
                "to"
            } else {
                "from"
            };
            if !is(s(&[other, "agent"])) && !is(s(&[other, "principal"])) {
                return false;
            }
        }
        true
    }
}

/// Why the log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// A file could not be read.
    #[error("cannot read the audit log in {dir}: {source}")]
    Io {
        /// The folder.
        dir: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// `--month` is not `YYYY-MM`.
    #[error("--month: `{0}` is not YYYY-MM")]
    BadMonth(String),
}

/// The entries of the log in `dir` that pass `filter`, oldest first (lines that are not
/// JSON — a line torn by a crash — are left out; `verify` names them).
pub fn list(dir: &Path, filter: &Filter) -> Result<Vec<Value>, ListError> {
    let io = |source| ListError::Io {
        dir: dir.display().to_string(),
        source,
    };
    if let Some(m) = &filter.month {
        if a2acp_core::audit_log::month_of(&format!("{m}-01T00:00:00Z")) != Some(m.as_str())
            || m.len() != 7
        {
            return Err(ListError::BadMonth(m.clone()));
        }
    }
    let mut out = Vec::new();
    for (month, path) in month_files(dir).map_err(io)? {
        if filter.month.as_ref().is_some_and(|m| *m != month) {
            continue;
        }
        let f = std::io::BufReader::new(std::fs::File::open(&path).map_err(io)?);
        for line in f.split(b'\n') {
            let line = line.map_err(io)?;
            if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                if filter.passes(&v) {
                    out.push(v);
                }
            }
        }
    }
    Ok(out)
}

/// An entry as one line for a person: time, direction, the other side, the summary.
pub fn render(v: &Value) -> String {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
    let ts = s("ts");
    if s("type") == LOG_NOTE {
        return format!("{ts}  (log)  {}", s("summary"));
    }
    let (arrow, other) = if s("direction") == "sent" {
        ("->", "to")
    } else {
        ("<-", "from")
    };
    let peer = v
        .get(other)
        .and_then(|p| p.get("agent"))
        .and_then(Value::as_str)
        .unwrap_or("?");
    let line = format!("{ts}  {arrow} {peer}  {}", s("summary"));
    a2acp_core::display::line(&line, a2acp_core::display::MAX_RECORD).into_owned()
}

/// What `a2acp audit verify` found in an intact log.
#[derive(Debug, Clone)]
pub struct Verified {
    /// Lines checked.
    pub lines: u64,
    /// Month files checked.
    pub files: usize,
    /// The hash of the last line.
    pub head: String,
    /// Lines torn by a crash and acknowledged by the agent.
    pub torn: Vec<TornLine>,
}

/// Checks the chain of the log in `dir`: `Ok` if intact, else the first broken line
/// (`Err(Ok(broken))`) or why the log could not be read (`Err(Err(io))`).
pub fn verify(dir: &Path) -> Result<Verified, Result<Broken, ListError>> {
    let io = |source| {
        Err(ListError::Io {
            dir: dir.display().to_string(),
            source,
        })
    };
    let mut v = Verifier::new();
    for (month, path) in month_files(dir).map_err(io)? {
        v.start_file(&format!("{month}.jsonl"));
        let mut f = std::io::BufReader::new(std::fs::File::open(&path).map_err(io)?);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = f.read_until(b'\n', &mut buf).map_err(io)?;
            if n == 0 {
                v.end_file(&[]).map_err(Ok)?;
                break;
            }
            match buf.strip_suffix(b"\n") {
                Some(line) => v.line(line).map_err(Ok)?,
                None => {
                    v.end_file(&buf).map_err(Ok)?;
                    break;
                }
            }
        }
    }
    Ok(Verified {
        lines: v.lines(),
        files: v.files(),
        head: v.head().to_string(),
        torn: v.torn().to_vec(),
    })
}

/// `a2acp audit`: the entries of the log in `dir` passing `filter`, one per line (or as
/// a JSON array with `json`), cleaned for the terminal.
pub fn show(dir: &Path, filter: &Filter, json: bool) -> Result<String, ListError> {
    let entries = list(dir, filter)?;
    if json {
        return Ok(serde_json::to_string_pretty(&entries).unwrap_or_default());
    }
    if entries.is_empty() {
        return Ok(format!("no entries in {}", dir.display()));
    }
    Ok(entries.iter().map(render).collect::<Vec<_>>().join("\n"))
}

/// `a2acp audit verify`: the report, and whether the chain is intact.
pub fn check(dir: &Path, json: bool) -> (String, bool) {
    let torn = |t: &[TornLine]| -> Vec<String> {
        t.iter()
            .map(|t| {
                format!(
                    "{} line {}: cut short by a crash; the agent recorded it when it started again",
                    t.file, t.line
                )
            })
            .collect()
    };
    match verify(dir) {
        Ok(v) => {
            let text = if json {
                serde_json::json!({
                    "ok": true,
                    "lines": v.lines,
                    "files": v.files,
                    "head": v.head,
                    "torn": torn(&v.torn),
                })
                .to_string()
            } else {
                let mut s = format!(
                    "audit log intact: {} line(s) in {} file(s); head {}",
                    v.lines, v.files, v.head
                );
                for t in torn(&v.torn) {
                    s.push_str("\nnote: ");
                    s.push_str(&t);
                }
                s
            };
            (text, true)
        }
        Err(Ok(b)) => {
            let text = if json {
                serde_json::json!({
                    "ok": false,
                    "file": b.file,
                    "line": b.line,
                    "error": b.kind.to_string(),
                })
                .to_string()
            } else {
                format!("audit log BROKEN at {b}")
            };
            (text, false)
        }
        Err(Err(e)) => (e.to_string(), false),
    }
}
