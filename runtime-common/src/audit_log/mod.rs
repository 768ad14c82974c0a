//! The principal's audit log on disk (seed 004 §6): `audit/YYYY-MM.jsonl` in the agent's
//! home, one line per message sent or received, each chained to the one before
//! ([`a2acp_core::audit_log::chain`]). The core decides what a line says
//! ([`a2acp_core::audit_log::entry_of`]); this module only appends it.
//!
//! Each line is written with one `write` of the whole line and its `\n` to a file opened
//! for appending, before the packets of the same step are sent: a process killed at any
//! point leaves every line written whole in the kernel's hands, and at worst the last
//! one cut short. At the next start the writer finds such a torn line, ends it and
//! chains a note to its bytes ([`NoteKind::TornLine`]), so `a2acp audit verify` reports
//! it instead of it vanishing. With `--sync full` the file is also synced after each
//! step, like the database.
//!
//! A disk that refuses a write never stops the agent: the entry is counted as lost, the
//! agent's log says so once, each later entry tries again (opening the file afresh), and
//! the first line that gets through is preceded by a note of how many were lost
//! ([`NoteKind::EntriesLost`]).

mod read;

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use a2acp_core::audit_log::chain::{line_hash, seal, GENESIS};
use a2acp_core::audit_log::{month_of, Entry, LogNote, NoteKind};
use a2acp_core::Timestamp;

pub use read::{check, list, render, show, verify, Filter, ListError, Verified};

/// The folder of the log in the agent's home.
pub const DIR: &str = "audit";

/// The log of one agent.
#[derive(Debug)]
pub struct AuditLog {
    dir: PathBuf,
    sync: bool,
    open: Option<Open>,
    /// Entries that could not be written since the disk began refusing.
    lost: u64,
    /// The first refusal's error, once said in the agent's log.
    failing: Option<String>,
    written: u64,
}

#[derive(Debug)]
struct Open {
    file: File,
    month: String,
    prev: String,
}

/// The month files of `dir`, oldest first: names `YYYY-MM.jsonl`.
pub fn month_files(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for e in rd {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(m) = name.strip_suffix(".jsonl") {
            if m.len() == 7 && month_of(&format!("{m}-01T00:00:00Z")) == Some(m) {
                out.push((m.to_string(), e.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

impl AuditLog {
    /// The log in `home_dir/audit`; `sync`: sync the file after each step. Nothing is
    /// opened before the first entry.
    pub fn new(home_dir: &Path, sync: bool) -> AuditLog {
        AuditLog {
            dir: home_dir.join(DIR),
            sync,
            open: None,
            lost: 0,
            failing: None,
            written: 0,
        }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Lines written by this process.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Entries lost since the disk began refusing (0 when writing works).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Appends `entry` (already scrubbed). Never fails: a refusal is counted, said once
    /// in the agent's log, and tried again with the next entry.
    pub fn append(&mut self, entry: &Entry, now: Timestamp) {
        match self.try_append(entry, now) {
            Ok(()) => {
                if let Some(e) = self.failing.take() {
                    tracing::info!(
                        "audit log writable again after {} lost entr(y/ies) ({e})",
                        self.lost
                    );
                }
                self.lost = 0;
            }
            Err(e) => {
                self.open = None;
                self.lost += 1;
                if self.failing.is_none() {
                    tracing::warn!(
                        "audit log: cannot write to {}: {e}; the agent goes on, entries are counted and the log will say how many were lost",
                        self.dir.display()
                    );
                    self.failing = Some(e.to_string());
                }
            }
        }
    }

    /// Syncs the file written last (after a step, with `--sync full`).
    pub fn sync(&mut self) {
        if !self.sync {
            return;
        }
        if let Some(o) = &self.open {
            if let Err(e) = o.file.sync_data() {
                tracing::debug!("audit log: sync failed: {e}");
            }
        }
    }

    fn try_append(&mut self, entry: &Entry, now: Timestamp) -> std::io::Result<()> {
        let month = month_of(&entry.ts)
            .map(str::to_string)
            .ok_or_else(|| std::io::Error::other("entry without a month"))?;
        if self.open.is_none() {
            self.open = Some(self.resume(now)?);
        }
        let mut o = self
            .open
            .take()
            .ok_or_else(|| std::io::Error::other("not open"))?;
        // A month never goes back: an entry dated before the current file (the clock
        // moved back) goes into it.
        if month > o.month {
            o = Open {
                file: open_append(&self.dir.join(format!("{month}.jsonl")))?,
                month,
                prev: o.prev,
            };
            sync_dir(&self.dir);
        }
        if self.lost > 0 {
            let note = LogNote::new(
                now,
                NoteKind::EntriesLost,
                format!(
                    "{} entr(y/ies) could not be written: the disk refused ({})",
                    self.lost,
                    self.failing.as_deref().unwrap_or("unknown error")
                ),
            );
            write_line(&mut o, &note)?;
        }
        let r = write_line(&mut o, entry);
        if r.is_ok() {
            self.written += 1;
            self.open = Some(o);
        }
        r
    }

    /// Opens the latest month file for appending (creating the folder and the current
    /// month's file if there is none) and finds the hash to chain to; ends a torn last
    /// line and chains a note to it.
    fn resume(&self, now: Timestamp) -> std::io::Result<Open> {
        std::fs::create_dir_all(&self.dir)?;
        restrict(&self.dir, 0o700);
        let files = month_files(&self.dir)?;
        let mut prev = GENESIS.to_string();
        // The newest file with a line in it gives the hash to chain to.
        for (_, path) in files.iter().rev() {
            if let Some(tail) = last_line(path)? {
                prev = match tail {
                    Tail::Whole(line) => line_hash(&line),
                    Tail::Torn(fragment) => {
                        tracing::warn!(
                            "audit log: the last line of {} was cut short (a crash while writing); it is kept, and a note records it",
                            path.display()
                        );
                        let mut f = open_append(path)?;
                        f.write_all(b"\n")?;
                        let mut o = Open {
                            file: f,
                            month: String::new(),
                            prev: line_hash(&fragment),
                        };
                        let note = LogNote::new(
                            now,
                            NoteKind::TornLine,
                            format!(
                                "the line before was cut short ({} bytes) by a crash while it was written; it is kept as it was",
                                fragment.len()
                            ),
                        );
                        write_line(&mut o, &note)?;
                        o.prev
                    }
                };
                break;
            }
        }
        let (month, path) = match files.last() {
            Some((m, p)) => (m.clone(), p.clone()),
            None => {
                let m = month_of(&now.to_rfc3339()).unwrap_or("1970-01").to_string();
                let p = self.dir.join(format!("{m}.jsonl"));
                (m, p)
            }
        };
        let file = open_append(&path)?;
        sync_dir(&self.dir);
        Ok(Open { file, month, prev })
    }
}

/// Writes `v` chained to `o.prev` as one line, in one write.
fn write_line(o: &mut Open, v: &impl serde::Serialize) -> std::io::Result<()> {
    let line = seal(v, &o.prev).ok_or_else(|| std::io::Error::other("entry not an object"))?;
    let mut bytes = line.into_bytes();
    bytes.push(b'\n');
    o.file.write_all(&bytes)?;
    o.file.flush()?;
    bytes.pop();
    o.prev = line_hash(&bytes);
    Ok(())
}

fn open_append(path: &Path) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path)
}

fn restrict(path: &Path, mode: u32) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// How a file ends.
enum Tail {
    /// Its last line, whole (without its `\n`).
    Whole(Vec<u8>),
    /// The bytes after its last `\n`: a line cut short.
    Torn(Vec<u8>),
}

/// The last line of `path` (`None` if the file is empty), read from its end.
fn last_line(path: &Path) -> std::io::Result<Option<Tail>> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    if len == 0 {
        return Ok(None);
    }
    let mut window: u64 = 64 * 1024;
    loop {
        let start = len.saturating_sub(window);
        f.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        let torn = buf.last() != Some(&b'\n');
        let body = if torn {
            &buf[..]
        } else {
            &buf[..buf.len() - 1]
        };
        match body.iter().rposition(|b| *b == b'\n') {
            Some(i) => {
                let line = body[i + 1..].to_vec();
                return Ok(Some(if torn {
                    Tail::Torn(line)
                } else {
                    Tail::Whole(line)
                }));
            }
            None if start == 0 => {
                let line = body.to_vec();
                return Ok(Some(if torn {
                    Tail::Torn(line)
                } else {
                    Tail::Whole(line)
                }));
            }
            None => window = window.saturating_mul(4),
        }
    }
}

#[cfg(test)]
mod tests;
