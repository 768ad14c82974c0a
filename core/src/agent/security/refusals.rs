//! Malformed packets (§13.4) and the limits per peer (SPEC-NOTES §13, "Limits per peer"):
//! what is refused of a hostile or broken peer, counted, and told to the user.

use crate::agent::negotiation::consent::{may_prompt, next_milestone, prompts_open};
use crate::agent::thread::history_key;
use crate::agent::*;

use crate::crypto::{thread_tag, Direction};
use crate::packet::{Body, Packet};
use crate::persist::PersistOp;

/// Counts of what one peer sent past the limits per peer (SPEC-NOTES §13, "Limits per
/// peer"): counts, not one record per packet, so a flood grows nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Refusals {
    /// New threads refused (`too_many_threads`, or `too_many_prompts` on a first packet).
    pub threads: u64,
    /// Child threads of refused forks (`too_many_children`, `too_many_threads`).
    pub fork_children: u64,
    /// Packets of open threads refused (`too_many_prompts`, `thread_too_large`).
    pub packets: u64,
    /// The total the user was last told (the notification is renewed when the total
    /// reaches 1, 2, 5, 10, 20, 50…, and otherwise at most once a minute).
    #[serde(default)]
    pub(in crate::agent) told_at: u64,
    /// When the user was last told.
    #[serde(default)]
    pub(in crate::agent) told_when: Option<Timestamp>,
    /// `processing_error` answers sent in the current minute, and when it started.
    #[serde(default)]
    pub(in crate::agent) answers: Option<(Timestamp, u32)>,
}

impl Refusals {
    /// Everything refused.
    pub fn total(&self) -> u64 {
        self.threads
            .saturating_add(self.fork_children)
            .saturating_add(self.packets)
    }

    /// When the user is told the count next, if it moved since they were told.
    pub(in crate::agent) fn tell_due(&self) -> Option<Timestamp> {
        (self.told_at < self.total()).then(|| {
            self.told_when
                .map_or(Timestamp::ZERO, |t| t.add(REFUSAL_NOTICE_PERIOD))
        })
    }
}

/// The collapsed notification of a peer's refusals is renewed at most this often (apart
/// from the totals 1, 2, 5, 10, 20, 50…).
pub(in crate::agent) const REFUSAL_NOTICE_PERIOD: Duration = Duration::from_secs(60);

impl Agent {
    /// Open threads `peer` started with this agent, children of its forks included.
    pub(in crate::agent) fn open_threads_started_by(&self, peer: &Address) -> usize {
        self.threads
            .values()
            .filter(|t| &t.peer == peer && !t.initiator && !t.state.is_terminal())
            .count()
    }

    /// Open prompts of threads `peer` started. Threads this agent's user started are not
    /// counted, nor limited: their prompts are bounded by what the user asked for (at most
    /// one consent and one resolution prompt per thread), and a peer answering them must
    /// not be refused because other threads of that peer wait for the user.
    pub(in crate::agent) fn open_prompts_of(&self, peer: &Address) -> usize {
        self.threads
            .values()
            .filter(|t| &t.peer == peer && !t.initiator)
            .map(prompts_open)
            .sum()
    }

    /// Why the first packet `p` of a thread its sender opens is refused, if it is.
    pub(in crate::agent) fn new_thread_refusal(
        &self,
        p: &Packet,
    ) -> Option<(&'static str, String)> {
        let l = &self.shared.config.limits;
        let open = self.open_threads_started_by(&p.from);
        if open >= l.max_threads_per_peer as usize {
            return Some((
                "too_many_threads",
                format!(
                    "{open} threads you started with this agent are open and at most {} may be; this one was not opened",
                    l.max_threads_per_peer
                ),
            ));
        }
        // Any new thread may end in a prompt (a question of the peer, or a proposal).
        let prompts = self.open_prompts_of(&p.from);
        if prompts >= l.max_prompts_per_peer as usize {
            return Some((
                "too_many_prompts",
                format!(
                    "{prompts} of your questions wait for this agent's user (at most {}); this thread was not opened",
                    l.max_prompts_per_peer
                ),
            ));
        }
        None
    }

    /// Why a packet `p` (`len` bytes) of an open thread `id` is refused, if it is.
    pub(in crate::agent) fn packet_refusal(
        &self,
        id: &str,
        p: &Packet,
        len: usize,
    ) -> Option<(&'static str, String)> {
        let t = self.threads.get(id)?;
        let l = &self.shared.config.limits;
        let held: usize = t.history.iter().map(|h| h.json.len()).sum();
        if held.saturating_add(len) > l.max_thread_bytes {
            return Some((
                "thread_too_large",
                format!(
                    "this thread holds {held} bytes of packets and at most {} are kept; this packet was not processed",
                    l.max_thread_bytes
                ),
            ));
        }
        if let Body::ThreadFork(f) = &p.body {
            // A fork is taken whole or refused whole.
            let n = f.new_threads.len();
            let open = self.open_threads_started_by(&t.peer);
            if n > l.max_fork_children as usize {
                return Some((
                    "too_many_children",
                    format!(
                        "a thread_fork may create at most {} threads; this one asked for {n}, so none was created",
                        l.max_fork_children
                    ),
                ));
            }
            if open.saturating_add(n) > l.max_threads_per_peer as usize {
                return Some((
                    "too_many_threads",
                    format!(
                        "{open} threads you started with this agent are open and at most {} may be; none of the {n} was created",
                        l.max_threads_per_peer
                    ),
                ));
            }
        }
        let prompts = self.open_prompts_of(&t.peer);
        if !t.initiator
            && !t.state.is_terminal()
            && may_prompt(&p.body)
            && prompts_open(t) == 0
            && prompts >= l.max_prompts_per_peer as usize
        {
            return Some((
                "too_many_prompts",
                format!(
                    "{prompts} of your questions wait for this agent's user (at most {}); this packet was not processed, send it again once they are answered",
                    l.max_prompts_per_peer
                ),
            ));
        }
        None
    }

    /// Forgets the oldest ended threads `peer` started beyond the number kept, records
    /// included, so a peer that opens and ends threads forever grows nothing.
    /// Removes thread `id` and deletes its records (the thread and its history);
    /// `false` if there is no such thread.
    pub(in crate::agent) fn forget_thread(&mut self, id: &str) -> bool {
        let Some(t) = self.threads.remove(id) else {
            return false;
        };
        self.shared.tags.remove(&(t.peer.clone(), thread_tag(id)));
        self.shared.dirty.threads.remove(id);
        // The thread record goes first: a crash after it leaves history records without
        // a thread, which a restore ignores; the other way round would leave a thread
        // record missing its history, which a restore refuses as corrupt.
        self.shared.dirty.ops.push(PersistOp::Delete {
            key: format!("thread/{id}"),
        });
        let stored = self.shared.hist_stored.remove(id).unwrap_or(0);
        for n in 0..stored {
            self.shared.dirty.ops.push(PersistOp::Delete {
                key: history_key(id, n),
            });
        }
        for key in t.agreements {
            self.shared.dirty.ops.push(PersistOp::Delete { key });
        }
        true
    }

    pub(in crate::agent) fn forget_ended_threads(&mut self, peer: &Address) {
        let keep = self.shared.config.limits.max_ended_threads_per_peer as usize;
        self.forget_ended_where(|p| p == peer, keep);
    }

    /// Forgets the oldest ended threads the peers `of` started beyond `keep` of them.
    pub(in crate::agent) fn forget_ended_where(
        &mut self,
        of: impl Fn(&Address) -> bool,
        keep: usize,
    ) {
        let mut ended: Vec<(Timestamp, String, Address)> = self
            .threads
            .values()
            .filter(|t| of(&t.peer) && !t.initiator && t.state.is_terminal())
            .map(|t| {
                (
                    t.ended_at.unwrap_or(t.last_activity),
                    t.id.clone(),
                    t.peer.clone(),
                )
            })
            .collect();
        if ended.len() <= keep {
            return;
        }
        ended.sort();
        let extra = ended.len() - keep;
        for (_, id, peer) in ended.into_iter().take(extra) {
            if !self.forget_thread(&id) {
                continue;
            }
            self.shared
                .audit(Some(&id), AgentEvent::EndedThreadForgotten { peer, keep });
        }
    }
}

impl ThreadStep<'_> {
    /// Refuses packet `p` of open thread `id`: it is not taken in (not even as received,
    /// so a later gap exchange can bring it again), and the sender gets a `processing_error`.
    pub(in crate::agent) fn refuse_packet(&mut self, p: &Packet, code: &str, why: String) {
        let peer = p.from.clone();
        match &p.body {
            Body::ThreadFork(f) => {
                let n = f.new_threads.len() as u64;
                self.shared.count_refusal(&peer, |r| {
                    r.fork_children = r.fork_children.saturating_add(n)
                });
            }
            _ => self
                .shared
                .count_refusal(&peer, |r| r.packets = r.packets.saturating_add(1)),
        }
        self.answer_refusal(&peer, code, why, &p.packet_id);
    }

    /// Sends `peer` a `processing_error` about packet `regarding` in thread `id`, outside
    /// the thread's history (a refusal is not part of the negotiation), at most 10 a minute
    /// per peer.
    pub(in crate::agent) fn answer_refusal(
        &mut self,
        peer: &Address,
        code: &str,
        why: String,
        regarding: &str,
    ) {
        let id = self.id;
        if !self.shared.may_answer_refusal(peer) {
            return;
        }
        let version = self.t.version.clone();
        let (packet_id, bytes) = self
            .shared
            .processing_error(id, peer, version, code, why, regarding);
        self.seal_and_queue(&packet_id, &bytes);
    }
}

impl Shared {
    pub(in crate::agent) fn malformed(&mut self, peer: &Address, why: String) {
        let threshold = self.config.limits.malformed_flag_threshold;
        let rec = self.peers.entry(peer.clone()).or_default();
        rec.malformed = rec.malformed.saturating_add(1);
        let flag = rec.malformed >= threshold && !rec.flagged;
        if flag {
            rec.flagged = true;
        }
        self.dirty.peers.insert(peer.clone());
        self.dropped(
            None,
            DropReason::Malformed {
                peer: peer.clone(),
                why: why.to_string(),
            },
        );
        if flag {
            self.notify(
                None,
                NotifyKind::Flagged,
                format!("{peer} keeps sending malformed packets ({threshold} in a row). You can block it."),
            );
        }
    }

    /// Refuses the first packet of a thread: no thread is created, and the sender gets a
    /// `processing_error` sealed in the session its envelope opened.
    pub(in crate::agent) fn refuse_new_thread(
        &mut self,
        p: &Packet,
        session: ThreadSession,
        code: &str,
        why: String,
    ) {
        let peer = p.from.clone();
        self.count_refusal(&peer, |r| r.threads = r.threads.saturating_add(1));
        if !self.may_answer_refusal(&peer) {
            return;
        }
        let Some(key) = self.keys.get(&peer).cloned() else {
            return;
        };
        let (packet_id, bytes) =
            self.processing_error(&p.thread_id, &peer, None, code, why, &p.packet_id);
        let mut session = session;
        if let Ok(env) = session.seal(
            &self.identity,
            &self.config.address,
            &peer,
            &key,
            &p.thread_id,
            Direction::FromResponder,
            &bytes,
        ) {
            self.queue_threadless(&p.thread_id, &packet_id, env);
        }
    }

    /// A `processing_error` packet of thread `id` to `peer`: its id and bytes.
    pub(in crate::agent) fn processing_error(
        &mut self,
        id: &str,
        peer: &Address,
        version: Option<String>,
        code: &str,
        why: String,
        regarding: &str,
    ) -> (String, Vec<u8>) {
        let packet_id = self.meta.rng.id("pkt_", 12);
        self.dirty.meta = true;
        let p = Packet {
            protocol: format!(
                "a2acp/{}",
                version.unwrap_or_else(|| self.highest_version())
            ),
            packet_id: packet_id.clone(),
            thread_id: id.to_string(),
            from: self.config.address.clone(),
            to: peer.clone(),
            timestamp: self.now.to_rfc3339(),
            capabilities: None,
            format_hints: None,
            body: Body::ProcessingError(crate::packet::ProcessingErrorBody {
                error: code.to_string(),
                message: why,
                regarding: Some(regarding.to_string()),
            }),
        };
        (packet_id, p.to_bytes().unwrap_or_default())
    }

    /// Whether another refusal of `peer` may be answered this minute (at most 10).
    pub(in crate::agent) fn may_answer_refusal(&mut self, peer: &Address) -> bool {
        let now = self.now;
        let rec = self.peers.entry(peer.clone()).or_default();
        let (start, n) = match rec.refused.answers {
            Some((start, n)) if now < start.add(std::time::Duration::from_secs(60)) => (start, n),
            _ => (now, 0),
        };
        let ok = n < 10;
        rec.refused.answers = Some((start, if ok { n + 1 } else { n }));
        self.dirty.peers.insert(peer.clone());
        ok
    }

    /// Counts a refusal of `peer`. Its user hears of them in one notification (key
    /// `refused/<address>`) whose count is renewed when the total reaches 1, 2, 5, 10, 20,
    /// 50…, and otherwise at most once a minute (a timer catches up with the last ones);
    /// the audit log gets one line each time, not one per refusal.
    pub(in crate::agent) fn count_refusal(
        &mut self,
        peer: &Address,
        what: impl FnOnce(&mut Refusals),
    ) {
        let rec = self.peers.entry(peer.clone()).or_default();
        what(&mut rec.refused);
        self.dirty.peers.insert(peer.clone());
        let milestone = next_milestone(rec.refused.told_at) <= rec.refused.total();
        if milestone || rec.refused.tell_due().is_some_and(|t| t <= self.now) {
            self.tell_refusals(peer);
        }
    }

    /// Renews the collapsed notification of `peer`'s refusals with the current counts.
    pub(in crate::agent) fn tell_refusals(&mut self, peer: &Address) {
        let now = self.now;
        let Some(rec) = self.peers.get_mut(peer) else {
            return;
        };
        rec.refused.told_at = rec.refused.total();
        rec.refused.told_when = Some(now);
        self.dirty.peers.insert(peer.clone());
        let r = rec.refused.clone();
        let l = &self.config.limits;
        let threads = r.threads.saturating_add(r.fork_children);
        let mut parts = Vec::new();
        if threads > 0 {
            parts.push(format!(
                "opened {threads} thread(s) past your limits (at most {} at once, {} per fork)",
                l.max_threads_per_peer, l.max_fork_children
            ));
        }
        if r.packets > 0 {
            parts.push(format!(
                "sent {} packet(s) past your limits (at most {} open questions, {} KiB per thread)",
                r.packets,
                l.max_prompts_per_peer,
                l.max_thread_bytes / 1024
            ));
        }
        self.notify_keyed(
            format!("refused/{peer}"),
            NotifyKind::Flagged,
            format!(
                "{peer} {}; they were refused. Block {peer}?",
                parts.join(" and ")
            ),
        );
        self.audit(
            None,
            AgentEvent::PeerLimited {
                peer: peer.clone(),
                threads: r.threads,
                fork_children: r.fork_children,
                packets: r.packets,
            },
        );
    }
}
