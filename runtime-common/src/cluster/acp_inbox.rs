//! The inboxes of ACP agents (seed 004 §5.1): the relay's ACP gateway publishes each
//! signed message it accepted to `agent.<recipient-id>.inbox`, a subject the stream
//! `ACP_INBOX` captures (file storage, the cluster's replicas, 24 hours, 10,000 messages
//! per inbox, the oldest dropped first). A recipient subscribes to its subject (core NATS:
//! each message once, as it is stored) or reads the stream through a durable consumer
//! filtered to it (what an a2acp agent does, `acp_<agent-id>`). A message is published
//! with `Nats-Msg-Id` = the SHA-256 of its bytes, so a submission retried within the
//! stream's duplicate window is stored once.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use sha2::{Digest, Sha256};

use super::{Cluster, ClusterConfig, ClusterError, Pending};
use crate::acp::{inbox_subject, INBOX_STREAM};

/// How long an inbox keeps a message.
pub const INBOX_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// Messages one inbox keeps at most (the oldest go first).
pub const INBOX_MAX_MESSAGES: i64 = 10_000;
/// Within this, a message submitted again is stored once.
pub const INBOX_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// Makes the stream if the cluster has none.
pub(super) async fn open(
    js: &jetstream::Context,
    config: &ClusterConfig,
) -> Result<(), ClusterError> {
    if js.get_stream(INBOX_STREAM).await.is_ok() {
        return Ok(());
    }
    js.create_stream(stream::Config {
        name: INBOX_STREAM.to_string(),
        description: Some("ACP (seed 004): the inboxes agent.<id>.inbox".to_string()),
        subjects: vec!["agent.*.inbox".to_string()],
        storage: stream::StorageType::File,
        num_replicas: config.replicas,
        retention: stream::RetentionPolicy::Limits,
        max_age: INBOX_MAX_AGE,
        max_messages_per_subject: INBOX_MAX_MESSAGES,
        discard: stream::DiscardPolicy::Old,
        duplicate_window: INBOX_DUPLICATE_WINDOW,
        ..Default::default()
    })
    .await
    .map(|_| ())
    .map_err(|e| ClusterError::JetStream(e.to_string()))
}

/// Where a message was stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Its sequence in the stream.
    pub seq: u64,
    /// It had been stored before (the same bytes within the duplicate window).
    pub duplicate: bool,
}

impl Cluster {
    /// Stores `message` in the inbox of `agent_id` once a quorum holds it.
    pub fn publish_inbox(&self, agent_id: &str, message: bytes::Bytes) -> Pending<Stored> {
        let subject = inbox_subject(agent_id);
        let id: String = Sha256::digest(&message)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.request(move |link| async move {
            super::again_while_transient(link.request_timeout, || {
                let publish = jetstream::message::PublishMessage::build()
                    .payload(message.clone())
                    .message_id(&id);
                let (js, subject) = (link.js.clone(), subject.clone());
                async move {
                    let err = |e: &dyn std::fmt::Display| ClusterError::JetStream(e.to_string());
                    let ack = js
                        .send_publish(subject, publish)
                        .await
                        .map_err(|e| (err(&e), true))?;
                    let ack = ack.await.map_err(|e| (err(&e), true))?;
                    Ok(Stored {
                        seq: ack.sequence,
                        duplicate: ack.duplicate,
                    })
                }
            })
            .await
        })
    }
}
