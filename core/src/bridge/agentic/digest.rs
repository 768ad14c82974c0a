//! `orient` (§8.3) and `orchestrate` (§8.4): the bundles built from what the store read.
//! Drafts are left out of both (§5.3: excluded from digests).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::{ops::status_of, rfc3339, Project};
use crate::memory::{Fact, Package};
use crate::Timestamp;

/// `window_days` when the caller gives none (§8.3).
pub const DEFAULT_WINDOW_DAYS: u32 = 14;
/// The largest window accepted.
pub const MAX_WINDOW_DAYS: u32 = 3650;
/// Packages in an orientation bundle at most.
pub const ORIENT_PACKAGES: usize = 20;
/// The packages an orientation gathers open questions from at most (the newest that ask).
pub const ORIENT_ASKING: usize = 50;
/// `snippets` when the caller gives none (§8.4).
pub const DEFAULT_SNIPPETS: usize = 25;
/// The most snippets asked for.
pub const MAX_SNIPPETS: usize = 100;
/// The characters of a snippet's excerpt at most.
pub const EXCERPT_CHARS: usize = 280;

/// The start of the window of `window_days` ending at `now`.
pub fn window_start(now: Timestamp, window_days: u32) -> Timestamp {
    Timestamp::from_millis(
        now.as_millis()
            .saturating_sub(u64::from(window_days) * 86_400_000),
    )
}

/// A question still open: from a package's `open_questions`, or a `question` package not
/// yet `complete`.
fn open_questions(packages: &[Package]) -> Vec<Value> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for p in packages.iter().filter(|p| status_of(p) != "draft") {
        let mut qs = p.open_questions();
        if p.member("package_type").and_then(Value::as_str) == Some("question")
            && status_of(p) != "complete"
        {
            qs.insert(0, p.title().to_string());
        }
        for q in qs {
            if seen.insert(q.clone()) {
                out.push(json!({
                    "question": q,
                    "package_id": p.package_id(),
                    "asked_at": rfc3339(p.created_at()),
                }));
            }
        }
    }
    out
}

fn fact_values(facts: &[Fact]) -> Vec<Value> {
    facts
        .iter()
        .filter_map(|f| serde_json::to_value(f).ok())
        .collect()
}

/// The §8.3 OrientationBundle of `project`: `recent` (newest first, the store's read of
/// the window: at most [`ORIENT_PACKAGES`] are shown), the current facts, the open
/// questions of `asking` (the window's packages that ask any, newest first), and (as
/// `x-awaiting_review`) how many of the project's packages await review.
pub fn orient(
    project: &Project,
    recent: &[Package],
    asking: &[Package],
    active_facts: &[Fact],
    awaiting: u64,
    window_days: u32,
    now: Timestamp,
) -> Value {
    let shown: Vec<&Package> = recent
        .iter()
        .filter(|p| status_of(p) != "draft")
        .take(ORIENT_PACKAGES)
        .collect();
    json!({
        "project": project,
        "recent_packages": shown.iter().map(|p| Value::Object(p.body().clone())).collect::<Vec<_>>(),
        "active_facts": fact_values(active_facts),
        "open_questions": open_questions(asking),
        "window_days": window_days,
        "generated_at": rfc3339(now),
        "x-awaiting_review": awaiting,
    })
}

/// One project's share of a digest, as the store read it.
#[derive(Debug, Clone)]
pub struct ProjectActivity {
    /// The project.
    pub project: Project,
    /// Its newest packages in the window, newest first (the decisions, handoffs and open
    /// questions of the digest are theirs).
    pub recent: Vec<Package>,
    /// How many packages the whole window holds, by (`package_type`, `status`), drafts
    /// left out.
    pub counts: Vec<(String, String, u64)>,
    /// Its current facts.
    pub active_facts: Vec<Fact>,
    /// Its packages awaiting review (any age).
    pub awaiting_review: Vec<Package>,
}

/// The excerpt a snippet shows: the first of `description`, `content_md`, `handoff_note`
/// that is not empty, cut at [`EXCERPT_CHARS`].
pub fn excerpt(p: &Package) -> String {
    let text = ["description", "content_md", "handoff_note"]
        .iter()
        .filter_map(|m| p.member(m).and_then(Value::as_str))
        .find(|s| !s.trim().is_empty())
        .unwrap_or("");
    let mut out: String = text.chars().take(EXCERPT_CHARS).collect();
    if text.chars().count() > EXCERPT_CHARS {
        out.push('…');
    }
    out
}

/// The §8.4 DigestBundle: a summary of the window's activity (counts by type and status,
/// the decisions made, the handoffs left), the active facts, the open questions, what
/// awaits review, the `snippets` (packages the search found for `focus`, best first) and,
/// for a global digest, the counts per project.
pub fn orchestrate(
    activity: &[ProjectActivity],
    global: bool,
    focus: Option<&str>,
    snippets: &[Package],
    window_days: u32,
    now: Timestamp,
) -> Value {
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_status: BTreeMap<String, u64> = BTreeMap::new();
    let mut decisions = Vec::new();
    let mut handoffs = Vec::new();
    let mut facts = Vec::new();
    let mut questions = Vec::new();
    let mut awaiting = Vec::new();
    let mut projects = Vec::new();
    let mut total = 0u64;
    for a in activity {
        let shown: Vec<Package> = a
            .recent
            .iter()
            .filter(|p| status_of(p) != "draft")
            .cloned()
            .collect();
        let mut in_window = 0u64;
        for (t, s, n) in a.counts.iter().filter(|(_, s, _)| s != "draft") {
            *by_type.entry(t.clone()).or_default() += n;
            *by_status.entry(s.clone()).or_default() += n;
            in_window += n;
        }
        total += in_window;
        for p in &shown {
            for d in p.decisions_made() {
                decisions.push(json!({"decision": d, "package_id": p.package_id(), "project_id": p.project_id()}));
            }
            if let Some(h) = p
                .member("handoff_note")
                .and_then(Value::as_str)
                .filter(|h| !h.is_empty())
            {
                handoffs.push(json!({
                    "handoff_note": h,
                    "package_id": p.package_id(),
                    "project_id": p.project_id(),
                    "estimated_next_actor": p.member("estimated_next_actor").cloned().unwrap_or(Value::Null),
                }));
            }
        }
        let qs = open_questions(&shown);
        facts.extend(fact_values(&a.active_facts));
        for p in &a.awaiting_review {
            awaiting.push(json!({
                "package_id": p.package_id(),
                "project_id": p.project_id(),
                "title": p.title(),
                "review_type": p.member("review_type").cloned().unwrap_or(Value::Null),
            }));
        }
        projects.push(json!({
            "project_id": a.project.project_id,
            "name": a.project.name,
            "archived_at": a.project.archived_at,
            "packages_in_window": in_window,
            "awaiting_review": a.awaiting_review.len(),
            "active_facts": a.active_facts.len(),
            "open_questions": qs.len(),
        }));
        questions.extend(qs);
    }
    let text = format!(
        "{total} package{} in the last {window_days} day{}{}; {} decision{} made, {} open question{}, {} awaiting review, {} active fact{}.",
        if total == 1 { "" } else { "s" },
        if window_days == 1 { "" } else { "s" },
        if global {
            format!(" across {} project{}", activity.len(), if activity.len() == 1 { "" } else { "s" })
        } else {
            String::new()
        },
        decisions.len(),
        if decisions.len() == 1 { "" } else { "s" },
        questions.len(),
        if questions.len() == 1 { "" } else { "s" },
        awaiting.len(),
        facts.len(),
        if facts.len() == 1 { "" } else { "s" },
    );
    let mut out = json!({
        "scope": if global { "global" } else { "project" },
        "focus": focus,
        "window_days": window_days,
        "generated_at": rfc3339(now),
        "summary": {
            "text": text,
            "packages": total,
            "by_type": by_type,
            "by_status": by_status,
            "decisions": decisions,
            "handoffs": handoffs,
        },
        "active_facts": facts,
        "open_questions": questions,
        "awaiting_review": awaiting,
        "snippets": snippets.iter().map(|p| json!({
            "package_id": p.package_id(),
            "project_id": p.project_id(),
            "title": p.title(),
            "package_type": p.member("package_type").cloned().unwrap_or(Value::Null),
            "created_at": rfc3339(p.created_at()),
            "excerpt": excerpt(p),
        })).collect::<Vec<_>>(),
    });
    if let Value::Object(map) = &mut out {
        if global {
            map.insert("projects".into(), Value::Array(projects));
        } else if let Some(a) = activity.first() {
            map.insert(
                "project".into(),
                serde_json::to_value(&a.project).unwrap_or(Value::Null),
            );
        }
    }
    out
}
