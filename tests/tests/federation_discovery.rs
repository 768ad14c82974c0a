//! Finding a domain's relay over real loopback sockets, on both runtimes: two federating
//! relays (a.example, b.example) serve TLS with leaves of one private CA and their signed
//! discovery documents at `/.well-known/a2acp`; each fetches the other's through its
//! static route (`--federate`), trusting the CA (`--ca`), and finds the key the other
//! keeps on disk. Then what must fail, fails with its reason and in bounded time: a relay
//! without the CA (TLS refused), a route whose document is another domain's (a lying
//! relay), a relay that does not federate (404), and scripted fake servers that redirect,
//! answer too much, or never answer (the deadline).

use std::path::Path;
use std::time::{Duration, Instant};

use a2acp_core::relay::RelayConfig;
use a2acp_runtime::federation::{discover, FetchError, FetchLimits, Net};
use a2acp_runtime::relay_key;
use a2acp_runtime::tls::{ClientTls, ServerTls};
use a2acp_tests::federation::{federating_relay, federation, linked_relays, LinkedRelays};
use a2acp_tests::*;
use a2acp_tokio::federation::TokioNet;
use futures_util::io::{AsyncReadExt, AsyncWriteExt};

#[path = "common/pki.rs"]
#[allow(dead_code)]
mod pki;
use pki::pki;

async fn fetch_with(
    net: &impl Net,
    data: &Path,
    ca: &Path,
    domain: &str,
    endpoint: String,
    limits: FetchLimits,
) -> Result<a2acp_core::discovery::DiscoveryDocument, FetchError> {
    let mut fed = federation(data, "c.example", &[(domain, endpoint)], ca);
    fed.fetch = limits;
    discover(net, &fed, domain).await
}

async fn documents_found_over_tls(rt: Runtime) {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let LinkedRelays {
        a,
        b,
        data_a: da,
        data_b: db,
        url_a: ea,
        url_b: eb,
    } = linked_relays(rt, dir.path(), &p.cert, &p.key, &p.ca).await;
    let net = TokioNet;
    let fed_a = federation(&da, "a.example", &[("b.example", eb.clone())], &p.ca);
    let doc = discover(&net, &fed_a, "b.example").await.unwrap();
    assert_eq!(doc.domain, "b.example");
    assert_eq!(doc.federation, eb);
    let kb = relay_key::load_or_create(&db, "b.example").unwrap();
    assert_eq!(doc.current_key(), &kb.key.public());
    let fed_b = federation(&db, "b.example", &[("a.example", ea.clone())], &p.ca);
    let doc = discover(&net, &fed_b, "a.example").await.unwrap();
    assert_eq!(
        doc.current_key(),
        &relay_key::load_or_create(&da, "a.example")
            .unwrap()
            .key
            .public()
    );

    // Without the private CA: the TLS handshake is refused.
    let mut no_ca = federation(&da, "a.example", &[("b.example", eb.clone())], &p.ca);
    no_ca.tls = ClientTls::web_pki().unwrap();
    let e = discover(&net, &no_ca, "b.example").await.unwrap_err();
    assert!(matches!(e, FetchError::Tls { .. }), "{e}");

    // A route to a.example's relay for b.example: its document is a.example's.
    let e = fetch_with(
        &net,
        &da,
        &p.ca,
        "b.example",
        ea.clone(),
        FetchLimits::default(),
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("is for `a.example`, not for `b.example`"),
        "{e}"
    );

    // After a rotation and a restart, the document's chain continues from the old key.
    let old = kb.key.public();
    b.stop(true).await;
    relay_key::rotate(&db, "b.example").unwrap();
    let b = federating_relay(
        rt,
        eb.strip_prefix("wss://").unwrap(),
        &db,
        "b.example",
        &p.cert,
        &p.key,
        federation(&db, "b.example", &[("a.example", ea.clone())], &p.ca),
        RelayConfig::default(),
    )
    .await;
    let doc = discover(&net, &fed_a, "b.example").await.unwrap();
    assert_ne!(doc.current_key(), &old);
    assert!(doc.continues_from(&old));
    a.stop(true).await;
    b.stop(true).await;
}

async fn a_relay_that_does_not_federate_answers_404(rt: Runtime) {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let tls = ServerTls::from_files(&p.cert, &p.key).unwrap();
    let r = rt
        .relay_tls(
            "127.0.0.1:0",
            &dir.path().join("r"),
            a2acp_runtime::admission::AdmissionConfig::default(),
            Some(tls),
        )
        .await;
    let e = fetch_with(
        &TokioNet,
        &dir.path().join("c"),
        &p.ca,
        "b.example",
        r.url(),
        FetchLimits::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, FetchError::Status(404)), "{e}");
    r.stop(true).await;
}

per_runtime!(
    documents_found_over_tls,
    a_relay_that_does_not_federate_answers_404
);

/// A scripted fake HTTPS server (TLS with the PKI's leaf) that answers every connection
/// with `answer` (or never, with `None`), on a free port: its `wss://` endpoint.
async fn fake_server(cert: &Path, key: &Path, answer: Option<Vec<u8>>) -> String {
    let tls = ServerTls::from_files(cert, key).unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let tls = tls.clone();
            let answer = answer.clone();
            tokio::spawn(async move {
                let Ok(mut s) = tls
                    .accept(async_tungstenite::tokio::TokioAdapter::new(s))
                    .await
                else {
                    return;
                };
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                match answer {
                    Some(a) => {
                        let _ = s.write_all(&a).await;
                        let _ = s.flush().await;
                        let _ = s.close().await;
                    }
                    None => tokio::time::sleep(Duration::from_secs(60)).await,
                }
            });
        }
    });
    format!("wss://127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_servers_are_refused_in_bounded_time() {
    let dir = tmp();
    let p = pki(&dir.path().join("pki"));
    let data = dir.path().join("c");
    let limits = FetchLimits {
        connect: Duration::from_secs(2),
        total: Duration::from_millis(800),
    };
    let redirect = fake_server(
        &p.cert,
        &p.key,
        Some(
            b"HTTP/1.1 302 Found\r\nLocation: https://evil.example/\r\ncontent-length: 0\r\n\r\n"
                .to_vec(),
        ),
    )
    .await;
    let e = fetch_with(&TokioNet, &data, &p.ca, "b.example", redirect, limits)
        .await
        .unwrap_err();
    assert!(matches!(e, FetchError::Redirect { status: 302 }), "{e}");

    let mut huge = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b'{', 1 << 20));
    let big = fake_server(&p.cert, &p.key, Some(huge)).await;
    let e = fetch_with(&TokioNet, &data, &p.ca, "b.example", big, limits)
        .await
        .unwrap_err();
    assert!(matches!(e, FetchError::TooLarge), "{e}");

    let garbage = fake_server(
        &p.cert,
        &p.key,
        Some(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nnot json!".to_vec()),
    )
    .await;
    let e = fetch_with(&TokioNet, &data, &p.ca, "b.example", garbage, limits)
        .await
        .unwrap_err();
    assert!(matches!(e, FetchError::Document(_)), "{e}");

    let silent = fake_server(&p.cert, &p.key, None).await;
    let t = Instant::now();
    let e = fetch_with(&TokioNet, &data, &p.ca, "b.example", silent, limits)
        .await
        .unwrap_err();
    assert!(matches!(e, FetchError::Timeout(_)), "{e}");
    println!("a silent server given up after {:?}", t.elapsed());

    // Nobody listening: refused at once.
    let port = a2acp_tests::federation::free_port();
    let e = fetch_with(
        &TokioNet,
        &data,
        &p.ca,
        "b.example",
        format!("wss://127.0.0.1:{port}"),
        limits,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, FetchError::Connect { .. }), "{e}");
}
