//! Federation: relays of different domains handing packets to each other (spec §16, §3,
//! §13). See docs/protocol.md "The federation link" and SPEC-NOTES "Federation".
//!
//! # Contract (what the runtime does)
//!
//! Federation is on when [`super::RelayConfig::federation`] is `Some`, holding the relay's
//! own signing key and its settings ([`FederationConfig`]). Off, the relay behaves exactly
//! as without this module. On:
//!
//! - **Discovery.** [`super::RelayOutput::Discover`] asks for the relay of a domain; the
//!   runtime fetches `https://DOMAIN/.well-known/a2acp` (or reads its static map) and
//!   answers [`super::RelayInput::Discovered`] with a [`RemoteRelay`] or a
//!   [`DiscoveryError`]. The relay caches answers (`discovery_ttl`, failures
//!   `discovery_failure_ttl`) on its own clock and never asks twice at once.
//! - **Dialing.** [`super::RelayOutput::Dial`] asks for a relay link to a domain's
//!   endpoint; the runtime opens a WebSocket over TLS and answers
//!   [`super::RelayInput::Dialed`] (a fresh [`super::ConnId`]) or
//!   [`super::RelayInput::DialFailed`]. Frames on a dialed connection are handed over as
//!   [`super::RelayInput::Bytes`] and sent by [`super::RelayOutput::Send`]; its end is
//!   [`super::RelayInput::Disconnected`] or [`super::RelayOutput::Close`], as for any
//!   connection.
//! - **Accepting.** A relay link that another relay dialed is an ordinary
//!   [`super::RelayInput::Connected`] connection: it answers the `challenge` with
//!   `link_auth` instead of `auth`/`register`. Its frames may be parsed and verified off
//!   the state machine's thread like an agent's ([`super::parse_frame`] reads `link_auth`
//!   and `push`; [`super::verify_send`] checks a `push`'s envelope signature).
//! - **Records.** Outbound queues, link sequence numbers, remote senders' pinned keys,
//!   undeliverable notices and what exactly-once needs are persisted under the prefixes
//!   `fo/`, `fed/` (docs/protocol.md "The federation link" §6); [`super::Relay::restore`]
//!   reads them.
//! - **Figures.** [`super::RelayStats::federation`] per remote domain;
//!   [`super::RelayEvent::Federation`] events.

mod cluster;
mod config;
mod dispatch;
mod events;
mod inbound;
mod link;
mod lookup;
mod outbound;
mod records;
mod reputation;
mod state;

#[cfg(test)]
mod net;
#[cfg(test)]
mod tests;

pub(super) use state::{Fed, LinkPhase};

pub use config::{DiscoveryError, FederationConfig, RemoteRelay};
pub use events::{DomainStats, FederationEvent, LinkSide};
