//! The principal's audit log (seed 004 §6) and the transparency channel (§5.2) end to end:
//! the spec's dinner between two agents on each runtime, both logs checked — one entry per
//! packet on each side, what one sent the other received, the chain intact, and no
//! never_share value (Alice's health_info) nor any other value of the dinner in any
//! audit file or summary — with Alice's summaries posted to a real HTTP receiver started
//! here and Bob's written to a file (or to his agent's log). A webhook that never answers
//! does not hold the dinner up, nor does a disk that refuses the log (said once). The three webhook formats (Slack, Discord, Matrix) as the receiver sees
//! them.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use a2acp_runtime::audit_log::{self, Filter};
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_runtime::transparency::{ChannelKind, Transparency, TransparencyConfig, WebhookFormat};
use a2acp_tests::webhook::Receiver;
use a2acp_tests::*;
use serde_json::Value;

/// What must never be written where the principal's log or a chat room holds it: Alice's
/// never_share value, and the values the dinner shares or declines.
const VALUES: &[&str] = &[
    "asthma",
    "Italian",
    "vegetarian",
    "driving",
    "Reading",
    "£20-40pp",
];

fn webhook(url: String) -> TransparencyConfig {
    let mut t = TransparencyConfig::new(ChannelKind::Webhook);
    t.url = Some(url);
    t.max_per_minute = 600;
    t
}

/// The entries of `home`'s log in `thread`.
fn entries(home: &Path, thread: &str) -> Vec<Value> {
    audit_log::list(
        &home.join(audit_log::DIR),
        &Filter {
            thread: Some(thread.into()),
            ..Default::default()
        },
    )
    .unwrap()
}

fn ids(entries: &[Value], direction: &str) -> BTreeSet<String> {
    entries
        .iter()
        .filter(|e| e["direction"] == direction)
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

fn assert_no_values(what: &str, bytes: &[u8]) {
    for v in VALUES {
        assert!(
            !bytes.windows(v.len()).any(|w| w == v.as_bytes()),
            "{what} holds `{v}`"
        );
    }
}

per_runtime!(
    the_dinner_is_audited_on_both_sides,
    a_webhook_that_never_answers_never_holds_the_dinner,
    a_disk_that_refuses_the_log_never_stops_the_agent
);

async fn the_dinner_is_audited_on_both_sides(rt: Runtime) {
    let hook = Receiver::answering();
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    edit_config(&ha, |f| f.transparency = Some(webhook(hook.url("/hook"))));
    edit_config(&hb, |f| {
        let mut t = TransparencyConfig::new(ChannelKind::File);
        t.path = Some("transparency.log".into());
        t.max_per_minute = 600;
        f.transparency = Some(t);
    });
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let thread = dinner_completes(&alice, &bob, &hb, bob_cfg.address.clone()).await;
    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;

    for home in [&ha, &hb] {
        let log = home.dir().join(audit_log::DIR);
        let v = audit_log::verify(&log).expect("the chain is intact");
        assert!(v.lines >= 8 && v.torn.is_empty(), "{v:?}");
        assert_no_values("the audit log", &all_bytes(&log));
    }
    let (a, b) = (entries(ha.dir(), &thread), entries(hb.dir(), &thread));
    assert_eq!(
        (a.len(), b.len()),
        (8, 8),
        "one entry per packet on each side"
    );
    assert_eq!(ids(&a, "sent"), ids(&b, "received"));
    assert_eq!(ids(&a, "received"), ids(&b, "sent"));
    for e in a.iter().chain(&b) {
        for k in [
            "ts",
            "direction",
            "from",
            "to",
            "type",
            "method",
            "id",
            "summary",
            "channel",
            "prev",
        ] {
            assert!(e.get(k).is_some(), "{k} missing in {e}");
        }
        assert!(e["from"]["principal"].is_string() && e["to"]["agent"].is_string());
        assert_eq!(e["channel"], "relay:localhost");
        assert_eq!(e["transparency_summary"], e["direction"] == "sent");
    }
    let first = a.iter().find(|e| e["type"] == "context").unwrap();
    assert_eq!(first["direction"], "sent");
    assert_eq!(first["to"]["agent"], "agent:bob@localhost");
    assert!(
        first["summary"]
            .as_str()
            .unwrap()
            .starts_with("Sent context to agent:bob@localhost in thread "),
        "{first}"
    );

    // Alice's summaries at the webhook, one per packet she sent; Bob's in his file.
    let sent = ids(&a, "sent").len();
    let posts = eventually(10, "Alice's summaries posted", || async {
        let r = hook.requests();
        (r.len() >= sent).then_some(r)
    })
    .await;
    assert_eq!(posts.len(), sent);
    for p in &posts {
        assert_eq!((p.method.as_str(), p.path.as_str()), ("POST", "/hook"));
        let text = p.json()["text"].as_str().unwrap().to_string();
        assert!(text.starts_with("alice@localhost's agent: Sent "), "{text}");
        assert_no_values("a webhook post", p.body.as_bytes());
    }
    let bob_sent = ids(&b, "sent").len();
    let file = hb.dir().join("transparency.log");
    let text = eventually(10, "Bob's summaries written", || async {
        let t = std::fs::read_to_string(&file).ok()?;
        (t.lines().count() >= bob_sent).then_some(t)
    })
    .await;
    assert_eq!(text.lines().count(), bob_sent);
    assert_no_values("the transparency file", text.as_bytes());
}

async fn a_webhook_that_never_answers_never_holds_the_dinner(rt: Runtime) {
    let hook = Receiver::silent();
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    edit_config(&ha, |f| {
        let mut t = webhook(hook.url("/hook"));
        t.timeout_secs = 120;
        t.queue = 1;
        f.transparency = Some(t);
    });
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    // The first POST hangs for its whole deadline (120 s): an agent that waited for it
    // could not complete the dinner within `dinner_completes`' 30 s.
    let thread = dinner_completes(&alice, &bob, &hb, bob_cfg.address.clone()).await;
    eventually(5, "the first POST received", || async {
        (!hook.requests().is_empty()).then_some(())
    })
    .await;
    assert_eq!(hook.requests().len(), 1, "one POST, never answered");
    // `a2acp status` tells Alice the channel is behind.
    let status = eventually(10, "the drops counted", || async {
        let r = alice.ask(a2acp_runtime::control::Request::Status).await;
        let s: a2acp_runtime::control::StatusInfo = serde_json::from_value(r.data).ok()?;
        s.transparency.filter(|t| t.dropped >= 1).map(|_| s)
    })
    .await;
    let text = a2acp_runtime::control::render_status(&status);
    assert!(text.contains("transparency: "), "{text}");
    assert!(text.contains(" dropped"), "{text}");
    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;
    let a = entries(ha.dir(), &thread);
    assert_eq!(a.len(), 8);
    // The queue holds one: of the summaries behind the hanging POST, the rest were
    // dropped, and their entries say so.
    assert!(a
        .iter()
        .any(|e| e["transparency_summary"] == false && e["direction"] == "sent"));
    audit_log::verify(&ha.dir().join(audit_log::DIR)).expect("intact");
}

async fn a_disk_that_refuses_the_log_never_stops_the_agent(rt: Runtime) {
    let logs = capture_logs();
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    // Bob's `audit` is a file: no month file can be made under it.
    std::fs::write(hb.dir().join(audit_log::DIR), b"not a folder").unwrap();
    // His summaries go to the terminal (his agent's log).
    edit_config(&hb, |f| {
        let mut t = TransparencyConfig::new(ChannelKind::Terminal);
        t.max_per_minute = 600;
        f.transparency = Some(t);
    });
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let thread = dinner_completes(&alice, &bob, &hb, bob_cfg.address.clone()).await;
    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;
    assert_eq!(entries(ha.dir(), &thread).len(), 8);
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert_eq!(
        text.matches("audit log: cannot write").count(),
        1,
        "said once in the agent's log: {text}"
    );
    let summaries = eventually(10, "Bob's summaries in his log", || async {
        let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
        let n = text.matches("bob@localhost's agent: Sent ").count();
        (n >= 4).then_some(text)
    })
    .await;
    let lines: String = summaries
        .lines()
        .filter(|l| l.contains("'s agent: "))
        .collect();
    assert_no_values("the terminal's summaries", lines.as_bytes());
}

#[test]
fn the_webhook_formats_as_a_receiver_sees_them() {
    let hook = Receiver::answering();
    let home = tmp();
    let send = |cfg: TransparencyConfig, text: &str| {
        let t = Transparency::start(&cfg, home.path()).unwrap();
        assert!(t.offer(text.to_string()));
    };
    send(webhook(hook.url("/slack")), "one");
    let mut discord = webhook(hook.url("/discord"));
    discord.format = WebhookFormat::Discord;
    send(discord, "two");
    let room = "/_matrix/client/v3/rooms/!room:localhost/send/m.room.message";
    let mut matrix = webhook(hook.url(room));
    matrix.format = WebhookFormat::Matrix;
    std::fs::write(home.path().join("matrix.token"), "syt_token\n").unwrap();
    matrix.token_file = Some("matrix.token".into());
    send(matrix, "three");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while hook.requests().len() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut r = hook.requests();
    r.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(r.len(), 3, "{r:?}");
    let (matrix, discord, slack) = (&r[0], &r[1], &r[2]);
    assert_eq!(
        (slack.method.as_str(), slack.json()),
        ("POST", serde_json::json!({"text": "one"}))
    );
    assert_eq!(
        (discord.method.as_str(), discord.json()),
        ("POST", serde_json::json!({"content": "two"}))
    );
    assert_eq!(matrix.method, "PUT");
    assert!(
        matrix.path.starts_with(&format!("{room}/a2acp-")),
        "{}",
        matrix.path
    );
    assert_eq!(matrix.header("authorization"), Some("Bearer syt_token"));
    assert_eq!(
        matrix.json(),
        serde_json::json!({"msgtype": "m.notice", "body": "three"})
    );
}
