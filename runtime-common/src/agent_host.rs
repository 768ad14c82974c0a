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
    ActionRequest, Agent, AgentConfig, AuditRecord, Command, GroupConfirmation, Input,
    Notification, Output, Prompt, RestoreError, Tier,
};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::encoding::b64_encode;
use a2acp_core::packet::{Context, Intent};
use a2acp_core::persist::PersistOp;
use a2acp_core::{Address, Timestamp};

use crate::config::{AgentFile, ConfigError};
use crate::control::{
    parse_tier, KeyInfo, NotificationEntry, PermissionsInfo, PromptEntry, Request, Response,
    StatusInfo, ThreadSummary,
};
use crate::home::Home;
use crate::keys::KeyError;
use crate::store::{Durability, Store, StoreError};

mod a2a;
mod drift;
mod groups;
mod memory;
mod spaces;
mod threads;

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
    /// A packet went to an A2A client: its task changed (the A2A listener tells the
    /// task's subscribers).
    A2a(a2acp_core::agent::A2aUpdate),
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
}

/// What answers the agent's calls off its loop: the language model, and the runner of
/// its actions. Without them a model call fails at once and an action is only recorded.
#[derive(Debug, Default)]
pub struct Workers {
    /// The model client.
    pub llm: Option<crate::llm::LlmClient>,
    /// The runner of actions.
    pub actions: Option<crate::actions::ActionRunner>,
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
        let agent = if restored {
            Agent::restore(config, identity, seed, records)?
        } else {
            Agent::new(config, identity, seed)
        };
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
        };
        let (host, effects, restored) =
            AgentHost::start_with(config, identity, store, crate::clock::now(), workers)?;
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
        self.agent.handle_timeout(self.now);
        self.drain()
    }

    /// When [`AgentHost::handle_timeout`] must be called.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.agent.poll_timeout()
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
            if !ops.is_empty() || !audit.is_empty() {
                self.store.apply(&ops, &audit)?;
                self.stats.commits += 1;
            }
            for o in batch {
                self.execute(o, &mut effects)?;
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
            Output::A2a(u) => effects.push(Effect::A2a(u)),
            Output::Phase1(p) => self
                .phase1
                .get_or_insert_with(crate::phase1_push::Phase1Pusher::new)
                .submit(p),
        }
        Ok(())
    }

    /// Serves one control request.
    pub fn control(
        &mut self,
        now: Timestamp,
        req: Request,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        let cmd = |h: &mut AgentHost, c: Command| h.handle(now, Input::Command(c));
        Ok(match req {
            Request::Status => (Response::ok(self.status()), Vec::new()),
            Request::Threads => {
                // The groups this agent coordinates first, each one row; then every
                // thread (a leg names its group).
                let mut v: Vec<ThreadSummary> = self
                    .agent
                    .groups()
                    .values()
                    .map(|g| self.group_row(g))
                    .collect();
                v.extend(self.agent.threads().values().map(thread_summary));
                (Response::ok(v), Vec::new())
            }
            Request::Thread { id } => {
                if let Some(d) = self.group_detail(&id) {
                    return Ok((Response::ok(d), Vec::new()));
                }
                match self.thread_detail(&id)? {
                    Some(d) => (Response::ok(d), Vec::new()),
                    None => (
                        Response::err(
                            self.group_elsewhere(&id)
                                .unwrap_or_else(|| format!("no thread `{id}`")),
                        ),
                        Vec::new(),
                    ),
                }
            }
            Request::Prompts => {
                let v: Vec<PromptEntry> = self
                    .prompts
                    .values()
                    .map(|p| PromptEntry {
                        prompt: p.clone(),
                        group: self.prompt_group(p),
                    })
                    .collect();
                (Response::ok(v), Vec::new())
            }
            Request::Notifications { all } => {
                let v: Vec<&NotificationEntry> = self
                    .notifications
                    .iter()
                    .filter(|n| all || !n.read)
                    .collect();
                (Response::ok(v), Vec::new())
            }
            Request::Suggestions => (Response::ok(self.agent.suggestions()), Vec::new()),
            Request::AcceptSuggestion { id } => {
                let list = self.agent.suggestions();
                match list.iter().find(|s| s.id() == id) {
                    Some(s) => {
                        let text = match s {
                            a2acp_core::agent::Suggestion::Promote { field, peer, .. } => {
                                format!("suggestion #{id} accepted: {field} is always shared with {peer}")
                            }
                        };
                        let e = cmd(self, s.accept())?;
                        (Response::ok(text), e)
                    }
                    None => {
                        let open: Vec<String> =
                            list.iter().map(|s| format!("#{}", s.id())).collect();
                        (
                            Response::err(format!(
                                "no open suggestion #{id} (open: {})",
                                if open.is_empty() {
                                    "none".into()
                                } else {
                                    open.join(", ")
                                }
                            )),
                            Vec::new(),
                        )
                    }
                }
            }
            Request::DismissSuggestion { id } => {
                match self.agent.suggestions().iter().find(|s| s.id() == id) {
                    Some(s) => (
                        Response::ok(format!("suggestion #{id} dismissed")),
                        cmd(self, s.dismiss())?,
                    ),
                    None => (
                        Response::err(format!(
                            "no open suggestion #{id} (see `a2acp suggestions`)"
                        )),
                        Vec::new(),
                    ),
                }
            }
            Request::ReadNotifications { number, all } => {
                (self.read_notifications(number, all), Vec::new())
            }
            Request::ReplyThread { id, context } => self.reply_thread(now, &id, context)?,
            Request::CancelThread { id } => self.cancel_thread(now, &id)?,
            r @ (Request::UpdateIntent { .. } | Request::ForkThread { .. }) => {
                self.drift(now, r)?
            }
            Request::TransferCoordinator { id, to } => self.transfer_coordinator(now, &id, &to)?,
            Request::SpaceCreate {
                name,
                participants,
                fields,
            } => self.space_create(now, name, participants, fields)?,
            Request::SpaceShow { id } => (self.space_show(id.as_deref()), Vec::new()),
            Request::SpaceSet {
                id,
                field,
                value,
                link,
                title,
            } => self.space_set(now, &id, &field, value, link, title)?,
            Request::SpaceHistory { id } => (self.space_history(&id), Vec::new()),
            Request::KeyShow { address } => match Address::parse(&address) {
                Ok(a) => (Response::ok(self.key_info(&a)), Vec::new()),
                Err(e) => (Response::err(format!("`{address}`: {e}")), Vec::new()),
            },
            Request::KeyAccept {
                address,
                safety_number,
            } => self.key_accept(now, &address, safety_number.as_deref())?,
            Request::Answer { prompt_id, args } => {
                let Some(p) = self.prompts.get(&prompt_id).cloned() else {
                    let open: Vec<String> = self.prompts.keys().map(|k| format!("#{k}")).collect();
                    return Ok((
                        Response::err(format!(
                            "no open prompt #{prompt_id} (open: {})",
                            if open.is_empty() {
                                "none".into()
                            } else {
                                open.join(", ")
                            }
                        )),
                        Vec::new(),
                    ));
                };
                match crate::prompt::parse_answer(&p, &args) {
                    Ok(c) => {
                        let e = cmd(self, c)?;
                        (Response::ok(format!("prompt #{prompt_id} answered")), e)
                    }
                    Err(m) => (Response::err(m), Vec::new()),
                }
            }
            Request::StartThread {
                to,
                category,
                summary,
                context,
                urgent,
                quorum,
                sequential,
            } if to.list().iter().any(|a| a2acp_core::a2a::client::is_url(a)) => {
                let one = to.list().len() == 1 && quorum.is_none() && !sequential;
                self.start_a2a(now, one, to, category, summary, context, urgent)?
            }
            Request::StartThread {
                to,
                category,
                summary,
                context,
                urgent,
                quorum,
                sequential,
            } => {
                let mut list = Vec::new();
                for a in to.list() {
                    match Address::parse(&a) {
                        Ok(x) if list.contains(&x) => {
                            return Ok((Response::err(format!("{x} is named twice")), Vec::new()))
                        }
                        Ok(x) => list.push(x),
                        Err(e) => return Ok((Response::err(format!("`{a}`: {e}")), Vec::new())),
                    }
                }
                if list.is_empty() {
                    return Ok((
                        Response::err(
                            "name the other agent (--to ADDR; repeat it for a group thread)",
                        ),
                        Vec::new(),
                    ));
                }
                if list.iter().any(|a| a == self.agent.address()) {
                    return Ok((
                        Response::err(if list.len() > 1 {
                            "list only the others: your agent coordinates the group thread"
                        } else {
                            "cannot start a thread with yourself"
                        }),
                        Vec::new(),
                    ));
                }
                if category.trim().is_empty() || summary.trim().is_empty() {
                    return Ok((
                        Response::err("--category and --summary must not be empty"),
                        Vec::new(),
                    ));
                }
                let intent = Intent {
                    category,
                    summary,
                    urgency: Some(if urgent { "urgent" } else { "normal" }.into()),
                    scope_change: None,
                };
                let context = context.unwrap_or_default();
                let confirmation = match (quorum, sequential) {
                    (Some(_), true) => {
                        return Ok((
                            Response::err(
                                "--quorum and --sequential do not go together: a sequential confirmation asks everyone in turn",
                            ),
                            Vec::new(),
                        ))
                    }
                    (Some(q), false) => GroupConfirmation::Quorum(q),
                    (None, true) => GroupConfirmation::Sequential,
                    (None, false) => GroupConfirmation::All,
                };
                if list.len() > 1 {
                    return self.start_group(now, list, intent, context, confirmation);
                }
                if confirmation != GroupConfirmation::All {
                    return Ok((
                        Response::err(
                            "--quorum and --sequential are for a group thread (two or more --to)",
                        ),
                        Vec::new(),
                    ));
                }
                let to = list.remove(0);
                let before: Vec<String> = self.agent.threads().keys().cloned().collect();
                let e = cmd(
                    self,
                    Command::StartThread {
                        to,
                        intent,
                        context,
                    },
                )?;
                let new = self
                    .agent
                    .threads()
                    .keys()
                    .find(|k| !before.contains(k))
                    .cloned();
                match new {
                    Some(id) => (Response::ok(serde_json::json!({ "thread_id": id })), e),
                    None => {
                        let why = self
                            .notifications
                            .back()
                            .map(|n| n.notification.text.clone())
                            .unwrap_or_else(|| "the agent refused it".into());
                        (Response::err(format!("no thread started: {why}")), e)
                    }
                }
            }
            Request::Permissions => (Response::ok(self.permissions()), Vec::new()),
            Request::SetPermission {
                field,
                tier,
                for_peer,
            } => {
                let tier: Tier = match parse_tier(&tier) {
                    Ok(t) => t,
                    Err(m) => return Ok((Response::err(m), Vec::new())),
                };
                if tier == Tier::AskFirst && for_peer.is_some() {
                    return Ok((Response::err("a relationship override promotes to always_share or restricts to never_share; ask_first is the base tier"), Vec::new()));
                }
                let for_peer =
                    match for_peer.map(|a| Address::parse(&a).map_err(|e| format!("`{a}`: {e}"))) {
                        None => None,
                        Some(Ok(a)) => Some(a),
                        Some(Err(m)) => return Ok((Response::err(m), Vec::new())),
                    };
                if field.trim().is_empty() {
                    return Ok((Response::err("the field must not be empty"), Vec::new()));
                }
                if let Err(m) = self.known_field(&field) {
                    return Ok((Response::err(m), Vec::new()));
                }
                let e = cmd(
                    self,
                    Command::SetPermission {
                        field,
                        tier,
                        for_peer,
                    },
                )?;
                (Response::ok(self.permissions()), e)
            }
            Request::Block { address } => match Address::parse(&address) {
                Ok(a) => {
                    let e = cmd(self, Command::Block(a.clone()))?;
                    (
                        Response::ok(format!(
                            "{a} is blocked: its packets are dropped and its threads declined"
                        )),
                        e,
                    )
                }
                Err(e) => (Response::err(format!("`{address}`: {e}")), Vec::new()),
            },
            Request::Unblock { address } => match Address::parse(&address) {
                Ok(a) => {
                    let e = cmd(self, Command::Unblock(a.clone()))?;
                    (Response::ok(format!("{a} is no longer blocked")), e)
                }
                Err(e) => (Response::err(format!("`{address}`: {e}")), Vec::new()),
            },
            Request::Memory { address } => {
                let filter =
                    match address.map(|a| Address::parse(&a).map_err(|e| format!("`{a}`: {e}"))) {
                        None => None,
                        Some(Ok(a)) => Some(a),
                        Some(Err(m)) => return Ok((Response::err(m), Vec::new())),
                    };
                (Response::ok(self.memory(filter.as_ref())), Vec::new())
            }
            r @ (Request::MemoryEdit { .. }
            | Request::MemoryForget { .. }
            | Request::MemoryExport { .. }
            | Request::MemoryImport { .. }) => return self.memory_request(now, r),
        })
    }

    /// Whether `field` is a name this agent knows (a category of its tiers or of the
    /// onboarding defaults, a field of §7.1's categories, a field of its profile); if
    /// not, the error names the closest known one.
    fn known_field(&self, field: &str) -> Result<(), String> {
        let t = self.agent.permissions();
        let d = a2acp_core::agent::PermissionTiers::onboarding_defaults();
        let mut known: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for tiers in [t, &d] {
            for s in [&tiers.always_share, &tiers.ask_first, &tiers.never_share] {
                known.extend(s.iter().cloned());
            }
        }
        known.extend(KNOWN_FIELDS.iter().map(|s| s.to_string()));
        known.extend(self.agent.config().profile.keys().cloned());
        for o in self.agent.overrides().values() {
            known.extend(o.promote_to_always_share.iter().cloned());
            known.extend(o.restrict_to_never_share.iter().cloned());
        }
        if known.contains(field) {
            return Ok(());
        }
        let closest = known
            .iter()
            .map(|k| (edit_distance(field, k), k))
            .min()
            .filter(|(d, _)| *d <= (field.chars().count() / 3).max(1));
        Err(match closest {
            Some((_, k)) => format!("unknown field or category `{field}`: did you mean `{k}`? (see `a2acp permissions show`)"),
            None => format!("unknown field or category `{field}` (see `a2acp permissions show` for the categories)"),
        })
    }

    fn read_notifications(&mut self, number: Option<u64>, all: bool) -> Response {
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

    fn key_info(&self, peer: &Address) -> KeyInfo {
        let me = self.agent.address();
        let mine = self.agent.public_key().to_bytes();
        let number = |k: &[u8; 32]| crate::safety::safety_number((&mine, me), (k, peer));
        let pinned = self.agent.pinned_key(peer);
        let changed = self.agent.changed_key(peer);
        KeyInfo {
            address: me.to_string(),
            key: b64_encode(&mine),
            peer: peer.to_string(),
            pinned_key: pinned.map(|k| b64_encode(&k)),
            safety_number: pinned.as_ref().map(number),
            changed_key: changed.map(|k| b64_encode(&k)),
            changed_safety_number: changed.as_ref().map(number),
        }
    }

    fn key_accept(
        &mut self,
        now: Timestamp,
        address: &str,
        typed: Option<&str>,
    ) -> Result<(Response, Vec<Effect>), HostError> {
        let peer = match Address::parse(address) {
            Ok(a) => a,
            Err(e) => return Ok((Response::err(format!("`{address}`: {e}")), Vec::new())),
        };
        let info = self.key_info(&peer);
        let Some(expected) = info.changed_safety_number else {
            return Ok((
                Response::err(format!(
                    "no changed key of {peer} waits for acceptance (its pinned key: {})",
                    info.pinned_key.as_deref().unwrap_or("none yet")
                )),
                Vec::new(),
            ));
        };
        if let Some(t) = typed {
            match crate::safety::normalise(t) {
                None => {
                    return Ok((
                        Response::err(
                            "--safety-number takes the 60 digits (spaces allowed); nothing accepted",
                        ),
                        Vec::new(),
                    ))
                }
                Some(d) if d != expected => {
                    return Ok((
                        Response::err(format!(
                            "the safety number does not match the one with {peer}'s new key; nothing accepted. Do not accept the key unless you are sure it is theirs (`a2acp keys show {peer}`)"
                        )),
                        Vec::new(),
                    ))
                }
                Some(_) => {}
            }
        }
        let halted: Vec<String> = self
            .agent
            .threads()
            .values()
            .filter(|t| t.peer == peer && t.halted && !t.state.is_terminal())
            .map(|t| t.id.clone())
            .collect();
        let e = self.handle(
            now,
            Input::Command(Command::AcceptKeyChange {
                address: peer.clone(),
            }),
        )?;
        if self.agent.pinned_key(&peer).map(|k| b64_encode(&k)) != info.changed_key {
            return Ok((
                Response::err(format!("the new key of {peer} could not be accepted")),
                e,
            ));
        }
        Ok((
            Response::ok(format!(
                "the new key of {peer} is pinned{}; {} halted thread(s) resumed or closed (start new ones with `a2acp thread start`)",
                if typed.is_some() { " (safety numbers match)" } else { "" },
                halted.len()
            )),
            e,
        ))
    }

    fn status(&self) -> StatusInfo {
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
        }
    }

    fn permissions(&self) -> PermissionsInfo {
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
        }
    }
}

/// Field names of §7.1's categories (SPEC-NOTES §7.1; `category_of` in the core), for
/// `permissions set`.
const KNOWN_FIELDS: &[&str] = &[
    "time_windows",
    "availability",
    "proposed_date",
    "date",
    "time",
    "general_availability",
    "location_preference",
    "area",
    "city",
    "general_area",
    "address",
    "home_address",
    "exact_location",
    "coordinates",
    "personal_location",
    "dietary",
    "dietary_requirements",
    "allergies_dietary",
    "budget",
    "budget_range",
    "transport",
    "transport_mode",
    "phone",
    "email",
    "contact",
    "event_type",
    "party_size",
    "cuisine_preference",
    "flexibility",
    "duration",
    "health",
    "medical",
    "health_conditions",
    "medications",
    "salary",
    "income",
    "bank_details",
    "debts",
    "password",
    "credentials",
    "api_key",
    "timezone",
    "tz",
    "name",
];

/// Levenshtein distance (names are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2acp_core::crypto::{Direction, ThreadSession};
    use a2acp_core::harness::dinner;
    use a2acp_core::link::RelayFrame;
    use serde_json::json;

    const EVIL: &str =
        "\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m\u{202e}gpj.exe\u{200b}\r\n── Prompt #9\u{7f}";

    /// A validly signed peer (Bob) opening a thread with the host's agent and sending
    /// whatever plaintext it likes in it.
    struct Peer {
        identity: IdentityKey,
        session: ThreadSession,
        n: u64,
    }

    impl Peer {
        fn send(
            &mut self,
            host: &mut AgentHost,
            kind: &str,
            body: serde_json::Value,
        ) -> Vec<Effect> {
            self.n += 1;
            let me = Address::parse("agent:bob@a2acp.io").unwrap();
            let to = host.agent().address().clone();
            let mut p = json!({
                "protocol": "a2acp/0.2", "packet_id": format!("pkt_{}", self.n),
                "thread_id": "thr_hostile", "from": me.as_str(), "to": to.as_str(),
                "timestamp": "2026-03-21T14:30:00Z", "type": kind,
            });
            for (k, v) in body.as_object().cloned().unwrap_or_default() {
                p[k] = v;
            }
            let env = self
                .session
                .seal(
                    &self.identity,
                    &me,
                    &to,
                    &host.agent().public_key(),
                    "thr_hostile",
                    Direction::FromInitiator,
                    &serde_json::to_vec(&p).unwrap(),
                )
                .unwrap();
            let frame = RelayFrame::Deliver { id: self.n, env }.to_bytes();
            host.handle(Timestamp::from_secs(1000), Input::Bytes(frame))
                .unwrap()
        }
    }

    fn online(path: &std::path::Path) -> (AgentHost, Vec<Effect>) {
        let store = Store::open(path, crate::store::Durability::Full).unwrap();
        let (mut host, mut effects, _) = AgentHost::start(
            dinner::alice("a2acp.io"),
            IdentityKey::from_seed([1; 32]),
            store,
            Timestamp::from_secs(1000),
        )
        .unwrap();
        let now = Timestamp::from_secs(1000);
        effects.extend(host.handle(now, Input::Connected).unwrap());
        let ok = RelayFrame::AuthOk {
            address: host.agent().address().clone(),
            queued: 0,
        };
        effects.extend(host.handle(now, Input::Bytes(ok.to_bytes())).unwrap());
        (host, effects)
    }

    fn shown(effects: &[Effect]) -> Vec<&Prompt> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Prompt(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    fn clean(s: &str) -> bool {
        a2acp_core::display::lines(s, usize::MAX) == s
    }

    #[test]
    fn a_hostile_peers_prompt_keeps_its_number_and_shows_nothing_raw() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.db");
        let (mut host, _) = online(&path);
        let mut peer = Peer {
            identity: IdentityKey::from_seed([2; 32]),
            session: ThreadSession::new([3; 32]),
            n: 0,
        };
        let need = |f: &str| json!({"field": f, "reason": EVIL, "priority": "required"});
        let e = peer.send(
            &mut host,
            "context",
            json!({"intent": {"category": EVIL, "summary": EVIL}, "needs": [need("transport_mode")]}),
        );
        let p = shown(&e)[0].clone();
        let n = p.id;
        // What the terminal, the transcript and the control socket show is clean.
        for text in [
            crate::prompt::render(&p),
            crate::prompt::summary(&p),
            serde_json::to_string(&p).unwrap(),
        ] {
            assert!(clean(&text), "{text:?}");
        }
        for e in &e {
            if let Some((_, line)) = crate::transcript::describe(host.agent(), e) {
                assert!(clean(&line) && !line.contains('\n'), "{line:?}");
            }
        }
        // The same need again: nothing to show; a new one: the same number, in place.
        for _ in 0..3 {
            let e = peer.send(
                &mut host,
                "context_request",
                json!({"needs": [need("transport_mode")]}),
            );
            assert!(shown(&e).is_empty(), "{e:?}");
            assert!(!e.iter().any(|x| matches!(x, Effect::ClosePrompt(_))));
        }
        let e = peer.send(
            &mut host,
            "context_request",
            json!({"needs": [need("name")]}),
        );
        assert_eq!(shown(&e).iter().map(|p| p.id).collect::<Vec<_>>(), [n]);
        // The control socket lists it under the same number.
        let (r, _) = host
            .control(Timestamp::from_secs(1000), Request::Prompts)
            .unwrap();
        let ids: Vec<u64> = r
            .data
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, [n]);
        // A restart shows it again under its number, and `answer N` answers it.
        drop(host);
        let (mut host, effects) = online(&path);
        assert_eq!(
            shown(&effects).iter().map(|p| p.id).collect::<Vec<_>>(),
            [n]
        );
        let (r, _) = host
            .control(
                Timestamp::from_secs(1001),
                Request::Answer {
                    prompt_id: n,
                    args: vec!["transport_mode".into(), "name=no".into()],
                },
            )
            .unwrap();
        assert!(r.ok, "{r:?}");
        assert!(host.prompts().is_empty());
    }
}
