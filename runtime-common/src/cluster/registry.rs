//! The registry of a clustered domain: each address and the key it was registered with,
//! in the JetStream key-value bucket `a2acp_registry` (file storage, `replicas` copies,
//! one revision per key). First come, first served across every node: a node claims an
//! address with the bucket's `create` — a write that JetStream applies only if the key
//! has no value yet, decided once by the stream's leader through its quorum — so two
//! nodes can never accept different keys for one address, whatever the order of their
//! requests, and a claim acknowledged survives the loss of any minority of NATS servers.
//!
//! The claim is the bucket's compare-and-set on the key's last revision being 0 (not the
//! client's `create`, which after losing a race reads the winner with a direct get that a
//! lagging replica may answer "no such key", and fails). Every read the registry makes —
//! after a lost race and in [`Cluster::registered`] — goes to the stream's leader
//! (`STREAM.MSG.GET` of the key's last message), never to a replica, so a node never reads
//! an address as free once another node's claim was acknowledged. A claim refused while
//! another node's write to the same key is still in flight (the leader answers "wrong last
//! sequence" and has nothing to read yet) is asked again until one of the two is applied.
//!
//! Keys of the bucket are the address's UTF-8 bytes in lower-case hex (the bucket's keys
//! allow only `[-/_=.a-zA-Z0-9]`; hex keeps the mapping one to one). The value is JSON:
//! `{"key": "<the Ed25519 public key, standard base64>", "node": "<the claiming node>"}`.

use async_nats::jetstream::{self, kv};
use base64::Engine;
use serde::{Deserialize, Serialize};

use a2acp_core::crypto::PublicKey;
use a2acp_core::Address;

use super::{Cluster, ClusterConfig, ClusterError, Link, Pending};

/// The bucket's name.
pub const BUCKET: &str = "a2acp_registry";

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The address was free and is now registered with the key (by this node).
    Claimed,
    /// The address was already registered with this same key (by any node).
    Same,
    /// The address is registered with another key: the claim is refused.
    Taken,
}

#[derive(Serialize, Deserialize)]
struct Record {
    key: String,
    node: String,
}

/// The bucket's key for `address`.
pub fn bucket_key(address: &Address) -> String {
    super::hex(address.as_str())
}

/// The bucket, and its stream for reads from the leader.
pub(crate) struct Registry {
    store: kv::Store,
    stream: jetstream::stream::Stream,
}

pub(super) async fn open(
    js: &jetstream::Context,
    config: &ClusterConfig,
) -> Result<Registry, ClusterError> {
    let store = match js.get_key_value(BUCKET).await {
        Ok(store) => store,
        Err(_) => {
            super::open_bucket(
                js,
                config,
                BUCKET,
                "a2acp: each address of the domain and its registered key",
            )
            .await?
        }
    };
    let stream = js
        .get_stream(format!("KV_{BUCKET}"))
        .await
        .map_err(|e| ClusterError::JetStream(e.to_string()))?;
    Ok(Registry { store, stream })
}

fn encode(key: &PublicKey, node: &str) -> bytes::Bytes {
    let record = Record {
        key: base64::engine::general_purpose::STANDARD.encode(key.to_bytes()),
        node: node.to_string(),
    };
    serde_json::to_vec(&record)
        .expect("a record of two strings serialises")
        .into()
}

fn decode(value: &[u8]) -> Result<[u8; 32], ClusterError> {
    let record: Record =
        serde_json::from_slice(value).map_err(|e| ClusterError::Corrupt(e.to_string()))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(record.key)
        .map_err(|e| ClusterError::Corrupt(e.to_string()))?;
    bytes
        .try_into()
        .map_err(|_| ClusterError::Corrupt("a key that is not 32 bytes".to_string()))
}

/// Whether a compare-and-set failed because the key already has a value: JetStream's
/// "wrong last sequence", which servers answer with error code 10071 (the client's
/// `WrongLastRevision`) or, from 2.11 on for a per-subject expectation, 10164 (which the
/// client reports as another error: its code is read from the error's source).
fn lost_the_race(e: &kv::UpdateError) -> bool {
    use async_nats::jetstream::ErrorCode;
    if e.kind() == kv::UpdateErrorKind::WrongLastRevision {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(js) = s.downcast_ref::<async_nats::jetstream::Error>() {
            return matches!(
                js.error_code(),
                ErrorCode::STREAM_WRONG_LAST_SEQUENCE
                    | ErrorCode::STREAM_WRONG_LAST_SEQUENCE_CONSTANT
            );
        }
        source = s.source();
    }
    false
}

/// The key `address` holds, read from the stream's leader.
async fn lookup(link: &Link, address: &Address) -> Result<Option<[u8; 32]>, ClusterError> {
    let subject = format!("$KV.{BUCKET}.{}", bucket_key(address));
    match link
        .registry
        .stream
        .get_last_raw_message_by_subject(&subject)
        .await
    {
        Ok(message) => decode(&message.payload).map(Some),
        Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
            Ok(None)
        }
        Err(e) => Err(ClusterError::JetStream(e.to_string())),
    }
}

impl Cluster {
    /// Registers `address` with `key` unless it is registered already: [`Claim::Claimed`]
    /// once the cluster has made the registration durable on a quorum, [`Claim::Same`] if
    /// it already holds this key, [`Claim::Taken`] if another.
    pub fn claim(&self, address: &Address, key: &PublicKey) -> Pending<Claim> {
        let address = address.clone();
        let wanted = key.to_bytes();
        let value = encode(key, &self.config.node);
        self.request(move |link| async move {
            // Transient refusals (a stream just created whose subjects the server
            // does not know yet, a leader being elected) are tried again until just
            // before the request's deadline, then reported as they are.
            let deadline = tokio::time::Instant::now() + link.request_timeout * 9 / 10;
            let mut attempt: u32 = 0;
            let mut pause = || {
                attempt = attempt.saturating_add(1);
                tokio::time::sleep(std::time::Duration::from_millis(
                    u64::from(attempt.min(20)) * 5,
                ))
            };
            loop {
                match link
                    .registry
                    .store
                    .update(bucket_key(&address), value.clone(), 0)
                    .await
                {
                    Ok(_) => return Ok(Claim::Claimed),
                    Err(e) if lost_the_race(&e) => match lookup(&link, &address).await? {
                        Some(held) if held == wanted => return Ok(Claim::Same),
                        Some(_) => return Ok(Claim::Taken),
                        // Another node's write to this key is in flight (the leader
                        // refuses an expectation on a key with a write not yet applied):
                        // it is applied or fails shortly; ask again. The request's
                        // deadline bounds the wait.
                        None => pause().await,
                    },
                    Err(e) if tokio::time::Instant::now() < deadline => {
                        tracing::debug!("registry claim of {address}: {e}; trying again");
                        pause().await;
                    }
                    Err(e) => return Err(ClusterError::JetStream(e.to_string())),
                }
            }
        })
    }

    /// The key `address` is registered with, if any (its raw 32 bytes, as the relay keeps
    /// keys it has not yet checked as a point).
    pub fn registered(&self, address: &Address) -> Pending<Option<[u8; 32]>> {
        let address = address.clone();
        self.request(move |link| async move { lookup(&link, &address).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_keys_are_one_to_one_and_only_use_allowed_characters() {
        let a = Address::parse("agent:alice@a.example").unwrap();
        let b = Address::parse("agent:alice.a@example").unwrap();
        let (ka, kb) = (bucket_key(&a), bucket_key(&b));
        assert_ne!(ka, kb);
        assert!(ka.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            ka, "6167656e743a616c69636540612e6578616d706c65",
            "hex of the address's bytes"
        );
    }

    #[test]
    fn a_record_reads_back_and_garbage_is_corrupt() {
        let key = a2acp_core::crypto::IdentityKey::from_seed([7; 32]).public();
        let value = encode(&key, "n1");
        assert_eq!(decode(&value).unwrap(), key.to_bytes());
        assert!(matches!(decode(b"{}"), Err(ClusterError::Corrupt(_))));
        assert!(matches!(
            decode(br#"{"key":"AAAA","node":"n1"}"#),
            Err(ClusterError::Corrupt(_))
        ));
    }
}
