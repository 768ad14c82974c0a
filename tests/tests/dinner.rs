//! The dinner negotiation of the spec (§4–§9) over real loopback WebSockets, each agent
//! with its own SQLite file, for every pairing of relay and agent runtimes (tokio relay +
//! tokio agents, smol relay + tokio agents, tokio relay + smol agents, smol + smol) — and
//! each relay's `/healthz` and `/metrics` on the same port.

use std::io::{Read, Write};

use a2acp_runtime::agent_host::Effect;
use a2acp_runtime::daemon::AgentEvent;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::*;

/// `GET path` on the relay's port, the whole answer.
fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Alice and Bob (agents on `agents`) negotiate dinner through a relay on `relay_rt`.
async fn dinner(relay_rt: Runtime, agents: Runtime) {
    let dir = tmp();
    let relay = relay_rt
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let bob_addr = bob_cfg.address.clone();
    let alice = agents.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = agents.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let mut events = alice.subscribe();

    dinner_completes(&alice, &bob, &hb, bob_addr).await;

    let mut shown = 0;
    while let Some(e) = events.try_next() {
        if matches!(e, AgentEvent::Effect(Effect::Prompt(_))) {
            shown += 1;
        }
    }
    assert_eq!(shown, 2, "one consent prompt, one resolution prompt");
    assert_eq!(relay.snapshot().await.stats.routed_total, 8);
    eventually(5, "everything acknowledged", || async {
        (relay.snapshot().await.stats.queued == 0).then_some(())
    })
    .await;

    let addr = relay.addr();
    let (health, metrics) = tokio::task::spawn_blocking(move || {
        (http_get(addr, "/healthz"), http_get(addr, "/metrics"))
    })
    .await
    .unwrap();
    assert_health_and_metrics(&health, &metrics, 8);

    alice.stop().await;
    bob.stop().await;
    // A stopped agent removes its control socket.
    assert!(!ha.socket().exists());
    assert!(!hb.socket().exists());
    relay.stop(true).await;
    assert_no_dinner_plaintext(&dir.path().join("relay"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dinner_tokio_agents_through_tokio_relay() {
    dinner(Runtime::Tokio, Runtime::Tokio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dinner_tokio_agents_through_smol_relay() {
    dinner(Runtime::Smol, Runtime::Tokio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dinner_smol_agents_through_tokio_relay() {
    dinner(Runtime::Tokio, Runtime::Smol).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dinner_smol_agents_through_smol_relay() {
    dinner(Runtime::Smol, Runtime::Smol).await;
}
