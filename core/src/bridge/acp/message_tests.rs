//! The message's rules one by one (each header missing and malformed, the types' `id`
//! rules, the shape, sizes), the signature, the encrypted body, the worked example of
//! docs/protocol.md, and a property: arbitrary bytes never panic the parser.

use serde_json::{json, Map, Value};

use crate::bridge::acp::error::{code, AcpError, HEADERS};
use crate::bridge::acp::headers::{Headers, MessageType};
use crate::bridge::acp::message::{Kind, Message, Method, MAX_DEPTH, MAX_MESSAGE};
use crate::bridge::acp::{seal, sign};
use crate::crypto::IdentityKey;
use crate::time::Timestamp;

const DOC: &str = include_str!("../../../../docs/protocol.md");

fn seq(x: u8) -> [u8; 32] {
    std::array::from_fn(|i| x.wrapping_add(i as u8))
}

fn alpha() -> IdentityKey {
    IdentityKey::from_seed(seq(0x00))
}

fn beta() -> IdentityKey {
    IdentityKey::from_seed(seq(0x20))
}

/// The request of seed 004 §8, from agent-alpha.
fn example_headers() -> Headers {
    Headers {
        agent_id: "agent-alpha".into(),
        principal_id: "principal-a".into(),
        timestamp: "2026-02-14T14:30:00Z".into(),
        time: Timestamp::parse_rfc3339("2026-02-14T14:30:00Z").unwrap(),
        message_type: MessageType::Request,
        trust_layer_version: "1.0.0".into(),
        skill_layers_loaded: vec![0, 1, 2, 3],
    }
}

fn example_body() -> Map<String, Value> {
    json!({
        "action": "get-availability",
        "parameters": {"date_range": "2026-02-17/2026-02-21", "duration_minutes": 60}
    })
    .as_object()
    .cloned()
    .unwrap()
}

fn example() -> String {
    Message::build(
        &Kind::Call(Method::Request),
        Some("req-7f3a-4b2c-9d1e"),
        &example_headers(),
        Some(&example_body()),
        &alpha(),
    )
    .unwrap()
}

fn example_value() -> Value {
    serde_json::from_str(&example()).unwrap()
}

/// `v` re-signed by agent-alpha after `f` changed it.
fn resigned(f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v = example_value();
    f(&mut v);
    if v.get("params").and_then(Value::as_object).is_some() {
        let _ = sign::sign(&mut v, &alpha());
    }
    serde_json::to_vec(&v).unwrap()
}

/// `v` changed by `f`, not signed again.
fn edited(f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v = example_value();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

fn parse_err(bytes: &[u8]) -> AcpError {
    Message::parse(bytes).expect_err("refused")
}

#[test]
fn the_seed_request_parses_and_verifies() {
    let m = Message::parse(example().as_bytes()).unwrap();
    assert_eq!(m.kind, Kind::Call(Method::Request));
    assert_eq!(m.id.as_deref(), Some("req-7f3a-4b2c-9d1e"));
    assert_eq!(m.headers, example_headers());
    assert_eq!(m.body, example_body());
    sign::verify(&m.value, alpha().public_ref()).unwrap();
}

#[test]
fn each_header_missing_is_refused_by_name() {
    for h in HEADERS {
        for missing in [None, Some(Value::Null)] {
            let bytes = resigned(|v| {
                let hs = v["params"]["headers"].as_object_mut().unwrap();
                match &missing {
                    None => hs.remove(h),
                    Some(n) => hs.insert(h.into(), n.clone()),
                };
            });
            let e = parse_err(&bytes);
            assert_eq!(e, AcpError::HeaderMissing(h), "{h}");
            assert_eq!(e.code(), code::HEADER_MISSING);
            assert_eq!(e.header(), Some(h));
        }
    }
}

#[test]
fn each_header_malformed_is_refused_by_name() {
    let cases: &[(&str, Value)] = &[
        ("agent-id", json!(7)),
        ("agent-id", json!("")),
        ("agent-id", json!("Agent-Alpha")),
        ("agent-id", json!("agent.alpha")),
        ("agent-id", json!("-alpha")),
        ("agent-id", json!("a".repeat(65))),
        ("principal-id", json!("")),
        ("principal-id", json!("line\nbreak")),
        ("principal-id", json!(["principal-a"])),
        ("principal-id", json!("p".repeat(129))),
        ("timestamp", json!("yesterday")),
        ("timestamp", json!("2026-02-14")),
        ("timestamp", json!(1_771_079_400)),
        ("message-type", json!("query")),
        ("message-type", json!("Request")),
        ("message-type", json!("notification")),
        ("message-type", json!("response")),
        ("trust-layer-version", json!("1.0")),
        ("trust-layer-version", json!("01.0.0")),
        ("trust-layer-version", json!("2.0.0")),
        ("trust-layer-version", json!("1.0.0-rc1")),
        ("trust-layer-version", json!(1)),
        ("skill-layers-loaded", json!("0,1")),
        ("skill-layers-loaded", json!([0, -1])),
        ("skill-layers-loaded", json!([0, 1.5])),
        ("skill-layers-loaded", json!([0, "1"])),
        ("skill-layers-loaded", json!([0, 0])),
        ("skill-layers-loaded", json!([64])),
        ("skill-layers-loaded", json!((0..17).collect::<Vec<_>>())),
    ];
    for (h, bad) in cases {
        let bytes = resigned(|v| {
            v["params"]["headers"][*h] = bad.clone();
        });
        let e = parse_err(&bytes);
        assert!(
            matches!(e, AcpError::HeaderMalformed { header, .. } if header == *h),
            "{h} = {bad}: {e:?}"
        );
        assert_eq!(e.code(), code::HEADER_MALFORMED);
    }
}

#[test]
fn the_first_bad_header_in_order_answers() {
    let bytes = resigned(|v| {
        let hs = v["params"]["headers"].as_object_mut().unwrap();
        hs.remove("skill-layers-loaded");
        hs.insert("timestamp".into(), json!("nope"));
    });
    assert_eq!(parse_err(&bytes).header(), Some("timestamp"));
    let bytes = resigned(|v| {
        v["params"].as_object_mut().unwrap().remove("headers");
    });
    assert_eq!(parse_err(&bytes), AcpError::HeaderMissing("agent-id"));
}

#[test]
fn the_types_id_rules() {
    // A request without an id, with a number as id.
    let e = parse_err(&resigned(|v| {
        v.as_object_mut().unwrap().remove("id");
    }));
    assert_eq!(e.code(), code::INVALID_REQUEST);
    let e = parse_err(&resigned(|v| v["id"] = json!(7)));
    assert_eq!(e.code(), code::INVALID_REQUEST);
    // A notification with an id.
    let e = parse_err(&resigned(|v| {
        v["method"] = json!("agent.notification");
        v["params"]["headers"]["message-type"] = json!("notification");
    }));
    assert_eq!(
        e,
        AcpError::InvalidRequest("a notification has no `id`".into())
    );
    // A response must reference an id.
    let h = Headers {
        message_type: MessageType::Response,
        ..example_headers()
    };
    let r = Message::build(&Kind::Result, None, &h, Some(&Map::new()), &alpha());
    assert!(r.is_err());
    let r = Message::build(
        &Kind::Result,
        Some("req-7f3a-4b2c-9d1e"),
        &h,
        Some(&Map::new()),
        &alpha(),
    )
    .unwrap();
    let m = Message::parse(r.as_bytes()).unwrap();
    assert_eq!(
        (m.kind, m.id.as_deref()),
        (Kind::Result, Some("req-7f3a-4b2c-9d1e"))
    );
    // A notification parses without one.
    let h = Headers {
        message_type: MessageType::Notification,
        ..example_headers()
    };
    let n = Message::build(
        &Kind::Call(Method::Notification),
        None,
        &h,
        Some(&Map::new()),
        &alpha(),
    )
    .unwrap();
    assert!(!n.contains("\"id\""));
    assert_eq!(Message::parse(n.as_bytes()).unwrap().id, None);
}

#[test]
fn shape_method_and_body_rules() {
    let cases: Vec<(Vec<u8>, i64)> = vec![
        (b"{".to_vec(), code::PARSE_ERROR),
        (b"[1]".to_vec(), code::INVALID_REQUEST),
        (
            resigned(|v| v["jsonrpc"] = json!("1.0")),
            code::INVALID_REQUEST,
        ),
        (
            resigned(|v| v["method"] = json!("agent.dance")),
            code::METHOD_NOT_FOUND,
        ),
        (
            resigned(|v| v["method"] = json!("agent.response")),
            code::METHOD_NOT_FOUND,
        ),
        (resigned(|v| v["extra"] = json!(1)), code::INVALID_REQUEST),
        (resigned(|v| v["result"] = json!({})), code::INVALID_REQUEST),
        (
            resigned(|v| {
                v["params"].as_object_mut().unwrap().remove("body");
            }),
            code::INVALID_PARAMS,
        ),
        (
            resigned(|v| v["params"]["body"] = json!([1])),
            code::INVALID_PARAMS,
        ),
        (
            edited(|v| {
                v["params"].as_object_mut().unwrap().remove("signature");
            }),
            code::BAD_SIGNATURE,
        ),
        (
            edited(|v| v["params"]["signature"] = json!("AAAA")),
            code::BAD_SIGNATURE,
        ),
        (
            edited(|v| v["params"]["signature"] = json!(7)),
            code::BAD_SIGNATURE,
        ),
    ];
    for (bytes, want) in cases {
        let e = parse_err(&bytes);
        assert_eq!(
            e.code(),
            want,
            "{e:?} for {}",
            String::from_utf8_lossy(&bytes)
        );
    }
}

#[test]
fn oversized_and_deep_messages_are_refused_before_anything_else() {
    let big = resigned(|v| v["params"]["body"]["pad"] = json!("x".repeat(MAX_MESSAGE)));
    assert!(matches!(parse_err(&big), AcpError::TooLarge { .. }));
    assert_eq!(parse_err(&big).code(), code::TOO_LARGE);
    let mut deep = json!(1);
    for _ in 0..MAX_DEPTH {
        deep = json!([deep]);
    }
    let bytes = resigned(|v| v["params"]["body"]["deep"] = deep);
    assert_eq!(parse_err(&bytes), AcpError::TooDeep(MAX_DEPTH));
    // serde_json's own recursion bound holds far below the stack's.
    let nested = "[".repeat(100_000);
    assert_eq!(parse_err(nested.as_bytes()).code(), code::PARSE_ERROR);
}

#[test]
fn a_changed_byte_or_another_key_fails_the_signature() {
    let m = Message::parse(example().as_bytes()).unwrap();
    assert!(matches!(
        sign::verify(&m.value, beta().public_ref()),
        Err(AcpError::BadSignature(_))
    ));
    let mut v = example_value();
    v["params"]["body"]["parameters"]["duration_minutes"] = json!(61);
    assert!(sign::verify(&v, alpha().public_ref()).is_err());
    // Member order and whitespace do not matter: the signed form is canonical.
    let text = example().replace("\"jsonrpc\":\"2.0\",", "");
    let text = text.replacen('{', "{ \"jsonrpc\" : \"2.0\" ,\n", 1);
    let m = Message::parse(text.as_bytes()).unwrap();
    sign::verify(&m.value, alpha().public_ref()).unwrap();
}

#[test]
fn an_error_response_names_the_header_and_is_signed() {
    let h = Headers {
        message_type: MessageType::Response,
        ..example_headers()
    };
    let kind = Kind::Error {
        code: code::HEADER_MISSING,
        message: "missing header `timestamp`".into(),
        header: Some("timestamp".into()),
    };
    let text = Message::build(&kind, None, &h, None, &alpha()).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["id"], Value::Null);
    assert_eq!(v["error"]["data"]["header"], "timestamp");
    let m = Message::parse(text.as_bytes()).unwrap();
    assert_eq!(m.kind, kind);
    sign::verify(&m.value, alpha().public_ref()).unwrap();
}

#[test]
fn an_encrypted_body_opens_for_the_recipient_only() {
    let h = example_headers().to_json();
    let sealed = seal::seal(
        &example_body(),
        &h,
        "agent-alpha",
        "agent-beta",
        beta().public_ref(),
        seq(0x40),
    )
    .unwrap();
    assert!(seal::is_encrypted(&sealed));
    let opened = seal::open(&sealed, &h, "agent-alpha", "agent-beta", &beta()).unwrap();
    assert_eq!(opened, example_body());
    // Not for another key, another pair of agents, other headers, a changed byte.
    assert!(seal::open(&sealed, &h, "agent-alpha", "agent-beta", &alpha()).is_err());
    assert!(seal::open(&sealed, &h, "agent-gamma", "agent-beta", &beta()).is_err());
    let mut other = h.clone();
    other["timestamp"] = json!("2026-02-14T14:30:01Z");
    assert!(seal::open(&sealed, &other, "agent-alpha", "agent-beta", &beta()).is_err());
    let mut bad = sealed.clone();
    let ct = bad["encrypted"]["ct"].as_str().unwrap().to_string();
    let flipped = if ct.starts_with('A') { "B" } else { "A" };
    bad["encrypted"]["ct"] = json!(format!("{flipped}{}", &ct[1..]));
    assert!(matches!(
        seal::open(&bad, &h, "agent-alpha", "agent-beta", &beta()),
        Err(AcpError::Undecryptable(_))
    ));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn assert_documented(what: &str, text: &str) {
    assert!(
        DOC.contains(text),
        "docs/protocol.md's ACP {what} is stale; it must read:\n{text}"
    );
}

#[test]
fn the_worked_example_of_docs_protocol_md() {
    let text = example();
    let v: Value = serde_json::from_str(&text).unwrap();
    let signed = sign::signed_bytes(&v).unwrap();
    let canonical = String::from_utf8(signed[sign::SIG_LABEL.len()..].to_vec()).unwrap();
    assert_documented("public key", &hex(&alpha().public().to_bytes()));
    assert_documented("canonical form", &canonical);
    assert_documented("signed bytes", &hex(&signed));
    assert_documented(
        "signature",
        &hex(&crate::encoding::b64_decode(v["params"]["signature"].as_str().unwrap()).unwrap()),
    );
    assert_documented("message", &text);
    // The encrypted body of the same request to agent-beta (ephemeral secret seq(0x40)).
    let sealed = seal::seal(
        &example_body(),
        &example_headers().to_json(),
        "agent-alpha",
        "agent-beta",
        beta().public_ref(),
        seq(0x40),
    )
    .unwrap();
    assert_documented("encrypted body", &Value::Object(sealed).to_string());
}

#[test]
fn arbitrary_bytes_never_panic_the_parser() {
    fn prop(bytes: Vec<u8>) -> bool {
        let _ = Message::parse(&bytes);
        true
    }
    fn prop_mutated(flips: Vec<(usize, u8)>) -> bool {
        let mut b = example().into_bytes();
        for (i, x) in flips {
            let n = b.len();
            b[i % n] = x;
        }
        if let Ok(m) = Message::parse(&b) {
            let _ = sign::verify(&m.value, alpha().public_ref());
        }
        true
    }
    quickcheck::QuickCheck::new()
        .tests(2000)
        .quickcheck(prop as fn(Vec<u8>) -> bool);
    quickcheck::QuickCheck::new()
        .tests(2000)
        .quickcheck(prop_mutated as fn(Vec<(usize, u8)>) -> bool);
}
