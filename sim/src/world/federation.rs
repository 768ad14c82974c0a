//! Several relays, one per domain (§16): discovery answered from the world's table of
//! relays, relay links dialed over the simulated network (the same latency, loss and
//! partition machinery as an agent's link), partitions between two relays, and the
//! transcript's words for federation events.
//!
//! A relay link is a [`super::network::Conn`] whose `link` names the dialing relay: the
//! dialer sees it as [`RelayInput::Dialed`], the other relay as an ordinary
//! [`RelayInput::Connected`] connection, both under the same connection number. "Up" is
//! dialer → accepting relay.

use std::time::Duration;

use a2acp_core::relay::federation::{DiscoveryError, FederationEvent, LinkSide, RemoteRelay};
use a2acp_core::relay::{ConnId, RelayInput, Source};

use super::events::Ev;
use super::network::Conn;
use super::Sim;
use crate::transcript::{short, Tag};
use crate::util::fmt_duration;

impl Sim {
    /// The relay of `domain`, if the world has one.
    pub(super) fn relay_of_domain(&self, domain: &str) -> Option<usize> {
        self.relays.iter().position(|r| {
            r.config.federation.is_some() && r.config.domain.eq_ignore_ascii_case(domain)
        })
    }

    /// Whether a partition between relays `a` and `b` is in force.
    pub(super) fn link_blocked(&self, a: usize, b: usize) -> bool {
        let Some(f) = &self.spec.federation else {
            return false;
        };
        self.active_relay_partitions.iter().any(|&p| {
            let (x, y) = f.partitions[p].relays;
            (x, y) == (a, b) || (x, y) == (b, a)
        })
    }

    /// One latency draw of the network between relays.
    pub(super) fn link_latency(&mut self) -> Duration {
        let ms = match &self.spec.federation {
            Some(f) => f.link.sample(&mut self.net),
            None => 0,
        };
        Duration::from_millis(ms)
    }

    /// Relay `r` asks for `domain`'s relay: the answer (the world's table, as a
    /// `.well-known` document would give it) comes one latency later.
    pub(super) fn discover(&mut self, r: usize, domain: String) {
        let l = self.link_latency();
        let at = self.now.add(l);
        let inc = self.relays[r].inc;
        self.push(
            at,
            Ev::Discovered {
                relay: r,
                inc,
                domain,
            },
        );
    }

    pub(super) fn discovered(&mut self, r: usize, inc: u32, domain: String) {
        if self.relays[r].inc != inc || self.relays[r].relay.is_none() {
            return;
        }
        let result = match self.relay_of_domain(&domain) {
            Some(j) => match self.relays[j].public_key() {
                Some(k) => Ok(RemoteRelay {
                    endpoint: format!("wss://{domain}/a2acp/link"),
                    keys: vec![k],
                }),
                None => Err(DiscoveryError::NoRelay(format!(
                    "{domain} does not federate"
                ))),
            },
            None => Err(DiscoveryError::NoRelay(format!("no relay for {domain}"))),
        };
        self.feed_relay(r, RelayInput::Discovered { domain, result });
    }

    /// Relay `r` dials `domain`'s relay: a connection opens one latency later; a relay
    /// that is down refuses it then; across a partition nothing answers (the dialing
    /// relay's own deadline gives up).
    pub(super) fn dial(&mut self, r: usize, domain: String) {
        let inc = self.relays[r].inc;
        let l = self.link_latency();
        let at = self.now.add(l);
        let j = self.relay_of_domain(&domain);
        if j.is_some_and(|j| self.link_blocked(r, j)) {
            return;
        }
        // No relay serves the domain, or it is down: refused one latency later.
        let Some(j) = j.filter(|&j| self.relays[j].relay.is_some()) else {
            self.push(
                at,
                Ev::DialFailed {
                    relay: r,
                    inc,
                    domain,
                },
            );
            return;
        };
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.stats.connections += 1;
        self.conns.insert(
            conn,
            Conn {
                node: usize::MAX,
                relay: j,
                link: Some(r),
                agent_open: true,
                relay_open: false,
                up_broken: false,
                down_broken: false,
                up_last: self.now,
                down_last: self.now,
            },
        );
        let acceptor_inc = self.relays[j].inc;
        self.push(
            at,
            Ev::LinkOpen {
                conn,
                dialer_inc: inc,
                acceptor_inc,
            },
        );
    }

    /// The connection of a dial reaches the other relay: it accepts it, then the dialer
    /// learns it is open — unless either crashed or a partition came meanwhile.
    pub(super) fn link_open(&mut self, conn: ConnId, dialer_inc: u32, acceptor_inc: u32) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (d, j) = (c.link.unwrap_or_default(), c.relay);
        let dialer_up = self.relays[d].inc == dialer_inc && self.relays[d].relay.is_some();
        let acceptor_up = self.relays[j].inc == acceptor_inc && self.relays[j].relay.is_some();
        let domain = self.relays[j].config.domain.clone();
        if !dialer_up || !acceptor_up || self.link_blocked(d, j) {
            self.conns.remove(&conn);
            if dialer_up && !acceptor_up {
                self.feed_relay(
                    d,
                    RelayInput::DialFailed {
                        domain,
                        reason: "connection refused".into(),
                    },
                );
            }
            return;
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.relay_open = true;
        }
        self.feed_relay(
            j,
            RelayInput::Connected {
                conn,
                source: Source((1u128 << 64) | d as u128),
            },
        );
        if !self.conns.get(&conn).is_some_and(|c| c.agent_open) {
            return;
        }
        self.feed_relay(
            d,
            RelayInput::Dialed {
                domain,
                conn,
                source: Source((1u128 << 64) | j as u128),
            },
        );
    }

    pub(super) fn dial_failed(&mut self, r: usize, inc: u32, domain: String) {
        if self.relays[r].inc != inc || self.relays[r].relay.is_none() {
            return;
        }
        self.feed_relay(
            r,
            RelayInput::DialFailed {
                domain,
                reason: "connection refused".into(),
            },
        );
    }

    /// A frame on a relay link reaches its dialer.
    pub(super) fn frame_to_dialer(&mut self, r: usize, inc: u32, conn: ConnId, bytes: Vec<u8>) {
        if self.relays[r].inc != inc || self.relays[r].relay.is_none() {
            return;
        }
        if !self
            .conns
            .get(&conn)
            .is_some_and(|c| c.agent_open && c.link == Some(r))
        {
            return;
        }
        self.feed_relay(
            r,
            RelayInput::Bytes {
                conn,
                bytes: &bytes,
            },
        );
    }

    /// The dialer of a relay link sees it closed.
    pub(super) fn dialer_sees_close(&mut self, r: usize, inc: u32, conn: ConnId) {
        if self.relays[r].inc != inc || self.relays[r].relay.is_none() {
            return;
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !c.agent_open || c.link != Some(r) {
            return;
        }
        c.agent_open = false;
        self.feed_relay(r, RelayInput::Disconnected { conn });
        self.gc_conn(conn);
    }

    /// The names of a relay link's two relays, dialer first.
    pub(super) fn link_names(&self, c: &Conn) -> (String, String) {
        let d = c.link.unwrap_or_default();
        (
            self.relays[d].name.clone(),
            self.relays[c.relay].name.clone(),
        )
    }

    pub(super) fn relay_partition(&mut self, idx: usize, on: bool) {
        let Some(p) = self.spec.federation.as_ref().map(|f| f.partitions[idx]) else {
            return;
        };
        let (a, b) = (
            self.relays[p.relays.0].name.clone(),
            self.relays[p.relays.1].name.clone(),
        );
        if on {
            self.active_relay_partitions.insert(idx);
            self.line(
                "net",
                '|',
                format!(
                    "partition between the relays of {a} and {b} for {}",
                    fmt_duration(p.when.length)
                ),
                Tag::Fault,
            );
        } else {
            self.active_relay_partitions.remove(&idx);
            self.line(
                "net",
                '|',
                format!("partition between the relays of {a} and {b} healed"),
                Tag::Fault,
            );
        }
    }
}

/// A federation event in the transcript's words (`None`: not shown).
pub(super) fn describe(e: &FederationEvent) -> Option<String> {
    Some(match e {
        FederationEvent::Discovering { domain } => format!("discovering the relay of {domain}"),
        FederationEvent::Federating { on } => {
            format!(
                "{} the domain's federator",
                if *on { "now" } else { "no longer" }
            )
        }
        FederationEvent::DiscoveryFailed { domain, reason } => {
            format!("no relay for {domain}: {reason}")
        }
        FederationEvent::LinkUp { domain, side, .. } => match side {
            LinkSide::Dialed => format!("relay link to {domain} up"),
            LinkSide::Accepted => format!("relay link from {domain} up"),
        },
        FederationEvent::LinkDown { domain, reason, .. } => {
            format!("relay link with {domain} down ({reason})")
        }
        FederationEvent::Redial { domain } => {
            format!("{domain} reached this relay: dialing it now")
        }
        // The relay's `Routed` event already says it was queued.
        FederationEvent::RetryScheduled { .. } | FederationEvent::Queued { .. } => return None,
        FederationEvent::Forwarded { to, id, .. } => {
            format!("handed #{id} for {} over", short(to.as_str()))
        }
        FederationEvent::Deferred { to, code, .. } => {
            format!(
                "push for {} deferred ({})",
                short(to.as_str()),
                code.as_str()
            )
        }
        FederationEvent::Undeliverable { to, id, code, .. } => format!(
            "#{id} for {} undeliverable ({})",
            short(to.as_str()),
            code.as_str()
        ),
        FederationEvent::Received {
            domain,
            from,
            to,
            id,
        } => format!(
            "received #{id} {} -> {} from {domain}",
            short(from.as_str()),
            short(to.as_str())
        ),
        FederationEvent::Duplicate { domain, n } => {
            format!("push {n} from {domain} already settled (a retry)")
        }
        FederationEvent::PushRefused {
            domain,
            code,
            final_,
            ..
        } => format!(
            "{} a push from {domain} ({})",
            if *final_ { "rejected" } else { "deferred" },
            code.as_str()
        ),
        FederationEvent::Lie { domain, what } => format!("{domain} lied: {what}"),
        FederationEvent::LinkRefused { code, message, .. } => {
            format!("refused on a relay link ({}): {message}", code.as_str())
        }
        FederationEvent::Pinned { address } => format!("pinned the key of {address}"),
        FederationEvent::NoticeDropped { to } => {
            format!("undeliverable notice to {} dropped", short(to.as_str()))
        }
    })
}
