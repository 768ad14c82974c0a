//! A second connection of the same agent closes the first (spec §13.2 "last connect
//! wins"); the first stays offline instead of fighting back.

use a2acp_runtime::scripted::dinner_configs;
use a2acp_tests::*;
use a2acp_tokio::agent::AgentEvent;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_connection_closes_the_first() {
    let dir = tmp();
    let relay = relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let (alice_cfg, _) = dinner_configs("localhost").unwrap();
    let h1 = init_home(&dir.path().join("laptop"), &alice_cfg, &relay.url());
    // The same identity on a second device (its own database).
    let h2 = a2acp_runtime::home::Home::new(dir.path().join("phone"));
    std::fs::create_dir_all(h2.dir()).unwrap();
    std::fs::copy(h1.key(), h2.key()).unwrap();
    write_config(&h2, &alice_cfg, &relay.url());

    let first = run_agent(&h1, "laptop", None);
    wait_online(&first).await;
    let mut events = first.subscribe();
    let second = run_agent(&h2, "phone", None);
    wait_online(&second).await;
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            match events.recv().await {
                Ok(AgentEvent::Replaced) => return true,
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return false,
            }
        }
    })
    .await;
    assert_eq!(got, Ok(true), "the first connection is replaced");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!online(&first).await, "the first stays offline");
    assert!(online(&second).await, "the second keeps the connection");
    let s = relay.snapshot().await.unwrap();
    assert_eq!(s.stats.authenticated, 1);
    first.stop().await.unwrap();
    second.stop().await.unwrap();
    relay.stop(true).await.unwrap();
}
