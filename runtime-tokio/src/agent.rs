//! The agent daemon on tokio. The daemon itself — the loop that owns the
//! [`AgentHost`](a2acp_runtime::agent_host::AgentHost) (the core, its SQLite store and its
//! prompts) and the relay link that reconnects with exponential backoff and jitter — is
//! executor-independent and lives in [`a2acp_runtime::daemon`]; this module runs it on
//! tokio tasks with tokio's timer, TCP and Unix sockets, and serves the control socket.

use std::time::Duration;

use a2acp_core::agent::Command;
use a2acp_runtime::agent_host::{AgentHost, Effect};
use a2acp_runtime::control::{Request, Response, MAX_REQUEST_BYTES};
use a2acp_runtime::daemon::{self, Ctl};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

pub use a2acp_runtime::daemon::{AgentError, AgentEvent, RunOptions};

/// A running agent.
#[derive(Debug)]
pub struct AgentHandle {
    ctl: flume::Sender<Ctl>,
    events: broadcast::Sender<AgentEvent>,
    task: JoinHandle<Result<(), AgentError>>,
    a2a: Option<std::net::SocketAddr>,
    agentic: Option<std::net::SocketAddr>,
    web: Option<std::net::SocketAddr>,
}

impl AgentHandle {
    /// Where the A2A listener listens (`--a2a-listen`), if it was asked for.
    pub fn a2a_addr(&self) -> Option<std::net::SocketAddr> {
        self.a2a
    }

    /// Where the Agentic Protocol service listens (`--agentic-listen`), if it was asked
    /// for.
    pub fn agentic_addr(&self) -> Option<std::net::SocketAddr> {
        self.agentic
    }

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
        let _ = self.ctl.send_async(Ctl::Stop).await;
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
    mut host: AgentHost,
    first: Vec<Effect>,
    opts: RunOptions,
) -> Result<AgentHandle, AgentError> {
    let (ctl_tx, ctl_rx) = flume::bounded(64);
    let (events, _) = broadcast::channel(1024);
    let control = match &opts.control_socket {
        Some(p) => {
            let (l, file) = daemon::bind_control(p)?;
            let l = UnixListener::from_std(l).map_err(|e| AgentError::Control {
                path: p.clone(),
                message: e.to_string(),
            })?;
            Some((l, file))
        }
        None => None,
    };
    let a2a = match &opts.a2a {
        Some(o) => {
            let l = crate::a2a::bind(o).map_err(|message| AgentError::Control {
                path: std::path::PathBuf::from(&o.listen),
                message,
            })?;
            let addr = l.local_addr().ok();
            Some((l, o.clone(), addr))
        }
        None => None,
    };
    let a2a_addr = a2a.as_ref().and_then(|(_, _, a)| *a);
    let agentic = match &opts.agentic {
        Some(o) => {
            let fail = |message: String| AgentError::Control {
                path: std::path::PathBuf::from(&o.listen),
                message,
            };
            let store = match host.agentic_store() {
                Some(s) => s,
                None => {
                    let s = crate::agentic::open_store(o).map_err(fail)?;
                    host.set_agentic_store(s.clone());
                    s
                }
            };
            let l = crate::agentic::bind(o).map_err(fail)?;
            let addr = l.local_addr().ok();
            Some((l, o.clone(), store, addr))
        }
        None => None,
    };
    let agentic_addr = agentic.as_ref().and_then(|(_, _, _, a)| *a);
    let web = a2acp_runtime::web::Web::for_run(&opts)?;
    let web_addr = web.as_ref().map(|w| w.addr());
    let ctl4 = ctl_tx.clone();
    let address = (
        host.agent().address().clone(),
        a2acp_core::bridge::phase1::Tasks::id(host.agent()),
    );
    let ev = events.clone();
    let ctl2 = ctl_tx.clone();
    let ctl3 = ctl_tx.clone();
    let task = tokio::spawn(async move {
        let (link_tx, link_rx) = flume::bounded(1024);
        let tls = opts.tls.clone();
        let link = tokio::spawn(daemon::link_loop(
            opts.relay.clone(),
            link_tx,
            opts.backoff_min,
            opts.backoff_short_max,
            opts.backoff_max,
            move |url| {
                let tls = tls.clone();
                async move { crate::ws::connect_with(&url, tls.as_ref()).await }
            },
            tokio::time::sleep,
        ));
        let control = control.map(|(l, file)| tokio::spawn(serve_control(l, file, ctl2)));
        let a2a = a2a.map(|(l, o, _)| tokio::spawn(crate::a2a::serve(l, o, address, ctl3)));
        let agentic =
            agentic.map(|(l, o, store, _)| tokio::spawn(crate::agentic::serve(l, o, store)));
        let web = web.map(|w| tokio::spawn(w.serve(ctl4)));
        let emit = Box::new(move |e| {
            let _ = ev.send(e);
        });
        let r = daemon::run(host, first, opts, emit, ctl_rx, link_rx, tokio::time::sleep).await;
        let mut link = link;
        if tokio::time::timeout(Duration::from_millis(500), &mut link)
            .await
            .is_err()
        {
            link.abort();
        }
        // Waits until the control task is gone, so its socket file is removed before
        // `stop` returns (as on smol): an aborted task is dropped later, by the runtime.
        if let Some(c) = control {
            c.abort();
            let _ = c.await;
        }
        if let Some(a) = a2a {
            a.abort();
            let _ = a.await;
        }
        if let Some(a) = agentic {
            a.abort();
            let _ = a.await;
        }
        if let Some(w) = web {
            w.abort();
            let _ = w.await;
        }
        r
    });
    Ok(AgentHandle {
        ctl: ctl_tx,
        events,
        task,
        a2a: a2a_addr,
        agentic: agentic_addr,
        web: web_addr,
    })
}

async fn serve_control(l: UnixListener, _file: daemon::SocketFile, ctl: flume::Sender<Ctl>) {
    loop {
        let Ok((s, _)) = l.accept().await else {
            continue;
        };
        let ctl = ctl.clone();
        tokio::spawn(async move {
            let (r, mut w) = s.into_split();
            let mut r = BufReader::new(r).take(MAX_REQUEST_BYTES as u64 + 1);
            let mut line = String::new();
            let read = r.read_line(&mut line).await;
            if let Some(out) = daemon::answer_control_line(read, &line, &ctl).await {
                let _ = w.write_all(&out).await;
                let _ = w.shutdown().await;
            }
        });
    }
}

/// Sends one request to the agent whose control socket is `path`.
pub async fn control_request(path: &std::path::Path, req: &Request) -> Result<Response, String> {
    let s = UnixStream::connect(path)
        .await
        .map_err(|e| daemon::no_agent(path, &e))?;
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
    daemon::parse_control_answer(&resp)
}
