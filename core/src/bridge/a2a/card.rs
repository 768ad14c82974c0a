//! The A2A v1.0 agent card (`/.well-known/agent-card.json`, seed 003 "Agent Cards"): who
//! the agent is, where its JSON-RPC and HTTP+JSON interfaces are, what it can do, how a client
//! authenticates. SPEC-NOTES "The A2A v1.0 bridge (seed 003, §18)".

use serde_json::{json, Value};

use crate::address::Address;
use crate::bridge::a2a::rest;
use crate::bridge::a2a::task::PROTOCOL_VERSION;

/// What the card says, from the agent's configuration and the listener's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardInfo {
    /// The agent's a2acp address.
    pub address: Address,
    /// The JSON-RPC endpoint's absolute URL (`http://127.0.0.1:7410/`), also the base of
    /// the HTTP+JSON routes (`…/message:send`, `…/tasks/{id}`).
    pub url: String,
    /// Whether a bearer token is required (declared as the `bearer` HTTP scheme).
    pub bearer: bool,
    /// The implementation's version (`CARGO_PKG_VERSION`).
    pub version: String,
}

/// The card, in the A2A v1.0 JSON form (`supportedInterfaces`: `JSONRPC`, then
/// `HTTP+JSON` at the same URL, both `protocolVersion` `1.0` — a client preferring the
/// card's order takes JSON-RPC; streaming on, push notifications off; one skill
/// per kind of negotiation the deterministic negotiator knows).
pub fn card(info: &CardInfo) -> Value {
    let mut card = json!({
        "name": format!("a2acp agent {}", info.address),
        "description": "An A2ACP (Agent-to-Agent Context Protocol) agent acting for one person: it negotiates with you on their behalf, shares only what their permission tiers allow (asking them first where needed), and proposes an outcome both sides confirm.",
        "supportedInterfaces": [{
            "url": info.url,
            "protocolBinding": "JSONRPC",
            "protocolVersion": PROTOCOL_VERSION,
        }, {
            "url": info.url,
            "protocolBinding": rest::PROTOCOL_BINDING,
            "protocolVersion": PROTOCOL_VERSION,
        }],
        "version": info.version,
        "capabilities": {
            "streaming": true,
            "pushNotifications": false,
            "extendedAgentCard": false,
        },
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [
            {
                "id": "scheduling",
                "name": "Schedule with this person",
                "description": "Find a time (and place) for a meeting, a call or a meal. Send what you want in text and your availability as data (time_windows, timezone, dietary, location_preference); the agent asks for what it still needs (input-required) and proposes a slot as an artifact for you to confirm with data {\"decision\": \"confirm\"}.",
                "tags": ["scheduling", "negotiation", "a2acp"],
                "examples": ["Dinner with Alice on Friday?", "A 30-minute video call next week"],
                "inputModes": ["text/plain", "application/json"],
                "outputModes": ["text/plain", "application/json"],
            },
            {
                "id": "general",
                "name": "Ask this person's agent",
                "description": "Any other request: the text is the intent, data parts are context fields; what the agent shares goes through its person's permission tiers.",
                "tags": ["negotiation", "a2acp"],
                "inputModes": ["text/plain", "application/json"],
                "outputModes": ["text/plain", "application/json"],
            }
        ],
    });
    if info.bearer {
        if let Some(m) = card.as_object_mut() {
            m.insert(
                "securitySchemes".into(),
                json!({ "bearer": { "httpAuthSecurityScheme": { "scheme": "Bearer" } } }),
            );
            m.insert(
                "securityRequirements".into(),
                json!([{ "schemes": { "bearer": { "list": [] } } }]),
            );
        }
    }
    card
}

/// How long a client may keep the card without asking again (`Cache-Control:
/// max-age`, A2A v1.0 §8.6.1): it changes only when the agent restarts with another
/// version or token setting.
pub const CARD_MAX_AGE_SECS: u64 = 300;

/// The card's `ETag` (A2A v1.0 §8.6.1): a strong validator, the first 16 bytes of the
/// SHA-256 of the card's bytes as served, in hex and quotes.
pub fn etag(body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(body);
    let hex: String = h.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Whether a request's `If-None-Match` (RFC 9110 §13.1.2: `*` or a list of entity tags,
/// compared weakly) matches `etag`, so the answer is `304 Not Modified`.
pub fn not_modified(if_none_match: &str, etag: &str) -> bool {
    let bare = |t: &str| t.trim().trim_start_matches("W/").to_string();
    let want = bare(etag);
    if_none_match
        .split(',')
        .any(|t| t.trim() == "*" || bare(t) == want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_is_validated_by_its_etag() {
        let a = etag(b"{\"name\":\"a\"}");
        let b = etag(b"{\"name\":\"b\"}");
        assert_ne!(a, b);
        assert!(
            a.starts_with('"') && a.ends_with('"') && a.len() == 34,
            "{a}"
        );
        assert!(not_modified(&a, &a));
        assert!(not_modified(&format!("W/{a}"), &a));
        assert!(not_modified(&format!("{b}, {a}"), &a));
        assert!(not_modified("*", &a));
        assert!(!not_modified(&b, &a));
        assert!(!not_modified("", &a));
    }
}
