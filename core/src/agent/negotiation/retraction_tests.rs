//! Taking it back (SPEC-NOTES "Retraction"): after the dinner, Alice takes back what she
//! shared; Bob's agent deletes it (thread, kept packets, memory), acknowledges it signed,
//! and a late copy is not taken in again; a peer that never acknowledges is reported by
//! name, and a forged acknowledgement changes nothing.

use std::time::Duration;

use serde_json::{json, Value};

use crate::agent::tests::support::*;
use crate::agent::*;
use crate::crypto::IdentityKey;
use crate::encoding::b64_encode;
use crate::harness::Net;
use crate::receipt::retraction::{ack_bytes, Retraction, RetractionError, RETRACTION_PREFIX};

fn retractions(net: &Net, i: usize) -> Vec<Retraction> {
    net.nodes[i]
        .store
        .iter()
        .filter(|(k, _)| k.starts_with(RETRACTION_PREFIX))
        .map(|(_, v)| serde_json::from_slice(v).expect("a retraction record parses"))
        .collect()
}

fn texts(net: &Net, i: usize) -> Vec<String> {
    net.nodes[i]
        .notifications
        .iter()
        .map(|n| n.text.clone())
        .collect()
}

/// Whether any packet `i` keeps in `thread`'s history carries `field` as a value.
fn history_carries(net: &Net, i: usize, thread: &str, field: &str) -> bool {
    let t = net.nodes[i].agent.thread(thread).unwrap();
    let stored: Vec<String> = net.nodes[i]
        .store
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("history/{thread}/")))
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect();
    let carries = |json: &str| {
        let v: Value = serde_json::from_str(json).unwrap_or_default();
        ["context", "context_provided"]
            .iter()
            .any(|m| v[m].get(field).is_some())
    };
    t.history.iter().any(|h| carries(&h.json))
        || stored.iter().any(|s| {
            let h: Value = serde_json::from_str(s).unwrap_or_default();
            carries(h["json"].as_str().unwrap_or(""))
        })
}

#[test]
fn after_the_dinner_alice_takes_back_what_she_shared_and_bob_deletes_it_signed() {
    let (mut net, a, b) = dinner_net();
    let id = complete_dinner(&mut net, a, b);
    let shared: Vec<String> = net.nodes[a]
        .agent
        .thread(&id)
        .unwrap()
        .shared
        .keys()
        .cloned()
        .collect();
    assert!(shared.contains(&"transport_mode".to_string()), "{shared:?}");
    let field = "transport_mode";
    assert!(net.nodes[b]
        .agent
        .thread(&id)
        .unwrap()
        .theirs
        .contains_key(field));
    assert!(history_carries(&net, b, &id, field));

    // A field she never shared: nothing is sent.
    net.command(
        a,
        Command::Retract {
            thread_id: id.clone(),
            fields: vec!["blood_type".into()],
        },
    );
    net.settle();
    assert!(texts(&net, a)
        .iter()
        .any(|t| t.contains("Not shared in this thread")));
    assert!(retractions(&net, a).is_empty());

    net.command(
        a,
        Command::Retract {
            thread_id: id.clone(),
            fields: vec![field.into()],
        },
    );
    net.settle();
    // Bob's agent deleted it: the thread's values, the packets it keeps, its memory.
    let tb = net.nodes[b].agent.thread(&id).unwrap();
    assert!(!tb.theirs.contains_key(field), "{:?}", tb.theirs);
    assert!(
        !history_carries(&net, b, &id, field),
        "{}",
        net.render(None)
    );
    let alice = net.address(a);
    let memory = net.nodes[b]
        .agent
        .memory()
        .export_project_ndjson(alice.as_str())
        .unwrap_or_default();
    // No fact of the field is left (the package still says the field was shared once: a
    // name, not a value).
    assert!(memory.contains("cache.dietary"), "{memory}");
    assert!(!memory.contains(&format!(".{field}\"")), "{memory}");
    assert!(texts(&net, b)
        .iter()
        .any(|t| t.contains("took back transport_mode")));
    // Alice's side: acknowledged, signed, kept; her own copies lost it too.
    let r = retractions(&net, a);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].verify(), Ok(()), "{:?}", r[0]);
    assert_eq!(r[0].fields, [field]);
    assert_eq!(
        r[0].ack.as_ref().unwrap().key,
        net.nodes[b].agent.public_key().to_bytes()
    );
    assert!(texts(&net, a)
        .iter()
        .any(|t| t.contains("confirmed, signed")));
    let ta = net.nodes[a].agent.thread(&id).unwrap();
    assert!(!ta.shared.contains_key(field));
    assert!(ta.retractions[0].acknowledged);
    assert!(!history_carries(&net, a, &id, field));
    // Restarted, Bob's agent still holds nothing of it.
    net.crash_and_restart_agent(b, [78; 32]);
    net.connect(b);
    net.settle();
    assert!(!net.nodes[b]
        .agent
        .thread(&id)
        .unwrap()
        .theirs
        .contains_key(field));
    assert!(!history_carries(&net, b, &id, field));
}

fn mallory_signs(w: &HostileWorld, thread: &str, rid: &str, fields: &[String]) -> String {
    let key = IdentityKey::from_seed([66; 32]);
    b64_encode(&key.sign(&ack_bytes(&w.m.address, thread, rid, fields)))
}

#[test]
fn a_peer_that_never_acknowledges_is_named_and_a_forged_acknowledgement_changes_nothing() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let thread = w.alice_opens();
    let shared: Vec<String> = w.net.nodes[w.alice]
        .agent
        .thread(&thread)
        .unwrap()
        .shared
        .keys()
        .cloned()
        .collect();
    assert!(!shared.is_empty());
    w.net.command(
        w.alice,
        Command::Retract {
            thread_id: thread.clone(),
            fields: Vec::new(),
        },
    );
    w.m.pump(&mut w.net);
    let asked =
        w.m.received
            .iter()
            .find(|r| r.kind() == "retraction")
            .expect("mallory is asked");
    let rid = asked.packet["packet_id"].as_str().unwrap().to_string();
    let mut fields: Vec<String> = asked.packet["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    fields.sort();
    let mut want = shared.clone();
    want.sort();
    assert_eq!(fields, want, "everything she shared");

    let refused = |w: &HostileWorld| {
        w.net.nodes[w.alice]
            .audit
            .iter()
            .filter(|r| matches!(r.event, AgentEvent::RetractionAckRefused { .. }))
            .count()
    };
    // Forged: zeros, fewer fields, another retraction.
    let fewer = fields[..1].to_vec();
    for (n, body) in [
        json!({"retraction_id": rid, "fields": fields, "signature": b64_encode(&[0u8; 64])}),
        json!({"retraction_id": rid, "fields": fewer,
               "signature": mallory_signs(&w, &thread, &rid, &fewer)}),
        json!({"retraction_id": "pkt_other0000", "fields": fields,
               "signature": mallory_signs(&w, &thread, "pkt_other0000", &fields)}),
    ]
    .into_iter()
    .enumerate()
    {
        w.m_send(&thread, "retraction_ack", body);
        assert_eq!(refused(&w), n + 1, "{}", w.net.render(None));
    }
    assert_eq!(
        retractions(&w.net, w.alice)[0].verify(),
        Err(RetractionError::Unacknowledged(w.m.address.to_string()))
    );
    // A day passes without an acknowledgement: Alice is told, by name, once.
    w.net.run_for(Duration::from_secs(86_400 + 60));
    w.m.pump(&mut w.net);
    let told: Vec<String> = texts(&w.net, w.alice)
        .into_iter()
        .filter(|t| t.contains("has not confirmed that it deleted"))
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].contains(w.m.address.as_str()), "{}", told[0]);
    w.net.run_for(Duration::from_secs(86_400));
    let again = texts(&w.net, w.alice)
        .iter()
        .filter(|t| t.contains("has not confirmed"))
        .count();
    assert_eq!(again, 1);
    // A late but genuine acknowledgement still counts.
    w.m_send(
        &thread,
        "retraction_ack",
        json!({"retraction_id": rid, "fields": fields,
               "signature": mallory_signs(&w, &thread, &rid, &fields)}),
    );
    assert_eq!(retractions(&w.net, w.alice)[0].verify(), Ok(()));
}

#[test]
fn a_value_taken_back_is_not_taken_in_again_from_a_late_packet() {
    let mut w = HostileWorld::new(Limits::default(), false);
    let thread = w.alice_opens();
    w.m_send(
        &thread,
        "context_response",
        json!({"context_provided": {"dietary": "vegan"}}),
    );
    assert!(w.net.nodes[w.alice]
        .agent
        .thread(&thread)
        .unwrap()
        .theirs
        .contains_key("dietary"));
    let rid = w.m_send(&thread, "retraction", json!({"fields": ["dietary"]}));
    let t = w.net.nodes[w.alice].agent.thread(&thread).unwrap();
    assert!(!t.theirs.contains_key("dietary"));
    // Alice's agent acknowledged, signed by her key.
    let ack =
        w.m.received
            .iter()
            .find(|r| r.kind() == "retraction_ack")
            .expect("acknowledged");
    assert_eq!(ack.packet["retraction_id"], json!(rid));
    // The same value again, in an older packet delivered late: not taken in.
    w.m_send(
        &thread,
        "context_response",
        json!({"context_provided": {"dietary": "vegan"}}),
    );
    let t = w.net.nodes[w.alice].agent.thread(&thread).unwrap();
    assert!(!t.theirs.contains_key("dietary"));
}

#[test]
fn taken_back_in_the_middle_a_field_asked_for_again_is_declined_and_nobody_waits_forever() {
    let (mut net, a, b) = dinner_net();
    let id = start_dinner(&mut net, a, b);
    // Alice takes back her windows while Bob's agent asks her for more.
    net.command(
        a,
        Command::Retract {
            thread_id: id.clone(),
            fields: vec!["time_windows".into()],
        },
    );
    net.settle();
    assert!(!net.nodes[b]
        .agent
        .thread(&id)
        .unwrap()
        .theirs
        .contains_key("time_windows"));
    share_transport(&mut net, a);
    net.settle();
    // Alice never shares them again in the thread, and a request for them is declined.
    for p in sent(&net, a, &id, "context_response") {
        assert!(p["context_provided"].get("time_windows").is_none(), "{p}");
    }
    let declined_windows = sent(&net, a, &id, "context_response").iter().any(|p| {
        p["context_unavailable"]
            .as_array()
            .is_some_and(|u| u.iter().any(|x| x["field"] == "time_windows"))
    });
    let asked_windows = sent(&net, b, &id, "context_request")
        .iter()
        .any(|p| p["needs"].to_string().contains("time_windows"));
    assert_eq!(asked_windows, declined_windows, "{}", net.render(None));
    // Nobody is left waiting for the other: a proposal, or the users are asked.
    let ta = net.nodes[a].agent.thread(&id).unwrap();
    let tb = net.nodes[b].agent.thread(&id).unwrap();
    use crate::agent::thread::Waiting;
    let both_wait = ta.waiting == Waiting::Peer && tb.waiting == Waiting::Peer;
    let stuck = tb.waiting == Waiting::Nothing && tb.state == ThreadState::Negotiating;
    assert!(
        !both_wait && !stuck,
        "a: {:?} {:?}, b: {:?} {:?}\n{}",
        ta.state,
        ta.waiting,
        tb.state,
        tb.waiting,
        net.render(None)
    );
}
