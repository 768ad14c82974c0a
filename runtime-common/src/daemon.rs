//! The agent daemon, on any executor: the loop that owns an
//! [`AgentHost`] — the core, its SQLite store and its prompts — and serves the relay's
//! frames, the timer, control requests and the terminal ([`run`]); the relay link that
//! reconnects with exponential backoff and jitter ([`link_loop`]); and the control
//! socket's per-request handling ([`bind_control`], [`answer_control_line`]).
//!
//! A binding (tokio, smol) spawns [`run`] and [`link_loop`] as tasks and gives them its
//! timer (`sleep`) and its TCP connect; the channels between them are `flume`'s, which
//! work on every executor. Every input's persist records are committed before the frames
//! it produced are handed to the link (the host does that), and a prompt never blocks
//! anything: prompts are shown and answered while the other threads go on.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use a2acp_core::agent::{Command, Input, Prompt};
use a2acp_core::Timestamp;
use async_tungstenite::tungstenite::{Message, Utf8Bytes};
use async_tungstenite::WebSocketStream;
use futures_util::io::{AsyncRead, AsyncWrite};
use futures_util::{SinkExt, StreamExt};
use tracing::{debug, info, warn};

use crate::agent_host::{AgentHost, Effect, HostError};
use crate::control::{Request, Response, MAX_REQUEST_BYTES};
use crate::prompt::{self, PromptUi, UiOut};
use crate::race::{never, race};
use crate::scripted::ScriptedUser;
use crate::term::{Term, UiKey};
use crate::ws::ConnectError;
use serde_json::Value;

/// Something that happened in an agent, for watchers (the demo, tests).
// Events are cloned per subscriber and short-lived; boxing the effect would only add an
// allocation per event.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// The relay link went up (`true`, WebSocket connected) or down.
    Link(bool),
    /// An effect the agent executed.
    Effect(Effect),
    /// Another connection of this agent took over; the agent stopped reconnecting.
    Replaced,
}

/// How to run an agent.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Relay URL (`ws://host:port` or `wss://host:port`).
    pub relay: String,
    /// Whom to trust for a `wss://` relay (`None`: the web PKI roots only).
    pub tls: Option<crate::tls::ClientTls>,
    /// Name in transcript lines.
    pub name: String,
    /// Print transcript lines to stdout.
    pub transcript: bool,
    /// Time zero of the transcript (`None`: absolute times).
    pub started: Option<Instant>,
    /// Answer every prompt with this scripted user.
    pub auto: Option<ScriptedUser>,
    /// Answer prompts on this terminal, one keystroke per choice.
    pub terminal: Option<Term>,
    /// Print prompts to stdout with the `a2acp answer` command to use.
    pub print_prompts: bool,
    /// Serve the control socket at this path.
    pub control_socket: Option<PathBuf>,
    /// Shortest reconnection delay.
    pub backoff_min: Duration,
    /// Longest reconnection delay.
    pub backoff_max: Duration,
    /// Longest reconnection delay while the relay was reachable within
    /// [`RECENTLY_REACHABLE`] (a restart, a short network cut).
    pub backoff_short_max: Duration,
    /// Serve A2A clients (`--a2a-listen`; the tokio binding only).
    pub a2a: Option<crate::a2a::A2aOptions>,
    /// The longest one call to a plain A2A agent may take (§18; tests shorten it).
    pub a2a_call_timeout: Duration,
    /// How long a blocking `SendMessage` of an A2A client is held at most
    /// ([`BLOCKING_WAIT`](crate::a2a::BLOCKING_WAIT); tests shorten it).
    pub a2a_blocking_wait: Duration,
}

/// How long after losing the relay the short backoff cap
/// ([`RunOptions::backoff_short_max`]) applies; after that, the long one.
pub const RECENTLY_REACHABLE: Duration = Duration::from_secs(60);

/// How long `thread start` (the control request) waits for the relay to accept or
/// refuse the thread's first packet before it answers anyway.
pub const FIRST_PACKET_WAIT: Duration = Duration::from_secs(5);

impl RunOptions {
    /// Defaults for `relay`.
    pub fn new(relay: &str, name: &str) -> Self {
        RunOptions {
            relay: relay.to_string(),
            tls: None,
            name: name.to_string(),
            transcript: false,
            started: None,
            auto: None,
            terminal: None,
            print_prompts: false,
            control_socket: None,
            backoff_min: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
            backoff_short_max: Duration::from_secs(5),
            a2a: None,
            a2a_call_timeout: crate::a2a_client::CALL_TIMEOUT,
            a2a_blocking_wait: crate::a2a::BLOCKING_WAIT,
        }
    }
}

/// Why an agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The host failed (store, restore…).
    #[error(transparent)]
    Host(#[from] HostError),
    /// The control socket could not be served.
    #[error("control socket {path}: {message}")]
    Control {
        /// The socket.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The agent task is gone.
    #[error("the agent has stopped")]
    Gone,
}

/// A request to the agent loop, from its handle or the control socket.
pub enum Ctl {
    /// A control request and where to answer.
    Request(Request, flume::Sender<Response>),
    /// A user command, acknowledged once handled.
    Command(Command, flume::Sender<()>),
    /// A JSON-RPC request of an A2A client (the A2A listener), answered once its
    /// records are committed.
    A2a(crate::a2a::A2aCall, flume::Sender<crate::a2a::A2aAnswer>),
    /// A Phase-1 message (`POST /a2a/messages`, seed 001), answered once its records are
    /// committed.
    Phase1(Vec<u8>, flume::Sender<a2acp_core::agent::Phase1Reply>),
    /// Stop (state is already committed).
    Stop,
}

impl std::fmt::Debug for Ctl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ctl")
    }
}

/// What the relay link tells the agent loop.
#[derive(Debug)]
pub enum LinkEvent {
    /// Connected: write frames through this channel.
    Up(flume::Sender<LinkOut>),
    /// A frame from the relay.
    Frame(Vec<u8>),
    /// The connection ended; the link reconnects once the agent loop let go of the
    /// connection's [`LinkOut`] channel (unless it said [`LinkOut::Replaced`] on it).
    Down,
    /// The agent was refused by the relay for good in this run ([`LinkOut::GiveUp`]
    /// with no retry): the link gave up.
    GaveUp,
}

/// What the agent loop asks the relay link to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkOut {
    /// One frame (a WebSocket text message).
    Frame(Vec<u8>),
    /// Close the connection.
    Close,
    /// The relay refused this agent's registration: close the connection and reconnect
    /// only after this long (`None`: not in this run).
    GiveUp(Option<Duration>),
    /// Another connection of this agent took over at the relay (the core's
    /// [`Agent::was_replaced`](a2acp_core::agent::Agent::was_replaced)): close the
    /// connection and stop reconnecting.
    Replaced,
}

/// Sends a control request to an agent loop and waits for its answer.
pub async fn request(ctl: &flume::Sender<Ctl>, req: Request) -> Result<Response, AgentError> {
    let (tx, rx) = flume::bounded(1);
    ctl.send_async(Ctl::Request(req, tx))
        .await
        .map_err(|_| AgentError::Gone)?;
    rx.recv_async().await.map_err(|_| AgentError::Gone)
}

/// Gives an agent loop a user command and waits until it is handled.
pub async fn command(ctl: &flume::Sender<Ctl>, c: Command) -> Result<(), AgentError> {
    let (tx, rx) = flume::bounded(1);
    ctl.send_async(Ctl::Command(c, tx))
        .await
        .map_err(|_| AgentError::Gone)?;
    rx.recv_async().await.map_err(|_| AgentError::Gone)
}

/// Runs the agent until it is stopped (a [`Ctl::Stop`], every control sender dropped, or
/// the user quitting the terminal) or its host fails. `first`: the effects of opening the
/// host; `emit`: receives every [`AgentEvent`]; `sleep`: the executor's timer. On the way
/// out the WebSocket is closed properly (the link task ends when it cannot report).
pub async fn run<S, F>(
    host: AgentHost,
    first: Vec<Effect>,
    mut opts: RunOptions,
    emit: Box<dyn Fn(AgentEvent) + Send>,
    ctl: flume::Receiver<Ctl>,
    link: flume::Receiver<LinkEvent>,
    sleep: S,
) -> Result<(), AgentError>
where
    S: Fn(Duration) -> F,
    F: Future<Output = ()>,
{
    let keys = opts.terminal.as_mut().and_then(|t| t.take_keys());
    let a2a_client = crate::a2a_client::A2aClient::with_timeout(opts.a2a_call_timeout);
    let mut d = Driver {
        host,
        opts,
        emit,
        link: None,
        ui: PromptUi::new(),
        pending: Vec::new(),
        starting: Vec::new(),
        streams: Vec::new(),
        waiting: Vec::new(),
        a2a_client,
    };
    let r = d.run_loop(first, &ctl, &link, keys, sleep).await;
    if let Some(l) = d.link.take() {
        let _ = l.send(LinkOut::Close);
    }
    r
}

enum Ev {
    Link(Option<LinkEvent>),
    Llm(Option<crate::llm::LlmReply>),
    /// An action's result (the runner's threads), as the core's input.
    Work(Option<Input>),
    Ctl(Option<Ctl>),
    Key(Option<UiKey>),
    /// A call of the A2A client ended.
    A2aClient(
        Option<(
            a2acp_core::agent::A2aClientCall,
            a2acp_core::agent::A2aOutcome,
        )>,
    ),
    Timer,
}

struct Driver {
    host: AgentHost,
    opts: RunOptions,
    emit: Box<dyn Fn(AgentEvent) + Send>,
    link: Option<flume::Sender<LinkOut>>,
    ui: PromptUi,
    pending: Vec<Command>,
    /// `start_thread` requests waiting for the relay to accept or refuse the first
    /// packet of the thread (or of every leg of the group): what started, deadline,
    /// where to answer.
    starting: Vec<(Starting, Instant, flume::Sender<Response>)>,
    /// Open A2A streams: what the subscriber saw, the JSON-RPC id to answer with, and
    /// where its events go (dropped, the stream ends).
    streams: Vec<(a2acp_core::agent::A2aStream, Value, flume::Sender<Value>)>,
    /// Blocking `SendMessage`s held until their task is terminal or interrupted, or
    /// their deadline ([`BLOCKING_WAIT`](crate::a2a::BLOCKING_WAIT)).
    waiting: Vec<(
        a2acp_core::agent::A2aWait,
        Instant,
        flume::Sender<crate::a2a::A2aAnswer>,
    )>,
    /// The HTTP calls of threads with plain A2A agents (§18).
    a2a_client: crate::a2a_client::A2aClient,
}

/// What a `start_thread` request started.
enum Starting {
    /// A two-party thread, by id.
    Thread(String),
    /// A group thread: the answer so far (`group_id`, `threads`) and its legs' ids.
    Group(serde_json::Value, Vec<String>),
}

impl Driver {
    fn now(&self) -> Timestamp {
        crate::now()
    }

    async fn run_loop<S, F>(
        &mut self,
        first: Vec<Effect>,
        ctl: &flume::Receiver<Ctl>,
        link: &flume::Receiver<LinkEvent>,
        keys: Option<flume::Receiver<UiKey>>,
        sleep: S,
    ) -> Result<(), AgentError>
    where
        S: Fn(Duration) -> F,
        F: Future<Output = ()>,
    {
        self.execute(first);
        let llm = self.host.llm_replies();
        let work = self.host.action_results();
        let a2a_out = self.a2a_client.outcomes();
        let mut link_open = true;
        let mut turn = false;
        loop {
            while let Some(c) = self.pending.pop() {
                let e = self.host.handle(self.now(), Input::Command(c))?;
                self.execute(e);
            }
            self.answer_starting();
            self.answer_waiting();
            if self.a2a_client.has_room() {
                let (calls, e) = self.host.take_a2a_calls(self.now())?;
                self.execute(e);
                for call in calls {
                    self.a2a_client.submit(call);
                }
            }
            let wait = self.host.poll_timeout().map(|t| {
                Duration::from_millis(t.as_millis().saturating_sub(self.now().as_millis()))
            });
            let first_due = self
                .starting
                .iter()
                .map(|(_, d, _)| d)
                .chain(self.waiting.iter().map(|(_, d, _)| d))
                .map(|d| d.saturating_duration_since(Instant::now()))
                .min();
            let wait = match (wait, first_due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let ev = {
                let from_link = async {
                    if link_open {
                        Ev::Link(link.recv_async().await.ok())
                    } else {
                        never().await
                    }
                };
                let from_ctl = async { Ev::Ctl(ctl.recv_async().await.ok()) };
                // The model answers on its own threads; its answers wait here.
                let from_llm = async {
                    match &llm {
                        Some(r) => Ev::Llm(r.recv_async().await.ok()),
                        None => never().await,
                    }
                };
                let from_work = async {
                    match &work {
                        Some(r) => Ev::Work(r.recv_async().await.ok()),
                        None => never().await,
                    }
                };
                let from_work = race(from_work, async {
                    Ev::A2aClient(a2a_out.recv_async().await.ok())
                });
                let from_keys = async {
                    match &keys {
                        Some(k) => Ev::Key(k.recv_async().await.ok()),
                        None => never().await,
                    }
                };
                let timer = async {
                    match wait {
                        Some(w) => {
                            sleep(w).await;
                            Ev::Timer
                        }
                        None => never().await,
                    }
                };
                // Whichever is ready first wins; the order alternates so that a busy
                // relay link cannot starve control requests, keys or the timer.
                turn = !turn;
                if turn {
                    race(
                        race(from_link, from_ctl),
                        race(race(from_llm, from_work), race(from_keys, timer)),
                    )
                    .await
                } else {
                    race(
                        race(from_ctl, from_link),
                        race(race(timer, from_keys), race(from_work, from_llm)),
                    )
                    .await
                }
            };
            match ev {
                Ev::Link(Some(l)) => self.on_link(l)?,
                // The link task gave up (replaced): the agent goes on offline.
                Ev::Link(None) => link_open = false,
                Ev::Llm(Some(reply)) => {
                    let e = self.host.llm_answer(self.now(), reply)?;
                    self.execute(e);
                }
                Ev::Work(Some(input)) => {
                    let e = self.host.handle(self.now(), input)?;
                    self.execute(e);
                }
                // The host keeps a sender: never closed while it lives.
                Ev::A2aClient(Some((call, outcome))) => {
                    self.a2a_client.done();
                    let e = self.host.a2a_client(self.now(), &call, outcome)?;
                    self.execute(e);
                }
                Ev::Llm(None) | Ev::Work(None) | Ev::A2aClient(None) => {}
                Ev::Ctl(None | Some(Ctl::Stop)) => return Ok(()),
                Ev::Ctl(Some(Ctl::Request(req, reply))) => {
                    let start = matches!(req, Request::StartThread { .. });
                    let to_a2a = matches!(&req, Request::StartThread { to, .. }
                        if to.list().iter().any(|a| a2acp_core::a2a::client::is_url(a)));
                    let (resp, e) = self.host.control(self.now(), req)?;
                    self.sync_ui_after_answer();
                    self.execute(e);
                    let started = if !(start && resp.ok) || to_a2a {
                        None
                    } else if let Some(id) = resp.data["thread_id"].as_str() {
                        Some(Starting::Thread(id.to_string()))
                    } else {
                        resp.data["threads"].as_object().map(|legs| {
                            let ids = legs
                                .values()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect();
                            Starting::Group(resp.data.clone(), ids)
                        })
                    };
                    match started {
                        // Answered once the relay accepted or refused its first packet
                        // (every leg's, for a group).
                        Some(what) => {
                            self.starting
                                .push((what, Instant::now() + FIRST_PACKET_WAIT, reply))
                        }
                        None => {
                            let _ = reply.send(resp);
                        }
                    }
                }
                Ev::Ctl(Some(Ctl::A2a(call, reply))) => {
                    let (r, e) = self.host.a2a(self.now(), &call.client, &call.body)?;
                    self.sync_ui_after_answer();
                    self.execute(e);
                    let streaming = crate::a2a::is_streaming(&call.body);
                    if let Some(w) = r.wait {
                        let deadline = Instant::now() + self.opts.a2a_blocking_wait;
                        self.waiting.push((w, deadline, reply));
                        continue;
                    }
                    let events = r.stream.map(|s| {
                        let (tx, rx) = flume::bounded(crate::a2a::STREAM_BUFFER);
                        self.streams.push((s, r.response["id"].clone(), tx));
                        rx
                    });
                    let _ = reply.send(crate::a2a::A2aAnswer {
                        response: r.response,
                        events,
                        streaming,
                    });
                }
                Ev::Ctl(Some(Ctl::Phase1(body, reply))) => {
                    let (r, e) = self.host.phase1(self.now(), &body)?;
                    self.sync_ui_after_answer();
                    self.execute(e);
                    let _ = reply.send(r);
                }
                Ev::Ctl(Some(Ctl::Command(c, reply))) => {
                    let e = self.host.handle(self.now(), Input::Command(c))?;
                    self.sync_ui_after_answer();
                    self.execute(e);
                    let _ = reply.send(());
                }
                Ev::Key(Some(UiKey::Key(k))) => {
                    let outs = self.ui.key(k, self.host.prompts());
                    self.ui_out(outs);
                }
                Ev::Key(Some(UiKey::Quit) | None) => return Ok(()),
                Ev::Timer => {
                    let e = self.host.handle_timeout(self.now())?;
                    self.execute(e);
                }
            }
        }
    }

    /// The thread `id` goes on as (its recipient had no a2acp agent; §18) and that
    /// thread's peer.
    fn continued(&self, id: &str) -> Option<(String, String)> {
        let agent = self.host.agent();
        let next = agent.thread(id)?.continued_as.clone()?;
        let peer = agent.thread(&next)?.peer.to_string();
        Some((next, peer))
    }

    /// Answers the `start_thread` requests whose first packet the relay accepted or
    /// refused, or whose wait is over ([`FIRST_PACKET_WAIT`]).
    fn answer_starting(&mut self) {
        use a2acp_core::agent::FirstPacket;
        let now = Instant::now();
        let mut i = 0;
        while i < self.starting.len() {
            let (what, deadline, _) = &self.starting[i];
            let id = match what {
                Starting::Thread(id) => id,
                Starting::Group(data, legs) => {
                    let resp = self.group_started(data, legs, now >= *deadline);
                    match resp {
                        Some(r) => {
                            let (_, _, reply) = self.starting.remove(i);
                            let _ = reply.send(r);
                        }
                        None => i += 1,
                    }
                    continue;
                }
            };
            let state = self.host.agent().first_packet(id);
            let resp = match state {
                Some(FirstPacket::Accepted) => Some(Response::ok(serde_json::json!({
                    "thread_id": id,
                    "relay": "accepted",
                }))),
                Some(FirstPacket::Refused(code)) => Some(match self.continued(id) {
                    Some((next, peer)) => Response::ok(serde_json::json!({
                        "thread_id": next,
                        "a2a": true,
                        "peer": peer,
                        "declined": id,
                        "relay": "refused",
                        "code": code.as_str(),
                    })),
                    None => {
                        let peer = self
                            .host
                            .agent()
                            .thread(id)
                            .map(|t| t.peer.to_string())
                            .unwrap_or_default();
                        Response {
                            ok: false,
                            error: Some(format!(
                                "thread {id} declined: the relay refused the recipient ({}): no agent is registered as {peer}",
                                code.as_str()
                            )),
                            data: serde_json::json!({
                                "thread_id": id,
                                "relay": "refused",
                                "code": code.as_str(),
                            }),
                        }
                    }
                }),
                Some(FirstPacket::Waiting) if now < *deadline => None,
                Some(FirstPacket::Waiting) => Some(Response::ok(serde_json::json!({
                    "thread_id": id,
                    "relay": "waiting",
                    "online": self.host.agent().is_online(),
                }))),
                None => Some(Response::err(format!("thread {id} is gone"))),
            };
            match resp {
                Some(r) => {
                    let (_, _, reply) = self.starting.remove(i);
                    let _ = reply.send(r);
                }
                None => i += 1,
            }
        }
    }

    /// The answer to a `start_thread` that started a group, once the relay accepted or
    /// refused the first packet of every leg, or `late` (the wait is over): the started
    /// answer with `relay` (per leg: `accepted`, `refused`, `waiting`), `refused` (the
    /// relay's code per refused leg) and `online`.
    fn group_started(
        &self,
        data: &serde_json::Value,
        legs: &[String],
        late: bool,
    ) -> Option<Response> {
        use a2acp_core::agent::FirstPacket;
        let mut relay = serde_json::Map::new();
        let mut refused = serde_json::Map::new();
        let mut waiting = false;
        for id in legs {
            let word = match self.host.agent().first_packet(id) {
                Some(FirstPacket::Accepted) => "accepted",
                Some(FirstPacket::Refused(code)) => {
                    refused.insert(id.clone(), code.as_str().into());
                    "refused"
                }
                Some(FirstPacket::Waiting) | None => {
                    waiting = true;
                    "waiting"
                }
            };
            relay.insert(id.clone(), word.into());
        }
        if waiting && !late {
            return None;
        }
        let mut d = data.clone();
        if let Some(o) = d.as_object_mut() {
            o.insert("relay".into(), relay.into());
            o.insert("refused".into(), refused.into());
            o.insert("online".into(), self.host.agent().is_online().into());
        }
        Some(Response::ok(d))
    }

    /// Prompts answered through the control socket leave the terminal's queue too (the
    /// host, which owns the open prompts, no longer has them).
    fn sync_ui_after_answer(&mut self) {
        let outs = self.ui.closed_elsewhere(self.host.prompts());
        self.ui_out(outs);
        // Suggestions accepted with `a2acp suggestions accept N` are no longer offered.
        let open: Vec<u64> = self
            .host
            .agent()
            .suggestions()
            .iter()
            .map(|s| s.id())
            .collect();
        let outs = self
            .ui
            .retain_suggestions(|id| open.contains(&id), self.host.prompts());
        self.ui_out(outs);
    }

    fn on_link(&mut self, l: LinkEvent) -> Result<(), AgentError> {
        let now = self.now();
        match l {
            LinkEvent::Up(tx) => {
                self.link = Some(tx);
                (self.emit)(AgentEvent::Link(true));
                let e = self.host.handle(now, Input::Connected)?;
                self.execute(e);
            }
            LinkEvent::Frame(b) => {
                let e = self.host.handle(now, Input::Bytes(b))?;
                self.execute(e);
                // The core read the relay's `replaced`: this agent stays offline.
                if self.host.agent().was_replaced() {
                    if let Some(l) = self.link.take() {
                        let _ = l.send(LinkOut::Replaced);
                        (self.emit)(AgentEvent::Replaced);
                        let e = self.host.handle(now, Input::Disconnected)?;
                        self.execute(e);
                        self.say(&format!(
                            "another connection of {} took over at the relay; this agent stays offline (run it again to take over)",
                            self.host.agent().address()
                        ));
                    }
                }
            }
            // The connection of a replaced agent ended: it was let go of already.
            LinkEvent::Down if self.host.agent().was_replaced() => {}
            LinkEvent::Down => {
                self.link = None;
                (self.emit)(AgentEvent::Link(false));
                let e = self.host.handle(now, Input::Disconnected)?;
                self.execute(e);
            }
            LinkEvent::GaveUp => {
                self.link = None;
                (self.emit)(AgentEvent::Link(false));
                let e = self.host.handle(now, Input::Disconnected)?;
                self.execute(e);
            }
        }
        Ok(())
    }

    fn say(&self, text: &str) {
        match &self.opts.terminal {
            Some(t) => t.println(text),
            None => {
                if self.opts.transcript {
                    println!("{}", self.line('|', text));
                } else {
                    info!("{text}");
                }
            }
        }
    }

    fn line(&self, mark: char, text: &str) -> String {
        let t = match self.opts.started {
            Some(s) => {
                let d = s.elapsed();
                format!("{:>4}.{:03}s", d.as_secs(), d.subsec_millis())
            }
            None => self.now().to_string(),
        };
        format!("{t} {:<5} {mark} {text}", self.opts.name)
    }

    /// Answers the blocking `SendMessage`s whose task is now terminal or interrupted, or
    /// whose deadline passed (the task as it stands); forgets those whose client left.
    fn answer_waiting(&mut self) {
        if self.waiting.is_empty() {
            return;
        }
        let now = Instant::now();
        let agent = self.host.agent();
        self.waiting.retain(|(w, deadline, reply)| {
            if reply.is_disconnected() {
                return false;
            }
            match agent.a2a_waited(w, now >= *deadline) {
                Some(response) => {
                    let _ = reply.send(crate::a2a::A2aAnswer {
                        response,
                        events: None,
                        streaming: false,
                    });
                    false
                }
                None => true,
            }
        });
    }

    /// Tells the A2A streams of these tasks what changed; a stream whose task is now
    /// terminal or interrupted gets its last event and closes, as does one whose reader
    /// fell [`STREAM_BUFFER`](crate::a2a::STREAM_BUFFER) events behind or left.
    ///
    /// Every stream's task is looked at, not only those the effects name: a task changes
    /// state without a packet to its client too (its cancel, its user's answer).
    fn push_streams(&mut self) {
        use a2acp_core::a2a::task;
        let agent = self.host.agent();
        self.streams.retain_mut(|(s, id, tx)| {
            if tx.is_disconnected() {
                return false;
            }
            let Some(t) = agent.thread(&s.task_id) else {
                return false;
            };
            for ev in task::update_events(t, Some(s.state), s.artifact.as_deref()) {
                let msg = serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": ev });
                if tx.try_send(msg).is_err() {
                    return false;
                }
            }
            s.state = task::task_state(t);
            s.artifact = task::artifact_id(t);
            !s.ends_at(s.state)
        });
    }

    fn execute(&mut self, effects: Vec<Effect>) {
        if !self.streams.is_empty() {
            self.push_streams();
        }
        if self.opts.transcript {
            // What was received first, then what the agent did, then what the user sees.
            let mut lines: Vec<(u8, String)> = effects
                .iter()
                .filter_map(|e| {
                    let (mark, text) = crate::transcript::describe(self.host.agent(), e)?;
                    let cat = match (mark, e) {
                        ('<', _) => 0,
                        (_, Effect::Audit(_)) | ('>', _) => 1,
                        _ => 2,
                    };
                    Some((cat, self.line(mark, &text)))
                })
                .collect();
            lines.sort_by_key(|(c, _)| *c);
            for (_, l) in lines {
                match &self.opts.terminal {
                    Some(t) => t.println(&l),
                    None => println!("{l}"),
                }
            }
        }
        for e in effects {
            match &e {
                Effect::Send(b) => {
                    if let Some(l) = &self.link {
                        if l.send(LinkOut::Frame(b.clone())).is_err() {
                            self.link = None;
                        }
                    }
                }
                Effect::CloseConnection => {
                    // A refused registration: the link waits (or stops) instead of
                    // reconnecting with the usual backoff.
                    let out = match self.host.agent().link_refusal() {
                        Some(r) => LinkOut::GiveUp(r.retry_after),
                        None => LinkOut::Close,
                    };
                    if let Some(l) = self.link.take() {
                        let _ = l.send(out);
                    }
                }
                Effect::Prompt(p) => self.show_prompt(p),
                Effect::ClosePrompt(id) => {
                    let outs = self.ui.close(*id, self.host.prompts());
                    self.ui_out(outs);
                }
                Effect::Notify(n) => {
                    // (With a transcript, its `notify` line is the log.) A refused
                    // registration is told once: the link stops retrying.
                    if !self.opts.transcript {
                        if self.host.agent().link_refusal().is_some()
                            && n.kind == a2acp_core::agent::NotifyKind::Delivery
                        {
                            warn!("{}", n.text);
                        } else {
                            info!(kind = ?n.kind, thread = n.thread_id.as_deref().unwrap_or("-"), "{}", n.text);
                        }
                    }
                    // §7.2 "one tap to promote": the terminal offers it with one key.
                    if let (Some(s), Some(_)) = (&n.suggestion, &self.opts.terminal) {
                        let outs = self.ui.suggest(s.clone(), n.text.clone());
                        self.ui_out(outs);
                    }
                }
                Effect::Audit(a) => debug!(
                    thread = a.thread_id.as_deref().unwrap_or("-"),
                    "{}", a.event
                ),
                Effect::Action(_) | Effect::A2a(_) => {}
            }
            (self.emit)(AgentEvent::Effect(e));
        }
    }

    fn show_prompt(&mut self, p: &Prompt) {
        if let Some(u) = &self.opts.auto {
            self.pending.insert(0, u.answer(p));
            return;
        }
        let group = self.host.prompt_group(p);
        if self.opts.terminal.is_some() {
            let outs = self.ui.show_in(p, group);
            self.ui_out(outs);
            return;
        }
        if self.opts.print_prompts {
            println!(
                "{}\n   (answer with `a2acp answer {} ...`: {})",
                prompt::render_in(p, group.as_ref()),
                p.id,
                prompt::help(p)
            );
        }
    }

    fn ui_out(&mut self, outs: Vec<UiOut>) {
        for o in outs {
            match o {
                UiOut::Print(s) => {
                    if let Some(t) = &self.opts.terminal {
                        t.println(&s);
                    }
                }
                UiOut::Echo(s) => {
                    if let Some(t) = &self.opts.terminal {
                        t.echo(&s);
                    }
                }
                UiOut::Answer(c) => self.pending.insert(0, c),
            }
        }
    }
}

/// Exponential reconnection backoff with jitter: `min`, doubling up to a cap, each wait
/// drawn between three quarters and five quarters of the current step. The cap is
/// `short_max` while the relay was reachable within [`RECENTLY_REACHABLE`] (a relay
/// restart is found again within seconds: 0.25, 0.5, 1, 2, 4, 5, 5… s) and `max` after
/// a longer outage (…10, 20, 30 s), so a relay down for long is not hammered.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    short_max: Duration,
    max: Duration,
    cur: Duration,
}

impl Backoff {
    /// Starts at `min`; the cap is `short_max` until [`Backoff::next_wait`] is told the
    /// relay was last reachable longer than [`RECENTLY_REACHABLE`] ago.
    pub fn new(min: Duration, short_max: Duration, max: Duration) -> Self {
        Backoff {
            min,
            short_max: short_max.min(max),
            max,
            cur: min,
        }
    }

    /// The next wait (and doubles the step after it). `unreachable_for`: how long the
    /// relay has not been reachable.
    pub fn next_wait(&mut self, unreachable_for: Duration) -> Duration {
        let cap = if unreachable_for < RECENTLY_REACHABLE {
            self.short_max
        } else {
            self.max
        }
        .max(self.min);
        // A long outage: doubling resumes from the short cap up to the long one.
        self.cur = self.cur.min(cap);
        let step = self.cur.as_millis() as u64;
        let jitter = {
            let mut b = [0u8; 8];
            let _ = getrandom::fill(&mut b);
            u64::from_le_bytes(b) % (step / 2).max(1)
        };
        let wait = Duration::from_millis(step - step / 4 + jitter);
        self.cur = (self.cur * 2).min(cap);
        wait
    }

    /// Back to `min` (after a connection that lasted).
    pub fn reset(&mut self) {
        self.cur = self.min;
    }
}

/// Keeps a WebSocket to the relay at `url` for the agent loop: connects with `connect`
/// (the binding's TCP connect, Nagle off, then [`crate::ws::handshake`]), reports
/// [`LinkEvent::Up`], moves frames both ways, reports [`LinkEvent::Down`] and reconnects
/// after a [`Backoff`] wait (`sleep`: the binding's timer). Returns when the agent loop is
/// gone or says another connection of the agent took over ([`LinkOut::Replaced`]: the
/// core, not the link, reads the relay's frames).
#[allow(clippy::too_many_arguments)]
pub async fn link_loop<St, C, CF, S, SF>(
    url: String,
    to_agent: flume::Sender<LinkEvent>,
    min: Duration,
    short_max: Duration,
    max: Duration,
    connect: C,
    sleep: S,
) where
    St: AsyncRead + AsyncWrite + Unpin,
    C: Fn(String) -> CF,
    CF: Future<Output = Result<WebSocketStream<St>, ConnectError>>,
    S: Fn(Duration) -> SF,
    SF: Future<Output = ()>,
{
    let mut backoff = Backoff::new(min, short_max, max);
    // When the relay was last reachable (a connection up).
    let mut reachable = Instant::now();
    loop {
        match connect(url.clone()).await {
            Ok(ws) => {
                let started = Instant::now();
                let (tx, rx) = flume::unbounded();
                if to_agent.send_async(LinkEvent::Up(tx)).await.is_err() {
                    return;
                }
                let end = pump(ws, &rx, &to_agent).await;
                reachable = Instant::now();
                match end {
                    PumpEnd::Replaced => return,
                    PumpEnd::GiveUp(None) => {
                        let _ = to_agent.send_async(LinkEvent::GaveUp).await;
                        return;
                    }
                    PumpEnd::GiveUp(Some(after)) => {
                        if to_agent.send_async(LinkEvent::Down).await.is_err() {
                            return;
                        }
                        info!(
                            retry_in_s = after.as_secs(),
                            "registration refused: trying again later"
                        );
                        sleep(after).await;
                        backoff.reset();
                        continue;
                    }
                    PumpEnd::Lost => {}
                }
                if to_agent.send_async(LinkEvent::Down).await.is_err() {
                    return;
                }
                // The agent loop reads the frames that came before `Down` first: the
                // relay's `replaced` (then closing the connection) among them is answered
                // with `Replaced` on this connection's channel, which it then lets go of.
                while let Ok(o) = rx.recv_async().await {
                    if o == LinkOut::Replaced {
                        return;
                    }
                }
                if started.elapsed() > Duration::from_secs(10) {
                    backoff.reset();
                }
            }
            Err(e) => warn!(error = %e, "relay unreachable"),
        }
        if to_agent.is_disconnected() {
            return;
        }
        let wait = backoff.next_wait(reachable.elapsed());
        info!(
            retry_in_ms = wait.as_millis() as u64,
            "reconnecting to the relay"
        );
        sleep(wait).await;
    }
}

/// How a connection ended.
enum PumpEnd {
    /// Lost or closed: reconnect.
    Lost,
    /// The agent loop said another connection replaced this one ([`LinkOut::Replaced`]).
    Replaced,
    /// The agent gave up ([`LinkOut::GiveUp`]).
    GiveUp(Option<Duration>),
}

/// Moves frames both ways until the connection ends.
async fn pump<St>(
    ws: WebSocketStream<St>,
    rx: &flume::Receiver<LinkOut>,
    to_agent: &flume::Sender<LinkEvent>,
) -> PumpEnd
where
    St: AsyncRead + AsyncWrite + Unpin,
{
    let (mut sink, mut source) = ws.split();
    let mut replaced = false;
    let mut give_up = None;
    let reader = async {
        while let Some(m) = source.next().await {
            let bytes: Vec<u8> = match m {
                Ok(Message::Text(t)) => t.as_bytes().to_vec(),
                Ok(Message::Binary(b)) => b.to_vec(),
                Ok(Message::Close(f)) => {
                    debug!(frame = ?f, "relay closed the connection");
                    break;
                }
                Ok(_) => continue,
                Err(e) => {
                    debug!(error = %e, "relay connection lost");
                    break;
                }
            };
            if to_agent.send_async(LinkEvent::Frame(bytes)).await.is_err() {
                break;
            }
        }
    };
    let writer = async {
        while let Ok(first) = rx.recv_async().await {
            let mut next = Some(first);
            while let Some(o) = next.take() {
                match o {
                    LinkOut::Frame(b) => {
                        let Ok(t) = Utf8Bytes::try_from(b) else {
                            continue;
                        };
                        if sink.feed(Message::Text(t)).await.is_err() {
                            return;
                        }
                    }
                    LinkOut::Close => {
                        let _ = sink.close(None).await;
                        return;
                    }
                    LinkOut::GiveUp(after) => {
                        give_up = Some(after);
                        let _ = sink.close(None).await;
                        return;
                    }
                    LinkOut::Replaced => {
                        replaced = true;
                        let _ = sink.close(None).await;
                        return;
                    }
                }
                next = rx.try_recv().ok();
            }
            if sink.flush().await.is_err() {
                return;
            }
        }
        let _ = sink.close(None).await;
    };
    race(reader, writer).await;
    match (replaced, give_up) {
        (true, _) => PumpEnd::Replaced,
        (false, Some(after)) => PumpEnd::GiveUp(after),
        (false, None) => PumpEnd::Lost,
    }
}

/// Removes the control socket's file when dropped.
#[derive(Debug)]
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Binds the control socket at `path` (mode 0600), refusing if another agent answers on
/// it and replacing a stale file. The binding wraps the listener for its executor; the
/// returned guard removes the file when the agent stops.
pub fn bind_control(
    path: &Path,
) -> Result<(std::os::unix::net::UnixListener, SocketFile), AgentError> {
    let err = |message: String| AgentError::Control {
        path: path.to_path_buf(),
        message,
    };
    if path.exists() {
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(err("another agent is running on this home".into())),
            Err(_) => {
                let _ = std::fs::remove_file(path);
            }
        }
    }
    let l = std::os::unix::net::UnixListener::bind(path).map_err(|e| err(e.to_string()))?;
    l.set_nonblocking(true).map_err(|e| err(e.to_string()))?;
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    Ok((l, SocketFile(path.to_path_buf())))
}

/// The answer to one control-socket request line, as bytes to write back (one JSON line).
/// `read`: what reading the line returned (the reader is limited to
/// [`MAX_REQUEST_BYTES`]` + 1` bytes); `None` when the client sent nothing.
pub async fn answer_control_line(
    read: std::io::Result<usize>,
    line: &str,
    ctl: &flume::Sender<Ctl>,
) -> Option<Vec<u8>> {
    let resp = match read {
        Ok(_) if line.len() > MAX_REQUEST_BYTES => Response::err("request too large"),
        Ok(0) => return None,
        Ok(_) => match serde_json::from_str::<Request>(line.trim()) {
            Ok(req) => request(ctl, req)
                .await
                .unwrap_or_else(|_| Response::err("the agent is stopping")),
            Err(e) => Response::err(format!("bad request: {e}")),
        },
        Err(e) => Response::err(format!("bad request: {e}")),
    };
    let mut out = serde_json::to_vec(&resp).unwrap_or_default();
    out.push(b'\n');
    Some(out)
}

/// What a client of the control socket makes of the agent's answer line.
pub fn parse_control_answer(line: &str) -> Result<Response, String> {
    serde_json::from_str(line).map_err(|e| format!("bad answer from the agent: {e}"))
}

/// The message when no agent answers on `path`.
pub fn no_agent(path: &Path, e: &std::io::Error) -> String {
    let home = path.parent().unwrap_or(Path::new("."));
    if !home.join("config.toml").exists() {
        return format!(
            "no agent in {}: create one with `a2acp agent init --address agent:NAME@DOMAIN --relay ws://HOST:PORT --home {}`, then start it with `a2acp agent run --home {}` (or pass --home / set A2ACP_HOME to an existing agent)",
            home.display(),
            home.display(),
            home.display()
        );
    }
    format!(
        "the agent of {} is not running ({e}); start it with `a2acp agent run --home {}`",
        home.display(),
        home.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u64 {
        d.as_millis() as u64
    }

    #[test]
    fn backoff_is_short_while_the_relay_was_recently_reachable_and_long_after() {
        let mut b = Backoff::new(
            Duration::from_millis(250),
            Duration::from_secs(5),
            Duration::from_secs(30),
        );
        let recent = Duration::from_secs(10);
        // Steps 250, 500, 1000, 2000, 4000, 5000, 5000 ms, each within ±25 %.
        for step in [250u64, 500, 1000, 2000, 4000, 5000, 5000] {
            let w = ms(b.next_wait(recent));
            assert!(w >= step * 3 / 4 && w < step * 5 / 4, "{w} for {step}");
        }
        // A long outage: doubling resumes up to 30 s.
        let long = RECENTLY_REACHABLE + Duration::from_secs(1);
        for step in [5000u64, 10_000, 20_000, 30_000, 30_000] {
            let w = ms(b.next_wait(long));
            assert!(w >= step * 3 / 4 && w < step * 5 / 4, "{w} for {step}");
        }
        b.reset();
        assert!(ms(b.next_wait(recent)) < 313);
    }
}
