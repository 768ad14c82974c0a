//! The agent's loop: one [`Driver`] owns the host and answers every event in turn — the
//! relay link, the control socket, the terminal, the model, the actions' results, timers.

use std::future::Future;
use std::time::{Duration, Instant};

use a2acp_core::agent::{Command, Input};
use a2acp_core::Timestamp;
use tracing::{debug, info, warn};

use super::*;
use crate::agent_host::{AgentHost, Effect};
use crate::control::{Request, Response};
use crate::prompt::PromptUi;
use crate::race::{never, race};
use crate::term::UiKey;
use serde_json::Value;

mod a2a;
mod starting;
mod terminal;

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
            a2acp_core::bridge::a2a::A2aClientCall,
            a2acp_core::bridge::a2a::A2aOutcome,
        )>,
    ),
    /// A message or a key from the ACP link.
    Acp(Option<crate::acp::Incoming>),
    Timer,
}

pub(super) struct Driver {
    pub(super) host: AgentHost,
    pub(super) opts: RunOptions,
    pub(super) emit: Box<dyn Fn(AgentEvent) + Send>,
    pub(super) link: Option<flume::Sender<LinkOut>>,
    pub(super) ui: PromptUi,
    pub(super) pending: Vec<Command>,
    /// `start_thread` requests waiting for the relay to accept or refuse the first
    /// packet of the thread (or of every leg of the group): what started, deadline,
    /// where to answer.
    pub(super) starting: Vec<(Starting, Instant, flume::Sender<Response>)>,
    /// `key_rotate` requests waiting for the relay to install or refuse the rotation:
    /// deadline, where to answer.
    pub(super) rotating: Vec<(Instant, flume::Sender<Response>)>,
    /// Open A2A streams: what the subscriber saw, the JSON-RPC id to answer with, and
    /// where its events go (dropped, the stream ends).
    pub(super) streams: Vec<(
        a2acp_core::bridge::a2a::A2aStream,
        Value,
        flume::Sender<Value>,
    )>,
    /// Blocking `SendMessage`s held until their task is terminal or interrupted, or
    /// their deadline ([`BLOCKING_WAIT`](crate::a2a::BLOCKING_WAIT)).
    pub(super) waiting: Vec<(
        a2acp_core::bridge::a2a::A2aWait,
        Instant,
        flume::Sender<crate::a2a::A2aAnswer>,
    )>,
    /// The HTTP calls of threads with plain A2A agents (§18).
    pub(super) a2a_client: crate::a2a_client::A2aClient,
}

/// What a `start_thread` request started.
pub(super) enum Starting {
    /// A two-party thread, by id.
    Thread(String),
    /// A group thread: the answer so far (`group_id`, `threads`) and its legs' ids.
    Group(serde_json::Value, Vec<String>),
}

impl Driver {
    fn now(&self) -> Timestamp {
        crate::now()
    }

    pub(super) async fn run_loop<S, F>(
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
        let acp = self.host.acp_link();
        let mut link_open = true;
        let mut turn = false;
        loop {
            while let Some(c) = self.pending.pop() {
                let e = self.host.handle(self.now(), Input::Command(c))?;
                self.execute(e);
            }
            self.answer_starting();
            self.answer_rotating();
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
                .chain(self.rotating.iter().map(|(d, _)| d))
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
                let from_work = race(from_work, async {
                    match &acp {
                        Some(r) => Ev::Acp(r.recv_async().await.ok()),
                        None => never().await,
                    }
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
                Ev::Acp(Some(item)) => {
                    let e = self.host.acp_incoming(self.now(), item)?;
                    self.execute(e);
                }
                Ev::Llm(None) | Ev::Work(None) | Ev::A2aClient(None) | Ev::Acp(None) => {}
                Ev::Ctl(None | Some(Ctl::Stop)) => return Ok(()),
                Ev::Ctl(Some(Ctl::Request(req, reply))) => {
                    let start = matches!(req, Request::StartThread { .. });
                    let rotate = matches!(req, Request::KeyRotate);
                    let to_a2a = matches!(&req, Request::StartThread { to, .. }
                        if to.list().iter().any(|a| a2acp_core::bridge::a2a::client::is_url(a) || a.starts_with("acp:")));
                    let (resp, e) = self.host.control(self.now(), req)?;
                    self.sync_ui_after_answer();
                    self.execute(e);
                    if rotate && resp.ok {
                        // Answered once the relay installed or refused it.
                        self.rotating.push((Instant::now() + ROTATE_WAIT, reply));
                        continue;
                    }
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

    fn on_link(&mut self, l: LinkEvent) -> Result<(), AgentError> {
        let now = self.now();
        match l {
            LinkEvent::Up(tx, door) => {
                self.link = Some(tx);
                self.host.set_door(door);
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
                Effect::Action(_) | Effect::Bridged(_) => {}
            }
            (self.emit)(AgentEvent::Effect(e));
        }
    }
}
