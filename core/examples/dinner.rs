//! Runs the spec's dinner example (§4–§9) in memory — two agents and a relay on a virtual
//! clock, with scripted users — and prints the transcript.
//!
//! `cargo run -p a2acp-core --example dinner`

use a2acp_core::harness::dinner;

fn main() {
    let (mut net, alice, bob) = dinner::net();
    dinner::start(&mut net, alice, bob);
    dinner::scripted_users(&mut net);
    print!("{}", net.render(None));
}
