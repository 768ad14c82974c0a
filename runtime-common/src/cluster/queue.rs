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
//!   ([`Cluster::watch`]: a consumer filtered on the recipient's subjects, from
//!   the first packet still queued, then live), and **an acknowledged packet is deleted**
//!   ([`Cluster::remove`]), which frees its slot under the cap.

use std::time::Duration;

use async_nats::jetstream::response::Response;
use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt;

use a2acp_core::Address;

use super::{hex, unhex, Cluster, ClusterConfig, ClusterError, Pending};

/// The stream's name.
pub const STREAM: &str = "A2ACP_QUEUE";

/// The heartbeat a queue watch asks of its consumer: two missed, and the watch makes a
/// new consumer (through another server if its own is gone).
pub const WATCH_HEARTBEAT: Duration = Duration::from_secs(1);

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
    /// The thread it belongs to (empty for a notice).
    pub thread: String,
    /// The bytes the relay queued (the envelope, or the notice).
    pub payload: bytes::Bytes,
    /// An undeliverable notice ([`Cluster::notify`]), not a packet.
    pub notice: bool,
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
    pub(super) stream: stream::Stream,
}

/// The subject of `recipient`'s packets in `thread`.
pub fn subject(recipient: &Address, thread: &str) -> String {
    format!("a2acp.q.{}.{}", hex(recipient.as_str()), hex(thread))
}

/// The subjects of every packet of `recipient` (its undeliverable notices included).
pub fn recipient_subjects(recipient: &Address) -> String {
    format!("a2acp.q.{}.*", hex(recipient.as_str()))
}

/// The last token of the subject of `sender`'s undeliverable notices (not a thread's:
/// those are hex).
pub const NOTICE_TOKEN: &str = "notice";

/// The subject of `sender`'s undeliverable notices.
pub fn notice_subject(sender: &Address) -> String {
    format!("a2acp.q.{}.{NOTICE_TOKEN}", hex(sender.as_str()))
}

/// The stream's subjects: local recipients' packets and notices, and packets for other
/// domains ([`super::outbound`]).
const SUBJECTS: [&str; 2] = ["a2acp.q.>", "a2acp.fo.>"];

pub(super) async fn open(
    js: &jetstream::Context,
    config: &ClusterConfig,
) -> Result<Queue, ClusterError> {
    let wanted = stream::Config {
        name: STREAM.to_string(),
        description: Some("a2acp: packets accepted and not yet acknowledged".to_string()),
        subjects: SUBJECTS.iter().map(|s| s.to_string()).collect(),
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
            // A stream made before the domain federated lacks the outbound subjects.
            let mut config = info.config.clone();
            let missing: Vec<String> = SUBJECTS
                .iter()
                .filter(|s| !config.subjects.iter().any(|h| h == *s))
                .map(|s| s.to_string())
                .collect();
            if !missing.is_empty() {
                config.subjects.extend(missing);
                js.update_stream(&config)
                    .await
                    .map_err(|e| ClusterError::JetStream(e.to_string()))?;
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
fn already_gone(e: &async_nats::jetstream::Error) -> bool {
    use async_nats::jetstream::ErrorCode;
    match e.error_code() {
        ErrorCode::NO_MESSAGE_FOUND => true,
        ErrorCode::STREAM_MESSAGE_DELETE_FAILED => e.to_string().contains("no message found"),
        _ => false,
    }
}

/// The answer to `STREAM.MSG.DELETE`.
#[derive(serde::Deserialize)]
struct Deleted {
    #[allow(dead_code)]
    success: bool,
}

/// Publishes `payload` on `subject` under the id `packet_id`; see
/// [`Cluster::publish_once`].
pub(super) async fn publish(
    link: &super::Link,
    subject: String,
    packet_id: String,
    payload: bytes::Bytes,
) -> Result<Enqueued, ClusterError> {
    // A publish is repeated only with its packet id, so JetStream keeps one copy.
    super::again_while_transient(link.request_timeout, || {
        let (subject, payload) = (subject.clone(), payload.clone());
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
}

/// Deletes message `id` of the stream; see [`Cluster::remove`].
pub(super) async fn delete(link: &super::Link, id: u64) -> Result<(), ClusterError> {
    // `no_erase`: the client's `delete_message` leaves it out, and the server then
    // overwrites the message's bytes on disk ("secure erase") on every replica — the most
    // expensive part of a packet's life. The envelope is sealed end to end; the relay
    // never held its plaintext to erase.
    let request = serde_json::json!({ "seq": id, "no_erase": true });
    let answer: Result<Response<Deleted>, _> = link
        .js
        .request(format!("STREAM.MSG.DELETE.{STREAM}"), &request)
        .await;
    match answer {
        Ok(Response::Ok(_)) => Ok(()),
        Ok(Response::Err { error }) if already_gone(&error) => Ok(()),
        Ok(Response::Err { error }) => Err(ClusterError::JetStream(error.to_string())),
        Err(e) => Err(ClusterError::JetStream(e.to_string())),
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
        self.publish_once(subject(recipient, thread), packet_id, payload)
    }

    /// Publishes `payload` on `subject` under the id `packet_id` (so a retry is stored
    /// once), answering once JetStream made it durable, or that the subject is at its cap.
    pub(super) fn publish_once(
        &self,
        subject: String,
        packet_id: &str,
        payload: bytes::Bytes,
    ) -> Pending<Enqueued> {
        let packet_id = packet_id.to_string();
        self.request(move |link| async move { publish(&link, subject, packet_id, payload).await })
    }

    /// Deletes the packet `id` from the queue (its recipient acknowledged it). Deleting
    /// one already gone is not an error.
    pub fn remove(&self, id: u64) -> Pending<()> {
        self.request(move |link| async move { delete(&link, id).await })
    }

    /// Everything queued for `recipient`, oldest first, then each packet as it is queued;
    /// at most `window` read ahead of the caller. A consumer lost with its server (or a
    /// leader being elected) is made again from the packet after the last one read, so
    /// the watch goes on through the cluster's faults. Dropping the [`Watch`] ends it.
    pub fn watch(&self, recipient: &Address, window: usize) -> Watch {
        let (packets, stop) = self.read_on(recipient_subjects(recipient), window, queued);
        Watch {
            packets,
            _stop: stop,
        }
    }

    /// Reads `filter`'s messages, oldest first, then each as it is stored, each as `map`
    /// makes it, at most `window` ahead of the caller, through the cluster's faults (a
    /// consumer lost is made again from the message after the last one read), until the
    /// returned sender is dropped.
    pub(super) fn read_on<T: Send + 'static>(
        &self,
        filter: String,
        window: usize,
        map: fn(&jetstream::Message, u64) -> Option<T>,
    ) -> (flume::Receiver<Result<T, ClusterError>>, flume::Sender<()>) {
        let (tx, packets) = flume::bounded(window.max(1));
        let (stop, stopped) = flume::bounded::<()>(0);
        self.spawn(move |link| async move {
            let run = async {
                let mut next: Option<u64> = None;
                loop {
                    let (last, why) = match read_from(&link, &filter, next, &tx, map).await {
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
                        tracing::debug!("reading {filter}: {e}; reading again");
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            };
            tokio::select! {
                _ = run => {}
                _ = stopped.recv_async() => {}
            }
        });
        (packets, stop)
    }
}

/// A message of a recipient's subjects as the watch gives it.
fn queued(message: &jetstream::Message, id: u64) -> Option<Queued> {
    let last = message.subject.as_str().rsplit('.').next()?;
    if last == NOTICE_TOKEN {
        return Some(Queued {
            id,
            thread: String::new(),
            payload: message.payload.clone(),
            notice: true,
        });
    }
    Some(Queued {
        id,
        thread: unhex(last)?,
        payload: message.payload.clone(),
        notice: false,
    })
}

/// Reads `filter`'s messages from `from` (the oldest if `None`) into `tx`, each as `map`
/// makes it (one it makes nothing of is skipped), until the consumer ends or fails, or
/// the caller has gone: the last sequence read (to go on from), with why it stopped if
/// it failed.
async fn read_from<T>(
    link: &super::Link,
    filter: &str,
    from: Option<u64>,
    tx: &flume::Sender<Result<T, ClusterError>>,
    map: fn(&jetstream::Message, u64) -> Option<T>,
) -> Result<Option<u64>, (Option<u64>, ClusterError)> {
    let js = |e: &dyn std::fmt::Display| ClusterError::JetStream(e.to_string());
    let deliver_policy = match from {
        None => consumer::DeliverPolicy::All,
        Some(start_sequence) => consumer::DeliverPolicy::ByStartSequence { start_sequence },
    };
    // A plain ephemeral pull consumer, not JetStream's "ordered" one: that one notices a
    // lost server only after two missed 15-second heartbeats, then tries to make itself
    // again on its own. This one is pulled with a short heartbeat; when it fails (its
    // server gone, a leader elected) the watch makes a new one from the packet after the
    // last read, within seconds.
    let consumer = link
        .queue
        .stream
        .create_consumer(consumer::pull::Config {
            filter_subject: filter.to_string(),
            deliver_policy,
            ack_policy: consumer::AckPolicy::None,
            // One copy, in memory: it holds no state the watch cannot rebuild.
            num_replicas: 1,
            memory_storage: true,
            // A consumer whose watch is gone (its node killed) is dropped by the server.
            inactive_threshold: Duration::from_secs(30),
            ..Default::default()
        })
        .await
        .map_err(|e| (from.map(|f| f - 1), js(&e)))?;
    let mut messages = consumer
        .stream()
        .heartbeat(WATCH_HEARTBEAT)
        .expires(WATCH_HEARTBEAT * 5)
        .messages()
        .await
        .map_err(|e| (from.map(|f| f - 1), js(&e)))?;
    let mut last = from.map(|f| f - 1);
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| (last, js(&e)))?;
        let id = message.info().map_err(|e| (last, js(&e)))?.stream_sequence;
        let Some(item) = map(&message, id) else {
            // Not a subject this relay writes: skip it rather than stop the reader.
            tracing::warn!("queue: a message on {} is not the relay's", message.subject);
            last = Some(id);
            continue;
        };
        if tx.send_async(Ok(item)).await.is_err() {
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
