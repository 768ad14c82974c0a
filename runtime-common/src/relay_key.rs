//! The relay's own signing key on disk, for federation: in the relay's data directory,
//! `relay.key` holds the current Ed25519 seed as hex, mode 0600, exactly like an agent's
//! `identity.key` ([`crate::keys`]), and `relay-keys.json` the public rotation chain
//! ([`KeyChain`]: every key, oldest first, each signed by the one before) that the
//! discovery document publishes.
//!
//! [`load_or_create`] makes both at the relay's first start with federation on;
//! [`rotate`] (`a2acp relay-key rotate`) hands over to a fresh key, the old one signing
//! the new. A rotation survives a crash at any point: the new seed is written to
//! `relay.key.next` first, then the chain (renamed into place), then the seed renamed over
//! `relay.key`; a start that finds the chain one key ahead of `relay.key` with that key in
//! `relay.key.next` finishes the rotation.

use std::path::{Path, PathBuf};

use a2acp_core::crypto::{IdentityKey, PublicKey};
use a2acp_core::discovery::{DiscoveryError, KeyChain};

use crate::keys::{self, KeyError};

/// The seed's file in the data directory.
pub const KEY_FILE: &str = "relay.key";
/// The rotation chain's file in the data directory.
pub const CHAIN_FILE: &str = "relay-keys.json";
/// The next seed while a rotation is under way.
pub const NEXT_KEY_FILE: &str = "relay.key.next";

/// What went wrong with the relay's key files.
#[derive(Debug, thiserror::Error)]
pub enum RelayKeyError {
    /// The seed's file.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The chain's file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The chain's file is not a valid chain for this domain.
    #[error("{path}: {source}")]
    Chain {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: DiscoveryError,
    },
    /// The chain does not end with the seed's key.
    #[error("{chain} does not end with the key of {key}: restore both files from the same backup")]
    Mismatch {
        /// The chain's file.
        chain: PathBuf,
        /// The seed's file.
        key: PathBuf,
    },
}

/// The relay's current key and its chain.
#[derive(Debug, Clone)]
pub struct RelayKeys {
    /// The current signing key.
    pub key: IdentityKey,
    /// Every key, the current one last.
    pub chain: KeyChain,
    /// Whether the key was created now (first start).
    pub created: bool,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> RelayKeyError + '_ {
    move |source| RelayKeyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn write_chain(dir: &Path, chain: &KeyChain) -> Result<(), RelayKeyError> {
    let path = dir.join(CHAIN_FILE);
    let tmp = dir.join(format!("{CHAIN_FILE}.tmp"));
    std::fs::write(&tmp, chain.to_json()).map_err(io(&tmp))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), RelayKeyError> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io(dir))
}

fn read_chain(dir: &Path, domain: &str) -> Result<KeyChain, RelayKeyError> {
    let path = dir.join(CHAIN_FILE);
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    KeyChain::from_json(domain, &bytes).map_err(|source| RelayKeyError::Chain { path, source })
}

/// The relay's keys in `dir`, created (key and chain of one) if there are none yet.
pub fn load_or_create(dir: &Path, domain: &str) -> Result<RelayKeys, RelayKeyError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let key_path = dir.join(KEY_FILE);
    if !key_path.exists() {
        let key = keys::create(&key_path)?;
        let chain = KeyChain::new(key.public());
        write_chain(dir, &chain)?;
        return Ok(RelayKeys {
            key,
            chain,
            created: true,
        });
    }
    let key = keys::load(&key_path)?;
    let chain = read_chain(dir, domain)?;
    if *chain.current() == key.public() {
        return Ok(RelayKeys {
            key,
            chain,
            created: false,
        });
    }
    // A rotation interrupted after the chain was written: finish it.
    let next_path = dir.join(NEXT_KEY_FILE);
    if next_path.exists() {
        let next = keys::load(&next_path)?;
        if *chain.current() == next.public() {
            std::fs::rename(&next_path, &key_path).map_err(io(&key_path))?;
            sync_dir(dir)?;
            return Ok(RelayKeys {
                key: next,
                chain,
                created: false,
            });
        }
    }
    Err(RelayKeyError::Mismatch {
        chain: dir.join(CHAIN_FILE),
        key: key_path,
    })
}

/// Hands the relay's key in `dir` over to a fresh one (the old key signs the new):
/// returns the old and the new public keys. The running relay keeps its key until it is
/// restarted.
pub fn rotate(dir: &Path, domain: &str) -> Result<(PublicKey, PublicKey), RelayKeyError> {
    let RelayKeys {
        key: old,
        mut chain,
        ..
    } = load_or_create(dir, domain)?;
    let next_path = dir.join(NEXT_KEY_FILE);
    // A leftover of a rotation that never wrote its chain: never used, replaced.
    if next_path.exists() {
        std::fs::remove_file(&next_path).map_err(io(&next_path))?;
    }
    let next = keys::create(&next_path)?;
    chain
        .rotate(domain, &old, next.public())
        .map_err(|source| RelayKeyError::Chain {
            path: dir.join(CHAIN_FILE),
            source,
        })?;
    write_chain(dir, &chain)?;
    let key_path = dir.join(KEY_FILE);
    std::fs::rename(&next_path, &key_path).map_err(io(&key_path))?;
    sync_dir(dir)?;
    Ok((old.public(), next.public()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn created_once_rotated_and_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let a = load_or_create(d, "a.example").unwrap();
        assert!(a.created);
        let mode = std::fs::metadata(d.join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let again = load_or_create(d, "a.example").unwrap();
        assert!(!again.created);
        assert_eq!(again.key.public(), a.key.public());

        let (old, new) = rotate(d, "a.example").unwrap();
        assert_eq!(old, a.key.public());
        let b = load_or_create(d, "a.example").unwrap();
        assert_eq!(b.key.public(), new);
        assert_eq!(b.chain.keys().len(), 2);
        assert!(!d.join(NEXT_KEY_FILE).exists());

        // A crash after the chain was written and before the seed's rename.
        let cur = keys::load(&d.join(KEY_FILE)).unwrap();
        let next = keys::create(&d.join(NEXT_KEY_FILE)).unwrap();
        let mut chain = b.chain.clone();
        chain.rotate("a.example", &cur, next.public()).unwrap();
        write_chain(d, &chain).unwrap();
        let c = load_or_create(d, "a.example").unwrap();
        assert_eq!(c.key.public(), next.public());
        assert!(!d.join(NEXT_KEY_FILE).exists());

        // The chain of another key: refused, never overwritten.
        std::fs::remove_file(d.join(KEY_FILE)).unwrap();
        keys::create(&d.join(KEY_FILE)).unwrap();
        assert!(matches!(
            load_or_create(d, "a.example"),
            Err(RelayKeyError::Mismatch { .. })
        ));
        // Another domain's chain.
        assert!(matches!(
            load_or_create(d, "b.example"),
            Err(RelayKeyError::Chain { .. })
        ));
    }
}
