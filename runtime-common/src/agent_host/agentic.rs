//! The agent's Agentic Protocol memory (`--agentic-listen`): what each step's audit
//! records leave there (the core's [`outcomes`]), and relationship memory mirrored into
//! it — learned facts and thread summaries in, forgotten memory out.

use std::sync::Arc;

use a2acp_core::agent::{AgentEvent, AuditRecord, ThreadState};
use a2acp_core::bridge::agentic::outcomes::outcomes;
use a2acp_core::bridge::agentic::Access;
use a2acp_core::{Address, Timestamp};
use serde_json::{json, Value};
use tracing::warn;

use super::AgentHost;
use crate::agentic::routes::{self, Call};
use crate::agentic::store::AgenticStore;
use crate::control::{Request, Response};

impl AgentHost {
    /// Writes what the agent does into `store` from now on, after mirroring all of its
    /// relationship memory there.
    pub fn set_agentic_store(&mut self, store: Arc<AgenticStore>) {
        match self.agent.export_memory_passable(None) {
            Ok(text) => {
                if let Err(e) = store.mirror_memory(&text, self.now) {
                    warn!("relationship memory not mirrored into the agentic store: {e}");
                }
            }
            Err(e) => warn!("relationship memory not exported: {e}"),
        }
        self.agentic = Some(store);
    }

    /// The Agentic Protocol store the agent writes to (an agent opened from its home
    /// always has one: `agentic.db`), which `--agentic-listen` serves.
    pub fn agentic_store(&self) -> Option<Arc<AgenticStore>> {
        self.agentic.clone()
    }

    /// Leaves each record's outcomes in the agentic store. Runs before the step is
    /// committed: a step done again after a crash writes the same package ids, which the
    /// store keeps once.
    pub(super) fn leave_outcomes(&mut self, audit: &[AuditRecord]) {
        let Some(store) = self.agentic.clone() else {
            return;
        };
        let me = self.agent.address().clone();
        let mut secrets: Option<Vec<String>> = None;
        for record in audit {
            let thread = record
                .thread_id
                .as_deref()
                .and_then(|id| self.agent.thread(id));
            let secrets = secrets.get_or_insert_with(|| self.agent.never_share_values());
            for o in outcomes(record, thread, &me, secrets) {
                if let Err(e) = store.record_outcome(&me, &o, record.at) {
                    warn!("agentic store: an outcome of the agent not recorded: {e}");
                }
            }
            let peer = match &record.event {
                AgentEvent::MemoryForgotten { peer, field, .. } => {
                    let removed = match field {
                        None => store.remove_project(peer.as_str()).map(|_| ()),
                        Some(f) => store.remove_facts(peer.as_str(), f).map(|_| ()),
                    };
                    if let Err(e) = removed {
                        warn!("agentic store: forgotten memory not removed: {e}");
                    }
                    field.as_ref().map(|_| peer.clone())
                }
                AgentEvent::MemoryChanged { peer, .. } | AgentEvent::MemoryEdited { peer, .. } => {
                    Some(peer.clone())
                }
                AgentEvent::StateChanged {
                    to: ThreadState::Completed,
                    ..
                } => thread.map(|t| t.peer.clone()),
                _ => None,
            };
            if let Some(peer) = peer {
                self.mirror_peer(&store, &peer);
            }
        }
    }

    fn mirror_peer(&self, store: &AgenticStore, peer: &Address) {
        match self.agent.export_memory_passable(Some(peer)) {
            Ok(text) if text.is_empty() => {}
            Ok(text) => {
                if let Err(e) = store.mirror_memory(&text, self.now) {
                    warn!("agentic store: memory of {peer} not mirrored: {e}");
                }
            }
            Err(e) => warn!("memory of {peer} not exported: {e}"),
        }
    }
}

/// A path segment, percent-encoded.
fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A query string of the pairs that have a value.
fn query(pairs: &[(&str, Option<String>)]) -> Option<String> {
    let q: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", seg(v))))
        .collect();
    (!q.is_empty()).then(|| q.join("&"))
}

impl AgentHost {
    /// One of the Agentic Protocol's operations asked over the control socket (the MCP
    /// bridge's tools, the CLI), answered by the same routes as the HTTP service, as the
    /// local person (reviews are theirs: `reviewed_by` the user, a human).
    pub(super) fn agentic_request(&mut self, now: Timestamp, r: Request) -> Response {
        let Some(store) = self.agentic.clone() else {
            return Response::err(
                "the agent keeps no Agentic Protocol store (it has no home)".to_string(),
            );
        };
        let (method, path, q, body): (&str, String, Option<String>, Option<Value>) = match r {
            Request::Projects => ("GET", "/v1/projects".into(), None, None),
            Request::Orient {
                project,
                window_days,
            } => (
                "GET",
                format!("/v1/projects/{}/orient", seg(&project)),
                query(&[("window_days", window_days.map(|w| w.to_string()))]),
                None,
            ),
            Request::Orchestrate { project, focus } => (
                "GET",
                "/v1/orchestrate".into(),
                query(&[("project", project), ("focus", focus)]),
                None,
            ),
            Request::Pull {
                project,
                mode,
                query: text,
                package_id,
                status,
                limit,
            } => (
                "GET",
                format!("/v1/projects/{}/packages", seg(&project)),
                query(&[
                    ("mode", mode),
                    ("query", text),
                    ("package_id", package_id),
                    ("status", status),
                    ("limit", limit.map(|l| l.to_string())),
                ]),
                None,
            ),
            Request::Deposit { project, package } => (
                "POST",
                format!("/v1/projects/{}/packages", seg(&project)),
                None,
                Some(package),
            ),
            Request::FlagForReview {
                package_id,
                review_type,
                note,
            } => (
                "POST",
                format!("/v1/packages/{}/flag", seg(&package_id)),
                None,
                Some(json!({"review_type": review_type, "note": note})),
            ),
            Request::Review {
                package_id,
                status,
                note,
            } => (
                "POST",
                format!("/v1/packages/{}/review", seg(&package_id)),
                None,
                Some(json!({
                    "status": status,
                    "note": note,
                    "reviewed_by": {"id": crate::agentic::store::USER_REVIEWER, "type": "human"},
                })),
            ),
            Request::AssertFact { project, fact } => (
                "POST",
                format!("/v1/projects/{}/facts", seg(&project)),
                None,
                Some(fact),
            ),
            Request::InvalidateFact {
                project,
                subject,
                predicate,
                object,
            } => (
                "DELETE",
                format!("/v1/projects/{}/facts", seg(&project)),
                query(&[
                    ("subject", Some(subject)),
                    ("predicate", Some(predicate)),
                    ("object", object),
                ]),
                None,
            ),
            Request::Facts { project, at } => (
                "GET",
                format!("/v1/projects/{}/facts", seg(&project)),
                query(&[("at", at)]),
                None,
            ),
            other => return Response::err(format!("not an Agentic Protocol request: {other:?}")),
        };
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let call = Call {
            method,
            path: &path,
            query: q.as_deref(),
            content_type: Some("application/json"),
            body: bytes.as_bytes(),
        };
        let reply = routes::handle(&store, &Access::Open, &call, now, env!("CARGO_PKG_VERSION"));
        if reply.status < 300 {
            Response::ok(reply.body)
        } else {
            let code = reply.body["error"].as_str().unwrap_or("error");
            let message = reply.body["message"].as_str().unwrap_or("");
            Response::err(format!("{} {code}: {message}", reply.status))
        }
    }
}
