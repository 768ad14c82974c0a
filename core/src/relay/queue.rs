//! The offline queue and the relay's persisted records.
//!
//! Record keys (docs/protocol.md "The relay link" §9, persistence):
//!
//! - `reg/<address>` → [`RegRecord`] JSON;
//! - `q/<recipient>/<id, 20 decimal digits zero-padded>` →
//!   `{"id":<id>,"accepted_at":<ms>,"env":<the envelope's JSON exactly as received>}`
//!   (see [`StoredItem::record`]);
//! - `meta/next_id` → JSON number: every delivery id below it may have been handed out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::address::Address;
use crate::crypto::envelope::Envelope;
use crate::encoding::b64_array;
use crate::time::Timestamp;

/// Key prefix of registrations.
pub(crate) const REG_PREFIX: &str = "reg/";
/// Key prefix of queued packets.
pub(crate) const QUEUE_PREFIX: &str = "q/";
/// How every `deliver` frame the relay writes begins (what
/// [`super::RelayOutput::is_delivery`] recognises).
pub(crate) const DELIVER_PREFIX: &str = "{\"t\":\"deliver\"";
/// Key of the delivery-id high-water mark.
pub(crate) const NEXT_ID_KEY: &str = "meta/next_id";

/// The record key of a registration.
pub(crate) fn reg_key(address: &Address) -> String {
    format!("{REG_PREFIX}{address}")
}

/// The record key of a queued packet; zero padding makes key order equal id order.
pub(crate) fn queue_key(recipient: &Address, id: u64) -> String {
    format!("{QUEUE_PREFIX}{recipient}/{id:020}")
}

/// A persisted registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RegRecord {
    /// The registered address.
    pub(crate) address: Address,
    /// Its Ed25519 public key.
    #[serde(with = "b64_array")]
    pub(crate) key: [u8; 32],
    /// When it was registered.
    pub(crate) registered_at: Timestamp,
    /// The rotation statement that installed `key`, when the address rotated (its
    /// `new_key` is `key`); absent for a key as first registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rotation: Option<Box<crate::rotation::RotationStatement>>,
    /// The recovery that installed `key`, when the address was recovered (its
    /// statement's `new_key` is `key`, its binding the one the relay checked it against).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) recovery: Option<Box<crate::recovery::RecoveryProof>>,
}

/// A queued packet: what the relay decided about it, the two header fields it routes by,
/// and the envelope's JSON exactly as the sender sent it. The relay never serialises an
/// envelope again: the persisted record and every `deliver` frame splice these bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredItem {
    /// Delivery id.
    pub(crate) id: u64,
    /// When the relay accepted it.
    pub(crate) accepted_at: Timestamp,
    /// The envelope's recipient.
    pub(crate) to: Address,
    /// The envelope's thread tag.
    pub(crate) thread: [u8; 16],
    /// The envelope's JSON text, byte for byte as received (a JSON object).
    pub(crate) env: Box<str>,
    /// For a packet from another domain: that domain and its push's link sequence number.
    pub(crate) origin: Option<Origin>,
}

/// Where a packet queued for a local recipient came from, when another domain's relay
/// pushed it (federation: what makes a retry of that push recognisable after a restart).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Origin {
    /// The remote domain.
    pub(crate) domain: String,
    /// The push's link sequence number.
    pub(crate) n: u64,
}

/// The persisted record, as read back (`env` borrowed from the record's bytes).
#[derive(Deserialize)]
struct RecordIn<'a> {
    id: u64,
    accepted_at: Timestamp,
    #[serde(default)]
    origin: Option<Origin>,
    #[serde(borrow)]
    env: &'a RawValue,
}

impl StoredItem {
    /// The persisted record: `{"id":<id>,"accepted_at":<ms>,"env":<env>}`, with
    /// `"origin":{"domain":..,"n":..}` before `env` for a packet from another domain.
    pub(crate) fn record(&self) -> Vec<u8> {
        let origin = self
            .origin
            .as_ref()
            .map(|o| {
                format!(
                    ",\"origin\":{}",
                    serde_json::to_string(o).unwrap_or_default()
                )
            })
            .unwrap_or_default();
        splice(
            &[
                "{\"id\":",
                &self.id.to_string(),
                ",\"accepted_at\":",
                &self.accepted_at.as_millis().to_string(),
                &origin,
                ",\"env\":",
            ],
            &self.env,
        )
    }

    /// The `deliver` frame: `{"t":"deliver","id":<id>,"env":<env>}`.
    pub(crate) fn deliver_frame(&self) -> Vec<u8> {
        splice(
            &[
                DELIVER_PREFIX,
                ",\"id\":",
                &self.id.to_string(),
                ",\"env\":",
            ],
            &self.env,
        )
    }

    /// Reads a persisted record (also those written before the envelope was kept as
    /// received: the format is the same JSON object). Returns the item and its parsed
    /// envelope.
    pub(crate) fn from_record(bytes: &[u8]) -> Result<(StoredItem, Envelope), serde_json::Error> {
        let rec: RecordIn<'_> = serde_json::from_slice(bytes)?;
        let env: Envelope = serde_json::from_str(rec.env.get())?;
        let item = StoredItem {
            id: rec.id,
            accepted_at: rec.accepted_at,
            to: env.to.clone(),
            thread: env.thread,
            env: rec.env.get().into(),
            origin: rec.origin,
        };
        Ok((item, env))
    }
}

/// `parts` then `env` then `}`, in one allocation.
fn splice(parts: &[&str], env: &str) -> Vec<u8> {
    let len = parts.iter().map(|p| p.len()).sum::<usize>() + env.len() + 1;
    let mut out = Vec::with_capacity(len);
    for p in parts {
        out.extend_from_slice(p.as_bytes());
    }
    out.extend_from_slice(env.as_bytes());
    out.push(b'}');
    out
}

/// The packets queued for one recipient.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RecipientQueue {
    /// Unacknowledged packets by delivery id.
    pub(crate) items: BTreeMap<u64, StoredItem>,
    /// Unacknowledged packet count by thread tag.
    pub(crate) per_thread: BTreeMap<[u8; 16], u32>,
}

impl RecipientQueue {
    /// Unacknowledged packets in thread `thread`.
    pub(crate) fn thread_len(&self, thread: &[u8; 16]) -> u32 {
        self.per_thread.get(thread).copied().unwrap_or(0)
    }
}

/// Every recipient's queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Queues {
    pub(crate) by_recipient: BTreeMap<Address, RecipientQueue>,
    pub(crate) total: usize,
}

impl Queues {
    /// Packets queued for `recipient`.
    pub(crate) fn len_for(&self, recipient: &Address) -> usize {
        self.by_recipient
            .get(recipient)
            .map_or(0, |q| q.items.len())
    }

    /// Unacknowledged packets for `recipient` in thread `thread`.
    pub(crate) fn thread_len(&self, recipient: &Address, thread: &[u8; 16]) -> u32 {
        self.by_recipient
            .get(recipient)
            .map_or(0, |q| q.thread_len(thread))
    }

    /// Adds a packet (replacing one with the same id, which only a corrupt store has).
    pub(crate) fn insert(&mut self, item: StoredItem) {
        let q = self.by_recipient.entry(item.to.clone()).or_default();
        let thread = item.thread;
        if let Some(old) = q.items.insert(item.id, item) {
            Self::uncount(q, &old.thread);
        } else {
            self.total = self.total.saturating_add(1);
        }
        let n = q.per_thread.entry(thread).or_insert(0);
        *n = n.saturating_add(1);
    }

    /// Removes packet `id` from `recipient`'s queue, if it is there.
    pub(crate) fn remove(&mut self, recipient: &Address, id: u64) -> Option<StoredItem> {
        let q = self.by_recipient.get_mut(recipient)?;
        let item = q.items.remove(&id)?;
        Self::uncount(q, &item.thread);
        self.total = self.total.saturating_sub(1);
        if q.items.is_empty() {
            self.by_recipient.remove(recipient);
        }
        Some(item)
    }

    /// Drops every packet queued for `recipient` (cluster mode: the store keeps them).
    pub(crate) fn remove_all(&mut self, recipient: &Address) {
        if let Some(q) = self.by_recipient.remove(recipient) {
            self.total = self.total.saturating_sub(q.items.len());
        }
    }

    fn uncount(q: &mut RecipientQueue, thread: &[u8; 16]) {
        if let Some(n) = q.per_thread.get_mut(thread) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                q.per_thread.remove(thread);
            }
        }
    }
}
