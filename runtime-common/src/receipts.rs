//! `a2acp receipts`, `a2acp agreements` and `a2acp retractions`: consent receipts, the
//! agreements of confirmed proposals and the records of what was taken back as a person
//! reads them, and checked offline (`a2acp receipts verify FILE`) without the agent
//! (SPEC-NOTES "Consent receipts", "Receipts of an agreement", "Retraction").

use a2acp_core::display;
use a2acp_core::encoding::{b64_decode, b64_encode};
use a2acp_core::receipt::agreement::Agreement;
use a2acp_core::receipt::retraction::{Retraction, RetractionError};
use a2acp_core::receipt::{Basis, Receipt, ReceiptKind, StoredReceipt};
use a2acp_core::Address;
use serde_json::Value;

/// What decided a field, in words.
pub fn basis_text(b: &Basis) -> String {
    match b {
        Basis::User { prompt_id: 0 } => "you, at the group's prompt".into(),
        Basis::User { prompt_id } => format!("you, at prompt {prompt_id}"),
        Basis::UserStarted => "you, starting the thread".into(),
        Basis::Tier { tier } => format!("tier {tier}"),
        Basis::RelationshipOverride { tier } => format!("your override for this agent: {tier}"),
        Basis::IntentTier { phrase, tier } => format!(
            "{tier} in threads about “{}”",
            display::line(phrase, display::MAX_SHORT)
        ),
        Basis::Agent => "the agent (no tier applies)".into(),
    }
}

/// The receipts as lines a person reads: one block each, oldest first.
pub fn render(list: &[StoredReceipt]) -> String {
    if list.is_empty() {
        return "no receipts yet: one is signed for every consent answer and confirmation".into();
    }
    let mut out = String::new();
    for s in list {
        let r = &s.receipt;
        let kind = match r.kind {
            ReceiptKind::Consent => "consent",
            ReceiptKind::Confirmation => "confirmation",
        };
        out.push_str(&format!(
            "{}  {}  {kind}  thread {}  with {}  for “{}”\n",
            r.receipt_id,
            r.at,
            display::line(&r.thread_id, display::MAX_SHORT),
            r.peer,
            display::line(&r.purpose.summary, display::MAX_SHORT),
        ));
        let shared: Vec<(&str, &Basis)> = r
            .disclosed
            .iter()
            .map(|d| (d.field.as_str(), &d.basis))
            .collect();
        let declined: Vec<(&str, &Basis)> = r
            .declined
            .iter()
            .map(|d| (d.field.as_str(), &d.basis))
            .collect();
        for (label, fields) in [("shared   ", shared), ("declined ", declined)] {
            if fields.is_empty() {
                continue;
            }
            let v: Vec<String> = fields
                .iter()
                .map(|(f, b)| {
                    format!(
                        "{} ({})",
                        display::line(f, display::MAX_FIELD_NAME),
                        basis_text(b)
                    )
                })
                .collect();
            out.push_str(&format!("  {label} {}\n", v.join(", ")));
        }
        if let Some(p) = &r.proposal {
            let by = r.decided_by.as_ref().map(basis_text).unwrap_or_default();
            out.push_str(&format!("  confirmed proposal {} ({by})\n", b64_encode(p)));
        }
    }
    out.trim_end().to_string()
}

/// The agreements as lines a person reads: one block each, oldest first.
pub fn render_agreements(list: &[Agreement]) -> String {
    if list.is_empty() {
        return "no agreements yet: one is kept for every proposal confirmed by everyone it needs"
            .into();
    }
    let mut out = String::new();
    for g in list {
        let check = match g.verify() {
            Ok(n) => format!("{n} of {} required confirmations signed", g.needed()),
            Err(e) => format!("does not verify: {e}"),
        };
        out.push_str(&format!(
            "{}  thread {}  “{}”\n  {check}\n",
            g.at,
            display::line(&g.thread_id, display::MAX_SHORT),
            display::line(&g.proposal.proposal.summary, display::MAX_SHORT),
        ));
        for c in &g.confirmations {
            out.push_str(&format!(
                "  signed by {} (key {})\n",
                c.address,
                b64_encode(&c.key)
            ));
        }
        for a in &g.unsigned {
            out.push_str(&format!("  confirmed unsigned by {a}\n"));
        }
    }
    out.trim_end().to_string()
}

/// What a retraction record says of its acknowledgement, in words.
fn retraction_state(r: &Retraction) -> String {
    match r.verify() {
        Ok(()) => format!("deleted: {} acknowledged it, signed", r.peer),
        Err(RetractionError::Unacknowledged(_)) => format!(
            "not acknowledged by {}: nothing says it was deleted",
            r.peer
        ),
        Err(e) => format!("does not verify: {e}"),
    }
}

/// The fields of a retraction, for a line a person reads.
fn fields_text(r: &Retraction) -> String {
    let v: Vec<String> = r
        .fields
        .iter()
        .map(|f| display::line(f, display::MAX_FIELD_NAME).into_owned())
        .collect();
    display::line(&v.join(", "), display::MAX_SHORT).into_owned()
}

/// The retraction records as lines a person reads: one block each, oldest first.
pub fn render_retractions(list: &[Retraction]) -> String {
    if list.is_empty() {
        return "nothing taken back: one is kept for every `thread retract`".into();
    }
    let mut out = String::new();
    for r in list {
        out.push_str(&format!(
            "{}  thread {}  took back {} from {}\n  {}\n",
            display::line(&r.asked_at, display::MAX_SHORT),
            display::line(&r.thread_id, display::MAX_SHORT),
            fields_text(r),
            r.peer,
            retraction_state(r),
        ));
        if let Some(a) = &r.ack {
            out.push_str(&format!(
                "  acknowledged {} (key {})\n",
                display::line(&a.at, display::MAX_SHORT),
                b64_encode(&a.key)
            ));
        }
    }
    out.trim_end().to_string()
}

/// What `receipts verify` checks beyond each signature.
#[derive(Debug, Default, Clone)]
pub struct VerifyOptions {
    /// The key every receipt must be signed by (base64url), e.g. from `a2acp keys show`.
    pub key: Option<String>,
    /// `FIELD=VALUE`: the value disclosed for FIELD (VALUE as JSON, else as a string).
    pub values: Vec<String>,
    /// `ADDRESS=KEY`: in an agreement, ADDRESS's confirmation must be signed by KEY; in a
    /// retraction, ADDRESS's acknowledgement.
    pub signers: Vec<String>,
}

/// One item of a file `receipts verify` reads.
#[derive(Debug, Clone)]
pub enum Item {
    /// A consent receipt, with its salts if the file kept them.
    Receipt(Box<StoredReceipt>),
    /// The agreement of a confirmed proposal.
    Agreement(Box<Agreement>),
    /// The record of a retraction, with the peer's acknowledgement once it came.
    Retraction(Box<Retraction>),
}

/// The items in `text`: one receipt, one stored receipt (with its salts), one agreement,
/// one retraction record, or a list of them (what `a2acp receipts --json`, `a2acp
/// agreements --json` and `a2acp retractions --json` write).
pub fn parse(text: &str) -> Result<Vec<Item>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let items = match v {
        Value::Array(a) => a,
        other => vec![other],
    };
    if items.is_empty() {
        return Err("the file holds an empty list: nothing to verify".into());
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            if item.get("type").and_then(Value::as_str) == Some("agreement") {
                return serde_json::from_value::<Agreement>(item)
                    .map(|g| Item::Agreement(Box::new(g)))
                    .map_err(|e| format!("item {}: not an agreement: {e}", i + 1));
            }
            if item.get("type").and_then(Value::as_str) == Some("retraction") {
                return serde_json::from_value::<Retraction>(item)
                    .map(|r| Item::Retraction(Box::new(r)))
                    .map_err(|e| format!("item {}: not a retraction record: {e}", i + 1));
            }
            let stored = if item.get("receipt").is_some() {
                serde_json::from_value::<StoredReceipt>(item)
            } else {
                serde_json::from_value::<Receipt>(item).map(|receipt| StoredReceipt {
                    receipt,
                    salts: Default::default(),
                })
            };
            stored
                .map(|s| Item::Receipt(Box::new(s)))
                .map_err(|e| format!("item {}: not a consent receipt: {e}", i + 1))
        })
        .collect()
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: &[String]) -> String {
    match items.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

fn key_arg(flag: &str, k: &str) -> Result<[u8; 32], String> {
    b64_decode(k)
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| format!("{flag} {k}: not a base64url public key of 32 bytes"))
}

/// Checks every receipt, agreement and retraction record of `text` offline. A receipt: its
/// signature under its key (and `opts.key`, if given) and each `opts.values` against the
/// salted hash. An agreement: the proposal against its digest, each confirmation's
/// signature, every required confirmation signed, and `opts.signers`' keys. A retraction:
/// the peer's acknowledgement over the thread, the retraction and its fields, and
/// `opts.signers`' keys; one without an acknowledgement is reported as not acknowledged,
/// neither verified nor failed. `Ok` holds the report when every check passed, `Err` the
/// report naming each check that failed.
pub fn verify(text: &str, opts: &VerifyOptions) -> Result<String, String> {
    let list = parse(text)?;
    let key = match &opts.key {
        Some(k) => Some(key_arg("--key", k)?),
        None => None,
    };
    let mut signers = Vec::new();
    for s in &opts.signers {
        let (a, k) = s
            .split_once('=')
            .ok_or_else(|| format!("--signer {s}: write ADDRESS=KEY"))?;
        let a = Address::parse(a).map_err(|e| format!("--signer {s}: {e}"))?;
        signers.push((a, key_arg("--signer", k)?));
    }
    let mut values = Vec::new();
    for v in &opts.values {
        let (field, value) = v
            .split_once('=')
            .ok_or_else(|| format!("--value {v}: write FIELD=VALUE"))?;
        let value = serde_json::from_str::<Value>(value)
            .unwrap_or_else(|_| Value::String(value.to_string()));
        values.push((field.to_string(), value, false));
    }
    let mut lines = Vec::new();
    let mut failed = false;
    let (mut receipts, mut agreements) = (0, 0);
    let (mut retractions, mut unacknowledged) = (0, 0);
    for item in &list {
        let s = match item {
            Item::Receipt(s) => s,
            Item::Retraction(r) => {
                let id = format!(
                    "retraction {} of thread {}",
                    display::line(&r.retraction_id, display::MAX_SHORT),
                    display::line(&r.thread_id, display::MAX_SHORT)
                );
                match r.verify_keys(&signers) {
                    Ok(()) => {
                        retractions += 1;
                        let key = r.ack.as_ref().map(|a| b64_encode(&a.key));
                        lines.push(format!(
                            "{id}: {} acknowledged deleting {}, signed with key {}",
                            r.peer,
                            fields_text(r),
                            key.unwrap_or_default()
                        ));
                    }
                    Err(RetractionError::Unacknowledged(_)) => {
                        unacknowledged += 1;
                        lines.push(format!(
                            "{id}: not acknowledged: {} was asked to delete {} and nothing \
                             says it did",
                            r.peer,
                            fields_text(r)
                        ));
                    }
                    Err(e) => {
                        failed = true;
                        lines.push(format!("{id}: FAILED: {e}"));
                    }
                }
                continue;
            }
            Item::Agreement(g) => {
                agreements += 1;
                let id = format!(
                    "agreement of thread {}",
                    display::line(&g.thread_id, display::MAX_SHORT)
                );
                match g.verify_keys(&signers) {
                    Ok(n) => {
                        let who: Vec<String> = g
                            .confirmations
                            .iter()
                            .map(|c| c.address.to_string())
                            .collect();
                        lines.push(format!(
                            "{id}: {n} of {} required confirmations signed over one proposal ({})",
                            g.needed(),
                            who.join(", ")
                        ));
                    }
                    Err(e) => {
                        failed = true;
                        lines.push(format!("{id}: FAILED: {e}"));
                    }
                }
                continue;
            }
        };
        receipts += 1;
        let r = &s.receipt;
        let id = display::line(&r.receipt_id, display::MAX_SHORT).into_owned();
        let signed = match key {
            Some(k) => r.verify_by(&k),
            None => r.verify(),
        };
        match signed {
            Ok(()) => lines.push(format!(
                "{id}: signature valid (signed by {} with key {})",
                r.agent,
                b64_encode(&r.key)
            )),
            Err(e) => {
                failed = true;
                lines.push(format!("{id}: FAILED: {e}"));
                continue;
            }
        }
        for (field, value, seen) in values.iter_mut() {
            if !r.disclosed.iter().any(|d| &d.field == field) {
                continue;
            }
            *seen = true;
            let name = display::line(field, display::MAX_FIELD_NAME);
            match s.check_value(field, value) {
                Ok(()) => lines.push(format!(
                    "{id}: {name}: the value given is the one disclosed"
                )),
                Err(e) => {
                    failed = true;
                    lines.push(format!("{id}: FAILED: {e}"));
                }
            }
        }
    }
    for (field, _, seen) in &values {
        if !seen {
            failed = true;
            lines.push(format!(
                "FAILED: no valid receipt discloses `{}`",
                display::line(field, display::MAX_FIELD_NAME)
            ));
        }
    }
    let report = lines.join("\n");
    let mut counts = vec![format!("{receipts} receipt(s)")];
    if agreements > 0 {
        counts.push(format!("{agreements} agreement(s)"));
    }
    if retractions > 0 {
        counts.push(format!("{retractions} retraction(s)"));
    }
    let not_acked = match unacknowledged {
        0 => String::new(),
        n => format!("; {n} retraction(s) not acknowledged"),
    };
    match failed {
        false => Ok(format!(
            "{report}\n{} verified{not_acked}",
            and_list(&counts)
        )),
        true => Err(report),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2acp_core::crypto::IdentityKey;
    use a2acp_core::receipt::{value_hash, Declined, Disclosed, Purpose, Salt, RECEIPT_VERSION};
    use serde_json::json;

    fn stored() -> (IdentityKey, StoredReceipt) {
        let id = IdentityKey::from_seed([4; 32]);
        let salt = Salt([5; 16]);
        let receipt = Receipt {
            version: RECEIPT_VERSION,
            receipt_id: "rcp_test".into(),
            kind: ReceiptKind::Consent,
            agent: Address::parse("agent:alice@example.org").unwrap(),
            key: [0; 32],
            peer: Address::parse("agent:bob@example.org").unwrap(),
            thread_id: "thr_1".into(),
            purpose: Purpose {
                category: "social".into(),
                summary: "Dinner <img src=x onerror=alert(1)>".into(),
            },
            at: "2026-11-28T19:00:00Z".into(),
            disclosed: vec![Disclosed {
                field: "dietary".into(),
                value_hash: value_hash(&salt, &json!("vegetarian")).unwrap(),
                basis: Basis::User { prompt_id: 2 },
                usage: None,
            }],
            declined: vec![Declined {
                field: "budget\u{1b}[2J".into(),
                basis: Basis::Tier {
                    tier: "never_share".into(),
                },
            }],
            proposal: None,
            decided_by: None,
            sig: [0; 64],
        }
        .sign(&id)
        .unwrap();
        let salts = [("dietary".to_string(), salt)].into();
        (id, StoredReceipt { receipt, salts })
    }

    #[test]
    fn an_exported_list_verifies_with_its_values() {
        let (id, s) = stored();
        let text = serde_json::to_string(&vec![s]).unwrap();
        let opts = VerifyOptions {
            key: Some(b64_encode(&id.public().to_bytes())),
            values: vec!["dietary=vegetarian".into()],
            ..Default::default()
        };
        let report = verify(&text, &opts).unwrap();
        assert!(report.contains("signature valid"), "{report}");
        assert!(
            report.contains("dietary: the value given is the one disclosed"),
            "{report}"
        );
    }

    #[test]
    fn each_failure_is_named() {
        let (_, s) = stored();
        let mut altered = s.clone();
        altered.receipt.declined.clear();
        let text = serde_json::to_string(&altered).unwrap();
        let e = verify(&text, &VerifyOptions::default()).unwrap_err();
        assert!(e.contains("FAILED") && e.contains("altered"), "{e}");
        let text = serde_json::to_string(&s).unwrap();
        let wrong_value = VerifyOptions {
            values: vec!["dietary=vegan".into()],
            ..Default::default()
        };
        let e = verify(&text, &wrong_value).unwrap_err();
        assert!(e.contains("is not the value disclosed"), "{e}");
        let other_key = VerifyOptions {
            key: Some(b64_encode(&[9; 32])),
            ..Default::default()
        };
        let e = verify(&text, &other_key).unwrap_err();
        assert!(e.contains("not by the expected key"), "{e}");
        let unknown = VerifyOptions {
            values: vec!["party_size=4".into()],
            ..Default::default()
        };
        let e = verify(&text, &unknown).unwrap_err();
        assert!(e.contains("no valid receipt discloses `party_size`"), "{e}");
        // Without salts (the receipt alone), a value cannot be checked.
        let bare = serde_json::to_string(&s.receipt).unwrap();
        let e = verify(
            &bare,
            &VerifyOptions {
                values: vec!["dietary=vegetarian".into()],
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.contains("no salt for field `dietary`"), "{e}");
        for bad in ["", "[]", "{\"type\":\"consent_receipt\"}", "[1]"] {
            assert!(verify(bad, &VerifyOptions::default()).is_err(), "{bad}");
        }
    }

    fn agreement() -> (IdentityKey, IdentityKey, Agreement) {
        use a2acp_core::packet::{Proposal, ResolutionBody};
        use a2acp_core::receipt::agreement::{Confirmation, AGREEMENT_VERSION};
        let (alice, bob) = (
            IdentityKey::from_seed([4; 32]),
            IdentityKey::from_seed([6; 32]),
        );
        let who = ["agent:alice@example.org", "agent:bob@example.org"]
            .map(|a| Address::parse(a).unwrap());
        let proposal = ResolutionBody {
            proposal: Proposal {
                summary: "Dinner \u{1b}[2J Friday".into(),
                details: Default::default(),
                alternatives: Vec::new(),
                reasoning: String::new(),
            },
            requires_confirmation_from: who.to_vec(),
            actions_on_confirm: Vec::new(),
            confirmation_timeout: None,
            on_timeout: None,
            quorum: None,
        };
        let d = a2acp_core::receipt::proposal_digest(&proposal).unwrap();
        let g = Agreement {
            version: AGREEMENT_VERSION,
            agreement_id: "thr_1".into(),
            thread_id: "thr_1".into(),
            at: "2026-11-28T19:05:00Z".into(),
            proposal,
            proposal_digest: d,
            confirmations: vec![
                Confirmation::sign(&alice, &who[0], "thr_1", &d),
                Confirmation::sign(&bob, &who[1], "thr_1", &d),
            ],
            unsigned: Vec::new(),
        };
        (alice, bob, g)
    }

    #[test]
    fn agreements_verify_beside_receipts_and_their_failures_are_named() {
        let (_, s) = stored();
        let (_, bob, g) = agreement();
        let both = serde_json::to_string(&json!([s, g])).unwrap();
        let bob_key = b64_encode(&bob.public().to_bytes());
        let opts = VerifyOptions {
            signers: vec![format!("agent:bob@example.org={bob_key}")],
            ..Default::default()
        };
        let report = verify(&both, &opts).unwrap();
        assert!(
            report.contains("2 of 2 required confirmations signed"),
            "{report}"
        );
        assert!(
            report.ends_with("1 receipt(s) and 1 agreement(s) verified"),
            "{report}"
        );
        let wrong = VerifyOptions {
            signers: vec![format!("agent:bob@example.org={}", b64_encode(&[9; 32]))],
            ..Default::default()
        };
        let e = verify(&both, &wrong).unwrap_err();
        assert!(e.contains("agent:bob@example.org signed with"), "{e}");
        let mut altered = g.clone();
        altered.proposal.proposal.summary = "Lunch".into();
        let e = verify(
            &serde_json::to_string(&altered).unwrap(),
            &VerifyOptions::default(),
        )
        .unwrap_err();
        assert!(e.contains("the proposal does not match its digest"), "{e}");
        let mut half = g.clone();
        half.confirmations.pop();
        half.unsigned = vec![Address::parse("agent:bob@example.org").unwrap()];
        let e = verify(
            &serde_json::to_string(&half).unwrap(),
            &VerifyOptions::default(),
        )
        .unwrap_err();
        assert!(e.contains("1 signed confirmations of the 2"), "{e}");
        assert!(verify(
            &both,
            &VerifyOptions {
                signers: vec!["nobody".into()],
                ..Default::default()
            }
        )
        .is_err());
        let text = render_agreements(&[g]);
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(
            text.contains("2 of 2 required confirmations signed"),
            "{text}"
        );
        assert!(text.contains("signed by agent:bob@example.org"), "{text}");
    }

    fn retraction(acked: bool) -> (IdentityKey, Retraction) {
        use a2acp_core::receipt::retraction::{ack_bytes, Acknowledgement, RETRACTION_VERSION};
        let bob = IdentityKey::from_seed([6; 32]);
        let peer = Address::parse("agent:bob@example.org").unwrap();
        let fields = vec!["transport_mode".to_string(), "dietary".to_string()];
        let ack = acked.then(|| Acknowledgement {
            key: bob.public().to_bytes(),
            sig: bob.sign(&ack_bytes(&peer, "thr_1", "pkt_r1", &fields)),
            at: "2026-11-28T19:10:01Z".into(),
        });
        let r = Retraction {
            version: RETRACTION_VERSION,
            thread_id: "thr_1".into(),
            retraction_id: "pkt_r1".into(),
            agent: Address::parse("agent:alice@example.org").unwrap(),
            peer,
            fields,
            asked_at: "2026-11-28T19:10:00Z".into(),
            ack,
        };
        (bob, r)
    }

    #[test]
    fn retractions_verify_beside_receipts_and_agreements() {
        let (_, s) = stored();
        let (_, _, g) = agreement();
        let (bob, r) = retraction(true);
        let all = serde_json::to_string(&json!([s, g, r])).unwrap();
        let bob_key = b64_encode(&bob.public().to_bytes());
        let opts = VerifyOptions {
            signers: vec![format!("agent:bob@example.org={bob_key}")],
            ..Default::default()
        };
        let report = verify(&all, &opts).unwrap();
        assert!(
            report.contains(&format!(
                "retraction pkt_r1 of thread thr_1: agent:bob@example.org acknowledged \
                 deleting transport_mode, dietary, signed with key {bob_key}"
            )),
            "{report}"
        );
        assert!(
            report.ends_with("1 receipt(s), 1 agreement(s) and 1 retraction(s) verified"),
            "{report}"
        );
        // One record alone, as `retractions --json` writes a single one.
        let one = serde_json::to_string(&r).unwrap();
        let report = verify(&one, &VerifyOptions::default()).unwrap();
        assert!(
            report.ends_with("0 receipt(s) and 1 retraction(s) verified"),
            "{report}"
        );
        let text = render_retractions(&[r]);
        assert!(
            text.contains("took back transport_mode, dietary from agent:bob@example.org"),
            "{text}"
        );
        assert!(
            text.contains("deleted: agent:bob@example.org acknowledged it, signed"),
            "{text}"
        );
        assert!(text.contains(&format!("(key {bob_key})")), "{text}");
    }

    #[test]
    fn each_retraction_failure_is_named() {
        let (_, r) = retraction(true);
        let fails = |r: &Retraction, opts: &VerifyOptions| {
            verify(&serde_json::to_string(r).unwrap(), opts).unwrap_err()
        };
        let none = VerifyOptions::default();
        // A field added, one removed, another thread, another retraction, another peer:
        // the acknowledgement does not cover them.
        let mut tampered = Vec::new();
        let mut t = r.clone();
        t.fields.push("budget_range".into());
        tampered.push(("a field added", t));
        let mut t = r.clone();
        t.fields.pop();
        tampered.push(("a field removed", t));
        let mut t = r.clone();
        t.thread_id = "thr_2".into();
        tampered.push(("the thread", t));
        let mut t = r.clone();
        t.retraction_id = "pkt_r2".into();
        tampered.push(("the retraction id", t));
        for (what, t) in &tampered {
            let e = fails(t, &none);
            assert!(
                e.contains(
                    "FAILED: the acknowledgement of agent:bob@example.org does not verify: \
                     the record was altered"
                ),
                "{what}: {e}"
            );
        }
        let mut t = r.clone();
        t.peer = Address::parse("agent:carol@example.org").unwrap();
        let e = fails(&t, &none);
        assert!(
            e.contains("the acknowledgement of agent:carol@example.org does not verify"),
            "{e}"
        );
        // A signature altered, or the key swapped for another.
        let mut t = r.clone();
        if let Some(a) = t.ack.as_mut() {
            a.sig[0] ^= 1;
        }
        assert!(fails(&t, &none).contains("the record was altered"));
        let mut t = r.clone();
        if let Some(a) = t.ack.as_mut() {
            a.key = IdentityKey::from_seed([8; 32]).public().to_bytes();
        }
        assert!(fails(&t, &none).contains("the record was altered"));
        // Genuine, but not by the key expected for the peer.
        let other = b64_encode(&[9; 32]);
        let e = fails(
            &r,
            &VerifyOptions {
                signers: vec![format!("agent:bob@example.org={other}")],
                ..Default::default()
            },
        );
        assert!(
            e.contains("agent:bob@example.org acknowledged with")
                && e.contains(&format!("not with the expected key {other}")),
            "{e}"
        );
        let mut t = r.clone();
        t.version = 2;
        assert!(fails(&t, &none).contains("retraction version 2 is not supported"));
        let e = verify("{\"type\":\"retraction\",\"version\":1}", &none).unwrap_err();
        assert!(e.contains("item 1: not a retraction record"), "{e}");
        // One failing record fails the file, whatever else it holds.
        let (_, s) = stored();
        let e = verify(
            &serde_json::to_string(&json!([s, tampered[0].1])).unwrap(),
            &none,
        )
        .unwrap_err();
        assert!(e.contains("signature valid") && e.contains("FAILED"), "{e}");
        // The times are the retracting agent's notes, outside what the peer signed.
        let mut t = r.clone();
        t.asked_at = "2027-01-01T00:00:00Z".into();
        assert!(verify(&serde_json::to_string(&t).unwrap(), &none).is_ok());
    }

    #[test]
    fn an_unacknowledged_retraction_is_reported_not_verified() {
        let (_, r) = retraction(false);
        let (_, acked) = retraction(true);
        let text = serde_json::to_string(&json!([acked, r])).unwrap();
        let report = verify(&text, &VerifyOptions::default()).unwrap();
        assert!(
            report.contains(
                "retraction pkt_r1 of thread thr_1: not acknowledged: agent:bob@example.org \
                 was asked to delete transport_mode, dietary and nothing says it did"
            ),
            "{report}"
        );
        assert!(
            report.ends_with(
                "0 receipt(s) and 1 retraction(s) verified; 1 retraction(s) not acknowledged"
            ),
            "{report}"
        );
        let text = render_retractions(&[r]);
        assert!(
            text.contains("not acknowledged by agent:bob@example.org: nothing says it was deleted"),
            "{text}"
        );
        assert!(!text.contains("acknowledged 2026"), "{text}");
    }

    #[test]
    fn peer_text_is_shown_clean() {
        let (_, s) = stored();
        let text = render(&[s]);
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(
            text.contains("shared    dietary (you, at prompt 2)"),
            "{text}"
        );
    }
}
