//! Rotating this agent's own identity key (`a2acp keys rotate`; §16, SPEC-NOTES "Key
//! rotation"): the key files of the home around the core's rotation.
//!
//! The new key is written to `identity.next.key` (whole, synced) *before* the core gets
//! it ([`Command::RotateKey`]); `identity.key` keeps the old one. When the core reports
//! [`AgentEvent::OwnKeyRotated`] — committed to the database first, with the statement —
//! `identity.next.key` is renamed over `identity.key`; when it reports
//! [`AgentEvent::OwnRotationRefused`], `identity.next.key` is removed. A home opened with
//! an `identity.next.key` hands it to the core again: the core learns from its records or
//! its relay whether the rotation happened, and finishes or retries it.

use a2acp_core::agent::{AgentEvent, Command, Input};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::encoding::b64_encode;
use a2acp_core::Timestamp;
use tracing::warn;

use super::*;
use crate::control::Response;

/// How a rotation ended, for the `key_rotate` request waiting for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RotationOutcome {
    /// The relay installed the statement with this rotation number.
    Rotated(u64),
    /// The relay refused it: its message (its reason first).
    Refused(String),
}

impl AgentHost {
    /// The home's `identity.next.key`, if this host has a home.
    fn next_key_path(&self) -> Option<std::path::PathBuf> {
        self.home.as_ref().map(|d| Home::new(d).next_key())
    }

    /// `key_rotate`: writes (or, for a rotation under way, reads) `identity.next.key` and
    /// gives the key to the core. Answers `state: "started"`; the daemon answers the
    /// request itself once [`AgentHost::take_rotation_outcome`] has the outcome.
    pub(super) fn key_rotate(
        &mut self,
        now: Timestamp,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        let Some(path) = self.next_key_path() else {
            return Ok((
                Response::err("this agent has no home to keep a new key in; nothing changed"),
                Vec::new(),
            ));
        };
        let resumed = path.exists();
        let new = match if resumed {
            crate::keys::load(&path)
        } else {
            crate::keys::create_next(&path)
        } {
            Ok(k) => k,
            Err(e) => {
                return Ok((
                    Response::err(format!(
                        "the new key could not be kept: {e}; nothing changed"
                    )),
                    Vec::new(),
                ))
            }
        };
        self.rotation_outcome = None;
        let new_key = b64_encode(&new.public_ref().to_bytes());
        let e = self.handle(
            now,
            Input::Command(Command::RotateKey { new: Box::new(new) }),
        )?;
        Ok((
            Response::ok(serde_json::json!({
                "state": "started",
                "resumed": resumed,
                "new_key": new_key,
            })),
            e,
        ))
    }

    /// At startup: an `identity.next.key` left by a rotation the process did not see end
    /// is handed to the core again (which finishes or retries it). The same key as the
    /// identity's is a finished rotation whose file stayed: it is removed.
    pub(super) fn resume_rotation(&mut self) -> Result<Vec<Effect>, HostError> {
        let Some(path) = self.next_key_path().filter(|p| p.exists()) else {
            return Ok(Vec::new());
        };
        let new = crate::keys::load(&path)?;
        if new.public_ref().to_bytes() == self.agent.public_key().to_bytes() {
            crate::keys::discard(&path)?;
            return Ok(Vec::new());
        }
        self.handle(
            self.now,
            Input::Command(Command::RotateKey { new: Box::new(new) }),
        )
    }

    /// The core's records of this step that end a rotation (already committed): the key
    /// files follow. A failure here is repaired at the next start (the file is handed
    /// over again and the core, which recorded the rotation, takes it at once).
    pub(super) fn own_key_files(&mut self, audit: &[AuditRecord]) {
        for r in audit {
            let outcome = match &r.event {
                AgentEvent::OwnKeyRotated { seq } => RotationOutcome::Rotated(*seq),
                AgentEvent::OwnRotationRefused { message } => {
                    RotationOutcome::Refused(message.clone())
                }
                _ => continue,
            };
            if let (Some(path), Some(dir)) = (self.next_key_path(), self.home.as_ref()) {
                let done = match &outcome {
                    RotationOutcome::Rotated(_) => self.promote_next_key(&path, dir),
                    RotationOutcome::Refused(_) => crate::keys::discard(&path),
                };
                if let Err(e) = done {
                    warn!("key rotation: {e} (repaired when the agent starts again)");
                }
            }
            self.rotation_outcome = Some(outcome);
        }
    }

    /// `identity.next.key` over `identity.key`, if it holds the key the core now uses.
    fn promote_next_key(
        &self,
        path: &std::path::Path,
        dir: &std::path::Path,
    ) -> Result<(), crate::keys::KeyError> {
        if !path.exists() {
            return Ok(());
        }
        let next: IdentityKey = crate::keys::load(path)?;
        if next.public_ref().to_bytes() != self.agent.public_key().to_bytes() {
            return Ok(());
        }
        crate::keys::promote(path, &Home::new(dir).key())
    }

    /// The outcome of the last rotation, once (for the request waiting for it).
    pub fn take_rotation_outcome(&mut self) -> Option<RotationOutcome> {
        self.rotation_outcome.take()
    }

    /// The answer to `key_rotate` for `outcome`: the new key and this agent's half of
    /// every safety number with it, or the relay's refusal.
    pub fn rotation_answer(&self, outcome: Option<RotationOutcome>) -> Response {
        let me = self.agent.address();
        let key = self.agent.public_key().to_bytes();
        match outcome {
            Some(RotationOutcome::Rotated(seq)) => Response::ok(serde_json::json!({
                "state": "rotated",
                "address": me.to_string(),
                "seq": seq,
                "key": b64_encode(&key),
                "fingerprint": crate::safety::half(&key, me),
            })),
            Some(RotationOutcome::Refused(message)) => {
                let reason = message.split(':').next().unwrap_or("").trim().to_string();
                Response {
                    ok: false,
                    error: Some(format!(
                        "the relay refused the rotation ({message}); the old key stays and nothing changed"
                    )),
                    data: serde_json::json!({
                        "state": "refused",
                        "address": me.to_string(),
                        "reason": reason,
                        "message": message,
                        "key": b64_encode(&key),
                    }),
                }
            }
            None => Response::ok(serde_json::json!({
                "state": "pending",
                "address": me.to_string(),
                "online": self.agent.is_online(),
            })),
        }
    }
}

impl AgentHost {
    /// `recovery_key`: binds the recovery key whose public part (base64url) is given.
    pub(super) fn recovery_key(
        &mut self,
        now: Timestamp,
        public: &str,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        let key = match a2acp_core::encoding::b64_decode(public)
            .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
            .filter(|k| a2acp_core::crypto::PublicKey::from_bytes(k).is_ok())
        {
            Some(k) => k,
            None => {
                return Ok((
                    Response::err(format!(
                        "`{public}` is not a public key (32 bytes, base64url); nothing changed"
                    )),
                    Vec::new(),
                ))
            }
        };
        let e = self.handle(
            now,
            Input::Command(Command::BindRecovery { recovery_key: key }),
        )?;
        let seq = self.agent.recovery_key_state().map_or(0, |r| r.seq);
        Ok((
            Response::ok(serde_json::json!({
                "state": "started",
                "seq": seq,
                "online": self.agent.is_online(),
            })),
            e,
        ))
    }
}
