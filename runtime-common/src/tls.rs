//! TLS for the relay link, on any executor: the agent's side ([`ClientTls`]: the web PKI
//! roots bundled by `webpki-roots`, plus the certificates of a private CA given with
//! `--ca FILE` or `relay_ca` in `config.toml`), the relay's side ([`ServerTls`]: a
//! certificate chain and its key from PEM files), and [`MaybeTls`], the stream a link runs
//! over (plain TCP for `ws://`, TLS for `wss://`). rustls with the *ring* provider; no
//! OpenSSL. The bindings (tokio, smol) only hand over their TCP streams as `futures-io`
//! streams: the TLS configuration and handshake are the same code for both.
//!
//! ALPN: the relay offers `http/1.1` (so a browser's `https://…/metrics` negotiates it),
//! the agent offers none. SNI: the agent sends the URL's host name (none for an IP
//! address, as TLS requires); the relay serves its one certificate whatever the name.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use futures_rustls::{TlsAcceptor, TlsConnector, TlsStream};
use futures_util::io::{AsyncRead, AsyncWrite};
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Why a TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{what} {path}: {message}")]
    File {
        /// What the file is for (`--tls-cert`, `--tls-key`, `--ca`…).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the configuration (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn pem_error(what: &'static str, path: &Path, e: rustls_pki_types::pem::Error) -> TlsError {
    use rustls_pki_types::pem::Error as E;
    let message = match e {
        E::NoItemsFound => "no PEM item of the expected kind in the file".to_string(),
        E::Io(e) => e.to_string(),
        other => format!("not a valid PEM file ({other:?})"),
    };
    TlsError::File {
        what,
        path: path.to_path_buf(),
        message,
    }
}

/// Every certificate in the PEM file at `path` (at least one).
pub fn read_certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(what, path, e))?;
    if certs.is_empty() {
        return Err(pem_error(
            what,
            path,
            rustls_pki_types::pem::Error::NoItemsFound,
        ));
    }
    Ok(certs)
}

/// The agent's TLS settings for `wss://` relays: which certificate authorities it trusts.
#[derive(Clone, Debug)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
    ca: Option<PathBuf>,
}

impl ClientTls {
    /// Trusts the web PKI roots (bundled, `webpki-roots`) and, with `ca`, every certificate
    /// in that PEM file as well (a private CA, or a relay's self-signed certificate).
    pub fn new(ca: Option<&Path>) -> Result<ClientTls, TlsError> {
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = ca {
            for cert in read_certificates("CA file", path)? {
                roots.add(cert).map_err(|e| TlsError::File {
                    what: "CA file",
                    path: path.to_path_buf(),
                    message: format!("not a usable CA certificate: {e}"),
                })?;
            }
        }
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(ClientTls {
            config: Arc::new(config),
            ca: ca.map(Path::to_path_buf),
        })
    }

    /// The web PKI roots only, made once per process.
    pub fn web_pki() -> Result<ClientTls, TlsError> {
        static WEB: OnceLock<Result<ClientTls, String>> = OnceLock::new();
        WEB.get_or_init(|| ClientTls::new(None).map_err(|e| e.to_string()))
            .clone()
            .map_err(TlsError::Config)
    }

    /// The private CA file trusted besides the web PKI roots, if any.
    pub fn ca(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// The TLS handshake with the relay `host` over `stream`.
    pub async fn connect<S>(&self, host: &str, stream: S) -> io::Result<MaybeTls<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let tls = TlsConnector::from(self.config.clone())
            .connect(name, stream)
            .await?;
        Ok(MaybeTls::Tls(Box::new(TlsStream::Client(tls))))
    }
}

/// The relay's TLS settings: its certificate chain and private key.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
    config: Arc<ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls")
    }
}

impl ServerTls {
    /// Reads the certificate chain (PEM, leaf first) and the private key (PEM: PKCS#8,
    /// PKCS#1 or SEC1) and checks that they match.
    pub fn from_files(cert: &Path, key: &Path) -> Result<ServerTls, TlsError> {
        let chain = read_certificates("--tls-cert", cert)?;
        let key_der =
            PrivateKeyDer::from_pem_file(key).map_err(|e| pem_error("--tls-key", key, e))?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key_der)
            .map_err(|e| TlsError::File {
                what: "--tls-key",
                path: key.to_path_buf(),
                message: format!("unusable with the certificate of {}: {e}", cert.display()),
            })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        Ok(ServerTls {
            acceptor: TlsAcceptor::from(config.clone()),
            config,
        })
    }

    /// Its rustls configuration (for a listener on another I/O stack: the ACP gateway).
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }

    /// The TLS handshake with a client over `stream`.
    pub async fn accept<S>(&self, stream: S) -> io::Result<MaybeTls<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let tls = self.acceptor.accept(stream).await?;
        Ok(MaybeTls::Tls(Box::new(TlsStream::Server(tls))))
    }
}

/// A connection's stream: plain, or TLS over it.
#[derive(Debug)]
pub enum MaybeTls<S> {
    /// `ws://`, plain HTTP.
    Plain(S),
    /// `wss://`, HTTPS (boxed: the TLS state is large).
    Tls(Box<TlsStream<S>>),
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for MaybeTls<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for MaybeTls<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_close(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_close(cx),
        }
    }
}

/// A blocking HTTP(S) client for calls to a2acp's own services (a relay's metrics, the ACP
/// gateway): an HTTP status is an answer, not an error; no redirect; each call within
/// `timeout`; trusting the web PKI roots, or only the PEM certificates of `ca` when given
/// (`Err`: why `ca` is unusable).
pub(crate) fn https_agent(
    ca: Option<&Path>,
    timeout: std::time::Duration,
) -> Result<ureq::Agent, String> {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(timeout))
        .user_agent(concat!("a2acp/", env!("CARGO_PKG_VERSION")));
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).map_err(|e| e.to_string())?;
        let certs: Vec<_> = ureq::tls::parse_pem(&pem)
            .filter_map(|i| match i {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err("no PEM certificate in it".into());
        }
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)))
                .build(),
        );
    }
    Ok(config.build().into())
}
