//! A group thread (§10) over real loopback sockets, on tokio and on smol: Alice's agent
//! starts one with Bob and Charlie through its control socket (`a2acp thread start --to
//! bob --to charlie`), the participants' users share and confirm, Alice confirms the
//! group's proposal through the control socket, and every leg ends COMPLETED on both
//! sides — with what `threads`, `thread show` and `prompts` say about the group on the
//! way.

use a2acp_core::agent::PromptKind;
use a2acp_runtime::control::{
    render_group, render_thread, render_threads, GroupDetail, PromptEntry, Recipients, Request,
    ThreadDetail, ThreadSummary,
};
use a2acp_runtime::home::Home;
use a2acp_runtime::prompt::render_in;
use a2acp_runtime::scripted::game_night::{self, Weekend};
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::*;

per_runtime!(a_group_thread_started_with_two_to_completes_on_every_leg);
per_runtime!(a_sequential_group_asks_alice_first_then_each_in_turn);

async fn group_detail(home: &Home, id: &str) -> GroupDetail {
    let r = ctl(home, Request::Thread { id: id.into() }).await;
    assert!(r.ok, "{r:?}");
    serde_json::from_value(r.data).unwrap()
}

async fn rows(home: &Home) -> Vec<ThreadSummary> {
    let r = ctl(home, Request::Threads).await;
    assert!(r.ok, "{r:?}");
    serde_json::from_value(r.data).unwrap()
}

fn start(to: Recipients, w: &Weekend, quorum: Option<u32>) -> Request {
    let intent = game_night::intent();
    Request::StartThread {
        to,
        category: intent.category,
        summary: "Game night for 3".into(),
        context: Some(game_night::context(w)),
        urgent: false,
        quorum,
        sequential: false,
    }
}

async fn a_group_thread_started_with_two_to_completes_on_every_leg(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let w = Weekend::after(a2acp_runtime::now());
    let d = "localhost";
    let (alice_cfg, bob_cfg, charlie_cfg) = (
        game_night::alice(d).unwrap(),
        game_night::bob(d, &w).unwrap(),
        game_night::charlie(d, &w).unwrap(),
    );
    let (alice_addr, bob_addr, charlie_addr) = (
        alice_cfg.address.to_string(),
        bob_cfg.address.to_string(),
        charlie_cfg.address.to_string(),
    );
    let ha = init_home(&dir.path().join("alice"), &alice_cfg, &relay.url());
    let hb = init_home(&dir.path().join("bob"), &bob_cfg, &relay.url());
    let hc = init_home(&dir.path().join("charlie"), &charlie_cfg, &relay.url());
    // Alice answers through her control socket; Bob's and Charlie's users share what
    // their agents know and confirm.
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::game_night()));
    let charlie = rt.agent(&hc, "charlie", Some(ScriptedUser::game_night()));
    for a in [&alice, &bob, &charlie] {
        wait_online(a).await;
    }

    // Refused before anything starts: a quorum for a two-party thread, oneself in the list.
    let r = ctl(&ha, start(bob_addr.clone().into(), &w, Some(1))).await;
    assert!(
        !r.ok && r.error.as_deref().unwrap().contains("--quorum"),
        "{r:?}"
    );
    let r = ctl(
        &ha,
        start(
            Recipients::Many(vec![bob_addr.clone(), alice_addr.clone()]),
            &w,
            None,
        ),
    )
    .await;
    assert!(
        !r.ok && r.error.as_deref().unwrap().contains("list only the others"),
        "{r:?}"
    );
    assert!(rows(&ha).await.is_empty());

    // `a2acp thread start --to bob --to charlie`: the answer names the group and its legs,
    // each accepted by the relay.
    let r = ctl(
        &ha,
        start(
            Recipients::from_list(vec![bob_addr.clone(), charlie_addr.clone()]),
            &w,
            None,
        ),
    )
    .await;
    assert!(r.ok, "{r:?}");
    let gid = r.data["group_id"].as_str().unwrap().to_string();
    assert!(gid.starts_with("grp_"), "{gid}");
    let legs = r.data["threads"].as_object().unwrap().clone();
    assert_eq!(legs.len(), 2, "{r:?}");
    let bob_leg = legs[&bob_addr].as_str().unwrap().to_string();
    for leg in legs.values() {
        assert_eq!(r.data["relay"][leg.as_str().unwrap()], "accepted", "{r:?}");
    }
    let text = a2acp_runtime::control::render_group_started(&r.data);
    assert!(
        text.starts_with(&format!("group thread {gid} started")),
        "{text}"
    );

    // Alice's one prompt for the group says it is the group's proposal, to whom.
    let prompt = eventually(30, "Alice's prompt for the group", || async {
        let r = ctl(&ha, Request::Prompts).await;
        let v: Vec<PromptEntry> = serde_json::from_value(r.data).unwrap();
        v.into_iter().find(|p| p.prompt.thread_id == gid)
    })
    .await;
    assert!(matches!(prompt.prompt.kind, PromptKind::Resolution { .. }));
    let g = prompt.group.as_ref().expect("the prompt names its group");
    assert_eq!(g.coordinator, alice_addr);
    let text = render_in(&prompt.prompt, Some(g));
    assert!(
        text.contains(&format!(
            "the group's proposal: your agent proposes to you, bob, charlie (group {gid} of 3)"
        )),
        "{text}"
    );

    // Both participants confirm; Alice's confirmation is the one missing.
    let detail = eventually(30, "both participants confirmed", || async {
        let d = group_detail(&ha, &gid).await;
        (d.proposal.as_ref()?.confirmed.len() == 2).then_some(d)
    })
    .await;
    assert!(detail.summary.is_group());
    let p = detail.proposal.as_ref().unwrap();
    assert_eq!(p.required, 3, "{detail:?}");
    assert_eq!(p.confirmed, vec![bob_addr.clone(), charlie_addr.clone()]);
    assert_eq!(p.mine, None);
    assert_eq!(p.prompt_id, Some(prompt.prompt.id));
    assert_eq!(detail.members.len(), 2);
    for m in &detail.members {
        assert_eq!(m.status, "context_received", "{detail:?}");
        assert_eq!(m.answer.as_deref(), Some("confirmed"), "{detail:?}");
        assert_eq!(m.state, "PROPOSED", "{detail:?}");
    }
    let text = render_group(&detail);
    for part in [
        format!("Group thread {gid} — PROPOSED"),
        "confirmations  2 of 3 needed: bob, charlie".to_string(),
        format!("{bob_addr:<26} context_received   leg {bob_leg} PROPOSED · answered confirmed"),
    ] {
        assert!(text.contains(&part), "{part:?} in\n{text}");
    }

    answer(&ha, prompt.prompt.id, &["confirm"]).await;

    // Every leg completes on both sides; the group's row with them.
    let ta = wait_state(&alice, "COMPLETED", 30).await;
    wait_state(&bob, "COMPLETED", 30).await;
    wait_state(&charlie, "COMPLETED", 30).await;
    assert_eq!(ta.len(), 3, "the group's row and its two legs: {ta:?}");
    assert_eq!(ta.iter().filter(|t| t.is_group()).count(), 1);
    let text = render_threads(&ta);
    assert!(
        text.contains(&format!(
            "{gid:<22} COMPLETED    group: you + 2 other(s)      "
        )),
        "{text}"
    );
    assert!(text.contains(&format!(" ├ {}", ta[1].id)), "{text}");
    assert!(text.contains(&format!(" └ {}", ta[2].id)), "{text}");
    let done = group_detail(&ha, &gid).await;
    let p = done.proposal.as_ref().unwrap();
    assert!(p.reached && done.closed, "{done:?}");
    assert_eq!(p.mine.as_deref(), Some("confirmed"));
    assert_eq!(
        p.confirmed,
        vec![alice_addr.clone(), bob_addr.clone(), charlie_addr.clone()]
    );

    // Bob's side: his leg says whose group it is.
    let tb = rows(&hb).await;
    assert_eq!(tb.len(), 1, "{tb:?}");
    assert_eq!(tb[0].id, bob_leg);
    let text = render_threads(&tb);
    assert!(
        text.contains(&format!(
            "group_scheduling: Game night for 3 (group {gid} of 3, coordinated by alice)"
        )),
        "{text}"
    );
    let r = ctl(
        &hb,
        Request::Thread {
            id: bob_leg.clone(),
        },
    )
    .await;
    let leg: ThreadDetail = serde_json::from_value(r.data).unwrap();
    let g = leg.summary.group.as_ref().expect("a leg names its group");
    assert_eq!(
        (g.group_id.as_str(), g.coordinator.as_str()),
        (gid.as_str(), alice_addr.as_str())
    );
    let text = render_thread(&leg);
    assert!(
        text.contains(&format!(
            "group          part of group {gid} coordinated by {alice_addr} (participants: alice, bob, charlie)"
        )),
        "{text}"
    );

    // Bob names the group: he is pointed at his leg.
    let r = ctl(&hb, Request::Thread { id: gid.clone() }).await;
    assert_eq!(
        r.error.as_deref(),
        Some(format!("group {gid} is coordinated by {alice_addr}; you take part in it on thread {bob_leg} (`a2acp thread show {bob_leg}`)").as_str()),
        "{r:?}"
    );

    // A closed group is not cancelled again; nor does it take new context.
    let r = ctl(&ha, Request::CancelThread { id: gid.clone() }).await;
    assert!(
        !r.ok && r.error.as_deref().unwrap().contains("closed already"),
        "{r:?}"
    );
    let mut c = a2acp_core::packet::Context::new();
    c.insert("day".into(), "Friday".into());
    let r = ctl(
        &ha,
        Request::ReplyThread {
            id: gid.clone(),
            context: c,
        },
    )
    .await;
    assert!(
        !r.ok && r.error.as_deref().unwrap().contains("is a group thread"),
        "{r:?}"
    );

    for a in [alice, bob, charlie] {
        a.stop().await;
    }
    relay.stop(true).await;
}

/// `a2acp thread start --to bob --to charlie --sequential`: Alice is asked first, alone;
/// her confirmation sends the proposal to Bob, then to Charlie, and every leg completes.
async fn a_sequential_group_asks_alice_first_then_each_in_turn(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let w = Weekend::after(a2acp_runtime::now());
    let d = "localhost";
    let (alice_cfg, bob_cfg, charlie_cfg) = (
        game_night::alice(d).unwrap(),
        game_night::bob(d, &w).unwrap(),
        game_night::charlie(d, &w).unwrap(),
    );
    let (alice_addr, bob_addr, charlie_addr) = (
        alice_cfg.address.to_string(),
        bob_cfg.address.to_string(),
        charlie_cfg.address.to_string(),
    );
    let ha = init_home(&dir.path().join("alice"), &alice_cfg, &relay.url());
    let hb = init_home(&dir.path().join("bob"), &bob_cfg, &relay.url());
    let hc = init_home(&dir.path().join("charlie"), &charlie_cfg, &relay.url());
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::game_night()));
    let charlie = rt.agent(&hc, "charlie", Some(ScriptedUser::game_night()));
    for a in [&alice, &bob, &charlie] {
        wait_online(a).await;
    }
    let to = || Recipients::from_list(vec![bob_addr.clone(), charlie_addr.clone()]);

    // A quorum and a sequence cannot be asked together.
    let mut both = start(to(), &w, Some(2));
    if let Request::StartThread { sequential, .. } = &mut both {
        *sequential = true;
    }
    let r = ctl(&ha, both).await;
    assert!(
        !r.ok && r.error.as_deref().unwrap().contains("do not go together"),
        "{r:?}"
    );
    assert!(rows(&ha).await.is_empty());

    let mut req = start(to(), &w, None);
    if let Request::StartThread { sequential, .. } = &mut req {
        *sequential = true;
    }
    let r = ctl(&ha, req).await;
    assert!(r.ok, "{r:?}");
    let gid = r.data["group_id"].as_str().unwrap().to_string();

    // Alice's prompt comes first; nobody else has the proposal yet.
    let prompt = eventually(30, "Alice's prompt for the group", || async {
        let r = ctl(&ha, Request::Prompts).await;
        let v: Vec<PromptEntry> = serde_json::from_value(r.data).unwrap();
        v.into_iter().find(|p| p.prompt.thread_id == gid)
    })
    .await;
    let detail = group_detail(&ha, &gid).await;
    assert!(detail.sequential, "{detail:?}");
    let p = detail.proposal.as_ref().unwrap();
    assert_eq!(p.next.as_deref(), Some(alice_addr.as_str()), "{detail:?}");
    assert!(p.confirmed.is_empty(), "{detail:?}");
    for m in &detail.members {
        assert_eq!(m.state, "NEGOTIATING", "{detail:?}");
    }
    let text = render_group(&detail);
    assert!(text.contains("sequential confirmation"), "{text}");
    assert!(text.contains("asked now      alice"), "{text}");

    answer(&ha, prompt.prompt.id, &["confirm"]).await;

    wait_state(&alice, "COMPLETED", 30).await;
    wait_state(&bob, "COMPLETED", 30).await;
    wait_state(&charlie, "COMPLETED", 30).await;
    let done = group_detail(&ha, &gid).await;
    let p = done.proposal.as_ref().unwrap();
    assert!(p.reached && done.closed, "{done:?}");
    assert_eq!(p.next, None);
    assert_eq!(p.confirmed, vec![alice_addr, bob_addr, charlie_addr]);

    for a in [alice, bob, charlie] {
        a.stop().await;
    }
    relay.stop(true).await;
}

/// `a2acp demo --group`: the game night for four over real sockets completes on every
/// leg, Alice answering one prompt for the group and each participant two (what to share,
/// the proposal), and all four confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_demo_completes_for_all_four() {
    let s = a2acp_tokio::demo::run_group(a2acp_tokio::demo::DemoOptions {
        print: false,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(s.completed, "{s:?}");
    assert_eq!(s.prompts_shown, [1, 2, 2, 2]);
    let legs: Vec<&ThreadSummary> = s
        .threads
        .iter()
        .map(|(_, t)| t)
        .filter(|t| !t.is_group())
        .collect();
    assert_eq!(
        legs.len(),
        6,
        "three legs at Alice's, one at each participant's"
    );
    let g = s.group.expect("the group as Alice's agent shows it");
    let p = g.proposal.expect("the proposal");
    assert!(p.reached && g.closed);
    assert_eq!(p.required, 4);
    let users: Vec<&str> = p
        .confirmed
        .iter()
        .map(|a| a2acp_runtime::control::user_of(a))
        .collect();
    assert_eq!(users, ["alice", "bob", "charlie", "diana"]);
}
