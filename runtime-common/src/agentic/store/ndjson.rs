//! Export and import of the store as NDJSON (seed 002 §10.1, §10.3): the wire formats of
//! §6 and §7, one object a line, the same lines `a2acp memory export` writes —
//!
//! - `{"kind":"project","project":{project_id,name,created_at,archived_at}}`,
//! - `{"kind":"package","content_hash":"sha256:…","package":{…§6…}}`,
//! - `{"kind":"fact","fact":{…§7…}}`,
//! - `{"kind":"session","session":{…§5.5…}}`,
//!
//! each in canonical JSON (RFC 8785), projects, then packages in deposit order, then
//! facts, then sessions. An import checks every line first (a package's hash against its
//! content, a fact against §7) and then applies all of them in one transaction, or none:
//! a tampered line refuses the file and names the line. What is already stored
//! identically is skipped; an id already stored with other content refuses the file.

use a2acp_core::bridge::agentic::{Access, AgenticError, Project, Session};
use a2acp_core::memory::{canonical, Fact, Package};
use a2acp_core::Timestamp;
use rusqlite::{params, OptionalExtension};
use serde_json::{json, Map, Value};

use super::{
    check_id, insert_fact, project_row, read_package, session_packages, session_row, AgenticStore,
    Result, ServiceError,
};

/// What an import stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Imported {
    /// Lines read.
    pub lines: usize,
    /// Projects created.
    pub projects: usize,
    /// Packages stored.
    pub packages: usize,
    /// Facts stored (or, when mirroring, updated).
    pub facts: usize,
    /// Sessions stored.
    pub sessions: usize,
}

enum Line {
    Project(Project),
    Package(Package),
    Fact(Fact),
    Session(Session),
}

fn bad(line: usize, why: impl std::fmt::Display) -> ServiceError {
    ServiceError::Refused(AgenticError::InvalidSchema(format!("line {line}: {why}")))
}

fn parse(text: &str) -> Result<Vec<(usize, Line)>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let mut obj: Map<String, Value> = match serde_json::from_str(raw) {
            Ok(Value::Object(o)) => o,
            Ok(_) => return Err(bad(n, "not a JSON object")),
            Err(e) => return Err(bad(n, format!("not JSON: {e}"))),
        };
        let kind = obj.get("kind").and_then(Value::as_str).map(String::from);
        let line = match kind.as_deref() {
            Some("project") => {
                let p: Project = serde_json::from_value(obj.remove("project").unwrap_or_default())
                    .map_err(|e| bad(n, format!("project: {e}")))?;
                check_id("project_id", &p.project_id).map_err(|e| bad(n, e))?;
                Line::Project(p)
            }
            Some("package") => {
                let hash = obj
                    .get("content_hash")
                    .and_then(Value::as_str)
                    .map(String::from)
                    .ok_or_else(|| bad(n, "a package line without `content_hash`"))?;
                let Some(Value::Object(body)) = obj.remove("package") else {
                    return Err(bad(n, "a package line without a `package` object"));
                };
                let p = Package::verified(body, &hash).map_err(|e| bad(n, e))?;
                check_id("package_id", p.package_id()).map_err(|e| bad(n, e))?;
                check_id("project_id", p.project_id()).map_err(|e| bad(n, e))?;
                Line::Package(p)
            }
            Some("fact") => {
                let f: Fact = serde_json::from_value(obj.remove("fact").unwrap_or_default())
                    .map_err(|e| bad(n, format!("fact: {e}")))?;
                if f.valid_to.is_some_and(|t| t <= f.valid_from) {
                    return Err(bad(
                        n,
                        "a fact whose `valid_to` is not after its `valid_from`",
                    ));
                }
                check_id("fact_id", &f.fact_id).map_err(|e| bad(n, e))?;
                check_id("project_id", &f.project_id).map_err(|e| bad(n, e))?;
                Line::Fact(f)
            }
            Some("session") => {
                let s: Session = serde_json::from_value(obj.remove("session").unwrap_or_default())
                    .map_err(|e| bad(n, format!("session: {e}")))?;
                check_id("session_id", &s.session_id).map_err(|e| bad(n, e))?;
                Line::Session(s)
            }
            other => return Err(bad(n, format!("unknown `kind` {other:?}"))),
        };
        out.push((n, line));
    }
    Ok(out)
}

fn push(out: &mut String, line: &Value) -> Result<()> {
    let bytes = canonical::rfc8785(line).map_err(|e| ServiceError::Storage(e.to_string()))?;
    out.push_str(&String::from_utf8_lossy(&bytes));
    out.push('\n');
    Ok(())
}

impl AgenticStore {
    /// Everything the caller reaches, or one project, as NDJSON.
    pub fn export_ndjson(&self, access: &Access, project: Option<&str>) -> Result<String> {
        if let Some(p) = project {
            self.project(access, p)?;
        }
        let conn = self.conn()?;
        let reach = |id: &str| project.is_none_or(|p| p == id) && access.check_project(id).is_ok();
        let mut out = String::new();
        let mut st = conn.prepare(
            "SELECT project_id, name, created_at, archived_at FROM ap_projects ORDER BY project_id",
        )?;
        for p in st.query_map([], project_row)? {
            let p = p?;
            if reach(&p.project_id) {
                push(&mut out, &json!({"kind": "project", "project": p}))?;
            }
        }
        let mut st =
            conn.prepare("SELECT project_id, body, content_hash FROM ap_packages ORDER BY seq")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        for row in rows {
            let (project_id, body, hash) = row?;
            if reach(&project_id) {
                let p = read_package(&body, &hash)?;
                push(
                    &mut out,
                    &json!({"kind": "package", "content_hash": hash, "package": Value::Object(p.body().clone())}),
                )?;
            }
        }
        let mut st = conn.prepare("SELECT project_id, body FROM ap_facts ORDER BY seq")?;
        let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        for row in rows {
            let (project_id, body) = row?;
            if reach(&project_id) {
                let fact: Value = serde_json::from_str(&body)
                    .map_err(|e| ServiceError::Storage(e.to_string()))?;
                push(&mut out, &json!({"kind": "fact", "fact": fact}))?;
            }
        }
        let mut st = conn.prepare(
            "SELECT session_id, project_id, actor_id, actor_type, callsign, started_at, ended_at
             FROM ap_sessions ORDER BY started_at, session_id",
        )?;
        for s in st.query_map([], session_row)? {
            let mut s = s?;
            if reach(&s.project_id) {
                s.packages_deposited = session_packages(&conn, &s.session_id, usize::MAX >> 1)?;
                push(&mut out, &json!({"kind": "session", "session": s}))?;
            }
        }
        Ok(out)
    }

    /// Imports NDJSON: all lines or none (see the module). Every project named must be
    /// reachable by the caller and not archived.
    pub fn import_ndjson(&self, access: &Access, text: &str, now: Timestamp) -> Result<Imported> {
        self.import_lines(access, text, now, false)
    }

    /// Brings relationship memory's export of one peer into the store: like an import,
    /// but a fact already stored takes the memory's version (its end set when it was
    /// superseded there).
    pub fn mirror_memory(&self, text: &str, now: Timestamp) -> Result<Imported> {
        self.import_lines(&Access::Open, text, now, true)
    }

    fn import_lines(
        &self,
        access: &Access,
        text: &str,
        now: Timestamp,
        mirror: bool,
    ) -> Result<Imported> {
        let lines = parse(text)?;
        let mut done = Imported {
            lines: lines.len(),
            ..Imported::default()
        };
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let at = a2acp_core::bridge::agentic::rfc3339(now);
        let ensure_project = |tx: &rusqlite::Transaction<'_>,
                              n: usize,
                              id: &str,
                              done: &mut Imported|
         -> Result<()> {
            access.check_project(id).map_err(|e| bad(n, e))?;
            let p = tx
                .query_row(
                    "SELECT project_id, name, created_at, archived_at FROM ap_projects WHERE project_id = ?1",
                    [id],
                    project_row,
                )
                .optional()?;
            match p {
                Some(p) => p.check_writable().map_err(ServiceError::Refused),
                None => {
                    tx.execute(
                        "INSERT INTO ap_projects (project_id, name, created_at) VALUES (?1, ?1, ?2)",
                        params![id, at],
                    )?;
                    done.projects += 1;
                    Ok(())
                }
            }
        };
        for (n, line) in &lines {
            match line {
                Line::Project(p) => {
                    access
                        .check_project(&p.project_id)
                        .map_err(|e| bad(*n, e))?;
                    let added = tx.execute(
                        "INSERT OR IGNORE INTO ap_projects (project_id, name, created_at, archived_at) VALUES (?1, ?2, ?3, ?4)",
                        params![p.project_id, p.name, p.created_at, p.archived_at],
                    )?;
                    done.projects += added;
                }
                Line::Package(p) => {
                    ensure_project(&tx, *n, p.project_id(), &mut done)?;
                    let stored: Option<(String, String)> = tx
                        .query_row(
                            "SELECT content_hash, project_id FROM ap_packages WHERE package_id = ?1",
                            [p.package_id()],
                            |r| Ok((r.get(0)?, r.get(1)?)),
                        )
                        .optional()?;
                    match stored {
                        Some((hash, project))
                            if hash == p.content_hash() && project == p.project_id() => {}
                        Some(_) => {
                            return Err(ServiceError::Refused(AgenticError::DuplicatePackageId(
                                format!(
                                    "line {n}: {} is stored with other content",
                                    p.package_id()
                                ),
                            )))
                        }
                        None => {
                            super::insert_package(&tx, p, self.fts)?;
                            done.packages += 1;
                        }
                    }
                }
                Line::Fact(f) => {
                    ensure_project(&tx, *n, &f.project_id, &mut done)?;
                    let body = serde_json::to_string(f)
                        .map_err(|e| ServiceError::Storage(e.to_string()))?;
                    let stored: Option<(String, String)> = tx
                        .query_row(
                            "SELECT body, project_id FROM ap_facts WHERE fact_id = ?1",
                            [&f.fact_id],
                            |r| Ok((r.get(0)?, r.get(1)?)),
                        )
                        .optional()?;
                    match stored {
                        Some((b, _)) if b == body => {}
                        Some((_, project)) if mirror && project == f.project_id => {
                            tx.execute(
                                "UPDATE ap_facts SET valid_to_ms = ?2, body = ?3 WHERE fact_id = ?1",
                                params![f.fact_id, f.valid_to.map(|t| t.as_millis() as i64), body],
                            )?;
                            done.facts += 1;
                        }
                        Some(_) => {
                            return Err(bad(
                                *n,
                                format!("fact {} is stored with other content", f.fact_id),
                            ))
                        }
                        None => {
                            insert_fact(&tx, f)?;
                            done.facts += 1;
                        }
                    }
                }
                Line::Session(s) => {
                    ensure_project(&tx, *n, &s.project_id, &mut done)?;
                    let last =
                        Timestamp::parse_rfc3339(s.ended_at.as_deref().unwrap_or(&s.started_at))
                            .unwrap_or(now)
                            .as_millis() as i64;
                    let added = tx.execute(
                        "INSERT OR IGNORE INTO ap_sessions (session_id, project_id, actor_id, actor_type, callsign, started_at, ended_at, last_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                        params![s.session_id, s.project_id, s.actor_id, s.actor_type, s.callsign, s.started_at, s.ended_at, last],
                    )?;
                    if added > 0 {
                        for (i, id) in s.packages_deposited.iter().enumerate() {
                            tx.execute(
                                "INSERT OR IGNORE INTO ap_session_packages (session_id, n, package_id) VALUES (?1, ?2, ?3)",
                                params![s.session_id, i as i64 + 1, id],
                            )?;
                        }
                    }
                    done.sessions += added;
                }
            }
        }
        tx.commit()?;
        Ok(done)
    }
}
