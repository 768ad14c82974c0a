//! The wall time of `a2acp keys rotate` over real loopback sockets, printed: from the
//! control request to the relay's `rotated` (the command's answer), and to the peer's
//! re-pin of the new key, for Alice in the middle of the spec's dinner with Bob (both
//! agents and the relay on tokio, in this process). Several rounds; median and worst.
//!
//! `cargo bench -p a2acp-tests --bench key_rotation` (`ROTATION_BENCH_ROUNDS=N`).

use std::time::{Duration, Instant};

use a2acp_runtime::control::{KeyInfo, Request};
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::*;

fn main() {
    let rounds: usize = std::env::var("ROTATION_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tmp();
        let relay = Runtime::Tokio
            .relay(&free_addr(), &dir.path().join("relay"))
            .await;
        let DinnerHomes {
            alice_cfg,
            bob_cfg,
            alice: ha,
            bob: hb,
        } = dinner_homes(dir.path(), &relay.url());
        let alice = Runtime::Tokio.agent(&ha, "alice", None);
        let bob = Runtime::Tokio.agent(&hb, "bob", Some(ScriptedUser::dinner()));
        wait_online(&alice).await;
        wait_online(&bob).await;
        start_dinner_until_consent(&alice, bob_cfg.address.clone()).await;
        let mut answered = Vec::new();
        let mut repinned = Vec::new();
        for _ in 0..rounds {
            wait_online(&alice).await;
            let t0 = Instant::now();
            let r = ctl(&ha, Request::KeyRotate).await;
            assert_eq!(r.data["state"], "rotated", "{r:?}");
            answered.push(t0.elapsed());
            let key = r.data["key"].as_str().unwrap().to_string();
            loop {
                let k: KeyInfo = serde_json::from_value(
                    ctl(
                        &hb,
                        Request::KeyShow {
                            address: alice_cfg.address.to_string(),
                        },
                    )
                    .await
                    .data,
                )
                .unwrap();
                if k.pinned_key.as_deref() == Some(key.as_str()) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            repinned.push(t0.elapsed());
        }
        let show = |name: &str, v: &mut Vec<Duration>| {
            v.sort();
            println!(
                "{name}: median {:.1} ms, worst {:.1} ms ({} rotations)",
                v[v.len() / 2].as_secs_f64() * 1e3,
                v[v.len() - 1].as_secs_f64() * 1e3,
                v.len()
            );
        };
        println!("keys rotate over loopback WebSockets (tokio relay and agents, one open thread with the peer):");
        show("  keys rotate to the relay's `rotated` (the command's answer)", &mut answered);
        show("  keys rotate to the peer's re-pin (its `keys show`)", &mut repinned);
        alice.stop().await;
        bob.stop().await;
        relay.stop(true).await;
    });
}
