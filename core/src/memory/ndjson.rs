//! Export and import of a [`MemoryStore`] as NDJSON (seed 002 §10.3: backup as the §6/§7
//! wire formats, hashes preserved).
//!
//! One JSON object per line, `\n`-terminated, UTF-8:
//!
//! - `{"kind":"package","content_hash":"sha256:<64 hex>","package":{…seed 002 §6…}}` —
//!   the hash travels beside the package, not inside it (§6.6: no self-reference);
//! - `{"kind":"fact","fact":{…seed 002 §7…}}`;
//! - `{"kind":"project",…}` and `{"kind":"session",…}`, which the Agentic Protocol
//!   service's export (`GET /v1/export`) adds, are read and skipped: one format for both.
//!
//! Export writes every package (by project, then `package_id`), then every fact (by project, subject,
//! predicate, then `valid_from`), each line's members in canonical order (RFC 8785), so
//! the same memory always exports to the same bytes. Import verifies each package's
//! hash against its content and each fact's §7 constraints, then the §7.3 invariants of
//! every series, and applies all lines or none: one tampered or invalid line refuses the
//! whole file, naming the line.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{canonical, Fact, MemoryError, MemoryStore, Package};

/// What an import added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImportSummary {
    /// Lines read.
    pub lines: usize,
    /// Packages now stored that were not before.
    pub new_packages: usize,
    /// Facts now stored that were not before.
    pub new_facts: usize,
}

impl MemoryStore {
    /// The whole memory as NDJSON.
    pub fn export_ndjson(&self) -> Result<String, MemoryError> {
        let mut out = String::new();
        for package in self.packages() {
            let line = serde_json::json!({
                "kind": "package",
                "content_hash": package.content_hash(),
                "package": Value::Object(package.body().clone()),
            });
            push_line(&mut out, &line)?;
        }
        for series in self.facts.values() {
            let mut ordered: Vec<&Fact> = series.iter().collect();
            ordered.sort_by(|a, b| super::fact_order(a, b));
            for fact in ordered {
                let fact = serde_json::to_value(fact).map_err(|e| MemoryError::InvalidFact {
                    fact_id: fact.fact_id.clone(),
                    reason: e.to_string(),
                })?;
                push_line(&mut out, &serde_json::json!({"kind": "fact", "fact": fact}))?;
            }
        }
        Ok(out)
    }

    /// The memory of one project (one peer) as NDJSON.
    pub fn export_project_ndjson(&self, project_id: &str) -> Result<String, MemoryError> {
        let mut only = MemoryStore::new();
        for p in self.project_packages(project_id) {
            only.deposit(p.clone())?;
        }
        only.facts = self
            .project_series(project_id)
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        only.export_ndjson()
    }

    /// Imports NDJSON into this memory: all lines or none. Costs in proportion to the
    /// projects the lines are about, not to the whole memory.
    pub fn import_ndjson(&mut self, text: &str) -> Result<ImportSummary, MemoryError> {
        let mut summary = ImportSummary::default();
        let mut packages = Vec::new();
        let mut facts = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            if raw.trim().is_empty() {
                continue;
            }
            summary.lines += 1;
            let at = |error: MemoryError| MemoryError::AtLine {
                line,
                error: Box::new(error),
            };
            let malformed = |reason: String| MemoryError::Line { line, reason };
            let mut obj: Map<String, Value> = match serde_json::from_str(raw) {
                Ok(Value::Object(obj)) => obj,
                Ok(_) => return Err(malformed("not a JSON object".into())),
                Err(e) => return Err(malformed(format!("not JSON: {e}"))),
            };
            match obj.get("kind").and_then(Value::as_str) {
                Some("package") => {
                    let hash = obj
                        .get("content_hash")
                        .and_then(Value::as_str)
                        .map(String::from)
                        .ok_or_else(|| malformed("package line without `content_hash`".into()))?;
                    let body = match obj.remove("package") {
                        Some(Value::Object(body)) => body,
                        _ => {
                            return Err(malformed("package line without a `package` object".into()))
                        }
                    };
                    packages.push((line, Package::verified(body, &hash).map_err(at)?));
                }
                Some("fact") => {
                    let fact = obj
                        .remove("fact")
                        .ok_or_else(|| malformed("fact line without a `fact` object".into()))?;
                    let fact: Fact = serde_json::from_value(fact)
                        .map_err(|e| malformed(format!("fact: {e}")))?;
                    facts.push((line, fact));
                }
                // The Agentic Protocol service's export also carries its projects and
                // sessions (same format); the agent's memory has neither, and skips them.
                Some("project" | "session") => {}
                other => return Err(malformed(format!("unknown `kind` {other:?}"))),
            }
        }
        // Only the projects named are copied and checked; the rest is untouched.
        let projects: BTreeSet<String> = packages
            .iter()
            .map(|(_, p)| p.project_id().to_string())
            .chain(facts.iter().map(|(_, f)| f.project_id.clone()))
            .collect();
        let mut before = MemoryStore::new();
        for project in &projects {
            before.merge(self.take_project(project));
        }
        before.sequence = self.sequence;
        let mut next = before.clone();
        let applied = (|| {
            for (line, package) in packages {
                next.deposit(package).map_err(|error| MemoryError::AtLine {
                    line,
                    error: Box::new(error),
                })?;
            }
            for (line, fact) in facts {
                next.insert_fact(fact)
                    .map_err(|error| MemoryError::AtLine {
                        line,
                        error: Box::new(error),
                    })?;
            }
            next.check_series()?;
            // Ids from another project already held elsewhere are refused too.
            if let Some(id) = next
                .package_projects
                .keys()
                .find(|id| self.package_projects.contains_key(*id))
            {
                return Err(MemoryError::DuplicatePackage(id.clone()));
            }
            Ok(())
        })();
        match applied {
            Ok(()) => {
                summary.new_packages = next.packages.len() - before.packages.len();
                summary.new_facts = next.facts().count() - before.facts().count();
                next.sequence = next.sequence.max(self.sequence) + summary.new_facts as u64;
                // `next` holds only these projects, and its ids were checked against the
                // rest above.
                self.merge(next);
                Ok(summary)
            }
            Err(e) => {
                self.merge(before);
                Err(e)
            }
        }
    }
}

fn push_line(out: &mut String, line: &Value) -> Result<(), MemoryError> {
    let bytes = canonical::rfc8785(line)?;
    out.push_str(&String::from_utf8_lossy(&bytes));
    out.push('\n');
    Ok(())
}
