//! Resolutions that cross, confirmations after expiry, cancels during rollback and
//! execution.

use super::*;

/// Both agents propose at once (swarm seed 110): with both devices offline, Alice (the
/// initiator) proposes after new context from her user, and so does Bob after his user
/// turned down his own proposal and gave new context; the two resolutions cross. Both
/// sides must end up holding the initiator's, so the next answer is understood.
#[test]
fn crossed_resolutions_settle_on_the_initiators() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let update = |net: &mut Net, i: usize, note: &str| {
        let mut extra = Context::new();
        extra.insert("note".into(), json!(note));
        net.command(
            i,
            Command::UpdateContext {
                thread_id: id.clone(),
                context: extra,
            },
        );
        net.settle();
    };
    let excuse = |net: &mut Net, i: usize| {
        let p = net.prompt(i).expect("resolution prompt");
        net.answer_resolution(
            i,
            p.id,
            ResolutionAnswer::MakeExcuse {
                actual_reason: None,
            },
        );
    };
    // Alice's agent first learns everything it wants from Bob.
    excuse(&mut net, a);
    update(&mut net, a, "either day works");
    let consent = net.nodes[b]
        .prompts
        .values()
        .find(|p| matches!(p.kind, PromptKind::Consent { .. }))
        .map(|p| p.id)
        .expect("Bob is asked for consent");
    net.answer_consent(b, consent, ConsentAnswer::DeclineAll);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    // Offline, each side moves on.
    net.disconnect(a);
    net.disconnect(b);
    excuse(&mut net, a);
    update(&mut net, a, "any evening");
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    excuse(&mut net, b);
    update(&mut net, b, "weekends too");
    assert_eq!(
        state(&net, b, &id),
        ThreadState::Proposed,
        "{}",
        net.render(None)
    );
    net.connect(a);
    net.connect(b);
    net.settle();
    let held = |net: &Net, i: usize| {
        let r = net.nodes[i]
            .agent
            .thread(&id)
            .unwrap()
            .stage
            .resolution()
            .cloned()
            .unwrap();
        (r.packet_id, r.proposer)
    };
    assert_eq!(held(&net, a), held(&net, b), "{}", net.render(None));
    assert_eq!(held(&net, a).1, net.address(a));
    // The next answer is understood: Bob's excuse rules Alice's proposal out on her side
    // (Bob's user resumed the thread, so her agent goes on without it).
    let (excused, _) = held(&net, a);
    let details = open_proposal(&net, a, &id).details;
    excuse(&mut net, b);
    net.settle();
    let t = net.nodes[a].agent.thread(&id).unwrap();
    assert!(
        t.stage.resolution().is_none_or(|r| r.packet_id != excused),
        "{}",
        net.render(None)
    );
    assert!(t.rejected.iter().any(|r| r.details == details));
}

/// A confirmation sent in time reaches the proposer only after its deadline (its device
/// was off, swarm seed 142): the proposer expired, so it answers with its state and the
/// other side, already executing, undoes what it did and expires as well.
#[test]
fn a_confirmation_that_arrives_after_expiry_expires_both_sides() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    let pb = net.prompt(b).unwrap();
    net.answer_resolution(b, pb.id, ResolutionAnswer::Confirm);
    net.settle();
    net.disconnect(b);
    let pa = net.prompt(a).unwrap();
    net.answer_resolution(a, pa.id, ResolutionAnswer::Confirm);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Executing,
        "{}",
        net.render(None)
    );
    let done = net
        .finish_action(a, Ok(()))
        .expect("Alice's calendar entry");
    assert!(!done.undo);
    net.settle();
    net.run_for(Duration::from_secs(25 * 3600));
    assert_eq!(
        state(&net, b, &id),
        ThreadState::Expired,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, a, &id), ThreadState::Executing);
    net.connect(b);
    net.settle();
    let undo = net
        .finish_action(a, Ok(()))
        .expect("Alice undoes her entry");
    assert!(undo.undo);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Expired,
        "{}",
        net.render(None)
    );
    assert!(notified(&net, a, NotifyKind::Expired));
}

/// Drives the dinner to Alice undoing her calendar entry after Bob's booking failed, with
/// Bob's next proposal already sent: it reaches Alice while she is in ROLLBACK and waits
/// for the undo to finish. Returns the thread id; Alice's undo is still running.
fn to_rollback_with_the_next_proposal(net: &mut Net, a: usize, b: usize) -> String {
    let id = to_proposed(net, a, b);
    confirm_both(net, a, b);
    assert!(!net.finish_action(a, Ok(())).unwrap().undo);
    net.settle();
    let booking = net.finish_action(b, Err("fully booked".into())).unwrap();
    assert_eq!(booking.action.action, "book_table");
    net.settle();
    assert_eq!(
        state(net, a, &id),
        ThreadState::Rollback,
        "{}",
        net.render(None)
    );
    assert_eq!(state(net, b, &id), ThreadState::Proposed);
    assert!(net.nodes[a]
        .agent
        .thread(&id)
        .unwrap()
        .held
        .deferred_resolution
        .is_some());
    id
}

/// Swarm seed 467: the proposer's user turns down the next proposal while the other
/// side still undoes the failed one; the cancel answers a resolution that side has not
/// opened yet. It was dropped as "an older resolution", so the undo opened the proposal
/// and Alice was asked about a thread Bob had closed.
#[test]
fn a_cancel_of_the_next_proposal_during_rollback_closes_after_the_undo() {
    let (mut net, a, b) = net();
    let id = to_rollback_with_the_next_proposal(&mut net, a, b);
    let p = net.prompt(b).expect("Bob's prompt for his next proposal");
    net.answer_resolution(b, p.id, ResolutionAnswer::Decline);
    net.settle();
    assert_eq!(state(&net, b, &id), ThreadState::Declined);
    assert!(net.finish_action(a, Ok(())).expect("Alice's undo").undo);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Declined,
        "{}",
        net.render(None)
    );
    assert!(net.prompt(a).is_none(), "no prompt for a closed thread");
}

/// The same race with a confirmation: Bob confirms his next proposal while Alice still
/// undoes. His answer must wait for the proposal to open on her side, or her own
/// confirmation leaves the thread waiting for one that was dropped.
#[test]
fn a_confirmation_of_the_next_proposal_during_rollback_is_kept() {
    let (mut net, a, b) = net();
    let id = to_rollback_with_the_next_proposal(&mut net, a, b);
    let p = net.prompt(b).expect("Bob's prompt for his next proposal");
    net.answer_resolution(b, p.id, ResolutionAnswer::Confirm);
    net.settle();
    assert!(net.finish_action(a, Ok(())).expect("Alice's undo").undo);
    net.settle();
    assert_eq!(state(&net, a, &id), ThreadState::Proposed);
    let p = net
        .prompt(a)
        .expect("Alice is asked about the next proposal");
    net.answer_resolution(a, p.id, ResolutionAnswer::Confirm);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Executing,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Executing);
}

/// Swarm seed 627: a user cancels while the agreed actions run. The other side withdraws
/// (undoes and closes); this side used to finish its actions, report them done and wait
/// forever for the other side's report. It now undoes and closes as well.
#[test]
fn a_cancel_during_execution_undoes_and_closes_both_sides() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    confirm_both(&mut net, a, b);
    net.command(
        a,
        Command::CancelThread {
            thread_id: id.clone(),
        },
    );
    net.settle();
    assert_eq!(state(&net, b, &id), ThreadState::Failed);
    // Each side's running action reports, then is undone.
    for i in [a, b] {
        assert!(!net.finish_action(i, Ok(())).unwrap().undo);
        net.settle();
        assert!(net.finish_action(i, Ok(())).expect("the undo").undo);
        net.settle();
    }
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Declined,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Declined);
}

/// Once this side has reported its part done, the other side may complete at any moment
/// and a COMPLETED thread cannot be cancelled: the cancel is refused, and the thread ends
/// with the other side's report.
#[test]
fn a_cancel_after_reporting_done_is_refused() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    confirm_both(&mut net, a, b);
    assert!(!net.finish_action(a, Ok(())).unwrap().undo);
    net.settle();
    let sent = net.nodes[a].agent.thread(&id).unwrap().history.len();
    net.command(
        a,
        Command::CancelThread {
            thread_id: id.clone(),
        },
    );
    net.settle();
    assert_eq!(net.nodes[a].agent.thread(&id).unwrap().history.len(), sent);
    while net.finish_action(b, Ok(())).is_some() {
        net.settle();
    }
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Completed,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Completed);
}

/// Swarm seeds 810, 817: the proposer's user declines his own proposal while the other
/// device is off for longer than the confirmation timeout. That side expires when it is
/// back, before the relay hands it the cancel; the cancel was sent in time, so it ends
/// DECLINED as the sender did, instead of answering EXPIRED to a closed thread.
#[test]
fn a_cancel_that_arrives_after_expiry_declines_the_expired_side() {
    let (mut net, a, b) = net();
    let id = to_proposed(&mut net, a, b);
    net.disconnect(a);
    let p = net.prompt(b).unwrap();
    net.answer_resolution(b, p.id, ResolutionAnswer::Decline);
    net.settle();
    assert_eq!(state(&net, b, &id), ThreadState::Declined);
    net.run_for(Duration::from_secs(25 * 3600));
    assert_eq!(state(&net, a, &id), ThreadState::Expired);
    net.connect(a);
    net.settle();
    assert_eq!(
        state(&net, a, &id),
        ThreadState::Declined,
        "{}",
        net.render(None)
    );
    assert_eq!(state(&net, b, &id), ThreadState::Declined);
    assert!(notified(&net, a, NotifyKind::Declined));
}
