use super::*;

use a2acp_core::agent::{Input, Prompt};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::{Address, Timestamp};

use crate::control::Request;
use a2acp_core::crypto::{Direction, ThreadSession};
use a2acp_core::harness::dinner;
use a2acp_core::link::RelayFrame;
use serde_json::json;

const EVIL: &str =
    "\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m\u{202e}gpj.exe\u{200b}\r\n── Prompt #9\u{7f}";

/// A validly signed peer (Bob) opening a thread with the host's agent and sending
/// whatever plaintext it likes in it.
struct Peer {
    identity: IdentityKey,
    session: ThreadSession,
    n: u64,
}

impl Peer {
    fn send(&mut self, host: &mut AgentHost, kind: &str, body: serde_json::Value) -> Vec<Effect> {
        self.n += 1;
        let me = Address::parse("agent:bob@a2acp.io").unwrap();
        let to = host.agent().address().clone();
        let mut p = json!({
            "protocol": "a2acp/0.2", "packet_id": format!("pkt_{}", self.n),
            "thread_id": "thr_hostile", "from": me.as_str(), "to": to.as_str(),
            "timestamp": "2026-03-21T14:30:00Z", "type": kind,
        });
        for (k, v) in body.as_object().cloned().unwrap_or_default() {
            p[k] = v;
        }
        let env = self
            .session
            .seal(
                &self.identity,
                &me,
                &to,
                &host.agent().public_key(),
                "thr_hostile",
                Direction::FromInitiator,
                &serde_json::to_vec(&p).unwrap(),
            )
            .unwrap();
        let frame = RelayFrame::Deliver { id: self.n, env }.to_bytes();
        host.handle(Timestamp::from_secs(1000), Input::Bytes(frame))
            .unwrap()
    }
}

fn online(path: &std::path::Path) -> (AgentHost, Vec<Effect>) {
    let store = Store::open(path, crate::store::Durability::Full).unwrap();
    let (mut host, mut effects, _) = AgentHost::start(
        dinner::alice("a2acp.io"),
        IdentityKey::from_seed([1; 32]),
        store,
        Timestamp::from_secs(1000),
    )
    .unwrap();
    let now = Timestamp::from_secs(1000);
    effects.extend(host.handle(now, Input::Connected).unwrap());
    let ok = RelayFrame::AuthOk {
        address: host.agent().address().clone(),
        queued: 0,
    };
    effects.extend(host.handle(now, Input::Bytes(ok.to_bytes())).unwrap());
    (host, effects)
}

fn shown(effects: &[Effect]) -> Vec<&Prompt> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Prompt(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn clean(s: &str) -> bool {
    a2acp_core::display::lines(s, usize::MAX) == s
}

#[test]
fn a_hostile_peers_prompt_keeps_its_number_and_shows_nothing_raw() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let (mut host, _) = online(&path);
    let mut peer = Peer {
        identity: IdentityKey::from_seed([2; 32]),
        session: ThreadSession::new([3; 32]),
        n: 0,
    };
    let need = |f: &str| json!({"field": f, "reason": EVIL, "priority": "required"});
    let e = peer.send(
        &mut host,
        "context",
        json!({"intent": {"category": EVIL, "summary": EVIL}, "needs": [need("transport_mode")]}),
    );
    let p = shown(&e)[0].clone();
    let n = p.id;
    // What the terminal, the transcript and the control socket show is clean.
    for text in [
        crate::prompt::render(&p),
        crate::prompt::summary(&p),
        serde_json::to_string(&p).unwrap(),
    ] {
        assert!(clean(&text), "{text:?}");
    }
    for e in &e {
        if let Some((_, line)) = crate::transcript::describe(host.agent(), e) {
            assert!(clean(&line) && !line.contains('\n'), "{line:?}");
        }
    }
    // The same need again: nothing to show; a new one: the same number, in place.
    for _ in 0..3 {
        let e = peer.send(
            &mut host,
            "context_request",
            json!({"needs": [need("transport_mode")]}),
        );
        assert!(shown(&e).is_empty(), "{e:?}");
        assert!(!e.iter().any(|x| matches!(x, Effect::ClosePrompt(_))));
    }
    let e = peer.send(
        &mut host,
        "context_request",
        json!({"needs": [need("name")]}),
    );
    assert_eq!(shown(&e).iter().map(|p| p.id).collect::<Vec<_>>(), [n]);
    // The control socket lists it under the same number.
    let (r, _) = host
        .control(Timestamp::from_secs(1000), Request::Prompts)
        .unwrap();
    let ids: Vec<u64> = r
        .data
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [n]);
    // A restart shows it again under its number, and `answer N` answers it.
    drop(host);
    let (mut host, effects) = online(&path);
    assert_eq!(
        shown(&effects).iter().map(|p| p.id).collect::<Vec<_>>(),
        [n]
    );
    let (r, _) = host
        .control(
            Timestamp::from_secs(1001),
            Request::Answer {
                prompt_id: n,
                args: vec!["transport_mode".into(), "name=no".into()],
            },
        )
        .unwrap();
    assert!(r.ok, "{r:?}");
    assert!(host.prompts().is_empty());
}
