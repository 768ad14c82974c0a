//! The network model: connections between agents and their relay (and between relays,
//! `federation.rs`), per-link latency, loss, duplication and reordering, partitions,
//! resets, and reconnection with backoff.

use std::time::Duration;

use a2acp_core::agent::Input;
use a2acp_core::relay::{ConnId, RelayInput};
use a2acp_core::Timestamp;

use super::events::Ev;
use super::Sim;
use crate::scenario::Direction;
use crate::transcript::Tag;

/// The sim's view of one connection: a socket between an agent and its relay, or a relay
/// link between two relays (`link`: the dialing relay, which plays the agent's end).
#[derive(Debug)]
pub(super) struct Conn {
    /// The agent (unused on a relay link).
    pub(super) node: usize,
    /// The relay that accepted it.
    pub(super) relay: usize,
    /// On a relay link, the relay that dialed it.
    pub(super) link: Option<usize>,
    /// The agent (the dialing relay) still uses it.
    pub(super) agent_open: bool,
    /// The relay still knows it.
    pub(super) relay_open: bool,
    /// Agent (dialer) → relay stream is broken (a frame was lost).
    pub(super) up_broken: bool,
    /// Relay → agent stream is broken.
    pub(super) down_broken: bool,
    pub(super) up_last: Timestamp,
    pub(super) down_last: Timestamp,
}

impl Sim {
    pub(super) fn latency(&mut self, node: usize) -> Duration {
        let l = self.spec.agents[node].link.sample(&mut self.net);
        Duration::from_millis(l)
    }

    pub(super) fn blocked(&self, node: usize, up: bool) -> bool {
        self.active_partitions.iter().any(|&p| {
            let p = &self.spec.partitions[p];
            p.agent == node
                && match p.direction {
                    Direction::Both => true,
                    Direction::ToRelay => up,
                    Direction::FromRelay => !up,
                }
        })
    }

    pub(super) fn schedule_reconnect(&mut self, i: usize) {
        let n = &self.nodes[i];
        if n.reconnect_pending || n.suspended || n.agent.is_none() || n.conn.is_some() {
            return;
        }
        let attempt = n.attempt.min(6);
        let base = 1000u64 << attempt;
        let jitter = self.net.between(0, base / 2);
        self.nodes[i].attempt += 1;
        self.nodes[i].reconnect_pending = true;
        let inc = self.nodes[i].inc;
        let at = self.now.add(Duration::from_millis(base + jitter));
        self.push(at, Ev::Reconnect { node: i, inc });
    }

    pub(super) fn connect(&mut self, i: usize) {
        let n = &self.nodes[i];
        if n.conn.is_some() || n.agent.is_none() || n.suspended {
            return;
        }
        let Some(r) = self.agent_relay[i].filter(|&r| self.relays[r].relay.is_some()) else {
            self.schedule_reconnect(i);
            return;
        };
        if self.blocked(i, true) || self.blocked(i, false) {
            self.schedule_reconnect(i);
            return;
        }
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.stats.connections += 1;
        self.conns.insert(
            conn,
            Conn {
                node: i,
                relay: r,
                link: None,
                agent_open: true,
                relay_open: true,
                up_broken: false,
                down_broken: false,
                up_last: self.now,
                down_last: self.now,
            },
        );
        self.nodes[i].conn = Some(conn);
        self.feed(i, Input::Connected);
        self.feed_relay(
            r,
            RelayInput::Connected {
                conn,
                source: a2acp_core::relay::Source(i as u128),
            },
        );
    }

    /// Agent `i` closes its connection, if it has one: the relay sees the close one
    /// latency later unless the way up is cut. Whether it had one.
    pub(super) fn close_agent_conn(&mut self, i: usize) -> bool {
        let Some(conn) = self.nodes[i].conn.take() else {
            return false;
        };
        let mut relay = 0;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.agent_open = false;
            relay = c.relay;
        }
        if !self.blocked(i, true) {
            let l = self.latency(i);
            let at = self.now.add(l);
            let inc = self.relays[relay].inc;
            self.push(at, Ev::RelaySeesClose { conn, inc });
        }
        self.gc_conn(conn);
        true
    }

    pub(super) fn gc_conn(&mut self, conn: ConnId) {
        if self
            .conns
            .get(&conn)
            .is_some_and(|c| !c.agent_open && !c.relay_open)
        {
            self.conns.remove(&conn);
        }
    }

    /// Puts a frame on the wire (`up`: agent → relay).
    pub(super) fn transmit(&mut self, conn: ConnId, up: bool, bytes: Vec<u8>) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (node, relay, dialer) = (c.node, c.relay, c.link);
        self.stats.frames += 1;
        let broken = if up { c.up_broken } else { c.down_broken };
        if broken {
            self.stats.frames_lost += 1;
            return;
        }
        let mut link = match (dialer, &self.spec.federation) {
            (Some(_), Some(f)) => f.link.clone(),
            _ => self.spec.agents[node].link.clone(),
        };
        if self.now >= self.heal {
            // The network has healed: latency stays, random faults stop.
            link.loss = 0.0;
            link.duplicate = 0.0;
            link.reorder = 0.0;
        }
        let blocked = match dialer {
            Some(d) => self.link_blocked(d, relay),
            None => self.blocked(node, up),
        };
        if blocked || self.net.chance(link.loss) {
            self.lose(conn, up);
            return;
        }
        let lat = Duration::from_millis(link.sample(&mut self.net));
        let mut at = self.now.add(lat);
        if self.net.chance(link.reorder) {
            at = at.add(Duration::from_millis(
                self.net.between(1, link.reorder_window),
            ));
        } else if let Some(c) = self.conns.get_mut(&conn) {
            let last = if up { &mut c.up_last } else { &mut c.down_last };
            at = at.max(*last);
            *last = at;
        }
        let dup = self.net.chance(link.duplicate);
        let inc = match dialer {
            Some(d) => self.relays[d].inc,
            None => self.nodes[node].inc,
        };
        let relay_inc = self.relays[relay].inc;
        let mk = |b: Vec<u8>| {
            if up {
                Ev::ToRelay {
                    conn,
                    inc: relay_inc,
                    bytes: b,
                }
            } else if let Some(d) = dialer {
                Ev::ToDialer {
                    relay: d,
                    inc,
                    conn,
                    bytes: b,
                }
            } else {
                Ev::ToAgent {
                    node,
                    inc,
                    conn,
                    bytes: b,
                }
            }
        };
        if dup {
            self.stats.frames_duplicated += 1;
            let extra = self.net.between(0, lat.as_millis() as u64 + 1);
            let e = mk(bytes.clone());
            self.push(at.add(Duration::from_millis(extra)), e);
        }
        let e = mk(bytes);
        self.push(at, e);
    }

    /// A frame is lost: its stream is broken from here on; half the time both ends get a
    /// reset at once, otherwise they find out by their heartbeat timers.
    pub(super) fn lose(&mut self, conn: ConnId, up: bool) {
        self.stats.frames_lost += 1;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if up {
            c.up_broken = true;
        } else {
            c.down_broken = true;
        }
        let (node, relay) = (c.node, c.relay);
        if c.link.is_some() {
            self.lose_link(conn);
            return;
        }
        let name = self.nodes[node].name.clone();
        let dir = if up { "to the relay" } else { "from the relay" };
        if self.net.chance(0.5) {
            self.line(
                "net",
                '|',
                format!("frame {dir} of {name} lost: connection reset"),
                Tag::Fault,
            );
            let l = self.latency(node);
            let at = self.now.add(l);
            let inc = self.nodes[node].inc;
            let rinc = self.relays[relay].inc;
            self.push(at, Ev::AgentSeesClose { node, inc, conn });
            self.push(at, Ev::RelaySeesClose { conn, inc: rinc });
        } else {
            self.line(
                "net",
                '|',
                format!("frame {dir} of {name} lost: connection silently broken"),
                Tag::Fault,
            );
        }
    }

    /// A frame on a relay link is lost (a link drop): as for an agent's link, half the
    /// time both relays get a reset, otherwise their heartbeat deadlines find out.
    fn lose_link(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (d, j) = (c.link.unwrap_or_default(), c.relay);
        let (a, b) = self.link_names(c);
        if self.net.chance(0.5) {
            self.line(
                "net",
                '|',
                format!("frame on the relay link {a} → {b} lost: connection reset"),
                Tag::Fault,
            );
            let l = self.link_latency();
            let at = self.now.add(l);
            let (dinc, jinc) = (self.relays[d].inc, self.relays[j].inc);
            self.push(
                at,
                Ev::DialerSeesClose {
                    relay: d,
                    inc: dinc,
                    conn,
                },
            );
            self.push(at, Ev::RelaySeesClose { conn, inc: jinc });
        } else {
            self.line(
                "net",
                '|',
                format!("frame on the relay link {a} → {b} lost: connection silently broken"),
                Tag::Fault,
            );
        }
    }
}
