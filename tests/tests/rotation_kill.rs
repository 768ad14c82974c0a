//! kill -9 around `a2acp keys rotate`, over real sockets, on tokio and on smol: Alice's
//! agent and the relay run in child processes (this test binary re-executed, running only
//! `child_agent` or `child_relay`), so every kill is a real `kill -9`; Bob's agent runs in
//! the test's process. All of it happens in the middle of the spec's dinner (Alice's
//! consent prompt open), and at each crash point the rotation finishes after the restart,
//! `identity.key` ends as the new key, Bob re-pins it without an alert, and the dinner
//! completes with every packet once:
//!
//! 1. the agent killed before the relay installed the statement (the relay was down: it
//!    cannot have seen it): restarted, the agent hands `identity.next.key` over again;
//! 2. the agent killed after the relay installed it but before the agent heard so (made
//!    deterministic by installing the statement at the relay by hand, as the dead agent's
//!    last frame would have, with `identity.next.key` written as `keys rotate` writes it);
//! 3. the relay killed during the rotation (stopped with SIGSTOP after the agent wrote its
//!    new key and sent `rotate`, then killed, so it never read it): restarted, the agent
//!    sends `rotate` again and the waiting `keys rotate` gets `rotated`;
//! 4. the agent killed right after `keys rotate` answered.

use std::path::Path;
use std::process::Stdio;

use a2acp_core::agent::{NotifyKind, PromptKind};
use a2acp_core::link::{ClientFrame, RelayFrame};
use a2acp_core::rotation::RotationStatement;
use a2acp_runtime::control::{KeyInfo, Request};
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::federation::free_port;
use a2acp_tests::*;

const AGENT_ENV: &str = "A2ACP_TEST_ROTATION_AGENT";
const RELAY_ENV: &str = "A2ACP_TEST_ROTATION_RELAY";

fn child_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Not a test by itself: the body of the child agent (`runtime|home`).
#[test]
fn child_agent() {
    let Some(spec) = std::env::var_os(AGENT_ENV) else {
        return;
    };
    let spec = spec.into_string().unwrap();
    let (rt, home) = spec.split_once('|').expect("runtime|home");
    let runtime = Runtime::from_name(rt).expect("a known runtime");
    let home = Home::new(home);
    child_runtime().block_on(async {
        let h = runtime.agent(&home, "alice", None);
        let _ = h.wait().await;
    });
}

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
    child_runtime().block_on(async {
        let _r = runtime
            .relay(&format!("127.0.0.1:{port}"), Path::new(data))
            .await;
        std::future::pending::<()>().await;
    });
}

/// A child process the test starts, pauses and kills.
struct Child {
    env: &'static str,
    spec: String,
    proc: Option<KilledOnDrop>,
}

impl Child {
    fn start(&mut self) {
        assert!(self.proc.is_none());
        let name = if self.env == AGENT_ENV {
            "child_agent"
        } else {
            "child_relay"
        };
        self.proc = Some(spawn_child_test(name, self.env, &self.spec, Stdio::null()));
    }

    /// kill -9, and reaped.
    fn kill(&mut self) {
        let mut c = self.proc.take().expect("running");
        c.0.kill().unwrap();
        c.0.wait().unwrap();
    }

    /// SIGSTOP: the process stays, reads nothing, answers nothing.
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

async fn child_online(home: &Home) {
    eventually(30, "Alice's agent online", || async {
        let r = try_ctl(home, Request::Status).await?;
        r.data["online"].as_bool().unwrap_or(false).then_some(())
    })
    .await;
}

async fn key_show(home: &Home, address: &a2acp_core::Address) -> Option<KeyInfo> {
    let r = try_ctl(
        home,
        Request::KeyShow {
            address: address.to_string(),
        },
    )
    .await?;
    serde_json::from_value(r.data).ok()
}

/// The key in `home`'s `identity.key` (base64url), once `identity.next.key` is gone.
fn settled_key(home: &Home) -> Option<String> {
    if home.next_key().exists() {
        return None;
    }
    Some(
        a2acp_runtime::keys::load(&home.key())
            .ok()?
            .public()
            .to_string(),
    )
}

/// Waits until Alice's rotation settled on `key` (the identity file, her agent's key) and
/// Bob pinned it, with no changed key waiting at Bob.
async fn settled_on(ha: &Home, hb: &Home, alice: &a2acp_core::Address, key: &str, step: &str) {
    eventually(
        30,
        &format!("{step}: identity.key is the new key"),
        || async { (settled_key(ha)? == key).then_some(()) },
    )
    .await;
    eventually(30, &format!("{step}: Bob re-pinned"), || async {
        let k = key_show(hb, alice).await?;
        (k.pinned_key.as_deref() == Some(key) && k.changed_key.is_none()).then_some(())
    })
    .await;
}

per_runtime!(sigkill_around_a_rotation);

async fn sigkill_around_a_rotation(rt: Runtime) {
    let dir = tmp();
    let port = free_port();
    let mut relay = Child {
        env: RELAY_ENV,
        spec: format!(
            "{}|{port}|{}",
            rt.name(),
            dir.path().join("relay").display()
        ),
        proc: None,
    };
    relay.start();
    wait_listening(port, 20).await;
    let url = format!("ws://127.0.0.1:{port}");
    let DinnerHomes {
        alice_cfg,
        bob_cfg,
        alice: ha,
        bob: hb,
    } = dinner_homes(dir.path(), &url);
    let a_addr = alice_cfg.address.clone();
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&bob).await;
    let mut alice = Child {
        env: AGENT_ENV,
        spec: format!("{}|{}", rt.name(), ha.dir().display()),
        proc: None,
    };
    alice.start();
    child_online(&ha).await;

    // The dinner, up to Alice's consent prompt.
    start_dinner_by_control(&ha, bob_cfg.address.clone()).await;
    let consent = eventually(20, "the consent prompt", || async {
        let r = try_ctl(&ha, Request::Prompts).await?;
        let v: Vec<a2acp_runtime::control::PromptEntry> = serde_json::from_value(r.data).ok()?;
        v.into_iter().map(|p| p.prompt).next()
    })
    .await;
    assert!(matches!(consent.kind, PromptKind::Consent { .. }));
    let key0 = settled_key(&ha).unwrap();

    // 1. The relay is down (killed): `keys rotate` writes the new key, cannot send it;
    //    Alice's agent is killed; both come back and the rotation finishes.
    relay.kill();
    let ha2 = ha.clone();
    let waiting = tokio::spawn(async move { try_ctl(&ha2, Request::KeyRotate).await });
    eventually(10, "identity.next.key written", || async {
        ha.next_key().exists().then_some(())
    })
    .await;
    let key1 = a2acp_runtime::keys::load(&ha.next_key())
        .unwrap()
        .public()
        .to_string();
    assert_ne!(key1, key0);
    alice.kill();
    waiting.abort();
    assert_eq!(
        a2acp_runtime::keys::load(&ha.key())
            .unwrap()
            .public()
            .to_string(),
        key0,
        "the old key stays until the relay installed the new one"
    );
    relay.start();
    wait_listening(port, 20).await;
    alice.start();
    child_online(&ha).await;
    settled_on(
        &ha,
        &hb,
        &a_addr,
        &key1,
        "killed before the relay installed it",
    )
    .await;

    // 2. Installed at the relay, not heard by the agent (killed first).
    alice.kill();
    let old = a2acp_runtime::keys::load(&ha.key()).unwrap();
    let new = a2acp_runtime::keys::create_next(&ha.next_key()).unwrap();
    let key2 = new.public().to_string();
    {
        let mut raw = Raw::connect(&url, a_addr.as_str(), 0).await;
        raw.identity = old.clone();
        let f = raw.register_frame();
        raw.send(&f).await;
        assert!(matches!(raw.recv().await, RelayFrame::AuthOk { .. }));
        raw.send(&ClientFrame::Rotate {
            statement: RotationStatement::sign(&a_addr, &old, &new, 2),
        })
        .await;
        assert!(
            matches!(raw.recv().await, RelayFrame::Rotated { seq: 2, .. }),
            "the relay installs rotation 2"
        );
    }
    alice.start();
    child_online(&ha).await;
    settled_on(&ha, &hb, &a_addr, &key2, "killed before it heard the relay").await;

    // 3. The relay stopped, then killed, while the rotation is under way.
    relay.pause();
    let ha2 = ha.clone();
    let waiting = tokio::spawn(async move { try_ctl(&ha2, Request::KeyRotate).await });
    eventually(10, "identity.next.key written", || async {
        ha.next_key().exists().then_some(())
    })
    .await;
    let key3 = a2acp_runtime::keys::load(&ha.next_key())
        .unwrap()
        .public()
        .to_string();
    relay.kill();
    relay.start();
    wait_listening(port, 20).await;
    let r = waiting.await.unwrap().expect("keys rotate answered");
    assert!(r.ok, "{r:?}");
    assert_eq!(r.data["state"], "rotated", "{r:?}");
    assert_eq!(r.data["seq"], 3, "{r:?}");
    assert_eq!(r.data["key"].as_str(), Some(key3.as_str()));
    settled_on(&ha, &hb, &a_addr, &key3, "the relay killed during it").await;

    // 4. Killed right after `keys rotate` answered.
    child_online(&ha).await;
    let r = try_ctl(&ha, Request::KeyRotate).await.unwrap();
    assert_eq!(r.data["state"], "rotated", "{r:?}");
    alice.kill();
    let key4 = r.data["key"].as_str().unwrap().to_string();
    assert_eq!(settled_key(&ha).as_deref(), Some(key4.as_str()));
    alice.start();
    child_online(&ha).await;
    settled_on(&ha, &hb, &a_addr, &key4, "killed after it answered").await;

    // The dinner completes under the fourth key, every packet once on each side.
    let r = try_ctl(
        &ha,
        Request::Answer {
            prompt_id: consent.id,
            args: ScriptedUser::dinner().answer_args(&consent),
        },
    )
    .await
    .unwrap();
    assert!(r.ok, "{r:?}");
    let resolution = eventually(30, "the resolution prompt", || async {
        let r = try_ctl(&ha, Request::Prompts).await?;
        let v: Vec<a2acp_runtime::control::PromptEntry> = serde_json::from_value(r.data).ok()?;
        v.into_iter()
            .map(|p| p.prompt)
            .find(|p| matches!(p.kind, PromptKind::Resolution { .. }))
    })
    .await;
    let r = try_ctl(
        &ha,
        Request::Answer {
            prompt_id: resolution.id,
            args: vec!["confirm".into()],
        },
    )
    .await
    .unwrap();
    assert!(r.ok, "{r:?}");
    wait_state(&bob, "COMPLETED", 30).await;
    let id = eventually(30, "Alice completed", || async {
        let r = try_ctl(&ha, Request::Threads).await?;
        (r.data[0]["state"] == "COMPLETED").then(|| r.data[0]["id"].as_str().unwrap().to_string())
    })
    .await;
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] != "thread_state")
            .map(|p| p["packet_id"].as_str().unwrap().to_string())
            .collect()
    };
    let set = |v: &[String]| v.iter().cloned().collect::<std::collections::BTreeSet<_>>();
    let pa = try_ctl(&ha, Request::Thread { id: id.clone() })
        .await
        .unwrap()
        .data;
    let pb = ctl(&hb, Request::Thread { id }).await.data;
    // (The scripted Bob may ask once more after a reconnection: at least the dinner's
    // eight packets, each once, the same on both sides.)
    let (ia, ib) = (ids(&pa), ids(&pb));
    assert!(ia.len() >= 8, "{pa}");
    assert_eq!(set(&ia).len(), ia.len(), "a packet handled twice: {ia:?}");
    assert_eq!(set(&ib).len(), ib.len(), "a packet handled twice: {ib:?}");
    assert_eq!(set(&ia), set(&ib));
    // Bob was never alerted: four rotations, each re-pinned from its statement.
    let r = ctl(&hb, Request::Notifications { all: true }).await;
    let notes: Vec<a2acp_runtime::control::NotificationEntry> =
        serde_json::from_value(r.data).unwrap();
    assert!(
        !notes
            .iter()
            .any(|n| n.notification.kind == NotifyKind::Security),
        "{notes:?}"
    );
    alice.kill();
    bob.stop().await;
    relay.kill();
}
