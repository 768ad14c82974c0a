//! Consent (§7): permission tiers per peer, consent prompts and their answers, implicit
//! signals and the §7.2 suggestions.

use crate::agent::negotiation::receipts::ReceiptDraft;
use crate::agent::permissions::{resolve_tier, resolve_tier_in, Tier};
use crate::agent::thread::{Thread, ThreadState, Turn, Waiting};
use crate::agent::*;

use crate::display;
use crate::packet::{Body, Intent};
use crate::receipt::Basis;

impl Agent {
    pub(in crate::agent) fn answer_consent(&mut self, prompt_id: u64, answer: ConsentAnswer) {
        let Some(id) = self.thread_where(
            |t| {
                t.consent
                    .as_ref()
                    .is_some_and(|c| c.prompt_id == prompt_id && prompt_id != 0)
            },
            format!("answer to unknown or closed prompt {prompt_id} ignored"),
        ) else {
            return;
        };
        self.in_thread(&id, |step| step.answer_consent(prompt_id, answer));
    }
}

impl ThreadStep<'_> {
    pub(in crate::agent) fn answer_consent(&mut self, prompt_id: u64, answer: ConsentAnswer) {
        let t = &mut *self.t;
        let Some(mut c) = t.consent.take() else {
            return;
        };
        let peer = t.peer.clone();
        let mut approved = Vec::new();
        let asked = std::mem::take(&mut c.ask);
        t.consent = Some(c);
        let suggestions: Vec<Option<serde_json::Value>> =
            asked.iter().map(|n| self.suggested(&n.field)).collect();
        let t = &mut *self.t;
        let Some(mut c) = t.consent.take() else {
            return;
        };
        let mut receipt = ReceiptDraft::default();
        let by_user = || Basis::User { prompt_id };
        for (n, suggested) in asked.into_iter().zip(suggestions) {
            let choice = match &answer {
                ConsentAnswer::DeclineAll => FieldChoice::DontShare,
                ConsentAnswer::ShareSelected(m) => {
                    m.get(&n.field).cloned().unwrap_or(FieldChoice::DontShare)
                }
            };
            let value = match choice {
                FieldChoice::Share => suggested,
                FieldChoice::ShareValue(v) => Some(v),
                FieldChoice::DontShare => None,
            };
            match value {
                Some(v) => {
                    receipt
                        .disclosed
                        .push((n.field.clone(), v.clone(), by_user()));
                    c.share.insert(n.field.clone(), v);
                    approved.push(n.field.clone());
                }
                // A field this side offered (an intent update's expanded scope) is
                // not shared and not declined either: the peer did not ask.
                None if c.offered.contains(&n.field) => {}
                None => {
                    receipt.declined.push((n.field.clone(), by_user()));
                    c.decline.push(n.field.clone());
                }
            }
        }
        c.offered.clear();
        c.prompt_id = 0;
        t.consent = Some(c);
        if let Some(g) = t.group.as_mut() {
            // The flexibility request is answered (given way or not).
            g.flexibility = None;
        }
        self.mark_changed();
        self.audit(AgentEvent::ConsentAnswered { prompt_id });
        self.sign_consent_receipt(receipt);
        self.shared.count_approvals(&peer, &approved);
        self.set_waiting(Waiting::Nothing);
        let turn = if matches!(
            self.t.last_received_kind(),
            Some("context_request" | "intent_update")
        ) {
            Turn::AnsweringRequest
        } else {
            Turn::Free
        };
        self.evaluate(turn);
    }

    pub(in crate::agent) fn show_consent_prompt(&mut self) {
        let id = self.id;
        let t = &*self.t;
        let Some(c) = &t.consent else { return };
        if c.prompt_id == 0 || c.ask.is_empty() {
            return;
        }
        // What the peer wrote is shown cleaned; the thread keeps it as sent.
        let fields = c
            .ask
            .iter()
            .map(|n| ConsentField {
                field: display::line(&n.field, display::MAX_FIELD_NAME).into_owned(),
                reason: display::line(&n.reason, display::MAX_SHORT).into_owned(),
                priority: n.priority,
                suggested: self.suggested(&n.field),
            })
            .collect();
        let drift = t.scope_intent.as_ref().map(|before| IntentChange {
            from: display::intent(before),
            to: display::intent(&t.intent),
        });
        let prompt = Prompt {
            id: c.prompt_id,
            thread_id: id.to_string(),
            peer: t.peer.clone(),
            intent: display::intent(&t.intent),
            kind: PromptKind::Consent { fields },
            drift,
        };
        self.shared.buf.prompt.push(Output::Prompt(prompt));
    }

    pub(in crate::agent) fn close_prompts(&mut self) {
        let t = &mut *self.t;
        if let Some(c) = t.consent.take() {
            if c.prompt_id != 0 {
                self.shared
                    .buf
                    .prompt
                    .push(Output::ClosePrompt(c.prompt_id));
            }
        }
        if let Some(r) = t.stage.resolution_mut() {
            if let Some(p) = r.prompt_id.take() {
                self.shared.buf.prompt.push(Output::ClosePrompt(p));
            }
        }
        self.mark_changed();
    }
}

impl Shared {
    pub(in crate::agent) fn tier(&self, peer: &Address, field: &str) -> Tier {
        resolve_tier(&self.settings.tiers, &self.settings.overrides, peer, field)
    }

    /// The tier of `field` for `peer` in a thread about `intent` (§6.5).
    pub(in crate::agent) fn tier_in(&self, peer: &Address, intent: &Intent, field: &str) -> Tier {
        resolve_tier_in(
            &self.settings.tiers,
            &self.settings.overrides,
            peer,
            Some(intent),
            field,
        )
    }

    /// The tier of `field` in thread `t`: for its peer and its intent; after an intent
    /// update, a field the new intent would share without asking but the intent the
    /// thread started with would not is asked first (§6.5: the expanded scope is put to
    /// the user before anything more leaves).
    pub(in crate::agent) fn thread_tier(&self, t: &Thread, field: &str) -> Tier {
        let now = self.tier_in(&t.peer, &t.intent, field);
        match &t.scope_intent {
            Some(before)
                if now == Tier::AlwaysShare
                    && self.tier_in(&t.peer, before, field) != Tier::AlwaysShare =>
            {
                Tier::AskFirst
            }
            _ => now,
        }
    }

    pub(in crate::agent) fn next_prompt_id(&mut self) -> u64 {
        let id = self.meta.next_prompt;
        self.meta.next_prompt += 1;
        self.dirty.meta = true;
        id
    }

    /// §7.2: after the third approval of a field for one agent, suggest promoting it.
    pub(in crate::agent) fn count_approvals(&mut self, peer: &Address, fields: &[String]) {
        let mut suggest = Vec::new();
        {
            let rec = self.peers.entry(peer.clone()).or_default();
            for f in fields {
                let n = rec.approvals.entry(f.clone()).or_insert(0);
                *n += 1;
                if *n == 3 && !rec.suggested.contains_key(f) {
                    self.meta.last_suggestion += 1;
                    rec.suggested.insert(f.clone(), self.meta.last_suggestion);
                    suggest.push((f.clone(), self.meta.last_suggestion));
                }
            }
        }
        if !suggest.is_empty() {
            self.dirty.meta = true;
        }
        self.dirty.peers.insert(peer.clone());
        if !suggest.is_empty() {
            self.suggestions_begun();
        }
        for (f, id) in suggest {
            self.notify_suggestion(
                Suggestion::Promote {
                    id,
                    field: f.clone(),
                    peer: peer.clone(),
                },
                format!("You've shared {f} with {peer} three times now. Want me to always share it with them automatically?"),
            );
        }
    }
}

/// Open prompts of thread `t` (its consent prompt, its resolution prompt).
pub(in crate::agent) fn prompts_open(t: &Thread) -> usize {
    let consent = t.consent.as_ref().is_some_and(|c| c.prompt_id != 0);
    let resolution = t.state == ThreadState::Proposed
        && t.stage.resolution().is_some_and(|r| r.prompt_id.is_some());
    usize::from(consent) + usize::from(resolution)
}

/// Whether a packet of the peer can open a prompt for this agent's user.
pub(in crate::agent) fn may_prompt(b: &Body) -> bool {
    match b {
        Body::Context(c) => !c.needs.is_empty(),
        Body::ContextRequest(c) => !c.needs.is_empty(),
        Body::IntentUpdate(u) => !u.additional_context_needed.is_empty(),
        Body::Resolution(_) => true,
        _ => false,
    }
}

/// The smallest count above `n` at which a collapsed record is renewed (1, 2, 5, 10…).
pub(in crate::agent) fn next_milestone(n: u64) -> u64 {
    let mut m: u64 = 1;
    loop {
        for k in [1u64, 2, 5] {
            let x = m.saturating_mul(k);
            if x > n || x == u64::MAX {
                return x;
            }
        }
        m = m.saturating_mul(10);
    }
}
