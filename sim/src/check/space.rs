//! Shared context spaces (§12), at the end of a run (the world healed and settled):
//!
//! - **space_convergence**: every participant of a space that is up holds it, and all its
//!   replicas are identical (same definition, same updates, so the same fields and
//!   history);
//! - **space_permission**: no update in any replica exceeds its writer's permission
//!   (`read_all` writes nothing, `write_own_fields` only fields named `<its address>/…`,
//!   a non-participant nothing), and none writes a field that is never_share for another
//!   participant (its base name) or carries a never_share profile value of its writer —
//!   checked here independently of the agent's own admission code.

use std::collections::BTreeMap;

use a2acp_core::agent::permissions::resolve_tier;
use a2acp_core::agent::space::Space;
use a2acp_core::agent::{Agent, Tier};
use a2acp_core::space::{own_prefix, SpacePermission, SpaceUpdate};
use a2acp_core::Address;

use super::never_share::{escaped, strings_of};
use super::{Checker, End};

impl Checker {
    /// The space checks over every space any agent holds.
    pub(super) fn spaces(&mut self, end: &End<'_>) {
        let mut by_id: BTreeMap<&str, Vec<(usize, &Space)>> = BTreeMap::new();
        for (i, a) in end.agents.iter().enumerate() {
            if let Some(a) = a {
                for (id, s) in a.spaces() {
                    by_id.entry(id.as_str()).or_default().push((i, s));
                }
            }
        }
        let index = |a: &Address| end.addresses.iter().position(|x| x == a);
        for (id, held) in &by_id {
            let Some(&(first, reference)) = held.first() else {
                continue;
            };
            let def = &reference.replica.definition;
            for p in &def.participants {
                let Some(k) = index(&p.address) else { continue };
                if end.agents[k].is_some() && !held.iter().any(|(i, _)| *i == k) {
                    self.fail(
                        end.at,
                        "space_convergence",
                        format!("{} never got space {id} of {}", end.names[k], def.creator),
                    );
                }
            }
            for (i, s) in &held[1..] {
                if s.replica != reference.replica {
                    self.fail(
                        end.at,
                        "space_convergence",
                        format!(
                            "space {id}: {}'s replica ({} updates, fields {:?}) differs from {}'s ({} updates, fields {:?})",
                            end.names[*i],
                            s.replica.len(),
                            s.replica.fields().keys().collect::<Vec<_>>(),
                            end.names[first],
                            reference.replica.len(),
                            reference.replica.fields().keys().collect::<Vec<_>>(),
                        ),
                    );
                }
            }
            for (i, s) in held {
                for u in s.replica.history() {
                    if let Some(why) = beyond_permission(s, u, end, &index) {
                        self.fail(
                            end.at,
                            "space_permission",
                            format!(
                                "space {id} at {}: {} by {} ({}): {why}",
                                end.names[*i], u.field, u.writer, u.update_id
                            ),
                        );
                    }
                }
            }
        }
    }
}

/// Why update `u` of space `s` exceeds what its writer may write, if it does.
fn beyond_permission(
    s: &Space,
    u: &SpaceUpdate,
    end: &End<'_>,
    index: &dyn Fn(&Address) -> Option<usize>,
) -> Option<String> {
    let def = &s.replica.definition;
    let Some(p) = def.participants.iter().find(|p| p.address == u.writer) else {
        return Some("its writer is no participant".into());
    };
    let own = own_prefix(&u.writer);
    match p.permission {
        SpacePermission::ReadAll => return Some("its writer may only read".into()),
        SpacePermission::WriteOwnFields if !u.field.starts_with(&own) => {
            return Some("its writer may write only its own fields".into())
        }
        _ => {}
    }
    // The writer's permission tiers, for every other participant.
    let writer: &Agent = index(&u.writer).and_then(|k| end.agents[k])?;
    let base = u.field.strip_prefix(&own).unwrap_or(&u.field);
    let value = serde_json::to_string(&u.value).unwrap_or_default();
    for other in def.participants.iter().filter(|p| p.address != u.writer) {
        let tier = resolve_tier(
            writer.permissions(),
            writer.overrides(),
            &other.address,
            base,
        );
        if tier == Tier::NeverShare {
            return Some(format!("`{base}` is never_share for {}", other.address));
        }
        for (field, v) in &writer.config().profile {
            let tier = resolve_tier(
                writer.permissions(),
                writer.overrides(),
                &other.address,
                field,
            );
            if tier != Tier::NeverShare {
                continue;
            }
            let mut vals = Vec::new();
            strings_of(v, &mut vals);
            if vals
                .iter()
                .any(|x| x.chars().count() >= 4 && value.contains(&escaped(x)))
            {
                return Some(format!(
                    "it carries the never_share value of `{field}` for {}",
                    other.address
                ));
            }
        }
    }
    None
}
