//! The person's choices through the control socket (what `a2acp answer`, `a2acp
//! suggestions` send): an alternative taken from the resolution prompt becomes the
//! proposal both users then confirm, and suggestions are listed and refused by number.

use a2acp_core::agent::{Prompt, PromptKind};
use a2acp_runtime::control::Request;
use a2acp_tests::*;

fn resolution_prompt(ps: &[Prompt]) -> Option<Prompt> {
    ps.iter()
        .find(|p| matches!(p.kind, PromptKind::Resolution { .. }))
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alternative_chosen_over_the_control_socket_is_proposed_and_confirmed() {
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let alice = run_agent(&ha, "alice", None);
    let bob = run_agent(&hb, "bob", None);
    wait_online(&alice).await;
    wait_online(&bob).await;

    let consent = start_dinner_until_consent(&alice, bob_cfg.address.clone()).await;
    answer(
        &ha,
        consent.id,
        &["transport_mode", "cuisine_preference=no"],
    )
    .await;
    let first = eventually(30, "Alice's resolution prompt", || async {
        resolution_prompt(&prompts(&alice).await)
    })
    .await;
    let PromptKind::Resolution { proposal, .. } = &first.kind else {
        unreachable!()
    };
    let alt = proposal
        .alternatives
        .first()
        .cloned()
        .expect("an alternative");
    // The prompt as `a2acp prompts` prints it: the alternative with its trade-off and
    // its key, and how to take it.
    let text = a2acp_runtime::prompt::render(&first);
    assert!(
        text.contains(&format!("[1] alternative: {}", alt.summary)),
        "{text}"
    );
    assert!(text.contains(&alt.reason), "{text}");
    assert!(a2acp_runtime::prompt::help(&first).contains("alternative 1"));
    // A wrong number is refused with the numbers there are, and the prompt stays open.
    let r = ctl(
        &ha,
        Request::Answer {
            prompt_id: first.id,
            args: vec!["alternative".into(), "9".into()],
        },
    )
    .await;
    assert!(
        !r.ok && r.error.as_deref().unwrap_or("").contains("offers"),
        "{r:?}"
    );

    answer(&ha, first.id, &["alternative", "1"]).await;

    // Bob's agent proposes the alternative; both are asked again, under new numbers.
    let again = eventually(30, "the alternative proposed to Alice", || async {
        resolution_prompt(&prompts(&alice).await).filter(|p| p.id != first.id)
    })
    .await;
    let PromptKind::Resolution { proposal: now, .. } = &again.kind else {
        unreachable!()
    };
    assert_eq!(now.summary, alt.summary);
    assert_eq!(now.details.get("time"), alt.details.get("time"));
    let bobs = eventually(30, "the alternative shown to Bob", || async {
        resolution_prompt(&prompts(&bob).await).filter(|p| match &p.kind {
            PromptKind::Resolution { proposal, .. } => proposal.summary == alt.summary,
            _ => false,
        })
    })
    .await;
    answer(&ha, again.id, &["confirm"]).await;
    answer(&hb, bobs.id, &["confirm"]).await;
    let ta = wait_state(&alice, "COMPLETED", 30).await;
    wait_state(&bob, "COMPLETED", 30).await;
    let detail = ctl(
        &hb,
        Request::Thread {
            id: ta[0].id.clone(),
        },
    )
    .await;
    assert!(
        detail.data["resolution"]
            .as_str()
            .unwrap_or_default()
            .contains(&alt.summary),
        "{}",
        detail.data
    );

    // No suggestion yet: the list is empty and accepting a number is refused.
    let r = ctl(&ha, Request::Suggestions).await;
    assert!(r.ok && r.data == serde_json::json!([]), "{r:?}");
    let r = ctl(&ha, Request::AcceptSuggestion { id: 1 }).await;
    assert!(!r.ok, "{r:?}");
    assert!(r
        .error
        .unwrap_or_default()
        .contains("no open suggestion #1"));

    alice.stop().await.unwrap();
    bob.stop().await.unwrap();
    relay.stop(true).await;
}
