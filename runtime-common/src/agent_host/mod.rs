//! [`AgentHost`]: the agent state machine with its SQLite store, its open prompts and its
//! action executor — everything of an agent daemon except sockets, timers and terminals,
//! which the executor binding owns.
//!
//! The binding feeds inputs ([`AgentHost::handle`], [`AgentHost::handle_timeout`],
//! [`AgentHost::control`]) with the current time and executes the returned
//! [`Effect`]s in order. Each call drains the core's outputs and **commits every persist
//! record of the drained batch to SQLite before returning**, so every `Send` effect the
//! binding executes afterwards reveals only durable state (the core's contract).
//!
//! Actions (§9) are carried out by a simulated executor: a2acp has no calendar or booking
//! integration yet, so an action is recorded in the `actions` table (idempotently: the
//! core re-asks unanswered actions after a restart, by the same id) and reported done.
//! A language model answers through [`crate::llm::LlmClient`] when the agent has an
//! `[llm]` table: the host hands each call to the client, which answers on its own
//! thread; the loop feeds the answers back ([`AgentHost::llm_replies`]). Without one, a
//! call is answered "no language model is configured" and the core's fallback chain runs.

use std::collections::{BTreeMap, VecDeque};

use a2acp_core::agent::{
    ActionRequest, Agent, AgentConfig, AuditRecord, Bridged, Command, Input, Notification, Output,
    Prompt, RestoreError,
};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::packet::Context;
use a2acp_core::persist::PersistOp;
use a2acp_core::Timestamp;

use crate::config::{AgentFile, ConfigError};
use crate::control::NotificationEntry;
use crate::home::Home;
use crate::keys::KeyError;
use crate::store::{Durability, Store, StoreError};

mod a2a;
mod acp;
mod agentic;
mod drift;
mod fields;
mod groups;
mod keys;
mod memory;
mod receipts;
mod requests;
mod rotate;
mod spaces;
mod status;
mod threads;

pub use rotate::RotationOutcome;

use groups::group_ref;
use threads::thread_summary;

/// Why an agent could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Its store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Its records could not be restored.
    #[error("cannot restore the agent from its database: {0}")]
    Restore(#[from] RestoreError),
    /// Its configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Its key file is unusable.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The `relay_ca` of its configuration is unusable.
    #[error("relay_ca in the config file: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// No randomness.
    #[error(transparent)]
    Seed(#[from] crate::clock::SeedError),
    /// The home was never initialised.
    #[error("no agent in {0}: run `a2acp agent init --address agent:NAME@DOMAIN --relay ws://HOST:PORT --home {0}` first")]
    NotInitialised(String),
}

/// Something the binding must do, in order.
#[derive(Debug, Clone, PartialEq)]
// A prompt is the largest by far; effects are handled as they are made (the queue of them
// stays short), and a box would cost every prompt an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Effect {
    /// Send one frame to the relay (a WebSocket text message).
    Send(Vec<u8>),
    /// Drop the relay connection (dead heartbeat); reconnect with backoff.
    CloseConnection,
    /// Show a prompt.
    Prompt(Prompt),
    /// Withdraw a prompt.
    ClosePrompt(u64),
    /// Tell the user something.
    Notify(Notification),
    /// An action was carried out (for the transcript).
    Action(ActionRequest),
    /// An audit record (already stored; for the transcript and logs).
    Audit(AuditRecord),
    /// A packet went to a bridged peer (an A2A client): its task changed (the A2A
    /// listener tells the task's subscribers).
    Bridged(a2acp_core::agent::BridgedPacket),
}

/// Counters of one host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Prompts shown (re-shown ones included).
    pub prompts_shown: u64,
    /// Frames sent to the relay.
    pub frames_sent: u64,
    /// Frames received from the relay.
    pub frames_received: u64,
    /// Actions carried out.
    pub actions: u64,
    /// Transactions committed.
    pub commits: u64,
}

/// The agent, its store and its user-facing state.
pub struct AgentHost {
    agent: Agent,
    store: Store,
    prompts: BTreeMap<u64, Prompt>,
    notifications: VecDeque<NotificationEntry>,
    next_notification: u64,
    follow_up: VecDeque<Input>,
    stats: HostStats,
    now: Timestamp,
    llm: Option<crate::llm::LlmClient>,
    actions: Option<crate::actions::ActionRunner>,
    /// Sends Phase-1 task updates; started with the first one.
    phase1: Option<crate::phase1_push::Phase1Pusher>,
    /// The relay URL (door) of the current connection, or of the last one.
    door: Option<String>,
    /// The principal's audit log (seed 004 §6), for an agent with a home.
    audit_log: Option<crate::audit_log::AuditLog>,
    /// The transparency channel (seed 004 §5.2), if the config has one.
    transparency: Option<crate::transparency::Transparency>,
    /// ACP (seed 004), if the config has an `[acp]` table.
    acp: Option<crate::acp::AcpHost>,
    /// The Agentic Protocol store (`--agentic-listen`), where threads leave packages.
    agentic: Option<std::sync::Arc<crate::agentic::store::AgenticStore>>,
    /// The home's directory, for an agent opened from one: where its key files are.
    home: Option<std::path::PathBuf>,
    /// How the last rotation of this agent's key ended, until a request takes it.
    rotation_outcome: Option<RotationOutcome>,
}

/// What answers the agent's calls off its loop: the language model, and the runner of
/// its actions. Without them a model call fails at once and an action is only recorded.
#[derive(Debug, Default)]
pub struct Workers {
    /// The model client.
    pub llm: Option<crate::llm::LlmClient>,
    /// The runner of actions.
    pub actions: Option<crate::actions::ActionRunner>,
    /// Where the messages sent and received are recorded (seed 004 §6).
    pub audit_log: Option<crate::audit_log::AuditLog>,
    /// Where their summaries are posted (seed 004 §5.2).
    pub transparency: Option<crate::transparency::Transparency>,
    /// ACP's session and link (seed 004).
    pub acp: Option<crate::acp::AcpHost>,
}

impl std::fmt::Debug for AgentHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHost")
            .field("address", self.agent.address())
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// What [`AgentHost::open_home`] found.
#[derive(Debug)]
pub struct Opened {
    /// The host.
    pub host: AgentHost,
    /// The first effects (prompts shown again after a restart, re-asked actions…).
    pub effects: Vec<Effect>,
    /// The configuration file.
    pub file: AgentFile,
    /// Whether the agent was restored from earlier records.
    pub restored: bool,
    /// A warning for the user (e.g. edited permissions that no longer apply).
    pub warning: Option<String>,
    /// Whom the agent trusts for a `wss://` relay: the file's `relay_ca` besides the web
    /// PKI roots (`None`: the web PKI roots only).
    pub tls: Option<crate::tls::ClientTls>,
}

/// Notifications kept (the oldest goes first).
pub const MAX_NOTIFICATIONS: usize = 100;

impl AgentHost {
    /// Starts (new) or restores (records in `store`) the agent, with no language model.
    pub fn start(
        config: AgentConfig,
        identity: IdentityKey,
        store: Store,
        now: Timestamp,
    ) -> Result<(AgentHost, Vec<Effect>, bool), HostError> {
        Self::start_with(config, identity, store, now, Workers::default())
    }

    /// Starts or restores the agent; `workers` answer its model calls and do its actions
    /// (those restored threads ask for again included).
    pub fn start_with(
        config: AgentConfig,
        identity: IdentityKey,
        store: Store,
        now: Timestamp,
        workers: Workers,
    ) -> Result<(AgentHost, Vec<Effect>, bool), HostError> {
        let seed = crate::clock::os_seed()?;
        let records = store.load_all()?;
        let restored = !records.is_empty();
        let mut agent = if restored {
            Agent::restore(config, identity, seed, records)?
        } else {
            Agent::new(config, identity, seed)
        };
        a2acp_core::bridge::install(&mut agent);
        let mut host = AgentHost {
            agent,
            store,
            prompts: BTreeMap::new(),
            notifications: VecDeque::new(),
            next_notification: 1,
            follow_up: VecDeque::new(),
            stats: HostStats::default(),
            now,
            llm: workers.llm,
            actions: workers.actions,
            phase1: None,
            door: None,
            audit_log: workers.audit_log,
            transparency: workers.transparency,
            acp: workers.acp,
            agentic: None,
            home: None,
            rotation_outcome: None,
        };
        let effects = host.drain()?;
        Ok((host, effects, restored))
    }

    /// Opens the agent of `home`: config, key, database.
    pub fn open_home(home: &Home, durability: Durability) -> Result<Opened, HostError> {
        if !home.config().exists() {
            return Err(HostError::NotInitialised(home.dir().display().to_string()));
        }
        let file = AgentFile::load(&home.config())?;
        let config = file.agent_config(&home.config())?;
        let identity = crate::keys::load(&home.key())?;
        let tls = match &file.relay_ca {
            Some(ca) => Some(crate::tls::ClientTls::new(Some(&home.dir().join(ca)))?),
            None => None,
        };
        let store = Store::open(&home.db(), durability)?;
        let wanted = config.permissions.clone();
        // Calls made while opening (a restored thread asks again) go to the model too.
        let workers = Workers {
            llm: file.llm.clone().map(crate::llm::LlmClient::new),
            actions: Some(crate::actions::ActionRunner::new(
                home.dir().join("calendar"),
                file.actions.clone(),
            )),
            audit_log: Some(crate::audit_log::AuditLog::new(
                home.dir(),
                durability == Durability::Full,
            )),
            transparency: match &file.transparency {
                Some(t) => Some(
                    crate::transparency::Transparency::start(t, home.dir()).map_err(|message| {
                        ConfigError::Invalid {
                            path: home.config(),
                            message,
                        }
                    })?,
                ),
                None => None,
            },
            acp: match &file.acp {
                Some(a) => Some(
                    crate::acp::AcpHost::start(
                        a,
                        config.address.user(),
                        home.dir(),
                        &identity,
                        crate::clock::os_seed()?,
                    )
                    .map_err(|message| ConfigError::Invalid {
                        path: home.config(),
                        message,
                    })?,
                ),
                None => None,
            },
        };
        let (mut host, mut effects, restored) =
            AgentHost::start_with(config, identity, store, crate::clock::now(), workers)?;
        host.home = Some(home.dir().to_path_buf());
        // A rotation this agent did not see end: its new key, handed over again.
        effects.extend(host.resume_rotation()?);
        let agentic_db = home.dir().join(crate::agentic::DB_FILE);
        let agentic = crate::agentic::store::AgenticStore::open(&agentic_db).map_err(|e| {
            ConfigError::Invalid {
                path: agentic_db.clone(),
                message: e.to_string(),
            }
        })?;
        host.set_agentic_store(std::sync::Arc::new(agentic));
        let warning = (restored && host.agent.permissions() != &wanted).then(|| {
            format!(
                "the [permissions] of {} differ from the tiers this agent keeps; the kept ones apply (see `a2acp permissions show`, change them with `a2acp permissions set`)",
                home.config().display()
            )
        });
        Ok(Opened {
            host,
            effects,
            file,
            restored,
            warning,
            tls,
        })
    }

    /// Where the model's answers arrive, if a model is configured: the loop feeds each
    /// to [`AgentHost::llm_answer`].
    pub fn llm_replies(&self) -> Option<flume::Receiver<crate::llm::LlmReply>> {
        self.llm.as_ref().map(|c| c.replies())
    }

    /// Where the results of actions arrive, if a runner does them: the loop feeds each
    /// to [`AgentHost::handle`].
    pub fn action_results(&self) -> Option<flume::Receiver<Input>> {
        self.actions.as_ref().map(|r| r.results())
    }

    /// Feeds a model's answer.
    pub fn llm_answer(
        &mut self,
        now: Timestamp,
        reply: crate::llm::LlmReply,
    ) -> Result<Vec<Effect>, HostError> {
        self.handle(
            now,
            Input::LlmResult {
                request_id: reply.request_id,
                result: reply.result,
                meta: reply.meta,
            },
        )
    }

    /// Writes the audit log's entry of each record that is a message sent or received,
    /// before the step's records are committed and its packets leave, and queues its
    /// summary for the transparency channel.
    fn log_messages(&mut self, audit: &[AuditRecord]) {
        if self.audit_log.is_none() && self.transparency.is_none() {
            return;
        }
        let me = self.agent.address().clone();
        let mut secrets: Option<Vec<String>> = None;
        for record in audit {
            let Some(mut entry) = a2acp_core::audit_log::entry_of(record, &me) else {
                continue;
            };
            let secrets = secrets.get_or_insert_with(|| self.agent.never_share_values());
            a2acp_core::audit_log::scrub(&mut entry, secrets);
            if let Some(t) = &self.transparency {
                let wanted = entry.direction == a2acp_core::agent::ExchangeDirection::Sent
                    || t.wants_received();
                if wanted {
                    entry.transparency_summary = t.offer(format!(
                        "{}'s agent: {}",
                        entry.from.principal, entry.summary
                    ));
                }
            }
            if let Some(log) = &mut self.audit_log {
                log.append(&entry, record.at);
            }
        }
        if let Some(log) = &mut self.audit_log {
            log.sync();
        }
    }

    /// The transparency channel's counters, if it has one.
    pub fn transparency_stats(&self) -> Option<crate::transparency::TransparencyStats> {
        self.transparency.as_ref().map(|t| t.stats())
    }

    /// The principal's audit log, if the agent has a home.
    pub fn audit_log(&self) -> Option<&crate::audit_log::AuditLog> {
        self.audit_log.as_ref()
    }

    /// The state machine (read only).
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// Counters.
    pub fn stats(&self) -> HostStats {
        self.stats
    }

    /// Open prompts by id: the runtime's one copy of them. The terminal's prompt flow
    /// ([`crate::prompt::PromptUi`]) and the control socket read them here.
    pub fn prompts(&self) -> &BTreeMap<u64, Prompt> {
        &self.prompts
    }

    /// Recent notifications, oldest first, numbered, with their read flag.
    pub fn notifications(&self) -> impl Iterator<Item = &NotificationEntry> {
        self.notifications.iter()
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Feeds one input; returns what to do. Persist records are committed before this
    /// returns.
    pub fn handle(&mut self, now: Timestamp, input: Input) -> Result<Vec<Effect>, HostError> {
        self.now = self.now.max(now);
        match &input {
            Input::Bytes(_) => self.stats.frames_received += 1,
            Input::Command(Command::AnswerConsent { prompt_id, .. })
            | Input::Command(Command::AnswerResolution { prompt_id, .. }) => {
                self.prompts.remove(prompt_id);
            }
            _ => {}
        }
        self.agent.handle(self.now, input);
        self.drain()
    }

    /// The timer of [`AgentHost::poll_timeout`] fired.
    pub fn handle_timeout(&mut self, now: Timestamp) -> Result<Vec<Effect>, HostError> {
        self.now = self.now.max(now);
        if let Some(a) = &mut self.acp {
            if a.poll_timeout().is_some_and(|t| t <= self.now) {
                a.handle_timeout(self.now);
            }
        }
        self.agent.handle_timeout(self.now);
        self.drain()
    }

    /// When [`AgentHost::handle_timeout`] must be called.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let acp = self.acp.as_ref().and_then(|a| a.poll_timeout());
        match (self.agent.poll_timeout(), acp) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Drains the core: commits persists (and audit records) in one transaction, then
    /// returns the effects; feeds follow-up inputs (action results) the same way.
    fn drain(&mut self) -> Result<Vec<Effect>, HostError> {
        let mut effects = Vec::new();
        loop {
            let mut ops: Vec<PersistOp> = Vec::new();
            let mut audit: Vec<AuditRecord> = Vec::new();
            let mut batch: Vec<Output> = Vec::new();
            while let Some(o) = self.agent.poll_output() {
                match o {
                    Output::Persist(op) => ops.push(op),
                    Output::Audit(a) => {
                        audit.push(a.clone());
                        batch.push(Output::Audit(a));
                    }
                    other => batch.push(other),
                }
            }
            // The audit log's lines go first: a process killed between them and the
            // commit does the step again after its restart (the relay redelivers, the
            // user is asked again), so a message is logged at least once, never lost.
            self.log_messages(&audit);
            self.leave_outcomes(&audit);
            if !ops.is_empty() || !audit.is_empty() {
                self.store.apply(&ops, &audit)?;
                self.stats.commits += 1;
            }
            // The key files follow a rotation once the core's records of it are durable.
            self.own_key_files(&audit);
            for o in batch {
                self.execute(o, &mut effects)?;
            }
            if let Some(todo) = self.acp.as_mut().and_then(|a| a.next_todo()) {
                self.acp_todo(todo);
                continue;
            }
            match self.follow_up.pop_front() {
                Some(input) => self.agent.handle(self.now, input),
                None => return Ok(effects),
            }
        }
    }

    fn execute(&mut self, o: Output, effects: &mut Vec<Effect>) -> Result<(), HostError> {
        match o {
            Output::Persist(_) => {}
            Output::Send(b) => {
                self.stats.frames_sent += 1;
                effects.push(Effect::Send(b));
            }
            Output::Prompt(p) => {
                self.stats.prompts_shown += 1;
                self.prompts.insert(p.id, p.clone());
                effects.push(Effect::Prompt(p));
            }
            Output::ClosePrompt(id) => {
                if self.prompts.remove(&id).is_some() {
                    effects.push(Effect::ClosePrompt(id));
                }
            }
            Output::CallLlm(r) => match &self.llm {
                Some(client) => client.submit(r),
                None => self.follow_up.push_back(Input::LlmResult {
                    request_id: r.id,
                    result: Err("no language model is configured".into()),
                    meta: a2acp_core::agent::LlmMeta::default(),
                }),
            },
            Output::ExecuteAction(a) => {
                let details = serde_json::to_string(&a.details).unwrap_or_default();
                let first = self.store.record_action(
                    a.id,
                    a.undo,
                    &a.thread_id,
                    &a.action.action,
                    &details,
                    self.now.as_millis(),
                )?;
                if first {
                    self.stats.actions += 1;
                }
                match &self.actions {
                    Some(runner) => runner.submit(a.clone()),
                    // No runner (an embedded host): the action is recorded, and a check
                    // finds nothing that would change the proposal.
                    None => self.follow_up.push_back(Input::ActionResult {
                        action_id: a.id,
                        result: Ok(Context::new()),
                    }),
                }
                effects.push(Effect::Action(a));
            }
            Output::Notify(n) => {
                // One with the key of an earlier notification replaces it.
                if n.key.is_some() {
                    self.notifications.retain(|x| x.notification.key != n.key);
                }
                if self.notifications.len() == MAX_NOTIFICATIONS {
                    self.notifications.pop_front();
                }
                self.notifications.push_back(NotificationEntry {
                    number: self.next_notification,
                    at: self.now.to_string(),
                    read: false,
                    notification: n.clone(),
                });
                self.next_notification += 1;
                effects.push(Effect::Notify(n));
            }
            Output::Audit(a) => effects.push(Effect::Audit(a)),
            Output::CloseConnection => effects.push(Effect::CloseConnection),
            Output::Bridged(Bridged::Packet(p)) => effects.push(Effect::Bridged(p)),
            // A message of the Phase-1 bridge for a sender's endpoint: sent with the
            // seed's retry rule.
            Output::Bridged(Bridged::Message(m))
                if m.bridge == a2acp_core::bridge::phase1::tasks::NAME =>
            {
                self.phase1
                    .get_or_insert_with(crate::phase1_push::Phase1Pusher::new)
                    .submit(m)
            }
            // An ACP answer or request: signed and sent by the session.
            Output::Bridged(Bridged::Message(m))
                if m.bridge == a2acp_core::bridge::acp::threads::NAME =>
            {
                self.acp_message(m)
            }
            // No other bridge sends to endpoints of its own.
            Output::Bridged(Bridged::Message(_)) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
