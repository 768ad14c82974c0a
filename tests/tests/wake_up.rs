//! Wake-ups for offline agents (spec §13.2), over real sockets on both runtimes: Bob's
//! agent gives its relay a wake-up endpoint (`wake_up` in its config.toml), goes offline,
//! Alice's agent sends him a thread: the relay POSTs one wake-up — the fixed body, nothing
//! of the packet — to a real HTTP receiver, and Bob gets the thread when he comes back.
//! Hostile: endpoints at 127.0.0.1 and 10.0.0.1 are refused by a relay that does not
//! allow private addresses (Bob is told); an endpoint that accepts and never answers does
//! not slow routing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2acp_core::agent::AgentEvent as Core;
use a2acp_core::relay::{RelayConfig, WakeUpConfig};
use a2acp_runtime::agent_host::Effect;
use a2acp_runtime::daemon::AgentEvent;
use a2acp_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A real HTTP server on loopback that answers 200 to every request and records each
/// request's first line and body.
struct Receiver {
    url: String,
    seen: Arc<Mutex<Vec<(String, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receiver(answer: bool) -> Receiver {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/up/bob-7f3c", l.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut c, _)) = l.accept().await else {
                return;
            };
            let s = s.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, body) = loop {
                    let Ok(n) = c.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if body.len() >= len {
                            break (head.to_string(), body[..len].to_string());
                        }
                    }
                };
                if !answer {
                    // Accepts, reads, and never answers.
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    return;
                }
                let first = head.lines().next().unwrap_or("").to_string();
                s.lock().unwrap().push((first, body));
                let _ = c
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    Receiver { url, seen, task }
}

fn allow_private() -> RelayConfig {
    RelayConfig {
        wake_up: WakeUpConfig {
            allow_private: true,
            interval: Duration::from_secs(60),
            ..WakeUpConfig::default()
        },
        ..RelayConfig::default()
    }
}

/// Waits for the agent's `wake_up_set` (or its refusal); the endpoint kept.
async fn wake_up_answer(events: &mut Events) -> Result<Option<String>, String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(AgentEvent::Effect(Effect::Audit(r)))) =
            tokio::time::timeout(Duration::from_millis(200), events.next()).await
        {
            match r.event {
                Core::WakeUpSet { endpoint } => return Ok(endpoint),
                Core::RelayError {
                    code: a2acp_core::link::ErrorCode::WakeUpRefused,
                    message,
                } => return Err(message),
                _ => {}
            }
        }
    }
    panic!("no answer to the wake-up endpoint");
}

per_runtime!(an_offline_agent_is_woken_and_gets_its_thread_when_it_comes_back);

async fn an_offline_agent_is_woken_and_gets_its_thread_when_it_comes_back(rt: Runtime) {
    let dir = tmp();
    let relay = rt
        .relay_with("127.0.0.1:0", &dir.path().join("relay"), allow_private())
        .await;
    let r = receiver(true).await;
    let homes = dinner_homes(dir.path(), &relay.url());
    let url = r.url.clone();
    edit_config(&homes.bob, |f| f.wake_up = Some(url));
    let bob = rt.agent(&homes.bob, "bob", None);
    let mut events = bob.subscribe();
    assert_eq!(wake_up_answer(&mut events).await, Ok(Some(r.url.clone())));
    bob.stop().await;
    let alice = rt.agent(&homes.alice, "alice", None);
    wait_online(&alice).await;
    alice
        .tell(a2acp_runtime::scripted::start_dinner(
            homes.bob_cfg.address.clone(),
            &a2acp_runtime::scripted::next_friday(a2acp_runtime::now()),
        ))
        .await;
    let seen = eventually(20, "the wake-up", || async {
        let s = r.seen.lock().unwrap().clone();
        (!s.is_empty()).then_some(s)
    })
    .await;
    assert_eq!(seen.len(), 1, "once per interval: {seen:?}");
    assert!(seen[0].0.starts_with("POST /up/bob-7f3c "), "{seen:?}");
    assert_eq!(seen[0].1, "something is waiting");
    // Bob comes back (woken), and the thread is there.
    let bob = rt.agent(&homes.bob, "bob", None);
    let threads = eventually(20, "Bob's thread", || async {
        let t = threads(&bob).await;
        (!t.is_empty()).then_some(t)
    })
    .await;
    assert_eq!(threads.len(), 1);
    bob.stop().await;
    alice.stop().await;
    relay.stop(true).await;
}

per_runtime!(endpoints_on_the_relays_own_network_are_refused_and_a_dead_one_slows_nothing);

async fn endpoints_on_the_relays_own_network_are_refused_and_a_dead_one_slows_nothing(rt: Runtime) {
    let dir = tmp();
    // A relay as operators run it: private addresses refused.
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let homes = dinner_homes(dir.path(), &relay.url());
    for bad in ["https://127.0.0.1/up", "https://10.0.0.1/up"] {
        edit_config(&homes.bob, |f| f.wake_up = Some(bad.into()));
        let bob = rt.agent(&homes.bob, "bob", None);
        let mut events = bob.subscribe();
        let answer = wake_up_answer(&mut events).await;
        assert!(
            matches!(&answer, Err(m) if m.contains("not a public address")),
            "{bad}: {answer:?}"
        );
        bob.stop().await;
    }
    relay.stop(true).await;

    // An endpoint that accepts and never answers: routing to the offline agent goes on
    // at full speed, and the relay keeps serving.
    let dir = tmp();
    let mut every_packet = allow_private();
    every_packet.wake_up.interval = Duration::ZERO;
    let relay = rt
        .relay_with("127.0.0.1:0", &dir.path().join("relay"), every_packet)
        .await;
    let dead = receiver(false).await;
    let homes = dinner_homes(dir.path(), &relay.url());
    let url = dead.url.clone();
    edit_config(&homes.bob, |f| f.wake_up = Some(url));
    let bob = rt.agent(&homes.bob, "bob", None);
    let mut events = bob.subscribe();
    assert!(wake_up_answer(&mut events).await.is_ok());
    bob.stop().await;
    let alice = rt.agent(&homes.alice, "alice", None);
    wait_online(&alice).await;
    let t = Instant::now();
    // Every packet asks for a wake-up (no interval): the two senders hang on the dead
    // endpoint, the rest wait in their bounded queue or are dropped.
    for i in 0..20 {
        alice
            .tell(a2acp_runtime::scripted::start_dinner(
                homes.bob_cfg.address.clone(),
                &format!("2026-12-{:02}", 1 + i),
            ))
            .await;
    }
    eventually(20, "twenty packets queued for Bob", || async {
        (relay.snapshot().await.stats.queued >= 20).then_some(())
    })
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "routing waited for the dead endpoint: {:?}",
        t.elapsed()
    );
    alice.stop().await;
    relay.stop(true).await;
}
