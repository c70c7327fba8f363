//! The tier layer's approvals ledger as a host attaches it: the file, or the
//! file beside a shared store ([`SharedLedger`]).
//!
//! With a store (`car-server --store postgres://...`) a record written on
//! any daemon (`permission.approve`, `permission.reject`, an approved tier
//! escalation) is appended to the store first and then to the daemon's own
//! file, and every daemon reads the store's records through a mirror it
//! brings up to date before a proposal is decided
//! ([`SharedLedger::refresh`], called at the start of every run and by the
//! daemon before it decides an escalation). So an approval recorded on one
//! host admits the operation on every host, and a rejection refuses it on
//! every host.
//!
//! Fail closed: when the store cannot be read, the mirror is marked stale
//! and every tier decision refuses ("the approvals ledger cannot be read")
//! until a refresh succeeds; a record the store refused is not written
//! anywhere (the caller gets the error).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::approval::ledger::{ApprovalLedger, ApprovalRecord, JsonlLedger, LatestRecords};
use crate::error::Error;

use super::TierLedgerBackend;

/// The ledger the tier layer reads.
#[derive(Clone, Debug)]
pub enum TierLedger {
    /// A JSONL file (the document's `ledger_path`, a library host's ledger).
    File(Arc<JsonlLedger>),
    /// A host's file, shared through a store when it has one.
    Shared(Arc<SharedLedger>),
}

impl From<Arc<JsonlLedger>> for TierLedger {
    fn from(l: Arc<JsonlLedger>) -> Self {
        TierLedger::File(l)
    }
}

impl From<Arc<SharedLedger>> for TierLedger {
    fn from(l: Arc<SharedLedger>) -> Self {
        TierLedger::Shared(l)
    }
}

impl TierLedger {
    /// The latest record of every fingerprint (an error when the ledger
    /// cannot be read: the tier layer then refuses).
    pub fn latest_shared(&self) -> crate::Result<LatestRecords> {
        match self {
            TierLedger::File(l) => l.latest_shared(),
            TierLedger::Shared(l) => l.latest_shared(),
        }
    }

    /// The file (protected from the agent's tools).
    pub fn path(&self) -> &Path {
        match self {
            TierLedger::File(l) => l.path(),
            TierLedger::Shared(l) => l.local.path(),
        }
    }

    /// Whether records are shared through a store.
    pub fn is_shared(&self) -> bool {
        matches!(self, TierLedger::Shared(l) if l.is_shared())
    }

    /// Brings a shared ledger's mirror up to date (nothing for a file). A
    /// failure is also kept: reads refuse until a refresh succeeds.
    pub async fn refresh(&self) -> crate::Result<()> {
        match self {
            TierLedger::File(_) => Ok(()),
            TierLedger::Shared(l) => l.refresh().await,
        }
    }
}

/// What the mirror holds of the store.
#[derive(Default)]
struct Mirror {
    /// The store's position after the last record read.
    cursor: u64,
    /// The latest store record of each fingerprint.
    records: HashMap<String, ApprovalRecord>,
    /// Why the last refresh failed (reads refuse while set).
    failed: Option<String>,
    /// The merge last returned: the file's records it was built from and
    /// the mirror's generation then.
    merged: Option<(LatestRecords, u64, LatestRecords)>,
    /// Bumped by every refresh that read a record.
    generation: u64,
}

/// A host's ledger file, shared through a store when one is attached.
pub struct SharedLedger {
    local: Arc<JsonlLedger>,
    store: Option<Arc<dyn TierLedgerBackend>>,
    mirror: Mutex<Mirror>,
    /// One refresh at a time (a second waits and then finds little new).
    refreshing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for SharedLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLedger").field("path", &self.local.path()).field("shared", &self.store.is_some()).finish()
    }
}

fn poisoned() -> Error {
    Error::runtime("ledger_io_error", "approvals ledger mirror lock poisoned")
}

impl SharedLedger {
    /// The file alone (a daemon without a store).
    pub fn local(local: Arc<JsonlLedger>) -> Self {
        SharedLedger { local, store: None, mirror: Mutex::default(), refreshing: tokio::sync::Mutex::new(()) }
    }

    /// The file, shared through `store`. The mirror starts stale: nothing
    /// is decided on it before the first refresh.
    pub fn shared(local: Arc<JsonlLedger>, store: Arc<dyn TierLedgerBackend>) -> Self {
        let mirror = Mirror { failed: Some("not read yet".into()), ..Mirror::default() };
        SharedLedger { local, store: Some(store), mirror: Mutex::new(mirror), refreshing: tokio::sync::Mutex::new(()) }
    }

    /// The host's own file.
    pub fn file(&self) -> &Arc<JsonlLedger> {
        &self.local
    }

    /// Whether records are shared through a store.
    pub fn is_shared(&self) -> bool {
        self.store.is_some()
    }

    /// The latest record of every fingerprint: the file's, with the
    /// store's where it holds a later (or equally recent) one.
    pub fn latest_shared(&self) -> crate::Result<LatestRecords> {
        let local = self.local.latest_shared()?;
        if self.store.is_none() {
            return Ok(local);
        }
        let mut m = self.mirror.lock().map_err(|_| poisoned())?;
        if let Some(why) = &m.failed {
            return Err(Error::runtime(
                "store_unavailable",
                format!("the shared approvals ledger cannot be read ({why}); nothing is admitted on a stale copy"),
            ));
        }
        if let Some((from, generation, merged)) = &m.merged
            && Arc::ptr_eq(from, &local)
            && *generation == m.generation
        {
            return Ok(merged.clone());
        }
        let merged = if m.records.is_empty() {
            local.clone()
        } else {
            let mut all = HashMap::clone(&local);
            for (fp, r) in &m.records {
                if all.get(fp).is_none_or(|mine| mine.decided_at <= r.decided_at) {
                    all.insert(fp.clone(), r.clone());
                }
            }
            Arc::new(all)
        };
        m.merged = Some((local, m.generation, merged.clone()));
        Ok(merged)
    }

    /// Reads the store's records added since the last refresh. On failure
    /// the mirror is stale until the next refresh succeeds.
    pub async fn refresh(&self) -> crate::Result<()> {
        let Some(store) = &self.store else { return Ok(()) };
        let _one = self.refreshing.lock().await;
        let cursor = self.mirror.lock().map_err(|_| poisoned())?.cursor;
        let read = store.since(cursor).await;
        let mut m = self.mirror.lock().map_err(|_| poisoned())?;
        match read {
            Ok((records, next)) => {
                if !records.is_empty() {
                    m.generation += 1;
                }
                for r in records {
                    m.records.insert(r.fingerprint.clone(), r);
                }
                m.cursor = next.max(m.cursor);
                m.failed = None;
                Ok(())
            }
            Err(e) => {
                m.failed = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Records a verdict: in the store first (when shared; a refusal there
    /// writes nothing), then in the file, then in the mirror.
    pub async fn append(&self, record: &ApprovalRecord) -> crate::Result<()> {
        if let Some(store) = &self.store {
            store.append(record).await?;
        }
        ApprovalLedger::append(&*self.local, record)?;
        if self.store.is_some() {
            // Our own record back from the store (and any newer ones); a
            // failure here marks the mirror stale, which refuses.
            let _ = self.refresh().await;
        }
        Ok(())
    }
}

impl ApprovalLedger for SharedLedger {
    fn latest(&self, fingerprint: &str) -> crate::Result<Option<ApprovalRecord>> {
        Ok(self.latest_shared()?.get(fingerprint).cloned())
    }

    fn latest_all(&self) -> crate::Result<HashMap<String, ApprovalRecord>> {
        Ok(HashMap::clone(&*self.latest_shared()?))
    }

    /// The file only: a record for every host goes through
    /// [`SharedLedger::append`], which a synchronous caller cannot await.
    fn append(&self, record: &ApprovalRecord) -> crate::Result<()> {
        if self.store.is_some() {
            return Err(Error::runtime(
                "ledger_io_error",
                "a shared approvals ledger is appended through SharedLedger::append (async), so every host sees the record",
            ));
        }
        ApprovalLedger::append(&*self.local, record)
    }
}
