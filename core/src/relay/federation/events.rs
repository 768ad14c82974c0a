//! What federation reports: events for logs and figures for metrics (public types).

use crate::address::Address;
use crate::link::ErrorCode;

use super::super::ConnId;

/// Which side of a relay link this relay is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkSide {
    /// This relay dialed (it pushes its packets for the other domain on this link).
    Dialed,
    /// The other relay dialed (this relay receives its packets on this link).
    Accepted,
}

/// A federation event ([`super::super::RelayEvent::Federation`]), for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FederationEvent {
    /// In a cluster: this node became (`on`) or stopped being the domain's federator.
    Federating {
        /// Whether it is.
        on: bool,
    },
    /// The relay needs a domain's relay and asked the runtime to discover it.
    Discovering {
        /// The domain.
        domain: String,
    },
    /// Discovery failed; packets for the domain are refused for a while.
    DiscoveryFailed {
        /// The domain.
        domain: String,
        /// Why.
        reason: String,
    },
    /// A relay link authenticated both ways.
    LinkUp {
        /// The remote domain.
        domain: String,
        /// The connection.
        conn: ConnId,
        /// This relay's side.
        side: LinkSide,
    },
    /// A relay link closed or failed to come up.
    LinkDown {
        /// The remote domain.
        domain: String,
        /// The connection, if one was open.
        conn: Option<ConnId>,
        /// Why.
        reason: String,
    },
    /// The relay will dial `domain` again at `at` (ms since the epoch).
    RetryScheduled {
        /// The remote domain.
        domain: String,
        /// When.
        at: u64,
    },
    /// `domain`'s relay reached this one while this relay waited to dial it again: it
    /// dials now, not at the end of the backoff.
    Redial {
        /// The remote domain.
        domain: String,
    },
    /// A packet for another domain was accepted into its outbound queue.
    Queued {
        /// Sender.
        from: Address,
        /// Recipient.
        to: Address,
        /// Its delivery id (as in `accepted`).
        id: u64,
        /// Its link sequence number.
        n: u64,
    },
    /// The remote relay settled a push: the packet left the outbound queue.
    Forwarded {
        /// Recipient.
        to: Address,
        /// Its delivery id.
        id: u64,
        /// Its link sequence number.
        n: u64,
    },
    /// The remote relay deferred a push; it is retried.
    Deferred {
        /// Recipient.
        to: Address,
        /// Its link sequence number.
        n: u64,
        /// Why.
        code: ErrorCode,
    },
    /// A packet left the outbound queue undelivered (expired, or rejected for good); its
    /// sender is told.
    Undeliverable {
        /// Sender.
        from: Address,
        /// Recipient.
        to: Address,
        /// Its delivery id.
        id: u64,
        /// Why.
        code: ErrorCode,
    },
    /// A packet from another domain was accepted and queued for its local recipient.
    Received {
        /// The remote domain.
        domain: String,
        /// Sender.
        from: Address,
        /// Recipient.
        to: Address,
        /// Its local delivery id.
        id: u64,
    },
    /// A retry of a push already settled was recognised and not queued again.
    Duplicate {
        /// The remote domain.
        domain: String,
        /// Its link sequence number.
        n: u64,
    },
    /// A push from another domain was deferred or rejected.
    PushRefused {
        /// The remote domain.
        domain: String,
        /// Its sender.
        from: Address,
        /// Why.
        code: ErrorCode,
        /// Whether for good (`rejected`) rather than for now (`deferred`).
        final_: bool,
    },
    /// A remote relay lied (a sender not on its domain, a changed key, a bad signature, a
    /// wrong domain or key in its authentication). Logged at a bounded rate.
    Lie {
        /// The remote domain.
        domain: String,
        /// What it claimed.
        what: String,
    },
    /// A refusal on a relay link (garbage, frames beyond its budget). Logged at a bounded
    /// rate: `suppressed` earlier ones were only counted.
    LinkRefused {
        /// The remote domain, when the link is authenticated.
        domain: Option<String>,
        /// The connection.
        conn: ConnId,
        /// The error code.
        code: ErrorCode,
        /// The error message.
        message: String,
        /// Refusals of this domain not logged since the last one logged.
        suppressed: u64,
    },
    /// A remote sender's key was pinned (first packet from it, or a lookup answer).
    Pinned {
        /// The remote address.
        address: Address,
    },
    /// A sender was told that a packet is undeliverable but its notices are full: the
    /// notice was dropped.
    NoticeDropped {
        /// The sender.
        to: Address,
    },
}

/// Federation figures for one remote domain ([`super::super::RelayStats::federation`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainStats {
    /// An outbound (dialed) link is up.
    pub link_out: bool,
    /// Inbound (accepted) links up.
    pub links_in: usize,
    /// Packets queued for this domain (outbound).
    pub queued: usize,
    /// Packets handed over since start.
    pub forwarded: u64,
    /// Packets received from it since start.
    pub received: u64,
    /// Pushes from it deferred or rejected since start.
    pub refused: u64,
    /// Packets for it that expired or were rejected since start.
    pub undeliverable: u64,
    /// Refusals on its links (garbage, budget, failed authentication) since start.
    pub link_refusals: u64,
    /// Lies observed since start.
    pub lies: u64,
    /// Its reputation score now, −100..=100 (SPEC-NOTES "Reputation").
    pub reputation: i32,
}
