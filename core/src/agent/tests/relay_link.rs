//! The relay link and recovery: re-connections and their summaries, lost lookups and
//! packets asked for again, registration refused, unknown recipients.

use super::*;

/// Alice and Bob connected to a relay that queues one packet per thread, Alice's dinner
/// thread to Bob started: the setting where the relay refuses packets for now (`overflow`).
fn dinner_on_a_relay_queueing_one_per_thread() -> (Net, usize, usize, String) {
    let mut net = Net::new("a2acp.io", start(), [7; 32]);
    net.relay = crate::relay::Relay::new(
        crate::relay::RelayConfig {
            domain: "a2acp.io".into(),
            queue_per_thread: 1,
            ..crate::relay::RelayConfig::default()
        },
        [7; 32],
    );
    let a = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    let b = net.add_agent(dinner::bob("a2acp.io"), [2; 32], [22; 32]);
    net.connect(a);
    net.connect(b);
    net.settle();
    let id = start_dinner(&mut net, a, b, "low");
    (net, a, b, id)
}

#[test]
fn re_connections_keep_one_thread_state_per_thread_in_the_outbox() {
    // Swarm seeds 70, 94, 179, 210: a flapping link re-connected thousands of times while
    // the peer's relay queue was full; every re-connection queued another `thread_state`,
    // all parked in the outbox, all replayed on the next one, each listing every packet
    // sent so far.
    let (mut net, a, b, id) = dinner_on_a_relay_queueing_one_per_thread();
    assert!(net.nodes[a]
        .agent
        .thread(&id)
        .unwrap()
        .session
        .peer_eph()
        .is_some());
    net.disconnect(b);
    for _ in 0..6 {
        net.disconnect(a);
        net.connect(a);
        net.settle();
    }
    assert!(
        net.nodes[a].agent.outbox_len() <= 1,
        "outbox: {}",
        net.nodes[a].agent.outbox_len()
    );
    let summaries = net.nodes[a]
        .agent
        .thread(&id)
        .unwrap()
        .history
        .iter()
        .filter(|h| h.outgoing && h.kind == "thread_state")
        .count();
    assert!(summaries <= 2, "{summaries} thread_state packets sent");
    // Bob comes back: the summary waiting for him gets through, nothing is stuck.
    net.connect(b);
    net.settle();
    net.disconnect(a);
    net.connect(a);
    net.settle();
    assert_eq!(net.nodes[a].agent.outbox_len(), 0);
}

#[test]
fn re_connections_send_a_summary_only_when_the_thread_moved() {
    // A flapping link re-connects often (the 1,000-agent swarm: 7,000 re-connections sent
    // 45,000 `thread_state`s, 39 % of all packets). A summary the relay accepted reaches
    // the peer; the same summary again tells it nothing.
    let (mut net, a, b) = net();
    let id = start_dinner(&mut net, a, b, "low");
    let summaries = |net: &Net, n: usize| {
        net.nodes[n]
            .agent
            .thread(&id)
            .unwrap()
            .history
            .iter()
            .filter(|h| h.outgoing && h.kind == "thread_state")
            .count()
    };
    let flap = |net: &mut Net, n: usize| {
        net.disconnect(n);
        net.connect(n);
        net.settle();
    };
    flap(&mut net, a);
    assert_eq!(summaries(&net, a), 1, "{}", net.render(None));
    for _ in 0..5 {
        flap(&mut net, a);
        flap(&mut net, b);
    }
    assert_eq!(summaries(&net, a), 1, "{}", net.render(None));
    assert_eq!(summaries(&net, b), 1, "{}", net.render(None));
    // The thread moves on (Alice's user answers the consent prompt, packets go both
    // ways): the next re-connection summarises it again, once.
    share_transport(&mut net, a);
    assert_eq!(state(&net, a, &id), ThreadState::Proposed);
    flap(&mut net, a);
    flap(&mut net, a);
    assert_eq!(summaries(&net, a), 2, "{}", net.render(None));
}

/// Swarm seed 713: the first packet to a new peer waits for the peer's key; the lookup
/// was lost with the connection and the agent crashed before it re-connected. The stored
/// peer record said a lookup was on its way, so the restored agent never asked again and
/// the packet never left.
#[test]
fn a_key_lookup_lost_in_a_crash_is_asked_again() {
    let (mut net, a, b) = net();
    let to = net.address(b);
    net.command(
        a,
        Command::StartThread {
            to,
            intent: dinner_intent("low"),
            context: dinner::context(),
        },
    );
    let id = net.nodes[a].agent.threads().keys().last().cloned().unwrap();
    // The lookup is still on the wire when Alice's connection drops and she crashes.
    net.crash_and_restart_agent(a, [99; 32]);
    net.settle();
    net.connect(a);
    net.settle();
    assert!(
        net.nodes[b].agent.thread(&id).is_some(),
        "Bob never got the thread\n{}",
        net.render(None)
    );
}

/// Large swarm, seed 1: an agent crashed after storing the thread with its answer but
/// before queuing the packet, so the answer never left; the other side was connected
/// throughout and never asked for it, and both waited until the proposal expired. The
/// sender's next summary lists the answer as sent: the receiver asks for it with its own
/// summary, and the sender re-sends it.
#[test]
fn a_packet_listed_as_sent_but_never_received_is_asked_for() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    // Alice's answer is stored but its outbox record is lost in a crash (simulated by
    // restoring from the store without the record).
    net.disconnect(a);
    let p = net.prompt(a).unwrap();
    net.answer_resolution(
        a,
        p.id,
        ResolutionAnswer::MakeExcuse {
            actual_reason: None,
        },
    );
    net.settle();
    assert_eq!(state(&net, a, &id), ThreadState::Negotiating);
    let store: BTreeMap<String, Vec<u8>> = net.nodes[a]
        .store
        .iter()
        .filter(|(k, _)| !k.starts_with("outbox/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    net.nodes[a].store = store;
    net.crash_and_restart_agent(a, [1; 32]);
    net.connect(a);
    net.settle();
    // Bob got the excuse: he ruled his proposal out and proposed the next option.
    let tb = net.nodes[b].agent.thread(&id).unwrap();
    assert_eq!(tb.rejected.len(), 1, "{}", net.render(None));
    assert_eq!(tb.state, ThreadState::Proposed);
    let ta = net.nodes[a].agent.thread(&id).unwrap();
    assert_eq!(ta.state, ThreadState::Proposed);
    assert_eq!(
        ta.stage.resolution().map(|r| &r.packet_id),
        tb.stage.resolution().map(|r| &r.packet_id)
    );
}

#[test]
fn address_taken_stops_registering_closes_and_tells_once() {
    let (mut net, a, _b) = net();
    // Another key claims Alice's address.
    let thief = net.add_agent(dinner::alice("a2acp.io"), [9; 32], [99; 32]);
    let sent_before = net.nodes[thief].frames_sent;
    net.connect(thief);
    net.settle();
    net.run_for(Duration::from_secs(60));
    let t = &net.nodes[thief];
    let r = t.agent.link_refusal().expect("refusal recorded");
    assert_eq!(r.code, crate::link::ErrorCode::AddressTaken);
    assert_eq!(r.retry_after, None);
    assert!(!t.agent.is_online());
    assert!(!t.is_connected(), "the agent closed its connection");
    // One `register`, not one per challenge the relay issues after each refusal.
    assert_eq!(t.frames_sent - sent_before, 1);
    let told: Vec<&Notification> = t
        .notifications
        .iter()
        .filter(|n| n.text.contains("address_taken"))
        .collect();
    assert_eq!(told.len(), 1, "{:?}", t.notifications);
    // Connected again in the same run: the challenge is not answered.
    net.connect(thief);
    net.settle();
    assert_eq!(net.nodes[thief].frames_sent - sent_before, 1);
    assert!(net.nodes[thief].agent.link_refusal().is_some());
    // The owner is unaffected.
    assert!(net.nodes[a].agent.is_online());
    assert!(net.nodes[a].agent.link_refusal().is_none());
}

#[test]
fn registration_limited_waits_then_registers_on_the_next_connection() {
    let cfg = crate::relay::RelayConfig {
        domain: "a2acp.io".into(),
        max_registration_sources: 1,
        registration_window: Duration::from_secs(60),
        ..Default::default()
    };
    let mut net = Net::with_relay_config(cfg, start(), [7; 32]);
    let a = net.add_agent(dinner::alice("a2acp.io"), [1; 32], [11; 32]);
    let b = net.add_agent(dinner::bob("a2acp.io"), [2; 32], [22; 32]);
    net.connect(a);
    net.settle();
    assert!(net.nodes[a].agent.is_online());
    // Bob's source is a second one while Alice's window is open: refused.
    let sent_before = net.nodes[b].frames_sent;
    net.connect(b);
    net.settle();
    net.run_for(Duration::from_secs(30));
    let r = net.nodes[b].agent.link_refusal().cloned().expect("refused");
    assert_eq!(r.code, crate::link::ErrorCode::RegistrationLimited);
    assert_eq!(r.retry_after, Some(REGISTRATION_RETRY));
    assert!(!net.nodes[b].is_connected());
    assert_eq!(net.nodes[b].frames_sent - sent_before, 1);
    // After the window, the next connection registers.
    net.run_for(Duration::from_secs(61));
    net.connect(b);
    net.settle();
    assert!(net.nodes[b].agent.link_refusal().is_none());
    assert!(net.nodes[b].agent.is_online());
}

#[test]
fn a_thread_to_an_unknown_address_is_declined_with_a_notification() {
    let (mut net, a, b) = net();
    let nobody = Address::new("nobody", "a2acp.io").unwrap();
    net.command(
        a,
        Command::StartThread {
            to: nobody.clone(),
            intent: dinner_intent("normal"),
            context: dinner::context(),
        },
    );
    let id = net.nodes[a].agent.threads().keys().last().cloned().unwrap();
    assert_eq!(
        net.nodes[a].agent.first_packet(&id),
        Some(FirstPacket::Waiting)
    );
    net.settle();
    assert_eq!(
        net.nodes[a].agent.first_packet(&id),
        Some(FirstPacket::Refused(
            crate::link::ErrorCode::UnknownRecipient
        ))
    );
    assert_eq!(state(&net, a, &id), ThreadState::Declined);
    let n = net.nodes[a]
        .notifications
        .iter()
        .find(|n| n.kind == NotifyKind::Declined)
        .expect("declined notification");
    assert_eq!(n.thread_id.as_deref(), Some(id.as_str()));
    assert!(n.text.contains("agent:nobody@a2acp.io"), "{}", n.text);
    // A thread to a known agent: its first packet is accepted.
    let ok = start_dinner(&mut net, a, b, "normal");
    assert_eq!(
        net.nodes[a].agent.first_packet(&ok),
        Some(FirstPacket::Accepted)
    );
}

#[test]
fn a_packet_parked_by_the_relay_is_not_overtaken_by_a_later_one_of_its_thread() {
    // Swarm `--domains 3` seed 6: a resolution refused `overflow` was parked; the
    // recipient's queue drained, the user's next answer went at once and was accepted,
    // and the parked resolution arrived after it, taken for the newer one.
    let (mut net, a, b, id) = dinner_on_a_relay_queueing_one_per_thread();
    net.disconnect(b);
    reply(&mut net, a, &id, "one");
    reply(&mut net, a, &id, "two");
    net.settle();
    // Bob takes "one"; "two" is still parked when alice's user adds "three".
    net.connect(b);
    net.settle();
    reply(&mut net, a, &id, "three");
    net.settle();
    net.run_for(Duration::from_secs(600));
    net.settle();
    let notes: Vec<String> = net.nodes[b]
        .agent
        .thread(&id)
        .unwrap()
        .history
        .iter()
        .filter(|h| !h.outgoing)
        .filter_map(|h| {
            ["one", "two", "three"]
                .into_iter()
                .find(|n| h.json.contains(&format!("\"note\":\"{n}\"")))
                .map(str::to_string)
        })
        .collect();
    assert_eq!(notes, ["one", "two", "three"], "{}", net.render(None));
}
