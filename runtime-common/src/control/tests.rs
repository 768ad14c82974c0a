use super::*;

use a2acp_core::packet::Context;

#[test]
fn wire_form() {
    let r: Request =
        serde_json::from_str(r#"{"cmd":"answer","prompt_id":3,"args":["confirm"]}"#).unwrap();
    assert_eq!(
        r,
        Request::Answer {
            prompt_id: 3,
            args: vec!["confirm".into()]
        }
    );
    let r: Request = serde_json::from_str(
        r#"{"cmd":"start_thread","to":"agent:b@x","category":"c","summary":"s"}"#,
    )
    .unwrap();
    assert!(matches!(
        r,
        Request::StartThread {
            urgent: false,
            context: None,
            ..
        }
    ));
    // A group thread: `to` is a list; `quorum` optional. One `--to` is sent as before.
    let r: Request = serde_json::from_str(
        r#"{"cmd":"start_thread","to":["agent:b@x","agent:c@x"],"category":"c","summary":"s","quorum":2}"#,
    )
    .unwrap();
    assert!(matches!(
        r,
        Request::StartThread { ref to, quorum: Some(2), sequential: false, .. } if to.list() == ["agent:b@x", "agent:c@x"]
    ));
    let r: Request = serde_json::from_str(
        r#"{"cmd":"start_thread","to":["agent:b@x","agent:c@x"],"category":"c","summary":"s","sequential":true}"#,
    )
    .unwrap();
    assert!(matches!(
        r,
        Request::StartThread {
            quorum: None,
            sequential: true,
            ..
        }
    ));
    let one = Request::StartThread {
        to: Recipients::from_list(vec!["agent:b@x".into()]),
        category: "c".into(),
        summary: "s".into(),
        context: None,
        urgent: false,
        quorum: None,
        sequential: false,
    };
    assert_eq!(
        serde_json::to_string(&one).unwrap(),
        r#"{"cmd":"start_thread","to":"agent:b@x","category":"c","summary":"s","context":null,"urgent":false}"#
    );
    assert!(serde_json::from_str::<Request>(r#"{"cmd":"explode"}"#).is_err());
    // The requests of the person's commands.
    let r: Request = serde_json::from_str(r#"{"cmd":"notifications"}"#).unwrap();
    assert_eq!(r, Request::Notifications { all: false });
    let r: Request = serde_json::from_str(r#"{"cmd":"read_notifications","all":true}"#).unwrap();
    assert_eq!(
        r,
        Request::ReadNotifications {
            number: None,
            all: true
        }
    );
    let r: Request =
        serde_json::from_str(r#"{"cmd":"reply_thread","id":"thr_1","context":{"day":"Thursday"}}"#)
            .unwrap();
    assert!(matches!(r, Request::ReplyThread { ref context, .. } if context["day"] == "Thursday"));
    let r: Request = serde_json::from_str(r#"{"cmd":"key_accept","address":"agent:b@x"}"#).unwrap();
    assert_eq!(
        r,
        Request::KeyAccept {
            address: "agent:b@x".into(),
            safety_number: None
        }
    );
    let s = serde_json::to_string(&Response::err("nope")).unwrap();
    assert_eq!(s, r#"{"ok":false,"error":"nope","data":null}"#);
}

#[test]
fn reply_values() {
    let w = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let c = parse_values(&w(&[
        "day=Thursday",
        "guests=2",
        "ok=true",
        "slots=[\"a\",\"b\"]",
        "time=19:00",
        "note=a=b",
    ]))
    .unwrap();
    assert_eq!(c["day"], "Thursday");
    assert_eq!(c["guests"], 2);
    assert_eq!(c["ok"], true);
    assert_eq!(c["slots"], serde_json::json!(["a", "b"]));
    assert_eq!(c["time"], "19:00");
    assert_eq!(c["note"], "a=b");
    assert!(parse_values(&w(&["day"])).is_err());
    assert!(parse_values(&w(&["=x"])).is_err());
}

/// `thread show` printed an empty line: the detail's packet list and the summary's
/// packet count had one JSON name, so the client could not read the answer back.
#[test]
fn a_thread_detail_reads_back_and_renders_for_a_person() {
    let mut shared = Context::new();
    shared.insert(
        "time_windows".into(),
        serde_json::json!(["Friday 19:00-22:00"]),
    );
    let mut theirs = Context::new();
    theirs.insert("name".into(), serde_json::json!("Bob"));
    theirs.insert("dietary".into(), serde_json::json!("vegetarian"));
    let mut usage = std::collections::BTreeMap::new();
    usage.insert(
        "dietary".to_string(),
        a2acp_core::packet::UsageRule {
            purpose: Some("scheduling".into()),
            expires_at: Some("2026-04-20T00:00:00Z".into()),
            no_reshare: true,
        },
    );
    let d = ThreadDetail {
        summary: ThreadSummary {
            id: "thr_1".into(),
            peer: "agent:bob@localhost".into(),
            state: "NEGOTIATING".into(),
            category: "scheduling".into(),
            summary: "Dinner on Friday".into(),
            initiator: true,
            round_trips: 2,
            waiting: "user".into(),
            waiting_for: vec![],
            last_activity: "2026-03-21T14:30:00Z".into(),
            packets: 1,
            group: None,
            split_into: Vec::new(),
            continued_as: None,
        },
        version: Some("0.2".into()),
        shared,
        withheld: vec!["cuisine_preference".into()],
        theirs,
        peer_unavailable: vec!["dietary".into()],
        resolution: None,
        history: vec![PacketLine {
            dir: "sent".into(),
            kind: "context".into(),
            packet_id: "pkt_1".into(),
            summary: String::new(),
        }],
        audit: vec!["2026-03-21T14:30:00Z state INITIATED -> NEGOTIATING".into()],
        urgency: Some("low".into()),
        escalated: true,
        halted: false,
        prompts: vec![(3, "#3 consent".into())],
        retractions: Vec::new(),
        retracted: vec!["budget_range".into()],
        usage,
    };
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(v["packets"], 1);
    // A third party (an MCP host) reads no value that may not be passed on.
    let host = d.clone().for_third_party();
    assert_eq!(host.theirs["dietary"], WITHHELD);
    assert_eq!(host.theirs["name"], "Bob");
    let back: ThreadDetail = serde_json::from_value(v).unwrap();
    assert_eq!(back, d);
    let text = render_thread(&back);
    for part in [
        "Thread thr_1 — NEGOTIATING",
        "with           agent:bob@localhost (you started it)",
        "about          scheduling: Dinner on Friday (urgency low)",
        "waiting        for you · 2 round trip(s)",
        "you shared     time_windows=[\"Friday 19:00-22:00\"]",
        "you declined   cuisine_preference",
        "they shared    name=Bob",
        "their rule     dietary: only for scheduling; deleted at 2026-04-20T00:00:00Z; not to be passed on",
        "they declined  dietary",
        "open prompt    #3 consent",
        "needs you      give new context or an answer: `a2acp thread reply thr_1 FIELD=VALUE …`",
        "timeline:\n    2026-03-21T14:30:00Z state INITIATED -> NEGOTIATING",
    ] {
        assert!(text.contains(part), "{part:?} in\n{text}");
    }
    // Waiting for the peer names it by address.
    let mut d = back;
    d.summary.waiting = "peer".into();
    d.summary.waiting_for = vec!["agent:bob@localhost".into()];
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(v["waiting_for"], serde_json::json!(["agent:bob@localhost"]));
    let text = render_thread(&d);
    assert!(
        text.contains("waiting        for agent:bob@localhost · 2 round trip(s)"),
        "{text}"
    );
}

/// A thread split into others (§6.5) reads SPLIT, with its children, in the list and
/// in `thread show`; its JSON keeps the lifecycle state it had.
#[test]
fn a_split_thread_reads_split_with_its_children() {
    let parent = ThreadSummary {
        id: "thr_parent".into(),
        peer: "agent:bob@localhost".into(),
        state: "NEGOTIATING".into(),
        category: "scheduling".into(),
        summary: "Dinner and games".into(),
        initiator: true,
        round_trips: 1,
        waiting: "nothing".into(),
        waiting_for: vec![],
        last_activity: "2026-03-21T14:30:00Z".into(),
        packets: 2,
        group: None,
        split_into: vec!["thr_dinner".into(), "thr_games".into()],
        continued_as: None,
    };
    let v = serde_json::to_value(&parent).unwrap();
    assert_eq!(v["state"], "NEGOTIATING");
    assert_eq!(
        v["split_into"],
        serde_json::json!(["thr_dinner", "thr_games"])
    );
    let child = ThreadSummary {
        id: "thr_games".into(),
        split_into: Vec::new(),
        ..parent.clone()
    };
    assert!(serde_json::to_value(&child)
        .unwrap()
        .get("split_into")
        .is_none());
    let list = render_threads(&[parent.clone(), child]);
    let row = list.lines().find(|l| l.starts_with("thr_parent")).unwrap();
    assert!(row.contains(" SPLIT "), "{row}");
    assert!(row.ends_with("— split into thr_dinner, thr_games"), "{row}");
    let games = list.lines().find(|l| l.starts_with("thr_games")).unwrap();
    assert!(games.contains(" NEGOTIATING "), "{games}");

    // A thread whose recipient had no a2acp agent says where it goes on (§18).
    let declined = ThreadSummary {
        id: "thr_first".into(),
        state: "DECLINED".into(),
        split_into: Vec::new(),
        continued_as: Some("thr_next".into()),
        ..parent
    };
    assert_eq!(
        serde_json::to_value(&declined).unwrap()["continued_as"],
        "thr_next"
    );
    let list = render_threads(&[declined]);
    assert!(list.contains(" DECLINED "), "{list}");
    assert!(list.ends_with("— goes on as thr_next (A2A)"), "{list}");
}

#[test]
fn status_names_the_door_the_agent_is_on() {
    let mut s = StatusInfo {
        address: "agent:alice@localhost".into(),
        key: "k".into(),
        online: true,
        outbox: 0,
        threads: 0,
        open_threads: 0,
        prompts: 0,
        refused: None,
        door: Some("ws://b:7447".into()),
        audit_lost: 0,
        transparency: None,
        recovery: None,
    };
    assert!(
        render_status(&s).contains("relay: online at ws://b:7447"),
        "{}",
        render_status(&s)
    );
    s.online = false;
    assert!(render_status(&s).contains("relay: offline (reconnecting; last at ws://b:7447)"));
    // An older agent's answer, without a door, still reads.
    let old: StatusInfo = serde_json::from_str(
        r#"{"address":"a","key":"k","online":true,"outbox":0,"threads":0,"open_threads":0,"prompts":0}"#,
    )
    .unwrap();
    assert_eq!(old.door, None);
    assert!(render_status(&old).contains("relay: online\n"));
}
