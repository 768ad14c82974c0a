//! Fetching a domain's discovery document ([`a2acp_core::discovery`]) over HTTPS, on any
//! executor: the binding's TCP connect and timer ([`Net`]), the relay link's own TLS
//! client ([`ClientTls`]: the web PKI roots, plus a private CA with `--ca`), and a small
//! HTTP/1.1 `GET` of this module — one request, `Connection: close`, so nothing of HTTP
//! is needed beyond a status line, a few headers and a body.
//!
//! Bounded in every way a remote server could abuse: the TCP connect within
//! [`FetchLimits::connect`], the whole exchange (TLS handshake, request, answer) within
//! [`FetchLimits::total`], the response head at most [`MAX_HEAD`] bytes, the body at
//! most [`MAX_DOCUMENT_BYTES`] (the rest never read). A redirect is refused (the document
//! must be where the domain's relay serves it), as is any status but 200.

use std::io;
use std::time::Duration;

use a2acp_core::discovery::{DiscoveryDocument, DiscoveryError, MAX_DOCUMENT_BYTES};
use futures_util::io::{AsyncReadExt, AsyncWriteExt};

use super::Net;
use crate::tls::ClientTls;

/// Largest response head read.
pub const MAX_HEAD: usize = 8192;

/// The deadlines of one fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    /// The TCP connect.
    pub connect: Duration,
    /// Everything, from the connect to the last byte of the body.
    pub total: Duration,
}

impl Default for FetchLimits {
    fn default() -> Self {
        FetchLimits {
            connect: Duration::from_secs(5),
            total: Duration::from_secs(10),
        }
    }
}

/// Why a document could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL is not `https://HOST[:PORT]/PATH`.
    #[error("`{0}` is not an https:// URL")]
    Url(String),
    /// The TCP connect failed.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// host:port.
        addr: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The TLS handshake failed (an untrusted certificate among others).
    #[error("TLS with {addr} failed: {source}")]
    Tls {
        /// host:port.
        addr: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Reading or writing failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A deadline passed.
    #[error("no answer from {0} in time")]
    Timeout(String),
    /// A redirect (refused).
    #[error("the server answered {status} (a redirect, which is not followed)")]
    Redirect {
        /// The status.
        status: u16,
    },
    /// Another status than 200.
    #[error("the server answered {0}")]
    Status(u16),
    /// Not an HTTP/1.x answer, or one this client does not read.
    #[error("the server's answer is not valid HTTP: {0}")]
    BadResponse(&'static str),
    /// The body is longer than [`MAX_DOCUMENT_BYTES`].
    #[error("the document is larger than {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge,
    /// The document is invalid.
    #[error(transparent)]
    Document(#[from] DiscoveryError),
}

/// `https://HOST[:PORT]/PATH` as host, port (443 by default) and path.
pub fn https_url(url: &str) -> Result<(String, u16, String), FetchError> {
    let bad = || FetchError::Url(url.chars().take(512).collect());
    let rest = url.strip_prefix("https://").ok_or_else(bad)?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(bad)?;
        match after.strip_prefix(':') {
            Some(p) => (h, p.parse().map_err(|_| bad())?),
            None if after.is_empty() => (h, 443),
            None => return Err(bad()),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().map_err(|_| bad())?),
            None => (hostport, 443),
        }
    };
    if host.is_empty() || !path.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    Ok((host.to_string(), port, path.to_string()))
}

/// Fetches the document at `url` (`https://…/.well-known/a2acp`) and checks it as
/// `domain`'s ([`DiscoveryDocument::parse`]).
pub async fn fetch_document<N: Net>(
    net: &N,
    tls: &ClientTls,
    url: &str,
    domain: &str,
    limits: FetchLimits,
) -> Result<DiscoveryDocument, FetchError> {
    let (host, port, path) = https_url(url)?;
    let addr = format!("{host}:{port}");
    let exchange = async {
        let connect = async {
            net.connect(&host, port)
                .await
                .map_err(|source| FetchError::Connect {
                    addr: addr.clone(),
                    source,
                })
        };
        let timeout = async {
            net.sleep(limits.connect).await;
            Err(FetchError::Timeout(addr.clone()))
        };
        let tcp = crate::race::race(connect, timeout).await?;
        let mut s = tls
            .connect(&host, tcp)
            .await
            .map_err(|source| FetchError::Tls {
                addr: addr.clone(),
                source,
            })?;
        let host_header = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {host_header}:{port}\r\nUser-Agent: a2acp/{}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
            env!("CARGO_PKG_VERSION")
        );
        s.write_all(req.as_bytes()).await?;
        s.flush().await?;
        let body = read_response(&mut s).await?;
        Ok::<_, FetchError>(body)
    };
    let deadline = async {
        net.sleep(limits.total).await;
        Err(FetchError::Timeout(addr.clone()))
    };
    let body = crate::race::race(exchange, deadline).await?;
    Ok(DiscoveryDocument::parse(domain, &body)?)
}

/// Reads an HTTP/1.x response: its body if the status is 200, within the limits.
pub async fn read_response<S: futures_util::io::AsyncRead + Unpin>(
    s: &mut S,
) -> Result<Vec<u8>, FetchError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(FetchError::BadResponse("response head too long"));
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(FetchError::BadResponse("connection closed before the head"));
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    };
    let head = String::from_utf8_lossy(buf.get(..head_end).unwrap_or_default()).into_owned();
    let mut rest = buf.get(head_end + 4..).unwrap_or_default().to_vec();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.split(' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(FetchError::BadResponse("not an HTTP/1.x status line"));
    }
    let status: u16 = parts
        .next()
        .and_then(|c| c.parse().ok())
        .ok_or(FetchError::BadResponse("no status code"))?;
    if (300..400).contains(&status) {
        return Err(FetchError::Redirect { status });
    }
    if status != 200 {
        return Err(FetchError::Status(status));
    }
    let mut length: Option<usize> = None;
    let mut chunked = false;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("content-length") {
            let n: usize = v
                .parse()
                .map_err(|_| FetchError::BadResponse("bad content-length"))?;
            if length.is_some_and(|m| m != n) {
                return Err(FetchError::BadResponse("two different content-lengths"));
            }
            length = Some(n);
        } else if k.eq_ignore_ascii_case("transfer-encoding") {
            if !v.eq_ignore_ascii_case("chunked") {
                return Err(FetchError::BadResponse("unsupported transfer-encoding"));
            }
            chunked = true;
        }
    }
    if length.is_some_and(|n| n > MAX_DOCUMENT_BYTES) {
        return Err(FetchError::TooLarge);
    }
    // The raw body: up to the length, or the close (a chunked body's framing is at most a
    // few bytes per chunk: allow twice the cap before decoding).
    let cap = if chunked {
        2 * MAX_DOCUMENT_BYTES + 1024
    } else {
        length.unwrap_or(MAX_DOCUMENT_BYTES)
    };
    loop {
        if rest.len() > cap || length.is_some_and(|n| rest.len() >= n) {
            break;
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        rest.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    if chunked {
        return dechunk(&rest);
    }
    match length {
        Some(n) if rest.len() < n => Err(FetchError::BadResponse("body shorter than announced")),
        Some(n) => {
            rest.truncate(n);
            Ok(rest)
        }
        None if rest.len() > MAX_DOCUMENT_BYTES => Err(FetchError::TooLarge),
        None => Ok(rest),
    }
}

/// Decodes a chunked body (RFC 9112 §7.1), refusing one past [`MAX_DOCUMENT_BYTES`].
fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, FetchError> {
    const BAD: FetchError = FetchError::BadResponse("bad chunked body");
    let mut out = Vec::new();
    loop {
        let i = b.windows(2).position(|w| w == b"\r\n").ok_or(BAD)?;
        let line = std::str::from_utf8(b.get(..i).unwrap_or_default()).map_err(|_| BAD)?;
        let size = line.split(';').next().unwrap_or("").trim();
        let n = usize::from_str_radix(size, 16).map_err(|_| BAD)?;
        b = b.get(i + 2..).unwrap_or_default();
        if n == 0 {
            return Ok(out);
        }
        if out.len().saturating_add(n) > MAX_DOCUMENT_BYTES {
            return Err(FetchError::TooLarge);
        }
        out.extend_from_slice(b.get(..n).ok_or(BAD)?);
        b = b
            .get(n..)
            .unwrap_or_default()
            .strip_prefix(b"\r\n")
            .ok_or(BAD)?;
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    fn read(raw: &[u8]) -> Result<Vec<u8>, FetchError> {
        let mut c = futures_util::io::Cursor::new(raw.to_vec());
        read_response(&mut c).now_or_never().unwrap()
    }

    #[test]
    fn responses() {
        assert_eq!(
            read(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}junk").unwrap(),
            b"{}"
        );
        assert_eq!(
            read(b"HTTP/1.0 200 OK\r\n\r\n{\"a\":1}").unwrap(),
            b"{\"a\":1}"
        );
        assert_eq!(
            read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n1;x=y\r\n \r\n0\r\n\r\n")
                .unwrap(),
            b"{} "
        );
        assert!(matches!(
            read(b"HTTP/1.1 301 Moved\r\nLocation: https://evil/\r\n\r\n"),
            Err(FetchError::Redirect { status: 301 })
        ));
        assert!(matches!(
            read(b"HTTP/1.1 404 Not Found\r\n\r\n"),
            Err(FetchError::Status(404))
        ));
        assert!(matches!(
            read(b"SSH-2.0-x\r\n\r\n"),
            Err(FetchError::BadResponse(_))
        ));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\n"),
            Err(FetchError::BadResponse(_))
        ));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\ncontent-length: 99999999\r\n\r\n"),
            Err(FetchError::TooLarge)
        ));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}"),
            Err(FetchError::BadResponse(_))
        ));
        let mut long = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        long.extend(std::iter::repeat_n(b' ', MAX_DOCUMENT_BYTES + 1));
        assert!(matches!(read(&long), Err(FetchError::TooLarge)));
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        head.extend(std::iter::repeat_n(b'x', MAX_HEAD + 10));
        assert!(matches!(read(&head), Err(FetchError::BadResponse(_))));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
            Err(FetchError::BadResponse(_))
        ));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
            Err(FetchError::BadResponse(_))
        ));
    }

    #[test]
    fn urls() {
        assert_eq!(
            https_url("https://127.0.0.1:7448/.well-known/a2acp").unwrap(),
            ("127.0.0.1".into(), 7448, "/.well-known/a2acp".into())
        );
        assert_eq!(
            https_url("https://b.example").unwrap(),
            ("b.example".into(), 443, "/".into())
        );
        assert_eq!(
            https_url("https://[::1]:9/x").unwrap(),
            ("::1".into(), 9, "/x".into())
        );
        assert!(https_url("http://b.example/").is_err());
        assert!(https_url("https://:1/").is_err());
        assert!(https_url("https://b.example:x/").is_err());
    }
}
