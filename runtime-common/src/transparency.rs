//! Transparency summaries (seed 004 §5.2): after each message the agent sends (and,
//! when asked, each it receives), one or two sentences for its principal — the summary
//! the audit log records, written from typed data only — posted to the channel the
//! user chose in `config.toml`:
//!
//! ```toml
//! [transparency]
//! channel = "webhook"        # "terminal" (the agent's log), "file" or "webhook"
//! format = "slack"           # webhook: "slack" ({"text":…}), "discord" ({"content":…}),
//!                            # "matrix" (m.room.message, PUT to the URL + a txn id)
//! url = "https://hooks.slack.com/services/…"
//! # path = "transparency.log"    # file: relative to the home
//! # token_file = "matrix.token"  # matrix: the access token's file (or token = "…")
//! # allow_http = false           # http:// to a host that is not loopback
//! # received = false             # summarise received messages too
//! # max_per_minute = 20          # posts per minute at most …
//! # burst = 5                    # … after this many at once
//! # queue = 64                   # summaries waiting at most; more are dropped, counted
//! # timeout_secs = 5             # deadline of one POST, connection included
//! ```
//!
//! Everything happens on one thread of its own, fed through a bounded queue the agent
//! only ever `try_send`s to: a dead or slow webhook never blocks the agent. A summary
//! that finds the queue full is dropped and counted; the next post says how many were.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Where summaries go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    /// The agent's log (`tracing`, target `transparency`).
    Terminal,
    /// A file, one line per summary.
    File,
    /// A chat webhook.
    Webhook,
}

/// The body a webhook takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// Slack-compatible incoming webhooks (Mattermost, Rocket.Chat…): POST `{"text":…}`.
    #[default]
    Slack,
    /// Discord webhooks: POST `{"content":…}`.
    Discord,
    /// Matrix client-server API: PUT `{"msgtype":"m.notice","body":…}` to the URL (which
    /// ends in `/rooms/<room>/send/m.room.message`) followed by `/<txn id>`, with the
    /// access token as a bearer token.
    Matrix,
}

/// The `[transparency]` table of `config.toml` (the keys are documented in the module).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransparencyConfig {
    /// Where summaries go.
    pub channel: ChannelKind,
    /// The webhook's body format.
    #[serde(default)]
    pub format: WebhookFormat,
    /// The webhook's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The file, relative to the home.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Matrix access token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A file holding the Matrix access token (first line), relative to the home.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    /// Allow `http://` to a host that is not loopback.
    #[serde(default)]
    pub allow_http: bool,
    /// Summarise received messages too (by default only those sent, as §5.2 says).
    #[serde(default)]
    pub received: bool,
    /// Posts per minute at most. Default 20.
    #[serde(default = "default_per_minute")]
    pub max_per_minute: u32,
    /// Posts at once before the rate applies. Default 5.
    #[serde(default = "default_burst")]
    pub burst: u32,
    /// Summaries waiting at most. Default 64.
    #[serde(default = "default_queue")]
    pub queue: usize,
    /// Deadline of one POST, seconds. Default 5.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

fn default_per_minute() -> u32 {
    20
}
fn default_burst() -> u32 {
    5
}
fn default_queue() -> usize {
    64
}
fn default_timeout() -> u64 {
    5
}

impl TransparencyConfig {
    /// A channel of `kind` with the defaults.
    pub fn new(channel: ChannelKind) -> TransparencyConfig {
        TransparencyConfig {
            channel,
            format: WebhookFormat::default(),
            url: None,
            path: None,
            token: None,
            token_file: None,
            allow_http: false,
            received: false,
            max_per_minute: default_per_minute(),
            burst: default_burst(),
            queue: default_queue(),
            timeout_secs: default_timeout(),
        }
    }

    /// What is wrong with it, if anything: a webhook needs a URL, `https://` unless its
    /// host is loopback or `allow_http` is set; a file needs a path; Matrix a token.
    pub fn check(&self) -> Result<(), String> {
        if self.max_per_minute == 0 || self.burst == 0 || self.queue == 0 || self.timeout_secs == 0
        {
            return Err(
                "[transparency]: max_per_minute, burst, queue and timeout_secs must be at least 1"
                    .into(),
            );
        }
        match self.channel {
            ChannelKind::Terminal => Ok(()),
            ChannelKind::File => match &self.path {
                Some(p) if !p.is_empty() => Ok(()),
                _ => Err("[transparency]: channel = \"file\" needs a path".into()),
            },
            ChannelKind::Webhook => {
                let url = self
                    .url
                    .as_deref()
                    .ok_or("[transparency]: channel = \"webhook\" needs a url")?;
                check_url(url, self.allow_http)?;
                if self.format == WebhookFormat::Matrix
                    && self.token.is_none()
                    && self.token_file.is_none()
                {
                    return Err(
                        "[transparency]: format = \"matrix\" needs token or token_file".into(),
                    );
                }
                Ok(())
            }
        }
    }
}

/// The rule for webhook URLs: `https://`, or `http://` to a loopback host (`localhost`,
/// `127.0.0.0/8`, `[::1]`), or `http://` anywhere with `allow_http`.
pub fn check_url(url: &str, allow_http: bool) -> Result<(), String> {
    if let Some(rest) = url.strip_prefix("https://") {
        return match host_of(rest) {
            Some(_) => Ok(()),
            None => Err(format!("[transparency]: url {url:?} has no host")),
        };
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!(
            "[transparency]: url must be https:// (or http:// to loopback), not {url:?}"
        ));
    };
    let host = host_of(rest).ok_or_else(|| format!("[transparency]: url {url:?} has no host"))?;
    if allow_http || is_loopback(&host) {
        Ok(())
    } else {
        Err(format!(
            "[transparency]: url {url:?} is plain http to {host}, which is not loopback: use https://, or set allow_http = true"
        ))
    }
}

/// The host of what follows `scheme://`.
fn host_of(rest: &str) -> Option<String> {
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.split(':').next()?,
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Counters of a channel.
#[derive(Debug, Default)]
struct Counters {
    queued: AtomicU64,
    delivered: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
}

/// What a channel did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransparencyStats {
    /// Summaries queued.
    pub queued: u64,
    /// Summaries delivered (written, logged, or answered 2xx).
    pub delivered: u64,
    /// Summaries dropped because the queue was full.
    pub dropped: u64,
    /// Posts that failed (error, timeout, non-2xx answer).
    pub failed: u64,
}

/// A running transparency channel: a bounded queue and the thread that empties it.
#[derive(Debug, Clone)]
pub struct Transparency {
    tx: flume::Sender<String>,
    counters: Arc<Counters>,
    received: bool,
}

impl Transparency {
    /// Starts the channel of `cfg` (checked) for the agent whose home is `home`.
    pub fn start(cfg: &TransparencyConfig, home: &Path) -> Result<Transparency, String> {
        cfg.check()?;
        let token = match (&cfg.token, &cfg.token_file) {
            (Some(t), _) => Some(t.trim().to_string()),
            (None, Some(f)) => {
                let p = home.join(f);
                let text = std::fs::read_to_string(&p)
                    .map_err(|e| format!("[transparency]: token_file {}: {e}", p.display()))?;
                Some(text.lines().next().unwrap_or("").trim().to_string())
            }
            (None, None) => None,
        };
        let sink = match cfg.channel {
            ChannelKind::Terminal => Sink::Terminal,
            ChannelKind::File => Sink::File(home.join(cfg.path.as_deref().unwrap_or_default())),
            ChannelKind::Webhook => Sink::Webhook {
                url: cfg.url.clone().unwrap_or_default(),
                format: cfg.format,
                token,
                agent: ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .max_redirects(0)
                    .timeout_global(Some(Duration::from_secs(cfg.timeout_secs)))
                    .user_agent(concat!("a2acp/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .into(),
            },
        };
        let (tx, rx) = flume::bounded(cfg.queue);
        let counters = Arc::new(Counters::default());
        let worker = Worker {
            sink,
            counters: counters.clone(),
            interval: Duration::from_millis(60_000 / u64::from(cfg.max_per_minute)),
            burst: cfg.burst,
            txn: 0,
        };
        std::thread::Builder::new()
            .name("transparency".into())
            .spawn(move || worker.run(rx))
            .map_err(|e| format!("cannot start the transparency thread: {e}"))?;
        Ok(Transparency {
            tx,
            counters,
            received: cfg.received,
        })
    }

    /// Whether received messages are summarised too.
    pub fn wants_received(&self) -> bool {
        self.received
    }

    /// Queues `text` without ever waiting: `false` (and counted) when the queue is full.
    pub fn offer(&self, text: String) -> bool {
        match self.tx.try_send(text) {
            Ok(()) => {
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// What it did so far.
    pub fn stats(&self) -> TransparencyStats {
        TransparencyStats {
            queued: self.counters.queued.load(Ordering::Relaxed),
            delivered: self.counters.delivered.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
        }
    }
}

enum Sink {
    Terminal,
    File(PathBuf),
    Webhook {
        url: String,
        format: WebhookFormat,
        token: Option<String>,
        agent: ureq::Agent,
    },
}

struct Worker {
    sink: Sink,
    counters: Arc<Counters>,
    interval: Duration,
    burst: u32,
    txn: u64,
}

impl Worker {
    /// Delivers summaries until the agent is gone: at most `burst` at once, then one per
    /// `interval`.
    fn run(mut self, rx: flume::Receiver<String>) {
        let mut tokens = f64::from(self.burst);
        let mut last = Instant::now();
        let mut reported_drops = 0;
        let mut failing = false;
        while let Ok(mut text) = rx.recv() {
            let now = Instant::now();
            tokens = (tokens
                + now.duration_since(last).as_secs_f64() / self.interval.as_secs_f64())
            .min(f64::from(self.burst));
            last = now;
            if tokens < 1.0 {
                let wait = self.interval.mul_f64(1.0 - tokens);
                std::thread::sleep(wait);
                tokens = 1.0;
                last = Instant::now();
            }
            tokens -= 1.0;
            let dropped = self.counters.dropped.load(Ordering::Relaxed);
            if dropped > reported_drops {
                text.push_str(&format!(
                    " ({} earlier summar(y/ies) dropped: the channel was too slow)",
                    dropped - reported_drops
                ));
                reported_drops = dropped;
            }
            match self.deliver(&text) {
                Ok(()) => {
                    self.counters.delivered.fetch_add(1, Ordering::Relaxed);
                    if failing {
                        tracing::info!("transparency channel delivering again");
                        failing = false;
                    }
                }
                Err(e) => {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    if !failing {
                        tracing::warn!("transparency channel: {e} (summaries are dropped until it works again)");
                        failing = true;
                    }
                }
            }
        }
    }

    fn deliver(&mut self, text: &str) -> Result<(), String> {
        match &self.sink {
            Sink::Terminal => {
                tracing::info!(target: "transparency", "{text}");
                Ok(())
            }
            Sink::File(path) => {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                f.write_all(format!("{text}\n").as_bytes())
                    .map_err(|e| format!("{}: {e}", path.display()))
            }
            Sink::Webhook {
                url,
                format,
                token,
                agent,
            } => {
                let (method_url, body) = match format {
                    WebhookFormat::Slack => (url.clone(), serde_json::json!({ "text": text })),
                    WebhookFormat::Discord => (url.clone(), serde_json::json!({ "content": text })),
                    WebhookFormat::Matrix => {
                        self.txn += 1;
                        let millis = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map(|d| d.as_millis())
                            .unwrap_or_default();
                        (
                            format!("{}/a2acp-{millis}-{}", url.trim_end_matches('/'), self.txn),
                            serde_json::json!({ "msgtype": "m.notice", "body": text }),
                        )
                    }
                };
                let body = serde_json::to_vec(&body).unwrap_or_default();
                let r = match format {
                    WebhookFormat::Matrix => agent
                        .put(&method_url)
                        .header("content-type", "application/json")
                        .header(
                            "authorization",
                            &format!("Bearer {}", token.as_deref().unwrap_or("")),
                        )
                        .send(body.as_slice()),
                    _ => agent
                        .post(&method_url)
                        .header("content-type", "application/json")
                        .send(body.as_slice()),
                };
                let status = r
                    .map_err(|e| format!("POST to the webhook failed: {e}"))?
                    .status();
                if status.is_success() {
                    Ok(())
                } else {
                    Err(format!("the webhook answered HTTP {}", status.as_u16()))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls_must_be_https_off_loopback() {
        assert!(check_url("https://hooks.slack.com/services/x", false).is_ok());
        assert!(check_url("http://127.0.0.1:9000/hook", false).is_ok());
        assert!(check_url("http://[::1]:9000/hook", false).is_ok());
        assert!(check_url("http://localhost/hook", false).is_ok());
        assert!(check_url("http://chat.example.org/hook", false).is_err());
        assert!(check_url("http://chat.example.org/hook", true).is_ok());
        assert!(check_url("http://127.0.0.1.evil.example/hook", false).is_err());
        assert!(check_url("http://user@chat.example.org/", false).is_err());
        assert!(check_url("ftp://x", true).is_err());
    }

    #[test]
    fn a_matrix_channel_needs_a_token() {
        let mut c = TransparencyConfig::new(ChannelKind::Webhook);
        c.url = Some(
            "https://matrix.example.org/_matrix/client/v3/rooms/!r:example.org/send/m.room.message"
                .into(),
        );
        c.format = WebhookFormat::Matrix;
        assert!(c.check().is_err());
        c.token = Some("syt_x".into());
        assert!(c.check().is_ok());
    }
}
