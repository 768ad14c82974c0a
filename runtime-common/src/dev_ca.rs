//! `a2acp dev-ca`: a private certificate authority and one relay certificate signed by it,
//! to run TLS relays (federation needs TLS) on one machine or a private network without a
//! public certificate. Not for the public Internet: there, a relay uses its domain's
//! certificate from a public CA.
//!
//! Writes, in `--out`: `ca.pem` (the CA's certificate: give it to agents and relays with
//! `--ca`), `relay.pem` and `relay.key` (the relay's certificate, valid for each `--host`,
//! and its key: `relay --tls-cert/--tls-key`), and `ca.key` (the CA's key, to sign more).
//! Keys are written mode 0600. Files already there are never overwritten.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// What `dev-ca` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevCa {
    /// The CA's certificate.
    pub ca: PathBuf,
    /// The relay's certificate.
    pub cert: PathBuf,
    /// The relay's key.
    pub key: PathBuf,
    /// The CA's key.
    pub ca_key: PathBuf,
}

/// Why the files could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DevCaError {
    /// A file is already there.
    #[error("{0} already exists: remove it or choose another --out")]
    Exists(String),
    /// No host was given.
    #[error("at least one --host is needed")]
    NoHost,
    /// Generating or signing failed.
    #[error("cannot make the certificates: {0}")]
    Make(String),
    /// Writing failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Makes the CA and a relay certificate for `hosts` (DNS names or IP addresses) in `out`.
pub fn make(out: &Path, hosts: &[String]) -> Result<DevCa, DevCaError> {
    if hosts.is_empty() {
        return Err(DevCaError::NoHost);
    }
    let files = DevCa {
        ca: out.join("ca.pem"),
        cert: out.join("relay.pem"),
        key: out.join("relay.key"),
        ca_key: out.join("ca.key"),
    };
    for f in [&files.ca, &files.cert, &files.key, &files.ca_key] {
        if f.exists() {
            return Err(DevCaError::Exists(f.display().to_string()));
        }
    }
    let make = |e: rcgen::Error| DevCaError::Make(e.to_string());
    let ca_key = KeyPair::generate().map_err(make)?;
    let ca_key_pem = ca_key.serialize_pem();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(make)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "a2acp private CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(make)?;
    let leaf_key = KeyPair::generate().map_err(make)?;
    let mut leaf = CertificateParams::new(hosts.to_vec()).map_err(make)?;
    leaf.distinguished_name
        .push(DnType::CommonName, "a2acp relay");
    let leaf_cert = leaf.signed_by(&leaf_key, &ca).map_err(make)?;
    std::fs::create_dir_all(out).map_err(|source| DevCaError::Io {
        path: out.display().to_string(),
        source,
    })?;
    write(&files.ca, ca.pem().as_bytes(), false)?;
    write(&files.cert, leaf_cert.pem().as_bytes(), false)?;
    write(&files.key, leaf_key.serialize_pem().as_bytes(), true)?;
    write(&files.ca_key, ca_key_pem.as_bytes(), true)?;
    Ok(files)
}

/// Writes a new file (never replacing one), `secret` ones readable by their owner only.
fn write(path: &Path, bytes: &[u8], secret: bool) -> Result<(), DevCaError> {
    use std::io::Write;
    let io = |source| DevCaError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut f = o.open(path).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makes_a_ca_and_a_relay_certificate_and_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("pki");
        let hosts = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let f = make(&out, &hosts).unwrap();
        // The relay's TLS loads the pair, a client trusts the CA.
        crate::tls::ServerTls::from_files(&f.cert, &f.key).expect("server TLS");
        crate::tls::ClientTls::new(Some(&f.ca)).expect("client TLS");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for k in [&f.key, &f.ca_key] {
                let mode = std::fs::metadata(k).unwrap().permissions().mode();
                assert_eq!(mode & 0o077, 0, "{}", k.display());
            }
        }
        let before = std::fs::read(&f.ca).unwrap();
        let e = make(&out, &hosts).unwrap_err();
        assert!(matches!(e, DevCaError::Exists(_)), "{e}");
        assert_eq!(std::fs::read(&f.ca).unwrap(), before, "nothing replaced");
        assert!(matches!(
            make(&dir.path().join("x"), &[]),
            Err(DevCaError::NoHost)
        ));
    }
}
