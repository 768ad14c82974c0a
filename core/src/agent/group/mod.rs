//! Multi-party coordination (§10, §8.3): a group thread is a star of two-party legs
//! around its coordinator (SPEC-NOTES "Group threads").
//!
//! The coordinator keeps a [`Group`] record beside its legs. After every input the
//! groups whose legs changed take one step ([`Agent::step_groups`]):
//!
//! 1. **gathering** — until every participant answered (or went quiet past the staleness
//!    timeout, or left), nothing is decided;
//! 2. **aggregating** — [`aggregate`] over what each participant shared *with the
//!    coordinator*; when no window fits everyone, the binding constraint's owner alone
//!    gets a targeted flexibility request, once;
//! 3. **proposing** (`group_confirmation.rs`) — the best candidate goes to every leg as a resolution naming the
//!    whole group, with a quorum when the candidate leaves someone out or the user set
//!    one; the coordinator's user answers one prompt for the group;
//! 4. **tallying** — once the confirmations (the coordinator's user's always among them)
//!    reach the quorum, each confirmed participant gets the coordinator's `confirmed`,
//!    which is what makes its leg CONFIRMED; late confirmers join the same way; when the
//!    quorum is out of reach, the candidate is ruled out and the next one proposed.
//!
//! A participant's leg is an ordinary thread that only answers: its tiers decide what
//! the coordinator gets, it never proposes, and it goes CONFIRMED on its own user's
//! confirmation and the coordinator's.

pub(super) mod confirmation;
pub(super) mod sequence;
pub(super) mod transfer;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::negotiation::usage::passable;
use super::thread::packets::blank_thread;
use super::thread::{GroupLeg, Thread, ThreadState, Waiting};
use super::*;

use crate::crypto::thread_tag;
use crate::display;
use crate::negotiator::group::{aggregate, Aggregation, Candidate, GroupView, Member};
use crate::packet::{
    AggregatedContext, Body, ConfirmationOutcome, ContextBody, Escalation, GroupHeader, Intent,
    ParticipantStatus, ResolutionBody, ResolutionStatus, MAX_GROUP_PARTICIPANTS,
};

/// A group thread this agent coordinates (persisted as `group/<id>`). Its legs are
/// threads of their own; this record holds what spans them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// The group's id (`grp_…`).
    pub id: String,
    /// The header every leg carries: coordinator, epoch, participants (coordinator first).
    pub header: GroupHeader,
    /// What it is about.
    pub intent: Intent,
    /// What the user gave when starting it.
    pub local: Context,
    /// Confirmations the user asked for in total (`None`: the proposal decides).
    pub quorum: Option<u32>,
    /// Confirmations are asked one after the other (§8.3 sequential confirmation).
    #[serde(default)]
    pub sequential: bool,
    /// Each participant's leg: participant → thread id.
    pub legs: BTreeMap<Address, String>,
    /// The flexibility request waiting for its answer.
    #[serde(default)]
    pub flexibility: Option<FlexibilityAsked>,
    /// Who was already asked to be flexible (each at most once).
    #[serde(default)]
    pub flexibility_asked: BTreeSet<Address>,
    /// Windows ruled out (declined, countered, or failed their quorum), UTC seconds.
    #[serde(default)]
    pub ruled_out: Vec<(i64, i64)>,
    /// A window the user picked among the alternatives: proposed next.
    #[serde(default)]
    pub preferred: Option<(i64, i64)>,
    /// The open group resolution.
    #[serde(default)]
    pub proposal: Option<GroupProposal>,
    /// No candidate is left: the users decide (§6.4 escalation).
    #[serde(default)]
    pub escalated: bool,
    /// Every leg ended, or the user closed the group, or it was handed over.
    #[serde(default)]
    pub closed: bool,
    /// A handover offered and not answered yet: the header it would give the group.
    #[serde(default)]
    pub transfer: Option<GroupHeader>,
}

impl Group {
    /// A group about to be gathered: nothing asked, proposed or ruled out yet.
    pub(super) fn new(
        header: GroupHeader,
        intent: Intent,
        local: Context,
        confirmation: GroupConfirmation,
        legs: BTreeMap<Address, String>,
    ) -> Group {
        Group {
            id: header.group_id.clone(),
            header,
            intent,
            local,
            quorum: match confirmation {
                GroupConfirmation::Quorum(q) => Some(q),
                _ => None,
            },
            sequential: confirmation == GroupConfirmation::Sequential,
            legs,
            flexibility: None,
            flexibility_asked: BTreeSet::new(),
            ruled_out: Vec::new(),
            preferred: None,
            proposal: None,
            escalated: false,
            closed: false,
            transfer: None,
        }
    }
}

/// A flexibility request sent and not yet answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlexibilityAsked {
    /// Who was asked.
    pub to: Address,
    /// Packets received on that leg when it was asked: any later one is its answer.
    pub received: u32,
}

/// A resolution proposed to the whole group (§8.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupProposal {
    /// The window proposed, UTC seconds.
    pub window: (i64, i64),
    /// Alternatives offered with it, UTC seconds, in the proposal's order.
    pub alternatives: Vec<(i64, i64)>,
    /// The resolution sent on every leg (each leg's packet has its own id).
    pub body: ResolutionBody,
    /// Confirmations needed, the coordinator's user's included.
    pub required: u32,
    /// The coordinator's user's answer.
    pub mine: Option<ResolutionStatus>,
    /// The coordinator's user's open prompt.
    pub prompt_id: Option<u64>,
    /// When confirmations are due.
    pub deadline: Timestamp,
    /// When the reminder goes out.
    pub remind_at: Timestamp,
    /// Whether the reminder went out.
    pub reminded: bool,
    /// The quorum was reached: confirmed participants were told.
    pub reached: bool,
    /// The leg whose execution carries the coordinator's own actions (once for the group).
    pub lead: Option<Address>,
    /// The outcome was announced on every leg.
    pub announced: bool,
    /// Sequential confirmation: where the steps stand (`None`: all or quorum).
    #[serde(default)]
    pub sequence: Option<Sequence>,
}

/// The steps of a sequential confirmation (§8.3): the confirmers of
/// `requires_confirmation_from` are asked one at a time, the coordinator's user first; once a
/// step confirmed, the coordinator checks its own actions before it asks the next one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sequence {
    /// Index in `requires_confirmation_from` of the confirmer asked now.
    pub step: usize,
    /// The check in flight after the current step confirmed: its action id.
    pub checking: Option<u64>,
    /// The current step confirmed and its check (if any) came back: the next is asked.
    pub checked: bool,
    /// Times a check changed what an earlier confirmer had confirmed (each time the
    /// sequence starts again; bounded by [`MAX_SEQUENCE_RESTARTS`]).
    pub restarts: u32,
}

/// How often a sequential confirmation starts again because a check changed what an
/// earlier confirmer saw, before the candidate is given up.
pub const MAX_SEQUENCE_RESTARTS: u32 = 2;

/// Where one participant of a group stands, as the coordinator sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupMember {
    /// The participant.
    pub agent: Address,
    /// The spec's status: `context_received`, `awaiting_response`, `unreachable`, `declined`.
    pub status: ParticipantStatus,
    /// Its leg's id and state.
    pub thread_id: String,
    /// Its leg's state.
    pub state: ThreadState,
}

impl Agent {
    /// The group threads this agent coordinates, by id.
    pub fn groups(&self) -> &BTreeMap<String, Group> {
        &self.shared.groups
    }

    /// Every participant of group `id` with its status and leg, in the header's order.
    pub fn group_members(&self, id: &str) -> Vec<GroupMember> {
        let Some(g) = self.shared.groups.get(id) else {
            return Vec::new();
        };
        g.header
            .participants
            .iter()
            .filter_map(|p| {
                let lid = g.legs.get(p)?;
                let t = self.threads.get(lid)?;
                Some(GroupMember {
                    agent: p.clone(),
                    status: leg_status(t),
                    thread_id: lid.clone(),
                    state: t.state,
                })
            })
            .collect()
    }

    /// Starts a group thread ([`Command::StartGroupThread`]) and returns its id, or
    /// `None` when the command was refused (the refusal is notified).
    pub fn start_group_thread(
        &mut self,
        now: Timestamp,
        participants: Vec<Address>,
        intent: Intent,
        context: Context,
        confirmation: GroupConfirmation,
    ) -> Option<String> {
        let before: BTreeSet<String> = self.shared.groups.keys().cloned().collect();
        self.handle(
            now,
            Input::Command(Command::StartGroupThread {
                participants,
                intent,
                context,
                confirmation,
            }),
        );
        self.shared
            .groups
            .keys()
            .find(|k| !before.contains(*k))
            .cloned()
    }

    pub(super) fn open_group_thread(
        &mut self,
        participants: Vec<Address>,
        intent: Intent,
        context: Context,
        confirmation: GroupConfirmation,
    ) {
        let me = self.shared.config.address.clone();
        let mut others: Vec<Address> = Vec::new();
        for p in participants {
            if !others.contains(&p) {
                others.push(p);
            }
        }
        let refusal = if others.is_empty() {
            Some("A group thread needs at least one other agent.".to_string())
        } else if others.len() + 1 > MAX_GROUP_PARTICIPANTS {
            Some(format!(
                "A group thread has at most {MAX_GROUP_PARTICIPANTS} participants, this agent included."
            ))
        } else if others.contains(&me) {
            Some("This agent coordinates the group; list only the others.".to_string())
        } else if let Some(b) = others
            .iter()
            .find(|p| self.shared.settings.blocked.contains(*p))
        {
            Some(format!("{b} is blocked; unblock it first."))
        } else if matches!(confirmation, GroupConfirmation::Quorum(q) if q == 0 || q as usize > others.len() + 1)
        {
            Some(format!(
                "A quorum counts between 1 and {} confirmations (everyone, you included).",
                others.len() + 1
            ))
        } else {
            None
        };
        if let Some(text) = refusal {
            self.shared.notify(None, NotifyKind::Info, text);
            return;
        }
        let gid = self.shared.meta.rng.id("grp_", 12);
        let mut everyone = vec![me.clone()];
        everyone.extend(others.iter().cloned());
        let header = GroupHeader {
            group_id: gid.clone(),
            coordinator: me.clone(),
            epoch: 0,
            participants: everyone.clone(),
        };
        let mut legs = BTreeMap::new();
        for p in &others {
            let leg = GroupLeg::new(header.clone());
            let id = self.create_thread(p, intent.clone(), context.clone(), Some(leg));
            legs.insert(p.clone(), id);
        }
        self.shared.groups.insert(
            gid.clone(),
            Group::new(header, intent, context, confirmation, legs.clone()),
        );
        self.shared.dirty.groups.insert(gid.clone());
        if let Some(first) = legs.values().next() {
            self.shared.group_begun(first, &me);
        }
        self.shared.audit(
            None,
            AgentEvent::GroupStarted {
                group_id: gid,
                participants: everyone,
            },
        );
        for p in &others {
            if let Some(id) = legs.get(p) {
                self.in_thread(id, |step| step.send_first_packet());
            }
        }
    }

    /// Creates a thread this agent opens (a two-party thread, or a leg of a group it
    /// coordinates) and returns its id; its first packet is the caller's to send.
    pub(super) fn create_thread(
        &mut self,
        to: &Address,
        intent: Intent,
        context: Context,
        group: Option<GroupLeg>,
    ) -> String {
        let id = self.shared.meta.rng.id("thr_", 12);
        self.shared.dirty.meta = true;
        let two_party = group.is_none();
        let session = new_session(&mut self.shared.meta.rng);
        let mut t = blank_thread(
            &id,
            to,
            true,
            intent,
            session,
            self.shared.now,
            &self.shared.config.address,
        );
        t.user_initiated = true;
        t.local = context;
        t.group = group;
        self.shared
            .tags
            .insert((to.clone(), thread_tag(&id)), id.clone());
        self.threads.insert(id.clone(), t);
        self.shared
            .audit(Some(&id), AgentEvent::ThreadStarted { with: to.clone() });
        if two_party {
            self.shared.thread_begun(&id, to);
        }
        id
    }

    /// One step of every open group one of whose legs changed with this input (or that
    /// changed itself). Called once per input, before its outputs are released.
    pub(super) fn step_groups(&mut self) {
        if self.shared.groups.is_empty() {
            return;
        }
        let touched: Vec<String> = self
            .shared
            .groups
            .values()
            .filter(|g| !g.closed)
            .filter(|g| {
                self.shared.dirty.groups.contains(&g.id)
                    || g.legs
                        .values()
                        .any(|l| self.shared.dirty.threads.contains(l))
            })
            .map(|g| g.id.clone())
            .collect();
        for gid in touched {
            self.step_group(&gid);
        }
    }

    pub(super) fn group_mut(&mut self, gid: &str) -> Option<&mut Group> {
        self.shared.dirty.groups.insert(gid.to_string());
        self.shared.groups.get_mut(gid)
    }

    fn step_group(&mut self, gid: &str) {
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        if g.closed {
            return;
        }
        let legs: Vec<&Thread> = g
            .legs
            .values()
            .filter_map(|l| self.threads.get(l))
            .collect();
        if legs.iter().all(|t| t.state.is_terminal()) {
            let summary = display::line(&g.intent.summary, display::MAX_SHORT).into_owned();
            let prompt = self.group_mut(gid).and_then(|g| {
                g.closed = true;
                g.proposal.as_mut().and_then(|p| p.prompt_id.take())
            });
            if let Some(p) = prompt {
                self.shared.buf.prompt.push(Output::ClosePrompt(p));
            }
            self.shared.notify(
                Some(gid.to_string()),
                NotifyKind::Info,
                format!("The group thread “{summary}” has ended for every participant."),
            );
            return;
        }
        if g.proposal.is_some() {
            self.tally(gid);
            return;
        }
        if g.escalated {
            return;
        }
        self.plan(gid);
    }

    /// Gathering and aggregating: waits for every participant, asks the binding
    /// constraint's owner once, then proposes the best candidate left.
    pub(super) fn plan(&mut self, gid: &str) {
        let me = self.shared.config.address.clone();
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        if let Some(f) = &g.flexibility {
            let waiting = g
                .legs
                .get(&f.to)
                .and_then(|l| self.threads.get(l))
                .is_some_and(|t| {
                    !t.state.is_terminal()
                        && t.state != ThreadState::Stalled
                        && received_count(t) <= f.received
                });
            if waiting {
                return;
            }
        }
        let members = self.group_members_view(g, false);
        if members
            .values()
            .any(|m| m.status == ParticipantStatus::AwaitingResponse)
        {
            return;
        }
        if members
            .values()
            .all(|m| m.status == ParticipantStatus::Declined)
        {
            return; // every leg ends; step_group closes the group
        }
        let mine = self.group_mine(g);
        let view = GroupView {
            intent: &g.intent,
            coordinator: &me,
            mine: &mine,
            members: &members,
        };
        let agg = aggregate(&view);
        // What is sent to the participants is computed without the values that may not
        // be passed on (SPEC-NOTES "Usage rules"); the choice itself uses everything.
        let outward = self.group_members_view(g, true);
        let told_view = GroupView {
            members: &outward,
            ..view
        };
        let told_agg = (outward != members).then(|| aggregate(&told_view));
        let told = told_agg.as_ref().unwrap_or(&agg);
        let shared_view = told.aggregated_context(&told_view);
        let viable: Vec<Candidate> = agg
            .candidates
            .iter()
            .filter(|c| !g.ruled_out.contains(&(c.start, c.end)))
            .cloned()
            .collect();
        let everyone_fits = viable.first().is_some_and(|c| c.missing.is_empty());
        if !everyone_fits {
            if let Some(req) = told.flexibility_request.as_ref().filter(|r| {
                r.to != me && !g.flexibility_asked.contains(&r.to) && g.legs.contains_key(&r.to)
            }) {
                let req = req.clone();
                self.ask_flexibility(gid, &req, &shared_view);
                return;
            }
        }
        let preferred = g.preferred;
        let best = preferred
            .and_then(|w| viable.iter().find(|c| (c.start, c.end) == w))
            .or_else(|| viable.first())
            .cloned();
        match best {
            Some(best) => {
                let told = told.clone();
                self.propose_to_group(gid, &agg, &told, &best, &viable)
            }
            None => self.escalate_group(gid, &agg),
        }
    }

    /// Every participant as the aggregation sees it: its status and what it shared with
    /// this agent on its leg — only what may be passed on when `outward`.
    pub(super) fn group_members_view(&self, g: &Group, outward: bool) -> BTreeMap<Address, Member> {
        g.legs
            .iter()
            .filter_map(|(p, l)| {
                let t = self.threads.get(l)?;
                Some((
                    p.clone(),
                    Member {
                        status: leg_status(t),
                        shared: if outward {
                            passable(&t.theirs, &t.usage)
                        } else {
                            t.theirs.clone()
                        },
                    },
                ))
            })
            .collect()
    }

    /// The coordinator's own values for the aggregation: its profile and what its user
    /// gave for this group. They are never sent as they are: only what the aggregation
    /// derives from them.
    pub(super) fn group_mine(&self, g: &Group) -> Context {
        let mut m = self.shared.config.profile.clone();
        m.extend(g.local.clone());
        m
    }

    fn ask_flexibility(
        &mut self,
        gid: &str,
        req: &crate::negotiator::group::TargetedRequest,
        shared_view: &AggregatedContext,
    ) {
        let Some(lid) = self
            .shared
            .groups
            .get(gid)
            .and_then(|g| g.legs.get(&req.to))
            .cloned()
        else {
            return;
        };
        let received = self.threads.get(&lid).map(received_count).unwrap_or(0);
        let body = Body::Context(ContextBody {
            aggregated_context: Some(shared_view.to_value()),
            flexibility_request: Some(req.request.clone()),
            needs: vec![req.need()],
            ..Default::default()
        });
        self.in_thread(&lid, |step| {
            step.t.asked.remove(&req.request.field);
            step.t.peer_unavailable.remove(&req.request.field);
            step.send_then_wait(body, Vec::new());
        });
        if let Some(g) = self.group_mut(gid) {
            g.flexibility = Some(FlexibilityAsked {
                to: req.to.clone(),
                received,
            });
            g.flexibility_asked.insert(req.to.clone());
        }
        self.shared.audit(
            None,
            AgentEvent::FlexibilityRequested {
                group_id: gid.to_string(),
                to: req.to.clone(),
                field: req.request.field.clone(),
            },
        );
        self.shared.notify(
            Some(gid.to_string()),
            NotifyKind::Info,
            display::line(&req.summary, display::MAX_LONG).into_owned(),
        );
    }

    fn escalate_group(&mut self, gid: &str, agg: &Aggregation) {
        let Some(g) = self.shared.groups.get(gid) else {
            return;
        };
        let reason = if agg.shared_availability.len() < 2 {
            "Not enough availability was shared to find a time for the group".to_string()
        } else {
            "No time is left that the group can make".to_string()
        };
        let summary = format!(
            "{} of {} shared availability; {} window(s) ruled out",
            agg.shared_availability.len(),
            g.header.participants.len(),
            g.ruled_out.len()
        );
        let legs: Vec<String> = g.legs.values().cloned().collect();
        let event = display::line(&g.intent.summary, display::MAX_SHORT).into_owned();
        for lid in &legs {
            let body = Body::Context(ContextBody {
                escalation: Some(Escalation {
                    recommend: "surface_to_users".into(),
                    reason: reason.clone(),
                    suggested_prompt: Some(summary.clone()),
                }),
                ..Default::default()
            });
            self.in_thread(lid, |step| {
                if step.t.state.is_terminal() {
                    return;
                }
                let _ = step.send_packet(body);
                step.t.escalated = true;
                step.set_waiting(Waiting::User);
            });
        }
        if let Some(g) = self.group_mut(gid) {
            g.escalated = true;
        }
        self.shared.audit(
            None,
            AgentEvent::Escalated {
                reason: reason.clone(),
            },
        );
        self.shared.notify(
            Some(gid.to_string()),
            NotifyKind::Escalated,
            format!("I need your input on “{event}”: {reason}. {summary}"),
        );
    }
}

impl ThreadStep<'_> {
    /// A participant's side: the coordinator's `context` on a group leg. A flexibility
    /// request opens its field again for this user (who is always asked: giving way is
    /// the user's call, whatever the tier); an announced outcome is told to the user.
    pub(super) fn on_group_context(&mut self, b: &ContextBody) {
        let me = self.shared.config.address.clone();
        if !self.t.in_group_of_other(&me) {
            return;
        }
        if let Some(fr) = &b.flexibility_request {
            if b.needs.iter().any(|n| n.field == fr.field) {
                self.t.answered.remove(&fr.field);
                if let Some(g) = self.t.group.as_mut() {
                    g.flexibility = Some(fr.clone());
                }
                self.mark_changed();
            }
        }
        let progress = b
            .aggregated_context
            .as_ref()
            .and_then(|v| AggregatedContext::from_value(v).ok())
            .and_then(|a| a.confirmation);
        if let Some(c) = progress {
            let text = match c.outcome {
                ConfirmationOutcome::Reached => Some(format!(
                    "The group confirmed: {} of {} needed.",
                    c.confirmed, c.required
                )),
                ConfirmationOutcome::Failed => Some(
                    "The group's proposal did not get enough confirmations; the coordinator looks for another option."
                        .to_string(),
                ),
                _ => None,
            };
            if let Some(text) = text {
                self.notify(NotifyKind::Info, text);
            }
        }
    }

    /// What "Share" would share for `field` in a consent prompt: the window (or budget)
    /// a flexibility request asks about, else the thread's or the profile's value.
    pub(super) fn suggested(&self, field: &str) -> Option<Value> {
        if let Some(fr) = self
            .t
            .group
            .as_ref()
            .and_then(|g| g.flexibility.as_ref())
            .filter(|f| f.field == field)
        {
            if let Some(w) = &fr.window {
                return Some(json!([{"start": w.start, "end": w.end}]));
            }
            if let Some(b) = &fr.budget {
                return Some(json!(b));
            }
        }
        self.t
            .local
            .get(field)
            .or_else(|| self.shared.config.profile.get(field))
            .cloned()
    }

    /// Whether `field` is the one an open flexibility request asks about.
    pub(super) fn flexibility_asks(&self, field: &str) -> bool {
        self.t
            .group
            .as_ref()
            .and_then(|g| g.flexibility.as_ref())
            .is_some_and(|f| f.field == field)
    }
}

/// The spec's status of a participant, from its leg on the coordinator's side.
pub(super) fn leg_status(t: &Thread) -> ParticipantStatus {
    if matches!(t.state, ThreadState::Declined | ThreadState::Expired) {
        return ParticipantStatus::Declined;
    }
    if t.state == ThreadState::Stalled {
        return ParticipantStatus::Unreachable;
    }
    if received_count(t) > 0 {
        ParticipantStatus::ContextReceived
    } else {
        ParticipantStatus::AwaitingResponse
    }
}

/// Packets the participant sent on a leg that answer something (not `thread_state`).
pub(super) fn received_count(t: &Thread) -> u32 {
    let n = t
        .history
        .iter()
        .filter(|h| !h.outgoing && h.kind != "thread_state")
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod sequence_tests;
#[cfg(test)]
mod tests;
