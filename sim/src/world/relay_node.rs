//! The relay nodes: one relay per domain (one in a world that does not federate), each
//! fed through its public contract, its outputs executed in order (a crash may cut a
//! step) and its timer armed.

use std::collections::BTreeMap;
use std::time::Duration;

use a2acp_core::crypto::{IdentityKey, PublicKey};
use a2acp_core::link::ErrorCode;
use a2acp_core::persist::PersistOp;
use a2acp_core::relay::federation::{FederationEvent, LinkSide};
use a2acp_core::relay::{ConnId, Relay, RelayConfig, RelayEvent, RelayInput, RelayOutput};
use a2acp_core::{Address, Timestamp};

use super::events::Ev;
use super::{store, Records, Sim};
use crate::scenario::Spec;
use crate::transcript::{describe_relay_event, Tag};
use crate::util::derive_seed;

/// One relay of the world and what the simulator keeps for it.
pub(super) struct RelayNode {
    /// Its name in the transcript: `relay` when it is the only one, else its domain.
    pub(super) name: String,
    /// Its configuration (restarts use it again).
    pub(super) config: RelayConfig,
    /// The relay, unless it is down.
    pub(super) relay: Option<Relay>,
    /// What it persisted.
    pub(super) store: Records,
    /// Incarnation: bumped by each crash (events of an earlier one are dropped).
    pub(super) inc: u32,
    /// Its armed timer (the queue key).
    pub(super) timer: Option<(Timestamp, u64)>,
    /// A crash armed for its next step, with the time it stays down.
    pub(super) crash_armed: Option<Duration>,
    /// The armed crash waits for a step that hands a packet over.
    pub(super) handover_armed: bool,
    /// It failed to restore: it stays down.
    pub(super) broken: bool,
    /// Outbound packets by delivery id → (recipient, packet id), for the audit of the
    /// packets it gives up on (`undeliverable`).
    pub(super) outbound: BTreeMap<u64, (usize, String)>,
}

impl RelayNode {
    /// The relays of `spec`, relay 0 first.
    pub(super) fn all(spec: &Spec, seed: u64) -> Vec<RelayNode> {
        let mut specs = vec![&spec.relay];
        if let Some(f) = &spec.federation {
            specs.extend(f.relays.iter());
        }
        let single = specs.len() == 1 && spec.federation.is_none();
        specs
            .iter()
            .enumerate()
            .map(|(k, r)| RelayNode {
                name: if single {
                    "relay".to_string()
                } else {
                    r.config.domain.clone()
                },
                config: r.config.clone(),
                relay: Some(Relay::new(
                    r.config.clone(),
                    derive_seed(seed, &seed_label(k, 0)),
                )),
                store: Records::new(),
                inc: 0,
                timer: None,
                crash_armed: None,
                handover_armed: false,
                broken: false,
                outbound: BTreeMap::new(),
            })
            .collect()
    }

    /// The relay serving `address`: the only one, or the one of its domain.
    pub(super) fn serving(relays: &[RelayNode], address: &Address) -> Option<usize> {
        if relays.len() == 1 && relays[0].config.federation.is_none() {
            return Some(0);
        }
        relays
            .iter()
            .position(|r| r.config.domain.eq_ignore_ascii_case(address.domain()))
    }

    /// The key this relay's domain publishes.
    pub(super) fn public_key(&self) -> Option<PublicKey> {
        self.config.federation.as_ref().map(|f| f.key.public())
    }
}

/// The signing key of the relay of `domain` in a run of `seed`.
pub(crate) fn relay_key(seed: u64, domain: &str) -> IdentityKey {
    IdentityKey::from_seed(derive_seed(seed, &format!("relay-key/{domain}")))
}

/// The seed label of relay `k`'s incarnation `inc` (relay 0's labels are those of the
/// world with one relay).
pub(super) fn seed_label(k: usize, inc: u32) -> String {
    if k == 0 {
        format!("relay#{inc}")
    } else {
        format!("relay{k}#{inc}")
    }
}

impl Sim {
    /// Hands `input` to relay `r` (if it is up), then drains it.
    pub(super) fn feed_relay(&mut self, r: usize, input: RelayInput<'_>) {
        let now = self.now;
        let t0 = self.tick();
        if let Some(relay) = self.relays[r].relay.as_mut() {
            relay.handle(now, input);
        }
        self.tock(t0);
        self.drain_relay(r);
    }

    pub(super) fn drain_relay(&mut self, r: usize) {
        if self.relays[r].relay.is_none() {
            return;
        }
        // One buffer for every step of every relay (a step can emit hundreds of outputs).
        let mut outs = std::mem::take(&mut self.relay_outs);
        let t0 = self.tick();
        if let Some(relay) = self.relays[r].relay.as_mut() {
            while let Some(o) = relay.poll_output() {
                outs.push(o);
            }
        }
        self.tock(t0);
        let armed = self.relays[r].crash_armed.is_some()
            && (!self.relays[r].handover_armed || outs.iter().any(|o| self.hands_over(r, o)));
        let cut = if armed && !outs.is_empty() {
            Some(self.faults.between(0, outs.len() as u64) as usize)
        } else {
            None
        };
        let total = outs.len();
        let mut crash_at = (cut == Some(total)).then_some(total);
        for (k, o) in outs.drain(..).enumerate() {
            if cut == Some(k) {
                crash_at = Some(k);
                break;
            }
            self.exec_relay_output(r, o);
        }
        // The outputs a crash cut are dropped, never executed.
        outs.clear();
        self.relay_outs = outs;
        if let Some(k) = crash_at {
            let d = self.relays[r].crash_armed.take().unwrap_or_default();
            self.crash_relay(r, d, Some((k, total)));
            return;
        }
        self.rearm_relay(r);
    }

    /// Whether `o` of relay `r` is part of a hand-over: a frame on a relay link, or a
    /// federation record (outbound queue, link numbering, a packet received from another
    /// domain).
    fn hands_over(&self, r: usize, o: &RelayOutput) -> bool {
        match o {
            RelayOutput::Send { conn, .. } => self
                .conns
                .get(conn)
                .is_some_and(|c| c.link.is_some() && (c.relay == r || c.link == Some(r))),
            RelayOutput::Persist(PersistOp::Put { key, .. } | PersistOp::Delete { key }) => {
                key.starts_with("fo/") || key.starts_with("fed/")
            }
            _ => false,
        }
    }

    pub(super) fn exec_relay_output(&mut self, r: usize, o: RelayOutput) {
        match o {
            RelayOutput::Persist(op) => {
                if let PersistOp::Put { key, value } = &op {
                    self.relay_record(r, key, value);
                }
                store(&mut self.relays[r].store, op);
            }
            RelayOutput::Send { conn, bytes } => {
                if self.recovering.contains_key(&conn) {
                    return self.recovery_frame(r, conn, &bytes);
                }
                let Some(c) = self.conns.get(&conn) else {
                    return;
                };
                if c.relay == r && c.relay_open {
                    self.transmit(conn, false, bytes);
                } else if c.link == Some(r) && c.agent_open {
                    self.transmit(conn, true, bytes);
                }
            }
            RelayOutput::Close { conn, code } => self.relay_closes(r, conn, code),
            RelayOutput::Event(e) => self.relay_event(r, e),
            RelayOutput::Discover { domain } => self.discover(r, domain),
            RelayOutput::Dial { domain, .. } => self.dial(r, domain),
            // The simulated relays are single nodes: cluster mode is tested over real
            // NATS servers.
            RelayOutput::Cluster(_) => {}
            RelayOutput::WakeUp { endpoint } => self.wake_up(r, endpoint),
        }
    }

    /// Relay `r` stored `key`: the plaintext and exactly-once checks see every queued
    /// packet — for a local recipient (`q/`) or for another domain (`fo/`).
    fn relay_record(&mut self, r: usize, key: &str, value: &[u8]) {
        let at = self.elapsed();
        let recipient = if let Some(rest) = key.strip_prefix("q/") {
            rest.rsplit_once('/')
                .and_then(|(a, _)| Address::parse(a).ok())
                .and_then(|a| self.by_address.get(&a).copied())
        } else if key.starts_with("fo/") {
            outbound_recipient(value).and_then(|a| self.by_address.get(&a).copied())
        } else {
            None
        };
        let pid = self.checker.relay_put(at, key, value, recipient);
        if key.starts_with("fo/") {
            if let (Some(id), Some(rcpt), Some(pid)) = (outbound_id(value), recipient, pid) {
                self.relays[r].outbound.insert(id, (rcpt, pid));
            }
        }
    }

    fn relay_event(&mut self, r: usize, e: RelayEvent) {
        if let RelayEvent::Federation(f) = &e {
            match f {
                FederationEvent::Forwarded { id, .. } => {
                    self.stats.handed_over += 1;
                    self.relays[r].outbound.remove(id);
                }
                FederationEvent::LinkUp {
                    side: LinkSide::Dialed,
                    ..
                } => self.stats.relay_links += 1,
                FederationEvent::Undeliverable { id, .. } => {
                    // The sender is told: the packet is refused, not lost.
                    if let Some((rcpt, pid)) = self.relays[r].outbound.remove(id) {
                        self.checker.refused(rcpt, &pid);
                    }
                }
                _ => {}
            }
        }
        if !self.record {
            return;
        }
        let text = match &e {
            RelayEvent::Federation(f) => super::federation::describe(f),
            e => describe_relay_event(e),
        };
        if let Some(text) = text {
            let tag = match &e {
                RelayEvent::Routed { from, to, .. } => Tag::Queued {
                    pid: None,
                    from: from.user().to_string(),
                    to: to.user().to_string(),
                },
                _ => Tag::Note,
            };
            let name = self.relays[r].name.clone();
            self.line(&name, '|', text, tag);
        }
    }

    /// Relay `r` closes `conn`: the other end sees it one latency later (unless cut).
    fn relay_closes(&mut self, r: usize, conn: ConnId, code: ErrorCode) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if let Some(d) = c.link {
            let j = c.relay;
            let (to, other, inc) = if d == r {
                // The dialer gives the link up: the accepting relay sees the close.
                c.agent_open = false;
                (true, j, self.relays[j].inc)
            } else {
                c.relay_open = false;
                (false, d, self.relays[d].inc)
            };
            let name = self.relays[r].name.clone();
            let other_name = self.relays[other].name.clone();
            self.line(
                &name,
                '|',
                format!(
                    "closed the relay link with {other_name} ({})",
                    code.as_str()
                ),
                Tag::Note,
            );
            if !self.link_blocked(d, j) {
                let l = self.link_latency();
                let at = self.now.add(l);
                if to {
                    self.push(at, Ev::RelaySeesClose { conn, inc });
                } else {
                    self.push(
                        at,
                        Ev::DialerSeesClose {
                            relay: d,
                            inc,
                            conn,
                        },
                    );
                }
            }
            self.gc_conn(conn);
            return;
        }
        c.relay_open = false;
        let node = c.node;
        let name = self.nodes[node].name.clone();
        let relay = self.relays[r].name.clone();
        self.line(
            &relay,
            '|',
            format!("closed the connection of {name} ({})", code.as_str()),
            Tag::Note,
        );
        if !self.blocked(node, false) {
            let l = self.latency(node);
            let at = self.now.add(l);
            let inc = self.nodes[node].inc;
            self.push(at, Ev::AgentSeesClose { node, inc, conn });
        }
        self.gc_conn(conn);
    }

    pub(super) fn rearm_relay(&mut self, r: usize) {
        let t0 = self.tick();
        let deadline = self.relays[r].relay.as_ref().map(Relay::poll_timeout);
        self.tock(t0);
        let Some(deadline) = deadline else {
            return;
        };
        let want = deadline.map(|t| t.max(self.now));
        if self.relays[r].timer.map(|k| k.0) == want {
            return;
        }
        if let Some(k) = self.relays[r].timer {
            self.queue.remove(&k);
        }
        let inc = self.relays[r].inc;
        self.relays[r].timer = want.map(|t| self.push(t, Ev::RelayTimer { relay: r, inc }));
    }
}

/// The recipient of an outbound record (`fo/…`: `{"n":..,"id":..,"from":..,"env":{..}}`).
fn outbound_recipient(value: &[u8]) -> Option<Address> {
    let v: serde_json::Value = serde_json::from_slice(value).ok()?;
    Address::parse(v.get("env")?.get("to")?.as_str()?).ok()
}

/// The delivery id of an outbound record.
fn outbound_id(value: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(value).ok()?;
    v.get("id")?.as_u64()
}
