//! Swarm runs: whole worlds drawn from a seed — agents, profiles, permissions, users, LLMs,
//! links, threads and every fault (loss, duplication, reordering, partitions, relay and
//! agent crashes, devices shut for hours or days, clock skew).
//!
//! `generate(seed, params)` is a pure function: the same seed gives the same world, and
//! `a2acp-sim run swarm --seed N --agents K --threads T` replays it with a transcript.

use std::time::Duration;

use a2acp_core::agent::permissions::UsagePolicy;
use a2acp_core::agent::{AgentConfig, GroupConfirmation, RelationshipOverride};
use a2acp_core::packet::{Context, Intent};
use a2acp_core::relay::federation::FederationConfig;
use a2acp_core::relay::RelayConfig;
use a2acp_core::{Address, Timestamp};
use serde_json::{json, Value};

use crate::model::{
    ActionModel, ConsentPolicy, KeyChangePolicy, LinkModel, LlmAnswer, LlmModel, ResolutionPolicy,
    SuggestionPolicy, UserModel,
};
use crate::scenario::{
    AgentSpec, CommandSpec, Direction, FederationSpec, GroupSpec, Outage, Partition,
    RelayPartition, RelaySpec, ScriptAction, SpaceSpec, Spec, ThreadSpec,
};
use crate::util::Rng;

/// The size of a swarm and whether faults are injected.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Agents.
    pub agents: usize,
    /// Threads.
    pub threads: usize,
    /// Inject faults (off: a clean network, for throughput figures).
    pub faults: bool,
    /// Allow devices shut for days (long simulated spans).
    pub long_offline: bool,
    /// Calm users and gentler faults: users approve and confirm (no declines, excuses,
    /// cancellations or unanswered prompts), frames are never reordered, relay queues keep
    /// their default size and agents crash only between steps. Every other fault stays
    /// (loss, duplication, partitions, relay crashes mid-step, agent crashes and restarts,
    /// devices shut, clock skew, LLM failures, failing actions). Calm runs reach execution
    /// and completion more often than the full model's.
    pub calm: bool,
    /// Group threads (§10) too: some worlds, drawn from a stream of their own (so a world
    /// without groups is exactly the two-party world of the same seed), get one or two
    /// group threads of 2–8 agents, with agents added when the world has too few.
    pub groups: bool,
    /// Shared context spaces (§12) too: some worlds, drawn from a stream of their own
    /// ("swarm-spaces", so a world without spaces is exactly the world of the same seed
    /// without the flag), get one or two spaces among the world's agents and writes to
    /// them (own fields, shared fields, the same field at once, writes beyond the
    /// writer's permission and of never_share fields, which must be refused).
    pub spaces: bool,
    /// Domains (§16): 1, one relay that does not federate; more, one federating relay per
    /// domain (`a.example`, `b.example`, …), agent `i` on domain `i mod domains`, with
    /// faults between relays drawn from a stream of their own ("swarm-domains"): link
    /// drops, duplicated frames, partitions between two relays, relay crashes (some aimed
    /// at a hand-over). Threads and groups are drawn as in a world of one domain, so
    /// they mix same-domain and cross-domain peers.
    pub domains: usize,
    /// Key rotations (§16, issue 34 part 5) too, drawn from a stream of their own
    /// ("swarm-rotations", so a world without them is exactly the world of the same seed
    /// without the flag): every group's coordinator runs `keys rotate` between 1 s and
    /// 2 min after its group starts (in the middle of the group thread), and a quarter of
    /// the two-party threads' initiators do so after theirs. The report measures the
    /// simulated time from each rotation to every peer that had pinned the old key
    /// re-pinned the new one.
    pub rotations: bool,
    /// Usage rules and retractions too (SPEC-NOTES "Usage rules", "Retraction"), drawn
    /// from a stream of their own ("swarm-consent", so a world without them is exactly
    /// the world of the same seed without the flag): half of the agents set rules on one
    /// or two fields (no re-sharing, a purpose, an expiry of 10 min to 2 h), and in a
    /// third of the two-party threads one side takes back everything it shared, 2 to
    /// 90 minutes after the thread starts.
    pub consent: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            agents: 4,
            threads: 6,
            faults: true,
            long_offline: true,
            calm: false,
            groups: false,
            spaces: false,
            domains: 1,
            rotations: false,
            consent: false,
        }
    }
}

const ZONES: &[&str] = &[
    "Europe/London",
    "Europe/Paris",
    "America/New_York",
    "Asia/Tokyo",
    "UTC",
];
const DATES: &[&str] = &[
    "2026-03-23",
    "2026-03-24",
    "2026-03-25",
    "2026-03-26",
    "2026-03-27",
];
const WINDOWS: &[&str] = &[
    "18:00-21:00",
    "18:30-21:30",
    "19:00-22:00",
    "12:00-14:00",
    "11:30-13:30",
    "09:00-12:00",
    "14:00-17:00",
];
const EVENTS: &[(&str, &str)] = &[
    ("dinner", "Dinner"),
    ("lunch", "Lunch"),
    ("coffee", "Coffee"),
    ("video call", "Video call"),
    ("drinks", "Drinks"),
];

fn ms(d: u64) -> Duration {
    Duration::from_millis(d)
}

pub(crate) fn ctx(v: Value) -> Context {
    v.as_object().cloned().unwrap_or_default()
}

/// Agent `i` of a world of `n` agents, drawn from `r`.
fn agent(r: &mut Rng, seed: u64, i: usize, n: usize, p: Params) -> AgentSpec {
    let faults = p.faults;
    let name = name_of(i);
    let addr = |i: usize| agent_address(i, p.domains);
    let mut config = AgentConfig::new(addr(i));
    let zone = *r.pick(ZONES);
    let mut profile = ctx(json!({
        "name": format!("User {i}"),
        "timezone": zone,
        "transport_mode": *r.pick(&["driving", "walking", "cycling", "train"]),
        "cuisine_preference": *r.pick(&["Italian", "Thai", "Japanese", "Mexican"]),
        "health_info": format!("SECRET-health-{seed}-{i}"),
    }));
    if r.chance(0.7) {
        let w: Vec<String> = (0..=r.below(2))
            .map(|_| format!("{} {}", r.pick(DATES), r.pick(WINDOWS)))
            .collect();
        profile.insert("time_windows".into(), json!(w));
    }
    if r.chance(0.5) {
        profile.insert(
            "dietary".into(),
            json!([*r.pick(&["none", "vegetarian", "vegan", "gluten-free"])]),
        );
    }
    if r.chance(0.3) {
        profile.insert(
            "medications".into(),
            json!(format!("SECRET-meds-{seed}-{i}")),
        );
    }
    config.profile = profile;
    if faults && r.chance(0.1) {
        config.supported_versions = vec!["0.1".into()];
    }
    if r.chance(0.3) {
        config
            .permissions
            .always_share
            .insert("specific_availability".into());
    }
    // Relationship overrides with a few other agents.
    for _ in 0..r.below(3) {
        let j = r.below(n as u64) as usize;
        if j != i {
            config.overrides.insert(
                addr(j),
                RelationshipOverride {
                    label: "friend".into(),
                    promote_to_always_share: ["specific_availability", "dietary"]
                        .iter()
                        .map(|s| s.to_string())
                        .collect(),
                    ..Default::default()
                },
            );
        }
    }
    config.use_llm = r.chance(0.15);
    let llm = LlmModel {
        latency: (300, r.between(500, 5000)),
        answers: vec![LlmAnswer::Random],
        fail_rate: if faults { r.unit() * 0.4 } else { 0.0 },
        malformed_rate: if faults { r.unit() * 0.3 } else { 0.0 },
    };
    let lo = r.between(500, 30_000);
    let rare_consent = if r.chance(0.3) {
        ConsentPolicy::Never
    } else {
        ConsentPolicy::Approve
    };
    let consent = *r.pick(&[
        ConsentPolicy::Random,
        ConsentPolicy::Random,
        ConsentPolicy::Approve,
        ConsentPolicy::ApproveSome,
        ConsentPolicy::DeclineAll,
        rare_consent,
    ]);
    let rare_resolution = if r.chance(0.3) {
        ResolutionPolicy::Never
    } else {
        ResolutionPolicy::Excuse
    };
    let resolution = *r.pick(&[
        ResolutionPolicy::Random,
        ResolutionPolicy::Random,
        ResolutionPolicy::Confirm,
        ResolutionPolicy::Confirm,
        rare_resolution,
    ]);
    let (consent, resolution) = if p.calm {
        (ConsentPolicy::Approve, ResolutionPolicy::Confirm)
    } else {
        (consent, resolution)
    };
    let user = UserModel {
        delay: (lo, lo + r.between(0, 600_000)),
        consent: vec![consent],
        resolution: vec![resolution],
        excuse_reason: Some(format!("SECRET-reason-{seed}-{i}: can't stand them")),
        key_change: KeyChangePolicy::Accept,
        suggestions: SuggestionPolicy::Ignore,
    };
    let actions = ActionModel {
        latency: (50, r.between(100, 5000)),
        fail_first: if faults && r.chance(0.2) {
            ["book_table".to_string()].into_iter().collect()
        } else {
            Default::default()
        },
        fail_rate: if faults { r.unit() * 0.1 } else { 0.0 },
        checks: Default::default(),
    };
    let lat_lo = r.between(2, 60);
    let link = LinkModel {
        latency: (lat_lo, lat_lo + r.between(0, 500)),
        exponential: r.chance(0.5),
        loss: if faults && r.chance(0.5) {
            r.unit() * 0.02
        } else {
            0.0
        },
        duplicate: if faults && r.chance(0.3) {
            r.unit() * 0.05
        } else {
            0.0
        },
        reorder: if faults && !p.calm && r.chance(0.3) {
            r.unit() * 0.05
        } else {
            0.0
        },
        reorder_window: r.between(10, 500),
    };
    let skew_ms = if faults && r.chance(0.5) {
        r.between(0, 480_000) as i64 - 240_000
    } else {
        0
    };
    let mut offline = Vec::new();
    let mut crashes = Vec::new();
    if faults {
        if r.chance(0.15) {
            let long = p.long_offline && r.chance(0.3);
            offline.push(Outage {
                at: ms(r.between(0, 3_000_000)),
                length: if long {
                    ms(r.between(3_600_000, 2 * 86_400_000))
                } else {
                    ms(r.between(10_000, 3_600_000))
                },
            });
        }
        if r.chance(0.2) {
            for _ in 0..=r.below(2) {
                crashes.push(Outage {
                    at: ms(r.between(0, 3_400_000)),
                    length: ms(r.between(500, 300_000)),
                });
            }
        }
    }
    AgentSpec {
        name,
        config,
        skew_ms,
        user,
        llm,
        actions,
        link,
        offline,
        crashes,
    }
}

/// An agent of a clean world (the figures' worlds: game nights, relationships): no skew,
/// the scripted LLM, actions taking 50–500 ms, links of 20–80 ms, never offline, never
/// crashing.
pub(crate) fn clean_agent(name: String, config: AgentConfig, user: UserModel) -> AgentSpec {
    AgentSpec {
        name,
        config,
        skew_ms: 0,
        user,
        llm: LlmModel::default(),
        actions: ActionModel {
            latency: (50, 500),
            ..ActionModel::default()
        },
        link: LinkModel {
            latency: (20, 80),
            ..LinkModel::default()
        },
        offline: Vec::new(),
        crashes: Vec::new(),
    }
}

/// The name of agent `i` of a world.
fn name_of(i: usize) -> String {
    format!("a{i:04}")
}

/// The address of an agent called `name` (names of [`name_of`] are valid address users).
fn address(name: &str) -> Address {
    Address::new(name, DOMAIN).expect("generated names (a0000…) are valid addresses")
}

const DOMAIN: &str = "a2acp.io";

/// The domain of relay `k` of a world of `domains` (one domain: the swarm's own).
pub fn domain_name(k: usize, domains: usize) -> String {
    if domains <= 1 {
        return DOMAIN.to_string();
    }
    let letters = b"abcdefghijklmnopqrstuvwxyz";
    let mut s = String::new();
    let mut x = k;
    loop {
        s.insert(0, letters[x % 26] as char);
        if x < 26 {
            break;
        }
        x = x / 26 - 1;
    }
    format!("{s}.example")
}

/// The address of agent `i` of a world of `domains`: on domain `i mod domains`.
fn agent_address(i: usize, domains: usize) -> Address {
    Address::new(&name_of(i), &domain_name(i % domains.max(1), domains))
        .expect("generated names and domains are valid addresses")
}

/// A federating relay's configuration for `domain`, with a signing key derived from the
/// world's seed.
pub(crate) fn federating_relay(seed: u64, domain: &str) -> RelayConfig {
    RelayConfig {
        domain: domain.to_string(),
        federation: Some(FederationConfig::new(crate::world::relay_key(seed, domain))),
        ..RelayConfig::default()
    }
}

/// The relays of the other domains and the faults between relays of world `seed`, drawn
/// from a stream of their own ("swarm-domains"): relay `k` crashes 0–2 times (up to
/// 10 min), and with faults the links between relays drop frames (half of the worlds,
/// up to 1 %) and duplicate some, 0–2 partitions between two relays (5 s to 15 min), and
/// in 60 % of the worlds a relay crashes in the middle of a hand-over.
fn add_federation(seed: u64, p: Params, first: &RelayConfig) -> FederationSpec {
    let mut r = Rng::new(seed, "swarm-domains");
    let n = p.domains;
    let mut relays = Vec::new();
    for k in 1..n {
        let mut config = federating_relay(seed, &domain_name(k, n));
        config.queue_per_thread = first.queue_per_thread;
        let mut crashes = Vec::new();
        if p.faults {
            for _ in 0..r.below(3) {
                crashes.push(Outage {
                    at: ms(r.between(1_000, 3_000_000)),
                    length: ms(r.between(1_000, 600_000)),
                });
            }
        }
        relays.push(RelaySpec { config, crashes });
    }
    let lo = r.between(5, 40);
    let link = LinkModel {
        latency: (lo, lo + r.between(0, 200)),
        exponential: r.chance(0.5),
        loss: if p.faults && r.chance(0.5) {
            r.unit() * 0.01
        } else {
            0.0
        },
        duplicate: if p.faults && r.chance(0.3) {
            r.unit() * 0.02
        } else {
            0.0
        },
        reorder: 0.0,
        reorder_window: 10,
    };
    let mut partitions = Vec::new();
    let mut handover_crashes = Vec::new();
    if p.faults {
        for _ in 0..r.below(3) {
            let a = r.below(n as u64) as usize;
            let mut b = r.below(n as u64 - 1) as usize;
            if b >= a {
                b += 1;
            }
            partitions.push(RelayPartition {
                relays: (a, b),
                when: Outage {
                    at: ms(r.between(0, 3_000_000)),
                    length: ms(r.between(5_000, 900_000)),
                },
            });
        }
        if r.chance(0.6) {
            handover_crashes.push((
                r.below(n as u64) as usize,
                Outage {
                    at: ms(r.between(60_000, 3_000_000)),
                    length: ms(r.between(1_000, 300_000)),
                },
            ));
        }
    }
    FederationSpec {
        relays,
        link,
        partitions,
        handover_crashes,
    }
}

/// The world of `seed`.
pub fn generate(seed: u64, p: Params) -> Spec {
    let mut r = Rng::new(seed, "swarm");
    let n = p.agents.max(2);
    let run_for = Duration::from_secs(3600);
    let faults = p.faults;

    let mut relay_config = if p.domains > 1 {
        federating_relay(seed, &domain_name(0, p.domains))
    } else {
        RelayConfig {
            domain: DOMAIN.into(),
            ..RelayConfig::default()
        }
    };
    if faults && !p.calm && r.chance(0.2) {
        relay_config.queue_per_thread = *r.pick(&[2, 3, 5]);
    }
    let mut relay_crashes = Vec::new();
    if faults {
        for _ in 0..r.below(3) {
            relay_crashes.push(Outage {
                at: ms(r.between(1_000, 3_000_000)),
                length: ms(r.between(1_000, 600_000)),
            });
        }
    }

    let mut agents = Vec::new();
    for i in 0..n {
        agents.push(agent(&mut r, seed, i, n, p));
    }

    let mut partitions = Vec::new();
    if faults {
        for _ in 0..r.below(1 + n as u64 / 2).min(8) {
            partitions.push(Partition {
                agent: r.below(n as u64) as usize,
                when: Outage {
                    at: ms(r.between(0, 3_000_000)),
                    length: ms(r.between(5_000, 900_000)),
                },
                direction: *r.pick(&[Direction::Both, Direction::ToRelay, Direction::FromRelay]),
            });
        }
    }

    let mut threads = Vec::new();
    for _ in 0..p.threads {
        let from = r.below(n as u64) as usize;
        let mut to = r.below(n as u64 - 1) as usize;
        if to >= from {
            to += 1;
        }
        let at = ms(r.between(1_000, run_for.as_millis() as u64 / 2));
        let (intent, context) = if r.chance(0.85) {
            let (ev, label) = *r.pick(EVENTS);
            let date = *r.pick(DATES);
            let mut c = ctx(json!({
                "event_type": ev,
                "proposed_date": date,
                "time_windows": [*r.pick(WINDOWS)],
            }));
            if r.chance(0.5) {
                let f = *r.pick(&["not_flexible", "somewhat_flexible", "flexible"]);
                c.insert("flexibility".into(), json!(f));
            }
            if r.chance(0.4) {
                c.insert("location_preference".into(), json!("central Reading"));
            }
            if r.chance(0.3) {
                c.insert("budget_range".into(), json!("£20-40pp"));
            }
            if r.chance(0.05) {
                // The user mentions something never_share: it must not leave.
                c.insert("health_info".into(), json!(format!("SECRET-typed-{seed}")));
            }
            let urgency = *r.pick(&["low", "normal", "normal", "high"]);
            (
                Intent {
                    category: "scheduling".into(),
                    summary: format!("{label} on {date}"),
                    urgency: Some(urgency.into()),
                    scope_change: None,
                },
                c,
            )
        } else {
            let k = r.between(1, 7);
            let wanted: Vec<String> = (0..k).map(|x| format!("detail_{x}")).collect();
            (
                Intent {
                    category: "information".into(),
                    summary: "Exchange details".into(),
                    urgency: None,
                    scope_change: None,
                },
                ctx(json!({"wanted_fields": wanted, "topic": "club directory"})),
            )
        };
        threads.push(ThreadSpec {
            from,
            to,
            at,
            intent,
            context,
        });
    }
    let mut commands = Vec::new();
    for (k, t) in threads.iter().enumerate() {
        if p.calm {
            break;
        }
        if r.chance(0.04) {
            commands.push(CommandSpec {
                at: t.at + ms(r.between(1_000, 1_800_000)),
                agent: t.from,
                action: ScriptAction::Cancel { thread: k },
            });
        } else if r.chance(0.04) {
            commands.push(CommandSpec {
                at: t.at + ms(r.between(1_000, 1_800_000)),
                agent: t.from,
                action: ScriptAction::UpdateContext {
                    thread: k,
                    context: ctx(json!({"party_size": r.between(2, 6)})),
                },
            });
        }
    }
    let mut groups = if p.groups {
        add_groups(seed, p, run_for, &mut agents, &mut partitions)
    } else {
        Vec::new()
    };
    add_sequential(seed, &mut groups, &mut agents);
    add_transfers(seed, &groups, &mut commands);
    if p.rotations {
        add_rotations(seed, &threads, &groups, &mut commands);
    }
    if p.consent {
        add_consent(seed, &threads, &mut agents, &mut commands);
    }
    let spaces = if p.spaces {
        add_spaces(seed, run_for, agents.len(), &mut commands)
    } else {
        Vec::new()
    };
    let federation = (p.domains > 1).then(|| add_federation(seed, p, &relay_config));
    Spec {
        name: "swarm".into(),
        summary: format!(
            "swarm world of seed {seed}: {}{} agents, {} threads, {} groups, {}faults {}",
            if p.domains > 1 {
                format!("{} domains, ", p.domains)
            } else {
                String::new()
            },
            agents.len(),
            p.threads,
            groups.len(),
            if spaces.is_empty() {
                String::new()
            } else {
                format!("{} spaces, ", spaces.len())
            },
            if faults { "on" } else { "off" }
        ),
        start: Timestamp::parse_rfc3339("2026-03-21T09:00:00Z").unwrap_or(Timestamp::ZERO),
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
        key_changes: Vec::new(),
        run_for,
        // A peer away for over a day (`--consent`) comes back to a relay queue that
        // overflowed: what was parked is offered again an hour later, so these worlds
        // settle for two hours, past that hour.
        settle: Duration::from_secs(if p.consent { 7_200 } else { 3_600 }),
        expect: Vec::new(),
        transcript: false,
        known_issues: Vec::new(),
        crash_mid_step: !p.calm,
    }
}

/// Sequential confirmations (§8.3), drawn from a stream of their own ("swarm-sequential")
/// so the other worlds stay as they were: a third of the groups that need everyone's
/// confirmation ask for it one after the other. The coordinator's booking service then
/// finds a table (a detail added), half of the time, and a different `when` (a detail
/// changed: everyone is asked again), a fifth of the time.
fn add_sequential(seed: u64, groups: &mut [GroupSpec], agents: &mut [AgentSpec]) {
    let mut r = Rng::new(seed, "swarm-sequential");
    for g in groups {
        if !r.chance(1.0 / 3.0) || g.confirmation != GroupConfirmation::All {
            continue;
        }
        g.confirmation = GroupConfirmation::Sequential;
        let checks = &mut agents[g.coordinator].actions.checks;
        let mut found = Context::new();
        if r.chance(0.5) {
            found.insert("table".into(), json!("by the window"));
        }
        if r.chance(0.2) {
            found.insert("when".into(), json!("half an hour later"));
        }
        checks.insert("book_table".into(), found);
    }
}

/// Field names the swarm's space writers use: shared ones, and `health_info` (never_share
/// for every swarm agent: its writes must be refused before they leave).
const SPACE_FIELDS: &[&str] = &["destination", "dates", "hotel", "budget", "notes"];

/// The shared context spaces of world `seed`, drawn from a stream of their own
/// ("swarm-spaces"): in half of the worlds one or two spaces, each created by a random
/// agent with 1–4 others (as many as the world has) of random permissions, 0–2 initial
/// fields, then 3–12 writes by random participants at random times in the first 50
/// minutes — shared fields (refused for a read_all or write_own_fields writer, before
/// they leave), own fields (`~/…`), fields cleared, a value written twice within a second
/// by two writers (concurrent writes of one field), and one time in ten a never_share
/// field (`health_info`) or a never_share value of the writer's profile (both refused).
/// A write before its writer has joined the space is refused locally ("no space").
fn add_spaces(
    seed: u64,
    run_for: Duration,
    n: usize,
    commands: &mut Vec<CommandSpec>,
) -> Vec<SpaceSpec> {
    use a2acp_core::space::{FieldValue, SpacePermission};
    let mut r = Rng::new(seed, "swarm-spaces");
    let mut spaces = Vec::new();
    if !r.chance(0.5) {
        return spaces;
    }
    for k in 0..=r.below(2) as usize {
        let creator = r.below(n as u64) as usize;
        let mut others: Vec<usize> = (0..n).filter(|&i| i != creator).collect();
        let size = (r.between(1, 4) as usize).min(others.len());
        let mut participants = Vec::new();
        while participants.len() < size {
            let j = others.remove(r.below(others.len() as u64) as usize);
            let perm = *r.pick(&[
                SpacePermission::ReadAll,
                SpacePermission::WriteOwnFields,
                SpacePermission::WriteOwnFields,
                SpacePermission::FullWrite,
            ]);
            participants.push((j, perm));
        }
        let mut fields = Context::new();
        for _ in 0..r.below(3) {
            fields.insert((*r.pick(SPACE_FIELDS)).into(), json!(r.between(1, 99)));
        }
        let at = ms(r.between(1_000, run_for.as_millis() as u64 / 4));
        commands.push(CommandSpec {
            at,
            agent: creator,
            action: ScriptAction::CreateSpace {
                space: spaces.len(),
            },
        });
        let writers: Vec<usize> = std::iter::once(creator)
            .chain(participants.iter().map(|(j, _)| *j))
            .collect();
        for w in 0..r.between(3, 12) {
            let agent = *r.pick(&writers);
            let when = at + ms(r.between(1_000, run_for.as_millis() as u64 * 5 / 6));
            let roll = r.unit();
            let (field, value) = if roll < 0.05 {
                ("health_info".to_string(), json!("fine"))
            } else if roll < 0.1 {
                (
                    "notes".to_string(),
                    json!(format!("SECRET-health-{seed}-{agent}")),
                )
            } else if roll < 0.4 {
                (
                    format!("~/{}", r.pick(&["arrival", "seat", "diet"])),
                    json!(w),
                )
            } else {
                ((*r.pick(SPACE_FIELDS)).to_string(), json!(w))
            };
            let value = if r.chance(0.05) {
                FieldValue::Cleared
            } else {
                FieldValue::Value { value }
            };
            commands.push(CommandSpec {
                at: when,
                agent,
                action: ScriptAction::SetSpaceField {
                    space: k,
                    field: field.clone(),
                    value,
                },
            });
            if r.chance(0.2) {
                // Another writer writes the same field within a second: concurrent writes.
                let other = *r.pick(&writers);
                commands.push(CommandSpec {
                    at: when + ms(r.between(0, 1_000)),
                    agent: other,
                    action: ScriptAction::SetSpaceField {
                        space: k,
                        field,
                        value: FieldValue::Value {
                            value: json!(format!("{w} by {other}")),
                        },
                    },
                });
            }
        }
        spaces.push(SpaceSpec {
            creator,
            name: format!("Trip {k}"),
            participants,
            fields,
        });
    }
    spaces
}

/// Coordinator transfers (§10.3), drawn from a stream of their own ("swarm-transfers"), so
/// the worlds without them stay as they were: a quarter of the groups are handed by their
/// coordinator to a random participant between 1 s and 10 min after they start — often
/// before everyone answered (a transfer), sometimes once a proposal is open (refused, the
/// user told).
fn add_transfers(seed: u64, groups: &[GroupSpec], commands: &mut Vec<CommandSpec>) {
    let mut r = Rng::new(seed, "swarm-transfers");
    for (i, g) in groups.iter().enumerate() {
        if !r.chance(0.25) || g.participants.is_empty() {
            continue;
        }
        let to = g.participants[r.below(g.participants.len() as u64) as usize];
        commands.push(CommandSpec {
            at: g.at + ms(r.between(1_000, 600_000)),
            agent: g.coordinator,
            action: ScriptAction::TransferCoordinator { group: i, to },
        });
    }
}

/// The fields a swarm agent may set a usage rule on.
const RULED: &[&str] = &[
    "transport_mode",
    "dietary",
    "time_windows",
    "budget_range",
    "location_preference",
];

/// Usage rules and retractions, drawn from a stream of their own ("swarm-consent"): see
/// [`Params::consent`].
fn add_consent(
    seed: u64,
    threads: &[ThreadSpec],
    agents: &mut [AgentSpec],
    commands: &mut Vec<CommandSpec>,
) {
    let mut r = Rng::new(seed, "swarm-consent");
    for a in agents.iter_mut() {
        if !r.chance(0.5) {
            continue;
        }
        for _ in 0..r.between(1, 3) {
            let field = RULED[r.below(RULED.len() as u64) as usize];
            let mut policy = UsagePolicy {
                purpose: r.chance(0.5),
                expires_after: r.chance(0.3).then(|| r.between(600, 7_200)),
                no_reshare: r.chance(0.5),
            };
            if policy.is_empty() {
                policy.no_reshare = true;
            }
            a.config.permissions.usage.insert(field.into(), policy);
        }
    }
    for (k, t) in threads.iter().enumerate() {
        if r.chance(0.3) {
            let at = t.at + ms(r.between(120_000, 5_400_000));
            let (agent, peer) = if r.chance(0.5) {
                (t.from, t.to)
            } else {
                (t.to, t.from)
            };
            commands.push(CommandSpec {
                at,
                agent,
                action: ScriptAction::Retract { thread: k },
            });
            // A quarter of the time the peer's device is away from just before the
            // retraction for more than the day it has to acknowledge it (an agent that
            // never answers, as far as the retracting side can tell): the user must be told
            // (`retraction_told`), and the late acknowledgement still counts.
            let away = r.chance(0.25);
            let length = ms(r.between(90_000_000, 108_000_000));
            if let Some(p) = agents
                .get_mut(peer)
                .filter(|p| away && p.offline.is_empty())
            {
                p.offline.push(Outage {
                    at: at.saturating_sub(ms(1_000)),
                    length,
                });
            }
        }
    }
}

/// Key rotations, drawn from a stream of their own ("swarm-rotations"): each group's
/// coordinator rotates between 1 s and 2 min after its group starts, and a quarter of the
/// two-party threads' initiators between 1 s and 2 min after theirs.
fn add_rotations(
    seed: u64,
    threads: &[ThreadSpec],
    groups: &[GroupSpec],
    commands: &mut Vec<CommandSpec>,
) {
    let mut r = Rng::new(seed, "swarm-rotations");
    for g in groups {
        commands.push(CommandSpec {
            at: g.at + ms(r.between(1_000, 120_000)),
            agent: g.coordinator,
            action: ScriptAction::RotateKey,
        });
    }
    for t in threads {
        if r.chance(0.25) {
            commands.push(CommandSpec {
                at: t.at + ms(r.between(1_000, 120_000)),
                agent: t.from,
                action: ScriptAction::RotateKey,
            });
        }
    }
}

/// The group threads of world `seed`, drawn from a stream of their own ("swarm-groups"):
/// in 60 % of worlds one or two groups of 2–8 agents (the coordinator included), each
/// coordinated by a random agent, with a group-scheduling intent, a context of windows
/// (sometimes a budget) and sometimes a quorum. Agents are added (drawn from the same
/// stream, with every fault of the model) when a group needs more than the world has.
fn add_groups(
    seed: u64,
    p: Params,
    run_for: Duration,
    agents: &mut Vec<AgentSpec>,
    partitions: &mut Vec<Partition>,
) -> Vec<GroupSpec> {
    let mut g = Rng::new(seed, "swarm-groups");
    let mut groups = Vec::new();
    if !g.chance(0.6) {
        return groups;
    }
    for _ in 0..=g.below(2) {
        let size = g.between(2, 8) as usize;
        while agents.len() < size {
            let i = agents.len();
            let a = agent(&mut g, seed, i, size, p);
            agents.push(a);
            if p.faults && g.chance(0.3) {
                partitions.push(Partition {
                    agent: i,
                    when: Outage {
                        at: ms(g.between(0, 3_000_000)),
                        length: ms(g.between(5_000, 900_000)),
                    },
                    direction: *g.pick(&[
                        Direction::Both,
                        Direction::ToRelay,
                        Direction::FromRelay,
                    ]),
                });
            }
        }
        let n = agents.len() as u64;
        let coordinator = g.below(n) as usize;
        let mut others: Vec<usize> = (0..agents.len()).filter(|&i| i != coordinator).collect();
        let mut participants = Vec::new();
        while participants.len() + 1 < size {
            let k = g.below(others.len() as u64) as usize;
            participants.push(others.remove(k));
        }
        let (ev, label) = *g.pick(EVENTS);
        let windows: Vec<String> = (0..=g.below(2))
            .map(|_| format!("{} {}", g.pick(DATES), g.pick(WINDOWS)))
            .collect();
        let mut context = ctx(json!({
            "event_type": ev,
            "timezone": *g.pick(ZONES),
            "time_windows": windows,
        }));
        if g.chance(0.5) {
            context.insert("duration".into(), json!(*g.pick(&["PT1H", "PT2H", "PT3H"])));
        }
        if g.chance(0.3) {
            context.insert("budget_range".into(), json!("£10-30pp"));
        }
        let confirmation = if g.chance(0.3) {
            GroupConfirmation::Quorum(g.between(2, size as u64) as u32)
        } else {
            GroupConfirmation::All
        };
        groups.push(GroupSpec {
            coordinator,
            participants,
            at: ms(g.between(1_000, run_for.as_millis() as u64 / 2)),
            intent: Intent {
                category: "group_scheduling".into(),
                summary: format!("{label} for {size}"),
                urgency: None,
                scope_change: None,
            },
            context,
            confirmation,
        });
    }
    groups
}

/// Evening and weekend slots of the game-night worlds, in London time (UTC in late March
/// 2026): (date, start, end).
const GAME_SLOTS: &[(&str, &str, &str)] = &[
    ("2026-03-27", "17:00", "20:00"),
    ("2026-03-27", "18:00", "22:00"),
    ("2026-03-27", "19:30", "23:00"),
    ("2026-03-27", "20:00", "23:00"),
    ("2026-03-27", "20:00", "23:30"),
    ("2026-03-28", "10:00", "12:00"),
    ("2026-03-28", "14:00", "18:00"),
    ("2026-03-28", "18:00", "22:00"),
    ("2026-03-28", "19:00", "23:00"),
    ("2026-03-28", "19:00", "23:30"),
];

/// Zones of the game-night worlds and their offset from London on 27–28 March 2026.
const GAME_ZONES: &[(&str, i64)] = &[
    ("Europe/London", 0),
    ("Europe/Berlin", 60),
    ("America/New_York", -240),
];

/// A seeded game night (§10.2) for `size` agents (the coordinator `a0000` included, at
/// least 2): the coordinator's context of the spec (Friday 19:00–23:00 and Saturday
/// 18:00–23:30 London, three hours), each participant in London, Berlin or New York with
/// one or two evening or weekend windows in their own time (drawn from the seed), users
/// who share what is asked and confirm (a binding participant asked to give way does so
/// three times in four), a clean network and no faults. For `bench`: round
/// trips and prompts per participant, and how often the binding constraint gives way to a
/// slot everyone can make.
pub fn game_night(seed: u64, size: usize) -> Spec {
    let mut r = Rng::new(seed, "game-night");
    let size = size.max(2);
    let mut agents = Vec::new();
    for i in 0..size {
        let name = name_of(i);
        let mut config = AgentConfig::new(address(&name));
        let (zone, offset) = *r.pick(GAME_ZONES);
        let mut profile = ctx(json!({"name": format!("User {i}"), "timezone": zone}));
        if i > 0 {
            let mut windows = Vec::new();
            for _ in 0..=r.below(2) {
                let (date, start, end) = *r.pick(GAME_SLOTS);
                let shift = |hm: &str| {
                    let (h, m) = hm.split_once(':').unwrap_or(("0", "0"));
                    let mins =
                        h.parse::<i64>().unwrap_or(0) * 60 + m.parse::<i64>().unwrap_or(0) + offset;
                    format!(
                        "{:02}:{:02}",
                        mins.rem_euclid(1440) / 60,
                        mins.rem_euclid(60)
                    )
                };
                windows.push(json!({"date": date, "start": shift(start), "end": shift(end)}));
            }
            profile.insert("time_windows".into(), json!(windows));
        }
        config.profile = profile;
        let lo = r.between(5_000, 60_000);
        agents.push(clean_agent(
            name,
            config,
            UserModel {
                delay: (lo, lo + r.between(0, 60_000)),
                // The first consent prompt shares; a second one (the binding participant's
                // flexibility request) gives way three times in four (`random`).
                consent: vec![ConsentPolicy::Approve, ConsentPolicy::Random],
                resolution: vec![ResolutionPolicy::Confirm],
                excuse_reason: None,
                key_change: KeyChangePolicy::Accept,
                suggestions: SuggestionPolicy::Ignore,
            },
        ));
    }
    let group = GroupSpec {
        coordinator: 0,
        participants: (1..size).collect(),
        at: Duration::from_secs(1),
        intent: Intent {
            category: "group_scheduling".into(),
            summary: format!("Game night for {size}"),
            urgency: None,
            scope_change: None,
        },
        context: ctx(json!({
            "event_type": "game night",
            "duration": "PT3H",
            "timezone": "Europe/London",
            "time_windows": ["2026-03-27 19:00-23:00", "2026-03-28 18:00-23:30"],
        })),
        confirmation: GroupConfirmation::All,
    };
    Spec {
        name: "game_night_world".into(),
        summary: format!("game night of seed {seed} for {size}"),
        start: Timestamp::parse_rfc3339("2026-03-23T09:00:00Z").unwrap_or(Timestamp::ZERO),
        relay: RelaySpec {
            config: RelayConfig {
                domain: DOMAIN.into(),
                ..RelayConfig::default()
            },
            crashes: Vec::new(),
        },
        federation: None,
        agents,
        partitions: Vec::new(),
        threads: Vec::new(),
        groups: vec![group],
        spaces: Vec::new(),
        commands: Vec::new(),
        key_changes: Vec::new(),
        run_for: Duration::from_secs(3600),
        settle: Duration::from_secs(3600),
        expect: Vec::new(),
        transcript: false,
        known_issues: Vec::new(),
        crash_mid_step: false,
    }
}

/// Parses `A..B` (B excluded), `A..=B` or a single `A`.
pub fn parse_seeds(s: &str) -> Option<std::ops::Range<u64>> {
    if let Some((a, b)) = s.split_once("..=") {
        let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        if a > b {
            return None;
        }
        return Some(a..b.checked_add(1)?);
    }
    if let Some((a, b)) = s.split_once("..") {
        let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        return (a < b).then_some(a..b);
    }
    let a: u64 = s.trim().parse().ok()?;
    Some(a..a.checked_add(1)?)
}

/// The command that reproduces one swarm world with its transcript.
pub fn reproduce_command(seed: u64, p: Params) -> String {
    format!(
        "a2acp-sim run swarm --seed {seed} --agents {} --threads {}{}{}{}{}{}{}{}{}",
        p.agents,
        p.threads,
        if p.domains > 1 {
            format!(" --domains {}", p.domains)
        } else {
            String::new()
        },
        if p.groups { " --groups" } else { "" },
        if p.spaces { " --spaces" } else { "" },
        if p.rotations { " --rotations" } else { "" },
        if p.consent { " --consent" } else { "" },
        if p.faults { "" } else { " --no-faults" },
        if p.calm { " --calm" } else { "" },
        if p.long_offline {
            ""
        } else {
            " --short-offline"
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse() {
        assert_eq!(parse_seeds("3..7"), Some(3..7));
        assert_eq!(parse_seeds("3..=7"), Some(3..8));
        assert_eq!(parse_seeds("5"), Some(5..6));
        assert_eq!(parse_seeds("7..3"), None);
        assert_eq!(parse_seeds("x..3"), None);
    }

    #[test]
    fn worlds_are_a_function_of_the_seed() {
        let a = generate(42, Params::default());
        let b = generate(42, Params::default());
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let c = generate(43, Params::default());
        assert_ne!(format!("{a:?}"), format!("{c:?}"));
    }
}
