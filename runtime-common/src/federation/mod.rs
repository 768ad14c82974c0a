//! Federation on the relay's side, executor-independent: the settings a relay federates
//! with ([`Federation`]), the binding's network ([`Net`]: TCP connect, timer, spawn), and
//! the discovery document's fetching ([`fetch`]). The protocol decisions (when to
//! discover, whom to dial, what a link may carry) are the core's relay state machine's;
//! this module only executes them.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use a2acp_core::discovery::{self, DiscoveryDocument, DiscoveryError};
use futures_util::io::{AsyncRead, AsyncWrite};

use crate::relay_key::RelayKeys;
use crate::tls::ClientTls;

pub mod driver;
pub mod fetch;

pub use fetch::{FetchError, FetchLimits};

/// A boxed, sendable future (what [`Net`] hands back).
pub type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a binding (tokio, smol) lends federation: its TCP connect (Nagle off), its timer
/// and its spawner.
pub trait Net: Clone + Send + Sync + 'static {
    /// A connected TCP stream.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Connects to `host:port`.
    fn connect(&self, host: &str, port: u16) -> BoxFut<io::Result<Self::Stream>>;
    /// The address a stream is connected to.
    fn peer_addr(stream: &Self::Stream) -> Option<std::net::SocketAddr>;
    /// Completes after `d`.
    fn sleep(&self, d: Duration) -> BoxFut<()>;
    /// Runs `f` in the background.
    fn spawn(&self, f: BoxFut<()>);
}

/// How a relay federates (`a2acp relay --federation …`).
#[derive(Debug, Clone)]
pub struct Federation {
    /// The relay's signing key and its rotation chain ([`crate::relay_key`]).
    pub keys: RelayKeys,
    /// The federation endpoint published in the discovery document (`--public-url`);
    /// `None`: the listener's own `wss://` URL.
    pub public_url: Option<String>,
    /// The static map of a private deployment (`--federate DOMAIN=wss://HOST:PORT`): the
    /// document of such a domain is fetched from `https://HOST:PORT/.well-known/a2acp`
    /// instead of `https://DOMAIN/.well-known/a2acp`.
    pub routes: BTreeMap<String, String>,
    /// Whom the relay trusts when it fetches documents and dials links: the web PKI roots,
    /// and a private CA with `--ca`.
    pub tls: ClientTls,
    /// Deadlines of a fetch.
    pub fetch: FetchLimits,
}

impl Federation {
    /// Where the document of `domain` is fetched: its static route's
    /// `https://HOST:PORT/.well-known/a2acp`, or `https://DOMAIN/.well-known/a2acp`.
    pub fn document_url(&self, domain: &str) -> Result<String, DiscoveryError> {
        match self.routes.get(domain) {
            Some(endpoint) => discovery::well_known_url_of_endpoint(endpoint),
            None => Ok(discovery::well_known_url(domain)),
        }
    }

    /// The signed document of this relay serving `domain` at `endpoint`.
    pub fn document(&self, domain: &str, endpoint: &str) -> Result<String, DiscoveryError> {
        let d = DiscoveryDocument::sign(
            domain,
            self.public_url.as_deref().unwrap_or(endpoint),
            self.keys.chain.clone(),
            &self.keys.key,
        )?;
        Ok(String::from_utf8_lossy(&d.to_json()).into_owned())
    }
}

/// Fetches and checks `domain`'s document (its static route's URL, or the domain's).
pub async fn discover<N: Net>(
    net: &N,
    fed: &Federation,
    domain: &str,
) -> Result<DiscoveryDocument, FetchError> {
    let url = fed.document_url(domain)?;
    fetch::fetch_document(net, &fed.tls, &url, domain, fed.fetch).await
}

/// How long a dial (TCP, TLS, WebSocket upgrade) to another relay may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens the link to another relay's federation `endpoint` (`wss://`): TCP, TLS trusting
/// `fed.tls`, the WebSocket upgrade with the agent link's settings, within
/// [`DIAL_TIMEOUT`]; with the address connected to.
pub async fn dial<N: Net>(
    net: &N,
    fed: &Federation,
    endpoint: &str,
) -> Result<
    (
        async_tungstenite::WebSocketStream<crate::tls::MaybeTls<N::Stream>>,
        Option<std::net::SocketAddr>,
    ),
    crate::ws::ConnectError,
> {
    use crate::ws::ConnectError;
    let (host, port) =
        discovery::check_endpoint(endpoint).map_err(|e| ConnectError::Url(e.to_string()))?;
    let addr = format!("{host}:{port}");
    let attempt = async {
        let tcp = net
            .connect(&host, port)
            .await
            .map_err(|source| ConnectError::Tcp {
                addr: addr.clone(),
                source,
            })?;
        let peer = N::peer_addr(&tcp);
        let ws = crate::ws::connect_over(endpoint, tcp, Some(&fed.tls)).await?;
        Ok((ws, peer))
    };
    let deadline = async {
        net.sleep(DIAL_TIMEOUT).await;
        Err(ConnectError::Timeout(endpoint.to_string()))
    };
    crate::race::race(attempt, deadline).await
}
