//! The attacks in WebSocket frames, before authenticating: junk and `ping` floods, and
//! the flood of registrations of fresh addresses.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use a2acp_core::crypto::IdentityKey;
use a2acp_core::link::{ClientFrame, RelayFrame};
use a2acp_core::Address;
use async_tungstenite::tokio::TokioAdapter;
use async_tungstenite::tungstenite::Message;
use futures_util::StreamExt;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::*;

impl Attack {
    /// Upgrades `s`, then sends junk or `ping` frames as fast as it can (reading what the
    /// relay answers) until the relay closes the connection or `stop`; then holds it.
    pub(super) async fn flood_frames(
        self,
        s: TcpStream,
        stop: &watch::Receiver<bool>,
        release: &watch::Receiver<bool>,
        tally: &Tally,
    ) -> bool {
        let Some(ws) = upgrade(s).await else {
            return false;
        };
        let (mut sink, mut source) = ws.split();
        let closed = async {
            while let Some(Ok(m)) = source.next().await {
                if matches!(m, Message::Close(_)) {
                    break;
                }
            }
        };
        tokio::pin!(closed);
        let flood = async {
            let mut n = 0u64;
            while !*stop.borrow() {
                n += 1;
                let text = match self {
                    Attack::PingFlood => {
                        String::from_utf8_lossy(&ClientFrame::Ping { n }.to_bytes()).into_owned()
                    }
                    _ => format!("junk frame {n}: not JSON <<<>>>"),
                };
                if sink.send(Message::Text(text.into())).await.is_err() {
                    return false;
                }
                tally.frames.fetch_add(1, Ordering::Relaxed);
                if n.is_multiple_of(64) {
                    tokio::task::yield_now().await;
                }
            }
            true
        };
        tokio::select! {
            _ = &mut closed => return true,
            open = flood => if !open { return true },
        }
        // Stopped: send nothing more, hold the connection until the relay closes it.
        let mut release = release.clone();
        tokio::select! {
            _ = &mut closed => {}
            _ = release.wait_for(|r| *r) => {}
        }
        true
    }
}

/// Distinguishes the fresh keys and addresses of the registration flood.
static FRESH: AtomicU64 = AtomicU64::new(0);

/// Completes the WebSocket upgrade over `s` (5 s at most).
pub(super) async fn upgrade(s: TcpStream) -> Option<crate::ws::Ws> {
    let url = format!("ws://{}", s.peer_addr().ok()?);
    let _ = s.set_nodelay(true);
    tokio::time::timeout(
        Duration::from_secs(5),
        a2acp_runtime::ws::handshake(&url, crate::ws::MaybeTls::Plain(TokioAdapter::new(s))),
    )
    .await
    .ok()?
    .ok()
}

/// Upgrades `s` and registers fresh addresses (a fresh key each) on it, answering every
/// challenge, until one registration succeeds (then closes it), the relay closes it, or
/// `stop`.
pub(super) async fn flood_registrations(
    s: TcpStream,
    stop: &watch::Receiver<bool>,
    tally: &Tally,
) -> bool {
    let Some(mut ws) = upgrade(s).await else {
        return false;
    };
    loop {
        let m = match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
            Ok(Some(Ok(m))) => m,
            _ => return true,
        };
        let Message::Text(t) = m else {
            continue;
        };
        match RelayFrame::from_bytes(t.as_bytes()) {
            Ok(RelayFrame::Challenge { nonce, domain, .. }) => {
                if *stop.borrow() {
                    break;
                }
                let k = FRESH.fetch_add(1, Ordering::Relaxed);
                let mut seed = [0xf1u8; 32];
                seed[..8].copy_from_slice(&k.to_le_bytes());
                let id = IdentityKey::from_seed(seed);
                let Ok(address) = Address::new(&format!("flood{k}"), &domain) else {
                    break;
                };
                let f = crate::bench::register_frame(&id, &address, &nonce, &domain);
                let text = String::from_utf8_lossy(&f.to_bytes()).into_owned();
                if ws.send(Message::Text(text.into())).await.is_err() {
                    return true;
                }
                tally.frames.fetch_add(1, Ordering::Relaxed);
            }
            Ok(RelayFrame::AuthOk { .. }) => {
                tally.registered.fetch_add(1, Ordering::Relaxed);
                break;
            }
            Ok(RelayFrame::Error { code, .. }) if code.as_str() == "registration_limited" => {
                tally.registration_limited.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
    true
}
