//! kill -9 of the relay around `a2acp agent recover`, on tokio and on smol: the relay runs
//! in a child process (this test binary re-executed, running only `child_relay`), so each
//! kill is a real `kill -9`.
//!
//! 1. The relay stopped (SIGSTOP) while the new device connects, then killed: the
//!    recovery fails as "unreachable" and nothing is written on the new device.
//! 2. The relay killed right after the new device's statement was sent (the new key staged
//!    as `agent recover` stages it, the statement sent by a raw client, the relay killed
//!    before the device reads an answer): installed or not, the same command run again
//!    after the restart completes the recovery onto the staged key, and the agent runs on
//!    it.
//!
//! And, against a relay that drops the connection after the statement without answering:
//! the staged key is kept (nothing else written), and the next run finishes.

use std::path::Path;
use std::process::Stdio;

use a2acp_core::crypto::IdentityKey;
use a2acp_core::link::{ClientFrame, RelayFrame};
use a2acp_core::recovery::{recovery_key_from_seed, RecoveryStatement};
use a2acp_core::Address;
use a2acp_runtime::agent_host::AgentHost;
use a2acp_runtime::control::{Request, StatusInfo};
use a2acp_runtime::home::Home;
use a2acp_runtime::recovery::{self, RecoverError, Recovered};
use a2acp_runtime::store::Durability;
use a2acp_tests::federation::free_port;
use a2acp_tests::*;

const RELAY_ENV: &str = "A2ACP_TEST_RECOVERY_RELAY";

/// Not a test by itself: the body of the child relay (`runtime|port|data`).
#[test]
fn child_relay() {
    let Some(spec) = std::env::var_os(RELAY_ENV) else {
        return;
    };
    let spec = spec.into_string().unwrap();
    let f: Vec<&str> = spec.split('|').collect();
    let [rt, port, data] = f[..] else {
        panic!("bad child spec {spec}");
    };
    let runtime = Runtime::from_name(rt).expect("a known runtime");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let _r = runtime
                .relay(&format!("127.0.0.1:{port}"), Path::new(data))
                .await;
            std::future::pending::<()>().await;
        });
}

/// The child relay.
struct ChildRelay {
    spec: String,
    port: u16,
    proc: Option<KilledOnDrop>,
}

impl ChildRelay {
    async fn start(&mut self) {
        assert!(self.proc.is_none());
        self.proc = Some(spawn_child_test(
            "child_relay",
            RELAY_ENV,
            &self.spec,
            Stdio::null(),
        ));
        wait_listening(self.port, 20).await;
    }

    fn kill(&mut self) {
        let mut c = self.proc.take().expect("running");
        c.0.kill().unwrap();
        c.0.wait().unwrap();
    }

    fn pause(&self) {
        let pid = self.proc.as_ref().expect("running").0.id();
        let ok = std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }
}

async fn recover(
    rt: Runtime,
    home: Home,
    address: Address,
    words: String,
    url: String,
) -> Result<Recovered, RecoverError> {
    let relay = Some(url.as_str().into());
    match rt {
        Runtime::Tokio => {
            a2acp_tokio::recovery::recover(&home, address.as_str(), &words, relay, None).await
        }
        Runtime::Smol => {
            a2acp_smol::recovery::recover(&home, address.as_str(), &words, relay, None).await
        }
    }
}

per_runtime!(sigkill_of_the_relay_around_a_recovery);

async fn sigkill_of_the_relay_around_a_recovery(rt: Runtime) {
    let dir = tmp();
    let port = free_port();
    let mut relay = ChildRelay {
        spec: format!(
            "{}|{port}|{}",
            rt.name(),
            dir.path().join("relay").display()
        ),
        port,
        proc: None,
    };
    relay.start().await;
    let url = format!("ws://127.0.0.1:{port}");
    let DinnerHomes {
        alice_cfg,
        alice: ha,
        ..
    } = dinner_homes(dir.path(), &url);
    let a_addr = alice_cfg.address.clone();
    let seed = [42u8; 32];
    let phrase = recovery::to_words(&seed);
    let rk = recovery_key_from_seed(seed);
    {
        let mut opened = AgentHost::open_home(&ha, Durability::Normal).unwrap();
        recovery::bind(&mut opened.host, rk.public().to_bytes()).unwrap();
    }
    let alice = rt.agent(&ha, "alice", None);
    let old = eventually(15, "the recovery key bound", || async {
        let s: StatusInfo = serde_json::from_value(alice.ask(Request::Status).await.data).ok()?;
        s.recovery
            .as_ref()
            .is_some_and(|r| r.bound)
            .then_some(s.key)
    })
    .await;
    alice.stop().await;
    std::fs::remove_dir_all(ha.dir()).unwrap();
    let hn = Home::new(dir.path().join("alice-new"));

    // 1. The relay stopped while the new device connects, then killed.
    relay.pause();
    let attempt = tokio::spawn(recover(
        rt,
        hn.clone(),
        a_addr.clone(),
        phrase.clone(),
        url.clone(),
    ));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    relay.kill();
    let e = attempt.await.unwrap().unwrap_err();
    assert_eq!(e.reason(), "unreachable", "{e}");
    assert!(!hn.dir().exists(), "nothing written on the new device");

    // 2. Restarted; the statement of a staged key sent, the relay killed at once.
    relay.start().await;
    std::fs::create_dir_all(hn.dir()).unwrap();
    let staged: IdentityKey = a2acp_runtime::keys::create_next(&hn.recover_key()).unwrap();
    {
        let mut raw = Raw::connect(&url, a_addr.as_str(), 0).await;
        raw.send(&ClientFrame::RecoverStart {
            address: a_addr.clone(),
        })
        .await;
        let RelayFrame::RecoverInfo { key, .. } = raw.recv().await else {
            panic!("recover_info");
        };
        assert_eq!(a2acp_core::encoding::b64_encode(&key), old);
        raw.send(&ClientFrame::Recover {
            statement: RecoveryStatement::sign(&a_addr, &key, &staged, &rk),
        })
        .await;
        relay.kill();
    }
    relay.start().await;
    let r = recover(rt, hn.clone(), a_addr.clone(), phrase.clone(), url.clone())
        .await
        .unwrap();
    assert_eq!(r.key, staged.public().to_string(), "the staged key is used");
    assert!(!hn.recover_key().exists());
    assert_eq!(
        a2acp_runtime::keys::load(&hn.key())
            .unwrap()
            .public()
            .to_string(),
        r.key
    );

    // The address works on the new key after one more restart of the relay.
    relay.kill();
    relay.start().await;
    let alice = rt.agent(&hn, "alice", None);
    let s = eventually(
        15,
        "the new device online, its recovery key bound",
        || async {
            let s: StatusInfo =
                serde_json::from_value(alice.ask(Request::Status).await.data).ok()?;
            (s.online && s.recovery.as_ref().is_some_and(|r| r.bound)).then_some(s)
        },
    )
    .await;
    assert_eq!(s.key, r.key);
    alice.stop().await;
    relay.kill();
}

/// A relay that answers `recover_start` with `key` (or, when `key` is `None`, with the key
/// staged at `staged`), and drops the connection without answering the statement.
async fn cut_after_the_statement(
    listener: tokio::net::TcpListener,
    address: Address,
    key: Option<[u8; 32]>,
    staged: std::path::PathBuf,
) {
    use async_tungstenite::tungstenite::Message;
    use futures_util::StreamExt;
    let (tcp, _) = listener.accept().await.unwrap();
    let mut ws = async_tungstenite::tokio::accept_async(tcp).await.unwrap();
    let Some(Ok(Message::Text(t))) = ws.next().await else {
        panic!("recover_start");
    };
    assert!(matches!(
        ClientFrame::from_bytes(t.as_bytes()),
        Ok(ClientFrame::RecoverStart { .. })
    ));
    let key = key.unwrap_or_else(|| {
        a2acp_runtime::keys::load(&staged)
            .unwrap()
            .public()
            .to_bytes()
    });
    let info = RelayFrame::RecoverInfo {
        address,
        key,
        binding_seq: 1,
    };
    let text = String::from_utf8(info.to_bytes()).unwrap();
    ws.send(Message::Text(text.into())).await.unwrap();
    // The statement (if any) is read, never answered.
    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), ws.next()).await;
}

per_runtime!(a_cut_after_the_statement_keeps_the_staged_key_and_the_next_run_finishes);

/// The connection drops after the statement was sent: the relay may have installed it,
/// so the staged key stays (and nothing else is written); the same command run again
/// finds the relay on the staged key and finishes.
async fn a_cut_after_the_statement_keeps_the_staged_key_and_the_next_run_finishes(rt: Runtime) {
    let dir = tmp();
    let a_addr = Address::parse("agent:alice@localhost").unwrap();
    let phrase = recovery::to_words(&[42; 32]);
    let hn = Home::new(dir.path().join("alice-new"));
    let old = IdentityKey::from_seed([1; 32]).public().to_bytes();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let fake = tokio::spawn(cut_after_the_statement(
        listener,
        a_addr.clone(),
        Some(old),
        hn.recover_key(),
    ));
    let e = recover(rt, hn.clone(), a_addr.clone(), phrase.clone(), url)
        .await
        .unwrap_err();
    fake.await.unwrap();
    assert_eq!(e.reason(), "unanswered", "{e}");
    assert!(e.to_string().contains("run the same command again"), "{e}");
    assert!(hn.recover_key().exists(), "the staged key is kept");
    assert!(!hn.config().exists() && !hn.key().exists(), "nothing else");
    let staged = a2acp_runtime::keys::load(&hn.recover_key()).unwrap();

    // Run again: the relay (this one says so) holds the staged key; it finishes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let fake = tokio::spawn(cut_after_the_statement(
        listener,
        a_addr.clone(),
        None,
        hn.recover_key(),
    ));
    let r = recover(rt, hn.clone(), a_addr.clone(), phrase, url)
        .await
        .unwrap();
    fake.await.unwrap();
    assert!(r.already, "{r:?}");
    assert_eq!(r.key, staged.public().to_string());
    assert!(!hn.recover_key().exists());
    assert_eq!(
        a2acp_runtime::keys::load(&hn.key())
            .unwrap()
            .public()
            .to_string(),
        r.key
    );
    assert!(hn.config().exists());
}
