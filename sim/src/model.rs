//! Models of the world around the agents: users, LLMs, action executors, network links.

use std::collections::{BTreeMap, BTreeSet};

use a2acp_core::agent::{
    ActionRequest, ConsentAnswer, FieldChoice, LlmRequest, Prompt, PromptKind, ResolutionAnswer,
    Thread,
};
use a2acp_core::negotiator::{self, Rejected, View};
use a2acp_core::packet::{Context, Intent};
use a2acp_core::Address;
use serde_json::Value;

use crate::util::Rng;

/// How a user answers consent prompts (§7.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsentPolicy {
    /// Share every field.
    Approve,
    /// Share the first half of the fields (rounded up), decline the rest.
    ApproveSome,
    /// Decline all.
    DeclineAll,
    /// Never answer.
    Never,
    /// One of the above, drawn from the seed.
    Random,
}

impl ConsentPolicy {
    /// Parses a scenario word.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "approve" => Self::Approve,
            "approve_some" => Self::ApproveSome,
            "decline_all" => Self::DeclineAll,
            "never" => Self::Never,
            "random" => Self::Random,
            _ => return None,
        })
    }
}

/// How a user answers resolution prompts (§8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolutionPolicy {
    /// Confirm.
    Confirm,
    /// "Can't make it — make an excuse for me".
    Excuse,
    /// Decline outright.
    Decline,
    /// Ask for a different time.
    DifferentTime,
    /// Ask for a different place.
    DifferentPlace,
    /// Never answer.
    Never,
    /// One of the above, drawn from the seed (mostly confirm).
    Random,
}

impl ResolutionPolicy {
    /// Parses a scenario word.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "confirm" => Self::Confirm,
            "excuse" => Self::Excuse,
            "decline" => Self::Decline,
            "different_time" => Self::DifferentTime,
            "different_place" => Self::DifferentPlace,
            "never" => Self::Never,
            "random" => Self::Random,
            _ => return None,
        })
    }
}

/// What a user does about a changed key of another agent (§16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyChangePolicy {
    /// Checks it out of band and accepts it, after the usual delay.
    Accept,
    /// Leaves the alert unanswered.
    Ignore,
}

/// What a user does with a §7.2 suggestion ("always share X with Bob?").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuggestionPolicy {
    /// Accepts it, after the usual delay.
    Accept,
    /// Leaves it.
    Ignore,
}

/// A user: how fast and how they answer.
#[derive(Debug, Clone)]
pub struct UserModel {
    /// Delay before answering, uniform in `[lo, hi]` milliseconds.
    pub delay: (u64, u64),
    /// Policy for the n-th consent prompt (the last one repeats).
    pub consent: Vec<ConsentPolicy>,
    /// Policy for the n-th resolution prompt (the last one repeats).
    pub resolution: Vec<ResolutionPolicy>,
    /// The real reason typed with an excuse: must never leave the device.
    pub excuse_reason: Option<String>,
    /// Key change alerts.
    pub key_change: KeyChangePolicy,
    /// §7.2 suggestions.
    pub suggestions: SuggestionPolicy,
}

impl Default for UserModel {
    fn default() -> Self {
        UserModel {
            delay: (20, 20),
            consent: vec![ConsentPolicy::Approve],
            resolution: vec![ResolutionPolicy::Confirm],
            excuse_reason: None,
            key_change: KeyChangePolicy::Ignore,
            suggestions: SuggestionPolicy::Ignore,
        }
    }
}

/// A decided answer to a prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum UserAnswer {
    /// A consent answer.
    Consent(ConsentAnswer),
    /// A resolution answer.
    Resolution(ResolutionAnswer),
    /// No answer, ever.
    Never,
}

impl UserModel {
    /// Decides the answer to `prompt`, the `n`-th of its kind this user sees.
    pub fn decide(&self, prompt: &Prompt, n: usize, rng: &mut Rng) -> UserAnswer {
        match &prompt.kind {
            PromptKind::Consent { fields } => {
                let mut p = self.consent[n.min(self.consent.len() - 1)];
                if p == ConsentPolicy::Random {
                    p = *rng.pick(&[
                        ConsentPolicy::Approve,
                        ConsentPolicy::Approve,
                        ConsentPolicy::ApproveSome,
                        ConsentPolicy::DeclineAll,
                    ]);
                }
                match p {
                    ConsentPolicy::Never => UserAnswer::Never,
                    ConsentPolicy::DeclineAll => UserAnswer::Consent(ConsentAnswer::DeclineAll),
                    ConsentPolicy::Approve | ConsentPolicy::Random => {
                        UserAnswer::Consent(ConsentAnswer::ShareSelected(
                            fields
                                .iter()
                                .map(|f| (f.field.clone(), FieldChoice::Share))
                                .collect(),
                        ))
                    }
                    ConsentPolicy::ApproveSome => {
                        let keep = fields.len().div_ceil(2);
                        UserAnswer::Consent(ConsentAnswer::ShareSelected(
                            fields
                                .iter()
                                .enumerate()
                                .map(|(i, f)| {
                                    let c = if i < keep {
                                        FieldChoice::Share
                                    } else {
                                        FieldChoice::DontShare
                                    };
                                    (f.field.clone(), c)
                                })
                                .collect(),
                        ))
                    }
                }
            }
            PromptKind::Resolution { .. } => {
                let mut p = self.resolution[n.min(self.resolution.len() - 1)];
                if p == ResolutionPolicy::Random {
                    p = *rng.pick(&[
                        ResolutionPolicy::Confirm,
                        ResolutionPolicy::Confirm,
                        ResolutionPolicy::Confirm,
                        ResolutionPolicy::Excuse,
                        ResolutionPolicy::DifferentTime,
                        ResolutionPolicy::Decline,
                    ]);
                }
                UserAnswer::Resolution(match p {
                    ResolutionPolicy::Never => return UserAnswer::Never,
                    ResolutionPolicy::Confirm | ResolutionPolicy::Random => {
                        ResolutionAnswer::Confirm
                    }
                    ResolutionPolicy::Excuse => ResolutionAnswer::MakeExcuse {
                        actual_reason: self.excuse_reason.clone(),
                    },
                    ResolutionPolicy::Decline => ResolutionAnswer::Decline,
                    ResolutionPolicy::DifferentTime => ResolutionAnswer::DifferentTime,
                    ResolutionPolicy::DifferentPlace => ResolutionAnswer::DifferentPlace,
                })
            }
        }
    }
}

/// What the simulated LLM answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlmAnswer {
    /// A valid decision (the deterministic negotiator's, computed from the request).
    Valid,
    /// Prose that is no decision.
    Malformed,
    /// An error (timeout, rate limit).
    Fail,
    /// Drawn from the seed with the model's rates.
    Random,
}

impl LlmAnswer {
    /// Parses a scenario word.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "valid" => Self::Valid,
            "malformed" => Self::Malformed,
            "fail" => Self::Fail,
            "random" => Self::Random,
            _ => None?,
        })
    }
}

/// The LLM behind an agent with `use_llm`.
#[derive(Debug, Clone)]
pub struct LlmModel {
    /// Latency, uniform in `[lo, hi]` milliseconds.
    pub latency: (u64, u64),
    /// Answer to the n-th request (the last one repeats).
    pub answers: Vec<LlmAnswer>,
    /// For `random`: probability of an error.
    pub fail_rate: f64,
    /// For `random`: probability of a malformed answer.
    pub malformed_rate: f64,
}

impl Default for LlmModel {
    fn default() -> Self {
        LlmModel {
            latency: (800, 2500),
            answers: vec![LlmAnswer::Valid],
            fail_rate: 0.0,
            malformed_rate: 0.0,
        }
    }
}

impl LlmModel {
    /// The answer to the `n`-th request.
    pub fn answer(
        &self,
        n: usize,
        req: &LlmRequest,
        me: &Address,
        thread: Option<&Thread>,
        rng: &mut Rng,
    ) -> Result<String, String> {
        let mut a = self.answers[n.min(self.answers.len() - 1)];
        if a == LlmAnswer::Random {
            let x = rng.unit();
            a = if x < self.fail_rate {
                LlmAnswer::Fail
            } else if x < self.fail_rate + self.malformed_rate {
                LlmAnswer::Malformed
            } else {
                LlmAnswer::Valid
            };
        }
        match a {
            LlmAnswer::Fail => Err("503 model overloaded".into()),
            LlmAnswer::Malformed => Ok("Sure! I think dinner sounds lovely, let me know.".into()),
            _ => match valid_answer(req, me, thread) {
                Some(s) => Ok(s),
                None => Ok("{\"decision\": \"wait\"}".into()),
            },
        }
    }
}

/// The decision the deterministic negotiator takes on the thread layer of the request:
/// the simulated LLM reads its prompt and answers with [`negotiator::decide`].
pub fn valid_answer(req: &LlmRequest, me: &Address, thread: Option<&Thread>) -> Option<String> {
    let t = thread?;
    let v = Value::Object(a2acp_core::agent::prompt_thread(&req.layers)?);
    let intent: Intent = serde_json::from_value(v.get("intent")?.clone()).ok()?;
    let obj = |k: &str| -> Context {
        v.get(k)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let set = |k: &str| -> BTreeSet<String> {
        v.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mine = obj("mine");
    let theirs = obj("theirs");
    let remembered = obj("remembered");
    let asked = set("asked");
    let unavailable = set("unavailable");
    let usually_declined = set("usually_declined");
    let rejected: Vec<Rejected> = v
        .get("rejected")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default();
    let round_trips = v.get("round_trips").and_then(Value::as_u64).unwrap_or(0) as u32;
    let view = View {
        intent: &intent,
        i_am_initiator: t.initiator,
        me,
        peer: &t.peer,
        mine: &mine,
        theirs: &theirs,
        asked: &asked,
        unavailable: &unavailable,
        remembered: &remembered,
        usually_declined: &usually_declined,
        rejected: &rejected,
        round_trips,
    };
    serde_json::to_string(&negotiator::decide(&view)).ok()
}

/// The tools that carry out actions (bookings, calendar entries).
#[derive(Debug, Clone, Default)]
pub struct ActionModel {
    /// Latency, uniform in `[lo, hi]` milliseconds.
    pub latency: (u64, u64),
    /// Actions whose first attempt fails (e.g. `book_table`: fully booked).
    pub fail_first: BTreeSet<String>,
    /// Probability that any other attempt fails.
    pub fail_rate: f64,
    /// What a check of an action reports (§8.3 sequential confirmation), by action name:
    /// the details its service would do it with. A check of another action finds nothing.
    pub checks: BTreeMap<String, Context>,
}

/// Remembers action outcomes by id, so a request repeated after a restart gets the same
/// answer (ids are stable across restarts: the runtime makes actions idempotent).
#[derive(Debug, Clone, Default)]
pub struct ActionLedger {
    /// Outcome per action id.
    pub results: BTreeMap<u64, Result<Context, String>>,
    /// Attempts per action name (not undo).
    pub attempts: BTreeMap<String, u32>,
}

impl ActionModel {
    /// The outcome of the action request `a` (carried out, undone or checked).
    pub fn outcome(
        &self,
        ledger: &mut ActionLedger,
        a: &ActionRequest,
        rng: &mut Rng,
    ) -> Result<Context, String> {
        let (id, name) = (a.id, a.action.action.as_str());
        if let Some(r) = ledger.results.get(&id) {
            return r.clone();
        }
        let r = if a.check {
            if rng.chance(self.fail_rate) {
                Err(format!("{name}: no availability"))
            } else {
                Ok(self.checks.get(name).cloned().unwrap_or_default())
            }
        } else if a.undo {
            Ok(Context::new())
        } else {
            let n = ledger.attempts.entry(name.to_string()).or_insert(0);
            *n += 1;
            if *n == 1 && self.fail_first.contains(name) {
                Err(format!("{name}: fully booked"))
            } else if rng.chance(self.fail_rate) {
                Err(format!("{name}: service unavailable"))
            } else {
                Ok(Context::new())
            }
        };
        ledger.results.insert(id, r.clone());
        r
    }
}

/// One agent's link to the relay.
#[derive(Debug, Clone)]
pub struct LinkModel {
    /// One-way latency bounds in milliseconds.
    pub latency: (u64, u64),
    /// Exponential (long-tailed) instead of uniform within the bounds.
    pub exponential: bool,
    /// Probability a frame is lost; the stream breaks there (TCP cannot skip a frame):
    /// both ends notice by a reset or by their heartbeat timers.
    pub loss: f64,
    /// Probability a frame is delivered twice.
    pub duplicate: f64,
    /// Probability a frame is held back and overtaken by later ones.
    pub reorder: f64,
    /// Longest extra delay of a reordered frame, milliseconds.
    pub reorder_window: u64,
}

impl Default for LinkModel {
    fn default() -> Self {
        LinkModel {
            latency: (20, 20),
            exponential: false,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_window: 200,
        }
    }
}

impl LinkModel {
    /// One latency draw, milliseconds.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let (lo, hi) = self.latency;
        if hi <= lo {
            return lo;
        }
        if self.exponential {
            let mean = (hi - lo) as f64 / 4.0;
            let x = -mean * (1.0 - rng.unit()).ln();
            lo + (x as u64).min(hi - lo)
        } else {
            rng.between(lo, hi)
        }
    }
}
