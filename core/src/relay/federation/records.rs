//! Federation records (docs/protocol.md "The federation link" §6) and reading them back in
//! [`Relay::restore`].
//!
//! - `fo/<domain>/<n, 20 digits>` → an outbound packet: `{"n":..,"id":..,"from":..,
//!   "accepted_at":..,"env":<the envelope's JSON as received>}`;
//! - `fed/out/<domain>` → a number: every link sequence number below it may have been used;
//! - `fed/in/<domain>` → `{"hw":..,"deferred":[..],"held":[{"n":..,"to":..,"thread":..}]}`:
//!   every push from that domain numbered up to `hw` is decided, except the deferred ones
//!   (`held`: their recipients and threads, which later pushes wait behind);
//! - `fed/pin/<address>` → `{"address":..,"key":..}`: a remote sender's pinned key;
//! - `fed/notice/<sender>/<id, 20 digits>` → an undeliverable notice not yet acknowledged.
//!
//! A packet queued for a local recipient from another domain keeps its origin in its
//! `q/` record (`"origin":{"domain":..,"n":..}`): restore raises `hw` to it and takes it out
//! of `deferred`, so that a crash between the two records never accepts a retry twice.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::state::{Notice, OutItem};
use crate::address::Address;
use crate::encoding::b64_array;
use crate::time::Timestamp;

use super::super::{Relay, RelayRestoreError};

/// Prefix of outbound packets.
pub(crate) const OUT_PREFIX: &str = "fo/";
/// Prefix of the link sequence reservations.
pub(crate) const OUT_NEXT_PREFIX: &str = "fed/out/";
/// Prefix of the inbound sequence state.
pub(crate) const IN_PREFIX: &str = "fed/in/";
/// Prefix of pinned keys.
pub(crate) const PIN_PREFIX: &str = "fed/pin/";
/// Prefix of notices.
pub(crate) const NOTICE_PREFIX: &str = "fed/notice/";

pub(super) fn out_key(domain: &str, n: u64) -> String {
    format!("{OUT_PREFIX}{domain}/{n:020}")
}
pub(super) fn out_next_key(domain: &str) -> String {
    format!("{OUT_NEXT_PREFIX}{domain}")
}
pub(super) fn in_key(domain: &str) -> String {
    format!("{IN_PREFIX}{domain}")
}
pub(super) fn pin_key(address: &Address) -> String {
    format!("{PIN_PREFIX}{address}")
}
pub(super) fn notice_key(address: &Address, id: u64) -> String {
    format!("{NOTICE_PREFIX}{address}/{id:020}")
}

/// An outbound packet's record, but its envelope.
#[derive(Serialize)]
pub(super) struct OutRecord<'a> {
    n: u64,
    id: u64,
    from: &'a Address,
    accepted_at: Timestamp,
}

impl<'a> OutRecord<'a> {
    pub(super) fn of(item: &'a OutItem) -> Self {
        OutRecord {
            n: item.n,
            id: item.id,
            from: &item.from,
            accepted_at: item.accepted_at,
        }
    }

    /// The record, with the envelope's bytes spliced in as `env`.
    pub(super) fn to_bytes(&self, env: &str) -> Vec<u8> {
        let mut head = serde_json::to_vec(self).unwrap_or_default();
        head.pop(); // the closing brace
        head.extend_from_slice(b",\"env\":");
        head.extend_from_slice(env.as_bytes());
        head.push(b'}');
        head
    }
}

#[derive(Deserialize)]
struct OutRecordIn<'a> {
    n: u64,
    id: u64,
    from: Address,
    accepted_at: Timestamp,
    #[serde(borrow)]
    env: &'a RawValue,
}

/// The inbound sequence state of one remote domain.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct InRecord {
    pub(super) hw: u64,
    pub(super) deferred: Vec<u64>,
    /// The (recipient, thread) of deferred pushes (a record written before this field
    /// has none: its deferred pushes hold nothing back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) held: Vec<HeldPush>,
}

/// A deferred push's recipient and thread.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct HeldPush {
    pub(super) n: u64,
    pub(super) to: Address,
    #[serde(with = "b64_array")]
    pub(super) thread: [u8; 16],
}

/// A pinned key.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct PinRecord {
    pub(super) address: Address,
    #[serde(with = "b64_array")]
    pub(super) key: [u8; 32],
}

impl Relay {
    /// Reads one federation record (restore). Returns `Ok(None)` for keys under other
    /// prefixes, else the highest delivery id it holds (0 if none).
    pub(in crate::relay) fn restore_fed_record(
        &mut self,
        key: &str,
        value: &[u8],
    ) -> Result<Option<u64>, RelayRestoreError> {
        let bad = |reason: String| RelayRestoreError::BadRecord {
            key: key.to_string(),
            reason,
        };
        let Some(f) = self.fed.as_mut() else {
            return Ok(None);
        };
        if let Some(rest) = key.strip_prefix(OUT_PREFIX) {
            let (domain, n) = rest
                .rsplit_once('/')
                .ok_or_else(|| bad("key lacks a number".into()))?;
            let rec: OutRecordIn<'_> =
                serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
            let env: crate::crypto::envelope::Envelope =
                serde_json::from_str(rec.env.get()).map_err(|e| bad(e.to_string()))?;
            if format!("{:020}", rec.n) != n || env.to.domain() != domain {
                return Err(bad("domain or number differs from the key".into()));
            }
            let r = f.remote(domain);
            let item = OutItem {
                n: rec.n,
                id: rec.id,
                from: rec.from,
                to: env.to.clone(),
                thread: env.thread,
                accepted_at: rec.accepted_at,
                env: rec.env.get().into(),
                attempts: 0,
                retry_at: None,
            };
            let t = r
                .out_threads
                .entry((item.to.clone(), item.thread))
                .or_insert(0);
            *t = t.saturating_add(1);
            r.next_n = r.next_n.max(rec.n.saturating_add(1));
            r.n_reserved = r.n_reserved.max(r.next_n);
            r.out.insert(rec.n, item);
            return Ok(Some(rec.id));
        }
        if let Some(domain) = key.strip_prefix(OUT_NEXT_PREFIX) {
            let next: u64 = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
            let r = f.remote(domain);
            r.next_n = r.next_n.max(next);
            r.n_reserved = r.n_reserved.max(next);
            return Ok(Some(0));
        }
        if let Some(domain) = key.strip_prefix(IN_PREFIX) {
            let rec: InRecord = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
            let r = f.remote(domain);
            r.hw = r.hw.max(rec.hw);
            r.deferred.extend(rec.deferred);
            for h in rec.held {
                if r.deferred.contains(&h.n) {
                    r.deferred_at.insert(h.n, (h.to, h.thread));
                }
            }
            // That domain pushes to this relay: tell it this relay is back.
            r.announce = true;
            return Ok(Some(0));
        }
        if let Some(addr) = key.strip_prefix(PIN_PREFIX) {
            let rec: PinRecord = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
            if rec.address.as_str() != addr {
                return Err(bad("address differs from the key".into()));
            }
            f.seen.touch(&rec.address, Timestamp::ZERO);
            f.pins.insert(rec.address, rec.key);
            return Ok(Some(0));
        }
        if let Some(rest) = key.strip_prefix(NOTICE_PREFIX) {
            let (addr, _) = rest
                .rsplit_once('/')
                .ok_or_else(|| bad("key lacks an id".into()))?;
            let n: Notice = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
            let address = Address::parse(addr).map_err(|e| bad(e.to_string()))?;
            let id = n.id;
            f.notices.entry(address).or_default().insert(id, n);
            return Ok(Some(id));
        }
        Ok(None)
    }

    /// A queued packet from another domain was restored: its push is decided.
    pub(in crate::relay) fn restore_origin(&mut self, domain: &str, n: u64) {
        if let Some(f) = self.fed.as_mut() {
            let r = f.remote(domain);
            r.hw = r.hw.max(n);
            r.deferred.remove(&n);
            r.deferred_at.remove(&n);
        }
    }
}
