//! Progressive capability discovery (§14.2): the agent introduces what it can do when it
//! first becomes relevant, once each — the flow on the first thread (with §14.1 step 3's
//! "I'll check with you more often until I learn"), one-tap suggestions with the first
//! one (§7.2, the third thread with the same person), the coordinator's role on the first
//! group thread, shared context spaces on the first space, and what relationship memory
//! learnt once ten threads have ended (§11.2).
//!
//! Each introduction is a [`NotifyKind::Introduction`] notification carrying its typed
//! [`Introduction`]; the set of those shown is kept in `meta`, so a restart never shows
//! one again.

use super::*;

pub use super::io::Introduction;

/// The threads after which relationship memory is introduced (§14.2 "after 10+ threads").
pub const MEMORY_INTRODUCED_AFTER: u64 = 10;

impl Shared {
    /// Shows `intro` with `text`, unless it was shown before. Returns whether it was shown.
    pub(super) fn introduce(
        &mut self,
        intro: Introduction,
        thread_id: Option<String>,
        text: String,
    ) -> bool {
        if !self.meta.introduced.insert(intro) {
            return false;
        }
        self.dirty.meta = true;
        self.buf.notify.push(Output::Notify(Notification {
            thread_id,
            kind: NotifyKind::Introduction,
            text: super::io::notify::shown(text),
            key: None,
            suggestion: None,
            space: None,
            memory_change: None,
            introduction: Some(intro),
        }));
        true
    }

    /// A thread was created, by this agent or by a peer's first packet: counted, and the
    /// first one introduces the flow (§14.2, §14.1 step 3).
    pub(super) fn thread_begun(&mut self, thread_id: &str, peer: &Address) {
        self.meta.threads_begun = self.meta.threads_begun.saturating_add(1);
        self.dirty.meta = true;
        self.introduce(
            Introduction::FirstThread,
            Some(thread_id.to_string()),
            format!(
                "This is the first time I'm coordinating with {peer}'s agent. We exchange only \
                 the context this plan needs: anything your permissions say to ask about waits \
                 for your answer, nothing marked never-share ever leaves, and nothing is booked \
                 until you both confirm the proposal. I'll check with you more often until I \
                 learn what you're comfortable sharing."
            ),
        );
    }

    /// A group thread was created or joined: counted as one thread, and the first one
    /// introduces the coordinator's role (§14.2).
    pub(super) fn group_begun(&mut self, thread_id: &str, coordinator: &Address) {
        self.meta.threads_begun = self.meta.threads_begun.saturating_add(1);
        self.dirty.meta = true;
        let role = if *coordinator == self.config.address {
            "Your agent is its coordinator".to_string()
        } else {
            format!("{coordinator}'s agent is its coordinator")
        };
        self.introduce(
            Introduction::FirstGroup,
            Some(thread_id.to_string()),
            format!(
                "This is your first group thread. {role}: it gathers what each participant's \
                 agent may share and proposes one plan for everyone. Each person still \
                 confirms for themselves, and the others see only what the coordinator \
                 combines, never your own context as you gave it."
            ),
        );
    }

    /// The first shared context space, created or joined (§14.2).
    pub(super) fn space_begun(&mut self, name: &str) {
        self.introduce(
            Introduction::FirstSpace,
            None,
            format!(
                "\"{name}\" is your first shared context space: context for a project that \
                 every member's agent keeps in sync, one field at a time. Each member writes \
                 only what their permission allows, your own permissions still decide what \
                 your agent writes into it, and I tell you when something meaningful changes."
            ),
        );
    }

    /// The first §7.2 suggestion is about to be shown (§14.2: the third thread with the
    /// same person).
    pub(super) fn suggestions_begun(&mut self) {
        self.introduce(
            Introduction::Suggestions,
            None,
            "I learn from your answers: when you've said yes to sharing the same thing with \
             the same person three times, I offer to stop asking. One answer accepts or \
             dismisses the offer, and you can change it later in your permissions."
                .to_string(),
        );
    }
}

impl ThreadStep<'_> {
    /// This thread ended COMPLETED and was recorded in memory: after ten threads, what
    /// memory learnt about this peer is surfaced, once (§14.2, §11.2).
    pub(super) fn memory_insight(&mut self) {
        if self.shared.meta.threads_begun < MEMORY_INTRODUCED_AFTER
            || self.shared.meta.introduced.contains(&Introduction::Memory)
        {
            return;
        }
        let peer = self.t.peer.clone();
        let r = self.shared.remembered(&peer, &self.t.intent);
        let shared_freely = r
            .usually_requests
            .iter()
            .find(|f| self.shared.thread_tier(self.t, f) == Tier::AlwaysShare)
            .cloned();
        let insight = if let Some(field) = shared_freely {
            format!(
                "I've noticed {peer} usually asks for your {field}: your permissions share it, \
                 so I include it from the start now."
            )
        } else if let Some(field) = r.context.keys().find(|k| *k != "flexibility") {
            format!(
                "I remember what {peer} told me before, such as their {field}, so I don't ask \
                 again until it is 90 days old."
            )
        } else if let Some(field) = r.usually_declines.iter().next() {
            format!(
                "I've noticed {peer} usually keeps their {field} to themselves, so I've \
                 stopped asking for it."
            )
        } else {
            format!(
                "I remember what {peer} and the others you plan with usually ask and share, \
                 so I ask you less."
            )
        };
        self.shared.introduce(
            Introduction::Memory,
            Some(self.id.to_string()),
            format!(
                "{insight} Everything I remember stays on this device; you can see, edit or \
                 forget it at any time."
            ),
        );
    }
}

#[cfg(test)]
mod tests;
