//! What `receipts`, `agreements` and `retractions` answer: the agent's signed consent
//! receipts, the agreements of its confirmed proposals and the records of what its user
//! took back, read from its store (SPEC-NOTES "Consent receipts", "Receipts of an
//! agreement", "Retraction").

use a2acp_core::receipt::agreement::{Agreement, AGREEMENT_PREFIX};
use a2acp_core::receipt::retraction::{Retraction, RETRACTION_PREFIX};
use a2acp_core::receipt::{StoredReceipt, RECEIPT_PREFIX};

use super::*;
use crate::control::Response;

impl AgentHost {
    /// `receipts`: every receipt (or thread `thread`'s), oldest first, with their salts.
    pub(super) fn receipts(&self, thread: Option<&str>) -> Result<Response, HostError> {
        self.thread_records::<StoredReceipt>(RECEIPT_PREFIX, thread, "receipt", |r| {
            r.receipt.at.clone()
        })
    }

    /// `agreements`: every agreement kept (or thread `thread`'s), oldest first.
    pub(super) fn agreements(&self, thread: Option<&str>) -> Result<Response, HostError> {
        self.thread_records::<Agreement>(AGREEMENT_PREFIX, thread, "agreement", |g| g.at.clone())
    }

    /// `retractions`: every retraction record (or thread `thread`'s), oldest first.
    pub(super) fn retractions(&self, thread: Option<&str>) -> Result<Response, HostError> {
        self.thread_records::<Retraction>(RETRACTION_PREFIX, thread, "retraction", |r| {
            r.asked_at.clone()
        })
    }

    /// The records under `prefix` (`prefix<thread>/…` for one thread), oldest first by
    /// `at`; `what` names them in messages. An unknown thread without records is named.
    fn thread_records<T: serde::de::DeserializeOwned + serde::Serialize>(
        &self,
        prefix: &str,
        thread: Option<&str>,
        what: &str,
        at: impl Fn(&T) -> String,
    ) -> Result<Response, HostError> {
        let prefix = match thread {
            Some(t) => format!("{prefix}{t}/"),
            None => prefix.to_string(),
        };
        let mut list = Vec::new();
        for (key, value) in self.store.with_prefix(&prefix)? {
            match serde_json::from_slice::<T>(&value) {
                Ok(r) => list.push(r),
                // The agent wrote it; a record it cannot read is reported, not fatal.
                Err(e) => tracing::warn!(%key, error = %e, "unreadable {what} record skipped"),
            }
        }
        if list.is_empty() {
            if let Some(t) = thread.filter(|t| !self.agent.threads().contains_key(*t)) {
                return Ok(Response::err(format!(
                    "no thread `{t}` and no {what} of it"
                )));
            }
        }
        list.sort_by_key(|r| at(r));
        Ok(Response::ok(list))
    }
}
