//! Scenarios: what a run simulates, as TOML files (format in `sim/README.md`).
//!
//! This module holds what a run is ([`Spec`]) and the shipped scenarios; reading a
//! scenario file into a [`Spec`] is `file.rs`'s ([`parse`]). The swarm generator produces
//! [`Spec`]s directly.

mod file;

pub use file::parse;

use std::path::Path;
use std::time::Duration;

use a2acp_core::agent::{AgentConfig, GroupConfirmation, ThreadState};
use a2acp_core::packet::{Context, Intent};
use a2acp_core::relay::RelayConfig;
use a2acp_core::space::{FieldValue, SpacePermission};
use a2acp_core::Timestamp;

use crate::error::SimError;
use crate::model::{ActionModel, LinkModel, LlmModel, UserModel};

/// The scenarios shipped with the simulator: (file name without `.toml`, contents).
pub const SHIPPED: &[(&str, &str)] = &[
    ("dinner", include_str!("../scenarios/dinner.toml")),
    (
        "dinner_federated",
        include_str!("../scenarios/dinner_federated.toml"),
    ),
    (
        "intent_update",
        include_str!("../scenarios/intent_update.toml"),
    ),
    ("thread_fork", include_str!("../scenarios/thread_fork.toml")),
    ("no_overlap", include_str!("../scenarios/no_overlap.toml")),
    (
        "declined_field",
        include_str!("../scenarios/declined_field.toml"),
    ),
    (
        "relay_outage",
        include_str!("../scenarios/relay_outage.toml"),
    ),
    ("agent_crash", include_str!("../scenarios/agent_crash.toml")),
    (
        "offline_queue",
        include_str!("../scenarios/offline_queue.toml"),
    ),
    (
        "confirmation_timeout",
        include_str!("../scenarios/confirmation_timeout.toml"),
    ),
    (
        "action_failure",
        include_str!("../scenarios/action_failure.toml"),
    ),
    (
        "round_trip_limit",
        include_str!("../scenarios/round_trip_limit.toml"),
    ),
    ("stalled", include_str!("../scenarios/stalled.toml")),
    (
        "version_negotiation",
        include_str!("../scenarios/version_negotiation.toml"),
    ),
    ("key_change", include_str!("../scenarios/key_change.toml")),
    (
        "group_key_rotation",
        include_str!("../scenarios/group_key_rotation.toml"),
    ),
    ("device_swap", include_str!("../scenarios/device_swap.toml")),
    ("lost_device", include_str!("../scenarios/lost_device.toml")),
    ("wake_up", include_str!("../scenarios/wake_up.toml")),
    (
        "llm_failures",
        include_str!("../scenarios/llm_failures.toml"),
    ),
    (
        "lossy_network",
        include_str!("../scenarios/lossy_network.toml"),
    ),
    ("established", include_str!("../scenarios/established.toml")),
    ("game_night", include_str!("../scenarios/game_night.toml")),
    (
        "game_night_binding",
        include_str!("../scenarios/game_night_binding.toml"),
    ),
    (
        "group_quorum",
        include_str!("../scenarios/group_quorum.toml"),
    ),
    (
        "group_coordinator_crash",
        include_str!("../scenarios/group_coordinator_crash.toml"),
    ),
    (
        "group_participant_offline",
        include_str!("../scenarios/group_participant_offline.toml"),
    ),
    (
        "group_transfer",
        include_str!("../scenarios/group_transfer.toml"),
    ),
    (
        "group_sequential",
        include_str!("../scenarios/group_sequential.toml"),
    ),
    ("family_trip", include_str!("../scenarios/family_trip.toml")),
];

/// Finds a shipped scenario by name, or reads a file.
pub fn load(name_or_path: &str) -> Result<Spec, SimError> {
    if let Some((name, text)) = SHIPPED.iter().find(|(n, _)| *n == name_or_path) {
        return parse(text, name);
    }
    let path = Path::new(name_or_path);
    if !path.exists() {
        let names: Vec<&str> = SHIPPED.iter().map(|(n, _)| *n).collect();
        return Err(SimError::UnknownScenario {
            name: name_or_path.to_string(),
            shipped: names.join(", "),
        });
    }
    let text = std::fs::read_to_string(path).map_err(|e| SimError::Io {
        path: name_or_path.to_string(),
        reason: e.to_string(),
    })?;
    parse(&text, name_or_path)
}

/// A resolved scenario: everything a run needs besides the seed.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Scenario name.
    pub name: String,
    /// What it shows.
    pub summary: String,
    /// Simulated wall-clock time at the start.
    pub start: Timestamp,
    /// The relay (of the first domain, when the world federates).
    pub relay: RelaySpec,
    /// Relays of other domains and the network between relays (§16); `None`: the world
    /// has one relay and it does not federate.
    pub federation: Option<FederationSpec>,
    /// The agents.
    pub agents: Vec<AgentSpec>,
    /// Network partitions.
    pub partitions: Vec<Partition>,
    /// Threads users start.
    pub threads: Vec<ThreadSpec>,
    /// Group threads users start (§10): one leg per participant.
    pub groups: Vec<GroupSpec>,
    /// Shared context spaces users create (§12); each is created by a
    /// [`ScriptAction::CreateSpace`] command.
    pub spaces: Vec<SpaceSpec>,
    /// Scripted user commands.
    pub commands: Vec<CommandSpec>,
    /// Identity key changes (a re-installed agent whose relay registration the operator
    /// moved to the new key).
    pub key_changes: Vec<KeyChange>,
    /// Faults happen before this; afterwards the world is healed.
    pub run_for: Duration,
    /// How long after healing the final checks run.
    pub settle: Duration,
    /// Expected final thread states.
    pub expect: Vec<Expect>,
    /// Record a transcript (off for big swarms).
    pub transcript: bool,
    /// Checks known to fail on this scenario because of a documented core issue:
    /// (checker name, note). Their violations are reported as known, not as failures;
    /// a known issue that no longer happens is itself reported, so fixes are noticed.
    pub known_issues: Vec<(String, String)>,
    /// Agent crashes may cut a step between two outputs (between persistence steps); off:
    /// agents crash only between steps.
    pub crash_mid_step: bool,
}

/// The relay of a scenario.
#[derive(Debug, Clone)]
pub struct RelaySpec {
    /// Its configuration.
    pub config: RelayConfig,
    /// When it crashes and for how long.
    pub crashes: Vec<Outage>,
}

/// A federated world (§16): relays of several domains, each with its own agents (an agent's
/// relay is the one of its address's domain), linked over a simulated network.
#[derive(Debug, Clone)]
pub struct FederationSpec {
    /// The relays of the other domains, after [`Spec::relay`] (relay 0). Each one's
    /// `config.federation` is set (its signing key is replaced by one derived from the
    /// run's seed and its domain).
    pub relays: Vec<RelaySpec>,
    /// The network between two relays (latency, loss: a link drop, duplication).
    pub link: LinkModel,
    /// Partitions between two relays.
    pub partitions: Vec<RelayPartition>,
    /// Relay crashes aimed at a hand-over: armed at `at`, the relay crashes in the middle
    /// of the first step that hands a packet over (a push sent, or one settled), or
    /// idle after a minute if none comes.
    pub handover_crashes: Vec<(usize, Outage)>,
}

/// A partition between two relays (both ways).
#[derive(Debug, Clone, Copy)]
pub struct RelayPartition {
    /// The two relays (indices: 0 is [`Spec::relay`], `k` is `federation.relays[k - 1]`).
    pub relays: (usize, usize),
    /// When and how long.
    pub when: Outage,
}

impl FederationSpec {
    /// Every relay's spec, relay 0 first.
    pub fn all<'a>(&'a self, first: &'a RelaySpec) -> impl Iterator<Item = &'a RelaySpec> {
        std::iter::once(first).chain(self.relays.iter())
    }
}

/// A crash (or an offline period): when, and how long until restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    /// When, from the start.
    pub at: Duration,
    /// How long it lasts.
    pub length: Duration,
}

/// One agent.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// Short name (the address's user part).
    pub name: String,
    /// Its configuration.
    pub config: AgentConfig,
    /// Clock skew in milliseconds: the agent sees `now + skew`.
    pub skew_ms: i64,
    /// Its user.
    pub user: UserModel,
    /// Its LLM, used when `config.use_llm`.
    pub llm: LlmModel,
    /// Its action executor.
    pub actions: ActionModel,
    /// Its link to the relay.
    pub link: LinkModel,
    /// Periods with the device shut (agent suspended, connection dead).
    pub offline: Vec<Outage>,
    /// Crashes (`length`: time until restart).
    pub crashes: Vec<Outage>,
}

/// Which directions a partition cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Both.
    Both,
    /// Agent → relay only.
    ToRelay,
    /// Relay → agent only.
    FromRelay,
}

/// A partition of one agent's link.
#[derive(Debug, Clone, Copy)]
pub struct Partition {
    /// The agent.
    pub agent: usize,
    /// When and how long.
    pub when: Outage,
    /// Which directions.
    pub direction: Direction,
}

/// A thread a user starts.
#[derive(Debug, Clone)]
pub struct ThreadSpec {
    /// The initiating agent.
    pub from: usize,
    /// The other agent.
    pub to: usize,
    /// When.
    pub at: Duration,
    /// About what.
    pub intent: Intent,
    /// What the user says about it.
    pub context: Context,
}

/// A group thread a user starts (§10): its agent coordinates, one leg per participant.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    /// The coordinating agent.
    pub coordinator: usize,
    /// The other participants, in the order given.
    pub participants: Vec<usize>,
    /// When.
    pub at: Duration,
    /// About what.
    pub intent: Intent,
    /// What the coordinator's user says about it.
    pub context: Context,
    /// How the proposal's confirmations are collected (`quorum = q`, `sequential = true`,
    /// or everyone the proposal names).
    pub confirmation: GroupConfirmation,
}

/// A shared context space a user creates (§12): its creator's agent holds one leg per
/// other participant.
#[derive(Debug, Clone)]
pub struct SpaceSpec {
    /// The creating agent (a `full_write` participant).
    pub creator: usize,
    /// The space's name.
    pub name: String,
    /// The other participants and what each may write, in the order given.
    pub participants: Vec<(usize, SpacePermission)>,
    /// The fields it is created with (the creator's writes).
    pub fields: Context,
}

/// A scripted user command.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// When.
    pub at: Duration,
    /// Whose user.
    pub agent: usize,
    /// What.
    pub action: ScriptAction,
}

/// Scripted commands.
#[derive(Debug, Clone)]
pub enum ScriptAction {
    /// Add context to thread `thread` (index in `threads`).
    UpdateContext {
        /// Thread index.
        thread: usize,
        /// New values.
        context: Context,
    },
    /// Change a thread's intent.
    UpdateIntent {
        /// Thread index.
        thread: usize,
        /// New intent.
        intent: Intent,
        /// Why.
        reason: String,
        /// Fields the new intent needs from the peer (each `required`).
        needs: Vec<String>,
    },
    /// Split a thread into threads (§6.5 `thread_fork`).
    Fork {
        /// Thread index.
        thread: usize,
        /// The child threads' intents.
        intents: Vec<Intent>,
    },
    /// Cancel a thread.
    Cancel {
        /// Thread index.
        thread: usize,
    },
    /// Take back everything this agent shared in a thread (`a2acp thread retract`).
    Retract {
        /// Thread index.
        thread: usize,
    },
    /// Rotate the agent's own identity key (SPEC-NOTES "Key rotation"): a new key drawn
    /// from the run's seed, handed to the agent as its runtime would.
    RotateKey,
    /// Give the agent its recovery key (SPEC-NOTES "Recovery"; `a2acp agent init`): its
    /// public part, of a seed drawn from the run's seed, bound at the relay.
    RecoveryKey,
    /// The device is lost: the agent stops, its records and its identity key are gone.
    LoseDevice,
    /// A new device recovers the address with the recovery words (`a2acp agent recover`):
    /// a new key, the statement sent to the relay on a connection of its own, then the
    /// agent starts from empty records on the new key and binds the recovery key again.
    Recover,
    /// Back the agent up: a snapshot of its persisted records now (`a2acp agent backup`).
    Backup,
    /// Move the agent to a new device: the old device goes away (its connection closes,
    /// its records are kept aside) and a new device with the same identity key restores
    /// the last [`ScriptAction::Backup`] and connects (`a2acp agent restore`).
    NewDevice,
    /// The old device set aside by [`ScriptAction::NewDevice`] comes back from its own
    /// records and connects last: the relay replaces the new device's connection, which
    /// is set aside in its turn.
    OldDeviceReturns,
    /// The device set aside connects again (the person's choice): the relay replaces the
    /// other's connection and that device is gone for good (it was told, and stops).
    OtherDeviceReturns,
    /// Accept the changed key of an agent.
    AcceptKeyChange {
        /// The agent.
        peer: usize,
    },
    /// Block an agent.
    Block {
        /// The agent.
        peer: usize,
    },
    /// Hand group `group` (index in `groups`) to agent `to` (§10.3).
    TransferCoordinator {
        /// Group index.
        group: usize,
        /// The participant who coordinates from then on.
        to: usize,
    },
    /// Create space `space` (index in `spaces`; the command's agent is its creator).
    CreateSpace {
        /// Space index.
        space: usize,
    },
    /// Write one field of space `space` (index in `spaces`). A field named `~/<name>` is
    /// the writer's own field `<its address>/<name>`.
    SetSpaceField {
        /// Space index.
        space: usize,
        /// The field.
        field: String,
        /// Its new value.
        value: FieldValue,
    },
}

/// An identity change of one agent.
#[derive(Debug, Clone, Copy)]
pub struct KeyChange {
    /// The agent.
    pub agent: usize,
    /// When.
    pub at: Duration,
}

/// Expected final states of one thread, or of the legs of one group thread.
#[derive(Debug, Clone)]
pub struct Expect {
    /// Thread index (in `threads`), or group index (in `groups`) when `group`.
    pub thread: usize,
    /// `thread` is a group index: each entry is a participant's leg, which must be in that
    /// state at both of its ends (the participant's and the coordinator's).
    pub group: bool,
    /// Agent index → state.
    pub states: Vec<(usize, ThreadState)>,
}

impl Spec {
    /// When the world is healed: every fault is over.
    pub fn heal_at(&self) -> Duration {
        let mut end = self.run_for;
        let mut see = |o: &Outage| end = end.max(o.at + o.length);
        for c in &self.relay.crashes {
            see(c);
        }
        for a in &self.agents {
            a.offline.iter().for_each(&mut see);
            a.crashes.iter().for_each(&mut see);
        }
        for p in &self.partitions {
            see(&p.when);
        }
        if let Some(f) = &self.federation {
            for r in &f.relays {
                r.crashes.iter().for_each(&mut see);
            }
            for p in &f.partitions {
                see(&p.when);
            }
            for (_, c) in &f.handover_crashes {
                // Armed at `at`, it may wait a minute for a hand-over.
                see(&Outage {
                    at: c.at + Duration::from_secs(60),
                    length: c.length,
                });
            }
        }
        for k in &self.key_changes {
            end = end.max(k.at);
        }
        end
    }

    /// When the final checks run.
    pub fn end_at(&self) -> Duration {
        self.heal_at() + self.settle
    }

    /// The index of the agent called `name`.
    pub fn agent_index(&self, name: &str) -> Option<usize> {
        self.agents.iter().position(|a| a.name == name)
    }
}

// ----- raw TOML -----

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_scenario_parses() {
        for (name, text) in SHIPPED {
            let s = parse(text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!s.summary.is_empty(), "{name} has no summary");
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let e = parse("[[agent]]\nname = \"a\"\nfoo = 1\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("foo"), "{e}");
        let e = parse(
            "[[agent]]\nname = \"a\"\n[[thread]]\nfrom = \"a\"\nto = \"b\"\nintent = {category = \"x\", summary = \"y\"}\n",
            "x.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("no agent called `b`"), "{e}");
        let e = parse(
            "[[agent]]\nname = \"a\"\n[agent.link]\nloss = 1.5\n",
            "x.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("probability"), "{e}");
        let e = parse("[[agent]]\nname = \"a\"\nskew = \"soon\"\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("skew"), "{e}");
        let e = parse("", "x.toml").unwrap_err();
        assert!(e.to_string().contains("at least one"), "{e}");
    }
}
