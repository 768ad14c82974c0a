//! The terminal's prompt flow: keys in, lines to print and commands for the agent out.

use std::collections::{BTreeMap, VecDeque};

use a2acp_core::agent::{
    Command, ConsentAnswer, FieldChoice, Prompt, PromptKind, ResolutionAnswer, Suggestion,
};
use serde_json::Value;

use super::text::*;
use super::OpenPrompts;
use crate::control::GroupRef;

/// A key the terminal read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A printable character.
    Char(char),
    /// Enter.
    Enter,
    /// Backspace.
    Backspace,
    /// Escape: back to the prompt's first question.
    Esc,
}

/// What the terminal should do after a key or a prompt change.
#[derive(Debug, Clone, PartialEq)]
pub enum UiOut {
    /// Print these lines.
    Print(String),
    /// Echo typed text (no newline).
    Echo(String),
    /// Give this command to the agent.
    Answer(Command),
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Top,
    Field {
        idx: usize,
        choices: BTreeMap<String, FieldChoice>,
    },
    Value {
        idx: usize,
        choices: BTreeMap<String, FieldChoice>,
        buf: String,
    },
    Excuse {
        buf: String,
    },
}

/// The terminal's prompt flow: one prompt at a time, the others queued.
///
/// It reads the prompts from the host's [`OpenPrompts`] (passed to each call) and keeps
/// only their ids, in the order it announced them, the first one on screen.
#[derive(Debug, Default)]
pub struct PromptUi {
    queue: VecDeque<u64>,
    step: Option<Step>,
    /// §7.2 suggestions with their text, shown one at a time when no prompt is open.
    suggestions: VecDeque<(Suggestion, String)>,
    /// The group each queued prompt is about, if any ([`PromptUi::show_in`]).
    groups: BTreeMap<u64, GroupRef>,
}

impl PromptUi {
    /// An empty flow.
    pub fn new() -> Self {
        Self::default()
    }

    /// The ids of the prompts announced, the one shown first.
    pub fn queued(&self) -> impl Iterator<Item = u64> + '_ {
        self.queue.iter().copied()
    }

    /// The host opened prompt `p` (or updated the one with its id).
    pub fn show(&mut self, p: &Prompt) -> Vec<UiOut> {
        self.show_in(p, None)
    }

    /// [`PromptUi::show`] for a prompt about a group thread: it is shown (now and when
    /// its turn comes) with [`render_in`].
    pub fn show_in(&mut self, p: &Prompt, group: Option<GroupRef>) -> Vec<UiOut> {
        match group {
            Some(g) => {
                self.groups.insert(p.id, g);
            }
            None => {
                self.groups.remove(&p.id);
            }
        }
        let g = self.groups.get(&p.id);
        if let Some(i) = self.queue.iter().position(|&q| q == p.id) {
            if i == 0 {
                self.step = Some(Step::Top);
                return vec![UiOut::Print(render_in(p, g))];
            }
            return Vec::new();
        }
        self.queue.push_back(p.id);
        if self.queue.len() == 1 {
            self.step = Some(Step::Top);
            vec![UiOut::Print(render_in(p, g))]
        } else {
            vec![UiOut::Print(format!(
                "   (prompt #{} waits: {})",
                p.id,
                summary_in(p, g)
            ))]
        }
    }

    /// A prompt was withdrawn or answered elsewhere.
    pub fn close(&mut self, id: u64, open: &OpenPrompts) -> Vec<UiOut> {
        let Some(i) = self.queue.iter().position(|&q| q == id) else {
            return Vec::new();
        };
        self.queue.remove(i);
        self.groups.remove(&id);
        let mut out = vec![UiOut::Print(format!("   (prompt #{id} closed)"))];
        if i == 0 {
            out.extend(self.next(open));
        }
        out
    }

    /// Closes the prompts announced here that the host no longer has open (answered
    /// through the control socket).
    pub fn closed_elsewhere(&mut self, open: &OpenPrompts) -> Vec<UiOut> {
        let gone: Vec<u64> = self
            .queue
            .iter()
            .copied()
            .filter(|id| !open.contains_key(id))
            .collect();
        let mut out = Vec::new();
        for id in gone {
            out.extend(self.close(id, open));
        }
        out
    }

    /// Shows the first prompt of the queue (read from the host's open prompts), or else
    /// the first suggestion.
    fn next(&mut self, open: &OpenPrompts) -> Vec<UiOut> {
        match self.queue.front() {
            Some(id) => {
                self.step = Some(Step::Top);
                // One the host closed in the same batch is closed here next.
                open.get(id)
                    .map(|p| vec![UiOut::Print(render_in(p, self.groups.get(id)))])
                    .unwrap_or_default()
            }
            None => {
                self.step = None;
                match self.suggestions.front() {
                    Some((s, text)) => vec![UiOut::Print(render_suggestion(s, text))],
                    None => Vec::new(),
                }
            }
        }
    }

    /// A §7.2 suggestion to offer with one key (after the open prompts).
    pub fn suggest(&mut self, s: Suggestion, text: String) -> Vec<UiOut> {
        if self.suggestions.iter().any(|(x, _)| x.id() == s.id()) {
            return Vec::new();
        }
        self.suggestions.push_back((s, text));
        if self.queue.is_empty() && self.suggestions.len() == 1 {
            let (s, text) = &self.suggestions[0];
            vec![UiOut::Print(render_suggestion(s, text))]
        } else {
            Vec::new()
        }
    }

    /// Keeps only the suggestions `keep` accepts (the others were accepted elsewhere);
    /// the next one is shown if the one on screen went.
    pub fn retain_suggestions(
        &mut self,
        keep: impl Fn(u64) -> bool,
        open: &OpenPrompts,
    ) -> Vec<UiOut> {
        let front = self.suggestions.front().map(|(s, _)| s.id());
        self.suggestions.retain(|(s, _)| keep(s.id()));
        if self.queue.is_empty()
            && front.is_some()
            && front != self.suggestions.front().map(|(s, _)| s.id())
        {
            return self.next(open);
        }
        Vec::new()
    }

    /// The suggestion on screen answered with `key`.
    fn suggestion_key(&mut self, key: Key, open: &OpenPrompts) -> Vec<UiOut> {
        let Some((s, _)) = self.suggestions.front().cloned() else {
            return Vec::new();
        };
        let mut out = match key {
            Key::Char('y') => vec![
                UiOut::Print(format!("   → suggestion #{} accepted", s.id())),
                UiOut::Answer(s.accept()),
            ],
            Key::Char('d') => vec![
                UiOut::Print(format!("   → suggestion #{} dismissed", s.id())),
                UiOut::Answer(s.dismiss()),
            ],
            Key::Char('n') | Key::Esc => vec![UiOut::Print(format!(
                "   → not now (a2acp suggestions accept {} does it later)",
                s.id()
            ))],
            _ => return vec![UiOut::Print(format!("   {SUGGESTION_KEYS}"))],
        };
        self.suggestions.pop_front();
        out.extend(self.next(open));
        out
    }

    /// The prompt on screen is answered with `cmd`; the next one is shown (the host
    /// closes the answered one when it handles `cmd`).
    fn finish(&mut self, cmd: Command, what: String, open: &OpenPrompts) -> Vec<UiOut> {
        if let Some(id) = self.queue.pop_front() {
            self.groups.remove(&id);
        }
        let mut out = vec![UiOut::Print(format!("   → {what}")), UiOut::Answer(cmd)];
        out.extend(self.next(open));
        out
    }

    /// A key was pressed; `open`: the host's open prompts.
    pub fn key(&mut self, key: Key, open: &OpenPrompts) -> Vec<UiOut> {
        let Some(id) = self.queue.front() else {
            return self.suggestion_key(key, open);
        };
        // The prompt on screen, as the host has it.
        let Some(p) = open.get(id).cloned() else {
            return Vec::new();
        };
        let Some(step) = self.step.take() else {
            return Vec::new();
        };
        let id = p.id;
        match (&p.kind, step) {
            (_, _) if key == Key::Esc => self.next(open),
            (PromptKind::Resolution { .. }, Step::Top) => {
                let answer = match key {
                    Key::Char('c') => ResolutionAnswer::Confirm,
                    Key::Char('t') => ResolutionAnswer::DifferentTime,
                    Key::Char('p') => ResolutionAnswer::DifferentPlace,
                    Key::Char('x') => ResolutionAnswer::Decline,
                    Key::Char(d @ '1'..='9') if (d as usize - '0' as usize) <= alternatives(&p) => {
                        ResolutionAnswer::Alternative(d as usize - '1' as usize)
                    }
                    Key::Char('e') => {
                        self.step = Some(Step::Excuse { buf: String::new() });
                        return vec![UiOut::Print(
                            "   The real reason, kept on this device only (Enter to skip):".into(),
                        )];
                    }
                    _ => {
                        self.step = Some(Step::Top);
                        return vec![UiOut::Print(format!(
                            "   {}",
                            resolution_keys(alternatives(&p))
                        ))];
                    }
                };
                let what = match answer {
                    ResolutionAnswer::Alternative(i) => format!("alternative {}", i + 1),
                    ref other => format!("{other:?}").to_lowercase(),
                };
                self.finish(
                    Command::AnswerResolution {
                        prompt_id: id,
                        answer,
                    },
                    what,
                    open,
                )
            }
            (PromptKind::Resolution { .. }, Step::Excuse { mut buf }) => match key {
                Key::Enter => {
                    let actual_reason = (!buf.trim().is_empty()).then(|| buf.trim().to_string());
                    self.finish(
                        Command::AnswerResolution {
                            prompt_id: id,
                            answer: ResolutionAnswer::MakeExcuse { actual_reason },
                        },
                        "a polite excuse is sent; your reason stays here".into(),
                        open,
                    )
                }
                other => {
                    let echo = edit(&mut buf, other);
                    self.step = Some(Step::Excuse { buf });
                    echo
                }
            },
            (PromptKind::Consent { fields }, Step::Top) => match key {
                Key::Char('a') if fields.iter().any(|f| f.suggested.is_none()) => {
                    // Sharing a field without a value would decline it without a word.
                    self.step = Some(Step::Top);
                    let missing: Vec<String> = fields
                        .iter()
                        .filter(|f| f.suggested.is_none())
                        .map(|f| shown(&f.field).into_owned())
                        .collect();
                    vec![UiOut::Print(format!(
                        "   no value known for {}: [c] choose field by field ([o] gives a value)   [d] Decline all",
                        missing.join(", ")
                    ))]
                }
                Key::Char('a') => {
                    let m = fields
                        .iter()
                        .map(|f| (f.field.clone(), FieldChoice::Share))
                        .collect();
                    self.finish(
                        Command::AnswerConsent {
                            prompt_id: id,
                            answer: ConsentAnswer::ShareSelected(m),
                        },
                        "share all".into(),
                        open,
                    )
                }
                Key::Char('d') => self.finish(
                    Command::AnswerConsent {
                        prompt_id: id,
                        answer: ConsentAnswer::DeclineAll,
                    },
                    "decline all".into(),
                    open,
                ),
                Key::Char('c') if !fields.is_empty() => {
                    self.step = Some(Step::Field {
                        idx: 0,
                        choices: BTreeMap::new(),
                    });
                    vec![UiOut::Print(field_question(&p, 0))]
                }
                _ => {
                    self.step = Some(Step::Top);
                    vec![UiOut::Print(format!("   {CONSENT_KEYS}"))]
                }
            },
            (PromptKind::Consent { fields }, Step::Field { idx, mut choices }) => {
                let name = fields[idx].field.clone();
                let choice = match key {
                    Key::Char('s') if fields[idx].suggested.is_none() => {
                        self.step = Some(Step::Field { idx, choices });
                        return vec![UiOut::Print(
                            "   no value known: [o] give one   [n] don't share".into(),
                        )];
                    }
                    Key::Char('s') => FieldChoice::Share,
                    Key::Char('n') => FieldChoice::DontShare,
                    Key::Char('o') => {
                        self.step = Some(Step::Value {
                            idx,
                            choices,
                            buf: String::new(),
                        });
                        return vec![UiOut::Print(format!(
                            "   Value to share as {name} (Enter when done):"
                        ))];
                    }
                    _ => {
                        self.step = Some(Step::Field { idx, choices });
                        return vec![UiOut::Print(format!("   {FIELD_KEYS}"))];
                    }
                };
                choices.insert(name, choice);
                self.after_field(&p, idx, choices, open)
            }
            (
                PromptKind::Consent { fields },
                Step::Value {
                    idx,
                    mut choices,
                    mut buf,
                },
            ) => match key {
                Key::Enter => {
                    let v = serde_json::from_str(buf.trim())
                        .unwrap_or_else(|_| Value::String(buf.trim().to_string()));
                    choices.insert(fields[idx].field.clone(), FieldChoice::ShareValue(v));
                    self.after_field(&p, idx, choices, open)
                }
                other => {
                    let echo = edit(&mut buf, other);
                    self.step = Some(Step::Value { idx, choices, buf });
                    echo
                }
            },
            (_, step) => {
                self.step = Some(step);
                Vec::new()
            }
        }
    }

    fn after_field(
        &mut self,
        p: &Prompt,
        idx: usize,
        choices: BTreeMap<String, FieldChoice>,
        open: &OpenPrompts,
    ) -> Vec<UiOut> {
        let PromptKind::Consent { fields } = &p.kind else {
            return Vec::new();
        };
        if idx + 1 < fields.len() {
            self.step = Some(Step::Field {
                idx: idx + 1,
                choices,
            });
            return vec![UiOut::Print(field_question(p, idx + 1))];
        }
        let what = choices
            .iter()
            .map(|(k, v)| match v {
                FieldChoice::Share => format!("share {k}"),
                FieldChoice::ShareValue(x) => format!("share {k}={}", compact(x)),
                FieldChoice::DontShare => format!("don't share {k}"),
            })
            .collect::<Vec<_>>()
            .join(", ");
        self.finish(
            Command::AnswerConsent {
                prompt_id: p.id,
                answer: ConsentAnswer::ShareSelected(choices),
            },
            what,
            open,
        )
    }
}

fn field_question(p: &Prompt, idx: usize) -> String {
    let PromptKind::Consent { fields } = &p.kind else {
        return String::new();
    };
    let f = &fields[idx];
    let v = f
        .suggested
        .as_ref()
        .map(compact)
        .unwrap_or_else(|| "(no value known)".into());
    format!("   {}. {} = {v}?  {FIELD_KEYS}", idx + 1, f.field)
}

fn edit(buf: &mut String, key: Key) -> Vec<UiOut> {
    match key {
        Key::Char(c) => {
            buf.push(c);
            vec![UiOut::Echo(c.to_string())]
        }
        Key::Backspace => {
            if buf.pop().is_some() {
                vec![UiOut::Echo("\u{8} \u{8}".into())]
            } else {
                Vec::new()
            }
        }
        _ => Vec::new(),
    }
}
