//! What federation borrows from tokio ([`a2acp_runtime::federation::Net`]): its TCP
//! connect (Nagle off), its timer and its spawner.

use std::io;
use std::time::Duration;

use a2acp_runtime::federation::{BoxFut, Net};
use async_tungstenite::tokio::TokioAdapter;
use tokio::net::TcpStream;

/// tokio's network for federation.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioNet;

impl Net for TokioNet {
    type Stream = TokioAdapter<TcpStream>;

    fn connect(&self, host: &str, port: u16) -> BoxFut<io::Result<Self::Stream>> {
        let host = host.to_string();
        Box::pin(async move {
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            let _ = tcp.set_nodelay(true);
            Ok(TokioAdapter::new(tcp))
        })
    }

    fn peer_addr(stream: &Self::Stream) -> Option<std::net::SocketAddr> {
        stream.get_ref().peer_addr().ok()
    }

    fn sleep(&self, d: Duration) -> BoxFut<()> {
        Box::pin(tokio::time::sleep(d))
    }

    fn spawn(&self, f: BoxFut<()>) {
        tokio::spawn(f);
    }
}
