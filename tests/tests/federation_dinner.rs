//! The dinner across two domains over real loopback sockets, on both runtimes: Alice on
//! a.example's relay and Bob on b.example's, each relay serving TLS with a leaf of one
//! private CA and knowing the other through its static route (`--federate`); the relays
//! discover each other (`/.well-known/a2acp`), link over `wss://`, and the agents complete
//! the spec's dinner as if they shared one relay.

use a2acp_core::Address;
use a2acp_runtime::scripted::{dinner_configs, ScriptedUser};
use a2acp_tests::federation::{linked_relays, LinkedRelays};
use a2acp_tests::*;

#[path = "common/pki.rs"]
mod pki;
use pki::{pki, trust};

async fn dinner_across_domains(rt: Runtime) {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let LinkedRelays {
        a,
        b,
        data_a: da,
        data_b: db,
        url_a: ea,
        url_b: eb,
    } = linked_relays(rt, dir.path(), &p.cert, &p.key, &p.ca).await;
    let (alice_cfg, _) = dinner_configs("a.example").unwrap();
    let (_, mut bob_cfg) = dinner_configs("b.example").unwrap();
    // Bob's friend is Alice on her own domain.
    let o = bob_cfg
        .overrides
        .remove(&Address::new("alice", "b.example").unwrap())
        .unwrap();
    bob_cfg.overrides.insert(alice_cfg.address.clone(), o);
    let bob_addr = bob_cfg.address.clone();
    let ha = init_home(&dir.path().join("alice"), &alice_cfg, &ea);
    let hb = init_home(&dir.path().join("bob"), &bob_cfg, &eb);
    trust(&ha, &p.ca);
    trust(&hb, &p.ca);
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;

    dinner_completes(&alice, &bob, &hb, bob_addr).await;
    let (sa, sb) = (a.snapshot().await.stats, b.snapshot().await.stats);
    println!(
        "a.example: {:?}\nb.example: {:?}",
        sa.federation, sb.federation
    );
    // Four packets each way, each handed over once and none left queued.
    for (st, other) in [(&sa, "b.example"), (&sb, "a.example")] {
        let d = &st.federation[other];
        assert_eq!((d.forwarded, d.received, d.queued), (4, 4, 0), "{d:?}");
        assert!(d.link_out, "{d:?}");
    }
    // What the operator sees (`a2acp relay-status wss://… --ca …`): the same figures,
    // read from /metrics over TLS.
    let (url, ca) = (ea.clone(), p.ca.clone());
    let text = tokio::task::spawn_blocking(move || {
        a2acp_runtime::cli::RelayStatusArgs {
            url,
            ca: Some(ca),
            json: false,
        }
        .run()
    })
    .await
    .unwrap()
    .expect("relay-status");
    println!("{text}");
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("b.example"))
        .unwrap_or_else(|| panic!("no b.example row: {text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    // domain, link out, links in, queued, forwarded, received…
    assert_eq!(
        [cols[1], cols[3], cols[4], cols[5]],
        ["up", "0", "4", "4"],
        "{text}"
    );

    alice.stop().await;
    bob.stop().await;
    a.stop(true).await;
    b.stop(true).await;
    assert_no_dinner_plaintext(&da);
    assert_no_dinner_plaintext(&db);
}

per_runtime!(dinner_across_domains);
