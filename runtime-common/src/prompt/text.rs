//! The text of a prompt: its keys, its question, its one-line summary.

use a2acp_core::agent::{Prompt, PromptKind, Suggestion};
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
pub(super) fn resolution_keys(n: usize) -> String {
    match n.min(MAX_ALTERNATIVE_KEYS) {
        0 => RESOLUTION_KEYS.to_string(),
        1 => format!("{RESOLUTION_KEYS}   [1] Take the alternative"),
        n => format!("{RESOLUTION_KEYS}   [1–{n}] Take that alternative"),
    }
}

/// The alternatives of a resolution prompt that can be chosen.
pub(super) fn alternatives(p: &Prompt) -> usize {
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

pub(super) fn compact(v: &Value) -> String {
    let s = match v {
        Value::String(s) => format!("\"{s}\""),
        other => serde_json::to_string(other).unwrap_or_default(),
    };
    shown(&s).into_owned()
}

/// A string of a prompt as the terminal shows it: one clean line, bounded. The core
/// already cleans what a peer wrote ([`a2acp_core::display`]); a prompt from elsewhere
/// (an older core, a test) is cleaned here too.
pub(super) fn shown(s: &str) -> std::borrow::Cow<'_, str> {
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
