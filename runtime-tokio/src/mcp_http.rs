//! `a2acp mcp --listen ADDR`: the MCP bridge ([`crate::mcp`]) over the streamable HTTP
//! transport (MCP 2025-11-25, `POST`/`GET`/`DELETE` on one endpoint, `/mcp`), for hosts
//! that reach servers over HTTP rather than by starting a process.
//!
//! The transport is the official SDK's (`rmcp`'s `StreamableHttpService`: sessions,
//! server-sent events for requests the bridge makes of the host — elicitation — and for
//! notifications). What is ours is the door in front of it, and it treats every
//! connection as hostile:
//!
//! - **Who may come in.** Bound to a loopback address, anyone on the machine who can
//!   reach the port (as with the control socket's file mode, the person's own account is
//!   the boundary); any other address needs `--token-file`, and then every request
//!   carries `Authorization: Bearer <token>` (compared in constant time; 401 otherwise).
//!   On loopback the `Host` header must name the loopback (a web page that rebinds its
//!   DNS name to 127.0.0.1 is refused), and a request carrying an `Origin` header — a
//!   browser's — is refused in every mode: MCP hosts are not web pages.
//! - **Bounded.** The request head within [`McpHttpLimits::header_timeout`], the body
//!   within [`McpHttpLimits::body_timeout`] (408) and at most
//!   [`McpHttpLimits::max_body`] bytes (413, refused by its `Content-Length` or as it
//!   passes the cap); at most [`McpHttpLimits::max_connections`] connections (the next
//!   waits in the kernel's backlog) and [`McpHttpLimits::max_sessions`] sessions (429); a
//!   session that says nothing for [`McpHttpLimits::session_idle`] is closed, one that
//!   does not initialize within [`McpHttpLimits::init_timeout`] too. Each session's watch
//!   on prompts and threads ends with it.
//!
//! The consent rules are those of the stdio bridge: the transport changes how the host
//! reaches the bridge, never what the bridge lets through.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tower_service::Service;

use crate::mcp::{Bridge, McpOptions};

/// The one path the transport is served at.
pub const MCP_PATH: &str = "/mcp";

/// The header naming a session (MCP streamable HTTP).
const SESSION_HEADER: &str = "mcp-session-id";

type Body = BoxBody<Bytes, Infallible>;

/// The door's limits (SPEC-NOTES "The MCP bridge over streamable HTTP").
#[derive(Debug, Clone, Copy)]
pub struct McpHttpLimits {
    /// Largest request body.
    pub max_body: usize,
    /// The request head must arrive within this.
    pub header_timeout: Duration,
    /// The body must arrive within this once the head has.
    pub body_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Sessions open at once.
    pub max_sessions: usize,
    /// A session with no request for this long is closed.
    pub session_idle: Duration,
    /// A new session must send `initialize` within this.
    pub init_timeout: Duration,
}

impl Default for McpHttpLimits {
    fn default() -> Self {
        McpHttpLimits {
            max_body: 1024 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            max_connections: 32,
            max_sessions: 16,
            session_idle: Duration::from_secs(300),
            init_timeout: Duration::from_secs(10),
        }
    }
}

/// Options of `a2acp mcp --listen`.
#[derive(Debug, Clone)]
pub struct McpHttpOptions {
    /// The bridge behind the transport.
    pub bridge: McpOptions,
    /// The bearer token every request must carry (required off loopback).
    pub token: Option<String>,
    /// The door's limits.
    pub limits: McpHttpLimits,
}

/// Binds `listen`, refusing a non-loopback address without a token.
pub fn bind(listen: &str, token: Option<&str>) -> Result<TcpListener, String> {
    use std::net::ToSocketAddrs;
    let addr = listen
        .to_socket_addrs()
        .map_err(|e| format!("--listen {listen}: {e}"))?
        .next()
        .ok_or_else(|| format!("--listen {listen}: no address"))?;
    a2acp_runtime::a2a::check_listen(&addr, token).map_err(|e| {
        if token.is_none() {
            format!("--listen {addr}: a non-loopback address needs --token-file (hosts then send it as a bearer token)")
        } else {
            e.replace("A2A token", "MCP token")
        }
    })?;
    let l = std::net::TcpListener::bind(addr).map_err(|e| format!("--listen {addr}: {e}"))?;
    l.set_nonblocking(true)
        .and_then(|()| TcpListener::from_std(l))
        .map_err(|e| format!("--listen {addr}: {e}"))
}

struct Door {
    token: Option<String>,
    limits: McpHttpLimits,
    sessions: Arc<LocalSessionManager>,
    mcp: StreamableHttpService<Bridge, LocalSessionManager>,
    /// Held while a request that may open a session is answered, so the cap is exact.
    opening: tokio::sync::Mutex<()>,
}

/// Serves MCP hosts on `listener` until the process ends.
pub async fn serve(listener: TcpListener, options: McpHttpOptions) {
    let mut session_config = SessionConfig::default();
    session_config.keep_alive = Some(options.limits.session_idle);
    session_config.init_timeout = Some(options.limits.init_timeout);
    let mut manager = LocalSessionManager::default();
    manager.session_config = session_config;
    let sessions = Arc::new(manager);
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(options.limits.max_body)
        .enforce_origin_validation();
    if options.token.is_some() {
        // Off loopback the host's name is the operator's; the token keeps strangers out.
        config = config.disable_allowed_hosts();
    }
    let bridge = options.bridge.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(Bridge::new(bridge.clone())),
        sessions.clone(),
        config,
    );
    let door = Arc::new(Door {
        token: options.token,
        limits: options.limits,
        sessions,
        mcp,
        opening: tokio::sync::Mutex::new(()),
    });
    let gate = a2acp_runtime::http_door::Door {
        name: "mcp",
        max_connections: options.limits.max_connections,
        header_timeout: options.limits.header_timeout,
        max_per_source: None,
    };
    a2acp_runtime::http_door::serve(
        listener,
        gate,
        || true,
        move |req| {
            let door = door.clone();
            async move { door.handle(req).await }
        },
    )
    .await;
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{text}\n"))).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

impl Door {
    async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        let authorization = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
        if a2acp_runtime::a2a::client_for(authorization, self.token.as_deref()).is_none() {
            let mut r = plain(StatusCode::UNAUTHORIZED, "a bearer token is required");
            r.headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
        if req.uri().path() != MCP_PATH {
            return plain(StatusCode::NOT_FOUND, "the MCP endpoint is /mcp");
        }
        let opens_session =
            req.method() == Method::POST && !req.headers().contains_key(SESSION_HEADER);
        let (parts, body) = req.into_parts();
        let l = &self.limits;
        let body = match a2acp_runtime::http_door::read_body(
            &parts.headers,
            body,
            l.max_body,
            l.body_timeout,
        )
        .await
        {
            Ok(b) => b,
            Err(e) => return plain(e.status(), &e.to_string()),
        };
        let req = Request::from_parts(parts, Full::new(body));
        let mut mcp = self.mcp.clone();
        if !opens_session {
            let deletes = req.method() == Method::DELETE;
            return match mcp.call(req).await {
                Ok(r) if deletes => session_ended(r),
                Ok(r) => r,
                Err(never) => match never {},
            };
        }
        let _opening = self.opening.lock().await;
        if self.sessions.sessions.read().await.len() >= self.limits.max_sessions {
            return plain(
                StatusCode::TOO_MANY_REQUESTS,
                "too many MCP sessions are open: close one (DELETE) or wait for an idle one to expire",
            );
        }
        match mcp.call(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }
}

/// The answer to a `DELETE` that ended a session: `200 OK`, as the official SDK's client
/// expects (it takes 200 and 204 as done, 405 as "termination not allowed", and logs
/// anything else as "Session termination failed"); the transport answers `202 Accepted`.
/// Any other answer (404 for an unknown session…) is passed on as it is.
fn session_ended(mut r: Response<Body>) -> Response<Body> {
    if r.status() == StatusCode::ACCEPTED {
        *r.status_mut() = StatusCode::OK;
    }
    r
}

/// The address a bound listener serves MCP at, as a host is told it.
pub fn endpoint(addr: SocketAddr) -> String {
    format!("http://{addr}{MCP_PATH}")
}
