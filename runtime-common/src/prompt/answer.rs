//! The arguments of `a2acp answer`, read into the agent's command.

use std::collections::BTreeMap;

use a2acp_core::agent::{
    Command, ConsentAnswer, FieldChoice, Prompt, PromptKind, ResolutionAnswer,
};
use serde_json::Value;

use super::text::*;

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
