//! The HTTP side of the Phase-1 sender (seed 001): the calls a core
//! [`Sender`](a2acp_core::bridge::phase1::sender::Sender) asks for, made with `ureq` on the calling
//! thread, their outcomes handed back, and the waits between attempts slept. No protocol
//! decision here: what an answer means and whether to try again are the core's
//! (`a2acp_core::bridge::phase1::sender`).
//!
//! Bounded like the A2A client ([`crate::a2a_client`]): the connection within
//! [`CONNECT_TIMEOUT`], each whole call (the answer read to its end) within the attempt's
//! acknowledgement deadline, the answer within
//! [`MAX_ANSWER_BYTES`](a2acp_core::bridge::phase1::sender::MAX_ANSWER_BYTES) (more is not read), no
//! redirects followed.

use std::time::{Duration, Instant};

use a2acp_core::bridge::phase1::sender::{self, EndpointError, Event, Outcome, Sender, Transmit};

pub use crate::a2a_client::CONNECT_TIMEOUT;

/// How the calls are made.
#[derive(Debug, Clone, Default)]
pub struct SendOptions {
    /// The bearer token the receiver requires, if any.
    pub token: Option<String>,
}

/// What the sending is doing, for the person watching.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Attempt `attempt` goes out now.
    Attempt {
        /// Its number, 1 for the first.
        attempt: u32,
        /// How long it waits for the acknowledgement.
        ack_deadline: Duration,
    },
    /// What the core made of it ([`Event::AttemptFailed`]: why, and the wait before the
    /// next attempt).
    Event(Event),
}

/// What one call came to.
enum Answer {
    Response {
        status: u16,
        retry_after: Option<String>,
        body: Vec<u8>,
    },
    TooLarge,
    DeadlinePassed,
    Network(String),
}

/// Sends the message of `sender` to the receiver at `url` (its base URL or its
/// `/a2a/messages` endpoint), blocking until the sending ends (at most three attempts and
/// 15 s of waiting between them); `progress` hears each attempt and each failure.
pub fn send(
    url: &str,
    mut sender: Sender,
    opts: &SendOptions,
    mut progress: impl FnMut(&Progress),
) -> Result<Outcome, EndpointError> {
    let endpoint = sender::endpoint(url)?;
    // Timeouts are set per call: each attempt's is its acknowledgement deadline.
    let agent = crate::a2a_client::peer_agent(None);
    // The caller's time, moving with a monotonic clock (a wall clock jump changes no wait).
    let (start, t0) = (Instant::now(), crate::now());
    let clock = || t0.add(start.elapsed());
    loop {
        if let Some(o) = sender.outcome() {
            return Ok(o.clone());
        }
        let now = clock();
        if let Some(t) = sender.poll_transmit(now) {
            progress(&Progress::Attempt {
                attempt: t.attempt,
                ack_deadline: t.ack_deadline,
            });
            let answer = call(&agent, &endpoint, &t, opts);
            let now = clock();
            match answer {
                Answer::Response {
                    status,
                    retry_after,
                    body,
                } => sender.handle_response(now, status, retry_after.as_deref(), &body),
                Answer::TooLarge => sender.handle_answer_too_large(now),
                // ureq's deadline and this clock start together: the deadline has passed.
                Answer::DeadlinePassed => sender.handle_timeout(now.max(t.deadline)),
                Answer::Network(e) => sender.handle_network_error(now, &e),
            }
            while let Some(e) = sender.poll_event() {
                progress(&Progress::Event(e));
            }
            continue;
        }
        match sender.poll_timeout() {
            Some(at) => std::thread::sleep(at.since(now)),
            // Neither due nor done cannot happen; end rather than spin.
            None => {
                return Ok(sender.outcome().cloned().unwrap_or(Outcome::Failed {
                    attempts: sender.attempts(),
                    failure: sender::AttemptFailure::Network("the sending stopped".into()),
                }))
            }
        }
    }
}

/// One attempt, blocking at most its acknowledgement deadline.
fn call(agent: &ureq::Agent, endpoint: &str, t: &Transmit, opts: &SendOptions) -> Answer {
    let mut req = agent
        .post(endpoint)
        .config()
        .timeout_connect(Some(CONNECT_TIMEOUT.min(t.ack_deadline)))
        .timeout_global(Some(t.ack_deadline))
        .build()
        .header("Content-Type", "application/json")
        .header("Accept", "application/json");
    if let Some(token) = &opts.token {
        req = req.header("Authorization", format!("Bearer {token}"));
    }
    let resp = match req.send(&t.body[..]) {
        Ok(r) => r,
        Err(e) => return failed(e),
    };
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match crate::a2a_client::read_capped(resp.into_body(), sender::MAX_ANSWER_BYTES) {
        Ok(Some(body)) => Answer::Response {
            status,
            retry_after,
            body,
        },
        Ok(None) => Answer::TooLarge,
        Err(e) => failed(ureq::Error::from(e)),
    }
}

fn failed(e: ureq::Error) -> Answer {
    match e {
        ureq::Error::Timeout(ureq::Timeout::Connect | ureq::Timeout::Resolve) => {
            Answer::Network(format!("cannot connect: {e}"))
        }
        ureq::Error::Timeout(_) => Answer::DeadlinePassed,
        e => Answer::Network(e.to_string()),
    }
}
