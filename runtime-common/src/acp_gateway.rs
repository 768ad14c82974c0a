//! The relay's ACP gateway (seed 004 §5.1, `relay --cluster … --acp-listen ADDR`): ACP
//! agents submit signed messages over HTTP(S); the gateway checks each message's form
//! and its signature against the sender's registered key and stores it in the
//! recipient's inbox `agent.<recipient-id>.inbox` on the cluster's NATS JetStream
//! ([`crate::cluster::acp_inbox`]). The registry is the relay's own: the ACP `agent-id`
//! `X` is the address `agent:X@<domain>`, so an a2acp agent registered over the relay link
//! is registered here too, and an ACP agent registers here (`POST /acp/v1/agents`, with a
//! proof that it holds the key) as first come first served.
//!
//! Routes (JSON; every refusal `{"error": {"code", "message", "header"?}}`):
//! - `POST /acp/v1/agents` `{"agent_id", "public_key", "proof"}` → 201 registered, 200
//!   the same key again, 409 another key holds the id;
//! - `GET /acp/v1/agents/<agent_id>` → 200 `{"agent_id", "public_key"}`, 404;
//! - `POST /acp/v1/inbox/<recipient_id>`, body one signed ACP message → 202 `{"accepted":
//!   true, "subject", "seq"}` once JetStream stored it on a quorum.
//!
//! The gateway checks what it can without a session: form, headers, signature, that
//! both agents are registered. Timestamps, replays and the handshake are the recipient's
//! (its session). Hostile input: a cap on connections in all and per source, a header
//! deadline (and TLS handshake's), a body deadline and cap (256 KiB, the message's own
//! bound), token buckets per source address and per sender, a JSON nesting bound.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2acp_core::bridge::acp::error::code;
use a2acp_core::bridge::acp::headers::valid_agent_id;
use a2acp_core::bridge::acp::message::MAX_MESSAGE;
use a2acp_core::bridge::acp::{sign, AcpError, Message};
use a2acp_core::crypto::PublicKey;
use a2acp_core::encoding::{b64_decode, b64_encode};
use a2acp_core::rate_limit::TokenBucket;
use a2acp_core::Address;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::acp::inbox_subject;
use crate::acp::link::REGISTER_LABEL;
use crate::cluster::{Claim, Cluster, ClusterError};
use crate::http_door::{self, Door, Source};

/// The gateway's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewayLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections served at once from one source address.
    pub max_per_source: usize,
    /// The request head (and a TLS handshake) within this.
    pub header_timeout: Duration,
    /// The body within this.
    pub body_timeout: Duration,
    /// Requests per second from one source address (and the burst after a pause).
    pub per_source: (u32, u32),
    /// Messages per second of one sender (and the burst).
    pub per_sender: (u32, u32),
}

impl Default for GatewayLimits {
    fn default() -> Self {
        GatewayLimits {
            max_connections: 1024,
            max_per_source: 64,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            per_source: (200, 400),
            per_sender: (50, 100),
        }
    }
}

/// How the gateway is served.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Where it listens.
    pub listen: String,
    /// HTTPS with the relay's certificate (required off loopback).
    pub tls: Option<crate::tls::ServerTls>,
    /// Its bounds.
    pub limits: GatewayLimits,
}

/// Why the gateway did not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Plain HTTP off loopback.
    #[error("--acp-listen {0}: off loopback the gateway serves HTTPS only (seed 004 §7, TLS 1.2 at least): give the relay --tls-cert and --tls-key")]
    PlainOffLoopback(String),
    /// The address could not be bound or read.
    #[error("--acp-listen {addr}: {why}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        why: String,
    },
}

/// The running gateway; stopped when dropped.
#[derive(Debug)]
pub struct AcpGateway {
    addr: SocketAddr,
    stop: Option<flume::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AcpGateway {
    /// Binds `cfg.listen` and serves the gateway of `domain` over `cluster` on a thread of
    /// its own (a current-thread tokio runtime).
    pub fn start(
        cfg: GatewayConfig,
        cluster: Arc<Cluster>,
        domain: String,
    ) -> Result<AcpGateway, GatewayError> {
        let listen_err = |why: String| GatewayError::Listen {
            addr: cfg.listen.clone(),
            why,
        };
        let std_listener =
            std::net::TcpListener::bind(&cfg.listen).map_err(|e| listen_err(e.to_string()))?;
        let addr = std_listener
            .local_addr()
            .map_err(|e| listen_err(e.to_string()))?;
        if cfg.tls.is_none() && !addr.ip().is_loopback() {
            return Err(GatewayError::PlainOffLoopback(cfg.listen.clone()));
        }
        std_listener
            .set_nonblocking(true)
            .map_err(|e| listen_err(e.to_string()))?;
        let (stop, stopped) = flume::bounded::<()>(1);
        let limits = cfg.limits;
        let tls = cfg.tls.map(|t| tokio_rustls::TlsAcceptor::from(t.config()));
        let state = Arc::new(State {
            cluster,
            domain,
            sources: Mutex::new(Buckets::default()),
            senders: Mutex::new(Buckets::default()),
            keys: Mutex::new(HashMap::new()),
            limits,
        });
        let thread = crate::tokio_thread::spawn(
            "acp-gateway",
            |e| tracing::error!("ACP gateway: no runtime: {e}"),
            move || async move {
                let listener = match tokio::net::TcpListener::from_std(std_listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("ACP gateway: {e}");
                        return;
                    }
                };
                let door = Door {
                    name: "acp-gateway",
                    max_connections: limits.max_connections,
                    header_timeout: limits.header_timeout,
                    max_per_source: Some(limits.max_per_source),
                };
                let serve = http_door::serve_tls(
                    listener,
                    door,
                    tls,
                    || true,
                    move |req| {
                        let state = state.clone();
                        async move { state.handle(req).await }
                    },
                );
                tokio::select! {
                    _ = serve => {}
                    _ = stopped.recv_async() => {}
                }
            },
        )
        .map_err(|e| listen_err(e.to_string()))?;
        tracing::info!("ACP gateway on {addr}");
        Ok(AcpGateway {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for AcpGateway {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Token buckets by key, bounded: past [`MAX_BUCKETS`] keys they are all forgotten
/// (everyone starts again with a full burst; memory stays bounded).
#[derive(Debug)]
struct Buckets<K>(HashMap<K, TokenBucket>);

impl<K> Default for Buckets<K> {
    fn default() -> Self {
        Buckets(HashMap::new())
    }
}

/// Buckets kept at most per kind.
const MAX_BUCKETS: usize = 65_536;

impl<K: std::hash::Hash + Eq + Clone> Buckets<K> {
    fn take(&mut self, key: &K, (rate, burst): (u32, u32)) -> bool {
        let now = crate::clock::now();
        if self.0.len() >= MAX_BUCKETS && !self.0.contains_key(key) {
            self.0.clear();
        }
        self.0
            .entry(key.clone())
            .or_insert_with(|| TokenBucket::full(now, burst))
            .try_take(now, rate, burst)
    }
}

struct State {
    cluster: Arc<Cluster>,
    domain: String,
    sources: Mutex<Buckets<IpAddr>>,
    senders: Mutex<Buckets<String>>,
    /// Keys found in the registry. A registration is first come first served and never
    /// changes, so a key found stays right; kept up to [`MAX_BUCKETS`] agents, then
    /// forgotten whole.
    keys: Mutex<HashMap<String, PublicKey>>,
    limits: GatewayLimits,
}

type Answer = Response<Full<Bytes>>;

fn answer(status: StatusCode, body: Value) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn refuse(status: StatusCode, code: i64, message: impl Into<String>) -> Answer {
    answer(
        status,
        json!({"error": {"code": code, "message": message.into()}}),
    )
}

fn refuse_message(e: &AcpError) -> Answer {
    let status = match e {
        AcpError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        AcpError::BadSignature(_) => StatusCode::UNAUTHORIZED,
        _ => StatusCode::BAD_REQUEST,
    };
    let mut error = json!({"code": e.code(), "message": e.to_string()});
    if let Some(h) = e.header() {
        error["header"] = json!(h);
    }
    answer(status, json!({ "error": error }))
}

fn unavailable(e: &ClusterError) -> Answer {
    let mut r = refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        code::INTERNAL_ERROR,
        format!("the cluster cannot store it now: {e}"),
    );
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn too_many(what: &str) -> Answer {
    let mut r = refuse(
        StatusCode::TOO_MANY_REQUESTS,
        code::RATE_LIMITED,
        format!("too many requests from this {what}; try again shortly"),
    );
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

async fn wait<T>(p: crate::cluster::Pending<T>) -> Result<T, ClusterError> {
    p.receiver()
        .recv_async()
        .await
        .unwrap_or(Err(ClusterError::Stopped))
}

impl State {
    async fn handle(&self, req: Request<Incoming>) -> Answer {
        let source = req.extensions().get::<Source>().map(|s| s.0);
        if let Some(s) = source {
            let ok = self
                .sources
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(&s.ip(), self.limits.per_source);
            if !ok {
                return too_many("address");
            }
        }
        let path = req.uri().path().to_string();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (req.method(), segments.as_slice()) {
            (&Method::POST, ["acp", "v1", "agents"]) => match self.body(req).await {
                Ok(b) => self.register(&b).await,
                Err(r) => r,
            },
            (&Method::GET, ["acp", "v1", "agents", id]) => self.look_up(id).await,
            (&Method::POST, ["acp", "v1", "inbox", to]) => {
                let to = to.to_string();
                match self.body(req).await {
                    Ok(b) => self.submit(&to, b).await,
                    Err(r) => r,
                }
            }
            (_, ["acp", "v1", "agents"] | ["acp", "v1", "agents", _] | ["acp", "v1", "inbox", _]) => {
                refuse(
                    StatusCode::METHOD_NOT_ALLOWED,
                    code::METHOD_NOT_FOUND,
                    "method not allowed here",
                )
            }
            _ => refuse(
                StatusCode::NOT_FOUND,
                code::METHOD_NOT_FOUND,
                "no such route: POST /acp/v1/agents, GET /acp/v1/agents/<id>, POST /acp/v1/inbox/<id>",
            ),
        }
    }

    async fn body(&self, req: Request<Incoming>) -> Result<Bytes, Answer> {
        let (parts, body) = req.into_parts();
        let json = parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        if !json {
            return Err(refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code::INVALID_REQUEST,
                "the body is JSON: content-type: application/json",
            ));
        }
        http_door::read_body(&parts.headers, body, MAX_MESSAGE, self.limits.body_timeout)
            .await
            .map_err(|e| {
                let c = match e {
                    http_door::BodyRefused::TooLarge(_) => code::TOO_LARGE,
                    _ => code::INVALID_REQUEST,
                };
                refuse(e.status(), c, e.to_string())
            })
    }

    fn address(&self, agent_id: &str) -> Option<Address> {
        valid_agent_id(agent_id)
            .then(|| Address::new(agent_id, &self.domain).ok())
            .flatten()
    }

    async fn register(&self, body: &[u8]) -> Answer {
        let bad = |why: &str| refuse(StatusCode::BAD_REQUEST, code::INVALID_PARAMS, why);
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return bad("the body is not JSON");
        };
        let field = |k: &str| v.get(k).and_then(Value::as_str);
        let (Some(id), Some(key), Some(proof)) =
            (field("agent_id"), field("public_key"), field("proof"))
        else {
            return bad("`agent_id`, `public_key` and `proof` (strings) are required");
        };
        let Some(address) = self.address(id) else {
            return bad(
                "`agent_id`: 1-64 characters of a-z 0-9 _ -, starting with a letter or digit",
            );
        };
        let Some(key) = b64_decode(key)
            .and_then(|k| <[u8; 32]>::try_from(k).ok())
            .and_then(|k| PublicKey::from_bytes(&k).ok())
        else {
            return bad("`public_key`: an Ed25519 public key, 32 bytes in base64url");
        };
        let Some(proof) = b64_decode(proof).and_then(|p| <[u8; 64]>::try_from(p).ok()) else {
            return bad("`proof`: an Ed25519 signature, 64 bytes in base64url");
        };
        let mut signed = REGISTER_LABEL.to_vec();
        signed.extend_from_slice(id.as_bytes());
        if key.verify(&signed, &proof).is_err() {
            return refuse(
                StatusCode::UNAUTHORIZED,
                code::BAD_SIGNATURE,
                "`proof` is not the key's signature of \"A2ACP-ACP-REGISTER-V1\" 0x00 agent_id",
            );
        }
        let me = json!({"agent_id": id, "public_key": b64_encode(&key.to_bytes())});
        match wait(self.cluster.claim(&address, &key)).await {
            Ok(Claim::Claimed) => answer(StatusCode::CREATED, me),
            Ok(Claim::Same) => answer(StatusCode::OK, me),
            Ok(Claim::Taken) => refuse(
                StatusCode::CONFLICT,
                code::REFUSED,
                format!("`{id}` is registered with another key"),
            ),
            Err(e) => unavailable(&e),
        }
    }

    async fn key_of(&self, agent_id: &str) -> Result<Option<PublicKey>, ClusterError> {
        let Some(address) = self.address(agent_id) else {
            return Ok(None);
        };
        let known = self
            .keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent_id)
            .cloned();
        if let Some(k) = known {
            return Ok(Some(k));
        }
        let key = wait(self.cluster.registered(&address))
            .await?
            .and_then(|k| PublicKey::from_bytes(&k).ok());
        if let Some(k) = &key {
            let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            if keys.len() >= MAX_BUCKETS {
                keys.clear();
            }
            keys.insert(agent_id.to_string(), k.clone());
        }
        Ok(key)
    }

    async fn look_up(&self, id: &str) -> Answer {
        match self.key_of(id).await {
            Ok(Some(k)) => answer(
                StatusCode::OK,
                json!({"agent_id": id, "public_key": b64_encode(&k.to_bytes())}),
            ),
            Ok(None) => refuse(
                StatusCode::NOT_FOUND,
                code::UNKNOWN_AGENT,
                format!("no agent `{id}` is registered here"),
            ),
            Err(e) => unavailable(&e),
        }
    }

    async fn submit(&self, to: &str, body: Bytes) -> Answer {
        let m = match Message::parse(&body) {
            Ok(m) => m,
            Err(e) => return refuse_message(&e),
        };
        let sender = m.headers.agent_id.clone();
        let key = match self.key_of(&sender).await {
            Ok(Some(k)) => k,
            Ok(None) => {
                return refuse(
                    StatusCode::FORBIDDEN,
                    code::UNKNOWN_AGENT,
                    format!("no key is registered for `{sender}`: POST /acp/v1/agents first"),
                )
            }
            Err(e) => return unavailable(&e),
        };
        if let Err(e) = sign::verify(&m.value, &key) {
            return refuse_message(&e);
        }
        let ok = self
            .senders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(&sender, self.limits.per_sender);
        if !ok {
            return too_many("agent");
        }
        match self.key_of(to).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return refuse(
                    StatusCode::NOT_FOUND,
                    code::UNKNOWN_AGENT,
                    format!("no agent `{to}` is registered here"),
                )
            }
            Err(e) => return unavailable(&e),
        }
        match wait(self.cluster.publish_inbox(to, body)).await {
            Ok(stored) => answer(
                StatusCode::ACCEPTED,
                json!({"accepted": true, "subject": inbox_subject(to), "seq": stored.seq}),
            ),
            Err(e) => unavailable(&e),
        }
    }
}
