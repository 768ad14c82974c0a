//! The smol binding on its own — no tokio runtime anywhere in the process's path: a smol
//! relay answers `/healthz` and a WebSocket challenge, and two smol agents negotiate the
//! spec's dinner through it over loopback, driven from `smol::block_on`.

use std::time::{Duration, Instant};

use a2acp_core::crypto::IdentityKey;
use a2acp_core::link::RelayFrame;
use a2acp_runtime::agent_host::AgentHost;
use a2acp_runtime::control::{Request, StatusInfo, ThreadSummary};
use a2acp_runtime::daemon::RunOptions;
use a2acp_runtime::relay_service::ServiceConfig;
use a2acp_runtime::scripted::{dinner_configs, next_friday, start_dinner, ScriptedUser};
use a2acp_runtime::store::Store;
use a2acp_smol::agent::AgentHandle;
use futures_util::StreamExt;
use smol::io::{AsyncReadExt, AsyncWriteExt};

async fn until<T>(secs: u64, what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        a2acp_smol::sleep(Duration::from_millis(20)).await;
    }
}

async fn threads(h: &AgentHandle) -> Vec<ThreadSummary> {
    serde_json::from_value(h.request(Request::Threads).await.unwrap().data).unwrap()
}

#[test]
fn relay_answers_health_and_challenge() {
    smol::block_on(async {
        let relay = a2acp_smol::relay::start("127.0.0.1:0", ServiceConfig::default())
            .await
            .unwrap();
        let mut s = smol::net::TcpStream::connect(relay.addr()).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

        let mut ws = a2acp_smol::ws::connect(&relay.url()).await.unwrap();
        let first = ws.next().await.unwrap().unwrap();
        let frame = RelayFrame::from_bytes(first.into_text().unwrap().as_bytes()).unwrap();
        assert!(matches!(frame, RelayFrame::Challenge { .. }), "{frame:?}");
        relay.stop(true).await.unwrap();
    });
}

#[test]
fn dinner_between_smol_agents_through_smol_relay() {
    smol::block_on(async {
        let relay = a2acp_smol::relay::start("127.0.0.1:0", ServiceConfig::default())
            .await
            .unwrap();
        let (alice_cfg, bob_cfg) = dinner_configs("localhost").unwrap();
        let bob_addr = bob_cfg.address.clone();
        let mut agents = Vec::new();
        for (i, (name, cfg)) in [("alice", alice_cfg), ("bob", bob_cfg)]
            .into_iter()
            .enumerate()
        {
            let (host, first, _) = AgentHost::start(
                cfg,
                IdentityKey::from_seed([i as u8 + 1; 32]),
                Store::in_memory().unwrap(),
                a2acp_runtime::now(),
            )
            .unwrap();
            let mut o = RunOptions::new(relay.url(), name);
            o.auto = Some(ScriptedUser::dinner());
            o.backoff_min = Duration::from_millis(50);
            agents.push(a2acp_smol::agent::spawn(host, first, o).unwrap());
        }
        for h in &agents {
            until(15, "agent online", async || {
                let r = h.request(Request::Status).await.unwrap();
                let s: StatusInfo = serde_json::from_value(r.data).unwrap();
                s.online.then_some(())
            })
            .await;
        }
        agents[0]
            .command(start_dinner(bob_addr, &next_friday(a2acp_runtime::now())))
            .await
            .unwrap();
        for h in &agents {
            let t = until(30, "thread completed", async || {
                let t = threads(h).await;
                (!t.is_empty() && t.iter().all(|t| t.state == "COMPLETED")).then_some(t)
            })
            .await;
            assert_eq!(t[0].packets, 8);
        }
        assert_eq!(relay.snapshot().await.unwrap().stats.routed_total, 8);
        for h in agents {
            h.stop().await.unwrap();
        }
        relay.stop(true).await.unwrap();
    });
}
