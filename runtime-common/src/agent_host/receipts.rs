//! What `receipts` answers: the agent's signed consent receipts, read from its store
//! (SPEC-NOTES "Consent receipts").

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
}
