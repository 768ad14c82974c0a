//! The principal's audit log's costs, printed: bytes per entry, the time to append one
//! (the agent's own writer, without and with a sync per entry), and the time to verify a
//! month of a million lines (`a2acp audit verify`'s code), with the lines per second.
//!
//! `cargo bench -p a2acp-tests --bench audit_log` (`AUDIT_BENCH_LINES=N` for another
//! month size).

use std::time::Instant;

use a2acp_core::agent::{AgentEvent, AuditRecord, FieldsNamed};
use a2acp_core::audit_log::entry_of;
use a2acp_core::{Address, Timestamp};
use a2acp_runtime::audit_log::{verify, AuditLog, DIR};

/// The dinner's eight packets as Alice's agent records them, round and round.
fn record(i: u64, me: &Address, bob: &Address) -> AuditRecord {
    let kinds = [
        (
            "context",
            true,
            vec![],
            vec!["transport_mode", "dietary", "time_windows"],
        ),
        (
            "context_request",
            false,
            vec!["dietary", "specific_availability"],
            vec![],
        ),
        ("context_response", true, vec![], vec!["dietary"]),
        ("resolution", false, vec![], vec![]),
        ("resolution_response", true, vec![], vec![]),
        ("resolution_response", false, vec![], vec![]),
        ("execution_report", true, vec![], vec![]),
        ("execution_report", false, vec![], vec![]),
    ];
    let (kind, sent, asked, given) = &kinds[(i % 8) as usize];
    let fields = FieldsNamed {
        asked: asked.iter().map(|s| s.to_string()).collect(),
        given: given.iter().map(|s| s.to_string()).collect(),
        withheld: vec![],
        more: 0,
    };
    let packet_id = format!("pkt_{i:012}");
    let event = if *sent {
        AgentEvent::Sent {
            kind: kind.to_string(),
            packet_id,
            to: bob.clone(),
            fields,
        }
    } else {
        AgentEvent::Received {
            kind: kind.to_string(),
            packet_id,
            from: bob.clone(),
            fields,
        }
    };
    let _ = me;
    AuditRecord {
        // A month: 2026-02-01 onwards, one entry every two seconds.
        at: Timestamp::from_secs(1_769_904_000 + i * 2),
        thread_id: Some(format!("thr_{:012}", i / 8)),
        event,
    }
}

fn main() {
    let lines: u64 = std::env::var("AUDIT_BENCH_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let me = Address::parse("agent:alice@example.org").unwrap();
    let bob = Address::parse("agent:bob@example.org").unwrap();
    let home = tempfile::tempdir().unwrap();

    // Appends, no sync (`--sync normal`): the entry decided in the core, then written.
    let mut log = AuditLog::new(home.path(), false);
    let t = Instant::now();
    for i in 0..lines {
        let r = record(i, &me, &bob);
        let e = entry_of(&r, &me).unwrap();
        log.append(&e, r.at);
    }
    let append = t.elapsed();
    let bytes: u64 = std::fs::read_dir(home.path().join(DIR))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();

    // A million lines verified.
    let t = Instant::now();
    let v = verify(&home.path().join(DIR)).expect("intact");
    let check = t.elapsed();
    assert_eq!(v.lines, lines);

    // Appends with a sync after each (`--sync full`, one entry per step).
    let synced_home = tempfile::tempdir().unwrap();
    let mut synced = AuditLog::new(synced_home.path(), true);
    let n_sync = 500;
    let t = Instant::now();
    for i in 0..n_sync {
        let r = record(i, &me, &bob);
        synced.append(&entry_of(&r, &me).unwrap(), r.at);
        synced.sync();
    }
    let sync = t.elapsed();

    println!("audit log, {lines} entries (the dinner's eight packets, round and round):");
    println!(
        "  bytes per entry           {:.0} ({:.1} MB in all)",
        bytes as f64 / lines as f64,
        bytes as f64 / 1e6
    );
    println!(
        "  append, no sync           {:.2} µs per entry",
        append.as_secs_f64() * 1e6 / lines as f64
    );
    println!(
        "  append + fdatasync        {:.0} µs per entry ({n_sync} entries)",
        sync.as_secs_f64() * 1e6 / n_sync as f64
    );
    println!(
        "  verify                    {:.2} s for {lines} lines ({:.0} lines/s, {:.0} MB/s)",
        check.as_secs_f64(),
        lines as f64 / check.as_secs_f64(),
        bytes as f64 / 1e6 / check.as_secs_f64()
    );
}
