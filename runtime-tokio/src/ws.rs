//! WebSocket settings and the client connection, shared by the relay, the agent, the
//! demo and the benchmark.

use std::time::Duration;

use async_tungstenite::tokio::{client_async_with_config, TokioAdapter};
use async_tungstenite::tungstenite::protocol::WebSocketConfig;
use async_tungstenite::WebSocketStream;
use tokio::net::TcpStream;

/// A WebSocket over a tokio TCP stream.
pub type Ws = WebSocketStream<TokioAdapter<TcpStream>>;

/// Largest protocol frame (SPEC-NOTES relay link §1: 128 KiB).
pub const MAX_FRAME_BYTES: usize = 131_072;

/// The WebSocket settings of both ends, sized deliberately:
///
/// - read buffer 4 KiB instead of tungstenite's eagerly allocated 128 KiB: an idle
///   connection costs a few KiB, and a 2 KB packet still arrives in one read (the buffer
///   grows for the rare large frame and is reused);
/// - write buffer 16 KiB: frames queued together go out in one write, flushed explicitly;
/// - largest message and frame 256 KiB, twice the protocol's 128 KiB limit, so a frame
///   between the two gets the relay's `too_large` error frame (and the connection lives on),
///   while anything larger is cut off by the WebSocket layer (close 1009) before it is
///   buffered whole.
pub fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(4096)
        .write_buffer_size(16 * 1024)
        .max_write_buffer_size(4 * 1024 * 1024)
        .max_message_size(Some(2 * MAX_FRAME_BYTES))
        .max_frame_size(Some(2 * MAX_FRAME_BYTES))
}

/// Why a connection to a relay failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL is not `ws://host:port`.
    #[error("{0}")]
    Url(String),
    /// TCP failed.
    #[error("cannot connect to {addr}: {source}")]
    Tcp {
        /// host:port.
        addr: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The WebSocket handshake failed.
    #[error("WebSocket handshake with {url} failed: {source}")]
    Handshake {
        /// The URL.
        url: String,
        /// The error.
        #[source]
        source: Box<async_tungstenite::tungstenite::Error>,
    },
    /// It took too long.
    #[error("connecting to {0} timed out")]
    Timeout(String),
}

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
        let (ws, _) = client_async_with_config(url, tcp, Some(config()))
            .await
            .map_err(|e| ConnectError::Handshake {
                url: url.to_string(),
                source: Box::new(e),
            })?;
        Ok(ws)
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .map_err(|_| ConnectError::Timeout(url.to_string()))?
}
