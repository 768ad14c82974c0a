//! Relationship memory (§11.1) as facts and packages: what one completed thread teaches
//! the agent about a peer, and the §11.1 view read back from the facts, with the §11.3
//! staleness rule.
//!
//! Every peer is one project (its address), and every fact's subject is the peer's
//! address. Predicates:
//!
//! | predicate | value |
//! | --- | --- |
//! | `stats.interaction_count` | completed threads, decimal |
//! | `stats.first_interaction`, `stats.last_interaction` | RFC 3339 |
//! | `stats.response_count`, `stats.response_time_ms_total` | for the average response time |
//! | `intent.<category>` | threads of that intent category, decimal |
//! | `shared.<field>`, `declined.<field>` | threads in which the peer shared / declined the field |
//! | `cache.<field>` | the value the peer last shared (the context cache) |

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::{Actor, AssertOptions, MemoryError, MemoryStore, Package, PackageDraft};
use crate::Timestamp;

/// Cached values older than this are low confidence and re-verified (§11.3).
pub const STALE_AFTER: Duration = Duration::from_secs(90 * 24 * 3600);

/// What a completed thread showed about the peer: the input of
/// [`MemoryStore::record_completed_thread`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThreadSummary {
    /// The thread.
    pub thread_id: String,
    /// The intent category (`scheduling`, …).
    pub intent: String,
    /// The thread's title (the intent's description).
    pub title: String,
    /// Fields the peer shared, with their values (as strings).
    pub shared_by_peer: BTreeMap<String, String>,
    /// Fields the peer declined to share.
    pub declined_by_peer: Vec<String>,
    /// How long the peer took to answer, per answer.
    pub response_times: Vec<Duration>,
    /// What was decided (the resolution).
    pub decisions: Vec<String>,
    /// What stayed open.
    pub open_questions: Vec<String>,
}

/// A cached value the peer contradicted (§11.3): the cache now holds `new`; the user is
/// told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheChange {
    /// The field.
    pub field: String,
    /// The value the cache held.
    pub old: String,
    /// The value the peer shared.
    pub new: String,
}

/// What recording a thread did.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The package that records the thread.
    pub package_id: String,
    /// Cached values the thread contradicted.
    pub changes: Vec<CacheChange>,
}

/// Confidence of a cached value (§11.1 `confidence`, §11.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Confidence {
    /// Updated within the last 90 days.
    High,
    /// Older than 90 days: re-verify rather than assume.
    Low,
}

/// One context cache entry.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheEntry {
    /// The value.
    pub value: String,
    /// When it was last set.
    pub last_updated: Timestamp,
    /// High, or low once stale.
    pub confidence: Confidence,
}

/// The trust level (§11.1 `trust_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TrustLevel {
    /// Fewer than 3 completed threads.
    New,
    /// 3 to 9.
    Familiar,
    /// 10 or more.
    Established,
}

/// The §11.1 view of one peer, read from the facts.
#[derive(Debug, Clone, PartialEq)]
pub struct Relationship {
    /// The peer.
    pub agent: String,
    /// Completed threads.
    pub interaction_count: u64,
    /// First completed thread.
    pub first_interaction: Option<Timestamp>,
    /// Latest completed thread.
    pub last_interaction: Option<Timestamp>,
    /// Intent categories, most frequent first (ties by name).
    pub typical_intents: Vec<String>,
    /// Fields the peer shared in at least half the threads.
    pub usually_shares: Vec<String>,
    /// Fields the peer declined in at least half the threads.
    pub usually_declines: Vec<String>,
    /// Mean response time.
    pub average_response_time: Option<Duration>,
    /// The context cache.
    pub context_cache: BTreeMap<String, CacheEntry>,
    /// Trust level.
    pub trust_level: TrustLevel,
    /// The signals behind it.
    pub trust_signals: Vec<String>,
}

impl MemoryStore {
    fn count(&self, peer: &str, predicate: &str) -> u64 {
        self.current(peer, peer, predicate)
            .and_then(|f| f.value.parse().ok())
            .unwrap_or(0)
    }

    /// Records a completed thread with `peer`: one immutable package (decisions, open
    /// questions, provenance) and the facts it updates, all or nothing. Values the peer
    /// shared that differ from the cache supersede it and are returned as changes.
    pub fn record_completed_thread(
        &mut self,
        now: Timestamp,
        own: &str,
        peer: &str,
        summary: &ThreadSummary,
    ) -> Result<Recorded, MemoryError> {
        let mut next = self.clone();
        let me = Actor::agent(own);
        let mut extensions = Map::new();
        extensions.insert(
            "x-a2acp-provenance".into(),
            json!({
                "thread_id": summary.thread_id,
                "peer": peer,
                "intent": summary.intent,
                "fields_shared_by_peer": summary.shared_by_peer.keys().collect::<Vec<_>>(),
                "fields_declined_by_peer": summary.declined_by_peer,
            }),
        );
        let title: String = if summary.title.is_empty() {
            format!("Thread {} with {peer}", summary.thread_id)
        } else {
            summary.title.clone()
        };
        let package = Package::commit(&PackageDraft {
            project_id: peer.into(),
            title: title.chars().take(200).collect(),
            package_type: "decision".into(),
            created_at: now,
            created_by: me.clone(),
            description: String::new(),
            tags: vec![summary.intent.clone()],
            decisions_made: summary.decisions.clone(),
            open_questions: summary.open_questions.clone(),
            topic: Some(summary.intent.clone()),
            extensions,
        })?;
        let package_id = package.package_id().to_string();
        next.deposit(package)?;
        let opts = || AssertOptions {
            asserted_by: Some(me.clone()),
            source_package_id: Some(package_id.clone()),
            ..Default::default()
        };
        let set = |m: &mut MemoryStore, predicate: &str, value: String| {
            if m.current(peer, peer, predicate).map(|f| f.value.as_str()) == Some(&value) {
                return Ok(());
            }
            m.assert_fact(now, peer, peer, predicate, &value, opts())
                .map(|_| ())
        };
        let n = next.count(peer, "stats.interaction_count") + 1;
        set(&mut next, "stats.interaction_count", n.to_string())?;
        if next
            .current(peer, peer, "stats.first_interaction")
            .is_none()
        {
            set(&mut next, "stats.first_interaction", now.to_rfc3339())?;
        }
        set(&mut next, "stats.last_interaction", now.to_rfc3339())?;
        let intent = format!("intent.{}", summary.intent);
        let c = next.count(peer, &intent) + 1;
        set(&mut next, &intent, c.to_string())?;
        for field in summary.shared_by_peer.keys() {
            let p = format!("shared.{field}");
            let c = next.count(peer, &p) + 1;
            set(&mut next, &p, c.to_string())?;
        }
        for field in &summary.declined_by_peer {
            let p = format!("declined.{field}");
            let c = next.count(peer, &p) + 1;
            set(&mut next, &p, c.to_string())?;
        }
        if !summary.response_times.is_empty() {
            let count =
                next.count(peer, "stats.response_count") + summary.response_times.len() as u64;
            let total = next.count(peer, "stats.response_time_ms_total")
                + summary
                    .response_times
                    .iter()
                    .map(|d| d.as_millis().min(u64::MAX as u128) as u64)
                    .fold(0u64, u64::saturating_add);
            set(&mut next, "stats.response_count", count.to_string())?;
            set(&mut next, "stats.response_time_ms_total", total.to_string())?;
        }
        let mut changes = Vec::new();
        for (field, value) in &summary.shared_by_peer {
            let p = format!("cache.{field}");
            match next.current(peer, peer, &p).map(|f| f.value.clone()) {
                Some(old) if old == *value => {
                    // Re-verified: a fresh fact restarts `last_updated`.
                    next.assert_fact(now, peer, peer, &p, value, opts())?;
                }
                Some(old) => {
                    next.assert_fact(now, peer, peer, &p, value, opts())?;
                    changes.push(CacheChange {
                        field: field.clone(),
                        old,
                        new: value.clone(),
                    });
                }
                None => {
                    next.assert_fact(now, peer, peer, &p, value, opts())?;
                }
            }
        }
        *self = next;
        Ok(Recorded {
            package_id,
            changes,
        })
    }

    /// The §11.1 view of `peer` at `now`; `None` if nothing is remembered.
    pub fn relationship(&self, peer: &str, now: Timestamp) -> Option<Relationship> {
        let facts = self.current_facts(peer, peer);
        if facts.is_empty() {
            return None;
        }
        let n = self.count(peer, "stats.interaction_count");
        let time = |p: &str| {
            self.current(peer, peer, p)
                .and_then(|f| Timestamp::parse_rfc3339(&f.value))
        };
        let mut intents: Vec<(u64, String)> = Vec::new();
        let mut shares = Vec::new();
        let mut declines = Vec::new();
        let mut cache = BTreeMap::new();
        for f in &facts {
            let count: u64 = f.value.parse().unwrap_or(0);
            if let Some(i) = f.predicate.strip_prefix("intent.") {
                intents.push((count, i.to_string()));
            } else if let Some(field) = f.predicate.strip_prefix("shared.") {
                if n > 0 && count * 2 >= n {
                    shares.push(field.to_string());
                }
            } else if let Some(field) = f.predicate.strip_prefix("declined.") {
                if n > 0 && count * 2 >= n {
                    declines.push(field.to_string());
                }
            } else if let Some(field) = f.predicate.strip_prefix("cache.") {
                let stale = now.since(f.valid_from) > STALE_AFTER;
                cache.insert(
                    field.to_string(),
                    CacheEntry {
                        value: f.value.clone(),
                        last_updated: f.valid_from,
                        confidence: if stale {
                            Confidence::Low
                        } else {
                            Confidence::High
                        },
                    },
                );
            }
        }
        intents.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let responses = self.count(peer, "stats.response_count");
        let average_response_time = (responses > 0).then(|| {
            Duration::from_millis(self.count(peer, "stats.response_time_ms_total") / responses)
        });
        let trust_level = match n {
            0..=2 => TrustLevel::New,
            3..=9 => TrustLevel::Familiar,
            _ => TrustLevel::Established,
        };
        let mut trust_signals = vec![format!("{n} completed threads")];
        if !declines.is_empty() {
            trust_signals.push(format!("usually declines {}", declines.join(", ")));
        }
        Some(Relationship {
            agent: peer.to_string(),
            interaction_count: n,
            first_interaction: time("stats.first_interaction"),
            last_interaction: time("stats.last_interaction"),
            typical_intents: intents.into_iter().map(|(_, i)| i).collect(),
            usually_shares: shares,
            usually_declines: declines,
            average_response_time,
            context_cache: cache,
            trust_level,
            trust_signals,
        })
    }

    /// Cached fields of `peer` older than 90 days at `now`: to re-verify (§11.3).
    pub fn stale_cache(&self, peer: &str, now: Timestamp) -> Vec<String> {
        self.relationship(peer, now)
            .map(|r| {
                r.context_cache
                    .into_iter()
                    .filter(|(_, e)| e.confidence == Confidence::Low)
                    .map(|(k, _)| k)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The §11.1 JSON of a relationship (for `a2acp memory show`).
    pub fn relationship_json(&self, peer: &str, now: Timestamp) -> Option<Value> {
        let r = self.relationship(peer, now)?;
        let cache: Map<String, Value> = r
            .context_cache
            .iter()
            .map(|(k, e)| {
                (
                    k.clone(),
                    json!({
                        "value": e.value,
                        "last_updated": e.last_updated.to_rfc3339(),
                        "confidence": match e.confidence {
                            Confidence::High => "high",
                            Confidence::Low => "low_confidence",
                        },
                    }),
                )
            })
            .collect();
        Some(json!({
            "agent": r.agent,
            "interaction_count": r.interaction_count,
            "first_interaction": r.first_interaction.map(Timestamp::to_rfc3339),
            "last_interaction": r.last_interaction.map(Timestamp::to_rfc3339),
            "typical_intents": r.typical_intents,
            "learned_patterns": {
                "usually_shares": r.usually_shares,
                "usually_declines": r.usually_declines,
                "average_response_time": r.average_response_time.map(crate::time::format_iso8601_duration),
            },
            "context_cache": cache,
            "trust_level": match r.trust_level {
                TrustLevel::New => "new",
                TrustLevel::Familiar => "familiar",
                TrustLevel::Established => "established",
            },
            "trust_signals": r.trust_signals,
        }))
    }
}
