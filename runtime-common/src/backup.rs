//! An agent's encrypted backup, and its restore on another machine (issue: identity
//! across devices, part 1; spec §13.2 "User switches devices: keypair synced via
//! encrypted backup"). `a2acp agent backup --out FILE` writes everything the agent is —
//! its identity key, `config.toml`, a consistent copy of `agent.db` (every thread's state,
//! open prompts, memory, permissions), the principal's audit log and the calendar files —
//! encrypted under a passphrase; `a2acp agent restore FILE --home DIR` writes it into a new
//! home, whose agent then resumes every thread. Its relay lets the last connection of an
//! address win, so the old device, if it comes back, is replaced and changes nothing.
//!
//! The file (SPEC-NOTES "Backup and a new device"):
//!
//! ```text
//! "A2ACP-BACKUP" 0x00 (13 bytes) | version (1 byte, 1)
//! | Argon2id m_cost KiB (u32 BE) | t_cost (u32 BE) | p_cost (u32 BE) | salt (16 bytes)
//! | nonce (24 bytes) | XChaCha20-Poly1305(key, nonce, ad = every byte before it, content)
//! key = Argon2id(passphrase, salt, m, t, p) → 32 bytes
//! content = entries: name length (u32 BE) | name (UTF-8, `/`-separated, relative)
//!                    | data length (u64 BE) | data
//! ```

use std::io::Write as _;
use std::path::{Component, Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::home::Home;

/// The file's first bytes.
pub const MAGIC: &[u8; 13] = b"A2ACP-BACKUP\0";
/// The format this version writes and reads.
pub const VERSION: u8 = 1;
/// Argon2id's memory, in KiB (64 MiB: RFC 9106's second recommended option).
pub const M_COST: u32 = 64 * 1024;
/// Argon2id's passes.
pub const T_COST: u32 = 3;
/// Argon2id's lanes.
pub const P_COST: u32 = 1;
/// The shortest passphrase a backup is written with.
pub const MIN_PASSPHRASE: usize = 12;
/// The largest backup read or written (everything is held in memory once).
pub const MAX_SIZE: u64 = 1 << 30;
/// Argon2id parameters read from a file are refused beyond these (a file that would make
/// the restore allocate or spin without end).
const MAX_M_COST: u32 = 4 * 1024 * 1024;
const MAX_T_COST: u32 = 64;
const MAX_P_COST: u32 = 16;
const HEADER: usize = 13 + 1 + 12 + 16 + 24;

/// Why a backup or a restore failed. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The passphrase is too short to protect the identity key.
    #[error("the passphrase must be at least {MIN_PASSPHRASE} characters")]
    WeakPassphrase,
    /// Not an a2acp backup.
    #[error("{0} is not an a2acp backup")]
    NotABackup(String),
    /// A backup of a newer format.
    #[error("{path} was written by a newer a2acp (backup format {version}; this one reads {VERSION}): update a2acp to restore it")]
    Newer {
        /// The file.
        path: String,
        /// Its format.
        version: u8,
    },
    /// Shorter than its header.
    #[error("{0} is truncated")]
    Truncated(String),
    /// The AEAD refused it: the passphrase is wrong, or the file was altered or cut short
    /// (the two cannot be told apart, by design).
    #[error("cannot open {0}: the passphrase is wrong, or the file was altered or truncated")]
    CannotOpen(String),
    /// Its parameters or contents are not what this version writes.
    #[error("{path} is damaged: {why}")]
    Damaged {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// The home to restore into is not empty.
    #[error("{0} exists and is not empty: restore into a new directory")]
    HomeNotEmpty(String),
    /// The agent runs and holds its database: its copy must come from the agent itself
    /// (the control socket's `snapshot`).
    #[error("the agent of {0} is running and holds its database")]
    Running(String),
    /// The agent to back up has no home.
    #[error("no agent in {0}")]
    NoAgent(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The database could not be copied.
    #[error("copying the agent's database: {0}")]
    Database(String),
    /// No randomness for the salt and nonce.
    #[error("no randomness: {0}")]
    Random(String),
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn derive(passphrase: &str, salt: &[u8], m: u32, t: u32, p: u32) -> Result<[u8; 32], String> {
    let params = argon2::Params::new(m, t, p, Some(32)).map_err(|e| e.to_string())?;
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut key = [0u8; 32];
    argon
        .hash_password_into(passphrase.as_bytes(), salt, &mut key)
        .map_err(|e| e.to_string())?;
    Ok(key)
}

/// The files of `home` a backup holds, by their name in it: every regular file under the
/// home but the database (copied consistently instead), its journal, the control socket
/// and other sockets.
fn collect(home: &Home, snapshot: Option<&Path>) -> Result<Vec<(String, Vec<u8>)>, BackupError> {
    let root = home.dir();
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    let skip = |name: &str| {
        name == "agent.db"
            || name.starts_with("agent.db-")
            || name.starts_with(".agent.db.backup-")
            || name.starts_with(crate::agentic::DB_FILE)
            || name.starts_with(".agentic.db.backup-")
            || name.ends_with(".sock")
    };
    while let Some(d) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)
            .map_err(io(&d))?
            .filter_map(Result::ok)
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let Ok(kind) = e.file_type() else { continue };
            let rel = path
                .strip_prefix(root)
                .map(|r| r.to_string_lossy().replace('\\', "/"))
                .unwrap_or_default();
            if kind.is_dir() {
                dirs.push(path);
            } else if kind.is_file() && !(d == root && skip(&rel)) {
                out.push((rel, std::fs::read(&path).map_err(io(&path))?));
            }
        }
    }
    // The Agentic Protocol store (WAL: readable while the agent writes), as one
    // consistent copy.
    let agentic = root.join(crate::agentic::DB_FILE);
    if agentic.exists() {
        let tmp = root.join(format!(".agentic.db.backup-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let copy = rusqlite::Connection::open(&agentic).and_then(|c| {
            c.busy_timeout(std::time::Duration::from_secs(5))?;
            c.execute("VACUUM INTO ?1", [tmp.to_string_lossy()])
                .map(|_| ())
        });
        let bytes = copy
            .map_err(|e| BackupError::Database(e.to_string()))
            .and_then(|()| std::fs::read(&tmp).map_err(io(&tmp)));
        let _ = std::fs::remove_file(&tmp);
        out.push((crate::agentic::DB_FILE.into(), bytes?));
    }
    // The database, as one consistent copy: the running agent's (`snapshot`), or made
    // here when no agent holds it.
    if let Some(snap) = snapshot {
        out.push(("agent.db".into(), std::fs::read(snap).map_err(io(snap))?));
        return Ok(out);
    }
    let db = home.db();
    if db.exists() {
        let tmp = root.join(format!(".agent.db.backup-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let locked = |e: &rusqlite::Error| {
            matches!(e, rusqlite::Error::SqliteFailure(f, _)
                if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
        };
        let copy = rusqlite::Connection::open(&db).and_then(|c| {
            c.execute("VACUUM INTO ?1", [tmp.to_string_lossy()])
                .map(|_| ())
        });
        match copy {
            Ok(()) => {}
            Err(e) if locked(&e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(BackupError::Running(root.display().to_string()));
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(BackupError::Database(e.to_string()));
            }
        }
        let bytes = std::fs::read(&tmp).map_err(io(&tmp));
        let _ = std::fs::remove_file(&tmp);
        out.push(("agent.db".into(), bytes?));
    }
    Ok(out)
}

/// Writes the encrypted backup of the agent of `home` to `out` (written whole to a
/// temporary file beside it, then renamed: a failure leaves nothing).
/// [`BackupError::Running`] when the agent runs: then ask it for a copy of its database
/// (`snapshot`) and give that to [`backup_with`].
pub fn backup(home: &Home, out: &Path, passphrase: &str) -> Result<u64, BackupError> {
    backup_with(home, out, passphrase, (M_COST, T_COST, P_COST), None)
}

/// [`backup`] with other Argon2id parameters (tests; a machine with little memory) and,
/// for a running agent, the copy of its database it made (`snapshot`).
pub fn backup_with(
    home: &Home,
    out: &Path,
    passphrase: &str,
    (m, t, p): (u32, u32, u32),
    snapshot: Option<&Path>,
) -> Result<u64, BackupError> {
    if passphrase.chars().count() < MIN_PASSPHRASE {
        return Err(BackupError::WeakPassphrase);
    }
    if !home.config().exists() || !home.key().exists() {
        return Err(BackupError::NoAgent(home.dir().display().to_string()));
    }
    let mut content = Vec::new();
    for (name, data) in collect(home, snapshot)? {
        content.extend_from_slice(&(name.len() as u32).to_be_bytes());
        content.extend_from_slice(name.as_bytes());
        content.extend_from_slice(&(data.len() as u64).to_be_bytes());
        content.extend_from_slice(&data);
    }
    if content.len() as u64 > MAX_SIZE {
        return Err(BackupError::Damaged {
            path: home.dir().display().to_string(),
            why: format!("more than {MAX_SIZE} bytes to back up"),
        });
    }
    let mut salt = [0u8; 16];
    let mut nonce = [0u8; 24];
    getrandom::fill(&mut salt).map_err(|e| BackupError::Random(e.to_string()))?;
    getrandom::fill(&mut nonce).map_err(|e| BackupError::Random(e.to_string()))?;
    let mut file = Vec::with_capacity(HEADER + content.len() + 16);
    file.extend_from_slice(MAGIC);
    file.push(VERSION);
    for x in [m, t, p] {
        file.extend_from_slice(&x.to_be_bytes());
    }
    file.extend_from_slice(&salt);
    file.extend_from_slice(&nonce);
    let key = derive(passphrase, &salt, m, t, p).map_err(|why| BackupError::Damaged {
        path: out.display().to_string(),
        why,
    })?;
    let ct = XChaCha20Poly1305::new((&key).into())
        .encrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: &content,
                aad: &file,
            },
        )
        .map_err(|_| BackupError::Database("encryption failed".into()))?;
    file.extend_from_slice(&ct);
    let tmp = out.with_extension("partial");
    {
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600));
        }
        f.write_all(&file).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    std::fs::rename(&tmp, out).map_err(io(out))?;
    Ok(file.len() as u64)
}

/// The entries of the backup `path`, decrypted with `passphrase`.
pub fn open(path: &Path, passphrase: &str) -> Result<Vec<(String, Vec<u8>)>, BackupError> {
    let name = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(io(path))?;
    if meta.len() > MAX_SIZE + 1024 {
        return Err(BackupError::Damaged {
            path: name,
            why: format!("larger than {MAX_SIZE} bytes"),
        });
    }
    let file = std::fs::read(path).map_err(io(path))?;
    let Some((head, _)) = file.split_at_checked(MAGIC.len() + 1) else {
        return Err(if MAGIC.starts_with(&file) {
            BackupError::Truncated(name)
        } else {
            BackupError::NotABackup(name)
        });
    };
    if &head[..MAGIC.len()] != MAGIC {
        return Err(BackupError::NotABackup(name));
    }
    let version = head[MAGIC.len()];
    if version > VERSION {
        return Err(BackupError::Newer {
            path: name,
            version,
        });
    }
    if version != VERSION {
        return Err(BackupError::Damaged {
            path: name,
            why: format!("unknown format {version}"),
        });
    }
    let Some((header, ct)) = file.split_at_checked(HEADER) else {
        return Err(BackupError::Truncated(name));
    };
    let u32_at = |i: usize| {
        header
            .get(i..i + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_be_bytes)
            .unwrap_or(0)
    };
    let (m, t, p) = (u32_at(14), u32_at(18), u32_at(22));
    if m > MAX_M_COST || t > MAX_T_COST || p > MAX_P_COST || m == 0 || t == 0 || p == 0 {
        return Err(BackupError::Damaged {
            path: name,
            why: format!("Argon2id parameters out of bounds (m {m} KiB, t {t}, p {p})"),
        });
    }
    let salt = &header[26..42];
    let nonce = &header[42..66];
    let key = derive(passphrase, salt, m, t, p).map_err(|why| BackupError::Damaged {
        path: name.clone(),
        why,
    })?;
    let content = XChaCha20Poly1305::new((&key).into())
        .decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: ct,
                aad: header,
            },
        )
        .map_err(|_| BackupError::CannotOpen(name.clone()))?;
    let damaged = |why: &str| BackupError::Damaged {
        path: name.clone(),
        why: why.into(),
    };
    let mut entries = Vec::new();
    let mut rest = content.as_slice();
    while !rest.is_empty() {
        let (n, r) = rest
            .split_first_chunk::<4>()
            .ok_or_else(|| damaged("a cut entry"))?;
        let (entry, r) = r
            .split_at_checked(u32::from_be_bytes(*n) as usize)
            .ok_or_else(|| damaged("a cut entry name"))?;
        let (l, r) = r
            .split_first_chunk::<8>()
            .ok_or_else(|| damaged("a cut entry"))?;
        let len =
            usize::try_from(u64::from_be_bytes(*l)).map_err(|_| damaged("an entry too large"))?;
        let (data, r) = r
            .split_at_checked(len)
            .ok_or_else(|| damaged("a cut entry"))?;
        let entry =
            String::from_utf8(entry.to_vec()).map_err(|_| damaged("an entry name not UTF-8"))?;
        // Only relative names inside the home.
        let safe = !entry.is_empty()
            && Path::new(&entry)
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
        if !safe {
            return Err(damaged(&format!("an entry outside the home: {entry:?}")));
        }
        entries.push((entry, data.to_vec()));
        rest = r;
    }
    Ok(entries)
}

/// Restores the backup `path` into the new home `dir` (absent or empty): written to a
/// directory beside it, then renamed into place, so a failure leaves nothing behind.
pub fn restore(path: &Path, passphrase: &str, dir: &Path) -> Result<usize, BackupError> {
    restore_with(path, passphrase, dir, &mut |_| {})
}

/// The directory beside `dir` a restore writes into before renaming it to `dir`:
/// `.NAME.restoring-PID`.
fn staging_prefix(dir: &Path) -> String {
    format!(
        ".{}.restoring-",
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    )
}

/// [`restore`], calling `written` with each file's name once it is written and synced
/// (the crash tests stop the process there).
///
/// A restore killed at any point leaves `dir` absent (or as empty as it was) and at most
/// a staging directory beside it, `.NAME.restoring-PID`, which the next restore into
/// `dir` removes. Nothing of a half restore can run as an agent: the staging directory is
/// not the home, and its identity key and `config.toml` — without which no agent starts —
/// are written last, after every other file, and only then is it renamed into place.
pub fn restore_with(
    path: &Path,
    passphrase: &str,
    dir: &Path,
    written: &mut dyn FnMut(&str),
) -> Result<usize, BackupError> {
    if dir.exists() {
        let empty = std::fs::read_dir(dir).map_err(io(dir))?.next().is_none();
        if !empty {
            return Err(BackupError::HomeNotEmpty(dir.display().to_string()));
        }
    }
    let mut entries = open(path, passphrase)?;
    let has = |name: &str| entries.iter().any(|(n, _)| n == name);
    if !has("config.toml") || !has("identity.key") {
        return Err(BackupError::Damaged {
            path: path.display().to_string(),
            why: "no agent in it (config.toml and the identity key)".into(),
        });
    }
    // What makes a home an agent's comes last (a stable sort keeps the rest in order).
    entries.sort_by_key(|(n, _)| n == "identity.key" || n == "config.toml");
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&parent).map_err(io(&parent))?;
    let prefix = staging_prefix(dir);
    // What a restore into the same home left when it was killed.
    if let Ok(list) = std::fs::read_dir(&parent) {
        for e in list.filter_map(Result::ok) {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let staging = parent.join(format!("{prefix}{}", std::process::id()));
    let result = (|| {
        for (name, data) in &entries {
            let target = staging.join(name);
            if let Some(p) = target.parent() {
                std::fs::create_dir_all(p).map_err(io(p))?;
            }
            let mut f = std::fs::File::create(&target).map_err(io(&target))?;
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600));
            f.write_all(data).map_err(io(&target))?;
            f.sync_all().map_err(io(&target))?;
            written(name);
        }
        if dir.exists() {
            std::fs::remove_dir(dir).map_err(io(dir))?;
        }
        std::fs::rename(&staging, dir).map_err(io(dir))?;
        // The rename itself, durable.
        if let Ok(d) = std::fs::File::open(&parent) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    Ok(entries.len())
}

/// The passphrase: the environment's `A2ACP_PASSPHRASE`, else the first line of `file`,
/// else asked on the terminal without echo (twice when `confirm`, for a new backup).
pub fn passphrase(file: Option<&Path>, confirm: bool) -> Result<String, String> {
    if let Ok(p) = std::env::var("A2ACP_PASSPHRASE") {
        return Ok(p);
    }
    if let Some(f) = file {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        return Ok(text.lines().next().unwrap_or("").to_string());
    }
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        return Err("no passphrase: set A2ACP_PASSPHRASE or give --passphrase-file".into());
    }
    let first = ask("Passphrase: ").map_err(|e| e.to_string())?;
    if confirm && ask("The same again: ").map_err(|e| e.to_string())? != first {
        return Err("the two passphrases differ".into());
    }
    Ok(first)
}

/// One line from the terminal, not echoed.
fn ask(prompt: &str) -> std::io::Result<String> {
    use crossterm::event::{read, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    crossterm::terminal::enable_raw_mode()?;
    let mut s = String::new();
    let done = loop {
        match read() {
            Ok(Event::Key(KeyEvent {
                code,
                modifiers,
                kind: KeyEventKind::Press,
                ..
            })) => match code {
                KeyCode::Enter => break Ok(()),
                KeyCode::Backspace => {
                    s.pop();
                }
                KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => {
                    break Err(std::io::Error::new(
                        std::io::ErrorKind::Interrupted,
                        "interrupted",
                    ))
                }
                KeyCode::Char(c) => s.push(c),
                _ => {}
            },
            Ok(_) => {}
            Err(e) => break Err(e),
        }
    };
    let _ = crossterm::terminal::disable_raw_mode();
    eprintln!();
    done.map(|()| s)
}
