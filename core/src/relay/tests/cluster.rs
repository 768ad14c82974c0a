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
