//! Where an agent's files live: one directory (its *home*).
//!
//! | file | what |
//! | --- | --- |
//! | `config.toml` | address, relay URL, profile, permission tiers, overrides, limits |
//! | `identity.key` | the Ed25519 identity seed (mode 0600) |
//! | `identity.next.key` | the new key of a rotation under way (mode 0600) |
//! | `identity.recover.key` | the new key of a recovery under way (mode 0600) |
//! | `agent.db` | SQLite: the core's records (threads, outbox, peers, settings), audit log, actions |
//! | `agent.sock` | the control socket of a running agent |
//! | `agent.log` | logs of an interactive `agent run` (the terminal shows prompts instead) |
//! | `audit/YYYY-MM.jsonl` | the principal's audit log (seed 004 §6), [`crate::audit_log`] |
//!
//! The default home is `$A2ACP_HOME`, else `$XDG_DATA_HOME/a2acp`, else
//! `~/.local/share/a2acp`.

use std::path::{Path, PathBuf};

/// The files of one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    dir: PathBuf,
}

impl Home {
    /// The home at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Home { dir: dir.into() }
    }

    /// `--home`, else the default home.
    pub fn resolve(dir: Option<&Path>) -> Self {
        match dir {
            Some(d) => Home::new(d),
            None => Home::new(default_dir()),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `config.toml`.
    pub fn config(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    /// `identity.key`.
    pub fn key(&self) -> PathBuf {
        self.dir.join("identity.key")
    }

    /// `identity.next.key`: the key of a rotation under way (`a2acp keys rotate`),
    /// written before it is used; it replaces `identity.key` once the relay installed it.
    pub fn next_key(&self) -> PathBuf {
        self.dir.join("identity.next.key")
    }

    /// `identity.recover.key`: the new key of a recovery under way (`a2acp agent
    /// recover`), written before the relay is asked; it becomes `identity.key` once the
    /// relay installed the recovery.
    pub fn recover_key(&self) -> PathBuf {
        self.dir.join("identity.recover.key")
    }

    /// `agent.db`.
    pub fn db(&self) -> PathBuf {
        self.dir.join("agent.db")
    }

    /// `agent.sock`.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("agent.sock")
    }

    /// `agent.log`.
    pub fn log(&self) -> PathBuf {
        self.dir.join("agent.log")
    }
}

/// `$A2ACP_HOME`, else `$XDG_DATA_HOME/a2acp`, else `$HOME/.local/share/a2acp`, else
/// `./.a2acp`.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("A2ACP_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(d).join("a2acp");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".local/share/a2acp");
    }
    PathBuf::from(".a2acp")
}
