use a2acp_core::agent::{AgentEvent, AuditRecord, FieldsNamed};
use a2acp_core::audit_log::chain::BreakKind;
use a2acp_core::audit_log::entry_of;
use a2acp_core::{Address, Timestamp};

use super::*;

/// 2026-02-14T12:05:00Z.
const FEB: u64 = 1_771_070_700;
/// 2026-03-02T00:00:00Z.
const MAR: u64 = 1_772_409_600;

fn entry(at: u64, n: usize) -> (Entry, Timestamp) {
    let at = Timestamp::from_secs(at);
    let r = AuditRecord {
        at,
        thread_id: Some("thr_1".into()),
        event: AgentEvent::Sent {
            kind: "context".into(),
            packet_id: format!("pkt_{n}"),
            to: Address::parse("agent:bob@localhost").unwrap(),
            fields: FieldsNamed::default(),
        },
    };
    (
        entry_of(&r, &Address::parse("agent:alice@localhost").unwrap()).unwrap(),
        at,
    )
}

fn write(log: &mut AuditLog, at: u64, n: usize) {
    let (e, now) = entry(at, n);
    log.append(&e, now);
}

#[test]
fn entries_chain_across_months_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = AuditLog::new(dir.path(), true);
    for i in 0..3 {
        write(&mut log, FEB, i);
    }
    write(&mut log, MAR, 3);
    // The clock went back: the entry stays in March's file.
    write(&mut log, FEB, 4);
    let files = month_files(&dir.path().join(DIR)).unwrap();
    let names: Vec<&str> = files.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(names, ["2026-02", "2026-03"]);
    let v = verify(&dir.path().join(DIR)).unwrap();
    assert_eq!((v.lines, v.files), (5, 2));
    // A second writer (the agent restarted) continues the chain.
    let mut again = AuditLog::new(dir.path(), false);
    write(&mut again, MAR, 5);
    assert_eq!(verify(&dir.path().join(DIR)).unwrap().lines, 6);
    let march = list(
        &dir.path().join(DIR),
        &Filter {
            month: Some("2026-03".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(march.len(), 3);
}

#[test]
fn a_torn_last_line_is_reported_then_acknowledged_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = AuditLog::new(dir.path(), false);
    for i in 0..3 {
        write(&mut log, FEB, i);
    }
    drop(log);
    let path = dir.path().join(DIR).join("2026-02.jsonl");
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 30).unwrap();
    let Err(Ok(broken)) = verify(&dir.path().join(DIR)) else {
        panic!("a torn line verifies")
    };
    assert_eq!(
        (broken.file.as_str(), broken.line, broken.kind),
        ("2026-02.jsonl", 3, BreakKind::Torn)
    );
    let mut log = AuditLog::new(dir.path(), false);
    write(&mut log, FEB, 3);
    let v = verify(&dir.path().join(DIR)).unwrap();
    assert_eq!(v.lines, 5, "3 lines (one torn), the note, the new entry");
    assert_eq!(v.torn.len(), 1);
    assert_eq!(v.torn[0].line, 3);
}

#[test]
fn a_refusing_disk_never_stops_the_writer_and_the_gap_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    // `audit` is a file: no month file can be created under it.
    std::fs::write(dir.path().join(DIR), b"not a folder").unwrap();
    let mut log = AuditLog::new(dir.path(), false);
    write(&mut log, FEB, 0);
    write(&mut log, FEB, 1);
    assert_eq!(log.lost(), 2);
    std::fs::remove_file(dir.path().join(DIR)).unwrap();
    write(&mut log, FEB, 2);
    assert_eq!(log.lost(), 0);
    let v = verify(&dir.path().join(DIR)).unwrap();
    assert_eq!(v.lines, 2, "the note of two lost entries, then the entry");
    let all = list(&dir.path().join(DIR), &Filter::default()).unwrap();
    assert_eq!(all[0]["note"], "entries_lost");
    assert!(all[0]["summary"].as_str().unwrap().starts_with("2 entr"));
}

#[test]
fn filters_pick_by_peer_thread_and_direction() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = AuditLog::new(dir.path(), false);
    write(&mut log, FEB, 0);
    let d = dir.path().join(DIR);
    let by = |f: Filter| list(&d, &f).unwrap().len();
    assert_eq!(
        by(Filter {
            peer: Some("agent:bob@localhost".into()),
            ..Default::default()
        }),
        1
    );
    assert_eq!(
        by(Filter {
            peer: Some("bob@localhost".into()),
            ..Default::default()
        }),
        1
    );
    assert_eq!(
        by(Filter {
            peer: Some("agent:carol@localhost".into()),
            ..Default::default()
        }),
        0
    );
    assert_eq!(
        by(Filter {
            thread: Some("thr_2".into()),
            ..Default::default()
        }),
        0
    );
    assert_eq!(
        by(Filter {
            direction: Some("received".into()),
            ..Default::default()
        }),
        0
    );
    assert!(list(
        &d,
        &Filter {
            month: Some("2026-2".into()),
            ..Default::default()
        }
    )
    .is_err());
}
