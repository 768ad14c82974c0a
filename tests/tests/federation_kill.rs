//! kill -9 of either federating relay mid-thread, over real loopback sockets, on both
//! runtimes: Alice (a.example) and Bob (b.example) are in the spec's dinner when a relay
//! is killed with SIGKILL and restarted on its data directory and port. The thread
//! completes; both agents hold the same eight packets, each once: nothing lost, nothing
//! handed to an agent's logic twice.
//!
//! The relays run in child processes (this test binary re-executed with
//! `A2ACP_TEST_FED_RELAY` set, running only `child_relay`), so the kill is a real
//! `kill -9`; the agents run in the test's process.
//!
//! - The sender's relay: b.example's relay is killed first, so that Alice's answer waits in
//!   a.example's outbound queue (accepted, not handed over); then a.example's relay is
//!   killed with it there, restarted, and b.example's after it.
//! - The recipient's relay: b.example's relay is killed while Alice answers, and restarted.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use a2acp_core::crypto::IdentityKey;
use a2acp_core::relay::federation::FederationConfig;
use a2acp_core::relay::RelayConfig;
use a2acp_runtime::control::Request;
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::federation::{dinner_across, federating_relay, federation, free_port};
use a2acp_tests::*;

#[path = "common/pki.rs"]
#[allow(dead_code)]
mod pki;
use pki::pki;

/// What the child relay is: `runtime|domain|port|data|cert|key|ca|route-domain|route-url`.
const CHILD_ENV: &str = "A2ACP_TEST_FED_RELAY";

/// Not a test by itself: the body of a child relay process.
#[test]
fn child_relay() {
    let Some(spec) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let spec = spec.into_string().unwrap();
    let f: Vec<&str> = spec.split('|').collect();
    let [rt, domain, port, data, cert, key, ca, rdomain, rurl] = f[..] else {
        panic!("bad child spec {spec}");
    };
    let runtime = Runtime::from_name(rt).expect("a known runtime");
    let (data, cert, key, ca) = (
        PathBuf::from(data),
        PathBuf::from(cert),
        PathBuf::from(key),
        PathBuf::from(ca),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let relay = RelayConfig {
            federation: Some(FederationConfig {
                retry_base: Duration::from_millis(100),
                retry_max: Duration::from_millis(500),
                // (The key is replaced by the one in the relay's data directory.)
                ..FederationConfig::new(IdentityKey::from_seed([7; 32]))
            }),
            ..RelayConfig::default()
        };
        let _r = federating_relay(
            runtime,
            &format!("127.0.0.1:{port}"),
            &data,
            domain,
            &cert,
            &key,
            federation(&data, domain, &[(rdomain, rurl.to_string())], &ca),
            relay,
        )
        .await;
        // Until killed.
        std::future::pending::<()>().await;
    });
}

/// One federating relay of the test, as a child process it can kill.
struct ChildRelay {
    spec: String,
    port: u16,
    child: Option<KilledOnDrop>,
}

impl ChildRelay {
    #[allow(clippy::too_many_arguments)]
    fn new(
        rt: Runtime,
        domain: &str,
        port: u16,
        data: &Path,
        pki: &pki::Pki,
        rdomain: &str,
        rport: u16,
    ) -> ChildRelay {
        let spec = [
            rt.name().to_string(),
            domain.to_string(),
            port.to_string(),
            data.display().to_string(),
            pki.cert.display().to_string(),
            pki.key.display().to_string(),
            pki.ca.display().to_string(),
            rdomain.to_string(),
            format!("wss://127.0.0.1:{rport}"),
        ]
        .join("|");
        ChildRelay {
            spec,
            port,
            child: None,
        }
    }

    /// Starts it and waits until its port accepts connections.
    async fn start(&mut self) {
        assert!(self.child.is_none());
        self.child = Some(spawn_child_test(
            "child_relay",
            CHILD_ENV,
            &self.spec,
            Stdio::null(),
        ));
        wait_listening(self.port, 20).await;
    }

    /// kill -9, and reaped.
    fn kill(&mut self) {
        let mut c = self.child.take().expect("running");
        c.0.kill().unwrap();
        c.0.wait().unwrap();
    }

    fn url(&self) -> String {
        format!("wss://127.0.0.1:{}", self.port)
    }
}

async fn outbox(home: &Home) -> u64 {
    ctl(home, Request::Status).await.data["outbox"]
        .as_u64()
        .unwrap_or(u64::MAX)
}

/// Which relay is killed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Victim {
    Sender,
    Recipient,
}

async fn killed_mid_thread(rt: Runtime, victim: Victim) {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    // Both ports are named before either relay listens (each one's route names the other,
    // and a restart reuses its port).
    let (pa, pb) = (free_port(), free_port());
    let (da, db) = (dir.path().join("ra"), dir.path().join("rb"));
    let mut a = ChildRelay::new(rt, "a.example", pa, &da, &p, "b.example", pb);
    let mut b = ChildRelay::new(rt, "b.example", pb, &db, &p, "a.example", pa);
    a.start().await;
    b.start().await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_across(dir.path(), &a.url(), &b.url(), &p.ca);
    // Alice answers by hand (through the control socket); Bob is scripted.
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    // Bob's request for context crossed from b.example to a.example.
    let consent = start_dinner_until_consent(&alice, bob_cfg.address.clone()).await;

    b.kill();
    eventually(10, "Bob notices", || async {
        (!online(&bob).await).then_some(())
    })
    .await;
    // Alice answers: a.example's relay accepts her packet and cannot hand it over.
    answer(
        &ha,
        consent.id,
        &ScriptedUser::dinner().answer_args(&consent),
    )
    .await;
    eventually(10, "Alice's answer accepted by her relay", || async {
        (outbox(&ha).await == 0).then_some(())
    })
    .await;
    if victim == Victim::Sender {
        // Killed with the answer in its outbound queue.
        a.kill();
        eventually(10, "Alice notices", || async {
            (!online(&alice).await).then_some(())
        })
        .await;
        a.start().await;
        wait_online(&alice).await;
        // a.example's relay dials b.example's in vain for a while.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    b.start().await;
    wait_online(&bob).await;

    // Nothing lost, nothing twice.
    dinner_ends_once_each(&alice, &ha, &bob, &hb).await;
    for (h, who) in [(&ha, "Alice"), (&hb, "Bob")] {
        assert_eq!(outbox(h).await, 0, "{who}'s outbox");
    }
    alice.stop().await;
    bob.stop().await;
    a.kill();
    b.kill();
}

async fn sender_relay_killed_with_its_outbound_queue(rt: Runtime) {
    killed_mid_thread(rt, Victim::Sender).await
}

async fn recipient_relay_killed_mid_thread(rt: Runtime) {
    killed_mid_thread(rt, Victim::Recipient).await
}

per_runtime!(
    sender_relay_killed_with_its_outbound_queue,
    recipient_relay_killed_mid_thread
);
