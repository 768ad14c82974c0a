//! Hostile clients against the real `a2acp relay` process, under `ulimit -n 256`: each
//! attack must leave `/healthz` answering and an honest two-agent negotiation completing
//! during it, and the relay's descriptors and memory back near their baseline after it
//! (the shared harness: `a2acp_tokio::bench_attack`, also `a2acp bench attack`).
//!
//! Linux only: the harness reads the relay's descriptors, memory and CPU from `/proc`,
//! and the attackers use source addresses of 127.0.0.0/8 besides 127.0.0.1.
#![cfg(target_os = "linux")]

use std::path::Path;

use a2acp_tokio::bench_attack::{self, Attack};

const RELAY: &str = env!("CARGO_BIN_EXE_a2acp");

async fn attack(a: Attack) {
    if let Err(e) = bench_attack::check_attack(Path::new(RELAY), a).await {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bytes() {
    attack(Attack::Garbage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris() {
    attack(Attack::Slowloris).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_beyond_the_fd_limit() {
    attack(Attack::HalfOpen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_with_fin_beyond_the_fd_limit() {
    attack(Attack::HalfOpenFin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flood_from_one_source() {
    attack(Attack::IpFlood).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_deadline_fires_over_a_real_socket() {
    let r = bench_attack::check_auth_deadline(Path::new(RELAY)).await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_refuse_make_room_and_the_deadline_closes() {
    let r = bench_attack::check_caps_and_deadline(Path::new(RELAY)).await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_frame_flood() {
    attack(Attack::JunkFlood).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_flood() {
    attack(Attack::PingFlood).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_flood() {
    attack(Attack::RegistrationFlood).await;
}
