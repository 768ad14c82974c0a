//! Context negotiation (§5.2, §6): the Receive-Evaluate-Act cycle, context, requests and
//! responses, needs, loop limits and escalation.

use std::collections::BTreeSet;

use crate::agent::io::notify::list;
use crate::agent::memory::Remembered;
use crate::agent::negotiation::drift::is_resume_marker;
use crate::agent::negotiation::receipts::ReceiptDraft;
use crate::agent::permissions::Tier;
use crate::agent::thread::{PendingConsent, Thread, ThreadState, Turn, Waiting};
use crate::agent::*;

use crate::display;
use crate::negotiator::{self, Decision, View};
use crate::packet::{
    self, Body, ContextBody, ContextRequestBody, ContextResponseBody, Escalation, Intent, Need,
    PermissionsDeclaration, Priority, Unavailable,
};
use crate::receipt::Basis;

/// How the `reason` of a stall notice starts (§6.4; SPEC-NOTES "Negotiation").
pub(in crate::agent) const STALL_REASON: &str = "stalled";

impl ThreadStep<'_> {
    pub(in crate::agent) fn on_context(&mut self, b: ContextBody) {
        if b.escalation.as_ref().is_some_and(is_resume_marker) {
            // The peer's user resumed the thread: it goes on here too.
            self.on_resume();
            self.absorb(&b.context, b.permissions.as_ref(), &[]);
            self.take_needs(&b.needs);
            self.take_resumed_turn();
            return;
        }
        self.absorb(&b.context, b.permissions.as_ref(), &[]);
        self.on_group_context(&b);
        if let Some(i) = &b.intent {
            let t = &mut *self.t;
            if t.state == ThreadState::Initiated || !t.initiator {
                t.intent = i.clone();
            }
        }
        let has_alternatives = b.context.contains_key("proposed_alternatives");
        if let (Some(e), false) = (&b.escalation, has_alternatives) {
            // The peer's stall notice (§6.4) only tells this user: the peer stalled waiting
            // for this side, and this side's next packet resumes it there. It hands nothing
            // to the humans here, so the thread keeps negotiating; marked escalated, it
            // ignored every later packet and both sides waited forever (swarm seed 612).
            // An escalation that crossed this agent's own open proposal is superseded by
            // it, as the peer's side drops its escalation when the proposal reaches it
            // (`open_resolution`): marked escalated here, a decline of the proposal left
            // the proposer waiting for the users and the decliner waiting for a new
            // proposal (swarm --consent --groups, seed 374).
            let me = &self.shared.config.address;
            let crossed = self.t.stage.resolution().is_some_and(|r| &r.proposer == me);
            if crossed {
                return;
            }
            if !is_stall_notice(e) {
                let t = &mut *self.t;
                t.escalated = true;
                // The humans decide now: a question to the model in flight (or waiting
                // to be retried) is withdrawn, or its answer would go on negotiating
                // past the escalation and leave both sides waiting on each other
                // (large swarm, seed 1).
                self.withdraw_llm("the thread was escalated to the users");
                self.set_waiting(Waiting::User);
            }
            let mut text = format!(
                "The other agent needs you: {}",
                display::line(&e.reason, display::MAX_LONG)
            );
            if let Some(s) = &e.suggested_prompt {
                text = format!("{text} — {}", display::line(s, display::MAX_LONG));
            }
            self.notify(NotifyKind::Escalated, text);
            return;
        }
        self.take_needs(&b.needs);
        self.evaluate(Turn::Free);
    }

    /// Takes in what the peer gave and what it declined.
    pub(in crate::agent) fn absorb(
        &mut self,
        provided: &Context,
        decl: Option<&PermissionsDeclaration>,
        unavailable: &[Unavailable],
    ) {
        let expired = self.take_rules(provided, decl);
        let t = &mut *self.t;
        for (k, v) in provided {
            // A value the peer took back is never taken in again in this thread (an
            // older packet delivered late, SPEC-NOTES "Retraction"), nor one that
            // arrives expired ("Usage rules").
            if !t.retracted.contains(k) && !expired.contains(k) {
                t.theirs.insert(k.clone(), v.clone());
                t.expired.remove(k);
            }
        }
        for u in unavailable {
            t.peer_unavailable.insert(u.field.clone());
        }
        if matches!(t.state, ThreadState::Initiated | ThreadState::Stalled) {
            self.transition(ThreadState::Negotiating, None);
        }
    }

    /// Evaluates the peer's needs against the permission tiers (§5.2 EVALUATE
    /// PERMISSIONS, §6.2, §7): shares, declines, or queues one batched consent prompt.
    pub(in crate::agent) fn take_needs(&mut self, needs: &[Need]) {
        if needs.is_empty() {
            return;
        }
        let t = &*self.t;
        let urgent = t.intent.is_urgent();
        let mut share = Context::new();
        let mut decline = Vec::new();
        let mut ask = Vec::new();
        let mut seen = BTreeSet::new();
        let mut receipt = ReceiptDraft::default();
        for n in needs {
            if !seen.insert(n.field.clone()) {
                continue;
            }
            if t.retractions.iter().any(|r| r.fields.contains(&n.field)) {
                // Taken back by the user: declined, so a peer that needs it is not left
                // waiting (SPEC-NOTES "Retraction").
                decline.push(n.field.clone());
                receipt.declined.push((n.field.clone(), Basis::Agent));
                continue;
            }
            if t.answered.contains(&n.field) {
                continue; // §6.4: a field is answered once per thread.
            }
            if !display::is_clean(&n.field, display::MAX_FIELD_NAME) {
                // A field name the user could not read as sent (control or invisible
                // characters, or too long) is never shown for consent: declined.
                decline.push(n.field.clone());
                receipt.declined.push((n.field.clone(), Basis::Agent));
                continue;
            }
            let value = self.suggested(&n.field);
            let tier = self.shared.thread_tier(t, &n.field);
            if tier != Tier::NeverShare && self.flexibility_asks(&n.field) {
                // Giving way for the group is the user's call, whatever the tier.
                ask.push(n.clone());
                continue;
            }
            match tier {
                Tier::NeverShare => {
                    decline.push(n.field.clone());
                    receipt
                        .declined
                        .push((n.field.clone(), self.basis_of_decline(&n.field)));
                }
                Tier::AlwaysShare => match value {
                    Some(v) => {
                        share.insert(n.field.clone(), v);
                    }
                    None => {
                        decline.push(n.field.clone());
                        receipt.declined.push((n.field.clone(), Basis::Agent));
                    }
                },
                Tier::AskFirst => {
                    if t.user_initiated && t.local.contains_key(&n.field) {
                        // §7.4: the user started the thread and gave this value for it.
                        if let Some(v) = value {
                            share.insert(n.field.clone(), v);
                        }
                    } else if n.priority == Priority::NiceToHave && !urgent {
                        // §6.2: nice_to_have is shared only if pre-authorised.
                        decline.push(n.field.clone());
                        receipt
                            .declined
                            .push((n.field.clone(), self.basis_of_decline(&n.field)));
                    } else {
                        ask.push(n.clone());
                    }
                }
            }
        }
        // What the tiers declined without asking: its receipt (what they share leaves
        // with a packet, receipted then).
        self.sign_consent_receipt(receipt);
        let t = &mut *self.t;
        for f in share.keys().chain(decline.iter()) {
            t.answered.insert(f.clone());
        }
        for n in &ask {
            t.answered.insert(n.field.clone());
        }
        let consent = t.consent.get_or_insert_with(|| PendingConsent {
            prompt_id: 0,
            ask: Vec::new(),
            share: Context::new(),
            decline: Vec::new(),
            offered: BTreeSet::new(),
        });
        consent.share.extend(share);
        consent.decline.extend(decline);
        let asks_more = !ask.is_empty();
        consent.ask.extend(ask);
        self.shared.dirty.threads.insert(self.id.to_string());
        let asking = !consent.ask.is_empty();
        let open_prompt = consent.prompt_id;
        if !asking {
            return;
        }
        if open_prompt != 0 {
            // The open prompt keeps its number while the thread waits for the user: a
            // packet that asks for more updates it in place, one that asks for nothing
            // new leaves it alone (SPEC-NOTES "Prompts and peer text on screen").
            if asks_more {
                self.show_consent_prompt();
            }
            return;
        }
        let pid = self.shared.next_prompt_id();
        if let Some(c) = self.t.consent.as_mut() {
            c.prompt_id = pid;
        }
        self.set_waiting(Waiting::User);
        self.show_consent_prompt();
    }

    /// The proposer's turn after its proposal was declined or its actions rolled back:
    /// nothing it waited for is still to come, so it waits for nobody until it acts (left
    /// waiting for the peer or its actions, a proposer with nothing left to propose after
    /// a retraction waited forever; swarm --consent --domains 3, seeds 6 and 189).
    pub(in crate::agent) fn take_turn(&mut self) {
        self.set_waiting(Waiting::Nothing);
        self.evaluate(Turn::Free);
    }

    /// The Receive-Evaluate-Act cycle (§5.2) for one thread, once its inputs changed.
    pub(in crate::agent) fn evaluate(&mut self, turn: Turn) {
        let t = &*self.t;
        if t.state.is_terminal() || t.halted || !t.forked_into.is_empty() {
            return;
        }
        if t.consent.as_ref().is_some_and(|c| c.prompt_id != 0) {
            return; // waits for the user; other threads go on
        }
        if t.escalated {
            // The humans decide what happens next; answers the user gave still go out,
            // except past the round-trip limit where nothing more is exchanged (§6.4).
            if t.round_trips < self.shared.config.limits.max_round_trips {
                self.flush_reply();
            }
            return;
        }
        if t.llm.is_some() {
            // The model was asked about the thread as it was; what just came in is
            // looked at when it answers (large swarm, seed 1).
            if let Some(l) = self.t.llm.as_mut() {
                if !l.stale {
                    l.stale = true;
                    self.mark_changed();
                }
            }
            return;
        }
        if !matches!(
            t.state,
            ThreadState::Initiated | ThreadState::Negotiating | ThreadState::Stalled
        ) {
            // Proposed/executing: answer open needs, nothing else to decide.
            self.flush_reply();
            return;
        }
        let me = &self.shared.config.address;
        if self.t.coordinates(me) {
            // The group decides, over every leg (`group.rs`, after this input): this leg
            // only answers what its participant asked, and waits for nobody.
            self.set_waiting(Waiting::Nothing);
            self.flush_reply();
            return;
        }
        if self.t.in_group_of_other(me) {
            // A participant only answers: the coordinator proposes.
            self.flush_reply();
            return;
        }
        if self.shared.config.use_llm {
            let tier = self.decision_tier(turn);
            self.ask_llm(tier, 1, None, None);
            return;
        }
        let decision = {
            let t = &*self.t;
            let mine = self.shared.mine(t);
            let memo = self.shared.remembered(&t.peer, &t.intent);
            let theirs = self.shared.theirs(t);
            let view = self.shared.view(t, &mine, &theirs, &memo);
            negotiator::decide(&view)
        };
        self.act(decision, turn);
    }

    pub(in crate::agent) fn act(&mut self, decision: Decision, turn: Turn) {
        let limit = self.shared.config.limits.max_round_trips;
        let t = &*self.t;
        let over_limit = t.round_trips >= limit;
        // Turn rule (SPEC-NOTES §6): answering a request is only answering; the agent
        // whose turn is free proposes, asks or escalates. At the round-trip limit every
        // further exchange becomes an escalation (§6.4).
        let escalate = || Decision::Escalate {
            reason: format!("{limit} context exchanges without a resolution"),
            summary: self.tried_summary(),
        };
        let decision = match (turn, decision) {
            (_, Decision::Wait) => Decision::Wait,
            (Turn::AnsweringRequest, _) if over_limit => escalate(),
            (Turn::AnsweringRequest, _) => Decision::Wait,
            (Turn::Free, d @ Decision::Propose { .. }) => d,
            (Turn::Free, Decision::Ask { .. } | Decision::NoOverlap { .. }) if over_limit => {
                escalate()
            }
            (Turn::Free, d) => d,
        };
        match decision {
            Decision::Ask { needs } => {
                let (provide, decline) = self.take_reply();
                let t = &mut *self.t;
                let mut fresh: Vec<Need> = needs
                    .into_iter()
                    .filter(|n| {
                        !t.asked.contains(&n.field) && !t.peer_unavailable.contains(&n.field)
                    })
                    .collect();
                fresh.extend(std::mem::take(&mut t.deferred_needs));
                fresh.sort_by_key(|n| n.priority);
                let mut seen = BTreeSet::new();
                fresh.retain(|n| seen.insert(n.field.clone()));
                let rest = fresh.split_off(fresh.len().min(packet::MAX_NEEDS_PER_PACKET));
                t.deferred_needs = rest;
                if fresh.is_empty() {
                    // Everything needed was asked already (once per thread, §6.4).
                    self.send_reply(provide, decline);
                    self.escalate_if_nothing_left(turn);
                    return;
                }
                for n in &fresh {
                    t.asked.insert(n.field.clone());
                }
                let body = Body::ContextRequest(ContextRequestBody {
                    needs: fresh,
                    context_provided: provide,
                    permissions: None,
                });
                self.send_then_wait(body, decline);
            }
            Decision::Propose { proposal, actions } => {
                // Answers are superseded by the proposal; nothing more is shared.
                let _ = self.take_reply();
                self.propose(proposal, actions);
            }
            Decision::NoOverlap {
                mut context,
                escalation,
            } => {
                let (provide, decline) = self.take_reply();
                for (k, v) in provide {
                    context.entry(k).or_insert(v);
                }
                let t = &mut *self.t;
                t.no_overlap_sent = true;
                let body = Body::Context(ContextBody {
                    intent: Some(Intent {
                        summary: "No overlap found — proposing alternatives".into(),
                        ..t.intent.clone()
                    }),
                    context,
                    escalation: Some(escalation),
                    ..Default::default()
                });
                self.send_then_wait(body, decline);
            }
            Decision::Escalate { reason, summary } => {
                // At the round-trip limit nothing more is exchanged: a pending answer
                // stays pending until the user resumes the thread.
                if !over_limit {
                    let (provide, decline) = self.take_reply();
                    if !provide.is_empty() || !decline.is_empty() {
                        self.send_reply(provide, decline);
                    }
                }
                self.escalate(&reason, &summary);
            }
            Decision::Wait => {
                self.flush_reply();
                self.escalate_if_nothing_left(turn);
            }
        }
    }

    /// The agent whose turn it was has nothing left to ask and nothing to propose
    /// because the peer took values back (or they expired): the users decide, or nobody
    /// would move (SPEC-NOTES "Retraction").
    fn escalate_if_nothing_left(&mut self, turn: Turn) {
        let t = &*self.t;
        if matches!(turn, Turn::Free)
            && (!t.retracted.is_empty() || !t.expired.is_empty())
            && t.waiting == Waiting::Nothing
            && t.state == ThreadState::Negotiating
        {
            let mut gone = Vec::new();
            if !t.retracted.is_empty() {
                let fields: Vec<&str> = t.retracted.iter().map(String::as_str).collect();
                gone.push(format!("the other agent took back {}", fields.join(", ")));
            }
            if !t.expired.is_empty() {
                let fields: Vec<&str> = t.expired.iter().map(String::as_str).collect();
                gone.push(format!("what they shared of {} expired", fields.join(", ")));
            }
            let reason = format!("{}; nothing else to go on", gone.join("; "));
            let summary = self.tried_summary();
            self.act(Decision::Escalate { reason, summary }, turn);
        }
    }

    pub(in crate::agent) fn tried_summary(&self) -> String {
        let t = &*self.t;
        let mut s = format!(
            "{} exchanges; shared {}; received {}",
            t.round_trips,
            list(t.shared.keys()),
            list(t.theirs.keys())
        );
        if !t.rejected.is_empty() {
            s += &format!(
                "; ruled out: {}",
                t.rejected
                    .iter()
                    .map(|r| r.summary.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        s
    }

    pub(in crate::agent) fn escalate(&mut self, reason: &str, summary: &str) {
        let body = Body::Context(ContextBody {
            escalation: Some(Escalation {
                recommend: "surface_to_users".into(),
                reason: reason.to_string(),
                suggested_prompt: Some(summary.to_string()),
            }),
            ..Default::default()
        });
        let _ = self.send_packet(body);
        let t = &mut *self.t;
        t.escalated = true;
        self.set_waiting(Waiting::User);
        self.notify(
            NotifyKind::Escalated,
            format!("I need your input: {reason}. {summary}"),
        );
        self.audit(AgentEvent::Escalated {
            reason: reason.to_string(),
        });
    }

    pub(in crate::agent) fn take_reply(&mut self) -> (Context, Vec<String>) {
        let t = &mut *self.t;
        match t.consent.take() {
            Some(c) if c.prompt_id == 0 => (c.share, c.decline),
            other => {
                t.consent = other;
                (Context::new(), vec![])
            }
        }
    }

    pub(in crate::agent) fn flush_reply(&mut self) {
        let (provide, decline) = self.take_reply();
        if !provide.is_empty() || !decline.is_empty() {
            self.send_reply(provide, decline);
        }
    }

    pub(in crate::agent) fn send_reply(&mut self, provide: Context, decline: Vec<String>) {
        let body = Body::ContextResponse(ContextResponseBody {
            context_provided: provide,
            context_unavailable: declined(&decline),
            permissions: None,
        });
        self.send_then_wait(body, vec![]);
    }

    pub(in crate::agent) fn send_then_wait(&mut self, body: Body, decline: Vec<String>) {
        let body = match body {
            Body::ContextRequest(b) if !decline.is_empty() => {
                // Declines travel with the request as a context_response first.
                let pre = Body::ContextResponse(ContextResponseBody {
                    context_provided: Context::new(),
                    context_unavailable: declined(&decline),
                    permissions: None,
                });
                let _ = self.send_packet(pre);
                Body::ContextRequest(b)
            }
            other => other,
        };
        if self.send_packet(body).is_ok() {
            self.set_waiting(Waiting::Peer);
        }
    }
}

impl Shared {
    /// My values usable in this thread: shared, about to be shared, and always_share.
    pub(in crate::agent) fn mine(&self, t: &Thread) -> Context {
        let mut m = Context::new();
        for (k, v) in self.config.profile.iter().chain(t.local.iter()) {
            let tier = self.thread_tier(t, k);
            if tier == Tier::AlwaysShare
                || (tier == Tier::AskFirst && t.user_initiated && t.local.contains_key(k))
            {
                m.insert(k.clone(), v.clone());
            }
        }
        if let Some(c) = &t.consent {
            m.extend(c.share.clone());
        }
        m.extend(t.shared.clone());
        if !t.sibling_holds.is_empty() {
            // A sibling of the fork holds these times (§6.5): not available here.
            let held: Vec<Context> = t.sibling_holds.iter().map(|h| h.slot.clone()).collect();
            let zone = m
                .get("timezone")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string);
            for k in ["time_windows", "availability"] {
                if let Some(w) = m.get(k) {
                    let w = negotiator::windows_without(w, &held, zone.as_deref());
                    m.insert(k.into(), w);
                }
            }
        }
        m
    }

    /// The peer's values for deciding: what it said in this thread, and under it what
    /// this agent already knew about it (§5.2: fill gaps from local knowledge before asking).
    pub(in crate::agent) fn theirs(&self, t: &Thread) -> Context {
        let mut c = self
            .config
            .contacts
            .get(&t.peer)
            .cloned()
            .unwrap_or_default();
        c.extend(t.theirs.clone());
        c
    }

    pub(in crate::agent) fn view<'a>(
        &'a self,
        t: &'a Thread,
        mine: &'a Context,
        theirs: &'a Context,
        memo: &'a Remembered,
    ) -> View<'a> {
        View {
            intent: &t.intent,
            i_am_initiator: t.initiator,
            me: &self.config.address,
            peer: &t.peer,
            mine,
            theirs,
            asked: &t.asked,
            unavailable: &t.peer_unavailable,
            remembered: &memo.context,
            usually_declined: &memo.usually_declines,
            rejected: &t.rejected,
            round_trips: t.round_trips,
        }
    }
}

/// Whether an escalation is the peer's stall notice: it tells this side's user that the
/// peer waited too long for this side, and asks nothing of the negotiation.
pub(in crate::agent) fn is_stall_notice(e: &Escalation) -> bool {
    e.reason
        .strip_prefix(STALL_REASON)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
}

/// The fields this user declined, as a `context_response`'s `context_unavailable`.
fn declined(fields: &[String]) -> Vec<Unavailable> {
    fields
        .iter()
        .map(|f| Unavailable {
            field: f.clone(),
            status: "declined".into(),
            hint: None,
        })
        .collect()
}
