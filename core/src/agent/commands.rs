//! The user's commands to the agent: starting a thread, answering prompts, cancelling, new
//! context.

use crate::agent::permissions::Tier;
use crate::agent::thread::{Thread, ThreadState};
use crate::agent::*;

use crate::packet::Intent;

impl Agent {
    pub(in crate::agent) fn on_command(&mut self, c: Command) {
        match c {
            Command::StartThread {
                to,
                intent,
                context,
            } => self.open_thread(to, intent, context),
            Command::StartBridgedThread {
                bridge,
                to,
                intent,
                context,
            } => {
                self.open_bridged(&bridge, &to, intent, context);
            }
            Command::StartGroupThread {
                participants,
                intent,
                context,
                confirmation,
            } => self.open_group_thread(participants, intent, context, confirmation),
            Command::TransferCoordinator { group_id, to } => {
                self.transfer_coordinator(&group_id, to)
            }
            Command::AnswerConsent { prompt_id, answer } => self.answer_consent(prompt_id, answer),
            Command::AnswerResolution { prompt_id, answer } => {
                self.answer_resolution(prompt_id, answer)
            }
            Command::UpdateContext { thread_id, context } => {
                self.in_thread(&thread_id, |step| step.update_context(context));
            }
            Command::UpdateIntent {
                thread_id,
                intent,
                reason,
                needs,
            } => {
                self.in_thread(&thread_id, |step| step.update_intent(intent, reason, needs));
            }
            Command::ForkThread { thread_id, intents } => self.fork_thread(&thread_id, intents),
            Command::DismissSuggestion { id } => {
                let mut hit = None;
                for (peer, rec) in self.shared.peers.iter_mut() {
                    if let Some((f, _)) = rec.suggested.iter().find(|(_, n)| **n == id) {
                        rec.dismissed.insert(f.clone());
                        hit = Some(peer.clone());
                        break;
                    }
                }
                if let Some(p) = hit {
                    self.shared.dirty.peers.insert(p);
                }
            }
            Command::Retract { thread_id, fields } => self.retract(&thread_id, fields),
            Command::CancelThread { thread_id } => {
                if self.shared.groups.contains_key(&thread_id) {
                    self.cancel_group(&thread_id);
                } else {
                    self.in_thread(&thread_id, |step| step.cancel_thread());
                }
            }
            Command::SetPermission {
                field,
                tier,
                for_peer,
            } => {
                match for_peer {
                    None => self.shared.settings.tiers.set(&field, tier),
                    Some(p) => {
                        let o = self.shared.settings.overrides.entry(p).or_default();
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
                self.shared.dirty.settings = true;
                self.shared
                    .audit(None, AgentEvent::PermissionSet { field, tier });
            }
            Command::SetUsageRule { field, policy } => {
                let usage = &mut self.shared.settings.tiers.usage;
                match policy.filter(|p| !p.is_empty()) {
                    Some(p) => usage.insert(field, p),
                    None => usage.remove(&field),
                };
                self.shared.dirty.settings = true;
            }
            Command::Block(addr) => {
                self.shared.settings.blocked.insert(addr.clone());
                self.shared.dirty.settings = true;
                let ids: Vec<String> = self
                    .threads
                    .values()
                    .filter(|t| t.peer == addr && !t.state.is_terminal())
                    .map(|t| t.id.clone())
                    .collect();
                for id in ids {
                    self.in_thread(&id, |step| {
                        step.close_prompts();
                        step.set_state(ThreadState::Declined, "agent blocked by the user");
                    });
                }
                // §11.3: blocking purges what this agent remembered about the relationship.
                self.purge_relationship(&addr);
                self.shared.audit(None, AgentEvent::Blocked { peer: addr });
            }
            Command::Unblock(addr) => {
                self.shared.settings.blocked.remove(&addr);
                self.shared.dirty.settings = true;
                self.shared
                    .audit(None, AgentEvent::Unblocked { peer: addr });
            }
            Command::PinKey { address, key } => {
                if self.pin(&address, key).is_err() {
                    self.shared
                        .audit(None, AgentEvent::PinRefused { peer: address });
                }
            }
            Command::AcceptKeyChange { address } => self.accept_key_change(&address),
            Command::RotateKey { new } => self.rotate_key(*new),
            Command::BindRecovery { recovery_key } => self.bind_recovery(recovery_key),
            Command::CreateSpace {
                name,
                participants,
                fields,
            } => self.create_space(name, participants, fields),
            Command::SetSpaceField {
                space_id,
                field,
                value,
            } => self.set_space_field(&space_id, field, value),
            c @ (Command::EditMemory { .. }
            | Command::ForgetMemory { .. }
            | Command::ImportMemory { .. }) => self.on_memory_command(c),
        }
    }

    pub(in crate::agent) fn open_thread(&mut self, to: Address, intent: Intent, context: Context) {
        if self.shared.settings.blocked.contains(&to) {
            self.shared.notify(
                None,
                NotifyKind::Info,
                format!("{to} is blocked; unblock it first."),
            );
            return;
        }
        if to == self.shared.config.address {
            self.shared.notify(
                None,
                NotifyKind::Info,
                "A thread needs another agent.".into(),
            );
            return;
        }
        let id = self.create_thread(&to, intent, context, None);
        self.in_thread(&id, |step| step.send_first_packet());
    }

    /// The id of the thread `pred` picks; `None` (and an audit line `what`) if none does:
    /// answers to closed prompts, late action or LLM results are normal and ignored.
    pub(in crate::agent) fn thread_where(
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
            self.shared.audit(None, AgentEvent::Note(what));
        }
        id
    }
}
