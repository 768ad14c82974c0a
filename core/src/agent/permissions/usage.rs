//! Usage rules as the sharer sets them (SPEC-NOTES "Usage rules"): per field or
//! permission category, whether a shared value is bound to the thread's purpose, when it
//! expires, and whether it may be passed on. The rule itself travels in the packet's
//! sharing declaration ([`UsageRule`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{category_of, PermissionTiers};
use crate::packet::{Intent, UsageRule};
use crate::time::Timestamp;

/// Longest expiry a policy sets (ten years): a longer one is refused as a typo.
pub const MAX_EXPIRES_AFTER: Duration = Duration::from_secs(10 * 365 * 86_400);

/// The rule the user's tiers set for one field or category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UsagePolicy {
    /// The value may be used only for what the thread it is shared in is about (the
    /// rule's `purpose` is that thread's intent category).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub purpose: bool,
    /// Seconds after sharing when the receiver deletes the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_after: Option<u64>,
    /// The receiver passes the value to no one else.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_reshare: bool,
}

impl UsagePolicy {
    /// Whether the policy restricts nothing (it is then removed).
    pub fn is_empty(&self) -> bool {
        !self.purpose && self.expires_after.is_none() && !self.no_reshare
    }

    /// The rule a value shared `now` in a thread about `intent` travels with.
    pub fn rule(&self, now: Timestamp, intent: &Intent) -> UsageRule {
        UsageRule {
            purpose: (self.purpose && !intent.category.trim().is_empty())
                .then(|| intent.category.clone()),
            expires_at: self
                .expires_after
                .map(|s| now.add(Duration::from_secs(s)).to_rfc3339()),
            no_reshare: self.no_reshare,
        }
    }

    /// This policy and `other` together: each restriction of either.
    fn and(self, other: UsagePolicy) -> UsagePolicy {
        UsagePolicy {
            purpose: self.purpose || other.purpose,
            expires_after: match (self.expires_after, other.expires_after) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            no_reshare: self.no_reshare || other.no_reshare,
        }
    }
}

/// The policy for `field`: its own entry and its category's together (the stricter of
/// each), or `None` when neither has one.
pub fn usage_policy(tiers: &PermissionTiers, field: &str) -> Option<UsagePolicy> {
    std::iter::once(field)
        .chain(category_of(field))
        .filter_map(|n| tiers.usage.get(n).copied())
        .reduce(UsagePolicy::and)
        .filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_and_its_category_combine_to_the_stricter_rule() {
        let mut tiers = PermissionTiers::default();
        tiers.usage.insert(
            "dietary".into(),
            UsagePolicy {
                expires_after: Some(3_600),
                ..Default::default()
            },
        );
        tiers.usage.insert(
            "allergies_dietary".into(),
            UsagePolicy {
                no_reshare: true,
                expires_after: Some(7_200),
                ..Default::default()
            },
        );
        let p = usage_policy(&tiers, "allergies_dietary").unwrap();
        assert_eq!(p.expires_after, Some(3_600));
        assert!(p.no_reshare && !p.purpose);
        assert_eq!(usage_policy(&tiers, "budget"), None);
        let intent = Intent {
            category: "dinner".into(),
            summary: "Dinner".into(),
            urgency: None,
            scope_change: None,
        };
        let rule = UsagePolicy { purpose: true, ..p }.rule(Timestamp(0), &intent);
        assert_eq!(rule.purpose.as_deref(), Some("dinner"));
        assert_eq!(rule.expires_at.as_deref(), Some("1970-01-01T01:00:00Z"));
        assert!(rule.no_reshare);
    }
}
