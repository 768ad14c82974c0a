//! A second connection of the same agent closes the first (spec §13.2 "last connect
//! wins"); the first stays offline instead of fighting back — on tokio and on smol.

use a2acp_runtime::daemon::AgentEvent;
use a2acp_runtime::scripted::dinner_configs;
use a2acp_tests::*;

per_runtime!(second_connection_closes_the_first);

async fn second_connection_closes_the_first(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let (alice_cfg, _) = dinner_configs("localhost").unwrap();
    let h1 = init_home(&dir.path().join("laptop"), &alice_cfg, &relay.url());
    // The same identity on a second device (its own database).
    let h2 = a2acp_runtime::home::Home::new(dir.path().join("phone"));
    std::fs::create_dir_all(h2.dir()).unwrap();
    std::fs::copy(h1.key(), h2.key()).unwrap();
    write_config(&h2, &alice_cfg, &relay.url());

    let first = rt.agent(&h1, "laptop", None);
    wait_online(&first).await;
    let mut events = first.subscribe();
    let second = rt.agent(&h2, "phone", None);
    wait_online(&second).await;
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            match events.next().await {
                Some(AgentEvent::Replaced) => return true,
                Some(_) => {}
                None => return false,
            }
        }
    })
    .await;
    assert_eq!(got, Ok(true), "the first connection is replaced");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!online(&first).await, "the first stays offline");
    assert!(online(&second).await, "the second keeps the connection");
    let s = relay.snapshot().await;
    assert_eq!(s.stats.authenticated, 1);
    first.stop().await;
    second.stop().await;
    // A stopped agent has removed its control socket.
    assert!(!h1.socket().exists() && !h2.socket().exists());
    relay.stop(true).await;
}
