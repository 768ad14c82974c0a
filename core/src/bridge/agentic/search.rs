//! The query `pull` with `mode=relevant` (§8.2) hands to full-text search: the words of
//! the caller's text, each quoted, so that nothing a caller writes is read as the search
//! engine's syntax — packages with all of them first, then those with any.

/// At most this many words of a query are searched.
pub const MAX_TERMS: usize = 32;

/// An SQLite FTS5 `MATCH` expression for `query`: its words (letters and digits, up to
/// [`MAX_TERMS`]) as quoted strings joined by `OR`; `None` when it has no word.
pub fn fts_query(query: &str) -> Option<String> {
    let terms: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(MAX_TERMS)
        .map(|w| format!("\"{}\"", w.to_lowercase()))
        .collect();
    if terms.is_empty() {
        None
    } else {
        Some(terms.join(" OR "))
    }
}

/// The same words, all of them required (`AND`); `None` when there is no word.
pub fn fts_query_all(query: &str) -> Option<String> {
    fts_query(query).map(|q| q.replace(" OR ", " AND "))
}
