//! Swarms of seeded worlds with every invariant checked.
//!
//! `swarm_ci` runs 500 seeds (override with `A2ACP_SWARM_SEEDS=N`) of the calm profile:
//! calm users and no frame reordering, agent crashes between steps, every other fault on.
//! One core issue still shows there and is matched precisely (see `known_core_issue`);
//! anything else fails the test. `swarm_full` is the full fault model on fewer seeds.

use a2acp_sim::check::Violation;
use a2acp_sim::swarm::{self, Params};
use a2acp_sim::world::Sim;

fn seeds(default: u64) -> u64 {
    std::env::var("A2ACP_SWARM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Core issue 6 (reported to the lead): a first packet waiting for the peer's key is
/// never sent when the key gets pinned from an incoming envelope instead of the lookup
/// answer (the lookup was lost with a connection reset). Signature: a one-sided thread
/// still INITIATED and waiting for its peer.
fn known_core_issue(v: &Violation) -> bool {
    let sides = v.detail.rsplit("healed: ").next().unwrap_or("");
    v.check == "liveness" && sides.ends_with(" INITIATED waiting Peer") && !sides.contains(", ")
}

fn run_swarm(p: Params, n: u64, tolerate: fn(&Violation) -> bool) {
    let mut failures = Vec::new();
    let mut known = 0;
    for seed in 0..n {
        let (r, _, _) = Sim::new(swarm::generate(seed, p), seed).run();
        let bad: Vec<&Violation> = r.violations.iter().filter(|v| !tolerate(v)).collect();
        known += r.violations.len() - bad.len();
        if !bad.is_empty() {
            failures.push(format!(
                "seed {seed}: {}\n  reproduce: {}",
                bad.iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
                swarm::reproduce_command(seed, p)
            ));
        }
    }
    if known > 0 {
        eprintln!(
            "{known} violation(s) of the known core issue (a first packet waiting for a key)"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn swarm_ci() {
    let p = Params {
        agents: 4,
        threads: 6,
        faults: true,
        long_offline: false,
        calm: true,
    };
    run_swarm(p, seeds(500), known_core_issue);
}

/// The full fault model. 60 seeds keep it well under a minute in the debug-profile CI
/// build; `A2ACP_SWARM_SEEDS=N` runs more. Seeds 70, 94, 179 and 210 (of 0..300) still
/// run for minutes (a thread's history grows until persisting it dominates), so wider
/// runs are done with the release binary (`a2acp-sim swarm`).
#[test]
fn swarm_full() {
    run_swarm(Params::default(), seeds(60), |_| false);
}

/// Full-fault seeds that found core bugs, kept as regression tests: 75 (a cancel that
/// arrived while a failed execution was being undone was ignored), 113 (an initiator
/// whose peer declined every field waited forever), 206 (a confirmation that arrived
/// before its resolution was dropped, so one side expired while the other executed),
/// 612, 619, 754 (the peer's stall notice marked the thread escalated, so later packets
/// were ignored and both sides waited), 713 (a key lookup lost in a crash was never asked
/// again, so a first packet never left),
/// 467 (a cancel of the next proposal, arrived during the undo of the failed one, was
/// dropped), 627 (a user who cancelled during execution was left waiting for the other
/// side's report), 810 and 817 (a cancel that reached an offline side after its
/// deadline: DECLINED against EXPIRED).
#[test]
fn swarm_full_regressions() {
    let p = Params::default();
    for seed in [
        75, 113, 206, 110, 115, 142, 246, 271, 70, 94, 179, 210, 612, 619, 754, 713, 467, 627, 810,
        817,
    ] {
        let (r, _, _) = Sim::new(swarm::generate(seed, p), seed).run();
        assert!(
            r.violations.is_empty(),
            "seed {seed}: {:?}\n  reproduce: {}",
            r.violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>(),
            swarm::reproduce_command(seed, p)
        );
    }
}
