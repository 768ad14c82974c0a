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
//! 3. **proposing** — the best candidate goes to every leg as a resolution naming the
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

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::packets::blank_thread;
use super::thread::{GroupLeg, Thread, ThreadState, Waiting};
use super::*;

use crate::crypto::thread_tag;
use crate::display;
use crate::negotiator::group::{aggregate, Aggregation, Candidate, GroupView, Member};
use crate::packet::{
    ActionSpec, AggregatedContext, Alternative, Body, ConfirmationMode, ConfirmationOutcome,
    ConfirmationProgress, ContextBody, Escalation, GroupHeader, Intent, ParticipantEntry,
    ParticipantStatus, Proposal, ResolutionBody, ResolutionStatus, MAX_GROUP_PARTICIPANTS,
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
        quorum: Option<u32>,
        legs: BTreeMap<Address, String>,
    ) -> Group {
        Group {
            id: header.group_id.clone(),
            header,
            intent,
            local,
            quorum,
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
}

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
        quorum: Option<u32>,
    ) -> Option<String> {
        let before: BTreeSet<String> = self.shared.groups.keys().cloned().collect();
        self.handle(
            now,
            Input::Command(Command::StartGroupThread {
                participants,
                intent,
                context,
                quorum,
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
        quorum: Option<u32>,
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
        } else if quorum.is_some_and(|q| q == 0 || q as usize > others.len() + 1) {
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
            Group::new(header, intent, context, quorum, legs.clone()),
        );
        self.shared.dirty.groups.insert(gid.clone());
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

    fn group_mut(&mut self, gid: &str) -> Option<&mut Group> {
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
    fn plan(&mut self, gid: &str) {
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
        let members = self.group_members_view(g);
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
        let shared_view = agg.aggregated_context(&view);
        let viable: Vec<Candidate> = agg
            .candidates
            .iter()
            .filter(|c| !g.ruled_out.contains(&(c.start, c.end)))
            .cloned()
            .collect();
        let everyone_fits = viable.first().is_some_and(|c| c.missing.is_empty());
        if !everyone_fits {
            if let Some(req) = agg.flexibility_request.as_ref().filter(|r| {
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
            Some(best) => self.propose_to_group(gid, &agg, &best, &viable),
            None => self.escalate_group(gid, &agg),
        }
    }

    /// Every participant as the aggregation sees it: its status and what it shared with
    /// this agent on its leg.
    pub(super) fn group_members_view(&self, g: &Group) -> BTreeMap<Address, Member> {
        g.legs
            .iter()
            .filter_map(|(p, l)| {
                let t = self.threads.get(l)?;
                Some((
                    p.clone(),
                    Member {
                        status: leg_status(t),
                        shared: t.theirs.clone(),
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

    fn propose_to_group(
        &mut self,
        gid: &str,
        agg: &Aggregation,
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
            if active {
                confirmers.push(p.clone());
            }
        }
        let n = u32::try_from(confirmers.len()).unwrap_or(u32::MAX);
        let attending = u32::try_from(best.attendees.len()).unwrap_or(0).max(1);
        let quorum = match g.quorum {
            Some(q) => Some(q.min(n)),
            None if attending < n => Some(attending),
            None => None,
        };
        let required = quorum.unwrap_or(n);
        let alternatives: Vec<&Candidate> = viable
            .iter()
            .filter(|c| (c.start, c.end) != (best.start, best.end))
            .take(3)
            .collect();
        let event = display::line(&g.intent.summary, display::MAX_SHORT).into_owned();
        let mut details = window_details(best);
        details.insert("party_size".into(), json!(best.attendees.len()));
        if let Some(b) = agg
            .combined
            .budget
            .as_ref()
            .filter(|_| agg.combined.budgets_read >= 3)
        {
            details.insert("budget".into(), json!(b));
        }
        if !agg.combined.dietary.is_empty() {
            details.insert(
                "dietary".into(),
                json!(format!(
                    "fits everyone's dietary requirements ({})",
                    agg.combined.dietary.len()
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
        for lid in &legs {
            let b = body.clone();
            self.in_thread(lid, |step| step.propose_on_leg(b));
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
        self.show_group_prompt(gid, false);
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

    /// Counts the group's confirmations and acts on them (§8.3).
    fn tally(&mut self, gid: &str) {
        let me = self.shared.config.address.clone();
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
        let mut legs_proposed: Vec<String> = Vec::new();
        for p in &g.header.participants {
            let Some(lid) = g.legs.get(p) else { continue };
            let Some(t) = self.threads.get(lid) else {
                continue;
            };
            let Some(r) = t.stage.resolution().filter(|r| r.proposer == me) else {
                continue;
            };
            if t.state == ThreadState::Proposed {
                legs_proposed.push(lid.clone());
            }
            let answer = r.answers.iter().rev().find(|(a, _)| a == p).map(|x| x.1);
            match answer {
                Some(ResolutionStatus::Confirmed) => {
                    confirmed.push(p.clone());
                    if !r.answers.iter().any(|(a, _)| a == &me) {
                        to_confirm.push((p.clone(), lid.clone()));
                    }
                }
                None if t.state == ThreadState::Proposed => pending += 1,
                _ => {}
            }
        }
        let n_confirmed = u32::try_from(confirmed.len()).unwrap_or(u32::MAX);
        let required = gp.required;
        let reached = gp.reached;
        let mine_confirmed = gp.mine == Some(ResolutionStatus::Confirmed);
        let mine_other = gp.mine.is_some() && !mine_confirmed;
        let window = gp.window;
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
            self.shared.audit(
                None,
                AgentEvent::GroupOutcome {
                    group_id: gid.to_string(),
                    reached: false,
                    confirmed: n_confirmed,
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
            if !mine_other {
                self.shared.notify(
                    Some(gid.to_string()),
                    NotifyKind::Info,
                    format!(
                        "Not enough confirmations for “{}” ({n_confirmed} of {required} needed are possible no more); looking for another option.",
                        display::line(&summary, display::MAX_SHORT)
                    ),
                );
            }
            self.plan(gid);
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
            self.in_thread(&lid, |step| step.confirm_for_group(lead));
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

    /// Tells every leg still open how the group's confirmation ended, with a `context`
    /// whose `aggregated_context.confirmation` carries counts and who attends.
    fn announce(&mut self, gid: &str, outcome: ConfirmationOutcome, attending: &[Address]) {
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
        let mode = if gp.body.quorum.is_some() {
            ConfirmationMode::Quorum
        } else {
            ConfirmationMode::All
        };
        let required = gp.required;
        let confirmed = u32::try_from(attending.len()).unwrap_or(u32::MAX);
        let legs: Vec<String> = g.legs.values().cloned().collect();
        for lid in legs {
            self.in_thread(&lid, |step| {
                if step.t.state.is_terminal() {
                    return;
                }
                let Some(rid) = step.t.stage.resolution().map(|r| r.packet_id.clone()) else {
                    return;
                };
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
                        next: None,
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
    pub(super) fn answer_group_resolution(&mut self, gid: &str, answer: ResolutionAnswer) {
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
    pub(super) fn cancel_group(&mut self, gid: &str) {
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

    pub(super) fn show_group_prompt(&mut self, gid: &str, reminder: bool) {
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
        };
        self.shared.buf.prompt.push(Output::Prompt(prompt));
    }

    /// The groups' own timers: the reminder of the coordinator's prompt and the group's
    /// expiry (each leg expires on its own deadline too).
    pub(super) fn group_timeouts(&mut self) {
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

impl Shared {
    /// The next time a group's own timer fires.
    pub(super) fn group_deadline(&self, g: &Group) -> Option<Timestamp> {
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
    pub(super) fn propose_on_leg(&mut self, body: ResolutionBody) {
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
    pub(super) fn withdraw_group_proposal(&mut self) {
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
    pub(super) fn expire_with_group(&mut self) {
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
    pub(super) fn leave_out_of_group(&mut self, text: String) {
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
            },
        ));
        self.close_prompts();
        self.set_state(
            ThreadState::Declined,
            "the group went ahead without this participant",
        );
    }

    /// The group reached its quorum and this leg's participant confirmed: the
    /// coordinator's `confirmed` goes to it, and the leg goes CONFIRMED here. `lead`: this
    /// leg carries the coordinator's own actions for the group.
    pub(super) fn confirm_for_group(&mut self, lead: bool) {
        let me = self.shared.config.address.clone();
        let Some(r) = self.t.stage.resolution_mut() else {
            return;
        };
        r.answers.retain(|(a, _)| a != &me);
        r.answers.push((me, ResolutionStatus::Confirmed));
        let rid = r.packet_id.clone();
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
            },
        ));
        self.check_confirmed();
    }

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
fn received_count(t: &Thread) -> u32 {
    let n = t
        .history
        .iter()
        .filter(|h| !h.outgoing && h.kind != "thread_state")
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
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
