//! Federation from a clustered domain (docs/protocol.md "The federation link" §8): the
//! packets for other domains wait in the cluster's store, whatever node accepted them;
//! the node the runtime makes the domain's federator reads them
//! ([`ClusterInput::Outbound`](super::super::ClusterInput::Outbound)) and pushes them,
//! their delivery ids being their link sequence numbers; what the remote relay refuses
//! for good or lets expire becomes a notice in its sender's queue.

use super::outbound::notice_frame;
use super::state::{Notice, OutItem, OutLink};
use super::FederationEvent;
use crate::address::Address;
use crate::crypto::envelope::Envelope;
use crate::link::ErrorCode;
use crate::time::Timestamp;

use super::super::{ClusterOp, Relay};

impl Relay {
    /// This node becomes, or stops being, the domain's federator. Losing the role drops
    /// every packet read (the store keeps them for the next federator) and closes the
    /// links this node dialed, so two nodes never push for long at once (and when they
    /// do, the remote relay takes each link sequence number once).
    pub(in crate::relay) fn on_federating(&mut self, _now: Timestamp, on: bool) {
        let Some(cl) = self.cluster.as_mut() else {
            return;
        };
        if cl.federating == on || self.fed.is_none() {
            return;
        }
        cl.federating = on;
        self.fed_event(FederationEvent::Federating { on });
        if on {
            return;
        }
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let mut open = Vec::new();
        for r in f.remotes.values_mut() {
            r.out.clear();
            r.out_threads.clear();
            r.retries.clear();
            if let OutLink::Open { conn, .. } = r.link {
                open.push(conn);
            }
        }
        for conn in open {
            self.close(conn, ErrorCode::Unavailable);
        }
    }

    /// A packet for another domain read from the store by the federator: into that
    /// domain's outbound queue under link sequence number `id`, then pushed.
    pub(in crate::relay) fn on_outbound(
        &mut self,
        now: Timestamp,
        id: u64,
        accepted_at: Timestamp,
        env: Box<str>,
    ) {
        if !self.cluster.as_ref().is_some_and(|c| c.federating) {
            return;
        }
        let Some(cfg) = self.config.federation.as_ref() else {
            return;
        };
        let Ok(e) = serde_json::from_str::<Envelope>(&env) else {
            // Not an envelope a node of this domain wrote: it would block nothing, but
            // nobody could ever deliver it.
            self.cluster_op(ClusterOp::Remove { id });
            return;
        };
        let domain = e.to.domain().to_string();
        let per_domain = usize::try_from(cfg.queue_per_domain).unwrap_or(usize::MAX);
        let mut refused = (domain == self.config.domain || !cfg.allows(&domain)).then(|| {
            (
                ErrorCode::UnknownRecipient,
                format!("this relay does not federate with {domain}"),
            )
        });
        let Some(f) = self.fed.as_mut() else {
            return;
        };
        let r = f.remote(&domain);
        if r.out.contains_key(&id) {
            return;
        }
        if refused.is_none() && r.out.len() >= per_domain {
            refused = Some((
                ErrorCode::QueueFull,
                format!("the queue for {domain} is full"),
            ));
        }
        let item = OutItem {
            n: id,
            id,
            from: e.from.clone(),
            to: e.to.clone(),
            thread: e.thread,
            accepted_at,
            env,
            attempts: 0,
            retry_at: None,
        };
        if let Some((code, message)) = refused {
            self.undeliverable(now, &domain, item, code, message);
            return;
        }
        r.next_n = r.next_n.max(id.saturating_add(1));
        let t = r.out_threads.entry((e.to.clone(), e.thread)).or_insert(0);
        *t = t.saturating_add(1);
        r.out.insert(id, item);
        self.fed_event(FederationEvent::Queued {
            from: e.from,
            to: e.to,
            id,
            n: id,
        });
        self.expire(now, &domain);
        self.fed_pump(now, &domain);
    }

    /// Queues the notice of an undeliverable packet in its sender's queue, and deletes
    /// the packet once it is.
    pub(super) fn cluster_notify(&mut self, item: OutItem, code: ErrorCode, message: String) {
        let notice = Notice {
            id: 0,
            packet: item.id,
            to: item.to,
            thread: item.thread,
            code,
            message,
        };
        let Ok(json) = serde_json::to_string(&notice) else {
            return;
        };
        self.cluster_op(ClusterOp::Notify {
            to: item.from,
            packet: item.id,
            notice: json.into(),
        });
    }

    /// An undeliverable notice read from the queue of `address`, online here: sent, and
    /// kept until acknowledged (`ack {id}` deletes it from the store).
    pub(in crate::relay) fn on_noticed(&mut self, address: &Address, id: u64, notice: &str) {
        let Some(&conn) = self.online.get(address) else {
            return;
        };
        let Ok(mut n) = serde_json::from_str::<Notice>(notice) else {
            // Not a notice a node of this domain wrote.
            self.cluster_op(ClusterOp::Remove { id });
            return;
        };
        n.id = id;
        let fresh = self
            .cluster
            .as_mut()
            .is_some_and(|c| c.notices.entry(address.clone()).or_default().insert(id));
        if fresh {
            self.send(conn, &notice_frame(&n));
        }
    }
}
