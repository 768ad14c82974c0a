//! Safety numbers (§16): 60 digits that two users compare — read aloud or by scanning a
//! QR code — to check that the identity key each agent pinned for the other is the one the
//! other really holds, before accepting a changed key (`a2acp keys show` / `keys accept`).
//!
//! The derivation follows Signal's numeric fingerprint (SPEC-NOTES "Key pinning and key
//! changes" gives it byte by byte, with a worked example checked by a test below):
//!
//! 1. For each agent, `h = SHA-512(0x00 0x00 ‖ key ‖ address)`, then 5200 times
//!    `h = SHA-512(h ‖ key)`, where `key` is the 32-byte Ed25519 public key and `address`
//!    the UTF-8 of `agent:NAME@DOMAIN`.
//! 2. The first 30 bytes of `h`, in six 5-byte big-endian chunks, each taken modulo
//!    100000 and written as 5 digits: 30 digits per agent.
//! 3. The two 30-digit halves sorted (smaller first) and concatenated: the same 60 digits
//!    on both sides whichever side computes them.

use a2acp_core::Address;
use sha2::{Digest, Sha512};

/// SHA-512 iterations after the first hash (Signal's figure).
pub const ITERATIONS: usize = 5200;

/// Digits of a safety number.
pub const DIGITS: usize = 60;

/// The 30 digits of one agent: its key and its address.
pub fn half(key: &[u8; 32], address: &Address) -> String {
    let mut h = Sha512::new();
    h.update([0u8, 0u8]);
    h.update(key);
    h.update(address.as_str().as_bytes());
    let mut hash = h.finalize();
    for _ in 0..ITERATIONS {
        let mut h = Sha512::new();
        h.update(hash);
        h.update(key);
        hash = h.finalize();
    }
    let mut out = String::with_capacity(30);
    for chunk in hash[..30].chunks(5) {
        let n = chunk.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b));
        out += &format!("{:05}", n % 100_000);
    }
    out
}

/// The safety number of two agents (order-independent): 60 digits.
pub fn safety_number(a: (&[u8; 32], &Address), b: (&[u8; 32], &Address)) -> String {
    let mut halves = [half(a.0, a.1), half(b.0, b.1)];
    halves.sort();
    halves.concat()
}

/// The 60 digits in 12 groups of 5, three lines of four groups.
pub fn grouped(digits: &str) -> String {
    let groups: Vec<&str> = (0..digits.len())
        .step_by(5)
        .filter_map(|i| digits.get(i..(i + 5).min(digits.len())))
        .collect();
    groups
        .chunks(4)
        .map(|g| g.join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The digits a user typed, without spaces or dashes; `None` unless they are 60 digits.
pub fn normalise(typed: &str) -> Option<String> {
    let d: String = typed
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .collect();
    (d.len() == DIGITS && d.bytes().all(|b| b.is_ascii_digit())).then_some(d)
}

/// The digits as a QR code drawn with Unicode half blocks (two modules per character
/// cell), light modules drawn, for a terminal with a dark background; a quiet zone
/// included. `None` if the text cannot be encoded (it always can for 60 digits).
pub fn qr(digits: &str) -> Option<String> {
    use qrcode::render::unicode::Dense1x2;
    let code = qrcode::QrCode::new(digits.as_bytes()).ok()?;
    Some(
        code.render::<Dense1x2>()
            .dark_color(Dense1x2::Light)
            .light_color(Dense1x2::Dark)
            .quiet_zone(true)
            .build(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2acp_core::crypto::IdentityKey;

    fn key(seed: u8) -> [u8; 32] {
        IdentityKey::from_seed([seed; 32]).public().to_bytes()
    }

    /// The worked example of SPEC-NOTES "Key pinning and key changes".
    #[test]
    fn worked_example() {
        let alice = Address::parse("agent:alice@localhost").unwrap();
        let bob = Address::parse("agent:bob@localhost").unwrap();
        let (ka, kb) = (key(1), key(2));
        assert_eq!(
            a2acp_core::encoding::b64_encode(&ka),
            "iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w"
        );
        assert_eq!(
            a2acp_core::encoding::b64_encode(&kb),
            "gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q"
        );
        assert_eq!(half(&ka, &alice), "741614771256728470648821051252");
        assert_eq!(half(&kb, &bob), "393939275264157385724525251668");
        let n = safety_number((&ka, &alice), (&kb, &bob));
        assert_eq!(
            n,
            "393939275264157385724525251668741614771256728470648821051252"
        );
        assert_eq!(n, safety_number((&kb, &bob), (&ka, &alice)));
        assert_eq!(n.len(), DIGITS);
        assert_eq!(normalise(&grouped(&n)), Some(n.clone()));
    }

    #[test]
    fn any_change_changes_the_number() {
        let alice = Address::parse("agent:alice@localhost").unwrap();
        let bob = Address::parse("agent:bob@localhost").unwrap();
        let carol = Address::parse("agent:carol@localhost").unwrap();
        let n = safety_number((&key(1), &alice), (&key(2), &bob));
        assert_ne!(n, safety_number((&key(1), &alice), (&key(3), &bob)));
        assert_ne!(n, safety_number((&key(1), &alice), (&key(2), &carol)));
    }

    #[test]
    fn typed_digits() {
        let d = "0123456789".repeat(6);
        assert_eq!(
            normalise(" 01234 56789-01234\n56789 01234 56789 0123456789 0123456789 0123456789"),
            Some(d)
        );
        assert_eq!(normalise("123"), None);
        assert_eq!(normalise(&"x".repeat(60)), None);
        let g = grouped(&"0123456789".repeat(6));
        assert_eq!(g.lines().count(), 3);
        assert_eq!(g.lines().next().unwrap(), "01234 56789 01234 56789");
    }

    #[test]
    fn qr_has_half_blocks() {
        let q = qr(&"0123456789".repeat(6)).unwrap();
        assert!(q.contains('▀') || q.contains('▄'), "{q}");
        assert!(q.lines().count() > 10);
    }
}
