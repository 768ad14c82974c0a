//! Confirmation for groups (§8.3): the coordinator's group resolution, its one prompt,
//! the tally against the quorum, the announcement of the outcome, expiry and reminders,
//! and what each of these does on a leg (SPEC-NOTES "Group threads", confirmation).

use serde_json::json;

use crate::agent::group::{leg_status, Group, Sequence};
use crate::agent::thread::{ThreadState, Waiting};
use crate::agent::*;

use crate::display;
use crate::negotiator::group::{Aggregation, Candidate};
use crate::packet::{
    ActionSpec, AggregatedContext, Alternative, Body, ConfirmationMode, ConfirmationOutcome,
    ConfirmationProgress, ContextBody, ParticipantEntry, ParticipantStatus, Proposal,
    ResolutionBody, ResolutionStatus,
};
use crate::receipt::agreement::Confirmation;
use crate::receipt::Basis;

impl Agent {
    pub(in crate::agent) fn propose_to_group(
        &mut self,
        gid: &str,
        agg: &Aggregation,
        told: &Aggregation,
        best: &Candidate,
        viable: &[Candidate],
    ) {
        let me = self.shared.config.address.clone();
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        // Everyone still taking part confirms; the coordinator first.
        let mut confirmers = vec![me.clone()];
        for p in &g.header.participants {
            let active = g
                .legs
                .get(p)
                .and_then(|l| self.threads.get(l))
                .is_some_and(|t| !t.state.is_terminal());
            // A sequential confirmation asks only those who can make the window; the
            // others hear the outcome (and their legs close when it goes ahead).
            let fits = !g.sequential || !best.missing.contains(p);
            if active && fits {
                confirmers.push(p.clone());
            }
        }
        let n = u32::try_from(confirmers.len()).unwrap_or(u32::MAX);
        let attending = u32::try_from(best.attendees.len()).unwrap_or(0).max(1);
        let quorum = match g.quorum {
            _ if g.sequential => None,
            Some(q) => Some(q.min(n)),
            None if attending < n => Some(attending),
            None => None,
        };
        let sequential = g.sequential;
        let required = quorum.unwrap_or(n);
        let alternatives: Vec<&Candidate> = viable
            .iter()
            .filter(|c| (c.start, c.end) != (best.start, best.end))
            .take(3)
            .collect();
        let event = display::line(&g.intent.summary, display::MAX_SHORT).into_owned();
        let mut details = window_details(best);
        details.insert("party_size".into(), json!(best.attendees.len()));
        // The combined constraints as the participants may see them: computed without
        // the values that may not be passed on (`told`).
        if let Some(b) = told
            .combined
            .budget
            .as_ref()
            .filter(|_| told.combined.budgets_read >= 3)
        {
            details.insert("budget".into(), json!(b));
        }
        if !told.combined.dietary.is_empty() {
            details.insert(
                "dietary".into(),
                json!(format!(
                    "fits everyone's dietary requirements ({})",
                    told.combined.dietary.len()
                )),
            );
        }
        let reasoning = if agg.trade_off.is_empty() {
            format!(
                "{} of {} can attend",
                best.attendees.len(),
                agg.shared_availability.len()
            )
        } else {
            agg.trade_off.clone()
        };
        let proposal = Proposal {
            summary: format!("{event} — {}", best.local),
            details,
            alternatives: alternatives
                .iter()
                .map(|c| Alternative {
                    summary: c.local.clone(),
                    reason: c.trade_off.sentence.clone(),
                    details: window_details(c),
                })
                .collect(),
            reasoning,
        };
        let mut actions = Vec::new();
        if crate::negotiator::is_meal(&g.intent, &g.local) {
            actions.push(ActionSpec {
                action: "book_table".into(),
                service: Some("restaurant_booking".into()),
                requires_user_approval: true,
                reversible: true,
                by: Some(me.clone()),
            });
        }
        actions.push(ActionSpec {
            action: "add_calendar_event".into(),
            service: None,
            requires_user_approval: true,
            reversible: true,
            by: None,
        });
        let timeout = self.shared.config.limits.confirmation_timeout;
        let body = ResolutionBody {
            proposal,
            requires_confirmation_from: confirmers.clone(),
            actions_on_confirm: actions,
            confirmation_timeout: Some(crate::time::format_iso8601_duration(timeout)),
            on_timeout: Some("remind_then_expire".into()),
            quorum,
        };
        let legs: Vec<String> = confirmers
            .iter()
            .filter_map(|p| g.legs.get(p).cloned())
            .collect();
        let alt_windows = alternatives.iter().map(|c| (c.start, c.end)).collect();
        if !sequential {
            for lid in &legs {
                let b = body.clone();
                self.in_thread(lid, |step| step.propose_on_leg(b));
            }
        }
        let prompt_id = self.shared.next_prompt_id();
        let now = self.shared.now;
        let summary = body.proposal.summary.clone();
        if let Some(g) = self.group_mut(gid) {
            g.preferred = None;
            g.flexibility = None;
            g.proposal = Some(GroupProposal {
                window: (best.start, best.end),
                alternatives: alt_windows,
                body,
                required,
                mine: None,
                prompt_id: Some(prompt_id),
                deadline: now.add(timeout),
                remind_at: now.add(timeout / 2),
                reminded: false,
                reached: false,
                lead: None,
                announced: false,
                sequence: sequential.then_some(Sequence {
                    step: 0,
                    checking: None,
                    checked: false,
                    restarts: 0,
                }),
            });
        }
        self.shared.audit(
            None,
            AgentEvent::GroupProposed {
                group_id: gid.to_string(),
                summary,
                required,
                confirmers,
            },
        );
        if sequential {
            // Everyone learns the order; the coordinator's user is asked first.
            self.announce(gid, ConfirmationOutcome::Pending, &[]);
        }
        self.show_group_prompt(gid, false);
    }

    /// Counts the group's confirmations and acts on them (§8.3).
    pub(in crate::agent) fn tally(&mut self, gid: &str) {
        let me = self.shared.config.address.clone();
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        let Some(gp) = &g.proposal else {
            return;
        };
        if gp.sequence.is_some() && !gp.reached && !self.tally_sequence(gid) {
            return;
        }
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        let Some(gp) = &g.proposal else {
            return;
        };
        let mut confirmed: Vec<Address> = Vec::new();
        let mut pending = 0u32;
        if gp.mine == Some(ResolutionStatus::Confirmed) {
            confirmed.push(me.clone());
        } else if gp.mine.is_none() {
            pending += 1;
        }
        // Participants whose confirmation the coordinator has not yet answered.
        let mut to_confirm: Vec<(Address, String)> = Vec::new();
        for l in self.leg_answers(g) {
            match l.answer {
                Some(ResolutionStatus::Confirmed) => {
                    if !l.answered_by_me {
                        to_confirm.push((l.participant.clone(), l.leg));
                    }
                    confirmed.push(l.participant);
                }
                None if l.proposed => pending += 1,
                _ => {}
            }
        }
        let n_confirmed = u32::try_from(confirmed.len()).unwrap_or(u32::MAX);
        let required = gp.required;
        let reached = gp.reached;
        let mine_confirmed = gp.mine == Some(ResolutionStatus::Confirmed);
        let mine_other = gp.mine.is_some() && !mine_confirmed;
        let summary = gp.body.proposal.summary.clone();
        if !reached && mine_confirmed && n_confirmed >= required {
            if let Some(gp) = self.group_mut(gid).and_then(|g| g.proposal.as_mut()) {
                gp.reached = true;
            }
            self.shared.audit(
                None,
                AgentEvent::GroupOutcome {
                    group_id: gid.to_string(),
                    reached: true,
                    confirmed: n_confirmed,
                    required,
                },
            );
            self.shared.notify(
                Some(gid.to_string()),
                NotifyKind::Info,
                format!(
                    "Confirmed by {n_confirmed} of {}: {}",
                    confirmed.len() as u32 + pending,
                    display::line(&summary, display::MAX_SHORT)
                ),
            );
        } else if !reached && (mine_other || n_confirmed + pending < required) {
            let text = (!mine_other).then(|| {
                format!(
                    "Not enough confirmations for “{}” ({n_confirmed} of {required} needed are possible no more); looking for another option.",
                    display::line(&summary, display::MAX_SHORT)
                )
            });
            self.give_up_proposal(gid, text);
            return;
        }
        let reached = self
            .shared
            .groups
            .get(gid)
            .and_then(|g| g.proposal.as_ref())
            .is_some_and(|p| p.reached);
        if !reached {
            return;
        }
        // Every participant's signed confirmation held, passed on to each with the
        // coordinator's own (SPEC-NOTES "Receipts of an agreement").
        let held: Vec<Confirmation> = self
            .shared
            .groups
            .get(gid)
            .map(|g| g.legs.values().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
            .iter()
            .filter_map(|l| self.threads.get(l))
            .filter_map(|t| {
                let r = t.stage.resolution()?;
                let ok = r
                    .answers
                    .iter()
                    .any(|(a, s)| a == &t.peer && *s == ResolutionStatus::Confirmed);
                ok.then(|| r.signatures.iter().find(|c| c.address == t.peer).cloned())
                    .flatten()
            })
            .collect();
        for (p, lid) in to_confirm {
            let lead = match self
                .shared
                .groups
                .get_mut(gid)
                .and_then(|g| g.proposal.as_mut())
            {
                Some(gp) if gp.lead.is_none() => {
                    gp.lead = Some(p.clone());
                    true
                }
                _ => false,
            };
            self.shared.dirty.groups.insert(gid.to_string());
            let held = held.clone();
            self.in_thread(&lid, |step| step.confirm_for_group(lead, &held));
        }
        // Participants who countered or excused themselves, or whose part of the plan
        // failed and was undone, are back to negotiating: the group went ahead without
        // them, so their legs close (otherwise both ends would wait for each other).
        let left_out: Vec<String> = self
            .shared
            .groups
            .get(gid)
            .map(|g| g.legs.values().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .filter(|l| {
                self.threads.get(l).is_some_and(|t| {
                    t.state == ThreadState::Negotiating && t.stage.resolution().is_none()
                })
            })
            .collect();
        for lid in left_out {
            let text = format!(
                "The group went ahead without you: {}",
                display::line(&summary, display::MAX_SHORT)
            );
            self.in_thread(&lid, |step| step.leave_out_of_group(text));
        }
        let announced = self
            .shared
            .groups
            .get(gid)
            .and_then(|g| g.proposal.as_ref())
            .is_some_and(|p| p.announced);
        if !announced {
            self.announce(gid, ConfirmationOutcome::Reached, &confirmed);
            if let Some(gp) = self.group_mut(gid).and_then(|g| g.proposal.as_mut()) {
                gp.announced = true;
            }
        }
    }

    /// The open proposal cannot go ahead (its quorum is out of reach, a sequential step
    /// declined, a check failed): everyone is told, the legs still proposed go back to
    /// negotiating, its window is ruled out, and the next candidate is planned. `text`
    /// tells the coordinator's user why (none when it was their own answer).
    pub(in crate::agent) fn give_up_proposal(&mut self, gid: &str, text: Option<String>) {
        let me = self.shared.config.address.clone();
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        let Some(gp) = &g.proposal else {
            return;
        };
        let mut confirmed: Vec<Address> = Vec::new();
        if gp.mine == Some(ResolutionStatus::Confirmed) {
            confirmed.push(me.clone());
        }
        let mut legs_proposed = Vec::new();
        for l in self.leg_answers(g) {
            if l.proposed {
                legs_proposed.push(l.leg);
            }
            if l.answer == Some(ResolutionStatus::Confirmed) {
                confirmed.push(l.participant);
            }
        }
        let required = gp.required;
        let window = gp.window;
        self.shared.audit(
            None,
            AgentEvent::GroupOutcome {
                group_id: gid.to_string(),
                reached: false,
                confirmed: u32::try_from(confirmed.len()).unwrap_or(u32::MAX),
                required,
            },
        );
        self.announce(gid, ConfirmationOutcome::Failed, &confirmed);
        for lid in &legs_proposed {
            self.in_thread(lid, |step| step.withdraw_group_proposal());
        }
        let prompt = self.group_mut(gid).and_then(|g| {
            g.ruled_out.push(window);
            g.proposal.take().and_then(|p| p.prompt_id)
        });
        if let Some(p) = prompt {
            self.shared.buf.prompt.push(Output::ClosePrompt(p));
        }
        if let Some(text) = text {
            self.shared
                .notify(Some(gid.to_string()), NotifyKind::Info, text);
        }
        self.plan(gid);
    }

    /// Tells every leg still open how the group's confirmation stands, with a `context`
    /// whose `aggregated_context.confirmation` carries counts and who attends (and, in a
    /// sequential confirmation, whose turn it is). Legs left without a resolution are told
    /// only in a sequential confirmation (where they wait for their turn).
    pub(in crate::agent) fn announce(
        &mut self,
        gid: &str,
        outcome: ConfirmationOutcome,
        attending: &[Address],
    ) {
        let me = self.shared.config.address.clone();
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        let Some(gp) = &g.proposal else {
            return;
        };
        let participants: Vec<ParticipantEntry> = g
            .header
            .participants
            .iter()
            .filter_map(|p| {
                let t = self.threads.get(g.legs.get(p)?)?;
                Some(ParticipantEntry {
                    agent: p.clone(),
                    status: leg_status(t),
                })
            })
            .collect();
        let answered = participants
            .iter()
            .filter(|p| p.status == ParticipantStatus::ContextReceived)
            .count();
        let (mode, next) = match &gp.sequence {
            Some(s) => (
                ConfirmationMode::Sequential,
                (outcome == ConfirmationOutcome::Pending)
                    .then(|| gp.body.requires_confirmation_from.get(s.step).cloned())
                    .flatten(),
            ),
            None if gp.body.quorum.is_some() => (ConfirmationMode::Quorum, None),
            None => (ConfirmationMode::All, None),
        };
        let required = gp.required;
        let confirmed = u32::try_from(attending.len()).unwrap_or(u32::MAX);
        let legs: Vec<String> = g.legs.values().cloned().collect();
        for lid in legs {
            self.in_thread(&lid, |step| {
                if step.t.state.is_terminal() {
                    return;
                }
                let rid = step
                    .t
                    .stage
                    .resolution()
                    .filter(|r| r.proposer == me)
                    .map(|r| r.packet_id.clone());
                if rid.is_none() && mode != ConfirmationMode::Sequential {
                    return;
                }
                let view = AggregatedContext {
                    of: u32::try_from(participants.len()).unwrap_or(0),
                    answered: u32::try_from(answered).unwrap_or(0),
                    participants: participants.clone(),
                    availability_overlap: None,
                    combined: None,
                    confirmation: Some(ConfirmationProgress {
                        resolution_id: rid,
                        mode,
                        required,
                        confirmed,
                        outcome,
                        attending: attending.to_vec(),
                        next: next.clone(),
                    }),
                };
                let body = Body::Context(ContextBody {
                    aggregated_context: Some(view.to_value()),
                    ..Default::default()
                });
                let _ = step.send_packet(body);
            });
        }
    }

    /// The coordinator's user answered the group's resolution prompt.
    pub(in crate::agent) fn answer_group_resolution(
        &mut self,
        gid: &str,
        answer: ResolutionAnswer,
    ) {
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        let Some(gp) = &g.proposal else {
            return;
        };
        if let ResolutionAnswer::Alternative(i) = &answer {
            let Some(w) = gp.alternatives.get(*i).copied() else {
                self.shared.note(
                    None,
                    format!(
                        "alternative {} of the group's proposal does not exist",
                        i + 1
                    ),
                );
                return;
            };
            if let Some(g) = self.group_mut(gid) {
                g.preferred = Some(w);
            }
        }
        if answer == ResolutionAnswer::Decline {
            self.cancel_group(gid);
            return;
        }
        let status = match answer {
            ResolutionAnswer::Confirm => ResolutionStatus::Confirmed,
            ResolutionAnswer::MakeExcuse { .. } => ResolutionStatus::Declined,
            _ => ResolutionStatus::CounterRequested,
        };
        if let Some(gp) = self.group_mut(gid).and_then(|g| g.proposal.as_mut()) {
            gp.mine = Some(status);
            gp.prompt_id = None;
        }
        let word = match status {
            ResolutionStatus::Confirmed => "confirmed",
            ResolutionStatus::Declined => "declined with an excuse",
            _ => "asked for something else",
        };
        self.shared.note(
            None,
            format!("the user answered the group's proposal: {word}"),
        );
    }

    /// The coordinator's user closes the group: every leg is cancelled.
    pub(in crate::agent) fn cancel_group(&mut self, gid: &str) {
        let Some(g) = self.group_mut(gid) else {
            return;
        };
        g.closed = true;
        let prompt = g.proposal.as_mut().and_then(|p| p.prompt_id.take());
        let legs: Vec<String> = g.legs.values().cloned().collect();
        if let Some(p) = prompt {
            self.shared.buf.prompt.push(Output::ClosePrompt(p));
        }
        for lid in legs {
            self.in_thread(&lid, |step| step.cancel_thread());
        }
        self.shared.notify(
            Some(gid.to_string()),
            NotifyKind::Declined,
            "The group thread is closed; every participant was told.".into(),
        );
    }

    pub(in crate::agent) fn show_group_prompt(&mut self, gid: &str, reminder: bool) {
        let me = self.shared.config.address.clone();
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        let Some(gp) = &g.proposal else { return };
        let Some(pid) = gp.prompt_id else { return };
        let prompt = Prompt {
            id: pid,
            thread_id: gid.to_string(),
            peer: me.clone(),
            intent: display::intent(&g.intent),
            kind: PromptKind::Resolution {
                proposal: display::proposal(&gp.body.proposal),
                proposer: me,
                deadline: gp.deadline,
                reminder,
            },
            drift: None,
        };
        self.shared.buf.prompt.push(Output::Prompt(prompt));
    }

    /// The groups' own timers: the reminder of the coordinator's prompt and the group's
    /// expiry (each leg expires on its own deadline too).
    pub(in crate::agent) fn group_timeouts(&mut self) {
        let now = self.shared.now;
        let due: Vec<String> = self
            .shared
            .groups
            .values()
            .filter(|g| !g.closed)
            .filter(|g| {
                g.proposal.as_ref().is_some_and(|p| {
                    !p.reached && (p.deadline <= now || (!p.reminded && p.remind_at <= now))
                })
            })
            .map(|g| g.id.clone())
            .collect();
        for gid in due {
            let Some(gp) = self
                .shared
                .groups
                .get(&gid)
                .and_then(|g| g.proposal.clone())
            else {
                continue;
            };
            if gp.deadline <= now {
                let prompt = self.group_mut(&gid).and_then(|g| {
                    g.closed = true;
                    g.proposal.as_mut().and_then(|p| p.prompt_id.take())
                });
                if let Some(p) = prompt {
                    self.shared.buf.prompt.push(Output::ClosePrompt(p));
                }
                // Legs still proposed expire on their own deadline (the same instant);
                // a leg sent back to negotiating (its participant countered) ends with
                // the group too, or both ends would wait for each other.
                let legs: Vec<String> = self
                    .shared
                    .groups
                    .get(&gid)
                    .map(|g| g.legs.values().cloned().collect())
                    .unwrap_or_default();
                for lid in legs {
                    self.in_thread(&lid, |step| step.expire_with_group());
                }
                self.shared.notify(
                    Some(gid.clone()),
                    NotifyKind::Expired,
                    format!(
                        "“{}” expired: not enough confirmations in time ({} needed). Every participant was told.",
                        display::line(&gp.body.proposal.summary, display::MAX_SHORT),
                        gp.required
                    ),
                );
            } else {
                if let Some(p) = self.group_mut(&gid).and_then(|g| g.proposal.as_mut()) {
                    p.reminded = true;
                }
                if gp.mine.is_none() {
                    self.show_group_prompt(&gid, true);
                    self.shared.notify(
                        Some(gid.clone()),
                        NotifyKind::Info,
                        "Reminder: a group proposal is waiting for your answer.".into(),
                    );
                } else {
                    self.shared.notify(
                        Some(gid.clone()),
                        NotifyKind::Info,
                        format!(
                            "Reminder: “{}” still waits for confirmations; it expires if not enough come in time.",
                            display::line(&gp.body.proposal.summary, display::MAX_SHORT)
                        ),
                    );
                }
            }
        }
    }
}

/// One participant's standing on the group's open resolution, on the coordinator's side
/// of its leg.
pub(in crate::agent) struct LegAnswer {
    /// The participant.
    pub participant: Address,
    /// Its leg.
    pub leg: String,
    /// The coordinator's side of the leg is PROPOSED.
    pub proposed: bool,
    /// The participant's latest answer to the resolution, if any.
    pub answer: Option<ResolutionStatus>,
    /// The coordinator answered it already (its `confirmed` went out).
    pub answered_by_me: bool,
}

impl Agent {
    /// Every leg holding the coordinator's resolution, in the group's order, with its
    /// participant's answer.
    pub(in crate::agent) fn leg_answers(&self, g: &Group) -> Vec<LegAnswer> {
        let me = &self.shared.config.address;
        g.header
            .participants
            .iter()
            .filter_map(|p| {
                let leg = g.legs.get(p)?;
                let t = self.threads.get(leg)?;
                let r = t.stage.resolution().filter(|r| &r.proposer == me)?;
                Some(LegAnswer {
                    participant: p.clone(),
                    leg: leg.clone(),
                    proposed: t.state == ThreadState::Proposed,
                    answer: r.answers.iter().rev().find(|(a, _)| a == p).map(|x| x.1),
                    answered_by_me: r.answers.iter().any(|(a, _)| a == me),
                })
            })
            .collect()
    }
}

impl Shared {
    /// The next time a group's own timer fires.
    pub(in crate::agent) fn group_deadline(&self, g: &Group) -> Option<Timestamp> {
        if g.closed {
            return None;
        }
        let p = g.proposal.as_ref().filter(|p| !p.reached)?;
        Some(if p.reminded {
            p.deadline
        } else {
            p.remind_at.min(p.deadline)
        })
    }
}

impl ThreadStep<'_> {
    /// The coordinator proposes the group's resolution on this leg (a newer one replaces
    /// the leg's open one).
    pub(in crate::agent) fn propose_on_leg(&mut self, body: ResolutionBody) {
        let me = self.shared.config.address.clone();
        if self.t.state == ThreadState::Proposed {
            self.withdraw_group_proposal();
        }
        if !matches!(
            self.t.state,
            ThreadState::Initiated | ThreadState::Negotiating | ThreadState::Stalled
        ) {
            return;
        }
        let Ok(pid) = self.send_packet(Body::Resolution(body.clone())) else {
            return;
        };
        self.open_resolution(pid, me, body);
    }

    /// The group's proposal no longer stands on this leg (the coordinator's side): back
    /// to negotiating; the participant learns it from the next resolution or the
    /// announcement.
    pub(in crate::agent) fn withdraw_group_proposal(&mut self) {
        if self.t.state != ThreadState::Proposed {
            return;
        }
        let _ = self.t.stage.take_resolution();
        self.mark_changed();
        self.set_state(
            ThreadState::Negotiating,
            "the group's proposal was withdrawn",
        );
        self.set_waiting(Waiting::Nothing);
    }

    /// The coordinator's side: the group's confirmation timeout passed while this leg was
    /// back to negotiating; it ends EXPIRED at both ends (`thread_state`).
    pub(in crate::agent) fn expire_with_group(&mut self) {
        if !matches!(
            self.t.state,
            ThreadState::Negotiating | ThreadState::Stalled
        ) {
            return;
        }
        self.close_prompts();
        self.set_state(ThreadState::Expired, "the group's confirmation timeout");
        self.send_thread_state();
    }

    /// The coordinator's side: the group went ahead without this leg's participant
    /// (it countered or excused itself, or its part failed and was undone). The leg
    /// closes on both ends with a cancel that says so.
    pub(in crate::agent) fn leave_out_of_group(&mut self, text: String) {
        if self.t.state != ThreadState::Negotiating {
            return;
        }
        let _ = self.send_packet(Body::ResolutionResponse(
            crate::packet::ResolutionResponseBody {
                resolution_id: None,
                status: ResolutionStatus::Declined,
                reason_class: Some("user_declined".into()),
                message_to_other_agent: Some(text),
                alternative: None,
                signature: None,
                confirmations: Vec::new(),
            },
        ));
        self.close_prompts();
        self.set_state(
            ThreadState::Declined,
            "the group went ahead without this participant",
        );
    }

    /// The group reached its quorum and this leg's participant confirmed: the
    /// coordinator's `confirmed` goes to it, signed, with the other participants' signed
    /// confirmations `held`, and the leg goes CONFIRMED here. `lead`: this leg carries the
    /// coordinator's own actions for the group.
    pub(in crate::agent) fn confirm_for_group(&mut self, lead: bool, held: &[Confirmation]) {
        let me = self.shared.config.address.clone();
        if self.t.stage.resolution().is_none() {
            return;
        }
        self.add_confirmations(held);
        let signature = self.sign_own_confirmation();
        let peer = self.t.peer.clone();
        let passed_on: Vec<Confirmation> = self
            .held_confirmations()
            .into_iter()
            .filter(|c| c.address != me && c.address != peer)
            .collect();
        let Some(r) = self.t.stage.resolution_mut() else {
            return;
        };
        r.answers.retain(|(a, _)| a != &me);
        r.answers.push((me, ResolutionStatus::Confirmed));
        let rid = r.packet_id.clone();
        let proposal = r.body.clone();
        // The user confirmed at the group's prompt (SPEC-NOTES "Consent receipts").
        self.sign_confirmation_receipt(&proposal, Basis::User { prompt_id: 0 });
        if let Some(g) = self.t.group.as_mut() {
            g.flexibility = None;
            g.lead = lead;
        }
        self.mark_changed();
        let _ = self.send_packet(Body::ResolutionResponse(
            crate::packet::ResolutionResponseBody {
                resolution_id: Some(rid),
                status: ResolutionStatus::Confirmed,
                reason_class: None,
                message_to_other_agent: None,
                alternative: None,
                signature,
                confirmations: passed_on,
            },
        ));
        self.check_confirmed();
    }
}

/// A candidate window as proposal details.
fn window_details(c: &Candidate) -> Context {
    let mut d = Context::new();
    let iso = |s: i64| {
        chrono::DateTime::from_timestamp(s, 0)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_default()
    };
    d.insert("start_utc".into(), json!(iso(c.start)));
    d.insert("end_utc".into(), json!(iso(c.end)));
    // No `duration`: start and end say it, and an ISO duration equal to the one a
    // participant stated would read as that participant's value.
    d.insert("when".into(), json!(c.local));
    d
}
