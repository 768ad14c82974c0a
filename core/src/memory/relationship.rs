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
//! | `requested.<field>` | threads in which the peer asked this agent for the field |
//! | `flexibility.<aspect>.<level>` | threads in which the peer stated that flexibility (`high`, `medium`, `low`) for `date`, `time` or `location` |
//! | `resolution_style.<style>` | threads the peer resolved that way: `quick_decision` (it confirmed every proposal it answered) or `deliberate` (it answered one with anything but a confirmation) |
//! | `cache.<field>` | the value the peer last shared (the context cache), for fields that describe the person, not one thread ([`is_cached_field`]) |
//!
//! Growth is bounded per peer: [`super::MAX_PACKAGES_PER_PROJECT`] packages,
//! [`super::MAX_HISTORY_PER_SERIES`] facts per series, [`super::MAX_SERIES_PER_SUBJECT`]
//! series.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::{Actor, AssertOptions, MemoryError, MemoryStore, Package, PackageDraft};
use crate::Timestamp;

/// Cached values older than this are low confidence and re-verified (§11.3).
pub const STALE_AFTER: Duration = Duration::from_secs(90 * 24 * 3600);

/// Fields that describe one thread rather than the peer's user: when and what the event
/// is, for how many, how flexible the peer is this time, and the negotiation's own
/// markers. They count as shared or declined, but are not cached: the next thread's
/// other value contradicts nothing (§11.3).
pub const THREAD_FIELDS: &[&str] = &[
    "time_windows",
    "availability",
    "proposed_date",
    "proposed_dates",
    "date",
    "time",
    "event_type",
    "party_size",
    "duration",
    "venue",
    "flexibility",
    "wanted_fields",
    "conflict",
    "proposed_alternatives",
    "_format_hints",
];

/// The predicate prefix of the usage rule a cached value came with.
pub const USAGE_PREFIX: &str = "usage.";

/// Whether the context cache keeps a field: it describes the person (dietary, area,
/// transport, time zone…), not one thread ([`THREAD_FIELDS`]).
pub fn is_cached_field(field: &str) -> bool {
    !THREAD_FIELDS.contains(&field)
}

/// The aspects whose flexibility is learned (§11.1 `typical_flexibility`).
pub const FLEXIBILITY_ASPECTS: [&str; 3] = ["date", "time", "location"];

/// Flexibility levels, least flexible first (§11.1 `typical_flexibility`).
pub const FLEXIBILITY_LEVELS: [&str; 3] = ["low", "medium", "high"];

/// How a peer reaches a resolution (§11.1 `preferred_resolution_style`): it confirmed
/// every proposal it answered, or it answered one with anything but a confirmation.
pub const RESOLUTION_STYLES: [&str; 2] = ["quick_decision", "deliberate"];

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
    /// The usage rules the peer's values came with, by field, each as its compact JSON
    /// (the agent's SPEC-NOTES "Usage rules"): kept as `usage.<field>` beside the cached
    /// value, and ended when a value without one replaces it.
    pub usage_by_peer: BTreeMap<String, String>,
    /// Fields the peer declined to share.
    pub declined_by_peer: Vec<String>,
    /// Fields the peer asked this agent for.
    pub requested_by_peer: Vec<String>,
    /// The flexibility the peer stated, by aspect (`date`, `time`, `location`), as a
    /// level of [`FLEXIBILITY_LEVELS`]; other aspects and levels are ignored.
    pub peer_flexibility: BTreeMap<String, String>,
    /// How the peer reached the resolution, one of [`RESOLUTION_STYLES`]; `None` or
    /// anything else is not counted.
    pub resolution_style: Option<String>,
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
    /// Predicates not recorded: the peer's memory already holds
    /// [`super::MAX_SERIES_PER_SUBJECT`] series.
    pub skipped: usize,
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
    /// Fields the peer declined at least as often as it shared them, the last time
    /// within 90 days (an older decline is asked about again, §11.3). Asked about once
    /// and declined is enough: the agent does not ask again what it was refused.
    pub usually_declines: Vec<String>,
    /// Fields the peer asked for in at least half the threads (§5.4: what to front-load).
    pub usually_requests: Vec<String>,
    /// The flexibility the peer usually states, by aspect: the most frequent level, the
    /// less flexible one on a tie.
    pub typical_flexibility: BTreeMap<String, String>,
    /// How the peer usually reaches a resolution: the more frequent of
    /// [`RESOLUTION_STYLES`], `deliberate` on a tie (the agent does not assume haste).
    pub preferred_resolution_style: Option<String>,
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
        self.change_project(peer, |next| {
            let recorded = next.record_in_project(now, own, peer, summary)?;
            next.compact_project(peer);
            Ok(recorded)
        })
    }

    /// [`MemoryStore::record_completed_thread`] on a store that holds the peer's project
    /// alone.
    fn record_in_project(
        &mut self,
        now: Timestamp,
        own: &str,
        peer: &str,
        summary: &ThreadSummary,
    ) -> Result<Recorded, MemoryError> {
        let next = self;
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
        let mut skipped = 0;
        // A new series only while the peer's memory has room for it; `false`: skipped.
        let mut room = |m: &MemoryStore, predicate: &str| {
            let ok = !m.series(peer, peer, predicate).is_empty()
                || m.series_count(peer, peer) < super::MAX_SERIES_PER_SUBJECT;
            if !ok {
                skipped += 1;
            }
            ok
        };
        let set = |m: &mut MemoryStore, predicate: &str, value: String| {
            if m.current(peer, peer, predicate).map(|f| f.value.as_str()) == Some(&value) {
                return Ok(());
            }
            m.assert_fact(now, peer, peer, predicate, &value, opts())
                .map(|_| ())
        };
        let n = next.count(peer, "stats.interaction_count") + 1;
        set(next, "stats.interaction_count", n.to_string())?;
        if next
            .current(peer, peer, "stats.first_interaction")
            .is_none()
        {
            set(next, "stats.first_interaction", now.to_rfc3339())?;
        }
        set(next, "stats.last_interaction", now.to_rfc3339())?;
        let intent = format!("intent.{}", summary.intent);
        if room(next, &intent) {
            let c = next.count(peer, &intent) + 1;
            set(next, &intent, c.to_string())?;
        }
        let counted = summary
            .shared_by_peer
            .keys()
            .map(|f| format!("shared.{f}"))
            .chain(
                summary
                    .declined_by_peer
                    .iter()
                    .map(|f| format!("declined.{f}")),
            )
            .chain(
                summary
                    .requested_by_peer
                    .iter()
                    .map(|f| format!("requested.{f}")),
            )
            .chain(
                summary
                    .peer_flexibility
                    .iter()
                    .filter(|(a, l)| {
                        FLEXIBILITY_ASPECTS.contains(&a.as_str())
                            && FLEXIBILITY_LEVELS.contains(&l.as_str())
                    })
                    .map(|(a, l)| format!("flexibility.{a}.{l}")),
            )
            .chain(
                summary
                    .resolution_style
                    .iter()
                    .filter(|s| RESOLUTION_STYLES.contains(&s.as_str()))
                    .map(|s| format!("resolution_style.{s}")),
            )
            .collect::<std::collections::BTreeSet<String>>();
        for p in counted {
            if room(next, &p) {
                let c = next.count(peer, &p) + 1;
                set(next, &p, c.to_string())?;
            }
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
            set(next, "stats.response_count", count.to_string())?;
            set(next, "stats.response_time_ms_total", total.to_string())?;
        }
        let mut changes = Vec::new();
        for (field, value) in summary
            .shared_by_peer
            .iter()
            .filter(|(f, _)| is_cached_field(f))
        {
            let p = format!("cache.{field}");
            if !room(next, &p) {
                continue;
            }
            let u = format!("{USAGE_PREFIX}{field}");
            match summary.usage_by_peer.get(field) {
                Some(rule) => {
                    if room(next, &u) {
                        set(next, &u, rule.clone())?;
                    } else {
                        // A value whose rule cannot be kept is not kept either.
                        continue;
                    }
                }
                None => {
                    next.forget_series(peer, peer, &u);
                }
            }
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
        Ok(Recorded {
            package_id,
            changes,
            skipped,
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
        let mut requests = Vec::new();
        // (aspect → (count, level index)) of the most frequent level so far.
        let mut flex: BTreeMap<String, (u64, usize)> = BTreeMap::new();
        let mut cache = BTreeMap::new();
        // (count, style index) of the most frequent resolution style so far.
        let mut style: Option<(u64, usize)> = None;
        for f in &facts {
            let count: u64 = f.value.parse().unwrap_or(0);
            if let Some(i) = f.predicate.strip_prefix("intent.") {
                intents.push((count, i.to_string()));
            } else if let Some(field) = f.predicate.strip_prefix("shared.") {
                if n > 0 && count * 2 >= n {
                    shares.push(field.to_string());
                }
            } else if let Some(field) = f.predicate.strip_prefix("declined.") {
                let shared = self.count(peer, &format!("shared.{field}"));
                if count > 0 && count >= shared && now.since(f.valid_from) <= STALE_AFTER {
                    declines.push(field.to_string());
                }
            } else if let Some(field) = f.predicate.strip_prefix("requested.") {
                if n > 0 && count * 2 >= n {
                    requests.push(field.to_string());
                }
            } else if let Some((aspect, level)) = f
                .predicate
                .strip_prefix("flexibility.")
                .and_then(|r| r.split_once('.'))
            {
                if let Some(i) = FLEXIBILITY_LEVELS.iter().position(|l| *l == level) {
                    let best = flex.entry(aspect.to_string()).or_insert((count, i));
                    // More often wins; on a tie, the less flexible level.
                    if count > best.0 || (count == best.0 && i < best.1) {
                        *best = (count, i);
                    }
                }
            } else if let Some(s) = f.predicate.strip_prefix("resolution_style.") {
                if let Some(i) = RESOLUTION_STYLES.iter().position(|x| *x == s) {
                    // More often wins; on a tie, `deliberate` (the later index).
                    if count > 0 && style.is_none_or(|(c, j)| count > c || (count == c && i > j)) {
                        style = Some((count, i));
                    }
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
            usually_requests: requests,
            typical_flexibility: flex
                .into_iter()
                .filter_map(|(a, (_, i))| FLEXIBILITY_LEVELS.get(i).map(|l| (a, l.to_string())))
                .collect(),
            preferred_resolution_style: style
                .and_then(|(_, i)| RESOLUTION_STYLES.get(i))
                .map(|s| s.to_string()),
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
                "usually_requests": r.usually_requests,
                "typical_flexibility": r.typical_flexibility,
                "preferred_resolution_style": r.preferred_resolution_style,
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
