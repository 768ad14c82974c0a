//! The queue of a clustered domain: every packet accepted for an address of the domain,
//! until its recipient acknowledges it, in the JetStream stream `A2ACP_QUEUE` (file
//! storage, `replicas` copies). One subject per recipient and thread,
//! `a2acp.q.<recipient>.<thread>` (each token the UTF-8 bytes in lower-case hex, as the
//! registry's keys), so that:
//!
//! - **the per-thread cap is JetStream's**: `max_messages_per_subject` is the relay's
//!   `queue_per_thread` with `discard: new` per subject, so a packet past the cap is
//!   refused by the stream's leader, whichever node it came through ([`Enqueued::Overflow`],
//!   the relay's `overflow` frame);
//! - **a retried publish is queued once**: each packet is published with `Nats-Msg-Id` set
//!   to an id the relay derives from the envelope, and JetStream drops a second publish
//!   with the same id within `duplicate_window` ([`Enqueued::Queued`] says `duplicate`);
//! - **an `accepted` means durable**: [`Cluster::enqueue`] answers once JetStream
//!   acknowledged the write, which it does after a quorum stored it (with `sync_interval:
//!   always`, on disk);
//! - **the delivery id is the stream's sequence**: monotonic across the cluster, never
//!   reused, as the single relay's (spec §13.2 resends by id);
//! - **a recipient's node reads what is queued for it**, in order, from any node
//!   ([`Cluster::watch`]: an ordered consumer filtered on the recipient's subjects, from
//!   the first packet still queued, then live), and **an acknowledged packet is deleted**
//!   ([`Cluster::remove`]), which frees its slot under the cap.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt;

use a2acp_core::Address;

use super::{hex, unhex, Cluster, ClusterConfig, ClusterError, Pending};

/// The stream's name.
pub const STREAM: &str = "A2ACP_QUEUE";

/// How long JetStream remembers a packet's id to drop a second publish of it.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(10 * 60);

/// What became of a packet offered to the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// Queued (durably) under this delivery id; `duplicate` when it had been queued before
    /// under the same packet id (the id is the first one's).
    Queued {
        /// The delivery id: the stream's sequence.
        id: u64,
        /// The packet had been queued already.
        duplicate: bool,
    },
    /// The recipient's thread already holds `queue_per_thread` packets: not queued.
    Overflow,
}

/// A packet read from the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// Its delivery id (the stream's sequence).
    pub id: u64,
    /// The thread it belongs to.
    pub thread: String,
    /// The bytes the relay queued (the envelope).
    pub payload: bytes::Bytes,
}

/// The packets queued for one recipient, oldest first, then each new one as it is queued,
/// until dropped.
#[derive(Debug)]
pub struct Watch {
    packets: flume::Receiver<Result<Queued, ClusterError>>,
    _stop: flume::Sender<()>,
}

impl Watch {
    /// The channel the packets come on; an error ends the watch (watch again).
    pub fn packets(&self) -> &flume::Receiver<Result<Queued, ClusterError>> {
        &self.packets
    }
}

/// The stream, for the node's link.
pub(crate) struct Queue {
    stream: stream::Stream,
}

/// The subject of `recipient`'s packets in `thread`.
pub fn subject(recipient: &Address, thread: &str) -> String {
    format!("a2acp.q.{}.{}", hex(recipient.as_str()), hex(thread))
}

/// The subjects of every packet of `recipient`.
pub fn recipient_subjects(recipient: &Address) -> String {
    format!("a2acp.q.{}.*", hex(recipient.as_str()))
}

pub(super) async fn open(
    js: &jetstream::Context,
    config: &ClusterConfig,
) -> Result<Queue, ClusterError> {
    let wanted = stream::Config {
        name: STREAM.to_string(),
        description: Some("a2acp: packets accepted and not yet acknowledged".to_string()),
        subjects: vec!["a2acp.q.>".to_string()],
        storage: stream::StorageType::File,
        num_replicas: config.replicas,
        retention: stream::RetentionPolicy::Limits,
        max_messages_per_subject: i64::from(config.queue_per_thread),
        discard: stream::DiscardPolicy::New,
        discard_new_per_subject: true,
        duplicate_window: DUPLICATE_WINDOW,
        ..Default::default()
    };
    let stream = match js.get_stream(STREAM).await {
        Ok(mut stream) => {
            let info = stream
                .info()
                .await
                .map_err(|e| ClusterError::JetStream(e.to_string()))?;
            // Another node may run with another cap: the stream holds one, the first
            // node's, and a node that disagrees says so rather than changing it under the
            // others.
            let held = info.config.max_messages_per_subject;
            if held != wanted.max_messages_per_subject {
                return Err(ClusterError::Misconfigured(format!(
                    "{STREAM} caps each thread at {held} packets, this node at {}: \
                     give every node the same queue_per_thread",
                    wanted.max_messages_per_subject
                )));
            }
            stream
        }
        Err(_) => js
            .create_stream(wanted)
            .await
            .map_err(|e| ClusterError::JetStream(e.to_string()))?,
    };
    Ok(Queue { stream })
}

/// Whether a publish was refused because the subject is at its cap (the server's
/// "maximum messages per subject exceeded", error 10077).
fn over_the_cap(e: &jetstream::context::PublishError) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(js) = s.downcast_ref::<async_nats::jetstream::Error>() {
            return js.error_code() == async_nats::jetstream::ErrorCode::STREAM_STORE_FAILED
                && js.to_string().contains("maximum messages per subject");
        }
        source = s.source();
    }
    false
}

/// Whether a delete failed because the packet is not there (removed before: a second
/// acknowledgement, or a node that acknowledged it and died before it knew). Servers
/// answer "delete failed" (10057) with the description "no message found", or 10037.
fn already_gone(e: &stream::DeleteMessageError) -> bool {
    use async_nats::jetstream::ErrorCode;
    match e.kind() {
        stream::DeleteMessageErrorKind::JetStream(js) => match js.error_code() {
            ErrorCode::NO_MESSAGE_FOUND => true,
            ErrorCode::STREAM_MESSAGE_DELETE_FAILED => js.to_string().contains("no message found"),
            _ => false,
        },
        _ => false,
    }
}

impl Cluster {
    /// Queues `payload` for `recipient` in `thread` under the packet id `packet_id`:
    /// answers once JetStream made it durable, or that the thread is at its cap.
    pub fn enqueue(
        &self,
        recipient: &Address,
        thread: &str,
        packet_id: &str,
        payload: bytes::Bytes,
    ) -> Pending<Enqueued> {
        let subject = subject(recipient, thread);
        let packet_id = packet_id.to_string();
        self.request(move |link| async move {
            // A publish is repeated only with its packet id, so JetStream keeps one copy.
            super::again_while_transient(link.request_timeout, || {
                let (link, subject, payload) = (link.clone(), subject.clone(), payload.clone());
                let publish = jetstream::message::PublishMessage::build()
                    .payload(payload)
                    .message_id(&packet_id);
                async move {
                    let js = |e: &dyn std::fmt::Display| ClusterError::JetStream(e.to_string());
                    let ack = link
                        .js
                        .send_publish(subject, publish)
                        .await
                        .map_err(|e| (js(&e), true))?;
                    match ack.await {
                        Ok(ack) => Ok(Enqueued::Queued {
                            id: ack.sequence,
                            duplicate: ack.duplicate,
                        }),
                        Err(e) if over_the_cap(&e) => Ok(Enqueued::Overflow),
                        Err(e) => Err((js(&e), true)),
                    }
                }
            })
            .await
        })
    }

    /// Deletes the packet `id` from the queue (its recipient acknowledged it). Deleting
    /// one already gone is not an error.
    pub fn remove(&self, id: u64) -> Pending<()> {
        self.request(move |link| async move {
            match link.queue.stream.delete_message(id).await {
                Ok(_) => Ok(()),
                Err(e) if already_gone(&e) => Ok(()),
                Err(e) => Err(ClusterError::JetStream(e.to_string())),
            }
        })
    }

    /// Everything queued for `recipient`, oldest first, then each packet as it is queued;
    /// at most `window` read ahead of the caller. A consumer lost with its server (or a
    /// leader being elected) is made again from the packet after the last one read, so
    /// the watch goes on through the cluster's faults. Dropping the [`Watch`] ends it.
    pub fn watch(&self, recipient: &Address, window: usize) -> Watch {
        let (tx, packets) = flume::bounded(window.max(1));
        let (stop, stopped) = flume::bounded::<()>(0);
        let filter = recipient_subjects(recipient);
        self.spawn(move |link| async move {
            let run = async {
                let mut next: Option<u64> = None;
                loop {
                    let (last, why) = match read_from(&link, &filter, next, &tx).await {
                        Ok(last) => (last, None),
                        Err((last, e)) => (last, Some(e)),
                    };
                    if tx.is_disconnected() {
                        return;
                    }
                    if let Some(last) = last {
                        next = Some(last + 1);
                    }
                    if let Some(e) = why {
                        tracing::debug!("queue watch of {filter}: {e}; reading again");
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            };
            tokio::select! {
                _ = run => {}
                _ = stopped.recv_async() => {}
            }
        });
        Watch {
            packets,
            _stop: stop,
        }
    }
}

/// Reads `filter`'s packets from `from` (the oldest if `None`) into `tx` until the
/// consumer ends or fails, or the caller has gone: the last sequence read (to go on
/// from), with why it stopped if it failed.
async fn read_from(
    link: &super::Link,
    filter: &str,
    from: Option<u64>,
    tx: &flume::Sender<Result<Queued, ClusterError>>,
) -> Result<Option<u64>, (Option<u64>, ClusterError)> {
    let js = |e: &dyn std::fmt::Display| ClusterError::JetStream(e.to_string());
    let deliver_policy = match from {
        None => consumer::DeliverPolicy::All,
        Some(start_sequence) => consumer::DeliverPolicy::ByStartSequence { start_sequence },
    };
    let consumer = link
        .queue
        .stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: filter.to_string(),
            deliver_policy,
            ..Default::default()
        })
        .await
        .map_err(|e| (from.map(|f| f - 1), js(&e)))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| (from.map(|f| f - 1), js(&e)))?;
    let mut last = from.map(|f| f - 1);
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| (last, js(&e)))?;
        let id = message.info().map_err(|e| (last, js(&e)))?.stream_sequence;
        let Some(thread) = message.subject.as_str().rsplit('.').next().and_then(unhex) else {
            // Not a subject this relay writes: skip it rather than stop the recipient.
            tracing::warn!("queue: a message on {} is not the relay's", message.subject);
            last = Some(id);
            continue;
        };
        let packet = Queued {
            id,
            thread,
            payload: message.payload.clone(),
        };
        if tx.send_async(Ok(packet)).await.is_err() {
            return Ok(last);
        }
        last = Some(id);
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_one_token_per_name_and_read_back() {
        let bob = Address::parse("agent:bob@b.example").unwrap();
        let s = subject(&bob, "t.1 *>");
        assert_eq!(s.split('.').count(), 4, "{s}");
        assert_eq!(
            unhex(s.rsplit('.').next().unwrap()).as_deref(),
            Some("t.1 *>")
        );
        assert!(recipient_subjects(&bob).ends_with(".*"));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }
}
