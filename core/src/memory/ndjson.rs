//! Export and import of a [`MemoryStore`] as NDJSON (seed 002 §10.3: backup as the §6/§7
//! wire formats, hashes preserved).
//!
//! One JSON object per line, `\n`-terminated, UTF-8:
//!
//! - `{"kind":"package","content_hash":"sha256:<64 hex>","package":{…seed 002 §6…}}` —
//!   the hash travels beside the package, not inside it (§6.6: no self-reference);
//! - `{"kind":"fact","fact":{…seed 002 §7…}}`.
//!
//! Export writes every package (by `package_id`), then every fact (by project, subject,
//! predicate, then `valid_from`), each line's members in canonical order (RFC 8785), so
//! the same memory always exports to the same bytes. Import verifies each package's
//! hash against its content and each fact's §7 constraints, then the §7.3 invariants of
//! every series, and applies all lines or none: one tampered or invalid line refuses the
//! whole file, naming the line.

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
        for fact in self.facts() {
            let fact = serde_json::to_value(fact).map_err(|e| MemoryError::InvalidFact {
                fact_id: fact.fact_id.clone(),
                reason: e.to_string(),
            })?;
            push_line(&mut out, &serde_json::json!({"kind": "fact", "fact": fact}))?;
        }
        Ok(out)
    }

    /// The memory of one project (one peer) as NDJSON.
    pub fn export_project_ndjson(&self, project_id: &str) -> Result<String, MemoryError> {
        let mut only = MemoryStore::new();
        only.packages = self
            .packages
            .iter()
            .filter(|(_, p)| p.project_id() == project_id)
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        only.facts = self
            .facts
            .iter()
            .filter(|((p, _, _), _)| p == project_id)
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        only.export_ndjson()
    }

    /// Imports NDJSON into this memory: all lines or none.
    pub fn import_ndjson(&mut self, text: &str) -> Result<ImportSummary, MemoryError> {
        let mut next = self.clone();
        let mut summary = ImportSummary::default();
        let packages_before = next.packages.len();
        let facts_before = next.facts().count();
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
                    let package = Package::verified(body, &hash).map_err(at)?;
                    next.deposit(package).map_err(at)?;
                }
                Some("fact") => {
                    let fact = obj
                        .remove("fact")
                        .ok_or_else(|| malformed("fact line without a `fact` object".into()))?;
                    let fact: Fact = serde_json::from_value(fact)
                        .map_err(|e| malformed(format!("fact: {e}")))?;
                    next.insert_fact(fact).map_err(at)?;
                }
                other => return Err(malformed(format!("unknown `kind` {other:?}"))),
            }
        }
        next.check_series()?;
        next.sequence = next.sequence.max(next.facts().count() as u64);
        summary.new_packages = next.packages.len() - packages_before;
        summary.new_facts = next.facts().count() - facts_before;
        *self = next;
        Ok(summary)
    }
}

fn push_line(out: &mut String, line: &Value) -> Result<(), MemoryError> {
    let bytes = canonical::rfc8785(line)?;
    out.push_str(&String::from_utf8_lossy(&bytes));
    out.push('\n');
    Ok(())
}
