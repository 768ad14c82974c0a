//! What the A2A listener (`agent run --a2a-listen`) needs besides its executor: its
//! options and limits, who a request is from (the bearer token, or a loopback client),
//! and the calls it hands the agent loop. The protocol is the core's
//! (`a2acp_core::bridge::a2a::task`, `a2acp_core::bridge::a2a::Server`); the HTTP server is the binding's.
//! SPEC-NOTES "The A2A v1.0 bridge (seed 003, §18)".

use std::net::SocketAddr;
use std::time::Duration;

use a2acp_core::address::{Address, A2A_DOMAIN};
use serde_json::Value;

/// Bytes of one request body read at most (a larger one is refused with 413 before it
/// is read whole).
pub const MAX_BODY: usize = 1024 * 1024;
/// Time to send a request's head, from the connection's start or the previous request.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to send a request's body once its head arrived.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once, in all; the next waits for one to close.
pub const MAX_CONNECTIONS: usize = 64;
/// Streams (`SendStreamingMessage`, `SubscribeToTask`) open at once, in all.
pub const MAX_STREAMS: usize = 32;
/// Streams open at once per client.
pub const MAX_STREAMS_PER_CLIENT: usize = 8;
/// Events waiting for a slow stream reader before its stream is closed.
pub const STREAM_BUFFER: usize = 64;
/// How long one stream stays open at most (a client subscribes again after it).
pub const STREAM_MAX: Duration = Duration::from_secs(30 * 60);
/// How long a blocking `SendMessage` (no `configuration.returnImmediately`) is held at
/// most while its task is neither terminal nor interrupted (A2A v1.0 §3.2.2); then the
/// task is answered as it stands (`TASK_STATE_WORKING`, its status message saying what
/// it waits for) and the client goes on with `GetTask` or `SubscribeToTask`. Under
/// [`CALL_TIMEOUT`], and under the read timeouts of the SDK's and the TCK's clients.
pub const BLOCKING_WAIT: Duration = Duration::from_secs(10);
/// Time the agent loop has to answer one call before the listener answers 503 (a
/// blocking `SendMessage` included).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// `--a2a-listen` and its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct A2aOptions {
    /// Where to listen (`127.0.0.1:7410`).
    pub listen: String,
    /// The bearer token clients must present; `None`: none, loopback only.
    pub token: Option<String>,
    /// The listener's limits.
    pub limits: A2aLimits,
}

/// What one A2A client may cost the listener (defaults: the constants above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct A2aLimits {
    /// [`MAX_BODY`].
    pub max_body: usize,
    /// [`HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// [`BODY_TIMEOUT`].
    pub body_timeout: Duration,
    /// [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// [`MAX_STREAMS`].
    pub max_streams: usize,
    /// [`MAX_STREAMS_PER_CLIENT`].
    pub max_streams_per_client: usize,
    /// [`STREAM_MAX`].
    pub stream_max: Duration,
}

impl Default for A2aLimits {
    fn default() -> Self {
        A2aLimits {
            max_body: MAX_BODY,
            header_timeout: HEADER_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            max_streams: MAX_STREAMS,
            max_streams_per_client: MAX_STREAMS_PER_CLIENT,
            stream_max: STREAM_MAX,
        }
    }
}

/// Why the listener cannot start as asked.
pub fn check_listen(addr: &SocketAddr, token: Option<&str>) -> Result<(), String> {
    if token.is_none() && !addr.ip().is_loopback() {
        return Err(format!(
            "--a2a-listen {addr}: a non-loopback address needs --a2a-token-file (clients then present it as a bearer token, and the agent card says so)"
        ));
    }
    if token.is_some_and(|t| t.len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err("the A2A token must be at least 16 characters, with no spaces".into());
    }
    Ok(())
}

/// Reads the token file (its first line).
pub fn read_token(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text.lines().next().unwrap_or("").trim().to_string())
}

/// The A2A peer a request is from, by its `Authorization` header: with a token
/// configured, the token's holder (`agent:a2a-bearer@a2a.invalid`) or nobody (401); with
/// none, every (loopback) client is `agent:a2a-local@a2a.invalid`
/// ([`a2acp_core::bridge::a2a::ANONYMOUS_CLIENT`]; the core makes each of its contexts a peer
/// of its own). The tokens are
/// compared in constant time.
pub fn client_for(authorization: Option<&[u8]>, token: Option<&str>) -> Option<Address> {
    let name = match token {
        None => a2acp_core::bridge::a2a::ANONYMOUS_CLIENT,
        Some(t) => {
            let given = authorization?.strip_prefix(b"Bearer ")?;
            if !constant_time_eq(given, t.as_bytes()) {
                return None;
            }
            "a2a-bearer"
        }
    };
    Address::new(name, A2A_DOMAIN).ok()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// One JSON-RPC request of an A2A client, for the agent loop.
#[derive(Debug, Clone)]
pub struct A2aCall {
    /// Who sent it ([`client_for`]).
    pub client: Address,
    /// The request body.
    pub body: Vec<u8>,
}

/// The agent loop's answer.
#[derive(Debug)]
pub struct A2aAnswer {
    /// The JSON-RPC response (the first event of a stream).
    pub response: Value,
    /// The stream's further events (`StreamResponse` results), closed when the task is
    /// terminal or interrupted; `None`: no stream, or it ended with its first event.
    pub events: Option<flume::Receiver<Value>>,
    /// Whether the method was a streaming one (answered as Server-Sent Events).
    pub streaming: bool,
}

/// Whether a JSON-RPC body names a streaming method (read before the agent answers, to
/// count the stream against the caps).
pub fn is_streaming(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).ok().is_some_and(|v| {
        matches!(
            v.get("method").and_then(Value::as_str),
            Some("SendStreamingMessage" | "SubscribeToTask")
        )
    })
}

/// One Server-Sent Event carrying a JSON-RPC response.
pub fn sse_event(response: &Value) -> Vec<u8> {
    format!("data: {response}\n\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_from_the_token_holder_or_nobody() {
        let t = Some("0123456789abcdef");
        assert_eq!(
            client_for(Some(b"Bearer 0123456789abcdef"), t)
                .unwrap()
                .as_str(),
            "agent:a2a-bearer@a2a.invalid"
        );
        assert!(client_for(Some(b"Bearer 0123456789abcdeX"), t).is_none());
        assert!(client_for(Some(b"bearer 0123456789abcdef"), t).is_none());
        assert!(client_for(None, t).is_none());
        assert!(client_for(Some(b"Bearer 0123456789abcde"), t).is_none());
        assert_eq!(
            client_for(None, None).unwrap().as_str(),
            "agent:a2a-local@a2a.invalid"
        );
    }

    #[test]
    fn only_loopback_goes_without_a_token() {
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7410".parse().unwrap();
        assert!(check_listen(&lo, None).is_ok());
        assert!(check_listen(&any, None).is_err());
        assert!(check_listen(&any, Some("0123456789abcdef")).is_ok());
        assert!(check_listen(&any, Some("short")).is_err());
    }

    #[test]
    fn streaming_methods_are_told_apart() {
        assert!(is_streaming(br#"{"method":"SubscribeToTask"}"#));
        assert!(is_streaming(br#"{"method":"SendStreamingMessage"}"#));
        assert!(!is_streaming(br#"{"method":"SendMessage"}"#));
        assert!(!is_streaming(b"nope"));
    }
}
