//! Lookups of remote addresses (`lookup agent:bob@b.example` from a local agent), answered
//! through the link to that domain's relay, which is authoritative for its domain
//! (docs/protocol.md "The federation link" §5).

use super::state::OutLink;
use crate::address::Address;
use crate::link::{ClientFrame, ErrorCode, RelayFrame};
use crate::time::Timestamp;

use super::super::{ConnId, Relay, RelayOutput};

impl Relay {
    /// A local agent looked up an address of another domain.
    pub(in crate::relay) fn remote_lookup(&mut self, now: Timestamp, conn: ConnId, who: Address) {
        let domain = who.domain().to_string();
        let Some(cfg) = self.config.federation.as_ref() else {
            return;
        };
        let max = usize::try_from(cfg.max_pending_lookups).unwrap_or(usize::MAX);
        if !cfg.allows(&domain) {
            self.send(
                conn,
                &RelayFrame::Key {
                    address: who,
                    key: None,
                    rotation: None,
                    recovery: None,
                },
            );
            return;
        }
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        if let Some(&key) = f.pins.get(&who) {
            self.send(
                conn,
                &RelayFrame::Key {
                    address: who,
                    key: Some(key),
                    rotation: None,
                    recovery: None,
                },
            );
            return;
        }
        let r = f.remote(&domain);
        // Lookups of connections gone meanwhile are dropped, so they do not count.
        let conns = &self.conns;
        r.lookups.retain(|_, w| {
            w.retain(|(c, _)| conns.contains_key(c));
            !w.is_empty()
        });
        let left = &r.lookups;
        r.lookups_sent.retain(|a| left.contains_key(a));
        if matches!(&r.discovery, super::state::Discovery::Failed { until, .. } if *until > now) {
            self.send(
                conn,
                &RelayFrame::Key {
                    address: who,
                    key: None,
                    rotation: None,
                    recovery: None,
                },
            );
            return;
        }
        let waiting: usize = r.lookups.values().map(Vec::len).sum();
        if waiting >= max {
            self.refuse(
                conn,
                ErrorCode::RateLimited,
                format!("too many lookups waiting for {domain}"),
                None,
            );
            return;
        }
        r.lookups.entry(who).or_default().push((conn, now));
        if matches!(r.link, OutLink::Open { up: true, .. }) {
            self.send_lookups(&domain);
        } else {
            self.ensure_link(now, &domain);
        }
    }

    /// Sends the lookups waiting for `domain`'s link (once each).
    pub(super) fn send_lookups(&mut self, domain: &str) {
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(domain);
        let OutLink::Open { conn, up: true, .. } = r.link else {
            return;
        };
        let todo: Vec<Address> = r
            .lookups
            .keys()
            .filter(|a| !r.lookups_sent.contains(*a))
            .cloned()
            .collect();
        for a in todo {
            r.lookups_sent.insert(a.clone());
            let bytes = ClientFrame::Lookup { address: a }.to_bytes();
            self.out.push_back(RelayOutput::Send { conn, bytes });
        }
    }

    /// `key` on a link this relay dialed: the answer of its domain's relay, which is
    /// authoritative for it (pinned).
    pub(super) fn on_link_key(
        &mut self,
        now: Timestamp,
        domain: &str,
        address: Address,
        key: Option<[u8; 32]>,
        (rotation, recovery): (
            Option<Box<crate::rotation::RotationStatement>>,
            Option<Box<crate::recovery::RecoveryProof>>,
        ),
    ) {
        if address.domain() != domain {
            self.fed_lie(
                now,
                domain,
                format!("a key for {address}, not on its domain"),
            );
            return;
        }
        if let Some(k) = key {
            let pinned = self
                .fed
                .as_ref()
                .and_then(|f| f.pins.get(&address))
                .copied();
            // A changed key is a lie unless a rotation statement moves the pinned key to it,
            // or a recovery whose chain starts from the pinned key (SPEC-NOTES "Recovery").
            let rotated = |p: &[u8; 32]| {
                rotation
                    .as_ref()
                    .is_some_and(|r| r.new_key == k && r.verify_from(&address, p).is_some())
                    || recovery.as_ref().is_some_and(|r| {
                        r.statement.new_key == k && r.verify_from(&address, p).is_some()
                    })
            };
            if pinned.is_some_and(|p| p != k && !rotated(&p)) {
                self.fed_lie(now, domain, format!("a changed key for {address}"));
                return;
            }
            self.pin(&address, k);
            self.forget_remote_senders();
        }
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(domain);
        r.lookups_sent.remove(&address);
        let waiting = r.lookups.remove(&address).unwrap_or_default();
        for (conn, _) in waiting {
            if self.conns.contains_key(&conn) {
                self.send(
                    conn,
                    &RelayFrame::Key {
                        address: address.clone(),
                        key,
                        rotation: rotation.clone(),
                        recovery: recovery.clone(),
                    },
                );
            }
        }
    }

    /// Answers every lookup waiting for `domain` (`before`: only those waiting since
    /// before it) without a key: its relay cannot be reached.
    pub(super) fn answer_lookups(
        &mut self,
        _now: Timestamp,
        domain: &str,
        before: Option<Timestamp>,
    ) {
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(domain);
        let mut answers = Vec::new();
        r.lookups.retain(|a, waiting| {
            waiting.retain(|&(conn, since)| {
                let due = before.is_none_or(|b| since < b);
                if due {
                    answers.push((conn, a.clone()));
                }
                !due
            });
            !waiting.is_empty()
        });
        let left: std::collections::BTreeSet<Address> = r.lookups.keys().cloned().collect();
        r.lookups_sent.retain(|a| left.contains(a));
        for (conn, address) in answers {
            if self.conns.contains_key(&conn) {
                self.send(
                    conn,
                    &RelayFrame::Key {
                        address,
                        key: None,
                        rotation: None,
                        recovery: None,
                    },
                );
            }
        }
    }
}
