//! Canonical JSON (the Agentic Protocol's Appendix A, RFC 8785) and the content hash of a
//! context package (its §6.6).
//!
//! Appendix A asks for RFC 8785 (the JSON Canonicalization Scheme) with one addition:
//! object members whose value is `null` are omitted. We drop them (at every depth; an
//! array keeps its `null` elements, since arrays preserve their elements) and hand the
//! rest to `serde_json_canonicalizer`, an RFC 8785 implementation: members sorted by
//! their UTF-16 code units, no whitespace, numbers in ECMAScript's shortest round-trip
//! form (`1e+21`, `-0` as `0`, `1e-7`), strings with only `"`, `\` and control characters
//! escaped. Appendix A says "sorted lexicographically (byte-wise)"; RFC 8785 sorts by
//! UTF-16 code units. The two orders differ only between a key holding a character above
//! U+FFFF and one holding a character in U+E000–U+FFFF at the same position; we follow
//! RFC 8785, which the appendix names as the rule, and a test pins that case.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::MemoryError;

/// The prefix of a content hash: `sha256:` then 64 lowercase hexadecimal digits.
pub const HASH_PREFIX: &str = "sha256:";

/// `value` without its `null` object members, at every depth.
pub fn without_null_members(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_null_members(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_null_members).collect()),
        other => other.clone(),
    }
}

/// The largest integer an IEEE 754 double holds exactly (2^53 − 1): RFC 8785 numbers are
/// I-JSON's, so a larger integer literal has no canonical form.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Refuses integer literals outside ±(2^53 − 1), as the Python `rfc8785` package does
/// (a number written with a fraction or exponent is a double and always has a form).
fn check_integers(value: &Value) -> Result<(), MemoryError> {
    match value {
        Value::Number(n) => {
            let too_big = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u > MAX_SAFE_INTEGER,
                (None, Some(i)) => i.unsigned_abs() > MAX_SAFE_INTEGER,
                (None, None) => false,
            };
            if too_big {
                return Err(MemoryError::Canonical(format!(
                    "integer {n} is outside the I-JSON range ±(2^53 − 1)"
                )));
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(check_integers),
        Value::Object(map) => map.values().try_for_each(check_integers),
        _ => Ok(()),
    }
}

/// The canonical bytes of `value` (Appendix A: RFC 8785 with `null` members omitted).
pub fn canonical_json(value: &Value) -> Result<Vec<u8>, MemoryError> {
    rfc8785(&without_null_members(value))
}

/// Plain RFC 8785 bytes of `value`, `null` members kept: what an RFC 8785 implementation
/// outputs for the same document (the cross-check against an independent one uses this).
pub fn rfc8785(value: &Value) -> Result<Vec<u8>, MemoryError> {
    check_integers(value)?;
    serde_json_canonicalizer::to_vec(value).map_err(|e| MemoryError::Canonical(e.to_string()))
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(HASH_PREFIX.len() + 64);
    out.push_str(HASH_PREFIX);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The content hash of a JSON document: SHA-256 over its canonical form.
pub fn content_hash(value: &Value) -> Result<String, MemoryError> {
    Ok(sha256_hex(&canonical_json(value)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(s: &str) -> String {
        let v: Value = serde_json::from_str(s).unwrap();
        String::from_utf8(canonical_json(&v).unwrap()).unwrap()
    }

    #[test]
    fn numbers_follow_ecmascript() {
        assert_eq!(
            canon("[1e21, 1E-7, -0, 0.1, 100, 1.5e300, 123456789012]"),
            "[1e+21,1e-7,0,0.1,100,1.5e+300,123456789012]"
        );
        assert_eq!(
            canon("[1e20, 0.000001, 4.5, 2e-7]"),
            "[100000000000000000000,0.000001,4.5,2e-7]"
        );
    }

    #[test]
    fn integers_beyond_two_to_the_53_are_refused() {
        let v: Value = serde_json::from_str("[9007199254740991, -9007199254740991]").unwrap();
        assert!(canonical_json(&v).is_ok());
        for text in [
            "[9007199254740992]",
            "{\"a\":-9007199254740992}",
            "18446744073709551615",
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert!(
                matches!(canonical_json(&v), Err(MemoryError::Canonical(_))),
                "{text}"
            );
        }
        // Written as a double it has a form.
        assert_eq!(canon("[1.2345678901234568e20]"), "[123456789012345680000]");
    }

    #[test]
    fn null_members_are_omitted_but_null_elements_kept() {
        assert_eq!(
            canon(r#"{"b":null,"a":{"x":null,"y":[null,1]}}"#),
            r#"{"a":{"y":[null,1]}}"#
        );
        // Plain RFC 8785 keeps them.
        let v = json!({"b": null});
        assert_eq!(rfc8785(&v).unwrap(), br#"{"b":null}"#.to_vec());
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        // U+1F600 (surrogates D83D DE00) sorts before U+FB01 (FB01) in UTF-16, after it
        // in UTF-8 bytes: RFC 8785's order is the UTF-16 one.
        let out = canon("{\"\u{fb01}\":1,\"\u{1f600}\":2,\"a\":3,\"\u{e9}\":4}");
        assert_eq!(out, "{\"a\":3,\"\u{e9}\":4,\"\u{1f600}\":2,\"\u{fb01}\":1}");
    }

    #[test]
    fn strings_use_minimal_escapes() {
        assert_eq!(
            canon(r#"["\u0001\n\"\\/\u00e9\u2028"]"#),
            "[\"\\u0001\\n\\\"\\\\/\u{e9}\u{2028}\"]"
        );
    }

    #[test]
    fn the_hash_is_independent_of_member_order_and_whitespace() {
        let a = content_hash(&json!({"a": 1, "b": [1, 2], "c": null})).unwrap();
        let b: Value = serde_json::from_str("{ \"b\" : [1,2] , \"a\" : 1.0 }").unwrap();
        assert_eq!(a, content_hash(&b).unwrap());
        assert!(a.starts_with(HASH_PREFIX) && a.len() == HASH_PREFIX.len() + 64);
        assert_ne!(a, content_hash(&json!({"a": 2, "b": [1, 2]})).unwrap());
    }
}
