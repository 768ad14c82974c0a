//! Real actions over real sockets (§8.1, §9): the dinner's `book_table` is a command
//! configured in `config.toml` (`[actions.book_table]`, the action as JSON on its stdin)
//! that finds no table the first time — FAILED → ROLLBACK (the calendar event already
//! written is removed) → the next alternative is proposed, confirmed and booked — and
//! `add_calendar_event` leaves one RFC 5545 event per agent, for the slot booked; on
//! tokio and on smol.

use a2acp_runtime::actions::{calendar_file, ActionService};
use a2acp_runtime::control::Request;
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::{next_friday, start_dinner, ScriptedUser};
use a2acp_tests::*;
use serde_json::Value;

per_runtime!(a_failed_booking_rolls_back_and_the_next_alternative_is_booked);

/// Every call of the command, one JSON object per line, in the agent's home.
fn calls(home: &Home) -> Vec<Value> {
    std::fs::read_to_string(home.dir().join("bookings.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

async fn a_failed_booking_rolls_back_and_the_next_alternative_is_booked(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    for h in [&ha, &hb] {
        let log = h.dir().join("bookings.log");
        // Appends the action it is given; the first booking (not an undo) finds no table.
        let script = format!(
            "cat >> '{log}'; echo >> '{log}'; \
             if [ \"$(grep -c '\"undo\":false' '{log}')\" -le 1 ]; then echo 'no table left' >&2; exit 1; fi",
            log = log.display()
        );
        edit_config(h, |f| {
            f.actions.insert(
                "book_table".into(),
                ActionService {
                    command: Some(vec!["sh".into(), "-c".into(), script]),
                    webhook: None,
                    timeout_ms: Some(10_000),
                },
            );
        });
    }
    let alice = rt.agent(&ha, "alice", Some(ScriptedUser::dinner()));
    let bob = rt.agent(&hb, "bob", Some(ScriptedUser::dinner()));
    wait_online(&alice).await;
    wait_online(&bob).await;
    alice
        .tell(start_dinner(
            bob_cfg.address.clone(),
            &next_friday(a2acp_runtime::now()),
        ))
        .await;
    let ta = wait_state(&alice, "COMPLETED", 60).await;
    let tb = wait_state(&bob, "COMPLETED", 60).await;
    let id = ta[0].id.clone();
    assert_eq!(tb[0].id, id);

    // One agent books (the proposal's `by`): two bookings, the first refused, the second
    // for another slot.
    let (booker, other) = if calls(&ha).is_empty() {
        (&hb, &ha)
    } else {
        (&ha, &hb)
    };
    assert!(calls(other).is_empty(), "both agents booked");
    let booked = calls(booker);
    let tries: Vec<&Value> = booked.iter().filter(|c| c["undo"] == false).collect();
    assert_eq!(tries.len(), 2, "{booked:#?}");
    assert_eq!(tries[0]["action"], "book_table");
    assert_eq!(tries[0]["thread_id"], id.as_str());
    assert_ne!(
        tries[0]["details"], tries[1]["details"],
        "the same slot twice"
    );

    // What the booker went through, as `thread show` tells it.
    let r = ctl(booker, Request::Thread { id: id.clone() }).await;
    let timeline = r.data["audit"].to_string();
    for state in ["FAILED", "ROLLBACK", "COMPLETED"] {
        assert!(timeline.contains(state), "{state} missing: {timeline}");
    }

    // Each agent's calendar holds one event, for the slot finally booked.
    let start = tries[1]["details"]["start_utc"]
        .as_str()
        .expect("the slot's start")
        .replace(['-', ':'], "");
    for h in [&ha, &hb] {
        let file = calendar_file(&h.dir().join("calendar"), &id);
        let text = std::fs::read_to_string(&file).expect("the calendar event");
        assert_eq!(text.matches("BEGIN:VEVENT").count(), 1, "{text}");
        assert!(
            text.contains(&format!("DTSTART:{start}")),
            "{start}: {text}"
        );
        assert!(text.contains(&format!("UID:{id}@a2acp")), "{text}");
        let n = std::fs::read_dir(h.dir().join("calendar")).unwrap().count();
        assert_eq!(n, 1, "one file in the calendar directory");
    }
    alice.stop().await;
    bob.stop().await;
}
