//! The relay's ACP gateway (seed 004 §5.1) against hostile and careless clients, over real
//! HTTP, with a real NATS server: registration needs a proof and is first come first
//! served; a message must be signed by its sender's registered key, to a registered
//! recipient, as JSON; the same message submitted twice is stored once; a slow request
//! head is cut at its deadline; one source cannot hold more connections than its cap nor
//! send faster than its rate; and `--acp-listen` without a cluster is refused.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use a2acp_core::bridge::acp::sign;
use a2acp_core::crypto::IdentityKey;
use a2acp_core::encoding::b64_encode;
use a2acp_runtime::acp::link::REGISTER_LABEL;
use a2acp_runtime::acp_gateway::{GatewayConfig, GatewayLimits};
use a2acp_runtime::relay_service::{RelayService, ServiceConfig, ServiceError};
use a2acp_tests::nats::{relay_cluster_config, NatsCluster};
use a2acp_tests::*;
use serde_json::{json, Value};

#[path = "common/pki.rs"]
mod pki;

/// One HTTP/1.1 request on a new connection: status and JSON body.
fn call(addr: &str, method: &str, path: &str, ctype: &str, body: &[u8]) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn post(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    call(
        addr,
        "POST",
        path,
        "application/json",
        body.to_string().as_bytes(),
    )
}

fn key(n: u8) -> IdentityKey {
    IdentityKey::from_seed([n; 32])
}

fn registration(id: &str, k: &IdentityKey, signer: &IdentityKey) -> Value {
    let mut proof = REGISTER_LABEL.to_vec();
    proof.extend_from_slice(id.as_bytes());
    json!({
        "agent_id": id,
        "public_key": b64_encode(&k.public().to_bytes()),
        "proof": b64_encode(&signer.sign(&proof)),
    })
}

/// A signed `agent.notification` from `from`.
fn notification(from: &str, k: &IdentityKey, n: u64) -> Value {
    let mut m = json!({
        "jsonrpc": "2.0",
        "method": "agent.notification",
        "params": {
            "headers": {
                "agent-id": from,
                "principal-id": "principal",
                "timestamp": "2026-11-28T06:00:00Z",
                "message-type": "notification",
                "trust-layer-version": "1.0.0",
                "skill-layers-loaded": [0, 1, 2, 3]
            },
            "body": {"n": n}
        }
    });
    sign::sign(&mut m, k).unwrap();
    m
}

fn gateway(nats: &NatsCluster, limits: GatewayLimits) -> (RelayService, String) {
    gateway_on(nats, "127.0.0.1:0", None, limits).unwrap()
}

fn gateway_on(
    nats: &NatsCluster,
    listen: &str,
    tls: Option<a2acp_runtime::tls::ServerTls>,
    limits: GatewayLimits,
) -> Result<(RelayService, String), ServiceError> {
    let cfg = ServiceConfig {
        cluster: Some(relay_cluster_config(nats, 0, "n1")),
        acp_gateway: Some(GatewayConfig {
            listen: listen.into(),
            tls,
            limits,
        }),
        ..ServiceConfig::default()
    };
    let relay = RelayService::start(cfg)?;
    let addr = relay.acp_gateway_addr().unwrap().to_string();
    Ok((relay, addr))
}

#[test]
#[ignore = "needs nats-server: bash .ci/test-deps"]
fn off_loopback_the_gateway_speaks_tls_only() {
    let dir = tmp();
    let nats = NatsCluster::start(&dir.path().join("nats"), 1);
    nats.wait_ready(Duration::from_secs(30));
    // Plain HTTP on every address is refused.
    match gateway_on(&nats, "0.0.0.0:0", None, GatewayLimits::default()) {
        Err(ServiceError::Settings(why)) => assert!(why.contains("HTTPS"), "{why}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    // HTTPS with the relay's certificate (a private CA's leaf): a client that trusts the
    // CA registers; one that speaks plain HTTP gets nothing.
    let p = pki::pki(dir.path());
    let tls = a2acp_runtime::tls::ServerTls::from_files(&p.cert, &p.key).unwrap();
    let (_relay, addr) =
        gateway_on(&nats, "127.0.0.1:0", Some(tls), GatewayLimits::default()).unwrap();
    let pem = std::fs::read(&p.ca).unwrap();
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|i| match i {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(certs)))
                .build(),
        )
        .build()
        .into();
    let k = key(5);
    let r = http
        .post(format!("https://{addr}/acp/v1/agents"))
        .header("content-type", "application/json")
        .send(registration("delta", &k, &k).to_string())
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let (st, _) = call(
        &addr,
        "GET",
        "/acp/v1/agents/delta",
        "application/json",
        b"",
    );
    assert_eq!(st, 0, "plain HTTP to the TLS gateway gets no HTTP answer");
}

#[test]
#[ignore = "needs nats-server: bash .ci/test-deps"]
fn the_gateway_refuses_what_it_must() {
    let dir = tmp();
    let nats = NatsCluster::start(&dir.path().join("nats"), 1);
    nats.wait_ready(Duration::from_secs(30));
    let limits = GatewayLimits {
        max_per_source: 8,
        header_timeout: Duration::from_secs(1),
        per_sender: (5, 10),
        ..GatewayLimits::default()
    };
    let (_relay, addr) = gateway(&nats, limits);
    let (a, b) = (key(1), key(2));

    // Registration: a proof by the key itself; first come first served.
    let (st, body) = post(&addr, "/acp/v1/agents", &registration("alpha", &a, &b));
    assert_eq!(st, 401, "{body}");
    assert_eq!(body["error"]["code"], json!(-32003));
    assert!(post(&addr, "/acp/v1/agents", &json!({"agent_id": "alpha"})).0 == 400);
    let bad_id = registration("Alpha Smith", &a, &a);
    assert_eq!(post(&addr, "/acp/v1/agents", &bad_id).0, 400);
    assert_eq!(
        post(&addr, "/acp/v1/agents", &registration("alpha", &a, &a)).0,
        201
    );
    assert_eq!(
        post(&addr, "/acp/v1/agents", &registration("alpha", &a, &a)).0,
        200
    );
    let (st, body) = post(&addr, "/acp/v1/agents", &registration("alpha", &b, &b));
    assert_eq!(st, 409, "{body}");
    assert_eq!(body["error"]["code"], json!(-32013), "{body}");
    assert_eq!(
        post(&addr, "/acp/v1/agents", &registration("beta", &b, &b)).0,
        201
    );
    let (st, body) = call(
        &addr,
        "GET",
        "/acp/v1/agents/alpha",
        "application/json",
        b"",
    );
    assert_eq!(st, 200);
    assert_eq!(
        body["public_key"],
        json!(b64_encode(&a.public().to_bytes()))
    );
    assert_eq!(
        call(
            &addr,
            "GET",
            "/acp/v1/agents/nobody",
            "application/json",
            b""
        )
        .0,
        404
    );

    // Submissions.
    let m = notification("alpha", &a, 1);
    let (st, first) = post(&addr, "/acp/v1/inbox/beta", &m);
    assert_eq!(st, 202, "{first}");
    assert_eq!(first["subject"], json!("agent.beta.inbox"));
    // The same bytes again: stored once (the same sequence).
    let (st, again) = post(&addr, "/acp/v1/inbox/beta", &m);
    assert_eq!(st, 202);
    assert_eq!(again["seq"], first["seq"]);
    // To nobody; from nobody; signed by another key; not JSON; not declared JSON.
    let (st, body) = post(&addr, "/acp/v1/inbox/nobody", &m);
    assert_eq!((st, body["error"]["code"].clone()), (404, json!(-32004)));
    let (st, _) = post(&addr, "/acp/v1/inbox/beta", &notification("gamma", &a, 2));
    assert_eq!(st, 403);
    let (st, body) = post(&addr, "/acp/v1/inbox/beta", &notification("alpha", &b, 3));
    assert_eq!((st, body["error"]["code"].clone()), (401, json!(-32003)));
    let (st, body) = call(
        &addr,
        "POST",
        "/acp/v1/inbox/beta",
        "application/json",
        b"{x",
    );
    assert_eq!((st, body["error"]["code"].clone()), (400, json!(-32700)));
    let (st, _) = call(
        &addr,
        "POST",
        "/acp/v1/inbox/beta",
        "text/plain",
        m.to_string().as_bytes(),
    );
    assert_eq!(st, 415);
    // Nested beyond the bound.
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let (st, body) = call(
        &addr,
        "POST",
        "/acp/v1/inbox/beta",
        "application/json",
        deep.as_bytes(),
    );
    assert_eq!((st, body["error"]["code"].clone()), (400, json!(-32700)));
    // Over 256 KiB, by its length: refused before it is read.
    let big = vec![b' '; 300 * 1024];
    assert_eq!(
        call(
            &addr,
            "POST",
            "/acp/v1/inbox/beta",
            "application/json",
            &big
        )
        .0,
        413
    );
    // Routes and methods.
    assert_eq!(
        call(&addr, "GET", "/acp/v1/inbox/beta", "application/json", b"").0,
        405
    );
    assert_eq!(call(&addr, "GET", "/", "application/json", b"").0, 404);

    // One sender past its rate: 429 with retry-after, then its burst again later.
    let statuses: Vec<u16> = (10..40)
        .map(|n| post(&addr, "/acp/v1/inbox/beta", &notification("alpha", &a, n)).0)
        .collect();
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 202 || *s == 429),
        "{statuses:?}"
    );

    // A request head that never ends is cut at the deadline.
    let mut slow = TcpStream::connect(&addr).unwrap();
    slow.write_all(b"POST /acp/v1/inbox/beta HTTP/1.1\r\nhost: x\r\n")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let start = Instant::now();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );

    // One source holds at most its cap of connections: the next is closed at once.
    let held: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = TcpStream::connect(&addr).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut got = Vec::new();
    let _ = extra.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    let body: Value = serde_json::from_str(got.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(
        body["error"]["code"],
        json!(-32012),
        "the connection over the cap reads why"
    );
    drop(held);
}

#[test]
fn the_gateway_needs_a_cluster() {
    let cfg = ServiceConfig {
        acp_gateway: Some(GatewayConfig {
            listen: "127.0.0.1:0".into(),
            tls: None,
            limits: GatewayLimits::default(),
        }),
        ..ServiceConfig::default()
    };
    match RelayService::start(cfg) {
        Err(ServiceError::Settings(why)) => assert!(why.contains("--cluster"), "{why}"),
        other => panic!("{other:?}"),
    }
}
