//! The host's A2A requests (seed 003 and seed 001, §18): one JSON-RPC request of an A2A
//! client, one Phase-1 message; the agent answers, the host commits, then the listener
//! writes the answer.

use a2acp_core::agent::{A2aReply, Phase1Reply};
use a2acp_core::{Address, Timestamp};

use super::{AgentHost, Effect, HostError};

impl AgentHost {
    /// One JSON-RPC request of an A2A client ([`a2acp_core::agent::Agent::handle_a2a`]); its records are
    /// committed before this returns, so the answer never shows what a crash would lose.
    pub fn a2a(
        &mut self,
        now: Timestamp,
        client: &Address,
        body: &[u8],
    ) -> Result<(A2aReply, Vec<Effect>), HostError> {
        self.now = self.now.max(now);
        let reply = self.agent.handle_a2a(self.now, client, body);
        Ok((reply, self.drain()?))
    }

    /// One Phase-1 message of `POST /a2a/messages` ([`a2acp_core::agent::Agent::handle_phase1`]); its
    /// records are committed before this returns.
    pub fn phase1(
        &mut self,
        now: Timestamp,
        body: &[u8],
    ) -> Result<(Phase1Reply, Vec<Effect>), HostError> {
        self.now = self.now.max(now);
        let reply = self.agent.handle_phase1(self.now, body);
        Ok((reply, self.drain()?))
    }
}
