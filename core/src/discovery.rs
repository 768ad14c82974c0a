//! The discovery document: how a relay finds the relay of another domain (spec §16,
//! "federated like email servers"; docs/protocol.md "Finding a domain's relay").
//!
//! A relay that federates serves, at `https://DOMAIN/.well-known/a2acp` (over TLS: the
//! document's authenticity towards the domain is the web PKI's, or a private CA's), a
//! small JSON document:
//!
//! ```json
//! {
//!   "a2acp": 1,
//!   "domain": "b.example",
//!   "federation": "wss://relay.b.example:7447",
//!   "relay_keys": [
//!     { "key": "<first key, base64url>" },
//!     { "key": "<next key>", "signed_by_previous": "<signature by the first key>" }
//!   ],
//!   "sig": "<signature of the whole document by the last key>"
//! }
//! ```
//!
//! - `a2acp`: the document's version, [`DISCOVERY_VERSION`].
//! - `domain`: the domain whose agents (`agent:NAME@DOMAIN`) this relay serves; it must be
//!   the domain the document was fetched for.
//! - `federation`: the relay's federation endpoint, a `wss://` URL (the link between relays
//!   is always over TLS).
//! - `relay_keys`: the relay's Ed25519 signing keys, oldest first, the **last one current**.
//!   Each key after the first carries `signed_by_previous`, the previous key's signature
//!   over [`rotation_bytes`] (the old key signs the new): a relay that pinned an older key
//!   follows the chain to the current one ([`DiscoveryDocument::continues_from`]); a
//!   current key not reachable from the pinned one is a key that changed without its
//!   owner's word. At most [`MAX_KEY_CHAIN`] keys (a rotation past it drops the oldest).
//! - `sig`: the current key's signature over [`document_bytes`] (version, domain,
//!   endpoint, every key): the endpoint is bound to the key, also when the document is
//!   fetched from the relay's own `https://HOST:PORT` (the static map of a private
//!   deployment) rather than from the domain.
//!
//! Unknown fields are ignored (a later version may add some); anything else that is not
//! as above refuses the whole document, with one [`DiscoveryError`] per reason. A
//! document is at most [`MAX_DOCUMENT_BYTES`]. This module is pure: fetching, caching and
//! serving the document are the runtime's.

use serde::{Deserialize, Serialize};

use crate::crypto::{put_lp, IdentityKey, PublicKey};
use crate::encoding::{b64_decode, b64_encode};
use crate::Address;

/// The version of the document this implementation writes and reads.
pub const DISCOVERY_VERSION: u32 = 1;
/// Where a domain serves its document.
pub const WELL_KNOWN_PATH: &str = "/.well-known/a2acp";
/// Largest document read (a fetcher stops reading past it).
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024;
/// Most keys in a document's rotation chain.
pub const MAX_KEY_CHAIN: usize = 16;
/// Longest federation endpoint URL.
pub const MAX_ENDPOINT_LEN: usize = 512;
/// Label of the bytes a key signs when it hands over to the next ([`rotation_bytes`]).
pub const ROTATION_LABEL: &[u8] = b"A2ACP-RELAY-KEY-ROTATION-V1\0";
/// Label of the bytes the current key signs over the document ([`document_bytes`]).
pub const DOCUMENT_LABEL: &[u8] = b"A2ACP-DISCOVERY-V1\0";

/// Why a discovery document (or a static route) is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// Longer than [`MAX_DOCUMENT_BYTES`].
    #[error("the discovery document is larger than {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge,
    /// Not JSON of the document's shape.
    #[error("the discovery document is not valid: {0}")]
    Malformed(String),
    /// A version this implementation does not read.
    #[error("the discovery document's version {0} is not supported (this relay reads {DISCOVERY_VERSION})")]
    UnsupportedVersion(u64),
    /// `domain` is not a domain name.
    #[error("the discovery document names `{0}`, which is not a domain name")]
    BadDomain(String),
    /// The document is another domain's.
    #[error("the discovery document is for `{found}`, not for `{expected}`")]
    WrongDomain {
        /// The domain it was fetched for.
        expected: String,
        /// The domain it names.
        found: String,
    },
    /// `federation` is not a usable `wss://` URL.
    #[error("the federation endpoint `{url}` is not usable: {why}")]
    BadEndpoint {
        /// The URL, cut to [`MAX_ENDPOINT_LEN`] characters.
        url: String,
        /// What is wrong.
        why: &'static str,
    },
    /// No key at all.
    #[error("the discovery document lists no relay key")]
    NoKeys,
    /// More than [`MAX_KEY_CHAIN`] keys.
    #[error("the discovery document lists more than {MAX_KEY_CHAIN} relay keys")]
    TooManyKeys,
    /// A key is not an acceptable Ed25519 public key (or appears twice in the chain).
    #[error("relay key {0} of the discovery document is not a valid, distinct Ed25519 key")]
    BadKey(usize),
    /// A key's `signed_by_previous` is missing, present on the first key, or wrong.
    #[error("relay key {0} of the discovery document is not signed by the key before it")]
    BrokenChain(usize),
    /// The document's own signature is missing or wrong.
    #[error("the discovery document's signature by its current key is wrong")]
    BadSignature,
    /// A `--federate` route is not `DOMAIN=wss://HOST:PORT`.
    #[error("--federate `{route}`: {why}")]
    BadRoute {
        /// The flag's value.
        route: String,
        /// What is wrong.
        why: String,
    },
}

/// One key of the rotation chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainedKey {
    /// The key.
    pub key: PublicKey,
    /// The previous key's signature over [`rotation_bytes`] (`None` for the first key).
    pub signed_by_previous: Option<[u8; 64]>,
}

/// A relay's keys, oldest first, the last one current: what the relay keeps on disk
/// beside its current secret key, and publishes in its document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChain {
    keys: Vec<ChainedKey>,
    /// The last key's, kept apart so that reading it needs no fallible indexing.
    current: PublicKey,
}

impl KeyChain {
    /// A chain of one key (a relay's first).
    pub fn new(first: PublicKey) -> KeyChain {
        KeyChain {
            keys: vec![ChainedKey {
                key: first.clone(),
                signed_by_previous: None,
            }],
            current: first,
        }
    }

    /// A chain read back (from disk or a document), checked link by link.
    pub fn from_keys(domain: &str, keys: Vec<ChainedKey>) -> Result<KeyChain, DiscoveryError> {
        check_chain(domain, &keys)?;
        let current = keys
            .last()
            .map(|k| k.key.clone())
            .ok_or(DiscoveryError::NoKeys)?;
        Ok(KeyChain { keys, current })
    }

    /// The keys, oldest first.
    pub fn keys(&self) -> &[ChainedKey] {
        &self.keys
    }

    /// The current key (the last).
    pub fn current(&self) -> &PublicKey {
        &self.current
    }

    /// Hands over from `old` (the current key's secret) to `next`: `old` signs `next`,
    /// which becomes current; the oldest key is dropped past [`MAX_KEY_CHAIN`].
    pub fn rotate(
        &mut self,
        domain: &str,
        old: &IdentityKey,
        next: PublicKey,
    ) -> Result<(), DiscoveryError> {
        if old.public() != *self.current() {
            return Err(DiscoveryError::BrokenChain(self.keys.len()));
        }
        if self.keys.iter().any(|k| k.key == next) {
            return Err(DiscoveryError::BadKey(self.keys.len()));
        }
        let sig = old.sign(&rotation_bytes(domain, self.current(), &next));
        self.keys.push(ChainedKey {
            key: next.clone(),
            signed_by_previous: Some(sig),
        });
        self.current = next;
        if self.keys.len() > MAX_KEY_CHAIN {
            self.keys.remove(0);
            if let Some(first) = self.keys.first_mut() {
                first.signed_by_previous = None;
            }
        }
        Ok(())
    }

    /// The chain as JSON (what the relay keeps on disk beside its key).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(&wire_keys(&self.keys)).unwrap_or_default()
    }

    /// Reads [`KeyChain::to_json`] back, checking every link.
    pub fn from_json(domain: &str, bytes: &[u8]) -> Result<KeyChain, DiscoveryError> {
        let wire: Vec<WireKey> =
            serde_json::from_slice(bytes).map_err(|e| DiscoveryError::Malformed(e.to_string()))?;
        KeyChain::from_keys(domain, from_wire_keys(wire)?)
    }
}

/// A domain's relay as its document describes it, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryDocument {
    /// The domain served.
    pub domain: String,
    /// The federation endpoint, `wss://HOST[:PORT][/PATH]`.
    pub federation: String,
    /// The signing keys, oldest first, the last one current.
    pub chain: KeyChain,
    /// The current key's signature over [`document_bytes`].
    pub sig: [u8; 64],
}

#[derive(Serialize, Deserialize)]
struct WireKey {
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signed_by_previous: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct WireDocument {
    a2acp: u64,
    domain: String,
    federation: String,
    relay_keys: Vec<WireKey>,
    sig: String,
}

fn wire_keys(keys: &[ChainedKey]) -> Vec<WireKey> {
    keys.iter()
        .map(|k| WireKey {
            key: k.key.to_string(),
            signed_by_previous: k.signed_by_previous.map(|s| b64_encode(&s)),
        })
        .collect()
}

fn from_wire_keys(wire: Vec<WireKey>) -> Result<Vec<ChainedKey>, DiscoveryError> {
    if wire.is_empty() {
        return Err(DiscoveryError::NoKeys);
    }
    if wire.len() > MAX_KEY_CHAIN {
        return Err(DiscoveryError::TooManyKeys);
    }
    wire.into_iter()
        .enumerate()
        .map(|(i, w)| {
            let key: PublicKey = w.key.parse().map_err(|_| DiscoveryError::BadKey(i))?;
            let signed_by_previous = match w.signed_by_previous {
                None => None,
                Some(s) => Some(sig64(&s).ok_or(DiscoveryError::BrokenChain(i))?),
            };
            Ok(ChainedKey {
                key,
                signed_by_previous,
            })
        })
        .collect()
}

fn sig64(s: &str) -> Option<[u8; 64]> {
    b64_decode(s)?.try_into().ok()
}

/// What `old` signs to hand over to `next` on `domain`:
/// [`ROTATION_LABEL`] ‖ lp(domain) ‖ old (32 bytes) ‖ next (32 bytes), `lp` a 4-byte
/// big-endian length then the bytes.
pub fn rotation_bytes(domain: &str, old: &PublicKey, next: &PublicKey) -> Vec<u8> {
    let mut b = Vec::with_capacity(ROTATION_LABEL.len() + 4 + domain.len() + 64);
    b.extend_from_slice(ROTATION_LABEL);
    put_lp(&mut b, domain.as_bytes());
    b.extend_from_slice(&old.to_bytes());
    b.extend_from_slice(&next.to_bytes());
    b
}

/// What the current key signs over a document: [`DOCUMENT_LABEL`] ‖ version (4 bytes
/// big-endian) ‖ lp(domain) ‖ lp(federation) ‖ number of keys (4 bytes) ‖ each key
/// (32 bytes), oldest first.
pub fn document_bytes(domain: &str, federation: &str, keys: &[ChainedKey]) -> Vec<u8> {
    let mut b = Vec::with_capacity(64 + domain.len() + federation.len() + 32 * keys.len());
    b.extend_from_slice(DOCUMENT_LABEL);
    b.extend_from_slice(&DISCOVERY_VERSION.to_be_bytes());
    put_lp(&mut b, domain.as_bytes());
    put_lp(&mut b, federation.as_bytes());
    b.extend_from_slice(&u32::try_from(keys.len()).unwrap_or(u32::MAX).to_be_bytes());
    for k in keys {
        b.extend_from_slice(&k.key.to_bytes());
    }
    b
}

fn check_chain(domain: &str, keys: &[ChainedKey]) -> Result<(), DiscoveryError> {
    if keys.is_empty() {
        return Err(DiscoveryError::NoKeys);
    }
    if keys.len() > MAX_KEY_CHAIN {
        return Err(DiscoveryError::TooManyKeys);
    }
    let mut prev: Option<&PublicKey> = None;
    for (i, k) in keys.iter().enumerate() {
        if keys.iter().take(i).any(|o| o.key == k.key) {
            return Err(DiscoveryError::BadKey(i));
        }
        match (prev, &k.signed_by_previous) {
            (None, None) => {}
            (Some(p), Some(sig)) => p
                .verify(&rotation_bytes(domain, p, &k.key), sig)
                .map_err(|_| DiscoveryError::BrokenChain(i))?,
            _ => return Err(DiscoveryError::BrokenChain(i)),
        }
        prev = Some(&k.key);
    }
    Ok(())
}

fn check_domain(domain: &str) -> Result<(), DiscoveryError> {
    // Exactly as an address's domain is written (lower case): no normalising here.
    if Address::new("relay", domain).map_or(true, |a| a.domain() != domain) {
        return Err(DiscoveryError::BadDomain(
            domain
                .chars()
                .take(crate::address::MAX_DOMAIN_LEN)
                .collect(),
        ));
    }
    Ok(())
}

/// Checks a federation endpoint: `wss://HOST[:PORT][/PATH]`, at most
/// [`MAX_ENDPOINT_LEN`] characters, printable ASCII, no user info, query or fragment.
/// Returns the host and the port (443 by default).
pub fn check_endpoint(url: &str) -> Result<(String, u16), DiscoveryError> {
    let bad = |why| DiscoveryError::BadEndpoint {
        url: url.chars().take(MAX_ENDPOINT_LEN).collect(),
        why,
    };
    if url.len() > MAX_ENDPOINT_LEN {
        return Err(bad("longer than 512 characters"));
    }
    if !url.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad("not printable ASCII"));
    }
    let Some(rest) = url.strip_prefix("wss://") else {
        return Err(bad(
            "it must start with wss:// (the link between relays is over TLS)",
        ));
    };
    if url.contains(['?', '#', '@', '\\']) {
        return Err(bad("no user info, query or fragment"));
    }
    let hostport = rest.split('/').next().unwrap_or("");
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let Some((h, after)) = v6.split_once(']') else {
            return Err(bad("unclosed IPv6 address"));
        };
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(bad("garbage after the IPv6 address")),
        };
        (h, port)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        None => 443,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n != 0 && !p.starts_with('+') => n,
            _ => return Err(bad("bad port")),
        },
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b':')
    {
        return Err(bad("the host is not a host name or an IP address"));
    }
    Ok((host.to_string(), port))
}

impl DiscoveryDocument {
    /// The document of a relay serving `domain` at `federation`, with `chain`, signed by
    /// `current` (which must be the chain's current key).
    pub fn sign(
        domain: &str,
        federation: &str,
        chain: KeyChain,
        current: &IdentityKey,
    ) -> Result<DiscoveryDocument, DiscoveryError> {
        check_domain(domain)?;
        check_endpoint(federation)?;
        if current.public() != *chain.current() {
            return Err(DiscoveryError::BadSignature);
        }
        let sig = current.sign(&document_bytes(domain, federation, chain.keys()));
        Ok(DiscoveryDocument {
            domain: domain.to_string(),
            federation: federation.to_string(),
            chain,
            sig,
        })
    }

    /// The document as served (JSON, pretty-printed).
    pub fn to_json(&self) -> Vec<u8> {
        let w = WireDocument {
            a2acp: u64::from(DISCOVERY_VERSION),
            domain: self.domain.clone(),
            federation: self.federation.clone(),
            relay_keys: wire_keys(self.chain.keys()),
            sig: b64_encode(&self.sig),
        };
        let mut out = serde_json::to_vec_pretty(&w).unwrap_or_default();
        out.push(b'\n');
        out
    }

    /// Parses and checks a document fetched for `domain` (module documentation): its
    /// size, shape, version, domain, endpoint, every key, the chain and the signature.
    pub fn parse(domain: &str, bytes: &[u8]) -> Result<DiscoveryDocument, DiscoveryError> {
        if bytes.len() > MAX_DOCUMENT_BYTES {
            return Err(DiscoveryError::TooLarge);
        }
        let v: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| DiscoveryError::Malformed(e.to_string()))?;
        // The version first, so a later version's other changes read as a version error.
        match v.get("a2acp").map(serde_json::Value::as_u64) {
            Some(Some(n)) if n == u64::from(DISCOVERY_VERSION) => {}
            Some(Some(n)) => return Err(DiscoveryError::UnsupportedVersion(n)),
            _ => {
                return Err(DiscoveryError::Malformed(
                    "`a2acp` (the version) must be a whole number".into(),
                ))
            }
        }
        let w: WireDocument =
            serde_json::from_value(v).map_err(|e| DiscoveryError::Malformed(e.to_string()))?;
        check_domain(&w.domain)?;
        if w.domain != domain {
            return Err(DiscoveryError::WrongDomain {
                expected: domain.to_string(),
                found: w
                    .domain
                    .chars()
                    .take(crate::address::MAX_DOMAIN_LEN)
                    .collect(),
            });
        }
        check_endpoint(&w.federation)?;
        let chain = KeyChain::from_keys(&w.domain, from_wire_keys(w.relay_keys)?)?;
        let sig = sig64(&w.sig).ok_or(DiscoveryError::BadSignature)?;
        chain
            .current()
            .verify(
                &document_bytes(&w.domain, &w.federation, chain.keys()),
                &sig,
            )
            .map_err(|_| DiscoveryError::BadSignature)?;
        Ok(DiscoveryDocument {
            domain: w.domain,
            federation: w.federation,
            chain,
            sig,
        })
    }

    /// The current relay key.
    pub fn current_key(&self) -> &PublicKey {
        self.chain.current()
    }

    /// Whether `pinned` (a key of this domain's relay known from before) is in the chain:
    /// the current key is then reached from it by keys each signed by the one before.
    pub fn continues_from(&self, pinned: &PublicKey) -> bool {
        self.chain.keys().iter().any(|k| k.key == *pinned)
    }
}

/// Where a domain's document is fetched: `https://DOMAIN/.well-known/a2acp`.
pub fn well_known_url(domain: &str) -> String {
    format!("https://{domain}{WELL_KNOWN_PATH}")
}

/// Where the document of a relay known by its endpoint (`--federate`) is fetched:
/// `https://HOST:PORT/.well-known/a2acp`.
pub fn well_known_url_of_endpoint(endpoint: &str) -> Result<String, DiscoveryError> {
    let (host, port) = check_endpoint(endpoint)?;
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    Ok(format!("https://{host}:{port}{WELL_KNOWN_PATH}"))
}

/// A static route of a private deployment, `DOMAIN=wss://HOST:PORT` (`--federate`): the
/// domain and the endpoint, each checked.
pub fn parse_static_route(s: &str) -> Result<(String, String), DiscoveryError> {
    let bad = |why: String| DiscoveryError::BadRoute {
        route: s.chars().take(MAX_ENDPOINT_LEN).collect(),
        why,
    };
    let Some((domain, endpoint)) = s.split_once('=') else {
        return Err(bad("expected DOMAIN=wss://HOST:PORT".into()));
    };
    let (domain, endpoint) = (domain.trim(), endpoint.trim());
    check_domain(domain).map_err(|e| bad(e.to_string()))?;
    check_endpoint(endpoint).map_err(|e| bad(e.to_string()))?;
    Ok((domain.to_string(), endpoint.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> IdentityKey {
        IdentityKey::from_seed([n; 32])
    }

    fn doc() -> (DiscoveryDocument, IdentityKey) {
        let (k1, k2) = (key(1), key(2));
        let mut chain = KeyChain::new(k1.public());
        chain.rotate("b.example", &k1, k2.public()).unwrap();
        let d =
            DiscoveryDocument::sign("b.example", "wss://relay.b.example:7447", chain, &k2).unwrap();
        (d, k2)
    }

    fn edit(f: impl FnOnce(&mut serde_json::Value)) -> Result<DiscoveryDocument, DiscoveryError> {
        let (d, _) = doc();
        let mut v: serde_json::Value = serde_json::from_slice(&d.to_json()).unwrap();
        f(&mut v);
        DiscoveryDocument::parse("b.example", &serde_json::to_vec(&v).unwrap())
    }

    #[test]
    fn round_trip_and_rotation_chain() {
        let (d, k2) = doc();
        let back = DiscoveryDocument::parse("b.example", &d.to_json()).unwrap();
        assert_eq!(back, d);
        assert_eq!(back.current_key(), &k2.public());
        assert!(back.continues_from(&key(1).public()));
        assert!(!back.continues_from(&key(3).public()));
        // Unknown fields are ignored.
        let e = edit(|v| v["later"] = serde_json::json!({"x": 1}));
        assert!(e.is_ok(), "{e:?}");
    }

    #[test]
    fn chain_on_disk_round_trips_and_drops_the_oldest() {
        let mut chain = KeyChain::new(key(1).public());
        for n in 1..=20u8 {
            chain
                .rotate("a.example", &key(n), key(n + 1).public())
                .unwrap();
        }
        assert_eq!(chain.keys().len(), MAX_KEY_CHAIN);
        assert_eq!(chain.current(), &key(21).public());
        let back = KeyChain::from_json("a.example", &chain.to_json()).unwrap();
        assert_eq!(back, chain);
        // Another domain's chain does not verify.
        assert!(matches!(
            KeyChain::from_json("b.example", &chain.to_json()),
            Err(DiscoveryError::BrokenChain(1))
        ));
        // Only the current key hands over.
        let mut c = KeyChain::new(key(1).public());
        assert!(c.rotate("a.example", &key(9), key(2).public()).is_err());
        assert!(c.rotate("a.example", &key(1), key(1).public()).is_err());
    }

    #[test]
    fn malformed_documents_are_refused_with_their_reason() {
        let p = |b: &[u8]| DiscoveryDocument::parse("b.example", b);
        assert!(matches!(p(b""), Err(DiscoveryError::Malformed(_))));
        assert!(matches!(p(b"[1,2]"), Err(DiscoveryError::Malformed(_))));
        assert!(matches!(
            p(b"{\"a2acp\":\"1\"}"),
            Err(DiscoveryError::Malformed(_))
        ));
        assert!(matches!(
            p(b"{\"a2acp\":2}"),
            Err(DiscoveryError::UnsupportedVersion(2))
        ));
        assert!(matches!(
            p(&vec![b' '; MAX_DOCUMENT_BYTES + 1]),
            Err(DiscoveryError::TooLarge)
        ));
        assert!(matches!(
            edit(|v| v
                .as_object_mut()
                .unwrap()
                .remove("sig")
                .map(|_| ())
                .unwrap()),
            Err(DiscoveryError::Malformed(_))
        ));
        assert!(matches!(
            edit(|v| v["domain"] = "B.example".into()),
            Err(DiscoveryError::BadDomain(_))
        ));
        assert!(matches!(
            edit(|v| v["relay_keys"] = serde_json::json!([])),
            Err(DiscoveryError::NoKeys)
        ));
        assert!(matches!(
            edit(|v| v["relay_keys"][0]["key"] = "AAAA".into()),
            Err(DiscoveryError::BadKey(0))
        ));
        assert!(matches!(
            edit(|v| v["sig"] = "!!".into()),
            Err(DiscoveryError::BadSignature)
        ));
    }

    #[test]
    fn hostile_documents_are_refused() {
        // Another domain's document served for b.example.
        let k = key(7);
        let other = DiscoveryDocument::sign(
            "evil.example",
            "wss://evil.example",
            KeyChain::new(k.public()),
            &k,
        )
        .unwrap();
        assert!(matches!(
            DiscoveryDocument::parse("b.example", &other.to_json()),
            Err(DiscoveryError::WrongDomain { .. })
        ));
        // The endpoint changed after signing (a man in the middle of a static route).
        assert!(matches!(
            edit(|v| v["federation"] = "wss://evil.example:443".into()),
            Err(DiscoveryError::BadSignature)
        ));
        // A key appended that the current one did not sign.
        assert!(matches!(
            edit(|v| v["relay_keys"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"key": key(9).public().to_string(),
                    "signed_by_previous": b64_encode(&[0u8; 64])}))),
            Err(DiscoveryError::BrokenChain(2))
        ));
        // A chain link without its signature, or a first key claiming one.
        assert!(matches!(
            edit(|v| v["relay_keys"][1]
                .as_object_mut()
                .unwrap()
                .remove("signed_by_previous")
                .map(|_| ())
                .unwrap()),
            Err(DiscoveryError::BrokenChain(1))
        ));
        assert!(matches!(
            edit(|v| v["relay_keys"][0]["signed_by_previous"] = b64_encode(&[1u8; 64]).into()),
            Err(DiscoveryError::BrokenChain(0))
        ));
        // The same key twice.
        assert!(matches!(
            edit(|v| {
                let first = v["relay_keys"][0].clone();
                v["relay_keys"].as_array_mut().unwrap().push(first);
            }),
            Err(DiscoveryError::BadKey(2))
        ));
        // Too many keys.
        assert!(matches!(
            edit(|v| v["relay_keys"] = serde_json::json!(vec![serde_json::json!({"key": "x"}); 17])),
            Err(DiscoveryError::TooManyKeys)
        ));
        // Endpoints that are not wss:// URLs of a host.
        for bad in [
            "ws://relay.b.example",
            "https://relay.b.example",
            "wss://",
            "wss://user@relay.b.example",
            "wss://relay.b.example:0",
            "wss://relay.b.example:99999",
            "wss://relay.b.example/?q",
            "wss://relay b.example",
            "wss://[::1",
            "wss://relay.b.example\u{202e}",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
        assert!(check_endpoint(&format!("wss://{}", "a".repeat(600))).is_err());
        assert_eq!(check_endpoint("wss://[::1]:9").unwrap(), ("::1".into(), 9));
        assert_eq!(
            check_endpoint("wss://relay.b.example/a2acp").unwrap(),
            ("relay.b.example".into(), 443)
        );
        // Deep JSON nesting is refused by the parser, not a stack overflow.
        let deep = format!("{}{}", "[".repeat(4_000), "]".repeat(4_000));
        assert!(matches!(
            DiscoveryDocument::parse("b.example", deep.as_bytes()),
            Err(DiscoveryError::Malformed(_))
        ));
    }

    #[test]
    fn static_routes_and_well_known_urls() {
        assert_eq!(
            parse_static_route("b.example=wss://127.0.0.1:7448").unwrap(),
            ("b.example".into(), "wss://127.0.0.1:7448".into())
        );
        for bad in [
            "b.example",
            "=wss://x:1",
            "B.example=wss://x:1",
            "b.example=ws://x:1",
            "b.example=wss://x:port",
        ] {
            let e = parse_static_route(bad).unwrap_err().to_string();
            assert!(e.starts_with("--federate `"), "{e}");
        }
        assert_eq!(
            well_known_url_of_endpoint("wss://127.0.0.1:7448").unwrap(),
            "https://127.0.0.1:7448/.well-known/a2acp"
        );
        assert_eq!(
            well_known_url_of_endpoint("wss://[::1]").unwrap(),
            "https://[::1]:443/.well-known/a2acp"
        );
        assert_eq!(
            well_known_url("b.example"),
            "https://b.example/.well-known/a2acp"
        );
    }
}
