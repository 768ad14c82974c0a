//! The inbound side: pushes from a linked relay checked, deduplicated by link sequence
//! number, pinned and queued for local recipients (docs/protocol.md "The federation link"
//! §4, §5).

use super::records::{in_key, pin_key, HeldPush, InRecord, PinRecord};
use super::reputation::Observation;
use super::state::Sender;
use super::FederationEvent;
use crate::address::Address;
use crate::crypto;
use crate::crypto::envelope::Envelope;
use crate::link::{ErrorCode, RelayFrame};
use crate::rate_limit::TokenBucket;
use crate::time::Timestamp;

use super::super::queue::Origin;
use super::super::{ConnId, Enqueue, Relay, RelayOutput, Verified};
use crate::persist::PersistOp;

/// What became of a push.
enum Decision {
    /// Queued for its recipient.
    Accepted,
    /// Not now (the same `n` is retried).
    Deferred(ErrorCode, String),
    /// Never.
    Rejected(ErrorCode, String),
    /// Being queued in the cluster's store: decided when it answers
    /// ([`Relay::settle_cluster_push`]).
    Pending,
}

impl Relay {
    /// `push {n, low, env}` on a link accepted from `domain`.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::relay) fn on_push(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        domain: &str,
        (n, low): (u64, u64),
        (env, env_json): (Envelope, Option<Box<str>>),
        verified: Verified,
    ) {
        let Some((cfg, f)) = self.config.federation.as_ref().zip(self.fed.as_mut()) else {
            return;
        };
        let (drate, dburst) = (cfg.domain_rate_per_sec, cfg.domain_rate_burst.max(1));
        let max_deferred = usize::try_from(cfg.max_deferred).unwrap_or(usize::MAX);
        let r = f.remote(domain);
        // What the dialer settled is forgotten.
        let before = r.deferred.len();
        r.deferred.retain(|&d| d >= low);
        r.deferred_at.retain(|&d, _| d >= low);
        let mut dirty = r.deferred.len() != before;
        let drate = r.score.scale(now, drate);
        let paid = r
            .bucket
            .get_or_insert_with(|| TokenBucket::full(now, dburst))
            .try_take(now, drate, dburst);
        let decided = n <= r.hw && !r.deferred.contains(&n);
        if !paid {
            // Not decided before: recorded as deferred like any other, so that a later
            // push accepted meanwhile neither marks this one decided (it would never be
            // queued) nor overtakes it in its thread.
            if !decided && (r.deferred.contains(&n) || r.deferred.len() < max_deferred) {
                dirty |= r.deferred.insert(n);
                r.deferred_at.insert(n, (env.to.clone(), env.thread));
                if n > r.hw {
                    r.hw = n;
                    dirty = true;
                }
            }
            if dirty {
                self.persist_in(domain);
            }
            self.send(
                conn,
                &RelayFrame::Deferred {
                    n,
                    code: ErrorCode::RateLimited,
                    message: format!("too many packets from {domain}: slow down"),
                },
            );
            return;
        }
        if decided {
            if dirty {
                self.persist_in(domain);
            }
            self.send(conn, &RelayFrame::Pushed { n });
            self.fed_event(FederationEvent::Duplicate {
                domain: domain.to_string(),
                n,
            });
            return;
        }
        let from = env.from.clone();
        let at = (env.to.clone(), env.thread);
        let decision = self.decide_push(now, (conn, domain, n), (env, env_json), verified);
        if matches!(decision, Decision::Pending) {
            if dirty {
                self.persist_in(domain);
            }
            return;
        }
        self.settle_push(conn, (domain, n), from, at, decision, dirty);
    }

    /// A push decided: `hw` and `deferred` updated and persisted, the answer sent.
    fn settle_push(
        &mut self,
        conn: ConnId,
        (domain, n): (&str, u64),
        from: Address,
        at: (Address, [u8; 16]),
        decision: Decision,
        mut dirty: bool,
    ) {
        let Some(cfg) = self.config.federation.as_ref() else {
            return;
        };
        let max_deferred = usize::try_from(cfg.max_deferred).unwrap_or(usize::MAX);
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(domain);
        let decision = match decision {
            Decision::Deferred(..)
                if !r.deferred.contains(&n) && r.deferred.len() >= max_deferred =>
            {
                Decision::Rejected(
                    ErrorCode::QueueFull,
                    format!("too many packets from {domain} waiting: refused"),
                )
            }
            d => d,
        };
        if n > r.hw {
            r.hw = n;
            dirty = true;
        }
        match &decision {
            Decision::Deferred(..) => {
                dirty |= r.deferred.insert(n);
                dirty |= r.deferred_at.insert(n, at).is_none();
            }
            Decision::Accepted | Decision::Rejected(..) => {
                dirty |= r.deferred.remove(&n);
                r.deferred_at.remove(&n);
            }
            Decision::Pending => return,
        }
        if !matches!(decision, Decision::Accepted) {
            r.counts.refused = r.counts.refused.saturating_add(1);
        }
        if dirty {
            self.persist_in(domain);
        }
        match decision {
            Decision::Accepted => self.send(conn, &RelayFrame::Pushed { n }),
            Decision::Deferred(code, message) => {
                self.send(conn, &RelayFrame::Deferred { n, code, message });
                self.fed_event(FederationEvent::PushRefused {
                    domain: domain.to_string(),
                    from,
                    code,
                    final_: false,
                });
            }
            Decision::Rejected(code, message) => {
                self.send(conn, &RelayFrame::Rejected { n, code, message });
                self.fed_event(FederationEvent::PushRefused {
                    domain: domain.to_string(),
                    from,
                    code,
                    final_: true,
                });
            }
            Decision::Pending => {}
        }
    }

    /// The cluster's store answered a push queued for a local recipient
    /// ([`Relay::cluster_enqueue_push`]): settle it.
    pub(in crate::relay) fn settle_cluster_push(
        &mut self,
        _now: Timestamp,
        conn: ConnId,
        (domain, n): (&str, u64),
        (from, to, thread): (Address, Address, [u8; 16]),
        result: Result<Enqueue, String>,
    ) {
        let decision = match result {
            Ok(Enqueue::Queued { id, duplicate }) => {
                if let Some(r) = self.fed.as_mut().map(|f| f.remote(domain)) {
                    r.counts.received = r.counts.received.saturating_add(1);
                }
                if !duplicate {
                    self.counters.routed = self.counters.routed.saturating_add(1);
                }
                self.fed_event(FederationEvent::Received {
                    domain: domain.to_string(),
                    from: from.clone(),
                    to: to.clone(),
                    id,
                });
                Decision::Accepted
            }
            Ok(Enqueue::Overflow) => {
                self.counters.overflows = self.counters.overflows.saturating_add(1);
                Decision::Deferred(
                    ErrorCode::Overflow,
                    format!("the queue of {to} for this thread is full"),
                )
            }
            Err(_) => Decision::Deferred(
                ErrorCode::Unavailable,
                "the relay cannot reach its cluster's store: push it again later".into(),
            ),
        };
        self.settle_push(conn, (domain, n), from, (to, thread), decision, false);
    }

    /// Persists `fed/in/<domain>`.
    fn persist_in(&mut self, domain: &str) {
        let Some(r) = self.fed.as_ref().and_then(|f| f.remotes.get(domain)) else {
            return;
        };
        let rec = InRecord {
            hw: r.hw,
            deferred: r.deferred.iter().copied().collect(),
            held: r
                .deferred_at
                .iter()
                .map(|(&n, (to, thread))| HeldPush {
                    n,
                    to: to.clone(),
                    thread: *thread,
                })
                .collect(),
        };
        self.persist_put(in_key(domain), &rec);
    }

    /// The checks of a push not decided before, in order (docs/protocol.md "The federation
    /// link" §4.2); an accepted one is queued (its record persisted).
    fn decide_push(
        &mut self,
        now: Timestamp,
        (conn, domain, n): (ConnId, &str, u64),
        (env, env_json): (Envelope, Option<Box<str>>),
        verified: Verified,
    ) -> Decision {
        let from = env.from.clone();
        if from.domain() != domain {
            self.fed_lie(
                now,
                domain,
                format!("a packet from {from}, not on its domain"),
            );
            return Decision::Rejected(
                ErrorCode::WrongSender,
                "sender is not on the linking relay's domain".into(),
            );
        }
        if env.v != crypto::ENVELOPE_VERSION {
            self.fed_observe_domain(now, domain, Observation::Malformed);
            return Decision::Rejected(
                ErrorCode::Malformed,
                format!("unsupported envelope version {}", env.v),
            );
        }
        let pinned = self.fed.as_ref().and_then(|f| f.pins.get(&from)).copied();
        // A key other than the pinned one is a lie unless the envelope carries the
        // rotation statements moving the pinned key to it: then the new key is pinned.
        let rotated = pinned.filter(|&k| k != env.from_key && env.rotation_path(&k).is_some());
        if rotated.is_none() && pinned.is_some_and(|k| k != env.from_key) {
            self.fed_lie(now, domain, format!("a changed key for {from}"));
            return Decision::Rejected(
                ErrorCode::WrongSender,
                format!("not the key pinned for {from}"),
            );
        }
        let sig_ok = verified == Verified::EnvelopeSignature
            || crypto::PublicKey::from_bytes(&env.from_key)
                .is_ok_and(|k| crypto::verify_envelope(&env, &k).is_ok());
        if !sig_ok {
            self.fed_lie(now, domain, format!("a bad signature from {from}"));
            return Decision::Rejected(
                ErrorCode::BadSignature,
                "envelope signature does not verify".into(),
            );
        }
        if rotated.is_some() {
            self.pin(&from, env.from_key);
        }
        self.forget_remote_senders();
        let Some((cfg, f)) = self.config.federation.as_ref().zip(self.fed.as_mut()) else {
            return Decision::Rejected(ErrorCode::DomainRefused, "federation is off".into());
        };
        let (srate, sburst) = (cfg.sender_rate_per_sec, cfg.sender_rate_burst.max(1));
        f.seen.touch(&from, now);
        let s = f.senders.entry(from.clone()).or_insert_with(|| Sender {
            bucket: TokenBucket::full(now, sburst),
            score: Default::default(),
        });
        if s.score.refused(now) {
            return Decision::Rejected(
                ErrorCode::RateLimited,
                format!("{from} is refused for its reputation"),
            );
        }
        let rate = s.score.scale(now, srate);
        if !s.bucket.try_take(now, rate, sburst) {
            s.score.observe(now, Observation::Spam);
            return Decision::Deferred(ErrorCode::RateLimited, format!("{from} sends too fast"));
        }
        let to = env.to.clone();
        if to.domain() != self.config.domain || !self.registry.contains_key(&to) {
            s.score.observe(now, Observation::Unknown);
            return Decision::Rejected(
                ErrorCode::UnknownRecipient,
                format!("{to} is not registered here"),
            );
        }
        // A thread keeps its order across a deferral: while an earlier push of this
        // recipient and thread is deferred, this one waits behind it (a single relay keeps
        // a connection's order; the way across domains keeps it too).
        let behind = self.fed.as_ref().is_some_and(|f| {
            f.remotes.get(domain).is_some_and(|r| {
                r.deferred_at
                    .range(..n)
                    .any(|(_, (t, th))| *t == to && *th == env.thread)
            })
        });
        if behind {
            return Decision::Deferred(
                ErrorCode::Overflow,
                format!("an earlier packet of {to} in this thread waits"),
            );
        }
        if self.cluster.is_some() {
            // Cluster mode: the store holds the recipient's queue and its per-thread cap.
            if let Some(f) = self.fed.as_mut() {
                if let Some(s) = f.senders.get_mut(&from) {
                    s.score.observe(now, Observation::WellFormed);
                }
                f.remote(domain).score.observe(now, Observation::WellFormed);
            }
            if pinned.is_none() {
                self.pin(&from, env.from_key);
            }
            self.forget_remote_senders();
            self.cluster_enqueue_push(conn, (domain, n), &env, env_json);
            return Decision::Pending;
        }
        if self.queues.thread_len(&to, &env.thread) >= self.config.queue_per_thread {
            self.counters.overflows = self.counters.overflows.saturating_add(1);
            return Decision::Deferred(
                ErrorCode::Overflow,
                format!("the queue of {to} for this thread is full"),
            );
        }
        let per_recipient = usize::try_from(self.config.queue_per_recipient).unwrap_or(usize::MAX);
        if self.queues.len_for(&to) >= per_recipient {
            return Decision::Deferred(ErrorCode::QueueFull, format!("the queue of {to} is full"));
        }
        let Some(id) = self.take_delivery_id() else {
            return Decision::Deferred(ErrorCode::QueueFull, "delivery ids exhausted".into());
        };
        if let Some(f) = self.fed.as_mut() {
            if let Some(s) = f.senders.get_mut(&from) {
                s.score.observe(now, Observation::WellFormed);
            }
            let r = f.remote(domain);
            r.score.observe(now, Observation::WellFormed);
            r.counts.received = r.counts.received.saturating_add(1);
        }
        if pinned.is_none() {
            self.pin(&from, env.from_key);
        }
        self.forget_remote_senders();
        let origin = Origin {
            domain: domain.to_string(),
            n,
        };
        self.queue_local(now, id, Some(origin), &env, env_json);
        self.pump(&to);
        self.fed_event(FederationEvent::Received {
            domain: domain.to_string(),
            from,
            to,
            id,
        });
        Decision::Accepted
    }

    /// Pins `address`'s key (persisted), as its domain's relay vouched for it.
    pub(super) fn pin(&mut self, address: &Address, key: [u8; 32]) {
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        if f.pins.insert(address.clone(), key) == Some(key) {
            return;
        }
        f.seen.touch(address, f.now);
        let rec = PinRecord {
            address: address.clone(),
            key,
        };
        self.persist_put(pin_key(address), &rec);
        self.fed_event(FederationEvent::Pinned {
            address: address.clone(),
        });
    }

    /// Forgets the least recently seen remote senders beyond
    /// [`super::FederationConfig::max_remote_senders`]: their rate bucket, reputation and
    /// pinned key (its record deleted).
    pub(super) fn forget_remote_senders(&mut self) {
        let Some((cfg, f)) = self.config.federation.as_ref().zip(self.fed.as_mut()) else {
            return;
        };
        let max = usize::try_from(cfg.max_remote_senders.max(1)).unwrap_or(usize::MAX);
        let mut gone = Vec::new();
        while f.seen.len() > max {
            let Some(a) = f.seen.pop_oldest() else {
                break;
            };
            f.senders.remove(&a);
            if f.pins.remove(&a).is_some() {
                gone.push(a);
            }
        }
        for a in gone {
            self.out
                .push_back(RelayOutput::Persist(PersistOp::Delete { key: pin_key(&a) }));
        }
    }

    /// `lookup` on a link accepted from `domain`: the key registered here, if any.
    pub(in crate::relay) fn on_link_lookup(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        domain: &str,
        who: Address,
    ) {
        let Some((cfg, f)) = self.config.federation.as_ref().zip(self.fed.as_mut()) else {
            return;
        };
        let (rate, burst) = (cfg.domain_rate_per_sec, cfg.domain_rate_burst.max(1));
        let r = f.remote(domain);
        let paid = r
            .bucket
            .get_or_insert_with(|| TokenBucket::full(now, burst))
            .try_take(now, rate, burst);
        if !paid {
            self.refuse(conn, ErrorCode::RateLimited, "slow down".into(), None);
            return;
        }
        let reg = self
            .registry
            .get(&who)
            .filter(|_| who.domain() == self.config.domain);
        let key = reg.map(|r| r.key_bytes);
        let rotation = reg.and_then(|r| r.rotation.clone());
        let recovery = reg.and_then(|r| r.recovery.clone());
        self.send(
            conn,
            &RelayFrame::Key {
                address: who,
                key,
                rotation,
                recovery,
            },
        );
    }
}
