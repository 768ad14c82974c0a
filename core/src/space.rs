//! Shared context spaces (§12): the replica of one space, pure and deterministic.
//!
//! A space is a persistent, versioned document a few agents read and write. Each
//! participant holds a [`Replica`]: the space's [`SpaceDefinition`] (id, name, creator,
//! participants and their [`SpacePermission`]), the current value of every field, and the
//! history of every update applied. The agent (`agent::space`) carries updates between
//! replicas; this module only decides what an update does to a replica.
//!
//! # Merge rule (SPEC-NOTES "Shared context spaces (§12)")
//!
//! Every [`SpaceUpdate`] sets (or clears) one field. Updates to different fields never
//! interact. For one field the value is that of the update with the greatest
//! [`SpaceUpdate::merge_key`]: `(version, timestamp, writer, update_id)`, compared in that
//! order (addresses and ids as byte strings). A writer gives its update the version of
//! the field it saw plus one, so a write made after seeing another one wins over it; two
//! writes made concurrently (the same version) are ordered by their timestamps, then by
//! their writers' addresses, then by their ids. The history is the set of applied updates
//! keyed by `(writer, update_id)`. So a replica is a function of the *set* of updates it
//! applied: two replicas that applied the same updates, in any order, are equal.
//!
//! # Admission
//!
//! [`Replica::apply`] refuses, with a typed [`SpaceRefusal`] and the replica unchanged:
//! an update of a non-participant, of a `read_all` participant, of a `write_own_fields`
//! participant outside its own fields (fields named `<its address>/…`), a malformed field
//! name, an oversized value, an update already applied (a replay), and an update past the
//! space's limits (fields, history). Every check but the last two depends on the update
//! and the definition only, never on what was applied before.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::address::Address;
use crate::time::Timestamp;

/// Largest serialised value of one update (bytes of its JSON).
pub const MAX_VALUE_BYTES: usize = 4096;
/// Longest field name (bytes).
pub const MAX_FIELD_NAME_BYTES: usize = 160;
/// Most fields a space holds.
pub const MAX_FIELDS: usize = 256;
/// Most updates a space's history holds; later updates are refused.
pub const MAX_HISTORY: usize = 4096;
/// Most participants of a space, the creator included.
pub const MAX_PARTICIPANTS: usize = 16;
/// Longest space name (bytes).
pub const MAX_NAME_BYTES: usize = 200;

/// What a participant may write into a space (§12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpacePermission {
    /// Read everything, write nothing.
    ReadAll,
    /// Read everything, write only its own fields: those named `<its address>/…`.
    WriteOwnFields,
    /// Read and write every field.
    FullWrite,
}

impl SpacePermission {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            SpacePermission::ReadAll => "read_all",
            SpacePermission::WriteOwnFields => "write_own_fields",
            SpacePermission::FullWrite => "full_write",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "read_all" => Some(SpacePermission::ReadAll),
            "write_own_fields" => Some(SpacePermission::WriteOwnFields),
            "full_write" => Some(SpacePermission::FullWrite),
            _ => None,
        }
    }
}

impl fmt::Display for SpacePermission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One participant of a space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceParticipant {
    /// Its agent.
    pub address: Address,
    /// What it may write.
    pub permission: SpacePermission,
}

/// What a space is: fixed by its creator when it is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceDefinition {
    /// `spc_` and 12 characters.
    pub space_id: String,
    /// What the space is about, e.g. "Family trip to Lisbon".
    pub name: String,
    /// The agent that created the space and carries its updates between participants.
    pub creator: Address,
    /// When it was created.
    #[serde(with = "rfc3339")]
    pub created: Timestamp,
    /// Everyone, the creator first (always `full_write`).
    pub participants: Vec<SpaceParticipant>,
}

/// Why a definition is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefinitionError {
    /// The id is not 1–128 printable ASCII characters without spaces.
    #[error("invalid space id")]
    BadId,
    /// The name is empty or too long.
    #[error("the name is empty or longer than {MAX_NAME_BYTES} bytes")]
    BadName,
    /// The creator is not the first participant with `full_write`.
    #[error("the creator must be the first participant, with full_write")]
    CreatorNotFirst,
    /// A participant is listed twice.
    #[error("{0} is listed twice")]
    Duplicate(Address),
    /// Fewer than 2 or more than [`MAX_PARTICIPANTS`] participants.
    #[error("a space has 2 to {MAX_PARTICIPANTS} participants")]
    Count,
}

impl SpaceDefinition {
    /// Checks the definition's shape.
    pub fn validate(&self) -> Result<(), DefinitionError> {
        let id_ok = !self.space_id.is_empty()
            && self.space_id.len() <= 128
            && self.space_id.bytes().all(|b| b.is_ascii_graphic());
        if !id_ok {
            return Err(DefinitionError::BadId);
        }
        if self.name.trim().is_empty() || self.name.len() > MAX_NAME_BYTES {
            return Err(DefinitionError::BadName);
        }
        if self.participants.len() < 2 || self.participants.len() > MAX_PARTICIPANTS {
            return Err(DefinitionError::Count);
        }
        match self.participants.first() {
            Some(p) if p.address == self.creator && p.permission == SpacePermission::FullWrite => {}
            _ => return Err(DefinitionError::CreatorNotFirst),
        }
        for (i, p) in self.participants.iter().enumerate() {
            if self
                .participants
                .iter()
                .skip(i + 1)
                .any(|q| q.address == p.address)
            {
                return Err(DefinitionError::Duplicate(p.address.clone()));
            }
        }
        Ok(())
    }

    /// A participant's permission; `None` for an agent that is not a participant.
    pub fn permission(&self, who: &Address) -> Option<SpacePermission> {
        self.participants
            .iter()
            .find(|p| &p.address == who)
            .map(|p| p.permission)
    }

    /// Whether `who` is a participant.
    pub fn is_participant(&self, who: &Address) -> bool {
        self.permission(who).is_some()
    }
}

/// The prefix of the fields `who` owns: `<address>/`.
pub fn own_prefix(who: &Address) -> String {
    format!("{}/", who.as_str())
}

/// A link to an external resource (§12: a shared drive, a repository, a document).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SpaceLink {
    /// What it is, e.g. "game_rules_v3.md".
    pub title: String,
    /// Where it is: a URI (`https://…`, `mcp://…`).
    pub uri: String,
}

/// What an update writes into its field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FieldValue {
    /// A JSON value.
    Value {
        /// The value.
        value: Value,
    },
    /// A link to an external resource.
    Link {
        /// The link.
        link: SpaceLink,
    },
    /// The field is cleared (it stays in the history; [`Replica::fields`] leaves it out).
    Cleared,
}

impl FieldValue {
    /// Bytes of its JSON.
    pub fn size(&self) -> usize {
        serde_json::to_vec(self)
            .map(|v| v.len())
            .unwrap_or(usize::MAX)
    }
}

/// One write of one field: what travels between replicas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpaceUpdate {
    /// `upd_` and 12 characters, unique per writer.
    pub update_id: String,
    /// The agent that wrote it.
    pub writer: Address,
    /// The field.
    pub field: String,
    /// The field's version the writer saw, plus one.
    pub version: u64,
    /// When it was written (seconds precision: the wire carries RFC 3339 seconds).
    #[serde(with = "rfc3339")]
    pub timestamp: Timestamp,
    /// What it writes.
    pub value: FieldValue,
}

/// The order of concurrent updates of one field: the greatest wins.
pub type MergeKey<'a> = (u64, Timestamp, &'a str, &'a str);

impl SpaceUpdate {
    /// `(version, timestamp, writer, update_id)`: of two updates of one field, the one
    /// with the greater key is the field's value.
    pub fn merge_key(&self) -> MergeKey<'_> {
        (
            self.version,
            self.timestamp,
            self.writer.as_str(),
            self.update_id.as_str(),
        )
    }
}

/// Why an update was not applied. The replica is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum SpaceRefusal {
    /// The writer is not a participant.
    #[error("{writer} is not a participant")]
    NotParticipant {
        /// The writer.
        writer: Address,
    },
    /// The writer may only read.
    #[error("{writer} may only read (read_all)")]
    ReadOnly {
        /// The writer.
        writer: Address,
    },
    /// A `write_own_fields` writer wrote a field that is not its own.
    #[error("{writer} may write only its own fields, not `{field}`")]
    NotOwnField {
        /// The writer.
        writer: Address,
        /// The field.
        field: String,
    },
    /// The field name is empty, too long, or has control characters.
    #[error("invalid field name")]
    BadFieldName,
    /// The id is empty, too long or not printable ASCII, or the version is 0.
    #[error("invalid update id or version")]
    BadUpdate,
    /// The value is larger than [`MAX_VALUE_BYTES`].
    #[error("value of {size} bytes is over the limit of {MAX_VALUE_BYTES}")]
    TooLarge {
        /// Its size.
        size: usize,
    },
    /// The same update (writer and id) was applied before: a replay.
    #[error("update {update_id} of {writer} was applied before")]
    Duplicate {
        /// The writer.
        writer: Address,
        /// The update's id.
        update_id: String,
    },
    /// The space holds [`MAX_FIELDS`] fields or [`MAX_HISTORY`] updates.
    #[error("the space is full")]
    Full,
    /// An agent wrote on behalf of another: only the creator forwards others' updates.
    #[error("{sender} sent an update written by {writer}")]
    NotTheWriter {
        /// Who sent it.
        sender: Address,
        /// Whom it names as writer.
        writer: Address,
    },
    /// The update names another space.
    #[error("update for another space")]
    WrongSpace,
    /// A packet of a space this agent does not hold, from an agent that did not create
    /// it (or for an id already taken).
    #[error("unknown space")]
    UnknownSpace,
    /// The definition in a packet is invalid, not its sender's, or not the one held.
    #[error("the space's definition does not match")]
    DefinitionMismatch,
    /// A never_share field of the writer's own user (checked by the writing agent).
    #[error("`{field}` is never shared")]
    NeverShare {
        /// The field.
        field: String,
    },
    /// A value another agent shared with the writer's agent under "no re-sharing"
    /// (SPEC-NOTES "Usage rules"; checked by the writing agent): not for the other
    /// participants.
    #[error("it holds the `{field}` {from} shared with this agent only (no re-sharing)")]
    NotToBePassedOn {
        /// The field the value was shared as.
        field: String,
        /// Who shared it.
        from: Address,
    },
}

/// What applying an update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The update is now the field's value.
    Won,
    /// The update is in the history, but a greater update holds the field.
    Superseded,
}

/// One participant's copy of a space. Stored as its definition and its updates (the
/// history, in [`Replica::history`] order); restoring applies them again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "ReplicaRecord", try_from = "ReplicaRecord")]
pub struct Replica {
    /// The definition.
    pub definition: SpaceDefinition,
    /// Every applied update, by (writer, update id).
    history: BTreeMap<(Address, String), SpaceUpdate>,
    /// Per field, the key `(writer, update_id)` of its winning update.
    winners: BTreeMap<String, (Address, String)>,
}

impl Replica {
    /// An empty replica of a space.
    pub fn new(definition: SpaceDefinition) -> Self {
        Replica {
            definition,
            history: BTreeMap::new(),
            winners: BTreeMap::new(),
        }
    }

    /// Checks an update against the definition: everything that depends on the update
    /// alone (participant, permission, own fields, name, size).
    pub fn admit(&self, u: &SpaceUpdate) -> Result<(), SpaceRefusal> {
        let Some(perm) = self.definition.permission(&u.writer) else {
            return Err(SpaceRefusal::NotParticipant {
                writer: u.writer.clone(),
            });
        };
        let id_ok = !u.update_id.is_empty()
            && u.update_id.len() <= 128
            && u.update_id.bytes().all(|b| b.is_ascii_graphic());
        if !id_ok || u.version == 0 {
            return Err(SpaceRefusal::BadUpdate);
        }
        if !valid_field_name(&u.field) {
            return Err(SpaceRefusal::BadFieldName);
        }
        match perm {
            SpacePermission::ReadAll => {
                return Err(SpaceRefusal::ReadOnly {
                    writer: u.writer.clone(),
                })
            }
            SpacePermission::WriteOwnFields if !u.field.starts_with(&own_prefix(&u.writer)) => {
                return Err(SpaceRefusal::NotOwnField {
                    writer: u.writer.clone(),
                    field: u.field.clone(),
                })
            }
            _ => {}
        }
        let size = u.value.size();
        if size > MAX_VALUE_BYTES {
            return Err(SpaceRefusal::TooLarge { size });
        }
        Ok(())
    }

    /// Applies an update, or refuses it with the replica unchanged.
    pub fn apply(&mut self, u: SpaceUpdate) -> Result<Applied, SpaceRefusal> {
        self.admit(&u)?;
        let key = (u.writer.clone(), u.update_id.clone());
        if self.history.contains_key(&key) {
            return Err(SpaceRefusal::Duplicate {
                writer: u.writer,
                update_id: u.update_id,
            });
        }
        let new_field = !self.winners.contains_key(&u.field);
        if self.history.len() >= MAX_HISTORY || (new_field && self.winners.len() >= MAX_FIELDS) {
            return Err(SpaceRefusal::Full);
        }
        let wins = match self.winner(&u.field) {
            Some(w) => u.merge_key() > w.merge_key(),
            None => true,
        };
        if wins {
            self.winners.insert(u.field.clone(), key.clone());
        }
        self.history.insert(key, u);
        Ok(if wins {
            Applied::Won
        } else {
            Applied::Superseded
        })
    }

    /// The winning update of a field (a cleared field's too).
    pub fn winner(&self, field: &str) -> Option<&SpaceUpdate> {
        self.winners.get(field).and_then(|k| self.history.get(k))
    }

    /// The version of a field: its winning update's (0 if never written).
    pub fn version(&self, field: &str) -> u64 {
        self.winner(field).map_or(0, |u| u.version)
    }

    /// The current fields, cleared ones left out, by name.
    pub fn fields(&self) -> BTreeMap<&str, &SpaceUpdate> {
        self.winners
            .iter()
            .filter_map(|(f, k)| self.history.get(k).map(|u| (f.as_str(), u)))
            .filter(|(_, u)| u.value != FieldValue::Cleared)
            .collect()
    }

    /// The history, oldest first: by timestamp, then by merge key.
    pub fn history(&self) -> Vec<&SpaceUpdate> {
        let mut h: Vec<&SpaceUpdate> = self.history.values().collect();
        h.sort_by(|a, b| {
            (a.timestamp, a.merge_key(), a.field.as_str()).cmp(&(
                b.timestamp,
                b.merge_key(),
                b.field.as_str(),
            ))
        });
        h
    }

    /// Whether an update (writer, id) was applied.
    pub fn has(&self, writer: &Address, update_id: &str) -> bool {
        self.history
            .contains_key(&(writer.clone(), update_id.to_string()))
    }

    /// Updates applied.
    pub fn len(&self) -> usize {
        self.history.len()
    }

    /// Whether no update was applied.
    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
    }

    /// The version of the space: updates applied (every applied update is one step).
    pub fn space_version(&self) -> u64 {
        self.history.len() as u64
    }

    /// The writer of the latest update (by timestamp, then merge key).
    pub fn last_modified_by(&self) -> Option<&Address> {
        self.history().last().map(|u| &u.writer)
    }
}

/// The stored form of a [`Replica`].
#[derive(Serialize, Deserialize)]
struct ReplicaRecord {
    definition: SpaceDefinition,
    updates: Vec<SpaceUpdate>,
}

impl From<Replica> for ReplicaRecord {
    fn from(r: Replica) -> Self {
        let updates = r.history().into_iter().cloned().collect();
        ReplicaRecord {
            definition: r.definition,
            updates,
        }
    }
}

impl TryFrom<ReplicaRecord> for Replica {
    type Error = SpaceRefusal;

    fn try_from(rec: ReplicaRecord) -> Result<Self, SpaceRefusal> {
        let mut r = Replica::new(rec.definition);
        for u in rec.updates {
            r.apply(u)?;
        }
        Ok(r)
    }
}

/// 1–[`MAX_FIELD_NAME_BYTES`] bytes, no control characters, not starting or ending with
/// a space.
pub fn valid_field_name(f: &str) -> bool {
    !f.is_empty()
        && f.len() <= MAX_FIELD_NAME_BYTES
        && !f.chars().any(char::is_control)
        && f.trim() == f
}

/// RFC 3339 (UTC, seconds) for timestamps on the wire.
pub(crate) mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::time::Timestamp;

    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_rfc3339())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&s)
            .ok_or_else(|| serde::de::Error::custom("invalid RFC 3339 timestamp"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

    fn addr(n: &str) -> Address {
        Address::parse(&format!("agent:{n}@a2acp.io")).unwrap()
    }

    fn def() -> SpaceDefinition {
        SpaceDefinition {
            space_id: "spc_trip".into(),
            name: "Family trip".into(),
            creator: addr("alice"),
            created: Timestamp::from_secs(1_700_000_000),
            participants: vec![
                SpaceParticipant {
                    address: addr("alice"),
                    permission: SpacePermission::FullWrite,
                },
                SpaceParticipant {
                    address: addr("bob"),
                    permission: SpacePermission::WriteOwnFields,
                },
                SpaceParticipant {
                    address: addr("carol"),
                    permission: SpacePermission::ReadAll,
                },
                SpaceParticipant {
                    address: addr("dave"),
                    permission: SpacePermission::FullWrite,
                },
            ],
        }
    }

    fn upd(id: &str, w: &str, field: &str, version: u64, secs: u64, v: &str) -> SpaceUpdate {
        SpaceUpdate {
            update_id: id.into(),
            writer: addr(w),
            field: field.into(),
            version,
            timestamp: Timestamp::from_secs(secs),
            value: FieldValue::Value { value: v.into() },
        }
    }

    #[test]
    fn different_fields_never_conflict() {
        let mut r = Replica::new(def());
        r.apply(upd("upd_1", "alice", "hotel", 1, 10, "Alfama"))
            .unwrap();
        r.apply(upd("upd_2", "dave", "flights", 1, 10, "TP123"))
            .unwrap();
        let f = r.fields();
        assert_eq!(f.len(), 2);
        assert_eq!(f["hotel"].writer, addr("alice"));
        assert_eq!(f["flights"].writer, addr("dave"));
    }

    #[test]
    fn same_field_last_write_wins_with_stated_tie_break() {
        // Higher version wins whatever the time.
        let mut r = Replica::new(def());
        r.apply(upd("upd_a", "alice", "hotel", 2, 5, "A")).unwrap();
        assert_eq!(
            r.apply(upd("upd_b", "dave", "hotel", 1, 50, "B")).unwrap(),
            Applied::Superseded
        );
        assert_eq!(r.fields()["hotel"].update_id, "upd_a");
        // Same version: later timestamp wins.
        let mut r = Replica::new(def());
        r.apply(upd("upd_a", "dave", "hotel", 1, 20, "A")).unwrap();
        r.apply(upd("upd_b", "alice", "hotel", 1, 10, "B")).unwrap();
        assert_eq!(r.fields()["hotel"].update_id, "upd_a");
        // Same version and time: the greater writer address wins (dave > alice).
        let mut r = Replica::new(def());
        r.apply(upd("upd_a", "dave", "hotel", 1, 10, "A")).unwrap();
        r.apply(upd("upd_b", "alice", "hotel", 1, 10, "B")).unwrap();
        assert_eq!(r.fields()["hotel"].writer, addr("dave"));
        assert_eq!(r.history().len(), 2);
    }

    #[test]
    fn permissions_are_enforced_with_typed_reasons() {
        let mut r = Replica::new(def());
        let before = r.clone();
        assert_eq!(
            r.apply(upd("upd_1", "carol", "hotel", 1, 1, "x")),
            Err(SpaceRefusal::ReadOnly {
                writer: addr("carol")
            })
        );
        assert_eq!(
            r.apply(upd("upd_2", "bob", "hotel", 1, 1, "x")),
            Err(SpaceRefusal::NotOwnField {
                writer: addr("bob"),
                field: "hotel".into()
            })
        );
        assert_eq!(
            r.apply(upd("upd_3", "mallory", "hotel", 1, 1, "x")),
            Err(SpaceRefusal::NotParticipant {
                writer: addr("mallory")
            })
        );
        let big = "x".repeat(MAX_VALUE_BYTES);
        assert!(matches!(
            r.apply(upd("upd_4", "alice", "hotel", 1, 1, &big)),
            Err(SpaceRefusal::TooLarge { .. })
        ));
        assert_eq!(r, before);
        // Bob's own field is fine.
        let own = format!("{}availability", own_prefix(&addr("bob")));
        assert_eq!(
            r.apply(upd("upd_5", "bob", &own, 1, 1, "weekends")),
            Ok(Applied::Won)
        );
        // A replay changes nothing.
        let after = r.clone();
        assert!(matches!(
            r.apply(upd("upd_5", "bob", &own, 1, 1, "weekends")),
            Err(SpaceRefusal::Duplicate { .. })
        ));
        assert_eq!(r, after);
    }

    #[test]
    fn links_are_fields() {
        let mut r = Replica::new(def());
        let u = SpaceUpdate {
            update_id: "upd_l".into(),
            writer: addr("alice"),
            field: "itinerary".into(),
            version: 1,
            timestamp: Timestamp::from_secs(3),
            value: FieldValue::Link {
                link: SpaceLink {
                    title: "itinerary.md".into(),
                    uri: "https://drive.example/itinerary.md".into(),
                },
            },
        };
        r.apply(u.clone()).unwrap();
        assert_eq!(r.fields()["itinerary"], &u);
        let j = serde_json::to_string(&u).unwrap();
        assert_eq!(
            j,
            r#"{"update_id":"upd_l","writer":"agent:alice@a2acp.io","field":"itinerary","version":1,"timestamp":"1970-01-01T00:00:03Z","value":{"kind":"link","link":{"title":"itinerary.md","uri":"https://drive.example/itinerary.md"}}}"#
        );
        assert_eq!(serde_json::from_str::<SpaceUpdate>(&j).unwrap(), u);
    }

    #[test]
    fn a_replica_round_trips_through_its_record() {
        let mut r = Replica::new(def());
        r.apply(upd("upd_1", "alice", "hotel", 1, 10, "A")).unwrap();
        r.apply(upd("upd_2", "dave", "hotel", 1, 10, "B")).unwrap();
        r.apply(upd("upd_3", "dave", "dates", 1, 9, "May")).unwrap();
        let j = serde_json::to_vec(&r).unwrap();
        assert_eq!(serde_json::from_slice::<Replica>(&j).unwrap(), r);
    }

    #[test]
    fn definition_checks() {
        let mut d = def();
        assert_eq!(d.validate(), Ok(()));
        d.participants.swap(0, 1);
        assert_eq!(d.validate(), Err(DefinitionError::CreatorNotFirst));
        let mut d = def();
        d.participants.push(d.participants[1].clone());
        assert!(matches!(d.validate(), Err(DefinitionError::Duplicate(_))));
        let mut d = def();
        d.participants.truncate(1);
        assert_eq!(d.validate(), Err(DefinitionError::Count));
    }

    /// An update drawn for the properties: small domains, so fields, versions,
    /// timestamps and writers collide often; some writers exceed their permission.
    #[derive(Debug, Clone)]
    struct Arb(SpaceUpdate);

    impl Arbitrary for Arb {
        fn arbitrary(g: &mut Gen) -> Self {
            let writers = ["alice", "bob", "carol", "dave", "mallory"];
            let w = addr(g.choose(&writers).unwrap());
            let own = bool::arbitrary(g);
            let name = g.choose(&["hotel", "dates", "budget"]).unwrap();
            let field = if own {
                format!("{}{name}", own_prefix(&w))
            } else {
                name.to_string()
            };
            let value = match u8::arbitrary(g) % 4 {
                0 => FieldValue::Cleared,
                1 => FieldValue::Link {
                    link: SpaceLink {
                        title: "doc".into(),
                        uri: format!("https://x.example/{}", u8::arbitrary(g)),
                    },
                },
                _ => FieldValue::Value {
                    value: Value::from(u8::arbitrary(g) % 5),
                },
            };
            Arb(SpaceUpdate {
                update_id: format!("upd_{}", u16::arbitrary(g) % 64),
                writer: w,
                field,
                version: 1 + u64::from(u8::arbitrary(g) % 3),
                timestamp: Timestamp::from_secs(u64::from(u8::arbitrary(g) % 4)),
                value,
            })
        }
    }

    /// Distinct (writer, id) pairs: an honest writer never reuses an id.
    fn distinct(us: Vec<Arb>) -> Vec<SpaceUpdate> {
        let mut seen = std::collections::BTreeSet::new();
        us.into_iter()
            .map(|a| a.0)
            .filter(|u| seen.insert((u.writer.clone(), u.update_id.clone())))
            .collect()
    }

    fn shuffled(us: &[SpaceUpdate], seed: u64) -> Vec<SpaceUpdate> {
        let mut v = us.to_vec();
        let mut s = seed | 1;
        for i in (1..v.len()).rev() {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            v.swap(i, (s % (i as u64 + 1)) as usize);
        }
        v
    }

    #[test]
    fn quickcheck_same_updates_any_order_same_replica() {
        fn prop(us: Vec<Arb>, seed: u64, replays: Vec<u8>) -> TestResult {
            let us = distinct(us);
            let mut a = Replica::new(def());
            let mut b = Replica::new(def());
            for u in &us {
                let _ = a.apply(u.clone());
            }
            // b gets them in another order, some twice (replays through the relay).
            let mut order = shuffled(&us, seed);
            for r in &replays {
                if let Some(u) = us.get(*r as usize % us.len().max(1)) {
                    order.push(u.clone());
                }
            }
            let order = shuffled(&order, seed.rotate_left(17));
            for u in order {
                let _ = b.apply(u);
            }
            TestResult::from_bool(a == b && a.fields() == b.fields())
        }
        QuickCheck::new()
            .tests(2000)
            .quickcheck(prop as fn(Vec<Arb>, u64, Vec<u8>) -> TestResult);
    }

    #[test]
    fn quickcheck_no_update_beyond_permission_is_applied() {
        fn prop(us: Vec<Arb>) -> bool {
            let d = def();
            let mut r = Replica::new(d.clone());
            for u in distinct(us) {
                let allowed = match d.permission(&u.writer) {
                    None | Some(SpacePermission::ReadAll) => false,
                    Some(SpacePermission::WriteOwnFields) => {
                        u.field.starts_with(&own_prefix(&u.writer))
                    }
                    Some(SpacePermission::FullWrite) => true,
                };
                let before = r.clone();
                match r.apply(u) {
                    Ok(_) if !allowed => return false,
                    Err(
                        SpaceRefusal::NotParticipant { .. }
                        | SpaceRefusal::ReadOnly { .. }
                        | SpaceRefusal::NotOwnField { .. },
                    ) if allowed => return false,
                    Err(_) if r != before => return false,
                    _ => {}
                }
            }
            r.history().iter().all(|u| match d.permission(&u.writer) {
                Some(SpacePermission::FullWrite) => true,
                Some(SpacePermission::WriteOwnFields) => {
                    u.field.starts_with(&own_prefix(&u.writer))
                }
                _ => false,
            })
        }
        QuickCheck::new()
            .tests(2000)
            .quickcheck(prop as fn(Vec<Arb>) -> bool);
    }
}
