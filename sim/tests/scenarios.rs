//! Every shipped scenario: its checks pass (or fail only on the core issues it lists),
//! its transcript is snapshotted, and a run is byte-for-byte a function of the seed.

use a2acp_sim::scenario::{self, SHIPPED};
use a2acp_sim::world::Sim;

fn run(name: &str, seed: u64) -> (a2acp_sim::Report, String) {
    let spec = scenario::load(name).expect("shipped scenario parses");
    let (r, t, _) = Sim::new(spec, seed).run();
    (r, t)
}

#[test]
fn shipped_scenarios_pass_and_match_their_snapshots() {
    let mut failures = Vec::new();
    for (name, _) in SHIPPED {
        let (report, transcript) = run(name, 1);
        if !report.passed() {
            failures.push(format!(
                "{name}: {}",
                report
                    .violations
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        insta::assert_snapshot!(*name, transcript);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn same_seed_same_transcript() {
    for name in [
        "dinner",
        "relay_outage",
        "agent_crash",
        "lossy_network",
        "device_swap",
        "wake_up",
        "lost_device",
    ] {
        let (_, a) = run(name, 7);
        let (_, b) = run(name, 7);
        assert_eq!(a, b, "{name} is not deterministic");
        let (_, c) = run(name, 8);
        if name == "lossy_network" {
            assert_ne!(a, c, "the seed changes nothing in {name}");
        }
    }
}

#[test]
fn first_contact_and_established_relationship_match_section_11_2() {
    let (r, _) = run("dinner", 1);
    assert_eq!(
        r.first_resolution,
        vec![(0, 4, 1)],
        "first contact: 4 packets, 1 prompt"
    );
    let (r, _) = run("established", 1);
    assert_eq!(
        r.first_resolution,
        vec![(0, 2, 0)],
        "established: 1 round trip, no prompt"
    );
}

#[test]
fn html_page_is_self_contained() {
    let spec = scenario::load("dinner").unwrap();
    let (r, _, lines) = Sim::new(spec.clone(), 1).run();
    let page = a2acp_sim::html::page(&spec, 1, &lines, &r);
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("<svg") && page.contains("context_request"));
    assert!(
        !page.contains("<script") && !page.contains("http://")
            || page.contains("http://www.w3.org/2000/svg")
    );
}

#[test]
fn html_page_draws_a_lane_per_group_member() {
    let spec = scenario::load("game_night").unwrap();
    let (r, _, lines) = Sim::new(spec.clone(), 1).run();
    let page = a2acp_sim::html::page(&spec, 1, &lines, &r);
    for who in ["alice", "bob", "charlie", "diana", "relay"] {
        assert!(
            page.contains(&format!(">{who}</text>")),
            "no lane for {who}"
        );
    }
    // Each leg's packets go from the coordinator's lane to each participant's.
    for who in ["bob", "charlie", "diana"] {
        assert!(
            lines.iter().any(|l| l.who == "alice"
                && matches!(&l.tag, a2acp_sim::transcript::Tag::Sent { peer, kind, .. }
                    if peer == who && kind == "resolution")),
            "no resolution to {who}"
        );
    }
}

#[test]
fn group_metrics_show_the_game_night_flows() {
    // Friday suits everyone: one proposal to all four, no flexibility request.
    let (r, _) = run("game_night", 1);
    let g = &r.groups[0];
    assert_eq!((g.size, g.flexibility_requests), (4, 0));
    assert_eq!(g.proposals, vec![4]);
    assert!(g.reached);
    // Without Diana's Friday, Charlie alone is asked to give way, and does: all four.
    let (r, _) = run("game_night_binding", 1);
    let g = &r.groups[0];
    assert_eq!(g.flexibility_requests, 1);
    assert_eq!(g.proposals.last(), Some(&4));
    assert!(g.reached);
    // Charlie saw one prompt more than Bob: the flexibility request.
    assert_eq!(g.participant_prompts[1], g.participant_prompts[0] + 1);
    // Quorum 3 of 5: reached without Diana (declined) and Erin (silent).
    let (r, _) = run("group_quorum", 1);
    let g = &r.groups[0];
    assert_eq!(g.proposals, vec![3]);
    assert!(g.reached);
    // Every leg got its resolution within two round trips, three on the leg of a
    // binding participant asked to give way (a handover adds its own packets).
    for (name, _) in SHIPPED
        .iter()
        .filter(|(n, _)| n.starts_with("g") && *n != "group_transfer")
    {
        let (r, _) = run(name, 1);
        for g in &r.groups {
            let most = if g.flexibility_requests > 0 { 6 } else { 4 };
            for p in g.packets_to_resolution.iter().flatten() {
                assert!(*p <= most, "{name}: {p} packets before the resolution");
            }
        }
    }
}

#[test]
fn a_fork_puts_the_games_after_the_dinner_and_a_drift_asks_first() {
    let (r, t) = run("thread_fork", 1);
    assert!(r.passed());
    assert!(
        t.contains("proposal “Dinner on Friday 27 March 2026, 19:00–21:00")
            && t.contains("proposal “Game night on Friday 27 March 2026, 21:00–22:00"),
        "{t}"
    );
    let (r, t) = run("intent_update", 1);
    assert!(r.passed());
    // Alice's address leaves only after her answer to the prompt that shows it.
    let asked = t
        .find("address (helpful, suggested \"12 Oak Street, Reading\")")
        .unwrap();
    let sent = t.find("\"address\":\"12 Oak Street, Reading\"").unwrap();
    assert!(asked < sent);
}
