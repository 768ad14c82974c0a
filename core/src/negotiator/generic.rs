//! Intents other than scheduling: ask for the fields named in `wanted_fields`, then
//! propose a resolution summarising what was exchanged.

use serde_json::{Map, Value};

use super::{clip, needs, tried_summary, Decision, View};
use crate::packet::{Context, Proposal};

/// Most fields copied into a generic proposal's details.
const MAX_DETAIL_FIELDS: usize = 32;
/// Largest serialised value copied into a generic proposal's details, in bytes.
const MAX_DETAIL_VALUE_BYTES: usize = 2048;
/// Budget for all copied values together, in bytes.
const MAX_DETAILS_BYTES: usize = 16 * 1024;

fn no_values(ctx: &Context) -> bool {
    ctx.keys().all(|k| needs::is_meta_field(k))
}

/// The generic decision.
pub(super) fn decide(view: &View) -> Decision {
    if view.i_am_initiator && no_values(view.theirs) && view.unavailable.is_empty() {
        return Decision::Wait;
    }
    let specs = needs::wanted_fields(view.intent, view.mine);
    let gaps = needs::gaps(&specs, view);
    if !gaps.ask.is_empty() {
        return Decision::Ask { needs: gaps.ask };
    }
    if gaps.required_pending {
        return Decision::Wait;
    }
    if no_values(view.theirs) && no_values(view.mine) {
        return Decision::Escalate {
            reason: "Nothing was exchanged to resolve this thread automatically".to_string(),
            summary: tried_summary(view),
        };
    }
    let decision = propose(view, &specs);
    // The exchanged values admit one proposal; once it was ruled out (a counter, an
    // excuse, a failed action) there is nothing new to offer: hand it to the humans.
    if let Decision::Propose { proposal, .. } = &decision {
        if let Some(r) = view.rejected.iter().find(|r| r.details == proposal.details) {
            return Decision::Escalate {
                reason: format!("The only option was ruled out ({})", r.reason),
                summary: tried_summary(view),
            };
        }
    }
    decision
}

fn propose(view: &View, specs: &[needs::FieldSpec]) -> Decision {
    let (init, resp, init_addr, resp_addr) = if view.i_am_initiator {
        (view.mine, view.theirs, view.me, view.peer)
    } else {
        (view.theirs, view.mine, view.peer, view.me)
    };
    let mut details = Map::new();
    let mut names: Vec<String> = Vec::new();
    let mut omitted: Vec<String> = Vec::new();
    let mut used = 0usize;
    let keys: Vec<&String> = init
        .keys()
        .chain(resp.keys().filter(|k| !init.contains_key(*k)))
        .filter(|k| !needs::is_meta_field(k))
        .collect();
    for key in keys {
        if names.len() >= MAX_DETAIL_FIELDS {
            omitted.push(key.clone());
            continue;
        }
        let value = match (init.get(key.as_str()), resp.get(key.as_str())) {
            (Some(a), Some(b)) if a != b => {
                let mut both = Map::new();
                both.insert(init_addr.to_string(), a.clone());
                both.insert(resp_addr.to_string(), b.clone());
                Value::Object(both)
            }
            (Some(a), _) => a.clone(),
            (None, Some(b)) => b.clone(),
            (None, None) => continue,
        };
        let size = serde_json::to_string(&value)
            .map(|s| s.len())
            .unwrap_or(usize::MAX);
        if size > MAX_DETAIL_VALUE_BYTES || used.saturating_add(size) > MAX_DETAILS_BYTES {
            omitted.push(key.clone());
            continue;
        }
        used += size;
        names.push(key.clone());
        details.insert(key.clone(), value);
    }
    let wanted_given: Vec<&str> = specs
        .iter()
        .filter(|s| s.given_in(view.theirs))
        .map(|s| s.field.as_str())
        .collect();
    let declined: Vec<&str> = specs
        .iter()
        .filter(|s| view.unavailable.contains(&s.field))
        .map(|s| s.field.as_str())
        .collect();
    let shown: Vec<&str> = names.iter().map(String::as_str).take(6).collect();
    let more = names.len().saturating_sub(shown.len());
    let mut summary = format!("{} — ", clip(&view.intent.summary, 100));
    if names.is_empty() {
        summary.push_str("nothing further to exchange");
    } else {
        summary.push_str(&format!("agreed on {}", shown.join(", ")));
        if more > 0 {
            summary.push_str(&format!(" and {more} more"));
        }
    }
    let mut reasoning = vec![format!(
        "Context exchanged for '{}'",
        clip(&view.intent.summary, 100)
    )];
    if !wanted_given.is_empty() {
        reasoning.push(format!(
            "received the fields asked for: {}",
            wanted_given.join(", ")
        ));
    }
    if !declined.is_empty() {
        reasoning.push(format!(
            "working without {} (declined)",
            declined.join(", ")
        ));
    }
    if !omitted.is_empty() {
        let list: Vec<&str> = omitted.iter().map(String::as_str).take(10).collect();
        reasoning.push(format!(
            "left out of the details for size: {}",
            list.join(", ")
        ));
    }
    Decision::Propose {
        proposal: Proposal {
            summary,
            details,
            alternatives: Vec::new(),
            reasoning: reasoning.join("; "),
        },
        actions: Vec::new(),
    }
}
