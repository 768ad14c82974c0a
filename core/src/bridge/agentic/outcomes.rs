//! What a thread leaves in the agent's Agentic Protocol memory (seed 002 packages, spec
//! §8.2's human checkpoint as the seed's review): decided here from the agent's audit
//! records and its public view of the thread, written by the runtime.
//!
//! - A resolution proposed (`→ PROPOSED`) leaves a `decision` package: `awaiting_review`
//!   with `review_type: human` while this agent's user must still confirm, `complete`
//!   when the user is not asked; its alternatives are its open questions, the calendar
//!   file of an `add_calendar_event` its deliverable.
//! - Confirmed (`PROPOSED → CONFIRMED`): the decision is reviewed `complete` by the user;
//!   a different time or place asked for (`PROPOSED → NEGOTIATING`), a decline or an
//!   expiry: `revision_requested`, with why in the note.
//! - A thread that completes leaves a `milestone`; one that escalates, a `question`
//!   awaiting the user.
//! - A group's proposal and its quorum's outcome do the same in the group's project, on
//!   the coordinator; a participant's leg is a thread with the coordinator like any other.
//!
//! Package ids are derived from the thread and the packet they record, so a step done
//! again after a crash names the same package (the store keeps the first). Every string
//! is scrubbed of the user's never-share values before it leaves here, as the audit log
//! is.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::agent::ThreadState;
use crate::agent::{AgentEvent, AuditRecord, Thread};
use crate::audit_log::scrub_text;
use crate::packet::Body;
use crate::Address;

/// The project of a relationship: the peer's address (the same id relationship memory
/// uses).
pub fn relationship_project(peer: &Address) -> (String, String) {
    let id = peer.to_string();
    let name = format!(
        "Relationship with {}",
        id.strip_prefix("agent:").unwrap_or(&id)
    );
    (id, name)
}

/// The project of a group thread.
pub fn group_project(group_id: &str) -> (String, String) {
    (format!("group:{group_id}"), format!("Group {group_id}"))
}

/// What to write.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Deposit `package` (a §6 body without its hash) in `project_id`, created with
    /// `project_name` if it is new.
    Deposit {
        /// The project.
        project_id: String,
        /// Its name, for a new project.
        project_name: String,
        /// The package's body.
        package: Map<String, Value>,
    },
    /// The person's review of the decision of `thread` that awaits it (§5.3).
    Review {
        /// The `x-a2acp-thread` of the decision.
        thread: String,
        /// `complete` or `revision_requested`.
        status: &'static str,
        /// Why (the note).
        note: String,
    },
}

/// The member naming the thread a package records.
pub const THREAD_MEMBER: &str = "x-a2acp-thread";
/// The member naming the other agent.
pub const PEER_MEMBER: &str = "x-a2acp-peer";

/// What `record` leaves, given the thread it is about as it is after the step (`None`
/// when it is not a thread's), this agent's address and the user's never-share values.
pub fn outcomes(
    record: &AuditRecord,
    thread: Option<&Thread>,
    me: &Address,
    never_share: &[String],
) -> Vec<Outcome> {
    let mut out = outcomes_unscrubbed(record, thread, me);
    for o in &mut out {
        match o {
            Outcome::Deposit { package, .. } => {
                for v in package.values_mut() {
                    scrub(v, never_share);
                }
            }
            Outcome::Review { note, .. } => {
                scrub_text(note, never_share);
            }
        }
    }
    out
}

fn outcomes_unscrubbed(
    record: &AuditRecord,
    thread: Option<&Thread>,
    me: &Address,
) -> Vec<Outcome> {
    let at = record.at.to_rfc3339();
    match (&record.event, thread) {
        (AgentEvent::StateChanged { from, to, .. }, Some(t)) => {
            if t.group.is_some() && t.coordinator == *me {
                return Vec::new(); // the group's events speak for the coordinator
            }
            match (from, to) {
                (_, ThreadState::Proposed) => decision(t, me, &at).into_iter().collect(),
                (ThreadState::Proposed, ThreadState::Confirmed) => {
                    vec![review(&t.id, "complete", "confirmed")]
                }
                (ThreadState::Proposed, ThreadState::Negotiating) => vec![review(
                    &t.id,
                    "revision_requested",
                    "a different time or place was asked for",
                )],
                (ThreadState::Proposed, ThreadState::Declined) => {
                    vec![review(&t.id, "revision_requested", "declined")]
                }
                (ThreadState::Proposed, ThreadState::Expired) => vec![review(
                    &t.id,
                    "revision_requested",
                    "expired: not confirmed in time",
                )],
                (_, ThreadState::Completed) => vec![milestone(t, me, &at)],
                _ => Vec::new(),
            }
        }
        (AgentEvent::Escalated { reason }, Some(t)) => vec![question(t, me, reason, &at)],
        (
            AgentEvent::GroupProposed {
                group_id,
                summary,
                confirmers,
                ..
            },
            _,
        ) => {
            let (project_id, project_name) = group_project(group_id);
            let mut p = base(
                &project_id,
                &derive_id(&["group-decision", group_id, summary]),
                me,
                &at,
            );
            p.insert("package_type".into(), "decision".into());
            p.insert("status".into(), "awaiting_review".into());
            p.insert("review_type".into(), "human".into());
            p.insert(
                "title".into(),
                cap(&format!("Proposed to the group: {summary}")).into(),
            );
            p.insert("decisions_made".into(), json!([summary]));
            p.insert(
                "handoff_note".into(),
                cap(&format!(
                    "Awaiting the confirmations of {}.",
                    confirmers
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .into(),
            );
            p.insert(THREAD_MEMBER.into(), group_id.clone().into());
            vec![Outcome::Deposit {
                project_id,
                project_name,
                package: p,
            }]
        }
        (
            AgentEvent::GroupOutcome {
                group_id,
                reached,
                confirmed,
                required,
            },
            _,
        ) => {
            let (status, note) = if *reached {
                (
                    "complete",
                    format!("the quorum confirmed ({confirmed} of {required})"),
                )
            } else {
                (
                    "revision_requested",
                    format!("the quorum cannot be reached ({confirmed} of {required})"),
                )
            };
            vec![Outcome::Review {
                thread: group_id.clone(),
                status,
                note,
            }]
        }
        _ => Vec::new(),
    }
}

fn review(thread: &str, status: &'static str, note: &str) -> Outcome {
    Outcome::Review {
        thread: thread.to_string(),
        status,
        note: note.to_string(),
    }
}

/// `pkg_` and 32 hex digits of the hash of `parts`.
fn derive_id(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    let hex: String = h
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("pkg_{hex}")
}

fn base(project_id: &str, package_id: &str, me: &Address, at: &str) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("package_id".into(), package_id.into());
    p.insert("project_id".into(), project_id.into());
    p.insert("relay_version".into(), crate::memory::RELAY_VERSION.into());
    p.insert("created_at".into(), at.into());
    p.insert(
        "created_by".into(),
        json!({"id": me.to_string(), "type": "agent", "session_id": null}),
    );
    p.insert("review_type".into(), "none".into());
    p
}

fn thread_base(
    t: &Thread,
    package_id: &str,
    me: &Address,
    at: &str,
) -> (String, String, Map<String, Value>) {
    let (project_id, project_name) = relationship_project(&t.peer);
    let mut p = base(&project_id, package_id, me, at);
    p.insert("description".into(), cap(&t.intent.summary).into());
    let mut tags = vec![Value::from("a2acp")];
    if !t.intent.category.is_empty() {
        tags.push(cap(&t.intent.category).into());
    }
    p.insert("tags".into(), Value::Array(tags));
    p.insert(THREAD_MEMBER.into(), t.id.clone().into());
    p.insert(PEER_MEMBER.into(), t.peer.to_string().into());
    (project_id, project_name, p)
}

fn calendar_deliverable(t: &Thread, actions: &[crate::packet::ActionSpec]) -> Vec<Value> {
    actions
        .iter()
        .filter(|a| a.action == "add_calendar_event")
        .take(1)
        .map(|_| json!({"path": format!("calendar/{}.ics", t.id), "type": "ics"}))
        .collect()
}

fn decision(t: &Thread, me: &Address, at: &str) -> Option<Outcome> {
    let r = t.stage.resolution()?;
    let proposal = &r.body.proposal;
    let asked = r.body.requires_confirmation_from.contains(me);
    let id = derive_id(&["decision", &t.id, &r.packet_id]);
    let (project_id, project_name, mut p) = thread_base(t, &id, me, at);
    p.insert("package_type".into(), "decision".into());
    p.insert(
        "status".into(),
        if asked { "awaiting_review" } else { "complete" }.into(),
    );
    p.insert(
        "review_type".into(),
        if asked { "human" } else { "none" }.into(),
    );
    p.insert(
        "title".into(),
        cap(&format!("Proposed: {}", proposal.summary)).into(),
    );
    p.insert("decisions_made".into(), json!([cap(&proposal.summary)]));
    let alternatives: Vec<Value> = proposal
        .alternatives
        .iter()
        .map(|a| {
            let why = if a.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", a.reason)
            };
            Value::from(cap(&format!("Alternative: {}{why}", a.summary)))
        })
        .collect();
    p.insert("open_questions".into(), Value::Array(alternatives));
    let who = if r.proposer == *me {
        "this agent".to_string()
    } else {
        r.proposer.to_string()
    };
    let note = if asked {
        format!("Proposed by {who}; waiting for the user's confirmation.")
    } else {
        format!("Proposed by {who}; the user is not asked to confirm it.")
    };
    p.insert("handoff_note".into(), cap(&note).into());
    p.insert(
        "deliverables".into(),
        Value::Array(calendar_deliverable(t, &r.body.actions_on_confirm)),
    );
    Some(Outcome::Deposit {
        project_id,
        project_name,
        package: p,
    })
}

/// The last resolution of the thread's history: its packet id, summary and actions.
fn last_resolution(t: &Thread) -> Option<(String, crate::packet::ResolutionBody)> {
    t.history
        .iter()
        .rev()
        .find(|h| h.kind == "resolution")
        .and_then(|h| {
            let packet = crate::packet::Packet::parse(h.json.as_bytes()).ok()?;
            match packet.body {
                Body::Resolution(b) => Some((h.packet_id.clone(), b)),
                _ => None,
            }
        })
}

fn milestone(t: &Thread, me: &Address, at: &str) -> Outcome {
    let id = derive_id(&["milestone", &t.id]);
    let (project_id, project_name, mut p) = thread_base(t, &id, me, at);
    p.insert("package_type".into(), "milestone".into());
    p.insert("status".into(), "complete".into());
    match last_resolution(t) {
        Some((packet_id, body)) => {
            p.insert(
                "title".into(),
                cap(&format!("Done: {}", body.proposal.summary)).into(),
            );
            p.insert(
                "decisions_made".into(),
                json!([cap(&body.proposal.summary)]),
            );
            p.insert(
                "parent_package_id".into(),
                derive_id(&["decision", &t.id, &packet_id]).into(),
            );
            p.insert(
                "deliverables".into(),
                Value::Array(calendar_deliverable(t, &body.actions_on_confirm)),
            );
        }
        None => {
            p.insert(
                "title".into(),
                cap(&format!("Done: {}", t.intent.summary)).into(),
            );
        }
    }
    p.insert(
        "handoff_note".into(),
        cap(&format!("Completed with {}.", t.peer)).into(),
    );
    Outcome::Deposit {
        project_id,
        project_name,
        package: p,
    }
}

fn question(t: &Thread, me: &Address, reason: &str, at: &str) -> Outcome {
    let id = derive_id(&["question", &t.id, at]);
    let (project_id, project_name, mut p) = thread_base(t, &id, me, at);
    p.insert("package_type".into(), "question".into());
    p.insert("status".into(), "awaiting_review".into());
    p.insert("review_type".into(), "human".into());
    p.insert(
        "title".into(),
        cap(&format!("Needs you: {}", t.intent.summary)).into(),
    );
    p.insert("open_questions".into(), json!([cap(reason)]));
    p.insert(
        "handoff_note".into(),
        cap(&format!(
            "The agents handed this thread with {} to their users.",
            t.peer
        ))
        .into(),
    );
    Outcome::Deposit {
        project_id,
        project_name,
        package: p,
    }
}

/// At most 500 characters (titles and notes are prose, not payloads).
fn cap(s: &str) -> String {
    const MAX: usize = 500;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(MAX - 1).collect();
        t.push('…');
        t
    }
}

fn scrub(v: &mut Value, secrets: &[String]) {
    match v {
        Value::String(s) => {
            scrub_text(s, secrets);
        }
        Value::Array(a) => a.iter_mut().for_each(|x| scrub(x, secrets)),
        Value::Object(m) => m.values_mut().for_each(|x| scrub(x, secrets)),
        _ => {}
    }
}
