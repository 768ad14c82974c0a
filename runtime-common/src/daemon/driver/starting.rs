//! Answering `start_thread` once the relay took or refused the thread's first packet, and
//! `key_rotate` once the relay installed or refused the rotation.

use std::time::Instant;

use super::*;
use crate::control::Response;

impl Driver {
    /// Answers the `key_rotate` requests once the rotation ended, or with `pending`
    /// once their wait ([`ROTATE_WAIT`]) is over.
    pub(super) fn answer_rotating(&mut self) {
        if self.rotating.is_empty() {
            return;
        }
        if let Some(outcome) = self.host.take_rotation_outcome() {
            let r = self.host.rotation_answer(Some(outcome));
            for (_, reply) in self.rotating.drain(..) {
                let _ = reply.send(r.clone());
            }
            return;
        }
        let now = Instant::now();
        let late: Vec<_> = self
            .rotating
            .iter()
            .enumerate()
            .filter(|(_, (d, _))| now >= *d)
            .map(|(i, _)| i)
            .collect();
        for i in late.into_iter().rev() {
            let (_, reply) = self.rotating.remove(i);
            let _ = reply.send(self.host.rotation_answer(None));
        }
    }

    /// The thread `id` goes on as (its recipient had no a2acp agent; §18) and that
    /// thread's peer.
    fn continued(&self, id: &str) -> Option<(String, String)> {
        let agent = self.host.agent();
        let next = agent.thread(id)?.continued_as.clone()?;
        let peer = agent.thread(&next)?.peer.to_string();
        Some((next, peer))
    }

    /// Answers the `start_thread` requests whose first packet the relay accepted or
    /// refused, or whose wait is over ([`FIRST_PACKET_WAIT`]).
    pub(super) fn answer_starting(&mut self) {
        use a2acp_core::agent::FirstPacket;
        let now = Instant::now();
        let mut i = 0;
        while i < self.starting.len() {
            let (what, deadline, _) = &self.starting[i];
            let id = match what {
                Starting::Thread(id) => id,
                Starting::Group(data, legs) => {
                    let resp = self.group_started(data, legs, now >= *deadline);
                    match resp {
                        Some(r) => {
                            let (_, _, reply) = self.starting.remove(i);
                            let _ = reply.send(r);
                        }
                        None => i += 1,
                    }
                    continue;
                }
            };
            let state = self.host.agent().first_packet(id);
            let resp = match state {
                Some(FirstPacket::Accepted) => Some(Response::ok(serde_json::json!({
                    "thread_id": id,
                    "relay": "accepted",
                }))),
                Some(FirstPacket::Refused(code)) => Some(match self.continued(id) {
                    Some((next, peer)) => Response::ok(serde_json::json!({
                        "thread_id": next,
                        "a2a": true,
                        "peer": peer,
                        "declined": id,
                        "relay": "refused",
                        "code": code.as_str(),
                    })),
                    None => {
                        let peer = self
                            .host
                            .agent()
                            .thread(id)
                            .map(|t| t.peer.to_string())
                            .unwrap_or_default();
                        Response {
                            ok: false,
                            error: Some(format!(
                                "thread {id} declined: the relay refused the recipient ({}): no agent is registered as {peer}",
                                code.as_str()
                            )),
                            data: serde_json::json!({
                                "thread_id": id,
                                "relay": "refused",
                                "code": code.as_str(),
                            }),
                        }
                    }
                }),
                Some(FirstPacket::Waiting) if now < *deadline => None,
                Some(FirstPacket::Waiting) => Some(Response::ok(serde_json::json!({
                    "thread_id": id,
                    "relay": "waiting",
                    "online": self.host.agent().is_online(),
                }))),
                None => Some(Response::err(format!("thread {id} is gone"))),
            };
            match resp {
                Some(r) => {
                    let (_, _, reply) = self.starting.remove(i);
                    let _ = reply.send(r);
                }
                None => i += 1,
            }
        }
    }

    /// The answer to a `start_thread` that started a group, once the relay accepted or
    /// refused the first packet of every leg, or `late` (the wait is over): the started
    /// answer with `relay` (per leg: `accepted`, `refused`, `waiting`), `refused` (the
    /// relay's code per refused leg) and `online`.
    fn group_started(
        &self,
        data: &serde_json::Value,
        legs: &[String],
        late: bool,
    ) -> Option<Response> {
        use a2acp_core::agent::FirstPacket;
        let mut relay = serde_json::Map::new();
        let mut refused = serde_json::Map::new();
        let mut waiting = false;
        for id in legs {
            let word = match self.host.agent().first_packet(id) {
                Some(FirstPacket::Accepted) => "accepted",
                Some(FirstPacket::Refused(code)) => {
                    refused.insert(id.clone(), code.as_str().into());
                    "refused"
                }
                Some(FirstPacket::Waiting) | None => {
                    waiting = true;
                    "waiting"
                }
            };
            relay.insert(id.clone(), word.into());
        }
        if waiting && !late {
            return None;
        }
        let mut d = data.clone();
        if let Some(o) = d.as_object_mut() {
            o.insert("relay".into(), relay.into());
            o.insert("refused".into(), refused.into());
            o.insert("online".into(), self.host.agent().is_online().into());
        }
        Some(Response::ok(d))
    }
}
