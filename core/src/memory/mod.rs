//! Relationship memory's storage (§11), in the data model of the Agentic Protocol (seed
//! 002): temporal facts (its §7) for what is currently believed, immutable content-hashed
//! context packages (its §6) for what happened, NDJSON export and import (its §10.3).
//!
//! Everything here is deterministic: time is a parameter, ids are derived from content,
//! collections are ordered (`BTreeMap`). A [`MemoryStore`] is one agent's memory; every
//! change is all-or-nothing (a refused change leaves the store as it was).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Timestamp;

pub mod canonical;
mod fact;
pub mod ndjson;
mod package;
mod relationship;

pub(crate) use fact::format_time;
pub use fact::Fact;
pub use package::{Package, PackageDraft, PACKAGE_TYPES, RELAY_VERSION, STATUSES};
pub use relationship::{
    is_cached_field, CacheChange, CacheEntry, Confidence, Recorded, Relationship, ThreadSummary,
    TrustLevel, FLEXIBILITY_ASPECTS, FLEXIBILITY_LEVELS, STALE_AFTER, THREAD_FIELDS, USAGE_PREFIX,
};

/// An actor (seed 002 §6.2): who made a package or asserted a fact.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Actor {
    /// Actor identifier (an agent address, or `user` for the person).
    pub id: String,
    /// `human`, `agent` or `script`.
    #[serde(rename = "type")]
    pub actor_type: String,
    /// The session, if any (always `null` here: the agent has no sessions).
    #[serde(default)]
    pub session_id: Option<String>,
}

impl Actor {
    /// An agent actor.
    pub fn agent(id: impl Into<String>) -> Actor {
        Actor {
            id: id.into(),
            actor_type: "agent".into(),
            session_id: None,
        }
    }

    /// The person (a user's own edit).
    pub fn human(id: impl Into<String>) -> Actor {
        Actor {
            id: id.into(),
            actor_type: "human".into(),
            session_id: None,
        }
    }
}

/// Why a memory operation was refused. The store is unchanged after any of them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MemoryError {
    /// A package's stored hash is not the hash of its content (tampered or corrupt).
    #[error("package {package_id}: stored hash {stored} but its content hashes to {computed}")]
    HashMismatch {
        /// The package.
        package_id: String,
        /// The hash stored beside it.
        stored: String,
        /// The hash of its canonical JSON.
        computed: String,
    },
    /// A package breaks seed 002 §6.
    #[error("package {package_id:?} is invalid: {reason}")]
    InvalidPackage {
        /// The package (as far as it could be read).
        package_id: String,
        /// What is wrong.
        reason: String,
    },
    /// A fact breaks seed 002 §7.
    #[error("fact {fact_id:?} is invalid: {reason}")]
    InvalidFact {
        /// The fact.
        fact_id: String,
        /// What is wrong.
        reason: String,
    },
    /// Another package already has this id, with different content.
    #[error("package {0} already exists with different content")]
    DuplicatePackage(String),
    /// Another fact already has this id, with different content.
    #[error("fact {0} already exists with different content")]
    DuplicateFact(String),
    /// An assertion would start before the latest fact of its series started or ended.
    #[error("{subject}/{predicate}: a fact valid from {valid_from} cannot follow one that holds until {current_from}")]
    OutOfOrder {
        /// Subject.
        subject: String,
        /// Predicate.
        predicate: String,
        /// The new fact's start.
        valid_from: Timestamp,
        /// Where the latest fact of the series starts (if current) or ends.
        current_from: Timestamp,
    },
    /// The facts of one (project, subject, predicate) overlap in time or have two current.
    #[error("{project_id} {subject}/{predicate}: facts overlap in time")]
    Overlap {
        /// Project.
        project_id: String,
        /// Subject.
        subject: String,
        /// Predicate.
        predicate: String,
    },
    /// Canonical JSON could not be produced.
    #[error("canonical JSON: {0}")]
    Canonical(String),
    /// An NDJSON line holds a package or fact that was refused.
    #[error("line {line}: {error}")]
    AtLine {
        /// 1-based line number.
        line: usize,
        /// Why it was refused.
        error: Box<MemoryError>,
    },
    /// An NDJSON line could not be read.
    #[error("line {line}: {reason}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// The key of a fact series: (project, subject, predicate).
pub type SeriesKey = (String, String, String);

/// The order of facts in a series, as stored and exported: by start; at one start, the
/// facts that ended where they began (superseded in the same instant) before the one
/// that goes on; then by creation and id. A series reads back as it was asserted, and
/// the same memory always exports to the same bytes.
pub(crate) fn fact_order(a: &Fact, b: &Fact) -> std::cmp::Ordering {
    (
        a.valid_from,
        a.valid_to.is_none(),
        a.valid_to,
        a.created_at,
        &a.fact_id,
    )
        .cmp(&(
            b.valid_from,
            b.valid_to.is_none(),
            b.valid_to,
            b.created_at,
            &b.fact_id,
        ))
}

/// Packages kept per project: recording one more drops the oldest (by `created_at`, then
/// id). The facts it was the source of stay; their `source_package_id` then names a
/// package no longer held.
pub const MAX_PACKAGES_PER_PROJECT: usize = 64;

/// Facts kept per series (the current one and its history): an assertion past it drops
/// the oldest ended facts, so point-in-time queries reach back this many changes.
pub const MAX_HISTORY_PER_SERIES: usize = 16;

/// Series (predicates) per project and subject that recording a thread may create: a peer
/// sharing ever new field names cannot grow its memory past it; past it, new predicates
/// are not recorded ([`Recorded::skipped`]).
pub const MAX_SERIES_PER_SUBJECT: usize = 256;

/// One agent's memory: facts by (project, subject, predicate), oldest first, and packages
/// by (project, id).
///
/// Every operation costs in proportion to the project (the peer) it is about, not to the
/// whole memory: recording a thread, importing a peer's NDJSON on restore, exporting it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryStore {
    facts: BTreeMap<SeriesKey, Vec<Fact>>,
    packages: BTreeMap<(String, String), Package>,
    /// The project of every package id: ids are unique across projects.
    package_projects: BTreeMap<String, String>,
    /// Assertions made, for fact ids (tells apart equal assertions at one instant).
    sequence: u64,
}

/// What [`MemoryStore::assert_fact`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Assertion {
    /// The new current fact.
    pub fact: Fact,
    /// The fact it superseded, now ended (its `valid_to` set), if there was one.
    pub superseded: Option<Fact>,
}

/// The optional inputs of an assertion (seed 002 §8.6).
#[derive(Debug, Clone, Default)]
pub struct AssertOptions {
    /// When the fact became true (default: now).
    pub valid_from: Option<Timestamp>,
    /// 0.0–1.0 (default 1.0).
    pub confidence: Option<f64>,
    /// Who asserts it.
    pub asserted_by: Option<Actor>,
    /// The package it comes from.
    pub source_package_id: Option<String>,
    /// Labels.
    pub tags: Vec<String>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asserts `value` for (project, subject, predicate) at `now` (seed 002 §7.3): the
    /// current fact, if any, ends at the new fact's `valid_from` and the new fact becomes
    /// current; both or neither. Refused if the new fact would start before the current one.
    pub fn assert_fact(
        &mut self,
        now: Timestamp,
        project_id: &str,
        subject: &str,
        predicate: &str,
        value: &str,
        options: AssertOptions,
    ) -> Result<Assertion, MemoryError> {
        let valid_from = options.valid_from.unwrap_or(now);
        let key = (
            project_id.to_string(),
            subject.to_string(),
            predicate.to_string(),
        );
        let series = self.facts.get(&key);
        let current = series.and_then(|s| s.iter().rposition(Fact::is_current));
        // The new fact starts no earlier than the latest one started or ended, so the
        // series stays ordered and no two facts hold at one instant.
        if let Some(last) = series.and_then(|s| s.last()) {
            let bound = last
                .valid_to
                .unwrap_or(last.valid_from)
                .max(last.valid_from);
            if valid_from < bound {
                return Err(MemoryError::OutOfOrder {
                    subject: subject.into(),
                    predicate: predicate.into(),
                    valid_from,
                    current_from: bound,
                });
            }
        }
        let fact = Fact {
            fact_id: Fact::derive_id(
                project_id,
                subject,
                predicate,
                value,
                valid_from,
                now,
                self.sequence,
            ),
            project_id: project_id.into(),
            subject: subject.into(),
            predicate: predicate.into(),
            value: value.into(),
            valid_from,
            valid_to: None,
            source_package_id: options.source_package_id,
            confidence: options.confidence.unwrap_or(1.0).clamp(0.0, 1.0),
            asserted_by: options.asserted_by,
            created_at: now,
            tags: options.tags,
            extra: BTreeMap::new(),
        };
        fact.validate()?;
        // Checked: nothing below fails, so the supersession and the insert both happen.
        self.sequence += 1;
        let series = self.facts.entry(key).or_default();
        let superseded = match current.and_then(|i| series.get_mut(i)) {
            Some(old) => {
                old.valid_to = Some(valid_from);
                Some(old.clone())
            }
            None => None,
        };
        series.push(fact.clone());
        Ok(Assertion { fact, superseded })
    }

    /// Invalidates the current fact of (project, subject, predicate) at `now` without a
    /// replacement (seed 002 §7.4). Returns the number of facts invalidated (0 or 1).
    pub fn invalidate(
        &mut self,
        now: Timestamp,
        project_id: &str,
        subject: &str,
        predicate: &str,
    ) -> usize {
        let key = (
            project_id.to_string(),
            subject.to_string(),
            predicate.to_string(),
        );
        let Some(series) = self.facts.get_mut(&key) else {
            return 0;
        };
        let mut count = 0;
        for f in series.iter_mut().filter(|f| f.is_current()) {
            f.valid_to = Some(now.max(f.valid_from));
            count += 1;
        }
        count
    }

    /// The current fact of (project, subject, predicate).
    pub fn current(&self, project_id: &str, subject: &str, predicate: &str) -> Option<&Fact> {
        self.series(project_id, subject, predicate)
            .iter()
            .rev()
            .find(|f| f.is_current())
    }

    /// The fact that held at `t` (`valid_from ≤ t < valid_to`, seed 002 §7.3).
    pub fn value_at(
        &self,
        project_id: &str,
        subject: &str,
        predicate: &str,
        t: Timestamp,
    ) -> Option<&Fact> {
        self.series(project_id, subject, predicate)
            .iter()
            .rev()
            .find(|f| f.holds_at(t))
    }

    /// What the agent knew at `t` about a subject: for each predicate, the fact that
    /// held at `t` among those already recorded at `t` (`created_at ≤ t`). "What did I
    /// know about Bob on 1 March?"
    pub fn known_at(&self, project_id: &str, subject: &str, t: Timestamp) -> Vec<&Fact> {
        self.project_series(project_id)
            .filter(|((_, s, _), _)| s == subject)
            .filter_map(|(_, series)| {
                series
                    .iter()
                    .rev()
                    .find(|f| f.created_at <= t && f.holds_at(t))
            })
            .collect()
    }

    /// The current facts about a subject, by predicate.
    pub fn current_facts(&self, project_id: &str, subject: &str) -> Vec<&Fact> {
        self.project_series(project_id)
            .filter(|((_, s, _), _)| s == subject)
            .filter_map(|(_, series)| series.iter().rev().find(|f| f.is_current()))
            .collect()
    }

    /// Every fact of (project, subject, predicate), oldest first: the history.
    pub fn series(&self, project_id: &str, subject: &str, predicate: &str) -> &[Fact] {
        let key = (
            project_id.to_string(),
            subject.to_string(),
            predicate.to_string(),
        );
        self.facts.get(&key).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Every fact, by series then age.
    pub fn facts(&self) -> impl Iterator<Item = &Fact> {
        self.facts.values().flatten()
    }

    /// Stores a committed package. The same package again is a no-op; another package
    /// with the same id is refused.
    pub fn deposit(&mut self, package: Package) -> Result<(), MemoryError> {
        let id = package.package_id().to_string();
        let project = package.project_id().to_string();
        match self.package(&id) {
            Some(old) if old.content_hash() == package.content_hash() => Ok(()),
            Some(_) => Err(MemoryError::DuplicatePackage(id)),
            None => {
                self.package_projects.insert(id.clone(), project.clone());
                self.packages.insert((project, id), package);
                Ok(())
            }
        }
    }

    /// A package by id.
    pub fn package(&self, package_id: &str) -> Option<&Package> {
        let project = self.package_projects.get(package_id)?;
        self.packages
            .get(&(project.clone(), package_id.to_string()))
    }

    /// Every package, by project then id.
    pub fn packages(&self) -> impl Iterator<Item = &Package> {
        self.packages.values()
    }

    /// The packages of one project, by id.
    pub fn project_packages(&self, project_id: &str) -> impl Iterator<Item = &Package> {
        let project = project_id.to_string();
        self.packages
            .range((project.clone(), String::new())..)
            .take_while(move |((p, _), _)| *p == project)
            .map(|(_, pkg)| pkg)
    }

    /// The series of one project, by subject then predicate.
    fn project_series(&self, project_id: &str) -> impl Iterator<Item = (&SeriesKey, &Vec<Fact>)> {
        let project = project_id.to_string();
        self.facts
            .range((project.clone(), String::new(), String::new())..)
            .take_while(move |((p, _, _), _)| *p == project)
    }

    /// The projects that hold anything.
    pub fn projects(&self) -> Vec<String> {
        let mut out: Vec<String> = self.facts.keys().map(|(p, _, _)| p.clone()).collect();
        out.extend(self.packages.keys().map(|(p, _)| p.clone()));
        out.sort();
        out.dedup();
        out
    }

    /// Moves one project's facts and packages out into a store of their own (the same
    /// assertion sequence), leaving this store without them.
    fn take_project(&mut self, project_id: &str) -> MemoryStore {
        let mut part = MemoryStore {
            sequence: self.sequence,
            ..MemoryStore::default()
        };
        let keys: Vec<SeriesKey> = self
            .project_series(project_id)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            if let Some(series) = self.facts.remove(&k) {
                part.facts.insert(k, series);
            }
        }
        let ids: Vec<(String, String)> = self
            .packages
            .range((project_id.to_string(), String::new())..)
            .take_while(|((p, _), _)| p == project_id)
            .map(|(k, _)| k.clone())
            .collect();
        for k in ids {
            self.package_projects.remove(&k.1);
            if let Some(pkg) = self.packages.remove(&k) {
                part.package_projects.insert(k.1.clone(), k.0.clone());
                part.packages.insert(k, pkg);
            }
        }
        part
    }

    /// Puts back what [`MemoryStore::take_project`] took (changed or not): refused, with
    /// nothing changed, if one of its package ids is another project's.
    fn put_project(&mut self, part: MemoryStore) -> Result<(), MemoryError> {
        if let Some(id) = part
            .package_projects
            .keys()
            .find(|id| self.package_projects.contains_key(*id))
        {
            return Err(MemoryError::DuplicatePackage(id.clone()));
        }
        self.merge(part);
        Ok(())
    }

    /// Puts back what was taken out of this store unchanged (no id can clash).
    fn merge(&mut self, part: MemoryStore) {
        self.sequence = self.sequence.max(part.sequence);
        self.facts.extend(part.facts);
        self.packages.extend(part.packages);
        self.package_projects.extend(part.package_projects);
    }

    /// Runs `change` on one project alone, all or nothing: on an error the project is as
    /// it was. Costs in proportion to the project, not to the whole memory.
    pub(crate) fn change_project<T>(
        &mut self,
        project_id: &str,
        change: impl FnOnce(&mut MemoryStore) -> Result<T, MemoryError>,
    ) -> Result<T, MemoryError> {
        let before = self.take_project(project_id);
        let mut part = before.clone();
        match change(&mut part) {
            Ok(out) => match self.put_project(part) {
                Ok(()) => Ok(out),
                Err(e) => {
                    self.merge(before);
                    Err(e)
                }
            },
            Err(e) => {
                self.merge(before);
                Err(e)
            }
        }
    }

    /// Keeps one project within [`MAX_PACKAGES_PER_PROJECT`] and every series of it
    /// within [`MAX_HISTORY_PER_SERIES`]: the oldest go first.
    pub(crate) fn compact_project(&mut self, project_id: &str) {
        let mut packages: Vec<(Timestamp, String)> = self
            .project_packages(project_id)
            .map(|p| (p.created_at(), p.package_id().to_string()))
            .collect();
        if packages.len() > MAX_PACKAGES_PER_PROJECT {
            packages.sort();
            let drop = packages.len() - MAX_PACKAGES_PER_PROJECT;
            for (_, id) in packages.into_iter().take(drop) {
                self.package_projects.remove(&id);
                self.packages.remove(&(project_id.to_string(), id));
            }
        }
        let keys: Vec<SeriesKey> = self
            .project_series(project_id)
            .filter(|(_, s)| s.len() > MAX_HISTORY_PER_SERIES)
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            if let Some(series) = self.facts.get_mut(&k) {
                // Sorted oldest first, the current fact last: the oldest ended ones go.
                let drop = series.len() - MAX_HISTORY_PER_SERIES;
                series.drain(..drop);
            }
        }
    }

    /// How many series a subject of a project has.
    pub(crate) fn series_count(&self, project_id: &str, subject: &str) -> usize {
        self.project_series(project_id)
            .filter(|((_, s, _), _)| s == subject)
            .count()
    }

    /// Removes everything of a project (facts with their history, and packages): the
    /// purge of §11.3. Returns how many facts and packages went.
    pub fn purge_project(&mut self, project_id: &str) -> (usize, usize) {
        let part = self.take_project(project_id);
        (part.facts().count(), part.packages.len())
    }

    /// Removes a series (current fact and history): the user's "forget this field".
    pub fn forget_series(&mut self, project_id: &str, subject: &str, predicate: &str) -> usize {
        let key = (
            project_id.to_string(),
            subject.to_string(),
            predicate.to_string(),
        );
        self.facts.remove(&key).map_or(0, |s| s.len())
    }

    /// Adds an imported fact as it is (its times and id kept), after checking it.
    fn insert_fact(&mut self, fact: Fact) -> Result<(), MemoryError> {
        fact.validate()?;
        let key = (
            fact.project_id.clone(),
            fact.subject.clone(),
            fact.predicate.clone(),
        );
        // Ids are unique within a series: this store derives them from the series (and
        // the rest), and facts are only ever looked up by series, so an imported id
        // repeated in another series harms nothing.
        if let Some(existing) = self
            .facts
            .get(&key)
            .and_then(|s| s.iter().find(|f| f.fact_id == fact.fact_id))
        {
            if *existing == fact {
                return Ok(());
            }
            return Err(MemoryError::DuplicateFact(fact.fact_id));
        }
        let series = self.facts.entry(key).or_default();
        series.push(fact);
        series.sort_by(fact_order);
        Ok(())
    }

    /// Checks the §7.3 invariants on every series: at most one current fact, and no two
    /// facts hold at the same instant.
    fn check_series(&self) -> Result<(), MemoryError> {
        for ((project_id, subject, predicate), series) in &self.facts {
            let overlap = || MemoryError::Overlap {
                project_id: project_id.clone(),
                subject: subject.clone(),
                predicate: predicate.clone(),
            };
            if series.iter().filter(|f| f.is_current()).count() > 1 {
                return Err(overlap());
            }
            for pair in series.windows(2) {
                if let [a, b] = pair {
                    // Sorted by valid_from: `a` must end by the time `b` starts. An empty
                    // interval (ended where it started) holds at no instant.
                    let a_empty = a.valid_to == Some(a.valid_from);
                    if !a_empty && a.valid_to.is_none_or(|end| end > b.valid_from) {
                        return Err(overlap());
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
