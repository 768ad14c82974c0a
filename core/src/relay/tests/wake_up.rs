//! Wake-ups for offline agents: what an agent may give as its endpoint, when the relay
//! asks for a wake-up (offline, once per interval, never with anything of the packet),
//! and that the endpoint survives a restart.

use super::*;
use crate::relay::wake_up::{check_endpoint, is_public_ip, WAKE_UP_BODY};

fn wake_ups(h: &H) -> Vec<String> {
    h.outs
        .iter()
        .filter_map(|o| match o {
            RelayOutput::WakeUp { endpoint } => Some(endpoint.clone()),
            _ => None,
        })
        .collect()
}

const ENDPOINT: &str = "https://push.example.org/up/AbC123?x=1";

#[test]
fn endpoints_that_would_reach_the_relays_own_network_are_refused() {
    for bad in [
        "https://127.0.0.1/x",
        "https://10.0.0.1/x",
        "https://172.16.4.2/x",
        "https://192.168.1.1/x",
        "https://169.254.169.254/latest/meta-data",
        "https://100.64.0.1/x",
        "https://0.0.0.0/x",
        "https://[::1]/x",
        "https://[fd00::1]/x",
        "https://[fe80::1]/x",
        "https://[::ffff:127.0.0.1]/x",
        "https://localhost/x",
        "https://relay.localhost/x",
        "https://printer.local/x",
        "https://intranet/x",
        "http://push.example.org/x",
        "ftp://push.example.org/x",
        "https://user:pw@push.example.org/x",
        "https://push.example.org:99999999/x",
        "https:///x",
        "https://push.example.org/a b",
    ] {
        assert!(check_endpoint(bad, false).is_err(), "{bad} accepted");
    }
    assert!(check_endpoint(&format!("https://p.example.org/{}", "x".repeat(600)), true).is_err());
    for good in [
        ENDPOINT,
        "https://ntfy.sh/a2acp-alice-7f3c",
        "https://push.example.org:8443/x",
        "https://203.0.114.9/x",
        "https://[2a01:4f8::1]/x",
    ] {
        assert!(check_endpoint(good, false).is_ok(), "{good} refused");
    }
    // The operator may allow its own network (and http://).
    assert!(check_endpoint("http://127.0.0.1:8080/up", true).is_ok());
    assert!(is_public_ip("8.8.8.8".parse().unwrap()));
    assert!(!is_public_ip("10.1.2.3".parse().unwrap()));
    assert!(!is_public_ip("::1".parse().unwrap()));
}

#[test]
fn an_offline_agent_is_woken_once_per_interval_with_nothing_of_the_packet() {
    let (mut h, a, b) = alice_and_bob();
    let frames = h.input(
        2,
        &ClientFrame::WakeUp {
            endpoint: Some(ENDPOINT.into()),
        },
    );
    assert_eq!(
        frames,
        vec![RelayFrame::WakeUpSet {
            endpoint: Some(ENDPOINT.into())
        }]
    );
    assert!(h.store.contains_key("wake/agent:bob@localhost"));
    // Online: no wake-up.
    let e = env(&a, "alice", &b, "bob", "thr_w", 1);
    h.input(1, &ClientFrame::Send { seq: 1, env: e });
    assert!(wake_ups(&h).is_empty());
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(2) });
    h.drain();
    // Offline: one wake-up, whatever the packet; a second packet within the interval: none.
    let e = env(&a, "alice", &b, "bob", "thr_w", 2);
    h.input(1, &ClientFrame::Send { seq: 2, env: e });
    assert_eq!(wake_ups(&h), vec![ENDPOINT.to_string()]);
    let e = env(&a, "alice", &b, "bob", "thr_w", 3);
    h.input(1, &ClientFrame::Send { seq: 3, env: e });
    assert!(wake_ups(&h).is_empty());
    h.now = h.now.add(Duration::from_secs(61));
    let e = env(&a, "alice", &b, "bob", "thr_w", 4);
    h.input(1, &ClientFrame::Send { seq: 4, env: e });
    assert_eq!(wake_ups(&h).len(), 1);
    // The output names only the endpoint; what is posted is the fixed body.
    assert_eq!(WAKE_UP_BODY, "something is waiting");

    // After a restart the endpoint is still there.
    let mut h2 =
        H::from_relay(Relay::restore(RelayConfig::default(), [9; 32], h.store.clone()).unwrap());
    h2.register(1, "carol", &ident(3));
    let e = env(&ident(3), "carol", &b, "bob", "thr_x", 1);
    h2.input(1, &ClientFrame::Send { seq: 1, env: e });
    assert_eq!(wake_ups(&h2), vec![ENDPOINT.to_string()]);
}

#[test]
fn a_refused_or_withdrawn_endpoint_wakes_nobody() {
    let (mut h, a, b) = alice_and_bob();
    let frames = h.input(
        2,
        &ClientFrame::WakeUp {
            endpoint: Some("https://127.0.0.1/x".into()),
        },
    );
    assert_eq!(error_code(&frames), Some((ErrorCode::WakeUpRefused, None)));
    let frames = h.input(
        2,
        &ClientFrame::WakeUp {
            endpoint: Some("https://10.0.0.1/x".into()),
        },
    );
    assert_eq!(error_code(&frames), Some((ErrorCode::WakeUpRefused, None)));
    h.input(
        2,
        &ClientFrame::WakeUp {
            endpoint: Some(ENDPOINT.into()),
        },
    );
    let frames = h.input(2, &ClientFrame::WakeUp { endpoint: None });
    assert_eq!(frames, vec![RelayFrame::WakeUpSet { endpoint: None }]);
    assert!(!h.store.contains_key("wake/agent:bob@localhost"));
    h.relay
        .handle(h.now, RelayInput::Disconnected { conn: ConnId(2) });
    h.drain();
    let e = env(&a, "alice", &b, "bob", "thr_w", 1);
    h.input(1, &ClientFrame::Send { seq: 1, env: e });
    assert!(wake_ups(&h).is_empty());
    // Before authentication: refused.
    h.connect(9);
    let frames = h.input(
        9,
        &ClientFrame::WakeUp {
            endpoint: Some(ENDPOINT.into()),
        },
    );
    assert_eq!(
        error_code(&frames),
        Some((ErrorCode::NotAuthenticated, None))
    );
    // A relay whose operator turned wake-ups off refuses every endpoint.
    let mut off = H::with(RelayConfig {
        wake_up: WakeUpConfig {
            enabled: false,
            ..WakeUpConfig::default()
        },
        ..RelayConfig::default()
    });
    off.register(1, "alice", &ident(1));
    let frames = off.input(
        1,
        &ClientFrame::WakeUp {
            endpoint: Some(ENDPOINT.into()),
        },
    );
    assert_eq!(error_code(&frames), Some((ErrorCode::WakeUpRefused, None)));
}
