//! What the relay logs about its clients (module documentation): each connection's
//! refusals, counted past the first few and summarised when it ends, and the one log
//! limiter shared by the state machine's and the committer's threads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use a2acp_core::link::ErrorCode;
use a2acp_core::relay::{ConnId, RelayEvent};
use a2acp_core::Address;
use tracing::{debug, info, warn};

use super::{Core, LOGGED_REFUSALS_PER_CONN, LOG_BURST, LOG_LINES_PER_SEC, LOG_SUMMARY_EVERY};
use crate::log_limit::LogLimiter;

impl Core {
    /// Logs what the relay did; what a client can cause goes through the log limiter.
    pub(super) fn log_event(&mut self, e: RelayEvent) {
        match e {
            RelayEvent::Registered { address } => info!(%address, "registered"),
            RelayEvent::Rotated { address, seq } => info!(%address, seq, "key rotated"),
            RelayEvent::RecoveryBound { address, seq } => {
                info!(%address, seq, "recovery key bound")
            }
            RelayEvent::Recovered { address } => info!(%address, "key recovered"),
            RelayEvent::Authenticated { conn, address } => {
                debug!(conn = conn.0, %address, "authenticated")
            }
            RelayEvent::Refused {
                conn,
                address,
                code,
                message,
            } => {
                let c = self.conn_logs.entry(conn).or_default();
                if address.is_some() {
                    c.address = address;
                }
                if c.logged >= LOGGED_REFUSALS_PER_CONN {
                    *c.unlogged.entry(code).or_insert(0) += 1;
                    self.log.held_back(1);
                    return;
                }
                c.logged += 1;
                if self.log.allow() {
                    warn!(
                        conn = conn.0,
                        address = c.address.as_ref().map(|a| a.as_str()).unwrap_or("-"),
                        code = code.as_str(),
                        message = message.as_str(),
                        "refused"
                    );
                }
            }
            RelayEvent::Replaced { old, new, address } => {
                if self.log.allow() {
                    info!(old = old.0, new = new.0, %address, "a newer connection replaced the old one")
                }
            }
            RelayEvent::ReplacedElsewhere { conn, address } => {
                if self.log.allow() {
                    info!(conn = conn.0, %address, "a connection on another node replaced this one")
                }
            }
            RelayEvent::Overflow { from, to } => {
                if self.log.allow() {
                    info!(%from, %to, "thread queue full: overflow notice sent")
                }
            }
            RelayEvent::ConnectionDead { conn } => {
                if self.log.allow() {
                    info!(conn = conn.0, "connection silent too long: closed")
                }
            }
            RelayEvent::Federation(e) => log_federation(e),
            RelayEvent::Routed { from, to, id } => debug!(%from, %to, id, "routed"),
            RelayEvent::Delivered { id, to } => debug!(id, %to, "delivered"),
            RelayEvent::Acked { id } => debug!(id, "acknowledged"),
            RelayEvent::AckIgnored { conn, id } => {
                debug!(conn = conn.0, id, "ack of unknown id ignored")
            }
        }
    }

    /// `conn` ended (`code`: closed by the relay for that reason): one line for a
    /// connection closed for abuse or with refusals not logged one by one.
    pub(super) fn conn_ended(&mut self, conn: ConnId, code: Option<ErrorCode>) {
        let c = self.conn_logs.remove(&conn).unwrap_or_default();
        let abuse = matches!(code, Some(ErrorCode::TooManyRefusals | ErrorCode::TooLarge));
        if !abuse && c.unlogged.is_empty() {
            return;
        }
        if !self.log.allow() {
            return;
        }
        let unlogged: u64 = c.unlogged.values().sum();
        let by_code = c
            .unlogged
            .iter()
            .map(|(code, n)| format!("{} {n}", code.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        let address = c.address.as_ref().map(|a| a.as_str()).unwrap_or("-");
        match code {
            Some(code) if abuse => warn!(
                conn = conn.0,
                address,
                reason = code.as_str(),
                unlogged,
                by_code = by_code.as_str(),
                "connection closed for abuse"
            ),
            _ => info!(
                conn = conn.0,
                address,
                unlogged,
                by_code = by_code.as_str(),
                "connection ended with refusals not logged one by one"
            ),
        }
    }
}

/// The refusals of one connection, for logging.
#[derive(Debug, Default)]
pub(super) struct ConnLog {
    /// Its address, once known.
    pub(super) address: Option<Address>,
    /// Refusals logged one by one.
    pub(super) logged: u32,
    /// Refusals counted instead, by code.
    pub(super) unlogged: BTreeMap<ErrorCode, u64>,
}

/// The log lines clients can cause (module documentation): one [`LogLimiter`] for all of
/// them, shared by the state machine's and the committer's threads, and the count of
/// every line held back (by the limiter, or counted per connection instead of logged).
#[derive(Debug)]
pub(super) struct ClientLog {
    pub(super) limiter: LogLimiter,
    /// Lines held back since start.
    pub(super) total: AtomicU64,
}

impl ClientLog {
    pub(super) fn new() -> Self {
        ClientLog {
            limiter: LogLimiter::per_second(LOG_BURST, LOG_LINES_PER_SEC),
            total: AtomicU64::new(0),
        }
    }

    /// Whether a line may be written now (taking its place); otherwise it is counted.
    pub(super) fn allow(&self) -> bool {
        if self.limiter.allow().is_some() {
            return true;
        }
        self.held_back(1);
        false
    }

    /// Counts `n` lines not written (summarised elsewhere).
    pub(super) fn held_back(&self, n: u64) {
        self.total.fetch_add(n, Ordering::Relaxed);
    }

    /// Lines held back since start.
    pub(super) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// One line for the lines the limiter held back, at most every [`LOG_SUMMARY_EVERY`].
    pub(super) fn summarise(&self, now: Instant) {
        if let Some((held, since)) = self.limiter.summary_at(now, LOG_SUMMARY_EVERY) {
            warn!(
                held,
                seconds = since.as_secs(),
                "log lines about clients held back by the log's rate limit"
            );
        }
    }
}

/// Logs a federation event: a remote relay's lies and the refusals on relay links as
/// warnings (the state machine emits them at a bounded rate per remote domain, counting
/// the rest in `suppressed`), links coming up (authenticated both ways) as information, the
/// rest (per packet, or caused by any connection) at debug level.
fn log_federation(e: a2acp_core::relay::federation::FederationEvent) {
    use a2acp_core::relay::federation::FederationEvent as F;
    match e {
        F::Lie { domain, what } => warn!(%domain, what = what.as_str(), "remote relay lied"),
        F::LinkRefused {
            domain,
            conn,
            code,
            message,
            suppressed,
        } => warn!(
            domain = domain.as_deref().unwrap_or("-"),
            conn = conn.0,
            code = code.as_str(),
            message = message.as_str(),
            suppressed,
            "relay link refused"
        ),
        F::LinkUp { domain, conn, side } => info!(%domain, conn = conn.0, ?side, "relay link up"),
        e => debug!(?e, "federation"),
    }
}
