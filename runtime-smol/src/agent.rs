//! The agent daemon on smol. The daemon itself — the loop that owns the
//! [`AgentHost`](a2acp_runtime::agent_host::AgentHost) (the core, its SQLite store and its
//! prompts) and the relay link that reconnects with exponential backoff and jitter — is
//! executor-independent and lives in [`a2acp_runtime::daemon`], shared with the tokio
//! binding; this module runs it on smol tasks with smol's timer, TCP and Unix sockets, and
//! serves the control socket (the same protocol: `a2acp --home DIR threads` works against
//! an agent run by `a2acp-smol`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2acp_core::agent::Command;
use a2acp_runtime::agent_host::{AgentHost, Effect};
use a2acp_runtime::control::{Request, Response, MAX_REQUEST_BYTES};
use a2acp_runtime::daemon::{self, Ctl};
use smol::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use smol::net::unix::{UnixListener, UnixStream};
use smol::Task;

pub use a2acp_runtime::daemon::{AgentError, AgentEvent, RunOptions};

/// Events buffered per subscriber; a subscriber that falls further behind misses events.
const EVENT_BUFFER: usize = 1024;

/// The subscribers of an agent's events.
#[derive(Debug, Clone, Default)]
struct Subscribers(Arc<Mutex<Vec<flume::Sender<AgentEvent>>>>);

impl Subscribers {
    fn add(&self) -> flume::Receiver<AgentEvent> {
        let (tx, rx) = flume::bounded(EVENT_BUFFER);
        if let Ok(mut v) = self.0.lock() {
            v.push(tx);
        }
        rx
    }

    fn emit(&self, e: AgentEvent) {
        if let Ok(mut v) = self.0.lock() {
            v.retain(|tx| {
                !matches!(
                    tx.try_send(e.clone()),
                    Err(flume::TrySendError::Disconnected(_))
                )
            });
        }
    }
}

/// A running agent.
#[derive(Debug)]
pub struct AgentHandle {
    ctl: flume::Sender<Ctl>,
    events: Subscribers,
    task: Task<Result<(), AgentError>>,
    web: Option<std::net::SocketAddr>,
}

impl AgentHandle {
    /// Where the consent page listens (`--web`), if it was asked for.
    pub fn web_addr(&self) -> Option<std::net::SocketAddr> {
        self.web
    }

    /// Sends a control request.
    pub async fn request(&self, req: Request) -> Result<Response, AgentError> {
        daemon::request(&self.ctl, req).await
    }

    /// Gives the agent a user command.
    pub async fn command(&self, c: Command) -> Result<(), AgentError> {
        daemon::command(&self.ctl, c).await
    }

    /// Events from now on (the 1,024 most recent unread ones are kept).
    pub fn subscribe(&self) -> flume::Receiver<AgentEvent> {
        self.events.add()
    }

    /// Whether the agent task ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the agent (its state is already committed) and waits for it.
    pub async fn stop(self) -> Result<(), AgentError> {
        let _ = self.ctl.send_async(Ctl::Stop).await;
        self.task.await
    }

    /// Waits until the agent ends by itself.
    pub async fn wait(self) -> Result<(), AgentError> {
        self.task.await
    }

    /// Cancels the agent task at once, as a crash would: nothing more is written or sent
    /// (whatever was committed stays).
    pub async fn kill(self) {
        self.task.cancel().await;
    }
}

/// Starts an agent from its host and first effects, on smol's global executor.
pub fn spawn(
    host: AgentHost,
    first: Vec<Effect>,
    opts: RunOptions,
) -> Result<AgentHandle, AgentError> {
    let (ctl_tx, ctl_rx) = flume::bounded(64);
    let events = Subscribers::default();
    let control = match &opts.control_socket {
        Some(p) => {
            let (l, file) = daemon::bind_control(p)?;
            let l = UnixListener::try_from(l).map_err(|e| AgentError::Control {
                path: p.clone(),
                message: e.to_string(),
            })?;
            Some((l, file))
        }
        None => None,
    };
    // The page is served by hyper, on a thread of its own running tokio; it ends with
    // the process (its requests fail once the agent is gone).
    let web = a2acp_runtime::web::Web::for_run(&opts)?;
    let web_addr = web.as_ref().map(|w| w.addr());
    if let Some(w) = web {
        w.spawn_thread(ctl_tx.clone())
            .map_err(|e| AgentError::Control {
                path: std::path::PathBuf::from("--web"),
                message: e.to_string(),
            })?;
    }
    let ev = events.clone();
    let ctl2 = ctl_tx.clone();
    let task = smol::spawn(async move {
        let (link_tx, link_rx) = flume::bounded(1024);
        let tls = opts.tls.clone();
        let link = smol::spawn(daemon::link_loop(
            opts.relay.clone(),
            link_tx,
            opts.backoff_min,
            opts.backoff_short_max,
            opts.backoff_max,
            move |url| {
                let tls = tls.clone();
                async move { crate::ws::connect_with(&url, tls.as_ref()).await }
            },
            crate::sleep,
        ));
        let control = control.map(|(l, file)| smol::spawn(serve_control(l, file, ctl2)));
        let emit = Box::new(move |e| ev.emit(e));
        let r = daemon::run(host, first, opts, emit, ctl_rx, link_rx, crate::sleep).await;
        // The link ends once it cannot report to the loop; give it time to close the
        // WebSocket properly, then cancel it (dropping a task cancels it).
        smol::future::or(link, crate::sleep(Duration::from_millis(500))).await;
        // Waits until the control task is gone, so its socket file is removed before the
        // process may exit (smol's global executor drops no task at exit).
        if let Some(c) = control {
            c.cancel().await;
        }
        r
    });
    Ok(AgentHandle {
        ctl: ctl_tx,
        events,
        task,
        web: web_addr,
    })
}

async fn serve_control(l: UnixListener, _file: daemon::SocketFile, ctl: flume::Sender<Ctl>) {
    loop {
        let Ok((s, _)) = l.accept().await else {
            continue;
        };
        let ctl = ctl.clone();
        smol::spawn(async move {
            let mut r = BufReader::new(s.clone()).take(MAX_REQUEST_BYTES as u64 + 1);
            let mut line = String::new();
            let read = r.read_line(&mut line).await;
            if let Some(out) = daemon::answer_control_line(read, &line, &ctl).await {
                let mut w = s;
                let _ = w.write_all(&out).await;
                let _ = w.flush().await;
                let _ = w.shutdown(std::net::Shutdown::Write);
            }
        })
        .detach();
    }
}

/// Sends one request to the agent whose control socket is `path`.
pub async fn control_request(path: &std::path::Path, req: &Request) -> Result<Response, String> {
    let mut s = UnixStream::connect(path)
        .await
        .map_err(|e| daemon::no_agent(path, &e))?;
    let mut line = serde_json::to_vec(req).map_err(|e| e.to_string())?;
    line.push(b'\n');
    s.write_all(&line).await.map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut resp = String::new();
    let read = async { Some(r.read_line(&mut resp).await) };
    let timeout = async {
        crate::sleep(Duration::from_secs(30)).await;
        None
    };
    smol::future::or(read, timeout)
        .await
        .ok_or_else(|| "the agent did not answer within 30 s".to_string())?
        .map_err(|e| e.to_string())?;
    daemon::parse_control_answer(&resp)
}
