//! Cluster mode: the questions a node asks its cluster's store and what it does with the
//! answers, in order.

use super::*;
use crate::relay::cluster::{Claim, ClusterInput, ClusterMode, ClusterOp, Enqueue};

fn node() -> H {
    H::with(RelayConfig {
        cluster: Some(ClusterMode { node: "r1".into() }),
        ..RelayConfig::default()
    })
}

impl H {
    fn ops(&self) -> Vec<ClusterOp> {
        self.outs
            .iter()
            .filter_map(|o| match o {
                RelayOutput::Cluster(op) => Some(op.clone()),
                _ => None,
            })
            .collect()
    }

    fn answer(&mut self, input: ClusterInput) {
        self.relay.handle(self.now, RelayInput::Cluster(input));
        self.drain();
    }

    /// Registers `user` on `conn` through the store (free address, claimed here).
    fn cluster_register(&mut self, conn: u64, user: &str, id: &IdentityKey) {
        self.connect(conn);
        let f = self.register_frame(conn, user, id);
        assert!(self.input(conn, &f).is_empty());
        assert_eq!(
            self.ops(),
            vec![ClusterOp::Resolve {
                address: addr(user)
            }]
        );
        self.answer(ClusterInput::Resolved {
            address: addr(user),
            key: Ok(None),
        });
        let key = id.public().to_bytes();
        assert_eq!(
            self.ops(),
            vec![ClusterOp::Claim {
                address: addr(user),
                key
            }]
        );
        self.answer(ClusterInput::Claimed {
            address: addr(user),
            key,
            result: Ok(Claim::Registered { new: true }),
        });
        assert!(
            matches!(self.frames(conn).first(), Some(RelayFrame::AuthOk { .. })),
            "{:?}",
            self.frames(conn)
        );
    }
}

#[test]
fn a_registration_waits_for_the_store_and_later_frames_keep_their_order() {
    let mut h = node();
    let a = ident(1);
    h.connect(1);
    let f = h.register_frame(1, "alice", &a);
    assert!(
        h.input(1, &f).is_empty(),
        "nothing before the store answers"
    );
    // A ping behind it waits too: answered after the auth_ok, not before.
    assert!(h.input(1, &ClientFrame::Ping { n: 9 }).is_empty());
    h.answer(ClusterInput::Resolved {
        address: addr("alice"),
        key: Ok(None),
    });
    assert!(h.frames(1).is_empty(), "the claim comes first");
    let key = a.public().to_bytes();
    h.answer(ClusterInput::Claimed {
        address: addr("alice"),
        key,
        result: Ok(Claim::Registered { new: true }),
    });
    let frames = h.frames(1);
    assert!(matches!(frames[0], RelayFrame::AuthOk { .. }), "{frames:?}");
    assert_eq!(frames[1], RelayFrame::Pong { n: 9 });
    assert_eq!(
        h.ops(),
        vec![
            ClusterOp::Announce {
                address: addr("alice"),
                conn: ConnId(1)
            },
            ClusterOp::Watch {
                address: addr("alice"),
                watch: 1
            }
        ]
    );
    assert!(h.events().contains(&RelayEvent::Registered {
        address: addr("alice")
    }));
    assert!(h.store.is_empty(), "a node persists nothing of its own");
}

#[test]
fn a_claim_lost_to_another_node_is_address_taken() {
    let mut h = node();
    let (a, other) = (ident(1), ident(2));
    h.connect(1);
    let f = h.register_frame(1, "alice", &a);
    h.input(1, &f);
    h.answer(ClusterInput::Resolved {
        address: addr("alice"),
        key: Ok(None),
    });
    h.answer(ClusterInput::Claimed {
        address: addr("alice"),
        key: a.public().to_bytes(),
        result: Ok(Claim::Taken),
    });
    // Whose key won? The node asks, then refuses as a single relay would.
    assert_eq!(
        h.ops(),
        vec![ClusterOp::Resolve {
            address: addr("alice")
        }]
    );
    h.answer(ClusterInput::Resolved {
        address: addr("alice"),
        key: Ok(Some(other.public().to_bytes())),
    });
    let frames = h.frames(1);
    assert_eq!(error_code(&frames), Some((ErrorCode::AddressTaken, None)));
    assert!(matches!(frames.last(), Some(RelayFrame::Challenge { .. })));
}

#[test]
fn a_store_that_cannot_answer_closes_an_authenticating_connection() {
    let mut h = node();
    let a = ident(1);
    h.connect(1);
    let f = h.auth_frame(1, "alice", &a);
    h.input(1, &f);
    h.answer(ClusterInput::Resolved {
        address: addr("alice"),
        key: Err("timed out".into()),
    });
    assert_eq!(
        error_code(&h.frames(1)),
        Some((ErrorCode::Unavailable, None))
    );
    assert_eq!(h.closed(), vec![(1, ErrorCode::Unavailable)]);
}

#[test]
fn accepted_leaves_when_the_store_made_it_durable_in_the_order_of_the_sends() {
    let mut h = node();
    let (a, b) = (ident(1), ident(2));
    h.cluster_register(1, "alice", &a);
    h.cluster_register(2, "bob", &b);
    let e1 = env(&a, "alice", &b, "bob", "t", 1);
    let e2 = env(&a, "alice", &b, "bob", "t", 2);
    let e3 = env(&a, "alice", &b, "bob", "t", 3);
    assert!(h
        .input(
            1,
            &ClientFrame::Send {
                seq: 1,
                env: e1.clone()
            }
        )
        .is_empty());
    assert!(matches!(
        h.ops().as_slice(),
        [ClusterOp::Enqueue { token: 1, .. }]
    ));
    h.input(1, &ClientFrame::Send { seq: 2, env: e2 });
    h.input(1, &ClientFrame::Send { seq: 3, env: e3 });
    // The second's answer first: held until the first's.
    h.answer(ClusterInput::Enqueued {
        token: 2,
        result: Ok(Enqueue::Overflow),
    });
    assert!(h.frames(1).is_empty());
    h.answer(ClusterInput::Enqueued {
        token: 1,
        result: Ok(Enqueue::Queued {
            id: 40,
            duplicate: false,
        }),
    });
    let frames = h.frames(1);
    assert_eq!(frames[0], RelayFrame::Accepted { seq: 1, id: 40 });
    assert!(
        matches!(frames[1], RelayFrame::Overflow { seq: 2, .. }),
        "{frames:?}"
    );
    h.answer(ClusterInput::Enqueued {
        token: 3,
        result: Err("no quorum".into()),
    });
    assert_eq!(
        error_code(&h.frames(1)),
        Some((ErrorCode::Unavailable, Some(3)))
    );
    // The packet read from bob's queue is delivered; his ack deletes it from the store.
    h.answer(ClusterInput::Queued {
        address: addr("bob"),
        watch: 2,
        id: 40,
        thread: e1.thread,
        env: serde_json::to_string(&e1).unwrap().into(),
    });
    assert_eq!(delivered_ids(&h.frames(2)), vec![40]);
    h.input(2, &ClientFrame::Ack { id: 40 });
    assert_eq!(h.ops(), vec![ClusterOp::Remove { id: 40 }]);
    assert!(h.store.is_empty());
    // A packet of an older watch is not delivered.
    h.answer(ClusterInput::Queued {
        address: addr("bob"),
        watch: 1,
        id: 41,
        thread: e1.thread,
        env: serde_json::to_string(&e1).unwrap().into(),
    });
    assert!(h.frames(2).is_empty());
}

#[test]
fn a_later_connection_on_another_node_replaces_this_one() {
    let mut h = node();
    let a = ident(1);
    h.cluster_register(1, "alice", &a);
    h.answer(ClusterInput::Announced {
        address: addr("alice"),
        conn: ConnId(1),
        revision: Ok(5),
    });
    // Its own announcement, and an older one of another node: nothing.
    for (node, revision) in [("r1", 9), ("r2", 4)] {
        h.answer(ClusterInput::Presence {
            address: addr("alice"),
            node: node.into(),
            revision,
        });
        assert!(h.closed().is_empty());
    }
    h.answer(ClusterInput::Presence {
        address: addr("alice"),
        node: "r2".into(),
        revision: 7,
    });
    assert_eq!(h.frames(1), vec![RelayFrame::Replaced]);
    assert_eq!(h.closed(), vec![(1, ErrorCode::NotAuthenticated)]);
    assert_eq!(
        h.ops(),
        vec![ClusterOp::Unwatch {
            address: addr("alice")
        }]
    );
}

#[test]
fn a_send_to_an_address_not_cached_waits_for_the_store() {
    let mut h = node();
    let (a, b) = (ident(1), ident(2));
    h.cluster_register(1, "alice", &a);
    let e = env(&a, "alice", &b, "bob", "t", 1);
    h.input(
        1,
        &ClientFrame::Send {
            seq: 1,
            env: e.clone(),
        },
    );
    assert_eq!(
        h.ops(),
        vec![ClusterOp::Resolve {
            address: addr("bob")
        }]
    );
    h.answer(ClusterInput::Resolved {
        address: addr("bob"),
        key: Ok(None),
    });
    assert_eq!(
        error_code(&h.frames(1)),
        Some((ErrorCode::UnknownRecipient, Some(1)))
    );
    h.input(1, &ClientFrame::Send { seq: 2, env: e });
    assert_eq!(h.ops().len(), 1, "not cached: asked again");
    h.answer(ClusterInput::Resolved {
        address: addr("bob"),
        key: Ok(Some(b.public().to_bytes())),
    });
    assert!(matches!(h.ops().as_slice(), [ClusterOp::Enqueue { .. }]));
}

/// A node of a clustered domain that federates (its expiry short).
fn federating_node() -> H {
    use crate::relay::federation::FederationConfig;
    H::with(RelayConfig {
        cluster: Some(ClusterMode { node: "r1".into() }),
        federation: Some(FederationConfig {
            expiry: Duration::from_secs(60),
            ..FederationConfig::new(IdentityKey::from_seed([0xa0; 32]))
        }),
        ..RelayConfig::default()
    })
}

/// An envelope from `from` (of this domain) to bob@b.example.
fn env_to_b(from: &IdentityKey, from_user: &str) -> Envelope {
    let bob = Address::new("bob", "b.example").unwrap();
    ThreadSession::new([7; 32])
        .seal(
            from,
            &addr(from_user),
            &bob,
            &ident(2).public(),
            "t-fed",
            Direction::FromInitiator,
            b"{}",
        )
        .unwrap()
}

#[test]
fn a_clustered_domain_federates_through_the_store() {
    let mut h = federating_node();
    let a = ident(1);
    let env = env_to_b(&a, "alice");
    let json: Box<str> = serde_json::to_string(&env).unwrap().into();

    // Not the federator: a packet read from the store is not this node's to push.
    h.answer(ClusterInput::Outbound {
        id: 7,
        accepted_at: h.now,
        env: json.clone(),
    });
    assert!(h.ops().is_empty() && h.frames(1).is_empty(), "{:?}", h.outs);

    // The federator: a packet older than the expiry is told to its sender through the
    // store (the notice first; the packet is deleted once it is queued).
    h.answer(ClusterInput::Federating { on: true });
    assert!(h.events().contains(&RelayEvent::Federation(
        crate::relay::federation::FederationEvent::Federating { on: true }
    )));
    assert!(h.relay.stats().cluster_federator);
    h.advance(Duration::from_secs(120));
    h.answer(ClusterInput::Outbound {
        id: 7,
        accepted_at: T0,
        env: json,
    });
    let notify = h.ops();
    let [ClusterOp::Notify { to, packet, notice }] = notify.as_slice() else {
        panic!("{notify:?}");
    };
    assert_eq!((to, *packet), (&addr("alice"), 7));
    assert!(notice.contains("\"code\":\"expired\""), "{notice}");
    assert!(
        !h.ops()
            .iter()
            .any(|o| matches!(o, ClusterOp::Remove { .. })),
        "the packet stays until its notice is queued"
    );

    // The notice read back from Alice's queue (on whatever node she is): sent once,
    // deleted from the store on her ack.
    h.cluster_register(1, "alice", &a);
    let noticed = ClusterInput::Noticed {
        address: addr("alice"),
        watch: 1,
        id: 9,
        notice: notice.clone(),
    };
    h.answer(noticed.clone());
    let told = h.frames(1);
    let [RelayFrame::Undeliverable {
        id, packet, code, ..
    }] = told.as_slice()
    else {
        panic!("{told:?}");
    };
    assert_eq!((*id, *packet, *code), (9, 7, ErrorCode::Expired));
    h.answer(noticed);
    assert!(h.frames(1).is_empty(), "read again: not sent twice");
    h.input(1, &ClientFrame::Ack { id: 9 });
    assert_eq!(h.ops(), vec![ClusterOp::Remove { id: 9 }]);

    // The role lost: what the node had read is dropped, and no more is taken.
    h.answer(ClusterInput::Federating { on: false });
    h.answer(ClusterInput::Outbound {
        id: 11,
        accepted_at: h.now,
        env: serde_json::to_string(&env).unwrap().into(),
    });
    assert!(h.ops().is_empty(), "{:?}", h.outs);
    assert!(!h.relay.stats().cluster_federator);
    assert!(h.store.is_empty(), "a node persists nothing of its own");
}

#[test]
fn a_send_to_another_domain_is_queued_in_the_store_for_the_federator() {
    use crate::relay::federation::RemoteRelay;
    let mut h = federating_node();
    let a = ident(1);
    h.cluster_register(1, "alice", &a);
    h.drain();
    // A send to a domain not yet discovered waits for its discovery, as on one relay.
    let env = env_to_b(&a, "alice");
    assert!(h.input(1, &ClientFrame::Send { seq: 3, env }).is_empty());
    assert!(h
        .outs
        .iter()
        .any(|o| matches!(o, RelayOutput::Discover { domain } if domain == "b.example")));
    let b_key = IdentityKey::from_seed([0xb0; 32]).public();
    h.relay.handle(
        h.now,
        RelayInput::Discovered {
            domain: "b.example".into(),
            result: Ok(RemoteRelay {
                endpoint: "wss://relay.b.example".into(),
                keys: vec![b_key],
            }),
        },
    );
    h.drain();
    let ops = h.ops();
    let [ClusterOp::Enqueue {
        token, outbound, ..
    }] = ops.as_slice()
    else {
        panic!("{ops:?}");
    };
    assert!(*outbound, "for the federator, not a local watch");
    h.answer(ClusterInput::Enqueued {
        token: *token,
        result: Ok(Enqueue::Queued {
            id: 40,
            duplicate: false,
        }),
    });
    assert_eq!(
        h.frames(1),
        vec![RelayFrame::Accepted { seq: 3, id: 40 }],
        "accepted once durable, with the store's id"
    );
    assert!(
        !h.outs.iter().any(|o| matches!(o, RelayOutput::Dial { .. })),
        "only the federator dials to push"
    );
}
