//! The conformance descriptor at `/v1/conformance` (§11.5) with the capabilities of
//! §10.2, as this service has them.

use serde_json::{json, Value};

/// What the service can do (§10.2), and how `mode=relevant` searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Keyword (full-text) search behind `mode=relevant`.
    pub keyword_search: bool,
}

/// The descriptor: level L3 (every operation of §8, the §5.3 transitions, the list of
/// packages awaiting review), `hybrid_search` and `semantic_search` false (no embeddings),
/// `realtime` and `blob_storage` false; the keyword search is declared in the `x-*`
/// namespace (§12.1), since §10.2 names no capability for it.
pub fn descriptor(caps: Capabilities, version: &str) -> Value {
    json!({
        "protocol_version": super::PROTOCOL_VERSION,
        "conformance_level": "L3",
        "capabilities": {
            "hybrid_search": false,
            "semantic_search": false,
            "realtime": false,
            "blob_storage": false,
            "x-keyword_search": caps.keyword_search,
        },
        "implementation": { "name": "a2acp", "version": version },
        "x-operations": [
            "deposit", "pull", "orient", "orchestrate", "flag_for_review",
            "assert_fact", "invalidate_fact"
        ],
        "x-relevant_search": if caps.keyword_search { "sqlite-fts5-bm25" } else { "none" },
    })
}
