//! Reading a scenario file: the TOML is parsed into raw serde structures (unknown keys
//! refused, so a typo is an error naming the key) and resolved into a [`Spec`]: names
//! become indexes, durations and probabilities are checked, agent configurations built.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use a2acp_core::agent::{
    AgentConfig, GroupConfirmation, Limits, RelationshipOverride, ThreadState, Tier,
};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::packet::{Context, Intent};
use a2acp_core::relay::federation::FederationConfig;
use a2acp_core::relay::RelayConfig;
use a2acp_core::{Address, Timestamp};
use serde::Deserialize;

use super::*;
use crate::error::SimError;
use crate::model::{
    ActionModel, ConsentPolicy, KeyChangePolicy, LinkModel, LlmAnswer, LlmModel, ResolutionPolicy,
    SuggestionPolicy, UserModel,
};
use crate::util::{parse_duration, parse_signed_ms};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    summary: Option<String>,
    start: Option<String>,
    run_for: Option<String>,
    settle: Option<String>,
    crash_mid_step: Option<bool>,
    #[serde(default)]
    relay: RawRelay,
    federation: Option<RawFederation>,
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    agent: Vec<RawAgent>,
    #[serde(default)]
    partition: Vec<RawPartition>,
    #[serde(default)]
    thread: Vec<RawThread>,
    #[serde(default)]
    group: Vec<RawGroup>,
    #[serde(default)]
    space: Vec<RawSpace>,
    #[serde(default)]
    command: Vec<RawCommand>,
    #[serde(default)]
    key_change: Vec<RawKeyChange>,
    #[serde(default)]
    expect: Vec<RawExpect>,
    #[serde(default)]
    known_issue: Vec<RawKnown>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKnown {
    check: String,
    note: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    link: Option<RawLink>,
    user: Option<RawUser>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRelay {
    domain: Option<String>,
    queue_per_thread: Option<u32>,
    queue_per_recipient: Option<u32>,
    ping_interval: Option<String>,
    auth_max_skew: Option<String>,
    #[serde(default)]
    crash: Vec<RawOutage>,
}

/// `[federation]`: relays of other domains (`[relay]` is the first domain's).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFederation {
    /// The other domains, one relay each.
    domains: Vec<String>,
    /// The network between two relays.
    link: Option<RawLink>,
    #[serde(default)]
    partition: Vec<RawRelayPartition>,
    #[serde(default)]
    crash: Vec<RawRelayCrash>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelayPartition {
    between: Vec<String>,
    at: String,
    #[serde(rename = "for")]
    length: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelayCrash {
    relay: String,
    at: String,
    #[serde(rename = "for")]
    length: String,
    #[serde(default)]
    handover: bool,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawOutage {
    at: String,
    #[serde(rename = "for")]
    length: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    name: String,
    /// Its address's domain (default: `[relay]`'s).
    domain: Option<String>,
    versions: Option<Vec<String>>,
    #[serde(default)]
    use_llm: bool,
    skew: Option<String>,
    #[serde(default)]
    profile: Context,
    #[serde(default)]
    always_share: Vec<String>,
    #[serde(default)]
    ask_first: Vec<String>,
    #[serde(default)]
    never_share: Vec<String>,
    #[serde(default)]
    overrides: BTreeMap<String, RawOverride>,
    /// Tiers for threads whose intent names a phrase (§6.5): `[agent.intents."game
    /// night"] always_share = ["specific_location"]`.
    #[serde(default)]
    intents: BTreeMap<String, RawIntentTiers>,
    #[serde(default)]
    contacts: BTreeMap<String, Context>,
    limits: Option<RawLimits>,
    user: Option<RawUser>,
    llm: Option<RawLlm>,
    actions: Option<RawActions>,
    link: Option<RawLink>,
    #[serde(default)]
    offline: Vec<RawOutage>,
    #[serde(default)]
    crash: Vec<RawOutage>,
    /// A push endpoint the relay wakes the agent at while it is offline (relay link §5b).
    wake_up: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIntentTiers {
    #[serde(default)]
    always_share: Vec<String>,
    #[serde(default)]
    ask_first: Vec<String>,
    #[serde(default)]
    never_share: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverride {
    label: Option<String>,
    #[serde(default)]
    promote: Vec<String>,
    #[serde(default)]
    restrict: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_round_trips: Option<u32>,
    staleness: Option<String>,
    staleness_urgent: Option<String>,
    confirmation_timeout: Option<String>,
    llm_attempts: Option<u32>,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
struct RawUser {
    delay: Option<[String; 2]>,
    consent: Option<Vec<String>>,
    resolution: Option<Vec<String>>,
    excuse_reason: Option<String>,
    key_change: Option<String>,
    suggestions: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLlm {
    latency: Option<[String; 2]>,
    answers: Option<Vec<String>>,
    fail_rate: Option<f64>,
    malformed_rate: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawActions {
    latency: Option<[String; 2]>,
    #[serde(default)]
    fail_first: Vec<String>,
    fail_rate: Option<f64>,
    /// What checking an action finds, by action name (sequential confirmation).
    #[serde(default)]
    checks: BTreeMap<String, Context>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawLink {
    latency: Option<[String; 2]>,
    distribution: Option<String>,
    loss: Option<f64>,
    duplicate: Option<f64>,
    reorder: Option<f64>,
    reorder_window: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPartition {
    agent: String,
    at: String,
    #[serde(rename = "for")]
    length: String,
    direction: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIntent {
    category: String,
    summary: String,
    urgency: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThread {
    from: String,
    to: String,
    at: Option<String>,
    intent: RawIntent,
    #[serde(default)]
    context: Context,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    coordinator: String,
    participants: Vec<String>,
    at: Option<String>,
    intent: RawIntent,
    #[serde(default)]
    context: Context,
    quorum: Option<u32>,
    #[serde(default)]
    sequential: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpace {
    creator: String,
    name: String,
    at: Option<String>,
    participants: Vec<RawSpaceMember>,
    #[serde(default)]
    fields: Context,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpaceMember {
    agent: String,
    permission: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommand {
    at: String,
    agent: String,
    #[serde(rename = "do")]
    action: String,
    thread: Option<usize>,
    context: Option<Context>,
    intent: Option<RawIntent>,
    reason: Option<String>,
    /// `update_intent`: fields the new intent needs from the peer.
    #[serde(default)]
    needs: Vec<String>,
    /// `fork`: the child threads' intents.
    #[serde(default)]
    intents: Vec<RawIntent>,
    peer: Option<String>,
    group: Option<usize>,
    space: Option<usize>,
    field: Option<String>,
    value: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeyChange {
    agent: String,
    at: String,
}

#[derive(Deserialize)]
struct RawExpect {
    #[serde(default)]
    thread: usize,
    #[serde(default)]
    group: usize,
    #[serde(flatten)]
    states: BTreeMap<String, String>,
}

// ----- resolution -----

struct Ctx<'a> {
    file: &'a str,
}

impl Ctx<'_> {
    fn bad(&self, what: impl Into<String>) -> SimError {
        SimError::Scenario {
            file: self.file.to_string(),
            reason: what.into(),
        }
    }

    fn dur(&self, field: &str, s: &str) -> Result<Duration, SimError> {
        parse_duration(s).ok_or_else(|| {
            self.bad(format!(
                "`{field}`: `{s}` is not a duration (use e.g. `250ms`, `30s`, `5m`, `2h`, `3d`)"
            ))
        })
    }

    fn range(&self, field: &str, r: &[String; 2]) -> Result<(u64, u64), SimError> {
        let a = self.dur(field, &r[0])?.as_millis() as u64;
        let b = self.dur(field, &r[1])?.as_millis() as u64;
        if b < a {
            return Err(self.bad(format!(
                "`{field}`: the range [{}, {}] is reversed",
                r[0], r[1]
            )));
        }
        Ok((a, b))
    }

    fn prob(&self, field: &str, p: Option<f64>) -> Result<f64, SimError> {
        let p = p.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&p) || p.is_nan() {
            return Err(self.bad(format!("`{field}`: {p} is not a probability in [0, 1]")));
        }
        Ok(p)
    }

    fn outage(&self, field: &str, o: &RawOutage) -> Result<Outage, SimError> {
        Ok(Outage {
            at: self.dur(&format!("{field}.at"), &o.at)?,
            length: self.dur(&format!("{field}.for"), &o.length)?,
        })
    }
}

/// Parses and resolves a scenario's TOML text. `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<Spec, SimError> {
    let raw: RawScenario = toml::from_str(text).map_err(|e| SimError::Scenario {
        file: file.to_string(),
        reason: e.to_string().trim().to_string(),
    })?;
    resolve(raw, file)
}

fn resolve(raw: RawScenario, file: &str) -> Result<Spec, SimError> {
    let cx = Ctx { file };
    let domain = raw
        .relay
        .domain
        .clone()
        .unwrap_or_else(|| "a2acp.io".into());
    let mut relay_config = RelayConfig {
        domain: domain.clone(),
        ..RelayConfig::default()
    };
    if let Some(q) = raw.relay.queue_per_thread {
        if q == 0 {
            return Err(cx.bad("`relay.queue_per_thread` must be at least 1"));
        }
        relay_config.queue_per_thread = q;
    }
    if let Some(q) = raw.relay.queue_per_recipient {
        if q == 0 {
            return Err(cx.bad("`relay.queue_per_recipient` must be at least 1"));
        }
        relay_config.queue_per_recipient = q;
    }
    if let Some(p) = &raw.relay.ping_interval {
        relay_config.ping_interval = cx.dur("relay.ping_interval", p)?;
        if relay_config.ping_interval.is_zero() {
            return Err(cx.bad("`relay.ping_interval` must be positive"));
        }
    }
    if let Some(p) = &raw.relay.auth_max_skew {
        relay_config.auth_max_skew = cx.dur("relay.auth_max_skew", p)?;
    }
    let relay_crashes = raw
        .relay
        .crash
        .iter()
        .map(|o| cx.outage("relay.crash", o))
        .collect::<Result<Vec<_>, _>>()?;

    if raw.agent.is_empty() {
        return Err(cx.bad("a scenario needs at least one [[agent]]"));
    }
    let names: Vec<String> = raw.agent.iter().map(|a| a.name.clone()).collect();
    let mut seen = BTreeSet::new();
    for n in &names {
        if !seen.insert(n.clone()) {
            return Err(cx.bad(format!("agent `{n}` is defined twice")));
        }
    }
    let index = |field: &str, n: &str| -> Result<usize, SimError> {
        names.iter().position(|x| x == n).ok_or_else(|| {
            cx.bad(format!(
                "`{field}`: no agent called `{n}` (agents: {})",
                names.join(", ")
            ))
        })
    };
    let domain_of: BTreeMap<&str, &str> = raw
        .agent
        .iter()
        .filter_map(|a| a.domain.as_deref().map(|d| (a.name.as_str(), d)))
        .collect();
    let address = |n: &str| -> Result<Address, SimError> {
        Address::new(n, domain_of.get(n).copied().unwrap_or(domain.as_str()))
            .map_err(|e| cx.bad(format!("agent name `{n}` is not a valid address user: {e}")))
    };

    let mut agents = Vec::new();
    for a in &raw.agent {
        let f = |k: &str| format!("agent.{}.{k}", a.name);
        let mut config = AgentConfig::new(address(&a.name)?);
        if let Some(v) = &a.versions {
            if v.is_empty() {
                return Err(cx.bad(format!("`{}` is empty", f("versions"))));
            }
            config.supported_versions = v.clone();
        }
        config.use_llm = a.use_llm;
        config.wake_up = a.wake_up.clone();
        config.profile = a.profile.clone();
        for (list, tier) in [
            (&a.always_share, Tier::AlwaysShare),
            (&a.ask_first, Tier::AskFirst),
            (&a.never_share, Tier::NeverShare),
        ] {
            for field in list {
                config.permissions.set(field, tier);
            }
        }
        for (phrase, r) in &a.intents {
            for (list, tier) in [
                (&r.always_share, Tier::AlwaysShare),
                (&r.ask_first, Tier::AskFirst),
                (&r.never_share, Tier::NeverShare),
            ] {
                for field in list {
                    config.permissions.set_for_intent(phrase, field, Some(tier));
                }
            }
        }
        for (peer, o) in &a.overrides {
            let p = index(&f("overrides"), peer)?;
            config.overrides.insert(
                address(&names[p])?,
                RelationshipOverride {
                    label: o.label.clone().unwrap_or_default(),
                    promote_to_always_share: o.promote.iter().cloned().collect(),
                    restrict_to_never_share: o.restrict.iter().cloned().collect(),
                    ..Default::default()
                },
            );
        }
        for (peer, c) in &a.contacts {
            let p = index(&f("contacts"), peer)?;
            config.contacts.insert(address(&names[p])?, c.clone());
        }
        if let Some(l) = &a.limits {
            let mut limits = Limits::default();
            if let Some(n) = l.max_round_trips {
                limits.max_round_trips = n;
            }
            if let Some(s) = &l.staleness {
                limits.staleness = cx.dur(&f("limits.staleness"), s)?;
            }
            if let Some(s) = &l.staleness_urgent {
                limits.staleness_urgent = cx.dur(&f("limits.staleness_urgent"), s)?;
            }
            if let Some(s) = &l.confirmation_timeout {
                limits.confirmation_timeout = cx.dur(&f("limits.confirmation_timeout"), s)?;
            }
            if let Some(n) = l.llm_attempts {
                if n == 0 {
                    return Err(
                        cx.bad(format!("`{}` must be at least 1", f("limits.llm_attempts")))
                    );
                }
                limits.llm_attempts = n;
            }
            config.limits = limits;
        }
        let skew_ms = match &a.skew {
            Some(s) => parse_signed_ms(s).ok_or_else(|| {
                cx.bad(format!(
                    "`{}`: `{s}` is not a duration like `-3m` or `90s`",
                    f("skew")
                ))
            })?,
            None => 0,
        };
        let user_raw = a
            .user
            .clone()
            .or_else(|| raw.defaults.user.clone())
            .unwrap_or_default();
        let user = resolve_user(&cx, &f("user"), &user_raw)?;
        let llm = match &a.llm {
            None => LlmModel::default(),
            Some(l) => {
                let mut m = LlmModel::default();
                if let Some(r) = &l.latency {
                    m.latency = cx.range(&f("llm.latency"), r)?;
                }
                if let Some(xs) = &l.answers {
                    if xs.is_empty() {
                        return Err(cx.bad(format!("`{}` is empty", f("llm.answers"))));
                    }
                    m.answers = xs
                        .iter()
                        .map(|x| {
                            LlmAnswer::parse(x).ok_or_else(|| {
                                cx.bad(format!(
                                    "`{}`: `{x}` is not one of valid, malformed, fail, random",
                                    f("llm.answers")
                                ))
                            })
                        })
                        .collect::<Result<_, _>>()?;
                }
                m.fail_rate = cx.prob(&f("llm.fail_rate"), l.fail_rate)?;
                m.malformed_rate = cx.prob(&f("llm.malformed_rate"), l.malformed_rate)?;
                m
            }
        };
        let actions = match &a.actions {
            None => ActionModel::default(),
            Some(x) => {
                let mut m = ActionModel::default();
                if let Some(r) = &x.latency {
                    m.latency = cx.range(&f("actions.latency"), r)?;
                }
                m.fail_first = x.fail_first.iter().cloned().collect();
                m.fail_rate = cx.prob(&f("actions.fail_rate"), x.fail_rate)?;
                m.checks = x.checks.clone();
                m
            }
        };
        let link_raw = a.link.clone().or_else(|| raw.defaults.link.clone());
        let link = match link_raw {
            None => LinkModel::default(),
            Some(l) => resolve_link(&cx, &f("link"), &l)?,
        };
        let offline = a
            .offline
            .iter()
            .map(|o| cx.outage(&f("offline"), o))
            .collect::<Result<Vec<_>, _>>()?;
        let crashes = a
            .crash
            .iter()
            .map(|o| cx.outage(&f("crash"), o))
            .collect::<Result<Vec<_>, _>>()?;
        agents.push(AgentSpec {
            name: a.name.clone(),
            config,
            skew_ms,
            user,
            llm,
            actions,
            link,
            offline,
            crashes,
        });
    }

    let mut partitions = Vec::new();
    for p in &raw.partition {
        let agent = index("partition.agent", &p.agent)?;
        let direction = match p.direction.as_deref().unwrap_or("both") {
            "both" => Direction::Both,
            "to_relay" => Direction::ToRelay,
            "from_relay" => Direction::FromRelay,
            other => {
                return Err(cx.bad(format!(
                    "`partition.direction`: `{other}` is not one of both, to_relay, from_relay"
                )))
            }
        };
        partitions.push(Partition {
            agent,
            when: Outage {
                at: cx.dur("partition.at", &p.at)?,
                length: cx.dur("partition.for", &p.length)?,
            },
            direction,
        });
    }

    let intent = |i: &RawIntent| Intent {
        category: i.category.clone(),
        summary: i.summary.clone(),
        urgency: i.urgency.clone(),
        scope_change: None,
    };
    let mut threads = Vec::new();
    for t in &raw.thread {
        let from = index("thread.from", &t.from)?;
        let to = index("thread.to", &t.to)?;
        if from == to {
            return Err(cx.bad(format!("thread from `{}` to itself", t.from)));
        }
        let at = match &t.at {
            Some(s) => cx.dur("thread.at", s)?,
            None => Duration::from_secs(1),
        };
        threads.push(ThreadSpec {
            from,
            to,
            at,
            intent: intent(&t.intent),
            context: t.context.clone(),
        });
    }
    let mut groups = Vec::new();
    for g in &raw.group {
        let coordinator = index("group.coordinator", &g.coordinator)?;
        let mut participants = Vec::new();
        for p in &g.participants {
            let i = index("group.participants", p)?;
            if i == coordinator || participants.contains(&i) {
                return Err(cx.bad(format!(
                    "`group.participants`: `{p}` is the coordinator or listed twice"
                )));
            }
            participants.push(i);
        }
        if participants.is_empty() {
            return Err(cx.bad("`group.participants` is empty"));
        }
        if let Some(q) = g.quorum {
            if q == 0 || q as usize > participants.len() + 1 {
                return Err(cx.bad(format!(
                    "`group.quorum`: {q} is not between 1 and the group's size ({})",
                    participants.len() + 1
                )));
            }
            if g.sequential {
                return Err(cx.bad(
                    "`group.quorum` and `group.sequential`: a sequential confirmation has no quorum",
                ));
            }
        }
        groups.push(GroupSpec {
            coordinator,
            participants,
            at: match &g.at {
                Some(s) => cx.dur("group.at", s)?,
                None => Duration::from_secs(1),
            },
            intent: intent(&g.intent),
            context: g.context.clone(),
            confirmation: match (g.sequential, g.quorum) {
                (true, _) => GroupConfirmation::Sequential,
                (false, Some(q)) => GroupConfirmation::Quorum(q),
                (false, None) => GroupConfirmation::All,
            },
        });
    }
    let mut spaces = Vec::new();
    let mut commands = Vec::new();
    for (k, sp) in raw.space.iter().enumerate() {
        let creator = index("space.creator", &sp.creator)?;
        let mut participants: Vec<(usize, SpacePermission)> = Vec::new();
        for m in &sp.participants {
            let i = index("space.participants", &m.agent)?;
            if i == creator || participants.iter().any(|(j, _)| *j == i) {
                return Err(cx.bad(format!(
                    "`space.participants`: `{}` is the creator or listed twice",
                    m.agent
                )));
            }
            let permission = SpacePermission::parse(&m.permission).ok_or_else(|| {
                cx.bad(format!(
                    "`space.participants`: `{}` is not read_all, write_own_fields or full_write",
                    m.permission
                ))
            })?;
            participants.push((i, permission));
        }
        if participants.is_empty() {
            return Err(cx.bad("`space.participants` is empty"));
        }
        spaces.push(SpaceSpec {
            creator,
            name: sp.name.clone(),
            participants,
            fields: sp.fields.clone(),
        });
        commands.push(CommandSpec {
            at: match &sp.at {
                Some(s) => cx.dur("space.at", s)?,
                None => Duration::from_secs(1),
            },
            agent: creator,
            action: ScriptAction::CreateSpace { space: k },
        });
    }
    let thread_ref = |n: Option<usize>| -> Result<usize, SimError> {
        match n {
            Some(n) if n >= 1 && n <= threads.len() => Ok(n - 1),
            Some(n) => Err(cx.bad(format!(
                "`command.thread`: {n} is not a thread number (1..={})",
                threads.len()
            ))),
            None => Err(cx.bad("`command.thread` is required for this command")),
        }
    };
    for c in &raw.command {
        let agent = index("command.agent", &c.agent)?;
        let at = cx.dur("command.at", &c.at)?;
        let action = match c.action.as_str() {
            "update_context" => ScriptAction::UpdateContext {
                thread: thread_ref(c.thread)?,
                context: c
                    .context
                    .clone()
                    .ok_or_else(|| cx.bad("`update_context` needs `context`"))?,
            },
            "update_intent" => ScriptAction::UpdateIntent {
                thread: thread_ref(c.thread)?,
                intent: c
                    .intent
                    .as_ref()
                    .map(intent)
                    .ok_or_else(|| cx.bad("`update_intent` needs `intent`"))?,
                reason: c.reason.clone().unwrap_or_else(|| "plans changed".into()),
                needs: c.needs.clone(),
            },
            "fork" => {
                if c.intents.len() < 2 {
                    return Err(cx.bad("`fork` needs at least two `intents`"));
                }
                ScriptAction::Fork {
                    thread: thread_ref(c.thread)?,
                    intents: c.intents.iter().map(intent).collect(),
                }
            }
            "rotate_key" => ScriptAction::RotateKey,
            "backup" => ScriptAction::Backup,
            "recovery_key" => ScriptAction::RecoveryKey,
            "lose_device" => ScriptAction::LoseDevice,
            "recover" => ScriptAction::Recover,
            "new_device" => ScriptAction::NewDevice,
            "old_device_returns" => ScriptAction::OldDeviceReturns,
            "other_device_returns" => ScriptAction::OtherDeviceReturns,
            "cancel" => ScriptAction::Cancel {
                thread: thread_ref(c.thread)?,
            },
            "accept_key_change" | "block" => {
                let peer = index(
                    "command.peer",
                    c.peer
                        .as_deref()
                        .ok_or_else(|| cx.bad(format!("`{}` needs `peer`", c.action)))?,
                )?;
                if c.action == "block" {
                    ScriptAction::Block { peer }
                } else {
                    ScriptAction::AcceptKeyChange { peer }
                }
            }
            "transfer" => {
                let to = index(
                    "command.peer",
                    c.peer
                        .as_deref()
                        .ok_or_else(|| cx.bad("`transfer` needs `peer`"))?,
                )?;
                let group = match c.group {
                    Some(n) if n >= 1 && n <= groups.len() => n - 1,
                    Some(n) => {
                        return Err(cx.bad(format!(
                            "`command.group`: {n} is not a group number (1..={})",
                            groups.len()
                        )))
                    }
                    None => return Err(cx.bad("`transfer` needs `group`")),
                };
                ScriptAction::TransferCoordinator { group, to }
            }
            "space_set" => {
                let space = match c.space {
                    Some(n) if n >= 1 && n <= spaces.len() => n - 1,
                    Some(n) => {
                        return Err(cx.bad(format!(
                            "`command.space`: {n} is not a space number (1..={})",
                            spaces.len()
                        )))
                    }
                    None => return Err(cx.bad("`space_set` needs `space`")),
                };
                let field = c
                    .field
                    .clone()
                    .ok_or_else(|| cx.bad("`space_set` needs `field`"))?;
                let value = match c.value.clone() {
                    Some(value) => FieldValue::Value { value },
                    None => FieldValue::Cleared,
                };
                ScriptAction::SetSpaceField {
                    space,
                    field,
                    value,
                }
            }
            other => {
                return Err(cx.bad(format!(
                    "`command.do`: `{other}` is not one of update_context, update_intent, fork, cancel, accept_key_change, block, transfer, space_set"
                )))
            }
        };
        commands.push(CommandSpec { at, agent, action });
    }
    let mut key_changes = Vec::new();
    for k in &raw.key_change {
        key_changes.push(KeyChange {
            agent: index("key_change.agent", &k.agent)?,
            at: cx.dur("key_change.at", &k.at)?,
        });
    }
    let mut expect = Vec::new();
    for e in &raw.expect {
        let group = e.group != 0;
        if group && e.thread != 0 {
            return Err(cx.bad("an `expect` names either a `thread` or a `group`, not both"));
        }
        if group && e.group > groups.len() {
            return Err(cx.bad(format!(
                "`expect.group`: {} is not a group number (1..={})",
                e.group,
                groups.len()
            )));
        }
        if !group && (e.thread == 0 || e.thread > threads.len()) {
            return Err(cx.bad(format!(
                "`expect.thread`: {} is not a thread number (1..={})",
                e.thread,
                threads.len()
            )));
        }
        let mut states = Vec::new();
        for (who, st) in &e.states {
            let i = index("expect", who)?;
            if group && !groups[e.group - 1].participants.contains(&i) {
                return Err(cx.bad(format!(
                    "`expect.{who}`: not a participant of group {}",
                    e.group
                )));
            }
            let s: ThreadState = serde_json::from_value(serde_json::Value::String(st.clone()))
                .map_err(|_| {
                    cx.bad(format!(
                        "`expect.{who}`: `{st}` is not a thread state (INITIATED, NEGOTIATING, PROPOSED, CONFIRMED, EXECUTING, COMPLETED, DECLINED, FAILED, ROLLBACK, STALLED, EXPIRED)"
                    ))
                })?;
            states.push((i, s));
        }
        expect.push(Expect {
            thread: if group { e.group - 1 } else { e.thread - 1 },
            group,
            states,
        });
    }
    let start = match &raw.start {
        Some(s) => Timestamp::parse_rfc3339(s)
            .ok_or_else(|| cx.bad(format!("`start`: `{s}` is not an RFC 3339 date-time")))?,
        None => Timestamp::parse_rfc3339("2026-03-21T14:30:00Z").unwrap_or(Timestamp::ZERO),
    };
    let mut relay_crashes = relay_crashes;
    let federation = match &raw.federation {
        None => None,
        Some(f) => {
            relay_config.federation = Some(FederationConfig::new(placeholder_key()));
            let mut all = vec![domain.clone()];
            all.extend(f.domains.iter().cloned());
            let which = |field: &str, d: &str| -> Result<usize, SimError> {
                all.iter().position(|x| x == d).ok_or_else(|| {
                    cx.bad(format!(
                        "`{field}`: no relay for `{d}` (domains: {})",
                        all.join(", ")
                    ))
                })
            };
            let mut relays: Vec<RelaySpec> = f
                .domains
                .iter()
                .map(|d| RelaySpec {
                    config: RelayConfig {
                        domain: d.clone(),
                        federation: Some(FederationConfig::new(placeholder_key())),
                        queue_per_thread: relay_config.queue_per_thread,
                        queue_per_recipient: relay_config.queue_per_recipient,
                        ping_interval: relay_config.ping_interval,
                        auth_max_skew: relay_config.auth_max_skew,
                        ..RelayConfig::default()
                    },
                    crashes: Vec::new(),
                })
                .collect();
            let mut partitions = Vec::new();
            for p in &f.partition {
                let [a, b] = p.between.as_slice() else {
                    return Err(cx.bad("`federation.partition.between` names two domains"));
                };
                partitions.push(RelayPartition {
                    relays: (
                        which("federation.partition.between", a)?,
                        which("federation.partition.between", b)?,
                    ),
                    when: Outage {
                        at: cx.dur("federation.partition.at", &p.at)?,
                        length: cx.dur("federation.partition.for", &p.length)?,
                    },
                });
            }
            let mut handover_crashes = Vec::new();
            for c in &f.crash {
                let k = which("federation.crash.relay", &c.relay)?;
                let o = Outage {
                    at: cx.dur("federation.crash.at", &c.at)?,
                    length: cx.dur("federation.crash.for", &c.length)?,
                };
                if c.handover {
                    handover_crashes.push((k, o));
                } else if k == 0 {
                    relay_crashes.push(o);
                } else {
                    relays[k - 1].crashes.push(o);
                }
            }
            let link = match &f.link {
                None => LinkModel::default(),
                Some(l) => resolve_link(&cx, "federation.link", l)?,
            };
            Some(FederationSpec {
                relays,
                link,
                partitions,
                handover_crashes,
            })
        }
    };
    Ok(Spec {
        name: raw.name.unwrap_or_else(|| file.to_string()),
        summary: raw.summary.unwrap_or_default(),
        start,
        relay: RelaySpec {
            config: relay_config,
            crashes: relay_crashes,
        },
        federation,
        agents,
        partitions,
        threads,
        groups,
        spaces,
        commands,
        key_changes,
        run_for: match &raw.run_for {
            Some(s) => cx.dur("run_for", s)?,
            None => Duration::from_secs(3600),
        },
        settle: match &raw.settle {
            Some(s) => cx.dur("settle", s)?,
            None => Duration::from_secs(1800),
        },
        expect,
        transcript: true,
        crash_mid_step: raw.crash_mid_step.unwrap_or(true),
        known_issues: raw
            .known_issue
            .iter()
            .map(|k| {
                if crate::check::CHECKS.contains(&k.check.as_str()) {
                    Ok((k.check.clone(), k.note.clone()))
                } else {
                    Err(cx.bad(format!(
                        "`known_issue.check`: `{}` is not one of {}",
                        k.check,
                        crate::check::CHECKS.join(", ")
                    )))
                }
            })
            .collect::<Result<_, _>>()?,
    })
}

fn resolve_user(cx: &Ctx, field: &str, u: &RawUser) -> Result<UserModel, SimError> {
    let mut m = UserModel::default();
    if let Some(r) = &u.delay {
        m.delay = cx.range(&format!("{field}.delay"), r)?;
    }
    if let Some(xs) = &u.consent {
        if xs.is_empty() {
            return Err(cx.bad(format!("`{field}.consent` is empty")));
        }
        m.consent = xs
            .iter()
            .map(|x| {
                ConsentPolicy::parse(x).ok_or_else(|| {
                    cx.bad(format!(
                        "`{field}.consent`: `{x}` is not one of approve, approve_some, decline_all, never, random"
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(xs) = &u.resolution {
        if xs.is_empty() {
            return Err(cx.bad(format!("`{field}.resolution` is empty")));
        }
        m.resolution = xs
            .iter()
            .map(|x| {
                ResolutionPolicy::parse(x).ok_or_else(|| {
                    cx.bad(format!(
                        "`{field}.resolution`: `{x}` is not one of confirm, excuse, decline, different_time, different_place, never, random"
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
    }
    m.excuse_reason = u.excuse_reason.clone();
    if let Some(k) = &u.key_change {
        m.key_change = match k.as_str() {
            "accept" => KeyChangePolicy::Accept,
            "ignore" => KeyChangePolicy::Ignore,
            other => {
                return Err(cx.bad(format!(
                    "`{field}.key_change`: `{other}` is not one of accept, ignore"
                )))
            }
        };
    }
    if let Some(k) = &u.suggestions {
        m.suggestions = match k.as_str() {
            "accept" => SuggestionPolicy::Accept,
            "ignore" => SuggestionPolicy::Ignore,
            other => {
                return Err(cx.bad(format!(
                    "`{field}.suggestions`: `{other}` is not one of accept, ignore"
                )))
            }
        };
    }
    Ok(m)
}

/// A federating relay's key before the world replaces it with one derived from the run's
/// seed and the relay's domain.
fn placeholder_key() -> IdentityKey {
    IdentityKey::from_seed([0; 32])
}

fn resolve_link(cx: &Ctx, field: &str, l: &RawLink) -> Result<LinkModel, SimError> {
    let mut m = LinkModel::default();
    if let Some(r) = &l.latency {
        m.latency = cx.range(&format!("{field}.latency"), r)?;
    }
    if let Some(d) = &l.distribution {
        m.exponential = match d.as_str() {
            "uniform" => false,
            "exponential" => true,
            other => {
                return Err(cx.bad(format!(
                    "`{field}.distribution`: `{other}` is not one of uniform, exponential"
                )))
            }
        };
    }
    m.loss = cx.prob(&format!("{field}.loss"), l.loss)?;
    m.duplicate = cx.prob(&format!("{field}.duplicate"), l.duplicate)?;
    m.reorder = cx.prob(&format!("{field}.reorder"), l.reorder)?;
    if let Some(w) = &l.reorder_window {
        m.reorder_window = cx.dur(&format!("{field}.reorder_window"), w)?.as_millis() as u64;
    }
    Ok(m)
}
