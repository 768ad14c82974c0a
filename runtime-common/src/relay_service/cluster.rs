//! Cluster mode: the state machine's questions to the NATS cluster
//! ([`RelayOutput::Cluster`](a2acp_core::relay::RelayOutput::Cluster)) executed on the
//! cluster link's thread, their answers and the cluster's news fed back to the state
//! machine as inputs. No decision is taken here: each [`ClusterOp`] maps to one request
//! of [`Cluster`], each answer to one [`ClusterInput`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use a2acp_core::relay::{Claim, ClusterInput, ClusterOp, Enqueue, RelayInput};
use a2acp_core::Address;

use crate::cluster::{self, Cluster, ClusterError, Pending};

use super::Msg;

/// Executes the state machine's cluster requests.
pub(super) struct ClusterDriver {
    cluster: Arc<Cluster>,
    core: flume::Sender<Msg>,
    /// The queue watch of each address online on this node: dropping the sender stops it.
    watches: HashMap<Address, flume::Sender<()>>,
    /// Packets read ahead of the state machine per watch.
    window: usize,
}

impl ClusterDriver {
    /// Starts the presence watch (announcements of every node, fed to the state machine
    /// for as long as the service runs), and, when the relay federates, its bid for the
    /// federator's role.
    pub(super) fn start(
        cluster: Arc<Cluster>,
        core: flume::Sender<Msg>,
        window: usize,
        federates: bool,
    ) -> Result<ClusterDriver, ClusterError> {
        // The cluster may be electing leaders (a server just lost): ask again until
        // `connect_timeout`, as the link's own start does.
        let deadline = std::time::Instant::now() + cluster.config().connect_timeout;
        let watch = loop {
            match cluster.presence() {
                Ok(w) => break w,
                Err(e) if std::time::Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    tracing::debug!("cluster: presence watch: {e}; trying again");
                    std::thread::sleep(Duration::from_millis(250));
                }
            }
        };
        let (c, tx) = (cluster.clone(), core.clone());
        std::thread::Builder::new()
            .name("a2acp-presence".into())
            .spawn(move || presence_loop(c, tx, watch))
            .map_err(|e| ClusterError::Unreachable(e.to_string()))?;
        if federates {
            let (c, tx) = (cluster.clone(), core.clone());
            std::thread::Builder::new()
                .name("a2acp-federator".into())
                .spawn(move || federator_loop(c, tx, window))
                .map_err(|e| ClusterError::Unreachable(e.to_string()))?;
        }
        Ok(ClusterDriver {
            cluster,
            core,
            watches: HashMap::new(),
            window: window.max(1),
        })
    }

    /// Executes one request; its answer comes back to the state machine as an input.
    pub(super) fn execute(&mut self, op: ClusterOp) {
        match op {
            ClusterOp::Resolve { address } => {
                let pending = self.cluster.registered(&address);
                self.answer(pending, move |key| ClusterInput::Resolved {
                    address,
                    key: key.map_err(|e| e.to_string()),
                });
            }
            ClusterOp::Claim { address, key } => {
                let Ok(public) = a2acp_core::crypto::PublicKey::from_bytes(&key) else {
                    // The state machine checked the key as a point before it claimed.
                    let _ = self.core.send(input(ClusterInput::Claimed {
                        address,
                        key,
                        result: Err("invalid key".into()),
                    }));
                    return;
                };
                let pending = self.cluster.claim(&address, &public);
                self.answer(pending, move |r| ClusterInput::Claimed {
                    address,
                    key,
                    result: r
                        .map(|c| match c {
                            cluster::Claim::Claimed => Claim::Registered { new: true },
                            cluster::Claim::Same => Claim::Registered { new: false },
                            cluster::Claim::Taken => Claim::Taken,
                        })
                        .map_err(|e| e.to_string()),
                });
            }
            ClusterOp::Announce { address, conn } => {
                let pending = self.cluster.announce(&address, conn.0);
                self.answer(pending, move |r| ClusterInput::Announced {
                    address,
                    conn,
                    revision: r.map_err(|e| e.to_string()),
                });
            }
            ClusterOp::Enqueue {
                token,
                to,
                thread,
                packet_id,
                env,
                outbound,
            } => {
                let payload = bytes::Bytes::from(env.into_boxed_bytes());
                let thread = thread_name(&thread);
                let pending = if outbound {
                    self.cluster
                        .enqueue_outbound(&to, &thread, &packet_id, payload)
                } else {
                    self.cluster.enqueue(&to, &thread, &packet_id, payload)
                };
                self.answer(pending, move |r| ClusterInput::Enqueued {
                    token,
                    result: r
                        .map(|e| match e {
                            cluster::Enqueued::Queued { id, duplicate } => {
                                Enqueue::Queued { id, duplicate }
                            }
                            cluster::Enqueued::Overflow => Enqueue::Overflow,
                        })
                        .map_err(|e| e.to_string()),
                });
            }
            ClusterOp::Notify { to, packet, notice } => {
                let payload = bytes::Bytes::from(notice.into_boxed_bytes());
                let pending = self.cluster.notify(&to, packet, payload);
                self.cluster.spawn(move |_| async move {
                    if let Ok(Err(e)) = pending.receiver().recv_async().await {
                        // The packet stays queued: the next federator reads it again and
                        // tells its sender then.
                        tracing::warn!(
                            packet,
                            "cluster: could not queue an undeliverable notice: {e}"
                        );
                    }
                });
            }
            ClusterOp::Remove { id } => {
                let pending = self.cluster.remove(id);
                self.cluster.spawn(move |_| async move {
                    if let Ok(Err(e)) = pending.receiver().recv_async().await {
                        // Still queued: delivered again later, dropped by its recipient as
                        // a duplicate.
                        tracing::warn!(id, "cluster: could not delete an acknowledged packet: {e}");
                    }
                });
            }
            ClusterOp::Watch { address, watch } => {
                let (stop, stopped) = flume::bounded::<()>(0);
                self.watches.insert(address.clone(), stop);
                let queue = self.cluster.watch(&address, self.window);
                let core = self.core.clone();
                self.cluster.spawn(move |_| async move {
                    loop {
                        tokio::select! {
                            _ = stopped.recv_async() => return,
                            p = queue.packets().recv_async() => {
                                let Ok(Ok(p)) = p else { return };
                                if p.notice {
                                    let Ok(notice) = String::from_utf8(p.payload.to_vec()) else {
                                        continue;
                                    };
                                    let n = ClusterInput::Noticed {
                                        address: address.clone(),
                                        watch,
                                        id: p.id,
                                        notice: notice.into_boxed_str(),
                                    };
                                    if core.send_async(input(n)).await.is_err() {
                                        return;
                                    }
                                    continue;
                                }
                                let Some(thread) = thread_bytes(&p.thread) else {
                                    tracing::warn!(id = p.id, "cluster: a queued packet of an unknown thread name");
                                    continue;
                                };
                                let Ok(env) = String::from_utf8(p.payload.to_vec()) else {
                                    tracing::warn!(id = p.id, "cluster: a queued packet is not UTF-8");
                                    continue;
                                };
                                let q = ClusterInput::Queued {
                                    address: address.clone(),
                                    watch,
                                    id: p.id,
                                    thread,
                                    env: env.into_boxed_str(),
                                };
                                if core.send_async(input(q)).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
            ClusterOp::Unwatch { address } => {
                self.watches.remove(&address);
            }
        }
    }

    /// The node's link to the cluster.
    pub(super) fn health(&self) -> crate::cluster::ClusterHealth {
        self.cluster.health()
    }

    /// Feeds `pending`'s answer, mapped by `f`, to the state machine.
    fn answer<T: Send + 'static>(
        &self,
        pending: Pending<T>,
        f: impl FnOnce(Result<T, ClusterError>) -> ClusterInput + Send + 'static,
    ) {
        let core = self.core.clone();
        self.cluster.spawn(move |_| async move {
            let r = pending
                .receiver()
                .recv_async()
                .await
                .unwrap_or(Err(ClusterError::Stopped));
            let _ = core.send_async(input(f(r))).await;
        });
    }
}

fn input(i: ClusterInput) -> Msg {
    Msg::Input(Box::new(RelayInput::Cluster(i)))
}

/// A thread tag as the queue names it: its 16 bytes in lower-case hex.
fn thread_name(thread: &[u8; 16]) -> String {
    thread.iter().map(|b| format!("{b:02x}")).collect()
}

fn thread_bytes(name: &str) -> Option<[u8; 16]> {
    if name.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(name.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Bids for the federator's lease for as long as the service runs; while this node holds
/// it, feeds every packet for other domains to the state machine
/// ([`ClusterInput::Outbound`]), after telling it ([`ClusterInput::Federating`]).
fn federator_loop(cluster: Arc<Cluster>, core: flume::Sender<Msg>, window: usize) {
    let (changes, lease) = flume::bounded(4);
    cluster.hold_lease(cluster::lease::FEDERATOR, changes);
    let mut reader: Option<cluster::outbound::OutboundReader> = None;
    loop {
        if core.is_disconnected() {
            return;
        }
        // The lease's news first: a change stops or starts the reader.
        match lease.recv_timeout(Duration::from_millis(if reader.is_some() {
            0
        } else {
            500
        })) {
            Ok(on) => {
                reader = None;
                if core.send(input(ClusterInput::Federating { on })).is_err() {
                    return;
                }
                if on {
                    reader = Some(cluster.read_outbound(window));
                }
                continue;
            }
            Err(flume::RecvTimeoutError::Disconnected) => return,
            Err(flume::RecvTimeoutError::Timeout) => {}
        }
        let Some(r) = &reader else {
            continue;
        };
        match r.packets().recv_timeout(Duration::from_millis(500)) {
            Ok(Ok(p)) => {
                let Ok(env) = String::from_utf8(p.payload.to_vec()) else {
                    tracing::warn!(id = p.id, "cluster: an outbound packet is not UTF-8");
                    continue;
                };
                let o = ClusterInput::Outbound {
                    id: p.id,
                    accepted_at: a2acp_core::time::Timestamp::from_millis(p.stored_ms),
                    env: env.into_boxed_str(),
                };
                if core.send(input(o)).is_err() {
                    return;
                }
            }
            Ok(Err(e)) => tracing::debug!("cluster: outbound reader: {e}"),
            Err(flume::RecvTimeoutError::Timeout) => {}
            Err(flume::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(250));
                reader = Some(cluster.read_outbound(window));
            }
        }
    }
}

/// Feeds every node's announcements to the state machine; a watch that ends (the cluster
/// lost, a leader elected) is opened again.
fn presence_loop(
    cluster: Arc<Cluster>,
    core: flume::Sender<Msg>,
    mut watch: cluster::PresenceWatch,
) {
    loop {
        loop {
            let update = match watch.updates().recv_timeout(Duration::from_secs(1)) {
                Ok(u) => u,
                Err(flume::RecvTimeoutError::Timeout) if core.is_disconnected() => return,
                Err(flume::RecvTimeoutError::Timeout) => continue,
                Err(flume::RecvTimeoutError::Disconnected) => break,
            };
            let Ok(p) = update else {
                break;
            };
            let Ok(address) = Address::parse(&p.address) else {
                continue;
            };
            let i = ClusterInput::Presence {
                address,
                node: p.node,
                revision: p.revision,
            };
            if core.send(input(i)).is_err() {
                return;
            }
        }
        if core.is_disconnected() {
            return;
        }
        loop {
            std::thread::sleep(Duration::from_millis(500));
            if core.is_disconnected() {
                return;
            }
            match cluster.presence() {
                Ok(w) => {
                    watch = w;
                    break;
                }
                Err(e) => tracing::debug!("cluster: presence watch: {e}; trying again"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_names_read_back() {
        let t = [0xab; 16];
        assert_eq!(thread_bytes(&thread_name(&t)), Some(t));
        assert_eq!(thread_bytes("ab"), None);
        assert_eq!(thread_bytes(&"zz".repeat(16)), None);
    }
}
