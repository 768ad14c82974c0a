//! An agent given several URLs of its domain's relay (its doors) moves to the next one
//! when the one it dials is unreachable, and when its connection drops — over real
//! sockets, on tokio and on smol (relay and agent). The doors are one relay's data
//! started behind two addresses in turn, so every door knows the agent's registration.

use a2acp_runtime::config::{AgentFile, RelayUrls};
use a2acp_runtime::control::Request;
use a2acp_runtime::scripted::dinner_configs;
use a2acp_tests::*;

per_runtime!(agent_moves_to_the_next_door);

/// The door the agent says it is on, when it is online.
async fn online_at(h: &impl Agent) -> Option<String> {
    let s = h.ask(Request::Status).await.data;
    match s["online"].as_bool() {
        Some(true) => s["door"].as_str().map(str::to_string),
        _ => None,
    }
}

async fn agent_moves_to_the_next_door(rt: Runtime) {
    let dir = tmp();
    let data = dir.path().join("relay");
    let (listen_a, listen_b) = (free_addr(), free_addr());

    // Relay A registers the agent, then stops.
    let a = rt.relay(&listen_a, &data).await;
    let url_a = a.url();
    let (alice_cfg, _) = dinner_configs("localhost").unwrap();
    let home = init_home(&dir.path().join("alice"), &alice_cfg, &url_a);
    let alice = rt.agent(&home, "alice", None);
    wait_online(&alice).await;
    assert_eq!(online_at(&alice).await.as_deref(), Some(url_a.as_str()));
    alice.stop().await;
    a.stop(true).await;

    // B serves A's data (same domain, same registrations) at another address; A's door
    // is dead now. The agent tries A first, fails, and ends up on B.
    let b = rt.relay(&listen_b, &data).await;
    let url_b = b.url();
    assert_ne!(url_a, url_b);
    edit_config(&home, |f| {
        f.relay = RelayUrls::new(vec![url_a.clone(), url_b.clone()]).unwrap();
    });
    let text = std::fs::read_to_string(home.config()).unwrap();
    assert!(text.contains("relay = ["), "{text}");
    let doors = AgentFile::load(&home.config()).unwrap().relay;
    assert_eq!(doors.urls(), [url_a.clone(), url_b.clone()]);
    let alice = rt.agent(&home, "alice", None);
    let at = eventually(15, "the agent online through B", || async {
        online_at(&alice).await
    })
    .await;
    assert_eq!(at, url_b);

    // B dies (no close frames) and A comes back on the same data: the link drops and
    // the agent moves on to the other door.
    b.stop(false).await;
    let a = rt.relay(&listen_a, &data).await;
    eventually(15, "the agent online through A again", || async {
        online_at(&alice).await.filter(|d| *d == url_a).map(|_| ())
    })
    .await;
    alice.stop().await;
    a.stop(true).await;
}
