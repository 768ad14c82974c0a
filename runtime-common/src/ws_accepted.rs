//! The relay's side of an accepted WebSocket link, after the handshake: client frames read
//! without a buffer kept while the link is idle, server frames written in batches.
//!
//! An idle agent costs the relay what its link keeps between frames. A WebSocket library
//! keeps a read buffer per connection for the connection's life (tungstenite: the
//! configured read buffer, at least the last frame's size once one was read); here a
//! read borrows a buffer of the thread that polls it ([`SCRATCH`]) for the length of one
//! `poll_read`, and what a connection keeps between reads is only what it has of a frame
//! not yet complete. A complete frame is unmasked as it is copied out of the borrowed
//! buffer (one pass over the bytes, as an in-place unmask is), into an allocation of the
//! frame's own size that goes on to the verifiers. A frame's payload grows with the bytes
//! that arrive, never with the length its header announces.
//!
//! RFC 6455 as a server: client frames must be masked, no extension is negotiated (RSV
//! bits zero), control frames are final and at most 125 bytes, fragments of one message
//! are joined (control frames may come between them), a text message must be UTF-8.
//! A ping is answered with a pong (the latest only, when several wait); a close ends the
//! link. A message longer than [`MAX_MESSAGE_BYTES`] (announced by a header, or reached
//! by fragments) is refused before it is buffered ([`Incoming::Oversized`]).
//!
//! After the relay's own close frame, what the client still sends is read past frame by
//! frame without being kept ([`Skipper`], continuing where the [`Decoder`] stopped), until
//! the client's close frame ends the closing handshake ([`crate::linger::close_after_close_frame`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;

use bytes::Bytes;
use futures_util::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::ws::MAX_MESSAGE_BYTES;

/// The buffer a read borrows: per polling thread, not per connection (a burst of frames
/// larger than it takes several reads).
const SCRATCH_BYTES: usize = 32 * 1024;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; SCRATCH_BYTES].into_boxed_slice());
}

/// What a client sent, frame by frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// A complete text or binary message.
    Message(Bytes),
    /// A ping: answer with a pong carrying this payload.
    Ping(Bytes),
    /// A close frame: the link ends.
    Close,
    /// A message longer than [`MAX_MESSAGE_BYTES`] (its announced or reached length).
    Oversized(u64),
    /// A frame RFC 6455 forbids: the link ends.
    Protocol(&'static str),
}

const OP_CONTINUATION: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const OP_PONG: u8 = 0xA;

/// A frame whose payload is being read.
#[derive(Debug)]
struct Frame {
    opcode: u8,
    fin: bool,
    mask: [u8; 4],
    len: usize,
    data: Vec<u8>,
}

/// Decodes the client's frames from the bytes as they arrive. Between frames it holds no
/// heap memory (the header's at most 14 bytes are inline).
#[derive(Debug, Default)]
pub struct Decoder {
    head: [u8; 14],
    have: u8,
    frame: Option<Frame>,
    /// A fragmented message: its opcode and what arrived of it.
    message: Option<(u8, Vec<u8>)>,
    /// Decoding stopped (a close, an oversized message, a protocol error).
    done: bool,
    /// Once decoding stopped: the frames after it, read past (the rest of an oversized
    /// frame first), so that the closing handshake finds the client's close frame.
    after: Skipper,
}

/// Takes from `bytes` what they hold of the frame header being read (`head`, of which
/// `have` bytes are in), advancing `bytes`; `true` once the header is whole (`head` holds
/// it and `have` is back to 0).
fn take_header(head: &mut [u8; 14], have: &mut u8, bytes: &mut &[u8]) -> bool {
    let got = *have as usize;
    let need = if got < 2 {
        2
    } else {
        header_len([head[0], head[1]])
    };
    let n = (need - got).min(bytes.len());
    head[got..got + n].copy_from_slice(&bytes[..n]);
    *have += n as u8;
    *bytes = &bytes[n..];
    if *have >= 2 && *have as usize == header_len([head[0], head[1]]) {
        *have = 0;
        return true;
    }
    false
}

/// The header's length once its first two bytes are known.
fn header_len(b0_b1: [u8; 2]) -> usize {
    let ext = match b0_b1[1] & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    2 + ext + if b0_b1[1] & 0x80 != 0 { 4 } else { 0 }
}

/// A complete header's payload length, and where the mask starts.
fn payload_len(h: &[u8; 14]) -> (u64, usize) {
    match h[1] & 0x7f {
        126 => (u64::from(u16::from_be_bytes([h[2], h[3]])), 4),
        127 => (
            u64::from_be_bytes([h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]]),
            10,
        ),
        l => (u64::from(l), 2),
    }
}

/// Reads past a client's frames without keeping any of them, watching for its close
/// frame: what the relay does with what a client sends after the relay's close frame
/// (RFC 6455 §7.1.1: the closing handshake ends with the client's close frame). It holds
/// at most a frame header; a payload is counted down, never stored, whatever length its
/// header announces. Frames are not checked (a frame the [`Decoder`] would refuse is
/// read past by its announced length too).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Skipper {
    head: [u8; 14],
    have: u8,
    /// Payload bytes of the current frame still to come.
    left: u64,
    /// The current frame is a close frame.
    closing: bool,
    /// The client's close frame was read whole.
    closed: bool,
}

impl Skipper {
    /// Reads past `bytes` (what came off the connection, in order); `true` once the
    /// client's close frame was read whole (bytes after it are not looked at).
    pub fn feed(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() && !self.closed {
            if self.left > 0 {
                let n = self.left.min(bytes.len() as u64);
                self.left -= n;
                // `n` is at most `bytes.len()`.
                bytes = &bytes[n as usize..];
                self.closed = self.left == 0 && self.closing;
                continue;
            }
            if take_header(&mut self.head, &mut self.have, &mut bytes) {
                self.left = payload_len(&self.head).0;
                self.closing = self.head[0] & 0x0f == OP_CLOSE;
                self.closed = self.left == 0 && self.closing;
            }
        }
        self.closed
    }

    /// Whether the client's close frame was read whole.
    pub fn closed(&self) -> bool {
        self.closed
    }
}

impl Decoder {
    /// Takes in `bytes` as they came off the connection, pushing what they complete onto
    /// `out`. After an [`Incoming::Close`], [`Incoming::Oversized`] or
    /// [`Incoming::Protocol`] nothing more is decoded: what follows is read past
    /// ([`Decoder::into_skipper`]).
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut VecDeque<Incoming>) {
        while !bytes.is_empty() {
            if self.done {
                self.after.feed(bytes);
                return;
            }
            let Some(frame) = self.frame.as_mut() else {
                // A header.
                if take_header(&mut self.head, &mut self.have, &mut bytes) {
                    self.header(out);
                }
                continue;
            };
            let n = (frame.len - frame.data.len()).min(bytes.len());
            let at = frame.data.len();
            frame.data.extend(
                bytes[..n]
                    .iter()
                    .enumerate()
                    .map(|(i, b)| b ^ frame.mask[(at + i) & 3]),
            );
            bytes = &bytes[n..];
            if frame.data.len() == frame.len {
                self.complete(out);
            }
        }
    }

    /// What the client sends after this decoder's last frame, from where it stopped:
    /// the rest of the frame being read, or of the header; after an oversized message,
    /// the rest of its frame; after the client's close frame, nothing (already closed).
    pub fn into_skipper(self) -> Skipper {
        if self.done {
            return self.after;
        }
        match self.frame {
            Some(f) => Skipper {
                left: f.len.saturating_sub(f.data.len()) as u64,
                closing: f.opcode == OP_CLOSE,
                ..Skipper::default()
            },
            None => Skipper {
                head: self.head,
                have: self.have,
                ..Skipper::default()
            },
        }
    }

    /// The header in `head` is complete: check it and start its payload.
    fn header(&mut self, out: &mut VecDeque<Incoming>) {
        let h = self.head;
        let fin = h[0] & 0x80 != 0;
        let opcode = h[0] & 0x0f;
        let (len, at) = payload_len(&h);
        // Past a refused header its payload is read past, so the frames after it stay in
        // step for the closing handshake.
        let rest = Skipper {
            left: len,
            closing: opcode == OP_CLOSE,
            closed: len == 0 && opcode == OP_CLOSE,
            ..Skipper::default()
        };
        let fail = |this: &mut Self, out: &mut VecDeque<Incoming>, why| {
            this.done = true;
            this.after = rest.clone();
            out.push_back(Incoming::Protocol(why));
        };
        if h[0] & 0x70 != 0 {
            return fail(self, out, "reserved bits set (no extension was negotiated)");
        }
        if h[1] & 0x80 == 0 {
            return fail(self, out, "unmasked client frame");
        }
        let control = opcode & 0x08 != 0;
        match opcode {
            OP_CONTINUATION | OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG => {}
            _ => return fail(self, out, "unknown opcode"),
        }
        if control && (!fin || len > 125) {
            return fail(self, out, "fragmented or long control frame");
        }
        if opcode == OP_CONTINUATION && self.message.is_none() {
            return fail(self, out, "continuation without a message");
        }
        if (opcode == OP_TEXT || opcode == OP_BINARY) && self.message.is_some() {
            return fail(self, out, "new message inside a fragmented one");
        }
        let so_far = self.message.as_ref().map_or(0, |(_, m)| m.len() as u64);
        if !control && len.saturating_add(so_far) > MAX_MESSAGE_BYTES as u64 {
            self.done = true;
            self.after = rest;
            out.push_back(Incoming::Oversized(len.saturating_add(so_far)));
            return;
        }
        let len = len as usize;
        let mask = [h[at], h[at + 1], h[at + 2], h[at + 3]];
        // Grows with what arrives: a header announcing 256 KiB buys nothing up front.
        let data = Vec::with_capacity(len.min(SCRATCH_BYTES));
        self.frame = Some(Frame {
            opcode,
            fin,
            mask,
            len,
            data,
        });
        if len == 0 {
            self.complete(out);
        }
    }

    /// The frame being read is complete.
    fn complete(&mut self, out: &mut VecDeque<Incoming>) {
        let Some(f) = self.frame.take() else { return };
        match f.opcode {
            OP_PING => out.push_back(Incoming::Ping(Bytes::from(f.data))),
            OP_PONG => {}
            OP_CLOSE => {
                self.done = true;
                self.after.closed = true;
                out.push_back(Incoming::Close);
            }
            op => {
                let (op, data) = match (op, self.message.take()) {
                    (OP_CONTINUATION, Some((first, mut m))) => {
                        m.extend_from_slice(&f.data);
                        (first, m)
                    }
                    (op, _) => (op, f.data),
                };
                if !f.fin {
                    self.message = Some((op, data));
                    return;
                }
                if op == OP_TEXT && std::str::from_utf8(&data).is_err() {
                    self.done = true;
                    out.push_back(Incoming::Protocol("text message not UTF-8"));
                    return;
                }
                out.push_back(Incoming::Message(Bytes::from(data)));
            }
        }
    }
}

/// Reads from `stream` into the thread's borrowed buffer and decodes what came: waits
/// until at least one [`Incoming`] is in `out`, or returns `false` at the end of the
/// stream or on a read error.
pub async fn read_more<R: AsyncRead + Unpin>(
    stream: &mut R,
    dec: &mut Decoder,
    out: &mut VecDeque<Incoming>,
) -> bool {
    poll_fn(|cx| loop {
        let r = SCRATCH.with(|s| {
            let mut buf = s.borrow_mut();
            match Pin::new(&mut *stream).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => Poll::Ready(false),
                Poll::Ready(Ok(n)) => {
                    dec.feed(&buf[..n], out);
                    Poll::Ready(true)
                }
                Poll::Pending => Poll::Pending,
            }
        });
        match r {
            Poll::Ready(true) if out.is_empty() => continue,
            r => return r,
        }
    })
    .await
}

/// Appends a final server frame (unmasked) with `opcode` and `payload` to `buf`.
pub fn encode(buf: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    buf.push(0x80 | opcode);
    let len = payload.len();
    if len < 126 {
        buf.push(len as u8);
    } else if len <= usize::from(u16::MAX) {
        buf.push(126);
        buf.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        buf.push(127);
        buf.extend_from_slice(&(len as u64).to_be_bytes());
    }
    buf.extend_from_slice(payload);
}

/// Appends a text frame.
pub fn encode_text(buf: &mut Vec<u8>, payload: &[u8]) {
    encode(buf, OP_TEXT, payload);
}

/// Appends a pong.
pub fn encode_pong(buf: &mut Vec<u8>, payload: &[u8]) {
    encode(buf, OP_PONG, payload);
}

/// Appends a close frame with `code` and `reason` (at most 123 bytes of it).
pub fn encode_close(buf: &mut Vec<u8>, code: u16, reason: &str) {
    let mut p = code.to_be_bytes().to_vec();
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    p.extend_from_slice(&reason.as_bytes()[..end]);
    encode(buf, OP_CLOSE, &p);
}

/// Writes `buf` whole and flushes.
pub async fn write_all<W: AsyncWrite + Unpin>(w: &mut W, buf: &[u8]) -> std::io::Result<()> {
    w.write_all(buf).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(opcode: u8, fin: bool, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
        let mut v = vec![(if fin { 0x80 } else { 0 }) | opcode];
        let len = payload.len();
        if len < 126 {
            v.push(0x80 | len as u8);
        } else if len <= 65535 {
            v.push(0x80 | 126);
            v.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            v.push(0x80 | 127);
            v.extend_from_slice(&(len as u64).to_be_bytes());
        }
        v.extend_from_slice(&mask);
        v.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        v
    }

    fn decode_in_pieces(bytes: &[u8], piece: usize) -> Vec<Incoming> {
        let mut d = Decoder::default();
        let mut out = VecDeque::new();
        for c in bytes.chunks(piece.max(1)) {
            d.feed(c, &mut out);
        }
        out.into_iter().collect()
    }

    #[test]
    fn frames_of_every_length_decode_whatever_the_pieces() {
        for len in [0usize, 1, 125, 126, 127, 3168, 65535, 65536, 70_000] {
            let payload: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let mut bytes = masked(OP_TEXT, true, &payload, [1, 2, 3, 4]);
            bytes.extend(masked(OP_BINARY, true, b"next", [9, 8, 7, 6]));
            for piece in [1, 2, 3, 7, 14, 1000, usize::MAX] {
                let got = decode_in_pieces(&bytes, piece.min(bytes.len()));
                assert_eq!(
                    got,
                    vec![
                        Incoming::Message(Bytes::from(payload.clone())),
                        Incoming::Message(Bytes::from_static(b"next"))
                    ],
                    "len {len} piece {piece}"
                );
            }
        }
    }

    #[test]
    fn fragments_join_with_control_frames_between() {
        let mut b = masked(OP_TEXT, false, b"hel", [1, 1, 1, 1]);
        b.extend(masked(OP_PING, true, b"p", [2, 2, 2, 2]));
        b.extend(masked(OP_CONTINUATION, false, b"lo ", [3, 3, 3, 3]));
        b.extend(masked(OP_PONG, true, b"", [3, 3, 3, 3]));
        b.extend(masked(OP_CONTINUATION, true, b"world", [4, 4, 4, 4]));
        assert_eq!(
            decode_in_pieces(&b, 5),
            vec![
                Incoming::Ping(Bytes::from_static(b"p")),
                Incoming::Message(Bytes::from_static(b"hello world"))
            ]
        );
    }

    #[test]
    fn hostile_frames_end_decoding() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                {
                    let mut v = masked(OP_TEXT, true, b"x", [0; 4]);
                    v[1] &= 0x7f;
                    v.truncate(2);
                    v.push(b'x');
                    v
                },
                "unmasked",
            ),
            (
                {
                    let mut v = masked(OP_TEXT, true, b"x", [0; 4]);
                    v[0] |= 0x40;
                    v
                },
                "reserved",
            ),
            (masked(0x3, true, b"x", [0; 4]), "opcode"),
            (masked(OP_PING, false, b"x", [0; 4]), "control"),
            (masked(OP_PING, true, &[0u8; 126], [0; 4]), "control"),
            (masked(OP_CONTINUATION, true, b"x", [0; 4]), "continuation"),
            (
                {
                    let mut v = masked(OP_TEXT, false, b"a", [0; 4]);
                    v.extend(masked(OP_TEXT, true, b"b", [0; 4]));
                    v
                },
                "inside",
            ),
            (masked(OP_TEXT, true, &[0xff, 0xfe], [5; 4]), "UTF-8"),
        ];
        for (bytes, what) in cases {
            let got = decode_in_pieces(&bytes, 3);
            assert!(
                matches!(got.last(), Some(Incoming::Protocol(w)) if w.contains(what)),
                "{what}: {got:?}"
            );
            // Nothing after it is decoded.
            let mut more = bytes.clone();
            more.extend(masked(OP_TEXT, true, b"after", [0; 4]));
            assert_eq!(decode_in_pieces(&more, 3).len(), got.len(), "{what}");
        }
    }

    #[test]
    fn a_long_message_is_refused_before_it_is_buffered() {
        // Announced: 2^63 bytes, and just over the limit; reached by fragments.
        let mut huge = vec![0x81, 0x80 | 127];
        huge.extend_from_slice(&(1u64 << 63).to_be_bytes());
        huge.extend_from_slice(&[0; 4]);
        assert_eq!(
            decode_in_pieces(&huge, 100),
            vec![Incoming::Oversized(1 << 63)]
        );
        let mut over = vec![0x82, 0x80 | 127];
        over.extend_from_slice(&(MAX_MESSAGE_BYTES as u64 + 1).to_be_bytes());
        over.extend_from_slice(&[0; 4]);
        assert_eq!(
            decode_in_pieces(&over, 100),
            vec![Incoming::Oversized(MAX_MESSAGE_BYTES as u64 + 1)]
        );
        let half = vec![b'a'; MAX_MESSAGE_BYTES / 2];
        let mut frags = masked(OP_TEXT, false, &half, [0; 4]);
        frags.extend(masked(OP_CONTINUATION, false, &half, [0; 4]));
        frags.extend(masked(OP_CONTINUATION, true, b"!", [0; 4]));
        assert_eq!(
            decode_in_pieces(&frags, 4096),
            vec![Incoming::Oversized(MAX_MESSAGE_BYTES as u64 + 1)]
        );
        // Exactly the limit passes.
        let at = masked(OP_BINARY, true, &vec![7u8; MAX_MESSAGE_BYTES], [1, 2, 3, 4]);
        assert!(matches!(
            decode_in_pieces(&at, 65536).as_slice(),
            [Incoming::Message(m)] if m.len() == MAX_MESSAGE_BYTES
        ));
    }

    #[test]
    fn an_announced_length_buys_no_memory_up_front() {
        let mut d = Decoder::default();
        let mut out = VecDeque::new();
        let mut h = vec![0x82, 0x80 | 127];
        h.extend_from_slice(&(MAX_MESSAGE_BYTES as u64).to_be_bytes());
        h.extend_from_slice(&[0; 4]);
        d.feed(&h, &mut out);
        d.feed(b"abc", &mut out);
        assert!(out.is_empty());
        assert!(d
            .frame
            .as_ref()
            .is_some_and(|f| f.data.capacity() <= SCRATCH_BYTES));
    }

    #[test]
    fn close_ends_decoding_and_server_frames_encode() {
        let mut b = masked(OP_CLOSE, true, &[0x03, 0xe8], [1, 2, 3, 4]);
        b.extend(masked(OP_TEXT, true, b"late", [0; 4]));
        assert_eq!(decode_in_pieces(&b, 2), vec![Incoming::Close]);
        let mut out = Vec::new();
        encode_text(&mut out, b"hi");
        assert_eq!(out, [0x81, 2, b'h', b'i']);
        out.clear();
        encode_text(&mut out, &[0u8; 300]);
        assert_eq!(&out[..4], &[0x81, 126, 1, 44]);
        out.clear();
        encode_text(&mut out, &vec![0u8; 70_000]);
        assert_eq!(&out[..10], &[0x81, 127, 0, 0, 0, 0, 0, 1, 0x11, 0x70]);
        out.clear();
        encode_close(&mut out, 1009, "too_large");
        assert_eq!(&out[..4], &[0x88, 11, 0x03, 0xf1]);
        assert_eq!(&out[4..], b"too_large");
    }

    /// Where the client's close frame ends in `bytes` (its last byte's index + 1), as a
    /// skipper fed `bytes` one piece at a time finds it after a decoder had the first
    /// `decoded` bytes; `None` if it never does.
    fn close_found(bytes: &[u8], decoded: usize, piece: usize) -> Option<usize> {
        let mut d = Decoder::default();
        let mut out = VecDeque::new();
        d.feed(&bytes[..decoded], &mut out);
        let mut s = d.into_skipper();
        if s.closed() {
            return Some(decoded);
        }
        let mut at = decoded;
        for c in bytes[decoded..].chunks(piece.max(1)) {
            at += c.len();
            if s.feed(c) {
                // The close frame ends in this piece.
                return Some(at);
            }
        }
        None
    }

    #[test]
    fn the_skipper_reads_past_frames_to_the_close_frame_from_where_the_decoder_stopped() {
        // Frames of every header length, a fragmented message with a ping inside, then the
        // close frame and bytes after it.
        let mut b = masked(OP_TEXT, true, &[b'a'; 300], [1, 2, 3, 4]);
        b.extend(masked(OP_BINARY, true, &vec![0x88; 70_000], [5, 6, 7, 8]));
        b.extend(masked(OP_TEXT, false, b"hel", [1, 1, 1, 1]));
        b.extend(masked(OP_PING, true, b"p", [2, 2, 2, 2]));
        b.extend(masked(OP_CONTINUATION, true, b"lo", [3, 3, 3, 3]));
        b.extend(masked(OP_CLOSE, true, &[0x03, 0xe8], [9, 9, 9, 9]));
        let end = b.len();
        b.extend(masked(OP_TEXT, true, b"late", [0; 4]));
        // Splits in every header and payload of the first frames, and of the last ones.
        let splits = (0..400).chain((b.len() - 600..b.len()).step_by(3));
        for decoded in splits {
            for piece in [1, 5, 4096] {
                let want = decoded.max(end);
                let got = close_found(&b, decoded, piece);
                // Found in the piece that holds its last byte.
                assert!(
                    got.is_some_and(|g| g >= want && g < want + piece),
                    "decoded {decoded}, piece {piece}: {got:?}, close ends at {end}"
                );
            }
        }
        // Without a close frame, never.
        assert_eq!(close_found(&b[..end - 1], 100, 3), None);
        // A close frame without a payload.
        let mut e = masked(OP_BINARY, true, b"x", [0; 4]);
        e.extend(masked(OP_CLOSE, true, b"", [0; 4]));
        assert_eq!(close_found(&e, 0, 1), Some(e.len()));
    }

    #[test]
    fn after_a_refused_frame_the_skipper_goes_on_past_its_payload() {
        // An oversized frame (its payload in flight), an unmasked one, one with reserved
        // bits: each stops the decoder, and its payload is read past, not taken for frames.
        let mut oversized = vec![0x82, 0x80 | 127];
        oversized.extend_from_slice(&(MAX_MESSAGE_BYTES as u64 + 1).to_be_bytes());
        oversized.extend_from_slice(&[0; 4]);
        // Its payload looks like close frames.
        let fake_close = masked(OP_CLOSE, true, b"", [0; 4]);
        oversized.extend(fake_close.iter().cycle().take(MAX_MESSAGE_BYTES + 1));
        let unmasked = {
            let mut v = vec![0x82, 6];
            v.extend_from_slice(&fake_close[..6]);
            v
        };
        let reserved = {
            let mut v = masked(OP_BINARY, true, &fake_close, [0; 4]);
            v[0] |= 0x40;
            v
        };
        for refused in [oversized, unmasked, reserved] {
            let mut b = masked(OP_TEXT, true, b"first", [1, 2, 3, 4]);
            let start = b.len();
            b.extend(&refused);
            b.extend(masked(OP_PING, true, b"p", [2; 4]));
            b.extend(masked(OP_CLOSE, true, &[0x03, 0xe8], [9; 4]));
            let end = b.len();
            b.extend(fake_close.iter().cycle().take(100));
            for decoded in [
                start,
                start + 1,
                start + 3,
                start + 14,
                start + 20,
                start + 1000,
            ] {
                let decoded = decoded.min(end - 1);
                assert_eq!(close_found(&b, decoded, 1), Some(end), "decoded {decoded}");
                assert_eq!(close_found(&b, decoded, 8192).map(|g| g >= end), Some(true));
            }
        }
    }

    #[test]
    fn a_close_frame_already_decoded_needs_no_skipping() {
        let mut b = masked(OP_TEXT, true, b"x", [0; 4]);
        b.extend(masked(OP_CLOSE, true, &[0x03, 0xe8], [1; 4]));
        let mut d = Decoder::default();
        let mut out = VecDeque::new();
        d.feed(&b, &mut out);
        assert_eq!(out.back(), Some(&Incoming::Close));
        assert!(d.into_skipper().closed());
        // A skipper holds a frame header at most, whatever a header announces.
        assert!(std::mem::size_of::<Skipper>() <= 32);
    }
}
