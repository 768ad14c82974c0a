//! An agent moves to a new device through its encrypted backup: Alice's agent is backed
//! up while it runs, in the middle of the spec's dinner with her consent prompt open; it
//! stops, the backup is restored into a new home, and the agent run there shows the same
//! prompt again, sends what she answers, and the dinner completes with every packet once
//! on both sides. A wrong passphrase, a truncated or altered file, a backup of a newer
//! format, a file that is no backup and a home that is not empty each get their own error
//! and leave nothing behind.

use std::path::Path;

use a2acp_runtime::backup::{self, BackupError};
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::*;

const PASSPHRASE: &str = "correct horse battery staple";
/// Cheap Argon2id parameters for the tests (the command uses 64 MiB, 3 passes).
const CHEAP: (u32, u32, u32) = (1024, 1, 1);

per_runtime!(a_backup_resumes_the_dinner_on_a_new_device);

async fn a_backup_resumes_the_dinner_on_a_new_device(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay(&free_addr(), &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let consent = start_dinner_until_consent(&alice, bob_cfg.address.clone()).await;

    // Backed up while it runs, then the old device goes away.
    // The agent holds its database: the backup asks it for a copy (what `agent backup`
    // does through the control socket).
    let file = dir.path().join("alice.backup");
    assert!(matches!(
        backup::backup_with(&ha, &file, PASSPHRASE, CHEAP, None),
        Err(BackupError::Running(_))
    ));
    let r = ctl(
        &ha,
        a2acp_runtime::control::Request::Snapshot {
            name: ".agent.db.backup-test".into(),
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let snap = ha.dir().join(".agent.db.backup-test");
    backup::backup_with(&ha, &file, PASSPHRASE, CHEAP, Some(&snap)).unwrap();
    std::fs::remove_file(&snap).unwrap();
    alice.stop().await;

    // The new device.
    let new_home = Home::new(dir.path().join("alice-new"));
    let n = backup::restore(&file, PASSPHRASE, new_home.dir()).unwrap();
    assert!(n >= 3, "{n}");
    let alice = rt.agent(&new_home, "alice", None);
    wait_online(&alice).await;
    // The same prompt, open again.
    let again = eventually(15, "the consent prompt on the new device", || async {
        prompts(&alice)
            .await
            .into_iter()
            .find(|p| p.thread_id == consent.thread_id)
    })
    .await;
    answer(
        &new_home,
        again.id,
        &ScriptedUser::dinner().answer_args(&again),
    )
    .await;
    dinner_ends_once_each(&alice, &new_home, &bob, &hb).await;
    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;
}

/// A home with an agent and a database, and its backup.
fn backed_up(dir: &Path) -> (Home, std::path::PathBuf) {
    let (alice_cfg, _) = a2acp_runtime::scripted::dinner_configs("localhost").unwrap();
    let home = init_home(&dir.join("alice"), &alice_cfg, "ws://127.0.0.1:9");
    let opened = a2acp_runtime::agent_host::AgentHost::open_home(
        &home,
        a2acp_runtime::store::Durability::Normal,
    )
    .unwrap();
    drop(opened);
    let file = dir.join("alice.backup");
    backup::backup_with(&home, &file, PASSPHRASE, CHEAP, None).unwrap();
    (home, file)
}

#[test]
fn a_bad_backup_gets_its_own_error_and_changes_nothing() {
    let dir = tmp();
    let (home, file) = backed_up(dir.path());
    let target = dir.path().join("restored");
    let bytes = std::fs::read(&file).unwrap();
    let variant = |name: &str, b: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, b).unwrap();
        p
    };

    // A passphrase too short is refused before anything is written.
    let weak = dir.path().join("weak.backup");
    assert!(matches!(
        backup::backup_with(&home, &weak, "short", CHEAP, None),
        Err(BackupError::WeakPassphrase)
    ));
    assert!(!weak.exists());

    // The wrong passphrase.
    let e = backup::restore(&file, "not the passphrase at all", &target).unwrap_err();
    assert!(matches!(e, BackupError::CannotOpen(_)), "{e}");
    // Cut short, at the end and inside the header.
    let cut = variant("cut.backup", &bytes[..bytes.len() - 10]);
    assert!(matches!(
        backup::restore(&cut, PASSPHRASE, &target),
        Err(BackupError::CannotOpen(_))
    ));
    let stub = variant("stub.backup", &bytes[..30]);
    assert!(matches!(
        backup::restore(&stub, PASSPHRASE, &target),
        Err(BackupError::Truncated(_))
    ));
    // One byte changed in the content, and in the header (bound as associated data).
    let mut altered = bytes.clone();
    let i = altered.len() / 2;
    altered[i] ^= 1;
    let altered = variant("altered.backup", &altered);
    assert!(matches!(
        backup::restore(&altered, PASSPHRASE, &target),
        Err(BackupError::CannotOpen(_))
    ));
    let mut salted = bytes.clone();
    salted[30] ^= 1;
    let salted = variant("salted.backup", &salted);
    assert!(matches!(
        backup::restore(&salted, PASSPHRASE, &target),
        Err(BackupError::CannotOpen(_))
    ));
    // A newer format; absurd Argon2 parameters; not a backup at all.
    let mut newer = bytes.clone();
    newer[13] = 2;
    let newer = variant("newer.backup", &newer);
    let e = backup::restore(&newer, PASSPHRASE, &target).unwrap_err();
    assert!(matches!(e, BackupError::Newer { version: 2, .. }), "{e}");
    assert!(e.to_string().contains("newer a2acp"), "{e}");
    let mut greedy = bytes.clone();
    greedy[14..18].copy_from_slice(&u32::MAX.to_be_bytes());
    let greedy = variant("greedy.backup", &greedy);
    assert!(matches!(
        backup::restore(&greedy, PASSPHRASE, &target),
        Err(BackupError::Damaged { .. })
    ));
    let toml = variant("config.backup", b"address = \"agent:alice@localhost\"\n");
    assert!(matches!(
        backup::restore(&toml, PASSPHRASE, &target),
        Err(BackupError::NotABackup(_))
    ));
    // None of them left anything.
    assert!(!target.exists());
    assert_eq!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains("restoring"))
            .count(),
        0
    );

    // A home that is not empty is not overwritten.
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("notes.txt"), b"mine").unwrap();
    assert!(matches!(
        backup::restore(&file, PASSPHRASE, &target),
        Err(BackupError::HomeNotEmpty(_))
    ));
    assert_eq!(std::fs::read(target.join("notes.txt")).unwrap(), b"mine");

    // The good one restores the key, the config and the database, byte for byte where
    // they are files.
    let fresh = dir.path().join("fresh");
    backup::restore(&file, PASSPHRASE, &fresh).unwrap();
    let restored = Home::new(&fresh);
    assert_eq!(
        std::fs::read(restored.key()).unwrap(),
        std::fs::read(home.key()).unwrap()
    );
    assert_eq!(
        std::fs::read(restored.config()).unwrap(),
        std::fs::read(home.config()).unwrap()
    );
    assert!(restored.db().exists());
    // Nothing of the plaintext key is in the backup.
    let key = std::fs::read(home.key()).unwrap();
    assert!(!bytes
        .windows(key.len().min(32))
        .any(|w| w == &key[..key.len().min(32)]));
}

per_runtime!(the_old_device_comes_back_and_changes_nothing);

/// After the restore the old device comes back with the state of the backup (the dinner
/// at its consent prompt) while the new one has ended the dinner. It connects last, so the
/// relay gives it the address and tells the new device, which stays offline (no
/// reconnection fight). The stale old device sends its thread summary and even answers its
/// stale prompt: Bob's ended thread does not change. When the new device connects again
/// (the person's choice), the old device is told, stays offline and sends nothing more;
/// the thread ends the same on the new device and on Bob's.
async fn the_old_device_comes_back_and_changes_nothing(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay(&free_addr(), &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let consent = start_dinner_until_consent(&alice, bob_cfg.address.clone()).await;
    let r = ctl(
        &ha,
        a2acp_runtime::control::Request::Snapshot {
            name: ".agent.db.backup-test".into(),
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    let snap = ha.dir().join(".agent.db.backup-test");
    let file = dir.path().join("alice.backup");
    backup::backup_with(&ha, &file, PASSPHRASE, CHEAP, Some(&snap)).unwrap();
    std::fs::remove_file(&snap).unwrap();
    // The old device goes away with the backup's state.
    alice.stop().await;
    let old_db = std::fs::read(ha.db()).unwrap();

    let new_home = Home::new(dir.path().join("alice-new"));
    backup::restore(&file, PASSPHRASE, new_home.dir()).unwrap();
    let new = rt.agent(&new_home, "alice-new", None);
    wait_online(&new).await;
    let again = eventually(15, "the consent prompt on the new device", || async {
        prompts(&new)
            .await
            .into_iter()
            .find(|p| p.thread_id == consent.thread_id)
    })
    .await;
    answer(
        &new_home,
        again.id,
        &ScriptedUser::dinner().answer_args(&again),
    )
    .await;
    let (pa, pb) = dinner_ends_once_each(&new, &new_home, &bob, &hb).await;
    let packets = |v: &serde_json::Value| -> Vec<String> {
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["kind"] != "thread_state")
            .map(|p| p["packet_id"].as_str().unwrap().to_string())
            .collect()
    };
    let bob_thread = || async {
        let t = threads(&bob).await;
        assert_eq!(t.len(), 1);
        let shown = ctl(
            &hb,
            a2acp_runtime::control::Request::Thread {
                id: t[0].id.clone(),
            },
        )
        .await
        .data;
        (t[0].state.clone(), packets(&shown))
    };
    assert_eq!(bob_thread().await, ("COMPLETED".to_string(), packets(&pb)));

    // The old device comes back (its database as the backup left it) and connects last.
    assert_eq!(std::fs::read(ha.db()).unwrap(), old_db);
    let mut new_events = new.subscribe();
    let old = rt.agent(&ha, "alice-old", None);
    wait_online(&old).await;
    replaced(&mut new_events, "the new device is told").await;
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert!(!online(&new).await, "the replaced new device stays offline");
    assert!(online(&old).await);
    // The stale prompt is still open on the old device; answering it sends a stale packet.
    let stale = eventually(15, "the stale prompt on the old device", || async {
        prompts(&old)
            .await
            .into_iter()
            .find(|p| p.thread_id == consent.thread_id)
    })
    .await;
    let r = ctl(
        &ha,
        a2acp_runtime::control::Request::Answer {
            prompt_id: stale.id,
            args: ScriptedUser::dinner().answer_args(&stale),
        },
    )
    .await;
    assert!(r.ok, "{r:?}");
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        bob_thread().await,
        ("COMPLETED".to_string(), packets(&pb)),
        "the stale device changed Bob's ended thread"
    );

    // The person starts the new device again: it connects last, the old one is told and
    // stays offline.
    let mut old_events = old.subscribe();
    new.stop().await;
    let new = rt.agent(&new_home, "alice-new", None);
    wait_online(&new).await;
    replaced(&mut old_events, "the old device is told").await;
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert!(!online(&old).await, "the old device stays offline");
    assert!(online(&new).await);
    let s = relay.snapshot().await;
    assert_eq!(s.stats.authenticated, 2, "the new device and Bob");
    // Every thread ends the same on the new device and on Bob's.
    let t = threads(&new).await;
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].state, "COMPLETED");
    let shown = ctl(
        &new_home,
        a2acp_runtime::control::Request::Thread {
            id: t[0].id.clone(),
        },
    )
    .await
    .data;
    assert_eq!(packets(&shown), packets(&pa));
    assert_eq!(bob_thread().await, ("COMPLETED".to_string(), packets(&pb)));
    old.stop().await;
    new.stop().await;
    bob.stop().await;
    relay.stop(true).await;
}

async fn replaced(events: &mut Events, what: &str) {
    let got = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            match events.next().await {
                Some(a2acp_runtime::daemon::AgentEvent::Replaced) => return true,
                Some(_) => {}
                None => return false,
            }
        }
    })
    .await;
    assert_eq!(got, Ok(true), "{what}");
}

const RESTORE_CHILD_FILE: &str = "A2ACP_TEST_RESTORE_FILE";
const RESTORE_CHILD_HOME: &str = "A2ACP_TEST_RESTORE_HOME";

/// Not a test by itself: the body of the child process that restores and stops, as if
/// frozen, after its first file is written (a marker beside the target says so), until
/// it is killed.
#[test]
fn restore_child() {
    let (Some(file), Some(home)) = (
        std::env::var_os(RESTORE_CHILD_FILE),
        std::env::var_os(RESTORE_CHILD_HOME),
    ) else {
        return;
    };
    let home = std::path::PathBuf::from(home);
    let marker = home.with_extension("paused");
    let _ = backup::restore_with(Path::new(&file), PASSPHRASE, &home, &mut |_| {
        std::fs::write(&marker, b"").unwrap();
        loop {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    });
}

per_runtime!(a_restore_killed_mid_write_leaves_nothing_that_runs);

/// `kill -9` of a restore after it wrote its first file: the target home does not exist,
/// what the restore left beside it is not an agent's home (no identity key, no config),
/// and a second restore succeeds, removes the leftover and gives a home whose agent runs.
async fn a_restore_killed_mid_write_leaves_nothing_that_runs(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay(&free_addr(), &dir.path().join("relay")).await;
    let (alice_cfg, _) = a2acp_runtime::scripted::dinner_configs("localhost").unwrap();
    let home = init_home(&dir.path().join("alice"), &alice_cfg, &relay.url());
    drop(
        a2acp_runtime::agent_host::AgentHost::open_home(
            &home,
            a2acp_runtime::store::Durability::Normal,
        )
        .unwrap(),
    );
    let file = dir.path().join("alice.backup");
    backup::backup_with(&home, &file, PASSPHRASE, CHEAP, None).unwrap();

    let target = dir.path().join("alice-new");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "restore_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(RESTORE_CHILD_FILE, &file)
        .env(RESTORE_CHILD_HOME, &target)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let marker = target.with_extension("paused");
    eventually(30, "the restore paused mid-write", || async {
        marker.exists().then_some(())
    })
    .await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    assert!(!target.exists(), "a half restore is not the home");
    let leftovers: Vec<std::path::PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".alice-new.restoring-")
        })
        .map(|e| e.path())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    let half = Home::new(&leftovers[0]);
    assert!(
        !half.key().exists() && !half.config().exists(),
        "the key and the config come last"
    );
    assert!(
        a2acp_runtime::agent_host::AgentHost::open_home(
            &half,
            a2acp_runtime::store::Durability::Normal
        )
        .is_err(),
        "nothing of a half restore runs as an agent"
    );

    // A second restore.
    backup::restore(&file, PASSPHRASE, &target).unwrap();
    assert!(!leftovers[0].exists(), "the leftover is removed");
    let restored = Home::new(&target);
    for (a, b) in [
        (restored.key(), home.key()),
        (restored.config(), home.config()),
    ] {
        assert_eq!(std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    }
    let agent = rt.agent(&restored, "alice", None);
    wait_online(&agent).await;
    agent.stop().await;
    relay.stop(true).await;
}
