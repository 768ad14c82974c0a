//! The attacks below the WebSocket protocol: garbage bytes, a slow request head,
//! half-open connections, one source's flood of connections.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::*;

const UPGRADE_REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: relay\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

impl Attack {
    /// The byte-level attacks: what one connection sends before holding it.
    pub(super) async fn drive_bytes(
        self,
        mut s: TcpStream,
        stop: &watch::Receiver<bool>,
        release: &watch::Receiver<bool>,
    ) {
        let mut buf = vec![0u8; 4096];
        match self {
            Attack::Garbage => {
                // Bytes 0x20..0x7e without CR or LF: never a request head.
                let chunk: Vec<u8> = (0..4096u32).map(|i| b' ' + (i * 7 % 94) as u8).collect();
                loop {
                    if *stop.borrow() {
                        break;
                    }
                    tokio::select! {
                        r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return },
                        _ = tokio::time::sleep(Duration::from_millis(20)) => {
                            if s.write_all(&chunk).await.is_err() { return; }
                        }
                    }
                }
            }
            Attack::Slowloris => {
                let head = b"GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Pad: ";
                let mut at = 0usize;
                loop {
                    if *stop.borrow() {
                        break;
                    }
                    let byte = [*head.get(at).unwrap_or(&b'a')];
                    at += 1;
                    if s.write_all(&byte).await.is_err() {
                        return;
                    }
                    tokio::select! {
                        r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return },
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
            Attack::HalfOpen | Attack::HalfOpenFin => {
                if s.write_all(b"GET /").await.is_err() {
                    return;
                }
                if self == Attack::HalfOpenFin {
                    let _ = s.shutdown().await;
                }
            }
            Attack::IpFlood => {
                if s.write_all(UPGRADE_REQUEST).await.is_err() {
                    return;
                }
            }
            // Driven frame by frame ([`Attack::drive`]); here they only hold the socket.
            Attack::JunkFlood | Attack::PingFlood | Attack::RegistrationFlood => {}
        }
        // Hold the socket, sending nothing, until the relay closes it.
        let mut release = release.clone();
        loop {
            tokio::select! {
                r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return },
                _ = release.wait_for(|r| *r) => return,
            }
        }
    }
}
