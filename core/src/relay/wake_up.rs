//! Wake-ups for offline agents (spec §13.2, "offline agents"): an agent may give its relay
//! an endpoint (UnifiedPush or ntfy: an `https://` URL that takes a POST); when the relay
//! queues a packet for it while it is offline, it asks the runtime to POST a wake-up
//! there ([`RelayOutput::WakeUp`]) — at most once per [`WakeUpConfig::interval`] per
//! agent, with a body that says nothing but that something is waiting
//! ([`WAKE_UP_BODY`]: no sender, no thread, no size).
//!
//! An endpoint is a request the relay makes on an agent's behalf, so it is checked as one
//! (server-side request forgery): `https://` only, at most [`MAX_ENDPOINT_BYTES`], no
//! user information, and no host that is a loopback, private, link-local or otherwise
//! non-public address or name — unless the operator allows them
//! ([`WakeUpConfig::allow_private`]). The runtime checks the addresses the host resolves
//! to again before it connects ([`is_public_ip`]).
//!
//! Record key: `wake/<address>` → `{"endpoint": "<url>"}` (docs/protocol.md).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use super::{ConnId, Relay, RelayOutput, RelayRestoreError};
use crate::address::Address;
use crate::link::{ErrorCode, RelayFrame};
use crate::persist::PersistOp;
use crate::time::Timestamp;

/// The body of every wake-up: the same bytes whatever is waiting.
pub const WAKE_UP_BODY: &str = "something is waiting";
/// The longest endpoint accepted.
pub const MAX_ENDPOINT_BYTES: usize = 512;
/// Key prefix of wake-up endpoints.
pub(crate) const WAKE_PREFIX: &str = "wake/";

/// An agent's endpoint and when it was last woken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct WakeUp {
    endpoint: String,
    last: Option<Timestamp>,
}

#[derive(Serialize, Deserialize)]
struct WakeRecord {
    endpoint: String,
}

/// Whether `ip` is an address a relay may send a wake-up to without the operator's leave:
/// not unspecified, loopback, private (RFC 1918, unique local), shared (RFC 6598),
/// link-local, multicast, broadcast, documentation, benchmarking or reserved, and no
/// IPv6 form of such an IPv4 address (mapped, NAT64).
pub fn is_public_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19)))
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let seg = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let first = seg.first().copied().unwrap_or(0);
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || (first == 0x2001 && seg.get(1) == Some(&0x0db8))
        || (first == 0x0064 && seg.get(1) == Some(&0xff9b))
        || seg.iter().take(6).all(|s| *s == 0))
}

/// The host of an `http(s)://` URL (lower case; an IPv6 literal without its brackets)
/// and whether the scheme is `https`.
pub fn endpoint_host(endpoint: &str) -> Result<(String, bool), String> {
    let (https, rest) = if let Some(r) = endpoint.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = endpoint.strip_prefix("http://") {
        (false, r)
    } else {
        return Err("a wake-up endpoint is an https:// URL".into());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("a wake-up endpoint carries no user information".into());
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| "an IPv6 host without its closing `]`".to_string())?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return Err("the port is not a number".into());
        }
        h.to_string()
    } else {
        let (h, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        if port.is_some_and(|p| !is_port(p)) {
            return Err("the port is not a number".into());
        }
        h.to_ascii_lowercase()
    };
    if host.is_empty() {
        return Err("the endpoint names no host".into());
    }
    Ok((host, https))
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

/// Checks an endpoint an agent gives (see the module): `Err` says why it is refused.
pub fn check_endpoint(endpoint: &str, allow_private: bool) -> Result<(), String> {
    if endpoint.len() > MAX_ENDPOINT_BYTES {
        return Err(format!(
            "a wake-up endpoint is at most {MAX_ENDPOINT_BYTES} bytes"
        ));
    }
    if endpoint
        .chars()
        .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err("a wake-up endpoint holds no spaces or control characters".into());
    }
    let (host, https) = endpoint_host(endpoint)?;
    if allow_private {
        return Ok(());
    }
    if !https {
        return Err("a wake-up endpoint is an https:// URL".into());
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        if !is_public_ip(ip) {
            return Err(format!(
                "{host} is not a public address (the relay does not send requests to its own network)"
            ));
        }
        return Ok(());
    }
    let private_name = host == "localhost"
        || [".localhost", ".local", ".internal", ".home.arpa", ".lan"]
            .iter()
            .any(|s| host.ends_with(s))
        || !host.contains('.');
    if private_name
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return Err(format!("{host} is not a public host name"));
    }
    Ok(())
}

impl Relay {
    /// `wake_up {endpoint}` from `address` on `conn`: kept (persisted) and answered
    /// `wake_up_set`, or refused `wake_up_refused`.
    pub(super) fn on_wake_up(&mut self, conn: ConnId, address: &Address, endpoint: Option<String>) {
        let refused = if !self.config.wake_up.enabled {
            Some("this relay sends no wake-ups".to_string())
        } else if self.cluster.is_some() && endpoint.is_some() {
            Some("the relays of a cluster send no wake-ups yet".to_string())
        } else {
            endpoint
                .as_deref()
                .and_then(|e| check_endpoint(e, self.config.wake_up.allow_private).err())
        };
        if let Some(why) = refused {
            self.refuse(conn, ErrorCode::WakeUpRefused, why, None);
            return;
        }
        let key = format!("{WAKE_PREFIX}{address}");
        match &endpoint {
            Some(e) => {
                let value = serde_json::to_vec(&WakeRecord {
                    endpoint: e.clone(),
                })
                .unwrap_or_default();
                self.out
                    .push_back(RelayOutput::Persist(PersistOp::Put { key, value }));
                let last = self.wake_ups.get(address).and_then(|w| w.last);
                self.wake_ups.insert(
                    address.clone(),
                    WakeUp {
                        endpoint: e.clone(),
                        last,
                    },
                );
            }
            None => {
                if self.wake_ups.remove(address).is_some() {
                    self.out
                        .push_back(RelayOutput::Persist(PersistOp::Delete { key }));
                }
            }
        }
        self.send(conn, &RelayFrame::WakeUpSet { endpoint });
    }

    /// A packet was just queued for `to`: a wake-up if it is offline, has an endpoint,
    /// and was not woken in the last interval.
    pub(super) fn maybe_wake(&mut self, now: Timestamp, to: &Address) {
        if self.online.contains_key(to) {
            return;
        }
        let interval = self.config.wake_up.interval;
        let Some(w) = self.wake_ups.get_mut(to) else {
            return;
        };
        if w.last.is_some_and(|t| now.since(t) < interval) {
            return;
        }
        w.last = Some(now);
        let endpoint = w.endpoint.clone();
        self.counters.wake_ups = self.counters.wake_ups.saturating_add(1);
        self.out.push_back(RelayOutput::WakeUp { endpoint });
    }

    /// Restores a `wake/<address>` record.
    pub(super) fn restore_wake_record(
        &mut self,
        key: &str,
        addr: &str,
        value: &[u8],
    ) -> Result<(), RelayRestoreError> {
        let bad = |reason: String| RelayRestoreError::BadRecord {
            key: key.to_string(),
            reason,
        };
        let rec: WakeRecord = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
        let address = Address::parse(addr).map_err(|e| bad(e.to_string()))?;
        self.wake_ups.insert(
            address,
            WakeUp {
                endpoint: rec.endpoint,
                last: None,
            },
        );
        Ok(())
    }
}
