//! The Agentic Protocol service's storage: SQLite tables in their own file
//! (`agentic.db` in the agent's home) — projects, packages with their content hashes,
//! a full-text index of the packages (FTS5), facts with their validity, sessions. Every
//! decision is the core's (`a2acp_core::bridge::agentic`); this reads rows, asks, and
//! writes what it answers, each operation in one transaction.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

mod ndjson;
mod outcomes;

pub use ndjson::Imported;
pub use outcomes::USER_REVIEWER;

use a2acp_core::bridge::agentic::{
    callsign, digest, facts, ops, rfc3339, search, Access, AgenticError, Project, Session,
    SESSION_IDLE,
};
use a2acp_core::memory::{Fact, Package};
use a2acp_core::Timestamp;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde_json::{Map, Value};

/// Why an operation failed: refused by the protocol, or the storage failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The protocol's refusal (a 4xx, or 501 for a missing capability).
    #[error(transparent)]
    Refused(#[from] AgenticError),
    /// A request body that is not `application/json` (415).
    #[error("the body is not application/json")]
    UnsupportedMedia,
    /// SQLite failed.
    #[error("storage: {0}")]
    Storage(String),
}

impl From<rusqlite::Error> for ServiceError {
    fn from(e: rusqlite::Error) -> Self {
        ServiceError::Storage(e.to_string())
    }
}

type Result<T> = std::result::Result<T, ServiceError>;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS ap_projects (
    project_id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL,
    created_at TEXT NOT NULL, archived_at TEXT);
CREATE TABLE IF NOT EXISTS ap_packages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, package_id TEXT NOT NULL UNIQUE,
    project_id TEXT NOT NULL, created_at_ms INTEGER NOT NULL, package_type TEXT NOT NULL,
    status TEXT NOT NULL, body TEXT NOT NULL, content_hash TEXT NOT NULL,
    deposit_hash TEXT NOT NULL, asks INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS ap_packages_time ON ap_packages (project_id, created_at_ms);
CREATE INDEX IF NOT EXISTS ap_packages_asks ON ap_packages (project_id, asks, created_at_ms);
CREATE INDEX IF NOT EXISTS ap_packages_status ON ap_packages (project_id, status);
CREATE TABLE IF NOT EXISTS ap_facts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, fact_id TEXT NOT NULL UNIQUE,
    project_id TEXT NOT NULL, subject TEXT NOT NULL, predicate TEXT NOT NULL,
    valid_from_ms INTEGER NOT NULL, valid_to_ms INTEGER, body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS ap_facts_series ON ap_facts (project_id, subject, predicate, valid_from_ms);
CREATE TABLE IF NOT EXISTS ap_sessions (
    session_id TEXT PRIMARY KEY NOT NULL, project_id TEXT NOT NULL, actor_id TEXT NOT NULL,
    actor_type TEXT NOT NULL, callsign TEXT, started_at TEXT NOT NULL, ended_at TEXT,
    last_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ap_session_packages (
    session_id TEXT NOT NULL, n INTEGER NOT NULL, package_id TEXT NOT NULL,
    PRIMARY KEY (session_id, n));
CREATE INDEX IF NOT EXISTS ap_sessions_actor ON ap_sessions (project_id, actor_id, actor_type);
";

const FTS: &str = "CREATE VIRTUAL TABLE IF NOT EXISTS ap_packages_fts USING fts5(title, text, tokenize = 'unicode61')";

/// The newest packages an orientation or a digest reads per project.
pub const DIGEST_PACKAGES: usize = 200;
/// The most packages one pull returns.
pub const MAX_LIMIT: usize = 200;
/// The most packages listed per session (`GET …/sessions`; an export lists all).
pub const MAX_SESSION_LIST: usize = 1000;
/// The most current facts a bundle carries per project.
pub const MAX_BUNDLE_FACTS: usize = 500;

/// A stored package and what the deposit did.
#[derive(Debug, Clone)]
pub struct Deposited {
    /// The package as stored.
    pub package: Package,
    /// Whether this deposit stored it (false: an identical re-deposit).
    pub created: bool,
    /// The session it was recorded in.
    pub session: Option<Session>,
}

/// The service's store.
#[derive(Debug)]
pub struct AgenticStore {
    conn: Mutex<Connection>,
    fts: bool,
}

impl AgenticStore {
    /// Opens (creating) the store at `path`.
    pub fn open(path: &Path) -> Result<AgenticStore> {
        let conn = Connection::open(path)?;
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Self::init(conn)
    }

    /// A store in memory (tests, benches).
    pub fn in_memory() -> Result<AgenticStore> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<AgenticStore> {
        conn.execute_batch(SCHEMA)?;
        // FTS5 is compiled into the bundled SQLite; a build without it serves
        // `mode=relevant` as 501 and says so in the descriptor.
        let fts = conn.execute_batch(FTS).is_ok();
        Ok(AgenticStore {
            conn: Mutex::new(conn),
            fts,
        })
    }

    /// Whether `mode=relevant` is served (full-text search is there).
    pub fn has_search(&self) -> bool {
        self.fts
    }

    fn conn(&self) -> Result<MutexGuard<'_, Connection>> {
        self.conn
            .lock()
            .map_err(|_| ServiceError::Storage("the store's lock is poisoned".into()))
    }

    // ---- projects ----

    /// Every project the caller reaches.
    pub fn projects(&self, access: &Access) -> Result<Vec<Project>> {
        let conn = self.conn()?;
        let mut st = conn.prepare(
            "SELECT project_id, name, created_at, archived_at FROM ap_projects ORDER BY project_id",
        )?;
        let rows = st.query_map([], project_row)?;
        let mut out = Vec::new();
        for p in rows {
            let p = p?;
            if access.check_project(&p.project_id).is_ok() {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// One project.
    pub fn project(&self, access: &Access, project_id: &str) -> Result<Project> {
        access.check_project(project_id)?;
        let conn = self.conn()?;
        get_project(&conn, project_id)?
            .ok_or_else(|| AgenticError::ProjectNotFound(project_id.to_string()).into())
    }

    /// Creates a project or renames it.
    pub fn put_project(
        &self,
        access: &Access,
        project_id: &str,
        name: &str,
        now: Timestamp,
    ) -> Result<Project> {
        access.check_project(project_id)?;
        check_id("project_id", project_id)?;
        let conn = self.conn()?;
        conn.execute(
            "INSERT INTO ap_projects (project_id, name, created_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (project_id) DO UPDATE SET name = excluded.name",
            params![project_id, name, rfc3339(now)],
        )?;
        get_project(&conn, project_id)?
            .ok_or_else(|| AgenticError::ProjectNotFound(project_id.to_string()).into())
    }

    /// Archives a project (`archived_at` set) or brings it back.
    pub fn set_archived(
        &self,
        access: &Access,
        project_id: &str,
        archived: bool,
        now: Timestamp,
    ) -> Result<Project> {
        access.check_project(project_id)?;
        let conn = self.conn()?;
        let at = archived.then(|| rfc3339(now));
        let n = conn.execute(
            "UPDATE ap_projects SET archived_at = CASE WHEN ?2 IS NULL THEN NULL ELSE COALESCE(archived_at, ?2) END WHERE project_id = ?1",
            params![project_id, at],
        )?;
        if n == 0 {
            return Err(AgenticError::ProjectNotFound(project_id.to_string()).into());
        }
        get_project(&conn, project_id)?
            .ok_or_else(|| AgenticError::ProjectNotFound(project_id.to_string()).into())
    }

    // ---- deposit ----

    /// `deposit` (§8.1) into `project_id` (created on its first deposit).
    pub fn deposit(
        &self,
        access: &Access,
        project_id: &str,
        body: Value,
        now: Timestamp,
    ) -> Result<Deposited> {
        let package = ops::check_deposit(project_id, body, access)?;
        check_id("package_id", package.package_id())?;
        check_id("project_id", project_id)?;
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        match get_project(&tx, project_id)? {
            Some(p) => p.check_writable()?,
            None => {
                tx.execute(
                    "INSERT INTO ap_projects (project_id, name, created_at) VALUES (?1, ?1, ?2)",
                    params![project_id, rfc3339(now)],
                )?;
            }
        }
        let existing: Option<(String, String, String)> = tx
            .query_row(
                "SELECT body, content_hash, deposit_hash FROM ap_packages WHERE package_id = ?1",
                [package.package_id()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        if let Some((body, hash, deposit_hash)) = existing {
            ops::redeposit(&package, &deposit_hash)?;
            let stored = read_package(&body, &hash)?;
            return Ok(Deposited {
                package: stored,
                created: false,
                session: None,
            });
        }
        insert_package(&tx, &package, self.fts)?;
        let session = record_session(&tx, access, &package, now)?;
        tx.commit()?;
        Ok(Deposited {
            package,
            created: true,
            session: Some(session),
        })
    }

    // ---- pull ----

    /// `pull` specific (§8.2).
    pub fn package(&self, access: &Access, package_id: &str) -> Result<Package> {
        let conn = self.conn()?;
        let p = get_package(&conn, package_id)?
            .ok_or_else(|| AgenticError::PackageNotFound(package_id.to_string()))?;
        // A package outside the token's projects is not found, so as not to tell it exists.
        if access.check_project(p.project_id()).is_err() {
            return Err(AgenticError::PackageNotFound(package_id.to_string()).into());
        }
        Ok(p)
    }

    /// `pull` latest (§8.2): newest first; only those in `status` when given (the list of
    /// packages awaiting review, §11.4, is `status=awaiting_review`).
    pub fn latest(
        &self,
        access: &Access,
        project_id: &str,
        limit: usize,
        status: Option<&str>,
    ) -> Result<Vec<Package>> {
        access.check_project(project_id)?;
        let conn = self.conn()?;
        require_project(&conn, project_id)?;
        latest_of(&conn, project_id, limit.min(MAX_LIMIT), status, None)
    }

    /// `pull` relevant (§8.2): the full-text index, ranked by BM25.
    pub fn relevant(
        &self,
        access: &Access,
        project_id: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Package>> {
        access.check_project(project_id)?;
        if !self.fts {
            return Err(AgenticError::SearchNotSupported("x-keyword_search".into()).into());
        }
        let conn = self.conn()?;
        require_project(&conn, project_id)?;
        search_in(&conn, Some(project_id), query, limit.min(MAX_LIMIT))
    }

    // ---- orient / orchestrate ----

    /// `orient` (§8.3).
    pub fn orient(
        &self,
        access: &Access,
        project_id: &str,
        window_days: u32,
        now: Timestamp,
    ) -> Result<Value> {
        access.check_project(project_id)?;
        let conn = self.conn()?;
        let project = require_project(&conn, project_id)?;
        let since = digest::window_start(now, window_days);
        let recent = latest_shown(&conn, project_id, digest::ORIENT_PACKAGES, since)?;
        let asking = asking_of(&conn, project_id, digest::ORIENT_ASKING, since)?;
        let active = current_facts(&conn, project_id)?;
        let awaiting: i64 = conn.query_row(
            "SELECT COUNT(*) FROM ap_packages WHERE project_id = ?1 AND status = 'awaiting_review'",
            [project_id],
            |r| r.get(0),
        )?;
        Ok(digest::orient(
            &project,
            &recent,
            &asking,
            &active,
            awaiting as u64,
            window_days,
            now,
        ))
    }

    /// `orchestrate` (§8.4): one project, or every project the caller reaches.
    pub fn orchestrate(
        &self,
        access: &Access,
        project_id: Option<&str>,
        focus: Option<&str>,
        snippets: usize,
        window_days: u32,
        now: Timestamp,
    ) -> Result<Value> {
        let projects = match project_id {
            Some(p) => vec![self.project(access, p)?],
            None => self
                .projects(access)?
                .into_iter()
                .filter(|p| p.archived_at.is_none())
                .collect(),
        };
        let conn = self.conn()?;
        let since = digest::window_start(now, window_days);
        let mut activity = Vec::new();
        for project in projects {
            let id = project.project_id.clone();
            let recent = latest_of(&conn, &id, DIGEST_PACKAGES, None, Some(since))?;
            let mut st = conn.prepare_cached(
                "SELECT package_type, status, COUNT(*) FROM ap_packages
                 WHERE project_id = ?1 AND created_at_ms >= ?2 GROUP BY package_type, status
                 ORDER BY package_type, status",
            )?;
            let counts = st
                .query_map(params![id, since.as_millis() as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let awaiting = latest_of(&conn, &id, MAX_LIMIT, Some("awaiting_review"), None)?;
            let active_facts = current_facts(&conn, &id)?;
            activity.push(digest::ProjectActivity {
                project,
                recent,
                counts,
                active_facts,
                awaiting_review: awaiting,
            });
        }
        let found = match focus.filter(|f| !f.trim().is_empty()) {
            Some(f) if self.fts && snippets > 0 => {
                let mut all = Vec::new();
                for a in &activity {
                    all.extend(search_in(&conn, Some(&a.project.project_id), f, snippets)?);
                }
                all.truncate(snippets);
                all
            }
            _ => Vec::new(),
        };
        Ok(digest::orchestrate(
            &activity,
            project_id.is_none(),
            focus,
            &found,
            window_days,
            now,
        ))
    }

    // ---- review ----

    /// `flag_for_review` (§8.5).
    pub fn flag(&self, access: &Access, package_id: &str, body: &Value) -> Result<Package> {
        self.change(access, package_id, |p| ops::flag(p, body))
    }

    /// A §5.3 transition by a reviewer.
    pub fn review(&self, access: &Access, package_id: &str, body: &Value) -> Result<Package> {
        let reviewer = ops::reviewer(access, body)?;
        self.change(access, package_id, |p| ops::review(p, body, &reviewer))
    }

    fn change(
        &self,
        access: &Access,
        package_id: &str,
        decide: impl FnOnce(&Package) -> std::result::Result<Package, AgenticError>,
    ) -> Result<Package> {
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let current = get_package(&tx, package_id)?
            .ok_or_else(|| AgenticError::PackageNotFound(package_id.to_string()))?;
        if access.check_project(current.project_id()).is_err() {
            return Err(AgenticError::PackageNotFound(package_id.to_string()).into());
        }
        if let Some(p) = get_project(&tx, current.project_id())? {
            p.check_writable()?;
        }
        let next = decide(&current)?;
        let body =
            serde_json::to_string(next.body()).map_err(|e| ServiceError::Storage(e.to_string()))?;
        tx.execute(
            "UPDATE ap_packages SET body = ?2, content_hash = ?3, status = ?4, asks = ?5 WHERE package_id = ?1",
            params![package_id, body, next.content_hash(), ops::status_of(&next), asks(&next)],
        )?;
        tx.commit()?;
        Ok(next)
    }

    // ---- facts ----

    /// `assert_fact` (§8.6): the current fact of the series ends where the new one starts
    /// and the new one is inserted, in one transaction.
    pub fn assert_fact(
        &self,
        access: &Access,
        project_id: &str,
        body: &Value,
        now: Timestamp,
    ) -> Result<Fact> {
        access.check_project(project_id)?;
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        writable_project(&tx, project_id, now)?;
        let subject = body.get("subject").and_then(Value::as_str).unwrap_or("");
        let predicate = body.get("predicate").and_then(Value::as_str).unwrap_or("");
        let sequence: i64 = tx.query_row(
            "SELECT COUNT(*) FROM ap_facts WHERE project_id = ?1 AND subject = ?2 AND predicate = ?3",
            params![project_id, subject, predicate],
            |r| r.get(0),
        )?;
        let current = series_current(&tx, project_id, subject, predicate)?;
        let floor = current.first().map(|c| c.valid_from);
        let fact = facts::parse_assertion(project_id, body, access, now, floor, sequence as u64)?;
        if let Some(end) = facts::supersede(current.first(), &fact)? {
            for c in &current {
                let mut ended = c.clone();
                ended.valid_to = Some(end);
                update_fact(&tx, &ended)?;
            }
        }
        insert_fact(&tx, &fact)?;
        tx.commit()?;
        Ok(fact)
    }

    /// `invalidate_fact` (§8.7): the count of facts ended.
    pub fn invalidate_fact(
        &self,
        access: &Access,
        project_id: &str,
        subject: &str,
        predicate: &str,
        object: Option<&str>,
        now: Timestamp,
    ) -> Result<usize> {
        access.check_project(project_id)?;
        let mut conn = self.conn()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        writable_project(&tx, project_id, now)?;
        let current = series_current(&tx, project_id, subject, predicate)?;
        let ending = facts::to_invalidate(&current, object);
        for f in &ending {
            let mut ended = (*f).clone();
            // `valid_to` never precedes `valid_from` (a fact asserted valid from later).
            ended.valid_to = Some(now.max(f.valid_from));
            update_fact(&tx, &ended)?;
        }
        let n = ending.len();
        tx.commit()?;
        Ok(n)
    }

    /// Facts of a project: current ones, those holding at `at`, or (`history`) every one,
    /// narrowed to a subject and predicate when given.
    pub fn facts(
        &self,
        access: &Access,
        project_id: &str,
        subject: Option<&str>,
        predicate: Option<&str>,
        at: Option<Timestamp>,
        history: bool,
    ) -> Result<Vec<Fact>> {
        access.check_project(project_id)?;
        let conn = self.conn()?;
        require_project(&conn, project_id)?;
        let mut st = conn.prepare_cached(
            "SELECT body FROM ap_facts WHERE project_id = ?1
             AND (?2 IS NULL OR subject = ?2) AND (?3 IS NULL OR predicate = ?3)
             AND (?4 IS NULL OR valid_from_ms <= ?4)
             ORDER BY subject, predicate, valid_from_ms, seq LIMIT 10000",
        )?;
        let at_ms = at.map(|t| t.as_millis() as i64);
        let rows = st
            .query_map(params![project_id, subject, predicate, at_ms], |r| {
                r.get::<_, String>(0)
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let all = rows
            .iter()
            .map(|b| parse_fact(b))
            .collect::<Result<Vec<_>>>()?;
        Ok(if history {
            all
        } else {
            facts::holding(all, at)
        })
    }

    // ---- sessions ----

    /// The sessions of a project, newest first.
    pub fn sessions(&self, access: &Access, project_id: &str) -> Result<Vec<Session>> {
        access.check_project(project_id)?;
        let conn = self.conn()?;
        require_project(&conn, project_id)?;
        let mut st = conn.prepare(
            "SELECT session_id, project_id, actor_id, actor_type, callsign, started_at, ended_at
             FROM ap_sessions WHERE project_id = ?1 ORDER BY started_at DESC, session_id LIMIT 1000",
        )?;
        let rows = st.query_map([project_id], session_row)?;
        let mut out = rows.collect::<rusqlite::Result<Vec<_>>>()?;
        for s in &mut out {
            s.packages_deposited = session_packages(&conn, &s.session_id, MAX_SESSION_LIST)?;
        }
        Ok(out)
    }

    /// Stores already-checked packages in one transaction, without sessions: the bench's
    /// way to fill a project.
    pub fn import_packages(&self, packages: &[Package], now: Timestamp) -> Result<()> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        for p in packages {
            tx.execute(
                "INSERT OR IGNORE INTO ap_projects (project_id, name, created_at) VALUES (?1, ?1, ?2)",
                params![p.project_id(), rfc3339(now)],
            )?;
            insert_package(&tx, p, self.fts)?;
        }
        tx.commit()?;
        Ok(())
    }
}

/// Ids are at most 200 bytes and hold no control characters.
fn check_id(name: &str, id: &str) -> std::result::Result<(), AgenticError> {
    if id.is_empty() || id.len() > 200 || id.chars().any(char::is_control) {
        return Err(AgenticError::InvalidSchema(format!(
            "`{name}` is 1–200 bytes without control characters"
        )));
    }
    Ok(())
}

/// Inserts a checked package (and its full-text row), new to the store.
fn insert_package(conn: &Connection, p: &Package, fts: bool) -> Result<()> {
    let body = serde_json::to_string(p.body()).map_err(|e| ServiceError::Storage(e.to_string()))?;
    conn.execute(
        "INSERT INTO ap_packages (package_id, project_id, created_at_ms, package_type, status, body, content_hash, deposit_hash, asks)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)",
        params![
            p.package_id(),
            p.project_id(),
            p.created_at().as_millis() as i64,
            str_member(p, "package_type"),
            ops::status_of(p),
            body,
            p.content_hash(),
            asks(p)
        ],
    )?;
    if fts {
        conn.execute(
            "INSERT INTO ap_packages_fts (rowid, title, text) VALUES (?1, ?2, ?3)",
            params![conn.last_insert_rowid(), p.title(), searchable_text(p)],
        )?;
    }
    Ok(())
}

/// 1 when the package asks something orient gathers: open questions, or a `question`
/// not complete — drafts never (the `asks` column, indexed).
fn asks(p: &Package) -> i64 {
    let status = ops::status_of(p);
    let question = p.member("package_type").and_then(Value::as_str) == Some("question")
        && status != "complete";
    i64::from(status != "draft" && (question || !p.open_questions().is_empty()))
}

fn str_member<'a>(p: &'a Package, name: &str) -> &'a str {
    p.member(name).and_then(Value::as_str).unwrap_or("")
}

/// What full-text search reads of a package besides its title.
fn searchable_text(p: &Package) -> String {
    let mut parts: Vec<String> = Vec::new();
    for m in ["description", "handoff_note", "content_md", "topic"] {
        if let Some(s) = p.member(m).and_then(Value::as_str) {
            parts.push(s.to_string());
        }
    }
    parts.extend(p.tags());
    parts.extend(p.decisions_made());
    parts.extend(p.open_questions());
    parts.join("\n")
}

fn project_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Project> {
    Ok(Project {
        project_id: r.get(0)?,
        name: r.get(1)?,
        created_at: r.get(2)?,
        archived_at: r.get(3)?,
    })
}

/// The packages a session deposited, in order, at most `limit`.
fn session_packages(conn: &Connection, session_id: &str, limit: usize) -> Result<Vec<String>> {
    let mut st = conn.prepare_cached(
        "SELECT package_id FROM ap_session_packages WHERE session_id = ?1 ORDER BY n LIMIT ?2",
    )?;
    let rows = st.query_map(params![session_id, limit as i64], |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// A session row; its packages are read apart ([`session_packages`]).
fn session_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        session_id: r.get(0)?,
        project_id: r.get(1)?,
        actor_id: r.get(2)?,
        actor_type: r.get(3)?,
        callsign: r.get(4)?,
        started_at: r.get(5)?,
        ended_at: r.get(6)?,
        packages_deposited: Vec::new(),
    })
}

fn get_project(conn: &Connection, project_id: &str) -> Result<Option<Project>> {
    Ok(conn
        .query_row(
            "SELECT project_id, name, created_at, archived_at FROM ap_projects WHERE project_id = ?1",
            [project_id],
            project_row,
        )
        .optional()?)
}

fn require_project(conn: &Connection, project_id: &str) -> Result<Project> {
    get_project(conn, project_id)?
        .ok_or_else(|| AgenticError::ProjectNotFound(project_id.to_string()).into())
}

/// A project a fact is written to: created on first use, refused when archived.
fn writable_project(conn: &Connection, project_id: &str, now: Timestamp) -> Result<()> {
    check_id("project_id", project_id)?;
    match get_project(conn, project_id)? {
        Some(p) => Ok(p.check_writable()?),
        None => {
            conn.execute(
                "INSERT INTO ap_projects (project_id, name, created_at) VALUES (?1, ?1, ?2)",
                params![project_id, rfc3339(now)],
            )?;
            Ok(())
        }
    }
}

/// A stored package, its hash verified (§6.6: a mismatch is reported, not served).
fn read_package(body: &str, hash: &str) -> Result<Package> {
    let map: Map<String, Value> =
        serde_json::from_str(body).map_err(|e| ServiceError::Storage(e.to_string()))?;
    Package::verified(map, hash).map_err(|e| ServiceError::Storage(e.to_string()))
}

fn get_package(conn: &Connection, package_id: &str) -> Result<Option<Package>> {
    let row: Option<(String, String)> = conn
        .query_row(
            "SELECT body, content_hash FROM ap_packages WHERE package_id = ?1",
            [package_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    row.map(|(b, h)| read_package(&b, &h)).transpose()
}

/// The packages `sql` selects as `(body, content_hash)` rows with `params`, each verified.
fn packages_of(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<Package>> {
    let mut st = conn.prepare_cached(sql)?;
    let rows = st
        .query_map(params, |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.iter().map(|(b, h)| read_package(b, h)).collect()
}

fn latest_of(
    conn: &Connection,
    project_id: &str,
    limit: usize,
    status: Option<&str>,
    since: Option<Timestamp>,
) -> Result<Vec<Package>> {
    packages_of(
        conn,
        "SELECT body, content_hash FROM ap_packages WHERE project_id = ?1
         AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR created_at_ms >= ?3)
         ORDER BY created_at_ms DESC, seq DESC LIMIT ?4",
        params![
            project_id,
            status,
            since.map(|t| t.as_millis() as i64),
            limit as i64
        ],
    )
}

/// The newest `limit` packages of the window that are not drafts (what orient shows).
fn latest_shown(
    conn: &Connection,
    project_id: &str,
    limit: usize,
    since: Timestamp,
) -> Result<Vec<Package>> {
    packages_of(
        conn,
        "SELECT body, content_hash FROM ap_packages WHERE project_id = ?1
         AND status != 'draft' AND created_at_ms >= ?2
         ORDER BY created_at_ms DESC, seq DESC LIMIT ?3",
        params![project_id, since.as_millis() as i64, limit as i64],
    )
}

/// The newest `limit` packages of the window, drafts left out, that ask something: open
/// questions, or a `question` not complete (the open questions of orient); only these
/// are read whole.
fn asking_of(
    conn: &Connection,
    project_id: &str,
    limit: usize,
    since: Timestamp,
) -> Result<Vec<Package>> {
    packages_of(
        conn,
        "SELECT body, content_hash FROM ap_packages WHERE project_id = ?1
         AND asks = 1 AND created_at_ms >= ?2
         ORDER BY created_at_ms DESC LIMIT ?3",
        params![project_id, since.as_millis() as i64, limit as i64],
    )
}

fn search_in(
    conn: &Connection,
    project_id: Option<&str>,
    query: &str,
    limit: usize,
) -> Result<Vec<Package>> {
    let (Some(all), Some(any)) = (search::fts_query_all(query), search::fts_query(query)) else {
        return Err(AgenticError::InvalidRequest("`query` has no word to search".into()).into());
    };
    // Packages with every word first; then, if they are fewer than asked, those with any.
    let mut found = ranked(conn, &all, project_id, limit)?;
    if found.len() < limit && all != any {
        let more = ranked(conn, &any, project_id, limit)?;
        for p in more {
            if found.len() >= limit {
                break;
            }
            if !found.iter().any(|f| f.package_id() == p.package_id()) {
                found.push(p);
            }
        }
    }
    Ok(found)
}

/// The packages matching the FTS5 expression `q`, best first.
fn ranked(
    conn: &Connection,
    q: &str,
    project_id: Option<&str>,
    limit: usize,
) -> Result<Vec<Package>> {
    packages_of(
        conn,
        "SELECT p.body, p.content_hash FROM ap_packages_fts f JOIN ap_packages p ON p.seq = f.rowid
         WHERE ap_packages_fts MATCH ?1 AND (?2 IS NULL OR p.project_id = ?2)
         ORDER BY bm25(ap_packages_fts, 4.0, 1.0), p.created_at_ms DESC LIMIT ?3",
        params![q, project_id, limit as i64],
    )
}

fn parse_fact(body: &str) -> Result<Fact> {
    serde_json::from_str(body).map_err(|e| ServiceError::Storage(e.to_string()))
}

fn current_facts(conn: &Connection, project_id: &str) -> Result<Vec<Fact>> {
    let mut st = conn.prepare_cached(
        "SELECT body FROM ap_facts WHERE project_id = ?1 AND valid_to_ms IS NULL
         ORDER BY subject, predicate LIMIT ?2",
    )?;
    let rows = st
        .query_map(params![project_id, MAX_BUNDLE_FACTS as i64], |r| {
            r.get::<_, String>(0)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.iter().map(|b| parse_fact(b)).collect()
}

fn series_current(
    conn: &Connection,
    project_id: &str,
    subject: &str,
    predicate: &str,
) -> Result<Vec<Fact>> {
    let mut st = conn.prepare_cached(
        "SELECT body FROM ap_facts WHERE project_id = ?1 AND subject = ?2 AND predicate = ?3
         AND valid_to_ms IS NULL ORDER BY valid_from_ms DESC, seq DESC",
    )?;
    let rows = st
        .query_map(params![project_id, subject, predicate], |r| {
            r.get::<_, String>(0)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.iter().map(|b| parse_fact(b)).collect()
}

fn insert_fact(conn: &Connection, f: &Fact) -> Result<()> {
    let body = serde_json::to_string(f).map_err(|e| ServiceError::Storage(e.to_string()))?;
    conn.execute(
        "INSERT INTO ap_facts (fact_id, project_id, subject, predicate, valid_from_ms, valid_to_ms, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            f.fact_id,
            f.project_id,
            f.subject,
            f.predicate,
            f.valid_from.as_millis() as i64,
            f.valid_to.map(|t| t.as_millis() as i64),
            body
        ],
    )?;
    Ok(())
}

fn update_fact(conn: &Connection, f: &Fact) -> Result<()> {
    let body = serde_json::to_string(f).map_err(|e| ServiceError::Storage(e.to_string()))?;
    conn.execute(
        "UPDATE ap_facts SET valid_to_ms = ?2, body = ?3 WHERE fact_id = ?1",
        params![f.fact_id, f.valid_to.map(|t| t.as_millis() as i64), body],
    )?;
    Ok(())
}

/// The session a deposit belongs to: the actor's open session in the project, or a new
/// one when it has none or it has been idle for [`SESSION_IDLE`] (then it ends at its
/// last deposit).
fn record_session(
    conn: &Connection,
    access: &Access,
    package: &Package,
    now: Timestamp,
) -> Result<Session> {
    let (actor_id, actor_type) = match access.actor() {
        Some((i, t)) => (i.to_string(), t.to_string()),
        None => {
            let by = package.member("created_by");
            let s = |k: &str| {
                by.and_then(|b| b.get(k))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            (s("id"), s("type"))
        }
    };
    let project_id = package.project_id();
    let open: Option<(String, i64)> = conn
        .query_row(
            "SELECT session_id, last_ms FROM ap_sessions
             WHERE project_id = ?1 AND actor_id = ?2 AND actor_type = ?3 AND ended_at IS NULL",
            params![project_id, actor_id, actor_type],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let idle_ms = SESSION_IDLE.as_millis() as i64;
    let now_ms = now.as_millis() as i64;
    let session_id = match open {
        Some((id, last)) if now_ms - last < idle_ms => {
            conn.execute(
                "UPDATE ap_sessions SET last_ms = ?2 WHERE session_id = ?1",
                params![id, now_ms],
            )?;
            id
        }
        stale => {
            if let Some((id, last)) = stale {
                conn.execute(
                    "UPDATE ap_sessions SET ended_at = ?2 WHERE session_id = ?1",
                    params![id, rfc3339(Timestamp::from_millis(last.max(0) as u64))],
                )?;
            }
            let id = callsign::session_id(project_id, &actor_id, &actor_type, now.as_millis());
            conn.execute(
                "INSERT OR IGNORE INTO ap_sessions (session_id, project_id, actor_id, actor_type, callsign, started_at, last_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    id,
                    project_id,
                    actor_id,
                    actor_type,
                    callsign::callsign(&id),
                    rfc3339(now),
                    now_ms,
                ],
            )?;
            id
        }
    };
    conn.execute(
        "INSERT INTO ap_session_packages (session_id, n, package_id)
         VALUES (?1, (SELECT COALESCE(MAX(n), 0) + 1 FROM ap_session_packages WHERE session_id = ?1), ?2)",
        params![session_id, package.package_id()],
    )?;
    // The deposit's answer names the session; `GET …/sessions` lists its packages.
    Ok(conn.query_row(
        "SELECT session_id, project_id, actor_id, actor_type, callsign, started_at, ended_at
         FROM ap_sessions WHERE session_id = ?1",
        [session_id],
        session_row,
    )?)
}
