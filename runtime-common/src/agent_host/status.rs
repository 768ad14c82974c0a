//! What `status`, `permissions` and `notifications` answer.

use std::collections::BTreeMap;

use super::*;
use crate::control::{PermissionsInfo, Response, StatusInfo};

impl AgentHost {
    /// `snapshot`: a consistent copy of the database beside it, named `name` (a plain
    /// file name that does not exist yet).
    pub(super) fn snapshot(&mut self, name: &str) -> Response {
        let plain = !name.is_empty()
            && !name.contains(['/', '\\'])
            && name != "."
            && name != ".."
            && name.starts_with(".agent.db.backup-");
        if !plain {
            return Response::err("snapshot: a file name .agent.db.backup-… in the home");
        }
        let Some(dir) = self.store.path().parent() else {
            return Response::err("snapshot: the agent's database is in memory");
        };
        let to = dir.join(name);
        if to.exists() {
            return Response::err(format!("snapshot: {name} exists"));
        }
        match self.store.snapshot(&to) {
            Ok(()) => Response::ok(serde_json::json!({ "path": to.display().to_string() })),
            Err(e) => Response::err(format!("snapshot: {e}")),
        }
    }

    pub(super) fn read_notifications(&mut self, number: Option<u64>, all: bool) -> Response {
        match (number, all) {
            (_, true) => {
                let mut n = 0;
                for e in self.notifications.iter_mut().filter(|e| !e.read) {
                    e.read = true;
                    n += 1;
                }
                Response::ok(format!("{n} notification(s) marked read"))
            }
            (Some(k), false) => match self.notifications.iter_mut().find(|e| e.number == k) {
                Some(e) => {
                    e.read = true;
                    Response::ok(format!("notification {k} marked read"))
                }
                None => Response::err(format!(
                    "no notification {k} (the agent keeps the last {MAX_NOTIFICATIONS}; see `a2acp notifications --all`)"
                )),
            },
            (None, false) => Response::err("give a notification's number, or --all"),
        }
    }

    /// The link connected through `door`, one of the relay's URLs (`status` shows it).
    pub fn set_door(&mut self, door: String) {
        self.door = Some(door);
    }

    pub(super) fn status(&self) -> StatusInfo {
        let a = &self.agent;
        StatusInfo {
            address: a.address().to_string(),
            key: a.public_key().to_string(),
            online: a.is_online(),
            outbox: a.outbox_len(),
            threads: a.threads().len(),
            open_threads: a
                .threads()
                .values()
                .filter(|t| !t.state.is_terminal())
                .count(),
            prompts: self.prompts.len(),
            refused: a.link_refusal().map(|r| crate::control::RefusedInfo {
                code: r.code.as_str().to_string(),
                message: r.message.clone(),
                retry_after_secs: r.retry_after.map(|d| d.as_secs()),
            }),
            door: self.door.clone(),
            audit_lost: self.audit_log.as_ref().map_or(0, |l| l.lost()),
            transparency: self.transparency.as_ref().map(|t| {
                let s = t.stats();
                crate::control::TransparencyInfo {
                    queued: s.queued,
                    delivered: s.delivered,
                    dropped: s.dropped,
                    failed: s.failed,
                }
            }),
            recovery: a
                .recovery_key_state()
                .map(|r| crate::control::RecoveryInfo {
                    key: a2acp_core::encoding::b64_encode(&r.recovery_key),
                    seq: r.seq,
                    bound: r.bound,
                    refused: r.refused,
                }),
        }
    }

    pub(super) fn permissions(&self) -> PermissionsInfo {
        let t = self.agent.permissions();
        let list = |s: &std::collections::BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>();
        let mut tiers = BTreeMap::new();
        tiers.insert("always_share".to_string(), list(&t.always_share));
        tiers.insert("ask_first".to_string(), list(&t.ask_first));
        tiers.insert("never_share".to_string(), list(&t.never_share));
        PermissionsInfo {
            tiers,
            overrides: self
                .agent
                .overrides()
                .iter()
                .map(|(a, o)| (a.to_string(), o.clone()))
                .collect(),
            blocked: self.agent.blocked().iter().map(|a| a.to_string()).collect(),
            usage: t.usage.clone(),
        }
    }
}
