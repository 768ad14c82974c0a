//! The transcript of a run, in the format of `a2acp_core::harness` (with its vocabulary, `a2acp_core::transcript`): a legend line, a
//! sim-time column, who, `>` sent / `<` received / `|` state change or local event, and
//! random ids (`thr_…`, `pkt_…`) replaced by stable names in order of first appearance.

use std::fmt::Write as _;

use a2acp_core::agent::{
    Command, ConsentAnswer, FieldChoice, Prompt, PromptKind, ResolutionAnswer,
};
use a2acp_core::Timestamp;
use serde_json::Value;

/// What a line is about, for the sequence diagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// Plain text.
    Note,
    /// An agent sent a packet.
    Sent {
        /// Packet id.
        pid: String,
        /// Packet type.
        kind: String,
        /// The recipient's name.
        peer: String,
    },
    /// An agent's logic received a packet.
    Received {
        /// Packet id.
        pid: String,
        /// Packet type.
        kind: String,
        /// The sender's name.
        peer: String,
    },
    /// The relay accepted a packet.
    Queued {
        /// Packet id, when known.
        pid: Option<String>,
        /// Sender name.
        from: String,
        /// Recipient name.
        to: String,
    },
    /// A thread changed state.
    State,
    /// A fault was injected.
    Fault,
    /// A user acted or was asked.
    User,
}

/// One transcript line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// When (simulation time).
    pub at: Timestamp,
    /// Who: an agent's name, `relay`, or `net`.
    pub who: String,
    /// `>` sent, `<` received, `|` state change or local event.
    pub mark: char,
    /// What.
    pub text: String,
    /// Structure for the diagram.
    pub tag: Tag,
}

/// Renders lines (all, or one participant's) with the legend.
pub fn render(lines: &[Line], start: Timestamp, who: Option<&str>) -> String {
    render_with(lines, start, who, &mut IdNames::default())
}

/// [`render`] with a given id scrubber (to scrub later text with the same names).
pub fn render_with(
    lines: &[Line],
    start: Timestamp,
    who: Option<&str>,
    names: &mut IdNames,
) -> String {
    let mut out = String::from(
        "# time since start | who | > sent, < received, | state change or local event\n",
    );
    let width = lines.iter().map(|l| l.who.len()).max().unwrap_or(5).max(5);
    for l in lines {
        if who.is_some_and(|w| w != l.who) {
            continue;
        }
        let t = l.at.since(start);
        let _ = writeln!(
            out,
            "{:>8}.{:03}s {:<width$} {} {}",
            t.as_secs(),
            t.subsec_millis(),
            l.who,
            l.mark,
            names.scrub(&l.text),
        );
    }
    out
}

pub use a2acp_core::transcript::{compact, describe_relay_event, short, IdNames};

/// A prompt as the user sees it.
pub fn describe_prompt(p: &Prompt) -> String {
    match &p.kind {
        PromptKind::Consent { fields } => {
            let f: Vec<String> = fields
                .iter()
                .map(|f| {
                    let pr = serde_json::to_value(f.priority)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default();
                    format!(
                        "{} ({pr}, suggested {})",
                        f.field,
                        f.suggested
                            .as_ref()
                            .map(compact)
                            .unwrap_or_else(|| "none".into())
                    )
                })
                .collect();
            format!(
                "prompt #{} consent for {}: {}",
                p.id,
                short(p.peer.as_str()),
                f.join("; ")
            )
        }
        PromptKind::Resolution {
            proposal,
            proposer,
            reminder,
            ..
        } => format!(
            "prompt #{} {}resolution from {}: “{}”",
            p.id,
            if *reminder { "(reminder) " } else { "" },
            short(proposer.as_str()),
            proposal.summary
        ),
    }
}

/// A user command in words.
pub fn describe_command(c: &Command) -> String {
    match c {
        Command::StartThread { to, intent, .. } => format!(
            "start thread with {} about “{}”",
            short(to.as_str()),
            intent.summary
        ),
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
                format!("answers prompt #{prompt_id}: {}", parts.join(", "))
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
        Command::UpdateContext { thread_id, context } => {
            format!(
                "adds context to {thread_id}: {}",
                compact(&Value::Object(context.clone()))
            )
        }
        Command::UpdateIntent {
            thread_id, intent, ..
        } => format!("changes the intent of {thread_id} to “{}”", intent.summary),
        Command::CancelThread { thread_id } => format!("cancels {thread_id}"),
        Command::AcceptKeyChange { address } => {
            format!(
                "checked and accepts the new key of {}",
                short(address.as_str())
            )
        }
        Command::Block(a) => format!("blocks {}", short(a.as_str())),
        other => format!("{other:?}").chars().take(120).collect(),
    }
}
