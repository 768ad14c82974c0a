//! Permission tiers (spec §7.1), relationship overrides (§7.2) and how a field resolves.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::address::Address;
use crate::packet::Intent;
use crate::receipt::Basis;

pub mod usage;

pub use usage::{usage_policy, UsagePolicy};

/// A sharing tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Shared without asking.
    AlwaysShare,
    /// The user is asked first (also the default for unknown fields).
    AskFirst,
    /// Never shared, never offered in a prompt.
    NeverShare,
}

impl Tier {
    /// The tier's config name.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::AlwaysShare => "always_share",
            Tier::AskFirst => "ask_first",
            Tier::NeverShare => "never_share",
        }
    }

    /// Parses a config name.
    pub fn parse(s: &str) -> Option<Tier> {
        match s {
            "always_share" | "always" => Some(Tier::AlwaysShare),
            "ask_first" | "ask" => Some(Tier::AskFirst),
            "never_share" | "never" => Some(Tier::NeverShare),
            _ => None,
        }
    }
}

/// The three base tiers (§7.1). Entries are field names or permission categories.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PermissionTiers {
    /// Shared automatically.
    #[serde(default)]
    pub always_share: BTreeSet<String>,
    /// Asked first.
    #[serde(default)]
    pub ask_first: BTreeSet<String>,
    /// Never shared.
    #[serde(default)]
    pub never_share: BTreeSet<String>,
    /// Tiers that depend on what a thread is about (§6.5: "the user may have different
    /// sharing preferences for game night with friends versus dinner with Bob"), keyed by
    /// a phrase of the intent (see [`IntentTiers`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub intents: BTreeMap<String, IntentTiers>,
    /// The usage rules shared values travel with, by field name or category
    /// (SPEC-NOTES "Usage rules").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage: BTreeMap<String, UsagePolicy>,
}

/// Tiers for the threads whose intent names a phrase (SPEC-NOTES "Permissions (§7)",
/// intent-dependent tiers). The phrase matches an intent whose category is the phrase, or
/// whose summary contains it as whole words, ignoring case (`game night` matches "Game
/// night on Friday", not "endgame nights"). Entries are field names or categories, as in
/// the base tiers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IntentTiers {
    /// Shared without asking in these threads — except a field the base tiers never
    /// share: an intent never loosens never_share.
    #[serde(default)]
    pub always_share: BTreeSet<String>,
    /// Asked first in these threads, even if always_share otherwise (a relationship
    /// promotion still wins).
    #[serde(default)]
    pub ask_first: BTreeSet<String>,
    /// Never shared in these threads, whatever else says.
    #[serde(default)]
    pub never_share: BTreeSet<String>,
}

impl IntentTiers {
    /// Whether the phrase `key` names `intent`.
    pub fn matches(key: &str, intent: &Intent) -> bool {
        let words = |s: &str| -> Vec<String> {
            s.split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_lowercase)
                .collect()
        };
        let k = words(key);
        if k.is_empty() {
            return false;
        }
        if words(&intent.category) == k {
            return true;
        }
        let s = words(&intent.summary);
        s.windows(k.len()).any(|w| w == k.as_slice())
    }
}

impl PermissionTiers {
    /// The onboarding defaults of §14.1: ask_first for everything except timezone and
    /// general area; the §7.1 never_share list.
    pub fn onboarding_defaults() -> Self {
        let set = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        PermissionTiers {
            always_share: set(&["timezone", "general_location_area"]),
            ask_first: set(&[
                "general_availability",
                "event_preferences",
                "specific_availability",
                "dietary",
                "budget_range",
                "specific_location",
                "transport_mode",
                "contact_details",
                "project_details",
            ]),
            never_share: set(&[
                "health_info",
                "financial_details_beyond_budget",
                "work_schedule_internals",
                "private_conversations",
                "passwords_or_credentials",
                "other_peoples_information",
            ]),
            intents: BTreeMap::new(),
            usage: BTreeMap::new(),
        }
    }

    /// Moves `name` into `tier`, removing it from the others.
    pub fn set(&mut self, name: &str, tier: Tier) {
        self.always_share.remove(name);
        self.ask_first.remove(name);
        self.never_share.remove(name);
        match tier {
            Tier::AlwaysShare => self.always_share.insert(name.to_string()),
            Tier::AskFirst => self.ask_first.insert(name.to_string()),
            Tier::NeverShare => self.never_share.insert(name.to_string()),
        };
    }

    /// Moves `name` into `tier` for the threads whose intent names `phrase`; `None`
    /// removes it from that intent's tiers (the base tiers apply again).
    pub fn set_for_intent(&mut self, phrase: &str, name: &str, tier: Option<Tier>) {
        let e = self.intents.entry(phrase.to_string()).or_default();
        e.always_share.remove(name);
        e.ask_first.remove(name);
        e.never_share.remove(name);
        match tier {
            Some(Tier::AlwaysShare) => e.always_share.insert(name.to_string()),
            Some(Tier::AskFirst) => e.ask_first.insert(name.to_string()),
            Some(Tier::NeverShare) => e.never_share.insert(name.to_string()),
            None => false,
        };
        if e.always_share.is_empty() && e.ask_first.is_empty() && e.never_share.is_empty() {
            self.intents.remove(phrase);
        }
    }
}

/// Per-relationship overrides (§7.2).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RelationshipOverride {
    /// The user's label for the relationship.
    #[serde(default)]
    pub label: String,
    /// Promoted to always_share for this agent.
    #[serde(default)]
    pub promote_to_always_share: BTreeSet<String>,
    /// Restricted to never_share for this agent.
    #[serde(default)]
    pub restrict_to_never_share: BTreeSet<String>,
    /// Free-form notes.
    #[serde(default)]
    pub notes: String,
}

/// The permission category a context field belongs to, when its name is not itself a
/// category (SPEC-NOTES §7.1). Unknown fields have none.
pub fn category_of(field: &str) -> Option<&'static str> {
    Some(match field {
        "time_windows" | "availability" | "proposed_date" | "date" | "time" => {
            "specific_availability"
        }
        "general_availability" => "general_availability",
        "location_preference" | "area" | "city" | "general_area" => "general_location_area",
        "address" | "home_address" | "exact_location" | "coordinates" | "personal_location" => {
            "specific_location"
        }
        "dietary" | "dietary_requirements" | "allergies_dietary" => "dietary",
        "budget" | "budget_range" => "budget_range",
        "transport" | "transport_mode" => "transport_mode",
        "phone" | "email" | "contact" => "contact_details",
        "event_type" | "party_size" | "cuisine_preference" | "flexibility" | "duration" => {
            "event_preferences"
        }
        "health" | "medical" | "health_conditions" | "medications" => "health_info",
        "salary" | "income" | "bank_details" | "debts" => "financial_details_beyond_budget",
        "password" | "credentials" | "api_key" => "passwords_or_credentials",
        "timezone" | "tz" => "timezone",
        _ => return None,
    })
}

/// Resolves the tier of `field` for `peer` in the spec's order (§7.2): the relationship
/// override first, then the base tiers, else ask_first. A field matches an entry by its
/// own name or by its category; where both match different tiers, the more restrictive
/// wins within the same level.
pub fn resolve_tier(
    tiers: &PermissionTiers,
    overrides: &BTreeMap<Address, RelationshipOverride>,
    peer: &Address,
    field: &str,
) -> Tier {
    explain_tier(tiers, overrides, peer, field).0
}

/// [`resolve_tier`], and what gave the tier (a consent receipt's [`Basis`]).
fn explain_tier(
    tiers: &PermissionTiers,
    overrides: &BTreeMap<Address, RelationshipOverride>,
    peer: &Address,
    field: &str,
) -> (Tier, Basis) {
    let names: Vec<&str> = std::iter::once(field).chain(category_of(field)).collect();
    let over = |t: Tier| {
        (
            t,
            Basis::RelationshipOverride {
                tier: t.as_str().into(),
            },
        )
    };
    let base = |t: Tier| {
        (
            t,
            Basis::Tier {
                tier: t.as_str().into(),
            },
        )
    };
    if let Some(o) = overrides.get(peer) {
        if names.iter().any(|n| o.restrict_to_never_share.contains(*n)) {
            return over(Tier::NeverShare);
        }
        if names.iter().any(|n| o.promote_to_always_share.contains(*n)) {
            return over(Tier::AlwaysShare);
        }
    }
    if names.iter().any(|n| tiers.never_share.contains(*n)) {
        return base(Tier::NeverShare);
    }
    if names.iter().any(|n| tiers.ask_first.contains(*n)) {
        return base(Tier::AskFirst);
    }
    if names.iter().any(|n| tiers.always_share.contains(*n)) {
        return base(Tier::AlwaysShare);
    }
    base(Tier::AskFirst)
}

/// Resolves the tier of `field` for `peer` in a thread about `intent` (§6.5, §7.2):
/// never_share of the relationship override, then of the intent's tiers; the
/// relationship's promotion; the intent's ask_first, then its always_share (unless the
/// base tiers never share the field); then the base tiers as [`resolve_tier`]. Without an
/// intent, or when no intent phrase matches, this is [`resolve_tier`].
pub fn resolve_tier_in(
    tiers: &PermissionTiers,
    overrides: &BTreeMap<Address, RelationshipOverride>,
    peer: &Address,
    intent: Option<&Intent>,
    field: &str,
) -> Tier {
    explain_tier_in(tiers, overrides, peer, intent, field).0
}

/// [`resolve_tier_in`], and what gave the tier (a consent receipt's [`Basis`]).
pub fn explain_tier_in(
    tiers: &PermissionTiers,
    overrides: &BTreeMap<Address, RelationshipOverride>,
    peer: &Address,
    intent: Option<&Intent>,
    field: &str,
) -> (Tier, Basis) {
    let rules: Vec<(&String, &IntentTiers)> = match intent {
        Some(i) => tiers
            .intents
            .iter()
            .filter(|(k, _)| IntentTiers::matches(k, i))
            .collect(),
        None => Vec::new(),
    };
    if rules.is_empty() {
        return explain_tier(tiers, overrides, peer, field);
    }
    let names: Vec<&str> = std::iter::once(field).chain(category_of(field)).collect();
    let has = |set: &BTreeSet<String>| names.iter().any(|n| set.contains(*n));
    let by_intent = |phrase: &str, t: Tier| {
        (
            t,
            Basis::IntentTier {
                phrase: phrase.to_string(),
                tier: t.as_str().into(),
            },
        )
    };
    let o = overrides.get(peer);
    if o.is_some_and(|o| has(&o.restrict_to_never_share)) {
        return explain_tier(tiers, overrides, peer, field);
    }
    if let Some((k, _)) = rules.iter().find(|(_, r)| has(&r.never_share)) {
        return by_intent(k, Tier::NeverShare);
    }
    if o.is_some_and(|o| has(&o.promote_to_always_share)) {
        return explain_tier(tiers, overrides, peer, field);
    }
    if let Some((k, _)) = rules.iter().find(|(_, r)| has(&r.ask_first)) {
        return by_intent(k, Tier::AskFirst);
    }
    if let Some((k, _)) = rules.iter().find(|(_, r)| has(&r.always_share)) {
        if !has(&tiers.never_share) {
            return by_intent(k, Tier::AlwaysShare);
        }
    }
    explain_tier(tiers, overrides, peer, field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_order() {
        let tiers = PermissionTiers::onboarding_defaults();
        let bob = Address::parse("agent:bob@a2acp.io").unwrap();
        let sarah = Address::parse("agent:sarah@a2acp.io").unwrap();
        let mut o = BTreeMap::new();
        o.insert(
            bob.clone(),
            RelationshipOverride {
                promote_to_always_share: ["dietary", "specific_availability"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                ..Default::default()
            },
        );
        o.insert(
            sarah.clone(),
            RelationshipOverride {
                restrict_to_never_share: ["budget_range"].iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
        );
        assert_eq!(resolve_tier(&tiers, &o, &bob, "dietary"), Tier::AlwaysShare);
        assert_eq!(
            resolve_tier(&tiers, &o, &bob, "time_windows"),
            Tier::AlwaysShare
        );
        assert_eq!(resolve_tier(&tiers, &o, &sarah, "dietary"), Tier::AskFirst);
        assert_eq!(
            resolve_tier(&tiers, &o, &sarah, "budget_range"),
            Tier::NeverShare
        );
        assert_eq!(
            resolve_tier(&tiers, &o, &sarah, "timezone"),
            Tier::AlwaysShare
        );
        assert_eq!(
            resolve_tier(&tiers, &o, &sarah, "location_preference"),
            Tier::AlwaysShare
        );
        assert_eq!(
            resolve_tier(&tiers, &o, &sarah, "medications"),
            Tier::NeverShare
        );
        assert_eq!(
            resolve_tier(&tiers, &o, &sarah, "favourite_colour"),
            Tier::AskFirst
        );
    }

    fn intent(summary: &str) -> Intent {
        Intent {
            category: "scheduling".into(),
            summary: summary.into(),
            urgency: None,
            scope_change: None,
        }
    }

    #[test]
    fn intent_tiers_apply_to_threads_whose_intent_names_them() {
        let mut tiers = PermissionTiers::onboarding_defaults();
        tiers.set_for_intent("game night", "specific_location", Some(Tier::AlwaysShare));
        tiers.set_for_intent("game night", "health_info", Some(Tier::AlwaysShare));
        tiers.set_for_intent("game night", "timezone", Some(Tier::AskFirst));
        tiers.set_for_intent("work", "budget_range", Some(Tier::NeverShare));
        let bob = Address::parse("agent:bob@a2acp.io").unwrap();
        let mut o = BTreeMap::new();
        o.insert(
            bob.clone(),
            RelationshipOverride {
                promote_to_always_share: ["budget_range", "timezone"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                ..Default::default()
            },
        );
        let games = intent("Game night on Friday (dinner + games)");
        let dinner = intent("Dinner on Friday");
        let r = |i: Option<&Intent>, f: &str| resolve_tier_in(&tiers, &o, &bob, i, f);
        // The address (a category entry) is shared for game night, asked for dinner.
        assert_eq!(r(Some(&games), "address"), Tier::AlwaysShare);
        assert_eq!(r(Some(&dinner), "address"), Tier::AskFirst);
        assert_eq!(r(None, "address"), Tier::AskFirst);
        // An intent never loosens the base never_share.
        assert_eq!(r(Some(&games), "medications"), Tier::NeverShare);
        // The relationship's promotion beats the intent's ask_first …
        assert_eq!(r(Some(&games), "timezone"), Tier::AlwaysShare);
        // … but not the intent's never_share.
        assert_eq!(r(Some(&intent("Work lunch")), "budget"), Tier::NeverShare);
        // Whole words only; the category matches too.
        assert!(!IntentTiers::matches(
            "game night",
            &intent("endgame nights")
        ));
        assert!(IntentTiers::matches(
            "work",
            &Intent {
                category: "Work".into(),
                ..intent("x")
            }
        ));
        assert!(!IntentTiers::matches(" ", &games));
        // Removing the last entry removes the phrase.
        tiers.set_for_intent("work", "budget_range", None);
        assert!(!tiers.intents.contains_key("work"));
    }
}
