//! The session token: generation, the well-known file, primacy, comparison.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;

/// The directory name shared with the original daemon's clients.
pub use crate::approval::ledger::APP_DIR;

/// A fresh token: 32 random bytes as 43 characters of base64url without padding.
pub fn generate_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("cannot read the system random source: {e}"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Constant-time comparison (length-checked: a different length is unequal
/// without looking at the bytes; equal lengths compare every byte).
pub fn tokens_equal(expected: &str, given: &str) -> bool {
    crate::mcp::http::tokens_equal(expected, given)
}

/// Where things live, from the environment (`CAR_HOME`, `XDG_RUNTIME_DIR`, `HOME`).
#[derive(Debug, Clone, PartialEq)]
pub struct Paths {
    /// The state root: `$CAR_HOME` or `~/.car`.
    pub state_root: PathBuf,
    /// The token file.
    pub token_file: PathBuf,
    /// The approvals ledger's key file (`CAR_LEDGER_KEY_FILE`; default
    /// `~/.config/ai.parslee.car/ledger.key`, outside the state root that
    /// holds the ledger; with `CAR_HOME`, `$CAR_HOME/ai.parslee.car/ledger.key`).
    pub ledger_key_file: PathBuf,
}

impl Paths {
    /// Resolves from an environment lookup (injected for tests).
    pub fn resolve(env: impl Fn(&str) -> Option<String>) -> Result<Paths, String> {
        let nonempty = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        // The same default key file as an in-process runtime's ledger.
        let ledger_key_file = crate::approval::ledger::default_key_path(&env)?;
        if let Some(root) = nonempty("CAR_HOME") {
            let root = PathBuf::from(root);
            return Ok(Paths { token_file: root.join(APP_DIR).join("auth-token"), ledger_key_file, state_root: root });
        }
        let home = PathBuf::from(nonempty("HOME").ok_or("neither CAR_HOME nor HOME is set")?);
        let token_dir = match nonempty("XDG_RUNTIME_DIR") {
            Some(d) => PathBuf::from(d).join(APP_DIR),
            None => home.join(".config").join(APP_DIR),
        };
        Ok(Paths { state_root: home.join(".car"), token_file: token_dir.join("auth-token"), ledger_key_file })
    }

    /// The policy directory applied to every session.
    pub fn policy_dir(&self) -> PathBuf {
        self.state_root.join("policies")
    }

    /// The primacy lock file.
    pub fn lock_file(&self) -> PathBuf {
        self.state_root.join("run").join("daemon.lock")
    }
}

/// Writes the token with mode 0600 (the directory 0700), replacing the file.
pub fn write_token_file(path: &Path, token: &str) -> Result<(), String> {
    let dir = path.parent().ok_or_else(|| format!("token path `{}` has no directory", path.display()))?;
    fs::create_dir_all(dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let tmp = path.with_extension("tmp");
    let mut opts = OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        opts.mode(0o600);
        let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    }
    let mut f = opts.open(&tmp).map_err(|e| format!("cannot write `{}`: {e}", tmp.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot chmod `{}`: {e}", tmp.display()))?;
    }
    f.write_all(token.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("cannot write `{}`: {e}", tmp.display()))?;
    fs::rename(&tmp, path).map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

/// A supplied token, trimmed; an empty or whitespace-only one is refused
/// (`from` names where it came from): with auth on it would let the empty
/// token authenticate.
pub fn check_token(value: &str, from: &str) -> Result<String, String> {
    let t = value.trim();
    if t.is_empty() {
        return Err(format!(
            "{from} is empty: an empty token would let anyone authenticate; give a real token, or --no-auth to run without auth"
        ));
    }
    Ok(t.to_string())
}

/// Reads a token handed over in a file and deletes the file (`--auth-token-file`).
pub fn take_token_file(path: &Path) -> Result<String, String> {
    let t = fs::read_to_string(path).map_err(|e| format!("cannot read token file `{}`: {e}", path.display()))?;
    let _ = fs::remove_file(path);
    let t = t.trim().to_string();
    if t.is_empty() {
        return Err(format!("token file `{}` is empty", path.display()));
    }
    Ok(t)
}

/// The advisory primacy lock: held for the daemon's life by the one daemon
/// of a state root that owns the shared token file.
#[derive(Debug)]
pub struct PrimacyLock {
    _file: File,
}

impl PrimacyLock {
    /// Tries to become primary. `Ok(None)` when another live daemon holds the lock.
    pub fn try_acquire(path: &Path) -> Result<Option<PrimacyLock>, String> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("cannot open `{}`: {e}", path.display()))?;
        #[allow(clippy::incompatible_msrv)]
        match file.try_lock() {
            Ok(()) => {
                let _ = file.set_len(0);
                let _ = (&file).write_all(std::process::id().to_string().as_bytes());
                Ok(Some(PrimacyLock { _file: file }))
            }
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(format!("cannot lock `{}`: {e}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_shape() {
        let t = generate_token().unwrap();
        assert_eq!(t.len(), 43);
        assert!(t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{t}");
        assert_ne!(t, generate_token().unwrap());
    }

    #[test]
    fn empty_tokens_are_refused() {
        for bad in ["", " ", "\t\n "] {
            assert!(check_token(bad, "--auth-token").unwrap_err().starts_with("--auth-token is empty"), "{bad:?}");
        }
        assert_eq!(check_token(" tok\n", "x").unwrap(), "tok");
    }

    #[test]
    fn compare() {
        assert!(tokens_equal("abc", "abc"));
        assert!(!tokens_equal("abc", "abd"));
        assert!(!tokens_equal("abc", "abcd"));
        assert!(!tokens_equal("abc", ""));
        assert!(tokens_equal("", ""));
    }

    #[test]
    fn paths() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let p = Paths::resolve(env(&[("HOME", "/h"), ("XDG_RUNTIME_DIR", "/run/u")])).unwrap();
        assert_eq!(p.token_file, PathBuf::from("/run/u/ai.parslee.car/auth-token"));
        assert_eq!(p.policy_dir(), PathBuf::from("/h/.car/policies"));
        assert_eq!(p.ledger_key_file, PathBuf::from("/h/.config/ai.parslee.car/ledger.key"), "not the runtime dir");
        let p = Paths::resolve(env(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "/cfg")])).unwrap();
        assert_eq!(p.ledger_key_file, PathBuf::from("/cfg/ai.parslee.car/ledger.key"));
        let p = Paths::resolve(env(&[("HOME", "/h"), ("CAR_LEDGER_KEY_FILE", "/k/ledger.key")])).unwrap();
        assert_eq!(p.ledger_key_file, PathBuf::from("/k/ledger.key"));
        assert!(Paths::resolve(env(&[("HOME", "/h"), ("CAR_LEDGER_KEY_FILE", "k")])).unwrap_err().contains("absolute"));
        let p = Paths::resolve(env(&[("HOME", "/h")])).unwrap();
        assert_eq!(p.token_file, PathBuf::from("/h/.config/ai.parslee.car/auth-token"));
        let p = Paths::resolve(env(&[("HOME", "/h"), ("XDG_RUNTIME_DIR", "/r"), ("CAR_HOME", "/alt")])).unwrap();
        assert_eq!(p.token_file, PathBuf::from("/alt/ai.parslee.car/auth-token"));
        assert_eq!(p.lock_file(), PathBuf::from("/alt/run/daemon.lock"));
        assert_eq!(p.ledger_key_file, PathBuf::from("/alt/ai.parslee.car/ledger.key"));
        assert!(Paths::resolve(env(&[("CAR_HOME", "rel")])).unwrap_err().contains("absolute"));
    }

    #[test]
    fn token_file_mode_and_primacy() {
        let dir = std::env::temp_dir().join(format!("car-auth-test-{}", std::process::id()));
        let f = dir.join(APP_DIR).join("auth-token");
        write_token_file(&f, "tok").unwrap();
        assert_eq!(fs::read_to_string(&f).unwrap(), "tok");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let lock = dir.join("run/daemon.lock");
        let first = PrimacyLock::try_acquire(&lock).unwrap();
        assert!(first.is_some());
        assert!(PrimacyLock::try_acquire(&lock).unwrap().is_none());
        drop(first);
        assert!(PrimacyLock::try_acquire(&lock).unwrap().is_some());
        let _ = fs::remove_dir_all(&dir);
    }
}
