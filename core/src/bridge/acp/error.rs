//! Why an ACP message was refused ([`AcpError`]), and the JSON-RPC error codes that say
//! so on the wire ([`code`]). The first failing check answers; a refused message is never
//! processed. SPEC-NOTES "ACP (seed 004)": the codes and the order of the checks.

use serde_json::{json, Value};

/// The JSON-RPC error codes of ACP: the five of JSON-RPC 2.0 and ACP's own, in the
/// range JSON-RPC leaves to servers (−32000 to −32099).
pub mod code {
    /// Not JSON, or nested deeper than allowed.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a JSON-RPC 2.0 object of ACP's shape (members, `id` rules).
    pub const INVALID_REQUEST: i64 = -32600;
    /// A method ACP does not define.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The body breaks its type's rules (a handoff without `completed`, …).
    pub const INVALID_PARAMS: i64 = -32602;
    /// This agent failed.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// One of the six identity headers is missing (`data.header` names it).
    pub const HEADER_MISSING: i64 = -32001;
    /// One of the six identity headers is malformed (`data.header` names it).
    pub const HEADER_MALFORMED: i64 = -32002;
    /// The signature is missing, malformed or does not verify.
    pub const BAD_SIGNATURE: i64 = -32003;
    /// No key is registered for the sender's `agent-id`.
    pub const UNKNOWN_AGENT: i64 = -32004;
    /// A substantive message before the handshake completed, or a handshake step out
    /// of order.
    pub const HANDSHAKE_REQUIRED: i64 = -32005;
    /// A message seen before (same id or same signature), or a timestamp outside the
    /// skew window.
    pub const REPLAY: i64 = -32006;
    /// Over the size or nesting bound.
    pub const TOO_LARGE: i64 = -32007;
    /// The request was not answered in time.
    pub const TIMEOUT: i64 = -32008;
    /// An encrypted body that does not open.
    pub const UNDECRYPTABLE: i64 = -32009;
    /// Declared layers that rule the message or the handshake out.
    pub const LAYERS: i64 = -32010;
    /// A response to no request outstanding.
    pub const UNKNOWN_REQUEST: i64 = -32011;
    /// Too many messages from this peer within the skew window.
    pub const RATE_LIMITED: i64 = -32012;
    /// This agent refuses the request (its limits, its user): `message` says why.
    pub const REFUSED: i64 = -32013;
}

/// The six identity headers (seed 004 §2.2), in the order they are checked.
pub const HEADERS: [&str; 6] = [
    "agent-id",
    "principal-id",
    "timestamp",
    "message-type",
    "trust-layer-version",
    "skill-layers-loaded",
];

/// Why a received ACP message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcpError {
    /// Not JSON, or nested deeper than allowed.
    #[error("not JSON: {0}")]
    Parse(String),
    /// Over the size bound (bytes).
    #[error("the message is {size} bytes, over the {max}-byte bound")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The bound.
        max: usize,
    },
    /// Nested deeper than the bound.
    #[error("the message nests deeper than {0} levels")]
    TooDeep(usize),
    /// Not a JSON-RPC 2.0 object of ACP's shape.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A method ACP does not define.
    #[error("no method `{0}`")]
    MethodNotFound(String),
    /// A header missing.
    #[error("missing header `{0}`")]
    HeaderMissing(&'static str),
    /// A header malformed.
    #[error("malformed header `{header}`: {why}")]
    HeaderMalformed {
        /// Which header.
        header: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// The body breaks its type's rules.
    #[error("invalid body: {0}")]
    InvalidBody(String),
    /// The signature is missing, malformed or does not verify.
    #[error("bad signature: {0}")]
    BadSignature(String),
    /// No key registered for this agent.
    #[error("no key is registered for agent `{0}`")]
    UnknownAgent(String),
    /// A substantive message before the handshake completed, or a step out of order.
    #[error("handshake required: {0}")]
    HandshakeRequired(String),
    /// A replay: `why` says which rule caught it.
    #[error("replay: {0}")]
    Replay(String),
    /// An encrypted body that does not open.
    #[error("the encrypted body does not open: {0}")]
    Undecryptable(String),
    /// Declared layers rule the message out.
    #[error("layers: {0}")]
    Layers(String),
    /// A response to no request outstanding.
    #[error("no request `{0}` is waiting for an answer")]
    UnknownRequest(String),
    /// Too many messages from this peer.
    #[error("too many messages from this agent: {0}")]
    RateLimited(String),
}

impl AcpError {
    /// The JSON-RPC error code that says so on the wire.
    pub fn code(&self) -> i64 {
        match self {
            AcpError::Parse(_) | AcpError::TooDeep(_) => code::PARSE_ERROR,
            AcpError::TooLarge { .. } => code::TOO_LARGE,
            AcpError::InvalidRequest(_) => code::INVALID_REQUEST,
            AcpError::MethodNotFound(_) => code::METHOD_NOT_FOUND,
            AcpError::HeaderMissing(_) => code::HEADER_MISSING,
            AcpError::HeaderMalformed { .. } => code::HEADER_MALFORMED,
            AcpError::InvalidBody(_) => code::INVALID_PARAMS,
            AcpError::BadSignature(_) => code::BAD_SIGNATURE,
            AcpError::UnknownAgent(_) => code::UNKNOWN_AGENT,
            AcpError::HandshakeRequired(_) => code::HANDSHAKE_REQUIRED,
            AcpError::Replay(_) => code::REPLAY,
            AcpError::Undecryptable(_) => code::UNDECRYPTABLE,
            AcpError::Layers(_) => code::LAYERS,
            AcpError::UnknownRequest(_) => code::UNKNOWN_REQUEST,
            AcpError::RateLimited(_) => code::RATE_LIMITED,
        }
    }

    /// The header this error names, if it is about one.
    pub fn header(&self) -> Option<&'static str> {
        match self {
            AcpError::HeaderMissing(h) | AcpError::HeaderMalformed { header: h, .. } => Some(h),
            _ => None,
        }
    }

    /// The JSON-RPC `error` object's `data` members this error adds (`header`).
    pub fn data(&self) -> Value {
        match self.header() {
            Some(h) => json!({ "header": h }),
            None => json!({}),
        }
    }
}
