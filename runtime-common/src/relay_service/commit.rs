//! The committer (module documentation, step 3): it commits every waiting batch's persist
//! records in one SQLite transaction, and only then hands their frames to the
//! connections' outgoing channels, batch after batch in order. A record written and
//! deleted within the same transaction (a packet acknowledged before its commit) is not
//! written at all.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use a2acp_core::persist::PersistOp;
use a2acp_core::relay::{ConnId, RelayOutput};
use tracing::{error, warn};

use super::log::ClientLog;
use super::{ConnOut, Msg, RelaySnapshot, ServiceError, Shared};
use crate::store::Store;

/// One batch's work for the committer.
#[derive(Default)]
pub(super) struct Commit {
    /// The batch's number (the state machine's count of batches).
    pub(super) seq: u64,
    /// Connections opened in this batch (before its frames for them).
    pub(super) connected: Vec<(ConnId, flume::Sender<ConnOut>)>,
    pub(super) ops: Vec<PersistOp>,
    /// Sends and closes, in order.
    pub(super) actions: Vec<RelayOutput>,
    /// Connections closed by their peer in this batch.
    pub(super) disconnected: Vec<ConnId>,
    /// Connections the state machine's thread dropped as slow consumers in this batch.
    pub(super) dropped: Vec<ConnId>,
    pub(super) replies: Vec<(flume::Sender<RelaySnapshot>, RelaySnapshot)>,
}

impl Commit {
    pub(super) fn is_empty(&self) -> bool {
        self.connected.is_empty()
            && self.ops.is_empty()
            && self.actions.is_empty()
            && self.disconnected.is_empty()
            && self.dropped.is_empty()
            && self.replies.is_empty()
    }
}

pub(super) enum ToCommitter {
    Batch(Commit),
    Shutdown { graceful: bool },
}

pub(super) struct Committer {
    pub(super) store: Store,
    pub(super) rx: flume::Receiver<ToCommitter>,
    pub(super) conns: HashMap<ConnId, flume::Sender<ConnOut>>,
    pub(super) dropped: flume::Sender<ConnId>,
    /// To wake the state machine (weak: it must not keep the channel open).
    pub(super) core: flume::WeakSender<Msg>,
    pub(super) shared: Arc<Shared>,
    pub(super) log: Arc<ClientLog>,
    /// Where wake-ups go (`None`: the relay sends none).
    pub(super) wake_ups: Option<crate::wake_up::WakeUps>,
}

impl Committer {
    pub(super) fn run(mut self) -> Result<(), ServiceError> {
        let mut queue: Vec<Commit> = Vec::new();
        let mut ops: Vec<PersistOp> = Vec::new();
        loop {
            let mut shutdown = match self.rx.recv() {
                Ok(ToCommitter::Batch(c)) => {
                    queue.push(c);
                    None
                }
                Ok(ToCommitter::Shutdown { graceful }) => Some(graceful),
                Err(_) => Some(false),
            };
            while shutdown.is_none() {
                match self.rx.try_recv() {
                    Ok(ToCommitter::Batch(c)) => queue.push(c),
                    Ok(ToCommitter::Shutdown { graceful }) => shutdown = Some(graceful),
                    Err(_) => break,
                }
            }
            for c in &mut queue {
                ops.append(&mut c.ops);
            }
            coalesce(&mut ops);
            if !ops.is_empty() {
                if let Err(e) = self.store.apply(&ops, &[]) {
                    error!(error = %e, "relay store failed; stopping without revealing the uncommitted batches");
                    self.conns.clear();
                    self.shared.failed.store(true, Ordering::SeqCst);
                    if let Some(core) = self.core.upgrade() {
                        let _ = core.try_send(Msg::Wake);
                    }
                    return Err(e.into());
                }
                self.shared.commits.fetch_add(1, Ordering::Relaxed);
                ops.clear();
            }
            for c in queue.drain(..) {
                let seq = c.seq;
                self.execute(c);
                self.shared.executed.store(seq, Ordering::Release);
            }
            if self.shared.wake_on_execute.swap(false, Ordering::AcqRel) {
                if let Some(core) = self.core.upgrade() {
                    let _ = core.try_send(Msg::Wake);
                }
            }
            if let Some(graceful) = shutdown {
                if graceful {
                    for tx in self.conns.values() {
                        let _ = tx.try_send(ConnOut::Close(None));
                    }
                }
                self.conns.clear();
                return Ok(());
            }
        }
    }

    fn execute(&mut self, c: Commit) {
        for (conn, tx) in c.connected {
            self.conns.insert(conn, tx);
        }
        for a in c.actions {
            match a {
                RelayOutput::Send { conn, bytes } => {
                    let Some(tx) = self.conns.get(&conn) else {
                        continue;
                    };
                    match tx.try_send(ConnOut::Frame(bytes)) {
                        Ok(()) => {}
                        Err(flume::TrySendError::Full(_)) => {
                            slow_consumer(&self.shared, &self.log, conn);
                            self.conns.remove(&conn);
                            let _ = self.dropped.send(conn);
                            if let Some(core) = self.core.upgrade() {
                                let _ = core.try_send(Msg::Wake);
                            }
                        }
                        Err(flume::TrySendError::Disconnected(_)) => {
                            self.conns.remove(&conn);
                        }
                    }
                }
                RelayOutput::Close { conn, code } => {
                    if let Some(tx) = self.conns.remove(&conn) {
                        let _ = tx.try_send(ConnOut::Close(Some(code)));
                    }
                }
                RelayOutput::WakeUp { endpoint } => {
                    if let Some(w) = &self.wake_ups {
                        w.send(endpoint);
                    }
                }
                RelayOutput::Persist(_)
                | RelayOutput::Event(_)
                | RelayOutput::Discover { .. }
                | RelayOutput::Cluster(_)
                | RelayOutput::Dial { .. } => {}
            }
        }
        for conn in c.disconnected.into_iter().chain(c.dropped) {
            self.conns.remove(&conn);
        }
        for (tx, mut snap) in c.replies {
            snap.commits = self.shared.commits.load(Ordering::Relaxed);
            snap.slow_consumers = self.shared.slow.load(Ordering::Relaxed);
            snap.log_lines_suppressed = self.log.total();
            let _ = tx.try_send(snap);
        }
    }
}

/// Counts (and logs, within the log's limits) a connection dropped for not reading.
pub(super) fn slow_consumer(shared: &Shared, log: &ClientLog, conn: ConnId) {
    if log.allow() {
        warn!(
            conn = conn.0,
            "connection does not read its frames: dropped as a slow consumer"
        );
    }
    shared.slow.fetch_add(1, Ordering::Relaxed);
}

/// Leaves out of `ops` every `Put` whose key a later `Delete` of the same transaction
/// removes (the `Delete` stays: the key may have been stored before). The transaction's
/// result is the same, one row write fewer per packet acknowledged before its commit.
pub(super) fn coalesce(ops: &mut Vec<PersistOp>) {
    let mut last_put: HashMap<&str, usize> = HashMap::new();
    let mut dead: Vec<usize> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match op {
            PersistOp::Put { key, .. } => {
                last_put.insert(key.as_str(), i);
            }
            PersistOp::Delete { key } => {
                if let Some(j) = last_put.remove(key.as_str()) {
                    dead.push(j);
                }
            }
        }
    }
    if dead.is_empty() {
        return;
    }
    dead.sort_unstable();
    let mut i = 0usize;
    let mut d = dead.iter().peekable();
    ops.retain(|_| {
        let keep = d.peek() != Some(&&i);
        if !keep {
            d.next();
        }
        i += 1;
        keep
    });
}
