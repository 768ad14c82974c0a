//! Persisted records (`meta`, `settings`, `peer/…`, `thread/…`, `history/…`, `outbox/…`):
//! writing them after each step and restoring an agent from them.

use std::collections::BTreeSet;

use crate::agent::link::OutboxItem;
use crate::agent::security::keys::PendingPlain;
use crate::agent::security::refusals::Refusals;
use crate::agent::thread::{history_key, parse_history, Thread};
use crate::agent::*;

use crate::persist::PersistOp;

/// Why an agent could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// A record could not be decoded.
    #[error("record `{key}` is corrupt: {reason}")]
    Corrupt {
        /// Record key.
        key: String,
        /// Decoder message.
        reason: String,
    },
    /// The records belong to another address.
    #[error("records belong to {found}, not {expected}")]
    WrongAgent {
        /// Address in the records.
        found: Address,
        /// Address configured.
        expected: Address,
    },
}

/// Persisted counters and the generator position (`meta`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(in crate::agent) struct Meta {
    pub(in crate::agent) address: Address,
    pub(in crate::agent) rng: DetRng,
    pub(in crate::agent) next_prompt: u64,
    pub(in crate::agent) next_seq: u64,
    pub(in crate::agent) next_action: u64,
    pub(in crate::agent) next_llm: u64,
    pub(in crate::agent) authenticated_before: bool,
    /// The last §7.2 suggestion number given (0: none yet).
    #[serde(default)]
    pub(in crate::agent) last_suggestion: u64,
    /// The threads created or joined so far (a group counts once), for §14.2.
    #[serde(default)]
    pub(in crate::agent) threads_begun: u64,
    /// The §14.2 introductions shown: each is shown once.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(in crate::agent) introduced: BTreeSet<crate::agent::introductions::Introduction>,
    /// The wake-up endpoint the relay last confirmed (`wake_up_set`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) wake_up: Option<String>,
    /// The rotation statement that installed this agent's current key (none before its
    /// first rotation); carried by every envelope sealed under that key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) rotation: Option<Box<crate::rotation::RotationStatement>>,
    /// The statements before `rotation`, oldest first (at most
    /// [`crate::rotation::ROTATION_CHAIN_MAX`] − 1): carried with it, so a peer several
    /// rotations behind re-pins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::agent) earlier_rotations: Vec<crate::rotation::RotationStatement>,
    /// The recovery key this agent binds at its relay (public part only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) recovery: Option<super::key_recovery::OwnRecovery>,
    /// The keys this agent rotated away from, oldest first (at most
    /// [`super::rotation::RETIRED_KEYS_KEPT`]): what a peer that had not re-pinned yet
    /// sealed to them still opens after a restart (SPEC-NOTES "Key rotation").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::agent) retired_keys: Vec<RetiredKey>,
}

/// A retired identity key's secret seed, kept in `meta` beside the records that already
/// hold this agent's session secrets (the identity key itself is the runtime's).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::agent) struct RetiredKey {
    /// The RFC 8032 seed.
    #[serde(with = "crate::encoding::b64_array")]
    pub(in crate::agent) seed: [u8; 32],
}

impl std::fmt::Debug for RetiredKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The public half only, as `IdentityKey` prints itself.
        write!(
            f,
            "RetiredKey({:?})",
            IdentityKey::from_seed(self.seed).public_ref()
        )
    }
}

/// Settings the user can change at run time (`settings`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(in crate::agent) struct Settings {
    pub(in crate::agent) tiers: PermissionTiers,
    pub(in crate::agent) overrides: BTreeMap<Address, RelationshipOverride>,
    pub(in crate::agent) blocked: BTreeSet<Address>,
}

/// What an agent knows about another agent (`peer/<address>`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub(in crate::agent) struct PeerRecord {
    /// Pinned Ed25519 key (first contact, §16).
    pub(in crate::agent) key: Option<[u8; 32]>,
    /// A different key seen after pinning, awaiting the user.
    pub(in crate::agent) changed_key: Option<[u8; 32]>,
    /// The key the peer rotated away from (its last rotation statement's `old_key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) retired_key: Option<[u8; 32]>,
    /// The rotation number of the statement that installed `key` (0: none).
    #[serde(default)]
    pub(in crate::agent) rotation_seq: u64,
    /// Envelopes under `changed_key`, authentic under it, received while the user had
    /// not accepted it (at most 16, `security::keys::MAX_HELD_FOR_KEY`): handled once the user accepts the
    /// key, dropped if another key is accepted (SPEC-NOTES "Key changes").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(in crate::agent) held_for_key: Vec<crate::crypto::Envelope>,
    /// The new key of a recovery of this peer the user was told about (once per key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::agent) recovered_key: Option<[u8; 32]>,
    /// Malformed packets received (§13.4).
    pub(in crate::agent) malformed: u32,
    /// Flagged as a sender of malformed packets.
    pub(in crate::agent) flagged: bool,
    /// Packets waiting for the key lookup.
    pub(in crate::agent) pending: Vec<PendingPlain>,
    /// A lookup is on its way on the current connection. Not persisted: an agent
    /// restored from its records has no connection, so no lookup can be on its way, and
    /// a stored `true` kept it from ever asking again (swarm seed 713).
    #[serde(skip)]
    pub(in crate::agent) lookup_sent: bool,
    /// How often the user approved each field for this agent (§7.2 suggestions).
    pub(in crate::agent) approvals: BTreeMap<String, u32>,
    /// Fields suggested for always_share with this agent (§7.2), with the suggestion's
    /// number.
    #[serde(default)]
    pub(in crate::agent) suggested: BTreeMap<String, u64>,
    /// Fields whose §7.2 suggestion the user dismissed: no longer listed, never
    /// suggested again for this agent.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(in crate::agent) dismissed: BTreeSet<String>,
    /// What was refused of this agent past the limits per peer.
    #[serde(default)]
    pub(in crate::agent) refused: Refusals,
}

#[derive(Default)]
pub(in crate::agent) struct Dirty {
    pub(in crate::agent) meta: bool,
    pub(in crate::agent) settings: bool,
    pub(in crate::agent) peers: BTreeSet<Address>,
    pub(in crate::agent) threads: BTreeSet<String>,
    pub(in crate::agent) groups: BTreeSet<String>,
    pub(in crate::agent) spaces: BTreeSet<String>,
    /// Peers whose relationship memory changed (`memory/<address>`).
    pub(in crate::agent) memory: BTreeSet<Address>,
    pub(in crate::agent) ops: Vec<PersistOp>,
}

/// The stored `thread/<id>` record: the thread without its history (written as `[]`), and
/// how many `history/<id>/<n>` records belong to it. The thread record is written after
/// its new history records, so it is the commit point: records from `history_len` on are
/// leftovers of a step a crash cut, and are ignored.
#[derive(Serialize)]
pub(in crate::agent) struct ThreadRecord<'a> {
    #[serde(flatten)]
    pub(in crate::agent) thread: &'a Thread,
    pub(in crate::agent) history_len: usize,
}

/// The part of a `thread/<id>` record that says where its history is. Records written
/// before the history was split out have no `history_len`: their history is inside.
#[derive(Deserialize)]
pub(in crate::agent) struct HistoryLen {
    #[serde(default)]
    pub(in crate::agent) history_len: Option<usize>,
}

pub(in crate::agent) const META: &str = "meta";

pub(in crate::agent) const SETTINGS: &str = "settings";

impl Agent {
    /// Restores an agent from the records it last persisted. Open prompts are shown
    /// again, and actions and LLM calls that had no answer are asked for again, as
    /// outputs of the first call to [`Agent::handle`] or [`Agent::poll_output`].
    ///
    /// `seed` is used only when no `meta` record exists (nothing was persisted yet).
    pub fn restore(
        config: AgentConfig,
        identity: IdentityKey,
        seed: [u8; 32],
        records: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) -> Result<Self, RestoreError> {
        fn de<T: serde::de::DeserializeOwned>(key: &str, v: &[u8]) -> Result<T, RestoreError> {
            serde_json::from_slice(v).map_err(|e| RestoreError::Corrupt {
                key: key.to_string(),
                reason: e.to_string(),
            })
        }
        let mut a = Agent::new(config, identity, seed);
        a.shared.out.clear();
        a.shared.dirty = Dirty::default();
        // history/<thread id>/<n> records, by thread id and n.
        let mut hist: BTreeMap<String, BTreeMap<u64, (String, Vec<u8>)>> = BTreeMap::new();
        // Threads whose record says how many history records it has.
        let mut lens: BTreeMap<String, (String, usize)> = BTreeMap::new();
        for (key, value) in records {
            if key == META {
                let m: Meta = de(&key, &value)?;
                if m.address != a.shared.config.address {
                    return Err(RestoreError::WrongAgent {
                        found: m.address,
                        expected: a.shared.config.address.clone(),
                    });
                }
                a.shared.retired_identities = m
                    .retired_keys
                    .iter()
                    .map(|r| IdentityKey::from_seed(r.seed))
                    .collect();
                a.shared.meta = m;
            } else if key == SETTINGS {
                a.shared.settings = de(&key, &value)?;
            } else if let Some(addr) = key.strip_prefix("peer/") {
                let addr = Address::parse(addr).map_err(|e| RestoreError::Corrupt {
                    key: key.clone(),
                    reason: e.to_string(),
                })?;
                let rec: PeerRecord = de(&key, &value)?;
                a.shared.peers.insert(addr, rec);
            } else if key.starts_with("thread/") {
                let mut t: Thread = de(&key, &value)?;
                // The record's own member, not a bridge's state of the thread.
                t.bridge.remove("history_len");
                if let Some(n) = de::<HistoryLen>(&key, &value)?.history_len {
                    lens.insert(t.id.clone(), (key.clone(), n));
                }
                a.threads.insert(t.id.clone(), t);
            } else if let Some((id, n)) = key.strip_prefix("history/").and_then(parse_history) {
                let id = id.to_string();
                hist.entry(id).or_default().insert(n, (key, value));
            } else if key.starts_with("group/") {
                let g: crate::agent::group::Group = de(&key, &value)?;
                a.shared.groups.insert(g.id.clone(), g);
            } else if key.starts_with("space/") {
                let s: crate::agent::space::Space = de(&key, &value)?;
                a.shared.spaces.insert(s.id().to_string(), s);
            } else if let Some(addr) = key.strip_prefix(crate::agent::memory::MEMORY_PREFIX) {
                // A peer's memory: its NDJSON (seed 002 §10.3), verified on import.
                let text = String::from_utf8_lossy(&value);
                if let Err(e) = a.shared.memory.import_ndjson(&text) {
                    return Err(RestoreError::Corrupt {
                        key: key.clone(),
                        reason: format!("memory of {addr}: {e}"),
                    });
                }
            } else if key.starts_with("outbox/") {
                let o: OutboxItem = de(&key, &value)?;
                a.shared.outbox.insert(o.seq, o);
            }
        }
        for (id, (key, n)) in lens {
            let Some(t) = a.threads.get_mut(&id) else {
                continue;
            };
            let mut entries = hist.remove(&id).unwrap_or_default();
            let mut history = Vec::with_capacity(n);
            for i in 0..n {
                let Some((hkey, v)) = entries.remove(&(i as u64)) else {
                    return Err(RestoreError::Corrupt {
                        key,
                        reason: format!("history record {i} of {n} is missing"),
                    });
                };
                history.push(de(&hkey, &v)?);
            }
            t.history = history;
            a.shared.hist_stored.insert(id, n);
        }
        for (addr, rec) in &a.shared.peers {
            // Keys in the agent's own store were validated before they were pinned.
            if let Some(k) = rec.key.and_then(|k| PublicKey::from_stored_bytes(&k).ok()) {
                a.shared.keys.insert(addr.clone(), k);
            }
        }
        for t in a.threads.values() {
            a.shared.tags.insert(
                (t.peer.clone(), crate::crypto::thread_tag(&t.id)),
                t.id.clone(),
            );
        }
        a.shared.space_tags = a.space_tags();
        a.shared.index_usage();
        a.drop_uncommitted();
        a.resume_after_restore();
        a.resume_groups();
        a.flush();
        Ok(a)
    }

    /// Moves buffered outputs to the output queue in the documented order, persisting
    /// every dirty record first.
    pub(in crate::agent) fn flush(&mut self) {
        self.shared.release_paced();
        let d = std::mem::take(&mut self.shared.dirty);
        if d.meta {
            self.shared
                .out
                .push_back(put(META.into(), &self.shared.meta));
        }
        if d.settings {
            self.shared
                .out
                .push_back(put(SETTINGS.into(), &self.shared.settings));
        }
        for p in &d.peers {
            if let Some(rec) = self.shared.peers.get(p) {
                self.shared.out.push_back(put(format!("peer/{p}"), rec));
            }
        }
        // A peer's memory goes before the thread records of the same step: a completed
        // thread is recorded before its record says COMPLETED, and recording is
        // idempotent per thread (a restored thread that completes again adds nothing).
        for p in &d.memory {
            let key = format!("{}{p}", crate::agent::memory::MEMORY_PREFIX);
            let op = match self.shared.memory.export_project_ndjson(p.as_str()) {
                Ok(text) if !text.is_empty() => PersistOp::Put {
                    key,
                    value: text.into_bytes(),
                },
                // Nothing left (purged), or nothing that can be written: no record.
                _ => PersistOp::Delete { key },
            };
            self.shared.out.push_back(Output::Persist(op));
        }
        // A thread's new outbox items go before its record, which commits them: a crash
        // in between leaves items a restore drops (`drop_uncommitted`), never a record
        // that says a packet went out while the packet is nowhere (SPEC-NOTES
        // "Persistence"). Its new consent receipts go before it too: no record says a
        // value left without the receipt of it stored; and its agreement, which the
        // record lists.
        let (committed_by_thread, ops): (Vec<PersistOp>, Vec<PersistOp>) =
            d.ops.into_iter().partition(|op| {
                let k = op.key();
                self.is_thread_item(op)
                    || k.starts_with(crate::receipt::RECEIPT_PREFIX)
                    || k.starts_with(crate::receipt::agreement::AGREEMENT_PREFIX)
            });
        for op in committed_by_thread {
            self.shared.out.push_back(Output::Persist(op));
        }
        for id in &d.threads {
            if let Some(t) = self.threads.get_mut(id) {
                // The history is append-only: only its new entries are written, each as
                // its own record, before the thread record that counts them.
                let stored = self.shared.hist_stored.get(id).copied().unwrap_or(0);
                for (i, h) in t.history.iter().enumerate().skip(stored) {
                    self.shared.out.push_back(put(history_key(id, i), h));
                }
                let history = std::mem::take(&mut t.history);
                let record = ThreadRecord {
                    thread: t,
                    history_len: history.len(),
                };
                self.shared
                    .out
                    .push_back(put(format!("thread/{id}"), &record));
                self.shared.hist_stored.insert(id.clone(), history.len());
                t.history = history;
            }
        }
        for id in &d.groups {
            if let Some(g) = self.shared.groups.get(id) {
                self.shared.out.push_back(put(format!("group/{id}"), g));
            }
        }
        for id in &d.spaces {
            if let Some(s) = self.shared.spaces.get(id) {
                self.shared.out.push_back(put(format!("space/{id}"), s));
            }
        }
        for op in ops {
            self.shared.out.push_back(Output::Persist(op));
        }
        let b = std::mem::take(&mut self.shared.buf);
        self.shared.out.extend(b.send);
        self.shared.out.extend(b.prompt);
        self.shared.out.extend(b.llm);
        self.shared.out.extend(b.action);
        self.shared.out.extend(b.notify);
        self.shared.out.extend(b.audit);
        self.shared.out.extend(b.close);
    }
}

impl Agent {
    /// Whether `op` stores an outbox item of a thread (not of a space, not a threadless
    /// refusal): such an item is committed by its thread's record.
    fn is_thread_item(&self, op: &PersistOp) -> bool {
        let PersistOp::Put { key, .. } = op else {
            return false;
        };
        let Some(seq) = key
            .strip_prefix("outbox/")
            .and_then(|n| n.parse::<u64>().ok())
        else {
            return false;
        };
        self.shared
            .outbox
            .get(&seq)
            .is_some_and(|o| !o.threadless && self.threads.contains_key(&o.thread_id))
    }

    /// Drops, on restore, the outbox items and key-waiting packets that no thread record
    /// committed: the agent crashed after storing them and before storing the thread
    /// record that says they were sent. The thread is as it was before that step, and
    /// the step runs again (the relay redelivers what caused it), so sending them would
    /// send a step's packets twice — or, for a new thread, packets of a thread this
    /// agent does not know.
    fn drop_uncommitted(&mut self) {
        let (threads, spaces) = (&self.threads, &self.shared.spaces);
        let drop: Vec<u64> = self
            .shared
            .outbox
            .values()
            .filter(|o| !o.threadless && !committed(threads, spaces, &o.thread_id, &o.packet_id))
            .map(|o| o.seq)
            .collect();
        for seq in drop {
            self.shared.outbox.remove(&seq);
            self.shared.dirty.ops.push(PersistOp::Delete {
                key: outbox_key(seq),
            });
        }
        for (addr, rec) in self.shared.peers.iter_mut() {
            let before = rec.pending.len();
            rec.pending.retain(|p| {
                committed(
                    &self.threads,
                    &self.shared.spaces,
                    &p.thread_id,
                    &p.packet_id,
                )
            });
            if rec.pending.len() != before {
                self.shared.dirty.peers.insert(addr.clone());
            }
        }
    }
}

/// Whether a packet of thread or space `id` was committed: a space's packets always are
/// (the space record is written first); a thread's when its record lists the packet as sent.
fn committed<S>(
    threads: &BTreeMap<String, Thread>,
    spaces: &BTreeMap<String, S>,
    id: &str,
    packet_id: &str,
) -> bool {
    spaces.contains_key(id)
        || threads
            .get(id)
            .is_some_and(|t| t.sent_ids.iter().any(|s| s == packet_id))
}

pub(in crate::agent) fn put<T: Serialize>(key: String, v: &T) -> Output {
    Output::Persist(PersistOp::Put {
        key,
        value: serde_json::to_vec(v).unwrap_or_default(),
    })
}

pub(in crate::agent) fn outbox_key(seq: u64) -> String {
    format!("outbox/{seq:020}")
}
