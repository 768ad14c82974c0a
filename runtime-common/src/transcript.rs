//! Readable transcript lines for what an agent does (the demo prints them as they
//! happen; `agent run` logs them): `>` sent, `<` received, `|` state change or local event.
//! What the agent did comes from its typed events, in the words of the shared renderer
//! ([`a2acp_core::transcript`]).

use a2acp_core::agent::{Agent, PromptKind};
use a2acp_core::transcript::{describe_event, short};

use crate::agent_host::Effect;

/// A transcript line for `e`, or `None` for effects not worth a line (raw frames). The
/// line is one line of text cleaned of control, escape and invisible characters
/// ([`a2acp_core::display`]): it goes to a terminal or a log.
pub fn describe(agent: &Agent, e: &Effect) -> Option<(char, String)> {
    let (mark, text) = describe_raw(agent, e)?;
    let text = match a2acp_core::display::line(&text, usize::MAX) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(s) => s,
    };
    Some((mark, text))
}

fn describe_raw(agent: &Agent, e: &Effect) -> Option<(char, String)> {
    Some(match e {
        Effect::Send(_) | Effect::CloseConnection => return None,
        Effect::Prompt(p) => (
            '|',
            match &p.kind {
                PromptKind::Consent { fields } => format!(
                    "prompt #{} consent: {} asks for {}",
                    p.id,
                    short(p.peer.as_str()),
                    fields
                        .iter()
                        .map(|f| f.field.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                PromptKind::Resolution {
                    proposal, reminder, ..
                } => format!(
                    "prompt #{} {}resolution: “{}”",
                    p.id,
                    if *reminder { "(reminder) " } else { "" },
                    proposal.summary
                ),
            },
        ),
        Effect::ClosePrompt(id) => ('|', format!("prompt #{id} withdrawn")),
        Effect::Notify(n) => (
            '|',
            format!(
                "notify ({}): {}",
                serde_json::to_value(n.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                n.text
            ),
        ),
        Effect::Action(a) => (
            '|',
            format!(
                "{} action {} (recorded; no external service is wired in)",
                if a.undo { "undo" } else { "execute" },
                a.action.action
            ),
        ),
        Effect::Audit(a) => describe_event(agent, a.thread_id.as_deref(), &a.event),
    })
}
