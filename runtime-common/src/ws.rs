//! The WebSocket side of both ends, on any executor: the settings ([`config`]), the
//! client handshake over an already connected stream ([`handshake`]), and the relay's
//! per-connection loop ([`serve_relay_link`]). A binding supplies the TCP stream (as a
//! `futures-io` `AsyncRead + AsyncWrite`, Nagle off), the spawning and the timers.

use std::net::SocketAddr;

use a2acp_core::link::ErrorCode;
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use async_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use async_tungstenite::tungstenite::{Bytes, Message, Utf8Bytes};
use async_tungstenite::WebSocketStream;
use futures_util::io::{AsyncRead, AsyncWrite};
use futures_util::{SinkExt, StreamExt};
use tracing::debug;

use crate::relay_service::{ConnOut, RelayHandle};

/// Largest protocol frame (docs/protocol.md, relay link §1: 128 KiB).
pub const MAX_FRAME_BYTES: usize = 131_072;

/// Largest WebSocket message (and frame) read whole: twice [`MAX_FRAME_BYTES`]. A
/// message between the two is read and refused `too_large` by the relay (the connection
/// lives on); a longer one is not buffered: the relay answers `error too_large` and closes
/// the connection (close code 1009, reason `too_large`).
pub const MAX_MESSAGE_BYTES: usize = 2 * MAX_FRAME_BYTES;

/// The WebSocket settings of both ends, sized deliberately:
///
/// - read buffer 2 KiB instead of tungstenite's eagerly allocated (and zeroed) 128 KiB:
///   tungstenite keeps it for the connection's life, so it is what an idle connection
///   costs to read; a 3 KB frame (a 2 KB packet) takes two reads (the buffer grows for
///   larger frames and is reused). 4 KiB read such a frame in one read but cost an idle
///   relay connection 2 KiB more;
/// - write buffer 16 KiB: frames queued together go out in one write, flushed explicitly;
/// - largest message and frame [`MAX_MESSAGE_BYTES`] (256 KiB), twice the protocol's
///   128 KiB limit, so a frame between the two gets the relay's `too_large` error frame
///   (and the connection lives on), while a larger one is refused as soon as its header
///   announces it, before it is buffered: `error too_large`, then close 1009 `too_large`
///   ([`serve_relay_link`]).
pub fn config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(2048)
        .write_buffer_size(16 * 1024)
        .max_write_buffer_size(4 * 1024 * 1024)
        .max_message_size(Some(MAX_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_MESSAGE_BYTES))
}

/// A link's stream: plain TCP (`ws://`) or TLS over it (`wss://`).
pub use crate::tls::MaybeTls;

/// Why a connection to a relay failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL is not `ws://host:port` or `wss://host:port`.
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
    /// The TLS settings could not be made.
    #[error(transparent)]
    TlsConfig(#[from] crate::tls::TlsError),
    /// The TLS handshake failed (e.g. the relay's certificate is not trusted).
    #[error("TLS handshake with {url} failed: {source}{}", tls_hint(source))]
    Tls {
        /// The URL.
        url: String,
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

/// Whether a TLS handshake error is about the relay's certificate: then what to do.
fn tls_hint(e: &std::io::Error) -> &'static str {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(_)) => {
            " (a relay with a private or self-signed certificate needs its CA: \
             `a2acp agent init --ca FILE`, or `relay_ca = \"FILE\"` in config.toml)"
        }
        _ => "",
    }
}

/// The client side of a link over a connected TCP `stream` (Nagle off): for a `wss://`
/// URL the TLS handshake first, trusting `tls` (`None`: the web PKI roots only), then
/// the WebSocket handshake with [`config`]. The binding gives the overall deadline.
pub async fn connect_over<S>(
    url: &str,
    stream: S,
    tls: Option<&crate::tls::ClientTls>,
) -> Result<WebSocketStream<MaybeTls<S>>, ConnectError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let stream = if crate::config::relay_is_tls(url) {
        let (host, _) = crate::config::relay_url(url).map_err(ConnectError::Url)?;
        let web;
        let tls = match tls {
            Some(t) => t,
            None => {
                web = crate::tls::ClientTls::web_pki()?;
                &web
            }
        };
        tls.connect(&host, stream)
            .await
            .map_err(|source| ConnectError::Tls {
                url: url.to_string(),
                source,
            })?
    } else {
        MaybeTls::Plain(stream)
    };
    handshake(url, stream).await
}

/// The client handshake with the relay at `url` over `stream`, with [`config`].
pub async fn handshake<S>(url: &str, stream: S) -> Result<WebSocketStream<S>, ConnectError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (ws, _) = async_tungstenite::client_async_with_config(url, stream, Some(config()))
        .await
        .map_err(|e| ConnectError::Handshake {
            url: url.to_string(),
            source: Box::new(e),
        })?;
    Ok(ws)
}

/// How a link's reading and writing ended.
enum End {
    /// The reader: the peer closed, failed or broke the protocol (or the service stopped
    /// taking its frames).
    Read,
    /// The writer: the relay's close frame was written.
    Closed,
    /// The writer: the connection failed, or the service dropped it.
    Dropped,
}

/// Serves one accepted link (an agent's, or another relay's that dialled this one) after
/// the server handshake, until it ends: `stream` is the connection after the `101`
/// answer, `early` what the client sent after its request head, already read. Every text
/// or binary message goes to the relay service, and what the service releases for this
/// connection is written back, queued frames in one write. The frames are read and
/// written by [`crate::ws_accepted`], which keeps no buffer while the link is idle. A
/// message beyond [`MAX_MESSAGE_BYTES`] is reported to the service, which answers `error
/// too_large` and closes the connection: reading stops, and the connection ends once both
/// are written (close code 1009). The peer's IP address is the connection's source for
/// the relay's limits per source. Reports the disconnection to the service before it
/// returns.
///
/// When the relay closes the link (its close frame written: too many refusals, a message
/// too large, the relay shutting down), the connection is not dropped at once: the
/// disconnection is reported, then [`crate::linger::close_after_close_frame`] closes the
/// write half and reads past what the client still sends until its close frame, its end,
/// [`crate::linger::MAX_BYTES`] or [`crate::linger::TIME`] from `timer` (the binding's: a
/// future that completes the given time after it is made), so the client reads the
/// relay's last answers and its close frame rather than a reset.
pub async fn serve_relay_link<S, T, D>(
    stream: S,
    early: Vec<u8>,
    peer: SocketAddr,
    handle: RelayHandle,
    timer: T,
) where
    S: AsyncRead + AsyncWrite + Unpin,
    T: Fn(std::time::Duration) -> D,
    D: std::future::Future<Output = ()>,
{
    use crate::ws_accepted::{self as frames, Decoder, Incoming};
    use futures_util::io::AsyncReadExt;
    use std::collections::VecDeque;

    let Ok((conn, out)) = handle.connect(peer.ip()).await else {
        return;
    };
    debug!(%peer, conn = conn.0, "connected");
    let (mut rd, mut wr) = stream.split();
    // Outside the reader, so that the closing handshake goes on where it stopped.
    let mut dec = Decoder::default();
    // A ping's pong, for the writer (only the latest is answered).
    let pong: std::sync::Mutex<Option<Bytes>> = std::sync::Mutex::new(None);
    let pong_ready = futures_util::task::AtomicWaker::new();
    let reader = async {
        let dec = &mut dec;
        let mut incoming = VecDeque::new();
        dec.feed(&early, &mut incoming);
        drop(early);
        loop {
            while let Some(i) = incoming.pop_front() {
                match i {
                    Incoming::Message(bytes) => {
                        if handle.bytes(conn, bytes).await.is_err() {
                            return End::Read;
                        }
                    }
                    Incoming::Ping(p) => {
                        if let Ok(mut slot) = pong.lock() {
                            *slot = Some(p);
                        }
                        pong_ready.wake();
                    }
                    Incoming::Close => return End::Read,
                    Incoming::Oversized(len) => {
                        // Logged (rate-limited) by the service as a `too_large` refusal.
                        debug!(%peer, conn = conn.0, len, "message beyond the WebSocket limit");
                        if handle.oversized(conn, MAX_MESSAGE_BYTES).await.is_ok() {
                            // The writer sends the error and the close frame, then ends the
                            // connection (or ends it if the service drops the connection).
                            std::future::pending::<()>().await;
                        }
                        return End::Read;
                    }
                    Incoming::Protocol(why) => {
                        debug!(%peer, conn = conn.0, why, "WebSocket protocol error");
                        return End::Read;
                    }
                }
            }
            // Nothing kept between reads.
            if incoming.capacity() > 0 {
                incoming = VecDeque::new();
            }
            if !frames::read_more(&mut rd, dec, &mut incoming).await {
                debug!(%peer, conn = conn.0, "connection lost");
                return End::Read;
            }
        }
    };
    let writer = async {
        loop {
            let got = crate::race::race(
                async { out.recv_async().await.map(Some).map_err(|_| ()) },
                std::future::poll_fn(|cx| {
                    pong_ready.register(cx.waker());
                    match pong.lock().map(|p| p.is_some()) {
                        Ok(true) => std::task::Poll::Ready(Ok(None)),
                        _ => std::task::Poll::Pending,
                    }
                }),
            )
            .await;
            let Ok(first) = got else { return End::Dropped };
            let mut buf = Vec::new();
            if let Some(p) = pong.lock().ok().and_then(|mut p| p.take()) {
                frames::encode_pong(&mut buf, &p);
            }
            let mut next = first;
            let mut close = None;
            while let Some(o) = next.take() {
                match o {
                    ConnOut::Frame(b) => {
                        // The service's frames are JSON text; anything else is not sent.
                        if std::str::from_utf8(&b).is_ok() {
                            frames::encode_text(&mut buf, &b);
                        }
                    }
                    ConnOut::Close(code) => {
                        close = Some(code);
                        break;
                    }
                }
                next = out.try_recv().ok();
            }
            if let Some(code) = close {
                match code {
                    Some(c) => frames::encode_close(
                        &mut buf,
                        if c == ErrorCode::TooLarge { 1009 } else { 1008 },
                        c.as_str(),
                    ),
                    None => frames::encode_close(&mut buf, 1001, "relay shutting down"),
                }
            }
            if frames::write_all(&mut wr, &buf).await.is_err() {
                return End::Dropped;
            }
            if close.is_some() {
                return End::Closed;
            }
        }
    };
    let end = crate::race::race(reader, writer).await;
    handle.disconnected(conn).await;
    debug!(%peer, conn = conn.0, "disconnected");
    if let End::Closed = end {
        // The closing handshake, boxed: an idle link's task does not carry its state.
        let Ok(mut stream) = rd.reunite(wr) else {
            return;
        };
        let how = Box::pin(crate::linger::close_after_close_frame(
            &mut stream,
            timer(crate::linger::TIME),
            dec.into_skipper(),
        ))
        .await;
        debug!(%peer, conn = conn.0, ?how, "closed after the close frame");
    }
}

/// Serves one link this relay dialled (to another relay) that the service knows as
/// `conn`, as [`serve_relay_link`] does an accepted one, over tungstenite's client side,
/// until it ends; reports the disconnection. After the relay's close frame, the closing
/// handshake: what the other relay still sends is read and dropped (tungstenite's read
/// limits bound what it holds) until its close frame or its end, at most
/// [`crate::linger::MAX_BYTES`] and [`crate::linger::TIME`] from `timer`.
pub async fn serve_link<S, T, D>(
    ws: WebSocketStream<S>,
    peer: SocketAddr,
    conn: a2acp_core::relay::ConnId,
    out: flume::Receiver<ConnOut>,
    handle: RelayHandle,
    timer: T,
) where
    S: AsyncRead + AsyncWrite + Unpin,
    T: Fn(std::time::Duration) -> D,
    D: std::future::Future<Output = ()>,
{
    let (mut sink, mut source) = ws.split();
    let reader = async {
        while let Some(msg) = source.next().await {
            // Shared with the read buffer, not copied.
            let bytes: Bytes = match msg {
                Ok(Message::Text(t)) => Bytes::from(t),
                Ok(Message::Binary(b)) => b,
                Ok(Message::Close(_)) => return End::Read,
                Ok(_) => continue,
                Err(async_tungstenite::tungstenite::Error::Capacity(e)) => {
                    // Logged (rate-limited) by the service as a `too_large` refusal.
                    debug!(%peer, conn = conn.0, error = %e, "frame beyond the WebSocket limit");
                    if handle.oversized(conn, MAX_MESSAGE_BYTES).await.is_ok() {
                        // The writer sends the error and the close frame, then ends the
                        // connection (or ends it if the service drops the connection).
                        std::future::pending::<()>().await;
                    }
                    return End::Read;
                }
                Err(e) => {
                    debug!(%peer, conn = conn.0, error = %e, "connection lost");
                    return End::Read;
                }
            };
            if handle.bytes(conn, bytes).await.is_err() {
                return End::Read;
            }
        }
        End::Read
    };
    let writer = async {
        while let Ok(first) = out.recv_async().await {
            let mut next = Some(first);
            let mut close = None;
            while let Some(o) = next.take() {
                match o {
                    ConnOut::Frame(b) => {
                        let Ok(text) = Utf8Bytes::try_from(b) else {
                            continue;
                        };
                        if sink.feed(Message::Text(text)).await.is_err() {
                            return End::Dropped;
                        }
                    }
                    ConnOut::Close(code) => {
                        close = Some(code);
                        break;
                    }
                }
                next = out.try_recv().ok();
            }
            if sink.flush().await.is_err() {
                return End::Dropped;
            }
            if let Some(code) = close {
                let frame = match code {
                    Some(c) => CloseFrame {
                        code: if c == ErrorCode::TooLarge {
                            CloseCode::Size
                        } else {
                            CloseCode::Policy
                        },
                        reason: c.as_str().into(),
                    },
                    None => CloseFrame {
                        code: CloseCode::Away,
                        reason: "relay shutting down".into(),
                    },
                };
                return match sink.send(Message::Close(Some(frame))).await {
                    Ok(()) => End::Closed,
                    Err(_) => End::Dropped,
                };
            }
        }
        End::Dropped
    };
    let end = crate::race::race(reader, writer).await;
    handle.disconnected(conn).await;
    debug!(%peer, conn = conn.0, "disconnected");
    if let End::Closed = end {
        let drain = async {
            let mut read = 0u64;
            while let Some(Ok(m)) = source.next().await {
                if let Message::Close(_) = m {
                    return "close frame";
                }
                read += m.len() as u64;
                if read >= crate::linger::MAX_BYTES {
                    return "byte cap";
                }
            }
            "end of the stream"
        };
        let how = Box::pin(crate::race::race(drain, async {
            timer(crate::linger::TIME).await;
            "time up"
        }))
        .await;
        debug!(%peer, conn = conn.0, how, "closed after the close frame");
    }
}
