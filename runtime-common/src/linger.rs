//! Closing a connection after a refusal so that the client reads the refusal, shared by
//! every HTTP listener (the agent's A2A listener and MCP bridge, the relay's upgrade path;
//! SPEC-NOTES "The relay link" §8, "Refusals a client can read").
//!
//! A listener that refuses a request before its body is in (over the size cap, too slow,
//! without its token, on a wrong route…) and closes at once closes a socket with unread
//! bytes: the kernel answers them with a reset, and a reset that reaches the client before
//! it has read the answer destroys the answer in its receive buffer — httpx's async client
//! (the official A2A and MCP SDKs') then sees `ReadError` instead of `413`. So after its
//! answer a listener calls [`close_after_refusal`]: the answer is flushed, the write half
//! closed (the client sees the end of the answer), and what the client still sends is
//! read into one fixed buffer and dropped — until the client closes (it has its answer),
//! or [`MAX_BYTES`] were read, or [`TIME`] has passed, whichever comes first. Then the
//! connection is closed. Memory stays one [`BUF`]-byte buffer per connection; a slow or
//! endless body is cut at the first of the two caps, so the defence against slow and huge
//! bodies stays (a refused connection costs at most [`TIME`] more of its slot).
//!
//! The relay's WebSocket links end the same way after the relay's close frame (too many
//! refusals, a message beyond the WebSocket limit, the relay shutting down):
//! [`close_after_close_frame`] flushes the close frame, closes the write half and reads
//! past what the client still sends, frame by frame without keeping it
//! ([`crate::ws_accepted::Skipper`]), until the client's own close frame ends the closing
//! handshake (RFC 6455 §7.1.1), or the client closes, or the same two caps are reached.
//! Without it the relay dropped a socket whose receive buffer still held a flooding
//! client's frames, and the kernel's reset could overtake the relay's last answers and its
//! close frame.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Most bytes of a refused request read and dropped after the refusal (4 MiB: twice the
/// largest body a client is expected to send unasked — the listeners' caps are 1 MiB — so
/// a client that sent a few MiB in one go reads its refusal; beyond it, the client was
/// not going to read an answer anyway).
pub const MAX_BYTES: u64 = 4 * 1024 * 1024;

/// Longest time a refused connection is kept open to drain it, from the refusal (2 s: a
/// client on loopback or a LAN finishes sending a few MiB and reads its answer in well
/// under it; a slowloris loses its connection 2 s after its body deadline).
pub const TIME: Duration = Duration::from_secs(2);

/// The drain buffer's size.
pub const BUF: usize = 8 * 1024;

/// How the linger ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lingered {
    /// The client closed its side (it read its answer) after sending this many more bytes.
    ClientClosed(u64),
    /// The client's WebSocket close frame arrived (it read the relay's close frame) after
    /// this many more bytes, counting the bytes read with it.
    CloseFrame(u64),
    /// The client sent [`MAX_BYTES`] (or more, counted) after the refusal.
    ByteCap(u64),
    /// [`TIME`] passed (this many bytes read meanwhile).
    TimeUp(u64),
    /// The connection failed (reset, …) after this many bytes.
    Failed(u64),
}

/// After a refusal was written to `stream`: flushes it, closes the write half, reads and
/// drops what the client still sends until it closes, [`MAX_BYTES`] were read, or
/// `deadline` (the binding's timer, [`TIME`] from now) fires. The caller then drops the
/// stream.
pub async fn close_after_refusal<S, D>(stream: &mut S, deadline: D) -> Lingered
where
    S: AsyncRead + AsyncWrite + Unpin,
    D: Future<Output = ()>,
{
    linger(stream, deadline, |_| false).await
}

/// After the relay's WebSocket close frame was written to `stream`: flushes it, closes
/// the write half, reads past what the client still sends — `frames` goes on from where
/// the link's reading stopped — until the client's close frame was read, the client
/// closes, [`MAX_BYTES`] were read, or `deadline` (the binding's timer, [`TIME`] from
/// now) fires. The caller then drops the stream.
pub async fn close_after_close_frame<S, D>(
    stream: &mut S,
    deadline: D,
    mut frames: crate::ws_accepted::Skipper,
) -> Lingered
where
    S: AsyncRead + AsyncWrite + Unpin,
    D: Future<Output = ()>,
{
    if frames.closed() {
        // The client's close frame came before ours: the handshake is over.
        let _ = stream.flush().await;
        let _ = stream.close().await;
        return Lingered::CloseFrame(0);
    }
    linger(stream, deadline, |bytes| frames.feed(bytes)).await
}

/// Flushes, closes the write half, then reads and drops until the client closes, `done`
/// says the bytes read so far end it, [`MAX_BYTES`] were read or `deadline` fires.
async fn linger<S, D>(stream: &mut S, deadline: D, mut done: impl FnMut(&[u8]) -> bool) -> Lingered
where
    S: AsyncRead + AsyncWrite + Unpin,
    D: Future<Output = ()>,
{
    // Counted outside the drain, so the deadline's end can report it (atomic only to
    // keep the future `Send`).
    let read = AtomicU64::new(0);
    let drain = async {
        if stream.flush().await.is_err() || stream.close().await.is_err() {
            return Lingered::Failed(0);
        }
        // On the heap, and only while lingering: a connection task that never lingers
        // does not carry the buffer in its state.
        let mut buf = vec![0u8; BUF];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return Lingered::ClientClosed(read.load(Ordering::Relaxed)),
                Ok(n) => {
                    let total = read.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
                    if done(&buf[..n.min(BUF)]) {
                        return Lingered::CloseFrame(total);
                    }
                    if total >= MAX_BYTES {
                        return Lingered::ByteCap(total);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Lingered::Failed(read.load(Ordering::Relaxed)),
            }
        }
    };
    let out = crate::race::race(drain, async {
        deadline.await;
        Lingered::TimeUp(0)
    })
    .await;
    match out {
        Lingered::TimeUp(_) => Lingered::TimeUp(read.load(Ordering::Relaxed)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::io::Cursor;
    use futures_util::FutureExt;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A stream whose reads come from `input` (then pending, or EOF if `ends`), recording
    /// what was written and whether the write half was closed.
    struct Fake {
        input: Cursor<Vec<u8>>,
        ends: bool,
        written: Vec<u8>,
        closed: bool,
    }

    impl AsyncRead for Fake {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<std::io::Result<usize>> {
            let ends = self.ends;
            match Pin::new(&mut self.input).poll_read(cx, buf) {
                Poll::Ready(Ok(0)) if !ends => Poll::Pending,
                other => other,
            }
        }
    }

    impl AsyncWrite for Fake {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            assert!(!self.closed, "nothing is written after the close");
            self.written.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            self.closed = true;
            Poll::Ready(Ok(()))
        }
    }

    fn fake(n: usize, ends: bool) -> Fake {
        Fake {
            input: Cursor::new(vec![b'x'; n]),
            ends,
            written: Vec::new(),
            closed: false,
        }
    }

    #[test]
    fn drains_until_the_client_closes() {
        let mut s = fake(3 * BUF + 5, true);
        let r = close_after_refusal(&mut s, crate::race::never()).now_or_never();
        assert_eq!(r, Some(Lingered::ClientClosed(3 * BUF as u64 + 5)));
        assert!(s.closed, "the write half is closed first");
    }

    #[test]
    fn stops_at_the_byte_cap() {
        let mut s = fake(MAX_BYTES as usize + 10 * BUF, false);
        let r = close_after_refusal(&mut s, crate::race::never()).now_or_never();
        assert_eq!(r, Some(Lingered::ByteCap(MAX_BYTES)));
        assert!(s.input.position() <= MAX_BYTES, "not a byte more is read");
    }

    #[test]
    fn stops_at_the_deadline() {
        let mut s = fake(100, false);
        let (tx, rx) = flume::bounded::<()>(1);
        let mut fut = Box::pin(close_after_refusal(&mut s, async move {
            let _ = rx.recv_async().await;
        }));
        assert_eq!(
            (&mut fut).now_or_never(),
            None,
            "a silent client is waited for"
        );
        tx.send(()).unwrap();
        assert_eq!(fut.now_or_never(), Some(Lingered::TimeUp(100)));
    }

    /// A client's masked frame.
    fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0x80 | opcode, 0x80 | 126];
        v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        v.extend_from_slice(&[7, 7, 7, 7]);
        v.extend(payload.iter().map(|b| b ^ 7));
        v
    }

    fn sending(bytes: Vec<u8>) -> Fake {
        Fake {
            input: Cursor::new(bytes),
            ends: false,
            written: Vec::new(),
            closed: false,
        }
    }

    #[test]
    fn after_a_close_frame_drains_until_the_clients_close_frame() {
        // Frames still in flight, the client's close frame, and it never closes its side.
        let mut b = Vec::new();
        for _ in 0..20 {
            b.extend(frame(0x1, &[b'j'; 1000]));
        }
        b.extend(frame(0x8, &[0x03, 0xe8]));
        let len = b.len() as u64;
        let mut s = sending(b);
        let r = close_after_close_frame(&mut s, crate::race::never(), Default::default())
            .now_or_never();
        assert_eq!(r, Some(Lingered::CloseFrame(len)));
        assert!(s.closed, "the write half is closed first");
        // Or the end of the stream, without a close frame.
        let mut s = sending(frame(0x2, &[b'x'; 3 * BUF - 8]));
        s.ends = true;
        let r = close_after_close_frame(&mut s, crate::race::never(), Default::default())
            .now_or_never();
        assert_eq!(r, Some(Lingered::ClientClosed(3 * BUF as u64)));
        // A close frame the link's reading had already seen: nothing to wait for.
        let mut dec = crate::ws_accepted::Decoder::default();
        let mut out = std::collections::VecDeque::new();
        dec.feed(&frame(0x8, b""), &mut out);
        let mut s = fake(100, false);
        let r = close_after_close_frame(&mut s, crate::race::never(), dec.into_skipper())
            .now_or_never();
        assert_eq!(r, Some(Lingered::CloseFrame(0)));
        assert!(s.closed && s.input.position() == 0);
    }

    #[test]
    fn after_a_close_frame_a_flood_stops_at_the_byte_cap() {
        // One frame announcing 1 TiB, whose payload keeps coming (close frames inside it
        // are payload, not the client's close).
        let mut b = vec![0x82, 0x80 | 127];
        b.extend_from_slice(&(1u64 << 40).to_be_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend(
            frame(0x8, b"")
                .iter()
                .cycle()
                .take(MAX_BYTES as usize + 10 * BUF),
        );
        let mut s = sending(b);
        let r = close_after_close_frame(&mut s, crate::race::never(), Default::default())
            .now_or_never();
        assert_eq!(r, Some(Lingered::ByteCap(MAX_BYTES)));
        assert!(s.input.position() <= MAX_BYTES, "not a byte more is read");
    }

    #[test]
    fn after_a_close_frame_a_client_that_never_closes_is_cut_at_the_deadline() {
        let mut s = sending(frame(0x1, &[b'x'; 100]));
        let (tx, rx) = flume::bounded::<()>(1);
        let mut fut = Box::pin(close_after_close_frame(
            &mut s,
            async move {
                let _ = rx.recv_async().await;
            },
            Default::default(),
        ));
        assert_eq!((&mut fut).now_or_never(), None, "the client is waited for");
        tx.send(()).unwrap();
        assert_eq!(fut.now_or_never(), Some(Lingered::TimeUp(108)));
    }
}
