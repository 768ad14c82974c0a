//! The scripted user and the two people of the spec's dinner example (§4–§9), as the demo
//! and the integration tests use them: Alice runs the onboarding defaults (§14.1); Bob
//! pre-authorised his availability, dietary needs and area for Alice (§7.2). Alice shares
//! how she travels, keeps her cuisine preference to herself, and both confirm — the same
//! choices as `core/tests/dinner.rs`.

use std::collections::{BTreeMap, BTreeSet};

use a2acp_core::address::AddressError;
use a2acp_core::agent::{
    AgentConfig, Command, ConsentAnswer, FieldChoice, Prompt, PromptKind, RelationshipOverride,
    ResolutionAnswer,
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
/// the others) and gives `resolution` to every resolution.
#[derive(Debug, Clone)]
pub struct ScriptedUser {
    /// Fields shared when asked.
    pub share: BTreeSet<String>,
    /// The answer to resolutions.
    pub resolution: ResolutionAnswer,
}

impl ScriptedUser {
    /// The dinner's user: shares `transport_mode`, confirms.
    pub fn dinner() -> Self {
        ScriptedUser {
            share: ["transport_mode".to_string()].into_iter().collect(),
            resolution: ResolutionAnswer::Confirm,
        }
    }

    /// The answer to `p`.
    pub fn answer(&self, p: &Prompt) -> Command {
        match &p.kind {
            PromptKind::Consent { fields } => {
                let m: BTreeMap<String, FieldChoice> = fields
                    .iter()
                    .map(|f| {
                        let c = if self.share.contains(&f.field) {
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
                    if self.share.contains(&f.field) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn friday() {
        // 2026-03-21 was a Saturday.
        let t = Timestamp::parse_rfc3339("2026-03-21T14:30:00Z").unwrap();
        assert_eq!(next_friday(t), "2026-03-27");
        let f = Timestamp::parse_rfc3339("2026-03-27T10:00:00Z").unwrap();
        assert_eq!(next_friday(f), "2026-04-03");
    }
}
