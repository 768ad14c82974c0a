//! The honest pair of agents that negotiates the spec's dinner during an attack.

use std::time::{Duration, Instant};

use a2acp_core::agent::AgentConfig;
use a2acp_core::crypto::IdentityKey;
use a2acp_core::Address;
use a2acp_runtime::control::{Request, StatusInfo, ThreadSummary};
use a2acp_runtime::scripted::{dinner_configs, next_friday, start_dinner, ScriptedUser};
use a2acp_runtime::store::Store;

use crate::agent::{AgentHandle, RunOptions};
use crate::bench::BenchError;

/// How long an honest pair of agents took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Negotiation {
    /// From starting both agents to both authenticated (connection, registration).
    pub online: Duration,
    /// From Alice's request to the dinner completed on both sides.
    pub dinner: Duration,
}

fn pair_configs(n: u32) -> Result<(AgentConfig, AgentConfig), BenchError> {
    let (mut alice, mut bob) = dinner_configs("localhost").map_err(|e| e.to_string())?;
    let a = Address::new(&format!("alice{n}"), "localhost").map_err(|e| e.to_string())?;
    let b = Address::new(&format!("bob{n}"), "localhost").map_err(|e| e.to_string())?;
    if let Some(o) = bob.overrides.remove(&alice.address) {
        bob.overrides.insert(a.clone(), o);
    }
    alice.address = a;
    bob.address = b;
    Ok((alice, bob))
}

async fn status(h: &AgentHandle) -> Result<StatusInfo, BenchError> {
    let r = h
        .request(Request::Status)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_value(r.data).map_err(|e| e.to_string())
}

async fn threads(h: &AgentHandle) -> Result<Vec<ThreadSummary>, BenchError> {
    let r = h
        .request(Request::Threads)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_value(r.data).map_err(|e| e.to_string())
}

/// A new pair of agents (`alice{n}`, `bob{n}`, in memory, scripted users) connects to
/// the relay at `url`, registers, and negotiates the spec's dinner to completion on both
/// sides: how long each part took (an error past `limit`).
pub async fn negotiate(url: &str, n: u32, limit: Duration) -> Result<Negotiation, BenchError> {
    let (alice, bob) = pair_configs(n)?;
    let bob_addr = bob.address.clone();
    let t0 = Instant::now();
    let mut agents = Vec::new();
    for (i, (name, cfg)) in [("alice", alice), ("bob", bob)].into_iter().enumerate() {
        let mut seed = [0u8; 32];
        seed[..4].copy_from_slice(&n.to_le_bytes());
        seed[4] = i as u8;
        seed[5] = 0xa7;
        let (host, first, _) = a2acp_runtime::agent_host::AgentHost::start(
            cfg,
            IdentityKey::from_seed(seed),
            Store::in_memory().map_err(|e| e.to_string())?,
            a2acp_runtime::now(),
        )
        .map_err(|e| e.to_string())?;
        let mut o = RunOptions::new(url, name);
        o.auto = Some(ScriptedUser::dinner());
        o.backoff_min = Duration::from_millis(50);
        o.backoff_max = Duration::from_millis(400);
        agents.push(crate::agent::spawn(host, first, o).map_err(|e| e.to_string())?);
    }
    let run = async {
        for h in &agents {
            while !status(h).await?.online {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let online = t0.elapsed();
        let t1 = Instant::now();
        agents[0]
            .command(start_dinner(bob_addr, &next_friday(a2acp_runtime::now())))
            .await
            .map_err(|e| e.to_string())?;
        loop {
            let mut done = 0;
            for h in &agents {
                let t = threads(h).await?;
                if t.iter()
                    .any(|t| matches!(t.state.as_str(), "DECLINED" | "EXPIRED"))
                {
                    return Err(format!("the dinner ended {t:?}"));
                }
                if !t.is_empty() && t.iter().all(|t| t.state == "COMPLETED") {
                    done += 1;
                }
            }
            if done == agents.len() {
                return Ok(Negotiation {
                    online,
                    dinner: t1.elapsed(),
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let r = tokio::time::timeout(limit, run).await.unwrap_or_else(|_| {
        Err(format!(
            "the honest negotiation did not complete in {} s",
            limit.as_secs()
        ))
    });
    for h in agents {
        let _ = h.stop().await;
    }
    r
}
