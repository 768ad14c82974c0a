//! `a2acp receipts` and `a2acp agreements`: consent receipts and the agreements of
//! confirmed proposals as a person reads them, and checked offline (`a2acp receipts verify
//! FILE`) without the agent (SPEC-NOTES "Consent receipts", "Receipts of an agreement").

use a2acp_core::display;
use a2acp_core::encoding::{b64_decode, b64_encode};
use a2acp_core::receipt::agreement::Agreement;
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

/// What `receipts verify` checks beyond each signature.
#[derive(Debug, Default, Clone)]
pub struct VerifyOptions {
    /// The key every receipt must be signed by (base64url), e.g. from `a2acp keys show`.
    pub key: Option<String>,
    /// `FIELD=VALUE`: the value disclosed for FIELD (VALUE as JSON, else as a string).
    pub values: Vec<String>,
    /// `ADDRESS=KEY`: in an agreement, ADDRESS's confirmation must be signed by KEY.
    pub signers: Vec<String>,
}

/// One item of a file `receipts verify` reads.
#[derive(Debug, Clone)]
pub enum Item {
    /// A consent receipt, with its salts if the file kept them.
    Receipt(Box<StoredReceipt>),
    /// The agreement of a confirmed proposal.
    Agreement(Box<Agreement>),
}

/// The items in `text`: one receipt, one stored receipt (with its salts), one agreement,
/// or a list of them (what `a2acp receipts --json` and `a2acp agreements --json` write).
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

fn key_arg(flag: &str, k: &str) -> Result<[u8; 32], String> {
    b64_decode(k)
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| format!("{flag} {k}: not a base64url public key of 32 bytes"))
}

/// Checks every receipt and agreement of `text` offline. A receipt: its signature under
/// its key (and `opts.key`, if given) and each `opts.values` against the salted hash. An
/// agreement: the proposal against its digest, each confirmation's signature, every
/// required confirmation signed, and `opts.signers`' keys. `Ok` holds the report when
/// every check passed, `Err` the report naming each check that failed.
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
    for item in &list {
        let s = match item {
            Item::Receipt(s) => s,
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
    match failed {
        false => Ok(format!("{report}\n{} verified", counts.join(" and "))),
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
