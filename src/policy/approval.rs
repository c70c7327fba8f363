//! The permission gate: per-action decisions against a granted tier and a
//! durable approvals ledger.
//!
//! An action's operation is identified by its fingerprint,
//! `type|tool|canonical parameters` (`-` when there is no tool; parameters
//! with keys sorted recursively, compact). The gate decides:
//! 1. the latest ledger record for the fingerprint: `approved` → `allow`,
//!    `rejected` → `deny`;
//! 2. otherwise `full_access` always → `needs_approval`;
//! 3. otherwise a required tier above the granted one → `needs_approval`;
//! 4. otherwise `allow`.
//!
//! The embedded ledger is an append-only JSONL file of [`ApprovalRecord`]s.
//! With a [`LedgerKey`] ([`JsonlLedger::with_key`]) every line carries an
//! HMAC-SHA256 (`mac`) over the record's canonical form, and a line without
//! a valid one is no record at all: it never approves (nor rejects), and the
//! read reports it. Without a key (backward compatible, [`JsonlLedger::new`])
//! any well-formed line counts, so whoever can write the file can approve.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::classify::{Axes, PermissionTier, RiskClassifier, classify_reversibility_flat, flatten};
use crate::Error;
use crate::ir::{Action, Reversibility};

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

/// The environment variable holding a ledger key (its text, at least
/// [`LedgerKey::MIN_LEN`] bytes) for a ledger configured without a key file.
pub const LEDGER_KEY_ENV: &str = "CAR_LEDGER_KEY";

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
            let key = Self::generate();
            let mut o = std::fs::OpenOptions::new();
            o.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
            match o.open(path) {
                Ok(mut f) => {
                    f.write_all(&key.0).map_err(io)?;
                    f.write_all(b"\n").map_err(io)?;
                    f.sync_all().map_err(io)?;
                }
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
        let body = canonical_json(&serde_json::to_value(record).unwrap_or(Value::Null));
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

    /// The ledger at `path`, keyed by [`LedgerKey::resolve`]`(key_path)`
    /// (the key file, else [`LEDGER_KEY_ENV`], else unauthenticated).
    pub fn open(path: impl Into<PathBuf>, key_path: Option<&Path>) -> crate::Result<Self> {
        Ok(match LedgerKey::resolve(key_path)? {
            Some(k) => Self::with_key(path, k),
            None => Self::new(path),
        })
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
        let mut f = std::fs::OpenOptions::new().create(true).read(true).append(true).open(&self.path).map_err(io)?;
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

/// Parameters as canonical JSON: keys sorted recursively, compact.
pub fn canonical_json(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
}

/// The fingerprint of the operation an action represents:
/// `type|tool|canonical parameters`.
pub fn fingerprint(action: &Action) -> String {
    format!(
        "{}|{}|{}",
        action.action_type.as_str(),
        action.tool.as_deref().unwrap_or("-"),
        canonical_json(&Value::Object(action.parameters.clone()))
    )
}

/// A gate decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// May run.
    Allow,
    /// Needs a human approval first.
    NeedsApproval,
    /// May not run.
    Deny,
}

/// One row of `permission_evaluate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionDecision {
    /// The action.
    pub action_id: String,
    /// Its operation's fingerprint.
    pub fingerprint: String,
    /// The decision.
    pub decision: Decision,
    /// The tier the action requires.
    pub required: PermissionTier,
    /// The tier the session is granted.
    pub granted: PermissionTier,
    /// Whether the action can be undone (classified, not enforced).
    pub reversibility: Reversibility,
    /// Why, unless allowed by tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The gate: a classifier plus an optional ledger.
#[derive(Default)]
pub struct PermissionGate {
    classifier: Option<RiskClassifier>,
    ledger: Option<Box<dyn ApprovalLedger>>,
}

impl std::fmt::Debug for PermissionGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermissionGate").field("ledger", &self.ledger.is_some()).finish()
    }
}

impl PermissionGate {
    /// A gate with the default classifier and no ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses this ledger.
    pub fn with_ledger(mut self, ledger: Box<dyn ApprovalLedger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Uses this classifier.
    pub fn with_classifier(mut self, classifier: RiskClassifier) -> Self {
        self.classifier = Some(classifier);
        self
    }

    /// The authority axis alone: the tier an action requires.
    pub fn required_tier(&self, action: &Action) -> PermissionTier {
        let classifier = self.classifier.as_ref().unwrap_or_else(|| RiskClassifier::shared());
        classifier.classify_flat(&flatten(action))
    }

    /// Both axes of an action from one flattening.
    pub fn axes(&self, action: &Action) -> Axes {
        let f = flatten(action);
        let classifier = self.classifier.as_ref().unwrap_or_else(|| RiskClassifier::shared());
        Axes { required_tier: classifier.classify_flat(&f), reversibility: classify_reversibility_flat(&f) }
    }

    /// Decides one action. A ledger that cannot be read is an error (the
    /// caller must not proceed).
    pub fn evaluate(&self, action: &Action, granted: PermissionTier) -> crate::Result<PermissionDecision> {
        let fp = fingerprint(action);
        let record = match &self.ledger {
            Some(l) => l.latest(&fp)?,
            None => None,
        };
        Ok(self.decide(action, fp, record.as_ref(), granted))
    }

    /// Decides every action, reading the ledger once.
    pub fn evaluate_all(&self, actions: &[Action], granted: PermissionTier) -> crate::Result<Vec<PermissionDecision>> {
        let latest = match &self.ledger {
            Some(l) => l.latest_all()?,
            None => HashMap::new(),
        };
        Ok(self.evaluate_with(actions, granted, &latest))
    }

    /// [`Self::evaluate_all`] against `latest`, the latest record of every
    /// fingerprint (as [`ApprovalLedger::latest_all`] reads it), for callers
    /// that hold the ledger's contents already; this gate's own ledger is
    /// not read.
    pub fn evaluate_with(
        &self,
        actions: &[Action],
        granted: PermissionTier,
        latest: &HashMap<String, ApprovalRecord>,
    ) -> Vec<PermissionDecision> {
        actions
            .iter()
            .map(|a| {
                let fp = fingerprint(a);
                let record = latest.get(&fp);
                self.decide(a, fp, record, granted)
            })
            .collect()
    }

    fn decide(
        &self,
        action: &Action,
        fp: String,
        record: Option<&ApprovalRecord>,
        granted: PermissionTier,
    ) -> PermissionDecision {
        let axes = self.axes(action);
        let required = axes.required_tier;
        let (decision, reason) = match record {
            Some(r) if r.decision == ApprovalVerdict::Approved => (Decision::Allow, None),
            Some(r) => (Decision::Deny, Some(format!("previously rejected by {} ({})", r.reviewer, r.reason))),
            None if required == PermissionTier::FullAccess => (
                Decision::NeedsApproval,
                Some("full_access actions require human approval before execution".to_string()),
            ),
            None if required > granted => (
                Decision::NeedsApproval,
                Some(format!("action requires {required} but session is granted only {granted}")),
            ),
            None => (Decision::Allow, None),
        };
        PermissionDecision {
            action_id: action.id.clone(),
            fingerprint: fp,
            decision,
            required,
            granted,
            reversibility: axes.reversibility,
            reason,
        }
    }

    /// Tier admission of a whole proposal: `Ok(None)` when every action may
    /// run at `granted`, else the refusal reason naming the actions and tiers.
    /// It admits exactly what [`PermissionGate::evaluate`] allows: an action
    /// that `needs_approval` (its required tier exceeds `granted`, or it is
    /// `full_access`, which always needs an approval) is refused unless the
    /// ledger holds an approval of its operation, and a rejected operation is
    /// refused at any tier. A ledger that cannot be read is an error: the
    /// caller must not run.
    pub fn admit_tier(&self, actions: &[Action], granted: PermissionTier) -> crate::Result<Option<String>> {
        Ok(Self::tier_refusal(self.evaluate_all(actions, granted)?, granted))
    }

    /// [`Self::admit_tier`] against `latest` (see [`Self::evaluate_with`]).
    pub fn admit_tier_with(
        &self,
        actions: &[Action],
        granted: PermissionTier,
        latest: &HashMap<String, ApprovalRecord>,
    ) -> Option<String> {
        Self::tier_refusal(self.evaluate_with(actions, granted, latest), granted)
    }

    /// The refusal reason of a proposal whose per-action decisions are
    /// `decisions` (see [`Self::admit_tier`]), `None` when it may run.
    pub fn tier_refusal_of(decisions: Vec<PermissionDecision>, granted: PermissionTier) -> Option<String> {
        Self::tier_refusal(decisions, granted)
    }

    fn tier_refusal(decisions: Vec<PermissionDecision>, granted: PermissionTier) -> Option<String> {
        let mut escalated: Vec<String> = Vec::new();
        let mut unapproved: Vec<String> = Vec::new();
        let mut rejected: Vec<String> = Vec::new();
        for d in decisions {
            match d.decision {
                Decision::Allow => {}
                Decision::Deny => rejected.push(format!(
                    "action `{}` was {}",
                    d.action_id,
                    d.reason.as_deref().unwrap_or("rejected by a reviewer")
                )),
                Decision::NeedsApproval if d.required > granted => {
                    escalated.push(format!("`{}` requires `{}`", d.action_id, d.required));
                }
                Decision::NeedsApproval => unapproved.push(format!("`{}`", d.action_id)),
            }
        }
        if !rejected.is_empty() {
            return Some(format!("refused: {}", rejected.join("; ")));
        }
        let mut parts = Vec::new();
        if !escalated.is_empty() {
            parts.push(format!(
                "permission tier escalated: action {} but the session is granted only `{granted}`",
                escalated.join(", action ")
            ));
        }
        if !unapproved.is_empty() {
            parts.push(format!(
                "approval required: action {} is `full_access`, which always needs an approval",
                unapproved.join(", action ")
            ));
        }
        if parts.is_empty() {
            return None;
        }
        let fix = if escalated.is_empty() {
            "approve the action (permission.approve)"
        } else {
            "raise the tier (permission.set_tier) or approve the action (permission.approve)"
        };
        Some(format!("{}; {fix}", parts.join("; ")))
    }

    /// Records a reviewer's verdict for an action's operation.
    pub fn record(
        &self,
        action: &Action,
        approve: bool,
        reviewer: &str,
        reason: &str,
        evidence: Option<Value>,
    ) -> crate::Result<ApprovalRecord> {
        let required = self.axes(action).required_tier;
        self.record_fingerprint(&fingerprint(action), required, approve, reviewer, reason, evidence)
    }

    /// Records a verdict for an explicit fingerprint.
    pub fn record_fingerprint(
        &self,
        fingerprint: &str,
        required_tier: PermissionTier,
        approve: bool,
        reviewer: &str,
        reason: &str,
        evidence: Option<Value>,
    ) -> crate::Result<ApprovalRecord> {
        let ledger =
            self.ledger.as_ref().ok_or_else(|| Error::runtime("no_ledger", "no approvals ledger is configured"))?;
        if fingerprint.is_empty() {
            return Err(Error::invalid_argument("fingerprint", "must not be empty"));
        }
        let rec = ApprovalRecord {
            fingerprint: fingerprint.to_string(),
            required_tier,
            decision: if approve { ApprovalVerdict::Approved } else { ApprovalVerdict::Rejected },
            reviewer: reviewer.to_string(),
            reason: reason.to_string(),
            evidence,
            decided_at: chrono::Utc::now(),
        };
        ledger.append(&rec)?;
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn act(id: &str, tool: &str, params: Value) -> Action {
        let mut a = Action::tool_call(tool);
        a.id = id.into();
        a.parameters = params.as_object().cloned().unwrap_or_default();
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
    fn gate_decisions_and_ledger() {
        let gate = PermissionGate::new().with_ledger(Box::<MemoryLedger>::default());
        let deploy = act("d", "deploy", json!({"target": "prod"}));
        let read = act("r", "read_file", json!({"path": "x"}));
        let d = gate.evaluate(&deploy, PermissionTier::FullAccess).unwrap();
        assert_eq!(d.decision, Decision::NeedsApproval, "full_access always needs approval");
        let r = gate.evaluate(&read, PermissionTier::ReadOnly).unwrap();
        assert_eq!(r.decision, Decision::NeedsApproval);
        assert_eq!(r.reason.as_deref(), Some("action requires sandbox_edit but session is granted only read_only"));
        assert_eq!(gate.evaluate(&read, PermissionTier::SandboxEdit).unwrap().decision, Decision::Allow);
        gate.record(&deploy, false, "bob", "no", None).unwrap();
        let d = gate.evaluate(&deploy, PermissionTier::FullAccess).unwrap();
        assert_eq!(d.decision, Decision::Deny);
        assert_eq!(d.reason.as_deref(), Some("previously rejected by bob (no)"));
        gate.record(&deploy, true, "al", "ok", None).unwrap();
        assert_eq!(gate.evaluate(&deploy, PermissionTier::ReadOnly).unwrap().decision, Decision::Allow, "latest wins");
        assert!(PermissionGate::new().record(&deploy, true, "x", "y", None).is_err());
    }

    #[test]
    fn admit_tier_refuses_above_the_granted_tier_unless_approved() {
        let gate = PermissionGate::new().with_ledger(Box::<MemoryLedger>::default());
        let deploy = act("d", "deploy", json!({"target": "prod"}));
        let read = act("r", "read_file", json!({"path": "x"}));
        let both = [read.clone(), deploy.clone()];
        assert_eq!(gate.admit_tier(std::slice::from_ref(&read), PermissionTier::SandboxEdit).unwrap(), None);
        assert_eq!(
            gate.admit_tier(&both, PermissionTier::SandboxEdit).unwrap().as_deref(),
            Some(
                "permission tier escalated: action `d` requires `full_access` but the session is granted only `sandbox_edit`; raise the tier (permission.set_tier) or approve the action (permission.approve)"
            )
        );
        let r = gate.admit_tier(&both, PermissionTier::ReadOnly).unwrap().unwrap();
        assert!(r.contains("action `r` requires `sandbox_edit`, action `d` requires `full_access`"), "{r}");
        assert_eq!(
            gate.admit_tier(&both, PermissionTier::FullAccess).unwrap().as_deref(),
            Some(
                "approval required: action `d` is `full_access`, which always needs an approval; approve the action (permission.approve)"
            ),
            "granted full_access: admits exactly what evaluate allows"
        );
        for granted in [PermissionTier::ReadOnly, PermissionTier::SandboxEdit, PermissionTier::FullAccess] {
            let allowed = gate.evaluate_all(&both, granted).unwrap().iter().all(|d| d.decision == Decision::Allow);
            assert_eq!(gate.admit_tier(&both, granted).unwrap().is_none(), allowed, "{granted}");
        }
        gate.record(&deploy, true, "al", "ok", None).unwrap();
        assert_eq!(gate.admit_tier(&both, PermissionTier::SandboxEdit).unwrap(), None, "approved");
        assert_eq!(gate.admit_tier(&both, PermissionTier::FullAccess).unwrap(), None, "approved, at full_access too");
        gate.record(&read, false, "bob", "no reads today", None).unwrap();
        assert_eq!(
            gate.admit_tier(&both, PermissionTier::FullAccess).unwrap().as_deref(),
            Some("refused: action `r` was previously rejected by bob (no reads today)"),
            "a rejection refuses at any tier"
        );
    }

    #[test]
    fn evaluate_all_reads_the_ledger_once_and_agrees() {
        let gate = PermissionGate::new().with_ledger(Box::<MemoryLedger>::default());
        let acts = vec![
            act("a", "deploy", json!({"t": 1})),
            act("b", "deploy", json!({"t": 2})),
            act("c", "read_file", json!({})),
        ];
        gate.record(&acts[0], true, "r", "ok", None).unwrap();
        gate.record(&acts[1], true, "r", "ok", None).unwrap();
        gate.record(&acts[1], false, "r", "changed my mind", None).unwrap();
        let all = gate.evaluate_all(&acts, PermissionTier::SandboxEdit).unwrap();
        let one: Vec<_> = acts.iter().map(|a| gate.evaluate(a, PermissionTier::SandboxEdit).unwrap()).collect();
        assert_eq!(all, one);
        let kinds: Vec<_> = all.iter().map(|d| d.decision).collect();
        assert_eq!(kinds, [Decision::Allow, Decision::Deny, Decision::Allow]);
    }
}
