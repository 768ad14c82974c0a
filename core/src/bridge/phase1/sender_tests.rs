//! The Phase-1 sender on a virtual clock: every retry rule of seed 001, the waits and the
//! 15-second bound, the acknowledgement deadlines, and every kind of answer that is not
//! the acknowledgement.

use super::*;

const ME: &str = "6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b";
const THEM: &str = "0a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d";
const ID: &str = "3b241101-e2bb-4255-8caf-4136c566a962";
const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

fn me() -> Uuid {
    Uuid::parse_str(ME).unwrap()
}

fn them() -> Uuid {
    Uuid::parse_str(THEM).unwrap()
}

fn id() -> Uuid {
    Uuid::parse_str(ID).unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn assignment() -> Message {
    compose(
        "task_assignment",
        json!({"task_id": "task-456", "task_type": "scheduling", "title": "Dinner",
               "description": "Find a time", "payload": {"party_size": 2}}),
        me(),
        them(),
        id(),
        T0,
    )
    .unwrap()
}

fn ping(nonce: &str) -> Message {
    compose(
        "ping",
        json!({"nonce": nonce, "echo": {"x": 1}}),
        me(),
        them(),
        id(),
        T0,
    )
    .unwrap()
}

fn status_update() -> Message {
    compose(
        "status_update",
        json!({"task_id": "task-456", "status": "in_progress", "progress": 0.5}),
        me(),
        them(),
        id(),
        T0,
    )
    .unwrap()
}

fn sender(m: &Message) -> Sender {
    Sender::new(m, T0, SenderConfig::default()).unwrap()
}

/// A message from the receiver to the sender, as bytes.
fn answer(kind: &str, payload: Value) -> Vec<u8> {
    answer_between(kind, payload, THEM, ME)
}

fn answer_between(kind: &str, payload: Value, from: &str, to: &str) -> Vec<u8> {
    json!({
        "version": "1.0.0", "message_id": "9f8e7d6c-5b4a-4938-8271-605f4e3d2c1b",
        "timestamp": "2027-01-15T08:00:01Z", "from": from, "to": to, "type": kind,
        "payload": payload,
    })
    .to_string()
    .into_bytes()
}

fn error(code: ErrorCode) -> Vec<u8> {
    answer(
        "error",
        json!({"original_message_id": ID, "error_code": code, "error_message": "no"}),
    )
}

fn progress() -> Vec<u8> {
    answer(
        "status_update",
        json!({"task_id": "task-456", "status": "assigned"}),
    )
}

fn failures(s: &mut Sender) -> Vec<(u32, Option<Duration>)> {
    std::iter::from_fn(|| s.poll_event())
        .map(
            |Event::AttemptFailed {
                 attempt, retry_in, ..
             }| (attempt, retry_in),
        )
        .collect()
}

/// Sends and answers each attempt with `answers` in turn (`None`: the connection is
/// refused), each answer arriving 100 ms after its request; returns the times the
/// attempts went out.
fn run(s: &mut Sender, answers: &[Option<(u16, Vec<u8>)>]) -> Vec<Timestamp> {
    let mut sent = Vec::new();
    let mut now = T0;
    for a in answers {
        let t = s.poll_transmit(now).expect("an attempt is due");
        assert_eq!(t.attempt as usize, sent.len() + 1);
        sent.push(now);
        now = now.add(Duration::from_millis(100));
        match a {
            Some((status, body)) => s.handle_response(now, *status, None, body),
            None => s.handle_network_error(now, "connection refused"),
        }
        match s.poll_timeout() {
            Some(next) => {
                assert!(s.poll_transmit(now).is_none() || next <= now);
                now = next;
            }
            None => break,
        }
    }
    sent
}

#[test]
fn a_ping_is_acknowledged_by_its_echo() {
    let m = ping("n-1");
    let mut s = sender(&m);
    assert_eq!(s.poll_timeout(), Some(T0));
    let t = s.poll_transmit(T0).unwrap();
    assert_eq!(t.path, "/a2a/messages");
    assert_eq!(t.attempt, 1);
    assert_eq!(t.ack_deadline, secs(10));
    assert_eq!(t.deadline, T0.add(secs(10)));
    assert_eq!(envelope::validate(&t.body).unwrap(), m);
    assert!(s.poll_transmit(T0).is_none(), "one attempt at a time");
    s.handle_response(
        T0.add(secs(1)),
        200,
        None,
        &answer("ping", json!({"nonce": "n-1", "echo": {"x": 1}})),
    );
    match s.outcome().unwrap() {
        Outcome::Acknowledged {
            attempts: 1,
            status: 200,
            answer: Some(a),
        } => assert_eq!(a.payload.type_name(), "ping"),
        o => panic!("{o:?}"),
    }
    assert!(s.is_done());
    assert_eq!(s.poll_timeout(), None);
    assert_eq!(s.poll_event(), None);
}

#[test]
fn a_ping_echo_with_another_nonce_is_a_failure_not_retried() {
    let mut s = sender(&ping("n-1"));
    run(
        &mut s,
        &[Some((200, answer("ping", json!({"nonce": "n-2"}))))],
    );
    match s.outcome().unwrap() {
        Outcome::Failed {
            attempts: 1,
            failure: AttemptFailure::BadAnswer { status: 200, why },
        } => assert!(why.contains("nonce"), "{why}"),
        o => panic!("{o:?}"),
    }
    // Nor is a ping answered by something else than its echo.
    let mut s = sender(&ping("n-1"));
    run(&mut s, &[Some((200, progress()))]);
    assert!(
        matches!(s.outcome(), Some(Outcome::Failed { attempts: 1, .. })),
        "{:?}",
        s.outcome()
    );
}

#[test]
fn acknowledgement_deadlines_are_30_s_for_an_assignment_10_s_otherwise() {
    let mut s = sender(&assignment());
    assert_eq!(s.poll_transmit(T0).unwrap().ack_deadline, secs(30));
    assert_eq!(
        sender(&status_update())
            .poll_transmit(T0)
            .unwrap()
            .ack_deadline,
        secs(10)
    );
    let c = compose(
        "task_completion",
        json!({"task_id": "t", "status": "completed", "result": {}}),
        me(),
        them(),
        id(),
        T0,
    )
    .unwrap();
    assert_eq!(sender(&c).poll_transmit(T0).unwrap().ack_deadline, secs(10));
    let short = SenderConfig {
        ack_deadline: Some(Duration::from_millis(300)),
    };
    let mut s = Sender::new(&assignment(), T0, short).unwrap();
    assert_eq!(
        s.poll_transmit(T0).unwrap().deadline,
        T0.add(Duration::from_millis(300))
    );
}

#[test]
fn internal_error_twice_then_acknowledged_three_attempts_one_then_two_seconds_apart() {
    let mut s = sender(&assignment());
    let mut now = T0;
    let mut sent = Vec::new();
    // Step by step, on the virtual clock.
    let t = s.poll_transmit(now).unwrap();
    sent.push((now, t.body.clone()));
    now = now.add(Duration::from_millis(100));
    s.handle_response(now, 500, None, &error(ErrorCode::InternalError));
    let next = s.poll_timeout().unwrap();
    assert_eq!(next, now.add(secs(1)), "the first wait is 1 s");
    assert!(s
        .poll_transmit(now.add(Duration::from_millis(999)))
        .is_none());
    now = next;
    let t = s.poll_transmit(now).unwrap();
    sent.push((now, t.body.clone()));
    now = now.add(Duration::from_millis(100));
    s.handle_response(now, 500, None, &error(ErrorCode::InternalError));
    let next = s.poll_timeout().unwrap();
    assert_eq!(next, now.add(secs(2)), "the second wait is 2 s");
    now = next;
    let t = s.poll_transmit(now).unwrap();
    assert_eq!(t.attempt, 3);
    sent.push((now, t.body.clone()));
    s.handle_response(now.add(Duration::from_millis(100)), 200, None, &progress());
    assert!(
        matches!(
            s.outcome(),
            Some(Outcome::Acknowledged {
                attempts: 3,
                status: 200,
                answer: Some(_)
            })
        ),
        "{:?}",
        s.outcome()
    );
    assert_eq!(
        failures(&mut s),
        vec![(1, Some(secs(1))), (2, Some(secs(2)))]
    );
    // The same bytes, so the same message_id, on every attempt.
    assert!(sent.iter().all(|(_, b)| *b == sent[0].1));
    assert_eq!(
        envelope::validate(&sent[2].1).unwrap().message_id,
        id(),
        "the message keeps its id"
    );
}

#[test]
fn timeout_and_internal_error_are_retried_until_three_attempts() {
    for code in [ErrorCode::Timeout, ErrorCode::InternalError] {
        let mut s = sender(&assignment());
        let sent = run(
            &mut s,
            &[
                Some((500, error(code))),
                Some((500, error(code))),
                Some((500, error(code))),
            ],
        );
        assert_eq!(sent.len(), 3);
        assert_eq!(sent[1].since(sent[0]), Duration::from_millis(1_100));
        assert_eq!(sent[2].since(sent[1]), Duration::from_millis(2_100));
        match s.outcome().unwrap() {
            Outcome::GaveUp {
                attempts: 3,
                last: AttemptFailure::Refused { code: c, .. },
            } => assert_eq!(*c, code),
            o => panic!("{o:?}"),
        }
        assert_eq!(s.outcome().unwrap().error_code(), Some(code));
        assert_eq!(
            failures(&mut s),
            vec![(1, Some(secs(1))), (2, Some(secs(2))), (3, None)]
        );
    }
}

#[test]
fn codes_about_the_message_end_the_sending_after_one_attempt() {
    for code in ErrorCode::ALL.into_iter().filter(|c| !c.retryable()) {
        let mut s = sender(&assignment());
        run(&mut s, &[Some((code.http_status(), error(code)))]);
        match s.outcome().unwrap() {
            Outcome::Refused {
                attempts: 1,
                code: c,
                status,
                message,
                answer,
            } => {
                assert_eq!(*c, code);
                assert_eq!(*status, code.http_status());
                assert_eq!(message, "no");
                assert_eq!(answer.payload.type_name(), "error");
            }
            o => panic!("{code}: {o:?}"),
        }
        assert_eq!(failures(&mut s), vec![(1, None)], "{code}");
        assert!(s.outcome().unwrap().to_string().contains(code.as_str()));
    }
}

#[test]
fn an_error_is_classified_by_its_code_whatever_the_http_status() {
    // A 200 carrying an `error` is a refusal all the same …
    let mut s = sender(&assignment());
    run(&mut s, &[Some((200, error(ErrorCode::InvalidTaskType)))]);
    assert!(matches!(
        s.outcome(),
        Some(Outcome::Refused {
            code: ErrorCode::InvalidTaskType,
            ..
        })
    ));
    // … and a 500 carrying a code that is never retried ends the sending.
    let mut s = sender(&assignment());
    run(&mut s, &[Some((500, error(ErrorCode::CapabilityMismatch)))]);
    assert_eq!(s.attempts(), 1);
    // An `error` sent is acknowledged by the receiver's echo of it.
    let e = compose(
        "error",
        json!({"error_code": "TIMEOUT", "error_message": "slow"}),
        me(),
        them(),
        id(),
        T0,
    )
    .unwrap();
    let mut s = sender(&e);
    run(
        &mut s,
        &[Some((
            200,
            answer(
                "error",
                json!({"error_code": "TIMEOUT", "error_message": "slow"}),
            ),
        ))],
    );
    assert!(
        matches!(s.outcome(), Some(Outcome::Acknowledged { .. })),
        "{:?}",
        s.outcome()
    );
}

#[test]
fn a_refused_connection_is_retried_then_given_up() {
    let mut s = sender(&ping("n"));
    let sent = run(&mut s, &[None, None, None]);
    assert_eq!(sent.len(), 3);
    match s.outcome().unwrap() {
        Outcome::GaveUp {
            attempts: 3,
            last: AttemptFailure::Network(w),
        } => assert!(w.contains("refused")),
        o => panic!("{o:?}"),
    }
    assert_eq!(s.outcome().unwrap().error_code(), None);
    assert_eq!(
        failures(&mut s),
        vec![(1, Some(secs(1))), (2, Some(secs(2))), (3, None)]
    );
    assert!(s.poll_transmit(T0.add(secs(3600))).is_none());
}

#[test]
fn no_answer_by_the_deadline_is_retried() {
    let mut s = sender(&assignment());
    let t = s.poll_transmit(T0).unwrap();
    assert_eq!(s.poll_timeout(), Some(t.deadline));
    s.handle_timeout(T0.add(secs(29)));
    assert!(!s.is_done() && s.poll_event().is_none(), "not yet");
    s.handle_timeout(t.deadline);
    assert_eq!(
        s.poll_event(),
        Some(Event::AttemptFailed {
            attempt: 1,
            failure: AttemptFailure::NoAnswer { waited: secs(30) },
            retry_in: Some(secs(1)),
        })
    );
    assert_eq!(s.poll_timeout(), Some(t.deadline.add(secs(1))));
    // A late answer to the abandoned attempt changes nothing.
    s.handle_response(t.deadline.add(secs(1)), 200, None, &progress());
    assert!(!s.is_done());
    let t2 = s.poll_transmit(t.deadline.add(secs(1))).unwrap();
    assert_eq!(t2.attempt, 2);
    s.handle_timeout(t2.deadline);
    let t3 = s.poll_transmit(s.poll_timeout().unwrap()).unwrap();
    s.handle_timeout(t3.deadline);
    assert!(matches!(
        s.outcome(),
        Some(Outcome::GaveUp {
            attempts: 3,
            last: AttemptFailure::NoAnswer { .. }
        })
    ));
}

#[test]
fn http_errors_without_a_seed_error() {
    // 5xx: INTERNAL_ERROR, retried; 408: TIMEOUT, retried.
    for status in [500, 502, 503, 408] {
        let mut s = sender(&assignment());
        run(
            &mut s,
            &[
                Some((status, b"<html>Bad Gateway</html>".to_vec())),
                Some((200, progress())),
            ],
        );
        assert!(
            matches!(s.outcome(), Some(Outcome::Acknowledged { attempts: 2, .. })),
            "{status}: {:?}",
            s.outcome()
        );
    }
    // Any other status without an error: a failure, not retried.
    for status in [400, 404, 413, 301, 302] {
        let mut s = sender(&assignment());
        run(&mut s, &[Some((status, b"not found".to_vec()))]);
        match s.outcome().unwrap() {
            Outcome::Failed {
                attempts: 1,
                failure: AttemptFailure::BadAnswer { status: st, .. },
            } => assert_eq!(*st, status),
            o => panic!("{status}: {o:?}"),
        }
    }
}

#[test]
fn answers_that_are_not_the_acknowledgement_are_failures_not_retried() {
    let other = "11111111-2222-4333-8444-555555555555";
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not JSON", b"OK".to_vec(), "not a seed-001 message"),
        (
            "JSON, not a message",
            br#"{"ok": true}"#.to_vec(),
            "not a seed-001 message",
        ),
        (
            "a message of an unknown type",
            answer("ack", json!({})),
            "UNSUPPORTED_MESSAGE_TYPE",
        ),
        (
            "a payload field unknown",
            answer(
                "status_update",
                json!({"task_id": "t", "status": "assigned", "x": 1}),
            ),
            "PAYLOAD_VALIDATION_FAILED",
        ),
        ("empty, to an assignment", Vec::new(), "empty answer"),
        (
            "addressed to someone else",
            answer_between(
                "status_update",
                json!({"task_id": "t", "status": "assigned"}),
                THEM,
                other,
            ),
            "addressed to",
        ),
        (
            "from someone else",
            answer_between(
                "status_update",
                json!({"task_id": "t", "status": "assigned"}),
                other,
                ME,
            ),
            "comes from",
        ),
        (
            "an error about another message",
            answer(
                "error",
                json!({"original_message_id": other, "error_code": "INTERNAL_ERROR", "error_message": "x"}),
            ),
            "about message",
        ),
    ];
    for (what, body, words) in cases {
        let mut s = sender(&assignment());
        run(&mut s, &[Some((200, body))]);
        match s.outcome().unwrap() {
            Outcome::Failed {
                attempts: 1,
                failure: f @ AttemptFailure::BadAnswer { .. },
            } => assert!(f.to_string().contains(words), "{what}: {f}"),
            o => panic!("{what}: {o:?}"),
        }
    }
}

#[test]
fn an_error_from_another_agent_is_still_the_refusal() {
    // AGENT_NOT_FOUND comes from the agent that is there, not the one addressed.
    let other = "11111111-2222-4333-8444-555555555555";
    let mut s = sender(&ping("n"));
    run(
        &mut s,
        &[Some((
            404,
            answer_between(
                "error",
                json!({"original_message_id": ID, "error_code": "AGENT_NOT_FOUND", "error_message": "no agent"}),
                other,
                ME,
            ),
        ))],
    );
    match s.outcome().unwrap() {
        Outcome::Refused {
            code: ErrorCode::AgentNotFound,
            answer,
            ..
        } => assert_eq!(answer.from.to_string(), other),
        o => panic!("{o:?}"),
    }
}

#[test]
fn a_status_update_needs_no_answer_but_its_acknowledgement() {
    let mut s = sender(&status_update());
    run(&mut s, &[Some((204, Vec::new()))]);
    assert!(matches!(
        s.outcome(),
        Some(Outcome::Acknowledged {
            attempts: 1,
            status: 204,
            answer: None
        })
    ));
}

#[test]
fn an_answer_over_the_cap_is_a_failure() {
    let mut s = sender(&ping("n"));
    s.poll_transmit(T0).unwrap();
    s.handle_answer_too_large(T0.add(secs(1)));
    assert!(matches!(
        s.outcome(),
        Some(Outcome::Failed {
            attempts: 1,
            failure: AttemptFailure::AnswerTooLarge
        })
    ));
    // And a body handed over whole that is over the cap, the same.
    let mut s = sender(&ping("n"));
    s.poll_transmit(T0).unwrap();
    s.handle_response(T0, 200, None, &vec![b' '; MAX_ANSWER_BYTES + 1]);
    assert!(matches!(
        s.outcome(),
        Some(Outcome::Failed {
            failure: AttemptFailure::AnswerTooLarge,
            ..
        })
    ));
}

#[test]
fn rate_limited_waits_for_retry_after_within_the_fifteen_second_bound() {
    // Without Retry-After: the seed's wait.
    let mut s = sender(&ping("n"));
    s.poll_transmit(T0).unwrap();
    s.handle_response(T0, 429, None, b"slow down");
    assert_eq!(s.poll_timeout(), Some(T0.add(secs(1))));
    // Retry-After longer than the backoff: honoured.
    let mut s = sender(&ping("n"));
    s.poll_transmit(T0).unwrap();
    s.handle_response(T0, 429, Some("5"), b"");
    assert_eq!(s.poll_timeout(), Some(T0.add(secs(5))));
    let t = s.poll_transmit(T0.add(secs(5))).unwrap();
    // Then 10 s more would make 15 s: still within the bound …
    s.handle_response(t.deadline, 429, Some("10"), b"");
    assert_eq!(s.poll_timeout(), Some(t.deadline.add(secs(10))));
    // … and the third attempt is the last.
    let t = s.poll_transmit(t.deadline.add(secs(10))).unwrap();
    assert_eq!(t.attempt, 3);
    s.handle_response(t.deadline, 429, Some("1"), b"");
    assert!(matches!(
        s.outcome(),
        Some(Outcome::GaveUp {
            attempts: 3,
            last: AttemptFailure::RateLimited { .. }
        })
    ));
    // A Retry-After past the bound: given up at once, not waited for.
    let mut s = sender(&ping("n"));
    s.poll_transmit(T0).unwrap();
    s.handle_response(T0, 429, Some("16"), b"");
    match s.outcome().unwrap() {
        Outcome::GaveUp {
            attempts: 1,
            last: AttemptFailure::RateLimited { retry_after },
        } => assert_eq!(*retry_after, Some(secs(16))),
        o => panic!("{o:?}"),
    }
    let mut s = sender(&ping("n"));
    s.poll_transmit(T0).unwrap();
    s.handle_response(T0, 429, Some("12"), b"");
    let t = s.poll_transmit(T0.add(secs(12))).unwrap();
    s.handle_response(t.deadline, 429, Some("4"), b"");
    assert!(
        matches!(s.outcome(), Some(Outcome::GaveUp { attempts: 2, .. })),
        "12 + 4 s is past the 15 s bound: {:?}",
        s.outcome()
    );
}

#[test]
fn retry_after_is_seconds_or_an_http_date() {
    let now = Timestamp::parse_rfc3339("2026-11-24T15:30:00Z").unwrap();
    assert_eq!(retry_after("7", now), Some(secs(7)));
    assert_eq!(retry_after(" 0 ", now), Some(secs(0)));
    assert_eq!(
        retry_after("Tue, 24 Nov 2026 15:30:09 GMT", now),
        Some(secs(9))
    );
    assert_eq!(
        retry_after("Tue, 24 Nov 2026 15:00:00 GMT", now),
        Some(secs(0))
    );
    for bad in ["", "-1", "1.5", "soon", "99999999999999999999"] {
        assert_eq!(retry_after(bad, now), None, "{bad}");
    }
}

#[test]
fn a_sender_never_sends_what_a_receiver_would_refuse() {
    let bad: Vec<(&str, Value, ErrorCode)> = vec![
        ("gossip", json!({}), ErrorCode::UnsupportedMessageType),
        ("ping", json!({}), ErrorCode::PayloadValidationFailed),
        (
            "ping",
            json!({"nonce": "n", "x": 1}),
            ErrorCode::PayloadValidationFailed,
        ),
        (
            "status_update",
            json!({"task_id": "t", "status": "in_progress", "progress": 2}),
            ErrorCode::PayloadValidationFailed,
        ),
        (
            "task_assignment",
            json!({"task_id": "t", "task_type": "x", "title": "t", "description": "d", "payload": {}, "priority": "asap"}),
            ErrorCode::PayloadValidationFailed,
        ),
        (
            "ping",
            json!("not an object"),
            ErrorCode::InvalidMessageFormat,
        ),
    ];
    for (kind, payload, code) in bad {
        let e = compose(kind, payload.clone(), me(), them(), id(), T0).unwrap_err();
        assert_eq!(e.code, code, "{kind} {payload}: {e}");
    }
    // The task type is the receiver's to judge: any is sent.
    let m = compose(
        "task_assignment",
        json!({"task_id": "t", "task_type": "research", "title": "t", "description": "d", "payload": {}}),
        me(),
        them(),
        id(),
        T0,
    )
    .unwrap();
    assert!(Sender::new(&m, T0, SenderConfig::default()).is_ok());
    // A body given whole is checked the same way.
    let not_v4 = String::from_utf8(error(ErrorCode::Timeout))
        .unwrap()
        .replace(ME, "00000000-0000-0000-0000-000000000000");
    let e = Sender::from_body(not_v4.as_bytes(), T0, SenderConfig::default()).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidMessageFormat);
    assert!(Sender::from_body(b"{}", T0, SenderConfig::default()).is_err());
}

#[test]
fn message_ids_are_v4_from_the_seeded_generator() {
    let a = message_id(&mut DetRng::from_seed([7; 32]));
    let b = message_id(&mut DetRng::from_seed([7; 32]));
    assert_eq!(a, b, "the same seed, the same id");
    assert_eq!(a.get_version_num(), 4);
    let mut rng = DetRng::from_seed([7; 32]);
    assert_ne!(message_id(&mut rng), message_id(&mut rng));
}

#[test]
fn endpoints_from_base_urls() {
    for (url, want) in [
        (
            "http://127.0.0.1:7410",
            "http://127.0.0.1:7410/a2a/messages",
        ),
        (
            "http://127.0.0.1:7410/",
            "http://127.0.0.1:7410/a2a/messages",
        ),
        (
            "https://agent.example/a2a/messages",
            "https://agent.example/a2a/messages",
        ),
        (
            "https://agent.example/bob/",
            "https://agent.example/bob/a2a/messages",
        ),
        ("HTTP://h/a2a/messages/", "HTTP://h/a2a/messages"),
    ] {
        assert_eq!(endpoint(url).unwrap(), want, "{url}");
    }
    for bad in [
        "ftp://h",
        "h:7410",
        "http://",
        "http:///x",
        "http://h/?x=1",
        "http://h/#f",
    ] {
        assert!(endpoint(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_stray_answer_and_early_polls_change_nothing() {
    let mut s = sender(&ping("n"));
    s.handle_response(T0, 200, None, b"{}");
    s.handle_network_error(T0, "x");
    s.handle_timeout(T0.add(secs(100)));
    assert!(!s.is_done() && s.poll_event().is_none() && s.attempts() == 0);
    assert!(s.poll_transmit(T0).is_some());
}

#[test]
fn the_listeners_timeout_error_is_a_retried_timeout() {
    let m = assignment();
    let body = m.to_json().to_string();
    let reply = envelope::timeout_reply(
        them(),
        body.as_bytes(),
        Uuid::parse_str("9f8e7d6c-5b4a-4938-8271-605f4e3d2c1b").unwrap(),
        "2027-01-15T08:00:01Z",
    );
    let mut s = sender(&m);
    s.poll_transmit(T0).unwrap();
    s.handle_response(T0, 500, None, reply.to_string().as_bytes());
    match s.poll_event() {
        Some(Event::AttemptFailed {
            failure: AttemptFailure::Refused { code, .. },
            retry_in: Some(_),
            ..
        }) => assert_eq!(code, ErrorCode::Timeout),
        e => panic!("{e:?}"),
    }
}

#[test]
fn an_agents_phase1_id_is_a_v4_made_from_its_key() {
    let k = [0xab; 32];
    let a = envelope::agent_id_of(&k);
    assert_eq!(a.get_version_num(), 4);
    assert_eq!(a, envelope::agent_id_of(&k));
    assert_ne!(a, envelope::agent_id_of(&[0xac; 32]));
}
