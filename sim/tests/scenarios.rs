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
    for name in ["dinner", "relay_outage", "agent_crash", "lossy_network"] {
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
