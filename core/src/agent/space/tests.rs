//! Shared context spaces (§12) between agents on the harness's network: creation and
//! invitation, writes carried through the creator, catch-up after being offline,
//! concurrent writes, the permission tiers, restarts, and hostile participants.

use serde_json::{json, Value};

use crate::agent::*;
use crate::harness::hostile::HostilePeer;
use crate::harness::{dinner, Net};
use crate::space::{
    own_prefix, FieldValue, SpaceLink, SpaceParticipant, SpacePermission, SpaceRefusal, SpaceUpdate,
};

/// Alice, Bob and Carol (Carol's config is Bob's with another name) on one relay, all
/// online.
fn trio() -> (Net, usize, usize, usize) {
    trio_with(dinner::bob("a2acp.io"))
}

/// [`trio`] with Bob configured as `bob`.
fn trio_with(bob: AgentConfig) -> (Net, usize, usize, usize) {
    let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let a = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    let b = net.add_agent(bob, [2; 32], [22; 32]);
    let c = net.add_agent(
        AgentConfig::new(Address::parse("agent:carol@a2acp.io").unwrap()),
        [3; 32],
        [33; 32],
    );
    for i in [a, b, c] {
        net.connect(i);
    }
    net.settle();
    (net, a, b, c)
}

fn part(net: &Net, i: usize, permission: SpacePermission) -> SpaceParticipant {
    SpaceParticipant {
        address: net.address(i),
        permission,
    }
}

fn val(v: Value) -> FieldValue {
    FieldValue::Value { value: v }
}

/// Alice creates the trip space: Bob writes his own fields, Carol writes everything.
fn create_trip(net: &mut Net, a: usize, b: usize, c: usize) -> String {
    let participants = vec![
        part(net, b, SpacePermission::WriteOwnFields),
        part(net, c, SpacePermission::FullWrite),
    ];
    let mut fields = Context::new();
    fields.insert("destination".into(), json!("Lisbon"));
    net.command(
        a,
        Command::CreateSpace {
            name: "Family trip".into(),
            participants,
            fields,
        },
    );
    net.settle();
    net.nodes[a].agent.spaces().keys().next().cloned().unwrap()
}

fn set(net: &mut Net, i: usize, space: &str, field: &str, value: FieldValue) {
    net.command(
        i,
        Command::SetSpaceField {
            space_id: space.into(),
            field: field.into(),
            value,
        },
    );
}

fn field(net: &Net, i: usize, space: &str, f: &str) -> Option<FieldValue> {
    net.nodes[i]
        .agent
        .space(space)?
        .replica
        .fields()
        .get(f)
        .map(|u| u.value.clone())
}

fn replica(net: &Net, i: usize, space: &str) -> crate::space::Replica {
    net.nodes[i].agent.space(space).unwrap().replica.clone()
}

fn space_changes(net: &Net, i: usize) -> Vec<SpaceChange> {
    net.nodes[i]
        .notifications
        .iter()
        .filter_map(|n| n.space.clone())
        .collect()
}

fn refusals(net: &Net, i: usize) -> Vec<SpaceRefusal> {
    net.nodes[i]
        .audit
        .iter()
        .filter_map(|r| match &r.event {
            AgentEvent::Space(SpaceEvent::Refused { refusal, .. }) => Some(refusal.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_space_reaches_every_participant_and_writes_go_round() {
    let (mut net, a, b, c) = trio();
    let id = create_trip(&mut net, a, b, c);
    assert!(id.starts_with("spc_"));
    for i in [a, b, c] {
        assert_eq!(
            field(&net, i, &id, "destination"),
            Some(val(json!("Lisbon"))),
            "{}",
            net.render(None)
        );
    }
    // Bob and Carol were told, with a typed change.
    for i in [b, c] {
        assert!(space_changes(&net, i)
            .iter()
            .any(|s| matches!(s, SpaceChange::Joined { space_id, .. } if *space_id == id)));
    }
    // Bob writes his own field: through Alice to Carol.
    let own = format!("{}dates", own_prefix(&net.address(b)));
    set(&mut net, b, &id, &own, val(json!("12-19 May")));
    net.settle();
    // Carol links the itinerary.
    let link = FieldValue::Link {
        link: SpaceLink {
            title: "itinerary.md".into(),
            uri: "https://drive.example/itinerary.md".into(),
        },
    };
    set(&mut net, c, &id, "itinerary", link.clone());
    net.settle();
    let r = replica(&net, a, &id);
    assert_eq!(r, replica(&net, b, &id));
    assert_eq!(r, replica(&net, c, &id));
    assert_eq!(r.fields().len(), 3);
    assert_eq!(field(&net, b, &id, "itinerary"), Some(link));
    // Carol was told of Bob's write (not of her own).
    let changed: Vec<String> = space_changes(&net, c)
        .into_iter()
        .filter_map(|s| match s {
            SpaceChange::Changed { fields, .. } => Some(fields),
            _ => None,
        })
        .flatten()
        .map(|f| f.field)
        .collect();
    assert!(changed.contains(&own), "{changed:?}");
    assert!(!changed.contains(&"itinerary".to_string()));
    // The history keeps every write.
    assert_eq!(r.history().len(), 3);
}

#[test]
fn an_offline_participant_catches_up_from_the_creator() {
    let (mut net, a, b, c) = trio();
    let id = create_trip(&mut net, a, b, c);
    net.disconnect(c);
    net.settle();
    set(&mut net, a, &id, "hotel", val(json!("Alfama Suites")));
    let own = format!("{}arrival", own_prefix(&net.address(b)));
    set(&mut net, b, &id, &own, val(json!("Friday 18:00")));
    net.settle();
    set(&mut net, a, &id, "hotel", val(json!("Baixa Inn")));
    net.settle();
    assert_eq!(field(&net, c, &id, "hotel"), None);
    net.connect(c);
    net.settle();
    let r = replica(&net, a, &id);
    assert_eq!(r, replica(&net, b, &id));
    assert_eq!(r, replica(&net, c, &id), "{}", net.render(None));
    assert_eq!(field(&net, c, &id, "hotel"), Some(val(json!("Baixa Inn"))));
    assert_eq!(r.history().len(), 4);
}

#[test]
fn concurrent_writes_of_one_field_converge_by_the_tie_break() {
    let (mut net, a, b, c) = trio();
    let id = create_trip(&mut net, a, b, c);
    // Both write version 2 of `destination` before either hears of the other.
    set(&mut net, a, &id, "destination", val(json!("Porto")));
    set(&mut net, c, &id, "destination", val(json!("Madeira")));
    net.settle();
    let r = replica(&net, a, &id);
    assert_eq!(r, replica(&net, b, &id));
    assert_eq!(r, replica(&net, c, &id));
    // Same version, same second: the greater writer address wins (carol > alice).
    let w = r.winner("destination").unwrap();
    assert_eq!(w.version, 2);
    assert_eq!(w.writer, net.address(c));
    assert_eq!(w.value, val(json!("Madeira")));
    // Different fields never conflict: both writes of other fields stay.
    set(&mut net, a, &id, "budget", val(json!(2000)));
    set(&mut net, c, &id, "car", val(json!("rental")));
    net.settle();
    assert_eq!(field(&net, b, &id, "budget"), Some(val(json!(2000))));
    assert_eq!(field(&net, b, &id, "car"), Some(val(json!("rental"))));
}

#[test]
fn the_permission_tiers_apply_to_what_an_agent_writes() {
    let (mut net, a, b, c) = trio();
    let id = create_trip(&mut net, a, b, c);
    let before = replica(&net, a, &id);
    let sent_before = net.nodes[a].frames_sent;
    // health_info is never_share for Alice (onboarding defaults).
    set(&mut net, a, &id, "health_info", val(json!("asthma")));
    // Its value under another name is caught too.
    set(
        &mut net,
        a,
        &id,
        "notes",
        val(json!("bring SECRET-asthma-inhaler")),
    );
    net.settle();
    assert_eq!(replica(&net, a, &id), before);
    assert_eq!(replica(&net, b, &id), before);
    assert_eq!(net.nodes[a].frames_sent, sent_before, "nothing left");
    let refused: Vec<SpaceRefusal> = space_changes(&net, a)
        .into_iter()
        .filter_map(|s| match s {
            SpaceChange::Refused { refusal, .. } => Some(refusal),
            _ => None,
        })
        .collect();
    assert_eq!(
        refused,
        vec![
            SpaceRefusal::NeverShare {
                field: "health_info".into()
            },
            SpaceRefusal::NeverShare {
                field: "health_info".into()
            }
        ]
    );
    // Bob may not write a shared field: refused before it leaves.
    set(&mut net, b, &id, "hotel", val(json!("mine")));
    net.settle();
    assert_eq!(replica(&net, a, &id), before);
    assert!(matches!(
        refusals(&net, b).as_slice(),
        [SpaceRefusal::NotOwnField { .. }]
    ));
}

#[test]
fn a_space_survives_restarts() {
    let (mut net, a, b, c) = trio();
    let id = create_trip(&mut net, a, b, c);
    set(&mut net, c, &id, "hotel", val(json!("Alfama Suites")));
    net.settle();
    net.crash_and_restart_agent(a, [91; 32]);
    net.crash_and_restart_agent(b, [92; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    assert_eq!(
        field(&net, b, &id, "hotel"),
        Some(val(json!("Alfama Suites")))
    );
    // The legs work after the restart, both ways.
    set(&mut net, c, &id, "hotel", val(json!("Baixa Inn")));
    let own = format!("{}arrival", own_prefix(&net.address(b)));
    set(&mut net, b, &id, &own, val(json!("Friday")));
    net.settle();
    let r = replica(&net, a, &id);
    assert_eq!(r, replica(&net, b, &id));
    assert_eq!(r, replica(&net, c, &id));
    assert_eq!(field(&net, a, &id, &own), Some(val(json!("Friday"))));
    assert_eq!(field(&net, b, &id, "hotel"), Some(val(json!("Baixa Inn"))));
}

// ===== Hostile peers =====

/// Alice (creator), Bob (write_own_fields) and Mallory, a hostile peer, in one space
/// with Mallory's permission `m_perm` (or not a participant).
struct Hostile {
    net: Net,
    a: usize,
    b: usize,
    m: HostilePeer,
    id: String,
}

fn hostile(m_perm: Option<SpacePermission>) -> Hostile {
    let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let a = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    let b = net.add_agent(dinner::bob("a2acp.io"), [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    let mut m = HostilePeer::join(&mut net, "mallory", [66; 32]).unwrap();
    let mut participants = vec![part(&net, b, SpacePermission::WriteOwnFields)];
    if let Some(p) = m_perm {
        participants.push(SpaceParticipant {
            address: m.address.clone(),
            permission: p,
        });
    }
    let mut fields = Context::new();
    fields.insert("destination".into(), json!("Lisbon"));
    net.command(
        a,
        Command::CreateSpace {
            name: "Family trip".into(),
            participants,
            fields,
        },
    );
    net.settle();
    m.pump(&mut net);
    let id = net.nodes[a].agent.spaces().keys().next().cloned().unwrap();
    Hostile { net, a, b, m, id }
}

impl Hostile {
    fn update(&self, writer: &Address, f: &str, version: u64, uid: &str) -> SpaceUpdate {
        SpaceUpdate {
            update_id: uid.into(),
            writer: writer.clone(),
            field: f.into(),
            version,
            timestamp: Timestamp::from_secs(self.net.now.as_millis() / 1000),
            value: val(json!("mallory was here")),
        }
    }

    /// Mallory sends a space packet with `updates` to Alice on Mallory's leg of the
    /// space (`<space_id>/<Mallory's address>`, the thread Alice opened with her), or, when
    /// Mallory is no participant, on the leg she would have.
    fn send(&mut self, updates: Vec<SpaceUpdate>) {
        let to = self.net.address(self.a);
        let p = json!({
            "protocol": "a2acp/0.2",
            "packet_id": self.m.new_packet_id(),
            "space_id": self.id,
            "from": self.m.address.as_str(),
            "to": to.as_str(),
            "timestamp": self.net.now.to_rfc3339(),
            "type": "space_update",
            "updates": updates,
        });
        let bytes = serde_json::to_vec(&p).unwrap();
        let leg = crate::agent::space::leg_id(&self.id, &self.m.address);
        self.m.send_bytes(&mut self.net, &to, &leg, &bytes).unwrap();
        self.m.pump(&mut self.net);
        self.net.settle();
    }

    fn replicas(&self) -> (crate::space::Replica, crate::space::Replica) {
        (
            replica(&self.net, self.a, &self.id),
            replica(&self.net, self.b, &self.id),
        )
    }
}

#[test]
fn a_member_writing_beyond_its_permission_is_refused() {
    // Read-only Mallory.
    let mut h = hostile(Some(SpacePermission::ReadAll));
    assert!(h.m.received.iter().any(|r| r.kind() == "space_update"
        && r.thread_id == crate::agent::space::leg_id(&h.id, &h.m.address)));
    let before = h.replicas();
    let m = h.m.address.clone();
    let u = h.update(&m, "destination", 9, "upd_m1");
    h.send(vec![u]);
    assert_eq!(h.replicas(), before);
    assert_eq!(
        refusals(&h.net, h.a),
        vec![SpaceRefusal::ReadOnly { writer: m.clone() }]
    );
    // Own-fields Mallory writing a shared field, and Bob's own field.
    let mut h = hostile(Some(SpacePermission::WriteOwnFields));
    let before = h.replicas();
    let bobs = format!("{}dates", own_prefix(&h.net.address(h.b)));
    let u1 = h.update(&m, "destination", 9, "upd_m1");
    let u2 = h.update(&m, &bobs, 1, "upd_m2");
    h.send(vec![u1, u2]);
    assert_eq!(h.replicas(), before);
    assert!(matches!(
        refusals(&h.net, h.a).as_slice(),
        [
            SpaceRefusal::NotOwnField { .. },
            SpaceRefusal::NotOwnField { .. }
        ]
    ));
    // Her own field is fine, and reaches Bob.
    let mine = format!("{}note", own_prefix(&m));
    let u = h.update(&m, &mine, 1, "upd_m3");
    h.send(vec![u]);
    assert!(field(&h.net, h.b, &h.id, &mine).is_some());
}

#[test]
fn a_member_forging_another_writer_is_refused() {
    let mut h = hostile(Some(SpacePermission::FullWrite));
    let before = h.replicas();
    let bob = h.net.address(h.b);
    let u = h.update(&bob, &format!("{}dates", own_prefix(&bob)), 1, "upd_f");
    h.send(vec![u]);
    assert_eq!(h.replicas(), before);
    assert!(matches!(
        refusals(&h.net, h.a).as_slice(),
        [SpaceRefusal::NotTheWriter { .. }]
    ));
}

#[test]
fn a_non_member_writing_is_refused() {
    let mut h = hostile(None);
    let before = h.replicas();
    let m = h.m.address.clone();
    let alice = h.net.address(h.a);
    // Mallory has no leg: she opens one to Alice named as a leg of hers would be
    // (`<space_id>/<mallory>`). Only a creator opens legs, and it names them after the
    // participant: a leg opened to Alice must be `<space_id>/<alice>`, so the header
    // does not match its envelope (malformed, nothing changes).
    let u = h.update(&m, "destination", 9, "upd_n1");
    h.send(vec![u.clone()]);
    assert_eq!(h.replicas(), before);
    assert!(refusals(&h.net, h.a).is_empty());
    assert!(h.net.nodes[h.a].audit.iter().any(|r| matches!(
        &r.event,
        AgentEvent::Dropped { drop: DropReason::Malformed { peer, .. }, .. } if *peer == m
    )));
    // Named as a leg to Alice, but without a definition: no such space here for her.
    let p = json!({
        "protocol": "a2acp/0.2", "packet_id": "pkt_n2", "space_id": h.id,
        "from": m.as_str(), "to": alice.as_str(), "timestamp": h.net.now.to_rfc3339(),
        "type": "space_update", "updates": [u],
    });
    let leg = crate::agent::space::leg_id(&h.id, &alice);
    h.m.send_bytes(&mut h.net, &alice, &leg, &serde_json::to_vec(&p).unwrap())
        .unwrap();
    h.m.pump(&mut h.net);
    h.net.settle();
    assert_eq!(h.replicas(), before);
    assert_eq!(refusals(&h.net, h.a), vec![SpaceRefusal::UnknownSpace]);
    // Claiming to have created it (with herself in it) changes nothing either.
    let mut def = before.0.definition.clone();
    def.creator = m.clone();
    def.participants[0].address = m.clone();
    let to = h.net.address(h.b);
    let p = json!({
        "protocol": "a2acp/0.2", "packet_id": "pkt_x", "space_id": h.id,
        "from": m.as_str(), "to": to.as_str(), "timestamp": h.net.now.to_rfc3339(),
        "type": "space_update", "space": def, "updates": [u],
    });
    let leg = crate::agent::space::leg_id(&h.id, &to);
    h.m.send_bytes(&mut h.net, &to, &leg, &serde_json::to_vec(&p).unwrap())
        .unwrap();
    h.m.pump(&mut h.net);
    h.net.settle();
    assert_eq!(h.replicas(), before);
    assert_eq!(refusals(&h.net, h.b), vec![SpaceRefusal::UnknownSpace]);
}

#[test]
fn an_oversized_update_is_refused() {
    let mut h = hostile(Some(SpacePermission::FullWrite));
    let before = h.replicas();
    let m = h.m.address.clone();
    let mut u = h.update(&m, "notes", 1, "upd_big");
    u.value = val(json!("x".repeat(crate::space::MAX_VALUE_BYTES + 1)));
    h.send(vec![u]);
    assert_eq!(h.replicas(), before);
    assert!(matches!(
        refusals(&h.net, h.a).as_slice(),
        [SpaceRefusal::TooLarge { .. }]
    ));
    // A whole packet over the limit is refused before it is parsed.
    let mut many = Vec::new();
    for n in 0..20 {
        let mut u = h.update(&m, &format!("f{n}"), 1, &format!("upd_{n}"));
        u.value = val(json!("y".repeat(4000)));
        many.push(u);
    }
    h.send(many);
    assert_eq!(h.replicas(), before);
    assert!(matches!(
        refusals(&h.net, h.a).last(),
        Some(SpaceRefusal::TooLarge { .. })
    ));
}

#[test]
fn a_replayed_update_is_refused() {
    let mut h = hostile(Some(SpacePermission::FullWrite));
    let m = h.m.address.clone();
    let u = h.update(&m, "hotel", 1, "upd_r");
    h.send(vec![u.clone()]);
    let after = h.replicas();
    assert_eq!(after.0, after.1);
    assert!(field(&h.net, h.b, &h.id, "hotel").is_some());
    let bob_heard = h.net.nodes[h.b].notifications.len();
    // The same update again (and again with another value): nothing changes, nothing
    // is forwarded, nobody is told.
    h.send(vec![u.clone()]);
    let mut changed = u;
    changed.value = val(json!("replaced"));
    h.send(vec![changed]);
    assert_eq!(h.replicas(), after);
    assert_eq!(h.net.nodes[h.b].notifications.len(), bob_heard);
    assert!(matches!(
        refusals(&h.net, h.a).as_slice(),
        [
            SpaceRefusal::Duplicate { .. },
            SpaceRefusal::Duplicate { .. }
        ]
    ));
}

#[test]
fn a_creator_cannot_change_the_definition_afterwards() {
    // Mallory creates a space with Alice in it, then sends a definition that makes her
    // read-only Alice… a full writer of nothing: Alice keeps the first definition.
    let start = Timestamp::parse_rfc3339(dinner::START).unwrap();
    let mut net = Net::new("a2acp.io", start, [7; 32]);
    let a = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    net.connect(a);
    net.settle();
    let mut m = HostilePeer::join(&mut net, "mallory", [66; 32]).unwrap();
    let alice = net.address(a);
    let def = crate::space::SpaceDefinition {
        space_id: "spc_mallory".into(),
        name: "Mallory's".into(),
        creator: m.address.clone(),
        created: Timestamp::from_secs(1),
        participants: vec![
            SpaceParticipant {
                address: m.address.clone(),
                permission: SpacePermission::FullWrite,
            },
            SpaceParticipant {
                address: alice.clone(),
                permission: SpacePermission::FullWrite,
            },
        ],
    };
    let send = |m: &mut HostilePeer, net: &mut Net, def: &crate::space::SpaceDefinition| {
        let p = json!({
            "protocol": "a2acp/0.2", "packet_id": m.new_packet_id(), "space_id": "spc_mallory",
            "from": m.address.as_str(), "to": alice.as_str(), "timestamp": net.now.to_rfc3339(),
            "type": "space_update", "space": def, "updates": [],
        });
        let leg = crate::agent::space::leg_id("spc_mallory", &alice);
        m.send_bytes(net, &alice, &leg, &serde_json::to_vec(&p).unwrap())
            .unwrap();
        m.pump(net);
        net.settle();
    };
    send(&mut m, &mut net, &def);
    let joined = net.nodes[a].agent.space("spc_mallory").unwrap().clone();
    let mut changed = def.clone();
    changed.participants[1].permission = SpacePermission::ReadAll;
    send(&mut m, &mut net, &changed);
    assert_eq!(
        net.nodes[a].agent.space("spc_mallory").unwrap().replica,
        joined.replica
    );
    assert_eq!(refusals(&net, a), vec![SpaceRefusal::DefinitionMismatch]);
}

/// Alice, Bob (whose area may not be passed on) and Carol; Alice and Bob plan the dinner,
/// so Alice's agent holds Bob's area under "no re-sharing".
fn trio_after_a_guarded_dinner() -> (Net, usize, usize, usize, String) {
    let mut bob = dinner::bob("a2acp.io");
    bob.permissions.usage.insert(
        "location_preference".into(),
        crate::agent::permissions::UsagePolicy {
            purpose: false,
            expires_after: None,
            no_reshare: true,
        },
    );
    let (mut net, a, b, c) = trio_with(bob);
    let thread = crate::agent::tests::support::start_dinner(&mut net, a, b);
    let area = net.nodes[a].agent.thread(&thread).unwrap().theirs["location_preference"]
        .as_str()
        .unwrap()
        .to_string();
    (net, a, b, c, area)
}

#[test]
fn a_value_that_may_not_be_passed_on_is_not_written_into_a_space_others_read() {
    let (mut net, a, b, c, area) = trio_after_a_guarded_dinner();
    let id = create_trip(&mut net, a, b, c);
    set(&mut net, a, &id, "meeting_point", val(json!(area.clone())));
    set(
        &mut net,
        a,
        &id,
        "plan",
        val(json!({"where": area.clone(), "when": "Friday"})),
    );
    net.settle();
    // Refused on Alice's side, saying whose value it is; nobody receives it.
    let bob = net.address(b);
    let refused = refusals(&net, a);
    for f in ["meeting_point", "plan"] {
        assert_eq!(field(&net, a, &id, f), None, "{f}");
        assert_eq!(field(&net, c, &id, f), None, "{f}");
    }
    assert_eq!(
        refused,
        vec![
            SpaceRefusal::NotToBePassedOn {
                field: "location_preference".into(),
                from: bob.clone()
            };
            2
        ]
    );
    let told = net.nodes[a]
        .notifications
        .iter()
        .any(|n| n.text.contains("shared with this agent only"));
    assert!(told, "Alice is told why");
    // Alice's own words, and anything else, are still written.
    set(&mut net, a, &id, "meeting_point", val(json!("the station")));
    net.settle();
    assert_eq!(
        field(&net, c, &id, "meeting_point"),
        Some(val(json!("the station")))
    );
}

#[test]
fn a_space_with_only_the_sharer_may_hold_its_value() {
    let (mut net, a, b, _, area) = trio_after_a_guarded_dinner();
    let participants = vec![part(&net, b, SpacePermission::FullWrite)];
    net.command(
        a,
        Command::CreateSpace {
            name: "Just us".into(),
            participants,
            fields: Context::new(),
        },
    );
    net.settle();
    let id = net.nodes[a].agent.spaces().keys().next().cloned().unwrap();
    set(&mut net, a, &id, "meeting_point", val(json!(area.clone())));
    net.settle();
    assert_eq!(field(&net, b, &id, "meeting_point"), Some(val(json!(area))));
    assert!(refusals(&net, a).is_empty());
}
