//! A lying remote relay, over real loopback sockets, on both runtimes. b.example's relay
//! knows c.example's (a real federating relay, whose discovery document publishes its
//! key); a scripted fake dials b.example's relay over `wss://` speaking the link protocol
//! and lies:
//!
//! - it authenticates as c.example with a key c.example does not publish: `auth_failed`;
//! - authenticated with c.example's own key, it pushes an envelope whose sender is not on
//!   c.example: `rejected wrong_sender`, and the recipient never sees it;
//! - it sends garbage on the link, and it floods the link past its frame budget: refused,
//!   the link closed, and c.example refused afterwards (`domain_refused`) by its reputation.
//!
//! Each fault is counted in b.example's figures for c.example, logged at a bounded rate
//! (the warnings are counted against the rate), the relay's memory stays bounded, and
//! honest local traffic on b.example (the dinner between two of its agents, run while the
//! fake misbehaves) completes: its time is printed.

use std::time::{Duration, Instant};

use a2acp_core::crypto::{Direction, IdentityKey, ThreadSession};
use a2acp_core::link::{link_signed_bytes, ClientFrame, ErrorCode, RelayFrame, LINK_DIAL_LABEL};
use a2acp_core::relay::federation::FederationConfig;
use a2acp_core::relay::RelayConfig;
use a2acp_core::Address;
use a2acp_runtime::relay_key;
use a2acp_runtime::scripted::{dinner_configs, ScriptedUser};
use a2acp_runtime::tls::ClientTls;
use a2acp_tests::federation::{federating_relay, federation};
use a2acp_tests::*;
use async_tungstenite::tungstenite::Message;
use futures_util::StreamExt;

#[path = "common/pki.rs"]
mod pki;
use pki::{pki, trust};

/// The relays of a test: b.example's (the one lied to) and c.example's (whose key the
/// fake borrows or fakes).
struct Setup {
    dir: tempfile::TempDir,
    p: pki::Pki,
    b: Relay,
    c: Relay,
    c_key: IdentityKey,
}

/// b.example's settings: a small frame budget on relay links, so a flood is one quickly.
fn b_settings() -> RelayConfig {
    RelayConfig {
        federation: Some(FederationConfig {
            link_rate_per_sec: 50,
            link_rate_burst: 100,
            // (The key is replaced by the one in the relay's data directory.)
            ..FederationConfig::new(IdentityKey::from_seed([7; 32]))
        }),
        ..RelayConfig::default()
    }
}

async fn setup(rt: Runtime) -> Setup {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let (dc, db) = (dir.path().join("rc"), dir.path().join("rb"));
    // c.example's relay never dials (it has nothing to send): its route is never used.
    let c = federating_relay(
        rt,
        "127.0.0.1:0",
        &dc,
        "c.example",
        &p.cert,
        &p.key,
        federation(
            &dc,
            "c.example",
            &[("b.example", "wss://127.0.0.1:9".into())],
            &p.ca,
        ),
        RelayConfig::default(),
    )
    .await;
    let b = federating_relay(
        rt,
        "127.0.0.1:0",
        &db,
        "b.example",
        &p.cert,
        &p.key,
        federation(&db, "b.example", &[("c.example", c.url())], &p.ca),
        b_settings(),
    )
    .await;
    let c_key = relay_key::load_or_create(&dc, "c.example").unwrap().key;
    Setup {
        dir,
        p,
        b,
        c,
        c_key,
    }
}

/// A fake relay's connection to b.example's relay, after its challenge.
struct Fake {
    ws: a2acp_tokio::ws::Ws,
    nonce: [u8; 32],
}

impl Fake {
    async fn dial(s: &Setup) -> Fake {
        let tls = ClientTls::new(Some(&s.p.ca)).unwrap();
        let mut ws = a2acp_tokio::ws::connect_with(&s.b.url(), Some(&tls))
            .await
            .unwrap();
        let nonce = loop {
            match next_frame(&mut ws).await {
                Some(RelayFrame::Challenge { nonce, domain, .. }) => {
                    assert_eq!(domain, "b.example");
                    break nonce;
                }
                Some(_) => {}
                None => panic!("closed before the challenge"),
            }
        };
        Fake { ws, nonce }
    }

    /// Answers the challenge as `domain` signing with `key`: the relay's answer.
    async fn auth(&mut self, domain: &str, key: &IdentityKey) -> Option<RelayFrame> {
        let ts = a2acp_runtime::now().as_millis();
        let k = key.public().to_bytes();
        let msg = link_signed_bytes(LINK_DIAL_LABEL, &self.nonce, "b.example", ts, domain, &k);
        self.send(&ClientFrame::LinkAuth {
            domain: domain.into(),
            key: k,
            ts,
            sig: key.sign(&msg),
            nonce: [5; 32],
        })
        .await;
        next_frame(&mut self.ws).await
    }

    async fn send(&mut self, f: &ClientFrame) {
        let _ = self
            .ws
            .send(Message::Text(
                String::from_utf8(f.to_bytes()).unwrap().into(),
            ))
            .await;
    }

    /// Whether the relay closes the link within 10 s (frames before that are skipped).
    async fn closed(&mut self) -> bool {
        let closed = async {
            loop {
                match self.ws.next().await {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                    Some(Ok(_)) => {}
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), closed)
            .await
            .is_ok()
    }
}

/// The next relay frame that is not a ping (10 s at most); `None` once closed.
async fn next_frame(ws: &mut a2acp_tokio::ws::Ws) -> Option<RelayFrame> {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a frame within 10 s");
        match m {
            Some(Ok(Message::Text(t))) => {
                let f = RelayFrame::from_bytes(t.as_bytes()).unwrap();
                if !matches!(f, RelayFrame::Ping { .. }) {
                    return Some(f);
                }
            }
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => {}
        }
    }
}

/// The honest local traffic of b.example: its own Alice and Bob, and the dinner between
/// them, started now; awaited by [`Honest::completes`].
struct Honest {
    alice: RtAgent,
    bob: RtAgent,
    hb: a2acp_runtime::home::Home,
    bob_addr: Address,
}

async fn honest(rt: Runtime, s: &Setup) -> Honest {
    let (alice_cfg, bob_cfg) = dinner_configs("b.example").unwrap();
    let ha = init_home(&s.dir.path().join("alice"), &alice_cfg, &s.b.url());
    let hb = init_home(&s.dir.path().join("bob"), &bob_cfg, &s.b.url());
    trust(&ha, &s.p.ca);
    trust(&hb, &s.p.ca);
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    Honest {
        alice,
        bob,
        hb,
        bob_addr: bob_cfg.address.clone(),
    }
}

impl Honest {
    /// Runs the dinner to completion (with `dinner_completes`' checks): how long it took.
    async fn completes(&self) -> Duration {
        let t = Instant::now();
        dinner_completes(&self.alice, &self.bob, &self.hb, self.bob_addr.clone()).await;
        t.elapsed()
    }

    async fn stop(self) {
        self.alice.stop().await;
        self.bob.stop().await;
    }
}

/// The resident memory of this process (relays, agents and fake alike), KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Warnings about relay links logged so far: lies and link refusals.
fn federation_warnings(logs: &std::sync::Mutex<Vec<u8>>) -> usize {
    let l = logs.lock().unwrap();
    String::from_utf8_lossy(&l)
        .lines()
        .filter(|l| l.contains("remote relay lied") || l.contains("relay link refused"))
        .count()
}

/// b.example's figures for c.example.
async fn c_stats(s: &Setup) -> a2acp_core::relay::federation::DomainStats {
    s.b.snapshot()
        .await
        .stats
        .federation
        .get("c.example")
        .cloned()
        .unwrap_or_default()
}

async fn stop(s: Setup) {
    s.b.stop(true).await;
    s.c.stop(true).await;
}

async fn a_key_its_domain_does_not_publish_is_refused(rt: Runtime) {
    let s = setup(rt).await;
    let honest = honest(rt, &s).await;
    let mut fake = Fake::dial(&s).await;
    let impostor = IdentityKey::from_seed([66; 32]);
    match fake.auth("c.example", &impostor).await {
        Some(RelayFrame::Error { code, message, .. }) => {
            assert_eq!(code, ErrorCode::AuthFailed, "{message}")
        }
        other => panic!("expected auth_failed, got {other:?}"),
    }
    assert!(fake.closed().await, "the link stays open");
    let st = c_stats(&s).await;
    assert_eq!((st.lies, st.links_in, st.received), (1, 0, 0), "{st:?}");
    // c.example's own key still links (one lie is not yet a refusal).
    let mut honest_c = Fake::dial(&s).await;
    let key = s.c_key.clone();
    let ok = honest_c.auth("c.example", &key).await;
    assert!(matches!(ok, Some(RelayFrame::LinkOk { .. })), "{ok:?}");
    println!("honest dinner on b.example: {:?}", honest.completes().await);
    honest.stop().await;
    stop(s).await;
}

async fn a_sender_not_on_the_linking_domain_is_rejected(rt: Runtime) {
    let s = setup(rt).await;
    let honest = honest(rt, &s).await;
    let mut fake = Fake::dial(&s).await;
    let key = s.c_key.clone();
    let ok = fake.auth("c.example", &key).await;
    assert!(matches!(ok, Some(RelayFrame::LinkOk { .. })), "{ok:?}");
    // Mallory of x.example, pushed by c.example's relay to Bob of b.example.
    let mallory = IdentityKey::from_seed([77; 32]);
    let env = ThreadSession::new([9; 32])
        .seal(
            &mallory,
            &Address::parse("agent:mallory@x.example").unwrap(),
            &honest.bob_addr,
            &IdentityKey::from_seed([78; 32]).public(),
            "thr_lie",
            Direction::FromInitiator,
            b"{}",
        )
        .unwrap();
    fake.send(&ClientFrame::Push { n: 1, low: 1, env }).await;
    match next_frame(&mut fake.ws).await {
        Some(RelayFrame::Rejected { n, code, .. }) => {
            assert_eq!((n, code), (1, ErrorCode::WrongSender))
        }
        other => panic!("expected rejected wrong_sender, got {other:?}"),
    }
    let st = c_stats(&s).await;
    assert_eq!((st.lies, st.received, st.refused), (1, 0, 1), "{st:?}");
    assert_eq!(s.b.snapshot().await.stats.queued, 0);
    println!("honest dinner on b.example: {:?}", honest.completes().await);
    // Bob's agent saw only the dinner.
    let r = ctl(&honest.hb, a2acp_runtime::control::Request::Threads).await;
    assert_eq!(r.data.as_array().unwrap().len(), 1, "{r:?}");
    honest.stop().await;
    stop(s).await;
}

/// Garbage (`flood` false) or a flood of well-formed frames past the link's budget, on
/// links authenticated with c.example's own key, again and again until b.example refuses
/// c.example (its reputation).
async fn misbehaving_link(rt: Runtime, flood: bool) {
    let logs = capture_logs();
    let s = setup(rt).await;
    let honest = honest(rt, &s).await;
    let key = s.c_key.clone();
    let (warned_before, rss_before) = (federation_warnings(&logs), rss_kib());
    let t0 = Instant::now();
    // The dinner runs while the fake misbehaves.
    let dinner = tokio::spawn(async move {
        let took = honest.completes().await;
        honest.stop().await;
        took
    });
    let mut links = 0;
    let refused = loop {
        let mut fake = Fake::dial(&s).await;
        match fake.auth("c.example", &key).await {
            Some(RelayFrame::LinkOk { .. }) => {}
            Some(RelayFrame::Error { code, .. }) => break code,
            other => panic!("expected link_ok or a refusal, got {other:?}"),
        }
        links += 1;
        assert!(
            links <= 5,
            "c.example still linked after {} links",
            links - 1
        );
        let (mut sink, mut source) = fake.ws.split();
        let reader = tokio::spawn(async move {
            while let Some(Ok(m)) = source.next().await {
                if matches!(m, Message::Close(_)) {
                    break;
                }
            }
        });
        let mut sent = 0u64;
        for i in 0..20_000u64 {
            let text = if flood {
                format!("{{\"t\":\"ping\",\"n\":{i}}}")
            } else {
                format!("\u{1}garbage {i} {{{{")
            };
            if sink.send(Message::Text(text.into())).await.is_err() {
                break;
            }
            sent += 1;
        }
        tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .expect("the relay closes the link")
            .unwrap();
        println!(
            "link {links}: {sent} frames sent before the relay closed it, after {:?}",
            t0.elapsed()
        );
    };
    let took = dinner.await.unwrap();
    let elapsed = t0.elapsed();
    let st = c_stats(&s).await;
    let warned = federation_warnings(&logs) - warned_before;
    let rss_after = rss_kib();
    println!(
        "{}: c.example refused ({}) after {links} link(s); honest dinner on b.example {took:?}; \
         {warned} warnings in {elapsed:?}; RSS {rss_before} → {rss_after} KiB; c.example: {st:?}",
        if flood { "flood" } else { "garbage" },
        refused.as_str()
    );
    assert_eq!(refused, ErrorCode::DomainRefused);
    assert!(st.link_refusals >= 1, "{st:?}");
    assert_eq!((st.links_in, st.received), (0, 0), "{st:?}");
    assert!(st.reputation <= -50, "{st:?}");
    // Logged at a bounded rate: the burst (10) and one a second.
    let bound = 10 + elapsed.as_secs() as usize + 2;
    assert!(
        warned <= bound,
        "{warned} warnings in {elapsed:?} (bound {bound})"
    );
    assert!(warned >= 1, "nothing logged");
    assert!(
        rss_after < rss_before + 64 * 1024,
        "memory grew {rss_before} → {rss_after} KiB"
    );
    stop(s).await;
}

async fn garbage_on_the_link_is_refused(rt: Runtime) {
    misbehaving_link(rt, false).await
}

async fn a_flood_on_the_link_is_refused(rt: Runtime) {
    misbehaving_link(rt, true).await
}

per_runtime!(
    a_key_its_domain_does_not_publish_is_refused,
    a_sender_not_on_the_linking_domain_is_rejected,
    garbage_on_the_link_is_refused,
    a_flood_on_the_link_is_refused
);
