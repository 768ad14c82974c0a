//! Sequential confirmation (§8.3): "Alice confirms she wants to book → the agent checks
//! availability → Bob confirms the slot".
//!
//! The confirmers of the group's resolution (`requires_confirmation_from`, the
//! coordinator's user first) are asked one at a time. Once a step confirmed, the
//! coordinator *checks* its own actions ([`ActionRequest::check`]: the runtime answers with
//! what it found, e.g. the slot a venue has) before it asks the next confirmer:
//!
//! - findings that only **add** details (narrowing) go into the resolution the next
//!   confirmer gets;
//! - findings that **change** a detail an earlier confirmer saw start the sequence again
//!   from the coordinator's user with the new resolution (at most
//!   [`MAX_SEQUENCE_RESTARTS`] times, then the candidate is given up);
//! - a failed check, a decline or a counter at any step gives the candidate up, as a quorum
//!   out of reach does: the next candidate is proposed, or the users decide.
//!
//! When the last step confirmed, the tally goes on exactly as for `all`: every confirmer
//! gets the coordinator's `confirmed`, the outcome is announced. One deadline covers the
//! whole sequence; each step's resolution carries the time left.

use serde_json::Value;

use crate::agent::group::{Sequence, MAX_SEQUENCE_RESTARTS};
use crate::agent::*;

use crate::display;
use crate::packet::{ActionSpec, ResolutionBody, ResolutionStatus};

/// Most details a check may report.
pub const MAX_CHECK_FINDINGS: usize = 16;
/// Longest finding (its key, and its value as JSON), in bytes.
pub const MAX_CHECK_FINDING_BYTES: usize = 512;

impl Agent {
    /// Moves a sequential confirmation on. Returns `true` once every step confirmed: the
    /// caller then tallies as for `all`.
    pub(in crate::agent) fn tally_sequence(&mut self, gid: &str) -> bool {
        let me = self.shared.config.address.clone();
        let Some(g) = self.shared.groups.get(gid) else {
            return false;
        };
        let Some(gp) = &g.proposal else { return false };
        let Some(seq) = gp.sequence.clone() else {
            return true;
        };
        let order = gp.body.requires_confirmation_from.clone();
        let Some(current) = order.get(seq.step).cloned() else {
            return true;
        };
        let answer = if current == me {
            gp.mine
        } else {
            match self
                .leg_answers(g)
                .into_iter()
                .find(|l| l.participant == current)
            {
                Some(l) if l.proposed => l.answer,
                // Its leg ended, or its participant countered (back to negotiating).
                _ => Some(ResolutionStatus::Declined),
            }
        };
        match answer {
            None => false,
            Some(ResolutionStatus::Confirmed) => {
                if seq.checking.is_some() {
                    return false;
                }
                let last = seq.step + 1 >= order.len();
                if !seq.checked && !last {
                    if let Some(action) = checkable(&gp.body, &me) {
                        self.start_check(gid, action);
                        return false;
                    }
                }
                let step = seq.step + 1;
                if let Some(s) = self
                    .group_mut(gid)
                    .and_then(|g| g.proposal.as_mut())
                    .and_then(|p| p.sequence.as_mut())
                {
                    s.step = step;
                    s.checked = false;
                }
                match order.get(step) {
                    Some(next) => {
                        self.ask_step(gid, next);
                        false
                    }
                    None => true,
                }
            }
            Some(_) => {
                let who = if current == me {
                    "you".to_string()
                } else {
                    current.to_string()
                };
                self.give_up_proposal(
                    gid,
                    Some(format!(
                        "“{}” did not go ahead: {who} did not confirm. Looking for another option.",
                        display::line(&gp_summary(self, gid), display::MAX_SHORT)
                    )),
                );
                false
            }
        }
    }

    /// Sends the group's resolution, as it stands now, to `next` alone, with the time
    /// left before the group's deadline.
    fn ask_step(&mut self, gid: &str, next: &Address) {
        let now = self.shared.now;
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        let Some(gp) = &g.proposal else { return };
        let Some(lid) = g.legs.get(next).cloned() else {
            return;
        };
        let left = gp
            .deadline
            .since(now)
            .max(std::time::Duration::from_secs(1));
        let body = ResolutionBody {
            confirmation_timeout: Some(crate::time::format_iso8601_duration(left)),
            ..gp.body.clone()
        };
        self.shared.note(
            None,
            format!("group {gid}: the next confirmation is asked of {next}"),
        );
        self.in_thread(&lid, |step| step.propose_on_leg(body));
    }

    /// Asks the runtime to check `action` with the proposal's details.
    fn start_check(&mut self, gid: &str, action: ActionSpec) {
        let aid = self.shared.meta.next_action;
        self.shared.meta.next_action += 1;
        self.shared.dirty.meta = true;
        if let Some(s) = self
            .group_mut(gid)
            .and_then(|g| g.proposal.as_mut())
            .and_then(|p| p.sequence.as_mut())
        {
            s.checking = Some(aid);
        }
        self.request_check(gid, aid, action);
    }

    /// After a restore: the group's prompt is shown again, and a check in flight is asked
    /// again with the same id (the runtime may have lost it; ids let it answer once).
    pub(in crate::agent) fn resume_groups(&mut self) {
        let me = self.shared.config.address.clone();
        type Open = (String, bool, Option<(u64, ActionSpec)>);
        let open: Vec<Open> = self
            .shared
            .groups
            .values()
            .filter(|g| !g.closed)
            .filter_map(|g| {
                let p = g.proposal.as_ref()?;
                let check = p
                    .sequence
                    .as_ref()
                    .and_then(|s| s.checking)
                    .and_then(|aid| Some((aid, checkable(&p.body, &me)?)));
                Some((g.id.clone(), p.prompt_id.is_some(), check))
            })
            .collect();
        for (gid, prompt, check) in open {
            if prompt {
                self.show_group_prompt(&gid, false);
            }
            if let Some((aid, action)) = check {
                self.request_check(&gid, aid, action);
            }
        }
    }

    fn request_check(&mut self, gid: &str, aid: u64, action: ActionSpec) {
        let Some(gp) = self
            .shared
            .groups
            .get(gid)
            .and_then(|g| g.proposal.as_ref())
        else {
            return;
        };
        let details = gp.body.proposal.details.clone();
        self.shared
            .buf
            .action
            .push(Output::ExecuteAction(ActionRequest {
                id: aid,
                thread_id: gid.to_string(),
                action,
                details,
                undo: false,
                check: true,
            }));
    }

    /// The result of a check a group's sequence waits for. Returns `false` when no group
    /// waits for `action_id`.
    pub(in crate::agent) fn on_group_check(
        &mut self,
        action_id: u64,
        result: &Result<Context, String>,
    ) -> bool {
        let Some(gid) = self
            .shared
            .groups
            .values()
            .find(|g| {
                g.proposal
                    .as_ref()
                    .and_then(|p| p.sequence.as_ref())
                    .is_some_and(|s| s.checking == Some(action_id))
            })
            .map(|g| g.id.clone())
        else {
            return false;
        };
        let summary = gp_summary(self, &gid);
        let findings = match result {
            Ok(f) => check_findings(f),
            Err(e) => Err(display::line(e, display::MAX_SHORT).into_owned()),
        };
        let findings = match findings {
            Ok(f) => f,
            Err(e) => {
                self.give_up_proposal(
                    &gid,
                    Some(format!(
                        "Checking “{}” failed: {e}. Looking for another option.",
                        display::line(&summary, display::MAX_SHORT)
                    )),
                );
                return true;
            }
        };
        let Some(gp) = self.group_mut(&gid).and_then(|g| g.proposal.as_mut()) else {
            return true;
        };
        let details = &mut gp.body.proposal.details;
        let changed: Vec<String> = findings
            .iter()
            .filter(|(k, v)| details.get(k.as_str()).is_some_and(|old| old != v))
            .map(|(k, _)| k.clone())
            .collect();
        for (k, v) in findings {
            details.insert(k, v);
        }
        let Some(seq) = gp.sequence.as_mut() else {
            return true;
        };
        seq.checking = None;
        if changed.is_empty() {
            seq.checked = true;
            return true;
        }
        if seq.restarts >= MAX_SEQUENCE_RESTARTS {
            self.give_up_proposal(
                &gid,
                Some(format!(
                    "“{}” keeps changing when checked ({}); looking for another option.",
                    display::line(&summary, display::MAX_SHORT),
                    changed.join(", ")
                )),
            );
            return true;
        }
        *seq = Sequence {
            step: 0,
            checking: None,
            checked: false,
            restarts: seq.restarts + 1,
        };
        gp.mine = None;
        let prompt_id = self.shared.next_prompt_id();
        let old = self
            .group_mut(&gid)
            .and_then(|g| g.proposal.as_mut())
            .and_then(|p| p.prompt_id.replace(prompt_id));
        if let Some(p) = old {
            self.shared.buf.prompt.push(Output::ClosePrompt(p));
        }
        // Whoever confirmed the resolution as it was is asked again, in order.
        let legs: Vec<String> = self
            .shared
            .groups
            .get(&gid)
            .map(|g| g.legs.values().cloned().collect())
            .unwrap_or_default();
        for lid in &legs {
            self.in_thread(lid, |step| step.withdraw_group_proposal());
        }
        self.shared.notify(
            Some(gid.clone()),
            NotifyKind::Info,
            format!(
                "Checking “{}” changed {}: please confirm again.",
                display::line(&summary, display::MAX_SHORT),
                changed.join(", ")
            ),
        );
        self.show_group_prompt(&gid, false);
        true
    }
}

/// The coordinator's own action a step's check is about: the first one it carries out
/// itself with an external service (booking a table, not adding a calendar entry).
fn checkable(body: &ResolutionBody, me: &Address) -> Option<ActionSpec> {
    body.actions_on_confirm
        .iter()
        .find(|a| a.by.as_ref() == Some(me) && a.service.is_some())
        .cloned()
}

/// A check's findings, bounded: at most [`MAX_CHECK_FINDINGS`] details, each key and value
/// at most [`MAX_CHECK_FINDING_BYTES`].
fn check_findings(f: &Context) -> Result<Vec<(String, Value)>, String> {
    if f.len() > MAX_CHECK_FINDINGS {
        return Err(format!(
            "the check reported {} details, at most {MAX_CHECK_FINDINGS} are taken",
            f.len()
        ));
    }
    let mut out = Vec::new();
    for (k, v) in f {
        let size = serde_json::to_string(v)
            .map(|s| s.len())
            .unwrap_or(usize::MAX);
        if k.is_empty() || k.len() > MAX_CHECK_FINDING_BYTES || size > MAX_CHECK_FINDING_BYTES {
            return Err(format!(
                "the check reported a detail over {MAX_CHECK_FINDING_BYTES} bytes"
            ));
        }
        out.push((k.clone(), v.clone()));
    }
    Ok(out)
}

fn gp_summary(a: &Agent, gid: &str) -> String {
    a.shared
        .groups
        .get(gid)
        .and_then(|g| g.proposal.as_ref())
        .map(|p| p.body.proposal.summary.clone())
        .unwrap_or_default()
}
