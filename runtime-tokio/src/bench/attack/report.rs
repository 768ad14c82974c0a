//! How the relay fared under one attack: the report, its table row and its problems.

use std::time::Duration;

use crate::bench::BenchError;

use super::*;

/// `/healthz` probes every 200 ms while an attack runs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Probes {
    /// Answered `200`.
    pub ok: u32,
    /// Not answered (within 3 s) or not `200`.
    pub failed: u32,
    /// The slowest answer.
    pub max: Duration,
}

/// How the relay fared under one attack.
#[derive(Debug, Clone)]
pub struct AttackReport {
    /// The attack.
    pub attack: Attack,
    /// Before the attack (no connection open).
    pub before: Usage,
    /// Most descriptors and memory seen during the attack.
    pub peak: Usage,
    /// Cores of CPU the relay used during the attack.
    pub cpu_during: f64,
    /// Once the relay closed the attacker's connections by itself.
    pub after: Usage,
    /// How long after the attack stopped its descriptors were back near their baseline
    /// (`None`: not within the deadline plus 5 s).
    pub settled_in: Option<Duration>,
    /// `/healthz` during the attack.
    pub healthz: Probes,
    /// The honest negotiation with no attack.
    pub baseline: Negotiation,
    /// The honest negotiation (a new pair) during the attack.
    pub during: Result<Negotiation, BenchError>,
    /// The honest negotiation (a new pair) after it.
    pub after_negotiation: Result<Negotiation, BenchError>,
    /// Hostile connections made.
    pub attacker_connections: u64,
    /// Hostile connections kept going at once.
    pub connections: usize,
    /// WebSocket frames the attacker sent (frame-level attacks).
    pub frames_sent: u64,
    /// Registrations of the registration flood answered `auth_ok`.
    pub registered: u64,
    /// Registrations of the registration flood refused with `registration_limited`.
    pub registration_limited: u64,
    /// Bytes the relay logged during the attack and until it settled.
    pub log_bytes: u64,
    /// Seconds from the start of the attack to it settling.
    pub log_secs: f64,
    /// `/metrics` after the attack.
    pub metrics: Vec<(String, f64)>,
    /// Why `/metrics` could not be read after the attack.
    pub metrics_error: Option<BenchError>,
    /// The relay's `--upgrade-timeout` and `--auth-timeout`.
    pub deadline: Duration,
}

/// Log bytes allowed per address the registration flood registered (the relay's
/// `registered` line).
pub const REGISTERED_LOG_BYTES: u64 = 256;

/// Descriptors above the baseline still counted as "back to baseline" (a probe or an agent
/// closing).
pub const FD_SLACK: usize = 4;

impl AttackReport {
    /// What went wrong: `/healthz` unanswered during the attack, an honest negotiation
    /// that did not complete during or after it, descriptors not back near their
    /// baseline within the deadline plus 5 s, memory not back near it (within 16 MiB or
    /// half of it), the log growing faster than 4 KB/s (besides
    /// [`REGISTERED_LOG_BYTES`] per address registered), or the attack not met by its
    /// defence (no connection closed by the deadline, made room for, closed for its
    /// refusals, or refused as it should; no registration both admitted and then
    /// refused with `registration_limited`).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.healthz.failed > 0 || self.healthz.ok == 0 {
            p.push(format!("/healthz during the attack: {:?}", self.healthz));
        }
        if let Err(e) = &self.during {
            p.push(format!("during the attack: {e}"));
        }
        if let Err(e) = &self.after_negotiation {
            p.push(format!("after the attack: {e}"));
        }
        if self.settled_in.is_none() {
            p.push(format!(
                "descriptors not back to {} (+{FD_SLACK}): {}",
                self.before.fds, self.after.fds
            ));
        }
        let rss_slack = (16 * 1024).max(self.before.rss_kib / 2);
        if self.after.rss_kib > self.before.rss_kib + rss_slack {
            p.push(format!(
                "memory not back near its baseline: {} KiB before, {} KiB after",
                self.before.rss_kib, self.after.rss_kib
            ));
        }
        // The relay logs one line per new address (`registered`, about 130 bytes), which
        // the per-source registration limit bounds: not counted against the rate.
        let registrations = self.registered * REGISTERED_LOG_BYTES;
        let rate = self.log_bytes.saturating_sub(registrations) as f64 / self.log_secs.max(1.0);
        if rate > 4096.0 {
            p.push(format!(
                "the log grew {} bytes in {:.1} s",
                self.log_bytes, self.log_secs
            ));
        }
        if let Some(e) = &self.metrics_error {
            p.push(format!("after the attack: {e}"));
        }
        let m = |n: &str| metric(&self.metrics, n);
        let met = match self.attack {
            // Closed by the relay (and made again) rather than held.
            Attack::Garbage | Attack::HalfOpenFin => {
                self.attacker_connections > self.connections as u64
            }
            Attack::Slowloris | Attack::HalfOpen => {
                m("a2acp_relay_upgrade_timeouts_total") + m("a2acp_relay_connections_evicted_total")
                    > 0.0
            }
            Attack::IpFlood => m("a2acp_relay_connections_refused_per_ip_total") > 0.0,
            // Closed for their refusals (and made again).
            Attack::JunkFlood | Attack::PingFlood => {
                m("a2acp_relay_closed_for_refusals_total") > 0.0
                    && self.attacker_connections > self.connections as u64
            }
            Attack::RegistrationFlood => {
                self.registered > 0
                    && self.registration_limited > 0
                    && m("a2acp_relay_registrations_limited_total") > 0.0
            }
        };
        if !met {
            p.push(format!(
                "the attack was not met by its defence: {} connections, metrics {:?}",
                self.attacker_connections, self.metrics
            ));
        }
        p
    }

    /// The row of this report in the table ([`TABLE_HEADER`]).
    pub fn row(&self) -> String {
        let neg = |n: &Result<Negotiation, BenchError>| match n {
            Ok(n) => format!("{}+{}", n.online.as_millis(), n.dinner.as_millis()),
            Err(_) => "FAILED".into(),
        };
        let m = |n: &str| metric(&self.metrics, n) as u64;
        format!(
            "{:<18} {:>4} {:>4} {:>4}  {:>6} {:>6} {:>6}  {:>5.2} {:>5.2}  {:>6}  {:>3}/{:<3} {:>5}  {:>9} {:>9} {:>9}  {:>6} {:>6}  {:>5}/{:>5}/{:>5}/{:>5}/{:>3}  {:>8} {:>5}  {:>5}/{:<5}",
            self.attack.name(),
            self.before.fds,
            self.peak.fds,
            self.after.fds,
            self.before.rss_kib / 1024,
            self.peak.rss_kib / 1024,
            self.after.rss_kib / 1024,
            self.cpu_during,
            0.0f64.max(self.after.cpu_secs - self.before.cpu_secs),
            self.settled_in
                .map(|d| format!("{:.1}", d.as_secs_f64()))
                .unwrap_or_else(|| "never".into()),
            self.healthz.ok,
            self.healthz.failed,
            self.healthz.max.as_millis(),
            neg(&Ok(self.baseline)),
            neg(&self.during),
            neg(&self.after_negotiation),
            self.attacker_connections,
            self.log_bytes,
            m("a2acp_relay_upgrade_timeouts_total"),
            m("a2acp_relay_connections_evicted_total"),
            m("a2acp_relay_connections_refused_per_ip_total"),
            m("a2acp_relay_connections_refused_total_cap_total"),
            m("a2acp_relay_accept_errors_total"),
            self.frames_sent,
            m("a2acp_relay_closed_for_refusals_total"),
            self.registered,
            self.registration_limited,
        )
    }
}

/// The header of [`AttackReport::row`].
pub const TABLE_HEADER: &str = "attack             fds: before peak after  RSS MiB: before peak after  CPU cores during / CPU s total  settled s  healthz ok/failed max ms  honest online+dinner ms: baseline during after  hostile conns  log B  timeouts/evicted/refused per-IP/refused total/accept errors  frames sent  closed for refusals  registered/limited\n";
