//! What the agent's threads leave ([`Outcome`], decided by the core) written into the
//! store, and relationship memory's removals applied to it.

use a2acp_core::bridge::agentic::outcomes::{Outcome, THREAD_MEMBER};
use a2acp_core::bridge::agentic::{Access, AgenticError, Caller};
use a2acp_core::{Address, Timestamp};
use rusqlite::{params, OptionalExtension};
use serde_json::{json, Value};

use super::{AgenticStore, Result, ServiceError};

/// Who reviews a decision when this agent's user answers its confirmation prompt.
pub const USER_REVIEWER: &str = "user";

impl AgenticStore {
    /// Writes one outcome of this agent (`me`). A package already deposited (the step
    /// done again after a crash) and a review with nothing awaiting it are no-ops; a
    /// project the person archived takes nothing more (`project_archived`).
    pub fn record_outcome(&self, me: &Address, outcome: &Outcome, now: Timestamp) -> Result<()> {
        match outcome {
            Outcome::Deposit {
                project_id,
                project_name,
                package,
            } => {
                let access = Access::Token(Caller {
                    id: me.to_string(),
                    actor_type: "agent".into(),
                    projects: None,
                });
                {
                    let conn = self.conn()?;
                    conn.execute(
                        "INSERT OR IGNORE INTO ap_projects (project_id, name, created_at) VALUES (?1, ?2, ?3)",
                        params![project_id, project_name, a2acp_core::bridge::agentic::rfc3339(now)],
                    )?;
                }
                match self.deposit(&access, project_id, Value::Object(package.clone()), now) {
                    Ok(_) => Ok(()),
                    Err(ServiceError::Refused(AgenticError::DuplicatePackageId(_))) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Outcome::Review {
                thread,
                status,
                note,
            } => {
                let Some(id) = self.awaiting_of_thread(thread)? else {
                    return Ok(());
                };
                let body = json!({
                    "status": status,
                    "note": note,
                    "reviewed_by": {"id": USER_REVIEWER, "type": "human"},
                });
                match self.review(&Access::Open, &id, &body) {
                    Ok(_) => Ok(()),
                    Err(ServiceError::Refused(AgenticError::InvalidTransition { .. })) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// The decision of `thread` awaiting review, the newest first.
    fn awaiting_of_thread(&self, thread: &str) -> Result<Option<String>> {
        let conn = self.conn()?;
        let path = format!("$.\"{THREAD_MEMBER}\"");
        Ok(conn
            .query_row(
                "SELECT package_id FROM ap_packages
                 WHERE status = 'awaiting_review' AND package_type = 'decision'
                   AND json_extract(body, ?1) = ?2
                 ORDER BY seq DESC LIMIT 1",
                params![path, thread],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Removes a whole project (packages, their index, facts, sessions): relationship
    /// memory forgotten for good (spec §11.3). Returns the packages removed.
    pub fn remove_project(&self, project_id: &str) -> Result<usize> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        if self.fts {
            tx.execute(
                "DELETE FROM ap_packages_fts WHERE rowid IN (SELECT seq FROM ap_packages WHERE project_id = ?1)",
                [project_id],
            )?;
        }
        let n = tx.execute(
            "DELETE FROM ap_packages WHERE project_id = ?1",
            [project_id],
        )?;
        tx.execute("DELETE FROM ap_facts WHERE project_id = ?1", [project_id])?;
        tx.execute(
            "DELETE FROM ap_session_packages WHERE session_id IN (SELECT session_id FROM ap_sessions WHERE project_id = ?1)",
            [project_id],
        )?;
        tx.execute(
            "DELETE FROM ap_sessions WHERE project_id = ?1",
            [project_id],
        )?;
        tx.execute(
            "DELETE FROM ap_projects WHERE project_id = ?1",
            [project_id],
        )?;
        tx.commit()?;
        Ok(n)
    }

    /// Removes the facts of one predicate (a field of relationship memory forgotten)
    /// from a project, history included. Returns how many.
    pub fn remove_facts(&self, project_id: &str, predicate: &str) -> Result<usize> {
        let conn = self.conn()?;
        Ok(conn.execute(
            "DELETE FROM ap_facts WHERE project_id = ?1 AND predicate = ?2",
            params![project_id, predicate],
        )?)
    }
}
