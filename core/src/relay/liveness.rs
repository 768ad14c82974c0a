//! Liveness: authentication and silence deadlines, and the periodic pings.

use super::{Conn, ConnId, Phase, Relay, RelayEvent};
use crate::link::{ErrorCode, RelayFrame};
use crate::time::Timestamp;

impl Relay {
    /// Time passed: closes connections that did not authenticate in time or went silent,
    /// and sends the periodic pings.
    pub(super) fn on_timeout(&mut self, now: Timestamp) {
        while let Some(&(when, conn)) = self.deadlines.first() {
            if when > now {
                break;
            }
            self.deadlines.pop_first();
            let Some(c) = self.conns.get(&conn) else {
                continue;
            };
            let auth_expired =
                matches!(c.phase, Phase::Unauth { auth_deadline, .. } if auth_deadline <= now);
            let link_expired =
                matches!(&c.phase, Phase::Link(l) if l.until().is_some_and(|u| u <= now));
            let dead = self.dead_at(c) <= now;
            if auth_expired {
                self.refuse(
                    conn,
                    ErrorCode::NotAuthenticated,
                    "authentication timed out".into(),
                    None,
                );
                self.close(conn, ErrorCode::NotAuthenticated);
            } else if link_expired {
                self.close(conn, ErrorCode::Timeout);
            } else if dead {
                self.close(conn, ErrorCode::Timeout);
                self.push_event(RelayEvent::ConnectionDead { conn });
            } else {
                // Stale entry (cannot happen: entries are kept current); re-arm.
                let d = self.deadline_of(c);
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.deadline = d;
                }
                self.deadlines.insert((d, conn));
            }
        }
        if let Some(t) = self.next_ping {
            if t <= now {
                if self.conns.is_empty() {
                    self.next_ping = None;
                } else {
                    let n = self.ping_n;
                    self.ping_n = self.ping_n.wrapping_add(1);
                    let conns: Vec<ConnId> = self.conns.keys().copied().collect();
                    for conn in conns {
                        self.send(conn, &RelayFrame::Ping { n });
                    }
                    self.next_ping = Some(now.add(self.config.ping_interval));
                }
            }
        }
    }

    pub(super) fn dead_at(&self, c: &Conn) -> Timestamp {
        let periods = self.config.missed_pongs.saturating_add(1);
        let silence = self.config.ping_interval.saturating_mul(periods);
        c.last_seen.add(silence)
    }

    pub(super) fn deadline_of(&self, c: &Conn) -> Timestamp {
        let dead = self.dead_at(c);
        match c.phase {
            Phase::Unauth { auth_deadline, .. } => dead.min(auth_deadline),
            Phase::Authed { .. } => dead,
            Phase::Link(ref l) => l.until().map_or(dead, |u| dead.min(u)),
        }
    }

    /// Recomputes `conn`'s deadline after its liveness or phase changed.
    pub(super) fn reschedule(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let d = self.deadline_of(c);
        let old = c.deadline;
        if d != old {
            self.deadlines.remove(&(old, conn));
            self.deadlines.insert((d, conn));
            if let Some(c) = self.conns.get_mut(&conn) {
                c.deadline = d;
            }
        }
    }
}
