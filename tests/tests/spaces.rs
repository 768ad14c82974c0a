//! A shared context space (§12) over real loopback sockets, on tokio and on smol: Alice
//! creates one with Bob (write_own_fields) and Charlie (full_write) through her control
//! socket (`a2acp space create`), each writes through their own (`a2acp space set`),
//! Charlie is stopped while the others write and catches up when he runs again, and
//! `space show` and `space history` agree on every agent.

use a2acp_runtime::control::{
    render_space, render_space_history, Request, SpaceFieldLine, SpaceMember, SpaceView,
};
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::game_night::{self, Weekend};
use a2acp_tests::*;
use serde_json::json;

per_runtime!(a_space_is_shared_written_and_caught_up_over_real_sockets);

async fn show(home: &Home, id: &str) -> Option<SpaceView> {
    let r = ctl(
        home,
        Request::SpaceShow {
            id: Some(id.into()),
        },
    )
    .await;
    r.ok.then(|| serde_json::from_value(r.data).unwrap())
}

async fn history(home: &Home, id: &str) -> Vec<SpaceFieldLine> {
    let r = ctl(home, Request::SpaceHistory { id: id.into() }).await;
    assert!(r.ok, "{r:?}");
    serde_json::from_value(r.data).unwrap()
}

fn set(id: &str, field: &str, value: serde_json::Value) -> Request {
    Request::SpaceSet {
        id: id.into(),
        field: field.into(),
        value: Some(value),
        link: None,
        title: None,
    }
}

/// Waits until the space on `home` has `n` updates.
async fn wait_version(home: &Home, id: &str, n: u64) -> SpaceView {
    eventually(30, &format!("space version {n}"), || async {
        show(home, id).await.filter(|s| s.version == n)
    })
    .await
}

async fn a_space_is_shared_written_and_caught_up_over_real_sockets(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let w = Weekend::after(a2acp_runtime::now());
    let d = "localhost";
    let (alice_cfg, bob_cfg, charlie_cfg) = (
        game_night::alice(d).unwrap(),
        game_night::bob(d, &w).unwrap(),
        game_night::charlie(d, &w).unwrap(),
    );
    let (bob_addr, charlie_addr) = (bob_cfg.address.to_string(), charlie_cfg.address.to_string());
    let ha = init_home(&dir.path().join("alice"), &alice_cfg, &relay.url());
    let hb = init_home(&dir.path().join("bob"), &bob_cfg, &relay.url());
    let hc = init_home(&dir.path().join("charlie"), &charlie_cfg, &relay.url());
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", None);
    let charlie = rt.agent(&hc, "charlie", None);
    for a in [&alice, &bob, &charlie] {
        wait_online(a).await;
    }

    // A bad permission is refused before anything is created.
    let r = ctl(
        &ha,
        Request::SpaceCreate {
            name: "Trip".into(),
            participants: vec![SpaceMember {
                address: bob_addr.clone(),
                permission: "admin".into(),
            }],
            fields: None,
        },
    )
    .await;
    assert!(!r.ok, "{r:?}");

    let mut fields = a2acp_core::packet::Context::new();
    fields.insert("destination".into(), json!("Lisbon"));
    let r = ctl(
        &ha,
        Request::SpaceCreate {
            name: "Family trip".into(),
            participants: vec![
                SpaceMember::parse(&format!("{bob_addr}=write_own_fields")).unwrap(),
                SpaceMember::parse(&charlie_addr).unwrap(),
            ],
            fields: Some(fields),
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let created: SpaceView = serde_json::from_value(r.data).unwrap();
    let id = created.space_id.clone();
    assert_eq!(created.participants.len(), 3);
    assert_eq!(created.participants[2].permission, "full_write");

    // Bob and Charlie have it.
    for h in [&hb, &hc] {
        let s = wait_version(h, &id, 1).await;
        assert_eq!(s.fields[0].field, "destination");
        assert_eq!(s.creator, created.creator);
    }

    // Bob writes his own field (`~/`), and may not write a shared one.
    let r = ctl(&hb, set(&id, "~/arrival", json!("Friday 18:00"))).await;
    assert!(r.ok, "{r:?}");
    let r = ctl(&hb, set(&id, "hotel", json!("mine"))).await;
    assert!(
        !r.ok && r.error.as_deref().unwrap_or("").contains("own fields"),
        "{r:?}"
    );
    wait_version(&ha, &id, 2).await;
    wait_version(&hc, &id, 2).await;

    // Charlie stops; Alice and Bob write; Charlie runs again and catches up.
    charlie.stop().await;
    let r = ctl(&ha, set(&id, "hotel", json!("Alfama Suites"))).await;
    assert!(r.ok, "{r:?}");
    let r = ctl(
        &ha,
        Request::SpaceSet {
            id: id.clone(),
            field: "itinerary".into(),
            value: None,
            link: Some("https://drive.example/itinerary.md".into()),
            title: Some("itinerary.md".into()),
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let r = ctl(&hb, set(&id, "~/arrival", json!("Friday 20:00"))).await;
    assert!(r.ok, "{r:?}");
    let on_alice = wait_version(&ha, &id, 5).await;
    let charlie = rt.agent(&hc, "charlie", None);
    wait_online(&charlie).await;
    let on_charlie = wait_version(&hc, &id, 5).await;
    let on_bob = wait_version(&hb, &id, 5).await;
    assert_eq!(on_charlie.fields, on_alice.fields);
    assert_eq!(on_bob.fields, on_alice.fields);
    let text = render_space(&on_charlie);
    assert!(text.contains("hotel = Alfama Suites"), "{text}");
    assert!(
        text.contains("itinerary.md <https://drive.example/itinerary.md>"),
        "{text}"
    );
    assert!(text.contains("arrival = Friday 20:00"), "{text}");

    // The history is the same everywhere: five updates, oldest first.
    let h = history(&ha, &id).await;
    assert_eq!(h.len(), 5);
    assert_eq!(history(&hc, &id).await, h);
    assert!(render_space_history(&h).contains("destination = Lisbon"));

    for a in [alice, bob, charlie] {
        a.stop().await;
    }
    relay.stop(true).await;
}
