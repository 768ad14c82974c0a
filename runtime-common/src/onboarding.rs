//! §14.1 onboarding: `a2acp agent init` without `--address` asks for the minimal profile
//! (name, rough area, time zone — detected, confirm or change) and the five permission
//! defaults, then writes the same config the flags write.
//!
//! Questions go to `out`, answers are read one line each from `input` — the terminal, or
//! whatever is piped in when stdin is not one (`printf 'Jono\nReading, UK\n\n…' | a2acp
//! agent init`). An empty answer takes the default shown in brackets.

use std::io::{BufRead, Write};

use a2acp_core::agent::{PermissionTiers, Tier};
use a2acp_core::Address;

use crate::config::RelayUrls;

/// The relay a new agent uses unless told otherwise.
pub const DEFAULT_RELAY: &str = "ws://127.0.0.1:7447";

/// The five permission defaults of §14.1: what is shown, the category it sets, and the
/// pre-selected answer ("ask first for everything except timezone and general area").
pub const DEFAULTS: [(&str, &str, Tier); 5] = [
    (
        "Calendar availability",
        "specific_availability",
        Tier::AskFirst,
    ),
    (
        "General area (city)",
        "general_location_area",
        Tier::AlwaysShare,
    ),
    ("Dietary preferences", "dietary", Tier::AskFirst),
    ("Budget range", "budget_range", Tier::AskFirst),
    ("Specific location", "specific_location", Tier::AskFirst),
];

/// How many times a question is asked again after an answer it cannot use.
const RETRIES: usize = 3;

/// What was given on the command line: not asked again.
#[derive(Debug, Clone, Default)]
pub struct Given {
    /// `--relay` (given once, or several times for several doors).
    pub relay: Option<RelayUrls>,
    /// `--name`.
    pub name: Option<String>,
    /// `--timezone`.
    pub timezone: Option<String>,
}

/// The answers: what `agent init` writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Onboarding {
    /// The agent's address.
    pub address: Address,
    /// The relay's URL, or its URLs (doors) in the order tried.
    pub relay: RelayUrls,
    /// The user's name.
    pub name: String,
    /// Where the user is roughly based (profile `general_area`), if said.
    pub area: Option<String>,
    /// The user's time zone.
    pub timezone: String,
    /// The §7.1 tiers with the five answers applied to the onboarding defaults.
    pub permissions: PermissionTiers,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum OnboardingError {
    /// The answers ran out (stdin closed) before the questions did.
    #[error("onboarding stopped at “{0}”: no answer (stdin closed); give the answers one per line, or use --address and --relay")]
    NoAnswer(String),
    /// An answer could not be used, several times.
    #[error("onboarding stopped at “{question}”: {why}")]
    Unusable {
        /// The question.
        question: String,
        /// Why the last answer could not be used.
        why: String,
    },
    /// Reading or writing the terminal failed.
    #[error("onboarding: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs the §14.1 questions. `detected` is the time zone found on this machine
/// ([`detect_timezone`]), offered as the default.
pub fn run(
    input: &mut impl BufRead,
    out: &mut impl Write,
    given: &Given,
    detected: Option<&str>,
) -> Result<Onboarding, OnboardingError> {
    writeln!(out, "Welcome to A2ACP. Let's set up the basics.\n")?;
    let name = match &given.name {
        Some(n) => n.clone(),
        None => ask(input, out, "What's your name?", None, |s| {
            non_empty(s).map(str::to_string)
        })?,
    };
    let area = ask(
        input,
        out,
        "Where are you roughly based? (e.g. Reading, UK; empty to skip)",
        Some(""),
        |s| Ok(s.to_string()),
    )?;
    let timezone = match &given.timezone {
        Some(t) => t.clone(),
        None => {
            let q = match detected {
                Some(d) => {
                    format!("Timezone auto-detected: {d} — Enter to confirm, or type another")
                }
                None => "Your time zone (IANA, e.g. Europe/London)?".to_string(),
            };
            ask(input, out, &q, detected, |s| {
                if a2acp_core::negotiator::timezone_known(s) {
                    Ok(s.to_string())
                } else {
                    Err(format!(
                        "`{s}` is not a time zone (e.g. Europe/London, UTC, +01:00)"
                    ))
                }
            })?
        }
    };
    let suggested = suggested_address(&name);
    let address = ask(
        input,
        out,
        "Your agent's address (agent:NAME@RELAY-DOMAIN)",
        Some(&suggested),
        |s| match Address::parse(s) {
            Ok(a) if a.to_string() == s => Ok(a),
            Ok(a) => Err(format!("addresses are lower case; use `{a}`")),
            Err(e) => Err(e.to_string()),
        },
    )?;
    let relay = match &given.relay {
        Some(r) => r.clone(),
        None => ask(
            input,
            out,
            "The relay (several URLs of one domain: separate them with commas)",
            Some(DEFAULT_RELAY),
            RelayUrls::parse_line,
        )?,
    };
    writeln!(
        out,
        "\nWhen other people's agents ask yours for info,\nwhat are you comfortable sharing by default?\n  (a = Always, s = aSk me, n = Never; Enter keeps the default)"
    )?;
    let mut permissions = PermissionTiers::onboarding_defaults();
    for (label, category, default) in DEFAULTS {
        let d = short(default);
        let tier = ask(
            input,
            out,
            &format!("  {label:<24}[Always]  [Ask me]  [Never]"),
            Some(d),
            parse_tier,
        )?;
        permissions.set(category, tier);
    }
    writeln!(out)?;
    Ok(Onboarding {
        address,
        relay,
        name,
        area: Some(area).filter(|a| !a.is_empty()),
        timezone,
        permissions,
    })
}

/// Asks `question` until `parse` takes the answer (an empty answer is `default`, when
/// there is one).
fn ask<T>(
    input: &mut impl BufRead,
    out: &mut impl Write,
    question: &str,
    default: Option<&str>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, OnboardingError> {
    let mut why = String::new();
    for _ in 0..=RETRIES {
        match default {
            Some(d) if !d.is_empty() => write!(out, "{question} [{d}] ")?,
            _ => write!(out, "{question} ")?,
        }
        out.flush()?;
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            writeln!(out)?;
            return Err(OnboardingError::NoAnswer(question.trim().to_string()));
        }
        let answer = line.trim();
        let answer = match (answer.is_empty(), default) {
            (true, Some(d)) => d,
            _ => answer,
        };
        match parse(answer) {
            Ok(v) => return Ok(v),
            Err(e) => {
                writeln!(out, "  {e}")?;
                why = e;
            }
        }
    }
    Err(OnboardingError::Unusable {
        question: question.trim().to_string(),
        why,
    })
}

fn non_empty(s: &str) -> Result<&str, String> {
    if s.is_empty() {
        Err("please type something".into())
    } else {
        Ok(s)
    }
}

fn short(t: Tier) -> &'static str {
    match t {
        Tier::AlwaysShare => "a",
        Tier::AskFirst => "s",
        Tier::NeverShare => "n",
    }
}

fn parse_tier(s: &str) -> Result<Tier, String> {
    match s.to_ascii_lowercase().as_str() {
        "a" | "always" => Ok(Tier::AlwaysShare),
        "s" | "ask" | "ask me" | "ask_first" => Ok(Tier::AskFirst),
        "n" | "never" | "never_share" => Ok(Tier::NeverShare),
        other => Tier::parse(other)
            .ok_or_else(|| format!("`{s}`: answer a (Always), s (Ask me) or n (Never)")),
    }
}

/// `agent:jono@localhost` for "Jono" (letters and digits of the name, lower case).
fn suggested_address(name: &str) -> String {
    let user: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .take(32)
        .collect();
    let user = if user.is_empty() { "me".into() } else { user };
    format!("agent:{user}@localhost")
}

/// This machine's time zone: `$TZ` (an IANA name), else `/etc/timezone`, else the
/// `zoneinfo/…` target of `/etc/localtime`; only a name the agent understands.
pub fn detect_timezone() -> Option<String> {
    let from_env = std::env::var("TZ")
        .ok()
        .map(|s| s.trim_start_matches(':').to_string());
    let from_file = || {
        std::fs::read_to_string("/etc/timezone")
            .ok()
            .map(|s| s.trim().to_string())
    };
    let from_link = || {
        std::fs::read_link("/etc/localtime").ok().and_then(|p| {
            let s = p.to_string_lossy().into_owned();
            s.split_once("zoneinfo/").map(|(_, z)| z.to_string())
        })
    };
    [from_env, from_file(), from_link()]
        .into_iter()
        .flatten()
        .find(|z| !z.is_empty() && a2acp_core::negotiator::timezone_known(z))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn onboard(answers: &str, given: &Given) -> (Result<Onboarding, OnboardingError>, String) {
        let mut out = Vec::new();
        let r = run(
            &mut answers.as_bytes(),
            &mut out,
            given,
            Some("Europe/London"),
        );
        (r, String::from_utf8(out).unwrap())
    }

    #[test]
    fn the_defaults_take_enter_and_the_answers_set_the_five_categories() {
        let (r, out) = onboard("Jono\nReading, UK\n\n\n\n\n\n\n\n\n", &Given::default());
        let o = r.unwrap();
        assert_eq!(o.name, "Jono");
        assert_eq!(o.area.as_deref(), Some("Reading, UK"));
        assert_eq!(o.timezone, "Europe/London");
        assert_eq!(o.address.to_string(), "agent:jono@localhost");
        assert_eq!(o.relay, RelayUrls::from(DEFAULT_RELAY));
        assert_eq!(o.permissions, PermissionTiers::onboarding_defaults());
        assert!(
            out.contains("Timezone auto-detected: Europe/London"),
            "{out}"
        );
        assert!(out.contains("Dietary preferences"), "{out}");

        let (r, out) = onboard(
            "Jono\n\nMars/Base\nAsia/Tokyo\nagent:jono@example.org\nws://relay:7447\na\nn\nalways\nx\nnever\ns\n",
            &Given::default(),
        );
        let o = r.unwrap();
        assert!(out.contains("`Mars/Base` is not a time zone"), "{out}");
        assert!(out.contains("answer a (Always)"), "{out}");
        assert_eq!(o.area, None);
        assert_eq!(o.timezone, "Asia/Tokyo");
        assert_eq!(o.address.to_string(), "agent:jono@example.org");
        let p = &o.permissions;
        assert!(p.always_share.contains("specific_availability"));
        assert!(p.never_share.contains("general_location_area"));
        assert!(p.always_share.contains("dietary"));
        assert!(p.never_share.contains("budget_range"));
        assert!(p.ask_first.contains("specific_location"));
        // What the defaults say of the rest is kept.
        assert!(p.always_share.contains("timezone"));
        assert!(p.never_share.contains("health_info"));
    }

    #[test]
    fn flags_given_are_not_asked_and_closed_stdin_is_a_clear_error() {
        let given = Given {
            relay: Some("ws://127.0.0.1:9".into()),
            name: Some("Ana".into()),
            timezone: Some("UTC".into()),
        };
        let (r, out) = onboard("\n\n\n", &given);
        assert!(!out.contains("What's your name"));
        let e = r.unwrap_err().to_string();
        assert!(e.contains("no answer (stdin closed)"), "{e}");
        let (r, _) = onboard("\n\n\n\n\n\n\n", &given);
        let o = r.unwrap();
        assert_eq!((o.name.as_str(), o.timezone.as_str()), ("Ana", "UTC"));
        assert_eq!(o.address.to_string(), "agent:ana@localhost");
        assert_eq!(o.relay.urls(), ["ws://127.0.0.1:9"]);
        let (r, out) = onboard(
            "Al\n\n\nAgent:Al@localhost\nno\nno\nno\n",
            &Given::default(),
        );
        assert!(
            out.contains("addresses are lower case; use `agent:al@localhost`"),
            "{out}"
        );
        assert!(matches!(r, Err(OnboardingError::Unusable { .. })));
    }

    #[test]
    fn onboarding_takes_several_relay_doors_on_one_line() {
        let (r, out) = onboard(
            "Jo\n\n\n\nws://a:1, http://b\nws://a:1, wss://b.example.org\n\n\n\n\n\n",
            &Given::default(),
        );
        let o = r.unwrap();
        assert!(out.contains("`http://b` must start with ws://"), "{out}");
        assert_eq!(o.relay.urls(), ["ws://a:1", "wss://b.example.org"]);
    }
}
