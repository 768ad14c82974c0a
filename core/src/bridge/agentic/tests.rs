//! The service's decisions, written from seed 002: the §6.7 example's canonical form and
//! hash, every §5.3 transition, deposits, supersession and the bundles.

use serde_json::{json, Value};

use super::*;
use crate::memory::canonical;
use crate::Timestamp;

/// The seed's §6.7 example, as its §6.7 prints it.
fn example() -> Value {
    json!({
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
        "handoff_note": "Migration 009 applied, dashboard filter works."
    })
}

/// Appendix A's canonical form of the §6.7 example and its §6.6 hash (computed
/// independently: sorted keys, no whitespace, `null` members dropped, SHA-256).
pub const EXAMPLE_CANONICAL: &str = r#"{"created_at":"2026-04-18T20:00:00Z","created_by":{"id":"jordan","type":"human"},"decisions_made":["Soft archive via archived_at timestamp"],"handoff_note":"Migration 009 applied, dashboard filter works.","open_questions":[],"package_id":"pkg_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d","package_type":"milestone","project_id":"proj_dev_relay","relay_version":"0.1","review_type":"none","status":"complete","tags":["archive","cli"],"title":"Shipped archive/de-archive"}"#;
/// Its hash.
pub const EXAMPLE_HASH: &str =
    "sha256:0efe5d06aaaaf2dc735b3f9ce7cfc1a0f7cd715491ab61d991f57be1d4c0db33";

#[test]
fn the_seed_example_hashes_to_the_vector() {
    let canon = canonical::canonical_json(&example()).unwrap();
    assert_eq!(String::from_utf8(canon).unwrap(), EXAMPLE_CANONICAL);
    let p = ops::check_deposit("proj_dev_relay", example(), &Access::Open).unwrap();
    assert_eq!(p.content_hash(), EXAMPLE_HASH);
}

#[test]
fn every_transition_of_the_table_and_no_other() {
    let all = ["draft", "awaiting_review", "revision_requested", "complete"];
    let allowed = [
        ("draft", "complete"),
        ("draft", "awaiting_review"),
        ("awaiting_review", "complete"),
        ("awaiting_review", "revision_requested"),
        ("revision_requested", "awaiting_review"),
        ("revision_requested", "complete"),
    ];
    for from in all {
        for to in all.iter().chain(&["bogus"]) {
            let r = ops::transition(from, to);
            if allowed.contains(&(from, to)) {
                assert_eq!(r, Ok(()), "{from} → {to}");
            } else {
                let e = r.unwrap_err();
                assert_eq!(
                    (e.status(), e.code()),
                    (400, "invalid_transition"),
                    "{from} → {to}"
                );
            }
        }
    }
    assert!(ops::allowed_next("complete").is_empty());
}

fn pkg(status: &str, review: &str) -> crate::memory::Package {
    let mut v = example();
    v["status"] = status.into();
    v["review_type"] = review.into();
    ops::check_deposit("proj_dev_relay", v, &Access::Open).unwrap()
}

fn human(id: &str) -> ops::Reviewer {
    ops::Reviewer {
        id: id.into(),
        actor_type: "human".into(),
    }
}

#[test]
fn flag_and_review_move_the_package_and_rehash_it() {
    let draft = pkg("draft", "none");
    let flagged = ops::flag(&draft, &json!({"review_type": "human", "note": "check"})).unwrap();
    assert_eq!(ops::status_of(&flagged), "awaiting_review");
    assert_eq!(flagged.member("review_type"), Some(&json!("human")));
    assert_eq!(flagged.member("x-review-note"), Some(&json!("check")));
    assert_ne!(flagged.content_hash(), draft.content_hash());
    // An agent may not complete a human review.
    let agent = ops::Reviewer {
        id: "bot".into(),
        actor_type: "agent".into(),
    };
    let e = ops::review(&flagged, &json!({"status": "complete"}), &agent).unwrap_err();
    assert_eq!(e.code(), "unauthorized");
    let back = ops::review(
        &flagged,
        &json!({"status": "revision_requested"}),
        &human("jo"),
    )
    .unwrap();
    assert_eq!(ops::status_of(&back), "revision_requested");
    assert_eq!(
        back.member("x-reviewed-by"),
        Some(&json!({"id": "jo", "type": "human"}))
    );
    let again = ops::flag(&back, &json!({"review_type": "agent"})).unwrap();
    let done = ops::review(&again, &json!({"status": "complete"}), &agent).unwrap();
    assert_eq!(ops::status_of(&done), "complete");
    // Nothing leaves complete: not a flag, not a review.
    let e = ops::flag(&done, &json!({"review_type": "human"})).unwrap_err();
    assert_eq!(e.code(), "invalid_transition");
    for to in ["draft", "awaiting_review", "revision_requested", "complete"] {
        let e = ops::review(&done, &json!({"status": to}), &human("jo")).unwrap_err();
        assert_eq!(e.code(), "invalid_transition", "complete → {to}");
    }
    // A flag needs a reviewer kind.
    let e = ops::flag(&draft, &json!({"review_type": "none"})).unwrap_err();
    assert_eq!(e.status(), 400);
}

#[test]
fn deposits_are_checked_against_the_schema_and_the_token() {
    let bad = |mutate: &dyn Fn(&mut Value)| {
        let mut v = example();
        mutate(&mut v);
        ops::check_deposit("proj_dev_relay", v, &Access::Open).unwrap_err()
    };
    for (what, e) in [
        (
            "no title",
            bad(&|v| drop(v.as_object_mut().unwrap().remove("title"))),
        ),
        ("long title", bad(&|v| v["title"] = "x".repeat(201).into())),
        ("bad status", bad(&|v| v["status"] = "done".into())),
        ("bad type", bad(&|v| v["package_type"] = "memo".into())),
        ("bad version", bad(&|v| v["relay_version"] = "0.2".into())),
        ("bad time", bad(&|v| v["created_at"] = "yesterday".into())),
        (
            "bad actor",
            bad(&|v| v["created_by"]["type"] = "robot".into()),
        ),
        (
            "bad deliverable",
            bad(&|v| v["deliverables"] = json!([{"path": "a"}])),
        ),
        (
            "bad next",
            bad(&|v| v["estimated_next_actor"] = "script".into()),
        ),
        (
            "other project",
            bad(&|v| v["project_id"] = "elsewhere".into()),
        ),
        ("significance", bad(&|v| v["significance"] = 11.into())),
    ] {
        assert_eq!((e.status(), e.code()), (400, "invalid_schema"), "{what}");
    }
    let e = ops::check_deposit("p", json!([1]), &Access::Open).unwrap_err();
    assert_eq!(e.code(), "invalid_schema");
    // x-* types and members are accepted and kept.
    let mut v = example();
    v["package_type"] = "x-model-eval".into();
    v["x-trust-score"] = json!({"score": 0.5});
    v["future_member"] = json!([1, 2]);
    let p = ops::check_deposit("proj_dev_relay", v.clone(), &Access::Open).unwrap();
    assert_eq!(p.member("x-trust-score"), Some(&json!({"score": 0.5})));
    assert_eq!(p.member("future_member"), Some(&json!([1, 2])));
    // A token stands for one actor and may be scoped to projects.
    let jordan = Access::Token(Caller {
        id: "jordan".into(),
        actor_type: "human".into(),
        projects: Some(vec!["proj_dev_relay".into()]),
    });
    assert!(ops::check_deposit("proj_dev_relay", example(), &jordan).is_ok());
    let sam = Access::Token(Caller {
        id: "sam".into(),
        actor_type: "human".into(),
        projects: None,
    });
    let e = ops::check_deposit("proj_dev_relay", example(), &sam).unwrap_err();
    assert_eq!((e.status(), e.code()), (403, "unauthorized"));
    let mut other = example();
    other["project_id"] = "proj_other".into();
    let e = ops::check_deposit("proj_other", other, &jordan).unwrap_err();
    assert_eq!((e.status(), e.code()), (403, "unauthorized"));
}

#[test]
fn a_redeposit_is_the_same_package_or_a_conflict() {
    let a = pkg("complete", "none");
    assert_eq!(ops::redeposit(&a, a.content_hash()), Ok(()));
    let mut v = example();
    v["title"] = "Another title".into();
    let b = ops::check_deposit("proj_dev_relay", v, &Access::Open).unwrap();
    let e = ops::redeposit(&b, a.content_hash()).unwrap_err();
    assert_eq!((e.status(), e.code()), (409, "duplicate_package_id"));
}

fn t(s: &str) -> Timestamp {
    Timestamp::parse_rfc3339(s).unwrap()
}

#[test]
fn facts_supersede_in_order_and_answer_points_in_time() {
    let now = t("2026-04-10T12:00:00Z");
    let first = facts::parse_assertion(
        "p",
        &json!({"subject": "s", "predicate": "p", "value": "1", "x-k": true}),
        &Access::Open,
        now,
        None,
        0,
    )
    .unwrap();
    assert!(first.fact_id.starts_with("fact_") && first.fact_id.len() == 37);
    assert_eq!(first.extra.get("x-k"), Some(&json!(true)));
    assert_eq!(facts::supersede(None, &first), Ok(None));
    let later = t("2026-04-12T00:00:00Z");
    let mut second = facts::parse_assertion(
        "p",
        &json!({"subject": "s", "predicate": "p", "value": "2"}),
        &Access::Open,
        later,
        Some(now),
        1,
    )
    .unwrap();
    assert_eq!(facts::supersede(Some(&first), &second), Ok(Some(later)));
    let mut ended = first.clone();
    ended.valid_to = Some(later);
    second.valid_to = None;
    let all = vec![ended.clone(), second.clone()];
    assert_eq!(facts::holding(all.clone(), None), vec![second.clone()]);
    assert_eq!(
        facts::holding(all.clone(), Some(t("2026-04-11T00:00:00Z"))),
        vec![ended.clone()]
    );
    assert!(facts::holding(all, Some(t("2026-04-01T00:00:00Z"))).is_empty());
    // Earlier than the current one: refused.
    let early = facts::parse_assertion(
        "p",
        &json!({"subject": "s", "predicate": "p", "value": "0", "valid_from": "2026-04-01T00:00:00Z"}),
        &Access::Open,
        later,
        None,
        2,
    )
    .unwrap();
    let e = facts::supersede(Some(&second), &early).unwrap_err();
    assert_eq!((e.status(), e.code()), (409, "fact_out_of_order"));
    // Numbers are not values (§7.1).
    let e = facts::parse_assertion(
        "p",
        &json!({"subject": "s", "predicate": "p", "value": 97.0}),
        &Access::Open,
        now,
        None,
        0,
    )
    .unwrap_err();
    assert_eq!(e.code(), "invalid_schema");
    assert_eq!(facts::to_invalidate(&[second.clone()], Some("3")).len(), 0);
    assert_eq!(facts::to_invalidate(&[second], Some("2")).len(), 1);
}

#[test]
fn the_search_query_quotes_every_word() {
    assert_eq!(
        search::fts_query("dinner AND \"friday\" NEAR(x"),
        Some("\"dinner\" OR \"and\" OR \"friday\" OR \"near\" OR \"x\"".into())
    );
    assert_eq!(search::fts_query(" *:^ "), None);
}

#[test]
fn callsigns_are_adjective_noun_and_stable() {
    let id = callsign::session_id("p", "jordan", "human", 1);
    assert!(id.starts_with("sess_") && id.len() == 37);
    let c = callsign::callsign(&id);
    assert_eq!(c, callsign::callsign(&id));
    assert_eq!(c.split('-').count(), 2);
}

#[test]
fn orient_and_digest_leave_drafts_out_and_gather_questions() {
    let project = Project {
        project_id: "proj_dev_relay".into(),
        name: "Relay".into(),
        created_at: "2026-04-01T00:00:00Z".into(),
        archived_at: None,
    };
    let mut q = example();
    q["package_id"] = "pkg_q".into();
    q["package_type"] = "question".into();
    q["status"] = "awaiting_review".into();
    q["review_type"] = "human".into();
    q["title"] = "Which region?".into();
    q["open_questions"] = json!(["Budget?"]);
    let q = ops::check_deposit("proj_dev_relay", q, &Access::Open).unwrap();
    let mut d = example();
    d["package_id"] = "pkg_d".into();
    d["status"] = "draft".into();
    d["open_questions"] = json!(["Hidden?"]);
    let d = ops::check_deposit("proj_dev_relay", d, &Access::Open).unwrap();
    let c = pkg("complete", "none");
    let now = t("2026-04-19T00:00:00Z");
    let recent = vec![q.clone(), d, c.clone()];
    let o = digest::orient(&project, &recent, &recent, &[], 1, 14, now);
    assert_eq!(o["recent_packages"].as_array().unwrap().len(), 2);
    let qs: Vec<&str> = o["open_questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["question"].as_str().unwrap())
        .collect();
    assert_eq!(qs, ["Which region?", "Budget?"]);
    assert_eq!(o["window_days"], 14);
    assert_eq!(o["generated_at"], "2026-04-19T00:00:00Z");
    let activity = vec![digest::ProjectActivity {
        project,
        recent,
        counts: vec![
            ("question".into(), "awaiting_review".into(), 1),
            ("milestone".into(), "draft".into(), 1),
            ("milestone".into(), "complete".into(), 1),
        ],
        active_facts: vec![],
        awaiting_review: vec![q.clone()],
    }];
    let g = digest::orchestrate(&activity, false, Some("archive"), &[c], 14, now);
    assert_eq!(g["summary"]["packages"], 2);
    assert_eq!(
        g["summary"]["decisions"][0]["decision"],
        "Soft archive via archived_at timestamp"
    );
    assert_eq!(g["awaiting_review"][0]["package_id"], "pkg_q");
    assert_eq!(
        g["snippets"][0]["excerpt"],
        "Migration 009 applied, dashboard filter works."
    );
    assert!(g["summary"]["text"]
        .as_str()
        .unwrap()
        .starts_with("2 packages in the last 14 days"));
}

#[test]
fn the_descriptor_declares_l3_and_its_search() {
    let d = conformance::descriptor(
        conformance::Capabilities {
            keyword_search: true,
        },
        "1.0.0",
    );
    assert_eq!(d["conformance_level"], "L3");
    assert_eq!(d["protocol_version"], "0.1");
    assert_eq!(d["capabilities"]["semantic_search"], false);
    assert_eq!(d["capabilities"]["x-keyword_search"], true);
}

#[test]
fn every_error_is_a_client_error_but_the_missing_capability() {
    let e = AgenticError::SearchNotSupported("x-keyword_search".into());
    assert_eq!(e.status(), 501);
    assert_eq!(e.body()["capability"], "x-keyword_search");
    for e in [
        AgenticError::InvalidSchema(String::new()),
        AgenticError::ProjectArchived(String::new()),
        AgenticError::Unauthenticated(String::new()),
        AgenticError::ProjectNotFound(String::new()),
        AgenticError::FactOutOfOrder(String::new()),
    ] {
        assert!((400..500).contains(&e.status()), "{e}");
    }
}

mod leaves {
    //! What a thread leaves (`outcomes`), on the harness's dinner: each step's new audit
    //! records read with the thread as it is right after that step.

    use std::collections::BTreeMap;

    use super::super::outcomes::{outcomes, Outcome, THREAD_MEMBER};
    use crate::agent::{ConsentAnswer, FieldChoice, PromptKind, ResolutionAnswer};
    use crate::harness::{dinner, Net};

    /// The outcomes of agent `i`'s audit records from `from` on.
    fn new_outcomes(net: &Net, i: usize, from: &mut usize, secrets: &[String]) -> Vec<Outcome> {
        let node = &net.nodes[i];
        let me = node.agent.address().clone();
        let mut out = Vec::new();
        for r in &node.audit[*from..] {
            let t = r.thread_id.as_deref().and_then(|id| node.agent.thread(id));
            out.extend(outcomes(r, t, &me, secrets));
        }
        *from = node.audit.len();
        out
    }

    /// Answers every open prompt with `resolution` (consent: share what is asked), one
    /// step, and returns Alice's outcomes of that step.
    fn step(
        net: &mut Net,
        a: usize,
        seen: &mut [usize; 2],
        resolution: &ResolutionAnswer,
    ) -> Vec<Outcome> {
        for i in 0..net.nodes.len() {
            if let Some(p) = net.prompt(i) {
                match p.kind {
                    PromptKind::Consent { .. } => {
                        let mut m = BTreeMap::new();
                        m.insert("transport_mode".to_string(), FieldChoice::Share);
                        m.insert("cuisine_preference".to_string(), FieldChoice::DontShare);
                        net.answer_consent(i, p.id, ConsentAnswer::ShareSelected(m));
                    }
                    PromptKind::Resolution { .. } => {
                        net.answer_resolution(i, p.id, resolution.clone())
                    }
                }
            }
            let _ = net.finish_action(i, Ok(()));
            net.settle();
        }
        let out = new_outcomes(net, a, &mut seen[0], &["Italian".to_string()]);
        let b = 1 - a;
        let _ = new_outcomes(net, b, &mut seen[1], &[]);
        out
    }

    fn deposits(o: &[Outcome]) -> Vec<(&str, &str, &str)> {
        o.iter()
            .filter_map(|o| match o {
                Outcome::Deposit { package, .. } => Some((
                    package["package_type"].as_str().unwrap_or(""),
                    package["status"].as_str().unwrap_or(""),
                    package["review_type"].as_str().unwrap_or(""),
                )),
                _ => None,
            })
            .collect()
    }

    fn reviews(o: &[Outcome]) -> Vec<&'static str> {
        o.iter()
            .filter_map(|o| match o {
                Outcome::Review { status, .. } => Some(*status),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_dinner_leaves_a_decision_reviewed_by_the_person_and_a_milestone() {
        let (mut net, a, b) = dinner::net();
        dinner::start(&mut net, a, b);
        let mut seen = [0, 0];
        let mut all = Vec::new();
        for _ in 0..20 {
            let o = step(&mut net, a, &mut seen, &ResolutionAnswer::Confirm);
            all.extend(o);
        }
        let d = deposits(&all);
        assert!(
            d.contains(&("decision", "awaiting_review", "human")),
            "{d:?}"
        );
        assert!(d.contains(&("milestone", "complete", "none")), "{d:?}");
        assert_eq!(reviews(&all), vec!["complete"]);
        // Every package names the thread and never holds a never-share value.
        for o in &all {
            if let Outcome::Deposit {
                package,
                project_id,
                ..
            } = o
            {
                assert!(package[THREAD_MEMBER].is_string());
                assert_eq!(project_id, &net.address(b).to_string());
                assert!(!serde_json::Value::Object(package.clone())
                    .to_string()
                    .contains("Italian"));
            }
        }
        // The milestone points at the decision; ids are stable (derived, not random).
        let id_of = |t: &str| {
            all.iter().find_map(|o| match o {
                Outcome::Deposit { package, .. } if package["package_type"] == t => {
                    Some(package.clone())
                }
                _ => None,
            })
        };
        let (dec, mil) = (id_of("decision").unwrap(), id_of("milestone").unwrap());
        assert_eq!(mil["parent_package_id"], dec["package_id"]);
        assert!(dec["package_id"].as_str().unwrap().starts_with("pkg_"));
    }

    #[test]
    fn a_different_time_sends_the_decision_back_and_a_decline_too() {
        for (answer, note) in [
            (
                ResolutionAnswer::DifferentTime,
                "a different time or place was asked for",
            ),
            (ResolutionAnswer::Decline, "declined"),
        ] {
            let (mut net, a, b) = dinner::net();
            dinner::start(&mut net, a, b);
            let mut seen = [0, 0];
            let mut all = Vec::new();
            for _ in 0..4 {
                all.extend(step(&mut net, a, &mut seen, &answer));
            }
            let sent_back: Vec<&String> = all
                .iter()
                .filter_map(|o| match o {
                    Outcome::Review {
                        status: "revision_requested",
                        note,
                        ..
                    } => Some(note),
                    _ => None,
                })
                .collect();
            assert!(
                sent_back.iter().any(|n| n.as_str() == note),
                "{answer:?}: {all:?}"
            );
            assert!(!reviews(&all).contains(&"complete"), "{answer:?}");
        }
    }
}
