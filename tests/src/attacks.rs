//! Frame-level attacks on a relay, each driven against a relay URL (`ws://host:port`) so
//! that in-process tests and the real-process attack bench can share them: a flood of
//! junk frames, a flood of pings, a flood of registrations from one source, and messages
//! beyond the relay's WebSocket limit. Each returns what the attacker saw.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use a2acp_core::crypto::IdentityKey;
use a2acp_core::link::{challenge_signed_bytes, ClientFrame, RelayFrame, REGISTER_LABEL};
use a2acp_core::Address;
use async_tungstenite::tokio::TokioAdapter;
use async_tungstenite::tungstenite::protocol::WebSocketConfig;
use async_tungstenite::tungstenite::Message;
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpSocket, TcpStream};

/// A WebSocket to a relay, as the attacks use it.
pub type Ws = a2acp_tokio::ws::Ws;

/// Connects to the relay at `url`, from the local address `bind` if given (on Linux every
/// 127.0.0.0/8 address is local, so 127.0.0.2 is another source for a relay on 127.0.0.1).
pub async fn connect_from(url: &str, bind: Option<IpAddr>) -> Ws {
    connect_with(url, bind, a2acp_runtime::ws::config()).await
}

/// [`connect_from`] with WebSocket settings of its own (e.g. to write messages an agent's
/// settings would refuse to write).
pub async fn connect_with(url: &str, bind: Option<IpAddr>, config: WebSocketConfig) -> Ws {
    let (host, port) = a2acp_runtime::config::relay_url(url).expect("relay url");
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await
        .expect("resolve the relay")
        .next()
        .expect("an address");
    let tcp: TcpStream = match bind {
        None => TcpStream::connect(addr)
            .await
            .expect("connect to the relay"),
        Some(ip) => {
            let socket = if ip.is_ipv4() {
                TcpSocket::new_v4()
            } else {
                TcpSocket::new_v6()
            }
            .expect("socket");
            socket
                .bind(std::net::SocketAddr::new(ip, 0))
                .expect("bind the source address");
            socket.connect(addr).await.expect("connect to the relay")
        }
    };
    let _ = tcp.set_nodelay(true);
    let (ws, _) = async_tungstenite::client_async_with_config(
        url,
        a2acp_tokio::ws::MaybeTls::Plain(TokioAdapter::new(tcp)),
        Some(config),
    )
    .await
    .expect("WebSocket handshake");
    ws
}

/// What one flooding connection saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flood {
    /// Frames written before the relay ended the connection (or all of them).
    pub sent: u64,
    /// Frames the relay sent, pings and the challenge excepted.
    pub answers: u64,
    /// `error` frames among them, by code.
    pub errors: BTreeMap<String, u64>,
    /// The last `error` frame's code.
    pub last_error: Option<String>,
    /// The relay's close frame: code and reason.
    pub close: Option<(u16, String)>,
    /// Whether the relay ended the connection (a close frame, the end of the stream or a
    /// reset) before it was silent for 10 s (3 s after an oversized frame).
    pub closed: bool,
}

/// Writes `frames` frames made by `frame(i)` on one connection as fast as the relay reads
/// them (after `setup`'s own frames, e.g. an authentication, whose answers are counted
/// too), while reading everything the relay sends; stops early when the relay ends the
/// connection.
pub async fn flood(ws: Ws, frames: u64, frame: impl FnMut(u64) -> String + Send) -> Flood {
    flood_until_quiet(ws, frames, frame, Duration::from_secs(10)).await
}

/// [`flood`], giving up on the relay's answers after `quiet` without any.
async fn flood_until_quiet(
    ws: Ws,
    frames: u64,
    mut frame: impl FnMut(u64) -> String + Send,
    quiet: Duration,
) -> Flood {
    let (mut sink, mut source) = ws.split();
    let reader = async move {
        let mut f = Flood::default();
        loop {
            let m = tokio::time::timeout(quiet, source.next()).await;
            match m {
                Err(_) => break,
                Ok(None) | Ok(Some(Err(_))) => {
                    f.closed = true;
                    break;
                }
                Ok(Some(Ok(Message::Close(c)))) => {
                    f.close = c.map(|c| (u16::from(c.code), c.reason.to_string()));
                    f.closed = true;
                    break;
                }
                Ok(Some(Ok(Message::Text(t)))) => match RelayFrame::from_bytes(t.as_bytes()) {
                    Ok(RelayFrame::Ping { .. } | RelayFrame::Challenge { .. }) => {}
                    Ok(RelayFrame::Error { code, .. }) => {
                        f.answers += 1;
                        *f.errors.entry(code.as_str().to_string()).or_insert(0) += 1;
                        f.last_error = Some(code.as_str().to_string());
                    }
                    _ => f.answers += 1,
                },
                Ok(Some(Ok(_))) => {}
            }
        }
        f
    };
    let writer = async move {
        let mut sent = 0u64;
        for i in 0..frames {
            if sink.feed(Message::Text(frame(i).into())).await.is_err() {
                break;
            }
            sent += 1;
            if i % 64 == 63 && sink.flush().await.is_err() {
                break;
            }
        }
        let _ = sink.flush().await;
        sent
    };
    let (mut f, sent) = tokio::join!(reader, writer);
    f.sent = sent;
    f
}

/// An unauthenticated connection writing `frames` frames that are not JSON.
pub async fn junk_flood(url: &str, frames: u64) -> Flood {
    let ws = connect_from(url, None).await;
    flood(ws, frames, |i| format!("junk {i} junk junk junk")).await
}

/// An unauthenticated connection writing `frames` pings.
pub async fn ping_flood(url: &str, frames: u64) -> Flood {
    let ws = connect_from(url, None).await;
    flood(ws, frames, |n| {
        String::from_utf8(ClientFrame::Ping { n }.to_bytes()).unwrap_or_default()
    })
    .await
}

/// A connection authenticated as a new address `agent:<user>@<domain>` (identity from
/// `seed`) writing `frames` frames made by `frame(i)`.
pub async fn authenticated_flood(
    url: &str,
    user: &str,
    seed: u8,
    frames: u64,
    frame: impl FnMut(u64) -> String + Send,
) -> Flood {
    let mut ws = connect_from(url, None).await;
    let (nonce, domain) = challenge(&mut ws).await;
    let id = IdentityKey::from_seed([seed; 32]);
    let address = Address::new(user, &domain).expect("a valid user name");
    let f = register_frame(&id, &address, &nonce, &domain);
    ws.send(Message::Text(f.into())).await.expect("register");
    loop {
        match next_frame(&mut ws).await {
            Some(RelayFrame::AuthOk { .. }) => break,
            Some(RelayFrame::Ping { .. }) => {}
            other => panic!("expected auth_ok, got {other:?}"),
        }
    }
    flood(ws, frames, frame).await
}

/// What a registration flood achieved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registrations {
    /// New addresses the relay registered.
    pub registered: u64,
    /// Registrations refused with `registration_limited`.
    pub limited: u64,
    /// Other answers (refusals, closed connections).
    pub other: u64,
}

/// Registers `count` new addresses `agent:<prefix><i>@<domain of the relay>`, one
/// connection each, from the local address `bind` (default 127.0.0.1).
pub async fn registration_flood(
    url: &str,
    prefix: &str,
    count: u64,
    bind: Option<IpAddr>,
) -> Registrations {
    let mut r = Registrations::default();
    for i in 0..count {
        let mut ws = connect_from(url, bind).await;
        let (nonce, domain) = challenge(&mut ws).await;
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&i.to_le_bytes());
        seed[8..8 + prefix.len().min(24)]
            .copy_from_slice(&prefix.as_bytes()[..prefix.len().min(24)]);
        let id = IdentityKey::from_seed(seed);
        let address = Address::new(&format!("{prefix}{i}"), &domain).expect("a valid user name");
        let f = register_frame(&id, &address, &nonce, &domain);
        if ws.send(Message::Text(f.into())).await.is_err() {
            r.other += 1;
            continue;
        }
        match next_frame(&mut ws).await {
            Some(RelayFrame::AuthOk { .. }) => r.registered += 1,
            Some(RelayFrame::Error { code, .. }) if code.as_str() == "registration_limited" => {
                r.limited += 1
            }
            _ => r.other += 1,
        }
        let _ = ws.close(None).await;
    }
    r
}

/// Registers `agent:<user>@<domain>` as an agent would (identity from `seed`), from
/// `bind`: the relay's answer (`auth_ok`, or the `error`).
pub async fn register_from(url: &str, user: &str, seed: u8, bind: Option<IpAddr>) -> RelayFrame {
    let mut ws = connect_from(url, bind).await;
    let (nonce, domain) = challenge(&mut ws).await;
    let id = IdentityKey::from_seed([seed; 32]);
    let address = Address::new(user, &domain).expect("a valid user name");
    let f = register_frame(&id, &address, &nonce, &domain);
    ws.send(Message::Text(f.into())).await.expect("register");
    let answer = loop {
        match next_frame(&mut ws).await {
            Some(RelayFrame::Ping { .. }) => {}
            Some(f) => break f,
            None => panic!("the relay closed the connection"),
        }
    };
    let _ = ws.close(None).await;
    answer
}

/// Sends one text message of `bytes` bytes (a `ping` padded to that size) on a fresh
/// connection, and reads what the relay answers until it ends the connection.
pub async fn oversized_frame(url: &str, bytes: usize) -> Flood {
    // tungstenite's defaults: no limit on what this side writes.
    let mut ws = connect_with(url, None, WebSocketConfig::default()).await;
    let head = r#"{"t":"ping","n":1,"pad":""#;
    let pad = bytes.saturating_sub(head.len() + 2);
    let text = format!("{head}{}\"}}", "x".repeat(pad));
    // The relay may end the connection while the message is still being written.
    let sent = u64::from(ws.send(Message::Text(text.into())).await.is_ok());
    let mut f = flood_until_quiet(ws, 0, |_| String::new(), Duration::from_secs(3)).await;
    f.sent = sent;
    f
}

async fn challenge(ws: &mut Ws) -> ([u8; 32], String) {
    match next_frame(ws).await {
        Some(RelayFrame::Challenge { nonce, domain, .. }) => (nonce, domain),
        other => panic!("expected a challenge, got {other:?}"),
    }
}

/// The next frame (10 s at most), `None` if the connection ended.
async fn next_frame(ws: &mut Ws) -> Option<RelayFrame> {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .ok()??
            .ok()?;
        if let Message::Text(t) = m {
            return RelayFrame::from_bytes(t.as_bytes()).ok();
        }
    }
}

fn register_frame(id: &IdentityKey, address: &Address, nonce: &[u8; 32], domain: &str) -> String {
    let ts = a2acp_runtime::now().as_millis();
    let key = id.public().to_bytes();
    let msg = challenge_signed_bytes(REGISTER_LABEL, nonce, domain, ts, address, Some(&key));
    let f = ClientFrame::Register {
        address: address.clone(),
        key,
        ts,
        sig: id.sign(&msg),
    };
    String::from_utf8(f.to_bytes()).unwrap_or_default()
}

/// How a client goes on sending after a listener refused it (or a relay sent its close
/// frame), to see the lingering close cut it (SPEC-NOTES "Refusals a client can read").
#[derive(Debug, Clone, Copy)]
pub enum After {
    /// Writes as fast as it can: cut once the listener has drained its byte cap; the
    /// answer is how many bytes it wrote.
    Floods,
    /// Writes one byte every 100 ms: cut at the listener's deadline; the answer is how
    /// many milliseconds after `since` it was cut.
    Trickles,
}

/// Writes on `w` as `after` says until the other side cuts the connection (30 s at most,
/// or the test fails saying `who` never cut it).
pub async fn send_on(
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    after: After,
    since: std::time::Instant,
    who: &str,
) -> u64 {
    use tokio::io::AsyncWriteExt;
    let mut written = 0u64;
    let send = async {
        match after {
            After::Floods => {
                let chunk = vec![b'x'; 64 * 1024];
                while w.write_all(&chunk).await.is_ok() {
                    written += chunk.len() as u64;
                }
            }
            After::Trickles => {
                while w.write_all(b"x").await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), send)
        .await
        .unwrap_or_else(|_| panic!("{who} cuts a client that goes on sending"));
    match after {
        After::Floods => written,
        After::Trickles => since.elapsed().as_millis() as u64,
    }
}
