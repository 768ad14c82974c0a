//! Recovery of a lost identity key on a new device (`a2acp agent recover`; SPEC-NOTES
//! "Recovery"), and the recovery key a person is given at `agent init` and by `agent
//! recovery-key`.
//!
//! The recovery key's secret is made here from the OS's randomness, shown once as 24
//! words ([`words`]) and dropped: only its public part goes to the agent
//! ([`Command::BindRecovery`]), which keeps it to bind it again after a rotation.
//!
//! A recovery runs in three steps, each leaving the home in a state the next run of the
//! same command finishes from:
//!
//! 1. [`prepare`]: the words are checked, and the new identity key is written to
//!    `identity.recover.key` (mode 0600, synced, renamed into place) **before** it is
//!    used — or, when that file is there from an interrupted run, read back.
//! 2. [`run`]: the exchange with the relay ([`RecoverClient`]): `recover_start`, the
//!    statement, `recovered` or `recover_refused`. A relay whose current key is the staged
//!    key already installed an earlier attempt.
//! 3. [`Staged::finish`]: `config.toml` written (a new home), `identity.recover.key`
//!    renamed over `identity.key`, the directory synced, and the recovery key's public
//!    part given to the agent so that its first connection binds it again with the new
//!    key. A refusal removes the staged key (and the directory, if this command made it):
//!    nothing is left. An exchange cut after the statement was sent keeps the staged key:
//!    the relay may have installed it, and running the command again finds out.

pub mod words;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use a2acp_core::agent::{Command, Input};
use a2acp_core::crypto::IdentityKey;
use a2acp_core::encoding::b64_encode;
use a2acp_core::link::RelayFrame;
use a2acp_core::recover_client::{RecoverClient, RecoverStep};
use a2acp_core::recovery::recovery_key_from_seed;
use a2acp_core::Address;
use async_tungstenite::tungstenite::Message;
use async_tungstenite::WebSocketStream;
use futures_util::{AsyncRead, AsyncWrite, StreamExt};

use crate::agent_host::AgentHost;
use crate::config::{AgentFile, RelayUrls};
use crate::home::Home;
use crate::store::Durability;
use crate::tls::ClientTls;
use crate::ws::ConnectError;

pub use words::{parse_words, to_words, WordsError};

/// How long one relay has to answer the whole exchange.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(15);

/// A recovery key just made: its secret as words, to show once, and its public part.
pub struct NewRecoveryKey {
    /// The 24 words (the secret: shown once, never written).
    pub words: String,
    /// The public part, given to the agent.
    pub public: [u8; 32],
}

impl std::fmt::Debug for NewRecoveryKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewRecoveryKey")
            .field("public", &b64_encode(&self.public))
            .finish_non_exhaustive()
    }
}

/// Makes a recovery key from the OS's randomness.
pub fn new_recovery_key() -> Result<NewRecoveryKey, crate::clock::SeedError> {
    let seed = crate::clock::os_seed()?;
    Ok(NewRecoveryKey {
        words: to_words(&seed),
        public: recovery_key_from_seed(seed).public().to_bytes(),
    })
}

/// The words for the terminal, shown once: numbered in four columns, what they are for,
/// and (`qr`) the QR code of the words.
pub fn render_words(words: &str, address: &Address, qr: bool) -> String {
    let list: Vec<&str> = words.split(' ').collect();
    let mut out = String::from(
        "Your recovery words — shown this once. Write them down, in order, and keep them away from this device:\n\n",
    );
    let rows = list.len().div_ceil(4);
    for r in 0..rows {
        out.push_str("   ");
        for c in 0..4 {
            if let Some(w) = list.get(c * rows + r) {
                out.push_str(&format!("{:>2}. {w:<10}", c * rows + r + 1));
            }
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "\nIf this device is lost, they move {address} to a new one:\n  a2acp agent recover --address {address} --recovery \"word word …\" --relay URL --home DIR\nThey are not stored anywhere; whoever holds them can take your address.\n"
    ));
    if qr {
        if let Some(q) = words::qr(words) {
            out.push_str("\nThe same words as a QR code (for a password manager):\n");
            out.push_str(&q);
            out.push('\n');
        }
    }
    out
}

/// Gives the recovery key `public` to the agent of `host`: recorded at once, bound at the
/// relay when the agent is (or next is) connected.
pub fn bind(host: &mut AgentHost, public: [u8; 32]) -> Result<(), crate::agent_host::HostError> {
    host.handle(
        crate::clock::now(),
        Input::Command(Command::BindRecovery {
            recovery_key: public,
        }),
    )
    .map(|_| ())
}

/// Why a recovery did not happen (or did not finish).
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// The words are not a recovery phrase.
    #[error("{0}; nothing changed")]
    Words(#[from] WordsError),
    /// The address, the relay or the CA given are not usable.
    #[error("{0}")]
    Usage(String),
    /// The home cannot take the recovered agent.
    #[error("{0}")]
    Home(String),
    /// The relay refused.
    #[error("{}", refusal_text(.reason, .message, *.retry_after))]
    Refused {
        /// Machine-readable reason (`wrong_recovery_key`, `no_binding`, `rate_limited`,
        /// `cluster`, …).
        reason: String,
        /// The relay's explanation.
        message: String,
        /// Seconds to wait, with `rate_limited`.
        retry_after: Option<u64>,
    },
    /// No relay could be reached before the statement was sent: nothing changed.
    #[error("the relay cannot be reached ({0}); nothing changed: try again when it is up")]
    Unreachable(String),
    /// The exchange was cut after the statement was sent: the relay may have installed
    /// it. The staged key is kept; running the command again finds out.
    #[error("the relay did not answer after the recovery was sent ({0}); run the same command again: it finishes the recovery if the relay installed it, or makes it again")]
    Unanswered(String),
    /// The relay moved the address but the home's files could not be written.
    #[error(
        "the relay moved the address to the new key, but {0}; run the same command again to finish"
    )]
    Files(String),
}

impl RecoverError {
    /// A short machine-readable name (for `--json`).
    pub fn reason(&self) -> &str {
        match self {
            RecoverError::Words(_) => "wrong_words",
            RecoverError::Usage(_) => "usage",
            RecoverError::Home(_) => "home",
            RecoverError::Refused { reason, .. } => reason,
            RecoverError::Unreachable(_) => "unreachable",
            RecoverError::Unanswered(_) => "unanswered",
            RecoverError::Files(_) => "files",
        }
    }

    /// With `rate_limited`: seconds to wait.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            RecoverError::Refused { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

fn refusal_text(reason: &str, message: &str, retry_after: Option<u64>) -> String {
    let advice = match reason {
        "wrong_recovery_key" => {
            "these words are not the recovery key of this address: check them against what you wrote down (or the address)".to_string()
        }
        "no_binding" => "the relay knows no recovery key for this address: check the address and --relay (an address never registered, or whose agent never bound a recovery key, cannot be recovered)".to_string(),
        "rate_limited" => match retry_after {
            Some(s) => format!("too many recovery attempts for this address or from this network: try again in {}", wait_text(s)),
            None => "too many recovery attempts: try again later".to_string(),
        },
        "cluster" => "this relay runs as a cluster, which does not recover keys yet: ask its operator".to_string(),
        "not_current_key" => "the address's key changed while this ran: run the same command again".to_string(),
        "not_lost" => "the key this home holds is still the address's key: nothing to recover (run the agent)".to_string(),
        _ => "the relay refused the recovery".to_string(),
    };
    format!("{advice} ({reason}: {message}); nothing changed")
}

/// `N s`, or `M min` / `H h M min` for longer waits.
fn wait_text(s: u64) -> String {
    match s {
        0..=119 => format!("{s} s"),
        120..=3599 => format!("{} min", s.div_ceil(60)),
        _ => format!("{} h {} min", s / 3600, (s % 3600).div_ceil(60)),
    }
}

/// A recovery ready to be sent: the new key staged in the home.
pub struct Staged {
    home: Home,
    address: Address,
    relay: RelayUrls,
    ca: Option<PathBuf>,
    tls: Option<ClientTls>,
    new: IdentityKey,
    recovery: IdentityKey,
    /// The identity key the home holds already (a restored backup's).
    held: Option<[u8; 32]>,
    /// The staged key was there from an interrupted run.
    pub resumed: bool,
    made_dir: bool,
    existing: bool,
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged")
            .field("home", &self.home)
            .field("address", &self.address)
            .field("resumed", &self.resumed)
            .finish_non_exhaustive()
    }
}

/// What a finished recovery made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The address.
    pub address: Address,
    /// The new identity key (base64url).
    pub key: String,
    /// This agent's half of every safety number with it.
    pub fingerprint: String,
    /// The home.
    pub home: PathBuf,
    /// The relay had installed the recovery before this run (an interrupted earlier run).
    pub already: bool,
}

impl Recovered {
    /// The machine-readable form (`--json`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "state": "recovered",
            "address": self.address.to_string(),
            "key": self.key,
            "fingerprint": self.fingerprint,
            "home": self.home.display().to_string(),
            "already": self.already,
        })
    }
}

/// Step 1: checks the words, the address and the home, and stages the new key. `relay`
/// and `ca` are needed for a new home; a home that holds an agent (a restored backup)
/// keeps its own. Fails with nothing written.
pub fn prepare(
    home: &Home,
    address: &str,
    typed_words: &str,
    relay: Option<RelayUrls>,
    ca: Option<&Path>,
) -> Result<Staged, RecoverError> {
    let addr = Address::parse(address)
        .map_err(|e| RecoverError::Usage(format!("--address `{address}`: {e}")))?;
    let seed = parse_words(typed_words)?;
    let recovery = recovery_key_from_seed(seed);
    let existing = home.config().exists();
    let (relay, ca) = if existing {
        let file =
            AgentFile::load(&home.config()).map_err(|e| RecoverError::Home(e.to_string()))?;
        if file.address != addr.to_string() {
            return Err(RecoverError::Home(format!(
                "{} holds the agent {}, not {addr}; use another --home",
                home.dir().display(),
                file.address
            )));
        }
        let ca = file.relay_ca.map(|c| home.dir().join(c));
        (file.relay, ca)
    } else {
        if home.key().exists() {
            return Err(RecoverError::Home(format!(
                "{} holds an identity key but no config.toml; use another --home",
                home.dir().display()
            )));
        }
        let relay = relay.ok_or_else(|| {
            RecoverError::Usage(
                "--relay is needed to recover into a new home (the relay your address is on)"
                    .into(),
            )
        })?;
        let ca = match ca {
            Some(p) => Some(
                std::fs::canonicalize(p)
                    .map_err(|e| RecoverError::Usage(format!("--ca {}: {e}", p.display())))?,
            ),
            None => None,
        };
        (relay, ca)
    };
    let tls = match &ca {
        Some(p) => Some(ClientTls::new(Some(p)).map_err(|e| RecoverError::Usage(e.to_string()))?),
        None => None,
    };
    if existing && home.db().exists() {
        // The agent must not run: its database is opened exclusively.
        crate::store::Store::open(&home.db(), Durability::Full).map_err(|e| {
            RecoverError::Home(format!(
                "the agent of {} cannot be opened ({e}); stop it first",
                home.dir().display()
            ))
        })?;
    }
    let made_dir = !home.dir().exists();
    std::fs::create_dir_all(home.dir())
        .map_err(|e| RecoverError::Home(format!("{}: {e}", home.dir().display())))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(home.dir(), std::fs::Permissions::from_mode(0o700));
    }
    let path = home.recover_key();
    let resumed = path.exists();
    let new = if resumed {
        crate::keys::load(&path)
    } else {
        crate::keys::create_next(&path)
    };
    let new = match new {
        Ok(k) => k,
        Err(e) => {
            if made_dir {
                let _ = std::fs::remove_dir(home.dir());
            }
            return Err(RecoverError::Home(format!(
                "the new key could not be kept: {e}"
            )));
        }
    };
    let held = match existing && home.key().exists() {
        true => Some(
            crate::keys::load(&home.key())
                .map_err(|e| RecoverError::Home(e.to_string()))?
                .public()
                .to_bytes(),
        ),
        false => None,
    };
    Ok(Staged {
        held,
        home: home.clone(),
        address: addr,
        relay,
        ca,
        tls,
        new,
        recovery,
        resumed,
        made_dir,
        existing,
    })
}

impl Staged {
    /// The exchange with the relay.
    pub fn client(&self) -> RecoverClient {
        let c = RecoverClient::new(
            self.address.clone(),
            self.new.clone(),
            self.recovery.clone(),
        );
        match self.held {
            Some(k) => c.holding(k),
            None => c,
        }
    }

    /// The relay's URLs (its doors), tried in turn.
    pub fn urls(&self) -> &[String] {
        self.relay.urls()
    }

    /// Whom to trust for a `wss://` relay besides the web PKI roots.
    pub fn tls(&self) -> Option<&ClientTls> {
        self.tls.as_ref()
    }

    /// Removes what [`prepare`] wrote (the relay refused, or was never reached).
    pub fn abandon(self) {
        let _ = crate::keys::discard(&self.home.recover_key());
        if self.made_dir {
            let _ = std::fs::remove_dir(self.home.dir());
        }
    }

    /// Step 3, once the relay installed the recovery: the config (a new home), the key
    /// promoted, the recovery key given to the agent to bind again.
    pub fn finish(self, already: bool) -> Result<Recovered, RecoverError> {
        let files = |e: String| RecoverError::Files(e);
        if !self.existing && !self.home.config().exists() {
            let mut file = AgentFile::new(&self.address, &self.relay, toml::Table::new());
            file.relay_ca = self.ca.as_ref().map(|p| p.display().to_string());
            file.write_new(&self.home.config())
                .map_err(|e| files(e.to_string()))?;
        }
        // A rotation staged on the lost key (a restored backup's) is void.
        crate::keys::discard(&self.home.next_key()).map_err(|e| files(e.to_string()))?;
        crate::keys::promote(&self.home.recover_key(), &self.home.key())
            .map_err(|e| files(e.to_string()))?;
        let mut opened =
            AgentHost::open_home(&self.home, Durability::Full).map_err(|e| files(e.to_string()))?;
        bind(&mut opened.host, self.recovery.public().to_bytes())
            .map_err(|e| files(e.to_string()))?;
        drop(opened);
        let key = self.new.public().to_bytes();
        Ok(Recovered {
            fingerprint: crate::safety::half(&key, &self.address),
            key: b64_encode(&key),
            address: self.address,
            home: self.home.dir().to_path_buf(),
            already,
        })
    }
}

/// How one exchange ended.
#[derive(Debug)]
enum Ended {
    Recovered {
        already: bool,
    },
    Refused(RecoverError),
    /// Cut (closed, timed out, unreadable): the reason.
    Cut(String),
}

/// Step 2 over one connection: the exchange until the relay's answer or `deadline`.
async fn exchange<S, D>(
    mut ws: WebSocketStream<S>,
    client: &mut RecoverClient,
    deadline: D,
) -> Ended
where
    S: AsyncRead + AsyncWrite + Unpin,
    D: Future<Output = ()>,
{
    let talk = async {
        let first = String::from_utf8(client.start().to_bytes()).unwrap_or_default();
        if let Err(e) = ws.send(Message::Text(first.into())).await {
            return Ended::Cut(e.to_string());
        }
        loop {
            let bytes = match ws.next().await {
                Some(Ok(Message::Text(t))) => t.as_bytes().to_vec(),
                Some(Ok(Message::Binary(b))) => b.to_vec(),
                Some(Ok(Message::Close(_))) | None => {
                    return Ended::Cut("the relay closed the connection".into())
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Ended::Cut(e.to_string()),
            };
            let Ok(frame) = RelayFrame::from_bytes(&bytes) else {
                return Ended::Cut("the relay sent a frame this version cannot read".into());
            };
            match client.on_frame(frame) {
                RecoverStep::Wait => {}
                RecoverStep::Send(f) => {
                    let text = String::from_utf8(f.to_bytes()).unwrap_or_default();
                    if let Err(e) = ws.send(Message::Text(text.into())).await {
                        return Ended::Cut(e.to_string());
                    }
                }
                RecoverStep::Recovered { already } => {
                    let _ = ws.close(None).await;
                    return Ended::Recovered { already };
                }
                RecoverStep::Refused {
                    reason,
                    message,
                    retry_after,
                } => {
                    let _ = ws.close(None).await;
                    return Ended::Refused(RecoverError::Refused {
                        reason,
                        message,
                        retry_after,
                    });
                }
            }
        }
    };
    let late = async {
        deadline.await;
        Ended::Cut("no answer in time".into())
    };
    crate::race::race(talk, late).await
}

/// Steps 2 and 3: tries each of the relay's doors with `connect` (the binding's client
/// connection) and `timer` (its sleep), then finishes or abandons as the relay answered.
pub async fn run<S, C, CF, T, TF>(
    staged: Staged,
    connect: C,
    timer: T,
) -> Result<Recovered, RecoverError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: Fn(String, Option<ClientTls>) -> CF,
    CF: Future<Output = Result<WebSocketStream<S>, ConnectError>>,
    T: Fn(Duration) -> TF,
    TF: Future<Output = ()>,
{
    let mut errors = Vec::new();
    let mut client = staged.client();
    for url in staged.urls().to_vec() {
        let ws = match connect(url.clone(), staged.tls().cloned()).await {
            Ok(ws) => ws,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        match exchange(ws, &mut client, timer(EXCHANGE_TIMEOUT)).await {
            Ended::Recovered { already } => return staged.finish(already),
            Ended::Refused(e) => {
                staged.abandon();
                return Err(e);
            }
            Ended::Cut(why) if client.statement_sent() => {
                return Err(RecoverError::Unanswered(format!("{url}: {why}")));
            }
            Ended::Cut(why) => errors.push(format!("{url}: {why}")),
        }
    }
    staged.abandon();
    Err(RecoverError::Unreachable(errors.join("; ")))
}
