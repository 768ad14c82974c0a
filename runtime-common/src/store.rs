//! The durable key/value store behind the core's [`PersistOp`]s: one SQLite file.
//!
//! The core's contract: apply persist operations in the order polled, and make every one
//! durable before executing any later `Send`. [`Store::apply`] applies a whole batch in one
//! transaction and returns only after the commit, so a runtime drains one input's outputs,
//! applies their persists, and only then executes the sends. With
//! [`Durability::Full`] (the default) SQLite syncs the write-ahead log on every commit:
//! what was acknowledged survives a power cut; [`Durability::Normal`] survives a crash of
//! the process (`kill -9`) but may lose the last commits on a power cut.
//!
//! The file is opened in exclusive locking mode: a second process opening the same store
//! gets [`StoreError::Busy`] instead of corrupting the first one's state.
//!
//! Records live in `kv(key TEXT NOT NULL UNIQUE, value BLOB NOT NULL)`, a rowid table
//! (the values — a relay's queued packets are ~3 KB — fit in the table's leaf pages,
//! where a `WITHOUT ROWID` table, meant for small rows, spilled each to overflow pages).
//! A store written by an earlier version, whose `kv` was `WITHOUT ROWID`, is migrated on
//! open, in one transaction, keeping every record.

use std::path::{Path, PathBuf};

use a2acp_core::agent::AuditRecord;
use a2acp_core::persist::PersistOp;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};

/// How hard a commit tries to reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=FULL`: every commit is synced (survives power loss).
    #[default]
    Full,
    /// `synchronous=NORMAL` in WAL mode: survives a process crash, not a power cut.
    Normal,
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "full" => Ok(Durability::Full),
            "normal" => Ok(Durability::Normal),
            _ => Err(format!("unknown durability `{s}` (full or normal)")),
        }
    }
}

/// What went wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process holds the store.
    #[error("{path} is in use by another a2acp process (only one may run on it at a time)")]
    Busy {
        /// The database file.
        path: PathBuf,
    },
    /// SQLite failed.
    #[error("storage error on {path}: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// The error.
        #[source]
        source: rusqlite::Error,
    },
}

/// One line of the audit log as stored: the text of an [`AuditRecord`]'s event (what the
/// agent's `AgentEvent` displays), for people to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditLine {
    /// When.
    pub at: a2acp_core::Timestamp,
    /// The thread, if any.
    pub thread_id: Option<String>,
    /// The audit line.
    pub event: String,
}

/// One SQLite database holding a state machine's records.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS kv (key TEXT NOT NULL UNIQUE, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    thread TEXT,
    event TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER NOT NULL,
    undo INTEGER NOT NULL,
    thread TEXT NOT NULL,
    action TEXT NOT NULL,
    details TEXT NOT NULL,
    done_at INTEGER NOT NULL,
    PRIMARY KEY (id, undo)
);
";

impl Store {
    /// Opens (creating if needed) the store at `path` and takes its lock.
    pub fn open(path: &Path, durability: Durability) -> Result<Store, StoreError> {
        let conn = Connection::open(path).map_err(|e| wrap(path, e))?;
        {
            // Only the owner may read an agent's threads or a relay's queue.
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        }
        Self::init(conn, path.to_path_buf(), durability)
    }

    /// A store in memory (tests, benchmarks): nothing survives the process.
    pub fn in_memory() -> Result<Store, StoreError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|e| wrap(&path, e))?;
        Self::init(conn, path, Durability::Normal)
    }

    /// Writes a consistent copy of the whole database to `to` (a new file): how a backup
    /// copies the database of a running agent, which holds it exclusively.
    pub fn snapshot(&self, to: &Path) -> Result<(), StoreError> {
        self.conn
            .execute("VACUUM INTO ?1", [to.to_string_lossy()])
            .map(|_| ())
            .map_err(|e| wrap(to, e))
    }

    fn init(conn: Connection, path: PathBuf, durability: Durability) -> Result<Store, StoreError> {
        let sync = match durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        // A 64 MiB page cache keeps a busy relay's queue and index in memory; checkpoints
        // every 4096 WAL pages (16 MiB) instead of 1000 merge the many rewrites of the
        // same pages (a queued packet is usually deleted soon after it was written).
        let setup = format!(
            "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; PRAGMA synchronous={sync}; \
             PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY; PRAGMA wal_autocheckpoint=4096;"
        );
        conn.busy_timeout(std::time::Duration::from_millis(200))
            .map_err(|e| wrap(&path, e))?;
        if let Err(e) = conn.execute_batch(&setup) {
            return Err(wrap(&path, e));
        }
        Self::migrate(&conn).map_err(|e| wrap(&path, e))?;
        if let Err(e) = conn.execute_batch(SCHEMA) {
            return Err(wrap(&path, e));
        }
        // Take the exclusive lock now (it is held until the connection closes).
        conn.execute_batch("BEGIN EXCLUSIVE; COMMIT;")
            .map_err(|e| wrap(&path, e))?;
        Ok(Store { conn, path })
    }

    /// Rewrites a `kv` table of the earlier `WITHOUT ROWID` schema as the rowid table of
    /// [`SCHEMA`], with every record, in one transaction (nothing to do otherwise).
    fn migrate(conn: &Connection) -> rusqlite::Result<()> {
        let sql: Option<String> = conn
            .query_row(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'kv'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        let old = sql.is_some_and(|s| s.to_ascii_uppercase().contains("WITHOUT ROWID"));
        if !old {
            return Ok(());
        }
        conn.execute_batch(
            "BEGIN IMMEDIATE;
             CREATE TABLE kv_migrated (key TEXT NOT NULL UNIQUE, value BLOB NOT NULL);
             INSERT INTO kv_migrated (key, value) SELECT key, value FROM kv ORDER BY key;
             DROP TABLE kv;
             ALTER TABLE kv_migrated RENAME TO kv;
             COMMIT;",
        )
        .inspect_err(|_| {
            let _ = conn.execute_batch("ROLLBACK;");
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record, in key order — what `Agent::restore` and `Relay::restore` take.
    pub fn load_all(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT key, value FROM kv ORDER BY key")
            .map_err(|e| wrap(&self.path, e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(|e| wrap(&self.path, e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| wrap(&self.path, e))
    }

    /// The records whose key starts with `prefix`, in key order.
    pub fn with_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT key, value FROM kv WHERE substr(key, 1, length(?1)) = ?1 ORDER BY key")
            .map_err(|e| wrap(&self.path, e))?;
        let rows = stmt
            .query_map([prefix], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .map_err(|e| wrap(&self.path, e))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(|e| wrap(&self.path, e))
    }

    /// One record.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.conn
            .query_row("SELECT value FROM kv WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(|e| wrap(&self.path, e))
    }

    /// Number of records.
    pub fn len(&self) -> Result<usize, StoreError> {
        self.conn
            .query_row("SELECT COUNT(*) FROM kv", [], |r| r.get::<_, i64>(0))
            .map(|n| usize::try_from(n).unwrap_or(0))
            .map_err(|e| wrap(&self.path, e))
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    /// Applies `ops` in order and appends `audit`, in one transaction; returns after the
    /// commit. An empty batch does nothing.
    pub fn apply(&mut self, ops: &[PersistOp], audit: &[AuditRecord]) -> Result<(), StoreError> {
        if ops.is_empty() && audit.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(|e| wrap(&path, e))?;
        {
            let mut put = tx
                .prepare_cached(
                    "INSERT INTO kv (key, value) VALUES (?1, ?2) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                )
                .map_err(|e| wrap(&path, e))?;
            let mut del = tx
                .prepare_cached("DELETE FROM kv WHERE key = ?1")
                .map_err(|e| wrap(&path, e))?;
            for op in ops {
                match op {
                    PersistOp::Put { key, value } => put.execute(params![key, value]),
                    PersistOp::Delete { key } => del.execute(params![key]),
                }
                .map_err(|e| wrap(&path, e))?;
            }
            let mut au = tx
                .prepare_cached("INSERT INTO audit (at, thread, event) VALUES (?1, ?2, ?3)")
                .map_err(|e| wrap(&path, e))?;
            for a in audit {
                let at = i64::try_from(a.at.as_millis()).unwrap_or(i64::MAX);
                au.execute(params![at, a.thread_id, a.event.to_string()])
                    .map_err(|e| wrap(&path, e))?;
            }
        }
        tx.commit().map_err(|e| wrap(&path, e))
    }

    /// Records that action `id` (or its undo) was carried out; `false` if it already was
    /// (actions are idempotent across restarts: the core re-asks unanswered ones).
    pub fn record_action(
        &mut self,
        id: u64,
        undo: bool,
        thread: &str,
        action: &str,
        details: &str,
        at: u64,
    ) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute(
                "INSERT OR IGNORE INTO actions (id, undo, thread, action, details, done_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    i64::try_from(id).unwrap_or(i64::MAX),
                    undo,
                    thread,
                    action,
                    details,
                    i64::try_from(at).unwrap_or(i64::MAX)
                ],
            )
            .map_err(|e| wrap(&self.path, e))?;
        Ok(n == 1)
    }

    /// The last `n` audit records, oldest first (optionally of one thread).
    pub fn audit_tail(&self, thread: Option<&str>, n: usize) -> Result<Vec<AuditLine>, StoreError> {
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        let mut stmt = self
            .conn
            .prepare(
                "SELECT at, thread, event FROM audit WHERE (?1 IS NULL OR thread = ?1) ORDER BY seq DESC LIMIT ?2",
            )
            .map_err(|e| wrap(&self.path, e))?;
        let rows = stmt
            .query_map(params![thread, limit], |r| {
                Ok(AuditLine {
                    at: a2acp_core::Timestamp::from_millis(
                        u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                    ),
                    thread_id: r.get(1)?,
                    event: r.get(2)?,
                })
            })
            .map_err(|e| wrap(&self.path, e))?;
        let mut v = rows
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| wrap(&self.path, e))?;
        v.reverse();
        Ok(v)
    }
}

fn wrap(path: &Path, e: rusqlite::Error) -> StoreError {
    if let rusqlite::Error::SqliteFailure(f, _) = &e {
        if matches!(f.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) {
            return StoreError::Busy {
                path: path.to_path_buf(),
            };
        }
    }
    StoreError::Sqlite {
        path: path.to_path_buf(),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &str, v: &str) -> PersistOp {
        PersistOp::Put {
            key: k.into(),
            value: v.as_bytes().to_vec(),
        }
    }

    #[test]
    fn batch_in_order_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        {
            let mut s = Store::open(&path, Durability::Full).unwrap();
            s.apply(
                &[
                    put("b", "1"),
                    put("a", "2"),
                    PersistOp::Delete { key: "b".into() },
                    put("b", "3"),
                    put("c", "x"),
                    PersistOp::Delete { key: "c".into() },
                ],
                &[],
            )
            .unwrap();
        }
        let s = Store::open(&path, Durability::Full).unwrap();
        let all = s.load_all().unwrap();
        assert_eq!(
            all,
            vec![("a".into(), b"2".to_vec()), ("b".into(), b"3".to_vec())]
        );
    }

    #[test]
    fn old_without_rowid_store_is_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let big = vec![7u8; 3300];
        {
            // What the previous version created and wrote.
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "PRAGMA journal_mode=WAL;
                 CREATE TABLE kv (key TEXT PRIMARY KEY NOT NULL, value BLOB NOT NULL) WITHOUT ROWID;
                 CREATE TABLE audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, thread TEXT, event TEXT NOT NULL);",
            )
            .unwrap();
            for i in 0..500u32 {
                let v = if i % 2 == 0 {
                    big.clone()
                } else {
                    i.to_string().into_bytes()
                };
                c.execute(
                    "INSERT INTO kv (key, value) VALUES (?1, ?2)",
                    params![format!("q/agent:a@x/{i:020}"), v],
                )
                .unwrap();
            }
            c.execute(
                "INSERT INTO audit (at, thread, event) VALUES (1, 't', 'e')",
                [],
            )
            .unwrap();
        }
        let want: Vec<(String, Vec<u8>)> = (0..500u32)
            .map(|i| {
                let v = if i % 2 == 0 {
                    big.clone()
                } else {
                    i.to_string().into_bytes()
                };
                (format!("q/agent:a@x/{i:020}"), v)
            })
            .collect();
        {
            let mut s = Store::open(&path, Durability::Full).unwrap();
            assert_eq!(s.load_all().unwrap(), want);
            assert_eq!(s.audit_tail(None, 10).unwrap().len(), 1);
            // The new table: upserts and deletes by key work as before.
            s.apply(
                &[
                    put("q/agent:a@x/00000000000000000001", "new"),
                    PersistOp::Delete {
                        key: "q/agent:a@x/00000000000000000002".into(),
                    },
                ],
                &[],
            )
            .unwrap();
        }
        let s = Store::open(&path, Durability::Full).unwrap();
        let sql: String = s
            .conn
            .query_row("SELECT sql FROM sqlite_master WHERE name = 'kv'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert!(!sql.to_ascii_uppercase().contains("WITHOUT ROWID"), "{sql}");
        let all = s.load_all().unwrap();
        assert_eq!(all.len(), 499);
        assert_eq!(
            s.get("q/agent:a@x/00000000000000000001").unwrap(),
            Some(b"new".to_vec())
        );
        assert_eq!(s.get("q/agent:a@x/00000000000000000002").unwrap(), None);
        assert_eq!(
            s.get("q/agent:a@x/00000000000000000000").unwrap(),
            Some(big)
        );
    }

    #[test]
    fn second_process_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let _a = Store::open(&path, Durability::Full).unwrap();
        match Store::open(&path, Durability::Full) {
            Err(StoreError::Busy { .. }) => {}
            other => panic!("expected Busy, got {other:?}"),
        }
    }

    #[test]
    fn actions_are_idempotent() {
        let mut s = Store::in_memory().unwrap();
        assert!(s.record_action(1, false, "t", "a", "{}", 5).unwrap());
        assert!(!s.record_action(1, false, "t", "a", "{}", 6).unwrap());
        assert!(s.record_action(1, true, "t", "a", "{}", 7).unwrap());
    }
}
