//! The event queue and the loop: what can happen ([`Ev`]), scheduling it, and handing each
//! event to the part of the world it concerns.

use std::time::Duration;

use a2acp_core::agent::{Command, Input};
use a2acp_core::packet::Context;
use a2acp_core::relay::{ConnId, RelayInput};
use a2acp_core::{Address, Timestamp};

use super::Sim;
use crate::check::sig_of;
use crate::scenario::Direction;
use crate::transcript::Tag;
use crate::util::fmt_duration;

/// One scheduled event. `inc` is the incarnation of the node (or relay) it was scheduled
/// for: an event for an earlier incarnation (before a crash) is dropped.
#[derive(Debug)]
pub(super) enum Ev {
    ToRelay {
        conn: ConnId,
        inc: u32,
        bytes: Vec<u8>,
    },
    ToAgent {
        node: usize,
        inc: u32,
        conn: ConnId,
        bytes: Vec<u8>,
    },
    RelaySeesClose {
        conn: ConnId,
        inc: u32,
    },
    AgentSeesClose {
        node: usize,
        inc: u32,
        conn: ConnId,
    },
    AgentTimer {
        node: usize,
        inc: u32,
    },
    RelayTimer {
        relay: usize,
        inc: u32,
    },
    Reconnect {
        node: usize,
        inc: u32,
    },
    UserAnswer {
        node: usize,
        inc: u32,
        prompt: u64,
    },
    AcceptKey {
        node: usize,
        peer: Address,
    },
    /// A frame of a new device's recovery exchange reaches the relay.
    RecoverToRelay {
        relay: usize,
        conn: ConnId,
        bytes: Vec<u8>,
    },
    /// The relay installed a new device's recovery: the agent starts on the new key.
    DeviceRecovered {
        node: usize,
    },
    AcceptSuggestion {
        node: usize,
        command: Command,
    },
    LlmResult {
        node: usize,
        inc: u32,
        id: u64,
        result: Result<String, String>,
    },
    ActionResult {
        node: usize,
        inc: u32,
        id: u64,
        result: Result<Context, String>,
    },
    StartThread(usize),
    StartGroup(usize),
    Command(usize),
    CrashAgent {
        node: usize,
        restart_after: Duration,
    },
    CrashAgentIdle {
        node: usize,
        inc: u32,
    },
    RestartAgent {
        node: usize,
    },
    Suspend {
        node: usize,
        length: Duration,
    },
    Resume {
        node: usize,
    },
    CrashRelay {
        relay: usize,
        down_for: Duration,
        /// Wait for a step that hands a packet over (else crash idle after a minute).
        handover: bool,
    },
    CrashRelayIdle {
        relay: usize,
        inc: u32,
    },
    RestartRelay {
        relay: usize,
    },
    Partition {
        idx: usize,
        on: bool,
    },
    /// A frame on a relay link reaches the relay that dialed it.
    ToDialer {
        relay: usize,
        inc: u32,
        conn: ConnId,
        bytes: Vec<u8>,
    },
    DialerSeesClose {
        relay: usize,
        inc: u32,
        conn: ConnId,
    },
    /// Discovery's answer reaches a relay.
    Discovered {
        relay: usize,
        inc: u32,
        domain: String,
    },
    /// A dialed relay link reaches the other relay.
    LinkOpen {
        conn: ConnId,
        dialer_inc: u32,
        acceptor_inc: u32,
    },
    DialFailed {
        relay: usize,
        inc: u32,
        domain: String,
    },
    RelayPartition {
        idx: usize,
        on: bool,
    },
    KeyChange(usize),
}

impl Sim {
    pub(super) fn schedule_script(&mut self) {
        let s = self.start;
        let at = |d: Duration| s.add(d);
        let mut evs: Vec<(Timestamp, Ev)> = Vec::new();
        for (i, t) in self.spec.threads.iter().enumerate() {
            evs.push((at(t.at), Ev::StartThread(i)));
        }
        for (i, c) in self.spec.commands.iter().enumerate() {
            evs.push((at(c.at), Ev::Command(i)));
        }
        for (i, g) in self.spec.groups.iter().enumerate() {
            evs.push((at(g.at), Ev::StartGroup(i)));
        }
        for (i, a) in self.spec.agents.iter().enumerate() {
            for o in &a.offline {
                evs.push((
                    at(o.at),
                    Ev::Suspend {
                        node: i,
                        length: o.length,
                    },
                ));
            }
            for c in &a.crashes {
                evs.push((
                    at(c.at),
                    Ev::CrashAgent {
                        node: i,
                        restart_after: c.length,
                    },
                ));
            }
        }
        for c in &self.spec.relay.crashes {
            evs.push((
                at(c.at),
                Ev::CrashRelay {
                    relay: 0,
                    down_for: c.length,
                    handover: false,
                },
            ));
        }
        for (i, p) in self.spec.partitions.iter().enumerate() {
            evs.push((at(p.when.at), Ev::Partition { idx: i, on: true }));
            evs.push((
                at(p.when.at + p.when.length),
                Ev::Partition { idx: i, on: false },
            ));
        }
        for (i, k) in self.spec.key_changes.iter().enumerate() {
            evs.push((at(k.at), Ev::KeyChange(i)));
        }
        if let Some(f) = &self.spec.federation {
            for (k, r) in f.relays.iter().enumerate() {
                for c in &r.crashes {
                    evs.push((
                        at(c.at),
                        Ev::CrashRelay {
                            relay: k + 1,
                            down_for: c.length,
                            handover: false,
                        },
                    ));
                }
            }
            for (r, c) in &f.handover_crashes {
                evs.push((
                    at(c.at),
                    Ev::CrashRelay {
                        relay: *r,
                        down_for: c.length,
                        handover: true,
                    },
                ));
            }
            for (i, p) in f.partitions.iter().enumerate() {
                evs.push((at(p.when.at), Ev::RelayPartition { idx: i, on: true }));
                evs.push((
                    at(p.when.at + p.when.length),
                    Ev::RelayPartition { idx: i, on: false },
                ));
            }
        }
        for (t, e) in evs {
            self.push(t, e);
        }
    }

    pub(super) fn push(&mut self, at: Timestamp, ev: Ev) -> (Timestamp, u64) {
        self.seq += 1;
        let key = (at.max(self.now), self.seq);
        self.queue.insert(key, ev);
        key
    }

    pub(super) fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::ToRelay { conn, inc, bytes } => {
                let Some(c) = self.conns.get(&conn) else {
                    return;
                };
                let r = c.relay;
                if inc != self.relays[r].inc || self.relays[r].relay.is_none() || !c.relay_open {
                    return;
                }
                self.feed_relay(
                    r,
                    RelayInput::Bytes {
                        conn,
                        bytes: &bytes,
                    },
                );
            }
            Ev::ToAgent {
                node,
                inc,
                conn,
                bytes,
            } => {
                let n = &self.nodes[node];
                if n.inc != inc || n.conn != Some(conn) || n.agent.is_none() || n.suspended {
                    return;
                }
                let deliver = bytes
                    .starts_with(b"{\"t\":\"deliver\"")
                    .then(|| sig_of(&bytes))
                    .flatten()
                    .and_then(|s| self.checker.packet_of_sig(&s).map(|p| p.1.clone()));
                self.nodes[node].delivering = deliver.map(|p| (p, false));
                self.feed(node, Input::Bytes(bytes));
                if let Some((pid, seen)) = self.nodes[node].delivering.take() {
                    if !seen && self.nodes[node].agent.is_some() {
                        self.checker.refused(node, &pid);
                    }
                }
            }
            Ev::RelaySeesClose { conn, inc } => {
                let Some(c) = self.conns.get_mut(&conn) else {
                    return;
                };
                let r = c.relay;
                if inc != self.relays[r].inc || self.relays[r].relay.is_none() || !c.relay_open {
                    return;
                }
                c.relay_open = false;
                self.feed_relay(r, RelayInput::Disconnected { conn });
                self.gc_conn(conn);
            }
            Ev::AgentSeesClose { node, inc, conn } => {
                if self.nodes[node].inc != inc || self.nodes[node].conn != Some(conn) {
                    return;
                }
                self.nodes[node].conn = None;
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.agent_open = false;
                }
                self.gc_conn(conn);
                if self.nodes[node].suspended {
                    return;
                }
                self.feed(node, Input::Disconnected);
                self.schedule_reconnect(node);
            }
            Ev::AgentTimer { node, inc } => {
                if self.nodes[node].inc != inc {
                    return;
                }
                self.nodes[node].timer = None;
                if self.nodes[node].suspended || self.nodes[node].agent.is_none() {
                    return;
                }
                self.feed_timeout(node);
            }
            Ev::RelayTimer { relay, inc } => {
                if inc != self.relays[relay].inc {
                    return;
                }
                self.relays[relay].timer = None;
                self.feed_relay(relay, RelayInput::Timeout);
            }
            Ev::Reconnect { node, inc } => {
                if self.nodes[node].inc != inc {
                    return;
                }
                self.nodes[node].reconnect_pending = false;
                self.connect(node);
            }
            Ev::UserAnswer { node, inc, prompt } => {
                if self.defer_if_away(node, || Ev::UserAnswer { node, inc, prompt }) {
                    return;
                }
                if self.nodes[node].inc != inc {
                    return;
                }
                self.answer_prompt(node, prompt);
            }
            Ev::RecoverToRelay { relay, conn, bytes } => {
                self.feed_relay(
                    relay,
                    a2acp_core::relay::RelayInput::Bytes {
                        conn,
                        bytes: &bytes,
                    },
                );
            }
            Ev::DeviceRecovered { node } => self.device_recovered(node),
            Ev::AcceptKey { node, peer } => {
                if self.defer_if_away(node, || Ev::AcceptKey {
                    node,
                    peer: peer.clone(),
                }) {
                    return;
                }
                self.command(node, Command::AcceptKeyChange { address: peer });
            }
            Ev::AcceptSuggestion { node, command } => {
                if self.defer_if_away(node, || Ev::AcceptSuggestion {
                    node,
                    command: command.clone(),
                }) {
                    return;
                }
                self.command(node, command);
            }
            Ev::LlmResult {
                node,
                inc,
                id,
                result,
            } => {
                let Some((id, result)) =
                    self.live(node, inc, (id, result), |(id, result)| Ev::LlmResult {
                        node,
                        inc,
                        id,
                        result,
                    })
                else {
                    return;
                };
                let ok = if result.is_ok() { "answer" } else { "error" };
                let name = self.nodes[node].name.clone();
                self.line(&name, '|', format!("LLM {ok} to request #{id}"), Tag::Note);
                self.feed(
                    node,
                    Input::LlmResult {
                        request_id: id,
                        result,
                        meta: a2acp_core::agent::LlmMeta {
                            model: "simulated".into(),
                            latency_ms: 0,
                        },
                    },
                );
            }
            Ev::ActionResult {
                node,
                inc,
                id,
                result,
            } => {
                let Some((id, result)) =
                    self.live(node, inc, (id, result), |(id, result)| Ev::ActionResult {
                        node,
                        inc,
                        id,
                        result,
                    })
                else {
                    return;
                };
                let name = self.nodes[node].name.clone();
                let outcome = match &result {
                    Ok(f) if f.is_empty() => "ok".to_string(),
                    Ok(f) => format!(
                        "ok: {}",
                        f.iter()
                            .map(|(k, v)| format!("{k} = {v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    Err(e) => format!("failed: {e}"),
                };
                self.line(&name, '|', format!("action #{id} → {outcome}"), Tag::Note);
                self.feed(
                    node,
                    Input::ActionResult {
                        action_id: id,
                        result,
                    },
                );
            }
            Ev::StartThread(i) => {
                let from = self.spec.threads[i].from;
                if self.defer_if_away(from, || Ev::StartThread(i)) {
                    return;
                }
                self.start_thread(i);
            }
            Ev::StartGroup(i) => {
                let from = self.spec.groups[i].coordinator;
                if self.defer_if_away(from, || Ev::StartGroup(i)) {
                    return;
                }
                self.start_group(i);
            }
            Ev::Command(i) => {
                let node = self.spec.commands[i].agent;
                // A device lost or recovered is not the running agent's to wait for.
                let device = matches!(
                    self.spec.commands[i].action,
                    crate::scenario::ScriptAction::LoseDevice
                        | crate::scenario::ScriptAction::Recover
                );
                if !device && self.defer_if_away(node, || Ev::Command(i)) {
                    return;
                }
                self.scripted_command(i);
            }
            Ev::CrashAgent {
                node,
                restart_after,
            } => {
                if self.nodes[node].agent.is_none() {
                    return;
                }
                if !self.spec.crash_mid_step {
                    self.crash_agent(node, restart_after, None);
                    return;
                }
                self.nodes[node].crash_armed = Some(restart_after);
                let inc = self.nodes[node].inc;
                let window = Duration::from_millis(self.faults.between(0, 10_000));
                let at = self.now.add(window);
                self.push(at, Ev::CrashAgentIdle { node, inc });
            }
            Ev::CrashAgentIdle { node, inc } => {
                if self.nodes[node].inc == inc {
                    if let Some(r) = self.nodes[node].crash_armed.take() {
                        self.crash_agent(node, r, None);
                    }
                }
            }
            Ev::RestartAgent { node } => self.restart_agent(node),
            Ev::Suspend { node, length } => self.suspend(node, length),
            Ev::Resume { node } => self.resume(node),
            Ev::CrashRelay {
                relay,
                down_for,
                handover,
            } => {
                if self.relays[relay].relay.is_none() {
                    return;
                }
                self.relays[relay].crash_armed = Some(down_for);
                self.relays[relay].handover_armed = handover;
                let inc = self.relays[relay].inc;
                let window = if handover {
                    Duration::from_secs(60)
                } else {
                    Duration::from_millis(self.faults.between(0, 3000))
                };
                let at = self.now.add(window);
                self.push(at, Ev::CrashRelayIdle { relay, inc });
            }
            Ev::CrashRelayIdle { relay, inc } => {
                if inc == self.relays[relay].inc {
                    if let Some(d) = self.relays[relay].crash_armed.take() {
                        self.crash_relay(relay, d, None);
                    }
                }
            }
            Ev::RestartRelay { relay } => self.restart_relay(relay),
            Ev::ToDialer {
                relay,
                inc,
                conn,
                bytes,
            } => self.frame_to_dialer(relay, inc, conn, bytes),
            Ev::DialerSeesClose { relay, inc, conn } => self.dialer_sees_close(relay, inc, conn),
            Ev::Discovered { relay, inc, domain } => self.discovered(relay, inc, domain),
            Ev::LinkOpen {
                conn,
                dialer_inc,
                acceptor_inc,
            } => self.link_open(conn, dialer_inc, acceptor_inc),
            Ev::DialFailed { relay, inc, domain } => self.dial_failed(relay, inc, domain),
            Ev::RelayPartition { idx, on } => self.relay_partition(idx, on),
            Ev::Partition { idx, on } => {
                let p = self.spec.partitions[idx];
                let name = self.nodes[p.agent].name.clone();
                let dir = match p.direction {
                    Direction::Both => "both ways",
                    Direction::ToRelay => "agent → relay",
                    Direction::FromRelay => "relay → agent",
                };
                if on {
                    self.active_partitions.insert(idx);
                    self.line(
                        "net",
                        '|',
                        format!(
                            "partition of {name} ({dir}) for {}",
                            fmt_duration(p.when.length)
                        ),
                        Tag::Fault,
                    );
                } else {
                    self.active_partitions.remove(&idx);
                    self.line(
                        "net",
                        '|',
                        format!("partition of {name} healed"),
                        Tag::Fault,
                    );
                }
            }
            Ev::KeyChange(i) => self.key_change(i),
        }
    }

    /// The payload of an event of incarnation `inc` for `node`, if it is to be handled
    /// now: `None` if it is stale (from before a crash: dropped) or the device is shut
    /// (kept, as `defer(payload)`, until it is back on).
    fn live<T>(
        &mut self,
        node: usize,
        inc: u32,
        payload: T,
        defer: impl FnOnce(T) -> Ev,
    ) -> Option<T> {
        if self.nodes[node].inc != inc {
            return None;
        }
        if self.nodes[node].suspended {
            let e = defer(payload);
            self.nodes[node].deferred.push(e);
            return None;
        }
        Some(payload)
    }

    /// Keeps an event for later if the node's device is shut or its agent is down.
    pub(super) fn defer_if_away(&mut self, node: usize, ev: impl FnOnce() -> Ev) -> bool {
        let n = &self.nodes[node];
        if n.suspended || n.agent.is_none() {
            let e = ev();
            self.nodes[node].deferred.push(e);
            return true;
        }
        false
    }

    pub(super) fn replay_deferred(&mut self, node: usize) {
        let evs = std::mem::take(&mut self.nodes[node].deferred);
        let inc = self.nodes[node].inc;
        for (k, e) in evs.into_iter().enumerate() {
            let e = match e {
                Ev::UserAnswer { node, prompt, .. } => Ev::UserAnswer { node, inc, prompt },
                Ev::LlmResult {
                    node, id, result, ..
                } => Ev::LlmResult {
                    node,
                    inc,
                    id,
                    result,
                },
                Ev::ActionResult {
                    node, id, result, ..
                } => Ev::ActionResult {
                    node,
                    inc,
                    id,
                    result,
                },
                other => other,
            };
            let at = self.now.add(Duration::from_millis(1000 + k as u64));
            self.push(at, e);
        }
    }
}
