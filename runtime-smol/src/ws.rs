//! The client connection to a relay on smol: TCP (Nagle off) then the shared TLS (for
//! `wss://`) and WebSocket handshakes with the shared settings
//! ([`a2acp_runtime::ws::config`]).

use std::time::Duration;

use a2acp_runtime::tls::ClientTls;
use a2acp_runtime::ws::{connect_over, ConnectError};
use async_tungstenite::WebSocketStream;
use smol::net::TcpStream;

pub use a2acp_runtime::ws::{config, MaybeTls, MAX_FRAME_BYTES};

/// A WebSocket over a smol TCP stream, plain (`ws://`) or TLS (`wss://`).
pub type Ws = WebSocketStream<MaybeTls<TcpStream>>;

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
        connect_over(url, tcp, tls).await
    };
    let timeout = async {
        smol::Timer::after(Duration::from_secs(10)).await;
        Err(ConnectError::Timeout(url.to_string()))
    };
    smol::future::or(fut, timeout).await
}
