//! The agent daemon on tokio: a link task keeps a WebSocket to the relay (reconnecting
//! with exponential backoff and jitter), and one agent task owns the
//! [`AgentHost`](a2acp_runtime::agent_host::AgentHost) — the core, its SQLite store and its
//! prompts — and serves the relay's frames, the timer, the control socket and the
//! terminal. Every input's persist records are committed before the frames it produced
//! are written to the socket (the host does that), and a prompt never blocks anything:
//! prompts are shown and answered while the other threads go on.

use std::path::PathBuf;
use std::time::Duration;

use a2acp_core::agent::{Command, Input, Prompt};
use a2acp_core::relay::frame::RelayFrame;
use a2acp_core::Timestamp;
use a2acp_runtime::agent_host::{AgentHost, Effect, HostError};
use a2acp_runtime::control::{Request, Response, MAX_REQUEST_BYTES};
use a2acp_runtime::prompt::{self, PromptUi, UiOut};
use a2acp_runtime::scripted::ScriptedUser;
use async_tungstenite::tungstenite::{Message, Utf8Bytes};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::term::Term;

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
    /// Relay URL (`ws://host:port`).
    pub relay: String,
    /// Name in transcript lines.
    pub name: String,
    /// Print transcript lines to stdout.
    pub transcript: bool,
    /// Time zero of the transcript (`None`: absolute times).
    pub started: Option<tokio::time::Instant>,
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
}

impl RunOptions {
    /// Defaults for `relay`.
    pub fn new(relay: &str, name: &str) -> Self {
        RunOptions {
            relay: relay.to_string(),
            name: name.to_string(),
            transcript: false,
            started: None,
            auto: None,
            terminal: None,
            print_prompts: false,
            control_socket: None,
            backoff_min: Duration::from_millis(250),
            backoff_max: Duration::from_secs(30),
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

enum Ctl {
    Request(Request, oneshot::Sender<Response>),
    Command(Command, oneshot::Sender<()>),
    Stop,
}

enum Link {
    Up(mpsc::UnboundedSender<Out>),
    Frame(Vec<u8>),
    Down,
    Replaced,
}

enum Out {
    Frame(Vec<u8>),
    Close,
}

/// A running agent.
#[derive(Debug)]
pub struct AgentHandle {
    ctl: mpsc::Sender<Ctl>,
    events: broadcast::Sender<AgentEvent>,
    task: JoinHandle<Result<(), AgentError>>,
}

impl std::fmt::Debug for Ctl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ctl")
    }
}

impl AgentHandle {
    /// Sends a control request.
    pub async fn request(&self, req: Request) -> Result<Response, AgentError> {
        let (tx, rx) = oneshot::channel();
        self.ctl
            .send(Ctl::Request(req, tx))
            .await
            .map_err(|_| AgentError::Gone)?;
        rx.await.map_err(|_| AgentError::Gone)
    }

    /// Gives the agent a user command.
    pub async fn command(&self, c: Command) -> Result<(), AgentError> {
        let (tx, rx) = oneshot::channel();
        self.ctl
            .send(Ctl::Command(c, tx))
            .await
            .map_err(|_| AgentError::Gone)?;
        rx.await.map_err(|_| AgentError::Gone)
    }

    /// Events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<AgentEvent> {
        self.events.subscribe()
    }

    /// Whether the agent task ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the agent (its state is already committed) and waits for it.
    pub async fn stop(self) -> Result<(), AgentError> {
        let _ = self.ctl.send(Ctl::Stop).await;
        match self.task.await {
            Ok(r) => r,
            Err(_) => Err(AgentError::Gone),
        }
    }

    /// Waits until the agent ends by itself.
    pub async fn wait(self) -> Result<(), AgentError> {
        match self.task.await {
            Ok(r) => r,
            Err(_) => Err(AgentError::Gone),
        }
    }

    /// Kills the agent task at once, as a crash would: nothing more is written or sent
    /// (whatever was committed stays).
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// Starts an agent from its host and first effects.
pub fn spawn(
    host: AgentHost,
    first: Vec<Effect>,
    opts: RunOptions,
) -> Result<AgentHandle, AgentError> {
    let (ctl_tx, ctl_rx) = mpsc::channel(64);
    let (events, _) = broadcast::channel(1024);
    let listener = match &opts.control_socket {
        Some(p) => Some(bind_control(p)?),
        None => None,
    };
    let ev = events.clone();
    let ctl2 = ctl_tx.clone();
    let task = tokio::spawn(async move {
        let (link_tx, link_rx) = mpsc::channel(1024);
        let link = tokio::spawn(link_task(
            opts.relay.clone(),
            link_tx,
            opts.backoff_min,
            opts.backoff_max,
        ));
        let control = listener.map(|(l, p)| tokio::spawn(serve_control(l, p, ctl2)));
        let r = AgentTask::new(host, opts, ev)
            .run(first, ctl_rx, link_rx)
            .await;
        let mut link = link;
        if tokio::time::timeout(Duration::from_millis(500), &mut link)
            .await
            .is_err()
        {
            link.abort();
        }
        if let Some(c) = control {
            c.abort();
        }
        r
    });
    Ok(AgentHandle {
        ctl: ctl_tx,
        events,
        task,
    })
}

struct AgentTask {
    host: AgentHost,
    opts: RunOptions,
    events: broadcast::Sender<AgentEvent>,
    link: Option<mpsc::UnboundedSender<Out>>,
    ui: PromptUi,
    keys: Option<mpsc::UnboundedReceiver<crate::term::UiKey>>,
    pending: Vec<Command>,
}

impl AgentTask {
    fn new(host: AgentHost, mut opts: RunOptions, events: broadcast::Sender<AgentEvent>) -> Self {
        let keys = opts.terminal.as_mut().and_then(|t| t.take_keys());
        AgentTask {
            host,
            opts,
            events,
            link: None,
            ui: PromptUi::new(),
            keys,
            pending: Vec::new(),
        }
    }

    fn now(&self) -> Timestamp {
        a2acp_runtime::now()
    }

    async fn run(
        mut self,
        first: Vec<Effect>,
        ctl: mpsc::Receiver<Ctl>,
        link: mpsc::Receiver<Link>,
    ) -> Result<(), AgentError> {
        let r = self.run_loop(first, ctl, link).await;
        // Close the WebSocket properly; the link task ends when it cannot report to us.
        if let Some(l) = self.link.take() {
            let _ = l.send(Out::Close);
        }
        r
    }

    async fn run_loop(
        &mut self,
        first: Vec<Effect>,
        mut ctl: mpsc::Receiver<Ctl>,
        mut link: mpsc::Receiver<Link>,
    ) -> Result<(), AgentError> {
        self.execute(first);
        let mut link_open = true;
        loop {
            while let Some(c) = self.pending.pop() {
                let e = self.host.handle(self.now(), Input::Command(c))?;
                self.execute(e);
            }
            let timer = self.host.poll_timeout().map(|t| {
                let ms = t.as_millis().saturating_sub(self.now().as_millis());
                tokio::time::Instant::now() + Duration::from_millis(ms)
            });
            let sleep = async {
                match timer {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let key = async {
                match self.keys.as_mut() {
                    Some(k) => k.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                l = link.recv(), if link_open => match l {
                    Some(l) => self.on_link(l)?,
                    // The link task gave up (replaced): the agent goes on offline.
                    None => link_open = false,
                },
                c = ctl.recv() => match c {
                    None | Some(Ctl::Stop) => return Ok(()),
                    Some(Ctl::Request(req, reply)) => {
                        let (resp, e) = self.host.control(self.now(), req)?;
                        self.sync_ui_after_answer();
                        self.execute(e);
                        let _ = reply.send(resp);
                    }
                    Some(Ctl::Command(c, reply)) => {
                        let e = self.host.handle(self.now(), Input::Command(c))?;
                        self.sync_ui_after_answer();
                        self.execute(e);
                        let _ = reply.send(());
                    }
                },
                k = key => match k {
                    Some(crate::term::UiKey::Key(k)) => {
                        let outs = self.ui.key(k);
                        self.ui_out(outs);
                    }
                    Some(crate::term::UiKey::Quit) | None => return Ok(()),
                },
                _ = sleep => {
                    let e = self.host.handle_timeout(self.now())?;
                    self.execute(e);
                }
            }
        }
    }

    /// Prompts answered through the control socket leave the terminal's queue too.
    fn sync_ui_after_answer(&mut self) {
        let open: Vec<u64> = self.ui.open().map(|p| p.id).collect();
        for id in open {
            if !self.host.prompts().contains_key(&id) {
                let outs = self.ui.close(id);
                self.ui_out(outs);
            }
        }
    }

    fn on_link(&mut self, l: Link) -> Result<(), AgentError> {
        let now = self.now();
        match l {
            Link::Up(tx) => {
                self.link = Some(tx);
                let _ = self.events.send(AgentEvent::Link(true));
                let e = self.host.handle(now, Input::Connected)?;
                self.execute(e);
            }
            Link::Frame(b) => {
                let e = self.host.handle(now, Input::Bytes(b))?;
                self.execute(e);
            }
            Link::Down => {
                self.link = None;
                let _ = self.events.send(AgentEvent::Link(false));
                let e = self.host.handle(now, Input::Disconnected)?;
                self.execute(e);
            }
            Link::Replaced => {
                self.link = None;
                let _ = self.events.send(AgentEvent::Replaced);
                let e = self.host.handle(now, Input::Disconnected)?;
                self.execute(e);
                self.say(&format!(
                    "another connection of {} took over at the relay; this agent stays offline (run it again to take over)",
                    self.host.agent().address()
                ));
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

    fn execute(&mut self, effects: Vec<Effect>) {
        if self.opts.transcript {
            // What was received first, then what the agent did, then what the user sees.
            let mut lines: Vec<(u8, String)> = effects
                .iter()
                .filter_map(|e| {
                    let (mark, text) = a2acp_runtime::transcript::describe(self.host.agent(), e)?;
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
                        if l.send(Out::Frame(b.clone())).is_err() {
                            self.link = None;
                        }
                    }
                }
                Effect::CloseConnection => {
                    if let Some(l) = self.link.take() {
                        let _ = l.send(Out::Close);
                    }
                }
                Effect::Prompt(p) => self.show_prompt(p),
                Effect::ClosePrompt(id) => {
                    let outs = self.ui.close(*id);
                    self.ui_out(outs);
                }
                Effect::Notify(n) => {
                    if !self.opts.transcript {
                        info!(kind = ?n.kind, thread = n.thread_id.as_deref().unwrap_or("-"), "{}", n.text);
                    }
                }
                Effect::Audit(a) => debug!(
                    thread = a.thread_id.as_deref().unwrap_or("-"),
                    "{}", a.event
                ),
                Effect::Action(_) => {}
            }
            let _ = self.events.send(AgentEvent::Effect(e));
        }
    }

    fn show_prompt(&mut self, p: &Prompt) {
        if let Some(u) = &self.opts.auto {
            self.pending.insert(0, u.answer(p));
            return;
        }
        if self.opts.terminal.is_some() {
            let outs = self.ui.show(p.clone());
            self.ui_out(outs);
            return;
        }
        if self.opts.print_prompts {
            println!(
                "{}\n   (answer with `a2acp answer {} ...`: {})",
                prompt::render(p),
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

async fn link_task(url: String, to_agent: mpsc::Sender<Link>, min: Duration, max: Duration) {
    let mut backoff = min;
    loop {
        match crate::ws::connect(&url).await {
            Ok(ws) => {
                let started = tokio::time::Instant::now();
                let (tx, rx) = mpsc::unbounded_channel();
                if to_agent.send(Link::Up(tx)).await.is_err() {
                    return;
                }
                let replaced = pump(ws, rx, &to_agent).await;
                if replaced {
                    let _ = to_agent.send(Link::Replaced).await;
                    return;
                }
                if to_agent.send(Link::Down).await.is_err() {
                    return;
                }
                if started.elapsed() > Duration::from_secs(10) {
                    backoff = min;
                }
            }
            Err(e) => warn!(error = %e, "relay unreachable"),
        }
        let jitter = {
            let mut b = [0u8; 8];
            let _ = getrandom::fill(&mut b);
            let r = u64::from_le_bytes(b);
            let half = (backoff.as_millis() as u64 / 2).max(1);
            Duration::from_millis(r % half)
        };
        let wait = backoff + jitter;
        info!(
            retry_in_ms = wait.as_millis() as u64,
            "reconnecting to the relay"
        );
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(max);
    }
}

/// Moves frames both ways until the connection ends; `true` if the relay said another
/// connection replaced this one.
async fn pump(
    ws: crate::ws::Ws,
    mut rx: mpsc::UnboundedReceiver<Out>,
    to_agent: &mpsc::Sender<Link>,
) -> bool {
    let (mut sink, mut source) = ws.split();
    let mut replaced = false;
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
            if bytes.len() < 64
                && matches!(RelayFrame::from_bytes(&bytes), Ok(RelayFrame::Replaced))
            {
                replaced = true;
            }
            if to_agent.send(Link::Frame(bytes)).await.is_err() {
                break;
            }
        }
    };
    let writer = async {
        while let Some(first) = rx.recv().await {
            let mut next = Some(first);
            while let Some(o) = next.take() {
                match o {
                    Out::Frame(b) => {
                        let Ok(t) = Utf8Bytes::try_from(b) else {
                            continue;
                        };
                        if sink.feed(Message::Text(t)).await.is_err() {
                            return;
                        }
                    }
                    Out::Close => {
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
    tokio::select! {
        _ = reader => {}
        _ = writer => {}
    }
    replaced
}

fn bind_control(path: &std::path::Path) -> Result<(UnixListener, PathBuf), AgentError> {
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
    let l = UnixListener::bind(path).map_err(|e| err(e.to_string()))?;
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    Ok((l, path.to_path_buf()))
}

async fn serve_control(l: UnixListener, path: PathBuf, ctl: mpsc::Sender<Ctl>) {
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _cleanup = Cleanup(path);
    loop {
        let Ok((s, _)) = l.accept().await else {
            continue;
        };
        let ctl = ctl.clone();
        tokio::spawn(async move {
            let (r, mut w) = s.into_split();
            let mut r = BufReader::new(r).take_limited();
            let mut line = String::new();
            let resp = match r.read_line(&mut line).await {
                Ok(_) if line.len() > MAX_REQUEST_BYTES => Response::err("request too large"),
                Ok(0) => return,
                Ok(_) => match serde_json::from_str::<Request>(line.trim()) {
                    Ok(req) => {
                        let (tx, rx) = oneshot::channel();
                        if ctl.send(Ctl::Request(req, tx)).await.is_err() {
                            Response::err("the agent is stopping")
                        } else {
                            rx.await
                                .unwrap_or_else(|_| Response::err("the agent is stopping"))
                        }
                    }
                    Err(e) => Response::err(format!("bad request: {e}")),
                },
                Err(e) => Response::err(format!("bad request: {e}")),
            };
            let mut out = serde_json::to_vec(&resp).unwrap_or_default();
            out.push(b'\n');
            let _ = w.write_all(&out).await;
            let _ = w.shutdown().await;
        });
    }
}

trait TakeLimited: Sized {
    fn take_limited(self) -> tokio::io::Take<Self>;
}

impl<R: tokio::io::AsyncRead + Unpin> TakeLimited for BufReader<R> {
    fn take_limited(self) -> tokio::io::Take<Self> {
        use tokio::io::AsyncReadExt;
        self.take(MAX_REQUEST_BYTES as u64 + 1)
    }
}

/// Sends one request to the agent whose control socket is `path`.
pub async fn control_request(path: &std::path::Path, req: &Request) -> Result<Response, String> {
    let s = UnixStream::connect(path).await.map_err(|e| {
        format!(
            "no agent is running on {} ({e}); start it with `a2acp agent run`",
            path.display()
        )
    })?;
    let (r, mut w) = s.into_split();
    let mut line = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    line.push(b'\n');
    w.write_all(&line).await.map_err(|e| e.to_string())?;
    let mut r = BufReader::new(r);
    let mut resp = String::new();
    tokio::time::timeout(Duration::from_secs(30), r.read_line(&mut resp))
        .await
        .map_err(|_| "the agent did not answer within 30 s".to_string())?
        .map_err(|e| e.to_string())?;
    serde_json::from_str(&resp).map_err(|e| format!("bad answer from the agent: {e}"))
}
