//! A private PKI for the TLS tests and the TLS benchmark: a CA and a leaf certificate for
//! `localhost` and 127.0.0.1 signed by it (made as `a2acp dev-ca` makes them), and an agent
//! home that trusts the CA.

use std::path::{Path, PathBuf};

use a2acp_runtime::home::Home;
use a2acp_tests::edit_config;

/// The PEM files of a private PKI: the CA's certificate, and a leaf certificate for
/// `localhost` and 127.0.0.1 signed by it with its key.
pub struct Pki {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA's own key (to test a key that does not match the certificate; only
    /// tls.rs reads it).
    #[allow(dead_code)]
    pub ca_key: PathBuf,
}

pub fn pki(dir: &Path) -> Pki {
    let hosts = ["localhost".to_string(), "127.0.0.1".to_string()];
    let f = a2acp_runtime::dev_ca::make(dir, &hosts).expect("a private CA");
    Pki {
        ca: f.ca,
        cert: f.cert,
        key: f.key,
        ca_key: f.ca_key,
    }
}

/// Copies the CA into the home and names it in config.toml as `relay_ca`, relative to the
/// home (as a user would write it). (Tests whose homes come from
/// `a2acp_tests::federation::dinner_across` are trusted there already.)
#[allow(dead_code)]
pub fn trust(home: &Home, ca: &Path) {
    std::fs::copy(ca, home.dir().join("relay-ca.pem")).unwrap();
    edit_config(home, |f| f.relay_ca = Some("relay-ca.pem".into()));
}
