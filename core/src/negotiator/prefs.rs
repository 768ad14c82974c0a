//! Merging dietary constraints and intersecting budgets.

use serde_json::Value;

/// Longest single dietary entry kept.
const MAX_DIET_LEN: usize = 80;
/// Most dietary entries kept.
const MAX_DIET_ITEMS: usize = 24;

/// Words that mean "no dietary restriction"; dropped when merging.
const NO_RESTRICTION: &[&str] = &[
    "none",
    "no",
    "nothing",
    "n/a",
    "na",
    "no restrictions",
    "no restriction",
    "no dietary restrictions",
    "no dietary requirements",
    "no requirements",
    "anything",
    "eats anything",
];

/// The dietary entries of one value: a string (split on `,` and `;`) or an array of
/// strings. Entries meaning "no restriction" are dropped.
pub(crate) fn dietary_items(v: &Value) -> Vec<String> {
    let mut raw: Vec<&str> = Vec::new();
    match v {
        Value::String(s) => raw.extend(s.split([',', ';'])),
        Value::Array(a) => {
            for item in a.iter().take(MAX_DIET_ITEMS) {
                if let Some(s) = item.as_str() {
                    raw.extend(s.split([',', ';']));
                }
            }
        }
        _ => {}
    }
    raw.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.chars().count() <= MAX_DIET_LEN)
        .filter(|s| !NO_RESTRICTION.contains(&s.to_lowercase().as_str()))
        .map(str::to_string)
        .take(MAX_DIET_ITEMS)
        .collect()
}

/// Union of dietary constraints, first value's entries first, case-insensitively
/// deduplicated (the first spelling wins).
pub(crate) fn merge_dietary(values: &[&Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in values {
        for item in dietary_items(v) {
            let lower = item.to_lowercase();
            if !out.iter().any(|x| x.to_lowercase() == lower) && out.len() < MAX_DIET_ITEMS {
                out.push(item);
            }
        }
    }
    out
}

/// ISO 4217 codes recognised in budgets (any other three letters are not a currency).
const CURRENCIES: &[&str] = &[
    "GBP", "USD", "EUR", "JPY", "CAD", "AUD", "NZD", "CHF", "SEK", "NOK", "DKK", "ISK", "PLN",
    "CZK", "HUF", "RON", "BGN", "TRY", "INR", "CNY", "HKD", "SGD", "KRW", "TWD", "THB", "MYR",
    "IDR", "PHP", "VND", "ZAR", "BRL", "MXN", "ARS", "CLP", "COP", "PEN", "AED", "SAR", "ILS",
    "EGP", "NGN", "KES",
];

/// Largest amount accepted, in currency units.
const MAX_AMOUNT_UNITS: u64 = 1_000_000_000;

/// A budget: amounts in hundredths of the currency unit, inclusive bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Budget {
    /// ISO 4217 code, if one was written (`£` → GBP, `$` → USD, `€` → EUR, `¥` → JPY).
    pub currency: Option<String>,
    /// Lower bound (0 for "up to").
    pub lo: u64,
    /// Upper bound (`u64::MAX` for "from").
    pub hi: u64,
    /// Per person (`pp`, `per person`, `per head`, `each`).
    pub per_person: bool,
}

/// Parses a number at the start of `s`: `20`, `25.50`, `1,000`. Returns hundredths.
fn number(s: &str) -> Option<(u64, &str)> {
    let mut units: u64 = 0;
    let mut rest = s;
    let mut seen = false;
    loop {
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            break;
        }
        let (d, r) = rest.split_at_checked(n)?;
        for b in d.bytes() {
            units = units
                .checked_mul(10)?
                .checked_add(u64::from(b.saturating_sub(b'0')))?;
        }
        seen = true;
        rest = r;
        // A thousands separator: `,` followed by exactly three digits.
        match rest.strip_prefix(',') {
            Some(r2) if r2.bytes().take_while(u8::is_ascii_digit).count() == 3 => rest = r2,
            _ => break,
        }
    }
    if !seen || units > MAX_AMOUNT_UNITS {
        return None;
    }
    let mut cents = units.checked_mul(100)?;
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        if n == 1 || n == 2 {
            let (d, r2) = r.split_at_checked(n)?;
            let v: u64 = d.parse().ok()?;
            cents = cents.checked_add(if n == 1 { v * 10 } else { v })?;
            rest = r2;
        }
    }
    Some((cents, rest))
}

/// Parses a budget: `£20-40pp`, `GBP 20-40`, `GBP 30`, `$25-50`, `20–40 EUR`,
/// `up to £40`, `£30+`, `from GBP 30`, a bare number, or an object
/// `{"min", "max", "currency"}` / `{"amount", "currency"}`.
pub(crate) fn parse_budget(v: &Value) -> Option<Budget> {
    match v {
        Value::String(s) => parse_budget_str(s),
        Value::Number(n) => {
            let units = n.as_f64()?;
            if !(0.0..=MAX_AMOUNT_UNITS as f64).contains(&units) {
                return None;
            }
            let cents = (units * 100.0).round() as u64;
            Some(Budget {
                currency: None,
                lo: cents,
                hi: cents,
                per_person: false,
            })
        }
        Value::Object(o) => {
            let amount = |k: &str| -> Option<u64> {
                let b = parse_budget(o.get(k)?)?;
                (b.lo == b.hi).then_some(b.lo)
            };
            let currency = o
                .get("currency")
                .and_then(Value::as_str)
                .map(|c| c.trim().to_ascii_uppercase())
                .filter(|c| CURRENCIES.contains(&c.as_str()));
            let per_person = o
                .get("per_person")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let (lo, hi) = match (amount("min"), amount("max"), amount("amount")) {
                (Some(lo), Some(hi), _) => (lo.min(hi), lo.max(hi)),
                (Some(lo), None, _) => (lo, u64::MAX),
                (None, Some(hi), _) => (0, hi),
                (None, None, Some(a)) => (a, a),
                _ => return None,
            };
            Some(Budget {
                currency,
                lo,
                hi,
                per_person,
            })
        }
        _ => None,
    }
}

fn parse_budget_str(s: &str) -> Option<Budget> {
    if s.len() > 120 {
        return None;
    }
    let lower = s.to_lowercase();
    let mut currency: Option<String> = None;
    let mut set_currency = |c: &str| -> bool {
        match &currency {
            Some(existing) if existing != c => false,
            _ => {
                currency = Some(c.to_string());
                true
            }
        }
    };
    for (sym, code) in [('£', "GBP"), ('$', "USD"), ('€', "EUR"), ('¥', "JPY")] {
        if s.contains(sym) && !set_currency(code) {
            return None;
        }
    }
    for word in s.split(|c: char| !c.is_ascii_alphabetic()) {
        let up = word.to_ascii_uppercase();
        if word.len() == 3 && CURRENCIES.contains(&up.as_str()) && !set_currency(&up) {
            return None;
        }
    }
    let per_person = [
        "pp",
        "per person",
        "per head",
        "/person",
        "/head",
        "each",
        "a head",
    ]
    .iter()
    .any(|w| lower.contains(w));
    let upper_only = [
        "up to",
        "under",
        "max",
        "below",
        "less than",
        "at most",
        "<",
        "≤",
    ]
    .iter()
    .any(|w| lower.contains(w));
    let lower_only = [
        "from",
        "at least",
        "min",
        "over",
        "above",
        "more than",
        ">",
        "≥",
    ]
    .iter()
    .any(|w| lower.contains(w));
    let mut nums: Vec<u64> = Vec::new();
    let mut rest = s;
    let mut plus_after = false;
    while !rest.is_empty() {
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            let (n, r) = number(rest)?;
            nums.push(n);
            if nums.len() > 2 {
                return None;
            }
            plus_after = r.trim_start().starts_with('+');
            rest = r;
        } else {
            let mut chars = rest.chars();
            chars.next();
            rest = chars.as_str();
        }
    }
    let (lo, hi) = match nums.as_slice() {
        [a] if upper_only && !lower_only => (0, *a),
        [a] if lower_only || plus_after => (*a, u64::MAX),
        [a] => (*a, *a),
        [a, b] => ((*a).min(*b), (*a).max(*b)),
        _ => return None,
    };
    Some(Budget {
        currency,
        lo,
        hi,
        per_person,
    })
}

/// Formats hundredths: `30`, `25.50`.
fn fmt_amount(cents: u64) -> String {
    if cents.is_multiple_of(100) {
        format!("{}", cents / 100)
    } else {
        format!("{}.{:02}", cents / 100, cents % 100)
    }
}

impl Budget {
    /// Canonical text in the §5.3 currency form: `GBP 30-40pp`, `GBP 30pp`,
    /// `up to GBP 40`, `from GBP 30`.
    pub fn render(&self) -> String {
        let cur = self
            .currency
            .as_deref()
            .map(|c| format!("{c} "))
            .unwrap_or_default();
        let pp = if self.per_person { "pp" } else { "" };
        if self.hi == u64::MAX {
            format!("from {cur}{}{pp}", fmt_amount(self.lo))
        } else if self.lo == 0 && self.hi > 0 {
            format!("up to {cur}{}{pp}", fmt_amount(self.hi))
        } else if self.lo == self.hi {
            format!("{cur}{}{pp}", fmt_amount(self.lo))
        } else {
            format!("{cur}{}-{}{pp}", fmt_amount(self.lo), fmt_amount(self.hi))
        }
    }
}

/// Intersects two budgets. Refuses different currencies (no exchange rates in a
/// deterministic core) and disjoint ranges, saying why. A budget without a currency takes
/// the other's.
pub(crate) fn intersect_budgets(a: &Budget, b: &Budget) -> Result<Budget, String> {
    let currency = match (&a.currency, &b.currency) {
        (Some(x), Some(y)) if x != y => {
            return Err(format!(
                "budgets are in different currencies ({x} vs {y}), not intersected"
            ))
        }
        (Some(x), _) | (None, Some(x)) => Some(x.clone()),
        (None, None) => None,
    };
    let lo = a.lo.max(b.lo);
    let hi = a.hi.min(b.hi);
    if lo > hi {
        return Err(format!(
            "budgets do not overlap ({} vs {})",
            a.render(),
            b.render()
        ));
    }
    Ok(Budget {
        currency,
        lo,
        hi,
        per_person: a.per_person || b.per_person,
    })
}
