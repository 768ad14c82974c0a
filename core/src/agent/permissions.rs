//! Permission tiers (spec §7.1), relationship overrides (§7.2) and how a field resolves.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::address::Address;

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
    let names: Vec<&str> = std::iter::once(field).chain(category_of(field)).collect();
    if let Some(o) = overrides.get(peer) {
        if names.iter().any(|n| o.restrict_to_never_share.contains(*n)) {
            return Tier::NeverShare;
        }
        if names.iter().any(|n| o.promote_to_always_share.contains(*n)) {
            return Tier::AlwaysShare;
        }
    }
    if names.iter().any(|n| tiers.never_share.contains(*n)) {
        return Tier::NeverShare;
    }
    if names.iter().any(|n| tiers.ask_first.contains(*n)) {
        return Tier::AskFirst;
    }
    if names.iter().any(|n| tiers.always_share.contains(*n)) {
        return Tier::AlwaysShare;
    }
    Tier::AskFirst
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
}
