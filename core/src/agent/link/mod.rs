//! The relay connection (§3, §13.1): authentication, the outbox, pacing, parking and the
//! relay's refusals.

pub(super) mod key_recovery;
pub(super) mod records;
pub(super) mod recovery;
pub(super) mod rotation;

use super::link::records::outbox_key;
use super::security::keys::PendingPlain;
use super::thread::ThreadState;
use super::*;

use crate::crypto::Envelope;
use crate::link::{ClientFrame, RelayFrame};
use crate::persist::PersistOp;

/// A sealed packet the relay has not yet accepted (`outbox/<seq>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct OutboxItem {
    pub(super) seq: u64,
    pub(super) thread_id: String,
    pub(super) packet_id: String,
    pub(super) env: Envelope,
    /// Refused for now (queue overflow, rate limit): sent again at this time.
    #[serde(default)]
    pub(super) parked_until: Option<Timestamp>,
    /// How often it was refused, for the backoff.
    #[serde(default)]
    pub(super) refusals: u32,
    /// A packet for a thread this agent does not keep (the refusal of a new thread):
    /// no thread record commits it, so a restore keeps it as it is. Every other item of a
    /// thread is committed by its thread record (SPEC-NOTES "Persistence").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(super) threadless: bool,
}

/// The relay would not let this agent in: it refused its `register` for a reason that
/// answering the next challenge cannot change (docs/protocol.md "The relay link", refused
/// registration). The agent stops answering challenges and closes the connection
/// ([`Output::CloseConnection`]); a runtime reports the refusal and reconnects only after
/// [`LinkRefusal::retry_after`], never when it is `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRefusal {
    /// The relay's code: `address_taken`, `registration_limited`, or `unknown_recipient`
    /// (an address of another domain).
    pub code: crate::link::ErrorCode,
    /// The relay's message.
    pub message: String,
    /// When trying again may help (`registration_limited`: the relay's default window);
    /// `None`: not in this run (another key holds the address, or the relay does not
    /// serve its domain).
    pub retry_after: Option<Duration>,
}

/// How long an agent refused with `registration_limited` waits before it registers again:
/// the relay's default registration window (`--registration-window-secs`).
pub const REGISTRATION_RETRY: Duration = Duration::from_secs(3600);

/// Where the first packet of a thread stands with the relay ([`Agent::first_packet`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstPacket {
    /// Waiting for the recipient's key or for the relay's `accepted` (or the agent is
    /// offline: it goes when the link is up).
    Waiting,
    /// The relay accepted it: it is queued for, or delivered to, the recipient.
    Accepted,
    /// The relay refused the recipient; the thread is declined.
    Refused(crate::link::ErrorCode),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Link {
    Down,
    /// Connected, waiting for the challenge or the auth answer.
    Authenticating,
    Ready,
}

/// A frame that waits for a rate token.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Paced {
    /// The `send` of an outbox item (built when it goes: the item may be parked or
    /// accepted by then).
    Outbox(u64),
    /// Another frame (`lookup`).
    Frame(Vec<u8>),
}

/// How long the send rate stays lowered after a `rate_limited` refusal before it steps
/// back up by a tenth of the configured rate.
pub(super) const PACE_RECOVERY: Duration = Duration::from_secs(10);

/// Paces the frames that cost the relay's rate tokens (`send`, `lookup`): a token bucket
/// of `send_burst` tokens refilled at the current rate, which starts at
/// `send_rate_per_sec`. A `rate_limited` refusal empties the bucket and halves the rate
/// (at most once per second; to at most the default rate, at least 1/s; no bursts while
/// lowered); each [`PACE_RECOVERY`] without a refusal it climbs back a tenth of the
/// configured rate. Frames without a token wait, in order, and go when one is due
/// ([`Agent::poll_timeout`]). Not persisted: a restored agent starts with a full bucket.
#[derive(Debug, Default)]
pub(super) struct Pacer {
    /// Tokens in thousandths; `None` until first used (then full).
    pub(super) milli: Option<u64>,
    /// When the bucket was last refilled.
    pub(super) last: Timestamp,
    /// The current rate, tokens per second; 0 means the configured rate.
    pub(super) rate: u32,
    /// When the rate last changed (lowered or stepped up).
    pub(super) changed: Timestamp,
    /// Frames waiting for a token.
    pub(super) queue: VecDeque<Paced>,
}

impl Pacer {
    pub(super) fn rate(&self, limits: &Limits) -> u32 {
        let cfg = limits.send_rate_per_sec.max(1);
        if self.rate == 0 {
            cfg
        } else {
            self.rate.min(cfg)
        }
    }

    pub(super) fn refill(&mut self, now: Timestamp, limits: &Limits) {
        let cfg = limits.send_rate_per_sec.max(1);
        // Slowed down, the agent sends no bursts either: its idea of the relay's burst
        // may be as wrong as its idea of the rate.
        let burst = if self.rate == 0 {
            limits.send_burst
        } else {
            limits.send_burst.min(self.rate)
        };
        let cap = u64::from(burst.max(1)) * 1000;
        let Some(milli) = self.milli else {
            self.milli = Some(cap);
            self.last = now;
            return;
        };
        let elapsed = now.as_millis().saturating_sub(self.last.as_millis());
        let milli = milli
            .saturating_add(elapsed.saturating_mul(u64::from(self.rate(limits))))
            .min(cap);
        self.milli = Some(milli);
        self.last = self.last.max(now);
        // Climb back towards the configured rate, one step per calm period.
        while self.rate != 0 && self.rate < cfg && now >= self.changed.add(PACE_RECOVERY) {
            self.rate = (self.rate + (cfg / 10).max(1)).min(cfg);
            self.changed = self.changed.add(PACE_RECOVERY);
        }
        if self.rate >= cfg {
            self.rate = 0;
        }
    }

    /// Takes a token if there is one.
    pub(super) fn take(&mut self, now: Timestamp, limits: &Limits) -> bool {
        self.refill(now, limits);
        match self.milli {
            Some(m) if m >= 1000 => {
                self.milli = Some(m - 1000);
                true
            }
            _ => false,
        }
    }

    /// The relay refused a frame for its rate: nothing more goes until a token is due,
    /// at half the rate. The refusals of frames that were already on their way (up to a
    /// burst of them) halve it once: at most once per second.
    pub(super) fn refused(&mut self, now: Timestamp, limits: &Limits) {
        self.refill(now, limits);
        if self.rate == 0 || now >= self.changed.add(Duration::from_secs(1)) {
            // Half the rate, and no more than the default (under the relay's documented
            // one): an agent configured above the relay's real rate learns at once.
            self.rate = (self.rate(limits) / 2).min(default_send_rate()).max(1);
            self.changed = now;
        }
        self.milli = Some(0);
    }

    /// When the next token is due, if a frame waits for one.
    pub(super) fn due(&self, limits: &Limits) -> Option<Timestamp> {
        if self.queue.is_empty() {
            return None;
        }
        let have = self.milli?;
        let missing = 1000u64.saturating_sub(have);
        let rate = u64::from(self.rate(limits));
        Some(
            self.last
                .add(Duration::from_millis(missing.div_ceil(rate).max(1))),
        )
    }
}

impl Agent {
    pub(super) fn on_frame(&mut self, bytes: &[u8]) {
        if self.shared.link == Link::Down {
            return;
        }
        self.shared.last_heard = self.shared.now;
        if bytes.len() > self.shared.config.limits.max_frame_bytes {
            self.shared
                .audit(None, AgentEvent::RelayFrameTooLarge { len: bytes.len() });
            return;
        }
        let frame = match RelayFrame::from_bytes(bytes) {
            Ok(f) => f,
            Err(e) => {
                self.shared.audit(
                    None,
                    AgentEvent::RelayFrameMalformed {
                        error: e.to_string(),
                    },
                );
                return;
            }
        };
        match frame {
            RelayFrame::Challenge { .. } if self.shared.refusal.is_some() => {
                // Refused for good in this run: registering again only repeats the
                // refusal (the relay answers each with a new challenge).
            }
            RelayFrame::Challenge { nonce, domain, ts } => {
                // Sign the relay's own time: the nonce already makes the answer fresh and
                // single-use, and an agent whose clock is off still gets in.
                let frame = self.shared.register_frame(&nonce, &domain, ts);
                self.shared.send_frame(&frame);
            }
            RelayFrame::AuthOk { .. } => self.on_ready(),
            RelayFrame::Accepted { seq, .. } => {
                if self.shared.outbox.remove(&seq).is_some() {
                    self.shared.dirty.ops.push(PersistOp::Delete {
                        key: outbox_key(seq),
                    });
                    self.shared.maybe_send_rotate();
                }
            }
            RelayFrame::Rotated { seq, .. } => self.on_rotated(seq),
            RelayFrame::Deliver { id, env } => {
                self.on_envelope(env);
                self.shared.send_frame(&ClientFrame::Ack { id });
            }
            RelayFrame::Overflow { seq, to, .. } => self.shared.on_overflow(seq, &to),
            RelayFrame::Key {
                address,
                key,
                rotation,
                recovery,
            } => {
                if let (Some(r), Some(k)) = (recovery.as_deref(), key) {
                    self.peer_recovered(&address, k, r);
                }
                self.on_key(address, key, rotation.as_deref())
            }
            RelayFrame::RecoveryBound { seq } => self.on_recovery_bound(seq),
            // Answers to a recovery's frames: never sent on an agent's connection.
            RelayFrame::RecoverInfo { .. }
            | RelayFrame::Recovered { .. }
            | RelayFrame::RecoverRefused { .. } => {}
            RelayFrame::Ping { n } => self.shared.send_frame(&ClientFrame::Pong { n }),
            RelayFrame::Pong { .. } => {}
            RelayFrame::Replaced => {
                self.shared.audit(None, AgentEvent::RelayReplaced);
                self.shared.notify(
                    None,
                    NotifyKind::Delivery,
                    "Another device connected as this agent; this one was disconnected."
                        .to_string(),
                );
                self.shared.link = Link::Down;
                self.shared.replaced = true;
            }
            RelayFrame::WakeUpSet { endpoint } => {
                if self.shared.meta.wake_up != endpoint {
                    self.shared.meta.wake_up = endpoint.clone();
                    self.shared.dirty.meta = true;
                }
                self.shared.audit(None, AgentEvent::WakeUpSet { endpoint });
            }
            RelayFrame::Error { code, message, seq } => self.on_relay_error(code, message, seq),
            RelayFrame::Undeliverable {
                id,
                to,
                thread,
                code,
                message,
                ..
            } => {
                self.shared.send_frame(&ClientFrame::Ack { id });
                let tid = self.shared.tags.get(&(to.clone(), thread)).cloned();
                let first = tid
                    .as_ref()
                    .and_then(|t| self.threads.get(t))
                    .is_some_and(|t| {
                        t.state == ThreadState::Initiated && t.initiator && t.group.is_none()
                    });
                match tid {
                    Some(tid) if first && code == crate::link::ErrorCode::UnknownRecipient => {
                        self.recipient_unknown(&tid, &to)
                    }
                    tid => self.shared.notify(
                        tid,
                        NotifyKind::Delivery,
                        format!(
                            "A packet to {to} could not be delivered ({}): {message}",
                            code.as_str()
                        ),
                    ),
                }
            }
            // Frames of the link between relays: never sent to an agent.
            RelayFrame::LinkOk { .. }
            | RelayFrame::Pushed { .. }
            | RelayFrame::Deferred { .. }
            | RelayFrame::Rejected { .. } => {}
        }
    }

    pub(super) fn on_ready(&mut self) {
        self.shared.link = Link::Ready;
        if self.shared.rotation_on_ready() {
            self.rotation_notice_due();
        }
        let reconnect = self.shared.meta.authenticated_before;
        self.shared.meta.authenticated_before = true;
        self.shared.dirty.meta = true;
        self.shared.audit(None, AgentEvent::RelayAuthenticated);
        // The wake-up endpoint, at every connection (the relay may have lost it, or the
        // config changed); withdrawn when the config has none but the relay had one.
        let wanted = self.shared.config.wake_up.clone();
        if wanted.is_some() || self.shared.meta.wake_up.is_some() {
            self.shared
                .send_frame(&ClientFrame::WakeUp { endpoint: wanted });
        }
        // Replay the local queue in order (§13.1), paced under the relay's rate.
        let mut seqs = Vec::with_capacity(self.shared.outbox.len());
        for o in self.shared.outbox.values_mut() {
            o.parked_until = None;
            seqs.push(o.seq);
        }
        for seq in seqs {
            self.shared.send_outbox(seq);
        }
        self.shared.maybe_send_rotate();
        self.maybe_bind_recovery();
        let lookups: Vec<Address> = self
            .shared
            .peers
            .iter()
            .filter(|(a, p)| !p.pending.is_empty() && !self.shared.keys.contains_key(*a))
            .map(|(a, _)| a.clone())
            .collect();
        for a in lookups {
            self.shared.lookup(&a);
        }
        if reconnect {
            // Exchange thread-state summaries to find gaps (§13.1).
            let ids: Vec<String> = self
                .threads
                .values()
                .filter(|t| !t.state.is_terminal() && !t.halted && t.session.peer_eph().is_some())
                .map(|t| t.id.clone())
                .collect();
            for id in ids {
                // One summary in flight per thread: a summary the relay has not accepted
                // yet was just replayed above; another would only pile up behind it (a
                // full peer queue parks them all, and every re-connection added one).
                if self.in_thread(&id, |step| step.summary_pending()) == Some(true) {
                    continue;
                }
                // Nothing new since the last summary: the relay accepted that one (it is
                // not pending), so the peer gets it; the same summary again tells it
                // nothing (a flapping link otherwise sent one per thread per re-connection).
                if self
                    .threads
                    .get(&id)
                    .is_some_and(|t| t.summarised == Some(t.summary_mark()))
                {
                    continue;
                }
                self.in_thread(&id, |step| step.send_thread_state());
            }
        }
    }

    pub(super) fn on_relay_error(
        &mut self,
        code: crate::link::ErrorCode,
        message: String,
        seq: Option<u64>,
    ) {
        use crate::link::ErrorCode as E;
        self.shared.audit(
            None,
            AgentEvent::RelayError {
                code,
                message: message.clone(),
            },
        );
        match (code, seq) {
            (E::AddressTaken, None)
                if self.shared.link == Link::Authenticating
                    && self.shared.retry_with_other_key() => {}
            (E::RotationRefused, None) => self.shared.rotation_refused(message),
            (E::RecoveryRefused, None) => self.recovery_refused(message),
            (E::AddressTaken | E::RegistrationLimited | E::UnknownRecipient, None)
                if self.shared.link == Link::Authenticating =>
            {
                self.shared.registration_refused(code, message);
            }
            (E::WakeUpRefused, _) => {
                self.shared.notify(
                    None,
                    NotifyKind::Delivery,
                    format!(
                        "The relay will not wake this agent when something waits for it: {message}"
                    ),
                );
            }
            (E::AuthFailed | E::AddressTaken, _) => {
                self.shared.notify(
                    None,
                    NotifyKind::Delivery,
                    format!("The relay refused this agent: {message}"),
                );
            }
            (E::RateLimited, Some(seq)) => {
                self.shared
                    .pacer
                    .refused(self.shared.now, &self.shared.config.limits);
                self.shared.park(seq, Duration::from_secs(1));
            }
            (E::RateLimited, None) => {
                // A refused lookup (or a frame the relay charged): slow down all the same.
                self.shared
                    .pacer
                    .refused(self.shared.now, &self.shared.config.limits);
            }
            (E::Unavailable, Some(seq)) => {
                // A relay of a cluster that cannot reach its store accepted nothing:
                // the packet goes again a little later.
                self.shared.park(seq, Duration::from_secs(2));
            }
            (E::QueueFull, Some(seq)) => {
                self.shared.park(seq, Duration::from_secs(30));
            }
            (_, Some(seq)) => {
                if let Some(o) = self.shared.outbox.remove(&seq) {
                    self.shared.dirty.ops.push(PersistOp::Delete {
                        key: outbox_key(seq),
                    });
                    let first = self
                        .threads
                        .get(&o.thread_id)
                        .is_some_and(|t| t.state == ThreadState::Initiated && t.initiator);
                    if code == E::UnknownRecipient && first {
                        let to = o.env.to.clone();
                        self.recipient_unknown(&o.thread_id, &to);
                        return;
                    }
                    self.shared.notify(
                        Some(o.thread_id.clone()),
                        NotifyKind::Delivery,
                        format!("The relay refused a packet ({}): {message}", code.as_str()),
                    );
                }
            }
            _ => {}
        }
    }
}

impl Agent {
    /// The relay knows no agent at `address`, to which this user started thread `id`:
    /// the thread is declined. When the configuration names a bridged peer for that
    /// address (`bridged_fallbacks`, §18 graceful degradation), the same intent and
    /// context go on to it in a new thread its bridge opens (a group's leg does not: a
    /// group's participants are a2acp agents).
    pub(super) fn recipient_unknown(&mut self, id: &str, address: &Address) {
        let fallback = self
            .threads
            .get(id)
            .filter(|t| !t.state.is_terminal() && t.initiator && t.group.is_none())
            .and_then(|t| {
                let f = self.shared.config.bridged_fallbacks.get(address)?;
                Some((f.clone(), t.intent.clone(), t.local.clone()))
            });
        let Some((f, intent, context)) = fallback else {
            self.in_thread(id, |step| step.recipient_unknown(address, None));
            return;
        };
        let kind = self.bridged_peer_kind(&f.bridge);
        self.in_thread(id, |step| {
            step.recipient_unknown(address, Some((kind, &f.to)))
        });
        let next = self.open_bridged(&f.bridge, &f.to, intent, context);
        if let Some(t) = self.threads.get_mut(id) {
            t.continued_as = next;
            self.shared.dirty.threads.insert(id.to_string());
        }
    }
}

impl ThreadStep<'_> {
    /// The relay does not know the recipient of thread `id`: the thread is declined and
    /// the user told, with the thread (SPEC-NOTES "Failure handling", unknown recipient),
    /// and with where it goes on if it goes on with a bridged peer (what its bridge calls
    /// it, and where).
    pub(super) fn recipient_unknown(&mut self, address: &Address, fallback: Option<(&str, &str)>) {
        let id = self.id;
        use crate::link::ErrorCode;
        let t = &mut *self.t;
        if t.state.is_terminal() {
            return;
        }
        t.relay_refused = Some(ErrorCode::UnknownRecipient);
        let about = format!("{}: “{}”", t.intent.category, t.intent.summary);
        self.mark_changed();
        self.set_state(ThreadState::Declined, "recipient unknown to the relay");
        let text = match fallback {
            Some((kind, to)) => format!(
                "No agent is registered as {address}: thread {id} ({about}) is declined and goes on in a new thread with {kind} at {to}."
            ),
            None => format!(
                "No agent is registered as {address}: thread {id} ({about}) is declined. Check the address (agent:NAME@RELAY-DOMAIN)."
            ),
        };
        self.notify(NotifyKind::Declined, text);
    }

    /// Seals a packet for its thread and queues it in the outbox (sending it if online).
    pub(super) fn seal_and_queue(&mut self, packet_id: &str, plain: &[u8]) {
        let thread_id = self.id;
        let t = &mut *self.t;
        let peer = t.peer.clone();
        if peer.is_bridged() {
            // A bridged peer: no relay, no envelope; its bridge is the channel.
            let packet = BridgedPacket {
                thread_id: thread_id.to_string(),
                packet_id: packet_id.to_string(),
                peer,
                json: String::from_utf8_lossy(plain).into_owned(),
            };
            self.shared.bridged.push(packet.clone());
            self.shared
                .buf
                .send
                .push(Output::Bridged(Bridged::Packet(packet)));
            return;
        }
        let Some(key) = self.shared.keys.get(&peer) else {
            let rec = self.shared.peers.entry(peer.clone()).or_default();
            rec.pending.push(PendingPlain {
                thread_id: thread_id.to_string(),
                packet_id: packet_id.to_string(),
                json: String::from_utf8_lossy(plain).into_owned(),
            });
            self.shared.dirty.peers.insert(peer.clone());
            self.shared.lookup(&peer);
            return;
        };
        let dir = t.my_direction();
        let env = match t.session.seal(
            &self.shared.identity,
            &self.shared.config.address,
            &peer,
            key,
            thread_id,
            dir,
            plain,
        ) {
            Ok(e) => e,
            Err(e) => {
                self.shared.audit(
                    Some(thread_id),
                    AgentEvent::SealFailed {
                        packet_id: packet_id.to_string(),
                        error: e.to_string(),
                    },
                );
                return;
            }
        };
        self.shared.dirty.threads.insert(thread_id.to_string());
        self.shared.queue_envelope(thread_id, packet_id, env);
    }
}

impl Shared {
    pub(super) fn on_connected(&mut self) {
        self.link = Link::Authenticating;
        self.replaced = false;
        if self
            .refusal
            .as_ref()
            .is_some_and(|r| r.retry_after.is_some())
        {
            self.refusal = None;
        }
        self.last_heard = self.now;
        self.audit(None, AgentEvent::RelayConnected);
    }

    pub(super) fn on_disconnected(&mut self) {
        if self.link != Link::Down {
            self.audit(None, AgentEvent::RelayDisconnected);
        }
        self.link = Link::Down;
        for p in self.peers.values_mut() {
            p.lookup_sent = false;
        }
        // Frames of this connection that never went: the outbox is replayed and lookups
        // asked again on the next one.
        self.pacer.queue.clear();
    }

    pub(super) fn lookup(&mut self, peer: &Address) {
        let rec = self.peers.entry(peer.clone()).or_default();
        if rec.lookup_sent || self.link != Link::Ready {
            return;
        }
        rec.lookup_sent = true;
        self.send_frame(&ClientFrame::Lookup {
            address: peer.clone(),
        });
    }

    /// The relay refused a packet for now (§13.2 overflow, rate limit, full queue): it
    /// stays in the outbox and is sent again after a backoff (30 s, doubling, at most 1 h),
    /// so nothing is lost; the recipient drops what it already has. The later packets of
    /// its thread wait behind it (parked at least as long): a thread's packets reach the
    /// relay in the order they were sealed, as they would without the refusal.
    pub(super) fn park(&mut self, seq: u64, base: Duration) -> Option<OutboxItem> {
        let now = self.now;
        let o = self.outbox.get_mut(&seq)?;
        o.refusals = o.refusals.saturating_add(1);
        let backoff = base
            .saturating_mul(1u32 << o.refusals.saturating_sub(1).min(7))
            .min(Duration::from_secs(3600));
        let mut until = now.add(backoff);
        let thread = o.thread_id.clone();
        // Not before an earlier packet of its thread parked longer.
        if let Some(t) = self.parked_before(&thread, seq) {
            until = until.max(t);
        }
        let mut changed = Vec::new();
        for o in self.outbox.range_mut(seq..) {
            if o.1.seq == seq
                || (o.1.thread_id == thread && o.1.parked_until.is_none_or(|t| t < until))
            {
                o.1.parked_until = Some(until);
                changed.push(o.1.clone());
            }
        }
        for item in &changed {
            self.dirty.ops.push(PersistOp::Put {
                key: outbox_key(item.seq),
                value: serde_json::to_vec(item).unwrap_or_default(),
            });
        }
        self.outbox.get(&seq).cloned()
    }

    /// The latest time an outbox item of `thread` before `seq` is parked until.
    fn parked_before(&self, thread: &str, seq: u64) -> Option<Timestamp> {
        self.outbox
            .range(..seq)
            .filter(|(_, o)| o.thread_id == thread)
            .filter_map(|(_, o)| o.parked_until)
            .max()
    }

    pub(super) fn on_overflow(&mut self, seq: u64, to: &Address) {
        let Some(o) = self.park(seq, Duration::from_secs(30)) else {
            return;
        };
        if o.refusals == 1 {
            self.notify(
                Some(o.thread_id.clone()),
                NotifyKind::Delivery,
                format!("{to} has been offline for a while and its queue for this thread is full; I'll keep trying."),
            );
        }
        self.audit(
            Some(&o.thread_id),
            AgentEvent::QueueOverflow {
                to: to.clone(),
                packet_id: o.packet_id.clone(),
                parked_until: o.parked_until.unwrap_or_default(),
            },
        );
    }

    /// Sends parked packets whose time has come.
    pub(super) fn unpark(&mut self) {
        let now = self.now;
        let due: Vec<u64> = self
            .outbox
            .values()
            .filter(|o| o.parked_until.is_some_and(|t| t <= now))
            .map(|o| o.seq)
            .collect();
        for seq in due {
            if let Some(o) = self.outbox.get_mut(&seq) {
                o.parked_until = None;
                if self.link == Link::Ready {
                    self.send_outbox(seq);
                }
            }
        }
    }

    /// The relay refused this agent's `register` (`address_taken`,
    /// `registration_limited`, or `unknown_recipient`: a domain it does not serve): stop
    /// answering challenges, close the connection, tell the user once.
    pub(super) fn registration_refused(&mut self, code: crate::link::ErrorCode, message: String) {
        use crate::link::ErrorCode as E;
        let retry_after = (code == E::RegistrationLimited).then_some(REGISTRATION_RETRY);
        let address = self.config.address.clone();
        let what = match code {
            E::AddressTaken => format!(
                "another agent holds {address} at this relay (with another key). This agent stays offline; create it again with another address (`a2acp agent init --address …`)."
            ),
            E::RegistrationLimited => format!(
                "too many new addresses were registered from this network lately. This agent tries again in {} minutes.",
                REGISTRATION_RETRY.as_secs() / 60
            ),
            _ => format!(
                "the relay does not serve the domain of {address}. This agent stays offline; use an address of the relay's domain."
            ),
        };
        self.notify(
            None,
            NotifyKind::Delivery,
            format!(
                "The relay refused to register {address} ({}: {message}): {what}",
                code.as_str()
            ),
        );
        self.audit(None, AgentEvent::RegistrationRefused { code });
        self.refusal = Some(LinkRefusal {
            code,
            message,
            retry_after,
        });
        self.buf.close.push(Output::CloseConnection);
        self.on_disconnected();
    }

    /// Sends a frame: at once, or, for one that costs the relay's rate tokens, when the
    /// pacer has a token for it.
    pub(super) fn send_frame(&mut self, f: &ClientFrame) {
        match f {
            ClientFrame::Send { seq, .. } => self.send_outbox(*seq),
            ClientFrame::Lookup { .. } => self.pace(Paced::Frame(f.to_bytes())),
            _ => self.buf.send.push(Output::Send(f.to_bytes())),
        }
    }

    /// Sends outbox item `seq` when the pacer has a token for it.
    pub(super) fn send_outbox(&mut self, seq: u64) {
        self.pace(Paced::Outbox(seq));
    }

    /// Sends `p` now if nothing waits before it and there is a token (in its place
    /// among the other frames of this step), or queues it.
    pub(super) fn pace(&mut self, p: Paced) {
        if self.pacer.queue.is_empty() && self.link == Link::Ready {
            let Some(frame) = self.paced_frame(&p) else {
                return;
            };
            if self.pacer.take(self.now, &self.config.limits) {
                self.buf.send.push(Output::Send(frame));
                return;
            }
        }
        self.pacer.queue.push_back(p);
    }

    /// The frame of `p`; `None` for an outbox item parked or accepted meanwhile (it goes
    /// when it is unparked).
    pub(super) fn paced_frame(&self, p: &Paced) -> Option<Vec<u8>> {
        match p {
            Paced::Frame(b) => Some(b.clone()),
            // An item sealed under a key this connection did not register with waits for
            // one that did (a rotation under way, SPEC-NOTES "Key rotation").
            Paced::Outbox(seq) => self
                .outbox
                .get(seq)
                .filter(|o| o.parked_until.is_none())
                .filter(|o| self.link_key.is_none_or(|k| k == o.env.from_key))
                .map(|o| {
                    ClientFrame::Send {
                        seq: o.seq,
                        env: o.env.clone(),
                    }
                    .to_bytes()
                }),
        }
    }

    /// Releases the queued frames that have a token now, in order.
    pub(super) fn release_paced(&mut self) {
        if self.link != Link::Ready {
            self.pacer.queue.clear();
            return;
        }
        while let Some(p) = self.pacer.queue.front() {
            let Some(frame) = self.paced_frame(p) else {
                self.pacer.queue.pop_front();
                continue;
            };
            if !self.pacer.take(self.now, &self.config.limits) {
                return;
            }
            self.pacer.queue.pop_front();
            self.buf.send.push(Output::Send(frame));
        }
    }

    /// Puts a sealed packet in the outbox (sending it if online).
    pub(super) fn queue_envelope(&mut self, thread_id: &str, packet_id: &str, env: Envelope) {
        self.queue_item(thread_id, packet_id, env, false);
    }

    /// [`Shared::queue_envelope`] for a packet of a thread this agent does not keep.
    pub(super) fn queue_threadless(&mut self, thread_id: &str, packet_id: &str, env: Envelope) {
        self.queue_item(thread_id, packet_id, env, true);
    }

    fn queue_item(
        &mut self,
        thread_id: &str,
        packet_id: &str,
        mut env: Envelope,
        threadless: bool,
    ) {
        (env.rotation, env.earlier_rotations) = self.statements_for(&env.from_key);
        let seq = self.meta.next_seq;
        self.meta.next_seq += 1;
        self.dirty.meta = true;
        // An earlier packet of the thread the relay refused for now is tried again at
        // once, before this one: the thread keeps its order and the new packet does not
        // wait for the other's backoff (refused again, it parks this one behind it).
        if self.parked_before(thread_id, seq).is_some() {
            let earlier: Vec<u64> = self
                .outbox
                .range(..seq)
                .filter(|(_, o)| o.thread_id == thread_id && o.parked_until.is_some())
                .map(|(&s, _)| s)
                .collect();
            for s in earlier {
                if let Some(o) = self.outbox.get_mut(&s) {
                    o.parked_until = None;
                    if self.link == Link::Ready {
                        self.send_outbox(s);
                    }
                }
            }
        }
        let item = OutboxItem {
            seq,
            thread_id: thread_id.to_string(),
            packet_id: packet_id.to_string(),
            env,
            parked_until: None,
            refusals: 0,
            threadless,
        };
        self.dirty.ops.push(PersistOp::Put {
            key: outbox_key(seq),
            value: serde_json::to_vec(&item).unwrap_or_default(),
        });
        self.outbox.insert(seq, item);
        if self.link == Link::Ready {
            self.send_outbox(seq);
        }
    }
}
