//! The agent's ACP transport (seed 004 §5.1): signed messages are submitted to the
//! gateway's endpoint over HTTP(S), and the agent's inbox `agent.<id>.inbox` is read from
//! NATS JetStream with a durable consumer (`acp_<id>`, explicit acknowledgements), so a
//! message sent while the agent was down is read when it comes back.
//!
//! Two threads, no protocol decision: one makes the HTTP calls in order (registering this
//! agent's key, looking up a peer's, posting messages — in order, so a handshake's steps
//! leave in the order the session wrote them), one runs the NATS client (`async-nats`, on
//! a current-thread tokio runtime). A received message comes with its sender's key when
//! the session may not know it yet (looked up at the gateway first).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use a2acp_core::bridge::acp::exchange::sender_of;
use a2acp_core::crypto::IdentityKey;
use a2acp_core::encoding::{b64_decode, b64_encode};
use serde_json::{json, Value};

/// The label of the registration proof: the key signs it followed by its `agent-id`.
pub const REGISTER_LABEL: &[u8] = b"A2ACP-ACP-REGISTER-V1\0";
/// Bytes of a gateway's answer read at most.
const MAX_ANSWER: usize = 64 * 1024;
/// Attempts of a post that fails for a reason that may pass (no connection, 429, 5xx).
const POST_ATTEMPTS: u32 = 6;
/// Deadline of one HTTP call.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages read from the inbox and not yet handed to the agent, at most.
const INBOX_WINDOW: usize = 256;

/// What the link hands the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A message from the inbox, with its sender's `agent-id` and registered key when
    /// the gateway knows them.
    Message {
        /// The message, as received.
        bytes: Vec<u8>,
        /// Its sender's `agent-id` and key.
        sender: Option<(String, [u8; 32])>,
    },
    /// The answer to [`AcpLink::look_up`]: the key registered for `agent_id`, if any.
    Key {
        /// The agent looked up.
        agent_id: String,
        /// Its key, or `None` when the gateway has none (or could not be asked: `why`).
        key: Result<[u8; 32], String>,
    },
}

enum Job {
    Post { to: String, json: String },
    LookUp(String),
}

/// Where the gateway and NATS are, and who this agent is.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// The gateway's base URL (`https://HOST:PORT`, or `http://` on loopback).
    pub gateway: String,
    /// A PEM file of the CA the gateway's certificate chains to (besides the web PKI).
    pub gateway_ca: Option<std::path::PathBuf>,
    /// The NATS servers.
    pub nats: Vec<String>,
    /// This agent's `agent-id`.
    pub agent_id: String,
}

/// The running link.
pub struct AcpLink {
    jobs: flume::Sender<Job>,
    incoming: flume::Receiver<Incoming>,
}

impl std::fmt::Debug for AcpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpLink").finish_non_exhaustive()
    }
}

/// Why the link could not start.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The gateway CA file is unusable.
    #[error("acp.gateway_ca `{path}`: {why}")]
    Ca {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// A thread could not start.
    #[error("cannot start the ACP link: {0}")]
    Thread(String),
}

fn http_agent(ca: Option<&Path>) -> Result<ureq::Agent, LinkError> {
    crate::tls::https_agent(ca, CALL_TIMEOUT).map_err(|why| LinkError::Ca {
        path: ca.map(|c| c.display().to_string()).unwrap_or_default(),
        why,
    })
}

/// One HTTP call's answer: status and body (capped), or why there was none.
fn call(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    body: Option<&str>,
) -> Result<(u16, Vec<u8>), String> {
    let resp = match (method, body) {
        ("GET", _) => agent.get(url).call(),
        (_, Some(b)) => agent
            .post(url)
            .header("content-type", "application/json")
            .send(b.as_bytes()),
        (_, None) => agent.post(url).send_empty(),
    }
    .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = crate::a2a_client::read_capped(resp.into_body(), MAX_ANSWER)
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    Ok((status, body))
}

fn key_of(body: &[u8]) -> Option<[u8; 32]> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let k = b64_decode(v.get("public_key")?.as_str()?)?;
    k.try_into().ok()
}

fn looked_up(agent: &ureq::Agent, gateway: &str, agent_id: &str) -> Result<[u8; 32], String> {
    let url = format!("{gateway}/acp/v1/agents/{agent_id}");
    match call(agent, "GET", &url, None)? {
        (200, body) => key_of(&body).ok_or_else(|| "the gateway's answer has no key".into()),
        (404, _) => Err(format!(
            "no agent `{agent_id}` is registered at the gateway"
        )),
        (status, body) => Err(format!(
            "the gateway answered {status}: {}",
            String::from_utf8_lossy(&body)
        )),
    }
}

impl AcpLink {
    /// Starts the link of `identity` (its key is registered at the gateway first, again
    /// on every start: registering the same key is idempotent).
    pub fn start(config: LinkConfig, identity: &IdentityKey) -> Result<AcpLink, LinkError> {
        let http = http_agent(config.gateway_ca.as_deref())?;
        let gateway = config.gateway.trim_end_matches('/').to_string();
        let (jobs, job_rx) = flume::unbounded::<Job>();
        let (in_tx, incoming) = flume::bounded::<Incoming>(INBOX_WINDOW);
        let mut proof = REGISTER_LABEL.to_vec();
        proof.extend_from_slice(config.agent_id.as_bytes());
        let registration = json!({
            "agent_id": config.agent_id,
            "public_key": b64_encode(&identity.public().to_bytes()),
            "proof": b64_encode(&identity.sign(&proof)),
        })
        .to_string();
        // The HTTP thread: registration, then the jobs in order.
        {
            let http = http.clone();
            let gateway = gateway.clone();
            let in_tx = in_tx.clone();
            std::thread::Builder::new()
                .name("acp-http".into())
                .spawn(move || http_thread(http, gateway, registration, job_rx, in_tx))
                .map_err(|e| LinkError::Thread(e.to_string()))?;
        }
        crate::tokio_thread::spawn(
            "acp-nats",
            |e| tracing::warn!("ACP: no runtime for NATS: {e}"),
            move || inbox(config, http, gateway, in_tx),
        )
        .map_err(|e| LinkError::Thread(e.to_string()))?;
        Ok(AcpLink { jobs, incoming })
    }

    /// Where received messages and looked-up keys arrive.
    pub fn incoming(&self) -> flume::Receiver<Incoming> {
        self.incoming.clone()
    }

    /// Submits a signed message for the agent `to` to the gateway (in order with the
    /// others).
    pub fn post(&self, to: &str, json: String) {
        let _ = self.jobs.send(Job::Post {
            to: to.to_string(),
            json,
        });
    }

    /// Asks the gateway for the key of `agent_id`: the answer comes as [`Incoming::Key`].
    pub fn look_up(&self, agent_id: &str) {
        let _ = self.jobs.send(Job::LookUp(agent_id.to_string()));
    }
}

fn http_thread(
    http: ureq::Agent,
    gateway: String,
    registration: String,
    jobs: flume::Receiver<Job>,
    incoming: flume::Sender<Incoming>,
) {
    let mut wait = Duration::from_millis(200);
    loop {
        match call(
            &http,
            "POST",
            &format!("{gateway}/acp/v1/agents"),
            Some(&registration),
        ) {
            Ok((200 | 201, _)) => break,
            Ok((status @ (400..=499), body)) if status != 429 => {
                tracing::error!(
                    "ACP: the gateway refused this agent's key ({status}): {}",
                    String::from_utf8_lossy(&body)
                );
                break;
            }
            Ok((status, _)) => tracing::debug!("ACP: registration answered {status}; again"),
            Err(e) => tracing::debug!("ACP: registration: {e}; again"),
        }
        std::thread::sleep(wait);
        wait = (wait * 2).min(Duration::from_secs(10));
    }
    while let Ok(job) = jobs.recv() {
        match job {
            Job::LookUp(agent_id) => {
                let key = looked_up(&http, &gateway, &agent_id);
                if incoming.send(Incoming::Key { agent_id, key }).is_err() {
                    return;
                }
            }
            Job::Post { to, json } => post(&http, &gateway, &to, &json),
        }
    }
}

fn post(http: &ureq::Agent, gateway: &str, to: &str, json: &str) {
    let url = format!("{gateway}/acp/v1/inbox/{to}");
    let mut wait = Duration::from_millis(100);
    for attempt in 1..=POST_ATTEMPTS {
        match call(http, "POST", &url, Some(json)) {
            Ok((200..=299, _)) => return,
            Ok((status, body)) if (400..=499).contains(&status) && status != 429 => {
                tracing::warn!(
                    "ACP: the gateway refused a message for `{to}` ({status}): {}",
                    String::from_utf8_lossy(&body)
                );
                return;
            }
            Ok((status, _)) => tracing::debug!("ACP: post to `{to}` answered {status}"),
            Err(e) => tracing::debug!("ACP: post to `{to}`: {e}"),
        }
        if attempt < POST_ATTEMPTS {
            std::thread::sleep(wait);
            wait *= 2;
        }
    }
    tracing::warn!(
        "ACP: a message for `{to}` could not be submitted after {POST_ATTEMPTS} attempts"
    );
}

/// Reads the inbox for ever: connects (again) to NATS, finds the stream, reads through
/// the durable consumer and hands each message over, acknowledged once handed.
async fn inbox(
    config: LinkConfig,
    http: ureq::Agent,
    gateway: String,
    incoming: flume::Sender<Incoming>,
) {
    use futures_util::StreamExt;
    let mut keys: BTreeMap<String, [u8; 32]> = BTreeMap::new();
    let mut wait = Duration::from_millis(200);
    loop {
        let consumer = async {
            let client = async_nats::ConnectOptions::new()
                .name(format!("a2acp-agent {}", config.agent_id))
                .connect(config.nats.as_slice())
                .await
                .map_err(|e| e.to_string())?;
            let js = async_nats::jetstream::new(client);
            let stream = js
                .get_stream(super::INBOX_STREAM)
                .await
                .map_err(|e| e.to_string())?;
            let name = format!("acp_{}", config.agent_id);
            stream
                .get_or_create_consumer(
                    &name,
                    async_nats::jetstream::consumer::pull::Config {
                        durable_name: Some(name.clone()),
                        filter_subject: super::inbox_subject(&config.agent_id),
                        ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
                        ack_wait: Duration::from_secs(30),
                        ..Default::default()
                    },
                )
                .await
                .map_err(|e| e.to_string())
        };
        let consumer: async_nats::jetstream::consumer::PullConsumer = match consumer.await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("ACP: inbox not ready: {e}; again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        wait = Duration::from_millis(200);
        let mut messages = match consumer.messages().await {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!("ACP: inbox: {e}; again");
                continue;
            }
        };
        while let Some(m) = messages.next().await {
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!("ACP: inbox: {e}");
                    continue;
                }
            };
            let bytes = m.payload.to_vec();
            let sender = match sender_of(&bytes) {
                Some(id) => match keys.get(&id) {
                    Some(k) => Some((id, *k)),
                    None => {
                        let (http, gateway, who) = (http.clone(), gateway.clone(), id.clone());
                        let key =
                            tokio::task::spawn_blocking(move || looked_up(&http, &gateway, &who))
                                .await
                                .ok()
                                .and_then(Result::ok);
                        key.map(|k| {
                            keys.insert(id.clone(), k);
                            (id, k)
                        })
                    }
                },
                None => None,
            };
            if incoming
                .send_async(Incoming::Message { bytes, sender })
                .await
                .is_err()
            {
                return;
            }
            if let Err(e) = m.ack().await {
                tracing::debug!("ACP: ack: {e}");
            }
        }
    }
}
