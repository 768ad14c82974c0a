//! Recovery (SPEC-NOTES "Recovery", docs/protocol.md "The relay link"): an authenticated
//! agent binds a recovery key to its address (`bind_recovery`); a new device that lost the
//! identity key asks what to sign (`recover_start`) and moves the address to its new key
//! with the recovery key (`recover`) on a connection that never authenticates.
//!
//! Records: `rk/<address>` → the [`RecoveryBinding`] JSON; `rl/<scope>` → the attempt
//! window `{"start":<ms>,"count":N}` of an address (`rl/a/<address>`) or of a source
//! (`rl/s/<source, 32 hex digits>`). The windows are persisted so that a restart does not
//! give an attacker a fresh allowance.

use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::queue::{reg_key, RegRecord};
use super::{ConnId, Registration, Relay, RelayEvent, RelayRestoreError, Source};
use crate::address::Address;
use crate::link::{ErrorCode, RelayFrame};
use crate::persist::PersistOp;
use crate::recovery::{RecoveryBinding, RecoveryProof, RecoveryStatement};
use crate::time::Timestamp;

/// Key prefix of recovery bindings.
pub(crate) const BINDING_PREFIX: &str = "rk/";
/// Key prefix of recovery attempt windows.
pub(crate) const LIMIT_PREFIX: &str = "rl/";
/// Most recovery attempts (`recover` frames) per address per window.
pub const RECOVER_PER_ADDRESS: u32 = 5;
/// Most recovery attempts (`recover_start` and `recover` frames) per source per window.
pub const RECOVER_PER_SOURCE: u32 = 20;
/// The window of the recovery limits.
pub const RECOVER_WINDOW: Duration = Duration::from_secs(3600);

/// Attempts in the current window of an address or a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct AttemptWindow {
    start: Timestamp,
    count: u32,
}

fn limit_key_address(a: &Address) -> String {
    format!("{LIMIT_PREFIX}a/{a}")
}

fn limit_key_source(s: Source) -> String {
    format!("{LIMIT_PREFIX}s/{:032x}", s.0)
}

impl Relay {
    /// `bind_recovery` on the connection authenticated as `address`.
    pub(super) fn on_bind_recovery(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        address: Address,
        binding: RecoveryBinding,
    ) {
        if !self.charge(now, conn, &address, None) {
            return;
        }
        match self.check_binding(&address, &binding) {
            Ok(true) => self.send(conn, &RelayFrame::RecoveryBound { seq: binding.seq }),
            Ok(false) => {
                let seq = binding.seq;
                let key = format!("{BINDING_PREFIX}{address}");
                self.persist_put(key, &binding);
                self.bindings.insert(address.clone(), binding);
                self.send(conn, &RelayFrame::RecoveryBound { seq });
                self.push_event(RelayEvent::RecoveryBound { address, seq });
            }
            Err((reason, why)) => self.refuse(
                conn,
                ErrorCode::RecoveryRefused,
                format!("{reason}: {why}"),
                None,
            ),
        }
    }

    /// Whether `binding` may be installed for `address`: `Ok(true)` when it is installed
    /// already, `Ok(false)` when it is to be installed, else the reason.
    fn check_binding(
        &self,
        address: &Address,
        binding: &RecoveryBinding,
    ) -> Result<bool, (&'static str, String)> {
        if self.cluster.is_some() {
            return Err(cluster_reason());
        }
        if &binding.address != address {
            return Err((
                "wrong_address",
                format!(
                    "the binding is for {}, this connection is {address}",
                    binding.address
                ),
            ));
        }
        binding.verify().map_err(|e| (e.as_str(), e.to_string()))?;
        let Some(reg) = self.registry.get(address) else {
            return Err(("not_current_key", "the address is not registered".into()));
        };
        if reg.key_bytes != binding.identity_key {
            return Err((
                "not_current_key",
                "the binding is not signed by the address's current key".into(),
            ));
        }
        if let Some(old) = self.bindings.get(address) {
            if old == binding {
                return Ok(true);
            }
            // Numbers go up per signing key: a key new to the address (after a rotation or
            // a recovery) starts its own.
            if old.identity_key == binding.identity_key && binding.seq <= old.seq {
                return Err((
                    "stale_seq",
                    format!("binding {} is not after binding {}", binding.seq, old.seq),
                ));
            }
        }
        Ok(false)
    }

    /// `recover_start` on a connection not authenticated.
    pub(super) fn on_recover_start(&mut self, now: Timestamp, conn: ConnId, address: Address) {
        if let Err(retry) = self.take_attempt(now, conn, None) {
            return self.recover_refused(conn, "rate_limited", limited_message(retry), Some(retry));
        }
        if self.cluster.is_some() {
            let (r, m) = cluster_reason();
            return self.recover_refused(conn, r, m, None);
        }
        let (Some(reg), Some(b)) = (self.registry.get(&address), self.bindings.get(&address))
        else {
            return self.recover_refused(
                conn,
                "no_binding",
                format!("{address} has no recovery key at this relay"),
                None,
            );
        };
        let frame = RelayFrame::RecoverInfo {
            address,
            key: reg.key_bytes,
            binding_seq: b.seq,
        };
        self.send(conn, &frame);
    }

    /// `recover` on a connection not authenticated: installs the statement when the
    /// recovery key is the address's bound one and the statement leaves its current key.
    /// The relay closes the connection after `recovered`.
    pub(super) fn on_recover(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        statement: RecoveryStatement,
    ) {
        let address = statement.address.clone();
        let counted = self.registry.contains_key(&address) && self.bindings.contains_key(&address);
        if let Err(retry) = self.take_attempt(now, conn, counted.then_some(&address)) {
            return self.recover_refused(conn, "rate_limited", limited_message(retry), Some(retry));
        }
        let checked = self.check_recovery(&statement);
        let (binding, _) = match checked {
            Ok(v) => v,
            Err((reason, why)) => return self.recover_refused(conn, reason, why, None),
        };
        let proof = Box::new(RecoveryProof { binding, statement });
        let key_bytes = proof.statement.new_key;
        let rec = RegRecord {
            address: address.clone(),
            key: key_bytes,
            registered_at: now,
            rotation: None,
            recovery: Some(proof.clone()),
        };
        self.persist_put(reg_key(&address), &rec);
        self.registry.insert(
            address.clone(),
            Registration {
                key_bytes,
                rotation: None,
                recovery: Some(proof),
            },
        );
        // The lost device's connection, if any, authenticated with a key that is gone.
        if let Some(&old) = self.online.get(&address) {
            self.send(old, &RelayFrame::Replaced);
            self.close(old, ErrorCode::NotAuthenticated);
        }
        self.send(
            conn,
            &RelayFrame::Recovered {
                address: address.clone(),
            },
        );
        self.close(conn, ErrorCode::NotAuthenticated);
        self.push_event(RelayEvent::Recovered { address });
    }

    /// The binding the statement is checked against and the new key, or the reason.
    fn check_recovery(
        &self,
        statement: &RecoveryStatement,
    ) -> Result<(RecoveryBinding, crate::crypto::PublicKey), (&'static str, String)> {
        if self.cluster.is_some() {
            return Err(cluster_reason());
        }
        let address = &statement.address;
        if address.domain() != self.config.domain {
            return Err((
                "wrong_address",
                format!("{address} is not on this relay's domain"),
            ));
        }
        let (Some(reg), Some(binding)) = (self.registry.get(address), self.bindings.get(address))
        else {
            return Err((
                "no_binding",
                format!("{address} has no recovery key at this relay"),
            ));
        };
        if binding.recovery_key != statement.recovery_key {
            return Err((
                "wrong_recovery_key",
                "the statement is not signed by the recovery key bound to the address (check the words)".into(),
            ));
        }
        if reg.key_bytes != statement.old_key {
            return Err((
                "not_current_key",
                "the statement does not leave the address's current key (a replayed statement)"
                    .into(),
            ));
        }
        let key = statement
            .verify()
            .map_err(|e| (e.as_str(), e.to_string()))?;
        Ok((binding.clone(), key))
    }

    /// Counts an attempt of `conn`'s source (and of `address`, when given): `Err(seconds)`
    /// to wait when either is over its limit (then nothing is counted).
    fn take_attempt(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        address: Option<&Address>,
    ) -> Result<(), u64> {
        let Some(source) = self.conns.get(&conn).map(|c| c.source) else {
            return Err(0);
        };
        let mut scopes = vec![(limit_key_source(source), RECOVER_PER_SOURCE)];
        if let Some(a) = address {
            scopes.push((limit_key_address(a), RECOVER_PER_ADDRESS));
        }
        let mut wait = 0u64;
        for (key, limit) in &scopes {
            let w = self.current_window(now, key);
            if w.count >= *limit {
                let end = w.start.add(RECOVER_WINDOW);
                wait = wait.max(end.since(now).as_secs().max(1));
            }
        }
        if wait > 0 {
            return Err(wait);
        }
        for (key, _) in scopes {
            let mut w = self.current_window(now, &key);
            w.count = w.count.saturating_add(1);
            self.persist_put(key.clone(), &w);
            self.recover_windows.insert(key, w);
        }
        Ok(())
    }

    /// The window of `key` at `now` (a new one when the last has ended; its record is
    /// dropped then).
    fn current_window(&mut self, now: Timestamp, key: &str) -> AttemptWindow {
        match self.recover_windows.get(key).copied() {
            Some(w) if now < w.start.add(RECOVER_WINDOW) => w,
            Some(_) => {
                self.recover_windows.remove(key);
                self.out
                    .push_back(super::RelayOutput::Persist(PersistOp::Delete {
                        key: key.to_string(),
                    }));
                AttemptWindow {
                    start: now,
                    count: 0,
                }
            }
            None => AttemptWindow {
                start: now,
                count: 0,
            },
        }
    }

    /// Sends `recover_refused` (a strike against the connection, counted as a refusal).
    fn recover_refused(
        &mut self,
        conn: ConnId,
        reason: &str,
        message: String,
        retry_after: Option<u64>,
    ) {
        let code = if retry_after.is_some() {
            ErrorCode::RateLimited
        } else {
            ErrorCode::RecoveryRefused
        };
        if let Some(c) = self.conns.get_mut(&conn).filter(|_| super::strikes(code)) {
            c.strikes = c.strikes.saturating_add(1);
        }
        let n = self.counters.refusals.entry(code).or_insert(0);
        *n = n.saturating_add(1);
        self.send(
            conn,
            &RelayFrame::RecoverRefused {
                reason: reason.to_string(),
                message: message.clone(),
                retry_after,
            },
        );
        self.push_event(RelayEvent::Refused {
            conn,
            address: None,
            code,
            message: format!("{reason}: {message}"),
        });
    }

    /// Restores a record under `rk/` or `rl/` (`false`: not one of them).
    pub(super) fn restore_recovery_record(
        &mut self,
        key: &str,
        value: &[u8],
    ) -> Result<bool, RelayRestoreError> {
        let bad = |reason: String| RelayRestoreError::BadRecord {
            key: key.to_string(),
            reason,
        };
        if let Some(addr) = key.strip_prefix(BINDING_PREFIX) {
            let b: RecoveryBinding =
                serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
            if b.address.as_str() != addr {
                return Err(bad("address differs from the key".into()));
            }
            b.verify().map_err(|e| bad(e.to_string()))?;
            self.bindings.insert(b.address.clone(), b);
            return Ok(true);
        }
        if key.starts_with(LIMIT_PREFIX) {
            let w: AttemptWindow = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
            self.recover_windows.insert(key.to_string(), w);
            return Ok(true);
        }
        Ok(false)
    }

    /// The recovery binding of `address`, if any.
    pub fn recovery_binding(&self, address: &Address) -> Option<&RecoveryBinding> {
        self.bindings.get(address)
    }
}

fn cluster_reason() -> (&'static str, String) {
    (
        "cluster",
        "a relay of a cluster does not recover keys yet (nor rotate them): its registry is the shared store's".into(),
    )
}

fn limited_message(retry: u64) -> String {
    format!("too many recovery attempts; try again in {retry} s")
}
