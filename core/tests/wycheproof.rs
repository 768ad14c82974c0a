//! Wycheproof vectors through exactly the primitives the envelope uses:
//! `a2acp_core::crypto::primitives::{aead_seal, aead_open, verify, agree}`.
//!
//! Every valid vector must be accepted with the expected output, every invalid one refused.
//! X25519 "acceptable" vectors: an all-zero shared secret (low-order public key) must be
//! refused, anything else accepted with the expected output.

use a2acp_core::crypto::primitives::{aead_open, aead_seal, agree, verify};
use wycheproof::TestResult;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn xchacha20_poly1305() {
    let set = wycheproof::aead::TestSet::load(wycheproof::aead::TestName::XChaCha20Poly1305)
        .expect("load xchacha20_poly1305 vectors");
    let (mut valid, mut invalid, mut acceptable) = (0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    for group in &set.test_groups {
        for t in &group.tests {
            let mut expected = t.ct.to_vec();
            expected.extend_from_slice(&t.tag);
            let sealed = aead_seal(&t.key, &t.nonce, &t.aad, &t.pt);
            let opened = aead_open(&t.key, &t.nonce, &t.aad, &expected);
            match t.result {
                TestResult::Valid => {
                    valid += 1;
                    if sealed.as_deref() != Ok(&expected[..]) {
                        failures.push(format!(
                            "tcId {} seal: {:?}",
                            t.tc_id,
                            sealed.map(|v| hex(&v))
                        ));
                    }
                    if opened.as_deref() != Ok(&t.pt[..]) {
                        failures.push(format!(
                            "tcId {} open: {:?}",
                            t.tc_id,
                            opened.map(|v| hex(&v))
                        ));
                    }
                }
                TestResult::Invalid => {
                    invalid += 1;
                    if opened.is_ok() {
                        failures.push(format!(
                            "tcId {} invalid vector opened ({})",
                            t.tc_id, t.comment
                        ));
                    }
                    // A wrong-sized nonce or key must also be refused for sealing.
                    if (t.nonce.len() != 24 || t.key.len() != 32) && sealed.is_ok() {
                        failures.push(format!("tcId {} sealed with bad sizes", t.tc_id));
                    }
                }
                TestResult::Acceptable => {
                    acceptable += 1;
                    failures.push(format!(
                        "tcId {} unexpected acceptable AEAD vector",
                        t.tc_id
                    ));
                }
            }
        }
    }
    println!("XChaCha20-Poly1305: {valid} valid, {invalid} invalid, {acceptable} acceptable");
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
    assert_eq!(valid + invalid + acceptable, set.number_of_tests);
    assert!(valid > 0 && invalid > 0);
}

#[test]
fn ed25519_verify_strict() {
    let set = wycheproof::eddsa::TestSet::load(wycheproof::eddsa::TestName::Ed25519)
        .expect("load ed25519 vectors");
    let (mut valid, mut invalid, mut acceptable) = (0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    for group in &set.test_groups {
        let pk = &group.key.pk;
        for t in &group.tests {
            let r = verify(pk, &t.msg, &t.sig);
            match t.result {
                TestResult::Valid => {
                    valid += 1;
                    if r.is_err() {
                        failures.push(format!(
                            "tcId {} valid refused: {:?} ({})",
                            t.tc_id, r, t.comment
                        ));
                    }
                }
                TestResult::Invalid => {
                    invalid += 1;
                    if r.is_ok() {
                        failures.push(format!("tcId {} invalid accepted ({})", t.tc_id, t.comment));
                    }
                }
                TestResult::Acceptable => {
                    acceptable += 1;
                    failures.push(format!(
                        "tcId {} unexpected acceptable Ed25519 vector",
                        t.tc_id
                    ));
                }
            }
        }
    }
    println!("Ed25519: {valid} valid, {invalid} invalid, {acceptable} acceptable");
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
    assert_eq!(valid + invalid + acceptable, set.number_of_tests);
    assert!(valid > 0 && invalid > 0);
}

#[test]
fn x25519_agree() {
    let set = wycheproof::xdh::TestSet::load(wycheproof::xdh::TestName::X25519)
        .expect("load x25519 vectors");
    let (mut valid, mut invalid, mut acc_ok, mut acc_refused) = (0usize, 0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    for group in &set.test_groups {
        for t in &group.tests {
            let secret: Result<[u8; 32], _> = t.private_key[..].try_into();
            let r = match secret {
                Ok(s) => agree(&s, &t.public_key),
                Err(_) => {
                    failures.push(format!(
                        "tcId {} private key of {} bytes",
                        t.tc_id,
                        t.private_key.len()
                    ));
                    continue;
                }
            };
            let zero_shared = t.shared_secret.iter().all(|&b| b == 0);
            match t.result {
                TestResult::Valid => {
                    valid += 1;
                    if r.as_ref().map(|s| &s[..]) != Ok(&t.shared_secret[..]) {
                        failures.push(format!(
                            "tcId {} valid: {:?} ({})",
                            t.tc_id,
                            r.map(|s| hex(&s)),
                            t.comment
                        ));
                    }
                }
                TestResult::Invalid => {
                    invalid += 1;
                    if r.is_ok() {
                        failures.push(format!("tcId {} invalid accepted ({})", t.tc_id, t.comment));
                    }
                }
                TestResult::Acceptable if zero_shared => {
                    acc_refused += 1;
                    if r.is_ok() {
                        failures.push(format!(
                            "tcId {} low-order accepted ({})",
                            t.tc_id, t.comment
                        ));
                    }
                }
                TestResult::Acceptable => {
                    acc_ok += 1;
                    if r.as_ref().map(|s| &s[..]) != Ok(&t.shared_secret[..]) {
                        failures.push(format!(
                            "tcId {} acceptable: {:?} ({})",
                            t.tc_id,
                            r.map(|s| hex(&s)),
                            t.comment
                        ));
                    }
                }
            }
        }
    }
    println!(
        "X25519: {valid} valid, {invalid} invalid, {acc_ok} acceptable accepted, \
         {acc_refused} acceptable refused (zero shared secret)"
    );
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
    assert_eq!(valid + invalid + acc_ok + acc_refused, set.number_of_tests);
    assert!(valid > 0 && acc_ok > 0 && acc_refused > 0);
}
