//! Suspended proposals: a proposal run with `on_ask = "suspend"` that
//! reaches an ask approval nobody has answered yet does not wait for it.
//! Once every branch that can run has run, it settles with status
//! `suspended`, and its position is checkpointed in a [`CheckpointBackend`]:
//! the results of the actions that settled, the state it wrote (with the
//! values before, its undo records) and the approvals it waits for. A later
//! [`crate::engine::Runtime::resume`] (the same process, the same daemon
//! after a restart, or another daemon of the same database) claims the
//! checkpoint and continues where it stopped: settled actions are never run
//! again, and the actions still to run go through admission again (an
//! approval resolved in the meantime applies at once, used up once).
//!
//! A claim is a lease: one resumer at a time; a resumer that dies leaves a
//! lease that expires, and then another may claim the checkpoint.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ir::{ActionProposal, ActionResult};
use crate::{Error, Result};

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::runtime("checkpoint_io", format!("checkpoint store `{}`: {e}", path.display()))
}

/// How long a resumer holds its claim on a checkpoint before another may
/// take it (the resumer died).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// A state key the suspended proposal wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateWrite {
    /// The physical key (with its tenant prefix).
    pub key: String,
    /// The value before the proposal wrote it (`None`: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    /// The value the proposal left (`None`: deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
    /// The values the proposal wrote before `after`, oldest first: a runner
    /// that died between journaling a write and making it left one of
    /// these in the store, and a sweeper still recognises it as the run's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<Option<Value>>,
}

impl StateWrite {
    /// Whether `value` is one this proposal wrote.
    pub fn wrote(&self, value: &Option<Value>) -> bool {
        *value == self.after || self.earlier.contains(value)
    }
}

/// An action waiting for an approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingAction {
    /// The action.
    pub action_id: String,
    /// Its tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The key of the approval it waits for.
    pub approval_key: String,
}

/// A suspended proposal's position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The suspension id (`susp-<uuid>`), kept across re-suspensions.
    pub id: String,
    /// The proposal, as it was submitted.
    pub proposal: ActionProposal,
    /// The state tenant it runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Who submitted it (a daemon's principal); only they, or an operator,
    /// may resume it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// One slot per action: the result of every action that settled.
    pub results: Vec<Option<ActionResult>>,
    /// The state keys it wrote, with their undo records.
    #[serde(default)]
    pub writes: Vec<StateWrite>,
    /// The actions waiting for an approval.
    pub pending: Vec<PendingAction>,
    /// The actions waiting for those (their dependents).
    #[serde(default)]
    pub waiting: Vec<String>,
    /// Tool calls made so far.
    #[serde(default)]
    pub tool_calls: u64,
    /// Retries made so far.
    #[serde(default)]
    pub retries: u64,
    /// Time spent running so far (ms).
    #[serde(default)]
    pub duration_ms: f64,
    /// When it was first suspended.
    pub created_at: DateTime<Utc>,
    /// When it was suspended last.
    pub suspended_at: DateTime<Utc>,
    /// How many times it suspended.
    #[serde(default)]
    pub suspensions: u32,
    /// A run in progress (journaled while its state lives in a shared
    /// store), not a suspended one: `writes` are its undo records, written
    /// before each write. Its runner holds it by lease; once the lease runs
    /// out (the runner died), a sweeper rolls the writes back
    /// ([`crate::engine::Runtime::sweep`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub running: bool,
}

impl Checkpoint {
    /// A fresh suspension id.
    pub fn new_id() -> String {
        format!("susp-{}", uuid::Uuid::new_v4())
    }

    /// A checkpoint `id` of `proposal` with nothing settled, written or
    /// pending yet, created now.
    pub fn new(id: String, proposal: ActionProposal, tenant: Option<String>, owner: Option<String>) -> Self {
        let now = Utc::now();
        Checkpoint {
            id,
            results: vec![None; proposal.actions.len()],
            proposal,
            tenant,
            owner,
            writes: Vec::new(),
            pending: Vec::new(),
            waiting: Vec::new(),
            tool_calls: 0,
            retries: 0,
            duration_ms: 0.0,
            created_at: now,
            suspended_at: now,
            suspensions: 0,
            running: false,
        }
    }

    /// The summary listed by [`CheckpointBackend::list`].
    pub fn summary(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "proposal_id": self.proposal.id,
            "tenant": self.tenant,
            "owner": self.owner,
            "pending": self.pending,
            "waiting": self.waiting,
            "created_at": self.created_at,
            "suspended_at": self.suspended_at,
            "suspensions": self.suspensions,
            "running": self.running,
        })
    }
}

/// The outcome of [`CheckpointBackend::claim`].
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Claimed: the checkpoint, held by the claimant until released,
    /// replaced, removed or the lease expires.
    Claimed(Box<Checkpoint>),
    /// No checkpoint of that id (never suspended, or already resumed to the end).
    NotFound,
    /// Another resumer holds it until `until`.
    Held {
        /// The claimant holding it.
        by: String,
        /// When its lease expires.
        until: DateTime<Utc>,
    },
}

/// Where suspended proposals wait.
#[async_trait]
pub trait CheckpointBackend: Send + Sync {
    /// Stores `cp` (replacing one of the same id and its claim).
    async fn save(&self, cp: &Checkpoint) -> Result<()>;
    /// Stores `cp` claimed by `claimant` for `lease`, in one step (no other
    /// claimant can take it in between).
    async fn save_claimed(&self, cp: &Checkpoint, claimant: &str, lease: Duration) -> Result<()>;
    /// Claims `id` for `claimant` for `lease`: only one claimant at a time
    /// (an expired lease may be taken over).
    async fn claim(&self, id: &str, claimant: &str, lease: Duration) -> Result<Claim>;
    /// Gives up `claimant`'s claim on `id` (the checkpoint stays).
    async fn release(&self, id: &str, claimant: &str) -> Result<()>;
    /// Removes `id` (the proposal finished); only by its claimant.
    async fn remove(&self, id: &str, claimant: &str) -> Result<()>;
    /// Reads `id` without claiming it.
    async fn get(&self, id: &str) -> Result<Option<Checkpoint>>;
    /// Every checkpoint, oldest first.
    async fn list(&self) -> Result<Vec<Checkpoint>>;
}

/// Renews `claimant`'s claim on `id` every third of `lease`, for as long as
/// it is polled (never ends): a claimant that stops lets its lease run out.
pub(crate) async fn renew_claim(store: Arc<dyn CheckpointBackend>, id: String, claimant: String, lease: Duration) {
    loop {
        tokio::time::sleep(lease / 3).await;
        let _ = store.claim(&id, &claimant, lease).await;
    }
}

fn check_id(id: &str) -> Result<()> {
    let ok =
        !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok { Ok(()) } else { Err(Error::invalid_argument("id", format!("invalid suspension id `{id}`"))) }
}

fn lease_until(lease: Duration) -> DateTime<Utc> {
    Utc::now() + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(60))
}

/// A claim: the claimant and when its lease expires.
type Lease = (String, DateTime<Utc>);

/// The checkpoints of one process, in memory (the library's default).
#[derive(Debug, Default)]
pub struct MemoryCheckpoints {
    inner: Mutex<HashMap<String, (Checkpoint, Option<Lease>)>>,
}

#[async_trait]
impl CheckpointBackend for MemoryCheckpoints {
    async fn save(&self, cp: &Checkpoint) -> Result<()> {
        check_id(&cp.id)?;
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(cp.id.clone(), (cp.clone(), None));
        Ok(())
    }

    async fn save_claimed(&self, cp: &Checkpoint, claimant: &str, lease: Duration) -> Result<()> {
        check_id(&cp.id)?;
        let claim = Some((claimant.to_string(), lease_until(lease)));
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(cp.id.clone(), (cp.clone(), claim));
        Ok(())
    }

    async fn claim(&self, id: &str, claimant: &str, lease: Duration) -> Result<Claim> {
        let mut m = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some((cp, claim)) = m.get_mut(id) else { return Ok(Claim::NotFound) };
        if let Some((by, until)) = claim
            && *until > Utc::now()
            && by != claimant
        {
            return Ok(Claim::Held { by: by.clone(), until: *until });
        }
        *claim = Some((claimant.to_string(), lease_until(lease)));
        Ok(Claim::Claimed(Box::new(cp.clone())))
    }

    async fn release(&self, id: &str, claimant: &str) -> Result<()> {
        let mut m = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, claim)) = m.get_mut(id)
            && claim.as_ref().is_some_and(|(by, _)| by == claimant)
        {
            *claim = None;
        }
        Ok(())
    }

    async fn remove(&self, id: &str, claimant: &str) -> Result<()> {
        let mut m = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if m.get(id).is_some_and(|(_, c)| c.as_ref().is_some_and(|(by, _)| by == claimant)) {
            m.remove(id);
        }
        Ok(())
    }

    async fn get(&self, id: &str) -> Result<Option<Checkpoint>> {
        Ok(self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(id).map(|(c, _)| c.clone()))
    }

    async fn list(&self) -> Result<Vec<Checkpoint>> {
        let m = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<Checkpoint> = m.values().map(|(c, _)| c.clone()).collect();
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(out)
    }
}

/// The checkpoints of a directory (`car run`, `car-server`:
/// `$CAR_HOME/checkpoints`): `<id>.json` per checkpoint, `<id>.claim`
/// per claim, every change under an exclusive `flock` of `.lock`, files
/// replaced by rename (a crash never leaves half a checkpoint).
#[derive(Debug)]
pub struct FileCheckpoints {
    dir: PathBuf,
}

#[derive(Serialize, Deserialize)]
struct ClaimFile {
    by: String,
    until: DateTime<Utc>,
}

impl FileCheckpoints {
    /// Opens (creating) the directory.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        Ok(FileCheckpoints { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn locked<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        use rustix::fs::FlockOperation;
        let path = self.dir.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        rustix::fs::flock(&file, FlockOperation::LockExclusive).map_err(|e| io(&path, e.into()))?;
        f()
    }

    fn path(&self, id: &str, ext: &str) -> PathBuf {
        self.dir.join(format!("{id}.{ext}"))
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        std::fs::write(&tmp, bytes).map_err(|e| io(&tmp, e))?;
        if let Ok(f) = std::fs::File::open(&tmp) {
            let _ = f.sync_all();
        }
        std::fs::rename(&tmp, path).map_err(|e| io(path, e))
    }

    fn read(&self, id: &str) -> Result<Option<Checkpoint>> {
        let path = self.path(id, "json");
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| Error::runtime("checkpoint_unreadable", format!("checkpoint `{}`: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path, e)),
        }
    }

    fn claim_of(&self, id: &str) -> Option<ClaimFile> {
        std::fs::read(self.path(id, "claim")).ok().and_then(|b| serde_json::from_slice(&b).ok())
    }
}

#[async_trait]
impl CheckpointBackend for FileCheckpoints {
    async fn save(&self, cp: &Checkpoint) -> Result<()> {
        check_id(&cp.id)?;
        let bytes = serde_json::to_vec(cp).map_err(|e| Error::runtime("checkpoint_unwritable", e.to_string()))?;
        self.locked(|| {
            self.write(&self.path(&cp.id, "json"), &bytes)?;
            let _ = std::fs::remove_file(self.path(&cp.id, "claim"));
            Ok(())
        })
    }

    async fn save_claimed(&self, cp: &Checkpoint, claimant: &str, lease: Duration) -> Result<()> {
        check_id(&cp.id)?;
        let bytes = serde_json::to_vec(cp).map_err(|e| Error::runtime("checkpoint_unwritable", e.to_string()))?;
        let c = ClaimFile { by: claimant.to_string(), until: lease_until(lease) };
        let claim = serde_json::to_vec(&c).map_err(|e| Error::runtime("checkpoint_unwritable", e.to_string()))?;
        self.locked(|| {
            self.write(&self.path(&cp.id, "claim"), &claim)?;
            self.write(&self.path(&cp.id, "json"), &bytes)
        })
    }

    async fn claim(&self, id: &str, claimant: &str, lease: Duration) -> Result<Claim> {
        check_id(id)?;
        self.locked(|| {
            let Some(cp) = self.read(id)? else { return Ok(Claim::NotFound) };
            if let Some(c) = self.claim_of(id)
                && c.until > Utc::now()
                && c.by != claimant
            {
                return Ok(Claim::Held { by: c.by, until: c.until });
            }
            let c = ClaimFile { by: claimant.to_string(), until: lease_until(lease) };
            let bytes = serde_json::to_vec(&c).map_err(|e| Error::runtime("checkpoint_unwritable", e.to_string()))?;
            self.write(&self.path(id, "claim"), &bytes)?;
            Ok(Claim::Claimed(Box::new(cp)))
        })
    }

    async fn release(&self, id: &str, claimant: &str) -> Result<()> {
        check_id(id)?;
        self.locked(|| {
            if self.claim_of(id).is_some_and(|c| c.by == claimant) {
                let _ = std::fs::remove_file(self.path(id, "claim"));
            }
            Ok(())
        })
    }

    async fn remove(&self, id: &str, claimant: &str) -> Result<()> {
        check_id(id)?;
        self.locked(|| {
            if self.claim_of(id).is_some_and(|c| c.by == claimant) {
                let path = self.path(id, "json");
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(&path, e)),
                }
                let _ = std::fs::remove_file(self.path(id, "claim"));
            }
            Ok(())
        })
    }

    async fn get(&self, id: &str) -> Result<Option<Checkpoint>> {
        check_id(id)?;
        self.read(id)
    }

    async fn list(&self) -> Result<Vec<Checkpoint>> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io(&self.dir, e))?;
        let mut out = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_suffix(".json")
                && check_id(id).is_ok()
                && let Some(cp) = self.read(id)?
            {
                out.push(cp);
            }
        }
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(out)
    }
}
