use std::collections::BTreeMap;

use quickcheck::{Arbitrary, Gen, QuickCheck};
use serde_json::{json, Value};

use super::*;
use crate::packet::Packet;

fn addr(s: &str) -> Address {
    Address::parse(&format!("agent:{s}@a2acp.io")).unwrap()
}

fn ctx(v: Value) -> Context {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

fn intent(summary: &str) -> Intent {
    Intent {
        category: "group_scheduling".into(),
        summary: summary.into(),
        urgency: None,
        scope_change: None,
    }
}

fn member(v: Value) -> Member {
    Member {
        status: ParticipantStatus::ContextReceived,
        shared: ctx(v),
    }
}

fn pending() -> Member {
    Member {
        status: ParticipantStatus::AwaitingResponse,
        shared: Context::new(),
    }
}

/// The spec's game night (§10.2): Alice (London) coordinates Bob (New York), Charlie
/// (Berlin) and Diana (London). Friday 20:00–23:00 London suits all four; Saturday
/// 19:00–23:00 is longer but Charlie cannot come.
fn game_night(diana_friday: bool) -> (Context, BTreeMap<Address, Member>) {
    let mine = ctx(json!({
        "event_type": "game night",
        "duration": "PT3H",
        "timezone": "Europe/London",
        "time_windows": ["2026-03-27 19:00-23:00", "2026-03-28 18:00-23:30"],
        "budget_range": "£10-30pp",
    }));
    let mut members = BTreeMap::new();
    members.insert(
        addr("bob"),
        member(json!({
            "timezone": "America/New_York",
            "time_windows": ["2026-03-27 15:00-19:00", "2026-03-28 15:00-19:00"],
            "dietary": ["vegetarian"],
            "budget_range": "$5-25 each",
        })),
    );
    members.insert(
        addr("charlie"),
        member(json!({
            "timezone": "Europe/Berlin",
            "time_windows": [
                {"date": "2026-03-27", "start": "20:30", "end": "00:30"},
                "2026-03-28 10:00-12:00"
            ],
            "dietary": "nut allergy",
        })),
    );
    let mut diana = vec![json!("2026-03-28 19:00-23:00")];
    if diana_friday {
        diana.insert(0, json!("2026-03-27 20:00-23:00"));
    }
    members.insert(
        addr("diana"),
        member(json!({ "timezone": "Europe/London", "time_windows": diana })),
    );
    (mine, members)
}

fn view<'a>(
    intent: &'a Intent,
    coordinator: &'a Address,
    mine: &'a Context,
    members: &'a BTreeMap<Address, Member>,
) -> GroupView<'a> {
    GroupView {
        intent,
        coordinator,
        mine,
        members,
    }
}

fn utc(s: &str) -> i64 {
    DateTime::parse_from_rfc3339(s).unwrap().timestamp()
}

#[test]
fn game_night_friday_for_all_four_beats_a_longer_saturday_for_three() {
    let i = intent("Game night for 4");
    let alice = addr("alice");
    let (mine, members) = game_night(true);
    let a = aggregate(&view(&i, &alice, &mine, &members));
    assert_eq!(a.duration_secs, 3 * 3600);
    assert_eq!(a.zone, "Europe/London");
    assert_eq!(a.shared_availability.len(), 4);
    assert_eq!(
        a.common_windows,
        vec![(utc("2026-03-27T20:00:00Z"), utc("2026-03-27T23:00:00Z"))]
    );
    let best = &a.candidates[0];
    assert_eq!(best.attendees.len(), 4);
    assert_eq!(best.local, "Friday 27 March 20:00–23:00 (Europe/London)");
    assert_eq!(best.trade_off.attendance_pct, 100);
    let second = &a.candidates[1];
    assert_eq!(
        (second.start, second.end),
        (utc("2026-03-28T19:00:00Z"), utc("2026-03-28T23:00:00Z"))
    );
    assert_eq!(second.missing, vec![addr("charlie")]);
    assert_eq!(second.trade_off.attendance_pct, 75);
    assert_eq!(second.trade_off.attendance_vs_best, -25);
    assert_eq!(second.trade_off.length_vs_best_secs, 3600);
    assert_eq!(
        a.trade_off,
        "100 % attendance on Friday 27 March beats 75 % on Saturday 28 March, although \
         Saturday 28 March offers a longer window (4 h against 3 h)"
    );
    let r = a.recommendation.as_ref().unwrap();
    assert_eq!(r.recommendation, "propose_friday");
    assert_eq!(r.reason, a.trade_off);
    // Everyone fits Friday: nothing binds, nobody is asked to move.
    assert_eq!(a.binding, None);
    assert_eq!(a.flexibility_request, None);
    // Ranking is strict.
    for w in a.candidates.windows(2) {
        assert_eq!(rank(&w[0], &w[1], &alice), Ordering::Less);
    }
}

#[test]
fn game_night_without_a_common_slot_asks_charlie_only() {
    let i = intent("Game night for 4");
    let alice = addr("alice");
    let (mine, members) = game_night(false);
    let a = aggregate(&view(&i, &alice, &mine, &members));
    assert!(a.common_windows.is_empty());
    let b = a.binding.as_ref().unwrap();
    assert_eq!(b.participant, addr("charlie"));
    assert_eq!(b.field, "time_windows");
    assert_eq!(b.opens_secs, 4 * 3600);
    let req = a.flexibility_request.as_ref().unwrap();
    assert_eq!(req.to, addr("charlie"));
    assert_eq!(
        req.summary,
        "Everyone is free Saturday 28 March 19:00–23:00 (Europe/London) except \
         agent:charlie@a2acp.io — can they do Saturday?"
    );
    // Charlie reads it in his own zone, and it names nobody.
    assert_eq!(
        req.request.message,
        "Everyone else is free Saturday 28 March 20:00–00:00 (Europe/Berlin) — any chance you \
         can do Saturday?"
    );
    let w = req.request.window.as_ref().unwrap();
    assert_eq!(w.start, "2026-03-28T19:00:00Z");
    assert_eq!(w.end, "2026-03-28T23:00:00Z");
    assert_eq!((req.request.others_fit, req.request.others), (3, 3));
    let need = req.need();
    assert_eq!(need.field, "time_windows");
    assert_eq!(need.priority, Priority::Helpful);
    req.request.validate("flexibility_request").unwrap();
    // The best option then is Saturday without Charlie.
    assert_eq!(a.candidates[0].missing, vec![addr("charlie")]);
}

#[test]
fn team_meeting_of_five_with_one_pending_in_three_zones() {
    let i = intent("Team meeting");
    let lead = addr("lead");
    let mine = ctx(json!({
        "event_type": "meeting",
        "duration": "PT1H",
        "timezone": "Europe/London",
        "proposed_dates": ["2026-03-24", "2026-03-25"],
        "time_windows": ["09:00-17:00"],
    }));
    let mut members = BTreeMap::new();
    // New York (UTC-4 in late March): 09:00-12:00 = 13:00-16:00 UTC.
    members.insert(
        addr("ny"),
        member(json!({"timezone": "America/New_York", "time_windows": ["09:00-12:00"]})),
    );
    // Tokyo (UTC+9): 22:00-23:30 = 13:00-14:30 UTC.
    members.insert(
        addr("tokyo"),
        member(json!({"timezone": "Asia/Tokyo", "time_windows": ["22:00-23:30"]})),
    );
    members.insert(
        addr("london"),
        member(json!({"time_windows": ["Tue 13:30-15:00", "Wed 10:00-11:00"]})),
    );
    members.insert(addr("pending"), pending());
    let v = view(&i, &lead, &mine, &members);
    let a = aggregate(&v);
    assert_eq!(a.shared_availability.len(), 4);
    // Tuesday 13:30-14:30 UTC fits lead, NY, Tokyo and London.
    assert_eq!(
        a.common_windows,
        vec![(utc("2026-03-24T13:30:00Z"), utc("2026-03-24T14:30:00Z"))]
    );
    assert_eq!(
        a.candidates[0].local,
        "Tuesday 24 March 13:30–14:30 (Europe/London)"
    );
    let agg = a.aggregated_context(&v);
    assert_eq!((agg.answered, agg.of), (3, 4));
    let statuses: Vec<(String, &str)> = agg
        .participants
        .iter()
        .map(|p| (p.agent.user().to_string(), p.status.word()))
        .collect();
    assert_eq!(
        statuses,
        vec![
            ("london".to_string(), "context_received"),
            ("ny".to_string(), "context_received"),
            ("pending".to_string(), "awaiting_response"),
            ("tokyo".to_string(), "context_received"),
        ]
    );
    let o = agg.availability_overlap.as_ref().unwrap();
    assert_eq!(o.shared_by, 4);
    assert_eq!(o.common_windows[0].start, "2026-03-24T13:30:00Z");
    assert_eq!(o.ranked[0].available_count, 4);
    agg.validate().unwrap();
    assert_eq!(AggregatedContext::from_value(&agg.to_value()).unwrap(), agg);
}

#[test]
fn budgets_intersect_and_dietary_restrictions_unite() {
    let i = intent("Dinner for 4");
    let alice = addr("alice");
    let win = json!(["2026-03-27 18:00-22:00"]);
    let mine = ctx(
        json!({"event_type": "dinner", "timezone": "UTC", "time_windows": win,
        "budget_range": "£20-40pp", "dietary": ["vegetarian"]}),
    );
    let mut members = BTreeMap::new();
    members.insert(
        addr("bob"),
        member(json!({"time_windows": win, "budget_range": "GBP 25-50", "dietary": "Vegetarian, halal"})),
    );
    members.insert(
        addr("cat"),
        member(json!({"time_windows": win, "budget": "up to £35", "dietary": "none"})),
    );
    let v = view(&i, &alice, &mine, &members);
    let a = aggregate(&v);
    assert_eq!(a.combined.budget.as_deref(), Some("GBP 25-35pp"));
    assert!(!a.combined.budget_conflict);
    assert_eq!(a.combined.dietary, vec!["vegetarian", "halal"]);
    assert_eq!(a.binding, None);
    let agg = a.aggregated_context(&v);
    let c = agg.combined.as_ref().unwrap();
    assert_eq!(c.budget.as_deref(), Some("GBP 25-35pp"));
    // Only how many restrictions, never which.
    assert_eq!(c.dietary_restrictions, 2);
    let text = serde_json::to_string(&agg.to_value()).unwrap();
    assert!(!text.to_lowercase().contains("vegetarian"));
    assert!(!text.contains("halal"));
}

#[test]
fn a_budget_that_meets_no_other_is_the_binding_constraint() {
    let i = intent("Dinner for 4");
    let alice = addr("alice");
    let win = json!(["2026-03-27 18:00-22:00"]);
    let mine = ctx(
        json!({"event_type": "dinner", "timezone": "UTC", "time_windows": win,
        "budget_range": "£20-30"}),
    );
    let mut members = BTreeMap::new();
    members.insert(
        addr("bob"),
        member(json!({"time_windows": win, "budget_range": "£25-40"})),
    );
    members.insert(
        addr("cat"),
        member(json!({"time_windows": win, "budget_range": "£50-80"})),
    );
    let a = aggregate(&view(&i, &alice, &mine, &members));
    assert!(a.combined.budget_conflict);
    assert_eq!(a.combined.budget, None);
    assert!(!a.common_windows.is_empty());
    let b = a.binding.as_ref().unwrap();
    assert_eq!(
        (b.participant.user(), b.field.as_str()),
        ("cat", "budget_range")
    );
    let r = a.flexibility_request.as_ref().unwrap();
    assert_eq!(r.to, addr("cat"));
    assert_eq!(r.request.budget.as_deref(), Some("GBP 25-30"));
    assert_eq!(
        r.request.message,
        "Everyone else's budget allows GBP 25-30 — could you go with that?"
    );
}

#[test]
fn too_few_shared_windows_send_no_overlap() {
    // Coordinator + one participant: the overlap would be that participant's windows
    // seen through the coordinator's, so the aggregated context carries none.
    let i = intent("Game night");
    let alice = addr("alice");
    let mine = ctx(json!({"timezone": "UTC", "time_windows": ["2026-03-27 18:00-23:00"]}));
    let mut members = BTreeMap::new();
    members.insert(
        addr("bob"),
        member(json!({"time_windows": ["2026-03-27 19:00-21:00"]})),
    );
    members.insert(addr("cat"), pending());
    let v = view(&i, &alice, &mine, &members);
    let a = aggregate(&v);
    assert_eq!(a.common_windows.len(), 1);
    let agg = a.aggregated_context(&v);
    assert_eq!(agg.availability_overlap, None);
    assert_eq!((agg.answered, agg.of), (1, 2));
}

#[test]
fn nothing_readable_gives_an_empty_aggregation() {
    let i = intent("Something");
    let alice = addr("alice");
    let mine = Context::new();
    let mut members = BTreeMap::new();
    members.insert(
        addr("bob"),
        member(json!({"time_windows": ["whenever"], "budget": {}})),
    );
    members.insert(addr("cat"), member(json!({"time_windows": 42})));
    let v = view(&i, &alice, &mine, &members);
    let a = aggregate(&v);
    assert!(a.candidates.is_empty() && a.common_windows.is_empty());
    assert_eq!(a.availability_unknown, vec![addr("bob"), addr("cat")]);
    assert_eq!(a.recommendation, None);
    a.aggregated_context(&v).validate().unwrap();
}

#[test]
fn the_aggregated_context_rides_in_a_context_packet() {
    let i = intent("Game night for 4");
    let alice = addr("alice");
    let (mine, members) = game_night(true);
    let v = view(&i, &alice, &mine, &members);
    let a = aggregate(&v);
    let agg = a.aggregated_context(&v);
    let p = Packet {
        protocol: "a2acp/0.2".into(),
        packet_id: "pkt_1".into(),
        thread_id: "thr_leg_bob".into(),
        from: alice.clone(),
        to: addr("bob"),
        timestamp: "2026-03-21T14:30:00Z".into(),
        capabilities: None,
        format_hints: None,
        body: crate::packet::Body::Context(crate::packet::ContextBody {
            aggregated_context: Some(agg.to_value()),
            coordinator_recommendation: a.recommendation.as_ref().map(|r| r.recommendation.clone()),
            reason: a.recommendation.as_ref().map(|r| r.reason.clone()),
            ..Default::default()
        }),
    };
    let back = Packet::parse(&p.to_bytes().unwrap()).unwrap();
    assert_eq!(back, p);
    let crate::packet::Body::Context(b) = back.body else {
        panic!("not a context packet")
    };
    let read = AggregatedContext::from_value(b.aggregated_context.as_ref().unwrap()).unwrap();
    assert_eq!(read, agg);
    let o = read.availability_overlap.unwrap();
    assert_eq!(o.ranked[0].available_count, 4);
    assert_eq!(o.ranked[1].available_count, 3);
    assert_eq!(o.ranked[1].of, 4);
}

// ---------------------------------------------------------------- properties

const ZONES: &[&str] = &[
    "Europe/London",
    "America/New_York",
    "Europe/Berlin",
    "Asia/Tokyo",
    "+05:30",
];
const DATES: &[&str] = &["2026-03-27", "2026-03-28"];

fn pick<T: Copy>(g: &mut Gen, xs: &[T]) -> T {
    *g.choose(xs).unwrap()
}

fn below(g: &mut Gen, n: u32) -> u32 {
    u32::arbitrary(g) % n.max(1)
}

/// One availability window, kept abstract so it can be written in several forms.
#[derive(Clone, Debug)]
struct Win {
    date: &'static str,
    start_min: u32,
    len_min: u32,
}

impl Win {
    fn hm(m: u32) -> String {
        let m = m % 1440;
        format!("{:02}:{:02}", m / 60, m % 60)
    }
    fn as_string(&self) -> Value {
        json!(format!(
            "{} {}-{}",
            self.date,
            Win::hm(self.start_min),
            Win::hm(self.start_min + self.len_min)
        ))
    }
    fn as_object(&self) -> Value {
        json!({"date": self.date, "start": Win::hm(self.start_min),
               "end": Win::hm(self.start_min + self.len_min)})
    }
}

#[derive(Clone, Debug)]
struct ArbPerson {
    zone: Option<&'static str>,
    wins: Vec<Win>,
    budget: Option<(u32, u32)>,
    diets: u32,
    status: ParticipantStatus,
    /// Which windows are written as objects (bit i).
    forms: u32,
    salt: u32,
}

impl ArbPerson {
    fn gen(g: &mut Gen) -> Self {
        let n = 1 + below(g, 3) as usize;
        ArbPerson {
            zone: bool::arbitrary(g).then(|| pick(g, ZONES)),
            wins: (0..n)
                .map(|_| Win {
                    date: pick(g, DATES),
                    // Mostly daytime and long, so that windows meet across zones;
                    // now and then one that crosses midnight.
                    start_min: if below(g, 5) == 0 {
                        below(g, 48) * 30
                    } else {
                        480 + below(g, 16) * 30
                    },
                    len_min: 60 + below(g, 16) * 30,
                })
                .collect(),
            budget: bool::arbitrary(g).then(|| {
                let lo = below(g, 40);
                (lo, lo + 1 + below(g, 40))
            }),
            diets: below(g, 3),
            status: match below(g, 8) {
                0 => ParticipantStatus::AwaitingResponse,
                1 => ParticipantStatus::Unreachable,
                _ => ParticipantStatus::ContextReceived,
            },
            forms: u32::arbitrary(g),
            salt: u32::arbitrary(g),
        }
    }

    /// The context this person shares: windows in the chosen forms, secret values.
    fn context(&self, who: usize, forms: u32, salt: u32, reversed: bool) -> Context {
        let mut pairs: Vec<(String, Value)> = Vec::new();
        if let Some(z) = self.zone {
            pairs.push(("timezone".into(), json!(z)));
        }
        let wins: Vec<Value> = self
            .wins
            .iter()
            .enumerate()
            .map(|(i, w)| {
                if forms >> (i % 32) & 1 == 1 {
                    w.as_object()
                } else {
                    w.as_string()
                }
            })
            .collect();
        pairs.push(("time_windows".into(), Value::Array(wins)));
        if let Some((lo, hi)) = self.budget {
            let text = if salt.is_multiple_of(2) {
                format!("£{lo}-{hi} per person")
            } else {
                format!("{lo} to {hi} GBP each")
            };
            pairs.push(("budget_range".into(), json!(text)));
        }
        let diets: Vec<Value> = (0..self.diets)
            .map(|d| json!(format!("secret-diet-{who}-{d}-{salt}")))
            .collect();
        pairs.push(("dietary".into(), Value::Array(diets)));
        pairs.push((
            "location_preference".into(),
            json!(format!("secret-place-{who}-{salt}")),
        ));
        pairs.push(("notes".into(), json!(format!("secret-note-{who}-{salt}"))));
        if reversed {
            pairs.reverse();
        }
        pairs.into_iter().collect()
    }
}

#[derive(Clone, Debug)]
struct ArbGroup {
    coordinator: ArbPerson,
    members: Vec<ArbPerson>,
}

impl Arbitrary for ArbGroup {
    fn arbitrary(g: &mut Gen) -> Self {
        let n = 1 + below(g, 7) as usize;
        let mut coordinator = ArbPerson::gen(g);
        coordinator.status = ParticipantStatus::ContextReceived;
        ArbGroup {
            coordinator,
            members: (0..n).map(|_| ArbPerson::gen(g)).collect(),
        }
    }
}

struct Built {
    intent: Intent,
    coordinator: Address,
    mine: Context,
    members: BTreeMap<Address, Member>,
}

impl Built {
    fn view(&self) -> GroupView<'_> {
        view(&self.intent, &self.coordinator, &self.mine, &self.members)
    }
}

/// Builds the group; `variant` 0 is the plain form, 1 the same facts written otherwise
/// (windows in the other form, key order reversed, members inserted in reverse), 2 the
/// same facts with every secret value changed.
fn build(gr: &ArbGroup, variant: u32) -> Built {
    let mut mine = gr.coordinator.context(0, 0, 0, false);
    mine.insert("event_type".into(), json!("game night"));
    mine.insert("duration".into(), json!("PT1H"));
    let mut members = BTreeMap::new();
    let order: Vec<usize> = if variant == 1 {
        (0..gr.members.len()).rev().collect()
    } else {
        (0..gr.members.len()).collect()
    };
    for i in order {
        let p = &gr.members[i];
        let (forms, salt) = match variant {
            1 => (!p.forms, p.salt),
            2 => (p.forms, p.salt.wrapping_add(1)),
            _ => (p.forms, p.salt),
        };
        members.insert(
            addr(&format!("m{i}")),
            Member {
                status: p.status,
                shared: p.context(i + 1, forms, salt, variant == 1),
            },
        );
    }
    Built {
        intent: intent("Game night"),
        coordinator: addr("coord"),
        mine,
        members,
    }
}

fn qc() -> QuickCheck {
    QuickCheck::new().tests(300).max_tests(3000)
}

#[test]
fn prop_deterministic_whatever_the_order_and_form() {
    fn prop(gr: ArbGroup) -> bool {
        let a = build(&gr, 0);
        let b = build(&gr, 1);
        let x = serde_json::to_string(&aggregate(&a.view())).unwrap();
        let again = serde_json::to_string(&aggregate(&a.view())).unwrap();
        let y = serde_json::to_string(&aggregate(&b.view())).unwrap();
        x == again && x == y
    }
    qc().quickcheck(prop as fn(ArbGroup) -> bool);
}

#[test]
fn prop_windows_lie_inside_every_attendees_availability() {
    fn prop(gr: ArbGroup) -> bool {
        let b = build(&gr, 0);
        let v = b.view();
        let a = aggregate(&v);
        let (people, _) = people(&v);
        let ivs: BTreeMap<&Address, &Vec<Iv>> = people.iter().map(|p| (p.who, &p.ivs)).collect();
        let known: Vec<&Address> = people
            .iter()
            .filter(|p| !p.ivs.is_empty())
            .map(|p| p.who)
            .collect();
        let common_ok = a.common_windows.iter().all(|&(s, e)| {
            e - s >= a.duration_secs
                && known
                    .iter()
                    .all(|k| ivs.get(k).is_some_and(|v| covers(v, Iv { s, e })))
        });
        let cands_ok = a.candidates.iter().all(|c| {
            let iv = Iv {
                s: c.start,
                e: c.end,
            };
            c.attendees.len() >= 2
                && c.attendees.len() + c.missing.len() == known.len()
                && c.attendees
                    .iter()
                    .all(|x| ivs.get(x).is_some_and(|v| covers(v, iv)))
                && c.missing
                    .iter()
                    .all(|x| ivs.get(x).is_some_and(|v| !covers(v, iv)))
        });
        // A window fits everyone iff it is a common window.
        let all_ok = a
            .candidates
            .iter()
            .filter(|c| c.missing.is_empty())
            .all(|c| a.common_windows.contains(&(c.start, c.end)));
        common_ok && cands_ok && all_ok
    }
    qc().quickcheck(prop as fn(ArbGroup) -> bool);
}

/// Every raw value of a member: each string field, each string entry of an array field,
/// and the JSON text of every other value, of at least 4 characters — minus the values
/// the coordinator holds itself (its own to share).
fn raw_values(b: &Built) -> Vec<String> {
    let mine: Vec<String> = b.mine.values().flat_map(leaves).collect();
    b.members
        .values()
        .flat_map(|m| m.shared.values().flat_map(leaves).collect::<Vec<_>>())
        .filter(|s| s.chars().count() >= 4 && !mine.contains(s))
        .collect()
}

fn leaves(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => {
            let mut out = vec![v.to_string()];
            out.extend(a.iter().map(|x| match x {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }));
            out
        }
        other => vec![other.to_string()],
    }
}

#[test]
fn prop_aggregated_context_carries_no_raw_value() {
    fn prop(gr: ArbGroup) -> bool {
        let b = build(&gr, 0);
        let v = b.view();
        let agg = aggregate(&v).aggregated_context(&v);
        let text = serde_json::to_string(&agg.to_value()).unwrap();
        agg.validate().is_ok() && raw_values(&b).iter().all(|r| !text.contains(r.as_str()))
    }
    qc().quickcheck(prop as fn(ArbGroup) -> bool);
}

#[test]
fn prop_aggregated_context_depends_only_on_derived_facts() {
    // Rewriting every member's values (other window forms, other key order, other secret
    // strings, another spelling of the same budget) leaves the aggregated context
    // byte-identical: it cannot carry what changed.
    fn prop(gr: ArbGroup) -> bool {
        let ctxs: Vec<String> = (0..3)
            .map(|variant| {
                let b = build(&gr, variant);
                let v = b.view();
                serde_json::to_string(&aggregate(&v).aggregated_context(&v).to_value()).unwrap()
            })
            .collect();
        ctxs.windows(2).all(|w| w[0] == w[1])
    }
    qc().quickcheck(prop as fn(ArbGroup) -> bool);
}

#[derive(Clone, Debug)]
struct ArbCands(Vec<Candidate>);

impl Arbitrary for ArbCands {
    fn arbitrary(g: &mut Gen) -> Self {
        let people = ["coord", "a", "b", "c"].map(addr);
        let n = 3 + below(g, 4) as usize;
        ArbCands(
            (0..n)
                .map(|_| {
                    let start = i64::from(below(g, 4)) * 1800;
                    let end = start + 1800 * (1 + i64::from(below(g, 3)));
                    let attendees: Vec<Address> = people
                        .iter()
                        .filter(|_| bool::arbitrary(g))
                        .cloned()
                        .collect();
                    Candidate {
                        start,
                        end,
                        missing: Vec::new(),
                        local: String::new(),
                        trade_off: TradeOff {
                            attendance_pct: 0,
                            attendance_vs_best: 0,
                            length_secs: end - start,
                            length_vs_best_secs: 0,
                            sentence: String::new(),
                        },
                        attendees,
                    }
                })
                .collect(),
        )
    }
}

#[test]
fn prop_ranking_is_a_total_order() {
    fn prop(c: ArbCands) -> bool {
        let co = addr("coord");
        let key = |x: &Candidate| (x.start, x.end, x.attendees.clone());
        let xs = &c.0;
        for a in xs {
            for b in xs {
                let ab = rank(a, b, &co);
                if ab != rank(b, a, &co).reverse() {
                    return false;
                }
                if (ab == Ordering::Equal) != (key(a) == key(b)) {
                    return false;
                }
                for d in xs {
                    if ab != Ordering::Greater
                        && rank(b, d, &co) != Ordering::Greater
                        && rank(a, d, &co) == Ordering::Greater
                    {
                        return false;
                    }
                }
            }
        }
        true
    }
    qc().quickcheck(prop as fn(ArbCands) -> bool);
}

#[test]
fn prop_candidates_are_strictly_ranked_and_bounded() {
    fn prop(gr: ArbGroup) -> bool {
        let b = build(&gr, 0);
        let a = aggregate(&b.view());
        a.candidates.len() <= MAX_CANDIDATES
            && a.candidates
                .windows(2)
                .all(|w| rank(&w[0], &w[1], &b.coordinator) == Ordering::Less)
            && a.flexibility_request.iter().all(|r| {
                r.request.validate("flexibility_request").is_ok()
                    && !r.request.message.contains("agent:")
                    && a.binding.as_ref().is_some_and(|b| b.participant == r.to)
            })
    }
    qc().quickcheck(prop as fn(ArbGroup) -> bool);
}

/// The properties above are not vacuous: the generator reaches candidates, common
/// windows, binding constraints, sent overlaps and combined budgets often.
#[test]
fn generator_covers_the_interesting_cases() {
    let mut g = Gen::new(100);
    let (mut cands, mut common, mut binding, mut overlap, mut budget) = (0, 0, 0, 0, 0);
    for _ in 0..300 {
        let gr = ArbGroup::arbitrary(&mut g);
        let b = build(&gr, 0);
        let v = b.view();
        let a = aggregate(&v);
        let agg = a.aggregated_context(&v);
        cands += usize::from(!a.candidates.is_empty());
        common += usize::from(!a.common_windows.is_empty());
        binding += usize::from(a.flexibility_request.is_some());
        overlap += usize::from(
            agg.availability_overlap
                .as_ref()
                .is_some_and(|o| !o.ranked.is_empty()),
        );
        budget += usize::from(agg.combined.as_ref().is_some_and(|c| c.budget.is_some()));
    }
    // Typical: 233, 41, 125, 206, 20 of 300.
    assert!(
        cands >= 100 && common >= 10 && binding >= 40 && overlap >= 80 && budget >= 3,
        "cands {cands} common {common} binding {binding} overlap {overlap} budget {budget}"
    );
}
