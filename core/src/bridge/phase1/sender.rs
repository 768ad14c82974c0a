//! The sending side of seed 001, sans-IO: one message to one receiver's
//! `POST /a2a/messages`, with the seed's retry rule.
//!
//! A [`Sender`] is built from a message that passes the envelope's own checks
//! ([`envelope::validate`]: a sender never sends what a receiver would refuse as
//! malformed). The caller makes the HTTP calls and keeps the time:
//!
//! 1. [`Sender::poll_transmit`] gives the request to make (path, body, and the
//!    acknowledgement deadline after which the caller stops waiting);
//! 2. the caller reports what came of it: [`Sender::handle_response`] (the HTTP status,
//!    its `Retry-After`, the body), [`Sender::handle_network_error`] (no connection, reset,
//!    name not resolved), [`Sender::handle_answer_too_large`] (more than
//!    [`MAX_ANSWER_BYTES`], not read), or [`Sender::handle_timeout`] once
//!    [`Sender::poll_timeout`] has passed without an answer;
//! 3. [`Sender::poll_event`] tells each failed attempt and the wait before the next;
//!    [`Sender::poll_timeout`] when the next attempt is due; [`Sender::outcome`] the end.
//!
//! What an answer means:
//!
//! - HTTP 2xx with a valid seed-001 message addressed to the sender: the acknowledgement —
//!   for a `ping`, a `ping` echo with the same `nonce`; an empty body acknowledges only a
//!   `status_update` (the seed requires no answer to it). An `error` answer is a refusal
//!   (below), except to an `error` sent (the receiver's echo).
//! - An `error` message (any status): classified by its `error_code` — `TIMEOUT` and
//!   `INTERNAL_ERROR` are retried, every other code ends the sending ([`Outcome::Refused`]).
//! - HTTP 5xx without a seed-001 error: counts as `INTERNAL_ERROR` (retried); HTTP 408:
//!   counts as `TIMEOUT` (retried); HTTP 429: the receiver's rate limit, retried after the
//!   longer of the backoff and its `Retry-After`, if that keeps the waits within the 15 s
//!   bound; any other status without a seed-001 error is a failure not retried.
//! - No connection, or no answer within the deadline: a network failure (retried).
//! - Anything else — an answer that is not a valid message, addressed to someone else,
//!   about another message, a ping echo with another nonce, an answer over
//!   [`MAX_ANSWER_BYTES`] — is a failure that sending again cannot mend: not retried.
//!
//! Every attempt sends the same bytes, so the same `message_id` (the receiver recognises
//! a retry). The waits are [`retry::next_attempt`]'s: at most 3 attempts, 1 s then 2 s
//! apart, never more than 15 s of waiting in all.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use serde_json::{json, Value};

use super::envelope::{self, EnvelopeError, ErrorCode, Message, Payload, Uuid, MAX_MESSAGE_BYTES};
use super::retry;
use crate::rng::DetRng;
use crate::time::Timestamp;

/// The receiver's endpoint, relative to its base URL.
pub const PATH: &str = "/a2a/messages";

/// The largest answer read, in bytes (the seed's message cap): more is a failure, and the
/// caller stops reading at this size.
pub const MAX_ANSWER_BYTES: usize = MAX_MESSAGE_BYTES;

/// How a sender departs from the seed's values (tests; the defaults are the seed's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderConfig {
    /// Wait this long for each acknowledgement instead of the type's deadline
    /// ([`retry::ack_deadline_ms`]: 30 s for a `task_assignment`, 10 s otherwise).
    pub ack_deadline: Option<Duration>,
}

/// One HTTP request to make: `POST` the body to the receiver's [`PATH`] with
/// `Content-Type: application/json`, and wait for the answer until `deadline`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The attempt's number, 1 for the first.
    pub attempt: u32,
    /// The path to post to ([`PATH`]).
    pub path: &'static str,
    /// The message, the same bytes on every attempt.
    pub body: Vec<u8>,
    /// How long to wait for the acknowledgement.
    pub ack_deadline: Duration,
    /// When to stop waiting (the time given to [`Sender::poll_transmit`] plus
    /// `ack_deadline`).
    pub deadline: Timestamp,
}

/// Why one attempt did not deliver the message.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptFailure {
    /// The receiver answered with a seed-001 `error`.
    Refused {
        /// The HTTP status.
        status: u16,
        /// Its `error_code`.
        code: ErrorCode,
        /// Its `error_message`.
        message: String,
        /// The whole `error` message.
        answer: Box<Message>,
    },
    /// An HTTP error status without a seed-001 `error` in the body: a 5xx counts as
    /// `INTERNAL_ERROR` and a 408 as `TIMEOUT` (retried), any other is not retried.
    HttpStatus {
        /// The status.
        status: u16,
    },
    /// HTTP 429: the receiver's rate limit (retried, after at least `retry_after`).
    RateLimited {
        /// Its `Retry-After`, when it gave a readable one.
        retry_after: Option<Duration>,
    },
    /// No connection, or it broke: refused, reset, the name not resolved (retried).
    Network(String),
    /// No answer within the acknowledgement deadline (retried).
    NoAnswer {
        /// How long the attempt waited.
        waited: Duration,
    },
    /// An answer that is not the acknowledgement: not a valid seed-001 message, not
    /// addressed to the sender, about another message, a ping echo with another nonce, a
    /// redirect (not retried).
    BadAnswer {
        /// The HTTP status.
        status: u16,
        /// What is wrong with it.
        why: String,
    },
    /// An answer over [`MAX_ANSWER_BYTES`], not read (not retried).
    AnswerTooLarge,
}

impl AttemptFailure {
    /// The seed's error code this failure is, when it is one (`INTERNAL_ERROR` for a 5xx
    /// without a seed-001 error, `TIMEOUT` for a 408).
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            AttemptFailure::Refused { code, .. } => Some(*code),
            AttemptFailure::HttpStatus { status: 408 } => Some(ErrorCode::Timeout),
            AttemptFailure::HttpStatus { status } if *status >= 500 => {
                Some(ErrorCode::InternalError)
            }
            _ => None,
        }
    }

    /// Whether sending the message again may help (seed 001 "Retry Logic").
    pub fn retryable(&self) -> bool {
        match self {
            AttemptFailure::Refused { code, .. } => code.retryable(),
            AttemptFailure::HttpStatus { .. } => {
                self.error_code().is_some_and(ErrorCode::retryable)
            }
            AttemptFailure::RateLimited { .. }
            | AttemptFailure::Network(_)
            | AttemptFailure::NoAnswer { .. } => true,
            AttemptFailure::BadAnswer { .. } | AttemptFailure::AnswerTooLarge => false,
        }
    }
}

impl fmt::Display for AttemptFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Peer text reaches a terminal: one clean line, bounded.
        let clean = |s: &str| crate::display::line(s, 300).into_owned();
        match self {
            AttemptFailure::Refused {
                status,
                code,
                message,
                ..
            } => write!(f, "{code} (HTTP {status}): {}", clean(message)),
            AttemptFailure::HttpStatus { status } => match self.error_code() {
                Some(c) => write!(f, "HTTP {status} without a seed-001 error (counts as {c})"),
                None => write!(f, "HTTP {status} without a seed-001 error"),
            },
            AttemptFailure::RateLimited {
                retry_after: Some(d),
            } => write!(
                f,
                "rate limited (HTTP 429, Retry-After {} s)",
                d.as_millis().div_ceil(1000)
            ),
            AttemptFailure::RateLimited { retry_after: None } => {
                f.write_str("rate limited (HTTP 429)")
            }
            AttemptFailure::Network(what) => write!(f, "network: {}", clean(what)),
            AttemptFailure::NoAnswer { waited } => {
                write!(f, "no answer within {}", millis(*waited))
            }
            AttemptFailure::BadAnswer { status, why } => {
                write!(f, "HTTP {status}: {}", clean(why))
            }
            AttemptFailure::AnswerTooLarge => {
                write!(f, "the answer is over {MAX_ANSWER_BYTES} bytes (not read)")
            }
        }
    }
}

/// `1.5 s`, `300 ms`.
fn millis(d: Duration) -> String {
    let ms = d.as_millis();
    if ms >= 1000 && ms.is_multiple_of(100) {
        format!("{} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

/// How the sending ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The receiver acknowledged the message.
    Acknowledged {
        /// Attempts made.
        attempts: u32,
        /// The HTTP status (2xx).
        status: u16,
        /// Its answer (a `ping` echo, a `status_update`, a `task_completion`, the echo of
        /// an `error`…); `None` for the empty acknowledgement of a `status_update`.
        answer: Option<Box<Message>>,
    },
    /// The receiver refused the message with an error code that is never retried (or the
    /// same retryable code came back after every attempt: see [`Outcome::GaveUp`]).
    Refused {
        /// Attempts made.
        attempts: u32,
        /// The HTTP status.
        status: u16,
        /// The `error_code`.
        code: ErrorCode,
        /// The `error_message`.
        message: String,
        /// The whole `error` message.
        answer: Box<Message>,
    },
    /// Every attempt failed in a way worth retrying, and no attempt is left (3 in all) or
    /// the next wait would pass the 15 s bound.
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's failure.
        last: AttemptFailure,
    },
    /// An attempt failed in a way sending again cannot mend (an answer that is not the
    /// acknowledgement, or too large).
    Failed {
        /// Attempts made.
        attempts: u32,
        /// Why.
        failure: AttemptFailure,
    },
}

impl Outcome {
    /// Attempts made.
    pub fn attempts(&self) -> u32 {
        match self {
            Outcome::Acknowledged { attempts, .. }
            | Outcome::Refused { attempts, .. }
            | Outcome::GaveUp { attempts, .. }
            | Outcome::Failed { attempts, .. } => *attempts,
        }
    }

    /// The seed's error code the sending ended with, if any.
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            Outcome::Acknowledged { .. } => None,
            Outcome::Refused { code, .. } => Some(*code),
            Outcome::GaveUp { last, .. } => last.error_code(),
            Outcome::Failed { failure, .. } => failure.error_code(),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.attempts();
        let tries = if n == 1 { "attempt" } else { "attempts" };
        match self {
            Outcome::Acknowledged { status, .. } => {
                write!(f, "acknowledged (HTTP {status}) after {n} {tries}")
            }
            Outcome::Refused {
                status,
                code,
                message,
                ..
            } => write!(
                f,
                "refused: {code} (HTTP {status}): {} — not retried ({n} {tries})",
                crate::display::line(message, 300)
            ),
            Outcome::GaveUp { last, .. } => {
                write!(f, "gave up after {n} {tries}: {last}")
            }
            Outcome::Failed { failure, .. } => {
                write!(f, "failed: {failure} — not retried ({n} {tries})")
            }
        }
    }
}

/// What happened to the sending, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Attempt `attempt` failed; the next one goes in `retry_in`, or none does.
    AttemptFailed {
        /// The attempt's number, 1 for the first.
        attempt: u32,
        /// Why.
        failure: AttemptFailure,
        /// The wait before the next attempt; `None` when this was the last.
        retry_in: Option<Duration>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The next attempt goes at this time.
    Due(Timestamp),
    /// An attempt is out; its answer is awaited until this time.
    InFlight { deadline: Timestamp },
    /// Ended ([`Sender::outcome`]).
    Done,
}

/// One message on its way to a receiver (see the module's documentation).
#[derive(Debug, Clone)]
pub struct Sender {
    message: Message,
    body: Vec<u8>,
    ack_deadline: Duration,
    attempts: u32,
    waited_ms: u64,
    state: State,
    events: VecDeque<Event>,
    outcome: Option<Outcome>,
}

/// A fresh message id: a UUID v4 from the caller's seeded generator.
pub fn message_id(rng: &mut DetRng) -> Uuid {
    let mut b = [0u8; 16];
    rng.fill(&mut b);
    envelope::uuid_v4(b)
}

/// A message of type `kind` with `payload`, from `from` to `to`, stamped `at` — checked
/// as a receiver would check it ([`envelope::validate`]): an unknown type is
/// `UNSUPPORTED_MESSAGE_TYPE`, a payload field missing, unknown or of the wrong type is
/// `PAYLOAD_VALIDATION_FAILED` naming the field.
pub fn compose(
    kind: &str,
    payload: Value,
    from: Uuid,
    to: Uuid,
    message_id: Uuid,
    at: Timestamp,
) -> Result<Message, EnvelopeError> {
    let v = json!({
        "version": envelope::VERSION,
        "message_id": message_id.hyphenated().to_string(),
        "timestamp": at.to_rfc3339(),
        "from": from.hyphenated().to_string(),
        "to": to.hyphenated().to_string(),
        "type": kind,
        "payload": payload,
    });
    envelope::validate(v.to_string().as_bytes())
}

/// Why a URL cannot be a receiver's endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// Not `http://` or `https://`.
    #[error("`{0}` is not an http:// or https:// URL")]
    Scheme(String),
    /// No host after the scheme.
    #[error("`{0}` has no host")]
    NoHost(String),
    /// A query or fragment.
    #[error("`{0}`: give the receiver's base URL or its /a2a/messages endpoint, without a query or fragment")]
    Query(String),
}

/// The endpoint messages are posted to, from the receiver's base URL
/// (`http://host:7410`, `http://host:7410/agents/bob/`) or the endpoint itself
/// (`…/a2a/messages`).
pub fn endpoint(url: &str) -> Result<String, EndpointError> {
    let url = url.trim();
    let lower = url.to_ascii_lowercase();
    let rest = ["http://", "https://"]
        .iter()
        .find_map(|s| lower.strip_prefix(s))
        .ok_or_else(|| EndpointError::Scheme(url.to_string()))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(EndpointError::NoHost(url.to_string()));
    }
    if url.contains(['?', '#']) {
        return Err(EndpointError::Query(url.to_string()));
    }
    let base = url.trim_end_matches('/');
    if base.ends_with(PATH) {
        Ok(base.to_string())
    } else {
        Ok(format!("{base}{PATH}"))
    }
}

/// A `Retry-After` value at `now`: delay-seconds, or an HTTP-date (a time already past
/// is no wait). `None` if unreadable.
pub fn retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.len() <= 10 && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse::<u64>().ok().map(Duration::from_secs);
    }
    if v.len() > 64 {
        return None;
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let at = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    Some(Duration::from_millis(at.saturating_sub(now.as_millis())))
}

impl Sender {
    /// A sender of `message`, its first attempt due at `now`. Refused (with the error a
    /// receiver would answer) if the message would not pass a receiver's checks.
    pub fn new(
        message: &Message,
        now: Timestamp,
        config: SenderConfig,
    ) -> Result<Self, EnvelopeError> {
        Self::from_body(message.to_json().to_string().as_bytes(), now, config)
    }

    /// A sender of the message `body` as it is (its bytes sent unchanged), its first
    /// attempt due at `now`. Refused if a receiver would refuse it as malformed.
    pub fn from_body(
        body: &[u8],
        now: Timestamp,
        config: SenderConfig,
    ) -> Result<Self, EnvelopeError> {
        let message = envelope::validate(body)?;
        let ack_deadline =
            config
                .ack_deadline
                .unwrap_or(Duration::from_millis(retry::ack_deadline_ms(
                    message.payload.type_name(),
                )));
        Ok(Sender {
            message,
            body: body.to_vec(),
            ack_deadline,
            attempts: 0,
            waited_ms: 0,
            state: State::Due(now),
            events: VecDeque::new(),
            outcome: None,
        })
    }

    /// The message being sent.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// Its bytes, as sent.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Attempts made so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The request to make now, if an attempt is due at `now`.
    pub fn poll_transmit(&mut self, now: Timestamp) -> Option<Transmit> {
        let State::Due(at) = self.state else {
            return None;
        };
        if now < at {
            return None;
        }
        self.attempts += 1;
        let deadline = now.add(self.ack_deadline);
        self.state = State::InFlight { deadline };
        Some(Transmit {
            attempt: self.attempts,
            path: PATH,
            body: self.body.clone(),
            ack_deadline: self.ack_deadline,
            deadline,
        })
    }

    /// When something is due: the next attempt, or the end of the wait for an answer.
    /// `None` once ended.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match self.state {
            State::Due(at) => Some(at),
            State::InFlight { deadline } => Some(deadline),
            State::Done => None,
        }
    }

    /// Time passed: an attempt without an answer by its deadline has failed (retried).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if let State::InFlight { deadline } = self.state {
            if now >= deadline {
                self.fail(
                    now,
                    AttemptFailure::NoAnswer {
                        waited: self.ack_deadline,
                    },
                );
            }
        }
    }

    /// The attempt could not reach the receiver, or the connection broke before the
    /// answer (retried).
    pub fn handle_network_error(&mut self, now: Timestamp, what: &str) {
        if matches!(self.state, State::InFlight { .. }) {
            self.fail(now, AttemptFailure::Network(what.to_string()));
        }
    }

    /// The answer was larger than [`MAX_ANSWER_BYTES`]; the caller stopped reading it.
    pub fn handle_answer_too_large(&mut self, now: Timestamp) {
        if matches!(self.state, State::InFlight { .. }) {
            self.fail(now, AttemptFailure::AnswerTooLarge);
        }
    }

    /// The receiver answered the attempt: the HTTP status, its `Retry-After` header if
    /// any, and the body (at most [`MAX_ANSWER_BYTES`]; more is
    /// [`Sender::handle_answer_too_large`]).
    pub fn handle_response(
        &mut self,
        now: Timestamp,
        status: u16,
        retry_after_header: Option<&str>,
        body: &[u8],
    ) {
        if !matches!(self.state, State::InFlight { .. }) {
            return;
        }
        match self.classify(now, status, retry_after_header, body) {
            Ok(answer) => {
                self.outcome = Some(Outcome::Acknowledged {
                    attempts: self.attempts,
                    status,
                    answer: answer.map(Box::new),
                });
                self.state = State::Done;
            }
            Err(f) => self.fail(now, f),
        }
    }

    /// What happened, in order (each failed attempt and the wait before the next).
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// How the sending ended; `None` while it goes on.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    /// Whether the sending ended.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The acknowledgement this answer is, or why it is not one.
    fn classify(
        &self,
        now: Timestamp,
        status: u16,
        retry_after_header: Option<&str>,
        body: &[u8],
    ) -> Result<Option<Message>, AttemptFailure> {
        if body.len() > MAX_ANSWER_BYTES {
            return Err(AttemptFailure::AnswerTooLarge);
        }
        if status == 429 {
            return Err(AttemptFailure::RateLimited {
                retry_after: retry_after_header.and_then(|v| retry_after(v, now)),
            });
        }
        let empty = body.iter().all(u8::is_ascii_whitespace);
        let parsed = (!empty).then(|| envelope::validate(body));
        let bad = |why: String| AttemptFailure::BadAnswer { status, why };
        if (200..300).contains(&status) {
            let m = match parsed {
                None if matches!(self.message.payload, Payload::StatusUpdate(_)) => {
                    return Ok(None)
                }
                None => {
                    return Err(bad(format!(
                        "an empty answer does not acknowledge a {} (only a status_update needs no answer)",
                        self.message.payload.type_name()
                    )))
                }
                Some(Err(e)) => {
                    return Err(bad(format!("the answer is not a seed-001 message: {e}")))
                }
                Some(Ok(m)) => m,
            };
            self.check_addressed(&m).map_err(bad)?;
            if let Payload::Error(e) = &m.payload {
                if !matches!(self.message.payload, Payload::Error(_)) {
                    return Err(refusal(status, e, m.clone()));
                }
            }
            if let Payload::Ping(sent) = &self.message.payload {
                match &m.payload {
                    Payload::Ping(echo) if echo.nonce == sent.nonce => {}
                    Payload::Ping(echo) => {
                        return Err(bad(format!(
                            "the ping echo's nonce {:?} is not the ping's {:?}",
                            crate::display::line(&echo.nonce, 64),
                            crate::display::line(&sent.nonce, 64)
                        )))
                    }
                    other => {
                        return Err(bad(format!(
                            "a ping is answered by its echo (a ping with the same nonce), not a {}",
                            other.type_name()
                        )))
                    }
                }
            }
            return Ok(Some(m));
        }
        // Not 2xx: a seed-001 error says what it is; without one, the status does.
        if let Some(Ok(m)) = parsed {
            if let Payload::Error(e) = &m.payload {
                self.check_addressed(&m).map_err(bad)?;
                return Err(refusal(status, e, m.clone()));
            }
        }
        let f = AttemptFailure::HttpStatus { status };
        if f.error_code().is_some() {
            return Err(f);
        }
        Err(bad(match status {
            300..=399 => "a redirect (not followed: give the receiver's own URL)".to_string(),
            _ => "no seed-001 error in the answer".to_string(),
        }))
    }

    /// An answer goes to the sender, comes from the receiver (an `error` may come from
    /// whoever refused the message: e.g. `AGENT_NOT_FOUND` from the agent that is there),
    /// and an `error` is about this message.
    fn check_addressed(&self, m: &Message) -> Result<(), String> {
        if m.to != self.message.from {
            return Err(format!(
                "the answer is addressed to {}, not to the sender {}",
                m.to, self.message.from
            ));
        }
        match &m.payload {
            Payload::Error(e) => match &e.original_message_id {
                Some(id) if Uuid::try_parse(id).ok() != Some(self.message.message_id) => {
                    Err(format!(
                        "the error is about message {:?}, not {}",
                        crate::display::line(id, 64),
                        self.message.message_id
                    ))
                }
                _ => Ok(()),
            },
            _ if m.from != self.message.to => Err(format!(
                "the answer comes from {}, not from the receiver {}",
                m.from, self.message.to
            )),
            _ => Ok(()),
        }
    }

    /// Attempt failed: wait and try again, or end.
    fn fail(&mut self, now: Timestamp, failure: AttemptFailure) {
        let wait = self.next_wait(&failure);
        self.events.push_back(Event::AttemptFailed {
            attempt: self.attempts,
            failure: failure.clone(),
            retry_in: wait.map(Duration::from_millis),
        });
        if let Some(ms) = wait {
            self.waited_ms = self.waited_ms.saturating_add(ms);
            self.state = State::Due(now.add(Duration::from_millis(ms)));
            return;
        }
        let attempts = self.attempts;
        self.outcome = Some(match failure {
            AttemptFailure::Refused {
                status,
                code,
                message,
                answer,
            } if !code.retryable() => Outcome::Refused {
                attempts,
                status,
                code,
                message,
                answer,
            },
            f if f.retryable() => Outcome::GaveUp { attempts, last: f },
            f => Outcome::Failed {
                attempts,
                failure: f,
            },
        });
        self.state = State::Done;
    }

    /// The wait before the next attempt after `failure`, or `None` to end: the seed's
    /// schedule; a 429's `Retry-After` may lengthen the wait, never past the 15 s bound.
    fn next_wait(&self, failure: &AttemptFailure) -> Option<u64> {
        if !failure.retryable() {
            return None;
        }
        let wait = retry::next_attempt(self.attempts, self.waited_ms, retry::Failure::Network)?;
        let wait = match failure {
            AttemptFailure::RateLimited {
                retry_after: Some(d),
            } => wait.max(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            _ => wait,
        };
        (self.waited_ms.saturating_add(wait) <= retry::MAX_TOTAL_WAIT_MS).then_some(wait)
    }
}

fn refusal(status: u16, e: &envelope::ErrorPayload, m: Message) -> AttemptFailure {
    AttemptFailure::Refused {
        status,
        code: e.error_code,
        message: e.error_message.clone(),
        answer: Box::new(m),
    }
}

#[cfg(test)]
#[path = "sender_tests.rs"]
mod tests;
