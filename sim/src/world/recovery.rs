//! A lost device and its recovery (SPEC-NOTES "Recovery"): the agent binds a recovery key
//! drawn from the run's seed; the device is lost (the agent, its records and its identity
//! key are gone); a new device draws a new key and runs the recovery exchange
//! ([`RecoverClient`]) with the relay on a connection of its own, frame by frame with the
//! agent's link latency; once the relay installed it, the agent starts from empty records
//! on the new key and binds the same recovery key again, as `a2acp agent recover` leaves
//! it.

use a2acp_core::crypto::IdentityKey;
use a2acp_core::link::RelayFrame;
use a2acp_core::recover_client::{RecoverClient, RecoverStep};
use a2acp_core::recovery::recovery_key_from_seed;
use a2acp_core::relay::{ConnId, RelayInput, Source};

use super::events::Ev;
use super::Records;
use super::Sim;
use crate::transcript::Tag;
use crate::util::derive_seed;

impl Sim {
    /// Agent `i`'s recovery key (its words' seed is drawn from the run's seed).
    pub(super) fn recovery_key(&self, i: usize) -> IdentityKey {
        let name = &self.nodes[i].name;
        recovery_key_from_seed(derive_seed(self.seed, &format!("recovery/{name}")))
    }

    /// The device is lost: the agent stops for good, its records and key are gone.
    pub(super) fn lose_device(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        self.line(
            &name,
            '|',
            "the device is lost: the agent, its records and its identity key are gone".into(),
            Tag::Fault,
        );
        self.checker.device_lost(i);
        let n = &mut self.nodes[i];
        n.store = Records::new();
        n.backup = None;
        n.other_device = None;
        n.deferred.clear();
        n.lost = true;
        if n.agent.take().is_some() {
            n.inc += 1;
            n.prompts.clear();
            n.scheduled.clear();
            n.reconnect_pending = false;
            n.delivering = None;
            if let Some(k) = n.timer.take() {
                self.queue.remove(&k);
            }
            self.close_agent_conn(i);
        }
    }

    /// A new device starts the recovery of agent `i`'s address with its words.
    pub(super) fn recover(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        let Some(r) = self.agent_relay[i].filter(|&r| self.relays[r].relay.is_some()) else {
            self.line(
                &name,
                '|',
                "recovery: the relay cannot be reached; nothing changed".into(),
                Tag::Fault,
            );
            return;
        };
        self.nodes[i].identity_gen += 1;
        let seed = derive_seed(
            self.seed,
            &format!("identity/{name}/{}", self.nodes[i].identity_gen),
        );
        let client = RecoverClient::new(
            self.nodes[i].address.clone(),
            IdentityKey::from_seed(seed),
            self.recovery_key(i),
        );
        let first = client.start().to_bytes();
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        self.recovering.insert(conn, (i, client, seed));
        self.line(
            &name,
            '|',
            "a new device recovers the address with the recovery words (a new identity key)".into(),
            Tag::Fault,
        );
        self.feed_relay(
            r,
            RelayInput::Connected {
                conn,
                source: Source(1_000_000 + i as u128),
            },
        );
        let at = self.now.add(self.latency(i));
        self.push(
            at,
            Ev::RecoverToRelay {
                relay: r,
                conn,
                bytes: first,
            },
        );
    }

    /// Relay `r` sent `bytes` on a recovery connection.
    pub(super) fn recovery_frame(&mut self, r: usize, conn: ConnId, bytes: &[u8]) {
        let Ok(frame) = RelayFrame::from_bytes(bytes) else {
            return;
        };
        let Some((i, client, seed)) = self.recovering.get_mut(&conn) else {
            return;
        };
        let (i, seed) = (*i, *seed);
        let step = client.on_frame(frame);
        let name = self.nodes[i].name.clone();
        match step {
            RecoverStep::Wait => {}
            RecoverStep::Send(f) => {
                let at = self.now.add(self.latency(i));
                self.push(
                    at,
                    Ev::RecoverToRelay {
                        relay: r,
                        conn,
                        bytes: f.to_bytes(),
                    },
                );
            }
            RecoverStep::Recovered { .. } => {
                self.recovering.remove(&conn);
                self.nodes[i].identity = seed;
                self.nodes[i].next_identity = None;
                let at = self.now.add(self.latency(i));
                self.push(at, Ev::DeviceRecovered { node: i });
            }
            RecoverStep::Refused { reason, .. } => {
                self.recovering.remove(&conn);
                self.line(
                    &name,
                    '|',
                    format!("recovery refused by the relay ({reason}); nothing changed"),
                    Tag::Fault,
                );
            }
        }
    }

    /// The relay installed the recovery: the agent starts on its new key from empty
    /// records and binds its recovery key again.
    pub(super) fn device_recovered(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        self.line(
            &name,
            '|',
            "recovered: the new device runs the agent on its new key, from empty records".into(),
            Tag::Fault,
        );
        self.nodes[i].lost = false;
        self.restart_agent(i);
        let key = self.recovery_key(i).public().to_bytes();
        self.command(
            i,
            a2acp_core::agent::Command::BindRecovery { recovery_key: key },
        );
    }
}
