//! Shared context spaces (§12) in the agent: creating a space, writing a field, carrying
//! updates between participants, and what the user is told.
//!
//! A space is a star of pairwise legs, like a group thread: its creator holds one leg
//! per other participant, each participant one leg to the creator. A leg is an
//! end-to-end encrypted session ([`ThreadSession`]) whose thread id is [`leg_id`] (the
//! space id and the participant's address); the creator is its initiator. A participant sends its own writes to the creator; the
//! creator applies each (checking it against the definition), and forwards what it
//! applied to every other participant, with the definition in every packet it sends. A
//! participant offline meanwhile gets the creator's packets from the relay's offline
//! queue when it reconnects (catch-up from the creator). SPEC-NOTES "Shared context
//! spaces (§12)" gives the wire format and the reasons.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::permissions::Tier;
use super::security::keys::PendingPlain;
use super::*;

pub use super::io::events::SpaceEvent;
pub use super::io::{FieldChange, SpaceChange};
pub use super::thread::packets::SPACE_UPDATE;

use crate::crypto::{thread_tag, Direction, Envelope, Opened};
use crate::packet::MAX_CONTEXT_SIZE_BYTES;
use crate::space::{
    own_prefix, Applied, FieldValue, Replica, SpaceDefinition, SpaceParticipant, SpacePermission,
    SpaceRefusal, SpaceUpdate,
};

/// Bytes of a space packet's updates beyond which they are split over several packets.
const CHUNK_BYTES: usize = 48 * 1024;

/// One space as this agent holds it: its replica and its legs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Space {
    /// The replica.
    pub replica: Replica,
    /// The legs, by the other agent: the creator has one per other participant, a
    /// participant one, to the creator.
    legs: BTreeMap<Address, ThreadSession>,
}

impl Space {
    /// The space's id.
    pub fn id(&self) -> &str {
        &self.replica.definition.space_id
    }
    /// Whether this agent created the space (and so carries its updates).
    fn creator_is(&self, me: &Address) -> bool {
        &self.replica.definition.creator == me
    }
}

/// One space packet (`type` `space_update`), the plaintext of an envelope of the leg.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpacePacket {
    /// `a2acp/<major>.<minor>`.
    pub protocol: String,
    /// Unique per sender.
    pub packet_id: String,
    /// The space (also the envelope's thread id).
    pub space_id: String,
    /// Sender.
    pub from: Address,
    /// Recipient.
    pub to: Address,
    /// When it was sent (RFC 3339).
    pub timestamp: String,
    /// Always `space_update`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The definition: in every packet the creator sends, never in a participant's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<SpaceDefinition>,
    /// The updates, oldest first (may be empty: an invitation to an empty space).
    pub updates: Vec<SpaceUpdate>,
}

impl Agent {
    /// Every space this agent holds, by id.
    pub fn spaces(&self) -> &BTreeMap<String, Space> {
        &self.shared.spaces
    }

    /// One space.
    pub fn space(&self, id: &str) -> Option<&Space> {
        self.shared.spaces.get(id)
    }

    /// [`Command::CreateSpace`].
    pub(super) fn create_space(
        &mut self,
        name: String,
        participants: Vec<SpaceParticipant>,
        fields: Context,
    ) {
        let me = self.shared.config.address.clone();
        let space_id = self.shared.meta.rng.id("spc_", 12);
        self.shared.dirty.meta = true;
        let mut all = vec![SpaceParticipant {
            address: me.clone(),
            permission: SpacePermission::FullWrite,
        }];
        all.extend(participants);
        let definition = SpaceDefinition {
            space_id: space_id.clone(),
            name: name.trim().to_string(),
            creator: me.clone(),
            created: seconds(self.shared.now),
            participants: all,
        };
        if let Err(e) = definition.validate() {
            self.shared.notify(
                None,
                NotifyKind::Delivery,
                format!("The space was not created: {e}."),
            );
            return;
        }
        if let Some(p) = definition
            .participants
            .iter()
            .skip(1)
            .find(|p| p.address == me || self.shared.settings.blocked.contains(&p.address))
        {
            let a = p.address.clone();
            self.shared.notify(
                None,
                NotifyKind::Delivery,
                format!("The space was not created: {a} cannot be a participant."),
            );
            return;
        }
        let name = definition.name.clone();
        let mut legs = BTreeMap::new();
        for p in definition.participants.iter().skip(1) {
            legs.insert(p.address.clone(), new_session(&mut self.shared.meta.rng));
            self.shared.space_tags.insert(
                (
                    p.address.clone(),
                    thread_tag(&leg_id(&space_id, &p.address)),
                ),
                space_id.clone(),
            );
        }
        self.shared.spaces.insert(
            space_id.clone(),
            Space {
                replica: Replica::new(definition),
                legs,
            },
        );
        self.shared.dirty.spaces.insert(space_id.clone());
        self.shared.audit(
            None,
            AgentEvent::Space(SpaceEvent::Created {
                space_id: space_id.clone(),
            }),
        );
        self.shared.space_begun(&name);
        // The initial fields are the user's own writes; each passes the tiers.
        let mut initial = Vec::new();
        for (field, value) in fields {
            if let Some(u) = self.own_update(&space_id, field, FieldValue::Value { value }) {
                initial.push(u);
            }
        }
        let members: Vec<Address> = self
            .shared
            .spaces
            .get(&space_id)
            .map(|s| s.legs.keys().cloned().collect())
            .unwrap_or_default();
        for m in members {
            self.send_space(&space_id, &m, initial.clone());
        }
    }

    /// [`Command::SetSpaceField`].
    pub(super) fn set_space_field(&mut self, space_id: &str, field: String, value: FieldValue) {
        if !self.shared.spaces.contains_key(space_id) {
            self.shared
                .notify(None, NotifyKind::Delivery, format!("No space {space_id}."));
            return;
        }
        let Some(u) = self.own_update(space_id, field, value) else {
            return;
        };
        let me = self.shared.config.address.clone();
        let Some(s) = self.shared.spaces.get(space_id) else {
            return;
        };
        let to: Vec<Address> = if s.creator_is(&me) {
            s.legs.keys().cloned().collect()
        } else {
            vec![s.replica.definition.creator.clone()]
        };
        for m in to {
            self.send_space(space_id, &m, vec![u.clone()]);
        }
    }

    /// Builds this user's write of `field`, checks it (the permission tiers for every
    /// other participant, the space's permissions) and applies it to the replica; `None`
    /// (and the user told why) when refused.
    fn own_update(
        &mut self,
        space_id: &str,
        field: String,
        value: FieldValue,
    ) -> Option<SpaceUpdate> {
        let me = self.shared.config.address.clone();
        let s = self.shared.spaces.get(space_id)?;
        // §12: permission tiers still apply. The tier of an own field is its name's.
        let base = field
            .strip_prefix(&own_prefix(&me))
            .unwrap_or(&field)
            .to_string();
        let others: Vec<Address> = s
            .replica
            .definition
            .participants
            .iter()
            .map(|p| p.address.clone())
            .filter(|a| a != &me)
            .collect();
        let mut refusal = self
            .guarded_value(&others, &serde_json::to_vec(&value).unwrap_or_default())
            .map(|(field, from)| SpaceRefusal::NotToBePassedOn { field, from });
        for o in others.iter().filter(|_| refusal.is_none()) {
            if self.shared.tier(o, &base) == Tier::NeverShare {
                refusal = Some(SpaceRefusal::NeverShare {
                    field: field.clone(),
                });
                break;
            }
            let bytes = serde_json::to_vec(&value).unwrap_or_default();
            if let Some(secret) = self.shared.leaked_secret(o, &bytes) {
                refusal = Some(SpaceRefusal::NeverShare { field: secret });
                break;
            }
        }
        let u = SpaceUpdate {
            update_id: self.shared.meta.rng.id("upd_", 12),
            writer: me.clone(),
            version: s.replica.version(&field) + 1,
            field,
            timestamp: seconds(self.shared.now),
            value,
        };
        self.shared.dirty.meta = true;
        let result = match refusal {
            Some(r) => Err(r),
            None => self
                .shared
                .spaces
                .get_mut(space_id)
                .map(|s| s.replica.apply(u.clone()))
                .unwrap_or(Err(SpaceRefusal::WrongSpace)),
        };
        match result {
            Ok(applied) => {
                self.shared.dirty.spaces.insert(space_id.to_string());
                self.shared.audit(
                    None,
                    AgentEvent::Space(SpaceEvent::Applied {
                        space_id: space_id.to_string(),
                        field: u.field.clone(),
                        writer: me,
                        won: applied == Applied::Won,
                    }),
                );
                Some(u)
            }
            Err(refusal) => {
                self.shared.audit(
                    None,
                    AgentEvent::Space(SpaceEvent::Refused {
                        space_id: space_id.to_string(),
                        peer: me,
                        refusal: refusal.clone(),
                    }),
                );
                self.shared.notify_space(
                    NotifyKind::Delivery,
                    format!("Not written to space {space_id}: {refusal}."),
                    SpaceChange::Refused {
                        space_id: space_id.to_string(),
                        refusal,
                    },
                );
                None
            }
        }
    }

    /// Seals `updates` for participant `to` over the leg of `space_id`, in as many
    /// packets as their size needs (an empty list: one packet, an invitation).
    fn send_space(&mut self, space_id: &str, to: &Address, updates: Vec<SpaceUpdate>) {
        let mut chunks: Vec<Vec<SpaceUpdate>> = vec![Vec::new()];
        let mut size = 0;
        for u in updates {
            let n = serde_json::to_vec(&u).map(|v| v.len()).unwrap_or(0);
            if size + n > CHUNK_BYTES && chunks.last().is_some_and(|c| !c.is_empty()) {
                chunks.push(Vec::new());
                size = 0;
            }
            size += n;
            if let Some(c) = chunks.last_mut() {
                c.push(u);
            }
        }
        for chunk in chunks {
            self.send_space_packet(space_id, to, chunk);
        }
    }

    fn send_space_packet(&mut self, space_id: &str, to: &Address, updates: Vec<SpaceUpdate>) {
        let me = self.shared.config.address.clone();
        let Some(s) = self.shared.spaces.get(space_id) else {
            return;
        };
        let packet_id = self.shared.meta.rng.id("pkt_", 12);
        self.shared.dirty.meta = true;
        let n = updates.len();
        let p = SpacePacket {
            protocol: format!("a2acp/{}", self.shared.highest_version()),
            packet_id: packet_id.clone(),
            space_id: space_id.to_string(),
            from: me.clone(),
            to: to.clone(),
            timestamp: self.shared.now.to_rfc3339(),
            kind: SPACE_UPDATE.to_string(),
            space: s.creator_is(&me).then(|| s.replica.definition.clone()),
            updates,
        };
        let bytes = serde_json::to_vec(&p).unwrap_or_default();
        if bytes.len() > MAX_CONTEXT_SIZE_BYTES {
            self.shared.audit_bug(
                None,
                Bug::InvalidOutgoing {
                    kind: SPACE_UPDATE.to_string(),
                    error: format!("{} bytes", bytes.len()),
                },
            );
            return;
        }
        self.shared.audit(
            None,
            AgentEvent::Space(SpaceEvent::Sent {
                space_id: space_id.to_string(),
                to: to.clone(),
                packet_id: packet_id.clone(),
                updates: n,
            }),
        );
        if !self.shared.keys.contains_key(to) {
            let rec = self.shared.peers.entry(to.clone()).or_default();
            rec.pending.push(PendingPlain {
                thread_id: space_id.to_string(),
                packet_id,
                json: String::from_utf8_lossy(&bytes).into_owned(),
            });
            self.shared.dirty.peers.insert(to.clone());
            self.shared.lookup(to);
            return;
        }
        self.seal_space(space_id, to, &packet_id, &bytes);
    }

    /// Seals a space packet on its leg and queues it. Also the way out of a packet that
    /// waited for `to`'s key.
    pub(super) fn seal_space(
        &mut self,
        space_id: &str,
        to: &Address,
        packet_id: &str,
        plain: &[u8],
    ) {
        let me = self.shared.config.address.clone();
        let Some(key) = self.shared.keys.get(to).cloned() else {
            return;
        };
        let Some(s) = self.shared.spaces.get_mut(space_id) else {
            return;
        };
        let dir = if s.creator_is(&me) {
            Direction::FromInitiator
        } else {
            Direction::FromResponder
        };
        let Some(session) = s.legs.get_mut(to) else {
            return;
        };
        let member = if dir == Direction::FromInitiator {
            to
        } else {
            &me
        };
        let leg = leg_id(space_id, member);
        match session.seal(&self.shared.identity, &me, to, &key, &leg, dir, plain) {
            Ok(env) => {
                self.shared.dirty.spaces.insert(space_id.to_string());
                self.shared.queue_envelope(space_id, packet_id, env);
            }
            Err(e) => self.shared.audit(
                None,
                AgentEvent::SealFailed {
                    packet_id: packet_id.to_string(),
                    error: e.to_string(),
                },
            ),
        }
    }

    /// The legs of every space held, by (other agent, thread tag): rebuilt on restore.
    pub(super) fn space_tags(&self) -> BTreeMap<(Address, [u8; 16]), String> {
        let mut tags = BTreeMap::new();
        let me = &self.shared.config.address;
        for (id, s) in &self.shared.spaces {
            for peer in s.legs.keys() {
                let member = if s.creator_is(me) { peer } else { me };
                tags.insert((peer.clone(), thread_tag(&leg_id(id, member))), id.clone());
            }
        }
        tags
    }

    /// Whether a pending packet (waiting for a key) belongs to a space.
    pub(super) fn is_space_id(&self, id: &str) -> bool {
        self.shared.spaces.contains_key(id)
    }

    /// An envelope on a leg of a space this agent holds (`space_tags` named it).
    pub(super) fn on_space_envelope(&mut self, env: Envelope, sender_key: PublicKey) {
        let me = self.shared.config.address.clone();
        let peer = env.from.clone();
        let Some(space_id) = self
            .shared
            .space_tags
            .get(&(peer.clone(), env.thread))
            .cloned()
        else {
            return;
        };
        let Some(s) = self.shared.spaces.get_mut(&space_id) else {
            return;
        };
        let expected = if s.creator_is(&me) {
            Direction::FromResponder
        } else {
            Direction::FromInitiator
        };
        let Some(session) = s.legs.get_mut(&peer) else {
            return;
        };
        // Opened on a copy: a packet refused whole leaves the leg as it was.
        let mut trial = session.clone();
        let mut opened = trial.open(&self.shared.identity, &me, &env, &sender_key, expected);
        // A participant that has not learnt this agent's rotation yet sealed to a key it
        // left (SPEC-NOTES "Key rotation"), as on a thread.
        for old in self.shared.retired_identities.iter().rev() {
            if opened.is_ok() {
                break;
            }
            if let Ok(o) = trial.open(old, &me, &env, &sender_key, expected) {
                opened = Ok(o);
            }
        }
        let opened = match opened {
            Ok(o) => o,
            Err(e) => {
                self.shared.dropped(
                    None,
                    DropReason::Refused {
                        peer,
                        error: e.to_string(),
                    },
                );
                return;
            }
        };
        if let Some(session) = s.legs.get_mut(&peer) {
            *session = trial;
        }
        self.shared.dirty.spaces.insert(space_id.clone());
        self.on_space_packet(&peer, &opened, None);
    }

    /// The first envelope of a leg unknown to this agent whose plaintext is a space
    /// packet: an invitation if its sender created the space and names this agent.
    pub(super) fn on_new_space_leg(
        &mut self,
        peer: &Address,
        session: ThreadSession,
        opened: &Opened,
    ) {
        self.on_space_packet(peer, opened, Some(session));
    }

    fn refuse(&mut self, space_id: &str, peer: &Address, refusal: SpaceRefusal) {
        self.shared.audit(
            None,
            AgentEvent::Space(SpaceEvent::Refused {
                space_id: space_id.to_string(),
                peer: peer.clone(),
                refusal,
            }),
        );
    }

    /// A space packet from `peer`; `new_leg` is the session that opened it when no leg
    /// with `peer` exists for its space.
    fn on_space_packet(&mut self, peer: &Address, opened: &Opened, new_leg: Option<ThreadSession>) {
        let me = self.shared.config.address.clone();
        if opened.packet.len() > MAX_CONTEXT_SIZE_BYTES {
            self.refuse(
                &opened.thread_id,
                peer,
                SpaceRefusal::TooLarge {
                    size: opened.packet.len(),
                },
            );
            return;
        }
        let p: SpacePacket = match serde_json::from_slice(&opened.packet) {
            Ok(p) => p,
            Err(e) => {
                self.shared.malformed(peer, format!("space packet: {e}"));
                return;
            }
        };
        // The leg's member: this agent, unless it created the space.
        let member = match self.shared.spaces.get(&p.space_id) {
            Some(s) if new_leg.is_none() && s.creator_is(&me) => peer.clone(),
            _ => me.clone(),
        };
        if &p.from != peer
            || p.to != me
            || opened.thread_id != leg_id(&p.space_id, &member)
            || p.kind != SPACE_UPDATE
        {
            self.shared.malformed(
                peer,
                "space packet header does not match its envelope".into(),
            );
            return;
        }
        let space_id = p.space_id.clone();
        self.shared.audit(
            None,
            AgentEvent::Space(SpaceEvent::Received {
                space_id: space_id.clone(),
                from: peer.clone(),
                packet_id: p.packet_id.clone(),
                updates: p.updates.len(),
            }),
        );
        if let Some(session) = new_leg {
            // A leg this agent does not have: only a space's creator opens legs, and
            // only to its participants.
            let Some(def) = p.space.clone() else {
                self.refuse(&space_id, peer, SpaceRefusal::UnknownSpace);
                return;
            };
            if self.shared.spaces.contains_key(&space_id) {
                // The id is taken (by another creator, or this agent's own): a second
                // leg for it could only be forged.
                self.refuse(&space_id, peer, SpaceRefusal::UnknownSpace);
                return;
            }
            if def.validate().is_err() || &def.creator != peer || def.space_id != space_id {
                self.refuse(&space_id, peer, SpaceRefusal::DefinitionMismatch);
                return;
            }
            let Some(permission) = def.permission(&me) else {
                self.refuse(
                    &space_id,
                    peer,
                    SpaceRefusal::NotParticipant { writer: me.clone() },
                );
                return;
            };
            let mut legs = BTreeMap::new();
            legs.insert(peer.clone(), session);
            let name = def.name.clone();
            self.shared.spaces.insert(
                space_id.clone(),
                Space {
                    replica: Replica::new(def),
                    legs,
                },
            );
            self.shared.space_tags.insert(
                (peer.clone(), thread_tag(&leg_id(&space_id, &me))),
                space_id.clone(),
            );
            self.shared.dirty.spaces.insert(space_id.clone());
            self.shared.audit(
                None,
                AgentEvent::Space(SpaceEvent::Joined {
                    space_id: space_id.clone(),
                    creator: peer.clone(),
                }),
            );
            self.shared.space_begun(&name);
            self.shared.notify_space(
                NotifyKind::Info,
                format!(
                    "{peer} added you to the shared space “{name}” ({space_id}); you may {}.",
                    match permission {
                        SpacePermission::ReadAll => "read it",
                        SpacePermission::WriteOwnFields => "read it and write your own fields",
                        SpacePermission::FullWrite => "read and write it",
                    }
                ),
                SpaceChange::Joined {
                    space_id: space_id.clone(),
                    name,
                    creator: peer.clone(),
                    permission,
                },
            );
        }
        let Some(s) = self.shared.spaces.get(&space_id) else {
            return;
        };
        let creator = s.creator_is(&me);
        if !creator {
            // From the creator: the definition it sends never changes.
            if p.space.as_ref() != Some(&s.replica.definition) {
                self.refuse(&space_id, peer, SpaceRefusal::DefinitionMismatch);
                return;
            }
        }
        let mut applied = Vec::new();
        let mut changed = Vec::new();
        for u in p.updates {
            if creator && &u.writer != peer {
                // Only the creator forwards others' writes.
                self.refuse(
                    &space_id,
                    peer,
                    SpaceRefusal::NotTheWriter {
                        sender: peer.clone(),
                        writer: u.writer.clone(),
                    },
                );
                continue;
            }
            let result = match self.shared.spaces.get_mut(&space_id) {
                Some(s) => s.replica.apply(u.clone()),
                None => return,
            };
            match result {
                Ok(a) => {
                    self.shared.dirty.spaces.insert(space_id.clone());
                    self.shared.audit(
                        None,
                        AgentEvent::Space(SpaceEvent::Applied {
                            space_id: space_id.clone(),
                            field: u.field.clone(),
                            writer: u.writer.clone(),
                            won: a == Applied::Won,
                        }),
                    );
                    if a == Applied::Won && u.writer != me {
                        changed.push(FieldChange {
                            field: u.field.clone(),
                            writer: u.writer.clone(),
                            value: u.value.clone(),
                        });
                    }
                    applied.push(u);
                }
                Err(r) => self.refuse(&space_id, peer, r),
            }
        }
        if !changed.is_empty() {
            let name = self
                .shared
                .spaces
                .get(&space_id)
                .map(|s| s.replica.definition.name.clone())
                .unwrap_or_default();
            let list: Vec<String> = changed
                .iter()
                .map(|c| format!("{} ({})", c.field, c.writer))
                .collect();
            self.shared.notify_space(
                NotifyKind::Info,
                format!(
                    "Shared space “{name}” ({space_id}) changed: {}.",
                    list.join(", ")
                ),
                SpaceChange::Changed {
                    space_id: space_id.clone(),
                    fields: changed,
                },
            );
        }
        if creator && !applied.is_empty() {
            let others: Vec<Address> = self
                .shared
                .spaces
                .get(&space_id)
                .map(|s| s.legs.keys().filter(|a| *a != peer).cloned().collect())
                .unwrap_or_default();
            for o in others {
                self.send_space(&space_id, &o, applied.clone());
            }
        }
    }
}

impl Shared {
    /// A notification about a space, with its typed [`SpaceChange`].
    fn notify_space(&mut self, kind: NotifyKind, text: String, change: SpaceChange) {
        let text = super::io::notify::shown(text);
        self.buf.notify.push(Output::Notify(Notification {
            thread_id: None,
            kind,
            text,
            key: None,
            suggestion: None,
            space: Some(change),
            memory_change: None,
            introduction: None,
        }));
    }
}

/// The thread id of the leg between a space's creator and `member`:
/// `<space_id>/<member address>`. Each leg has its own thread tag, so the relay cannot
/// tell which legs belong to one space (as with group legs).
pub fn leg_id(space_id: &str, member: &Address) -> String {
    format!("{space_id}/{}", member.as_str())
}

/// `now` cut to whole seconds: the precision of the wire's RFC 3339 timestamps, so a
/// writer's replica and every other hold the same timestamp.
fn seconds(now: Timestamp) -> Timestamp {
    Timestamp::from_secs(now.as_millis() / 1000)
}

/// A value of a field as the user typed it: JSON if it parses, else the text.
pub fn value_from_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

#[cfg(test)]
mod tests;
