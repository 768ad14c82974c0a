//! WebSocket settings and the client connection, shared by the relay, the agent, the
//! demo and the benchmark. The settings, the TLS configuration and the handshakes are
//! `a2acp-runtime`'s (the smol binding uses the same); this module adds tokio's TCP
//! connect and timeout.

use std::time::Duration;

use a2acp_runtime::tls::ClientTls;
use async_tungstenite::tokio::TokioAdapter;
use async_tungstenite::WebSocketStream;
use tokio::net::TcpStream;

pub use a2acp_runtime::ws::{config, ConnectError, MaybeTls, MAX_FRAME_BYTES};

/// A WebSocket over a tokio TCP stream, plain (`ws://`) or TLS (`wss://`).
pub type Ws = WebSocketStream<MaybeTls<TokioAdapter<TcpStream>>>;

/// Connects to a relay (`ws://host:port`, or `wss://host:port` trusting the web PKI
/// roots), Nagle off, 10 s at most.
pub async fn connect(url: &str) -> Result<Ws, ConnectError> {
    connect_with(url, None).await
}

/// [`connect`], trusting `tls` for a `wss://` relay (`None`: the web PKI roots only).
pub async fn connect_with(url: &str, tls: Option<&ClientTls>) -> Result<Ws, ConnectError> {
    let (host, port) = a2acp_runtime::config::relay_url(url).map_err(ConnectError::Url)?;
    let addr = format!("{host}:{port}");
    let fut = async {
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|source| ConnectError::Tcp {
                addr: addr.clone(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        a2acp_runtime::ws::connect_over(url, TokioAdapter::new(tcp), tls).await
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .map_err(|_| ConnectError::Timeout(url.to_string()))?
}
