//! The host's A2A requests (seed 003 and seed 001, §18): one JSON-RPC request of an A2A
//! client, one Phase-1 message; the agent answers, the host commits, then the listener
//! writes the answer.

use a2acp_core::agent::{Command, Input};
use a2acp_core::bridge::a2a::{A2aClientCall, A2aOutcome, A2aReply, Client, Server};
use a2acp_core::bridge::phase1::{Phase1Reply, Tasks};
use a2acp_core::packet::{Context, Intent};
use a2acp_core::{Address, Timestamp};

use crate::control::{Recipients, Response};

use super::{AgentHost, Effect, HostError};

impl AgentHost {
    /// One JSON-RPC request of an A2A client ([`Server::handle`]); its records are
    /// committed before this returns, so the answer never shows what a crash would lose.
    pub fn a2a(
        &mut self,
        now: Timestamp,
        client: &Address,
        body: &[u8],
    ) -> Result<(A2aReply, Vec<Effect>), HostError> {
        self.now = self.now.max(now);
        let reply = Server::handle(&mut self.agent, self.now, client, body);
        Ok((reply, self.drain()?))
    }

    /// One Phase-1 message of `POST /a2a/messages` ([`Tasks::handle`]); its
    /// records are committed before this returns.
    pub fn phase1(
        &mut self,
        now: Timestamp,
        body: &[u8],
    ) -> Result<(Phase1Reply, Vec<Effect>), HostError> {
        self.now = self.now.max(now);
        let reply = Tasks::handle(&mut self.agent, self.now, body);
        Ok((reply, self.drain()?))
    }

    /// The calls due for threads with plain A2A agents (§18), marked as out; their
    /// marks are committed (a restart makes them again).
    pub fn take_a2a_calls(
        &mut self,
        now: Timestamp,
    ) -> Result<(Vec<A2aClientCall>, Vec<Effect>), HostError> {
        self.now = self.now.max(now);
        let calls = Client::take_calls(&mut self.agent, self.now);
        Ok((calls, self.drain()?))
    }

    /// `start_thread` to a bridged peer: an A2A agent's URL (§18, `bridge` "a2a": the
    /// agent reads the card and drives the task) or an ACP agent (`acp:ID`, `bridge`
    /// "acp": the handshake, then the first packet as a request). One recipient only
    /// (`one`). Answers the thread id at once (nothing goes through the relay), or why no
    /// thread started.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_bridged(
        &mut self,
        now: Timestamp,
        bridge: &str,
        one: bool,
        to: Recipients,
        category: String,
        summary: String,
        context: Option<Context>,
        urgent: bool,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        if !one {
            return Ok((
                Response::err(
                    "a thread with an A2A agent (--to https://…) or an ACP agent (--to acp:ID) has that one recipient: no group, --quorum or --sequential",
                ),
                Vec::new(),
            ));
        }
        if category.trim().is_empty() || summary.trim().is_empty() {
            return Ok((
                Response::err("--category and --summary must not be empty"),
                Vec::new(),
            ));
        }
        let url = to.list().remove(0);
        let intent = Intent {
            category,
            summary,
            urgency: Some(if urgent { "urgent" } else { "normal" }.into()),
            scope_change: None,
        };
        let before: Vec<String> = self.agent.threads().keys().cloned().collect();
        let e = self.handle(
            now,
            Input::Command(Command::StartBridgedThread {
                bridge: bridge.into(),
                to: url,
                intent,
                context: context.unwrap_or_default(),
            }),
        )?;
        let new = self
            .agent
            .threads()
            .keys()
            .find(|k| !before.contains(k))
            .cloned();
        Ok(match new {
            Some(id) => {
                let peer = self.agent.thread(&id).map(|t| t.peer.to_string());
                (
                    Response::ok(
                        serde_json::json!({ "thread_id": id, bridge: true, "peer": peer }),
                    ),
                    e,
                )
            }
            None => {
                let why = self
                    .notifications
                    .back()
                    .map(|n| n.notification.text.clone())
                    .unwrap_or_else(|| "the agent refused it".into());
                (Response::err(format!("no thread started: {why}")), e)
            }
        })
    }

    /// A call of the A2A client ended ([`Client::handle_outcome`]).
    pub fn a2a_client(
        &mut self,
        now: Timestamp,
        call: &A2aClientCall,
        outcome: A2aOutcome,
    ) -> Result<Vec<Effect>, HostError> {
        self.now = self.now.max(now);
        Client::handle_outcome(&mut self.agent, self.now, call, outcome);
        self.drain()
    }
}
