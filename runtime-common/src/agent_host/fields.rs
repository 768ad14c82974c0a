//! The field names `permissions set` knows, and the nearest one to a misspelt name.

use super::*;

impl AgentHost {
    /// Whether `field` is a name this agent knows (a category of its tiers or of the
    /// onboarding defaults, a field of §7.1's categories, a field of its profile); if
    /// not, the error names the closest known one.
    pub(super) fn known_field(&self, field: &str) -> Result<(), String> {
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
