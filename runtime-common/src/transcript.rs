//! Readable transcript lines for what an agent does (the demo prints them as they
//! happen; `agent run` logs them): `>` sent, `<` received, `|` state change or local event.

use a2acp_core::agent::{Agent, PromptKind};
use a2acp_core::Address;

use crate::agent_host::Effect;

fn short(addr: &str) -> String {
    Address::parse(addr)
        .map(|a| a.user().to_string())
        .unwrap_or_else(|_| addr.to_string())
}

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
        Effect::Audit(a) => {
            let ev = a.event.as_str();
            if let Some(rest) = ev.strip_prefix("sent ") {
                let w: Vec<&str> = rest.split_whitespace().collect();
                if w.len() >= 4 {
                    let body = agent
                        .threads()
                        .values()
                        .flat_map(|t| t.history.iter())
                        .find(|h| h.packet_id == w[1])
                        .map(|h| a2acp_core::transcript::summarize_packet(&h.json))
                        .unwrap_or_default();
                    return Some(('>', format!("{} {} to {}{body}", w[0], w[1], short(w[3]))));
                }
            }
            if let Some(rest) = ev.strip_prefix("received ") {
                let w: Vec<&str> = rest.split_whitespace().collect();
                if w.len() >= 4 {
                    return Some(('<', format!("{} {} from {}", w[0], w[1], short(w[3]))));
                }
            }
            ('|', ev.to_string())
        }
    })
}
