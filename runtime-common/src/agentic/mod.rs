//! The Agentic Protocol service (seed 002) the agent serves with `agent run
//! --agentic-listen`: its options and tokens ([`AgenticOptions`], [`Tokens`]), its
//! storage ([`store`]) and its routes ([`routes`], executor-independent: a request's
//! method, path, query and body in, a status and JSON out). The HTTP listener that feeds
//! them is the binding's (tokio: `a2acp_tokio::agentic`).

pub mod routes;
pub mod store;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use a2acp_core::bridge::agentic::{Access, Caller};

/// The largest request body (1 MiB): a package is prose, not a blob (`blob_storage` is
/// false).
pub const MAX_BODY: usize = 1 << 20;
/// The largest NDJSON import (`POST /v1/import`, 64 MiB); a larger backup is imported in
/// parts (one project a file).
pub const MAX_IMPORT: usize = 64 << 20;
/// The request head must arrive within this.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The body must arrive within this.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections served at once from one source address.
pub const MAX_PER_SOURCE: usize = 32;
/// The deepest JSON nesting of a body accepted.
pub const MAX_DEPTH: usize = 32;
/// The database file's name in the agent's home.
pub const DB_FILE: &str = "agentic.db";

/// How the service is served.
#[derive(Debug, Clone)]
pub struct AgenticOptions {
    /// Where to listen (`127.0.0.1:7420`).
    pub listen: String,
    /// The tokens; empty: none, loopback only.
    pub tokens: Tokens,
    /// The database file.
    pub db: PathBuf,
    /// The listener's limits.
    pub limits: AgenticLimits,
}

/// What one client may cost the listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgenticLimits {
    /// [`MAX_BODY`].
    pub max_body: usize,
    /// [`MAX_IMPORT`].
    pub max_import: usize,
    /// [`HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// [`BODY_TIMEOUT`].
    pub body_timeout: Duration,
    /// [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// [`MAX_PER_SOURCE`].
    pub max_per_source: usize,
}

impl Default for AgenticLimits {
    fn default() -> Self {
        AgenticLimits {
            max_body: MAX_BODY,
            max_import: MAX_IMPORT,
            header_timeout: HEADER_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            max_per_source: MAX_PER_SOURCE,
        }
    }
}

/// The bearer tokens (§9.2: each maps to one actor, optionally scoped to projects).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    entries: Vec<(String, Caller)>,
}

impl Tokens {
    /// Whether there are none (the service is then loopback only and open).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Parses a token file: one token a line, `TOKEN TYPE:ACTOR_ID [PROJECT_ID …]`
    /// (`TYPE` human, agent or script; without projects the token reaches every project);
    /// blank lines and lines starting with `#` are skipped. Tokens are at least 16
    /// characters.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut entries: Vec<(String, Caller)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let token = words.next().unwrap_or("");
            let actor = words
                .next()
                .ok_or_else(|| format!("line {}: `TOKEN TYPE:ACTOR_ID [PROJECT_ID …]`", i + 1))?;
            if token.len() < 16 || token.chars().any(char::is_control) {
                return Err(format!("line {}: a token is at least 16 characters", i + 1));
            }
            let (actor_type, id) = actor
                .split_once(':')
                .filter(|(t, id)| ["human", "agent", "script"].contains(t) && !id.is_empty())
                .ok_or_else(|| {
                    format!(
                        "line {}: the actor is TYPE:ID, TYPE human, agent or script",
                        i + 1
                    )
                })?;
            if entries.iter().any(|(t, _)| t == token) {
                return Err(format!("line {}: the token is given twice", i + 1));
            }
            let projects: Vec<String> = words.map(String::from).collect();
            entries.push((
                token.to_string(),
                Caller {
                    id: id.to_string(),
                    actor_type: actor_type.to_string(),
                    projects: (!projects.is_empty()).then_some(projects),
                },
            ));
        }
        Ok(Tokens { entries })
    }

    /// Reads a token file ([`Tokens::parse`]).
    pub fn read(path: &Path) -> Result<Tokens, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Tokens::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Who a request with this `Authorization` header is: open access without tokens; a
    /// token's actor; `None` (401) for a missing or unknown token. Compared in constant
    /// time.
    pub fn access(&self, authorization: Option<&[u8]>) -> Option<Access> {
        if self.entries.is_empty() {
            return Some(Access::Open);
        }
        let given = authorization?.strip_prefix(b"Bearer ")?;
        let mut found = None;
        for (t, c) in &self.entries {
            if constant_time_eq(given, t.as_bytes()) {
                found = Some(c.clone());
            }
        }
        found.map(Access::Token)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Refuses a non-loopback address without tokens.
pub fn check_listen(addr: &SocketAddr, tokens: &Tokens) -> Result<(), String> {
    if tokens.is_empty() && !addr.ip().is_loopback() {
        return Err(format!(
            "--agentic-listen {addr}: a non-loopback address needs --agentic-token-file (each token there stands for one actor)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_files_map_each_token_to_one_actor() {
        let t = Tokens::parse(
            "# tokens\n\njordan-token-0123456789 human:jordan proj_a proj_b\nbot-token-0123456789abc agent:agent:bob@example.org\n",
        )
        .unwrap();
        match t.access(Some(b"Bearer jordan-token-0123456789")) {
            Some(Access::Token(c)) => {
                assert_eq!((c.id.as_str(), c.actor_type.as_str()), ("jordan", "human"));
                assert_eq!(c.projects, Some(vec!["proj_a".into(), "proj_b".into()]));
            }
            other => panic!("{other:?}"),
        }
        match t.access(Some(b"Bearer bot-token-0123456789abc")) {
            Some(Access::Token(c)) => assert_eq!(c.id, "agent:bob@example.org"),
            other => panic!("{other:?}"),
        }
        assert_eq!(t.access(Some(b"Bearer nope")), None);
        assert_eq!(t.access(None), None);
        assert_eq!(Tokens::default().access(None), Some(Access::Open));
        assert!(Tokens::parse("short human:x").is_err());
        assert!(Tokens::parse("long-enough-token-000 robot:x").is_err());
        assert!(Tokens::parse("long-enough-token-000").is_err());
    }
}
