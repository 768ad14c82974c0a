//! Deposit (§8.1) and the review states (§5.3, §8.5): what a package must be to be
//! stored, whether a second deposit of an id is the same package, and which status
//! changes are allowed.

use serde_json::{Map, Value};

use super::{Access, AgenticError};
use crate::memory::Package;

/// The §5.3 table: the statuses a package in `from` may move to.
pub fn allowed_next(from: &str) -> &'static [&'static str] {
    match from {
        "draft" => &["complete", "awaiting_review"],
        "awaiting_review" => &["complete", "revision_requested"],
        "revision_requested" => &["awaiting_review", "complete"],
        _ => &[],
    }
}

/// Checks a §5.3 transition: nothing leaves `complete`, and only the table's moves.
pub fn transition(from: &str, to: &str) -> Result<(), AgenticError> {
    if allowed_next(from).contains(&to) {
        Ok(())
    } else {
        Err(AgenticError::InvalidTransition {
            from: from.to_string(),
            to: to.to_string(),
        })
    }
}

/// Checks a deposit to `project_id` (the path's) of `body` by `access`: a JSON object, a
/// valid §6 package of that project, written by the token's actor when there is one.
/// Unknown and `x-*` members are kept as they are (§6, §12.1).
pub fn check_deposit(
    project_id: &str,
    body: Value,
    access: &Access,
) -> Result<Package, AgenticError> {
    let Value::Object(map) = body else {
        return Err(AgenticError::InvalidSchema(
            "a package is a JSON object".into(),
        ));
    };
    access.check_project(project_id)?;
    match map.get("project_id").and_then(Value::as_str) {
        Some(p) if p == project_id => {}
        Some(p) => {
            return Err(AgenticError::InvalidSchema(format!(
                "`project_id` {p:?} is not the project of the path ({project_id:?})"
            )))
        }
        None => return Err(AgenticError::InvalidSchema("`project_id` missing".into())),
    }
    check_optional(&map)?;
    let package =
        Package::from_body(map).map_err(|e| AgenticError::InvalidSchema(e.to_string()))?;
    if let Some((id, actor_type)) = access.actor() {
        let by = package.member("created_by");
        let by_id = by.and_then(|b| b.get("id")).and_then(Value::as_str);
        let by_type = by.and_then(|b| b.get("type")).and_then(Value::as_str);
        if by_id != Some(id) || by_type != Some(actor_type) {
            return Err(AgenticError::Unauthorized(format!(
                "this token stands for {actor_type} {id:?}; the package is created by another actor"
            )));
        }
    }
    Ok(package)
}

/// The §6.4/§6.5 optional members, when present and not `null`, have their types.
fn check_optional(map: &Map<String, Value>) -> Result<(), AgenticError> {
    let bad = |m: String| Err(AgenticError::InvalidSchema(m));
    for name in [
        "description",
        "handoff_note",
        "content_md",
        "topic",
        "artifact_type",
        "storage_path",
        "parent_package_id",
    ] {
        if let Some(v) = map.get(name).filter(|v| !v.is_null()) {
            if !v.is_string() {
                return bad(format!("`{name}` is not a string"));
            }
        }
    }
    if let Some(v) = map.get("estimated_next_actor").filter(|v| !v.is_null()) {
        if !matches!(v.as_str(), Some("human" | "agent")) {
            return bad("`estimated_next_actor` is not human, agent or null".into());
        }
    }
    if let Some(v) = map.get("deliverables").filter(|v| !v.is_null()) {
        let Some(items) = v.as_array() else {
            return bad("`deliverables` is not a list".into());
        };
        for (i, d) in items.iter().enumerate() {
            let ok = d.get("path").is_some_and(Value::is_string)
                && d.get("type").is_some_and(Value::is_string)
                && d.get("hash").is_none_or(|h| h.is_null() || h.is_string())
                && d.get("size_bytes")
                    .is_none_or(|s| s.is_null() || s.is_u64());
            if !ok {
                return bad(format!(
                    "deliverable {i} needs a string `path` and `type` (§6.5)"
                ));
            }
        }
    }
    if let Some(id) = map.get("package_id").and_then(Value::as_str) {
        if id.len() > 200 {
            return bad("`package_id` longer than 200 bytes".into());
        }
    }
    Ok(())
}

/// What a deposit of an id already stored (with `stored_hash`) does (§11.2): the same
/// content returns the stored package; other content is `409 duplicate_package_id`.
pub fn redeposit(new: &Package, stored_hash: &str) -> Result<(), AgenticError> {
    if new.content_hash() == stored_hash {
        Ok(())
    } else {
        Err(AgenticError::DuplicatePackageId(format!(
            "{} already exists with different content",
            new.package_id()
        )))
    }
}

/// A review request: who reviews, and the status asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reviewer {
    /// `actor_id`.
    pub id: String,
    /// `human`, `agent` or `script`.
    pub actor_type: String,
}

/// The reviewer of a request: the token's actor, or (without tokens) the `reviewed_by`
/// object the body names, else the local person (`{"id": "local", "type": "human"}`).
pub fn reviewer(access: &Access, body: &Value) -> Result<Reviewer, AgenticError> {
    if let Some((id, t)) = access.actor() {
        return Ok(Reviewer {
            id: id.to_string(),
            actor_type: t.to_string(),
        });
    }
    match body.get("reviewed_by").filter(|v| !v.is_null()) {
        None => Ok(Reviewer {
            id: "local".into(),
            actor_type: "human".into(),
        }),
        Some(v) => {
            let id = v.get("id").and_then(Value::as_str);
            let t = v.get("type").and_then(Value::as_str);
            match (id, t) {
                (Some(id), Some(t)) if ["human", "agent", "script"].contains(&t) => Ok(Reviewer {
                    id: id.to_string(),
                    actor_type: t.to_string(),
                }),
                _ => Err(AgenticError::InvalidRequest(
                    "`reviewed_by` needs `id` and `type` (human, agent or script)".into(),
                )),
            }
        }
    }
}

/// `flag_for_review` (§8.5): `awaiting_review` with `review_type`, from any status but
/// `complete` (re-flagging a package already awaiting review changes its reviewer kind).
/// The note goes in `x-review-note`. Returns the package as it now is (re-hashed).
pub fn flag(package: &Package, body: &Value) -> Result<Package, AgenticError> {
    let review_type = match body.get("review_type").and_then(Value::as_str) {
        Some(t @ ("human" | "agent")) => t,
        _ => {
            return Err(AgenticError::InvalidRequest(
                "`review_type` must be human or agent".into(),
            ))
        }
    };
    let note = note_of(body)?;
    let from = status_of(package);
    if from != "awaiting_review" {
        transition(from, "awaiting_review")?;
    }
    let mut map = package.body().clone();
    map.insert("status".into(), "awaiting_review".into());
    map.insert("review_type".into(), review_type.into());
    if let Some(n) = note {
        map.insert("x-review-note".into(), n.into());
    }
    Package::from_body(map).map_err(|e| AgenticError::InvalidSchema(e.to_string()))
}

/// A review (the service's `POST /v1/packages/{id}/review`): any §5.3 transition, by a
/// reviewer who may make it. A package awaiting a `human` review is completed or sent
/// back only by a human; one awaiting an `agent` review, by an agent or a human. The
/// reviewer and the note are kept in `x-reviewed-by` and `x-review-note`.
pub fn review(
    package: &Package,
    body: &Value,
    reviewer: &Reviewer,
) -> Result<Package, AgenticError> {
    let to = body
        .get("status")
        .and_then(Value::as_str)
        .ok_or_else(|| AgenticError::InvalidRequest("`status` missing".into()))?;
    let note = note_of(body)?;
    let from = status_of(package);
    transition(from, to)?;
    let review_type = package
        .member("review_type")
        .and_then(Value::as_str)
        .unwrap_or("none");
    if from == "awaiting_review" {
        let may = match review_type {
            "human" => reviewer.actor_type == "human",
            "agent" => reviewer.actor_type != "script",
            _ => true,
        };
        if !may {
            return Err(AgenticError::Unauthorized(format!(
                "a {review_type} review is not made by a {}",
                reviewer.actor_type
            )));
        }
    }
    let mut map = package.body().clone();
    map.insert("status".into(), to.into());
    if from == "awaiting_review" {
        map.insert(
            "x-reviewed-by".into(),
            serde_json::json!({"id": reviewer.id, "type": reviewer.actor_type}),
        );
    }
    if let Some(n) = note {
        map.insert("x-review-note".into(), n.into());
    }
    Package::from_body(map).map_err(|e| AgenticError::InvalidSchema(e.to_string()))
}

/// A package's `status`.
pub fn status_of(package: &Package) -> &str {
    package
        .member("status")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn note_of(body: &Value) -> Result<Option<&str>, AgenticError> {
    match body.get("note") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= 4000 => Ok(Some(s)),
        Some(_) => Err(AgenticError::InvalidRequest(
            "`note` is a string of at most 4,000 characters".into(),
        )),
    }
}
