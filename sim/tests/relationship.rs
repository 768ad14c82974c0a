//! §11.2 in the simulator: relationship memory makes the established dinner one round
//! trip with no consent prompt, where the first contact took four packets and one prompt.
//! The full figure is `a2acp-sim relationship --seeds 0..1000` (see the closing notes);
//! here a slice of it, so that a regression fails CI.

use a2acp_sim::relationship::{measure, world};
use a2acp_sim::world::Sim;

#[test]
fn the_fourteenth_dinner_takes_one_round_trip_and_no_prompt() {
    let seeds = 0..24;
    let f = measure(seeds.clone(), 14);
    let text = f.render(&seeds, 14);
    assert!(f.all_met(), "{text}");
    // The first contact really asked: memory is what the later dinners lack it for.
    assert!(
        f.per_dinner[0].iter().all(|&(p, q)| p == 4 && q == 1),
        "{text}"
    );
}

#[test]
fn a_relationship_world_is_a_function_of_its_seed() {
    let run = || {
        let mut spec = world(7, 3);
        spec.transcript = true;
        Sim::new(spec, 7).run().1
    };
    let a = run();
    assert!(!a.is_empty());
    assert_eq!(a, run());
}
