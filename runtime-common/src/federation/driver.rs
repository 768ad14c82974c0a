//! Executing what the relay state machine asks of federation, on the binding's executor:
//! [`RelayOutput::Discover`](a2acp_core::relay::RelayOutput::Discover) becomes a fetch of
//! the domain's discovery document, answered with
//! [`RelayInput::Discovered`](a2acp_core::relay::RelayInput::Discovered);
//! [`RelayOutput::Dial`](a2acp_core::relay::RelayOutput::Dial) becomes an outbound
//! WebSocket over TLS, answered with `Dialed` (then served like any link: its frames to the
//! service, what the service sends written after its commit) or `DialFailed`. Every task
//! runs on its own, so a slow remote domain delays nobody else.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use a2acp_core::relay::federation::{DiscoveryError, RemoteRelay};
use tracing::debug;

use super::{dial, discover, Federation, FetchError, Net};
use crate::relay_service::RelayHandle;

/// What the state machine asked federation to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Task {
    /// Find `domain`'s relay.
    Discover(String),
    /// Open a link to `domain`'s relay at `endpoint`.
    Dial {
        /// The remote domain.
        domain: String,
        /// Its federation endpoint (`wss://`).
        endpoint: String,
    },
}

/// What a failed fetch means to the state machine: no relay (404, no such host), an invalid
/// document (or an answer that is not one), or a relay out of reach for now.
pub fn discovery_error(e: &FetchError) -> DiscoveryError {
    let text = e.to_string();
    match e {
        FetchError::Status(404 | 410) => DiscoveryError::NoRelay(text),
        FetchError::Connect { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound
                || source.to_string().contains("failed to lookup address") =>
        {
            DiscoveryError::NoRelay(text)
        }
        FetchError::Connect { .. }
        | FetchError::Tls { .. }
        | FetchError::Io(_)
        | FetchError::Timeout(_) => DiscoveryError::Unreachable(text),
        FetchError::Status(s) if *s >= 500 => DiscoveryError::Unreachable(text),
        FetchError::Url(_)
        | FetchError::Redirect { .. }
        | FetchError::Status(_)
        | FetchError::BadResponse(_)
        | FetchError::TooLarge
        | FetchError::Document(_) => DiscoveryError::Invalid(text),
    }
}

/// Runs the tasks the service hands over until the service stops.
pub async fn run<N: Net>(
    net: N,
    fed: Arc<Federation>,
    handle: RelayHandle,
    tasks: flume::Receiver<Task>,
) {
    while let Ok(t) = tasks.recv_async().await {
        let (net2, fed, handle) = (net.clone(), fed.clone(), handle.clone());
        match t {
            Task::Discover(domain) => net.spawn(Box::pin(async move {
                let r = discover(&net2, &fed, &domain).await;
                let result = match r {
                    Ok(doc) => Ok(RemoteRelay {
                        endpoint: doc.federation.clone(),
                        keys: vec![doc.current_key().clone()],
                    }),
                    Err(e) => Err(discovery_error(&e)),
                };
                debug!(%domain, ok = result.is_ok(), "discovered");
                handle.discovered(domain, result).await;
            })),
            Task::Dial { domain, endpoint } => net.spawn(Box::pin(async move {
                match dial(&net2, &fed, &endpoint).await {
                    Ok((ws, peer)) => {
                        let peer =
                            peer.unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
                        let Ok((conn, out)) = handle.dialed(domain.clone(), peer.ip()).await else {
                            return;
                        };
                        debug!(%domain, %endpoint, conn = conn.0, "relay link dialled");
                        let timer = move |d| net2.sleep(d);
                        crate::ws::serve_link(ws, peer, conn, out, handle, timer).await;
                    }
                    Err(e) => handle.dial_failed(domain, e.to_string()).await,
                }
            })),
        }
    }
}
