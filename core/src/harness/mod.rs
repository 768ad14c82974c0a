//! An in-memory network: agents and one relay on one virtual clock.
//!
//! In the manner of quinn-proto's `tests/util.rs` `Pair`, [`Net`] drives the same state
//! machines the runtimes drive, through their public contract only: it hands frames
//! between them with a fixed latency, executes persist outputs into in-memory stores,
//! collects prompts, actions and notifications for a scripted user, fires timers, and
//! writes a transcript. Nothing here reads a clock or the OS: a run is a pure function of
//! its inputs and seeds. Crate users can use it to test their agent policies.

pub mod dinner;
pub mod game_night;
pub mod hostile;

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

use crate::address::Address;
use crate::agent::{
    ActionRequest, Agent, AgentConfig, AuditRecord, Command, ConsentAnswer, Input, LlmRequest,
    Notification, Output, Prompt, ResolutionAnswer,
};
use crate::crypto::IdentityKey;
use crate::link::{ClientFrame, RelayFrame};
use crate::packet::Context;
use crate::persist::apply;
use crate::relay::{ConnId, Relay, RelayConfig, RelayInput, RelayOutput};
use crate::time::Timestamp;
use crate::transcript::{describe_command, describe_event, describe_prompt, Detail, RECEIVED};

pub use crate::transcript::{compact, describe_relay_event, short, summarize_packet, IdNames};

/// One agent of a [`Net`] and what its user sees.
pub struct Node {
    /// The state machine.
    pub agent: Agent,
    /// Short name used in transcripts (the address's user part).
    pub name: String,
    /// Its persisted records.
    pub store: BTreeMap<String, Vec<u8>>,
    /// Prompts shown and not yet answered or withdrawn, by id.
    pub prompts: BTreeMap<u64, Prompt>,
    /// Action requests not yet answered.
    pub actions: VecDeque<ActionRequest>,
    /// LLM requests not yet answered.
    pub llm: VecDeque<LlmRequest>,
    /// Every notification shown (one with the key of an earlier one replaces it).
    pub notifications: Vec<Notification>,
    /// Every prompt shown, in order (for metrics).
    pub prompts_shown: u64,
    /// Every audit record, in order (tests match on their typed events).
    pub audit: Vec<AuditRecord>,
    /// Frames sent to the relay so far.
    pub frames_sent: u64,
    conn: Option<ConnId>,
    config: AgentConfig,
    /// The seed of the identity key a restart opens the agent with (a runtime that
    /// finished a rotation restarts with the new key).
    pub identity: [u8; 32],
}

/// A bare connection to the relay that no agent state machine drives: the frames the
/// relay sends it wait in `inbox` for whoever drives it (a [`hostile::HostilePeer`]). The
/// relay's heartbeat pings are answered by the net, as a runtime's link would.
struct Client {
    conn: Option<ConnId>,
    inbox: VecDeque<Vec<u8>>,
}

impl Node {
    /// Whether the agent has a connection to the relay open.
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }
}

enum Hop {
    ToRelay(ConnId, Vec<u8>),
    ToAgent(usize, ConnId, Vec<u8>),
    ToClient(usize, ConnId, Vec<u8>),
    ClosedByRelay(usize, ConnId),
    ClosedByAgent(ConnId),
}

/// One transcript line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// When.
    pub at: Timestamp,
    /// Who (agent name or `relay`).
    pub who: String,
    /// `>` sent, `<` received, `|` state change or local event.
    pub mark: char,
    /// What.
    pub text: String,
}

/// Agents, a relay and the wire between them.
pub struct Net {
    /// The virtual clock.
    pub now: Timestamp,
    /// The relay.
    pub relay: Relay,
    /// The relay's persisted records.
    pub relay_store: BTreeMap<String, Vec<u8>>,
    /// The wake-ups the relay asked for: when, and to which endpoint.
    pub wake_ups: Vec<(Timestamp, String)>,
    /// The agents.
    pub nodes: Vec<Node>,
    /// One-way latency between an agent and the relay.
    pub latency: Duration,
    /// Whether the relay is running.
    pub relay_up: bool,
    /// Every event so far.
    pub transcript: Vec<Line>,
    start: Timestamp,
    wire: BTreeMap<(Timestamp, u64), Hop>,
    hop_seq: u64,
    next_conn: u64,
    conns: BTreeMap<ConnId, usize>,
    clients: Vec<Client>,
    client_conns: BTreeMap<ConnId, usize>,
    relay_config: RelayConfig,
    relay_seed: [u8; 32],
}

// Test support: a test that names a node index the net does not have, or whose persisted
// records do not restore, is wrong, and the net fails it on the spot (a panic, as an assert).
#[allow(clippy::indexing_slicing, clippy::panic)]
impl Net {
    /// A network whose relay serves `domain`, starting at `start`.
    pub fn new(domain: &str, start: Timestamp, seed: [u8; 32]) -> Self {
        Self::with_relay_config(
            RelayConfig {
                domain: domain.to_string(),
                ..RelayConfig::default()
            },
            start,
            seed,
        )
    }

    /// A network whose relay has `relay_config`, starting at `start`.
    pub fn with_relay_config(relay_config: RelayConfig, start: Timestamp, seed: [u8; 32]) -> Self {
        Net {
            now: start,
            relay: Relay::new(relay_config.clone(), seed),
            relay_store: BTreeMap::new(),
            wake_ups: Vec::new(),
            nodes: Vec::new(),
            latency: Duration::from_millis(20),
            relay_up: true,
            transcript: Vec::new(),
            start,
            wire: BTreeMap::new(),
            hop_seq: 0,
            next_conn: 1,
            conns: BTreeMap::new(),
            clients: Vec::new(),
            client_conns: BTreeMap::new(),
            relay_config,
            relay_seed: seed,
        }
    }

    /// Adds a bare relay client (not yet connected) and returns its index: a connection
    /// driven frame by frame by the caller, e.g. a [`hostile::HostilePeer`].
    pub fn add_client(&mut self) -> usize {
        self.clients.push(Client {
            conn: None,
            inbox: VecDeque::new(),
        });
        self.clients.len() - 1
    }

    /// Opens a connection from client `c` to the relay (its challenge arrives in its inbox).
    pub fn connect_client(&mut self, c: usize) {
        let Some(cl) = self.clients.get_mut(c) else {
            return;
        };
        if !self.relay_up || cl.conn.is_some() {
            return;
        }
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        cl.conn = Some(conn);
        self.client_conns.insert(conn, c);
        // Clients come from sources of their own, apart from the agents' (`Source(i)`).
        self.relay.handle(
            self.now,
            RelayInput::Connected {
                conn,
                source: crate::relay::Source(u128::MAX - c as u128),
            },
        );
        self.drain_relay();
    }

    /// Whether client `c` is connected.
    pub fn client_connected(&self, c: usize) -> bool {
        self.clients.get(c).is_some_and(|cl| cl.conn.is_some())
    }

    /// Puts one frame of client `c` on the wire to the relay (dropped if not connected).
    pub fn client_send(&mut self, c: usize, bytes: Vec<u8>) {
        if let Some(conn) = self.clients.get(c).and_then(|cl| cl.conn) {
            self.push(Hop::ToRelay(conn, bytes));
        }
    }

    /// The frames the relay sent client `c` since the last call, in order.
    pub fn client_inbox(&mut self, c: usize) -> Vec<Vec<u8>> {
        self.clients
            .get_mut(c)
            .map(|cl| cl.inbox.drain(..).collect())
            .unwrap_or_default()
    }

    /// Adds an agent (not yet connected); returns its index.
    pub fn add_agent(
        &mut self,
        config: AgentConfig,
        identity_seed: [u8; 32],
        seed: [u8; 32],
    ) -> usize {
        let name = config.address.user().to_string();
        let mut agent = Agent::new(config.clone(), IdentityKey::from_seed(identity_seed), seed);
        crate::bridge::install(&mut agent);
        self.nodes.push(Node {
            agent,
            name,
            store: BTreeMap::new(),
            prompts: BTreeMap::new(),
            actions: VecDeque::new(),
            llm: VecDeque::new(),
            notifications: Vec::new(),
            prompts_shown: 0,
            audit: Vec::new(),
            frames_sent: 0,
            conn: None,
            config,
            identity: identity_seed,
        });
        let i = self.nodes.len() - 1;
        self.drain_agent(i);
        i
    }

    /// The index of the agent called `name`.
    pub fn node(&self, name: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .unwrap_or(usize::MAX)
    }

    /// The address of agent `i`.
    pub fn address(&self, i: usize) -> Address {
        self.nodes[i].agent.address().clone()
    }

    /// Opens a connection from agent `i` to the relay.
    pub fn connect(&mut self, i: usize) {
        if !self.relay_up || self.nodes[i].conn.is_some() {
            return;
        }
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.nodes[i].conn = Some(conn);
        self.conns.insert(conn, i);
        self.nodes[i].agent.handle(self.now, Input::Connected);
        self.drain_agent(i);
        self.relay.handle(
            self.now,
            RelayInput::Connected {
                conn,
                source: crate::relay::Source(i as u128),
            },
        );
        self.drain_relay();
    }

    /// Drops agent `i`'s connection (both sides notice at once).
    pub fn disconnect(&mut self, i: usize) {
        if let Some(conn) = self.nodes[i].conn.take() {
            self.conns.remove(&conn);
            self.nodes[i].agent.handle(self.now, Input::Disconnected);
            self.drain_agent(i);
            if self.relay_up {
                self.relay
                    .handle(self.now, RelayInput::Disconnected { conn });
                self.drain_relay();
            }
        }
    }

    /// Crashes the relay: in-flight frames and connections are lost; what it persisted stays.
    pub fn crash_relay(&mut self) {
        self.relay_up = false;
        self.wire.clear();
        self.line_relay("relay crashed".into());
        for cl in &mut self.clients {
            cl.conn = None;
        }
        self.client_conns.clear();
        for i in 0..self.nodes.len() {
            if let Some(conn) = self.nodes[i].conn.take() {
                self.conns.remove(&conn);
                self.nodes[i].agent.handle(self.now, Input::Disconnected);
                self.drain_agent(i);
            }
        }
    }

    /// Restarts the relay from its persisted records.
    pub fn restart_relay(&mut self) {
        let records = self.relay_store.clone();
        self.relay = match Relay::restore(self.relay_config.clone(), self.relay_seed, records) {
            Ok(r) => r,
            Err(e) => panic!("relay restore failed: {e}"),
        };
        self.relay_up = true;
        self.line_relay("relay restarted from its persisted state".into());
    }

    /// Crashes agent `i` and restarts it from its last persisted records.
    pub fn crash_and_restart_agent(&mut self, i: usize, seed: [u8; 32]) {
        self.disconnect(i);
        let n = &mut self.nodes[i];
        n.prompts.clear();
        n.actions.clear();
        n.llm.clear();
        let records = n.store.clone();
        n.agent = match Agent::restore(
            n.config.clone(),
            IdentityKey::from_seed(n.identity),
            seed,
            records,
        ) {
            Ok(a) => a,
            Err(e) => panic!("agent restore failed: {e}"),
        };
        crate::bridge::install(&mut n.agent);
        let name = n.name.clone();
        self.line(&name, '|', "restarted from its persisted state".into());
        self.drain_agent(i);
    }

    /// Agent `i`'s device is lost: it is replaced by a new one with an empty home and the
    /// identity key of `identity_seed` (a recovery, SPEC-NOTES "Recovery"). Not connected.
    pub fn lose_device(&mut self, i: usize, identity_seed: [u8; 32], seed: [u8; 32]) {
        self.disconnect(i);
        let n = &mut self.nodes[i];
        n.prompts.clear();
        n.actions.clear();
        n.llm.clear();
        n.store.clear();
        n.identity = identity_seed;
        n.agent = Agent::new(
            n.config.clone(),
            IdentityKey::from_seed(identity_seed),
            seed,
        );
        crate::bridge::install(&mut n.agent);
        let name = n.name.clone();
        self.line(
            &name,
            '|',
            "device lost: a new one with an empty home".into(),
        );
        self.drain_agent(i);
    }

    /// Gives agent `i` a user command.
    pub fn command(&mut self, i: usize, c: Command) {
        let text = describe_command(&c, Detail::Buttons);
        let name = self.nodes[i].name.clone();
        self.line(&name, '|', format!("user: {text}"));
        self.nodes[i].agent.handle(self.now, Input::Command(c));
        self.drain_agent(i);
    }

    /// The oldest open prompt of agent `i`.
    pub fn prompt(&self, i: usize) -> Option<Prompt> {
        self.nodes[i].prompts.values().next().cloned()
    }

    /// Answers a consent prompt of agent `i`.
    pub fn answer_consent(&mut self, i: usize, prompt_id: u64, answer: ConsentAnswer) {
        self.nodes[i].prompts.remove(&prompt_id);
        self.command(i, Command::AnswerConsent { prompt_id, answer });
    }

    /// Answers a resolution prompt of agent `i`.
    pub fn answer_resolution(&mut self, i: usize, prompt_id: u64, answer: ResolutionAnswer) {
        self.nodes[i].prompts.remove(&prompt_id);
        self.command(i, Command::AnswerResolution { prompt_id, answer });
    }

    /// Completes agent `i`'s oldest pending action with `result`.
    pub fn finish_action(&mut self, i: usize, result: Result<(), String>) -> Option<ActionRequest> {
        self.finish_action_with(i, result.map(|()| Context::new()))
    }

    /// Completes agent `i`'s oldest pending action with `result` and what it reports
    /// (a check's findings).
    pub fn finish_action_with(
        &mut self,
        i: usize,
        result: Result<Context, String>,
    ) -> Option<ActionRequest> {
        let a = self.nodes[i].actions.pop_front()?;
        let name = self.nodes[i].name.clone();
        let verb = match (a.undo, a.check) {
            (true, _) => "undo ",
            (false, true) => "check ",
            (false, false) => "",
        };
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
        self.line(
            &name,
            '|',
            format!("action {verb}{} → {outcome}", a.action.action),
        );
        self.nodes[i].agent.handle(
            self.now,
            Input::ActionResult {
                action_id: a.id,
                result,
            },
        );
        self.drain_agent(i);
        Some(a)
    }

    /// Answers agent `i`'s oldest LLM request.
    pub fn answer_llm(&mut self, i: usize, result: Result<String, String>) -> Option<LlmRequest> {
        let r = self.nodes[i].llm.pop_front()?;
        self.nodes[i].agent.handle(
            self.now,
            Input::LlmResult {
                request_id: r.id,
                result,
                meta: crate::agent::LlmMeta {
                    model: format!("scripted-{}", r.tier),
                    latency_ms: 0,
                },
            },
        );
        self.drain_agent(i);
        Some(r)
    }

    /// Delivers frames until none is in flight; timers fire only as time passes for them.
    pub fn settle(&mut self) {
        let mut guard = 0u32;
        while let Some((&(at, _), _)) = self.wire.iter().next() {
            self.advance_timers_to(at);
            self.now = self.now.max(at);
            if let Some((_, hop)) = self.wire.pop_first() {
                self.deliver(hop);
            }
            guard += 1;
            if guard > 1_000_000 {
                break;
            }
        }
    }

    /// How many frames are in flight to agent `i`.
    pub fn in_flight_to(&self, i: usize) -> usize {
        self.wire
            .values()
            .filter(|h| matches!(h, Hop::ToAgent(j, _, _) if *j == i))
            .count()
    }

    /// Swaps the last two frames in flight to agent `i`, as a network that reorders
    /// would; returns whether there were two.
    pub fn swap_last_two_to(&mut self, i: usize) -> bool {
        let keys: Vec<(Timestamp, u64)> = self
            .wire
            .iter()
            .filter(|(_, h)| matches!(h, Hop::ToAgent(j, _, _) if *j == i))
            .map(|(k, _)| *k)
            .collect();
        let [.., x, y] = keys[..] else {
            return false;
        };
        let (Some(hx), Some(hy)) = (self.wire.remove(&x), self.wire.remove(&y)) else {
            return false;
        };
        self.wire.insert(x, hy);
        self.wire.insert(y, hx);
        true
    }

    /// Lets `d` of virtual time pass, delivering frames and firing timers on the way.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now.add(d);
        loop {
            let next_hop = self.wire.keys().next().map(|k| k.0);
            let next_timer = self.next_timer();
            let next = match (next_hop, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(x) => x,
                    None => break,
                },
            };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            if next_hop == Some(next) {
                if let Some((_, hop)) = self.wire.pop_first() {
                    self.deliver(hop);
                }
            } else {
                self.fire_timers();
            }
        }
        self.now = end;
    }

    fn next_timer(&self) -> Option<Timestamp> {
        let mut t = if self.relay_up {
            self.relay.poll_timeout()
        } else {
            None
        };
        for n in &self.nodes {
            if let Some(x) = n.agent.poll_timeout() {
                t = Some(t.map_or(x, |c: Timestamp| c.min(x)));
            }
        }
        t
    }

    fn advance_timers_to(&mut self, at: Timestamp) {
        while let Some(t) = self.next_timer() {
            if t > at {
                break;
            }
            self.now = self.now.max(t);
            self.fire_timers();
        }
    }

    fn fire_timers(&mut self) {
        let now = self.now;
        if self.relay_up && self.relay.poll_timeout().is_some_and(|t| t <= now) {
            self.relay.handle(now, RelayInput::Timeout);
            self.drain_relay();
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].agent.poll_timeout().is_some_and(|t| t <= now) {
                self.nodes[i].agent.handle_timeout(now);
                self.drain_agent(i);
            }
        }
    }

    fn push(&mut self, hop: Hop) {
        let at = self.now.add(self.latency);
        self.hop_seq += 1;
        self.wire.insert((at, self.hop_seq), hop);
    }

    fn deliver(&mut self, hop: Hop) {
        match hop {
            Hop::ToRelay(conn, bytes) => {
                if self.relay_up
                    && (self.conns.contains_key(&conn) || self.client_conns.contains_key(&conn))
                {
                    self.relay.handle(
                        self.now,
                        RelayInput::Bytes {
                            conn,
                            bytes: &bytes,
                        },
                    );
                    self.drain_relay();
                }
            }
            Hop::ToAgent(i, conn, bytes) => {
                if self.nodes[i].conn == Some(conn) {
                    self.nodes[i].agent.handle(self.now, Input::Bytes(bytes));
                    self.drain_agent(i);
                }
            }
            Hop::ToClient(c, conn, bytes) => {
                if self.clients.get(c).is_some_and(|cl| cl.conn == Some(conn)) {
                    if let Ok(RelayFrame::Ping { n }) = RelayFrame::from_bytes(&bytes) {
                        self.push(Hop::ToRelay(conn, ClientFrame::Pong { n }.to_bytes()));
                    } else {
                        self.clients[c].inbox.push_back(bytes);
                    }
                }
            }
            Hop::ClosedByRelay(i, conn) => {
                if self.nodes[i].conn == Some(conn) {
                    self.nodes[i].conn = None;
                    self.conns.remove(&conn);
                    self.nodes[i].agent.handle(self.now, Input::Disconnected);
                    self.drain_agent(i);
                }
            }
            Hop::ClosedByAgent(conn) => {
                if self.relay_up {
                    self.relay
                        .handle(self.now, RelayInput::Disconnected { conn });
                    self.drain_relay();
                }
            }
        }
    }

    fn drain_relay(&mut self) {
        while let Some(o) = self.relay.poll_output() {
            match o {
                RelayOutput::Persist(op) => apply(&mut self.relay_store, &op),
                RelayOutput::Send { conn, bytes } => {
                    if let Some(&i) = self.conns.get(&conn) {
                        self.push(Hop::ToAgent(i, conn, bytes));
                    } else if let Some(&c) = self.client_conns.get(&conn) {
                        self.push(Hop::ToClient(c, conn, bytes));
                    }
                }
                RelayOutput::Close { conn, code } => {
                    if let Some(c) = self.client_conns.remove(&conn) {
                        self.clients[c].conn = None;
                        self.line_relay(format!(
                            "closed the connection of client #{c} ({})",
                            code.as_str()
                        ));
                    }
                    if let Some(&i) = self.conns.get(&conn) {
                        self.line_relay(format!(
                            "closed the connection of {} ({})",
                            self.nodes[i].name,
                            code.as_str()
                        ));
                        self.push(Hop::ClosedByRelay(i, conn));
                    }
                }
                RelayOutput::Event(e) => {
                    if let Some(text) = describe_relay_event(&e) {
                        self.line_relay(text);
                    }
                }
                RelayOutput::WakeUp { endpoint } => {
                    self.line_relay("wake-up sent".to_string());
                    self.wake_ups.push((self.now, endpoint));
                }
                // The harness runs one relay, without federation nor a cluster.
                RelayOutput::Discover { .. }
                | RelayOutput::Dial { .. }
                | RelayOutput::Cluster(_) => {}
            }
        }
    }

    fn drain_agent(&mut self, i: usize) {
        // Lines of one drain are shown as they happened logically: what was received,
        // then the agent's own record (sends, state changes), then what the user sees.
        let first = self.transcript.len();
        let mut cats: Vec<u8> = Vec::new();
        while let Some(o) = self.nodes[i].agent.poll_output() {
            let before = self.transcript.len();
            let mut cat = 2u8;
            let name = self.nodes[i].name.clone();
            match o {
                Output::Persist(op) => apply(&mut self.nodes[i].store, &op),
                Output::Send(bytes) => {
                    if let Some(conn) = self.nodes[i].conn {
                        self.nodes[i].frames_sent += 1;
                        self.push(Hop::ToRelay(conn, bytes));
                    }
                }
                Output::Prompt(p) => {
                    let text = describe_prompt(&p, Detail::Buttons);
                    self.nodes[i].prompts_shown += 1;
                    self.nodes[i].prompts.insert(p.id, p);
                    self.line(&name, '|', text);
                }
                Output::ClosePrompt(id) => {
                    if self.nodes[i].prompts.remove(&id).is_some() {
                        self.line(&name, '|', format!("prompt #{id} withdrawn"));
                    }
                }
                Output::CallLlm(r) => {
                    self.line(
                        &name,
                        '|',
                        format!("LLM request #{} (attempt {})", r.id, r.attempt),
                    );
                    self.nodes[i].llm.push_back(r);
                }
                Output::ExecuteAction(a) => {
                    let verb = match (a.undo, a.check) {
                        (true, _) => "undo",
                        (false, true) => "check",
                        (false, false) => "execute",
                    };
                    self.line(&name, '|', format!("{verb} action {}", a.action.action));
                    self.nodes[i].actions.push_back(a);
                }
                Output::Notify(n) => {
                    self.line(
                        &name,
                        '|',
                        format!("notify ({:?}): {}", n.kind, n.text).to_lowercase_kind(),
                    );
                    let ns = &mut self.nodes[i].notifications;
                    match ns.iter_mut().find(|x| x.key.is_some() && x.key == n.key) {
                        Some(x) => *x = n,
                        None => ns.push(n),
                    }
                }
                Output::Audit(a) => {
                    let (mark, text) =
                        describe_event(&self.nodes[i].agent, a.thread_id.as_deref(), &a.event);
                    self.nodes[i].audit.push(a);
                    cat = if mark == RECEIVED { 0 } else { 1 };
                    self.line(&name, mark, text);
                }
                Output::CloseConnection => {
                    if let Some(conn) = self.nodes[i].conn.take() {
                        self.conns.remove(&conn);
                        self.push(Hop::ClosedByAgent(conn));
                    }
                }
                // The in-memory network has no bridge listeners: a bridged peer's
                // threads are read through the agent by whoever drives it in a test,
                // and no bridge's endpoint is reached.
                Output::Bridged(_) => {}
            }
            cats.extend(std::iter::repeat_n(cat, self.transcript.len() - before));
        }
        let lines: Vec<Line> = self.transcript.drain(first..).collect();
        let mut tagged: Vec<(u8, Line)> = cats.into_iter().zip(lines).collect();
        tagged.sort_by_key(|(c, _)| *c);
        self.transcript.extend(tagged.into_iter().map(|(_, l)| l));
    }

    fn line(&mut self, who: &str, mark: char, text: String) {
        self.transcript.push(Line {
            at: self.now,
            who: who.to_string(),
            mark,
            text,
        });
    }

    fn line_relay(&mut self, text: String) {
        self.line("relay", '|', text);
    }

    /// Renders the transcript of one participant (`None`: everyone), s2n-quic style: a
    /// legend line, a time column, `>` sent / `<` received / `|` state change. Random ids
    /// are replaced by stable names in order of first appearance.
    pub fn render(&self, who: Option<&str>) -> String {
        let mut out = String::from(
            "# time since start | who | > sent, < received, | state change or local event\n",
        );
        let width = self
            .nodes
            .iter()
            .map(|n| n.name.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let mut names = IdNames::default();
        for l in &self.transcript {
            if who.is_some_and(|w| w != l.who) {
                continue;
            }
            let t = l.at.since(self.start);
            let _ = writeln!(
                out,
                "{:>5}.{:03}s {:<width$} {} {}",
                t.as_secs(),
                t.subsec_millis(),
                l.who,
                l.mark,
                names.scrub(&l.text),
            );
        }
        out
    }
}

trait LowerKind {
    fn to_lowercase_kind(self) -> String;
}

impl LowerKind for String {
    fn to_lowercase_kind(self) -> String {
        // "notify (Escalated): …" → "notify (escalated): …"
        match self.split_once("): ") {
            Some((head, tail)) => format!("{}): {tail}", head.to_lowercase()),
            None => self,
        }
    }
}

/// Drains `agent`'s outputs into `outputs`, keeping `records` as its store would and
/// answering every action it asks for as done, until it asks for no more.
pub fn drain_answering_actions(
    agent: &mut crate::agent::Agent,
    now: crate::time::Timestamp,
    outputs: &mut Vec<crate::agent::Output>,
    records: &mut std::collections::BTreeMap<String, Vec<u8>>,
) {
    loop {
        let mut results = Vec::new();
        while let Some(o) = agent.poll_output() {
            match &o {
                crate::agent::Output::Persist(crate::persist::PersistOp::Put { key, value }) => {
                    records.insert(key.clone(), value.clone());
                }
                crate::agent::Output::Persist(crate::persist::PersistOp::Delete { key }) => {
                    records.remove(key);
                }
                crate::agent::Output::ExecuteAction(a) => results.push(a.id),
                _ => {}
            }
            outputs.push(o);
        }
        if results.is_empty() {
            return;
        }
        for id in results {
            agent.handle(
                now,
                crate::agent::Input::ActionResult {
                    action_id: id,
                    result: Ok(crate::packet::Context::new()),
                },
            );
        }
    }
}

/// The prompts `outputs` opened and did not close again, in id order.
pub fn open_prompts(outputs: &[crate::agent::Output]) -> Vec<crate::agent::Prompt> {
    use crate::agent::Output;
    let mut open: std::collections::BTreeMap<u64, crate::agent::Prompt> =
        std::collections::BTreeMap::new();
    for o in outputs {
        match o {
            Output::Prompt(p) => {
                open.insert(p.id, p.clone());
            }
            Output::ClosePrompt(id) => {
                open.remove(id);
            }
            _ => {}
        }
    }
    open.into_values().collect()
}
