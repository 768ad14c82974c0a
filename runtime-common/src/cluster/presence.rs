//! Where each address of a clustered domain is connected, so that the last connection
//! wins across nodes as it does on one relay (spec §13: an agent that connects again
//! replaces its older connection, on whatever node that one is). JetStream key-value
//! bucket `a2acp_presence` (file storage, `replicas` copies, one revision per key): key,
//! the address in hex as the registry's; value, `{"node": …, "connection": …}`.
//!
//! A node that authenticates an address announces it ([`Cluster::announce`]) and learns
//! the revision the bucket gave the announcement. Every node watches the bucket
//! ([`Cluster::presence`]); a node holding a connection of an address for which a
//! *later* revision names another node or connection replaces its own (sends `replaced`,
//! closes it). Revisions are the stream's sequence, one order for every node, so the
//! newest connection wins without comparing clocks; a node seeing an older revision than
//! its own connection's ignores it.

use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use a2acp_core::Address;

use super::{Cluster, ClusterConfig, ClusterError, Pending};

/// The bucket's name.
pub const BUCKET: &str = "a2acp_presence";

/// One announcement: `address` connected to `node` as its connection `connection`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presence {
    /// The address (as announced).
    pub address: String,
    /// The node holding the connection.
    pub node: String,
    /// The node's id of the connection.
    pub connection: u64,
    /// The bucket's revision of this announcement: a later connection has a higher one.
    pub revision: u64,
}

/// The announcements made after it was opened, in revision order, until dropped.
#[derive(Debug)]
pub struct PresenceWatch {
    updates: flume::Receiver<Result<Presence, ClusterError>>,
    _stop: flume::Sender<()>,
}

impl PresenceWatch {
    /// The channel the announcements come on; an error ends the watch.
    pub fn updates(&self) -> &flume::Receiver<Result<Presence, ClusterError>> {
        &self.updates
    }
}

#[derive(Serialize, Deserialize)]
struct Record {
    node: String,
    connection: u64,
}

pub(super) async fn open(
    js: &jetstream::Context,
    config: &ClusterConfig,
) -> Result<kv::Store, ClusterError> {
    super::open_bucket(
        js,
        config,
        BUCKET,
        "a2acp: the node and connection each address is connected to",
    )
    .await
}

fn read(entry: &kv::Entry) -> Result<Presence, ClusterError> {
    let record: Record =
        serde_json::from_slice(&entry.value).map_err(|e| ClusterError::Corrupt(e.to_string()))?;
    let address = super::unhex(&entry.key)
        .ok_or_else(|| ClusterError::Corrupt(format!("presence key {}", entry.key)))?;
    Ok(Presence {
        address,
        node: record.node,
        connection: record.connection,
        revision: entry.revision,
    })
}

impl Cluster {
    /// Announces that `address` is connected to this node as `connection`; answers the
    /// announcement's revision once the cluster stored it.
    pub fn announce(&self, address: &Address, connection: u64) -> Pending<u64> {
        let key = super::registry::bucket_key(address);
        let value = serde_json::to_vec(&Record {
            node: self.config.node.clone(),
            connection,
        })
        .expect("a record of a string and a number serialises");
        let value = bytes::Bytes::from(value);
        self.request(move |link| async move {
            super::again_while_transient(link.request_timeout, || {
                let (link, key, value) = (link.clone(), key.clone(), value.clone());
                async move {
                    link.presence
                        .put(key, value)
                        .await
                        .map_err(|e| (ClusterError::JetStream(e.to_string()), true))
                }
            })
            .await
        })
    }

    /// Every announcement made from now on, by any node (this one's included): returns
    /// once the cluster watches for this node, so no announcement made after it returns
    /// is missed.
    pub fn presence(&self) -> Result<PresenceWatch, ClusterError> {
        let (tx, updates) = flume::unbounded();
        let (stop, stopped) = flume::bounded::<()>(0);
        let (ready_tx, ready) = flume::bounded::<Result<(), ClusterError>>(1);
        let timeout = self.config.request_timeout;
        self.spawn(move |link| async move {
            let run = async {
                let opened = tokio::time::timeout(timeout, link.presence.watch_all()).await;
                let mut watch = match opened {
                    Ok(Ok(watch)) => {
                        let _ = ready_tx.send(Ok(()));
                        watch
                    }
                    Ok(Err(e)) => {
                        let _ = ready_tx.send(Err(ClusterError::JetStream(e.to_string())));
                        return Ok(());
                    }
                    Err(_) => {
                        let _ = ready_tx.send(Err(ClusterError::Timeout(timeout)));
                        return Ok(());
                    }
                };
                while let Some(entry) = watch.next().await {
                    let entry = entry.map_err(|e| ClusterError::JetStream(e.to_string()))?;
                    if entry.operation != kv::Operation::Put {
                        continue;
                    }
                    if tx.send_async(read(&entry)).await.is_err() {
                        return Ok(());
                    }
                }
                Ok(())
            };
            tokio::select! {
                result = run => {
                    if let Err(e) = result {
                        let _ = tx.send_async(Err(e)).await;
                    }
                }
                _ = stopped.recv_async() => {}
            }
        });
        ready.recv().unwrap_or(Err(ClusterError::Stopped))?;
        Ok(PresenceWatch {
            updates,
            _stop: stop,
        })
    }
}
