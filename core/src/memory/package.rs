//! Immutable context packages (the Agentic Protocol's §6), content-hashed over their
//! canonical JSON (§6.6, Appendix A).

use serde::Serialize;
use serde_json::{Map, Value};

use super::{canonical, Actor, MemoryError};
use crate::Timestamp;

/// The protocol version packages carry (`relay_version`, §6.1).
pub const RELAY_VERSION: &str = "0.1";

/// The package types of §6.3 (others must be in the `x-*` namespace).
pub const PACKAGE_TYPES: [&str; 8] = [
    "standard",
    "milestone",
    "decision",
    "handoff",
    "auto_deposit",
    "analysis",
    "question",
    "orchestrator_report",
];

/// The package statuses of §5.3.
pub const STATUSES: [&str; 4] = ["draft", "complete", "awaiting_review", "revision_requested"];

/// A package as the agent writes it; [`Package::commit`] turns it into an immutable,
/// hashed [`Package`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PackageDraft {
    /// The owning project.
    pub project_id: String,
    /// 1–200 characters.
    pub title: String,
    /// §6.3 type.
    pub package_type: String,
    /// When it was made.
    #[serde(with = "super::fact::rfc3339")]
    pub created_at: Timestamp,
    /// Who made it.
    pub created_by: Actor,
    /// Longer prose.
    pub description: String,
    /// Free-form labels.
    pub tags: Vec<String>,
    /// Decisions captured.
    pub decisions_made: Vec<String>,
    /// Questions left open.
    pub open_questions: Vec<String>,
    /// Subject area.
    pub topic: Option<String>,
    /// `x-*` extension members (provenance and the like), written as given.
    #[serde(flatten)]
    pub extensions: Map<String, Value>,
}

/// A committed package: its JSON object (every member, unknown ones included, exactly as
/// committed or imported) and the content hash over its canonical form. Nothing changes it
/// after construction.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    body: Map<String, Value>,
    content_hash: String,
}

impl Package {
    /// Commits a draft: status `complete`, review `none`, the id `pkg_` + the first 32 hex
    /// digits of the hash of the package without its id (so the same draft always makes
    /// the same package), then the content hash of the whole.
    pub fn commit(draft: &PackageDraft) -> Result<Package, MemoryError> {
        let mut body = match serde_json::to_value(draft) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err(MemoryError::Canonical("a draft is an object".into())),
            Err(e) => return Err(MemoryError::Canonical(e.to_string())),
        };
        body.insert("relay_version".into(), RELAY_VERSION.into());
        body.insert("status".into(), "complete".into());
        body.insert("review_type".into(), "none".into());
        let seed = canonical::content_hash(&Value::Object(body.clone()))?;
        let digits = seed
            .get(canonical::HASH_PREFIX.len()..canonical::HASH_PREFIX.len() + 32)
            .unwrap_or_default();
        body.insert("package_id".into(), format!("pkg_{digits}").into());
        Package::from_body(body)
    }

    /// A package from its JSON object: validates it (§6.1) and computes its hash.
    pub fn from_body(body: Map<String, Value>) -> Result<Package, MemoryError> {
        validate(&body)?;
        let content_hash = canonical::content_hash(&Value::Object(body.clone()))?;
        Ok(Package { body, content_hash })
    }

    /// A package read back with the hash stored beside it: refused unless the stored hash
    /// is the freshly computed one (§6.6: mismatches are reported and quarantined).
    pub fn verified(body: Map<String, Value>, stored_hash: &str) -> Result<Package, MemoryError> {
        let package = Package::from_body(body)?;
        if package.content_hash != stored_hash {
            return Err(MemoryError::HashMismatch {
                package_id: package.package_id().to_string(),
                stored: stored_hash.to_string(),
                computed: package.content_hash,
            });
        }
        Ok(package)
    }

    /// The JSON object.
    pub fn body(&self) -> &Map<String, Value> {
        &self.body
    }

    /// `sha256:<hex>` over the canonical JSON of [`Package::body`].
    pub fn content_hash(&self) -> &str {
        &self.content_hash
    }

    fn str_member(&self, name: &str) -> &str {
        self.body.get(name).and_then(Value::as_str).unwrap_or("")
    }

    fn list_member(&self, name: &str) -> Vec<String> {
        self.body
            .get(name)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `package_id`.
    pub fn package_id(&self) -> &str {
        self.str_member("package_id")
    }

    /// `project_id`.
    pub fn project_id(&self) -> &str {
        self.str_member("project_id")
    }

    /// `title`.
    pub fn title(&self) -> &str {
        self.str_member("title")
    }

    /// `created_at`.
    pub fn created_at(&self) -> Timestamp {
        Timestamp::parse_rfc3339(self.str_member("created_at")).unwrap_or_default()
    }

    /// `decisions_made`.
    pub fn decisions_made(&self) -> Vec<String> {
        self.list_member("decisions_made")
    }

    /// `open_questions`.
    pub fn open_questions(&self) -> Vec<String> {
        self.list_member("open_questions")
    }

    /// `tags`.
    pub fn tags(&self) -> Vec<String> {
        self.list_member("tags")
    }

    /// An `x-*` (or any) member.
    pub fn member(&self, name: &str) -> Option<&Value> {
        self.body.get(name)
    }
}

fn validate(body: &Map<String, Value>) -> Result<(), MemoryError> {
    let id = body
        .get("package_id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let bad = |reason: String| MemoryError::InvalidPackage {
        package_id: id.clone(),
        reason,
    };
    let string = |name: &str| -> Result<&str, MemoryError> {
        body.get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("`{name}` missing or not a string")))
    };
    if string("package_id")?.is_empty() {
        return Err(bad("empty `package_id`".into()));
    }
    if string("project_id")?.is_empty() {
        return Err(bad("empty `project_id`".into()));
    }
    let version = string("relay_version")?;
    if version != RELAY_VERSION {
        return Err(bad(format!("`relay_version` {version:?}, not \"0.1\"")));
    }
    let title = string("title")?.chars().count();
    if !(1..=200).contains(&title) {
        return Err(bad(format!("`title` of {title} characters (1–200)")));
    }
    let status = string("status")?;
    if !STATUSES.contains(&status) {
        return Err(bad(format!("unknown `status` {status:?}")));
    }
    let package_type = string("package_type")?;
    if !PACKAGE_TYPES.contains(&package_type) && !package_type.starts_with("x-") {
        return Err(bad(format!("unknown `package_type` {package_type:?}")));
    }
    let review = string("review_type")?;
    if !["none", "human", "agent"].contains(&review) {
        return Err(bad(format!("unknown `review_type` {review:?}")));
    }
    if Timestamp::parse_rfc3339(string("created_at")?).is_none() {
        return Err(bad("`created_at` is not RFC 3339".into()));
    }
    let created_by = body
        .get("created_by")
        .cloned()
        .ok_or_else(|| bad("`created_by` missing".into()))?;
    let actor: Actor =
        serde_json::from_value(created_by).map_err(|e| bad(format!("`created_by`: {e}")))?;
    if !["human", "agent", "script"].contains(&actor.actor_type.as_str()) {
        return Err(bad(format!("`created_by.type` {:?}", actor.actor_type)));
    }
    if let Some(sig) = body.get("significance").filter(|v| !v.is_null()) {
        match sig.as_u64() {
            Some(1..=10) => {}
            _ => return Err(bad("`significance` outside 1–10".into())),
        }
    }
    for list in ["tags", "decisions_made", "open_questions"] {
        if let Some(v) = body.get(list).filter(|v| !v.is_null()) {
            let ok = v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
            if !ok {
                return Err(bad(format!("`{list}` is not a list of strings")));
            }
        }
    }
    Ok(())
}
