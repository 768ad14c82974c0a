//! What the user sees and types: the batched consent prompt of §7.3 and the resolution
//! prompt of §8.2, one keystroke per choice, and the arguments of `a2acp answer`.
//!
//! [`render`] gives a prompt's text. [`PromptUi`] is the keyboard flow of a terminal: it is
//! fed keys and tells what to print and which [`Command`] to hand the agent; prompts queue
//! up and are shown one at a time while the agent goes on with every other thread. The
//! open prompts themselves are the agent host's ([`crate::agent_host::AgentHost::prompts`]):
//! the flow reads them from there and keeps only the order it showed them in and how far
//! the answer to the one on screen has come.
//!
//! Keys — consent: `a` share all, `d` decline all, `c` choose field by field (then per
//! field `s` share, `n` don't share, `o` other value…). Resolution: `c` confirm, `t`
//! different time, `p` different place, `e` can't make it — make an excuse for me, `x`
//! decline, `1`…`9` choose that alternative. A §7.2 suggestion, shown when no prompt is
//! open: `y` accept, `n` not now.

use std::collections::{BTreeMap, VecDeque};

/// The open prompts by id, as the agent host keeps them
/// ([`crate::agent_host::AgentHost::prompts`]).
pub type OpenPrompts = BTreeMap<u64, Prompt>;

use a2acp_core::agent::{
    Command, ConsentAnswer, FieldChoice, Prompt, PromptKind, ResolutionAnswer, Suggestion,
};
use a2acp_core::display;
use serde_json::Value;

use crate::control::GroupRef;

/// The keys of a consent prompt, as shown.
pub const CONSENT_KEYS: &str = "[a] Share all   [d] Decline all   [c] Choose field by field";
/// The keys of one field in field-by-field mode.
pub const FIELD_KEYS: &str = "[s] Share   [n] Don't share   [o] Other value…";
/// The keys of a resolution prompt, as shown.
pub const RESOLUTION_KEYS: &str =
    "[c] Confirm   [t] Different time   [p] Different place   [e] Can't make it — make an excuse for me   [x] Decline";
/// The keys of a §7.2 suggestion, as shown.
pub const SUGGESTION_KEYS: &str = "[y] Yes, always   [n] Not now   [d] Don't ask again";
/// Most alternatives offered with a key (`1`…`9`).
const MAX_ALTERNATIVE_KEYS: usize = 9;

/// The keys of a resolution prompt with `n` alternatives.
fn resolution_keys(n: usize) -> String {
    match n.min(MAX_ALTERNATIVE_KEYS) {
        0 => RESOLUTION_KEYS.to_string(),
        1 => format!("{RESOLUTION_KEYS}   [1] Take the alternative"),
        n => format!("{RESOLUTION_KEYS}   [1–{n}] Take that alternative"),
    }
}

/// The alternatives of a resolution prompt that can be chosen.
fn alternatives(p: &Prompt) -> usize {
    match &p.kind {
        PromptKind::Resolution { proposal, .. } => {
            proposal.alternatives.len().min(MAX_ALTERNATIVE_KEYS)
        }
        PromptKind::Consent { .. } => 0,
    }
}

/// The text of a §7.2 suggestion with its keys (several lines).
pub fn render_suggestion(s: &Suggestion, text: &str) -> String {
    let t = format!(
        "── Suggestion #{} · {}\n   {SUGGESTION_KEYS}   (later: a2acp suggestions accept {})",
        s.id(),
        shown(text),
        s.id()
    );
    display::lines(&t, usize::MAX).into_owned()
}

fn compact(v: &Value) -> String {
    let s = match v {
        Value::String(s) => format!("\"{s}\""),
        other => serde_json::to_string(other).unwrap_or_default(),
    };
    shown(&s).into_owned()
}

/// A string of a prompt as the terminal shows it: one clean line, bounded. The core
/// already cleans what a peer wrote ([`a2acp_core::display`]); a prompt from elsewhere
/// (an older core, a test) is cleaned here too.
fn shown(s: &str) -> std::borrow::Cow<'_, str> {
    display::line(s, display::MAX_LONG)
}

fn priority(p: a2acp_core::packet::Priority) -> &'static str {
    use a2acp_core::packet::Priority as P;
    match p {
        P::Required => "required",
        P::Helpful => "helpful",
        P::NiceToHave => "nice to have",
    }
}

/// The text of a prompt, keys included (several lines, no trailing newline). Every
/// string in it is shown cleaned of control, escape and invisible characters.
pub fn render(p: &Prompt) -> String {
    render_in(p, None)
}

/// [`render`] for a prompt about a group thread (§10): `group` is the group it concerns
/// ([`crate::agent_host::AgentHost::prompt_group`]) — the coordinator's one prompt for
/// the group's proposal, or a prompt on a leg — and the text says so.
pub fn render_in(p: &Prompt, group: Option<&GroupRef>) -> String {
    let s = render_raw(p, group);
    display::lines(&s, usize::MAX).into_owned()
}

/// Who is asked: the coordinator's own prompt for its group (its `thread_id` is the
/// group's id), a participant's prompt on its leg (the peer coordinates), or the
/// coordinator's prompt on one leg (the peer is a participant).
enum Asker<'a> {
    Thread,
    GroupProposal(&'a GroupRef),
    FromCoordinator(&'a GroupRef),
    OnLeg(&'a GroupRef),
}

fn asker<'a>(p: &Prompt, group: Option<&'a GroupRef>) -> Asker<'a> {
    match group {
        None => Asker::Thread,
        Some(g) if g.group_id == p.thread_id => Asker::GroupProposal(g),
        Some(g) if g.coordinator == p.peer.to_string() => Asker::FromCoordinator(g),
        Some(g) => Asker::OnLeg(g),
    }
}

/// Everyone of a group by user name, the coordinator first (`alice, bob, charlie`).
fn everyone(g: &GroupRef) -> String {
    g.others("")
}

fn render_raw(p: &Prompt, group: Option<&GroupRef>) -> String {
    let who = p.peer.user();
    let asker = asker(p, group);
    match &p.kind {
        PromptKind::Consent { fields } => {
            let whose = match asker {
                Asker::Thread => format!("thread {}", p.thread_id),
                Asker::GroupProposal(g) => format!("group {}", g.group_id),
                Asker::FromCoordinator(g) => format!(
                    "thread {} — {who} coordinates this group thread of {} ({}); what you share goes to {who}'s agent only",
                    p.thread_id,
                    g.participants.len(),
                    everyone(g)
                ),
                Asker::OnLeg(g) => format!(
                    "thread {}, a leg of your group thread {}",
                    p.thread_id, g.group_id
                ),
            };
            let mut s = format!(
                "── Prompt #{} · {}'s agent is asking for ({}: “{}”, {whose}):",
                p.id,
                who,
                shown(&p.intent.category),
                shown(&p.intent.summary),
            );
            if let Some(d) = &p.drift {
                // §6.5: the thread's intent changed; what is asked is the expanded scope.
                s += &format!(
                    "\n   The thread changed from “{}” to “{}”: nothing below leaves without your answer.",
                    shown(&d.from.summary),
                    shown(&d.to.summary)
                );
            }
            for (i, f) in fields.iter().enumerate() {
                let value = f
                    .suggested
                    .as_ref()
                    .map(|v| format!("would share {}", compact(v)))
                    .unwrap_or_else(|| "no value known — use “other” to give one".into());
                s += &format!(
                    "\n   {}. {} ({}) — “{}”\n      {}",
                    i + 1,
                    shown(&f.field),
                    priority(f.priority),
                    shown(&f.reason),
                    value
                );
            }
            s += &format!("\n   {CONSENT_KEYS}");
            s
        }
        PromptKind::Resolution {
            proposal,
            proposer,
            deadline,
            reminder,
        } => {
            let by = match asker {
                Asker::GroupProposal(g) => format!(
                    "the group's proposal: your agent proposes to you, {} (group {} of {})",
                    g.others(&g.coordinator),
                    g.group_id,
                    g.participants.len()
                ),
                Asker::FromCoordinator(g) => format!(
                    "{} proposes to the group ({}; thread {})",
                    proposer.user(),
                    everyone(g),
                    p.thread_id
                ),
                Asker::OnLeg(g) => format!(
                    "{} proposes (thread {}, a leg of your group thread {})",
                    proposer.user(),
                    p.thread_id,
                    g.group_id
                ),
                Asker::Thread => format!("{} proposes (thread {})", proposer.user(), p.thread_id),
            };
            let mut s = format!(
                "── Prompt #{} · {}{by}:\n   “{}”",
                p.id,
                if *reminder { "REMINDER · " } else { "" },
                shown(&proposal.summary)
            );
            if !proposal.reasoning.is_empty() {
                s += &format!("\n   why: {}", shown(&proposal.reasoning));
            }
            let n = proposal.alternatives.len().min(MAX_ALTERNATIVE_KEYS);
            for (i, a) in proposal.alternatives.iter().take(n).enumerate() {
                s += &format!("\n   [{}] alternative: {}", i + 1, shown(&a.summary));
                if !a.reason.is_empty() {
                    s += &format!(" — {}", shown(&a.reason));
                }
            }
            s += &format!("\n   answer before {deadline}");
            if let Asker::GroupProposal(_) = asker {
                s += "\n   your answer counts among the group's confirmations; [x] Decline closes the group for everyone";
            }
            s += &format!("\n   {}", resolution_keys(n));
            s
        }
    }
}

/// A one-line summary of a prompt (lists), cleaned like [`render`].
pub fn summary(p: &Prompt) -> String {
    summary_in(p, None)
}

/// [`summary`] for a prompt about a group thread (see [`render_in`]).
pub fn summary_in(p: &Prompt, group: Option<&GroupRef>) -> String {
    let place = match asker(p, group) {
        Asker::Thread => format!("thread {}", p.thread_id),
        Asker::GroupProposal(g) => format!(
            "group {} ({} participants)",
            g.group_id,
            g.participants.len()
        ),
        Asker::FromCoordinator(g) | Asker::OnLeg(g) => {
            format!("thread {} (group {})", p.thread_id, g.group_id)
        }
    };
    let s = match &p.kind {
        PromptKind::Consent { fields } => {
            let f: Vec<&str> = fields.iter().map(|f| f.field.as_str()).collect();
            format!(
                "#{} consent · {} asks for {} · {place}",
                p.id,
                p.peer.user(),
                f.join(", "),
            )
        }
        PromptKind::Resolution { proposal, .. } => format!(
            "#{} {} · “{}” · {place}",
            p.id,
            if matches!(asker(p, group), Asker::GroupProposal(_)) {
                "group proposal"
            } else {
                "resolution"
            },
            shown(&proposal.summary),
        ),
    };
    display::line(&s, usize::MAX).into_owned()
}

/// Parses the arguments of `a2acp answer PROMPT_ID ...` for `prompt`.
///
/// Resolution: `confirm` (`c`), `different-time` (`t`), `different-place` (`p`),
/// `excuse [REASON...]` (`e`; the reason stays on this device), `decline` (`x`),
/// `alternative N` (`alt N`; N from 1, as numbered in the prompt).
/// Consent: `share-all` (`a`), `decline-all` (`d`), or one item per field: `FIELD`
/// (share the suggested value), `FIELD=no` (don't share), `FIELD=VALUE` (share VALUE, JSON
/// or text); fields left out are not shared.
pub fn parse_answer(p: &Prompt, args: &[String]) -> Result<Command, String> {
    let first = args
        .first()
        .map(|s| s.as_str())
        .ok_or_else(|| format!("what is the answer to prompt #{}? {}", p.id, help(p)))?;
    match &p.kind {
        PromptKind::Resolution { .. } => {
            let answer = match first {
                "confirm" | "c" => ResolutionAnswer::Confirm,
                "different-time" | "time" | "t" => ResolutionAnswer::DifferentTime,
                "different-place" | "place" | "p" => ResolutionAnswer::DifferentPlace,
                "excuse" | "e" => {
                    let reason = args[1..].join(" ");
                    ResolutionAnswer::MakeExcuse {
                        actual_reason: (!reason.is_empty()).then_some(reason),
                    }
                }
                "decline" | "x" => ResolutionAnswer::Decline,
                "alternative" | "alt" => {
                    let n = alternatives(p);
                    let pick = args
                        .get(1)
                        .and_then(|a| a.parse::<usize>().ok())
                        .filter(|i| (1..=n).contains(i));
                    match (n, pick) {
                        (0, _) => return Err(format!("prompt #{} offers no alternative", p.id)),
                        (_, Some(i)) if args.len() == 2 => ResolutionAnswer::Alternative(i - 1),
                        _ => {
                            return Err(format!(
                                "which alternative? prompt #{} offers {}: `alternative 1`{}",
                                p.id,
                                n,
                                if n > 1 {
                                    format!(" … `alternative {n}`")
                                } else {
                                    String::new()
                                }
                            ))
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "`{other}` is not an answer to prompt #{}: {}",
                        p.id,
                        help(p)
                    ))
                }
            };
            if !matches!(
                answer,
                ResolutionAnswer::MakeExcuse { .. } | ResolutionAnswer::Alternative(_)
            ) && args.len() > 1
            {
                return Err(format!("one answer only: {}", help(p)));
            }
            Ok(Command::AnswerResolution {
                prompt_id: p.id,
                answer,
            })
        }
        PromptKind::Consent { fields } => {
            let answer = match first {
                "share-all" | "a" if args.len() == 1 => {
                    let missing: Vec<&str> = fields
                        .iter()
                        .filter(|f| f.suggested.is_none())
                        .map(|f| f.field.as_str())
                        .collect();
                    if let Some(first) = missing.first() {
                        return Err(format!(
                            "prompt #{}: your agent has no value for {} to share; answer field by field, giving each a value or declining it, e.g. `a2acp answer {} {first}=VALUE` or `{first}=no`",
                            p.id,
                            missing.join(", "),
                            p.id
                        ));
                    }
                    ConsentAnswer::ShareSelected(
                        fields
                            .iter()
                            .map(|f| (f.field.clone(), FieldChoice::Share))
                            .collect(),
                    )
                }
                "decline-all" | "d" if args.len() == 1 => ConsentAnswer::DeclineAll,
                _ => {
                    let mut m = BTreeMap::new();
                    for a in args {
                        let (name, choice) = match a.split_once('=') {
                            None => (a.as_str(), FieldChoice::Share),
                            Some((n, "no")) => (n, FieldChoice::DontShare),
                            Some((n, "share")) => (n, FieldChoice::Share),
                            Some((n, v)) => (
                                n,
                                FieldChoice::ShareValue(
                                    serde_json::from_str(v)
                                        .unwrap_or_else(|_| Value::String(v.to_string())),
                                ),
                            ),
                        };
                        let asked = fields.iter().find(|f| f.field == name);
                        if matches!(choice, FieldChoice::Share)
                            && asked.is_some_and(|f| f.suggested.is_none())
                        {
                            return Err(format!(
                                "prompt #{}: your agent has no value for `{name}` to share; give one with `{name}=VALUE` (e.g. `a2acp answer {} {name}=VALUE`) or decline it with `{name}=no`",
                                p.id, p.id
                            ));
                        }
                        if asked.is_none() {
                            let asked: Vec<&str> =
                                fields.iter().map(|f| f.field.as_str()).collect();
                            return Err(format!(
                                "prompt #{} does not ask for `{name}` (it asks for {})",
                                p.id,
                                asked.join(", ")
                            ));
                        }
                        m.insert(name.to_string(), choice);
                    }
                    ConsentAnswer::ShareSelected(m)
                }
            };
            Ok(Command::AnswerConsent {
                prompt_id: p.id,
                answer,
            })
        }
    }
}

/// How to answer `p` with `a2acp answer`.
pub fn help(p: &Prompt) -> String {
    match &p.kind {
        PromptKind::Resolution { .. } => {
            let alt = match alternatives(p) {
                0 => String::new(),
                1 => " | alternative 1".to_string(),
                n => format!(" | alternative 1…{n}"),
            };
            format!("answer with confirm | different-time | different-place | excuse [REASON] | decline{alt}")
        }
        PromptKind::Consent { fields } => {
            let f = fields
                .first()
                .map(|f| shown(&f.field))
                .unwrap_or("FIELD".into());
            format!("answer with share-all | decline-all | FIELD... (e.g. `{f}`, `{f}=no`, `{f}=VALUE`); fields left out are not shared")
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use a2acp_core::agent::ConsentField;
    use a2acp_core::packet::{Intent, Priority, Proposal};
    use a2acp_core::{Address, Timestamp};

    /// The terminal flow beside the host's open prompts, driven as the daemon drives them:
    /// the host opens a prompt before the flow shows it, and closes it when it handles the
    /// answer.
    #[derive(Default)]
    struct Flow {
        open: OpenPrompts,
        ui: PromptUi,
    }

    impl Flow {
        fn show(&mut self, p: Prompt) -> Vec<UiOut> {
            self.open.insert(p.id, p.clone());
            self.ui.show(&p)
        }

        fn key(&mut self, k: Key) -> Vec<UiOut> {
            let out = self.ui.key(k, &self.open);
            for o in &out {
                if let UiOut::Answer(
                    Command::AnswerConsent { prompt_id, .. }
                    | Command::AnswerResolution { prompt_id, .. },
                ) = o
                {
                    self.open.remove(prompt_id);
                }
            }
            out
        }

        fn suggest(&mut self, s: Suggestion, text: String) -> Vec<UiOut> {
            self.ui.suggest(s, text)
        }
    }

    fn consent() -> Prompt {
        Prompt {
            id: 1,
            thread_id: "thr_x".into(),
            peer: Address::parse("agent:bob@localhost").unwrap(),
            intent: Intent {
                category: "scheduling".into(),
                summary: "Dinner".into(),
                urgency: None,
                scope_change: None,
            },
            kind: PromptKind::Consent {
                fields: vec![
                    ConsentField {
                        field: "transport_mode".into(),
                        reason: "distance".into(),
                        priority: Priority::Helpful,
                        suggested: Some("driving".into()),
                    },
                    ConsentField {
                        field: "cuisine_preference".into(),
                        reason: "narrow".into(),
                        priority: Priority::Helpful,
                        suggested: Some("Italian".into()),
                    },
                ],
            },
            drift: None,
        }
    }

    fn resolution() -> Prompt {
        Prompt {
            id: 2,
            kind: PromptKind::Resolution {
                proposal: Proposal {
                    summary: "Dinner 19:00".into(),
                    details: Default::default(),
                    alternatives: vec![],
                    reasoning: String::new(),
                },
                proposer: Address::parse("agent:bob@localhost").unwrap(),
                deadline: Timestamp::from_secs(100),
                reminder: false,
            },
            ..consent()
        }
    }

    /// The three prompts of a group thread say who asks and for whom: the coordinator's
    /// one prompt for the group's proposal, a participant's prompts from the coordinator,
    /// and the coordinator's prompt on one leg; the terminal queue shows them so too.
    #[test]
    fn a_group_prompt_says_who_asks_for_whom() {
        let g = GroupRef {
            group_id: "grp_g".into(),
            coordinator: "agent:alice@localhost".into(),
            participants: ["alice", "bob", "charlie", "diana"]
                .iter()
                .map(|u| format!("agent:{u}@localhost"))
                .collect(),
        };
        let alice = Address::parse("agent:alice@localhost").unwrap();
        // Alice's prompt for the group: its thread is the group, its peer herself.
        let mut mine = resolution();
        mine.thread_id = "grp_g".into();
        mine.peer = alice.clone();
        if let PromptKind::Resolution { proposer, .. } = &mut mine.kind {
            *proposer = alice.clone();
        }
        let r = render_in(&mine, Some(&g));
        assert!(
            r.starts_with("── Prompt #2 · the group's proposal: your agent proposes to you, bob, charlie, diana (group grp_g of 4):\n   “Dinner 19:00”"),
            "{r}"
        );
        assert!(
            r.contains("[x] Decline closes the group for everyone"),
            "{r}"
        );
        assert_eq!(
            summary_in(&mine, Some(&g)),
            "#2 group proposal · “Dinner 19:00” · group grp_g (4 participants)"
        );
        // Bob's prompts on his leg come from Alice, the coordinator.
        let mut asks = consent();
        asks.peer = alice.clone();
        let c = render_in(&asks, Some(&g));
        assert!(
            c.starts_with("── Prompt #1 · alice's agent is asking for (scheduling: “Dinner”, thread thr_x — alice coordinates this group thread of 4 (alice, bob, charlie, diana); what you share goes to alice's agent only):"),
            "{c}"
        );
        let mut proposes = resolution();
        proposes.peer = alice.clone();
        if let PromptKind::Resolution { proposer, .. } = &mut proposes.kind {
            *proposer = alice;
        }
        let r = render_in(&proposes, Some(&g));
        assert!(
            r.starts_with("── Prompt #2 · alice proposes to the group (alice, bob, charlie, diana; thread thr_x):"),
            "{r}"
        );
        assert!(!r.contains("closes the group"), "{r}");
        assert_eq!(
            summary_in(&proposes, Some(&g)),
            "#2 resolution · “Dinner 19:00” · thread thr_x (group grp_g)"
        );
        // Alice's prompt on her leg with Bob (Bob's agent asks her something).
        let c = render_in(&consent(), Some(&g));
        assert!(
            c.starts_with("── Prompt #1 · bob's agent is asking for (scheduling: “Dinner”, thread thr_x, a leg of your group thread grp_g):"),
            "{c}"
        );
        // Without a group, as before.
        assert!(render(&consent()).starts_with(
            "── Prompt #1 · bob's agent is asking for (scheduling: “Dinner”, thread thr_x):"
        ));
        // The terminal shows the group's wording now and when the prompt's turn comes.
        let mut ui = PromptUi::new();
        let mut open = OpenPrompts::new();
        let mut first = consent();
        first.id = 7;
        open.insert(7, first.clone());
        open.insert(2, mine.clone());
        ui.show(&first);
        let out = ui.show_in(&mine, Some(g.clone()));
        assert_eq!(
            out,
            vec![UiOut::Print(
                "   (prompt #2 waits: #2 group proposal · “Dinner 19:00” · group grp_g (4 participants))".into()
            )]
        );
        let out = ui.key(Key::Char('d'), &open);
        assert!(
            matches!(&out[..], [UiOut::Print(_), UiOut::Answer(_), UiOut::Print(p)] if p.contains("the group's proposal")),
            "{out:?}"
        );
    }

    #[test]
    fn renders_keys() {
        let c = render(&consent());
        assert!(
            c.contains("transport_mode") && c.contains("[a] Share all"),
            "{c}"
        );
        let r = render(&resolution());
        assert!(
            r.contains("[c] Confirm") && r.contains("make an excuse"),
            "{r}"
        );
    }

    #[test]
    fn sharing_a_field_without_a_value_is_refused_with_what_to_type() {
        let mut p = consent();
        if let PromptKind::Consent { fields } = &mut p.kind {
            fields[0].suggested = None;
        }
        let args = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = parse_answer(&p, &args(&["transport_mode"])).unwrap_err();
        assert!(
            e.contains("no value for `transport_mode`") && e.contains("transport_mode=VALUE"),
            "{e}"
        );
        let e = parse_answer(&p, &args(&["share-all"])).unwrap_err();
        assert!(e.contains("no value for transport_mode"), "{e}");
        let ok =
            parse_answer(&p, &args(&["transport_mode=walking", "cuisine_preference"])).unwrap();
        let mut m = BTreeMap::new();
        m.insert(
            "transport_mode".to_string(),
            FieldChoice::ShareValue(Value::String("walking".into())),
        );
        m.insert("cuisine_preference".to_string(), FieldChoice::Share);
        assert_eq!(
            ok,
            Command::AnswerConsent {
                prompt_id: 1,
                answer: ConsentAnswer::ShareSelected(m)
            }
        );
        assert!(parse_answer(&p, &args(&["transport_mode=no"])).is_ok());
    }

    #[test]
    fn the_terminal_never_shares_a_field_without_a_value() {
        let mut p = consent();
        if let PromptKind::Consent { fields } = &mut p.kind {
            fields[0].suggested = None;
        }
        let mut ui = Flow::default();
        ui.show(p);
        let out = ui.key(Key::Char('a'));
        assert!(
            !out.iter().any(|o| matches!(o, UiOut::Answer(_))),
            "{out:?}"
        );
        assert!(out.iter().any(
            |o| matches!(o, UiOut::Print(s) if s.contains("no value known for transport_mode"))
        ));
        ui.key(Key::Char('c'));
        let out = ui.key(Key::Char('s'));
        assert!(
            !out.iter().any(|o| matches!(o, UiOut::Answer(_))),
            "{out:?}"
        );
        ui.key(Key::Char('n'));
        let out = ui.key(Key::Char('s'));
        let mut m = BTreeMap::new();
        m.insert("transport_mode".to_string(), FieldChoice::DontShare);
        m.insert("cuisine_preference".to_string(), FieldChoice::Share);
        assert!(
            out.contains(&UiOut::Answer(Command::AnswerConsent {
                prompt_id: 1,
                answer: ConsentAnswer::ShareSelected(m)
            })),
            "{out:?}"
        );
    }

    #[test]
    fn keystrokes() {
        let mut ui = Flow::default();
        ui.show(consent());
        ui.show(resolution());
        ui.key(Key::Char('c'));
        ui.key(Key::Char('s'));
        let out = ui.key(Key::Char('n'));
        let mut m = BTreeMap::new();
        m.insert("transport_mode".to_string(), FieldChoice::Share);
        m.insert("cuisine_preference".to_string(), FieldChoice::DontShare);
        assert!(out.contains(&UiOut::Answer(Command::AnswerConsent {
            prompt_id: 1,
            answer: ConsentAnswer::ShareSelected(m)
        })));
        // The resolution prompt is shown next.
        assert!(out
            .iter()
            .any(|o| matches!(o, UiOut::Print(s) if s.contains("Prompt #2"))));
        let out = ui.key(Key::Char('c'));
        assert!(out.contains(&UiOut::Answer(Command::AnswerResolution {
            prompt_id: 2,
            answer: ResolutionAnswer::Confirm
        })));
        assert!(ui.key(Key::Char('c')).is_empty());
    }

    /// Escape sequences, C1 controls, DEL, bidi overrides, zero-width and tag
    /// characters, and a line break that would draw a fake prompt.
    const EVIL: &str =
        "\u{1b}[2J\u{1b}]52;c;cm0gLXJmIH4=\u{7}\u{9b}31m\u{202e}gpj.exe\u{2066}\u{200b}\r\n── Prompt #9 · FAKE\u{7f}\u{e0041}";

    fn hostile(mut p: Prompt) -> Prompt {
        p.intent.category = EVIL.into();
        p.intent.summary = EVIL.repeat(100);
        match &mut p.kind {
            PromptKind::Consent { fields } => {
                for f in fields {
                    f.field = format!("{}{EVIL}", f.field);
                    f.reason = EVIL.into();
                    f.suggested = Some(EVIL.into());
                }
            }
            PromptKind::Resolution { proposal, .. } => {
                proposal.summary = EVIL.into();
                proposal.reasoning = EVIL.into();
                proposal.alternatives = vec![a2acp_core::packet::Alternative {
                    summary: EVIL.into(),
                    reason: EVIL.into(),
                    details: Default::default(),
                }];
            }
        }
        p
    }

    /// Only the renderer's own line breaks; no control, escape or invisible character.
    fn terminal_safe(s: &str) -> bool {
        s.chars()
            .all(|c| c == '\n' || (!c.is_control() && display::is_clean(&c.to_string(), 1)))
    }

    #[test]
    fn hostile_text_is_rendered_clean_and_bounded() {
        for p in [hostile(consent()), hostile(resolution())] {
            let r = render(&p);
            assert!(terminal_safe(&r), "{r:?}");
            assert!(!r.contains("\n── Prompt #9"), "a peer drew a line: {r}");
            // The renderer's own lines only: 2 per field + header + keys, or the
            // resolution's header, why, alternative, deadline, keys.
            assert!(r.lines().count() <= 7, "{r}");
            assert!(r.chars().count() < 3000, "{}", r.chars().count());
            let s = summary(&p);
            assert!(terminal_safe(&s) && !s.contains('\n'), "{s:?}");
        }
        // The terminal flow prints the same clean text.
        let mut ui = Flow::default();
        for o in ui.show(hostile(consent())) {
            if let UiOut::Print(s) = o {
                assert!(terminal_safe(&s), "{s:?}");
            }
        }
    }

    #[test]
    fn an_updated_prompt_is_replaced_in_place() {
        let mut ui = Flow::default();
        ui.show(consent());
        ui.show(resolution());
        // The prompt on screen, updated: drawn again under its number, keys start over.
        ui.key(Key::Char('c'));
        let mut more = consent();
        if let PromptKind::Consent { fields } = &mut more.kind {
            fields.push(ConsentField {
                field: "name".into(),
                reason: "booking".into(),
                priority: Priority::Required,
                suggested: Some("Alice".into()),
            });
        }
        let out = ui.show(more);
        assert!(
            matches!(&out[..], [UiOut::Print(s)] if s.contains("Prompt #1") && s.contains("name")),
            "{out:?}"
        );
        assert_eq!(ui.ui.queued().collect::<Vec<_>>(), [1, 2]);
        let out = ui.key(Key::Char('a'));
        let Some(UiOut::Answer(Command::AnswerConsent {
            prompt_id: 1,
            answer: ConsentAnswer::ShareSelected(m),
        })) = out.get(1)
        else {
            panic!("{out:?}")
        };
        assert_eq!(m.len(), 3);
        // A waiting prompt updated: replaced quietly, still one entry.
        let out = ui.show(resolution());
        assert!(matches!(&out[..], [UiOut::Print(s)] if s.contains("Prompt #2")));
        assert!(ui
            .show(resolution())
            .iter()
            .all(|o| matches!(o, UiOut::Print(_))));
        assert_eq!(ui.ui.queued().count(), 1);
    }

    fn with_alternatives() -> Prompt {
        let mut p = resolution();
        if let PromptKind::Resolution { proposal, .. } = &mut p.kind {
            for (t, why) in [("18:30", "Earliest start"), ("19:30", "30 minutes later")] {
                proposal.alternatives.push(a2acp_core::packet::Alternative {
                    summary: format!("Friday {t}"),
                    reason: why.into(),
                    details: Default::default(),
                });
            }
        }
        p
    }

    #[test]
    fn alternatives_are_shown_with_their_trade_off_and_taken_with_one_key() {
        let p = with_alternatives();
        let r = render(&p);
        assert!(
            r.contains("[1] alternative: Friday 18:30 — Earliest start"),
            "{r}"
        );
        assert!(
            r.contains("[2] alternative: Friday 19:30 — 30 minutes later"),
            "{r}"
        );
        assert!(r.contains("[1–2] Take that alternative"), "{r}");
        assert!(help(&p).contains("alternative 1…2"));
        let mut ui = Flow::default();
        ui.show(p.clone());
        // A key beyond the alternatives only shows the keys again.
        assert!(!ui
            .key(Key::Char('3'))
            .iter()
            .any(|o| matches!(o, UiOut::Answer(_))));
        let out = ui.key(Key::Char('2'));
        assert!(out.contains(&UiOut::Answer(Command::AnswerResolution {
            prompt_id: 2,
            answer: ResolutionAnswer::Alternative(1)
        })));
        // `a2acp answer 2 alternative 1`.
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_answer(&p, &s(&["alternative", "1"])).unwrap(),
            Command::AnswerResolution {
                prompt_id: 2,
                answer: ResolutionAnswer::Alternative(0)
            }
        );
        for bad in [
            &["alternative"][..],
            &["alternative", "3"],
            &["alt", "0"],
            &["alt", "x"],
        ] {
            assert!(parse_answer(&p, &s(bad)).unwrap_err().contains("offers 2"));
        }
        assert!(parse_answer(&resolution(), &s(&["alternative", "1"]))
            .unwrap_err()
            .contains("offers no alternative"));
        // Without alternatives, digits do nothing.
        let mut ui = Flow::default();
        ui.show(resolution());
        assert!(!ui
            .key(Key::Char('1'))
            .iter()
            .any(|o| matches!(o, UiOut::Answer(_))));
    }

    #[test]
    fn a_suggestion_is_accepted_with_one_key_once_no_prompt_is_open() {
        let s = Suggestion::Promote {
            id: 4,
            field: "dietary".into(),
            peer: Address::parse("agent:bob@localhost").unwrap(),
        };
        let mut ui = Flow::default();
        ui.show(resolution());
        // Waits behind the open prompt.
        assert!(ui
            .suggest(s.clone(), "Always share dietary with Bob?".into())
            .is_empty());
        let out = ui.key(Key::Char('c'));
        assert!(
            out.iter().any(
                |o| matches!(o, UiOut::Print(t) if t.contains("Suggestion #4") && t.contains("[y]"))
            ),
            "{out:?}"
        );
        let out = ui.key(Key::Char('y'));
        assert!(out.contains(&UiOut::Answer(Command::SetPermission {
            field: "dietary".into(),
            tier: a2acp_core::agent::Tier::AlwaysShare,
            for_peer: Some(Address::parse("agent:bob@localhost").unwrap()),
        })));
        assert!(ui.key(Key::Char('y')).is_empty(), "answered once");
        // "Not now", and one accepted elsewhere is no longer offered.
        ui.suggest(s.clone(), "again".into());
        let out = ui.key(Key::Char('n'));
        assert!(!out.iter().any(|o| matches!(o, UiOut::Answer(_))));
        ui.suggest(s, "again".into());
        ui.ui.retain_suggestions(|_| false, &ui.open);
        assert!(ui.key(Key::Char('y')).is_empty());
    }

    #[test]
    fn excuse_keeps_reason() {
        let mut ui = Flow::default();
        ui.show(resolution());
        ui.key(Key::Char('e'));
        for c in "tired".chars() {
            ui.key(Key::Char(c));
        }
        let out = ui.key(Key::Enter);
        assert!(out.contains(&UiOut::Answer(Command::AnswerResolution {
            prompt_id: 2,
            answer: ResolutionAnswer::MakeExcuse {
                actual_reason: Some("tired".into())
            }
        })));
    }

    #[test]
    fn answer_arguments() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_answer(&resolution(), &s(&["confirm"])).unwrap(),
            Command::AnswerResolution {
                prompt_id: 2,
                answer: ResolutionAnswer::Confirm
            }
        );
        let c = parse_answer(&consent(), &s(&["transport_mode", "cuisine_preference=no"])).unwrap();
        let Command::AnswerConsent {
            answer: ConsentAnswer::ShareSelected(m),
            ..
        } = c
        else {
            panic!()
        };
        assert_eq!(m["cuisine_preference"], FieldChoice::DontShare);
        assert!(parse_answer(&consent(), &s(&["salary"]))
            .unwrap_err()
            .contains("does not ask"));
        assert!(parse_answer(&resolution(), &s(&["maybe"])).is_err());
        assert!(parse_answer(&resolution(), &[]).is_err());
        let c = parse_answer(&consent(), &s(&["transport_mode=\"walking\""])).unwrap();
        let Command::AnswerConsent {
            answer: ConsentAnswer::ShareSelected(m),
            ..
        } = c
        else {
            panic!()
        };
        assert_eq!(
            m["transport_mode"],
            FieldChoice::ShareValue("walking".into())
        );
    }

    #[test]
    fn a_prompt_answered_elsewhere_leaves_the_terminal_and_the_next_is_shown() {
        let mut ui = Flow::default();
        ui.show(consent());
        ui.show(resolution());
        // Nothing closed yet: nothing to say.
        assert!(ui.ui.closed_elsewhere(&ui.open).is_empty());
        // `a2acp answer 1 …` through the control socket: the host no longer has it.
        ui.open.remove(&1);
        let out = ui.ui.closed_elsewhere(&ui.open);
        assert!(
            matches!(&out[..], [UiOut::Print(a), UiOut::Print(b)]
                if a.contains("prompt #1 closed") && b.contains("Prompt #2")),
            "{out:?}"
        );
        assert_eq!(ui.ui.queued().collect::<Vec<_>>(), [2]);
        // The keys now answer the prompt on screen, as the host has it.
        let out = ui.key(Key::Char('x'));
        assert!(out.contains(&UiOut::Answer(Command::AnswerResolution {
            prompt_id: 2,
            answer: ResolutionAnswer::Decline
        })));
        assert!(ui.open.is_empty() && ui.ui.queued().next().is_none());
    }
}
