//! The tier approvals ledger: reviewers' verdicts on operations, by
//! fingerprint, that the tier layer reads (`permission.approve` on the
//! daemon, `permission_record_decision` in the bindings).
//!
//! An action's operation is identified by its fingerprint,
//! `type|tool|canonical parameters` (`-` when there is no tool; the
//! parameters in their RFC 8785 canonical form, [`crate::canonical`]).
//!
//! The embedded ledger is an append-only JSONL file of [`ApprovalRecord`]s
//! ([`TIER_LEDGER_FILE`] under a daemon's `CAR_HOME`).
//! With a [`LedgerKey`] ([`JsonlLedger::with_key`]) every line carries an
//! HMAC-SHA256 (`mac`) over the record's canonical form, and a line without
//! a valid one is no record at all: it never approves (nor rejects), and the
//! read reports it. A ledger opened without a key file or [`LEDGER_KEY_ENV`]
//! ([`JsonlLedger::open`]) is keyed by the default key file
//! ([`default_key_path`], created on first use, the daemon's), so an
//! in-process runtime authenticates its records too. Only an explicit opt-in
//! ([`JsonlLedger::open_with`] with `accept_unsigned`: the admission
//! document's `ledger_unauthenticated`, or [`LEDGER_UNAUTHENTICATED_ENV`])
//! keeps a ledger unkeyed ([`JsonlLedger::new`]): then any well-formed line
//! counts, so whoever can write the file can approve.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::Error;
use crate::ir::Action;
use crate::policy::PermissionTier;

/// The file name of a daemon's tier approvals ledger under `CAR_HOME`.
pub const TIER_LEDGER_FILE: &str = "tier-approvals.jsonl";

/// Earlier daemons kept the tier ledger in `CAR_HOME/approvals.jsonl`, the
/// name the approvals store uses. When `dir` has that file, every line of it
/// is a ledger record (it has `fingerprint` and `required_tier`) and there is
/// no [`TIER_LEDGER_FILE`] yet, it is renamed to [`TIER_LEDGER_FILE`] (its
/// MACs stay valid: they cover the record, not the file). Returns the new
/// path when it moved one; a file of any other shape is left alone.
pub fn migrate_legacy_ledger(dir: &Path) -> crate::Result<Option<PathBuf>> {
    let old = dir.join(crate::approval::store::APPROVALS_FILE);
    let new = dir.join(TIER_LEDGER_FILE);
    if new.exists() || !old.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&old)
        .map_err(|e| Error::runtime("ledger_io_error", format!("cannot read {}: {e}", old.display())))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty()).peekable();
    if lines.peek().is_none() {
        return Ok(None);
    }
    let ledger_shaped = lines.all(|l| {
        serde_json::from_str::<Value>(l)
            .is_ok_and(|v| v.get("fingerprint").is_some() && v.get("required_tier").is_some())
    });
    if !ledger_shaped {
        return Ok(None);
    }
    std::fs::rename(&old, &new).map_err(|e| {
        Error::runtime("ledger_io_error", format!("cannot move {} to {}: {e}", old.display(), new.display()))
    })?;
    eprintln!("car-server: moved the tier approvals ledger {} to {}", old.display(), new.display());
    Ok(Some(new))
}

/// A reviewer's verdict on one fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalVerdict {
    /// The operation may run.
    Approved,
    /// The operation may not run.
    Rejected,
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// The operation's fingerprint.
    pub fingerprint: String,
    /// The tier the operation required when it was reviewed.
    pub required_tier: PermissionTier,
    /// The verdict.
    pub decision: ApprovalVerdict,
    /// Who decided.
    pub reviewer: String,
    /// Why.
    pub reason: String,
    /// Supporting evidence, as given.
    #[serde(default)]
    pub evidence: Option<Value>,
    /// When (RFC 3339).
    pub decided_at: chrono::DateTime<chrono::Utc>,
}

impl ApprovalRecord {
    /// A verdict on the operation `fingerprint` by `reviewer`, decided now.
    /// An empty fingerprint is refused.
    pub fn new(
        fingerprint: &str,
        required_tier: PermissionTier,
        approve: bool,
        reviewer: &str,
        reason: &str,
        evidence: Option<Value>,
    ) -> crate::Result<ApprovalRecord> {
        if fingerprint.is_empty() {
            return Err(Error::invalid_argument("fingerprint", "must not be empty"));
        }
        Ok(ApprovalRecord {
            fingerprint: fingerprint.to_string(),
            required_tier,
            decision: if approve { ApprovalVerdict::Approved } else { ApprovalVerdict::Rejected },
            reviewer: reviewer.to_string(),
            reason: reason.to_string(),
            evidence,
            decided_at: chrono::Utc::now(),
        })
    }
}

/// The environment variable holding a ledger key (its text, at least
/// [`LedgerKey::MIN_LEN`] bytes) for a ledger configured without a key file.
pub const LEDGER_KEY_ENV: &str = "CAR_LEDGER_KEY";

/// The environment variable (`1` or `true`) that keeps a ledger configured
/// without a key file or [`LEDGER_KEY_ENV`] unauthenticated, trusting every
/// well-formed line (what the admission document's `ledger_unauthenticated`
/// does for one runtime). For ledgers written before records were signed;
/// whoever can write such a file can approve.
pub const LEDGER_UNAUTHENTICATED_ENV: &str = "CAR_LEDGER_UNAUTHENTICATED";

/// The directory under `CAR_HOME` or the configuration directory that holds
/// the daemon's token and the default ledger key.
pub const APP_DIR: &str = "ai.parslee.car";

/// True when [`LEDGER_UNAUTHENTICATED_ENV`] is `1` or `true`.
pub fn unauthenticated_from_env() -> bool {
    std::env::var(LEDGER_UNAUTHENTICATED_ENV).is_ok_and(|v| v.trim() == "1" || v.trim().eq_ignore_ascii_case("true"))
}

/// The default ledger key file, read from an environment lookup:
/// `CAR_LEDGER_KEY_FILE` (absolute); else `$CAR_HOME/ai.parslee.car/ledger.key`;
/// else `$XDG_CONFIG_HOME/ai.parslee.car/ledger.key`; else
/// `~/.config/ai.parslee.car/ledger.key`. Outside the state root that holds
/// the ledger (`~/.car`), and not in the runtime directory: the key must
/// outlive a reboot, or every approval recorded before it stops counting.
pub fn default_key_path(env: impl Fn(&str) -> Option<String>) -> Result<PathBuf, String> {
    let nonempty = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    if let Some(p) = nonempty("CAR_LEDGER_KEY_FILE").map(PathBuf::from) {
        if !p.is_absolute() {
            return Err(format!("CAR_LEDGER_KEY_FILE must be an absolute path, got `{}`", p.display()));
        }
        return Ok(p);
    }
    if let Some(root) = nonempty("CAR_HOME").map(PathBuf::from) {
        if !root.is_absolute() {
            return Err(format!("CAR_HOME must be an absolute path, got `{}`", root.display()));
        }
        return Ok(root.join(APP_DIR).join("ledger.key"));
    }
    let dir = match nonempty("XDG_CONFIG_HOME") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(nonempty("HOME").ok_or("neither CAR_HOME nor HOME is set")?).join(".config"),
    };
    Ok(dir.join(APP_DIR).join("ledger.key"))
}

/// The secret that authenticates the lines of a [`JsonlLedger`]
/// (HMAC-SHA256). Keep it outside every directory an agent can write or
/// read (the ledger's own directory included): whoever holds it can forge
/// approvals. Its `Debug` form never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct LedgerKey(Arc<[u8]>);

impl std::fmt::Debug for LedgerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LedgerKey(..)")
    }
}

impl LedgerKey {
    /// The shortest key accepted, in bytes.
    pub const MIN_LEN: usize = 32;

    /// A key from its bytes; shorter than [`Self::MIN_LEN`] is an error.
    pub fn new(bytes: impl Into<Vec<u8>>) -> crate::Result<Self> {
        let bytes = bytes.into();
        if bytes.len() < Self::MIN_LEN {
            return Err(Error::invalid_argument(
                "ledger_key",
                format!("a ledger key must be at least {} bytes, got {}", Self::MIN_LEN, bytes.len()),
            ));
        }
        Ok(LedgerKey(bytes.into()))
    }

    /// A fresh random key (256 bits from the operating system's generator,
    /// as 64 hex digits).
    pub fn generate() -> Self {
        let mut text = String::with_capacity(64);
        for _ in 0..2 {
            // A v4 UUID is 122 bits of the OS's CSPRNG; two are 244 bits.
            text.push_str(&uuid::Uuid::new_v4().simple().to_string());
        }
        LedgerKey(text.into_bytes().into())
    }

    /// The key in the file at `path` (its text, surrounding whitespace
    /// trimmed). On Unix a file readable or writable by group or others is
    /// refused: the key would not be secret.
    pub fn from_file(path: &Path) -> crate::Result<Self> {
        let shown = path.display();
        let bad = |m: String| Error::config("invalid_ledger_key", m, json!({"file": path.display().to_string()}));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(path).map_err(|e| bad(format!("cannot read ledger key `{shown}`: {e}")))?;
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(bad(format!(
                    "ledger key `{shown}` is accessible to group or others (mode {mode:o}); make it 600"
                )));
            }
        }
        let text = std::fs::read(path).map_err(|e| bad(format!("cannot read ledger key `{shown}`: {e}")))?;
        let trimmed = text.trim_ascii();
        LedgerKey::new(trimmed.to_vec()).map_err(|_| {
            bad(format!("ledger key `{shown}` is too short ({} bytes, at least {})", trimmed.len(), Self::MIN_LEN))
        })
    }

    /// The key at `path`, creating the file (mode 600, a [`Self::generate`]d
    /// key, its directory created mode 700) when it does not exist.
    pub fn load_or_create(path: &Path) -> crate::Result<Self> {
        let shown = path.display();
        let io = |e: std::io::Error| {
            Error::config(
                "invalid_ledger_key",
                format!("cannot create ledger key `{shown}`: {e}"),
                json!({"file": path.display().to_string()}),
            )
        };
        if !path.exists() {
            if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                let mut b = std::fs::DirBuilder::new();
                b.recursive(true);
                #[cfg(unix)]
                std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
                b.create(dir).map_err(io)?;
            }
            // Written whole under a temporary name, then linked into place:
            // a process racing this one reads either no file or all of a key.
            let key = Self::generate();
            let tmp = path.with_file_name(format!(
                ".{}.{}.tmp",
                path.file_name().and_then(|n| n.to_str()).unwrap_or("ledger.key"),
                uuid::Uuid::new_v4().simple()
            ));
            let mut o = std::fs::OpenOptions::new();
            o.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
            let written = o.open(&tmp).and_then(|mut f| {
                f.write_all(&key.0)?;
                f.write_all(b"\n")?;
                f.sync_all()
            });
            let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                // Another process created it first: read theirs.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(e)),
            }
        }
        Self::from_file(path)
    }

    /// The key of [`LEDGER_KEY_ENV`], `None` when it is unset or empty; a
    /// set but too short key is an error.
    pub fn from_env() -> crate::Result<Option<Self>> {
        match std::env::var(LEDGER_KEY_ENV) {
            Ok(v) if !v.trim().is_empty() => LedgerKey::new(v.trim().as_bytes().to_vec()).map(Some).map_err(|_| {
                Error::invalid_argument(LEDGER_KEY_ENV, format!("must be at least {} bytes", Self::MIN_LEN))
            }),
            _ => Ok(None),
        }
    }

    /// The key a front end configures: the file at `key_path` when given,
    /// else [`Self::from_env`].
    pub fn resolve(key_path: Option<&Path>) -> crate::Result<Option<Self>> {
        match key_path {
            Some(p) => Self::from_file(p).map(Some),
            None => Self::from_env(),
        }
    }

    /// The MAC of `record`, as lowercase hex: HMAC-SHA256 over a version tag
    /// and the record's canonical JSON (every field, keys sorted, compact).
    pub fn mac(&self, record: &ApprovalRecord) -> String {
        let tag = self.tag(record);
        let mut out = String::with_capacity(64);
        for b in tag {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }

    /// Whether `mac` (hex) is the MAC of `record` (compared in constant time).
    pub fn verify(&self, record: &ApprovalRecord, mac: &str) -> bool {
        let Some(given) = decode_hex(mac) else { return false };
        let expected = self.tag(record);
        given.len() == expected.len() && given.iter().zip(expected.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    fn tag(&self, record: &ApprovalRecord) -> [u8; 32] {
        use hmac::{KeyInit, Mac};
        let body = crate::canonical::canonical_string(&serde_json::to_value(record).unwrap_or(Value::Null));
        // Any key length is valid for HMAC; the fallback is unreachable.
        let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.0) else { return [0; 32] };
        mac.update(b"car-runtime approvals ledger record v1\n");
        mac.update(body.as_bytes());
        mac.finalize().into_bytes().into()
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    b.chunks(2).map(|p| Some(nib(p[0])? << 4 | nib(p[1])?)).collect()
}

/// A ledger line as stored: the record and, in a keyed ledger, its MAC.
#[derive(Serialize, Deserialize)]
struct StoredLine {
    #[serde(flatten)]
    record: ApprovalRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mac: Option<String>,
}

/// What one read of a [`JsonlLedger`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LedgerContents {
    /// The records that count, oldest first (in a keyed ledger, only those
    /// with a valid MAC).
    pub records: Vec<ApprovalRecord>,
    /// The 1-based line numbers of well-formed records a keyed ledger
    /// ignored because their MAC is missing or wrong (forged, tampered
    /// with, or written without the key).
    pub unauthenticated: Vec<usize>,
}

/// Where approvals are kept.
pub trait ApprovalLedger: Send + Sync {
    /// The latest record for a fingerprint.
    fn latest(&self, fingerprint: &str) -> crate::Result<Option<ApprovalRecord>>;
    /// The latest record of every fingerprint, read once.
    fn latest_all(&self) -> crate::Result<HashMap<String, ApprovalRecord>>;
    /// Appends a record.
    fn append(&self, record: &ApprovalRecord) -> crate::Result<()>;
}

/// The embedded ledger: an append-only JSONL file. A missing file is an
/// empty ledger; a line that is not a record fails the read (naming the file
/// and line) rather than being skipped.
///
/// Reads of the latest records go through a cache: the file is re-read and
/// re-parsed only when its length, modification time or inode changed (an
/// append always changes the length), so a long-lived ledger consulted on
/// every admission does not parse the whole file each time.
///
/// With a key ([`Self::with_key`]) appended lines carry a MAC and lines
/// without a valid one are ignored and reported (see the module docs).
#[derive(Debug)]
pub struct JsonlLedger {
    path: PathBuf,
    key: Option<LedgerKey>,
    lock: Mutex<()>,
    latest: Mutex<Option<(FileStamp, LatestRecords)>>,
}

/// The latest record of every fingerprint.
pub type LatestRecords = Arc<HashMap<String, ApprovalRecord>>;

/// What identifies one version of the ledger file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

impl JsonlLedger {
    /// An unauthenticated ledger at `path` (created on first append): any
    /// well-formed line counts. Prefer [`Self::with_key`].
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JsonlLedger { path: path.into(), key: None, lock: Mutex::new(()), latest: Mutex::new(None) }
    }

    /// An authenticated ledger at `path`: appends carry an HMAC-SHA256 under
    /// `key`, and only lines with a valid one are records.
    pub fn with_key(path: impl Into<PathBuf>, key: LedgerKey) -> Self {
        JsonlLedger { path: path.into(), key: Some(key), lock: Mutex::new(()), latest: Mutex::new(None) }
    }

    /// The ledger at `path`, keyed by the file at `key_path`, else by
    /// [`LEDGER_KEY_ENV`], else by the default key file
    /// ([`default_key_path`], created mode 600 when absent), unless
    /// [`LEDGER_UNAUTHENTICATED_ENV`] opts into an unkeyed ledger
    /// ([`Self::open_with`]).
    pub fn open(path: impl Into<PathBuf>, key_path: Option<&Path>) -> crate::Result<Self> {
        Self::open_with(path, key_path, unauthenticated_from_env())
    }

    /// [`Self::open`] with the opt-in given: with `accept_unsigned` and no
    /// key file or [`LEDGER_KEY_ENV`], the ledger is unkeyed and every
    /// well-formed line counts (a configured key always wins). Without a
    /// default key path (no `HOME` nor `CAR_HOME`) the error
    /// `ledger_key_required` names the ways to give one.
    pub fn open_with(path: impl Into<PathBuf>, key_path: Option<&Path>, accept_unsigned: bool) -> crate::Result<Self> {
        let path = path.into();
        if let Some(k) = LedgerKey::resolve(key_path)? {
            return Ok(Self::with_key(path, k));
        }
        if accept_unsigned {
            return Ok(Self::new(path));
        }
        let key_file = default_key_path(|k| std::env::var(k).ok()).map_err(|why| {
            Error::config(
                "ledger_key_required",
                format!(
                    "the tier ledger `{}` needs a key to authenticate its records, and there is no default \
                     key file ({why}): set `ledger_key_path`, {LEDGER_KEY_ENV} or CAR_LEDGER_KEY_FILE \
                     (`ledger_unauthenticated: true` trusts unsigned lines, which whoever can write the \
                     file can forge)",
                    path.display()
                ),
                json!({"file": path.display().to_string()}),
            )
        })?;
        Ok(Self::with_key(path, LedgerKey::load_or_create(&key_file)?))
    }

    /// Whether lines are authenticated.
    pub fn is_keyed(&self) -> bool {
        self.key.is_some()
    }

    /// The latest record of every fingerprint, shared: re-read only when the
    /// file changed since the last read. A missing file is empty; an
    /// unreadable or invalid one is an error (never cached, so it is reported
    /// again on the next call).
    pub fn latest_shared(&self) -> crate::Result<LatestRecords> {
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Arc::default()),
            Err(e) => {
                return Err(Error::runtime(
                    "ledger_io_error",
                    format!("cannot read approvals ledger `{}`: {e}", self.path.display()),
                ));
            }
        };
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        let stamp = FileStamp { len: meta.len(), modified: meta.modified().ok(), inode };
        if let Ok(slot) = self.latest.lock()
            && let Some((cached, latest)) = &*slot
            && *cached == stamp
        {
            return Ok(latest.clone());
        }
        // Read after the stat: the contents are at least as new as the
        // stamp, so a write racing this read is seen on the next call.
        let latest = Arc::new(latest_by_fingerprint(self.records()?));
        if let Ok(mut slot) = self.latest.lock() {
            *slot = Some((stamp, latest.clone()));
        }
        Ok(latest)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record that counts, oldest first (see [`Self::read`]).
    pub fn records(&self) -> crate::Result<Vec<ApprovalRecord>> {
        Ok(self.read()?.records)
    }

    /// Every record that counts, oldest first, and the lines a keyed ledger
    /// ignored for a missing or wrong MAC (each also warned about on stderr,
    /// naming the file and line).
    pub fn read(&self) -> crate::Result<LedgerContents> {
        let shown = self.path.display().to_string();
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LedgerContents::default()),
            Err(e) => {
                return Err(Error::runtime("ledger_io_error", format!("cannot read approvals ledger `{shown}`: {e}")));
            }
        };
        let mut out = LedgerContents::default();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let stored: StoredLine = match serde_json::from_str(line) {
                Ok(r) => r,
                // A record cut short (a writer killed mid-write) never
                // committed: it is skipped with a warning. Any other bad line
                // is an error, so no earlier record is ever lost silently.
                Err(e) if e.classify() == serde_json::error::Category::Eof => {
                    eprintln!(
                        "car-runtime: warning: approvals ledger `{shown}`: ignoring line {}, an incomplete record \
                         (an interrupted write): {e}",
                        i + 1
                    );
                    continue;
                }
                Err(e) => {
                    return Err(Error::config(
                        "invalid_ledger",
                        format!("approvals ledger `{shown}`: line {} is not an approval record: {e}", i + 1),
                        json!({"file": shown, "line": i + 1}),
                    ));
                }
            };
            if let Some(key) = &self.key
                && !stored.mac.as_deref().is_some_and(|m| key.verify(&stored.record, m))
            {
                let why = if stored.mac.is_some() { "its MAC is wrong" } else { "it has no MAC" };
                eprintln!(
                    "car-runtime: warning: approvals ledger `{shown}`: ignoring line {}, an unauthenticated record \
                     ({why}: forged, altered or written without the ledger key)",
                    i + 1
                );
                out.unauthenticated.push(i + 1);
                continue;
            }
            out.records.push(stored.record);
        }
        Ok(out)
    }
}

impl ApprovalLedger for JsonlLedger {
    fn latest(&self, fingerprint: &str) -> crate::Result<Option<ApprovalRecord>> {
        Ok(self.latest_shared()?.get(fingerprint).cloned())
    }

    fn latest_all(&self) -> crate::Result<HashMap<String, ApprovalRecord>> {
        Ok(HashMap::clone(&*self.latest_shared()?))
    }

    fn append(&self, record: &ApprovalRecord) -> crate::Result<()> {
        let shown = self.path.display().to_string();
        let io = |e: std::io::Error| {
            Error::runtime("ledger_io_error", format!("cannot write approvals ledger `{shown}`: {e}"))
        };
        let _guard =
            self.lock.lock().map_err(|_| Error::runtime("ledger_io_error", "approvals ledger lock poisoned"))?;
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let stored = StoredLine { record: record.clone(), mac: self.key.as_ref().map(|k| k.mac(record)) };
        let mut line = serde_json::to_string(&stored).map_err(|e| Error::runtime("ledger_io_error", e.to_string()))?;
        line.push('\n');
        let mut f = crate::sandbox::open_append_locked(&self.path).map_err(io)?;
        // Complete a torn last line first, so the new record stays a line of
        // its own instead of being glued to the fragment.
        let len = f.metadata().map_err(io)?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            f.seek(SeekFrom::Start(len - 1)).map_err(io)?;
            f.read_exact(&mut last).map_err(io)?;
            if last[0] != b'\n' {
                line.insert(0, '\n');
            }
        }
        f.write_all(line.as_bytes()).map_err(io)?;
        f.flush().map_err(io)
    }
}

/// An in-memory ledger (tests, embedders without a file).
#[derive(Debug, Default)]
pub struct MemoryLedger {
    records: Mutex<Vec<ApprovalRecord>>,
}

fn latest_by_fingerprint(records: impl IntoIterator<Item = ApprovalRecord>) -> HashMap<String, ApprovalRecord> {
    let mut out = HashMap::new();
    for r in records {
        out.insert(r.fingerprint.clone(), r);
    }
    out
}

impl MemoryLedger {
    /// Every record, oldest first.
    pub fn all(&self) -> crate::Result<Vec<ApprovalRecord>> {
        let g = self.records.lock().map_err(|_| Error::runtime("ledger_io_error", "approvals ledger lock poisoned"))?;
        Ok(g.clone())
    }
}

impl ApprovalLedger for MemoryLedger {
    fn latest(&self, fingerprint: &str) -> crate::Result<Option<ApprovalRecord>> {
        let g = self.records.lock().map_err(|_| Error::runtime("ledger_io_error", "approvals ledger lock poisoned"))?;
        Ok(g.iter().rev().find(|r| r.fingerprint == fingerprint).cloned())
    }

    fn latest_all(&self) -> crate::Result<HashMap<String, ApprovalRecord>> {
        let g = self.records.lock().map_err(|_| Error::runtime("ledger_io_error", "approvals ledger lock poisoned"))?;
        Ok(latest_by_fingerprint(g.iter().cloned()))
    }
    fn append(&self, record: &ApprovalRecord) -> crate::Result<()> {
        let mut g =
            self.records.lock().map_err(|_| Error::runtime("ledger_io_error", "approvals ledger lock poisoned"))?;
        g.push(record.clone());
        Ok(())
    }
}

/// The fingerprint of the operation an action represents:
/// `type|tool|canonical parameters`.
pub fn fingerprint(action: &Action) -> String {
    format!(
        "{}|{}|{}",
        action.action_type.as_str(),
        action.tool.as_deref().unwrap_or("-"),
        String::from_utf8(crate::canonical::canonical_object(&action.parameters)).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Decision, PermissionGate};
    use serde_json::json;

    fn act(id: &str, tool: &str, params: Value) -> Action {
        let mut a = Action::tool_call(tool);
        a.id = id.into();
        a.parameters = params.as_object().cloned().unwrap_or_default().into();
        a
    }

    #[test]
    fn the_latest_records_are_reread_when_the_ledger_changes() {
        let dir = std::env::temp_dir().join(format!("car-approvals-cache-{}", uuid::Uuid::new_v4()));
        let path = dir.join("approvals.jsonl");
        let ledger = JsonlLedger::new(&path);
        assert!(ledger.latest_shared().unwrap().is_empty(), "a missing ledger is empty");
        let verdict = |l: &HashMap<String, ApprovalRecord>| l.values().next().unwrap().decision;
        let deploy = act("d", "deploy", json!({"target": "prod"}));

        // Recorded through another ledger of the same file.
        let gate = PermissionGate::new().with_ledger(Box::new(JsonlLedger::new(&path)));
        gate.record(&deploy, true, "al", "ok", None).unwrap();
        let first = ledger.latest_shared().unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(verdict(&first), ApprovalVerdict::Approved);
        assert!(Arc::ptr_eq(&first, &ledger.latest_shared().unwrap()), "an unchanged ledger is not re-read");

        // A later verdict for the same operation wins once it is appended.
        gate.record(&deploy, false, "bob", "not today", None).unwrap();
        let second = ledger.latest_shared().unwrap();
        assert_eq!(verdict(&second), ApprovalVerdict::Rejected);
        assert_eq!(ledger.latest(&fingerprint(&deploy)).unwrap().unwrap().decision, ApprovalVerdict::Rejected);

        // A corrupt ledger is an error every time, not a stale answer.
        std::fs::write(&path, "not a record\n").unwrap();
        assert!(ledger.latest_shared().is_err());
        assert!(ledger.latest_shared().is_err());
        std::fs::remove_file(&path).unwrap();
        assert!(ledger.latest_shared().unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        use hmac::{KeyInit, Mac};
        // RFC 4231, test case 2.
        let mut m = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        let hex: String = m.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    fn keyed(dir: &Path) -> (JsonlLedger, LedgerKey) {
        let key = LedgerKey::load_or_create(&dir.join("keys").join("ledger.key")).unwrap();
        (JsonlLedger::with_key(dir.join("ledger").join("approvals.jsonl"), key.clone()), key)
    }

    #[test]
    fn a_keyed_ledger_admits_only_records_with_a_valid_mac() {
        let dir = std::env::temp_dir().join(format!("car-approvals-mac-{}", uuid::Uuid::new_v4()));
        let (ledger, key) = keyed(&dir);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join("keys").join("ledger.key")).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(LedgerKey::load_or_create(&dir.join("keys").join("ledger.key")).unwrap(), key, "reused");
        let deploy = act("d", "deploy", json!({"target": "prod"}));
        let fp = fingerprint(&deploy);
        let path = ledger.path().to_path_buf();
        let gate = PermissionGate::new().with_ledger(Box::new(JsonlLedger::with_key(&path, key.clone())));
        let forged = json!({"fingerprint": fp, "required_tier": "full_access", "decision": "approved",
            "reviewer": "me", "reason": "trust me", "decided_at": "2030-01-01T00:00:00Z"});
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for line in [json!({}), json!({"mac": "00".repeat(32)}), json!({"mac": "zz"})].iter().map(|extra| {
            let mut v = forged.clone();
            v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            v
        }) {
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
            writeln!(f, "{line}").unwrap();
        }
        let read = ledger.read().unwrap();
        assert!(read.records.is_empty(), "a forged line is no record");
        assert_eq!(read.unauthenticated, [1, 2, 3]);
        assert_eq!(gate.evaluate(&deploy, PermissionTier::FullAccess).unwrap().decision, Decision::NeedsApproval);

        // Recorded through the API: it counts.
        gate.record(&deploy, true, "al", "ok", Some(json!({"ticket": 7}))).unwrap();
        assert_eq!(gate.evaluate(&deploy, PermissionTier::FullAccess).unwrap().decision, Decision::Allow);
        let text = std::fs::read_to_string(&path).unwrap();
        let good = text.lines().last().unwrap().to_string();

        // Tampering with any field (or the MAC) invalidates it.
        let v: Value = serde_json::from_str(&good).unwrap();
        let tampered = [
            ("fingerprint", json!("tool_call|deploy|{}")),
            ("required_tier", json!("read_only")),
            ("decision", json!("rejected")),
            ("reviewer", json!("mallory")),
            ("reason", json!("ok!")),
            ("evidence", json!({"ticket": 8})),
            ("decided_at", json!("2031-01-01T00:00:00Z")),
            ("mac", json!(key.mac(&serde_json::from_value(forged.clone()).unwrap()))),
        ];
        for (field, value) in tampered {
            let mut t = v.clone();
            t[field] = value;
            std::fs::write(&path, format!("{t}\n")).unwrap();
            let read = ledger.read().unwrap();
            assert!(read.records.is_empty(), "tampered `{field}` still counts");
            assert_eq!(read.unauthenticated, [1]);
        }
        // The untouched line still verifies; another key does not accept it.
        std::fs::write(&path, format!("{good}\n")).unwrap();
        assert_eq!(ledger.records().unwrap().len(), 1);
        let other = JsonlLedger::with_key(&path, LedgerKey::generate());
        assert!(other.records().unwrap().is_empty());
        // An unkeyed ledger reads every well-formed line (backward compatible).
        assert_eq!(JsonlLedger::new(&path).records().unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_default_key_path_follows_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let p = |pairs: &'static [(&'static str, &'static str)]| default_key_path(env(pairs));
        assert_eq!(p(&[("HOME", "/h")]).unwrap(), PathBuf::from("/h/.config/ai.parslee.car/ledger.key"));
        assert_eq!(
            p(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "/x")]).unwrap(),
            PathBuf::from("/x/ai.parslee.car/ledger.key")
        );
        assert_eq!(p(&[("HOME", "/h"), ("CAR_HOME", "/c")]).unwrap(), PathBuf::from("/c/ai.parslee.car/ledger.key"));
        assert_eq!(p(&[("CAR_HOME", "/c"), ("CAR_LEDGER_KEY_FILE", "/k/key")]).unwrap(), PathBuf::from("/k/key"));
        assert!(p(&[("CAR_LEDGER_KEY_FILE", "rel/key")]).unwrap_err().contains("absolute"));
        assert!(p(&[("CAR_HOME", "rel")]).unwrap_err().contains("absolute"));
        assert!(p(&[("HOME", " ")]).unwrap_err().contains("HOME"));
    }

    /// Processes (here threads) racing to create the same key all end up
    /// with the one key written whole: none reads a partial file.
    #[test]
    fn a_key_created_by_racers_is_one_whole_key() {
        for round in 0..20 {
            let dir = std::env::temp_dir().join(format!("car-key-race-{}-{round}", uuid::Uuid::new_v4()));
            let path = dir.join("sub").join("ledger.key");
            let keys: Vec<_> = (0..8)
                .map(|_| {
                    let path = path.clone();
                    std::thread::spawn(move || LedgerKey::load_or_create(&path))
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect();
            assert!(keys.windows(2).all(|w| w[0] == w[1]), "round {round}: racers got different keys");
            let left: Vec<_> = std::fs::read_dir(dir.join("sub")).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert_eq!(left, [std::ffi::OsString::from("ledger.key")], "no temporary file is left");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn ledger_keys_fail_closed() {
        let dir = std::env::temp_dir().join(format!("car-approvals-key-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let short = dir.join("short.key");
        std::fs::write(&short, "abc").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
            let open = dir.join("open.key");
            std::fs::write(&open, "k".repeat(64)).unwrap();
            std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = LedgerKey::from_file(&open).unwrap_err().to_string();
            assert!(e.contains("open.key") && e.contains("644"), "{e}");
        }
        let e = LedgerKey::from_file(&short).unwrap_err().to_string();
        assert!(e.contains("short.key") && e.contains("too short"), "{e}");
        assert!(LedgerKey::from_file(&dir.join("missing.key")).is_err());
        assert!(LedgerKey::new(vec![0u8; 31]).is_err());
        assert_eq!(format!("{:?}", LedgerKey::generate()), "LedgerKey(..)");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fingerprint_is_canonical() {
        let a = act("a", "deploy", json!({"z": 1, "a": {"y": 2, "b": [1, "x"]}}));
        assert_eq!(fingerprint(&a), r#"tool_call|deploy|{"a":{"b":[1,"x"],"y":2},"z":1}"#);
        let mut s = Action::new(crate::ir::ActionType::StateRead);
        s.parameters = Default::default();
        assert_eq!(fingerprint(&s), "state_read|-|{}");
    }

    #[test]
    fn a_legacy_ledger_moves_to_its_own_name_and_nothing_else_does() {
        let dir = std::env::temp_dir().join(format!("car-ledger-mig-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let old = dir.join("approvals.jsonl");
        let l = JsonlLedger::new(&old);
        l.append(&ApprovalRecord {
            fingerprint: "tool_call|deploy|{}".into(),
            required_tier: PermissionTier::FullAccess,
            decision: ApprovalVerdict::Approved,
            reviewer: "ops".into(),
            reason: "ok".into(),
            evidence: None,
            decided_at: chrono::Utc::now(),
        })
        .unwrap();
        let moved = migrate_legacy_ledger(&dir).unwrap().unwrap();
        assert_eq!(moved, dir.join(TIER_LEDGER_FILE));
        assert!(!old.exists());
        assert_eq!(JsonlLedger::new(&moved).records().unwrap().len(), 1);
        // Nothing to do the second time; an approvals store file stays.
        assert_eq!(migrate_legacy_ledger(&dir).unwrap(), None);
        std::fs::remove_file(&moved).unwrap();
        std::fs::write(&old, "{\"kind\":\"request\",\"key\":\"t:abc\"}\n").unwrap();
        assert_eq!(migrate_legacy_ledger(&dir).unwrap(), None);
        assert!(old.exists() && !dir.join(TIER_LEDGER_FILE).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
