use super::*;

const SPEC_S4: &str = r#"{
  "protocol": "a2acp/0.2",
  "packet_id": "pkt_a1b2c3d4",
  "thread_id": "thr_x9y8z7",
  "from": "agent:alice@a2acp.io",
  "to": "agent:bob@a2acp.io",
  "timestamp": "2026-03-21T14:30:00Z",
  "type": "context",
  "intent": { "category": "scheduling", "summary": "Coordinate dinner on Friday", "urgency": "low" },
  "context": {
    "event_type": "dinner",
    "proposed_date": "2026-03-27",
    "time_windows": ["18:00-21:00"],
    "location_preference": "central Reading",
    "party_size": 2,
    "dietary": ["vegetarian"],
    "budget_range": "£20-40pp",
    "flexibility": { "date": "somewhat_flexible", "time": "flexible", "location": "flexible" }
  },
  "needs": [
    { "field": "time_windows", "reason": "Need recipient's availability to find overlap", "priority": "required" },
    { "field": "dietary", "reason": "Need dietary requirements for restaurant selection", "priority": "helpful" },
    { "field": "location_preference", "reason": "Preferred area or max travel distance", "priority": "nice_to_have" }
  ],
  "permissions": {
    "shared_fields": ["proposed_date", "time_windows", "event_type", "party_size"],
    "withheld_fields": [],
    "consent_level": "user_preauthorised"
  }
}"#;

fn with(json: &str, edit: impl FnOnce(&mut Map<String, Value>)) -> Vec<u8> {
    let mut m: Map<String, Value> = serde_json::from_str(json).unwrap();
    edit(&mut m);
    serde_json::to_vec(&m).unwrap()
}

#[test]
fn parses_the_spec_first_packet() {
    let p = Packet::parse(SPEC_S4.as_bytes()).unwrap();
    assert_eq!(p.version(), "0.2");
    let Body::Context(b) = &p.body else {
        panic!("not context")
    };
    assert_eq!(b.needs.len(), 3);
    assert_eq!(b.needs[2].priority, Priority::NiceToHave);
    assert_eq!(b.context["party_size"], 2);
    let again = Packet::parse(&p.to_bytes().unwrap()).unwrap();
    assert_eq!(again, p);
}

#[test]
fn missing_required_fields_are_named() {
    for field in [
        "protocol",
        "packet_id",
        "thread_id",
        "from",
        "to",
        "timestamp",
        "type",
    ] {
        let bytes = with(SPEC_S4, |m| {
            m.remove(field);
        });
        assert_eq!(
            Packet::parse(&bytes),
            Err(WireError::Missing(field.into())),
            "{field}"
        );
    }
    let bytes = with(SPEC_S4, |m| {
        m["needs"][1].as_object_mut().unwrap().remove("priority");
    });
    let err = Packet::parse(&bytes).unwrap_err();
    assert_eq!(err, WireError::Missing("needs[1].priority".into()));
    let bytes = with(SPEC_S4, |m| {
        m["needs"][0]["priority"] = "whenever".into();
    });
    match Packet::parse(&bytes).unwrap_err() {
        WireError::Invalid { field, .. } => assert_eq!(field, "needs[0].priority"),
        e => panic!("{e:?}"),
    }
    let bytes = with(SPEC_S4, |m| {
        m["type"] = "resolution".into();
    });
    assert_eq!(
        Packet::parse(&bytes),
        Err(WireError::Missing("proposal".into()))
    );
    let bytes = with(SPEC_S4, |m| {
        m["from"] = "alice".into();
    });
    assert!(
        matches!(Packet::parse(&bytes), Err(WireError::Invalid { field, .. }) if field == "from")
    );
}

#[test]
fn unknown_fields() {
    let bytes = with(SPEC_S4, |m| {
        m.insert("x_future_header".into(), 42.into());
        m["intent"]["x_new_intent_field"] = true.into();
        m["context"]["zz_unknown"] = serde_json::json!({"nested": [1, 2, {"deep": null}]});
    });
    let p = Packet::parse(&bytes).unwrap();
    let out: Map<String, Value> = serde_json::from_slice(&p.to_bytes().unwrap()).unwrap();
    assert!(
        !out.contains_key("x_future_header"),
        "unknown protocol-level fields are ignored"
    );
    assert_eq!(
        out["context"]["zz_unknown"],
        serde_json::json!({"nested": [1, 2, {"deep": null}]})
    );
    // order inside context preserved
    let keys: Vec<_> = out["context"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys.last().unwrap(), "zz_unknown");
    assert_eq!(keys[0], "event_type");
}

#[test]
fn unknown_type_is_context() {
    let bytes = with(SPEC_S4, |m| {
        m["type"] = "hologram_invite".into();
    });
    let p = Packet::parse(&bytes).unwrap();
    let Body::Context(b) = &p.body else { panic!() };
    assert_eq!(b.original_type.as_deref(), Some("hologram_invite"));
    assert_eq!(p.body.type_name(), "hologram_invite");
    assert_eq!(Packet::parse(&p.to_bytes().unwrap()).unwrap(), p);
}

#[test]
fn size_limit_before_parsing() {
    let big = vec![b'x'; MAX_CONTEXT_SIZE_BYTES + 1];
    assert_eq!(
        Packet::parse(&big),
        Err(WireError::TooLarge {
            size: MAX_CONTEXT_SIZE_BYTES + 1,
            limit: MAX_CONTEXT_SIZE_BYTES
        })
    );
}

#[test]
fn too_many_needs_refused() {
    let bytes = with(SPEC_S4, |m| {
        let n = m["needs"][0].clone();
        m["needs"] = Value::Array(vec![n; 6]);
    });
    assert!(
        matches!(Packet::parse(&bytes), Err(WireError::Invalid { field, .. }) if field == "needs")
    );
}

#[test]
fn decline_hint_is_dropped_and_actual_reason_is_null() {
    let bytes = with(SPEC_S4, |m| {
        m["type"] = "context_response".into();
        m.insert(
            "context_provided".into(),
            serde_json::json!({"transport_mode": "driving"}),
        );
        m.insert(
            "context_unavailable".into(),
            serde_json::json!([{"field": "cuisine_preference", "status": "declined", "hint": "ask his wife"}]),
        );
    });
    let p = Packet::parse(&bytes).unwrap();
    let Body::ContextResponse(b) = &p.body else {
        panic!()
    };
    assert_eq!(b.context_unavailable[0].hint, None);
    let out: Value = serde_json::from_slice(&p.to_bytes().unwrap()).unwrap();
    assert_eq!(out["context_unavailable"][0]["hint"], Value::Null);

    let bytes = with(SPEC_S4, |m| {
        m["type"] = "resolution_response".into();
        m.insert("status".into(), "declined".into());
        m.insert("reason_class".into(), "scheduling_conflict".into());
        m.insert("actual_reason".into(), "I don't like Bob".into());
    });
    let p = Packet::parse(&bytes).unwrap();
    let out = String::from_utf8(p.to_bytes().unwrap()).unwrap();
    assert!(!out.contains("like Bob"));
    assert!(out.contains("\"actual_reason\":null"));
}

#[test]
fn every_type_round_trips() {
    let types: &[(&str, Value)] = &[
        (
            "context_request",
            serde_json::json!({"needs": [{"field": "transport_mode", "reason": "r", "priority": "helpful"}], "context_provided": {"dietary": ["none"]}}),
        ),
        (
            "resolution",
            serde_json::json!({"proposal": {"summary": "Dinner", "details": {"time": "19:00"}, "alternatives": [{"summary": "19:30", "reason": "later"}], "reasoning": "both free"}, "requires_confirmation_from": ["agent:alice@a2acp.io"], "actions_on_confirm": [{"action": "book_table", "reversible": true, "requires_user_approval": true}], "confirmation_timeout": "PT24H", "on_timeout": "remind_then_expire"}),
        ),
        (
            "intent_update",
            serde_json::json!({"previous_intent": {"category": "scheduling", "summary": "Dinner"}, "updated_intent": {"category": "scheduling", "summary": "Game night", "scope_change": "expanded"}, "reason": "games", "additional_context_needed": []}),
        ),
        (
            "thread_fork",
            serde_json::json!({"parent_thread_id": "thr_x", "new_threads": [{"thread_id": "thr_a", "intent": {"category": "scheduling", "summary": "A"}}], "shared_context": {"date": "2026-03-27"}}),
        ),
        (
            "coordinator_transfer",
            serde_json::json!({"from_coordinator": "agent:alice@a2acp.io", "to_coordinator": "agent:bob@a2acp.io", "reason": "calendar", "requires_acceptance": true}),
        ),
        (
            "coordinator_transfer_response",
            serde_json::json!({"decision": "accepted"}),
        ),
        (
            "processing_error",
            serde_json::json!({"error": "malformed_output", "message": "gave up after 3 tries"}),
        ),
        (
            "thread_state",
            serde_json::json!({"state": "NEGOTIATING", "packets_sent": ["pkt_1"], "packets_received": []}),
        ),
        (
            "execution_report",
            serde_json::json!({"resolution_id": "pkt_r", "status": "completed"}),
        ),
    ];
    for (ty, body) in types {
        let bytes = with(SPEC_S4, |m| {
            for k in ["intent", "context", "needs", "permissions"] {
                m.remove(k);
            }
            m["type"] = (*ty).into();
            for (k, v) in body.as_object().unwrap() {
                m.insert(k.clone(), v.clone());
            }
        });
        let p = Packet::parse(&bytes).unwrap_or_else(|e| panic!("{ty}: {e}"));
        assert_eq!(p.body.type_name(), *ty);
        assert_eq!(Packet::parse(&p.to_bytes().unwrap()).unwrap(), p, "{ty}");
    }
}

#[test]
fn version_negotiation() {
    let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        negotiate_version(&v(&["0.1", "0.2"]), &v(&["0.1"])),
        Some("0.1".into())
    );
    assert_eq!(
        negotiate_version(&v(&["0.1", "0.2"]), &v(&["0.2", "0.1", "0.10"])),
        Some("0.2".into())
    );
    assert_eq!(negotiate_version(&v(&["0.2"]), &v(&["0.1"])), None);
}

// ---------------------------------------------------------------- group threads (§10)

const GROUP_LEG_OPEN: &str = r#"{
  "protocol": "a2acp/0.2",
  "packet_id": "pkt_g1",
  "thread_id": "thr_leg_charlie",
  "from": "agent:alice@a2acp.io",
  "to": "agent:charlie@a2acp.io",
  "timestamp": "2026-03-21T14:30:00Z",
  "type": "context",
  "intent": { "category": "group_scheduling", "summary": "Game night for 4" },
  "context": { "event_type": "game night", "time_windows": ["2026-03-27 19:00-23:00"] },
  "needs": [ { "field": "time_windows", "reason": "Need your availability", "priority": "required" } ],
  "group": {
    "group_id": "grp_gamenight",
    "coordinator": "agent:alice@a2acp.io",
    "epoch": 0,
    "participants": ["agent:alice@a2acp.io", "agent:bob@a2acp.io", "agent:charlie@a2acp.io", "agent:diana@a2acp.io"]
  },
  "flexibility_request": {
    "field": "time_windows",
    "window": { "start": "2026-03-28T19:00:00Z", "end": "2026-03-28T23:00:00Z", "local": "Saturday 28 March 20:00–00:00 (Europe/Berlin)" },
    "others_fit": 3,
    "others": 3,
    "message": "Everyone else is free Saturday 28 March 20:00–00:00 (Europe/Berlin) — any chance you can do Saturday?"
  }
}"#;

#[test]
fn a_group_leg_round_trips() {
    let p = Packet::parse(GROUP_LEG_OPEN.as_bytes()).unwrap();
    let Body::Context(b) = &p.body else {
        panic!("not context")
    };
    let g = b.group.as_ref().unwrap();
    assert_eq!(g.participants.len(), 4);
    assert_eq!(g.coordinator, g.participants[0]);
    let f = b.flexibility_request.as_ref().unwrap();
    assert_eq!(f.others_fit, 3);
    let bytes = p.to_bytes().unwrap();
    assert_eq!(Packet::parse(&bytes).unwrap(), p);
    let m: Map<String, Value> = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(m["group"]["group_id"], "grp_gamenight");
}

#[test]
fn two_party_packets_carry_no_group_members() {
    let p = Packet::parse(SPEC_S4.as_bytes()).unwrap();
    let m: Map<String, Value> = serde_json::from_slice(&p.to_bytes().unwrap()).unwrap();
    for k in ["group", "flexibility_request", "handover"] {
        assert!(!m.contains_key(k), "{k}");
    }
}

#[test]
fn group_parts_are_checked_strictly() {
    let err = |edit: &dyn Fn(&mut Map<String, Value>)| -> WireError {
        let bytes = with(GROUP_LEG_OPEN, edit);
        Packet::parse(&bytes).unwrap_err()
    };
    let field_of = |e: WireError| match e {
        WireError::Invalid { field, .. } => field,
        WireError::Missing(f) => f,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        field_of(err(&|m| {
            m["group"]["participants"] = serde_json::json!(["agent:alice@a2acp.io"]);
        })),
        "group.participants"
    );
    let seventeen: Vec<String> = (0..17).map(|i| format!("agent:p{i}@a2acp.io")).collect();
    assert_eq!(
        field_of(err(&|m| {
            m["group"]["participants"] = serde_json::json!(seventeen);
            m["group"]["coordinator"] = "agent:p0@a2acp.io".into();
        })),
        "group.participants"
    );
    assert_eq!(
        field_of(err(&|m| {
            m["group"]["participants"][2] = "agent:Bob@a2acp.io".into();
        })),
        "group.participants"
    );
    assert_eq!(
        field_of(err(&|m| {
            m["group"]["coordinator"] = "agent:bob@a2acp.io".into();
        })),
        "group.coordinator"
    );
    assert_eq!(
        field_of(err(&|m| {
            m["group"]["group_id"] = "has space".into();
        })),
        "group.group_id"
    );
    assert_eq!(
        err(&|m| {
            m["group"].as_object_mut().unwrap().remove("coordinator");
        }),
        WireError::Missing("group.coordinator".into())
    );
    assert_eq!(
        field_of(err(&|m| {
            m["group"]["participants"][1] = "bob".into();
        })),
        "group.participants[1]"
    );
    assert_eq!(
        err(&|m| {
            m["flexibility_request"]
                .as_object_mut()
                .unwrap()
                .remove("window");
        }),
        WireError::Missing("flexibility_request.window".into())
    );
    assert_eq!(
        field_of(err(&|m| {
            m["flexibility_request"]["others_fit"] = 4.into();
        })),
        "flexibility_request.others_fit"
    );
    assert_eq!(
        field_of(err(&|m| {
            m["flexibility_request"]["window"]["end"] = "2026-03-28T18:00:00Z".into();
        })),
        "flexibility_request.window.end"
    );
    assert_eq!(
        field_of(err(&|m| {
            m["flexibility_request"]["message"] = " ".into();
        })),
        "flexibility_request.message"
    );
    assert_eq!(
        field_of(err(&|m| {
            m["flexibility_request"]["message"] = "x".repeat(MAX_GROUP_TEXT + 1).into();
        })),
        "flexibility_request.message"
    );
    // An epoch is optional (0).
    let bytes = with(GROUP_LEG_OPEN, |m| {
        m["group"].as_object_mut().unwrap().remove("epoch");
    });
    let Body::Context(b) = Packet::parse(&bytes).unwrap().body else {
        panic!("not context")
    };
    assert_eq!(b.group.unwrap().epoch, 0);
}

const TRANSFER: &str = r#"{
  "protocol": "a2acp/0.2",
  "packet_id": "pkt_t1",
  "thread_id": "thr_leg_bob",
  "from": "agent:alice@a2acp.io",
  "to": "agent:bob@a2acp.io",
  "timestamp": "2026-03-21T15:00:00Z",
  "type": "coordinator_transfer",
  "from_coordinator": "agent:alice@a2acp.io",
  "to_coordinator": "agent:bob@a2acp.io",
  "reason": "Bob's agent has calendar integration with all participants",
  "requires_acceptance": true,
  "handover": {
    "group": {
      "group_id": "grp_gamenight",
      "coordinator": "agent:bob@a2acp.io",
      "epoch": 1,
      "participants": ["agent:bob@a2acp.io", "agent:alice@a2acp.io", "agent:charlie@a2acp.io"]
    },
    "intent": { "category": "group_scheduling", "summary": "Game night for 3" },
    "aggregated_context": {
      "participants": [
        { "agent": "agent:alice@a2acp.io", "status": "context_received" },
        { "agent": "agent:charlie@a2acp.io", "status": "awaiting_response" }
      ],
      "answered": 1,
      "of": 2,
      "combined": { "budget_conflict": false, "dietary_restrictions": 1 }
    },
    "round_trips": 2
  }
}"#;

#[test]
fn a_transfer_with_handover_round_trips_and_is_checked() {
    let p = Packet::parse(TRANSFER.as_bytes()).unwrap();
    let Body::CoordinatorTransfer(b) = &p.body else {
        panic!("not a transfer")
    };
    let h = b.handover.as_ref().unwrap();
    assert_eq!(h.group.epoch, 1);
    assert_eq!(h.round_trips, 2);
    let agg = AggregatedContext::from_value(h.aggregated_context.as_ref().unwrap()).unwrap();
    assert_eq!((agg.answered, agg.of), (1, 2));
    assert_eq!(
        agg.participants[1].status,
        ParticipantStatus::AwaitingResponse
    );
    assert_eq!(Packet::parse(&p.to_bytes().unwrap()).unwrap(), p);
    // The handover names the new coordinator.
    let bytes = with(TRANSFER, |m| {
        m["to_coordinator"] = "agent:charlie@a2acp.io".into();
    });
    assert!(matches!(
        Packet::parse(&bytes),
        Err(WireError::Invalid { field, .. }) if field == "handover.group.coordinator"
    ));
    // Its aggregated context is read strictly.
    let bytes = with(TRANSFER, |m| {
        m["handover"]["aggregated_context"]["answered"] = 3.into();
    });
    assert!(matches!(
        Packet::parse(&bytes),
        Err(WireError::Invalid { field, .. }) if field == "handover.aggregated_context.answered"
    ));
    let bytes = with(TRANSFER, |m| {
        m["handover"]["aggregated_context"]["participants"][0]["status"] = "asleep".into();
    });
    assert!(matches!(
        Packet::parse(&bytes),
        Err(WireError::Invalid { field, .. })
            if field == "handover.aggregated_context.participants[0].status"
    ));
    // A missing member is named as missing, in the handover and read on its own.
    let bytes = with(TRANSFER, |m| {
        m["handover"]["aggregated_context"]
            .as_object_mut()
            .unwrap()
            .remove("of");
    });
    assert!(matches!(
        Packet::parse(&bytes),
        Err(WireError::Missing(field)) if field == "handover.aggregated_context.of"
    ));
    let v: Value = serde_json::from_slice(TRANSFER.as_bytes()).unwrap();
    let mut agg = v["handover"]["aggregated_context"].clone();
    assert!(crate::packet::AggregatedContext::from_value(&agg).is_ok());
    agg.as_object_mut().unwrap().remove("of");
    assert_eq!(
        crate::packet::AggregatedContext::from_value(&agg),
        Err(WireError::Missing("aggregated_context.of".into()))
    );
    // A transfer without a handover (two-party, or another implementation) is as before.
    let bytes = with(TRANSFER, |m| {
        m.remove("handover");
    });
    let Body::CoordinatorTransfer(b) = Packet::parse(&bytes).unwrap().body else {
        panic!("not a transfer")
    };
    assert_eq!(b.handover, None);
}

#[test]
fn an_aggregated_context_of_another_shape_is_carried_opaquely() {
    // The spec's own §10.2 example shape is not a2acp's: the packet still parses (the
    // member is opaque), and reading it typed fails with the field named.
    let spec = serde_json::json!({
        "participants": [{ "agent": "agent:alice@a2acp.io", "status": "context_received" }],
        "availability_overlap": { "best_window": "Saturday 19:00-23:00", "available_count": 3 }
    });
    let bytes = with(GROUP_LEG_OPEN, |m| {
        m.insert("aggregated_context".into(), spec.clone());
    });
    let p = Packet::parse(&bytes).unwrap();
    let Body::Context(b) = &p.body else {
        panic!("not context")
    };
    assert_eq!(b.aggregated_context.as_ref(), Some(&spec));
    assert!(matches!(
        AggregatedContext::from_value(&spec),
        Err(WireError::Invalid { .. } | WireError::Missing(_))
    ));
}
