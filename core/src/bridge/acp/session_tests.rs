//! Two ACP sessions in memory: the handshake both ways, the four types, deadlines,
//! replays, refusals before the handshake, bad signatures, encryption, layers.

use serde_json::{json, Map, Value};

use crate::bridge::acp::error::{code, AcpError};
use crate::bridge::acp::handshake::{Capabilities, TrustLevel};
use crate::bridge::acp::headers::MessageType;
use crate::bridge::acp::message::{Kind, Message, Method};
use crate::bridge::acp::session::{
    AcpConfig, AcpEvent, AcpOutput, AcpSession, Handoff, SendError, DEFAULT_ANSWER_WITHIN,
};
use crate::bridge::acp::sign;
use crate::crypto::IdentityKey;
use crate::time::Timestamp;

fn seq(x: u8) -> [u8; 32] {
    std::array::from_fn(|i| x.wrapping_add(i as u8))
}

const T0: Timestamp = Timestamp(1_771_079_400_000); // 2026-02-14T14:30:00Z

fn body(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

struct Pair {
    a: AcpSession,
    b: AcpSession,
    /// Events of each side, in order.
    ea: Vec<AcpEvent>,
    eb: Vec<AcpEvent>,
    /// Messages each side sent, in order (JSON).
    sa: Vec<String>,
    sb: Vec<String>,
}

fn session(id: &str, principal: &str, seed: u8, layers: &[u8]) -> AcpSession {
    let mut c = AcpConfig::new(id, principal);
    c.layers = layers.to_vec();
    c.capabilities = Capabilities {
        tools: vec!["calendar".into()],
        domains: vec!["scheduling".into()],
        limits: body(json!({"max_requests_per_minute": 60})),
        requesting: vec!["availability".into()],
    };
    AcpSession::new(c, IdentityKey::from_seed(seq(seed)), seq(seed ^ 0x80))
}

impl Pair {
    fn new(la: &[u8], lb: &[u8]) -> Pair {
        let mut a = session("agent-alpha", "principal-a", 0x00, la);
        let mut b = session("agent-beta", "principal-b", 0x20, lb);
        a.register("agent-beta", IdentityKey::from_seed(seq(0x20)).public());
        b.register("agent-alpha", IdentityKey::from_seed(seq(0x00)).public());
        Pair {
            a,
            b,
            ea: vec![],
            eb: vec![],
            sa: vec![],
            sb: vec![],
        }
    }

    /// Delivers everything both sides send until nothing moves.
    fn pump(&mut self, now: Timestamp) {
        loop {
            let mut moved = false;
            while let Some(o) = self.a.poll_output() {
                moved = true;
                match o {
                    AcpOutput::Send { to, json } => {
                        assert_eq!(to, "agent-beta");
                        self.sa.push(json.clone());
                        self.b.handle(now, json.as_bytes());
                    }
                    // A refusal goes to whoever the refused message named, which need not
                    // be the other side (a damaged message may name anyone): only one
                    // for the other side is delivered.
                    AcpOutput::Refusal { to: Some(to), json } if to == "agent-beta" => {
                        self.sa.push(json.clone());
                        self.b.handle(now, json.as_bytes());
                    }
                    AcpOutput::Refusal { json, .. } => self.sa.push(json),
                    AcpOutput::Event(e) => self.ea.push(*e),
                }
            }
            while let Some(o) = self.b.poll_output() {
                moved = true;
                match o {
                    AcpOutput::Send { to, json } => {
                        assert_eq!(to, "agent-alpha");
                        self.sb.push(json.clone());
                        self.a.handle(now, json.as_bytes());
                    }
                    AcpOutput::Refusal { to: Some(to), json } if to == "agent-alpha" => {
                        self.sb.push(json.clone());
                        self.a.handle(now, json.as_bytes());
                    }
                    AcpOutput::Refusal { json, .. } => self.sb.push(json),
                    AcpOutput::Event(e) => self.eb.push(*e),
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn handshake(&mut self) {
        self.a.connect(T0, "agent-beta").unwrap();
        self.pump(T0);
        assert!(self.a.trust("agent-beta").is_some(), "{:?}", self.ea);
        assert!(self.b.trust("agent-alpha").is_some(), "{:?}", self.eb);
    }
}

fn methods(sent: &[String]) -> Vec<String> {
    sent.iter()
        .map(|j| {
            let v: Value = serde_json::from_str(j).unwrap();
            v.get("method")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| "response".into())
        })
        .collect()
}

fn refused(events: &[AcpEvent]) -> Vec<&AcpError> {
    events
        .iter()
        .filter_map(|e| match e {
            AcpEvent::Refused { error, .. } => Some(error),
            _ => None,
        })
        .collect()
}

/// A message of agent-alpha (key seq(0x00)) written by hand: `kind`, `id`, `body`.
fn alpha_says(now: Timestamp, kind: Kind, id: Option<&str>, b: Value) -> String {
    let s = session("agent-alpha", "principal-a", 0x00, &[0, 1, 2, 3]);
    let t = match kind {
        Kind::Call(m) => m.message_type(),
        _ => MessageType::Response,
    };
    let h = s.headers(now, t);
    Message::build(
        &kind,
        id,
        &h,
        Some(&body(b)),
        &IdentityKey::from_seed(seq(0x00)),
    )
    .unwrap()
}

#[test]
fn the_four_step_handshake_between_two_sessions() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.handshake();
    assert_eq!(methods(&p.sa), ["agent.announce", "agent.capabilities"]);
    assert_eq!(methods(&p.sb), ["agent.announce", "agent.capabilities"]);
    let est =
        p.eb.iter()
            .find_map(|e| match e {
                AcpEvent::Established {
                    peer,
                    principal,
                    trust,
                    capabilities,
                } => Some((peer, principal, trust, capabilities)),
                _ => None,
            })
            .unwrap();
    assert_eq!(est.0, "agent-alpha");
    assert_eq!(est.1, "principal-a");
    assert_eq!(est.2.level, TrustLevel::Baseline);
    assert_eq!(est.2.layer, 3);
    assert_eq!(est.3.tools, ["calendar"]);
    assert!(refused(&p.ea).is_empty() && refused(&p.eb).is_empty());
}

#[test]
fn both_announcing_at_once_completes_too() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2]);
    p.a.connect(T0, "agent-beta").unwrap();
    p.b.connect(T0, "agent-alpha").unwrap();
    p.pump(T0);
    assert_eq!(p.a.trust("agent-beta").unwrap().layer, 2);
    assert_eq!(p.b.trust("agent-alpha").unwrap().layer, 2);
    assert!(refused(&p.ea).is_empty() && refused(&p.eb).is_empty());
}

#[test]
fn known_principals_and_relationships_raise_initial_trust() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.b.config_mut()
        .known_principals
        .insert("principal-a".into());
    p.a.config_mut().relationships.insert("principal-b".into());
    p.handshake();
    assert_eq!(p.b.trust("agent-alpha").unwrap().level, TrustLevel::Known);
    assert_eq!(p.a.trust("agent-beta").unwrap().level, TrustLevel::Elevated);
}

#[test]
fn the_seed_exchange_request_and_response() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2]);
    p.handshake();
    let ask = body(json!({"action": "get-availability",
        "parameters": {"date_range": "2026-02-17/2026-02-21", "duration_minutes": 60}}));
    let id = p.a.request(T0, "agent-beta", &ask, false).unwrap();
    p.pump(T0);
    let (rid, deadline) =
        p.eb.iter()
            .find_map(|e| match e {
                AcpEvent::Request {
                    id, body, deadline, ..
                } if *body == ask => Some((id.clone(), *deadline)),
                _ => None,
            })
            .unwrap();
    assert_eq!(rid, id);
    assert_eq!(deadline, T0.add(DEFAULT_ANSWER_WITHIN));
    let slots = body(json!({"available_slots": ["2026-02-18T10:00:00Z"]}));
    p.b.respond(T0, "agent-alpha", &id, Ok(&slots), false)
        .unwrap();
    p.pump(T0);
    let resp: Value = serde_json::from_str(p.sb.last().unwrap()).unwrap();
    assert_eq!(resp["id"], json!(id));
    assert_eq!(resp["result"]["headers"]["message-type"], "response");
    assert!(p.ea.iter().any(|e| matches!(e,
        AcpEvent::Response { id: i, outcome: Ok(b), .. } if *i == id && *b == slots)));
    // Once only.
    assert_eq!(
        p.b.respond(T0, "agent-alpha", &id, Ok(&slots), false),
        Err(SendError::UnknownRequest(id.clone()))
    );
    // A response nobody waits for is refused, not answered.
    let n = p.sa.len();
    p.a.handle(T0, p.sb.last().unwrap().clone().as_bytes());
    p.pump(T0);
    assert_eq!(p.sa.len(), n);
    assert!(matches!(refused(&p.ea).last(), Some(AcpError::Replay(_))));
}

#[test]
fn an_unanswered_request_is_answered_with_an_error_at_its_deadline() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.handshake();
    let id =
        p.a.request(T0, "agent-beta", &body(json!({"action": "x"})), false)
            .unwrap();
    p.pump(T0);
    let due = p.b.poll_timeout().unwrap();
    assert_eq!(due, T0.add(DEFAULT_ANSWER_WITHIN));
    p.b.handle_timeout(Timestamp(due.0 - 1));
    p.pump(Timestamp(due.0 - 1));
    assert!(!p.eb.iter().any(|e| matches!(e, AcpEvent::TimedOut { .. })));
    p.b.handle_timeout(due);
    p.pump(due);
    assert!(p
        .eb
        .iter()
        .any(|e| matches!(e, AcpEvent::TimedOut { id: i, .. } if *i == id)));
    assert!(p.ea.iter().any(|e| matches!(e,
        AcpEvent::Response { id: i, outcome: Err(r), .. } if *i == id && r.code == code::TIMEOUT)));
    // Too late to answer now.
    assert!(p
        .b
        .respond(due, "agent-alpha", &id, Ok(&Map::new()), false)
        .is_err());
}

#[test]
fn the_requesters_wait_ends_and_it_forgets() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.handshake();
    let id =
        p.a.request(T0, "agent-beta", &body(json!({"action": "x"})), false)
            .unwrap();
    // Beta never hears it.
    while p.a.poll_output().is_some() {}
    let due = p.a.poll_timeout().unwrap();
    p.a.handle_timeout(due);
    p.pump(due);
    assert!(p
        .ea
        .iter()
        .any(|e| matches!(e, AcpEvent::Unanswered { id: i, .. } if *i == id)));
    assert_eq!(p.a.poll_timeout(), None);
}

#[test]
fn a_request_before_the_handshake_is_refused_and_answered() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    let m = alpha_says(
        T0,
        Kind::Call(Method::Request),
        Some("r1"),
        json!({"action": "x"}),
    );
    p.b.handle(T0, m.as_bytes());
    let outs: Vec<AcpOutput> = std::iter::from_fn(|| p.b.poll_output()).collect();
    let json = outs
        .iter()
        .find_map(|o| match o {
            AcpOutput::Refusal { to, json } => {
                assert_eq!(to.as_deref(), Some("agent-alpha"));
                Some(json.clone())
            }
            _ => None,
        })
        .unwrap();
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["id"], "r1");
    assert_eq!(v["error"]["code"], code::HANDSHAKE_REQUIRED);
    // Signed by beta.
    let m = Message::parse(json.as_bytes()).unwrap();
    sign::verify(&m.value, IdentityKey::from_seed(seq(0x20)).public_ref()).unwrap();
    // A notification before it is refused too, but not answered; so are capabilities
    // before the announcement.
    let n = alpha_says(T0, Kind::Call(Method::Notification), None, json!({}));
    p.b.handle(T0, n.as_bytes());
    let c = alpha_says(
        T0,
        Kind::Call(Method::Capabilities),
        None,
        json!({"tools": [], "domains": [], "limits": {}, "requesting": []}),
    );
    p.b.handle(T0, c.as_bytes());
    let outs: Vec<AcpOutput> = std::iter::from_fn(|| p.b.poll_output()).collect();
    assert!(
        outs.iter().all(|o| matches!(o, AcpOutput::Event(_))),
        "{outs:?}"
    );
    assert_eq!(
        outs.iter()
            .filter(|o| match o {
                AcpOutput::Event(e) => matches!(
                    **e,
                    AcpEvent::Refused {
                        error: AcpError::HandshakeRequired(_),
                        ..
                    }
                ),
                _ => false,
            })
            .count(),
        2
    );
}

#[test]
fn replays_by_id_signature_or_timestamp_are_refused() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.handshake();
    p.a.request(T0, "agent-beta", &body(json!({"action": "x"})), false)
        .unwrap();
    p.pump(T0);
    let req = p.sa.last().unwrap().clone();
    // The same request again.
    p.b.handle(T0, req.as_bytes());
    p.pump(T0);
    assert!(matches!(refused(&p.eb).last(), Some(AcpError::Replay(w)) if w.contains("id")));
    // Its refusal is not under its id (the original still waits for its answer).
    let v: Value = serde_json::from_str(p.sb.last().unwrap()).unwrap();
    assert_eq!(
        (v["id"].clone(), v["error"]["code"].clone()),
        (Value::Null, json!(code::REPLAY))
    );
    // The same notification again.
    p.a.notify(T0, "agent-beta", &body(json!({"status": "ok"})), false)
        .unwrap();
    p.pump(T0);
    let note = p.sa.last().unwrap().clone();
    p.b.handle(T0, note.as_bytes());
    assert_eq!(refused(&p.eb).len(), 1);
    while let Some(o) = p.b.poll_output() {
        if let AcpOutput::Event(e) = o {
            p.eb.push(*e);
        }
    }
    assert!(matches!(refused(&p.eb).last(), Some(AcpError::Replay(_))));
    // A fresh id with a timestamp outside the window, either way.
    for t in [T0.0 - 121_000, T0.0 + 121_000] {
        let m = alpha_says(
            Timestamp(t),
            Kind::Call(Method::Request),
            Some("fresh"),
            json!({}),
        );
        p.b.handle(T0, m.as_bytes());
        p.pump(T0);
        assert!(
            matches!(refused(&p.eb).last(), Some(AcpError::Replay(w)) if w.contains("timestamp"))
        );
    }
    // Within the window it is taken.
    let m = alpha_says(
        Timestamp(T0.0 - 119_000),
        Kind::Call(Method::Request),
        Some("fresh"),
        json!({}),
    );
    p.b.handle(T0, m.as_bytes());
    p.pump(T0);
    assert!(p
        .eb
        .iter()
        .any(|e| matches!(e, AcpEvent::Request { id, .. } if id == "fresh")));
}

#[test]
fn a_bad_signature_or_an_unknown_agent_is_refused_unprocessed() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.handshake();
    // Signed by another key than alpha's registered one.
    let mut s = session("agent-alpha", "principal-a", 0x77, &[0, 1, 2, 3]);
    s.register("agent-beta", IdentityKey::from_seed(seq(0x20)).public());
    let h = s.headers(T0, MessageType::Request);
    let forged = Message::build(
        &Kind::Call(Method::Request),
        Some("f1"),
        &h,
        Some(&body(json!({"action": "x"}))),
        &IdentityKey::from_seed(seq(0x77)),
    )
    .unwrap();
    p.b.handle(T0, forged.as_bytes());
    p.pump(T0);
    assert!(matches!(
        refused(&p.eb).last(),
        Some(AcpError::BadSignature(_))
    ));
    assert!(!p.eb.iter().any(|e| matches!(e, AcpEvent::Request { .. })));
    // A forgery does not count against the real peer's trust.
    assert_eq!(p.b.trust("agent-alpha").unwrap().refusals, 0);
    // A changed body under the right signature.
    p.a.request(T0, "agent-beta", &body(json!({"action": "x"})), false)
        .unwrap();
    while let Some(o) = p.a.poll_output() {
        if let AcpOutput::Send { json, .. } = o {
            let tampered = json.replace("\"x\"", "\"y\"");
            p.b.handle(T0, tampered.as_bytes());
        }
    }
    p.pump(T0);
    assert!(matches!(
        refused(&p.eb).last(),
        Some(AcpError::BadSignature(_))
    ));
    // An agent nobody registered.
    let mut gamma = session("agent-gamma", "principal-c", 0x40, &[0, 1]);
    gamma.register("agent-beta", IdentityKey::from_seed(seq(0x20)).public());
    gamma.connect(T0, "agent-beta").unwrap();
    while let Some(o) = gamma.poll_output() {
        if let AcpOutput::Send { json, .. } = o {
            p.b.handle(T0, json.as_bytes());
        }
    }
    p.pump(T0);
    assert!(matches!(refused(&p.eb).last(), Some(AcpError::UnknownAgent(a)) if a == "agent-gamma"));
    assert!(p.b.handshake("agent-gamma").is_none());
}

#[test]
fn a_header_missing_gets_an_error_naming_it() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.handshake();
    let m = alpha_says(T0, Kind::Call(Method::Request), Some("h1"), json!({}));
    let mut v: Value = serde_json::from_str(&m).unwrap();
    v["params"]["headers"]
        .as_object_mut()
        .unwrap()
        .remove("trust-layer-version");
    p.b.handle(T0, v.to_string().as_bytes());
    p.pump(T0);
    let e: Value = serde_json::from_str(p.sb.last().unwrap()).unwrap();
    assert_eq!(e["id"], "h1");
    assert_eq!(e["error"]["code"], code::HEADER_MISSING);
    assert_eq!(e["error"]["data"]["header"], "trust-layer-version");
    assert!(matches!(
        refused(&p.eb).last(),
        Some(AcpError::HeaderMissing("trust-layer-version"))
    ));
}

#[test]
fn an_oversized_message_is_refused_before_it_is_read() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.handshake();
    let big = body(json!({"pad": "x".repeat(300 * 1024)}));
    p.a.request(T0, "agent-beta", &big, false).unwrap();
    p.pump(T0);
    assert!(matches!(
        refused(&p.eb).last(),
        Some(AcpError::TooLarge { .. })
    ));
    let e: Value = serde_json::from_str(p.sb.last().unwrap()).unwrap();
    assert_eq!(e["error"]["code"], code::TOO_LARGE);
    assert_eq!(e["id"], Value::Null);
}

#[test]
fn sensitive_bodies_travel_encrypted_and_signed() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.handshake();
    let secret = body(json!({"action": "share", "home_address": "1 Secret Lane"}));
    let id = p.a.request(T0, "agent-beta", &secret, true).unwrap();
    p.pump(T0);
    let wire = p.sa.last().unwrap();
    assert!(!wire.contains("Secret Lane"));
    assert!(wire.contains("\"encrypted\""));
    assert!(p.eb.iter().any(|e| matches!(e,
        AcpEvent::Request { body, encrypted: true, .. } if *body == secret)));
    let answer = body(json!({"ok": "Secret Lane received"}));
    p.b.respond(T0, "agent-alpha", &id, Ok(&answer), true)
        .unwrap();
    p.pump(T0);
    assert!(!p.sb.last().unwrap().contains("Secret Lane"));
    assert!(p.ea.iter().any(|e| matches!(e,
        AcpEvent::Response { outcome: Ok(b), .. } if *b == answer)));
}

#[test]
fn handoffs_need_the_coordination_layer_both_ways() {
    let h = Handoff {
        completed: vec![json!("found three free slots")],
        remaining: vec![json!("book one")],
        context: body(json!({"slots": ["2026-02-18T10:00:00Z"]})),
        rest: Map::new(),
    };
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.handshake();
    let id = p.a.handoff(T0, "agent-beta", &h, false).unwrap();
    p.pump(T0);
    assert!(p.eb.iter().any(|e| matches!(e,
        AcpEvent::Handoff { id: i, handoff, .. } if *i == id && *handoff == h)));
    // A peer at layer 2 is spoken to at layer 2: no handoff either way.
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2]);
    p.handshake();
    assert!(matches!(
        p.a.handoff(T0, "agent-beta", &h, false),
        Err(SendError::Layers(_))
    ));
    let m = alpha_says(
        T0,
        Kind::Call(Method::Handoff),
        Some("h1"),
        Value::Object(h.to_body()),
    );
    p.b.handle(T0, m.as_bytes());
    p.pump(T0);
    assert!(matches!(refused(&p.eb).last(), Some(AcpError::Layers(_))));
    // A handoff without what remains is refused naming it.
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.handshake();
    let m = alpha_says(
        T0,
        Kind::Call(Method::Handoff),
        Some("h2"),
        json!({"completed": [], "context": {}}),
    );
    p.b.handle(T0, m.as_bytes());
    p.pump(T0);
    assert!(
        matches!(refused(&p.eb).last(), Some(AcpError::InvalidBody(w)) if w.contains("remaining"))
    );
}

#[test]
fn layers_decide_the_handshake() {
    // No layer declared: declined.
    let mut p = Pair::new(&[], &[0, 1]);
    p.a.connect(T0, "agent-beta").unwrap();
    p.pump(T0);
    assert!(matches!(refused(&p.eb).last(), Some(AcpError::Layers(_))));
    assert!(p.b.trust("agent-alpha").is_none());
    // No layer 0 in common: declined.
    let mut p = Pair::new(&[1, 2], &[0, 1]);
    p.a.connect(T0, "agent-beta").unwrap();
    p.pump(T0);
    assert!(matches!(refused(&p.eb).last(), Some(AcpError::Layers(_))));
    // [0] and [0, 1, 2, 3]: speak at layer 0.
    let mut p = Pair::new(&[0], &[0, 1, 2, 3]);
    p.handshake();
    assert_eq!(p.b.trust("agent-alpha").unwrap().layer, 0);
}

#[test]
fn a_peer_that_announces_again_starts_over() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    p.handshake();
    // Alpha restarts: a new session with the same key.
    let mut a2 = session("agent-alpha", "principal-a", 0x00, &[0, 1, 2, 3]);
    a2.register("agent-beta", IdentityKey::from_seed(seq(0x20)).public());
    p.a = a2;
    let later = T0.add(std::time::Duration::from_secs(5));
    p.a.connect(later, "agent-beta").unwrap();
    p.pump(later);
    assert!(p.a.trust("agent-beta").is_some());
    assert!(p.b.trust("agent-alpha").is_some());
    assert!(refused(&p.eb).is_empty(), "{:?}", refused(&p.eb));
}

#[test]
fn sending_before_the_handshake_is_refused_locally() {
    let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
    assert_eq!(
        p.a.request(T0, "agent-beta", &Map::new(), false),
        Err(SendError::HandshakeIncomplete("agent-beta".into()))
    );
    assert_eq!(
        p.a.connect(T0, "agent-zeta"),
        Err(SendError::UnknownAgent("agent-zeta".into()))
    );
}

#[test]
fn arbitrary_bytes_never_panic_a_session() {
    fn prop(bytes: Vec<u8>, flips: Vec<(usize, u8)>) -> bool {
        let mut p = Pair::new(&[0, 1, 2, 3], &[0, 1, 2, 3]);
        p.handshake();
        p.b.handle(T0, &bytes);
        p.a.request(
            T0,
            "agent-beta",
            &body(json!({"action": "x", "n": [1, {"k": null}]})),
            true,
        )
        .unwrap();
        while let Some(o) = p.a.poll_output() {
            if let AcpOutput::Send { json, .. } = o {
                let mut b = json.into_bytes();
                for (i, x) in &flips {
                    let n = b.len();
                    b[i % n] = *x;
                }
                p.b.handle(T0, &b);
            }
        }
        p.pump(T0);
        true
    }
    quickcheck::QuickCheck::new()
        .tests(300)
        .quickcheck(prop as fn(Vec<u8>, Vec<(usize, u8)>) -> bool);
}
