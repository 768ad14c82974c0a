//! The HTTP side of the A2A client (seed 003, §18): the calls the agent asks for
//! ([`a2acp_core::bridge::a2a::Client::take_calls`]), each on a thread of its own with
//! `ureq`, their outcomes back on a channel. No protocol decision here: what to send and
//! what an answer means are the core's (`a2acp_core::bridge::a2a::client`).
//!
//! Bounded: the connection within [`CONNECT_TIMEOUT`], the whole call within
//! [`CALL_TIMEOUT`] (a server that never finishes its answer is cut there), the body
//! within the call's limit (more is [`A2aOutcome::TooLarge`]), at most [`MAX_IN_FLIGHT`]
//! calls at once (the others wait for the next turn).

use std::io::Read;
use std::time::Duration;

use a2acp_core::bridge::a2a::{A2aCallKind, A2aClientCall, A2aOutcome};

/// The longest wait for a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest one call may take, its whole answer read (a blocking `SendMessage`
/// returns once the remote task stops for input or ends).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Calls out at once.
pub const MAX_IN_FLIGHT: usize = 16;

/// The client: calls run on threads of their own; outcomes arrive on
/// [`A2aClient::outcomes`].
#[derive(Debug)]
pub struct A2aClient {
    agent: ureq::Agent,
    tx: flume::Sender<(A2aClientCall, A2aOutcome)>,
    rx: flume::Receiver<(A2aClientCall, A2aOutcome)>,
    out: usize,
}

impl Default for A2aClient {
    fn default() -> Self {
        Self::with_timeout(CALL_TIMEOUT)
    }
}

impl A2aClient {
    /// A client with the limits above, each call cut at `call_timeout` (https through
    /// rustls with the web PKI roots).
    pub fn with_timeout(call_timeout: Duration) -> Self {
        let agent = peer_agent(Some(call_timeout));
        let (tx, rx) = flume::unbounded();
        A2aClient {
            agent,
            tx,
            rx,
            out: 0,
        }
    }

    /// Where outcomes arrive.
    pub fn outcomes(&self) -> flume::Receiver<(A2aClientCall, A2aOutcome)> {
        self.rx.clone()
    }

    /// Whether another call may start.
    pub fn has_room(&self) -> bool {
        self.out < MAX_IN_FLIGHT
    }

    /// An outcome was taken from [`A2aClient::outcomes`].
    pub fn done(&mut self) {
        self.out = self.out.saturating_sub(1);
    }

    /// Starts a call; returns at once.
    pub fn submit(&mut self, call: A2aClientCall) {
        let agent = self.agent.clone();
        let tx = self.tx.clone();
        self.out += 1;
        let c = call.clone();
        let spawned = std::thread::Builder::new()
            .name("a2a-client".into())
            .spawn(move || {
                let outcome = run(&agent, &c);
                let _ = tx.send((c, outcome));
            });
        if let Err(e) = spawned {
            let _ = self.tx.send((
                call,
                A2aOutcome::Network(format!("cannot start the call: {e}")),
            ));
        }
    }
}

/// One call, blocking.
pub fn run(agent: &ureq::Agent, call: &A2aClientCall) -> A2aOutcome {
    let resp = match (&call.kind, &call.body) {
        (A2aCallKind::Card, _) | (_, None) => agent
            .get(&call.url)
            .header("Accept", "application/json")
            .call(),
        (_, Some(body)) => agent
            .post(&call.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .header(
                "A2A-Version",
                a2acp_core::bridge::a2a::task::PROTOCOL_VERSION,
            )
            .send(&body[..]),
    };
    let resp = match resp {
        Ok(r) => r,
        Err(e) => return A2aOutcome::Network(e.to_string()),
    };
    let status = resp.status().as_u16();
    match read_capped(resp.into_body(), call.limit) {
        Ok(Some(body)) => A2aOutcome::Response { status, body },
        Ok(None) => A2aOutcome::TooLarge,
        Err(e) => A2aOutcome::Network(format!("reading the answer: {e}")),
    }
}

/// A `ureq` agent for calls to other agents (the A2A client, the Phase-1 sender): an
/// HTTP status is an answer, not an error; no redirect is followed; each call within
/// `call_timeout` (its connection within [`CONNECT_TIMEOUT`]) when given, else as each
/// request sets.
pub(crate) fn peer_agent(call_timeout: Option<Duration>) -> ureq::Agent {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .user_agent(concat!("a2acp/", env!("CARGO_PKG_VERSION")));
    if let Some(t) = call_timeout {
        config = config
            .timeout_connect(Some(CONNECT_TIMEOUT.min(t)))
            .timeout_global(Some(t));
    }
    config.build().into()
}

/// An answer's body, read up to `limit` bytes and one more: `None` when it is longer
/// (the rest is never read).
pub(crate) fn read_capped(body: ureq::Body, limit: usize) -> std::io::Result<Option<Vec<u8>>> {
    let limit = limit as u64;
    let mut out = Vec::new();
    body.into_reader().take(limit + 1).read_to_end(&mut out)?;
    Ok((out.len() as u64 <= limit).then_some(out))
}
