//! The outbound side: a `send` to another domain accepted into that domain's durable
//! queue, pushed over the link in order, retried with backoff and jitter, expired with its
//! sender told (docs/protocol.md "The federation link" §3, §4).

use std::time::Duration;

use super::records::{notice_key, out_key, out_next_key, OutRecord};
use super::state::{HeldSend, Notice, OutItem, OutLink};
use super::FederationEvent;
use crate::address::Address;
use crate::crypto::envelope::Envelope;
use crate::link::{ErrorCode, RelayFrame};
use crate::persist::PersistOp;
use crate::rng::DetRng;
use crate::time::Timestamp;

use super::super::{ClusterOp, ConnId, Relay, RelayEvent, RelayOutput};

/// Link sequence numbers are reserved in blocks of this size (as delivery ids).
const N_BLOCK: u64 = 1024;

/// How a packet left a domain's outbound queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settled {
    /// The remote relay took it.
    Delivered,
    /// Refused for good or expired: its sender is told.
    Undeliverable,
}

/// The delay before retry `attempts` (0 for the first): `base × 2^attempts`, at most `max`,
/// drawn uniformly from its upper half.
pub(super) fn backoff(rng: &mut DetRng, base: Duration, max: Duration, attempts: u32) -> Duration {
    let base = u64::try_from(base.as_millis()).unwrap_or(u64::MAX).max(1);
    let max = u64::try_from(max.as_millis()).unwrap_or(u64::MAX).max(base);
    let full = base.saturating_mul(1u64 << attempts.min(32)).min(max);
    let half = full / 2;
    let jitter = rng.next_u64() % (full - half + 1);
    Duration::from_millis(half + jitter)
}

impl Relay {
    /// A `send` whose envelope (sender, key, signature checked) is for another domain.
    pub(in crate::relay) fn route_remote(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        from: Address,
        seq: u64,
        (env, env_json): (Envelope, Option<Box<str>>),
    ) {
        let domain = env.to.domain().to_string();
        let Some(cfg) = self.config.federation.as_ref() else {
            return;
        };
        if !cfg.allows(&domain) {
            self.refuse(
                conn,
                ErrorCode::UnknownRecipient,
                format!("this relay does not federate with {domain}"),
                Some(seq),
            );
            return;
        }
        let max_held = usize::try_from(cfg.max_pending_sends).unwrap_or(usize::MAX);
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(&domain);
        if let super::state::Discovery::Failed { reason, until } = &r.discovery {
            if *until > now {
                let msg = format!("no relay found for {domain}: {reason}");
                self.refuse(conn, ErrorCode::UnknownRecipient, msg, Some(seq));
                return;
            }
        }
        if r.discovery.relay().is_none() {
            if r.held.len() >= max_held {
                self.refuse(
                    conn,
                    ErrorCode::QueueFull,
                    format!("the relay of {domain} is being looked up: try again shortly"),
                    Some(seq),
                );
                return;
            }
            r.held.push(HeldSend {
                conn,
                from,
                seq,
                env,
                env_json,
            });
            self.fed_discover(now, &domain);
            return;
        }
        self.enqueue(now, conn, from, seq, (env, env_json));
    }

    /// Sends held for `domain`'s discovery go on, now that it answered.
    pub(super) fn release_held(&mut self, now: Timestamp, domain: &str) {
        let held = self
            .fed
            .as_mut()
            .map(|f| std::mem::take(&mut f.remote(domain).held))
            .unwrap_or_default();
        for h in held {
            // The sender's connection may be gone: its agent sends the packet again.
            if self.conns.get(&h.conn).and_then(|c| c.address()) == Some(&h.from) {
                self.enqueue(now, h.conn, h.from, h.seq, (h.env, h.env_json));
            }
        }
    }

    /// Accepts a packet into its domain's outbound queue: bounds, then the record, then
    /// `accepted`.
    fn enqueue(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        from: Address,
        seq: u64,
        (env, env_json): (Envelope, Option<Box<str>>),
    ) {
        if self.cluster.is_some() {
            // The cluster's store holds it until the domain's federator pushes it.
            self.cluster_enqueue(conn, seq, from, &env, env_json);
            return;
        }
        let domain = env.to.domain().to_string();
        let Some(cfg) = self.config.federation.as_ref() else {
            return;
        };
        let per_domain = usize::try_from(cfg.queue_per_domain).unwrap_or(usize::MAX);
        let limit = self.config.queue_per_thread;
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(&domain);
        let key = (env.to.clone(), env.thread);
        if r.out_threads.get(&key).copied().unwrap_or(0) >= limit {
            self.overflow(conn, seq, from, &env, limit);
            return;
        }
        if r.out.len() >= per_domain {
            self.refuse(
                conn,
                ErrorCode::QueueFull,
                format!("the queue for {domain} is full"),
                Some(seq),
            );
            return;
        }
        let Some(id) = self.take_delivery_id() else {
            self.refuse(
                conn,
                ErrorCode::QueueFull,
                "delivery ids exhausted".into(),
                Some(seq),
            );
            return;
        };
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(&domain);
        let n = r.next_n;
        r.next_n = n.saturating_add(1);
        let reserve = (n >= r.n_reserved).then(|| {
            r.n_reserved = n.saturating_add(N_BLOCK);
            r.n_reserved
        });
        let env_json =
            env_json.unwrap_or_else(|| serde_json::to_string(&env).unwrap_or_default().into());
        let item = OutItem {
            n,
            id,
            from: from.clone(),
            to: env.to.clone(),
            thread: env.thread,
            accepted_at: now,
            env: env_json,
            attempts: 0,
            retry_at: None,
        };
        let record = OutRecord::of(&item).to_bytes(&item.env);
        let t = r.out_threads.entry(key).or_insert(0);
        *t = t.saturating_add(1);
        r.out.insert(n, item);
        if let Some(reserved) = reserve {
            self.persist_put(out_next_key(&domain), &reserved);
        }
        self.out.push_back(RelayOutput::Persist(PersistOp::Put {
            key: out_key(&domain, n),
            value: record,
        }));
        self.counters.routed = self.counters.routed.saturating_add(1);
        self.send(conn, &RelayFrame::Accepted { seq, id });
        let to = env.to.clone();
        self.push_event(RelayEvent::Routed {
            from: from.clone(),
            to: to.clone(),
            id,
        });
        self.fed_event(FederationEvent::Queued { from, to, id, n });
        self.fed_pump(now, &domain);
    }

    /// Pushes what is queued for `domain` and not in flight or waiting for its retry, in
    /// link sequence order, up to `max_in_flight`; dials first when there is no link.
    pub(in crate::relay) fn fed_pump(&mut self, now: Timestamp, domain: &str) {
        let max = usize::try_from(self.config.max_in_flight)
            .unwrap_or(usize::MAX)
            .max(1);
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let Some(r) = f.remotes.get_mut(domain) else {
            return;
        };
        let low = r.out.keys().next().copied().unwrap_or(r.next_n);
        let OutLink::Open {
            conn,
            up: true,
            in_flight,
            ..
        } = &mut r.link
        else {
            self.ensure_link(now, domain);
            return;
        };
        let conn = *conn;
        let mut frames = Vec::new();
        for (&n, item) in &r.out {
            if in_flight.len() >= max {
                break;
            }
            if in_flight.contains(&n) || item.retry_at.is_some_and(|t| t > now) {
                continue;
            }
            in_flight.insert(n);
            frames.push(push_frame(n, low, &item.env));
        }
        for bytes in frames {
            self.out.push_back(RelayOutput::Send { conn, bytes });
        }
    }

    /// `pushed {n}`: the packet is settled at the remote relay; it leaves the queue.
    pub(super) fn on_pushed(&mut self, now: Timestamp, domain: &str, n: u64) {
        let Some(item) = self.take_out(domain, n, Settled::Delivered) else {
            return;
        };
        if let Some(r) = self.fed.as_mut().map(|f| f.remote(domain)) {
            r.counts.forwarded = r.counts.forwarded.saturating_add(1);
            // Later packets of its thread deferred meanwhile waited behind it: they go now.
            let behind: Vec<(Timestamp, u64)> = r
                .retries
                .iter()
                .filter(|&&(_, m)| {
                    m > n
                        && r.out
                            .get(&m)
                            .is_some_and(|i| i.to == item.to && i.thread == item.thread)
                })
                .copied()
                .collect();
            for (t, m) in behind {
                r.retries.remove(&(t, m));
                if let Some(i) = r.out.get_mut(&m) {
                    i.retry_at = None;
                }
            }
        }
        self.fed_event(FederationEvent::Forwarded {
            to: item.to,
            id: item.id,
            n,
        });
        self.fed_pump(now, domain);
    }

    /// `deferred {n}`: kept, retried after a backoff.
    pub(super) fn on_deferred(&mut self, now: Timestamp, domain: &str, n: u64, code: ErrorCode) {
        let Some((cfg, f)) = self.config.federation.as_ref().zip(self.fed.as_mut()) else {
            return;
        };
        let (base, max) = (cfg.retry_base, cfg.retry_max);
        let r = f.remote(domain);
        if let OutLink::Open { in_flight, .. } = &mut r.link {
            in_flight.remove(&n);
        }
        let Some(attempts) = r.out.get(&n).map(|i| i.attempts) else {
            return;
        };
        let delay = backoff(&mut f.rng, base, max, attempts);
        let r = f.remote(domain);
        let Some(item) = r.out.get_mut(&n) else {
            return;
        };
        item.attempts = item.attempts.saturating_add(1);
        let at = now.add(delay);
        if let Some(old) = item.retry_at.replace(at) {
            r.retries.remove(&(old, n));
        }
        r.retries.insert((at, n));
        let to = item.to.clone();
        self.fed_event(FederationEvent::Deferred { to, n, code });
    }

    /// `rejected {n}`: dropped; its sender is told.
    pub(super) fn on_rejected(
        &mut self,
        now: Timestamp,
        domain: &str,
        n: u64,
        code: ErrorCode,
        message: String,
    ) {
        if let Some(item) = self.take_out(domain, n, Settled::Undeliverable) {
            self.undeliverable(now, domain, item, code, message);
        }
        self.fed_pump(now, domain);
    }

    /// Removes packet `n` from `domain`'s queue (and its record; in a cluster, from the
    /// store, unless its sender is to be told first).
    pub(super) fn take_out(&mut self, domain: &str, n: u64, how: Settled) -> Option<OutItem> {
        let f = self.fed.as_mut()?;
        let r = f.remotes.get_mut(domain)?;
        if let OutLink::Open { in_flight, .. } = &mut r.link {
            in_flight.remove(&n);
        }
        let item = r.out.remove(&n)?;
        if let Some(t) = item.retry_at {
            r.retries.remove(&(t, n));
        }
        let key = (item.to.clone(), item.thread);
        if let Some(c) = r.out_threads.get_mut(&key) {
            *c = c.saturating_sub(1);
            if *c == 0 {
                r.out_threads.remove(&key);
            }
        }
        if self.cluster.is_some() {
            // An undeliverable packet is deleted once its notice is queued (`Notify`).
            if how == Settled::Delivered {
                self.cluster_op(ClusterOp::Remove { id: item.id });
            }
        } else {
            self.out.push_back(RelayOutput::Persist(PersistOp::Delete {
                key: out_key(domain, n),
            }));
        }
        Some(item)
    }

    /// Packets of `domain` past their expiry leave the queue; their senders are told.
    pub(super) fn expire(&mut self, now: Timestamp, domain: &str) {
        let Some(expiry) = self.config.federation.as_ref().map(|c| c.expiry) else {
            return;
        };
        loop {
            let first = self
                .fed
                .as_ref()
                .and_then(|f| f.remotes.get(domain))
                .and_then(|r| r.out.values().next())
                .filter(|i| i.accepted_at.add(expiry) <= now)
                .map(|i| i.n);
            let Some(n) = first else {
                break;
            };
            if let Some(item) = self.take_out(domain, n, Settled::Undeliverable) {
                let msg = format!(
                    "not handed to the relay of {domain} within {} s",
                    expiry.as_secs()
                );
                self.undeliverable(now, domain, item, ErrorCode::Expired, msg);
            }
        }
    }

    /// Tells a packet's sender it was not delivered: a durable notice, sent now if the
    /// sender is online and again on each authentication until acknowledged.
    pub(super) fn undeliverable(
        &mut self,
        _now: Timestamp,
        domain: &str,
        item: OutItem,
        code: ErrorCode,
        message: String,
    ) {
        let cap = usize::try_from(self.config.queue_per_recipient).unwrap_or(usize::MAX);
        if let Some(r) = self.fed.as_mut().map(|f| f.remote(domain)) {
            r.counts.undeliverable = r.counts.undeliverable.saturating_add(1);
        }
        self.fed_event(FederationEvent::Undeliverable {
            from: item.from.clone(),
            to: item.to.clone(),
            id: item.id,
            code,
        });
        if self.cluster.is_some() {
            self.cluster_notify(item, code, message);
            return;
        }
        let full = self
            .fed
            .as_ref()
            .and_then(|f| f.notices.get(&item.from))
            .is_some_and(|m| m.len() >= cap);
        if full || !self.registry.contains_key(&item.from) {
            self.fed_event(FederationEvent::NoticeDropped { to: item.from });
            return;
        }
        let Some(id) = self.take_delivery_id() else {
            return;
        };
        let notice = Notice {
            id,
            packet: item.id,
            to: item.to,
            thread: item.thread,
            code,
            message,
        };
        self.persist_put(notice_key(&item.from, id), &notice);
        if let Some(&conn) = self.online.get(&item.from) {
            self.send(conn, &notice_frame(&notice));
        }
        if let Some(f) = self.fed.as_mut() {
            f.notices.entry(item.from).or_default().insert(id, notice);
        }
    }

    /// Sends `address` every notice it has not acknowledged (on authentication).
    pub(in crate::relay) fn send_notices(&mut self, address: &Address) {
        let Some(&conn) = self.online.get(address) else {
            return;
        };
        let frames: Vec<RelayFrame> = self
            .fed
            .as_ref()
            .and_then(|f| f.notices.get(address))
            .map(|m| m.values().map(notice_frame).collect())
            .unwrap_or_default();
        for fr in frames {
            self.send(conn, &fr);
        }
    }

    /// `ack {id}` of a notice. Returns whether it was one.
    pub(in crate::relay) fn ack_notice(&mut self, address: &Address, id: u64) -> bool {
        let Some(f) = self.fed.as_mut() else {
            return false;
        };
        let Some(m) = f.notices.get_mut(address) else {
            return false;
        };
        if m.remove(&id).is_none() {
            return false;
        }
        if m.is_empty() {
            f.notices.remove(address);
        }
        self.out.push_back(RelayOutput::Persist(PersistOp::Delete {
            key: notice_key(address, id),
        }));
        true
    }
}

pub(super) fn notice_frame(n: &Notice) -> RelayFrame {
    RelayFrame::Undeliverable {
        id: n.id,
        packet: n.packet,
        to: n.to.clone(),
        thread: n.thread,
        code: n.code,
        message: n.message.clone(),
    }
}

/// `{"t":"push","n":<n>,"low":<low>,"env":<env>}`, the envelope's bytes spliced.
fn push_frame(n: u64, low: u64, env: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(env.len() + 64);
    out.extend_from_slice(b"{\"t\":\"push\",\"n\":");
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b",\"low\":");
    out.extend_from_slice(low.to_string().as_bytes());
    out.extend_from_slice(b",\"env\":");
    out.extend_from_slice(env.as_bytes());
    out.push(b'}');
    out
}
