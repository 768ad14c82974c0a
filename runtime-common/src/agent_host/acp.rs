//! ACP (seed 004) on the host: the ACP bridge's messages handed to the session, what
//! the link brings handed to the session, and the session's work applied to the agent
//! through the bridge's entry points ([`a2acp_core::bridge::acp::Threads`]).

use a2acp_core::agent::{AgentEvent, BridgeMessage};
use a2acp_core::bridge::acp::threads::Answer;
use a2acp_core::bridge::acp::{AcpEvent, Threads};
use a2acp_core::Timestamp;

use super::{AgentHost, Effect, HostError};
use crate::acp::{Incoming, Todo};

impl AgentHost {
    /// Where ACP's messages and keys arrive, if the agent speaks ACP: the loop feeds each
    /// to [`AgentHost::acp_incoming`].
    pub fn acp_link(&self) -> Option<flume::Receiver<Incoming>> {
        self.acp.as_ref().map(|a| a.incoming())
    }

    /// The ACP session, if the agent speaks ACP.
    pub fn acp(&self) -> Option<&crate::acp::AcpHost> {
        self.acp.as_ref()
    }

    /// Something from the ACP link: a message from the inbox, or a key looked up.
    pub fn acp_incoming(
        &mut self,
        now: Timestamp,
        item: Incoming,
    ) -> Result<Vec<Effect>, HostError> {
        self.now = self.now.max(now);
        if let Some(a) = &mut self.acp {
            a.incoming_item(self.now, item);
        }
        self.drain()
    }

    /// An ACP bridge message ([`Answer`]) for the session.
    pub(super) fn acp_message(&mut self, m: BridgeMessage) {
        let Some(a) = &mut self.acp else {
            tracing::warn!(
                "an ACP answer for `{}` but no [acp] in the config",
                m.endpoint
            );
            return;
        };
        match serde_json::from_str::<Answer>(&m.body) {
            Ok(answer) => a.deliver(self.now, &m.endpoint, &m.thread_id, answer),
            Err(e) => tracing::warn!("an unreadable ACP answer: {e}"),
        }
    }

    /// Applies one piece of the session's work to the agent (its outputs are drained by
    /// the caller).
    pub(super) fn acp_todo(&mut self, todo: Todo) {
        let now = self.now;
        match todo {
            Todo::Exchanged(x) => self
                .agent
                .bridged_input(now, |a| a.audit_event(None, AgentEvent::Exchanged(x))),
            Todo::Asked { thread, id } => Threads::asked(&mut self.agent, now, &thread, &id),
            Todo::Unreachable { thread, why } => {
                Threads::unreachable(&mut self.agent, now, &thread, &why)
            }
            Todo::Event(e) => self.acp_event(now, e),
        }
    }

    fn acp_event(&mut self, now: Timestamp, e: AcpEvent) {
        let refuse = Threads::on_event(&mut self.agent, now, &e);
        let Some(a) = &mut self.acp else { return };
        if let AcpEvent::Established { peer, .. } = &e {
            a.established(now, peer);
        }
        if let Some(r) = refuse {
            a.refuse(now, &r.peer, &r.id, r.code, r.message);
        }
    }
}
