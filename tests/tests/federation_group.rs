//! A group thread (§10) across two domains over real loopback sockets, on both runtimes:
//! Alice (a.example) coordinates a game night with Bob on b.example's relay and Charlie on
//! her own, so one leg crosses the federation link and the other stays on a.example's
//! relay. Every leg completes on both sides, every member holds the same resolution, and
//! each relay handed over exactly the packets of the remote leg, none left queued.

use a2acp_core::agent::PromptKind;
use a2acp_runtime::control::{GroupDetail, PromptEntry, Recipients, Request, ThreadDetail};
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::game_night::{self, Weekend};
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::federation::{linked_relays, LinkedRelays};
use a2acp_tests::*;

#[path = "common/pki.rs"]
mod pki;
use pki::{pki, trust};

async fn detail(home: &Home, id: &str) -> ThreadDetail {
    let r = ctl(home, Request::Thread { id: id.into() }).await;
    assert!(r.ok, "{r:?}");
    serde_json::from_value(r.data).unwrap()
}

async fn a_group_across_two_domains_completes_and_agrees(rt: Runtime) {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let LinkedRelays {
        a, b, url_a, url_b, ..
    } = linked_relays(rt, dir.path(), &p.cert, &p.key, &p.ca).await;
    let w = Weekend::after(a2acp_runtime::now());
    let (alice_cfg, bob_cfg, charlie_cfg) = (
        game_night::alice("a.example").unwrap(),
        game_night::bob("b.example", &w).unwrap(),
        game_night::charlie("a.example", &w).unwrap(),
    );
    let (bob_addr, charlie_addr) = (bob_cfg.address.to_string(), charlie_cfg.address.to_string());
    let ha = init_home(&dir.path().join("alice"), &alice_cfg, &url_a);
    let hb = init_home(&dir.path().join("bob"), &bob_cfg, &url_b);
    let hc = init_home(&dir.path().join("charlie"), &charlie_cfg, &url_a);
    for h in [&ha, &hb, &hc] {
        trust(h, &p.ca);
    }
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::game_night()));
    let charlie = rt.agent(&hc, "charlie", Some(ScriptedUser::game_night()));
    for x in [&alice, &bob, &charlie] {
        wait_online(x).await;
    }

    let intent = game_night::intent();
    let r = ctl(
        &ha,
        Request::StartThread {
            to: Recipients::from_list(vec![bob_addr.clone(), charlie_addr.clone()]),
            category: intent.category,
            summary: "Game night across two domains".into(),
            context: Some(game_night::context(&w)),
            urgent: false,
            quorum: None,
            sequential: false,
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let gid = r.data["group_id"].as_str().unwrap().to_string();
    let legs = r.data["threads"].as_object().unwrap().clone();
    assert_eq!(legs.len(), 2, "{r:?}");
    for leg in legs.values() {
        // The remote leg is accepted like the local one: a.example's relay holds it.
        assert_eq!(r.data["relay"][leg.as_str().unwrap()], "accepted", "{r:?}");
    }
    let (bob_leg, charlie_leg) = (
        legs[&bob_addr].as_str().unwrap().to_string(),
        legs[&charlie_addr].as_str().unwrap().to_string(),
    );

    // Alice's prompt for the group's proposal comes once both have shared and confirmed.
    let prompt = eventually(30, "Alice's prompt for the group", || async {
        let r = ctl(&ha, Request::Prompts).await;
        let v: Vec<PromptEntry> = serde_json::from_value(r.data).unwrap();
        v.into_iter().find(|p| p.prompt.thread_id == gid)
    })
    .await;
    assert!(matches!(prompt.prompt.kind, PromptKind::Resolution { .. }));
    eventually(30, "both participants confirmed", || async {
        let r = ctl(&ha, Request::Thread { id: gid.clone() }).await;
        let d: GroupDetail = serde_json::from_value(r.data).ok()?;
        (d.proposal.as_ref()?.confirmed.len() == 2).then_some(())
    })
    .await;
    answer(&ha, prompt.prompt.id, &["confirm"]).await;

    let ta = wait_state(&alice, "COMPLETED", 30).await;
    let tb = wait_state(&bob, "COMPLETED", 30).await;
    let tc = wait_state(&charlie, "COMPLETED", 30).await;
    assert_eq!(ta.len(), 3, "the group's row and its two legs: {ta:?}");
    assert_eq!((tb.len(), tc.len()), (1, 1), "{tb:?} {tc:?}");
    assert_eq!(
        (tb[0].id.as_str(), tc[0].id.as_str()),
        (bob_leg.as_str(), charlie_leg.as_str())
    );
    let r = ctl(&ha, Request::Thread { id: gid.clone() }).await;
    let g: GroupDetail = serde_json::from_value(r.data).unwrap();
    let pr = g.proposal.as_ref().unwrap();
    assert!(pr.reached && g.closed, "{g:?}");
    assert_eq!(pr.confirmed.len(), 3, "{g:?}");

    // Every member agrees: the resolution each side of each leg holds is one and the same.
    let mut seen = Vec::new();
    for (home, leg) in [
        (&ha, &bob_leg),
        (&hb, &bob_leg),
        (&ha, &charlie_leg),
        (&hc, &charlie_leg),
    ] {
        let d = detail(home, leg).await;
        // The proposal (what was agreed), without the leg's own tally of answers.
        let res = d.resolution.clone().expect("a resolution on every leg");
        let res = res.split("; answers so far").next().unwrap().to_string();
        let ids: Vec<&str> = d.history.iter().map(|p| p.packet_id.as_str()).collect();
        let unique: std::collections::BTreeSet<_> = ids.iter().collect();
        assert_eq!(ids.len(), unique.len(), "a packet twice on {leg}: {ids:?}");
        seen.push((leg.clone(), res, d.history.len()));
    }
    println!("{seen:#?}");
    assert!(seen.windows(2).all(|w| w[0].1 == w[1].1), "{seen:#?}");
    // Both sides of a leg hold the same packets.
    assert_eq!(seen[0].2, seen[1].2, "{seen:#?}");
    assert_eq!(seen[2].2, seen[3].2, "{seen:#?}");

    // Only the remote leg crossed the link, each of its packets once; nothing left queued.
    let (sa, sb) = (a.snapshot().await.stats, b.snapshot().await.stats);
    println!(
        "a.example: {:?}\nb.example: {:?}",
        sa.federation, sb.federation
    );
    let (fa, fb) = (&sa.federation["b.example"], &sb.federation["a.example"]);
    assert_eq!(fa.forwarded, fb.received, "{fa:?} {fb:?}");
    assert_eq!(fb.forwarded, fa.received, "{fa:?} {fb:?}");
    assert_eq!((fa.queued, fb.queued), (0, 0), "{fa:?} {fb:?}");
    assert!(fa.forwarded > 0 && fb.forwarded > 0, "{fa:?} {fb:?}");
    assert_eq!((fa.lies, fb.lies, fa.refused, fb.refused), (0, 0, 0, 0));

    for x in [alice, bob, charlie] {
        x.stop().await;
    }
    a.stop(true).await;
    b.stop(true).await;
}

per_runtime!(a_group_across_two_domains_completes_and_agrees);
