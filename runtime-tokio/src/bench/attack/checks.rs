//! The checks the integration tests of both relay binaries run, and their macro.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::bench::BenchError;

use super::*;

/// A way to stay connected after the WebSocket upgrade without authenticating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterUpgrade {
    /// Send nothing.
    Silent,
    /// Send a protocol `ping` frame every 200 ms.
    ProtocolPings,
    /// Send a WebSocket ping every 200 ms.
    WebSocketPings,
}

/// Upgrades a connection to the relay at `url` and then never authenticates: how long the
/// relay took to close it (an error if it did not within `limit`).
pub async fn time_to_auth_close(
    url: &str,
    how: AfterUpgrade,
    limit: Duration,
) -> Result<Duration, BenchError> {
    use a2acp_core::link::ClientFrame;
    use async_tungstenite::tungstenite::{Bytes, Message};
    use futures_util::StreamExt;
    let ws = crate::ws::connect(url).await.map_err(|e| e.to_string())?;
    let t = Instant::now();
    let (mut sink, mut source) = ws.split();
    let closed = async {
        while let Some(Ok(m)) = source.next().await {
            if matches!(m, Message::Close(_)) {
                break;
            }
        }
    };
    let pinger = async {
        let mut n = 0u64;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            n += 1;
            let m = match how {
                AfterUpgrade::Silent => continue,
                AfterUpgrade::ProtocolPings => {
                    let text =
                        String::from_utf8(ClientFrame::Ping { n }.to_bytes()).unwrap_or_default();
                    Message::Text(text.into())
                }
                AfterUpgrade::WebSocketPings => {
                    Message::Ping(Bytes::from(n.to_le_bytes().to_vec()))
                }
            };
            if sink.send(m).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::time::timeout(limit, async {
        tokio::select! {
            _ = closed => {}
            _ = pinger => {}
        }
    })
    .await
    .map_err(|_| format!("{how:?}: still open after {} ms", limit.as_millis()))?;
    Ok(t.elapsed())
}

/// The attack settings of the integration tests: the relay under `ulimit -n 256` (so a
/// total cap of 192), 300 hostile connections (beyond the descriptor limit), 5 s of
/// attack, 2 s deadlines, a per-source cap of 32 for the ip-flood.
pub fn test_options() -> AttackOptions {
    AttackOptions {
        fd_limit: 256,
        connections: 300,
        duration: Duration::from_secs(5),
        deadline: Duration::from_secs(2),
        per_ip_cap: 32,
        frame_connections: 32,
        legacy: false,
    }
}

/// Runs `attack` against the relay binary `exe` with [`test_options`]: its report, or
/// its problems ([`AttackReport::problems`]) with the table row.
pub async fn check_attack(exe: &Path, attack: Attack) -> Result<AttackReport, BenchError> {
    let r = run_attack(exe, attack, &test_options()).await?;
    eprintln!("{TABLE_HEADER}{}", r.row());
    let p = r.problems();
    if p.is_empty() {
        Ok(r)
    } else {
        Err(format!("{}: {}\n{}", attack.name(), p.join("; "), r.row()))
    }
}

/// The relay binary `exe` with a 1 s `--auth-timeout` closes an upgraded connection that
/// never authenticates — silent, sending protocol pings, or sending WebSocket pings — in
/// about that time (between 0.9 s and 4 s): how long each took.
pub async fn check_auth_deadline(exe: &Path) -> Result<Vec<(AfterUpgrade, Duration)>, BenchError> {
    let flags = ["--auth-timeout", "1s"].map(String::from);
    let relay = RelayChild::spawn(exe, 256, &flags).await?;
    let mut out = Vec::new();
    for how in [
        AfterUpgrade::Silent,
        AfterUpgrade::ProtocolPings,
        AfterUpgrade::WebSocketPings,
    ] {
        let d = time_to_auth_close(&relay.url, how, Duration::from_secs(6)).await?;
        if d < Duration::from_millis(900) || d > Duration::from_secs(4) {
            return Err(format!("{how:?}: closed after {} ms", d.as_millis()));
        }
        out.push((how, d));
    }
    relay.kill().await;
    Ok(out)
}

/// The relay binary `exe` with `--max-connections-per-ip 2 --max-connections 3` and a 1 s
/// `--upgrade-timeout`: a third connection from one source is answered `503` and closed
/// at once while two are open; at the total cap a silent connection makes room for a new
/// one (and is closed); a half-open connection is closed by the deadline; a FIN is
/// noticed at once; and `/metrics` counts each.
pub async fn check_caps_and_deadline(exe: &Path) -> Result<(), BenchError> {
    let flags = [
        "--max-connections-per-ip",
        "2",
        "--max-connections",
        "3",
        "--upgrade-timeout",
        "1s",
    ]
    .map(String::from);
    let relay = RelayChild::spawn(exe, 256, &flags).await?;
    let a = IpAddr::V4(Ipv4Addr::new(127, 0, 3, 1));
    let b = IpAddr::V4(Ipv4Addr::new(127, 0, 3, 2));
    let closed_within = |mut s: TcpStream, d: Duration| async move {
        let mut got = Vec::new();
        let r = tokio::time::timeout(d, s.read_to_end(&mut got)).await;
        (r.is_ok(), String::from_utf8_lossy(&got).into_owned())
    };
    // Per source: the third is refused at once.
    let a1 = connect_from(a, relay.addr).await?;
    let mut a2 = connect_from(a, relay.addr).await?;
    a2.write_all(b"GET /").await.map_err(|e| e.to_string())?;
    let a3 = connect_from(a, relay.addr).await?;
    let (closed, text) = closed_within(a3, Duration::from_millis(500)).await;
    if !closed || !text.starts_with("HTTP/1.1 503") {
        return Err(format!(
            "third connection from one source: closed {closed}, `{text}`"
        ));
    }
    // Total cap (3): a new connection from another source closes the oldest one with an
    // incomplete request head (a1, silent) to make room.
    let b1 = connect_from(b, relay.addr).await?;
    let b2 = connect_from(b, relay.addr).await?;
    let (closed, _) = closed_within(a1, Duration::from_millis(500)).await;
    if !closed {
        return Err(
            "the oldest connection with an incomplete head was not closed to make room".into(),
        );
    }
    // The deadline closes a half-open connection (a2, 5 bytes then silence) and silent
    // ones (b1, b2) after 1 s.
    let t = Instant::now();
    let (c1, _) = closed_within(a2, Duration::from_secs(3)).await;
    let (c2, _) = closed_within(b1, Duration::from_secs(3)).await;
    let (c3, _) = closed_within(b2, Duration::from_secs(3)).await;
    if !(c1 && c2 && c3) || t.elapsed() < Duration::from_millis(300) {
        return Err(format!(
            "the 1 s deadline: closed {c1} {c2} {c3} after {} ms",
            t.elapsed().as_millis()
        ));
    }
    // A FIN after a partial request is noticed at once.
    let mut f = connect_from(b, relay.addr).await?;
    f.write_all(b"GET /").await.map_err(|e| e.to_string())?;
    f.shutdown().await.map_err(|e| e.to_string())?;
    let (closed, _) = closed_within(f, Duration::from_millis(500)).await;
    if !closed {
        return Err("a FIN after five bytes was not noticed at once".into());
    }
    let m = relay.metrics().await?;
    for (name, min) in [
        ("a2acp_relay_connections_refused_per_ip_total", 1.0),
        ("a2acp_relay_connections_evicted_total", 1.0),
        ("a2acp_relay_upgrade_timeouts_total", 3.0),
    ] {
        if metric(&m, name) < min {
            return Err(format!("{name} < {min}: {m:?}"));
        }
    }
    relay.kill().await;
    Ok(())
}

/// The attack tests of one relay binary (`tests/attacks.rs` of each runtime): one test per
/// [`Attack`], the authentication deadline over a real socket, and the caps. `$relay` is
/// the binary's path, e.g. `env!("CARGO_BIN_EXE_a2acp")`; the calling crate needs `tokio`
/// (with its `macros` and `rt-multi-thread` features) as a dev-dependency.
#[macro_export]
macro_rules! relay_attack_tests {
    ($relay:expr) => {
        async fn attack(a: $crate::bench::attack::Attack) {
            let relay = ::std::path::Path::new($relay);
            if let Err(e) = $crate::bench::attack::check_attack(relay, a).await {
                panic!("{e}");
            }
        }

        $crate::relay_attack_tests!(@attack
            garbage_bytes: Garbage,
            slowloris: Slowloris,
            half_open_beyond_the_fd_limit: HalfOpen,
            half_open_with_fin_beyond_the_fd_limit: HalfOpenFin,
            flood_from_one_source: IpFlood,
            junk_frame_flood: JunkFlood,
            ping_flood: PingFlood,
            registration_flood: RegistrationFlood,
        );

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn auth_deadline_fires_over_a_real_socket() {
            let r = $crate::bench::attack::check_auth_deadline(::std::path::Path::new($relay)).await;
            assert!(r.is_ok(), "{r:?}");
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn caps_refuse_make_room_and_the_deadline_closes() {
            let r =
                $crate::bench::attack::check_caps_and_deadline(::std::path::Path::new($relay)).await;
            assert!(r.is_ok(), "{r:?}");
        }
    };
    (@attack $($name:ident: $attack:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                attack($crate::bench::attack::Attack::$attack).await;
            }
        )*
    };
}
