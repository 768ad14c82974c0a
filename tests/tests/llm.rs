//! The language model client over real sockets (§5, §13.3): agents with an `[llm]` table
//! negotiate the spec's dinner with a scripted OpenAI-compatible server running as a
//! separate process (`llm_server`), and every fault of the server ends as the fallback
//! chain says — retried, another model, the deterministic negotiator — with the thread
//! completed and no never_share value sent. `a2acp demo --llm` runs the demo against it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use a2acp_core::agent::{AgentEvent as Audit, LlmFallbackTo, ModelTier};
use a2acp_runtime::agent_host::Effect;
use a2acp_runtime::daemon::AgentEvent;
use a2acp_runtime::llm::LlmConfig;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::*;

/// Alice's never_share value in the dinner configs.
const SECRET: &str = "asthma — never shared";

/// The scripted server, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start() -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_llm_server"))
            .args(["--secret", SECRET])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start llm_server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line.trim().strip_prefix("listening ").expect("address");
        Server {
            child,
            url: format!("http://{addr}"),
        }
    }

    /// Calls seen per model.
    fn stats(&self) -> serde_json::Value {
        let addr = self.url.trim_start_matches("http://").to_string();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        use std::io::{Read, Write};
        write!(s, "GET /stats HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let body = out.split("\r\n\r\n").nth(1).unwrap_or("{}");
        serde_json::from_str(body).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config with short timeouts: every tier on `model`, no fallback.
fn cfg(url: &str, model: &str) -> LlmConfig {
    let mut c = LlmConfig::new(url, model);
    c.connect_timeout_ms = 1_000;
    c.response_timeout_ms = 3_000;
    c.body_timeout_ms = 800;
    c.retries = 2;
    c.backoff_ms = 50;
    c.backoff_max_ms = 2_000;
    c
}

/// What one agent audited about its model calls.
#[derive(Debug, Default)]
struct Seen {
    events: Vec<Audit>,
}

impl Seen {
    fn decided(&self) -> Vec<(String, ModelTier, u64)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Audit::LlmDecided {
                    model,
                    tier,
                    latency_ms,
                    ..
                } => Some((model.clone(), *tier, *latency_ms)),
                _ => None,
            })
            .collect()
    }
    fn fallbacks(&self) -> Vec<(ModelTier, LlmFallbackTo)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Audit::LlmFallback { from, to } => Some((*from, *to)),
                _ => None,
            })
            .collect()
    }
    fn refused(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Audit::LlmAnswerRefused { error, .. } => Some(error.clone()),
                _ => None,
            })
            .collect()
    }
    fn unavailable(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Audit::LlmUnavailable { error, .. } => Some(error.clone()),
                _ => None,
            })
            .collect()
    }
}

fn drain(events: &mut Events) -> Seen {
    let mut seen = Seen::default();
    while let Some(e) = events.try_next() {
        if let AgentEvent::Effect(Effect::Audit(a)) = e {
            seen.events.push(a.event);
        }
    }
    seen
}

/// The dinner between Alice and Bob with these `[llm]` tables, to completion on both
/// sides (the checks of [`dinner_completes`]: what Alice declined never reached Bob).
async fn dinner_with(alice_llm: Option<LlmConfig>, bob_llm: Option<LlmConfig>) -> (Seen, Seen) {
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    edit_config(&ha, |f| f.llm = alice_llm);
    edit_config(&hb, |f| f.llm = bob_llm);
    let alice = Runtime::Tokio.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = Runtime::Tokio.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    let mut ea = alice.subscribe();
    let mut eb = bob.subscribe();
    wait_online(&alice).await;
    wait_online(&bob).await;
    alice
        .tell(a2acp_runtime::scripted::start_dinner(
            bob_cfg.address.clone(),
            &a2acp_runtime::scripted::next_friday(a2acp_runtime::now()),
        ))
        .await;
    let ta = wait_state_or_show(&alice, &ha, &hb).await;
    let tb = wait_state(&bob, "COMPLETED", 30).await;
    assert_eq!(ta[0].id, tb[0].id);
    let r = ctl(
        &hb,
        a2acp_runtime::control::Request::Thread {
            id: tb[0].id.clone(),
        },
    )
    .await;
    let theirs = r.data["theirs"].to_string();
    assert!(
        theirs.contains("driving") && !theirs.contains("Italian"),
        "{theirs}"
    );
    let bytes = all_bytes(hb.dir());
    assert!(
        !bytes.windows(6).any(|w| w == b"asthma"),
        "Alice's never_share value reached Bob"
    );
    let seen = (drain(&mut ea), drain(&mut eb));
    alice.stop().await;
    bob.stop().await;
    seen
}

/// Waits for Alice's thread to complete; shows both histories and audits if it does not.
async fn wait_state_or_show(
    alice: &RtAgent,
    ha: &a2acp_runtime::home::Home,
    hb: &a2acp_runtime::home::Home,
) -> Vec<a2acp_runtime::control::ThreadSummary> {
    for _ in 0..300 {
        let t = threads(alice).await;
        if t.first().is_some_and(|t| t.state == "COMPLETED") {
            return t;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let t = threads(alice).await;
    for h in [ha, hb] {
        let r = ctl(
            h,
            a2acp_runtime::control::Request::Thread {
                id: t[0].id.clone(),
            },
        )
        .await;
        eprintln!("{:#}", r.data["history"]);
        eprintln!("{:#}", r.data["audit"]);
    }
    panic!("the dinner did not complete: {t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_agents_negotiate_the_dinner_with_the_model() {
    let s = Server::start();
    let (a, b) = dinner_with(Some(cfg(&s.url, "ok")), Some(cfg(&s.url, "ok"))).await;
    let decided: Vec<_> = a.decided().into_iter().chain(b.decided()).collect();
    assert!(!decided.is_empty(), "{a:?} {b:?}");
    assert!(decided.iter().all(|(m, _, _)| m == "ok"), "{decided:?}");
    assert!(a.fallbacks().is_empty() && b.fallbacks().is_empty());
    assert_eq!(s.stats()["ok"].as_u64(), Some(decided.len() as u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_and_server_errors_are_retried_by_the_client() {
    let s = Server::start();
    let (_, b) = dinner_with(None, Some(cfg(&s.url, "429*1"))).await;
    assert!(!b.decided().is_empty(), "{b:?}");
    assert!(b.fallbacks().is_empty(), "{b:?}");
    // One 429 (Retry-After: 1 s honoured), then the answers.
    assert!(s.stats()["429*1"].as_u64().unwrap() >= 2);
    let (_, b) = dinner_with(None, Some(cfg(&s.url, "500*2"))).await;
    assert!(!b.decided().is_empty() && b.fallbacks().is_empty(), "{b:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_ends_with_the_negotiator() {
    // A port nobody listens on: connection refused.
    let url = format!("http://{}", free_addr());
    let (_, b) = dinner_with(None, Some(cfg(&url, "ok"))).await;
    assert!(b.decided().is_empty());
    assert!(!b.unavailable().is_empty(), "{b:?}");
    let f = b.fallbacks();
    assert!(
        f.contains(&(ModelTier::Fallback, LlmFallbackTo::Negotiator)),
        "{f:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_never_finishes_times_out_and_the_fallback_model_answers() {
    let s = Server::start();
    let mut c = cfg(&s.url, "hang");
    c.retries = 0;
    c.fallback = Some("ok".into());
    let (_, b) = dinner_with(None, Some(c)).await;
    assert!(!b.unavailable().is_empty(), "{b:?}");
    let decided = b.decided();
    assert!(
        decided
            .iter()
            .all(|(m, t, _)| m == "ok" && *t == ModelTier::Fallback),
        "{decided:?}"
    );
    assert!(!decided.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_first_token_is_waited_for() {
    let s = Server::start();
    let (_, b) = dinner_with(None, Some(cfg(&s.url, "slow"))).await;
    let decided = b.decided();
    assert!(!decided.is_empty() && b.fallbacks().is_empty(), "{b:?}");
    assert!(decided.iter().all(|(_, _, ms)| *ms >= 1_500), "{decided:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_is_not_json_goes_to_the_fallback_model() {
    let s = Server::start();
    let mut c = cfg(&s.url, "malformed");
    c.fallback = Some("ok".into());
    let (_, b) = dinner_with(None, Some(c)).await;
    assert!(
        b.unavailable().iter().any(|e| e.contains("not JSON")),
        "{b:?}"
    );
    assert!(!b.decided().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_breaking_the_schema_are_regenerated_then_the_chain_ends_with_the_negotiator() {
    let s = Server::start();
    let mut c = cfg(&s.url, "violate");
    c.fallback = Some("prose".into());
    let (_, b) = dinner_with(None, Some(c)).await;
    assert!(b.decided().is_empty());
    let f = b.fallbacks();
    assert!(
        f.contains(&(ModelTier::Fallback, LlmFallbackTo::Negotiator)),
        "{f:?}"
    );
    assert!(f
        .iter()
        .any(|(_, to)| *to == LlmFallbackTo::Model(ModelTier::Fallback)));
    // llm_attempts (3) calls per model, at most three models per decision.
    let refused = b.refused();
    assert!(refused.len() >= 3, "{refused:?}");
    let calls = s.stats();
    assert!(calls["violate"].as_u64().unwrap() >= 3, "{calls}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_share_value_in_the_answer_is_refused_and_never_sent() {
    let s = Server::start();
    let mut c = cfg(&s.url, "leak");
    c.fallback = Some("ok".into());
    let (a, _) = dinner_with(Some(c), None).await;
    let refused = a.refused();
    assert!(
        !refused.is_empty() && refused.iter().all(|e| e.contains("never_share")),
        "{refused:?}"
    );
    assert!(a
        .decided()
        .iter()
        .all(|(m, t, _)| m == "ok" && *t == ModelTier::Fallback));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_model_unsure_of_itself_is_checked_by_the_medium_one() {
    let s = Server::start();
    let mut c = cfg(&s.url, "ok");
    c.small = Some("lowconf".into());
    let (a, b) = dinner_with(Some(c.clone()), Some(c)).await;
    let f: Vec<_> = a.fallbacks().into_iter().chain(b.fallbacks()).collect();
    assert!(
        f.contains(&(ModelTier::Small, LlmFallbackTo::Model(ModelTier::Medium))),
        "{f:?}"
    );
    let decided: Vec<_> = a.decided().into_iter().chain(b.decided()).collect();
    assert!(decided.iter().all(|(m, _, _)| m == "ok"), "{decided:?}");
}

/// `a2acp demo --llm URL --model NAME`: the demo's two agents decide with the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_with_a_model() {
    let s = Server::start();
    let summary = a2acp_tokio::demo::run(a2acp_tokio::demo::DemoOptions {
        print: false,
        llm: Some(LlmConfig::new(&s.url, "ok")),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(summary.completed, "{summary:?}");
    // Both agents asked the model: at least Bob's answer to the request and Alice's
    // proposal.
    assert!(s.stats()["ok"].as_u64().unwrap() >= 2, "{}", s.stats());
    // A model that is not there: the demo still completes, by the negotiator.
    let url = format!("http://{}", free_addr());
    let mut c = LlmConfig::new(&url, "ok");
    c.retries = 0;
    let summary = a2acp_tokio::demo::run(a2acp_tokio::demo::DemoOptions {
        print: false,
        llm: Some(c),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(summary.completed, "{summary:?}");
}
