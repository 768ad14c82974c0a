//! A clustered domain's packets for other domains (SPEC-NOTES "A relay cluster on NATS
//! JetStream", "Federation from a cluster"): in the queue stream too, on the subjects
//! `a2acp.fo.<domain>.<recipient>.<thread>` (each token hex, as the queue's), with the
//! same per-thread cap and deduplication by packet id as a local recipient's, until the
//! domain's federator — one node at a time ([`super::lease`]) — hands them over. Their
//! delivery ids (the stream's sequence) are their link sequence numbers: one sequence for
//! the whole domain, which a new federator continues.
//!
//! A packet the remote relay refused for good, or that expired, is replaced by a notice in
//! its sender's queue ([`Cluster::notify`]: the notice first, then the packet deleted, so
//! a federator killed in between leaves the packet for the next one, whose notice the
//! stream then keeps once).

use async_nats::jetstream;

use a2acp_core::Address;

use super::queue::{delete, notice_subject, publish, Enqueued};
use super::{hex, unhex, Cluster, ClusterError, Pending};

/// Every outbound subject.
pub const OUTBOUND_SUBJECTS: &str = "a2acp.fo.>";

/// The subject of a packet for `recipient` (of another domain) in `thread`.
pub fn outbound_subject(recipient: &Address, thread: &str) -> String {
    format!(
        "a2acp.fo.{}.{}.{}",
        hex(recipient.domain()),
        hex(recipient.as_str()),
        hex(thread)
    )
}

/// A packet for another domain read by the federator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound {
    /// Its delivery id (the stream's sequence), which is its link sequence number.
    pub id: u64,
    /// When the stream stored it, in milliseconds since the Unix epoch.
    pub stored_ms: u64,
    /// The envelope.
    pub payload: bytes::Bytes,
}

/// Every packet for other domains, oldest first, then each as it is queued, until
/// dropped.
#[derive(Debug)]
pub struct OutboundReader {
    packets: flume::Receiver<Result<Outbound, ClusterError>>,
    _stop: flume::Sender<()>,
}

impl OutboundReader {
    /// The channel the packets come on.
    pub fn packets(&self) -> &flume::Receiver<Result<Outbound, ClusterError>> {
        &self.packets
    }
}

fn outbound(message: &jetstream::Message, id: u64) -> Option<Outbound> {
    let mut tokens = message.subject.as_str().split('.').skip(2);
    // Only the relay's own subjects: a domain, an address, a thread.
    let (domain, _, _) = (tokens.next()?, tokens.next()?, tokens.next()?);
    unhex(domain)?;
    let published = message.info().ok()?.published;
    let stored_ms = u64::try_from(published.unix_timestamp_nanos() / 1_000_000).ok()?;
    Some(Outbound {
        id,
        stored_ms,
        payload: message.payload.clone(),
    })
}

impl Cluster {
    /// Queues `payload` for `recipient` of another domain (see [`Cluster::enqueue`]).
    pub fn enqueue_outbound(
        &self,
        recipient: &Address,
        thread: &str,
        packet_id: &str,
        payload: bytes::Bytes,
    ) -> Pending<Enqueued> {
        self.publish_once(outbound_subject(recipient, thread), packet_id, payload)
    }

    /// Queues the notice `payload` for `sender` (once, whatever the retries: its id is the
    /// packet's), then deletes the packet `packet` it tells of. A sender whose notices
    /// are at the per-thread cap loses this one (it is logged), as on one relay.
    pub fn notify(&self, sender: &Address, packet: u64, payload: bytes::Bytes) -> Pending<()> {
        let subject = notice_subject(sender);
        self.request(move |link| async move {
            let id = format!("notice-{packet}");
            if publish(&link, subject, id, payload).await? == Enqueued::Overflow {
                tracing::warn!(
                    packet,
                    "cluster: a sender's notices are at their cap: dropped"
                );
            }
            delete(&link, packet).await
        })
    }

    /// Reads every packet for other domains (the federator's work), oldest first, at
    /// most `window` ahead of the caller; goes on through the cluster's faults like a
    /// recipient's watch. Dropping the reader ends it.
    pub fn read_outbound(&self, window: usize) -> OutboundReader {
        let (packets, stop) = self.read_on(OUTBOUND_SUBJECTS.to_string(), window, outbound);
        OutboundReader {
            packets,
            _stop: stop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outbound_subjects_name_the_domain_first() {
        let bob = Address::parse("agent:bob@b.example").unwrap();
        let s = outbound_subject(&bob, "t1");
        let tokens: Vec<&str> = s.split('.').collect();
        assert_eq!(tokens.len(), 5, "{s}");
        assert_eq!(unhex(tokens[2]).as_deref(), Some("b.example"));
        assert_eq!(unhex(tokens[3]).as_deref(), Some("agent:bob@b.example"));
    }
}
