//! Routing and the queue: `send`, `ack` and deliveries (module documentation of
//! [`super`]).

use super::queue::{queue_key, Origin, StoredItem, NEXT_ID_KEY};
use super::{
    ConnId, Phase, Relay, RelayEvent, RelayOutput, Verified, CHEAP_FRAME_COST, ID_AHEAD, ID_BLOCK,
};
use crate::address::Address;
use crate::crypto;
use crate::crypto::envelope::Envelope;
use crate::link::{ErrorCode, RelayFrame};
use crate::persist::PersistOp;
use crate::time::Timestamp;

impl Relay {
    /// Whether `env` is signed by `key_bytes` (the sender's registered key), decompressed
    /// once per connection and kept in it.
    fn envelope_verifies(&mut self, conn: ConnId, env: &Envelope, key_bytes: [u8; 32]) -> bool {
        let mut spare = None;
        let slot = match self.conns.get_mut(&conn).map(|c| &mut c.phase) {
            Some(Phase::Authed { key, .. }) => key,
            _ => &mut spare,
        };
        if slot.as_ref().map(|k| k.to_bytes()) != Some(key_bytes) {
            // Validated (`PublicKey::from_bytes`) when the address registered.
            *slot = crypto::PublicKey::from_stored_bytes(&key_bytes)
                .ok()
                .map(Box::new);
        }
        slot.as_ref()
            .is_some_and(|k| crypto::verify_envelope(env, k).is_ok())
    }

    pub(super) fn on_send(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        from: Address,
        seq: u64,
        (env, env_json): (Envelope, Option<Box<str>>),
        verified: Verified,
    ) {
        if !self.charge(now, conn, &from, Some(seq)) {
            return;
        }
        let Some(reg) = self.registry.get(&from) else {
            return;
        };
        let key_bytes = reg.key_bytes;
        if env.from != from || env.from_key != key_bytes {
            self.refuse(
                conn,
                ErrorCode::WrongSender,
                "envelope sender is not the authenticated address and its key".into(),
                Some(seq),
            );
            return;
        }
        if env.v != crypto::ENVELOPE_VERSION {
            self.refuse(
                conn,
                ErrorCode::Malformed,
                format!("unsupported envelope version {}", env.v),
                Some(seq),
            );
            return;
        }
        // A runtime that verified the signature checked it against `env.from_key`, which
        // was just compared with the registered key: the same check.
        if verified != Verified::EnvelopeSignature && !self.envelope_verifies(conn, &env, key_bytes)
        {
            self.refuse(
                conn,
                ErrorCode::BadSignature,
                "envelope signature does not verify".into(),
                Some(seq),
            );
            return;
        }
        if self.fed.is_some() && env.to.domain() != self.config.domain {
            self.route_remote(now, conn, from, seq, (env, env_json));
            return;
        }
        if env.to.domain() != self.config.domain || !self.registry.contains_key(&env.to) {
            self.refuse(
                conn,
                ErrorCode::UnknownRecipient,
                format!("{} is not registered here", env.to),
                Some(seq),
            );
            return;
        }
        if self.cluster.is_some() {
            // Cluster mode: answered when the cluster's store made it durable.
            self.cluster_enqueue(conn, seq, from, &env, env_json);
            return;
        }
        let limit = self.config.queue_per_thread;
        if self.queues.thread_len(&env.to, &env.thread) >= limit {
            self.overflow(conn, seq, from, &env, limit);
            return;
        }
        let per_recipient = usize::try_from(self.config.queue_per_recipient).unwrap_or(usize::MAX);
        if self.queues.len_for(&env.to) >= per_recipient {
            self.refuse(
                conn,
                ErrorCode::QueueFull,
                format!("the queue of {} is full", env.to),
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
        let to = env.to.clone();
        self.queue_local(now, id, None, &env, env_json);
        self.send(conn, &RelayFrame::Accepted { seq, id });
        self.push_event(RelayEvent::Routed {
            from,
            to: to.clone(),
            id,
        });
        self.pump(&to);
    }

    /// Refuses `send {seq}` from `from` because (`env.to`, `env.thread`) already holds
    /// `limit` unacknowledged packets (spec §13.2): an `overflow` frame, not an `error`. The
    /// same for a recipient of this relay and for one of another domain.
    pub(super) fn overflow(
        &mut self,
        conn: ConnId,
        seq: u64,
        from: Address,
        env: &Envelope,
        limit: u32,
    ) {
        self.counters.overflows = self.counters.overflows.saturating_add(1);
        let to = env.to.clone();
        self.send(
            conn,
            &RelayFrame::Overflow {
                seq,
                to: to.clone(),
                thread: env.thread,
                limit,
            },
        );
        self.push_event(RelayEvent::Overflow { from, to });
    }

    /// The next delivery id, or `None` when ids are exhausted. Every `ID_BLOCK` ids it
    /// persists a reservation reaching `ID_AHEAD` ids past the one taken (`meta/next_id`:
    /// every id below it may have been handed out), so the id is always below a
    /// reservation decided well before it.
    pub(super) fn take_delivery_id(&mut self) -> Option<u64> {
        let id = self.next_id;
        let next = id.checked_add(1)?;
        if id.saturating_add(ID_AHEAD - ID_BLOCK) >= self.id_reserved {
            self.id_reserved = id.saturating_add(ID_AHEAD);
            let reserved = self.id_reserved;
            self.persist_put(NEXT_ID_KEY.to_string(), &reserved);
        }
        self.next_id = next;
        Some(id)
    }

    /// Queues a packet for its local recipient as delivery `id`: the record, then the
    /// queue; counted as routed. The caller answers the sender and pumps.
    pub(super) fn queue_local(
        &mut self,
        now: Timestamp,
        id: u64,
        origin: Option<Origin>,
        env: &Envelope,
        env_json: Option<Box<str>>,
    ) {
        let to = env.to.clone();
        let env_json =
            env_json.unwrap_or_else(|| serde_json::to_string(env).unwrap_or_default().into());
        let item = StoredItem {
            id,
            accepted_at: now,
            to: to.clone(),
            thread: env.thread,
            env: env_json,
            origin,
        };
        self.out.push_back(RelayOutput::Persist(PersistOp::Put {
            key: queue_key(&to, id),
            value: item.record(),
        }));
        self.queues.insert(item);
        self.counters.routed = self.counters.routed.saturating_add(1);
        self.maybe_wake(now, &to);
    }

    pub(super) fn on_ack(&mut self, conn: ConnId, address: &Address, id: u64) {
        if self.queues.remove(address, id).is_none() {
            if self.ack_notice(address, id) || self.cluster_ack_notice(address, id) {
                return;
            }
            self.push_event(RelayEvent::AckIgnored { conn, id });
            return;
        }
        if !self.cluster_remove(id) {
            self.out.push_back(RelayOutput::Persist(PersistOp::Delete {
                key: queue_key(address, id),
            }));
        }
        self.counters.acked = self.counters.acked.saturating_add(1);
        if let Some(Phase::Authed { in_flight, .. }) =
            self.conns.get_mut(&conn).map(|c| &mut c.phase)
        {
            in_flight.remove(&id);
        }
        self.push_event(RelayEvent::Acked { id });
        self.pump(address);
    }

    /// Delivers what is queued for `address` and not yet sent on its connection, in id
    /// order, up to `max_in_flight`.
    pub(super) fn pump(&mut self, address: &Address) {
        let Some(&conn) = self.online.get(address) else {
            return;
        };
        let Some(Phase::Authed {
            in_flight, cursor, ..
        }) = self.conns.get_mut(&conn).map(|c| &mut c.phase)
        else {
            return;
        };
        let Some(q) = self.queues.by_recipient.get(address) else {
            return;
        };
        let max = usize::try_from(self.config.max_in_flight).unwrap_or(usize::MAX);
        let mut sent = 0u64;
        for (&id, item) in q.items.range(*cursor..) {
            if in_flight.len() >= max {
                break;
            }
            sent += 1;
            self.out.push_back(RelayOutput::Send {
                conn,
                bytes: item.deliver_frame(),
            });
            self.out
                .push_back(RelayOutput::Event(RelayEvent::Delivered {
                    id,
                    to: address.clone(),
                }));
            self.counters.delivered = self.counters.delivered.saturating_add(1);
            in_flight.insert(id);
            *cursor = id.saturating_add(1);
        }
        // Each delivery pays for the `ack` it asks for.
        let burst = self.config.conn_rate_burst.max(1);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.budget
                .credit_milli(sent.saturating_mul(CHEAP_FRAME_COST), burst);
        }
    }
}
