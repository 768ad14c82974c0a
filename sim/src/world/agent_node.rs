//! The agent node: feeding the agent its inputs, executing its outputs in order (a crash
//! may cut a step), answering prompts with the user model and running scripted commands.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use a2acp_core::agent::{Agent, Command, Input, Output, Prompt, ResolutionAnswer};
use a2acp_core::persist::PersistOp;
use a2acp_core::relay::ConnId;
use a2acp_core::space::{own_prefix, SpaceParticipant};
use a2acp_core::{Address, Timestamp};

use super::events::Ev;
use super::{store, Records, Sim};
use crate::model::{ActionLedger, SuggestionPolicy, UserAnswer};
use crate::scenario::ScriptAction;
use crate::transcript::{describe_command, describe_prompt, Line, Tag};

/// One agent of the world and what the simulator keeps around it.
pub(super) struct Node {
    pub(super) name: String,
    pub(super) address: Address,
    pub(super) agent: Option<Agent>,
    pub(super) inc: u32,
    pub(super) identity: [u8; 32],
    /// The key of a rotation under way, as the runtime's `identity.next.key`: written
    /// before the core gets it, the identity once the core reports `OwnKeyRotated`,
    /// gone at `OwnRotationRefused`, and handed to a restarted agent again.
    pub(super) next_identity: Option<[u8; 32]>,
    pub(super) identity_gen: u32,
    pub(super) store: Records,
    pub(super) conn: Option<ConnId>,
    pub(super) suspended: bool,
    pub(super) deferred: Vec<Ev>,
    pub(super) timer: Option<(Timestamp, u64)>,
    pub(super) reconnect_pending: bool,
    pub(super) attempt: u32,
    pub(super) crash_armed: Option<Duration>,
    pub(super) prompts: BTreeMap<u64, Prompt>,
    pub(super) scheduled: BTreeSet<u64>,
    pub(super) decisions: BTreeMap<(u64, bool), UserAnswer>,
    pub(super) consents_seen: usize,
    pub(super) resolutions_seen: usize,
    pub(super) llm_seen: usize,
    pub(super) ledger: ActionLedger,
    pub(super) prompts_shown: u64,
    pub(super) consent_prompts: BTreeMap<String, BTreeSet<u64>>,
    pub(super) resolution_prompts: BTreeMap<String, BTreeSet<u64>>,
    pub(super) delivering: Option<(String, bool)>,
    /// The last backup's records (`device.rs`).
    pub(super) backup: Option<Records>,
    /// The records of the device set aside by a device swap (`device.rs`).
    pub(super) other_device: Option<Records>,
    /// The device was lost (`lose_device`): nothing restarts it until a recovery.
    pub(super) lost: bool,
}

impl Node {
    /// A node running `agent`, not yet connected.
    pub(super) fn new(name: String, address: Address, agent: Agent, identity: [u8; 32]) -> Self {
        Node {
            name,
            address,
            agent: Some(agent),
            inc: 0,
            identity,
            next_identity: None,
            identity_gen: 0,
            store: Records::new(),
            lost: false,
            conn: None,
            suspended: false,
            deferred: Vec::new(),
            timer: None,
            reconnect_pending: false,
            attempt: 0,
            crash_armed: None,
            prompts: BTreeMap::new(),
            scheduled: BTreeSet::new(),
            decisions: BTreeMap::new(),
            consents_seen: 0,
            resolutions_seen: 0,
            llm_seen: 0,
            ledger: ActionLedger::default(),
            prompts_shown: 0,
            consent_prompts: BTreeMap::new(),
            resolution_prompts: BTreeMap::new(),
            delivering: None,
            backup: None,
            other_device: None,
        }
    }
}

impl Sim {
    pub(super) fn feed(&mut self, node: usize, input: Input) {
        let now = self.agent_now(node);
        let t0 = self.tick();
        if let Some(a) = self.nodes[node].agent.as_mut() {
            a.handle(now, input);
        }
        self.tock(t0);
        self.drain_agent(node);
    }

    /// Tells agent `node` that its timer fired (`Agent::handle_timeout`), then drains it.
    pub(super) fn feed_timeout(&mut self, node: usize) {
        let now = self.agent_now(node);
        let t0 = self.tick();
        if let Some(a) = self.nodes[node].agent.as_mut() {
            a.handle_timeout(now);
        }
        self.tock(t0);
        self.drain_agent(node);
    }

    pub(super) fn command(&mut self, node: usize, c: Command) {
        let name = self.nodes[node].name.clone();
        self.line(
            &name,
            '|',
            format!("user: {}", describe_command(&c)),
            Tag::User,
        );
        self.feed(node, Input::Command(c));
    }

    pub(super) fn drain_agent(&mut self, i: usize) {
        let mut outs = Vec::with_capacity(16);
        let t0 = self.tick();
        match self.nodes[i].agent.as_mut() {
            Some(a) => {
                while let Some(o) = a.poll_output() {
                    outs.push(o);
                }
            }
            None => return,
        }
        self.tock(t0);
        // The receipts this step stored, before the packets they cover are checked.
        if let Some(a) = self.nodes[i].agent.as_ref() {
            let key = a.public_key().to_bytes();
            let address = a.config().address.clone();
            let at = self.elapsed();
            for o in &outs {
                if let Output::Persist(PersistOp::Put { key: k, value }) = o {
                    if k.starts_with(a2acp_core::receipt::RECEIPT_PREFIX) {
                        let name = &self.nodes[i].name;
                        self.checker.receipt_stored(at, i, name, value, &key);
                    }
                    if k.starts_with(a2acp_core::receipt::agreement::AGREEMENT_PREFIX) {
                        let name = &self.nodes[i].name;
                        self.checker.agreement_stored(at, name, value, &address);
                    }
                }
            }
        }
        // Check the threads this step changed, on the live state.
        let changed: BTreeSet<String> = outs
            .iter()
            .filter_map(|o| match o {
                Output::Persist(PersistOp::Put { key, .. }) => {
                    key.strip_prefix("thread/").map(String::from)
                }
                _ => None,
            })
            .collect();
        if !changed.is_empty() {
            let at = self.elapsed();
            let name = self.nodes[i].name.clone();
            if let Some(a) = self.nodes[i].agent.as_ref() {
                for id in &changed {
                    if let Some(t) = a.thread(id) {
                        self.checker.check_thread(at, i, &name, a, t);
                    }
                }
            }
        }
        let cut = if self.nodes[i].crash_armed.is_some() && !outs.is_empty() {
            // A thread's new history records come right before its thread record and are
            // drawn with it: the crash falls before the same records as when the history
            // was inside the thread record (so seeds keep their faults), and a cut just
            // before a thread record leaves its history records written, uncommitted.
            // The transcript counts outputs the same way.
            let records: Vec<usize> = (0..outs.len())
                .filter(|&k| !is_history_put(&outs[k]))
                .collect();
            let k = self.faults.between(0, records.len() as u64) as usize;
            Some((
                records.get(k).copied().unwrap_or(outs.len()),
                (k, records.len()),
            ))
        } else {
            None
        };
        let total = outs.len();
        let first = self.transcript.len();
        let mut cats: Vec<u8> = Vec::new();
        for (k, o) in outs.into_iter().enumerate() {
            if let Some((_, point)) = cut.filter(|c| c.0 == k) {
                self.sort_lines(first, &cats);
                let r = self.nodes[i].crash_armed.take().unwrap_or_default();
                self.crash_agent(i, r, Some(point));
                return;
            }
            let before = self.transcript.len();
            let cat = self.exec_agent_output(i, o);
            cats.extend(std::iter::repeat_n(cat, self.transcript.len() - before));
        }
        self.sort_lines(first, &cats);
        if let Some((_, point)) = cut.filter(|c| c.0 == total) {
            let r = self.nodes[i].crash_armed.take().unwrap_or_default();
            self.crash_agent(i, r, Some(point));
            return;
        }
        if self.nodes[i].agent.as_ref().is_some_and(Agent::is_online) {
            self.nodes[i].attempt = 0;
        }
        self.rearm_agent(i);
    }

    /// Lines of one step are shown as they happened logically: what was received, then
    /// the agent's own record (sends, state changes), then what the user sees.
    pub(super) fn sort_lines(&mut self, first: usize, cats: &[u8]) {
        if !self.record || first >= self.transcript.len() {
            return;
        }
        let lines: Vec<Line> = self.transcript.drain(first..).collect();
        let mut tagged: Vec<(u8, Line)> = cats.iter().copied().zip(lines).collect();
        tagged.sort_by_key(|(c, _)| *c);
        self.transcript.extend(tagged.into_iter().map(|(_, l)| l));
    }

    pub(super) fn exec_agent_output(&mut self, i: usize, o: Output) -> u8 {
        match o {
            Output::Persist(op) => {
                if let PersistOp::Put { key, value } = &op {
                    if key.starts_with("outbox/") {
                        self.checker.outbox_put(i, value);
                    }
                }
                store(&mut self.nodes[i].store, op);
                2
            }
            Output::Send(bytes) => {
                if bytes.starts_with(b"{\"t\":\"ack\"") {
                    // The step handling a delivery acknowledged it: every persist of the
                    // step came before (persist-first), even if a crash cuts its audit.
                    if let Some((pid, _)) = self.nodes[i].delivering.as_ref() {
                        let pid = pid.clone();
                        self.checker.acked(i, &pid);
                    }
                }
                if let Some(conn) = self.nodes[i].conn {
                    self.transmit(conn, true, bytes);
                }
                2
            }
            other => self.exec_agent_other(i, other),
        }
    }

    /// The outputs other than persisting and sending (the hot ones, executed without the
    /// node's name).
    fn exec_agent_other(&mut self, i: usize, o: Output) -> u8 {
        let name = self.nodes[i].name.clone();
        match o {
            Output::Persist(_) | Output::Send(_) => 2,
            Output::Prompt(p) => {
                self.stats.prompts += 1;
                self.nodes[i].prompts_shown += 1;
                let text = describe_prompt(&p);
                self.line(&name, '|', text, Tag::User);
                let id = p.id;
                let by_thread = if matches!(p.kind, a2acp_core::agent::PromptKind::Consent { .. }) {
                    &mut self.nodes[i].consent_prompts
                } else {
                    &mut self.nodes[i].resolution_prompts
                };
                by_thread.entry(p.thread_id.clone()).or_default().insert(id);
                let first_time = self.nodes[i].scheduled.insert(id);
                if !first_time {
                    approve_new_fields(&mut self.nodes[i].decisions, &p);
                }
                self.nodes[i].prompts.insert(id, p);
                if first_time {
                    self.schedule_answer(i, id);
                }
                2
            }
            Output::ClosePrompt(id) => {
                if self.nodes[i].prompts.remove(&id).is_some() {
                    self.line(&name, '|', format!("prompt #{id} withdrawn"), Tag::User);
                }
                2
            }
            Output::CallLlm(r) => {
                self.stats.llm_calls += 1;
                self.line(
                    &name,
                    '|',
                    format!("LLM request #{} (attempt {})", r.id, r.attempt),
                    Tag::Note,
                );
                let n = self.nodes[i].llm_seen;
                self.nodes[i].llm_seen += 1;
                let model = self.spec.agents[i].llm.clone();
                let me = self.nodes[i].address.clone();
                let result = {
                    let t = self.nodes[i]
                        .agent
                        .as_ref()
                        .and_then(|a| a.thread(&r.thread_id));
                    model.answer(n, &r, &me, t, &mut self.llm)
                };
                let lat = self.llm.between(model.latency.0, model.latency.1);
                let inc = self.nodes[i].inc;
                let at = self.now.add(Duration::from_millis(lat));
                self.push(
                    at,
                    Ev::LlmResult {
                        node: i,
                        inc,
                        id: r.id,
                        result,
                    },
                );
                2
            }
            Output::ExecuteAction(a) => {
                self.stats.actions += 1;
                let verb = match (a.undo, a.check) {
                    (true, _) => "undo",
                    (false, true) => "check",
                    (false, false) => "execute",
                };
                self.line(
                    &name,
                    '|',
                    format!("{verb} action #{} {}", a.id, a.action.action),
                    Tag::Note,
                );
                let model = self.spec.agents[i].actions.clone();
                let result = model.outcome(&mut self.nodes[i].ledger, &a, &mut self.acts);
                let lat = self.acts.between(model.latency.0, model.latency.1);
                let inc = self.nodes[i].inc;
                let at = self.now.add(Duration::from_millis(lat));
                self.push(
                    at,
                    Ev::ActionResult {
                        node: i,
                        inc,
                        id: a.id,
                        result,
                    },
                );
                2
            }
            Output::Notify(n) => {
                let kind = serde_json::to_value(n.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default();
                self.line(
                    &name,
                    '|',
                    format!("notify ({kind}): {}", n.text),
                    Tag::User,
                );
                if let Some(s) = n
                    .suggestion
                    .filter(|_| self.spec.agents[i].user.suggestions == SuggestionPolicy::Accept)
                {
                    let (lo, hi) = self.spec.agents[i].user.delay;
                    let d = self.users.between(lo, hi);
                    let at = self.now.add(Duration::from_millis(d));
                    self.push(
                        at,
                        Ev::AcceptSuggestion {
                            node: i,
                            command: s.accept(),
                        },
                    );
                }
                2
            }
            Output::Audit(a) => self.on_audit(i, &a),
            Output::CloseConnection => {
                if self.close_agent_conn(i) {
                    self.schedule_reconnect(i);
                }
                2
            }
            // The simulated world has no bridged peers (A2A clients, Phase-1 senders).
            Output::Bridged(_) => 2,
        }
    }

    pub(super) fn rearm_agent(&mut self, i: usize) {
        // Asking the agent for its next deadline is the core's work (a scan of its
        // threads): timed as such.
        let t0 = self.tick();
        let deadline = self.nodes[i].agent.as_ref().map(Agent::poll_timeout);
        self.tock(t0);
        let Some(deadline) = deadline else {
            return;
        };
        let want = deadline.map(|t| {
            let skew = self.spec.agents[i].skew_ms;
            let sim = t.as_millis() as i64 - skew;
            Timestamp::from_millis(sim.max(0) as u64).max(self.now)
        });
        let cur = self.nodes[i].timer;
        if cur.map(|k| k.0) == want {
            return;
        }
        if let Some(k) = cur {
            self.queue.remove(&k);
        }
        self.nodes[i].timer = want.map(|t| {
            let inc = self.nodes[i].inc;
            self.push(t, Ev::AgentTimer { node: i, inc })
        });
    }

    pub(super) fn schedule_answer(&mut self, i: usize, prompt_id: u64) {
        let Some(p) = self.nodes[i].prompts.get(&prompt_id).cloned() else {
            return;
        };
        let consent = matches!(p.kind, a2acp_core::agent::PromptKind::Consent { .. });
        let key = (prompt_id, consent);
        let answer = match self.nodes[i].decisions.get(&key) {
            Some(a) => a.clone(),
            None => {
                let n = if consent {
                    self.nodes[i].consents_seen += 1;
                    self.nodes[i].consents_seen - 1
                } else {
                    self.nodes[i].resolutions_seen += 1;
                    self.nodes[i].resolutions_seen - 1
                };
                let a = self.spec.agents[i].user.decide(&p, n, &mut self.users);
                self.nodes[i].decisions.insert(key, a.clone());
                a
            }
        };
        if answer == UserAnswer::Never {
            return;
        }
        let (lo, hi) = self.spec.agents[i].user.delay;
        let d = self.users.between(lo, hi);
        let inc = self.nodes[i].inc;
        let at = self.now.add(Duration::from_millis(d));
        self.push(
            at,
            Ev::UserAnswer {
                node: i,
                inc,
                prompt: prompt_id,
            },
        );
    }

    pub(super) fn answer_prompt(&mut self, i: usize, prompt_id: u64) {
        let Some(p) = self.nodes[i].prompts.get(&prompt_id).cloned() else {
            return;
        };
        let consent = matches!(p.kind, a2acp_core::agent::PromptKind::Consent { .. });
        let Some(answer) = self.nodes[i].decisions.get(&(prompt_id, consent)).cloned() else {
            return;
        };
        self.nodes[i].prompts.remove(&prompt_id);
        match answer {
            UserAnswer::Never => {}
            UserAnswer::Consent(a) => self.command(
                i,
                Command::AnswerConsent {
                    prompt_id,
                    answer: a,
                },
            ),
            UserAnswer::Resolution(a) => {
                if let ResolutionAnswer::MakeExcuse {
                    actual_reason: Some(r),
                } = &a
                {
                    self.checker.add_secret(i, r);
                }
                self.command(
                    i,
                    Command::AnswerResolution {
                        prompt_id,
                        answer: a,
                    },
                )
            }
        }
    }

    pub(super) fn start_thread(&mut self, idx: usize) {
        let t = self.spec.threads[idx].clone();
        let to = self.nodes[t.to].address.clone();
        let before: BTreeSet<String> = self.nodes[t.from]
            .agent
            .as_ref()
            .map(|a| a.threads().keys().cloned().collect())
            .unwrap_or_default();
        self.command(
            t.from,
            Command::StartThread {
                to,
                intent: t.intent,
                context: t.context,
            },
        );
        if let Some(a) = self.nodes[t.from].agent.as_ref() {
            if let Some(id) = a.threads().keys().find(|k| !before.contains(*k)) {
                self.threads.insert(idx, id.clone());
            }
        }
    }

    /// Starts group `idx` of the scenario: its coordinator's user asks for it.
    pub(super) fn start_group(&mut self, idx: usize) {
        let g = self.spec.groups[idx].clone();
        let participants = g
            .participants
            .iter()
            .map(|&p| self.nodes[p].address.clone())
            .collect();
        let before: BTreeSet<String> = self.nodes[g.coordinator]
            .agent
            .as_ref()
            .map(|a| a.groups().keys().cloned().collect())
            .unwrap_or_default();
        self.command(
            g.coordinator,
            Command::StartGroupThread {
                participants,
                intent: g.intent,
                context: g.context,
                confirmation: g.confirmation,
            },
        );
        if let Some(a) = self.nodes[g.coordinator].agent.as_ref() {
            if let Some(id) = a.groups().keys().find(|k| !before.contains(*k)) {
                self.groups.insert(idx, id.clone());
            }
        }
    }

    /// Creates space `idx` of the scenario: its creator's user asks for it.
    fn create_space(&mut self, creator: usize, idx: usize) {
        let sp = self.spec.spaces[idx].clone();
        let participants = sp
            .participants
            .iter()
            .map(|&(p, permission)| SpaceParticipant {
                address: self.nodes[p].address.clone(),
                permission,
            })
            .collect();
        let before: BTreeSet<String> = self.nodes[creator]
            .agent
            .as_ref()
            .map(|a| a.spaces().keys().cloned().collect())
            .unwrap_or_default();
        self.command(
            creator,
            Command::CreateSpace {
                name: sp.name,
                participants,
                fields: sp.fields,
            },
        );
        if let Some(a) = self.nodes[creator].agent.as_ref() {
            if let Some(id) = a.spaces().keys().find(|k| !before.contains(*k)) {
                self.spaces.insert(idx, id.clone());
            }
        }
    }

    pub(super) fn scripted_command(&mut self, i: usize) {
        let c = self.spec.commands[i].clone();
        let tid = |s: &Self, t: usize| s.threads.get(&t).cloned();
        let cmd = match c.action {
            ScriptAction::UpdateContext { thread, context } => {
                let Some(id) = tid(self, thread) else { return };
                self.checker.user_resumed(c.agent, &id);
                Command::UpdateContext {
                    thread_id: id,
                    context,
                }
            }
            ScriptAction::UpdateIntent {
                thread,
                intent,
                reason,
                needs,
            } => {
                let Some(id) = tid(self, thread) else { return };
                Command::UpdateIntent {
                    thread_id: id,
                    needs: needs
                        .into_iter()
                        .map(|field| a2acp_core::packet::Need {
                            reason: format!("Needed for “{}”", intent.summary),
                            field,
                            priority: a2acp_core::packet::Priority::Required,
                        })
                        .collect(),
                    intent,
                    reason,
                }
            }
            ScriptAction::Fork { thread, intents } => {
                let Some(id) = tid(self, thread) else { return };
                Command::ForkThread {
                    thread_id: id,
                    intents,
                }
            }
            ScriptAction::Cancel { thread } => {
                let Some(id) = tid(self, thread) else { return };
                Command::CancelThread { thread_id: id }
            }
            ScriptAction::Retract { thread } => {
                let Some(id) = tid(self, thread) else { return };
                Command::Retract {
                    thread_id: id,
                    fields: Vec::new(),
                }
            }
            ScriptAction::RotateKey => {
                // As `a2acp keys rotate`: the new key is stored beside the old one first,
                // and a rotation under way is given its own key again.
                let seed = match self.nodes[c.agent].next_identity {
                    Some(seed) => seed,
                    None => {
                        let name = self.nodes[c.agent].name.clone();
                        self.nodes[c.agent].identity_gen += 1;
                        let seed = crate::util::derive_seed(
                            self.seed,
                            &format!("identity/{name}/{}", self.nodes[c.agent].identity_gen),
                        );
                        self.nodes[c.agent].next_identity = Some(seed);
                        self.keys.rotated(c.agent, self.now);
                        seed
                    }
                };
                Command::RotateKey {
                    new: Box::new(a2acp_core::crypto::IdentityKey::from_seed(seed)),
                }
            }
            ScriptAction::Backup => return self.backup(c.agent),
            ScriptAction::RecoveryKey => Command::BindRecovery {
                recovery_key: self.recovery_key(c.agent).public().to_bytes(),
            },
            ScriptAction::LoseDevice => return self.lose_device(c.agent),
            ScriptAction::Recover => return self.recover(c.agent),
            ScriptAction::NewDevice => return self.new_device(c.agent),
            ScriptAction::OldDeviceReturns => return self.device_returns(c.agent, true),
            ScriptAction::OtherDeviceReturns => return self.device_returns(c.agent, false),
            ScriptAction::AcceptKeyChange { peer } => Command::AcceptKeyChange {
                address: self.nodes[peer].address.clone(),
            },
            ScriptAction::Block { peer } => Command::Block(self.nodes[peer].address.clone()),
            ScriptAction::TransferCoordinator { group, to } => {
                let Some(id) = self.groups.get(&group).cloned() else {
                    return;
                };
                Command::TransferCoordinator {
                    group_id: id,
                    to: self.nodes[to].address.clone(),
                }
            }
            ScriptAction::CreateSpace { space } => {
                self.create_space(c.agent, space);
                return;
            }
            ScriptAction::SetSpaceField {
                space,
                field,
                value,
            } => {
                // A space not created (yet) is written under a name no agent holds: the
                // writer's agent refuses it ("no space"), as it would a mistyped id.
                let id = self
                    .spaces
                    .get(&space)
                    .cloned()
                    .unwrap_or_else(|| format!("spc_unmade{space}"));
                let field = match field.strip_prefix("~/") {
                    Some(rest) => format!("{}{rest}", own_prefix(&self.nodes[c.agent].address)),
                    None => field,
                };
                Command::SetSpaceField {
                    space_id: id,
                    field,
                    value,
                }
            }
        };
        self.command(c.agent, cmd);
    }
}

/// A record drawn with the record after it when a crash point is chosen: a put of one
/// entry of a thread's history (`history/<thread>/<n>`), or a peer's relationship memory
/// (`memory/<address>`, written just before the thread records of the step that completed
/// a thread). So the crash falls before the same records as before either existed, and
/// seeds keep their faults.
fn is_history_put(o: &Output) -> bool {
    match o {
        Output::Persist(PersistOp::Put { key, .. }) => {
            key.starts_with("history/") || key.starts_with("memory/")
        }
        Output::Persist(PersistOp::Delete { key }) => key.starts_with("memory/"),
        _ => false,
    }
}

/// A consent prompt shown again with more fields (updated in place while its thread
/// waits): a user who decided to share everything shares the new fields too; any other
/// decision leaves them out (not shared), as before.
fn approve_new_fields(
    decisions: &mut std::collections::BTreeMap<(u64, bool), crate::model::UserAnswer>,
    p: &a2acp_core::agent::Prompt,
) {
    use a2acp_core::agent::{ConsentAnswer, FieldChoice, PromptKind};
    let PromptKind::Consent { fields } = &p.kind else {
        return;
    };
    if let Some(crate::model::UserAnswer::Consent(ConsentAnswer::ShareSelected(m))) =
        decisions.get_mut(&(p.id, true))
    {
        if !m.is_empty() && m.values().all(|c| *c == FieldChoice::Share) {
            for f in fields {
                m.entry(f.field.clone()).or_insert(FieldChoice::Share);
            }
        }
    }
}
