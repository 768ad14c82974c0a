//! `/healthz`, Prometheus `/metrics` and the discovery document `/.well-known/a2acp` on
//! the relay's own listener.
//!
//! A binding peeks at the first bytes of every accepted connection: [`classify`] tells a
//! WebSocket upgrade (handed to the WebSocket handshake) from a plain `GET /healthz`,
//! `GET /metrics` or `GET /.well-known/a2acp` (answered with [`response`] and closed).

use std::fmt::Write as _;

use crate::admission::AdmissionStats;
use crate::relay_service::RelaySnapshot;

/// Largest request head peeked at before deciding.
pub const MAX_HEAD: usize = 8192;

/// What a connection asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// A WebSocket upgrade: the agent link.
    WebSocket,
    /// A WebSocket upgrade of a version other than 13 (answered 426 with the version this
    /// relay speaks, RFC 6455 §4.2.2), or without its `Sec-WebSocket-Key` (400).
    BadUpgrade {
        /// The version asked is not 13.
        version: bool,
    },
    /// `GET /healthz`.
    Healthz,
    /// `GET /metrics`.
    Metrics,
    /// `GET /.well-known/a2acp`: the discovery document of a federating relay (404 when
    /// the relay does not federate).
    Discovery,
    /// Anything else (answered 404, or 400 if not HTTP).
    Other,
}

/// Classifies a request head (`None`: not complete yet, peek more).
pub fn classify(head: &[u8]) -> Option<Route> {
    let complete = head.windows(4).any(|w| w == b"\r\n\r\n");
    if !complete && head.len() < MAX_HEAD {
        return None;
    }
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let headers: Vec<(&str, &str)> = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    };
    if header("upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket")) {
        return Some(if header("sec-websocket-version") != Some("13") {
            Route::BadUpgrade { version: true }
        } else if header("sec-websocket-key").is_none_or(str::is_empty) {
            Route::BadUpgrade { version: false }
        } else {
            Route::WebSocket
        });
    }
    let path = path.split('?').next().unwrap_or("");
    Some(match (method, path) {
        ("GET", "/healthz") => Route::Healthz,
        ("GET", "/metrics") => Route::Metrics,
        ("GET", a2acp_core::discovery::WELL_KNOWN_PATH) => Route::Discovery,
        _ => Route::Other,
    })
}

/// A complete HTTP/1.1 response that closes the connection.
pub fn response(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    response_with(status, "", content_type, body)
}

/// [`response`] with more header lines (`extra`: each ending in CRLF).
fn response_with(status: &str, extra: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\n{extra}content-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The response for `route` (not for [`Route::WebSocket`]); `conns`: the listener's
/// connection counters, for `/metrics`; `discovery`: the relay's discovery document, if
/// it federates.
pub fn answer(
    route: &Route,
    snapshot: Option<&RelaySnapshot>,
    conns: &AdmissionStats,
    discovery: Option<&str>,
) -> Vec<u8> {
    match (route, snapshot) {
        (Route::Discovery, _) => match discovery {
            Some(doc) => response_with(
                "200 OK",
                "cache-control: max-age=300\r\n",
                "application/json",
                doc,
            ),
            None => response(
                "404 Not Found",
                "text/plain",
                "a2acp relay: this relay does not federate\n",
            ),
        },
        // A node of a cluster that lost the cluster accepts nothing: out of the load
        // balancer's rotation until it is back.
        (Route::Healthz, Some(s)) if s.cluster.as_ref().is_some_and(|c| !c.connected) => response(
            "503 Service Unavailable",
            "text/plain",
            "cluster unreachable\n",
        ),
        (Route::Healthz, Some(_)) => response("200 OK", "text/plain", "ok\n"),
        (Route::Healthz | Route::Metrics, None) => {
            response("503 Service Unavailable", "text/plain", "relay stopping\n")
        }
        (Route::Metrics, Some(s)) => response(
            "200 OK",
            "text/plain; version=0.0.4",
            &(render_metrics(s) + &render_connection_metrics(conns)),
        ),
        (Route::BadUpgrade { version: true }, _) => response_with(
            "426 Upgrade Required",
            "sec-websocket-version: 13\r\nupgrade: websocket\r\n",
            "text/plain",
            "a2acp relay: WebSocket version 13 only\n",
        ),
        (Route::BadUpgrade { version: false }, _) => response(
            "400 Bad Request",
            "text/plain",
            "a2acp relay: a WebSocket upgrade needs its Sec-WebSocket-Key\n",
        ),
        _ => response(
            "404 Not Found",
            "text/plain",
            "a2acp relay: connect with a WebSocket, or GET /healthz or /metrics\n",
        ),
    }
}

/// One metric in the Prometheus text exposition: its help, its type and its value.
fn write_metric(out: &mut String, name: &str, kind: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
    );
}

/// The Prometheus text exposition of a relay's counters.
pub fn render_metrics(s: &RelaySnapshot) -> String {
    let st = &s.stats;
    let mut out = String::new();
    let mut metric =
        |name: &str, kind: &str, help: &str, v: u64| write_metric(&mut out, name, kind, help, v);
    metric(
        "a2acp_relay_connections",
        "gauge",
        "Open WebSocket connections.",
        st.connections as u64,
    );
    metric(
        "a2acp_relay_authenticated_connections",
        "gauge",
        "Authenticated connections.",
        st.authenticated as u64,
    );
    metric(
        "a2acp_relay_registered_addresses",
        "gauge",
        "Registered addresses.",
        st.registered as u64,
    );
    metric(
        "a2acp_relay_queued_packets",
        "gauge",
        "Packets queued and not yet acknowledged.",
        st.queued as u64,
    );
    metric(
        "a2acp_relay_packets_routed_total",
        "counter",
        "Packets accepted (durably queued) since start.",
        st.routed_total,
    );
    metric(
        "a2acp_relay_packets_delivered_total",
        "counter",
        "Deliveries sent since start, re-deliveries included.",
        st.delivered_total,
    );
    metric(
        "a2acp_relay_packets_acked_total",
        "counter",
        "Packets acknowledged by their recipients since start.",
        st.acked_total,
    );
    metric(
        "a2acp_relay_overflows_total",
        "counter",
        "Overflow notices sent (per-thread queue full, spec 13.2).",
        st.overflows,
    );
    metric(
        "a2acp_relay_slow_consumers_total",
        "counter",
        "Connections closed because they did not read their frames.",
        s.slow_consumers,
    );
    metric(
        "a2acp_relay_closed_for_refusals_total",
        "counter",
        "Connections closed with too_many_refusals (refused frames past their allowance or budget).",
        st.closed_for_refusals,
    );
    metric(
        "a2acp_relay_closed_oversized_total",
        "counter",
        "Connections closed after a message beyond the transport limit (too_large, close 1009).",
        st.closed_oversized,
    );
    metric(
        "a2acp_relay_registrations_limited_total",
        "counter",
        "Registrations refused by the per-source limit (registration_limited).",
        st.registrations_limited,
    );
    metric(
        "a2acp_relay_registration_sources",
        "gauge",
        "Sources whose registration window is tracked.",
        st.registration_sources as u64,
    );
    metric(
        "a2acp_relay_log_lines_suppressed_total",
        "counter",
        "Log lines about clients held back by the log's rate limit (counted, summarised).",
        s.log_lines_suppressed,
    );
    metric(
        "a2acp_relay_commits_total",
        "counter",
        "SQLite transactions committed.",
        s.commits,
    );
    let _ = writeln!(
        out,
        "# HELP a2acp_relay_refusals_total Error frames sent, by reason.\n# TYPE a2acp_relay_refusals_total counter"
    );
    for (code, n) in &st.refusals {
        let _ = writeln!(
            out,
            "a2acp_relay_refusals_total{{reason=\"{}\"}} {n}",
            code.as_str()
        );
    }
    render_federation(&mut out, st);
    if let Some(c) = &s.cluster {
        render_cluster(&mut out, c, st);
    }
    out
}

/// The cluster figures of a node (cluster mode only).
fn render_cluster(
    out: &mut String,
    c: &crate::cluster::ClusterHealth,
    st: &a2acp_core::relay::RelayStats,
) {
    let waiting = st.cluster_waiting;
    write_metric(
        out,
        "a2acp_relay_cluster_connected",
        "gauge",
        "1 while this node's connection to the NATS cluster is up.",
        u64::from(c.connected),
    );
    write_metric(
        out,
        "a2acp_relay_cluster_waiting",
        "gauge",
        "Requests to the cluster not yet answered (enqueues awaiting JetStream's ack, registrations).",
        waiting as u64,
    );
    if !st.federation.is_empty() || st.cluster_federator {
        write_metric(
            out,
            "a2acp_relay_cluster_federator",
            "gauge",
            "1 while this node is its domain's federator (it pushes to other domains).",
            u64::from(st.cluster_federator),
        );
    }
    write_metric(
        out,
        "a2acp_relay_cluster_queued_packets",
        "gauge",
        "Packets the cluster's queue stream holds, every node's recipients.",
        c.queued,
    );
    let _ = writeln!(
        out,
        "# HELP a2acp_relay_cluster_node Relay nodes alive in the cluster (1 for this node).\n# TYPE a2acp_relay_cluster_node gauge"
    );
    for n in &c.nodes {
        let _ = writeln!(
            out,
            "a2acp_relay_cluster_node{{node=\"{n}\"}} {}",
            u8::from(*n == c.node)
        );
    }
}

/// Federation's figures per remote domain (nothing when the relay does not federate).
/// Domains are checked domain names (lower-case letters, digits, `-` and `.`): nothing to
/// escape in a label.
fn render_federation(out: &mut String, st: &a2acp_core::relay::RelayStats) {
    if st.federation.is_empty() {
        return;
    }
    type Figure = fn(&a2acp_core::relay::federation::DomainStats) -> i64;
    let figures: [(&str, &str, &str, Figure); 9] = [
        (
            "a2acp_relay_federation_link_out",
            "gauge",
            "1 while this relay's link to the domain's relay is up.",
            |d| i64::from(d.link_out),
        ),
        (
            "a2acp_relay_federation_links_in",
            "gauge",
            "Links the domain's relay opened to this one, up.",
            |d| d.links_in as i64,
        ),
        (
            "a2acp_relay_federation_queued",
            "gauge",
            "Packets queued for the domain, not yet handed over.",
            |d| d.queued as i64,
        ),
        (
            "a2acp_relay_federation_forwarded_total",
            "counter",
            "Packets handed over to the domain's relay since start.",
            |d| d.forwarded as i64,
        ),
        (
            "a2acp_relay_federation_received_total",
            "counter",
            "Packets received from the domain's relay since start.",
            |d| d.received as i64,
        ),
        (
            "a2acp_relay_federation_refusals_total",
            "counter",
            "Pushes from the domain refused, and refusals on its links, since start.",
            |d| (d.refused + d.link_refusals) as i64,
        ),
        (
            "a2acp_relay_federation_undeliverable_total",
            "counter",
            "Packets for the domain expired or rejected since start (their senders told).",
            |d| d.undeliverable as i64,
        ),
        (
            "a2acp_relay_federation_lies_total",
            "counter",
            "Lies of the domain's relay observed since start.",
            |d| d.lies as i64,
        ),
        (
            "a2acp_relay_federation_reputation",
            "gauge",
            "The domain's reputation score, -100 to 100.",
            |d| i64::from(d.reputation),
        ),
    ];
    for (name, kind, help, f) in figures {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (domain, d) in &st.federation {
            let _ = writeln!(out, "{name}{{domain=\"{domain}\"}} {}", f(d));
        }
    }
}

/// The Prometheus text exposition of the listener's connection counters
/// ([`crate::admission`]).
pub fn render_connection_metrics(c: &AdmissionStats) -> String {
    let mut out = String::new();
    let mut metric =
        |name: &str, kind: &str, help: &str, v: u64| write_metric(&mut out, name, kind, help, v);
    metric(
        "a2acp_relay_tcp_connections",
        "gauge",
        "Open TCP connections, every phase.",
        c.open,
    );
    metric(
        "a2acp_relay_http_phase_connections",
        "gauge",
        "Open TCP connections whose request head is incomplete.",
        c.pending,
    );
    metric(
        "a2acp_relay_connections_refused_total_cap_total",
        "counter",
        "Connections refused at the total cap (--max-connections).",
        c.refused_total,
    );
    metric(
        "a2acp_relay_connections_refused_per_ip_total",
        "counter",
        "Connections refused at the per-source cap (--max-connections-per-ip).",
        c.refused_per_ip,
    );
    metric(
        "a2acp_relay_connections_evicted_total",
        "counter",
        "Connections with an incomplete request head closed to make room at the total cap.",
        c.evicted,
    );
    metric(
        "a2acp_relay_upgrade_timeouts_total",
        "counter",
        "Connections closed by the HTTP-phase deadline (--upgrade-timeout).",
        c.upgrade_timeouts,
    );
    metric(
        "a2acp_relay_tls_handshake_failures_total",
        "counter",
        "TLS handshakes that failed (--tls-cert): certificate refused by the client, plain HTTP, garbage.",
        c.tls_handshake_failures,
    );
    metric(
        "a2acp_relay_accept_errors_total",
        "counter",
        "Failed accepts (out of file descriptors, ...).",
        c.accept_errors,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(classify(b"GET /metr"), None);
        assert_eq!(
            classify(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(Route::Metrics)
        );
        assert_eq!(
            classify(b"GET /healthz?x=1 HTTP/1.1\r\n\r\n"),
            Some(Route::Healthz)
        );
        assert_eq!(
            classify(
                b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            ),
            Some(Route::WebSocket)
        );
        assert_eq!(
            classify(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 8\r\nSec-WebSocket-Key: k\r\n\r\n"),
            Some(Route::BadUpgrade { version: true })
        );
        assert_eq!(
            classify(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n"),
            Some(Route::BadUpgrade { version: false })
        );
        let a = String::from_utf8(answer(
            &Route::BadUpgrade { version: true },
            None,
            &AdmissionStats::default(),
            None,
        ))
        .unwrap();
        assert!(a.starts_with("HTTP/1.1 426 "), "{a}");
        assert!(a.contains("\r\nsec-websocket-version: 13\r\n"), "{a}");
        assert_eq!(classify(b"GET / HTTP/1.1\r\n\r\n"), Some(Route::Other));
        assert_eq!(
            classify(b"GET /.well-known/a2acp HTTP/1.1\r\nHost: b.example\r\n\r\n"),
            Some(Route::Discovery)
        );
        let a = String::from_utf8(answer(
            &Route::Discovery,
            None,
            &AdmissionStats::default(),
            Some("{}"),
        ))
        .unwrap();
        assert!(a.starts_with("HTTP/1.1 200 "), "{a}");
        assert!(a.ends_with("\r\n\r\n{}"), "{a}");
        let a = String::from_utf8(answer(
            &Route::Discovery,
            None,
            &AdmissionStats::default(),
            None,
        ))
        .unwrap();
        assert!(a.starts_with("HTTP/1.1 404 "), "{a}");
        assert_eq!(classify(&[b'x'; MAX_HEAD]), Some(Route::Other));
    }

    #[test]
    fn metrics_text() {
        let mut s = RelaySnapshot::default();
        s.stats
            .refusals
            .insert(a2acp_core::link::ErrorCode::BadSignature, 2);
        s.stats.routed_total = 7;
        s.stats.closed_for_refusals = 3;
        s.stats.registrations_limited = 40;
        let t = render_metrics(&s);
        assert!(t.contains("a2acp_relay_closed_for_refusals_total 3"), "{t}");
        assert!(
            t.contains("a2acp_relay_registrations_limited_total 40"),
            "{t}"
        );
        assert!(t.contains("a2acp_relay_packets_routed_total 7"), "{t}");
        assert!(
            t.contains("a2acp_relay_refusals_total{reason=\"bad_signature\"} 2"),
            "{t}"
        );
        assert!(!t.contains("federation"), "{t}");
        s.stats.federation.insert(
            "b.example".into(),
            a2acp_core::relay::federation::DomainStats {
                link_out: true,
                queued: 4,
                refused: 2,
                link_refusals: 1,
                reputation: -5,
                ..Default::default()
            },
        );
        let t = render_metrics(&s);
        for line in [
            "a2acp_relay_federation_link_out{domain=\"b.example\"} 1",
            "a2acp_relay_federation_queued{domain=\"b.example\"} 4",
            "a2acp_relay_federation_refusals_total{domain=\"b.example\"} 3",
            "a2acp_relay_federation_reputation{domain=\"b.example\"} -5",
        ] {
            assert!(t.contains(line), "{line} in {t}");
        }
        let c = AdmissionStats {
            refused_per_ip: 3,
            upgrade_timeouts: 4,
            tls_handshake_failures: 5,
            ..AdmissionStats::default()
        };
        let a = String::from_utf8(answer(&Route::Metrics, Some(&s), &c, None)).unwrap();
        assert!(
            a.contains("a2acp_relay_connections_refused_per_ip_total 3"),
            "{a}"
        );
        assert!(a.contains("a2acp_relay_upgrade_timeouts_total 4"), "{a}");
        assert!(
            a.contains("a2acp_relay_tls_handshake_failures_total 5"),
            "{a}"
        );
        assert!(a.contains("a2acp_relay_packets_routed_total 7"), "{a}");
    }
}
