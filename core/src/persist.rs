//! Persistence records: what a state machine asks its runtime to store.
//!
//! The core never touches storage. It emits [`PersistOp`]s — puts and deletes of opaque
//! values under string keys — and is restored from the set of key/value pairs last stored.
//! A runtime must apply persist operations in the order they are polled and must have
//! applied (durably) every operation polled before a later `Send` output it executes.

use serde::{Deserialize, Serialize};

/// One storage operation on the runtime's key/value store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PersistOp {
    /// Store `value` under `key`, replacing any previous value.
    Put {
        /// Record key, e.g. `thread/thr_x9y8z7`.
        key: String,
        /// Opaque record bytes (JSON).
        value: Vec<u8>,
    },
    /// Remove the record under `key`, if any.
    Delete {
        /// Record key.
        key: String,
    },
}

impl PersistOp {
    /// The key this operation concerns.
    pub fn key(&self) -> &str {
        match self {
            PersistOp::Put { key, .. } | PersistOp::Delete { key } => key,
        }
    }
}

/// Applies operations to an in-memory store: the reference semantics runtimes follow,
/// and what tests and the simulator use.
pub fn apply(store: &mut std::collections::BTreeMap<String, Vec<u8>>, op: &PersistOp) {
    match op {
        PersistOp::Put { key, value } => {
            store.insert(key.clone(), value.clone());
        }
        PersistOp::Delete { key } => {
            store.remove(key);
        }
    }
}
