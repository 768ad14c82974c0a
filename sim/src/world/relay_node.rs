//! The relay node: executing the relay's outputs in order (a crash may cut a step) and
//! arming its timer.

use a2acp_core::persist::PersistOp;
use a2acp_core::relay::{RelayEvent, RelayInput, RelayOutput};
use a2acp_core::Address;

use super::events::Ev;
use super::{store, Sim};
use crate::transcript::{describe_relay_event, Tag};

impl Sim {
    /// Hands `input` to the relay (if it is up), then drains it.
    pub(super) fn feed_relay(&mut self, input: RelayInput<'_>) {
        let now = self.now;
        let t0 = self.tick();
        if let Some(r) = self.relay.as_mut() {
            r.handle(now, input);
        }
        self.tock(t0);
        self.drain_relay();
    }

    pub(super) fn drain_relay(&mut self) {
        let mut outs = Vec::new();
        let t0 = self.tick();
        match self.relay.as_mut() {
            Some(r) => {
                while let Some(o) = r.poll_output() {
                    outs.push(o);
                }
            }
            None => return,
        }
        self.tock(t0);
        let cut = if self.relay_crash_armed.is_some() && !outs.is_empty() {
            Some(self.faults.between(0, outs.len() as u64) as usize)
        } else {
            None
        };
        let total = outs.len();
        for (k, o) in outs.into_iter().enumerate() {
            if cut == Some(k) {
                let d = self.relay_crash_armed.take().unwrap_or_default();
                self.crash_relay(d, Some((k, total)));
                return;
            }
            self.exec_relay_output(o);
        }
        if cut == Some(total) {
            let d = self.relay_crash_armed.take().unwrap_or_default();
            self.crash_relay(d, Some((total, total)));
            return;
        }
        self.rearm_relay();
    }

    pub(super) fn exec_relay_output(&mut self, o: RelayOutput) {
        match o {
            RelayOutput::Persist(op) => {
                if let PersistOp::Put { key, value } = &op {
                    let at = self.elapsed();
                    let recipient = key
                        .strip_prefix("q/")
                        .and_then(|r| r.rsplit_once('/'))
                        .and_then(|(a, _)| Address::parse(a).ok())
                        .and_then(|a| self.by_address.get(&a).copied());
                    self.checker.relay_put(at, key, value, recipient);
                }
                store(&mut self.relay_store, op);
            }
            RelayOutput::Send { conn, bytes } => {
                if self.conns.get(&conn).is_some_and(|c| c.relay_open) {
                    self.transmit(conn, false, bytes);
                }
            }
            RelayOutput::Close { conn, code } => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                c.relay_open = false;
                let node = c.node;
                let name = self.nodes[node].name.clone();
                self.line(
                    "relay",
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
            RelayOutput::Event(e) => {
                if !self.record {
                    return;
                }
                if let Some(text) = describe_relay_event(&e) {
                    let tag = match &e {
                        RelayEvent::Routed { from, to, .. } => Tag::Queued {
                            pid: None,
                            from: from.user().to_string(),
                            to: to.user().to_string(),
                        },
                        _ => Tag::Note,
                    };
                    self.line("relay", '|', text, tag);
                }
            }
            // The simulated relay does not federate.
            RelayOutput::Discover { .. } | RelayOutput::Dial { .. } => {}
        }
    }

    pub(super) fn rearm_relay(&mut self) {
        let Some(r) = self.relay.as_ref() else {
            return;
        };
        let want = r.poll_timeout().map(|t| t.max(self.now));
        if self.relay_timer.map(|k| k.0) == want {
            return;
        }
        if let Some(k) = self.relay_timer {
            self.queue.remove(&k);
        }
        let inc = self.relay_inc;
        self.relay_timer = want.map(|t| self.push(t, Ev::RelayTimer { inc }));
    }
}
