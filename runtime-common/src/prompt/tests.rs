use super::*;
use a2acp_core::agent::{
    Command, ConsentAnswer, FieldChoice, Prompt, PromptKind, ResolutionAnswer, Suggestion,
};
use a2acp_core::display;
use serde_json::Value;
use std::collections::BTreeMap;

use crate::control::GroupRef;
use a2acp_core::agent::ConsentField;
use a2acp_core::packet::{Intent, Priority, Proposal};
use a2acp_core::{Address, Timestamp};

/// The terminal flow beside the host's open prompts, driven as the daemon drives them:
/// the host opens a prompt before the flow shows it, and closes it when it handles the
/// answer.
#[derive(Default)]
struct Flow {
    open: OpenPrompts,
    ui: PromptUi,
}

impl Flow {
    fn show(&mut self, p: Prompt) -> Vec<UiOut> {
        self.open.insert(p.id, p.clone());
        self.ui.show(&p)
    }

    fn key(&mut self, k: Key) -> Vec<UiOut> {
        let out = self.ui.key(k, &self.open);
        for o in &out {
            if let UiOut::Answer(
                Command::AnswerConsent { prompt_id, .. }
                | Command::AnswerResolution { prompt_id, .. },
            ) = o
            {
                self.open.remove(prompt_id);
            }
        }
        out
    }

    fn suggest(&mut self, s: Suggestion, text: String) -> Vec<UiOut> {
        self.ui.suggest(s, text)
    }
}

fn consent() -> Prompt {
    Prompt {
        id: 1,
        thread_id: "thr_x".into(),
        peer: Address::parse("agent:bob@localhost").unwrap(),
        intent: Intent {
            category: "scheduling".into(),
            summary: "Dinner".into(),
            urgency: None,
            scope_change: None,
        },
        kind: PromptKind::Consent {
            fields: vec![
                ConsentField {
                    field: "transport_mode".into(),
                    reason: "distance".into(),
                    priority: Priority::Helpful,
                    suggested: Some("driving".into()),
                },
                ConsentField {
                    field: "cuisine_preference".into(),
                    reason: "narrow".into(),
                    priority: Priority::Helpful,
                    suggested: Some("Italian".into()),
                },
            ],
        },
        drift: None,
    }
}

fn resolution() -> Prompt {
    Prompt {
        id: 2,
        kind: PromptKind::Resolution {
            proposal: Proposal {
                summary: "Dinner 19:00".into(),
                details: Default::default(),
                alternatives: vec![],
                reasoning: String::new(),
            },
            proposer: Address::parse("agent:bob@localhost").unwrap(),
            deadline: Timestamp::from_secs(100),
            reminder: false,
        },
        ..consent()
    }
}

/// The three prompts of a group thread say who asks and for whom: the coordinator's
/// one prompt for the group's proposal, a participant's prompts from the coordinator,
/// and the coordinator's prompt on one leg; the terminal queue shows them so too.
#[test]
fn a_group_prompt_says_who_asks_for_whom() {
    let g = GroupRef {
        group_id: "grp_g".into(),
        coordinator: "agent:alice@localhost".into(),
        participants: ["alice", "bob", "charlie", "diana"]
            .iter()
            .map(|u| format!("agent:{u}@localhost"))
            .collect(),
    };
    let alice = Address::parse("agent:alice@localhost").unwrap();
    // Alice's prompt for the group: its thread is the group, its peer herself.
    let mut mine = resolution();
    mine.thread_id = "grp_g".into();
    mine.peer = alice.clone();
    if let PromptKind::Resolution { proposer, .. } = &mut mine.kind {
        *proposer = alice.clone();
    }
    let r = render_in(&mine, Some(&g));
    assert!(
        r.starts_with("── Prompt #2 · the group's proposal: your agent proposes to you, bob, charlie, diana (group grp_g of 4):\n   “Dinner 19:00”"),
        "{r}"
    );
    assert!(
        r.contains("[x] Decline closes the group for everyone"),
        "{r}"
    );
    assert_eq!(
        summary_in(&mine, Some(&g)),
        "#2 group proposal · “Dinner 19:00” · group grp_g (4 participants)"
    );
    // Bob's prompts on his leg come from Alice, the coordinator.
    let mut asks = consent();
    asks.peer = alice.clone();
    let c = render_in(&asks, Some(&g));
    assert!(
        c.starts_with("── Prompt #1 · alice's agent is asking for (scheduling: “Dinner”, thread thr_x — alice coordinates this group thread of 4 (alice, bob, charlie, diana); what you share goes to alice's agent only):"),
        "{c}"
    );
    let mut proposes = resolution();
    proposes.peer = alice.clone();
    if let PromptKind::Resolution { proposer, .. } = &mut proposes.kind {
        *proposer = alice;
    }
    let r = render_in(&proposes, Some(&g));
    assert!(
        r.starts_with("── Prompt #2 · alice proposes to the group (alice, bob, charlie, diana; thread thr_x):"),
        "{r}"
    );
    assert!(!r.contains("closes the group"), "{r}");
    assert_eq!(
        summary_in(&proposes, Some(&g)),
        "#2 resolution · “Dinner 19:00” · thread thr_x (group grp_g)"
    );
    // Alice's prompt on her leg with Bob (Bob's agent asks her something).
    let c = render_in(&consent(), Some(&g));
    assert!(
        c.starts_with("── Prompt #1 · bob's agent is asking for (scheduling: “Dinner”, thread thr_x, a leg of your group thread grp_g):"),
        "{c}"
    );
    // Without a group, as before.
    assert!(render(&consent()).starts_with(
        "── Prompt #1 · bob's agent is asking for (scheduling: “Dinner”, thread thr_x):"
    ));
    // The terminal shows the group's wording now and when the prompt's turn comes.
    let mut ui = PromptUi::new();
    let mut open = OpenPrompts::new();
    let mut first = consent();
    first.id = 7;
    open.insert(7, first.clone());
    open.insert(2, mine.clone());
    ui.show(&first);
    let out = ui.show_in(&mine, Some(g.clone()));
    assert_eq!(
        out,
        vec![UiOut::Print(
            "   (prompt #2 waits: #2 group proposal · “Dinner 19:00” · group grp_g (4 participants))".into()
        )]
    );
    let out = ui.key(Key::Char('d'), &open);
    assert!(
        matches!(&out[..], [UiOut::Print(_), UiOut::Answer(_), UiOut::Print(p)] if p.contains("the group's proposal")),
        "{out:?}"
    );
}

#[test]
fn renders_keys() {
    let c = render(&consent());
    assert!(
        c.contains("transport_mode") && c.contains("[a] Share all"),
        "{c}"
    );
    let r = render(&resolution());
    assert!(
        r.contains("[c] Confirm") && r.contains("make an excuse"),
        "{r}"
    );
}

#[test]
fn sharing_a_field_without_a_value_is_refused_with_what_to_type() {
    let mut p = consent();
    if let PromptKind::Consent { fields } = &mut p.kind {
        fields[0].suggested = None;
    }
    let args = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let e = parse_answer(&p, &args(&["transport_mode"])).unwrap_err();
    assert!(
        e.contains("no value for `transport_mode`") && e.contains("transport_mode=VALUE"),
        "{e}"
    );
    let e = parse_answer(&p, &args(&["share-all"])).unwrap_err();
    assert!(e.contains("no value for transport_mode"), "{e}");
    let ok = parse_answer(&p, &args(&["transport_mode=walking", "cuisine_preference"])).unwrap();
    let mut m = BTreeMap::new();
    m.insert(
        "transport_mode".to_string(),
        FieldChoice::ShareValue(Value::String("walking".into())),
    );
    m.insert("cuisine_preference".to_string(), FieldChoice::Share);
    assert_eq!(
        ok,
        Command::AnswerConsent {
            prompt_id: 1,
            answer: ConsentAnswer::ShareSelected(m)
        }
    );
    assert!(parse_answer(&p, &args(&["transport_mode=no"])).is_ok());
}

#[test]
fn the_terminal_never_shares_a_field_without_a_value() {
    let mut p = consent();
    if let PromptKind::Consent { fields } = &mut p.kind {
        fields[0].suggested = None;
    }
    let mut ui = Flow::default();
    ui.show(p);
    let out = ui.key(Key::Char('a'));
    assert!(
        !out.iter().any(|o| matches!(o, UiOut::Answer(_))),
        "{out:?}"
    );
    assert!(out
        .iter()
        .any(|o| matches!(o, UiOut::Print(s) if s.contains("no value known for transport_mode"))));
    ui.key(Key::Char('c'));
    let out = ui.key(Key::Char('s'));
    assert!(
        !out.iter().any(|o| matches!(o, UiOut::Answer(_))),
        "{out:?}"
    );
    ui.key(Key::Char('n'));
    let out = ui.key(Key::Char('s'));
    let mut m = BTreeMap::new();
    m.insert("transport_mode".to_string(), FieldChoice::DontShare);
    m.insert("cuisine_preference".to_string(), FieldChoice::Share);
    assert!(
        out.contains(&UiOut::Answer(Command::AnswerConsent {
            prompt_id: 1,
            answer: ConsentAnswer::ShareSelected(m)
        })),
        "{out:?}"
    );
}

#[test]
fn keystrokes() {
    let mut ui = Flow::default();
    ui.show(consent());
    ui.show(resolution());
    ui.key(Key::Char('c'));
    ui.key(Key::Char('s'));
    let out = ui.key(Key::Char('n'));
    let mut m = BTreeMap::new();
    m.insert("transport_mode".to_string(), FieldChoice::Share);
    m.insert("cuisine_preference".to_string(), FieldChoice::DontShare);
    assert!(out.contains(&UiOut::Answer(Command::AnswerConsent {
        prompt_id: 1,
        answer: ConsentAnswer::ShareSelected(m)
    })));
    // The resolution prompt is shown next.
    assert!(out
        .iter()
        .any(|o| matches!(o, UiOut::Print(s) if s.contains("Prompt #2"))));
    let out = ui.key(Key::Char('c'));
    assert!(out.contains(&UiOut::Answer(Command::AnswerResolution {
        prompt_id: 2,
        answer: ResolutionAnswer::Confirm
    })));
    assert!(ui.key(Key::Char('c')).is_empty());
}

/// Escape sequences, C1 controls, DEL, bidi overrides, zero-width and tag
/// characters, and a line break that would draw a fake prompt.
const EVIL: &str =
    "\u{1b}[2J\u{1b}]52;c;cm0gLXJmIH4=\u{7}\u{9b}31m\u{202e}gpj.exe\u{2066}\u{200b}\r\n── Prompt #9 · FAKE\u{7f}\u{e0041}";

fn hostile(mut p: Prompt) -> Prompt {
    p.intent.category = EVIL.into();
    p.intent.summary = EVIL.repeat(100);
    match &mut p.kind {
        PromptKind::Consent { fields } => {
            for f in fields {
                f.field = format!("{}{EVIL}", f.field);
                f.reason = EVIL.into();
                f.suggested = Some(EVIL.into());
            }
        }
        PromptKind::Resolution { proposal, .. } => {
            proposal.summary = EVIL.into();
            proposal.reasoning = EVIL.into();
            proposal.alternatives = vec![a2acp_core::packet::Alternative {
                summary: EVIL.into(),
                reason: EVIL.into(),
                details: Default::default(),
            }];
        }
    }
    p
}

/// Only the renderer's own line breaks; no control, escape or invisible character.
fn terminal_safe(s: &str) -> bool {
    s.chars()
        .all(|c| c == '\n' || (!c.is_control() && display::is_clean(&c.to_string(), 1)))
}

#[test]
fn hostile_text_is_rendered_clean_and_bounded() {
    for p in [hostile(consent()), hostile(resolution())] {
        let r = render(&p);
        assert!(terminal_safe(&r), "{r:?}");
        assert!(!r.contains("\n── Prompt #9"), "a peer drew a line: {r}");
        // The renderer's own lines only: 2 per field + header + keys, or the
        // resolution's header, why, alternative, deadline, keys.
        assert!(r.lines().count() <= 7, "{r}");
        assert!(r.chars().count() < 3000, "{}", r.chars().count());
        let s = summary(&p);
        assert!(terminal_safe(&s) && !s.contains('\n'), "{s:?}");
    }
    // The terminal flow prints the same clean text.
    let mut ui = Flow::default();
    for o in ui.show(hostile(consent())) {
        if let UiOut::Print(s) = o {
            assert!(terminal_safe(&s), "{s:?}");
        }
    }
}

#[test]
fn an_updated_prompt_is_replaced_in_place() {
    let mut ui = Flow::default();
    ui.show(consent());
    ui.show(resolution());
    // The prompt on screen, updated: drawn again under its number, keys start over.
    ui.key(Key::Char('c'));
    let mut more = consent();
    if let PromptKind::Consent { fields } = &mut more.kind {
        fields.push(ConsentField {
            field: "name".into(),
            reason: "booking".into(),
            priority: Priority::Required,
            suggested: Some("Alice".into()),
        });
    }
    let out = ui.show(more);
    assert!(
        matches!(&out[..], [UiOut::Print(s)] if s.contains("Prompt #1") && s.contains("name")),
        "{out:?}"
    );
    assert_eq!(ui.ui.queued().collect::<Vec<_>>(), [1, 2]);
    let out = ui.key(Key::Char('a'));
    let Some(UiOut::Answer(Command::AnswerConsent {
        prompt_id: 1,
        answer: ConsentAnswer::ShareSelected(m),
    })) = out.get(1)
    else {
        panic!("{out:?}")
    };
    assert_eq!(m.len(), 3);
    // A waiting prompt updated: replaced quietly, still one entry.
    let out = ui.show(resolution());
    assert!(matches!(&out[..], [UiOut::Print(s)] if s.contains("Prompt #2")));
    assert!(ui
        .show(resolution())
        .iter()
        .all(|o| matches!(o, UiOut::Print(_))));
    assert_eq!(ui.ui.queued().count(), 1);
}

fn with_alternatives() -> Prompt {
    let mut p = resolution();
    if let PromptKind::Resolution { proposal, .. } = &mut p.kind {
        for (t, why) in [("18:30", "Earliest start"), ("19:30", "30 minutes later")] {
            proposal.alternatives.push(a2acp_core::packet::Alternative {
                summary: format!("Friday {t}"),
                reason: why.into(),
                details: Default::default(),
            });
        }
    }
    p
}

#[test]
fn alternatives_are_shown_with_their_trade_off_and_taken_with_one_key() {
    let p = with_alternatives();
    let r = render(&p);
    assert!(
        r.contains("[1] alternative: Friday 18:30 — Earliest start"),
        "{r}"
    );
    assert!(
        r.contains("[2] alternative: Friday 19:30 — 30 minutes later"),
        "{r}"
    );
    assert!(r.contains("[1–2] Take that alternative"), "{r}");
    assert!(help(&p).contains("alternative 1…2"));
    let mut ui = Flow::default();
    ui.show(p.clone());
    // A key beyond the alternatives only shows the keys again.
    assert!(!ui
        .key(Key::Char('3'))
        .iter()
        .any(|o| matches!(o, UiOut::Answer(_))));
    let out = ui.key(Key::Char('2'));
    assert!(out.contains(&UiOut::Answer(Command::AnswerResolution {
        prompt_id: 2,
        answer: ResolutionAnswer::Alternative(1)
    })));
    // `a2acp answer 2 alternative 1`.
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        parse_answer(&p, &s(&["alternative", "1"])).unwrap(),
        Command::AnswerResolution {
            prompt_id: 2,
            answer: ResolutionAnswer::Alternative(0)
        }
    );
    for bad in [
        &["alternative"][..],
        &["alternative", "3"],
        &["alt", "0"],
        &["alt", "x"],
    ] {
        assert!(parse_answer(&p, &s(bad)).unwrap_err().contains("offers 2"));
    }
    assert!(parse_answer(&resolution(), &s(&["alternative", "1"]))
        .unwrap_err()
        .contains("offers no alternative"));
    // Without alternatives, digits do nothing.
    let mut ui = Flow::default();
    ui.show(resolution());
    assert!(!ui
        .key(Key::Char('1'))
        .iter()
        .any(|o| matches!(o, UiOut::Answer(_))));
}

#[test]
fn a_suggestion_is_accepted_with_one_key_once_no_prompt_is_open() {
    let s = Suggestion::Promote {
        id: 4,
        field: "dietary".into(),
        peer: Address::parse("agent:bob@localhost").unwrap(),
    };
    let mut ui = Flow::default();
    ui.show(resolution());
    // Waits behind the open prompt.
    assert!(ui
        .suggest(s.clone(), "Always share dietary with Bob?".into())
        .is_empty());
    let out = ui.key(Key::Char('c'));
    assert!(
        out.iter().any(
            |o| matches!(o, UiOut::Print(t) if t.contains("Suggestion #4") && t.contains("[y]"))
        ),
        "{out:?}"
    );
    let out = ui.key(Key::Char('y'));
    assert!(out.contains(&UiOut::Answer(Command::SetPermission {
        field: "dietary".into(),
        tier: a2acp_core::agent::Tier::AlwaysShare,
        for_peer: Some(Address::parse("agent:bob@localhost").unwrap()),
    })));
    assert!(ui.key(Key::Char('y')).is_empty(), "answered once");
    // "Not now", and one accepted elsewhere is no longer offered.
    ui.suggest(s.clone(), "again".into());
    let out = ui.key(Key::Char('n'));
    assert!(!out.iter().any(|o| matches!(o, UiOut::Answer(_))));
    ui.suggest(s, "again".into());
    ui.ui.retain_suggestions(|_| false, &ui.open);
    assert!(ui.key(Key::Char('y')).is_empty());
}

#[test]
fn excuse_keeps_reason() {
    let mut ui = Flow::default();
    ui.show(resolution());
    ui.key(Key::Char('e'));
    for c in "tired".chars() {
        ui.key(Key::Char(c));
    }
    let out = ui.key(Key::Enter);
    assert!(out.contains(&UiOut::Answer(Command::AnswerResolution {
        prompt_id: 2,
        answer: ResolutionAnswer::MakeExcuse {
            actual_reason: Some("tired".into())
        }
    })));
}

#[test]
fn answer_arguments() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        parse_answer(&resolution(), &s(&["confirm"])).unwrap(),
        Command::AnswerResolution {
            prompt_id: 2,
            answer: ResolutionAnswer::Confirm
        }
    );
    let c = parse_answer(&consent(), &s(&["transport_mode", "cuisine_preference=no"])).unwrap();
    let Command::AnswerConsent {
        answer: ConsentAnswer::ShareSelected(m),
        ..
    } = c
    else {
        panic!()
    };
    assert_eq!(m["cuisine_preference"], FieldChoice::DontShare);
    assert!(parse_answer(&consent(), &s(&["salary"]))
        .unwrap_err()
        .contains("does not ask"));
    assert!(parse_answer(&resolution(), &s(&["maybe"])).is_err());
    assert!(parse_answer(&resolution(), &[]).is_err());
    let c = parse_answer(&consent(), &s(&["transport_mode=\"walking\""])).unwrap();
    let Command::AnswerConsent {
        answer: ConsentAnswer::ShareSelected(m),
        ..
    } = c
    else {
        panic!()
    };
    assert_eq!(
        m["transport_mode"],
        FieldChoice::ShareValue("walking".into())
    );
}

#[test]
fn a_prompt_answered_elsewhere_leaves_the_terminal_and_the_next_is_shown() {
    let mut ui = Flow::default();
    ui.show(consent());
    ui.show(resolution());
    // Nothing closed yet: nothing to say.
    assert!(ui.ui.closed_elsewhere(&ui.open).is_empty());
    // `a2acp answer 1 …` through the control socket: the host no longer has it.
    ui.open.remove(&1);
    let out = ui.ui.closed_elsewhere(&ui.open);
    assert!(
        matches!(&out[..], [UiOut::Print(a), UiOut::Print(b)]
            if a.contains("prompt #1 closed") && b.contains("Prompt #2")),
        "{out:?}"
    );
    assert_eq!(ui.ui.queued().collect::<Vec<_>>(), [2]);
    // The keys now answer the prompt on screen, as the host has it.
    let out = ui.key(Key::Char('x'));
    assert!(out.contains(&UiOut::Answer(Command::AnswerResolution {
        prompt_id: 2,
        answer: ResolutionAnswer::Decline
    })));
    assert!(ui.open.is_empty() && ui.ui.queued().next().is_none());
}
