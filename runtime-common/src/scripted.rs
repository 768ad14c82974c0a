//! The scripted user and the two people of the spec's dinner example (§4–§9), as the demo
//! and the integration tests use them: Alice runs the onboarding defaults (§14.1); Bob
//! pre-authorised his availability, dietary needs and area for Alice (§7.2). Alice shares
//! how she travels, keeps her cuisine preference to herself, and both confirm — the same
//! choices as `core/tests/dinner.rs`.

use std::collections::{BTreeMap, BTreeSet};

use a2acp_core::address::AddressError;
use a2acp_core::agent::{
    AgentConfig, Command, ConsentAnswer, FieldChoice, GroupConfirmation, Prompt, PromptKind,
    RelationshipOverride, ResolutionAnswer,
};
use a2acp_core::packet::{Context, Intent};
use a2acp_core::{Address, Timestamp};
use serde_json::json;

fn ctx(v: serde_json::Value) -> Context {
    v.as_object().cloned().unwrap_or_default()
}

/// Alice's and Bob's configurations on a relay serving `domain`.
pub fn dinner_configs(domain: &str) -> Result<(AgentConfig, AgentConfig), AddressError> {
    let alice_addr = Address::new("alice", domain)?;
    let bob_addr = Address::new("bob", domain)?;
    let mut alice = AgentConfig::new(alice_addr.clone());
    alice.profile = ctx(json!({
        "name": "Alice",
        "timezone": "Europe/London",
        "transport_mode": "driving",
        "cuisine_preference": "Italian",
        "health_info": "asthma — never shared",
    }));
    let mut bob = AgentConfig::new(bob_addr);
    bob.profile = ctx(json!({
        "name": "Bob",
        "timezone": "Europe/London",
        "time_windows": ["18:30-21:00"],
        "dietary": ["none"],
        "location_preference": "anywhere within 20 min drive of Reading centre",
    }));
    bob.overrides.insert(
        alice_addr,
        RelationshipOverride {
            label: "close_friend".into(),
            promote_to_always_share: ["specific_availability", "dietary", "general_location_area"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ..Default::default()
        },
    );
    Ok((alice, bob))
}

/// The date (`YYYY-MM-DD`) of the first Friday after `now`.
pub fn next_friday(now: Timestamp) -> String {
    let day_ms = 86_400_000u64;
    let days = now.as_millis() / day_ms;
    // 1970-01-01 was a Thursday; Monday = 0.
    let weekday = (days + 3) % 7;
    let ahead = match (4 + 7 - weekday) % 7 {
        0 => 7,
        n => n,
    };
    let t = Timestamp::from_millis((days + ahead) * day_ms);
    t.to_rfc3339()[..10].to_string()
}

/// Alice's command starting the dinner thread with `bob`.
pub fn start_dinner(bob: Address, date: &str) -> Command {
    Command::StartThread {
        to: bob,
        intent: Intent {
            category: "scheduling".into(),
            summary: "Coordinate dinner on Friday".into(),
            urgency: Some("low".into()),
            scope_change: None,
        },
        context: ctx(json!({
            "event_type": "dinner",
            "proposed_date": date,
            "time_windows": ["18:00-21:00"],
            "location_preference": "central Reading",
            "party_size": 2,
            "dietary": ["vegetarian"],
            "budget_range": "£20-40pp",
            "flexibility": {"date": "somewhat_flexible", "time": "flexible", "location": "flexible"}
        })),
    }
}

/// A user who answers every prompt the same way: shares the fields in `share` (declines
/// the others) — or, with `share_known`, every field the agent has a value for — and
/// gives `resolution` to every resolution.
#[derive(Debug, Clone)]
pub struct ScriptedUser {
    /// Fields shared when asked.
    pub share: BTreeSet<String>,
    /// Share every field asked that the agent has a value for (besides `share`).
    pub share_known: bool,
    /// The answer to resolutions.
    pub resolution: ResolutionAnswer,
}

impl ScriptedUser {
    /// The dinner's user: shares `transport_mode`, confirms.
    pub fn dinner() -> Self {
        ScriptedUser {
            share: ["transport_mode".to_string()].into_iter().collect(),
            share_known: false,
            resolution: ResolutionAnswer::Confirm,
        }
    }

    /// The game night's users (§10.2): share whatever their agent knows that is asked,
    /// confirm (the harness's `Answer::Yes`).
    pub fn game_night() -> Self {
        ScriptedUser {
            share: BTreeSet::new(),
            share_known: true,
            resolution: ResolutionAnswer::Confirm,
        }
    }

    fn shares(&self, f: &a2acp_core::agent::ConsentField) -> bool {
        self.share.contains(&f.field) || (self.share_known && f.suggested.is_some())
    }

    /// The answer to `p`.
    pub fn answer(&self, p: &Prompt) -> Command {
        match &p.kind {
            PromptKind::Consent { fields } => {
                let m: BTreeMap<String, FieldChoice> = fields
                    .iter()
                    .map(|f| {
                        let c = if self.shares(f) {
                            FieldChoice::Share
                        } else {
                            FieldChoice::DontShare
                        };
                        (f.field.clone(), c)
                    })
                    .collect();
                Command::AnswerConsent {
                    prompt_id: p.id,
                    answer: ConsentAnswer::ShareSelected(m),
                }
            }
            PromptKind::Resolution { .. } => Command::AnswerResolution {
                prompt_id: p.id,
                answer: self.resolution.clone(),
            },
        }
    }

    /// The answer as `a2acp answer` arguments.
    pub fn answer_args(&self, p: &Prompt) -> Vec<String> {
        match &p.kind {
            PromptKind::Consent { fields } => fields
                .iter()
                .map(|f| {
                    if self.shares(f) {
                        f.field.clone()
                    } else {
                        format!("{}=no", f.field)
                    }
                })
                .collect(),
            PromptKind::Resolution { .. } => match self.resolution {
                ResolutionAnswer::Confirm => vec!["confirm".to_string()],
                ResolutionAnswer::DifferentTime => vec!["different-time".to_string()],
                ResolutionAnswer::DifferentPlace => vec!["different-place".to_string()],
                ResolutionAnswer::MakeExcuse { .. } => vec!["excuse".to_string()],
                ResolutionAnswer::Decline => vec!["decline".to_string()],
                ResolutionAnswer::Alternative(i) => {
                    vec!["alternative".to_string(), (i + 1).to_string()]
                }
            },
        }
    }
}

/// The spec's game night for four (§10.2), as the group demo and the integration tests
/// use it: Alice's agent coordinates with Bob (New York), Charlie (Berlin) and Diana
/// (London). The same people as the core's `harness::game_night` (which the runtimes
/// cannot use: it is behind the core's `harness` feature), on a [`Weekend`] of choice so
/// that a demo run today proposes a date to come; a test checks that on the harness's
/// weekend both give the same configurations, intent and context.
pub mod game_night {
    use super::*;

    /// The Friday and Saturday (`YYYY-MM-DD`) the game night is about.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Weekend {
        /// Friday.
        pub friday: String,
        /// The next day.
        pub saturday: String,
    }

    impl Weekend {
        /// The first weekend after `now` ([`next_friday`]).
        pub fn after(now: Timestamp) -> Weekend {
            let friday = next_friday(now);
            let saturday = Timestamp::parse_rfc3339(&format!("{friday}T00:00:00Z"))
                .map(|t| Timestamp::from_millis(t.as_millis() + 86_400_000).to_rfc3339())
                .unwrap_or_default()
                .get(..10)
                .unwrap_or_default()
                .to_string();
            Weekend { friday, saturday }
        }
    }

    fn person(
        user: &str,
        domain: &str,
        profile: serde_json::Value,
    ) -> Result<AgentConfig, AddressError> {
        let mut c = AgentConfig::new(Address::new(user, domain)?);
        c.profile = ctx(profile);
        Ok(c)
    }

    /// Alice, the coordinator. Her never_share health note must never leave.
    pub fn alice(domain: &str) -> Result<AgentConfig, AddressError> {
        person(
            "alice",
            domain,
            json!({
                "name": "Alice",
                "timezone": "Europe/London",
                "health_info": "SECRET-alice-migraine",
            }),
        )
    }

    /// Bob in New York: free Friday and Saturday afternoons his time.
    pub fn bob(domain: &str, w: &Weekend) -> Result<AgentConfig, AddressError> {
        person(
            "bob",
            domain,
            json!({
                "name": "Bob",
                "timezone": "America/New_York",
                "time_windows": [format!("{} 15:00-19:00", w.friday), format!("{} 15:00-19:00", w.saturday)],
                "dietary": ["vegetarian"],
                "budget_range": "$5-25 each",
                "health_info": "SECRET-bob-insulin",
            }),
        )
    }

    /// Charlie in Berlin: Friday evening, only a Saturday morning.
    pub fn charlie(domain: &str, w: &Weekend) -> Result<AgentConfig, AddressError> {
        person(
            "charlie",
            domain,
            json!({
                "name": "Charlie",
                "timezone": "Europe/Berlin",
                "time_windows": [
                    {"date": w.friday, "start": "20:30", "end": "00:30"},
                    format!("{} 10:00-12:00", w.saturday)
                ],
                "dietary": "nut allergy",
                "health_info": "SECRET-charlie-epipen",
            }),
        )
    }

    /// Diana in London: Saturday evening, and Friday evening when `friday`.
    pub fn diana(domain: &str, w: &Weekend, friday: bool) -> Result<AgentConfig, AddressError> {
        let mut windows = vec![json!(format!("{} 19:00-23:00", w.saturday))];
        if friday {
            windows.insert(0, json!(format!("{} 20:00-23:00", w.friday)));
        }
        person(
            "diana",
            domain,
            json!({
                "name": "Diana",
                "timezone": "Europe/London",
                "time_windows": windows,
                "health_info": "SECRET-diana-pregnant",
            }),
        )
    }

    /// The intent.
    pub fn intent() -> Intent {
        Intent {
            category: "group_scheduling".into(),
            summary: "Game night for 4".into(),
            urgency: None,
            scope_change: None,
        }
    }

    /// What Alice says when she starts it.
    pub fn context(w: &Weekend) -> Context {
        ctx(json!({
            "event_type": "game night",
            "duration": "PT3H",
            "timezone": "Europe/London",
            "time_windows": [format!("{} 19:00-23:00", w.friday), format!("{} 18:00-23:30", w.saturday)],
            "budget_range": "£10-30pp",
        }))
    }

    /// Alice's command starting the game night with `participants`.
    pub fn start(participants: Vec<Address>, w: &Weekend, quorum: Option<u32>) -> Command {
        Command::StartGroupThread {
            participants,
            intent: intent(),
            context: context(w),
            confirmation: quorum.map_or(GroupConfirmation::All, GroupConfirmation::Quorum),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runtime's game night is the harness's, on the harness's weekend.
    #[test]
    fn the_game_night_is_the_harness_one() {
        use a2acp_core::harness::game_night as h;
        let w = game_night::Weekend::after(Timestamp::parse_rfc3339(h::START).unwrap());
        assert_eq!(
            w,
            game_night::Weekend {
                friday: "2026-03-27".into(),
                saturday: "2026-03-28".into()
            }
        );
        let d = "a2acp.io";
        assert_eq!(game_night::alice(d).unwrap(), h::alice(d));
        assert_eq!(game_night::bob(d, &w).unwrap(), h::bob(d));
        assert_eq!(game_night::charlie(d, &w).unwrap(), h::charlie(d));
        for friday in [true, false] {
            assert_eq!(
                game_night::diana(d, &w, friday).unwrap(),
                h::diana(d, friday)
            );
        }
        assert_eq!(game_night::intent(), h::intent());
        assert_eq!(game_night::context(&w), h::context());
    }

    #[test]
    fn friday() {
        // 2026-03-21 was a Saturday.
        let t = Timestamp::parse_rfc3339("2026-03-21T14:30:00Z").unwrap();
        assert_eq!(next_friday(t), "2026-03-27");
        let f = Timestamp::parse_rfc3339("2026-03-27T10:00:00Z").unwrap();
        assert_eq!(next_friday(f), "2026-04-03");
    }
}
