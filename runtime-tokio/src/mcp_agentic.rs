//! The MCP bridge's tools for the agent's Agentic Protocol memory (seed 002 §8): each is
//! the control request of the same name, answered by the same routes as `/v1/…`. `orient`
//! on a relationship before a new thread is the case they make easy: the project of a
//! relationship is the other agent's address.

use serde_json::{json, Value};

use crate::mcp::{Consent, ToolSpec};

fn project() -> Value {
    json!({"type": "string", "description": "The project: a relationship's is the other agent's address (agent:bob@example.org), a group's group:<id>; see projects."})
}

/// The tools.
pub(crate) const AGENTIC_TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "projects",
        description: "The agent's Agentic Protocol projects (seed 002): one per relationship, one per group, and any other tool's.",
        schema: crate::mcp::no_args,
        read_only: true,
        consent: Consent::None,
    },
    ToolSpec {
        name: "orient",
        description: "What the agent knows of a project before acting in it (seed 002 §8.3): recent packages (decisions, milestones, open questions), current facts, what awaits review. Call it on a relationship before starting a thread with that agent.",
        schema: || {
            json!({
                "type": "object",
                "properties": {
                    "project": project(),
                    "window_days": {"type": "integer", "minimum": 1, "maximum": 3650, "description": "How many days back (default 14)."}
                },
                "required": ["project"],
                "additionalProperties": false
            })
        },
        read_only: true,
        consent: Consent::None,
    },
    ToolSpec {
        name: "orchestrate",
        description: "A digest of one project or all (seed 002 §8.4): activity, active facts, open questions, and snippets about `focus`.",
        schema: || {
            json!({
                "type": "object",
                "properties": {
                    "project": project(),
                    "focus": {"type": "string", "description": "What the snippets should be about."}
                },
                "additionalProperties": false
            })
        },
        read_only: true,
        consent: Consent::None,
    },
    ToolSpec {
        name: "pull",
        description: "Packages of a project (seed 002 §8.2): the latest, one by id (specific), or those matching a query (relevant, full-text).",
        schema: || {
            json!({
                "type": "object",
                "properties": {
                    "project": project(),
                    "mode": {"type": "string", "enum": ["latest", "specific", "relevant"]},
                    "query": {"type": "string", "description": "relevant: what to search for."},
                    "package_id": {"type": "string", "description": "specific: the package."},
                    "status": {"type": "string", "enum": ["draft", "complete", "awaiting_review", "revision_requested"]},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 200}
                },
                "required": ["project"],
                "additionalProperties": false
            })
        },
        read_only: true,
        consent: Consent::None,
    },
    ToolSpec {
        name: "deposit",
        description: "Deposit a context package (seed 002 §6, §8.1) into a project: package_id, project_id (the same project), relay_version, title, status, package_type, review_type, created_at, created_by are required; the content hash is computed by the agent.",
        schema: || {
            json!({
                "type": "object",
                "properties": {
                    "project": project(),
                    "package": {"type": "object", "description": "The package (seed 002 §6).", "additionalProperties": true}
                },
                "required": ["project", "package"],
                "additionalProperties": false
            })
        },
        read_only: false,
        consent: Consent::None,
    },
    ToolSpec {
        name: "flag_for_review",
        description: "Ask for a package to be reviewed (seed 002 §8.5) by a human or an agent.",
        schema: || {
            json!({
                "type": "object",
                "properties": {
                    "package_id": {"type": "string"},
                    "review_type": {"type": "string", "enum": ["human", "agent"]},
                    "note": {"type": "string"}
                },
                "required": ["package_id", "review_type"],
                "additionalProperties": false
            })
        },
        read_only: false,
        consent: Consent::None,
    },
    ToolSpec {
        name: "review",
        description: "The person's review of a package (seed 002 §5.3): complete, or revision_requested. Asked of the person through the host: a review is theirs, never the model's.",
        schema: || {
            json!({
                "type": "object",
                "properties": {
                    "package_id": {"type": "string"},
                    "status": {"type": "string", "enum": ["complete", "revision_requested", "awaiting_review"]},
                    "note": {"type": "string"}
                },
                "required": ["package_id", "status"],
                "additionalProperties": false
            })
        },
        read_only: false,
        consent: Consent::Confirm,
    },
    ToolSpec {
        name: "assert_fact",
        description: "Assert a fact (seed 002 §7, §8.6): what is believed now of a subject's predicate; the current fact of the same subject and predicate ends where this one starts.",
        schema: || {
            json!({
                "type": "object",
                "properties": {
                    "project": project(),
                    "fact": {
                        "type": "object",
                        "description": "subject, predicate, value (strings); optional valid_from (RFC 3339), confidence (0–1), source_package_id, tags.",
                        "additionalProperties": true
                    }
                },
                "required": ["project", "fact"],
                "additionalProperties": false
            })
        },
        read_only: false,
        consent: Consent::None,
    },
    ToolSpec {
        name: "invalidate_fact",
        description: "End the current fact of a subject's predicate (seed 002 §8.7), or only the one with `object` as its value.",
        schema: || {
            json!({
                "type": "object",
                "properties": {
                    "project": project(),
                    "subject": {"type": "string"},
                    "predicate": {"type": "string"},
                    "object": {"type": "string"}
                },
                "required": ["project", "subject", "predicate"],
                "additionalProperties": false
            })
        },
        read_only: false,
        consent: Consent::None,
    },
    ToolSpec {
        name: "facts",
        description: "The facts of a project (seed 002 §7.3): those current now, or those that held at `at`.",
        schema: || {
            json!({
                "type": "object",
                "properties": {
                    "project": project(),
                    "at": {"type": "string", "description": "An RFC 3339 time (2026-05-01T00:00:00Z)."}
                },
                "required": ["project"],
                "additionalProperties": false
            })
        },
        read_only: true,
        consent: Consent::None,
    },
];
