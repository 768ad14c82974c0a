//! Session callsigns (§5.5): an adjective and a noun, chosen from the session's id, so a
//! person can say "what did coral-heron decide?".

use crate::memory::canonical::sha256_hex;

const ADJECTIVES: [&str; 32] = [
    "amber", "brisk", "calm", "coral", "dusky", "eager", "fern", "gentle", "hazel", "ivory",
    "jade", "keen", "lunar", "mellow", "nimble", "ochre", "pale", "quiet", "russet", "silver",
    "tawny", "umber", "vivid", "wary", "young", "zesty", "bold", "clever", "misty", "proud",
    "sunny", "wild",
];

const NOUNS: [&str; 32] = [
    "heron", "otter", "falcon", "badger", "lynx", "marten", "osprey", "plover", "raven", "salmon",
    "thrush", "wren", "finch", "gecko", "ibis", "kestrel", "lark", "magpie", "newt", "owl",
    "puffin", "quail", "robin", "stoat", "tern", "vole", "weasel", "yak", "crane", "dingo",
    "egret", "hare",
];

/// The callsign of the session `session_id`: deterministic, not unique (§5.5).
pub fn callsign(session_id: &str) -> String {
    let hex = sha256_hex(session_id.as_bytes());
    let digits = hex.trim_start_matches("sha256:");
    let a = usize::from_str_radix(digits.get(0..2).unwrap_or("0"), 16).unwrap_or(0);
    let n = usize::from_str_radix(digits.get(2..4).unwrap_or("0"), 16).unwrap_or(0);
    format!(
        "{}-{}",
        ADJECTIVES.get(a % ADJECTIVES.len()).unwrap_or(&"quiet"),
        NOUNS.get(n % NOUNS.len()).unwrap_or(&"otter")
    )
}

/// A session's id: `sess_` and 32 hex digits of the hash of who, where and when it
/// started.
pub fn session_id(project_id: &str, actor_id: &str, actor_type: &str, started_ms: u64) -> String {
    let doc = serde_json::json!([project_id, actor_id, actor_type, started_ms]);
    let hex = sha256_hex(doc.to_string().as_bytes());
    format!(
        "sess_{}",
        hex.trim_start_matches("sha256:").get(..32).unwrap_or("")
    )
}
