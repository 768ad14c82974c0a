//! Misbehaving clients — malformed frames, oversized frames, bad signatures, a replayed
//! or foreign auth response, a flood past the rate limit — are each refused with a clear
//! error frame and logged (the first refusals of a connection one by one, the others
//! counted), while the relay keeps serving everyone else — on tokio and on smol.

use a2acp_core::link::{ClientFrame, ErrorCode, RelayFrame};
use a2acp_core::relay::RelayConfig;
use a2acp_tests::*;

fn expect_error(f: RelayFrame, code: ErrorCode) -> Option<u64> {
    match f {
        RelayFrame::Error {
            code: c,
            seq,
            message,
        } => {
            assert_eq!(c, code, "{message}");
            assert!(!message.is_empty());
            seq
        }
        other => panic!("expected {code:?}, got {other:?}"),
    }
}

per_runtime!(every_refusal_has_an_error_frame_and_a_log_line);

async fn every_refusal_has_an_error_frame_and_a_log_line(rt: Runtime) {
    let logs = capture_logs();
    let dir = tmp();
    let relay = rt
        .relay_with(
            "127.0.0.1:0",
            &dir.path().join("relay"),
            RelayConfig {
                rate_per_sec: 5,
                rate_burst: 20,
                ..RelayConfig::default()
            },
        )
        .await;
    let url = relay.url();
    // Two well-behaved agents.
    let good1 = Raw::register(&url, "agent:good1@localhost", 11).await;
    let good2 = Raw::register(&url, "agent:good2@localhost", 12).await;
    let good2_key = good2.identity.public();
    let good2_addr = good2.address.clone();
    let mut good2 = good2;

    // Malformed.
    let mut m = Raw::register(&url, "agent:mallory@localhost", 13).await;
    m.send_text("this is not json".into()).await;
    expect_error(m.recv().await, ErrorCode::Malformed);
    m.send_text(r#"{"t":"launch_missiles"}"#.into()).await;
    expect_error(m.recv().await, ErrorCode::Malformed);

    // Oversized (over the protocol's 128 KiB, under the WebSocket cut-off): refused,
    // and the connection lives on.
    m.send_text(format!(
        r#"{{"t":"ping","n":1,"pad":"{}"}}"#,
        "x".repeat(140_000)
    ))
    .await;
    expect_error(m.recv().await, ErrorCode::TooLarge);
    m.send(&ClientFrame::Ping { n: 7 }).await;
    assert_eq!(m.recv().await, RelayFrame::Pong { n: 7 });

    // Bad signature.
    let mut env = m.envelope(&good2_addr, &good2_key, "thr_x", b"hello");
    env.sig[0] ^= 1;
    m.send(&ClientFrame::Send { seq: 5, env }).await;
    assert_eq!(
        expect_error(m.recv().await, ErrorCode::BadSignature),
        Some(5)
    );

    // Someone else's envelope (wrong sender).
    let env = good1.envelope(&good2_addr, &good2_key, "thr_y", b"hello");
    m.send(&ClientFrame::Send { seq: 6, env }).await;
    assert_eq!(
        expect_error(m.recv().await, ErrorCode::WrongSender),
        Some(6)
    );

    // A replayed auth response: signed for another connection's challenge.
    let mut c1 = Raw::connect(&url, "agent:good1@localhost", 11).await;
    let stolen = c1.auth_frame("localhost");
    let mut c2 = Raw::connect(&url, "agent:good1@localhost", 11).await;
    c2.send(&stolen).await;
    expect_error(c2.recv().await, ErrorCode::AuthFailed);
    assert!(
        matches!(c2.recv().await, RelayFrame::Challenge { .. }),
        "a fresh challenge follows"
    );
    // The same answer twice on its own connection: the challenge is single-use.
    c1.send(&stolen).await;
    assert!(matches!(c1.recv().await, RelayFrame::AuthOk { .. }));
    // (c1 replaced good1's first connection; good1 reconnects below.)
    drop(c1);
    // A foreign auth: signed for another relay's domain.
    let mut c3 = Raw::connect(&url, "agent:good2@localhost", 12).await;
    let foreign = c3.auth_frame("evil.example");
    c3.send(&foreign).await;
    expect_error(c3.recv().await, ErrorCode::AuthFailed);
    assert!(matches!(c3.recv().await, RelayFrame::Challenge { .. }));
    // Not authenticated yet: sending is refused.
    let env = good2.envelope(&good2_addr, &good2_key, "thr_z", b"x");
    c3.send(&ClientFrame::Send { seq: 1, env }).await;
    assert_eq!(
        expect_error(c3.recv().await, ErrorCode::NotAuthenticated),
        Some(1)
    );

    // A flood past the rate limit (burst 20).
    for _ in 0..40 {
        m.send(&ClientFrame::Lookup {
            address: good2_addr.clone(),
        })
        .await;
    }
    let mut limited = 0;
    for _ in 0..40 {
        if let RelayFrame::Error {
            code: ErrorCode::RateLimited,
            ..
        } = m.recv().await
        {
            limited += 1;
        }
    }
    assert!(limited >= 15, "only {limited} refused");

    // Beyond the WebSocket limit: refused, and the connection is closed.
    let mut big = Raw::register(&url, "agent:huge@localhost", 14).await;
    // The relay may end the connection while the message is still being written.
    let _ = big.try_send_text("y".repeat(600_000)).await;
    expect_error(big.recv().await, ErrorCode::TooLarge);
    assert!(
        big.closed_by_relay().await,
        "an over-limit message closes the connection"
    );

    // Everyone else is still served: good1 (reconnected) sends to good2, who receives it.
    let mut good1b = Raw::connect(&url, "agent:good1@localhost", 11).await;
    let f = good1b.auth_frame("localhost");
    good1b.send(&f).await;
    assert!(matches!(good1b.recv().await, RelayFrame::AuthOk { .. }));
    let env = good1b.envelope(&good2_addr, &good2_key, "thr_ok", b"still here");
    good1b
        .send(&ClientFrame::Send {
            seq: 1,
            env: env.clone(),
        })
        .await;
    assert!(matches!(
        good1b.recv().await,
        RelayFrame::Accepted { seq: 1, .. }
    ));
    match good2.recv().await {
        RelayFrame::Deliver { env: got, .. } => assert_eq!(got, env),
        other => panic!("{other:?}"),
    }
    drop(good1);

    let snap = relay.snapshot().await;
    for code in [
        ErrorCode::Malformed,
        ErrorCode::TooLarge,
        ErrorCode::BadSignature,
        ErrorCode::WrongSender,
        ErrorCode::AuthFailed,
        ErrorCode::NotAuthenticated,
        ErrorCode::RateLimited,
    ] {
        assert!(
            snap.stats.refusals.get(&code).copied().unwrap_or(0) > 0,
            "{code:?} not counted"
        );
    }
    relay.stop(true).await;
    // The first refusals of a connection are logged one by one, the others counted in one
    // line when it ends (here: when the relay stops).
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
    for code in [
        "malformed",
        "too_large",
        "bad_signature",
        "wrong_sender",
        "auth_failed",
        "not_authenticated",
        "rate_limited",
    ] {
        assert!(
            text.lines().any(|l| l.contains("refused")
                && (l.contains(&format!("code=\"{code}\""))
                    || l.contains(&format!("code={code}")))
                || l.contains("not logged one by one") && l.contains(code)),
            "no log line for {code}:\n{text}"
        );
    }
    assert!(
        text.lines()
            .any(|l| l.contains("connection closed for abuse") && l.contains("too_large")),
        "{text}"
    );
}
