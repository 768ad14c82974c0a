//! Threads: the lifecycle of §9 (plus STALLED §6.4 and EXPIRED §8.3) and what an agent
//! remembers of each thread.

pub(super) mod lifecycle;
pub(super) mod packets;
pub(super) mod step;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::io::ModelTier;
use crate::address::Address;
use crate::crypto::ThreadSession;
use crate::negotiator::Rejected;
use crate::packet::{ActionSpec, Context, Intent, Need, ResolutionBody, ResolutionStatus};
pub use crate::thread_state::{ThreadState, TRANSITIONS};
use crate::time::Timestamp;
pub(in crate::agent) use packets::{escape_json, strings_of};

/// Who the thread is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Waiting {
    /// The other agent (staleness applies).
    Peer,
    /// This agent's user (a prompt is open, or the thread was escalated).
    User,
    /// The LLM.
    Llm,
    /// Actions being executed.
    Actions,
    /// Nothing: the thread is terminal or idle.
    Nothing,
}

/// Needs of the peer waiting for this user's consent (§7.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingConsent {
    /// The open prompt.
    pub prompt_id: u64,
    /// Needs the prompt asks about.
    pub ask: Vec<Need>,
    /// Values already cleared to share with the answer.
    pub share: Context,
    /// Fields already decided to decline.
    pub decline: Vec<String>,
    /// Fields in `ask` this side offers and the peer did not ask for (after an intent
    /// update, §6.5): shared if the user says so, never sent as declines.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub offered: BTreeSet<String>,
}

/// A resolution in flight (§8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenResolution {
    /// The resolution packet's id.
    pub packet_id: String,
    /// Who proposed it.
    pub proposer: Address,
    /// The resolution.
    pub body: ResolutionBody,
    /// Answers received so far (including this agent's user's).
    pub answers: Vec<(Address, ResolutionStatus)>,
    /// When confirmations are due.
    pub deadline: Timestamp,
    /// When the reminder goes out.
    pub remind_at: Timestamp,
    /// Whether the reminder went out.
    pub reminded: bool,
    /// The open resolution prompt of this user, if unanswered.
    pub prompt_id: Option<u64>,
    /// The signed confirmations held (this user's, the peer's, and on a group leg those
    /// the coordinator passed on), one per confirmer (SPEC-NOTES "Receipts of an
    /// agreement").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<crate::receipt::agreement::Confirmation>,
}

/// How far a thread got with a proposal (§8–§9). The data of a stage lives in its
/// variant: an open resolution exists only once something is proposed, an execution only
/// once that was confirmed, and never one without the other.
///
/// Persisted as the thread record's `resolution` and `execution` fields, the format the
/// records had before the stage existed ([`StageRecord`]): records of either age read
/// the same.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(from = "StageRecord", into = "StageRecord")]
pub enum Stage {
    /// Nothing proposed, or the last proposal was ruled out.
    #[default]
    Negotiating,
    /// A resolution is open: waiting for confirmations, or confirmed and not yet acted on.
    Proposed(OpenResolution),
    /// The confirmed resolution is being carried out, undone, or was carried out.
    Executing {
        /// What was confirmed.
        resolution: OpenResolution,
        /// Where carrying it out stands.
        execution: Execution,
    },
}

/// The persisted form of a [`Stage`]: a record's `resolution` and `execution` fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StageRecord {
    /// The open resolution.
    #[serde(default)]
    pub resolution: Option<OpenResolution>,
    /// Its execution.
    #[serde(default)]
    pub execution: Option<Execution>,
}

impl From<StageRecord> for Stage {
    /// An execution without a resolution was never written; such a record reads as
    /// nothing proposed (there is nothing to carry out).
    fn from(r: StageRecord) -> Stage {
        match (r.resolution, r.execution) {
            (Some(resolution), Some(execution)) => Stage::Executing {
                resolution,
                execution,
            },
            (Some(resolution), None) => Stage::Proposed(resolution),
            (None, _) => Stage::Negotiating,
        }
    }
}

impl From<Stage> for StageRecord {
    fn from(s: Stage) -> StageRecord {
        match s {
            Stage::Negotiating => StageRecord::default(),
            Stage::Proposed(resolution) => StageRecord {
                resolution: Some(resolution),
                execution: None,
            },
            Stage::Executing {
                resolution,
                execution,
            } => StageRecord {
                resolution: Some(resolution),
                execution: Some(execution),
            },
        }
    }
}

impl Stage {
    /// The open resolution, if something is proposed.
    pub fn resolution(&self) -> Option<&OpenResolution> {
        match self {
            Stage::Negotiating => None,
            Stage::Proposed(r) | Stage::Executing { resolution: r, .. } => Some(r),
        }
    }

    /// The open resolution, to change.
    pub fn resolution_mut(&mut self) -> Option<&mut OpenResolution> {
        match self {
            Stage::Negotiating => None,
            Stage::Proposed(r) | Stage::Executing { resolution: r, .. } => Some(r),
        }
    }

    /// The execution, once the resolution was confirmed and acted on.
    pub fn execution(&self) -> Option<&Execution> {
        match self {
            Stage::Executing { execution, .. } => Some(execution),
            _ => None,
        }
    }

    /// The execution, to change.
    pub fn execution_mut(&mut self) -> Option<&mut Execution> {
        match self {
            Stage::Executing { execution, .. } => Some(execution),
            _ => None,
        }
    }

    /// Opens `resolution` in place of the open one (an execution in progress stays).
    pub fn set_resolution(&mut self, resolution: OpenResolution) {
        *self = match std::mem::take(self) {
            Stage::Executing { execution, .. } => Stage::Executing {
                resolution,
                execution,
            },
            _ => Stage::Proposed(resolution),
        };
    }

    /// Ends the proposal: back to negotiating, returning the resolution it had. Its
    /// execution, if any, goes with it.
    pub fn take_resolution(&mut self) -> Option<OpenResolution> {
        match std::mem::take(self) {
            Stage::Negotiating => None,
            Stage::Proposed(r) | Stage::Executing { resolution: r, .. } => Some(r),
        }
    }

    /// Starts carrying out the open resolution; `false` (and nothing changes) when
    /// nothing is proposed.
    pub fn start_execution(&mut self, execution: Execution) -> bool {
        match std::mem::take(self) {
            Stage::Negotiating => false,
            Stage::Proposed(resolution) | Stage::Executing { resolution, .. } => {
                *self = Stage::Executing {
                    resolution,
                    execution,
                };
                true
            }
        }
    }

    /// Drops the execution, keeping the resolution open.
    pub fn clear_execution(&mut self) {
        if matches!(self, Stage::Executing { .. }) {
            if let Stage::Executing { resolution, .. } = std::mem::take(self) {
                *self = Stage::Proposed(resolution);
            }
        }
    }
}

/// Packets of the peer that came before the stage they belong to, held until it opens.
/// Persisted as the thread record's `deferred_resolution`, `early_report` and
/// `early_answers` fields.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct HeldPackets {
    /// A new resolution that arrived while this agent was still rolling back; opened
    /// once the rollback is done: (packet id, proposer, resolution).
    #[serde(default)]
    pub deferred_resolution: Option<(String, Address, ResolutionBody)>,
    /// The peer's execution report, arrived before this side saw every confirmation.
    #[serde(default)]
    pub early_report: Option<crate::packet::ExecutionReport>,
    /// The peer's answers to a resolution not seen yet (reordering): applied when it opens.
    #[serde(default)]
    pub early_answers: Vec<(Address, crate::packet::ResolutionResponseBody)>,
}

/// Execution of a confirmed resolution (§9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// Actions this agent performs, in order.
    pub mine: Vec<ActionSpec>,
    /// How many of `mine` succeeded.
    pub done: usize,
    /// The action request in flight: (action id, index in `mine`, is undo).
    pub in_flight: Option<(u64, usize, bool)>,
    /// Indexes still to undo during rollback, last first.
    pub undo_queue: Vec<usize>,
    /// The peer reported completion.
    pub peer_completed: bool,
    /// This agent reported completion.
    pub reported: bool,
    /// The failure that started a rollback.
    pub failure: Option<String>,
    /// The other user withdrew: after the rollback the thread closes (DECLINED).
    #[serde(default)]
    pub cancelled: bool,
    /// The peer's side expired before it saw every confirmation: after the rollback the
    /// thread ends EXPIRED, as on the other side.
    #[serde(default)]
    pub expired: bool,
}

/// One packet of the thread's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Packet id.
    pub packet_id: String,
    /// Sent by this agent.
    pub outgoing: bool,
    /// The packet's type.
    pub kind: String,
    /// The plaintext packet (JSON), kept to re-send after a gap (§13.1).
    pub json: String,
}

/// Retractions one thread keeps (older ones, acknowledged, are dropped first).
pub const MAX_RETRACTIONS: usize = 16;

/// A retraction this agent sent (SPEC-NOTES "Retraction").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRetraction {
    /// The `retraction` packet's id.
    pub retraction_id: String,
    /// The fields taken back.
    pub fields: Vec<String>,
    /// When the user took them back (the user is told if no acknowledgement came
    /// within `RETRACTION_ACK_TIMEOUT`).
    pub asked_at: Timestamp,
    /// Whether the peer acknowledged it (signature verified).
    pub acknowledged: bool,
    /// Whether the user was told it was not acknowledged in time.
    pub told: bool,
}

/// An LLM request in flight for this thread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmPending {
    /// Request id.
    pub request_id: u64,
    /// Attempt number with this tier's model, from 1.
    pub attempt: u32,
    /// The model asked (§5.5, §13.3).
    #[serde(default)]
    pub tier: ModelTier,
    /// The tier the decision started with.
    #[serde(default)]
    pub first_tier: ModelTier,
    /// Model calls for this decision so far, this one included.
    #[serde(default)]
    pub calls: u32,
    /// When the decision's first call was made.
    #[serde(default)]
    pub since: Option<Timestamp>,
    /// Rounds waited, queued, with no model reachable (§13.3).
    #[serde(default)]
    pub queued: u32,
    /// When to retry after a failure (backoff), if waiting to.
    pub retry_at: Option<Timestamp>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// The thread took in new input (a packet, an answer of the user) after the model
    /// was asked: its answer is about a thread that no longer exists and is not acted
    /// on; the thread is evaluated afresh instead.
    #[serde(default)]
    pub stale: bool,
}

/// Everything an agent keeps about one thread. Persisted as `thread/<id>`, its history as
/// one `history/<id>/<n>` record per entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Thread {
    /// Thread id.
    pub id: String,
    /// The other agent.
    pub peer: Address,
    /// Whether this agent opened the thread.
    pub initiator: bool,
    /// Lifecycle state.
    pub state: ThreadState,
    /// Current intent.
    pub intent: Intent,
    /// Whether the user started the thread (§7.4 implicit consent).
    pub user_initiated: bool,
    /// Context the user gave when starting the thread (local knowledge for this thread).
    pub local: Context,
    /// The negotiated protocol version, once the peer's capabilities are known.
    pub version: Option<String>,
    /// Whether this agent sent its first packet (capabilities and format hints go in it).
    pub sent_first: bool,
    /// Values this agent shared in the thread.
    pub shared: Context,
    /// Fields this agent withheld: never_share fields kept out of its first packet.
    pub withheld: BTreeSet<String>,
    /// Fields this agent declined to the peer (§7.5): answered `declined` in a
    /// `context_response` it sent — by its user, by a tier, or for want of a value.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub declined: BTreeSet<String>,
    /// Values the peer shared.
    pub theirs: Context,
    /// Fields this agent asked the peer for (never asked twice, §6.4).
    pub asked: BTreeSet<String>,
    /// Fields the peer declined (§7.5).
    pub peer_unavailable: BTreeSet<String>,
    /// Fields the peer asked for and this agent answered, with data or a decline.
    pub answered: BTreeSet<String>,
    /// Context exchanges so far (§6.4).
    pub round_trips: u32,
    /// Whether the thread was escalated to the users.
    pub escalated: bool,
    /// Whether the §6.3 no-overlap packet was already used.
    pub no_overlap_sent: bool,
    /// Consent prompt in progress.
    pub consent: Option<PendingConsent>,
    /// How far the thread got with a proposal: the open resolution and its execution
    /// live in the stage's variant (§8–§9).
    #[serde(flatten)]
    pub stage: Stage,
    /// Options ruled out (failed actions, declined resolutions).
    pub rejected: Vec<Rejected>,
    /// Who the thread waits for.
    pub waiting: Waiting,
    /// Last packet sent or received, or state change.
    pub last_activity: Timestamp,
    /// Packet ids sent, in order.
    pub sent_ids: Vec<String>,
    /// Packet ids received (each handed to the logic once).
    pub received_ids: BTreeSet<String>,
    /// Full packet history.
    pub history: Vec<HistoryEntry>,
    /// Key agreement state.
    pub session: ThreadSession,
    /// Halted because the peer's key changed (§16).
    pub halted: bool,
    /// LLM request in flight.
    pub llm: Option<LlmPending>,
    /// Parent thread, for forks.
    pub parent: Option<String>,
    /// Child threads this thread was forked into.
    pub forked_into: Vec<String>,
    /// Current coordinator (two-party: the initiator unless transferred, §10.3).
    pub coordinator: Address,
    /// Pending needs of this agent that did not fit the 5-per-packet limit.
    pub deferred_needs: Vec<Need>,
    /// Packets of the peer that came before the stage they belong to (reordering).
    #[serde(flatten)]
    pub held: HeldPackets,
    /// Packets the peer's `thread_state` listed as sent that never arrived here, already
    /// asked for with this side's own summary (each is asked for once).
    #[serde(default)]
    pub gap_asked: BTreeSet<String>,
    /// When the thread reached a terminal state; its ephemeral secret is erased a grace
    /// period later (SPEC-NOTES "forward secrecy").
    #[serde(default)]
    pub ended_at: Option<Timestamp>,
    /// What the last `thread_state` summary this agent sent covered (see
    /// [`Thread::summary_mark`]); a re-connection sends a new summary only when the mark
    /// moved (SPEC-NOTES §13.1).
    #[serde(default)]
    pub summarised: Option<(ThreadState, usize)>,
    /// The relay refused this thread's recipient (`unknown_recipient`, to the key
    /// `lookup` or to the first `send`): the thread was declined before the other agent
    /// saw it (SPEC-NOTES "Failure handling", unknown recipient).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_refused: Option<crate::link::ErrorCode>,
    /// The group this thread is a leg of (§10; SPEC-NOTES "Group threads"); `None` for
    /// a two-party thread, whose record then has no such field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupLeg>,
    /// Since when this agent waits for the peer's answer to a packet it sent (for the
    /// peer's response time, §11.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaiting_peer_since: Option<Timestamp>,
    /// How long the peer took to answer, per answer, in milliseconds (at most
    /// [`MAX_RESPONSE_TIMES`] kept): recorded in relationship memory on completion.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peer_response_ms: Vec<u64>,
    /// The thread this one goes on as: its recipient had no a2acp agent, and the bridged
    /// peer the configuration names for that address (`bridged_fallbacks`, §18) took it
    /// up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_as: Option<String>,
    /// The intent the thread had before its first intent update (§6.5): what sharing
    /// was agreed under. A field the new intent would share without asking but this one
    /// would not is asked first in this thread (SPEC-NOTES "Drift and forks").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope_intent: Option<Intent>,
    /// What the sibling threads of this fork hold (§6.5): their proposed or confirmed
    /// slots, taken out of this thread's availability (SPEC-NOTES "Drift and forks").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sibling_holds: Vec<SiblingHold>,
    /// What this thread's consent receipts cover (SPEC-NOTES "Consent receipts"), by
    /// field: the digest of the value last receipted and what decided it. A field sent
    /// again with the same value needs no new receipt.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub receipted: BTreeMap<String, Receipted>,
    /// The record keys of the agreements kept for this thread (SPEC-NOTES "Receipts of an
    /// agreement"): they hold the proposal, so they are deleted with the thread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agreements: Vec<String>,
    /// What this agent's user took back in the thread and whether the peer acknowledged
    /// it (SPEC-NOTES "Retraction"), oldest first, at most [`MAX_RETRACTIONS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retractions: Vec<PendingRetraction>,
    /// Fields the peer took back: deleted here, and never taken in again in this thread.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub retracted: BTreeSet<String>,
    /// Fields whose values expired under their usage rule and were deleted here: a value
    /// the peer shares again, with a rule not yet expired, is taken in again.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub expired: BTreeSet<String>,
    /// The usage rules the peer's values came with, by field (SPEC-NOTES "Usage rules").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage: BTreeMap<String, crate::packet::UsageRule>,
    /// The bridges' own state of the thread ([`crate::agent::Agent::set_bridge_state`]),
    /// by key (each key starts with its bridge's name): members of the thread's record
    /// beside its own, so records written before the bridges moved out of the agent
    /// restore as they were. The agent does not know their types.
    #[serde(flatten)]
    pub bridge: BTreeMap<String, serde_json::Value>,
    /// The bridges' marks on the thread ([`crate::agent::Agent::bridge_mark`]): never
    /// persisted.
    #[serde(skip)]
    pub bridge_marks: BTreeSet<String>,
}

/// A field a consent receipt of the thread covers: the SHA-256 of its value's canonical
/// JSON (no salt: the thread record holds the value itself) and what decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipted {
    /// SHA-256 of JCS(value).
    #[serde(with = "crate::encoding::b64_array")]
    pub digest: [u8; 32],
    /// What decided it.
    pub basis: crate::receipt::Basis,
}

/// A slot a sibling thread of a fork holds (§6.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiblingHold {
    /// The sibling thread.
    pub thread_id: String,
    /// Its proposal's summary.
    pub summary: String,
    /// The slot: `date`, `start`, `end`, `timezone` ([`crate::negotiator::held_slot`]).
    pub slot: Context,
    /// Confirmed by everyone (else proposed and open).
    pub confirmed: bool,
}

/// Response times a thread keeps of its peer.
pub const MAX_RESPONSE_TIMES: usize = 32;

/// What a leg of a group thread knows of its group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupLeg {
    /// The group's header as last sent or received on this leg.
    pub header: crate::packet::GroupHeader,
    /// A participant's side: the coordinator's open flexibility request (§10.2), whose
    /// field is asked of this user again even though it was answered before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flexibility: Option<crate::packet::FlexibilityRequest>,
    /// The coordinator's side: this leg's execution carries the coordinator's own
    /// actions, which run once for the group (on the first leg confirmed).
    #[serde(default)]
    pub lead: bool,
    /// A participant's side: the leg was opened by a coordinator whose announcement
    /// (from the previous coordinator, §10.3) has not arrived yet; its packets wait.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_announcement: bool,
    /// The packets that wait for the announcement, as received (at most 8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<String>,
}

impl GroupLeg {
    /// A leg of the group `header` describes, with nothing pending on it.
    pub fn new(header: crate::packet::GroupHeader) -> GroupLeg {
        GroupLeg {
            header,
            flexibility: None,
            lead: false,
            awaiting_announcement: false,
            held: Vec::new(),
        }
    }
}

impl Thread {
    /// The thread's state and how many packets other than `thread_state` summaries it
    /// sent and received: what a summary of it reports. Summaries themselves do not count,
    /// so two agents never answer each other's summaries with new ones.
    pub fn summary_mark(&self) -> (ThreadState, usize) {
        let packets = self
            .history
            .iter()
            .filter(|h| h.kind != "thread_state")
            .count();
        (self.state, packets)
    }
}

/// A refused transition: a bug in the caller, never caused by peer input alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal thread transition {from} → {to}")]
pub struct IllegalTransition {
    /// State before.
    pub from: ThreadState,
    /// Refused target.
    pub to: ThreadState,
}

impl Thread {
    /// Moves to `to` if the table allows it; a no-op for `to == state`. The agent calls
    /// it only from its one transition function (`ThreadStep::transition`).
    pub(crate) fn transition(&mut self, to: ThreadState) -> Result<bool, IllegalTransition> {
        if self.state == to {
            return Ok(false);
        }
        if !self.state.can_go(to) {
            return Err(IllegalTransition {
                from: self.state,
                to,
            });
        }
        self.state = to;
        Ok(true)
    }

    /// Whether this thread is a leg of a group that this agent (`me`) coordinates.
    pub fn coordinates(&self, me: &Address) -> bool {
        self.group
            .as_ref()
            .is_some_and(|g| &g.header.coordinator == me)
    }

    /// Whether this thread is a leg of a group another agent coordinates: this agent
    /// only answers in it (SPEC-NOTES "Group threads").
    pub fn in_group_of_other(&self, me: &Address) -> bool {
        self.group
            .as_ref()
            .is_some_and(|g| &g.header.coordinator != me)
    }

    /// The type of the last packet received in the thread, if any.
    pub fn last_received_kind(&self) -> Option<&str> {
        self.history
            .iter()
            .rev()
            .find(|h| !h.outgoing)
            .map(|h| h.kind.as_str())
    }

    /// The direction of packets this agent sends in the thread.
    pub fn my_direction(&self) -> crate::crypto::Direction {
        if self.initiator {
            crate::crypto::Direction::FromInitiator
        } else {
            crate::crypto::Direction::FromResponder
        }
    }
}

/// What triggered an evaluation: it decides whether a proposal may be made this turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::agent) enum Turn {
    /// The peer asked this agent something: answer (and ask), but don't propose.
    AnsweringRequest,
    /// Anything else: propose when the picture is complete.
    Free,
}

/// The key of entry `n` of a thread's history. Thread ids may contain `/`; the entry
/// number is always the last 20 digits.
pub(in crate::agent) fn history_key(thread_id: &str, n: usize) -> String {
    format!("history/{thread_id}/{n:020}")
}

/// (thread id, entry number) of a history key without its `history/` prefix.
pub(in crate::agent) fn parse_history(rest: &str) -> Option<(&str, u64)> {
    let (id, n) = rest.rsplit_once('/')?;
    if id.is_empty() || n.len() != 20 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((id, n.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ThreadState::*;

    /// Every state.
    const ALL: [ThreadState; 11] = [
        Initiated,
        Negotiating,
        Proposed,
        Confirmed,
        Executing,
        Completed,
        Declined,
        Failed,
        Rollback,
        Stalled,
        Expired,
    ];

    /// A thread record written before threads had a [`Stage`] (`resolution` and
    /// `execution` as two fields; the dinner confirmed on both sides, executing) reads
    /// as the executing stage, and writes back byte for byte.
    #[test]
    fn a_record_from_before_stages_reads_as_its_stage_and_writes_back_the_same() {
        let old = include_str!("testdata/thread_record_before_stages.json");
        let t: Thread = serde_json::from_str(old).unwrap();
        assert_eq!(t.state, Executing);
        let Stage::Executing {
            resolution,
            execution,
        } = &t.stage
        else {
            panic!("not executing: {:?}", t.stage);
        };
        assert_eq!(resolution.proposer.as_str(), "agent:bob@a2acp.io");
        assert_eq!(execution.done, 0);
        assert_eq!(t.held, HeldPackets::default());
        assert_eq!(serde_json::to_string_pretty(&t).unwrap(), old.trim_end());
        // The other stages write the same two fields, and read back as themselves.
        for stage in [Stage::Negotiating, Stage::Proposed(resolution.clone())] {
            let mut t2 = t.clone();
            t2.stage = stage.clone();
            let json = serde_json::to_value(&t2).unwrap();
            assert!(json.get("resolution").is_some() && json.get("execution").is_some());
            let back: Thread = serde_json::from_value(json).unwrap();
            assert_eq!(back.stage, stage);
        }
    }

    /// The stage's moves keep what the two fields kept: a resolution replaced during an
    /// execution keeps the execution; clearing the execution keeps the resolution.
    #[test]
    fn stage_moves() {
        let old = include_str!("testdata/thread_record_before_stages.json");
        let t: Thread = serde_json::from_str(old).unwrap();
        let (Some(r), Some(ex)) = (t.stage.resolution().cloned(), t.stage.execution().cloned())
        else {
            panic!("fixture not executing");
        };
        let mut s = Stage::Negotiating;
        assert!(!s.start_execution(ex.clone()));
        assert_eq!(s, Stage::Negotiating);
        s.set_resolution(r.clone());
        assert_eq!(s, Stage::Proposed(r.clone()));
        s.clear_execution();
        assert_eq!(s, Stage::Proposed(r.clone()));
        assert!(s.start_execution(ex.clone()));
        let mut r2 = r.clone();
        r2.packet_id = "pkt_other".into();
        s.set_resolution(r2.clone());
        assert_eq!(s.execution(), Some(&ex));
        assert_eq!(s.resolution(), Some(&r2));
        s.clear_execution();
        assert_eq!(s, Stage::Proposed(r2.clone()));
        assert_eq!(s.take_resolution(), Some(r2));
        assert_eq!(s, Stage::Negotiating);
        assert_eq!(s.take_resolution(), None);
    }

    #[test]
    fn unknown_wire_names_are_no_state() {
        assert_eq!(ThreadState::from_wire("negotiating"), None);
        assert_eq!(ThreadState::from_wire("DONE"), None);
    }

    #[test]
    fn table_is_consistent() {
        for (a, b) in TRANSITIONS {
            // The one exception: a late cancel turns an expiry into the decline it was.
            if (*a, *b) != (Expired, Declined) {
                assert!(!a.is_terminal(), "{a} is terminal but leaves to {b}");
            }
            assert_ne!(a, b);
        }
        for s in ALL {
            // The wire names `as_str` writes are the ones serde reads.
            assert_eq!(ThreadState::from_wire(s.as_str()), Some(s));
            if !s.is_terminal() {
                assert!(
                    TRANSITIONS.iter().any(|(a, _)| *a == s),
                    "{s} has no way out"
                );
            }
            if s != Initiated {
                assert!(
                    TRANSITIONS.iter().any(|(_, b)| *b == s),
                    "{s} cannot be reached"
                );
            }
        }
        assert!(!Completed.can_go(Negotiating));
        assert!(!Proposed.can_go(Executing));
    }
}

#[cfg(test)]
mod told_tests;
