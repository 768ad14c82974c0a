//! `rotate`: an authenticated agent moves its address to a new key (SPEC-NOTES "Key
//! rotation", docs/protocol.md "The relay link").

use super::queue::{reg_key, RegRecord};
use super::{ConnId, Registration, Relay, RelayEvent};
use crate::address::Address;
use crate::link::{ErrorCode, RelayFrame};
use crate::rotation::RotationStatement;
use crate::time::Timestamp;

impl Relay {
    /// A `rotate` on the connection authenticated as `address`. Installed only when the
    /// statement verifies, is for `address`, starts from its current key and numbers a
    /// later rotation than the one that installed it: then the registration is persisted
    /// with the new key and the statement, `rotated` answers, and the connection (still
    /// authenticated under the old key) is closed; the agent comes back with the new key.
    /// The statement that installed the current key, sent again, is answered `rotated`
    /// again (a retry after a lost answer). Anything else is `error rotation_refused`,
    /// its message starting with the reason.
    pub(super) fn on_rotate(
        &mut self,
        now: Timestamp,
        conn: ConnId,
        address: Address,
        statement: RotationStatement,
    ) {
        if !self.charge(now, conn, &address, None) {
            return;
        }
        match self.check_rotation(&address, &statement) {
            Ok(true) => {
                let seq = statement.seq;
                self.send(conn, &RelayFrame::Rotated { address, seq });
                self.close(conn, ErrorCode::NotAuthenticated);
            }
            Ok(false) => {
                if crate::crypto::PublicKey::from_bytes(&statement.new_key).is_err() {
                    return;
                }
                let seq = statement.seq;
                let key_bytes = statement.new_key;
                let rotation = Some(Box::new(statement));
                let rec = RegRecord {
                    address: address.clone(),
                    key: key_bytes,
                    registered_at: now,
                    rotation: rotation.clone(),
                    recovery: None,
                };
                self.persist_put(reg_key(&address), &rec);
                self.registry.insert(
                    address.clone(),
                    Registration {
                        key_bytes,
                        rotation,
                        recovery: None,
                    },
                );
                self.send(
                    conn,
                    &RelayFrame::Rotated {
                        address: address.clone(),
                        seq,
                    },
                );
                self.close(conn, ErrorCode::NotAuthenticated);
                self.push_event(RelayEvent::Rotated { address, seq });
            }
            Err((reason, why)) => self.refuse(
                conn,
                ErrorCode::RotationRefused,
                format!("{reason}: {why}"),
                None,
            ),
        }
    }

    /// Whether `statement` may move `address`: `Ok(true)` when it is the statement that
    /// installed the current key already, `Ok(false)` when it is to be installed, else the
    /// reason and its explanation.
    fn check_rotation(
        &self,
        address: &Address,
        statement: &RotationStatement,
    ) -> Result<bool, (&'static str, String)> {
        if self.cluster.is_some() {
            return Err((
                "cluster",
                "a relay of a cluster does not rotate keys yet: its registry is the shared store's"
                    .into(),
            ));
        }
        if &statement.address != address {
            return Err((
                "wrong_address",
                format!(
                    "the statement is for {}, this connection is {address}",
                    statement.address
                ),
            ));
        }
        statement
            .verify()
            .map_err(|e| (e.as_str(), e.to_string()))?;
        let Some(reg) = self.registry.get(address) else {
            return Err(("not_current_key", "the address is not registered".into()));
        };
        if reg.rotation.as_deref() == Some(statement) {
            return Ok(true);
        }
        if reg.key_bytes != statement.old_key {
            return Err((
                "not_current_key",
                "the statement's old key is not the address's current key (a replayed statement, or one signed by another key)".into(),
            ));
        }
        let current = reg.rotation.as_ref().map_or(0, |r| r.seq);
        if statement.seq <= current {
            return Err((
                "stale_seq",
                format!("rotation {} is not after rotation {current}", statement.seq),
            ));
        }
        Ok(false)
    }
}
