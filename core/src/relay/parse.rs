//! Parsing a client frame and checking a `send`'s envelope signature: pure, no relay
//! state, so that runtimes can do both off the state machine's thread.

use crate::crypto;
use crate::crypto::envelope::Envelope;
use crate::link::{ClientFrame, ErrorCode};

/// Longest `message` of a `malformed` refusal, in bytes.
const MAX_REASON: usize = 160;

/// Why bytes are not a frame the relay accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError {
    /// `too_large` or `malformed`.
    pub code: ErrorCode,
    /// What is wrong, for the error frame.
    pub message: String,
}

/// Whether the runtime already checked a `send`'s envelope signature ([`verify_send`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verified {
    /// Nothing was checked: the relay checks the signature itself.
    No,
    /// The envelope's outer signature verified under its `from_key`.
    EnvelopeSignature,
}

/// A parsed client frame. For a `send`, it also keeps the envelope's JSON exactly as
/// received, so that the relay persists and delivers those bytes instead of serialising
/// the envelope again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedFrame {
    pub(super) frame: ClientFrame,
    /// A `send`'s `env` member, byte for byte (`None`: serialise `env` when needed).
    pub(super) env_json: Option<Box<str>>,
}

impl ParsedFrame {
    /// The frame.
    pub fn frame(&self) -> &ClientFrame {
        &self.frame
    }

    /// The envelope's JSON text as received, for a `send` parsed from bytes.
    pub fn env_json(&self) -> Option<&str> {
        self.env_json.as_deref()
    }
}

impl From<ClientFrame> for ParsedFrame {
    /// A frame built in memory: a `send`'s envelope is serialised when the relay needs its
    /// JSON.
    fn from(frame: ClientFrame) -> Self {
        ParsedFrame {
            frame,
            env_json: None,
        }
    }
}

/// The members of a frame the fast path reads: a `send` is parsed in one pass, its
/// envelope kept as raw JSON and parsed from that.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    t: std::borrow::Cow<'a, str>,
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    n: Option<u64>,
    #[serde(default)]
    low: Option<u64>,
    #[serde(borrow, default)]
    env: Option<&'a serde_json::value::RawValue>,
}

/// A `send` (or a relay link's `push`) frame read in one pass, or `None` when the bytes are not one (or are not
/// valid: the general parser then says why).
fn parse_send(bytes: &[u8]) -> Option<ParsedFrame> {
    let head: Head<'_> = serde_json::from_slice(bytes).ok()?;
    let push = match &*head.t {
        "send" => false,
        "push" => true,
        _ => return None,
    };
    let raw = head.env?;
    let env: Envelope = serde_json::from_str(raw.get()).ok()?;
    let frame = if push {
        ClientFrame::Push {
            n: head.n?,
            low: head.low?,
            env,
        }
    } else {
        ClientFrame::Send {
            seq: head.seq?,
            env,
        }
    };
    Some(ParsedFrame {
        frame,
        env_json: Some(raw.get().into()),
    })
}

/// Parses one frame, refusing one longer than `max_frame_bytes` before reading it. Pure:
/// runtimes may call it on any thread and hand the result to the relay as [`super::RelayInput::Frame`].
pub fn parse_frame(bytes: &[u8], max_frame_bytes: usize) -> Result<ParsedFrame, FrameError> {
    if bytes.len() > max_frame_bytes {
        return Err(FrameError {
            code: ErrorCode::TooLarge,
            message: format!(
                "frame of {} bytes exceeds the limit of {max_frame_bytes}",
                bytes.len()
            ),
        });
    }
    if let Some(p) = parse_send(bytes) {
        return Ok(p);
    }
    ClientFrame::from_bytes(bytes)
        .map(ParsedFrame::from)
        .map_err(|e| {
            let mut msg = e.to_string();
            if msg.len() > MAX_REASON {
                let mut end = MAX_REASON;
                while !msg.is_char_boundary(end) {
                    end -= 1;
                }
                msg.truncate(end);
            }
            FrameError {
                code: ErrorCode::Malformed,
                message: msg,
            }
        })
}

/// Checks a `send` (or a relay link's `push`) frame's envelope signature under the key the
/// envelope names (`from_key`), with `key` the decompressed form of that key (cache it:
/// decompressing costs about as much as a verification). Pure: runtimes call it off the
/// state machine's thread and pass [`Verified::EnvelopeSignature`] when it returns true.
/// Other frames return false.
pub fn verify_send(frame: &ClientFrame, key: &crypto::PublicKey) -> bool {
    match frame {
        ClientFrame::Send { env, .. } | ClientFrame::Push { env, .. } => {
            key.to_bytes() == env.from_key && crypto::verify_envelope(env, key).is_ok()
        }
        _ => false,
    }
}
