//! A peer's identity key as `key` shows it, and accepting a changed key (§16).

use a2acp_core::agent::{Command, Input};
use a2acp_core::encoding::b64_encode;
use a2acp_core::{Address, Timestamp};

use super::*;
use crate::control::{KeyInfo, Response};

impl AgentHost {
    pub(super) fn key_info(&self, peer: &Address) -> KeyInfo {
        let me = self.agent.address();
        let mine = self.agent.public_key().to_bytes();
        let number = |k: &[u8; 32]| crate::safety::safety_number((&mine, me), (k, peer));
        let pinned = self.agent.pinned_key(peer);
        let changed = self.agent.changed_key(peer);
        KeyInfo {
            address: me.to_string(),
            key: b64_encode(&mine),
            peer: peer.to_string(),
            pinned_key: pinned.map(|k| b64_encode(&k)),
            safety_number: pinned.as_ref().map(number),
            changed_key: changed.map(|k| b64_encode(&k)),
            changed_safety_number: changed.as_ref().map(number),
        }
    }

    pub(super) fn key_accept(
        &mut self,
        now: Timestamp,
        address: &str,
        typed: Option<&str>,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        let peer = match Address::parse(address) {
            Ok(a) => a,
            Err(e) => return Ok((Response::err(format!("`{address}`: {e}")), Vec::new())),
        };
        let info = self.key_info(&peer);
        let Some(expected) = info.changed_safety_number else {
            return Ok((
                Response::err(format!(
                    "no changed key of {peer} waits for acceptance (its pinned key: {})",
                    info.pinned_key.as_deref().unwrap_or("none yet")
                )),
                Vec::new(),
            ));
        };
        if let Some(t) = typed {
            match crate::safety::normalise(t) {
                None => {
                    return Ok((
                        Response::err(
                            "--safety-number takes the 60 digits (spaces allowed); nothing accepted",
                        ),
                        Vec::new(),
                    ))
                }
                Some(d) if d != expected => {
                    return Ok((
                        Response::err(format!(
                            "the safety number does not match the one with {peer}'s new key; nothing accepted. Do not accept the key unless you are sure it is theirs (`a2acp keys show {peer}`)"
                        )),
                        Vec::new(),
                    ))
                }
                Some(_) => {}
            }
        }
        let halted: Vec<String> = self
            .agent
            .threads()
            .values()
            .filter(|t| t.peer == peer && t.halted && !t.state.is_terminal())
            .map(|t| t.id.clone())
            .collect();
        let e = self.handle(
            now,
            Input::Command(Command::AcceptKeyChange {
                address: peer.clone(),
            }),
        )?;
        if self.agent.pinned_key(&peer).map(|k| b64_encode(&k)) != info.changed_key {
            return Ok((
                Response::err(format!("the new key of {peer} could not be accepted")),
                e,
            ));
        }
        Ok((
            Response::ok(format!(
                "the new key of {peer} is pinned{}; {} halted thread(s) resumed or closed (start new ones with `a2acp thread start`)",
                if typed.is_some() { " (safety numbers match)" } else { "" },
                halted.len()
            )),
            e,
        ))
    }
}
