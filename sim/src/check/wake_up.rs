//! **wake_up**: the relay's wake-up for an offline agent (relay link §5b) goes only to an
//! endpoint an agent registered, carries nothing but that endpoint (no sender, no thread,
//! no size: the output holds the endpoint alone, and it must be the registered one byte
//! for byte, so the relay added nothing to it), and comes at most once per interval for
//! an endpoint.

use std::time::Duration;

use super::Checker;

impl Checker {
    /// The relay sent a wake-up to `endpoint` at `at`; `registered`: whether an agent's
    /// configuration names exactly this endpoint; `interval`: the relay's least time
    /// between two wake-ups of one agent.
    pub fn wake_up(&mut self, at: Duration, endpoint: &str, registered: bool, interval: Duration) {
        if !registered {
            self.fail(
                at,
                "wake_up",
                format!("a wake-up to {endpoint:?}, which no agent registered"),
            );
        }
        if let Some(last) = self.wake_ups.get(endpoint) {
            if at.saturating_sub(*last) < interval {
                self.fail(
                    at,
                    "wake_up",
                    format!(
                        "a second wake-up to {endpoint:?} {} after the first (interval {})",
                        crate::util::fmt_duration(at.saturating_sub(*last)),
                        crate::util::fmt_duration(interval)
                    ),
                );
            }
        }
        self.wake_ups.insert(endpoint.to_string(), at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_wake_up_within_the_interval_and_an_unknown_endpoint_fail() {
        let mut c = Checker::default();
        let min = Duration::from_secs(60);
        c.wake_up(Duration::from_secs(10), "https://push.example/a", true, min);
        c.wake_up(Duration::from_secs(70), "https://push.example/a", true, min);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        c.wake_up(Duration::from_secs(90), "https://push.example/a", true, min);
        c.wake_up(
            Duration::from_secs(95),
            "https://push.example/b",
            false,
            min,
        );
        let checks: Vec<_> = c.violations.iter().map(|v| v.detail.clone()).collect();
        assert_eq!(checks.len(), 2, "{checks:?}");
        assert!(checks[0].contains("second wake-up"));
        assert!(checks[1].contains("no agent registered"));
    }
}
