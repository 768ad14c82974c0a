//! The user's commands to the agent: starting a thread, answering prompts, cancelling, new
//! context.

use super::packets::blank_thread;
use super::permissions::Tier;
use super::thread::{Thread, ThreadState};
use super::*;

use crate::crypto::thread_tag;
use crate::packet::Intent;

impl Agent {
    pub(super) fn on_command(&mut self, c: Command) {
        match c {
            Command::StartThread {
                to,
                intent,
                context,
            } => self.open_thread(to, intent, context),
            Command::AnswerConsent { prompt_id, answer } => self.answer_consent(prompt_id, answer),
            Command::AnswerResolution { prompt_id, answer } => {
                self.answer_resolution(prompt_id, answer)
            }
            Command::UpdateContext { thread_id, context } => {
                self.update_context(&thread_id, context)
            }
            Command::UpdateIntent {
                thread_id,
                intent,
                reason,
            } => self.update_intent(&thread_id, intent, reason),
            Command::ForkThread { thread_id, intents } => self.fork_thread(&thread_id, intents),
            Command::CancelThread { thread_id } => self.cancel_thread(&thread_id),
            Command::SetPermission {
                field,
                tier,
                for_peer,
            } => {
                match for_peer {
                    None => self.settings.tiers.set(&field, tier),
                    Some(p) => {
                        let o = self.settings.overrides.entry(p).or_default();
                        o.promote_to_always_share.remove(&field);
                        o.restrict_to_never_share.remove(&field);
                        match tier {
                            Tier::AlwaysShare => {
                                o.promote_to_always_share.insert(field.clone());
                            }
                            Tier::NeverShare => {
                                o.restrict_to_never_share.insert(field.clone());
                            }
                            Tier::AskFirst => {}
                        }
                    }
                }
                self.dirty.settings = true;
                self.audit(None, AgentEvent::PermissionSet { field, tier });
            }
            Command::Block(addr) => {
                self.settings.blocked.insert(addr.clone());
                self.dirty.settings = true;
                let ids: Vec<String> = self
                    .threads
                    .values()
                    .filter(|t| t.peer == addr && !t.state.is_terminal())
                    .map(|t| t.id.clone())
                    .collect();
                for id in ids {
                    self.close_prompts(&id);
                    self.set_state(&id, ThreadState::Declined, "agent blocked by the user");
                }
                // §11.3: blocking purges what this agent remembered about the relationship.
                if let Some(rec) = self.peers.get_mut(&addr) {
                    rec.approvals.clear();
                    rec.suggested.clear();
                    rec.pending.clear();
                    self.dirty.peers.insert(addr.clone());
                }
                self.audit(None, AgentEvent::Blocked { peer: addr });
            }
            Command::Unblock(addr) => {
                self.settings.blocked.remove(&addr);
                self.dirty.settings = true;
                self.audit(None, AgentEvent::Unblocked { peer: addr });
            }
            Command::PinKey { address, key } => {
                if self.pin(&address, key).is_err() {
                    self.audit(None, AgentEvent::PinRefused { peer: address });
                }
            }
            Command::AcceptKeyChange { address } => self.accept_key_change(&address),
        }
    }

    pub(super) fn open_thread(&mut self, to: Address, intent: Intent, context: Context) {
        if self.settings.blocked.contains(&to) {
            self.notify(
                None,
                NotifyKind::Info,
                format!("{to} is blocked; unblock it first."),
            );
            return;
        }
        if to == self.config.address {
            self.notify(
                None,
                NotifyKind::Info,
                "A thread needs another agent.".into(),
            );
            return;
        }
        let id = self.meta.rng.id("thr_", 12);
        self.dirty.meta = true;
        let session = new_session(&mut self.meta.rng);
        let mut t = blank_thread(
            &id,
            &to,
            true,
            intent,
            session,
            self.now,
            &self.config.address,
        );
        t.user_initiated = true;
        t.local = context;
        self.tags.insert((to.clone(), thread_tag(&id)), id.clone());
        self.threads.insert(id.clone(), t);
        self.audit(Some(&id), AgentEvent::ThreadStarted { with: to });
        self.send_first_packet(&id);
    }

    /// The id of the thread `pred` picks; `None` (and an audit line `what`) if none does:
    /// answers to closed prompts, late action or LLM results are normal and ignored.
    pub(super) fn thread_where(
        &mut self,
        pred: impl Fn(&Thread) -> bool,
        what: String,
    ) -> Option<String> {
        let id = self
            .threads
            .values()
            .find(|t| pred(t))
            .map(|t| t.id.clone());
        if id.is_none() {
            self.audit(None, AgentEvent::Note(what));
        }
        id
    }
}
