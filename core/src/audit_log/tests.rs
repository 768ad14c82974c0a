use super::chain::{line_hash, seal, BreakKind, Verifier, GENESIS};
use super::*;
use crate::agent::{Exchange, FieldsNamed};
use crate::Timestamp;

fn alice() -> Address {
    Address::parse("agent:alice@localhost").unwrap()
}

fn bob() -> Address {
    Address::parse("agent:bob@localhost").unwrap()
}

fn sent(fields: FieldsNamed) -> AuditRecord {
    AuditRecord {
        at: Timestamp::from_secs(1_771_070_700),
        thread_id: Some("thr_1".into()),
        event: AgentEvent::Sent {
            kind: "context_request".into(),
            packet_id: "pkt_1".into(),
            to: bob(),
            fields,
        },
    }
}

#[test]
fn a_sent_packet_is_an_entry_in_the_seeds_schema() {
    let fields = FieldsNamed {
        asked: vec!["dietary".into(), "specific_availability".into()],
        given: vec!["transport_mode".into()],
        withheld: vec!["cuisine_preference".into()],
        more: 0,
    };
    let e = entry_of(&sent(fields), &alice()).unwrap();
    let line = seal(&e, GENESIS).unwrap();
    assert_eq!(
        line,
        r#"{"ts":"2026-02-14T12:05:00Z","direction":"sent","from":{"agent":"agent:alice@localhost","principal":"alice@localhost"},"to":{"agent":"agent:bob@localhost","principal":"bob@localhost"},"type":"context_request","method":"a2acp.context_request","id":"pkt_1","summary":"Sent a context request to agent:bob@localhost in thread thr_1: asked for dietary, specific_availability; gave transport_mode; withheld cuisine_preference.","channel":"relay:localhost","thread":"thr_1","transparency_summary":false,"prev":"0000000000000000000000000000000000000000000000000000000000000000"}"#
    );
}

#[test]
fn records_that_are_not_messages_make_no_entry() {
    let r = AuditRecord {
        at: Timestamp::from_secs(1),
        thread_id: None,
        event: AgentEvent::RelayConnected,
    };
    assert!(entry_of(&r, &alice()).is_none());
}

#[test]
fn a_bridge_message_is_an_entry_with_its_own_parties() {
    let r = AuditRecord {
        at: Timestamp::from_secs(1_771_079_400),
        thread_id: None,
        event: AgentEvent::Exchanged(Exchange {
            direction: ExchangeDirection::Received,
            peer_agent: "agent-beta".into(),
            peer_principal: "principal-b".into(),
            kind: "request".into(),
            method: "agent.request".into(),
            id: Some("req-7f3a".into()),
            channel: "nats:agent.agent-alpha.inbox".into(),
            fields: FieldsNamed::default(),
            encrypted: true,
        }),
    };
    let e = entry_of(&r, &alice()).unwrap();
    assert_eq!(e.from.agent, "agent-beta");
    assert_eq!(e.to.principal, "alice@localhost");
    assert_eq!(e.method, "agent.request");
    assert_eq!(
        e.summary,
        "Received agent.request (request) from agent-beta of principal-b, id req-7f3a. Its body was encrypted end to end and is not recorded."
    );
}

#[test]
fn scrub_replaces_a_never_share_value_wherever_it_is() {
    let fields = FieldsNamed {
        asked: vec!["asthma".into()],
        ..Default::default()
    };
    let mut e = entry_of(&sent(fields), &alice()).unwrap();
    assert!(scrub(&mut e, &["asthma".to_string()]));
    assert!(!seal(&e, GENESIS).unwrap().contains("asthma"));
}

#[test]
fn month_of_reads_the_timestamp() {
    assert_eq!(month_of("2026-02-14T12:05:00Z"), Some("2026-02"));
    assert_eq!(month_of("nonsense"), None);
}

/// A log of `n` chained lines.
fn log(n: usize) -> Vec<String> {
    let mut prev = GENESIS.to_string();
    (0..n)
        .map(|i| {
            let mut r = sent(FieldsNamed::default());
            if let AgentEvent::Sent { packet_id, .. } = &mut r.event {
                *packet_id = format!("pkt_{i}");
            }
            let line = seal(&entry_of(&r, &alice()).unwrap(), &prev).unwrap();
            prev = line_hash(line.as_bytes());
            line
        })
        .collect()
}

fn bytes(lines: &[String]) -> Vec<u8> {
    lines
        .iter()
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect()
}

fn check(files: &[(&str, Vec<u8>)]) -> Result<Verifier, super::chain::Broken> {
    let mut v = Verifier::new();
    for (name, b) in files {
        v.file(name, b)?;
    }
    Ok(v)
}

#[test]
fn an_intact_chain_verifies_across_months() {
    let l = log(6);
    let v = check(&[
        ("2026-01.jsonl", bytes(&l[..2])),
        ("2026-02.jsonl", bytes(&l[2..])),
    ])
    .unwrap();
    assert_eq!(v.lines(), 6);
    assert_eq!(v.head(), line_hash(l[5].as_bytes()));
}

#[test]
fn an_altered_a_deleted_and_a_reordered_line_are_named() {
    let l = log(5);
    let mut altered = l.clone();
    altered[1] = altered[1].replace("pkt_1", "pkt_X");
    let e = check(&[("m.jsonl", bytes(&altered))]).unwrap_err();
    assert_eq!(
        (e.line, matches!(e.kind, BreakKind::Mismatch { .. })),
        (3, true)
    );

    let mut deleted = l.clone();
    deleted.remove(2);
    assert_eq!(check(&[("m.jsonl", bytes(&deleted))]).unwrap_err().line, 3);

    let mut reordered = l.clone();
    reordered.swap(1, 2);
    assert_eq!(
        check(&[("m.jsonl", bytes(&reordered))]).unwrap_err().line,
        2
    );

    // A month file removed from the middle breaks the next month's first line.
    let e = check(&[
        ("2026-01.jsonl", bytes(&l[..1])),
        ("2026-03.jsonl", bytes(&l[3..])),
    ])
    .unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("2026-03.jsonl", 1));
}

#[test]
fn a_torn_last_line_is_reported_until_a_note_acknowledges_it() {
    let l = log(3);
    let mut b = bytes(&l);
    b.truncate(b.len() - 20);
    let e = check(&[("m.jsonl", b.clone())]).unwrap_err();
    assert_eq!((e.line, e.kind), (3, BreakKind::Torn));

    // The writer ends the fragment and chains a note to its bytes.
    let fragment = b.rsplit(|c| *c == b'\n').next().unwrap().to_vec();
    let note = LogNote::new(Timestamp::from_secs(2), NoteKind::TornLine, "torn".into());
    let note = seal(&note, &line_hash(&fragment)).unwrap();
    b.push(b'\n');
    b.extend_from_slice(note.as_bytes());
    b.push(b'\n');
    let v = check(&[("m.jsonl", b)]).unwrap();
    assert_eq!(v.lines(), 4);
    assert_eq!(v.torn().len(), 1);
    assert_eq!(v.torn()[0].line, 3);
}

/// SPEC-NOTES "Audit log" states two lines and the hash the second carries: this code
/// makes them from the inputs it states, so the document cannot drift.
#[test]
fn the_worked_example_of_spec_notes_is_what_the_code_writes() {
    let notes = include_str!("../../../SPEC-NOTES.md");
    let fields = FieldsNamed {
        asked: vec!["dietary".into()],
        given: vec!["transport_mode".into()],
        withheld: vec![],
        more: 0,
    };
    let first = seal(&entry_of(&sent(fields), &alice()).unwrap(), GENESIS).unwrap();
    let hash = line_hash(first.as_bytes());
    let reply = AuditRecord {
        at: Timestamp::from_secs(1_771_070_702),
        thread_id: Some("thr_1".into()),
        event: AgentEvent::Received {
            kind: "context_response".into(),
            packet_id: "pkt_2".into(),
            from: bob(),
            fields: FieldsNamed {
                given: vec!["dietary".into()],
                ..Default::default()
            },
        },
    };
    let second = seal(&entry_of(&reply, &alice()).unwrap(), &hash).unwrap();
    for text in [&first, &hash, &second] {
        assert!(
            notes.contains(text.as_str()),
            "SPEC-NOTES' audit log example is stale: its lines and hash must read\n{first}\n{second}\n{hash}"
        );
    }
}

#[test]
fn space_packets_and_refused_envelopes_are_entries_too() {
    let space = AuditRecord {
        at: Timestamp::from_secs(1_771_070_700),
        thread_id: None,
        event: AgentEvent::Space(SpaceEvent::Received {
            space_id: "spc_1".into(),
            from: bob(),
            packet_id: "pkt_9".into(),
            updates: 2,
        }),
    };
    let e = entry_of(&space, &alice()).unwrap();
    assert_eq!(
        (e.kind.as_str(), e.thread.as_deref()),
        ("space_update", Some("spc_1"))
    );
    assert_eq!(
        e.summary,
        "Received a shared-space update from agent:bob@localhost for space spc_1: 2 field update(s), content end-to-end encrypted."
    );
    let refused = AuditRecord {
        at: Timestamp::from_secs(1_771_070_700),
        thread_id: None,
        event: AgentEvent::Dropped {
            drop: DropReason::Malformed {
                peer: bob(),
                why: "asthma is not a field".into(),
            },
            count: None,
        },
    };
    let e = entry_of(&refused, &alice()).unwrap();
    assert_eq!((e.kind.as_str(), e.id.as_deref()), ("refused", None));
    // The reason's kind only: the peer's text stays out.
    assert_eq!(
        e.summary,
        "Refused an envelope from agent:bob@localhost: malformed packet."
    );
    let duplicate = AuditRecord {
        at: Timestamp::from_secs(1),
        thread_id: None,
        event: AgentEvent::Dropped {
            drop: DropReason::Duplicate {
                packet_id: "pkt_1".into(),
            },
            count: None,
        },
    };
    assert!(entry_of(&duplicate, &alice()).is_none());
}
