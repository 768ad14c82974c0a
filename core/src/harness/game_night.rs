//! The spec's game night (§10.2): Alice's agent coordinates a game night for four with
//! Bob (New York), Charlie (Berlin) and Diana (London). One definition, used by the
//! tests, the simulator and the runtimes' group demo.
//!
//! Friday 27 March 20:00–23:00 London suits all four when Diana can do Friday; Saturday
//! 19:00–23:00 is longer but Charlie cannot come. Without Diana's Friday no window fits
//! everyone and Charlie is the binding constraint: he alone is asked about Saturday.

use std::collections::BTreeMap;

use serde_json::json;

use super::Net;
use crate::address::Address;
use crate::agent::{
    ActionRequest, AgentConfig, Command, ConsentAnswer, FieldChoice, GroupConfirmation, Prompt,
    PromptKind, ResolutionAnswer,
};
use crate::packet::{Context, Intent};
use crate::time::Timestamp;

/// When the example starts.
pub const START: &str = "2026-03-23T09:00:00Z";

fn ctx(v: serde_json::Value) -> Context {
    v.as_object().cloned().unwrap_or_default()
}

// The fallback is a literal valid address: parsing it cannot fail.
#[allow(clippy::expect_used)]
fn addr(user: &str, domain: &str) -> Address {
    Address::new(user, domain)
        .unwrap_or_else(|_| Address::parse("agent:invalid@invalid").expect("static address"))
}

/// A participant's profile: name, zone, availability and what else they would share.
fn participant(user: &str, domain: &str, profile: serde_json::Value) -> AgentConfig {
    let mut c = AgentConfig::new(addr(user, domain));
    c.profile = ctx(profile);
    c
}

/// Alice, the coordinator. Her never_share health note must never leave.
pub fn alice(domain: &str) -> AgentConfig {
    participant(
        "alice",
        domain,
        json!({
            "name": "Alice",
            "timezone": "Europe/London",
            "health_info": "SECRET-alice-migraine",
        }),
    )
}

/// Bob in New York: free Friday and Saturday afternoons his time.
pub fn bob(domain: &str) -> AgentConfig {
    participant(
        "bob",
        domain,
        json!({
            "name": "Bob",
            "timezone": "America/New_York",
            "time_windows": ["2026-03-27 15:00-19:00", "2026-03-28 15:00-19:00"],
            "dietary": ["vegetarian"],
            "budget_range": "$5-25 each",
            "health_info": "SECRET-bob-insulin",
        }),
    )
}

/// Charlie in Berlin: Friday evening, only a Saturday morning.
pub fn charlie(domain: &str) -> AgentConfig {
    participant(
        "charlie",
        domain,
        json!({
            "name": "Charlie",
            "timezone": "Europe/Berlin",
            "time_windows": [
                {"date": "2026-03-27", "start": "20:30", "end": "00:30"},
                "2026-03-28 10:00-12:00"
            ],
            "dietary": "nut allergy",
            "health_info": "SECRET-charlie-epipen",
        }),
    )
}

/// Diana in London: Saturday evening, and Friday evening when `friday`.
pub fn diana(domain: &str, friday: bool) -> AgentConfig {
    let mut windows = vec![json!("2026-03-28 19:00-23:00")];
    if friday {
        windows.insert(0, json!("2026-03-27 20:00-23:00"));
    }
    participant(
        "diana",
        domain,
        json!({
            "name": "Diana",
            "timezone": "Europe/London",
            "time_windows": windows,
            "health_info": "SECRET-diana-pregnant",
        }),
    )
}

/// The intent.
pub fn intent() -> Intent {
    Intent {
        category: "group_scheduling".into(),
        summary: "Game night for 4".into(),
        urgency: None,
        scope_change: None,
    }
}

/// What Alice says when she starts it.
pub fn context() -> Context {
    ctx(json!({
        "event_type": "game night",
        "duration": "PT3H",
        "timezone": "Europe/London",
        "time_windows": ["2026-03-27 19:00-23:00", "2026-03-28 18:00-23:30"],
        "budget_range": "£10-30pp",
    }))
}

/// A network with Alice (0), Bob (1), Charlie (2) and Diana (3) connected.
pub fn net(diana_friday: bool) -> Net {
    let start = Timestamp::parse_rfc3339(START).unwrap_or_default();
    let d = "a2acp.io";
    let mut net = Net::new(d, start, [9; 32]);
    let configs = [alice(d), bob(d), charlie(d), diana(d, diana_friday)];
    for (i, c) in configs.into_iter().enumerate() {
        let n = u8::try_from(i).unwrap_or(0);
        let k = net.add_agent(c, [40 + n; 32], [50 + n; 32]);
        net.connect(k);
    }
    net.settle();
    net
}

/// Alice starts the game night with the other three, collecting confirmations as
/// `confirmation` says.
pub fn start(net: &mut Net, confirmation: GroupConfirmation) {
    let participants = (1..net.nodes.len()).map(|i| net.address(i)).collect();
    net.command(
        0,
        Command::StartGroupThread {
            participants,
            intent: intent(),
            context: context(),
            confirmation,
        },
    );
    net.settle();
}

/// How a scripted user answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Share every field asked, confirm every proposal.
    Yes,
    /// Share what is asked but decline to give way when asked to be flexible.
    Stubborn,
    /// Decline every proposal.
    Decline,
    /// Answer every proposal with "can't make it — make an excuse for me".
    Excuse,
    /// Never answer a proposal.
    Silent,
}

/// Scripted users: each answers by its entry in `answers` (by node index; missing:
/// [`Answer::Yes`]); every action succeeds. Runs until nobody has anything left to answer.
pub fn scripted_users(net: &mut Net, answers: &BTreeMap<usize, Answer>) {
    scripted_users_with(net, answers, &mut |_| Ok(Context::new()));
}

/// [`scripted_users`], with `service` answering every action request (a check's findings,
/// or a failure). Returns the resolution prompts shown, in the order they were answered
/// (or left unanswered), with the node that showed each.
pub fn scripted_users_with(
    net: &mut Net,
    answers: &BTreeMap<usize, Answer>,
    service: &mut dyn FnMut(&ActionRequest) -> Result<Context, String>,
) -> Vec<(usize, Prompt)> {
    let mut seen: Vec<(usize, Prompt)> = Vec::new();
    loop {
        let mut progressed = false;
        for i in 0..net.nodes.len() {
            let how = answers.get(&i).copied().unwrap_or(Answer::Yes);
            if let Some(p) = net.prompt(i) {
                match p.kind {
                    PromptKind::Consent { fields } => {
                        let flexible = fields.iter().any(|f| f.reason.contains("any chance"));
                        let m: BTreeMap<String, FieldChoice> = fields
                            .iter()
                            .map(|f| {
                                let c = if flexible && how == Answer::Stubborn {
                                    FieldChoice::DontShare
                                } else {
                                    FieldChoice::Share
                                };
                                (f.field.clone(), c)
                            })
                            .collect();
                        net.answer_consent(i, p.id, ConsentAnswer::ShareSelected(m));
                        progressed = true;
                    }
                    PromptKind::Resolution { .. }
                        if !seen
                            .iter()
                            .any(|(_, x)| x.id == p.id && x.thread_id == p.thread_id) =>
                    {
                        seen.push((i, p.clone()));
                        progressed = true;
                    }
                    PromptKind::Resolution { .. } => match how {
                        Answer::Silent => {}
                        Answer::Decline => {
                            net.answer_resolution(i, p.id, ResolutionAnswer::Decline);
                            progressed = true;
                        }
                        Answer::Excuse => {
                            let excuse = ResolutionAnswer::MakeExcuse {
                                actual_reason: None,
                            };
                            net.answer_resolution(i, p.id, excuse);
                            progressed = true;
                        }
                        _ => {
                            net.answer_resolution(i, p.id, ResolutionAnswer::Confirm);
                            progressed = true;
                        }
                    },
                }
            }
            if let Some(a) = net.nodes.get(i).and_then(|n| n.actions.front()).cloned() {
                net.finish_action_with(i, service(&a));
                progressed = true;
            }
            net.settle();
        }
        if !progressed {
            return seen;
        }
    }
}
