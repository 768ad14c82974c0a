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
use std::path::PathBuf;
use std::time::{Duration, Instant};

use a2acp_core::agent::Command;

use crate::agent_host::{AgentHost, Effect, HostError};
use crate::control::{Request, Response};
use crate::prompt::PromptUi;
use crate::scripted::ScriptedUser;
use crate::term::Term;

mod control_socket;
mod doors;
mod driver;
mod link;

pub use control_socket::*;
pub use doors::*;
use driver::Driver;
pub use link::*;

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
    /// The relay's URLs (`ws://host:port` or `wss://host:port`), its doors, tried in
    /// turn ([`Doors`]).
    pub relay: crate::config::RelayUrls,
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
    /// Serve the Agentic Protocol (`--agentic-listen`; the tokio binding only).
    pub agentic: Option<crate::agentic::AgenticOptions>,
    /// Serve the consent page (`--web`; both bindings).
    pub web: Option<crate::web::WebOptions>,
}

/// How long after losing the relay the short backoff cap
/// ([`RunOptions::backoff_short_max`]) applies; after that, the long one.
pub const RECENTLY_REACHABLE: Duration = Duration::from_secs(60);

/// How long `thread start` (the control request) waits for the relay to accept or
/// refuse the thread's first packet before it answers anyway.
pub const FIRST_PACKET_WAIT: Duration = Duration::from_secs(5);

impl RunOptions {
    /// Defaults for `relay`: one URL (`&str`) or the doors of a config file
    /// (`&RelayUrls`).
    pub fn new(relay: impl Into<crate::config::RelayUrls>, name: &str) -> Self {
        RunOptions {
            relay: relay.into(),
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
            agentic: None,
            web: None,
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
    Phase1(
        Vec<u8>,
        flume::Sender<a2acp_core::bridge::phase1::Phase1Reply>,
    ),
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
    /// Connected, through this door (one of the relay's URLs): write frames through
    /// this channel.
    Up(flume::Sender<LinkOut>, String),
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

/// How long `key_rotate` (the control request) waits for the relay to install or refuse
/// the rotation before it answers `state: "pending"` (the rotation goes on: it finishes
/// when the agent reaches its relay).
pub const ROTATE_WAIT: Duration = Duration::from_secs(20);

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
        rotating: Vec::new(),
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
