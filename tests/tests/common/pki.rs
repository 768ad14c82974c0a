//! A private PKI for the TLS tests and the TLS benchmark: a CA and a leaf certificate for
//! `localhost` and 127.0.0.1 signed by it (rcgen), and an agent home that trusts the CA.

use std::path::{Path, PathBuf};

use a2acp_runtime::home::Home;
use a2acp_tests::edit_config;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// The PEM files of a private PKI: the CA's certificate, and a leaf certificate for
/// `localhost` and 127.0.0.1 signed by it with its key.
pub struct Pki {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA's own key (to test a key that does not match the certificate).
    pub ca_key: PathBuf,
}

pub fn pki(dir: &Path) -> Pki {
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let ca_key_pem = ca_key.serialize_pem();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "a2acp test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "a2acp test relay");
    let leaf_cert = leaf.signed_by(&leaf_key, &ca).unwrap();
    let p = Pki {
        ca: dir.join("ca.pem"),
        cert: dir.join("relay.pem"),
        key: dir.join("relay.key"),
        ca_key: dir.join("ca.key"),
    };
    std::fs::write(&p.ca, ca.pem()).unwrap();
    std::fs::write(&p.cert, leaf_cert.pem()).unwrap();
    std::fs::write(&p.key, leaf_key.serialize_pem()).unwrap();
    std::fs::write(&p.ca_key, ca_key_pem).unwrap();
    p
}

/// Copies the CA into the home and names it in config.toml as `relay_ca`, relative to the
/// home (as a user would write it).
pub fn trust(home: &Home, ca: &Path) {
    std::fs::copy(ca, home.dir().join("relay-ca.pem")).unwrap();
    edit_config(home, |f| f.relay_ca = Some("relay-ca.pem".into()));
}
