//! What federation borrows from smol ([`a2acp_runtime::federation::Net`]): its TCP
//! connect (Nagle off), its timer and its spawner.

use std::io;
use std::time::Duration;

use a2acp_runtime::federation::{BoxFut, Net};
use smol::net::TcpStream;

/// smol's network for federation.
#[derive(Debug, Clone, Copy, Default)]
pub struct SmolNet;

impl Net for SmolNet {
    type Stream = TcpStream;

    fn connect(&self, host: &str, port: u16) -> BoxFut<io::Result<Self::Stream>> {
        let host = host.to_string();
        Box::pin(async move {
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            let _ = tcp.set_nodelay(true);
            Ok(tcp)
        })
    }

    fn peer_addr(stream: &Self::Stream) -> Option<std::net::SocketAddr> {
        stream.peer_addr().ok()
    }

    fn sleep(&self, d: Duration) -> BoxFut<()> {
        Box::pin(async move {
            smol::Timer::after(d).await;
        })
    }

    fn spawn(&self, f: BoxFut<()>) {
        smol::spawn(f).detach();
    }
}
