//! Relay links: the dialing and accepting halves of their authentication.

use super::super::{ConnId, Relay};
use crate::link::ErrorCode;
use crate::time::Timestamp;

impl Relay {
    /// A connection answered its challenge with `link_auth`: another relay dialed.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::relay) fn on_link_auth(
        &mut self,
        _now: Timestamp,
        conn: ConnId,
        _domain: String,
        _key: [u8; 32],
        _ts: u64,
        _sig: [u8; 64],
        _nonce: [u8; 32],
    ) {
        self.refuse(
            conn,
            ErrorCode::DomainRefused,
            "this relay does not federate".into(),
            None,
        );
        self.close(conn, ErrorCode::DomainRefused);
    }
}
