//! Relay links: discovery answers, dialing, and the two halves of a link's mutual
//! authentication (docs/protocol.md "The federation link" §2).

use super::reputation::Observation;
use super::state::{Discovery, LinkPhase, OutLink};
use super::{DiscoveryError, FederationEvent, LinkSide, RemoteRelay};
use crate::crypto::PublicKey;
use crate::link::{link_signed_bytes, ErrorCode, RelayFrame, LINK_ACCEPT_LABEL, LINK_DIAL_LABEL};
use crate::rate_limit::TokenBucket;
use crate::time::Timestamp;

use super::super::{Conn, ConnId, Phase, Relay, RelayEvent, RelayOutput, Source};

impl Relay {
    /// A connection answered its challenge with `link_auth`: another relay dialed.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::relay) fn on_link_auth(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        domain: String,
        key: [u8; 32],
        ts: u64,
        sig: [u8; 64],
        nonce: [u8; 32],
    ) {
        let challenge = match self.conns.get_mut(&conn).map(|c| &mut c.phase) {
            Some(Phase::Unauth { challenge, .. }) => challenge.take(),
            _ => return,
        };
        let Some(fed_cfg) = self.config.federation.as_ref() else {
            self.refuse(
                conn,
                ErrorCode::DomainRefused,
                "this relay does not federate".into(),
                None,
            );
            self.close(conn, ErrorCode::DomainRefused);
            return;
        };
        let domain = domain.to_ascii_lowercase();
        let skew = u128::from(ts.abs_diff(now.as_millis()));
        let refusal: Option<(ErrorCode, &str, bool)> = if challenge.is_none() {
            Some((ErrorCode::AuthFailed, "no outstanding challenge", false))
        } else if skew > self.config.auth_max_skew.as_millis() {
            Some((
                ErrorCode::AuthFailed,
                "timestamp too far from the relay's clock",
                false,
            ))
        } else if domain.is_empty() || domain == self.config.domain {
            Some((ErrorCode::AuthFailed, "not another domain", true))
        } else if !fed_cfg.allows(&domain) {
            Some((
                ErrorCode::DomainRefused,
                "this relay does not federate with that domain",
                false,
            ))
        } else if self.fed_score_refused(now, &domain) {
            Some((
                ErrorCode::DomainRefused,
                "refused for its reputation: try again later",
                false,
            ))
        } else {
            None
        };
        let signed = challenge.map(|c| {
            link_signed_bytes(LINK_DIAL_LABEL, &c, &self.config.domain, ts, &domain, &key)
        });
        let refusal = refusal.or_else(|| {
            let ok = PublicKey::from_bytes(&key)
                .ok()
                .zip(signed)
                .is_some_and(|(k, m)| k.verify(&m, &sig).is_ok());
            (!ok).then_some((ErrorCode::AuthFailed, "signature does not verify", true))
        });
        if let Some((code, why, lie)) = refusal {
            if lie {
                self.fed_lie(now, &domain, format!("link authentication: {why}"));
            }
            self.refuse(conn, code, why.into(), None);
            self.close(conn, code);
            return;
        }
        let until = now.add(fed_cfg.connect_timeout);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.phase = Phase::Link(LinkPhase::Verifying {
                domain: domain.clone(),
                key,
                nonce,
                until,
            });
        }
        self.reschedule(conn);
        match self.fed_relay_of(&domain).cloned() {
            Some(relay) => self.finish_accept(now, conn, &relay),
            None => self.fed_discover(now, &domain),
        }
    }

    /// The dialer's key checked against the keys its domain publishes: the link is up, or
    /// refused.
    fn finish_accept(&mut self, now: Timestamp, conn: ConnId, relay: &RemoteRelay) {
        let Some(Phase::Link(LinkPhase::Verifying {
            domain, key, nonce, ..
        })) = self.conns.get(&conn).map(|c| c.phase.clone())
        else {
            return;
        };
        if !relay.keys.iter().any(|k| k.to_bytes() == key) {
            self.fed_lie(
                now,
                &domain,
                "link authentication: a key its domain does not publish".into(),
            );
            self.refuse(
                conn,
                ErrorCode::AuthFailed,
                "key not published by the domain".into(),
                None,
            );
            self.close(conn, ErrorCode::AuthFailed);
            return;
        }
        let Some(fed_cfg) = self.config.federation.as_ref() else {
            return;
        };
        let own_key = fed_cfg.key.public().to_bytes();
        let ts = now.as_millis();
        let msg = link_signed_bytes(
            LINK_ACCEPT_LABEL,
            &nonce,
            &domain,
            ts,
            &self.config.domain,
            &own_key,
        );
        let sig = fed_cfg.key.sign(&msg);
        let burst = fed_cfg.link_rate_burst.max(1);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.phase = Phase::Link(LinkPhase::In {
                domain: domain.clone(),
            });
            c.budget = TokenBucket::full(now, burst);
        }
        self.reschedule(conn);
        if let Some(f) = self.fed.as_mut() {
            f.remote(&domain).links_in.insert(conn);
        }
        self.send(
            conn,
            &RelayFrame::LinkOk {
                domain: self.config.domain.clone(),
                key: own_key,
                ts,
                sig,
            },
        );
        self.fed_event(FederationEvent::LinkUp {
            domain: domain.clone(),
            conn,
            side: LinkSide::Accepted,
        });
        self.redial(now, &domain);
    }

    /// `domain`'s relay reached this one: it is running, so what this relay holds for it
    /// goes now rather than at the end of the dial backoff (links are one-way: this relay
    /// pushes only on a link it dialed).
    fn redial(&mut self, now: Timestamp, domain: &str) {
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        if let OutLink::Down { retry_at, .. } = &mut f.remote(domain).link {
            if retry_at.is_some_and(|t| t > now) {
                *retry_at = None;
                self.fed_event(FederationEvent::Redial {
                    domain: domain.to_string(),
                });
            }
        }
        self.ensure_link(now, domain);
    }

    /// [`super::super::RelayInput::Discovered`].
    pub(in crate::relay) fn on_discovered(
        &mut self,
        now: Timestamp,
        domain: String,
        result: Result<RemoteRelay, DiscoveryError>,
    ) {
        let domain = domain.to_ascii_lowercase();
        let Some(cfg) = self.config.federation.as_ref() else {
            return;
        };
        let (ttl, fttl) = (cfg.discovery_ttl, cfg.discovery_failure_ttl);
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        if !f.remotes.contains_key(&domain) {
            return;
        }
        let r = f.remote(&domain);
        if !matches!(r.discovery, Discovery::Pending { .. }) {
            return;
        }
        match result {
            Ok(relay) => {
                r.discovery = Discovery::Known {
                    relay: relay.clone(),
                    until: now.add(ttl),
                };
                let verifying: Vec<ConnId> = self
                    .conns
                    .iter()
                    .filter(|(_, c)| {
                        matches!(&c.phase, Phase::Link(LinkPhase::Verifying { domain: d, .. }) if *d == domain)
                    })
                    .map(|(&id, _)| id)
                    .collect();
                for conn in verifying {
                    self.finish_accept(now, conn, &relay);
                }
                self.release_held(now, &domain);
                self.fed_pump(now, &domain);
            }
            Err(e) => {
                let reason = e.to_string();
                r.discovery = Discovery::Failed {
                    reason: reason.clone(),
                    until: now.add(fttl),
                };
                self.fed_event(FederationEvent::DiscoveryFailed {
                    domain: domain.clone(),
                    reason: reason.clone(),
                });
                self.discovery_failed(now, &domain, &reason);
            }
        }
    }

    /// Discovery of `domain` failed or timed out: links waiting for it are refused, held
    /// sends refused `unknown_recipient`, waiting lookups answered without a key.
    pub(super) fn discovery_failed(&mut self, now: Timestamp, domain: &str, reason: &str) {
        let verifying: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                matches!(&c.phase, Phase::Link(LinkPhase::Verifying { domain: d, .. }) if d == domain)
            })
            .map(|(&id, _)| id)
            .collect();
        for conn in verifying {
            self.refuse(
                conn,
                ErrorCode::AuthFailed,
                format!("the domain's keys could not be discovered: {reason}"),
                None,
            );
            self.close(conn, ErrorCode::AuthFailed);
        }
        let held = self
            .fed
            .as_mut()
            .map(|f| std::mem::take(&mut f.remote(domain).held))
            .unwrap_or_default();
        for h in held {
            if self.conns.contains_key(&h.conn) {
                self.refuse(
                    h.conn,
                    ErrorCode::UnknownRecipient,
                    format!("no relay found for {domain}: {reason}"),
                    Some(h.seq),
                );
            }
        }
        self.answer_lookups(now, domain, None);
    }

    /// Asks for `domain`'s relay unless already asking.
    pub(in crate::relay) fn fed_discover(&mut self, now: Timestamp, domain: &str) {
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(domain);
        let known = match &r.discovery {
            Discovery::Pending { .. } => return,
            Discovery::Known { relay, .. } => Some(relay.clone()),
            Discovery::Unknown | Discovery::Failed { .. } => None,
        };
        r.discovery = Discovery::Pending { since: now, known };
        self.out.push_back(RelayOutput::Discover {
            domain: domain.to_string(),
        });
        self.fed_event(FederationEvent::Discovering {
            domain: domain.to_string(),
        });
    }

    /// The relay to use for `domain` now, if known (asking again when stale).
    pub(in crate::relay) fn fed_relay_of(&self, domain: &str) -> Option<&RemoteRelay> {
        self.fed.as_ref()?.remotes.get(domain)?.discovery.relay()
    }

    /// [`super::super::RelayInput::Dialed`].
    pub(in crate::relay) fn on_dialed(
        &mut self,
        now: Timestamp,
        domain: String,
        conn: ConnId,
        source: Source,
    ) {
        let domain = domain.to_ascii_lowercase();
        let Some(cfg) = self.config.federation.as_ref() else {
            self.out.push_back(RelayOutput::Close {
                conn,
                code: ErrorCode::DomainRefused,
            });
            return;
        };
        let until = now.add(cfg.connect_timeout);
        let burst = cfg.link_rate_burst.max(1);
        let attempts = match self
            .fed
            .as_ref()
            .and_then(|f| f.remotes.get(&domain))
            .map(|r| &r.link)
        {
            Some(OutLink::Dialing { attempts, .. }) => *attempts,
            _ => {
                // Not asked for (or given up on): close it.
                self.out.push_back(RelayOutput::Close {
                    conn,
                    code: ErrorCode::Timeout,
                });
                return;
            }
        };
        self.remove_conn(conn);
        if self.conns.is_empty() {
            self.next_ping = Some(now.add(self.config.ping_interval));
        }
        let mut c = Conn {
            phase: Phase::Link(LinkPhase::Dialing {
                domain: domain.clone(),
                nonce: None,
                until,
            }),
            last_seen: now,
            deadline: now,
            source,
            budget: TokenBucket::full(now, burst),
            over_budget: false,
            allowance: TokenBucket::full(now, self.config.refusal_burst.max(1)),
            strikes: 0,
        };
        c.deadline = self.deadline_of(&c);
        self.deadlines.insert((c.deadline, conn));
        self.conns.insert(conn, c);
        if let Some(f) = self.fed.as_mut() {
            f.remote(&domain).link = OutLink::Open {
                conn,
                up: false,
                attempts,
                in_flight: Default::default(),
            };
        }
    }

    /// [`super::super::RelayInput::DialFailed`].
    pub(in crate::relay) fn on_dial_failed(
        &mut self,
        now: Timestamp,
        domain: String,
        reason: String,
    ) {
        let domain = domain.to_ascii_lowercase();
        let dialing = self
            .fed
            .as_ref()
            .and_then(|f| f.remotes.get(&domain))
            .is_some_and(|r| matches!(r.link, OutLink::Dialing { .. }));
        if dialing {
            self.link_failed(now, &domain, None, reason);
        }
    }

    /// The challenge of the relay this relay dialed: answer it with `link_auth`.
    pub(super) fn on_link_challenge(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        domain: &str,
        nonce: [u8; 32],
        their_domain: &str,
    ) {
        if their_domain.to_ascii_lowercase() != domain {
            self.fed_lie(
                now,
                domain,
                format!("its challenge names the domain `{their_domain}`"),
            );
            self.close_link(now, conn, "challenge for another domain".into());
            return;
        }
        let Some((cfg, f)) = self.config.federation.as_ref().zip(self.fed.as_mut()) else {
            return;
        };
        let mine = f.rng.bytes32();
        let key = cfg.key.public().to_bytes();
        let ts = now.as_millis();
        let msg = link_signed_bytes(
            LINK_DIAL_LABEL,
            &nonce,
            domain,
            ts,
            &self.config.domain,
            &key,
        );
        let sig = cfg.key.sign(&msg);
        if let Some(Phase::Link(LinkPhase::Dialing { nonce: n, .. })) =
            self.conns.get_mut(&conn).map(|c| &mut c.phase)
        {
            *n = Some(mine);
        }
        let frame = crate::link::ClientFrame::LinkAuth {
            domain: self.config.domain.clone(),
            key,
            ts,
            sig,
            nonce: mine,
        };
        self.out.push_back(RelayOutput::Send {
            conn,
            bytes: frame.to_bytes(),
        });
    }

    /// `link_ok` on a link this relay dialed: check it; the link is up.
    pub(super) fn on_link_ok(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        domain: &str,
        mine: [u8; 32],
        (their_domain, key, ts, sig): (String, [u8; 32], u64, [u8; 64]),
    ) {
        let published = self
            .fed_relay_of(domain)
            .is_some_and(|r| r.keys.iter().any(|k| k.to_bytes() == key));
        let msg = link_signed_bytes(
            LINK_ACCEPT_LABEL,
            &mine,
            &self.config.domain,
            ts,
            domain,
            &key,
        );
        let signed = PublicKey::from_bytes(&key).is_ok_and(|k| k.verify(&msg, &sig).is_ok());
        let skew = u128::from(ts.abs_diff(now.as_millis()));
        let why = if their_domain.to_ascii_lowercase() != domain {
            Some("link_ok names another domain")
        } else if !published {
            Some("a key its domain does not publish")
        } else if !signed {
            Some("link_ok signature does not verify")
        } else if skew > self.config.auth_max_skew.as_millis() {
            Some("link_ok timestamp too far from this relay's clock")
        } else {
            None
        };
        if let Some(why) = why {
            self.fed_lie(now, domain, why.into());
            self.close_link(now, conn, why.into());
            return;
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.phase = Phase::Link(LinkPhase::Out {
                domain: domain.to_string(),
            });
        }
        self.reschedule(conn);
        if let Some(f) = self.fed.as_mut() {
            let r = f.remote(domain);
            r.announce = false;
            if let OutLink::Open { up, attempts, .. } = &mut r.link {
                *up = true;
                *attempts = 0;
            }
        }
        self.fed_event(FederationEvent::LinkUp {
            domain: domain.to_string(),
            conn,
            side: LinkSide::Dialed,
        });
        self.send_lookups(domain);
        self.fed_pump(now, domain);
    }

    /// Closes a link this relay dialed (and schedules the next attempt).
    pub(super) fn close_link(&mut self, now: Timestamp, conn: ConnId, reason: String) {
        let domain = match self.conns.get(&conn).map(|c| &c.phase) {
            Some(Phase::Link(l)) => l.domain().to_string(),
            _ => return,
        };
        let _ = now;
        self.close(conn, ErrorCode::DomainRefused);
        self.fed_event(FederationEvent::LinkDown {
            domain,
            conn: Some(conn),
            reason,
        });
    }

    /// A link connection is gone (closed by either side): forget it; a dialed one is
    /// dialed again after a backoff.
    pub(in crate::relay) fn link_gone(
        &mut self,
        now: Timestamp,
        domain: &str,
        conn: ConnId,
        reason: String,
    ) {
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(domain);
        let was_in = r.links_in.remove(&conn);
        if matches!(r.link, OutLink::Open { conn: c, .. } if c == conn) {
            self.link_failed(now, domain, Some(conn), reason);
        } else {
            self.fed_event(FederationEvent::LinkDown {
                domain: domain.to_string(),
                conn: Some(conn),
                reason,
            });
        }
        if was_in {
            self.announce(now, domain);
        }
    }

    /// A link `domain`'s relay had opened to this one is gone (or this relay restarted):
    /// unless a link of this relay to it is up, dial it (after the backoff, if one runs),
    /// even with nothing to send, so that when the way between them is back its relay
    /// learns it at once from that link ([`Relay::redial`]).
    pub(super) fn announce(&mut self, now: Timestamp, domain: &str) {
        let refused = self.fed_score_refused(now, domain);
        let Some((cfg, f)) = self.config.federation.as_ref().zip(self.fed.as_mut()) else {
            return;
        };
        if refused || !cfg.allows(domain) {
            return;
        }
        let r = f.remote(domain);
        if matches!(r.link, OutLink::Open { up: true, .. }) {
            return;
        }
        r.announce = true;
        self.ensure_link(now, domain);
    }

    /// The outbound link to `domain` failed (or could not be opened): the next attempt
    /// after the backoff.
    pub(super) fn link_failed(
        &mut self,
        now: Timestamp,
        domain: &str,
        conn: Option<ConnId>,
        reason: String,
    ) {
        let Some((cfg, f)) = self.config.federation.as_ref().zip(self.fed.as_mut()) else {
            return;
        };
        let (base, mut max) = (cfg.retry_base, cfg.retry_max);
        if !f.remote(domain).links_in.is_empty() {
            // Its relay has a link up to this one: it runs; look for the way back often.
            max = max.min(cfg.reachable_retry_max);
        }
        let attempts = match &f.remote(domain).link {
            OutLink::Down { attempts, .. }
            | OutLink::Dialing { attempts, .. }
            | OutLink::Open { attempts, .. } => *attempts,
        };
        let delay = super::outbound::backoff(&mut f.rng, base, max, attempts);
        let at = now.add(delay);
        // Lookups asked on the lost link go again on the next one.
        f.remote(domain).lookups_sent.clear();
        f.remote(domain).link = OutLink::Down {
            retry_at: Some(at),
            attempts: attempts.saturating_add(1),
        };
        self.fed_event(FederationEvent::LinkDown {
            domain: domain.to_string(),
            conn,
            reason,
        });
        self.fed_event(FederationEvent::RetryScheduled {
            domain: domain.to_string(),
            at: at.as_millis(),
        });
    }

    /// Dials `domain` if there is something to send or ask and no link (or attempt) is
    /// under way, once its retry time has come; discovers it first if needed.
    pub(super) fn ensure_link(&mut self, now: Timestamp, domain: &str) {
        let Some(cfg) = self.config.federation.as_ref() else {
            return;
        };
        let timeout = cfg.connect_timeout;
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(domain);
        if r.out.is_empty() && r.lookups.is_empty() && !r.announce {
            return;
        }
        let attempts = match r.link {
            OutLink::Down { retry_at, attempts } if retry_at.is_none_or(|t| t <= now) => attempts,
            _ => return,
        };
        let stale = matches!(r.discovery, Discovery::Known { until, .. } if until <= now);
        let endpoint = r.discovery.relay().map(|x| x.endpoint.clone());
        if stale || endpoint.is_none() {
            self.fed_discover(now, domain);
        }
        let Some(endpoint) = endpoint else {
            return;
        };
        if let Some(f) = self.fed.as_mut() {
            f.remote(domain).link = OutLink::Dialing {
                until: now.add(timeout),
                attempts,
            };
        }
        self.out.push_back(RelayOutput::Dial {
            domain: domain.to_string(),
            endpoint,
        });
    }

    /// Emits a federation event.
    pub(in crate::relay) fn fed_event(&mut self, e: FederationEvent) {
        self.out
            .push_back(RelayOutput::Event(RelayEvent::Federation(e)));
    }

    /// Whether `domain` is refused for its reputation.
    pub(super) fn fed_score_refused(&self, now: Timestamp, domain: &str) -> bool {
        self.fed
            .as_ref()
            .and_then(|f| f.remotes.get(domain))
            .is_some_and(|r| r.score.refused(now))
    }

    /// A remote relay lied: counted, scored, logged at a bounded rate; at the refusal
    /// score its accepted links are closed.
    pub(in crate::relay) fn fed_lie(&mut self, now: Timestamp, domain: &str, what: String) {
        self.fed_observe_domain(now, domain, Observation::Lie);
        if let Some(f) = self.fed.as_mut() {
            let r = f.remote(domain);
            r.counts.lies = r.counts.lies.saturating_add(1);
        }
        if self.fed_log_allowed(now, domain) {
            self.fed_event(FederationEvent::Lie {
                domain: domain.to_string(),
                what,
            });
        }
    }

    /// Records a link-level observation of `domain`; at the refusal score its accepted
    /// links are closed.
    pub(super) fn fed_observe_domain(&mut self, now: Timestamp, domain: &str, o: Observation) {
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(domain);
        r.score.observe(now, o);
        if r.score.refused(now) && !r.links_in.is_empty() {
            let links: Vec<ConnId> = std::mem::take(&mut r.links_in).into_iter().collect();
            for conn in links {
                self.refuse(
                    conn,
                    ErrorCode::DomainRefused,
                    "refused for its reputation".into(),
                    None,
                );
                self.close(conn, ErrorCode::DomainRefused);
            }
        }
    }

    /// Whether a link refusal of `domain` may be logged now (otherwise it is counted as
    /// suppressed).
    pub(in crate::relay) fn fed_log_allowed(&mut self, now: Timestamp, domain: &str) -> bool {
        let Some((cfg, f)) = self.config.federation.as_ref().zip(self.fed.as_mut()) else {
            return false;
        };
        let (rate, burst) = (cfg.log_per_sec, cfg.log_burst.max(1));
        let r = f.remote(domain);
        let ok = r
            .log
            .get_or_insert_with(|| TokenBucket::full(now, burst))
            .try_take(now, rate, burst);
        if !ok {
            r.suppressed = r.suppressed.saturating_add(1);
        }
        ok
    }
}
