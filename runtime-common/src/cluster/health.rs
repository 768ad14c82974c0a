//! What an operator sees of a node's link to the cluster: whether the NATS connection is
//! up, how many packets the cluster holds queued, and which relay nodes are alive.
//!
//! Every node puts its name in the key-value bucket `a2acp_nodes` every
//! [`NODE_BEAT`]; the bucket forgets an entry [`NODE_TTL`] after its last put (a killed
//! node drops out by itself). The same task reads the queue stream's size and the
//! bucket's keys, so a scrape of `/metrics` never waits on the network.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;

use super::{hex, unhex, Cluster};

/// The bucket of live nodes.
pub const NODES_BUCKET: &str = "a2acp_nodes";
/// How often a node says it is alive (and the figures are read).
pub const NODE_BEAT: Duration = Duration::from_secs(2);
/// How long after its last beat a node is forgotten.
pub const NODE_TTL: Duration = Duration::from_secs(10);

/// A node's view of the cluster, refreshed every [`NODE_BEAT`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterHealth {
    /// This node's name.
    pub node: String,
    /// The NATS connection is up.
    pub connected: bool,
    /// Packets the cluster's queue stream holds (every recipient's, not acknowledged).
    pub queued: u64,
    /// The relay nodes alive (their last beat within [`NODE_TTL`]), by name.
    pub nodes: Vec<String>,
}

/// Shared between the link's thread (which writes) and the relay (which reads).
#[derive(Debug, Default)]
pub(crate) struct HealthCell {
    pub(crate) connected: AtomicBool,
    figures: Mutex<(u64, Vec<String>)>,
}

impl Cluster {
    /// The node's view of the cluster, as of its last beat.
    pub fn health(&self) -> ClusterHealth {
        let (queued, nodes) = self
            .health
            .figures
            .lock()
            .map(|g| g.clone())
            .unwrap_or_default();
        ClusterHealth {
            node: self.config.node.clone(),
            connected: self.health.connected.load(Ordering::Relaxed),
            queued,
            nodes,
        }
    }

    /// Starts the node's beat: its name in [`NODES_BUCKET`] and the figures of
    /// [`Cluster::health`], every [`NODE_BEAT`], for as long as the link lives.
    pub(crate) fn beat(&self) {
        let cell = self.health.clone();
        let node = self.config.node.clone();
        self.spawn(move |link| async move {
            let mut tick = tokio::time::interval(NODE_BEAT);
            loop {
                tick.tick().await;
                let _ = tokio::time::timeout(NODE_BEAT, figures(&link, &node, &cell)).await;
            }
        });
    }
}

async fn figures(link: &super::Link, node: &str, cell: &Arc<HealthCell>) {
    let _ = link.nodes.put(hex(node), bytes::Bytes::new()).await;
    let mut queue = link.queue.stream.clone();
    let queued = match queue.info().await {
        Ok(info) => info.state.messages,
        Err(_) => return,
    };
    let mut nodes = Vec::new();
    if let Ok(mut keys) = link.nodes.keys().await {
        while let Some(Ok(k)) = keys.next().await {
            if let Some(n) = unhex(&k) {
                nodes.push(n);
            }
        }
    }
    nodes.sort();
    if let Ok(mut g) = cell.figures.lock() {
        *g = (queued, nodes);
    }
}
