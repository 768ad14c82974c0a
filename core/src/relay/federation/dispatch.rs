//! Frames on relay links (both sides), the federation timers and figures.

use std::collections::BTreeMap;

use super::reputation::Observation;
use super::state::{Discovery, LinkPhase, OutLink};
use super::{DomainStats, FederationEvent};
use crate::link::{ClientFrame, ErrorCode, RelayFrame};
use crate::time::Timestamp;

use super::super::{ConnId, FrameError, ParsedFrame, Phase, Relay, Verified};

impl Relay {
    /// Whether `conn` is a link this relay dialed (its frames are the other relay's).
    pub(in crate::relay) fn is_dialed(&self, conn: ConnId) -> bool {
        self.fed.is_some()
            && self
                .conns
                .get(&conn)
                .is_some_and(|c| matches!(&c.phase, Phase::Link(l) if l.dialed()))
    }

    /// A frame on a link this relay dialed.
    pub(in crate::relay) fn on_dialed_bytes(&mut self, now: Timestamp, conn: ConnId, bytes: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if now > c.last_seen {
            c.last_seen = now;
        }
        let Phase::Link(phase) = c.phase.clone() else {
            return;
        };
        self.reschedule(conn);
        let domain = phase.domain().to_string();
        let (rate, burst) = self
            .config
            .federation
            .as_ref()
            .map_or((1, 1), |f| (f.link_rate_per_sec, f.link_rate_burst.max(1)));
        let max = self.config.max_frame_bytes;
        let paid = self
            .conns
            .get_mut(&conn)
            .is_some_and(|c| c.budget.try_take(now, rate, burst));
        let frame = if bytes.len() > max {
            Err(format!(
                "frame of {} bytes exceeds the limit of {max}",
                bytes.len()
            ))
        } else {
            RelayFrame::from_bytes(bytes).map_err(|e| e.to_string())
        };
        let frame = match (paid, frame) {
            (true, Ok(f)) => f,
            (paid, res) => {
                let why = match res {
                    Err(e) if paid => e,
                    _ => "frames beyond the link's budget".to_string(),
                };
                self.fed_observe_domain(now, &domain, Observation::Malformed);
                self.link_refusal(now, conn, &domain, ErrorCode::Malformed, why);
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.strikes = c.strikes.saturating_add(1);
                }
                self.settle_link_strikes(now, conn, &domain);
                return;
            }
        };
        match (phase, frame) {
            (_, RelayFrame::Ping { n }) => {
                let bytes = ClientFrame::Pong { n }.to_bytes();
                self.out
                    .push_back(super::super::RelayOutput::Send { conn, bytes });
            }
            (_, RelayFrame::Pong { .. }) => {}
            (
                LinkPhase::Dialing { nonce: None, .. },
                RelayFrame::Challenge {
                    nonce, domain: d, ..
                },
            ) => self.on_link_challenge(now, conn, &domain, nonce, &d),
            (
                LinkPhase::Dialing {
                    nonce: Some(mine), ..
                },
                RelayFrame::LinkOk {
                    domain: d,
                    key,
                    ts,
                    sig,
                },
            ) => self.on_link_ok(now, conn, &domain, mine, (d, key, ts, sig)),
            (LinkPhase::Dialing { .. }, RelayFrame::Error { code, message, .. }) => {
                self.close_link(now, conn, format!("refused ({}): {message}", code.as_str()));
            }
            (LinkPhase::Out { .. }, RelayFrame::Pushed { n }) => self.on_pushed(now, &domain, n),
            (LinkPhase::Out { .. }, RelayFrame::Deferred { n, code, .. }) => {
                self.on_deferred(now, &domain, n, code)
            }
            (LinkPhase::Out { .. }, RelayFrame::Rejected { n, code, message }) => {
                self.on_rejected(now, &domain, n, code, message)
            }
            (
                LinkPhase::Out { .. },
                RelayFrame::Key {
                    address,
                    key,
                    rotation,
                    recovery,
                },
            ) => self.on_link_key(now, &domain, address, key, (rotation, recovery)),
            (LinkPhase::Out { .. }, RelayFrame::Error { code, message, .. }) => {
                // The other relay refused something of this link (its budget, say): logged.
                if self.fed_log_allowed(now, &domain) {
                    let suppressed = self.take_suppressed(&domain);
                    self.fed_event(FederationEvent::LinkRefused {
                        domain: Some(domain.clone()),
                        conn,
                        code,
                        message,
                        suppressed,
                    });
                }
            }
            (_, other) => {
                let t = serde_json::to_value(&other)
                    .ok()
                    .and_then(|v| v.get("t").and_then(|t| t.as_str().map(str::to_string)))
                    .unwrap_or_default();
                self.fed_observe_domain(now, &domain, Observation::Malformed);
                self.link_refusal(
                    now,
                    conn,
                    &domain,
                    ErrorCode::Malformed,
                    format!("unexpected `{t}` on the link"),
                );
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.strikes = c.strikes.saturating_add(1);
                }
                self.settle_link_strikes(now, conn, &domain);
            }
        }
    }

    /// A frame on a link accepted from another relay (`Verifying` or `In`), paid for.
    pub(in crate::relay) fn process_link_frame(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        phase: LinkPhase,
        parsed: Result<ParsedFrame, FrameError>,
        verified: Verified,
    ) {
        let domain = phase.domain().to_string();
        let ParsedFrame { frame, env_json } = match parsed {
            Ok(p) => p,
            Err(e) => {
                self.fed_observe_domain(now, &domain, Observation::Malformed);
                self.refuse(conn, e.code, e.message, None);
                return;
            }
        };
        match (phase, frame) {
            (_, ClientFrame::Ping { n }) => self.send(conn, &RelayFrame::Pong { n }),
            (_, ClientFrame::Pong { .. }) => {}
            (LinkPhase::In { .. }, ClientFrame::Push { n, low, env }) => {
                self.on_push(now, conn, &domain, (n, low), (env, env_json), verified)
            }
            (LinkPhase::In { .. }, ClientFrame::Lookup { address }) => {
                self.on_link_lookup(now, conn, &domain, address)
            }
            (LinkPhase::Verifying { .. }, _) => self.refuse(
                conn,
                ErrorCode::NotAuthenticated,
                "the link is not authenticated yet".into(),
                None,
            ),
            (_, _) => {
                self.fed_observe_domain(now, &domain, Observation::Malformed);
                self.refuse(
                    conn,
                    ErrorCode::Malformed,
                    "not a frame of the relay link".into(),
                    None,
                );
            }
        }
    }

    /// A refusal sent on an accepted link ([`Relay::refuse`]): counted, logged at a bounded
    /// rate instead of [`super::super::RelayEvent::Refused`].
    pub(in crate::relay) fn link_refused(
        &mut self,
        conn: ConnId,
        domain: &str,
        code: ErrorCode,
        message: String,
    ) {
        let now = self.fed.as_ref().map_or(Timestamp::ZERO, |f| f.now);
        if let Some(f) = self.fed.as_mut() {
            let r = f.remote(domain);
            r.counts.link_refusals = r.counts.link_refusals.saturating_add(1);
        }
        // A frame beyond the link's budget (refused `rate_limited`, then closing it) is
        // the domain's doing as garbage is (SPEC-NOTES "Federation: reputation").
        let over_budget = self.conns.get(&conn).is_some_and(|c| c.over_budget);
        if over_budget && matches!(code, ErrorCode::RateLimited | ErrorCode::TooManyRefusals) {
            self.fed_observe_domain(now, domain, Observation::Malformed);
        }
        if self.fed_log_allowed(now, domain) {
            let suppressed = self.take_suppressed(domain);
            self.fed_event(FederationEvent::LinkRefused {
                domain: Some(domain.to_string()),
                conn,
                code,
                message,
                suppressed,
            });
        }
    }

    /// A refusal on a dialed link: counted, logged at a bounded rate (nothing is sent
    /// back: the other relay would only refuse an `error` frame in turn).
    fn link_refusal(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        domain: &str,
        code: ErrorCode,
        message: String,
    ) {
        if let Some(f) = self.fed.as_mut() {
            let r = f.remote(domain);
            r.counts.link_refusals = r.counts.link_refusals.saturating_add(1);
        }
        if self.fed_log_allowed(now, domain) {
            let suppressed = self.take_suppressed(domain);
            self.fed_event(FederationEvent::LinkRefused {
                domain: Some(domain.to_string()),
                conn,
                code,
                message,
                suppressed,
            });
        }
    }

    fn take_suppressed(&mut self, domain: &str) -> u64 {
        self.fed
            .as_mut()
            .map_or(0, |f| std::mem::take(&mut f.remote(domain).suppressed))
    }

    /// Takes a dialed link's strikes from its allowance; closes it when exhausted.
    fn settle_link_strikes(&mut self, now: Timestamp, conn: ConnId, domain: &str) {
        let (rate, burst) = (
            self.config.refusals_per_sec,
            self.config.refusal_burst.max(1),
        );
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let strikes = std::mem::take(&mut c.strikes);
        for _ in 0..strikes {
            if !c.allowance.try_take(now, rate, burst) {
                let _ = domain;
                self.close(conn, ErrorCode::TooManyRefusals);
                return;
            }
        }
    }

    /// The earliest federation deadline: discovery and dial timeouts, link retries,
    /// deferred pushes' retries, expiries, waiting lookups.
    pub(in crate::relay) fn fed_timeout(&self) -> Option<Timestamp> {
        let cfg = self.config.federation.as_ref()?;
        let f = self.fed.as_ref()?;
        let mut t: Option<Timestamp> = None;
        let mut at = |x: Timestamp| t = Some(t.map_or(x, |y| y.min(x)));
        for r in f.remotes.values() {
            if let Discovery::Pending { since, .. } = r.discovery {
                at(since.add(cfg.connect_timeout));
            }
            match r.link {
                // After a restore (or a link lost with no retry due): at once — unless
                // there is nothing to dial yet: discovery's answer (its deadline is
                // above) or the end of a remembered failure wakes the relay then.
                OutLink::Down { retry_at, .. }
                    if !r.out.is_empty() || !r.lookups.is_empty() || r.announce =>
                {
                    let due = retry_at.unwrap_or(f.now);
                    match &r.discovery {
                        Discovery::Pending { known: None, .. } => {}
                        Discovery::Failed { until, .. } => at(due.max(*until)),
                        _ => at(due),
                    }
                }
                OutLink::Dialing { until, .. } => at(until),
                _ => {}
            }
            if let Some(i) = r.out.values().next() {
                at(i.accepted_at.add(cfg.expiry));
            }
            if let Some(&(x, _)) = r.retries.first() {
                at(x);
            }
            for w in r.lookups.values() {
                for &(_, since) in w {
                    at(since.add(cfg.expiry));
                }
            }
        }
        t
    }

    /// Federation timers due at `now`.
    pub(in crate::relay) fn on_fed_timeout(&mut self, now: Timestamp) {
        let Some(cfg) = self.config.federation.as_ref() else {
            return;
        };
        let (timeout, fttl, expiry) = (cfg.connect_timeout, cfg.discovery_failure_ttl, cfg.expiry);
        let domains: Vec<String> = self
            .fed
            .as_ref()
            .map(|f| f.remotes.keys().cloned().collect())
            .unwrap_or_default();
        for d in domains {
            let Some(r) = self.fed.as_mut().and_then(|f| f.remotes.get_mut(&d)) else {
                continue;
            };
            if let Discovery::Pending { since, ref known } = r.discovery {
                if since.add(timeout) <= now {
                    match known.clone() {
                        // An earlier answer stays in use while discovery is unreachable.
                        Some(relay) => {
                            r.discovery = Discovery::Known {
                                relay,
                                until: now.add(timeout),
                            }
                        }
                        None => {
                            let reason = "discovery did not answer in time".to_string();
                            r.discovery = Discovery::Failed {
                                reason: reason.clone(),
                                until: now.add(fttl),
                            };
                            self.discovery_failed(now, &d, &reason);
                        }
                    }
                }
            }
            let dial_due = self
                .fed
                .as_ref()
                .and_then(|f| f.remotes.get(&d))
                .is_some_and(|r| matches!(r.link, OutLink::Dialing { until, .. } if until <= now));
            if dial_due {
                self.link_failed(now, &d, None, "dial did not answer in time".into());
            }
            self.expire(now, &d);
            // Deferred pushes whose time has come go again.
            if let Some(r) = self.fed.as_mut().and_then(|f| f.remotes.get_mut(&d)) {
                while let Some(&(x, n)) = r.retries.first() {
                    if x > now {
                        break;
                    }
                    r.retries.pop_first();
                    if let Some(i) = r.out.get_mut(&n) {
                        i.retry_at = None;
                    }
                }
            }
            // A lookup waits for the link as a packet does (its relay is known, so the
            // address may well exist): answered without a key only past `expiry`.
            let waited = u64::try_from(expiry.as_millis()).unwrap_or(u64::MAX);
            let cutoff = Timestamp(now.as_millis().saturating_sub(waited).saturating_add(1));
            self.answer_lookups(now, &d, Some(cutoff));
            self.fed_pump(now, &d);
        }
    }

    /// Federation figures per remote domain.
    pub(in crate::relay) fn fed_stats(&self) -> BTreeMap<String, DomainStats> {
        let Some(f) = self.fed.as_ref() else {
            return BTreeMap::new();
        };
        let now = f.now;
        f.remotes
            .iter()
            .map(|(d, r)| {
                (
                    d.clone(),
                    DomainStats {
                        link_out: matches!(r.link, OutLink::Open { up: true, .. }),
                        links_in: r.links_in.len(),
                        queued: r.out.len(),
                        forwarded: r.counts.forwarded,
                        received: r.counts.received,
                        refused: r.counts.refused,
                        undeliverable: r.counts.undeliverable,
                        link_refusals: r.counts.link_refusals,
                        lies: r.counts.lies,
                        reputation: r.score.value(now),
                    },
                )
            })
            .collect()
    }
}
