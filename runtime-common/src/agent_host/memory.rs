//! The host's side of relationship memory (§11): `memory edit|forget|export|import`
//! and `memory show` over the control socket.

use std::collections::BTreeMap;

use a2acp_core::agent::{Command, Input};
use a2acp_core::encoding::b64_encode;
use a2acp_core::memory::USAGE_PREFIX;
use a2acp_core::packet::Context;
use a2acp_core::{Address, Timestamp};

use super::{AgentHost, Effect, HostError};
use crate::control::{PeerMemory, Request, Response};

impl AgentHost {
    /// `memory show`: per peer, what the agent pins and knows, and what it remembers.
    pub(super) fn memory(&self, only: Option<&Address>) -> Vec<PeerMemory> {
        let a = &self.agent;
        let mut peers: BTreeMap<Address, PeerMemory> = BTreeMap::new();
        let entry = |p: &Address| -> PeerMemory {
            PeerMemory {
                address: p.to_string(),
                pinned_key: a.pinned_key(p).map(|k| b64_encode(&k)),
                flagged: a.is_flagged(p),
                blocked: a.blocked().contains(p),
                relationship: a.overrides().get(p).cloned(),
                threads: BTreeMap::new(),
                they_shared: Context::new(),
                we_shared: Vec::new(),
                remembered: a.relationship_json(p),
                reputation: a.reputation(p),
                usage: a
                    .memory()
                    .current_facts(p.as_str(), p.as_str())
                    .into_iter()
                    .filter_map(|f| {
                        let field = f.predicate.strip_prefix(USAGE_PREFIX)?;
                        Some((field.to_string(), serde_json::from_str(&f.value).ok()?))
                    })
                    .collect(),
            }
        };
        let mut known: Vec<Address> = a.threads().values().map(|t| t.peer.clone()).collect();
        known.extend(
            a.memory()
                .projects()
                .iter()
                .filter_map(|p| Address::parse(p).ok()),
        );
        known.extend(a.overrides().keys().cloned());
        known.extend(a.blocked().iter().cloned());
        for p in known {
            if only.is_some_and(|o| o != &p) {
                continue;
            }
            if !peers.contains_key(&p) {
                let e = entry(&p);
                peers.insert(p.clone(), e);
            }
        }
        if let Some(o) = only {
            if !peers.contains_key(o) {
                let e = entry(o);
                peers.insert(o.clone(), e);
            }
        }
        for t in a.threads().values() {
            if let Some(m) = peers.get_mut(&t.peer) {
                *m.threads.entry(t.state.to_string()).or_insert(0) += 1;
                for (k, v) in &t.theirs {
                    m.they_shared.insert(k.clone(), v.clone());
                    if let Some(r) = t.usage.get(k) {
                        m.usage.insert(k.clone(), r.clone());
                    }
                }
                for k in t.shared.keys() {
                    if !m.we_shared.contains(k) {
                        m.we_shared.push(k.clone());
                    }
                }
            }
        }
        peers.into_values().collect()
    }

    /// Serves a `memory_edit`, `memory_forget`, `memory_export` or `memory_import`
    /// request.
    pub(super) fn memory_request(
        &mut self,
        now: Timestamp,
        req: Request,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        let cmd = |h: &mut AgentHost, c: Command| h.handle(now, Input::Command(c));
        Ok(match req {
            Request::MemoryEdit {
                address,
                field,
                value,
            } => {
                let peer = match Address::parse(&address) {
                    Ok(a) => a,
                    Err(e) => return Ok((Response::err(format!("`{address}`: {e}")), Vec::new())),
                };
                if let Err(m) = memory_field(&field) {
                    return Ok((Response::err(m), Vec::new()));
                }
                if self.agent.blocked().contains(&peer) {
                    return Ok((
                        Response::err(format!("{peer} is blocked: nothing is remembered about it")),
                        Vec::new(),
                    ));
                }
                let e = cmd(
                    self,
                    Command::EditMemory {
                        peer: peer.clone(),
                        field: field.clone(),
                        value: value.clone(),
                    },
                )?;
                let ok = self
                    .agent
                    .memory()
                    .current(peer.as_str(), peer.as_str(), &format!("cache.{field}"))
                    .is_some_and(|f| f.value == value);
                if ok {
                    (
                        Response::ok(format!("{peer}: {field} remembered as you said")),
                        e,
                    )
                } else {
                    (
                        Response::err(format!("{peer}: {field} could not be set")),
                        e,
                    )
                }
            }
            Request::MemoryForget { address, field } => {
                let peer = match Address::parse(&address) {
                    Ok(a) => a,
                    Err(e) => return Ok((Response::err(format!("`{address}`: {e}")), Vec::new())),
                };
                if let Some(f) = &field {
                    if let Err(m) = memory_field(f) {
                        return Ok((Response::err(m), Vec::new()));
                    }
                }
                let text = match &field {
                    Some(f) => format!("{peer}: {f} forgotten, with its history"),
                    None => format!(
                        "everything about {peer} forgotten: its memory, what was learnt of it and its ended threads"
                    ),
                };
                let e = cmd(self, Command::ForgetMemory { peer, field })?;
                (Response::ok(text), e)
            }
            Request::MemoryExport { address } => {
                let peer =
                    match address.map(|a| Address::parse(&a).map_err(|e| format!("`{a}`: {e}"))) {
                        None => None,
                        Some(Ok(a)) => Some(a),
                        Some(Err(m)) => return Ok((Response::err(m), Vec::new())),
                    };
                match self.agent.export_memory(peer.as_ref()) {
                    Ok(text) => (Response::ok(text), Vec::new()),
                    Err(e) => (
                        Response::err(format!("memory export failed: {e}")),
                        Vec::new(),
                    ),
                }
            }
            Request::MemoryImport { ndjson } => {
                // Checked on a copy first, so the refusal can say why; the agent checks
                // again (and refuses memory about a blocked agent or under a project that
                // is no address).
                let mut probe = self.agent.memory().clone();
                let summary = match probe.import_ndjson(&ndjson) {
                    Ok(s) => s,
                    Err(e) => {
                        return Ok((Response::err(format!("import refused: {e}")), Vec::new()))
                    }
                };
                let before = self.agent.memory().clone();
                let e = cmd(self, Command::ImportMemory { ndjson })?;
                if self.agent.memory() == &before && summary.new_facts + summary.new_packages > 0 {
                    let why = self
                        .notifications
                        .back()
                        .map(|n| n.notification.text.clone())
                        .unwrap_or_else(|| "the agent refused it".into());
                    (Response::err(why), e)
                } else {
                    (
                        Response::ok(format!(
                            "imported {} line(s): {} new package(s), {} new fact(s)",
                            summary.lines, summary.new_packages, summary.new_facts
                        )),
                        e,
                    )
                }
            }
            _ => (Response::err("not a memory request"), Vec::new()),
        })
    }
}

/// A field name `memory edit|forget` accepts: 1–64 characters of letters, digits, `_`,
/// `-` and `.` (the predicates are `cache.<field>`).
fn memory_field(field: &str) -> Result<(), String> {
    let ok = !field.is_empty()
        && field.chars().count() <= 64
        && field
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{field}` is not a field name (letters, digits, `_`, `-`, `.`; at most 64)"
        ))
    }
}
