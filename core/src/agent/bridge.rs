//! The one interface between the agent and its bridges to other protocols (SPEC-NOTES
//! "Adding a bridge"). A bridged peer is an address in a reserved domain no relay can
//! serve ([`Address::is_bridged`]); what it says reaches the agent as packet bodies from
//! that peer ([`Agent::bridged_said`], [`Agent::bridged_open`]), taken through the same
//! path as packets from the relay; what the agent addresses to it is released as
//! [`Output::Bridged`] in place of a sealed frame. A bridge reads threads through
//! [`ThreadView`] only, and keeps its own state of a thread in the thread's record
//! ([`Agent::set_bridge_state`]) without the agent knowing its type.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::address::Address;
use crate::agent::*;
use crate::packet::{Body, Intent, Packet, ResolutionBody, ResolutionStatus};

/// A bridge to another protocol, registered with the agent ([`Agent::add_bridge`]). The
/// agent calls it at fixed points of every input; it acts on the agent through the
/// agent's public interface alone. Every method has a default that does nothing.
pub trait Bridge: std::fmt::Debug + Send + Sync {
    /// The bridge's name: what [`Command::StartBridgedThread`] and
    /// [`BridgedFallback`] name, and the prefix of the keys of its state in a thread's
    /// record.
    fn name(&self) -> &'static str;
    /// What its peers are, in words, for the user ("its A2A agent").
    fn peer_kind(&self) -> &'static str {
        "its agent"
    }
    /// Opens a thread with the bridged peer at `to` (the bridge's own kind of
    /// destination, e.g. a URL) about `intent`: [`Command::StartBridgedThread`], or a
    /// thread that goes on where the relay knows no recipient ([`BridgedFallback`]).
    /// The new thread's id, or `None` when refused (the bridge tells the user why).
    fn open(
        &self,
        _agent: &mut Agent,
        _to: &str,
        _intent: Intent,
        _context: Context,
    ) -> Option<String> {
        None
    }
    /// Once per input, before its outputs are released: the packets the agent addressed
    /// to bridged peers during it (in order) and the threads it changed.
    fn step(&self, _agent: &mut Agent, _step: &BridgeStep) {}
    /// When the bridge wants [`Bridge::timeout`] called next.
    fn wake(&self, _agent: &Agent) -> Option<Timestamp> {
        None
    }
    /// The agent's timer fired (before the threads' own timeouts step).
    fn timeout(&self, _agent: &mut Agent) {}
}

/// What one input did that a bridge may act on ([`Bridge::step`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BridgeStep {
    /// The packets the agent addressed to bridged peers, in order.
    pub packets: Vec<BridgedPacket>,
    /// The threads that changed, by id (empty in a further round of the same input).
    pub changed: Vec<String>,
}

/// Peers that share the caps per peer ([`BridgedOpening::shared`]): all those `member`
/// says are, together, under `share` times each cap.
#[derive(Debug, Clone, Copy)]
pub struct SharedCaps {
    /// Whether a peer is one of them.
    pub member: fn(&Address) -> bool,
    /// How many times the caps per peer they may use together.
    pub share: usize,
}

/// A new thread a bridged peer opens ([`Agent::bridged_open`]).
#[derive(Debug, Clone)]
pub struct BridgedOpening {
    /// The bridged peer.
    pub peer: Address,
    /// Its first packet's body.
    pub body: Body,
    /// The bridge's state of the thread, kept before the packet is taken (key, value).
    pub state: Vec<(String, Value)>,
    /// Caps the peer shares with others, if it does.
    pub shared: Option<SharedCaps>,
}

/// Why a bridged peer's new thread was not opened ([`Agent::bridged_open`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgedRefusal {
    /// A cap per peer on what waits (open threads, open prompts): for now.
    #[error("{0}")]
    Limit(String),
    /// The peers sharing caps together have `open` threads open, at most `max`.
    #[error("{open} threads of these peers are open and at most {max} may be")]
    SharedThreads {
        /// Open threads.
        open: usize,
        /// The cap.
        max: usize,
    },
    /// The peers sharing caps together have `open` prompts waiting, at most `max`.
    #[error("{open} prompts of these peers wait (at most {max})")]
    SharedPrompts {
        /// Open prompts.
        open: usize,
        /// The cap.
        max: usize,
    },
    /// The body makes no valid packet.
    #[error("{0}")]
    Invalid(String),
    /// The packet cannot open a thread.
    #[error("the packet cannot open a thread")]
    NotAdmitted,
}

/// One packet of a thread, as [`ThreadView::packets`] gives it.
#[derive(Debug, Clone, Copy)]
pub struct Logged<'a> {
    /// The packet id.
    pub packet_id: &'a str,
    /// The packet's JSON, as sent or received.
    pub json: &'a str,
    /// Whether this agent sent it.
    pub outgoing: bool,
}

/// A thread's open resolution, as [`ThreadView::resolution`] gives it.
#[derive(Debug, Clone, Copy)]
pub struct OpenProposal<'a> {
    /// The id of the `resolution` packet.
    pub packet_id: &'a str,
    /// Who proposed it.
    pub proposer: &'a Address,
    /// The resolution.
    pub body: &'a ResolutionBody,
    /// The answers received so far, by whom.
    pub answers: &'a [(Address, ResolutionStatus)],
}

/// A thread as any bridge reads it: read-only, and nothing of the agent's internals.
#[derive(Debug, Clone, Copy)]
pub struct ThreadView<'a> {
    t: &'a Thread,
}

impl<'a> ThreadView<'a> {
    /// The thread id.
    pub fn id(&self) -> &'a str {
        &self.t.id
    }
    /// The other agent.
    pub fn peer(&self) -> &'a Address {
        &self.t.peer
    }
    /// What the thread is about.
    pub fn intent(&self) -> &'a Intent {
        &self.t.intent
    }
    /// Where the thread stands in its lifecycle (§9).
    pub fn state(&self) -> ThreadState {
        self.t.state
    }
    /// Whether the thread is halted (its peer's key changed).
    pub fn halted(&self) -> bool {
        self.t.halted
    }
    /// The thread's packets, oldest first.
    pub fn packets(&self) -> impl DoubleEndedIterator<Item = Logged<'a>> + ExactSizeIterator + 'a {
        self.t.history.iter().map(|h| Logged {
            packet_id: &h.packet_id,
            json: &h.json,
            outgoing: h.outgoing,
        })
    }
    /// Whether the peer gave `field`, or said it has no value for it.
    pub fn answered(&self, field: &str) -> bool {
        self.t.theirs.contains_key(field) || self.t.peer_unavailable.contains(field)
    }
    /// The open resolution: the packet that proposed it, and the answers so far.
    pub fn resolution(&self) -> Option<OpenProposal<'a>> {
        self.t.stage.resolution().map(|r| OpenProposal {
            packet_id: &r.packet_id,
            proposer: &r.proposer,
            body: &r.body,
            answers: &r.answers,
        })
    }
    /// Whether a consent prompt of this agent's user is open in the thread.
    pub fn consent_open(&self) -> bool {
        self.t.consent.is_some()
    }
    /// Whether the thread was handed to this agent's user.
    pub fn escalated(&self) -> bool {
        self.t.escalated
    }
    /// When the thread last moved.
    pub fn last_activity(&self) -> Timestamp {
        self.t.last_activity
    }
    /// When the thread ended, if it did.
    pub fn ended_at(&self) -> Option<Timestamp> {
        self.t.ended_at
    }
    /// A bridge's state of the thread under `key` ([`Agent::set_bridge_state`]).
    pub fn bridge_state(&self, key: &str) -> Option<&'a Value> {
        self.t.bridge.get(key)
    }
}

impl Agent {
    /// Registers a bridge: from now on it is called at every input
    /// ([`Bridge::step`]), for the timer ([`Bridge::wake`]) and for the threads it opens.
    pub fn add_bridge(&mut self, bridge: Box<dyn Bridge>) {
        self.bridges.push(bridge);
    }

    /// The thread `id`, as a bridge reads it.
    pub fn thread_view(&self, id: &str) -> Option<ThreadView<'_>> {
        self.threads.get(id).map(|t| ThreadView { t })
    }

    /// Every thread, by id, as a bridge reads it.
    pub fn thread_views(&self) -> impl Iterator<Item = ThreadView<'_>> {
        self.threads.values().map(|t| ThreadView { t })
    }

    /// The agent's clock: the latest time an input was handed over with.
    pub fn now(&self) -> Timestamp {
        self.shared.now
    }

    /// Keeps `value` as a bridge's state of thread `id` under `key` (the bridge's name,
    /// or a key that starts with it): persisted with the thread's record, as a member of
    /// it, and restored with it; `None` removes it. Nothing happens when it is unchanged.
    pub fn set_bridge_state(&mut self, id: &str, key: &str, value: Option<Value>) {
        let Some(t) = self.threads.get_mut(id) else {
            return;
        };
        if t.bridge.get(key) == value.as_ref() {
            return;
        }
        match value {
            Some(v) => t.bridge.insert(key.to_string(), v),
            None => t.bridge.remove(key),
        };
        self.shared.dirty.threads.insert(id.to_string());
    }

    /// Whether a bridge's mark `mark` is on thread `id`: like its state, but never
    /// persisted (a restored agent has none), for what a restart must forget.
    pub fn bridge_mark(&self, id: &str, mark: &str) -> bool {
        self.threads
            .get(id)
            .is_some_and(|t| t.bridge_marks.contains(mark))
    }

    /// Sets or clears a bridge's mark on thread `id` ([`Agent::bridge_mark`]).
    pub fn set_bridge_mark(&mut self, id: &str, mark: &str, on: bool) {
        if let Some(t) = self.threads.get_mut(id) {
            if on {
                t.bridge_marks.insert(mark.to_string());
            } else {
                t.bridge_marks.remove(mark);
            }
        }
    }

    /// An input of a bridge: `f` runs on the agent at `now`, then the input ends as any
    /// other does (the bridges step, groups step, outputs are released, persist first).
    pub fn bridged_input<R>(&mut self, now: Timestamp, f: impl FnOnce(&mut Agent) -> R) -> R {
        self.shared.now = self.shared.now.max(now);
        let r = f(self);
        self.step_bridges();
        self.step_groups();
        self.flush();
        r
    }

    /// A fresh id from the agent's generator: `prefix` and `len` characters (the draw is
    /// recorded).
    pub fn draw_id(&mut self, prefix: &str, len: usize) -> String {
        self.shared.dirty.meta = true;
        self.shared.meta.rng.id(prefix, len)
    }

    /// 16 fresh bytes from the agent's generator (the draw is recorded).
    pub fn draw_bytes(&mut self) -> [u8; 16] {
        let mut b = [0u8; 16];
        self.shared.meta.rng.fill(&mut b);
        self.shared.dirty.meta = true;
        b
    }

    /// Tells the user something about thread `id` (or about no thread).
    pub fn tell_user(&mut self, id: Option<&str>, kind: NotifyKind, text: String) {
        self.shared.notify(id.map(str::to_string), kind, text);
    }

    /// A note in the audit trail of thread `id` (or of no thread).
    pub fn note(&mut self, id: Option<&str>, text: String) {
        self.shared.note(id, text);
    }

    /// An event in the audit trail of thread `id` (or of no thread).
    pub fn audit_event(&mut self, id: Option<&str>, event: AgentEvent) {
        self.shared.audit(id, event);
    }

    /// Releases a bridge's message for its peer's endpoint ([`Bridged::Message`]), with
    /// the sends of this input, after the records it depends on.
    pub fn send_bridge_message(&mut self, m: BridgeMessage) {
        self.shared
            .buf
            .send
            .push(Output::Bridged(Bridged::Message(m)));
    }

    /// A bridged peer said `body` in its thread `id`: a packet from `peer`, built by the
    /// agent and taken as one opened from an envelope (duplicates, limits per peer,
    /// consent, the negotiation, history, audit). Its id, if it was built.
    pub fn bridged_said(&mut self, peer: &Address, id: &str, body: Body) -> Option<String> {
        self.shared.dirty.meta = true;
        let p = self.bridged_packet(peer, id, body, false);
        let Ok(raw) = p.to_bytes() else {
            self.shared
                .malformed(peer, "a bridged message made an invalid packet".into());
            return None;
        };
        match Packet::parse(&raw) {
            Ok(p) => {
                let pid = p.packet_id.clone();
                self.take_packet(id, peer, p, &raw);
                Some(pid)
            }
            Err(e) => {
                self.shared.malformed(peer, e.to_string());
                None
            }
        }
    }

    /// A bridged peer opens a thread with its first packet's body: the new thread's id
    /// and the first packet's, or why it was not opened.
    pub fn bridged_open(&mut self, o: BridgedOpening) -> Result<(String, String), BridgedRefusal> {
        let peer = &o.peer;
        let thread_id = self.shared.meta.rng.id("thr_", 16);
        self.shared.dirty.meta = true;
        let p = self.bridged_packet(peer, &thread_id, o.body, true);
        if let Some((_, why)) = self.new_thread_refusal(&p) {
            return Err(BridgedRefusal::Limit(why));
        }
        if let Some(s) = o.shared {
            self.shared_caps_refusal(s)?;
        }
        let first = p.packet_id.clone();
        let raw = p
            .to_bytes()
            .map_err(|e| BridgedRefusal::Invalid(e.to_string()))?;
        let Ok(p) = Packet::parse(&raw) else {
            return Err(BridgedRefusal::Invalid(
                "the message makes no valid packet".into(),
            ));
        };
        // No envelope, so no session is ever used; the thread has one like any other.
        let session = new_session(&mut self.shared.meta.rng);
        if !self.admit_new_thread(&p, session) {
            return Err(BridgedRefusal::NotAdmitted);
        }
        if let Some(t) = self.threads.get_mut(&thread_id) {
            t.bridge.extend(o.state);
        }
        self.take_packet(&thread_id, peer, p, &raw);
        if let Some(s) = o.shared {
            self.forget_ended_where(
                s.member,
                (self.shared.config.limits.max_ended_threads_per_peer as usize)
                    .saturating_mul(s.share),
            );
        }
        Ok((thread_id, first))
    }

    /// Why the peers sharing caps `s`, all together, may not open another thread now.
    fn shared_caps_refusal(&self, s: SharedCaps) -> Result<(), BridgedRefusal> {
        let l = &self.shared.config.limits;
        let peers: BTreeSet<&Address> = self
            .threads
            .values()
            .filter(|t| (s.member)(&t.peer))
            .map(|t| &t.peer)
            .collect();
        let threads: usize = peers.iter().map(|p| self.open_threads_started_by(p)).sum();
        let prompts: usize = peers.iter().map(|p| self.open_prompts_of(p)).sum();
        let max_threads = (l.max_threads_per_peer as usize).saturating_mul(s.share);
        let max_prompts = (l.max_prompts_per_peer as usize).saturating_mul(s.share);
        if threads >= max_threads {
            return Err(BridgedRefusal::SharedThreads {
                open: threads,
                max: max_threads,
            });
        }
        if prompts >= max_prompts {
            return Err(BridgedRefusal::SharedPrompts {
                open: prompts,
                max: max_prompts,
            });
        }
        Ok(())
    }

    /// A packet of the bridged peer in its thread, built and checked like one off the
    /// wire; its id is `<the first label of the peer's domain>_` and 12 characters.
    fn bridged_packet(
        &mut self,
        peer: &Address,
        thread_id: &str,
        body: Body,
        first: bool,
    ) -> Packet {
        let version = self.shared.highest_version();
        let label = peer.domain().split('.').next().unwrap_or("bridge");
        Packet {
            protocol: format!("a2acp/{version}"),
            packet_id: self.shared.meta.rng.id(&format!("{label}_"), 12),
            thread_id: thread_id.to_string(),
            from: peer.clone(),
            to: self.shared.config.address.clone(),
            timestamp: self.shared.now.to_rfc3339(),
            capabilities: first
                .then(|| crate::packet::capabilities(&self.shared.config.supported_versions)),
            format_hints: None,
            body,
        }
    }

    /// A thread this agent's user opens with the bridged peer `peer`: created, its first
    /// packet not sent yet ([`Agent::send_first_packet`]). Refused (`None`, the user
    /// told) when the peer is blocked.
    pub fn create_bridged_thread(
        &mut self,
        peer: &Address,
        intent: Intent,
        context: Context,
        shown: &str,
    ) -> Option<String> {
        if self.shared.settings.blocked.contains(peer) {
            self.shared.notify(
                None,
                NotifyKind::Info,
                format!("{peer} ({shown}) is blocked; unblock it first."),
            );
            return None;
        }
        Some(self.create_thread(peer, intent, context, None))
    }

    /// Sends the first packet of thread `id` this agent's user opened.
    pub fn send_first_packet(&mut self, id: &str) {
        self.in_thread(id, |step| step.send_first_packet());
    }

    /// The bridged peer of thread `id` cannot go on (`why`, the user told `text`): the
    /// thread's open prompts close and it is declined.
    pub fn decline_bridged(&mut self, id: &str, why: &str, text: String) {
        self.in_thread(id, |step| {
            step.close_prompts();
            step.set_state(ThreadState::Declined, why);
            step.notify(NotifyKind::Declined, text);
        });
    }

    /// The bridged peer of thread `id` asked something only this agent's user can answer
    /// (`text`): the thread is handed to the user.
    pub fn escalate_bridged(&mut self, id: &str, text: String) {
        self.in_thread(id, |step| {
            step.t.escalated = true;
            step.set_waiting(Waiting::User);
            step.notify(NotifyKind::Escalated, text);
        });
    }

    /// The bridges' step of one input: each sees the packets addressed to bridged peers
    /// and the threads changed, then again (up to a bound) the packets their own steps
    /// made the agent send.
    pub(in crate::agent) fn step_bridges(&mut self) {
        const ROUNDS: usize = 8;
        let bridges = std::mem::take(&mut self.bridges);
        let mut changed: Vec<String> = self.shared.dirty.threads.iter().cloned().collect();
        for _ in 0..ROUNDS {
            let packets = std::mem::take(&mut self.shared.bridged);
            if packets.is_empty() && changed.is_empty() {
                break;
            }
            let step = BridgeStep {
                packets,
                changed: std::mem::take(&mut changed),
            };
            for b in &bridges {
                b.step(self, &step);
            }
        }
        self.shared.bridged.clear();
        self.bridges = bridges;
    }

    /// The earliest time a bridge wants its timeout.
    pub(in crate::agent) fn bridges_wake(&self) -> Option<Timestamp> {
        self.bridges.iter().filter_map(|b| b.wake(self)).min()
    }

    /// The bridges' timeouts.
    pub(in crate::agent) fn bridges_timeout(&mut self) {
        let bridges = std::mem::take(&mut self.bridges);
        for b in &bridges {
            b.timeout(self);
        }
        self.bridges = bridges;
    }

    /// Opens a thread through the bridge `name` ([`Bridge::open`]).
    pub(in crate::agent) fn open_bridged(
        &mut self,
        name: &str,
        to: &str,
        intent: Intent,
        context: Context,
    ) -> Option<String> {
        let bridges = std::mem::take(&mut self.bridges);
        let id = match bridges.iter().find(|b| b.name() == name) {
            Some(b) => b.open(self, to, intent, context),
            None => {
                self.shared.notify(
                    None,
                    NotifyKind::Info,
                    format!("No thread started: this agent has no bridge `{name}`."),
                );
                None
            }
        };
        self.bridges = bridges;
        id
    }

    /// What the bridge `name` calls its peers ([`Bridge::peer_kind`]).
    pub(in crate::agent) fn bridged_peer_kind(&self, name: &str) -> &'static str {
        self.bridges
            .iter()
            .find(|b| b.name() == name)
            .map_or("its agent", |b| b.peer_kind())
    }
}
