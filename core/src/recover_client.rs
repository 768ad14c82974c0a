//! The new device's side of a recovery (SPEC-NOTES "Recovery"), sans IO: on a connection
//! that never authenticates, ask the relay for the address's current key
//! (`recover_start`), sign the statement moving it to the new key with the recovery key,
//! send it (`recover`), and read the answer.
//!
//! The runtime connects, sends [`RecoverClient::start`], feeds every frame it reads to
//! [`RecoverClient::on_frame`] and sends what it is told to, until a step ends the
//! exchange. A device that missed the answer asks again with the same new key: when the
//! relay's current key *is* that key, the statement was installed and the exchange ends
//! as [`RecoverStep::Recovered`] with `already` set (nothing is sent again).

use crate::address::Address;
use crate::crypto::IdentityKey;
use crate::link::{ClientFrame, RelayFrame};
use crate::recovery::RecoveryStatement;

/// One recovery exchange.
#[derive(Clone)]
pub struct RecoverClient {
    address: Address,
    new: IdentityKey,
    recovery: IdentityKey,
    /// The key the recovering home holds already, if any (a restored backup's).
    held: Option<[u8; 32]>,
    sent: bool,
}

impl std::fmt::Debug for RecoverClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoverClient")
            .field("address", &self.address)
            .field("new", &self.new.public_ref().to_string())
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

/// What to do after a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoverStep {
    /// Nothing yet (a challenge, a ping): read on.
    Wait,
    /// Send this frame, then read on.
    Send(Box<ClientFrame>),
    /// The address is on the new key. `already`: it was before this exchange sent a
    /// statement (an earlier attempt was installed and its answer lost).
    Recovered {
        /// The relay's current key was the new key already.
        already: bool,
    },
    /// The relay refused: `reason` as on the wire (`wrong_recovery_key`, `no_binding`,
    /// `rate_limited`, `cluster`…, or an error code such as `malformed`).
    Refused {
        /// Machine-readable reason.
        reason: String,
        /// The relay's explanation.
        message: String,
        /// With `rate_limited`: seconds until an attempt may be made again.
        retry_after: Option<u64>,
    },
}

impl RecoverClient {
    /// The recovery of `address` onto `new` with the recovery key `recovery`.
    pub fn new(address: Address, new: IdentityKey, recovery: IdentityKey) -> Self {
        RecoverClient {
            address,
            new,
            recovery,
            held: None,
            sent: false,
        }
    }

    /// The home holds `key` already (a restored backup's): when it is still the address's
    /// key nothing was lost, and the exchange ends refused (`not_lost`) without a
    /// statement.
    pub fn holding(mut self, key: [u8; 32]) -> Self {
        self.held = Some(key);
        self
    }

    /// The first frame: `recover_start`.
    pub fn start(&self) -> ClientFrame {
        ClientFrame::RecoverStart {
            address: self.address.clone(),
        }
    }

    /// Whether the statement has been sent (an exchange cut after this point may have
    /// been installed).
    pub fn statement_sent(&self) -> bool {
        self.sent
    }

    /// The next step after `frame`.
    pub fn on_frame(&mut self, frame: RelayFrame) -> RecoverStep {
        match frame {
            RelayFrame::RecoverInfo { address, key, .. } => {
                if address != self.address || self.sent {
                    return RecoverStep::Refused {
                        reason: "unexpected".into(),
                        message: format!("the relay answered for {address} out of turn"),
                        retry_after: None,
                    };
                }
                if key == self.new.public_ref().to_bytes() {
                    return RecoverStep::Recovered { already: true };
                }
                if self.held == Some(key) {
                    return RecoverStep::Refused {
                        reason: "not_lost".into(),
                        message: format!(
                            "this home's identity key is still the key of {address}: nothing to recover"
                        ),
                        retry_after: None,
                    };
                }
                let statement =
                    RecoveryStatement::sign(&self.address, &key, &self.new, &self.recovery);
                self.sent = true;
                RecoverStep::Send(Box::new(ClientFrame::Recover { statement }))
            }
            RelayFrame::Recovered { address } if address == self.address && self.sent => {
                RecoverStep::Recovered { already: false }
            }
            RelayFrame::RecoverRefused {
                reason,
                message,
                retry_after,
            } => RecoverStep::Refused {
                reason,
                message,
                retry_after,
            },
            RelayFrame::Error { code, message, .. } => RecoverStep::Refused {
                reason: code.as_str().to_string(),
                message,
                retry_after: None,
            },
            _ => RecoverStep::Wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::ErrorCode;
    use crate::recovery::recovery_key_from_seed;

    fn alice() -> Address {
        Address::parse("agent:alice@example.org").unwrap()
    }

    #[test]
    fn the_statement_leaves_the_key_the_relay_names_and_a_lost_answer_is_found_again() {
        let new = IdentityKey::from_seed([3; 32]);
        let rk = recovery_key_from_seed([2; 32]);
        let old = IdentityKey::from_seed([1; 32]).public().to_bytes();
        let mut c = RecoverClient::new(alice(), new.clone(), rk.clone());
        assert_eq!(c.start(), ClientFrame::RecoverStart { address: alice() });
        let info = RelayFrame::RecoverInfo {
            address: alice(),
            key: old,
            binding_seq: 1,
        };
        let RecoverStep::Send(frame) = c.on_frame(info.clone()) else {
            panic!("a statement");
        };
        let ClientFrame::Recover { statement } = *frame else {
            panic!("a statement");
        };
        assert_eq!(
            statement,
            RecoveryStatement::sign(&alice(), &old, &new, &rk)
        );
        assert!(c.statement_sent());
        // A second recover_info on the same exchange is out of turn.
        assert!(matches!(c.on_frame(info), RecoverStep::Refused { .. }));
        assert_eq!(
            c.on_frame(RelayFrame::Recovered { address: alice() }),
            RecoverStep::Recovered { already: false }
        );
        // Asked again after a lost answer: the relay's key is the new one.
        let mut again = RecoverClient::new(alice(), new.clone(), rk);
        assert_eq!(
            again.on_frame(RelayFrame::RecoverInfo {
                address: alice(),
                key: new.public().to_bytes(),
                binding_seq: 1,
            }),
            RecoverStep::Recovered { already: true }
        );
        assert!(!again.statement_sent());
        // A home whose key is still the address's: nothing is sent.
        let mut held =
            RecoverClient::new(alice(), IdentityKey::from_seed([4; 32]), rk_again()).holding(old);
        assert!(matches!(
            held.on_frame(RelayFrame::RecoverInfo {
                address: alice(),
                key: old,
                binding_seq: 1,
            }),
            RecoverStep::Refused { reason, .. } if reason == "not_lost"
        ));
        assert!(!held.statement_sent());
    }

    fn rk_again() -> IdentityKey {
        recovery_key_from_seed([2; 32])
    }

    #[test]
    fn refusals_and_stray_frames() {
        let mut c = RecoverClient::new(
            alice(),
            IdentityKey::from_seed([3; 32]),
            recovery_key_from_seed([2; 32]),
        );
        assert_eq!(
            c.on_frame(RelayFrame::Recovered { address: alice() }),
            RecoverStep::Wait,
            "a `recovered` before any statement is not believed"
        );
        assert_eq!(
            c.on_frame(RelayFrame::RecoverRefused {
                reason: "rate_limited".into(),
                message: "later".into(),
                retry_after: Some(60),
            }),
            RecoverStep::Refused {
                reason: "rate_limited".into(),
                message: "later".into(),
                retry_after: Some(60),
            }
        );
        assert!(matches!(
            c.on_frame(RelayFrame::Error {
                code: ErrorCode::Malformed,
                message: "x".into(),
                seq: None,
            }),
            RecoverStep::Refused { reason, .. } if reason == "malformed"
        ));
        let bob = Address::parse("agent:bob@example.org").unwrap();
        assert!(matches!(
            c.on_frame(RelayFrame::RecoverInfo {
                address: bob,
                key: [1; 32],
                binding_seq: 1,
            }),
            RecoverStep::Refused { reason, .. } if reason == "unexpected"
        ));
    }
}
