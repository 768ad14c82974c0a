//! The Phase-1 sender's retry rules (seed 001) over real sockets, against a scripted
//! receiver that answers each request as told: INTERNAL_ERROR twice then the
//! acknowledgement, TIMEOUT, a refused connection, an answer that never comes, the codes
//! that are never retried, an answer too large to read, an answer that is not a message,
//! a rate limit. The sender is `a2acp_core::bridge::phase1::sender` driven by
//! `a2acp_runtime::phase1_sender` (ureq), as `a2acp phase1 send` drives it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2acp_core::bridge::phase1::envelope::{ErrorCode, Payload, Uuid};
use a2acp_core::bridge::phase1::sender::{compose, AttemptFailure, Outcome, Sender, SenderConfig};
use a2acp_runtime::phase1_sender::Progress;
use a2acp_tests::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ME: &str = "6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b";
const THEM: &str = "0a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d";
const ID: &str = "3b241101-e2bb-4255-8caf-4136c566a962";

/// How the scripted receiver answers one request.
enum Reply {
    /// This status, these headers, this body.
    Answer(u16, Vec<(&'static str, String)>, Vec<u8>),
    /// Reads the request and never answers (holds the connection a minute).
    Hang,
    /// 200 with a body of spaces that goes on: `declared` bytes announced in
    /// `Content-Length`, or none announced and no end (up to 256 MiB).
    Endless { declared: Option<usize> },
}

/// The requests a scripted receiver got: when, and their bodies.
type Received = Arc<Mutex<Vec<(Instant, Vec<u8>)>>>;

/// The scripted receiver: what it got, and how much it managed to write of endless
/// answers.
struct Scripted {
    addr: SocketAddr,
    got: Received,
    written: Arc<AtomicUsize>,
    writing: Arc<AtomicUsize>,
}

impl Scripted {
    async fn start(script: Vec<Reply>) -> Scripted {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let s = Scripted {
            addr: l.local_addr().unwrap(),
            got: Arc::default(),
            written: Arc::default(),
            writing: Arc::default(),
        };
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let (got, written, writing) = (s.got.clone(), s.written.clone(), s.writing.clone());
        tokio::spawn(async move {
            while let Ok((sock, _)) = l.accept().await {
                let (script, got, written, writing) = (
                    script.clone(),
                    got.clone(),
                    written.clone(),
                    writing.clone(),
                );
                tokio::spawn(async move {
                    let Some(body) = read_request(&sock).await else {
                        return;
                    };
                    got.lock().unwrap().push((Instant::now(), body));
                    let reply = script.lock().unwrap().pop_front();
                    answer(sock, reply, &written, &writing).await;
                });
            }
        });
        s
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests received so far.
    fn got(&self) -> Vec<(Instant, Vec<u8>)> {
        self.got.lock().unwrap().clone()
    }
}

/// Reads one request (head and `Content-Length` body); its body.
async fn read_request(sock: &TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        sock.readable().await.ok()?;
        match sock.try_read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("post /a2a/messages "), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        sock.readable().await.ok()?;
        match sock.try_read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
    }
    Some(buf[head_end..head_end + len].to_vec())
}

async fn answer(
    mut sock: TcpStream,
    reply: Option<Reply>,
    written: &AtomicUsize,
    writing: &AtomicUsize,
) {
    let reason = |s: u16| match s {
        200 => "OK",
        400 => "Bad Request",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Status",
    };
    match reply.unwrap_or(Reply::Answer(500, vec![], b"script ended".to_vec())) {
        Reply::Answer(status, headers, body) => {
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                reason(status),
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(&body).await;
            let _ = sock.shutdown().await;
        }
        Reply::Hang => tokio::time::sleep(Duration::from_secs(60)).await,
        Reply::Endless { declared } => {
            writing.fetch_add(1, Ordering::SeqCst);
            let length = declared
                .map(|n| format!("content-length: {n}\r\n"))
                .unwrap_or_default();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{length}connection: close\r\n\r\n"
            );
            if sock.write_all(head.as_bytes()).await.is_ok() {
                let chunk = vec![b' '; 64 * 1024];
                let total = declared.unwrap_or(256 << 20);
                let mut sent = 0;
                while sent < total {
                    let n = chunk.len().min(total - sent);
                    if sock.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                    sent += n;
                    written.fetch_add(n, Ordering::SeqCst);
                }
            }
            writing.fetch_sub(1, Ordering::SeqCst);
        }
    }
    // Whatever the client still sends is not read.
    let mut rest = [0u8; 1];
    let _ = tokio::time::timeout(Duration::from_millis(10), sock.read(&mut rest)).await;
}

fn uuid(s: &str) -> Uuid {
    Uuid::parse_str(s).unwrap()
}

/// A `task_assignment` from ME to THEM, id ID.
fn assignment(config: SenderConfig) -> Sender {
    let now = a2acp_runtime::now();
    let m = compose(
        "task_assignment",
        json!({"task_id": "t-1", "task_type": "scheduling", "title": "Dinner",
               "description": "Find a time", "payload": {"party_size": 2}}),
        uuid(ME),
        uuid(THEM),
        uuid(ID),
        now,
    )
    .unwrap();
    Sender::new(&m, now, config).unwrap()
}

/// A message from THEM to ME.
fn from_them(kind: &str, payload: serde_json::Value) -> Vec<u8> {
    json!({
        "version": "1.0.0", "message_id": "9f8e7d6c-5b4a-4938-8271-605f4e3d2c1b",
        "timestamp": "2027-01-15T08:00:01Z", "from": THEM, "to": ME, "type": kind,
        "payload": payload,
    })
    .to_string()
    .into_bytes()
}

fn error(code: ErrorCode) -> Reply {
    Reply::Answer(
        code.http_status(),
        vec![],
        from_them(
            "error",
            json!({"original_message_id": ID, "error_code": code, "error_message": "scripted"}),
        ),
    )
}

fn ack() -> Reply {
    Reply::Answer(
        200,
        vec![],
        from_them(
            "status_update",
            json!({"task_id": "t-1", "status": "assigned"}),
        ),
    )
}

/// The failures the sender reported, with the wait it announced after each.
fn failures(seen: &[Progress]) -> Vec<(String, Option<Duration>)> {
    seen.iter()
        .filter_map(|p| match p {
            Progress::Event(a2acp_core::bridge::phase1::sender::Event::AttemptFailed {
                failure,
                retry_in,
                ..
            }) => Some((failure.to_string(), *retry_in)),
            _ => None,
        })
        .collect()
}

fn assert_between(d: Duration, lo_ms: u64, hi_ms: u64, what: &str) {
    assert!(
        d >= Duration::from_millis(lo_ms) && d <= Duration::from_millis(hi_ms),
        "{what}: {d:?} not within {lo_ms}..{hi_ms} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_error_twice_then_acknowledged_in_three_attempts_one_then_two_seconds_apart() {
    let server = Scripted::start(vec![
        error(ErrorCode::InternalError),
        error(ErrorCode::InternalError),
        ack(),
    ])
    .await;
    let (o, seen) = phase1_send(&server.url(), assignment(SenderConfig::default())).await;
    match &o {
        Outcome::Acknowledged {
            attempts: 3,
            status: 200,
            answer: Some(a),
        } => assert!(matches!(a.payload, Payload::StatusUpdate(_)), "{a:?}"),
        o => panic!("{o:?}"),
    }
    assert_eq!(phase1_attempts(&seen), 3);
    let f = failures(&seen);
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f[0].0.contains("INTERNAL_ERROR"), "{f:?}");
    assert_eq!(f[0].1, Some(Duration::from_secs(1)));
    assert_eq!(f[1].1, Some(Duration::from_secs(2)));
    let got = server.got();
    assert_eq!(got.len(), 3);
    // The same message (same bytes, same message_id) every time.
    assert!(got.iter().all(|(_, b)| *b == got[0].1));
    let sent: serde_json::Value = serde_json::from_slice(&got[0].1).unwrap();
    assert_eq!(sent["message_id"], ID);
    // The waits between them (generous upper bounds: a loaded machine).
    assert_between(got[1].0 - got[0].0, 950, 6_000, "first wait");
    assert_between(got[2].0 - got[1].0, 1_950, 8_000, "second wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_is_retried() {
    let server = Scripted::start(vec![error(ErrorCode::Timeout), ack()]).await;
    let (o, seen) = phase1_send(&server.url(), assignment(SenderConfig::default())).await;
    assert!(
        matches!(o, Outcome::Acknowledged { attempts: 2, .. }),
        "{o:?}"
    );
    let f = failures(&seen);
    assert!(f[0].0.starts_with("TIMEOUT (HTTP 500)"), "{f:?}");
    assert_eq!(server.got().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_tried_three_times_then_given_up() {
    let addr = free_addr(); // nobody listens there
    let started = Instant::now();
    let (o, seen) = phase1_send(
        &format!("http://{addr}/a2a/messages"),
        assignment(SenderConfig::default()),
    )
    .await;
    match &o {
        Outcome::GaveUp {
            attempts: 3,
            last: AttemptFailure::Network(_),
        } => {}
        o => panic!("{o:?}"),
    }
    assert_eq!(phase1_attempts(&seen), 3);
    let waits: Vec<_> = failures(&seen).into_iter().map(|(_, w)| w).collect();
    assert_eq!(
        waits,
        vec![
            Some(Duration::from_secs(1)),
            Some(Duration::from_secs(2)),
            None
        ]
    );
    assert_between(started.elapsed(), 2_950, 20_000, "1 s + 2 s of waiting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_never_comes_is_cut_at_the_deadline_and_retried() {
    let server = Scripted::start(vec![Reply::Hang, ack()]).await;
    let config = SenderConfig {
        ack_deadline: Some(Duration::from_millis(400)),
    };
    let started = Instant::now();
    let (o, seen) = phase1_send(&server.url(), assignment(config)).await;
    assert!(
        matches!(o, Outcome::Acknowledged { attempts: 2, .. }),
        "{o:?}"
    );
    let f = failures(&seen);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].0.contains("no answer within 400 ms"), "{f:?}");
    let got = server.got();
    assert_eq!(got.len(), 2);
    // Cut at the deadline, then the 1 s wait.
    assert_between(got[1].0 - got[0].0, 1_350, 8_000, "deadline + wait");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codes_about_the_message_are_sent_once() {
    for code in [
        ErrorCode::PayloadValidationFailed,
        ErrorCode::InvalidMessageFormat,
        ErrorCode::UnsupportedMessageType,
        ErrorCode::CapabilityMismatch,
    ] {
        // Were it retried, the second attempt would be acknowledged.
        let server = Scripted::start(vec![error(code), ack()]).await;
        let (o, seen) = phase1_send(&server.url(), assignment(SenderConfig::default())).await;
        match &o {
            Outcome::Refused {
                attempts: 1,
                status: 400,
                code: c,
                message,
                ..
            } => {
                assert_eq!(*c, code);
                assert_eq!(message, "scripted");
            }
            o => panic!("{code}: {o:?}"),
        }
        assert_eq!(phase1_attempts(&seen), 1, "{code}");
        assert_eq!(server.got().len(), 1, "{code}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_one_mib_is_refused_unread() {
    // Announced as 2 MiB …
    let server = Scripted::start(vec![
        Reply::Endless {
            declared: Some(2 << 20),
        },
        ack(),
    ])
    .await;
    let (o, seen) = phase1_send(&server.url(), assignment(SenderConfig::default())).await;
    assert!(
        matches!(
            o,
            Outcome::Failed {
                attempts: 1,
                failure: AttemptFailure::AnswerTooLarge
            }
        ),
        "{o:?}"
    );
    assert_eq!(phase1_attempts(&seen), 1);
    // … or never ending: the sender stops reading past 1 MiB and hangs up, so the
    // receiver cannot write much more than the sockets' buffers hold.
    let server = Scripted::start(vec![Reply::Endless { declared: None }]).await;
    let (o, _) = phase1_send(&server.url(), assignment(SenderConfig::default())).await;
    assert!(
        matches!(
            o,
            Outcome::Failed {
                failure: AttemptFailure::AnswerTooLarge,
                ..
            }
        ),
        "{o:?}"
    );
    eventually(10, "the receiver stops writing", || async {
        (server.writing.load(Ordering::SeqCst) == 0).then_some(())
    })
    .await;
    let written = server.written.load(Ordering::SeqCst);
    assert!(
        written < 64 << 20,
        "{written} bytes written: the answer was read on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_is_not_a_message_is_a_failure_not_retried() {
    for body in [
        b"OK".to_vec(),
        br#"{"accepted": true}"#.to_vec(),
        Vec::new(),
    ] {
        let server = Scripted::start(vec![Reply::Answer(200, vec![], body.clone()), ack()]).await;
        let (o, seen) = phase1_send(&server.url(), assignment(SenderConfig::default())).await;
        match &o {
            Outcome::Failed {
                attempts: 1,
                failure: AttemptFailure::BadAnswer { status: 200, .. },
            } => {}
            o => panic!("{:?}: {o:?}", String::from_utf8_lossy(&body)),
        }
        assert_eq!(phase1_attempts(&seen), 1);
        assert_eq!(server.got().len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_is_waited_out_as_its_retry_after_says() {
    let server = Scripted::start(vec![
        Reply::Answer(
            429,
            vec![("retry-after", "2".into())],
            b"slow down".to_vec(),
        ),
        Reply::Answer(500, vec![], b"<html>oops</html>".to_vec()),
        ack(),
    ])
    .await;
    let (o, seen) = phase1_send(&server.url(), assignment(SenderConfig::default())).await;
    assert!(
        matches!(o, Outcome::Acknowledged { attempts: 3, .. }),
        "{o:?}"
    );
    let f = failures(&seen);
    assert!(f[0].0.contains("429"), "{f:?}");
    assert_eq!(f[0].1, Some(Duration::from_secs(2)), "Retry-After over 1 s");
    // A 5xx without a seed-001 error counts as INTERNAL_ERROR.
    assert!(f[1].0.contains("INTERNAL_ERROR"), "{f:?}");
    assert_eq!(f[1].1, Some(Duration::from_secs(2)));
    let got = server.got();
    assert_between(got[1].0 - got[0].0, 1_950, 8_000, "Retry-After: 2");
    // Past the 15 s bound: given up at once.
    let server = Scripted::start(vec![Reply::Answer(
        429,
        vec![("retry-after", "60".into())],
        Vec::new(),
    )])
    .await;
    let (o, _) = phase1_send(&server.url(), assignment(SenderConfig::default())).await;
    assert!(
        matches!(
            o,
            Outcome::GaveUp {
                attempts: 1,
                last: AttemptFailure::RateLimited { .. }
            }
        ),
        "{o:?}"
    );
}
