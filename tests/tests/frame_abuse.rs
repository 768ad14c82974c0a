//! Frame-level abuse of a relay over real sockets, on tokio and on smol (the attacks are
//! the reusable drivers of `a2acp_tests::attacks`): floods of junk frames, pings and acks
//! are closed with `too_many_refusals` after a bounded number of answers while the log
//! grows by a bounded amount and an honest negotiation completes; a registration flood
//! from one source stops at the limit per source while another source registers; messages
//! beyond the WebSocket limit get `too_large` and a close frame 1009. After its close
//! frame the relay lingers (the closing handshake): a client that answers with its own
//! close frame is let go at once, one that goes on sending is cut at the linger's byte
//! cap or its deadline.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use a2acp_core::link::{ClientFrame, ErrorCode, RelayFrame};
use a2acp_core::relay::RelayConfig;
use a2acp_runtime::linger;
use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::attacks::{self, send_on, After, Flood};
use a2acp_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Refusals a connection may collect before it is closed (the default).
const ALLOWANCE: u64 = 50;

/// The relay's last answers and its close frame all arrived: after its close frame the
/// relay reads past what the flood still sends until the client's close frame (its
/// closing handshake, docs/protocol.md relay link §6), so no reset overtakes them.
fn closed_for_refusals(f: &Flood) {
    assert!(f.closed, "{f:?}");
    assert_eq!(
        f.close,
        Some((1008, "too_many_refusals".to_string())),
        "{f:?}"
    );
    assert_eq!(f.last_error.as_deref(), Some("too_many_refusals"), "{f:?}");
    assert_eq!(f.errors.get("too_many_refusals"), Some(&1), "{f:?}");
}

per_runtime!(
    junk_flood_is_closed_and_logged_in_bounded_lines_while_agents_negotiate,
    ping_and_ack_floods_are_closed_past_the_frame_budget,
    registration_flood_stops_at_the_limit_of_its_source,
    messages_beyond_the_websocket_limit_get_too_large_and_close_1009,
    a_client_sending_on_after_the_close_frame_is_cut,
    a_client_answering_the_close_frame_is_let_go_at_once,
);

async fn junk_flood_is_closed_and_logged_in_bounded_lines_while_agents_negotiate(rt: Runtime) {
    let logs = capture_logs();
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let url = relay.url();
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &url);
    let bob_addr = bob_cfg.address.clone();
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    let log_before = logs.lock().unwrap().len();

    // 40 connections, 4 at a time, each writing up to 20 000 junk frames, while Alice
    // and Bob negotiate.
    const CONNS: u64 = 40;
    let flood = async {
        let mut all = Vec::new();
        for _ in 0..CONNS / 4 {
            let round = (0..4).map(|_| attacks::junk_flood(&url, 20_000));
            all.extend(futures_util::future::join_all(round).await);
        }
        all
    };
    let started = Instant::now();
    let (floods, _) = tokio::join!(flood, dinner_completes(&alice, &bob, &hb, bob_addr));
    let secs = started.elapsed().as_secs_f64();

    let mut malformed = 0;
    for f in &floods {
        closed_for_refusals(f);
        // The allowance, plus one per second of refill at most.
        let m = f.errors.get("malformed").copied().unwrap_or(0);
        assert!(
            (ALLOWANCE + 1..=ALLOWANCE + 1 + secs.ceil() as u64).contains(&m),
            "{m} malformed answers: {f:?}"
        );
        assert_eq!(f.answers, m + 1, "{f:?}");
        malformed += m;
    }
    let snap = relay.snapshot().await;
    assert_eq!(snap.stats.closed_for_refusals, CONNS);
    assert_eq!(
        snap.stats.refusals.get(&ErrorCode::Malformed).copied(),
        Some(malformed)
    );
    // Before, each refusal was a log line (~200 bytes): 2 000 refusals, 400 KB. Now: the
    // first 3 of a connection, a summary when it is closed, within 20 lines and 2 per
    // second for the whole relay — and the agents' own lines.
    let grown = logs.lock().unwrap().len() - log_before;
    eprintln!(
        "junk flood: {CONNS} connections, {malformed} malformed refusals, {} log lines held back, {grown} bytes of log in {secs:.1} s",
        snap.log_lines_suppressed
    );
    assert!(
        grown < 16_384 + 1_024 * secs.ceil() as usize,
        "{grown} bytes of log in {secs:.1} s"
    );
    assert!(
        snap.log_lines_suppressed >= malformed,
        "{} held back",
        snap.log_lines_suppressed
    );

    // And after the flood the relay still serves.
    let again = attacks::register_from(&url, "carol", 33, None).await;
    assert!(matches!(again, RelayFrame::AuthOk { .. }), "{again:?}");
    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).to_string();
    assert!(
        text.lines()
            .any(|l| l.contains("connection closed for abuse") && l.contains("too_many_refusals")),
        "{text}"
    );
}

async fn ping_and_ack_floods_are_closed_past_the_frame_budget(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let url = relay.url();
    let cfg = RelayConfig::default();
    let (burst, rate) = (
        u64::from(cfg.conn_rate_burst),
        u64::from(cfg.conn_rate_per_sec),
    );

    // Unauthenticated pings: answered up to the budget, then one `rate_limited`, then
    // the close.
    let started = Instant::now();
    let f = attacks::ping_flood(&url, 100_000).await;
    let secs = started.elapsed().as_secs_f64().ceil() as u64;
    closed_for_refusals(&f);
    assert_eq!(f.errors.get("rate_limited"), Some(&1), "{f:?}");
    let pongs = f.answers - 2;
    assert!(
        (burst..=burst + rate * secs).contains(&pongs),
        "{pongs} pongs in {secs} s"
    );
    assert!(f.sent < 100_000 || pongs < 100_000, "{f:?}");

    // Authenticated: the same for pings, and acks (a quarter of a token each) of ids
    // that were never delivered are not answered until the budget is spent.
    let f = attacks::authenticated_flood(&url, "pinger", 41, 100_000, |n| {
        String::from_utf8(ClientFrame::Ping { n }.to_bytes()).unwrap()
    })
    .await;
    closed_for_refusals(&f);
    assert_eq!(f.errors.get("rate_limited"), Some(&1), "{f:?}");
    let f = attacks::authenticated_flood(&url, "acker", 42, 100_000, |id| {
        String::from_utf8(ClientFrame::Ack { id: id + 1_000_000 }.to_bytes()).unwrap()
    })
    .await;
    closed_for_refusals(&f);
    assert_eq!(f.answers, 2, "only the refusal and the close: {f:?}");

    let snap = relay.snapshot().await;
    assert_eq!(snap.stats.closed_for_refusals, 3);
    // Everyone else is still served.
    let again = attacks::register_from(&url, "carol", 33, None).await;
    assert!(matches!(again, RelayFrame::AuthOk { .. }), "{again:?}");
    relay.stop(true).await;
}

async fn registration_flood_stops_at_the_limit_of_its_source(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let url = relay.url();
    let limit = u64::from(RelayConfig::default().registrations_per_source);
    let squatter = Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
    let r = attacks::registration_flood(&url, "squat", limit * 3, squatter).await;
    assert_eq!(r.registered, limit, "{r:?}");
    assert_eq!(r.limited, limit * 2, "{r:?}");
    assert_eq!(r.other, 0, "{r:?}");
    // An honest agent from another source registers, and the squatter's own addresses
    // still authenticate (registering again with the same key is not counted).
    let honest = attacks::register_from(&url, "alice", 7, None).await;
    assert!(matches!(honest, RelayFrame::AuthOk { .. }), "{honest:?}");
    let snap = relay.snapshot().await;
    assert_eq!(snap.stats.registered as u64, limit + 1);
    assert_eq!(snap.stats.registrations_limited, limit * 2);
    assert_eq!(
        snap.stats
            .refusals
            .get(&ErrorCode::RegistrationLimited)
            .copied(),
        Some(limit * 2)
    );
    assert_eq!(snap.stats.registration_sources, 2);
    relay.stop(true).await;
}

async fn messages_beyond_the_websocket_limit_get_too_large_and_close_1009(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let url = relay.url();
    for bytes in [300_000, 5_000_000] {
        let f = attacks::oversized_frame(&url, bytes).await;
        assert!(f.closed, "{bytes}: {f:?}");
        assert_eq!(f.errors.get("too_large"), Some(&1), "{bytes}: {f:?}");
        assert_eq!(f.answers, 1, "{bytes}: {f:?}");
        assert_eq!(
            f.close,
            Some((1009, "too_large".to_string())),
            "{bytes}: {f:?}"
        );
    }
    // Between the protocol's limit and the WebSocket's: refused, the connection lives.
    let f = attacks::oversized_frame(&url, 200_000).await;
    assert_eq!(f.errors.get("too_large"), Some(&1), "{f:?}");
    assert!(!f.closed, "{f:?}");
    let snap = relay.snapshot().await;
    assert_eq!(snap.stats.closed_oversized, 2);
    assert_eq!(snap.stats.refusals.get(&ErrorCode::TooLarge), Some(&3));
    relay.stop(true).await;
}

/// A WebSocket to the relay at `addr` over raw TCP, after the handshake (the head read
/// byte by byte, so that no frame is read with it).
async fn raw_ws(addr: SocketAddr) -> (OwnedReadHalf, OwnedWriteHalf) {
    let s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let (mut r, mut w) = s.into_split();
    w.write_all(
        b"GET / HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
          sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        r.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    (r, w)
}

/// A client frame (masked) with `opcode` and `payload`.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x5a, 0x17, 0xc3, 0x01];
    let mut v = vec![0x80 | opcode];
    if payload.len() < 126 {
        v.push(0x80 | payload.len() as u8);
    } else {
        v.push(0x80 | 127);
        v.extend_from_slice(&(payload.len() as u64).to_be_bytes());
    }
    v.extend_from_slice(&mask);
    v.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    v
}

/// Reads the relay's frames up to its close frame (5 s at most): the codes of its `error`
/// frames in order, and the close frame's code and reason. Then checks that the relay
/// closed its side after it (the end of the stream follows the close frame).
async fn read_to_close(r: &mut OwnedReadHalf) -> (Vec<String>, (u16, String)) {
    let read = async {
        let mut errors = Vec::new();
        loop {
            let mut h = [0u8; 2];
            r.read_exact(&mut h)
                .await
                .expect("a frame before the close frame");
            let len = match h[1] & 0x7f {
                126 => u64::from(r.read_u16().await.unwrap()),
                127 => r.read_u64().await.unwrap(),
                l => u64::from(l),
            };
            let mut p = vec![0u8; len as usize];
            r.read_exact(&mut p).await.unwrap();
            match h[0] & 0x0f {
                0x8 => {
                    let code = u16::from_be_bytes([p[0], p[1]]);
                    let reason = String::from_utf8_lossy(&p[2..]).to_string();
                    return (errors, (code, reason));
                }
                0x1 => {
                    if let Ok(RelayFrame::Error { code, .. }) = RelayFrame::from_bytes(&p) {
                        errors.push(code.as_str().to_string());
                    }
                }
                _ => {}
            }
        }
    };
    let got = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the relay's answers and close frame come at once");
    let end = tokio::time::timeout(Duration::from_secs(1), r.read(&mut [0u8; 16])).await;
    assert!(
        matches!(end, Ok(Ok(0))),
        "the relay closes its side after its close frame: {end:?}"
    );
    got
}

/// Waits (2 s at most) until the relay holds no connection.
async fn no_connection_left(relay: &Relay) {
    let started = Instant::now();
    while relay.connections().open > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            relay.connections()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A client announcing a message of 1 GiB gets `too_large` and the close frame 1009,
/// then goes on sending the message and never closes: the relay reads it past while it
/// lingers, and cuts it at the linger's byte cap (flooding) or deadline (trickling); its
/// slot is free then.
async fn a_client_sending_on_after_the_close_frame_is_cut(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    for after in [After::Floods, After::Trickles] {
        let (mut r, mut w) = raw_ws(relay.addr()).await;
        let mut huge = vec![0x82, 0x80 | 127];
        huge.extend_from_slice(&(1u64 << 30).to_be_bytes());
        huge.extend_from_slice(&[1, 2, 3, 4]);
        w.write_all(&huge).await.unwrap();
        let (errors, close) = read_to_close(&mut r).await;
        assert_eq!(errors, ["too_large"]);
        assert_eq!(close, (1009, "too_large".to_string()));
        assert_eq!(relay.connections().open, 1, "the relay lingers");
        let n = send_on(&mut w, after, Instant::now(), "the relay").await;
        match after {
            After::Floods => {
                eprintln!("a flood after the close frame cut after {n} bytes");
                assert!(
                    (linger::MAX_BYTES..linger::MAX_BYTES + (32 << 20)).contains(&n),
                    "{n} bytes written before the cut"
                );
            }
            After::Trickles => {
                eprintln!("a trickle after the close frame cut after {n} ms");
                let cap = linger::TIME.as_millis() as u64;
                assert!(
                    (cap / 2..cap + 3000).contains(&n),
                    "cut {n} ms after the close frame"
                );
            }
        }
        no_connection_left(&relay).await;
    }
    let snap = relay.snapshot().await;
    assert_eq!(snap.stats.closed_oversized, 2);
    relay.stop(true).await;
}

/// A client closed for junk reads every answer, `too_many_refusals` and the close frame,
/// though it sent more junk than the relay read; its own close frame ends the closing
/// handshake, and the relay lets it go at once.
async fn a_client_answering_the_close_frame_is_let_go_at_once(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let (mut r, mut w) = raw_ws(relay.addr()).await;
    let mut junk = Vec::new();
    for i in 0..ALLOWANCE + 30 {
        junk.extend(client_frame(0x1, format!("junk {i}").as_bytes()));
    }
    w.write_all(&junk).await.unwrap();
    let (errors, close) = read_to_close(&mut r).await;
    let malformed = errors.iter().filter(|e| *e == "malformed").count() as u64;
    assert!(
        (ALLOWANCE + 1..=ALLOWANCE + 3).contains(&malformed),
        "{errors:?}"
    );
    assert_eq!(errors.len() as u64, malformed + 1, "{errors:?}");
    assert_eq!(errors.last().map(String::as_str), Some("too_many_refusals"));
    assert_eq!(close, (1008, "too_many_refusals".to_string()));
    w.write_all(&client_frame(0x8, &[0x03, 0xe8]))
        .await
        .unwrap();
    let ms = send_on(&mut w, After::Trickles, Instant::now(), "the relay").await;
    assert!(
        ms < linger::TIME.as_millis() as u64 / 2,
        "cut {ms} ms after the client's close frame"
    );
    no_connection_left(&relay).await;
    assert_eq!(relay.snapshot().await.stats.closed_for_refusals, 1);
    relay.stop(true).await;
}
