//! What a person and an MCP host are told is true, with real agents on a loopback relay
//! and the official MCP Python SDK (`mcp` on PyPI, `target/mcp-venv`) driving the bridge
//! (`tests/mcp/told.py`):
//!
//! - the side that declined a field sees it declined (`thread show`, `--json`'s
//!   `withheld`, the MCP `thread` tool), as the refused side does; once its person
//!   confirmed, the thread waits for the peer, named by address — agents on tokio and
//!   on smol;
//! - a tool call with a wrong argument is answered with the argument's name and what it
//!   must be;
//! - a change right after `resources/subscribe` is notified, session after session;
//! - closing a session over streamable HTTP ends it as the SDK's client expects (no
//!   "Session termination failed").

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use a2acp_core::agent::PromptKind;
use a2acp_runtime::control::{render_thread, Request, ThreadDetail};
use a2acp_runtime::home::Home;
use a2acp_tests::*;
use a2acp_tokio::mcp::McpOptions;
use a2acp_tokio::mcp_http::{self, McpHttpLimits, McpHttpOptions};
use serde_json::Value;

per_runtime!(
    #[ignore = "needs the official mcp SDK: bash .ci/test-deps"]
    the_decliner_sees_its_declines_and_whom_the_thread_waits_for
);

/// The mcp venv's interpreter (the tests that call it are ignored without `--run-ignored`).
fn python() -> PathBuf {
    venv_python("mcp", "A2ACP_MCP_PYTHON")
}

/// The bridge on stdio for the agent of `home`, as told.py takes it.
fn bridge(home: &Home) -> String {
    serde_json::to_string(&[
        env!("CARGO_BIN_EXE_mcp_bridge"),
        "--home",
        home.dir().to_str().unwrap(),
    ])
    .unwrap()
}

/// Runs `tests/mcp/told.py` with `args`; its report.
async fn told(python: &std::path::Path, args: &[&str]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/told.py");
    let run = tokio::process::Command::new(python)
        .arg(&script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("told.py finished within 120 s")
        .expect("run told.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "told.py {args:?} failed:\n{stdout}\n{stderr}"
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("{}")).expect("told.py's report")
}

async fn detail(home: &Home, id: &str) -> ThreadDetail {
    let r = ctl(home, Request::Thread { id: id.into() }).await;
    assert!(r.ok, "{r:?}");
    serde_json::from_value(r.data).unwrap()
}

/// Alice declines every field Bob's agent asks for; Bob proposes; Alice confirms.
/// Alice's side shows what she declined (as Bob's shows it declined by her) and waits
/// for Bob by his address; Bob's waits for Bob. The MCP host of Alice reads the same.
async fn the_decliner_sees_its_declines_and_whom_the_thread_waits_for(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let homes = dinner_homes(dir.path(), &relay.url());
    let alice = rt.agent(&homes.alice, "alice", None);
    let bob = rt.agent(&homes.bob, "bob", None);
    wait_online(&alice).await;
    wait_online(&bob).await;
    let bob_address = homes.bob_cfg.address.to_string();
    let consent = start_dinner_until_consent(&alice, homes.bob_cfg.address.clone()).await;
    let id = consent.thread_id.clone();
    let PromptKind::Consent { fields } = &consent.kind else {
        unreachable!()
    };
    let mut asked: Vec<String> = fields.iter().map(|f| f.field.clone()).collect();
    asked.sort();
    answer(&homes.alice, consent.id, &["decline-all"]).await;
    let proposal = eventually(30, "Alice is asked about Bob's proposal", || async {
        prompts(&alice)
            .await
            .into_iter()
            .find(|p| matches!(p.kind, PromptKind::Resolution { .. }))
    })
    .await;

    // Declined on both sides: Alice "you declined", Bob "they declined".
    let a = detail(&homes.alice, &id).await;
    let b = detail(&homes.bob, &id).await;
    for f in &asked {
        assert!(a.withheld.contains(f), "Alice's withheld {:?}", a.withheld);
        assert!(b.peer_unavailable.contains(f), "{:?}", b.peer_unavailable);
    }
    let shown = render_thread(&a);
    let line = shown
        .lines()
        .find(|l| l.trim_start().starts_with("you declined"))
        .unwrap();
    for f in &asked {
        assert!(line.contains(f.as_str()), "{shown}");
    }
    assert_eq!(a.summary.waiting, "user", "her prompt is open");

    // Alice confirms: her side waits for Bob, by address; Bob's for Bob.
    answer(&homes.alice, proposal.id, &["confirm"]).await;
    let a = eventually(15, "Alice's side waits for Bob", || async {
        let d = detail(&homes.alice, &id).await;
        (d.summary.waiting == "peer").then_some(d)
    })
    .await;
    assert_eq!(a.summary.state, "PROPOSED");
    assert_eq!(a.summary.waiting_for, vec![bob_address.clone()]);
    let shown = render_thread(&a);
    assert!(
        shown.contains(&format!("waiting        for {bob_address} ·")),
        "{shown}"
    );
    assert!(!shown.contains("for you"), "{shown}");
    let b = detail(&homes.bob, &id).await;
    assert_eq!(b.summary.waiting, "user", "Bob's prompt is open: {b:?}");
    assert!(b.summary.waiting_for.is_empty());

    // The MCP host of Alice reads the same thread.
    let r = told(&python(), &["thread", &bridge(&homes.alice), &id]).await;
    let t = &r["thread"];
    assert_eq!(t["waiting"], "peer", "{t}");
    assert_eq!(t["waiting_for"], serde_json::json!([bob_address]), "{t}");
    for f in &asked {
        assert!(
            t["withheld"]
                .as_array()
                .unwrap()
                .contains(&Value::from(f.as_str())),
            "{t}"
        );
    }
    alice.stop().await;
    bob.stop().await;
}

/// Wrong arguments, one per call, across tools: each answer names the argument and
/// what it must be, in words, never the decoder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official mcp SDK: bash .ci/test-deps"]
async fn mcp_tool_errors_name_the_argument_and_what_it_must_be() {
    let python = python();
    let dir = tmp();
    // The arguments are checked before the agent is asked: none needs to run.
    let home = Home::resolve(Some(dir.path()));
    let r = told(&python, &["errors", &bridge(&home)]).await;
    let errors: Vec<&str> = r["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    let expected = [
        "`to` must be an address string or a list of address strings, not 5",
        "`to` must be an address string or a list of address strings, not [\"agent:bob@example.org\",7]",
        "`start_thread` needs `category`: a string",
        "`urgent` must be true or false, not \"yes\"",
        "`prompt_id` must be a whole number (0 or more), not \"one\"",
        "`tier` must be one of always_share, ask_first, never_share, not \"sometimes\"",
        "`id` must be a string, not 12",
        "`thread` has no argument `verbose`: it takes `id`",
        "`context` must be an object (JSON `{…}`), not \"at eight\"",
        "`number` must be a whole number (0 or more), not -3",
    ];
    assert_eq!(errors, expected);
    for e in &errors {
        assert!(!e.contains("enum") && !e.contains("invalid type"), "{e}");
    }
}

/// Session after session, a host subscribes to the list of threads and at once starts
/// a thread: it is told the list changed, every time. (The watch used to take its first
/// look half a second into the session, and a change before that was never told.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official mcp SDK: bash .ci/test-deps"]
async fn a_change_right_after_subscribing_is_notified() {
    let python = python();
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let homes = dinner_homes(dir.path(), &relay.url());
    let alice = Runtime::Tokio.agent(&homes.alice, "alice", None);
    wait_online(&alice).await;
    // Bob's agent never runs: each thread is declined by the relay at once, and nothing
    // changes after that but what the host did.
    let tries = 6;
    let r = told(
        &python,
        &[
            "subscribe",
            &bridge(&homes.alice),
            &homes.bob_cfg.address.to_string(),
            &tries.to_string(),
        ],
    )
    .await;
    assert_eq!(r["heard"], tries, "{r}");
    alice.stop().await;
}

/// The SDK's client closes its session over streamable HTTP: it sends a DELETE, gets
/// 200, and logs no "Session termination failed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official mcp SDK: bash .ci/test-deps"]
async fn closing_an_http_session_answers_what_the_sdk_expects() {
    let python = python();
    let dir = tmp();
    let home = Home::resolve(Some(dir.path()));
    let listener = mcp_http::bind("127.0.0.1:0", None).expect("bind the MCP listener");
    let url = mcp_http::endpoint(listener.local_addr().unwrap());
    tokio::spawn(mcp_http::serve(
        listener,
        McpHttpOptions {
            bridge: McpOptions {
                socket: home.socket(),
                host_answers: false,
            },
            token: None,
            limits: McpHttpLimits::default(),
        },
    ));
    let server = serde_json::json!({"url": url, "token": null}).to_string();
    let r = told(&python, &["close", &server]).await;
    let deletes = r["deletes"].as_array().unwrap();
    assert!(!deletes.is_empty(), "the client sent no DELETE: {r}");
    assert!(
        deletes.iter().any(|d| d.as_str().unwrap().contains("200")),
        "{r}"
    );
    assert_eq!(r["failed"], serde_json::json!([]), "{r}");
}

/// An MCP host orients on a relationship (issue: the agent's memory through MCP): after a
/// dinner, Alice's host reads the project of her relationship with Bob — the decision the
/// person confirmed and the milestone — then deposits a note, flags it, and the person
/// (asked through the host) completes it; a transition out of `complete` is refused; a
/// fact asserted is among the project's facts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the official mcp SDK: bash .ci/test-deps"]
async fn an_mcp_host_orients_on_a_relationship_and_the_person_reviews() {
    let python = python();
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let homes = dinner_homes(dir.path(), &relay.url());
    let dinner = a2acp_runtime::scripted::ScriptedUser::dinner();
    let alice = Runtime::Tokio.agent(&homes.alice, "alice", Some(dinner.clone()));
    let bob = Runtime::Tokio.agent(&homes.bob, "bob", Some(dinner));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let thread = dinner_completes(&alice, &bob, &homes.bob, homes.bob_cfg.address.clone()).await;
    let project = homes.bob_cfg.address.to_string();
    let r = told(&python, &["orient", &bridge(&homes.alice), &project]).await;
    let projects = r["projects"]["projects"].as_array().unwrap();
    assert!(
        projects.iter().any(|p| p["project_id"] == project.as_str()),
        "{r}"
    );
    let o = r["orient"].to_string();
    assert!(o.contains(&thread) && o.contains("Done: "), "{o}");
    let latest = r["latest"]["packages"].as_array().unwrap();
    assert!(
        latest
            .iter()
            .any(|p| p["package_type"] == "decision" && p["status"] == "complete"),
        "{r}"
    );
    assert!(
        !r["relevant"]["packages"].as_array().unwrap().is_empty(),
        "{r}"
    );
    assert_eq!(r["deposited"]["created"], true, "{r}");
    assert_eq!(r["flagged"]["package"]["status"], "awaiting_review");
    assert_eq!(r["reviewed"]["package"]["status"], "complete");
    assert_eq!(r["reviewed"]["package"]["x-reviewed-by"]["type"], "human");
    assert!(
        r["illegal"]
            .as_str()
            .unwrap()
            .contains("invalid_transition"),
        "{r}"
    );
    let asked = r["asked"].to_string();
    assert!(
        asked.contains("Mark package pkg_mcp_note_1 as complete"),
        "{asked}"
    );
    assert!(r["facts"].to_string().contains("Reading"), "{r}");
    alice.stop().await;
    bob.stop().await;
}
