//! The Agentic Protocol listener on tokio (`agent run --agentic-listen`, seed 002 §9.1):
//! HTTP/1.1 with hyper through the agent's shared HTTP door (a cap on connections, a
//! deadline on the request head, a body read whole within a cap and a deadline, refusals
//! that close their connection gently). Each request is answered by the
//! executor-independent routes of [`a2acp_runtime::agentic::routes`] over the service's
//! SQLite store, on a blocking thread. A missing or unknown bearer token is 401 when
//! tokens are configured.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use a2acp_runtime::agentic::routes::{self, Call, Reply};
use a2acp_runtime::agentic::store::AgenticStore;
use a2acp_runtime::agentic::{check_listen, AgenticOptions};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Binds the listener, refusing a non-loopback address without tokens.
pub fn bind(opts: &AgenticOptions) -> Result<TcpListener, String> {
    use std::net::ToSocketAddrs;
    let addr = opts
        .listen
        .to_socket_addrs()
        .map_err(|e| format!("--agentic-listen {}: {e}", opts.listen))?
        .next()
        .ok_or_else(|| format!("--agentic-listen {}: no address", opts.listen))?;
    check_listen(&addr, &opts.tokens)?;
    let l =
        std::net::TcpListener::bind(addr).map_err(|e| format!("--agentic-listen {addr}: {e}"))?;
    l.set_nonblocking(true)
        .and_then(|()| TcpListener::from_std(l))
        .map_err(|e| format!("--agentic-listen {addr}: {e}"))
}

/// Opens the store of `opts`.
pub fn open_store(opts: &AgenticOptions) -> Result<Arc<AgenticStore>, String> {
    AgenticStore::open(&opts.db)
        .map(Arc::new)
        .map_err(|e| format!("{}: {e}", opts.db.display()))
}

/// Binds, opens the store and serves in a task: the address it listens on and the task.
pub fn start(opts: AgenticOptions) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), String> {
    let store = open_store(&opts)?;
    start_with(opts, store)
}

/// [`start`] over a store already open.
pub fn start_with(
    opts: AgenticOptions,
    store: Arc<AgenticStore>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), String> {
    let l = bind(&opts)?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    Ok((addr, tokio::spawn(serve(l, opts, store))))
}

/// Serves clients on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, opts: AgenticOptions, store: Arc<AgenticStore>) {
    let door = a2acp_runtime::http_door::Door {
        name: "agentic",
        max_connections: opts.limits.max_connections,
        header_timeout: opts.limits.header_timeout,
        max_per_source: Some(opts.limits.max_per_source),
    };
    let opts = Arc::new(opts);
    a2acp_runtime::http_door::serve(
        listener,
        door,
        || true,
        move |req| handle(store.clone(), opts.clone(), req),
    )
    .await;
}

fn reply(r: Reply) -> Response<Body> {
    let (bytes, kind) = match r.ndjson {
        Some(text) => (Bytes::from(text), "application/x-ndjson"),
        None => (Bytes::from(r.body.to_string()), "application/json"),
    };
    let mut resp = Response::new(Full::new(bytes).boxed_unsync());
    *resp.status_mut() =
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    if r.status == 401 {
        resp.headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}

async fn handle(
    store: Arc<AgenticStore>,
    opts: Arc<AgenticOptions>,
    req: Request<Incoming>,
) -> Response<Body> {
    let Some(access) = opts
        .tokens
        .access(req.headers().get(AUTHORIZATION).map(|v| v.as_bytes()))
    else {
        return reply(Reply::refusal(
            401,
            "unauthenticated",
            "present a bearer token this service knows (Authorization: Bearer …)",
        ));
    };
    let (parts, body) = req.into_parts();
    let max_body = if parts.uri.path() == "/v1/import" {
        opts.limits.max_import
    } else {
        opts.limits.max_body
    };
    let bytes = match a2acp_runtime::http_door::read_body(
        &parts.headers,
        body,
        max_body,
        opts.limits.body_timeout,
    )
    .await
    {
        Ok(b) => b,
        Err(e) => {
            let status = e.status().as_u16();
            let code = match status {
                413 => "payload_too_large",
                408 => "request_timeout",
                _ => "invalid_request",
            };
            return reply(Reply::refusal(status, code, &e.to_string()));
        }
    };
    let method = parts.method.as_str().to_string();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().map(str::to_string);
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let answered = tokio::task::spawn_blocking(move || {
        let call = Call {
            method: &method,
            path: &path,
            query: query.as_deref(),
            content_type: content_type.as_deref(),
            body: &bytes,
        };
        routes::handle(
            &store,
            &access,
            &call,
            a2acp_runtime::now(),
            env!("CARGO_PKG_VERSION"),
        )
    })
    .await;
    match answered {
        Ok(r) => reply(r),
        Err(_) => reply(Reply::refusal(500, "internal_error", "the request failed")),
    }
}
