//! What `receipts` and `agreements` answer: the agent's signed consent receipts and the
//! agreements of its confirmed proposals, read from its store (SPEC-NOTES "Consent
//! receipts", "Receipts of an agreement").

use a2acp_core::receipt::agreement::{Agreement, AGREEMENT_PREFIX};
use a2acp_core::receipt::{StoredReceipt, RECEIPT_PREFIX};

use super::*;
use crate::control::Response;

impl AgentHost {
    /// `receipts`: every receipt (or thread `thread`'s), oldest first, with their salts.
    pub(super) fn receipts(&self, thread: Option<&str>) -> Result<Response, HostError> {
        let prefix = match thread {
            Some(t) => format!("{RECEIPT_PREFIX}{t}/"),
            None => RECEIPT_PREFIX.to_string(),
        };
        let mut list = Vec::new();
        for (key, value) in self.store.with_prefix(&prefix)? {
            match serde_json::from_slice::<StoredReceipt>(&value) {
                Ok(r) => list.push(r),
                // The agent wrote it; a record it cannot read is reported, not fatal.
                Err(e) => tracing::warn!(%key, error = %e, "unreadable receipt record skipped"),
            }
        }
        if list.is_empty() {
            if let Some(t) = thread.filter(|t| !self.agent.threads().contains_key(*t)) {
                return Ok(Response::err(format!(
                    "no thread `{t}` and no receipt of it"
                )));
            }
        }
        list.sort_by(|a, b| a.receipt.at.cmp(&b.receipt.at));
        Ok(Response::ok(list))
    }

    /// `agreements`: every agreement kept (or thread `thread`'s), oldest first.
    pub(super) fn agreements(&self, thread: Option<&str>) -> Result<Response, HostError> {
        let prefix = match thread {
            Some(t) => format!("{AGREEMENT_PREFIX}{t}/"),
            None => AGREEMENT_PREFIX.to_string(),
        };
        let mut list = Vec::new();
        for (key, value) in self.store.with_prefix(&prefix)? {
            match serde_json::from_slice::<Agreement>(&value) {
                Ok(g) => list.push(g),
                Err(e) => tracing::warn!(%key, error = %e, "unreadable agreement record skipped"),
            }
        }
        if list.is_empty() {
            if let Some(t) = thread.filter(|t| !self.agent.threads().contains_key(*t)) {
                return Ok(Response::err(format!(
                    "no thread `{t}` and no agreement of it"
                )));
            }
        }
        list.sort_by(|a, b| a.at.cmp(&b.at));
        Ok(Response::ok(list))
    }
}
