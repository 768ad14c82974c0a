//! Which node is the domain's federator: the one holding the key `federator` of the
//! key-value bucket `a2acp_leases`. A node takes it with a create (which fails while
//! another holds it), keeps it by updating it every [`LEASE_BEAT`] at the revision it
//! last wrote (which fails once another took it), and the bucket forgets it
//! [`LEASE_TTL`] after its last write: a killed or cut-off federator is replaced within
//! about `LEASE_TTL + LEASE_BEAT`. A node that cannot renew in time gives the role up
//! before the bucket could give it to another (it stops at `LEASE_TTL / 2` without a
//! renewal), so two nodes rarely push at once — and when they do, the remote relay takes
//! each link sequence number once.

use std::time::Duration;

use async_nats::jetstream::kv;

use super::Cluster;

/// The bucket of leases.
pub const LEASES_BUCKET: &str = "a2acp_leases";
/// The federator's lease key.
pub const FEDERATOR: &str = "federator";
/// How often the holder renews, and others try to take it.
pub const LEASE_BEAT: Duration = Duration::from_secs(2);
/// How long after its last renewal a lease is forgotten.
pub const LEASE_TTL: Duration = Duration::from_secs(10);

impl Cluster {
    /// Competes for the lease `name` for as long as `changes` is open, sending `true`
    /// when this node takes it and `false` when it loses it.
    pub fn hold_lease(&self, name: &'static str, changes: flume::Sender<bool>) {
        let node = self.config.node.clone();
        self.spawn(move |link| async move {
            let mut tick = tokio::time::interval(LEASE_BEAT);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The revision this node last wrote, and when, while it holds the lease.
            let mut held: Option<(u64, tokio::time::Instant)> = None;
            loop {
                tick.tick().await;
                if changes.is_disconnected() {
                    if let Some((revision, _)) = held {
                        // Hand it over at once rather than after the TTL.
                        let _ = link
                            .leases
                            .delete_expect_revision(name, Some(revision))
                            .await;
                    }
                    return;
                }
                let value = bytes::Bytes::from(node.clone().into_bytes());
                let attempt = match held {
                    Some((revision, _)) => link.leases.update(name, value, revision).await.ok(),
                    None => link.leases.create(name, value).await.ok(),
                };
                let was = held.is_some();
                match attempt {
                    Some(revision) => held = Some((revision, tokio::time::Instant::now())),
                    None => {
                        if held.is_some_and(|(_, at)| at.elapsed() >= LEASE_TTL / 2) {
                            held = None;
                        }
                        // Taken by another node (or its own write failed): not held.
                        if let Some((revision, _)) = held {
                            if link
                                .leases
                                .entry(name)
                                .await
                                .ok()
                                .flatten()
                                .is_some_and(|e| {
                                    e.revision != revision && e.operation == kv::Operation::Put
                                })
                            {
                                held = None;
                            }
                        }
                    }
                }
                if held.is_some() != was && changes.send_async(held.is_some()).await.is_err() {
                    return;
                }
            }
        });
    }
}
