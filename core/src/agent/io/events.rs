//! What the agent did, as typed events: the payload of every [`AuditRecord`].
//!
//! Code that needs to know what happened (the simulator's checkers, the transcripts of
//! the harness, the simulator and the runtime) matches on these variants, never on text.
//! The [`Display`](std::fmt::Display) of an event is the line the audit log shows
//! (`agent.db`'s `audit.event` column, `thread show`, debug logs), cleaned for display
//! ([`crate::display`]): peer strings in it (addresses, error messages, reasons) can
//! never reach a terminal raw. Prose that nothing matches on stays a [`AgentEvent::Note`].
//!
//! [`AuditRecord`]: crate::agent::AuditRecord

use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};

use crate::agent::io::ModelTier;
use crate::agent::permissions::Tier;
use crate::link::ErrorCode;
use crate::space::SpaceRefusal;
use crate::thread_state::ThreadState;
use crate::time::Timestamp;
use crate::Address;

/// Where a decision goes when its model gave no usable answer (§13.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmFallbackTo {
    /// Another model.
    Model(ModelTier),
    /// The deterministic negotiator (scheduling intents).
    Negotiator,
    /// A `processing_error` to the peer; the thread pauses for the users.
    ProcessingError,
    /// No model is reachable: the thread waits, queued, and is asked again later.
    Queued,
}

impl fmt::Display for LlmFallbackTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LlmFallbackTo::Model(t) => write!(f, "the {t} model"),
            LlmFallbackTo::Negotiator => f.write_str("the deterministic negotiator"),
            LlmFallbackTo::ProcessingError => f.write_str("processing_error"),
            LlmFallbackTo::Queued => f.write_str("the queue (no model reachable)"),
        }
    }
}

/// One thing the agent did or saw, as it is audited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentEvent {
    // -- Threads (§5) --
    /// The user started a thread.
    ThreadStarted {
        /// The other agent.
        with: Address,
    },
    /// The user started a group thread (§10); this agent coordinates it.
    GroupStarted {
        /// The group's id.
        group_id: String,
        /// Everyone, the coordinator first.
        participants: Vec<Address>,
    },
    /// The coordinator asked the binding constraint's owner to give way (§10.2).
    FlexibilityRequested {
        /// The group.
        group_id: String,
        /// Who was asked.
        to: Address,
        /// The field asked about.
        field: String,
    },
    /// The coordinator proposed a resolution to the group (§8.3).
    GroupProposed {
        /// The group.
        group_id: String,
        /// The proposal's summary.
        summary: String,
        /// Confirmations needed, the coordinator's included.
        required: u32,
        /// Who is asked to confirm, the coordinator first.
        confirmers: Vec<Address>,
    },
    /// The group's confirmations reached the quorum, or can no longer reach it (§8.3).
    GroupOutcome {
        /// The group.
        group_id: String,
        /// Whether the quorum was reached.
        reached: bool,
        /// Confirmations received.
        confirmed: u32,
        /// Confirmations needed.
        required: u32,
    },
    /// A peer's first packet opened a thread here.
    ThreadOpened {
        /// The peer that opened it.
        by: Address,
    },
    /// A thread changed state (§5.1).
    StateChanged {
        /// State before.
        from: ThreadState,
        /// State after.
        to: ThreadState,
        /// Why, when the transition says so.
        why: Option<String>,
    },
    /// Both sides agreed on a protocol version (§15.2).
    VersionAgreed {
        /// The version.
        version: String,
    },
    /// The agents handed the thread to their users (§5.2 ESCALATE).
    Escalated {
        /// The reason given.
        reason: String,
    },
    /// New context from a user took an escalated thread out of the users' hands
    /// (SPEC-NOTES "Negotiation", resuming an escalated thread).
    Resumed {
        /// By the peer's user (its resume marker), not this agent's.
        by_peer: bool,
    },
    /// The thread's intent changed (§6.5 `intent_update`).
    IntentUpdated {
        /// By the peer (its `intent_update`), not this agent's user.
        by_peer: bool,
        /// The intent's summary now (peer text, cleaned when shown).
        summary: String,
        /// `expanded`, `narrowed` or `changed`, as the update says.
        scope_change: Option<String>,
        /// Fields this side's user is asked about before they are shared: the new
        /// intent's tiers would share them, the old one's did not.
        expanded: Vec<String>,
    },
    /// The thread was split into threads (§6.5 `thread_fork`).
    Forked {
        /// By the peer (its `thread_fork`), not this agent's user.
        by_peer: bool,
        /// The child threads, in order.
        children: Vec<String>,
    },

    // -- Packets --
    /// A packet left (sealed and queued for the relay).
    Sent {
        /// Packet type, e.g. `context_request`.
        kind: String,
        /// Packet id.
        packet_id: String,
        /// The recipient.
        to: Address,
        /// The fields it names (never their values): what the principal's audit log says
        /// of it.
        #[serde(default)]
        fields: FieldsNamed,
    },
    /// A packet reached the agent's logic (authentic, new, valid).
    Received {
        /// Packet type.
        kind: String,
        /// Packet id.
        packet_id: String,
        /// The sender.
        from: Address,
        /// The fields it names (never their values).
        #[serde(default)]
        fields: FieldsNamed,
    },
    /// A message of a bridge's own protocol was sent or received (seed 004: an ACP
    /// message or handshake step), as the principal's audit log records it. A bridge
    /// emits it with [`crate::agent::Agent::audit_event`]; a2acp packets
    /// are [`AgentEvent::Sent`] and [`AgentEvent::Received`].
    Exchanged(Exchange),
    /// A packet sent before a reconnect is sent again (§13.1).
    Resent {
        /// Packet type.
        kind: String,
        /// Packet id.
        packet_id: String,
    },
    /// Packets of the peer never arrived: a gap request asks for them (§13.1).
    GapRequested {
        /// How many are missing.
        missing: usize,
    },
    /// An outgoing packet was withheld: it carries the value of a `never_share` field.
    NeverShareWithheld {
        /// Packet type.
        kind: String,
        /// The `never_share` field whose value it contains.
        field: String,
    },
    /// An outgoing packet could not be sealed.
    SealFailed {
        /// Packet id.
        packet_id: String,
        /// The sealing error.
        error: String,
    },
    /// An incoming envelope or packet was dropped. Drops are collapsed (SPEC-NOTES §13,
    /// "Limits per peer"): the first ten verbatim, then only at counts 20, 50, 100, 200…
    Dropped {
        /// What was dropped, and why.
        drop: DropReason,
        /// Drops since the start, on a collapsed record (`None` on the first ten).
        count: Option<u64>,
    },
    /// A peer went past the limits per peer; what was refused meanwhile.
    PeerLimited {
        /// The peer.
        peer: Address,
        /// New threads refused.
        threads: u64,
        /// Fork children refused.
        fork_children: u64,
        /// Packets refused.
        packets: u64,
    },
    /// An ended thread was forgotten to make room (limits per peer).
    EndedThreadForgotten {
        /// The peer that started too many.
        peer: Address,
        /// How many ended threads a peer keeps.
        keep: usize,
    },

    // -- Consent (§7) and execution (§9) --
    /// The user answered a consent prompt.
    ConsentAnswered {
        /// The prompt.
        prompt_id: u64,
    },
    /// A consent receipt was signed and stored (SPEC-NOTES "Consent receipts"): the
    /// record `receipt/<thread id>/<receipt id>` holds it.
    ReceiptSigned {
        /// The receipt's id.
        receipt_id: String,
        /// Consent or confirmation.
        kind: crate::receipt::ReceiptKind,
        /// The fields it says were disclosed.
        disclosed: Vec<String>,
        /// The fields it says were declined.
        declined: Vec<String>,
    },
    /// The thread reached CONFIRMED and its agreement was kept: the proposal and the
    /// signed confirmations held (SPEC-NOTES "Receipts of an agreement").
    AgreementKept {
        /// Confirmers whose signature it holds.
        signed: Vec<Address>,
        /// Confirmers counted without a signature.
        unsigned: Vec<Address>,
    },
    /// The user took back `fields` in this thread; the peer was asked to delete them.
    RetractionSent {
        /// The peer asked.
        peer: Address,
        /// The fields.
        fields: Vec<String>,
    },
    /// The peer took back `fields`: deleted from the thread and from memory, and the
    /// deletion acknowledged, signed.
    RetractionHonoured {
        /// The peer.
        peer: Address,
        /// The fields deleted.
        fields: Vec<String>,
    },
    /// The peer acknowledged deleting `fields`, its signature verified.
    RetractionAcknowledged {
        /// The peer.
        peer: Address,
        /// The fields.
        fields: Vec<String>,
    },
    /// The peer did not acknowledge a retraction in time: the user is told.
    RetractionUnacknowledged {
        /// The peer.
        peer: Address,
        /// The fields.
        fields: Vec<String>,
    },
    /// Values the peer shared reached the expiry their usage rule set: deleted from the
    /// thread and from memory (SPEC-NOTES "Usage rules").
    UsageExpired {
        /// The peer.
        peer: Address,
        /// The fields.
        fields: Vec<String>,
    },
    /// An acknowledgement that does not verify, or answers no retraction of this thread.
    RetractionAckRefused {
        /// The peer.
        peer: Address,
        /// Why.
        why: String,
    },
    /// A peer's confirmation did not verify: the answer is not counted.
    ConfirmationRefused {
        /// Who sent it.
        peer: Address,
        /// Why.
        why: String,
    },
    /// An action succeeded.
    ActionSucceeded {
        /// The action's name.
        action: String,
    },
    /// An action failed.
    ActionFailed {
        /// The action's name.
        action: String,
        /// What the runtime reported.
        error: String,
    },
    /// An action was undone (rollback).
    ActionUndone {
        /// The action's name.
        action: String,
    },

    // -- The LLM layer (§5, §13.3) --
    /// The model's answer was valid and the agent acts on it (§5.5: model, tier,
    /// attempts, latency and confidence of every decision).
    LlmDecided {
        /// The request answered.
        request_id: u64,
        /// The model that answered, as the runtime named it.
        model: String,
        /// Its tier.
        tier: ModelTier,
        /// Model calls this decision took, every tier's included.
        calls: u32,
        /// The answering call's latency (the runtime's retries included), milliseconds.
        latency_ms: u64,
        /// From the first call of this decision to the answer, milliseconds.
        elapsed_ms: u64,
        /// The model's own confidence (0–1), if it gave one.
        confidence: Option<f64>,
    },
    /// The model's answer was refused (invalid, a never_share value, low confidence).
    LlmAnswerRefused {
        /// The request.
        request_id: u64,
        /// Its tier.
        tier: ModelTier,
        /// Attempt with this tier's model.
        attempt: u32,
        /// Why.
        error: String,
    },
    /// The model did not answer (unreachable, timeouts, rate limits, after the runtime's
    /// retries).
    LlmUnavailable {
        /// The request.
        request_id: u64,
        /// Its tier.
        tier: ModelTier,
        /// The model, as the runtime named it.
        model: String,
        /// What the runtime reported.
        error: String,
    },
    /// The decision moves along the fallback chain (§13.3).
    LlmFallback {
        /// The tier that gave no usable answer.
        from: ModelTier,
        /// Where the decision goes now.
        to: LlmFallbackTo,
    },

    // -- Keys (§16) --
    /// A peer's key was pinned on first contact.
    KeyPinned {
        /// The peer.
        peer: Address,
    },
    /// A pinned peer presented another key: its threads are halted.
    KeyChanged {
        /// The peer.
        peer: Address,
        /// Threads halted.
        halted: usize,
    },
    /// A pinned peer moved to a new key by a rotation statement its pinned key signed:
    /// re-pinned, nothing halted (SPEC-NOTES "Key rotation").
    KeyRotated {
        /// The peer.
        peer: Address,
        /// The statement's rotation number.
        seq: u64,
    },
    /// A pinned peer's key changed by a recovery whose chain (binding signed by the pinned
    /// key, statement signed by the bound recovery key) verifies: its threads halt for the
    /// user as for any key change, with a notice saying it is a recovery (SPEC-NOTES
    /// "Recovery").
    PeerRecovered {
        /// The peer.
        peer: Address,
        /// Threads halted.
        halted: usize,
    },
    /// A peer's key change came with a recovery that does not verify from the pinned key:
    /// treated as an unsigned key change.
    PeerRecoveryRefused {
        /// The peer.
        peer: Address,
    },
    /// This agent's relay installed its recovery binding.
    OwnRecoveryBound {
        /// The binding's number.
        seq: u64,
    },
    /// This agent's relay refused its recovery binding.
    OwnRecoveryRefused {
        /// The relay's message (its reason first).
        message: String,
    },
    /// This agent moved to a new identity key: its relay installed the rotation statement.
    OwnKeyRotated {
        /// The statement's rotation number.
        seq: u64,
    },
    /// This agent's relay refused its rotation statement.
    OwnRotationRefused {
        /// The relay's message (its reason first).
        message: String,
    },
    /// The user accepted a peer's new key.
    KeyAccepted {
        /// The peer.
        peer: Address,
    },
    /// A key the user asked to pin was refused: another key is pinned.
    PinRefused {
        /// The peer.
        peer: Address,
    },

    // -- Settings --
    /// The user set a field's tier.
    PermissionSet {
        /// The field.
        field: String,
        /// The tier.
        tier: Tier,
    },
    /// The user blocked an address.
    Blocked {
        /// The address.
        peer: Address,
    },
    /// The user unblocked an address.
    Unblocked {
        /// The address.
        peer: Address,
    },

    // -- Relationship memory (§11) --
    /// A value the peer shared contradicted the context cache, which now holds the new
    /// value (§11.3); the user is told.
    MemoryChanged {
        /// The peer.
        peer: Address,
        /// The field.
        field: String,
        /// The value the cache held.
        old: String,
        /// The value the peer shared.
        new: String,
    },
    /// The user set a cached value by hand (`a2acp memory edit`).
    MemoryEdited {
        /// The peer.
        peer: Address,
        /// The field.
        field: String,
    },
    /// Memory about a peer was forgotten: one field (`a2acp memory forget ADDR FIELD`),
    /// or everything (`field` `None`: `memory forget ADDR`, a block, a removed contact).
    MemoryForgotten {
        /// The peer.
        peer: Address,
        /// The field, or `None` for everything.
        field: Option<String>,
        /// Facts removed (history included).
        facts: usize,
        /// Context packages removed.
        packages: usize,
        /// Ended threads removed with their records.
        threads: usize,
    },
    /// A completed thread could not be recorded in memory (the memory refused it); the
    /// thread itself is unaffected.
    MemoryRefused {
        /// The peer.
        peer: Address,
        /// Why.
        error: String,
    },

    // -- The relay link --
    /// The connection to the relay opened.
    RelayConnected,
    /// The relay keeps this wake-up endpoint (or none) for when this agent is offline.
    WakeUpSet {
        /// The endpoint, or `None`.
        endpoint: Option<String>,
    },
    /// The connection to the relay closed.
    RelayDisconnected,
    /// The relay accepted this agent's identity.
    RelayAuthenticated,
    /// Another connection of this agent took over at the relay.
    RelayReplaced,
    /// The relay was silent too long: the agent closes the connection.
    RelaySilent,
    /// The relay reported an error.
    RelayError {
        /// Its code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// The relay refused the registration: the agent closes the connection.
    RegistrationRefused {
        /// The relay's code.
        code: ErrorCode,
    },
    /// A relay frame over the size limit was refused.
    RelayFrameTooLarge {
        /// Its size in bytes.
        len: usize,
    },
    /// A relay frame that does not parse was dropped.
    RelayFrameMalformed {
        /// The parse error.
        error: String,
    },
    /// The relay's queue for a recipient is full: the packet waits.
    QueueOverflow {
        /// The recipient.
        to: Address,
        /// The packet.
        packet_id: String,
        /// When it is offered again.
        parked_until: Timestamp,
    },
    /// A thread's ephemeral key was erased (forward secrecy).
    EphemeralKeyErased,

    /// The agent found its own state or output inconsistent: an implementation bug,
    /// never caused by a peer. Checkers match on this variant.
    Bug(Bug),
    /// Something in a shared context space (§12).
    Space(SpaceEvent),
    /// Anything else, in words (nothing matches on it).
    Note(String),
}

pub use super::fields_named::{FieldsNamed, MAX_FIELDS_NAMED};

/// Whether a message was sent or received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExchangeDirection {
    /// This agent sent it.
    Sent,
    /// This agent received it.
    Received,
}

/// One message of a bridge's own protocol (seed 004's ACP messages and handshake steps),
/// as the principal's audit log records it ([`AgentEvent::Exchanged`]): typed facts only,
/// never the message's body, from which the log's summary is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    /// Sent or received.
    pub direction: ExchangeDirection,
    /// The other agent's id in its protocol (ACP `agent-id`).
    pub peer_agent: String,
    /// The other agent's principal (ACP `principal-id`).
    pub peer_principal: String,
    /// The message's type (ACP `message-type`: request, response, notification, handoff).
    pub kind: String,
    /// Its method (`agent.announce`, `agent.request`…).
    pub method: String,
    /// Its id (`None` for a notification).
    pub id: Option<String>,
    /// Where it went or came from (`nats:agent.<id>.inbox`).
    pub channel: String,
    /// The fields it names, if its protocol names any.
    #[serde(default)]
    pub fields: FieldsNamed,
    /// Whether its body was encrypted end to end.
    #[serde(default)]
    pub encrypted: bool,
}

/// Why an incoming envelope or packet was dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The envelope is addressed to another agent.
    NotForThisAgent {
        /// Its recipient.
        to: Address,
    },
    /// The envelope claims to come from this agent.
    OwnName,
    /// The sender is blocked.
    Blocked {
        /// The sender.
        peer: Address,
    },
    /// The envelope is under a key the sender rotated away from (a stale envelope: after
    /// the rotation the relay refuses that key).
    RetiredKey {
        /// The sender.
        peer: Address,
    },
    /// The envelope is not authentic under the pinned key nor under a new one.
    BadSignature {
        /// The sender.
        peer: Address,
    },
    /// The sender's key cannot be used.
    BadKey {
        /// The sender.
        peer: Address,
        /// Why.
        error: String,
    },
    /// The envelope does not open.
    Refused {
        /// The sender.
        peer: Address,
        /// Why.
        error: String,
    },
    /// The envelope continues a thread this agent does not know.
    UnknownThread {
        /// The sender.
        peer: Address,
    },
    /// The packet was already received (§13.1 deduplication).
    Duplicate {
        /// Its id.
        packet_id: String,
    },
    /// The packet does not parse or validate.
    Malformed {
        /// The sender.
        peer: Address,
        /// Why.
        why: String,
    },
}

/// An inconsistency of the agent's own (see [`AgentEvent::Bug`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bug {
    /// The thread state machine refused a transition the agent asked for.
    IllegalTransition {
        /// The refusal.
        error: String,
        /// Why the agent asked for it.
        why: String,
    },
    /// An outgoing packet failed the agent's own validation.
    InvalidOutgoing {
        /// Packet type.
        kind: String,
        /// The validation error.
        error: String,
    },
}

impl AgentEvent {
    /// Whether this is an inconsistency of the agent's own ([`AgentEvent::Bug`]).
    pub fn is_bug(&self) -> bool {
        matches!(self, AgentEvent::Bug(_))
    }

    /// The line as built, before cleaning.
    fn write_raw(&self, out: &mut String) -> fmt::Result {
        use AgentEvent as E;
        match self {
            E::ThreadStarted { with } => write!(out, "thread started with {with}"),
            E::ThreadOpened { by } => write!(out, "thread opened by {by}"),
            E::GroupStarted {
                group_id,
                participants,
            } => write!(
                out,
                "group thread {group_id} started with {}",
                join_addresses(participants)
            ),
            E::FlexibilityRequested {
                group_id,
                to,
                field,
            } => write!(
                out,
                "group {group_id}: asked {to} to be flexible on {field}"
            ),
            E::GroupProposed {
                group_id,
                summary,
                required,
                confirmers,
            } => write!(
                out,
                "group {group_id}: proposed “{summary}”, {required} of {} to confirm",
                confirmers.len()
            ),
            E::GroupOutcome {
                group_id,
                reached,
                confirmed,
                required,
            } => write!(
                out,
                "group {group_id}: {} ({confirmed} of {required} confirmed)",
                if *reached { "confirmed" } else { "cannot be confirmed" }
            ),
            E::StateChanged { from, to, why } => match why {
                Some(why) => write!(out, "state {from} -> {to} ({why})"),
                None => write!(out, "state {from} -> {to}"),
            },
            E::VersionAgreed { version } => write!(out, "protocol version {version} agreed"),
            E::Escalated { reason } => write!(out, "escalated to the users: {reason}"),
            E::Resumed { by_peer: false } => out.write_str("resumed by the user"),
            E::Resumed { by_peer: true } => out.write_str("resumed by the peer's user"),
            E::IntentUpdated {
                by_peer,
                summary,
                scope_change,
                expanded,
            } => {
                write!(
                    out,
                    "intent changed {} to “{summary}” ({})",
                    if *by_peer { "by the peer" } else { "by the user" },
                    scope_change.as_deref().unwrap_or("changed")
                )?;
                if !expanded.is_empty() {
                    write!(out, "; asked before sharing: {}", expanded.join(", "))?;
                }
                Ok(())
            }
            E::Forked { by_peer, children } => write!(
                out,
                "split {} into {} thread(s): {}",
                if *by_peer { "by the peer" } else { "by the user" },
                children.len(),
                children.join(", ")
            ),
            E::Sent {
                kind,
                packet_id,
                to,
                ..
            } => write!(out, "sent {kind} {packet_id} to {to}"),
            E::Received {
                kind,
                packet_id,
                from,
                ..
            } => write!(out, "received {kind} {packet_id} from {from}"),
            E::Exchanged(x) => write!(
                out,
                "{} {} {} {} {}",
                match x.direction {
                    ExchangeDirection::Sent => "sent",
                    ExchangeDirection::Received => "received",
                },
                x.method,
                x.id.as_deref().unwrap_or("(no id)"),
                match x.direction {
                    ExchangeDirection::Sent => "to",
                    ExchangeDirection::Received => "from",
                },
                x.peer_agent
            ),
            E::Resent { kind, packet_id } => {
                write!(out, "re-sending {kind} {packet_id} (gap after reconnect)")
            }
            E::GapRequested { missing } => write!(
                out,
                "{missing} packet(s) the other side sent never arrived: asking for them"
            ),
            E::NeverShareWithheld { kind, field } => write!(
                out,
                "outgoing {kind} refused: it contains the never_share value of `{field}`"
            ),
            E::SealFailed { packet_id, error } => {
                write!(out, "could not seal {packet_id}: {error}")
            }
            E::Dropped { drop, count } => {
                drop.write(out)?;
                match count {
                    Some(n) => write!(
                        out,
                        " ({n} packets dropped since the start; only some are logged)"
                    ),
                    None => Ok(()),
                }
            }
            E::PeerLimited {
                peer,
                threads,
                fork_children,
                packets,
            } => write!(
                out,
                "refused past the limits per peer from {peer}: {threads} new thread(s), {fork_children} fork child(ren), {packets} packet(s)"
            ),
            E::EndedThreadForgotten { peer, keep } => write!(
                out,
                "ended thread forgotten: {peer} started more than {keep} that ended"
            ),
            E::ConsentAnswered { prompt_id } => {
                write!(out, "consent prompt {prompt_id} answered")
            }
            E::AgreementKept { signed, unsigned } => {
                let names = |v: &[Address]| {
                    v.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
                };
                write!(out, "agreement kept; signed by {}", names(signed))?;
                if !unsigned.is_empty() {
                    write!(out, "; confirmed unsigned by {}", names(unsigned))?;
                }
                Ok(())
            }
            E::RetractionSent { peer, fields } => {
                write!(out, "asked {peer} to delete {}", fields.join(", "))
            }
            E::RetractionHonoured { peer, fields } => {
                write!(out, "{peer} took back {}: deleted, acknowledged", fields.join(", "))
            }
            E::UsageExpired { peer, fields } => {
                write!(out, "{peer}'s {} expired: deleted", fields.join(", "))
            }
            E::RetractionAcknowledged { peer, fields } => {
                write!(out, "{peer} acknowledged deleting {}", fields.join(", "))
            }
            E::RetractionUnacknowledged { peer, fields } => {
                write!(out, "{peer} has not acknowledged deleting {}", fields.join(", "))
            }
            E::RetractionAckRefused { peer, why } => {
                write!(out, "retraction acknowledgement of {peer} refused: {why}")
            }
            E::ConfirmationRefused { peer, why } => {
                write!(out, "confirmation of {peer} refused: {why}")
            }
            E::ReceiptSigned {
                receipt_id,
                kind,
                disclosed,
                declined,
            } => {
                let kind = match kind {
                    crate::receipt::ReceiptKind::Consent => "consent",
                    crate::receipt::ReceiptKind::Confirmation => "confirmation",
                };
                write!(out, "{kind} receipt {receipt_id} signed")?;
                if !disclosed.is_empty() {
                    write!(out, "; disclosed {}", disclosed.join(", "))?;
                }
                if !declined.is_empty() {
                    write!(out, "; declined {}", declined.join(", "))?;
                }
                Ok(())
            }
            E::ActionSucceeded { action } => write!(out, "action {action} succeeded"),
            E::ActionFailed { action, error } => write!(out, "action {action} failed: {error}"),
            E::ActionUndone { action } => write!(out, "undid {action}"),
            E::LlmDecided {
                request_id,
                model,
                tier,
                calls,
                latency_ms,
                elapsed_ms,
                confidence,
            } => {
                write!(
                    out,
                    "LLM decision #{request_id}: model {model} ({tier}), {calls} call(s), {latency_ms} ms ({elapsed_ms} ms in all), confidence "
                )?;
                match confidence {
                    Some(c) => write!(out, "{c:.2}"),
                    None => write!(out, "not given"),
                }
            }
            E::LlmAnswerRefused {
                request_id,
                tier,
                attempt,
                error,
            } => write!(
                out,
                "LLM answer #{request_id} refused ({tier}, attempt {attempt}): {error}"
            ),
            E::LlmUnavailable {
                request_id,
                tier,
                model,
                error,
            } => write!(
                out,
                "LLM #{request_id} unavailable: model {model} ({tier}): {error}"
            ),
            E::LlmFallback { from, to } => write!(out, "LLM fallback from {from} to {to}"),
            E::KeyPinned { peer } => write!(out, "pinned key of {peer} (first contact)"),
            E::KeyChanged { peer, halted } => write!(
                out,
                "SECURITY key change for {peer}; halted {halted} thread(s)"
            ),
            E::KeyAccepted { peer } => write!(out, "user accepted the new key of {peer}"),
            E::KeyRotated { peer, seq } => write!(
                out,
                "{peer} rotated its key (rotation {seq}, signed by the pinned key): re-pinned"
            ),
            E::OwnKeyRotated { seq } => write!(out, "identity key rotated (rotation {seq})"),
            E::PeerRecovered { peer, halted } => write!(
                out,
                "{peer} recovered its address onto a new key with its recovery key: {halted} thread(s) halted until the user accepts it"
            ),
            E::PeerRecoveryRefused { peer } => write!(
                out,
                "{peer} presented a recovery that does not verify from the pinned key"
            ),
            E::OwnRecoveryBound { seq } => write!(out, "recovery key bound (binding {seq})"),
            E::OwnRecoveryRefused { message } => {
                write!(out, "the relay refused the recovery key: {message}")
            }
            E::OwnRotationRefused { message } => {
                write!(out, "the relay refused the key rotation: {message}")
            }
            E::PinRefused { peer } => {
                write!(out, "pin of {peer} refused: another key is pinned")
            }
            E::PermissionSet { field, tier } => {
                write!(out, "permission {field} set to {}", tier.as_str())
            }
            E::Blocked { peer } => write!(out, "blocked {peer}"),
            E::Unblocked { peer } => write!(out, "unblocked {peer}"),
            E::MemoryChanged {
                peer,
                field,
                old,
                new,
            } => write!(out, "memory of {peer}: {field} changed from {old:?} to {new:?}"),
            E::MemoryEdited { peer, field } => write!(out, "memory of {peer}: {field} set by the user"),
            E::MemoryForgotten {
                peer,
                field,
                facts,
                packages,
                threads,
            } => match field {
                Some(f) => write!(out, "memory of {peer}: {f} forgotten ({facts} fact(s))"),
                None => write!(
                    out,
                    "memory of {peer} purged ({facts} fact(s), {packages} package(s), {threads} ended thread(s))"
                ),
            },
            E::MemoryRefused { peer, error } => {
                write!(out, "memory of {peer}: thread not recorded: {error}")
            }
            E::RelayConnected => out.write_str("relay connected"),
            E::RelayDisconnected => out.write_str("relay disconnected"),
            E::RelayAuthenticated => out.write_str("relay authenticated"),
            E::WakeUpSet { endpoint: Some(_) } => {
                out.write_str("relay keeps a wake-up endpoint for this agent")
            }
            E::WakeUpSet { endpoint: None } => out.write_str("relay sends this agent no wake-ups"),
            E::RelayReplaced => out.write_str("relay: another connection of this agent took over"),
            E::RelaySilent => out.write_str("relay silent too long: closing the connection"),
            E::RelayError { code, message } => {
                write!(out, "relay error {}: {message}", code.as_str())
            }
            E::RegistrationRefused { code } => write!(
                out,
                "registration refused ({}): closing the connection",
                code.as_str()
            ),
            E::RelayFrameTooLarge { len } => {
                write!(out, "relay frame of {len} bytes refused: too large")
            }
            E::RelayFrameMalformed { error } => {
                write!(out, "malformed relay frame dropped: {error}")
            }
            E::QueueOverflow {
                to,
                packet_id,
                parked_until,
            } => write!(
                out,
                "relay queue overflow for {to}, packet {packet_id} parked until {parked_until}"
            ),
            E::EphemeralKeyErased => out.write_str("ephemeral key erased"),
            E::Bug(Bug::IllegalTransition { error, why }) => {
                write!(out, "BUG refused: {error} ({why})")
            }
            E::Bug(Bug::InvalidOutgoing { kind, error }) => {
                write!(out, "BUG outgoing {kind} refused by validation: {error}")
            }
            E::Space(s) => write!(out, "{s}"),
            E::Note(text) => out.write_str(text),
        }
    }
}

impl DropReason {
    fn write(&self, out: &mut String) -> fmt::Result {
        match self {
            DropReason::NotForThisAgent { to } => {
                write!(out, "envelope for {to} dropped: not for this agent")
            }
            DropReason::OwnName => out.write_str("envelope in this agent's own name dropped"),
            DropReason::Blocked { peer } => write!(out, "envelope from blocked {peer} dropped"),
            DropReason::BadSignature { peer } => {
                write!(out, "envelope from {peer} refused: bad signature")
            }
            DropReason::RetiredKey { peer } => {
                write!(
                    out,
                    "envelope from {peer} dropped: under a key it rotated away from"
                )
            }
            DropReason::BadKey { peer, error } => {
                write!(out, "envelope from {peer} dropped: {error}")
            }
            DropReason::Refused { peer, error } => {
                write!(out, "envelope from {peer} refused: {error}")
            }
            DropReason::UnknownThread { peer } => {
                write!(out, "envelope from {peer} refused: unknown thread")
            }
            DropReason::Duplicate { packet_id } => write!(out, "duplicate {packet_id} dropped"),
            DropReason::Malformed { peer, why } => {
                write!(out, "malformed packet from {peer} dropped: {why}")
            }
        }
    }
}

fn join_addresses(a: &[Address]) -> String {
    a.iter().map(|x| x.as_str()).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for AgentEvent {
    /// The audit line: as built, then cleaned for display and capped at
    /// [`crate::display::MAX_RECORD`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = String::new();
        self.write_raw(&mut raw)?;
        f.write_str(&crate::display::line(&raw, crate::display::MAX_RECORD))
    }
}

/// What the agent did in a space, as audited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpaceEvent {
    /// The user created a space.
    Created {
        /// The space.
        space_id: String,
    },
    /// Another agent's space was joined (its first packet arrived).
    Joined {
        /// The space.
        space_id: String,
        /// Its creator.
        creator: Address,
    },
    /// An update was applied to the replica.
    Applied {
        /// The space.
        space_id: String,
        /// The field.
        field: String,
        /// Who wrote it.
        writer: Address,
        /// Whether it is now the field's value.
        won: bool,
    },
    /// An update or a packet was refused; nothing changed.
    Refused {
        /// The space.
        space_id: String,
        /// The agent it came from (this agent for its own user's writes).
        peer: Address,
        /// Why.
        refusal: SpaceRefusal,
    },
    /// A space packet from another participant reached the space's logic (it opened on
    /// its leg and its header matches the envelope); what became of its updates follows
    /// as `Applied` and `Refused`. The simulator's exactly-once audit counts space packets
    /// with it (a space packet has no thread, so it raises no `Received`).
    Received {
        /// The space.
        space_id: String,
        /// The sender.
        from: Address,
        /// The packet.
        packet_id: String,
        /// Updates in it.
        updates: usize,
    },
    /// A space packet was sealed for another participant.
    Sent {
        /// The space.
        space_id: String,
        /// The recipient.
        to: Address,
        /// The packet.
        packet_id: String,
        /// Updates in it.
        updates: usize,
    },
}

impl fmt::Display for SpaceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpaceEvent::Created { space_id } => write!(f, "space {space_id} created"),
            SpaceEvent::Joined { space_id, creator } => {
                write!(f, "space {space_id} of {creator} joined")
            }
            SpaceEvent::Applied {
                space_id,
                field,
                writer,
                won,
            } => write!(
                f,
                "space {space_id}: {field} by {writer} applied{}",
                if *won { "" } else { " (superseded)" }
            ),
            SpaceEvent::Refused {
                space_id,
                peer,
                refusal,
            } => write!(f, "space {space_id}: update from {peer} refused: {refusal}"),
            SpaceEvent::Received {
                space_id,
                from,
                packet_id,
                updates,
            } => write!(
                f,
                "space {space_id}: received {packet_id} ({updates} update(s)) from {from}"
            ),
            SpaceEvent::Sent {
                space_id,
                to,
                packet_id,
                updates,
            } => write!(
                f,
                "space {space_id}: sent {packet_id} ({updates} update(s)) to {to}"
            ),
        }
    }
}
