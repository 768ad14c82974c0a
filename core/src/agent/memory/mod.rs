//! Relationship memory at work in the agent (§11): each thread that ends COMPLETED is
//! recorded in the peer's memory ([`crate::memory`]: facts and an immutable package),
//! persisted per peer as `memory/<address>` (the peer's NDJSON, seed 002 §10.3) and
//! restored on start; a value the peer shared that contradicts the context cache updates
//! it and the user is told ([`MemoryChange`]); the user reads, edits and forgets it, and
//! blocking or forgetting a contact purges everything about them.
//!
//! Memory never leaves the device: nothing here builds a packet.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use super::thread::Thread;
use super::*;

use crate::memory::ndjson::ImportSummary;
use crate::memory::{Actor, AssertOptions, Confidence, MemoryError, MemoryStore, ThreadSummary};

pub mod reputation;

/// The record key prefix of a peer's memory.
pub(super) const MEMORY_PREFIX: &str = "memory/";

/// The prefixes of the predicates that are about one field of the peer's user.
const FIELD_PREDICATES: [&str; 4] = ["cache.", "shared.", "declined.", "usage."];

/// A context value as memory keeps it: a string as itself, anything else as its compact
/// JSON.
pub(super) fn value_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A cached text back as a context value: JSON arrays and objects as themselves (memory
/// keeps them as compact JSON, [`value_text`]), anything else as the string.
fn text_value(text: &str) -> Value {
    if text.starts_with('[') || text.starts_with('{') {
        if let Ok(v) = serde_json::from_str(text) {
            return v;
        }
    }
    Value::String(text.to_string())
}

/// What relationship memory lends a thread with one peer (§11.2, §5.4).
#[derive(Debug, Clone, Default)]
pub(super) struct Remembered {
    /// Values the peer shared before that are still fresh (high confidence, §11.3),
    /// and under `flexibility` the flexibility it usually states: what is here is not
    /// asked for again; a stale value is (re-verified). Never copied into a packet.
    pub(super) context: Context,
    /// Fields the peer usually declines: not asked for unless required.
    pub(super) usually_declines: BTreeSet<String>,
    /// Fields the peer usually asks for: front-loaded where the tiers allow (§5.4).
    pub(super) usually_requests: Vec<String>,
}

impl Shared {
    /// What memory holds about `peer` for a thread about `intent` now: a value whose
    /// usage rule names another purpose, or expired, is not lent (SPEC-NOTES "Usage
    /// rules").
    pub(super) fn remembered(&self, peer: &Address, intent: &crate::packet::Intent) -> Remembered {
        let Some(r) = self.memory.relationship(peer.as_str(), self.now) else {
            return Remembered::default();
        };
        let mut context: Context = r
            .context_cache
            .iter()
            .filter(|(_, e)| e.confidence == Confidence::High)
            .filter(|(k, _)| self.rule_allows(peer, k, &intent.category))
            .map(|(k, e)| (k.clone(), text_value(&e.value)))
            .collect();
        if !r.typical_flexibility.is_empty() {
            let flex = r
                .typical_flexibility
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            context.insert("flexibility".into(), Value::Object(flex));
        }
        Remembered {
            context,
            usually_declines: r.usually_declines.into_iter().collect(),
            usually_requests: r.usually_requests,
        }
    }
}

/// What a completed thread showed about its peer.
fn summary_of(t: &Thread) -> ThreadSummary {
    let decisions = t
        .stage
        .resolution()
        .map(|r| vec![r.body.proposal.summary.clone()])
        .unwrap_or_default();
    ThreadSummary {
        thread_id: t.id.clone(),
        intent: t.intent.category.clone(),
        title: t.intent.summary.clone(),
        shared_by_peer: t
            .theirs
            .iter()
            .map(|(k, v)| (k.clone(), value_text(v)))
            .collect(),
        usage_by_peer: t
            .usage
            .iter()
            .filter(|(k, _)| t.theirs.contains_key(*k))
            .filter_map(|(k, r)| Some((k.clone(), serde_json::to_string(r).ok()?)))
            .collect(),
        declined_by_peer: t.peer_unavailable.iter().cloned().collect(),
        requested_by_peer: t.answered.iter().cloned().collect(),
        peer_flexibility: crate::negotiator::stated_flexibility(&t.theirs),
        resolution_style: Some(resolution_style(t).to_string()),
        response_times: t
            .peer_response_ms
            .iter()
            .map(|ms| Duration::from_millis(*ms))
            .collect(),
        decisions,
        open_questions: Vec::new(),
    }
}

/// How the peer of completed thread `t` reached its resolution: `deliberate` when it
/// answered a proposal with anything but a confirmation, else `quick_decision` (§11.1
/// `preferred_resolution_style`). Only the peer's own answers count: a proposal it made
/// again because this side asked for something different says nothing about it.
fn resolution_style(t: &Thread) -> &'static str {
    let deliberated = t
        .history
        .iter()
        .filter(|h| !h.outgoing && h.kind == "resolution_response")
        .any(|h| {
            serde_json::from_str::<Value>(&h.json)
                .ok()
                .and_then(|v| v.get("status").and_then(Value::as_str).map(str::to_string))
                .as_deref()
                != Some("confirmed")
        });
    if deliberated {
        "deliberate"
    } else {
        "quick_decision"
    }
}

/// Whether `store` already recorded thread `id` with `peer` (a thread restored after a
/// crash between its memory record and its thread record completes again: recorded once).
fn recorded(store: &MemoryStore, peer: &str, id: &str) -> bool {
    store.packages().any(|p| {
        p.project_id() == peer
            && p.body()
                .get("x-a2acp-provenance")
                .and_then(|v| v.get("thread_id"))
                .and_then(serde_json::Value::as_str)
                == Some(id)
    })
}

impl ThreadStep<'_> {
    /// Records this thread, which just ended COMPLETED, in its peer's memory; contradicted
    /// cache values are told to the user.
    pub(super) fn record_memory(&mut self) {
        let peer = self.t.peer.clone();
        let key = peer.to_string();
        if self.shared.settings.blocked.contains(&peer)
            || recorded(&self.shared.memory, &key, &self.t.id)
        {
            return;
        }
        let summary = summary_of(self.t);
        let own = self.shared.config.address.to_string();
        match self
            .shared
            .memory
            .record_completed_thread(self.shared.now, &own, &key, &summary)
        {
            Ok(rec) => {
                self.shared.dirty.memory.insert(peer.clone());
                let usage = self.t.usage.clone();
                self.shared.index_rules(&peer, &usage);
                for c in rec.changes {
                    self.audit(AgentEvent::MemoryChanged {
                        peer: peer.clone(),
                        field: c.field.clone(),
                        old: c.old.clone(),
                        new: c.new.clone(),
                    });
                    self.shared.notify_memory_change(
                        Some(self.id.to_string()),
                        MemoryChange {
                            peer: peer.clone(),
                            field: c.field,
                            old: c.old,
                            new: c.new,
                        },
                    );
                }
            }
            Err(e) => self.audit(AgentEvent::MemoryRefused {
                peer,
                error: e.to_string(),
            }),
        }
    }
}

impl Shared {
    /// Forgets everything about `peer`: its facts with their history, its packages, and
    /// the approvals and suggestions learnt about it (§11.3 purge). Returns the facts and
    /// packages removed.
    fn purge_peer(&mut self, peer: &Address) -> (usize, usize) {
        let (facts, packages) = self.memory.purge_project(peer.as_str());
        if facts + packages > 0 {
            self.dirty.memory.insert(peer.clone());
        }
        if let Some(rec) = self.peers.get_mut(peer) {
            rec.approvals.clear();
            rec.suggested.clear();
            rec.pending.clear();
            self.dirty.peers.insert(peer.clone());
        }
        (facts, packages)
    }

    /// Forgets one field of `peer`: its cached value and the counts of it being shared
    /// or declined, with their history.
    pub(in crate::agent) fn forget_field(&mut self, peer: &Address, field: &str) {
        let p = peer.as_str();
        let facts: usize = FIELD_PREDICATES
            .iter()
            .map(|pre| self.memory.forget_series(p, p, &format!("{pre}{field}")))
            .sum();
        if let Some(rec) = self.peers.get_mut(peer) {
            if rec.approvals.remove(field).is_some() | rec.suggested.remove(field).is_some() {
                self.dirty.peers.insert(peer.clone());
            }
        }
        self.dirty.memory.insert(peer.clone());
        self.audit(
            None,
            AgentEvent::MemoryForgotten {
                peer: peer.clone(),
                field: Some(field.to_string()),
                facts,
                packages: 0,
                threads: 0,
            },
        );
    }

    /// Sets a cached value by hand: a fact asserted by the person.
    fn edit_memory(&mut self, peer: &Address, field: &str, value: &str) {
        let p = peer.as_str();
        let opts = AssertOptions {
            asserted_by: Some(Actor::human("user")),
            ..Default::default()
        };
        match self
            .memory
            .assert_fact(self.now, p, p, &format!("cache.{field}"), value, opts)
        {
            Ok(_) => {
                self.dirty.memory.insert(peer.clone());
                self.audit(
                    None,
                    AgentEvent::MemoryEdited {
                        peer: peer.clone(),
                        field: field.to_string(),
                    },
                );
            }
            Err(e) => self.audit(
                None,
                AgentEvent::MemoryRefused {
                    peer: peer.clone(),
                    error: e.to_string(),
                },
            ),
        }
    }

    /// Imports NDJSON memory, all or nothing: refused if it does not read, or holds
    /// memory under a project that is not an agent's address, or about a blocked agent.
    fn import_memory(&mut self, ndjson: &str) -> Result<ImportSummary, String> {
        let mut next = self.memory.clone();
        let summary = next.import_ndjson(ndjson).map_err(|e| e.to_string())?;
        let mut touched = Vec::new();
        for project in next.projects() {
            let addr = match Address::parse(&project) {
                Ok(a) if a.as_str() == project => a,
                _ => return Err(format!("memory of `{project}`: not an agent's address")),
            };
            if self.settings.blocked.contains(&addr) {
                return Err(format!("memory of {addr}: the agent is blocked"));
            }
            if next.export_project_ndjson(&project).ok()
                != self.memory.export_project_ndjson(&project).ok()
            {
                touched.push(addr);
            }
        }
        self.memory = next;
        self.dirty.memory.extend(touched);
        self.index_usage();
        Ok(summary)
    }
}

impl Agent {
    /// Forgets the relationship with `peer` (§11.3: a block, or the contact removed):
    /// its memory, what was learnt of it, and its ended threads with their records —
    /// afterwards no persisted record holds anything it shared. Open threads stay (a
    /// block declines them first); the group legs of a group this agent still
    /// coordinates stay until the group ends.
    pub(super) fn purge_relationship(&mut self, peer: &Address) {
        let (facts, packages) = self.shared.purge_peer(peer);
        let ended: Vec<String> = self
            .threads
            .values()
            .filter(|t| &t.peer == peer && t.state.is_terminal())
            .filter(|t| {
                t.group
                    .as_ref()
                    .is_none_or(|g| !self.shared.groups.contains_key(&g.header.group_id))
            })
            .map(|t| t.id.clone())
            .collect();
        let threads = ended.len();
        for id in ended {
            self.forget_thread(&id);
        }
        if facts + packages + threads > 0 {
            self.shared.audit(
                None,
                AgentEvent::MemoryForgotten {
                    peer: peer.clone(),
                    field: None,
                    facts,
                    packages,
                    threads,
                },
            );
        }
    }

    pub(super) fn on_memory_command(&mut self, c: Command) {
        match c {
            Command::EditMemory { peer, field, value } => {
                self.shared.edit_memory(&peer, &field, &value)
            }
            Command::ForgetMemory {
                peer,
                field: Some(field),
            } => self.shared.forget_field(&peer, &field),
            Command::ForgetMemory { peer, field: None } => self.purge_relationship(&peer),
            Command::ImportMemory { ndjson } => {
                if let Err(error) = self.shared.import_memory(&ndjson) {
                    self.shared.notify(
                        None,
                        NotifyKind::Info,
                        format!("Memory import refused: {error}"),
                    );
                }
            }
            _ => {}
        }
    }

    /// Relationship memory (§11): facts and packages about every peer.
    pub fn memory(&self) -> &MemoryStore {
        &self.shared.memory
    }

    /// The §11.1 view of what this agent remembers about `peer`, as JSON; `None` if
    /// nothing.
    pub fn relationship_json(&self, peer: &Address) -> Option<serde_json::Value> {
        self.shared
            .memory
            .relationship_json(peer.as_str(), self.shared.now)
    }

    /// All memory (or one peer's) as NDJSON (seed 002 §10.3).
    pub fn export_memory(&self, peer: Option<&Address>) -> Result<String, MemoryError> {
        match peer {
            Some(p) => self.shared.memory.export_project_ndjson(p.as_str()),
            None => self.shared.memory.export_ndjson(),
        }
    }

    /// [`Agent::export_memory`] as a third party may read it (the Agentic Protocol store
    /// the agent serves to other tools): without the values, and their history, whose
    /// usage rule forbids passing them on (SPEC-NOTES "Usage rules").
    pub fn export_memory_passable(&self, peer: Option<&Address>) -> Result<String, MemoryError> {
        let m = &self.shared.memory;
        let held: Vec<(String, String)> = m
            .facts()
            .filter(|f| f.valid_to.is_none())
            .filter_map(|f| {
                let field = f.predicate.strip_prefix(crate::memory::USAGE_PREFIX)?;
                let r: crate::packet::UsageRule = serde_json::from_str(&f.value).ok()?;
                r.no_reshare
                    .then(|| (f.project_id.clone(), format!("cache.{field}")))
            })
            .collect();
        if held.is_empty() {
            return self.export_memory(peer);
        }
        let mut m = m.clone();
        for (p, predicate) in held {
            m.forget_series(&p, &p, &predicate);
        }
        match peer {
            Some(p) => m.export_project_ndjson(p.as_str()),
            None => m.export_ndjson(),
        }
    }
}

#[cfg(test)]
mod tests;
