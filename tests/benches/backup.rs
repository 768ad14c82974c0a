//! A backup's figures, printed: its size and the time to write it for an agent with 1,000
//! threads (half ended, half open at a prompt, with the relationship memory
//! of the ended ones), the time to restore it, and the time from the restore's start to
//! "all threads resumed" (the restored agent running and every open thread's prompt shown
//! again), with the Argon2id parameters the command uses.
//!
//! `cargo bench -p a2acp-tests --bench backup` (`BACKUP_BENCH_THREADS=N` for another
//! number of threads).
//!
//! The threads are made from two real dinners between two agents over a loopback relay —
//! one completed, one stopped at a prompt — whose records are copied under new
//! thread ids into the agent's database while it is stopped.

use std::time::{Duration, Instant};

use a2acp_core::persist::PersistOp;
use a2acp_runtime::backup;
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_runtime::store::{Durability, Store};
use a2acp_tests::*;

const PASSPHRASE: &str = "correct horse battery staple";

fn main() {
    let n: usize = std::env::var("BACKUP_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(n));
}

async fn run(n: usize) {
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay(&free_addr(), &dir.path().join("relay"))
        .await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let alice = Runtime::Tokio.agent(&ha, "alice", None);
    let bob = Runtime::Tokio.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let ended = start_dinner_until_consent(&alice, bob_cfg.address.clone()).await;
    answer(&ha, ended.id, &ScriptedUser::dinner().answer_args(&ended)).await;
    dinner_ends_once_each(&alice, &ha, &bob, &hb).await;
    // The second dinner stops at the first prompt Alice is shown (its resolution: Bob's
    // agent knows her now).
    alice
        .tell(a2acp_runtime::scripted::start_dinner(
            bob_cfg.address.clone(),
            &a2acp_runtime::scripted::next_friday(a2acp_runtime::now()),
        ))
        .await;
    let open = eventually(30, "the second dinner's prompt", || async {
        prompts(&alice)
            .await
            .into_iter()
            .find(|p| p.thread_id != ended.thread_id)
    })
    .await;
    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;

    // n threads: copies of the two under new ids.
    let mut store = Store::open(&ha.db(), Durability::Normal).unwrap();
    let records = store.load_all().unwrap();
    let sources = [ended.thread_id.clone(), open.thread_id.clone()];
    let mut ops = Vec::new();
    for i in 2..n {
        let src = &sources[i % 2];
        let id = renamed(src, i);
        for (k, v) in &records {
            if !k.contains(src.as_str()) {
                continue;
            }
            // Each copy's open prompt its own id (above every id the agent gave).
            let value = String::from_utf8_lossy(v)
                .replace(src.as_str(), &id)
                .replace(
                    &format!("\"prompt_id\":{}", open.id),
                    &format!("\"prompt_id\":{}", 1_000_000 + i),
                );
            ops.push(PersistOp::Put {
                key: k.replace(src.as_str(), &id),
                value: value.into_bytes(),
            });
        }
    }
    store.apply(&ops, &[]).unwrap();
    let kept = store.len().unwrap();
    drop(store);
    let db_size = std::fs::metadata(ha.db()).unwrap().len();
    println!(
        "agent: {n} threads ({} open), {kept} records, agent.db {} KiB",
        n / 2,
        db_size / 1024
    );

    // The backup, with the command's Argon2id parameters.
    let file = dir.path().join("alice.backup");
    let t = Instant::now();
    let size = backup::backup(&ha, &file, PASSPHRASE).unwrap();
    let took = t.elapsed();
    println!(
        "backup: {} KiB in {} (Argon2id m={} KiB t={} p={})",
        size / 1024,
        ms(took),
        backup::M_COST,
        backup::T_COST,
        backup::P_COST
    );

    // The restore, and the restored agent up with every open thread's prompt shown.
    let new_home = Home::new(dir.path().join("alice-new"));
    let t = Instant::now();
    backup::restore(&file, PASSPHRASE, new_home.dir()).unwrap();
    let restored = t.elapsed();
    let agent = Runtime::Tokio.agent(&new_home, "alice", None);
    let want = n.div_ceil(2);
    eventually(600, "every open thread resumed", || async {
        let r = a2acp_tokio::agent::control_request(
            &new_home.socket(),
            &a2acp_runtime::control::Request::Prompts,
        )
        .await
        .ok()?;
        let shown = r.data.as_array().map(Vec::len).unwrap_or(0);
        (shown >= want).then_some(())
    })
    .await;
    let resumed = t.elapsed();
    let threads = threads(&agent).await.len();
    agent.stop().await;
    println!("restore: files written in {}", ms(restored));
    println!(
        "restore to all threads resumed: {} ({threads} threads loaded, {want} open prompts shown)",
        ms(resumed)
    );
}

/// `id` with its end replaced by `i`, the same length and alphabet.
fn renamed(id: &str, i: usize) -> String {
    let tag = format!("{i:06x}");
    format!("{}{tag}", &id[..id.len() - tag.len()])
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}
