//! **receipts**: every value an agent sends is covered by a consent receipt of its thread
//! (SPEC-NOTES "Consent receipts"): a receipt the agent stored, signed by its key, names
//! the field with the salted hash of exactly that value. Receipts are read from the
//! records the agent persists, as its user's `a2acp receipts` reads them.
//!
//! And every agreement an agent keeps when a thread reaches CONFIRMED (SPEC-NOTES
//! "Receipts of an agreement") verifies on its own — every required confirmation signed
//! over the same proposal — and holds the agent's own (under the key it had when it
//! confirmed: a rotation since does not change what it signed).

use std::time::Duration;

use a2acp_core::agent::thread::HistoryEntry;
use a2acp_core::agent::Thread;
use a2acp_core::packet::Packet;
use a2acp_core::receipt::agreement::Agreement;
use a2acp_core::receipt::{value_hash, Salt, StoredReceipt};
use a2acp_core::Address;

use super::Checker;

/// Per (agent, thread id, field): the (salt, value hash) of each receipt naming it.
pub(super) type Receipted =
    std::collections::BTreeMap<(usize, String, String), Vec<([u8; 16], [u8; 32])>>;

impl Checker {
    /// Agent `node` (named `name`, identity key `key`) stored receipt record `value`.
    pub fn receipt_stored(
        &mut self,
        at: Duration,
        node: usize,
        name: &str,
        value: &[u8],
        key: &[u8; 32],
    ) {
        let s: StoredReceipt = match serde_json::from_slice(value) {
            Ok(s) => s,
            Err(e) => {
                self.fail(
                    at,
                    "receipts",
                    format!("{name} stored an unreadable receipt: {e}"),
                );
                return;
            }
        };
        if let Err(e) = s.receipt.verify_by(key) {
            self.fail(
                at,
                "receipts",
                format!(
                    "{name}'s receipt {} does not verify: {e}",
                    s.receipt.receipt_id
                ),
            );
            return;
        }
        for d in &s.receipt.disclosed {
            let Some(salt) = s.salts.get(&d.field) else {
                self.fail(
                    at,
                    "receipts",
                    format!(
                        "{name}'s receipt {} keeps no salt for `{}`",
                        s.receipt.receipt_id, d.field
                    ),
                );
                continue;
            };
            self.receipted
                .entry((node, s.receipt.thread_id.clone(), d.field.clone()))
                .or_default()
                .push((salt.0, d.value_hash));
        }
    }

    /// An agent (named `name`, address `address`) stored agreement record `value`.
    pub fn agreement_stored(&mut self, at: Duration, name: &str, value: &[u8], address: &Address) {
        let g: Agreement = match serde_json::from_slice(value) {
            Ok(g) => g,
            Err(e) => {
                let why = format!("{name} stored an unreadable agreement: {e}");
                self.fail(at, "receipts", why);
                return;
            }
        };
        if let Err(e) = g.verify() {
            let why = format!(
                "{name}'s agreement of thread {} does not verify: {e}",
                g.thread_id
            );
            self.fail(at, "receipts", why);
            return;
        }
        if !g.confirmations.iter().any(|c| &c.address == address) {
            let why = format!(
                "{name}'s agreement of thread {} lacks its own confirmation",
                g.thread_id
            );
            self.fail(at, "receipts", why);
        }
    }

    /// Checks that each value of one packet agent `node` sent in thread `t` has a receipt.
    pub(super) fn receipts_sent(
        &mut self,
        at: Duration,
        node: usize,
        name: &str,
        t: &Thread,
        h: &HistoryEntry,
    ) {
        let Ok(p) = Packet::parse(h.json.as_bytes()) else {
            return;
        };
        let Some(ctx) = p.body.provided() else {
            return;
        };
        for (field, value) in ctx {
            let covered = self
                .receipted
                .get(&(node, t.id.clone(), field.clone()))
                .is_some_and(|v| {
                    v.iter()
                        .any(|(salt, hash)| value_hash(&Salt(*salt), value) == Some(*hash))
                });
            if !covered {
                self.fail(
                    at,
                    "receipts",
                    format!(
                        "{name} sent `{field}` in {} {} of thread {} with no receipt for that value",
                        h.kind, h.packet_id, t.id
                    ),
                );
            }
        }
    }
}
