//! TLS end to end over real loopback sockets, on both runtimes: a private CA and a leaf
//! certificate for `localhost` and 127.0.0.1 are made here (as `a2acp dev-ca` makes them); the relay serves TLS
//! (`--tls-cert`/`--tls-key`); agents trusting the CA (`relay_ca` in config.toml) complete
//! the dinner over `wss://` and `/healthz` and `/metrics` answer over https; an agent
//! without the CA refuses the relay with a clear error and keeps retrying; a client that
//! stalls the TLS handshake is closed by the HTTP-phase deadline; unusable certificate and
//! key files are refused with errors naming them. Plain `ws://` is tested by `dinner.rs`
//! and every other test; the benchmark `cargo bench -p a2acp-tests --bench wss_vs_ws`
//! measures both in one run.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use a2acp_runtime::admission::AdmissionConfig;
use a2acp_runtime::scripted::{dinner_configs, ScriptedUser};
use a2acp_runtime::tls::{ClientTls, ServerTls};
use a2acp_runtime::ws::ConnectError;
use a2acp_tests::*;
use async_tungstenite::tokio::TokioAdapter;
use futures_util::io::{AsyncReadExt, AsyncWriteExt};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[path = "common/pki.rs"]
mod pki;
use pki::{pki, trust, Pki};

/// A relay on `rt` serving TLS with the PKI's leaf, with this HTTP-phase deadline.
async fn tls_relay(rt: Runtime, dir: &Path, p: &Pki, upgrade_timeout: Duration) -> Relay {
    let tls = ServerTls::from_files(&p.cert, &p.key).unwrap();
    let conns = AdmissionConfig {
        upgrade_timeout,
        ..AdmissionConfig::default()
    };
    rt.relay_tls("127.0.0.1:0", &dir.join("relay"), conns, Some(tls))
        .await
}

/// `GET path` over https, trusting `ca`: the whole answer (the relay closes after it).
async fn https_get(addr: SocketAddr, ca: &Path, path: &str) -> String {
    let tls = ClientTls::new(Some(ca)).unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut s = tls
        .connect("localhost", TokioAdapter::new(tcp))
        .await
        .unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    s.flush().await.unwrap();
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        // The relay closes after its answer; a close without close_notify ends it too.
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("the relay answers within 10 s");
    String::from_utf8_lossy(&out).into_owned()
}

/// Alice (through `wss://localhost:PORT`, so with SNI) and Bob (through
/// `wss://127.0.0.1:PORT`, an IP address: no SNI) trust the private CA and negotiate
/// dinner through a relay serving TLS; `/healthz` and `/metrics` answer over https.
async fn dinner_over_wss(rt: Runtime) {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let relay = tls_relay(rt, dir.path(), &p, Duration::from_secs(10)).await;
    assert!(
        relay.url().starts_with("wss://127.0.0.1:"),
        "{}",
        relay.url()
    );
    let port = relay.addr().port();
    let (alice_cfg, bob_cfg) = dinner_configs("localhost").unwrap();
    let bob_addr = bob_cfg.address.clone();
    let ha = init_home(
        &dir.path().join("alice"),
        &alice_cfg,
        &format!("wss://localhost:{port}"),
    );
    let hb = init_home(&dir.path().join("bob"), &bob_cfg, &relay.url());
    trust(&ha, &p.ca);
    trust(&hb, &p.ca);
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;

    dinner_completes(&alice, &bob, &hb, bob_addr).await;
    assert_eq!(relay.snapshot().await.stats.routed_total, 8);

    let health = https_get(relay.addr(), &p.ca, "/healthz").await;
    let metrics = https_get(relay.addr(), &p.ca, "/metrics").await;
    assert_health_and_metrics(&health, &metrics, 8);
    assert_eq!(relay.connections().tls_handshake_failures, 0);

    alice.stop().await;
    bob.stop().await;
    relay.stop(true).await;
    assert_no_dinner_plaintext(&dir.path().join("relay"));
}

/// Connects once with the runtime's own client, trusting the web PKI roots only.
async fn connect_once(rt: Runtime, url: &str) -> Result<(), ConnectError> {
    match rt {
        Runtime::Tokio => a2acp_tokio::ws::connect(url).await.map(drop),
        Runtime::Smol => a2acp_smol::ws::connect(url).await.map(drop),
    }
}

/// An agent that does not trust the relay's private CA refuses it — a typed TLS error
/// whose text says what to do — and keeps retrying with its backoff instead of stopping;
/// given the CA (`relay_ca`), the same home connects.
async fn agent_without_ca_refuses_the_relay(rt: Runtime) {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let relay = tls_relay(rt, dir.path(), &p, Duration::from_secs(10)).await;

    let e = connect_once(rt, &relay.url()).await.unwrap_err();
    assert!(matches!(e, ConnectError::Tls { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains(&relay.url()) && text.contains("--ca") && text.contains("relay_ca"),
        "{text}"
    );

    let (alice_cfg, _) = dinner_configs("localhost").unwrap();
    let ha = init_home(&dir.path().join("alice"), &alice_cfg, &relay.url());
    let before = relay.connections().tls_handshake_failures;
    let alice = rt.agent(&ha, "alice", None);
    // Backoff 50–400 ms in the harness: several attempts within 3 s, none succeeding.
    eventually(10, "three refused handshakes", || async {
        (relay.connections().tls_handshake_failures >= before + 3).then_some(())
    })
    .await;
    assert!(!online(&alice).await);
    let still = relay.connections().tls_handshake_failures;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        relay.connections().tls_handshake_failures > still,
        "the agent keeps retrying"
    );
    assert!(!online(&alice).await);
    alice.stop().await;

    trust(&ha, &p.ca);
    let alice = rt.agent(&ha, "alice", None);
    wait_online(&alice).await;
    alice.stop().await;
    relay.stop(true).await;
}

/// Reads until the relay closes the connection (end of stream or an error): how long
/// that took, or `None` if it is still open after `limit`.
async fn closed_within(s: &mut tokio::net::TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    let read = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(limit, read)
        .await
        .ok()
        .map(|_| start.elapsed())
}

/// Clients that stall the TLS handshake — connected but silent, the first bytes of a
/// ClientHello then silence, a ClientHello trickled a byte at a time — are closed by the
/// HTTP-phase deadline (`--upgrade-timeout`, here 500 ms) like a slowloris, counted in
/// `a2acp_relay_upgrade_timeouts_total`; the relay still serves an agent afterwards.
async fn tls_handshake_stall_is_closed_by_the_deadline(rt: Runtime) {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let deadline = Duration::from_millis(500);
    let relay = tls_relay(rt, dir.path(), &p, deadline).await;
    let addr = relay.addr();

    // Silent.
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A TLS record header announcing a 512-byte handshake message, then nothing.
    let mut partial = tokio::net::TcpStream::connect(addr).await.unwrap();
    partial
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc])
        .await
        .unwrap();
    // One byte every 100 ms: never a complete ClientHello before the deadline.
    let mut trickle = tokio::net::TcpStream::connect(addr).await.unwrap();
    let trickled = async {
        let start = Instant::now();
        let hello = [
            0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
        ];
        for b in hello.iter().cycle().take(100) {
            if trickle.write_all(&[*b]).await.is_err() {
                return Some(start.elapsed());
            }
            if let Ok(Ok(0) | Err(_)) =
                tokio::time::timeout(Duration::from_millis(100), trickle.read(&mut [0u8; 64])).await
            {
                return Some(start.elapsed());
            }
        }
        None
    };
    let (a, b, c) = tokio::join!(
        closed_within(&mut silent, Duration::from_secs(5)),
        closed_within(&mut partial, Duration::from_secs(5)),
        trickled,
    );
    for (what, t) in [("silent", a), ("partial ClientHello", b), ("trickle", c)] {
        let t = t.unwrap_or_else(|| panic!("{what}: still open after 5 s"));
        assert!(
            t >= deadline - Duration::from_millis(100),
            "{what}: closed after {t:?}, before the deadline"
        );
    }
    eventually(5, "three upgrade timeouts counted", || async {
        (relay.connections().upgrade_timeouts >= 3).then_some(())
    })
    .await;

    let (alice_cfg, _) = dinner_configs("localhost").unwrap();
    let ha = init_home(&dir.path().join("alice"), &alice_cfg, &relay.url());
    trust(&ha, &p.ca);
    let alice = rt.agent(&ha, "alice", None);
    wait_online(&alice).await;
    alice.stop().await;
    relay.stop(true).await;
}

/// A plain `ws://` client at a relay serving TLS, or a `wss://` client at a plain relay,
/// fails cleanly (a typed error, no panic, within the deadline), and the TLS relay counts
/// the failed handshake.
async fn wrong_scheme_fails_cleanly(rt: Runtime) {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let relay = tls_relay(rt, dir.path(), &p, Duration::from_secs(10)).await;
    let plain_url = relay.url().replacen("wss://", "ws://", 1);
    let e = connect_once(rt, &plain_url).await.unwrap_err();
    assert!(matches!(e, ConnectError::Handshake { .. }), "{e:?}");
    eventually(5, "a failed TLS handshake counted", || async {
        (relay.connections().tls_handshake_failures >= 1).then_some(())
    })
    .await;
    relay.stop(true).await;

    // A plain relay reads the ClientHello as an HTTP head that never completes: the
    // HTTP-phase deadline (1 s here) closes it, and the client sees a failed handshake.
    let conns = AdmissionConfig {
        upgrade_timeout: Duration::from_secs(1),
        ..AdmissionConfig::default()
    };
    let plain = rt
        .relay_tls("127.0.0.1:0", &dir.path().join("plain"), conns, None)
        .await;
    assert!(plain.url().starts_with("ws://"));
    let tls_url = plain.url().replacen("ws://", "wss://", 1);
    let e = connect_once(rt, &tls_url).await.unwrap_err();
    assert!(matches!(e, ConnectError::Tls { .. }), "{e:?}");
    plain.stop(true).await;
}

per_runtime!(
    dinner_over_wss,
    agent_without_ca_refuses_the_relay,
    tls_handshake_stall_is_closed_by_the_deadline,
    wrong_scheme_fails_cleanly,
);

/// Unusable files are refused with an error naming the file: a missing certificate, a
/// key file with no key, a key that does not match the certificate, a CA file with no
/// certificate; and an agent whose `relay_ca` is missing does not open.
#[test]
fn unusable_files_are_named() {
    let dir = tmp();
    let p = pki(dir.path());
    let missing = dir.path().join("missing.pem");
    // (certificate file, key file, the flag and the file the error names)
    for (cert, key, flag, named) in [
        (&missing, &p.key, "--tls-cert", "missing.pem"),
        (&p.cert, &p.cert, "--tls-key", "relay.pem"),
        (&p.cert, &p.ca_key, "--tls-key", "ca.key"),
        (&p.key, &p.key, "--tls-cert", "relay.key"),
    ] {
        let e = ServerTls::from_files(cert, key).unwrap_err().to_string();
        assert!(e.contains(flag) && e.contains(named), "{e}");
    }
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let e = ClientTls::new(Some(&garbage)).unwrap_err().to_string();
    assert!(e.contains("garbage.pem"), "{e}");
    assert!(ServerTls::from_files(&p.cert, &p.key).is_ok());
    assert!(ClientTls::new(Some(&p.ca)).is_ok());

    let (alice_cfg, _) = dinner_configs("localhost").unwrap();
    let ha = init_home(&dir.path().join("alice"), &alice_cfg, "wss://localhost:1");
    edit_config(&ha, |f| f.relay_ca = Some("nowhere.pem".into()));
    let e = a2acp_runtime::agent_host::AgentHost::open_home(
        &ha,
        a2acp_runtime::store::Durability::Normal,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("relay_ca") && e.contains("nowhere.pem"), "{e}");
}
