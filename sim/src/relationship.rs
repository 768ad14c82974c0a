//! §11.2 relationship worlds: the same two people coordinating dinner again and again, so
//! that relationship memory can be measured at work — the first contact against the
//! fourteenth interaction.
//!
//! `world(seed, dinners)` is a pure function of the seed. The spec's world (§11.2): Alice
//! asks Bob's agent for dinner; Bob has promoted his availability, dietary and area for
//! Alice (a close friend), so his agent answers her needs without asking him; Bob's agent
//! asks back for what a dinner needs that Alice did not say (transport, cuisine), which
//! reaches Alice's user once. Drawn from the seed: both profiles, both users' delays,
//! Alice's windows and flexibility per dinner, how Alice's user answers the one consent
//! prompt (share all, share some, share nothing), and the days between dinners (1 to 5,
//! so fourteen dinners span weeks, within the 90 days memory stays fresh). Users accept
//! the §7.2 "always share?" suggestions. A clean network: the figure is the protocol's.

use std::time::Duration;

use a2acp_core::agent::{AgentConfig, RelationshipOverride};
use a2acp_core::packet::Intent;
use a2acp_core::relay::RelayConfig;
use a2acp_core::{Address, Timestamp};
use serde_json::json;

use crate::model::{ConsentPolicy, KeyChangePolicy, ResolutionPolicy, SuggestionPolicy, UserModel};
use crate::scenario::{RelaySpec, Spec, ThreadSpec};
use crate::swarm::{clean_agent, ctx};
use crate::util::Rng;

const DOMAIN: &str = "a2acp.io";

/// Alice's windows and Bob's: every pair overlaps by two hours or more.
const ALICE_WINDOWS: &[&str] = &["18:00-21:00", "18:30-22:00", "19:00-22:30"];
const BOB_WINDOWS: &[&str] = &["18:30-21:00", "19:00-23:00", "18:00-21:30"];
const TRANSPORT: &[&str] = &["driving", "walking", "cycling", "train"];
const CUISINE: &[&str] = &["Italian", "Thai", "Indian", "Japanese", "Lebanese"];
const DIETARY: &[&str] = &["none", "vegetarian", "vegan", "gluten-free", "halal"];
const AREAS: &[&str] = &[
    "central Reading",
    "anywhere within 20 min drive of Reading centre",
    "Caversham",
];
const FLEX: &[&str] = &["flexible", "somewhat_flexible", "not_flexible"];

fn address(name: &str) -> Address {
    Address::new(name, DOMAIN).expect("alice and bob are valid address users")
}

/// The world of `seed`: `dinners` dinners Alice starts with Bob, one after the other.
pub fn world(seed: u64, dinners: usize) -> Spec {
    let mut r = Rng::new(seed, "relationship");
    let start = Timestamp::parse_rfc3339("2026-03-02T09:00:00Z").unwrap_or(Timestamp::ZERO);
    let alice_diet = *r.pick(DIETARY);
    let mut alice = AgentConfig::new(address("alice"));
    alice.profile = ctx(json!({
        "name": "Alice",
        "timezone": "Europe/London",
        "transport_mode": r.pick(TRANSPORT),
        "cuisine_preference": r.pick(CUISINE),
        "health_info": "SECRET-asthma-inhaler",
    }));
    let mut bob = AgentConfig::new(address("bob"));
    bob.profile = ctx(json!({
        "name": "Bob",
        "timezone": "Europe/London",
        "time_windows": [r.pick(BOB_WINDOWS)],
        "dietary": [r.pick(DIETARY)],
        "location_preference": r.pick(AREAS),
    }));
    bob.overrides.insert(
        address("alice"),
        RelationshipOverride {
            label: "close_friend".into(),
            promote_to_always_share: ["specific_availability", "dietary", "general_location_area"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ..RelationshipOverride::default()
        },
    );
    let consent = *r.pick(&[
        ConsentPolicy::Approve,
        ConsentPolicy::ApproveSome,
        ConsentPolicy::DeclineAll,
    ]);
    let user = |r: &mut Rng, consent: ConsentPolicy| {
        let lo = r.between(5_000, 120_000);
        UserModel {
            delay: (lo, lo + r.between(0, 60_000)),
            consent: vec![consent],
            resolution: vec![ResolutionPolicy::Confirm],
            excuse_reason: None,
            key_change: KeyChangePolicy::Accept,
            suggestions: SuggestionPolicy::Accept,
        }
    };
    let alice_user = user(&mut r, consent);
    let bob_user = user(&mut r, ConsentPolicy::Approve);
    let mut threads = Vec::new();
    let mut at = Duration::from_secs(1);
    for _ in 0..dinners {
        let day = start.add(at);
        // The dinner is two to five days ahead.
        let date = day.add(Duration::from_secs(86_400 * r.between(2, 5)));
        let date = date.to_rfc3339().chars().take(10).collect::<String>();
        threads.push(ThreadSpec {
            from: 0,
            to: 1,
            at,
            intent: Intent {
                category: "scheduling".into(),
                summary: "Coordinate dinner".into(),
                urgency: Some("low".into()),
                scope_change: None,
            },
            context: ctx(json!({
                "event_type": "dinner",
                "proposed_date": date,
                "time_windows": [r.pick(ALICE_WINDOWS)],
                "location_preference": "central Reading",
                "party_size": 2,
                "dietary": [alice_diet],
                "budget_range": "£20-40pp",
                "flexibility": {"date": r.pick(FLEX), "time": r.pick(FLEX), "location": r.pick(FLEX)},
            })),
        });
        at += Duration::from_secs(86_400 * r.between(1, 5));
    }
    Spec {
        name: "relationship_world".into(),
        summary: format!("{dinners} dinners of seed {seed} between alice and bob"),
        start,
        relay: RelaySpec {
            config: RelayConfig {
                domain: DOMAIN.into(),
                ..RelayConfig::default()
            },
            crashes: Vec::new(),
        },
        federation: None,
        agents: vec![
            clean_agent("alice".into(), alice, alice_user),
            clean_agent("bob".into(), bob, bob_user),
        ],
        partitions: Vec::new(),
        threads,
        groups: Vec::new(),
        spaces: Vec::new(),
        commands: Vec::new(),
        key_changes: Vec::new(),
        run_for: at + Duration::from_secs(3600),
        settle: Duration::from_secs(3600),
        expect: Vec::new(),
        transcript: false,
        known_issues: Vec::new(),
        crash_mid_step: false,
    }
}

/// What the first resolution of each dinner took, over many worlds: (packets, consent
/// prompts) per dinner index, and the worlds whose checks failed.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Per dinner (0 = first contact): every world's (packets up to the first resolution,
    /// consent prompts), for the dinners that reached one.
    pub per_dinner: Vec<Vec<(u32, u32)>>,
    /// Dinners that reached no resolution, per dinner index.
    pub unresolved: Vec<u64>,
    /// Seeds whose invariants failed.
    pub failed: Vec<u64>,
}

/// Runs `world(seed, dinners)` for every seed.
pub fn measure(seeds: std::ops::Range<u64>, dinners: usize) -> Figures {
    let mut f = Figures {
        per_dinner: vec![Vec::new(); dinners],
        unresolved: vec![0; dinners],
        failed: Vec::new(),
    };
    for seed in seeds {
        let (report, _, _) = crate::Sim::new(world(seed, dinners), seed).run();
        if !report.passed() {
            f.failed.push(seed);
        }
        let mut seen = vec![false; dinners];
        for &(k, packets, prompts) in &report.first_resolution {
            if let (Some(d), Some(s)) = (f.per_dinner.get_mut(k), seen.get_mut(k)) {
                d.push((packets, prompts));
                *s = true;
            }
        }
        for (k, s) in seen.iter().enumerate() {
            if !s {
                f.unresolved[k] += 1;
            }
        }
    }
    f
}

impl Figures {
    /// The figures as text: per dinner, the mean and the worst packets up to the first
    /// resolution and consent prompts, and how many dinners met the §11.2 claim (first
    /// contact: ≤ 4 packets and ≤ 1 prompt; every later dinner: 2 packets — one round
    /// trip — and no prompt).
    pub fn render(&self, seeds: &std::ops::Range<u64>, dinners: usize) -> String {
        let mut out = format!(
            "# §11.2 relationship memory: {} worlds (seeds {}..{}), {dinners} dinners each, alice → bob\n",
            seeds.end - seeds.start,
            seeds.start,
            seeds.end
        );
        out.push_str("# dinner | resolved | packets to resolution: mean / max | consent prompts: mean / max | met the claim\n");
        for (k, d) in self.per_dinner.iter().enumerate() {
            let n = d.len().max(1) as f64;
            let mean = |f: fn(&(u32, u32)) -> u32| d.iter().map(f).map(f64::from).sum::<f64>() / n;
            let max = |f: fn(&(u32, u32)) -> u32| d.iter().map(f).max().unwrap_or(0);
            let met = d.iter().filter(|x| meets_claim(k, **x)).count();
            out.push_str(&format!(
                "{:>8} | {:>8} | {:>6.2} / {:<3} | {:>6.2} / {:<3} | {met}/{}\n",
                k + 1,
                d.len(),
                mean(|x| x.0),
                max(|x| x.0),
                mean(|x| x.1),
                max(|x| x.1),
                d.len() + self.unresolved.get(k).copied().unwrap_or(0) as usize,
            ));
        }
        out.push_str(&format!(
            "# worlds whose invariants failed: {}{}\n",
            self.failed.len(),
            self.failed
                .first()
                .map(|s| format!(
                    " (first: a2acp-sim run relationship --seed {s} --threads {dinners})"
                ))
                .unwrap_or_default()
        ));
        out
    }

    /// Whether every dinner of every world met the §11.2 claim and every world passed.
    pub fn all_met(&self) -> bool {
        self.failed.is_empty()
            && self.unresolved.iter().all(|u| *u == 0)
            && self
                .per_dinner
                .iter()
                .enumerate()
                .all(|(k, d)| d.iter().all(|x| meets_claim(k, *x)))
    }
}

/// The §11.2 claim for dinner `k` (0 = first contact): (packets, prompts).
pub fn meets_claim(k: usize, (packets, prompts): (u32, u32)) -> bool {
    if k == 0 {
        packets <= 4 && prompts <= 1
    } else {
        packets <= 2 && prompts == 0
    }
}
