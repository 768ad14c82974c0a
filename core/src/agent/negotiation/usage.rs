//! Rules that travel with a value (SPEC-NOTES "Usage rules"), enforced by the agent that
//! received it. A value the peer shared may come with a rule in the packet's sharing
//! declaration ([`UsageRule`]):
//!
//! - **expiry**: at `expires_at` the value leaves the thread, the packets kept of it and
//!   relationship memory, as a retracted one does (nothing is sent: the rule already
//!   said so); a value that arrives already expired is not taken in;
//! - **purpose**: memory lends the value to no thread about anything else
//!   ([`Shared::remembered`] reads [`Shared::rule_allows`]);
//! - **no re-sharing**: the value reaches no one but this agent — a group's coordinator
//!   computes what it sends the participants without it ([`passable`]), and what the
//!   agent shows a third party (an MCP host) withholds it.
//!
//! Memory keeps a value's rule beside it (`usage.<field>`); [`Shared::index_usage`]
//! keeps the expiries of what memory holds, so the agent wakes for the first.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::agent::negotiation::retraction::Deleted;
use crate::agent::thread::{escape_json, strings_of, Thread};
use crate::agent::*;
use crate::display;
use crate::memory::USAGE_PREFIX;
use crate::packet::{PermissionsDeclaration, UsageRule};

impl ThreadStep<'_> {
    /// Takes in the peer's `provided` values with the rules `decl` sets for them: a value
    /// already expired is not taken in, a value without a rule drops the rule an earlier
    /// one had. Returns the fields not taken in.
    pub(in crate::agent) fn take_rules(
        &mut self,
        provided: &Context,
        decl: Option<&PermissionsDeclaration>,
    ) -> BTreeSet<String> {
        let now = self.shared.now;
        let mut expired = BTreeSet::new();
        for k in provided.keys() {
            match decl.and_then(|d| d.usage.get(k)).filter(|r| !r.is_empty()) {
                Some(r) if r.expiry().is_some_and(|e| e <= now) => {
                    expired.insert(k.clone());
                }
                Some(r) => {
                    self.t.usage.insert(k.clone(), r.clone());
                }
                None => {
                    self.t.usage.remove(k);
                }
            }
        }
        expired
    }

    /// The values of this thread whose rule expired: deleted, and the user told.
    pub(in crate::agent) fn usage_timeouts(&mut self) {
        let now = self.shared.now;
        let due: Vec<String> = self
            .t
            .usage
            .iter()
            .filter(|(_, r)| r.expiry().is_some_and(|e| e <= now))
            .map(|(f, _)| f.clone())
            .collect();
        if due.is_empty() {
            return;
        }
        let peer = self.t.peer.clone();
        self.delete_theirs(&due, Deleted::Expired);
        self.audit(AgentEvent::UsageExpired {
            peer: peer.clone(),
            fields: due.clone(),
        });
        self.notify(
            NotifyKind::Memory,
            format!(
                "What {peer} shared of {} expired, as they asked: deleted from this thread and from what your agent remembers of them.",
                display::line(&due.join(", "), display::MAX_SHORT)
            ),
        );
        self.go_on_without();
    }
}

/// The first expiry of a value thread `t` still holds.
pub(in crate::agent) fn usage_deadline(t: &Thread) -> Option<Timestamp> {
    t.usage.values().filter_map(UsageRule::expiry).min()
}

/// The values of `theirs` that may reach a third party: all but those whose rule says
/// no re-sharing.
pub(in crate::agent) fn passable(theirs: &Context, usage: &BTreeMap<String, UsageRule>) -> Context {
    theirs
        .iter()
        .filter(|(k, _)| !usage.get(*k).is_some_and(|r| r.no_reshare))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

impl Shared {
    /// The rule memory keeps for `peer`'s cached `field`, if any.
    pub(in crate::agent) fn remembered_rule(
        &self,
        peer: &Address,
        field: &str,
    ) -> Option<UsageRule> {
        let p = peer.as_str();
        self.memory
            .current(p, p, &format!("{USAGE_PREFIX}{field}"))
            .and_then(|f| serde_json::from_str(&f.value).ok())
    }

    /// Whether memory may lend `peer`'s cached `field` to a thread whose intent category
    /// is `purpose`: its rule, if any, has not expired and names this purpose, if one.
    pub(in crate::agent) fn rule_allows(&self, peer: &Address, field: &str, purpose: &str) -> bool {
        let Some(r) = self.remembered_rule(peer, field) else {
            return true;
        };
        if r.expiry().is_some_and(|e| e <= self.now) {
            return false;
        }
        r.purpose.as_deref().is_none_or(|p| p == purpose)
    }

    /// Rebuilds the index of the expiries memory holds (after a restore or an import).
    pub(in crate::agent) fn index_usage(&mut self) {
        let mut index = BTreeSet::new();
        for f in self.memory.facts() {
            let Some(field) = f.predicate.strip_prefix(USAGE_PREFIX) else {
                continue;
            };
            if f.valid_to.is_some() {
                continue;
            }
            let Ok(peer) = Address::parse(&f.project_id) else {
                continue;
            };
            if let Some(e) = serde_json::from_str::<UsageRule>(&f.value)
                .ok()
                .and_then(|r| r.expiry())
            {
                index.insert((e, peer, field.to_string()));
            }
        }
        self.usage_expiries = index;
    }

    /// Notes the expiries of the rules `peer`'s values came with, just kept in memory.
    pub(in crate::agent) fn index_rules(
        &mut self,
        peer: &Address,
        usage: &BTreeMap<String, UsageRule>,
    ) {
        for (field, r) in usage {
            if let Some(e) = r.expiry() {
                self.usage_expiries.insert((e, peer.clone(), field.clone()));
            }
        }
    }

    /// When the first value memory holds expires.
    pub(in crate::agent) fn memory_usage_deadline(&self) -> Option<Timestamp> {
        self.usage_expiries.first().map(|(e, _, _)| *e)
    }

    /// Deletes from memory the values whose rule expired. An index entry whose rule
    /// changed since (a newer value, forgotten) deletes nothing.
    pub(in crate::agent) fn expire_memory(&mut self) {
        while let Some((e, peer, field)) = self.usage_expiries.first().cloned() {
            if e > self.now {
                break;
            }
            self.usage_expiries.pop_first();
            let still = self
                .remembered_rule(&peer, &field)
                .and_then(|r| r.expiry())
                .is_some_and(|at| at <= self.now);
            if still {
                self.forget_field(&peer, &field);
                self.audit(
                    None,
                    AgentEvent::UsageExpired {
                        peer,
                        fields: vec![field],
                    },
                );
            }
        }
    }
}

impl Agent {
    /// The field and sharer of a value held under "no re-sharing" that `bytes` (what this
    /// agent is about to give everyone in `audience`) carries, if any: a value another
    /// agent shared with this one only reaches no one else — in a thread's values or in
    /// memory, compared as whole JSON strings of at least 4 characters.
    pub(in crate::agent) fn guarded_value(
        &self,
        audience: &[Address],
        bytes: &[u8],
    ) -> Option<(String, Address)> {
        let text = String::from_utf8_lossy(bytes);
        let carries = |v: &Value| {
            strings_of(v)
                .iter()
                .any(|s| s.chars().count() >= 4 && text.contains(&escape_json(s)))
        };
        let beyond = |from: &Address| audience.iter().any(|a| a != from);
        for t in self.threads.values() {
            for (field, _) in t.usage.iter().filter(|(_, r)| r.no_reshare) {
                if beyond(&t.peer) && t.theirs.get(field).is_some_and(carries) {
                    return Some((field.clone(), t.peer.clone()));
                }
            }
        }
        for f in self.shared.memory.facts().filter(|f| f.valid_to.is_none()) {
            let Some(field) = f.predicate.strip_prefix(USAGE_PREFIX) else {
                continue;
            };
            let Ok(peer) = Address::parse(&f.project_id) else {
                continue;
            };
            let guarded = serde_json::from_str::<UsageRule>(&f.value).is_ok_and(|r| r.no_reshare);
            if !guarded || !beyond(&peer) {
                continue;
            }
            let cached = self
                .shared
                .memory
                .current(&f.project_id, &f.project_id, &format!("cache.{field}"))
                .and_then(|c| serde_json::from_str::<Value>(&c.value).ok());
            if cached.as_ref().is_some_and(carries) {
                return Some((field.to_string(), peer));
            }
        }
        None
    }
}
