//! The recovery key as words a person writes down (SPEC-NOTES "Recovery"): its 32-byte
//! seed is the entropy of a 24-word BIP-39 English phrase (256 bits, an 8-bit checksum
//! from SHA-256). The seed *is* the entropy: no BIP-39 passphrase, no PBKDF2 — the words
//! are read back into the same 32 bytes, and the recovery key is the Ed25519 key of that
//! seed ([`a2acp_core::recovery::recovery_key_from_seed`]).

use bip39::{Language, Mnemonic};

/// Words in a recovery phrase.
pub const WORDS: usize = 24;

/// Why typed words are not a recovery phrase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WordsError {
    /// Not 24 words.
    #[error("a recovery phrase has 24 words; this one has {0}")]
    Count(usize),
    /// A word that is not in the BIP-39 English list.
    #[error("word {position} (`{word}`) is not one of the recovery words; check its spelling")]
    Unknown {
        /// 1-based.
        position: usize,
        /// The word as typed.
        word: String,
    },
    /// Every word is in the list but the checksum does not hold.
    #[error("the 24 words do not check: one of them is wrong, or two are swapped (each is in the list, so compare them one by one with what you wrote down)")]
    Checksum,
}

/// The 24 words of `seed`, separated by single spaces.
pub fn to_words(seed: &[u8; 32]) -> String {
    match Mnemonic::from_entropy_in(Language::English, seed) {
        Ok(m) => m.words().collect::<Vec<_>>().join(" "),
        // 32 bytes are always valid entropy.
        Err(_) => String::new(),
    }
}

/// The seed of typed words: case, extra spaces, commas and a word's number before it
/// (`1. abandon`, `1) abandon`) are forgiven; anything else is an error naming the word.
pub fn parse_words(typed: &str) -> Result<[u8; 32], WordsError> {
    let words: Vec<String> = typed
        .split(|c: char| c.is_whitespace() || c == ',')
        .map(|w| w.trim_matches(|c: char| c == '.' || c == ')' || c == '(' || c == ';'))
        .filter(|w| !w.is_empty() && !w.bytes().all(|b| b.is_ascii_digit()))
        .map(|w| w.to_lowercase())
        .collect();
    if words.len() != WORDS {
        return Err(WordsError::Count(words.len()));
    }
    let list = Language::English;
    for (i, w) in words.iter().enumerate() {
        if list.find_word(w).is_none() {
            return Err(WordsError::Unknown {
                position: i + 1,
                word: w.clone(),
            });
        }
    }
    let m = Mnemonic::parse_in_normalized(list, &words.join(" ")).map_err(|e| match e {
        bip39::Error::BadWordCount(n) => WordsError::Count(n),
        bip39::Error::UnknownWord(i) => WordsError::Unknown {
            position: i + 1,
            word: words.get(i).cloned().unwrap_or_default(),
        },
        _ => WordsError::Checksum,
    })?;
    let (entropy, len) = m.to_entropy_array();
    let mut seed = [0u8; 32];
    if len != 32 {
        return Err(WordsError::Count(words.len()));
    }
    seed.copy_from_slice(&entropy[..32]);
    Ok(seed)
}

/// The words as a QR code for the terminal (the safety number's rendering), to be
/// scanned into a password manager; `None` if it cannot be drawn.
pub fn qr(words: &str) -> Option<String> {
    crate::safety::qr(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BIP-39's own test vector: entropy `00`×32 is `abandon`×23 then `art`.
    #[test]
    fn the_words_are_bip39_and_read_back() {
        let zero = to_words(&[0; 32]);
        assert_eq!(zero, format!("{}art", "abandon ".repeat(23)));
        assert_eq!(parse_words(&zero), Ok([0; 32]));
        // BIP-39 vector: entropy 7f×32.
        let w = to_words(&[0x7f; 32]);
        assert_eq!(
            w,
            "legal winner thank year wave sausage worth useful legal winner thank year wave sausage worth useful legal winner thank year wave sausage worth title"
        );
        let seed: [u8; 32] = core::array::from_fn(|i| i as u8 * 7 + 1);
        let w = to_words(&seed);
        assert_eq!(w.split(' ').count(), 24);
        assert_eq!(parse_words(&w), Ok(seed));
        // Forgiven: case, numbering, commas, line breaks.
        let numbered: Vec<String> = w
            .split(' ')
            .enumerate()
            .map(|(i, x)| format!("{}. {}", i + 1, x.to_uppercase()))
            .collect();
        assert_eq!(parse_words(&numbered.join(",\n")), Ok(seed));
    }

    #[test]
    fn a_wrong_word_is_named_and_a_wrong_checksum_said() {
        let w = to_words(&[0x7f; 32]);
        let mut v: Vec<&str> = w.split(' ').collect();
        v[4] = "wavv";
        assert_eq!(
            parse_words(&v.join(" ")),
            Err(WordsError::Unknown {
                position: 5,
                word: "wavv".into()
            })
        );
        v[4] = "wave";
        v.pop();
        assert_eq!(parse_words(&v.join(" ")), Err(WordsError::Count(23)));
        // Every word in the list, the last one changed: the checksum catches it.
        v.push("abandon");
        assert_eq!(parse_words(&v.join(" ")), Err(WordsError::Checksum));
        assert_eq!(parse_words(""), Err(WordsError::Count(0)));
    }

    #[test]
    fn the_qr_code_is_drawn() {
        assert!(qr(&to_words(&[9; 32])).is_some_and(|q| q.contains('█') || q.contains('▀')));
    }
}
