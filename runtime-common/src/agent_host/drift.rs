//! The host's drift requests (§6.5): `thread update-intent` and `thread fork`.

use a2acp_core::agent::{Command, Input};
use a2acp_core::packet::{Intent, Need, Priority, MAX_NEEDS_PER_PACKET};
use a2acp_core::Timestamp;

use super::{AgentHost, Effect, HostError};
use crate::control::{Request, Response};

type Answer = Result<(Response, Vec<Effect>), HostError>;

/// Most threads one fork makes from the command line (the peer's limit is its own).
const MAX_FORK_INTENTS: usize = 8;

/// Longest summary accepted, in characters.
const MAX_SUMMARY: usize = 200;

impl AgentHost {
    /// `update_intent` and `fork_thread` requests.
    pub(super) fn drift(&mut self, now: Timestamp, r: Request) -> Answer {
        match r {
            Request::UpdateIntent {
                id,
                summary,
                category,
                reason,
                needs,
            } => self.update_intent(now, &id, summary, category, reason, needs),
            Request::ForkThread {
                id,
                intents,
                category,
            } => self.fork_thread(now, &id, intents, category),
            _ => Ok((Response::err("not a drift request"), Vec::new())),
        }
    }

    /// The open two-party thread `id`, or the error to answer with.
    fn drift_thread(&self, id: &str, what: &str) -> Result<Intent, Response> {
        if self.agent.groups().contains_key(id) {
            return Err(Response::err(format!(
                "{id} is a group thread: {what} works on a two-party thread (`a2acp threads` lists them)"
            )));
        }
        if let Some(m) = self.group_elsewhere(id) {
            return Err(Response::err(m));
        }
        let t = self.open_thread(id)?;
        if t.group.is_some() {
            return Err(Response::err(format!(
                "{id} is a leg of a group thread: {what} works on a two-party thread"
            )));
        }
        if !t.forked_into.is_empty() {
            return Err(Response::err(format!(
                "thread {id} was split into {}: {what} one of them",
                t.forked_into.join(", ")
            )));
        }
        if what == "fork" && !a2acp_core::agent::may_fork(t) {
            return Err(Response::err(format!(
                "thread {id} has a proposal open ({}): answer or cancel it before splitting the thread",
                t.state
            )));
        }
        Ok(t.intent.clone())
    }

    fn update_intent(
        &mut self,
        now: Timestamp,
        id: &str,
        summary: String,
        category: Option<String>,
        reason: Option<String>,
        needs: Vec<String>,
    ) -> Answer {
        let current = match self.drift_thread(id, "update-intent") {
            Ok(i) => i,
            Err(r) => return Ok((r, Vec::new())),
        };
        let summary = summary.trim().to_string();
        if let Err(m) = check_summary(&summary) {
            return Ok((Response::err(m), Vec::new()));
        }
        if needs.len() > MAX_NEEDS_PER_PACKET {
            return Ok((
                Response::err(format!(
                    "at most {MAX_NEEDS_PER_PACKET} --need fields (§6.4); {} given",
                    needs.len()
                )),
                Vec::new(),
            ));
        }
        if let Some(bad) = needs.iter().find(|n| !valid_field(n)) {
            return Ok((
                Response::err(format!(
                    "`{bad}` is not a field name (letters, digits, `_`, `-`, `.`; at most 64)"
                )),
                Vec::new(),
            ));
        }
        let intent = Intent {
            category: category
                .filter(|c| !c.trim().is_empty())
                .unwrap_or_else(|| current.category.clone()),
            summary: summary.clone(),
            urgency: current.urgency.clone(),
            scope_change: None,
        };
        let needs = needs
            .into_iter()
            .map(|field| Need {
                reason: format!("Needed for “{summary}”"),
                field,
                priority: Priority::Required,
            })
            .collect();
        let e = self.handle(
            now,
            Input::Command(Command::UpdateIntent {
                thread_id: id.to_string(),
                intent,
                reason: reason
                    .filter(|r| !r.trim().is_empty())
                    .unwrap_or_else(|| "The user changed the plan".into()),
                needs,
            }),
        )?;
        let Some(t) = self.agent.thread(id) else {
            return Ok((Response::err(format!("no thread `{id}`")), e));
        };
        let asked = t
            .consent
            .as_ref()
            .filter(|c| c.prompt_id != 0 && !c.offered.is_empty())
            .map(|c| (c.prompt_id, c.offered.iter().cloned().collect::<Vec<_>>()));
        let mut text = format!(
            "thread {id} is now about “{summary}” ({}); {} is told",
            t.intent.scope_change.as_deref().unwrap_or("changed"),
            t.peer
        );
        if let Some((pid, fields)) = asked {
            text += &format!(
                "; under it your tiers would share {} — nothing more leaves before you answer prompt #{pid}",
                fields.join(", ")
            );
        }
        Ok((Response::ok(text), e))
    }

    fn fork_thread(
        &mut self,
        now: Timestamp,
        id: &str,
        intents: Vec<String>,
        category: Option<String>,
    ) -> Answer {
        let current = match self.drift_thread(id, "fork") {
            Ok(i) => i,
            Err(r) => return Ok((r, Vec::new())),
        };
        if !(2..=MAX_FORK_INTENTS).contains(&intents.len()) {
            return Ok((
                Response::err(format!(
                    "give 2 to {MAX_FORK_INTENTS} --intent summaries, one per new thread ({} given)",
                    intents.len()
                )),
                Vec::new(),
            ));
        }
        let mut list = Vec::new();
        for s in intents {
            let s = s.trim().to_string();
            if let Err(m) = check_summary(&s) {
                return Ok((Response::err(m), Vec::new()));
            }
            list.push(Intent {
                category: category
                    .clone()
                    .filter(|c| !c.trim().is_empty())
                    .unwrap_or_else(|| current.category.clone()),
                summary: s,
                urgency: current.urgency.clone(),
                scope_change: None,
            });
        }
        let e = self.handle(
            now,
            Input::Command(Command::ForkThread {
                thread_id: id.to_string(),
                intents: list,
            }),
        )?;
        let Some(t) = self.agent.thread(id) else {
            return Ok((Response::err(format!("no thread `{id}`")), e));
        };
        if t.forked_into.is_empty() {
            return Ok((
                Response::err(format!(
                    "thread {id} was not split: the fork could not be sent (see `a2acp notifications`)"
                )),
                e,
            ));
        }
        let children: Vec<String> = t
            .forked_into
            .iter()
            .map(|c| {
                let s = self
                    .agent
                    .thread(c)
                    .map(|x| {
                        a2acp_core::display::line(&x.intent.summary, a2acp_core::display::MAX_SHORT)
                            .into_owned()
                    })
                    .unwrap_or_default();
                format!("{c} (“{s}”)")
            })
            .collect();
        Ok((
            Response::ok(format!(
                "thread {id} split into {} threads that negotiate independently: {}; {} is told",
                children.len(),
                children.join(", "),
                t.peer
            )),
            e,
        ))
    }
}

fn check_summary(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("the summary must not be empty".into());
    }
    if s.chars().count() > MAX_SUMMARY {
        return Err(format!("a summary is at most {MAX_SUMMARY} characters"));
    }
    if s.chars().any(char::is_control) {
        return Err("a summary is one line of text".into());
    }
    Ok(())
}

fn valid_field(f: &str) -> bool {
    !f.is_empty()
        && f.len() <= 64
        && f.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}
