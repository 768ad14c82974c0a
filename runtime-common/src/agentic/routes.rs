//! The routes of the service (seed 002 §9.1, and the few it adds): a request's method,
//! path, query, content type and body in, a status and a JSON body out. Every refusal is
//! the protocol's error body (`{"error": code, "message": …}`) with a 4xx (or 501 for a
//! missing capability); only a failing store answers 500.

use a2acp_core::bridge::agentic::{conformance, digest, Access, AgenticError};
use a2acp_core::memory::Package;
use a2acp_core::Timestamp;
use serde_json::{json, Value};

use super::store::{AgenticStore, ServiceError};
use super::MAX_DEPTH;

/// A request as the listener read it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// `GET`, `POST`, …
    pub method: &'a str,
    /// The path (`/v1/projects/p/packages`), still percent-encoded.
    pub path: &'a str,
    /// The query string, if any.
    pub query: Option<&'a str>,
    /// The `Content-Type` header, if any.
    pub content_type: Option<&'a str>,
    /// The body.
    pub body: &'a [u8],
}

/// What to answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: Value,
    /// An NDJSON body instead (`GET /v1/export`), served as `application/x-ndjson`.
    pub ndjson: Option<String>,
}

impl Reply {
    fn ok(body: Value) -> Reply {
        Reply {
            status: 200,
            body,
            ndjson: None,
        }
    }

    /// A refusal with the protocol's error body.
    pub fn error(e: &AgenticError) -> Reply {
        Reply {
            status: e.status(),
            body: e.body(),
            ndjson: None,
        }
    }

    /// A refusal the listener makes itself (`status`, `code`, `message`).
    pub fn refusal(status: u16, code: &str, message: &str) -> Reply {
        Reply {
            status,
            body: json!({"error": code, "message": message}),
            ndjson: None,
        }
    }
}

fn answer(r: Result<Value, ServiceError>) -> Reply {
    match r {
        Ok(v) => Reply::ok(v),
        Err(ServiceError::Refused(e)) => Reply::error(&e),
        Err(ServiceError::UnsupportedMedia) => Reply::refusal(
            415,
            "unsupported_media_type",
            "request bodies are Content-Type: application/json (§9.1)",
        ),
        Err(ServiceError::Storage(m)) => {
            tracing::warn!("agentic store: {m}");
            Reply::refusal(500, "storage_error", "the store failed; try again")
        }
    }
}

/// The packages and content hashes of a list.
fn packages(list: &[Package]) -> Value {
    Value::Array(
        list.iter()
            .map(|p| Value::Object(p.body().clone()))
            .collect(),
    )
}

/// A package as one operation answers it: the package object and its content hash.
fn with_hash(p: &Package) -> Value {
    json!({"package": Value::Object(p.body().clone()), "content_hash": p.content_hash()})
}

/// Answers one request.
pub fn handle(
    store: &AgenticStore,
    access: &Access,
    call: &Call<'_>,
    now: Timestamp,
    version: &str,
) -> Reply {
    let segments: Vec<String> = match call
        .path
        .strip_prefix('/')
        .unwrap_or(call.path)
        .split('/')
        .map(percent_decode)
        .collect::<Option<Vec<_>>>()
    {
        Some(s) => s,
        None => return Reply::refusal(400, "invalid_request", "the path is not UTF-8"),
    };
    let query = match parse_query(call.query.unwrap_or("")) {
        Some(q) => q,
        None => return Reply::refusal(400, "invalid_request", "the query is not UTF-8"),
    };
    let q = Query(query);
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    let m = call.method;
    let body = || read_json(call);
    let result: Result<Value, ServiceError> = match (m, seg.as_slice()) {
        ("GET", ["v1", "conformance"]) => Ok(conformance::descriptor(
            conformance::Capabilities {
                keyword_search: store.has_search(),
            },
            version,
        )),
        ("GET", ["v1", "projects"]) => store
            .projects(access)
            .map(|ps| json!({ "projects": ps })),
        ("GET", ["v1", "projects", p]) => store
            .project(access, p)
            .map(|p| json!({ "project": p })),
        ("PUT", ["v1", "projects", p]) => body().and_then(|b| {
            let name = match b.get("name") {
                None | Some(Value::Null) => p.to_string(),
                Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= 200 => s.clone(),
                Some(_) => {
                    return Err(
                        AgenticError::InvalidRequest("`name` is 1–200 characters".into()).into(),
                    )
                }
            };
            store
                .put_project(access, p, &name, now)
                .map(|p| json!({ "project": p }))
        }),
        ("POST", ["v1", "projects", p, "archive"]) => store
            .set_archived(access, p, true, now)
            .map(|p| json!({ "project": p })),
        ("POST", ["v1", "projects", p, "unarchive"]) => store
            .set_archived(access, p, false, now)
            .map(|p| json!({ "project": p })),
        ("POST", ["v1", "projects", p, "packages"]) => {
            return match body().and_then(|b| store.deposit(access, p, b, now)) {
                Ok(d) => {
                    let mut v = with_hash(&d.package);
                    v["created"] = d.created.into();
                    if let Some(s) = d.session {
                        v["session"] = json!({"session_id": s.session_id, "callsign": s.callsign});
                    }
                    Reply {
                        status: if d.created { 201 } else { 200 },
                        body: v,
                        ndjson: None,
                    }
                }
                Err(e) => answer(Err(e)),
            }
        }
        ("GET", ["v1", "projects", p, "packages"]) => pull(store, access, p, &q),
        ("GET", ["v1", "projects", p, "awaiting_review"]) => store
            .latest(access, p, super::store::MAX_LIMIT, Some("awaiting_review"))
            .map(|l| json!({"mode": "latest", "status": "awaiting_review", "packages": packages(&l)})),
        ("GET", ["v1", "packages", id]) => store.package(access, id).map(|p| with_hash(&p)),
        ("POST", ["v1", "packages", id, "flag"]) => {
            body().and_then(|b| store.flag(access, id, &b).map(|p| with_hash(&p)))
        }
        ("POST", ["v1", "packages", id, "review"]) => {
            body().and_then(|b| store.review(access, id, &b).map(|p| with_hash(&p)))
        }
        ("GET", ["v1", "projects", p, "orient"]) => {
            window(q.get("window_days")).and_then(|w| store.orient(access, p, w, now))
        }
        ("GET", ["v1", "orchestrate"]) => window(q.get("window_days")).and_then(|w| {
            let snippets = match q.get("snippets") {
                None => digest::DEFAULT_SNIPPETS,
                Some(s) => s
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n <= digest::MAX_SNIPPETS)
                    .ok_or_else(|| {
                        AgenticError::InvalidRequest(format!(
                            "`snippets` is 0–{}",
                            digest::MAX_SNIPPETS
                        ))
                    })?,
            };
            store.orchestrate(access, q.get("project"), q.get("focus"), snippets, w, now)
        }),
        ("POST", ["v1", "projects", p, "facts"]) => body().and_then(|b| {
            store
                .assert_fact(access, p, &b, now)
                .map(|f| json!({ "fact": f }))
        }),
        ("DELETE", ["v1", "projects", p, "facts"]) => match (q.get("subject"), q.get("predicate")) {
            (Some(s), Some(pr)) => store
                .invalidate_fact(access, p, s, pr, q.get("object"), now)
                .map(|n| json!({ "invalidated": n })),
            _ => Err(AgenticError::InvalidRequest("`subject` and `predicate` are required".into()).into()),
        },
        ("GET", ["v1", "projects", p, "facts"]) => {
            let at = match q.get("at") {
                None => Ok(None),
                Some(s) => Timestamp::parse_rfc3339(s).map(Some).ok_or_else(|| {
                    ServiceError::from(AgenticError::InvalidRequest(
                        "`at` is an RFC 3339 UTC time".into(),
                    ))
                }),
            };
            at.and_then(|at| {
                store
                    .facts(access, p, q.get("subject"), q.get("predicate"), at, q.get("history") == Some("true"))
                    .map(|f| json!({ "facts": f, "at": q.get("at") }))
            })
        }
        ("GET", ["v1", "export"]) => {
            return match store.export_ndjson(access, q.get("project_id")) {
                Ok(text) => Reply {
                    status: 200,
                    body: Value::Null,
                    ndjson: Some(text),
                },
                Err(e) => answer(Err(e)),
            }
        }
        ("POST", ["v1", "import"]) => {
            let ndjson = call
                .content_type
                .and_then(|c| c.split(';').next())
                .map(|c| c.trim().eq_ignore_ascii_case("application/x-ndjson"))
                .unwrap_or(false);
            match (ndjson, std::str::from_utf8(call.body)) {
                (false, _) => {
                    return Reply::refusal(
                        415,
                        "unsupported_media_type",
                        "an import is Content-Type: application/x-ndjson",
                    )
                }
                (true, Err(_)) => Err(AgenticError::InvalidRequest("the body is not UTF-8".into()).into()),
                (true, Ok(text)) => store
                    .import_ndjson(access, text, now)
                    .map(|i| json!({ "imported": i })),
            }
        }
        ("GET", ["v1", "projects", p, "sessions"]) => store
            .sessions(access, p)
            .map(|s| json!({ "sessions": s })),
        (_, ["v1", ..]) if known_path(&seg) => {
            return Reply::refusal(405, "method_not_allowed", "this route does not take that method")
        }
        _ => return Reply::refusal(404, "not_found", "no such route"),
    };
    answer(result)
}

/// The parameters of a query string, decoded.
struct Query(Vec<(String, String)>);

impl Query {
    /// The first value of `name`.
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Whether a path names a route (for 405 against 404).
fn known_path(seg: &[&str]) -> bool {
    matches!(
        seg,
        ["v1", "conformance"]
            | ["v1", "projects"]
            | ["v1", "projects", _]
            | [
                "v1",
                "projects",
                _,
                "archive"
                    | "unarchive"
                    | "packages"
                    | "awaiting_review"
                    | "orient"
                    | "facts"
                    | "sessions"
            ]
            | ["v1", "packages", _]
            | ["v1", "packages", _, "flag" | "review"]
            | ["v1", "orchestrate" | "export" | "import"]
    )
}

fn pull(
    store: &AgenticStore,
    access: &Access,
    project_id: &str,
    q: &Query,
) -> Result<Value, ServiceError> {
    let limit = match q.get("limit") {
        None => 5,
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=super::store::MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                AgenticError::InvalidRequest(format!("`limit` is 1–{}", super::store::MAX_LIMIT))
            })?,
    };
    match q.get("mode").unwrap_or("latest") {
        "latest" => {
            let status = q.get("status");
            if let Some(s) = status {
                if !a2acp_core::memory::STATUSES.contains(&s) {
                    return Err(
                        AgenticError::InvalidRequest(format!("unknown status {s:?}")).into(),
                    );
                }
            }
            let l = store.latest(access, project_id, limit, status)?;
            Ok(json!({"mode": "latest", "packages": packages(&l)}))
        }
        "relevant" => {
            let query = q
                .get("query")
                .filter(|s| !s.trim().is_empty())
                .ok_or_else(|| AgenticError::InvalidRequest("`query` is required".into()))?;
            let l = store.relevant(access, project_id, query, limit)?;
            Ok(json!({"mode": "relevant", "query": query, "packages": packages(&l)}))
        }
        "specific" => {
            let id = q
                .get("package_id")
                .ok_or_else(|| AgenticError::InvalidRequest("`package_id` is required".into()))?;
            let p = store.package(access, id)?;
            if p.project_id() != project_id {
                return Err(AgenticError::PackageNotFound(id.to_string()).into());
            }
            Ok(with_hash(&p))
        }
        other => Err(AgenticError::InvalidRequest(format!(
            "unknown mode {other:?} (latest, specific, relevant)"
        ))
        .into()),
    }
}

fn window(w: Option<&str>) -> Result<u32, ServiceError> {
    match w {
        None => Ok(digest::DEFAULT_WINDOW_DAYS),
        Some(s) => s
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=digest::MAX_WINDOW_DAYS).contains(n))
            .ok_or_else(|| {
                AgenticError::InvalidRequest(format!(
                    "`window_days` is 1–{}",
                    digest::MAX_WINDOW_DAYS
                ))
                .into()
            }),
    }
}

/// A request body: `application/json`, UTF-8, JSON nested at most [`MAX_DEPTH`] deep.
fn read_json(call: &Call<'_>) -> Result<Value, ServiceError> {
    let media = call
        .content_type
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase());
    if media.as_deref() != Some("application/json") {
        return Err(ServiceError::UnsupportedMedia);
    }
    if std::str::from_utf8(call.body).is_err() {
        return Err(AgenticError::InvalidRequest("the body is not UTF-8".into()).into());
    }
    if depth(call.body) > MAX_DEPTH {
        return Err(AgenticError::InvalidRequest(format!(
            "the body nests deeper than {MAX_DEPTH}"
        ))
        .into());
    }
    serde_json::from_slice(call.body)
        .map_err(|e| AgenticError::InvalidRequest(format!("the body is not JSON: {e}")).into())
}

/// The deepest nesting of `[` and `{` in a JSON text (outside strings), counted without
/// parsing it.
fn depth(text: &[u8]) -> usize {
    let (mut d, mut max, mut in_str, mut esc) = (0usize, 0usize, false, false);
    for &b in text {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                d += 1;
                max = max.max(d);
            }
            b']' | b'}' => d = d.saturating_sub(1),
            _ => {}
        }
    }
    max
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn parse_query(q: &str) -> Option<Vec<(String, String)>> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((
                percent_decode(&k.replace('+', " "))?,
                percent_decode(&v.replace('+', " "))?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_brackets_outside_strings() {
        assert_eq!(depth(br#"{"a":[1,{"b":"[[[["}]}"#), 3);
        assert_eq!(depth(b"1"), 0);
    }

    #[test]
    fn paths_and_queries_are_percent_decoded() {
        assert_eq!(percent_decode("a%20b%2Fc").as_deref(), Some("a b/c"));
        assert_eq!(percent_decode("%ff"), None);
        assert_eq!(percent_decode("50%"), Some("50%".into()));
        assert_eq!(
            parse_query("query=dinner+friday&limit=5"),
            Some(vec![
                ("query".into(), "dinner friday".into()),
                ("limit".into(), "5".into())
            ])
        );
    }
}
