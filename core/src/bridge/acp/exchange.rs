//! What the principal's audit log records of an ACP message ([`AgentEvent::Exchanged`]
//! with an [`Exchange`]): read from the message itself — its method, `message-type`, id,
//! whether its body was encrypted and the names of the `parameters` it gives — never
//! its values (seed 004 §6).

use serde_json::{Map, Value};

use crate::agent::{Exchange, ExchangeDirection, FieldsNamed};
use crate::display;

/// Field names kept per list (the audit log's bound).
const MAX_NAMES: usize = 16;

/// The container of a message's headers and body: `params`, `result` or `error.data`.
fn container(m: &Value) -> Option<&Map<String, Value>> {
    m.get("params")
        .or_else(|| m.get("result"))
        .or_else(|| m.get("error").and_then(|e| e.get("data")))
        .and_then(Value::as_object)
}

/// A header of a message, if it is a string.
pub fn header<'a>(m: &'a Value, name: &str) -> Option<&'a str> {
    container(m)?.get("headers")?.get(name)?.as_str()
}

/// The `agent-id` of a message's sender, read without checking the message (to find its
/// key before the session checks everything).
pub fn sender_of(bytes: &[u8]) -> Option<String> {
    let m: Value = serde_json::from_slice(bytes).ok()?;
    header(&m, "agent-id").map(str::to_string)
}

/// The `principal-id` of a message, read without checking it.
pub fn principal_of(bytes: &[u8]) -> Option<String> {
    let m: Value = serde_json::from_slice(bytes).ok()?;
    header(&m, "principal-id").map(str::to_string)
}

/// The audit log's record of the message `json`, sent to or received from `peer_agent`
/// (whose principal is `peer_principal`, empty when not known yet) through the inbox of
/// `recipient`. `None` when `json` is not a JSON object.
pub fn exchange(
    json: &[u8],
    direction: ExchangeDirection,
    peer_agent: &str,
    peer_principal: &str,
    recipient: &str,
) -> Option<Exchange> {
    let m: Value = serde_json::from_slice(json).ok()?;
    m.as_object()?;
    let method = match m.get("method").and_then(Value::as_str) {
        Some(method) => method.to_string(),
        None if m.get("error").is_some() => "error".into(),
        None => "response".into(),
    };
    let kind = header(&m, "message-type").unwrap_or("unknown").to_string();
    let id = m.get("id").and_then(Value::as_str).map(str::to_string);
    let body = container(&m).and_then(|c| c.get("body"));
    let encrypted = body.is_some_and(|b| b.get("encrypted").is_some());
    let mut fields = FieldsNamed::default();
    if let Some(p) = body
        .and_then(|b| b.get("parameters"))
        .and_then(Value::as_object)
    {
        for k in p.keys() {
            if fields.given.len() < MAX_NAMES {
                fields
                    .given
                    .push(display::line(k, display::MAX_FIELD_NAME).into_owned());
            } else {
                fields.more += 1;
            }
        }
    }
    Some(Exchange {
        direction,
        peer_agent: display::line(peer_agent, display::MAX_SHORT).into_owned(),
        peer_principal: display::line(peer_principal, display::MAX_SHORT).into_owned(),
        kind: display::line(&kind, display::MAX_FIELD_NAME).into_owned(),
        method: display::line(&method, display::MAX_FIELD_NAME).into_owned(),
        id: id.map(|i| display::line(&i, display::MAX_SHORT).into_owned()),
        channel: format!("nats:agent.{recipient}.inbox"),
        fields,
        encrypted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exchange_names_fields_never_values() {
        let m = br#"{"jsonrpc":"2.0","method":"agent.request","id":"req-1","params":{"headers":{"agent-id":"agent-alpha","principal-id":"principal-a","message-type":"request"},"body":{"action":"get-availability","parameters":{"date_range":"2026-02-17/2026-02-21"}}}}"#;
        assert_eq!(sender_of(m).as_deref(), Some("agent-alpha"));
        let x = exchange(
            m,
            ExchangeDirection::Received,
            "agent-alpha",
            "principal-a",
            "beta",
        )
        .unwrap();
        assert_eq!(x.method, "agent.request");
        assert_eq!(x.kind, "request");
        assert_eq!(x.id.as_deref(), Some("req-1"));
        assert_eq!(x.fields.given, vec!["date_range".to_string()]);
        assert_eq!(x.channel, "nats:agent.beta.inbox");
        assert!(!x.encrypted);
        let text = serde_json::to_string(&x).unwrap();
        assert!(!text.contains("2026-02-17"));
        let r = br#"{"jsonrpc":"2.0","id":"req-1","result":{"headers":{"agent-id":"beta","message-type":"response"},"body":{"encrypted":{"alg":"x"}}}}"#;
        let x = exchange(r, ExchangeDirection::Sent, "agent-alpha", "", "agent-alpha").unwrap();
        assert_eq!(x.method, "response");
        assert!(x.encrypted);
        assert!(exchange(b"[1]", ExchangeDirection::Sent, "a", "", "a").is_none());
        assert!(sender_of(b"{").is_none());
    }
}
