//! Resolution and confirmation (§8): proposals, the human checkpoint, alternatives,
//! counters, confirmations and their timeouts.

use std::collections::BTreeSet;

use crate::agent::thread::{Execution, OpenResolution, ThreadState, Waiting};
use crate::agent::*;

use crate::display;
use crate::negotiator::Rejected;
use crate::packet::{ActionSpec, Body, ResolutionBody, ResolutionResponseBody, ResolutionStatus};
use crate::receipt::Basis;

/// The `reason_class` of a `counter_requested` that picks one of the proposal's
/// alternatives (its index in `alternative`; SPEC-NOTES "Resolution and confirmation").
pub(in crate::agent) const ALTERNATIVE_CHOSEN: &str = "alternative_chosen";

impl Agent {
    pub(in crate::agent) fn answer_resolution(&mut self, prompt_id: u64, answer: ResolutionAnswer) {
        let group = self
            .shared
            .groups
            .values()
            .find(|g| {
                g.proposal
                    .as_ref()
                    .is_some_and(|p| p.prompt_id == Some(prompt_id))
            })
            .map(|g| g.id.clone());
        if let Some(gid) = group {
            self.answer_group_resolution(&gid, answer);
            return;
        }
        let Some(id) = self.thread_where(
            |t| {
                t.stage
                    .resolution()
                    .is_some_and(|r| r.prompt_id == Some(prompt_id))
            },
            format!("answer to unknown or closed prompt {prompt_id} ignored"),
        ) else {
            return;
        };
        self.in_thread(&id, |step| step.answer_resolution(prompt_id, answer));
    }
}

impl ThreadStep<'_> {
    pub(in crate::agent) fn answer_resolution(&mut self, prompt_id: u64, answer: ResolutionAnswer) {
        let me = self.shared.config.address.clone();
        let t = &mut *self.t;
        if t.state != ThreadState::Proposed {
            return;
        }
        let Some(r) = t.stage.resolution_mut() else {
            return;
        };
        let chosen = match &answer {
            ResolutionAnswer::Alternative(i) => {
                match r.body.proposal.alternatives.get(*i) {
                    Some(a) => Some((*i, a.summary.clone())),
                    None => {
                        // The prompt stays open: the user picks again.
                        let n = r.body.proposal.alternatives.len();
                        self.note(format!(
                            "alternative {} of prompt {prompt_id} does not exist (it offers {n})",
                            i + 1
                        ));
                        return;
                    }
                }
            }
            _ => None,
        };
        if let (Some((i, _)), true) = (chosen.as_ref(), r.proposer == me) {
            // The proposer's own user picks an alternative: it becomes the proposal at
            // once; the new resolution supersedes this one on the other side.
            let i = *i;
            self.note(format!(
                "the user chose alternative {} of the own proposal",
                i + 1
            ));
            self.propose_alternative(i);
            return;
        }
        r.prompt_id = None;
        let resolution_id = r.packet_id.to_string();
        let confirmed = (answer == ResolutionAnswer::Confirm).then(|| r.body.clone());
        let alt_message = chosen
            .as_ref()
            .map(|(_, summary)| format!("Could we do this instead: {summary}?"));
        let (status, class, message) = match &answer {
            ResolutionAnswer::Confirm => (ResolutionStatus::Confirmed, None, None),
            ResolutionAnswer::DifferentTime => (
                ResolutionStatus::CounterRequested,
                Some("different_time"),
                Some("Could we find a different time?"),
            ),
            ResolutionAnswer::DifferentPlace => (
                ResolutionStatus::CounterRequested,
                Some("different_place"),
                Some("Could we find a different place?"),
            ),
            ResolutionAnswer::MakeExcuse { .. } => (
                ResolutionStatus::Declined,
                Some("scheduling_conflict"),
                Some("Something's come up — need to take a rain check. Can we try another time?"),
            ),
            ResolutionAnswer::Decline => (
                ResolutionStatus::Declined,
                Some("user_declined"),
                Some("Thanks, but this doesn't work for me."),
            ),
            ResolutionAnswer::Alternative(_) => (
                ResolutionStatus::CounterRequested,
                Some(ALTERNATIVE_CHOSEN),
                alt_message.as_deref(),
            ),
        };
        r.answers.retain(|(a, _)| a != &me);
        r.answers.push((me.clone(), status));
        self.mark_changed();
        let signature = if confirmed.is_some() {
            self.sign_own_confirmation()
        } else {
            None
        };
        if let ResolutionAnswer::MakeExcuse {
            actual_reason: Some(_),
        } = &answer
        {
            self.note("declined with an excuse; the real reason stays on this device".into());
        }
        let body = Body::ResolutionResponse(ResolutionResponseBody {
            resolution_id: Some(resolution_id),
            status,
            reason_class: class.map(str::to_string),
            message_to_other_agent: message.map(str::to_string),
            alternative: chosen.as_ref().and_then(|(i, _)| u32::try_from(*i).ok()),
            signature,
            confirmations: Vec::new(),
        });
        if let Some(proposal) = &confirmed {
            self.sign_confirmation_receipt(proposal, Basis::User { prompt_id });
        }
        let _ = self.send_packet(body);
        match status {
            ResolutionStatus::Confirmed => self.check_confirmed(),
            ResolutionStatus::Declined if class == Some("user_declined") => {
                self.set_state(ThreadState::Declined, "declined by the user");
            }
            _ => self.reopen(class.unwrap_or("declined")),
        }
    }

    pub(in crate::agent) fn propose(
        &mut self,
        proposal: crate::packet::Proposal,
        actions: Vec<ActionSpec>,
    ) {
        let me = self.shared.config.address.clone();
        let t = &*self.t;
        if !matches!(
            t.state,
            ThreadState::Initiated | ThreadState::Negotiating | ThreadState::Stalled
        ) {
            // A decision taken for an earlier state of the thread (a resolution is open
            // or being carried out): proposing now would replace what both sides hold.
            self.note(format!("proposal dropped: the thread is {}", t.state));
            return;
        }
        let mut confirmers = vec![me.clone(), t.peer.clone()];
        if !t.initiator {
            confirmers.reverse();
        }
        let timeout = self.shared.config.limits.confirmation_timeout;
        let mut proposal = proposal;
        if t.version.as_deref() == Some("0.1") {
            proposal.alternatives.clear(); // feature not in 0.1 (§15.2)
        }
        let body = ResolutionBody {
            proposal,
            requires_confirmation_from: confirmers,
            actions_on_confirm: actions,
            confirmation_timeout: Some(crate::time::format_iso8601_duration(timeout)),
            on_timeout: Some("remind_then_expire".into()),
            quorum: None,
        };
        let Ok(pid) = self.send_packet(Body::Resolution(body.clone())) else {
            return;
        };
        self.open_resolution(pid, me, body);
    }

    pub(in crate::agent) fn open_resolution(
        &mut self,
        packet_id: String,
        proposer: Address,
        body: ResolutionBody,
    ) {
        let timeout = body
            .confirmation_timeout
            .as_deref()
            .and_then(crate::time::parse_iso8601_duration)
            .unwrap_or(self.shared.config.limits.confirmation_timeout)
            .min(std::time::Duration::from_secs(30 * 86_400));
        let deadline = self.shared.now.add(timeout);
        let remind_at = self.shared.now.add(timeout / 2);
        // The open prompt keeps its number when the new resolution asks the same (the
        // proposal and its actions re-sent); a different proposal is another question
        // under another number, so an answer never confirms what the user was not shown
        // under the number they answered (SPEC-NOTES "Prompts and peer text on screen").
        let open = self.t.stage.resolution().and_then(|r| {
            let same = r.body.proposal == body.proposal
                && r.body.actions_on_confirm == body.actions_on_confirm;
            r.prompt_id.map(|p| (p, same))
        });
        // A leg of a group this agent coordinates has no prompt of its own: the user
        // answers the group's one prompt (`group.rs`).
        let coordinating = self.t.coordinates(&self.shared.config.address);
        let pid = match open {
            Some((p, true)) if !coordinating => Some(p),
            Some((p, _)) => {
                self.shared.buf.prompt.push(Output::ClosePrompt(p));
                (!coordinating).then(|| self.shared.next_prompt_id())
            }
            None => (!coordinating).then(|| self.shared.next_prompt_id()),
        };
        let t = &mut *self.t;
        t.stage.set_resolution(OpenResolution {
            packet_id,
            proposer,
            body,
            answers: Vec::new(),
            deadline,
            remind_at,
            reminded: false,
            prompt_id: pid,
            signatures: Vec::new(),
        });
        t.escalated = false;
        let early: Vec<(Address, ResolutionResponseBody)> =
            std::mem::take(&mut t.held.early_answers);
        self.set_state(ThreadState::Proposed, "resolution proposed");
        if coordinating {
            self.set_waiting(Waiting::Peer);
        } else {
            self.set_waiting(Waiting::User);
            self.show_resolution_prompt(false);
        }
        let pid = self.t.stage.resolution().map(|r| r.packet_id.clone());
        for (from, b) in early {
            if b.resolution_id.is_some() && b.resolution_id == pid {
                self.on_resolution_response(&from, b);
            }
        }
    }

    pub(in crate::agent) fn show_resolution_prompt(&mut self, reminder: bool) {
        let id = self.id;
        let t = &*self.t;
        let Some(r) = t.stage.resolution() else {
            return;
        };
        let Some(pid) = r.prompt_id else { return };
        let prompt = Prompt {
            id: pid,
            thread_id: id.to_string(),
            peer: t.peer.clone(),
            intent: display::intent(&t.intent),
            kind: PromptKind::Resolution {
                proposal: display::proposal(&r.body.proposal),
                proposer: r.proposer.clone(),
                deadline: r.deadline,
                reminder,
            },
            drift: None,
        };
        self.shared.buf.prompt.push(Output::Prompt(prompt));
    }

    /// When the peer says it sent the packet `packet_id` of this thread (its `timestamp`),
    /// if the packet is in the thread's history.
    fn sent_at(&self, packet_id: &str) -> Option<Timestamp> {
        let entry = self
            .t
            .history
            .iter()
            .rev()
            .find(|e| e.packet_id == packet_id)?;
        let v: serde_json::Value = serde_json::from_str(&entry.json).ok()?;
        Timestamp::parse_rfc3339(v.get("timestamp")?.as_str()?)
    }

    pub(in crate::agent) fn on_resolution(
        &mut self,
        packet_id: String,
        from: Address,
        body: ResolutionBody,
    ) {
        let me = self.shared.config.address.clone();
        let t = &*self.t;
        if !body.requires_confirmation_from.contains(&me) {
            self.note("resolution that does not need this agent ignored".into());
            return;
        }
        if t.coordinates(&me) {
            // Only the coordinator proposes in a group (SPEC-NOTES "Group threads").
            self.note("resolution of a participant on a group leg ignored".into());
            return;
        }
        if t.group.is_some() && from != t.coordinator {
            self.note("resolution from another than the group's coordinator ignored".into());
            return;
        }
        if matches!(
            t.state,
            ThreadState::Confirmed
                | ThreadState::Executing
                | ThreadState::Failed
                | ThreadState::Rollback
        ) {
            // The proposer moved on faster than this side could undo: open it afterwards.
            // Still confirmed or executing here, the proposer's failure report is behind
            // its next proposal (the network reordered them): it comes, and the undo
            // opens this one (swarm seed 437, where it was dropped and both sides waited
            // on each other until the proposal expired). A run that completes drops it.
            let t = &mut *self.t;
            t.held.deferred_resolution = Some((packet_id, from, body));
            self.mark_changed();
            return;
        }
        if !matches!(
            t.state,
            ThreadState::Initiated
                | ThreadState::Negotiating
                | ThreadState::Stalled
                | ThreadState::Proposed
        ) {
            self.note(format!("resolution ignored in state {}", t.state));
            return;
        }
        if t.group.is_none()
            && t.initiator
            && t.state == ThreadState::Proposed
            && t.stage.resolution().is_some_and(|r| r.proposer == me)
        {
            // Both sides proposed at once (their answers to each other's requests
            // crossed). Each side would otherwise open the other's resolution and answer
            // one the other no longer holds; the initiator's stands on both (§8.1), so
            // the responder's is dropped here and superseded there (swarm seed 110).
            // Not on a group leg: there only the coordinator proposes, and a proposal of
            // this side is one it made while it coordinated, before it handed the group
            // over to the sender (federated swarm with groups, seed 181: each side
            // ignored the other's and the group waited for good).
            self.note("crossed resolution of the responder ignored; the initiator's stands".into());
            return;
        }
        if t.state == ThreadState::Proposed {
            let open = t
                .stage
                .resolution()
                .filter(|r| r.proposer == from)
                .map(|r| r.packet_id.clone());
            if let Some(open) = open {
                let older = match (self.sent_at(&packet_id), self.sent_at(&open)) {
                    (Some(new), Some(open)) => new < open,
                    _ => false,
                };
                if older {
                    // The network delivered the peer's proposals out of order: the open
                    // one replaced this one there. Opening it would answer a proposal
                    // the peer no longer holds, and each side would wait on the other
                    // (federated swarm with groups, seed 199 under other relay timings).
                    self.note(
                        "an older resolution of the peer ignored; its newer one stands".into(),
                    );
                    return;
                }
            }
        }
        if let Some(c) = self.t.consent.take() {
            if c.prompt_id != 0 {
                self.shared
                    .buf
                    .prompt
                    .push(Output::ClosePrompt(c.prompt_id));
            }
        }
        // The model was asked what to do next while negotiating; the resolution answers
        // that. Its late answer would propose over the one just opened here (large swarm,
        // seed 1).
        self.withdraw_llm("the other side's resolution came first");
        if self.t.state == ThreadState::Proposed {
            // A newer proposal replaces the open one.
            self.set_state(ThreadState::Negotiating, "superseded by a new resolution");
        }
        self.open_resolution(packet_id, from, body);
    }

    /// The proposer proposes alternative `i` of its open resolution as the main proposal
    /// (its user picked it, or the other user did with `alternative_chosen`): the open
    /// proposal is ruled out, the alternative's `details` replace the proposal's key by
    /// key, the other alternatives stay offered, the actions stay the same. Both users
    /// confirm the new resolution (SPEC-NOTES "Resolution and confirmation").
    pub(in crate::agent) fn propose_alternative(&mut self, i: usize) {
        let t = &mut *self.t;
        let Some(r) = t.stage.take_resolution() else {
            return;
        };
        let Some(alt) = r.body.proposal.alternatives.get(i).cloned() else {
            t.stage.set_resolution(r);
            return;
        };
        if let Some(pid) = r.prompt_id {
            self.shared.buf.prompt.push(Output::ClosePrompt(pid));
        }
        let old = r.body.proposal;
        t.rejected.push(Rejected {
            summary: old.summary.clone(),
            details: old.details.clone(),
            reason: ALTERNATIVE_CHOSEN.to_string(),
        });
        self.mark_changed();
        let mut details = old.details.clone();
        for (k, v) in alt.details {
            details.insert(k, v);
        }
        let alternatives = old
            .alternatives
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, a)| a.clone())
            .collect();
        let reasoning = if alt.reason.is_empty() {
            format!("Chosen instead of “{}”", old.summary)
        } else {
            format!("Chosen instead of “{}”: {}", old.summary, alt.reason)
        };
        let proposal = crate::packet::Proposal {
            summary: alt.summary,
            details,
            alternatives,
            reasoning,
        };
        self.set_state(ThreadState::Negotiating, "an alternative was chosen");
        self.propose(proposal, r.body.actions_on_confirm);
    }

    /// A proposal was declined with a reason that invites another one: rule it out and
    /// let the proposer try the next option.
    pub(in crate::agent) fn reopen(&mut self, why: &str) {
        let me = self.shared.config.address.clone();
        let t = &mut *self.t;
        let Some(r) = t.stage.take_resolution() else {
            return;
        };
        if let Some(pid) = r.prompt_id {
            self.shared.buf.prompt.push(Output::ClosePrompt(pid));
        }
        t.rejected.push(Rejected {
            summary: r.body.proposal.summary.clone(),
            details: r.body.proposal.details.clone(),
            reason: why.to_string(),
        });
        self.mark_changed();
        self.set_state(ThreadState::Negotiating, why);
        if r.proposer == me {
            self.take_turn();
        } else {
            self.set_waiting(Waiting::Peer);
        }
    }

    pub(in crate::agent) fn on_resolution_response(
        &mut self,
        from: &Address,
        b: ResolutionResponseBody,
    ) {
        if from == &self.shared.config.address {
            // Only this agent's user answers for this agent (Command::AnswerResolution).
            self.note("answer in this agent's own name ignored".into());
            return;
        }
        let t = &mut *self.t;
        let is_cancel = b.status == ResolutionStatus::Declined
            && matches!(b.reason_class.as_deref(), None | Some("user_declined"));
        if !is_cancel
            && b.resolution_id.as_ref().is_some_and(|x| {
                let deferred = t
                    .held
                    .deferred_resolution
                    .as_ref()
                    .is_some_and(|(p, _, _)| p == x);
                deferred
                    || (t.stage.resolution().is_none_or(|r| &r.packet_id != x)
                        && !t.received_ids.contains(x)
                        && !t.sent_ids.contains(x))
            })
        {
            // An answer to a resolution that has not arrived yet (the network reordered
            // them), or that waits for this side's undo to finish: kept and applied when
            // it opens, or the confirmation is lost for good.
            if t.held.early_answers.len() < 4 {
                t.held.early_answers.push((from.clone(), b));
                self.mark_changed();
            }
            return;
        }
        let Some(open_id) = t.stage.resolution().map(|r| r.packet_id.clone()) else {
            // Only a cancel closes a thread without an open resolution; a late answer to
            // a resolution already re-opened (a counter, an excuse) is stale.
            if is_cancel {
                self.close_prompts();
                self.set_state(ThreadState::Declined, "the other user closed the thread");
                self.notify(
                    NotifyKind::Declined,
                    b.message_to_other_agent
                        .unwrap_or_else(|| "The other side closed the thread.".into()),
                );
            }
            return;
        };
        let current = b.resolution_id.as_deref().is_none_or(|x| x == open_id);
        // A cancel closes its sender's side for good, whichever resolution it answers
        // (the one executing here, or a newer one this side has not opened yet).
        if is_cancel && matches!(t.state, ThreadState::Confirmed | ThreadState::Executing) {
            // The other user withdrew after this side saw every confirmation: undo what
            // was done here and close, as the other side did.
            self.withdraw_execution(
                format!("{from} withdrew"),
                |ex| ex.cancelled = true,
                NotifyKind::Declined,
                format!("{from} withdrew. Undoing what was done here."),
                "the other user withdrew",
            );
            return;
        }
        if is_cancel && matches!(t.state, ThreadState::Failed | ThreadState::Rollback) {
            // The other user withdrew while this side undoes a failed execution: close
            // once the undo is done instead of re-negotiating (swarm seed 75), also when
            // the cancel answers the proposer's next resolution, which waits for the undo
            // (swarm seed 467).
            if let Some(ex) = t.stage.execution_mut() {
                ex.cancelled = true;
                self.mark_changed();
                self.notify(
                    NotifyKind::Declined,
                    format!("{from} withdrew; the thread closes once the undo is done."),
                );
                return;
            }
        }
        if is_cancel && t.state == ThreadState::Proposed {
            // `user_declined` closes the sender's side whatever resolution it answered.
            self.close_prompts();
            self.set_state(ThreadState::Declined, "declined by the other user");
            self.notify(
                NotifyKind::Declined,
                format!(
                    "{from} declined. {}",
                    b.message_to_other_agent.unwrap_or_default()
                ),
            );
            return;
        }
        if !current || t.state != ThreadState::Proposed {
            self.note("answer to an older resolution ignored".into());
            return;
        }
        if let Err(why) = self.take_confirmations(from, &b) {
            // A forged or altered confirmation, or one of another proposal: not counted,
            // and the sender is counted as sending malformed packets (§13.4).
            self.audit(AgentEvent::ConfirmationRefused {
                peer: from.clone(),
                why: why.clone(),
            });
            self.shared
                .malformed(from, format!("resolution_response: {why}"));
            return;
        }
        let Some(r) = self.t.stage.resolution_mut() else {
            return;
        };
        r.answers.retain(|(a, _)| a != from);
        r.answers.push((from.clone(), b.status));
        self.shared.dirty.threads.insert(self.id.to_string());
        let msg = b.message_to_other_agent.clone().unwrap_or_default();
        // The other user chose one of this agent's alternatives: it is proposed as the
        // main proposal. An index this resolution does not have is an ordinary counter.
        // In a group an alternative is the coordinator's user's to choose: a
        // participant's choice counts as a counter to the group's proposal.
        let chosen = (b.status == ResolutionStatus::CounterRequested
            && b.reason_class.as_deref() == Some(ALTERNATIVE_CHOSEN)
            && r.proposer == self.shared.config.address
            && self.t.group.is_none())
        .then_some(b.alternative)
        .flatten()
        .and_then(|i| usize::try_from(i).ok())
        .and_then(|i| {
            r.body
                .proposal
                .alternatives
                .get(i)
                .map(|a| (i, a.summary.clone()))
        });
        if let Some((i, summary)) = chosen {
            self.notify(
                NotifyKind::Info,
                format!("{from} chose an alternative: {summary}. Proposing it."),
            );
            self.propose_alternative(i);
            return;
        }
        match (b.status, b.reason_class.as_deref()) {
            (ResolutionStatus::Confirmed, _) => self.check_confirmed(),
            (ResolutionStatus::Declined, Some("user_declined"))
            | (ResolutionStatus::Declined, None) => {
                self.close_prompts();
                self.set_state(ThreadState::Declined, "declined by the other user");
                self.notify(NotifyKind::Declined, format!("{from} declined. {msg}"));
            }
            (_, class) => {
                self.notify(NotifyKind::Info, format!("{from} can't do that: {msg}"));
                self.reopen(class.unwrap_or("counter_requested"));
            }
        }
    }

    /// Who the open resolution still waits for: the participants it names (this
    /// agent's user included) without a `confirmed` answer.
    pub(in crate::agent) fn missing_confirmations(&self) -> Vec<String> {
        let Some(r) = self.t.stage.resolution() else {
            return Vec::new();
        };
        let me = &self.shared.config.address;
        let mut out: Vec<String> = Vec::new();
        let leg = [me.clone(), self.t.peer.clone()];
        let named = if self.t.group.is_some() {
            &leg[..]
        } else {
            &r.body.requires_confirmation_from[..]
        };
        for a in named {
            let confirmed = r
                .answers
                .iter()
                .any(|(who, st)| who == a && *st == ResolutionStatus::Confirmed);
            let name = if a == me {
                "you".to_string()
            } else {
                a.to_string()
            };
            if !confirmed && !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }

    pub(in crate::agent) fn check_confirmed(&mut self) {
        let me = self.shared.config.address.clone();
        let t = &*self.t;
        let Some(r) = t.stage.resolution() else {
            return;
        };
        let leg_peer = t.group.as_ref().map(|_| &t.peer);
        if !confirmations_complete(r, &me, leg_peer) {
            let mine_in = r
                .answers
                .iter()
                .any(|(a, s)| a == &me && *s == ResolutionStatus::Confirmed);
            if mine_in && r.prompt_id.is_none() {
                // This user confirmed: the thread waits for the others' answers now,
                // not for this user (`thread show` names them).
                self.set_waiting(Waiting::Peer);
            }
            return;
        }
        // The coordinator's own actions run once for the group, on its lead leg.
        let acts = t
            .group
            .as_ref()
            .is_none_or(|g| !t.coordinates(&me) || g.lead);
        let mine: Vec<ActionSpec> = r
            .body
            .actions_on_confirm
            .iter()
            .filter(|a| acts && a.by.as_ref().is_none_or(|b| b == &me))
            .cloned()
            .collect();
        let summary = r.body.proposal.summary.clone();
        self.keep_agreement();
        self.set_state(
            ThreadState::Confirmed,
            "all required confirmations received",
        );
        if !self.t.coordinates(&me) {
            // A coordinator's user hears it once for the group (`group.rs`).
            self.notify(NotifyKind::Info, format!("Confirmed: {summary}"));
        }
        let t = &mut *self.t;
        t.stage.start_execution(Execution {
            mine,
            done: 0,
            in_flight: None,
            undo_queue: Vec::new(),
            peer_completed: false,
            reported: false,
            failure: None,
            cancelled: false,
            expired: false,
        });
        self.set_state(ThreadState::Executing, "executing actions");
        self.set_waiting(Waiting::Actions);
        self.next_action();
        if let Some(r) = self.t.held.early_report.take() {
            self.on_execution_report(r);
        }
    }
}

/// Whether resolution `r` has every confirmation this agent (`me`) requires before it
/// acts on it (SPEC-NOTES "Resolution and confirmation", who confirms):
///
/// 1. its own user's `confirmed`, always — whatever the resolution's quorum or list says;
///    only [`Command::AnswerResolution`] records it (answers of other agents are recorded
///    under their own authenticated address, never this agent's);
/// 2. the confirmations of the *other* participants the resolution names: all of them
///    without a quorum; with a quorum `q` (§8.3, the number of confirmations in total),
///    `q - 1` of them, this agent's user being one of the `q`. Duplicates count once.
///    On a leg of a group (`leg_peer`: the agent at its other end) only that agent's: the
///    coordinator attests the group's quorum with its own `confirmed`, and sends it to
///    a participant only once the quorum is reached (SPEC-NOTES "Group threads").
pub(in crate::agent) fn confirmations_complete(
    r: &OpenResolution,
    me: &Address,
    leg_peer: Option<&Address>,
) -> bool {
    let confirmed = |who: &Address| {
        r.answers
            .iter()
            .any(|(a, s)| a == who && *s == ResolutionStatus::Confirmed)
    };
    if !confirmed(me) {
        return false;
    }
    if let Some(peer) = leg_peer {
        return confirmed(peer);
    }
    let others: BTreeSet<&Address> = r
        .body
        .requires_confirmation_from
        .iter()
        .filter(|a| *a != me)
        .collect();
    let need = match r.body.quorum {
        Some(q) => (q as usize).saturating_sub(1).min(others.len()),
        None => others.len(),
    };
    others.iter().filter(|a| confirmed(a)).count() >= need
}
