//! The consent page (`agent run --web ADDR`): one self-contained page in the agent, for a
//! person to answer their prompts from a browser, a phone's included (spec §7.3, §8.2).
//!
//! The page calls the control socket's requests ([`crate::control::Request`], answered
//! by the same handler as `a2acp answer`), a few of them only ([`allowed`]); live
//! updates come as Server-Sent Events. This module holds what the listener decides —
//! who may call (the pairing code, sessions, the CSRF token, the `Host` header) — and
//! the page's files; [`serve`] is the HTTP server, run by both runtimes.
//! SPEC-NOTES "The consent page".

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::control::Request;

mod serve;
pub use serve::*;

#[cfg(test)]
mod tests;

/// The page (its CSRF token replaces `{{CSRF}}`).
pub const PAGE_HTML: &str = include_str!("page.html");
/// The pairing form, for a browser off loopback without a session.
pub const PAIR_HTML: &str = include_str!("pair.html");
/// The page's script.
pub const APP_JS: &str = include_str!("app.js");
/// The page's style.
pub const APP_CSS: &str = include_str!("app.css");

/// The headers every answer carries: no script or style but the page's own files, no
/// framing, no sniffing, no referrer, no caching.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Bytes of one request body at most.
pub const MAX_BODY: usize = 64 * 1024;
/// Time to send a request's head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to send a request's body once its head arrived.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once, in all.
pub const MAX_CONNECTIONS: usize = 32;
/// Connections open at once from one source address.
pub const MAX_PER_SOURCE: usize = 8;
/// Event streams open at once (a page holds one).
pub const MAX_STREAMS: usize = 4;
/// Events waiting for a slow stream reader before its stream is closed (the page
/// reconnects and reads the state afresh).
pub const STREAM_BUFFER: usize = 4;
/// How often a stream looks for a change of the state it shows.
pub const STREAM_POLL: Duration = Duration::from_millis(250);
/// How long one stream stays open at most (the browser reconnects by itself).
pub const STREAM_MAX: Duration = Duration::from_secs(30 * 60);
/// Sessions kept (paired browsers); the oldest goes when one more pairs.
pub const MAX_SESSIONS: usize = 16;
/// Wrong pairing codes accepted per [`PAIRING_WINDOW`]; then every attempt is refused
/// (429) until the window has passed.
pub const PAIRING_FAILURES: usize = 5;
/// See [`PAIRING_FAILURES`].
pub const PAIRING_WINDOW: Duration = Duration::from_secs(60);
/// The session cookie's name.
pub const SESSION_COOKIE: &str = "a2acp_session";
/// The header that carries the CSRF token of a state-changing request.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// `--web ADDR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebOptions {
    /// Where to listen (`127.0.0.1:7420`).
    pub listen: String,
}

/// The requests the page may make: reading what it shows, answering, and taking back what
/// the person shared in a thread; nothing else of the control socket (no permissions, no
/// memory, no keys) is reachable from a browser.
pub fn allowed(req: &Request) -> bool {
    matches!(
        req,
        Request::Prompts
            | Request::Threads
            | Request::Thread { .. }
            | Request::Notifications { .. }
            | Request::ReadNotifications { .. }
            | Request::Suggestions
            | Request::AcceptSuggestion { .. }
            | Request::DismissSuggestion { .. }
            | Request::Answer { .. }
            | Request::Retract { .. }
    )
}

/// Whether the listener needs pairing: any address but loopback.
pub fn needs_pairing(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

/// Whether a `Host` header names this listener: `localhost` or an IP address (never a
/// DNS name, which a rebinding attack controls), with the listener's port; a loopback
/// listener accepts loopback names only.
pub fn host_allowed(host: Option<&str>, listen: &SocketAddr) -> bool {
    let Some(host) = host else { return false };
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) if !n.is_empty() && !p.contains(']') => (n, p),
        _ => return false,
    };
    if port.parse::<u16>().ok() != Some(listen.port()) {
        return false;
    }
    let name = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    let ip = match name.parse::<std::net::IpAddr>() {
        Ok(ip) => ip,
        Err(_) if name.eq_ignore_ascii_case("localhost") => return true,
        Err(_) => return false,
    };
    if listen.ip().is_loopback() {
        ip.is_loopback()
    } else if listen.ip().is_unspecified() {
        true
    } else {
        ip == listen.ip()
    }
}

/// Equal byte strings, compared in time that depends on their length only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `n` random bytes as lower-case hex.
pub fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    let _ = getrandom::fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The pairing code as shown: four groups of four characters.
pub fn shown_code(code: &str) -> String {
    code.as_bytes()
        .chunks(4)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join("-")
}

/// Who may use the page: on loopback everyone (one CSRF token for the listener); off
/// loopback the browsers that entered the pairing code, each with its session and its
/// CSRF token.
#[derive(Debug)]
pub struct Access {
    /// The pairing code (`None`: loopback, no pairing).
    code: Option<String>,
    /// The CSRF token of a loopback listener.
    csrf: String,
    /// Session → its CSRF token, oldest first by creation.
    sessions: Mutex<Sessions>,
    /// When recent wrong codes were entered.
    failures: Mutex<VecDeque<Instant>>,
}

/// Session → (its order of creation, its CSRF token); and the last order given.
type Sessions = (BTreeMap<String, (u64, String)>, u64);

/// What a pairing attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pairing {
    /// The right code: this new session.
    Paired(String),
    /// A wrong code.
    Wrong,
    /// Too many wrong codes lately: not even compared.
    TooMany,
    /// This listener needs no pairing.
    NotNeeded,
}

impl Access {
    /// For a listener on `addr`: a pairing code when it is off loopback.
    pub fn new(addr: &SocketAddr) -> Self {
        Access {
            code: needs_pairing(addr).then(|| random_hex(8)),
            csrf: random_hex(16),
            sessions: Mutex::new((BTreeMap::new(), 0)),
            failures: Mutex::new(VecDeque::new()),
        }
    }

    /// The pairing code (16 hex digits, 64 bits), if the listener needs one.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The CSRF token of a request with this `Cookie` header, or `None` if it may not
    /// use the page (off loopback without a session).
    pub fn csrf_for(&self, cookie: Option<&str>) -> Option<String> {
        if self.code.is_none() {
            return Some(self.csrf.clone());
        }
        let s = session_of(cookie?)?;
        let m = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        m.0.iter()
            .find(|(k, _)| constant_time_eq(k.as_bytes(), s.as_bytes()))
            .map(|(_, (_, t))| t.clone())
    }

    /// Whether `token` is the CSRF token of a request with this `Cookie` header.
    pub fn csrf_ok(&self, cookie: Option<&str>, token: Option<&str>) -> bool {
        match (self.csrf_for(cookie), token) {
            (Some(want), Some(got)) => constant_time_eq(want.as_bytes(), got.as_bytes()),
            _ => false,
        }
    }

    /// An attempt at pairing with `given` at `now`.
    pub fn pair(&self, given: &str, now: Instant) -> Pairing {
        let Some(code) = &self.code else {
            return Pairing::NotNeeded;
        };
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        while f
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= PAIRING_WINDOW)
        {
            f.pop_front();
        }
        if f.len() >= PAIRING_FAILURES {
            return Pairing::TooMany;
        }
        let given: String = given
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect();
        if !constant_time_eq(given.as_bytes(), code.as_bytes()) {
            f.push_back(now);
            return Pairing::Wrong;
        }
        drop(f);
        let session = random_hex(16);
        let mut m = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        m.1 += 1;
        let n = m.1;
        m.0.insert(session.clone(), (n, random_hex(16)));
        if m.0.len() > MAX_SESSIONS {
            if let Some(oldest) =
                m.0.iter()
                    .min_by_key(|(_, (n, _))| *n)
                    .map(|(k, _)| k.clone())
            {
                m.0.remove(&oldest);
            }
        }
        Pairing::Paired(session)
    }
}

/// The session in a `Cookie` header.
fn session_of(cookie: &str) -> Option<&str> {
    cookie.split(';').find_map(|c| {
        let (k, v) = c.trim().split_once('=')?;
        (k == SESSION_COOKIE).then_some(v)
    })
}

/// The value of `name` in an `application/x-www-form-urlencoded` body (`+` and `%XX`
/// decoded).
pub fn form_value(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    text.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| {
            let v = v.replace('+', " ");
            let b = v.as_bytes();
            let mut out = Vec::with_capacity(b.len());
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'%' && i + 2 < b.len() {
                    let hex = |c: u8| (c as char).to_digit(16);
                    if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                }
                out.push(b[i]);
                i += 1;
            }
            String::from_utf8_lossy(&out).into_owned()
        })
    })
}
