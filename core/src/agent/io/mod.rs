//! What goes into an [`Agent`](super::Agent) and what comes out of it: inputs, the user's
//! commands, outputs, prompts, notifications with their typed payloads (a space's change,
//! an introduction, a memory change) and what is released for bridged peers. Every
//! capability names these types, so they sit under them all: this folder imports only
//! `agent::permissions` (see the layers in `agent/mod.rs`).

pub mod events;
mod fields_named;
pub(super) mod notify;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::address::Address;
use crate::agent::io::events::AgentEvent;
use crate::agent::permissions::Tier;
use crate::crypto::IdentityKey;
use crate::packet::{ActionSpec, Context, Intent, Need, Priority, Proposal};
use crate::persist::PersistOp;
use crate::space::{FieldValue, SpacePermission, SpaceRefusal};
use crate::time::Timestamp;

/// An input to the agent. Each is handed over with the current time.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The connection to the relay is up (the relay's challenge follows as bytes).
    Connected,
    /// The connection to the relay is gone.
    Disconnected,
    /// One frame from the relay.
    Bytes(Vec<u8>),
    /// Something the user asked for.
    Command(Command),
    /// The answer to a [`Output::CallLlm`]: the model's text, or why there is none.
    LlmResult {
        /// The request's id.
        request_id: u64,
        /// The model's raw answer, or an error (timeout, rate limit, no model).
        result: Result<String, String>,
        /// Which model answered and how long it took (recorded with the decision).
        meta: LlmMeta,
    },
    /// The outcome of an [`Output::ExecuteAction`].
    ActionResult {
        /// The request's id.
        action_id: u64,
        /// `Ok` with what the action reports (a check's findings, e.g. the slot a venue
        /// has; usually nothing), or what went wrong.
        result: Result<Context, String>,
    },
}

/// A user's command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Start a thread with another agent (§4). The context the user gives counts as
    /// consented for this thread (§7.4), never_share fields excepted.
    StartThread {
        /// The other agent.
        to: Address,
        /// What it is about.
        intent: Intent,
        /// What the user said about it.
        context: Context,
    },
    /// Start a thread with a bridged peer (SPEC-NOTES "Adding a bridge"): the bridge
    /// `bridge` opens it with `to`, its own kind of destination (for the A2A bridge an
    /// agent card's URL, or its base URL). The same thread, tiers and prompts as with an
    /// a2acp peer.
    StartBridgedThread {
        /// The bridge ([`Bridge::name`](crate::agent::Bridge::name)).
        bridge: String,
        /// Where, in the bridge's terms.
        to: String,
        /// What it is about.
        intent: Intent,
        /// What the user said about it.
        context: Context,
    },
    /// Start a group thread (§10) with 1–15 other agents; this agent coordinates. One
    /// leg (a two-party thread of its own) goes to each participant (SPEC-NOTES "Group
    /// threads"). The context counts as consented for every leg (§7.4), never_share
    /// fields excepted.
    StartGroupThread {
        /// The other participants, each once, this agent not among them.
        participants: Vec<Address>,
        /// What it is about.
        intent: Intent,
        /// What the user said about it.
        context: Context,
        /// How the proposal's confirmations are collected (§8.3).
        confirmation: GroupConfirmation,
    },
    /// Hand the coordination of a group thread this agent coordinates to one of its
    /// participants (§10.3); only while nothing is proposed. The other agent accepts or
    /// declines without asking its user.
    TransferCoordinator {
        /// The group (`grp_…`).
        group_id: String,
        /// The participant to coordinate from now on.
        to: Address,
    },
    /// Answer a consent prompt (§7.3).
    AnswerConsent {
        /// The prompt.
        prompt_id: u64,
        /// The answer.
        answer: ConsentAnswer,
    },
    /// Answer a resolution prompt (§8.2).
    AnswerResolution {
        /// The prompt.
        prompt_id: u64,
        /// The answer.
        answer: ResolutionAnswer,
    },
    /// Add context to a thread (e.g. after an escalation) and let the agent continue.
    UpdateContext {
        /// The thread.
        thread_id: String,
        /// New or changed values.
        context: Context,
    },
    /// Change a thread's intent (§6.5).
    UpdateIntent {
        /// The thread.
        thread_id: String,
        /// The new intent.
        intent: Intent,
        /// Why.
        reason: String,
        /// What the new intent needs from the peer besides what its kind asks for
        /// (`additional_context_needed`, at most 5 in all).
        needs: Vec<Need>,
    },
    /// Dismiss a §7.2 suggestion by its number: it is no longer listed and that field is
    /// never suggested again for that agent (the tiers stay as they are).
    DismissSuggestion {
        /// The suggestion's number.
        id: u64,
    },
    /// Split a thread into independent threads (§6.5).
    ForkThread {
        /// The thread to split.
        thread_id: String,
        /// Intents of the new threads.
        intents: Vec<Intent>,
    },
    /// Close a thread (→ DECLINED) and tell the other agent.
    CancelThread {
        /// The thread.
        thread_id: String,
    },
    /// Take back values shared in a thread (SPEC-NOTES "Retraction"): the other agent is
    /// asked to delete them and to acknowledge it, signed; this agent shares them no more
    /// in the thread.
    Retract {
        /// The thread.
        thread_id: String,
        /// The fields; empty: every field this agent shared in the thread.
        fields: Vec<String>,
    },
    /// Change a permission tier, globally or for one relationship (§7.2).
    SetPermission {
        /// Field or category.
        field: String,
        /// The tier.
        tier: Tier,
        /// Only for this agent, as a relationship override.
        for_peer: Option<Address>,
    },
    /// Set the usage rule values of a field or category travel with (SPEC-NOTES "Usage
    /// rules"); `None` removes it.
    SetUsageRule {
        /// Field or category.
        field: String,
        /// The rule.
        policy: Option<crate::agent::permissions::UsagePolicy>,
    },
    /// Block an agent (§16): its packets are dropped, its threads declined.
    Block(Address),
    /// Unblock an agent.
    Unblock(Address),
    /// Pin a key learned out of band before first contact.
    PinKey {
        /// The agent.
        address: Address,
        /// Its Ed25519 public key.
        key: [u8; 32],
    },
    /// Create a shared context space (§12) with other participants; this agent is its
    /// creator (full_write) and carries its updates. `fields` are written at once, each
    /// through the permission tiers.
    CreateSpace {
        /// What it is about.
        name: String,
        /// The other participants and what each may write.
        participants: Vec<crate::space::SpaceParticipant>,
        /// Initial fields.
        fields: Context,
    },
    /// Write one field of a space (§12): a value, a link, or clearing it. Refused (and
    /// the user told) when the field is never_share for a participant or beyond this
    /// agent's permission in the space.
    SetSpaceField {
        /// The space (`spc_…`).
        space_id: String,
        /// The field; own fields of a write_own_fields participant are named
        /// `<its address>/<name>`.
        field: String,
        /// What to write.
        value: crate::space::FieldValue,
    },
    /// Move this agent's address to the identity key `new` (SPEC-NOTES "Key rotation"):
    /// the runtime has stored `new` durably and keeps the current key until
    /// [`AgentEvent::OwnKeyRotated`]. Given again after a restart, it finishes or retries
    /// the rotation.
    RotateKey {
        /// The new key.
        new: Box<IdentityKey>,
    },
    /// Bind the recovery key whose public part is `recovery_key` to this agent's address
    /// at its relay (SPEC-NOTES "Recovery"), replacing the one bound before. Only the
    /// public part is ever given to the agent (and kept, to bind it again after a key
    /// rotation); the runtime shows the secret to the user once and forgets it.
    BindRecovery {
        /// The recovery key's public part.
        recovery_key: [u8; 32],
    },
    /// Accept a changed key of an agent after the user checked it out of band (§16).
    AcceptKeyChange {
        /// The agent.
        address: Address,
    },
    /// Set a remembered value about another agent's user by hand (`a2acp memory edit`,
    /// §11.3): the context cache's `field` becomes `value`, superseding what was
    /// remembered (history kept).
    EditMemory {
        /// The agent.
        peer: Address,
        /// The field (`dietary`).
        field: String,
        /// The value.
        value: String,
    },
    /// Forget what the agent remembers about another agent (§11.3): one field of the
    /// context cache with its history, or (`field` `None`) the whole relationship —
    /// facts, packages, approvals and suggestions — as if the contact were removed.
    ForgetMemory {
        /// The agent.
        peer: Address,
        /// One field, or everything.
        field: Option<String>,
    },
    /// Import relationship memory from NDJSON (seed 002 §10.3, as
    /// [`crate::agent::Agent::export_memory`] writes it): all lines or none.
    ImportMemory {
        /// The NDJSON text.
        ndjson: String,
    },
}

/// The user's answer to a batched consent prompt (§7.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ConsentAnswer {
    /// "Share selected": a choice per field; fields left out are declined.
    ShareSelected(BTreeMap<String, FieldChoice>),
    /// "Decline all".
    DeclineAll,
}

/// One field's choice in a consent prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FieldChoice {
    /// Share the suggested value.
    Share,
    /// Share this value instead ("Other…").
    ShareValue(Value),
    /// Don't share.
    DontShare,
}

/// The user's answer to a resolution prompt (§8.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ResolutionAnswer {
    /// Confirm.
    Confirm,
    /// Suggest a different time.
    DifferentTime,
    /// Suggest a different place.
    DifferentPlace,
    /// "Can't make it — make an excuse for me": a polite decline; the real reason stays
    /// on this device and is never sent.
    MakeExcuse {
        /// The real reason, kept locally for the user's own record.
        actual_reason: Option<String>,
    },
    /// Decline outright; the thread closes.
    Decline,
    /// Choose one of the proposal's `alternatives` instead (§8.1): its index in
    /// `proposal.alternatives`, from 0. The proposer proposes it as the main proposal,
    /// which both users then confirm (SPEC-NOTES "Resolution and confirmation").
    Alternative(usize),
}

/// An output of the agent. Drain with `poll_output` until `None`, in order.
// A prompt is the largest variant by far; outputs are drained as they are made, so the
// queue holding them stays short, and a box would cost every prompt an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Store or delete a record; must be durable before any later `Send` is executed.
    Persist(PersistOp),
    /// Send one frame to the relay.
    Send(Vec<u8>),
    /// Show a prompt to the user (replaces any open prompt with the same id).
    Prompt(Prompt),
    /// Withdraw a prompt that no longer needs an answer.
    ClosePrompt(u64),
    /// Ask the LLM; answer with [`Input::LlmResult`].
    CallLlm(LlmRequest),
    /// Carry out (or undo) an action; answer with [`Input::ActionResult`]. Ids are stable
    /// across restarts, so a runtime can make actions idempotent.
    ExecuteAction(ActionRequest),
    /// Tell the user something.
    Notify(Notification),
    /// Append to the audit log.
    Audit(AuditRecord),
    /// Drop the relay connection (heartbeat lost); reconnect later.
    CloseConnection,
    /// Something for a bridged peer, in place of a sealed frame for the relay: a packet
    /// the agent addressed to it, or a message its bridge made for the peer's endpoint
    /// (SPEC-NOTES "Adding a bridge"). Released with the sends, after the records it
    /// depends on.
    Bridged(Bridged),
}

/// What the agent releases for a bridged peer in place of a sealed frame
/// ([`Output::Bridged`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Bridged {
    /// A packet the agent addressed to a bridged peer in a thread: the bridge's listener
    /// reads the thread again ([`ThreadView`](crate::agent::ThreadView)) and tells its clients.
    Packet(BridgedPacket),
    /// A message a bridge made for its peer's own endpoint in its step (for example a
    /// seed-001 `status_update`): the runtime delivers it with the bridge's transport.
    Message(BridgeMessage),
}

/// A packet the agent addressed to a bridged peer ([`Bridged::Packet`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgedPacket {
    /// The thread.
    pub thread_id: String,
    /// The packet.
    pub packet_id: String,
    /// The bridged peer.
    pub peer: Address,
    /// The packet, as the agent wrote it (JSON).
    pub json: String,
}

/// A bridge's message for its peer's endpoint ([`Bridged::Message`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BridgeMessage {
    /// The bridge that made it ([`Bridge::name`](crate::agent::Bridge::name)).
    pub bridge: String,
    /// The thread it is about.
    pub thread_id: String,
    /// Where it goes (the peer's endpoint).
    pub endpoint: String,
    /// The whole message.
    pub body: String,
}

/// A prompt for the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    /// Id to answer with.
    pub id: u64,
    /// The thread it concerns.
    pub thread_id: String,
    /// The other agent.
    pub peer: Address,
    /// What the thread is about.
    pub intent: Intent,
    /// What is asked.
    pub kind: PromptKind,
    /// A consent prompt in a thread whose intent changed (§6.5): what it was about when
    /// its sharing was agreed, and what it is about now — the expanded scope the answer
    /// is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<IntentChange>,
}

/// A thread's intent update (§6.5), as a consent prompt shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntentChange {
    /// The intent the thread's sharing was agreed under (cleaned for display).
    pub from: Intent,
    /// The intent now (cleaned for display).
    pub to: Intent,
}

/// What a prompt asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PromptKind {
    /// "Bob's agent is asking for: …" — one entry per field, answered together (§7.3).
    Consent {
        /// The fields.
        fields: Vec<ConsentField>,
    },
    /// "Dinner sorted — Confirm / different time / different place / make an excuse" (§8.2).
    Resolution {
        /// The proposal.
        proposal: Proposal,
        /// Who proposed it.
        proposer: Address,
        /// When it expires.
        deadline: Timestamp,
        /// Whether this is the reminder.
        reminder: bool,
    },
}

/// One field of a consent prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsentField {
    /// The field asked for.
    pub field: String,
    /// Why the other agent asks (shown to the user).
    pub reason: String,
    /// How much it matters.
    pub priority: Priority,
    /// What would be shared on "Share", from what the agent knows.
    pub suggested: Option<Value>,
}

/// A request to the LLM, with the five prompt layers of §5.1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmRequest {
    /// Id to answer with.
    pub id: u64,
    /// The thread.
    pub thread_id: String,
    /// Attempt number with this tier's model, from 1.
    pub attempt: u32,
    /// Which model the runtime must ask (§5.5): the core picks it per decision and moves
    /// along the fallback chain (SPEC-NOTES "The LLM layer").
    #[serde(default)]
    pub tier: ModelTier,
    /// Layers 1–5: protocol, user profile, permissions, relationship memory, thread; then
    /// the peer's data, marked [`LlmLayer::untrusted`].
    pub layers: Vec<LlmLayer>,
    /// JSON schema the answer must follow.
    pub schema: Value,
    /// Why the previous attempt was refused, if it was.
    pub previous_error: Option<String>,
}

/// One layer of the system prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmLayer {
    /// Layer name.
    pub name: String,
    /// Its content.
    pub content: String,
    /// What another agent wrote (its context, its intent, its packets): data between
    /// unforgeable markers, never instructions. A runtime puts it apart from the system
    /// layers (in the user turn of a chat), never among them.
    #[serde(default)]
    pub untrusted: bool,
}

/// The model tier a decision needs (§5.5), or the fallback model (§13.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelTier {
    /// Packet parsing and construction, routine follow-ups.
    Small,
    /// Evaluating completeness, identifying gaps.
    #[default]
    Medium,
    /// Proposals and nuanced trade-offs.
    Large,
    /// The secondary model, when the tier's model is unavailable or gave no valid answer.
    Fallback,
}

impl ModelTier {
    /// Its name in configuration and audit lines.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelTier::Small => "small",
            ModelTier::Medium => "medium",
            ModelTier::Large => "large",
            ModelTier::Fallback => "fallback",
        }
    }
}

impl std::fmt::Display for ModelTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the runtime tells about a model call besides its answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmMeta {
    /// The model that answered (or failed), as the runtime named it.
    pub model: String,
    /// How long the call took, retries included, in milliseconds.
    pub latency_ms: u64,
}

/// An action to carry out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionRequest {
    /// Id to answer with.
    pub id: u64,
    /// The thread.
    pub thread_id: String,
    /// The action.
    pub action: ActionSpec,
    /// The confirmed proposal's details.
    pub details: Context,
    /// Undo a completed action (rollback) rather than do it.
    pub undo: bool,
    /// Only check that the action can be done and with which details, changing nothing
    /// (the coordinator's work between two steps of a sequential confirmation, §8.3);
    /// answer with the findings as the result's context.
    #[serde(default)]
    pub check: bool,
}

/// How a group's proposal collects its confirmations (§8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupConfirmation {
    /// Everyone the proposal names, in any order.
    #[default]
    All,
    /// This many confirmations in total, this agent's user's included.
    Quorum(u32),
    /// Everyone, one after the other in the order of the participants (this agent's user
    /// first); between two steps the coordinator checks its own actions, and what it finds
    /// may change what the next person is asked.
    Sequential,
}

/// Kinds of notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyKind {
    /// Informational.
    Info,
    /// A thread stalled (§6.4).
    Stalled,
    /// A thread needs the user (§6.3, §6.4).
    Escalated,
    /// A resolution expired (§8.3).
    Expired,
    /// A thread was declined.
    Declined,
    /// A thread completed.
    Completed,
    /// An action failed or was rolled back (§9).
    Failed,
    /// A peer's key changed (§16).
    Security,
    /// A peer keeps sending malformed packets (§13.4).
    Flagged,
    /// A delivery problem (relay refusal, overflow, unknown agent).
    Delivery,
    /// A suggestion, e.g. to promote a field to always_share (§7.2).
    Suggestion,
    /// Relationship memory changed: a value the peer shared contradicted what was
    /// remembered (§11.3); the notification's `memory_change` says what.
    Memory,
    /// A capability introduced the first time it matters (§14.2); the notification's
    /// `introduction` says which.
    Introduction,
}

/// Something to tell the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// The thread, if any.
    pub thread_id: Option<String>,
    /// Kind.
    pub kind: NotifyKind,
    /// Text for the user.
    pub text: String,
    /// Notifications with the same key are one: each replaces the one shown before (a
    /// count kept up to date, e.g. `refused/<address>`). `None`: a notification of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// What the user can accept in one step, for a [`NotifyKind::Suggestion`] (§7.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<Suggestion>,
    /// What changed in a shared context space (§12), for a notification about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<SpaceChange>,
    /// What changed in relationship memory, for a [`NotifyKind::Memory`] (§11.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_change: Option<MemoryChange>,
    /// Which capability, for a [`NotifyKind::Introduction`] (§14.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub introduction: Option<Introduction>,
}

/// A cached value about a peer that a value the peer shared contradicted (§11.3
/// A field that changed for the user, in a [`SpaceChange`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldChange {
    /// The field.
    pub field: String,
    /// Who wrote it.
    pub writer: Address,
    /// Its new value.
    pub value: FieldValue,
}

/// What a space notification is about (typed: code matches on this, not on the text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SpaceChange {
    /// This agent's user was added to a space.
    Joined {
        /// The space.
        space_id: String,
        /// Its name.
        name: String,
        /// Who created it.
        creator: Address,
        /// What this user may write.
        permission: SpacePermission,
    },
    /// Other participants changed fields.
    Changed {
        /// The space.
        space_id: String,
        /// The fields whose value changed, in order.
        fields: Vec<FieldChange>,
    },
    /// A write of this agent's user was refused before it left.
    Refused {
        /// The space.
        space_id: String,
        /// Why.
        refusal: SpaceRefusal,
    },
}

/// A capability the agent introduces once (§14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Introduction {
    /// The first thread: how context, consent prompts and confirmation work.
    FirstThread,
    /// The first §7.2 suggestion: the agent learns what the user always approves.
    Suggestions,
    /// The first group thread: the coordinator's role (§10).
    FirstGroup,
    /// The first shared context space (§12).
    FirstSpace,
    /// Ten threads ended: what relationship memory learnt (§11.2).
    Memory,
}

/// contradiction detection): the memory now holds `new`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryChange {
    /// The peer.
    pub peer: Address,
    /// The field (`dietary`).
    pub field: String,
    /// The value remembered before.
    pub old: String,
    /// The value the peer shared.
    pub new: String,
}

/// A suggestion the user can accept with one key or one command (§7.2 "One tap to
/// promote"). Listed by [`crate::agent::Agent::suggestions`] while it still applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Suggestion {
    /// Always share `field` with `peer` (a relationship override, §7.2).
    Promote {
        /// The suggestion's number: unique for this agent, never reused, so an accept
        /// typed for #N can never accept another suggestion.
        id: u64,
        /// The field the user approved three times.
        field: String,
        /// The agent it was shared with.
        peer: Address,
    },
}

impl Suggestion {
    /// The suggestion's number.
    pub fn id(&self) -> u64 {
        match self {
            Suggestion::Promote { id, .. } => *id,
        }
    }

    /// The command that dismisses it.
    pub fn dismiss(&self) -> Command {
        Command::DismissSuggestion { id: self.id() }
    }

    /// The command that accepts it.
    pub fn accept(&self) -> Command {
        match self {
            Suggestion::Promote { field, peer, .. } => Command::SetPermission {
                field: field.clone(),
                tier: Tier::AlwaysShare,
                for_peer: Some(peer.clone()),
            },
        }
    }
}

/// One audit record: what the agent did ([`AgentEvent`]), when, in which thread. The
/// audit log stores its event's [`Display`](std::fmt::Display) text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When.
    pub at: Timestamp,
    /// The thread, if any.
    pub thread_id: Option<String>,
    /// What happened; its text is the audit line, e.g. `sent context_request pkt_…`,
    /// `state NEGOTIATING -> PROPOSED`.
    pub event: AgentEvent,
}

impl AuditRecord {
    /// The agent found its own state or output inconsistent (an implementation bug, never
    /// caused by a peer): checkers match on this, not on the text.
    pub fn is_bug(&self) -> bool {
        self.event.is_bug()
    }
}
