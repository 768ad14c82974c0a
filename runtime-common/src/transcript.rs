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
        Effect::Send(_) | Effect::CloseConnection | Effect::Bridged(_) => return None,
        Effect::Prompt(p) => {
            // A group thread (§10): the coordinator's prompt for the group's proposal,
            // or a prompt on a leg.
            let mine = agent.groups().get(&p.thread_id);
            let leg = agent
                .thread(&p.thread_id)
                .and_then(|t| t.group.as_ref())
                .map(|l| format!(" (group of {})", l.header.participants.len()))
                .unwrap_or_default();
            (
                '|',
                match (&p.kind, mine) {
                    (PromptKind::Consent { fields }, _) => format!(
                        "prompt #{} consent: {} asks for {}{leg}",
                        p.id,
                        short(p.peer.as_str()),
                        fields
                            .iter()
                            .map(|f| f.field.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    (
                        PromptKind::Resolution {
                            proposal, reminder, ..
                        },
                        Some(g),
                    ) => format!(
                        "prompt #{} {}group proposal to {}: “{}”",
                        p.id,
                        if *reminder { "(reminder) " } else { "" },
                        g.legs
                            .keys()
                            .map(|a| short(a.as_str()))
                            .collect::<Vec<_>>()
                            .join(", "),
                        proposal.summary
                    ),
                    (
                        PromptKind::Resolution {
                            proposal, reminder, ..
                        },
                        None,
                    ) => format!(
                        "prompt #{} {}resolution{leg}: “{}”",
                        p.id,
                        if *reminder { "(reminder) " } else { "" },
                        proposal.summary
                    ),
                },
            )
        }
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
                match (a.undo, a.check) {
                    (true, _) => "undo",
                    (false, true) => "check",
                    (false, false) => "execute",
                },
                a.action.action
            ),
        ),
        Effect::Audit(a) => describe_event(agent, a.thread_id.as_deref(), &a.event),
    })
}
