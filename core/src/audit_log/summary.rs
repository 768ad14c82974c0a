//! The summary of an entry: one or two sentences written from typed data only — the
//! message's kind, the other party, the thread, the names of the fields it asks for,
//! gives or withholds — never a value, so an encrypted exchange is told as having
//! happened, not as what it said. The same words serve the transparency channel
//! (seed 004 §5.2).

use std::fmt::Write as _;

use crate::agent::events::{DropReason, SpaceEvent};
use crate::agent::{AgentEvent, ExchangeDirection, FieldsNamed};

use super::{fields_of, Entry};

/// The summary of `event`, whose entry (parties, kind, thread) is `entry`.
pub fn summary_of(event: &AgentEvent, entry: &Entry) -> String {
    let sent = entry.direction == ExchangeDirection::Sent;
    let peer = if sent { &entry.to } else { &entry.from };
    let mut s = String::new();
    match event {
        AgentEvent::Dropped { drop, .. } => {
            let _ = write!(
                s,
                "Refused an envelope from {}: {}.",
                peer.agent,
                refusal(drop)
            );
            return s;
        }
        AgentEvent::Space(
            SpaceEvent::Sent { updates, .. } | SpaceEvent::Received { updates, .. },
        ) => {
            let _ = write!(
                s,
                "{} a shared-space update {} {}",
                if sent { "Sent" } else { "Received" },
                if sent { "to" } else { "from" },
                peer.agent
            );
            if let Some(t) = &entry.thread {
                let _ = write!(s, " for space {t}");
            }
            let _ = write!(
                s,
                ": {updates} field update(s), content end-to-end encrypted."
            );
            return s;
        }
        AgentEvent::Exchanged(x) => {
            let _ = write!(
                s,
                "{} {} ({}) {} {} of {}",
                if sent { "Sent" } else { "Received" },
                entry.method,
                entry.kind,
                if sent { "to" } else { "from" },
                peer.agent,
                peer.principal
            );
            if let Some(id) = &entry.id {
                let _ = write!(s, ", id {id}");
            }
            fields(&mut s, &x.fields);
            s.push('.');
            if x.encrypted {
                s.push_str(" Its body was encrypted end to end and is not recorded.");
            }
            return s;
        }
        _ => {}
    }
    let _ = write!(
        s,
        "{} {} {} {}",
        if sent { "Sent" } else { "Received" },
        packet_phrase(&entry.kind),
        if sent { "to" } else { "from" },
        peer.agent
    );
    if let Some(t) = &entry.thread {
        let _ = write!(s, " in thread {t}");
    }
    if let Some(f) = fields_of(event) {
        fields(&mut s, f);
    }
    s.push('.');
    s
}

/// `: asked for a, b; gave c; withheld d (+2 more field names)`.
fn fields(s: &mut String, f: &FieldsNamed) {
    if f.is_empty() {
        return;
    }
    let mut parts: Vec<String> = Vec::new();
    for (what, names) in [
        ("asked for", &f.asked),
        ("gave", &f.given),
        ("withheld", &f.withheld),
    ] {
        if !names.is_empty() {
            parts.push(format!("{what} {}", names.join(", ")));
        }
    }
    let _ = write!(s, ": {}", parts.join("; "));
    if f.more > 0 {
        let _ = write!(s, " (+{} more field names)", f.more);
    }
}

/// How a packet's kind reads in a sentence.
fn packet_phrase(kind: &str) -> String {
    match kind {
        "context" => "context".into(),
        "context_request" => "a context request".into(),
        "context_response" => "a context response".into(),
        "resolution" => "a proposed resolution".into(),
        "resolution_response" => "an answer to the proposed resolution".into(),
        "intent_update" => "an intent update".into(),
        "thread_fork" => "a thread split".into(),
        "coordinator_transfer" => "a coordinator transfer".into(),
        "coordinator_transfer_response" => "an answer to a coordinator transfer".into(),
        "processing_error" => "a processing error".into(),
        "thread_state" => "a thread state summary".into(),
        "execution_report" => "an execution report".into(),
        other => format!("a `{other}` packet"),
    }
}

/// Why an envelope was refused, in words, from the reason's kind only (its error text
/// may quote the peer).
fn refusal(drop: &DropReason) -> &'static str {
    match drop {
        DropReason::Blocked { .. } => "the sender is blocked",
        DropReason::BadSignature { .. } => "bad signature",
        DropReason::RetiredKey { .. } => "under a key its sender rotated away from",
        DropReason::BadKey { .. } => "the sender's key cannot be used",
        DropReason::Refused { .. } => "it does not open",
        DropReason::UnknownThread { .. } => "unknown thread",
        DropReason::Malformed { .. } => "malformed packet",
        DropReason::NotForThisAgent { .. } => "not for this agent",
        DropReason::OwnName => "it claims this agent's name",
        DropReason::Duplicate { .. } => "duplicate",
    }
}
