//! The client connection to a relay on smol: TCP (Nagle off) then the shared handshake
//! with the shared WebSocket settings ([`a2acp_runtime::ws::config`]).

use std::time::Duration;

use a2acp_runtime::ws::{handshake, ConnectError};
use async_tungstenite::WebSocketStream;
use smol::net::TcpStream;

pub use a2acp_runtime::ws::{config, MAX_FRAME_BYTES};

/// A WebSocket over a smol TCP stream.
pub type Ws = WebSocketStream<TcpStream>;

/// Connects to a relay (`ws://host:port`), Nagle off, 10 s at most.
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
        handshake(url, tcp).await
    };
    let timeout = async {
        smol::Timer::after(Duration::from_secs(10)).await;
        Err(ConnectError::Timeout(url.to_string()))
    };
    smol::future::or(fut, timeout).await
}
