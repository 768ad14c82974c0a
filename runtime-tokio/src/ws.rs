//! WebSocket settings and the client connection, shared by the relay, the agent, the
//! demo and the benchmark. The settings and the handshake are `a2acp-runtime`'s (the smol
//! binding uses the same); this module adds tokio's TCP connect and timeout.

use std::time::Duration;

use async_tungstenite::tokio::TokioAdapter;
use async_tungstenite::WebSocketStream;
use tokio::net::TcpStream;

pub use a2acp_runtime::ws::{config, ConnectError, MAX_FRAME_BYTES};

/// A WebSocket over a tokio TCP stream.
pub type Ws = WebSocketStream<TokioAdapter<TcpStream>>;

/// Connects to a relay (`ws://host:port`), Nagle off.
pub async fn connect(url: &str) -> Result<Ws, ConnectError> {
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
        a2acp_runtime::ws::handshake(url, TokioAdapter::new(tcp)).await
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .map_err(|_| ConnectError::Timeout(url.to_string()))?
}
