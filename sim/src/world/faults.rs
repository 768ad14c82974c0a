//! The fault model: agent and relay crashes (idle or in the middle of a step) and restarts
//! from exactly what was persisted, devices shut for a while, and identity key changes.

use std::time::Duration;

use a2acp_core::agent::{Agent, Command, Input};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::relay::{ConnId, Relay};

use super::events::Ev;
use super::relay_node::seed_label;
use super::{persisted, Sim};
use crate::transcript::Tag;
use crate::util::{derive_seed, fmt_duration};

impl Sim {
    pub(super) fn crash_agent(
        &mut self,
        i: usize,
        restart_after: Duration,
        point: Option<(usize, usize)>,
    ) {
        if self.nodes[i].agent.is_none() {
            return;
        }
        self.stats.agent_crashes += 1;
        let name = self.nodes[i].name.clone();
        let how = match point {
            Some((k, n)) => format!("after {k} of {n} outputs of a step"),
            None => "while idle".to_string(),
        };
        self.line(
            &name,
            '|',
            format!("CRASH ({how}); restarts in {}", fmt_duration(restart_after)),
            Tag::Fault,
        );
        let n = &mut self.nodes[i];
        n.agent = None;
        n.inc += 1;
        n.prompts.clear();
        n.scheduled.clear();
        n.reconnect_pending = false;
        n.delivering = None;
        if let Some(k) = n.timer.take() {
            self.queue.remove(&k);
        }
        self.close_agent_conn(i);
        let at = self.now.add(restart_after);
        self.push(at, Ev::RestartAgent { node: i });
    }

    pub(super) fn restart_agent(&mut self, i: usize) {
        if self.nodes[i].agent.is_some() || self.nodes[i].lost {
            return;
        }
        let config = self.spec.agents[i].config.clone();
        let n = &self.nodes[i];
        let seed = derive_seed(self.seed, &format!("agent/{}/restart{}", n.name, n.inc));
        let records = persisted(&n.store);
        let identity = IdentityKey::from_seed(n.identity);
        let name = n.name.clone();
        let t0 = self.tick();
        let restored = Agent::restore(config, identity, seed, records);
        self.tock(t0);
        match restored {
            Ok(a) => {
                self.checker.restored(i, &a);
                self.nodes[i].agent = Some(a);
                self.line(
                    &name,
                    '|',
                    "restarted from its persisted state".into(),
                    Tag::Fault,
                );
                self.drain_agent(i);
                if let Some(next) = self.nodes[i].next_identity {
                    // The runtime hands a rotation's key to the restarted agent again.
                    let new = Box::new(IdentityKey::from_seed(next));
                    self.feed(i, Input::Command(Command::RotateKey { new }));
                }
                self.nodes[i].attempt = 0;
                let inc = self.nodes[i].inc;
                self.nodes[i].reconnect_pending = true;
                let at = self.now.add(Duration::from_millis(100));
                self.push(at, Ev::Reconnect { node: i, inc });
                self.replay_deferred(i);
            }
            Err(e) => {
                let at = self.elapsed();
                self.checker.restore_failed(at, &name, &e);
            }
        }
    }

    pub(super) fn suspend(&mut self, i: usize, length: Duration) {
        let name = self.nodes[i].name.clone();
        self.line(
            &name,
            '|',
            format!("device shut for {} (offline)", fmt_duration(length)),
            Tag::Fault,
        );
        let n = &mut self.nodes[i];
        n.suspended = true;
        if let Some(k) = n.timer.take() {
            self.queue.remove(&k);
        }
        if let Some(conn) = self.nodes[i].conn {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.up_broken = true;
                c.down_broken = true;
            }
        }
        let at = self.now.add(length);
        self.push(at, Ev::Resume { node: i });
    }

    pub(super) fn resume(&mut self, i: usize) {
        if !self.nodes[i].suspended {
            return;
        }
        self.nodes[i].suspended = false;
        let name = self.nodes[i].name.clone();
        self.line(&name, '|', "device back on".into(), Tag::Fault);
        if self.nodes[i].agent.is_none() {
            self.replay_deferred(i);
            return;
        }
        if let Some(conn) = self.nodes[i].conn.take() {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.agent_open = false;
            }
            self.gc_conn(conn);
            self.feed(i, Input::Disconnected);
        }
        self.feed_timeout(i);
        self.nodes[i].attempt = 0;
        self.schedule_reconnect(i);
        self.replay_deferred(i);
    }

    pub(super) fn crash_relay(
        &mut self,
        r: usize,
        down_for: Duration,
        point: Option<(usize, usize)>,
    ) {
        if self.relays[r].relay.is_none() {
            return;
        }
        self.stats.relay_crashes += 1;
        let how = match point {
            Some((k, n)) => format!("after {k} of {n} outputs of a step"),
            None => "while idle".to_string(),
        };
        let name = self.relays[r].name.clone();
        self.line(
            &name,
            '|',
            format!("CRASH ({how}); restarts in {}", fmt_duration(down_for)),
            Tag::Fault,
        );
        let n = &mut self.relays[r];
        n.relay = None;
        n.inc += 1;
        n.outbound.clear();
        if let Some(k) = n.timer.take() {
            self.queue.remove(&k);
        }
        let conns: Vec<ConnId> = self.conns.keys().copied().collect();
        for conn in conns {
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            match c.link {
                // Relay links: the other relay sees the connection end.
                Some(d) if d == r => {
                    c.agent_open = false;
                    let j = c.relay;
                    if c.relay_open && !self.link_blocked(d, j) {
                        let l = self.link_latency();
                        let at = self.now.add(l);
                        let inc = self.relays[j].inc;
                        self.push(at, Ev::RelaySeesClose { conn, inc });
                    }
                }
                Some(d) if c.relay == r => {
                    c.relay_open = false;
                    if c.agent_open && !self.link_blocked(d, r) {
                        let l = self.link_latency();
                        let at = self.now.add(l);
                        let inc = self.relays[d].inc;
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
                None if c.relay == r => {
                    c.relay_open = false;
                    let node = c.node;
                    if c.agent_open && !self.blocked(node, false) {
                        let l = self.latency(node);
                        let at = self.now.add(l);
                        let inc = self.nodes[node].inc;
                        self.push(at, Ev::AgentSeesClose { node, inc, conn });
                    }
                }
                _ => continue,
            }
            self.gc_conn(conn);
        }
        let at = self.now.add(down_for);
        self.push(at, Ev::RestartRelay { relay: r });
    }

    pub(super) fn restart_relay(&mut self, r: usize) {
        if self.relays[r].relay.is_some() || self.relays[r].broken {
            return;
        }
        let seed = derive_seed(self.seed, &seed_label(r, self.relays[r].inc));
        let t0 = self.tick();
        let restored = Relay::restore(
            self.relays[r].config.clone(),
            seed,
            persisted(&self.relays[r].store),
        );
        self.tock(t0);
        let name = self.relays[r].name.clone();
        match restored {
            Ok(relay) => {
                self.relays[r].relay = Some(relay);
                self.line(
                    &name,
                    '|',
                    "restarted from its persisted state".into(),
                    Tag::Fault,
                );
                // What it restored may be due now (federation retries): arm its timer.
                if self.spec.federation.is_some() {
                    self.drain_relay(r);
                }
            }
            Err(e) => {
                self.relays[r].broken = true;
                let at = self.elapsed();
                let who = if self.relays.len() == 1 {
                    "the relay".to_string()
                } else {
                    format!("the relay of {name}")
                };
                self.checker.restore_failed(at, &who, &e);
            }
        }
    }

    /// An agent is re-installed with a new identity key (its records kept), and the relay
    /// operator moves its registration to the new key (relay restarted on the edited
    /// records). Peers that pinned the old key must notice (§16).
    pub(super) fn key_change(&mut self, k: usize) {
        let i = self.spec.key_changes[k].agent;
        let name = self.nodes[i].name.clone();
        self.nodes[i].identity_gen += 1;
        let identity = derive_seed(
            self.seed,
            &format!("identity/{name}/{}", self.nodes[i].identity_gen),
        );
        self.nodes[i].identity = identity;
        self.nodes[i].next_identity = None;
        let key = IdentityKey::from_seed(identity).public().to_bytes();
        self.line(
            &name,
            '|',
            "re-installed with a new identity key; the relay operator re-binds the address".into(),
            Tag::Fault,
        );
        // The operator: relay down, registration edited, relay up.
        let Some(r) = self.agent_relay[i] else {
            return;
        };
        if self.relays[r].relay.is_some() {
            self.crash_relay(r, Duration::ZERO, None);
        }
        let reg = format!("reg/{}", self.nodes[i].address);
        let store = &mut self.relays[r].store;
        if let Some(v) = store.get(&reg) {
            if let Ok(mut rec) = serde_json::from_slice::<serde_json::Value>(v) {
                rec["key"] = serde_json::Value::String(b64url(&key));
                if let Ok(bytes) = serde_json::to_vec(&rec) {
                    store.insert(reg, bytes);
                }
            }
        }
        // The agent restarts with the new key.
        if self.nodes[i].agent.is_some() {
            self.crash_agent(i, Duration::from_secs(1), None);
        }
    }
}

fn b64url(b: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk.len();
        let v = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for k in 0..=n {
            out.push(A[((v >> (18 - 6 * k)) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_the_wire_encoding() {
        assert_eq!(b64url(b"\xff\xfe\xfd"), "__79");
        assert_eq!(b64url(b"ab"), "YWI");
        assert_eq!(b64url(b"a"), "YQ");
    }
}
