//! Agent addresses: `agent:<username>@<relay-domain>` (spec §3).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest username accepted, in bytes.
pub const MAX_USER_LEN: usize = 64;
/// Longest relay domain accepted, in bytes (the DNS limit).
pub const MAX_DOMAIN_LEN: usize = 253;
/// The domain of the peers that reach an agent through its A2A listener (Google A2A
/// clients, seed 003; Phase-1 senders, seed 001): `agent:<client>@a2a.invalid`. `.invalid`
/// is reserved (RFC 2606), so no relay can ever serve it: such a peer is reached only
/// through the listener it came from (SPEC-NOTES "The A2A v1.0 bridge").
pub const A2A_DOMAIN: &str = "a2a.invalid";
/// The domains reserved for bridged peers (SPEC-NOTES "Adding a bridge"): peers of
/// another protocol, reached only through their bridge, never through a relay. Each is
/// under `.invalid` (RFC 2606), which no relay can serve.
pub const BRIDGE_DOMAINS: &[&str] = &[A2A_DOMAIN, ACP_DOMAIN];
/// The domain of the agents of the Agent Communication Protocol (seed 004) that reach an
/// agent through its ACP bridge: `agent:<agent-id>@acp.invalid` (SPEC-NOTES "ACP (seed
/// 004)").
pub const ACP_DOMAIN: &str = "acp.invalid";

/// A validated agent address such as `agent:alice@a2acp.io`.
///
/// Addresses are ASCII and case-insensitive; they are normalised to lower case when
/// parsed, so two spellings of one address compare equal (SPEC-NOTES §3).
///
/// The text is shared between clones (one allocation however many maps hold the
/// address: a relay keeps an online agent's address in several).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Address {
    text: Arc<str>,
    at: usize,
}

/// Why a string is not a valid agent address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// The `agent:` scheme prefix is missing.
    #[error("address must start with `agent:`")]
    MissingScheme,
    /// There is no `@` separating username and domain.
    #[error("address must have the form agent:<username>@<relay-domain>")]
    MissingAt,
    /// The username part is empty, too long or has a character outside `[a-z0-9._-]`.
    #[error("invalid username `{0}`: 1-64 characters from a-z, 0-9, '.', '_', '-', starting with a letter or digit")]
    BadUser(String),
    /// The domain part is not a valid DNS host name.
    #[error("invalid relay domain `{0}`: must be a DNS host name (labels of a-z, 0-9, '-')")]
    BadDomain(String),
}

impl Address {
    /// Parses and validates an address, normalising it to lower case.
    pub fn parse(s: &str) -> Result<Self, AddressError> {
        let rest = s
            .split_at_checked(6)
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("agent:"))
            .map(|(_, rest)| rest)
            .ok_or(AddressError::MissingScheme)?;
        let (user_given, domain_given) = rest.rsplit_once('@').ok_or(AddressError::MissingAt)?;
        let user = user_given.to_ascii_lowercase();
        let domain = domain_given.to_ascii_lowercase();
        if !valid_user(&user) {
            return Err(AddressError::BadUser(user_given.to_string()));
        }
        if !valid_domain(&domain) {
            return Err(AddressError::BadDomain(domain_given.to_string()));
        }
        Ok(Self::from_valid_parts(&user, &domain))
    }

    /// Builds an address from a username and a domain, validating both.
    pub fn new(user: &str, domain: &str) -> Result<Self, AddressError> {
        Self::parse(&format!("agent:{user}@{domain}"))
    }

    fn from_valid_parts(user: &str, domain: &str) -> Self {
        let text = format!("agent:{user}@{domain}");
        Self {
            at: 6 + user.len(),
            text: text.into(),
        }
    }

    /// The username part (`alice` in `agent:alice@a2acp.io`).
    pub fn user(&self) -> &str {
        // `text` is `agent:<user>@<domain>`, ASCII, with `at` the index of its `@`
        // (`from_valid_parts`): the range is always in it.
        self.text.get(6..self.at).unwrap_or_default()
    }

    /// The relay domain part (`a2acp.io` in `agent:alice@a2acp.io`).
    pub fn domain(&self) -> &str {
        // As in `user`: `at` indexes the ASCII `@`, so the range is always in `text`.
        self.text.get(self.at + 1..).unwrap_or_default()
    }

    /// The full address text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this is an A2A client's address (domain [`A2A_DOMAIN`]): its packets
    /// come from the A2A listener and go back to it, never through the relay.
    pub fn is_a2a(&self) -> bool {
        self.domain() == A2A_DOMAIN
    }

    /// Whether this is a bridged peer's address (a domain of [`BRIDGE_DOMAINS`]): its
    /// packets come from its bridge and go back to it, never through the relay.
    pub fn is_bridged(&self) -> bool {
        BRIDGE_DOMAINS.contains(&self.domain())
    }
}

fn valid_user(u: &str) -> bool {
    !u.is_empty()
        && u.len() <= MAX_USER_LEN
        && u.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && u.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

fn valid_domain(d: &str) -> bool {
    !d.is_empty()
        && d.len() <= MAX_DOMAIN_LEN
        && d.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

impl FromStr for Address {
    type Err = AddressError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

impl Serialize for Address {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        Address::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_normalises() {
        let a = Address::parse("agent:Jono@A2ACP.io").unwrap();
        assert_eq!(a.as_str(), "agent:jono@a2acp.io");
        assert_eq!(a.user(), "jono");
        assert_eq!(a.domain(), "a2acp.io");
        assert_eq!(
            Address::parse("agent:bob@localhost").unwrap().domain(),
            "localhost"
        );
    }

    #[test]
    fn rejects_bad_addresses() {
        for bad in [
            "",
            "jono@a2acp.io",
            "agent:",
            "agent:jono",
            "agent:@a2acp.io",
            "agent:jono@",
            "agent:jo no@a2acp.io",
            "agent:.jono@a2acp.io",
            "agent:jono@-bad.io",
            "agent:jono@a..io",
            "agent:jono@a2acp.io:443",
            "agent:é@a2acp.io",
            // Multi-byte characters across the scheme's end and in the domain.
            "agenté:jono@a2acp.io",
            "agentééé",
            "agent:jono@é.io",
            "agent:jono@a2acp.ioé",
            "é",
        ] {
            assert!(Address::parse(bad).is_err(), "{bad:?} accepted");
        }
        let long = format!("agent:{}@x.io", "a".repeat(65));
        assert!(Address::parse(&long).is_err());
    }

    #[test]
    fn the_last_at_separates_user_and_domain() {
        // Only the last `@` separates; the one before it makes the username invalid.
        assert_eq!(
            Address::parse("agent:a@b@c.io"),
            Err(AddressError::BadUser("a@b".into()))
        );
        let a = Address::new("x", "y.z").unwrap();
        assert_eq!((a.user(), a.domain()), ("x", "y.z"));
    }

    #[test]
    fn serde_round_trip() {
        let a = Address::parse("agent:alice@a2acp.io").unwrap();
        let j = serde_json::to_string(&a).unwrap();
        assert_eq!(j, "\"agent:alice@a2acp.io\"");
        assert_eq!(serde_json::from_str::<Address>(&j).unwrap(), a);
        assert!(serde_json::from_str::<Address>("\"bob\"").is_err());
    }
}
