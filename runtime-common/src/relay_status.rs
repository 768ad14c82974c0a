//! `a2acp relay-status`: an operator's view of a running relay, read from its `/metrics`
//! (the same figures a Prometheus scrape gets): connections, registered addresses, queued
//! and routed packets, refusals by reason and, for a federating relay, each remote
//! domain's links, packets queued for it, packets handed over each way, refusals, lies
//! and reputation.
//!
//! Read over plain HTTP or HTTPS (`--ca` for a private CA), within [`TIMEOUT`], the answer
//! at most [`MAX_BODY`] bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

/// The whole exchange with the relay.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest `/metrics` answer read.
pub const MAX_BODY: usize = 4 << 20;

/// Why the status could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The CA file could not be read or holds no certificate.
    #[error("CA {path}: {why}")]
    Ca {
        /// The file.
        path: String,
        /// What went wrong.
        why: String,
    },
    /// The request failed (connect, TLS, timeout).
    #[error("cannot read {url}: {why}")]
    Fetch {
        /// The URL asked.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// The relay answered something else than its metrics.
    #[error("{url} answered {status}: is it an a2acp relay?")]
    Status {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
    },
}

/// One remote domain, as a federating relay sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DomainStatus {
    /// This relay's link to the domain's relay is up.
    pub link_out: bool,
    /// Links the domain's relay opened to this one, up.
    pub links_in: u64,
    /// Packets queued for the domain, not yet handed over.
    pub queued: u64,
    /// Packets handed over to it since start.
    pub forwarded: u64,
    /// Packets received from it since start.
    pub received: u64,
    /// Refusals of its pushes and on its links since start.
    pub refusals: u64,
    /// Packets for it that expired or were rejected (their senders told).
    pub undeliverable: u64,
    /// Lies of its relay observed.
    pub lies: u64,
    /// Its reputation, −100 to 100.
    pub reputation: i64,
}

/// A relay's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RelayStatus {
    /// Open WebSocket connections.
    pub connections: u64,
    /// Registered addresses.
    pub registered: u64,
    /// Packets queued for local recipients.
    pub queued: u64,
    /// Packets accepted since start.
    pub routed: u64,
    /// Packets acknowledged by their recipients since start.
    pub acked: u64,
    /// Error frames sent since start, by reason.
    pub refusals: BTreeMap<String, u64>,
    /// Remote domains (empty when the relay does not federate).
    pub federation: BTreeMap<String, DomainStatus>,
    /// Cluster mode: the node's link and the nodes alive (`None`: a single relay).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterStatus>,
}

/// A cluster node's view of its cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClusterStatus {
    /// The node's connection to NATS is up.
    pub connected: bool,
    /// Requests to the cluster not yet answered.
    pub waiting: u64,
    /// The node answering is its domain's federator.
    pub federator: bool,
    /// Packets the cluster holds queued.
    pub queued: u64,
    /// The nodes alive, and which one answered (`true`).
    pub nodes: BTreeMap<String, bool>,
}

/// Reads the status of the relay at `url` (`http://HOST:PORT` or `https://…`).
pub fn fetch(url: &str, ca: Option<&Path>) -> Result<RelayStatus, StatusError> {
    let base = url.trim_end_matches('/');
    let metrics = format!("{base}/metrics");
    let agent = crate::tls::https_agent(ca, TIMEOUT).map_err(|why| StatusError::Ca {
        path: ca.map(|c| c.display().to_string()).unwrap_or_default(),
        why,
    })?;
    let fetch_err = |why: String| StatusError::Fetch {
        url: metrics.clone(),
        why,
    };
    let resp = agent
        .get(&metrics)
        .call()
        .map_err(|e| fetch_err(e.to_string()))?;
    let status = resp.status().as_u16();
    if status != 200 {
        return Err(StatusError::Status {
            url: metrics,
            status,
        });
    }
    let body = crate::a2a_client::read_capped(resp.into_body(), MAX_BODY)
        .map_err(|e| fetch_err(e.to_string()))?
        .ok_or_else(|| fetch_err(format!("more than {MAX_BODY} bytes")))?;
    Ok(parse(&String::from_utf8_lossy(&body)))
}

/// The status in a `/metrics` text exposition; unknown lines are skipped.
pub fn parse(text: &str) -> RelayStatus {
    let mut s = RelayStatus::default();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.trim().parse::<i64>() else {
            continue;
        };
        let u = u64::try_from(v).unwrap_or(0);
        let (name, label) = match name_labels.split_once('{') {
            Some((n, rest)) => match label_value(rest) {
                Some(l) => (n, Some(l)),
                None => continue,
            },
            None => (name_labels, None),
        };
        match (name, label) {
            ("a2acp_relay_connections", None) => s.connections = u,
            ("a2acp_relay_registered_addresses", None) => s.registered = u,
            ("a2acp_relay_queued_packets", None) => s.queued = u,
            ("a2acp_relay_packets_routed_total", None) => s.routed = u,
            ("a2acp_relay_packets_acked_total", None) => s.acked = u,
            ("a2acp_relay_cluster_connected", None) => {
                s.cluster.get_or_insert_with(Default::default).connected = v > 0
            }
            ("a2acp_relay_cluster_federator", None) => {
                s.cluster.get_or_insert_with(Default::default).federator = v > 0
            }
            ("a2acp_relay_cluster_waiting", None) => {
                s.cluster.get_or_insert_with(Default::default).waiting = u
            }
            ("a2acp_relay_cluster_queued_packets", None) => {
                s.cluster.get_or_insert_with(Default::default).queued = u
            }
            ("a2acp_relay_cluster_node", Some(node)) => {
                s.cluster
                    .get_or_insert_with(Default::default)
                    .nodes
                    .insert(node, v > 0);
            }
            ("a2acp_relay_refusals_total", Some(reason)) => {
                s.refusals.insert(reason, u);
            }
            (n, Some(domain)) if n.starts_with("a2acp_relay_federation_") => {
                let d = s.federation.entry(domain).or_default();
                match &n["a2acp_relay_federation_".len()..] {
                    "link_out" => d.link_out = v > 0,
                    "links_in" => d.links_in = u,
                    "queued" => d.queued = u,
                    "forwarded_total" => d.forwarded = u,
                    "received_total" => d.received = u,
                    "refusals_total" => d.refusals = u,
                    "undeliverable_total" => d.undeliverable = u,
                    "lies_total" => d.lies = u,
                    "reputation" => d.reputation = v,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    s
}

/// The value of the one label in `rest` (`key="value"}`).
fn label_value(rest: &str) -> Option<String> {
    let (_, v) = rest.split_once("=\"")?;
    let (v, _) = v.rsplit_once("\"}")?;
    Some(v.to_string())
}

/// The status as text for a person.
pub fn render(url: &str, s: &RelayStatus) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "relay {url}");
    let _ = writeln!(
        out,
        "  connections: {}   registered: {}   queued: {}   routed: {}   acknowledged: {}",
        s.connections, s.registered, s.queued, s.routed, s.acked
    );
    let refusals: Vec<String> = s
        .refusals
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    let _ = writeln!(
        out,
        "  refusals: {}",
        if refusals.is_empty() {
            "none".to_string()
        } else {
            refusals.join(", ")
        }
    );
    if let Some(c) = &s.cluster {
        let nodes: Vec<String> = c
            .nodes
            .iter()
            .map(|(n, this)| {
                if *this && c.federator {
                    format!("{n} (this one, the federator)")
                } else if *this {
                    format!("{n} (this one)")
                } else {
                    n.clone()
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "  cluster: {}   nodes: {}   queued in the cluster: {}   waiting on it: {}",
            if c.connected {
                "connected"
            } else {
                "UNREACHABLE"
            },
            if nodes.is_empty() {
                "none yet".to_string()
            } else {
                nodes.join(", ")
            },
            c.queued,
            c.waiting
        );
    }
    if s.federation.is_empty() {
        let _ = writeln!(out, "  federation: off, or no other domain yet");
        return out;
    }
    let _ = writeln!(out, "  federation:");
    let _ = writeln!(
        out,
        "    {:<24} {:>8} {:>8} {:>7} {:>9} {:>9} {:>8} {:>6} {:>5} {:>10}",
        "domain",
        "link out",
        "links in",
        "queued",
        "forwarded",
        "received",
        "refusals",
        "undel.",
        "lies",
        "reputation"
    );
    for (domain, d) in &s.federation {
        let _ = writeln!(
            out,
            "    {:<24} {:>8} {:>8} {:>7} {:>9} {:>9} {:>8} {:>6} {:>5} {:>10}",
            domain,
            if d.link_out { "up" } else { "down" },
            d.links_in,
            d.queued,
            d.forwarded,
            d.received,
            d.refusals,
            d.undeliverable,
            d.lies,
            format!("{:+}", d.reputation)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "# HELP a2acp_relay_connections Open WebSocket connections.
# TYPE a2acp_relay_connections gauge
a2acp_relay_connections 3
a2acp_relay_registered_addresses 2
a2acp_relay_queued_packets 1
a2acp_relay_packets_routed_total 40
a2acp_relay_packets_acked_total 39
a2acp_relay_refusals_total{reason=\"rate_limited\"} 4
a2acp_relay_refusals_total{reason=\"overflow\"} 0
a2acp_relay_federation_link_out{domain=\"b.example\"} 1
a2acp_relay_federation_links_in{domain=\"b.example\"} 1
a2acp_relay_federation_queued{domain=\"b.example\"} 7
a2acp_relay_federation_forwarded_total{domain=\"b.example\"} 12
a2acp_relay_federation_received_total{domain=\"b.example\"} 11
a2acp_relay_federation_refusals_total{domain=\"b.example\"} 2
a2acp_relay_federation_undeliverable_total{domain=\"b.example\"} 1
a2acp_relay_federation_lies_total{domain=\"b.example\"} 0
a2acp_relay_federation_reputation{domain=\"b.example\"} -12
a2acp_relay_federation_link_out{domain=\"c.example\"} 0
garbage line
a2acp_relay_connections{broken 5
";

    #[test]
    fn parsed_from_the_metrics() {
        let s = parse(METRICS);
        assert_eq!((s.connections, s.registered, s.queued), (3, 2, 1));
        assert_eq!((s.routed, s.acked), (40, 39));
        assert_eq!(s.refusals["rate_limited"], 4);
        let b = &s.federation["b.example"];
        assert!(b.link_out);
        assert_eq!(
            (b.links_in, b.queued, b.forwarded, b.received),
            (1, 7, 12, 11)
        );
        assert_eq!(
            (b.refusals, b.undeliverable, b.lies, b.reputation),
            (2, 1, 0, -12)
        );
        assert!(!s.federation["c.example"].link_out);
        let text = render("http://127.0.0.1:7447", &s);
        assert!(text.contains("refusals: rate_limited 4\n"), "{text}");
        assert!(text.contains("b.example"), "{text}");
        assert!(text.contains("-12"), "{text}");
        assert!(text.contains("down"), "{text}");
    }

    #[test]
    fn the_relays_own_metrics_are_read_back() {
        use a2acp_core::relay::federation::DomainStats;
        let mut snap = crate::relay_service::RelaySnapshot::default();
        snap.stats.connections = 5;
        snap.stats.routed_total = 9;
        snap.stats.federation.insert(
            "b.example".into(),
            DomainStats {
                link_out: true,
                queued: 3,
                forwarded: 6,
                reputation: 4,
                ..Default::default()
            },
        );
        let s = parse(&crate::http::render_metrics(&snap));
        assert_eq!((s.connections, s.routed), (5, 9));
        let b = &s.federation["b.example"];
        assert!(b.link_out);
        assert_eq!((b.queued, b.forwarded, b.reputation), (3, 6, 4));
    }

    #[test]
    fn an_unreachable_relay_is_a_clear_error() {
        let e = fetch("http://127.0.0.1:1", None).unwrap_err();
        assert!(matches!(e, StatusError::Fetch { .. }), "{e}");
        let e = fetch("http://127.0.0.1:1", Some(Path::new("/nonexistent-ca.pem"))).unwrap_err();
        assert!(matches!(e, StatusError::Ca { .. }), "{e}");
    }
}
