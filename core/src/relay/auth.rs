//! Connection and authentication: challenges, `auth`, `register`, and the registrations
//! allowed per source (module documentation of [`super`]).

use std::collections::BTreeSet;

use super::queue::{reg_key, RegRecord};
use super::{ConnId, Phase, Registration, Relay, RelayEvent, SourceWindow};
use crate::address::Address;
use crate::crypto::PublicKey;
use crate::link::{challenge_signed_bytes, ErrorCode, RelayFrame, AUTH_LABEL, REGISTER_LABEL};
use crate::time::Timestamp;

impl Relay {
    pub(super) fn on_auth(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        address: Address,
        ts: u64,
        sig: [u8; 64],
        key: Option<[u8; 32]>,
    ) {
        let challenge = match self.conns.get_mut(&conn).map(|c| &mut c.phase) {
            Some(Phase::Unauth { challenge, .. }) => challenge.take(),
            _ => return,
        };
        match self.check_auth(now, challenge, &address, ts, &sig, key) {
            Ok(Some(key_bytes)) if self.cluster.is_some() => {
                // Free as far as the cluster's store said: claim it there first (the
                // same `register`, its challenge kept, is handled again on the answer).
                if !self.admit_registration(now, conn) {
                    self.registration_limited(now, conn);
                    return;
                }
                let frame = crate::link::ClientFrame::Register {
                    address: address.clone(),
                    key: key_bytes,
                    ts,
                    sig,
                };
                self.claim(conn, challenge, frame, &address, key_bytes);
            }
            Ok(new_key) => {
                if new_key.is_some() && !self.admit_registration(now, conn) {
                    self.registration_limited(now, conn);
                    return;
                }
                if let Some(key_bytes) = new_key {
                    let rec = RegRecord {
                        address: address.clone(),
                        key: key_bytes,
                        registered_at: now,
                        rotation: None,
                        recovery: None,
                    };
                    self.persist_put(reg_key(&address), &rec);
                    self.registry.insert(
                        address.clone(),
                        Registration {
                            key_bytes,
                            rotation: None,
                            recovery: None,
                        },
                    );
                    self.push_event(RelayEvent::Registered {
                        address: address.clone(),
                    });
                }
                self.authenticate(now, conn, address);
            }
            Err((code, message)) => {
                self.refuse(conn, code, message.into(), None);
                self.issue_challenge(now, conn);
            }
        }
    }

    /// Refuses a `register` past its source's allowance (then a fresh challenge).
    fn registration_limited(&mut self, now: Timestamp, conn: ConnId) {
        self.counters.registrations_limited = self.counters.registrations_limited.saturating_add(1);
        self.refuse(
            conn,
            ErrorCode::RegistrationLimited,
            "too many new addresses registered from this source: try again later".into(),
            None,
        );
        self.issue_challenge(now, conn);
    }

    /// Checks an `auth` (`key` absent) or `register`; on success returns the key to
    /// register, if the address is new.
    pub(super) fn check_auth(
        &self,
        now: Timestamp,
        challenge: Option<[u8; 32]>,
        address: &Address,
        ts: u64,
        sig: &[u8; 64],
        key: Option<[u8; 32]>,
    ) -> Result<Option<[u8; 32]>, (ErrorCode, &'static str)> {
        let nonce = challenge.ok_or((ErrorCode::AuthFailed, "no outstanding challenge"))?;
        let skew = u128::from(ts.abs_diff(now.as_millis()));
        if skew > self.config.auth_max_skew.as_millis() {
            return Err((
                ErrorCode::AuthFailed,
                "timestamp too far from the relay's clock",
            ));
        }
        let domain = self.config.domain.as_str();
        match key {
            None => {
                let reg = self
                    .registry
                    .get(address)
                    .ok_or((ErrorCode::AuthFailed, "address is not registered"))?;
                let msg = challenge_signed_bytes(AUTH_LABEL, &nonce, domain, ts, address, None);
                // Validated (`PublicKey::from_bytes`) when the address registered.
                PublicKey::from_stored_bytes(&reg.key_bytes)
                    .and_then(|key| key.verify(&msg, sig))
                    .map_err(|_| (ErrorCode::AuthFailed, "signature does not verify"))?;
                Ok(None)
            }
            Some(key_bytes) => {
                if address.domain() != domain {
                    return Err((
                        ErrorCode::UnknownRecipient,
                        "address is not served by this relay",
                    ));
                }
                let key = PublicKey::from_bytes(&key_bytes)
                    .map_err(|_| (ErrorCode::AuthFailed, "invalid public key"))?;
                let msg = challenge_signed_bytes(
                    REGISTER_LABEL,
                    &nonce,
                    domain,
                    ts,
                    address,
                    Some(&key_bytes),
                );
                key.verify(&msg, sig)
                    .map_err(|_| (ErrorCode::AuthFailed, "signature does not verify"))?;
                match self.registry.get(address) {
                    None => Ok(Some(key_bytes)),
                    Some(reg) if reg.key_bytes == key_bytes => Ok(None),
                    Some(_) => Err((
                        ErrorCode::AddressTaken,
                        "address is registered with another key",
                    )),
                }
            }
        }
    }

    /// Whether the source of `conn` may register one more address in its window (and
    /// counts it). Expired windows are dropped first; a source not counted yet is refused
    /// while `max_registration_sources` others are.
    pub(super) fn admit_registration(&mut self, now: Timestamp, conn: ConnId) -> bool {
        let Some(source) = self.conns.get(&conn).map(|c| c.source) else {
            return false;
        };
        let window = self.config.registration_window;
        while let Some(&(start, s)) = self.source_windows.first() {
            if start.add(window) > now {
                break;
            }
            self.source_windows.pop_first();
            self.sources.remove(&s);
        }
        let limit = self.config.registrations_per_source.max(1);
        if let Some(w) = self.sources.get_mut(&source) {
            if w.count >= limit {
                return false;
            }
            w.count += 1;
            return true;
        }
        if self.sources.len() >= self.config.max_registration_sources.max(1) {
            return false;
        }
        self.sources.insert(
            source,
            SourceWindow {
                start: now,
                count: 1,
            },
        );
        self.source_windows.insert((now, source));
        true
    }

    pub(super) fn authenticate(&mut self, now: Timestamp, conn: ConnId, address: Address) {
        // The registry's copy, so that every map holding the address shares its text.
        let address = match self.registry.get_key_value(&address) {
            Some((registered, _)) => registered.clone(),
            None => address,
        };
        if let Some(old) = self.online.get(&address).copied() {
            if old != conn {
                self.send(old, &RelayFrame::Replaced);
                self.close(old, ErrorCode::NotAuthenticated);
                self.push_event(RelayEvent::Replaced {
                    old,
                    new: conn,
                    address: address.clone(),
                });
            }
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.phase = Phase::Authed {
            address: address.clone(),
            in_flight: BTreeSet::new(),
            cursor: 0,
            key: None,
        };
        self.online.insert(address.clone(), conn);
        self.reschedule(conn);
        self.bucket(now, &address);
        self.cluster_authenticated(&address, conn);
        let queued = u64::try_from(self.queued_for(&address)).unwrap_or(u64::MAX);
        self.send(
            conn,
            &RelayFrame::AuthOk {
                address: address.clone(),
                queued,
            },
        );
        self.push_event(RelayEvent::Authenticated {
            conn,
            address: address.clone(),
        });
        self.pump(&address);
        if self.fed.is_some() {
            self.send_notices(&address);
        }
    }

    pub(super) fn issue_challenge(&mut self, now: Timestamp, conn: ConnId) {
        let nonce = self.rng.bytes32();
        if let Some(Phase::Unauth { challenge, .. }) =
            self.conns.get_mut(&conn).map(|c| &mut c.phase)
        {
            *challenge = Some(nonce);
        }
        let frame = RelayFrame::Challenge {
            nonce,
            domain: self.config.domain.clone(),
            ts: now.as_millis(),
        };
        self.send(conn, &frame);
    }
}
