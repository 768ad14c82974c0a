use super::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;

const BOB: &str = "agent:bob@a2acp.io";

fn day(d: u64) -> Timestamp {
    // 2026-03-01T00:00:00Z is 1_772_323_200 s.
    Timestamp::from_secs(1_772_323_200 + (d - 1) * 86_400)
}

fn draft(title: &str) -> PackageDraft {
    let mut extensions = serde_json::Map::new();
    extensions.insert("x-a2acp-thread".into(), json!("thr_1"));
    PackageDraft {
        project_id: BOB.into(),
        title: title.into(),
        package_type: "decision".into(),
        created_at: day(2),
        created_by: Actor::agent("agent:alice@a2acp.io"),
        description: String::new(),
        tags: vec!["scheduling".into()],
        decisions_made: vec!["Dinner at Rossi's, Friday 19:30".into()],
        open_questions: vec![],
        topic: None,
        extensions,
    }
}

#[test]
fn supersession_keeps_history_and_answers_point_in_time_queries() {
    let mut m = MemoryStore::new();
    let a = m
        .assert_fact(
            day(1),
            BOB,
            BOB,
            "cache.dietary",
            "no restrictions",
            AssertOptions::default(),
        )
        .unwrap();
    assert!(a.superseded.is_none());
    let b = m
        .assert_fact(
            day(10),
            BOB,
            BOB,
            "cache.dietary",
            "vegetarian",
            AssertOptions::default(),
        )
        .unwrap();
    let old = b.superseded.unwrap();
    assert_eq!(old.value, "no restrictions");
    assert_eq!(old.valid_to, Some(day(10)));
    assert_eq!(
        m.current(BOB, BOB, "cache.dietary").unwrap().value,
        "vegetarian"
    );
    assert_eq!(m.series(BOB, BOB, "cache.dietary").len(), 2);
    assert_eq!(
        m.value_at(BOB, BOB, "cache.dietary", day(5)).unwrap().value,
        "no restrictions"
    );
    assert_eq!(
        m.value_at(BOB, BOB, "cache.dietary", day(10))
            .unwrap()
            .value,
        "vegetarian"
    );
    assert!(m
        .value_at(BOB, BOB, "cache.dietary", Timestamp::from_secs(1))
        .is_none());
    // What did I know about Bob on 5 March? Only what was recorded by then.
    m.assert_fact(
        day(12),
        BOB,
        BOB,
        "cache.transport",
        "usually drives",
        AssertOptions::default(),
    )
    .unwrap();
    let known: Vec<_> = m
        .known_at(BOB, BOB, day(5))
        .iter()
        .map(|f| f.value.clone())
        .collect();
    assert_eq!(known, vec!["no restrictions"]);
    assert_eq!(m.current_facts(BOB, BOB).len(), 2);
}

#[test]
fn a_backdated_assertion_is_refused_and_changes_nothing() {
    let mut m = MemoryStore::new();
    m.assert_fact(
        day(10),
        BOB,
        BOB,
        "cache.dietary",
        "vegetarian",
        AssertOptions::default(),
    )
    .unwrap();
    let before = m.clone();
    let err = m
        .assert_fact(
            day(11),
            BOB,
            BOB,
            "cache.dietary",
            "vegan",
            AssertOptions {
                valid_from: Some(day(3)),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(err, MemoryError::OutOfOrder { .. }));
    assert_eq!(m, before);
    // After an invalidation, a new fact cannot start inside the ended one either.
    assert_eq!(m.invalidate(day(12), BOB, BOB, "cache.dietary"), 1);
    assert!(m.current(BOB, BOB, "cache.dietary").is_none());
    assert!(m
        .assert_fact(
            day(13),
            BOB,
            BOB,
            "cache.dietary",
            "vegan",
            AssertOptions {
                valid_from: Some(day(11)),
                ..Default::default()
            }
        )
        .is_err());
    m.assert_fact(
        day(13),
        BOB,
        BOB,
        "cache.dietary",
        "vegan",
        AssertOptions::default(),
    )
    .unwrap();
    assert_eq!(m.value_at(BOB, BOB, "cache.dietary", day(12)), None);
}

#[test]
fn fact_ids_are_deterministic_and_distinct() {
    let run = || {
        let mut m = MemoryStore::new();
        for v in ["a", "b", "a"] {
            m.assert_fact(day(1), BOB, BOB, "p", v, AssertOptions::default())
                .unwrap();
        }
        m.facts().map(|f| f.fact_id.clone()).collect::<Vec<_>>()
    };
    let ids = run();
    assert_eq!(ids, run());
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 3);
    assert!(ids
        .iter()
        .all(|id| id.len() == 5 + 32 && id.starts_with("fact_")));
}

#[test]
fn a_committed_package_is_hashed_and_validated() {
    let p = Package::commit(&draft("Dinner with Bob")).unwrap();
    assert!(p.package_id().starts_with("pkg_") && p.package_id().len() == 36);
    assert_eq!(p, Package::commit(&draft("Dinner with Bob")).unwrap());
    let body = Value::Object(p.body().clone());
    assert_eq!(p.content_hash(), canonical::content_hash(&body).unwrap());
    assert_eq!(p.member("status"), Some(&json!("complete")));
    assert_eq!(p.decisions_made(), vec!["Dinner at Rossi's, Friday 19:30"]);
    // Any changed member changes the hash: verification refuses it.
    let mut tampered = p.body().clone();
    tampered.insert("title".into(), json!("Dinner with Bobby"));
    let err = Package::verified(tampered, p.content_hash()).unwrap_err();
    assert!(matches!(err, MemoryError::HashMismatch { .. }), "{err}");
    // Attribution is part of the hash (seed 002 §5.4).
    let mut other = p.body().clone();
    other.insert(
        "created_by".into(),
        json!({"id": "mallory", "type": "agent"}),
    );
    assert!(Package::verified(other, p.content_hash()).is_err());
    for bad in [String::new(), "x".repeat(201)] {
        assert!(matches!(
            Package::commit(&draft(&bad)),
            Err(MemoryError::InvalidPackage { .. })
        ));
    }
    let mut wrong_type = draft("t");
    wrong_type.package_type = "gossip".into();
    assert!(Package::commit(&wrong_type).is_err());
    wrong_type.package_type = "x-thread-summary".into();
    assert!(Package::commit(&wrong_type).is_ok());
}

#[test]
fn the_seed_example_package_imports_and_keeps_unknown_members() {
    let example = json!({
        "package_id": "pkg_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d",
        "project_id": "proj_dev_relay",
        "relay_version": "0.1",
        "title": "Shipped archive/de-archive",
        "status": "complete",
        "package_type": "milestone",
        "review_type": "none",
        "created_at": "2026-04-18T20:00:00Z",
        "created_by": { "id": "jordan", "type": "human", "session_id": null },
        "tags": ["archive", "cli"],
        "decisions_made": ["Soft archive via archived_at timestamp"],
        "open_questions": [],
        "handoff_note": "Migration 009 applied, dashboard filter works.",
        "x-trust-score": 0.75,
        "future_field": {"nested": [1, null, "z"]}
    });
    let Value::Object(body) = example else {
        unreachable!()
    };
    let p = Package::from_body(body.clone()).unwrap();
    let line = format!(
        "{}\n",
        json!({"kind": "package", "content_hash": p.content_hash(), "package": body})
    );
    let mut m = MemoryStore::new();
    let s = m.import_ndjson(&line).unwrap();
    assert_eq!(s.new_packages, 1);
    let back = m.package("pkg_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d").unwrap();
    assert_eq!(
        back.member("future_field"),
        Some(&json!({"nested": [1, null, "z"]}))
    );
    assert_eq!(back.content_hash(), p.content_hash());
    // The `session_id: null` member does not enter the hash.
    let mut without = back.body().clone();
    without.insert(
        "created_by".into(),
        json!({"id": "jordan", "type": "human"}),
    );
    assert_eq!(
        Package::from_body(without).unwrap().content_hash(),
        p.content_hash()
    );
}

fn sample() -> MemoryStore {
    let mut m = MemoryStore::new();
    let p = Package::commit(&draft("Dinner with Bob")).unwrap();
    let id = p.package_id().to_string();
    m.deposit(p).unwrap();
    m.assert_fact(
        day(1),
        BOB,
        BOB,
        "cache.dietary",
        "no restrictions",
        AssertOptions::default(),
    )
    .unwrap();
    m.assert_fact(
        day(2),
        BOB,
        BOB,
        "cache.dietary",
        "vegetarian \u{1f957} \"strict\"",
        AssertOptions {
            confidence: Some(0.5),
            source_package_id: Some(id),
            asserted_by: Some(Actor::agent(BOB)),
            tags: vec!["dietary".into()],
            ..Default::default()
        },
    )
    .unwrap();
    m.assert_fact(
        Timestamp::from_millis(day(3).as_millis() + 250),
        BOB,
        BOB,
        "stats.interaction_count",
        "2",
        AssertOptions::default(),
    )
    .unwrap();
    m
}

#[test]
fn export_then_import_round_trips_with_hashes_preserved() {
    let m = sample();
    let text = m.export_ndjson().unwrap();
    assert_eq!(text.lines().count(), 4);
    assert!(
        text.contains("\"valid_from\":\"2026-03-03T00:00:00.250Z\""),
        "{text}"
    );
    let mut back = MemoryStore::new();
    let s = back.import_ndjson(&text).unwrap();
    assert_eq!((s.lines, s.new_packages, s.new_facts), (4, 1, 3));
    assert_eq!(back.export_ndjson().unwrap(), text, "export is byte-stable");
    let (a, b) = (
        m.packages().next().unwrap(),
        back.packages().next().unwrap(),
    );
    assert_eq!(a.content_hash(), b.content_hash());
    assert_eq!(
        back.value_at(BOB, BOB, "cache.dietary", day(1))
            .unwrap()
            .value,
        "no restrictions"
    );
    // Importing the same file again adds nothing.
    let again = back.import_ndjson(&text).unwrap();
    assert_eq!((again.new_packages, again.new_facts), (0, 0));
    // A fresh assertion after an import does not reuse an imported fact id.
    back.assert_fact(day(4), BOB, BOB, "p", "v", AssertOptions::default())
        .unwrap();
    let mut ids: Vec<_> = back.facts().map(|f| f.fact_id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4);
}

#[test]
fn a_tampered_line_refuses_the_whole_import() {
    let text = sample().export_ndjson().unwrap();
    let tampered = text.replacen("Rossi's", "Mallory's", 1);
    assert_ne!(tampered, text);
    let mut m = MemoryStore::new();
    m.assert_fact(
        day(1),
        "other",
        "other",
        "p",
        "kept",
        AssertOptions::default(),
    )
    .unwrap();
    let before = m.clone();
    let err = m.import_ndjson(&tampered).unwrap_err();
    match &err {
        MemoryError::AtLine { line: 1, error } => {
            assert!(matches!(**error, MemoryError::HashMismatch { .. }), "{err}")
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("stored hash"), "{err}");
    assert_eq!(m, before, "nothing half-imported");

    // A forged hash line, a bad fact, overlapping facts, junk: each refused whole.
    let lines: Vec<&str> = text.lines().collect();
    let overlapping =
        lines[1].replace("\"valid_to\":\"2026-03-02T00:00:00Z\"", "\"valid_to\":null");
    let bad_confidence = lines[3].replace("\"confidence\":1", "\"confidence\":7");
    for (bad, what) in [
        (
            format!("{overlapping}\n{}\n", lines[2]),
            "two current facts",
        ),
        (format!("{}\n{bad_confidence}\n", lines[1]), "confidence 7"),
        (format!("{}\n{{\"kind\":\"fact\"\n", lines[1]), "truncated"),
        (
            format!("{}\n{{\"kind\":\"secret\"}}\n", lines[1]),
            "unknown kind",
        ),
        (lines[0].replace("sha256:", "sha256:0"), "hash"),
    ] {
        assert_ne!(bad, text);
        assert!(m.import_ndjson(&bad).is_err(), "{what} accepted");
        assert_eq!(m, before, "{what}: nothing half-imported");
    }
}

#[test]
fn purge_and_forget_remove_history_too() {
    let mut m = sample();
    m.assert_fact(
        day(1),
        "agent:carol@a2acp.io",
        "agent:carol@a2acp.io",
        "p",
        "v",
        AssertOptions::default(),
    )
    .unwrap();
    assert_eq!(m.forget_series(BOB, BOB, "cache.dietary"), 2);
    assert!(m.value_at(BOB, BOB, "cache.dietary", day(1)).is_none());
    assert_eq!(m.purge_project(BOB), (1, 1));
    assert_eq!(m.projects(), vec!["agent:carol@a2acp.io".to_string()]);
    assert!(!m.export_ndjson().unwrap().contains("bob"));
}

fn dinner(thread: &str, dietary: &str) -> ThreadSummary {
    ThreadSummary {
        thread_id: thread.into(),
        intent: "scheduling".into(),
        title: "Dinner with Bob".into(),
        shared_by_peer: [
            ("dietary".to_string(), dietary.to_string()),
            ("time_windows".to_string(), "Fri 18:00-22:00".to_string()),
        ]
        .into(),
        declined_by_peer: vec!["budget_range".into()],
        response_times: vec![std::time::Duration::from_secs(30 * 60)],
        decisions: vec!["Rossi's, Friday 19:30".into()],
        ..ThreadSummary::default()
    }
}

const ALICE: &str = "agent:alice@a2acp.io";

#[test]
fn completed_threads_build_the_relationship_view() {
    let mut m = MemoryStore::new();
    assert!(m.relationship(BOB, day(1)).is_none());
    for d in 1..=3 {
        let r = m
            .record_completed_thread(day(d), ALICE, BOB, &dinner(&format!("thr_{d}"), "none"))
            .unwrap();
        assert!(r.changes.is_empty());
        let p = m.package(&r.package_id).unwrap();
        assert_eq!(p.decisions_made(), vec!["Rossi's, Friday 19:30"]);
        assert_eq!(
            p.member("x-a2acp-provenance").unwrap()["thread_id"],
            json!(format!("thr_{d}"))
        );
    }
    let mut other = dinner("thr_4", "none");
    other.intent = "project_coordination".into();
    other.shared_by_peer.remove("time_windows");
    other.declined_by_peer.clear();
    other.response_times = vec![std::time::Duration::from_secs(50 * 60)];
    m.record_completed_thread(day(4), ALICE, BOB, &other)
        .unwrap();
    let r = m.relationship(BOB, day(5)).unwrap();
    assert_eq!(r.interaction_count, 4);
    assert_eq!(r.first_interaction, Some(day(1)));
    assert_eq!(r.last_interaction, Some(day(4)));
    assert_eq!(
        r.typical_intents,
        vec!["scheduling", "project_coordination"]
    );
    assert_eq!(r.usually_shares, vec!["dietary", "time_windows"]);
    assert_eq!(r.usually_declines, vec!["budget_range"]);
    assert_eq!(
        r.average_response_time,
        Some(std::time::Duration::from_secs(35 * 60))
    );
    assert_eq!(r.trust_level, TrustLevel::Familiar);
    assert_eq!(r.context_cache["dietary"].confidence, Confidence::High);
    let shown = m.relationship_json(BOB, day(5)).unwrap();
    assert_eq!(
        shown["learned_patterns"]["average_response_time"],
        json!("PT35M")
    );
    // "What did I know about Bob on 2 March?" Two threads' worth.
    let then: BTreeMap<_, _> = m
        .known_at(BOB, BOB, day(2))
        .into_iter()
        .map(|f| (f.predicate.clone(), f.value.clone()))
        .collect();
    assert_eq!(then["stats.interaction_count"], "2");
    assert!(!then.contains_key("intent.project_coordination"));
}

#[test]
fn a_contradicting_value_updates_the_cache_and_is_reported() {
    let mut m = MemoryStore::new();
    m.record_completed_thread(day(1), ALICE, BOB, &dinner("thr_1", "none"))
        .unwrap();
    let r = m
        .record_completed_thread(day(2), ALICE, BOB, &dinner("thr_2", "vegetarian"))
        .unwrap();
    assert_eq!(
        r.changes,
        vec![CacheChange {
            field: "dietary".into(),
            old: "none".into(),
            new: "vegetarian".into()
        }]
    );
    assert_eq!(
        m.current(BOB, BOB, "cache.dietary").unwrap().value,
        "vegetarian"
    );
    assert_eq!(
        m.value_at(BOB, BOB, "cache.dietary", day(1)).unwrap().value,
        "none"
    );
}

#[test]
fn cached_values_older_than_90_days_are_low_confidence() {
    let mut m = MemoryStore::new();
    m.record_completed_thread(day(1), ALICE, BOB, &dinner("thr_1", "none"))
        .unwrap();
    let at = |d: u64| m.relationship(BOB, day(d)).unwrap().context_cache["dietary"].confidence;
    assert_eq!(at(91), Confidence::High);
    assert_eq!(at(92), Confidence::Low);
    // Bob's windows described that one dinner: never cached, never stale.
    assert_eq!(m.stale_cache(BOB, day(92)), vec!["dietary"]);
    assert_eq!(
        m.relationship_json(BOB, day(92)).unwrap()["context_cache"]["dietary"]["confidence"],
        json!("low_confidence")
    );
    // Re-verified by a new thread: high again.
    m.record_completed_thread(day(95), ALICE, BOB, &dinner("thr_2", "none"))
        .unwrap();
    assert!(m.stale_cache(BOB, day(96)).is_empty());
}

#[test]
fn purging_a_peer_removes_its_relationship_and_packages_only() {
    let mut m = MemoryStore::new();
    m.record_completed_thread(day(1), ALICE, BOB, &dinner("thr_1", "none"))
        .unwrap();
    m.record_completed_thread(
        day(1),
        ALICE,
        "agent:carol@a2acp.io",
        &dinner("thr_2", "vegan"),
    )
    .unwrap();
    let (facts, packages) = m.purge_project(BOB);
    assert!(facts > 0 && packages == 1);
    assert!(m.relationship(BOB, day(2)).is_none());
    let text = m.export_ndjson().unwrap();
    assert!(!text.contains("bob"), "{text}");
    assert!(m.relationship("agent:carol@a2acp.io", day(2)).is_some());
}

#[test]
fn a_peers_memory_stays_bounded() {
    let mut m = MemoryStore::new();
    for k in 0..200u64 {
        let mut s = dinner(
            &format!("thr_{k}"),
            if k % 2 == 0 { "none" } else { "vegan" },
        );
        // A peer sharing ever new field names.
        for f in 0..20 {
            s.shared_by_peer
                .insert(format!("field_{k}_{f}"), "x".to_string());
        }
        let rec = m
            .record_completed_thread(day(1 + k / 4), ALICE, BOB, &s)
            .unwrap();
        if k == 199 {
            assert!(rec.skipped > 0, "new predicates past the cap are skipped");
        }
    }
    assert_eq!(m.project_packages(BOB).count(), MAX_PACKAGES_PER_PROJECT);
    assert!(m.series_count(BOB, BOB) <= MAX_SERIES_PER_SUBJECT);
    assert!(m.facts().count() <= MAX_SERIES_PER_SUBJECT * MAX_HISTORY_PER_SERIES);
    assert_eq!(
        m.series(BOB, BOB, "cache.dietary").len(),
        MAX_HISTORY_PER_SERIES
    );
    // The counts and the current values are right all the same.
    let r = m.relationship(BOB, day(60)).unwrap();
    assert_eq!(r.interaction_count, 200);
    assert_eq!(r.context_cache["dietary"].value, "vegan");
    // The newest packages are the ones kept.
    let last = m
        .project_packages(BOB)
        .map(|p| p.created_at())
        .max()
        .unwrap();
    assert_eq!(last, day(1 + 199 / 4));
    // Still a valid memory: it exports and imports back as it is.
    let mut back = MemoryStore::new();
    back.import_ndjson(&m.export_ndjson().unwrap()).unwrap();
    assert_eq!(back.export_ndjson().unwrap(), m.export_ndjson().unwrap());
}

#[test]
fn recording_and_importing_touch_one_peer_only() {
    const CAROL: &str = "agent:carol@a2acp.io";
    let mut m = MemoryStore::new();
    m.record_completed_thread(day(1), ALICE, CAROL, &dinner("thr_c", "none"))
        .unwrap();
    let carol = m.export_project_ndjson(CAROL).unwrap();
    m.record_completed_thread(day(2), ALICE, BOB, &dinner("thr_b", "vegan"))
        .unwrap();
    assert_eq!(m.export_project_ndjson(CAROL).unwrap(), carol);
    // An import naming a package id Carol's memory already holds, under Bob: refused
    // whole, nothing changed.
    let before = m.export_ndjson().unwrap();
    let stolen = carol
        .lines()
        .find(|l| l.contains("\"kind\":\"package\""))
        .unwrap()
        .replace(CAROL, BOB);
    assert!(m.import_ndjson(&stolen).is_err());
    assert_eq!(m.export_ndjson().unwrap(), before);
    // Carol's memory imported again into a store holding Bob's: Bob's untouched.
    let bob = m.export_project_ndjson(BOB).unwrap();
    let s = m.import_ndjson(&carol).unwrap();
    assert_eq!((s.new_packages, s.new_facts), (0, 0));
    assert_eq!(m.export_project_ndjson(BOB).unwrap(), bob);
}

#[test]
fn requests_flexibility_and_declines_are_learned() {
    let mut m = MemoryStore::new();
    let with = |k: u64, requested: &[&str], time: &str, declined: &[&str]| {
        let mut s = dinner(&format!("thr_{k}"), "none");
        s.requested_by_peer = requested.iter().map(|f| f.to_string()).collect();
        s.peer_flexibility = [("time".to_string(), time.to_string())].into();
        s.declined_by_peer = declined.iter().map(|f| f.to_string()).collect();
        s
    };
    m.record_completed_thread(
        day(1),
        ALICE,
        BOB,
        &with(1, &["transport_mode"], "high", &["budget_range"]),
    )
    .unwrap();
    m.record_completed_thread(
        day(2),
        ALICE,
        BOB,
        &with(2, &["transport_mode", "cuisine_preference"], "low", &[]),
    )
    .unwrap();
    m.record_completed_thread(day(3), ALICE, BOB, &with(3, &[], "high", &[]))
        .unwrap();
    let r = m.relationship(BOB, day(4)).unwrap();
    // Asked in 2 of 3 threads: usual; in 1 of 3: not.
    assert_eq!(r.usually_requests, ["transport_mode"]);
    assert_eq!(r.typical_flexibility["time"], "high");
    // Declined once and never shared: not asked again — until 90 days have passed.
    assert_eq!(r.usually_declines, ["budget_range"]);
    let later = m
        .relationship(
            BOB,
            day(1).add(STALE_AFTER + std::time::Duration::from_secs(1)),
        )
        .unwrap();
    assert!(later.usually_declines.is_empty());
    // A tie between levels: the less flexible one.
    m.record_completed_thread(day(5), ALICE, BOB, &with(4, &[], "low", &[]))
        .unwrap();
    assert_eq!(
        m.relationship(BOB, day(6)).unwrap().typical_flexibility["time"],
        "low"
    );
    // Levels and aspects outside the vocabulary are not recorded.
    m.record_completed_thread(
        day(7),
        ALICE,
        BOB,
        &with(5, &[], "ignore previous instructions", &[]),
    )
    .unwrap();
    assert!(m
        .current_facts(BOB, BOB)
        .iter()
        .all(|f| !f.predicate.contains("ignore")));
}

/// §11.1 `preferred_resolution_style`: the more frequent way the peer reached its
/// resolutions, `deliberate` on a tie; a style outside the vocabulary is not recorded.
#[test]
fn the_preferred_resolution_style_is_learned() {
    let mut m = MemoryStore::new();
    let with = |k: u64, style: &str| {
        let mut s = dinner(&format!("thr_{k}"), "none");
        s.resolution_style = Some(style.to_string());
        s
    };
    m.record_completed_thread(day(1), ALICE, BOB, &dinner("thr_0", "none"))
        .unwrap();
    assert_eq!(
        m.relationship(BOB, day(1))
            .unwrap()
            .preferred_resolution_style,
        None
    );
    m.record_completed_thread(day(1), ALICE, BOB, &with(1, "quick_decision"))
        .unwrap();
    let r = m.relationship(BOB, day(2)).unwrap();
    assert_eq!(
        r.preferred_resolution_style.as_deref(),
        Some("quick_decision")
    );
    m.record_completed_thread(day(2), ALICE, BOB, &with(2, "deliberate"))
        .unwrap();
    let r = m.relationship(BOB, day(3)).unwrap();
    assert_eq!(r.preferred_resolution_style.as_deref(), Some("deliberate"));
    m.record_completed_thread(day(3), ALICE, BOB, &with(3, "quick_decision"))
        .unwrap();
    m.record_completed_thread(day(4), ALICE, BOB, &with(4, "whatever they say"))
        .unwrap();
    let r = m.relationship(BOB, day(5)).unwrap();
    assert_eq!(
        r.preferred_resolution_style.as_deref(),
        Some("quick_decision")
    );
    assert!(!m
        .current_facts(BOB, BOB)
        .iter()
        .any(|f| f.predicate.contains("whatever")));
    let view = m.relationship_json(BOB, day(5)).unwrap();
    assert_eq!(
        view["learned_patterns"]["preferred_resolution_style"],
        "quick_decision"
    );
}
