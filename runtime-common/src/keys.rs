//! The agent's identity key on disk: its 32-byte Ed25519 seed as hex, in a file only its
//! owner can read (mode 0600). A key file readable by others is refused, like ssh does.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use a2acp_core::crypto::IdentityKey;

/// What went wrong with a key file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read or written.
    #[error("key file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file exists already (init refuses to overwrite a key).
    #[error("key file {path} already exists; refusing to overwrite an identity")]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// Group or others may read the file.
    #[error("key file {path} is readable by others (mode {mode:o}); run `chmod 600 {path}`")]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// The content is not 64 hex digits.
    #[error("key file {path} is corrupt: expected 64 hex digits")]
    Corrupt {
        /// The file.
        path: PathBuf,
    },
    /// No randomness.
    #[error(transparent)]
    Seed(#[from] crate::clock::SeedError),
}

/// Creates a fresh identity key at `path` (mode 0600); fails if the file exists.
pub fn create(path: &Path) -> Result<IdentityKey, KeyError> {
    let seed = crate::clock::os_seed()?;
    let io = |source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(KeyError::Exists {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(io(e)),
    };
    writeln!(f, "{}", hex(&seed)).map_err(io)?;
    f.sync_all().map_err(io)?;
    Ok(IdentityKey::from_seed(seed))
}

/// Creates the key of a rotation at `path` (`identity.next.key`, mode 0600), durably: the
/// seed goes to a temporary file beside it, which is synced, renamed into place, and the
/// directory synced, so after a crash the file is either absent or whole.
pub fn create_next(path: &Path) -> Result<IdentityKey, KeyError> {
    let seed = crate::clock::os_seed()?;
    let io = |source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = with_suffix(path, ".tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    writeln!(f, "{}", hex(&seed)).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io)?;
    sync_dir(path)?;
    Ok(IdentityKey::from_seed(seed))
}

/// Makes the rotation's key (`next`) the identity key (`key`): one rename, then the
/// directory synced. After it `next` is gone and `key` holds the new seed; a crash
/// before it leaves both files as they were.
pub fn promote(next: &Path, key: &Path) -> Result<(), KeyError> {
    std::fs::rename(next, key).map_err(|source| KeyError::Io {
        path: key.to_path_buf(),
        source,
    })?;
    sync_dir(key)
}

/// Removes the key of a refused rotation (`next`), durably.
pub fn discard(next: &Path) -> Result<(), KeyError> {
    match std::fs::remove_file(next) {
        Ok(()) => sync_dir(next),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(KeyError::Io {
            path: next.to_path_buf(),
            source,
        }),
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// Syncs the directory holding `path`, so a rename or removal in it survives a crash.
fn sync_dir(path: &Path) -> Result<(), KeyError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| KeyError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

/// Loads the identity key at `path`, refusing a file others can read.
pub fn load(path: &Path) -> Result<IdentityKey, KeyError> {
    let io = |source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Permissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    let seed = unhex(text.trim()).ok_or_else(|| KeyError::Corrupt {
        path: path.to_path_buf(),
    })?;
    Ok(IdentityKey::from_seed(seed))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_load_and_refuse_open_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("identity.key");
        let k = create(&p).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load(&p).unwrap().seed(), k.seed());
        assert!(matches!(create(&p), Err(KeyError::Exists { .. })));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(load(&p), Err(KeyError::Permissions { .. })));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&p, "nothex").unwrap();
        assert!(matches!(load(&p), Err(KeyError::Corrupt { .. })));
    }

    #[test]
    fn a_rotation_key_is_written_whole_then_promoted_or_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("identity.key");
        let next = dir.path().join("identity.next.key");
        let old = create(&key).unwrap();
        let new = create_next(&next).unwrap();
        let mode = std::fs::metadata(&next).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!dir.path().join("identity.next.key.tmp").exists());
        assert_eq!(load(&next).unwrap().seed(), new.seed());
        assert_eq!(load(&key).unwrap().seed(), old.seed());
        promote(&next, &key).unwrap();
        assert!(!next.exists());
        assert_eq!(load(&key).unwrap().seed(), new.seed());
        let again = create_next(&next).unwrap();
        assert_ne!(again.seed(), new.seed());
        discard(&next).unwrap();
        assert!(!next.exists());
        discard(&next).unwrap();
        assert_eq!(load(&key).unwrap().seed(), new.seed());
    }
}
