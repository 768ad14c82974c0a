//! Peer text made safe to show: what another agent wrote reaches a terminal, a log or a
//! notification only through these functions.
//!
//! Anything a peer chooses (an intent's summary, a need's reason, a proposal, an error
//! message…) may carry terminal escape sequences, control characters, bidirectional
//! overrides or invisible characters meant to spoof the text around them. Shown raw, an
//! `ESC [ 2 J` clears the user's screen and an OSC sequence can retitle the window or
//! write to the clipboard; a right-to-left override makes `txt.exe` read as `exe.txt`.
//!
//! The rule (SPEC-NOTES "Prompts and peer text on screen"): a displayed peer string is one line,
//!
//! - C0 controls, DEL and C1 controls (ESC among them) become `�` (U+FFFD), so the user
//!   sees that something was there; tab, line feed and carriage return become a space;
//! - Unicode format characters that are invisible or reorder text (bidi embeddings,
//!   overrides and isolates, marks, zero-width characters, the BOM, tag characters,
//!   interlinear annotation marks, invisible fillers, line and paragraph separators) are
//!   removed;
//! - it is cut to a maximum number of characters, ending in `…`.
//!
//! Only what is shown is cleaned: the thread keeps every value as the peer sent it.

use std::borrow::Cow;

use serde_json::Value;

use crate::packet::{Alternative, Context, Intent, Proposal};

/// Longest one-line peer string shown (summaries, reasons, field names, values), in
/// characters.
pub const MAX_SHORT: usize = 200;
/// Longest field name a consent prompt shows, in characters; a need for a longer field,
/// or one whose name is not clean, is declined without a prompt.
pub const MAX_FIELD_NAME: usize = 64;
/// Longest longer peer string shown (a proposal's reasoning, an error message), in
/// characters.
pub const MAX_LONG: usize = 1000;
/// Longest notification or audit text, in characters (the agent's own words around the
/// peer strings in it included).
pub const MAX_RECORD: usize = 2000;
/// Most entries of a peer's structured value shown (object members or array items, at
/// every level); the rest are left out.
pub const MAX_ENTRIES: usize = 32;
/// Deepest nesting of a peer's structured value shown; deeper values are replaced by
/// `"…"`.
pub const MAX_DEPTH: usize = 4;

/// The replacement shown for a control character.
pub const REPLACEMENT: char = '\u{FFFD}';

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Keep,
    Space,
    Replace,
    Drop,
}

fn classify(c: char) -> Class {
    match c {
        '\t' | '\n' | '\r' => Class::Space,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => Class::Replace,
        // Format characters (general category Cf) and other invisible characters that
        // can hide or reorder text.
        '\u{ad}'                       // soft hyphen
        | '\u{34f}'                    // combining grapheme joiner
        | '\u{61c}'                    // Arabic letter mark
        | '\u{115f}' | '\u{1160}'      // Hangul fillers
        | '\u{17b4}' | '\u{17b5}'      // Khmer inherent vowels (invisible)
        | '\u{180b}'..='\u{180f}'      // Mongolian free variation selectors, vowel separator
        | '\u{200b}'..='\u{200f}'      // zero-width space/non-joiner/joiner, LRM, RLM
        | '\u{2028}' | '\u{2029}'      // line and paragraph separators
        | '\u{202a}'..='\u{202e}'      // bidi embeddings and overrides
        | '\u{2060}'..='\u{206f}'      // word joiner, invisible operators, bidi isolates
        | '\u{3164}'                   // Hangul filler
        | '\u{fe00}'..='\u{fe0f}'      // variation selectors
        | '\u{feff}'                   // byte order mark / zero-width no-break space
        | '\u{ffa0}'                   // halfwidth Hangul filler
        | '\u{fff9}'..='\u{fffb}'      // interlinear annotation
        | '\u{600}'..='\u{605}'
        | '\u{6dd}'
        | '\u{70f}'
        | '\u{890}'..='\u{891}'
        | '\u{8e2}'
        | '\u{110bd}'
        | '\u{110cd}'
        | '\u{13430}'..='\u{1343f}'
        | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d173}'..='\u{1d17a}'
        | '\u{e0000}'..='\u{e0fff}'    // tags and variation selectors supplement
        => Class::Drop,
        _ => Class::Keep,
    }
}

/// Whether `s` would be shown exactly as it is by [`line`] with `max_chars`.
pub fn is_clean(s: &str, max_chars: usize) -> bool {
    s.chars().all(|c| classify(c) == Class::Keep) && s.chars().count() <= max_chars
}

/// `s` as one displayable line of at most `max_chars` characters (see the module
/// documentation). Borrows when nothing needed cleaning.
pub fn line(s: &str, max_chars: usize) -> Cow<'_, str> {
    clean(s, max_chars, false)
}

/// Like [`line`], but line feeds are kept (carriage returns and tabs become spaces): for
/// text that is several lines by design, such as a whole rendered prompt. Use [`line`]
/// for each peer string inside it.
pub fn lines(s: &str, max_chars: usize) -> Cow<'_, str> {
    clean(s, max_chars, true)
}

fn clean(s: &str, max_chars: usize, keep_newlines: bool) -> Cow<'_, str> {
    let mut count = 0usize;
    let mut dirty = false;
    for c in s.chars() {
        count += 1;
        if classify(c) != Class::Keep && !(keep_newlines && c == '\n') {
            dirty = true;
        }
    }
    if !dirty && count <= max_chars {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len().min(max_chars.saturating_mul(4)));
    let mut n = 0usize;
    for c in s.chars() {
        let shown = match classify(c) {
            Class::Keep => c,
            Class::Space if keep_newlines && c == '\n' => '\n',
            Class::Space => ' ',
            Class::Replace => REPLACEMENT,
            Class::Drop => continue,
        };
        if n == max_chars {
            // One shown character too many: keep max_chars - 1 and mark the cut.
            let mut t: String = out.chars().take(max_chars.saturating_sub(1)).collect();
            if max_chars > 0 {
                t.push('…');
            }
            return Cow::Owned(t);
        }
        out.push(shown);
        n += 1;
    }
    Cow::Owned(out)
}

/// `s` without its terminal escape sequences, whole: CSI (`ESC [` … final byte, or C1
/// `CSI`), OSC, DCS, SOS, PM and APC strings (up to BEL or `ESC \\`, or the end), and
/// two-character `ESC x` sequences. For logs, where colour codes are noise rather than a
/// sign of tampering; what remains still goes through [`lines`] or [`line`].
pub fn without_escape_sequences(s: &str) -> Cow<'_, str> {
    if !s.contains([
        '\u{1b}', '\u{9b}', '\u{9d}', '\u{90}', '\u{98}', '\u{9e}', '\u{9f}',
    ]) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        let kind = match c {
            '\u{1b}' => match it.peek() {
                Some('[') => {
                    it.next();
                    'c'
                }
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    it.next();
                    's'
                }
                Some(_) => {
                    it.next();
                    continue;
                }
                None => continue,
            },
            '\u{9b}' => 'c',
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => 's',
            other => {
                out.push(other);
                continue;
            }
        };
        if kind == 'c' {
            // Parameter and intermediate bytes, then one final byte.
            for x in it.by_ref() {
                if ('\u{40}'..='\u{7e}').contains(&x) {
                    break;
                }
                if !('\u{20}'..='\u{3f}').contains(&x) {
                    break;
                }
            }
        } else {
            // A string: up to BEL, ST (`ESC \\` or U+009C).
            while let Some(x) = it.next() {
                if x == '\u{7}' || x == '\u{9c}' {
                    break;
                }
                if x == '\u{1b}' {
                    if it.peek() == Some(&'\\') {
                        it.next();
                    }
                    break;
                }
            }
        }
    }
    Cow::Owned(out)
}

/// A peer's structured value for display: every string (object keys included) cleaned
/// with [`line`], at most [`MAX_ENTRIES`] entries per level, nesting cut at
/// [`MAX_DEPTH`].
pub fn value(v: &Value) -> Value {
    value_at(v, 0)
}

fn value_at(v: &Value, depth: usize) -> Value {
    match v {
        Value::String(s) => Value::String(line(s, MAX_SHORT).into_owned()),
        Value::Array(a) if depth < MAX_DEPTH => Value::Array(
            a.iter()
                .take(MAX_ENTRIES)
                .map(|x| value_at(x, depth + 1))
                .collect(),
        ),
        Value::Object(m) if depth < MAX_DEPTH => Value::Object(context_at(m, depth + 1)),
        Value::Array(_) | Value::Object(_) => Value::String("…".into()),
        other => other.clone(),
    }
}

/// A peer's context map for display (see [`value`]).
pub fn context(c: &Context) -> Context {
    context_at(c, 0)
}

fn context_at(c: &Context, depth: usize) -> Context {
    c.iter()
        .take(MAX_ENTRIES)
        .map(|(k, v)| (line(k, MAX_SHORT).into_owned(), value_at(v, depth)))
        .collect()
}

/// An intent for display.
pub fn intent(i: &Intent) -> Intent {
    Intent {
        category: line(&i.category, MAX_SHORT).into_owned(),
        summary: line(&i.summary, MAX_SHORT).into_owned(),
        urgency: i
            .urgency
            .as_deref()
            .map(|u| line(u, MAX_SHORT).into_owned()),
        scope_change: i
            .scope_change
            .as_deref()
            .map(|u| line(u, MAX_SHORT).into_owned()),
    }
}

/// A proposal for display: summary, details, reasoning and at most [`MAX_ENTRIES`]
/// alternatives, each cleaned.
pub fn proposal(p: &Proposal) -> Proposal {
    Proposal {
        summary: line(&p.summary, MAX_SHORT).into_owned(),
        details: context(&p.details),
        alternatives: p
            .alternatives
            .iter()
            .take(MAX_ENTRIES)
            .map(|a| Alternative {
                summary: line(&a.summary, MAX_SHORT).into_owned(),
                reason: line(&a.reason, MAX_SHORT).into_owned(),
                details: context(&a.details),
            })
            .collect(),
        reasoning: line(&p.reasoning, MAX_LONG).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_controls_are_replaced() {
        assert_eq!(line("a\u{1b}[2Jb", 100), "a\u{fffd}[2Jb");
        assert_eq!(line("\u{1b}]0;owned\u{7}", 100), "\u{fffd}]0;owned\u{fffd}");
        assert_eq!(line("x\u{9b}31m\u{7f}", 100), "x\u{fffd}31m\u{fffd}");
        assert_eq!(line("one\ntwo\r\tthree", 100), "one two  three");
        assert_eq!(lines("one\ntwo\r", 100), "one\ntwo ");
        assert_eq!(lines("a\u{1b}b", 100), "a\u{fffd}b");
    }

    #[test]
    fn invisible_and_reordering_characters_are_removed() {
        assert_eq!(line("txt\u{202e}exe.doc", 100), "txtexe.doc");
        assert_eq!(line("a\u{2066}b\u{2069}c\u{200b}d\u{feff}", 100), "abcd");
        assert_eq!(line("hi\u{e0041}\u{e0042}", 100), "hi");
        assert_eq!(line("x\u{2028}y", 100), "xy");
        // Ordinary text of any script stays as it is, borrowed.
        for s in ["Dinner at Luigi's", "Café ☕ 19:00", "ディナー", "عشاء", ""] {
            assert!(matches!(line(s, 100), Cow::Borrowed(_)), "{s}");
            assert!(is_clean(s, 100));
        }
        assert!(!is_clean("a\u{1b}", 100));
        assert!(!is_clean("abc", 2));
    }

    #[test]
    fn escape_sequences_are_removed_whole_for_logs() {
        let s = "\u{1b}[32mINFO\u{1b}[0m x\u{1b}]0;title\u{7}y\u{1b}]8;;http://e\u{1b}\\z\u{9b}1;31mw\u{1b}Mv";
        assert_eq!(without_escape_sequences(s), "INFO xyzwv");
        assert!(matches!(
            without_escape_sequences("plain"),
            Cow::Borrowed(_)
        ));
        // Unterminated sequences end at the end of the text.
        assert_eq!(without_escape_sequences("a\u{1b}]0;never ends"), "a");
        assert_eq!(without_escape_sequences("a\u{1b}"), "a");
    }

    #[test]
    fn long_text_is_cut_with_a_mark() {
        assert_eq!(line("abcdef", 6), "abcdef");
        assert_eq!(line("abcdefg", 6), "abcde…");
        assert_eq!(line("ééééééé", 3), "éé…");
        assert_eq!(line(&"x".repeat(100_000), 10).chars().count(), 10);
        // Dropped characters do not count.
        assert_eq!(line("ab\u{200b}\u{200b}cd", 4), "abcd");
        assert_eq!(line("", 0), "");
    }

    #[test]
    fn structured_values_are_cleaned_and_bounded() {
        let v = serde_json::json!({
            "na\u{1b}me": "v\u{1b}[31m",
            "list": (0..100).collect::<Vec<u32>>(),
            "deep": {"a": {"b": {"c": {"d": {"e": 1}}}}},
        });
        let shown = value(&v);
        let s = shown.to_string();
        assert!(!s.contains('\u{1b}'), "{s}");
        assert_eq!(shown["list"].as_array().unwrap().len(), MAX_ENTRIES);
        assert_eq!(shown["deep"]["a"]["b"]["c"], Value::String("…".into()));
        assert_eq!(shown["na\u{fffd}me"], "v\u{fffd}[31m");
    }
}
