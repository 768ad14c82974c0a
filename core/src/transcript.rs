//! Transcript lines of what an agent and its user do, in words: one renderer for the
//! harness ([`crate::harness`]), the simulator and the runtime's demo and logs. Lines
//! read `>` sent, `<` received, `|` state change or local event; what an agent did comes
//! from its typed [`AgentEvent`]s, never from audit text. Also the vocabulary every
//! transcript shares: stable names for random ids, short addresses, one-line packet
//! summaries and relay events in words. Pure functions of their inputs.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::address::Address;
use crate::agent::{
    Agent, AgentEvent, Command, ConsentAnswer, FieldChoice, GroupConfirmation, Prompt, PromptKind,
    ResolutionAnswer,
};
use crate::relay::RelayEvent;

/// Replaces `thr_…`/`pkt_…` ids by `thr#1`, `pkt#1`… in order of first appearance, so
/// transcripts do not depend on the random ids (one instance per rendered transcript).
#[derive(Default)]
pub struct IdNames {
    map: BTreeMap<String, String>,
    counts: BTreeMap<&'static str, usize>,
}

impl IdNames {
    /// The stable name of one id.
    pub fn name(&mut self, id: &str) -> String {
        self.scrub(id)
    }

    /// `text` with every id replaced.
    pub fn scrub(&mut self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        loop {
            let next = ["thr_", "pkt_"]
                .iter()
                .filter_map(|p| rest.find(p).map(|i| (i, *p)))
                .min();
            let Some((i, prefix)) = next else {
                out.push_str(rest);
                return out;
            };
            // The prefix and the id's characters are ASCII, so both splits fall on
            // character boundaries and always succeed.
            let Some((before, from)) = rest.split_at_checked(i) else {
                out.push_str(rest);
                return out;
            };
            out.push_str(before);
            let len = prefix.len()
                + from
                    .bytes()
                    .skip(prefix.len())
                    .take_while(u8::is_ascii_alphanumeric)
                    .count();
            let Some((id, after)) = from.split_at_checked(len) else {
                out.push_str(from);
                return out;
            };
            let kind: &'static str = if prefix == "thr_" { "thr" } else { "pkt" };
            let name = match self.map.get(id) {
                Some(n) => n.clone(),
                None => {
                    let c = self.counts.entry(kind).or_insert(0);
                    *c += 1;
                    let n = format!("{kind}#{c}");
                    self.map.insert(id.to_string(), n.clone());
                    n
                }
            };
            out.push_str(&name);
            rest = after;
        }
    }
}

/// A transcript line's mark: what kind of line it is.
pub const SENT: char = '>';
/// A packet reached the agent's logic.
pub const RECEIVED: char = '<';
/// A state change or local event.
pub const LOCAL: char = '|';

/// An agent's audit event as a transcript line: its mark and text. A packet sent names
/// its recipient by user name and summarizes the packet (found in `thread_id`'s history,
/// newest first); a packet received names its sender; any other event is its audit line.
pub fn describe_event(agent: &Agent, thread_id: Option<&str>, e: &AgentEvent) -> (char, String) {
    match e {
        AgentEvent::Sent {
            kind,
            packet_id,
            to,
            ..
        } => {
            let body = thread_id
                .and_then(|id| agent.threads().get(id))
                .and_then(|t| t.history.iter().rev().find(|h| &h.packet_id == packet_id))
                .map(|h| summarize_packet(&h.json))
                .unwrap_or_default();
            (
                SENT,
                format!("{kind} {packet_id} to {}{body}", short(to.as_str())),
            )
        }
        AgentEvent::Received {
            kind,
            packet_id,
            from,
            ..
        } => (
            RECEIVED,
            format!("{kind} {packet_id} from {}", short(from.as_str())),
        ),
        other => (LOCAL, other.to_string()),
    }
}

/// How much a prompt or an answer shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Prompts with each field's reason and the buttons the user sees; answers name the
    /// button pressed (the harness's transcripts).
    Buttons,
    /// Prompts and answers in short (the simulator's transcripts).
    Brief,
}

/// A prompt as the user sees it.
pub fn describe_prompt(p: &Prompt, detail: Detail) -> String {
    let buttons = detail == Detail::Buttons;
    match &p.kind {
        PromptKind::Consent { fields } => {
            let f: Vec<String> = fields
                .iter()
                .map(|f| {
                    let pr = serde_json::to_value(f.priority)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default();
                    let suggested = f
                        .suggested
                        .as_ref()
                        .map(compact)
                        .unwrap_or_else(|| "none".into());
                    if buttons {
                        format!("{} ({pr}, “{}”, suggested {suggested})", f.field, f.reason)
                    } else {
                        format!("{} ({pr}, suggested {suggested})", f.field)
                    }
                })
                .collect();
            format!(
                "prompt #{} consent for {}: {}{}",
                p.id,
                short(p.peer.as_str()),
                f.join("; "),
                if buttons {
                    "  [Share selected] [Decline all]"
                } else {
                    ""
                }
            )
        }
        PromptKind::Resolution {
            proposal,
            proposer,
            reminder,
            ..
        } => format!(
            "prompt #{} {}resolution from {}: “{}”{}",
            p.id,
            if *reminder { "(reminder) " } else { "" },
            short(proposer.as_str()),
            proposal.summary,
            if buttons {
                "  [Confirm] [Different time] [Different place] [Make an excuse]"
            } else {
                ""
            }
        ),
    }
}

/// A user command in words.
pub fn describe_command(c: &Command, detail: Detail) -> String {
    match c {
        Command::StartThread { to, intent, .. } => format!(
            "start thread with {} about “{}”",
            short(to.as_str()),
            intent.summary
        ),
        Command::StartGroupThread {
            participants,
            intent,
            confirmation,
            ..
        } => format!(
            "start group thread with {} about “{}”{}",
            participants
                .iter()
                .map(|p| short(p.as_str()))
                .collect::<Vec<_>>()
                .join(", "),
            intent.summary,
            match confirmation {
                GroupConfirmation::All => String::new(),
                GroupConfirmation::Quorum(q) => format!(" (quorum {q})"),
                GroupConfirmation::Sequential => " (sequential)".into(),
            }
        ),
        Command::TransferCoordinator { group_id, to } => {
            format!("hand group {group_id} over to {}", short(to.as_str()))
        }
        Command::AnswerConsent { prompt_id, answer } => match answer {
            ConsentAnswer::DeclineAll => format!("answers prompt #{prompt_id}: decline all"),
            ConsentAnswer::ShareSelected(m) => {
                let parts: Vec<String> = m
                    .iter()
                    .map(|(k, v)| match v {
                        FieldChoice::Share => format!("share {k}"),
                        FieldChoice::ShareValue(x) => format!("share {k}={}", compact(x)),
                        FieldChoice::DontShare => format!("don't share {k}"),
                    })
                    .collect();
                let button = match detail {
                    Detail::Buttons => " (share selected)",
                    Detail::Brief => "",
                };
                format!("answers prompt #{prompt_id}: {}{button}", parts.join(", "))
            }
        },
        Command::AnswerResolution { prompt_id, answer } => {
            let a = match answer {
                ResolutionAnswer::Confirm => "confirm".to_string(),
                ResolutionAnswer::DifferentTime => "different time".to_string(),
                ResolutionAnswer::DifferentPlace => "different place".to_string(),
                ResolutionAnswer::MakeExcuse { .. } => "make an excuse for me".to_string(),
                ResolutionAnswer::Decline => "decline".to_string(),
                ResolutionAnswer::Alternative(i) => format!("alternative {}", i + 1),
            };
            format!("answers prompt #{prompt_id}: {a}")
        }
        Command::UpdateContext { thread_id, context } => format!(
            "adds context to {thread_id}: {}",
            compact(&Value::Object(context.clone()))
        ),
        Command::UpdateIntent {
            thread_id, intent, ..
        } => format!("changes the intent of {thread_id} to “{}”", intent.summary),
        Command::ForkThread { thread_id, intents } => format!(
            "splits {thread_id} into {}",
            intents
                .iter()
                .map(|i| format!("“{}”", i.summary))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        Command::CancelThread { thread_id } => format!("cancels {thread_id}"),
        Command::AcceptKeyChange { address } => format!(
            "checked and accepts the new key of {}",
            short(address.as_str())
        ),
        Command::Block(a) => format!("blocks {}", short(a.as_str())),
        Command::CreateSpace {
            name, participants, ..
        } => format!(
            "create space “{name}” with {}",
            participants
                .iter()
                .map(|p| format!("{} ({})", short(p.address.as_str()), p.permission))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Command::SetSpaceField {
            space_id,
            field,
            value,
        } => format!(
            "set {field} in {space_id} to {}",
            match value {
                crate::space::FieldValue::Value { value } => compact(value),
                crate::space::FieldValue::Link { link } => format!("link {}", link.uri),
                crate::space::FieldValue::Cleared => "(cleared)".to_string(),
            }
        ),
        other => format!("{other:?}").chars().take(120).collect(),
    }
}

/// The user part of an address text (the text itself if it is not an address).
pub fn short(addr: &str) -> String {
    Address::parse(addr)
        .map(|a| a.user().to_string())
        .unwrap_or_else(|_| addr.to_string())
}

/// A JSON value on one line.
pub fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// A one-line summary of a packet's JSON, readable like the spec's examples.
pub fn summarize_packet(json: &str) -> String {
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(json) else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let Some(Value::Object(i)) = m.get("intent") {
        parts.push(format!(
            "intent {} “{}”",
            i.get("category").and_then(Value::as_str).unwrap_or(""),
            i.get("summary").and_then(Value::as_str).unwrap_or("")
        ));
    }
    if let Some(caps) = m.get("capabilities") {
        let v = caps.get("supported_versions").unwrap_or(&Value::Null);
        parts.push(format!("capabilities {}", compact(v)));
    }
    for key in ["context", "context_provided"] {
        if let Some(Value::Object(c)) = m.get(key) {
            if !c.is_empty() {
                parts.push(format!("{key} {}", compact(&Value::Object(c.clone()))));
            }
        }
    }
    for key in ["needs", "additional_context_needed"] {
        if let Some(Value::Array(n)) = m.get(key) {
            if !n.is_empty() {
                let list: Vec<String> = n
                    .iter()
                    .map(|x| {
                        format!(
                            "{} ({})",
                            x["field"].as_str().unwrap_or("?"),
                            x["priority"].as_str().unwrap_or("?")
                        )
                    })
                    .collect();
                parts.push(format!("{key} [{}]", list.join(", ")));
            }
        }
    }
    if let Some(Value::Array(u)) = m.get("context_unavailable") {
        if !u.is_empty() {
            let list: Vec<String> = u
                .iter()
                .map(|x| {
                    format!(
                        "{} {} hint={}",
                        x["field"].as_str().unwrap_or("?"),
                        x["status"].as_str().unwrap_or("?"),
                        x["hint"]
                    )
                })
                .collect();
            parts.push(format!("unavailable [{}]", list.join(", ")));
        }
    }
    if let Some(Value::Object(e)) = m.get("escalation") {
        parts.push(format!(
            "escalation “{}”",
            e.get("reason").and_then(Value::as_str).unwrap_or("")
        ));
    }
    if let Some(Value::Object(p)) = m.get("proposal") {
        parts.push(format!(
            "proposal “{}”",
            p.get("summary").and_then(Value::as_str).unwrap_or("")
        ));
        if let Some(Value::Array(a)) = p.get("alternatives") {
            let alts: Vec<&str> = a.iter().filter_map(|x| x["summary"].as_str()).collect();
            if !alts.is_empty() {
                parts.push(format!("alternatives [{}]", alts.join("; ")));
            }
        }
        if let Some(Value::Array(c)) = m.get("requires_confirmation_from") {
            let who: Vec<String> = c.iter().filter_map(Value::as_str).map(short).collect();
            parts.push(format!("confirm by [{}]", who.join(", ")));
        }
        if let Some(Value::Array(a)) = m.get("actions_on_confirm") {
            let acts: Vec<&str> = a.iter().filter_map(|x| x["action"].as_str()).collect();
            parts.push(format!("actions [{}]", acts.join(", ")));
        }
    }
    if let Some(s) = m.get("status").and_then(Value::as_str) {
        parts.push(format!("status {s}"));
        if let Some(c) = m.get("reason_class").and_then(Value::as_str) {
            parts.push(format!("reason_class {c}"));
        }
        if let Some(c) = m.get("message_to_other_agent").and_then(Value::as_str) {
            parts.push(format!("message “{c}”"));
        }
        if let Some(r) = m.get("actual_reason") {
            parts.push(format!("actual_reason {r}"));
        }
        if m.get("signature").is_some_and(Value::is_string) {
            parts.push("signed".into());
        }
        if let Some(Value::Array(c)) = m.get("confirmations") {
            let who: Vec<String> = c
                .iter()
                .filter_map(|x| x["address"].as_str())
                .map(short)
                .collect();
            parts.push(format!("passes on confirmations of [{}]", who.join(", ")));
        }
    }
    if let Some(e) = m.get("error").and_then(Value::as_str) {
        parts.push(format!("error {e}"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(": {}", parts.join("; "))
    }
}

/// A relay event in words (`None`: not shown in transcripts).
pub fn describe_relay_event(e: &RelayEvent) -> Option<String> {
    Some(match e {
        RelayEvent::Registered { address } => format!("registered {address}"),
        RelayEvent::Rotated { address, seq } => format!("rotated {address} (rotation {seq})"),
        RelayEvent::RecoveryBound { address, seq } => {
            format!("bound a recovery key to {address} (binding {seq})")
        }
        RelayEvent::Recovered { address } => format!("recovered {address} onto a new key"),
        RelayEvent::Authenticated { address, .. } => format!("authenticated {address}"),
        RelayEvent::Routed { from, to, id } => format!(
            "queued #{id} {} -> {}",
            short(from.as_str()),
            short(to.as_str())
        ),
        RelayEvent::Delivered { id, to } => format!("delivered #{id} to {}", short(to.as_str())),
        RelayEvent::Acked { id } => format!("acked #{id}"),
        RelayEvent::Refused { code, message, .. } => {
            format!("refused ({}): {message}", code.as_str())
        }
        RelayEvent::Replaced { address, .. } => {
            format!("new connection replaced the old one for {address}")
        }
        RelayEvent::Overflow { from, to } => format!(
            "queue full: overflow notice to {} for {}",
            short(from.as_str()),
            short(to.as_str())
        ),
        RelayEvent::ReplacedElsewhere { address, .. } => {
            format!("a connection on another node replaced this one for {address}")
        }
        RelayEvent::ConnectionDead { .. } => "connection dead (missed heartbeats)".to_string(),
        RelayEvent::AckIgnored { .. } | RelayEvent::Federation(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_named_around_any_text() {
        let mut n = IdNames::default();
        assert_eq!(
            n.scrub("é thr_ab1 → pkt_x9é thr_ab1 pkt_ thr_"),
            "é thr#1 → pkt#1é thr#1 pkt#2 thr#2"
        );
        assert_eq!(n.name("pkt_x9"), "pkt#1");
        assert_eq!(
            n.scrub("thr_ab1thr_cd"),
            "thr#3_cd",
            "an id runs over ASCII letters and digits"
        );
        assert_eq!(n.scrub("no ids — ünïcode"), "no ids — ünïcode");
    }

    #[test]
    fn summaries_read_fields_of_any_shape() {
        // Fields of the wrong JSON type, as a peer may send them, are shown, never trusted.
        let s = summarize_packet(
            r#"{"capabilities":"all","reason_class":"declined","actual_reason":{"x":1}}"#,
        );
        assert!(s.contains("capabilities null"), "{s}");
        let s = summarize_packet(r#"{"capabilities":{"supported_versions":["0.2"]}}"#);
        assert!(s.contains(r#"capabilities ["0.2"]"#), "{s}");
        assert_eq!(summarize_packet("[1,2]"), "");
        assert_eq!(summarize_packet("not json"), "");
    }
}
