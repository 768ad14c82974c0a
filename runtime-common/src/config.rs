//! The agent's configuration file (`config.toml` in its home).
//!
//! ```toml
//! address = "agent:alice@localhost"
//! relay = "ws://127.0.0.1:7447"   # or wss://relay.example.org (TLS, port 443 by default)
//! # relay = ["wss://a.example.org", "wss://b.example.org"]   # or several doors of one domain
//! relay_ca = "relay-ca.pem"        # optional: a private CA for a wss:// relay (PEM), relative to the home
//!
//! [profile]            # what the agent knows about its user (shared only as tiers allow)
//! name = "Alice"
//! timezone = "Europe/London"
//!
//! [permissions]        # §7.1 tiers; entries are field names or categories
//! always_share = ["general_location_area", "timezone"]
//! ask_first = ["dietary", "specific_availability", "..."]
//! never_share = ["health_info", "..."]
//!
//! [overrides."agent:bob@localhost"]   # §7.2 relationship overrides
//! label = "close_friend"
//! promote_to_always_share = ["dietary"]
//! restrict_to_never_share = []
//!
//! [limits]             # optional; defaults shown
//! max_round_trips = 8
//! staleness_hours = 48
//! staleness_urgent_hours = 2
//! confirmation_timeout_hours = 24
//! send_rate_per_sec = 40   # frames costing relay rate tokens, paced under the relay's 50/s
//! send_burst = 100         # ... and its burst of 200
//! max_threads_per_peer = 32         # open threads one other agent may start
//! max_prompts_per_peer = 8          # open prompts about one other agent's threads
//! max_fork_children = 8             # threads one thread_fork may create
//! max_thread_bytes = 262144         # packets one thread keeps
//! max_ended_threads_per_peer = 64   # ended threads another agent started that are kept
//!
//! [transparency]       # optional: a summary of each message sent (seed 004 §5.2)
//! channel = "webhook"  # "terminal", "file" (path = "…") or "webhook"
//! format = "slack"     # "slack", "discord" or "matrix" (token_file = "…")
//! url = "https://hooks.slack.com/services/…"
//! ```
//!
//! Every key of `[transparency]` is described in [`crate::transparency`], every key of
//! `[acp]` (ACP, seed 004: the gateway, NATS, the principal) in [`crate::acp`].
//!
//! The permissions here are the agent's *initial* tiers. Once the agent has run, its tiers
//! live in its database and change with `a2acp permissions set` (which the agent applies
//! and records); edits of this section are then ignored, and `agent run` says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use a2acp_core::agent::{AgentConfig, Limits, PermissionTiers, RelationshipOverride};
use a2acp_core::packet::Context;
use a2acp_core::Address;
use serde::{Deserialize, Serialize};

/// What went wrong with a configuration file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read or written.
    #[error("config file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The TOML is invalid.
    #[error("config file {path} is invalid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (line and column included).
        message: String,
    },
    /// A value is invalid.
    #[error("config file {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Optional limits; each absent one keeps the core's default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    /// Context exchanges before escalation (§6.4). Default 8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_round_trips: Option<u32>,
    /// Staleness of a normal thread, hours (§6.4). Default 48.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staleness_hours: Option<u64>,
    /// Staleness of an urgent thread, hours (§6.4). Default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staleness_urgent_hours: Option<u64>,
    /// Confirmation timeout put in resolutions, hours (§8.1). Default 24.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation_timeout_hours: Option<u64>,
    /// Malformed packets from one agent before it is flagged (§13.4). Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub malformed_flag_threshold: Option<u32>,
    /// Silence from the relay after which the agent reconnects, seconds. Default 90.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_silence_secs: Option<u64>,
    /// `send` and `lookup` frames per second at most, under the relay's rate limit.
    /// Default 40 (the relay's default is 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_rate_per_sec: Option<u32>,
    /// Such frames sent at once before the pace applies. Default 100 (the relay's burst
    /// is 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_burst: Option<u32>,
    /// Open threads one other agent may have started with this one. Default 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_threads_per_peer: Option<u32>,
    /// Open prompts about one other agent's threads. Default 8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_prompts_per_peer: Option<u32>,
    /// Threads one `thread_fork` may create. Default 8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fork_children: Option<u32>,
    /// Bytes of packets one thread keeps. Default 262144.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_thread_bytes: Option<usize>,
    /// Ended threads another agent started that are kept. Default 64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ended_threads_per_peer: Option<u32>,
}

/// The configuration file of an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFile {
    /// `agent:<user>@<relay domain>`.
    pub address: String,
    /// The relay's WebSocket URL, `ws://host:port` or `wss://host:port` (TLS); or a list
    /// of URLs of the same domain's relay (its doors), tried in turn ([`RelayUrls`]).
    pub relay: RelayUrls,
    /// A PEM file of certificate authorities trusted for a `wss://` relay besides the
    /// web PKI roots (a private CA or a self-signed relay certificate); relative to the
    /// agent's home.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_ca: Option<String>,
    /// Where the relay wakes this agent when a packet waits for it while it is offline: an
    /// `https://` UnifiedPush or ntfy endpoint (spec §13.2). The relay posts nothing but
    /// "something is waiting" there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_up: Option<String>,
    /// Decide with a language model instead of the deterministic negotiator; implied by
    /// an `[llm]` table (without one, every model call fails and the chain of §13.3
    /// runs: the deterministic negotiator for scheduling, the queue otherwise).
    #[serde(default)]
    pub use_llm: bool,
    /// The language model (SPEC-NOTES "The LLM layer (§5)").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<crate::llm::LlmConfig>,
    /// What the agent knows about its user.
    #[serde(default)]
    pub profile: toml::Table,
    /// Initial permission tiers (§7.1); default: the onboarding defaults of §14.1.
    #[serde(default = "PermissionTiers::onboarding_defaults")]
    pub permissions: PermissionTiers,
    /// Relationship overrides by address (§7.2).
    #[serde(default)]
    pub overrides: BTreeMap<String, RelationshipOverride>,
    /// A2A agent cards by a2acp address (§18): a thread to one of these addresses that
    /// the relay does not know goes on with the A2A agent whose card (or base URL) is
    /// given (`"agent:chez@example.org" = "https://chez.example/"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub a2a_cards: BTreeMap<String, String>,
    /// Limits.
    #[serde(default)]
    pub limits: LimitsFile,
    /// How actions are done (`[actions.book_table] command = […]`), see
    /// [`crate::actions`]; an action without a table is only recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub actions: crate::actions::ActionsConfig,
    /// Where the agent posts a summary of each message it sends (seed 004 §5.2), see
    /// [`crate::transparency`]; none without the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transparency: Option<crate::transparency::TransparencyConfig>,
    /// ACP (seed 004): the gateway and NATS this agent speaks ACP through, see
    /// [`crate::acp`]; none without the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp: Option<crate::acp::AcpFile>,
}

impl AgentFile {
    /// A new file with the onboarding defaults of §14.1 and the given profile.
    pub fn new(address: &Address, relay: impl Into<RelayUrls>, profile: toml::Table) -> Self {
        AgentFile {
            address: address.to_string(),
            relay: relay.into(),
            relay_ca: None,
            wake_up: None,
            use_llm: false,
            llm: None,
            profile,
            permissions: PermissionTiers::onboarding_defaults(),
            overrides: BTreeMap::new(),
            a2a_cards: BTreeMap::new(),
            limits: LimitsFile::default(),
            actions: BTreeMap::new(),
            transparency: None,
            acp: None,
        }
    }

    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks TOML text (`path` only names the file in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let f: AgentFile = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        f.agent_config(path)?;
        crate::actions::check_config(&f.actions).map_err(|message| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        })?;
        if let Some(t) = &f.transparency {
            t.check().map_err(|message| ConfigError::Invalid {
                path: path.to_path_buf(),
                message,
            })?;
        }
        if let Some(a) = &f.acp {
            let user = Address::parse(&f.address)
                .map(|a| a.user().to_string())
                .unwrap_or_default();
            a.check(&user).map_err(|message| ConfigError::Invalid {
                path: path.to_path_buf(),
                message,
            })?;
        }
        Ok(f)
    }

    /// The file's text, with a comment header explaining it.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string_pretty(self).unwrap_or_default();
        format!(
            "# a2acp agent configuration (see docs/agent.md).\n\
             # permissions: the §7.1 tiers this agent starts with (onboarding defaults of §14.1:\n\
             # ask_first for everything except timezone and general area). After the first run\n\
             # the agent keeps its tiers in agent.db: change them with `a2acp permissions set`.\n\
             # profile: what your agent knows about you; shared only as the tiers allow.\n\n{body}"
        )
    }

    /// Writes the file (fails if it exists).
    pub fn write_new(&self, path: &Path) -> Result<(), ConfigError> {
        use std::io::Write;
        let io = |source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io)?;
        f.write_all(self.to_toml().as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)
    }

    /// The core's configuration.
    pub fn agent_config(&self, path: &Path) -> Result<AgentConfig, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let address = Address::parse(&self.address)
            .map_err(|e| invalid(format!("address `{}`: {e}", self.address)))?;
        let mut c = AgentConfig::new(address);
        c.use_llm = self.use_llm || self.llm.is_some();
        if let Some(l) = &self.llm {
            l.check().map_err(invalid)?;
        }
        c.permissions = self.permissions.clone();
        c.profile = toml_to_context(&self.profile);
        if let Some(w) = &self.wake_up {
            a2acp_core::relay::wake_up::check_endpoint(w, true)
                .map_err(|e| invalid(format!("wake_up `{w}`: {e}")))?;
            c.wake_up = Some(w.clone());
        }
        for (addr, o) in &self.overrides {
            let a =
                Address::parse(addr).map_err(|e| invalid(format!("override for `{addr}`: {e}")))?;
            c.overrides.insert(a, o.clone());
        }
        for (addr, url) in &self.a2a_cards {
            let a =
                Address::parse(addr).map_err(|e| invalid(format!("a2a_cards: `{addr}`: {e}")))?;
            let card = a2acp_core::bridge::a2a::client::card_url(url)
                .map_err(|e| invalid(format!("a2a_cards: `{addr}` = `{url}`: {e}")))?;
            c.bridged_fallbacks.insert(
                a,
                a2acp_core::agent::BridgedFallback {
                    bridge: a2acp_core::bridge::a2a::remote::NAME.into(),
                    to: card,
                },
            );
        }
        c.limits = self.limits.apply(Limits::default());
        Ok(c)
    }
}

impl LimitsFile {
    /// `base` with the values set here.
    pub fn apply(&self, mut base: Limits) -> Limits {
        let h = |x: u64| Duration::from_secs(x.saturating_mul(3600));
        if let Some(x) = self.max_round_trips {
            base.max_round_trips = x;
        }
        if let Some(x) = self.staleness_hours {
            base.staleness = h(x);
        }
        if let Some(x) = self.staleness_urgent_hours {
            base.staleness_urgent = h(x);
        }
        if let Some(x) = self.confirmation_timeout_hours {
            base.confirmation_timeout = h(x);
        }
        if let Some(x) = self.malformed_flag_threshold {
            base.malformed_flag_threshold = x;
        }
        if let Some(x) = self.relay_silence_secs {
            base.relay_silence = Duration::from_secs(x);
        }
        if let Some(x) = self.send_rate_per_sec {
            base.send_rate_per_sec = x.max(1);
        }
        if let Some(x) = self.send_burst {
            base.send_burst = x.max(1);
        }
        if let Some(x) = self.max_threads_per_peer {
            base.max_threads_per_peer = x;
        }
        if let Some(x) = self.max_prompts_per_peer {
            base.max_prompts_per_peer = x;
        }
        if let Some(x) = self.max_fork_children {
            base.max_fork_children = x;
        }
        if let Some(x) = self.max_thread_bytes {
            base.max_thread_bytes = x;
        }
        if let Some(x) = self.max_ended_threads_per_peer {
            base.max_ended_threads_per_peer = x;
        }
        base
    }
}

/// A TOML table as a JSON context (dates become their RFC 3339 text).
pub fn toml_to_context(t: &toml::Table) -> Context {
    t.iter()
        .map(|(k, v)| (k.clone(), toml_to_json(v)))
        .collect()
}

fn toml_to_json(v: &toml::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(a) => J::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => J::Object(toml_to_context(t)),
    }
}

/// A JSON context as a TOML table (nulls are dropped: TOML has none).
pub fn context_to_toml(c: &Context) -> toml::Table {
    c.iter()
        .filter_map(|(k, v)| json_to_toml(v).map(|t| (k.clone(), t)))
        .collect()
}

fn json_to_toml(v: &serde_json::Value) -> Option<toml::Value> {
    use serde_json::Value as J;
    Some(match v {
        J::Null => return None,
        J::Bool(b) => toml::Value::Boolean(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        J::String(s) => toml::Value::String(s.clone()),
        J::Array(a) => toml::Value::Array(a.iter().filter_map(json_to_toml).collect()),
        J::Object(o) => toml::Value::Table(context_to_toml(o)),
    })
}

/// Checks a relay URL: `ws://host[:port][/path]` (plain, port 80 by default) or
/// `wss://host[:port][/path]` (TLS, port 443 by default). Returns `(host, port)`.
pub fn relay_url(url: &str) -> Result<(String, u16), String> {
    let (rest, default_port) = if let Some(r) = url.strip_prefix("ws://") {
        (r, 80)
    } else if let Some(r) = url.strip_prefix("wss://") {
        (r, 443)
    } else {
        return Err(format!(
            "relay URL `{url}` must start with ws:// or wss:// (TLS)"
        ));
    };
    let hostport = rest.split('/').next().unwrap_or("");
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| format!("relay URL `{url}`: bad port `{p}`"))?,
        ),
        None => (hostport, default_port),
    };
    if host.is_empty() {
        return Err(format!("relay URL `{url}` has no host"));
    }
    Ok((host.trim_matches(['[', ']']).to_string(), port))
}

/// Whether a relay URL asks for TLS (`wss://`).
pub fn relay_is_tls(url: &str) -> bool {
    url.starts_with("wss://")
}

/// The relay URLs of an agent, its *doors*: one URL, or several of the same domain's
/// relay (nodes of a cluster, or a relay reachable by several routes), tried in turn
/// ([`crate::daemon::Doors`]). Never empty.
///
/// In `config.toml`, `relay = "ws://…"` (one URL, written back as a string) or
/// `relay = ["wss://a…", "wss://b…"]`; reading the file checks every URL
/// ([`relay_url`]) and refuses an empty list or a URL listed twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayUrls(Vec<String>);

impl RelayUrls {
    /// Checks a list: not empty, every URL a relay URL ([`relay_url`]), none twice. The
    /// error names the URL at fault.
    pub fn new(urls: Vec<String>) -> Result<Self, String> {
        if urls.is_empty() {
            return Err("relay: the list of relay URLs is empty; give at least one \
                 (ws://HOST:PORT or wss://HOST[:PORT])"
                .into());
        }
        for (i, u) in urls.iter().enumerate() {
            relay_url(u)?;
            if urls[..i].contains(u) {
                return Err(format!("relay URL `{u}` is listed twice"));
            }
        }
        Ok(RelayUrls(urls))
    }

    /// Parses a list written on one line: URLs separated by commas and/or spaces (the
    /// onboarding's answer), checked as by [`RelayUrls::new`].
    pub fn parse_line(line: &str) -> Result<Self, String> {
        Self::new(
            line.split([',', ' ', '\t'])
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    /// The URLs, in the order they are tried.
    pub fn urls(&self) -> &[String] {
        &self.0
    }

    /// The first URL (the door tried first).
    pub fn first(&self) -> &str {
        &self.0[0]
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never: a list of relay URLs is not empty (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One URL, taken as given (it is checked when dialled, as a single URL always was).
impl From<&str> for RelayUrls {
    fn from(url: &str) -> Self {
        RelayUrls(vec![url.to_string()])
    }
}

/// One URL, taken as given.
impl From<&String> for RelayUrls {
    fn from(url: &String) -> Self {
        RelayUrls(vec![url.clone()])
    }
}

/// One URL, taken as given.
impl From<String> for RelayUrls {
    fn from(url: String) -> Self {
        RelayUrls(vec![url])
    }
}

impl From<&RelayUrls> for RelayUrls {
    fn from(urls: &RelayUrls) -> Self {
        urls.clone()
    }
}

/// The URLs separated by `, ` (as `agent run` and `agent init` print them).
impl std::fmt::Display for RelayUrls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}

impl Serialize for RelayUrls {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // One URL stays a string, as in every file written before lists existed.
        match self.0.as_slice() {
            [one] => s.serialize_str(one),
            many => many.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for RelayUrls {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a relay URL (ws://… or wss://…) or a list of them")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(vec![v.to_string()])
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some(u) = seq.next_element::<String>()? {
                    v.push(u);
                }
                Ok(v)
            }
        }
        let urls = d.deserialize_any(V)?;
        RelayUrls::new(urls).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_onboarding_defaults() {
        let a = Address::parse("agent:alice@localhost").unwrap();
        let mut profile = toml::Table::new();
        profile.insert("timezone".into(), "Europe/London".into());
        profile.insert(
            "time_windows".into(),
            toml::Value::Array(vec!["18:00-21:00".into()]),
        );
        let f = AgentFile::new(&a, "ws://127.0.0.1:7447", profile);
        let text = f.to_toml();
        let g = AgentFile::parse(&text, Path::new("x.toml")).unwrap();
        assert_eq!(f, g);
        let c = g.agent_config(Path::new("x.toml")).unwrap();
        assert_eq!(c.permissions, PermissionTiers::onboarding_defaults());
        assert_eq!(c.profile["time_windows"][0], "18:00-21:00");
    }

    #[test]
    fn minimal_file_gets_defaults_and_errors_are_clear() {
        let f = AgentFile::parse(
            "address = \"agent:bob@localhost\"\nrelay = \"ws://localhost:7447\"\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(f.permissions, PermissionTiers::onboarding_defaults());
        let e = AgentFile::parse(
            "address = \"bob\"\nrelay = \"ws://x:1\"\n",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("address"), "{e}");
        let e = AgentFile::parse(
            "address = \"agent:bob@localhost\"\nrelay = \"http://x\"\n",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ws://"), "{e}");
        let e = AgentFile::parse("address = ", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.toml"), "{e}");
    }

    #[test]
    fn a2a_cards_are_read_checked_and_made_card_urls() {
        let base = "address = \"agent:bob@localhost\"\nrelay = \"ws://localhost:7447\"\n";
        let f = AgentFile::parse(
            &format!("{base}[a2a_cards]\n\"agent:chez@localhost\" = \"https://chez.example/\"\n"),
            Path::new("c.toml"),
        )
        .unwrap();
        let c = f.agent_config(Path::new("c.toml")).unwrap();
        let chez = Address::parse("agent:chez@localhost").unwrap();
        assert_eq!(
            c.bridged_fallbacks[&chez].to,
            "https://chez.example/.well-known/agent-card.json"
        );
        let g = AgentFile::parse(&f.to_toml(), Path::new("c.toml")).unwrap();
        assert_eq!(f, g, "written back as read");
        for (bad, says) in [
            ("\"chez\" = \"https://chez.example/\"", "`chez`"),
            (
                "\"agent:chez@localhost\" = \"ftp://chez.example/\"",
                "ftp://",
            ),
        ] {
            let e = AgentFile::parse(&format!("{base}[a2a_cards]\n{bad}\n"), Path::new("c.toml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("a2a_cards") && e.contains(says), "{e}");
        }
    }

    #[test]
    fn limits_per_peer_are_read_from_the_file() {
        let f = AgentFile::parse(
            "address = \"agent:bob@localhost\"\nrelay = \"ws://localhost:7447\"\n\
             [limits]\nmax_threads_per_peer = 4\nmax_prompts_per_peer = 2\n\
             max_fork_children = 3\nmax_thread_bytes = 10000\nmax_ended_threads_per_peer = 5\n",
            Path::new("c.toml"),
        )
        .unwrap();
        let l = f.agent_config(Path::new("c.toml")).unwrap().limits;
        assert_eq!(
            (
                l.max_threads_per_peer,
                l.max_prompts_per_peer,
                l.max_fork_children,
                l.max_thread_bytes,
                l.max_ended_threads_per_peer
            ),
            (4, 2, 3, 10_000, 5)
        );
        assert_eq!(l.max_round_trips, Limits::default().max_round_trips);
    }

    #[test]
    fn config_relay_is_one_url_as_before_or_a_list_of_doors() {
        let path = Path::new("c.toml");
        // A file written before lists existed reads as one door and is written back
        // the same way.
        let old = "address = \"agent:bob@localhost\"\nrelay = \"ws://localhost:7447\"\n";
        let f = AgentFile::parse(old, path).unwrap();
        assert_eq!(f.relay.urls(), ["ws://localhost:7447"]);
        assert!(
            f.to_toml().contains("\nrelay = \"ws://localhost:7447\"\n"),
            "{}",
            f.to_toml()
        );
        let list = "address = \"agent:bob@localhost\"\n\
                    relay = [\"wss://a.example.org\", \"ws://10.0.0.2:7447/x\"]\n";
        let f = AgentFile::parse(list, path).unwrap();
        assert_eq!(
            f.relay.urls(),
            ["wss://a.example.org", "ws://10.0.0.2:7447/x"]
        );
        assert_eq!(f.relay.first(), "wss://a.example.org");
        assert_eq!(
            f.relay.to_string(),
            "wss://a.example.org, ws://10.0.0.2:7447/x"
        );
        let g = AgentFile::parse(&f.to_toml(), path).unwrap();
        assert_eq!(f, g, "a list is written back as a list");
        // A list of one is one door.
        let f = AgentFile::parse(
            "address = \"agent:bob@localhost\"\nrelay = [\"ws://h:1\"]\n",
            path,
        )
        .unwrap();
        assert_eq!(f.relay, RelayUrls::from("ws://h:1"));
    }

    #[test]
    fn config_relay_list_errors_name_the_bad_url() {
        let path = Path::new("c.toml");
        let parse = |relay: &str| {
            AgentFile::parse(
                &format!("address = \"agent:bob@localhost\"\nrelay = {relay}\n"),
                path,
            )
            .unwrap_err()
            .to_string()
        };
        let e = parse("[\"ws://a:1\", \"http://b:2\"]");
        assert!(e.contains("`http://b:2`") && e.contains("ws://"), "{e}");
        assert!(e.contains("c.toml"), "{e}");
        let e = parse("[\"ws://a:1\", \"ws://b:x\"]");
        assert!(e.contains("`ws://b:x`") && e.contains("bad port"), "{e}");
        let e = parse("[]");
        assert!(e.contains("list of relay URLs is empty"), "{e}");
        let e = parse("[\"ws://a:1\", \"ws://a:1\"]");
        assert!(e.contains("`ws://a:1` is listed twice"), "{e}");
        let e = parse("7447");
        assert!(
            e.contains("a relay URL (ws://… or wss://…) or a list"),
            "{e}"
        );
        let e = parse("[\"ws://a:1\", 2]");
        assert!(e.contains("relay"), "{e}");
    }

    #[test]
    fn config_relay_line_takes_commas_or_spaces() {
        let r = RelayUrls::parse_line("ws://a:1, wss://b  ws://c:3,").unwrap();
        assert_eq!(r.urls(), ["ws://a:1", "wss://b", "ws://c:3"]);
        assert!(RelayUrls::parse_line(" , ").unwrap_err().contains("empty"));
        assert!(RelayUrls::parse_line("ws://a:1,ftp://b")
            .unwrap_err()
            .contains("`ftp://b`"));
    }

    #[test]
    fn urls() {
        assert_eq!(
            relay_url("ws://127.0.0.1:7447").unwrap(),
            ("127.0.0.1".into(), 7447)
        );
        assert_eq!(relay_url("ws://[::1]:9/x").unwrap(), ("::1".into(), 9));
        assert_eq!(relay_url("wss://a:1").unwrap(), ("a".into(), 1));
        assert_eq!(
            relay_url("wss://relay.example.org").unwrap(),
            ("relay.example.org".into(), 443)
        );
        assert_eq!(relay_url("ws://h").unwrap(), ("h".into(), 80));
        assert!(relay_is_tls("wss://a:1") && !relay_is_tls("ws://a:1"));
        assert!(relay_url("https://a:1").unwrap_err().contains("wss://"));
    }
}
