//! The principal's audit log (seed 004 §6): one JSON line per substantive message the
//! agent sent or received — every a2acp packet, and the messages of bridges that speak
//! another protocol ([`AgentEvent::Exchanged`]) — in the seed's schema, each line
//! carrying the hash of the one before ([`chain`]).
//!
//! This module decides what an entry says, from the typed [`AuditRecord`]s the agent
//! emits (pure): which records make an entry ([`entry_of`]), the parties, and the summary,
//! written from typed data only — the packet's kind, its thread, the names of the fields
//! it asks for, gives or withholds, never a value — so an end-to-end encrypted exchange
//! is recorded as having happened, not as what it said. The runtime writes the lines
//! (`a2acp_runtime::audit_log`). SPEC-NOTES "Audit log".

pub mod chain;
mod summary;

use serde::{Deserialize, Serialize};

use crate::address::Address;
use crate::agent::events::{DropReason, SpaceEvent};
use crate::agent::{AgentEvent, AuditRecord, ExchangeDirection, FieldsNamed};
use crate::display;

pub use summary::summary_of;

/// One side of an exchange: an agent and the principal (person) it acts for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Party {
    /// The agent (an a2acp address, or an ACP `agent-id`).
    pub agent: String,
    /// Its principal.
    pub principal: String,
}

impl Party {
    /// An a2acp agent: its address, and as principal the address without its `agent:`
    /// scheme (an a2acp address serves one person, so it names the person too).
    pub fn of(address: &Address) -> Party {
        Party {
            agent: address.to_string(),
            principal: principal_of(address),
        }
    }
}

/// The principal of an a2acp address: `user@domain`.
pub fn principal_of(address: &Address) -> String {
    format!("{}@{}", address.user(), address.domain())
}

/// One entry of the log, in seed 004 §6's schema (its members in this order), plus the
/// thread (or space) it belongs to and whether a transparency summary of it was queued.
/// The line written is this object with a last member `prev` ([`chain::seal`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// When (RFC 3339, UTC, seconds).
    pub ts: String,
    /// `sent` or `received`.
    pub direction: ExchangeDirection,
    /// The sender.
    pub from: Party,
    /// The recipient.
    pub to: Party,
    /// The packet's type (`context_request`…), or the message's (`request`…).
    #[serde(rename = "type")]
    pub kind: String,
    /// `a2acp.<type>` for a2acp packets; the message's method for others.
    pub method: String,
    /// The packet's or message's id (`null` when it has none).
    pub id: Option<String>,
    /// One or two sentences from typed data only (never a field's value).
    pub summary: String,
    /// The transport (`relay:<domain>`, `a2a`, `nats:agent.<id>.inbox`).
    pub channel: String,
    /// The thread or space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    /// Whether a summary of it was queued for the transparency channel (seed 004 §6's
    /// `discord_summary`).
    #[serde(default)]
    pub transparency_summary: bool,
}

/// A line the log writer adds about the log itself (a line torn by a crash, entries that
/// could not be written): `{"ts":…,"type":"log_note","note":…,"summary":…,"prev":…}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogNote {
    /// When.
    pub ts: String,
    /// Always [`LOG_NOTE`].
    #[serde(rename = "type")]
    pub kind: String,
    /// What kind of note.
    pub note: NoteKind,
    /// In words.
    pub summary: String,
}

/// The `type` of a [`LogNote`].
pub const LOG_NOTE: &str = "log_note";

/// What a [`LogNote`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteKind {
    /// The line before was cut short by a crash; it is kept as it was, and this note
    /// chains to its bytes.
    TornLine,
    /// Entries could not be written (the disk refused); how many is in the summary.
    EntriesLost,
}

impl LogNote {
    /// A note at `ts`.
    pub fn new(ts: crate::Timestamp, note: NoteKind, summary: String) -> LogNote {
        LogNote {
            ts: ts.to_rfc3339(),
            kind: LOG_NOTE.into(),
            note,
            summary,
        }
    }
}

/// The channel of a2acp packets with `peer`, seen from agent `me`: its bridge for a
/// bridged peer (`a2a`), else the relay of `me`'s domain (`relay:<domain>`).
pub fn channel_of(me: &Address, peer: &Address) -> String {
    if peer.is_a2a() {
        "a2a".into()
    } else {
        format!("relay:{}", me.domain())
    }
}

/// The thread id as written: cleaned for display, at most [`display::MAX_SHORT`]
/// characters (a peer chooses it).
fn thread_of(id: Option<&str>) -> Option<String> {
    id.map(|t| display::line(t, display::MAX_SHORT).into_owned())
}

/// The entry for `record` of agent `me`, if the record is a message sent or received:
/// [`AgentEvent::Sent`], [`AgentEvent::Received`], the space packets
/// ([`SpaceEvent::Sent`], [`SpaceEvent::Received`]), a bridge's
/// [`AgentEvent::Exchanged`], and an envelope refused from a named sender
/// ([`AgentEvent::Dropped`], already collapsed by the agent: a bounded line). Anything
/// else (state changes, keys, the relay link, a packet sent again after a reconnect — the
/// same message) makes none.
pub fn entry_of(record: &AuditRecord, me: &Address) -> Option<Entry> {
    let ts = record.at.to_rfc3339();
    let thread = thread_of(record.thread_id.as_deref());
    let mine = Party::of(me);
    let packet = |direction: ExchangeDirection, kind: &str, id: &str, peer: &Address| {
        let (from, to) = match direction {
            ExchangeDirection::Sent => (mine.clone(), Party::of(peer)),
            ExchangeDirection::Received => (Party::of(peer), mine.clone()),
        };
        let kind = display::line(kind, display::MAX_FIELD_NAME).into_owned();
        Entry {
            ts: ts.clone(),
            direction,
            from,
            to,
            method: format!("a2acp.{kind}"),
            kind,
            id: Some(display::line(id, display::MAX_SHORT).into_owned()),
            summary: String::new(),
            channel: channel_of(me, peer),
            thread: thread.clone(),
            transparency_summary: false,
        }
    };
    let mut entry = match &record.event {
        AgentEvent::Sent {
            kind,
            packet_id,
            to,
            ..
        } => packet(ExchangeDirection::Sent, kind, packet_id, to),
        AgentEvent::Received {
            kind,
            packet_id,
            from,
            ..
        } => packet(ExchangeDirection::Received, kind, packet_id, from),
        AgentEvent::Space(SpaceEvent::Sent {
            space_id,
            to,
            packet_id,
            ..
        }) => Entry {
            thread: thread_of(Some(space_id)),
            ..packet(ExchangeDirection::Sent, "space_update", packet_id, to)
        },
        AgentEvent::Space(SpaceEvent::Received {
            space_id,
            from,
            packet_id,
            ..
        }) => Entry {
            thread: thread_of(Some(space_id)),
            ..packet(ExchangeDirection::Received, "space_update", packet_id, from)
        },
        AgentEvent::Exchanged(x) => {
            let peer = Party {
                agent: display::line(&x.peer_agent, display::MAX_SHORT).into_owned(),
                principal: display::line(&x.peer_principal, display::MAX_SHORT).into_owned(),
            };
            let (from, to) = match x.direction {
                ExchangeDirection::Sent => (mine.clone(), peer),
                ExchangeDirection::Received => (peer, mine.clone()),
            };
            Entry {
                ts,
                direction: x.direction,
                from,
                to,
                kind: display::line(&x.kind, display::MAX_FIELD_NAME).into_owned(),
                method: display::line(&x.method, display::MAX_FIELD_NAME).into_owned(),
                id: x
                    .id
                    .as_deref()
                    .map(|i| display::line(i, display::MAX_SHORT).into_owned()),
                summary: String::new(),
                channel: display::line(&x.channel, display::MAX_SHORT).into_owned(),
                thread,
                transparency_summary: false,
            }
        }
        AgentEvent::Dropped { drop, .. } => {
            let peer = refused_sender(drop)?;
            Entry {
                kind: "refused".into(),
                method: "a2acp.envelope".into(),
                id: None,
                ..packet(ExchangeDirection::Received, "refused", "", peer)
            }
        }
        _ => return None,
    };
    entry.summary = summary_of(&record.event, &entry);
    Some(entry)
}

/// The sender of a refused envelope, when the refusal names one.
fn refused_sender(drop: &DropReason) -> Option<&Address> {
    match drop {
        DropReason::Blocked { peer }
        | DropReason::BadSignature { peer }
        | DropReason::RetiredKey { peer }
        | DropReason::BadKey { peer, .. }
        | DropReason::Refused { peer, .. }
        | DropReason::UnknownThread { peer }
        | DropReason::Malformed { peer, .. } => Some(peer),
        DropReason::NotForThisAgent { .. } | DropReason::OwnName | DropReason::Duplicate { .. } => {
            None
        }
    }
}

/// Replaces every occurrence of a value of `secrets` in the entry's strings with
/// `[never_share]`: the last lock before a line is written (summaries are built without
/// values; a field name, a thread id or an id a peer chose could still spell one).
/// Whether anything was replaced.
pub fn scrub(entry: &mut Entry, secrets: &[String]) -> bool {
    let mut hit = false;
    let mut fix = |s: &mut String| hit |= scrub_text(s, secrets);
    fix(&mut entry.from.agent);
    fix(&mut entry.from.principal);
    fix(&mut entry.to.agent);
    fix(&mut entry.to.principal);
    fix(&mut entry.kind);
    fix(&mut entry.method);
    fix(&mut entry.summary);
    fix(&mut entry.channel);
    if let Some(id) = entry.id.as_mut() {
        fix(id);
    }
    if let Some(t) = entry.thread.as_mut() {
        fix(t);
    }
    hit
}

/// Replaces every occurrence of a value of `secrets` in `s` with `[never_share]`;
/// whether anything was replaced.
pub fn scrub_text(s: &mut String, secrets: &[String]) -> bool {
    let mut hit = false;
    for secret in secrets {
        if !secret.is_empty() && s.contains(secret.as_str()) {
            *s = s.replace(secret.as_str(), "[never_share]");
            hit = true;
        }
    }
    hit
}

/// The fields a record names, for the summary.
pub(crate) fn fields_of(event: &AgentEvent) -> Option<&FieldsNamed> {
    match event {
        AgentEvent::Sent { fields, .. } | AgentEvent::Received { fields, .. } => Some(fields),
        AgentEvent::Exchanged(x) => Some(&x.fields),
        _ => None,
    }
}

/// The month file an entry at `ts` (RFC 3339) belongs to: `YYYY-MM`.
pub fn month_of(ts: &str) -> Option<&str> {
    let m = ts.get(..7)?;
    let b = m.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    (digits(0..4) && b.get(4) == Some(&b'-') && digits(5..7)).then_some(m)
}

#[cfg(test)]
mod tests;
