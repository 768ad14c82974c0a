//! The Agentic Protocol (seed 002) as a service: the decisions of its seven operations,
//! pure. A deposit's schema and authorship ([`ops::check_deposit`]), the idempotent
//! re-deposit ([`ops::redeposit`]), the §5.3 review transitions ([`ops::transition`]),
//! atomic fact supersession ([`facts::supersede`]), the orientation bundle and the digest
//! ([`digest`]), the conformance descriptor ([`conformance`]), session callsigns
//! ([`callsign`]) and the query handed to full-text search ([`search`]).
//!
//! The packages and facts are relationship memory's own types
//! ([`crate::memory::Package`], [`crate::memory::Fact`], content-hashed per the seed's
//! Appendix A); this module adds what a service over them decides. Storage and HTTP are
//! the runtime's: it reads rows, asks these functions, and writes what they answer.

pub mod callsign;
pub mod conformance;
pub mod digest;
pub mod facts;
pub mod ops;
pub mod outcomes;
pub mod search;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version served (`protocol_version`, §11.5).
pub const PROTOCOL_VERSION: &str = "0.1";

/// Why an operation was refused: the seed's error codes (§8) and the few the service
/// adds, each with its HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgenticError {
    /// `400 invalid_schema`: a required field missing or invalid (§8.1).
    #[error("invalid_schema: {0}")]
    InvalidSchema(String),
    /// `400 invalid_request`: a query parameter or body of a non-deposit operation.
    #[error("invalid_request: {0}")]
    InvalidRequest(String),
    /// `409 duplicate_package_id`: the id exists with different content (§8.1, §11.2).
    #[error("duplicate_package_id: {0}")]
    DuplicatePackageId(String),
    /// `403 project_archived` (§8.1): the service refuses writes to archived projects.
    #[error("project_archived: {0}")]
    ProjectArchived(String),
    /// `403 unauthorized` (§8.1): the caller's token does not allow this.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// `401 unauthenticated`: no token, or one the service does not know.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// `404 package_not_found` (§8.2, §8.5).
    #[error("package_not_found: {0}")]
    PackageNotFound(String),
    /// `404 project_not_found`.
    #[error("project_not_found: {0}")]
    ProjectNotFound(String),
    /// `400 invalid_transition` (§5.3, §8.5).
    #[error("invalid_transition: {from} → {to}")]
    InvalidTransition {
        /// The package's status.
        from: String,
        /// The status asked for.
        to: String,
    },
    /// `409 fact_out_of_order`: an assertion valid from before the current fact of its
    /// series started (its `valid_to` would precede its `valid_from`, §7.3).
    #[error("fact_out_of_order: {0}")]
    FactOutOfOrder(String),
    /// `501 search_not_supported` (§8.2).
    #[error("search_not_supported: {0}")]
    SearchNotSupported(String),
}

impl AgenticError {
    /// The error code the body carries.
    pub fn code(&self) -> &'static str {
        match self {
            AgenticError::InvalidSchema(_) => "invalid_schema",
            AgenticError::InvalidRequest(_) => "invalid_request",
            AgenticError::DuplicatePackageId(_) => "duplicate_package_id",
            AgenticError::ProjectArchived(_) => "project_archived",
            AgenticError::Unauthorized(_) => "unauthorized",
            AgenticError::Unauthenticated(_) => "unauthenticated",
            AgenticError::PackageNotFound(_) => "package_not_found",
            AgenticError::ProjectNotFound(_) => "project_not_found",
            AgenticError::InvalidTransition { .. } => "invalid_transition",
            AgenticError::FactOutOfOrder(_) => "fact_out_of_order",
            AgenticError::SearchNotSupported(_) => "search_not_supported",
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            AgenticError::InvalidSchema(_)
            | AgenticError::InvalidRequest(_)
            | AgenticError::InvalidTransition { .. } => 400,
            AgenticError::Unauthenticated(_) => 401,
            AgenticError::ProjectArchived(_) | AgenticError::Unauthorized(_) => 403,
            AgenticError::PackageNotFound(_) | AgenticError::ProjectNotFound(_) => 404,
            AgenticError::DuplicatePackageId(_) | AgenticError::FactOutOfOrder(_) => 409,
            AgenticError::SearchNotSupported(_) => 501,
        }
    }

    /// The JSON body: `{"error": code, "message": text}` (and, for a missing capability,
    /// `capability`, §10.2).
    pub fn body(&self) -> Value {
        let mut v = serde_json::Map::new();
        v.insert("error".into(), Value::String(self.code().into()));
        v.insert("message".into(), Value::String(self.to_string()));
        if let AgenticError::SearchNotSupported(cap) = self {
            v.insert("capability".into(), Value::String(cap.clone()));
        }
        Value::Object(v)
    }
}

/// The actor a bearer token stands for (§9.2: "the key maps to one actor"), and the
/// projects it may reach (`None`: all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// `actor_id`.
    pub id: String,
    /// `human`, `agent` or `script`.
    pub actor_type: String,
    /// The projects the token is scoped to (`None`: every project).
    pub projects: Option<Vec<String>>,
}

/// Who calls: a token's actor, or anyone on loopback without tokens (then the actor a
/// package names is taken as given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// No tokens configured (loopback only): every project, any actor.
    Open,
    /// A token's actor.
    Token(Caller),
}

impl Access {
    /// Refuses a project outside the token's scope (`403 unauthorized`).
    pub fn check_project(&self, project_id: &str) -> Result<(), AgenticError> {
        match self {
            Access::Open => Ok(()),
            Access::Token(c) => match &c.projects {
                Some(list) if !list.iter().any(|p| p == project_id) => Err(
                    AgenticError::Unauthorized(format!("this token does not reach {project_id}")),
                ),
                _ => Ok(()),
            },
        }
    }

    /// The actor calling, if a token says.
    pub fn actor(&self) -> Option<(&str, &str)> {
        match self {
            Access::Open => None,
            Access::Token(c) => Some((&c.id, &c.actor_type)),
        }
    }
}

/// A project (§5.2): the scope of packages and facts, the unit of archival.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Project {
    /// Its id.
    pub project_id: String,
    /// A name a person recognises.
    pub name: String,
    /// When it was created (RFC 3339 UTC).
    pub created_at: String,
    /// When it was archived, if it is.
    pub archived_at: Option<String>,
}

impl Project {
    /// Refuses a write to an archived project (`403 project_archived`).
    pub fn check_writable(&self) -> Result<(), AgenticError> {
        match &self.archived_at {
            Some(at) => Err(AgenticError::ProjectArchived(format!(
                "{} was archived at {at}",
                self.project_id
            ))),
            None => Ok(()),
        }
    }
}

/// A session (§5.5): one actor's continuous work in one project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// `sess_<32 hex>`.
    pub session_id: String,
    /// The project.
    pub project_id: String,
    /// The actor.
    pub actor_id: String,
    /// Its type.
    pub actor_type: String,
    /// Adjective-noun ([`callsign::callsign`]).
    pub callsign: Option<String>,
    /// RFC 3339 UTC.
    pub started_at: String,
    /// RFC 3339 UTC, `None` while active.
    pub ended_at: Option<String>,
    /// The packages deposited in it, in order.
    pub packages_deposited: Vec<String>,
}

/// A session ends after this long without a deposit; the actor's next deposit opens
/// another.
pub const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);

/// RFC 3339 UTC of `t` (milliseconds when not whole seconds).
pub fn rfc3339(t: crate::Timestamp) -> String {
    crate::memory::format_time(t)
}
