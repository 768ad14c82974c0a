//! Which of the relay's URLs (its doors) the agent dials next: the rotation both
//! bindings' relay links follow ([`super::link_loop`]), kept apart from any socket so it
//! is one rule, tested alone.
//!
//! The doors are a ring in the configured order; the agent starts at the first. Every
//! failure — a TCP connect, TLS or WebSocket handshake that fails, or a connection that
//! ends — moves to the next door, dialled at once, until every door has failed once in
//! this round: then the link waits its backoff (the one backoff it has), and the next
//! round starts where this one did. A connection that lasted makes its door the one
//! that worked: the round starts over there (so its drop is that round's first failure,
//! and after a whole round the agent is back on the door that worked last). A connection
//! that ends at once (a node that accepts and closes) counts as a failure like any other,
//! so a ring of such doors still waits the backoff once per round.

use crate::config::RelayUrls;

/// What the link does after a failure ([`Doors::failed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextDial {
    /// Dial the next door now: some door of this round has not failed yet.
    Now,
    /// Every door failed in this round: wait the backoff, then dial (the round starts
    /// over from the door that worked last, or the first one).
    AfterBackoff,
}

/// The relay's doors and where the agent is among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doors {
    urls: RelayUrls,
    /// The door dialled, or connected, now.
    at: usize,
    /// Failures since the round began.
    failures: usize,
}

impl Doors {
    /// The doors of `urls`, starting at the first.
    pub fn new(urls: RelayUrls) -> Self {
        Doors {
            urls,
            at: 0,
            failures: 0,
        }
    }

    /// The URL to dial (or the one connected).
    pub fn current(&self) -> &str {
        &self.urls.urls()[self.at]
    }

    /// Its position in the list, from 0.
    pub fn index(&self) -> usize {
        self.at
    }

    /// How many doors there are.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Never: there is at least one door (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// The current door failed (dial, handshake, or the connection ended): moves to the
    /// next one, and says whether to dial it now or after the backoff.
    pub fn failed(&mut self) -> NextDial {
        self.at = (self.at + 1) % self.len();
        self.failures += 1;
        if self.failures >= self.len() {
            // `at` is back where the round began.
            self.failures = 0;
            NextDial::AfterBackoff
        } else {
            NextDial::Now
        }
    }

    /// The current door held a connection that lasted (or answered the agent, as a
    /// relay refusing a registration for a while does): the round starts over there.
    pub fn worked(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doors(n: usize) -> Doors {
        let urls: Vec<String> = (0..n).map(|i| format!("ws://door{i}:7447")).collect();
        Doors::new(RelayUrls::new(urls).unwrap())
    }

    /// The doors dialled for these outcomes (`true`: a connection that lasted, then
    /// dropped; `false`: a failed dial), and the waits, as `"0 1 | 2"`.
    fn dials(d: &mut Doors, outcomes: &[bool]) -> String {
        let mut out = vec![d.index().to_string()];
        for &lasted in outcomes {
            if lasted {
                d.worked();
            }
            if d.failed() == NextDial::AfterBackoff {
                out.push("|".into());
            }
            out.push(d.index().to_string());
        }
        out.join(" ")
    }

    #[test]
    fn door_one_url_waits_the_backoff_after_each_failure_as_before() {
        let mut d = doors(1);
        assert_eq!(d.current(), "ws://door0:7447");
        assert_eq!(
            dials(&mut d, &[false, false, true, false]),
            "0 | 0 | 0 | 0 | 0"
        );
    }

    #[test]
    fn door_rotation_tries_every_door_once_then_waits_and_starts_over() {
        let mut d = doors(3);
        // Nothing answers: 0 1 2, wait, 0 1 2, wait…
        assert_eq!(
            dials(&mut d, &[false, false, false, false, false, false]),
            "0 1 2 | 0 1 2 | 0"
        );
        // Door 0 down, door 1 answers: the agent stays there while it lasts.
        let mut d = doors(3);
        assert_eq!(dials(&mut d, &[false]), "0 1");
        assert_eq!(d.current(), "ws://door1:7447");
        // Its link drops: the next door at once, then the rest of the round, then the
        // wait; the round after the wait starts on the door that worked last (1).
        assert_eq!(dials(&mut d, &[true, false, false, false]), "1 2 0 | 1 2");
    }

    #[test]
    fn door_dropping_at_once_counts_as_a_failure_so_the_ring_still_waits() {
        // Two nodes that accept and close at once (no `worked`): one wait per round, no
        // loop without a pause.
        let mut d = doors(2);
        assert_eq!(
            dials(&mut d, &[false, false, false, false]),
            "0 1 | 0 1 | 0"
        );
    }

    #[test]
    fn door_that_worked_mid_round_starts_a_new_round() {
        let mut d = doors(3);
        // 0 fails, 1 holds then drops, 2 fails, 0 fails: the round of door 1 is over.
        assert_eq!(dials(&mut d, &[false, true, false, false]), "0 1 2 0 | 1");
        assert_eq!((d.index(), d.len(), d.is_empty()), (1, 3, false));
    }
}
